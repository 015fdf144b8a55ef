/* test_decode: the engine forward's cache and fused ops (attention_kv, kv_append, qkv_prep,
 * swiglu_cat, add_rmsnorm) against their CPU twins on random data: several sequences of
 * different cache lengths in one call, T = 1, 4, 8 new rows under the block-causal rule,
 * GQA groups 1..8, caches of 1 to 4K+ keys, fp32 and bf16/fp16 caches, head dims 64..256.
 * On sm_90 the 16-bit HD 128 cases merge their key splits inside a thread block cluster;
 * DICE_DK_CLUSTER=0 runs the same cases through the global-memory merge instead. Those
 * cases also run on the unit kernels (gpu_set_dk_unit: one block walks a unit's splits;
 * gpu_set_dk_unit_v: version 1, du_kernel, 2, the persistent dv_kernel, and 3, dv_kernel with
 * the splits' chains in turn over the warps, the persistent ones also on 3 blocks so that each
 * walks many units of different lengths) and must give the cluster kernel's bits (also on
 * batches of 4- and 8-row sequences at 1K to 4K keys, the engine's), and the invariance
 * cases batch on the cluster kernel or dv_kernel (2 and 3). The tensor-core kernels run both
 * ways: their default one-part products (q and the probabilities rounded to the cache's
 * type; within one_part_atol of the fp32 twin) and the exact two-part ones (gpu_set_dk_exact,
 * within 1e-5 + 1e-4 relative), each with every kernel giving the same bits. */
#include "gpu_test.h"
#include "gt_kv.h"

#define L GT_KV_LAYERS

static float *as_f32(const void *p, enum dice_dtype dt, size_t n)
{
	float *f = (float *)xmalloc(n * sizeof *f + 1);
	for (size_t i = 0; i < n; i++)
		f[i] = dt == DICE_F32 ? ((const float *)p)[i] :
		       dt == DICE_BF16 ? dice_bf16_to_f32(((const uint16_t *)p)[i]) :
		                         dice_f16_to_f32(((const uint16_t *)p)[i]);
	return f;
}

/* the device caches against the host ones (after the same op on both) */
static void compare_caches(const char *what, struct batch *b, double atol, double eps)
{
	char name[200];
	for (int s = 0; s < b->h.nseq; s++) {
		size_t n = b->bytes[s] / dice_dtype_size(b->h.dt);
		for (int m = 0; m < 2; m++) {
			void *got = xmalloc(b->bytes[s]);
			G->to_host(got, m ? b->dv[s] : b->dk[s], b->bytes[s]);
			float *g = as_f32(got, b->h.dt, n), *r = as_f32(m ? b->hv[s] : b->hk[s], b->h.dt, n);
			snprintf(name, sizeof name, "%s seq %d %s cache", what, s, m ? "v" : "k");
			gt_compare(name, g, r, n, atol, eps);
			free(got); free(g); free(r);
		}
	}
}

static const char *dtname(enum dice_dtype dt)
{
	return dt == DICE_F32 ? "f32" : dt == DICE_BF16 ? "bf16" : "f16";
}

/* the tensor-core kernels' one-part products (q and the probabilities rounded to the
 * cache's type) against the fp32 twin: the outputs are averages of values in [-2, 2], so
 * an absolute bound; a C model of that rounding on these inputs (q, K, V uniform in [-2, 2],
 * 5 to 4300 keys) gave at most 6.4e-3 for bf16 and 5.0e-4 for fp16 */
static double one_part_atol(enum dice_dtype dt)
{
	return dt == DICE_BF16 ? 2e-2 : 2.5e-3;
}

