/* test_sft: the SFT data path and objective (lib/sft.c, lib/model_bwd.c): Qwen3 rendering
 * with the empty think block, padding with labels, --max-len drops, packing plan, the noise
 * rules (prompt never masked, at least one mask, p range), the [x_t | x_0] rows; the loss
 * against a hand computation (zero lm_head: CE = log V, so loss = log V sum(1/p) / labels);
 * noisy rows of block b == the engine's decode step after a clean prefix; packed == separate;
 * recompute == stored activations (bitwise); a finite-difference check of the gradient
 * of every weight tensor of a tiny model; and the bf16 GEMM copies (model_train_set_bf16,
 * optim_link_bf16) on the CPU backend; a trainer state whose position or noise generator is
 * not as sft_train_save writes it is refused by sft_train_resume. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model_bwd.h"
#include "optim.h"
#include "sft.h"
#include "sft_train.h"
#include "test.h"
#include "util.h"
#include "tmpdir.h"

/* toy encoder: one token per byte (id = byte value) */
static int enc_bytes(void *ctx, const char *text, size_t len, int **ids, size_t *n)
{
	(void)ctx;
	*ids = xmalloc((len ? len : 1) * sizeof **ids);
	for (size_t i = 0; i < len; i++)
		(*ids)[i] = (unsigned char)text[i];
	*n = len;
	return 0;
}

/* sft_render of the record json (think on): its prompt (response 0) or response (1) is want */
static void render_one(const char *json, int response, const char *want, const char *name)
{
	char err[200], *p = NULL, *r = NULL;
	json_t *rec = json_loads(json, 0, NULL);

	CHECK(rec && sft_render(rec, 1, &p, &r, err, sizeof err) == 0, name);
	if (p && r)
		CHECK_STR(response ? r : p, want, name);
	free(p), free(r);
	json_decref(rec);
}

static void test_render(void)
{
	char err[200], *p, *r;
	json_t *rec = json_loads("{\"prompt\":\"hi\",\"response\":\"yo\"}", 0, NULL);

	CHECK(sft_render(rec, 1, &p, &r, err, sizeof err) == 0, "render prompt/response");
	CHECK_STR(p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "qwen3 prompt");
	CHECK_STR(r, "<think>\n\n</think>\n\nyo<|im_end|>\n", "empty think block prepended");
	free(p), free(r);
	sft_render(rec, 0, &p, &r, err, sizeof err);
	CHECK_STR(r, "yo<|im_end|>\n", "--no-think");
	free(p), free(r);
	json_decref(rec);
	rec = json_loads("{\"prompt\":\"a\",\"system\":\"S\",\"response\":\"<think>x</think>y\"}", 0,
	                 NULL);
	sft_render(rec, 1, &p, &r, err, sizeof err);
	CHECK_STR(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n"
	          "<|im_start|>assistant\n", "system turn");
	CHECK_STR(r, "<think>x</think>y<|im_end|>\n", "an existing think block is kept as is");
	free(p), free(r);
	json_decref(rec);
	/* an empty system is none, as LLaMA-Factory reads it (no empty system turn) */
	render_one("{\"prompt\":\"a\",\"system\":\"\",\"response\":\"y\"}", 0,
	           "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n", "empty system");
	render_one("{\"messages\":[{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\","
	           "\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"y\"}]}", 0,
	           "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n",
	           "messages: empty system message");
	/* a think tag anywhere, not only at the start, is a think block of its own (LLaMA-Factory
	 * adds the empty one only where neither tag is): none is put before it */
	render_one("{\"prompt\":\"a\",\"response\":\"\\n<think>\\nx\\n</think>\\n\\ny\"}", 1,
	           "\n<think>\nx\n</think>\n\ny<|im_end|>\n", "a think block after a newline");
	render_one("{\"prompt\":\"a\",\"response\":\"x</think>\\n\\ny\"}", 1,
	           "x</think>\n\ny<|im_end|>\n", "a closing think tag alone");
	rec = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"q1\"},{\"role\":\"assistant\","
	                 "\"content\":\"a1\"},{\"role\":\"user\",\"content\":\"q2\"},{\"role\":"
	                 "\"assistant\",\"content\":\"a2\"}]}", 0, NULL);
	sft_render(rec, 1, &p, &r, err, sizeof err);
	CHECK_STR(p, "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
	          "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n", "messages: history");
	CHECK_STR(r, "<think>\n\n</think>\n\na2<|im_end|>\n", "messages: last assistant turn");
	free(p), free(r);
	json_decref(rec);
	/* an earlier answer's reasoning is left out, as Qwen3's template renders the history
	 * (the text after the last </think>, its opening newlines off); the last answer keeps it */
	render_one("{\"messages\":[{\"role\":\"user\",\"content\":\"q1\"},{\"role\":\"assistant\","
	           "\"content\":\"<think>\\nr1\\n</think>\\n\\na1\"},{\"role\":\"user\",\"content\":\"q2\"},"
	           "{\"role\":\"assistant\",\"content\":\"<think>r2</think>a2\"}]}", 0,
	           "<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
	           "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n",
	           "messages: an earlier answer's think block left out");
	render_one("{\"messages\":[{\"role\":\"user\",\"content\":\"q1\"},{\"role\":\"assistant\","
	           "\"content\":\"<think>r1</think>a1\"},{\"role\":\"user\",\"content\":\"q2\"},"
	           "{\"role\":\"assistant\",\"content\":\"<think>r2</think>a2\"}]}", 1,
	           "<think>r2</think>a2<|im_end|>\n", "messages: the last answer's think block kept");
	rec = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"q1\"}]}", 0, NULL);
	CHECK(sft_render(rec, 1, &p, &r, err, sizeof err) < 0, "messages must end with assistant");
	json_decref(rec);
	rec = json_loads("{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
	                 "\"system\":\"S\"}", 0, NULL);
	CHECK(sft_render(rec, 1, &p, &r, err, sizeof err) < 0 && strstr(err, "\"system\""),
	      "messages beside system: one form or the other");
	json_decref(rec);
}

