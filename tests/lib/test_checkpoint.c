/* test_checkpoint: config.json parsing, defaults and refusals; random tiny checkpoints
 * (single file, sharded, bf16, tied) written and opened again; missing and misshapen tensors;
 * tokenizer files copied.
 *
 * Also a fixture maker for shell tests (the same code dice-sft --init will use):
 *     tests/bin/test_checkpoint mktiny DIR [SEED [NSHARDS [DTYPE [TOKENIZER_DIR]]]]
 * writes a tiny random SDAR checkpoint (config_tiny, vocab 151936 unless DICE_TINY_VOCAB
 * is set) and prints nothing; DTYPE is float32 (default), bfloat16 or float16.
 *     tests/bin/test_checkpoint sums PATH
 * opens a checkpoint folder (checking it against its config) or one .safetensors / index
 * file and prints "name DTYPE [d0,d1] sum" per tensor, sorted by name, sum in float64
 * (tests/gpu/st-compat.sh compares these with what Python reads). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "test.h"
#include "util.h"
#include "tmpdir.h"

static char err[1024];

static int parse(struct model_config *c, const char *json)
{
	return config_parse(c, json, strlen(json), "config.json", err, sizeof err);
}

#define BASE "\"vocab_size\":1000,\"hidden_size\":64,\"num_hidden_layers\":2," \
	"\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16," \
	"\"intermediate_size\":128,\"mask_token_id\":999"
/* BASE less num_key_value_heads and head_dim, with 32 heads */
#define BARE "\"vocab_size\":1000,\"hidden_size\":64,\"num_hidden_layers\":2," \
	"\"num_attention_heads\":32,\"intermediate_size\":128,\"mask_token_id\":999"

static void expect_cfg_error(const char *what, const char *json, const char *needle)
{
	struct model_config c;
	int rc = parse(&c, json);

	if (!CHECK(rc < 0 && strstr(err, needle), what))
		printf("#   rc %d, err: %s\n", rc, err);
}

