/* sft_train: epochs, micro-batches, accumulation, optimizer steps, checkpoint + state save
 * and exact resume for dice-sft (lib/sft_train.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "errmsg.h"
#include "sft_train.h"
#include "util.h"

static void plan_epoch(struct sft_train *s, int e)
{
	struct rng r;

	rng_seed(&r, s->seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(e + 1)));
	free(s->order);
	free(s->starts);
	s->order = xmalloc((s->d->n ? s->d->n : 1) * sizeof *s->order);
	sft_shuffle(s->order, s->d->n, &r);
	s->nbatch = sft_plan(s->d, s->order, s->batch_tokens, &s->starts);
}

static long steps_of(size_t nbatch, int ga)
{
	return (long)((nbatch + (size_t)ga - 1) / (size_t)ga);
}

int sft_train_init(struct sft_train *s, struct model *m, const struct sft_data *d,
                   const struct optim_opts *oo, double warmup, uint64_t seed,
                   size_t batch_tokens, int grad_accum, int epochs, long max_steps,
                   int recompute)
{
	struct optim_opts o = *oo;
	struct optim_param *par;
	size_t npar;

	memset(s, 0, sizeof *s);
	if (!d->n) {
		warn_msg("no training samples");
		return -1;
	}
	s->m = m;
	s->d = d;
	s->seed = seed;
	s->batch_tokens = batch_tokens;
	s->grad_accum = grad_accum;
	s->epochs = epochs;
	if (model_train_init(&s->t, m, recompute) < 0)
		return -1;
	for (int e = 0; e < epochs; e++) {
		plan_epoch(s, e);
		s->total_steps += steps_of(s->nbatch, grad_accum);
	}
	if (max_steps > 0 && max_steps < s->total_steps)
		s->total_steps = max_steps;
	o.total = (int)s->total_steps;
	o.warmup = warmup < 1.0 ? (int)ceil(warmup * (double)s->total_steps) : (int)warmup;
	par = optim_model_params(&s->t, &npar);
	optim_init(&s->op, m->ops, &o, par, npar, s->t.gbuf, s->t.ngrad);
	plan_epoch(s, 0);
	rng_seed(&s->noise, seed);
	return 0;
}

void sft_train_free(struct sft_train *s)
{
	optim_free(&s->op);
	model_train_free(&s->t);
	free(s->order);
	free(s->starts);
	memset(s, 0, sizeof *s);
}

int sft_train_set_bf16(struct sft_train *s)
{
	if (model_train_set_bf16(&s->t) < 0)
		return -1;
	optim_link_bf16(&s->op, &s->t);
	return 0;
}

int sft_train_more(const struct sft_train *s)
{
	return s->op.step < s->total_steps;
}

int sft_train_step(struct sft_train *s, struct sft_step *out)
{
	int k;

	memset(out, 0, sizeof *out);
	if (s->batch >= s->nbatch) {
		s->epoch++;
		s->batch = 0;
		plan_epoch(s, s->epoch);
	}
	k = s->nbatch - s->batch < (size_t)s->grad_accum ? (int)(s->nbatch - s->batch)
	                                                 : s->grad_accum;
	model_train_zero_grad(&s->t);
	model_train_op(&s->t, "zero grads");
	for (int i = 0; i < k; i++) {
		size_t mb = s->batch + (size_t)i, b0 = s->starts[mb], ns = s->starts[mb + 1] - b0;
		const struct sft_sample **smp = xmalloc(ns * sizeof *smp);
		struct train_batch tb;
		double loss;
		int rc;

		for (size_t j = 0; j < ns; j++) {
			smp[j] = &s->d->s[s->order[b0 + j]];
			out->tokens += (size_t)smp[j]->n;
			out->attn_pairs += (double)smp[j]->n * smp[j]->n;
		}
		sft_batch_build(&tb, smp, (int)ns, s->m->cfg.mask_token_id, (double)k, &s->noise,
		                NULL);
		model_train_op(&s->t, "batch build (host)");
		rc = model_train_batch(&s->t, &tb, &loss);
		sft_batch_free(&tb);
		free(smp);
		if (rc < 0)
			return -1;
		out->loss += loss;
	}
	s->batch += (size_t)k;
	out->micro = k;
	out->grad_norm = optim_step(&s->op, &out->lr);
	if (!s->op.lp)                  /* else the optimizer's pass rewrote the bf16 copies */
		model_train_refresh(&s->t);
	model_train_op(&s->t, "optimizer");
	model_train_mark(&s->t, MT_PROF_OPT);
	model_train_profile_print(&s->t);       /* the sums so far, when profiling */
	return 0;
}

