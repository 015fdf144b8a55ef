/* kbench: KernelBench problem discovery, the evaluation engine over lib/pool workers, and
 * the paper's metrics. See kbench.h; the worker protocol is documented in kbench-eval(1). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deceive.h"
#include "extract.h"
#include "input.h"
#include "jsonl.h"
#include "kbench.h"
#include "pool.h"

/* ================================================================== problems */

/* Locate "levelN/<num>_<name>.py" at the end of path: offset of "levelN" in *off. */
static int parse_path_at(const char *path, int *level, int *num, size_t *off)
{
	const char *file = strrchr(path, '/'), *dir, *p;
	size_t n = strlen(path);
	char *end;
	long lv, nm;

	if (!file || n < 4 || strcmp(path + n - 3, ".py"))
		return -1;
	file++;
	for (dir = file - 1; dir > path && dir[-1] != '/'; dir--)
		;
	if (strncmp(dir, "level", 5))
		return -1;
	if (!isdigit((unsigned char)dir[5]) || !isdigit((unsigned char)*file))
		return -1;      /* digits alone: not " 8_x.py" nor "+7_x.py" */
	errno = 0;
	lv = strtol(dir + 5, &end, 10);
	if (*end != '/' || lv > KBENCH_MAX_LEVEL)
		return -1;
	nm = strtol(file, &end, 10);
	if (*end != '_' || nm > 1000000)
		return -1;
	for (p = file; *p; p++)
		if (*p == '/')
			return -1;
	*level = (int)lv;
	*num = (int)nm;
	if (off)
		*off = (size_t)(dir - path);
	return 0;
}

int kbench_parse_path(const char *path, int *level, int *num)
{
	return parse_path_at(path, level, num, NULL);
}

struct found {
	char *prefix;
	struct kbench_problem pr;
};

struct finder {
	struct found *f;
	size_t n, cap;
	const char *root;      /* directory walks: strip this from names */
};

/* the entries found and what they hold (a problem moved out leaves NULLs) */
static void finder_free(struct finder *fd)
{
	for (size_t i = 0; i < fd->n; i++) {
		free(fd->f[i].prefix);
		free(fd->f[i].pr.path);
		free(fd->f[i].pr.src);
	}
	free(fd->f);
}

static void finder_add(struct finder *fd, const char *name, const char *data, size_t len)
{
	int level, num;
	size_t off;

	if (parse_path_at(name, &level, &num, &off) < 0)
		return;
	if (fd->n == fd->cap) {
		fd->cap = fd->cap ? fd->cap * 2 : 64;
		fd->f = xrealloc(fd->f, fd->cap * sizeof *fd->f);
	}
	struct found *f = &fd->f[fd->n++];
	f->prefix = xstrndup(name, off);
	f->pr.level = level;
	f->pr.num = num;
	f->pr.path = xstrdup(name + off);
	f->pr.src = xstrndup(data, len);
}

static int archive_cb(const char *name, const char *data, size_t len, void *arg)
{
	finder_add(arg, name, data, len);
	return 0;
}

static struct finder *walk_finder;

/* a problem file of a tree on disk, read as a problem in an archive is (input_each_py) */
static int walk_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	if (flag != FTW_F || ftw->level > 8)
		return 0;
	int level, num;
	if (parse_path_at(path, &level, &num, NULL) < 0)
		return 0;
	input_each_py(path, archive_cb, walk_finder);   /* one that cannot be read: said */
	return 0;
}

static int problem_cmp(const void *a, const void *b)
{
	const struct kbench_problem *x = a, *y = b;

	if (x->level != y->level)
		return x->level - y->level;
	if (x->num != y->num)
		return x->num - y->num;
	return strcmp(x->path, y->path);
}

int kbench_tree_load(struct kbench_tree *t, const char *path)
{
	struct finder fd = { 0 };
	struct stat st;
	size_t i, j, best = 0, bestn = 0;

	memset(t, 0, sizeof *t);
	if (stat(path, &st) < 0) {
		warn_msg("cannot open KernelBench '%s':", path);
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		walk_finder = &fd;
		nftw(path, walk_cb, 16, FTW_PHYS);
		walk_finder = NULL;
	} else if (input_each_py(path, archive_cb, &fd) < 0) {
		finder_free(&fd);   /* the problems of the members read before the error go too */
		return -1;
	}
	/* the level folders' parent that holds the most problems */
	for (i = 0; i < fd.n; i++) {
		size_t c = 0;
		for (j = 0; j < fd.n; j++)
			c += !strcmp(fd.f[i].prefix, fd.f[j].prefix);
		if (c > bestn) {
			bestn = c;
			best = i;
		}
	}
	if (!bestn) {
		warn_msg("%s: no KernelBench problems (levelN/<num>_<Name>.py) found", path);
		finder_free(&fd);
		return -1;
	}
	t->p = xcalloc(bestn, sizeof *t->p);
	const char *prefix = fd.f[best].prefix;
	for (i = 0; i < fd.n; i++) {
		if (!strcmp(fd.f[i].prefix, prefix) && t->n < bestn) {
			t->p[t->n++] = fd.f[i].pr;
			fd.f[i].pr.path = fd.f[i].pr.src = NULL;
		}
	}
	finder_free(&fd);
	qsort(t->p, t->n, sizeof *t->p, problem_cmp);
	for (i = 1, j = 1; i < t->n; i++) {
		if (t->p[i].level == t->p[j - 1].level && t->p[i].num == t->p[j - 1].num) {
			warn_msg("%s: %s: duplicate problem number, ignored", path, t->p[i].path);
			free(t->p[i].path);
			free(t->p[i].src);
			continue;
		}
		t->p[j++] = t->p[i];
	}
	if (t->n)
		t->n = j;
	return 0;
}

void kbench_tree_free(struct kbench_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->p[i].path);
		free(t->p[i].src);
	}
	free(t->p);
	memset(t, 0, sizeof *t);
}

const struct kbench_problem *kbench_tree_find_num(const struct kbench_tree *t, int level, int num)
{
	for (size_t i = 0; t && i < t->n; i++)
		if (t->p[i].level == level && t->p[i].num == num)
			return &t->p[i];
	return NULL;
}

int kbench_find_level_num(const char *problem, int *level, int *num, const char **at)
{
	for (const char *s = problem; (s = strstr(s, "level")); s++) {
		char *end;
		long lv, nm;

		if ((s != problem && s[-1] != '/') || !isdigit((unsigned char)s[5]))
			continue;
		lv = strtol(s + 5, &end, 10);
		if (*end != '/' || !isdigit((unsigned char)end[1]) || lv > KBENCH_MAX_LEVEL)
			continue;
		nm = strtol(end + 1, &end, 10);
		if ((*end && *end != '_' && *end != '.') || nm > 1000000)
			continue;
		*level = (int)lv;
		*num = (int)nm;
		if (at)
			*at = s;
		return 0;
	}
	return -1;
}

const struct kbench_problem *kbench_tree_find(const struct kbench_tree *t, const char *problem)
{
	int lv, nm;

	for (size_t i = 0; t && i < t->n; i++) {
		size_t n = strlen(t->p[i].path);
		if (!strcmp(t->p[i].path, problem) ||
		    (!strncmp(t->p[i].path, problem, n - 3) && !problem[n - 3]))
			return &t->p[i];
	}
	if (kbench_find_level_num(problem, &lv, &nm, NULL) == 0)
		return kbench_tree_find_num(t, lv, nm);
	return NULL;
}

json_t *kbench_problem_record(const struct kbench_problem *p)
{
	json_t *o = json_object();
	size_t n = strlen(p->path);

	json_object_set_new(o, "id", json_stringn(p->path, n - 3));
	json_object_set_new(o, "level", json_integer(p->level));
	json_object_set_new(o, "problem", json_string(p->path));
	json_object_set_new(o, "ref", json_string(p->src));
	return o;
}

static int ranges_parse(struct kbench_ranges *rs, const char *s, long max)
{
	char *copy = xstrdup(s), *next, *tok, *dash;
	long a, b;

	memset(rs, 0, sizeof *rs);
	for (tok = copy; tok; tok = next) {     /* an empty item ("1,,2", "1,") is refused */
		if ((next = strchr(tok, ',')))
			*next++ = '\0';
		dash = strchr(tok, '-');
		if (dash)
			*dash = '\0';
		if (parse_long(tok, 0, max, &a) < 0 ||
		    (dash && parse_long(dash + 1, 0, max, &b) < 0) || (dash && b < a)) {
			free(copy);
			kbench_ranges_free(rs);
			return -1;
		}
		if (!dash)
			b = a;
		rs->r = xrealloc(rs->r, (rs->n + 1) * sizeof *rs->r);
		rs->r[rs->n][0] = a;
		rs->r[rs->n][1] = b;
		rs->n++;
	}
	free(copy);
	return rs->n ? 0 : -1;
}

int kbench_ranges_parse(struct kbench_ranges *rs, const char *s)
{
	return ranges_parse(rs, s, 1000000);
}

int kbench_levels_parse(struct kbench_ranges *rs, const char *s)
{
	return ranges_parse(rs, s, KBENCH_MAX_LEVEL);
}

int kbench_ranges_has(const struct kbench_ranges *rs, long v)
{
	if (!rs || !rs->n)
		return 1;
	for (size_t i = 0; i < rs->n; i++)
		if (v >= rs->r[i][0] && v <= rs->r[i][1])
			return 1;
	return 0;
}

void kbench_ranges_free(struct kbench_ranges *rs)
{
	free(rs->r);
	rs->r = NULL;
	rs->n = 0;
}

