/* test_matmul_bwd: the CUDA matmul backward against the CPU twin: dx written (poisoned
 * first), dw accumulated onto random values, fp32 and 16-bit weights, dx or dw skipped
 * (NULL), odd shapes. With bf16 weights the GPU rounds x and dy to bf16 (tensor cores): the
 * test draws them bf16-exact so the twin sees the same operands. matmul_xb and
 * matmul_backward_xb (x given in bf16, y and dx written or accumulated) the same way, and
 * matmul_backward_xbb (dy given in bf16 too): bitwise matmul_backward_xb's results, GPU and
 * CPU; matmul_xbb (y rounded to bf16) and matmul_xb_add (y = c + x w^T, y apart from c or
 * equal to it) against their twins. */
#include "gpu_test.h"

static void one(enum dice_dtype dt, int N, int in, int out, int want_dx, int want_dw)
{
	size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
	float *x = gt_rand(nx, -1, 1), *dy = gt_rand(ny, -1, 1), *dw0 = gt_rand(nw, -1, 1);
	void *w = gt_rand_w(nw, dt, -1, 1);
	float *rdx = (float *)xmalloc(nx * sizeof(float)), *rdw = (float *)xmalloc(nw * sizeof(float));
	char what[128];

	for (size_t i = 0; dt == DICE_BF16 && i < nx; i++)
		x[i] = dice_bf16_to_f32(dice_f32_to_bf16(x[i]));
	for (size_t i = 0; dt == DICE_BF16 && i < ny; i++)
		dy[i] = dice_bf16_to_f32(dice_f32_to_bf16(dy[i]));
	memcpy(rdw, dw0, nw * sizeof(float));
	float *dx_d = want_dx ? gt_poisoned(nx) : NULL;
	float *dw_d = want_dw ? (float *)gt_up(dw0, nw * sizeof(float)) : NULL;
	float *x_d = (float *)gt_up(x, nx * sizeof(float)), *dy_d = (float *)gt_up(dy, ny * sizeof(float));
	void *w_d = gt_up(w, nw * dice_dtype_size(dt));

	H->matmul_backward(want_dx ? rdx : NULL, want_dw ? rdw : NULL, dy, x, w, dt, N, in, out);
	G->matmul_backward(dx_d, dw_d, dy_d, x_d, w_d, dt, N, in, out);
	if (want_dx) {
		float *got = gt_down(dx_d, nx);
		snprintf(what, sizeof what, "matmul_backward dx dt=%d N=%d in=%d out=%d", (int)dt, N, in, out);
		gt_compare(what, got, rdx, nx, 1e-4, 1e-4);
		free(got);
	}
	if (want_dw) {
		float *got = gt_down(dw_d, nw);
		snprintf(what, sizeof what, "matmul_backward dw += dt=%d N=%d in=%d out=%d", (int)dt, N, in, out);
		gt_compare(what, got, rdw, nw, 1e-4, 1e-4);
		free(got);
	}
	free(x); free(dy); free(dw0); free(w); free(rdx); free(rdw);
	G->free(dx_d); G->free(dw_d); G->free(x_d); G->free(dy_d); G->free(w_d);
}

/* matmul_xb and matmul_backward_xb (x given in bf16; dx written or accumulated) against the
 * twins; x and dy bf16-exact as above */
