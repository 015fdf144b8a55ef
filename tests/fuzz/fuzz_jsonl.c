/* fuzz_jsonl: libFuzzer target for the JSONL reader, the pass-through writer and code
 * extraction (lib/jsonl.c, lib/extract.c). Every record read is written back with an added
 * object and re-read: the splice must give valid JSON with the same fields plus the new one.
 * Build and run: sh tests/fuzz/run.sh jsonl. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "extract.h"
#include "jsonl.h"

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
		if (!back || !json_is_object(back) || !json_equal(json_object_get(back, "added"), val))
			abort();
		if (json_object_size(back) != nfields + !had)
			abort();
		json_decref(back);
		const char *c = json_get_str(rec, "completion");
		if (c)
			free(extract_code(c, json_string_length(json_object_get(rec, "completion"))));
		json_decref(rec);
	}
	free(extract_code((const char *)data, size));
	jsonl_reader_free(&r);
	jsonl_writer_free(&w);
	fclose(in);
	fclose(mem);
	free(out);
	json_decref(val);
	return 0;
}
