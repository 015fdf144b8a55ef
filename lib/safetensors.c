/* safetensors: validating mmap reader (single file or sharded index) and atomic writer.
 * See safetensors.h for the format and every rule checked. Sections: files (mmap and
 * header validation), sharded index, lookup, writer.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomfile.h"
#include "errmsg.h"
#include "jsonl.h"
#include "safetensors.h"
#include "util.h"

#define ST_MAX_HEADER (100u << 20)   /* the Python package's limit too */

struct st_map {
	char *path;
	const unsigned char *base;   /* the whole file, or NULL when empty */
	size_t size;
	int borrowed;                /* base is the caller's buffer: do not unmap */
};

static const char *const dtype_names[] = {
	[DICE_F32] = "F32",
	[DICE_BF16] = "BF16",
	[DICE_F16] = "F16",
};

int safetensors_dtype_parse(const char *s, enum dice_dtype *out)
{
	for (size_t i = 0; i < ARRAY_LEN(dtype_names); i++) {
		if (!strcmp(s, dtype_names[i])) {
			*out = (enum dice_dtype)i;
			return 0;
		}
	}
	return -1;
}

const char *safetensors_dtype_name(enum dice_dtype dt)
{
	return (size_t)dt < ARRAY_LEN(dtype_names) ? dtype_names[dt] : "?";
}

/* ---------------------------------------------------------------- one file */

static int map_file(struct st_map *m, const char *path, char *err, size_t errlen)
{
	struct stat sb;
	int fd = open(path, O_RDONLY);

	m->path = xstrdup(path);
	m->base = NULL;
	m->size = 0;
	m->borrowed = 0;
	if (fd < 0 || fstat(fd, &sb) < 0) {
		errmsg_set(err, errlen, "cannot open '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(sb.st_mode)) {
		errmsg_set(err, errlen, "%s: not a regular file", path);
		goto fail;
	}
	m->size = (size_t)sb.st_size;
	if (m->size) {
		void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			errmsg_set(err, errlen, "cannot map '%s': %s", path, strerror(errno));
			goto fail;
		}
		m->base = p;
	}
	close(fd);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(m->path);
	m->path = NULL;
	return -1;
}

static void unmap_file(struct st_map *m)
{
	if (m->base && !m->borrowed)
		munmap((void *)m->base, m->size);
	free(m->path);
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	const unsigned char *p = x->data, *q = y->data;

	return p < q ? -1 : p > q;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static void add_meta(struct safetensors *st, const char *k, const char *v)
{
	st->meta = xrealloc(st->meta, (2 * st->nmeta + 2) * sizeof *st->meta);
	st->meta[2 * st->nmeta] = xstrdup(k);
	st->meta[2 * st->nmeta + 1] = xstrdup(v);
	st->nmeta++;
}

/* Parse one tensor entry; fills t (data relative to the data section start). */
static int parse_entry(const char *path, const char *name, json_t *v, size_t datalen,
                       const unsigned char *data, struct st_tensor *t, char *err, size_t errlen)
{
	json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
	json_t *off = json_object_get(v, "data_offsets");
	json_int_t b, e;
	size_t nelem = 1, esize, i;

	if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) ||
	    !json_is_array(off)) {
		errmsg_set(err, errlen, "%s: tensor '%s': entry needs dtype, shape and data_offsets",
		           path, name);
		return -1;
	}
	if (safetensors_dtype_parse(json_string_value(dt), &t->dtype) < 0) {
		errmsg_set(err, errlen, "%s: tensor '%s': dtype '%s' not supported (BF16, F16, F32)",
		           path, name, json_string_value(dt));
		return -1;
	}
	if (json_array_size(shape) > ST_MAX_DIMS) {
		errmsg_set(err, errlen, "%s: tensor '%s': %zu dimensions (at most %d)", path, name,
		           json_array_size(shape), ST_MAX_DIMS);
		return -1;
	}
	t->ndim = (int)json_array_size(shape);
	for (i = 0; i < json_array_size(shape); i++) {
		json_t *d = json_array_get(shape, i);
		json_int_t x = json_is_integer(d) ? json_integer_value(d) : -1;

		if (x < 0) {
			errmsg_set(err, errlen, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
			           path, name, i);
			return -1;
		}
		t->shape[i] = x;
		if (x && nelem > SIZE_MAX / 8 / (uint64_t)x) {
			errmsg_set(err, errlen, "%s: tensor '%s': shape too large", path, name);
			return -1;
		}
		nelem *= (size_t)x;
	}
	if (json_array_size(off) != 2 || !json_is_integer(json_array_get(off, 0)) ||
	    !json_is_integer(json_array_get(off, 1))) {
		errmsg_set(err, errlen, "%s: tensor '%s': data_offsets must be two integers", path, name);
		return -1;
	}
	b = json_integer_value(json_array_get(off, 0));
	e = json_integer_value(json_array_get(off, 1));
	if (b < 0 || e < b || (uint64_t)e > datalen) {
		errmsg_set(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] outside the data "
		           "section (%zu bytes)", path, name, (long long)b, (long long)e, datalen);
		return -1;
	}
	esize = dice_dtype_size(t->dtype);
	if ((uint64_t)(e - b) != (uint64_t)nelem * esize) {
		errmsg_set(err, errlen, "%s: tensor '%s': shape x %s size is %zu bytes but "
		           "data_offsets span %lld", path, name, dtype_names[t->dtype],
		           nelem * esize, (long long)(e - b));
		return -1;
	}
	t->name = xstrdup(name);
	t->nelem = nelem;
	t->nbytes = nelem * esize;
	t->data = data + b;
	return 0;
}

