/* test_prefill: the engine's prefill attention (struct ops .attention_prefill, decode.cu on
 * attention_train.cu's fused forward) against its CPU twin, .attention_kv: several sequences
 * in one call, the first s0 of them left to attention_kv (their rows must stay untouched),
 * empty caches and caches of a few blocks (at a block boundary and mid-block), GQA groups
 * 1..4, head dims 64 and 128, bf16 caches; bf16 q and P, so the fused path's tolerance
 * (1e-2 + 2e-2 |ref|, as test_attention_train). A sequence's rows must be the same bits alone
 * and at any place in a batch, also when the batch's keys go to the fused kernels in several
 * groups (more than 8192 keys). It must decline (-1, nothing written) where it does not serve:
 * fp16 and fp32 caches, head dim 256, and when turned off (gpu_set_prefill_fa). The small
 * random model of the engine tests (bf16) prefills a prompt of 300 tokens and decodes two
 * blocks with the prefill attention on and off: every logit within 3e-2 of the largest
 * plus 3e-2 relative (the bf16 engine's own tolerance against transformers is 2e-2). */
#include <string.h>

#include "gpu_test.h"
#include "gt_model.h"
#include "gt_kv.h"

#define L GT_KV_LAYERS

/* how many floats of x(n) are not the poison (all bits set) */
static size_t touched(const float *x, size_t n)
{
	size_t c = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &x[i], 4);
		c += u != 0xffffffffu;
	}
	return c;
}

/* the rows of sequences s0.. against the CPU twin; the rows before untouched */
static void twin_case(int nseq, const int *T, const int *len, int s0, int NH, int NKV, int HD,
                      int block)
{
	struct batch b;
	char what[200];

	batch_make(&b, nseq, T, len, NKV, HD, DICE_BF16);
	size_t QD = (size_t)NH * HD, qn = (size_t)b.h.N * QD, r0 = (size_t)b.h.row0[s0];
	float *q = gt_rand(qn, -2, 2), *ref = (float *)xmalloc(qn * sizeof(float));
	float *dq = (float *)gt_up(q, qn * sizeof(float)), *dout = gt_poisoned(qn);
	H->attention_kv(ref, q, &b.h, 1, NH, NKV, HD, block);
	int rc = G->attention_prefill(dout, dq, &b.d, s0, b.h.row0, b.h.len, 1, NH, NKV, HD, block);
	float *out = gt_down(dout, qn);
	snprintf(what, sizeof what, "attention_prefill nseq=%d s0=%d T%d=%d len%d=%d NH=%d NKV=%d "
	         "HD=%d block=%d: served", nseq, s0, s0, T[s0], s0, len[s0], NH, NKV, HD, block);
	CHECK(rc == 0, what);
	snprintf(what, sizeof what, "attention_prefill nseq=%d s0=%d T%d=%d len%d=%d NH=%d NKV=%d "
	         "HD=%d block=%d vs the CPU twin", nseq, s0, s0, T[s0], s0, len[s0], NH, NKV, HD,
	         block);
	gt_compare(what, out + r0 * QD, ref + r0 * QD, qn - r0 * QD, 1e-2, 2e-2);
	snprintf(what, sizeof what, "attention_prefill nseq=%d s0=%d: the %zu rows before s0 "
	         "untouched", nseq, s0, r0);
	CHECK(touched(out, r0 * QD) == 0, what);
	free(q); free(ref); free(out);
	G->free(dq); G->free(dout);
	batch_free(&b);
}

/* the rows of one sequence (T rows after len) alone, then at place `at` among the
 * sequences Ts, lens (others' caches random), s0 of them before the prefill ones: the same
 * bits */
