/* test_swiglu_bwd: the CUDA swiglu backward against the CPU twin, dgate separate and in
 * place over dy; swiglu_backward_xb (bf16 results) against its twin and, bitwise, against
 * swiglu_backward then cast_bf16 on the GPU; swiglu_cat_bb and swiglu_cat_backward_bb (bf16
 * rows [gate | up]) against their twins, on the 16-byte path (I % 8 == 0) and the scalar
 * one. */
#include "gpu_test.h"

static void one(int N, int C, int inplace)
{
	size_t n = (size_t)N * C;
	float *g = gt_rand(n, -8, 8), *u = gt_rand(n, -2, 2), *dy = gt_rand(n, -1, 1);
	float *rdg = (float *)xmalloc(n * sizeof(float)), *rdu = (float *)xmalloc(n * sizeof(float));
	float *g_d = (float *)gt_up(g, n * sizeof(float)), *u_d = (float *)gt_up(u, n * sizeof(float));
	float *dy_d = (float *)gt_up(dy, n * sizeof(float));
	float *dg_d = inplace ? dy_d : gt_poisoned(n), *du_d = gt_poisoned(n);
	char what[96];

	H->swiglu_backward(rdg, rdu, dy, g, u, N, C);
	G->swiglu_backward(dg_d, du_d, dy_d, g_d, u_d, N, C);
	float *dg = gt_down(dg_d, n), *du = gt_down(du_d, n);
	snprintf(what, sizeof what, "swiglu_backward dgate N=%d C=%d%s", N, C, inplace ? " in place" : "");
	gt_compare(what, dg, rdg, n, 1e-6, 1e-5);
	snprintf(what, sizeof what, "swiglu_backward dup N=%d C=%d", N, C);
	gt_compare(what, du, rdu, n, 1e-6, 1e-5);
	free(g); free(u); free(dy); free(rdg); free(rdu); free(dg); free(du);
	G->free(g_d); G->free(u_d); G->free(dy_d); G->free(du_d);
	if (!inplace)
		G->free(dg_d);
}

/* bf16 bits of n values as floats, for the comparisons */
static float *widen(const uint16_t *b, size_t n)
{
	float *f = (float *)xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		f[i] = dice_bf16_to_f32(b[i]);
	return f;
}

static void one_xb(int N, int C)
{
	size_t n = (size_t)N * C;
	float *g = gt_rand(n, -8, 8), *u = gt_rand(n, -2, 2), *dy = gt_rand(n, -1, 1);
	uint16_t *rb = (uint16_t *)xmalloc(n * 4), *b = (uint16_t *)xmalloc(n * 4);
	float *g_d = (float *)gt_up(g, n * sizeof(float)), *u_d = (float *)gt_up(u, n * sizeof(float));
	float *dy_d = (float *)gt_up(dy, n * sizeof(float));
	float *dg_d = gt_poisoned(n), *du_d = gt_poisoned(n);
	void *xb_d = G->alloc(n * 4), *cb_d = G->alloc(n * 4);
	char what[96];

	/* the twin */
	H->swiglu_backward_xb(rb, rb + n, dy, g, u, N, C);
	G->swiglu_backward_xb(xb_d, (char *)xb_d + n * 2, dy_d, g_d, u_d, N, C);
	G->to_host(b, xb_d, n * 4);
	float *gf = widen(b, 2 * n), *rf = widen(rb, 2 * n);
	snprintf(what, sizeof what, "swiglu_backward_xb N=%d C=%d vs twin", N, C);
	gt_compare(what, gf, rf, 2 * n, 1e-6, 1e-2);       /* an expf ulp may flip a rounding */
	/* the fp32 op then the cast, bitwise */
	G->swiglu_backward(dg_d, du_d, dy_d, g_d, u_d, N, C);
	G->cast_bf16(cb_d, dg_d, n);
	G->cast_bf16((char *)cb_d + n * 2, du_d, n);
	G->to_host(rb, cb_d, n * 4);
	snprintf(what, sizeof what, "swiglu_backward_xb N=%d C=%d bitwise equal to swiglu_backward "
	         "then cast_bf16", N, C);
	CHECK(memcmp(b, rb, n * 4) == 0, what);
	free(g); free(u); free(dy); free(rb); free(b); free(gf); free(rf);
	G->free(g_d); G->free(u_d); G->free(dy_d); G->free(dg_d); G->free(du_d);
	G->free(xb_d); G->free(cb_d);
}

/* swiglu_cat_bb and swiglu_cat_backward_bb: gate, up drawn as bf16, the results widened;
 * an expf ulp may flip a bf16 rounding (one ulp: 2^-8 relative) */
static void one_cat(int N, int I)
{
	size_t n = (size_t)N * I;
	float *gu = gt_rand(2 * n, -8, 8), *dy = gt_rand(n, -1, 1);
	uint16_t *gub = (uint16_t *)xmalloc(n * 4 + 2), *rh = (uint16_t *)xmalloc(n * 2 + 2);
	uint16_t *rd = (uint16_t *)xmalloc(n * 4 + 2), *b = (uint16_t *)xmalloc(n * 4 + 2);
	char what[96];

	for (size_t i = 0; i < 2 * n; i++)
		gub[i] = dice_f32_to_bf16(gu[i]);
	void *gub_d = gt_up(gub, n * 4), *h_d = G->alloc(n * 2), *d_d = G->alloc(n * 4);
	float *dy_d = (float *)gt_up(dy, n * 4);
	H->swiglu_cat_bb(rh, gub, N, I);
	G->swiglu_cat_bb(h_d, gub_d, N, I);
	G->to_host(b, h_d, n * 2);
	float *gf = widen(b, n), *rf = widen(rh, n);
	snprintf(what, sizeof what, "swiglu_cat_bb N=%d I=%d vs twin", N, I);
	gt_compare(what, gf, rf, n, 1e-6, 1e-2);
	free(gf); free(rf);
	H->swiglu_cat_backward_bb(rd, dy, gub, N, I);
	G->swiglu_cat_backward_bb(d_d, dy_d, gub_d, N, I);
	G->to_host(b, d_d, n * 4);
	gf = widen(b, 2 * n);
	rf = widen(rd, 2 * n);
	snprintf(what, sizeof what, "swiglu_cat_backward_bb N=%d I=%d vs twin", N, I);
	gt_compare(what, gf, rf, 2 * n, 1e-6, 1e-2);
	free(gf); free(rf); free(gu); free(dy); free(gub); free(rh); free(rd); free(b);
	G->free(gub_d); G->free(h_d); G->free(d_d); G->free(dy_d);
}

int main(void)
{
	if (gt_init(34))
		return 0;
	one(4, 6144, 0);
	one(3, 1001, 1);
	one_xb(4, 6144);
	one_xb(3, 1001);
	one_cat(5, 6144);
	one_cat(3, 1001);
	one_cat(1, 8);
	return test_done();
}
