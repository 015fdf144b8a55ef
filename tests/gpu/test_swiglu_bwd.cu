/* test_swiglu_bwd: the CUDA swiglu backward against the CPU twin, dgate separate and in
 * place over dy. */
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

int main(void)
{
	if (gt_init(34))
		return 0;
	one(4, 6144, 0);
	one(3, 1001, 1);
	return test_done();
}
