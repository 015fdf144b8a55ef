/* config: read, validate and write config.json for SDAR/Qwen3 checkpoints. See config.h. */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomfile.h"
#include "config.h"
#include "errmsg.h"
#include "jsonl.h"
#include "util.h"

/* transformers' Qwen3Config defaults (4.5x and 5) where ours once differed */
#define QWEN3_KV_HEADS 32
#define QWEN3_HEAD_DIM 128
#define QWEN3_ROPE_THETA 10000.0f

static const char *const dtype_names[] = {
	[DICE_F32] = "float32",
	[DICE_BF16] = "bfloat16",
	[DICE_F16] = "float16",
};

int config_dtype_parse(const char *s, enum dice_dtype *out)
{
	for (size_t i = 0; i < ARRAY_LEN(dtype_names); i++) {
		if (!strcmp(s, dtype_names[i])) {
			*out = (enum dice_dtype)i;
			return 0;
		}
	}
	return -1;
}

int config_dtype_arg(const char *s, enum dice_dtype *out)
{
	static const char *const short_names[] = {
		[DICE_F32] = "fp32",
		[DICE_BF16] = "bf16",
		[DICE_F16] = "fp16",
	};

	for (size_t i = 0; i < ARRAY_LEN(short_names); i++) {
		if (!strcmp(s, short_names[i])) {
			*out = (enum dice_dtype)i;
			return 0;
		}
	}
	return config_dtype_parse(s, out);
}

const char *config_dtype_name(enum dice_dtype dt)
{
	return (size_t)dt < ARRAY_LEN(dtype_names) ? dtype_names[dt] : "?";
}

void config_defaults(struct model_config *c)
{
	memset(c, 0, sizeof *c);
	c->max_position_embeddings = 32768;
	c->rope_theta = QWEN3_ROPE_THETA;
	c->rms_norm_eps = 1e-6f;
	c->tie_word_embeddings = 0;
	c->block_size = 4;
	c->mask_token_id = 151669;
	c->bos_token_id = c->eos_token_id = c->pad_token_id = -1;
	c->dtype = DICE_BF16;
	strcpy(c->model_type, "sdar");
}

/* An integer field: absent leaves *out; 0 or -1 after a message. */
static int get_int(json_t *root, const char *key, int *out, int required, const char *name,
                   char *err, size_t errlen)
{
	json_t *v = json_get_set(root, key);         /* null: absent */

	if (!v) {
		if (!required)
			return 0;
		errmsg_set(err, errlen, "%s: missing '%s'", name, key);
		return -1;
	}
	if (json_is_array(v) && json_array_size(v) > 0)   /* eos_token_id: [a, b] */
		v = json_array_get(v, 0);
	if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
	    json_integer_value(v) > INT_MAX) {
		errmsg_set(err, errlen, "%s: '%s' must be an integer", name, key);
		return -1;
	}
	*out = (int)json_integer_value(v);
	return 0;
}

static int get_float(json_t *root, const char *key, float *out, const char *name, char *err,
                     size_t errlen)
{
	json_t *v = json_get_set(root, key);

	if (!v)
		return 0;
	if (!json_is_number(v) || fabs(json_number_value(v)) > FLT_MAX) {
		errmsg_set(err, errlen, "%s: '%s' must be a number within float range", name, key);
		return -1;
	}
	*out = (float)json_number_value(v);
	return 0;
}

/* A rope dict (rope_scaling, transformers 4; rope_parameters, 5) that asks for plain RoPE:
 * rope_type (or its old name "type") "default" or absent, and no member that is itself an
 * object (one dict per layer type). 1 when it does. */
static int rope_default(json_t *v)
{
	const char *key;
	json_t *m;

	json_object_foreach(v, key, m) {
		if ((!strcmp(key, "rope_type") || !strcmp(key, "type")) &&
		    (!json_is_string(m) || strcmp(json_string_value(m), "default")))
			return 0;
		if (json_is_object(m))
			return 0;
	}
	return 1;
}

