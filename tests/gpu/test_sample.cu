/* test_sample: the CUDA sample op against its CPU twin (sample_draw) on random logits.
 *
 * Top-k 1: tokens and probabilities identical, bitwise (one maximum: the kernel's first pass
 * alone; ties included: integer logits make
 * many tokens share the maximum, and u picks among them). Full softmax (top-k 0, top-p 1,
 * temperatures 1 and 0.6, flat and peaked logits): the probability of the drawn token within
 * 1e-5 relative of the one computed in double, and the drawn index consistent with the CDF
 * computed in double: CDF(before) <= u + 1e-6 and CDF(through) > u - 1e-6; the draws that
 * differ from the twin's must be few and each such a boundary case. Other filters (top-k 50,
 * top-p 0.9) go through the host twin: identical. Rows are a permuted subset of the matrix.
 * Top-k 1 over rows longer than the kernel's chunk (split over blocks): rows whose maximum
 * sits at either side of a chunk boundary, or is shared by two chunks (a tie the merge must
 * send back through the whole row), identical too. */
#include <string.h>

#include "gpu_test.h"
#include "choose.h"

static double *draws(int NROW, double ulo)
{
	double *u = (double *)xmalloc(NROW * sizeof *u);
	for (int r = 0; r < NROW; r++)
		u[r] = ulo + (1 - ulo) * rng_uniform(&R);
	u[0] = 0;
	if (NROW > 1)
		u[1] = 0.9999999;
	return u;
}

/* the row's CDF in double, with the twin's float filter: before/through of token g */
static void cdf(const float *l, int V, float temp, int g, double *before, double *through,
                double *p)
{
	float mx = -INFINITY;
	double s = 0, b = 0, eg = 0;
	for (int i = 0; i < V; i++) {
		float e = temp == 1.0f ? l[i] : l[i] / temp;
		if (e > mx)
			mx = e;
	}
	for (int i = 0; i < V; i++) {
		float e = temp == 1.0f ? l[i] : l[i] / temp;
		double x = exp((double)e - mx);
		s += x;
		if (i < g)
			b += x;
		if (i == g)
			eg = x;
	}
	*before = b / s;
	*through = (b + eg) / s;
	*p = eg / s;
}

static void one(const char *what, int V, int NROW, float lo, float hi, int integer, float temp,
                int top_k, float top_p)
{
	int NR = NROW + 3;
	float *l = gt_rand((size_t)NR * V, lo, hi);
	if (integer)
		for (size_t i = 0; i < (size_t)NR * V; i++)
			l[i] = floorf(l[i]);
	int *rows = (int *)xmalloc(NROW * sizeof *rows), *tg = (int *)xmalloc(NROW * sizeof(int)),
	    *tc = (int *)xmalloc(NROW * sizeof(int));
	float *pg = (float *)xmalloc(NROW * sizeof(float)), *pc = (float *)xmalloc(NROW * sizeof(float));
	double *u = draws(NROW, 0);
	for (int r = 0; r < NROW; r++)
		rows[r] = (NR - 1 - r * 7 % NR + NR) % NR;         /* a permuted subset */
	float *dl = (float *)gt_up(l, (size_t)NR * V * sizeof(float));
	int exact = top_k == 1 || top_p < 1.0f || (top_k > 1 && top_k < V);
	int same = 0, bad = 0, badp = 0;
	char name[160];

	H->sample(tc, pc, l, rows, u, NROW, V, temp, top_k, top_p);
	G->sample(tg, pg, dl, rows, u, NROW, V, temp, top_k, top_p);
	for (int r = 0; r < NROW; r++) {
		same += tg[r] == tc[r];
		if (exact) {
			if (tg[r] != tc[r] || pg[r] != pc[r]) {
				if (!bad++)
					printf("#   row %d: gpu %d (%.9g) cpu %d (%.9g)\n", r, tg[r], pg[r], tc[r], pc[r]);
			}
			continue;
		}
		double b, t, p;
		if (tg[r] < 0 || tg[r] >= V) {
			bad++;
			continue;
		}
		cdf(l + (size_t)rows[r] * V, V, temp, tg[r], &b, &t, &p);
		if (!(b <= u[r] + 1e-6 && t > u[r] - 1e-6 && p > 0)) {
			if (!bad++)
				printf("#   row %d: u %.9f, gpu %d has CDF [%.9f, %.9f)\n", r, u[r], tg[r], b, t);
		}
		if (!(fabs(pg[r] - p) <= 1e-5 * p)) {
			if (!badp++)
				printf("#   row %d: prob gpu %.9g double %.9g\n", r, pg[r], p);
		}
	}
	snprintf(name, sizeof name, "sample %s: V=%d NROW=%d T=%g top-k %d top-p %g: %d/%d draws as the twin's",
	         what, V, NROW, temp, top_k, top_p, same, NROW);
	CHECK(bad == 0 && badp == 0 && (exact ? same == NROW : same >= NROW - NROW / 16), name);
	free(l), free(rows), free(tg), free(tc), free(pg), free(pc), free(u);
	G->free(dl);
}

