/* test_sampler: quotas, the filtered draw (temperature, top-k, top-p, ties), the commit rules,
 * and whole runs on a tiny random model: forwards per block, leftover prompt tokens, the
 * trace, stop ids, the dynamic fallback, batch == one at a time (bitwise), --seed, and
 * cached decoding == a recomputation of the whole prefix at every step; runs split to fit a
 * memory limit (lib/sampler_fit) == one run, the progress callback seeing each result. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "sampler.h"
#include "sampler_fit.h"
#include "test.h"
#include "util.h"

static float work[16 * 3 * 300];

static void test_quota(void)
{
	CHECK(sampler_quota(4, 4, 0) == 1 && sampler_quota(4, 4, 3) == 1, "quota 4/4 = 1,1,1,1");
	CHECK(sampler_quota(4, 3, 0) == 2 && sampler_quota(4, 3, 1) == 1 && sampler_quota(4, 3, 2) == 1,
	      "quota 4/3 = 2,1,1");
	CHECK(sampler_quota(5, 2, 0) == 3 && sampler_quota(5, 2, 1) == 2, "quota 5/2 = 3,2");
	CHECK(sampler_quota(4, 8, 3) == 1 && sampler_quota(4, 8, 4) == 0, "quota 4/8 = 1,1,1,1,0,...");
}

static void test_draw(void)
{
	float p, l[4] = { 1, 3, 2, 0 }, t2[2] = { 0, logf(3) }, tie[3] = { 2, 5, 5 };
	float pp[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };

	CHECK(sample_draw(l, 4, 1, 1, 1, 0.99, &p, work) == 1 && p == 1.0f, "top-k 1 is argmax, prob 1");
	CHECK(sample_draw(tie, 3, 1, 1, 1, 0.2, &p, work) == 1 && fabsf(p - 0.5f) < 1e-6,
	      "top-k 1 keeps tied logits; a low draw takes the lower index");
	CHECK(sample_draw(tie, 3, 1, 1, 1, 0.7, &p, work) == 2, "a high draw takes the higher one");
	CHECK(sample_draw(t2, 2, 1, 0, 1, 0.2, &p, work) == 0 && fabsf(p - 0.25f) < 1e-6,
	      "no filter: softmax probability");
	CHECK(sample_draw(t2, 2, 0.5f, 0, 1, 0.05, &p, work) == 0 && fabsf(p - 0.1f) < 1e-6,
	      "temperature 0.5 sharpens (0.1 / 0.9)");
	CHECK(sample_draw(t2, 2, 0.5f, 0, 1, 0.5, &p, work) == 1 && fabsf(p - 0.9f) < 1e-6,
	      "temperature: draw above the first mass");
	float e3 = expf(3), e2 = expf(2);
	CHECK(sample_draw(l, 4, 1, 2, 1, 0.0, &p, work) == 1 && fabsf(p - e3 / (e3 + e2)) < 1e-6,
	      "top-k 2 keeps the two largest");
	CHECK(sample_draw(l, 4, 1, 2, 1, 0.99, &p, work) == 2, "top-k 2 never draws outside the two");
	CHECK(sample_draw(pp, 4, 1, 0, 0.7f, 0.99, &p, work) == 1 && fabsf(p - 0.375f) < 1e-5,
	      "top-p 0.7 keeps {0.5, 0.3}, renormalised");
	CHECK(sample_draw(pp, 4, 1, 0, 0.85f, 0.99, &p, work) == 2 && fabsf(p - 0.15f / 0.95f) < 1e-5,
	      "top-p 0.85 keeps the token that crosses it");
	CHECK(sample_draw(pp, 4, 1, 0, 0.4f, 0.99, &p, work) == 0 && p == 1.0f, "top-p keeps at least the top");
	CHECK(sample_draw(pp, 4, 1, 0, 1, 0.97, &p, work) == 3, "top-p 1 keeps all");
}

static void test_choose(void)
{
	uint8_t msk[4] = { 1, 1, 0, 1 }, c[4];
	float conf[4] = { 0.5f, 0.95f, 1.0f, 0.95f };

	CHECK(sampler_choose(SAMPLER_STATIC, 4, msk, conf, 1, 0.9f, c) == 1 && c[1] && !c[3],
	      "static: most confident, ties to the lowest position, unmasked ignored");
	CHECK(sampler_choose(SAMPLER_STATIC, 4, msk, conf, 2, 0.9f, c) == 2 && c[1] && c[3], "static quota 2");
	CHECK(sampler_choose(SAMPLER_DYNAMIC, 4, msk, conf, 1, 0.9f, c) == 2 && c[1] && c[3] && !c[0],
	      "dynamic: every masked position above the threshold");
	CHECK(sampler_choose(SAMPLER_DYNAMIC, 4, msk, conf, 1, 0.96f, c) == 1 && c[1],
	      "dynamic: fewer than the quota above -> the quota most confident");
	CHECK(sampler_choose(SAMPLER_DYNAMIC, 4, msk, conf, 3, 0.9f, c) == 3, "dynamic: above but fewer than quota");
	CHECK(sampler_choose(SAMPLER_SEQUENTIAL, 4, msk, conf, 2, 0.9f, c) == 2 && c[0] && c[1],
	      "sequential: leftmost masks");
	CHECK(sampler_choose(SAMPLER_STATIC, 4, msk, conf, 9, 0.9f, c) == 3, "quota capped by the masks left");
}

/* ------------------------------------------------------------ whole runs */

