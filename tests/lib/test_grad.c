/* test_grad: the backward of every CPU op (lib/ops_bwd_cpu.c) against central finite
 * differences of the forward op (lib/ops_cpu.c): the scalar L = sum(R * y) with a fixed
 * random R (accumulated in double), so dy = R. Also the weighted cross-entropy, AdamW
 * against a double-precision transcription of PyTorch's update, zero and sumsq. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "rng.h"
#include "test.h"

static const struct ops *o;
static struct rng r;

static float *rnd(size_t n, float sc)
{
	float *x = malloc(n * sizeof *x);
	for (size_t i = 0; i < n; i++)
		x[i] = sc * (float)rng_normal(&r);
	return x;
}

static double dotd(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* the op under test as L(params) */
typedef double (*lossfn)(void *ctx);

/* max |numeric - analytic| / max(max |analytic|, 1e-3) over the n entries of x */
static double fd_err(lossfn f, void *ctx, float *x, const float *g, size_t n, float h)
{
	double maxg = 1e-3, maxe = 0;
	for (size_t i = 0; i < n; i++) {
		float x0 = x[i];
		x[i] = x0 + h;
		double lp = f(ctx);
		x[i] = x0 - h;
		double lm = f(ctx);
		x[i] = x0;
		double num = (lp - lm) / (2.0 * h);
		if (fabs(g[i]) > maxg)
			maxg = fabs(g[i]);
		if (fabs(num - g[i]) > maxe)
			maxe = fabs(num - g[i]);
	}
	return maxe / maxg;
}

#define TOL 3e-3

/* ---------------------------------------------------------------- matmul */
struct mm { float *x, *w, *y, *R; int N, in, out; };
static double mm_loss(void *c)
{
	struct mm *a = c;
	o->matmul(a->y, a->x, a->w, DICE_F32, a->N, a->in, a->out);
	return dotd(a->y, a->R, (size_t)a->N * a->out);
}

static void test_matmul(void)
{
	struct mm a = { .N = 5, .in = 7, .out = 6 };
	a.x = rnd(35, 1), a.w = rnd(42, 0.5f), a.y = rnd(30, 1), a.R = rnd(30, 1);
	float *dx = malloc(35 * 4), *dw = calloc(42, 4);
	o->matmul_backward(dx, dw, a.R, a.x, a.w, DICE_F32, 5, 7, 6);
	CHECK(fd_err(mm_loss, &a, a.x, dx, 35, 1e-2f) < TOL, "matmul dx");
	CHECK(fd_err(mm_loss, &a, a.w, dw, 42, 1e-2f) < TOL, "matmul dw");
	/* dw accumulates */
	float *dw2 = malloc(42 * 4);
	memcpy(dw2, dw, 42 * 4);
	o->matmul_backward(NULL, dw2, a.R, a.x, a.w, DICE_F32, 5, 7, 6);
	int ok = 1;
	for (int i = 0; i < 42; i++)
		ok &= fabsf(dw2[i] - 2 * dw[i]) <= 1e-5f * (1 + fabsf(dw[i]));
	CHECK(ok, "matmul dw accumulates, dx NULL skipped");
	/* bf16 weights: dx uses the rounded weights */
	uint16_t wb[42];
	float wr[42], dxb[35];
	for (int i = 0; i < 42; i++) {
		wb[i] = dice_f32_to_bf16(a.w[i]);
		wr[i] = dice_bf16_to_f32(wb[i]);
	}
	o->matmul_backward(dxb, NULL, a.R, a.x, wb, DICE_BF16, 5, 7, 6);
	o->matmul_backward(dx, NULL, a.R, a.x, wr, DICE_F32, 5, 7, 6);
	CHECK(!memcmp(dx, dxb, sizeof dxb), "matmul dx with bf16 weights");
	free(a.x), free(a.w), free(a.y), free(a.R), free(dx), free(dw), free(dw2);
}

/* ---------------------------------------------------------------- rmsnorm */
struct rn { float *x, *w, *y, *R; int N, C; };
static double rn_loss(void *c)
{
	struct rn *a = c;
	o->rmsnorm(a->y, a->x, a->w, DICE_F32, a->N, a->C, 1e-6f);
	return dotd(a->y, a->R, (size_t)a->N * a->C);
}

