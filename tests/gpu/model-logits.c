/* model-logits: the engine's side of tests/gpu/model-parity.py (built by tests/gpu/run-model.sh).
 *
 *   model-logits write DIR SEED
 *       write a tiny random checkpoint of SDAR geometry (HD 128, GQA 4:1, untied lm_head) with
 *       our own writer (lib/checkpoint) and random weights (model_weights_random)
 *   model-logits run DIR DEVICE DTYPE OUTDIR G ID...
 *       OUTDIR/prefill.f32  logits (P, V) of the prompt under the block-causal mask
 *       OUTDIR/steps.f32    logits (block, V) of every denoising step of a greedy run
 *                           (the eval preset: static, top-k 1; G new tokens, no stop ids)
 *       OUTDIR/ids.txt      the generated ids, then the committing step of each
 *   model-logits bench DEVICE DTYPE GEOM BATCH[:G],... P G PRESET
 *       (bench/engine.sh) the device copy bandwidth (1 GiB device-to-device, read+write
 *       counted), then random weights in memory of geometry GEOM (tiny, 0.6b, 1.7b, 4b, 8b);
 *       per BATCH of the list: the largest batch up to BATCH whose KV caches fit, requests of
 *       P prompt tokens and G new ones (G from BATCH:G when given) decoded together; prints
 *       the decode forward alone (BENCH_MODES=1: also with CUDA graphs and PDL each off;
 *       BENCH_OPS=1: its time per op, and that of the forward that also stores the block
 *       before, 2: and a batch's prefill forward's; BENCH_SKIP=1: its time with the
 *       attention, the small ops, both, the products, qkv_prep or add_rmsnorm left out;
 *       BENCH_TIMELINE=FILE: one more forward's kernels, a line a block, to FILE, in a build
 *       with -DDICE_TIMELINE: bench/timeline.py), at batch 1 the prefill forward alone, then one
 *       "engine" line: ms per forward, forwards per token, tokens/s, the floor (weight bytes
 *       / copy bandwidth) and the share of it (batch 1: and an "engine-decode" line, the same
 *       without the prefill forward; BENCH_TRACE=1: then the sampling run's time by forward
 *       size, the sample op and the host work, CUDA graphs off; BENCH_NSYS=A,B: a profiler
 *       capture range from the sampling run's sample call A to its call B; BENCH_ROUND=1,
 *       batch 1: a device-mode round's ops added one by one to the queued decode forward);
 *       BENCH_PREFILL=N:
 *       instead of all that, a prefill forward of N prompts of P with the prefill attention
 *       on and off, and its ops each way
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "rng.h"
#include "model.h"
#include "sampler.h"
#include "util.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#ifdef DICE_CUDA
#include <cuda_profiler_api.h>

#include "gpu.h"

/* BENCH_OPS=1: where a decode forward's time goes. The forward runs through a copy of the
 * CUDA table whose engine ops record a CUDA event before and after themselves (plain launches:
 * graphs and PDL off), so each op's time is its GPU time in the stream, launch gaps included;
 * the times are summed per (op, shape). */
#define OT_EVENTS 2048
static struct ops ot_table;
static const struct ops *ot_real;
static cudaEvent_t ot_ev[OT_EVENTS];
static struct ot_rec { const char *name; int a, b, c; } ot_log[OT_EVENTS / 2];
static int ot_n;

static void ot_mark(const char *name, int a, int b, int c, int end)
{
	if (ot_n >= OT_EVENTS / 2)
		return;
	cudaEventRecord(ot_ev[2 * ot_n + end], gpu_stream());
	if (end)
		ot_log[ot_n++] = (struct ot_rec){ name, a, b, c };
}

static void ot_matmul_fixed(float *y, const float *x, const void *w, enum dice_dtype wdt, int N,
                            int in, int out)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->matmul_fixed(y, x, w, wdt, N, in, out);
	ot_mark("matmul_fixed", N, in, out, 1);
}

static void ot_matmul(float *y, const float *x, const void *w, enum dice_dtype wdt, int N,
                      int in, int out)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->matmul(y, x, w, wdt, N, in, out);
	ot_mark("matmul (a prefill's rows)", N, in, out, 1);
}

static void ot_matmul_fixed_glu(float *y, float *h, const float *gu, const void *w,
                                enum dice_dtype wdt, int N, int I, int out)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->matmul_fixed_glu(y, h, gu, w, wdt, N, I, out);
	ot_mark("matmul_fixed_glu", N, I, out, 1);
}

static int ot_matmul_fixed_gu(float *gu, float *h, const float *x, const void *w,
                              enum dice_dtype wdt, int N, int in, int I)
{
	ot_mark(NULL, 0, 0, 0, 0);
	int r = ot_real->matmul_fixed_gu(gu, h, x, w, wdt, N, in, I);
	ot_mark(r ? "matmul_fixed_gu (+ swiglu)" : "matmul_fixed_gu", N, in, 2 * I, 1);
	return r;
}

static void ot_qkv_prep(float *q, const float *qkv, const float *qw, const float *kw,
                        const int *pos, const struct kv_batch *b, int l, int NH, int NKV, int HD,
                        float eps, float theta)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->qkv_prep(q, qkv, qw, kw, pos, b, l, NH, NKV, HD, eps, theta);
	ot_mark("qkv_prep", b->N, NH, NKV, 1);
}

static void ot_attention_kv(float *out, const float *q, const struct kv_batch *b, int l, int NH,
                            int NKV, int HD, int block)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->attention_kv(out, q, b, l, NH, NKV, HD, block);
	ot_mark("attention_kv (+ merge)", b->N, NH, NKV, 1);
}

static int ot_attention_prefill(float *out, const float *q, const struct kv_batch *b, int s0,
                                const int *row0h, const int *lenh, int l, int NH, int NKV, int HD,
                                int block)
{
	if (!out)                               /* (a question, not work) */
		return ot_real->attention_prefill(out, q, b, s0, row0h, lenh, l, NH, NKV, HD,
		                                  block);
	ot_mark(NULL, 0, 0, 0, 0);
	int r = ot_real->attention_prefill(out, q, b, s0, row0h, lenh, l, NH, NKV, HD, block);
	ot_mark("attention_prefill", b->N - row0h[s0], NH, NKV, 1);
	return r;
}

