/* test_rmsnorm_bwd: the CUDA rmsnorm backward against the CPU twin: dx written, dw
 * accumulated onto random values over many rows (the per-head q/k norm shape), 16-bit
 * weights, dx in place over dy, dw skipped (NULL); the fused forms: dx added into a random
 * dres (rmsnorm_backward_add; with its bf16 copy, the cast of dres bit for bit) and RoPE's
 * backward in front (rope_rmsnorm_backward, one pass at head dims 64, 128, 256, two passes
 * at others); row widths from 1 to 16384 (one warp a row, several warps, groups that leave
 * threads of a block idle). */
#include "gpu_test.h"

enum { PLAIN, ADD, ROPE, ADDB };

/* mode ROPE: N tokens of NH heads of C = HD */
static void one(int mode, enum dice_dtype dt, int N, int NH, int C, int inplace, int want_dw)
{
	size_t rows = (size_t)N * NH, n = rows * C;
	float *x = gt_rand(n, -3, 3), *dy = gt_rand(n, -1, 1), *dw0 = gt_rand(C, -1, 1);
	float *res = gt_rand(n, -1, 1);
	void *w = gt_rand_w(C, dt, -2, 2);
	float *rdx = (float *)xmalloc(n * sizeof(float)), *rdw = (float *)xmalloc(C * sizeof(float));
	int *pos = (int *)xmalloc((size_t)N * sizeof(int));
	static const char *name[] = { "rmsnorm_backward", "rmsnorm_backward_add",
	                              "rope_rmsnorm_backward", "rmsnorm_backward_add (+ bf16)" };
	uint16_t *b_d = mode == ADDB ? (uint16_t *)G->alloc(n * 2 + 2) : NULL;
	char what[160];

	for (int i = 0; i < N; i++)
		pos[i] = (i * 37) % 5000;
	memcpy(rdw, dw0, C * sizeof(float));
	if (mode == ADD || mode == ADDB)
		memcpy(rdx, res, n * sizeof(float));
	float *x_d = (float *)gt_up(x, n * sizeof(float)), *dy_d = (float *)gt_up(dy, n * sizeof(float));
	float *dw_d = want_dw ? (float *)gt_up(dw0, C * sizeof(float)) : NULL;
	void *w_d = gt_up(w, C * dice_dtype_size(dt));
	int *pos_d = (int *)gt_up(pos, (size_t)N * sizeof(int));
	float *dx_d = inplace ? dy_d : mode == ADD || mode == ADDB ?
	              (float *)gt_up(res, n * sizeof(float)) : gt_poisoned(n);

	if (mode == PLAIN) {
		H->rmsnorm_backward(rdx, want_dw ? rdw : NULL, dy, x, w, dt, (int)rows, C, 1e-6f);
		G->rmsnorm_backward(dx_d, dw_d, dy_d, x_d, w_d, dt, (int)rows, C, 1e-6f);
	} else if (mode == ADD || mode == ADDB) {
		H->rmsnorm_backward_add(rdx, NULL, want_dw ? rdw : NULL, dy, x, w, dt, (int)rows, C,
		                        1e-6f);
		G->rmsnorm_backward_add(dx_d, b_d, dw_d, dy_d, x_d, w_d, dt, (int)rows, C, 1e-6f);
	} else {
		H->rope_rmsnorm_backward(rdx, NULL, 0, want_dw ? rdw : NULL, dy, x, w, dt, pos, N, NH,
		                         C, 1e6f, 1e-6f);
		G->rope_rmsnorm_backward(dx_d, NULL, 0, dw_d, dy_d, x_d, w_d, dt, pos_d, N, NH, C,
		                         1e6f, 1e-6f);
	}
	float *got = gt_down(dx_d, n);
	snprintf(what, sizeof what, "%s dx dt=%d rows=%zu C=%d%s", name[mode], (int)dt, rows, C,
	         inplace ? " in place" : "");
	gt_compare(what, got, rdx, n, 1e-5, 1e-4);
	if (b_d) {              /* the bf16 copy: the cast of the dres written, bit for bit */
		uint16_t *gb = (uint16_t *)xmalloc(n * 2 + 2), *cb = (uint16_t *)xmalloc(n * 2 + 2);
		G->to_host(gb, b_d, n * 2);
		H->cast_bf16(cb, got, n);
		snprintf(what, sizeof what, "%s rows=%zu C=%d: the bf16 copy is the cast of dres",
		         name[mode], rows, C);
		CHECK(!memcmp(gb, cb, n * 2), what);
		free(gb); free(cb);
		G->free(b_d);
	}
	free(got);
	if (want_dw) {
		got = gt_down(dw_d, C);
		snprintf(what, sizeof what, "%s dw += dt=%d rows=%zu C=%d", name[mode], (int)dt, rows,
		         C);
		gt_compare(what, got, rdw, C, 1e-4, 1e-4);
		free(got);
	}
	free(x); free(dy); free(dw0); free(res); free(w); free(rdx); free(rdw); free(pos);
	G->free(x_d); G->free(dy_d); G->free(dw_d); G->free(w_d); G->free(pos_d);
	if (!inplace)
		G->free(dx_d);
}

/* widen n bf16 values found at rows of stride ld (C of each) */
static float *widen_rows(const uint16_t *b, int N, int C, int ld)
{
	float *f = (float *)xmalloc((size_t)N * C * sizeof(float));
	for (int n = 0; n < N; n++)
		for (int c = 0; c < C; c++)
			f[(size_t)n * C + c] = dice_bf16_to_f32(b[(size_t)n * ld + c]);
	return f;
}

/* rope_rmsnorm_backward into bf16 rows of stride ld at column off (dx is scratch), and
 * cast_bf16_rows beside it: the layout of the fused q/k/v gradients */