static void test_rmsnorm(void)
{
	struct rn a = { .N = 4, .C = 8 };
	a.x = rnd(32, 1), a.w = rnd(8, 1), a.y = rnd(32, 1), a.R = rnd(32, 1);
	float *dx = malloc(32 * 4), *dw = calloc(8, 4);
	o->rmsnorm_backward(dx, dw, a.R, a.x, a.w, DICE_F32, 4, 8, 1e-6f);
	CHECK(fd_err(rn_loss, &a, a.x, dx, 32, 1e-2f) < TOL, "rmsnorm dx");
	CHECK(fd_err(rn_loss, &a, a.w, dw, 8, 1e-2f) < TOL, "rmsnorm dw");
	/* in place: dx may equal dy */
	float *d2 = malloc(32 * 4);
	memcpy(d2, a.R, 32 * 4);
	o->rmsnorm_backward(d2, NULL, d2, a.x, a.w, DICE_F32, 4, 8, 1e-6f);
	CHECK(!memcmp(d2, dx, 32 * 4), "rmsnorm dx in place");
	free(a.x), free(a.w), free(a.y), free(a.R), free(dx), free(dw), free(d2);
}

/* ---------------------------------------------------------------- rope */
struct rp { float *x, *y, *R; int *pos; };
static double rp_loss(void *c)
{
	struct rp *a = c;
	memcpy(a->y, a->x, 3 * 2 * 8 * 4);
	o->rope(a->y, a->pos, 3, 2, 8, 10000.0f);
	return dotd(a->y, a->R, 48);
}

static void test_rope(void)
{
	int pos[3] = { 0, 5, 37 };
	struct rp a = { .pos = pos };
	a.x = rnd(48, 1), a.y = rnd(48, 1), a.R = rnd(48, 1);
	float *dx = malloc(48 * 4);
	memcpy(dx, a.R, 48 * 4);
	o->rope_backward(dx, pos, 3, 2, 8, 10000.0f);
	CHECK(fd_err(rp_loss, &a, a.x, dx, 48, 1e-2f) < TOL, "rope dx");
	free(a.x), free(a.y), free(a.R), free(dx);
}

/* ---------------------------------------------------------------- swiglu */
struct sw { float *g, *u, *y, *R; };
static double sw_loss(void *c)
{
	struct sw *a = c;
	o->swiglu(a->y, a->g, a->u, 3, 10);
	return dotd(a->y, a->R, 30);
}

static void test_swiglu(void)
{
	struct sw a;
	a.g = rnd(30, 2), a.u = rnd(30, 1), a.y = rnd(30, 1), a.R = rnd(30, 1);
	float *dg = malloc(30 * 4), *du = malloc(30 * 4);
	o->swiglu_backward(dg, du, a.R, a.g, a.u, 3, 10);
	CHECK(fd_err(sw_loss, &a, a.g, dg, 30, 1e-2f) < TOL, "swiglu dgate");
	CHECK(fd_err(sw_loss, &a, a.u, du, 30, 1e-2f) < TOL, "swiglu dup");
	free(a.g), free(a.u), free(a.y), free(a.R), free(dg), free(du);
}

/* ---------------------------------------------------------------- attention */
/* two packed SFT samples [x_t | x_0] of n = 8 and 4 tokens: T = S = 24, GQA 4:2 */
enum { AT = 24, NH = 4, NKV = 2, HD = 8 };
struct at { float *q, *k, *v, *y, *R; struct attn_mask *m; };
static double at_loss(void *c)
{
	struct at *a = c;
	o->attention(a->y, a->q, a->k, a->v, AT, AT, NH, NKV, HD, a->m);
	return dotd(a->y, a->R, (size_t)AT * NH * HD);
}

static void test_attention(void)
{
	static int pos[AT], seg[AT];
	static uint8_t nz[AT];
	int i = 0;
	for (int s = 0; s < 2; s++) {
		int n = s ? 4 : 8;
		for (int h = 0; h < 2; h++)
			for (int t = 0; t < n; t++, i++)
				pos[i] = t, seg[i] = s, nz[i] = !h;
	}
	struct attn_mask m = { .block = 4, .qpos = pos, .kpos = pos, .qseg = seg, .kseg = seg,
	                       .qnoisy = nz, .knoisy = nz };
	size_t nq = (size_t)AT * NH * HD, nk = (size_t)AT * NKV * HD;
	struct at a = { .m = &m };
	a.q = rnd(nq, 1), a.k = rnd(nk, 1), a.v = rnd(nk, 1), a.y = rnd(nq, 1), a.R = rnd(nq, 1);
	float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
	at_loss(&a);
	o->attention_backward(dq, dk, dv, a.R, a.q, a.k, a.v, a.y, AT, AT, NH, NKV, HD, &m);
	CHECK(fd_err(at_loss, &a, a.q, dq, nq, 1e-2f) < TOL, "attention dq (SFT mask, packed, GQA)");
	CHECK(fd_err(at_loss, &a, a.k, dk, nk, 1e-2f) < TOL, "attention dk");
	CHECK(fd_err(at_loss, &a, a.v, dv, nk, 1e-2f) < TOL, "attention dv");
	free(a.q), free(a.k), free(a.v), free(a.y), free(a.R), free(dq), free(dk), free(dv);
}