static void attention_case(int nseq, const int *T, const int *len, int NH, int NKV, int HD,
                           int block, enum dice_dtype dt)
{
	struct batch b;
	char what[240];

	batch_make(&b, nseq, T, len, NKV, HD, dt);
	size_t qn = (size_t)b.h.N * NH * HD;
	float *q = gt_rand(qn, -2, 2), *ref = (float *)xmalloc(qn * sizeof(float));
	float *dq = (float *)gt_up(q, qn * sizeof(float));
	H->attention_kv(ref, q, &b.h, 1, NH, NKV, HD, block);
	int tc = dt != DICE_F32 && HD == 128;       /* the tensor-core kernels: two modes */
	for (int exact = tc ? 0 : 1; exact <= 1; exact++) {
		const char *mode = !tc ? "" : exact ? " exact" : " one-part";
		float *dout = gt_poisoned(qn);
		gpu_set_dk_exact(exact);
		G->attention_kv(dout, dq, &b.d, 1, NH, NKV, HD, block);
		float *out = gt_down(dout, qn);
		G->free(dout);
		snprintf(what, sizeof what, "attention_kv %s%s nseq=%d T0=%d maxS=%d NH=%d NKV=%d "
		         "HD=%d", dtname(dt), mode, nseq, T[0], b.h.maxS, NH, NKV, HD);
		if (exact)
			gt_compare(what, out, ref, qn, 1e-5, 1e-4);
		else
			gt_compare(what, out, ref, qn, one_part_atol(dt), 0);
		if (tc) {                               /* the unit kernels and the cluster one */
			enum { NV = 6 };
			static const int ver[NV] = { 0, 1, 2, 2, 3, 3 }, grid[NV] = { 0, 0, 0, 3, 0, 3 };
			float *got[NV];
			for (int u = 0; u < NV; u++) {
				gpu_set_dk_unit(u > 0);
				gpu_set_dk_unit_v(ver[u], grid[u]);
				float *d = gt_poisoned(qn);
				G->attention_kv(d, dq, &b.d, 1, NH, NKV, HD, block);
				got[u] = gt_down(d, qn);
				G->free(d);
			}
			/* attention_kv16: the same out, and out16 its rounding where it says it wrote
			 * it (every tensor-core kernel but the global-memory merge), on the cluster
			 * kernel and the two unit kernels */
			for (int u = 0; u < 3; u++) {
				gpu_set_dk_unit(u > 0);
				gpu_set_dk_unit_v(u, 0);
				float *d = gt_poisoned(qn);
				void *d16 = G->alloc(qn * 2);
				int rc = G->attention_kv16(d, d16, DICE_BF16, dq, &b.d, 1, NH, NKV, HD, block);
				float *o2 = gt_down(d, qn);
				snprintf(what, sizeof what, "attention_kv16 %s%s nseq=%d T0=%d NH=%d NKV=%d "
				         "kernel %d: out bitwise equal, out16 written (%d)", dtname(dt), mode,
				         nseq, T[0], NH, NKV, u, rc);
				CHECK((rc == 1 || (u == 0 && rc == 0)) &&
				      !memcmp(o2, got[0], qn * sizeof(float)), what);
				snprintf(what, sizeof what, "attention_kv16 %s%s nseq=%d T0=%d NH=%d NKV=%d "
				         "kernel %d: out16 the rounding of out", dtname(dt), mode, nseq, T[0],
				         NH, NKV, u);
				if (rc == 1)
					gt_check16(what, d16, got[0], qn, DICE_BF16);
				free(o2);
				G->free(d); G->free(d16);
			}
			gpu_set_dk_unit(-1);
			gpu_set_dk_unit_v(0, 0);
			for (int u = 1; u < NV; u++) {
				snprintf(what, sizeof what, "attention_kv %s%s nseq=%d T0=%d maxS=%d NH=%d "
				         "NKV=%d: unit kernel %d%s bitwise equal to the cluster kernel and to "
				         "the default", dtname(dt), mode, nseq, T[0], b.h.maxS, NH, NKV,
				         ver[u], grid[u] ? " on 3 blocks" : "");
				CHECK(memcmp(got[0], got[u], qn * sizeof(float)) == 0 &&
				      memcmp(got[0], out, qn * sizeof(float)) == 0, what);
			}
			for (int u = 0; u < NV; u++)
				free(got[u]);
		}
		free(out);
	}
	gpu_set_dk_exact(-1);
	free(q); free(ref);
	G->free(dq);
	batch_free(&b);
}

/* batch invariance: the out rows of one sequence (T new rows after len) computed alone, then
 * with the sequence at place `at` among nb sequences of other lengths (and T 1..8): the same
 * bits (the keys' split must depend on the sequence alone, never on the batch); unit 0: the
 * batches on the cluster kernel, else on unit kernel version `unit` on 5 blocks */
