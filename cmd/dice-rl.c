/* dice-rl: BiC-RL (SPEC §0, §3, §5.3): an infilling stage then an end-to-end stage, each a loop
 * of rollouts from the current weights (RL decoding), execution rewards (kbench-eval, or any
 * reward program over JSONL), group z-score advantages and TraceRL updates (clipped surrogate
 * + beta * k3 KL), over tasks in file order (or sorted by level), tasks_per_step at a time.
 * The step is lib/rl_run.c, the objective lib/rl.c; this file holds options and the loop. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomfile.h"
#include "checkpoint.h"
#include "jsonl.h"
#include "rl_run.h"
#include "sampler_fit.h"
#include "sft_train.h"
#include "tokenizer.h"
#include "util.h"

static const char usage_text[] =
	"usage: dice-rl -m MODEL_DIR -o OUT_DIR [options] [task-file ...]\n"
	"  -m, --model DIR          checkpoint to start from (HF directory; default $DICE_MODEL)\n"
	"  -o, --output DIR         where checkpoints, rl_state.json go\n"
	"  -t, --tokenizer DIR      tokenizer files (default: the model directory)\n"
	"  -S, --stage NAME         one stage: infill or e2e (default e2e)\n"
	"  -n, --steps N            steps of --stage (default 20 infill, 100 e2e)\n"
	"  -s, --stages SPEC        stages in order, e.g. infill:20,e2e:100\n"
	"  -p, --tasks-per-step N   tasks per step, file order, wrapping (64)\n"
	"  -O, --order NAME         file (default) or level: sort tasks by level first\n"
	"  -G, --group N            responses per task (16)\n"
	"  -x, --max-tokens N       new tokens per response (4096)\n"
	"  -L, --max-prompt-len N   skip tasks whose prompt is longer, in tokens (2000; 0: no\n"
	"                           limit)\n"
	"  -b, --batch N            sequences decoded together (16); fewer where their KV\n"
	"                           caches would not fit in memory (the same results)\n"
	"  -r, --reward SPEC        kbench[:ARGS] (default): kbench-eval next to dice-rl,\n"
	"                           ARGS added to its options; cmd:PROGRAM: a shell\n"
	"                           command, JSONL records in, one record out for each\n"
	"  -N, --reward-trials N    kbench correctness trials (1; seed 42, no timing)\n"
	"  -R, --robust             deceptive kernels get reward 0\n"
	"  -W, --no-overlap         start the reward program after the whole rollout (default:\n"
	"                           with the step, fed each task's group once it is decoded)\n"
	"  -w, --reward-timeout S   seconds the reward program may take after its last record\n"
	"                           (21600; 0: no limit); then it is killed, and the step\n"
	"                           fails unless every record was in\n"
	"  -l, --lr X               AdamW learning rate (1e-6; fresh state every step)\n"
	"  -e, --clip-eps X         surrogate clip epsilon (0.2)\n"
	"  -B, --beta X             k3 KL coefficient (0.01)\n"
	"  -f, --ref-model DIR      KL to this frozen model (default: to pi_old)\n"
	"  -u, --update-samples N   samples per optimizer update (256)\n"
	"  -M, --micro-batch N      samples per forward/backward (4)\n"
	"  -c, --clip X             gradient-norm clipping (1.0; 0: off)\n"
	"  -z, --seed N             seed of rollouts and sample order (10086)\n"
	"  -d, --device NAME        cpu or cuda (default $DICE_DEVICE, else cpu)\n"
	"  -g, --log FILE           JSONL metrics, one line per step\n"
	"  -k, --save-every N       save every N steps (0: only at the end)\n"
	"  -C, --resume             continue from -o (weights, task positions, RNG)\n"
	"  -E, --eval-every N       evaluate every N steps on --eval-tasks (0: never)\n"
	"  -T, --eval-tasks FILE    held-out tasks (top-k 1, static decoding, one sample)\n"
	"  -a, --recompute          recompute activations in the backward (less memory)\n"
	"  -X, --dump-batch FILE    run one step, write a micro-batch of its last update with\n"
	"                           its loss and gradients (tests/gpu/rl-parity.py), exit\n"
	"  -q, --quiet              no progress lines on stderr\n"
	"  -h, --help               show this help\n"
	"  -V, --version            show the version\n";

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "output", required_argument, NULL, 'o' },
	{ "tokenizer", required_argument, NULL, 't' },
	{ "stage", required_argument, NULL, 'S' },
	{ "steps", required_argument, NULL, 'n' },
	{ "stages", required_argument, NULL, 's' },
	{ "tasks-per-step", required_argument, NULL, 'p' },
	{ "order", required_argument, NULL, 'O' },
	{ "group", required_argument, NULL, 'G' },
	{ "max-tokens", required_argument, NULL, 'x' },
	{ "max-prompt-len", required_argument, NULL, 'L' },
	{ "batch", required_argument, NULL, 'b' },
	{ "reward", required_argument, NULL, 'r' },
	{ "reward-trials", required_argument, NULL, 'N' },
	{ "robust", no_argument, NULL, 'R' },
	{ "no-overlap", no_argument, NULL, 'W' },
	{ "reward-timeout", required_argument, NULL, 'w' },
	{ "lr", required_argument, NULL, 'l' },
	{ "clip-eps", required_argument, NULL, 'e' },
	{ "beta", required_argument, NULL, 'B' },
	{ "ref-model", required_argument, NULL, 'f' },
	{ "update-samples", required_argument, NULL, 'u' },
	{ "micro-batch", required_argument, NULL, 'M' },
	{ "clip", required_argument, NULL, 'c' },
	{ "seed", required_argument, NULL, 'z' },
	{ "device", required_argument, NULL, 'd' },
	{ "log", required_argument, NULL, 'g' },
	{ "save-every", required_argument, NULL, 'k' },
	{ "resume", no_argument, NULL, 'C' },
	{ "eval-every", required_argument, NULL, 'E' },
	{ "eval-tasks", required_argument, NULL, 'T' },
	{ "recompute", no_argument, NULL, 'a' },
	{ "dump-batch", required_argument, NULL, 'X' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const char shortopts[] = "m:o:t:S:n:s:p:O:G:x:L:b:r:N:RWw:l:e:B:f:u:M:c:z:d:g:k:CE:T:aX:qhV";

static _Noreturn void usage(int status)
{
	cli_usage(status, "dice-rl -m MODEL_DIR -o OUT_DIR [options] [task-file ...]", usage_text);
}

/* Before training starts (loading, reading the tasks, which may block on a pipe or a fifo) a
 * signal ends the program at once, 128 + sig, with one line: nothing has been saved. From
 * then on it ends the run after the step under way (finished, or undone), saved, and the
 * exit status is 128 + sig all the same (as dice-sft's). */