static void ot_add_rmsnorm(float *y, float *x, const float *r, const float *w, int N, int C,
                           float eps)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->add_rmsnorm(y, x, r, w, N, C, eps);
	ot_mark("add_rmsnorm", N, C, 0, 1);
}

static void ot_swiglu_cat(float *y, const float *gu, int N, int C)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->swiglu_cat(y, gu, N, C);
	ot_mark("swiglu_cat", N, C, 0, 1);
}

static void ot_rmsnorm(float *y, const float *x, const void *w, enum dice_dtype wdt, int N, int C,
                       float eps)
{
	ot_mark(NULL, 0, 0, 0, 0);
	ot_real->rmsnorm(y, x, w, wdt, N, C, eps);
	ot_mark("rmsnorm", N, C, 0, 1);
}

/* the op times of `reps` forwards of sq, per forward */
static void ops_breakdown(struct model *m, struct model_seq *sq, int B, int reps, double fw_ms)
{
	struct { const char *name; int a, b, c, n; double ms; } agg[64];
	int na = 0;
	double total = 0;

	ot_real = m->ops;
	ot_table = *m->ops;
	ot_table.matmul_fixed = ot_matmul_fixed, ot_table.qkv_prep = ot_qkv_prep;
	ot_table.matmul = ot_matmul;
	if (ot_table.matmul_fixed_glu)
		ot_table.matmul_fixed_glu = ot_matmul_fixed_glu;
	if (ot_table.matmul_fixed_gu)
		ot_table.matmul_fixed_gu = ot_matmul_fixed_gu;
	ot_table.attention_kv = ot_attention_kv, ot_table.add_rmsnorm = ot_add_rmsnorm;
	if (ot_table.attention_prefill)
		ot_table.attention_prefill = ot_attention_prefill;
	ot_table.swiglu_cat = ot_swiglu_cat, ot_table.rmsnorm = ot_rmsnorm;
	ot_table.replay = NULL;
	for (int i = 0; i < OT_EVENTS; i++)
		if (!ot_ev[i])
			cudaEventCreate(&ot_ev[i]);
	gpu_set_graphs(0);
	gpu_set_pdl(0);
	m->ops = &ot_table;
	for (int r = 0; r < reps; r++) {
		ot_n = 0;
		model_forward(m, sq, B, NULL);
		ot_real->sync();                /* (a lazy forward returns before its events) */
		for (int i = 0; i < ot_n; i++) {
			float ms = 0;
			int j;
			cudaEventElapsedTime(&ms, ot_ev[2 * i], ot_ev[2 * i + 1]);
			for (j = 0; j < na; j++)
				if (agg[j].name == ot_log[i].name && agg[j].a == ot_log[i].a &&
				    agg[j].b == ot_log[i].b && agg[j].c == ot_log[i].c)
					break;
			if (j == na && na < 64) {
				agg[na].name = ot_log[i].name, agg[na].a = ot_log[i].a;
				agg[na].b = ot_log[i].b, agg[na].c = ot_log[i].c;
				agg[na].n = 0, agg[na].ms = 0;
				na++;
			}
			if (j < 64)
				agg[j].n++, agg[j].ms += ms;
			total += ms;
		}
	}
	m->ops = ot_real;
	gpu_set_graphs(-1);
	gpu_set_pdl(-1);
	printf("ops of one forward (%d sequences; plain launches, CUDA events around each op, "
	       "mean of %d forwards; the forward alone, graphs and PDL on: %.3f ms):\n", B, reps, fw_ms);
	printf("  %-24s %7s %7s %7s %6s %10s %10s %8s\n", "op", "N", "in/NH", "out/NKV", "calls",
	       "us/call", "ms/forward", "GB/s");
	for (int j = 0; j < na; j++) {
		double us = agg[j].ms * 1e3 / agg[j].n, gbs = 0;
		if (!strncmp(agg[j].name, "matmul_fixed", 12))
			gbs = (double)agg[j].b * agg[j].c * dice_dtype_size(m->dtype) / (us * 1e3);
		printf("  %-24s %7d %7d %7d %6.1f %10.2f %10.3f %8.0f\n", agg[j].name, agg[j].a, agg[j].b,
		       agg[j].c, (double)agg[j].n / reps, us, agg[j].ms / reps, gbs);
	}
	printf("  sum of the ops: %.3f ms per forward\n", total / reps);
}

/* n sequences of the same T prompt ids, each with an empty cache of T positions */
static struct model_seq *prompts_make(struct model *m, const int *ids, int n, int T,
                                      struct kvcache **kvp)
{
	struct kvcache *kv = (struct kvcache *)xcalloc((size_t)n, sizeof *kv);
	struct model_seq *sq = (struct model_seq *)xcalloc((size_t)n, sizeof *sq);

	for (int b = 0; b < n; b++) {
		kvcache_init(&kv[b], m, T);
		sq[b] = (struct model_seq){ .kv = &kv[b], .ids = ids, .T = T };
	}
	*kvp = kv;
	return sq;
}

static void prompts_free(struct model *m, struct model_seq *sq, struct kvcache *kv, int n)
{
	for (int b = 0; b < n; b++)
		kvcache_free(&kv[b], m);
	free(kv);
	free(sq);
}
/* BENCH_OPS=2: also the ops of one prefill forward as the batch-B sampler runs it: as many
 * whole-block prompts of P as fit the sampler's 8192 rows (store 0: the same work, repeatable) */
