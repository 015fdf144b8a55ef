/* test_model_graph: the engine forward's launch modes give the same bits. A small random
 * SDAR-shaped model (bf16 and fp32) decodes as the sampler does: a prefill, then per block a
 * forward of 8 rows (the last block stored, this block's logits) and three of 4 rows, for one
 * sequence and for three of different lengths together, with a longer prefill in the middle
 * (the backend's scratch grows, so the graphs are captured again). Every step's logits with
 * CUDA graphs and programmatic dependent launch (each on and off) must be the same bits as
 * the plain launches; the graph runs must have replayed graphs. Then graphs across
 * model_pack and model_unpack. */
#include <string.h>

#include "gpu_test.h"
#include "gt_model.h"
#include "cuda/common.cuh"

#define MAXSEQ 3
#define CAP 640
#define BLOCKS 5

/* every logit of the run, in order; returns how many floats */
static size_t decode_run(struct model *m, int nseq, int **ids, float *out)
{
	struct kvcache kv[MAXSEQ];
	struct model_seq q[MAXSEQ];
	int V = m->cfg.vocab_size;
	size_t n = 0;

	for (int s = 0; s < nseq; s++) {
		kvcache_init(&kv[s], m, CAP);
		/* prompts of 40, 96, 200 tokens; the third sequence's comes mid-run */
		int P = s == 0 ? 40 : s == 1 ? 96 : 200;
		q[s] = (struct model_seq){ .kv = &kv[s], .ids = ids[s], .T = P, .store = 1,
		                           .logits = 1, .logits_from = P - 4 };
	}
	for (int s = 0; s < nseq && s < 2; s++) {
		CHECK(model_forward(m, &q[s], 1, out + n) == 0, "prefill");
		n += (size_t)4 * V;
	}
	for (int b = 0; b < BLOCKS; b++) {
		if (b == 2 && nseq > 2) {       /* a longer prefill: the scratch grows */
			CHECK(model_forward(m, &q[2], 1, out + n) == 0, "prefill mid-run");
			n += (size_t)4 * V;
		}
		int act = nseq > 2 && b < 2 ? 2 : nseq;
		for (int it = 0; it < 4; it++) {
			for (int s = 0; s < act; s++) {
				int len = kv[s].len;
				q[s] = (struct model_seq){ .kv = &kv[s], .logits = 1 };
				if (it == 0 && b > 0) { /* store the last block, denoise this one */
					q[s].ids = ids[s] + len, q[s].T = 8;
					q[s].commit_rows = 4, q[s].logits_from = 4;
				} else {
					q[s].ids = ids[s] + len, q[s].T = 4;
					q[s].store = it == 3 && b + 1 == BLOCKS;
				}
			}
			if (model_forward(m, q, act, out + n) != 0)
				CHECK(0, "decode forward");
			n += (size_t)act * 4 * V;
		}
	}
	for (int s = 0; s < nseq; s++)
		kvcache_free(&kv[s], m);
	return n;
}

static void run(enum dice_dtype dt)
{
	struct model m;
	int *ids[MAXSEQ];
	char what[200];

	gt_model(&m, dt, 7);
	int V = m.cfg.vocab_size;
	for (int s = 0; s < MAXSEQ; s++) {
		ids[s] = (int *)xmalloc(sizeof(int) * CAP);
		for (int i = 0; i < CAP; i++)
			ids[s][i] = (int)(rng_uniformf(&R) * (V - 1));
	}
	size_t most = (size_t)(2 + 1 + BLOCKS * 4 * MAXSEQ) * 4 * V;
	float *ref = (float *)xmalloc(sizeof(float) * most);
	float *got = (float *)xmalloc(sizeof(float) * most);
	for (int nseq = 1; nseq <= MAXSEQ; nseq += 2) {
		gpu_set_graphs(0);
		gpu_set_pdl(0);
		size_t n = decode_run(&m, nseq, ids, ref);
		for (int mode = 1; mode < 4; mode++) {
			int graphs = mode & 1, pdl = mode >> 1;
			long c0, l0, c1, l1;
			gpu_set_graphs(graphs);
			gpu_set_pdl(pdl);
			gpu_graph_counts(&c0, &l0);
			memset(got, 0xff, sizeof(float) * most);
			size_t n2 = decode_run(&m, nseq, ids, got);
			gpu_graph_counts(&c1, &l1);
			int pdl_on = gpu_pdl();
			snprintf(what, sizeof what, "%s, %d sequence(s), graphs %s, pdl %s%s: logits of "
			         "every step bitwise equal to plain launches (%ld captures, %ld graph "
			         "launches)", dt == DICE_BF16 ? "bf16" : "fp32", nseq, graphs ? "on" : "off",
			         pdl ? "on" : "off", pdl && !pdl_on ? " (not sm_90: off)" : "", c1 - c0,
			         l1 - l0);
			CHECK(n2 == n && !memcmp(ref, got, sizeof(float) * n) &&
			      (!graphs || l1 - l0 > c1 - c0) && (graphs || l1 == l0), what);
		}
	}
	gpu_set_graphs(-1);
	gpu_set_pdl(-1);
	for (int s = 0; s < MAXSEQ; s++)
		free(ids[s]);
	free(ref);
	free(got);
	model_free(&m);
}

