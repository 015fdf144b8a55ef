/* checkpoint: open/bind and write Hugging Face checkpoint directories, and random init.
 * See checkpoint.h. The tensor list (names, shapes, slots) is built in one place,
 * checkpoint_tensor_list, and used by the binder, the writer and the random init.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomfile.h"
#include "checkpoint.h"
#include "config.h"
#include "errmsg.h"
#include "rng.h"
#include "tokenizer.h"
#include "util.h"

/* ---------------------------------------------------------------- the tensor list */

enum dim { D_C, D_Q, D_KV, D_HD, D_I, D_V };

static int64_t dim_of(const struct model_config *c, enum dim d)
{
	switch (d) {
	case D_C: return c->hidden_size;
	case D_Q: return (int64_t)c->num_heads * c->head_dim;
	case D_KV: return (int64_t)c->num_kv_heads * c->head_dim;
	case D_HD: return c->head_dim;
	case D_I: return c->intermediate_size;
	case D_V: return c->vocab_size;
	}
	return 0;
}

static const struct {
	const char *suffix;
	size_t off;                  /* in struct layer_weights */
	int ndim;
	enum dim d0, d1;
} layer_tensors[] = {
	{ "input_layernorm.weight", offsetof(struct layer_weights, input_norm), 1, D_C, D_C },
	{ "self_attn.q_proj.weight", offsetof(struct layer_weights, q_proj), 2, D_Q, D_C },
	{ "self_attn.k_proj.weight", offsetof(struct layer_weights, k_proj), 2, D_KV, D_C },
	{ "self_attn.v_proj.weight", offsetof(struct layer_weights, v_proj), 2, D_KV, D_C },
	{ "self_attn.o_proj.weight", offsetof(struct layer_weights, o_proj), 2, D_C, D_Q },
	{ "self_attn.q_norm.weight", offsetof(struct layer_weights, q_norm), 1, D_HD, D_HD },
	{ "self_attn.k_norm.weight", offsetof(struct layer_weights, k_norm), 1, D_HD, D_HD },
	{ "post_attention_layernorm.weight", offsetof(struct layer_weights, post_norm), 1, D_C, D_C },
	{ "mlp.gate_proj.weight", offsetof(struct layer_weights, gate_proj), 2, D_I, D_C },
	{ "mlp.up_proj.weight", offsetof(struct layer_weights, up_proj), 2, D_I, D_C },
	{ "mlp.down_proj.weight", offsetof(struct layer_weights, down_proj), 2, D_C, D_I },
};

static void set_entry(struct ckpt_tensor *t, const char *name, int ndim, int64_t d0,
                      int64_t d1, struct wref *ref)
{
	snprintf(t->name, sizeof t->name, "%s", name);
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim > 1 ? d1 : 0;
	t->ref = ref;
}

struct ckpt_tensor *checkpoint_tensor_list(const struct model_config *c,
                                           struct model_weights *w, size_t *n)
{
	size_t L = (size_t)c->num_layers, k = 0;
	struct ckpt_tensor *t = xcalloc(3 + L * ARRAY_LEN(layer_tensors), sizeof *t);
	char name[80];

	if (w && !w->layers) {
		w->layers = xcalloc(L ? L : 1, sizeof *w->layers);
		w->nlayers = c->num_layers;
	}
	set_entry(&t[k++], "model.embed_tokens.weight", 2, c->vocab_size, c->hidden_size,
	          w ? &w->embed : NULL);
	for (size_t l = 0; l < L; l++) {
		for (size_t j = 0; j < ARRAY_LEN(layer_tensors); j++) {
			snprintf(name, sizeof name, "model.layers.%zu.%s", l, layer_tensors[j].suffix);
			set_entry(&t[k++], name, layer_tensors[j].ndim, dim_of(c, layer_tensors[j].d0),
			          dim_of(c, layer_tensors[j].d1),
			          w ? (struct wref *)((char *)&w->layers[l] + layer_tensors[j].off) : NULL);
		}
	}
	set_entry(&t[k++], "model.norm.weight", 1, c->hidden_size, 0, w ? &w->final_norm : NULL);
	if (!c->tie_word_embeddings)
		set_entry(&t[k++], "lm_head.weight", 2, c->vocab_size, c->hidden_size,
		          w ? &w->lm_head : NULL);
	*n = k;
	return t;
}

