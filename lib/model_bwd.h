/* model_bwd: training forward and backward of the SDAR model (lib/model.h) against
 * lib/ops.h, for the block-diffusion SFT objective (SPEC §1.3).
 *
 * A struct train_batch is a set of packed rows (built by lib/sft.c): each sample occupies
 * 2n consecutive rows [x_t | x_0] (noisy copy first), both halves with positions 0..n-1;
 * attention runs per sample (so packed samples never see each other) under the noisy-flag
 * rule of struct attn_mask. No logit shift: the loss of a row compares its logits with its
 * own target. Only rows with a target get logits.
 *
 * struct model_train holds the gradients in ONE flat fp32 backend buffer (gbuf, the tensors
 * of checkpoint_tensor_list in order, no gaps; a tied lm_head shares the embedding's
 * gradient), carved into the views of g; so clipping, the optimizer and a data-parallel
 * all-reduce each see one array. Activations are kept per layer, or with recompute only
 * each layer's input (the layer's forward is run again during the backward).
 *
 * The training model must hold fp32 weights (model_init with DICE_F32); the weights are then
 * the optimizer's master copy (lib/optim.h) and are updated in place.
 *
 * Mixed precision (model_train_set_bf16, CUDA): the matrices used by the GEMMs get bf16
 * copies (one backend buffer lbuf, the image of m->wbuf at half the bytes), refreshed from
 * the fp32 master by one cast after every optimizer step (model_train_refresh), or in the
 * optimizer's own pass (optim_link_bf16); the GEMMs take bf16 operands with fp32
 * accumulation and fp32 outputs, attention runs on the tensor cores (ops->attention_tc).
 * The GEMM inputs xn1, att, xn2 and h are rounded to bf16 once, in the forward, and kept in
 * bf16 only (ops->rmsnorm_xb, ops->swiglu_xb; att stays fp32 too for the attention
 * backward, its bf16 copy by ops->cast_bf16): the forward GEMMs and the weight-gradient GEMMs
 * read them (ops->matmul_xb, ops->matmul_backward_xb). The attention forward keeps its
 * softmax statistics for its backward (ops->attention_tc_stat). Other activations, norms,
 * gradients (gbuf), the loss and the optimizer stay fp32.
 */
#ifndef DICE_MODEL_BWD_H
#define DICE_MODEL_BWD_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct train_batch {
	int N;                       /* rows */
	int nsamp;                   /* samples */
	int *ids;                    /* (N) token ids (mask id at masked noisy rows) */
	int *pos;                    /* (N) position within the sample */
	uint8_t *noisy;              /* (N) 1 = x_t half */
	int *target;                 /* (N) clean token at masked noisy rows, else -1 */
	float *weight;               /* (N) loss weight of the row (1/(p * labels ...)), else 0 */
	int *start, *len;            /* (nsamp) first row and row count (2n) of each sample */
};

/* the phases of the profile */
enum { MT_PROF_FWD, MT_PROF_FWD_ATT, MT_PROF_HEAD, MT_PROF_BWD, MT_PROF_BWD_ATT, MT_PROF_OPT,
       MT_PROF_N };
#define MT_PROF_OPS 40               /* op groups of the fine profile */

