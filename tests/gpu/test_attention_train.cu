/* test_attention_train: the tensor-core training attention (ops attention_tc and
 * attention_tc_backward, lib/cuda/attention_train.cu) against the CPU twins (cpu_attention,
 * cpu_attention_backward) under the trainer's masks: SFT [x_t | x_0] with noisy flags, packed
 * samples, block-causal, queries that see no key, GQA, head dims 64..128, a sequence of
 * several query chunks (each with its own key range), packed samples over several 64-row
 * tiles with a partial last tile, an odd count of 64-row tiles, T < S, GQA 3 and 4; the same
 * through attention_tc_stat and attention_tc_backward_stat (the forward's statistics kept for
 * the backward) and their _bf forms (q, k, v in bf16; their CPU twins bitwise against the
 * fp32 twins); and cast_bf16 against its twin (bitwise). Head dims 64 and 128 take the
 * fused kernels: version 2 (or DICE_FA in the environment: 1 to 3 for both passes, two
 * digits for each), every case then again with version 3 (DICE_FA=3, or 3 and the
 * environment's backward digit, set here; version 2 runs where version 3 does not: head dim
 * 64, not sm_90), and the backward's gradients of the two runs against each other (dq 2e-5
 * and dk, dv 1e-5 of their largest: the order of fp32 atomics and of the tensor cores' sums;
 * version 3's backward keeps version 2's rounding); run it again with DICE_ATTN_CUBLAS=1
 * for the chunked cuBLAS path. The twin
 * gets q, k, v, dout rounded to bf16 (the kernel's operands), so what remains is the bf16
 * rounding of P and dS: tolerance 1e-2 + 2e-2 |ref|. */
#include "gpu_test.h"

static float *rand_bf16(size_t n, float lo, float hi)
{
	float *p = gt_rand(n, lo, hi);
	for (size_t i = 0; i < n; i++)
		p[i] = dice_bf16_to_f32(dice_f32_to_bf16(p[i]));
	return p;
}

/* x (n floats, bf16 values) as bf16 on the device */
static void *up_bf16(const float *x, size_t n)
{
	uint16_t *h = (uint16_t *)xmalloc((n ? n : 1) * 2);
	void *d;

	for (size_t i = 0; i < n; i++)
		h[i] = dice_f32_to_bf16(x[i]);
	d = gt_up(h, n * 2);
	free(h);
	return d;
}

/* the device output d (n floats) against the twin's, named op + what */
static void cmp_dev(const char *op, const char *what, const float *d, const float *ref,
                    size_t n)
{
	char name[200];
	float *got = gt_down(d, n);

	snprintf(name, sizeof name, "%s %s", op, what);
	gt_compare(name, got, ref, n, 1e-2, 2e-2);
	free(got);
}

/* the device ops of case c against the twin's results (out, rdq, rdk, rdv), under the
 * environment's DICE_FA or 2 (fv 0), or version 3's forward (fv 1: DICE_FA=3, or 3 and the
 * environment's backward digit) */
/* the gradients of the backward without the forward's statistics (recomputed by version 2's
 * or 1's stats pass: the same lse whichever backward runs): hg[0..2] = dq, dk, dv (host
 * copies) */