static void test_config(void)
{
	struct model_config c, d;
	char *p;

	CHECK(parse(&c, "{" BARE "}") == 0, "minimal config parses");
	CHECK(c.head_dim == 128 && c.num_kv_heads == 32 && c.block_size == 4 &&
	      c.rope_theta == 10000.0f && c.rms_norm_eps == 1e-6f && !c.tie_word_embeddings &&
	      c.max_position_embeddings == 32768 && c.eos_token_id == -1 &&
	      c.dtype == DICE_BF16 && !strcmp(c.model_type, "sdar"),
	      "defaults are transformers' Qwen3Config's: head_dim 128 (not C/NH), NKV 32, "
	      "theta 10000, eps 1e-6, untied; ours: block 4, bf16");
	CHECK(parse(&c, "{" BARE ",\"num_attention_heads\":8,\"num_key_value_heads\":null,"
	            "\"tie_word_embeddings\":null}") == 0 &&
	      c.num_kv_heads == 8 && c.head_dim == 128 && !c.tie_word_embeddings,
	      "num_key_value_heads null is num_attention_heads; tie null is absent");
	expect_cfg_error("head_dim null (transformers 5 refuses it, 4 cannot build the attention)",
	                 "{" BASE ",\"head_dim\":null}",
	                 "'head_dim' is null: transformers builds no model from it (give it, or "
	                 "leave it out for 128)");
	expect_cfg_error("NKV absent, 32 not dividing NH", "{" BARE ",\"num_attention_heads\":4}",
	                 "'num_key_value_heads' missing (transformers then takes 32, not a divisor "
	                 "of num_attention_heads 4)");
	CHECK(parse(&c, "{\"vocab_size\":151936,\"hidden_size\":64,\"num_hidden_layers\":1,"
	            "\"num_attention_heads\":4,\"num_key_value_heads\":4,"
	            "\"intermediate_size\":8}") == 0 &&
	      c.mask_token_id == 151669, "default mask_token_id 151669");
	CHECK(parse(&c, "{" BASE ",\"model_type\":\"qwen3\",\"num_key_value_heads\":2,"
	            "\"head_dim\":32,\"eos_token_id\":[7,8],\"bos_token_id\":null,"
	            "\"torch_dtype\":\"float32\",\"tie_word_embeddings\":true,\"rope_scaling\":null,"
	            "\"hidden_act\":\"silu\",\"attention_bias\":false,\"block_size\":8}") == 0 &&
	      c.num_kv_heads == 2 && c.head_dim == 32 && c.eos_token_id == 7 &&
	      c.bos_token_id == -1 && c.dtype == DICE_F32 && c.tie_word_embeddings &&
	      c.block_size == 8 && !strcmp(c.model_type, "qwen3"), "explicit fields, eos list");
	CHECK(parse(&c, "{" BASE ",\"dtype\":\"float16\"}") == 0 && c.dtype == DICE_F16,
	      "newer 'dtype' key");
	CHECK(parse(&c, "{" BASE ",\"torch_dtype\":null,\"dtype\":\"float16\"}") == 0 &&
	      c.dtype == DICE_F16, "a null torch_dtype is absent: 'dtype' is read");
	CHECK(parse(&c, "{" BASE ",\"rope_parameters\":{\"rope_theta\":5000.0,"
	            "\"rope_type\":\"default\"},\"pad_token_id\":null}") == 0 &&
	      c.rope_theta == 5000.0f && c.pad_token_id == -1, "transformers 5 rope_parameters");
	expect_cfg_error("rope_parameters yarn", "{" BASE ",\"rope_parameters\":{\"rope_type\":"
	                 "\"yarn\",\"rope_theta\":1e6}}", "only rope_type \"default\"");
	expect_cfg_error("missing hidden_size", "{\"vocab_size\":10,\"num_hidden_layers\":1}",
	                 "config.json: missing 'hidden_size'");
	expect_cfg_error("string where an integer belongs", "{" BASE ",\"head_dim\":\"16\"}",
	                 "'head_dim' must be an integer");
	expect_cfg_error("model_type llama", "{" BASE ",\"model_type\":\"llama\"}",
	                 "model_type 'llama' not supported");
	expect_cfg_error("rope_scaling", "{" BASE ",\"rope_scaling\":{\"type\":\"yarn\"}}",
	                 "'rope_scaling'");
	expect_cfg_error("attention_bias", "{" BASE ",\"attention_bias\":true}", "'attention_bias'");
	expect_cfg_error("gelu", "{" BASE ",\"hidden_act\":\"gelu\"}", "'hidden_act'");
	expect_cfg_error("NH not a multiple of NKV", "{" BASE ",\"num_key_value_heads\":3}",
	                 "not a multiple of num_key_value_heads 3");
	expect_cfg_error("odd head_dim", "{" BASE ",\"head_dim\":15}", "head_dim 15 must be even");
	expect_cfg_error("zero layers", "{" BASE ",\"num_hidden_layers\":0}",
	                 "'num_hidden_layers' must be positive");
	expect_cfg_error("mask id outside vocab", "{\"vocab_size\":1000,\"hidden_size\":64,"
	                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
	                 "\"num_key_value_heads\":4,\"intermediate_size\":8}",
	                 "'mask_token_id' 151669 outside the vocabulary");
	expect_cfg_error("unknown torch_dtype", "{" BASE ",\"torch_dtype\":\"int8\"}",
	                 "torch_dtype 'int8' not supported");
	expect_cfg_error("unknown dtype, named as written", "{" BASE ",\"dtype\":\"int8\"}",
	                 ": dtype 'int8' not supported");
	expect_cfg_error("torch_dtype not a string", "{" BASE ",\"torch_dtype\":16}",
	                 "'torch_dtype' must be a string");
	/* RoPE as transformers 4 and 5 read it */
	CHECK(parse(&c, "{" BASE ",\"rope_parameters\":{\"rope_type\":\"default\"}}") == 0 &&
	      c.rope_theta == 10000.0f, "rope_parameters without rope_theta: 10000");
	CHECK(parse(&c, "{" BASE ",\"rope_theta\":1e6,\"rope_parameters\":{\"rope_theta\":1e6,"
	            "\"rope_type\":\"default\"}}") == 0 && c.rope_theta == 1e6f,
	      "rope_theta in both places, the same");
	CHECK(parse(&c, "{" BASE ",\"rope_theta\":5e5,\"rope_parameters\":{\"type\":"
	            "\"default\"}}") == 0 && c.rope_theta == 5e5f,
	      "top-level rope_theta where rope_parameters has none");
	expect_cfg_error("rope_theta in both places, different", "{" BASE ",\"rope_theta\":1e6,"
	                 "\"rope_parameters\":{\"rope_theta\":1e4}}",
	                 "'rope_theta' 1e+06 and 'rope_parameters' rope_theta 10000 differ");
	expect_cfg_error("rope_parameters old key 'type' yarn", "{" BASE ",\"rope_parameters\":"
	                 "{\"type\":\"yarn\",\"factor\":4}}", "only rope_type \"default\"");
	expect_cfg_error("rope_parameters per layer type", "{" BASE ",\"rope_parameters\":"
	                 "{\"full_attention\":{\"rope_type\":\"default\",\"rope_theta\":1e6}}}",
	                 "only rope_type \"default\"");
	expect_cfg_error("partial RoPE in rope_parameters", "{" BASE ",\"rope_parameters\":"
	                 "{\"rope_theta\":1e6,\"partial_rotary_factor\":0.5}}",
	                 "'partial_rotary_factor': 0.5 is not supported");
	expect_cfg_error("partial RoPE at the top", "{" BASE ",\"partial_rotary_factor\":0.25}",
	                 "'partial_rotary_factor': 0.25 is not supported");
	CHECK(parse(&c, "{" BASE ",\"partial_rotary_factor\":1.0,\"rope_scaling\":{}}") == 0,
	      "partial_rotary_factor 1, rope_scaling {}");
	CHECK(parse(&c, "{" BASE ",\"rope_scaling\":{\"rope_type\":\"default\"}}") == 0,
	      "rope_scaling of rope_type default");
	/* default RoPE ignores the dict's other members, in rope_scaling as in rope_parameters
	 * (transformers warns of them and leaves them out) */
	CHECK(parse(&c, "{" BASE ",\"rope_theta\":5e5,\"rope_scaling\":{\"type\":\"default\","
	            "\"factor\":2}}") == 0 && c.rope_theta == 5e5f,
	      "rope_scaling default with a factor: the factor ignored");
	CHECK(parse(&c, "{" BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"factor\":2,"
	            "\"rope_theta\":5e5}}") == 0 && c.rope_theta == 5e5f,
	      "rope_parameters default with a factor: the same");
	CHECK(parse(&c, "{" BASE ",\"rope_theta\":5e5,\"rope_scaling\":{\"rope_type\":"
	            "\"default\",\"rope_theta\":5e5}}") == 0 && c.rope_theta == 5e5f,
	      "rope_scaling's rope_theta, the top-level one");
	expect_cfg_error("rope_scaling's rope_theta, not the one transformers 4 reads",
	                 "{" BASE ",\"rope_scaling\":{\"rope_type\":\"default\","
	                 "\"rope_theta\":1e6}}", "'rope_scaling' rope_theta 1e+06: transformers 4 "
	                 "ignores it for the default 10000, 5 reads it");
	expect_cfg_error("partial RoPE in rope_scaling", "{" BASE ",\"rope_scaling\":"
	                 "{\"rope_type\":\"default\",\"partial_rotary_factor\":0.5}}",
	                 "'partial_rotary_factor': 0.5 is not supported");
	expect_cfg_error("rope_scaling linear", "{" BASE ",\"rope_scaling\":{\"rope_type\":"
	                 "\"linear\",\"factor\":2}}", "'rope_scaling': {\"rope_type\":\"linear\","
	                 "\"factor\":2} is not supported (only rope_type \"default\")");
	expect_cfg_error("rope_scaling not an object", "{" BASE ",\"rope_scaling\":\"default\"}",
	                 "'rope_scaling': \"default\" is not supported");
	expect_cfg_error("rope_scaling beside rope_parameters", "{" BASE ",\"rope_scaling\":"
	                 "{\"rope_type\":\"default\"},\"rope_parameters\":{\"rope_theta\":1e6}}",
	                 "both 'rope_scaling' and 'rope_parameters'");
	/* what changes the math is refused; what does not, ignored */
	CHECK(parse(&c, "{" BASE ",\"layer_types\":[\"full_attention\",\"full_attention\"],"
	            "\"use_sliding_window\":false,\"sliding_window\":4096,"
	            "\"max_window_layers\":1,\"quantization_config\":null,\"hidden_act\":null,"
	            "\"attention_dropout\":0.1,\"use_qk_norm\":true}") == 0,
	      "harmless fields: full-attention layer_types, sliding_window unused, dropout");
	expect_cfg_error("a sliding layer", "{" BASE ",\"layer_types\":[\"full_attention\","
	                 "\"sliding_attention\"]}",
	                 "'layer_types'[1]: \"sliding_attention\" is not supported");
	expect_cfg_error("layer_types too short", "{" BASE ",\"layer_types\":[\"full_attention\"]}",
	                 "one type per layer (num_hidden_layers 2)");
	expect_cfg_error("quantized weights", "{" BASE ",\"quantization_config\":{\"quant_method\":"
	                 "\"fp8\"}}", "'quantization_config': {\"quant_method\":\"fp8\"} is not");
	expect_cfg_error("a byte-order mark inside", "{\xEF\xBB\xBF" BASE "}", "config.json:1:");
	expect_cfg_error("bad JSON", "{" BASE, "config.json:1:");
	expect_cfg_error("not an object", "[]", "not a JSON object");
	expect_cfg_error("tie not boolean", "{" BASE ",\"tie_word_embeddings\":1}",
	                 "must be true or false");
	expect_cfg_error("rope_theta past float range", "{" BASE ",\"rope_theta\":1e300}",
	                 "'rope_theta' must be a number within float range");
	expect_cfg_error("huge integer", "{" BASE ",\"head_dim\":99999999999}", "must be an integer");

	/* write -> load round trip */
	config_tiny(&c, 300);
	c.rope_theta = 10000.0f;
	c.rms_norm_eps = 1e-5f;
	p = tmpdir_path("config.json");
	CHECK(config_write(&c, p, err, sizeof err) == 0, "config_write");
	CHECK(config_load(&d, p, err, sizeof err) == 0 && !memcmp(&c, &d, sizeof c),
	      "config round trip is exact");
	{
		char *text = util_read_file(p, NULL);
		CHECK(text && strstr(text, "\"rms_norm_eps\": 1e-5") &&
		      strstr(text, "\"SDARForCausalLM\""), "floats written short, architectures set");
		free(text);
	}
	free(p);
	tmpdir_write("bom.json", "\xEF\xBB\xBF{" BASE "}");
	p = tmpdir_path("bom.json");
	CHECK(config_load(&d, p, err, sizeof err) == 0 && d.hidden_size == 64,
	      "a config.json an editor saved with a byte-order mark");
	free(p);
	CHECK(config_load(&d, "/nonexistent/config.json", err, sizeof err) < 0 &&
	      strstr(err, "cannot read"), "missing config.json");
	config_tiny(&c, 151936);
	CHECK(config_nparams(&c) == 151936 * 64 * 2 + 64 +
	      2 * (2 * 64 + 2 * 16 + 64 * 64 * 2 + 32 * 64 * 2 + 3 * 128 * 64), "config_nparams");
}

