/* test_kbench: problem paths, ranges, the metrics (Exec, fast_p, geomean, pass@k,
 * denominators), thresholds; and lib/pool: output capture, deadlines, group kill, orphan
 * sweep. */
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kbench.h"
#include "pool.h"
#include "test.h"
#include "tmpdir.h"

static void test_paths(void)
{
	int lv = -1, nm = -1;

	CHECK(kbench_parse_path("KernelBench/level1/19_ReLU.py", &lv, &nm) == 0 && lv == 1 &&
	      nm == 19, "parse_path: repository path");
	CHECK(kbench_parse_path("level3/7_Tiny_MLP.py", &lv, &nm) == 0 && lv == 3 && nm == 7,
	      "parse_path: relative path");
	CHECK(kbench_parse_path("level1/ReLU.py", &lv, &nm) < 0, "parse_path: no number");
	CHECK(kbench_parse_path("level1/ 8_ReLU.py", &lv, &nm) < 0 &&
	      kbench_parse_path("level1/+8_ReLU.py", &lv, &nm) < 0 &&
	      kbench_parse_path("level 1/8_ReLU.py", &lv, &nm) < 0, "parse_path: digits alone");
	CHECK(kbench_parse_path("levels/1_ReLU.py", &lv, &nm) < 0, "parse_path: not a level dir");
	CHECK(kbench_parse_path("level1/1_ReLU.txt", &lv, &nm) < 0, "parse_path: not .py");
}

static void test_ranges(void)
{
	struct kbench_ranges rs;

	CHECK(kbench_ranges_parse(&rs, "1-10,19") == 0, "ranges: parse");
	CHECK(kbench_ranges_has(&rs, 1) && kbench_ranges_has(&rs, 10) && kbench_ranges_has(&rs, 19),
	      "ranges: members");
	CHECK(!kbench_ranges_has(&rs, 11) && !kbench_ranges_has(&rs, 0), "ranges: non-members");
	kbench_ranges_free(&rs);
	CHECK(kbench_ranges_parse(&rs, "5-2") < 0, "ranges: reversed range refused");
	CHECK(kbench_ranges_parse(&rs, "x") < 0, "ranges: garbage refused");
	CHECK(kbench_ranges_parse(&rs, "1,,2") < 0 && kbench_ranges_parse(&rs, "1,") < 0 &&
	      kbench_ranges_parse(&rs, ",1") < 0 && kbench_ranges_parse(&rs, "") < 0,
	      "ranges: empty items refused");
	CHECK(kbench_ranges_has(NULL, 42), "ranges: none means all");
	CHECK(kbench_levels_parse(&rs, "0-99") == 0, "levels: 0 to 99");
	kbench_ranges_free(&rs);
	CHECK(kbench_levels_parse(&rs, "1,100") < 0 && kbench_levels_parse(&rs, "1-100") < 0,
	      "levels: past KBENCH_MAX_LEVEL refused");
}

/* the selection --list and dice-sample --kernelbench share: levels and numbers, tree order */
static void test_select(void)
{
	struct kbench_problem p[] = {
		{ 1, 1, "level1/1_A.py", "" }, { 1, 2, "level1/2_B.py", "" },
		{ 1, 19, "level1/19_C.py", "" }, { 2, 1, "level2/1_D.py", "" },
		{ 2, 2, "level2/2_E.py", "" }, { 3, 1, "level3/1_F.py", "" },
	};
	struct kbench_tree t = { p, sizeof p / sizeof *p };
	struct kbench_ranges lv, pr;
	const struct kbench_problem **sel;
	size_t n;

	n = kbench_tree_select(&t, NULL, NULL, &sel);
	CHECK(n == 6 && sel[0] == &p[0] && sel[5] == &p[5], "select: no ranges take every problem");
	free(sel);
	kbench_ranges_parse(&lv, "2-3");
	kbench_ranges_parse(&pr, "1,19");
	n = kbench_tree_select(&t, &lv, &pr, &sel);
	CHECK(n == 2 && sel[0] == &p[3] && sel[1] == &p[5], "select: levels and numbers, in order");
	free(sel);
	n = kbench_tree_select(&t, NULL, &pr, &sel);
	CHECK(n == 4 && sel[1] == &p[2], "select: numbers across levels");
	free(sel);
	kbench_ranges_free(&pr);
	kbench_ranges_parse(&pr, "7");
	n = kbench_tree_select(&t, &lv, &pr, &sel);
	CHECK(n == 0 && !sel, "select: nothing selected");
	kbench_ranges_free(&lv);
	kbench_ranges_free(&pr);
}