static void run_dev(const struct gt_acase *c, int fv, const struct attn_mask *dmp,
                    const float *q, const float *k, const float *v, const float *dout,
                    const float *out, const float *rdq, const float *rdk, const float *rdv,
                    float **hg)
{
	static char env0[8];
	static int have_env = -1;
	size_t qn = (size_t)c->T * c->NH * c->HD, kn = (size_t)c->S * c->NKV * c->HD;
	struct attn_mask dm = *dmp;
	char what[160], fa[8];

	if (have_env < 0) {
		const char *e = getenv("DICE_FA");
		have_env = e && *e;
		snprintf(env0, sizeof env0, "%s", have_env ? e : "");
	}
	if (!fv) {
		snprintf(fa, sizeof fa, "%s", have_env ? env0 : "2");
		setenv("DICE_FA", fa, 1);
	} else {
		snprintf(fa, sizeof fa, "3%s", have_env && env0[0] && env0[1] ? env0 + 1 :
		         have_env && env0[0] != '3' ? env0 : "");
		setenv("DICE_FA", fa, 1);
	}
	float *q_d = (float *)gt_up(q, qn * 4), *k_d = (float *)gt_up(k, kn * 4);
	float *v_d = (float *)gt_up(v, kn * 4), *do_d = (float *)gt_up(dout, qn * 4);
	float *o_d = gt_poisoned(qn), *o2_d = gt_poisoned(qn);
	float *dq_d = gt_poisoned(qn), *dk_d = gt_poisoned(kn), *dv_d = gt_poisoned(kn);
	float *st_d = (float *)G->alloc((size_t)c->T * c->NH * 4 + 4);

	snprintf(what, sizeof what, "%s T=%d S=%d NH=%d NKV=%d HD=%d DICE_FA=%s", c->name, c->T,
	         c->S, c->NH, c->NKV, c->HD, fa);
	G->attention_tc(o_d, q_d, k_d, v_d, c->T, c->S, c->NH, c->NKV, c->HD, &dm);
	cmp_dev("attention_tc out", what, o_d, out, qn);
	/* the _stat pair: the forward keeps its statistics, the backward takes them */
	G->attention_tc_stat(o2_d, st_d, q_d, k_d, v_d, c->T, c->S, c->NH, c->NKV, c->HD, &dm);
	cmp_dev("attention_tc_stat out", what, o2_d, out, qn);
	/* the backwards read the twin's forward output, as the trainer reads its own */
	G->to_device(o_d, out, qn * 4);
	for (int stat = 0; stat < 2; stat++) {
		if (stat)
			G->attention_tc_backward_stat(dq_d, dk_d, dv_d, do_d, q_d, k_d, v_d, o_d, st_d,
			                              c->T, c->S, c->NH, c->NKV, c->HD, &dm);
		else
			G->attention_tc_backward(dq_d, dk_d, dv_d, do_d, q_d, k_d, v_d, o_d, c->T, c->S,
			                         c->NH, c->NKV, c->HD, &dm);
		const char *op = stat ? "attention_tc_backward_stat" : "attention_tc_backward";
		char w2[200];
		snprintf(w2, sizeof w2, "dq %s", what);
		cmp_dev(op, w2, dq_d, rdq, qn);
		snprintf(w2, sizeof w2, "dk %s", c->name);
		cmp_dev(op, w2, dk_d, rdk, kn);
		snprintf(w2, sizeof w2, "dv %s", c->name);
		cmp_dev(op, w2, dv_d, rdv, kn);
		if (stat)
			continue;
		hg[0] = gt_down(dq_d, qn);
		hg[1] = gt_down(dk_d, kn);
		hg[2] = gt_down(dv_d, kn);
	}
	/* the _bf pair: q, k, v given in bf16 (the values are bf16 already: the same results) */
	void *qb_d = up_bf16(q, qn), *kb_d = up_bf16(k, kn), *vb_d = up_bf16(v, kn);
	G->attention_tc_stat_bf(o2_d, st_d, qb_d, kb_d, vb_d, c->T, c->S, c->NH, c->NKV, c->HD,
	                        &dm);
	cmp_dev("attention_tc_stat_bf out", what, o2_d, out, qn);
	G->attention_tc_backward_stat_bf(dq_d, dk_d, dv_d, do_d, qb_d, kb_d, vb_d, o_d, st_d, c->T,
	                                 c->S, c->NH, c->NKV, c->HD, &dm);
	cmp_dev("attention_tc_backward_stat_bf dq", what, dq_d, rdq, qn);
	cmp_dev("attention_tc_backward_stat_bf dk", c->name, dk_d, rdk, kn);
	cmp_dev("attention_tc_backward_stat_bf dv", c->name, dv_d, rdv, kn);
	G->free(qb_d); G->free(kb_d); G->free(vb_d);
	G->free(q_d); G->free(k_d); G->free(v_d); G->free(o_d); G->free(do_d);
	G->free(dq_d); G->free(dk_d); G->free(dv_d); G->free(st_d); G->free(o2_d);
}