static volatile sig_atomic_t stop, stop_sig, training;  /* stop: also set by --dump-batch */
static void on_signal(int sig)
{
	if (!training)
		util_signal_exit(sig, "interrupted before training");
	stop_sig = sig;
	stop = 1;
}

/* ---------------------------------------------------------------- stages */

#define MAX_STAGES 8
struct stage {
	int infill;                  /* 1 infill, 0 e2e */
	int steps;
	size_t pos;                  /* next task of its list */
};

static int stage_parse_name(const char *s, size_t n, int *infill)
{
	if (n == 6 && !strncmp(s, "infill", 6))
		return *infill = 1, 0;
	if (n == 3 && !strncmp(s, "e2e", 3))
		return *infill = 0, 0;
	return -1;
}

static int stages_parse(const char *spec, struct stage *st)
{
	int n = 0;
	for (const char *p = spec; *p; ) {
		const char *c = strchr(p, ':'), *e = strchr(p, ',');
		long v;
		if (!e)
			e = p + strlen(p);
		if (n == MAX_STAGES)
			return -2;
		if (!c || c > e || stage_parse_name(p, (size_t)(c - p), &st[n].infill))
			return -1;
		char *numstr = xstrndup(c + 1, (size_t)(e - c - 1));
		int bad = parse_long(numstr, 0, 1L << 30, &v) < 0;
		free(numstr);
		if (bad)
			return -1;
		st[n].steps = (int)v;
		st[n++].pos = 0;
		if (*e && !e[1])
			return -1;                  /* a trailing comma */
		p = *e ? e + 1 : e;
	}
	return n;
}

/* ---------------------------------------------------------------- tasks */

/* The tasks are checked as they are read, so that what is said of them comes out in the order
 * of their lines, among what the reader says of the malformed ones */
struct reader {
	struct rl_tasks *ts;
	int eval;                    /* -T's tasks */
	const int *used;             /* the stage kinds to check them for */
	int level;                   /* --order level */
	long max_plen;               /* --max-prompt-len (0: none) */
	struct rl_runner *r;
	const struct sampler_opts *so;
	size_t mem;                  /* what the KV caches may take */
	size_t nlong[2], nbad[2];    /* skipped, by stage kind: too long, bad */
	int bad;                     /* one was reported: exit status 1 */
};

/* What would drop t from a stage's list, or sort it last, unsaid: half an infilling task; a
 * level that is no integer; a prompt that cannot be made, or whose KV cache (the prompt +
 * --max-tokens) cannot fit in memory even alone (said once, for the first stage kind), or one
 * over --max-prompt-len (said for each). Sets t->skip. */