static void test_metrics(void)
{
	struct kbench_tally t;
	struct kbench_row *rows;
	struct kbench_threshold *th;
	size_t n, nth;

	kbench_tally_init(&t);
	/* level 1: problem 1 has two samples (one 3x, one wrong), problem 2 one 0.5x sample */
	kbench_tally_add(&t, 1, "level1/1_A.py", 1, 3.0);
	kbench_tally_add(&t, 1, "level1/1_A.py", 0, 0);
	kbench_tally_add(&t, 1, "level1/2_B.py", 1, 0.5);
	kbench_tally_add(&t, 2, "level2/1_C.py", 0, 0);
	n = kbench_tally_rows(&t, NULL, NULL, NULL, &rows);
	CHECK(n == 2, "rows: one per level");
	CHECK(rows[0].level == 1 && rows[0].n == 2 && rows[0].samples == 3 && rows[0].k == 2,
	      "rows: n, samples, k");
	CHECK_NEAR(rows[0].exec, (0.5 + 1.0) / 2, 1e-12, "exec: mean over samples, per problem");
	CHECK_NEAR(rows[0].fast[3], 0.5 / 2, 1e-12, "fast_1: only the 3x sample");
	CHECK_NEAR(rows[0].fast[1], 0.5 / 2, 1e-12, "fast_0.5: strictly greater than p");
	CHECK_NEAR(rows[0].geomean, sqrt(1.5), 1e-12, "geomean of correct speedups");
	CHECK_NEAR(rows[0].pass_exec, 1.0, 1e-12, "pass@2: each problem has a correct sample");
	CHECK_NEAR(rows[1].exec, 0, 1e-12, "level 2: nothing correct");
	CHECK(kbench_thresholds_parse("exec=0.8,fast_1=0.1", &th, &nth) == 0 && nth == 2,
	      "thresholds: parse");
	CHECK(kbench_thresholds_check(th, nth, rows, 1) == 0 + 1, "thresholds: exec 0.75 < 0.8");
	free(th);
	CHECK(kbench_thresholds_parse("speed=1", &th, &nth) < 0, "thresholds: unknown metric");
	CHECK(kbench_thresholds_parse("exec=0.4,,fast_1=0.1", &th, &nth) < 0 &&
	      kbench_thresholds_parse("exec=0.4,", &th, &nth) < 0 &&
	      kbench_thresholds_parse(",exec=0.4", &th, &nth) < 0, "thresholds: an empty item");
	free(rows);
	kbench_tally_free(&t);
}

/* a record's problem number is a problem file's, a whole number from 0 to 1000000: 19.5 was
 * counted as problem 19, and 1e300 as whatever the cast to int gave (undefined behaviour,
 * found by fuzz_kbench); such a record is counted under its id, as one with no number */
static void test_tally_problem_num(void)
{
	static const struct { const char *rec; int ok; const char *key; } c[] = {
		{ "{\"problem\": 19, \"level\": 1}", 1, "level1/19" },
		{ "{\"problem_id\": 7, \"level\": 2, \"id\": \"x\"}", 1, "level2/7" },
		{ "{\"problem\": 19.5, \"level\": 1}", 0, NULL },
		{ "{\"problem\": 1e300, \"level\": 1}", 0, NULL },
		{ "{\"problem\": -1, \"level\": 1}", 0, NULL },
		{ "{\"problem\": 1000001, \"level\": 1, \"id\": \"y\"}", 1, "y" },
		{ "{\"problem_id\": 2.5, \"level\": 1, \"id\": \"z\"}", 1, "z" },
	};
	char what[128];

	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		struct kbench_tally t;
		const char *why = NULL;
		json_t *rec = json_loads(c[i].rec, 0, NULL);
		int r;

		json_object_set_new(rec, "eval", json_pack("{s:b}", "correct", 1));
		kbench_tally_init(&t);
		r = kbench_tally_record(&t, rec, 0, &why);
		snprintf(what, sizeof what, "tally: %s is %s", c[i].rec,
		         c[i].key ? c[i].key : "unplaced");
		CHECK(c[i].ok ? r == 0 && t.n == 1 && !strcmp(t.e[0].key, c[i].key)
		              : r < 0 && t.n == 0 && t.unplaced == 1, what);
		kbench_tally_free(&t);
		json_decref(rec);
	}
}

/* an archive that fails to read after some problems (a gzip stream cut short, kept by
 * fuzz_kbtree in tests/fuzz/kbtree/) is refused, and the problems read before the error are
 * freed: they were leaked, each load's worth */