/* Validate one mapped file and append its tensors to st (shard index si). */
static int read_header(struct safetensors *st, int si, char *err, size_t errlen)
{
	const struct st_map *m = &st->files[si];
	uint64_t hlen = 0;
	json_t *root, *v;
	json_error_t jerr;
	const char *key;
	size_t first = st->ntensors, datalen;
	const unsigned char *data;

	if (m->size < 8) {
		errmsg_set(err, errlen, "%s: file too short for a safetensors header (%zu bytes)",
		           m->path, m->size);
		return -1;
	}
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | m->base[i];
	if (hlen > m->size - 8) {
		errmsg_set(err, errlen, "%s: header length %llu runs past the end of the file "
		           "(%zu bytes)", m->path, (unsigned long long)hlen, m->size);
		return -1;
	}
	if (hlen > ST_MAX_HEADER) {
		errmsg_set(err, errlen, "%s: header length %llu over the %u-byte limit", m->path,
		           (unsigned long long)hlen, ST_MAX_HEADER);
		return -1;
	}
	root = json_loadb((const char *)m->base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root || !json_is_object(root)) {
		errmsg_set(err, errlen, "%s: header is not a JSON object%s%s", m->path,
		           root ? "" : ": ", root ? "" : jerr.text);
		json_decref(root);
		return -1;
	}
	data = m->base + 8 + hlen;
	datalen = m->size - 8 - (size_t)hlen;
	st->tensors = xrealloc(st->tensors, (st->ntensors + json_object_size(root) + 1) *
	                       sizeof *st->tensors);
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			const char *mk;
			json_t *mv;

			if (!json_is_object(v)) {
				errmsg_set(err, errlen, "%s: __metadata__ is not an object", m->path);
				goto fail;
			}
			json_object_foreach(v, mk, mv) {
				if (!json_is_string(mv)) {
					errmsg_set(err, errlen, "%s: __metadata__ '%s' is not a string",
					           m->path, mk);
					goto fail;
				}
				if (si == 0)
					add_meta(st, mk, json_string_value(mv));
			}
			continue;
		}
		struct st_tensor *t = &st->tensors[st->ntensors];

		memset(t, 0, sizeof *t);
		if (parse_entry(m->path, key, v, datalen, data, t, err, errlen) < 0)
			goto fail;
		t->shard = si;
		st->ntensors++;
	}
	json_decref(root);
	root = NULL;
	/* overlap: sort this file's tensors by start, then each non-empty one starts after the
	 * end of the last non-empty one before it (an empty tensor between two must not hide
	 * their overlap) */
	qsort(st->tensors + first, st->ntensors - first, sizeof *st->tensors, cmp_begin);
	const struct st_tensor *last = NULL;
	for (size_t i = first; i < st->ntensors; i++) {
		const struct st_tensor *b = &st->tensors[i];

		if (!b->nbytes)
			continue;
		if (last && (const unsigned char *)b->data <
		            (const unsigned char *)last->data + last->nbytes) {
			errmsg_set(err, errlen, "%s: tensor '%s' overlaps tensor '%s'", m->path,
			           b->name, last->name);
			return -1;
		}
		last = b;
	}
	/* alignment: copy the rare misaligned tensor */
	for (size_t i = first; i < st->ntensors; i++) {
		struct st_tensor *t = &st->tensors[i];

		if ((uintptr_t)t->data % dice_dtype_size(t->dtype)) {
			t->owned = xmalloc(t->nbytes ? t->nbytes : 1);
			memcpy(t->owned, t->data, t->nbytes);
			t->data = t->owned;
		}
	}
	return 0;
fail:
	json_decref(root);
	return -1;
}

/* ---------------------------------------------------------------- sharded index */

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);

	return n >= m && !strcmp(s + n - m, suf);
}