static void rows(int N, int NH, int HD, int ld, int off)
{
	size_t n = (size_t)N * NH * HD, nb = (size_t)N * ld;
	float *x = gt_rand(n, -3, 3), *dy = gt_rand(n, -1, 1), *dw0 = gt_rand(HD, -1, 1);
	void *w = gt_rand_w(HD, DICE_BF16, -2, 2);
	float *rdw = (float *)xmalloc(HD * sizeof(float));
	uint16_t *rb = (uint16_t *)xmalloc(nb * 2);
	int *pos = (int *)xmalloc((size_t)N * sizeof(int));
	char what[160];

	for (int i = 0; i < N; i++)
		pos[i] = (i * 53) % 3000;
	memcpy(rdw, dw0, HD * sizeof(float));
	float *x_d = (float *)gt_up(x, n * 4), *dy_d = (float *)gt_up(dy, n * 4);
	float *dw_d = (float *)gt_up(dw0, HD * 4);
	void *w_d = gt_up(w, HD * 2);
	int *pos_d = (int *)gt_up(pos, (size_t)N * sizeof(int));
	uint16_t *b_d = (uint16_t *)G->alloc(nb * 2);

	H->rope_rmsnorm_backward(dy, rb + off, ld, rdw, dy, x, w, DICE_BF16, pos, N, NH, HD, 1e4f,
	                         1e-6f);
	G->rope_rmsnorm_backward(dy_d, b_d + off, ld, dw_d, dy_d, x_d, w_d, DICE_BF16, pos_d, N, NH,
	                         HD, 1e4f, 1e-6f);
	uint16_t *gb = (uint16_t *)xmalloc(nb * 2);
	G->to_host(gb, b_d, nb * 2);
	float *got = widen_rows(gb + off, N, NH * HD, ld), *want = widen_rows(rb + off, N, NH * HD, ld);
	snprintf(what, sizeof what, "rope_rmsnorm_backward to bf16 rows N=%d NH=%d HD=%d ld=%d", N,
	         NH, HD, ld);
	gt_compare(what, got, want, n, 1e-5, 8e-3);     /* a bf16 step apart at most */
	free(got); free(want);
	got = gt_down(dw_d, HD);
	gt_compare("rope_rmsnorm_backward to bf16 rows: dw +=", got, rdw, HD, 1e-4, 1e-4);
	free(got);
	/* cast_bf16_rows of x into the other columns: the same bits */
	int c2 = ld - off - NH * HD < HD ? 0 : HD;
	if (c2) {
		H->cast_bf16_rows(rb + off + NH * HD, ld, x, N, c2);
		G->cast_bf16_rows(b_d + off + NH * HD, ld, x_d, N, c2);
		G->to_host(gb, b_d, nb * 2);
		int same = 1;
		for (int r = 0; r < N; r++)
			for (int c = 0; c < c2; c++)
				same &= gb[(size_t)r * ld + off + NH * HD + c] ==
				        rb[(size_t)r * ld + off + NH * HD + c];
		snprintf(what, sizeof what, "cast_bf16_rows N=%d C=%d ld=%d: the same bits", N, c2, ld);
		CHECK(same, what);
	}
	free(x); free(dy); free(dw0); free(w); free(rdw); free(rb); free(pos); free(gb);
	G->free(x_d); G->free(dy_d); G->free(dw_d); G->free(w_d); G->free(pos_d); G->free(b_d);
}

int main(void)
{
	if (gt_init(32))
		return 0;
	one(PLAIN, DICE_F32, 7, 1, 100, 0, 1);
	one(PLAIN, DICE_F32, 33, 1, 4096, 0, 1);
	one(PLAIN, DICE_F32, 4096, 1, 128, 1, 1);       /* q/k norm: N*NH rows of HD, in place */
	one(PLAIN, DICE_BF16, 5, 1, 2048, 0, 1);
	one(PLAIN, DICE_F16, 9, 1, 1001, 1, 0);
	one(PLAIN, DICE_F32, 3, 1, 5, 0, 1);
	one(PLAIN, DICE_F32, 2, 1, 1, 0, 1);
	one(PLAIN, DICE_F32, 11, 1, 600, 0, 1);         /* groups of 96 threads: 64 idle */
	one(PLAIN, DICE_BF16, 3, 1, 16384, 1, 1);
	one(ADD, DICE_F32, 300, 1, 2048, 0, 1);
	one(ADD, DICE_BF16, 1000, 1, 2560, 0, 1);
	one(ADD, DICE_F32, 17, 1, 70, 0, 0);
	one(ADD, DICE_F16, 5, 1, 9000, 0, 1);
	one(ADDB, DICE_BF16, 1000, 1, 2048, 0, 1);
	one(ADDB, DICE_F32, 17, 1, 70, 0, 0);
	for (int hd = 64; hd <= 256; hd *= 2) {
		one(ROPE, DICE_F32, 257, 16, hd, 1, 1);
		one(ROPE, DICE_BF16, 33, 8, hd, 0, 1);
	}
	one(ROPE, DICE_F32, 40, 3, 32, 1, 1);            /* two passes */
	one(ROPE, DICE_BF16, 21, 2, 96, 0, 1);
	one(ROPE, DICE_F32, 9, 4, 128, 0, 0);
	rows(300, 16, 128, 16 * 128 + 2 * 8 * 128, 0);      /* q of 1.7B's q/k/v rows */
	rows(300, 8, 128, 16 * 128 + 2 * 8 * 128, 16 * 128);      /* k, then v cast beside it */
	rows(50, 4, 96, 4 * 96 + 96 + 7, 0);             /* the two-pass head dim */
	return test_done();
}
