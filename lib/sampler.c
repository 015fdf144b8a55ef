/* sampler: block-diffusion decoding (SPEC §2): the per-position draw, the commit rules, and
 * the scheduler that runs many requests through shared forwards (see sampler.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "choose.h"
#include "rng.h"
#include "sampler.h"
#include "util.h"

void sampler_opts_default(struct sampler_opts *o)
{
	memset(o, 0, sizeof *o);
	o->decoding = SAMPLER_STATIC;
	o->block = 4;
	o->steps = 4;
	o->threshold = 0.9f;
	o->temperature = 1.0f;
	o->top_k = 0;
	o->top_p = 1.0f;
	o->max_tokens = 4096;
	o->mask_id = 151669;
	o->max_active = 1;
}

int sampler_preset(struct sampler_opts *o, const char *name)
{
	if (!strcmp(name, "eval")) {
		o->decoding = SAMPLER_STATIC;
		o->top_k = 1;
	} else if (!strcmp(name, "rl")) {
		o->decoding = SAMPLER_DYNAMIC;
		o->threshold = 0.9f;
		o->top_k = 0;
	} else {
		return -1;
	}
	o->temperature = 1.0f;
	o->top_p = 1.0f;
	return 0;
}

static const char *const decoding_names[] = { "static", "dynamic", "sequential" };

const char *sampler_decoding_name(enum sampler_decoding d)
{
	return decoding_names[d];
}

int sampler_decoding_parse(const char *s, enum sampler_decoding *d)
{
	for (size_t i = 0; i < ARRAY_LEN(decoding_names); i++) {
		if (!strcmp(s, decoding_names[i])) {
			*d = (enum sampler_decoding)i;
			return 0;
		}
	}
	return -1;
}

void sampler_result_free(struct sampler_result *r)
{
	free(r->ids);
	free(r->step);
	free(r->logp);
	memset(r, 0, sizeof *r);
}

int sampler_quota(int block, int steps, int s)
{
	return block / steps + (s < block % steps);
}

/* ---------------------------------------------------------------- one position */

int sampler_choose(enum sampler_decoding d, int n, const uint8_t *masked, const float *conf,
                   int quota, float threshold, uint8_t *commit)
{
	return dice_choose((int)d, n, masked, conf, quota, threshold, commit);
}

/* ---------------------------------------------------------------- the scheduler */

enum phase { PH_PREFILL, PH_DECODE };