static int same_bytes(const struct checkpoint *a, const struct checkpoint *b)
{
	for (size_t i = 0; i < a->st.ntensors; i++) {
		const struct st_tensor *x = &a->st.tensors[i];
		const struct st_tensor *y = safetensors_find(&b->st, x->name);
		if (!y || y->nbytes != x->nbytes || memcmp(x->data, y->data, x->nbytes))
			return 0;
	}
	return a->st.ntensors == b->st.ntensors;
}

static void test_roundtrip(void)
{
	struct model_config c;
	struct model_init o;
	struct checkpoint a, b;
	char *d1 = tmpdir_path("one"), *d2 = tmpdir_path("sharded"), *d3 = tmpdir_path("again"), *d4 = tmpdir_path("seed2");
	const float *q;

	config_tiny(&c, 300);
	model_init_defaults(&o);
	o.seed = 42;
	o.norm_jitter = 0.1f;
	CHECK(checkpoint_init_random(d1, &c, &o, err, sizeof err) == 0, "init random (one file)");
	o.nshards = 3;
	CHECK(checkpoint_init_random(d2, &c, &o, err, sizeof err) == 0, "init random (3 shards)");
	o.nshards = 1;
	CHECK(checkpoint_init_random(d3, &c, &o, err, sizeof err) == 0, "same seed again");
	if (checkpoint_open(&a, d1, err, sizeof err) < 0) {
		CHECK(0, "open single-file checkpoint");
		printf("# %s\n", err);
		return;
	}
	CHECK(a.cfg.hidden_size == 64 && a.w.nlayers == 2 && a.st.ntensors == 3 + 2 * 11,
	      "opened: config and 25 tensors");
	CHECK(a.w.embed.p && a.w.embed.dt == DICE_F32 && a.w.lm_head.p &&
	      a.w.lm_head.p != a.w.embed.p && a.w.final_norm.p, "embed, untied lm_head, norm bound");
	q = a.w.layers[1].q_norm.p;
	CHECK(q && q[0] != 1.0f && q[0] > 0.5f && q[0] < 1.5f, "norm weights near 1 (jittered)");
	{
		int all = 1;
		for (int l = 0; l < 2; l++) {
			const struct wref *r = &a.w.layers[l].input_norm;
			for (int j = 0; j < 11; j++)
				all &= r[j].p != NULL && r[j].dt == DICE_F32;
		}
		CHECK(all, "all 22 layer tensors bound");
	}
	CHECK_STR(safetensors_meta(&a.st, "format"), "pt", "weights carry format pt");
	CHECK(checkpoint_open(&b, d2, err, sizeof err) == 0, "open sharded checkpoint");
	CHECK(b.st.nfiles == 3 && same_bytes(&a, &b), "sharded holds the same bytes");
	{
		char *s1 = xasprintf("%s/model-00001-of-00003.safetensors", d2);
		CHECK(access(s1, F_OK) == 0, "shard file names model-0000k-of-0000n");
		free(s1);
	}
	checkpoint_close(&b);
	CHECK(checkpoint_open(&b, d3, err, sizeof err) == 0 && same_bytes(&a, &b),
	      "same seed, same weights");
	checkpoint_close(&b);
	o.seed = 43;
	CHECK(checkpoint_init_random(d4, &c, &o, err, sizeof err) == 0 &&
	      checkpoint_open(&b, d4, err, sizeof err) == 0 && !same_bytes(&a, &b),
	      "another seed, other weights");
	checkpoint_close(&b);

	/* rewrite the sharded one as a single file: the stale index must go */
	CHECK(checkpoint_write(d2, &a.cfg, &a.w, 1, NULL, err, sizeof err) == 0, "rewrite as one");
	CHECK(checkpoint_open(&b, d2, err, sizeof err) == 0 && b.st.nfiles == 1 &&
	      same_bytes(&a, &b), "stale index removed, single file read");
	checkpoint_close(&b);
	checkpoint_close(&a);
	free(d1);
	free(d2);
	free(d3);
	free(d4);
}