/* top-k 1 with the row split over blocks (chunks of 4096): a row's maximum placed on either
 * side of a chunk boundary, in the last (short) chunk, or tied across two chunks, against the
 * twin, bitwise; V a multiple of 4 (16-byte loads) and not */
static void split_case(int V)
{
	static const int at[][2] = { { 4095, -1 }, { 4096, -1 }, { 8191, -1 }, { 0, -1 },
	                             { -1, -1 }, { 100, 4100 }, { 4096, 8192 }, { 4095, 4096 },
	                             { 3, 7 }, { -2, 9000 } };
	int NR = (int)(sizeof at / sizeof at[0]), bad = 0, *rows = (int *)xmalloc(NR * sizeof(int));
	float *l = gt_rand((size_t)NR * V, -8, 8), pc[16], pg[16];
	int tc[16], tg[16];
	double *u = draws(NR, 0);
	for (int r = 0; r < NR; r++) {
		rows[r] = r;
		for (int k = 0; k < 2; k++) {
			int i = at[r][k] == -1 ? (k ? -1 : V - 1) : at[r][k] == -2 ? V - 2 : at[r][k];
			if (i >= 0 && i < V)
				l[(size_t)r * V + i] = 20.0f;
		}
	}
	float *dl = (float *)gt_up(l, (size_t)NR * V * sizeof(float));
	H->sample(tc, pc, l, rows, u, NR, V, 1.0f, 1, 1.0f);
	G->sample(tg, pg, dl, rows, u, NR, V, 1.0f, 1, 1.0f);
	for (int r = 0; r < NR; r++)
		if (tg[r] != tc[r] || pg[r] != pc[r]) {
			if (!bad++)
				printf("#   row %d: gpu %d (%.9g) cpu %d (%.9g)\n", r, tg[r], pg[r], tc[r], pc[r]);
		}
	char name[120];
	snprintf(name, sizeof name, "sample greedy split V=%d: maxima at chunk boundaries and tied "
	         "across chunks, as the twin's", V);
	CHECK(bad == 0, name);
	G->free(dl);
	free(l), free(rows), free(u);
}

/* the denoise op: n blocks of B positions (random masks, one block with none), quotas and
 * rules, against (1) the sample op's draws of the same rows with the same uniforms and
 * lib/choose.h's rule applied to them on the host, bitwise, and (2) for top-k 1 the CPU twin
 * (H->denoise), bitwise; out holds the blocks' ids afterwards */