static void prefill_breakdown(struct model *m, const int *ids, int B, int P, int block)
{
	int T = P / block * block, n = T > 0 ? 8192 / T : 0;
	double t;

	n = n < B ? n : B;
	if (n < 1)
		return;
	struct kvcache *kv;
	struct model_seq *sq = prompts_make(m, ids, n, T, &kv);
	model_forward(m, sq, n, NULL);
	t = now_s();
	for (int i = 0; i < 3; i++)
		model_forward(m, sq, n, NULL);
	t = (now_s() - t) / 3;
	printf("prefill of %d prompts of %d (%d rows):\n", n, T, n * T);
	ops_breakdown(m, sq, n, 3, t * 1e3);
	prompts_free(m, sq, kv, n);
}

/* BENCH_PREFILL=N: a prefill forward of N prompts of P (whole blocks; store 0: repeatable)
 * with the prefill attention on, then off (DICE_PREFILL_FA): the forward's time (mean of 5
 * after one) and its ops (BENCH_OPS's table) each way */
static void prefill_compare(struct model *m, const int *ids, int n, int P, int block,
                            const char *geom)
{
	int T = P / block * block;
	double t, ms[2];

	if (n < 1 || T < 1)
		return;
	struct kvcache *kv;
	struct model_seq *sq = prompts_make(m, ids, n, T, &kv);
	for (int on = 1; on >= 0; on--) {
		gpu_set_prefill_fa(on);
		model_forward(m, sq, n, NULL);
		t = now_s();
		for (int i = 0; i < 5; i++)
			model_forward(m, sq, n, NULL);
		ms[on] = (now_s() - t) / 5 * 1e3;
		printf("prefill-batch %s %d x %d prefill_fa %s: %.3f ms\n", geom, n, T,
		       on ? "on" : "off", ms[on]);
		fflush(stdout);
		ops_breakdown(m, sq, n, 3, ms[on]);
		fflush(stdout);
	}
	gpu_set_prefill_fa(-1);
	printf("prefill-batch %s %d x %d: %.3f ms with the prefill attention, %.3f without "
	       "(%.2fx)\n", geom, n, T, ms[1], ms[0], ms[0] / ms[1]);
	prompts_free(m, sq, kv, n);
}

/* BENCH_SKIP=1: the decode forward as it runs (graphs and PDL on) with classes of ops left
 * out, to tell what each costs inside the real graph: the forward goes through a copy of the
 * CUDA table whose left-out ops do nothing (the results are garbage: timing only), and whose
 * replay adds the variant to the graph key, so that each variant is captured on its own. */
static struct ops ab_table;
static const struct ops *ab_real;
static unsigned char ab_tag;

static void ab_replay(const void *key, size_t len, void (*fn)(void *), void *arg)
{
	unsigned char *k = xmalloc(len + 1);

	memcpy(k, key, len);
	k[len] = ab_tag;
	ab_real->replay(k, len + 1, fn, arg);
	free(k);
}

static void ab_no_matmul(float *y, const float *x, const void *w, enum dice_dtype wdt, int N,
                         int in, int out) {}
static void ab_no_qkv_prep(float *q, const float *qkv, const float *qw, const float *kw,
                           const int *pos, const struct kv_batch *b, int l, int NH, int NKV,
                           int HD, float eps, float theta) {}
static void ab_no_attention(float *out, const float *q, const struct kv_batch *b, int l, int NH,
                            int NKV, int HD, int block) {}
static void ab_no_add_rmsnorm(float *y, float *x, const float *r, const float *w, int N, int C,
                              float eps) {}
static void ab_no_swiglu_cat(float *y, const float *gu, int N, int C) {}
static void ab_no_matmul_glu(float *y, float *h, const float *gu, const void *w,
                             enum dice_dtype wdt, int N, int I, int out) {}

static void skip_breakdown(struct model *m, struct model_seq *sq, int B, const char *geom, int P)
{
	static const char *what[] = { "nothing", "attention_kv", "the small ops (qkv_prep, "
	                              "add_rmsnorm, swiglu_cat)", "attention_kv and the small ops",
	                              "the products (matmul_fixed)", "qkv_prep", "add_rmsnorm" };

	ab_real = m->ops;
	for (int v = 0; v < 7; v++) {
		ab_table = *ab_real;
		ab_table.replay = ab_real->replay ? ab_replay : NULL;
		ab_tag = (unsigned char)(0xa0 + v);
		if (v >= 2 && v <= 4)          /* (the gate/up product making the SwiGLU: off) */
			ab_table.matmul_fixed_gu = NULL;
		if (v == 1 || v == 3)
			ab_table.attention_kv = ab_no_attention;
		if (v == 2 || v == 3) {
			ab_table.qkv_prep = ab_no_qkv_prep, ab_table.add_rmsnorm = ab_no_add_rmsnorm;
			ab_table.swiglu_cat = ab_no_swiglu_cat;
			ab_table.matmul_fixed_glu = NULL;  /* swiglu_cat (left out), then the product */
		}
		if (v == 5)
			ab_table.qkv_prep = ab_no_qkv_prep;
		if (v == 6)
			ab_table.add_rmsnorm = ab_no_add_rmsnorm;
		if (v == 4) {
			ab_table.matmul_fixed = ab_no_matmul;
			ab_table.matmul_fixed_glu = ab_table.matmul_fixed_glu ? ab_no_matmul_glu : NULL;
		}
		m->ops = &ab_table;
		model_forward(m, sq, B, NULL);
		model_forward(m, sq, B, NULL);
		double t = now_s();
		for (int i = 0; i < 30; i++)
			model_forward(m, sq, B, NULL);
		t = (now_s() - t) / 30;
		m->ops = ab_real;
		printf("decode-skip %s batch %d cache %d without %s: %.3f ms\n", geom, B, P, what[v],
		       t * 1e3);
		fflush(stdout);
	}
}
#endif

static void dump_step(void *arg, int req, int step, const float *lg, int rows, int V)
{
	fwrite(lg, sizeof *lg, (size_t)rows * V, arg);
}

