/* test_embed: the CUDA embedding lookup against the CPU twin for each weight dtype (exact:
 * a dtype conversion only), repeated and out-of-order ids. */
#include "gpu_test.h"

static void one(enum dice_dtype dt, int V, int N, int C)
{
	void *w = gt_rand_w((size_t)V * C, dt, -1, 1);
	int *ids = (int *)xmalloc(N * sizeof(int));
	float *ref = (float *)xmalloc((size_t)N * C * sizeof(float));
	char what[64];

	for (int i = 0; i < N; i++)
		ids[i] = (int)rng_below(&R, (uint64_t)V);
	void *dw = gt_up(w, (size_t)V * C * dice_dtype_size(dt));
	int *dids = (int *)gt_up(ids, N * sizeof(int));
	float *dy = gt_poisoned((size_t)N * C);
	H->embed(ref, ids, w, dt, N, C);
	G->embed(dy, dids, dw, dt, N, C);
	float *y = gt_down(dy, (size_t)N * C);
	snprintf(what, sizeof what, "embed dt=%d V=%d N=%d C=%d", (int)dt, V, N, C);
	gt_compare(what, y, ref, (size_t)N * C, 0, 0);
	free(w); free(ids); free(ref); free(y);
	G->free(dw); G->free(dids); G->free(dy);
}

int main(void)
{
	if (gt_init(16))
		return 0;
	one(DICE_F32, 100, 17, 64);
	one(DICE_BF16, 5000, 300, 256);
	one(DICE_F16, 33, 40, 100);
	return test_done();
}
