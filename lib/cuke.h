/* cuke: CuKe dataset curation (cuke-filter): which records to keep, why, and what to emit.
 *
 * A record is judged in a fixed order and the first failing check names the reason:
 *   speedup (no-speedup, bad-speedup, below-min-speedup, above-max-speedup)
 *   -> correctness (no-correct, bad-correct, incorrect) -> level (no-ref, unclassified,
 *   level) -> length (no-kernel, too-long) -> deception (deceptive) -> infill split
 *   (no-split) -> dedupe (duplicate; the key is remembered only for kept records, so the
 *   first record that passes everything else wins).
 *
 * Speedup: `speedup`, else `eval.speedup`, else `ref_ms / kernel_ms`, else
 * `eval.ref_ms / eval.kernel_ms`. null counts as absent; any other non-number, or a value
 * that is not > 0, is bad-speedup. Correctness: `correct`, else `eval.correct`; null is
 * absent, a non-boolean is bad-correct.
 *
 * Two paths give the same bytes: cuke_fields_scan() reads those fields off the raw line in
 * one validating pass (no tree), and only a record that passes the cheap checks and needs
 * its content (--dedupe, level, tokens, deception, --to-sft/--to-infill) is parsed by
 * jansson; whenever the scanner is unsure (escaped keys, deep nesting, big numbers, \u0000
 * or surrogates, a `cuke` key already there, invalid JSON) the line goes through jansson
 * first. Kept records are written back byte for byte with a `cuke` object added
 * (jsonl_write_added).
 *
 * Ownership: struct cuke lives behind cuke_new/cuke_free; the caller owns the writers it
 * hands to cuke_sink and closes them after cuke_finish.
 */
#ifndef DICE_CUKE_H
#define DICE_CUKE_H

#include <stddef.h>
#include <jansson.h>

#include "jsonl.h"

enum cuke_reason {
	CUKE_KEPT = 0,
	CUKE_NO_SPEEDUP,
	CUKE_BAD_SPEEDUP,
	CUKE_BELOW_MIN,
	CUKE_ABOVE_MAX,
	CUKE_NO_CORRECT,
	CUKE_BAD_CORRECT,
	CUKE_INCORRECT,
	CUKE_NO_REF,
	CUKE_UNCLASSIFIED,
	CUKE_LEVEL,
	CUKE_NO_KERNEL,
	CUKE_TOO_LONG,
	CUKE_DECEPTIVE,
	CUKE_NO_SPLIT,
	CUKE_DUPLICATE,
	CUKE_MALFORMED,
	CUKE_REASON_N,
};
/* "no-speedup", "below-min-speedup", ...; "kept" for CUKE_KEPT. */
const char *cuke_reason_name(enum cuke_reason r);

/* Speedup histogram bins (SPEC §0, paper Table 12). Lower edges are inclusive:
 * [0,1) [1,1.5) [1.5,2) [2,2.5) [2.5,3] (3,inf); the last edge, 3.0, belongs to 2.5-3.0 so
 * that ">3.0" means strictly above. CUKE_BIN_NONE counts records without a speedup. */
enum { CUKE_BINS = 6, CUKE_BIN_NONE = CUKE_BINS };
extern const char *const cuke_bin_names[CUKE_BINS + 1];
int cuke_bin(double speedup);

/* One field as found in a record. */
enum cuke_kind { CUKE_ABSENT = 0, CUKE_NULL, CUKE_NUMBER, CUKE_TRUE, CUKE_FALSE, CUKE_OTHER };
struct cuke_val {
	enum cuke_kind kind;
	double num;             /* CUKE_NUMBER: value, -0 folded to 0 */
};
enum cuke_field {
	CUKE_F_SPEEDUP, CUKE_F_CORRECT, CUKE_F_REF_MS, CUKE_F_KERNEL_MS,
	CUKE_F_EVAL_SPEEDUP, CUKE_F_EVAL_CORRECT, CUKE_F_EVAL_REF_MS, CUKE_F_EVAL_KERNEL_MS,
	CUKE_F_N,
};
struct cuke_fields {
	struct cuke_val v[CUKE_F_N];
	int has_cuke;           /* the record already has a top-level "cuke" */
	size_t nkeys;           /* top-level members (duplicates counted once) ... when known */
};
/* From a parsed record. */
void cuke_fields_from_json(const json_t *rec, struct cuke_fields *f);
/* From the raw line: 1 when the line is certainly a JSON object jansson accepts and *f holds
 * what cuke_fields_from_json would give; 0 when unsure or invalid (use jansson). */
int cuke_fields_scan(const char *line, size_t len, struct cuke_fields *f);

/* The speedup of a record: 1 with *s and *from ("speedup", "eval.speedup",
 * "ref_ms/kernel_ms", "eval.ref_ms/eval.kernel_ms"), 0 when absent, -1 when bad. */
int cuke_speedup(const struct cuke_fields *f, double *s, const char **from);