static int cmd_write(const char *dir, const char *seed)
{
	struct model_config c;
	struct model_weights w;
	char err[512];
	float *mem;

	config_tiny(&c, 1024);
	c.hidden_size = 256, c.num_heads = 8, c.num_kv_heads = 2, c.head_dim = 128;
	c.intermediate_size = 512, c.num_layers = 3, c.rope_theta = 1e6f;
	c.tie_word_embeddings = 0, c.dtype = DICE_F32;
	mem = model_weights_random(&w, &c, strtoull(seed, NULL, 10));
	if (checkpoint_write(dir, &c, &w, 1, NULL, err, sizeof err) < 0)
		die("%s", err);
	free(mem), free(w.layers);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct checkpoint ck;
	struct model m;
	struct sampler_opts o;
	struct sampler_request rq;
	struct sampler_result r;
	struct kvcache kv;
	const struct ops *ops = ops_get(argv[1]);
	enum dice_dtype dt = !strcmp(argv[2], "bf16") ? DICE_BF16 : !strcmp(argv[2], "fp16") ? DICE_F16 : DICE_F32;
	int G = atoi(argv[4]), P = argc - 5, *ids = xmalloc(sizeof(int) * (P + 1));
	char err[512], *path;
	FILE *f;

	if (!ops)
		die("no backend '%s'", argv[1]);
	for (int i = 0; i < P; i++)
		ids[i] = atoi(argv[5 + i]);
	if (checkpoint_open(&ck, argv[0], err, sizeof err) < 0)
		die("%s", err);
	if (model_init(&m, &ck.cfg, &ck.w, ops, dt) < 0)
		die("model_init failed");
	float *lg = xmalloc(sizeof(float) * P * ck.cfg.vocab_size);
	kvcache_init(&kv, &m, P);
	struct model_seq s = { .kv = &kv, .ids = ids, .T = P, .store = 1, .logits = 1 };
	if (model_forward(&m, &s, 1, lg) < 0)
		die("forward failed");
	path = xasprintf("%s/prefill.f32", argv[3]);
	f = fopen(path, "wb");
	fwrite(lg, sizeof *lg, (size_t)P * ck.cfg.vocab_size, f);
	fclose(f);
	free(path);
	kvcache_free(&kv, &m);

	sampler_opts_default(&o);
	sampler_preset(&o, "eval");
	o.max_tokens = G;
	o.mask_id = ck.cfg.mask_token_id;
	path = xasprintf("%s/steps.f32", argv[3]);
	f = fopen(path, "wb");
	o.on_logits = dump_step, o.on_logits_arg = f;
	rq = (struct sampler_request){ ids, P, 0 };
	if (sampler_run(&m, &o, &rq, 1, &r, NULL, NULL) < 0)
		die("sampling failed");
	fclose(f);
	free(path);
	path = xasprintf("%s/ids.txt", argv[3]);
	f = fopen(path, "w");
	for (int i = 0; i < r.n; i++)
		fprintf(f, "%d%c", r.ids[i], i + 1 < r.n ? ' ' : '\n');
	for (int i = 0; i < r.n; i++)
		fprintf(f, "%d%c", r.step[i], i + 1 < r.n ? ' ' : '\n');
	fclose(f);
	fprintf(stderr, "model-logits: %s %s: %d tokens, %d forwards\n", argv[1], argv[2], r.n, r.forwards);
	free(path), free(lg), free(ids);
	sampler_result_free(&r);
	model_free(&m);
	checkpoint_close(&ck);
	return 0;
}

static int geometry(struct model_config *c, const char *g)
{
	config_tiny(c, 1024);
	c->rope_theta = 1e6f;
	c->tie_word_embeddings = 0;
	if (!strcmp(g, "tiny"))
		return 0;
	c->vocab_size = 151936, c->mask_token_id = 151669, c->eos_token_id = 151645;
	c->pad_token_id = 151643, c->head_dim = 128, c->num_kv_heads = 8;
	if (!strcmp(g, "0.6b"))
		c->hidden_size = 1024, c->num_layers = 28, c->num_heads = 16, c->intermediate_size = 3072;
	else if (!strcmp(g, "1.7b"))
		c->hidden_size = 2048, c->num_layers = 28, c->num_heads = 16, c->intermediate_size = 6144;
	else if (!strcmp(g, "4b"))
		c->hidden_size = 2560, c->num_layers = 36, c->num_heads = 32, c->intermediate_size = 9728;
	else if (!strcmp(g, "8b"))
		c->hidden_size = 4096, c->num_layers = 36, c->num_heads = 32, c->intermediate_size = 12288;
	else
		return -1;
	return 0;
}


/* device-to-device copy bandwidth: 1 GiB copied 10 times with ops->copy (cudaMemcpyAsync on
 * the CUDA backend); bytes counted read + write (2 x 1 GiB per copy), as bandwidthTest does */
static double copy_bandwidth(const struct ops *ops)
{
	size_t n = (size_t)1 << 30;
	void *a = ops->alloc(n), *b = ops->alloc(n);
	double t;

	if (!a || !b)
		die("cannot allocate 2 GiB for the copy test");
	ops->copy(b, a, n);
	ops->sync();
	t = now_s();
	for (int i = 0; i < 10; i++)
		ops->copy(i & 1 ? a : b, i & 1 ? b : a, n);
	ops->sync();
	t = now_s() - t;
	ops->free(a), ops->free(b);
	return 2.0 * n * 10 / t;
}

/* the largest batch <= want whose caches (cap positions each) fit beside a reserve of 3 GiB
 * for the forward's scratch; the failed allocation's warning is expected */
static int fit_batch(const struct model *m, int want, int cap)
{
	void **p = xcalloc((size_t)want + 1, sizeof *p);
	int n = 0;

	p[want] = m->ops->alloc((size_t)3 << 30);
	while (n < want && (p[n] = m->ops->alloc(kvcache_bytes(&m->cfg, cap))))
		n++;
	for (int i = 0; i <= want; i++)
		if (p[i])
			m->ops->free(p[i]);
	free(p);
	return n;
}

