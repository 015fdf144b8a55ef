/* test_attention: the CUDA attention against the CPU twin under every mask the engine and
 * the trainer use: block-causal prefill, the decode step over a long cache (split keys),
 * SFT [x_t | x_0] with noisy flags and packed segments, queries that see no key (zeros),
 * GQA groups 1, 2, 4 and head dims 32..256. Mask arrays go to the device (lib/ops.h). */
#include "gpu_test.h"

static void run(const struct gt_acase *c)
{
	size_t qn = (size_t)c->T * c->NH * c->HD, kn = (size_t)c->S * c->NKV * c->HD;
	float *q = gt_rand(qn, -2, 2), *k = gt_rand(kn, -2, 2), *v = gt_rand(kn, -1, 1);
	float *ref = (float *)xmalloc(qn * sizeof(float));
	struct attn_mask hm, dm;
	char what[160];

	gt_masks(c, &hm, &dm);
	float *dq = (float *)gt_up(q, qn * sizeof(float)), *dk = (float *)gt_up(k, kn * sizeof(float));
	float *dv = (float *)gt_up(v, kn * sizeof(float)), *dout = gt_poisoned(qn);

	H->attention(ref, q, k, v, c->T, c->S, c->NH, c->NKV, c->HD, &hm);
	G->attention(dout, dq, dk, dv, c->T, c->S, c->NH, c->NKV, c->HD, &dm);
	float *out = gt_down(dout, qn);
	snprintf(what, sizeof what, "attention %s T=%d S=%d NH=%d NKV=%d HD=%d", c->name, c->T, c->S,
	         c->NH, c->NKV, c->HD);
	gt_compare(what, out, ref, qn, 1e-5, 1e-4);
	free(q); free(k); free(v); free(ref); free(out);
	G->free(dq); G->free(dk); G->free(dv); G->free(dout);
	gt_masks_free(&dm);
}

int main(void)
{
	if (gt_init(18))
		return 0;

	/* block-causal prefill, positions 0..T-1 */
	int *p67 = gt_iota(67, 0);
	struct gt_acase pre = { "prefill", 67, 67, 8, 2, 64, 4, p67, p67, NULL, NULL, NULL, NULL };
	run(&pre);
	int *p300 = gt_iota(300, 0);
	struct gt_acase pre2 = { "prefill", 300, 300, 16, 4, 128, 4, p300, p300, NULL, NULL, NULL, NULL };
	run(&pre2);
	struct gt_acase pre3 = { "prefill block 32", 100, 100, 2, 2, 256, 32, p300, p300, NULL, NULL, NULL, NULL };
	run(&pre3);

	struct gt_acase odd = { "prefill, warps with some rows empty", 67, 67, 3, 3, 64, 4, p67, p67, NULL, NULL, NULL, NULL };
	run(&odd);

	/* decode: the block at 2048..2051 against cache 0..2047 plus itself (split keys) */
	int *qd = gt_iota(4, 2048), *kd = gt_iota(2052, 0);
	struct gt_acase dec = { "decode", 4, 2052, 8, 2, 128, 4, qd, kd, NULL, NULL, NULL, NULL };
	run(&dec);
	int *qd2 = gt_iota(4, 600), *kd2 = gt_iota(604, 0);
	struct gt_acase dec2 = { "decode", 4, 604, 32, 8, 128, 4, qd2, kd2, NULL, NULL, NULL, NULL };
	run(&dec2);
	int *qd5 = gt_iota(5, 2046);
	struct gt_acase dec5 = { "decode, 15 rows", 5, 2052, 6, 2, 128, 4, qd5, kd, NULL, NULL, NULL, NULL };
	run(&dec5);
	int *qd3 = gt_iota(4, 996), *kd3 = gt_iota(1000, 0);
	struct gt_acase dec4 = { "decode HD 256", 4, 1000, 4, 1, 256, 4, qd3, kd3, NULL, NULL, NULL, NULL };
	run(&dec4);
	/* decode whose cache holds keys after the block (a later block: masked) */
	struct gt_acase dec3 = { "decode, later keys masked", 4, 2052, 4, 4, 64, 4, qd2, kd, NULL, NULL, NULL, NULL };
	run(&dec3);

	/* SFT: two packed samples of [x_t | x_0], lengths 24 and 16 */
	int *pos, *seg;
	uint8_t *nz;
	int n = gt_sft_packed(24, 16, &pos, &seg, &nz);
	struct gt_acase sft = { "sft noisy packed", n, n, 4, 4, 80, 4, pos, pos, seg, seg, nz, nz };
	run(&sft);
	struct gt_acase sft2 = { "sft noisy", n, n, 6, 2, 32, 8, pos, pos, NULL, NULL, nz, nz };
	run(&sft2);

	/* queries 0..3 see no key (every key in a later block): zeros */
	int qz[8] = { 0, 1, 2, 3, 8, 9, 10, 11 };
	int *kz = gt_iota(16, 4);
	struct gt_acase none = { "queries with no visible key", 8, 16, 4, 2, 64, 4, qz, kz, NULL, NULL, NULL, NULL };
	run(&none);
	int *kfar = gt_iota(700, 100);
	struct gt_acase none2 = { "no visible key, split", 8, 700, 4, 2, 64, 4, qz, kfar, NULL, NULL, NULL, NULL };
	run(&none2);
	return test_done();
}