static void test_variants(void)
{
	struct model_config c;
	struct model_init o;
	struct checkpoint a;
	char *d = tmpdir_path("bf16"), *tok = tmpdir_path("tok"), *tf;

	config_tiny(&c, 200);
	c.dtype = DICE_BF16;
	c.tie_word_embeddings = 1;
	model_init_defaults(&o);
	CHECK(mkdir(tok, 0755) == 0, "tokenizer folder");
	tmpdir_write("tok/tokenizer.json", "{\"model\":{}}\n");
	tmpdir_write("tok/tokenizer_config.json", "{}\n");
	o.tokenizer_dir = tok;
	CHECK(checkpoint_init_random(d, &c, &o, err, sizeof err) == 0, "bf16 tied checkpoint");
	CHECK(checkpoint_open(&a, d, err, sizeof err) == 0, "open it");
	CHECK(a.w.embed.dt == DICE_BF16 && a.w.lm_head.p == a.w.embed.p &&
	      !safetensors_find(&a.st, "lm_head.weight") && a.st.ntensors == 24,
	      "tied: lm_head is the embedding, no lm_head tensor written");
	CHECK(dice_bf16_to_f32(((const uint16_t *)a.w.layers[0].post_norm.p)[3]) == 1.0f,
	      "norms exactly 1 without jitter");
	checkpoint_close(&a);
	tf = xasprintf("%s/tokenizer.json", d);
	{
		char *text = util_read_file(tf, NULL);
		CHECK(text && !strcmp(text, "{\"model\":{}}\n"), "tokenizer.json copied");
		free(text);
	}
	free(tf);
	o.tokenizer_dir = tmpdir;
	CHECK(checkpoint_init_random(d, &c, &o, err, sizeof err) < 0 &&
	      strstr(err, "no tokenizer files"), "tokenizer folder without files is an error");
	free(d);
	free(tok);
}