/* Refuse a field whose value asks for something we do not implement. */
static int refuse(json_t *root, const char *key, const char *name, char *err, size_t errlen)
{
	json_t *v = json_get_set(root, key);
	int bad;

	if (!v)
		return 0;
	if (!strcmp(key, "hidden_act"))
		bad = !json_is_string(v) || strcmp(json_string_value(v), "silu");
	else if (!strcmp(key, "partial_rotary_factor"))   /* RoPE over part of a head */
		bad = !json_is_number(v) || json_number_value(v) != 1.0;
	else if (!strcmp(key, "quantization_config"))     /* weights we cannot read */
		bad = 1;
	else
		bad = !json_is_false(v);
	if (bad) {
		char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		errmsg_set(err, errlen, "%s: '%s': %.200s is not supported", name, key, s ? s : "?");
		free(s);
		return -1;
	}
	return 0;
}

/* layer_types (transformers >= 4.53): one "full_attention" per layer, as Qwen3Config builds
 * it when sliding windows are off; anything else is a model we do not build. */
static int check_layer_types(json_t *root, int nlayers, const char *name, char *err,
                             size_t errlen)
{
	json_t *v = json_get_set(root, "layer_types"), *t;
	size_t i;

	if (!v)
		return 0;
	if (!json_is_array(v) || json_array_size(v) != (size_t)nlayers) {
		errmsg_set(err, errlen, "%s: 'layer_types' must list one type per layer "
		           "(num_hidden_layers %d)", name, nlayers);
		return -1;
	}
	json_array_foreach(v, i, t) {
		if (!json_is_string(t) || strcmp(json_string_value(t), "full_attention")) {
			char *s = json_dumps(t, JSON_ENCODE_ANY | JSON_COMPACT);
			errmsg_set(err, errlen, "%s: 'layer_types'[%zu]: %.100s is not supported "
			           "(only \"full_attention\")", name, i, s ? s : "?");
			free(s);
			return -1;
		}
	}
	return 0;
}

/* RoPE as transformers 4 and 5 read it. The dict, rope_scaling (4) or rope_parameters (5,
 * which takes a rope_scaling given in its place), must ask for plain RoPE; its other members
 * but rope_theta and partial_rotary_factor change nothing there (transformers warns of them
 * and computes default RoPE without them), so they are ignored here too. rope_theta: top
 * level (4) or in the dict (5, which takes a top-level one only where the dict has none);
 * absent from both: 10000, the default of both versions. Where the versions would build
 * different models (a rope_theta in the dict that is not the one 4 reads), neither is
 * chosen. */
static int get_rope(json_t *root, float *theta, const char *name, char *err, size_t errlen)
{
	json_t *rp = json_get_set(root, "rope_parameters");
	json_t *rs = json_get_set(root, "rope_scaling");
	const char *key = rp ? "rope_parameters" : "rope_scaling";
	float top = 0, in = 0;
	int has_top = json_is_number(json_object_get(root, "rope_theta"));

	if (get_float(root, "rope_theta", &top, name, err, errlen))
		return -1;
	if (has_top)
		*theta = top;
	if (json_is_object(rs) && !json_object_size(rs))
		rs = NULL;                              /* {}: none */
	if (rp && rs) {                         /* transformers 5 would take rope_scaling */
		errmsg_set(err, errlen, "%s: both 'rope_scaling' and 'rope_parameters' given", name);
		return -1;
	}
	json_t *d = rp ? rp : rs;
	if (!d)
		return 0;
	if (!json_is_object(d) || !rope_default(d)) {
		char *s = json_dumps(d, JSON_ENCODE_ANY | JSON_COMPACT);
		errmsg_set(err, errlen, "%s: '%s': %.200s is not supported (only rope_type "
		           "\"default\")", name, key, s ? s : "?");
		free(s);
		return -1;
	}
	if (refuse(d, "partial_rotary_factor", name, err, errlen) ||
	    get_float(d, "rope_theta", &in, name, err, errlen))
		return -1;
	if (!json_is_number(json_object_get(d, "rope_theta")))
		return 0;
	if (rs && in != (has_top ? top : QWEN3_ROPE_THETA)) {
		errmsg_set(err, errlen, "%s: 'rope_scaling' rope_theta %g: transformers 4 ignores "
		           "it for %s %g, 5 reads it", name, (double)in,
		           has_top ? "'rope_theta'" : "the default", has_top ? (double)top :
		           (double)QWEN3_ROPE_THETA);
		return -1;
	}
	if (has_top && in != top) {
		errmsg_set(err, errlen, "%s: 'rope_theta' %g and 'rope_parameters' rope_theta %g "
		           "differ (transformers 4 reads the first, 5 the second)", name,
		           (double)top, (double)in);
		return -1;
	}
	*theta = in;
	return 0;
}