size_t kbench_tree_select(const struct kbench_tree *t, const struct kbench_ranges *levels,
                          const struct kbench_ranges *problems,
                          const struct kbench_problem ***out)
{
	size_t n = 0;

	*out = xmalloc((t->n ? t->n : 1) * sizeof **out);
	for (size_t i = 0; i < t->n; i++) {
		if (!kbench_ranges_has(levels, t->p[i].level) ||
		    !kbench_ranges_has(problems, t->p[i].num))
			continue;
		(*out)[n++] = &t->p[i];
	}
	/* a number or range of -p that no problem of the chosen levels has: said, where others
	 * matched (none matching at all is the caller's error) */
	for (size_t k = 0; n && problems && k < problems->n; k++) {
		size_t hit = 0;
		for (size_t i = 0; i < n && !hit; i++)
			hit = (*out)[i]->num >= problems->r[k][0] && (*out)[i]->num <= problems->r[k][1];
		if (hit)
			continue;
		if (problems->r[k][0] == problems->r[k][1])
			warn_msg("--problems: no problem %ld in the levels chosen", problems->r[k][0]);
		else
			warn_msg("--problems: no problem %ld-%ld in the levels chosen", problems->r[k][0],
			         problems->r[k][1]);
	}
	if (!n) {
		free(*out);
		*out = NULL;
	}
	return n;
}

/* ================================================================== engine */

enum { E_BUILD_WAIT, E_RUN_WAIT, E_BUSY, E_DONE };
/* a worker's role, and a job's mode: ROLE_PCH and ROLE_NAMES are makers' jobs, given to
 * build workers */
enum { ROLE_BUILD, ROLE_RUN, ROLE_PROBE, ROLE_PCH, ROLE_NAMES };
enum { MK_WAIT, MK_BUSY, MK_DONE };
enum { W_NONE, W_STARTING, W_READY, W_BUSY };

struct entry {
	json_t *rec;
	char *line;
	size_t len;
	char *where;           /* "file:line" for messages */
	char *kernel;          /* candidate source, NULL: no code */
	char *ref;
	int level;
	char *problem;         /* problem path, or NULL */
	char hash[17];
	char *cache;           /* cache_dir/hash */
	int state;
	int bad;               /* the record itself was bad */
	json_t *ev;            /* verdict so far (owned) */
	json_t *deceive;       /* robust findings (owned) or NULL */
	double build_s;
	int cached;
	int loaded;            /* the run worker said the candidate was loaded */
};

struct worker {
	struct pool_proc p;
	int role;
	int gpu;               /* CUDA device, -1 for none */
	int state;
	struct entry *job;
	char nonce[33];
	double deadline;
	double started;        /* when its job was sent (pool_now) */
	json_t *result;        /* the worker's reply (owned) */
	size_t mk;             /* 1 + the index in e->mk of its maker job, 0 for none */
};

/* A maker job: what a build asked for (a precompiled header, the lean builds' names), made
 * by a fresh build worker that runs no candidate's code, the one writer of pch/ or lean/ */
struct maker {
	unsigned long long key;   /* of its mode and request: one maker a request a run */
	int mode;                 /* ROLE_PCH or ROLE_NAMES */
	json_t *req;              /* the build's request (owned; NULL once done) */
	int state;
};

#define MAX_MAKERS 16   /* maker jobs a run at most: the builds cannot keep a worker busy */

struct kbench_engine {
	struct kbench_config cfg;
	char *device;          /* "cpu" or "cuda" */
	char *torch;
	json_t *gpu;           /* the probe's gpu object (name, driver, clocks), NULL on the CPU */
	char *arch;            /* TORCH_CUDA_ARCH_LIST for builds, "" on the CPU */
	char *python;
	char *worker;
	unsigned long long worker_hash;   /* of worker.py's text: a new worker, new verdicts */
	char *cache;           /* absolute path of the build cache (workers run elsewhere) */
	struct entry **q;      /* submitted, not yet handed back: q[head..n) */
	size_t head, n, cap;
	struct worker *w;      /* (nlanes * slots): lane i owns w[slots * i ..] */
	int nlanes, nbuild;
	int slots;             /* workers a lane: the busy one and up to slots - 1 spares (a run
	                        * lane keeps that many started, a build lane one) */
	int input_closed;
	int start_failures;
	int fatal;
	int narrow_warned;     /* pool_narrow failed once: said */
	struct maker *mk;      /* maker jobs asked for in this run, done ones too */
	size_t nmk;
	double mk_end;         /* once the input is closed and every record done: makers not
	                        * started by then are dropped, busy ones stopped then */
	unsigned long long *nan_refs;   /* hashes of the references whose output held NaN: said */
	size_t nnan;
	unsigned long long nonce_ctr, nonce_seed;   /* nonces the candidate cannot guess */
	struct entry *out;     /* handed back by the last kbench_engine_next */
};

static void entry_free(struct entry *en)
{
	if (!en)
		return;
	json_decref(en->rec);
	json_decref(en->ev);
	json_decref(en->deceive);
	free(en->line);
	free(en->where);
	free(en->kernel);
	free(en->ref);
	free(en->problem);
	free(en->cache);
	free(en);
}

static char *find_in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL, *dir, *full;

	if (strchr(prog, '/'))
		return access(prog, X_OK) == 0 ? xstrdup(prog) : NULL;
	copy = xstrdup(path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		full = xasprintf("%s/%s", *dir ? dir : ".", prog);
		if (access(full, X_OK) == 0) {
			free(copy);
			return full;
		}
		free(full);
	}
	free(copy);
	return NULL;
}

static char *find_worker(void)
{
	const char *env = util_env("KBENCH_WORKER", NULL);
	char exe[4096], *p, *cand;
	ssize_t n;

	if (env)
		return xstrdup(env);
	cand = xasprintf("%s/kbench/worker.py", util_sharedir());
	if (access(cand, R_OK) == 0)
		return cand;
	free(cand);
	n = readlink("/proc/self/exe", exe, sizeof exe - 64);
	if (n > 0) {
		exe[n] = '\0';
		for (int up = 0; up < 3 && (p = strrchr(exe, '/')); up++) {
			*p = '\0';
			cand = xasprintf("%s/share/kbench/worker.py", exe);
			if (access(cand, R_OK) == 0)
				return cand;
			free(cand);
		}
	}
	return NULL;
}

static void env_add(char ***env, size_t *n, const char *name, const char *value)
{
	*env = xrealloc(*env, (*n + 2) * sizeof **env);
	(*env)[(*n)++] = xasprintf("%s=%s", name, value);
	(*env)[*n] = NULL;
}

/* The scrubbed environment: a few variables the toolchain needs, nothing else. */
static char **make_env(const struct kbench_engine *e, int gpu, int role)
{
	static const char *keep[] = { "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME",
		"CUDA_PATH", "CC", "CXX", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NVCC_APPEND_FLAGS",
		"NVCC_PREPEND_FLAGS", "MAX_JOBS" };
	char **env = NULL, num[32];
	size_t n = 0;

	env_add(&env, &n, "LANG", "C.UTF-8");
	for (size_t i = 0; i < ARRAY_LEN(keep); i++)
		if (getenv(keep[i]))
			env_add(&env, &n, keep[i], getenv(keep[i]));
	if (!getenv("PATH"))
		env_add(&env, &n, "PATH", "/usr/local/bin:/usr/bin:/bin");
	env_add(&env, &n, "PYTHONDONTWRITEBYTECODE", "1");
	env_add(&env, &n, "PYTHONHASHSEED", "0");
	env_add(&env, &n, "PYTHONUNBUFFERED", "1");
	env_add(&env, &n, "KBENCH_DEVICE", role == ROLE_PROBE ? e->cfg.device : e->device);
	if (role == ROLE_BUILD || (e->device && !strcmp(e->device, "cpu")) ||
	    (role == ROLE_PROBE && !strcmp(e->cfg.device, "cpu"))) {
		env_add(&env, &n, "CUDA_VISIBLE_DEVICES", "");
	} else if (gpu >= 0) {
		snprintf(num, sizeof num, "%d", gpu);
		env_add(&env, &n, "CUDA_VISIBLE_DEVICES", num);
	}
	return env;
}

static void env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static int spawn(struct kbench_engine *e, struct worker *w, int role, int gpu)
{
	char *argv[] = { e->python, "-B", e->worker, "--in", "3", "--out", "4", NULL, NULL };
	char **env = make_env(e, gpu, role);
	const char *rw[] = { e->cache, NULL };  /* builds and headers: the rest is read-only */
	struct pool_opts o = {
		.argv = argv, .env = env, .tmp_root = e->cfg.tmp_root, .nproc = e->cfg.nproc,
		.fsize_mb = e->cfg.fsize_mb, .netns = e->cfg.netns, .rw = rw,
		.log_max = e->cfg.log_bytes ? e->cfg.log_bytes : 2,
	};
	int r;

	if (role == ROLE_PROBE)
		argv[7] = "--probe";
	pool_proc_free(&w->p);   /* the buffers of the slot's previous worker */
	if ((e->device && !strcmp(e->device, "cpu")) || (role == ROLE_PROBE &&
	                                                 !strcmp(e->cfg.device, "cpu")))
		o.mem_mb = e->cfg.mem_mb;
	r = pool_spawn(&w->p, &o);
	env_free(env);
	if (r < 0)
		return -1;
	w->role = role;
	w->gpu = gpu;
	w->state = W_STARTING;
	w->job = NULL;
	w->mk = 0;
	w->deadline = pool_now() + e->cfg.start_timeout;
	json_decref(w->result);
	w->result = NULL;
	return 0;
}

static void worker_stop(struct kbench_engine *e, struct worker *w, int sweep)
{
	pid_t live[256];
	int n = 0;

	pool_finish(&w->p);
	w->state = W_NONE;
	if (!sweep)
		return;
	for (int i = 0; i < e->nlanes * e->slots && n < 256; i++)
		if (e->w[i].p.pid)
			live[n++] = e->w[i].p.pid;
	pool_sweep(live, n);
}