static void denoise_case(const char *what, int V, int n, int B, int decoding, float threshold,
                         float temp, int top_k, int integer)
{
	int NP = n * B, nu = 0, bad = 0;
	float *l = gt_rand((size_t)NP * V, integer ? -3 : -6, integer ? 3 : 6);
	if (integer)
		for (size_t i = 0; i < (size_t)NP * V; i++)
			l[i] = floorf(l[i]);
	int *x = (int *)xmalloc(NP * sizeof(int)), *step = (int *)xmalloc(NP * sizeof(int));
	uint8_t *msk = (uint8_t *)xmalloc(NP);
	float *conf = (float *)xmalloc(NP * sizeof(float));
	double *u = (double *)xmalloc(NP * sizeof(double));
	struct denoise_seq *dh = (struct denoise_seq *)xmalloc(n * sizeof *dh);
	struct denoise_seq *dg = (struct denoise_seq *)xmalloc(n * sizeof *dg);
	for (int i = 0; i < NP; i++) {
		msk[i] = i / B != 1 && rng_uniform(&R) < 0.6;   /* block 1: nothing masked */
		x[i] = msk[i] ? V - 1 : (int)(rng_uniform(&R) * (V - 1));
		step[i] = -1;
		conf[i] = -1.0f;
	}
	msk[0] = 1, x[0] = V - 1;
	for (int s = 0; s < n; s++) {
		dh[s] = (struct denoise_seq){ .row = s * B, .quota = 1 + (int)(rng_uniform(&R) * B),
		                              .gstep = 7 + s, .u0 = nu };
		for (int j = 0; j < B; j++)
			if (msk[s * B + j])
				u[nu++] = rng_uniform(&R);
	}
	/* (1) the expected result from the sample op's draws */
	int *rows = (int *)xmalloc(NP * sizeof(int)), *tg = (int *)xmalloc(NP * sizeof(int));
	float *pg = (float *)xmalloc(NP * sizeof(float));
	int *ex = (int *)xmalloc(NP * sizeof(int)), *es = (int *)xmalloc(NP * sizeof(int));
	uint8_t *em = (uint8_t *)xmalloc(NP);
	float *ec = (float *)xmalloc(NP * sizeof(float));
	float *dl = (float *)gt_up(l, (size_t)NP * V * sizeof(float));
	for (int s = 0, k = 0; s < n; s++)
		for (int j = 0; j < B; j++)
			if (msk[s * B + j])
				rows[k++] = s * B + j;
	G->sample(tg, pg, dl, rows, u, nu, V, temp, top_k, 1.0f);
	memcpy(ex, x, NP * sizeof(int)), memcpy(es, step, NP * sizeof(int));
	memcpy(em, msk, NP), memcpy(ec, conf, NP * sizeof(float));
	for (int s = 0, k = 0; s < n; s++) {
		float cf[32] = { 0 };
		int tk[32];
		uint8_t c[32];
		for (int j = 0; j < B; j++)
			if (msk[s * B + j])
				tk[j] = tg[k], cf[j] = pg[k++];
		dice_choose(decoding, B, msk + s * B, cf, dh[s].quota, threshold, c);
		for (int j = 0; j < B; j++)
			if (c[j])
				ex[s * B + j] = tk[j], em[s * B + j] = 0, es[s * B + j] = dh[s].gstep,
				ec[s * B + j] = cf[j];
	}
	/* the op on the GPU */
	int *xd = (int *)gt_up(x, NP * sizeof(int)), *sd = (int *)gt_up(step, NP * sizeof(int));
	uint8_t *md = (uint8_t *)gt_up(msk, NP);
	float *cd = (float *)gt_up(conf, NP * sizeof(float));
	int *od = (int *)G->alloc(NP * sizeof(int));
	for (int s = 0; s < n; s++) {
		dg[s] = dh[s];
		dg[s].x = xd + s * B, dg[s].msk = md + s * B, dg[s].step = sd + s * B;
		dg[s].conf = cd + s * B;
	}
	int rc = G->denoise(dl, V, dg, n, B, u, nu, od, decoding, threshold, temp, top_k, 1.0f);
	int *gx = (int *)xmalloc(NP * sizeof(int)), *gs = (int *)xmalloc(NP * sizeof(int));
	int *go = (int *)xmalloc(NP * sizeof(int));
	uint8_t *gm = (uint8_t *)xmalloc(NP);
	float *gc = (float *)xmalloc(NP * sizeof(float));
	G->to_host(gx, xd, NP * sizeof(int)), G->to_host(gs, sd, NP * sizeof(int));
	G->to_host(gm, md, NP), G->to_host(gc, cd, NP * sizeof(float));
	G->to_host(go, od, NP * sizeof(int));
	for (int i = 0; i < NP; i++) {
		if (gx[i] != ex[i] || gm[i] != em[i] || gs[i] != es[i] || memcmp(&gc[i], &ec[i], 4) ||
		    go[i] != ex[i]) {
			if (!bad++)
				printf("#   position %d: gpu %d %d %d %.9g out %d, expected %d %d %d %.9g\n", i,
				       gx[i], gm[i], gs[i], gc[i], go[i], ex[i], em[i], es[i], ec[i]);
		}
	}
	char name[200];
	snprintf(name, sizeof name, "denoise %s: V=%d n=%d B=%d rule %d T=%g top-k %d: the sample "
	         "op's draws and the rule, bitwise", what, V, n, B, decoding, temp, top_k);
	CHECK(rc == 0 && bad == 0, name);
	/* (2) top-k 1: the CPU twin */
	if (top_k == 1) {
		int *ho = (int *)xmalloc(NP * sizeof(int));
		for (int s = 0; s < n; s++) {
			dh[s].x = x + s * B, dh[s].msk = msk + s * B, dh[s].step = step + s * B;
			dh[s].conf = conf + s * B;
		}
		H->denoise(l, V, dh, n, B, u, nu, ho, decoding, threshold, temp, top_k, 1.0f);
		bad = 0;
		for (int i = 0; i < NP; i++)
			bad += x[i] != gx[i] || msk[i] != gm[i] || step[i] != gs[i] ||
			       memcmp(&conf[i], &gc[i], 4) || ho[i] != go[i];
		snprintf(name, sizeof name, "denoise %s: the CPU twin, bitwise (%d differ)", what, bad);
		CHECK(bad == 0, name);
		free(ho);
	}
	G->free(dl), G->free(xd), G->free(sd), G->free(md), G->free(cd), G->free(od);
	free(l), free(x), free(step), free(msk), free(conf), free(u), free(dh), free(dg), free(rows);
	free(tg), free(pg), free(ex), free(es), free(em), free(ec), free(gx), free(gs), free(go);
	free(gm), free(gc);
}

