/* tokenizer_bench: time lib/tokenizer on one file, single thread (used by bench/tokenizer.sh).
 * Usage: tokenizer_bench TOKENIZER_DIR FILE RUNS; prints "seconds bytes ids" per run, the
 * time of tokenizer_encode alone (the first run starts with an empty pre-token cache). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tokenizer.h"
#include "util.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tokenizer_bench TOKENIZER_DIR FILE RUNS\n");
		return 2;
	}
	util_set_progname(argv[0]);
	struct tokenizer tok;
	char err[512];
	if (tokenizer_load(&tok, argv[1], err, sizeof err))
		die("%s", err);
	size_t len;
	char *text = util_read_file(argv[2], &len);
	if (!text)
		die("cannot read '%s':", argv[2]);
	long runs;
	if (parse_long(argv[3], 1, 100, &runs))
		die("bad RUNS '%s'", argv[3]);
	for (long r = 0; r < runs; r++) {
		struct tokenizer fresh;   /* a fresh tokenizer per run: no warm cache */
		if (tokenizer_load(&fresh, argv[1], err, sizeof err))
			die("%s", err);
		struct timespec t0, t1;
		int *ids;
		size_t n;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (tokenizer_encode(&fresh, text, len, &ids, &n))
			die("encode failed");
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%.6f %zu %zu\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, len, n);
		free(ids);
		tokenizer_free(&fresh);
	}
	free(text);
	tokenizer_free(&tok);
	return util_fshut(stdout, "stdout") ? 1 : 0;
}