/* the CPU twins of the _bf ops (widen, then the fp32 twins) against the fp32 twins' results
 * (out, rdq, rdk, rdv), bitwise: q, k, v hold bf16 values */
static void bf_twin_check(const struct gt_acase *c, const struct attn_mask *hm, const float *q,
                          const float *k, const float *v, const float *dout, const float *out,
                          const float *rdq, const float *rdk, const float *rdv)
{
	size_t qn = (size_t)c->T * c->NH * c->HD, kn = (size_t)c->S * c->NKV * c->HD;
	uint16_t *qb = (uint16_t *)xmalloc(qn * 2 + 2), *kb = (uint16_t *)xmalloc(kn * 2 + 2);
	uint16_t *vb = (uint16_t *)xmalloc(kn * 2 + 2);
	float *o = (float *)xmalloc(qn * 4 + 4), *dq = (float *)xmalloc(qn * 4 + 4);
	float *dk = (float *)xmalloc(kn * 4 + 4), *dv = (float *)xmalloc(kn * 4 + 4);
	char what[200];

	for (size_t i = 0; i < qn; i++)
		qb[i] = dice_f32_to_bf16(q[i]);
	for (size_t i = 0; i < kn; i++) {
		kb[i] = dice_f32_to_bf16(k[i]);
		vb[i] = dice_f32_to_bf16(v[i]);
	}
	H->attention_tc_stat_bf(o, NULL, qb, kb, vb, c->T, c->S, c->NH, c->NKV, c->HD, hm);
	H->attention_tc_backward_stat_bf(dq, dk, dv, dout, qb, kb, vb, out, NULL, c->T, c->S, c->NH,
	                                 c->NKV, c->HD, hm);
	snprintf(what, sizeof what, "cpu attention_tc_stat_bf and backward bitwise, %s", c->name);
	CHECK(!memcmp(o, out, qn * 4) && !memcmp(dq, rdq, qn * 4) && !memcmp(dk, rdk, kn * 4) &&
	      !memcmp(dv, rdv, kn * 4), what);
	free(qb); free(kb); free(vb); free(o); free(dq); free(dk); free(dv);
}

static void run(const struct gt_acase *c)
{
	size_t qn = (size_t)c->T * c->NH * c->HD, kn = (size_t)c->S * c->NKV * c->HD;
	float *q = rand_bf16(qn, -2, 2), *k = rand_bf16(kn, -2, 2), *v = rand_bf16(kn, -1, 1);
	float *dout = rand_bf16(qn, -1, 1), *out = (float *)xmalloc(qn * sizeof(float));
	float *rdq = (float *)xmalloc(qn * sizeof(float)), *rdk = (float *)xmalloc(kn * sizeof(float));
	float *rdv = (float *)xmalloc(kn * sizeof(float));
	struct attn_mask hm, dm;

	gt_masks(c, &hm, &dm);
	H->attention_tc(out, q, k, v, c->T, c->S, c->NH, c->NKV, c->HD, &hm);
	H->attention_tc_backward(rdq, rdk, rdv, dout, q, k, v, out, c->T, c->S, c->NH, c->NKV,
	                         c->HD, &hm);
	bf_twin_check(c, &hm, q, k, v, dout, out, rdq, rdk, rdv);
	float *hg[2][3];
	for (int fv = 0; fv < 2; fv++)
		run_dev(c, fv, &dm, q, k, v, dout, out, rdq, rdk, rdv, hg[fv]);
	/* the backwards of the two runs against each other, to their largest magnitude */
	for (int x = 0; x < 3; x++) {
		static const char *nm[3] = { "dq", "dk", "dv" };
		size_t n = x ? kn : qn;
		double mx = 0;
		char what[200];
		for (size_t i = 0; i < n; i++)
			mx = fabs(hg[0][x][i]) > mx ? fabs(hg[0][x][i]) : mx;
		snprintf(what, sizeof what, "backward %s, the second run against the first, %s",
		         nm[x], c->name);
		gt_compare(what, hg[1][x], hg[0][x], n, (x ? 1e-5 : 2e-5) * mx, 0);
		free(hg[0][x]);
		free(hg[1][x]);
	}
	free(q); free(k); free(v); free(dout); free(out); free(rdq); free(rdk); free(rdv);
	gt_masks_free(&dm);
}

