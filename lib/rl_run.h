/* rl_run: one BiC-RL step of dice-rl (SPEC §3 loop items 1-8) on top of lib/sampler (rollouts),
 * an external reward program (rewards), lib/rl (advantages, samples, loss) and lib/optim.
 *
 * Tasks: JSONL records; the prompt of a task is lib/sample_rec's (infill template when the
 * stage is infill, the one-shot KernelBench template from `ref` in the end-to-end stage, or
 * `prompt` / `prompt_ids`). A stage walks its task list in order, tasks_per_step at a time,
 * wrapping at the end (SPEC §5.3 sequential_select).
 *
 * Reward protocol: the step's responses are written as JSONL records (the task record plus
 * "completion" (text; "" without a tokenizer), "kernel" (its code block; absent when none:
 * never the task's own, see sample_rec_text_fields), "response_ids" and "rl": {"step", "task",
 * "sample"}; the task line's own bytes for its other fields, lib/jsonl's jsonl_splice, so
 * that an id past int64 or a number's spelling comes back as it was) to the standard input of `sh -c CMD`, which writes one JSON record per input
 * record, in order, on its standard output. The reward of a record is its number "reward"
 * when present, else 1 when eval.correct is true (kbench-eval's output), else 0; with robust,
 * a record with eval.deceptive or deceive.deceptive true gets 0 (and is counted). A record
 * with neither a number "reward" nor an "eval" object, or a line that is not an object, gets
 * 0 and counts in rl_metrics.bad (one warning a step); so does a non-zero exit status of a
 * program that wrote every record. Fewer records than given, or more (the output is read up
 * to the first record too many, then its pipe closed), fail the step. The program runs in a
 * process group of its own; once rl_runner.stop is set, or reward_timeout seconds after its
 * last record was handed to it, the group is sent SIGTERM (SIGKILL 5 s later), not waited
 * for. Killed for the time, it fails the step with fewer records than given; with all of
 * them, they count and it counts in rl_metrics.bad, as a non-zero exit status does.
 * Once the program has exited, its pipes are waited for 5 s more at most: a process it left
 * behind (setsid) may hold them open for ever; then the output already there is read, and
 * the step fails with records missing, or goes on with all of them (one warning, not bad).
 * What it leaves behind once it has exited is killed and reaped: its group, and the
 * descendants that left it, orphans re-parented to us (rl_runner_init makes the process a
 * child subreaper; lib/pool's pool_sweep); our children from before it started are not.
 * With overlap (the default of dice-rl), the program is started with the step and each
 * task's group of records is written as soon as the group has finished decoding, in task
 * order, while a reader thread collects the output: the program (kbench-eval's compile pool)
 * works while the model decodes, and sees the same input in the same order as without.
 * eval.build_s and eval.run_s of the output records are summed into the step's compile and
 * execute seconds.
 *
 * Update: advantages per task (lib/rl.h), samples of every response of a kept task (all
 * rounds), shuffled; pi_old of every sample is computed before the first update; then
 * optimizer updates of `update` samples each (micro-batches of `micro` samples, gradients
 * accumulated; loss scale 1 / (samples of the update * L1), L1 = the longest response of the
 * step's kept tasks), with a fresh AdamW state every step.
 *
 * Dump (for tests/gpu/rl-parity.py): before the last update of a step (the weights have then
 * moved away from pi_old when the step has several updates), its first micro-batch is written
 * with lib/sft_train's sft_batch_write, format "dice-rl-batch": the rows, "adv", "logp_old"
 * (and "logp_ref"), "eps", "beta", "scale" (1-element), the loss and its gradients.
 */
#ifndef DICE_RL_RUN_H
#define DICE_RL_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "model_bwd.h"
#include "optim.h"
#include "rl.h"
#include "rng.h"
#include "sample_rec.h"
#include "sampler.h"

struct rl_task {
	json_t *rec;                 /* owned */
	char *line;                  /* the input line rec was read from (len bytes), owned:
	                              * the reward records pass its bytes through */
	size_t len;
	char *where;                 /* "file:line" */
	int level;                   /* `level` or `cuke.level`; INT_MAX when absent or bad */
	int skip;                    /* the stage kinds that leave it out (bit 1 << infill);
	                              * 0 from rl_tasks_add, the caller's checks set it */
};

struct rl_tasks {
	struct rl_task *t;
	size_t n, cap;
};

/* takes rec, read from line (len bytes, copied; NULL: none, rec re-serialised) */
void rl_tasks_add(struct rl_tasks *ts, json_t *rec, const char *line, size_t len,
                  const char *where);
