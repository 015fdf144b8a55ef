/* kbench-eval: evaluate candidate kernels on KernelBench (compile, check, time) in sandboxed
 * workers, list problems, and report Exec / fast_p per level. See kbench-eval(1). */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deceive.h"
#include "input.h"
#include "jsonl.h"
#include "kbench.h"

static const char usage_text[] =
"usage: kbench-eval [options] [FILE...]             evaluate candidate records\n"
"       kbench-eval --list [-k PATH] [-L N] [-p LIST]  one record per problem\n"
"       kbench-eval --report [--json] [FILE...]       the per-level table\n"
"\n"
"  -k, --kernelbench PATH   KernelBench checkout or archive (default $KERNELBENCH)\n"
"  -l, --list               write {id, level, problem, ref} for every problem\n"
"                           (reads -k -L -p -o -u; any other option: usage error)\n"
"  -L, --level LIST         levels to list, report or gate, e.g. 1 or 1-2 (report\n"
"                           default: the levels of the records read)\n"
"  -p, --problems LIST      problem numbers to list, report or gate, e.g. 1-10,19\n"
"  -r, --report             read evaluated records, print Exec and fast_p per level\n"
"                           (reads -k -L -p -J -R -F -o; any other: usage error)\n"
"  -J, --json               --report: one JSON object per level (needs --report)\n"
"  -R, --robust             run the deception rules; deceptive kernels are not correct\n"
"  -F, --fail-under SPEC    exit 3 when a level is under e.g. exec=0.4,fast_1=0.1\n"
"  -d, --device DEV         cpu, cuda or auto (default $DICE_DEVICE or auto)\n"
"  -j, --jobs N             build workers (default: CPU count)\n"
"  -g, --gpus LIST          CUDA devices, one run worker each (default: all)\n"
"  -w, --run-workers N      run workers in CPU mode (default 1)\n"
"  -S, --spares N           workers each run worker keeps started ahead (default 3)\n"
"  -n, --trials N           correctness trials (default 5)\n"
"  -P, --perf-trials N      timed trials, 0: no timing (default 100)\n"
"  -W, --warmup N           warm-up runs before timing (default 3)\n"
"  -a, --atol X             absolute tolerance (default 0.01)\n"
"  -e, --rtol X             relative tolerance (default 0.01)\n"
"  -E, --rtol-only          judge by relative error alone\n"
"  -f, --flush-l2           flush the L2 cache before every timed trial\n"
"  -b, --baseline FILE      reference times from baseline_time_torch.json\n"
"  -t, --timeout S          seconds for one run (default 180)\n"
"  -T, --compile-timeout S  seconds for one build (default 600)\n"
"  -c, --cache DIR          build cache (default $XDG_CACHE_HOME/dice/kbench, else\n"
"                           ~/.cache/dice/kbench)\n"
"  -G, --log-bytes N        bytes of worker output kept in eval.log (default 4096)\n"
"  -M, --mem-limit MB       address-space limit of CPU-mode workers (default 16384)\n"
"  -N, --no-netns           no private namespaces (user, network, PID, mount) and\n"
"                           no read-only file system\n"
"      --no-pch             no precompiled torch/extension.h for the C++ builds\n"
"      --no-lean            CUDA sources built as written (default: their\n"
"                           torch/extension.h read as torch/types.h first)\n"
"  -o, --output FILE        write records to FILE\n"
"  -u, --unbuffered         flush after every record: results stream out while the\n"
"                           input pipe is still open\n"
"  -h, --help               this help\n"
"  -V, --version            print the version\n";

enum { OPT_NO_PCH = 256, OPT_NO_LEAN };   /* long-only options */

