/* test_rope_bwd: the CUDA RoPE backward (rotation by minus the angle, in place) against the
 * CPU twin, and that it undoes the CUDA forward. */
#include "gpu_test.h"

static void one(int N, int NH, int HD, float theta, int maxpos)
{
	size_t n = (size_t)N * NH * HD;
	float *x = gt_rand(n, -1, 1), *x0 = (float *)xmalloc(n * sizeof(float));
	int *pos = (int *)xmalloc(N * sizeof(int));
	char what[128];

	memcpy(x0, x, n * sizeof(float));
	for (int i = 0; i < N; i++)
		pos[i] = (int)rng_below(&R, (uint64_t)maxpos);
	float *x_d = (float *)gt_up(x, n * sizeof(float));
	int *pos_d = (int *)gt_up(pos, N * sizeof(int));
	H->rope_backward(x, pos, N, NH, HD, theta);
	G->rope_backward(x_d, pos_d, N, NH, HD, theta);
	float *got = gt_down(x_d, n);
	snprintf(what, sizeof what, "rope_backward N=%d NH=%d HD=%d theta=%g pos<%d", N, NH, HD,
	         theta, maxpos);
	gt_compare(what, got, x, n, 2e-6, 1e-5);
	free(got);
	G->rope(x_d, pos_d, N, NH, HD, theta);         /* forward after backward: identity */
	got = gt_down(x_d, n);
	snprintf(what, sizeof what, "rope(rope_backward(x)) = x N=%d HD=%d", N, HD);
	gt_compare(what, got, x0, n, 1e-5, 1e-5);
	free(got); free(x); free(x0); free(pos);
	G->free(x_d); G->free(pos_d);
}

int main(void)
{
	if (gt_init(33))
		return 0;
	one(5, 4, 64, 10000.0f, 16);
	one(37, 8, 128, 1000000.0f, 40000);
	one(3, 3, 6, 500.0f, 100);
	return test_done();
}