/* BENCH_TRACE=1: where the sampler workload's time goes, by forward size. The sampler runs
 * through a copy of the backend table (CUDA graphs off: every forward launches eagerly)
 * whose embed op, the first op of a forward, opens a forward of N rows and closes the one
 * before, and whose sample op closes the forward before it and is timed on its own (a sync
 * before and after); a forward's time runs from its embed to the sample or the next embed
 * (its model_forward ends with a sync). What is left of the run is the sampler's host work. */
#define TR_PREFILL 2048                 /* forwards of more rows count as one bin */
static struct ops tr_table;
static const struct ops *tr_real;
static struct tr_bin { int rows, n; double s; } tr_bins[64];
static int tr_nb, tr_rows, tr_ns;
static double tr_t0, tr_sample_s;

static void tr_close(double t)
{
	int rows = tr_rows > TR_PREFILL ? TR_PREFILL + 1 : tr_rows, i;

	if (!tr_rows)
		return;
	for (i = 0; i < tr_nb && tr_bins[i].rows != rows; i++)
		;
	if (i == tr_nb && tr_nb < 64)
		tr_bins[tr_nb++] = (struct tr_bin){ rows, 0, 0 };
	if (i < tr_nb)
		tr_bins[i].n++, tr_bins[i].s += t - tr_t0;
	tr_rows = 0;
}

static const struct model *tr_m;

static void tr_embed(float *y, const int *ids, const void *w, enum dice_dtype wdt, int N, int C)
{
	double t = now_s();

	if (tr_m && w == tr_m->x) {     /* the gather of the logit rows, not a forward's start */
		tr_real->embed(y, ids, w, wdt, N, C);
		return;
	}

	tr_close(t);
	tr_t0 = t, tr_rows = N;
	tr_real->embed(y, ids, w, wdt, N, C);
}

static void tr_sample(int *tok, float *prob, const float *logits, const int *rows,
                      const double *u, int R, int V, float temperature, int top_k, float top_p)
{
	double t;

	tr_real->sync();                /* the forward before: the sampler does not wait for it */
	t = now_s();

	tr_close(t);
	tr_real->sample(tok, prob, logits, rows, u, R, V, temperature, top_k, top_p);
	tr_real->sync();
	tr_sample_s += now_s() - t, tr_ns++;
}

static int tr_cmp(const void *a, const void *b)
{
	return ((const struct tr_bin *)a)->rows - ((const struct tr_bin *)b)->rows;
}

/* install the tracing table on m (on = 1), or take it away and print what it saw over a run
 * of total_s seconds (on = 0) */
static void tr_trace(struct model *m, int on, double total_s)
{
	double fs = 0;

	if (on) {
		tr_real = m->ops, tr_table = *m->ops;
		tr_table.embed = tr_embed, tr_table.sample = tr_sample, tr_table.replay = NULL;
		tr_nb = tr_rows = tr_ns = 0, tr_sample_s = 0, tr_m = m;
		m->ops = &tr_table;
		return;
	}
	tr_close(now_s());
	m->ops = tr_real;
	qsort(tr_bins, (size_t)tr_nb, sizeof *tr_bins, tr_cmp);
	printf("trace of the run (%.3f s; CUDA graphs off): forwards by rows\n", total_s);
	for (int i = 0; i < tr_nb; i++) {
		fs += tr_bins[i].s;
		if (tr_bins[i].rows > TR_PREFILL)
			printf("  rows > %d: %d forwards, %.3f s, %.3f ms each\n", TR_PREFILL, tr_bins[i].n,
			       tr_bins[i].s, tr_bins[i].s * 1e3 / tr_bins[i].n);
		else
			printf("  rows %d: %d forwards, %.3f s, %.3f ms each\n", tr_bins[i].rows,
			       tr_bins[i].n, tr_bins[i].s, tr_bins[i].s * 1e3 / tr_bins[i].n);
	}
	printf("  sample op: %d calls, %.3f s; host work between: %.3f s\n", tr_ns, tr_sample_s,
	       total_s - fs - tr_sample_s);
}

/* BENCH_NSYS=A,B: a profiler's capture range (cudaProfilerStart / Stop, for `nsys profile
 * --capture-range=cudaProfilerApi`) from the sampler's sample call A to its call B, through a
 * copy of the backend table whose sample op counts its calls (nothing else changes) */
#ifdef DICE_CUDA
static struct ops np_table;
static const struct ops *np_real;
static int np_from, np_to, np_n;

static void np_sample(int *tok, float *prob, const float *logits, const int *rows,
                      const double *u, int R, int V, float temperature, int top_k, float top_p)
{
	if (np_n == np_from)
		cudaProfilerStart();
	np_real->sample(tok, prob, logits, rows, u, R, V, temperature, top_k, top_p);
	if (++np_n == np_to)
		cudaProfilerStop();
}
#endif

/* BENCH_ROUND=1 (batch 1): what a round of the sampler's device mode adds to a queued decode
 * forward, op by op, each way 20 rounds with one wait at the end, the ways in turn twice:
 * 0 the forward alone, 1 its ids copied from the device (ids_dev), 2 that and the denoise op
 * (its arguments' upload, its kernel: every position masked, quota 0, so that each round
 * draws the whole block), 3 that and a fetch of the block's ids every block rounds; CUDA:
 * 4 way 1 and the denoise kernel alone (its arguments uploaded once before), 5 way 1 and a
 * 16-byte memset (a stream operation that does nothing), 6 way 4 with nothing masked (the
 * kernel's launch and commit, no draws) */
