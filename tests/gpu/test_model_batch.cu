/* test_model_batch: the engine forward (lib/model.c) is batch-invariant on the CUDA backend:
 * a small random SDAR-shaped model in bf16 and in fp32; 12 sequences of ragged prompts (20
 * to 603 tokens) are prefilled and then decoded two blocks of 4 rows, once each sequence
 * alone and once all of them in one forward per step; every sequence's logits (the last 4
 * prompt rows, then each block's rows) must be the same bits both ways (in bf16 a sequence
 * alone reads the products' packed copies, model_pack, the batch of 48 rows w); in bf16 also
 * with the batch's attention on attention_kv's unit kernel and the sequences alone on its cluster
 * kernel; and (the default kernels, both dtypes) the batch with some rows' logits skipped
 * (model_seq.logits_skip) gives the kept rows' bits, packed. With a 16-bit cache the prompts of
 * 64 tokens or more go through the prefill attention (ops->attention_prefill): also when some
 * sequences prefill while the others decode in the same forward (mixed: the odd sequences'
 * prompts join the even ones' first decode block), a sequence's logits must be those of its
 * own forwards alone. */
#include "gpu_test.h"
#include "gt_model.h"

#define NSEQ 12
#define CAP 1024

static int prompt_len(int s)
{
	return 20 + 53 * s;
}

/* the rows of sequence s's 4 whose logits the skipping batch leaves out at a step (every
 * pattern, none and all four among them) */
static unsigned skip_bits(int s, int step)
{
	return (unsigned)(s * 7 + step * 3) % 16;
}

/* logits (NSEQ, 4, V) of the step: step 0 = prefill (last 4 rows), then decode blocks;
 * together 2: the batch with skip_bits' rows left out (their logits packed) */
static void forward_step(struct model *m, struct kvcache *kv, int *const *ids, int step,
                         int together, float *lg)
{
	struct model_seq q[NSEQ];
	int V = m->cfg.vocab_size;

	for (int s = 0; s < NSEQ; s++) {
		int P = prompt_len(s), T = step ? 4 : P;
		q[s] = (struct model_seq){ .kv = &kv[s], .ids = ids[s] + (step ? P + 4 * (step - 1) : 0),
		                           .T = T, .store = 1, .logits = 1, .logits_from = T - 4 };
		if (together == 2)
			q[s].logits_skip = skip_bits(s, step);
	}
	if (together) {
		CHECK(model_forward(m, q, NSEQ, lg) == 0, "forward of 12 sequences");
		return;
	}
	for (int s = 0; s < NSEQ; s++)
		if (model_forward(m, &q[s], 1, lg + (size_t)s * 4 * V) != 0)
			CHECK(0, "forward of one sequence");
}

/* unit: the batched forwards' attention on attention_kv's unit kernel, version `unit` (1:
 * du_kernel; 2 and 3: dv_kernel, 3 with the chains in turn, on 3 persistent blocks, so that
 * each walks many units of different lengths), the sequences alone on its cluster kernel (gpu_set_dk_unit; bf16 on sm_90: the
 * engine's choice at a large batch and at batch 1); 0: the default choice for both */
static void run(enum dice_dtype dt, int unit)
{
	struct model m;
	struct kvcache alone[NSEQ], batch[NSEQ], skip[NSEQ];
	int *ids[NSEQ];
	char what[160];

	gt_model(&m, dt, 5);
	int V = m.cfg.vocab_size;
	for (int s = 0; s < NSEQ; s++) {
		ids[s] = (int *)xmalloc(sizeof(int) * (prompt_len(s) + 8));
		for (int i = 0; i < prompt_len(s) + 8; i++)
			ids[s][i] = (int)(rng_uniformf(&R) * (V - 1));
		kvcache_init(&alone[s], &m, CAP);
		kvcache_init(&batch[s], &m, CAP);
		kvcache_init(&skip[s], &m, CAP);
	}
	float *la = (float *)xmalloc(sizeof(float) * NSEQ * 4 * V);
	float *lb = (float *)xmalloc(sizeof(float) * NSEQ * 4 * V);
	for (int step = 0; step < 3; step++) {
		if (unit)
			gpu_set_dk_unit(0);
		forward_step(&m, alone, ids, step, 0, la);
		if (unit) {
			gpu_set_dk_unit(1);
			gpu_set_dk_unit_v(unit, unit >= 2 ? 3 : 0);
		}
		forward_step(&m, batch, ids, step, 1, lb);
		gpu_set_dk_unit(-1);
		gpu_set_dk_unit_v(0, 0);
		int bad = 0;
		for (int s = 0; s < NSEQ; s++)
			bad += memcmp(la + (size_t)s * 4 * V, lb + (size_t)s * 4 * V,
			              sizeof(float) * 4 * V) != 0;
		if (bad)
			printf("#   %d of %d sequences differ\n", bad, NSEQ);
		snprintf(what, sizeof what, "model forward %s, %s: logits alone bitwise equal to "
		         "the batch of %d%s", dt == DICE_BF16 ? "bf16" : "fp32",
		         step ? "decode block" : "prefill", NSEQ,
		         unit == 1 ? " (batch on unit kernel 1, alone on the cluster kernel)" :
		         unit == 2 ? " (batch on unit kernel 2 on 3 blocks, alone on the cluster "
		                     "kernel)" :
		         unit == 3 ? " (batch on unit kernel 3 on 3 blocks, alone on the cluster "
		                     "kernel)" : "");
		CHECK(bad == 0, what);
		if (unit)
			continue;
		forward_step(&m, skip, ids, step, 2, lb);
		bad = 0;
		for (int s = 0, k = 0; s < NSEQ; s++)
			for (int j = 0; j < 4; j++)
				if (!(skip_bits(s, step) >> j & 1))
					bad += memcmp(la + ((size_t)s * 4 + j) * V, lb + (size_t)k++ * V,
					              sizeof(float) * V) != 0;
		snprintf(what, sizeof what, "model forward %s, %s: the batch with rows' logits "
		         "skipped gives the other rows' bits (%d differ)",
		         dt == DICE_BF16 ? "bf16" : "fp32", step ? "decode block" : "prefill", bad);
		CHECK(bad == 0, what);
	}
	for (int s = 0; s < NSEQ; s++) {
		kvcache_free(&alone[s], &m);
		kvcache_free(&batch[s], &m);
		kvcache_free(&skip[s], &m);
		free(ids[s]);
	}
	free(la);
	free(lb);
	model_free(&m);
}