int sft_train_save_model(struct model *m, const char *out_dir, const char *tok_dir,
                         const char *save, char *err, size_t errlen)
{
	struct model_config c = m->cfg;
	struct model_weights hw = m->w;
	struct ckpt_tensor *list;
	char *host = xmalloc(m->wbytes);
	size_t n;
	int rc;

	m->ops->to_host(host, m->wbuf, m->wbytes);
	hw.layers = xmalloc((size_t)c.num_layers * sizeof *hw.layers);
	memcpy(hw.layers, m->w.layers, (size_t)c.num_layers * sizeof *hw.layers);
	list = checkpoint_tensor_list(&c, &hw, &n);
	for (size_t i = 0; i < n; i++)
		list[i].ref->p = host + ((const char *)list[i].ref->p - (const char *)m->wbuf);
	c.dtype = DICE_F32;
	rc = checkpoint_write_save(out_dir, &c, &hw, tok_dir, save, err, errlen);
	free(list);
	free(hw.layers);
	free(host);
	return rc;
}

/* The options a state is written with, as its __metadata__ spells them. */
struct saved_opts {
	char lr[32], warm[16], accum[16], total[24], btok[24];
};

static void saved_opts(const struct sft_train *s, struct saved_opts *o)
{
	for (int digits = 6; digits <= 9; digits++) {  /* the fewest digits that read back */
		snprintf(o->lr, sizeof o->lr, "%.*g", digits, (double)s->op.o.lr);
		if (strtof(o->lr, NULL) == s->op.o.lr)
			break;
	}
	snprintf(o->warm, sizeof o->warm, "%d", s->op.o.warmup);
	snprintf(o->accum, sizeof o->accum, "%d", s->grad_accum);
	snprintf(o->total, sizeof o->total, "%ld", s->total_steps);
	snprintf(o->btok, sizeof o->btok, "%zu", s->batch_tokens);
}

int sft_train_save(struct sft_train *s, const char *out_dir, const char *tok_dir, char *err,
                   size_t errlen)
{
	char seed[24], epoch[16], batch[24], rngs[80], samples[24], save[32], *path;
	struct saved_opts o;
	int rc;

	snprintf(save, sizeof save, "step %d", s->op.step);
	if (sft_train_save_model(s->m, out_dir, tok_dir, save, err, errlen) < 0)
		return -1;
	snprintf(seed, sizeof seed, "%" PRIu64, s->seed);
	snprintf(epoch, sizeof epoch, "%d", s->epoch);
	snprintf(batch, sizeof batch, "%zu", s->batch);
	snprintf(rngs, sizeof rngs, "%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %016" PRIx64,
	         s->noise.s[0], s->noise.s[1], s->noise.s[2], s->noise.s[3]);
	snprintf(samples, sizeof samples, "%zu", s->d->n);
	saved_opts(s, &o);
	const char *meta[] = { "seed", seed, "epoch", epoch, "batch", batch, "noise_rng", rngs,
	                       "samples", samples, "total_steps", o.total, "batch_tokens", o.btok,
	                       "grad_accum", o.accum, "lr", o.lr, "schedule",
	                       optim_schedule_name(s->op.o.schedule), "warmup", o.warm,
	                       "save", save };
	path = xasprintf("%s/%s", out_dir, SFT_STATE_FILE);
	rc = optim_save(&s->op, path, meta, ARRAY_LEN(meta) / 2, err, errlen);
	free(path);
	return rc;
}

/* key as sft_train_save writes it: decimal digits alone, up to max (strtoull alone took
 * "-1" for 2^64 - 1, and wrapped a number past it) */
static int meta_u64(const struct safetensors *st, const char *key, uint64_t max, uint64_t *out,
                    char *err, size_t errlen)
{
	const char *v = safetensors_meta(st, key);
	char *end;

	if (v && *v && strspn(v, "0123456789") == strlen(v)) {
		errno = 0;
		*out = strtoull(v, &end, 10);
		if (!errno && *out <= max)
			return 0;
	}
	errmsg_set(err, errlen, "%s: no valid \"%s\" in __metadata__", st->path, key);
	return -1;
}

/* noise_rng as sft_train_save writes it: four words of 1 to 16 hex digits parted by one
 * space, nothing after them, not all zero (a generator that would only give zeros). 0 or -1 */
static int meta_rng(const char *v, struct rng *r)
{
	uint64_t w[4];

	for (int i = 0; v && i < 4; i++) {
		size_t n = strspn(v, "0123456789abcdefABCDEF");
		if (!n || n > 16 || (i < 3 ? v[n] != ' ' : v[n] != '\0'))
			return -1;
		w[i] = strtoull(v, NULL, 16);
		v += n + (i < 3);
	}
	if (!v || !(w[0] | w[1] | w[2] | w[3]))
		return -1;
	memcpy(r->s, w, sizeof w);
	return 0;
}