static struct model_config tiny(void)
{
	struct model_config c = {
		.vocab_size = 300, .hidden_size = 64, .num_layers = 2, .num_heads = 4,
		.num_kv_heads = 2, .head_dim = 16, .intermediate_size = 128,
		.max_position_embeddings = 256, .rope_theta = 10000.0f, .rms_norm_eps = 1e-6f,
		.block_size = 4, .mask_token_id = 299, .bos_token_id = -1, .eos_token_id = 298,
		.pad_token_id = 298,
	};
	return c;
}

static int prompt[5][13];
static const int plens[5] = { 8, 10, 3, 13, 1 };

static void requests(struct sampler_request *r, int n, uint64_t seed)
{
	for (int i = 0; i < n; i++) {
		for (int t = 0; t < plens[i]; t++)
			prompt[i][t] = (i * 31 + t * 17 + 3) % 290;
		r[i] = (struct sampler_request){ prompt[i], plens[i], seed + (uint64_t)i };
	}
}

static int same_result(const struct sampler_result *a, const struct sampler_result *b)
{
	return a->n == b->n && a->forwards == b->forwards && a->steps == b->steps &&
	       !memcmp(a->ids, b->ids, sizeof(int) * a->n) && !memcmp(a->step, b->step, sizeof(int) * a->n) &&
	       !memcmp(a->logp, b->logp, sizeof(float) * a->n);
}

static void free_all(struct sampler_result *r, int n)
{
	for (int i = 0; i < n; i++)
		sampler_result_free(&r[i]);
}

/* greedy static decoding recomputing the whole prefix (fresh cache) at every step */
static void recompute_greedy(struct model *m, const int *p, int P, int G, int *out)
{
	int B = 4, nb = (P + G + B - 1) / B, len = nb * B, x[64];
	uint8_t msk[64] = { 0 };
	float *lg = xmalloc(sizeof(float) * B * 300);

	memcpy(x, p, sizeof(int) * P);
	for (int i = P; i < len; i++)
		x[i] = 299, msk[i] = 1;
	for (int b = P / B; b < nb; b++) {
		for (int it = 0; it < 4; it++) {
			struct kvcache kv;
			int nm = 0, cand[4];
			float conf[4] = { 0 };
			uint8_t c[4];
			for (int j = 0; j < B; j++)
				nm += msk[b * B + j];
			if (!nm)
				break;
			kvcache_init(&kv, m, len);
			if (b > 0) {
				struct model_seq pre = { .kv = &kv, .ids = x, .T = b * B, .store = 1, .logits = 0 };
				model_forward(m, &pre, 1, NULL);
			}
			struct model_seq s = { .kv = &kv, .ids = x + b * B, .T = B, .store = 0, .logits = 1 };
			model_forward(m, &s, 1, lg);
			kvcache_free(&kv, m);
			for (int j = 0; j < B; j++)
				if (msk[b * B + j])
					cand[j] = sample_draw(lg + j * 300, 300, 1, 1, 1, 0.5, &conf[j], work);
			sampler_choose(SAMPLER_STATIC, B, msk + b * B, conf, 1, 0.9f, c);
			for (int j = 0; j < B; j++)
				if (c[j])
					x[b * B + j] = cand[j], msk[b * B + j] = 0;
		}
	}
	memcpy(out, x + P, sizeof(int) * G);
	free(lg);
}

