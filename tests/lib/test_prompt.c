/* test_prompt: the built-in templates (kernelbench, infill) and their worked example, user
 * templates with includes, unknown and missing placeholders, and the Qwen3 chat wrapping. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prompt.h"
#include "test.h"
#include "util.h"
#include "tmpdir.h"


static char *write_file(const char *name, const char *text)
{
	tmpdir_write(name, text);
	return tmpdir_path(name);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static char *share_file(const char *name)
{
	char *p = xasprintf("%s/prompts/%s", util_sharedir(), name);
	char *s = util_read_file(p, NULL);

	free(p);
	return s;
}

static void test_builtin(void)
{
	char err[512] = "";
	struct prompt_template *t = prompt_load("kernelbench", err, sizeof err);
	const char *keys[] = { "ref", "prefix", "suffix" };
	const char *vals[] = { "REF-TEXT\n", "PREFIX-TEXT", "SUFFIX-TEXT" };
	char *s, *ex;

	CHECK(t != NULL, "kernelbench loads");
	if (!t) {
		printf("# %s\n", err);
		return;
	}
	CHECK(prompt_nplaceholders(t) == 1 && !strcmp(prompt_placeholder(t, 0), "ref"),
	      "kernelbench has exactly {{ref}}");
	s = prompt_fill(t, keys, vals, 1, err, sizeof err);
	CHECK(s && strstr(s, "```python\nREF-TEXT\n\n```"), "ref goes in a fenced block");
	CHECK(s && !strstr(s, "{{"), "no tag left in the kernelbench prompt");
	CHECK(s && strstr(s, "ModelNew"), "kernelbench asks for ModelNew");
	CHECK(s && strstr(s, "class Model(nn.Module)") && strstr(s, "__global__") &&
	      strstr(s, "load_inline("), "the worked example is included");
	CHECK(s && s[strlen(s) - 1] != '\n', "final newline of the template dropped");
	free(s);
	s = prompt_fill(t, keys, vals, 2, err, sizeof err);
	CHECK(!s && strstr(err, "has no {{prefix}}") && strstr(err, "has: ref"),
	      "an unknown key is an error naming it");
	s = prompt_fill(t, keys, vals, 0, err, sizeof err);
	CHECK(!s && strstr(err, "placeholder 'ref' has no value"), "a missing value is an error");
	prompt_free(t);

	t = prompt_load("infill", err, sizeof err);
	CHECK(t && prompt_nplaceholders(t) == 3 && prompt_has_placeholder(t, "prefix") &&
	      prompt_has_placeholder(t, "suffix") && prompt_has_placeholder(t, "ref"),
	      "infill has ref, prefix, suffix");
	s = t ? prompt_fill(t, keys, vals, 3, err, sizeof err) : NULL;
	CHECK(s && strstr(s, "REF-TEXT") && strstr(s, "```python\nPREFIX-TEXT\n```") &&
	      strstr(s, "```python\nSUFFIX-TEXT\n```"), "infill places all three values");
	CHECK(s && !strstr(s, "{{"), "no tag left in the infill prompt");
	/* the worked example's complete solution is prefix + middle + suffix */
	ex = share_file("example_middle.py");
	CHECK(s && ex && count(s, "__global__ void pairwise_add_kernel") == 1,
	      "infill shows the example's core once (in the whole solution)");
	CHECK(s && count(s, "class ModelNew") == 2, "the example suffix appears twice");
	free(ex);
	free(s);
	prompt_free(t);

	t = prompt_load("no-such-template", err, sizeof err);
	CHECK(!t && strstr(err, "no built-in template 'no-such-template'"), "unknown built-in");
}

static void test_example_python(void)
{
	/* The worked example must be valid Python: compile the reference and the whole solution. */
	char *cmd;
	int r;

	if (system("command -v python3 >/dev/null 2>&1") != 0) {
		printf("ok %d - example compiles # SKIP no python3\n", ++test_n);
		return;
	}
	cmd = xasprintf("cd %s/prompts && cat example_prefix.py example_middle.py > %s/new.py && "
	                "echo >> %s/new.py && cat example_suffix.py >> %s/new.py && "
	                "python3 -c 'import ast,sys; [ast.parse(open(f).read()) for f in sys.argv[1:]]' "
	                "example_ref.py %s/new.py", util_sharedir(), tmpdir, tmpdir, tmpdir, tmpdir);
	r = system(cmd);
	free(cmd);
	CHECK(r == 0, "the worked example parses as Python");
}

