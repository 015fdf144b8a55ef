/* test_attention_bwd: the CUDA attention backward (dq, dk, dv) against the CPU twin under
 * the masks the trainer uses: block-causal, SFT [x_t | x_0] with noisy flags with and
 * without packed segments, queries that see no key, GQA groups 1, 2, 3 and head dims
 * 32..256. The forward output comes from the CPU twin; mask arrays go to the device. */
#include "gpu_test.h"

static void run(const struct gt_acase *c)
{
	size_t qn = (size_t)c->T * c->NH * c->HD, kn = (size_t)c->S * c->NKV * c->HD;
	float *q = gt_rand(qn, -2, 2), *k = gt_rand(kn, -2, 2), *v = gt_rand(kn, -1, 1);
	float *dout = gt_rand(qn, -1, 1), *out = (float *)xmalloc(qn * sizeof(float));
	float *rdq = (float *)xmalloc(qn * sizeof(float)), *rdk = (float *)xmalloc(kn * sizeof(float));
	float *rdv = (float *)xmalloc(kn * sizeof(float));
	struct attn_mask hm, dm;
	char what[160];

	gt_masks(c, &hm, &dm);
	H->attention(out, q, k, v, c->T, c->S, c->NH, c->NKV, c->HD, &hm);
	H->attention_backward(rdq, rdk, rdv, dout, q, k, v, out, c->T, c->S, c->NH, c->NKV, c->HD, &hm);
	float *q_d = (float *)gt_up(q, qn * sizeof(float)), *k_d = (float *)gt_up(k, kn * sizeof(float));
	float *v_d = (float *)gt_up(v, kn * sizeof(float)), *o_d = (float *)gt_up(out, qn * sizeof(float));
	float *do_d = (float *)gt_up(dout, qn * sizeof(float));
	float *dq_d = gt_poisoned(qn), *dk_d = gt_poisoned(kn), *dv_d = gt_poisoned(kn);

	G->attention_backward(dq_d, dk_d, dv_d, do_d, q_d, k_d, v_d, o_d, c->T, c->S, c->NH, c->NKV,
	                      c->HD, &dm);
	float *dq = gt_down(dq_d, qn), *dk = gt_down(dk_d, kn), *dv = gt_down(dv_d, kn);
	snprintf(what, sizeof what, "attention_backward dq %s T=%d S=%d NH=%d NKV=%d HD=%d", c->name,
	         c->T, c->S, c->NH, c->NKV, c->HD);
	gt_compare(what, dq, rdq, qn, 1e-4, 1e-3);
	snprintf(what, sizeof what, "attention_backward dk %s", c->name);
	gt_compare(what, dk, rdk, kn, 1e-4, 1e-3);
	snprintf(what, sizeof what, "attention_backward dv %s", c->name);
	gt_compare(what, dv, rdv, kn, 1e-4, 1e-3);
	free(q); free(k); free(v); free(dout); free(out); free(rdq); free(rdk); free(rdv);
	free(dq); free(dk); free(dv);
	G->free(q_d); G->free(k_d); G->free(v_d); G->free(o_d); G->free(do_d);
	G->free(dq_d); G->free(dk_d); G->free(dv_d);
	gt_masks_free(&dm);
}

int main(void)
{
	if (gt_init(37))
		return 0;

	int *p67 = gt_iota(67, 0);
	struct gt_acase pre = { "block-causal", 67, 67, 8, 2, 64, 4, p67, p67, NULL, NULL, NULL, NULL };
	run(&pre);
	struct gt_acase pre2 = { "block-causal HD 256", 40, 40, 3, 1, 256, 8, p67, p67, NULL, NULL, NULL, NULL };
	run(&pre2);

	/* SFT: two packed samples of [x_t | x_0], lengths 24 and 16 */
	int *pos, *seg;
	uint8_t *nz;
	int n = gt_sft_packed(24, 16, &pos, &seg, &nz);
	struct gt_acase sft = { "sft noisy packed", n, n, 4, 4, 80, 4, pos, pos, seg, seg, nz, nz };
	run(&sft);
	struct gt_acase sft2 = { "sft noisy", n, n, 6, 2, 32, 8, pos, pos, NULL, NULL, nz, nz };
	run(&sft2);
	struct gt_acase sft3 = { "sft noisy HD 128", n, n, 4, 2, 128, 4, pos, pos, seg, seg, nz, nz };
	run(&sft3);

	/* queries 0..3 see no key (every key in a later block) */
	int qz[8] = { 0, 1, 2, 3, 8, 9, 10, 11 };
	int *kz = gt_iota(16, 4);
	struct gt_acase none = { "queries with no visible key", 8, 16, 4, 2, 64, 4, qz, kz, NULL, NULL, NULL, NULL };
	run(&none);
	return test_done();
}