/* the tiny model of random weights (seed) on the CPU, and default options for it */
static float *tiny_model(struct model *m, struct model_weights *hw, uint64_t seed,
                         struct sampler_opts *o)
{
	struct model_config c = tiny();
	float *mem = model_weights_random(hw, &c, seed);

	model_init(m, &c, hw, &ops_cpu, DICE_F32);
	sampler_opts_default(o);
	o->mask_id = 299;
	return mem;
}

static void test_runs(void)
{
	struct model_weights hw;
	struct model m;
	struct sampler_opts o;
	float *mem = tiny_model(&m, &hw, 11, &o);
	struct sampler_request rq[5];
	struct sampler_result a[5], b[5];
	int ok;

	o.separate_save = 1;     /* the reference's forward counts; fused below */
	sampler_preset(&o, "eval");
	o.max_tokens = 8;
	requests(rq, 5, 1);

	/* eval preset: top-k 1 -> all confidences 1 -> left to right, one token per step */
	sampler_run(&m, &o, rq, 1, a, NULL, NULL);
	CHECK(a[0].n == 8 && a[0].forwards == 11, "P=8 G=8 static 4/4: 1 prefill + 2 x (4 steps + save)");
	ok = 1;
	for (int i = 0; i < 8; i++)
		ok &= a[0].step[i] == i + 1 && a[0].logp[i] == 0.0f;
	CHECK(ok, "greedy static commits left to right, trace steps 1..8, log-prob 0");
	int ref[8];
	recompute_greedy(&m, prompt[0], 8, 8, ref);
	CHECK(!memcmp(ref, a[0].ids, sizeof ref), "cached decoding == recomputing the prefix every step");
	free_all(a, 1);

	/* leftover prompt tokens: P=10 -> prefill 8, block 2 holds 2 prompt + 2 masks */
	o.max_tokens = 6;
	sampler_run(&m, &o, rq + 1, 1, a, NULL, NULL);
	CHECK(a[0].n == 6 && a[0].forwards == 1 + 3 + 5, "leftover: 2 steps + save, then a full block");
	CHECK(a[0].step[0] == 1 && a[0].step[1] == 2 && a[0].step[2] == 3 && a[0].step[5] == 6,
	      "leftover: trace steps");
	int ref6[6];
	recompute_greedy(&m, prompt[1], 10, 6, ref6);
	CHECK(!memcmp(ref6, a[0].ids, sizeof ref6), "leftover: cached == recomputed");
	free_all(a, 1);

	/* max_tokens not a multiple of the block; prompt shorter than a block (no prefill) */
	o.max_tokens = 5;
	sampler_run(&m, &o, rq + 2, 1, a, NULL, NULL);
	CHECK(a[0].n == 5 && a[0].forwards == 2 + 5, "P=3 G=5: no prefill, 1 step + save, a full block");
	free_all(a, 1);

	/* dynamic: threshold 0 commits a whole block per step; threshold 1 falls back to quotas */
	o.top_k = 0;
	o.decoding = SAMPLER_DYNAMIC;
	o.max_tokens = 8;
	o.threshold = 0.0f;
	sampler_run(&m, &o, rq, 1, a, NULL, NULL);
	CHECK(a[0].forwards == 1 + 2 * 2 && a[0].steps == 2 && a[0].step[3] == 1 && a[0].step[4] == 2,
	      "dynamic threshold 0: one step per block");
	free_all(a, 1);
	o.threshold = 1.0f;
	sampler_run(&m, &o, rq, 1, a, NULL, NULL);
	CHECK(a[0].forwards == 11 && a[0].steps == 8, "dynamic threshold 1: quota fallback, 4 steps per block");
	ok = 1;
	for (int i = 0; i < 8; i++)
		ok &= a[0].logp[i] < 0.0f;
	CHECK(ok, "sampled log-probabilities are recorded");
	free_all(a, 1);

	/* batch == one at a time, bitwise; seed reproduces */
	sampler_preset(&o, "rl");
	o.max_tokens = 9;
	sampler_run(&m, &o, rq, 5, a, NULL, NULL);
	o.max_active = 3;
	o.max_rows = 12;     /* forces the long prefills to wait their turn */
	sampler_run(&m, &o, rq, 5, b, NULL, NULL);
	ok = 1;
	for (int i = 0; i < 5; i++)
		ok &= same_result(&a[i], &b[i]);
	CHECK(ok, "batch of 3 (mixed lengths, refilled slots) == one at a time, bitwise");
	free_all(b, 5);
	requests(rq, 5, 2);
	sampler_run(&m, &o, rq, 5, b, NULL, NULL);
	CHECK(memcmp(a[0].ids, b[0].ids, sizeof(int) * 9) || memcmp(a[1].ids, b[1].ids, sizeof(int) * 9),
	      "another seed draws other tokens");
	free_all(b, 5);
	requests(rq, 5, 1);
	sampler_run(&m, &o, rq, 5, b, NULL, NULL);
	CHECK(same_result(&a[2], &b[2]), "the same seed reproduces");
	free_all(b, 5);

	/* the save pass fused into the next block's first forward: same tokens, trace and
	 * log-probabilities bitwise, one forward less per block and none after the last */
	o.separate_save = 0;
	requests(rq, 5, 1);
	sampler_run(&m, &o, rq, 5, b, NULL, NULL);
	ok = 1;
	for (int i = 0; i < 5; i++) {
		struct sampler_result x = b[i];
		x.forwards = a[i].forwards;
		ok &= same_result(&a[i], &x) && b[i].forwards == b[i].steps + (plens[i] >= 4);
	}
	CHECK(ok, "fused save pass == separate save pass; forwards = steps + prefill");
	free_all(b, 5);
	o.max_active = 1;
	sampler_run(&m, &o, rq, 5, b, NULL, NULL);
	ok = 1;
	for (int i = 0; i < 5; i++) {
		struct sampler_result x = b[i];
		x.forwards = a[i].forwards;
		ok &= same_result(&a[i], &x);
	}
	CHECK(ok, "fused, batch 1 == separate, batch 3");
	free_all(b, 5);
	o.separate_save = 1;
	o.max_active = 3;

	/* stop ids: stop on the 6th token of the unstopped run */
	int stop = a[0].ids[5], first = 0;
	while (a[0].ids[first] != stop)
		first++;
	o.stop = &stop, o.nstop = 1, o.max_active = 1, o.max_tokens = 40;
	sampler_run(&m, &o, rq, 1, b, NULL, NULL);
	CHECK(b[0].stopped && b[0].n == first + 1 && b[0].ids[first] == stop &&
	      !memcmp(b[0].ids, a[0].ids, sizeof(int) * b[0].n), "stop: kept up to the first stop id");
	CHECK(b[0].forwards < 1 + 10 * 2, "stop: generation ends after the block");
	free_all(b, 1);
	free_all(a, 5);

	o.max_tokens = 0;
	sampler_run(&m, &o, rq, 1, a, NULL, NULL);
	CHECK(a[0].n == 0 && a[0].forwards == 0, "max_tokens 0: nothing");
	free_all(a, 1);
	model_free(&m);
	free(mem), free(hw.layers);
}