static void test_user(void)
{
	char err[512] = "";
	char *inc = write_file("part.txt", "INCLUDED {{x}}\n\n");
	char *path = write_file("t.txt", "A {{ a }} B {{b}} {{a}} {{1,2}} {{ not a tag }} "
	                        "{{{a}}} [{{> part.txt}}] {{>part.txt}}\n");
	char *bad = write_file("bad.txt", "line one\n{{> missing.txt}}\n");
	const char *keys[] = { "a", "b" };
	const char *vals[] = { "{{b}}", "2" };
	struct prompt_template *t = prompt_load(path, err, sizeof err);
	char *s;

	CHECK(t != NULL, "user template loads by path");
	if (t) {
		CHECK(prompt_nplaceholders(t) == 2, "two distinct placeholders");
		CHECK_STR(prompt_path(t), path, "path recorded");
		s = prompt_fill(t, keys, vals, 2, err, sizeof err);
		CHECK_STR(s, "A {{b}} B 2 {{b}} {{1,2}} {{ not a tag }} {{{b}}} "
		          "[INCLUDED {{x}}] INCLUDED {{x}}", "fill: verbatim values, includes, literals");
		free(s);
		vals[0] = NULL;
		s = prompt_fill(t, keys, vals, 2, err, sizeof err);
		CHECK(!s && strstr(err, "no value for placeholder 'a'"), "NULL value is an error");
		keys[1] = "a";
		vals[0] = vals[1] = "v";
		s = prompt_fill(t, keys, vals, 2, err, sizeof err);
		CHECK(!s && strstr(err, "given twice"), "duplicate key is an error");
		prompt_free(t);
	}
	t = prompt_load(bad, err, sizeof err);
	CHECK(!t && strstr(err, "bad.txt:2: cannot include"), "missing include names file:line");
	t = prompt_load("/nonexistent/dir/t.txt", err, sizeof err);
	CHECK(!t && strstr(err, "cannot read template"), "missing file");
	free(inc);
	free(path);
	free(bad);
}

static void test_chat(void)
{
	char *s = prompt_chat_wrap("hi\n", PROMPT_CHAT_QWEN3);
	enum prompt_chat c;

	CHECK_STR(s, "<|im_start|>user\nhi\n<|im_end|>\n<|im_start|>assistant\n", "qwen3 wrap");
	free(s);
	s = prompt_chat_wrap("hi", PROMPT_CHAT_NONE);
	CHECK_STR(s, "hi", "none wrap is raw text");
	free(s);
	s = prompt_chat_answer("x = 1", PROMPT_CHAT_QWEN3, 1);
	CHECK_STR(s, "<think>\n\n</think>\n\nx = 1<|im_end|>\n", "qwen3 answer, empty think");
	free(s);
	s = prompt_chat_answer("x = 1", PROMPT_CHAT_QWEN3, 0);
	CHECK_STR(s, "x = 1<|im_end|>\n", "qwen3 answer");
	free(s);
	s = prompt_chat_answer("x = 1", PROMPT_CHAT_NONE, 1);
	CHECK_STR(s, "x = 1", "raw answer");
	free(s);
	CHECK(prompt_chat_parse("none", &c) == 0 && c == PROMPT_CHAT_NONE, "parse none");
	CHECK(prompt_chat_parse("qwen3", &c) == 0 && c == PROMPT_CHAT_QWEN3, "parse qwen3");
	CHECK(prompt_chat_parse("llama", &c) < 0, "unknown chat format");
	CHECK_STR(prompt_chat_name(PROMPT_CHAT_QWEN3), "qwen3", "chat name");
}

static void test_render(void)
{
	char err[256];
	struct prompt_template *t = prompt_load("kernelbench", err, sizeof err);
	const char *k[] = { "ref" }, *v[] = { "X" };
	char *s = t ? prompt_render(t, k, v, 1, PROMPT_CHAT_QWEN3, err, sizeof err) : NULL;
	size_t n = s ? strlen(s) : 0;

	CHECK(s && !strncmp(s, "<|im_start|>user\nYou are", 21) &&
	      n > 50 && !strcmp(s + n - 45, "explanation.<|im_end|>\n<|im_start|>assistant\n"),
	      "render = fill + qwen3 wrap");
	free(s);
	prompt_free(t);
}

int main(void)
{
	if (tmpdir_make("dice-test-prompt") < 0)
		return 1;
	test_builtin();
	test_example_python();
	test_user();
	test_chat();
	test_render();
	tmpdir_remove();
	return test_done();
}