static void test_data(void)
{
	struct sft_data d;
	struct sft_opts o = { .block = 4, .pad_id = 7, .max_len = 40, .think = 0, .vocab = 256,
	                      .encode = enc_bytes };
	char err[200];
	json_t *rec = json_loads("{\"prompt\":\"x\",\"response\":\"ab\"}", 0, NULL);

	sft_data_init(&d);
	/* prompt "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n" = 51 bytes: too long */
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) == 1 && d.dropped == 1 && d.n == 0,
	      "longer than --max-len: dropped and counted");
	o.max_len = 6144;
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) == 0, "text record added");
	/* 51 + "ab<|im_end|>\n" 13 = 64: a whole number of blocks, no pad */
	CHECK(d.s[0].n == 64 && d.s[0].prompt_len == 51 && d.s[0].ids[63] == '\n' &&
	      d.s[0].ids[51] == 'a', "text record: prompt and response tokens");
	json_decref(rec);
	rec = json_loads("{\"prompt_ids\":[1,2,3],\"response_ids\":[4,5]}", 0, NULL);
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) == 0 && d.s[1].n == 8 &&
	      d.s[1].prompt_len == 3 && d.s[1].ids[4] == 5 && d.s[1].ids[5] == 7,
	      "token-id record, pads are labels after the response");
	json_decref(rec);
	rec = json_loads("{\"prompt_ids\":[1,2,3,4],\"response_ids\":[]}", 0, NULL);
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0, "no response tokens: bad record");
	json_decref(rec);
	rec = json_loads("{\"prompt_ids\":[1,999],\"response_ids\":[3]}", 0, NULL);
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0, "id outside the vocabulary");
	json_decref(rec);
	rec = json_loads("{\"response\":\"r\"}", 0, NULL);
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0, "missing prompt: bad record");
	/* without a tokenizer, the record's own fault is said first, then the missing one */
	o.encode = NULL;
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0 && strstr(err, "need string fields"),
	      "no tokenizer: a malformed text record says what is wrong with it");
	json_decref(rec);
	rec = json_loads("{\"prompt\":\"x\",\"response\":\"ab\"}", 0, NULL);
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0 &&
	      !strcmp(err, "text record but no tokenizer"), "no tokenizer: a good text record");
	o.no_encode = "none here";
	CHECK(sft_data_add(&d, rec, &o, err, sizeof err) < 0 && !strcmp(err, "none here"),
	      "no tokenizer: the caller's message");
	o.encode = enc_bytes;
	json_decref(rec);
	/* plan: lengths 64, 8, 8, 8 with 20-token micro-batches */
	for (int i = 0; i < 2; i++) {
		int pr[2] = { 1, 2 }, rs[3] = { 3, 4, 5 };
		sft_data_add_ids(&d, pr, 2, rs, 3, &o, err, sizeof err);
	}
	size_t order[4] = { 1, 0, 2, 3 }, *st;
	size_t nb = sft_plan(&d, order, 20, &st);
	CHECK(nb == 3 && st[0] == 0 && st[1] == 1 && st[2] == 2 && st[3] == 4,
	      "plan: pack while <= batch tokens, a long sample alone");
	free(st);
	sft_data_free(&d);
}