static void invariance_case(int T, int len, int nb, const int *Ts, const int *lens, int at,
                            int s0, int NH, int NKV, int HD)
{
	struct batch one, b;
	int T1[1] = { T }, len1[1] = { len };
	char what[240];

	batch_make(&one, 1, T1, len1, NKV, HD, DICE_BF16);
	size_t QD = (size_t)NH * HD, qn = (size_t)T * QD;
	float *q = gt_rand(qn, -2, 2), *dq = (float *)gt_up(q, qn * sizeof(float));
	float *dout = gt_poisoned(qn);
	CHECK(G->attention_prefill(dout, dq, &one.d, 0, one.h.row0, one.h.len, 1, NH, NKV, HD, 4) ==
	      0, "attention_prefill alone: served");
	float *alone = gt_down(dout, qn);
	G->free(dq); G->free(dout);

	int *TT = (int *)xmalloc(sizeof(int) * nb), *LL = (int *)xmalloc(sizeof(int) * nb);
	int keys = 0;
	for (int s = 0; s < nb; s++) {
		TT[s] = s == at ? T : Ts[s];
		LL[s] = s == at ? len : lens[s];
		keys += s >= s0 ? (LL[s] + TT[s] + 63) / 64 * 64 : 0;
	}
	batch_make(&b, nb, TT, LL, NKV, HD, DICE_BF16);
	G->copy(b.dk[at], one.dk[0], one.bytes[0]);             /* the same cache */
	G->copy(b.dv[at], one.dv[0], one.bytes[0]);
	size_t bn = (size_t)b.h.N * QD, off = (size_t)b.h.row0[at] * QD;
	float *bq = gt_rand(bn, -2, 2);
	memcpy(bq + off, q, qn * sizeof(float));
	float *dbq = (float *)gt_up(bq, bn * sizeof(float)), *dbo = gt_poisoned(bn);
	int rc = G->attention_prefill(dbo, dbq, &b.d, s0, b.h.row0, b.h.len, 1, NH, NKV, HD, 4);
	float *got = gt_down(dbo, bn);
	snprintf(what, sizeof what, "attention_prefill T=%d len=%d NH=%d NKV=%d HD=%d: alone "
	         "bitwise equal to place %d of %d sequences (%d before the prefill ones, %d keys)",
	         T, len, NH, NKV, HD, at, nb, s0, keys);
	CHECK(rc == 0 && memcmp(got + off, alone, qn * sizeof(float)) == 0, what);
	free(bq); free(got); free(TT); free(LL);
	G->free(dbq); G->free(dbo);
	free(q); free(alone);
	batch_free(&b);
	batch_free(&one);
}

/* where it must decline: -1 and nothing written */
static void decline_case(const char *why, enum dice_dtype dt, int HD, int off)
{
	static int T[2] = { 100, 70 }, len[2] = { 0, 8 };
	struct batch b;
	char what[200];
	int NH = 4, NKV = 2;

	batch_make(&b, 2, T, len, NKV, HD, dt);
	size_t qn = (size_t)b.h.N * NH * HD;
	float *q = gt_rand(qn, -2, 2), *dq = (float *)gt_up(q, qn * sizeof(float));
	float *dout = gt_poisoned(qn);
	if (off)
		gpu_set_prefill_fa(0);
	int rc = G->attention_prefill(dout, dq, &b.d, 0, b.h.row0, b.h.len, 1, NH, NKV, HD, 4);
	int probe = G->attention_prefill(NULL, NULL, &b.d, 0, NULL, NULL, 1, NH, NKV, HD, 4);
	gpu_set_prefill_fa(-1);
	float *out = gt_down(dout, qn);
	snprintf(what, sizeof what, "attention_prefill declines %s (-1, its probe too, nothing "
	         "written)", why);
	CHECK(rc == -1 && probe == -1 && touched(out, qn) == 0, what);
	free(q); free(out);
	G->free(dq); G->free(dout);
	batch_free(&b);
}

/* the model's logits with the prefill attention on against off: the prompt's rows, then two
 * decode blocks of 4 (their K/V from the prefill each way) */
static void model_case(int P)
{
	struct model m;
	struct kvcache kv[2];
	char what[160];

	gt_model(&m, DICE_BF16, 11);
	int V = m.cfg.vocab_size, n = P + 8;
	int *ids = (int *)xmalloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
		ids[i] = (int)(rng_uniformf(&R) * (V - 1));
	float *lg[2];
	for (int on = 0; on < 2; on++) {
		lg[on] = (float *)xmalloc(sizeof(float) * (size_t)(P + 8) * V);
		kvcache_init(&kv[on], &m, P + 8);
		gpu_set_prefill_fa(on);
		struct model_seq q = { .kv = &kv[on], .ids = ids, .T = P, .store = 1, .logits = 1 };
		CHECK(model_forward(&m, &q, 1, lg[on]) == 0, "prefill forward");
		for (int b = 0; b < 2; b++) {
			q = (struct model_seq){ .kv = &kv[on], .ids = ids + P + 4 * b, .T = 4,
			                        .store = 1, .logits = 1 };
			CHECK(model_forward(&m, &q, 1, lg[on] + (size_t)(P + 4 * b) * V) == 0,
			      "decode forward");
		}
	}
	gpu_set_prefill_fa(-1);
	for (int part = 0; part < 2; part++) {
		size_t at = part ? (size_t)P * V : 0, cnt = (size_t)(part ? 8 : P) * V;
		float big = 0;
		for (size_t i = 0; i < cnt; i++)
			big = fabsf(lg[0][at + i]) > big ? fabsf(lg[0][at + i]) : big;
		snprintf(what, sizeof what, "model bf16 P=%d: %s logits with the prefill attention "
		         "within 3e-2 |max| + 3e-2 |ref| of those without (max |logit| %.3g)", P,
		         part ? "the decode blocks'" : "the prompt's", big);
		gt_compare(what, lg[1] + at, lg[0] + at, cnt, 3e-2 * big, 3e-2);
	}
	for (int on = 0; on < 2; on++) {
		kvcache_free(&kv[on], &m);
		free(lg[on]);
	}
	free(ids);
	model_free(&m);
}

