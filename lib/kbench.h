/* kbench: KernelBench problems, the evaluation engine that drives sandboxed Python workers,
 * and the paper's metrics.
 *
 * Problems: a KernelBench checkout (a directory) or an archive of one (.zip, .tar.gz, read
 * through lib/input); `levelN/<num>_<Name>.py` files wherever the level folders sit (the
 * parent holding the most problems wins). Problem ids: path "level1/19_ReLU.py", record id
 * "level1/19_ReLU".
 *
 * Engine: records go in with kbench_engine_submit (in input order) and come out, in the same
 * order, from kbench_engine_next with an `eval` object. Candidates are compiled by a pool of
 * build workers (kbench_config.jobs) apart from the run workers (one per GPU, or
 * run_workers on the CPU), each worker a fresh `python worker.py` process under lib/pool's
 * sandbox that handles one candidate. Builds are cached by source hash in cache_dir. What a
 * build asks for in the shared parts of the cache (a precompiled header, the lean builds'
 * names) is made by a maker job in a fresh build worker that runs no candidate's code, when a
 * build worker would idle, the rest before the end (kbench_engine_pending counts them once
 * the input is closed); a maker gives no record.
 *
 * Metrics: a tally of (level, problem, correct, speedup) samples gives per level n, Exec,
 * fast_p for p in {0, 0.5, 0.8, 1, 1.5, 2}, the geometric-mean speedup of correct samples and,
 * with several samples per problem, pass@k; the denominator is every problem of the level
 * known to the tally (all of the tree's when one is given).
 */
#ifndef DICE_KBENCH_H
#define DICE_KBENCH_H

#include <stdio.h>
#include <jansson.h>

#include "util.h"

struct deceive_checker;

/* ------------------------------------------------------------------ problems */

struct kbench_problem {
	int level;
	int num;            /* the number the file name starts with */
	char *path;         /* "level1/19_ReLU.py" (owned) */
	char *src;          /* the reference source (owned) */
};

struct kbench_tree {
	struct kbench_problem *p;   /* (n) sorted by level, then num */
	size_t n;
};

/* Load every problem of a directory or archive; 0, or -1 with a message. */
int kbench_tree_load(struct kbench_tree *t, const char *path);
void kbench_tree_free(struct kbench_tree *t);
/* The first "levelN/NUM" in problem, at its start or after a '/', NUM followed by nothing,
 * '_' or '.' ("level1/19_ReLU.py", "KernelBench/level1/19", "level1/19_ReLU"): 0 with
 * *level, *num and (at not NULL) *at, where "levelN" starts; else -1. */
int kbench_find_level_num(const char *problem, int *level, int *num, const char **at);
/* By path "level1/19_ReLU.py" (or without ".py", or "level1/19"). NULL when unknown. */
const struct kbench_problem *kbench_tree_find(const struct kbench_tree *t, const char *problem);
const struct kbench_problem *kbench_tree_find_num(const struct kbench_tree *t, int level, int num);
/* Parse "[...]/levelN/<num>_<Name>.py": 0 with *level, *num, or -1. */
int kbench_parse_path(const char *path, int *level, int *num);
/* {"id", "level", "problem", "ref"} (new reference) */
json_t *kbench_problem_record(const struct kbench_problem *p);

/* A set of numbers such as "1-10,19": items of a number or a range a-b (a <= b), parted by
 * commas; an empty item is refused. */
struct kbench_ranges {
	long (*r)[2];
	size_t n;
};
int kbench_ranges_parse(struct kbench_ranges *rs, const char *s);   /* 0 or -1 */
/* kbench_ranges_parse for levels: a number past KBENCH_MAX_LEVEL, which no problem path or
 * record level has, is refused too (-L 1,100 would judge level 1 alone) */
int kbench_levels_parse(struct kbench_ranges *rs, const char *s);
int kbench_ranges_has(const struct kbench_ranges *rs, long v);      /* empty set: all */
void kbench_ranges_free(struct kbench_ranges *rs);

/* The problems of t whose level is in levels and whose number is in problems (NULL or empty:
 * all), in t's order (level, then number): what `kbench-eval --list` writes and
 * `dice-sample --kernelbench` samples. Returns their count, with *out an array of pointers
 * into t (the caller frees the array, not the problems; NULL when the count is 0). */
size_t kbench_tree_select(const struct kbench_tree *t, const struct kbench_ranges *levels,
                          const struct kbench_ranges *problems,
                          const struct kbench_problem ***out);