/* graphs follow the packed copies (gpu_graphs_stale): a model decodes with graphs on its
 * packed copies, then after model_unpack with the freed copies' memory taken and filled with
 * NaNs (graphs captured again, on the matrices: one still on the copies would read NaNs),
 * then after model_pack again, then after nine more rope tables were made (the model's table,
 * which its graphs read, stays where it was: one freed then would be read by them); every run
 * the bits of the plain launches */
static void stale(void)
{
	struct model m;
	int *ids[1];
	char what[200];

	gt_model(&m, DICE_BF16, 7);
	int V = m.cfg.vocab_size;
	ids[0] = (int *)xmalloc(sizeof(int) * CAP);
	for (int i = 0; i < CAP; i++)
		ids[0][i] = (int)(rng_uniformf(&R) * (V - 1));
	size_t most = (size_t)(2 + BLOCKS * 4) * 4 * V;
	float *ref = (float *)xmalloc(sizeof(float) * most);
	float *got = (float *)xmalloc(sizeof(float) * most);
	gpu_set_graphs(0);
	size_t n = decode_run(&m, 1, ids, ref);
	gpu_set_graphs(1);
	void *fill = NULL;
	const float *rope = gpu_rope_table(m.cfg.rope_theta, m.cfg.head_dim);
	for (int stage = 0; stage < 4; stage++) {
		if (stage == 1) {
			size_t fr, tot;
			model_unpack(&m);
			CHECK(cudaMemGetInfo(&fr, &tot) == cudaSuccess, "memory info");
			CHECK(cudaMalloc(&fill, fr / 3) == cudaSuccess &&
			      cudaMemset(fill, 0xff, fr / 3) == cudaSuccess &&
			      cudaDeviceSynchronize() == cudaSuccess, "the freed copies' memory filled");
		}
		if (stage == 2)
			CHECK(model_pack(&m) == 4 * m.cfg.num_layers + 1, "model_pack again");
		if (stage == 3) {
			for (int i = 1; i <= 9; i++)
				gpu_rope_table(m.cfg.rope_theta + 1000.0f * i, m.cfg.head_dim);
			CHECK(gpu_rope_table(m.cfg.rope_theta, m.cfg.head_dim) == rope,
			      "the model's rope table kept after nine more");
		}
		long c0, l0, c1, l1;
		decode_run(&m, 1, ids, got);            /* (captures where a key is seen again) */
		gpu_graph_counts(&c0, &l0);
		memset(got, 0xff, sizeof(float) * most);
		size_t n2 = decode_run(&m, 1, ids, got);
		gpu_graph_counts(&c1, &l1);
		snprintf(what, sizeof what, "graphs %s: logits bitwise equal to plain launches (%ld "
		         "graph launches)", stage == 0 ? "on the packed copies" : stage == 1 ?
		         "after model_unpack" : stage == 2 ? "after model_pack again" :
		         "after nine more rope tables", l1 - l0);
		CHECK(n2 == n && !memcmp(ref, got, sizeof(float) * n) && l1 > l0, what);
	}
	gpu_set_graphs(-1);
	CHECK(cudaFree(fill) == cudaSuccess, "fill freed");
	free(ids[0]), free(ref), free(got);
	model_free(&m);
}

int main(void)
{
	if (gt_init(29))
		return 0;
	run(DICE_BF16);
	run(DICE_F32);
	stale();
	return test_done();
}
