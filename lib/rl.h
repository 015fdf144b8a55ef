/* rl: the TraceRL pieces of BiC-RL (SPEC §3 items 4-7): group advantages, training samples
 * built from sampler traces, and the clipped surrogate with the k3 KL term and its gradient.
 *
 * Advantages: per task (a group of G rewards) A = (r - mean) / std with the population std
 * and no epsilon; a group whose rewards are all equal is skipped (keep 0, A 0).
 *
 * Samples (one response = prompt ids + response ids, each response id with the global
 * denoising step that committed it, struct sampler_result .step): blocks are ALIGNED TO
 * ABSOLUTE POSITIONS (position p is in block p / block, the blocks the sampler decoded), not
 * to the response start as in the reference code (SPEC §3 quirk; they agree only when the
 * prompt length is a multiple of the block). Response tokens of block j have the distinct
 * step values s_j(0) < s_j(1) < ...; round k (0-based) makes one sample in which every block
 * with more than k distinct values takes s = s_j(k): its targets are its tokens of step s,
 * its noisy copy masks its tokens of step >= s (the state just before step s); a block
 * without a k-th value is left clean and has no target. Rounds of a response: the most
 * distinct values of any of its blocks (<= block with one token per step). Tokens equal to
 * pad_id (<|endoftext|>, also the sampler's end of text) are never targets (SPEC §3.5).
 * A response that ends inside its last block (a stop id, or max_tokens) is padded to the
 * block's end: the pads (pad_id, or mask_id when pad_id < 0) are masked in the noisy copy of
 * every round and never targets, as the reference's padding with steps max + 1 (SPEC §3.5),
 * so the block's targets see the masks the sampler decoded them beside.
 * A sample is the train_batch layout of lib/model_bwd.h: rows [noisy | clean], positions
 * 0..n-1 in both halves (n = plen + response, rounded up to the block), the noisy-flag
 * attention rule (= TraceRL's [prompt | clean | noisy] mask; the prompt rows of the noisy
 * half are never masked and never targets).
 *
 * Loss per target token t of a sample (m = 1 at targets, 0 elsewhere):
 *   rho = exp(clamp(logp - logp_old, -10, 10))
 *   surr = min(rho A, clip(rho, 1 - eps, 1 + eps) A)
 *   kl = exp(-d) - 1 + d, d = logp - logp_kl (k3; logp_kl = logp_old, or a reference's)
 *   loss = sum_t (-surr + beta kl) * scale,  scale = 1 / (samples of the update * L1)
 * with L1 the padded response length (SPEC §3.7: normalised by L1, not by the target count;
 * the mean over samples is the mean over the update's samples). dloss/dlogp: -A rho where the
 * unclipped term is the minimum (and the clamp is inactive), 0 where the clipped one is;
 * plus beta (1 - exp(-d)); times scale.
 */
#ifndef DICE_RL_H
#define DICE_RL_H

#include <stddef.h>
#include <stdint.h>

#include "model_bwd.h"

/* r, adv (ngroups * G), keep (ngroups). Returns the number of skipped groups. */
int rl_advantages(const float *r, int ngroups, int G, float *adv, uint8_t *keep);

struct rl_trace {
	const int *prompt;           /* (plen) */
	int plen;
	const int *ids;              /* (n) response ids */
	const int *step;             /* (n) global step that committed each */
	int n;
	float adv;                   /* the response's advantage */
};

/* Rounds (samples) of a trace. */
int rl_rounds(const struct rl_trace *t, int block);

struct rl_item {                     /* one sample: a trace and a round */
	const struct rl_trace *t;
	int round;
};

struct rl_batch {
	struct train_batch b;        /* rows; b.target >= 0 at target rows */
	float *adv;                  /* (N) advantage of each row's response */
	float *logp_old;             /* (N) log pi_old(target), filled by rl_batch_logp */
	float *logp_ref;             /* (N) the KL's reference, or NULL: logp_old */
	int ntarget;                 /* target rows */
};

void rl_batch_build(struct rl_batch *rb, const struct rl_item *items, int ns, int block,
                    int mask_id, int pad_id);
void rl_batch_free(struct rl_batch *rb);

/* out (N) at target rows := log p(target) under t's current weights (forward only). 0/-1. */
int rl_batch_logp(struct model_train *t, const struct rl_batch *rb, float *out);

struct rl_loss_opts {
	float eps;                   /* clip epsilon (0.2) */
	float beta;                  /* KL coefficient (0.01) */
	double scale;                /* 1 / (samples of the update * L1) */
};

struct rl_stats {                    /* sums over target tokens (accumulated by the calls) */
	double loss;                 /* the scaled loss */
	double surr, kl;             /* unscaled sums of surr and kl */
	long targets, clipped;       /* clipped: |rho - 1| > eps */
};

/* The loss of R target tokens; dlogp (R, may be NULL) := dloss/dlogp. logp_kl NULL: logp_old.
 * Adds to st (may be NULL). Returns the loss. */
double rl_loss(const float *logp, const float *logp_old, const float *logp_kl, const float *adv,
               int R, const struct rl_loss_opts *o, float *dlogp, struct rl_stats *st);

/* The loss of a batch under t's weights (rb->logp_old filled); grad 1 adds its gradient to
 * t->gbuf. 0, or -1. */
int rl_batch_loss(struct model_train *t, const struct rl_batch *rb, const struct rl_loss_opts *o,
                  int grad, struct rl_stats *st);

#endif
