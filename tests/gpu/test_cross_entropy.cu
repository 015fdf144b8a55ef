/* test_cross_entropy: the CUDA weighted cross-entropy (loss and dlogits) against the CPU
 * twin: the full Qwen vocabulary, small and odd V, ignored rows (target < 0), zero and
 * fractional weights, dlogits in place over logits; cross_entropy_xb (dlogits in bf16)
 * against its twin and, bitwise, against cross_entropy then cast_bf16 on the GPU. */
#include "gpu_test.h"

static void one(int N, int V, int inplace)
{
	size_t n = (size_t)N * V;
	float *l = gt_rand(n, -10, 10), *w = gt_rand(N, 0, 2);
	float *rloss = (float *)xmalloc(N * sizeof(float)), *rd = (float *)xmalloc(n * sizeof(float));
	int *tg = (int *)xmalloc(N * sizeof(int));
	char what[96];

	for (int i = 0; i < N; i++)
		tg[i] = i % 3 == 2 ? -1 : (int)rng_below(&R, (uint64_t)V);
	if (N > 3)
		w[3] = 0.0f;
	float *l_d = (float *)gt_up(l, n * sizeof(float)), *w_d = (float *)gt_up(w, N * sizeof(float));
	int *tg_d = (int *)gt_up(tg, N * sizeof(int));
	float *loss_d = gt_poisoned(N), *d_d = inplace ? l_d : gt_poisoned(n);
	H->cross_entropy(rloss, rd, l, tg, w, N, V);
	G->cross_entropy(loss_d, d_d, l_d, tg_d, w_d, N, V);
	float *loss = gt_down(loss_d, N), *d = gt_down(d_d, n);
	snprintf(what, sizeof what, "cross_entropy loss N=%d V=%d", N, V);
	gt_compare(what, loss, rloss, N, 1e-5, 1e-5);
	snprintf(what, sizeof what, "cross_entropy dlogits N=%d V=%d%s", N, V, inplace ? " in place" : "");
	gt_compare(what, d, rd, n, 1e-7, 1e-4);
	free(l); free(w); free(rloss); free(rd); free(tg); free(loss); free(d);
	G->free(l_d); G->free(w_d); G->free(tg_d); G->free(loss_d);
	if (!inplace)
		G->free(d_d);
}

static void one_xb(int N, int V)
{
	size_t n = (size_t)N * V;
	float *l = gt_rand(n, -10, 10), *w = gt_rand(N, 0, 2), *rloss = gt_rand(N, 0, 1);
	uint16_t *rb = (uint16_t *)xmalloc(n * 2 + 2), *b = (uint16_t *)xmalloc(n * 2 + 2);
	uint16_t *cb = (uint16_t *)xmalloc(n * 2 + 2);
	float *rf = (float *)xmalloc(n * 4 + 4), *gf = (float *)xmalloc(n * 4 + 4);
	int *tg = (int *)xmalloc(N * sizeof(int));
	char what[112];

	for (int i = 0; i < N; i++)
		tg[i] = i % 3 == 2 ? -1 : (int)rng_below(&R, (uint64_t)V);
	float *l_d = (float *)gt_up(l, n * 4), *w_d = (float *)gt_up(w, N * 4);
	int *tg_d = (int *)gt_up(tg, N * sizeof(int));
	float *loss_d = gt_poisoned(N), *d_d = gt_poisoned(n);
	void *b_d = G->alloc(n * 2 + 2), *c_d = G->alloc(n * 2 + 2);
	H->cross_entropy_xb(rloss, rb, l, tg, w, N, V);
	G->cross_entropy_xb(loss_d, b_d, l_d, tg_d, w_d, N, V);
	float *loss = gt_down(loss_d, N);
	G->to_host(b, b_d, n * 2);
	for (size_t i = 0; i < n; i++) {
		rf[i] = dice_bf16_to_f32(rb[i]);
		gf[i] = dice_bf16_to_f32(b[i]);
	}
	snprintf(what, sizeof what, "cross_entropy_xb loss N=%d V=%d", N, V);
	gt_compare(what, loss, rloss, N, 1e-5, 1e-5);
	snprintf(what, sizeof what, "cross_entropy_xb dlogits N=%d V=%d vs twin", N, V);
	gt_compare(what, gf, rf, n, 1e-7, 1e-2);
	G->cross_entropy(loss_d, d_d, l_d, tg_d, w_d, N, V);
	G->cast_bf16(c_d, d_d, n);
	G->to_host(cb, c_d, n * 2);
	snprintf(what, sizeof what, "cross_entropy_xb N=%d V=%d bitwise cross_entropy then cast_bf16",
	         N, V);
	CHECK(memcmp(cb, b, n * 2) == 0, what);
	free(l); free(w); free(rloss); free(rb); free(b); free(cb); free(rf); free(gf); free(tg);
	free(loss);
	G->free(l_d); G->free(w_d); G->free(tg_d); G->free(loss_d); G->free(d_d); G->free(b_d);
	G->free(c_d);
}

int main(void)
{
	if (gt_init(36))
		return 0;
	one(6, 151936, 1);
	one(33, 1000, 0);
	one(5, 5, 0);
	one(4, 777, 1);
	one_xb(6, 151936);
	one_xb(7, 777);
	return test_done();
}