/* Rewrite dir/model.safetensors: its tensors less drop (or NULL), plus add (or NULL) with
 * the dtype, shape and data of the tensor like. 0 or -1. */
static int rewrite(const char *dir, const char *drop, const char *add, const char *like)
{
	char *path = xasprintf("%s/model.safetensors", dir);
	struct safetensors st;
	struct st_wtensor *wt;
	size_t n = 0;
	int rc = -1;

	if (safetensors_open(&st, path, err, sizeof err) < 0) {
		free(path);
		return -1;
	}
	wt = xcalloc(st.ntensors + 1, sizeof *wt);
	for (size_t i = 0; i <= st.ntensors; i++) {
		const struct st_tensor *t = i < st.ntensors ? &st.tensors[i] :
		                            add ? safetensors_find(&st, like) : NULL;
		if (!t || (i < st.ntensors && drop && !strcmp(t->name, drop)))
			continue;
		wt[n] = (struct st_wtensor){ .name = i < st.ntensors ? t->name : add,
		                             .dtype = t->dtype, .ndim = t->ndim, .data = t->data };
		memcpy(wt[n].shape, t->shape, sizeof t->shape);
		n++;
	}
	if (!add || n == st.ntensors + (drop ? 0 : 1))
		rc = safetensors_write(path, wt, n, NULL, 0, err, sizeof err);
	free(wt);
	safetensors_close(&st);
	free(path);
	return rc;
}

