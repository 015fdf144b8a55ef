/* test_matmul_fixed: the batch-invariant matmul (struct ops matmul_fixed) against its CPU twin
 * (ops_cpu's matmul) on random data, fp32/bf16/fp16 weights, both kernels of the 16-bit path
 * and the fallbacks; then batch invariance, bit for bit: rows r0 .. r0+M-1 of a 512-row
 * product equal the M-row product of the same rows for M = 1, 4, 17, 64, 512 (the row at
 * another place in its tile), and the streaming and tiled kernels give the same bits; then
 * every tile shape of the tiled kernel (the wgmma ones of matmul_wgmma.cu too, on an H100 or
 * H200: its cp.async kernel's and its TMA kernel's; they always walk the segments), split by
 * segment or not, gives the streaming kernel's bits (odd N, out not a multiple of any tile,
 * in not a multiple of 32, 1 to 8 segments, a last segment of an odd number of 32-input blocks);
 * last, on the engine's shapes (SDAR 1.7B / 4B / 8B, 33 to 8192 rows), random ones and one
 * with more tiles than the GPU holds at once and a half last stage (the TMA kernel's blocks
 * walk several tiles), every wgmma tile shape and the path the engine takes give the bits
 * of the mma.sync kernel (on other GPUs: the path alone); then matmul_fixed_glu (the SwiGLU
 * folded into the input conversion) against its twin and, bitwise, against swiglu_cat then
 * matmul_fixed, at every tile shape; then the decode forward's row counts, 512, 640 (the
 * batch-128 sampler's usual forward) and 1024, on the engine's shapes: every wgmma tile shape
 * (the split ones of mx_kernel too: (tile, segment) units, the last warp of a tile adding the
 * segments' sums; its tiles of 80, 112 and 160 rows) and the path as the engine takes it,
 * with the split variants off (the default) and on (DICE_MX_SPLIT=1's switch), twice each
 * (the split counters are back at zero after a launch). matmul_fixed_gu (the gate/up product
 * making the SwiGLU in pairs of tiles, streaming or staged) runs before the glu part, and
 * with the staged part ("staged"). With the argument "engine" only the
 * last part and three tiles() shapes run; with "packed" only the packed copies' part (every
 * kernel of up to 32 rows on the copy bitwise equal to it on row-major w), which the whole
 * run does too. */
#include <stdarg.h>

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

/* random x (N, in) and w (out, in) in [-1, 1], on the host and on the device */
struct mfd {
	float *x, *dx;
	void *w, *dw;
};

static struct mfd mfd_new(enum dice_dtype dt, int N, int in, int out)
{
	struct mfd d;
	size_t wn = (size_t)out * in;
	d.x = gt_rand((size_t)N * in, -1, 1);
	d.w = gt_rand_w(wn, dt, -1, 1);
	d.dx = (float *)gt_up(d.x, sizeof(float) * N * in);
	d.dw = gt_up(d.w, wn * dice_dtype_size(dt));
	return d;
}

static void mfd_free(struct mfd *d)
{
	free(d->x); free(d->w);
	G->free(d->dx); G->free(d->dw);
}

static void vs_twin(enum dice_dtype dt, int N, int in, int out, int path)
{
	struct mfd d = mfd_new(dt, N, in, out);
	float *xr = gt_rand((size_t)N * in, 0, 1);
	float *ref = (float *)xmalloc(sizeof(float) * N * out);
	const char *pn[] = { "ops", "streaming", "tiled", "staged" };
	char what[160];

	round_x(xr, d.x, (size_t)N * in, dt);
	H->matmul(ref, xr, d.w, dt, N, in, out);
	float *y = product(d.dx, d.dw, dt, N, in, out, path);
	double s = sqrt((double)in);
	snprintf(what, sizeof what, "matmul_fixed %s %s N=%d in=%d out=%d vs twin on rounded x",
	         pn[path], dtname[dt], N, in, out);
	gt_compare(what, y, ref, (size_t)N * out, 1e-5 * s, 1e-5);
	free(xr); free(ref); free(y);
	mfd_free(&d);
}

/* check: rows 0..M-1 of y and ref are the same bits (frees y); the check's name from the
 * printf format fmt */