static void check_task(struct reader *rd, struct rl_task *t)
{
	const char *why = rd->used[1] ? rl_task_infill_bad(t->rec) : NULL;
	char err[512];
	int told = 0, lv;

	if (!rd->eval && why) {
		warn_msg("%s: %s: not an infilling task%s", t->where, why,
		         rd->used[0] ? " (the end-to-end stage takes it)" : ": skipped");
		rd->bad = 1;
	}
	if (!rd->eval && rd->level && rl_task_level(t->rec, &lv) < 0) {
		warn_msg("%s: level is not an integer: sorted last", t->where);
		rd->bad = 1;
	}
	for (int k = 0; k < 2; k++) {
		if (!rd->used[k])
			continue;
		if (k && rd->eval && why) {
			warn_msg("%s: %s: not an infilling task, no eval task of the infill stage",
			         t->where, why);
			rd->bad = 1;
		}
		if (k && !rl_task_infill(t->rec))
			continue;
		int len = rl_task_prompt_len(rd->r, t->rec, k, err, sizeof err);
		if (len >= 0 && rd->max_plen && len > rd->max_plen) {
			warn_msg("%s: the %s prompt has %d tokens, over --max-prompt-len %ld: skipped",
			         t->where, k ? "infilling" : "end-to-end", len, rd->max_plen);
			rd->nlong[k]++;
			t->skip |= 1 << k;
			continue;
		}
		if (len < 0 || sampler_fit_alone(rd->r->m, rd->so, len, rd->mem, err, sizeof err) < 0) {
			if (!told)
				warn_msg("%s: %s: %sskipped", t->where, err, rd->eval ? "eval task " : "");
			told = 1;
			rd->nbad[k]++;
			rd->bad = 1;
			t->skip |= 1 << k;
		}
	}
}

static int on_task(json_t *rec, struct jsonl_reader *r, void *arg)
{
	struct reader *rd = arg;
	char *where = xasprintf("%s:%zu", r->name, r->lineno);
	rl_tasks_add(rd->ts, rec, r->line, r->len, where);
	free(where);
	check_task(rd, &rd->ts->t[rd->ts->n - 1]);
	return 0;
}

/* The tasks of ts that a stage kind takes (infill: those with prefix and suffix) and did not
 * leave out, in *n */
static struct rl_task **task_list(struct rl_tasks *ts, int infill, size_t *n)
{
	struct rl_task **l = xcalloc(ts->n ? ts->n : 1, sizeof *l);
	*n = 0;
	for (size_t i = 0; i < ts->n; i++)
		if ((!infill || rl_task_infill(ts->t[i].rec)) && !(ts->t[i].skip & 1 << infill))
			l[(*n)++] = &ts->t[i];
	return l;
}

/* ---------------------------------------------------------------- state */

#define STATE_FILE "rl_state.json"

static int save_all(struct rl_runner *r, const char *out, const char *tok_dir, const char *spec,
                    const struct stage *st, int nst, int si, int done, long step)
{
	char err[512], save[32];
	json_t *pos = json_array(), *rng = json_array();
	for (int i = 0; i < nst; i++)
		json_array_append_new(pos, json_integer((json_int_t)st[i].pos));
	for (int i = 0; i < 4; i++) {
		char h[24];
		snprintf(h, sizeof h, "%016llx", (unsigned long long)r->rng.s[i]);
		json_array_append_new(rng, json_string(h));
	}
	snprintf(save, sizeof save, "step %ld", step);
	json_t *j = json_pack("{s:s, s:i, s:s, s:I, s:i, s:i, s:o, s:o, s:s}", "format",
	                      "dice-rl-state", "version", 1, "stages", spec, "step", (json_int_t)step,
	                      "stage", si, "stage_step", done, "pos", pos, "rng", rng, "save", save);
	char *text = json_dumps(j, JSON_COMPACT);
	char *path = xasprintf("%s/%s", out, STATE_FILE);
	int rc = sft_train_save_model(r->m, out, tok_dir, save, err, sizeof err);
	if (rc == 0)
		rc = atomfile_write(path, text, strlen(text), err, sizeof err);
	if (rc < 0)
		warn_msg("%s", err);
	free(text), free(path);
	json_decref(j);
	return rc;
}

/* one field of rl_state.json is not what save_all writes: the run cannot continue */
static _Noreturn void bad_state(const char *path, const char *what)
{
	die("%s: bad %s (not a dice-rl state, or damaged)\nhint: restore it, or start afresh "
	    "without --resume", path, what);
}