static void test_broken(void)
{
	struct model_config c;
	struct model_init o;
	struct checkpoint a;
	char *d = tmpdir_path("broken"), *p;

	config_tiny(&c, 100);
	model_init_defaults(&o);
	CHECK(checkpoint_init_random(d, &c, &o, err, sizeof err) == 0, "base for broken cases");
	p = xasprintf("%s/config.json", d);

	c.num_layers = 3;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.2.input_layernorm.weight' missing") &&
	      strstr(err, "model.safetensors"), "missing tensor named with the file");

	CHECK(strstr(err, "(the config needs it; num_hidden_layers is 3, the weights have 2 "
	             "layers)") != NULL, "a missing layer names num_hidden_layers");

	c.num_layers = 2;
	c.intermediate_size = 96;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64], "
	             "the config needs [96, 64] (intermediate_size 96)"),
	      "wrong shape named with both shapes and the config field");

	c.intermediate_size = 128;
	c.head_dim = 32;                        /* q_proj [64, 64] would fit 2 heads of 32 */
	c.num_heads = 2;
	c.num_kv_heads = 1;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.0.self_attn.q_norm.weight' has shape [16], the "
	             "config needs [32] (head_dim 32)"), "a wrong head_dim is named as such");
	c.head_dim = 16;
	c.num_heads = 8;
	c.num_kv_heads = 2;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.0.self_attn.q_proj.weight' has shape [64, 64], the "
	             "config needs [128, 64] (num_attention_heads 8 x head_dim 16)"),
	      "a wrong number of heads is named as such");
	c.num_heads = 4;

	c.num_layers = 1;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.1.input_layernorm.weight' is past "
	             "num_hidden_layers 1 (the weights have 2 layers)"),
	      "layers past num_hidden_layers are an error, not dropped");

	c.num_layers = 2;
	c.tie_word_embeddings = 1;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tie_word_embeddings is true, but 'lm_head.weight' differs from "
	             "'model.embed_tokens.weight'"),
	      "tied config over a different lm_head.weight: an error");
	CHECK(rewrite(d, "lm_head.weight", "lm_head.weight", "model.embed_tokens.weight") == 0 &&
	      checkpoint_open(&a, d, err, sizeof err) == 0 && a.w.lm_head.p == a.w.embed.p,
	      "tied config over an lm_head.weight equal to the embedding: taken");
	if (a.dir)
		checkpoint_close(&a);
	c.tie_word_embeddings = 0;
	config_write(&c, p, err, sizeof err);
	CHECK(checkpoint_open(&a, d, err, sizeof err) == 0, "the same untied");
	if (a.dir)
		checkpoint_close(&a);
	CHECK(rewrite(d, "lm_head.weight", NULL, NULL) == 0 &&
	      checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'lm_head.weight' missing (the config needs it; "
	             "tie_word_embeddings is false)"), "no lm_head, untied: names the field");
	c.tie_word_embeddings = 1;
	config_write(&c, p, err, sizeof err);

	CHECK(rewrite(d, NULL, "model.layers.0.self_attn.q_proj.bias",
	              "model.layers.0.self_attn.q_norm.weight") == 0 &&
	      checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "tensor 'model.layers.0.self_attn.q_proj.bias' has no place in the model "
	             "config.json describes (no biases"), "a bias in the weights: an error");
	CHECK(rewrite(d, "model.layers.0.self_attn.q_proj.bias",
	              "model.layers.0.self_attn.rotary_emb.inv_freq",
	              "model.layers.0.self_attn.q_norm.weight") == 0 &&
	      rewrite(d, NULL, "mtp.norm.weight", "model.norm.weight") == 0 &&
	      checkpoint_open(&a, d, err, sizeof err) == 0,
	      "a rotary buffer and a tensor outside the model: ignored (a note on stderr)");
	if (a.dir)
		checkpoint_close(&a);
	CHECK(rewrite(d, NULL, "model.layers.0.mlp.gate_proj.weight_scale",
	              "model.norm.weight") == 0 && checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "'model.layers.0.mlp.gate_proj.weight_scale' has no place"),
	      "an unknown tensor of the model's modules: an error");

	unlink(p);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 && strstr(err, "config.json"),
	      "missing config.json");
	c.tie_word_embeddings = 0;
	config_write(&c, p, err, sizeof err);
	free(p);
	p = xasprintf("%s/model.safetensors", d);
	unlink(p);
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 &&
	      strstr(err, "no model.safetensors or model.safetensors.index.json"),
	      "missing weights");
	tmpdir_write("broken/model.safetensors", "garbage!garbage");
	CHECK(checkpoint_open(&a, d, err, sizeof err) < 0 && strstr(err, "model.safetensors: "),
	      "corrupt weights file");
	free(p);
	free(d);
}