static void __attribute__((format(printf, 5, 6)))
same_rows(float *y, const float *ref, int M, int out, const char *fmt, ...)
{
	char what[256];
	va_list ap;
	int bad = 0;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	for (int r = 0; r < M; r++)
		bad += memcmp(y + (size_t)r * out, ref + (size_t)r * out, sizeof(float) * out) != 0;
	if (bad)
		printf("#   %d of %d rows differ\n", bad, M);
	CHECK(bad == 0, what);
	free(y);
}

static void invariance(enum dice_dtype dt, int in, int out)
{
	const int NB = 512, Ms[] = { 1, 4, 17, 64, 512 };
	struct mfd d = mfd_new(dt, NB, in, out);
	float *full = product(d.dx, d.dw, dt, NB, in, out, 0);

	for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
		int M = Ms[i], r0 = M == NB ? 0 : 37 + 5 * (int)i;
		float *y = product(d.dx + (size_t)r0 * in, d.dw, dt, M, in, out, 0);
		same_rows(y, full + (size_t)r0 * out, M, out,
		          "matmul_fixed %s in=%d out=%d: rows %d..%d alone (M=%d) "
		          "bitwise equal to the same rows of M=512", dtname[dt], in, out, r0, r0 + M - 1, M);
	}
	if (dt != DICE_F32) {
		for (int path = 1; path <= 2; path++) {
			float *y = product(d.dx, d.dw, dt, NB, in, out, path);
			same_rows(y, full, NB, out,
			          "matmul_fixed %s in=%d out=%d: the %s kernel on 512 rows "
			          "bitwise equal to the table's", dtname[dt], in, out,
			          path == 1 ? "streaming" : "tiled");
		}
	}
	free(full);
	mfd_free(&d);
}

/* every variant of the tiled kernel, split or not, bitwise equal to the streaming kernel */
static void tiles(enum dice_dtype dt, int N, int in, int out)
{
	struct mfd d = mfd_new(dt, N, in, out);
	float *ref = product(d.dx, d.dw, dt, N, in, out, 1);

	for (int v = -1; v < gpu_matmul_fixed_variants(); v++) {
		for (int split = 0; split < 2; split++) {
			float *dy = gt_poisoned((size_t)N * out);
			CHECK(gpu_matmul_fixed_tiled(gpu_stream(), dy, d.dx, d.dw, dt, N, in, out, v,
			                             v < 0 ? -1 : split) == 0, "matmul_fixed tiled launch");
			same_rows(gt_down(dy, (size_t)N * out), ref, N, out,
			          "matmul_fixed %s N=%d in=%d out=%d: tiled %s%s bitwise "
			          "equal to the streaming kernel", dtname[dt], N, in, out,
			          gpu_matmul_fixed_variant_name(v), split ? " split" : "");
			G->free(dy);
			if (v < 0)
				break;
		}
	}
	free(ref);
	mfd_free(&d);
}

/* the tiled path with the wgmma kernels off (the mma.sync kernel) against each wgmma tile
 * shape and the engine's choice, bit for bit */
static void wgmma_vs_mma(enum dice_dtype dt, int N, int in, int out)
{
	struct mfd d = mfd_new(dt, N, in, out);

	gpu_set_wgmma(0);
	float *ref = product(d.dx, d.dw, dt, N, in, out, 2);
	gpu_set_wgmma(-1);
	for (int v = -1; v < gpu_matmul_fixed_variants(); v++) {
		const char *name = gpu_matmul_fixed_variant_name(v);
		if (v >= 0 && strncmp(name, "wgmma", 5))
			continue;
		float *dy = gt_poisoned((size_t)N * out);
		CHECK(gpu_matmul_fixed_tiled(gpu_stream(), dy, d.dx, d.dw, dt, N, in, out, v, 0) == 0,
		      "matmul_fixed tiled launch");
		same_rows(gt_down(dy, (size_t)N * out), ref, N, out,
		          "matmul_fixed %s N=%d in=%d out=%d: tiled %s bitwise equal "
		          "to the mma.sync kernel", dtname[dt], N, in, out, name);
		G->free(dy);
	}
	free(ref);
	mfd_free(&d);
}

/* matmul_fixed_glu (the SwiGLU of gu (N, 2I) = [gate | up] folded into the product's input):
 * against its CPU twin, and bitwise against swiglu_cat then matmul_fixed on the GPU, through
 * the table and through the tiled path at every variant */
