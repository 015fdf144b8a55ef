/* test_rl: lib/rl.c. Advantages by hand; TraceRL samples of a hand-worked trace whose prompt
 * is not a multiple of the block (absolute alignment); the loss and its gradient by hand and
 * against finite differences (the formula, then through a tiny model); pi_old recomputed by
 * the training forward equals the log-probabilities the sampler recorded in its trace, also in
 * a last block that the response ends inside (a stop id, or max_tokens). */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "rl.h"
#include "sampler.h"
#include "test.h"
#include "util.h"

static void test_advantages(void)
{
	float r[12] = { 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1 }, a[12];
	uint8_t keep[3];
	int skipped = rl_advantages(r, 3, 4, a, keep);

	CHECK(skipped == 1 && keep[0] && !keep[1] && keep[2], "all-equal group skipped and counted");
	CHECK_NEAR(a[0], 1.0, 1e-6, "z-score, population std (+)");
	CHECK_NEAR(a[1], -1.0, 1e-6, "z-score, population std (-)");
	CHECK(a[4] == 0 && a[7] == 0, "skipped group: advantage 0");
	CHECK_NEAR(a[8], -0.25 / sqrt(0.1875), 1e-6, "z-score 3 vs 1 (low)");
	CHECK_NEAR(a[11], 0.75 / sqrt(0.1875), 1e-6, "z-score 3 vs 1 (high)");
}

/* prompt of 6 tokens (6 mod 4 = 2: the first decode block holds 2 prompt tokens), response of
 * 7 tokens; blocks (absolute): [p4 p5 r0 r1] [r2 r3 r4 r5] [r6 + 3 pads]. Steps as the dynamic
 * sampler would record them: block 1 steps 1,2; block 2 commits two at step 3, then 4, 5;
 * block 3 step 6, an end-of-text pad (never a target); the 3 positions past the response are
 * pads, masked in the noisy copy of every round (SPEC §3.5: steps past the end = max + 1). */
static const int hp[6] = { 1, 2, 3, 4, 5, 6 };
static const int hr[7] = { 20, 21, 22, 23, 24, 25, 30 };
static const int hs[7] = { 2, 1, 3, 5, 3, 4, 6 };

static void test_samples(void)
{
	struct rl_trace t = { hp, 6, hr, hs, 7, 0.5f };
	enum { M = 31, PAD = 30 };
	/* per round: the noisy response ids and which response tokens are targets */
	static const int noisy[3][10] = {
		{ M, M, M, M, M, M, M, M, M, M },
		{ M, 21, 22, M, 24, M, 30, M, M, M },
		{ 20, 21, 22, M, 24, 25, 30, M, M, M },
	};
	static const int target[3][10] = {
		{ 0, 1, 1, 0, 1, 0, 0, 0, 0, 0 },
		{ 1, 0, 0, 0, 0, 1, 0, 0, 0, 0 },
		{ 0, 0, 0, 1, 0, 0, 0, 0, 0, 0 },
	};
	struct rl_item it[3] = { { &t, 0 }, { &t, 1 }, { &t, 2 } };
	struct rl_batch rb;
	int ok_ids = 1, ok_tgt = 1, ok_pos = 1, ok_clean = 1, ok_adv = 1, nt = 0;

	CHECK(rl_rounds(&t, 4) == 3, "rounds = most distinct steps in a block");
	rl_batch_build(&rb, it, 3, 4, M, PAD);
	CHECK(rb.b.nsamp == 3 && rb.b.N == 3 * 32, "3 samples of [noisy | clean] 16 + 16 rows");
	for (int k = 0; k < 3; k++) {
		int row = rb.b.start[k];
		for (int j = 0; j < 16; j++) {
			int want = j < 6 ? hp[j] : noisy[k][j - 6];
			int wt = j >= 6 && target[k][j - 6] ? hr[j - 6] : -1;
			ok_ids &= rb.b.ids[row + j] == want && rb.b.noisy[row + j] == 1;
			ok_tgt &= rb.b.target[row + j] == wt;
			ok_pos &= rb.b.pos[row + j] == j && rb.b.pos[row + 16 + j] == j;
			ok_clean &= rb.b.ids[row + 16 + j] == (j < 6 ? hp[j] : j < 13 ? hr[j - 6] : PAD) &&
			            rb.b.noisy[row + 16 + j] == 0 && rb.b.target[row + 16 + j] == -1;
			ok_adv &= rb.adv[row + j] == 0.5f;
			nt += wt >= 0;
		}
	}
	CHECK(ok_ids, "noisy copies mask the tokens of step >= s per absolute block");
	CHECK(ok_tgt, "targets: step == s, pads excluded, prompt never");
	CHECK(ok_pos, "positions 0..n-1 in both halves");
	CHECK(ok_clean, "clean half: the whole sequence and its pads, no target");
	CHECK(ok_adv && rb.ntarget == nt && nt == 6, "advantages per row; 6 targets in all");
	rl_batch_free(&rb);

	/* a prompt of 4 (aligned): r0..r3 form one block, steps 2,1,3,5 */
	struct rl_trace t2 = { hp, 4, hr, hs, 4, 1.0f };
	CHECK(rl_rounds(&t2, 4) == 4, "aligned prompt: one block of 4 distinct steps, 4 rounds");
}

