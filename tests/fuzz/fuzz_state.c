/* fuzz_state: libFuzzer target for the trainer state dice-sft resumes from
 * (trainer_state.safetensors: lib/sft_train.c sft_train_resume, lib/optim.c optim_load, and
 * lib/checkpoint.c checkpoint_check_save against the weights' save).
 *
 * At start a tiny model (one layer, vocabulary 16) trains two steps on six samples and saves
 * its checkpoint and state in a temporary folder. An input is the state's safetensors header:
 * a JSON object is a patch of the saved header (a tensor entry replaced, or removed by null;
 * "__metadata__" members set one by one, or removed by null), anything else the header text
 * itself; the file written is that header after its length, then the saved tensor data.
 * Invariants: the state resumes, or fails with a message; resumed, its position is the one
 * the metadata spells in plain decimal ("seed", "samples" those of the run; "epoch" at most
 * 2^30 and "batch" at most the micro-batches of that epoch; "step" that of the optimizer),
 * its noise generator the four hex words of "noise_rng" (not all zero, nothing after them),
 * every moment tensor F32 of its parameter's size; and a training step runs from there.
 * Found: sft_train_resume took a "batch" past its epoch's end, an "epoch" of -1 or 2^32 (as
 * 2^64 - 1, and 0), an all-zero or trailing-junk "noise_rng", a "step" of "+2".
 * Build and run: sh tests/fuzz/run.sh state (seeds: tests/fuzz/seed.py state). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ops.h"
#include "safetensors.h"
#include "sft_train.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], path[128];
static struct model m;
static struct sft_data d;
static struct sft_train st;
static json_t *header;                  /* the saved header */
static char *blob;                      /* the saved tensor data */
static struct model_weights w;          /* the model's start, kept (reachable, no leak) */
static float *wmem;
static size_t nblob;

static void cleanup(void)
{
	static const char *const files[] = { "trainer_state.safetensors", "model.safetensors",
	                                     "config.json" };
	char p[160];

	for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, files[i]);
		unlink(p);
	}
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct model_config c;
	struct sft_opts so = { .block = 4, .pad_id = 14, .max_len = 100, .vocab = 16 };
	struct optim_opts oo;
	struct sft_step step;
	char err[512], *text;
	size_t len;
	uint64_t hlen = 0;

	(void)argc, (void)argv;
	snprintf(dir, sizeof dir, "/tmp/fuzz_state.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	snprintf(path, sizeof path, "%s/%s", dir, SFT_STATE_FILE);
	config_tiny(&c, 16);
	c.num_layers = 1, c.hidden_size = 32, c.head_dim = 8, c.intermediate_size = 32;
	wmem = model_weights_random(&w, &c, 1);
	if (model_init(&m, &c, &w, &ops_cpu, DICE_F32) < 0)
		abort();
	sft_data_init(&d);
	for (int i = 0; i < 6; i++) {
		int p[3] = { 1, 2, 3 + i }, r[2 + i % 3];
		for (int k = 0; k < 2 + i % 3; k++)
			r[k] = 5 + (i + k) % 8;
		if (sft_data_add_ids(&d, p, 3, r, (size_t)(2 + i % 3), &so, err, sizeof err) < 0)
			abort();
	}
	optim_defaults(&oo);
	if (sft_train_init(&st, &m, &d, &oo, 0, 7, 16, 1, 3, 0, 0) < 0)
		abort();
	for (int i = 0; i < 2; i++)
		if (sft_train_step(&st, &step) < 0)
			abort();
	if (sft_train_save(&st, dir, NULL, err, sizeof err) < 0) {
		fprintf(stderr, "fuzz_state: %s\n", err);
		abort();
	}
	text = util_read_file(path, &len);
	if (!text || len < 8)
		abort();
	for (int i = 0; i < 8; i++)
		hlen |= (uint64_t)(unsigned char)text[i] << (8 * i);
	if (!(header = json_loadb(text + 8, (size_t)hlen, 0, NULL)))
		abort();
	nblob = len - 8 - (size_t)hlen;
	blob = xmalloc(nblob);
	memcpy(blob, text + 8 + hlen, nblob);
	free(text);
	return 0;
}