static int mktiny(int argc, char **argv)
{
	struct model_config c;
	struct model_init o;
	long seed = 1, shards = 1, vocab = 151936;
	const char *v = getenv("DICE_TINY_VOCAB");

	if (argc < 3)
		return 2;
	if ((v && parse_long(v, 16, 1 << 24, &vocab) < 0) ||
	    (argc > 3 && parse_long(argv[3], 0, 1L << 62, &seed) < 0) ||
	    (argc > 4 && parse_long(argv[4], 1, 1000, &shards) < 0))
		return 2;
	config_tiny(&c, (int)vocab);
	if (vocab > 151669) {
		c.mask_token_id = 151669;
		c.eos_token_id = c.pad_token_id = 151643;
	}
	if (argc > 5 && config_dtype_parse(argv[5], &c.dtype) < 0)
		return 2;
	model_init_defaults(&o);
	o.seed = (uint64_t)seed;
	o.nshards = (int)shards;
	o.norm_jitter = 0.1f;
	o.tokenizer_dir = argc > 6 ? argv[6] : NULL;
	if (checkpoint_init_random(argv[2], &c, &o, err, sizeof err) < 0) {
		fprintf(stderr, "test_checkpoint: %s\n", err);
		return 1;
	}
	return 0;
}

static float elem(const struct st_tensor *t, size_t i)
{
	switch (t->dtype) {
	case DICE_BF16: return dice_bf16_to_f32(((const uint16_t *)t->data)[i]);
	case DICE_F16: return dice_f16_to_f32(((const uint16_t *)t->data)[i]);
	default: return ((const float *)t->data)[i];
	}
}