static void glu(enum dice_dtype dt, int N, int I, int out, int variants)
{
	float *gu = gt_rand((size_t)N * 2 * I, -4, 4);
	void *w = gt_rand_w((size_t)out * I, dt, -1, 1);
	float *dgu = (float *)gt_up(gu, sizeof(float) * N * 2 * I);
	void *dw = gt_up(w, (size_t)out * I * dice_dtype_size(dt));
	float *dh = gt_poisoned((size_t)N * I), *dy = gt_poisoned((size_t)N * out);
	float *h = (float *)xmalloc(sizeof(float) * N * I);
	float *twin = (float *)xmalloc(sizeof(float) * N * out);
	char what[200];

	/* the twin on the input the GPU multiplies: silu(g) * u rounded to the weights' dtype */
	H->swiglu_cat(h, gu, N, I);
	round_x(h, h, (size_t)N * I, dt);
	H->matmul(twin, h, w, dt, N, I, out);
	CHECK(gpu_swiglu_cat(gpu_stream(), dh, dgu, N, I) == 0, "swiglu_cat launch");
	float *ref = product(dh, dw, dt, N, I, out, 0);
	G->matmul_fixed_glu(dy, dh, dgu, dw, dt, N, I, out);
	float *y = gt_down(dy, (size_t)N * out);
	snprintf(what, sizeof what, "matmul_fixed_glu %s N=%d I=%d out=%d vs twin", dtname[dt], N, I,
	         out);
	/* expf may differ by an ulp from the host's, and the rounding of silu(g) * u (|.| < 16)
	 * then by one 16-bit step (< 0.07, times |w| <= 1) in a few inputs of a row */
	gt_compare(what, y, twin, (size_t)N * out, dt == DICE_F32 ? 1e-4 : 0.15, 1e-3);
	same_rows(y, ref, N, out,
	          "matmul_fixed_glu %s N=%d I=%d out=%d bitwise equal to "
	          "swiglu_cat then matmul_fixed", dtname[dt], N, I, out);
	for (int v = 0; variants && v < gpu_matmul_fixed_variants(); v++) {
		CHECK(gpu_matmul_fixed_glu(gpu_stream(), dy, NULL, dgu, dw, dt, N, I, out, v) == 0,
		      "matmul_fixed_glu tiled launch");
		same_rows(gt_down(dy, (size_t)N * out), ref, N, out,
		          "matmul_fixed_glu %s N=%d I=%d out=%d: tiled %s bitwise "
		          "equal to swiglu_cat then matmul_fixed", dtname[dt], N, I, out,
		          gpu_matmul_fixed_variant_name(v));
	}
	free(gu); free(w); free(h); free(twin); free(ref);
	G->free(dgu); G->free(dw); G->free(dh); G->free(dy);
}

/* the staged streaming kernel (path 3; 4: with one step in flight; up to 8 rows) bitwise
 * against the streaming kernel (path 1 with the staged one off), and against the twin */
static void staged(enum dice_dtype dt, int M, int in, int out)
{
	struct mfd d = mfd_new(dt, M, in, out);

	gpu_set_mfx(0);
	float *ref = product(d.dx, d.dw, dt, M, in, out, 1);
	gpu_set_mfx(-1);
	same_rows(product(d.dx, d.dw, dt, M, in, out, 3), ref, M, out,
	          "matmul_fixed %s N=%d in=%d out=%d: the staged kernel bitwise "
	          "equal to the streaming kernel", dtname[dt], M, in, out);
	same_rows(product(d.dx, d.dw, dt, M, in, out, 4), ref, M, out,
	          "matmul_fixed %s N=%d in=%d out=%d: the staged kernel with one "
	          "step in flight bitwise equal to the streaming kernel", dtname[dt], M, in, out);
	free(ref);
	mfd_free(&d);
	vs_twin(dt, M, in, out, 3);
}

/* matmul_fixed_gu (the gate/up product that also makes the SwiGLU, where the staged kernel
 * pairs each gate tile with its up tile): gu and h bitwise equal to matmul_fixed then
 * swiglu_cat on the GPU, through the table and with each kernel forced (the streaming
 * kernel's pairs, the staged kernel's with two steps in flight, then one); gu against the
 * twin on rounded x, h against the twin's SwiGLU of the GPU's gu (expf to an ulp) and against
 * the twin's h */