static struct sft_sample mk(int *ids, int n, int np)
{
	return (struct sft_sample){ .ids = ids, .n = n, .prompt_len = np };
}

static void test_batch(void)
{
	int a[8] = { 10, 11, 12, 13, 14, 15, 16, 17 }, b[4] = { 20, 21, 22, 23 };
	struct sft_sample sa = mk(a, 8, 3), sb = mk(b, 4, 1);
	const struct sft_sample *s[2] = { &sa, &sb };
	uint8_t ma[8] = { 1, 1, 0, 1, 0, 0, 1, 0 }, mb[4] = { 0, 1, 1, 0 };
	const uint8_t *m[2] = { ma, mb };
	double p[2] = { 0.5, 0.25 };
	struct train_batch t;

	sft_batch_build_masked(&t, s, 2, 99, 2.0, m, p);
	CHECK(t.N == 24 && t.nsamp == 2 && t.start[1] == 16 && t.len[1] == 8, "rows: 2n per sample");
	CHECK(t.ids[0] == 10 && t.ids[1] == 11 && t.ids[3] == 99 && t.ids[6] == 99 &&
	      t.ids[4] == 14 && t.ids[8] == 10 && t.ids[11] == 13, "x_t masks only response tokens");
	CHECK(t.pos[8] == 0 && t.pos[15] == 7 && t.pos[16] == 0 && t.noisy[7] && !t.noisy[8],
	      "shared positions, noisy flags");
	CHECK(t.target[3] == 13 && t.target[6] == 16 && t.target[0] == -1 && t.target[11] == -1,
	      "targets at masked noisy rows only");
	/* labels = 5 + 3 = 8, scale 2: weights 1/(0.5*8*2) and 1/(0.25*8*2) */
	CHECK_NEAR(t.weight[3], 0.125, 1e-7, "weight 1/(p labels scale)");
	CHECK_NEAR(t.weight[17], 0.25, 1e-7, "weight of the second sample");
	CHECK(t.weight[2] == 0 && t.weight[11] == 0, "no weight elsewhere");
	sft_batch_free(&t);

	/* random noise */
	struct rng r, r2;
	int ok_prompt = 1, ok_any = 1, ok_p = 1, masked = 0, total = 0;
	rng_seed(&r, 5);
	for (int it = 0; it < 2000; it++) {
		double pp[2];
		sft_batch_build(&t, s, 2, 99, 1.0, &r, pp);
		for (int i = 0; i < 2; i++) {
			int any = 0;
			for (int j = 0; j < s[i]->n; j++) {
				int row = t.start[i] + j, mk = t.target[row] >= 0;
				if (j < s[i]->prompt_len && mk)
					ok_prompt = 0;
				any |= mk;
				if (j >= s[i]->prompt_len)
					masked += mk, total++;
			}
			ok_any &= any;
			ok_p &= pp[i] >= SFT_EPS && pp[i] <= 1.0;
		}
		sft_batch_free(&t);
	}
	CHECK(ok_prompt, "noise: prompt tokens never masked");
	CHECK(ok_any, "noise: every sample has a masked token");
	CHECK(ok_p, "noise: p in [1e-3, 1]");
	/* expected fraction, integrated over p for 5 and 3 response tokens with the redraws:
	 * E[n p / (1 - (1-p)^n)] (conditioned on a mask) = 0.5678 over the 8 tokens */
	CHECK(fabs((double)masked / total - 0.5678) < 0.015,
	      "noise: masked fraction as the redraw rule predicts (0.568)");
	rng_seed(&r, 9), rng_seed(&r2, 9);
	struct train_batch t2;
	sft_batch_build(&t, s, 2, 99, 1.0, &r, NULL);
	sft_batch_build(&t2, s, 2, 99, 1.0, &r2, NULL);
	CHECK(!memcmp(t.ids, t2.ids, (size_t)t.N * sizeof *t.ids), "noise: same seed, same masks");
	sft_batch_free(&t), sft_batch_free(&t2);
}

