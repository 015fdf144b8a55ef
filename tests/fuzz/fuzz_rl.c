/* fuzz_rl: libFuzzer target for dice-rl's task records (lib/rl_run.c): the task list read
 * from JSONL (rl_tasks_add), levels (rl_task_level) and the easy-to-hard order (--order
 * level, rl_tasks_sort_level), infilling tasks (rl_task_infill, rl_task_infill_bad), the
 * prompt of a task in each stage (rl_task_prompt_len), and the parts of lib/sample_rec.c
 * fuzz_prompt leaves out: a .py operand's record (sample_rec_from_py) and the completion
 * text and fields of ids (sample_rec_text, sample_rec_text_fields).
 *
 * The input is JSONL, read as dice-rl reads it (lib/jsonl.h); prompts go through the Qwen3
 * tokenizer of $DICE_TOKENIZER (default build/qwen3; without it only prompt_ids tasks have
 * one). Invariants: every record is one task, in file order, with its line's bytes and
 * "file:line"; a task's level is `level` (null: absent), else `cuke.level`, read as an
 * integral number or a string [level][+-]digits inside the int range (INT_MAX excluded),
 * INT_MAX when absent or unreadable, and rl_task_level says which; the level order is a
 * permutation of the tasks (none lost, none twice), by level, ties in file order; a task is
 * an infilling one, or has a reason it is not (then it has a ref and a prefix or suffix), or
 * neither, never both; its prompt in a stage is a length or a one-line error, the same when
 * asked again (an input's first task: a KernelBench prompt is long to encode), the
 * prompt_ids as given, the end-to-end one that of the record without prefix and suffix;
 * the text of ids is valid UTF-8 and the completion field holds it; the first line read as
 * a .py file is a record whose ref is that line (repaired to valid UTF-8).
 * Found: rl_tasks_sort_level handed qsort a NULL list when there were no tasks (UB).
 * Build and run: sh tests/fuzz/run.sh rl (seeds: tests/fuzz/seed.py rl). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "rl_run.h"
#include "sample_rec.h"
#include "tokenizer.h"
#include "util.h"

#include "fuzz_qwen.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tokenizer qwen;
static int have_qwen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	setenv("DICE_SHARE", "share", 0);    /* run.sh runs from the source tree */
	have_qwen = fuzz_qwen_load(&qwen, "fuzz_rl", "text prompts are refused");
	return 0;
}

/* the level of v by the rule above, a second reading: 0 with *lv, or -1 */
static int model_level_value(const json_t *v, int *lv)
{
	const char *s = json_string_value(v);
	double x;
	long l = 0;
	int neg = 0;

	if (json_is_integer(v)) {
		x = (double)json_integer_value(v);
	} else if (json_is_real(v)) {
		x = json_real_value(v);
	} else if (s) {
		if (!strncmp(s, "level", 5))
			s += 5;
		if (*s == '+' || *s == '-')
			neg = *s++ == '-';
		if (!*s || strspn(s, "0123456789") != strlen(s))
			return -1;
		for (; *s; s++) {
			l = 10 * l + (*s - '0');
			if (l > (long)INT_MAX + 1)
				return -1;
		}
		l = neg ? -l : l;
		if (l < INT_MIN || l > INT_MAX - 1)
			return -1;
		*lv = (int)l;
		return 0;
	} else {
		return -1;
	}
	if (!(x >= INT_MIN && x <= INT_MAX - 1) || x != floor(x))
		return -1;
	*lv = (int)x;
	return 0;
}

static void check_level(const struct rl_task *t)
{
	const json_t *v = json_object_get(t->rec, "level"), *c = json_object_get(t->rec, "cuke");
	int lv = INT_MAX, want, got, r = rl_task_level(t->rec, &got);

	if (json_is_null(v))
		v = NULL;
	if (!v && json_is_object(c) && !json_is_null(json_object_get(c, "level")))
		v = json_object_get(c, "level");
	want = !v ? 1 : model_level_value(v, &lv) == 0 ? 0 : -1;
	if (r != want || got != lv || t->level != lv)
		abort();
}

static void check_infill(const json_t *rec)
{
	const char *why = rl_task_infill_bad(rec);
	const json_t *p = json_get_set(rec, "prefix"), *s = json_get_set(rec, "suffix");
	int inf = rl_task_infill(rec);

	if (inf && why)
		abort();
	if (why && (!*why || !json_get_set(rec, "ref") || (!p && !s)))
		abort();
	if (!inf && !why && (p || s))
		abort();
	if (!json_get_set(rec, "ref") && !inf)
		abort();
	if (json_is_string(p) && json_is_string(s) && !inf)
		abort();
}

static int prompt_len(struct rl_runner *r, const json_t *rec, int infill, char *err, size_t n)
{
	int len;

	err[0] = '\0';
	len = rl_task_prompt_len(r, rec, infill, err, n);
	if (len < 0 ? len != -1 || !err[0] || strchr(err, '\n') : !!err[0])
		abort();
	return len;
}