static void test_loss_formula(void)
{
	struct rl_loss_opts o = { 0.2f, 0.01f, 0.25 };
	float lp[1] = { -1.0f }, old[1] = { -1.0f }, adv[1] = { 2.0f }, d[1];
	struct rl_stats st = { 0 };
	double l = rl_loss(lp, old, NULL, adv, 1, &o, d, &st);

	CHECK_NEAR(l, -2.0 * 0.25, 1e-9, "rho 1: loss = -A scale");
	CHECK_NEAR(d[0], -2.0 * 0.25, 1e-7, "rho 1: dloss/dlogp = -A scale");
	/* rho = e^0.5 > 1.2 with A > 0: clipped, only the KL carries a gradient */
	lp[0] = -0.5f;
	l = rl_loss(lp, old, NULL, adv, 1, &o, d, &st);
	double kl = exp(-0.5) - 1 + 0.5;
	CHECK_NEAR(l, (-1.2 * 2.0 + 0.01 * kl) * 0.25, 1e-7, "clipped surrogate + k3 KL (hand)");
	CHECK_NEAR(d[0], 0.01 * (1 - exp(-0.5)) * 0.25, 1e-7, "clipped: KL gradient only");
	CHECK(st.clipped == 1 && st.targets == 2, "clip count");

	/* finite differences of the formula over random points (clip edges avoided) */
	float L[64], O[64], A[64], K[64], G[64];
	int ok = 1;
	for (int i = 0; i < 64; i++) {
		O[i] = -0.1f * (float)(i % 7) - 0.3f;
		L[i] = O[i] + 0.05f * (float)((i * 37) % 23 - 11);
		K[i] = O[i] - 0.1f;
		A[i] = (float)((i * 13) % 5) - 2.0f;
		double rho = exp((double)L[i] - O[i]);
		if (fabs(rho - 0.8) < 0.01 || fabs(rho - 1.2) < 0.01)
			L[i] += 0.02f;
	}
	rl_loss(L, O, K, A, 64, &o, G, NULL);
	for (int i = 0; i < 64; i++) {
		float h = 1e-3f, s = L[i];
		L[i] = s + h;
		double up = rl_loss(L + i, O + i, K + i, A + i, 1, &o, NULL, NULL);
		L[i] = s - h;
		double dn = rl_loss(L + i, O + i, K + i, A + i, 1, &o, NULL, NULL);
		L[i] = s;
		double fd = (up - dn) / (2.0 * (double)h);
		ok &= fabs(fd - G[i]) <= 1e-3 * (fabs(fd) + 1e-2);
	}
	CHECK(ok, "formula gradient = finite differences (64 points, both signs, clipped and not)");
}

static struct model_config cfg;
static struct model_weights hw;
static float *hmem;

static void tiny(struct model *m)
{
	config_tiny(&cfg, 32);
	cfg.rope_theta = 10000.0f;
	hmem = model_weights_random(&hw, &cfg, 5);
	model_init(m, &cfg, &hw, &ops_cpu, DICE_F32);
}