/* ------------------------------------------------------------ the model */

static struct model_config cfg;
static struct model_weights hw;
static float *hmem;

static void tiny_model(struct model *m, int V)
{
	config_tiny(&cfg, V);
	cfg.rope_theta = 10000.0f;
	hmem = model_weights_random(&hw, &cfg, 3);
	model_init(m, &cfg, &hw, &ops_cpu, DICE_F32);
}

static void test_hand_loss(void)
{
	struct model m;
	struct model_train t;
	int a[8] = { 3, 4, 5, 6, 7, 8, 9, 10 }, b[4] = { 11, 12, 13, 14 };
	struct sft_sample sa = mk(a, 8, 2), sb = mk(b, 4, 1);
	const struct sft_sample *s[2] = { &sa, &sb };
	uint8_t ma[8] = { 0, 0, 1, 0, 1, 1, 0, 0 }, mb[4] = { 0, 0, 0, 1 };
	const uint8_t *mm[2] = { ma, mb };
	double p[2] = { 0.3, 0.8 }, loss;
	struct train_batch tb;

	tiny_model(&m, 32);
	memset((void *)m.w.lm_head.p, 0, (size_t)cfg.vocab_size * cfg.hidden_size * 4);
	model_train_init(&t, &m, 0);
	sft_batch_build_masked(&tb, s, 2, cfg.mask_token_id, 1.0, mm, p);
	model_train_loss(&t, &tb, &loss);
	/* labels 6 + 3 = 9; masked: 3 with 1/0.3, 1 with 1/0.8 */
	double want = log(32.0) * (3 / 0.3 + 1 / 0.8) / 9.0;
	CHECK_NEAR(loss, want, 1e-5 * want, "loss = sum CE/p / labels (hand computation)");
	sft_batch_free(&tb);
	model_train_free(&t);
	model_free(&m);
	free(hmem), free(hw.layers);
}

/* CE of the masked rows of block bl of a sample, through the engine: prefill the clean blocks
 * before bl (stored), then the noisy block as a decode step */
static double engine_block_ce(struct model *m, const int *clean, const int *noisy, int bl,
                              const int *target)
{
	struct kvcache kv;
	int V = m->cfg.vocab_size;
	float *lg = xmalloc((size_t)4 * V * sizeof *lg);
	double ce = 0;

	kvcache_init(&kv, m, 64);
	if (bl) {
		struct model_seq q = { .kv = &kv, .ids = clean, .T = 4 * bl, .store = 1 };
		model_forward(m, &q, 1, NULL);
	}
	struct model_seq q = { .kv = &kv, .ids = noisy + 4 * bl, .T = 4, .logits = 1 };
	model_forward(m, &q, 1, lg);
	for (int j = 0; j < 4; j++) {
		int tg = target[4 * bl + j];
		if (tg < 0)
			continue;
		double mx = -1e30, s = 0;
		for (int v = 0; v < V; v++)
			mx = fmax(mx, lg[j * V + v]);
		for (int v = 0; v < V; v++)
			s += exp(lg[j * V + v] - mx);
		ce += mx + log(s) - lg[j * V + tg];
	}
	kvcache_free(&kv, m);
	free(lg);
	return ce;
}

static void test_engine_equivalence(void)
{
	struct model m;
	struct model_train t;
	int a[12] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 };
	struct sft_sample sa = mk(a, 12, 2);
	const struct sft_sample *s[1] = { &sa };
	uint8_t ma[12] = { 0, 0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0 };
	const uint8_t *mm[1] = { ma };
	double p[1] = { 1.0 }, loss, want = 0;
	struct train_batch tb;

	tiny_model(&m, 32);
	model_train_init(&t, &m, 0);
	sft_batch_build_masked(&tb, s, 1, cfg.mask_token_id, 1.0, mm, p);
	model_train_loss(&t, &tb, &loss);
	for (int bl = 0; bl < 3; bl++)
		want += engine_block_ce(&m, a, tb.ids, bl, tb.target);
	want /= 10.0;                           /* labels */
	CHECK_NEAR(loss, want, 1e-4 * want, "x_t rows of block b == engine decode step after the "
	           "clean blocks < b (mask rule end to end)");
	sft_batch_free(&tb);
	model_train_free(&t);
	model_free(&m);
	free(hmem), free(hw.layers);
}

