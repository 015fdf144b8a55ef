/* jsonl: streaming JSON Lines over jansson.
 *
 * Reader: one object per non-blank line, each with its source name and 1-based line number.
 * A UTF-8 byte-order mark at the very start of a stream (each operand, each archive member)
 * is skipped; anywhere else it is the line's text (and no valid JSON).
 * A malformed line (bad JSON, not an object, invalid UTF-8) is JSONL_BAD: the raw text stays
 * in r->line and the reason in r->err, and reading goes on with the next line; it is never a
 * crash and never silently dropped (jsonl_report_bad prints "prog: file:line: reason").
 *
 * Writer: one compact object per line. jsonl_write_added() and jsonl_write_fields() are the
 * pass-through path used by every program that adds its own fields to a record: the
 * original line is written back byte for byte with ,"key":value spliced before its closing
 * brace, so unknown fields, key order and number spellings (an integer past int64, which
 * the reader takes as a double) survive exactly. A field the record already has is cut out
 * of the line, the others' bytes kept, and the new one added last; a field with no value is
 * only cut out. The record is re-serialised only where there is no line (a record built
 * here) or it cannot be done.
 *
 * What the writer prints itself (the record in jsonl_write, the added value) has each real
 * at the fewest digits that read back to the same double: 0.9 is 0.9, not jansson's
 * 0.90000000000000002, and 0.12345678901234567 keeps its 17; no bit is lost, and a
 * real's spelling does not depend on the other reals of its record.
 *
 * Ownership: jsonl_read hands the caller a new reference (*rec); the writer never steals.
 */
#ifndef DICE_JSONL_H
#define DICE_JSONL_H

#include <stdio.h>
#include <jansson.h>

#include "util.h"

enum jsonl_status {
	JSONL_EOF = 0,
	JSONL_RECORD = 1,
	JSONL_BAD = 2,
	JSONL_IOERR = -1,
};

struct jsonl_reader {
	FILE *fp;
	const char *name;   /* borrowed: source name for messages */
	size_t lineno;      /* line number of the current line, 1-based */
	char *line;         /* current line, '\n' removed, NUL-terminated (len bytes) */
	size_t len;
	size_t cap;
	char err[256];      /* reason when JSONL_BAD */
};

void jsonl_reader_init(struct jsonl_reader *r, FILE *fp, const char *name);
void jsonl_reader_free(struct jsonl_reader *r);
/* Next line as raw text (blank lines skipped): JSONL_RECORD with r->line set, or EOF/IOERR. */
int jsonl_read_line(struct jsonl_reader *r);
/* Parse r->line: 0 with *rec (new reference) or -1 with r->err set. */
int jsonl_parse_line(struct jsonl_reader *r, json_t **rec);
/* jsonl_read_line + jsonl_parse_line. */
int jsonl_read(struct jsonl_reader *r, json_t **rec);
/* "prog: name:line: reason" on stderr. */
void jsonl_report_bad(const struct jsonl_reader *r);
/* {"source", "line", "error", "text"} for a rejects file; text repaired to valid UTF-8. */
json_t *jsonl_bad_record(const struct jsonl_reader *r);

struct jsonl_writer {
	FILE *fp;
	const char *name;   /* for write-error messages */
	int unbuffered;     /* flush after every record */
	int failed;         /* a write failed */
	struct buf b;
};

void jsonl_writer_init(struct jsonl_writer *w, FILE *fp, const char *name, int unbuffered);
void jsonl_writer_free(struct jsonl_writer *w);
int jsonl_write(struct jsonl_writer *w, json_t *rec);

/* One field a program sets on a record it passes through. */
struct jsonl_field {
	const char *key;
	json_t *val;        /* borrowed; NULL: the record's member of that name is removed */
};

/* The record rec (parsed from line, len bytes; line NULL: built here, no line) with the
 * fields set, in order, appended to b without a newline. rec is not changed. */
void jsonl_splice(struct buf *b, const char *line, size_t len, const json_t *rec,
                  const struct jsonl_field *f, size_t nf);
int jsonl_write_fields(struct jsonl_writer *w, const char *line, size_t len, const json_t *rec,
                       const struct jsonl_field *f, size_t nf);
/* jsonl_write_fields with the one field key: val */
int jsonl_write_added(struct jsonl_writer *w, const char *line, size_t len, const json_t *rec,
                      const char *key, json_t *val);

/* Drive a whole program's input: every operand (none means "-") is opened with the input
 * module, every record is handed to fn (which owns *rec and must json_decref it), every
 * malformed line to bad (NULL: jsonl_report_bad). Returns 0 when every operand opened and
 * every line parsed, 1 otherwise; stops early with fn's value when fn returns < 0. */
typedef int (*jsonl_record_fn)(json_t *rec, struct jsonl_reader *r, void *arg);
typedef void (*jsonl_bad_fn)(struct jsonl_reader *r, void *arg);
int jsonl_each(char **operands, int n, jsonl_record_fn fn, jsonl_bad_fn bad, void *arg);

/* A whole JSON file (config.json, a baseline) as json_load_file reads it, a UTF-8
 * byte-order mark at its start skipped: a new reference, or NULL with *err set. */
json_t *json_load_file_bom(const char *path, size_t flags, json_error_t *err);

/* Small typed getters; NULL/defaults when the field is missing or of another type. */
const char *json_get_str(const json_t *o, const char *key);
/* The value of key, NULL when it is missing or null (a null field counts as absent) */
json_t *json_get_set(const json_t *o, const char *key);
/* v as one line of compact JSON (no newline), its reals as the writer prints them (see
 * above); a new string. For what a user reads that is not a record: logs, statistics. */
char *jsonl_dumps(const json_t *v);
/* v as one such line on fp, flushed: 0, or -1 after "prog: write error on NAME: reason"
 * (said once a stream, util_fcheck). For logs. */
int jsonl_log(FILE *fp, const char *name, const json_t *v);
/* 1 and *out when key holds a number (integer or real), else 0 */
int json_get_num(const json_t *o, const char *key, double *out);
/* A level as records carry one (KernelBench's, a task's): an integral number (2, or 2.0),
 * or a string "2" or "level2", in [lo, hi]: 0 with *out, else -1 (v NULL too) */
int json_level_value(const json_t *v, long lo, long hi, int *out);

#endif