/* mixed: the even sequences prefill at step 0, the odd ones at step 1 while the even ones
 * decode their first block, then every one decodes; each step's logits (the prefills' last
 * 4 rows, the blocks' rows) alone and together the same bits */
static void run_mixed(enum dice_dtype dt)
{
	struct model m;
	struct kvcache alone[NSEQ], batch[NSEQ];
	int *ids[NSEQ], V;
	char what[160];

	gt_model(&m, dt, 7);
	V = m.cfg.vocab_size;
	for (int s = 0; s < NSEQ; s++) {
		ids[s] = (int *)xmalloc(sizeof(int) * (prompt_len(s) + 12));
		for (int i = 0; i < prompt_len(s) + 12; i++)
			ids[s][i] = (int)(rng_uniformf(&R) * (V - 1));
		kvcache_init(&alone[s], &m, CAP);
		kvcache_init(&batch[s], &m, CAP);
	}
	float *la = (float *)xmalloc(sizeof(float) * NSEQ * 4 * V);
	float *lb = (float *)xmalloc(sizeof(float) * NSEQ * 4 * V);
	for (int step = 0; step < 4; step++) {
		struct model_seq q[NSEQ];
		int who[NSEQ], n = 0;
		for (int s = 0; s < NSEQ; s++) {
			int start = s % 2;              /* the step of its prefill */
			if (step < start)
				continue;
			int P = prompt_len(s), b = step - start, T = b ? 4 : P;
			const int *at = ids[s] + (b ? P + 4 * (b - 1) : 0);
			q[n] = (struct model_seq){ .kv = NULL, .ids = at, .T = T, .store = 1,
			                           .logits = 1, .logits_from = T - 4 };
			who[n++] = s;
		}
		for (int i = 0; i < n; i++) {
			q[i].kv = &alone[who[i]];
			if (model_forward(&m, &q[i], 1, la + (size_t)i * 4 * V) != 0)
				CHECK(0, "forward of one sequence");
			q[i].kv = &batch[who[i]];
		}
		CHECK(model_forward(&m, q, n, lb) == 0, "mixed forward");
		int bad = 0;
		for (int i = 0; i < n; i++)
			bad += memcmp(la + (size_t)i * 4 * V, lb + (size_t)i * 4 * V,
			              sizeof(float) * 4 * V) != 0;
		if (bad)
			printf("#   %d of %d sequences differ\n", bad, n);
		snprintf(what, sizeof what, "model forward %s, step %d (%s): logits alone bitwise "
		         "equal to the batch of %d", dt == DICE_BF16 ? "bf16" : "fp32", step,
		         step == 1 ? "prefills among decode blocks" : step ? "decode blocks" :
		         "prefills", n);
		CHECK(bad == 0, what);
	}
	for (int s = 0; s < NSEQ; s++) {
		kvcache_free(&alone[s], &m);
		kvcache_free(&batch[s], &m);
		free(ids[s]);
	}
	free(la);
	free(lb);
	model_free(&m);
}

int main(void)
{
	if (gt_init(23))
		return 0;
	run(DICE_BF16, 0);
	run(DICE_BF16, 1);
	run(DICE_BF16, 2);
	run(DICE_BF16, 3);
	run(DICE_F32, 0);
	run_mixed(DICE_BF16);
	run_mixed(DICE_F32);
	return test_done();
}