static void test_pack_and_recompute(void)
{
	struct model m;
	struct model_train t, tr;
	int a[8] = { 3, 4, 5, 6, 7, 8, 9, 10 }, b[4] = { 11, 12, 13, 14 };
	struct sft_sample sa = mk(a, 8, 2), sb = mk(b, 4, 1);
	const struct sft_sample *s[2] = { &sa, &sb };
	uint8_t ma[8] = { 0, 0, 1, 0, 1, 1, 0, 1 }, mb[4] = { 0, 0, 1, 1 };
	const uint8_t *mm[2] = { ma, mb };
	double p[2] = { 0.3, 0.8 }, lpack, l1, l2;
	struct train_batch tb, t1, t2;

	tiny_model(&m, 32);
	model_train_init(&t, &m, 0);
	model_train_init(&tr, &m, 1);
	sft_batch_build_masked(&tb, s, 2, cfg.mask_token_id, 1.0, mm, p);
	/* separately, each scaled to the packed batch's label count (9): 6/9 and 3/9 */
	sft_batch_build_masked(&t1, s, 1, cfg.mask_token_id, 9.0 / 6.0, mm, p);
	sft_batch_build_masked(&t2, s + 1, 1, cfg.mask_token_id, 9.0 / 3.0, mm + 1, p + 1);
	model_train_loss(&t, &tb, &lpack);
	model_train_loss(&t, &t1, &l1);
	model_train_loss(&t, &t2, &l2);
	CHECK_NEAR(lpack, l1 + l2, 1e-5 * lpack, "packed samples do not see each other");
	double la, lb;
	model_train_batch(&t, &tb, &la);
	model_train_batch(&tr, &tb, &lb);
	CHECK(la == lb && !memcmp(t.gbuf, tr.gbuf, t.ngrad * sizeof(float)),
	      "--recompute gives bitwise the same loss and gradients");
	sft_batch_free(&tb), sft_batch_free(&t1), sft_batch_free(&t2);
	model_train_free(&t);
	model_train_free(&tr);
	model_free(&m);
	free(hmem), free(hw.layers);
}

static void test_model_grad(int tied)
{
	struct model m;
	struct model_train t;
	int a[8] = { 3, 4, 5, 6, 7, 8, 9, 10 }, b[8] = { 11, 12, 13, 14, 15, 16, 17, 18 };
	struct sft_sample sa = mk(a, 8, 2), sb = mk(b, 8, 3);
	const struct sft_sample *s[2] = { &sa, &sb };
	uint8_t ma[8] = { 0, 0, 1, 0, 1, 1, 0, 1 }, mb[8] = { 0, 0, 0, 1, 0, 1, 1, 0 };
	const uint8_t *mm[2] = { ma, mb };
	double p[2] = { 0.5, 0.7 }, loss;
	struct train_batch tb;
	struct ckpt_tensor *wl, *gl;
	size_t n, n2;
	struct rng r;
	int bad = 0, checked = 0;

	config_tiny(&cfg, 24);
	cfg.rope_theta = 10000.0f;
	cfg.tie_word_embeddings = tied;
	hmem = model_weights_random(&hw, &cfg, 3);
	model_init(&m, &cfg, &hw, &ops_cpu, DICE_F32);
	model_train_init(&t, &m, 0);
	sft_batch_build_masked(&tb, s, 2, cfg.mask_token_id, 1.0, mm, p);
	model_train_batch(&t, &tb, &loss);
	wl = checkpoint_tensor_list(&cfg, &m.w, &n);
	gl = checkpoint_tensor_list(&cfg, &t.g, &n2);
	rng_seed(&r, 11);
	for (size_t i = 0; i < n; i++) {
		size_t ne = (size_t)wl[i].shape[0] * (wl[i].ndim == 2 ? (size_t)wl[i].shape[1] : 1);
		float *w = (float *)wl[i].ref->p;
		const float *g = gl[i].ref->p;
		double gmax = 1e-6;
		for (size_t j = 0; j < ne; j++)
			gmax = fmax(gmax, fabs(g[j]));
		for (int k = 0; k < 6; k++) {
			/* half the probes at the largest-gradient entries' neighbourhood: random */
			size_t j = (size_t)rng_below(&r, ne);
			float w0 = w[j], h = 1e-2f;
			double lp, lm;
			w[j] = w0 + h;
			model_train_loss(&t, &tb, &lp);
			w[j] = w0 - h;
			model_train_loss(&t, &tb, &lm);
			w[j] = w0;
			double num = (lp - lm) / (2 * h);
			checked++;
			if (fabs(num - g[j]) > 2e-2 * gmax + 1e-4) {
				bad++;
				printf("# %s[%zu]: numeric %.6g analytic %.6g (max %.3g)\n", wl[i].name, j,
				       num, g[j], gmax);
			}
		}
	}
	char what[120];
	snprintf(what, sizeof what, "whole-model gradient == finite differences (%d entries of "
	         "all %zu tensors%s)", checked, n, tied ? ", tied embeddings" : "");
	CHECK(bad == 0, what);
	free(wl), free(gl);
	sft_batch_free(&tb);
	model_train_free(&t);
	model_free(&m);
	free(hmem), free(hw.layers);
}

