/* fuzz_deceive: libFuzzer target for the deception rules and the Python scanner under them
 * (lib/deceive.c, lib/pysrc.c), which deceive-check, cuke-filter and kbench-eval --robust run
 * on model output. The input is a kernel source, optionally followed by a NUL byte and a
 * reference source. Every result must be well formed: a line inside the kernel, a message,
 * `deceptive` set exactly when a deceptive finding is there, and JSON that serializes.
 * Build and run: sh tests/fuzz/run.sh deceive (seed it with the .py files of
 * tests/fixtures/deceive copied into build/fuzz/deceive). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deceive.h"

static struct deceive_checker *checker;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *src = (const char *)data, *ref = NULL;
	const char *nul = memchr(src, '\0', size);
	size_t len = size, ref_len = 0, lines = 1;
	struct deceive_result res;
	int deceptive = 0;

	if (!checker && !(checker = deceive_checker_new(NULL, NULL)))
		abort();
	if (nul) {
		len = (size_t)(nul - src);
		ref = nul + 1;
		ref_len = size - len - 1;
	}
	for (size_t i = 0; i < len; i++)
		lines += src[i] == '\n';
	deceive_check(checker, src, len, ref, ref_len, &res);
	for (size_t i = 0; i < res.n; i++) {
		const struct deceive_finding *f = &res.findings[i];
		if (!f->rule || !f->message || f->line < 0 || (size_t)f->line > lines)
			abort();
		deceptive |= f->severity == DECEIVE_DECEPTIVE;
	}
	if (deceptive != res.deceptive)
		abort();
	json_t *j = deceive_result_json(&res);
	char *s = j ? json_dumps(j, 0) : NULL;
	if (!s)
		abort();
	free(s);
	json_decref(j);
	deceive_result_free(&res);
	return 0;
}
