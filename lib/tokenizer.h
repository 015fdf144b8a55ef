/* tokenizer: Hugging Face byte-level BPE (the tokenizer.json kind Qwen3 and SDAR ship).
 *
 * Pipeline of tokenizer_encode(), the same as the reference (tokenizers / transformers.js):
 *   1. added tokens: every entry of "added_tokens" (special or not) is matched in the raw text,
 *      leftmost, longest at a position (lstrip/rstrip honoured); the text between matches
 *      goes through steps 2-5. tokenizer_encode_ordinary() skips this step, so "<|im_end|>"
 *      in the text is then encoded as plain text.
 *   2. normalizer: none or "NFC" (what Qwen3 ships; text already in NFC, e.g. all ASCII, is
 *      detected by a quick check and left as is); any other normalizer is refused at load.
 *   3. pre-tokenization: the "Split" pre-tokenizer's regex (PCRE2, UTF + UCP, JIT when
 *      available, compiled once at load) cuts the text into pre-tokens ("Isolated" behaviour);
 *      then "ByteLevel" maps each byte to its printable unicode stand-in (GPT-2 table).
 *   4. BPE: merges applied by rank (lowest first), in O(n log n) per pre-token with a heap over
 *      a linked list of symbols, so a 1 MB word without whitespace stays fast.
 *   5. pre-token -> ids is cached in a hash map (bounded; cleared when full).
 *
 * Invalid UTF-8: the regex runs in PCRE2_MATCH_INVALID_UTF mode, so an invalid byte never
 * matches a character class; each maximal run of invalid bytes forms its own pre-token and its
 * bytes go through byte-level BPE like any other bytes (every byte has a token, so nothing is
 * lost and decode() gives the exact input bytes back). The JavaScript reference cannot take
 * bytes (its input is a JS string, where invalid bytes have already become U+FFFD), so for
 * invalid input the only guarantee is the round trip decode(encode(x)) == x; valid UTF-8 is
 * matched id for id (tests/lib/test_tokenizer.c, tests/tokenizer/).
 *
 * Ownership: struct tokenizer lives on the caller's stack; tokenizer_load() fills it,
 * tokenizer_free() releases it. Arrays returned through int **ids are xmalloc'ed and owned by
 * the caller (free()). A loaded tokenizer is read-only except for its cache, so one tokenizer
 * must not be used from two threads at once.
 */
#ifndef DICE_TOKENIZER_H
#define DICE_TOKENIZER_H

#include <stddef.h>

#include "util.h"

struct tokenizer_impl;

struct tokenizer {
	struct tokenizer_impl *impl;
	int vocab_size;   /* 1 + the largest id (vocab and added tokens) */
	int eos_id;       /* tokenizer_config.json "eos_token", else -1 */
	int pad_id;       /* tokenizer_config.json "pad_token", else -1 */
	int bos_id;       /* tokenizer_config.json "bos_token", else -1 (Qwen3: none) */
};

/* Load from a directory holding tokenizer.json (and, optionally, tokenizer_config.json), or
 * from the path of a tokenizer.json itself (its directory is searched for the config).
 * Returns 0, or -1 with a one-line message "path: what is wrong" in err (errlen bytes). */
int tokenizer_load(struct tokenizer *tok, const char *dir_or_file, char *err, size_t errlen);
void tokenizer_free(struct tokenizer *tok);

/* Encode text[0..len) (any bytes; see the note on invalid UTF-8 above) into *ids (*n of them).
 * tokenizer_encode recognises added/special tokens in the text; _ordinary does not.
 * Returns 0, or -1 (only if the regex engine fails, e.g. runs out of memory). */
int tokenizer_encode(struct tokenizer *tok, const char *text, size_t len, int **ids, size_t *n);
int tokenizer_encode_ordinary(struct tokenizer *tok, const char *text, size_t len,
			      int **ids, size_t *n);

enum tokenizer_decode_flags {
	TOKENIZER_DECODE_SKIP_SPECIAL = 1 << 0,   /* drop added tokens marked "special" */
};
/* Append the bytes of ids[0..n) to out. Returns 0, or -1 when an id is out of range (the ids
 * before it are appended). The output is raw bytes and may be invalid UTF-8 when the ids cut a
 * character in half; use utf8_repair() before putting it into JSON. */
int tokenizer_decode(const struct tokenizer *tok, const int *ids, size_t n, unsigned flags,
		     struct buf *out);

/* The id of a token given as its string ("<|im_end|>", or a vocab entry in byte-level form,
 * e.g. "Ġthe"), or -1. */
int tokenizer_token_id(const struct tokenizer *tok, const char *token);
/* The string of a token (byte-level form for vocab entries), or NULL for an unused id. */
const char *tokenizer_token_str(const struct tokenizer *tok, int id);
/* 1 if id is an added token marked "special" (<|im_start|>, <|endoftext|>...), else 0. */
int tokenizer_is_special(const struct tokenizer *tok, int id);
int tokenizer_vocab_size(const struct tokenizer *tok);

#endif
