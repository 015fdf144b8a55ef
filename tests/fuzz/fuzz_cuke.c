/* fuzz_cuke: libFuzzer target for cuke-filter's record curation (lib/cuke.c): the raw-line
 * field scanner, the verdicts, the records written, and the content checks under them.
 *
 * The first byte picks the options (below); the rest is JSONL, judged line by line twice:
 * once with the raw-line scanner (cuke_fields_scan) and once parsing every line with jansson
 * (no_fast), as cuke-filter's tests compare them. Invariants: where the scanner is sure, the
 * line is an object jansson reads and its fields are what cuke_fields_from_json finds (nkeys:
 * whether there is a member); both
 * runs give every line the same verdict and write the same bytes, kept and rejected; after
 * every line kept + rejected == read; a kept record (records format) comes back as an object
 * with a `cuke` object, a reject with cuke.rejected naming its reason; the infill split of a
 * kernel is a span inside it that holds `__global__`; a classified reference is level 1..3,
 * or -1 with a reason. Build and run: sh tests/fuzz/run.sh cuke (seed it with the lines of
 * tests/fixtures/cuke/dataset.jsonl, each prefixed by an options byte). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuke.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	setenv("DICE_SHARE", "share", 0);    /* run.sh runs from the source tree */
	return 0;
}

static void same_fields(const struct cuke_fields *a, const struct cuke_fields *b)
{
	for (int i = 0; i < CUKE_F_N; i++)
		if (a->v[i].kind != b->v[i].kind ||
		    (a->v[i].kind == CUKE_NUMBER && a->v[i].num != b->v[i].num))
			abort();
	if (a->has_cuke != b->has_cuke || !a->nkeys != !b->nkeys)   /* the scanner: 0 or 1 */
		abort();
}

/* the scanner against jansson on one line */
static void check_scan(const char *line, size_t len)
{
	struct cuke_fields fs, fj;
	json_error_t e;
	json_t *rec;

	if (!cuke_fields_scan(line, len, &fs))
		return;
	rec = json_loadb(line, len, JSON_ALLOW_NUL, &e);
	if (!json_is_object(rec))
		abort();     /* the scanner was sure of a line jansson refuses */
	cuke_fields_from_json(rec, &fj);
	same_fields(&fs, &fj);
	json_decref(rec);
}

/* the content checks on a record's strings */
static void check_content(const char *line, size_t len)
{
	json_error_t e;
	json_t *rec = json_loadb(line, len, 0, &e);
	const json_t *k = json_object_get(rec, "kernel"), *r = json_object_get(rec, "ref");
	struct cuke_level lv;
	const char *why = NULL;
	size_t a, b;

	if (json_is_string(k)) {
		const char *s = json_string_value(k);
		size_t n = json_string_length(k);
		if (cuke_split(s, n, &a, &b, &why) == 0) {
			if (!(a < b && b <= n) || !memmem(s + a, b - a, "__global__", 10))
				abort();
		} else if (!why) {
			abort();
		}
		free(cuke_sft_response(s, n));
	}
	if (json_is_string(r)) {
		int l = cuke_classify(json_string_value(r), json_string_length(r), &lv);
		if (l != lv.level && l != -1)
			abort();
		if (l == -1 ? !lv.why : (l < 1 || l > 3 || !lv.why))
			abort();
	}
	json_decref(rec);
}

struct run {
	struct cuke *c;
	FILE *out, *rej;
	char *obuf, *rbuf;
	size_t olen, rlen;
	struct jsonl_writer wo, wr;
	struct cuke_sink sink;
};

static void run_open(struct run *u, const struct cuke_config *cfg)
{
	char err[512];

	if (!(u->c = cuke_new(cfg, err, sizeof err)))
		abort();
	u->obuf = u->rbuf = NULL;
	u->out = open_memstream(&u->obuf, &u->olen);
	u->rej = open_memstream(&u->rbuf, &u->rlen);
	jsonl_writer_init(&u->wo, u->out, "out", 0);
	jsonl_writer_init(&u->wr, u->rej, "rejects", 0);
	u->sink = (struct cuke_sink){ &u->wo, &u->wr };
}

static void run_close(struct run *u)
{
	jsonl_writer_free(&u->wo);
	jsonl_writer_free(&u->wr);
	fclose(u->out);
	fclose(u->rej);
	free(u->obuf);
	free(u->rbuf);
	cuke_free(u->c);
}

/* every line of buf[0..n) an object; with want, the member `want` of each an object */
static void lines_are(const char *buf, size_t n, const char *want)
{
	for (size_t i = 0; i < n;) {
		const char *nl = memchr(buf + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - buf - i) : n - i;
		json_error_t e;
		json_t *o = json_loadb(buf + i, len, JSON_ALLOW_NUL, &e);
		if (!json_is_object(o) || (want && !json_is_object(json_object_get(o, want))))
			abort();
		json_decref(o);
		i += len + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cuke_config cfg = { 0 };
	struct run fast, slow;
	struct jsonl_reader r1, r2;
	FILE *in1, *in2;
	int o, s1, s2;

	if (size < 2)
		return 0;
	o = data[0];
	cfg.has_min = o & 1;
	cfg.min_speedup = 1.0;
	cfg.has_max = o & 2;
	cfg.max_speedup = 3.0;
	cfg.require_correct = !!(o & 4);
	cfg.classify = !!(o & 8);
	cfg.levels = o & 16 ? 1u << 1 | 1u << 2 : 0;
	cfg.dedupe = (enum cuke_dedupe)((o >> 5) % 3);
	cfg.format = (enum cuke_format)((o >> 6) % 3);
	cfg.drop_deceptive = (o & 0x60) == 0x60;
	data++, size--;
	run_open(&fast, &cfg);
	cfg.no_fast = 1;
	run_open(&slow, &cfg);
	in1 = fmemopen((void *)data, size, "r");
	in2 = fmemopen((void *)data, size, "r");
	jsonl_reader_init(&r1, in1, "fuzz");
	jsonl_reader_init(&r2, in2, "fuzz");
	while ((s1 = jsonl_read_line(&r1)) > 0) {
		if ((s2 = jsonl_read_line(&r2)) != s1 || r1.len != r2.len)
			abort();
		check_scan(r1.line, r1.len);
		check_content(r1.line, r1.len);
		if (cuke_line(fast.c, &r1, &fast.sink) != cuke_line(slow.c, &r2, &slow.sink))
			abort();
		const struct cuke_stats *st = cuke_stats(fast.c);
		if (st->kept + cuke_rejected_total(st) != st->read)
			abort();
	}
	if (cuke_finish(fast.c, &fast.sink) < 0 || cuke_finish(slow.c, &slow.sink) < 0)
		abort();
	fflush(fast.out), fflush(fast.rej), fflush(slow.out), fflush(slow.rej);
	if (fast.olen != slow.olen || memcmp(fast.obuf, slow.obuf, fast.olen) ||
	    fast.rlen != slow.rlen || memcmp(fast.rbuf, slow.rbuf, fast.rlen))
		abort();
	lines_are(fast.obuf, fast.olen, cfg.format == CUKE_OUT_RECORDS ? "cuke" : NULL);
	lines_are(fast.rbuf, fast.rlen, NULL);
	jsonl_reader_free(&r1);
	jsonl_reader_free(&r2);
	fclose(in1);
	fclose(in2);
	run_close(&fast);
	run_close(&slow);
	return 0;
}