/* The options the state was written with (states before these were saved have none of the
 * keys: nothing to compare). A changed --batch-tokens plans other micro-batches, so the saved
 * position would name other samples: an error. A changed learning rate, schedule, warm-up,
 * accumulation or (for the cosine schedule) step count only changes the steps to come: one
 * warning naming them. */
static int resume_check_schedule(const struct sft_train *s, const struct safetensors *st,
                                 char *err, size_t errlen)
{
	const char *v;
	char said[512] = "";
	size_t len = 0;
	uint64_t u;

	if (safetensors_meta(st, "batch_tokens")) {
		if (meta_u64(st, "batch_tokens", UINT64_MAX, &u, err, errlen) < 0)
			return -1;
		if (u != s->batch_tokens) {
			errmsg_set(err, errlen, "%s: written with --batch-tokens %" PRIu64 ", now %zu "
			           "(the saved position counts its micro-batches)\nhint: resume with "
			           "--batch-tokens %" PRIu64, st->path, u, s->batch_tokens, u);
			return -1;
		}
	}
	struct saved_opts o;
	saved_opts(s, &o);
	const struct { const char *key, *opt, *now; } k[] = {
		{ "lr", "--lr", o.lr }, { "schedule", "--schedule", optim_schedule_name(s->op.o.schedule) },
		{ "warmup", "warm-up steps", o.warm }, { "grad_accum", "--grad-accum", o.accum },
		{ "total_steps", "total steps", o.total },
	};
	for (size_t i = 0; i < ARRAY_LEN(k); i++) {
		if (!(v = safetensors_meta(st, k[i].key)) ||
		    (!strcmp(k[i].key, "total_steps") && s->op.o.schedule != OPTIM_COSINE))
			continue;      /* only the cosine schedule depends on the step count */
		if (strcmp(v, k[i].now) && len < sizeof said)
			len += (size_t)snprintf(said + len, sizeof said - len, "%s%s %s (was %s)",
			                        len ? ", " : "", k[i].opt, k[i].now, v);
	}
	if (len)
		warn_msg("%s: resuming with %s: the steps from %d on follow the new setting",
		         st->path, said, s->op.step);
	return 0;
}

int sft_train_resume(struct sft_train *s, const char *dir, char *err, size_t errlen)
{
	struct safetensors st;
	char *path = xasprintf("%s/%s", dir, SFT_STATE_FILE);
	uint64_t seed, epoch, batch, samples;
	int rc = -1;

	if (safetensors_open(&st, path, err, errlen) < 0) {
		free(path);
		return -1;
	}
	free(path);
	/* the epoch a step count can reach (optim_load takes steps up to 2^30) */
	if (optim_load(&s->op, &st, err, errlen) < 0 ||
	    meta_u64(&st, "seed", UINT64_MAX, &seed, err, errlen) ||
	    meta_u64(&st, "epoch", 1u << 30, &epoch, err, errlen) ||
	    meta_u64(&st, "batch", SIZE_MAX, &batch, err, errlen) ||
	    meta_u64(&st, "samples", UINT64_MAX, &samples, err, errlen))
		goto out;
	if (meta_rng(safetensors_meta(&st, "noise_rng"), &s->noise) < 0) {
		errmsg_set(err, errlen, "%s: no valid \"noise_rng\" in __metadata__", st.path);
		goto out;
	}
	if (seed != s->seed || samples != s->d->n) {
		errmsg_set(err, errlen, "%s: written with --seed %" PRIu64 " and %" PRIu64 " samples, "
		           "now %" PRIu64 " and %zu\nhint: resume with the same data and options",
		           st.path, seed, samples, s->seed, s->d->n);
		goto out;
	}
	if (resume_check_schedule(s, &st, err, errlen) < 0 ||
	    checkpoint_check_save(dir, st.path, safetensors_meta(&st, "save"), err, errlen) < 0)
		goto out;
	s->epoch = (int)epoch;
	plan_epoch(s, s->epoch);
	if (batch > s->nbatch) {        /* the epoch's next micro-batch: at most its end */
		errmsg_set(err, errlen, "%s: \"batch\" %" PRIu64 " is past the %zu micro-batches of "
		           "epoch %d", st.path, batch, s->nbatch, s->epoch);
		goto out;
	}
	s->batch = (size_t)batch;
	rc = 0;
out:
	safetensors_close(&st);
	return rc;
}