static int open_file(struct safetensors *st, const char *path, char *err, size_t errlen)
{
	st->files = xrealloc(st->files, (st->nfiles + 1) * sizeof *st->files);
	if (map_file(&st->files[st->nfiles], path, err, errlen) < 0)
		return -1;
	st->nfiles++;
	return read_header(st, (int)st->nfiles - 1, err, errlen);
}

static int shard_index(const struct safetensors *st, const char *path)
{
	for (size_t i = 0; i < st->nfiles; i++)
		if (!strcmp(st->files[i].path, path))
			return (int)i;
	return -1;
}

static int open_index(struct safetensors *st, const char *path, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_load_file_bom(path, JSON_REJECT_DUPLICATES, &jerr), *map, *v;
	char *dir = xstrdup(path), *slash = strrchr(dir, '/');
	const char *key;
	int rc = -1;

	if (slash)
		slash[1] = '\0';
	else
		dir[0] = '\0';
	if (!root) {
		errmsg_set(err, errlen, "%s:%d: %s", path, jerr.line, jerr.text);
		goto out;
	}
	map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		errmsg_set(err, errlen, "%s: no \"weight_map\" object", path);
		goto out;
	}
	/* open each shard once, in order of first mention */
	json_object_foreach(map, key, v) {
		const char *f = json_is_string(v) ? json_string_value(v) : NULL;
		char *sp;

		if (!f || !*f || strchr(f, '/')) {
			errmsg_set(err, errlen, "%s: tensor '%s': shard must be a file name in the "
			           "index's folder", path, key);
			goto out;
		}
		sp = xasprintf("%s%s", dir, f);
		if (shard_index(st, sp) < 0 && open_file(st, sp, err, errlen) < 0) {
			free(sp);
			goto out;
		}
		free(sp);
	}
	if (!st->nfiles) {
		errmsg_set(err, errlen, "%s: empty weight_map", path);
		goto out;
	}
	/* every entry in its named shard */
	qsort(st->tensors, st->ntensors, sizeof *st->tensors, cmp_name);
	json_object_foreach(map, key, v) {
		char *sp = xasprintf("%s%s", dir, json_string_value(v));
		const struct st_tensor *t = safetensors_find(st, key);
		int si = shard_index(st, sp);

		free(sp);
		if (!t || t->shard != si) {
			errmsg_set(err, errlen, "%s: tensor '%s' is not in shard '%s'", path, key,
			           json_string_value(v));
			goto out;
		}
	}
	rc = 0;
out:
	json_decref(root);
	free(dir);
	return rc;
}

/* ---------------------------------------------------------------- open, close, lookup */

int safetensors_open(struct safetensors *st, const char *path, char *err, size_t errlen)
{
	int rc;

	memset(st, 0, sizeof *st);
	st->path = xstrdup(path);
	if (ends_with(path, ".json"))
		rc = open_index(st, path, err, errlen);
	else
		rc = open_file(st, path, err, errlen);
	if (rc == 0) {
		qsort(st->tensors, st->ntensors, sizeof *st->tensors, cmp_name);
		for (size_t i = 1; i < st->ntensors; i++) {
			if (!strcmp(st->tensors[i - 1].name, st->tensors[i].name)) {
				errmsg_set(err, errlen, "%s: tensor '%s' is in both '%s' and '%s'", path,
				           st->tensors[i].name, st->files[st->tensors[i - 1].shard].path,
				           st->files[st->tensors[i].shard].path);
				rc = -1;
				break;
			}
		}
	}
	if (rc < 0)
		safetensors_close(st);
	return rc;
}

int safetensors_open_buffer(struct safetensors *st, const char *name, const void *data,
                            size_t size, char *err, size_t errlen)
{
	struct st_map *m;

	memset(st, 0, sizeof *st);
	st->path = xstrdup(name);
	st->files = m = xcalloc(1, sizeof *m);
	st->nfiles = 1;
	m->path = xstrdup(name);
	m->base = size ? data : NULL;
	m->size = size;
	m->borrowed = 1;
	if (read_header(st, 0, err, errlen) < 0) {
		safetensors_close(st);
		return -1;
	}
	qsort(st->tensors, st->ntensors, sizeof *st->tensors, cmp_name);
	return 0;
}

void safetensors_close(struct safetensors *st)
{
	for (size_t i = 0; i < st->ntensors; i++) {
		free(st->tensors[i].name);
		free(st->tensors[i].owned);
	}
	free(st->tensors);
	for (size_t i = 0; i < st->nfiles; i++)
		unmap_file(&st->files[i]);
	free(st->files);
	for (size_t i = 0; i < 2 * st->nmeta; i++)
		free(st->meta[i]);
	free(st->meta);
	free(st->path);
	memset(st, 0, sizeof *st);
}

const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name)
{
	struct st_tensor key = { .name = (char *)name };

	if (!st->ntensors)
		return NULL;
	return bsearch(&key, st->tensors, st->ntensors, sizeof key, cmp_name);
}