/* device mode (the draws and commits on the backend, the host a round behind) == the host's
 * commits, bitwise, counts included: static and sequential, greedy and sampled, the save
 * fused and separate, one and three at a time, stop ids met at different blocks */
static void test_device_mode(void)
{
	struct model_weights hw;
	struct model m;
	struct sampler_opts o;
	float *mem = tiny_model(&m, &hw, 5, &o);
	struct sampler_request rq[5];
	struct sampler_result a[5], b[5];
	int ok = 1, runs = 0, on = 1, stopped = 0, stop = -1;

	o.max_tokens = 11;
	requests(rq, 5, 3);
	for (int cfg = 0; cfg < 64; cfg++) {
		o.decoding = cfg & 1 ? SAMPLER_SEQUENTIAL : SAMPLER_STATIC;
		o.top_k = cfg & 2 ? 1 : 0;
		o.temperature = cfg & 2 ? 1.0f : 0.8f;
		o.separate_save = (cfg >> 2) & 1;
		o.max_active = cfg & 8 ? 3 : 1;
		o.steps = cfg & 16 ? 3 : 4;
		/* blocks of 8, more steps than positions (steps that commit nothing), and prompts
		 * that wait for rows */
		o.block = cfg & 32 ? 8 : 4;
		o.steps = cfg & 32 ? (cfg & 16 ? 10 : 8) : o.steps;
		o.max_rows = cfg & 32 ? 16 : 0;
		o.stop = stop >= 0 ? &stop : NULL;
		o.nstop = stop >= 0;
		setenv("DICE_SAMPLER_DEVICE", "0", 1);
		on &= !sampler_device_mode(&m, &o, 5);
		sampler_run(&m, &o, rq, 5, a, NULL, NULL);
		unsetenv("DICE_SAMPLER_DEVICE");
		on &= !sampler_device_mode(&m, &o, 5);          /* (the CPU: off by default) */
		setenv("DICE_SAMPLER_DEVICE", "1", 1);
		on &= sampler_device_mode(&m, &o, 5);
		sampler_run(&m, &o, rq, 5, b, NULL, NULL);
		unsetenv("DICE_SAMPLER_DEVICE");
		for (int i = 0; i < 5; i++) {
			ok &= same_result(&a[i], &b[i]) && a[i].stopped == b[i].stopped;
			stopped += a[i].stopped;
		}
		runs++;
		/* from the second configuration on, stop at a token the first one drew */
		if (stop < 0)
			stop = a[2].ids[5];
		free_all(a, 5), free_all(b, 5);
	}
	CHECK(on, "device mode where it applies with DICE_SAMPLER_DEVICE=1, off with 0 and by default on the CPU");
	CHECK(ok && runs == 64 && stopped > 0, "device mode == the host's commits, bitwise (64 settings, stops met)");
	o.block = 4;
	o.decoding = SAMPLER_DYNAMIC;
	setenv("DICE_SAMPLER_DEVICE", "1", 1);
	CHECK(!sampler_device_mode(&m, &o, 1), "dynamic decoding stays on the host");
	o.decoding = SAMPLER_STATIC;
	o.max_active = 9;
	CHECK(!sampler_device_mode(&m, &o, 9), "so do more sequences than a replayed forward holds");
	unsetenv("DICE_SAMPLER_DEVICE");
	model_free(&m);
	free(mem), free(hw.layers);
}