/* the header of an input: the saved one patched, or the input itself */
static char *header_of(const uint8_t *data, size_t size, size_t *len)
{
	json_t *patch = json_loadb((const char *)data, size, 0, NULL), *h, *v, *meta;
	const char *k;
	char *s;

	if (!json_is_object(patch)) {
		json_decref(patch);
		s = xmalloc(size + 1);
		memcpy(s, data, size);
		*len = size;
		return s;
	}
	h = json_deep_copy(header);
	json_object_foreach(patch, k, v) {
		if (!strcmp(k, "__metadata__") && json_is_object(v) &&
		    json_is_object(meta = json_object_get(h, k))) {
			const char *mk;
			json_t *mv;
			json_object_foreach(v, mk, mv) {
				if (json_is_null(mv))
					json_object_del(meta, mk);
				else
					json_object_set(meta, mk, mv);
			}
		} else if (json_is_null(v)) {
			json_object_del(h, k);
		} else {
			json_object_set(h, k, v);
		}
	}
	s = json_dumps(h, JSON_COMPACT);
	*len = strlen(s);
	json_decref(h);
	json_decref(patch);
	return s;
}

/* s is a plain decimal number (the digits the writer prints): 0 with *v, else -1 */
static int decimal(const char *s, uint64_t *v)
{
	*v = 0;
	if (!s || !*s || strspn(s, "0123456789") != strlen(s))
		return -1;
	while (s[0] == '0' && s[1])     /* leading zeros change nothing */
		s++;
	if (strlen(s) > 19)
		return -1;
	for (; *s; s++)
		*v = 10 * *v + (uint64_t)(*s - '0');
	return 0;
}

/* the four words of noise_rng */
static int rng_words(const char *s, uint64_t w[4])
{
	for (int i = 0; i < 4; i++) {
		size_t n = strspn(s, "0123456789abcdefABCDEF");
		if (!n || n > 16)
			return -1;
		w[i] = strtoull(s, NULL, 16);
		s += n;
		if (i < 3 && *s++ != ' ')
			return -1;
	}
	return *s || !(w[0] | w[1] | w[2] | w[3]) ? -1 : 0;
}

static void check_resumed(void)
{
	struct safetensors sf;
	char err[512];
	uint64_t seed, samples, epoch, batch, step, w[4];

	if (safetensors_open(&sf, path, err, sizeof err) < 0)
		abort();        /* sft_train_resume opened it */
	if (decimal(safetensors_meta(&sf, "seed"), &seed) || seed != st.seed ||
	    decimal(safetensors_meta(&sf, "samples"), &samples) || samples != d.n ||
	    decimal(safetensors_meta(&sf, "epoch"), &epoch) || epoch > 1u << 30 ||
	    (uint64_t)st.epoch != epoch ||
	    decimal(safetensors_meta(&sf, "batch"), &batch) || batch != st.batch ||
	    st.batch > st.nbatch ||
	    decimal(safetensors_meta(&sf, "step"), &step) || step != (uint64_t)st.op.step ||
	    !safetensors_meta(&sf, "noise_rng") || rng_words(safetensors_meta(&sf, "noise_rng"), w) ||
	    memcmp(w, st.noise.s, sizeof w))
		abort();
	for (size_t i = 0; i < st.op.npar; i++)
		for (int k = 0; k < 2; k++) {
			char name[160];
			snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg",
			         st.op.par[i].name);
			const struct st_tensor *t = safetensors_find(&sf, name);
			if (!t || t->dtype != DICE_F32 || t->nelem != st.op.par[i].n)
				abort();
		}
	safetensors_close(&sf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the run's position before the input: a resume that fails may have set some of it */
	static int init, step0;
	static struct rng noise0;
	struct sft_step step;
	size_t hlen;
	char *h = header_of(data, size, &hlen), err[512], len8[8];
	FILE *f;

	if (!init) {
		step0 = st.op.step;
		noise0 = st.noise;
		init = 1;
	}
	st.op.step = step0;
	st.epoch = 0;
	st.batch = 0;
	st.noise = noise0;
	for (int i = 0; i < 8; i++)
		len8[i] = (char)((uint64_t)hlen >> (8 * i));
	if (!(f = fopen(path, "wb")) || fwrite(len8, 1, 8, f) != 8 || fwrite(h, 1, hlen, f) != hlen ||
	    fwrite(blob, 1, nblob, f) != nblob || fclose(f))
		abort();
	free(h);
	err[0] = '\0';
	if (sft_train_resume(&st, dir, err, sizeof err) < 0) {
		if (!err[0])
			abort();
		return 0;
	}
	check_resumed();
	if (sft_train_more(&st) && sft_train_step(&st, &step) < 0)
		abort();
	return 0;
}