static void load_state(const char *out, const char *spec, struct stage *st, int nst, int *si,
                       int *done, long *step, struct rng *rng, const size_t *nlist)
{
	char *path = xasprintf("%s/%s", out, STATE_FILE);
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je), *pos, *rs;
	const char *fmt = NULL, *sp = NULL;
	/* read at their full width: jansson's "i" casts to int, so 2^32 + 1 was read as 1 */
	json_int_t jstep, ver, jsi, jdone;

	if (!j)
		die("%s: %s", path, je.text);
	if (json_unpack(j, "{s:s, s:I, s:s, s:I, s:I, s:I, s:o, s:o}", "format", &fmt, "version",
	                &ver, "stages", &sp, "step", &jstep, "stage", &jsi, "stage_step", &jdone,
	                "pos", &pos, "rng", &rs) < 0 || strcmp(fmt, "dice-rl-state") || ver != 1)
		die("%s: not a dice-rl state (format dice-rl-state version 1)", path);
	struct stage was[MAX_STAGES];
	int same = stages_parse(sp, was) == nst;
	for (int i = 0; same && i < nst; i++)
		same = was[i].infill == st[i].infill;
	if (!same)     /* step counts may change, the stages may not */
		die("%s: saved with stages '%s', now '%s'\nhint: resume with the same stages", path,
		    sp, spec);
	if (jstep < 0 || jstep > LONG_MAX / 2)
		bad_state(path, "step");
	if (jsi < 0 || jsi >= nst)
		bad_state(path, "stage");
	if (jdone < 0 || jdone > jstep || jdone > INT_MAX)
		bad_state(path, "stage_step");
	*si = (int)jsi;
	*done = (int)jdone;
	if (!json_is_array(pos) || (int)json_array_size(pos) != nst)
		bad_state(path, "pos");
	for (int i = 0; i < nst; i++) {
		json_t *p = json_array_get(pos, (size_t)i);
		if (!json_is_integer(p) || json_integer_value(p) < 0 ||
		    (st[i].steps && json_integer_value(p) >= (json_int_t)nlist[st[i].infill]))
			bad_state(path, "pos");
		st[i].pos = (size_t)json_integer_value(p);
	}
	if (!json_is_array(rs) || json_array_size(rs) != 4)
		bad_state(path, "rng");
	for (int i = 0; i < 4; i++) {
		const char *h = json_string_value(json_array_get(rs, (size_t)i));
		if (!h || !*h || strlen(h) > 16 || strspn(h, "0123456789abcdefABCDEF") != strlen(h))
			bad_state(path, "rng");
		rng->s[i] = strtoull(h, NULL, 16);
	}
	if (!(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]))
		bad_state(path, "rng");
	json_t *sv = json_object_get(j, "save");        /* absent in states from before it */
	char err[512];
	if (sv && !json_is_string(sv))
		bad_state(path, "save");
	if (checkpoint_check_save(out, path, json_string_value(sv), err, sizeof err) < 0)
		die("%s", err);
	*step = (long)jstep;
	json_decref(j);
	free(path);
}

/* kbench-eval beside this program, else on PATH */
static char *kbench_cmd(long trials, int robust, const char *extra)
{
	char self[PATH_MAX], *slash, *prog;
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	struct stat sb;

	prog = xstrdup("kbench-eval");
	if (n > 0) {
		self[n] = 0;
		if ((slash = strrchr(self, '/'))) {
			*slash = 0;
			char *p = xasprintf("%s/kbench-eval", self);
			if (!stat(p, &sb))
				free(prog), prog = p;
			else
				free(p);
		}
	}
	char *cmd = xasprintf("'%s' -u -n %ld -P 0%s%s%s", prog, trials, robust ? " -R" : "",
	                      extra ? " " : "", extra ? extra : "");
	free(prog);
	return cmd;
}

/* An option's input file that cannot be opened stops the run now, not after the training
 * (a task operand that cannot is said and left out). A fifo is not opened, only asked of
 * access(2): an open lets a writer waiting in its own open through, which then writes after
 * the close into a fifo no one reads (SIGPIPE, its lines lost), and the read of it later
 * waits for a writer that is gone. O_NONBLOCK for a device that would wait. */
static void check_readable(const char *opt, const char *path)
{
	struct stat sb;
	int fd;

	if (!strcmp(path, "-"))
		return;
	if (stat(path, &sb) == 0 && S_ISFIFO(sb.st_mode)) {
		if (access(path, R_OK) < 0)
			die("cannot open %s '%s':", opt, path);
		return;
	}
	if ((fd = open(path, O_RDONLY | O_NONBLOCK)) < 0)
		die("cannot open %s '%s':", opt, path);
	if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		close(fd);
		errno = EISDIR;
		die("cannot open %s '%s':", opt, path);
	}
	close(fd);
}

static void load_model(struct model *m, const char *dir, const struct ops *ops)
{
	struct checkpoint ck;
	char err[512];
	if (checkpoint_open(&ck, dir, err, sizeof err) < 0)
		die("%s", err);
	if (model_init(m, &ck.cfg, &ck.w, ops, DICE_F32) < 0)
		die("%s: cannot set up the model", dir);
	checkpoint_close(&ck);
}

