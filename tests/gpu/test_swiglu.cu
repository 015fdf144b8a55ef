/* test_swiglu: the CUDA swiglu against the CPU twin, vectorised and scalar paths, in place. */
#include "gpu_test.h"

static void one(int N, int C, int inplace)
{
	size_t n = (size_t)N * C;
	float *g = gt_rand(n, -8, 8), *u = gt_rand(n, -2, 2), *ref = (float *)xmalloc(n * sizeof(float));
	float *dg = (float *)gt_up(g, n * sizeof(float)), *du = (float *)gt_up(u, n * sizeof(float));
	float *dy = inplace ? dg : gt_poisoned(n);
	char what[96];

	H->swiglu(ref, g, u, N, C);
	G->swiglu(dy, dg, du, N, C);
	float *y = gt_down(dy, n);
	snprintf(what, sizeof what, "swiglu N=%d C=%d%s", N, C, inplace ? " in place" : "");
	gt_compare(what, y, ref, n, 1e-6, 1e-5);
	free(g); free(u); free(ref); free(y);
	G->free(dg); G->free(du);
	if (!inplace)
		G->free(dy);
}

int main(void)
{
	if (gt_init(14))
		return 0;
	one(4, 6144, 0);
	one(3, 1001, 0);
	one(129, 512, 1);
	return test_done();
}
