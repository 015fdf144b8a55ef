/* test_matmul: the CUDA matmul (both paths: the decode kernel and cuBLAS) against the CPU twin
 * for fp32, bf16 and fp16 weights on random data, odd shapes included. Two references: the
 * twin itself (tolerance of the weight dtype: the GPU rounds x to it) and the twin fed x
 * rounded to the weight dtype (fp32 accumulation tolerance: the same function). */
#include "gpu_test.h"

static const char *dtname[] = { "f32", "bf16", "f16" };

static void round_x(float *xr, const float *x, size_t n, enum dice_dtype dt)
{
	for (size_t i = 0; i < n; i++)
		xr[i] = dt == DICE_BF16 ? dice_bf16_to_f32(dice_f32_to_bf16(x[i]))
		      : dt == DICE_F16 ? dice_f16_to_f32(dice_f32_to_f16(x[i])) : x[i];
}

/* path: 0 through the table, 1 decode kernel, 2 cuBLAS */
static void one(enum dice_dtype dt, int N, int in, int out, int path)
{
	size_t wn = (size_t)out * in;
	float *x = gt_rand((size_t)N * in, -1, 1), *xr = gt_rand((size_t)N * in, 0, 1);
	void *w = gt_rand_w(wn, dt, -1, 1);
	float *ref = (float *)xmalloc(sizeof(float) * N * out), *ref2 = (float *)xmalloc(sizeof(float) * N * out);
	float *dx = (float *)gt_up(x, sizeof(float) * N * in);
	void *dw = gt_up(w, wn * dice_dtype_size(dt));
	float *dy = gt_poisoned((size_t)N * out);
	char what[128];

	H->matmul(ref, x, w, dt, N, in, out);
	round_x(xr, x, (size_t)N * in, dt);
	H->matmul(ref2, xr, w, dt, N, in, out);
	if (path == 0)
		G->matmul(dy, dx, dw, dt, N, in, out);
	else if (path == 1)
		CHECK(gpu_matmul_gemv(gpu_stream(), dy, dx, dw, dt, N, in, out) == 0, "gemv launch");
	else
		CHECK(gpu_matmul_cublas(gpu_stream(), dy, dx, dw, dt, N, in, out) == 0, "cublas launch");
	float *y = gt_down(dy, (size_t)N * out);
	const char *pn[] = { "ops", "gemv", "cublas" };
	double s = sqrt((double)in);
	double tol = dt == DICE_BF16 ? s / 256 : dt == DICE_F16 ? s / 1024 : 1e-5 * s;
	snprintf(what, sizeof what, "matmul %s %s N=%d in=%d out=%d vs twin", pn[path], dtname[dt], N, in, out);
	gt_compare(what, y, ref, (size_t)N * out, tol, dt == DICE_F32 ? 1e-5 : 1e-2);
	snprintf(what, sizeof what, "matmul %s %s N=%d in=%d out=%d vs twin on rounded x", pn[path], dtname[dt], N, in, out);
	gt_compare(what, y, ref2, (size_t)N * out, 1e-5 * s, 1e-5);
	free(x); free(xr); free(w); free(ref); free(ref2); free(y);
	G->free(dx); G->free(dw); G->free(dy);
}

int main(void)
{
	if (gt_init(11))
		return 0;
	for (int dt = 0; dt < 3; dt++) {
		enum dice_dtype d = (enum dice_dtype)dt;
		one(d, 1, 512, 300, 1);
		one(d, 4, 1000, 77, 1);
		one(d, 8, 2048, 513, 1);
		one(d, 6, 4104, 33, 1);
		one(d, 4, 1000, 77, 2);
		one(d, 9, 512, 300, 2);
		one(d, 64, 1024, 257, 2);
		one(d, 4, 1000, 77, 0);
		one(d, 3, 1002, 65, 0);          /* in not a multiple of 8: cuBLAS fallback */
		one(d, 130, 768, 384, 0);
	}
	return test_done();
}