static void one_xb(int N, int in, int out, int acc)
{
	size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
	float *x = gt_rand(nx, -1, 1), *dy = gt_rand(ny, -1, 1), *dw0 = gt_rand(nw, -1, 1);
	float *dx0 = gt_rand(nx, -1, 1);
	void *w = gt_rand_w(nw, DICE_BF16, -1, 1);
	uint16_t *xb = (uint16_t *)xmalloc(nx * 2 + 2);
	float *ry = (float *)xmalloc(ny * 4 + 4), *rdx = (float *)xmalloc(nx * 4 + 4);
	float *rdw = (float *)xmalloc(nw * 4 + 4);
	char what[128];

	for (size_t i = 0; i < nx; i++)
		xb[i] = dice_f32_to_bf16(x[i]);
	for (size_t i = 0; i < ny; i++)
		dy[i] = dice_bf16_to_f32(dice_f32_to_bf16(dy[i]));
	memcpy(rdw, dw0, nw * 4);
	memcpy(rdx, dx0, nx * 4);
	float *y_d = gt_poisoned(ny), *dx_d = acc ? (float *)gt_up(dx0, nx * 4) : gt_poisoned(nx);
	float *dw_d = (float *)gt_up(dw0, nw * 4), *dy_d = (float *)gt_up(dy, ny * 4);
	void *xb_d = gt_up(xb, nx * 2), *w_d = gt_up(w, nw * 2);

	if (acc) {              /* y accumulates onto random values too */
		float *y0 = gt_rand(ny, -1, 1);
		memcpy(ry, y0, ny * 4);
		G->to_device(y_d, y0, ny * 4);
		free(y0);
	}
	H->matmul_xb(ry, xb, w, N, in, out, acc);
	G->matmul_xb(y_d, xb_d, w_d, N, in, out, acc);
	H->matmul_backward_xb(rdx, rdw, dy, xb, w, N, in, out, acc);
	G->matmul_backward_xb(dx_d, dw_d, dy_d, xb_d, w_d, N, in, out, acc);
	float *gy = gt_down(y_d, ny), *gdx = gt_down(dx_d, nx), *gdw = gt_down(dw_d, nw);
	snprintf(what, sizeof what, "matmul_xb y %s N=%d in=%d out=%d", acc ? "+=" : "=", N, in, out);
	gt_compare(what, gy, ry, ny, 1e-4, 1e-4);
	snprintf(what, sizeof what, "matmul_backward_xb dx %s N=%d in=%d out=%d",
	         acc ? "+=" : "=", N, in, out);
	gt_compare(what, gdx, rdx, nx, 1e-4, 1e-4);
	snprintf(what, sizeof what, "matmul_backward_xb dw += N=%d in=%d out=%d", N, in, out);
	gt_compare(what, gdw, rdw, nw, 1e-4, 1e-4);

	uint16_t *dyb = (uint16_t *)xmalloc(ny * 2 + 2);
	float *rdx2 = (float *)xmalloc(nx * 4 + 4), *rdw2 = (float *)xmalloc(nw * 4 + 4);
	for (size_t i = 0; i < ny; i++)
		dyb[i] = dice_f32_to_bf16(dy[i]);
	memcpy(rdw2, dw0, nw * 4);
	memcpy(rdx2, dx0, nx * 4);
	H->matmul_backward_xbb(rdx2, rdw2, dyb, xb, w, N, in, out, acc);
	snprintf(what, sizeof what, "matmul_backward_xbb (CPU) N=%d in=%d out=%d: the xb twin's bits",
	         N, in, out);
	CHECK(!memcmp(rdx2, rdx, nx * 4) && !memcmp(rdw2, rdw, nw * 4), what);
	void *dyb_d = gt_up(dyb, ny * 2);
	float *dx2_d = acc ? (float *)gt_up(dx0, nx * 4) : gt_poisoned(nx);
	float *dw2_d = (float *)gt_up(dw0, nw * 4);
	G->matmul_backward_xbb(dx2_d, dw2_d, dyb_d, xb_d, w_d, N, in, out, acc);
	float *g2dx = gt_down(dx2_d, nx), *g2dw = gt_down(dw2_d, nw);
	snprintf(what, sizeof what, "matmul_backward_xbb dx %s, dw += N=%d in=%d out=%d: "
	         "matmul_backward_xb's bits", acc ? "+=" : "=", N, in, out);
	CHECK(!memcmp(g2dx, gdx, nx * 4) && !memcmp(g2dw, gdw, nw * 4), what);
	free(dyb); free(rdx2); free(rdw2); free(g2dx); free(g2dw);
	G->free(dyb_d); G->free(dx2_d); G->free(dw2_d);
	free(x); free(dy); free(dw0); free(dx0); free(w); free(xb); free(ry); free(rdx); free(rdw);
	free(gy); free(gdx); free(gdw);
	G->free(y_d); G->free(dx_d); G->free(dw_d); G->free(dy_d); G->free(xb_d); G->free(w_d);
}

/* matmul_xbb against the twin: the two fp32 sums may differ in their last bits and so, now
 * and then, in a bf16 rounding (one ulp: 2^-8 relative) */
