/* test_embed_bwd: the CUDA embedding backward (scatter-add) against the CPU twin, onto a
 * random dw, with many repeated ids (atomics). */
#include "gpu_test.h"

static void one(int V, int N, int C)
{
	size_t nw = (size_t)V * C, ny = (size_t)N * C;
	float *dw = gt_rand(nw, -1, 1), *dy = gt_rand(ny, -1, 1);
	int *ids = (int *)xmalloc(N * sizeof(int));
	char what[96];

	for (int i = 0; i < N; i++)
		ids[i] = (int)rng_below(&R, (uint64_t)V);
	float *dw_d = (float *)gt_up(dw, nw * sizeof(float)), *dy_d = (float *)gt_up(dy, ny * sizeof(float));
	int *ids_d = (int *)gt_up(ids, N * sizeof(int));
	H->embed_backward(dw, ids, dy, N, C);
	G->embed_backward(dw_d, ids_d, dy_d, N, C);
	float *got = gt_down(dw_d, nw);
	snprintf(what, sizeof what, "embed_backward V=%d N=%d C=%d", V, N, C);
	gt_compare(what, got, dw, nw, 1e-5, 1e-5);
	free(dw); free(dy); free(ids); free(got);
	G->free(dw_d); G->free(dy_d); G->free(ids_d);
}

int main(void)
{
	if (gt_init(35))
		return 0;
	one(100, 17, 64);
	one(7, 500, 96);              /* every id repeated many times */
	one(5000, 300, 256);
	return test_done();
}