static const int rprompt[6] = { 3, 9, 4, 11, 5, 7 };

/* the tiny model, its training state, and the RL preset's options for it */
static void rl_setup(struct model *m, struct model_train *t, struct sampler_opts *so)
{
	tiny(m);
	model_train_init(t, m, 0);
	sampler_opts_default(so);
	sampler_preset(so, "rl");
	so->mask_id = cfg.mask_token_id;
}

/* every round of the trace of res (prompt rprompt) into rb, pi_old filled; the rounds */
static int trace_batch(struct rl_batch *rb, struct rl_trace *tr, struct model_train *t,
                       const struct sampler_result *res, int pad_id)
{
	struct rl_item it[16];
	int nr;

	*tr = (struct rl_trace){ rprompt, 6, res->ids, res->step, res->n, 1.0f };
	nr = rl_rounds(tr, 4);
	for (int k = 0; k < nr; k++)
		it[k] = (struct rl_item){ tr, k };
	rl_batch_build(rb, it, nr, 4, cfg.mask_token_id, pad_id);
	rl_batch_logp(t, rb, rb->logp_old);
	return nr;
}

/* the largest |pi_old - the trace's log-prob| over the target rows of nr samples of one
 * response (prompt of plen); *nt (if not NULL) := the number of target rows */
static double worst_logp(const struct rl_batch *rb, int nr, int plen,
                         const struct sampler_result *res, int *nt)
{
	double worst = 0;
	int n = 0;

	for (int k = 0; k < nr; k++)
		for (int i = 0; i < res->n; i++) {
			int row = rb->b.start[k] + plen + i;
			if (rb->b.target[row] < 0)
				continue;
			n++;
			worst = fmax(worst, fabs(rb->logp_old[row] - res->logp[i]));
		}
	if (nt)
		*nt = n;
	return worst;
}

/* sample a response with the RL preset, then check the trace against the training side */
static void test_model(void)
{
	struct model m;
	struct model_train t;
	struct sampler_opts so;
	struct sampler_request rq = { rprompt, 6, 42 };
	struct sampler_result res;
	struct rl_trace tr;
	struct rl_batch rb;

	rl_setup(&m, &t, &so);
	so.max_tokens = 10;
	so.threshold = 0.2f;                    /* several commits per step now and then */
	CHECK(sampler_run(&m, &so, &rq, 1, &res, NULL, NULL) == 0 && res.n == 10, "rollout");
	int nr = trace_batch(&rb, &tr, &t, &res, -1);
	CHECK(rb.ntarget == res.n, "every response token is a target exactly once");
	double worst = worst_logp(&rb, nr, 6, &res, NULL);
	CHECK(worst < 1e-4, "pi_old of the training sequence = the sampler's trace log-probs");
	if (worst >= 1e-4)
		printf("#   worst %g\n", worst);

	/* gradient vs finite differences: pi_old shifted so rho spans the clip regions */
	for (int i = 0, q = 0; i < rb.b.N; i++)
		if (rb.b.target[i] >= 0) {
			rb.adv[i] = (q % 3) - 1.0f + 0.5f;
			rb.logp_old[i] += 0.3f * (float)((q * 7) % 5 - 2);
			q++;
		}
	struct rl_loss_opts lo = { 0.2f, 0.01f, 1.0 / (nr * 10.0) };
	struct rl_stats st = { 0 };
	model_train_zero_grad(&t);
	rl_batch_loss(&t, &rb, &lo, 1, &st);
	struct { float *w; const float *g; const char *name; } par[] = {
		{ (float *)m.w.lm_head.p + 5 * cfg.hidden_size + 3,
		  (const float *)t.g.lm_head.p + 5 * cfg.hidden_size + 3, "lm_head" },
		{ (float *)m.w.layers[0].q_proj.p + 17, (const float *)t.g.layers[0].q_proj.p + 17,
		  "q_proj[0]" },
		{ (float *)m.w.layers[1].down_proj.p + 40, (const float *)t.g.layers[1].down_proj.p + 40,
		  "down_proj[1]" },
		{ (float *)m.w.embed.p + 9 * cfg.hidden_size + 1,
		  (const float *)t.g.embed.p + 9 * cfg.hidden_size + 1, "embed" },
	};
	for (size_t i = 0; i < ARRAY_LEN(par); i++) {
		float s = *par[i].w, h = 1e-2f;
		struct rl_stats a = { 0 }, b = { 0 };
		*par[i].w = s + h;
		rl_batch_loss(&t, &rb, &lo, 0, &a);
		*par[i].w = s - h;
		rl_batch_loss(&t, &rb, &lo, 0, &b);
		*par[i].w = s;
		double fd = (a.loss - b.loss) / (2.0 * h), g = *par[i].g;
		char what[96];
		snprintf(what, sizeof what, "model gradient = finite differences (%s)", par[i].name);
		CHECK(fabs(fd - g) <= 2e-2 * fabs(fd) + 1e-6, what);
		if (fabs(fd - g) > 2e-2 * fabs(fd) + 1e-6)
			printf("#   fd %.8g grad %.8g\n", fd, g);
	}
	CHECK(st.clipped > 0 && st.clipped < st.targets, "some tokens clipped, some not");
	rl_batch_free(&rb);
	sampler_result_free(&res);
	model_train_free(&t);
	model_free(&m);
	free(hmem), free(hw.layers);
}