static json_t *job_json(struct kbench_engine *e, struct worker *w, struct entry *en, int mode)
{
	json_t *j = json_object();
	char ext[4096];

	unsigned long long mix[2] = { e->nonce_seed, ++e->nonce_ctr };

	snprintf(w->nonce, sizeof w->nonce, "%016llx%016llx", util_hash64(mix, sizeof mix),
	         util_hash64(mix, sizeof mix) ^ e->nonce_seed);
	static const char *const modes[] = { "build", "run", "probe", "pch", "names" };

	json_object_set_new(j, "mode", json_string(modes[mode]));
	json_object_set_new(j, "nonce", json_string(w->nonce));
	if (mode == ROLE_PROBE)
		return j;
	if (mode == ROLE_PCH || mode == ROLE_NAMES) {   /* a maker: what it checks and makes */
		struct maker *m = &e->mk[w->mk - 1];
		json_object_set(j, "request", m->req);
		snprintf(ext, sizeof ext, "%s/pch", e->cache);
		if (e->cfg.pch)     /* (a names request may name the headers' directories) */
			json_object_set_new(j, "pch_dir", json_string(ext));
		snprintf(ext, sizeof ext, "%s/lean", e->cache);
		json_object_set_new(j, "lean_dir", json_string(ext));
		json_object_set_new(j, "build_timeout", json_real(e->cfg.compile_timeout));
		return j;
	}
	snprintf(ext, sizeof ext, "%s/ext", en->cache);
	json_object_set_new(j, "extensions_dir", json_string(ext));
	json_object_set_new(j, "arch", json_string(e->arch));
	if (e->cfg.pch) {
		snprintf(ext, sizeof ext, "%s/pch", e->cache);
		json_object_set_new(j, "pch_dir", json_string(ext));
	}
	if (e->cfg.lean) {      /* and where the names torch/extension.h adds are kept */
		json_object_set_new(j, "lean", json_true());
		snprintf(ext, sizeof ext, "%s/lean", e->cache);
		json_object_set_new(j, "lean_dir", json_string(ext));
	}
	if (mode == ROLE_BUILD)         /* the build's deadline: the names are had within it */
		json_object_set_new(j, "build_timeout", json_real(e->cfg.compile_timeout));
	json_object_set_new(j, "kernel", json_string(en->kernel));
	json_object_set_new(j, "device", json_string(e->device));
	if (mode == ROLE_BUILD)
		return j;
	json_object_set_new(j, "ref", json_string(en->ref));
	json_object_set_new(j, "trials", json_integer(e->cfg.trials));
	json_object_set_new(j, "perf_trials", json_integer(e->cfg.perf_trials));
	json_object_set_new(j, "warmup", json_integer(e->cfg.warmup));
	json_object_set_new(j, "atol", json_real(e->cfg.atol));
	json_object_set_new(j, "rtol", json_real(e->cfg.rtol));
	json_object_set_new(j, "rtol_only", json_boolean(e->cfg.rtol_only));
	json_object_set_new(j, "flush_l2", json_boolean(e->cfg.flush_l2));
	json_object_set_new(j, "time_ref", json_boolean(!e->cfg.baseline));
	return j;
}

/* Before a job: of the build cache, a build or run worker may write only its source's
 * directory, so that a candidate cannot touch another's build nor the shared pch/ and lean/
 * that later builds read; a maker only pch/ (ROLE_PCH) or lean/ (ROLE_NAMES). Where the
 * worker's namespace cannot do it, said once; the job runs. */
static void narrow_cache(struct kbench_engine *e, struct worker *w, struct entry *en, int mode)
{
	char dir[4096];
	const char *keep[2] = { dir, NULL };
	int r;

	if (en) {
		snprintf(dir, sizeof dir, "%s", en->cache);
		if (mkdir(en->cache, 0755) < 0 && errno != EEXIST)
			warn_msg("cannot create '%s':", en->cache);
	} else
		snprintf(dir, sizeof dir, "%s/%s", e->cache, mode == ROLE_PCH ? "pch" : "lean");
	r = pool_narrow(&w->p, e->cache, keep);
	if (r < 0 && !e->narrow_warned) {
		warn_msg("cannot keep workers out of each other's builds:");
		e->narrow_warned = 1;
	}
}

static int send_job(struct kbench_engine *e, struct worker *w, struct entry *en, int mode)
{
	json_t *j;

	if (mode != ROLE_PROBE)
		narrow_cache(e, w, en, mode);
	j = job_json(e, w, en, mode);
	char *s = json_dumps(j, JSON_COMPACT);
	size_t n = strlen(s);
	int r;

	s = xrealloc(s, n + 2);
	s[n] = '\n';
	s[n + 1] = '\0';
	r = pool_send(&w->p, s, n + 1);
	free(s);
	json_decref(j);
	w->state = W_BUSY;
	w->job = en;
	w->started = pool_now();
	w->deadline = w->started + (mode == ROLE_RUN ? e->cfg.timeout : mode == ROLE_PROBE ?
	                            e->cfg.start_timeout : e->cfg.compile_timeout);
	if (w->mk && e->mk_end && w->deadline > e->mk_end)
		w->deadline = e->mk_end;
	if (en)
		en->state = E_BUSY;
	return r;
}

/* Start one worker (--probe) and wait for its ready line, which says what the interpreter
 * has: torch version, device, GPU architectures. NULL on failure, with *why. The worker stays
 * in *w, ready for a job. */
static json_t *probe(struct kbench_engine *e, struct worker *w, char **why)
{
	struct pool_proc *pp = &w->p;
	json_t *info = NULL, *o;
	char *line;

	if (spawn(e, w, ROLE_PROBE, -1) < 0) {
		*why = xstrdup("cannot start");
		return NULL;
	}
	while (!info && pool_now() < w->deadline) {
		pool_poll(&pp, 1, 100);
		while (!info && pool_line(&w->p, &line)) {
			o = json_loads(line, 0, NULL);
			free(line);
			if (o && json_object_get(o, "ready")) {
				if (json_is_true(json_object_get(o, "ready"))) {
					info = json_incref(o);
				} else {
					const char *m = json_get_str(o, "message");
					*why = xstrdup(m ? m : "the worker is not ready");
					json_decref(o);
					goto fail;
				}
			}
			json_decref(o);
		}
		if (!info && w->p.exited) {
			pool_poll(&pp, 1, 0);
			if (w->p.msg.len == 0 || !memchr(w->p.msg.p, '\n', w->p.msg.len)) {
				char *log = pool_log(&w->p);
				size_t n = strlen(log);
				while (n && (log[n - 1] == '\n'))
					log[--n] = '\0';
				char *last = strrchr(log, '\n');
				*why = xasprintf("%s: %s", pool_status_str(w->p.status),
				                 last ? last + 1 : *log ? log : "no output");
				free(log);
				goto fail;
			}
		}
	}
	if (info) {
		w->state = W_READY;
		return info;
	}
	*why = xstrdup("no reply in time");
fail:
	pool_finish(&w->p);
	pool_proc_free(&w->p);
	memset(w, 0, sizeof *w);
	return NULL;
}

/* Processes of our real uid now: RLIMIT_NPROC counts them all, so a limit must sit above. */
static long user_procs(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	struct stat st;
	char path[300];
	long n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s", de->d_name);
		if (stat(path, &st) == 0 && st.st_uid == getuid())
			n++;
	}
	closedir(d);
	return n;
}

static int mkdir_p(const char *dir)
{
	char *p = xstrdup(dir), *s;
	int r = 0;

	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			r = -1;
		*s = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		r = -1;
	else
		r = 0;
	free(p);
	return r;
}

/* dir/name, made where missing: 0 or -1 */
static int mkdir_in(const char *dir, const char *name)
{
	char *p = xasprintf("%s/%s", dir, name);
	int r = mkdir(p, 0755) < 0 && errno != EEXIST ? -1 : 0;

	free(p);
	return r;
}

struct kbench_engine *kbench_engine_new(const struct kbench_config *cfg)
{
	struct kbench_engine *e = xcalloc(1, sizeof *e);
	const char *cands[3];
	json_t *info = NULL;
	struct worker pw = { 0 };
	char *why = NULL;
	int nc = 0;