static float *as_f32(const void *src, int n, int is_int, int is_u8)
{
	float *f = xmalloc((size_t)(n ? n : 1) * sizeof *f);
	for (int i = 0; i < n; i++)
		f[i] = is_u8 ? (float)((const uint8_t *)src)[i] :
		       is_int ? (float)((const int *)src)[i] : ((const float *)src)[i];
	return f;
}

int sft_batch_write(const char *path, const char *format, const struct train_batch *tb,
                    struct model_train *tr, double loss, const struct st_wtensor *extra,
                    size_t nextra, char *err, size_t errlen)
{
	struct model *m = tr->m;
	struct ckpt_tensor *gl;
	struct st_wtensor *t;
	float *cols[7];
	char **names, loss_s[40], block_s[16];
	size_t ng, k;
	int rc;

	float *gh = xmalloc(tr->ngrad * sizeof *gh);
	m->ops->to_host(gh, tr->gbuf, tr->ngrad * sizeof *gh);
	gl = checkpoint_tensor_list(&m->cfg, &tr->g, &ng);
	t = xcalloc(ng + 7 + nextra, sizeof *t);
	names = xcalloc(ng, sizeof *names);
	cols[0] = as_f32(tb->ids, tb->N, 1, 0);
	cols[1] = as_f32(tb->pos, tb->N, 1, 0);
	cols[2] = as_f32(tb->noisy, tb->N, 0, 1);
	cols[3] = as_f32(tb->target, tb->N, 1, 0);
	cols[4] = as_f32(tb->weight, tb->N, 0, 0);
	cols[5] = as_f32(tb->start, tb->nsamp, 1, 0);
	cols[6] = as_f32(tb->len, tb->nsamp, 1, 0);
	static const char *const cn[7] = { "ids", "pos", "noisy", "target", "weight", "start", "len" };
	for (int i = 0; i < 7; i++)
		t[i] = (struct st_wtensor){ .name = cn[i], .dtype = DICE_F32, .ndim = 1,
		                            .shape = { i < 5 ? tb->N : tb->nsamp }, .data = cols[i] };
	for (k = 0; k < nextra; k++)
		t[7 + k] = extra[k];
	for (size_t i = 0; i < ng; i++) {
		names[i] = xasprintf("grad.%s", gl[i].name);
		t[7 + k + i] = (struct st_wtensor){ .name = names[i], .dtype = DICE_F32,
		                                    .ndim = gl[i].ndim,
		                                    .data = gh + ((const float *)gl[i].ref->p - tr->gbuf),
		                                    .shape = { gl[i].shape[0], gl[i].shape[1] } };
	}
	snprintf(loss_s, sizeof loss_s, "%.17g", loss);
	snprintf(block_s, sizeof block_s, "%d", m->cfg.block_size);
	const char *meta[] = { "dice_format", format, "dice_format_version", "1",
	                       "loss", loss_s, "block", block_s };
	rc = safetensors_write(path, t, ng + 7 + nextra, meta, 4, err, errlen);
	for (int i = 0; i < 7; i++)
		free(cols[i]);
	for (size_t i = 0; i < ng; i++)
		free(names[i]);
	free(names);
	free(t);
	free(gl);
	free(gh);
	return rc;
}

int sft_train_dump(struct sft_train *s, const char *path, char *err, size_t errlen)
{
	struct rng r = s->noise;
	size_t mb = s->batch < s->nbatch ? s->batch : 0, b0, ns;
	const struct sft_sample **smp;
	struct train_batch tb;
	double loss;
	int rc;

	if (s->batch >= s->nbatch) {    /* the next step starts a new epoch */
		plan_epoch(s, s->epoch + 1);
		mb = 0;
	}
	b0 = s->starts[mb];
	ns = s->starts[mb + 1] - b0;
	smp = xmalloc(ns * sizeof *smp);
	for (size_t j = 0; j < ns; j++)
		smp[j] = &s->d->s[s->order[b0 + j]];
	sft_batch_build(&tb, smp, (int)ns, s->m->cfg.mask_token_id, 1.0, &r, NULL);
	if (s->batch >= s->nbatch)
		plan_epoch(s, s->epoch);
	free(smp);
	model_train_zero_grad(&s->t);
	if (model_train_batch(&s->t, &tb, &loss) < 0) {
		errmsg_set(err, errlen, "%s: the forward/backward failed", path);
		sft_batch_free(&tb);
		return -1;
	}
	rc = sft_batch_write(path, "dice-sft-batch", &tb, &s->t, loss, NULL, 0, err, errlen);
	sft_batch_free(&tb);
	model_train_zero_grad(&s->t);
	return rc;
}