static void gu_pairs(enum dice_dtype dt, int N, int in, int I)
{
	struct mfd d = mfd_new(dt, N, in, 2 * I);
	size_t ng = (size_t)N * 2 * I, nh = (size_t)N * I;
	float *ref = product(d.dx, d.dw, dt, N, in, 2 * I, 0);
	float *dref = (float *)gt_up(ref, sizeof(float) * ng), *dh = gt_poisoned(nh);
	float *xr = (float *)xmalloc(sizeof(float) * N * in);
	float *twin = (float *)xmalloc(sizeof(float) * ng), *th = (float *)xmalloc(sizeof(float) * nh);
	float *twh = (float *)xmalloc(sizeof(float) * nh);
	const char *how[] = { "the table", "the streaming kernel", "the staged kernel",
	                      "the staged kernel, one step" };
	char what[200];

	CHECK(gpu_swiglu_cat(gpu_stream(), dh, dref, N, I) == 0, "swiglu_cat launch");
	float *href = gt_down(dh, nh);
	round_x(xr, d.x, (size_t)N * in, dt);
	snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d: the twin makes h",
	         dtname[dt], N, in, I);
	CHECK(H->matmul_fixed_gu(twin, twh, xr, d.w, dt, N, in, I) == 1, what);
	for (int k = 0; k < (N <= 8 && I % 8 == 0 ? 4 : 1); k++) {
		float *dgu = gt_poisoned(ng), *dh2 = gt_poisoned(nh);
		int r = k ? gpu_matmul_fixed_gu(gpu_stream(), dgu, dh2, d.dx, d.dw, dt, N, in, I, k + 1)
		          : G->matmul_fixed_gu(dgu, dh2, d.dx, d.dw, dt, N, in, I);
		snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d, %s: h made (%d)",
		         dtname[dt], N, in, I, how[k], r);
		/* (the staged kernel's pairs with two steps in flight may not fit: 8B's take one;
		 * the streaming kernel's not with 7 or 8 segments) */
		CHECK(k == 3 ? r == 1 : k ? r == 1 || r == -2 : N <= 8 ? r == 0 || r == 1 : r == 0,
		      what);
		if (r < 0) {
			G->free(dgu); G->free(dh2);
			continue;
		}
		float *gu = gt_down(dgu, ng);
		snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d, %s: gu vs twin on "
		         "rounded x", dtname[dt], N, in, I, how[k]);
		gt_compare(what, gu, twin, ng, 1e-5 * sqrt((double)in), 1e-5);
		if (r == 1) {
			float *h = gt_down(dh2, nh);
			H->swiglu_cat(th, gu, N, I);
			snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d, %s: h vs the "
			         "twin's SwiGLU of gu", dtname[dt], N, in, I, how[k]);
			gt_compare(what, h, th, nh, 1e-6, 1e-5);
			/* and the twin's own h: gu's error (as above: 1e-5 (sqrt(in) + |gu|)) times
			 * |d h / d gate| + |d h / d up| <= 2.2 (1 + max |gu|) */
			double mg = 0;
			for (size_t i = 0; i < ng; i++)
				mg = fabs(twin[i]) > mg ? fabs(twin[i]) : mg;
			snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d, %s: h vs twin",
			         dtname[dt], N, in, I, how[k]);
			gt_compare(what, h, twh, nh, 2.2e-5 * (sqrt((double)in) + mg) * (1 + mg),
			           1e-5);
			same_rows(h, href, N, I,
			          "matmul_fixed_gu %s N=%d in=%d I=%d, %s: h bitwise "
			          "equal to matmul_fixed then swiglu_cat", dtname[dt], N, in, I, how[k]);
		}
		same_rows(gu, ref, N, 2 * I,
		          "matmul_fixed_gu %s N=%d in=%d I=%d, %s: gu bitwise equal "
		          "to matmul_fixed", dtname[dt], N, in, I, how[k]);
		G->free(dgu); G->free(dh2);
	}
	free(ref); free(href); free(xr); free(twin); free(th); free(twh);
	G->free(dref); G->free(dh);
	mfd_free(&d);
}

/* the 16-bit copies of the few-row products' inputs: gpu_matmul_fixed16 given x16 (x rounded
 * to w's type) bitwise equal to gpu_matmul_fixed on x; gpu_matmul_fixed_gu16 given x16 and
 * h16 (each kernel: the table's choice, the streaming pairs, the staged pairs at both depths)
 * gu and h bitwise equal to gpu_matmul_fixed_gu's, and h16 the rounding of h */