static void round_breakdown(struct model *m, struct model_seq *sq, int Bk, const char *geom,
                            int P)
{
	static const char *name[] = { "forward", "+ids copy", "+denoise", "+fetch",
	                              "+denoise kernel", "+memset", "+kernel, no draws" };
	int V = m->cfg.vocab_size, lazy = m->lazy, *ids = xmalloc((size_t)Bk * sizeof *ids);
	size_t n4 = (size_t)Bk * 4;
	char *d = m->ops->alloc(5 * n4 + 2 * Bk);   /* x, step, conf, out, ids_dev | msk, zeros */
	int *x = (int *)d, *step = (int *)(d + n4), *out = (int *)(d + 3 * n4);
	int *idd = (int *)(d + 4 * n4);
	uint8_t *msk = (uint8_t *)(d + 5 * n4), *h = xcalloc(5 * n4 + 2 * Bk, 1);
	double u[32] = { 0 }, tm[7] = { 0 };
	int nw = 4;
	struct denoise_seq ds = { .row = 0, .quota = 0, .gstep = 0, .u0 = 0, .x = x, .msk = msk,
	                          .step = step, .conf = (float *)(d + 2 * n4) };

	for (int j = 0; j < Bk; j++) {
		ids[j] = sq->ids[j], ((int *)h)[j] = m->cfg.mask_token_id, h[5 * n4 + j] = 1;
		u[j] = (j + 0.5) / Bk;
		((int *)(h + 4 * n4))[j] = sq->ids[j];
	}
	m->ops->to_device(d, h, 5 * n4 + 2 * Bk);
#ifdef DICE_CUDA
	void *args = NULL;              /* ways 4, 6: ds, then u, on the device; ds unmasked */
	if (!strcmp(m->ops->name, "cuda")) {
		char hb[2 * sizeof ds + sizeof u];
		struct denoise_seq d0 = ds;
		nw = 7;
		d0.msk = msk + Bk;
		args = m->ops->alloc(sizeof hb);
		memcpy(hb, &ds, sizeof ds);
		memcpy(hb + sizeof ds, u, sizeof u);
		memcpy(hb + sizeof ds + sizeof u, &d0, sizeof d0);
		m->ops->to_device(args, hb, sizeof hb);
	}
#endif
	m->lazy = 1;
	for (int rep = 0; rep < 2; rep++) {
		for (int w = 0; w < nw; w++) {
			struct model_seq q = *sq;
			long tk = 0;
			q.ids_dev = w ? idd : NULL;
			model_forward(m, &q, 1, NULL);
			m->ops->sync();
			double t = now_s();
			for (int i = 0; i < 20; i++) {
				model_forward(m, &q, 1, NULL);
				if (w < 2)
					continue;
#ifdef DICE_CUDA
				if (w == 5) {
					m->ops->zero(out, n4);
					continue;
				}
				if (w >= 4) {
					char *a = (char *)args + (w == 6 ? sizeof ds + sizeof u : 0);
					if (gpu_denoise(gpu_stream(), m->logits, V, (struct denoise_seq *)a, 1,
					                Bk, (const double *)((char *)args + sizeof ds), out,
					                0, 0.9f, 1.0f, 1, 1.0f) != 0)
						die("round: denoise failed");
					continue;
				}
#endif
				ds.gstep = i;
				if (m->ops->denoise(m->logits, V, &ds, 1, Bk, u, Bk, out, 0, 0.9f, 1.0f, 1,
				                    1.0f) != 0)
					die("round: denoise failed");
				if (w == 3 && i % Bk == Bk - 1)
					tk = m->ops->fetch(ids, out, n4);
			}
			if (tk)
				m->ops->fetch_wait(tk);
			m->ops->sync();
			tm[w] = (now_s() - t) / 20;
		}
		printf("round %s cache %d:", geom, P);
		for (int w = 0; w < nw; w++)
			printf(" %s %.3f ms%s", name[w], tm[w] * 1e3, w < nw - 1 ? ";" : "\n");
		fflush(stdout);
	}
	m->lazy = lazy;
	m->ops->free(d);
#ifdef DICE_CUDA
	if (args)
		m->ops->free(args);
#endif
	free(h), free(ids);
}