static void invariance_case(int T, int len, int NH, int NKV, int HD, enum dice_dtype dt,
                            int unit, int exact)
{
	struct batch one;
	int T1[1] = { T }, len1[1] = { len };
	char what[200];

	batch_make(&one, 1, T1, len1, NKV, HD, dt);
	size_t qn = (size_t)T * NH * HD;
	float *q = gt_rand(qn, -2, 2), *dq = (float *)gt_up(q, qn * sizeof(float));
	float *dout = gt_poisoned(qn);
	gpu_set_dk_exact(exact);
	gpu_set_dk_unit(0);                         /* alone: the cluster kernel */
	G->attention_kv(dout, dq, &one.d, 1, NH, NKV, HD, 4);
	gpu_set_dk_unit(unit > 0);                  /* batched: the one asked for */
	gpu_set_dk_unit_v(unit, 5);                 /* (on 5 blocks) */
	float *alone = gt_down(dout, qn);
	G->free(dq); G->free(dout);
	for (int nb = 1; nb <= 16; nb += unit ? 7 : 3) {  /* 1, 4, .. 16; unit: 1, 8, 15 */
		int Ts[16], lens[16], at = nb / 2;
		struct batch b;
		for (int s = 0; s < nb; s++) {
			Ts[s] = s == at ? T : 1 + (s * 5) % 8;
			lens[s] = s == at ? len : (s * 977 + nb * 131) % 4300;
		}
		batch_make(&b, nb, Ts, lens, NKV, HD, dt);
		G->copy(b.dk[at], one.dk[0], one.bytes[0]);         /* the same cache */
		G->copy(b.dv[at], one.dv[0], one.bytes[0]);
		size_t bn = (size_t)b.h.N * NH * HD, off = (size_t)b.h.row0[at] * NH * HD;
		float *bq = gt_rand(bn, -2, 2);
		memcpy(bq + off, q, qn * sizeof(float));
		float *dbq = (float *)gt_up(bq, bn * sizeof(float)), *dbo = gt_poisoned(bn);
		G->attention_kv(dbo, dbq, &b.d, 1, NH, NKV, HD, 4);
		float *got = gt_down(dbo, bn);
		snprintf(what, sizeof what, "attention_kv %s%s T=%d len=%d NH=%d NKV=%d: alone "
		         "bitwise equal to place %d of %d sequences (maxS %d, unit kernel %d)",
		         dtname(dt), exact ? " exact" : "", T, len, NH, NKV, at, nb, b.h.maxS, unit);
		CHECK(memcmp(got + off, alone, qn * sizeof(float)) == 0, what);
		free(bq); free(got);
		G->free(dbq); G->free(dbo);
		batch_free(&b);
	}
	gpu_set_dk_unit(-1);
	gpu_set_dk_unit_v(0, 0);
	gpu_set_dk_exact(-1);
	free(q); free(alone);
	batch_free(&one);
}

static void append_case(int nseq, const int *T, const int *len, int NH, int NKV, int HD,
                        enum dice_dtype dt)
{
	struct batch b;
	char what[200];

	batch_make(&b, nseq, T, len, NKV, HD, dt);
	size_t kn = (size_t)b.h.N * NKV * HD, W = (size_t)(NH + 2 * NKV) * HD;
	float *k = gt_rand(kn, -2, 2), *v = gt_rand(kn, -2, 2);
	float *dk = (float *)gt_up(k, kn * 4), *dv = (float *)gt_up(v, kn * 4);
	H->kv_append(&b.h, 1, k, v, NKV, HD);
	G->kv_append(&b.d, 1, dk, dv, NKV, HD);
	snprintf(what, sizeof what, "kv_append %s NKV=%d HD=%d", dtname(dt), NKV, HD);
	compare_caches(what, &b, 0, 0);