static int sums(const char *path)
{
	struct checkpoint ck;
	struct safetensors st, *s = &st;
	struct stat sb;
	int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);

	if (dir ? checkpoint_open(&ck, path, err, sizeof err) : safetensors_open(&st, path, err,
	                                                                         sizeof err)) {
		fprintf(stderr, "test_checkpoint: %s\n", err);
		return 1;
	}
	if (dir)
		s = &ck.st;
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct st_tensor *t = &s->tensors[i];
		double sum = 0;

		for (size_t j = 0; j < t->nelem; j++)
			sum += elem(t, j);
		printf("%s %s [", t->name, safetensors_dtype_name(t->dtype));
		for (int d = 0; d < t->ndim; d++)
			printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
		printf("] %.17g\n", sum);
	}
	for (size_t i = 0; i < s->nmeta; i++)
		printf("__metadata__ %s=%s\n", s->meta[2 * i], s->meta[2 * i + 1]);
	if (dir)
		checkpoint_close(&ck);
	else
		safetensors_close(&st);
	return 0;
}

/* the random init fills chunks of 2^20 values from generators of their own: one thread or
 * three give the same file, and two chunks of one tensor differ */
static void test_init_threads(void)
{
	struct model_config c;
	struct model_init o;
	char *d1 = tmpdir_path("thr1"), *d3 = tmpdir_path("thr3");
	char f1[4096], f3[4096];
	size_t n1 = 0, n3 = 0;

	config_tiny(&c, 20000);                 /* embed 20000 x 64: two chunks */
	model_init_defaults(&o);
	o.seed = 7;
	o.threads = 1;
	CHECK(checkpoint_init_random(d1, &c, &o, err, sizeof err) == 0, "init, one thread");
	o.threads = 3;
	CHECK(checkpoint_init_random(d3, &c, &o, err, sizeof err) == 0, "init, three threads");
	snprintf(f1, sizeof f1, "%s/model.safetensors", d1);
	snprintf(f3, sizeof f3, "%s/model.safetensors", d3);
	char *a = util_read_file(f1, &n1), *b = util_read_file(f3, &n3);
	CHECK(a && b && n1 == n3 && !memcmp(a, b, n1), "same weights whatever the thread count");
	free(a);
	free(b);
	struct checkpoint ck;
	if (checkpoint_open(&ck, d1, err, sizeof err) < 0) {
		CHECK(0, "open the threaded checkpoint");
		free(d1);
		free(d3);
		return;
	}
	const float *e = ck.w.embed.p;
	size_t chunk = (size_t)1 << 20;
	CHECK(e && memcmp(e, e + chunk, 64 * sizeof *e) != 0, "chunks draw different values");
	double sum = 0, sq = 0;
	for (size_t i = 0; i < (size_t)20000 * 64; i++) {
		sum += e[i];
		sq += (double)e[i] * e[i];
	}
	double mean = sum / (20000.0 * 64), sd = sqrt(sq / (20000.0 * 64) - mean * mean);
	CHECK(fabs(mean) < 1e-3 && fabs(sd - 0.02) < 1e-3, "embedding ~ N(0, 0.02^2)");
	checkpoint_close(&ck);
	free(d1);
	free(d3);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "mktiny"))
		return mktiny(argc, argv);
	if (argc > 2 && !strcmp(argv[1], "sums"))
		return sums(argv[2]);
	if (tmpdir_make("dice-test-ckpt") < 0)
		return 1;
	test_config();
	test_roundtrip();
	test_init_threads();
	test_variants();
	test_broken();
	tmpdir_remove();
	return test_done();
}