/* nsamp packed [x_t | x_0] samples of lengths len[] into pos, seg, noisy; returns rows */
static int sft_layout(int nsamp, const int *len, int *pos, int *seg, uint8_t *nz)
{
	int i = 0;
	for (int s = 0; s < nsamp; s++)
		for (int half = 0; half < 2; half++)
			for (int j = 0; j < len[s]; j++, i++) {
				pos[i] = j;
				seg[i] = s;
				nz[i] = half == 0;
			}
	return i;
}

/* n elements: a multiple of 8 takes the 8-a-thread kernel, another n the plain one */
static void cast_check(size_t n)
{
	float *x = gt_rand(n, -300, 300);
	uint16_t *ref = (uint16_t *)xmalloc(n * 2), *got = (uint16_t *)xmalloc(n * 2);
	float *x_d = (float *)gt_up(x, n * 4);
	void *b_d = G->alloc(n * 2);
	size_t bad = 0;

	x[3] = 1.00390625f;                 /* a tie: rounds to even */
	G->to_device(x_d, x, n * 4);
	H->cast_bf16(ref, x, n);
	G->cast_bf16(b_d, x_d, n);
	G->to_host(got, b_d, n * 2);
	for (size_t i = 0; i < n; i++)
		bad += got[i] != ref[i];
	if (bad)
		printf("# cast_bf16: %zu of %zu differ\n", bad, n);
	CHECK(bad == 0, "cast_bf16 bitwise equal to the twin");
	free(x); free(ref); free(got);
	G->free(x_d); G->free(b_d);
}

