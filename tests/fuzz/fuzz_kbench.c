/* fuzz_kbench: libFuzzer target for what lib/kbench.c reads from records and command lines:
 * problem names (kbench_parse_path, kbench_find_level_num), -L/-p sets (kbench_ranges_parse,
 * kbench_levels_parse), --fail-under specs (kbench_thresholds_parse), and the evaluated
 * records kbench-eval --report tallies (kbench_tally_record, kbench_tally_rows).
 *
 * The input is JSONL: every line that is a JSON object is a record for the tally (robust
 * when the first byte is odd); every line is also a problem name, a set and a spec.
 * Invariants: a name parsed holds a level 0..KBENCH_MAX_LEVEL and a number 0..1000000, and a
 * path kbench_parse_path takes, kbench_find_level_num finds too, again from its *at; a set
 * parsed is ordered pairs inside its bounds that print and parse back to the same set and
 * hold their ends; a record tallied adds one sample (refused: one failed sample, or one
 * unplaced record, with a reason), whose speedup is 0..KBENCH_MAX_SPEEDUP, and a refused
 * one is never counted correct; the rows are fractions in [0, 1], fast_0 == exec, fast_p
 * not rising with p, pass@k not under the mean, samples adding up to the tally's, a finite
 * geometric mean, and JSON that serializes.
 * Build and run: sh tests/fuzz/run.sh kbench (seed it with records of
 * tests/fixtures/cuke/dataset.jsonl given an eval object, and problem names). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "util.h"

static void check_name(const char *s)
{
	int lv, nm, lv2, nm2;
	const char *at;

	if (kbench_find_level_num(s, &lv, &nm, &at) == 0) {
		if (lv < 0 || lv > KBENCH_MAX_LEVEL || nm < 0 || nm > 1000000 || at < s ||
		    strncmp(at, "level", 5))
			abort();
		if (kbench_find_level_num(at, &lv2, &nm2, NULL) != 0 || lv2 != lv || nm2 != nm)
			abort();
	}
	if (kbench_parse_path(s, &lv, &nm) == 0) {
		if (lv < 0 || lv > KBENCH_MAX_LEVEL || nm < 0 || nm > 1000000)
			abort();
		if (kbench_find_level_num(s, &lv2, &nm2, NULL) != 0)
			abort();
	}
}

static void check_ranges(const char *s, int levels)
{
	struct kbench_ranges rs, back;
	long max = levels ? KBENCH_MAX_LEVEL : 1000000;
	struct buf b;

	if ((levels ? kbench_levels_parse(&rs, s) : kbench_ranges_parse(&rs, s)) < 0)
		return;
	if (!rs.n)
		abort();
	buf_init(&b);
	for (size_t i = 0; i < rs.n; i++) {
		if (rs.r[i][0] < 0 || rs.r[i][0] > rs.r[i][1] || rs.r[i][1] > max ||
		    !kbench_ranges_has(&rs, rs.r[i][0]) || !kbench_ranges_has(&rs, rs.r[i][1]))
			abort();
		buf_addf(&b, "%s%ld-%ld", i ? "," : "", rs.r[i][0], rs.r[i][1]);
	}
	if (kbench_ranges_parse(&back, b.p) < 0 || back.n != rs.n ||
	    memcmp(back.r, rs.r, rs.n * sizeof *rs.r))
		abort();
	kbench_ranges_free(&back);
	kbench_ranges_free(&rs);
	buf_free(&b);
}

static void check_thresholds(const char *s)
{
	struct kbench_threshold *th;
	size_t n;

	if (kbench_thresholds_parse(s, &th, &n) < 0) {
		if (th || n)
			abort();
		return;
	}
	if (!n)
		abort();
	for (size_t i = 0; i < n; i++)
		if (!th[i].name[0] || !(th[i].min >= 0 && th[i].min <= 1e9))
			abort();
	free(th);
}

static int frac(double x)
{
	return x >= 0 && x <= 1 + 1e-9;
}

static void check_rows(const struct kbench_tally *t)
{
	struct kbench_row *rows;
	size_t n = kbench_tally_rows(t, NULL, NULL, NULL, &rows);
	int samples = 0;

	for (size_t i = 0; i < n; i++) {
		const struct kbench_row *r = &rows[i];

		if (r->level < 0 || r->level > KBENCH_MAX_LEVEL || (i && r->level <= rows[i - 1].level))
			abort();
		if (r->n < 1 || r->samples < r->n || r->k < 1 || r->k > r->samples)
			abort();
		if (!frac(r->exec) || !frac(r->pass_exec) || !frac(r->pass_fast1) ||
		    fabs(r->fast[0] - r->exec) > 1e-9 || r->pass_exec < r->exec - 1e-9 ||
		    r->pass_fast1 < r->fast[3] - 1e-9)
			abort();
		for (int p = 0; p < KBENCH_NFAST; p++)
			if (!frac(r->fast[p]) || (p && r->fast[p] > r->fast[p - 1] + 1e-9))
				abort();
		if (!isfinite(r->geomean) || r->geomean < 0 || r->geomean > KBENCH_MAX_SPEEDUP * 1.0001 ||
		    (r->n_speedup == 0) != (r->geomean == 0))
			abort();
		json_t *j = kbench_row_json(r);
		char *s = j ? json_dumps(j, 0) : NULL;
		if (!s)
			abort();
		free(s);
		json_decref(j);
		samples += r->samples;
	}
	if ((size_t)samples != t->n)
		abort();
	free(rows);
}

static void check_record(struct kbench_tally *t, const json_t *rec, int robust)
{
	size_t n = t->n, unplaced = t->unplaced;
	const char *why = NULL;
	int r = kbench_tally_record(t, rec, robust, &why);

	if (r == 0) {
		if (t->n != n + 1 || t->unplaced != unplaced ||
		    !json_is_boolean(json_object_get(json_object_get(rec, "eval"), "correct")))
			abort();
	} else {
		if (r != -1 || !why || !*why)
			abort();
		if (t->n == n + 1 ? t->unplaced != unplaced || t->e[n].correct
		                  : t->n != n || t->unplaced > unplaced + 1)
			abort();
	}
	if (t->n > n) {
		const struct kbench_tally_entry *e = &t->e[n];
		if (e->level < 0 || e->level > KBENCH_MAX_LEVEL || !e->key ||
		    !(e->speedup >= 0 && e->speedup <= KBENCH_MAX_SPEEDUP))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kbench_tally t;
	int robust = size && (data[0] & 1);
	size_t i = 0;

	kbench_tally_init(&t);
	while (i < size) {
		const char *line = (const char *)data + i, *nl = memchr(line, '\n', size - i);
		size_t len = nl ? (size_t)(nl - line) : size - i;
		char *s = xstrndup(line, len);
		json_error_t e;
		json_t *rec = json_loadb(line, len, JSON_DECODE_ANY, &e);

		i += len + 1;
		check_name(s);
		check_ranges(s, 0);
		check_ranges(s, 1);
		check_thresholds(s);
		if (json_is_object(rec))
			check_record(&t, rec, robust);
		json_decref(rec);
		free(s);
	}
	check_rows(&t);
	kbench_tally_free(&t);
	return 0;
}
