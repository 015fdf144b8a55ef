/* rl_run: the dice-rl step: rollouts with the sampler, rewards from a reward program over
 * JSONL, group advantages, TraceRL samples, pi_old, and AdamW updates (lib/rl_run.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rl_run.h"
#include "sft.h"
#include "sft_train.h"
#include "checkpoint.h"
#include "util.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- tasks */

static int level_of(const json_t *rec)
{
	const json_t *v = json_object_get(rec, "level");
	const json_t *c = json_object_get(rec, "cuke");

	if (!v && json_is_object(c))
		v = json_object_get(c, "level");
	if (json_is_integer(v))
		return (int)json_integer_value(v);
	if (json_is_string(v)) {
		long l;
		if (parse_long(json_string_value(v), INT_MIN, INT_MAX - 1, &l) == 0)
			return (int)l;
	}
	return INT_MAX;
}

void rl_tasks_add(struct rl_tasks *ts, json_t *rec, const char *where)
{
	if (ts->n == ts->cap) {
		ts->cap = ts->cap ? 2 * ts->cap : 64;
		ts->t = xrealloc(ts->t, ts->cap * sizeof *ts->t);
	}
	ts->t[ts->n++] = (struct rl_task){ rec, xstrdup(where), level_of(rec) };
}

static int cmp_level(const void *a, const void *b)
{
	const struct rl_task *x = a, *y = b;
	if (x->level != y->level)
		return x->level < y->level ? -1 : 1;
	return x->where < y->where ? -1 : x->where > y->where;   /* see below */
}

void rl_tasks_sort_level(struct rl_tasks *ts)
{
	/* stable: ties keep file order, carried by a temporary index in where's place */
	char **w = xmalloc((ts->n ? ts->n : 1) * sizeof *w);
	for (size_t i = 0; i < ts->n; i++) {
		w[i] = ts->t[i].where;
		ts->t[i].where = (char *)(uintptr_t)(i + 1);
	}
	qsort(ts->t, ts->n, sizeof *ts->t, cmp_level);
	for (size_t i = 0; i < ts->n; i++)
		ts->t[i].where = w[(uintptr_t)ts->t[i].where - 1];
	free(w);
}

void rl_tasks_free(struct rl_tasks *ts)
{
	for (size_t i = 0; i < ts->n; i++) {
		json_decref(ts->t[i].rec);
		free(ts->t[i].where);
	}
	free(ts->t);
	memset(ts, 0, sizeof *ts);
}

int rl_task_infill(const json_t *rec)
{
	return !json_object_get(rec, "ref") ||
	       (json_is_string(json_object_get(rec, "prefix")) &&
	        json_is_string(json_object_get(rec, "suffix")));
}

/* ---------------------------------------------------------------- runner */

int rl_runner_init(struct rl_runner *r, struct model *m, int recompute)
{
	r->m = m;
	return model_train_init(&r->t, m, recompute);
}

void rl_runner_free(struct rl_runner *r)
{
	model_train_free(&r->t);
}

/* prompt ids of a task for a stage: the end-to-end stage drops prefix/suffix */
static int task_prompt(struct rl_runner *r, const json_t *rec, int infill, int **ids, int *n,
                       char *err, size_t errlen)
{
	json_t *c = json_copy((json_t *)rec);
	int rc, save = r->sr->infill;

	if (json_is_array(json_object_get(c, "prompt_ids"))) {
		/* a pre-tokenised prompt is used as given */
		json_object_del(c, "ref");
		json_object_del(c, "prompt");
	}
	if (!infill) {
		json_object_del(c, "prefix");
		json_object_del(c, "suffix");
	}
	r->sr->infill = infill && json_object_get(c, "ref") != NULL;
	rc = sample_rec_prompt(r->sr, c, ids, n, err, errlen);
	r->sr->infill = save;
	json_decref(c);
	return rc;
}

static int record_reward(const json_t *out, int robust, float *reward, int *deceptive)
{
	const json_t *rw = json_object_get(out, "reward");
	const json_t *ev = json_object_get(out, "eval"), *dc = json_object_get(out, "deceive");
	int dec = json_is_true(json_object_get(ev, "deceptive")) ||
	          json_is_true(json_object_get(dc, "deceptive"));

	*deceptive = dec;
	if (json_is_number(rw))
		*reward = (float)json_number_value(rw);
	else
		*reward = json_is_true(json_object_get(ev, "correct")) ? 1.0f : 0.0f;
	if (robust && dec)
		*reward = 0.0f;
	return json_is_number(rw) || json_is_object(ev) ? 0 : -1;
}