int config_parse(struct model_config *c, const char *text, size_t len, const char *name,
                 char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb(text, len, 0, &jerr), *v;
	const char *key;
	int rc = -1;

	config_defaults(c);
	if (!root || !json_is_object(root)) {
		if (root)
			errmsg_set(err, errlen, "%s: not a JSON object", name);
		else
			errmsg_set(err, errlen, "%s:%d: %s", name, jerr.line, jerr.text);
		goto out;
	}
	v = json_object_get(root, "model_type");
	if (v) {
		const char *mt = json_is_string(v) ? json_string_value(v) : "";
		if (strcmp(mt, "sdar") && strcmp(mt, "qwen3")) {
			errmsg_set(err, errlen, "%s: model_type '%s' not supported (sdar, qwen3)", name, mt);
			goto out;
		}
		strcpy(c->model_type, mt);
	}
	if (get_int(root, "vocab_size", &c->vocab_size, 1, name, err, errlen) ||
	    get_int(root, "hidden_size", &c->hidden_size, 1, name, err, errlen) ||
	    get_int(root, "num_hidden_layers", &c->num_layers, 1, name, err, errlen) ||
	    get_int(root, "num_attention_heads", &c->num_heads, 1, name, err, errlen) ||
	    get_int(root, "intermediate_size", &c->intermediate_size, 1, name, err, errlen))
		goto out;
	/* transformers' Qwen3Config: num_key_value_heads absent is 32, null is
	 * num_attention_heads; head_dim absent is 128 (not hidden_size / num_attention_heads),
	 * null no model: 5 refuses it (an int field), 4 keeps None and its attention cannot be
	 * built (only its RoPE would fall back to hidden_size / num_attention_heads) */
	if (json_is_null(json_object_get(root, "head_dim"))) {
		errmsg_set(err, errlen, "%s: 'head_dim' is null: transformers builds no model from "
		           "it (give it, or leave it out for %d)", name, QWEN3_HEAD_DIM);
		goto out;
	}
	v = json_object_get(root, "num_key_value_heads");
	c->num_kv_heads = !v ? QWEN3_KV_HEADS : c->num_heads;
	c->head_dim = QWEN3_HEAD_DIM;
	if (get_int(root, "num_key_value_heads", &c->num_kv_heads, 0, name, err, errlen) ||
	    get_int(root, "head_dim", &c->head_dim, 0, name, err, errlen) ||
	    get_int(root, "max_position_embeddings", &c->max_position_embeddings, 0, name, err,
	            errlen) ||
	    get_int(root, "block_size", &c->block_size, 0, name, err, errlen) ||
	    get_int(root, "mask_token_id", &c->mask_token_id, 0, name, err, errlen) ||
	    get_int(root, "bos_token_id", &c->bos_token_id, 0, name, err, errlen) ||
	    get_int(root, "eos_token_id", &c->eos_token_id, 0, name, err, errlen) ||
	    get_int(root, "pad_token_id", &c->pad_token_id, 0, name, err, errlen) ||
	    get_float(root, "rms_norm_eps", &c->rms_norm_eps, name, err, errlen) ||
	    get_rope(root, &c->rope_theta, name, err, errlen))
		goto out;
	if (!v && c->num_kv_heads > 0 && c->num_heads > 0 && c->num_heads % c->num_kv_heads) {
		errmsg_set(err, errlen, "%s: 'num_key_value_heads' missing (transformers then takes "
		           "%d, not a divisor of num_attention_heads %d): give it", name,
		           QWEN3_KV_HEADS, c->num_heads);
		goto out;
	}
	v = json_get_set(root, "tie_word_embeddings");
	if (v && !json_is_boolean(v)) {
		errmsg_set(err, errlen, "%s: 'tie_word_embeddings' must be true or false", name);
		goto out;
	}
	c->tie_word_embeddings = v && json_is_true(v);
	key = "torch_dtype";    /* transformers 5 writes "dtype" */
	v = json_get_set(root, key);
	if (!v)
		v = json_get_set(root, key = "dtype");
	if (v && !json_is_string(v)) {
		errmsg_set(err, errlen, "%s: '%s' must be a string (bfloat16, float16, float32)",
		           name, key);
		goto out;
	}
	if (v && config_dtype_parse(json_string_value(v), &c->dtype) < 0) {
		errmsg_set(err, errlen, "%s: %s '%s' not supported (bfloat16, float16, float32)",
		           name, key, json_string_value(v));
		goto out;
	}
	if (refuse(root, "partial_rotary_factor", name, err, errlen) ||
	    refuse(root, "attention_bias", name, err, errlen) ||
	    refuse(root, "hidden_act", name, err, errlen) ||
	    refuse(root, "use_sliding_window", name, err, errlen) ||
	    refuse(root, "quantization_config", name, err, errlen) ||
	    check_layer_types(root, c->num_layers, name, err, errlen))
		goto out;
	rc = config_validate(c, name, err, errlen);
out:
	json_decref(root);
	return rc;
}