/* The one-line message for a selection that holds nothing: "no problem of KernelBench PATH
 * is in --level L --problems P" (the options given as typed; NULL: not given). */
void kbench_warn_empty(const char *path, const char *level_arg, const char *problems_arg);

/* ------------------------------------------------------------------ engine */

/* spares a run lane keeps by default: a worker's start (Python, import torch: 1.5 s on a
 * 2-core machine with torch 1.13, several seconds with a CUDA torch) is longer than a small
 * candidate's run, so one spare would leave the GPU waiting */
#define KBENCH_RUN_SPARES 3

struct kbench_config {
	const char *python;         /* interpreter with torch */
	const char *worker;         /* path of worker.py */
	const char *device;         /* "cpu", "cuda" or "auto" */
	const char *cache_dir;      /* build cache root (created) */
	const char *tmp_root;       /* parent of private temp dirs; NULL: $TMPDIR or /tmp */
	int jobs;                   /* build workers */
	int run_workers;            /* CPU mode: run workers */
	int run_spares;             /* workers a run worker's lane keeps started ahead of their
	                             * jobs (0: KBENCH_RUN_SPARES) */
	int *gpus;                  /* (ngpus) CUDA device numbers, one run worker each */
	int ngpus;
	int trials, perf_trials, warmup;
	double atol, rtol;
	int rtol_only;
	int flush_l2;
	double timeout;             /* seconds for a run */
	double compile_timeout;     /* seconds for a build */
	double start_timeout;       /* seconds for a worker to import torch */
	long mem_mb, fsize_mb, nproc;
	int netns;
	int pch;                    /* C++ builds through a precompiled torch/extension.h kept in
	                             * cache_dir/pch (worker.py, ext_pch; made by make_pch) */
	int lean;                   /* CUDA sources' torch/extension.h read as torch/types.h, the
	                             * source as written where that fails on a name (ext_lean) */
	size_t log_bytes;           /* eval.log size; 0: no log field */
	json_t *baseline;           /* baseline_time_torch.json or NULL (borrowed) */
	struct deceive_checker *robust;   /* NULL: no robust check (borrowed) */
	const struct kbench_tree *tree;   /* NULL: records carry `ref` (borrowed) */
	int verbose;
};

struct kbench_engine;

/* NULL with a message when the interpreter or worker cannot be used. Probes the worker
 * (torch version, device, GPU architectures) before returning. */
struct kbench_engine *kbench_engine_new(const struct kbench_config *cfg);
/* 0, or -1 when the workers cannot start at all (fatal: a message was printed). */
int kbench_engine_free(struct kbench_engine *e);
/* Queue a record (the engine takes rec; line/len is its raw text for pass-through). */
void kbench_engine_submit(struct kbench_engine *e, json_t *rec, const char *line, size_t len,
                          const char *where);
/* Queue a record that is finished already, with its eval object ev (the engine takes rec and
 * ev): a malformed input line, so that it comes back from kbench_engine_next in its place
 * (*line NULL: serialise *rec). */
void kbench_engine_submit_done(struct kbench_engine *e, json_t *rec, json_t *ev, int bad,
                               const char *where);
/* Records submitted and not yet handed back; once the input is closed, with the maker jobs
 * not yet done (within the compile timeout of the last record's end). */
size_t kbench_engine_pending(const struct kbench_engine *e);
/* Run the pool for up to timeout_ms (or until something finishes, or fd is readable: the
 * caller's own input, -1 for none). -1: fatal error. */
int kbench_engine_step(struct kbench_engine *e, int fd, int timeout_ms);
/* The oldest record once it is finished: 1 with *rec (caller owns), *line (borrowed until the
 * next call), *ev (caller owns) and *bad (1 when the record itself was bad); 0: not yet. */
int kbench_engine_next(struct kbench_engine *e, json_t **rec, char **line, size_t *len,
                       json_t **ev, int *bad);
/* No more records will be submitted (spare workers may stop). */
void kbench_engine_close_input(struct kbench_engine *e);
/* Stop everything now (signal): kill the workers and remove their temp dirs. */
void kbench_engine_abort(struct kbench_engine *e);
/* "cpu" or "cuda", and the worker's torch version, once probed. */
const char *kbench_engine_device(const struct kbench_engine *e);
const char *kbench_engine_torch(const struct kbench_engine *e);

/* ------------------------------------------------------------------ metrics */

#define KBENCH_NFAST 6
#define KBENCH_MAX_LEVEL 99     /* the largest level a problem path or record may have */
/* The largest speedup a report takes: a 1 us kernel against a 1 s reference. Past it a
 * record's speedup is no measurement (a hand-edited or corrupted record). */