	/* qkv_prep: q out, k and v into layer 0 */
	float *qkv = gt_rand((size_t)b.h.N * W, -2, 2), *qw = gt_rand(HD, 0.5, 1.5);
	float *kw = gt_rand(HD, 0.5, 1.5), *ref = (float *)xmalloc(sizeof(float) * b.h.N * NH * HD);
	int *pos = (int *)xmalloc(sizeof(int) * (b.h.N + 1));
	for (int s = 0; s < nseq; s++)
		for (int n = b.h.row0[s]; n < b.h.row0[s + 1]; n++)
			pos[n] = len[s] + n - b.h.row0[s];
	float *dqkv = (float *)gt_up(qkv, sizeof(float) * b.h.N * W);
	float *dqw = (float *)gt_up(qw, sizeof(float) * HD), *dkw = (float *)gt_up(kw, sizeof(float) * HD);
	int *dpos = (int *)gt_up(pos, sizeof(int) * (b.h.N + 1));
	float *dq = gt_poisoned((size_t)b.h.N * NH * HD);
	H->qkv_prep(ref, qkv, qw, kw, pos, &b.h, 0, NH, NKV, HD, 1e-6f, 1e6f);
	G->qkv_prep(dq, dqkv, dqw, dkw, dpos, &b.d, 0, NH, NKV, HD, 1e-6f, 1e6f);
	float *got = gt_down(dq, (size_t)b.h.N * NH * HD);
	snprintf(what, sizeof what, "qkv_prep q %s NH=%d NKV=%d HD=%d", dtname(dt), NH, NKV, HD);
	gt_compare(what, got, ref, (size_t)b.h.N * NH * HD, 1e-5, 1e-4);
	snprintf(what, sizeof what, "qkv_prep %s", dtname(dt));
	/* a 16-bit cache may round a value near a tie differently: one unit in the last place */
	compare_caches(what, &b, 1e-5, dt == DICE_F32 ? 1e-4 : 1e-2);
	free(k); free(v); free(qkv); free(qw); free(kw); free(ref); free(pos); free(got);
	G->free(dk); G->free(dv); G->free(dqkv); G->free(dqw); G->free(dkw); G->free(dpos);
	G->free(dq);
	batch_free(&b);
}

static void elementwise_cases(int N, int C)
{
	float *gu = gt_rand((size_t)N * 2 * C, -4, 4), *ref = (float *)xmalloc(sizeof(float) * N * C);
	float *dgu = (float *)gt_up(gu, sizeof(float) * N * 2 * C), *dy = gt_poisoned((size_t)N * C);
	char what[120];

	H->swiglu_cat(ref, gu, N, C);
	G->swiglu_cat(dy, dgu, N, C);
	float *got = gt_down(dy, (size_t)N * C);
	snprintf(what, sizeof what, "swiglu_cat N=%d C=%d", N, C);
	gt_compare(what, got, ref, (size_t)N * C, 1e-6, 1e-5);
	free(got);

	float *x = gt_rand((size_t)N * C, -2, 2), *r = gt_rand((size_t)N * C, -2, 2);
	float *w = gt_rand(C, 0.5, 1.5);
	float *dx = (float *)gt_up(x, sizeof(float) * N * C), *dr = (float *)gt_up(r, sizeof(float) * N * C);
	float *dw = (float *)gt_up(w, sizeof(float) * C);
	float *x0 = (float *)xmalloc(sizeof(float) * N * C);   /* (the twin adds r into x) */
	memcpy(x0, x, sizeof(float) * N * C);
	H->add_rmsnorm(ref, x, r, w, N, C, 1e-6f);
	G->add_rmsnorm(dy, dx, dr, dw, N, C, 1e-6f);
	got = gt_down(dy, (size_t)N * C);
	float *gx = gt_down(dx, (size_t)N * C);
	snprintf(what, sizeof what, "add_rmsnorm y N=%d C=%d", N, C);
	gt_compare(what, got, ref, (size_t)N * C, 1e-5, 1e-4);
	snprintf(what, sizeof what, "add_rmsnorm x N=%d C=%d", N, C);
	gt_compare(what, gx, x, (size_t)N * C, 0, 0);
	/* add_rmsnorm16: the same y and x, and y16 the rounding of y where it says it wrote it
	 * (the 16-byte path: C % 8 == 0, up to 4096 wide) */
	for (int f = 0; f < 2; f++) {
		enum dice_dtype dt16 = f ? DICE_F16 : DICE_BF16;
		float *dx2 = (float *)gt_up(x0, sizeof(float) * N * C), *dy2 = gt_poisoned((size_t)N * C);
		void *dy16 = G->alloc((size_t)N * C * 2);
		int rc = G->add_rmsnorm16(dy2, dy16, dt16, dx2, dr, dw, N, C, 1e-6f);
		float *y2 = gt_down(dy2, (size_t)N * C), *x2 = gt_down(dx2, (size_t)N * C);
		snprintf(what, sizeof what, "add_rmsnorm16 %s N=%d C=%d: y16 written (%d) where the "
		         "16-byte path runs", dtname(dt16), N, C, rc);
		CHECK(rc == (C % 8 == 0 && C <= 4096), what);
		snprintf(what, sizeof what, "add_rmsnorm16 %s N=%d C=%d: y and x bitwise those of "
		         "add_rmsnorm", dtname(dt16), N, C);
		CHECK(!memcmp(y2, got, sizeof(float) * N * C) && !memcmp(x2, gx, sizeof(float) * N * C),
		      what);
		if (rc == 1) {
			snprintf(what, sizeof what, "add_rmsnorm16 %s N=%d C=%d: y16 the rounding of y",
			         dtname(dt16), N, C);
			gt_check16(what, dy16, got, (size_t)N * C, dt16);
		}
		free(y2); free(x2);
		G->free(dx2); G->free(dy2); G->free(dy16);
	}
	free(gu); free(ref); free(got); free(gx); free(x); free(x0); free(r); free(w);
	G->free(dgu); G->free(dy); G->free(dx); G->free(dr); G->free(dw);
}

