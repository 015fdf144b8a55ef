/* test_rope: the CUDA RoPE against the CPU twin: head dims 64 and 128, large and unordered
 * positions, two thetas (two inv_freq tables); rmsnorm_rope (the per-head norm then RoPE)
 * and rmsnorm_rope_xb (its result in bf16: against its twin, and bit for bit the GPU's
 * rmsnorm_rope then cast_bf16). */
#include "gpu_test.h"

static void one(int N, int NH, int HD, float theta, int maxpos)
{
	size_t n = (size_t)N * NH * HD;
	float *x = gt_rand(n, -1, 1);
	int *pos = (int *)xmalloc(N * sizeof(int));
	char what[96];

	for (int i = 0; i < N; i++)
		pos[i] = (int)rng_below(&R, (uint64_t)maxpos);
	float *dx = (float *)gt_up(x, n * sizeof(float));
	int *dpos = (int *)gt_up(pos, N * sizeof(int));
	H->rope(x, pos, N, NH, HD, theta);
	G->rope(dx, dpos, N, NH, HD, theta);
	float *y = gt_down(dx, n);
	snprintf(what, sizeof what, "rope N=%d NH=%d HD=%d theta=%g pos<%d", N, NH, HD, theta, maxpos);
	/* cos/sin of the same fp32 angle: a few ulp apart */
	gt_compare(what, y, x, n, 2e-6, 1e-5);
	free(x); free(pos); free(y);
	G->free(dx); G->free(dpos);
}

/* rmsnorm_rope: per-head norm then RoPE, y apart or over x */
static void rr(int N, int NH, int HD, float theta, enum dice_dtype dt, int inplace)
{
	size_t n = (size_t)N * NH * HD;
	float *x = gt_rand(n, -3, 3), *y = (float *)xmalloc(n * sizeof(float));
	void *w = gt_rand_w(HD, dt, -2, 2);
	int *pos = (int *)xmalloc(N * sizeof(int));
	char what[96];

	for (int i = 0; i < N; i++)
		pos[i] = (int)rng_below(&R, 40000);
	float *dx = (float *)gt_up(x, n * sizeof(float)), *dy = inplace ? dx : gt_poisoned(n);
	int *dpos = (int *)gt_up(pos, N * sizeof(int));
	void *dw = gt_up(w, HD * dice_dtype_size(dt));
	H->rmsnorm_rope(y, x, w, dt, pos, N, NH, HD, theta, 1e-6f);
	G->rmsnorm_rope(dy, dx, dw, dt, dpos, N, NH, HD, theta, 1e-6f);
	float *got = gt_down(dy, n);
	snprintf(what, sizeof what, "rmsnorm_rope N=%d NH=%d HD=%d dt=%d%s", N, NH, HD, (int)dt,
	         inplace ? " in place" : "");
	gt_compare(what, got, y, n, 1e-5, 1e-5);
	if (!inplace) {         /* the bf16 form, from the same x */
		uint16_t *rb = (uint16_t *)xmalloc(n * 2 + 2), *gb = (uint16_t *)xmalloc(n * 2 + 2);
		uint16_t *cb = (uint16_t *)xmalloc(n * 2 + 2);
		float *rf = (float *)xmalloc(n * 4 + 4), *gf = (float *)xmalloc(n * 4 + 4);
		void *b_d = G->alloc(n * 2 + 2);
		H->rmsnorm_rope_xb(rb, x, w, dt, pos, N, NH, HD, theta, 1e-6f);
		G->rmsnorm_rope_xb(b_d, dx, dw, dt, dpos, N, NH, HD, theta, 1e-6f);
		G->to_host(gb, b_d, n * 2);
		for (size_t i = 0; i < n; i++) {
			rf[i] = dice_bf16_to_f32(rb[i]);
			gf[i] = dice_bf16_to_f32(gb[i]);
		}
		snprintf(what, sizeof what, "rmsnorm_rope_xb N=%d NH=%d HD=%d dt=%d vs twin", N, NH,
		         HD, (int)dt);
		gt_compare(what, gf, rf, n, 1e-5, 8e-3);        /* a bf16 step apart at most */
		G->cast_bf16(b_d, dy, n);
		G->to_host(cb, b_d, n * 2);
		snprintf(what, sizeof what, "rmsnorm_rope_xb N=%d NH=%d HD=%d: rmsnorm_rope then "
		         "cast_bf16, bit for bit", N, NH, HD);
		CHECK(!memcmp(cb, gb, n * 2), what);
		free(rb); free(gb); free(cb); free(rf); free(gf);
		G->free(b_d);
	}
	free(x); free(y); free(w); free(pos); free(got);
	G->free(dx); G->free(dpos); G->free(dw);
	if (!inplace)
		G->free(dy);
}

int main(void)
{
	if (gt_init(13))
		return 0;
	one(5, 4, 64, 10000.0f, 16);
	one(37, 8, 128, 1000000.0f, 40000);
	one(64, 2, 128, 10000.0f, 4096);
	one(3, 3, 6, 500.0f, 100);
	for (int hd = 32; hd <= 256; hd *= 2) {     /* fused with the norm: 32 takes two passes */
		rr(257, 16, hd, 1000000.0f, DICE_F32, 0);
		rr(19, 8, hd, 10000.0f, DICE_BF16, 1);
	}
	rr(7, 3, 96, 10000.0f, DICE_F16, 0);
	rr(300, 8, 128, 1000000.0f, DICE_BF16, 0);
	return test_done();
}
