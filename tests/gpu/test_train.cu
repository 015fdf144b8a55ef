/* test_train: the CUDA optimizer-side ops against the CPU twins: zero (part of a buffer),
 * sumsq (double accumulation, many blocks), AdamW at steps 1 and 10 with clipping scale and
 * weight decay; and that the table has every training entry. */
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
	return test_done();
}
