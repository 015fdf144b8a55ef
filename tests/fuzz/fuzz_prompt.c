/* fuzz_prompt: libFuzzer target for the prompt builder (lib/prompt.c) and the prompts of
 * records (lib/sample_rec.c), which dice-sample and dice-rl render from user templates and
 * records.
 *
 * The input is parts parted by NUL bytes: a template, the text of the file `a` it may include
 * ({{> a}}), then a record (JSON). The template and `a` are written to a temporary folder
 * ('/' read as '_', so that an include names a file of that folder alone; CR as a space and
 * no byte-order mark, so that the text is the file's as written). Invariants: the template
 * loads unless an include names a file that is not there; its placeholders are distinct
 * names [A-Za-z_][A-Za-z0-9_]*; filled with a marker each, it gives exactly what a second,
 * plain reading of the syntax in prompt.h gives (placeholders in values not expanded, the
 * file's last newline and an include's final newlines dropped); a value missing or one too
 * many is refused with a message. A record's prompt (the built-in templates, through the
 * Qwen3 tokenizer of $DICE_TOKENIZER, default build/qwen3) either fails with a message or
 * gives ids inside the vocabulary and a text in the chat turns that holds the record's ref,
 * prefix and suffix (or prompt) verbatim; the same record gives the same prompt twice.
 * Build and run: sh tests/fuzz/run.sh prompt (tests/fuzz/seed.py seeds it with the built-in
 * templates, their includes read as `a`, and records of tests/fixtures/cuke/dataset.jsonl). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prompt.h"
#include "sample_rec.h"
#include "tokenizer.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static struct tokenizer qwen;
static int have_qwen;

static void cleanup(void)
{
	char path[128];

	snprintf(path, sizeof path, "%s/t.txt", dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/a", dir);
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tk = getenv("DICE_TOKENIZER");
	char err[512];

	(void)argc, (void)argv;
	setenv("DICE_SHARE", "share", 0);    /* run.sh runs from the source tree */
	snprintf(dir, sizeof dir, "/tmp/fuzz_prompt.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	atexit(cleanup);
	have_qwen = tokenizer_load(&qwen, tk ? tk : "build/qwen3", err, sizeof err) == 0;
	if (!have_qwen)
		fprintf(stderr, "fuzz_prompt: %s; records are skipped\n", err);
	return 0;
}

static void write_file(const char *name, const char *s, size_t n)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (!(f = fopen(path, "wb")) || fwrite(s, 1, n, f) != n || fclose(f))
		abort();
}

static int blank(char c)
{
	return c == ' ' || c == '\t';
}

/* The template s[0..n) filled by the syntax of prompt.h: placeholder k (in order of first
 * appearance) by "<k>", {{> a}} by inc. NULL when an include names another file. Sets
 * *names to the placeholders' count. */