int config_load(struct model_config *c, const char *path, char *err, size_t errlen)
{
	size_t len;
	char *text = util_read_file(path, &len);
	int rc;

	if (!text) {
		config_defaults(c);
		errmsg_set(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		return -1;
	}
	const char *t = util_text(text, &len, 0);       /* a byte-order mark an editor saved */
	rc = config_parse(c, t, len, path, err, errlen);
	free(text);
	return rc;
}

int config_validate(const struct model_config *c, const char *name, char *err, size_t errlen)
{
	static const struct { const char *key; size_t off; } pos[] = {
		{ "vocab_size", offsetof(struct model_config, vocab_size) },
		{ "hidden_size", offsetof(struct model_config, hidden_size) },
		{ "num_hidden_layers", offsetof(struct model_config, num_layers) },
		{ "num_attention_heads", offsetof(struct model_config, num_heads) },
		{ "num_key_value_heads", offsetof(struct model_config, num_kv_heads) },
		{ "head_dim", offsetof(struct model_config, head_dim) },
		{ "intermediate_size", offsetof(struct model_config, intermediate_size) },
		{ "max_position_embeddings", offsetof(struct model_config, max_position_embeddings) },
		{ "block_size", offsetof(struct model_config, block_size) },
	};
	static const struct { const char *key; size_t off; } ids[] = {
		{ "mask_token_id", offsetof(struct model_config, mask_token_id) },
		{ "bos_token_id", offsetof(struct model_config, bos_token_id) },
		{ "eos_token_id", offsetof(struct model_config, eos_token_id) },
		{ "pad_token_id", offsetof(struct model_config, pad_token_id) },
	};

	for (size_t i = 0; i < ARRAY_LEN(pos); i++) {
		int v = *(const int *)((const char *)c + pos[i].off);
		if (v <= 0) {
			errmsg_set(err, errlen, "%s: '%s' must be positive (is %d)", name, pos[i].key, v);
			return -1;
		}
	}
	for (size_t i = 0; i < ARRAY_LEN(ids); i++) {
		int v = *(const int *)((const char *)c + ids[i].off);
		if (v < -1 || v >= c->vocab_size || (i == 0 && v < 0)) {
			errmsg_set(err, errlen, "%s: '%s' %d outside the vocabulary (0..%d)", name,
			           ids[i].key, v, c->vocab_size - 1);
			return -1;
		}
	}
	if (c->num_heads % c->num_kv_heads) {
		errmsg_set(err, errlen, "%s: num_attention_heads %d is not a multiple of "
		           "num_key_value_heads %d", name, c->num_heads, c->num_kv_heads);
		return -1;
	}
	if (c->head_dim % 2) {
		errmsg_set(err, errlen, "%s: head_dim %d must be even (RoPE)", name, c->head_dim);
		return -1;
	}
	if (!(c->rope_theta > 0) || !(c->rms_norm_eps > 0)) {
		errmsg_set(err, errlen, "%s: rope_theta and rms_norm_eps must be positive", name);
		return -1;
	}
	/* every tensor's element count fits comfortably in size_t and int arithmetic */
	if ((double)c->vocab_size * c->hidden_size > (double)INT64_MAX / 8 ||
	    (double)c->num_heads * c->head_dim > INT_MAX ||
	    (double)c->intermediate_size * c->hidden_size > (double)INT64_MAX / 8) {
		errmsg_set(err, errlen, "%s: sizes too large", name);
		return -1;
	}
	return 0;
}

size_t config_nparams(const struct model_config *c)
{
	size_t C = (size_t)c->hidden_size, HD = (size_t)c->head_dim, I = (size_t)c->intermediate_size;
	size_t layer = 2 * C + 2 * HD + (size_t)c->num_heads * HD * C * 2 +
	               (size_t)c->num_kv_heads * HD * C * 2 + 3 * I * C;

	return (size_t)c->vocab_size * C * (c->tie_word_embeddings ? 1 : 2) +
	       (size_t)c->num_layers * layer + C;
}

/* Fewest %g digits that give f back as a float (1e-06, not 9.99999997e-07). */
static int float_digits(float f)
{
	char s[64];

	for (int p = 1; p < 9; p++) {
		snprintf(s, sizeof s, "%.*g", p, (double)f);
		if (strtof(s, NULL) == f)
			return p;
	}
	return 9;
}

int config_write(const struct model_config *c, const char *path, char *err, size_t errlen)
{
	int digits = float_digits(c->rope_theta);
	int sdar = !strcmp(c->model_type, "sdar");
	json_t *o = json_object();
	char *text;
	int rc;

	if (float_digits(c->rms_norm_eps) > digits)
		digits = float_digits(c->rms_norm_eps);
	json_object_set_new(o, "architectures",
	                    json_pack("[s]", sdar ? "SDARForCausalLM" : "Qwen3ForCausalLM"));
	json_object_set_new(o, "model_type", json_string(c->model_type));
	json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
	json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
	json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
	json_object_set_new(o, "num_attention_heads", json_integer(c->num_heads));
	json_object_set_new(o, "num_key_value_heads", json_integer(c->num_kv_heads));
	json_object_set_new(o, "head_dim", json_integer(c->head_dim));
	json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
	json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
	json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
	json_object_set_new(o, "rope_scaling", json_null());
	json_object_set_new(o, "rms_norm_eps", json_real(c->rms_norm_eps));
	json_object_set_new(o, "hidden_act", json_string("silu"));
	json_object_set_new(o, "attention_bias", json_false());
	json_object_set_new(o, "attention_dropout", json_real(0));
	json_object_set_new(o, "use_sliding_window", json_false());
	json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
	json_object_set_new(o, "block_size", json_integer(c->block_size));
	json_object_set_new(o, "mask_token_id", json_integer(c->mask_token_id));
	if (c->bos_token_id >= 0)
		json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
	if (c->eos_token_id >= 0)
		json_object_set_new(o, "eos_token_id", json_integer(c->eos_token_id));
	if (c->pad_token_id >= 0)
		json_object_set_new(o, "pad_token_id", json_integer(c->pad_token_id));
	json_object_set_new(o, "torch_dtype", json_string(config_dtype_name(c->dtype)));
	text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(digits));
	json_decref(o);
	{
		size_t n = strlen(text);
		text = xrealloc(text, n + 2);
		strcpy(text + n, "\n");
	}
	rc = atomfile_write(path, text, strlen(text), err, errlen);
	free(text);
	return rc;
}
