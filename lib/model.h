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

#include "ops.h"

struct model_config {
	int vocab_size;              /* V   (151936 for SDAR) */
	int hidden_size;             /* C */
	int num_layers;              /* L   (num_hidden_layers) */
	int num_heads;               /* NH  (num_attention_heads) */
	int num_kv_heads;            /* NKV (num_key_value_heads) */
	int head_dim;                /* HD  (head_dim, else C / NH) */
	int intermediate_size;       /* I */
	int max_position_embeddings;
	float rope_theta;            /* 1e6 */
	float rms_norm_eps;          /* 1e-6 */
	int tie_word_embeddings;     /* SDAR: 0 (separate lm_head) */
	int block_size;              /* config "block_size", default 4 */
	int mask_token_id;           /* config "mask_token_id", default 151669 */
	int bos_token_id, eos_token_id, pad_token_id;   /* -1 when absent */
	enum dice_dtype dtype;       /* torch_dtype */
	char model_type[32];         /* "sdar" or "qwen3" */
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

#endif
