/* sampler: block-diffusion decoding (SPEC §2) on lib/model.h, one request or many at once.
 *
 * Per request (prompt of P tokens, at most G = max_tokens new ones): the buffer is the prompt
 * followed by mask ids up to ceil((P+G)/block) whole blocks. The floor(P/block)*block
 * whole-block prompt prefix is prefilled (K/V stored); the leftover prompt tokens sit unmasked
 * in the first decode block. Per block, up to steps+1 iterations: when the block has no mask
 * left, its K/V are stored (by a save pass of its own with separate_save, else fused into
 * the next block's first forward) and the block ends; else the block is
 * forwarded without storing, every masked position is sampled (temperature -> top-k -> top-p
 * -> softmax -> draw; confidence = probability of the drawn token under that filtered
 * distribution) and the commit rule picks which masked positions to fill: `sequential` the k
 * leftmost, `static` the k most confident, `dynamic` all above the threshold when there are at
 * least k of them, else the k most confident (k = the step's quota: block split over steps,
 * the first block%steps steps one more; ties go to the lowest position). After each block the
 * generated region is checked for a stop id; the result keeps the tokens up to and including
 * the first stop id (none: all G tokens).
 *
 * Requests run together: up to max_active sequences share each forward (their rows packed,
 * see model_forward), and a finished one's slot takes the next request. Each request has its
 * own RNG (seeded from its seed; one uniform per sampled position, in position order), so its
 * result does not depend on the others (bitwise on the CPU backend).
 */
#ifndef DICE_SAMPLER_H
#define DICE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

enum sampler_decoding {
	SAMPLER_STATIC = 0,          /* low_confidence_static */
	SAMPLER_DYNAMIC = 1,         /* low_confidence_dynamic */
	SAMPLER_SEQUENTIAL = 2,
};

struct sampler_opts {
	enum sampler_decoding decoding;
	int block;                   /* block size (4); also the model's attention block */
	int steps;                   /* denoising steps per block (4) */
	float threshold;             /* dynamic rule (0.9) */
	float temperature;           /* > 0; 1 = unchanged */
	int top_k;                   /* 0 = off */
	float top_p;                 /* 1 = off */
	int max_tokens;              /* G (4096) */
	const int *stop;             /* (nstop) stop ids, checked after each block */
	int nstop;
	int mask_id;                 /* 151669 for SDAR */
	int max_active;              /* sequences decoded together (1) */
	int max_rows;                /* rows per forward; 0 = 8192 (a longer prefill runs alone) */
	int separate_save;           /* 1: a forward of its own stores a finished block's K/V (the
	                              * reference's count: static 4/4 = 5 forwards per block);
	                              * 0: stored by the next block's first forward, identical
	                              * results, 4 forwards per block, none after the last block */
	/* optional: called with the logits (block, V) of every denoising step (tests, parity) */
	void (*on_logits)(void *arg, int req, int step, const float *logits, int rows, int V);
	void *on_logits_arg;
};

/* Defaults: static, block 4, steps 4, threshold 0.9, temperature 1, top-k 0, top-p 1, 4096
 * tokens, no stop ids, mask 151669, one at a time. */
void sampler_opts_default(struct sampler_opts *o);
/* "eval": DICE's KernelBench evaluation (static, top-k 1, temperature 1, top-p 1);
 * "rl": DICE's RL rollouts (dynamic 0.9, top-k 0, top-p 1, temperature 1). 0, or -1. */
int sampler_preset(struct sampler_opts *o, const char *name);
const char *sampler_decoding_name(enum sampler_decoding d);
int sampler_decoding_parse(const char *s, enum sampler_decoding *d);

struct sampler_request {
	const int *prompt;           /* (plen) token ids */
	int plen;
	uint64_t seed;
};

struct sampler_result {
	int *ids;                    /* (n) generated ids */
	int *step;                   /* (n) global denoising step (1-based) that committed it */
	float *logp;                 /* (n) log probability of it under the filtered distribution */
	int n;
	int forwards;                /* forwards this request took part in */
	int steps;                   /* denoising steps taken */
	int stopped;                 /* 1: a stop id ended it before max_tokens */
	double ms;                   /* wall time from this request's start (it took a slot:
	                              * its prefill) to its end */
};
void sampler_result_free(struct sampler_result *r);

/* Progress callback (may be NULL): called after each request finishes. */
typedef void (*sampler_progress_fn)(void *arg, int done, int total);

/* Decode nreq requests; res (nreq) receives the results. The model's attention block is set to
 * o->block. 0, or -1 with a warning (the model failed; results are then partial). */
int sampler_run(struct model *m, const struct sampler_opts *o, const struct sampler_request *req,
                int nreq, struct sampler_result *res, sampler_progress_fn progress, void *arg);

/* 1 when sampler_run would draw and commit on the backend, the host a round behind (static
 * and sequential decoding of at most 8 sequences at block 4 without an on_logits hook, on a
 * backend that queues its work (CUDA) and draws the filters itself; DICE_SAMPLER_DEVICE=0
 * turns it off, =1 on for the CPU backend too): the same results. */
int sampler_device_mode(const struct model *m, const struct sampler_opts *o, int nreq);

/* Bytes of KV cache that a run of nreq requests of prompts up to plen needs (at most
 * max_active caches at once). */
size_t sampler_kv_bytes(const struct model *m, const struct sampler_opts *o, int plen, int nreq);

/* ----- the pieces, exposed for tests */

/* Quota of step s (0-based) of a block: block/steps, the first block%steps steps one more. */
int sampler_quota(int block, int steps, int s);

/* The per-position draw is the .sample op of lib/ops.h (CPU twin: sample_draw there): the
 * masked rows of each denoising forward are drawn on the model's backend, and only their ids
 * and probabilities come back to the host. */

/* Which of the n positions of a block to commit. masked[i]: position i is still masked;
 * conf[i]: its confidence. Sets commit[i] = 1 for the chosen ones; returns how many. */
int sampler_choose(enum sampler_decoding d, int n, const uint8_t *masked, const float *conf,
                   int quota, float threshold, uint8_t *commit);

#endif