static void check_prompt(struct rl_runner *r, const json_t *rec, int again)
{
	char err[512];
	int save = r->sr->infill;

	for (int k = 0; k < 2; k++) {
		if (k && !rl_task_infill(rec))
			continue;
		int len = prompt_len(r, rec, k, err, sizeof err), *ids, n;
		if ((again && prompt_len(r, rec, k, err, sizeof err) != len) || r->sr->infill != save)
			abort();
		if (len < 0)
			continue;
		const json_t *pi = json_object_get(rec, "prompt_ids");
		if (json_is_array(pi) && (size_t)len != json_array_size(pi))
			abort();
		if (!k && json_get_set(rec, "ref") && !json_is_array(pi)) {
			/* the end-to-end prompt: the record's, without prefix and suffix */
			json_t *c = json_deep_copy(rec);
			json_object_del(c, "prefix");
			json_object_del(c, "suffix");
			if (sample_rec_prompt(r->sr, c, &ids, &n, err, sizeof err) < 0 || n != len)
				abort();
			char *text = sample_rec_text(r->sr, ids, n, -1);
			struct jsonl_field f[2];
			json_t *js = text ? json_string(text) : NULL;
			if (!js)
				abort();
			json_decref(js);
			sample_rec_text_fields(text, f);
			if (!f[0].val || strcmp(json_string_value(f[0].val), text))
				abort();
			json_decref(f[0].val), json_decref(f[1].val);
			free(text);
			free(ids);
			json_decref(c);
		}
	}
}

static void check_py(struct sample_rec *sr, const char *line, size_t len)
{
	json_t *rec = sample_rec_from_py("a.py", line, len);
	const json_t *ref = json_object_get(rec, "ref");
	struct buf b;
	char err[512];
	int *ids, n;

	buf_init(&b);
	utf8_repair(&b, line, len);
	if (!json_is_string(ref) || json_string_length(ref) != b.len ||
	    memcmp(json_string_value(ref), b.p, b.len) ||
	    strcmp(json_string_value(json_object_get(rec, "id")), "a.py"))
		abort();
	err[0] = '\0';
	if (sample_rec_prompt(sr, rec, &ids, &n, err, sizeof err) < 0) {
		if (!err[0] || strchr(err, '\n'))
			abort();
	} else {
		free(ids);
	}
	buf_free(&b);
	json_decref(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rl_tasks ts = { 0 };
	struct rl_runner r;
	struct sample_rec sr;
	struct jsonl_reader jr;
	json_t *rec;
	size_t *lines, nl = 0;
	FILE *fp;
	int st;

	if (!size)
		return 0;
	memset(&r, 0, sizeof r);
	sample_rec_init(&sr, have_qwen ? &qwen : NULL, PROMPT_CHAT_QWEN3, 0);
	sr.vocab = have_qwen ? tokenizer_vocab_size(&qwen) : 0;
	r.sr = &sr;
	if (!(fp = fmemopen((void *)data, size, "r")))
		abort();
	lines = xmalloc((size + 1) * sizeof *lines);
	jsonl_reader_init(&jr, fp, "fuzz");
	while ((st = jsonl_read(&jr, &rec)) != JSONL_EOF) {
		if (st == JSONL_IOERR)
			abort();
		if (jr.lineno == 1)
			check_py(&sr, jr.line, jr.len);
		if (st != JSONL_RECORD)
			continue;
		char *where = xasprintf("%s:%zu", jr.name, jr.lineno);
		rl_tasks_add(&ts, rec, jr.line, jr.len, where);
		lines[nl++] = jr.lineno;
		const struct rl_task *t = &ts.t[ts.n - 1];
		if (ts.n != nl || t->rec != rec || t->len != jr.len || memcmp(t->line, jr.line, jr.len) ||
		    t->line[t->len] || strcmp(t->where, where))
			abort();
		free(where);
		check_level(t);
		check_infill(rec);
		check_prompt(&r, rec, ts.n == 1);
	}
	jsonl_reader_free(&jr);
	fclose(fp);

	/* the level order */
	json_t **recs = xmalloc((ts.n ? ts.n : 1) * sizeof *recs);
	uint8_t *seen = xcalloc(ts.n ? ts.n : 1, 1);
	for (size_t i = 0; i < ts.n; i++)
		recs[i] = ts.t[i].rec;
	rl_tasks_sort_level(&ts);
	if (ts.n != nl)
		abort();
	for (size_t i = 0; i < ts.n; i++) {
		size_t k, lno;
		for (k = 0; k < nl && recs[k] != ts.t[i].rec; k++)
			;
		if (k == nl || seen[k] || sscanf(ts.t[i].where, "fuzz:%zu", &lno) != 1 ||
		    lno != lines[k])
			abort();
		seen[k] = 1;
		check_level(&ts.t[i]);
		if (i && (ts.t[i].level < ts.t[i - 1].level ||
		          (ts.t[i].level == ts.t[i - 1].level &&
		           strtoul(ts.t[i - 1].where + 5, NULL, 10) >= lno)))
			abort();
	}
	free(recs);
	free(seen);
	free(lines);
	rl_tasks_free(&ts);
	sample_rec_free(&sr);
	return 0;
}