/* A response that ends inside its last block (max_tokens short of the block end, or a stop
 * id): the rollout decoded the whole block, its positions past the end still masked while the
 * tokens before them were committed (sequential decoding commits left to right). SPEC §3.5
 * pads the response (steps past the end: masked in every round), so each target of that
 * block sees the masks the sampler saw: pi_old = the trace's log-probs there too. */
static void test_partial_block(void)
{
	struct model m;
	struct model_train t;
	struct sampler_opts so;
	struct sampler_request rq = { rprompt, 6, 7 };
	struct sampler_result res, full;
	struct rl_trace tr;
	struct rl_batch rb;
	int stop = -1, k = -1;

	rl_setup(&m, &t, &so);
	so.decoding = SAMPLER_SEQUENTIAL;
	for (int pass = 0; pass < 2; pass++) {
		/* pass 0: 6 + 8 tokens, 2 of the 4th block left over; pass 1: a stop id that
		 * first appears at position 1 or 2 of a block */
		so.max_tokens = pass ? 12 : 8;
		if (pass) {
			sampler_run(&m, &so, &rq, 1, &full, NULL, NULL);
			for (int j = 1; j < full.n && k < 0; j++) {
				int seen = 0;
				for (int i = 0; i < j; i++)
					seen |= full.ids[i] == full.ids[j];
				if (!seen && (6 + j) % 4 > 0 && (6 + j) % 4 < 3)
					k = j, stop = full.ids[j];
			}
			sampler_result_free(&full);
			so.stop = &stop, so.nstop = 1;
		}
		CHECK(sampler_run(&m, &so, &rq, 1, &res, NULL, NULL) == 0 &&
		      (pass ? k > 0 && res.stopped && res.n == k + 1 : res.n == 8),
		      pass ? "rollout stopped inside a block" : "rollout ending inside a block");
		int nt, nr = trace_batch(&rb, &tr, &t, &res, stop);
		double worst = worst_logp(&rb, nr, 6, &res, &nt);
		CHECK(nt == res.n - pass && rb.ntarget == nt,
		      "every response token but the stop id is a target once");
		CHECK(worst < 1e-4, pass ? "stopped: pi_old = the trace's log-probs in the last block" :
		      "cut at max_tokens: pi_old = the trace's log-probs in the last block");
		if (worst >= 1e-4)
			printf("#   worst %g\n", worst);
		rl_batch_free(&rb);
		sampler_result_free(&res);
	}
	model_train_free(&t);
	model_free(&m);
	free(hmem), free(hw.layers);
}

int main(void)
{
	test_advantages();
	test_samples();
	test_loss_formula();
	test_model();
	test_partial_block();
	return test_done();
}
