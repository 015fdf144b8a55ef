/* test_rmsnorm_bwd: the CUDA rmsnorm backward against the CPU twin: dx written, dw
 * accumulated onto random values over many rows (the per-head q/k norm shape), 16-bit
 * weights, dx in place over dy, dw skipped (NULL). */
#include "gpu_test.h"

static void one(enum dice_dtype dt, int N, int C, int inplace, int want_dw)
{
	size_t n = (size_t)N * C;
	float *x = gt_rand(n, -3, 3), *dy = gt_rand(n, -1, 1), *dw0 = gt_rand(C, -1, 1);
	void *w = gt_rand_w(C, dt, -2, 2);
	float *rdx = (float *)xmalloc(n * sizeof(float)), *rdw = (float *)xmalloc(C * sizeof(float));
	char what[128];

	memcpy(rdw, dw0, C * sizeof(float));
	float *x_d = (float *)gt_up(x, n * sizeof(float)), *dy_d = (float *)gt_up(dy, n * sizeof(float));
	float *dw_d = want_dw ? (float *)gt_up(dw0, C * sizeof(float)) : NULL;
	void *w_d = gt_up(w, C * dice_dtype_size(dt));
	float *dx_d = inplace ? dy_d : gt_poisoned(n);

	H->rmsnorm_backward(rdx, want_dw ? rdw : NULL, dy, x, w, dt, N, C, 1e-6f);
	G->rmsnorm_backward(dx_d, dw_d, dy_d, x_d, w_d, dt, N, C, 1e-6f);
	float *got = gt_down(dx_d, n);
	snprintf(what, sizeof what, "rmsnorm_backward dx dt=%d N=%d C=%d%s", (int)dt, N, C,
	         inplace ? " in place" : "");
	gt_compare(what, got, rdx, n, 1e-5, 1e-4);
	free(got);
	if (want_dw) {
		got = gt_down(dw_d, C);
		snprintf(what, sizeof what, "rmsnorm_backward dw += dt=%d N=%d C=%d", (int)dt, N, C);
		gt_compare(what, got, rdw, C, 1e-4, 1e-4);
		free(got);
	}
	free(x); free(dy); free(dw0); free(w); free(rdx); free(rdw);
	G->free(x_d); G->free(dy_d); G->free(dw_d); G->free(w_d);
	if (!inplace)
		G->free(dx_d);
}

int main(void)
{
	if (gt_init(32))
		return 0;
	one(DICE_F32, 7, 100, 0, 1);
	one(DICE_F32, 33, 4096, 0, 1);
	one(DICE_F32, 4096, 128, 1, 1);       /* q/k norm: N*NH rows of HD, in place */
	one(DICE_BF16, 5, 2048, 0, 1);
	one(DICE_F16, 9, 1001, 1, 0);
	one(DICE_F32, 3, 5, 0, 1);
	return test_done();
}
