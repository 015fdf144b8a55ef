/* fuzz_qwen.h: the Qwen3 tokenizer a fuzz target encodes with, from $DICE_TOKENIZER (default
 * build/qwen3, where make deps-npm exports it; run.sh runs from the source tree). Without
 * it the target goes on, saying once what it leaves out. */
#ifndef DICE_FUZZ_QWEN_H
#define DICE_FUZZ_QWEN_H

#include <stdio.h>
#include <stdlib.h>

#include "tokenizer.h"

/* 1 when tok is loaded, else 0 after "who: why; what is skipped" on stderr */
static int fuzz_qwen_load(struct tokenizer *tok, const char *who, const char *skipped)
{
	const char *tk = getenv("DICE_TOKENIZER");
	char err[512];

	if (tokenizer_load(tok, tk ? tk : "build/qwen3", err, sizeof err) == 0)
		return 1;
	fprintf(stderr, "%s: %s; %s\n", who, err, skipped);
	return 0;
}

#endif
