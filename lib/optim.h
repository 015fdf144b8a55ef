/* optim: AdamW with fp32 master weights and moments, global-norm clipping and learning-rate
 * schedules, as PyTorch's torch.optim.AdamW + clip_grad_norm_ + the transformers schedules.
 *
 * Parameters are a list of (name, master weights p, gradient g, n, decay) in backend memory;
 * the gradients form one flat buffer (lib/model_bwd.h) so the norm is one reduction. Weight
 * decay applies to matrices only (norm vectors are excluded, as transformers' Trainer does).
 * A step: norm = ||g||; if finite, every tensor gets ops->adamw with gscale = min(1,
 * clip / (norm + 1e-6)); a non-finite norm skips the update (the step still counts).
 *
 * Schedules (step s = optimizer steps done before this one, from 0; W warm-up steps, T total):
 *   warm-up:               lr * s / max(1, W)          for s < W
 *   constant_with_warmup:  lr
 *   cosine:                lr * 0.5 (1 + cos(pi (s - W) / max(1, T - W)))
 *
 * State file: safetensors with "exp_avg.<name>" and "exp_avg_sq.<name>" (fp32, shape (n)),
 * __metadata__ dice_format "dice-sft-state", dice_format_version "1", "step", plus the
 * caller's own (key, value) pairs (RNG, data position...).
 */
#ifndef DICE_OPTIM_H
#define DICE_OPTIM_H

#include <stddef.h>

#include "model_bwd.h"
#include "ops.h"
#include "safetensors.h"

#define OPTIM_FORMAT "dice-sft-state"
#define OPTIM_FORMAT_VERSION 1

enum optim_schedule {
	OPTIM_CONSTANT_WITH_WARMUP = 0,
	OPTIM_COSINE = 1,
};

struct optim_opts {
	float lr;                    /* 1e-5 */
	float beta1, beta2, eps;     /* 0.9, 0.999, 1e-8 */
	float weight_decay;          /* 0 */
	float clip;                  /* 1.0; 0 = no clipping */
	enum optim_schedule schedule;
	int warmup;                  /* steps */
	int total;                   /* steps (cosine) */
};

struct optim_param {
	char name[80];
	float *p;                    /* (n) master weights, backend memory */
	const float *g;              /* (n) gradient */
	size_t n;
	int decay;                   /* 1: weight decay applies */
	void *lp;                    /* bf16 copy of p refreshed by optim_step, or NULL */
};

struct optim {
	const struct ops *ops;
	struct optim_opts o;
	struct optim_param *par;     /* (npar), owned */
	size_t npar;
	float *m, *v;                /* (ntotal) moments, backend memory */
	size_t ntotal;
	const float *gflat;          /* (ngflat) every gradient, for the norm */
	size_t ngflat;
	int step;                    /* optimizer steps done */
	int lp;                      /* 1: optim_step refreshes the bf16 copies (optim_link_bf16) */
};

void optim_defaults(struct optim_opts *o);
/* "constant_with_warmup" / "cosine" -> *out; 0 or -1. */
int optim_schedule_parse(const char *s, enum optim_schedule *out);
const char *optim_schedule_name(enum optim_schedule s);
/* The learning rate of step s (0-based). */
float optim_lr(const struct optim_opts *o, int s);

/* The parameter list of a training model (tensors of checkpoint_tensor_list, in order). */
struct optim_param *optim_model_params(struct model_train *t, size_t *n);
/* Takes ownership of par. */
void optim_init(struct optim *op, const struct ops *ops, const struct optim_opts *o,
                struct optim_param *par, size_t npar, const float *gflat, size_t ngflat);
void optim_free(struct optim *op);
/* The bf16 image of t (model_train_set_bf16, done before) as the parameters' lp (every
 * tensor, as model_train_refresh casts all of m->wbuf): optim_step then rewrites each in
 * the pass that updates its master weights, and
 * model_train_refresh after a step is not needed (op->lp = 1). Needs ops->adamw_multi;
 * without it (or without bf16 copies) nothing changes. */
void optim_link_bf16(struct optim *op, const struct model_train *t);
/* One update with the learning rate of the current step; returns the gradient norm before
 * clipping and advances op->step. *lr_out (may be NULL) gets the learning rate used.
 * With ops->adamw_multi every tensor is updated by one call (few kernel launches). */
double optim_step(struct optim *op, float *lr_out);

/* Write the state (atomically) with nmeta extra (key, value) pairs. 0, or -1 with err. */
int optim_save(const struct optim *op, const char *path, const char *const *meta, size_t nmeta,
               char *err, size_t errlen);
/* Load moments and step from an opened state file (format checked; the step decimal digits
 * alone, at most 2^30). 0, or -1 with err. */
int optim_load(struct optim *op, const struct safetensors *st, char *err, size_t errlen);

#endif