/* Run the reward command over n records; rewards (n). 0, or -1 with a warning. */
static int run_rewards(struct rl_runner *r, json_t **recs, int n, float *rewards,
                       struct rl_metrics *mt)
{
	char path[] = "/tmp/dice-rl-XXXXXX";
	int fd = mkstemp(path), got = 0, rc = 0;
	FILE *in, *p;
	char *cmd, *line = NULL;
	size_t cap = 0;
	ssize_t len;

	if (fd < 0 || !(in = fdopen(fd, "w"))) {
		warn_msg("cannot create a temporary file:");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		json_dumpf(recs[i], in, JSON_COMPACT);
		fputc('\n', in);
	}
	if (fclose(in)) {
		warn_msg("%s:", path);
		unlink(path);
		return -1;
	}
	cmd = xasprintf("exec < '%s'; %s", path, r->reward_cmd);
	fflush(NULL);
	if (!(p = popen(cmd, "r"))) {
		warn_msg("cannot run the reward command:");
		free(cmd);
		unlink(path);
		return -1;
	}
	while ((len = getline(&line, &cap, p)) > 0) {
		json_error_t je;
		json_t *o;
		int dec;
		if (got >= n) {
			got++;
			continue;
		}
		if (!(o = json_loadb(line, (size_t)len, 0, &je)) || !json_is_object(o)) {
			warn_msg("reward command: output line %d: %s", got + 1,
			         o ? "not an object" : je.text);
			json_decref(o);
			rewards[got++] = 0.0f;
			mt->bad++;
			continue;
		}
		if (record_reward(o, r->robust, &rewards[got], &dec) < 0)
			mt->bad++;
		mt->deceptive += dec;
		got++;
		json_decref(o);
	}
	free(line);
	int st = pclose(p);
	if (got != n) {
		warn_msg("reward command '%s' wrote %d records for %d (exit status %d)",
		         r->reward_cmd, got, n, st);
		rc = -1;
	}
	free(cmd);
	unlink(path);
	return rc;
}

int rl_rollout(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
               int ntask, int group, int stage_infill, int step, float *rewards,
               struct sampler_result *res, int **prompts, int *plens, struct rl_metrics *mt)
{
	int n = ntask * group, rc = 0;
	struct sampler_request *rq = xcalloc((size_t)(n ? n : 1), sizeof *rq);
	json_t **recs = xcalloc((size_t)(n ? n : 1), sizeof *recs);
	char err[512];
	double t0 = now();

	for (int i = 0; i < ntask; i++) {
		int *ids, np;
		if (task_prompt(r, tasks[i]->rec, stage_infill, &ids, &np, err, sizeof err) < 0) {
			warn_msg("%s: %s", tasks[i]->where, err);
			rc = -1;
			ids = xcalloc(1, sizeof *ids), np = 0;
		}
		for (int g = 0; g < group; g++) {
			int k = i * group + g;
			prompts[k] = g ? prompts[i * group] : ids;
			plens[k] = np;
			rq[k] = (struct sampler_request){ ids, np, rng_u64(&r->rng) };
		}
	}
	if (rc < 0 || sampler_run(r->m, o, rq, n, res, NULL, NULL) < 0) {
		free(rq), free(recs);
		if (rc == 0)
			warn_msg("the model failed during the rollout");
		return -1;
	}
	mt->t_rollout = now() - t0;
	t0 = now();
	for (int k = 0; k < n; k++) {
		json_t *rec = json_deep_copy(tasks[k / group]->rec), *ids = json_array();
		char *text = sample_rec_text(r->sr, res[k].ids, res[k].n, o->mask_id);
		for (int j = 0; j < res[k].n; j++)
			json_array_append_new(ids, json_integer(res[k].ids[j]));
		json_object_set_new(rec, "completion", json_string(text ? text : ""));
		json_object_set_new(rec, "response_ids", ids);
		json_object_set_new(rec, "rl", json_pack("{s:i, s:i, s:i}", "step", step, "task",
		                                         k / group, "sample", k % group));
		recs[k] = rec;
		mt->tokens += res[k].n;
		free(text);
	}
	rc = run_rewards(r, recs, n, rewards, mt);
	for (int k = 0; k < n; k++)
		json_decref(recs[k]);
	mt->t_reward = now() - t0;
	free(rq), free(recs);
	return rc;
}