struct slot {
	int req;                     /* request index, -1 when free */
	int *x;                      /* (len) prompt then generated / mask ids */
	uint8_t *msk;                /* (len) 1 = still masked */
	int *step;                   /* (len) committing step */
	float *logp;                 /* (len) */
	int len, P, nb, b, it, gstep, forwards, stopped;
	enum phase ph;
	int action_save;             /* this round's forward is the save pass */
	int pending;                 /* block b-1 is finished, its K/V not stored yet */
	struct kvcache kv;
	struct rng rng;
	/* device mode (see sampler_run): the sequence on the backend, one allocation of dcap
	 * positions: x_d (ids), step_d, conf_d (probability of each commit), msk_d; and what the
	 * host knows ahead of the results */
	void *dbuf;
	int dcap;
	int *x_d, *step_d;
	float *conf_d;
	uint8_t *msk_d;
	int nm;                      /* masked positions of block b once the queued steps commit */
	int ending;                  /* its last forward is queued: it waits for the results */
	double t_start;              /* now_ms() when its request took the slot */
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int blocks_for(const struct sampler_opts *o, int plen)
{
	return (plen + o->max_tokens + o->block - 1) / o->block;
}

static int active_slots(const struct sampler_opts *o, int nreq)
{
	int a = o->max_active > 0 ? o->max_active : 1;
	return a < nreq ? a : nreq > 0 ? nreq : 1;
}

size_t sampler_kv_bytes(const struct model *m, const struct sampler_opts *o, int plen, int nreq)
{
	return (size_t)active_slots(o, nreq) * kvcache_bytes(&m->cfg, blocks_for(o, plen) * o->block);
}

/* -1 where the request's KV cache cannot be had (the backend is full; said) */
static int slot_start(struct slot *s, const struct model *m, const struct sampler_opts *o,
                      const struct sampler_request *r, int idx)
{
	int len = blocks_for(o, r->plen) * o->block;

	if (s->kv.cap < len) {
		kvcache_free(&s->kv, m);
		if (kvcache_init(&s->kv, m, len) < 0) {
			warn_msg("sampler: no memory for the KV cache of a sequence of %d positions "
			         "(%zu bytes)", len, kvcache_bytes(&m->cfg, len));
			return -1;
		}
	}
	s->req = idx;
	s->t_start = now_ms();
	s->len = len;
	s->P = r->plen;
	s->nb = len / o->block;
	s->x = xrealloc(s->x, (size_t)len * sizeof *s->x);
	s->msk = xrealloc(s->msk, (size_t)len);
	s->step = xrealloc(s->step, (size_t)len * sizeof *s->step);
	s->logp = xrealloc(s->logp, (size_t)len * sizeof *s->logp);
	memcpy(s->x, r->prompt, (size_t)r->plen * sizeof *s->x);
	for (int i = r->plen; i < len; i++)
		s->x[i] = o->mask_id;
	memset(s->msk, 0, (size_t)r->plen);
	memset(s->msk + r->plen, 1, (size_t)(len - r->plen));
	memset(s->step, 0, (size_t)len * sizeof *s->step);
	s->b = r->plen / o->block;
	s->ph = s->b > 0 ? PH_PREFILL : PH_DECODE;
	s->it = s->gstep = s->forwards = s->stopped = s->pending = 0;
	s->kv.len = 0;
	rng_seed(&s->rng, r->seed);
	s->nm = (s->b + 1) * o->block - r->plen;
	s->ending = 0;
	return 0;
}

static size_t dev_bytes(int cap)
{
	return (size_t)cap * (3 * sizeof(int) + 1);
}

/* device mode: the slot's arrays on the backend, ids and masks as slot_start left them */
static void slot_upload(struct slot *s, const struct model *m)
{
	if (s->dcap < s->len) {
		m->ops->free(s->dbuf);
		s->dcap = s->len;
		s->dbuf = m->ops->alloc(dev_bytes(s->dcap));
		s->x_d = s->dbuf;
		s->step_d = s->x_d + s->dcap;
		s->conf_d = (float *)(s->step_d + s->dcap);
		s->msk_d = (uint8_t *)(s->conf_d + s->dcap);
	}
	m->ops->to_device(s->x_d, s->x, (size_t)s->len * sizeof *s->x);
	m->ops->to_device(s->msk_d, s->msk, (size_t)s->len);
}

/* device mode: the generated region back from the backend (a sync), log-probabilities from
 * the committed probabilities as slot_denoise takes them */
static void slot_download(struct slot *s, const struct model *m)
{
	int n = s->len - s->P;
	char *h = xmalloc(dev_bytes(s->dcap));
	const int *x = (const int *)h, *step = x + s->dcap;
	const float *conf = (const float *)(step + s->dcap);
	const uint8_t *msk = (const uint8_t *)(conf + s->dcap);

	m->ops->to_host(h, s->dbuf, dev_bytes(s->dcap));
	memcpy(s->x + s->P, x + s->P, (size_t)n * sizeof *x);
	memcpy(s->step + s->P, step + s->P, (size_t)n * sizeof *step);
	memcpy(s->msk + s->P, msk + s->P, (size_t)n);
	for (int i = s->P; i < s->len; i++)
		s->logp[i] = msk[i] ? 0.0f : logf(conf[i]);
	free(h);
}

static int is_stop(const struct sampler_opts *o, int id)
{
	for (int i = 0; i < o->nstop; i++)
		if (o->stop[i] == id)
			return 1;
	return 0;
}

static void slot_finish(struct slot *s, const struct sampler_opts *o, struct sampler_result *r,
                        double ms)
{
	int n = s->len - s->P;

	if (n > o->max_tokens)
		n = o->max_tokens;
	for (int i = 0; i < n; i++) {
		if (s->msk[s->P + i]) {         /* not reached (stopped before) */
			n = i;
			break;
		}
		if (is_stop(o, s->x[s->P + i])) {
			n = i + 1;
			s->stopped = 1;
			break;
		}
	}
	r->n = n;
	r->ids = xmalloc((size_t)(n ? n : 1) * sizeof *r->ids);
	r->step = xmalloc((size_t)(n ? n : 1) * sizeof *r->step);
	r->logp = xmalloc((size_t)(n ? n : 1) * sizeof *r->logp);
	memcpy(r->ids, s->x + s->P, (size_t)n * sizeof *r->ids);
	memcpy(r->step, s->step + s->P, (size_t)n * sizeof *r->step);
	memcpy(r->logp, s->logp + s->P, (size_t)n * sizeof *r->logp);
	r->forwards = s->forwards;
	r->steps = s->gstep;
	r->stopped = s->stopped;
	r->ms = ms;
	s->req = -1;
}

/* after the save pass of block b: is the request done? */
static int block_ends_request(const struct slot *s, const struct sampler_opts *o, int b)
{
	int end = (b + 1) * o->block;

	if (b + 1 >= s->nb)
		return 1;
	for (int i = s->P; i < end; i++)
		if (is_stop(o, s->x[i]))
			return 1;
	return 0;
}

/* the positions step s->it of the block commits, nm masked: the quota, all after `steps` */
static int step_quota(const struct slot *s, const struct sampler_opts *o, int nm)
{
	return s->it >= o->steps ? nm : sampler_quota(o->block, o->steps, s->it);
}

/* on to the next block, whose K/V the first forward stores (pending) or a pass stored */
static void next_block(struct slot *s, const struct sampler_opts *o, int pending)
{
	s->b++;
	s->it = 0;
	s->pending = pending;
	s->nm = o->block;
}

/* device mode: the last forward of block b queued: on to the next block (pending as
 * next_block), or, after the last one, the request waits for the results (ending) */
static void dev_block_queued(struct slot *s, const struct sampler_opts *o, int pending)
{
	if (s->b + 1 >= s->nb)
		s->ending = 1;
	else
		next_block(s, o, pending);
}

/* commit the drawn candidates of the slot's block: tok/prob hold, in position order, the draws
 * of its masked positions (the backend's sample op); returns how many draws it took */
static int slot_denoise(struct slot *s, const struct sampler_opts *o, const int *tok,
                         const float *prob)
{
	int B = o->block, bs = s->b * B, quota, nm = 0;
	int cand[B];
	float conf[B];
	uint8_t commit[B];

	s->gstep++;
	for (int j = 0; j < B; j++) {
		conf[j] = 0;
		cand[j] = s->x[bs + j];
		if (!s->msk[bs + j])
			continue;
		cand[j] = tok[nm];
		conf[j] = prob[nm++];
	}
	quota = step_quota(s, o, nm);
	sampler_choose(o->decoding, B, s->msk + bs, conf, quota, o->threshold, commit);
	for (int j = 0; j < B; j++) {
		if (!commit[j])
			continue;
		s->x[bs + j] = cand[j];
		s->msk[bs + j] = 0;
		s->step[bs + j] = s->gstep;
		s->logp[bs + j] = logf(conf[j]);
	}
	s->it++;
	return nm;
}

static int block_has_mask(const struct slot *s, const struct sampler_opts *o)
{
	for (int j = 0; j < o->block; j++)
		if (s->msk[s->b * o->block + j])
			return 1;
	return 0;
}

/* DICE_SAMPLER_TIMES=1: the run's wall time by phase, summed over its rounds, printed to
 * stderr at its end: the schedule (slots started, sequences packed), model_forward (the host's
 * checks and launches, and its wait for the device), the draws' inputs, the sample op (its
 * uploads, kernel, wait and copies back) and the commits */
enum { ST_SCHED, ST_FORWARD, ST_DRAWS, ST_SAMPLE, ST_COMMIT, ST_N };
static const char *const st_names[ST_N] = { "schedule", "model_forward", "draw inputs",
                                            "sample op", "commits" };

static void st_lap(double *st, int phase, double *t)
{
	double now;

	if (!st)
		return;
	now = now_ms();
	st[phase] += now - *t;
	*t = now;
}

/* The decode rows of a round (DICE_SAMPLER_ROWS=N: N, 0 no cap). Where every block takes
 * `steps` denoising forwards (static, sequential decoding), A sequences whose blocks are spread
 * evenly over the rounds give A B (steps + 1) / (steps + separate_save) rows a round, the save
 * rows included. After the staggered prefills they are not (e.g. 36, 36, 28, 28 sequences of
 * 128 saving in turn: 656 rows a round, then 624), and a round past a multiple of the
 * products' row tiles pays for a whole tile more. With a cap at that mean, rounded up to 128
 * rows, the last sequences that would save a block (the rows past the mean) wait a round,
 * which moves them to the next round's group, and the groups even out within a few rounds; a
 * request's tokens do not depend on its batch, so the results are the same. Dynamic
 * decoding takes a varying number of forwards a block: no cap. */
static int decode_cap(const struct sampler_opts *o, int A)
{
	const char *e = getenv("DICE_SAMPLER_ROWS");
	long n, d = o->steps + (o->separate_save != 0);

	if (e && *e)
		return atoi(e) > 0 ? atoi(e) : INT_MAX;
	if (o->decoding == SAMPLER_DYNAMIC || o->steps < 1)
		return INT_MAX;
	n = ((long)A * o->block * (o->steps + 1) + d - 1) / d;
	return n > INT_MAX - 128 ? INT_MAX : (int)((n + 127) / 128 * 128);
}

/* Device mode (DICE_SAMPLER_DEVICE: 0 off, 1 on wherever it applies, unset on where the
 * backend queues its work): static and sequential decoding commit a fixed number of
 * positions a step (the quota, capped by the masks left), so the host knows every forward's
 * shape before the draws are made. The draws and commits then run on the backend
 * (ops->denoise) into the slot's arrays there, the next forward reads its ids from them
 * (model_seq.ids_dev), and the host queues round r + 1 before it waits for round r's results
 * (the ids of the blocks it finished, ops->fetch, where it finished one): the device never
 * waits for the host between forwards. A block's stop check waits for the round that
 * finished it, so with the save fused a stopped request's slot has one more forward queued,
 * whose results are dropped (its counts are those of the round that finished it). Where it
 * applies: no on_logits hook, blocks of at most 32, every decoding round a replayed forward
 * (at most MODEL_GRAPH_ROWS rows and MODEL_GRAPH_SEQS sequences: its logits are whole
 * blocks), and a backend that draws the filters itself and queues its work (CUDA;
 * DICE_SAMPLER_DEVICE=1 the CPU too). The results are those of the host's commits, bitwise. */
int sampler_device_mode(const struct model *m, const struct sampler_opts *o, int nreq)
{
	int A = active_slots(o, nreq);
	const char *e = getenv("DICE_SAMPLER_DEVICE");

	/* by default only where the backend queues its work (replayed graphs: CUDA); a backend
	 * that computes as it is called (the CPU) would only spend a forward more on each
	 * stopped request: there DICE_SAMPLER_DEVICE=1 (the tests) */
	if ((e && !strcmp(e, "0")) || (!(e && !strcmp(e, "1")) && !m->ops->replay) ||
	    o->on_logits || o->decoding == SAMPLER_DYNAMIC ||
	    o->block > 32 || A * 2 * o->block > MODEL_GRAPH_ROWS || A > MODEL_GRAPH_SEQS ||
	    !m->ops->denoise || !m->ops->fetch)
		return 0;
	return m->ops->denoise(NULL, m->cfg.vocab_size, NULL, 0, o->block, NULL, 0, NULL,
	                       (int)o->decoding, o->threshold, o->temperature, o->top_k,
	                       o->top_p) == 0;
}

/* device mode: a queued round's denoised blocks, whose ids come back with ticket (0: none,
 * where no block ended) */
struct dround {
	long ticket;
	int n;
	int *ids;                    /* (n, block) host, with a ticket */
	struct dentry {
		int slot, req, blk;
		int ends;            /* the round finished block blk */
		int fw, gs;          /* the slot's forwards and steps after the round */
	} *e;
};

/* the next unit of progress of a run: a request finished */
static void request_done(struct slot *s, const struct sampler_opts *o,
                         struct sampler_result *res, int *done, int nreq,
                         sampler_progress_fn progress, void *arg)
{
	slot_finish(s, o, &res[s->req], now_ms() - s->t_start);
	if (progress)
		progress(arg, ++*done, nreq);
}

/* device mode: the oldest queued round's results in (dr[dhead - *dq], 2 in the ring), the
 * blocks it finished checked for stop ids */
static void dround_take(struct dround *dr, int dhead, int *dq, struct slot *sl,
                        const struct model *m, const struct sampler_opts *o,
                        struct sampler_result *res, int *done, int nreq,
                        sampler_progress_fn progress, void *arg)
{
	struct dround *r = &dr[(dhead - (*dq)--) & 1];
	int B = o->block;

	if (!r->ticket) {                       /* no block ended: nothing to check */
		r->n = 0;
		return;
	}
	m->ops->fetch_wait(r->ticket);
	for (int i = 0; i < r->n; i++) {
		const struct dentry *e = &r->e[i];
		struct slot *s = &sl[e->slot];
		if (s->req != e->req || !e->ends)   /* (finished since, maybe started again) */
			continue;
		memcpy(s->x + e->blk * B, r->ids + i * B, (size_t)B * sizeof *s->x);
		if (!block_ends_request(s, o, e->blk))
			continue;
		s->forwards = e->fw + (o->separate_save != 0);
		s->gstep = e->gs;
		slot_download(s, m);
		request_done(s, o, res, done, nreq, progress, arg);
	}
	r->n = 0;
}

int sampler_run(struct model *m, const struct sampler_opts *o, const struct sampler_request *req,
                int nreq, struct sampler_result *res, sampler_progress_fn progress, void *arg)
{
	int A = active_slots(o, nreq), V = m->cfg.vocab_size, B = o->block;
	int max_rows = o->max_rows > 0 ? o->max_rows : 8192, next = 0, done = 0, ret = 0;
	struct slot *sl = xcalloc((size_t)A, sizeof *sl);
	struct model_seq *seq = xcalloc((size_t)A, sizeof *seq);
	int *who = xcalloc((size_t)A, sizeof *who);
	/* host logits only for the on_logits hook; the draws of one forward: row, uniform, result */
	float *logits = o->on_logits ? xmalloc((size_t)A * B * V * sizeof *logits) : NULL;
	int *srow = xmalloc((size_t)A * B * sizeof *srow), *tok = xmalloc((size_t)A * B * sizeof *tok);
	double *u = xmalloc((size_t)A * B * sizeof *u);
	float *prob = xmalloc((size_t)A * B * sizeof *prob);
	double t0 = now_ms(), st_t = t0, st_acc[ST_N] = { 0 };
	const char *st_env = getenv("DICE_SAMPLER_TIMES");
	double *st = st_env && strcmp(st_env, "0") ? st_acc : NULL;
	int rounds = 0, lazy = m->lazy;
	const char *sync_env = getenv("DICE_SAMPLER_SYNC");
	/* device mode: the rounds queued (at most two), the denoise op's arguments and output */
	int dev = sampler_device_mode(m, o, nreq), dq = 0, dhead = 0;   /* queued: rounds dhead - dq .. */
	struct dround dr[2];
	struct denoise_seq *ds = dev ? xmalloc((size_t)A * sizeof *ds) : NULL;
	int *out_d = dev ? m->ops->alloc((size_t)A * B * sizeof *out_d) : NULL;
	long last_ticket = 0;

	for (int k = 0; k < 2; k++) {
		dr[k].n = 0;
		dr[k].ids = dev ? xmalloc((size_t)A * B * sizeof *dr[k].ids) : NULL;
		dr[k].e = dev ? xmalloc((size_t)A * sizeof *dr[k].e) : NULL;
	}
	/* the forward's launches return at once, and the host prepares the draws' inputs and
	 * queues the sample op behind it; the sample op's wait is the round's one sync
	 * (DICE_SAMPLER_SYNC=1: a sync after each forward too, as before) */
	m->lazy = !(sync_env && strcmp(sync_env, "0"));
	/* DICE_SAMPLER_LOGITS=all: the logits of every row of a denoised block, as before */
	const char *lg_env = getenv("DICE_SAMPLER_LOGITS");
	int skip_ok = !dev && !o->on_logits && B <= 32 && !(lg_env && !strcmp(lg_env, "all"));
	int dcap = decode_cap(o, A);
	m->cfg.block_size = B;
	model_pack_for(m, (long)A * 2 * B);     /* a decoding forward's rows, at most */
	for (int a = 0; a < A; a++)
		sl[a].req = -1;
	while (done < nreq) {
		int ns = 0, rows = 0, drows = 0;

		for (int a = 0; a < A; a++) {
			struct slot *s = &sl[a];
			while (s->req < 0 && next < nreq) {
				memset(&res[next], 0, sizeof res[next]);
				if (slot_start(s, m, o, &req[next], next) < 0) {
					ret = -1;
					break;
				}
				next++;
				if (o->max_tokens <= 0) {   /* nothing to generate */
					request_done(s, o, res, &done, nreq, progress, arg);
				} else if (dev) {
					slot_upload(s, m);
				}
			}
			if (ret < 0)            /* no KV cache for the next request */
				break;
			if (s->req < 0 || s->ending)
				continue;
			struct model_seq q = { .kv = &s->kv };
			if (s->ph == PH_PREFILL) {
				q.ids = s->x, q.T = s->b * B, q.store = 1;
			} else if (s->pending) {        /* store block b-1, denoise block b */
				s->action_save = 0;
				q.ids = s->x + (s->b - 1) * B, q.T = 2 * B;
				q.commit_rows = B, q.logits = 1, q.logits_from = B;
			} else {
				s->action_save = dev ? !s->nm : !block_has_mask(s, o);
				q.ids = s->x + s->b * B, q.T = B;
				q.store = s->action_save, q.logits = !s->action_save;
			}
			if (dev && s->ph == PH_DECODE)
				q.ids_dev = s->x_d + (q.ids - s->x);
			if (rows && rows + q.T > max_rows)
				continue;
			rows += q.T;
			drows += s->ph == PH_DECODE ? q.T : 0;
			who[ns] = a;
			seq[ns++] = q;
		}
		if (ret < 0)
			break;
		/* past the decode cap: the last sequences that would save a block wait a round */
		for (int i = ns - 1; i > 0 && drows > dcap; i--) {
			if (sl[who[i]].ph != PH_DECODE || !sl[who[i]].pending)
				continue;
			rows -= seq[i].T, drows -= seq[i].T, ns--;
			memmove(&who[i], &who[i + 1], (size_t)(ns - i) * sizeof *who);
			memmove(&seq[i], &seq[i + 1], (size_t)(ns - i) * sizeof *seq);
		}
		if (!ns) {
			if (!dq)
				break;
			dround_take(dr, dhead, &dq, sl, m, o, res, &done, nreq, progress, arg);
			continue;
		}
		/* logits only for the masked rows, where the forward is not replayed as a graph (whose
		 * shapes would multiply) and no hook wants the whole block's */
		int skip = skip_ok && (rows > MODEL_GRAPH_ROWS || ns > MODEL_GRAPH_SEQS);
		/* (nor in a round with a prompt's prefill: the forward packs those rows last, and
		 * gathers the logit rows as it did before logits_skip) */
		for (int i = 0; skip && i < ns; i++)
			skip = sl[who[i]].ph != PH_PREFILL;
		for (int i = 0; skip && i < ns; i++) {
			struct slot *s = &sl[who[i]];
			if (!seq[i].logits)
				continue;
			for (int j = 0; j < B; j++)
				if (!s->msk[s->b * B + j])
					seq[i].logits_skip |= 1u << j;
		}
		rounds++;
		st_lap(st, ST_SCHED, &st_t);
		if (model_forward(m, seq, ns, NULL) < 0) {
			ret = -1;
			break;
		}
		st_lap(st, ST_FORWARD, &st_t);
		if (dev) {
			/* the draws and commits queued on the backend, the next round's shape from
			 * the quotas; then the round before's results */
			struct dround *r = &dr[dhead & 1];
			int nd = 0, nu = 0;
			for (int i = 0; i < ns; i++) {
				struct slot *s = &sl[who[i]];
				s->forwards++;
				if (s->ph == PH_PREFILL) {
					s->ph = PH_DECODE;
					continue;
				}
				if (s->action_save) {
					dev_block_queued(s, o, 0);
					continue;
				}
				int bs = s->b * B, quota = step_quota(s, o, s->nm);
				ds[nd] = (struct denoise_seq){ .row = nd * B, .quota = quota,
				                               .gstep = ++s->gstep, .u0 = nu, .x = s->x_d + bs,
				                               .msk = s->msk_d + bs, .step = s->step_d + bs,
				                               .conf = s->conf_d + bs };
				for (int j = 0; j < s->nm; j++)
					u[nu++] = rng_uniform(&s->rng);
				s->pending = 0;
				s->nm -= quota < s->nm ? quota : s->nm;
				s->it++;
				r->e[nd] = (struct dentry){ .slot = who[i], .req = s->req, .blk = s->b,
				                            .ends = !s->nm, .fw = s->forwards,
				                            .gs = s->gstep };
				nd++;
				if (!s->nm && !o->separate_save)
					dev_block_queued(s, o, 1);
			}
			st_lap(st, ST_DRAWS, &st_t);
			if (nd) {
				if (m->ops->denoise(m->logits, V, ds, nd, B, u, nu, out_d, (int)o->decoding,
				                    o->threshold, o->temperature, o->top_k, o->top_p) != 0) {
					warn_msg("sampler: the backend's denoise op failed");
					ret = -1;
					break;
				}
				/* the blocks' ids come back where a block ended (for its stop check) */
				r->n = nd;
				r->ticket = 0;
				for (int i = 0; i < nd && !r->ticket; i++)
					if (r->e[i].ends)
						r->ticket = last_ticket = m->ops->fetch(r->ids, out_d,
						                         (size_t)nd * B * sizeof *out_d);
				dhead++;
				dq++;
			}
			st_lap(st, ST_SAMPLE, &st_t);
			if (dq == 2 || (dq && !nd)) {
				dround_take(dr, dhead, &dq, sl, m, o, res, &done, nreq, progress,
				            arg);
			}
			st_lap(st, ST_COMMIT, &st_t);
			continue;
		}
		/* the masked rows of every denoising sequence, drawn together on the backend; each
		 * slot's uniforms in position order, as one request alone would take them */
		int nd = 0, lrows = 0;
		for (int i = 0; i < ns; i++) {
			struct slot *s = &sl[who[i]];
			if (s->ph == PH_PREFILL || s->action_save)
				continue;
			int nm = 0;
			for (int j = 0; j < B; j++) {
				if (!s->msk[s->b * B + j])
					continue;
				srow[nd] = lrows + (skip ? nm : j);
				u[nd++] = rng_uniform(&s->rng);
				nm++;
			}
			lrows += skip ? nm : B;
		}
		st_lap(st, ST_DRAWS, &st_t);
		if (nd)
			m->ops->sample(tok, prob, m->logits, srow, u, nd, V, o->temperature, o->top_k,
			               o->top_p);
		st_lap(st, ST_SAMPLE, &st_t);
		if (logits && lrows)
			m->ops->to_host(logits, m->logits, (size_t)lrows * V * sizeof *logits);
		for (int i = 0, lr = 0, k = 0; i < ns; i++) {
			struct slot *s = &sl[who[i]];
			s->forwards++;
			if (s->ph == PH_PREFILL) {
				s->ph = PH_DECODE;
			} else if (!s->action_save) {
				if (o->on_logits)
					o->on_logits(o->on_logits_arg, s->req, s->gstep + 1,
					             logits + (size_t)lr * V, B, V);
				s->pending = 0;
				k += slot_denoise(s, o, tok + k, prob + k);
				lr += B;
				if (!o->separate_save && !block_has_mask(s, o)) {
					if (block_ends_request(s, o, s->b)) {
						request_done(s, o, res, &done, nreq, progress, arg);
					} else {
						next_block(s, o, 1);
					}
				}
			} else if (block_ends_request(s, o, s->b)) {
				request_done(s, o, res, &done, nreq, progress, arg);
			} else {
				next_block(s, o, 0);
			}
		}
		st_lap(st, ST_COMMIT, &st_t);
	}
	if (st) {
		double all = now_ms() - t0;
		fprintf(stderr, "sampler times: %d rounds, %.3f s", rounds, all / 1e3);
		for (int i = 0; i < ST_N; i++)
			fprintf(stderr, "; %s %.3f s (%.3f ms a round)", st_names[i], st_acc[i] / 1e3,
			        rounds ? st_acc[i] / rounds : 0.0);
		fprintf(stderr, "\n");
	}
	if (last_ticket)
		m->ops->fetch_wait(last_ticket);
	m->ops->sync();
	m->lazy = lazy;
	for (int a = 0; a < A; a++) {
		kvcache_free(&sl[a].kv, m);
		m->ops->free(sl[a].dbuf);
		free(sl[a].x), free(sl[a].msk), free(sl[a].step), free(sl[a].logp);
	}
	for (int k = 0; k < 2; k++)
		free(dr[k].ids), free(dr[k].e);
	if (out_d)
		m->ops->free(out_d);
	free(ds);
	free(sl), free(seq), free(who), free(logits), free(srow), free(tok), free(u), free(prob);
	return ret;
}