static void x16(enum dice_dtype dt, int N, int in, int out, int I)
{
	struct mfd d = mfd_new(dt, N, in, out > 2 * I ? out : 2 * I);
	uint16_t *x16h = gt_to16(d.x, (size_t)N * in, dt);
	void *dx16 = gt_up(x16h, (size_t)N * in * 2);
	size_t ng = (size_t)N * 2 * I, nh = (size_t)N * I;
	float *ref = product(d.dx, d.dw, dt, N, in, out, 0), *dy = gt_poisoned((size_t)N * out);

	CHECK(gpu_matmul_fixed16(gpu_stream(), dy, d.dx, dx16, d.dw, dt, N, in, out) == 0,
	      "matmul_fixed16 launch");
	same_rows(gt_down(dy, (size_t)N * out), ref, N, out,
	          "matmul_fixed16 %s N=%d in=%d out=%d: x16 read, bitwise equal to matmul_fixed",
	          dtname[dt], N, in, out);
	for (int k = 1; k <= (N <= 8 ? 4 : 1); k++) {
		float *dgu = gt_poisoned(ng), *dh = gt_poisoned(nh), *dgu2 = gt_poisoned(ng);
		float *dh2 = gt_poisoned(nh);
		void *dh16 = G->alloc(nh * 2);
		int r0 = gpu_matmul_fixed_gu(gpu_stream(), dgu, dh, d.dx, d.dw, dt, N, in, I, k);
		int r1 = gpu_matmul_fixed_gu16(gpu_stream(), dgu2, dh2, dh16, d.dx, dx16, d.dw, dt, N,
		                               in, I, k);
		char what[200];
		snprintf(what, sizeof what, "matmul_fixed_gu16 %s N=%d in=%d I=%d kernel %d: as "
		         "matmul_fixed_gu (%d, %d)", dtname[dt], N, in, I, k, r0, r1);
		CHECK(r0 == r1, what);
		if (r0 == 1) {
			float *h = gt_down(dh, nh), *h2 = gt_down(dh2, nh);
			snprintf(what, sizeof what, "matmul_fixed_gu16 %s N=%d in=%d I=%d kernel %d: "
			         "h16 the rounding of h", dtname[dt], N, in, I, k);
			gt_check16(what, dh16, h, nh, dt);
			same_rows(h2, h, N, I, "matmul_fixed_gu16 %s N=%d in=%d I=%d kernel %d: h "
			          "bitwise equal", dtname[dt], N, in, I, k);
			same_rows(gt_down(dgu2, ng), gt_down(dgu, ng), N, 2 * I, "matmul_fixed_gu16 %s "
			          "N=%d in=%d I=%d kernel %d: gu bitwise equal", dtname[dt], N, in, I, k);
			free(h);
		}
		G->free(dgu); G->free(dh); G->free(dgu2); G->free(dh2); G->free(dh16);
	}
	free(ref); free(x16h);
	G->free(dy); G->free(dx16);
	mfd_free(&d);
}

/* the packed copies (gpu_matmul_fixed_pack): the streaming kernel (8, 16, 32 rows), the
 * staged kernel at both depths and matmul_fixed_gu's pairs (streaming, staged) on the packed
 * copy, bitwise against the same on row-major w; made again after w changes; another shape
 * on the same w not taking it */