int main(int argc, char **argv)
{
	const char *model_dir = NULL, *out = NULL, *tok_dir = NULL, *log_path = NULL;
	const char *device = util_env("DICE_DEVICE", "cpu");
	const char *stage_name = NULL, *stages_spec = NULL, *reward = "kbench";
	const char *ref_dir = NULL, *eval_path = NULL, *order = "file", *dump = NULL;
	long steps = -1, tps = 64, group = 16, max_tokens = 4096, batch = 16, trials = 1;
	long update = 256, micro = 4, save_every = 0, eval_every = 0, max_plen = 2000;
	double reward_timeout = 21600;  /* 6 h: a backstop over kbench-eval's own limits */
	unsigned long long seed = 10086;
	int robust = 0, overlap = 1, resume = 0, recompute = 0, quiet = 0, ret = 0, opt;
	struct optim_opts oo;
	float eps = 0.2f, beta = 0.01f;
	char err[512];

	util_set_progname(argv[0]);
	signal(SIGINT, on_signal);      /* see on_signal */
	signal(SIGTERM, on_signal);
	optim_defaults(&oo);
	oo.lr = 1e-6f;
	while ((opt = cli_getopt(argc, argv, shortopts, longopts)) != -1) {
		switch (opt) {
		case 'm': model_dir = optarg; break;
		case 'o': out = cli_nonempty('o', "a directory", optarg); break;
		case 't': tok_dir = optarg; break;
		case 'S': stage_name = optarg; break;
		case 'n': steps = cli_long("--steps", optarg, 0, 1L << 30); break;
		case 's': stages_spec = optarg; break;
		case 'p': tps = cli_long("--tasks-per-step", optarg, 1, 1L << 20); break;
		case 'O': order = optarg; break;
		case 'G': group = cli_long("--group", optarg, 1, 1L << 16); break;
		case 'x': max_tokens = cli_long("--max-tokens", optarg, 1, 1L << 24); break;
		case 'b': batch = cli_long("--batch", optarg, 1, 1L << 16); break;
		case 'r': reward = optarg; break;
		case 'N': trials = cli_long("--reward-trials", optarg, 1, 1000); break;
		case 'L': max_plen = cli_long("--max-prompt-len", optarg, 0, 1L << 30); break;
		case 'R': robust = 1; break;
		case 'W': overlap = 0; break;
		case 'w': reward_timeout = cli_double("--reward-timeout", optarg, 0, 1e6); break;
		case 'l': oo.lr = (float)cli_double("--lr", optarg, 0, 10); break;
		case 'e': eps = (float)cli_double("--clip-eps", optarg, 0, 10); break;
		case 'B': beta = (float)cli_double("--beta", optarg, 0, 1e6); break;
		case 'f': ref_dir = optarg; break;
		case 'u': update = cli_long("--update-samples", optarg, 1, 1L << 24); break;
		case 'M': micro = cli_long("--micro-batch", optarg, 1, 1L << 16); break;
		case 'c': oo.clip = (float)cli_double("--clip", optarg, 0, 1e9); break;
		case 'z': seed = (unsigned long long)cli_long("--seed", optarg, 0, 0x7fffffffffffffffL); break;
		case 'd': device = optarg; break;
		case 'g': log_path = optarg; break;
		case 'k': save_every = cli_long("--save-every", optarg, 0, 1L << 30); break;
		case 'C': resume = 1; break;
		case 'E': eval_every = cli_long("--eval-every", optarg, 0, 1L << 30); break;
		case 'T': eval_path = optarg; break;
		case 'a': recompute = 1; break;
		case 'X': dump = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': usage(0);
		case 'V': cli_version();
		default:
			usage(EXIT_STATUS_USAGE);
		}
	}
	if (!model_dir && !resume)
		model_dir = util_env("DICE_MODEL", NULL);
	if (!out)
		die_status(EXIT_STATUS_USAGE, "-o OUT_DIR is required (where the checkpoints and "
		           "rl_state.json go)");
	if (!model_dir && !resume)
		die_status(EXIT_STATUS_USAGE, "-m MODEL_DIR (or DICE_MODEL) is required, or --resume");
	/* -o is written at the end: one that cannot be is said now, not after the training */
	if (checkpoint_dir_writable(out, err, sizeof err) < 0)
		die("%s", err);
	/* no output may be an input (the operands, or stdin without them, and -T): -g and -X
	 * would empty it before it is read */
	int nin = argc - optind;
	char **ins = xcalloc((size_t)nin + 2, sizeof *ins);
	memcpy(ins, argv + optind, (size_t)nin * sizeof *ins);
	if (!nin)
		ins[nin++] = "-";
	if (eval_path)
		ins[nin++] = (char *)eval_path;
	cli_output_not_input(log_path, ins, nin);
	cli_output_not_input(dump, ins, nin);
	free(ins);
	if (strcmp(order, "file") && strcmp(order, "level"))
		die_status(EXIT_STATUS_USAGE, "bad --order '%s' (file or level)", order);
	if (eval_every && !eval_path)
		die_status(EXIT_STATUS_USAGE, "--eval-every needs --eval-tasks FILE");
	if (eval_path && !eval_every)
		warn_msg("--eval-tasks '%s' unused without --eval-every N", eval_path);
	if (eval_every)
		check_readable("--eval-tasks", eval_path);
	if (strcmp(reward, "kbench") && strncmp(reward, "kbench:", 7) && strncmp(reward, "cmd:", 4))
		die_status(EXIT_STATUS_USAGE, "bad --reward '%s' (kbench[:ARGS] or cmd:PROGRAM)",
		           reward);

	/* stages */
	struct stage st[MAX_STAGES];
	int nst;
	char *spec;
	if (stages_spec && (stage_name || steps >= 0))
		die_status(EXIT_STATUS_USAGE, "--stages names every stage and its steps: give it "
		           "without %s", stage_name ? "--stage" : "--steps");
	if (stages_spec) {
		spec = xstrdup(stages_spec);
	} else {
		int inf;
		if (!stage_name)
			stage_name = "e2e";
		if (stage_parse_name(stage_name, strlen(stage_name), &inf) < 0)
			die_status(EXIT_STATUS_USAGE, "bad --stage '%s' (infill or e2e)", stage_name);
		spec = xasprintf("%s:%ld", stage_name, steps >= 0 ? steps : inf ? 20L : 100L);
	}
	if ((nst = stages_parse(spec, st)) == -2)
		die_status(EXIT_STATUS_USAGE, "bad --stages '%s': at most %d stages", spec, MAX_STAGES);
	if (nst <= 0)
		die_status(EXIT_STATUS_USAGE, "bad --stages '%s' (e.g. infill:20,e2e:100)", spec);

	const struct ops *ops = ops_get(device);
	if (!ops)
		die_status(EXIT_STATUS_USAGE, "no device '%s' %s", device, ops_missing(device));

	int used[2] = { 0, 0 };        /* the stage kinds with steps to run */
	for (int i = 0; i < nst; i++)
		used[st[i].infill] |= st[i].steps > 0;

	/* the model (from -o when resuming), the tokenizer */
	struct model m, mref;
	load_model(&m, resume ? out : model_dir, ops);
	/* -t's must load; the model directory's need not be there (token-id tasks), but one
	 * there that does not load stops the run as -t's (checkpoint_load_tokenizer) */
	const char *tok_opt = tok_dir ? "--tokenizer" : NULL;
	if (!tok_dir)
		tok_dir = model_dir ? model_dir : out;
	struct tokenizer tok;
	int have_tok = checkpoint_load_tokenizer(&tok, tok_dir, tok_opt, err, sizeof err);
	if (have_tok < 0)
		die("%s", err);
	struct sample_rec sr;
	sample_rec_init(&sr, have_tok ? &tok : NULL, PROMPT_CHAT_QWEN3, 0);
	sr.vocab = m.cfg.vocab_size;

	struct rl_runner r = { 0 };
	if (rl_runner_init(&r, &m, recompute) < 0)
		die("cannot set up training");
	struct model_train tref;
	if (ref_dir) {
		load_model(&mref, ref_dir, ops);
		if (model_train_init(&tref, &mref, recompute) < 0)
			die("cannot set up the reference model");
		r.ref = &tref;
	}
	int stop_ids[3], nstop = 0;
	if (m.cfg.eos_token_id >= 0)
		stop_ids[nstop++] = m.cfg.eos_token_id;
	if (have_tok) {
		int a = tokenizer_token_id(&tok, "<|im_end|>"), b = tokenizer_token_id(&tok, "<|endoftext|>");
		if (a >= 0 && a != m.cfg.eos_token_id)
			stop_ids[nstop++] = a;
		if (b >= 0 && b != m.cfg.eos_token_id)
			stop_ids[nstop++] = b;
	}
	sampler_opts_default(&r.so);
	sampler_preset(&r.so, "rl");
	r.so.block = m.cfg.block_size;
	r.so.max_tokens = (int)max_tokens;
	r.so.mask_id = m.cfg.mask_token_id;
	r.so.max_active = (int)batch;
	r.so.stop = stop_ids;
	r.so.nstop = nstop;
	struct sampler_opts evo = r.so;
	sampler_preset(&evo, "eval");
	r.sr = &sr;
	r.oo = oo;
	r.lo = (struct rl_loss_opts){ eps, beta, 1.0 };
	char *rcmd = !strncmp(reward, "cmd:", 4) ? xstrdup(reward + 4) :
	             kbench_cmd(trials, robust, reward[6] == ':' ? reward + 7 : NULL);
	r.reward_cmd = rcmd;
	r.reward_timeout = reward_timeout;
	r.robust = robust;
	r.overlap = overlap;
	r.dump = dump;
	r.stop = &stop;
	r.group = (int)group;
	r.micro = (int)micro;
	r.update = (int)update;
	r.pad_id = m.cfg.pad_token_id >= 0 ? m.cfg.pad_token_id :
	           m.cfg.eos_token_id >= 0 ? m.cfg.eos_token_id : 151643;
	rng_seed(&r.rng, seed);

	/* the memory the rollouts' KV caches may take (lib/sampler_fit; read again at each
	 * rollout, as the training's buffers take their part): where not even one sequence of
	 * --max-tokens fits, no task would */
	size_t mem;
	if (sampler_mem_limit(&m, &mem, err, sizeof err) < 0)
		die_status(EXIT_STATUS_USAGE, "%s", err);
	if (sampler_fit_alone(&m, &r.so, -1, mem, err, sizeof err) < 0)
		die("%s\nhint: lower --max-tokens", err);

	/* the tasks, then the eval tasks, each checked as it is read (check_task: for each stage
	 * kind, as their prompts differ); the eval tasks with no length limit, and the infill
	 * stage's only those of its kind, as its training list */
	struct rl_tasks all = { 0 }, evt = { 0 };
	struct reader rd = { &all, 0, used, !strcmp(order, "level"), max_plen, &r, &r.so, mem,
	                     { 0, 0 }, { 0, 0 }, 0 };
	if (jsonl_each(argv + optind, argc - optind, on_task, NULL, &rd) || rd.bad)
		ret = 1;
	int evused[2] = { eval_every && used[0], eval_every && used[1] };
	struct reader er = { &evt, 1, evused, 0, 0, &r, &evo, mem, { 0, 0 }, { 0, 0 }, 0 };
	if (eval_path) {
		char *ops1[1] = { (char *)eval_path };
		if (jsonl_each(ops1, 1, on_task, NULL, &er) || er.bad)
			ret = 1;
	}
	if (rd.level)
		rl_tasks_sort_level(&all);
	struct rl_task **list[2], **evl[2];
	size_t nlist[2], nevl[2], nlong = rd.nlong[0] + rd.nlong[1];
	for (int k = 0; k < 2; k++) {
		const char *what = k ? " infilling" : "";
		list[k] = task_list(&all, k, &nlist[k]);
		evl[k] = task_list(&evt, k, &nevl[k]);
		if (!evused[k])
			nevl[k] = 0;
		if (!used[k] || nlist[k])
			continue;
		if (!rd.nlong[k] && !rd.nbad[k])
			die("no%s tasks in the input%s", what,
			    k ? " (records with prefix and suffix)" : "");
		if (!rd.nbad[k])
			die("no%s tasks left: all %zu over --max-prompt-len %ld", what, rd.nlong[k],
			    max_plen);
		if (!rd.nlong[k])
			die("no%s tasks left: all %zu bad", what, rd.nbad[k]);
		die("no%s tasks left: %zu bad, %zu over --max-prompt-len %ld", what, rd.nbad[k],
		    rd.nlong[k], max_plen);
	}
	for (int k = 0; k < 2; k++)
		if (evused[k] && !nevl[k])
			warn_msg("no usable task in --eval-tasks '%s' for the %s stage: no eval_exec "
			         "in its log lines", eval_path, k ? "infill" : "e2e");

	int si = 0, done = 0;
	long step = 0;
	if (resume)
		load_state(out, spec, st, nst, &si, &done, &step, &r.rng, nlist);
	if (!quiet)
		warn_msg("%zu tasks (%zu infilling), %zu skipped for length, stages %s, seed %llu, "
		         "reward%s: %s, KL to %s", nlist[0], nlist[1], nlong, spec, seed,
		         overlap ? " (overlapped)" : "", rcmd, ref_dir ? ref_dir : "pi_old");

	FILE *logf = NULL;
	int log_bad = 0;
	if (log_path && !(logf = fopen(log_path, resume ? "a" : "w")))
		die("cannot open '%s':", log_path);
	training = 1;
	const char *copy_tok = checkpoint_has_tokenizer(tok_dir) ? tok_dir : NULL;

	int last_si = si, last_done = done;
	long saved = step, failed_at = 0;  /* the last step saved (or resumed); a failed step */
	for (; si < nst && !stop && !failed_at; si++, done = 0) {
		struct stage *s = &st[si];
		int li = s->infill;
		for (; done < s->steps && !stop; ) {
			int nt = (int)tps;
			struct rl_task **sel = xcalloc((size_t)nt, sizeof *sel);
			for (int j = 0; j < nt; j++)
				sel[j] = list[li][(s->pos + (size_t)j) % nlist[li]];
			size_t pos0 = s->pos;
			struct rng rng0 = r.rng;
			s->pos = (s->pos + (size_t)nt) % nlist[li];
			struct rl_metrics mt;
			int failed = rl_step(&r, sel, nt, li, (int)step + 1, &mt) < 0;
			free(sel);
			if (failed && !mt.updates) {
				/* interrupted before any update (the signal reached the reward
				 * program too), or its reward failed: the step is undone and redone
				 * on --resume, the steps before it kept */
				s->pos = pos0, r.rng = rng0;
				if (!stop)
					failed_at = step + 1;
				break;
			}
			if (failed)
				die("step %ld failed", step + 1);
			done++, step++;
			last_si = si, last_done = done;
			double tps_ = mt.t_rollout > 0 ? mt.tokens / mt.t_rollout : 0.0;
			json_t *j = json_pack("{s:I, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:i, "
			                      "s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, "
			                      "s:f}",
			                      "step", (json_int_t)step, "stage", li ? "infill" : "e2e",
			                      "stage_step", done, "tasks", mt.tasks, "reward_mean",
			                      mt.reward, "skipped", mt.tasks ? (double)mt.skipped / mt.tasks : 0.0,
			                      "deceptive", mt.responses ? (double)mt.deceptive / mt.responses : 0.0,
			                      "loss", mt.loss, "kl", mt.kl, "clip_frac", mt.clipfrac,
			                      "samples", mt.samples, "updates", mt.updates,
			                      "grad_norm", mt.grad_norm, "rollout_s", mt.t_rollout,
			                      "reward_s", mt.t_reward, "reward_wait_s", mt.t_reward_wait,
			                      "overlap_s", mt.t_overlap, "compile_s", mt.t_compile,
			                      "execute_s", mt.t_execute, "update_s", mt.t_update,
			                      "step_s", mt.t_step, "tokens", (json_int_t)mt.tokens,
			                      "tokens_per_s", tps_);
			if (eval_every && step % eval_every == 0 && nevl[li]) {
				double ex;
				int erc = rl_evaluate(&r, &evo, evl[li], (int)nevl[li], li, (int)step, &ex);
				if (erc < 0 && !stop)
					ret = 1;
				if (erc == 0 || !stop)  /* else a signal cut the evaluation short */
					json_object_set_new(j, "eval_exec", isnan(ex) ? json_null() :
					                    json_real(ex));
			}
			if (logf && !log_bad) {  /* a failed write: reported once, training goes on */
				if (jsonl_log(logf, log_path, j) < 0)
					log_bad = 1, ret = 1;
			}
			json_decref(j);
			if (mt.bad)
				ret = 1;
			if (!quiet)
				fprintf(stderr, "dice-rl: step %ld %s %d/%d reward %.3f skipped %d/%d loss "
				        "%.4g kl %.3g clip %.3f | rollout %.1fs %.0f tok/s, reward %.1fs "
				        "(overlap %.1fs, wait %.1fs; compile %.1fs, execute %.1fs), update "
				        "%.1fs | %.1fs\n", step, li ? "infill" : "e2e", done, s->steps,
				        mt.reward, mt.skipped, mt.tasks, mt.loss, mt.kl, mt.clipfrac,
				        mt.t_rollout, tps_, mt.t_reward, mt.t_overlap, mt.t_reward_wait,
				        mt.t_compile, mt.t_execute, mt.t_update, mt.t_step);
			if (dump) {                     /* one step is all it takes */
				stop = 1;
				break;
			}
			if (save_every && step % save_every == 0) {
				if (save_all(&r, out, copy_tok, spec, st, nst, si, done, step) < 0)
					ret = 1;
				saved = step;
			}
		}
		if (stop || failed_at)
			break;
	}
	/* where to continue: the stage of the last step and the steps done in it; after a failed
	 * step, the steps since the last save kept (none: nothing written) */
	if (failed_at) {
		warn_msg("step %ld failed", failed_at);
		if (step > saved && save_all(&r, out, copy_tok, spec, st, nst, last_si, last_done,
		                             step) == 0)
			warn_msg("saved step %ld to %s; continue with --resume", step, out);
		ret = 1;
	} else if (save_all(&r, out, copy_tok, spec, st, nst, last_si, last_done, step) < 0) {
		ret = 1;
	} else if (stop && !dump) {     /* saved: where to go on from */
		warn_msg("interrupted: saved step %ld to %s; continue with --resume", step, out);
	}
	if (stop_sig)           /* the run is not done: no success for the caller's next step */
		ret = 128 + (int)stop_sig;
	if (logf && util_fshut(logf, log_path))
		ret = 1;
	rl_runner_free(&r);
	if (ref_dir) {
		model_train_free(&tref);
		model_free(&mref);
	}
	sample_rec_free(&sr);
	if (have_tok)
		tokenizer_free(&tok);
	model_free(&m);
	for (int k = 0; k < 2; k++)
		free(list[k]), free(evl[k]);
	rl_tasks_free(&all);
	rl_tasks_free(&evt);
	free(rcmd), free(spec);
	if (util_fshut(stdout, "stdout"))
		ret = 1;
	return ret;
}