/* ---------------------------------------------------------------- embed */
struct em { float *w, *y, *R; int *ids; };
static double em_loss(void *c)
{
	struct em *a = c;
	o->embed(a->y, a->ids, a->w, DICE_F32, 5, 6);
	return dotd(a->y, a->R, 30);
}

static void test_embed(void)
{
	int ids[5] = { 3, 0, 3, 9, 1 };
	struct em a = { .ids = ids };
	a.w = rnd(60, 1), a.y = rnd(30, 1), a.R = rnd(30, 1);
	float *dw = calloc(60, 4);
	o->embed_backward(dw, ids, a.R, 5, 6);
	CHECK(fd_err(em_loss, &a, a.w, dw, 60, 1e-2f) < TOL, "embed dw (repeated ids add up)");
	free(a.w), free(a.y), free(a.R), free(dw);
}

/* ---------------------------------------------------------------- cross-entropy */
struct ce { float *l, *loss, *d; int *t; float *w; };
static double ce_loss(void *c)
{
	struct ce *a = c;
	double s = 0;
	o->cross_entropy(a->loss, a->d, a->l, a->t, a->w, 4, 11);
	for (int n = 0; n < 4; n++)
		s += a->loss[n];
	return s;
}

static void test_cross_entropy(void)
{
	int t[4] = { 2, -1, 10, 0 };
	float w[4] = { 1.0f, 5.0f, 0.25f, 3.0f };
	struct ce a = { .t = t, .w = w };
	a.l = rnd(44, 2), a.loss = malloc(16), a.d = malloc(44 * 4);
	float *g = malloc(44 * 4);
	o->cross_entropy(a.loss, g, a.l, t, w, 4, 11);
	CHECK(fd_err(ce_loss, &a, a.l, g, 44, 1e-2f) < TOL, "cross_entropy dlogits (weights)");
	double lse = 0;
	for (int i = 0; i < 11; i++)
		lse += exp(a.l[22 + i]);
	lse = log(lse);
	CHECK_NEAR(a.loss[2], 0.25 * (lse - a.l[22 + 10]), 1e-5, "cross_entropy value");
	int zero = a.loss[1] == 0;
	for (int i = 0; i < 11; i++)
		zero &= g[11 + i] == 0;
	CHECK(zero, "cross_entropy: target -1 row has no loss, no gradient");
	memcpy(a.d, a.l, 44 * 4);
	o->cross_entropy(a.loss, a.d, a.d, t, w, 4, 11);
	CHECK(!memcmp(a.d, g, 44 * 4), "cross_entropy in place");
	free(a.l), free(a.loss), free(a.d), free(g);
}

/* ---------------------------------------------------------------- adamw, sumsq, zero */
static void test_adamw(void)
{
	enum { n = 9 };
	float *p = rnd(n, 1), m[n] = { 0 }, v[n] = { 0 };
	double pd[n], md[n] = { 0 }, vd[n] = { 0 };
	struct adamw_step s = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
	                        .weight_decay = 0.1f, .gscale = 0.5f };
	double err = 0;
	for (int i = 0; i < n; i++)
		pd[i] = p[i];
	for (int step = 1; step <= 3; step++) {
		float *g = rnd(n, 1);
		s.step = step;
		o->adamw(p, m, v, g, n, &s);
		for (int i = 0; i < n; i++) {
			double gi = 0.5 * g[i];
			pd[i] *= 1 - 1e-2 * 0.1;
			md[i] = 0.9 * md[i] + 0.1 * gi;
			vd[i] = 0.999 * vd[i] + 0.001 * gi * gi;
			double mh = md[i] / (1 - pow(0.9, step)), vh = vd[i] / (1 - pow(0.999, step));
			pd[i] -= 1e-2 * mh / (sqrt(vh) + 1e-8);
		}
		free(g);
	}
	for (int i = 0; i < n; i++)
		if (fabs(pd[i] - p[i]) > err)
			err = fabs(pd[i] - p[i]);
	CHECK(err < 1e-5, "adamw: 3 steps as PyTorch's formula (decoupled decay, bias correction)");
	CHECK_NEAR(o->sumsq(p, n), dotd(p, p, n), 1e-9, "sumsq");
	o->zero(p, n * sizeof *p);
	CHECK(o->sumsq(p, n) == 0, "zero");
	free(p);
}

int main(void)
{
	o = ops_get("cpu");
	rng_seed(&r, 7);
	test_matmul();
	test_rmsnorm();
	test_rope();
	test_swiglu();
	test_attention();
	test_embed();
	test_cross_entropy();
	test_adamw();
	return test_done();
}