static void packed(enum dice_dtype dt, int M, int in, int out)
{
	struct mfd d = mfd_new(dt, M, in, out);
	const char *how[] = { "", "the streaming kernel", "", "the staged kernel",
	                      "the staged kernel, one step" };
	char what[200];
	int I = out / 2;
	float *ref[5] = { NULL }, *gref[5] = { NULL }, *href[5] = { NULL };
	int rref[5];

	for (int pk = 0; pk < 2; pk++) {
		if (pk) {
			snprintf(what, sizeof what, "matmul_fixed_pack %s out=%d in=%d: made", dtname[dt],
			         out, in);
			CHECK(gpu_matmul_fixed_pack(gpu_stream(), d.dw, dt, out, in) == 1, what);
		}
		for (int k = 1; k <= 4; k++) {
			if (k == 2 || (k > 2 && M > 8))
				continue;
			gpu_set_mfx(k == 1 ? 0 : -1);
			float *y = product(d.dx, d.dw, dt, M, in, out, k);
			gpu_set_mfx(-1);
			if (!pk) {
				ref[k] = y;
				continue;
			}
			same_rows(y, ref[k], M, out,
			          "matmul_fixed %s N=%d in=%d out=%d, %s: the packed copy "
			          "bitwise equal to row-major w", dtname[dt], M, in, out, how[k]);
		}
		for (int k = 2; out % 16 == 0 && M <= 8 && k <= 4; k++) {     /* the pairs */
			size_t nh = (size_t)M * I, ng = (size_t)M * out;
			float *dgu = gt_poisoned(ng), *dh = gt_poisoned(nh);
			int r = gpu_matmul_fixed_gu(gpu_stream(), dgu, dh, d.dx, d.dw, dt, M, in, I, k);
			float *gu = gt_down(dgu, ng), *h = gt_down(dh, nh);
			G->free(dgu), G->free(dh);
			if (!pk) {
				rref[k] = r, gref[k] = gu, href[k] = h;
				continue;
			}
			snprintf(what, sizeof what, "matmul_fixed_gu %s N=%d in=%d I=%d, kernel %d: the "
			         "packed copy as row-major w (%d, %d)", dtname[dt], M, in, I, k, rref[k], r);
			CHECK(r == rref[k], what);
			if (r == 1) {
				same_rows(gu, gref[k], M, out,
				          "matmul_fixed_gu %s N=%d in=%d I=%d, kernel %d: gu "
				          "bitwise equal to row-major w's", dtname[dt], M, in, I, k);
				same_rows(h, href[k], M, I,
				          "matmul_fixed_gu %s N=%d in=%d I=%d, kernel %d: h "
				          "bitwise equal to row-major w's", dtname[dt], M, in, I, k);
			} else {
				free(gu), free(h);
			}
		}
	}
	/* w changed: the copy made again; a product of another shape on the same w (its first
	 * outputs) does not take it */
	void *w2 = gt_rand_w((size_t)out * in, dt, -1, 1);
	CHECK(cudaMemcpy(d.dw, w2, (size_t)out * in * dice_dtype_size(dt), cudaMemcpyHostToDevice) ==
	      cudaSuccess, "w changed");
	gpu_matmul_fixed_unpack(d.dw);
	int in2 = in / 2 / 8 * 8 > 8 ? in / 2 / 8 * 8 : 8, out2 = out / 2 > 8 ? out / 2 : 8;
	float *y2 = product(d.dx, d.dw, dt, M, in, out, 1);
	float *yh = product(d.dx, d.dw, dt, M, in2, out2, 1);
	snprintf(what, sizeof what, "matmul_fixed_pack %s out=%d in=%d: made again", dtname[dt],
	         out, in);
	CHECK(gpu_matmul_fixed_pack(gpu_stream(), d.dw, dt, out, in) == 1 &&
	      gpu_matmul_fixed_pack(gpu_stream(), d.dw, dt, out, in) == 1, what);
	same_rows(product(d.dx, d.dw, dt, M, in, out, 1), y2, M, out,
	          "matmul_fixed %s N=%d in=%d out=%d: the copy made again after w "
	          "changed", dtname[dt], M, in, out);
	same_rows(product(d.dx, d.dw, dt, M, in2, out2, 1), yh, M, out2,
	          "matmul_fixed %s N=%d in=%d out=%d: w's values as another "
	          "shape, not the copy of its own", dtname[dt], M, in2, out2);
	gpu_matmul_fixed_unpack(d.dw);
	free(y2), free(yh), free(w2);
	for (int k = 0; k < 5; k++)
		free(ref[k]), free(gref[k]), free(href[k]);
	mfd_free(&d);
}

static void packed_shapes(void)
{
	packed(DICE_BF16, 4, 2560, 6144);
	packed(DICE_BF16, 1, 9728, 2560);
	packed(DICE_BF16, 4, 2560, 19456);
	packed(DICE_F16, 8, 4096, 24576);
	packed(DICE_BF16, 7, 1000, 513);
	packed(DICE_BF16, 3, 264, 1096);
	packed(DICE_F16, 5, 40, 8);
	packed(DICE_BF16, 16, 2560, 6144);
	packed(DICE_BF16, 32, 9728, 2560);
	packed(DICE_F16, 21, 1000, 520);
}

/* the decode forward's row counts on one shape: each wgmma tile shape and the path, twice
 * (split switch off, then on), against the mma.sync kernel, one set of data for both counts */
