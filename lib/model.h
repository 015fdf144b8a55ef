/* model: the SDAR transformer (Qwen3 geometry, SPEC §1): config, weights, forward.
 *
 * CONTRACT shared by the checkpoint code (lib/config.c, lib/safetensors.c, lib/checkpoint.c:
 * config.json -> struct model_config; safetensors -> struct model_weights) and the engine
 * (lib/model.c: forward/backward written once against lib/ops.h). Implementations may add
 * fields and functions but keep these.
 *
 * Weights are borrowed views (an mmap of the checkpoint, or one backend allocation) carved
 * into named pointers; each carries its dtype. Layout is PyTorch's: Linear weight (out, in).
 */
#ifndef DICE_MODEL_H
#define DICE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

struct model_config {
	int vocab_size;              /* V   (151936 for SDAR) */
	int hidden_size;             /* C */
	int num_layers;              /* L   (num_hidden_layers) */
	int num_heads;               /* NH  (num_attention_heads) */
	int num_kv_heads;            /* NKV (num_key_value_heads) */
	int head_dim;                /* HD  (head_dim, default 128) */
	int intermediate_size;       /* I */
	int max_position_embeddings;
	float rope_theta;            /* default 10000 (Qwen3Config); Qwen3 and SDAR checkpoints 1e6 */
	float rms_norm_eps;          /* 1e-6 */
	int tie_word_embeddings;     /* SDAR: 0 (separate lm_head) */
	int block_size;              /* config "block_size", default 4 */
	int mask_token_id;           /* config "mask_token_id", default 151669 */
	int bos_token_id, eos_token_id, pad_token_id;   /* -1 when absent */
	enum dice_dtype dtype;       /* torch_dtype */
	char model_type[32];         /* "sdar" or "qwen3" */
	enum dice_dtype kv_dtype;    /* KV cache elements: fp32 (0) unless model_init chose the
	                              * matrices' bf16/fp16 on a GPU backend */
};

struct wref {
	const void *p;               /* NULL when absent */
	enum dice_dtype dt;
};

struct layer_weights {
	struct wref input_norm;      /* (C) */
	struct wref q_proj;          /* (NH*HD, C) */
	struct wref k_proj;          /* (NKV*HD, C) */
	struct wref v_proj;          /* (NKV*HD, C) */
	struct wref o_proj;          /* (C, NH*HD) */
	struct wref q_norm;          /* (HD) */
	struct wref k_norm;          /* (HD) */
	struct wref post_norm;       /* (C)  post_attention_layernorm */
	struct wref gate_proj;       /* (I, C) */
	struct wref up_proj;         /* (I, C) */
	struct wref down_proj;       /* (C, I) */
};

struct model_weights {
	struct wref embed;           /* (V, C)  model.embed_tokens.weight */
	struct layer_weights *layers;/* (L) */
	struct wref final_norm;      /* (C)  model.norm.weight */
	struct wref lm_head;         /* (V, C)  == embed when tied */
	int nlayers;
};

/* ------------------------------------------------------------------ the runtime model
 *
 * struct model holds a config, the weights on a backend (one ops->alloc, carved into the
 * views of `w`; matrices in the chosen dtype, norm vectors in fp32) and the forward's scratch
 * (grown on demand, never freed on the hot path). A struct kvcache per sequence holds K and V
 * of every layer for the positions 0..len-1 ("committed"); the slots len..cap-1 are scratch
 * that a forward without store overwrites.
 *
 * model_forward runs several sequences in one pass: their rows are packed (N = sum of T) for
 * every matrix product; attention (one .attention_kv call per layer for all sequences) sees
 * each sequence's cache plus its own new rows under the block-causal rule of lib/ops.h (blocks of cfg.block_size aligned to position 0).
 * The new rows of a sequence sit at positions kv->len .. kv->len+T-1. Rows of different
 * sequences never interact, so a sequence's results do not depend on its batch (bitwise on
 * the CPU backend).
 */
struct kvcache {
	int cap;                     /* positions it can hold */
	int len;                     /* committed positions */
	void *k, *v;                 /* (L, cap, NKV, HD) backend memory of cfg.kv_dtype */
};

struct model_seq {                   /* one sequence's part of a forward */
	struct kvcache *kv;
	const int *ids;              /* (T) host token ids at positions kv->len .. kv->len+T-1 */
	const int *ids_dev;          /* or NULL: (T) the ids in backend memory, as they are once
	                              * the work queued before the forward is done (ids unread;
	                              * the caller vouches they are within the vocabulary) */
	int T;
	int store;                   /* 1: the new K/V become committed (kv->len += T) */
	int logits;                  /* 1: logits of rows logits_from..T-1 are wanted */
	int commit_rows;             /* without store: this many leading rows are committed */
	int logits_from;             /* first row whose logits are wanted (0) */
	unsigned logits_skip;        /* bit j: row logits_from + j wants none after all (0) */
};