/* one workload: up to B requests of P prompt tokens and G new ones, decoded together */
static void bench_one(struct model *m, const char *preset, int B, int P, int G, double bw,
                      const char *geom, const char *dtn)
{
	const struct model_config *c = &m->cfg;
	struct sampler_opts o;
	int fw = 0, ntok = 0, want = B;
	double t, floor_ms = model_weight_bytes(c, m->dtype) / bw * 1e3;

	sampler_opts_default(&o);
	if (sampler_preset(&o, preset) < 0)
		die("bad preset");
	o.max_tokens = G, o.mask_id = c->mask_token_id, o.max_active = B;
	B = fit_batch(m, B, (P + G + o.block - 1) / o.block * o.block);
	if (B < 1)
		die("not even one KV cache fits");
	o.max_active = B;
	model_pack_for(m, (long)B * 2 * o.block);      /* (as sampler_run decides it) */
	struct sampler_request *rq = xcalloc((size_t)B, sizeof *rq);
	struct sampler_result *r = xcalloc((size_t)B, sizeof *r);
	int *ids = xmalloc(sizeof(int) * P);
	for (int i = 0; i < P; i++)
		ids[i] = (i * 7919 + 13) % (c->vocab_size - 300);
#ifdef DICE_CUDA
	if (getenv("BENCH_PREFILL") && !strcmp(m->ops->name, "cuda")) {   /* that alone */
		prefill_compare(m, ids, atoi(getenv("BENCH_PREFILL")), P, o.block, geom);
		free(rq), free(r), free(ids);
		return;
	}
#endif
	for (int b = 0; b < B; b++)
		rq[b] = (struct sampler_request){ ids, P, (uint64_t)b };
	/* the decode forward alone: B sequences x one block against a cache of P, logits left
	 * on the device (no sampling) */
	{
		struct kvcache *kv = xcalloc((size_t)B, sizeof *kv);
		struct model_seq *sq = xcalloc((size_t)B, sizeof *sq);
		for (int b = 0; b < B; b++) {
			kvcache_init(&kv[b], m, P + o.block);
			kv[b].len = P;       /* cache contents are whatever: timing only */
			sq[b] = (struct model_seq){ .kv = &kv[b], .ids = ids, .T = o.block, .store = 0, .logits = 1 };
		}
		/* twice first: the second forward of a shape is captured as a CUDA graph (ops->replay),
		 * which is not part of a forward's time */
		model_forward(m, sq, B, NULL);
		model_forward(m, sq, B, NULL);
		t = now_s();
		for (int i = 0; i < 20; i++)
			model_forward(m, sq, B, NULL);
		t = (now_s() - t) / 20;
		printf("decode-forward %s batch %d cache %d: %.3f ms\n", geom, B, P, t * 1e3);
		fflush(stdout);
#ifdef DICE_CUDA
		/* BENCH_TIMELINE=FILE: one more forward with the block timeline armed, its lines
		 * to FILE (bench/timeline.py; a build with -DDICE_TIMELINE) */
		if (getenv("BENCH_TIMELINE") && !strcmp(m->ops->name, "cuda")) {
			FILE *tf = fopen(getenv("BENCH_TIMELINE"), "w");
			if (!tf || gpu_timeline(1, tf) < 0) {
				fprintf(stderr, "model-logits: %s: %s\n", getenv("BENCH_TIMELINE"), tf ?
				        "BENCH_TIMELINE wants a build with -DDICE_TIMELINE (config.mk's "
				        "NVCCEXTRA)" : strerror(errno));
			} else {
				model_forward(m, sq, B, NULL);
				printf("timeline %s: %d blocks\n", getenv("BENCH_TIMELINE"),
				       gpu_timeline(0, tf));
			}
			if (tf)
				fclose(tf);
		}
		/* the same forward with CUDA graphs and programmatic dependent launch on and off
		 * (BENCH_MODES=1; 30 forwards each; both default to on) */
		if (getenv("BENCH_MODES") && !strcmp(m->ops->name, "cuda")) {
			for (int mode = 0; mode < 4; mode++) {
				gpu_set_graphs(mode & 1);
				gpu_set_pdl(mode >> 1);
				model_forward(m, sq, B, NULL);
				model_forward(m, sq, B, NULL);
				t = now_s();
				for (int i = 0; i < 30; i++)
					model_forward(m, sq, B, NULL);
				t = (now_s() - t) / 30;
				printf("decode-mode %s batch %d cache %d graphs %s pdl %s: %.3f ms\n", geom, B,
				       P, mode & 1 ? "on" : "off", mode >> 1 ? "on" : "off", t * 1e3);
				fflush(stdout);
			}
			gpu_set_graphs(-1);
			gpu_set_pdl(-1);
		}
		if (getenv("BENCH_OPS") && !strcmp(m->ops->name, "cuda"))
			ops_breakdown(m, sq, B, 10, t * 1e3);
		if (getenv("BENCH_OPS") && !strcmp(getenv("BENCH_OPS"), "2") &&
		    !strcmp(m->ops->name, "cuda") && B > 1)
			prefill_breakdown(m, ids, B, P, o.block);
		if (getenv("BENCH_SKIP") && !strcmp(m->ops->name, "cuda"))
			skip_breakdown(m, sq, B, geom, P);
#endif
		/* forwards of up to 64 rows: the same forward queued 20 times with one wait at the
		 * end (the device's time, as the sampler's device mode keeps it busy), and the one
		 * of every steps-th forward of the sampler, a block's first step with the block
		 * before stored (2 blocks a sequence, the first committed) */
		if (B * 2 * o.block <= 64 && P >= o.block) {
			int lazy = m->lazy;
			double ta, t8 = 0;
			struct model_seq *s8 = xcalloc((size_t)B, sizeof *s8);
			m->lazy = 1;
			model_forward(m, sq, B, NULL);
			m->ops->sync();
			ta = now_s();
			for (int i = 0; i < 20; i++)
				model_forward(m, sq, B, NULL);
			m->ops->sync();
			ta = (now_s() - ta) / 20;
			for (int b = 0; b < B; b++)
				s8[b] = (struct model_seq){ .kv = &kv[b], .ids = ids, .T = 2 * o.block,
				                            .commit_rows = o.block, .logits = 1,
				                            .logits_from = o.block };
			for (int i = 0; i < 22; i++) {  /* (the first two: the graph's capture) */
				if (i == 2) {
					m->ops->sync();
					t8 = now_s();
				}
				for (int b = 0; b < B; b++)
					kv[b].len = P - o.block;
				model_forward(m, s8, B, NULL);
			}
			m->ops->sync();
			t8 = (now_s() - t8) / 20;
			m->lazy = lazy;
#ifdef DICE_CUDA
			/* BENCH_OPS=1: that forward's ops too (twice: one forward each, the cache
			 * set back before) */
			for (int i = 0; i < 2 && getenv("BENCH_OPS") && !strcmp(m->ops->name, "cuda"); i++) {
				for (int b = 0; b < B; b++)
					kv[b].len = P - o.block;
				ops_breakdown(m, s8, B, 1, t8 * 1e3);
			}
#endif
			for (int b = 0; b < B; b++)
				kv[b].len = P;
			free(s8);
			printf("decode-queued %s batch %d cache %d: %.3f ms a forward without a wait "
			       "between; %.3f ms with the block before stored (%d rows a sequence)\n",
			       geom, B, P, ta * 1e3, t8 * 1e3, 2 * o.block);
			fflush(stdout);
			if (getenv("BENCH_ROUND") && B == 1 && o.block <= 32)
				round_breakdown(m, sq, o.block, geom, P);
		}
		for (int b = 0; b < B; b++)
			kvcache_free(&kv[b], m);
		free(kv), free(sq);
	}
	/* batch 1: the prompt's prefill forward alone (the sampler's first), to tell the decoding
	 * forwards' mean apart from it */
	double pre = 0;
	if (B == 1 && P >= o.block) {
		struct kvcache kv;
		kvcache_init(&kv, m, P + o.block);
		struct model_seq sq = { .kv = &kv, .ids = ids, .T = P / o.block * o.block, .store = 1 };
		model_forward(m, &sq, 1, NULL);
		kv.len = 0;
		pre = now_s();
		model_forward(m, &sq, 1, NULL);
		pre = now_s() - pre;
		kvcache_free(&kv, m);
		printf("prefill-forward %s P %d: %.3f ms\n", geom, sq.T, pre * 1e3);
	}
	int trace = getenv("BENCH_TRACE") != NULL;
	if (trace)
		tr_trace(m, 1, 0);
#ifdef DICE_CUDA
	const struct ops *np_keep = m->ops;
	if (getenv("BENCH_NSYS") && sscanf(getenv("BENCH_NSYS"), "%d,%d", &np_from, &np_to) == 2) {
		np_real = m->ops, np_table = *m->ops, np_n = 0;
		np_table.sample = np_sample;
		m->ops = &np_table;
	}
#endif
	t = now_s();
	if (sampler_run(m, &o, rq, B, r, NULL, NULL) < 0)
		die("sampling failed");
	t = now_s() - t;
#ifdef DICE_CUDA
	m->ops = np_keep;
#endif
	if (trace)
		tr_trace(m, 0, t);
	for (int b = 0; b < B; b++) {
		ntok += r[b].n;
		if (r[b].forwards > fw)
			fw = r[b].forwards;
		sampler_result_free(&r[b]);
	}
	printf("engine %s %s %s batch %d (asked %d) P %d G %d: %.3f s, %d forwards, %.3f ms/forward, "
	       "%.3f forwards/token, %.1f tokens/s, weights %.3f GB, floor %.3f ms, %.1f%% of floor\n",
	       m->ops->name, dtn, geom, B, want, P, G, t, fw, t * 1e3 / fw, (double)fw * B / ntok,
	       ntok / t, model_weight_bytes(c, m->dtype) / 1e9, floor_ms, 100 * floor_ms / (t * 1e3 / fw));
	if (pre > 0 && fw > 1) {
		double dms = (t - pre) * 1e3 / (fw - 1);
		printf("engine-decode %s batch 1: %.3f ms/forward without the prefill forward, %.1f%% of "
		       "floor\n", geom, dms, 100 * floor_ms / dms);
	}
	fflush(stdout);
	free(rq), free(r), free(ids);
}