static void decode_rows(int in, int out)
{
	static const int Ns[] = { 512, 640, 1024 };
	struct mfd d = mfd_new(DICE_BF16, 1024, in, out);

	for (int ni = 0; ni < 3; ni++) {
		int N = Ns[ni];
		gpu_set_wgmma(0);
		float *ref = product(d.dx, d.dw, DICE_BF16, N, in, out, 2);
		gpu_set_wgmma(-1);
		for (int v = -1; v < gpu_matmul_fixed_variants(); v++) {
			const char *name = gpu_matmul_fixed_variant_name(v);
			if (v >= 0 && strncmp(name, "wgmma", 5))
				continue;
			for (int rep = 0; rep < 2; rep++) {
				if (v < 0)
					gpu_set_mx_split(rep);
				float *dy = gt_poisoned((size_t)N * out);
				CHECK(gpu_matmul_fixed_tiled(gpu_stream(), dy, d.dx, d.dw, DICE_BF16, N, in, out,
				                             v, 0) == 0, "matmul_fixed tiled launch");
				same_rows(gt_down(dy, (size_t)N * out), ref, N, out,
				          "matmul_fixed bf16 N=%d in=%d out=%d: tiled %s%s (launch %d) "
				          "bitwise equal to the mma.sync kernel", N, in, out, name,
				          v < 0 ? (rep ? " split on" : " split off") : "", rep + 1);
				G->free(dy);
			}
		}
		gpu_set_mx_split(-1);
		free(ref);
	}
	mfd_free(&d);
}

/* the engine's products (qkv, o, gate/up, down) of SDAR 1.7B, 4B, 8B: C, QD, 2 KVD, I (2 KVD
 * was 1024 before session 7: q/k/v products 1024 outputs short) */
static const int geo[3][4] = { { 2048, 2048, 2048, 6144 }, { 2560, 4096, 2048, 9728 },
                               { 4096, 4096, 2048, 12288 } };

static void decode_shapes(void)
{
	for (int i = 0; i < 3; i++) {                /* 4B first: the decode bench's geometry */
		int gi = (i + 1) % 3, C = geo[gi][0], QD = geo[gi][1], KV2 = geo[gi][2], I = geo[gi][3];
		int ins[] = { C, QD, C, I }, outs[] = { QD + KV2, C, 2 * I, C };
		for (int o = 0; o < 4; o++)
			decode_rows(ins[o], outs[o]);
	}
}

static void x16_shapes(void)
{
	x16(DICE_BF16, 4, 2560, 6144, 9728);       /* SDAR 4B: q/k/v, gate/up (staged pairs) */
	x16(DICE_BF16, 8, 4096, 2560, 9728);       /* 4B's o at 8 rows */
	x16(DICE_BF16, 4, 2048, 4096, 6144);       /* 1.7B: gate/up on the streaming pairs */
	x16(DICE_BF16, 1, 4096, 4096, 12288);      /* 8B's o; its gate/up one step in flight */
	x16(DICE_BF16, 2, 12288, 4096, 64);        /* 8B's down */
	x16(DICE_F16, 7, 1000, 513, 40);           /* short blocks, 8 segments */
	x16(DICE_BF16, 12, 512, 300, 64);          /* past 8 rows: x16 not read, the same bits */
}