static void test_tree_read_error(const char *root)
{
	char *p = xasprintf("%s/tests/fuzz/kbtree/leak-truncated-gzip", root);
	struct kbench_tree t;
	size_t before;
	int r = 0;

	for (int i = 0; i < 50; i++)          /* warm up: the first loads' caches stay */
		if (kbench_tree_load(&t, p) == 0)
			kbench_tree_free(&t);
	before = mallinfo2().uordblks;
	for (int i = 0; i < 200; i++)
		if (kbench_tree_load(&t, p) == 0)
			kbench_tree_free(&t);
		else
			r++;
	CHECK(r == 200, "tree: a truncated archive is refused");
	/* the heap in use grows by the first loads' caches, then not at all (by 3 KB a load
	 * when the problems leaked) */
	printf("# heap in use: %ld bytes more after 200 loads\n",
	       (long)mallinfo2().uordblks - (long)before);
	CHECK(mallinfo2().uordblks < before + 32768, "tree: its problems read before the error "
	      "are freed");
	free(p);
}

/* excessive_speedup, one rule for the worker's speedup and --baseline's: the written speedup
 * (four significant digits) over 10; --baseline tested the unrounded ratio, so a ratio of
 * 10.0003 was speedup 10 with the flag set, and false on the worker's side */
static void test_excessive(void)
{
	static const struct { double ratio, speedup; int excessive; } c[] = {
		{ 10.0003, 10, 0 }, { 9.99996, 10, 0 }, { 10, 10, 0 }, { 10.004, 10, 0 },
		{ 10.006, 10.01, 1 }, { 10.01, 10.01, 1 }, { 1000.4, 1000, 1 }, { 0.5, 0.5, 0 },
		{ 0.00004, 0.00004, 0 },
	};
	char what[96];

	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		json_t *ev = json_object();
		kbench_eval_set_speedup(ev, c[i].ratio);
		snprintf(what, sizeof what, "set_speedup: ratio %g is speedup %g, excessive %s",
		         c[i].ratio, c[i].speedup, c[i].excessive ? "true" : "false");
		CHECK(json_real_value(json_object_get(ev, "speedup")) == c[i].speedup &&
		      json_is_boolean(json_object_get(ev, "excessive_speedup")) &&
		      json_boolean_value(json_object_get(ev, "excessive_speedup")) == c[i].excessive,
		      what);
		/* the worker's path: its written speedup is the ratio; the same verdict */
		kbench_eval_set_speedup(ev, json_real_value(json_object_get(ev, "speedup")));
		snprintf(what, sizeof what, "set_speedup: a written speedup %g stays, excessive %s",
		         c[i].speedup, c[i].excessive ? "true" : "false");
		CHECK(json_real_value(json_object_get(ev, "speedup")) == c[i].speedup &&
		      json_boolean_value(json_object_get(ev, "excessive_speedup")) == c[i].excessive,
		      what);
		json_decref(ev);
	}
}

static void test_pool(void)
{
	char *argv[] = { "/bin/sh", "-c",
		"printf 'line1\\n'; printf 'line2\\n' >&4; head -c 5000 /dev/zero | tr '\\0' a; "
		"echo tail-end; (setsid sleep 100 &); sleep 100", NULL };
	char *env[] = { "PATH=/usr/bin:/bin", NULL };
	struct pool_opts o = { .argv = argv, .env = env, .log_max = 200 };
	struct pool_proc p, *pp = &p;
	char *line = NULL, *log;
	double until;
	int got = 0;

	CHECK(pool_init() == 0, "pool_init: subreaper");
	if (!CHECK(pool_spawn(&p, &o) == 0, "pool_spawn"))
		return;
	CHECK(p.pid > 0 && getpgid(p.pid) == p.pid, "child leads its own process group");
	until = pool_now() + 10;
	while (!got && pool_now() < until) {
		pool_poll(&pp, 1, 50);
		if (pool_line(&p, &line))
			got = 1;
	}
	CHECK(got && !strcmp(line, "line2"), "a line from fd 4");
	free(line);
	until = pool_now() + 10;
	while (p.log_total < 5015 && pool_now() < until)   /* line1, 5000 a, tail-end */
		pool_poll(&pp, 1, 50);
	pool_finish(&p);
	CHECK(p.exited && WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL,
	      "pool_finish kills the group");
	log = pool_log(&p);
	if (!CHECK(!strncmp(log, "line1", 5) && strstr(log, "bytes dropped") && strstr(log, "tail-end"),
	      "log keeps head and tail"))
		printf("#   log: %s\n", log);
	CHECK(strlen(log) < 300, "log is truncated");
	free(log);
	pool_sweep(NULL, 0);
	CHECK(waitpid(-1, NULL, WNOHANG) <= 0, "escaped sleeper swept and reaped");
	pool_proc_free(&p);
}