/* add_rmsnorm with y 4 bytes past a 16-byte boundary (x, r and w aligned, C whole tiles):
 * the 4-byte path for every access, the same values */
static void add_rmsnorm_misaligned(int N, int C)
{
	float *x = gt_rand((size_t)N * C, -2, 2), *r = gt_rand((size_t)N * C, -2, 2);
	float *w = gt_rand(C, 0.5, 1.5), *ref = (float *)xmalloc(sizeof(float) * N * C);
	float *dx = (float *)gt_up(x, sizeof(float) * N * C), *dr = (float *)gt_up(r, sizeof(float) * N * C);
	float *dw = (float *)gt_up(w, sizeof(float) * C), *dy = gt_poisoned((size_t)N * C + 1);
	char what[120];

	H->add_rmsnorm(ref, x, r, w, N, C, 1e-6f);
	G->add_rmsnorm(dy + 1, dx, dr, dw, N, C, 1e-6f);
	float *got = gt_down(dy + 1, (size_t)N * C), *gx = gt_down(dx, (size_t)N * C);
	snprintf(what, sizeof what, "add_rmsnorm y N=%d C=%d, y not 16-byte aligned", N, C);
	gt_compare(what, got, ref, (size_t)N * C, 1e-5, 1e-4);
	snprintf(what, sizeof what, "add_rmsnorm x N=%d C=%d, y not 16-byte aligned", N, C);
	gt_compare(what, gx, x, (size_t)N * C, 0, 0);
	free(x); free(r); free(w); free(ref); free(got); free(gx);
	G->free(dx); G->free(dr); G->free(dw); G->free(dy);
}