int main(int argc, char **argv)
{
	if (gt_init(17))
		return 0;
	if (argc > 1 && !strcmp(argv[1], "packed")) {
		packed_shapes();
		return test_done();
	}
	if (argc > 1 && !strcmp(argv[1], "x16")) {
		x16_shapes();
		return test_done();
	}
	if (argc > 1 && !strcmp(argv[1], "staged")) {
		gu_pairs(DICE_BF16, 4, 2560, 9728);
		gu_pairs(DICE_BF16, 1, 4096, 12288);
		gu_pairs(DICE_BF16, 4, 2048, 6144);
		gu_pairs(DICE_F16, 7, 264, 1096);
		staged(DICE_BF16, 4, 2560, 19456);
		staged(DICE_F16, 4, 9728, 2560);
		staged(DICE_BF16, 7, 1000, 513);
		staged(DICE_BF16, 8, 8, 8);
		staged(DICE_BF16, 6, 264, 9000);
		return test_done();
	}
	if (argc > 1 && !strcmp(argv[1], "engine")) {
		tiles(DICE_BF16, 203, 1000, 300);      /* 8 segments, the last block short */
		tiles(DICE_BF16, 130, 4096, 2560);     /* 4 segments */
		tiles(DICE_BF16, 100, 1000, 520);      /* row tiles of 80, 112, 160 past N */
		decode_shapes();
		return test_done();
	}
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
	invariance(DICE_BF16, 2560, 12296);        /* one segment of the inputs ... */
	invariance(DICE_BF16, 1024, 3000);         /* ... four */
	invariance(DICE_BF16, 4096, 640);          /* ... eight */
	invariance(DICE_F16, 2056, 264);
	invariance(DICE_F32, 1024, 300);
	tiles(DICE_BF16, 203, 1000, 300);          /* 8 segments, the last block short */
	tiles(DICE_BF16, 517, 2560, 264);          /* 8 segments */
	tiles(DICE_BF16, 130, 4096, 2560);         /* 4 segments */
	tiles(DICE_BF16, 33, 2048, 4104);          /* 3 segments */
	tiles(DICE_F16, 301, 2560, 12296);         /* 1 segment */
	tiles(DICE_F16, 77, 1000, 77);
	tiles(DICE_BF16, 99, 2056, 264);           /* 7 segments, the last of 5 blocks: a stage split */
	tiles(DICE_F16, 45, 2080, 12296);          /* 1 segment of 65 blocks: a half last stage */
	tiles(DICE_BF16, 100, 1000, 520);          /* row tiles of 80, 112, 160 past N */
	static const int rows[] = { 33, 517, 1000, 2048 };
	for (int gi = 0, n = 0; gi < 3; gi++) {
		int C = geo[gi][0], QD = geo[gi][1], KV2 = geo[gi][2], I = geo[gi][3];
		int ins[] = { C, QD, C, I }, outs[] = { QD + KV2, C, 2 * I, C };
		for (int o = 0; o < 4; o++, n++)
			wgmma_vs_mma(DICE_BF16, gi == 1 && o == 0 ? 8192 : rows[n % 4], ins[o], outs[o]);
	}
	wgmma_vs_mma(DICE_F16, 1100, 2080, 9000);  /* 639 tiles of 128 x 128, 65 blocks */
	static const int st_shapes[][3] = {
		{ 4, 2560, 19456 }, { 4, 2560, 6144 }, { 4, 4096, 2560 }, { 4, 9728, 2560 },  /* 4B */
		{ 1, 2560, 30000 }, { 8, 12288, 4096 }, { 2, 1000, 77 }, { 5, 2056, 300 },
		{ 3, 4096, 640 }, { 7, 1000, 513 }, { 8, 8, 8 }, { 6, 264, 9000 } };
	for (size_t i = 0; i < sizeof st_shapes / sizeof st_shapes[0]; i++)
		staged(i % 4 == 3 ? DICE_F16 : DICE_BF16, st_shapes[i][0], st_shapes[i][1],
		       st_shapes[i][2]);
	gu_pairs(DICE_BF16, 4, 2560, 9728);         /* SDAR 4B's gate/up at batch 1 */
	gu_pairs(DICE_BF16, 1, 4096, 12288);        /* 8B's, one step in flight */
	gu_pairs(DICE_BF16, 4, 2048, 6144);         /* 1.7B's (the streaming kernel's pairs) */
	gu_pairs(DICE_F16, 7, 264, 1096);           /* 5 segments, blocks of 1 and 2 pairs */
	gu_pairs(DICE_BF16, 8, 1000, 40);           /* fewer pairs than SMs, 8 segments */
	gu_pairs(DICE_BF16, 3, 320, 512);           /* 5 segments: the streaming kernel's pairs */
	gu_pairs(DICE_BF16, 30, 512, 64);           /* past 8 rows: the product alone */
	packed_shapes();
	x16_shapes();
	glu(DICE_F32, 40, 512, 300, 0);             /* the two-step paths */
	glu(DICE_BF16, 5, 2560, 264, 0);
	glu(DICE_BF16, 77, 1000, 300, 1);          /* every tile shape, short last block */
	glu(DICE_F16, 203, 2056, 264, 1);
	glu(DICE_BF16, 517, 9728, 2560, 1);        /* SDAR 4B's down product */
	glu(DICE_BF16, 1000, 6144, 2048, 0);       /* 1.7B's */
	unsigned r = 12345;
	for (int i = 0; i < 6; i++) {               /* random shapes, in % 8 == 0 */
		r = r * 1103515245u + 12345u;
		int N = 33 + (int)(r >> 8) % 3000;
		r = r * 1103515245u + 12345u;
		int in = 8 * (1 + (int)(r >> 8) % 700);
		r = r * 1103515245u + 12345u;
		int out = 1 + (int)(r >> 8) % 6000;
		wgmma_vs_mma(i % 2 ? DICE_F16 : DICE_BF16, N, in, out);
	}
	decode_shapes();
	return test_done();
}