/* Host weights of geometry c for timing, fast: every matrix is a view of one pool of random
 * values (uniform, std 1/sqrt(I), already in dtype dt so that model_init copies it as it is),
 * every norm a view of a vector of ones. The values do not matter for the time; each matrix
 * still gets its own device copy. Returns the two allocations to free (pool, ones). */
static void bench_weights(struct model_weights *w, const struct model_config *c, enum dice_dtype dt,
                          void **pool, float **ones)
{
	size_t C = c->hidden_size, I = c->intermediate_size, QD = (size_t)c->num_heads * c->head_dim;
	size_t n = (size_t)c->vocab_size * C, es = dice_dtype_size(dt), nn = C > I ? C : I;
	struct wref mat, norm;
	struct rng r;
	float sc = 1.7320508f / sqrtf((float)I);

	if (QD * C > n)
		n = QD * C;
	if (I * C > n)
		n = I * C;
	*pool = xmalloc(n * es);
	*ones = xmalloc(nn * sizeof **ones);
	rng_seed(&r, 1);
	for (size_t i = 0; i < n; i++) {
		float f = (rng_uniformf(&r) * 2.0f - 1.0f) * sc;
		if (dt == DICE_F32)
			((float *)*pool)[i] = f;
		else
			((uint16_t *)*pool)[i] = dt == DICE_BF16 ? dice_f32_to_bf16(f) : dice_f32_to_f16(f);
	}
	for (size_t i = 0; i < nn; i++)
		(*ones)[i] = 1.0f;
	mat = (struct wref){ *pool, dt };
	norm = (struct wref){ *ones, DICE_F32 };
	memset(w, 0, sizeof *w);
	w->nlayers = c->num_layers;
	w->layers = xcalloc((size_t)c->num_layers, sizeof *w->layers);
	for (int l = 0; l < c->num_layers; l++)
		w->layers[l] = (struct layer_weights){ norm, mat, mat, mat, mat, norm, norm, norm, mat,
		                                       mat, mat };
	w->embed = w->lm_head = mat;
	w->final_norm = norm;
}

/* bench DEVICE DTYPE GEOM BATCH[:G],... P G PRESET */
static int cmd_bench(char **argv)
{
	struct model_config c;
	struct model_weights w;
	struct model m;
	const struct ops *ops = ops_get(argv[0]);
	enum dice_dtype dt = !strcmp(argv[1], "bf16") ? DICE_BF16 : !strcmp(argv[1], "fp16") ? DICE_F16 : DICE_F32;
	int P = atoi(argv[4]), G = atoi(argv[5]);
	double t, bw;
	char *list = xstrdup(argv[3]), *save = NULL;

	if (!ops || geometry(&c, argv[2]) < 0)
		die("bad backend or geometry");
	bw = copy_bandwidth(ops);
	printf("copy bandwidth (%s, 1 GiB device-to-device x10, read+write counted): %.1f GB/s\n",
	       ops->name, bw / 1e9);
	t = now_s();
	void *pool;
	float *ones;
	bench_weights(&w, &c, dt, &pool, &ones);
	if (model_init(&m, &c, &w, ops, dt) < 0)
		die("model_init failed");
	fprintf(stderr, "random weights + upload: %.1f s\n", now_s() - t);
	free(pool), free(ones), free(w.layers);
	for (char *it = strtok_r(list, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(it, ':');
		bench_one(&m, argv[6], atoi(it), P, colon ? atoi(colon + 1) : G, bw, argv[2], argv[1]);
	}
	model_free(&m);
	free(list);
	return 0;
}

int main(int argc, char **argv)
{
	util_set_progname(argv[0]);
	if (argc == 4 && !strcmp(argv[1], "write"))
		return cmd_write(argv[2], argv[3]);
	if (argc >= 7 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	if (argc == 9 && !strcmp(argv[1], "bench"))
		return cmd_bench(argv + 2);
	fprintf(stderr, "usage: model-logits write DIR SEED | run DIR DEVICE DTYPE OUTDIR G ID... | bench DEVICE DTYPE GEOM BATCH[:G],... P G PRESET\n");
	return 2;
}