int main(void)
{
	if (gt_init(61))
		return 0;
	enum dice_dtype dts[3] = { DICE_F32, DICE_BF16, DICE_F16 };
	static int T1[1] = { 4 }, len1[1] = { 1024 };
	static int T1b[1] = { 1 }, len1b[1] = { 0 };           /* S = 1 */
	static int T1c[1] = { 8 }, len1c[1] = { 4100 };        /* S > 4K, T = 8 */
	static int T3[3] = { 4, 4, 4 }, len3[3] = { 0, 37, 515 };
	static int T5[5] = { 8, 4, 1, 8, 4 }, len5[5] = { 3, 64, 1, 2049, 130 };  /* mid-block */
	static int T4p[2] = { 64, 13 }, len4p[2] = { 0, 8 };   /* prefill-like: many rows */
	static int T2s[2] = { 40, 7 }, len2s[2] = { 600, 1500 };  /* row tiles and splits */
	int T16[16], len16[16], T40[40], len40[40];

	for (int i = 0; i < 16; i++) {
		T16[i] = 4;
		len16[i] = 200 + 97 * i;
	}
	for (int i = 0; i < 40; i++) {              /* 320 units: the unit kernel by default */
		T40[i] = i % 7 ? 4 : 1 + i % 8;
		len40[i] = i % 5 ? (i * 131) % 1300 : 1024;
	}
	for (int d = 0; d < 3; d++) {
		enum dice_dtype dt = dts[d];
		attention_case(1, T1, len1, 16, 8, 128, 4, dt);          /* 1.7B geometry */
		attention_case(1, T1, len1, 32, 8, 128, 4, dt);          /* 4B */
		attention_case(1, T1b, len1b, 8, 2, 128, 4, dt);
		attention_case(1, T1c, len1c, 32, 8, 128, 4, dt);
		attention_case(3, T3, len3, 8, 2, 64, 4, dt);
		attention_case(5, T5, len5, 32, 4, 128, 4, dt);          /* group 8 */
		attention_case(5, T5, len5, 4, 4, 256, 4, dt);           /* group 1, HD 256 */
		attention_case(2, T4p, len4p, 8, 2, 128, 4, dt);         /* row tiles */
		attention_case(2, T2s, len2s, 32, 8, 128, 4, dt);        /* row tiles x splits */
		attention_case(16, T16, len16, 32, 8, 128, 4, dt);       /* batch, no split */
		if (dt != DICE_F32)
			attention_case(40, T40, len40, 32, 8, 128, 4, dt);   /* large batch, 1..6 splits */
		append_case(5, T5, len5, 8, 2, 128, dt);
		append_case(3, T3, len3, 4, 4, 64, dt);
	}
	/* the engine's batches: 4 rows a sequence, 8 for those that save their finished block
	 * (two row tiles; the others' second is empty), some 1 and 12, 1K to 4K keys, lengths
	 * at and across block, tile and split ends; 33 sequences (3 row tiles: 792 units) take
	 * dv_kernel by default (a batch of 128 passed too, helper att8, but costs CPU time) */
	static const int mixn[2] = { 6, 33 };
	for (int i = 0; i < 2; i++) {
		int nb = mixn[i], Tm[33], lenm[33];
		for (int s = 0; s < nb; s++) {
			Tm[s] = s % 4 == 3 || s % 5 == 1 ? 8 : s % 11 == 7 ? 12 : s % 13 == 5 ? 1 : 4;
			lenm[s] = s % 3 == 0 ? 1020 + 1024 * (s % 4) - 4 * (s % 2) :
			          1000 + (s * 797 + nb * 37) % 3100;
		}
		attention_case(nb, Tm, lenm, 32, 8, 128, 4, DICE_BF16);
		if (i == 0)
			attention_case(nb, Tm, lenm, 32, 8, 128, 4, DICE_F16);
	}
	static const int inv[3] = { 0, 2, 3 };     /* batched on the cluster / unit kernel 2, 3 */
	for (int i = 0; i < 3; i++) {
		int unit = inv[i];
		for (int ex = 0; ex < 2; ex++) {    /* the one-part products, then the exact */
			invariance_case(4, 1020, 32, 8, 128, DICE_BF16, unit, ex);  /* 4B, 4 splits */
			invariance_case(4, 300, 16, 8, 128, DICE_BF16, unit, ex);   /* 1.7B, 2 splits */
			invariance_case(4, 2500, 32, 8, 128, DICE_F16, unit, ex);   /* past 2K: 8 */
			invariance_case(1, 1, 32, 8, 128, DICE_BF16, unit, ex);     /* S = 2 */
			invariance_case(8, 1020, 32, 8, 128, DICE_BF16, unit, ex);  /* 2 row tiles */
		}
	}
	invariance_case(8, 61, 8, 2, 64, DICE_F32, 0, 1);            /* one split */
	elementwise_cases(5, 2048);                 /* add_rmsnorm: a tile a thread, 16-byte loads */
	elementwise_cases(4, 2560);                 /* two tiles a thread (SDAR-4B) */
	elementwise_cases(3, 100);                  /* a row not of whole tiles */
	elementwise_cases(2, 5000);                 /* wider than two tiles a thread */
	elementwise_cases(2, 4100);
	add_rmsnorm_misaligned(3, 2048);
	return test_done();
}