/* fetch: tickets past the slots' count, waits out of turn, a copy past the slot size, and
 * the bytes as the work queued before left them */
static void fetch_case(void)
{
	const int NF = 40, W = 257;
	int *src = gt_iota(NF * W, 1000), *dst = (int *)xmalloc(NF * W * sizeof(int));
	int *big = (int *)xmalloc(40000 * sizeof(int)), bad = 0;
	int *d = (int *)gt_up(src, NF * W * sizeof(int)), *d2 = (int *)G->alloc(NF * W * sizeof(int));
	long t[40];
	memset(dst, 0, NF * W * sizeof(int));
	G->zero(d2, NF * W * sizeof(int));
	G->copy(d2, d, NF * W * sizeof(int));               /* queued before the fetches */
	for (int i = 0; i < NF; i++) {
		t[i] = G->fetch(dst + i * W, d2 + i * W, W * sizeof(int));
		if (i == 20)
			G->fetch_wait(t[3]);
	}
	int *bsrc = gt_iota(40000, 7), *d3 = (int *)gt_up(bsrc, 40000 * sizeof(int));
	long tb = G->fetch(big, d3, 40000 * sizeof(int));   /* 160 KB: past a slot */
	G->zero(d2, NF * W * sizeof(int));                  /* queued after: not seen */
	G->fetch_wait(tb);
	for (int i = 0; i < NF * W; i++)
		bad += dst[i] != 1000 + i;
	for (int i = 0; i < 40000; i++)
		bad += big[i] != 7 + i;
	G->free(d3);
	free(bsrc);
	int order = 1;
	for (int i = 1; i < NF; i++)
		order &= t[i] > t[i - 1];
	CHECK(bad == 0 && order && tb > t[NF - 1], "fetch: 40 tickets over 16 slots and one past a slot, the bytes before later work");
	G->free(d), G->free(d2);
	free(src), free(dst), free(big);
}

