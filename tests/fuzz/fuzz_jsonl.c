/* fuzz_jsonl: libFuzzer target for the JSONL reader, the pass-through writer and code
 * extraction (lib/jsonl.c, lib/extract.c). Every record read is written back with an added
 * object and re-read: the splice must give valid JSON with the same fields plus the new one.
 * Code extraction: a block just when there are two fences, text from inside the first pair,
 * trimmed; a record's kernel is its string `kernel` as it is, or NULL with a reason.
 * Build and run: sh tests/fuzz/run.sh jsonl. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "extract.h"
#include "jsonl.h"

/* the first fenced block: NULL just when there are not two fences; else text inside the
 * text, with no fence and no white space at either end */
static void check_extract(const char *text, size_t len)
{
	const char *f = memmem(text, len, "```", 3);
	int two = f && memmem(f + 3, len - (size_t)(f + 3 - text), "```", 3);
	char *code = extract_code(text, len);
	size_t n = code ? strlen(code) : 0;

	if (!code != !two)
		abort();
	if (code && (!memmem(f + 3, len - (size_t)(f + 3 - text), code, n) || strstr(code, "```") ||
	             (n && (isspace((unsigned char)code[0]) ||
	                    /* a NUL byte ends the string early, where it may be white space */
	                    (isspace((unsigned char)code[n - 1]) && !memchr(text, '\0', len))))))
		abort();
	free(code);
}

/* a record's kernel: `kernel` as it is when a string; NULL with a reason otherwise */
static void check_record_kernel(const json_t *rec)
{
	const char *from;
	char why[128];
	char *k = extract_record_kernel(rec, NULL, &from);
	const json_t *kv = json_object_get(rec, "kernel");

	if (json_is_string(kv) && (!k || strcmp(from, "kernel") ||
	                           strncmp(k, json_string_value(kv), json_string_length(kv))))
		abort();
	if (!k && !*extract_record_why(rec, NULL, from, why, sizeof why))
		abort();
	free(k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jsonl_reader r;
	struct jsonl_writer w;
	char *out = NULL;
	size_t outlen = 0;
	json_t *rec, *val;
	FILE *in, *mem;
	int s;

	if (size == 0)
		return 0;
	val = json_pack("{s:i}", "n", 1);
	in = fmemopen((void *)data, size, "r");
	mem = open_memstream(&out, &outlen);
	jsonl_reader_init(&r, in, "fuzz");
	jsonl_writer_init(&w, mem, "mem", 0);
	while ((s = jsonl_read(&r, &rec)) != JSONL_EOF && s != JSONL_IOERR) {
		if (s == JSONL_BAD) {
			json_decref(jsonl_bad_record(&r));
			continue;
		}
		size_t nfields = json_object_size(rec);
		int had = json_object_get(rec, "added") != NULL;
		fflush(mem);
		size_t start = outlen;
		jsonl_write_added(&w, r.line, r.len, rec, "added", val);
		fflush(mem);
		json_error_t e;
		json_t *back = json_loadb(out + start, outlen - start, 0, &e);
		if (!back)      /* an integer past int64 reads as a real, as jsonl_read does */
			back = json_loadb(out + start, outlen - start, JSON_DECODE_INT_AS_REAL, &e);
		json_t *added = json_object_get(back, "added");
		if (!json_is_object(back) || json_object_size(added) != 1 ||
		    json_number_value(json_object_get(added, "n")) != 1)    /* 1 or 1.0 */
			abort();
		if (json_object_size(back) != nfields + !had)
			abort();
		json_decref(back);
		const char *c = json_get_str(rec, "completion");
		if (c)
			check_extract(c, json_string_length(json_object_get(rec, "completion")));
		check_record_kernel(rec);
		json_decref(rec);
	}
	check_extract((const char *)data, size);
	jsonl_reader_free(&r);
	jsonl_writer_free(&w);
	fclose(in);
	fclose(mem);
	free(out);
	json_decref(val);
	return 0;
}