int main(void)
{
	if (gt_init(71))
		return 0;
	if (!G->attention_prefill) {
		printf("ok 1 # SKIP the backend has no prefill attention\n");
		return test_done();
	}
	struct kv_batch probe = { 0 };
	probe.dt = DICE_BF16;
	if (G->attention_prefill(NULL, NULL, &probe, 0, NULL, NULL, 0, 8, 2, 128, 4)) {
		printf("ok 1 # SKIP the prefill attention does not serve here (before sm_80, or "
		       "DICE_PREFILL_FA=0)\n");
		return test_done();
	}
	static int T1[1] = { 256 }, len1[1] = { 0 };             /* a prompt of 64 blocks */
	static int T1b[1] = { 130 }, len1b[1] = { 0 };           /* not a whole tile */
	static int T2[2] = { 96, 200 }, len2[2] = { 64, 0 };     /* after a cache of 16 blocks */
	static int T3[3] = { 4, 150, 77 }, len3[3] = { 300, 0, 13 };  /* s0 1; mid-block cache */
	static int T4[4] = { 8, 4, 300, 64 }, len4[4] = { 40, 7, 0, 1000 };  /* s0 2 */
	twin_case(1, T1, len1, 0, 8, 2, 128, 4);                 /* group 4 */
	twin_case(1, T1b, len1b, 0, 4, 4, 128, 4);               /* group 1 */
	twin_case(1, T1b, len1b, 0, 4, 2, 64, 4);                /* HD 64 */
	twin_case(2, T2, len2, 0, 8, 2, 128, 4);
	twin_case(2, T2, len2, 0, 8, 4, 64, 8);                  /* block 8 */
	twin_case(3, T3, len3, 1, 8, 2, 128, 4);
	twin_case(4, T4, len4, 2, 4, 2, 128, 4);
	twin_case(4, T4, len4, 2, 4, 1, 64, 4);

	/* invariance: 1.7B-like heads; places among prefill and decode sequences */
	static int Ta[6] = { 4, 8, 500, 700, 128, 1000 }, La[6] = { 500, 96, 0, 0, 64, 0 };
	invariance_case(300, 0, 6, Ta, La, 2, 2, 16, 8, 128);   /* among 2 decode, 3 prefill */
	invariance_case(300, 0, 6, Ta, La, 5, 2, 16, 8, 128);   /* the last one */
	invariance_case(130, 64, 6, Ta, La, 3, 2, 8, 2, 64);    /* HD 64, after a cache */
	/* more than 8192 keys: the fused calls take the sequences in groups */
	static int Tb[5] = { 4, 3000, 2000, 2500, 1800 }, Lb[5] = { 30, 0, 0, 0, 0 };
	invariance_case(1200, 0, 5, Tb, Lb, 1, 1, 16, 8, 128);  /* first group */
	invariance_case(1200, 0, 5, Tb, Lb, 4, 1, 16, 8, 128);  /* last group */
	invariance_case(9000, 0, 5, Tb, Lb, 2, 1, 4, 2, 128);   /* alone longer than a group */

	model_case(300);
	model_case(1024);

	decline_case("an fp16 cache", DICE_F16, 128, 0);
	decline_case("an fp32 cache", DICE_F32, 128, 0);
	decline_case("head dim 256", DICE_BF16, 256, 0);
	decline_case("when turned off", DICE_BF16, 128, 1);
	return test_done();
}