/* Forwards of up to MODEL_GRAPH_ROWS rows in MODEL_GRAPH_SEQS sequences are replayed as CUDA
 * graphs (ops->replay), one per shape: what the rows of each sequence are and which want
 * logits (logits_skip aside: a caller that varies it keeps to larger forwards). */
#define MODEL_GRAPH_ROWS 64
/* Forwards of up to MODEL_X16_ROWS rows pass the products 16-bit copies of their inputs where
 * the backend makes them (ops->add_rmsnorm16 and the like; DICE_X16=0: never): the same bits */
#define MODEL_X16_ROWS 8
#define MODEL_GRAPH_SEQS 16

struct model {
	struct model_config cfg;
	struct model_weights w;      /* views into wbuf (backend memory) */
	const struct ops *ops;
	enum dice_dtype dtype;       /* dtype of the matrices on the backend */
	void *wbuf;
	size_t wbytes;               /* bytes of wbuf */
	/* scratch (backend memory unless _h) */
	int rows, lrows;             /* capacities: rows, logit rows */
	float *x, *xn, *q, *k, *v, *att, *tmp, *gate, *up, *hsel, *logits, *qkv;
	int *ids_d, *pos_d;          /* views into meta_d */
	int *ids_h, *pos_h;          /* views into meta_h */
	void *meta_d, *meta_h;       /* one upload per forward: ids, pos, the struct kv_batch arrays */
	size_t meta_cap;
	int fuse_qkv, fuse_gu;       /* q/k/v (gate/up) matrices adjacent: one product each */
	int packed;                  /* matrices with a packed copy (model_pack) */
	void *x16[2];                /* (MODEL_X16_ROWS rows) the few-row products' inputs in 16
	                              * bits (ops->matmul_fixed16): the norms' outputs; the
	                              * attention's or the SwiGLU's */
	int lazy;                    /* 1: model_forward returns without waiting for the device
	                              * when it copies no logits to the host (the caller's next
	                              * sync point, e.g. the sample op, waits); 0 after model_init */
};

/* Copy host weights (any dtype) to the backend, converting matrices to dt (norms to fp32).
 * lm_head falls back to embed when cfg->tie_word_embeddings or lm_head.p is NULL.
 * 0, or -1 with a warning (missing tensor, bad geometry). */
int model_init(struct model *m, const struct model_config *cfg, const struct model_weights *host,
               const struct ops *ops, enum dice_dtype dt);
void model_free(struct model *m);
/* Copies of the 16-bit matrices in the layout the backend's products of few rows stream
 * fastest (ops->pack; CUDA: forwards of up to MODEL_PACK_ROWS rows, the same bits), for a
 * caller whose forwards are that small (the sampler at one sequence). Made once, all or none:
 * none where the backend has no such layout, the matrices are fp32, DICE_PACK=0, or they
 * would leave less than a quarter of the GPU's memory free. Returns the matrices packed (0:
 * none). model_unpack (and model_free) frees them. */
#define MODEL_PACK_ROWS 32
int model_pack(struct model *m);
/* the backend memory model_pack would take now (0: it would make nothing) */
size_t model_pack_bytes(const struct model *m);
/* model_pack where a caller's forwards have at most rows rows (else as it is) */
int model_pack_for(struct model *m, long rows);
void model_unpack(struct model *m);
/* Bytes of weights one forward reads (layers + lm_head), for the floors of benchmarks. */
size_t model_weight_bytes(const struct model_config *cfg, enum dice_dtype dt);

/* Random fp32 host weights for tests and benchmarks (seeded; uniform with std 1/sqrt(in) for
 * matrices, 1 for embeddings, 1 + 0.1 x for norms, x of unit variance). Fills w (w->layers allocated) and
 * returns the one allocation holding the values; free it and w->layers. */
float *model_weights_random(struct model_weights *w, const struct model_config *cfg, uint64_t seed);

/* bytes of a cache of cap positions, with elements of cfg->kv_dtype (pass &m->cfg) */
size_t kvcache_bytes(const struct model_config *cfg, int cap);
/* a cache of cap positions in backend memory; -1 (nothing held) where the backend is full */
int kvcache_init(struct kvcache *kv, const struct model *m, int cap);
void kvcache_free(struct kvcache *kv, const struct model *m);

/* One forward over nseq sequences. logits (host, may be NULL when no sequence wants them):
 * (R, V) for the R rows that want them (of the sequences with .logits, rows logits_from..T-1
 * less those in logits_skip), in sequence and row order.
 * A forward can end one block and start the next: rows [block b | block b+1] with
 * commit_rows = block commits block b (its queries cannot see block b+1 under the mask rule,
 * so its K/V are those of a forward of block b alone, bitwise on the CPU).
 * Forwards of up to 64 rows in up to 16 sequences (decoding steps) go through ops->replay
 * where the backend has it (CUDA graphs: the second forward of the same shapes is captured,
 * later ones replay it), with the same results.
 * Returns when the device is done (unless m->lazy and logits NULL).
 * 0, or -1 with a warning (cache full, bad ids). */
int model_forward(struct model *m, const struct model_seq *seqs, int nseq, float *logits);

#endif