static char *model(const char *s, size_t n, const char *inc, size_t ninc, char **names,
                   size_t *nnames)
{
	struct buf out;
	size_t n0 = n;

	buf_init(&out);
	*nnames = 0;
	if (n && s[n - 1] == '\n')
		n--;
	for (size_t i = 0; i < n;) {
		size_t j = i + 2, b, e;
		int include;

		if (i + 1 >= n || s[i] != '{' || s[i + 1] != '{')
			goto literal;
		while (j < n && blank(s[j]))
			j++;
		include = j < n && s[j] == '>';
		if (include) {
			for (j++; j < n && blank(s[j]); j++)
				;
			for (b = j; j < n && !isspace((unsigned char)s[j]) && s[j] != '}'; j++)
				;
		} else {
			b = j;
			if (j < n && (isalpha((unsigned char)s[j]) || s[j] == '_'))
				for (; j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'); j++)
					;
		}
		e = j;
		while (j < n && blank(s[j]))
			j++;
		if (e == b || j + 1 >= n || s[j] != '}' || s[j + 1] != '}')
			goto literal;
		if (include) {
			size_t m = ninc;
			const char *f = inc;
			if (e - b == 5 && !memcmp(s + b, "t.txt", 5)) {
				f = s;          /* the template itself, as written */
				m = n0;
			} else if (e - b != 1 || s[b] != 'a') {
				buf_free(&out);
				return NULL;
			}
			while (m && f[m - 1] == '\n')
				m--;
			buf_add(&out, f, m);
		} else {
			size_t k;
			for (k = 0; k < *nnames; k++)
				if (strlen(names[k]) == e - b && !memcmp(names[k], s + b, e - b))
					break;
			if (k == *nnames)
				names[(*nnames)++] = xstrndup(s + b, e - b);
			buf_addf(&out, "<%zu>", k);
		}
		i = j + 2;
		continue;
literal:
		buf_add(&out, s + i, 1);
		i++;
	}
	char *r = buf_detach(&out, NULL);
	buf_free(&out);         /* buf_detach starts it again */
	return r;
}

static void check_template(char *tpl, size_t n, char *inc, size_t ninc)
{
	char err[512], *names[4096], *want, *got, path[128];
	const char *keys[4097], *vals[4097];
	char (*marks)[24];
	size_t nn;
	struct prompt_template *t;

	for (size_t i = 0; i < n; i++)
		if (tpl[i] == '/' || tpl[i] == '\r')
			tpl[i] = tpl[i] == '/' ? '_' : ' ';
	for (size_t i = 0; i < ninc; i++)
		if (inc[i] == '\r')
			inc[i] = ' ';
	if (n >= 3 && !memcmp(tpl, "\xef\xbb\xbf", 3))
		tpl[0] = ' ';
	if (ninc >= 3 && !memcmp(inc, "\xef\xbb\xbf", 3))
		inc[0] = ' ';
	write_file("t.txt", tpl, n);
	write_file("a", inc, ninc);
	want = model(tpl, n, inc, ninc, names, &nn);
	snprintf(path, sizeof path, "%s/t.txt", dir);
	t = prompt_load(path, err, sizeof err);
	if (!want || !t) {
		if (want || t || !strstr(err, "cannot include"))
			abort();
		goto out;
	}
	if (prompt_nplaceholders(t) != nn)
		abort();
	marks = xmalloc((nn + 1) * sizeof *marks);
	for (size_t k = 0; k < nn; k++) {
		const char *p = prompt_placeholder(t, k);
		if (!p || strcmp(p, names[k]) || !prompt_has_placeholder(t, p))
			abort();
		snprintf(marks[k], sizeof marks[k], "<%zu>", k);
		keys[k] = names[k], vals[k] = marks[k];
	}
	if (!(got = prompt_fill(t, keys, vals, nn, err, sizeof err)) || strcmp(got, want))
		abort();
	free(got);
	/* a value that looks like a placeholder stays as it is */
	if (nn) {
		vals[0] = "{{ref}}";
		got = prompt_fill(t, keys, vals, nn, err, sizeof err);
		if (!got || !strstr(got, "{{ref}}"))
			abort();
		free(got);
		vals[0] = marks[0];
	}
	/* one missing, one too many: refused with a message */
	err[0] = '\0';
	if (nn && (prompt_fill(t, keys, vals, nn - 1, err, sizeof err) || !err[0]))
		abort();
	keys[nn] = "no such name", vals[nn] = "x";
	err[0] = '\0';
	if (prompt_fill(t, keys, vals, nn + 1, err, sizeof err) || !err[0])
		abort();
	free(marks);
	prompt_free(t);
out:
	for (size_t k = 0; k < nn; k++)
		free(names[k]);
	free(want);
}

static void check_record(const char *js, size_t n, int chat)
{
	json_error_t e;
	json_t *rec = json_loadb(js, n, 0, &e);
	struct sample_rec s;
	char err[512], *text = NULL, *text2 = NULL;
	int *ids = NULL, *ids2 = NULL, nids = 0, nids2 = 0, r;

	if (!json_is_object(rec)) {
		json_decref(rec);
		return;
	}
	sample_rec_init(&s, &qwen, chat ? PROMPT_CHAT_NONE : PROMPT_CHAT_QWEN3, 0);
	err[0] = '\0';
	r = sample_rec_prompt_text(&s, rec, &text, &ids, &nids, err, sizeof err);
	if (r < 0) {
		if (!err[0] || ids || text)
			abort();
	} else {
		const char *ref = json_string_value(json_object_get(rec, "ref"));
		const char *pr = json_string_value(json_object_get(rec, "prompt"));
		int vocab = tokenizer_vocab_size(&qwen);
		for (int i = 0; i < nids; i++)
			if (ids[i] < 0 || (text && ids[i] >= vocab))
				abort();
		if (text && ref && !memchr(ref, '\0', json_string_length(json_object_get(rec, "ref"))) &&
		    !strstr(text, ref))
			abort();
		if (text && !ref && pr && !memchr(pr, '\0', json_string_length(json_object_get(rec,
		    "prompt"))) && !json_is_array(json_object_get(rec, "messages")) &&
		    !strstr(text, pr))
			abort();
		if (text && !chat && strncmp(text, "<|im_start|>", 12))
			abort();
		if (sample_rec_prompt_text(&s, rec, &text2, &ids2, &nids2, err, sizeof err) < 0 ||
		    nids2 != nids || memcmp(ids, ids2, (size_t)nids * sizeof *ids) ||
		    (text ? !text2 || strcmp(text, text2) : !!text2))
			abort();
	}
	free(text), free(text2), free(ids), free(ids2);
	sample_rec_free(&s);
	json_decref(rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = xmalloc(size + 1), *part[3] = { NULL, NULL, NULL };
	size_t len[3] = { 0, 0, 0 }, np = 0, start = 0;

	memcpy(copy, data, size);
	copy[size] = '\0';
	for (size_t i = 0; i <= size && np < 3; i++) {
		if (i == size || (copy[i] == '\0' && np < 2)) {
			part[np] = copy + start;
			len[np++] = i - start;
			start = i + 1;
		}
	}
	check_template(part[0], len[0], np > 1 ? part[1] : (char *)"", np > 1 ? len[1] : 0);
	if (np > 2 && have_qwen)
		check_record(part[2], len[2], size && data[size - 1] == '\n');
	free(copy);
	return 0;
}