void model_weights_free(struct model_weights *w)
{
	free(w->layers);
	memset(w, 0, sizeof *w);
}

/* ---------------------------------------------------------------- binding */

static void shape_str(char *s, size_t n, int ndim, const int64_t *shape)
{
	size_t k = (size_t)snprintf(s, n, "[");

	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(s + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
	if (k < n)
		snprintf(s + k, n - k, "]");
}

/* The dimensions of list entry name (its layer_tensors row, or the embedding's, lm_head's,
 * the final norm's). */
static void entry_dims(const char *name, enum dim *d0, enum dim *d1)
{
	const char *dot = strncmp(name, "model.layers.", 13) ? NULL : strchr(name + 13, '.');

	*d0 = D_V;
	*d1 = D_C;
	if (!strcmp(name, "model.norm.weight"))
		*d0 = D_C;
	for (size_t j = 0; dot && j < ARRAY_LEN(layer_tensors); j++) {
		if (!strcmp(dot + 1, layer_tensors[j].suffix)) {
			*d0 = layer_tensors[j].d0;
			*d1 = layer_tensors[j].d1;
		}
	}
}

/* "hidden_size 64", "num_attention_heads 4 x head_dim 16": the config fields behind d. */
static size_t dim_fields(char *s, size_t n, const struct model_config *c, enum dim d)
{
	switch (d) {
	case D_C: return (size_t)snprintf(s, n, "hidden_size %d", c->hidden_size);
	case D_Q: return (size_t)snprintf(s, n, "num_attention_heads %d x head_dim %d",
	                                  c->num_heads, c->head_dim);
	case D_KV: return (size_t)snprintf(s, n, "num_key_value_heads %d x head_dim %d",
	                                   c->num_kv_heads, c->head_dim);
	case D_HD: return (size_t)snprintf(s, n, "head_dim %d", c->head_dim);
	case D_I: return (size_t)snprintf(s, n, "intermediate_size %d", c->intermediate_size);
	case D_V: return (size_t)snprintf(s, n, "vocab_size %d", c->vocab_size);
	}
	return 0;
}

/* The layer index of a "model.layers.N." name, or -1. */
static long layer_of(const char *name)
{
	char *end;
	long l;

	if (strncmp(name, "model.layers.", 13) || name[13] < '0' || name[13] > '9')
		return -1;
	l = strtol(name + 13, &end, 10);
	return *end == '.' ? l : -1;
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && !strcmp(s + n - m, suf);
}

/* Check entry e of the list against st and bind it. 0 or -1. */
static int bind_one(const struct model_config *c, const struct safetensors *st,
                    struct ckpt_tensor *e, long file_layers, char *err, size_t errlen)
{
	const struct st_tensor *t = safetensors_find(st, e->name);
	char want[64], got[64], why[160] = "";
	enum dim d[2];
	long l = layer_of(e->name);

	if (!t) {
		if (!strcmp(e->name, "lm_head.weight"))
			snprintf(why, sizeof why, "; tie_word_embeddings is false");
		else if (l >= file_layers)
			snprintf(why, sizeof why, "; num_hidden_layers is %d, the weights have %ld "
			         "layers", c->num_layers, file_layers);
		errmsg_set(err, errlen, "%s: tensor '%s' missing (the config needs it%s)",
		           st->path, e->name, why);
		return -1;
	}
	if (t->ndim != e->ndim || t->shape[0] != e->shape[0] ||
	    (t->ndim > 1 && t->shape[1] != e->shape[1])) {
		size_t k = 0;

		entry_dims(e->name, &d[0], &d[1]);
		for (int i = 0; i < e->ndim && k < sizeof why; i++) {
			if (t->ndim == e->ndim && t->shape[i] == e->shape[i])
				continue;
			k += (size_t)snprintf(why + k, sizeof why - k, "%s", k ? ", " : " (");
			if (k < sizeof why)
				k += dim_fields(why + k, sizeof why - k, c, d[i]);
		}
		if (k && k < sizeof why)
			snprintf(why + k, sizeof why - k, ")");
		shape_str(want, sizeof want, e->ndim, e->shape);
		shape_str(got, sizeof got, t->ndim, t->shape);
		errmsg_set(err, errlen, "%s: tensor '%s' has shape %s, the config needs %s%s",
		           safetensors_file(st, t->shard), e->name, got, want, why);
		return -1;
	}
	e->ref->p = t->data;
	e->ref->dt = t->dtype;
	return 0;
}

/* A tensor of st the model does not use: 0 when it changes nothing (a rotary buffer; a
 * tied lm_head.weight equal to the embedding; one outside the model's modules: counted in
 * *noted), else -1 with a message naming the config field that leaves it out. */
static int unused_one(const struct model_config *c, const struct safetensors *st,
                      const struct st_tensor *t, long file_layers, size_t *noted,
                      const char **first, char *err, size_t errlen)
{
	const struct st_tensor *e;
	const char *file = safetensors_file(st, t->shard);

	if (ends_with(t->name, ".rotary_emb.inv_freq"))       /* recomputed from the config */
		;
	else if (!strcmp(t->name, "lm_head.weight") && c->tie_word_embeddings) {
		e = safetensors_find(st, "model.embed_tokens.weight");
		if (e->dtype == t->dtype && e->nbytes == t->nbytes && e->ndim == t->ndim &&
		    !memcmp(e->data, t->data, t->nbytes))
			return 0;                               /* the same values, saved twice */
		errmsg_set(err, errlen, "%s: tie_word_embeddings is true, but 'lm_head.weight' "
		           "differs from 'model.embed_tokens.weight'", file);
		return -1;
	} else if (layer_of(t->name) >= c->num_layers) {
		errmsg_set(err, errlen, "%s: tensor '%s' is past num_hidden_layers %d (the weights "
		           "have %ld layers)", file, t->name, c->num_layers, file_layers);
		return -1;
	} else if (!strncmp(t->name, "model.", 6) || !strncmp(t->name, "lm_head.", 8)) {
		errmsg_set(err, errlen, "%s: tensor '%s' has no place in the model config.json "
		           "describes%s", file, t->name, ends_with(t->name, ".bias") ?
		           " (no biases: attention_bias false, Qwen3's MLP has none)" : "");
		return -1;
	}
	if (!*first)
		*first = t->name;
	++*noted;
	return 0;
}

int checkpoint_bind(const struct model_config *c, const struct safetensors *st,
                    struct model_weights *w, char *err, size_t errlen)
{
	size_t n, noted = 0;
	struct ckpt_tensor *list;
	const char *first = NULL;
	long file_layers = 0;
	char *used = xcalloc(st->ntensors ? st->ntensors : 1, 1);

	memset(w, 0, sizeof *w);
	list = checkpoint_tensor_list(c, w, &n);
	for (size_t i = 0; i < st->ntensors; i++)
		if (layer_of(st->tensors[i].name) >= file_layers)
			file_layers = layer_of(st->tensors[i].name) + 1;
	/* the tensors of one config field first (vocab, hidden, head_dim, intermediate), then
	 * q/k/v/o, whose mismatch then points at the number of heads */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++) {
			enum dim d0, d1;

			entry_dims(list[i].name, &d0, &d1);
			if ((d0 == D_Q || d0 == D_KV || d1 == D_Q) != pass)
				continue;
			if (bind_one(c, st, &list[i], file_layers, err, errlen) < 0)
				goto fail;
		}
	}
	if (c->tie_word_embeddings)
		w->lm_head = w->embed;
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = safetensors_find(st, list[i].name);
		used[t - st->tensors] = 1;
	}
	for (size_t i = 0; i < st->ntensors; i++)
		if (!used[i] && unused_one(c, st, &st->tensors[i], file_layers, &noted, &first, err,
		                           errlen) < 0)
			goto fail;
	if (noted)
		warn_msg("note: %s: ignoring %zu tensor%s the model does not use (first: '%s')",
		         st->path, noted, noted > 1 ? "s" : "", first);
	free(used);
	free(list);
	return 0;
