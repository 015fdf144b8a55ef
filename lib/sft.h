/* sft: data for block-diffusion supervised fine-tuning (SPEC §1.3, §5.5).
 *
 * Records -> samples: a record is {"prompt", "response"} (optional "system"), or
 * {"messages": [{"role", "content"}...]} whose last message is the assistant's response and
 * which holds a user message before it (Qwen3's template refuses one without), or
 * pre-tokenised {"prompt_ids": [...], "response_ids": [...]} (used as given: no template, no
 * think block). A record is one form: "messages" beside "prompt", "response" or "system",
 * or "prompt_ids"/"response_ids" beside any of those or "messages", is a bad record. A
 * null field counts as absent, in the choice of the form too: {"messages": null, "prompt",
 * "response"} is a text record, and one whose only form is null fields has none. Text records are rendered with the Qwen3 chat format:
 *     prompt   = [<|im_start|>system\n{system}<|im_end|>\n] <|im_start|>user\n{prompt}<|im_end|>\n
 *                <|im_start|>assistant\n
 *     response = [<think>\n\n</think>\n\n] {response}<|im_end|>\n
 * The empty think block is prepended unless think is off or the response holds a think tag
 * ("<think>" or "</think>", anywhere: LLaMA-Factory's ReasoningTemplate rule). Prompt and response are tokenised separately (special tokens recognised).
 * A sample longer than max_len tokens (before padding) is dropped and counted; a kept sample
 * is padded with pad_id to a multiple of the block size, and the pads are labels.
 *
 * Samples -> a batch (struct train_batch, lib/model_bwd.h): per sample draw t ~ U(0,1),
 * p = (1 - 1e-3) t + 1e-3, mask every response token with probability p (while none is
 * masked, the per-token draws are repeated with the same p, up to 10 times; then one response
 * position chosen uniformly is forced). Rows: [x_t | x_0] per sample, positions 0..n-1 in both halves. Targets are the
 * clean tokens at masked x_t rows, with weight 1 / (p * labels * scale), where labels is the
 * number of response tokens (prompt excluded, pads included) in the batch and scale the
 * caller's extra divisor (gradient accumulation). Prompt tokens are never masked, never labels.
 */
#ifndef DICE_SFT_H
#define DICE_SFT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "model_bwd.h"
#include "rng.h"

#define SFT_EPS 1e-3                 /* p = (1 - eps) t + eps */
#define SFT_REDRAWS 10

struct sft_sample {
	int *ids;                    /* (n) prompt then response then pads */
	int n;                       /* a multiple of the block size */
	int prompt_len;              /* never masked, never labels */
};

struct sft_data {
	struct sft_sample *s;        /* (n) */
	size_t n, cap;
	size_t dropped;              /* longer than max_len */
	size_t tokens;               /* sum of n */
};

/* Text -> token ids (xmalloc'ed into *ids). 0 or -1. */
typedef int (*sft_encode_fn)(void *ctx, const char *text, size_t len, int **ids, size_t *n);

struct sft_opts {
	int block;                   /* 4 */
	int pad_id;                  /* <|endoftext|> (151643) */
	int max_len;                 /* 6144 */
	int think;                   /* 1: prepend the empty think block */
	int vocab;                   /* ids must be below; 0: unchecked */
	sft_encode_fn encode;        /* for text records (NULL: only *_ids records) */
	void *encode_ctx;
	const char *no_encode;       /* the message of a well-formed text record when encode is
	                              * NULL (NULL: "text record but no tokenizer") */
};

void sft_data_init(struct sft_data *d);
void sft_data_free(struct sft_data *d);
/* Render a text record (see above) into new strings. 0, or -1 with a message in err. */
int sft_render(const json_t *rec, int think, char **prompt, char **response, char *err,
               size_t errlen);
/* 1 when rec is a text record, the kind that needs o->encode: one with neither prompt_ids
 * nor response_ids, or only null ones (either, not null, makes it a token-id record, bad
 * without the other). */
int sft_record_is_text(const json_t *rec);
/* Add one record: 0 added, 1 dropped as too long, -1 bad record (message in err). A text
 * record is rendered before it needs o->encode: a malformed one says what is wrong with it,
 * whether there is a tokenizer or not. */
int sft_data_add(struct sft_data *d, const json_t *rec, const struct sft_opts *o, char *err,
                 size_t errlen);
/* Add a tokenised sample (pads it). Same return values; nr == 0 is a bad record. */
int sft_data_add_ids(struct sft_data *d, const int *prompt, size_t np, const int *resp,
                     size_t nr, const struct sft_opts *o, char *err, size_t errlen);

/* Micro-batches: order (n) is a permutation of sample indices; consecutive samples are
 * packed while the sum of their n stays <= batch_tokens (a longer sample goes alone).
 * Returns the number of micro-batches; *starts (nb + 1) indexes order. */
size_t sft_plan(const struct sft_data *d, const size_t *order, size_t batch_tokens,
                size_t **starts);
/* Shuffle 0..n-1 with r (Fisher-Yates) into order. */
void sft_shuffle(size_t *order, size_t n, struct rng *r);

/* The rows of samples s[0..ns) with the noise drawn from r (see above); scale divides every
 * weight. p (ns) receives each sample's mask probability when not NULL. */
void sft_batch_build(struct train_batch *b, const struct sft_sample *const *s, int ns,
                     int mask_id, double scale, struct rng *r, double *p);
/* The same with given masks: mask[i] (n of sample i, 1 = masked; prompt entries ignored)
 * and probabilities p[i]. For tests and for exporting a batch. */
void sft_batch_build_masked(struct train_batch *b, const struct sft_sample *const *s, int ns,
                            int mask_id, double scale, const uint8_t *const *mask,
                            const double *p);
void sft_batch_free(struct train_batch *b);
/* Label tokens (response + pads) of the samples. */
size_t sft_labels(const struct sft_sample *const *s, int ns);

#endif