	e->cfg = *cfg;
	pool_init();   /* orphans of a worker come back to us, to be killed */
	if (!e->cfg.nproc && getuid() != 0)   /* no effect on root: the sweep covers that */
		e->cfg.nproc = user_procs() + 512;
	if (getrandom(&e->nonce_seed, sizeof e->nonce_seed, 0) != sizeof e->nonce_seed)
		e->nonce_seed = util_hash64(&e, sizeof e) ^ (unsigned long long)(pool_now() * 1e9);
	if (!(e->worker = cfg->worker ? xstrdup(cfg->worker) : find_worker())) {
		warn_msg("cannot find share/kbench/worker.py (set DICE_SHARE)");
		free(e);
		return NULL;
	}
	/* before any worker: each is given it, the one place it may write but its own (and
	 * given a job, only its source's part of it: narrow_cache) */
	if (mkdir_p(cfg->cache_dir) < 0 || !(e->cache = realpath(cfg->cache_dir, NULL)) ||
	    (cfg->pch && mkdir_in(e->cache, "pch") < 0) ||
	    (cfg->lean && mkdir_in(e->cache, "lean") < 0)) {
		warn_msg("cannot create the build cache '%s':", cfg->cache_dir);
		free(e->worker);
		free(e);
		return NULL;
	}
	if (cfg->python)
		cands[nc++] = cfg->python;
	else {
		cands[nc++] = "/usr/bin/python3";
		cands[nc++] = "python3";
	}
	e->device = NULL;
	e->arch = xstrdup("");
	for (int i = 0; i < nc && !info; i++) {
		free(e->python);
		if (!(e->python = find_in_path(cands[i]))) {
			free(why);
			why = xasprintf("'%s' not found", cands[i]);
			continue;
		}
		free(why);
		why = NULL;
		info = probe(e, &pw, &why);
	}
	if (!info) {
		warn_msg("cannot run the worker with %s: %s\nhint: set DICE_PYTHON to a Python that "
		         "imports torch", e->python ? e->python : cands[nc - 1], why ? why : "?");
		free(why);
		free(e->python);
		free(e->worker);
		free(e->cache);
		free(e->arch);
		free(e);
		return NULL;
	}
	free(why);
	const char *dev = json_get_str(info, "device");
	if (!strcmp(cfg->device, "cuda") && (!dev || strcmp(dev, "cuda"))) {
		warn_msg("--device cuda: torch.cuda is not available with %s", e->python);
		json_decref(info);
		pool_finish(&pw.p);
		pool_proc_free(&pw.p);
		free(e->python);
		free(e->worker);
		free(e->cache);
		free(e->arch);
		free(e);
		return NULL;
	}
	e->device = xstrdup(dev && !strcmp(dev, "cuda") && strcmp(cfg->device, "cpu") ? "cuda" : "cpu");
	e->torch = xstrdup(json_get_str(info, "torch") ? json_get_str(info, "torch") : "?");
	size_t wlen;
	char *wtext = util_read_file(e->worker, &wlen);
	e->worker_hash = wtext ? util_hash64(wtext, wlen) : 0;
	free(wtext);
	if (!strcmp(e->device, "cuda")) {
		free(e->arch);
		e->arch = xstrdup(getenv("TORCH_CUDA_ARCH_LIST") ? getenv("TORCH_CUDA_ARCH_LIST") :
		                  json_get_str(info, "arch") ? json_get_str(info, "arch") : "");
		if (json_is_object(json_object_get(info, "gpu")))
			e->gpu = json_incref(json_object_get(info, "gpu"));
	}
	double ng = 0;
	json_get_num(info, "gpus", &ng);
	json_decref(info);
	int nrun;
	if (!strcmp(e->device, "cuda")) {
		if (!e->cfg.ngpus) {
			e->cfg.ngpus = ng > 0 ? (int)ng : 1;
			e->cfg.gpus = xcalloc((size_t)e->cfg.ngpus, sizeof(int));
			for (int i = 0; i < e->cfg.ngpus; i++)
				e->cfg.gpus[i] = i;
		} else {
			int *g = xcalloc((size_t)e->cfg.ngpus, sizeof(int));
			memcpy(g, cfg->gpus, (size_t)e->cfg.ngpus * sizeof(int));
			e->cfg.gpus = g;
		}
		nrun = e->cfg.ngpus;
	} else {
		e->cfg.gpus = NULL;
		e->cfg.ngpus = 0;
		nrun = cfg->run_workers > 0 ? cfg->run_workers : 1;
	}
	e->nbuild = cfg->jobs > 0 ? cfg->jobs : 1;
	e->nlanes = e->nbuild + nrun;
	e->slots = 1 + (cfg->run_spares > 0 ? cfg->run_spares : KBENCH_RUN_SPARES);
	e->w = xcalloc((size_t)e->nlanes * e->slots, sizeof *e->w);
	/* in CPU mode the probe is as good as a run worker: the first one */
	if (!strcmp(e->device, "cpu") && !strcmp(cfg->device, "cpu")) {
		e->w[e->slots * e->nbuild] = pw;
		e->w[e->slots * e->nbuild].role = ROLE_RUN;
	} else {
		pool_finish(&pw.p);
		pool_proc_free(&pw.p);
	}
	return e;
}

const char *kbench_engine_device(const struct kbench_engine *e) { return e->device; }
const char *kbench_engine_torch(const struct kbench_engine *e) { return e->torch; }

void kbench_engine_abort(struct kbench_engine *e)
{
	for (int i = 0; i < e->nlanes * e->slots; i++)
		if (e->w[i].p.pid)
			pool_finish(&e->w[i].p);
	pool_sweep(NULL, 0);
}

int kbench_engine_free(struct kbench_engine *e)
{
	int fatal;

	if (!e)
		return 0;
	fatal = e->fatal;
	kbench_engine_abort(e);
	for (int i = 0; i < e->nlanes * e->slots; i++) {
		pool_proc_free(&e->w[i].p);
		json_decref(e->w[i].result);
	}
	for (size_t i = e->head; i < e->n; i++)
		entry_free(e->q[i]);
	for (size_t i = 0; i < e->nmk; i++)
		json_decref(e->mk[i].req);
	free(e->mk);
	free(e->nan_refs);
	entry_free(e->out);
	free(e->q);
	free(e->w);
	free(e->cfg.gpus);
	free(e->device);
	free(e->torch);
	json_decref(e->gpu);
	free(e->arch);
	free(e->python);
	free(e->worker);
	free(e->cache);
	free(e);
	return fatal ? -1 : 0;
}

static json_t *verdict(const char *error, const char *message, int compiled)
{
	json_t *ev = json_object();

	json_object_set_new(ev, "compiled", json_boolean(compiled));
	json_object_set_new(ev, "correct", json_false());
	json_object_set_new(ev, "error", error ? json_string(error) : json_null());
	if (message)
		json_object_set_new(ev, "message", json_string(message));
	return ev;
}

static void finish_entry(struct entry *en, json_t *ev, int bad)
{
	json_decref(en->ev);
	en->ev = ev;
	en->bad = bad;
	en->state = E_DONE;
}

/* cache_dir/<hash>/status: "ok\n" or "fail\n<message>\n<log>" */
static int cache_status(struct entry *en, char **message, char **log)
{
	char *path = xasprintf("%s/status", en->cache), *data, *nl, *nl2;
	size_t len;

	data = util_read_file(path, &len);
	free(path);
	if (!data)
		return 0;
	if (!strncmp(data, "ok\n", 3)) {
		free(data);
		return 1;
	}
	if (strncmp(data, "fail\n", 5)) {
		free(data);
		return 0;
	}
	nl = strchr(data + 5, '\n');
	if (nl)
		*nl = '\0';
	*message = xstrdup(data + 5);
	nl2 = nl ? nl + 1 : NULL;
	*log = nl2 ? xstrdup(nl2) : NULL;
	free(data);
	return -1;
}

static void cache_store(struct entry *en, const char *message, const char *log)
{
	char *path = xasprintf("%s/status", en->cache), *tmp = xasprintf("%s.%d", path, (int)getpid());
	FILE *fp = fopen(tmp, "w");

	if (fp) {
		if (message)
			fprintf(fp, "fail\n%s\n%s", message, log ? log : "");
		else
			fputs("ok\n", fp);
		if (fclose(fp) == 0)
			rename(tmp, path);
	}
	unlink(tmp);
	free(tmp);
	free(path);
}

static void set_log(struct kbench_engine *e, json_t *ev, const char *log)
{
	struct buf b;

	if (!e->cfg.log_bytes || !log || !*log)
		return;
	buf_init(&b);
	utf8_repair(&b, log, strlen(log));
	json_object_set_new(ev, "log", json_stringn(b.p, b.len));
	buf_free(&b);
}

void kbench_eval_set_speedup(json_t *ev, double ratio)
{
	char s[32];
	double speedup;

	snprintf(s, sizeof s, "%.4g", ratio);   /* as worker.py writes it */
	speedup = strtod(s, NULL);
	json_object_set_new(ev, "speedup", json_real(speedup));
	json_object_set_new(ev, "excessive_speedup",
	                    json_boolean(speedup > KBENCH_EXCESSIVE_SPEEDUP));
}

/* Order the eval object's fields, add what the C side knows. */
static json_t *finalize(struct kbench_engine *e, struct entry *en, json_t *raw, const char *log)
{
	static const char *order[] = { "compiled", "correct", "error", "message", "trials_passed",
		"max_abs_err", "max_rel_err", "ref_ms", "kernel_ms", "speedup", "excessive_speedup" };
	json_t *ev = json_object(), *v;
	const char *k;
	double ref = 0, ker = 0, s;

	for (size_t i = 0; i < ARRAY_LEN(order); i++) {
		if (!strcmp(order[i], "excessive_speedup")) {   /* decided here, not by the worker */
			if (json_get_num(ev, "speedup", &s))
				kbench_eval_set_speedup(ev, s);
		} else if ((v = json_object_get(raw, order[i]))) {
			json_object_set(ev, order[i], v);
		}
	}
	json_object_foreach(raw, k, v)
		if (!json_object_get(ev, k) && strcmp(k, "build_s") && strcmp(k, "deferred") &&
		    strcmp(k, "excessive_speedup"))
			json_object_set(ev, k, v);
	if (!json_object_get(ev, "error"))
		json_object_set_new(ev, "error", json_null());
	/* --baseline: reference time from the file (the reference was not timed: without an
	 * entry there is no speedup, and that is said) */
	if (e->cfg.baseline && json_get_num(ev, "kernel_ms", &ker) && ker > 0) {
		char lv[32];
		const char *slash = en->problem ? strrchr(en->problem, '/') : NULL;
		const char *file = slash ? slash + 1 : en->problem;
		snprintf(lv, sizeof lv, "level%d", en->level);
		json_t *b = file ? json_object_get(json_object_get(e->cfg.baseline, lv), file) : NULL;
		if (json_get_num(b, "mean", &ref) && ref > 0) {
			json_object_set_new(ev, "ref_ms", json_real(ref));
			kbench_eval_set_speedup(ev, ref / ker);
			json_object_set_new(ev, "baseline", json_true());
		} else if (file) {
			warn_msg("%s: --baseline has no mean time > 0 for %s/%s: no speedup", en->where,
			         lv, file);
		} else {
			warn_msg("%s: no `problem` to look up in --baseline: no speedup", en->where);
		}
	}
	json_object_set_new(ev, "device", json_string(e->device));
	json_object_set_new(ev, "torch", json_string(e->torch));
	if (e->gpu)             /* what a timing is reported with (SPEC §9) */
		json_object_set_new(ev, "gpu", json_deep_copy(e->gpu));
	json_object_set_new(ev, "build_s", json_real(en->build_s));
	if (!json_object_get(ev, "run_s"))
		json_object_set_new(ev, "run_s", json_real(0));
	json_object_set_new(ev, "cached", json_boolean(en->cached));
	if (en->deceive) {
		int dec = json_is_true(json_object_get(en->deceive, "deceptive"));
		json_object_set_new(ev, "deceptive", json_boolean(dec));
		json_object_set(ev, "deceive", en->deceive);
		if (dec && json_is_true(json_object_get(ev, "correct"))) {
			json_object_set_new(ev, "correct", json_false());
			json_object_set_new(ev, "error", json_string("deceptive"));
			json_object_set_new(ev, "message",
			                    json_string("the robust check found the kernel deceptive"));
		}
	}
	set_log(e, ev, log);
	json_decref(raw);
	return ev;
}

