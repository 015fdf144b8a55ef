/* test_deceive: every rule on the kernels in tests/fixtures/deceive/.
 *
 * A fixture named bad-<rule>-N.py must raise <rule>; ok-<rule>-N.py must not. A first line
 * "# ref: FILE" names the reference passed along. ok-relu.py must raise nothing at all.
 * Then the API: rule selection, unknown names, the JSON shape, and damaged input (every
 * fixture cut and byte-flipped) that must never crash. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "deceive.h"
#include "test.h"
#include "util.h"

static char *dir;

static char *load(const char *name, size_t *len)
{
	char *path = xasprintf("%s/%s", dir, name);
	char *s = util_read_file(path, len);
	free(path);
	return s;
}

static int has_rule(const struct deceive_result *r, const char *rule)
{
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->findings[i].rule, rule))
			return 1;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* run one fixture; its ref comes from a "# ref: FILE" first line */
static void check_one(struct deceive_checker *c, const char *name, struct deceive_result *res)
{
	size_t len, rlen = 0;
	char *src = load(name, &len), *ref = NULL;

	if (!strncmp(src, "# ref: ", 7)) {
		char *e = strchr(src, '\n');
		char *rn = xstrndup(src + 7, (size_t)(e - src - 7));
		ref = load(rn, &rlen);
		free(rn);
	}
	deceive_check(c, src, len, ref, rlen, res);
	free(src);
	free(ref);
}

static void test_fixtures(void)
{
	struct deceive_checker *c = deceive_checker_new(NULL, NULL);
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0;
	int bad_per_rule[32] = { 0 }, ok_per_rule[32] = { 0 };

	CHECK(d != NULL, "fixture directory opens");
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);
		if (l > 3 && !strcmp(e->d_name + l - 3, ".py") && strncmp(e->d_name, "ref-", 4)) {
			names = xrealloc(names, (n + 1) * sizeof(*names));
			names[n++] = xstrdup(e->d_name);
		}
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		struct deceive_result res;
		const char *nm = names[i];
		int bad = !strncmp(nm, "bad-", 4);
		check_one(c, nm, &res);
		if (!strcmp(nm, "ok-relu.py")) {
			CHECK(res.n == 0 && !res.deceptive, "ok-relu.py: no finding at all");
		} else {
			int k, found = 0;
			for (k = 0; deceive_rules[k].name; k++) {
				const char *r = deceive_rules[k].name;
				size_t rl = strlen(r), off = bad ? 4 : 3;
				if (!strncmp(nm + off, r, rl) && nm[off + rl] == '-') {
					found = 1;
					break;
				}
			}
			CHECK(found, nm);
			if (found) {
				char *what = xasprintf("%s: %s %s", nm, deceive_rules[k].name,
				                       bad ? "found" : "not found");
				CHECK(has_rule(&res, deceive_rules[k].name) == bad, what);
				if (bad && deceive_rules[k].severity == DECEIVE_DECEPTIVE)
					CHECK(res.deceptive, "deceptive is set");
				free(what);
				(bad ? bad_per_rule : ok_per_rule)[k]++;
			}
		}
		deceive_result_free(&res);
		free(names[i]);
	}
	free(names);
	for (int k = 0; deceive_rules[k].name; k++) {
		char *what = xasprintf("%s: at least two deceptive and two clean fixtures", deceive_rules[k].name);
		CHECK(bad_per_rule[k] >= 2 && ok_per_rule[k] >= 2, what);
		free(what);
	}
	deceive_checker_free(c);
}

static void test_api(void)
{
	const char *bad = NULL;
	struct deceive_checker *c;
	struct deceive_result res;
	size_t len;
	char *src;
	int n;

	for (n = 0; deceive_rules[n].name; n++)
		CHECK(deceive_rules[n].description && *deceive_rules[n].description, deceive_rules[n].name);
	CHECK(n == 15, "fifteen rules");
	CHECK(deceive_checker_new("kernel-not-called,nope", &bad) == NULL && bad && !strcmp(bad, "nope"),
	      "unknown rule named");

	/* only the selected rule runs */
	c = deceive_checker_new("torch-compute", NULL);
	src = load("bad-kernel-not-called-1.py", &len);
	deceive_check(c, src, len, NULL, 0, &res);
	CHECK(res.n == 1 && !strcmp(res.findings[0].rule, "torch-compute") && !res.deceptive,
	      "--rules keeps one rule; a warning is not deceptive");
	deceive_result_free(&res);
	deceive_checker_free(c);

	c = deceive_checker_new(NULL, NULL);
	deceive_check(c, src, len, NULL, 0, &res);
	json_t *j = deceive_result_json(&res);
	json_t *f = json_array_get(json_object_get(j, "findings"), 0);
	CHECK(json_is_true(json_object_get(j, "deceptive")), "json deceptive");
	CHECK(f && !strcmp(json_string_value(json_object_get(f, "rule")), "kernel-not-called") &&
	      !strcmp(json_string_value(json_object_get(f, "severity")), "deceptive") &&
	      json_integer_value(json_object_get(f, "line")) == 32 &&
	      json_is_string(json_object_get(f, "message")), "json finding fields");
	json_decref(j);
	deceive_result_free(&res);

	/* damaged input: cuts and flipped bytes never crash, messages stay valid UTF-8 */
	unsigned long long s = 42;
	int ok = 1;
	for (int round = 0; round < 300; round++) {
		char *m = xmalloc(len + 1);
		memcpy(m, src, len);
		size_t cut = (size_t)(s % (len + 1));
		for (int k = 0; k < 8; k++) {
			s = s * 6364136223846793005ULL + 1442695040888963407ULL;
			m[(s >> 33) % len] = (char)(s >> 17);
		}
		deceive_check(c, m, round & 1 ? cut : len, m, cut / 2, &res);
		for (size_t i = 0; i < res.n; i++)
			ok &= utf8_valid(res.findings[i].message, strlen(res.findings[i].message));
		deceive_result_free(&res);
		free(m);
	}
	CHECK(ok, "damaged input: no crash, valid messages");
	deceive_check(c, "", 0, NULL, 0, &res);
	CHECK(res.deceptive && has_rule(&res, "no-cuda-kernel"), "empty source: no kernel");
	deceive_result_free(&res);
	/* `\n` escapes in a triple-quoted literal are newlines of the CUDA text, not of the
	 * file: a finding's line stays inside the literal (it was past the file's end) */
	static const char esc[] = "import torch\n"
		"from torch.utils.cpp_extension import load_inline\n"
		"src = \"\"\"\\n\\n\\n\\n\\n\\n\n__global__ void k(float *x) { }\n\"\"\"\n"
		"ext = load_inline(name=\"e\", cpp_sources=\"\", cuda_sources=src, functions=[\"f\"])\n";
	deceive_check(c, esc, sizeof esc - 1, NULL, 0, &res);
	ok = has_rule(&res, "no-cuda-kernel");
	for (size_t i = 0; i < res.n; i++)
		ok &= res.findings[i].line >= 1 && res.findings[i].line <= 6;
	CHECK(ok, "escaped newlines: every finding on a line of the file");
	deceive_result_free(&res);
	free(src);
	deceive_checker_free(c);
}

int main(int argc, char **argv)
{
	const char *slash = strrchr(argv[0], '/');
	/* tests/bin/test_deceive -> tests/fixtures/deceive */
	dir = slash ? xasprintf("%.*s/../fixtures/deceive", (int)(slash - argv[0]), argv[0])
	            : xstrdup("../fixtures/deceive");
	(void)argc;
	test_fixtures();
	test_api();
	free(dir);
	return test_done();
}
