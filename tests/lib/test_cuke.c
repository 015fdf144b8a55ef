/* test_cuke: the curation logic of cuke-filter: the raw-line scanner against jansson on
 * hand-written edge cases, speedup lookup, histogram edges, level classification of the
 * references in tests/fixtures/cuke/refs, the infill split of tests/fixtures/cuke/kernels,
 * the dedupe key and the SFT response round trip. */
#include <stdlib.h>
#include <string.h>

#include "cuke.h"
#include "extract.h"
#include "jsonl.h"
#include "rng.h"
#include "test.h"
#include "util.h"

#define FIX "tests/fixtures/cuke/"

/* scanner and tree agree; want_fast: whether the scanner must accept the line */
static void same_fields(const char *line, int want_fast, const char *what)
{
	struct cuke_fields a, b;
	json_error_t e;
	json_t *rec = json_loads(line, 0, &e);
	int fast = cuke_fields_scan(line, strlen(line), &a);
	char msg[200];

	snprintf(msg, sizeof msg, "scan %s: %s", want_fast ? "accepts" : "declines", what);
	CHECK(fast == want_fast, msg);
	if (!fast || !rec)
		goto out;
	cuke_fields_from_json(rec, &b);
	int same = a.has_cuke == b.has_cuke && !!a.nkeys == !!b.nkeys;
	for (int i = 0; i < CUKE_F_N; i++)
		same &= a.v[i].kind == b.v[i].kind && a.v[i].num == b.v[i].num;
	snprintf(msg, sizeof msg, "scan == jansson: %s", what);
	CHECK(same, msg);
out:
	json_decref(rec);
}

static void test_scan(void)
{
	same_fields("{\"speedup\":2.0,\"correct\":true}", 1, "plain");
	same_fields("  {\"speedup\" : 1.99 , \"correct\" : false }  ", 1, "white space");
	same_fields("{\"speedup\":-0,\"correct\":null}", 1, "-0 and null");
	same_fields("{\"speedup\":\"2.5\",\"correct\":\"yes\"}", 1, "wrong types");
	same_fields("{\"speedup\":1,\"speedup\":3}", 1, "duplicate key: last wins");
	same_fields("{\"eval\":{\"speedup\":2.5},\"eval\":7}", 1, "eval replaced by a non-object");
	same_fields("{\"eval\":{\"speedup\":2.5,\"correct\":true,\"ref_ms\":1e2,\"kernel_ms\":5E-1}}", 1,
	            "eval fields");
	same_fields("{\"a\":[1,{\"speedup\":9}],\"b\":{\"eval\":{\"speedup\":9}}}", 1,
	            "nested keys are not top-level");
	same_fields("{\"s\":\"\\u00e9\\n\\\"\\\\ \xc3\xa9\",\"speedup\":123456789012345678}", 1,
	            "escapes, UTF-8, 18-digit integer");
	same_fields("{}", 1, "empty object");
	same_fields("{\"cuke\":{}}", 1, "cuke key seen");
	same_fields("{\"sp\\u0065edup\":2}", 0, "escaped key");
	same_fields("{\"speedup\":1234567890123456789}", 0, "19-digit integer");
	same_fields("{\"speedup\":1e400}", 0, "huge exponent");
	same_fields("{\"s\":\"\\u0000\"}", 0, "\\u0000");
	same_fields("{\"s\":\"\\ud800\"}", 0, "lone surrogate");
	same_fields("{\"speedup\":01}", 0, "leading zero");
	same_fields("{\"speedup\":2,}", 0, "trailing comma");
	same_fields("{\"speedup\":2} x", 0, "trailing garbage");
	same_fields("[1]", 0, "not an object");
	same_fields("{\"s\":\"\xff\"}", 0, "invalid UTF-8");
	same_fields("{\"s\":\"a\tb\"}", 0, "raw control character");
	same_fields("{\"speedup\":.5}", 0, "number without integer part");
	same_fields("{\"speedup\":tru}", 0, "bad literal");

	/* deep nesting: accepted below the scanner's limit, declined above */
	struct buf b;
	buf_init(&b);
	buf_adds(&b, "{\"a\":");
	for (int i = 0; i < 100; i++)
		buf_addc(&b, '[');
	for (int i = 0; i < 100; i++)
		buf_addc(&b, ']');
	buf_addc(&b, '}');
	same_fields(b.p, 0, "100 levels of nesting");
	buf_free(&b);

	/* long strings cross the 16- and 8-byte steps at every alignment */
	for (int pad = 0; pad < 20; pad++) {
		buf_init(&b);
		buf_adds(&b, "{\"k\":\"");
		for (int i = 0; i < 100 + pad; i++)
			buf_addc(&b, i % 37 == 5 ? '\\' : 'x'), (i % 37 == 5 ? buf_addc(&b, 'n') : (void)0);
		buf_adds(&b, "\",\"speedup\":2.5}");
		struct cuke_fields f;
		int ok = cuke_fields_scan(b.p, b.len, &f);
		if (pad == 0 || pad == 19)
			CHECK(ok && f.v[CUKE_F_SPEEDUP].num == 2.5, "speedup after a long string");
		buf_free(&b);
	}
}

