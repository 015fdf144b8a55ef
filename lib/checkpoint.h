/* checkpoint: a Hugging Face model directory <-> config + weights (lib/model.h).
 *
 * A checkpoint directory holds config.json, the weights (model.safetensors, or
 * model.safetensors.index.json + model-0000k-of-0000n.safetensors shards) and the tokenizer
 * files. checkpoint_open reads the config (lib/config.h), maps the weights
 * (lib/safetensors.h) and binds struct model_weights: every tensor the config needs must be
 * present with the right shape (names and shapes: SPEC §1.1, checkpoint_tensor_list);
 * dtypes may differ per tensor (BF16/F16/F32, recorded in each wref). With
 * tie_word_embeddings, lm_head is the embedding (an lm_head.weight in the file must then
 * equal it). A wrong shape's message names the config field behind it (head_dim checked
 * before the head counts). A tensor of the model's modules (model.*, lm_head.*) that the
 * config leaves out is an error naming the field (a layer past num_hidden_layers, a bias);
 * rotary inv_freq buffers and tensors outside them are ignored with one note on stderr.
 * The weight views point into the read-only mappings and live until checkpoint_close.
 *
 * checkpoint_write writes the same layout from host weights: config.json, the weights in
 * the HF tensor order (one file, or nshards shards + index), "format": "pt" metadata, and
 * copies of the tokenizer files from another directory. Every file is written atomically;
 * a stale model.safetensors or index of the other layout is removed.
 * checkpoint_init_random makes a random-weight checkpoint from a seed (tests, dice-sft
 * --init): linear and embedding weights ~ N(0, std^2); norm weights 1 + norm_jitter*N(0,1),
 * drawn in chunks of 2^20 values per tensor, each chunk from its own generator seeded by
 * (seed, tensor, chunk), filled by one thread per CPU: the same values whatever the thread
 * count.
 */
#ifndef DICE_CHECKPOINT_H
#define DICE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "safetensors.h"

struct checkpoint {
	char *dir;
	char *weights_path;          /* the .safetensors or .index.json opened */
	struct model_config cfg;
	struct safetensors st;
	struct model_weights w;      /* views into st */
};

/* 0, or -1 with a one-line message naming the file (and field or tensor) in err. */
int checkpoint_open(struct checkpoint *ck, const char *dir, char *err, size_t errlen);
void checkpoint_close(struct checkpoint *ck);

/* One weight the config needs, in Hugging Face order. */
struct ckpt_tensor {
	char name[80];               /* e.g. "model.layers.3.self_attn.q_proj.weight" */
	int ndim;                    /* 1 or 2 */
	int64_t shape[2];            /* (ndim) PyTorch layout (out, in) */
	struct wref *ref;            /* its slot in the model_weights given, or NULL */
};
/* The list for c (xmalloc'ed, *n entries; lm_head left out when tied). When w is not NULL,
 * w->layers is allocated (c->num_layers) if NULL and each ref points into w. */
struct ckpt_tensor *checkpoint_tensor_list(const struct model_config *c,
                                           struct model_weights *w, size_t *n);
/* Bind w to the tensors of st, checking presence and shapes. 0 or -1. w->layers is
 * allocated here; release it with model_weights_free. */
int checkpoint_bind(const struct model_config *c, const struct safetensors *st,
                    struct model_weights *w, char *err, size_t errlen);
void model_weights_free(struct model_weights *w);

/* 1 when dir holds a tokenizer file that checkpoint_write copies (tokenizer.json, vocab.json,
 * ...). */
int checkpoint_has_tokenizer(const char *dir);

/* The tokenizer of dir, loaded the same way by every program that loads a model (dice-sample,
 * dice-sft, dice-rl). opt: the option that named dir as a tokenizer directory (e.g.
 * "--tokenizer"), where one must be; NULL for a model directory, where none is allowed
 * (token-id work). 1: loaded into tok; 0: opt NULL and dir has no tokenizer.json; -1 with a
 * one-line message in err: a tokenizer.json there that does not load (the message names
 * it), or opt's dir without tokenizer files (the message names the option and dir). tok can
 * be given to tokenizer_free whatever the result. */
struct tokenizer;
int checkpoint_load_tokenizer(struct tokenizer *tok, const char *dir, const char *opt,
                              char *err, size_t errlen);

/* Write a checkpoint directory (created if absent, one level). w holds host pointers.
 * nshards <= 1: model.safetensors; else that many shards and the index. tokenizer_dir:
 * copy its tokenizer files (tokenizer.json, tokenizer_config.json, vocab.json,
 * merges.txt, special_tokens_map.json, added_tokens.json, generation_config.json, those
 * present; at least one), or NULL. */
int checkpoint_write(const char *dir, const struct model_config *c,
                     const struct model_weights *w, int nshards, const char *tokenizer_dir,
                     char *err, size_t errlen);

/* 0 when checkpoint_write can write dir: a directory it can write into, or a name it can
 * create in its parent directory (tried: a file made in dir and removed, or dir made and
 * removed); else -1 with a message naming dir in err. For programs that write a checkpoint
 * at the end of long work: check first, not after the work. The calling thread blocks the
 * signals it can between making and removing (a signal then comes after the removal), so
 * a program that calls it before it starts threads leaves nothing behind. */
int checkpoint_dir_writable(const char *dir, char *err, size_t errlen);

/* The save a trainer's state names (dice-sft, dice-rl): checkpoint_write_save writes save
 * (e.g. "step 12") as __metadata__ "dice_save" of the weights (one file), before the trainer
 * writes its state file naming the same save; checkpoint_check_save then tells weights of a
 * save cut short (a crash between the two files) from those the state was written with: 0
 * when dir's weights carry save (or save is NULL: a state from before), else -1 with a
 * message naming the state file in err. */
#define CHECKPOINT_SAVE_KEY "dice_save"
int checkpoint_write_save(const char *dir, const struct model_config *c,
                          const struct model_weights *w, const char *tokenizer_dir,
                          const char *save, char *err, size_t errlen);
int checkpoint_check_save(const char *dir, const char *state, const char *save, char *err,
                          size_t errlen);

struct model_init {
	uint64_t seed;
	float std;                   /* 0.02 */
	float norm_jitter;           /* 0: norms exactly 1 */
	int nshards;                 /* 1 */
	const char *tokenizer_dir;   /* NULL */
	int threads;                 /* 0: one per CPU (the values do not depend on it) */
};
void model_init_defaults(struct model_init *o);
/* Random weights in c->dtype, written with checkpoint_write. 0 or -1. */
int checkpoint_init_random(const char *dir, const struct model_config *c,
                           const struct model_init *o, char *err, size_t errlen);
/* A tiny valid SDAR config for tests: V=vocab (>= 16), C=64, L=2, NH=4, NKV=2, HD=16,
 * I=128, rope_theta 1e6, block 4, mask id vocab-1, eos vocab-2, fp32. */
void config_tiny(struct model_config *c, int vocab);

#endif