static const char *get_kind(json_t *ev)
{
	const char *s = json_get_str(ev, "error");
	return s ? s : "";
}

/* A build's requests to the makers (its result's pch_want and names_want, lists of
 * requests: worker.py's want), queued as maker jobs: one a request a run, MAX_MAKERS at
 * most. The builds ran a candidate's code: the makers check what they are asked for. */
static void queue_makers(struct kbench_engine *e, const json_t *result)
{
	static const struct { const char *field; int mode; } kinds[] = {
		{ "pch_want", ROLE_PCH }, { "names_want", ROLE_NAMES },
	};

	for (size_t k = 0; k < 2; k++) {
		json_t *list = json_object_get(result, kinds[k].field), *req;
		size_t i;
		if (!json_is_array(list) || (kinds[k].mode == ROLE_PCH ? !e->cfg.pch : !e->cfg.lean))
			continue;
		json_array_foreach(list, i, req) {
			char *s = json_is_object(req) ? json_dumps(req, JSON_COMPACT | JSON_SORT_KEYS) :
			          NULL;
			unsigned long long key;
			size_t j;
			if (!s)
				continue;
			key = util_hash64(s, strlen(s)) ^ (unsigned long long)kinds[k].mode;
			free(s);
			for (j = 0; j < e->nmk && e->mk[j].key != key; j++)
				;
			if (j < e->nmk || e->nmk == MAX_MAKERS)
				continue;
			if (!e->mk)
				e->mk = xcalloc(MAX_MAKERS, sizeof *e->mk);
			e->mk[e->nmk++] = (struct maker){ key, kinds[k].mode, json_incref(req), MK_WAIT };
		}
	}
}

/* A maker replied, died, or ran out of time: done, whatever came of it (the header and the
 * names are a speed-up only; nothing is said, no record changes). */
static void settle_maker(struct kbench_engine *e, struct worker *w)
{
	struct maker *m = &e->mk[w->mk - 1];

	m->state = MK_DONE;
	json_decref(m->req);
	m->req = NULL;
	w->mk = 0;
	json_decref(w->result);
	w->result = NULL;
	worker_stop(e, w, 1);
}

/* The reference's output held NaN in a correctness trial (the worker's ref_nan): no candidate
 * of it can match (allclose takes no NaN for equal, as in KernelBench), which is said once a
 * reference a run. */
static void warn_ref_nan(struct kbench_engine *e, const struct entry *en)
{
	unsigned long long h = util_hash64(en->ref, strlen(en->ref));

	for (size_t i = 0; i < e->nnan; i++)
		if (e->nan_refs[i] == h)
			return;
	e->nan_refs = xrealloc(e->nan_refs, (e->nnan + 1) * sizeof *e->nan_refs);
	e->nan_refs[e->nnan++] = h;
	warn_msg("%s: the reference's output has NaN: no candidate can match it (eval.ref_nan)",
	         en->problem ? en->problem : en->where);
}

/* A worker replied, died, or ran out of time: settle its entry. */
static void settle(struct kbench_engine *e, struct worker *w, const char *kind, const char *msg)
{
	struct entry *en = w->job;
	json_t *raw;
	char *log;

	if (w->mk) {
		settle_maker(e, w);
		return;
	}
	w->job = NULL;
	if (w->role == ROLE_BUILD && w->result)
		queue_makers(e, w->result);
	if (w->result) {
		raw = json_incref(json_object_get(w->result, "eval"));
		if (!raw || !json_is_object(raw)) {
			json_decref(raw);
			raw = verdict("crash", "the worker sent no verdict", 0);
		}
	} else {
		raw = verdict(kind, msg, en->loaded);
	}
	/* a worker that died or ran out of time timed nothing itself: the time it had */
	const char *spent = w->role == ROLE_BUILD ? "build_s" : "run_s";
	if (!json_is_number(json_object_get(raw, spent)))
		json_object_set_new(raw, spent, json_real(round((pool_now() - w->started) * 1e3) / 1e3));
	json_decref(w->result);
	w->result = NULL;
	worker_stop(e, w, 1);
	log = pool_log(&w->p);
	if (w->role == ROLE_BUILD) {
		double bs = 0;
		json_get_num(raw, "build_s", &bs);
		en->build_s = bs;
		json_object_del(raw, "run_s");  /* the build worker's clock timed the build */
		if (!strcmp(get_kind(raw), "") || json_is_true(json_object_get(raw, "deferred"))) {
			if (!json_is_true(json_object_get(raw, "deferred")))
				cache_store(en, NULL, NULL);
			en->state = E_RUN_WAIT;
			json_decref(raw);
			free(log);
			return;
		}
		if (!strcmp(get_kind(raw), "compile_error"))
			cache_store(en, json_get_str(raw, "message"), log);
	}
	if (json_is_true(json_object_get(raw, "ref_nan")))
		warn_ref_nan(e, en);
	/* the reference itself failed: the record is bad, and said to be, as an unknown
	 * problem is (before finalize, which takes raw) */
	int bad = !strcmp(get_kind(raw), "ref_error");
	if (bad)
		warn_msg("%s: %s", en->where, json_get_str(raw, "message") ?
		         json_get_str(raw, "message") : "the reference failed");
	finish_entry(en, finalize(e, en, raw, log), bad);
	free(log);
}

static int lane_role(const struct kbench_engine *e, int lane)
{
	return lane < e->nbuild ? ROLE_BUILD : ROLE_RUN;
}

static int lane_gpu(const struct kbench_engine *e, int lane)
{
	int r = lane - e->nbuild;

	return lane < e->nbuild || !e->cfg.ngpus ? -1 : e->cfg.gpus[r % e->cfg.ngpus];
}

/* Whether a worker of this role should be started (or kept) now: build workers only for
 * waiting builds (they are slow anyway, and most candidates may need none), run workers
 * while records can still come. */
static int want_work(const struct kbench_engine *e, int role)
{
	if (role == ROLE_RUN && !e->input_closed)
		return 1;
	for (size_t i = 0; role == ROLE_BUILD && i < e->nmk; i++)
		if (e->mk[i].state == MK_WAIT)
			return 1;
	for (size_t i = e->head; i < e->n; i++) {
		int s = e->q[i]->state;
		if (s == E_BUILD_WAIT || (role == ROLE_RUN && s != E_DONE))
			return 1;
	}
	return 0;
}

static void handle(struct kbench_engine *e, struct worker *w)
{
	char *line;
	json_t *o;
	double now = pool_now();

	while (pool_line(&w->p, &line)) {
		o = json_loads(line, 0, NULL);
		free(line);
		if (!o)
			continue;
		if (w->state == W_STARTING && json_object_get(o, "ready")) {
			if (json_is_true(json_object_get(o, "ready"))) {
				w->state = W_READY;
				e->start_failures = 0;
			}
		} else if (w->state == W_BUSY && !w->result && json_get_str(o, "nonce") &&
		           !strcmp(json_get_str(o, "nonce"), w->nonce)) {
			if (!json_object_get(o, "progress"))
				w->result = json_incref(o);
			else if (w->job)        /* (a maker's job has no entry) */
				w->job->loaded = 1;
		}
		json_decref(o);
	}
	if (w->state == W_BUSY && w->result) {
		settle(e, w, NULL, NULL);
		return;
	}
	if (w->p.exited) {
		struct pool_proc *one = &w->p;
		pool_poll(&one, 1, 0);   /* the last line may have come with the exit */
		if (memchr(w->p.msg.p, '\n', w->p.msg.len)) {
			handle(e, w);
			return;
		}
		if (w->state == W_BUSY) {
			char *m = xasprintf("the worker died (%s) without a verdict",
			                    pool_status_str(w->p.status));
			settle(e, w, "crash", m);
			free(m);
		} else {
			char *log = pool_log(&w->p);
			if (++e->start_failures >= 3) {
				warn_msg("workers fail to start (%s): %.300s", pool_status_str(w->p.status), log);
				e->fatal = 1;
			}
			free(log);
			worker_stop(e, w, 1);
		}
		return;
	}
	if (now > w->deadline) {
		if (w->state == W_BUSY) {
			char *m = xasprintf("no verdict within %g s", w->role == ROLE_BUILD ?
			                    e->cfg.compile_timeout : e->cfg.timeout);
			settle(e, w, "timeout", m);
			free(m);
		} else if (w->state == W_STARTING) {
			if (++e->start_failures >= 3) {
				warn_msg("workers do not start within %g s", e->cfg.start_timeout);
				e->fatal = 1;
			}
			worker_stop(e, w, 1);
		}
	}
}

static int hash_building(const struct kbench_engine *e, const char *hash)
{
	for (int i = 0; i < e->nlanes * e->slots; i++)
		if (e->w[i].state == W_BUSY && e->w[i].role == ROLE_BUILD && e->w[i].job &&
		    !strcmp(e->w[i].job->hash, hash))
			return 1;
	return 0;
}

