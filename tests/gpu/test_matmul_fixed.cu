/* test_matmul_fixed: the batch-invariant matmul (struct ops matmul_fixed) against its CPU twin
 * (ops_cpu's matmul) on random data, fp32/bf16/fp16 weights, both kernels of the 16-bit path
 * and the fallbacks; then batch invariance, bit for bit: rows r0 .. r0+M-1 of a 512-row
 * product equal the M-row product of the same rows for M = 1, 4, 17, 64, 512 (the row at
 * another place in its tile), and the streaming and tiled kernels give the same bits; last,
 * every tile shape of the tiled kernel, split by segment or not, gives the streaming kernel's
 * bits (odd N, out not a multiple of any tile, in not a multiple of 32, 1 to 8 segments). */
#include "gpu_test.h"

static const char *dtname[] = { "f32", "bf16", "f16" };

static void round_x(float *xr, const float *x, size_t n, enum dice_dtype dt)
{
	for (size_t i = 0; i < n; i++)
		xr[i] = dt == DICE_BF16 ? dice_bf16_to_f32(dice_f32_to_bf16(x[i]))
		      : dt == DICE_F16 ? dice_f16_to_f32(dice_f32_to_f16(x[i])) : x[i];
}

/* y = the product on the GPU: path 0 through the table, 1 streaming, 2 tiled kernel */
static float *product(const float *dx, const void *dw, enum dice_dtype dt, int N, int in,
                      int out, int path)
{
	float *dy = gt_poisoned((size_t)N * out);
	if (path == 0)
		G->matmul_fixed(dy, dx, dw, dt, N, in, out);
	else
		CHECK(gpu_matmul_fixed_path(gpu_stream(), dy, dx, dw, dt, N, in, out, path) == 0,
		      "matmul_fixed kernel launch");
	float *y = gt_down(dy, (size_t)N * out);
	G->free(dy);
	return y;
}

static void vs_twin(enum dice_dtype dt, int N, int in, int out, int path)
{
	size_t wn = (size_t)out * in;
	float *x = gt_rand((size_t)N * in, -1, 1), *xr = gt_rand((size_t)N * in, 0, 1);
	void *w = gt_rand_w(wn, dt, -1, 1);
	float *ref = (float *)xmalloc(sizeof(float) * N * out);
	float *dx = (float *)gt_up(x, sizeof(float) * N * in);
	void *dw = gt_up(w, wn * dice_dtype_size(dt));
	const char *pn[] = { "ops", "streaming", "tiled" };
	char what[160];

	round_x(xr, x, (size_t)N * in, dt);
	H->matmul(ref, xr, w, dt, N, in, out);
	float *y = product(dx, dw, dt, N, in, out, path);
	double s = sqrt((double)in);
	snprintf(what, sizeof what, "matmul_fixed %s %s N=%d in=%d out=%d vs twin on rounded x",
	         pn[path], dtname[dt], N, in, out);
	gt_compare(what, y, ref, (size_t)N * out, 1e-5 * s, 1e-5);
	free(x); free(xr); free(w); free(ref); free(y);
	G->free(dx); G->free(dw);
}

/* rows that differ in any bit */
static int rows_differ(const float *a, const float *b, int M, int out)
{
	int bad = 0;
	for (int r = 0; r < M; r++)
		bad += memcmp(a + (size_t)r * out, b + (size_t)r * out, sizeof(float) * out) != 0;
	return bad;
}

static void invariance(enum dice_dtype dt, int in, int out)
{
	const int NB = 512, Ms[] = { 1, 4, 17, 64, 512 };
	size_t wn = (size_t)out * in;
	float *x = gt_rand((size_t)NB * in, -1, 1);
	void *w = gt_rand_w(wn, dt, -1, 1);
	float *dx = (float *)gt_up(x, sizeof(float) * NB * in);
	void *dw = gt_up(w, wn * dice_dtype_size(dt));
	float *full = product(dx, dw, dt, NB, in, out, 0);
	char what[160];

	for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
		int M = Ms[i], r0 = M == NB ? 0 : 37 + 5 * (int)i;
		float *y = product(dx + (size_t)r0 * in, dw, dt, M, in, out, 0);
		int bad = rows_differ(y, full + (size_t)r0 * out, M, out);
		if (bad)
			printf("#   %d of %d rows differ\n", bad, M);
		snprintf(what, sizeof what, "matmul_fixed %s in=%d out=%d: rows %d..%d alone (M=%d) "
		         "bitwise equal to the same rows of M=512", dtname[dt], in, out, r0, r0 + M - 1, M);
		CHECK(bad == 0, what);
		free(y);
	}
	if (dt != DICE_F32) {
		for (int path = 1; path <= 2; path++) {
			float *y = product(dx, dw, dt, NB, in, out, path);
			int bad = rows_differ(y, full, NB, out);
			snprintf(what, sizeof what, "matmul_fixed %s in=%d out=%d: the %s kernel on 512 rows "
			         "bitwise equal to the table's", dtname[dt], in, out,
			         path == 1 ? "streaming" : "tiled");
			CHECK(bad == 0, what);
			free(y);
		}
	}
	free(x); free(w); free(full);
	G->free(dx); G->free(dw);
}