/* Random damage to real records: whenever the scanner accepts a line, jansson must accept it
 * too and give the same fields (the two paths then write the same bytes). */
static void test_scan_mutations(void)
{
	static const char bytes[] = "{}[]\":,.-+0123456789eE \\ntfu\x01\xc3\xa9\xff";
	const char *files[] = { FIX "dataset.jsonl", "tests/cuke-filter/023-wrong-types/input.jsonl" };
	struct rng g;
	int accepted = 0, agree = 1, declined = 0;

	rng_seed(&g, 42);
	for (size_t fi = 0; fi < ARRAY_LEN(files); fi++) {
		size_t len;
		char *text = util_read_file(files[fi], &len);
		if (!text)
			continue;
		for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
			size_t n = strlen(line);
			for (int k = 0; k < 150; k++) {
				struct buf b;
				buf_init(&b);
				buf_add(&b, line, n);
				int edits = 1 + (int)rng_below(&g, 3);
				for (int e = 0; e < edits && b.len; e++) {
					size_t at = (size_t)rng_below(&g, b.len);
					char c = bytes[rng_below(&g, sizeof bytes - 1)];
					switch (rng_below(&g, 3)) {
					case 0: b.p[at] = c; break;                   /* replace */
					case 1: memmove(b.p + at, b.p + at + 1, b.len - at - 1); /* delete */
						b.p[--b.len] = '\0'; break;
					default: buf_addc(&b, 0);                      /* insert */
						memmove(b.p + at + 1, b.p + at, b.len - at - 1);
						b.p[at] = c;
					}
				}
				struct cuke_fields a, t;
				if (cuke_fields_scan(b.p, b.len, &a)) {
					accepted++;
					json_t *rec = json_loadb(b.p, b.len, 0, NULL);
					if (!rec || !json_is_object(rec) || !utf8_valid(b.p, b.len)) {
						agree = 0;
						printf("# scanner accepts what jansson refuses: %.80s\n", b.p);
					} else {
						cuke_fields_from_json(rec, &t);
						for (int i = 0; i < CUKE_F_N; i++)
							if (a.v[i].kind != t.v[i].kind || a.v[i].num != t.v[i].num)
								agree = 0;
						if (a.has_cuke != t.has_cuke || !!a.nkeys != !!t.nkeys)
							agree = 0;
					}
					json_decref(rec);
				} else {
					declined++;
				}
				buf_free(&b);
			}
		}
		free(text);
	}
	printf("# mutations: %d accepted by the scanner, %d declined\n", accepted, declined);
	CHECK(agree && accepted > 100 && declined > 100, "scanner agrees with jansson on damaged records");
}

static double speedup_of(const char *line, int *st, const char **from)
{
	struct cuke_fields f;
	double s = 0;
	json_t *rec = json_loads(line, 0, NULL);
	cuke_fields_from_json(rec, &f);
	*st = cuke_speedup(&f, &s, from);
	json_decref(rec);
	return s;
}

static void test_speedup(void)
{
	const char *from;
	int st;
	double s;

	s = speedup_of("{\"speedup\":2.5,\"eval\":{\"speedup\":9}}", &st, &from);
	CHECK(st == 1 && s == 2.5 && !strcmp(from, "speedup"), "speedup wins over eval.speedup");
	s = speedup_of("{\"speedup\":null,\"eval\":{\"speedup\":3}}", &st, &from);
	CHECK(st == 1 && s == 3 && !strcmp(from, "eval.speedup"), "null speedup: eval.speedup");
	s = speedup_of("{\"ref_ms\":6,\"kernel_ms\":2}", &st, &from);
	CHECK(st == 1 && s == 3 && !strcmp(from, "ref_ms/kernel_ms"), "ref_ms/kernel_ms");
	s = speedup_of("{\"eval\":{\"ref_ms\":5,\"kernel_ms\":2}}", &st, &from);
	CHECK(st == 1 && s == 2.5, "eval.ref_ms/eval.kernel_ms");
	speedup_of("{\"ref_ms\":6}", &st, &from);
	CHECK(st == -1, "ref_ms without kernel_ms is bad");
	speedup_of("{\"ref_ms\":6,\"kernel_ms\":0}", &st, &from);
	CHECK(st == -1, "kernel_ms 0 is bad");
	speedup_of("{\"speedup\":\"2\"}", &st, &from);
	CHECK(st == -1, "string speedup is bad");
	speedup_of("{\"speedup\":0}", &st, &from);
	CHECK(st == -1, "speedup 0 is bad");
	speedup_of("{\"id\":1}", &st, &from);
	CHECK(st == 0, "no speedup at all");
}

static void test_bins(void)
{
	static const struct { double s; int bin; } t[] = {
		{ 0.5, 0 }, { 0.999, 0 }, { 1.0, 1 }, { 1.49, 1 }, { 1.5, 2 }, { 1.99, 2 },
		{ 2.0, 3 }, { 2.01, 3 }, { 2.5, 4 }, { 3.0, 4 }, { 3.0000001, 5 }, { 100, 5 },
	};
	for (size_t i = 0; i < ARRAY_LEN(t); i++) {
		char msg[64];
		snprintf(msg, sizeof msg, "speedup %g in bin %s", t[i].s, cuke_bin_names[t[i].bin]);
		CHECK(cuke_bin(t[i].s) == t[i].bin, msg);
	}
}