#define KBENCH_MAX_SPEEDUP 1e6
extern const double kbench_fast_p[KBENCH_NFAST];    /* 0, 0.5, 0.8, 1, 1.5, 2 */
/* A speedup over this is eval.excessive_speedup */
#define KBENCH_EXCESSIVE_SPEEDUP 10

/* Set eval's speedup from ratio (reference / kernel time): "speedup" the ratio at four
 * significant digits (0.00004 stays one; a speedup so written is kept as it is), and
 * "excessive_speedup" true when that written speedup is over KBENCH_EXCESSIVE_SPEEDUP. The
 * one rule for both the worker's speedup and --baseline's: a ratio of 10.0003 is speedup 10,
 * not excessive, and a record never says otherwise of its own speedup. */
void kbench_eval_set_speedup(json_t *ev, double ratio);

struct kbench_tally_entry {
	int level;
	char *key;          /* problem path (owned) */
	int correct;
	double speedup;     /* <= 0: unknown */
};

struct kbench_tally {
	struct kbench_tally_entry *e;   /* (n) */
	size_t n, cap;
	size_t unplaced;    /* records with an eval but no problem or level (a malformed input
	                     * line passed through): failures that no level's row shows */
	char why[160];      /* the reason kbench_tally_record last refused a record */
};

struct kbench_row {
	int level;
	int n;              /* problems: the denominator */
	int samples;        /* samples counted */
	int k;              /* most samples of one problem */
	double exec;        /* mean over problems of the fraction of correct samples */
	double fast[KBENCH_NFAST];
	double geomean;     /* of the speedups of correct samples; 0 when none */
	int n_speedup;
	double pass_exec;   /* pass@k of correctness (k above) */
	double pass_fast1;  /* pass@k of fast_1 */
};

void kbench_tally_init(struct kbench_tally *t);
void kbench_tally_free(struct kbench_tally *t);
void kbench_tally_add(struct kbench_tally *t, int level, const char *key, int correct,
                      double speedup);
/* Add an evaluated record: level and key from the "levelN/NUM" in `problem` (its level over
 * `level`, as the evaluation finds the problem in a tree), else `level` with `problem`
 * (a whole number from 0 to 1000000; another number is none) or `id`; correct from eval
 * (and, when robust, not deceptive by eval.deceptive or deceive.deceptive). 0, or -1 with
 * *why set (t->why, or a constant) when the record has no eval object (not counted), no
 * problem (counted in t->unplaced), or an eval field of the wrong type or out of range
 * (counted as a failed sample of its problem): eval.correct must be true or false
 * (present), compiled, deceptive and excessive_speedup true or false, error a string or
 * null, trials_passed a count, speedup a number from 0 to KBENCH_MAX_SPEEDUP, ref_ms,
 * kernel_ms, max_abs_err and max_rel_err finite numbers >= 0, the numbers null where
 * unknown; with robust, deceive.deceptive true or false. */
int kbench_tally_record(struct kbench_tally *t, const json_t *rec, int robust, const char **why);
/* Per-level rows (caller frees *rows). tree (may be NULL) adds its problems of each level,
 * filtered by levels/problems (NULL or empty: all; levels empty: the levels of t's samples
 * alone), to the denominators; samples of a problem it lacks are not counted (one warning
 * says how many). Each level of levels (0 to KBENCH_MAX_LEVEL) has a row, n 0 when it has
 * no problem. Returns the row count. */
size_t kbench_tally_rows(const struct kbench_tally *t, const struct kbench_tree *tree,
                         const struct kbench_ranges *levels, const struct kbench_ranges *problems,
                         struct kbench_row **rows);
json_t *kbench_row_json(const struct kbench_row *r);
void kbench_rows_print(FILE *fp, const struct kbench_row *rows, size_t n);
/* --fail-under "exec=0.4,fast_1=0.1": 0 and *out filled, or -1 on a bad spec. */
struct kbench_threshold {
	char name[16];      /* exec, fast_0 .. fast_2, geomean */
	double min;
};
int kbench_thresholds_parse(const char *s, struct kbench_threshold **out, size_t *n);
/* Number of (level, threshold) pairs that fall short, plus one for each level without a
 * sample and one when there is no level at all (nothing to judge is no pass); each one is
 * reported on stderr. */
int kbench_thresholds_check(const struct kbench_threshold *th, size_t nth,
                            const struct kbench_row *rows, size_t n);

#endif
