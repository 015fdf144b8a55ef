/* safetensors: read (mmap) and write (atomically) Hugging Face safetensors files.
 *
 * Format: u64 little-endian header length N, N bytes of JSON header, then the data section.
 * The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets relative to the data section) and may hold "__metadata__": {string: string}.
 *
 * Reading: safetensors_open takes one `*.safetensors` file or a sharded
 * `*.safetensors.index.json` (its "weight_map" names the shard of each tensor; shards are
 * files in the index's folder). Everything is validated before use, and each failure is one
 * line naming the file and the tensor: header length inside the file (and <= 100 MB), JSON
 * object without duplicate keys, dtype one of BF16/F16/F32, shape of non-negative integers,
 * shape x dtype size == end - begin, offsets inside the data section, no two tensors
 * overlapping, metadata values strings, every weight_map entry present in its shard and no
 * tensor name in two shards. Tensor data point into the read-only mapping; a tensor whose
 * offset is not a multiple of its element size gets an aligned copy. The views stay valid
 * until safetensors_close.
 *
 * Writing: safetensors_write writes one file through a temporary file in the target's
 * folder, fsync and rename (lib/atomfile.h). Tensors are laid out by element size (4-byte
 * first) so every tensor is aligned, the header is padded with spaces to a multiple of 8,
 * and the data section has no gaps (what the Python `safetensors` package requires).
 *
 * Our own state files (STYLE rule 14) carry __metadata__ "dice_format" and
 * "dice_format_version"; safetensors_check_format checks them. (Model weights carry
 * "format": "pt", which transformers requires.)
 */
#ifndef DICE_SAFETENSORS_H
#define DICE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#define ST_MAX_DIMS 8

struct st_tensor {
	char *name;
	enum dice_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];  /* (ndim) */
	size_t nelem;
	size_t nbytes;
	const void *data;            /* nbytes, aligned to the element size */
	int shard;                   /* index into the file list */
	void *owned;                 /* aligned copy, or NULL */
};

struct st_map;                       /* one mapped file (private) */

struct safetensors {
	char *path;                  /* what was opened */
	struct st_tensor *tensors;   /* (ntensors), sorted by name */
	size_t ntensors;
	struct st_map *files;        /* (nfiles) */
	size_t nfiles;
	char **meta;                 /* (2*nmeta) key, value: __metadata__ of the first file */
	size_t nmeta;
};

/* 0, or -1 with a message in err; on failure st needs no close. */
int safetensors_open(struct safetensors *st, const char *path, char *err, size_t errlen);
void safetensors_close(struct safetensors *st);
/* The same checks on a safetensors image in memory (the caller's buffer, which must
 * outlive st; name is used in messages). For fuzzing and embedded data. */
int safetensors_open_buffer(struct safetensors *st, const char *name, const void *data,
                            size_t size, char *err, size_t errlen);

/* The tensor called name, or NULL. */
const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name);
/* A metadata value, or NULL. */
const char *safetensors_meta(const struct safetensors *st, const char *key);
/* The path of shard i (the file itself when not sharded). */
const char *safetensors_file(const struct safetensors *st, int i);
/* __metadata__ dice_format == format and dice_format_version == version; else -1 and a
 * message with a hint. */
int safetensors_check_format(const struct safetensors *st, const char *format, int version,
                             char *err, size_t errlen);
/* "BF16", "F16", "F32" <-> enum; -1 for an unknown name. */
int safetensors_dtype_parse(const char *s, enum dice_dtype *out);
const char *safetensors_dtype_name(enum dice_dtype dt);

/* What to write: the caller's bytes (host memory, nbytes = prod(shape) x dtype size). */
struct st_wtensor {
	const char *name;
	enum dice_dtype dtype;
	int ndim;
	int64_t shape[ST_MAX_DIMS];
	const void *data;
};

/* Write n tensors and nmeta (key, value) metadata pairs (meta[2i], meta[2i+1]) to path,
 * atomically. 0, or -1 with a message in err (the target is then untouched). */
int safetensors_write(const char *path, const struct st_wtensor *t, size_t n,
                      const char *const *meta, size_t nmeta, char *err, size_t errlen);
/* Bytes of the data section safetensors_write would produce (the index's total_size). */
size_t safetensors_data_size(const struct st_wtensor *t, size_t n);

#endif