static char *fixture(const char *name, size_t *len)
{
	char *p = xasprintf(FIX "%s", name);
	char *s = util_read_file(p, len);
	free(p);
	return s;
}

static void test_classify(void)
{
	static const struct { const char *file; int level; } t[] = {
		{ "refs/l1_relu.py", 1 }, { "refs/l1_conv2d.py", 1 }, { "refs/l1_add.py", 1 },
		{ "refs/l1_softmax.py", 1 }, { "refs/l1_sum.py", 1 },
		{ "refs/l2_gemm_relu_scale.py", 2 }, { "refs/l2_conv_bn_relu.py", 2 },
		{ "refs/l2_matmul_add_gelu.py", 2 }, { "refs/l2_norm_div.py", 2 },
		{ "refs/l2_gemm_max_sub_gelu.py", 2 },
		{ "refs/l3_mlp.py", 3 }, { "refs/l3_lenet.py", 3 }, { "refs/l3_block.py", 3 },
		{ "refs/l3_rnn.py", 3 }, { "refs/none_no_model.py", -1 },
	};
	for (size_t i = 0; i < ARRAY_LEN(t); i++) {
		size_t len;
		char *src = fixture(t[i].file, &len);
		struct cuke_level lv;
		char msg[128];
		int got = src ? cuke_classify(src, len, &lv) : -2;
		snprintf(msg, sizeof msg, "%s is level %d", t[i].file, t[i].level);
		CHECK(got == t[i].level, msg);
		if (got != t[i].level)
			printf("#   got %d (%s, %d ops)\n", got, src ? lv.why : "no file", lv.ops);
		free(src);
	}
}

static void test_split(void)
{
	static const struct { const char *file; int ok; } t[] = {
		{ "kernels/good_relu.py", 1 }, { "kernels/good_concat.py", 1 },
		{ "kernels/bad_no_cuda.py", 0 }, { "kernels/bad_two_sources.py", 0 },
		{ "kernels/bad_def_first.py", 0 }, { "kernels/bad_no_modelnew.py", 0 },
	};
	for (size_t i = 0; i < ARRAY_LEN(t); i++) {
		size_t len, a = 0, b = 0;
		const char *why;
		char *src = fixture(t[i].file, &len);
		char msg[128];
		int got = src ? cuke_split(src, len, &a, &b, &why) : -2;
		snprintf(msg, sizeof msg, "%s %s", t[i].file, t[i].ok ? "splits" : "does not split");
		CHECK((got == 0) == t[i].ok, msg);
		if (got == 0 && t[i].ok) {
			CHECK(a < b && b <= len && (a == 0 || src[a - 1] == '\n'), "middle starts a line");
			CHECK(memmem(src + a, b - a, "__global__", 10) != NULL, "middle holds the kernel");
			CHECK(memmem(src, a, "import torch", 12) != NULL, "prefix holds the imports");
			CHECK(memmem(src + b, len - b, "class ModelNew", 14) != NULL, "suffix holds ModelNew");
		} else if (got < 0) {
			printf("#   %s: %s\n", t[i].file, why);
		}
		free(src);
	}
}

static void test_dedupe_key(void)
{
	const char *r1 = "import torch\nx = torch.relu(y)  # comment\n";
	const char *r2 = "import torch\n\n\nx  =  torch.relu( y )\n";
	const char *r3 = "import torch\nx = torch.tanh(y)\n";
	const char *k1 = "s = \"\"\"__global__ void k() {}\"\"\"\n";
	const char *k2 = "s = \"\"\"__global__   void k() { }\"\"\"   # same\n";
	unsigned long long a = cuke_dedupe_key(r1, strlen(r1), k1, strlen(k1));
	CHECK(a == cuke_dedupe_key(r2, strlen(r2), k2, strlen(k2)),
	      "comments and white space do not change the key");
	CHECK(a != cuke_dedupe_key(r3, strlen(r3), k1, strlen(k1)), "another op changes the key");
	CHECK(cuke_dedupe_key(r1, strlen(r1), NULL, 0) == cuke_dedupe_key(r2, strlen(r2), NULL, 0),
	      "ref-only key");
	CHECK(a != cuke_dedupe_key(r1, strlen(r1), NULL, 0), "ref-only key differs from pair key");
}

static void test_sft(void)
{
	size_t len;
	char *k = fixture("kernels/good_relu.py", &len);
	char *resp = cuke_sft_response(k, len);
	char *back = extract_code(resp, strlen(resp));
	while (len && k[len - 1] == '\n')
		k[--len] = '\0';
	CHECK_STR(back, k, "extract(response) == kernel");
	free(back);
	free(resp);
	free(k);
}

int main(void)
{
	test_scan();
	test_scan_mutations();
	test_speedup();
	test_bins();
	test_classify();
	test_split();
	test_dedupe_key();
	test_sft();
	return test_done();
}
