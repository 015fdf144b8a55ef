/* deceive: the deception rules of SPEC §8, run on scanned Python (lib/pysrc), shared by
 * deceive-check, cuke-filter --drop-deceptive and kbench-eval --robust.
 *
 * CONTRACT (other modules code against these declarations; the implementation may add
 * functions but keeps these): a checker is built once (it compiles its PCRE2 patterns) and
 * run on many kernels; results are owned by the caller and released with
 * deceive_result_free.
 */
#ifndef DICE_DECEIVE_H
#define DICE_DECEIVE_H

#include <stddef.h>
#include <jansson.h>

enum deceive_severity {
	DECEIVE_WARN = 0,       /* reported, does not make the record deceptive */
	DECEIVE_DECEPTIVE = 1,  /* excludes the record under the robust check */
};

struct deceive_finding {
	const char *rule;               /* static rule name, e.g. "kernel-not-called" */
	enum deceive_severity severity;
	int line;                       /* 1-based line in the kernel source, 0 if none */
	char *message;                  /* owned by the result */
};

struct deceive_result {
	int deceptive;                  /* any finding of severity DECEIVE_DECEPTIVE */
	struct deceive_finding *findings;
	size_t n;
};

struct deceive_checker;

/* rules: comma-separated rule names to run, or NULL for all. NULL on an unknown name, with
 * the bad name written to *bad (static storage) when bad is not NULL, and on a list that
 * names no rule ("", ","), with *bad "". */
struct deceive_checker *deceive_checker_new(const char *rules, const char **bad);
void deceive_checker_free(struct deceive_checker *c);
/* 1 when the checker runs rule k (an index of deceive_rules) */
int deceive_checker_runs(const struct deceive_checker *c, int k);

/* Check one kernel source (len bytes, need not be NUL-terminated or valid UTF-8); ref is
 * the PyTorch reference source or NULL. Fills *out (always; free it with
 * deceive_result_free). Returns 0. */
int deceive_check(struct deceive_checker *c, const char *kernel, size_t len,
                  const char *ref, size_t ref_len, struct deceive_result *out);
void deceive_result_free(struct deceive_result *r);

/* {"deceptive": bool, "findings": [{"rule", "severity", "line", "message"}]} (new ref) */
json_t *deceive_result_json(const struct deceive_result *r);

/* The rule table: name, severity, one-line description; terminated by a NULL name. */
struct deceive_rule_info {
	const char *name;
	enum deceive_severity severity;
	const char *description;
};
extern const struct deceive_rule_info deceive_rules[];

#endif