int rl_evaluate(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
                int ntask, int stage_infill, int step, double *exec)
{
	struct rl_metrics mt = { 0 };
	float *rw = xcalloc((size_t)(ntask ? ntask : 1), sizeof *rw);
	struct sampler_result *res = xcalloc((size_t)(ntask ? ntask : 1), sizeof *res);
	int **pr = xcalloc((size_t)(ntask ? ntask : 1), sizeof *pr);
	int *pl = xcalloc((size_t)(ntask ? ntask : 1), sizeof *pl);
	int rc = rl_rollout(r, o, tasks, ntask, 1, stage_infill, step, rw, res, pr, pl, &mt);
	double s = 0;

	for (int i = 0; i < ntask; i++) {
		s += rw[i];
		sampler_result_free(&res[i]);
		free(pr[i]);
	}
	*exec = ntask ? s / ntask : 0.0;
	free(rw), free(res), free(pr), free(pl);
	return rc;
}

static int dump_batch(struct rl_runner *r, const struct rl_batch *rb, const struct rl_loss_opts *lo)
{
	struct model *m = r->m;
	struct rl_stats st = { 0 };
	float eps = lo->eps, beta = lo->beta, scale = (float)lo->scale;
	char err[512];
	int N = rb->b.N, rc;
	size_t nw, nx = 0;
	struct model_weights w = m->w;
	struct ckpt_tensor *wl = checkpoint_tensor_list(&m->cfg, &w, &nw);
	char *host = xmalloc(m->wbytes), **names = xcalloc(nw ? nw : 1, sizeof *names);
	struct st_wtensor *x = xcalloc(nw + 6, sizeof *x);
	struct rl_loss_opts o = *lo;

	/* the weights the loss is taken with: the saved checkpoint has moved on by then */
	m->ops->to_host(host, m->wbuf, m->wbytes);
	x[nx++] = (struct st_wtensor){ .name = "adv", .dtype = DICE_F32, .ndim = 1, .shape = { N },
	                               .data = rb->adv };
	x[nx++] = (struct st_wtensor){ .name = "logp_old", .dtype = DICE_F32, .ndim = 1,
	                               .shape = { N }, .data = rb->logp_old };
	x[nx++] = (struct st_wtensor){ .name = "eps", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &eps };
	x[nx++] = (struct st_wtensor){ .name = "beta", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &beta };
	x[nx++] = (struct st_wtensor){ .name = "scale", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &scale };
	if (rb->logp_ref)
		x[nx++] = (struct st_wtensor){ .name = "logp_ref", .dtype = DICE_F32, .ndim = 1,
		                               .shape = { N }, .data = rb->logp_ref };
	for (size_t i = 0; i < nw; i++) {
		names[i] = xasprintf("w.%s", wl[i].name);
		x[nx++] = (struct st_wtensor){ .name = names[i], .dtype = DICE_F32, .ndim = wl[i].ndim,
		                               .shape = { wl[i].shape[0], wl[i].shape[1] },
		                               .data = host + ((const char *)wl[i].ref->p -
		                                               (const char *)m->wbuf) };
	}
	o.scale = scale;                 /* the value written */
	model_train_zero_grad(&r->t);
	rc = rl_batch_loss(&r->t, rb, &o, 1, &st);
	if (rc == 0 && (rc = sft_batch_write(r->dump, "dice-rl-batch", &rb->b, &r->t, st.loss, x,
	                                     nx, err, sizeof err)) < 0)
		warn_msg("%s", err);
	model_train_zero_grad(&r->t);
	for (size_t i = 0; i < nw; i++)
		free(names[i]);
	free(names), free(x), free(host), free(wl);   /* w.layers is m->w.layers: read only */
	return rc;
}