const char *safetensors_meta(const struct safetensors *st, const char *key)
{
	for (size_t i = 0; i < st->nmeta; i++)
		if (!strcmp(st->meta[2 * i], key))
			return st->meta[2 * i + 1];
	return NULL;
}

const char *safetensors_file(const struct safetensors *st, int i)
{
	return i >= 0 && (size_t)i < st->nfiles ? st->files[i].path : NULL;
}

int safetensors_check_format(const struct safetensors *st, const char *format, int version,
                             char *err, size_t errlen)
{
	const char *f = safetensors_meta(st, "dice_format");
	const char *v = safetensors_meta(st, "dice_format_version");
	long n;

	if (!f || strcmp(f, format)) {
		errmsg_set(err, errlen, "%s: not a '%s' file (dice_format is %s%s%s)\n"
		           "hint: the file was written by another tool or for another purpose",
		           st->path, format, f ? "'" : "", f ? f : "absent", f ? "'" : "");
		return -1;
	}
	if (!v || parse_long(v, 0, 1L << 30, &n) < 0 || n != version) {
		errmsg_set(err, errlen, "%s: '%s' format version %s, this program reads version %d\n"
		           "hint: use the dice version that wrote it, or start afresh", st->path,
		           format, v ? v : "absent", version);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- writer */

static size_t wt_bytes(const struct st_wtensor *t)
{
	size_t n = dice_dtype_size(t->dtype);

	for (int d = 0; d < t->ndim; d++)
		n *= (size_t)t->shape[d];
	return n;
}

size_t safetensors_data_size(const struct st_wtensor *t, size_t n)
{
	size_t s = 0;

	for (size_t i = 0; i < n; i++)
		s += wt_bytes(&t[i]);
	return s;
}

int safetensors_write(const char *path, const struct st_wtensor *t, size_t n,
                      const char *const *meta, size_t nmeta, char *err, size_t errlen)
{
	size_t *order = xmalloc((n ? n : 1) * sizeof *order), k = 0, off = 0;
	json_t *root = json_object(), *md = NULL;
	struct atomfile af;
	char *hdr = NULL;
	size_t hlen, pad;
	unsigned char lenb[8];
	int rc = -1;

	/* 4-byte elements first, then 2-byte ones, each group in the caller's order */
	for (size_t pass = 4; pass >= 2; pass -= 2)
		for (size_t i = 0; i < n; i++)
			if (dice_dtype_size(t[i].dtype) == pass)
				order[k++] = i;
	if (nmeta) {
		md = json_object();
		for (size_t i = 0; i < nmeta; i++)
			json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
		json_object_set_new(root, "__metadata__", md);
	}
	for (size_t j = 0; j < n; j++) {
		const struct st_wtensor *w = &t[order[j]];
		json_t *e = json_object(), *shape = json_array();
		size_t nb = wt_bytes(w);

		int bad = w->ndim < 0 || w->ndim > ST_MAX_DIMS ||
		          (size_t)w->dtype >= ARRAY_LEN(dtype_names) || !w->name || !*w->name ||
		          !strcmp(w->name, "__metadata__") || json_object_get(root, w->name) ||
		          (nb && !w->data);

		for (int d = 0; d < w->ndim && !bad; d++)
			bad = w->shape[d] < 0;
		if (bad) {
			errmsg_set(err, errlen, "%s: cannot write tensor '%s': bad name, rank, shape, "
			           "dtype or data, or a duplicate name", path, w->name ? w->name : "");
			json_decref(e);
			json_decref(shape);
			goto out;
		}
		for (int d = 0; d < w->ndim; d++)
			json_array_append_new(shape, json_integer(w->shape[d]));
		json_object_set_new(e, "dtype", json_string(dtype_names[w->dtype]));
		json_object_set_new(e, "shape", shape);
		json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)off,
		                                                 (json_int_t)(off + nb)));
		json_object_set_new(root, w->name, e);
		off += nb;
	}
	hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	hlen = strlen(hdr);
	pad = (8 - hlen % 8) % 8;
	for (int i = 0; i < 8; i++)
		lenb[i] = (unsigned char)((uint64_t)(hlen + pad) >> (8 * i));
	if (atomfile_open(&af, path, err, errlen) < 0)
		goto out;
	fwrite(lenb, 1, 8, af.fp);
	fwrite(hdr, 1, hlen, af.fp);
	fprintf(af.fp, "%*s", (int)pad, "");
	for (size_t j = 0; j < n; j++) {
		size_t nb = wt_bytes(&t[order[j]]);

		if (nb && fwrite(t[order[j]].data, 1, nb, af.fp) != nb)
			break;
	}
	rc = atomfile_commit(&af, err, errlen);
out:
	free(hdr);
	json_decref(root);
	free(order);
	return rc;
}
