/* model-logits: the engine's side of tests/gpu/model-parity.py (built by tests/gpu/run-model.sh).
 *
 *   model-logits write DIR SEED
 *       write a tiny random checkpoint of SDAR geometry (HD 128, GQA 4:1, untied lm_head) with
 *       our own writer (lib/checkpoint) and random weights (model_weights_random)
 *   model-logits run DIR DEVICE DTYPE OUTDIR G ID...
 *       OUTDIR/prefill.f32  logits (P, V) of the prompt under the block-causal mask
 *       OUTDIR/steps.f32    logits (block, V) of every denoising step of a greedy run
 *                           (the eval preset: static, top-k 1; G new tokens, no stop ids)
 *       OUTDIR/ids.txt      the generated ids, then the committing step of each
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "model.h"
#include "sampler.h"
#include "util.h"

static void dump_step(void *arg, int req, int step, const float *lg, int rows, int V)
{
	fwrite(lg, sizeof *lg, (size_t)rows * V, arg);
}

static int cmd_write(const char *dir, const char *seed)
{
	struct model_config c;
	struct model_weights w;
	char err[512];
	float *mem;

	config_tiny(&c, 1024);
	c.hidden_size = 256, c.num_heads = 8, c.num_kv_heads = 2, c.head_dim = 128;
	c.intermediate_size = 512, c.num_layers = 3, c.rope_theta = 1e6f;
	c.tie_word_embeddings = 0, c.dtype = DICE_F32;
	mem = model_weights_random(&w, &c, strtoull(seed, NULL, 10));
	if (checkpoint_write(dir, &c, &w, 1, NULL, err, sizeof err) < 0)
		die("%s", err);
	free(mem), free(w.layers);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct checkpoint ck;
	struct model m;
	struct sampler_opts o;
	struct sampler_request rq;
	struct sampler_result r;
	struct kvcache kv;
	const struct ops *ops = ops_get(argv[1]);
	enum dice_dtype dt = !strcmp(argv[2], "bf16") ? DICE_BF16 : !strcmp(argv[2], "fp16") ? DICE_F16 : DICE_F32;
	int G = atoi(argv[4]), P = argc - 5, *ids = xmalloc(sizeof(int) * (P + 1));
	char err[512], *path;
	FILE *f;

	if (!ops)
		die("no backend '%s'", argv[1]);
	for (int i = 0; i < P; i++)
		ids[i] = atoi(argv[5 + i]);
	if (checkpoint_open(&ck, argv[0], err, sizeof err) < 0)
		die("%s", err);
	if (model_init(&m, &ck.cfg, &ck.w, ops, dt) < 0)
		die("model_init failed");
	float *lg = xmalloc(sizeof(float) * P * ck.cfg.vocab_size);
	kvcache_init(&kv, &m, P);
	struct model_seq s = { &kv, ids, P, 1, 1 };
	if (model_forward(&m, &s, 1, lg) < 0)
		die("forward failed");
	path = xasprintf("%s/prefill.f32", argv[3]);
	f = fopen(path, "wb");
	fwrite(lg, sizeof *lg, (size_t)P * ck.cfg.vocab_size, f);
	fclose(f);
	free(path);
	kvcache_free(&kv, &m);

	sampler_opts_default(&o);
	sampler_preset(&o, "eval");
	o.max_tokens = G;
	o.mask_id = ck.cfg.mask_token_id;
	path = xasprintf("%s/steps.f32", argv[3]);
	f = fopen(path, "wb");
	o.on_logits = dump_step, o.on_logits_arg = f;
	rq = (struct sampler_request){ ids, P, 0 };
	if (sampler_run(&m, &o, &rq, 1, &r, NULL, NULL) < 0)
		die("sampling failed");
	fclose(f);
	free(path);
	path = xasprintf("%s/ids.txt", argv[3]);
	f = fopen(path, "w");
	for (int i = 0; i < r.n; i++)
		fprintf(f, "%d%c", r.ids[i], i + 1 < r.n ? ' ' : '\n');
	for (int i = 0; i < r.n; i++)
		fprintf(f, "%d%c", r.step[i], i + 1 < r.n ? ' ' : '\n');
	fclose(f);
	fprintf(stderr, "model-logits: %s %s: %d tokens, %d forwards\n", argv[1], argv[2], r.n, r.forwards);
	free(path), free(lg), free(ids);
	sampler_result_free(&r);
	model_free(&m);
	checkpoint_close(&ck);
	return 0;
}

int main(int argc, char **argv)
{
	util_set_progname(argv[0]);
	if (argc == 4 && !strcmp(argv[1], "write"))
		return cmd_write(argv[2], argv[3]);
	if (argc >= 7 && !strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	fprintf(stderr, "usage: model-logits write DIR SEED | run DIR DEVICE DTYPE OUTDIR G ID...\n");
	return 2;
}