static void one_xbb(int N, int in, int out)
{
	size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
	float *x = gt_rand(nx, -1, 1);
	void *w = gt_rand_w(nw, DICE_BF16, -1, 1);
	uint16_t *xb = (uint16_t *)xmalloc(nx * 2 + 2), *ry = (uint16_t *)xmalloc(ny * 2 + 2);
	uint16_t *gy = (uint16_t *)xmalloc(ny * 2 + 2);
	float *rf = (float *)xmalloc(ny * 4 + 4), *gf = (float *)xmalloc(ny * 4 + 4);
	char what[128];

	for (size_t i = 0; i < nx; i++)
		xb[i] = dice_f32_to_bf16(x[i]);
	void *xb_d = gt_up(xb, nx * 2), *w_d = gt_up(w, nw * 2), *y_d = G->alloc(ny * 2);
	H->matmul_xbb(ry, xb, w, N, in, out);
	G->matmul_xbb(y_d, xb_d, w_d, N, in, out);
	G->to_host(gy, y_d, ny * 2);
	for (size_t i = 0; i < ny; i++) {
		rf[i] = dice_bf16_to_f32(ry[i]);
		gf[i] = dice_bf16_to_f32(gy[i]);
	}
	snprintf(what, sizeof what, "matmul_xbb N=%d in=%d out=%d vs twin", N, in, out);
	gt_compare(what, gf, rf, ny, 1e-3, 1e-2);
	free(x); free(w); free(xb); free(ry); free(gy); free(rf); free(gf);
	G->free(xb_d); G->free(w_d); G->free(y_d);
}

static void one_add(int N, int in, int out, int same)
{
	size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
	float *x = gt_rand(nx, -1, 1), *c = gt_rand(ny, -4, 4);
	void *w = gt_rand_w(nw, DICE_BF16, -1, 1);
	uint16_t *xb = (uint16_t *)xmalloc(nx * 2 + 2);
	float *ry = (float *)xmalloc(ny * 4 + 4);
	char what[128];

	for (size_t i = 0; i < nx; i++)
		xb[i] = dice_f32_to_bf16(x[i]);
	void *xb_d = gt_up(xb, nx * 2), *w_d = gt_up(w, nw * 2);
	float *c_d = (float *)gt_up(c, ny * 4), *y_d = same ? c_d : gt_poisoned(ny);
	H->matmul_xb_add(ry, xb, w, c, N, in, out);
	G->matmul_xb_add(y_d, xb_d, w_d, c_d, N, in, out);
	float *gy = gt_down(y_d, ny);
	snprintf(what, sizeof what, "matmul_xb_add y = c + x w^T N=%d in=%d out=%d%s vs twin", N, in,
	         out, same ? " (y is c)" : "");
	gt_compare(what, gy, ry, ny, 1e-4, 1e-4);
	if (!same) {
		float *gc = gt_down(c_d, ny);
		snprintf(what, sizeof what, "matmul_xb_add N=%d in=%d out=%d: c unchanged", N, in, out);
		CHECK(!memcmp(gc, c, ny * 4), what);
		free(gc);
	}
	free(x); free(c); free(w); free(xb); free(ry); free(gy);
	G->free(xb_d); G->free(w_d); G->free(c_d);
	if (!same)
		G->free(y_d);
}

int main(void)
{
	if (gt_init(31))
		return 0;
	one(DICE_F32, 7, 33, 65, 1, 1);
	one(DICE_F32, 64, 256, 512, 1, 1);
	one(DICE_F32, 300, 128, 1000, 1, 1);
	one(DICE_BF16, 17, 96, 200, 1, 1);
	one(DICE_BF16, 300, 128, 1000, 1, 1);
	one(DICE_BF16, 9, 40, 24, 1, 0);      /* bf16, dw NULL */
	one(DICE_BF16, 9, 40, 24, 0, 1);      /* bf16, dx NULL */
	one(DICE_F16, 5, 64, 48, 1, 1);
	one(DICE_F32, 9, 40, 24, 1, 0);       /* dw NULL */
	one(DICE_F32, 9, 40, 24, 0, 1);       /* dx NULL */
	one(DICE_F32, 1, 1, 1, 1, 1);
	one_xb(17, 96, 200, 0);
	one_xb(300, 128, 1000, 1);
	one_xb(9, 40, 24, 1);
	one_xbb(17, 96, 200);
	one_xbb(300, 128, 1000);
	one_add(300, 128, 1000, 0);
	one_add(1024, 512, 256, 0);
	one_add(17, 96, 200, 1);
	one_add(3, 40, 24, 0);
	return test_done();
}