/* the CPU backend but that an allocation of fail_size bytes fails (NULL), as cu_alloc's does
 * when the GPU is full */
static size_t fail_size;
static void *alloc_failing(size_t bytes)
{
	return bytes == fail_size ? NULL : ops_cpu.alloc(bytes);
}

static void test_kv_full(void)
{
	struct model_weights hw;
	struct model m;
	struct sampler_opts o;
	float *mem = tiny_model(&m, &hw, 7, &o);
	struct ops full = ops_cpu;
	struct sampler_request rq[4];
	struct sampler_result a[4] = { 0 }, b[4];
	int r;

	sampler_preset(&o, "eval");
	o.max_tokens = 8;
	o.max_active = 2;
	requests(rq, 4, 1);
	/* the fourth request (13 prompt ids + 8 new: a cache of 24 positions) finds no memory */
	fail_size = kvcache_bytes(&m.cfg, 24) / 2;
	full.alloc = alloc_failing;
	m.ops = &full;
	r = sampler_run(&m, &o, rq, 4, a, NULL, NULL);
	CHECK(r == -1, "a KV cache the backend cannot allocate: sampler_run fails (-1), no fault");
	free_all(a, 4);         /* (the requests not started: zeros) */
	m.ops = &ops_cpu;
	r = sampler_run(&m, &o, rq, 4, b, NULL, NULL);
	CHECK(r == 0 && b[3].n == 8, "the same model samples again once the memory is there");
	free_all(b, 4);
	model_free(&m);
	free(mem), free(hw.layers);
}

/* progress of a split run: each request's result is in res at its own index when the
 * callback comes, and is that of the unsplit run */
struct fit_seen {
	const struct sampler_result *ref, *res;
	int n, calls, ok;
};

static void fit_progress(void *arg, int done, int total)
{
	struct fit_seen *f = arg;
	int have = 0;

	for (int i = 0; i < f->n; i++) {
		if (!f->res[i].ids)
			continue;
		have++;
		f->ok &= same_result(&f->res[i], &f->ref[i]);
	}
	f->ok &= done == ++f->calls && total == f->n && have == done;
}