fail:
	free(used);
	free(list);
	model_weights_free(w);
	return -1;
}

/* ---------------------------------------------------------------- open, close */

static int file_exists(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int checkpoint_open(struct checkpoint *ck, const char *dir, char *err, size_t errlen)
{
	char *cfg = xasprintf("%s/config.json", dir);
	char *idx = xasprintf("%s/model.safetensors.index.json", dir);
	char *one = xasprintf("%s/model.safetensors", dir);
	int rc = -1;

	memset(ck, 0, sizeof *ck);
	ck->dir = xstrdup(dir);
	if (config_load(&ck->cfg, cfg, err, errlen) < 0)
		goto out;
	if (file_exists(idx)) {
		ck->weights_path = idx;
		idx = NULL;
	} else if (file_exists(one)) {
		ck->weights_path = one;
		one = NULL;
	} else {
		errmsg_set(err, errlen, "%s: no model.safetensors or model.safetensors.index.json",
		           dir);
		goto out;
	}
	if (safetensors_open(&ck->st, ck->weights_path, err, errlen) < 0)
		goto out;
	if (checkpoint_bind(&ck->cfg, &ck->st, &ck->w, err, errlen) < 0) {
		safetensors_close(&ck->st);
		goto out;
	}
	rc = 0;
out:
	free(cfg);
	free(idx);
	free(one);
	if (rc < 0) {
		free(ck->dir);
		free(ck->weights_path);
		memset(ck, 0, sizeof *ck);
	}
	return rc;
}

void checkpoint_close(struct checkpoint *ck)
{
	model_weights_free(&ck->w);
	safetensors_close(&ck->st);
	free(ck->dir);
	free(ck->weights_path);
	memset(ck, 0, sizeof *ck);
}

/* ---------------------------------------------------------------- writing */

static const char *const tokenizer_files[] = {
	"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
	"special_tokens_map.json", "added_tokens.json", "generation_config.json",
};

int checkpoint_has_tokenizer(const char *from)
{
	int found = 0;
	for (size_t i = 0; !found && i < ARRAY_LEN(tokenizer_files); i++) {
		char *src = xasprintf("%s/%s", from, tokenizer_files[i]);
		found = file_exists(src);
		free(src);
	}
	return found;
}

int checkpoint_load_tokenizer(struct tokenizer *tok, const char *dir, const char *opt,
                              char *err, size_t errlen)
{
	char *path = xasprintf("%s/tokenizer.json", dir);
	struct stat sb;
	/* anything by that name but nothing at all (a directory, a dangling link, one that
	 * cannot be looked at) is one that does not load */
	int there = lstat(path, &sb) == 0 || errno != ENOENT;

	free(path);
	memset(tok, 0, sizeof *tok);
	if (opt && !checkpoint_has_tokenizer(dir)) {
		errmsg_set(err, errlen, "%s '%s': no tokenizer files there (tokenizer.json, ...)",
		           opt, dir);
		return -1;
	}
	if (!opt && !there)
		return 0;
	return tokenizer_load(tok, dir, err, errlen) < 0 ? -1 : 1;
}

static int copy_tokenizer(const char *dir, const char *from, char *err, size_t errlen)
{
	int copied = 0;

	for (size_t i = 0; i < ARRAY_LEN(tokenizer_files); i++) {
		char *src = xasprintf("%s/%s", from, tokenizer_files[i]);
		char *dst = xasprintf("%s/%s", dir, tokenizer_files[i]);
		size_t len;
		char *data = file_exists(src) ? util_read_file(src, &len) : NULL;
		int rc = 0;

		if (data) {
			rc = atomfile_write(dst, data, len, err, errlen);
			copied++;
		} else if (file_exists(src)) {
			errmsg_set(err, errlen, "cannot read '%s': %s", src, strerror(errno));
			rc = -1;
		}
		free(data);
		free(src);
		free(dst);
		if (rc < 0)
			return -1;
	}
	if (!copied) {
		errmsg_set(err, errlen, "%s: no tokenizer files (tokenizer.json, vocab.json, ...)", from);
		return -1;
	}
	return 0;
}

static int write_index(const char *dir, const struct st_wtensor *wt, size_t n, const int *shard,
                       int nshards, char *err, size_t errlen)
{
	json_t *root = json_object(), *map = json_object();
	char *path = xasprintf("%s/model.safetensors.index.json", dir), *text;
	int rc;

	json_object_set_new(root, "metadata", json_pack("{sI}", "total_size",
	                                               (json_int_t)safetensors_data_size(wt, n)));
	for (size_t i = 0; i < n; i++) {
		char f[64];
		snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", shard[i] + 1, nshards);
		json_object_set_new(map, wt[i].name, json_string(f));
	}
	json_object_set_new(root, "weight_map", map);
	text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(root);
	rc = atomfile_write(path, text, strlen(text), err, errlen);
	free(text);
	free(path);
	return rc;
}

/* The trial of checkpoint_dir_writable, with every signal that can be blocked held off
 * between the making and the removing: a handler that exits (dice-sft's and dice-rl's before
 * training) runs after the removal, so no trial file or directory is left behind. 1 made and
 * removed; 0 not made, errno saying why. */
static int try_write(const char *dir, int is_dir)
{
	sigset_t old;
	int made, e;

	util_signals_hold(&old);
	if (is_dir) {
		char *probe = xasprintf("%s/.dice-write-test-XXXXXX", dir);
		int fd = mkstemp(probe);
		e = errno;
		if ((made = fd >= 0)) {
			close(fd);
			unlink(probe);
		}
		free(probe);
	} else {
		made = mkdir(dir, 0755) == 0;
		e = errno;
		if (made)
			rmdir(dir);
	}
	util_signals_release(&old);
	errno = e;
	return made;
}

int checkpoint_dir_writable(const char *dir, char *err, size_t errlen)
{
	struct stat sb;

	if (!*dir) {
		errmsg_set(err, errlen, "an empty output directory name");
		return -1;
	}
	/* tried, not asked of access(2), which lets root through where the write still fails
	 * (a directory of /proc or /sys): a file made in it and removed, or it made (one level,
	 * as checkpoint_write makes it) and removed */
	if (stat(dir, &sb) == 0) {
		if (!S_ISDIR(sb.st_mode)) {     /* a file */
			errmsg_set(err, errlen, "cannot write into '%s': %s", dir,
			           strerror(ENOTDIR));
			return -1;
		}
		if (try_write(dir, 1))
			return 0;
		/* the trial file's errno (in /proc: ENOENT) */
		errmsg_set(err, errlen, "cannot create a file in '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (errno == ENOENT && try_write(dir, 0))
		return 0;
	errmsg_set(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
	return -1;
}

static int write_dir(const char *dir, const struct model_config *c,
                     const struct model_weights *w, int nshards, const char *tokenizer_dir,
                     const char *save, char *err, size_t errlen)
{
	const char *const meta[] = { "format", "pt", CHECKPOINT_SAVE_KEY, save };
	size_t nmeta = save ? 2 : 1;
	size_t n, total, acc = 0;
	struct ckpt_tensor *list;
	struct st_wtensor *wt;
	int *shard, rc = -1;
	char *path;

	if (config_validate(c, "config", err, errlen) < 0)
		return -1;
	if (tokenizer_dir && !checkpoint_has_tokenizer(tokenizer_dir)) {   /* before writing anything */
		errmsg_set(err, errlen, "%s: no tokenizer files (tokenizer.json, vocab.json, ...)",
		           tokenizer_dir);
		return -1;
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		errmsg_set(err, errlen, "cannot create '%s': %s", dir, strerror(errno));
		return -1;
	}
	if (!w->layers || w->nlayers != c->num_layers) {
		errmsg_set(err, errlen, "%s: weights for %d layers, the config has %d", dir,
		           w->layers ? w->nlayers : 0, c->num_layers);
		return -1;
	}
	/* the refs point into the caller's w; they are only read */
	list = checkpoint_tensor_list(c, (struct model_weights *)w, &n);
	wt = xcalloc(n, sizeof *wt);
	shard = xcalloc(n, sizeof *shard);
	if (nshards < 1)
		nshards = 1;
	if ((size_t)nshards > n)
		nshards = (int)n;
	for (size_t i = 0; i < n; i++) {
		const struct wref *src = list[i].ref;

		wt[i] = (struct st_wtensor){ .name = list[i].name, .dtype = src->dt,
		                             .ndim = list[i].ndim, .data = src->p };
		wt[i].shape[0] = list[i].shape[0];
		wt[i].shape[1] = list[i].shape[1];
		if (!src->p) {
			errmsg_set(err, errlen, "%s: no data for tensor '%s'", dir, list[i].name);
			goto out;
		}
	}
	/* shards of about equal bytes, in order, none empty */
	total = safetensors_data_size(wt, n);
	for (size_t i = 0, s = 0; i < n; i++) {
		size_t left = n - i;
		if (s + 1 < (size_t)nshards && i > 0 &&
		    (acc >= total / (size_t)nshards * (s + 1) || left == (size_t)nshards - s - 1))
			s++;
		shard[i] = (int)s;
		acc += safetensors_data_size(&wt[i], 1);
	}
	if (nshards == 1) {
		path = xasprintf("%s/model.safetensors", dir);
		rc = safetensors_write(path, wt, n, meta, nmeta, err, errlen);
		free(path);
		if (rc == 0) {
			path = xasprintf("%s/model.safetensors.index.json", dir);
			unlink(path);
			free(path);
		}
	} else {
		size_t b = 0;
		rc = 0;
		for (int s = 0; s < nshards && rc == 0; s++) {
			size_t e = b;
			while (e < n && shard[e] == s)
				e++;
			path = xasprintf("%s/model-%05d-of-%05d.safetensors", dir, s + 1, nshards);
			rc = safetensors_write(path, wt + b, e - b, meta, nmeta, err, errlen);
			free(path);
			b = e;
		}
		if (rc == 0)
			rc = write_index(dir, wt, n, shard, nshards, err, errlen);
		if (rc == 0) {
			path = xasprintf("%s/model.safetensors", dir);
			unlink(path);
			free(path);
		}
	}
	if (rc == 0) {
		path = xasprintf("%s/config.json", dir);
		rc = config_write(c, path, err, errlen);
		free(path);
	}
	if (rc == 0 && tokenizer_dir)
		rc = copy_tokenizer(dir, tokenizer_dir, err, errlen);
out:
	free(shard);
	free(wt);
	free(list);
	return rc;
}

int checkpoint_write(const char *dir, const struct model_config *c,
                     const struct model_weights *w, int nshards, const char *tokenizer_dir,
                     char *err, size_t errlen)
{
	return write_dir(dir, c, w, nshards, tokenizer_dir, NULL, err, errlen);
}

int checkpoint_write_save(const char *dir, const struct model_config *c,
                          const struct model_weights *w, const char *tokenizer_dir,
                          const char *save, char *err, size_t errlen)
{
	return write_dir(dir, c, w, 1, tokenizer_dir, save, err, errlen);
}

int checkpoint_check_save(const char *dir, const char *state, const char *save, char *err,
                          size_t errlen)
{
	char *one = xasprintf("%s/model.safetensors", dir);
	char *idx = xasprintf("%s/model.safetensors.index.json", dir);
	struct safetensors st;
	const char *has;
	int rc = 0;

	if (save && safetensors_open(&st, file_exists(idx) ? idx : one, err, errlen) < 0) {
		rc = -1;
	} else if (save) {
		if (!(has = safetensors_meta(&st, CHECKPOINT_SAVE_KEY)) || strcmp(has, save)) {
			errmsg_set(err, errlen, "%s: written at %s, but the weights in %s are from %s: "
			           "a save was cut short\nhint: start afresh from those weights (-m %s, "
			           "no resume), or restore a whole copy of %s", state, save, dir,
			           has ? has : "another save", dir, dir);
			rc = -1;
		}
		safetensors_close(&st);
	}
	free(one);
	free(idx);
	return rc;
}

/* ---------------------------------------------------------------- random init */

void model_init_defaults(struct model_init *o)
{
	memset(o, 0, sizeof *o);
	o->seed = 1;
	o->std = 0.02f;
	o->nshards = 1;
}

void config_tiny(struct model_config *c, int vocab)
{
	config_defaults(c);
	c->vocab_size = vocab < 16 ? 16 : vocab;
	c->hidden_size = 64;
	c->num_layers = 2;
	c->num_heads = 4;
	c->num_kv_heads = 2;
	c->head_dim = 16;
	c->intermediate_size = 128;
	c->max_position_embeddings = 4096;
	c->rope_theta = 1e6f;
	c->mask_token_id = c->vocab_size - 1;
	c->eos_token_id = c->pad_token_id = c->vocab_size - 2;
	c->dtype = DICE_F32;
}

/* Random init: every tensor is cut into chunks of INIT_CHUNK values, and chunk k of tensor i
 * draws from its own generator seeded by (seed, i, k), so the values do not depend on how
 * many threads fill them; the chunks go to threads through a shared counter. */
#define INIT_CHUNK ((size_t)1 << 20)
#define INIT_THREADS_MAX 64

struct init_job {
	const struct model_init *o;
	enum dice_dtype dt;
	struct ckpt_tensor *list;
	size_t *first;               /* first[i]: the global index of tensor i's chunk 0 */
	size_t n, nchunks;
	size_t next;                 /* the next chunk to take (atomic) */
};

static size_t init_count(const struct ckpt_tensor *t)
{
	return (size_t)t->shape[0] * (t->ndim > 1 ? (size_t)t->shape[1] : 1);
}

static void init_chunk(struct init_job *job, size_t g)
{
	size_t i = 0, lo = 0, hi = job->n;
	while (hi - lo > 1) {                           /* the tensor holding chunk g */
		size_t mid = (lo + hi) / 2;
		if (job->first[mid] <= g)
			lo = mid;
		else
			hi = mid;
	}
	i = lo;
	size_t k = g - job->first[i], cnt = init_count(&job->list[i]);
	size_t j0 = k * INIT_CHUNK, j1 = j0 + INIT_CHUNK < cnt ? j0 + INIT_CHUNK : cnt;
	int norm = ends_with(job->list[i].name, "norm.weight");
	unsigned char *p = (unsigned char *)job->list[i].ref->p;
	struct rng r;

	rng_seed(&r, job->o->seed ^ (0x9e3779b97f4a7c15ull * (i + 1)) ^ ((uint64_t)k << 40));
	for (size_t j = j0; j < j1; j++) {
		float v = norm ? 1.0f + job->o->norm_jitter * (float)rng_normal(&r)
		               : job->o->std * (float)rng_normal(&r);
		uint16_t h;

		if (job->dt == DICE_F32) {
			memcpy(p + 4 * j, &v, 4);
			continue;
		}
		h = job->dt == DICE_BF16 ? dice_f32_to_bf16(v) : dice_f32_to_f16(v);
		memcpy(p + 2 * j, &h, 2);
	}
}

static void *init_worker(void *arg)
{
	struct init_job *job = arg;
	size_t g;

	while ((g = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->nchunks)
		init_chunk(job, g);
	return NULL;
}

int checkpoint_init_random(const char *dir, const struct model_config *c,
                           const struct model_init *o, char *err, size_t errlen)
{
	struct model_weights w = { 0 };
	size_t n, es = dice_dtype_size(c->dtype);
	struct ckpt_tensor *list;
	void **bufs;
	int rc;

	if (config_validate(c, "config", err, errlen) < 0)
		return -1;
	list = checkpoint_tensor_list(c, &w, &n);
	bufs = xcalloc(n, sizeof *bufs);
	struct init_job job = { o, c->dtype, list, xcalloc(n ? n : 1, sizeof(size_t)), n, 0, 0 };
	for (size_t i = 0; i < n; i++) {
		size_t cnt = init_count(&list[i]);
		bufs[i] = xmalloc(cnt * es + 1);
		list[i].ref->p = bufs[i];
		list[i].ref->dt = c->dtype;
		job.first[i] = job.nchunks;
		job.nchunks += (cnt + INIT_CHUNK - 1) / INIT_CHUNK;
	}
	long ncpu = o->threads > 0 ? o->threads : sysconf(_SC_NPROCESSORS_ONLN);
	int nt = ncpu < 1 ? 1 : ncpu > INIT_THREADS_MAX ? INIT_THREADS_MAX : (int)ncpu;
	if ((size_t)nt > job.nchunks)
		nt = job.nchunks ? (int)job.nchunks : 1;
	pthread_t th[INIT_THREADS_MAX];
	int started = 0;
	for (int t = 1; t < nt; t++, started++)
		if (pthread_create(&th[t - 1], NULL, init_worker, &job))
			break;                      /* fewer threads: the same values */
	init_worker(&job);
	for (int t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	free(job.first);
	if (c->tie_word_embeddings)
		w.lm_head = w.embed;
	rc = checkpoint_write(dir, c, &w, o->nshards, o->tokenizer_dir, err, errlen);
	for (size_t i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(list);
	model_weights_free(&w);
	return rc;
}