int main(void)
{
	if (gt_init(61))
		return 0;
	int V = 151936;
	one("greedy", V, 64, -8, 8, 0, 1.0f, 1, 1.0f);
	one("greedy T", V, 64, -8, 8, 0, 0.7f, 1, 1.0f);
	one("greedy ties", V, 128, -3, 3, 1, 1.0f, 1, 1.0f);
	one("greedy ties T", 1000, 128, -2, 2, 1, 0.5f, 1, 1.0f);
	one("greedy small V", 7, 32, -1, 1, 1, 1.0f, 1, 1.0f);
	one("softmax flat", V, 256, -4, 4, 0, 1.0f, 0, 1.0f);
	one("softmax peaked", V, 256, -30, 30, 0, 1.0f, 0, 1.0f);
	one("softmax T 0.6", V, 256, -8, 8, 0, 0.6f, 0, 1.0f);
	one("softmax top-k >= V", 1000, 64, -8, 8, 0, 1.0f, 1000, 1.0f);
	one("softmax small V", 33, 64, -2, 2, 0, 1.3f, 0, 1.0f);
	one("host top-k", V, 8, -8, 8, 0, 1.0f, 50, 1.0f);
	one("host top-p", V, 8, -8, 8, 0, 0.8f, 0, 0.9f);
	one("greedy split, scalar loads", 10007, 64, -8, 8, 0, 1.0f, 1, 1.0f);
	one("greedy ties split", 10008, 128, -2, 2, 1, 0.8f, 1, 1.0f);
	split_case(10008);
	split_case(10007);
	split_case(V);
	denoise_case("greedy static", V, 5, 4, 0, 0.9f, 1.0f, 1, 0);
	denoise_case("greedy ties static, split", 10007, 5, 4, 0, 0.9f, 1.0f, 1, 1);
	denoise_case("greedy ties sequential B 32, split", 10008, 2, 32, 2, 0.9f, 1.0f, 1, 1);
	denoise_case("greedy T static, split", V, 3, 8, 0, 0.9f, 0.7f, 1, 0);
	denoise_case("greedy ties sequential", 1000, 7, 8, 2, 0.9f, 1.0f, 1, 1);
	denoise_case("greedy ties static B 32", 1000, 3, 32, 0, 0.9f, 1.0f, 1, 1);
	denoise_case("softmax static", V, 5, 4, 0, 0.9f, 1.0f, 0, 0);
	denoise_case("softmax T dynamic", V, 6, 4, 1, 0.3f, 0.7f, 0, 0);
	denoise_case("softmax sequential", 4099, 4, 16, 2, 0.9f, 1.2f, 0, 0);
	denoise_case("greedy static, more sequences", 1000, 9, 4, 0, 0.9f, 1.0f, 1, 1);
	denoise_case("greedy static, fewer sequences after more", 1000, 2, 4, 0, 0.9f, 1.0f, 1, 1);
	denoise_case("softmax static, one sequence", 1000, 1, 4, 0, 0.9f, 1.0f, 0, 0);
	CHECK(G->denoise(NULL, V, NULL, 0, 4, NULL, 0, NULL, 0, 0.9f, 1.0f, 1, 1.0f) == 0 &&
	      G->denoise(NULL, V, NULL, 0, 4, NULL, 0, NULL, 0, 0.9f, 1.0f, 50, 1.0f) == -1 &&
	      G->denoise(NULL, V, NULL, 0, 4, NULL, 0, NULL, 0, 0.9f, 1.0f, 0, 0.9f) == -1,
	      "denoise: the filters it draws itself (top-k 0 or 1, top-p 1), -1 for others");
	fetch_case();
	return test_done();
}
