/* test_extract: the code block out of a model response (SPEC §4) and the kernel of a record
 * (field, kernel, completion), on responses written here. */
#include <stdlib.h>
#include <string.h>

#include "extract.h"
#include "test.h"
#include "util.h"

static void check_code(const char *text, const char *want, const char *what)
{
	char *got = extract_code(text, strlen(text));

	if (!want) {
		CHECK(got == NULL, what);
	} else {
		CHECK_STR(got, want, what);
	}
	free(got);
}

static void test_code(void)
{
	check_code("Here it is:\n```python\nimport torch\nx = 1\n```\nDone.", "import torch\nx = 1",
	           "python tag removed");
	check_code("```cpp\nint x;\n```", "int x;", "cpp tag removed");
	check_code("```cuda\n__global__ void k() {}\n```", "__global__ void k() {}", "cuda tag removed");
	check_code("```\n\n  y = 2  \n\n```", "y = 2", "no tag, trimmed");
	check_code("```py\na\n```\ntext\n```python\nb\n```", "a", "first block wins");
	check_code("no code here", NULL, "no fence");
	check_code("```python\nunclosed = True\n", NULL, "unclosed fence is no code");
	check_code("``````", "", "empty block");
	check_code("```x = 1```", "x = 1", "one-line block keeps its text");
	/* a ``` inside the code ends the block, as in KernelBench */
	check_code("```python\ns = '''a'''\n```", "s = '''a'''", "triple quotes are not a fence");
}

static void test_record(void)
{
	json_t *r = json_pack("{s:s, s:s, s:s}", "kernel", "K", "completion", "```\nC\n```", "code", "F");
	const char *from;
	char *k;

	k = extract_record_kernel(r, NULL, &from);
	CHECK(k && !strcmp(k, "K") && !strcmp(from, "kernel"), "kernel field first");
	free(k);
	k = extract_record_kernel(r, "code", &from);
	CHECK(k && !strcmp(k, "F") && !strcmp(from, "code"), "--field overrides");
	free(k);
	json_object_set_new(r, "code", json_string("Here:\n```python\nF\n```\nDone."));
	k = extract_record_kernel(r, "code", &from);
	CHECK(k && !strcmp(k, "F") && !strcmp(from, "code"), "--field: a fenced block extracted");
	free(k);
	json_object_set_new(r, "code", json_string("Here:\n```python\nF\n"));
	k = extract_record_kernel(r, "code", &from);
	CHECK(!k && !strcmp(from, "code"), "--field: an unclosed fence is no code");
	free(k);
	k = extract_record_kernel(r, "nope", &from);
	CHECK(!k && !from, "missing field");
	json_object_del(r, "kernel");
	k = extract_record_kernel(r, NULL, &from);
	CHECK(k && !strcmp(k, "C") && !strcmp(from, "completion"), "completion extracted");
	free(k);
	json_object_set_new(r, "completion", json_string("no fence"));
	k = extract_record_kernel(r, NULL, &from);
	CHECK(!k && from && !strcmp(from, "completion"), "completion without a block: NULL, from set");
	char why[128];
	CHECK(!strcmp(extract_record_why(r, NULL, from, why, sizeof why),
	              "no fenced code block in 'completion'"), "why: no block");
	json_object_set_new(r, "completion", json_string("```\nC\n```"));
	json_object_set_new(r, "kernel", json_null());
	k = extract_record_kernel(r, NULL, &from);
	CHECK(k && !strcmp(k, "C") && !strcmp(from, "completion"), "a null kernel is none");
	free(k);
	json_object_set_new(r, "kernel", json_integer(3));
	k = extract_record_kernel(r, NULL, &from);
	CHECK(!k && from && !strcmp(from, "kernel"), "a kernel that is not a string: NULL, from set");
	CHECK(!strcmp(extract_record_why(r, NULL, from, why, sizeof why),
	              "'kernel' is not a string"), "why: not a string");
	json_object_del(r, "kernel");
	json_object_del(r, "completion");
	k = extract_record_kernel(r, NULL, &from);
	CHECK(!k && !from, "neither");
	CHECK(!strcmp(extract_record_why(r, NULL, from, why, sizeof why),
	              "no kernel: neither 'kernel' nor 'completion' is a string"), "why: neither");
	CHECK(!strcmp(extract_record_why(r, "f", NULL, why, sizeof why),
	              "no string field 'f'"), "why: no field");
	json_decref(r);
}

int main(void)
{
	test_code();
	test_record();
	return test_done();
}