struct model_train {
	struct model *m;
	const struct ops *ops;
	int recompute;
	float *gbuf;                 /* (ngrad) fp32 gradients, backend memory */
	size_t ngrad;
	struct model_weights g;      /* views into gbuf, same shapes as m->w */
	/* scratch, backend memory, grown on demand */
	int rows, lrows, nlayer_acts;
	float **acts;                /* per stored layer: one block of its activations */
	float *xs;                   /* (L+1, rows, C) layer inputs; xs[L] is the final residual */
	float *xnf, *sel, *logits, *loss, *dx, *dtmp, *dxn, *dq, *dk, *dv, *datt, *dg, *du, *dh;
	float *dqkvb;                /* (rows, QD + 2 KVD) bf16 q/k/v gradients, when fused */
	float *dlb;                  /* (lrows, V) bf16 dlogits, with head_xb */
	float *dxb;                  /* (rows, C) bf16 of dx, with dres_bf16 */
	int g_qkv;                   /* the q/k/v gradients lie one after the other */
	int g_gu;                    /* the gate/up gradients lie one after the other */
	int *ids_d, *pos_d, *target_d, *rowsel_h, *rowsel_d;
	float *weight_d;
	uint8_t *noisy_d;
	/* mixed precision */
	int lp;                      /* 1: bf16 GEMM copies in use */
	void *lbuf;                  /* bf16 image of m->wbuf */
	struct model_weights wl;     /* matrices: views into lbuf; norms, embed: m->w's */
	const struct model_weights *wc;  /* weights the GEMMs read: &m->w or &wl */
	/* phase timing (DICE_SFT_PROFILE set in the environment): seconds per phase, each phase
	 * ended by a backend sync; printed to stderr by model_train_profile_print, or by
	 * model_train_free when nothing was printed before */
	int prof, prof_printed, in_bwd;
	int unfused;                 /* DICE_SFT_UNFUSED: the norm/RoPE ops one by one */
	double prof_last, prof_s[MT_PROF_N];
	/* DICE_SFT_PROFILE=2: also the seconds of each op group (model_train_op), by name */
	int nop;
	double op_last, op_s[MT_PROF_OPS];
	const char *op_name[MT_PROF_OPS];
};

/* 0, or -1 with a warning (weights not fp32, backend without training ops). */
int model_train_init(struct model_train *t, struct model *m, int recompute);
void model_train_free(struct model_train *t);
/* Switch to bf16 GEMMs (see above): 0, or -1 with a warning (backend without cast_bf16 or
 * attention_tc). */
int model_train_set_bf16(struct model_train *t);
/* Re-cast the bf16 copies from the master weights (after an optimizer step or a load); a
 * no-op in fp32. */
void model_train_refresh(struct model_train *t);
/* The bf16 image in lbuf of a master tensor's data (a pointer into m->wbuf); needs t->lp. */
void *model_train_lp_of(const struct model_train *t, const void *master);
void model_train_zero_grad(struct model_train *t);
/* with t->prof: wait for the backend and charge the time since the last mark to phase ph */
void model_train_mark(struct model_train *t, int ph);
/* with DICE_SFT_PROFILE=2: wait for the backend and charge the time since the last op mark
 * to the op group called name (a string constant) */
void model_train_op(struct model_train *t, const char *name);
/* with t->prof: print the seconds charged to each phase so far to stderr ("profile: " lines) */
void model_train_profile_print(struct model_train *t);
/* Forward and backward of one batch: gradients of sum_rows weight * CE are ADDED to gbuf;
 * *loss gets that sum. 0, or -1 with a warning (bad ids, no target). */
int model_train_batch(struct model_train *t, const struct train_batch *b, double *loss);
/* The loss alone (no gradient), for tests and evaluation. */
int model_train_loss(struct model_train *t, const struct train_batch *b, double *loss);
/* A loss that is any function of the target log-probabilities (RL, lib/rl.h): fn gets the
 * R target rows (rows: their indices in b, in order) with log p(target) under the current
 * weights and writes weight (R); the gradient added is that of sum_r weight[r] * CE_r, so
 * weight = -dLoss/dlogp gives the gradient of the caller's loss. b->weight is ignored.
 * grad 0: forward only (fn still sees the log-probabilities). *loss: sum weight * CE.
 * Costs one extra (R, V) scratch. 0, or -1 with a warning. */
typedef void (*model_train_weight_fn)(void *arg, int R, const int *rows, const float *logp,
                                      float *weight);
int model_train_batch_fn(struct model_train *t, const struct train_batch *b, int grad,
                         model_train_weight_fn fn, void *arg, double *loss);

#endif
