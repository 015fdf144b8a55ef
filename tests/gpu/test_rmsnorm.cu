/* test_rmsnorm: the CUDA rmsnorm against the CPU twin for fp32/bf16/fp16 weights, row widths
 * below and above one block, and in place (y == x). */
#include "gpu_test.h"

static void one(enum dice_dtype dt, int N, int C, int inplace)
{
	size_t n = (size_t)N * C;
	float *x = gt_rand(n, -3, 3), *ref = (float *)xmalloc(n * sizeof(float));
	void *w = gt_rand_w(C, dt, -2, 2);
	float *dx = (float *)gt_up(x, n * sizeof(float));
	void *dw = gt_up(w, C * dice_dtype_size(dt));
	float *dy = inplace ? dx : gt_poisoned(n);
	char what[96];

	H->rmsnorm(ref, x, w, dt, N, C, 1e-6f);
	G->rmsnorm(dy, dx, dw, dt, N, C, 1e-6f);
	float *y = gt_down(dy, n);
	snprintf(what, sizeof what, "rmsnorm dt=%d N=%d C=%d%s", (int)dt, N, C, inplace ? " in place" : "");
	gt_compare(what, y, ref, n, 1e-6, 1e-5);
	free(x); free(ref); free(w); free(y);
	G->free(dx); G->free(dw);
	if (!inplace)
		G->free(dy);
}

int main(void)
{
	if (gt_init(12))
		return 0;
	one(DICE_F32, 7, 100, 0);
	one(DICE_F32, 33, 4096, 0);
	one(DICE_BF16, 5, 2048, 0);
	one(DICE_F16, 5, 1000, 0);
	one(DICE_BF16, 64, 128, 1);          /* the per-head q/k norm shape */
	one(DICE_F32, 3, 5, 1);
	one(DICE_F16, 9, 1001, 0);
	return test_done();
}