int main(void)
{
	if (gt_init(41))
		return 0;
	cast_check(1000);
	cast_check(1001);

	int *p600 = gt_iota(600, 0);
	struct gt_acase bc = { "block-causal", 67, 67, 8, 2, 64, 4, p600, p600, NULL, NULL, NULL, NULL };
	run(&bc);

	int len[3] = { 24, 16, 40 }, n = 2 * (24 + 16 + 40);
	int *pos = (int *)xmalloc(n * sizeof(int)), *seg = (int *)xmalloc(n * sizeof(int));
	uint8_t *nz = (uint8_t *)xmalloc(n);
	sft_layout(3, len, pos, seg, nz);
	struct gt_acase sp = { "sft noisy packed", n, n, 4, 2, 128, 4, pos, pos, seg, seg, nz, nz };
	run(&sp);
	/* one long sample, as the trainer calls it (no segments), SDAR head geometry */
	int one[1] = { 300 }, n1 = 600;
	int *pos1 = (int *)xmalloc(n1 * sizeof(int)), *seg1 = (int *)xmalloc(n1 * sizeof(int));
	uint8_t *nz1 = (uint8_t *)xmalloc(n1);
	sft_layout(1, one, pos1, seg1, nz1);
	struct gt_acase s1 = { "sft noisy one sample", n1, n1, 16, 8, 128, 4, pos1, pos1, NULL, NULL,
	                    nz1, nz1 };
	run(&s1);

	/* longer than one query chunk (2048 rows): several chunks with their own key ranges */
	int two[1] = { 1100 }, n2 = 2200;
	int *pos2 = (int *)xmalloc(n2 * sizeof(int)), *seg2 = (int *)xmalloc(n2 * sizeof(int));
	uint8_t *nz2 = (uint8_t *)xmalloc(n2);
	sft_layout(1, two, pos2, seg2, nz2);
	struct gt_acase s2 = { "sft noisy, several query chunks", n2, n2, 2, 1, 64, 4, pos2, pos2, NULL,
	                    NULL, nz2, nz2 };
	run(&s2);

	/* two packed samples over several 64-row tiles, the last one partial; HD 128, GQA 2 */
	int lp[2] = { 410, 240 }, n3 = 2 * (410 + 240);
	int *pos3 = (int *)xmalloc(n3 * sizeof(int)), *seg3 = (int *)xmalloc(n3 * sizeof(int));
	uint8_t *nz3 = (uint8_t *)xmalloc(n3);
	sft_layout(2, lp, pos3, seg3, nz3);
	struct gt_acase s3 = { "sft noisy packed, many tiles", n3, n3, 4, 2, 128, 4, pos3, pos3, seg3,
	                    seg3, nz3, nz3 };
	run(&s3);

	/* version 2's 128-row and 128-key blocks: an odd count of 64-row tiles (the last block
	 * half empty), GQA 4, segments, HD 64 */
	int lg[2] = { 150, 50 }, n4 = 2 * (150 + 50);
	int *pos4 = (int *)xmalloc(n4 * sizeof(int)), *seg4 = (int *)xmalloc(n4 * sizeof(int));
	uint8_t *nz4 = (uint8_t *)xmalloc(n4);
	sft_layout(2, lg, pos4, seg4, nz4);
	struct gt_acase s4 = { "sft noisy packed, GQA 4, odd tile count", n4, n4, 8, 2, 64, 4, pos4,
	                    pos4, seg4, seg4, nz4, nz4 };
	run(&s4);

	/* T != S (queries at the end of the keys), GQA 3 (dK, dV summed over three heads) */
	int *kp5 = gt_iota(330, 0), *qp5 = gt_iota(200, 130);
	struct gt_acase s5 = { "block-causal T < S, GQA 3", 200, 330, 6, 2, 128, 4, qp5, kp5, NULL,
	                    NULL, NULL, NULL };
	run(&s5);

	/* the first 70 queries see no key, over several tiles; one head per kv head */
	int *qp6 = (int *)xmalloc(150 * sizeof(int)), *kp6 = gt_iota(200, 100);
	for (int i = 0; i < 150; i++)
		qp6[i] = i < 70 ? i : 100 + 2 * i;
	struct gt_acase s6 = { "queries with no visible key, several tiles", 150, 200, 4, 4, 64, 4,
	                    qp6, kp6, NULL, NULL, NULL, NULL };
	run(&s6);

	/* the same at head dim 128 (version 3's backward: no segments, no noisy halves, GQA 1,
	 * T != S, neither a multiple of 128) */
	struct gt_acase s7 = { "queries with no visible key, several tiles, HD 128", 150, 200, 4,
	                    4, 128, 4, qp6, kp6, NULL, NULL, NULL, NULL };
	run(&s7);

	/* block-causal, GQA 1, T > S, head dim 128 */
	int *qp8 = gt_iota(333, 0), *kp8 = gt_iota(270, 0);
	struct gt_acase s8 = { "block-causal T > S, GQA 1, HD 128", 333, 270, 2, 2, 128, 4, qp8,
	                    kp8, NULL, NULL, NULL, NULL };
	run(&s8);

	int qz[8] = { 0, 1, 2, 3, 8, 9, 10, 11 };
	int *kz = gt_iota(16, 4);
	struct gt_acase none = { "queries with no visible key", 8, 16, 4, 2, 64, 4, qz, kz, NULL, NULL,
	                      NULL, NULL };
	run(&none);
	return test_done();
}