/* The next entry for a worker of this role, or NULL. Cache hits settle here. */
static struct entry *next_job(struct kbench_engine *e, int role)
{
	for (size_t i = e->head; i < e->n; i++) {
		struct entry *en = e->q[i];
		if (role == ROLE_RUN && en->state == E_RUN_WAIT)
			return en;
		if (role != ROLE_BUILD || en->state != E_BUILD_WAIT)
			continue;
		char *msg = NULL, *log = NULL;
		int st = cache_status(en, &msg, &log);
		if (st == 1) {
			en->cached = 1;
			en->state = E_RUN_WAIT;
			continue;
		}
		if (st < 0) {
			en->cached = 1;
			finish_entry(en, finalize(e, en, verdict("compile_error", msg, 0), log), 0);
			free(msg);
			free(log);
			continue;
		}
		if (hash_building(e, en->hash))
			continue;
		return en;
	}
	return NULL;
}

/* The next maker job for an idle build worker (its index), or -1. */
static long next_maker(const struct kbench_engine *e)
{
	for (size_t i = 0; i < e->nmk; i++)
		if (e->mk[i].state == MK_WAIT)
			return (long)i;
	return -1;
}

/* The makers' bound: once the input is closed and every record done, those still waiting
 * have the compile timeout to run in, in all; after it they are dropped. */
static void makers_bound(struct kbench_engine *e)
{
	if (!e->mk_end) {
		if (!e->input_closed)
			return;
		for (size_t i = e->head; i < e->n; i++)
			if (e->q[i]->state != E_DONE)
				return;
		e->mk_end = pool_now() + e->cfg.compile_timeout;
		for (int i = 0; i < e->nlanes * e->slots; i++)
			if (e->w[i].mk && e->w[i].deadline > e->mk_end)
				e->w[i].deadline = e->mk_end;
	}
	if (pool_now() > e->mk_end)
		for (size_t i = 0; i < e->nmk; i++)
			if (e->mk[i].state == MK_WAIT) {
				e->mk[i].state = MK_DONE;
				json_decref(e->mk[i].req);
				e->mk[i].req = NULL;
			}
}

int kbench_engine_step(struct kbench_engine *e, int fd, int timeout_ms)
{
	int nw = e->nlanes * e->slots, n = 0, lane, k;
	struct pool_proc **pp = xcalloc((size_t)nw, sizeof *pp);

	makers_bound(e);
	for (lane = 0; lane < e->nlanes && !e->fatal; lane++) {
		struct worker *lw = &e->w[e->slots * lane];
		int role = lane_role(e, lane), spares = 0, busy = 0;
		int want = role == ROLE_RUN ? e->slots - 1 : 1;
		for (k = 0; k < e->slots; k++) {
			spares += lw[k].state == W_STARTING || lw[k].state == W_READY;
			busy |= lw[k].state == W_BUSY;
		}
		/* spares started ahead: a worker's start (Python, torch) overlaps the jobs before */
		for (k = 0; k < e->slots && spares < want && want_work(e, role); k++) {
			if (lw[k].state != W_NONE)
				continue;
			if (spawn(e, &lw[k], role, lane_gpu(e, lane)) < 0) {
				e->fatal = 1;
				break;
			}
			spares++;
		}
		/* give a ready worker a job when the lane is idle: a candidate's, else (a build
		 * worker) a maker's */
		for (k = 0; k < e->slots && !busy; k++) {
			struct worker *w = &lw[k];
			struct entry *en = NULL;
			long m = -1;
			if (w->state != W_READY || (!(en = next_job(e, role)) &&
			                            (role != ROLE_BUILD || (m = next_maker(e)) < 0)))
				continue;
			if (m >= 0) {
				w->mk = (size_t)m + 1;
				e->mk[m].state = MK_BUSY;
			}
			if (send_job(e, w, en, m >= 0 ? e->mk[m].mode : role) < 0) {
				settle(e, w, "crash", "the worker went away before its job");
			}
			busy = 1;
		}
		/* idle spares when no work can come */
		for (k = 0; k < e->slots; k++) {
			struct worker *w = &lw[k];
			if ((w->state == W_READY || w->state == W_STARTING) && !want_work(e, role))
				worker_stop(e, w, 0);
		}
	}
	for (int i = 0; i < nw; i++)
		if (e->w[i].p.pid)
			pp[n++] = &e->w[i].p;
	if (n || fd >= 0)
		pool_poll_fd(pp, n, fd, timeout_ms);
	free(pp);
	for (int i = 0; i < nw; i++)
		if (e->w[i].p.pid)
			handle(e, &e->w[i]);
	return e->fatal ? -1 : 0;
}

size_t kbench_engine_pending(const struct kbench_engine *e)
{
	size_t n = e->n - e->head;

	for (size_t i = 0; e->input_closed && i < e->nmk; i++)  /* the makers left at the end */
		n += e->mk[i].state != MK_DONE;
	return n;
}

void kbench_engine_close_input(struct kbench_engine *e)
{
	e->input_closed = 1;
}

static int json_level(const json_t *rec, int *level)
{
	return json_level_value(json_object_get(rec, "level"), 0, KBENCH_MAX_LEVEL, level);
}

/* The problem number of a record: `problem`, else `problem_id`, when a number. 1 with *num
 * for a whole number from 0 to 1000000 (a problem file's); -1 with *key naming the field
 * for another number (19.5, -1, 1e300: no problem's); 0 when neither is a number. */
static int record_problem_num(const json_t *rec, int *num, const char **key)
{
	static const char *const keys[] = { "problem", "problem_id" };
	double x;

	for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
		if (!json_get_num(rec, keys[i], &x))
			continue;
		*key = keys[i];
		if (!(x == floor(x) && x >= 0 && x <= 1000000))
			return -1;
		*num = (int)x;
		return 1;
	}
	return 0;
}

/* Resolve the problem of a record: `ref`, `problem` path, or `level` + number. */
static const char *resolve(struct kbench_engine *e, struct entry *en)
{
	const json_t *rec = en->rec;
	const struct kbench_problem *p = NULL;
	const char *prob = json_get_str(rec, "problem"), *ref = json_get_str(rec, "ref"), *key;
	int level = -1, num, has_num = prob ? 0 : record_problem_num(rec, &num, &key);

	json_level(rec, &level);
	if (prob) {
		p = kbench_tree_find(e->cfg.tree, prob);
		if (!p && !ref) {
			long l2;
			if (e->cfg.tree && level >= 0 && parse_long(prob, 0, 1000000, &l2) == 0)
				p = kbench_tree_find_num(e->cfg.tree, level, (int)l2);
			if (!p)
				return e->cfg.tree ? "unknown problem" : "no `ref` and no --kernelbench tree";
		}
	} else if (has_num && !ref) {
		if (has_num < 0)
			return !strcmp(key, "problem") ? "`problem` is not a problem number (a whole "
			       "number from 0 to 1000000)" : "`problem_id` is not a problem number (a "
			       "whole number from 0 to 1000000)";
		if (level < 0)
			return "a problem number needs a `level`";
		if (!(p = kbench_tree_find_num(e->cfg.tree, level, num)))
			return e->cfg.tree ? "unknown problem" : "no `ref` and no --kernelbench tree";
	} else if (!ref) {
		/* a field there but of the wrong type is named, not taken for a missing one */
		if (json_get_set(rec, "ref"))
			return "`ref` is not a string";
		if (json_get_set(rec, "problem"))
			return "`problem` is not a string or a number";
		return "no `problem` and no `ref`";
	}
	if (p) {
		en->level = p->level;
		en->problem = xstrdup(p->path);
	} else {
		en->level = level;
		if (prob) {
			int lv, nm;
			en->problem = xstrdup(prob);
			if (level < 0 && kbench_parse_path(prob, &lv, &nm) == 0)
				en->level = lv;
		}
	}
	en->ref = xstrdup(ref ? ref : p->src);
	return NULL;
}

/* A cheap test: a candidate that builds no extension goes straight to a run worker. */
static int needs_build(const char *kernel)
{
	return strstr(kernel, "load_inline") || strstr(kernel, "cpp_extension") ||
	       strstr(kernel, "load(");
}

static void queue_entry(struct kbench_engine *e, struct entry *en)
{
	if (e->n == e->cap) {
		if (e->head > 0) {
			memmove(e->q, e->q + e->head, (e->n - e->head) * sizeof *e->q);
			e->n -= e->head;
			e->head = 0;
		}
		if (e->n == e->cap) {
			e->cap = e->cap ? e->cap * 2 : 64;
			e->q = xrealloc(e->q, e->cap * sizeof *e->q);
		}
	}
	e->q[e->n++] = en;
}

void kbench_engine_submit_done(struct kbench_engine *e, json_t *rec, json_t *ev, int bad,
                               const char *where)
{
	struct entry *en = xcalloc(1, sizeof *en);

	en->rec = rec;
	en->where = xstrdup(where);
	queue_entry(e, en);
	finish_entry(en, ev, bad);
}

void kbench_engine_submit(struct kbench_engine *e, json_t *rec, const char *line, size_t len,
                          const char *where)
{
	struct entry *en = xcalloc(1, sizeof *en);
	const char *why, *from = NULL;
	char key[512];

	en->rec = rec;
	en->line = xstrndup(line, len);
	en->len = len;
	en->where = xstrdup(where);
	queue_entry(e, en);
	if ((why = resolve(e, en))) {
		warn_msg("%s: %s", where, why);
		finish_entry(en, verdict("bad_problem", why, 0), 1);
		return;
	}
	en->kernel = extract_record_kernel(rec, NULL, &from);
	if (!en->kernel) {
		char why[128];
		finish_entry(en, finalize(e, en, verdict("no_code", extract_record_why(rec, NULL,
		             from, why, sizeof why), 0), NULL), 0);
		return;
	}
	if (e->cfg.robust) {
		struct deceive_result dr;
		deceive_check(e->cfg.robust, en->kernel, strlen(en->kernel), en->ref,
		              strlen(en->ref), &dr);
		en->deceive = deceive_result_json(&dr);
		deceive_result_free(&dr);
	}
	struct buf b;
	buf_init(&b);
	buf_adds(&b, en->kernel);
	buf_addf(&b, "%c%s%c%s%c%s%c%s%c%016llx", 0, e->device, 0, e->arch, 0, e->python, 0,
	         e->torch, 0, e->worker_hash);
	if (e->cfg.pch)         /* its builds compile with the header's -I: not --no-pch's */
		buf_addf(&b, "%cpch", 0);
	if (e->cfg.lean)        /* its CUDA builds may read torch/types.h: not --no-lean's */
		buf_addf(&b, "%clean", 0);
	snprintf(en->hash, sizeof en->hash, "%016llx", util_hash64(b.p, b.len));
	buf_free(&b);
	snprintf(key, sizeof key, "%s/%s", e->cache, en->hash);
	en->cache = xstrdup(key);
	en->state = needs_build(en->kernel) ? E_BUILD_WAIT : E_RUN_WAIT;
	if (en->state == E_BUILD_WAIT && mkdir(en->cache, 0755) < 0 && errno != EEXIST)
		warn_msg("cannot create '%s':", en->cache);
}