enum cuke_dedupe { CUKE_DEDUPE_NONE = 0, CUKE_DEDUPE_ALL, CUKE_DEDUPE_REF };
enum cuke_format { CUKE_OUT_RECORDS = 0, CUKE_OUT_SFT, CUKE_OUT_INFILL };

struct cuke_config {
	int has_min, has_max;
	double min_speedup, max_speedup;
	int require_correct;
	int classify;           /* compute cuke.level (implied by levels and sort_level) */
	unsigned levels;        /* bit n set: keep level n (1..3); 0 keeps every level */
	int sort_level;         /* emit level 1, then 2, then 3 (stable; 2 and 3 spooled) */
	enum cuke_dedupe dedupe;
	int drop_deceptive;     /* run lib/deceive on the kernel; deceptive ones are rejected */
	long max_tokens;        /* > 0: reject SFT pairs longer than this (needs tokenizer) */
	const char *tokenizer;  /* checkpoint directory or tokenizer.json */
	int no_fast;            /* always parse with jansson (tests compare both paths) */
	enum cuke_format format;
};

/* ---- the content checks (exposed for the tests) --------------------------------------- */

/* Difficulty level of a PyTorch reference from its class Model (1 single op, 2 fused chain,
 * 3 whole model). Ops are counted in the methods of Model other than __init__: calls of
 * torch.* / F.* functions, tensor methods and submodules (self.x = nn.Conv2d(...)), and the
 * binary arithmetic operators + - * / // % @ ** (augmented too); layout and conversion calls
 * (view, reshape, size, contiguous, unsqueeze, to, float, ...) and Python builtins called by
 * a bare name (max, len, range, ...) do not count. Level 3: a loop in Model, a container
 * submodule (nn.Sequential, nn.ModuleList, nn.ModuleDict), a submodule or helper defined in
 * the file, or 8 or more op instances; else level 1 for at most one op instance and level 2
 * for more. Returns the level, or -1 with *why set when there is no class Model with a
 * forward method. */
struct cuke_level {
	int level;
	int ops;                /* op instances */
	int distinct;           /* distinct ops */
	const char *why;        /* static: what decided the level */
};
int cuke_classify(const char *ref, size_t len, struct cuke_level *out);

/* Dedupe key: FNV-1a 64 of the pysrc-normalised reference (comments and docstrings gone),
 * a NUL, and the normalised kernel (kernel NULL: reference alone), with every white-space
 * byte dropped, inside strings too. */
unsigned long long cuke_dedupe_key(const char *ref, size_t rlen, const char *kernel, size_t klen);

/* Infill split (SPEC §5.2): middle = the one module-level assignment of a string literal
 * holding `__global__` (from the start of its line to the end of its logical line, newline
 * included); prefix = what comes before it (no class, def or load_inline there); suffix =
 * the rest (a load_inline call and class ModelNew must be there). 0 with *a, *b the middle's
 * byte span, or -1 with *why (static). prefix + middle + suffix == kernel by construction. */
int cuke_split(const char *kernel, size_t len, size_t *a, size_t *b, const char **why);

/* SFT response: the kernel, trailing white space removed, in a ```python fenced block. */
char *cuke_sft_response(const char *kernel, size_t len);

struct cuke_stats {
	size_t read;            /* non-blank lines */
	size_t kept;
	size_t rejected[CUKE_REASON_N];  /* [CUKE_MALFORMED] = malformed lines */
	size_t hist_read[CUKE_BINS + 1]; /* valid records read, by speedup bin */
	size_t hist_kept[CUKE_BINS + 1];
	size_t fast;            /* records judged without a tree */
};
/* Sum of rejected[]. Invariant after every record: kept + cuke_rejected_total == read. */
size_t cuke_rejected_total(const struct cuke_stats *s);

/* Where records go: kept records to out, others to rejects (NULL: not written). */
struct cuke_sink {
	struct jsonl_writer *out;
	struct jsonl_writer *rejects;
};

struct cuke;
/* NULL with a message in err when the configuration cannot be set up. */
struct cuke *cuke_new(const struct cuke_config *cfg, char *err, size_t errlen);
void cuke_free(struct cuke *c);
const struct cuke_stats *cuke_stats(const struct cuke *c);

/* Judge the current line of r (from jsonl_read_line) and write it where it belongs.
 * Returns CUKE_KEPT, the reject reason, or CUKE_MALFORMED (reported on stderr unless a
 * rejects writer took it). */
enum cuke_reason cuke_line(struct cuke *c, struct jsonl_reader *r, struct cuke_sink *sink);
/* End of input: writes what was held back (--sort-level). 0, or -1 on a write error. */
int cuke_finish(struct cuke *c, struct cuke_sink *sink);

/* Summary: the text table (--stats) or a JSON object (new reference). */
void cuke_stats_print(const struct cuke_stats *s, FILE *fp);
json_t *cuke_stats_json(const struct cuke_stats *s);

#endif
