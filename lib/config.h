/* config: a checkpoint's config.json <-> struct model_config (lib/model.h), SPEC §1.1.
 *
 * Read: model_type "sdar" or "qwen3" (absent: "sdar"); required: vocab_size, hidden_size,
 * num_hidden_layers, num_attention_heads, intermediate_size. A field given as null is
 * absent. Defaults when absent are transformers' Qwen3Config's (4.5x and 5; SDAR's config
 * class copies them): num_key_value_heads 32 (null: num_attention_heads; 32 not dividing
 * num_attention_heads is an error naming the field), head_dim 128, rope_theta 10000,
 * max_position_embeddings 32768, rms_norm_eps 1e-6, tie_word_embeddings false; ours:
 * block_size 4, mask_token_id 151669, bos/eos/pad -1, torch_dtype (or "dtype") bfloat16.
 * eos_token_id may be a list (its first id is kept).
 * rope_theta may also sit in transformers 5's "rope_parameters" (rope_type "default");
 * given in both places with different values it is refused. Features the engine does not
 * implement are refused, not ignored: rope_scaling other than null, {} or rope_type
 * "default"; rope_parameters of another rope_type or per layer type; partial_rotary_factor
 * other than 1; attention_bias true; hidden_act other than silu; use_sliding_window true;
 * layer_types other than all "full_attention"; quantization_config. Harmless fields
 * (sliding_window and max_window_layers with sliding windows off, attention_dropout,
 * use_cache, torch_dtype against the tensors' own dtypes, ...) are ignored.
 * Validation: positive sizes, NH a multiple of NKV, even head_dim, token ids < vocab_size.
 * Errors are one line naming the file and the field.
 * Write: the same fields, plus architectures, so transformers can read the file
 * (model_type qwen3 -> Qwen3ForCausalLM, sdar -> SDARForCausalLM).
 */
#ifndef DICE_CONFIG_H
#define DICE_CONFIG_H

#include <stddef.h>

#include "model.h"

/* SDAR defaults; the required sizes are 0 (invalid) until set. */
void config_defaults(struct model_config *c);
/* Parse config.json at path into c (defaults first, then validation), the file read as
 * util_text reads one (a UTF-8 byte-order mark at its start skipped). 0 or -1. */
int config_load(struct model_config *c, const char *path, char *err, size_t errlen);
/* The same from a JSON text (no byte-order mark); name is used in messages. */
int config_parse(struct model_config *c, const char *text, size_t len, const char *name,
                 char *err, size_t errlen);
int config_validate(const struct model_config *c, const char *name, char *err, size_t errlen);
/* Write c as config.json to path (atomically). 0 or -1. */
int config_write(const struct model_config *c, const char *path, char *err, size_t errlen);
/* Number of parameters (counting a tied lm_head once). */
size_t config_nparams(const struct model_config *c);
/* "bfloat16", "float16", "float32" <-> dtype; -1 for an unknown name. */
int config_dtype_parse(const char *s, enum dice_dtype *out);
/* a --dtype argument: bf16, fp16 or fp32, or a config name (bfloat16, float16, float32) */
int config_dtype_arg(const char *s, enum dice_dtype *out);
const char *config_dtype_name(enum dice_dtype dt);

#endif