int rl_step(struct rl_runner *r, struct rl_task *const *tasks, int ntask, int stage_infill,
            int step, struct rl_metrics *mt)
{
	int G = r->group, n = ntask * G, rc = 0;
	float *rw = xcalloc((size_t)n, sizeof *rw), *adv = xcalloc((size_t)n, sizeof *adv);
	uint8_t *keep = xcalloc((size_t)ntask, 1);
	struct sampler_result *res = xcalloc((size_t)n, sizeof *res);
	int **pr = xcalloc((size_t)n, sizeof *pr), *pl = xcalloc((size_t)n, sizeof *pl);
	struct rl_trace *tr = xcalloc((size_t)n, sizeof *tr);
	struct rl_item *items = NULL;
	size_t nitems = 0, cap = 0, *order = NULL;
	struct rl_batch *bs = NULL;
	int nb = 0, L1 = 1;
	double t0;

	memset(mt, 0, sizeof *mt);
	mt->tasks = ntask;
	mt->responses = n;
	if (rl_rollout(r, &r->so, tasks, ntask, G, stage_infill, step, rw, res, pr, pl, mt) < 0) {
		rc = -1;
		goto out;
	}
	for (int k = 0; k < n; k++)
		mt->reward += rw[k];
	mt->reward /= n ? n : 1;
	mt->skipped = rl_advantages(rw, ntask, G, adv, keep);

	/* samples of the kept tasks, shuffled */
	t0 = now();
	for (int k = 0; k < n; k++) {
		if (!keep[k / G])
			continue;
		tr[k] = (struct rl_trace){ pr[k], pl[k], res[k].ids, res[k].step, res[k].n, adv[k] };
		if (res[k].n > L1)
			L1 = res[k].n;
		for (int rd = 0, nr = rl_rounds(&tr[k], r->so.block); rd < nr; rd++) {
			if (nitems == cap) {
				cap = cap ? 2 * cap : 256;
				items = xrealloc(items, cap * sizeof *items);
			}
			items[nitems++] = (struct rl_item){ &tr[k], rd };
		}
	}
	order = xmalloc((nitems ? nitems : 1) * sizeof *order);
	sft_shuffle(order, nitems, &r->rng);
	struct rl_item *mb = xmalloc((size_t)(r->micro ? r->micro : 1) * sizeof *mb);
	nb = (int)((nitems + (size_t)r->micro - 1) / (size_t)r->micro);
	bs = xcalloc((size_t)(nb ? nb : 1), sizeof *bs);
	for (int b = 0; b < nb; b++) {
		int ns = 0;
		for (size_t i = (size_t)b * r->micro; i < nitems && ns < r->micro; i++)
			mb[ns++] = items[order[i]];
		rl_batch_build(&bs[b], mb, ns, r->so.block, r->so.mask_id, r->pad_id);
		/* pi_old: the weights before this step's first update */
		if (rl_batch_logp(&r->t, &bs[b], bs[b].logp_old) < 0)
			rc = -1;
		if (r->ref) {
			bs[b].logp_ref = xcalloc((size_t)(bs[b].b.N ? bs[b].b.N : 1), sizeof(float));
			if (rl_batch_logp(r->ref, &bs[b], bs[b].logp_ref) < 0)
				rc = -1;
		}
	}
	free(mb);
	mt->samples = (int)nitems;

	/* updates: fresh AdamW state every step */
	if (rc == 0 && nitems) {
		struct optim op;
		size_t np;
		struct optim_param *par = optim_model_params(&r->t, &np);
		struct rl_stats st = { 0 };
		int per = (r->update + r->micro - 1) / r->micro;    /* micro-batches per update */
		optim_init(&op, r->t.ops, &r->oo, par, np, r->t.gbuf, r->t.ngrad);
		for (int b0 = 0; b0 < nb && rc == 0; b0 += per) {
			int b1 = b0 + per < nb ? b0 + per : nb, nsamp = 0;
			for (int b = b0; b < b1; b++)
				nsamp += bs[b].b.nsamp;
			struct rl_loss_opts lo = r->lo;
			lo.scale = 1.0 / ((double)nsamp * L1);
			if (r->dump && b1 == nb && dump_batch(r, &bs[b0], &lo) < 0)
				rc = -1;
			model_train_zero_grad(&r->t);
			for (int b = b0; b < b1 && rc == 0; b++)
				if (rl_batch_loss(&r->t, &bs[b], &lo, 1, &st) < 0)
					rc = -1;
			if (rc == 0)
				mt->grad_norm = optim_step(&op, NULL);
			mt->updates++;
		}
		optim_free(&op);
		mt->loss = mt->updates ? st.loss / mt->updates : 0.0;
		mt->kl = st.targets ? st.kl / (double)st.targets : 0.0;
		mt->clipfrac = st.targets ? (double)st.clipped / (double)st.targets : 0.0;
	}
	mt->t_update = now() - t0;
out:
	for (int b = 0; b < nb; b++)
		rl_batch_free(&bs[b]);
	for (int k = 0; k < n; k++) {
		sampler_result_free(&res[k]);
		if (k % G == 0)
			free(pr[k]);
	}
	free(bs), free(order), free(items), free(tr), free(pr), free(pl);
	free(rw), free(adv), free(keep), free(res);
	return rc;
}
