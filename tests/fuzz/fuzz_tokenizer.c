/* fuzz_tokenizer: libFuzzer target for lib/tokenizer.
 *
 * The first byte picks what the rest is:
 *   even: text for the Qwen3 tokenizer (loaded once from $DICE_TOKENIZER, default
 *         build/qwen3, see tests/lib/test_tokenizer.c). encode and encode_ordinary must not
 *         fail, decode must give back text that encodes to the same ids (the input itself, or
 *         its NFC form).
 *   odd:  a tokenizer.json; loading must fail cleanly or succeed, never crash.
 * Build and run (clang, from the source tree):
 *   clang -g -O1 -fsanitize=fuzzer,address -std=c11 -D_GNU_SOURCE -DDICE_SHAREDIR=\"\" -Ilib \
 *     -o build/fuzz_tokenizer tests/fuzz/fuzz_tokenizer.c lib/tokenizer.c lib/util.c -ljansson -lpcre2-8
 *   build/fuzz_tokenizer -max_total_time=600 -artifact_prefix=tests/fuzz/tokenizer/ \
 *     build/fuzz/tokenizer tests/fuzz/tokenizer
 * (the layout of tests/fuzz/run.sh: working corpus in build/fuzz/tokenizer, seed it with
 * the fixtures prefixed by a 0 byte). Crashing inputs are kept in tests/fuzz/tokenizer/;
 * tests/lib/test_tokenizer.c replays the tokenizer.json ones.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"
#include "util.h"

static struct tokenizer qwen;
static int have_qwen;
static char json_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("DICE_TOKENIZER");
	char err[512];
	have_qwen = tokenizer_load(&qwen, dir ? dir : "build/qwen3", err, sizeof err) == 0;
	if (!have_qwen)   /* no reference files (make check exports them): fuzz loading only */
		fprintf(stderr, "fuzz_tokenizer: %s; text inputs are skipped\n", err);
	snprintf(json_path, sizeof json_path, "/tmp/fuzz-tokenizer-%d.json", (int)getpid());
	return 0;
}

static void check_text(const char *s, size_t n, int ordinary)
{
	int *ids, *again;
	size_t k, k2;
	struct buf b;
	int r = ordinary ? tokenizer_encode_ordinary(&qwen, s, n, &ids, &k)
			 : tokenizer_encode(&qwen, s, n, &ids, &k);
	if (r)
		abort();
	buf_init(&b);
	if (tokenizer_decode(&qwen, ids, k, 0, &b))
		abort();
	r = ordinary ? tokenizer_encode_ordinary(&qwen, b.p, b.len, &again, &k2)
		     : tokenizer_encode(&qwen, b.p, b.len, &again, &k2);
	if (r || k2 != k || memcmp(again, ids, k * sizeof *ids))
		abort();
	free(ids);
	free(again);
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	const char *s = (const char *)data + 1;
	size_t n = size - 1;
	if (!(data[0] & 1)) {
		if (have_qwen)
			check_text(s, n, data[0] & 2);
		return 0;
	}
	FILE *fp = fopen(json_path, "wb");
	if (!fp)
		return 0;
	fwrite(s, 1, n, fp);
	fclose(fp);
	struct tokenizer t;
	char err[512];
	if (tokenizer_load(&t, json_path, err, sizeof err) == 0) {
		int *ids;
		size_t k;
		if (tokenizer_encode(&t, "hello world  12 <|x|>", 21, &ids, &k) == 0)
			free(ids);
		tokenizer_free(&t);
	}
	return 0;
}
