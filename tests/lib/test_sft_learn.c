/* test_sft_learn: a tiny random model trained by the SFT loop (lib/sft_train.c) on six
 * records learns them: the loss falls far below its start, and greedy block decoding with
 * the engine (lib/model.c: prefill, then per block one masked position at a time, leftmost,
 * argmax with the lowest index on ties, as DICE's top-k 1 evaluation) reproduces every
 * training response token for token. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "sft_train.h"
#include "test.h"
#include "util.h"

enum { P = 5, R = 7 };

static void decode(struct model *m, const int *prompt, int *out)
{
	int V = m->cfg.vocab_size, M = m->cfg.mask_token_id, n = P + R;
	float *lg = xmalloc((size_t)4 * V * sizeof *lg);
	struct kvcache kv;
	int ids[P + R];

	memcpy(ids, prompt, P * sizeof *ids);
	for (int i = P; i < n; i++)
		ids[i] = M;
	kvcache_init(&kv, m, n);
	struct model_seq pre = { .kv = &kv, .ids = ids, .T = P / 4 * 4, .store = 1 };
	model_forward(m, &pre, 1, NULL);
	for (int b = P / 4 * 4; b < n; b += 4) {
		for (;;) {
			int j = 0;
			while (j < 4 && ids[b + j] != M)
				j++;
			if (j == 4)
				break;
			struct model_seq q = { .kv = &kv, .ids = ids + b, .T = 4, .logits = 1 };
			model_forward(m, &q, 1, lg);
			int best = 0;
			for (int v = 1; v < V; v++)
				if (lg[(size_t)j * V + v] > lg[(size_t)j * V + best])
					best = v;
			ids[b + j] = best;
		}
		struct model_seq st = { .kv = &kv, .ids = ids + b, .T = 4, .store = 1 };
		model_forward(m, &st, 1, NULL);
	}
	memcpy(out, ids + P, R * sizeof *out);
	kvcache_free(&kv, m);
	free(lg);
}

int main(void)
{
	struct model_config c;
	struct model_weights w;
	struct model m;
	struct sft_data d;
	struct sft_opts so = { .block = 4, .pad_id = 62, .max_len = 100, .vocab = 64 };
	struct optim_opts oo;
	struct sft_train st;
	int prompts[6][P], resp[6][R];
	char err[200];
	double first = 0, last = 0;

	config_tiny(&c, 64);
	c.hidden_size = 32, c.head_dim = 8, c.intermediate_size = 64, c.rope_theta = 10000.0f;
	float *mem = model_weights_random(&w, &c, 1);
	model_init(&m, &c, &w, &ops_cpu, DICE_F32);
	sft_data_init(&d);
	for (int i = 0; i < 6; i++) {
		int p[P] = { 1, 2, 3, 4 + i, 5 }, r[R] = { 10 + i, 20 + i, 30, 31, 32, 40 + i, 61 };
		memcpy(prompts[i], p, sizeof p);
		memcpy(resp[i], r, sizeof r);
		sft_data_add_ids(&d, p, P, r, R, &so, err, sizeof err);
	}
	optim_defaults(&oo);
	oo.lr = 1e-2f;
	oo.schedule = OPTIM_COSINE;
	sft_train_init(&st, &m, &d, &oo, 0.05, 7, 1000, 1, 1000, 300, 0);
	for (int k = 0; sft_train_more(&st); k++) {
		struct sft_step s;
		sft_train_step(&st, &s);
		if (k < 20)
			first += s.loss / 20;
		if (k >= 280)
			last += s.loss / 20;
	}
	printf("# mean loss: first 20 steps %.3f, last 20 %.4f\n", first, last);
	CHECK(last < first / 20, "loss falls far below its start");
	int same = 0;
	for (int i = 0; i < 6; i++) {
		int out[R];
		decode(&m, prompts[i], out);
		same += !memcmp(out, resp[i], sizeof out);
	}
	printf("# %d of 6 responses reproduced\n", same);
	CHECK(same == 6, "greedy block decoding reproduces every training response");
	sft_train_free(&st);
	sft_data_free(&d);
	model_free(&m);
	free(mem);
	free(w.layers);
	return test_done();
}