void rl_tasks_sort_level(struct rl_tasks *ts);                             /* stable */
void rl_tasks_free(struct rl_tasks *ts);
/* Length in tokens of the prompt of rec in a stage (infill: 1), or -1 with a message in err. */
struct rl_runner;
int rl_task_prompt_len(struct rl_runner *r, const json_t *rec, int infill, char *err,
                       size_t errlen);
/* 1 when rec carries an infilling task (prefix and suffix), or has no `ref` at all (null
 * counts as absent, here and in the functions below) */
int rl_task_infill(const json_t *rec);
/* Why rec, with a `ref` and a prefix or a suffix, is no infilling task ("prefix without
 * suffix", "suffix is not a string", ...); NULL when it is one, or has neither. */
const char *rl_task_infill_bad(const json_t *rec);
/* The level of rec, for --order level: `level`, else `cuke.level`, an integer (2, 2.0, "2"
 * or "level2"). 0 with *level; 1 when absent, -1 when unreadable (*level INT_MAX: last). */
int rl_task_level(const json_t *rec, int *level);

struct rl_runner {
	struct model *m;             /* the policy: fp32 weights, updated in place */
	struct model_train t;
	struct model_train *ref;     /* frozen reference for the KL, or NULL (pi_old) */
	struct sample_rec *sr;
	struct sampler_opts so;      /* rollout decoding (the "rl" preset) */
	struct optim_opts oo;
	struct rl_loss_opts lo;      /* eps, beta (scale set per update) */
	const char *reward_cmd;
	double reward_timeout;       /* seconds from its last record to its end; 0: no limit */
	int overlap;                 /* 1: the reward program runs beside the rollout */
	int robust;
	int group;                   /* G (16) */
	int micro, update;           /* samples per micro-batch, per optimizer update */
	int pad_id;
	struct rng rng;              /* rollout seeds and sample order */
	int verbose;
	int mem_warned;              /* a rollout split to fit its KV caches in memory, said
	                              * (once a run; lib/sampler_fit) */
	const char *dump;            /* --dump-batch: write one micro-batch of the step's last
	                              * update (rows, adv, logp_old, loss, gradients) here */
	volatile sig_atomic_t *stop; /* or NULL; set (by a signal handler): the reward program
	                              * is sent SIGTERM (it runs in a process group of its own)
	                              * rather than waited for, and the step fails */
};

struct rl_metrics {
	int tasks, responses, skipped, deceptive, bad;
	double reward;               /* mean over responses */
	double loss, kl, clipfrac;   /* mean per update; kl, clip per target token */
	int samples, updates;
	long tokens;                 /* generated tokens */
	double grad_norm;            /* of the last update */
	double t_rollout;            /* the sampler's wall time */
	double t_reward;             /* first record sent to the reward program .. its last output */
	double t_reward_wait;        /* rollout end .. the reward program done: not hidden */
	double t_overlap;            /* reward time spent while the rollout ran */
	double t_compile, t_execute; /* eval.build_s, eval.run_s summed over the records */
	double t_update;             /* samples, pi_old, optimizer updates */
	double t_step;               /* the whole step */
};

/* 0, or -1 with a warning. It also makes the process a child subreaper (lib/pool's
 * pool_subreaper; a failure is only warned of): the orphans the reward program leaves come
 * back to it, to be killed. */
int rl_runner_init(struct rl_runner *r, struct model *m, int recompute);
void rl_runner_free(struct rl_runner *r);

/* Roll out ntask tasks x group samples with o, score them; rewards (ntask * group) and the
 * results (caller frees with sampler_result_free) are returned. stage_infill picks the
 * prompt template. The KV caches stay within the memory there is (lib/sampler_fit: the
 * limit read at each rollout, $DICE_MEM_LIMIT where set): where o->max_active of them would
 * pass it, fewer sequences run at once, with the same results (one warning a run); a
 * request that cannot fit even alone runs alone (dice-rl skips such tasks up front). The
 * overlapped reward program still gets each group as soon as it is decoded. 0, or -1 with a
 * warning. */
int rl_rollout(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
               int ntask, int group, int stage_infill, int step, float *rewards,
               struct sampler_result *res, int **prompts, int *plens, struct rl_metrics *mt);

/* One RL step over ntask tasks. 0, or -1 with a warning. */
int rl_step(struct rl_runner *r, struct rl_task *const *tasks, int ntask, int stage_infill,
            int step, struct rl_metrics *mt);

/* Exec of tasks under o with one sample each (in-RL evaluation) in *exec: NaN when the reward
 * program failed (-1 then, as with records it scored 0). */
int rl_evaluate(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
                int ntask, int stage_infill, int step, double *exec);

#endif