/* bf16 GEMM copies on the CPU backend: loss and gradients near the fp32 ones (bf16
 * operands), recompute bitwise the same, and an optimizer step (optim_link_bf16) leaves
 * lbuf == bf16(master weights) */
static void test_bf16_copies(void)
{
	struct model m;
	struct model_train t, tb16, tr;
	int a[8] = { 3, 4, 5, 6, 7, 8, 9, 10 }, b[8] = { 11, 12, 13, 14, 15, 16, 17, 18 };
	struct sft_sample sa = mk(a, 8, 2), sb = mk(b, 8, 3);
	const struct sft_sample *s[2] = { &sa, &sb };
	uint8_t ma[8] = { 0, 0, 1, 0, 1, 1, 0, 1 }, mb[8] = { 0, 0, 0, 1, 0, 1, 1, 0 };
	const uint8_t *mm[2] = { ma, mb };
	double p[2] = { 0.5, 0.7 }, l32, l16, lr;
	struct train_batch tb;
	double gmax = 0, emax = 0;

	tiny_model(&m, 24);
	model_train_init(&t, &m, 0);
	model_train_init(&tb16, &m, 0);
	model_train_init(&tr, &m, 1);
	CHECK(model_train_set_bf16(&tb16) == 0 && model_train_set_bf16(&tr) == 0,
	      "bf16 copies on the CPU backend");
	sft_batch_build_masked(&tb, s, 2, cfg.mask_token_id, 1.0, mm, p);
	model_train_batch(&t, &tb, &l32);
	model_train_batch(&tb16, &tb, &l16);
	model_train_batch(&tr, &tb, &lr);
	for (size_t i = 0; i < t.ngrad; i++) {
		gmax = fmax(gmax, fabs(t.gbuf[i]));
		emax = fmax(emax, fabs(t.gbuf[i] - tb16.gbuf[i]));
	}
	printf("# bf16: loss %.6g (fp32 %.6g), largest gradient error %.3g of %.3g\n", l16, l32,
	       emax, gmax);
	CHECK(fabs(l16 - l32) < 2e-2 * l32 && emax < 5e-2 * gmax,
	      "bf16 GEMM inputs: loss and gradients near fp32");
	CHECK(l16 == lr && !memcmp(tb16.gbuf, tr.gbuf, t.ngrad * sizeof(float)),
	      "bf16 with --recompute gives bitwise the same loss and gradients");
	struct optim op;
	struct optim_opts oo;
	size_t np;
	optim_defaults(&oo);
	oo.lr = 1e-2f;
	struct optim_param *par = optim_model_params(&tb16, &np);
	optim_init(&op, &ops_cpu, &oo, par, np, tb16.gbuf, tb16.ngrad);
	optim_link_bf16(&op, &tb16);
	optim_step(&op, NULL);
	size_t nw = m.wbytes / 4, bad = 0;
	const uint16_t *lb = tb16.lbuf;
	for (size_t i = 0; i < nw; i++)
		bad += lb[i] != dice_f32_to_bf16(((const float *)m.wbuf)[i]);
	CHECK(op.lp == 1 && bad == 0, "optimizer step rewrites the bf16 copies (optim_link_bf16)");
	optim_free(&op);
	sft_batch_free(&tb);
	model_train_free(&t);
	model_train_free(&tb16);
	model_train_free(&tr);
	model_free(&m);
	free(hmem), free(hw.layers);
}