static void test_fit(void)
{
	struct model_weights hw;
	struct model m;
	struct sampler_opts o;
	float *mem = tiny_model(&m, &hw, 5, &o);
	struct sampler_request rq[5];
	struct sampler_result a[5], b[5] = { 0 };
	struct fit_seen seen = { a, b, 5, 0, 1 };
	size_t limit;
	char err[256];
	int ok, warned = 0;

	sampler_preset(&o, "rl");
	o.max_tokens = 9;
	o.max_active = 5;
	requests(rq, 5, 3);
	sampler_run(&m, &o, rq, 5, a, NULL, NULL);
	/* caches of 20, 20, 12, 24 and 12 positions: two of 24 fit; those of 12 run 4 at once
	 * (requests 2 and 4), then the others 2 at once */
	limit = 2 * kvcache_bytes(&m.cfg, 24);
	CHECK(sampler_run_fit(&m, &o, rq, 5, b, limit, &warned, fit_progress, &seen) == 0 &&
	      warned == 1, "caches past the limit: the run split, said once");
	ok = seen.ok && seen.calls == 5;
	for (int i = 0; i < 5; i++)
		ok &= same_result(&a[i], &b[i]);
	CHECK(ok, "split run == one run, bitwise; progress sees each result at its index");
	free_all(b, 5);
	memset(b, 0, sizeof b);
	warned = 0;
	seen.calls = 0, seen.ok = 1;
	CHECK(sampler_run_fit(&m, &o, rq, 5, b, 5 * kvcache_bytes(&m.cfg, 24), &warned,
	                      fit_progress, &seen) == 0 && !warned && seen.ok && seen.calls == 5,
	      "caches within the limit: one run, no warning");
	free_all(b, 5);
	memset(b, 0, sizeof b);
	CHECK(sampler_run_fit(&m, &o, rq, 5, b, 1, &warned, NULL, NULL) == 0 &&
	      same_result(&a[3], &b[3]), "none fits alone: each runs alone");
	free_all(b, 5);
	free_all(a, 5);

	CHECK(sampler_fit_alone(&m, &o, 13, kvcache_bytes(&m.cfg, 24), err, sizeof err) == 0,
	      "a prompt that fits alone");
	CHECK(sampler_fit_alone(&m, &o, 13, kvcache_bytes(&m.cfg, 24) - 1, err, sizeof err) < 0,
	      "one that does not");
	snprintf(err, sizeof err, "%zu", kvcache_bytes(&m.cfg, 24));
	CHECK_STR(err, "12288", "(the tiny model's cache of 24 positions)");
	sampler_fit_alone(&m, &o, 13, 1000, err, sizeof err);
	CHECK_STR(err, "the KV cache of a prompt of 13 tokens + --max-tokens 9 needs 12288 bytes, "
	          "more than the 1000 bytes of memory", "said for its prompt");
	sampler_fit_alone(&m, &o, -1, 1000, err, sizeof err);
	CHECK_STR(err, "the KV cache of one sequence of --max-tokens 9 needs 6144 bytes, more "
	          "than the 1000 bytes of memory", "or for any prompt");
	CHECK(sampler_fit_alone(&m, &o, 1000000, 0, err, sizeof err) == 0, "limit 0: unchecked");

	setenv("DICE_MEM_LIMIT", "123456", 1);
	CHECK(sampler_mem_limit(&m, &limit, err, sizeof err) == 0 && limit == 123456,
	      "DICE_MEM_LIMIT sets the limit");
	setenv("DICE_MEM_LIMIT", "1G", 1);
	CHECK(sampler_mem_limit(&m, &limit, err, sizeof err) < 0, "DICE_MEM_LIMIT 1G: refused");
	CHECK_STR(err, "bad DICE_MEM_LIMIT '1G' (want an integer of at least 1)", "and said");
	unsetenv("DICE_MEM_LIMIT");
	CHECK(sampler_mem_limit(&m, &limit, err, sizeof err) == 0 && limit > 0,
	      "the CPU: the host's memory");
	CHECK_STR(sampler_mem_str(err, (size_t)3 << 29), "1.5 GiB", "memory sizes: GiB");
	CHECK_STR(sampler_mem_str(err, (size_t)12 << 20), "12.0 MiB", "MiB");
	CHECK_STR(sampler_mem_str(err, 512), "512 bytes", "bytes");
	model_free(&m);
	free(mem), free(hw.layers);
}

int main(void)
{
	test_quota();
	test_draw();
	test_choose();
	test_runs();
	test_device_mode();
	test_kv_full();
	test_fit();
	return test_done();
}
