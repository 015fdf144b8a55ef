/* sft_train: the dice-sft training loop pieces: epochs of shuffled, packed micro-batches,
 * optimizer steps with gradient accumulation, checkpoints and exact resume.
 *
 * Data order: epoch e shuffles the samples with an RNG seeded from (seed, e) and packs them
 * into micro-batches of at most batch_tokens tokens (lib/sft.h); an optimizer step takes
 * grad_accum consecutive micro-batches of one epoch (the last step of an epoch may take
 * fewer), each sample weight divided by the step's micro-batch count, so the step's loss
 * and gradient are the mean over its micro-batches. The noise comes from a second RNG
 * seeded from seed, advanced only by the batches.
 *
 * Saving (sft_train_save): the Hugging Face directory out_dir (config.json with torch_dtype
 * float32: the fp32 master weights, model.safetensors, the tokenizer files of tok_dir) and
 * out_dir/trainer_state.safetensors (lib/optim.h state + "seed", "epoch", "batch" (the next
 * micro-batch of that epoch), "noise_rng" (4 words in hex), "samples", "total_steps",
 * "save" ("step N", also in the weights' metadata: lib/checkpoint.h, checkpoint_check_save).
 * sft_train_resume restores all of it, so on the CPU the losses continue bitwise; weights
 * from another save than the state's (a save cut short) are an error, and so is a state
 * whose position or noise generator is not as written here (a number that is not decimal
 * digits alone, an epoch past 2^30, a "batch" past the end of its epoch, a "noise_rng" that
 * is not four words of 1 to 16 hex digits parted by a space, or is all zero).
 */
/* Data parallelism (not written yet) drops in without a communication layer of our own:
 * rank r of W takes the micro-batches i with i % W == r of each step, and one NCCL
 * all-reduce (average) of model_train.gbuf, a single flat fp32 buffer, runs between the
 * backward passes and optim_step; every rank then applies the same update.
 */
#ifndef DICE_SFT_TRAIN_H
#define DICE_SFT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "model_bwd.h"
#include "optim.h"
#include "rng.h"
#include "sft.h"

#define SFT_STATE_FILE "trainer_state.safetensors"

struct sft_train {
	struct model *m;
	struct model_train t;
	struct optim op;
	const struct sft_data *d;
	uint64_t seed;
	size_t batch_tokens;
	int grad_accum, epochs;
	long total_steps;            /* min(epochs x steps per epoch, max_steps) */
	/* position */
	int epoch;
	size_t batch;                /* next micro-batch of the epoch */
	size_t *order, *starts, nbatch;  /* the epoch's plan */
	struct rng noise;
};

struct sft_step {
	double loss;                 /* mean over the step's micro-batches */
	double grad_norm;
	float lr;
	size_t tokens;               /* sample tokens (not doubled) */
	double attn_pairs;           /* sum over samples of n^2 (the visible query-key pairs of
	                              * the 2n x 2n mask, about; for the FLOP count) */
	int micro;                   /* micro-batches */
};

/* Plans every epoch once to count steps; max_steps <= 0: no cap. warmup < 1 is a fraction of
 * the total steps (rounded up), else a step count. 0 or -1 with a warning. */
int sft_train_init(struct sft_train *s, struct model *m, const struct sft_data *d,
                   const struct optim_opts *oo, double warmup, uint64_t seed,
                   size_t batch_tokens, int grad_accum, int epochs, long max_steps,
                   int recompute);
void sft_train_free(struct sft_train *s);
/* bf16 GEMMs (model_train_set_bf16), their copies refreshed in the optimizer's pass
 * (optim_link_bf16). 0, or -1 with a warning. */
int sft_train_set_bf16(struct sft_train *s);
/* 1 while steps remain. */
int sft_train_more(const struct sft_train *s);
/* One optimizer step. 0 or -1. */
int sft_train_step(struct sft_train *s, struct sft_step *out);
/* Write the model's fp32 weights (backend -> host) as a checkpoint directory with the
 * tokenizer files of tok_dir (may be NULL), the weights naming save (checkpoint_write_save:
 * the state file written next names it too). 0, or -1 with err. Also used by dice-rl. */
int sft_train_save_model(struct model *m, const char *out_dir, const char *tok_dir,
                         const char *save, char *err, size_t errlen);
/* Write the checkpoint and the state. 0, or -1 with err. */
int sft_train_save(struct sft_train *s, const char *out_dir, const char *tok_dir, char *err,
                   size_t errlen);
/* Export the next micro-batch (noise drawn from a copy of the generator: training is not
 * disturbed) with its loss and gradients, for checks against another implementation:
 * safetensors with "ids", "pos", "noisy", "target", "weight" (N), "start", "len" (nsamp),
 * all F32 (ids exact below 2^24), "grad.<tensor name>" for every weight, and __metadata__
 * dice_format "dice-sft-batch" version 1, "loss" (%.17g), "block". Gradients are zeroed
 * again afterwards. 0, or -1 with err. */
int sft_train_dump(struct sft_train *s, const char *path, char *err, size_t errlen);
/* The writer of sft_train_dump, shared with dice-rl --dump-batch: the rows of tb, nextra more
 * tensors, the gradients in tr->gbuf and __metadata__ dice_format format, version 1, loss,
 * block. 0, or -1 with err. */
int sft_batch_write(const char *path, const char *format, const struct train_batch *tb,
                    struct model_train *tr, double loss, const struct st_wtensor *extra,
                    size_t nextra, char *err, size_t errlen);
/* Restore the state from dir/trainer_state.safetensors (the weights come with the model,
 * loaded from dir). 0, or -1 with err. */
int sft_train_resume(struct sft_train *s, const char *dir, char *err, size_t errlen);

#endif
