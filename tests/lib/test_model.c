/* test_model: the SDAR forward on the CPU backend against an independent naive computation
 * (double precision, explicit block-causal mask) on a tiny random model; full-sequence
 * forward == prefill + decode steps through the KV cache; a forward without store leaves the
 * committed cache unchanged; batched == one sequence at a time (bitwise); dtypes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "test.h"
#include "util.h"

static struct model_config tiny(void)
{
	struct model_config c = {
		.vocab_size = 300, .hidden_size = 64, .num_layers = 2, .num_heads = 4,
		.num_kv_heads = 2, .head_dim = 16, .intermediate_size = 128,
		.max_position_embeddings = 256, .rope_theta = 10000.0f, .rms_norm_eps = 1e-6f,
		.tie_word_embeddings = 0, .block_size = 4, .mask_token_id = 299,
		.bos_token_id = -1, .eos_token_id = 298, .pad_token_id = 298, .dtype = DICE_F32,
	};
	return c;
}

/* ------------------------------------------------------------ the naive reference */

static const float *F(struct wref w) { return w.p; }

static void nrms(double *y, const double *x, const float *w, int C, double eps)
{
	double ss = 0;
	for (int c = 0; c < C; c++)
		ss += x[c] * x[c];
	double r = 1.0 / sqrt(ss / C + eps);
	for (int c = 0; c < C; c++)
		y[c] = x[c] * r * w[c];
}

static void nlin(double *y, const double *x, const float *w, int in, int out)
{
	for (int o = 0; o < out; o++) {
		double a = 0;
		for (int i = 0; i < in; i++)
			a += x[i] * w[(size_t)o * in + i];
		y[o] = a;
	}
}

static void nrope(double *x, int pos, int HD, double theta)
{
	int half = HD / 2;
	for (int j = 0; j < half; j++) {
		double ang = pos * pow(theta, -2.0 * j / HD);
		double a = x[j], b = x[j + half];
		x[j] = a * cos(ang) - b * sin(ang);
		x[j + half] = b * cos(ang) + a * sin(ang);
	}
}

/* logits (T, V) of the whole sequence under the block-causal mask */
static void naive_forward(const struct model_config *c, const struct model_weights *w,
                          const int *ids, int T, double *logits)
{
	int C = c->hidden_size, NH = c->num_heads, NKV = c->num_kv_heads, HD = c->head_dim;
	int I = c->intermediate_size, V = c->vocab_size, B = c->block_size;
	double *x = xcalloc((size_t)T * C, sizeof *x), *h = xmalloc(sizeof(double) * C);
	double *q = xmalloc(sizeof(double) * T * NH * HD), *k = xmalloc(sizeof(double) * T * NKV * HD);
	double *v = xmalloc(sizeof(double) * T * NKV * HD), *a = xmalloc(sizeof(double) * NH * HD);
	double *o = xmalloc(sizeof(double) * C), *g = xmalloc(sizeof(double) * I);
	double *u = xmalloc(sizeof(double) * I), *p = xmalloc(sizeof(double) * T);

	for (int t = 0; t < T; t++)
		for (int i = 0; i < C; i++)
			x[(size_t)t * C + i] = F(w->embed)[(size_t)ids[t] * C + i];
	for (int l = 0; l < c->num_layers; l++) {
		const struct layer_weights *L = &w->layers[l];
		for (int t = 0; t < T; t++) {
			nrms(h, x + (size_t)t * C, F(L->input_norm), C, c->rms_norm_eps);
			nlin(q + (size_t)t * NH * HD, h, F(L->q_proj), C, NH * HD);
			nlin(k + (size_t)t * NKV * HD, h, F(L->k_proj), C, NKV * HD);
			nlin(v + (size_t)t * NKV * HD, h, F(L->v_proj), C, NKV * HD);
			for (int hh = 0; hh < NH; hh++) {
				double *qh = q + ((size_t)t * NH + hh) * HD;
				nrms(qh, qh, F(L->q_norm), HD, c->rms_norm_eps);
				nrope(qh, t, HD, c->rope_theta);
			}
			for (int hh = 0; hh < NKV; hh++) {
				double *kh = k + ((size_t)t * NKV + hh) * HD;
				nrms(kh, kh, F(L->k_norm), HD, c->rms_norm_eps);
				nrope(kh, t, HD, c->rope_theta);
			}
		}
		for (int t = 0; t < T; t++) {
			for (int hh = 0; hh < NH; hh++) {
				int kh = hh / (NH / NKV);
				double mx = -1e300, sum = 0;
				for (int s = 0; s < T; s++) {
					p[s] = -1e300;
					if (s / B > t / B)
						continue;
					double d = 0;
					for (int e = 0; e < HD; e++)
						d += q[((size_t)t * NH + hh) * HD + e] * k[((size_t)s * NKV + kh) * HD + e];
					p[s] = d / sqrt((double)HD);
					mx = p[s] > mx ? p[s] : mx;
				}
				for (int s = 0; s < T; s++) {
					p[s] = p[s] == -1e300 ? 0 : exp(p[s] - mx);
					sum += p[s];
				}
				for (int e = 0; e < HD; e++) {
					double acc = 0;
					for (int s = 0; s < T; s++)
						acc += p[s] / sum * v[((size_t)s * NKV + kh) * HD + e];
					a[hh * HD + e] = acc;
				}
			}
			double *xt = x + (size_t)t * C;
			nlin(o, a, F(L->o_proj), NH * HD, C);
			for (int i = 0; i < C; i++)
				xt[i] += o[i];
			nrms(h, xt, F(L->post_norm), C, c->rms_norm_eps);
			nlin(g, h, F(L->gate_proj), C, I);
			nlin(u, h, F(L->up_proj), C, I);
			for (int i = 0; i < I; i++)
				g[i] = g[i] / (1 + exp(-g[i])) * u[i];
			nlin(o, g, F(L->down_proj), I, C);
			for (int i = 0; i < C; i++)
				xt[i] += o[i];
		}
	}
	for (int t = 0; t < T; t++) {
		nrms(h, x + (size_t)t * C, F(w->final_norm), C, c->rms_norm_eps);
		nlin(logits + (size_t)t * V, h, F(w->lm_head), C, V);
	}
	free(x), free(h), free(q), free(k), free(v), free(a), free(o), free(g), free(u), free(p);
}

