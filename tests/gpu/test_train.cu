/* test_train: the CUDA optimizer-side ops against the CPU twins: zero (part of a buffer),
 * sumsq (double accumulation, many blocks), AdamW at steps 1 and 10 with clipping scale and
 * weight decay, the multi-tensor AdamW with bf16 copies (adamw_multi), rmsnorm and swiglu
 * with bf16 outputs (rmsnorm_xb, swiglu_xb); and that the table has every training entry. */
#include "gpu_test.h"

static void t_zero(void)
{
	size_t n = 1000;
	float *x = gt_rand(n, -1, 1);
	float *x_d = (float *)gt_up(x, n * sizeof(float));

	H->zero(x + 100, 500 * sizeof(float));
	G->zero(x_d + 100, 500 * sizeof(float));
	float *got = gt_down(x_d, n);
	gt_compare("zero 500 of 1000", got, x, n, 0, 0);
	free(x); free(got);
	G->free(x_d);
}

static void t_sumsq(size_t n)
{
	float *x = gt_rand(n, -3, 3);
	float *x_d = (float *)gt_up(x, n * sizeof(float));
	double want = H->sumsq(x, n), got = G->sumsq(x_d, n);
	double err = fabs(got - want);
	char what[64];

	printf("# sumsq n=%zu: got %.17g want %.17g\n", n, got, want);
	snprintf(what, sizeof what, "sumsq n=%zu", n);
	CHECK(err <= 1e-9 * fabs(want) + 1e-12, what);
	free(x);
	G->free(x_d);
}

static void t_adamw(size_t n, int step, float wd, float gscale)
{
	float *p = gt_rand(n, -1, 1), *m = gt_rand(n, -0.1f, 0.1f), *v = gt_rand(n, 0, 0.01f);
	float *g = gt_rand(n, -1, 1);
	struct adamw_step s = { 1e-3f, 0.9f, 0.999f, 1e-8f, wd, gscale, step };
	float *p_d = (float *)gt_up(p, n * 4), *m_d = (float *)gt_up(m, n * 4);
	float *v_d = (float *)gt_up(v, n * 4), *g_d = (float *)gt_up(g, n * 4);
	char what[96];

	if (step == 1)
		for (size_t i = 0; i < n; i++)
			m[i] = v[i] = 0.0f;
	G->to_device(m_d, m, n * 4);
	G->to_device(v_d, v, n * 4);
	H->adamw(p, m, v, g, n, &s);
	G->adamw(p_d, m_d, v_d, g_d, n, &s);
	float *gp = gt_down(p_d, n), *gm = gt_down(m_d, n), *gv = gt_down(v_d, n);
	snprintf(what, sizeof what, "adamw p n=%zu step=%d wd=%g gscale=%g", n, step, wd, gscale);
	gt_compare(what, gp, p, n, 1e-6, 1e-5);
	snprintf(what, sizeof what, "adamw m step=%d", step);
	gt_compare(what, gm, m, n, 1e-7, 1e-5);
	snprintf(what, sizeof what, "adamw v step=%d", step);
	gt_compare(what, gv, v, n, 1e-9, 1e-5);
	free(p); free(m); free(v); free(g); free(gp); free(gm); free(gv);
	G->free(p_d); G->free(m_d); G->free(v_d); G->free(g_d);
}

/* adamw_multi on nt tensors of the sizes n[i] laid end to end (odd sizes misalign the
 * following ones: the scalar path; multiples of 4 from an aligned start: float4), every
 * third without a bf16 copy, weight decay per tensor: p, m, v against the CPU twin, and the
 * bf16 copy == bf16(p) of the GPU's own p, bit for bit */
static void t_adamw_multi(const size_t *n, int nt, int step)
{
	size_t tot = 0, off = 0;
	for (int i = 0; i < nt; i++)
		tot += n[i];
	float *p = gt_rand(tot, -1, 1), *m = gt_rand(tot, -0.1f, 0.1f), *v = gt_rand(tot, 0, 0.01f);
	float *g = gt_rand(tot, -1, 1);
	struct adamw_step s = { 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.7f, step };
	float *p_d = (float *)gt_up(p, tot * 4), *m_d = (float *)gt_up(m, tot * 4);
	float *v_d = (float *)gt_up(v, tot * 4), *g_d = (float *)gt_up(g, tot * 4);
	uint16_t *lp_d = (uint16_t *)G->alloc(tot * 2 + 16), *lp = (uint16_t *)xmalloc(tot * 2 + 2);
	struct adamw_tensor *th = (struct adamw_tensor *)xmalloc(nt * sizeof *th);
	struct adamw_tensor *td = (struct adamw_tensor *)xmalloc(nt * sizeof *td);
	char what[128];

	G->zero(lp_d, tot * 2);
	for (int i = 0; i < nt; i++) {
		float wd = i % 2 ? 0.0f : 0.1f;
		th[i] = (struct adamw_tensor){ p + off, m + off, v + off, g + off, NULL, n[i], wd };
		td[i] = (struct adamw_tensor){ p_d + off, m_d + off, v_d + off, g_d + off,
		                               i % 3 == 2 ? NULL : lp_d + off, n[i], wd };
		off += n[i];
	}
	H->adamw_multi(th, nt, &s);
	G->adamw_multi(td, nt, &s);
	float *gp = gt_down(p_d, tot), *gm = gt_down(m_d, tot), *gv = gt_down(v_d, tot);
	G->to_host(lp, lp_d, tot * 2);
	snprintf(what, sizeof what, "adamw_multi p: %d tensors, %zu params, step %d", nt, tot, step);
	gt_compare(what, gp, p, tot, 1e-6, 1e-5);
	gt_compare("adamw_multi m", gm, m, tot, 1e-7, 1e-5);
	gt_compare("adamw_multi v", gv, v, tot, 1e-9, 1e-5);
	size_t bad = 0;
	off = 0;
	for (int i = 0; i < nt; i++) {
		for (size_t j = off; j < off + n[i]; j++)
			bad += lp[j] != (i % 3 == 2 ? 0 : dice_f32_to_bf16(gp[j]));
		off += n[i];
	}
	printf("# adamw_multi: %zu bf16 copies differ\n", bad);
	CHECK(bad == 0, "adamw_multi bf16 copies == bf16(p), none where lp is NULL");
	free(p); free(m); free(v); free(g); free(gp); free(gm); free(gv); free(lp); free(th);
	free(td);
	G->free(p_d); G->free(m_d); G->free(v_d); G->free(g_d); G->free(lp_d);
}