static const struct option longopts[] = {
	{ "kernelbench", required_argument, NULL, 'k' },
	{ "list", no_argument, NULL, 'l' },
	{ "level", required_argument, NULL, 'L' },
	{ "problems", required_argument, NULL, 'p' },
	{ "report", no_argument, NULL, 'r' },
	{ "json", no_argument, NULL, 'J' },
	{ "robust", no_argument, NULL, 'R' },
	{ "fail-under", required_argument, NULL, 'F' },
	{ "device", required_argument, NULL, 'd' },
	{ "jobs", required_argument, NULL, 'j' },
	{ "gpus", required_argument, NULL, 'g' },
	{ "run-workers", required_argument, NULL, 'w' },
	{ "spares", required_argument, NULL, 'S' },
	{ "trials", required_argument, NULL, 'n' },
	{ "perf-trials", required_argument, NULL, 'P' },
	{ "warmup", required_argument, NULL, 'W' },
	{ "atol", required_argument, NULL, 'a' },
	{ "rtol", required_argument, NULL, 'e' },
	{ "rtol-only", no_argument, NULL, 'E' },
	{ "flush-l2", no_argument, NULL, 'f' },
	{ "baseline", required_argument, NULL, 'b' },
	{ "timeout", required_argument, NULL, 't' },
	{ "compile-timeout", required_argument, NULL, 'T' },
	{ "cache", required_argument, NULL, 'c' },
	{ "log-bytes", required_argument, NULL, 'G' },
	{ "mem-limit", required_argument, NULL, 'M' },
	{ "no-netns", no_argument, NULL, 'N' },
	{ "no-pch", no_argument, NULL, OPT_NO_PCH },
	{ "no-lean", no_argument, NULL, OPT_NO_LEAN },
	{ "output", required_argument, NULL, 'o' },
	{ "unbuffered", no_argument, NULL, 'u' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const char shortopts[] = ":k:lL:p:rJRF:d:j:g:w:S:n:P:W:a:e:Efb:t:T:c:G:M:No:uhV";
/* The options --list and --report read. Any other acts only when evaluating (-u: on records
 * written one by one, which --report does not write), so with them it is a usage error, not
 * ignored unsaid. */
static const int list_reads[] = { 'l', 'k', 'L', 'p', 'o', 'u', 0 };
static const int report_reads[] = { 'r', 'k', 'L', 'p', 'J', 'R', 'F', 'o', 0 };

static _Noreturn void usage(void)
{
	fputs("usage: kbench-eval [options] [FILE...]; kbench-eval --list | --report; "
	      "try 'kbench-eval --help'\n", stderr);
	exit(EXIT_STATUS_USAGE);
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct run {
	struct kbench_engine *e;
	struct jsonl_writer w;
	struct kbench_tally tally;
	int robust;
	int ret;
	size_t window;
};

static void check_stop(struct run *r)
{
	if (!stop_signal)
		return;
	kbench_engine_abort(r->e);
	die_status(128 + stop_signal, "stopped by signal %d", (int)stop_signal);
}

/* a write to the output failed (a closed pipe, a full disk): nothing more can be written */
static int output_gone(const struct run *r)
{
	return r->w.failed;
}

static void emit(struct run *r)
{
	json_t *rec, *ev;
	char *line;
	size_t len;
	int bad;
	const char *why;

	while (!output_gone(r) && kbench_engine_next(r->e, &rec, &line, &len, &ev, &bad)) {
		if (bad)
			r->ret = EXIT_STATUS_BAD;
		jsonl_write_added(&r->w, line, len, rec, "eval", ev);
		json_object_set(rec, "eval", ev);
		kbench_tally_record(&r->tally, rec, r->robust, &why);
		json_decref(ev);
		json_decref(rec);
	}
}

/* One turn of the engine: up to timeout_ms of waiting on the workers (and on fd, the input,
 * unless -1), then what finished is written */
static void turn(struct run *r, int fd, int timeout_ms)
{
	if (kbench_engine_step(r->e, fd, timeout_ms) < 0) {
		kbench_engine_abort(r->e);
		die("the evaluation cannot go on");
	}
	check_stop(r);
	emit(r);
}

static void pump(struct run *r, size_t until)
{
	while (!output_gone(r) && kbench_engine_pending(r->e) > until)
		turn(r, -1, 100);
}

/* The input (a pipe, a FIFO) is open and has nothing to read: the records read so far are
 * built, run and written meanwhile (with -u flushed at once), so that results stream out
 * while the writer holds the pipe (dice-rl's reward process). Each call waits up to 100 ms
 * on the workers and the input together, 1 s when nothing is pending (the bound on seeing a
 * signal that lands just before the wait); -1 once the output is gone: no more reading. */
static int on_idle(int fd, void *arg)
{
	struct run *r = arg;

	if (!output_gone(r))
		turn(r, fd, kbench_engine_pending(r->e) ? 100 : 1000);
	return output_gone(r) ? -1 : 0;
}

static int on_record(json_t *rec, struct jsonl_reader *rd, void *arg)
{
	struct run *r = arg;

	if (output_gone(r)) {           /* stop reading */
		json_decref(rec);
		return -1;
	}
	char *where = xasprintf("%s:%zu", rd->name, rd->lineno);

	kbench_engine_submit(r->e, rec, rd->line, rd->len, where);
	free(where);
	emit(r);
	pump(r, r->window);
	return 0;
}

/* A malformed line: reported, and passed through in its place as the record
 * {"source", "line", "error", "text"} (what cuke-filter writes to its rejects) with an eval
 * object whose error is "bad_record" */
static void on_bad(struct jsonl_reader *rd, void *arg)
{
	struct run *r = arg;

	if (output_gone(r))
		return;
	char *where = xasprintf("%s:%zu", rd->name, rd->lineno);
	json_t *ev = json_pack("{s:b, s:b, s:s, s:s}", "compiled", 0, "correct", 0,
	                       "error", "bad_record", "message", rd->err);

	jsonl_report_bad(rd);
	kbench_engine_submit_done(r->e, jsonl_bad_record(rd), ev, 1, where);
	free(where);
	emit(r);
	pump(r, r->window);
}

static int on_report_record(json_t *rec, struct jsonl_reader *rd, void *arg)
{
	struct run *r = arg;
	const char *why = NULL;

	if (kbench_tally_record(&r->tally, rec, r->robust, &why) < 0) {
		warn_msg("%s:%zu: %s", rd->name, rd->lineno, why);
		r->ret = EXIT_STATUS_BAD;
	}
	json_decref(rec);
	return 0;
}

/* --fail-under: 1 when a level falls short or has nothing to judge, or when records under
 * no level (malformed lines) are among the failures; each reason on stderr */
static int gate(const struct run *r, const struct kbench_threshold *th, size_t nth,
                const struct kbench_row *rows, size_t nr)
{
	int fail = kbench_thresholds_check(th, nth, rows, nr) > 0;

	if (r->tally.unplaced) {
		warn_msg("%zu record%s under no level (malformed lines, no problem) count%s as "
		         "failed: the gate fails", r->tally.unplaced, r->tally.unplaced == 1 ? "" : "s",
		         r->tally.unplaced == 1 ? "s" : "");
		fail = 1;
	}
	return fail;
}

static int parse_gpus(const char *s, int **out)
{
	struct kbench_ranges rs;
	int n = 0;

	if (kbench_ranges_parse(&rs, s) < 0)
		return -1;
	*out = NULL;
	for (size_t i = 0; i < rs.n; i++)
		for (long g = rs.r[i][0]; g <= rs.r[i][1] && n < 64; g++) {
			*out = xrealloc(*out, (size_t)(n + 1) * sizeof **out);
			(*out)[n++] = (int)g;
		}
	kbench_ranges_free(&rs);
	return n;
}

static char *default_cache(void)
{
	const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");

	if (x && *x)
		return xasprintf("%s/dice/kbench", x);
	if (home && *home)
		return xasprintf("%s/.cache/dice/kbench", home);
	return xstrdup("/tmp/dice-kbench-cache");
}

/* --baseline FILE, read as every input is (input_one_file): a JSON object, else exit 1 */
static json_t *load_baseline(const char *path)
{
	json_error_t err;
	size_t len;
	char *name, *text = input_one_file(path, "--baseline", 0, &len, &name);
	json_t *base;

	if (!text)
		exit(EXIT_STATUS_BAD);  /* said already */
	if (!(base = json_loadb(text, len, 0, &err)))
		die("%s:%d: %s", name, err.line, err.text);
	if (!json_is_object(base))
		die("%s: not a KernelBench baseline (want {\"level1\": {\"19_ReLU.py\": "
		    "{\"mean\": ms, ...}}})", name);
	free(text);
	free(name);
	return base;
}

int main(int argc, char **argv)
{
	struct kbench_config cfg = {
		.device = "auto", .trials = 5, .perf_trials = 100, .warmup = 3, .atol = 1e-2,
		.rtol = 1e-2, .timeout = 180, .compile_timeout = 600, .start_timeout = 300,
		.mem_mb = 16384, .fsize_mb = 4096, .nproc = 0, .netns = 1, .pch = 1, .lean = 1,
		.log_bytes = 4096,
	};
	struct kbench_ranges levels = { 0 }, problems = { 0 };
	struct kbench_threshold *th = NULL;
	struct kbench_tree tree = { 0 };
	struct run r = { 0 };
	unsigned char given[OPT_NO_LEAN + 1] = { 0 };   /* the options given, by code */
	const char *kb = getenv("KERNELBENCH"), *output = NULL;
	char *baseline = NULL;
	const char *level_arg = NULL, *problems_arg = NULL;
	char *cache = NULL;
	int c, list = 0, report = 0, json = 0, unbuffered = 0, have_tree = 0;
	size_t nth = 0;
	long v;
	FILE *out = stdout;

	util_set_progname(argv[0]);
	input_set_tree_option("--kernelbench");   /* a tree given as an operand: say so */
	cfg.device = util_env("DICE_DEVICE", cfg.device);
	cfg.python = util_env("DICE_PYTHON", NULL);
	v = sysconf(_SC_NPROCESSORS_ONLN);
	cfg.jobs = v > 0 ? (int)v : 1;
	while ((c = cli_getopt(argc, argv, shortopts, longopts)) != -1) {
		if (c > 0 && c <= OPT_NO_LEAN)
			given[c] = 1;
		switch (c) {
		case 'k': kb = optarg; break;
		case 'l': list = 1; break;
		case 'L':
			kbench_ranges_free(&levels);
			level_arg = optarg;
			if (kbench_levels_parse(&levels, optarg) < 0)
				die_status(EXIT_STATUS_USAGE, "bad --level '%s' (want e.g. 1 or 1-2, "
				           "levels 0 to %d)", optarg, KBENCH_MAX_LEVEL);
			break;
		case 'p':
			kbench_ranges_free(&problems);
			problems_arg = optarg;
			if (kbench_ranges_parse(&problems, optarg) < 0)
				die_status(EXIT_STATUS_USAGE, "bad --problems '%s' (want e.g. 1-10,19)",
				           optarg);
			break;
		case 'r': report = 1; break;
		case 'J': json = 1; break;
		case 'R': r.robust = 1; break;
		case 'F':
			free(th);
			if (kbench_thresholds_parse(optarg, &th, &nth) < 0) {
				warn_msg("bad --fail-under '%s' (want e.g. exec=0.4,fast_1=0.1)", optarg);
				usage();
			}
			break;
		case 'd':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
				die_status(EXIT_STATUS_USAGE, "bad --device '%s' (want cpu, cuda or auto)",
				           optarg);
			cfg.device = optarg;
			break;
		case 'j':
			cfg.jobs = (int)cli_long("--jobs", optarg, 1, 256);
			break;
		case 'g':
			free(cfg.gpus);
			if ((cfg.ngpus = parse_gpus(optarg, &cfg.gpus)) <= 0)
				die_status(EXIT_STATUS_USAGE, "bad --gpus '%s' (want e.g. 0,1 or 0-3)",
				           optarg);
			break;
		case 'w':
			cfg.run_workers = (int)cli_long("--run-workers", optarg, 1, 64);
			break;
		case 'S':
			cfg.run_spares = (int)cli_long("--spares", optarg, 1, 16);
			break;
		case 'n':
			cfg.trials = (int)cli_long("--trials", optarg, 1, 1000);
			break;
		case 'P':
			cfg.perf_trials = (int)cli_long("--perf-trials", optarg, 0, 100000);
			break;
		case 'W':
			cfg.warmup = (int)cli_long("--warmup", optarg, 0, 1000);
			break;
		case 'a':
			cfg.atol = cli_double("--atol", optarg, 0, 1e9);
			break;
		case 'e':
			cfg.rtol = cli_double("--rtol", optarg, 0, 1e9);
			break;
		case 'E': cfg.rtol_only = 1; break;
		case 'f': cfg.flush_l2 = 1; break;
		case 'b': baseline = optarg; break;
		case 't':
			cfg.timeout = cli_double("--timeout", optarg, 0.1, 1e6);
			break;
		case 'T':
			cfg.compile_timeout = cli_double("--compile-timeout", optarg, 0.1, 1e6);
			break;
		case 'c': free(cache); cache = xstrdup(optarg); break;
		case 'G':
			cfg.log_bytes = (size_t)cli_long("--log-bytes", optarg, 0, 1 << 26);
			break;
		case 'M':
			cfg.mem_mb = cli_long("--mem-limit", optarg, 0, 1L << 30);
			break;
		case 'N': cfg.netns = 0; break;
		case OPT_NO_PCH: cfg.pch = 0; break;
		case OPT_NO_LEAN: cfg.lean = 0; break;
		case 'o': output = cli_output_file(c, optarg); break;
		case 'u': unbuffered = 1; break;
		case 'h':
			fputs(usage_text, stdout);
			return util_fshut(stdout, "stdout") ? EXIT_STATUS_BAD : 0;
		case 'V': cli_version();
		default:
			usage();
		}
	}
	if (list && report) {
		warn_msg("--list and --report exclude each other");
		usage();
	}
	if (json && !report) {
		warn_msg("--json needs --report (it writes the report's rows as JSON)");
		usage();
	}
	if (list || report) {
		const char *o = cli_unread(longopts, given, sizeof given,
		                           list ? list_reads : report_reads);
		if (o) {
			warn_msg("--%s has no effect with --%s", o, list ? "list" : "report");
			usage();
		}
	}
	if (!list && !report && !th && (levels.n || problems.n)) {
		warn_msg("-L and -p select no records to evaluate: they act with --list, --report "
		         "or --fail-under");
		usage();
	}
	if (list && optind < argc) {
		warn_msg("--list reads no records: unexpected operand '%s'", argv[optind]);
		usage();
	}
	if (list && (!kb || !*kb)) {
		warn_msg("--list needs a KernelBench tree (--kernelbench or $KERNELBENCH)");
		usage();
	}
	if (baseline && input_stdin_twice("--baseline", baseline, argv + optind, argc - optind))
		usage();
	if (kb && *kb) {
		if (kbench_tree_load(&tree, kb) < 0)
			exit(EXIT_STATUS_BAD);  /* the library said why, in one line */
		have_tree = 1;
	}
	if (!list)              /* --list reads no input, stdin included */
		cli_output_not_input(output, argv + optind, argc - optind);
	if (baseline) {         /* an input too: read before the output is opened */
		cli_output_not_input(output, &baseline, 1);
		cfg.baseline = load_baseline(baseline);
	}
	if (output && !(out = fopen(output, "w")))
		die("cannot open '%s':", output);
	jsonl_writer_init(&r.w, out, output ? output : "stdout", unbuffered);
	kbench_tally_init(&r.tally);

	if (list) {
		const struct kbench_problem **sel;
		size_t ns = kbench_tree_select(&tree, &levels, &problems, &sel);
		if (!ns) {              /* as dice-sample --kernelbench says it */
			kbench_warn_empty(kb, level_arg, problems_arg);
			r.ret = EXIT_STATUS_BAD;
		}
		for (size_t i = 0; i < ns; i++) {
			json_t *rec = kbench_problem_record(sel[i]);
			jsonl_write(&r.w, rec);
			json_decref(rec);
		}
		free(sel);
	} else if (report) {
		struct kbench_row *rows;
		size_t nr;
		if (jsonl_each(argv + optind, argc - optind, on_report_record, NULL, &r))
			r.ret = EXIT_STATUS_BAD;
		nr = kbench_tally_rows(&r.tally, have_tree ? &tree : NULL, &levels, &problems, &rows);
		for (size_t i = 0; json && i < nr; i++) {
			/* written here, not by the JSONL writer, for short numbers (0.3333) */
			json_t *o = kbench_row_json(&rows[i]);
			json_dumpf(o, out, JSON_COMPACT | JSON_REAL_PRECISION(6));
			fputc('\n', out);
			json_decref(o);
		}
		if (!json)
			kbench_rows_print(out, rows, nr);
		if (th && gate(&r, th, nth, rows, nr) && r.ret == 0)
			r.ret = 3;      /* a bad record's 1 wins, as when evaluating */
		free(rows);
	} else {
		struct sigaction sa = { .sa_handler = on_signal };
		if (r.robust) {
			const char *bad = NULL;
			if (!(cfg.robust = deceive_checker_new(NULL, &bad)))
				die("--robust: cannot build the deception rules%s%s", bad ? ": " : "",
				    bad ? bad : "");
		}
		cfg.cache_dir = cache ? cache : (cache = default_cache());
		cfg.tree = have_tree ? &tree : NULL;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		if (!(r.e = kbench_engine_new(&cfg)))
			die("cannot start the evaluation");
		r.window = (size_t)(4 * (cfg.jobs + (cfg.ngpus > 0 ? cfg.ngpus : 1)) + 8);
		input_set_idle(on_idle, &r);
		int rr = jsonl_each(argv + optind, argc - optind, on_record, on_bad, &r);
		input_set_idle(NULL, NULL);
		kbench_engine_close_input(r.e);
		pump(&r, 0);            /* not when the output is gone: the workers are stopped */
		if (rr)
			r.ret = EXIT_STATUS_BAD;
		if (kbench_engine_free(r.e) < 0)
			r.ret = EXIT_STATUS_BAD;
		if (th) {
			struct kbench_row *rows;
			size_t nr = kbench_tally_rows(&r.tally, have_tree ? &tree : NULL, &levels,
			                              &problems, &rows);
			if (gate(&r, th, nth, rows, nr) && r.ret == 0)
				r.ret = 3;
			free(rows);
		}
		if (cfg.robust)
			deceive_checker_free(cfg.robust);
		json_decref(cfg.baseline);
	}
	if (r.w.failed)
		r.ret = EXIT_STATUS_BAD;
	jsonl_writer_free(&r.w);
	kbench_tally_free(&r.tally);
	kbench_tree_free(&tree);
	kbench_ranges_free(&levels);
	kbench_ranges_free(&problems);
	free(cfg.gpus);
	free(th);
	free(cache);
	if (util_fshut(out, output ? output : "stdout"))
		r.ret = EXIT_STATUS_BAD;
	return r.ret;
}