/* tmpdir's trainer state with __metadata__ key set to val (the header rewritten, the tensor
 * data kept) */
static void state_set(const char *saved, size_t len, const char *key, const char *val)
{
	uint64_t hlen = 0;
	char *path = tmpdir_path(SFT_STATE_FILE), *h, len8[8];
	json_t *j;
	FILE *f;

	for (int i = 0; i < 8; i++)
		hlen |= (uint64_t)(unsigned char)saved[i] << (8 * i);
	j = json_loadb(saved + 8, (size_t)hlen, 0, NULL);
	json_object_set_new(json_object_get(j, "__metadata__"), key, json_string(val));
	h = json_dumps(j, JSON_COMPACT);
	for (int i = 0; i < 8; i++)
		len8[i] = (char)((uint64_t)strlen(h) >> (8 * i));
	f = fopen(path, "wb");
	fwrite(len8, 1, 8, f);
	fwrite(h, 1, strlen(h), f);
	fwrite(saved + 8 + hlen, 1, len - 8 - (size_t)hlen, f);
	fclose(f);
	free(h);
	free(path);
	json_decref(j);
}

/* a state whose position or noise generator is not what sft_train_save writes is an error
 * (found by tests/fuzz/fuzz_state.c): it was taken, and training went on elsewhere */
static void test_resume_bad_state(void)
{
	struct model_config c;
	struct model_weights w;
	struct model m;
	struct sft_data d;
	struct sft_opts so = { .block = 4, .pad_id = 14, .max_len = 100, .vocab = 16 };
	struct optim_opts oo;
	struct sft_train st;
	struct sft_step step;
	char err[512], *path, *saved;
	size_t len;
	static const char *const bad[][3] = {
		{ "batch", "99", "a batch past the epoch's micro-batches" },
		{ "epoch", "-1", "a negative epoch" },
		{ "epoch", "4294967296", "an epoch past 2^30" },
		{ "seed", " 7", "a seed with a space before it" },
		{ "step", "+1", "a step with a sign" },
		{ "noise_rng", "0 0 0 0", "an all-zero noise generator" },
		{ "noise_rng", "1 2 3 4 5", "a noise_rng with a fifth word" },
		{ "noise_rng", "1 2 3 0x4", "a noise_rng word that is not hex digits alone" },
		{ "noise_rng", "1 2 3 11112222333344445", "a noise_rng word past 64 bits" },
	};

	CHECK(tmpdir_make("dice-test-sft") == 0, "scratch folder");
	config_tiny(&c, 16);
	c.num_layers = 1, c.hidden_size = 32, c.head_dim = 8, c.intermediate_size = 32;
	float *mem = model_weights_random(&w, &c, 1);
	model_init(&m, &c, &w, &ops_cpu, DICE_F32);
	sft_data_init(&d);
	for (int i = 0; i < 6; i++) {
		int p[3] = { 1, 2, 3 + i }, r[3] = { 5 + i, 6, 7 };
		sft_data_add_ids(&d, p, 3, r, 3, &so, err, sizeof err);
	}
	optim_defaults(&oo);
	sft_train_init(&st, &m, &d, &oo, 0, 7, 16, 1, 3, 0, 0);
	sft_train_step(&st, &step);
	CHECK(sft_train_save(&st, tmpdir, NULL, err, sizeof err) == 0, "state saved");
	path = tmpdir_path(SFT_STATE_FILE);
	saved = util_read_file(path, &len);
	state_set(saved, len, "batch", "1");
	CHECK(sft_train_resume(&st, tmpdir, err, sizeof err) == 0 && st.batch == 1,
	      "the state as written resumes");
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		state_set(saved, len, bad[i][0], bad[i][1]);
		err[0] = '\0';
		CHECK(sft_train_resume(&st, tmpdir, err, sizeof err) < 0 &&
		      strstr(err, bad[i][0]), bad[i][2]);
	}
	free(saved);
	free(path);
	sft_train_free(&st);
	sft_data_free(&d);
	model_free(&m);
	model_weights_free(&w);
	free(mem);
	tmpdir_remove();
}

int main(void)
{
	test_render();
	test_data();
	test_batch();
	test_hand_loss();
	test_engine_equivalence();
	test_pack_and_recompute();
	test_model_grad(0);
	test_model_grad(1);
	test_bf16_copies();
	test_resume_bad_state();
	return test_done();
}