/* One write a path named in W: "yes" or "no" on fd 4, in order, after a line on fd 3. */
static int narrow_writes(const char *rw_root, const char *const *keep, char *got, size_t len)
{
	char *argv[] = { "/bin/sh", "-c",
		"read go <&3; for f in $W; do if (: > \"$f\") 2>/dev/null; then echo yes; "
		"else echo no; fi; done >&4", NULL };
	char *w = xasprintf("W=%s/x %s/a/x %s/b/x", rw_root, rw_root, rw_root);
	char *env[] = { "PATH=/usr/bin:/bin", w, NULL };
	const char *rw[] = { rw_root, NULL };
	struct pool_opts o = { .argv = argv, .env = env, .log_max = 200, .netns = 1, .rw = rw };
	struct pool_proc p, *pp = &p;
	char *line;
	double until;
	int r;

	got[0] = '\0';
	if (pool_spawn(&p, &o) < 0) {
		free(w);
		return -2;
	}
	r = pool_narrow(&p, rw_root, keep);
	pool_send(&p, "go\n", 3);
	until = pool_now() + 10;
	while (!pool_done(&p) && pool_now() < until)
		pool_poll(&pp, 1, 50);
	{
		while (pool_line(&p, &line)) {
			snprintf(got + strlen(got), len - strlen(got), "%s ", line);
			free(line);
		}
	}
	pool_finish(&p);
	pool_proc_free(&p);
	free(w);
	return r;
}

/* pool_narrow: of a writable path, only the parts kept stay writable, from the request on;
 * without the namespaces it says so (1) and changes nothing */
static void test_pool_narrow(void)
{
	char got[64], *root, *a, *b;
	const char *keep[] = { NULL, NULL };
	int r;

	if (tmpdir_make("dice-test-narrow") < 0)
		return;
	root = tmpdir_path("c");
	a = tmpdir_path("c/a");
	b = tmpdir_path("c/b");
	mkdir(root, 0755), mkdir(a, 0755), mkdir(b, 0755);
	keep[0] = a;
	r = narrow_writes(root, keep, got, sizeof got);
	if (r == 1) {
		printf("# no unprivileged PID and mount namespaces here: pool_narrow not checked\n");
	} else {
		CHECK(r == 0, "pool_narrow: done by the namespace's init");
		if (!CHECK(!strcmp(got, "no yes no "), "pool_narrow: only the kept part is writable"))
			printf("#   got: %s\n", got);
		r = narrow_writes(root, NULL, got, sizeof got);
		CHECK(r == 0 && !strcmp(got, "no no no "), "pool_narrow: nothing kept");
	}
	/* a child without namespaces: no init to ask */
	{
		char *argv[] = { "/bin/true", NULL };
		char *env[] = { NULL };
		struct pool_opts o = { .argv = argv, .env = env, .log_max = 64 };
		struct pool_proc p;
		if (CHECK(pool_spawn(&p, &o) == 0, "pool_spawn without namespaces")) {
			CHECK(pool_narrow(&p, root, keep) == 1, "pool_narrow: 1 without a namespace");
			pool_finish(&p);
			pool_proc_free(&p);
		}
	}
	free(root), free(a), free(b);
	tmpdir_remove();
}

/* pool_children before, pool_sweep after: a child listed is left alone (dice-rl's children
 * from before its reward program), an orphan that came back to us since (pool_init made us a
 * subreaper) in a session of its own is killed and reaped */
static void test_sweep_keep(void)
{
	pid_t kid, mid, *keep, *now;
	int n, m, listed = 0, others = 0;

	if ((kid = fork()) == 0) {
		pause();
		_exit(0);
	}
	keep = pool_children(&n);
	for (int i = 0; i < n; i++)
		listed |= keep[i] == kid;
	CHECK(kid > 0 && listed, "pool_children lists a child");
	if ((mid = fork()) == 0) {
		if (fork() == 0) {
			setsid();
			pause();
			_exit(0);
		}
		_exit(0);
	}
	waitpid(mid, NULL, 0);   /* its child is ours from its exit on */
	pool_sweep(keep, n);
	CHECK(waitpid(kid, NULL, WNOHANG) == 0 && kill(kid, 0) == 0, "a child listed is left");
	now = pool_children(&m);
	for (int i = 0; i < m; i++)
		others += now[i] != kid;
	CHECK(m == 1 && !others, "the orphan is killed and reaped");
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	free(keep), free(now);
}

int main(int argc, char **argv)
{
	/* the source tree: argv[0] is ROOT/tests/bin/test_kbench */
	char *self = realpath(argv[0], NULL), *cut = self ? strstr(self, "/tests/bin/") : NULL;

	(void)argc;
	if (!cut) {
		printf("not ok 1 - find the source tree from '%s'\n", argv[0]);
		return 1;
	}
	*cut = '\0';
	test_paths();
	test_ranges();
	test_select();
	test_metrics();
	test_tally_problem_num();
	test_tree_read_error(self);
	free(self);
	test_excessive();
	test_pool();
	test_pool_narrow();
	test_sweep_keep();
	return test_done();
}