/* ------------------------------------------------------------ tests */

static double maxdiff(const float *a, const float *b, size_t n)
{
	double m = 0;
	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double)a[i] - b[i]));
	return m;
}

int main(void)
{
	struct model_config c = tiny();
	struct model_weights hw;
	float *mem = model_weights_random(&hw, &c, 7);
	struct model m;
	int V = c.vocab_size, T = 14, ids[14], ids2[9];
	double *ref = xmalloc(sizeof(double) * T * V), md = 0;
	float *full = xmalloc(sizeof(float) * T * V), *step = xmalloc(sizeof(float) * T * V);
	struct kvcache kv;

	for (int t = 0; t < T; t++)
		ids[t] = (t * 37 + 11) % V;
	for (int t = 0; t < 9; t++)
		ids2[t] = (t * 53 + 5) % V;
	CHECK(model_init(&m, &c, &hw, &ops_cpu, DICE_F32) == 0, "model_init fp32");

	/* 1. full block-causal forward vs the naive double computation */
	naive_forward(&c, &hw, ids, T, ref);
	kvcache_init(&kv, &m, 32);
	struct model_seq s = { .kv = &kv, .ids = ids, .T = T, .store = 1, .logits = 1 };
	CHECK(model_forward(&m, &s, 1, full) == 0 && kv.len == T, "full forward stores T positions");
	for (int i = 0; i < T * V; i++)
		md = fmax(md, fabs(full[i] - ref[i]));
	CHECK(md < 1e-4, "full forward == naive reference (max abs diff < 1e-4)");
	printf("# full forward vs naive: max abs diff %.3g\n", md);

	/* 2. prefill of 8 + decode steps (block 8..11 without store, then with; then 12..13) */
	kvcache_free(&kv, &m);
	kvcache_init(&kv, &m, 32);
	s = (struct model_seq){ .kv = &kv, .ids = ids, .T = 8, .store = 1, .logits = 1 };
	model_forward(&m, &s, 1, step);
	float *snap_k = xmalloc(kvcache_bytes(&c, 32) / 2);
	memcpy(snap_k, kv.k, kvcache_bytes(&c, 32) / 2);
	s = (struct model_seq){ .kv = &kv, .ids = ids + 8, .T = 4, .store = 0, .logits = 1 };
	model_forward(&m, &s, 1, step + 8 * V);
	CHECK(kv.len == 8, "decode without store keeps len");
	int same = 1;
	size_t per = (size_t)c.num_kv_heads * c.head_dim;
	for (int l = 0; l < c.num_layers; l++)
		same &= !memcmp(snap_k + l * 32 * per, (float *)kv.k + l * 32 * per, 8 * per * sizeof(float));
	CHECK(same, "decode without store leaves the committed cache unchanged");
	float *again = xmalloc(sizeof(float) * 4 * V);
	model_forward(&m, &s, 1, again);
	CHECK(!memcmp(again, step + 8 * V, sizeof(float) * 4 * V), "a repeated decode step gives the same logits");
	s.store = 1, s.logits = 0;
	model_forward(&m, &s, 1, NULL);
	CHECK(kv.len == 12, "save pass commits the block");
	s = (struct model_seq){ .kv = &kv, .ids = ids + 12, .T = 2, .store = 0, .logits = 1 };
	model_forward(&m, &s, 1, step + 12 * V);
	md = maxdiff(full, step, (size_t)T * V);
	CHECK(md < 1e-5, "prefill + decode steps == full forward (1e-5)");
	printf("# prefill+decode vs full: max abs diff %.3g\n", md);

	/* 3. batched == one at a time, bitwise: seq A decode (kv), seq B prefill of 9, seq C save */
	struct kvcache ka, kb, kc, ka1, kb1, kc1;
	kvcache_init(&ka, &m, 32), kvcache_init(&kb, &m, 32), kvcache_init(&kc, &m, 32);
	kvcache_init(&ka1, &m, 32), kvcache_init(&kb1, &m, 32), kvcache_init(&kc1, &m, 32);
	struct model_seq pre[2] = { { .kv = &ka, .ids = ids, .T = 8, .store = 1, .logits = 0 },
	                            { .kv = &kc, .ids = ids2, .T = 4, .store = 1, .logits = 0 } };
	model_forward(&m, pre, 2, NULL);
	pre[0].kv = &ka1, pre[1].kv = &kc1;
	model_forward(&m, &pre[0], 1, NULL);
	model_forward(&m, &pre[1], 1, NULL);
	struct model_seq bat[3] = { { .kv = &ka, .ids = ids + 8, .T = 4, .store = 0, .logits = 1 },
	                            { .kv = &kb, .ids = ids2, .T = 9, .store = 1, .logits = 1 },
	                            { .kv = &kc, .ids = ids2 + 4, .T = 4, .store = 1, .logits = 0 } };
	float *lb = xmalloc(sizeof(float) * 13 * V), *l1 = xmalloc(sizeof(float) * 13 * V);
	CHECK(model_forward(&m, bat, 3, lb) == 0, "batched forward");
	bat[0].kv = &ka1, bat[1].kv = &kb1, bat[2].kv = &kc1;
	model_forward(&m, &bat[0], 1, l1);
	model_forward(&m, &bat[1], 1, l1 + 4 * V);
	model_forward(&m, &bat[2], 1, NULL);
	CHECK(!memcmp(lb, l1, sizeof(float) * 13 * V), "batched logits == one sequence at a time (bitwise)");
	CHECK(kc.len == 8 && !memcmp(kc.k, kc1.k, kvcache_bytes(&c, 32) / 2), "batched save pass == single");
	CHECK(!memcmp(lb, step + 8 * V, sizeof(float) * 4 * V), "decode logits independent of batch mates");
	/* the same decode rows of seq A with rows 0 and 2 skipped (beside a sequence without
	 * logits): rows 1 and 3's bits, packed */
	struct model_seq sk[2] = { { .kv = &kc, .ids = ids2 + 4, .T = 4 },
	                           { .kv = &ka, .ids = ids + 8, .T = 4, .logits = 1,
	                             .logits_skip = 0x5 } };
	CHECK(model_forward(&m, sk, 2, l1) == 0 && !memcmp(l1, lb + V, sizeof(float) * V) &&
	      !memcmp(l1 + V, lb + 3 * V, sizeof(float) * V),
	      "logits_skip: the kept rows' logits, packed (bitwise)");

	/* 4. errors and dtypes */
	s = (struct model_seq){ .kv = &ka, .ids = ids, .T = 30, .store = 1, .logits = 0 };
	CHECK(model_forward(&m, &s, 1, NULL) == -1, "cache overflow is an error");
	struct kvcache *all[] = { &kv, &ka, &kb, &kc, &ka1, &kb1, &kc1 };
	for (size_t i = 0; i < ARRAY_LEN(all); i++)
		kvcache_free(all[i], &m);
	model_free(&m);
	CHECK(model_init(&m, &c, &hw, &ops_cpu, DICE_BF16) == 0, "model_init bf16");
	struct kvcache kx;
	kvcache_init(&kx, &m, 32);
	s = (struct model_seq){ .kv = &kx, .ids = ids, .T = T, .store = 1, .logits = 1 };
	model_forward(&m, &s, 1, step);
	md = maxdiff(full, step, (size_t)T * V);
	printf("# bf16 weights vs fp32: max abs diff %.3g\n", md);
	CHECK(md < 0.1 && md > 0, "bf16 weights close to fp32");
	kvcache_free(&kx, &m);
	model_free(&m);
	c.tie_word_embeddings = 1;
	CHECK(model_init(&m, &c, &hw, &ops_cpu, DICE_F32) == 0 && m.w.lm_head.p == m.w.embed.p,
	      "tied lm_head is the embedding");
	model_free(&m);

	free(mem), free(hw.layers), free(ref), free(full), free(step), free(snap_k), free(again);
	free(lb), free(l1);
	return test_done();
}