int kbench_engine_next(struct kbench_engine *e, json_t **rec, char **line, size_t *len,
                       json_t **ev, int *bad)
{
	struct entry *en;

	entry_free(e->out);
	e->out = NULL;
	if (e->head == e->n || e->q[e->head]->state != E_DONE)
		return 0;
	en = e->q[e->head++];
	*rec = en->rec;
	*ev = en->ev;
	*bad = en->bad;
	*line = en->line;
	*len = en->len;
	en->rec = NULL;
	en->ev = NULL;
	e->out = en;
	return 1;
}

/* ================================================================== metrics */

const double kbench_fast_p[KBENCH_NFAST] = { 0, 0.5, 0.8, 1.0, 1.5, 2.0 };

void kbench_tally_init(struct kbench_tally *t)
{
	memset(t, 0, sizeof *t);
}

void kbench_tally_free(struct kbench_tally *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->e[i].key);
	free(t->e);
	memset(t, 0, sizeof *t);
}

void kbench_tally_add(struct kbench_tally *t, int level, const char *key, int correct,
                      double speedup)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->e = xrealloc(t->e, t->cap * sizeof *t->e);
	}
	t->e[t->n++] = (struct kbench_tally_entry){ level, xstrdup(key), correct, speedup };
}

enum eval_kind { EVAL_BOOL, EVAL_STRING, EVAL_COUNT, EVAL_NUMBER };

/* The eval fields a report reads, or that say how far to trust the ones it reads, and what
 * each may hold (see kbench_tally_record). */
static const struct {
	const char *name;
	enum eval_kind kind;
	int required;       /* absent is wrong too (else absent is taken) */
	double max;         /* EVAL_NUMBER: the largest value taken */
} eval_fields[] = {
	{ "compiled", EVAL_BOOL, 0, 0 },
	{ "correct", EVAL_BOOL, 1, 0 },
	{ "deceptive", EVAL_BOOL, 0, 0 },
	{ "excessive_speedup", EVAL_BOOL, 0, 0 },
	{ "error", EVAL_STRING, 0, 0 },
	{ "trials_passed", EVAL_COUNT, 0, 0 },
	{ "speedup", EVAL_NUMBER, 0, KBENCH_MAX_SPEEDUP },
	{ "ref_ms", EVAL_NUMBER, 0, HUGE_VAL },
	{ "kernel_ms", EVAL_NUMBER, 0, HUGE_VAL },
	{ "max_abs_err", EVAL_NUMBER, 0, HUGE_VAL },
	{ "max_rel_err", EVAL_NUMBER, 0, HUGE_VAL },
};

/* 1 when v (present) holds what a field of kind k may */
static int eval_value_ok(enum eval_kind k, double max, const json_t *v)
{
	double x = json_number_value(v);

	switch (k) {
	case EVAL_BOOL: return json_is_boolean(v);
	case EVAL_STRING: return json_is_string(v) || json_is_null(v);
	case EVAL_COUNT: return json_is_integer(v) && json_integer_value(v) >= 0;
	default: return json_is_null(v) || (json_is_number(v) && isfinite(x) && x >= 0 && x <= max);
	}
}

/* "WHAT must be MUST, not VALUE" (or "WHAT is missing: ...") into t->why, MUST said for a
 * field of kind k */
static void tally_refuse(struct kbench_tally *t, const char *what, enum eval_kind k, double max,
                         const json_t *v)
{
	char must[64], *s;

	switch (k) {
	case EVAL_BOOL: snprintf(must, sizeof must, "true or false"); break;
	case EVAL_STRING: snprintf(must, sizeof must, "a string or null"); break;
	case EVAL_COUNT: snprintf(must, sizeof must, "an integer >= 0"); break;
	default:
		if (isinf(max))
			snprintf(must, sizeof must, "a number >= 0 (or null)");
		else
			snprintf(must, sizeof must, "a number from 0 to %.0f (or null)", max);
		break;
	}
	if (!v) {
		snprintf(t->why, sizeof t->why, "%s is missing (it must be %s)", what, must);
		return;
	}
	s = jsonl_dumps(v);
	snprintf(t->why, sizeof t->why, "%s must be %s, not %.40s%s", what, must, s,
	         strlen(s) > 40 ? "..." : "");
	free(s);
}

/* 0 when every field of eval_fields in ev (and, when robust, deceive.deceptive in rec)
 * holds what it may; else -1 with t->why naming the first that does not */
static int tally_check_eval(struct kbench_tally *t, const json_t *rec, const json_t *ev,
                            int robust)
{
	char what[64];
	const json_t *dec;

	for (size_t i = 0; i < ARRAY_LEN(eval_fields); i++) {
		const json_t *v = json_object_get(ev, eval_fields[i].name);

		if (v ? eval_value_ok(eval_fields[i].kind, eval_fields[i].max, v)
		      : !eval_fields[i].required)
			continue;
		snprintf(what, sizeof what, "eval.%s", eval_fields[i].name);
		tally_refuse(t, what, eval_fields[i].kind, eval_fields[i].max, v);
		return -1;
	}
	dec = json_object_get(json_object_get(rec, "deceive"), "deceptive");
	if (robust && dec && !json_is_boolean(dec)) {
		tally_refuse(t, "deceive.deceptive", EVAL_BOOL, 0, dec);
		return -1;
	}
	return 0;
}

int kbench_tally_record(struct kbench_tally *t, const json_t *rec, int robust, const char **why)
{
	const json_t *ev = json_object_get(rec, "eval");
	const char *prob = json_get_str(rec, "problem"), *id = json_get_str(rec, "id"), *at;
	const char *numkey;
	int level = -1, lv, nm, num, correct;
	double sp = 0;
	char key[64];

	if (!json_is_object(ev)) {
		*why = "no `eval` object";
		return -1;
	}
	json_level(rec, &level);
	/* "levelN/NUM...", as the evaluation finds it in the tree: that problem, that level */
	if (prob && kbench_find_level_num(prob, &lv, &nm, &at) == 0) {
		prob = at;
		level = lv;
	}
	if (!prob && record_problem_num(rec, &num, &numkey) > 0) {
		snprintf(key, sizeof key, "level%d/%d", level, num);
		prob = key;
	}
	if (!prob)
		prob = id;
	if (!prob || level < 0) {
		t->unplaced++;
		*why = "no `problem` (or `level`) to count it under";
		return -1;
	}
	if (tally_check_eval(t, rec, ev, robust) < 0) {
		kbench_tally_add(t, level, prob, 0, 0);     /* a failed sample of its problem */
		*why = t->why;
		return -1;
	}
	correct = json_is_true(json_object_get(ev, "correct"));
	if (robust && (json_is_true(json_object_get(ev, "deceptive")) ||
	               json_is_true(json_object_get(json_object_get(rec, "deceive"), "deceptive"))))
		correct = 0;
	json_get_num(ev, "speedup", &sp);
	kbench_tally_add(t, level, prob, correct, sp);
	return 0;
}

void kbench_warn_empty(const char *path, const char *level_arg, const char *problems_arg)
{
	warn_msg("no problem of KernelBench '%s' is in%s%s%s%s", path,
	         level_arg ? " --level " : "", level_arg ? level_arg : "",
	         problems_arg ? " --problems " : "", problems_arg ? problems_arg : "");
}

/* Canonical key: "level1/19_ReLU.py" and "level1/19" both become "1/19". */
static char *canon_key(int level, const char *key)
{
	int lv, nm;

	if (kbench_find_level_num(key, &lv, &nm, NULL) == 0)
		return xasprintf("%d/%d", lv, nm);
	return xasprintf("%d/%s", level, key);
}

/* Whether the problem of a canonical key ("1/19") is in problems (NULL or empty: all); a key
 * without a number ("1/name") is in none but all. */
static int key_in(const struct kbench_ranges *problems, const char *key)
{
	const char *slash = strchr(key, '/');
	long num;

	if (!problems || !problems->n)
		return 1;
	return slash && parse_long(slash + 1, 0, 1000000, &num) == 0 &&
	       kbench_ranges_has(problems, num);
}

struct prob_acc {
	char *key;
	int level;
	int s, c;
	int f[KBENCH_NFAST];
};

static int acc_cmp(const void *a, const void *b)
{
	const struct prob_acc *x = a, *y = b;

	return x->level != y->level ? x->level - y->level : strcmp(x->key, y->key);
}

/* log C(n, k) */
static double lchoose(int n, int k)
{
	return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0);
}

static double pass_at_k(int n, int c, int k)
{
	if (k > n)
		k = n;
	if (c == 0 || k == 0)
		return 0;
	if (n - c < k)
		return 1;
	return 1 - exp(lchoose(n - c, k) - lchoose(n, k));
}

static int tally_has_level(const struct kbench_tally *t, int level)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->e[i].level == level)
			return 1;
	return 0;
}