/* every variant of the tiled kernel, split or not, bitwise equal to the streaming kernel */
static void tiles(enum dice_dtype dt, int N, int in, int out)
{
	size_t wn = (size_t)out * in;
	float *x = gt_rand((size_t)N * in, -1, 1);
	void *w = gt_rand_w(wn, dt, -1, 1);
	float *dx = (float *)gt_up(x, sizeof(float) * N * in);
	void *dw = gt_up(w, wn * dice_dtype_size(dt));
	float *ref = product(dx, dw, dt, N, in, out, 1);
	char what[200];

	for (int v = -1; v < gpu_matmul_fixed_variants(); v++) {
		for (int split = 0; split < 2; split++) {
			float *dy = gt_poisoned((size_t)N * out);
			CHECK(gpu_matmul_fixed_tiled(gpu_stream(), dy, dx, dw, dt, N, in, out, v,
			                             v < 0 ? -1 : split) == 0, "matmul_fixed tiled launch");
			float *y = gt_down(dy, (size_t)N * out);
			int bad = rows_differ(y, ref, N, out);
			if (bad)
				printf("#   %d of %d rows differ\n", bad, N);
			snprintf(what, sizeof what, "matmul_fixed %s N=%d in=%d out=%d: tiled %s%s bitwise "
			         "equal to the streaming kernel", dtname[dt], N, in, out,
			         gpu_matmul_fixed_variant_name(v), split ? " split" : "");
			CHECK(bad == 0, what);
			free(y);
			G->free(dy);
			if (v < 0)
				break;
		}
	}
	free(x); free(w); free(ref);
	G->free(dx); G->free(dw);
}

int main(void)
{
	if (gt_init(17))
		return 0;
	for (int dt = 0; dt < 3; dt++) {
		enum dice_dtype d = (enum dice_dtype)dt;
		vs_twin(d, 1, 512, 300, 0);
		vs_twin(d, 4, 1000, 77, 0);
		vs_twin(d, 17, 2048, 513, 0);
		vs_twin(d, 64, 1024, 257, 0);
		vs_twin(d, 130, 768, 384, 0);
		vs_twin(d, 3, 1002, 65, 0);            /* in not a multiple of 8: the plain kernel */
		vs_twin(d, 200, 4096, 640, 0);         /* several segments of the inputs */
		if (d != DICE_F32) {
			vs_twin(d, 5, 1000, 77, 2);        /* the tiled kernel on few rows */
			vs_twin(d, 70, 2056, 300, 1);      /* the streaming kernel on many */
			vs_twin(d, 33, 4096, 640, 2);
			vs_twin(d, 33, 4096, 640, 1);
		}
	}
	invariance(DICE_BF16, 2560, 9000);         /* one segment of the inputs ... */
	invariance(DICE_BF16, 1024, 3000);         /* ... three */
	invariance(DICE_BF16, 4096, 640);          /* ... eight */
	invariance(DICE_F16, 2056, 264);
	invariance(DICE_F32, 1024, 300);
	tiles(DICE_BF16, 203, 1000, 300);          /* 8 segments, the last block short */
	tiles(DICE_BF16, 517, 2560, 264);          /* 8 segments */
	tiles(DICE_BF16, 130, 4096, 2560);         /* 4 segments */
	tiles(DICE_BF16, 33, 2048, 4104);          /* 2 segments */
	tiles(DICE_F16, 301, 2560, 9000);          /* 1 segment */
	tiles(DICE_F16, 77, 1000, 77);
	return test_done();
}