/* rmsnorm_xb and swiglu_xb: bitwise the GPU's own fp32 op + cast_bf16, and near the CPU
 * twins (one bf16 rounding: 2^-8 relative) */
static void t_xb(int N, int C, enum dice_dtype wdt)
{
	size_t n = (size_t)N * C;
	float *x = gt_rand(n, -2, 2), *u = gt_rand(n, -2, 2);
	void *w = gt_rand_w((size_t)C, wdt, 0.5f, 1.5f);
	uint16_t *ref = (uint16_t *)xmalloc(n * 2 + 2), *a = (uint16_t *)xmalloc(n * 2 + 2);
	uint16_t *b = (uint16_t *)xmalloc(n * 2 + 2);
	float *x_d = (float *)gt_up(x, n * 4), *u_d = (float *)gt_up(u, n * 4), *y_d = gt_poisoned(n);
	void *w_d = gt_up(w, (size_t)C * dice_dtype_size(wdt));
	uint16_t *yb_d = (uint16_t *)G->alloc(n * 2 + 16);
	float *fr = (float *)xmalloc(n * 4 + 4), *fg = (float *)xmalloc(n * 4 + 4);
	char what[96];

	for (int op = 0; op < 2; op++) {
		const char *name = op ? "swiglu_xb" : "rmsnorm_xb";
		if (op) {
			H->swiglu_xb(ref, x, u, N, C);
			G->swiglu_xb(yb_d, x_d, u_d, N, C);
			G->swiglu(y_d, x_d, u_d, N, C);
		} else {
			H->rmsnorm_xb(ref, x, w, wdt, N, C, 1e-6f);
			G->rmsnorm_xb(yb_d, x_d, w_d, wdt, N, C, 1e-6f);
			G->rmsnorm(y_d, x_d, w_d, wdt, N, C, 1e-6f);
		}
		G->to_host(a, yb_d, n * 2);
		G->cast_bf16(yb_d, y_d, n);
		G->to_host(b, yb_d, n * 2);
		for (size_t i = 0; i < n; i++) {
			fr[i] = dice_bf16_to_f32(ref[i]);
			fg[i] = dice_bf16_to_f32(a[i]);
		}
		snprintf(what, sizeof what, "%s N=%d C=%d wdt=%d against the twin", name, N, C,
		         (int)wdt);
		gt_compare(what, fg, fr, n, 1e-6, 8e-3);
		snprintf(what, sizeof what, "%s N=%d C=%d == fp32 op + cast_bf16 (bitwise)", name, N, C);
		CHECK(!memcmp(a, b, n * 2), what);
	}
	free(x); free(u); free(w); free(ref); free(a); free(b); free(fr); free(fg);
	G->free(x_d); G->free(u_d); G->free(y_d); G->free(w_d); G->free(yb_d);
}

int main(void)
{
	if (gt_init(38))
		return 0;
	CHECK(G->matmul_backward && G->rmsnorm_backward && G->rope_backward &&
	      G->swiglu_backward && G->attention_backward && G->embed_backward &&
	      G->cross_entropy && G->zero && G->sumsq && G->adamw, "cuda table has the training ops");
	t_zero();
	t_sumsq(1);
	t_sumsq(1000003);
	t_adamw(100000, 1, 0.0f, 1.0f);
	t_adamw(4097, 10, 0.1f, 0.5f);
	CHECK(G->adamw_multi && G->matmul_xb && G->matmul_backward_xb,
	      "cuda table has the fused mixed-precision entries");
	{
		size_t n[60];
		for (int i = 0; i < 60; i++)        /* 60 > MT_MAX: two launches */
			n[i] = i == 5 ? 100003 : i == 6 ? 2 * 16384 + 4 : i % 4 ? 64 : 2048 + (size_t)i;
		t_adamw_multi(n, 60, 1);
		t_adamw_multi(n, 8, 7);
		size_t one = 16384 * 3;             /* one float4 tensor of exactly 3 chunks */
		t_adamw_multi(&one, 1, 2);
	}
	CHECK(G->rmsnorm_xb && G->swiglu_xb, "cuda table has rmsnorm_xb and swiglu_xb");
	t_xb(37, 2048, DICE_F32);
	t_xb(5, 101, DICE_BF16);            /* odd width: the one-at-a-time paths */
	return test_done();
}