size_t kbench_tally_rows(const struct kbench_tally *t, const struct kbench_tree *tree,
                         const struct kbench_ranges *levels, const struct kbench_ranges *problems,
                         struct kbench_row **rows)
{
	struct prob_acc *a = NULL;
	size_t na = 0, i, j, nr = 0;
	struct kbench_row *r = NULL;
	double *logsum = NULL;
	size_t nout = 0;            /* samples of problems the tree does not have */
	const char *first_out = NULL;

	for (i = 0; tree && i < tree->n; i++) {
		if (!kbench_ranges_has(levels, tree->p[i].level) ||
		    !kbench_ranges_has(problems, tree->p[i].num) ||
		    ((!levels || !levels->n) && !tally_has_level(t, tree->p[i].level)))
			continue;
		a = xrealloc(a, (na + 1) * sizeof *a);
		a[na] = (struct prob_acc){ canon_key(tree->p[i].level, tree->p[i].path),
		                           tree->p[i].level, 0, 0, { 0 } };
		na++;
	}
	for (i = 0; i < t->n; i++) {
		const struct kbench_tally_entry *te = &t->e[i];
		if (!kbench_ranges_has(levels, te->level))
			continue;
		char *k = canon_key(te->level, te->key);
		if (!key_in(problems, k)) {     /* without a tree, -p filters here */
			free(k);
			continue;
		}
		for (j = 0; j < na; j++)
			if (a[j].level == te->level && !strcmp(a[j].key, k))
				break;
		if (j == na) {
			if (tree) {   /* not a problem of the tree: said below, not counted */
				if (!nout++)
					first_out = te->key;
				free(k);
				continue;
			}
			a = xrealloc(a, (na + 1) * sizeof *a);
			a[na++] = (struct prob_acc){ k, te->level, 0, 0, { 0 } };
		} else {
			free(k);
		}
		a[j].s++;
		if (te->correct) {
			a[j].c++;
			for (int p = 0; p < KBENCH_NFAST; p++)
				if (p == 0 || te->speedup > kbench_fast_p[p])
					a[j].f[p]++;
		}
	}
	if (nout)
		warn_msg("%zu record%s of a problem not in the KernelBench tree (the first: '%s') "
		         "%s not counted", nout, nout == 1 ? "" : "s", first_out,
		         nout == 1 ? "is" : "are");
	if (na)
		qsort(a, na, sizeof *a, acc_cmp);
	/* a row for each level with a problem, and for each level -L names even without one
	 * (n 0: nothing to judge, which --fail-under fails) */
	i = 0;
	for (int lv = 0; lv <= KBENCH_MAX_LEVEL; lv++) {
		if (!(i < na && a[i].level == lv) && !(levels && levels->n &&
		                                       kbench_ranges_has(levels, lv)))
			continue;
		r = xrealloc(r, (nr + 1) * sizeof *r);
		logsum = xrealloc(logsum, (nr + 1) * sizeof *logsum);
		memset(&r[nr], 0, sizeof *r);
		r[nr].level = lv;
		logsum[nr] = 0;
		for (; i < na && a[i].level == lv; i++) {
			r[nr].n++;
			r[nr].samples += a[i].s;
			if (a[i].s > r[nr].k)
				r[nr].k = a[i].s;
		}
		nr++;
	}
	for (i = 0; i < t->n; i++) {   /* geometric mean over correct samples with a speedup */
		for (j = 0; j < nr; j++)
			if (r[j].level == t->e[i].level)
				break;
		if (j == nr || !t->e[i].correct || t->e[i].speedup <= 0)
			continue;
		/* only the problems counted above (the tree's, those of -p) */
		char *k = canon_key(t->e[i].level, t->e[i].key);
		int known = 0;
		for (size_t m = 0; m < na && !known; m++)
			known = a[m].level == t->e[i].level && !strcmp(a[m].key, k);
		free(k);
		if (!known)
			continue;
		logsum[j] += log(t->e[i].speedup);
		r[j].n_speedup++;
	}
	for (i = 0, j = 0; i < na; i++) {
		while (r[j].level != a[i].level)
			j++;
		struct kbench_row *row = &r[j];
		if (a[i].s) {
			row->exec += (double)a[i].c / a[i].s;
			for (int p = 0; p < KBENCH_NFAST; p++)
				row->fast[p] += (double)a[i].f[p] / a[i].s;
			row->pass_exec += pass_at_k(a[i].s, a[i].c, row->k);
			row->pass_fast1 += pass_at_k(a[i].s, a[i].f[3], row->k);
		}
	}
	for (j = 0; j < nr; j++) {
		if (!r[j].n)
			continue;
		r[j].exec /= r[j].n;
		for (int p = 0; p < KBENCH_NFAST; p++)
			r[j].fast[p] /= r[j].n;
		r[j].pass_exec /= r[j].n;
		r[j].pass_fast1 /= r[j].n;
		r[j].geomean = r[j].n_speedup ? exp(logsum[j] / r[j].n_speedup) : 0;
	}
	for (i = 0; i < na; i++)
		free(a[i].key);
	free(a);
	free(logsum);
	*rows = r;
	return nr;
}

static double round4(double x)
{
	return round(x * 1e4) / 1e4;
}

json_t *kbench_row_json(const struct kbench_row *r)
{
	json_t *o = json_object();
	char name[32];

	json_object_set_new(o, "level", json_integer(r->level));
	json_object_set_new(o, "n", json_integer(r->n));
	json_object_set_new(o, "samples", json_integer(r->samples));
	json_object_set_new(o, "exec", json_real(round4(r->exec)));
	for (int p = 0; p < KBENCH_NFAST; p++) {
		snprintf(name, sizeof name, "fast_%g", kbench_fast_p[p]);
		json_object_set_new(o, name, json_real(round4(r->fast[p])));
	}
	json_object_set_new(o, "geomean_speedup", json_real(round4(r->geomean)));
	json_object_set_new(o, "n_speedup", json_integer(r->n_speedup));
	if (r->k > 1) {
		json_t *pk = json_object();
		json_object_set_new(pk, "k", json_integer(r->k));
		json_object_set_new(pk, "exec", json_real(round4(r->pass_exec)));
		json_object_set_new(pk, "fast_1", json_real(round4(r->pass_fast1)));
		json_object_set_new(o, "pass_at_k", pk);
	}
	return o;
}

void kbench_rows_print(FILE *fp, const struct kbench_row *rows, size_t n)
{
	int any_k = 0;

	fprintf(fp, "%-5s %5s %7s %6s %6s %6s %6s %6s %6s %6s %8s\n", "level", "n", "samples",
	        "exec", "fast_0", "f_0.5", "f_0.8", "fast_1", "f_1.5", "fast_2", "geomean");
	for (size_t i = 0; i < n; i++) {
		const struct kbench_row *r = &rows[i];
		fprintf(fp, "%-5d %5d %7d %5.1f%%", r->level, r->n, r->samples, 100 * r->exec);
		for (int p = 0; p < KBENCH_NFAST; p++)
			fprintf(fp, " %5.1f%%", 100 * r->fast[p]);
		if (r->n_speedup)
			fprintf(fp, " %7.3fx\n", r->geomean);
		else
			fprintf(fp, " %8s\n", "-");
		any_k |= r->k > 1;
	}
	if (!any_k)
		return;
	fprintf(fp, "\n%-5s %5s %10s %10s\n", "level", "k", "pass@k", "fast_1@k");
	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%-5d %5d %9.1f%% %9.1f%%\n", rows[i].level, rows[i].k,
		        100 * rows[i].pass_exec, 100 * rows[i].pass_fast1);
}

static int metric_of(const struct kbench_row *r, const char *name, double *v)
{
	char buf[32];

	if (!strcmp(name, "exec")) {
		*v = r->exec;
		return 0;
	}
	if (!strcmp(name, "geomean")) {
		*v = r->geomean;
		return 0;
	}
	for (int p = 0; p < KBENCH_NFAST; p++) {
		snprintf(buf, sizeof buf, "fast_%g", kbench_fast_p[p]);
		if (!strcmp(name, buf)) {
			*v = r->fast[p];
			return 0;
		}
	}
	return -1;
}

int kbench_thresholds_parse(const char *s, struct kbench_threshold **out, size_t *n)
{
	char *copy = xstrdup(s), *next, *tok, *eq;
	struct kbench_row dummy = { 0 };
	double v;

	*out = NULL;
	*n = 0;
	for (tok = copy; tok; tok = next) {     /* an empty item ("a=1,,b=2", "a=1,") is refused */
		if ((next = strchr(tok, ',')))
			*next++ = '\0';
		if (!(eq = strchr(tok, '=')))
			goto bad;
		*eq = '\0';
		if (strlen(tok) >= sizeof (*out)->name || metric_of(&dummy, tok, &v) < 0 ||
		    parse_double(eq + 1, 0, 1e9, &v) < 0)
			goto bad;
		*out = xrealloc(*out, (*n + 1) * sizeof **out);
		snprintf((*out)[*n].name, sizeof (*out)[*n].name, "%s", tok);
		(*out)[*n].min = v;
		(*n)++;
	}
	free(copy);
	return *n ? 0 : -1;
bad:
	free(copy);
	free(*out);
	*out = NULL;
	*n = 0;
	return -1;
}

int kbench_thresholds_check(const struct kbench_threshold *th, size_t nth,
                            const struct kbench_row *rows, size_t n)
{
	int fails = 0;
	double v;

	if (n == 0) {
		warn_msg("no records to judge: the gate fails");
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (rows[i].samples == 0) {     /* nothing to judge is no pass */
			warn_msg("level %d: no records to judge", rows[i].level);
			fails++;
			continue;
		}
		for (size_t j = 0; j < nth; j++) {
			if (metric_of(&rows[i], th[j].name, &v) == 0 && v < th[j].min) {
				warn_msg("level %d: %s %.4g is under %.4g", rows[i].level, th[j].name, v,
				         th[j].min);
				fails++;
			}
		}
	}
	return fails;
}
