/* rl_run: the dice-rl step: rollouts with the sampler, rewards from a reward program over
 * JSONL, group advantages, TraceRL samples, pi_old, and AdamW updates (lib/rl_run.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rl_run.h"
#include "sft.h"
#include "sft_train.h"
#include "checkpoint.h"
#include "jsonl.h"
#include "pool.h"
#include "sampler_fit.h"
#include "util.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------- tasks */

int rl_task_level(const json_t *rec, int *level)
{
	const json_t *v = json_get_set(rec, "level");       /* null: absent */
	const json_t *c = json_object_get(rec, "cuke");

	*level = INT_MAX;
	if (!v && json_is_object(c))
		v = json_get_set(c, "level");
	if (!v)
		return 1;
	/* 2, 2.0 as a float-minded writer puts it, "2", "level2" as KernelBench's folders */
	return json_level_value(v, INT_MIN, INT_MAX - 1, level) == 0 ? 0 : -1;
}

void rl_tasks_add(struct rl_tasks *ts, json_t *rec, const char *line, size_t len,
                  const char *where)
{
	char *copy = NULL;

	if (ts->n == ts->cap) {
		ts->cap = ts->cap ? 2 * ts->cap : 64;
		ts->t = xrealloc(ts->t, ts->cap * sizeof *ts->t);
	}
	int level;

	rl_task_level(rec, &level);
	if (line) {
		copy = xmalloc(len + 1);
		memcpy(copy, line, len);
		copy[len] = '\0';
	}
	ts->t[ts->n++] = (struct rl_task){ rec, copy, len, xstrdup(where), level, 0 };
}

static int cmp_level(const void *a, const void *b)
{
	const struct rl_task *x = a, *y = b;
	if (x->level != y->level)
		return x->level < y->level ? -1 : 1;
	return x->where < y->where ? -1 : x->where > y->where;   /* see below */
}

void rl_tasks_sort_level(struct rl_tasks *ts)
{
	/* stable: ties keep file order, carried by a temporary index in where's place */
	if (ts->n < 2)          /* no tasks: ts->t is NULL, which qsort must not be given */
		return;
	char **w = xmalloc(ts->n * sizeof *w);
	for (size_t i = 0; i < ts->n; i++) {
		w[i] = ts->t[i].where;
		ts->t[i].where = (char *)(uintptr_t)(i + 1);
	}
	qsort(ts->t, ts->n, sizeof *ts->t, cmp_level);
	for (size_t i = 0; i < ts->n; i++)
		ts->t[i].where = w[(uintptr_t)ts->t[i].where - 1];
	free(w);
}

void rl_tasks_free(struct rl_tasks *ts)
{
	for (size_t i = 0; i < ts->n; i++) {
		json_decref(ts->t[i].rec);
		free(ts->t[i].line);
		free(ts->t[i].where);
	}
	free(ts->t);
	memset(ts, 0, sizeof *ts);
}

int rl_task_infill(const json_t *rec)
{
	return !json_get_set(rec, "ref") ||
	       (json_is_string(json_object_get(rec, "prefix")) &&
	        json_is_string(json_object_get(rec, "suffix")));
}

const char *rl_task_infill_bad(const json_t *rec)
{
	const json_t *p = json_get_set(rec, "prefix"), *s = json_get_set(rec, "suffix");

	if (rl_task_infill(rec) || (!p && !s))
		return NULL;
	if (!s)
		return "prefix without suffix";
	if (!p)
		return "suffix without prefix";
	return json_is_string(p) ? "suffix is not a string" : "prefix is not a string";
}

/* ---------------------------------------------------------------- runner */

int rl_runner_init(struct rl_runner *r, struct model *m, int recompute)
{
	pool_subreaper();   /* orphans of the reward program come back to us, to be killed */
	r->m = m;
	return model_train_init(&r->t, m, recompute);
}

void rl_runner_free(struct rl_runner *r)
{
	model_train_free(&r->t);
}

/* prompt ids of a task for a stage: the end-to-end stage drops prefix/suffix */
static int task_prompt(struct rl_runner *r, const json_t *rec, int infill, int **ids, int *n,
                       char *err, size_t errlen)
{
	json_t *c = json_copy((json_t *)rec);
	int rc, save = r->sr->infill;

	if (json_is_array(json_object_get(c, "prompt_ids"))) {
		/* a pre-tokenised prompt is used as given */
		json_object_del(c, "ref");
		json_object_del(c, "prompt");
		json_object_del(c, "messages");
	}
	if (!infill) {
		json_object_del(c, "prefix");
		json_object_del(c, "suffix");
	}
	r->sr->infill = infill && json_get_set(c, "ref") != NULL;
	rc = sample_rec_prompt(r->sr, c, ids, n, err, errlen);
	r->sr->infill = save;
	if (rc == 0 && *n == 0) {       /* nothing to answer (dice-sample takes it: a free run) */
		snprintf(err, errlen, "%s", json_is_array(json_object_get(c, "prompt_ids")) ?
		         "prompt_ids is empty" : "the prompt is empty");
		free(*ids);
		*ids = NULL;
		rc = -1;
	}
	json_decref(c);
	return rc;
}

int rl_task_prompt_len(struct rl_runner *r, const json_t *rec, int infill, char *err,
                       size_t errlen)
{
	int *ids, n;
	if (task_prompt(r, rec, infill, &ids, &n, err, errlen) < 0)
		return -1;
	free(ids);
	return n;
}

/* The reward of one output record: its number "reward", else eval.correct. 0, or -1 (reward
 * 0) with what is wrong in *why when the record carries neither. */
static int record_reward(const json_t *out, int robust, float *reward, int *deceptive,
                         const char **why)
{
	const json_t *rw = json_object_get(out, "reward");
	const json_t *ev = json_object_get(out, "eval"), *dc = json_object_get(out, "deceive");
	int dec = json_is_true(json_object_get(ev, "deceptive")) ||
	          json_is_true(json_object_get(dc, "deceptive"));

	*deceptive = dec;
	if (json_is_number(rw))
		*reward = (float)json_number_value(rw);
	else
		*reward = json_is_true(json_object_get(ev, "correct")) ? 1.0f : 0.0f;
	if (robust && dec)
		*reward = 0.0f;
	if (json_is_number(rw) || (!rw && json_is_object(ev)))
		return 0;
	*why = rw ? "reward is not a number" : ev ? "eval is not an object" :
	       "no reward and no eval object";
	*reward = 0.0f;
	return -1;
}

/* ---------------------------------------------------------------- reward coprocess
 *
 * `sh -c CMD` with a pipe on each side. A writer thread feeds it the queued records (the
 * rollout's progress callback queues a task's group as soon as it has finished decoding, so
 * the decoding never waits on a full pipe), a reader thread collects its output lines (so the
 * program never waits on us either). The records go in the order of the tasks whatever the
 * order the requests finish in: the program sees the same input as after a whole rollout.
 * Our ends of the pipes do not block: each thread waits in poll on its pipe and on a wake
 * pipe, so that co_finish can end them when a process other than the program holds the
 * pipes (see co_finish). */

struct coproc {
	pid_t pid;
	int in_fd, out_fd;
	int wake[2];                 /* written to when co_finish gives up on the pipes */
	pid_t *keep;                 /* our children before the program started: not swept */
	int nkeep;
	pthread_t wt, rt;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char **q;                    /* queued lines (with '\n'), q[qhead..qn) not yet written */
	size_t qn, qhead, qcap;
	int closing;                 /* no more lines: close the program's input when drained */
	int wfailed;                 /* the program stopped reading (EPIPE), or given up on */
	char **out;                  /* output lines, in order */
	size_t nout, ocap;
	size_t limit;                /* records it is given: reading stops at one more */
	int rdone, wdone;            /* the reader, the writer has finished */
	int killed;                  /* its group sent SIGTERM (1), then SIGKILL (2) */
	int timedout;                /* killed for the time limit, not on a stop */
	int held;                    /* it had exited, its output (1) or input (2) still open */
	double t_kill;               /* when SIGTERM was sent */
	pthread_cond_t rcv;          /* rdone or wdone set */
	double t_first, t_last;      /* first line queued, last output line read */
};

/* Bytes of output still read once co_finish has given up on the pipes: what is there, not
 * what a process that goes on writing would add forever. */
#define CO_DRAIN (1 << 20)

/* Wait until fd is ready for events, at its end or in error (the read or write that follows
 * says which): 1; 0 once co_finish has given up on the pipes (or poll fails). */
static int co_wait(struct coproc *c, int fd, short events)
{
	struct pollfd p[2] = { { .fd = fd, .events = events },
	                       { .fd = c->wake[0], .events = POLLIN } };

	for (;;) {
		int r = poll(p, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || p[1].revents)
			return 0;
		if (p[0].revents)
			return 1;
	}
}

static void *co_writer(void *arg)
{
	struct coproc *c = arg;
	sigset_t ss;

	/* a program that stops reading gives EPIPE here, not a SIGPIPE to the process */
	sigemptyset(&ss);
	sigaddset(&ss, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &ss, NULL);
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (c->qhead == c->qn && !c->closing)
			pthread_cond_wait(&c->cv, &c->mu);
		if (c->qhead == c->qn)
			break;
		char *line = c->q[c->qhead];
		c->q[c->qhead++] = NULL;
		int skip = c->wfailed;
		pthread_mutex_unlock(&c->mu);
		for (size_t len = strlen(line), off = 0; !skip && off < len; ) {
			ssize_t w = write(c->in_fd, line + off, len - off);
			if (w > 0)
				off += (size_t)w;
			else if (w < 0 && errno == EINTR)
				continue;
			else if (!(w < 0 && errno == EAGAIN && co_wait(c, c->in_fd, POLLOUT)))
				skip = 1;       /* it stopped reading, or we gave up on it */
		}
		free(line);
		pthread_mutex_lock(&c->mu);
		c->wfailed |= skip;
	}
	close(c->in_fd);
	c->in_fd = -1;
	c->wdone = 1;
	pthread_cond_signal(&c->rcv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Move the complete lines of b (with last, the rest of it too: the end of the output) to
 * c->out, each with its '\n'. 1 once there is one line more than the limit: the output is
 * wrong already, and no more of it is kept (it may be endless). */
static int co_lines(struct coproc *c, struct buf *b, int last)
{
	size_t at = 0;
	int over = 0;
	double t = now();

	pthread_mutex_lock(&c->mu);
	while (!over && at < b->len) {
		char *nl = memchr(b->p + at, '\n', b->len - at);
		size_t end = nl ? (size_t)(nl - b->p) + 1 : b->len;
		if (!nl && !last)
			break;
		if (c->nout == c->ocap) {
			c->ocap = c->ocap ? 2 * c->ocap : 256;
			c->out = xrealloc(c->out, c->ocap * sizeof *c->out);
		}
		c->out[c->nout++] = xstrndup(b->p + at, end - at);
		c->t_last = t;
		over = c->nout > c->limit;
		at = end;
	}
	pthread_mutex_unlock(&c->mu);
	memmove(b->p, b->p + at, b->len - at);
	b->len -= at;
	b->p[b->len] = '\0';
	return over;
}

static void *co_reader(void *arg)
{
	struct coproc *c = arg;
	struct buf b;
	char chunk[65536];
	size_t left = CO_DRAIN;
	int woken = 0, over = 0;

	buf_init(&b);
	while (!over) {
		ssize_t n = read(c->out_fd, chunk, sizeof chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && !woken) {
			woken = !co_wait(c, c->out_fd, POLLIN);
			continue;
		}
		if (n <= 0)     /* its end, an error, or nothing more there once given up on */
			break;
		buf_add(&b, chunk, (size_t)n);
		if (memchr(chunk, '\n', (size_t)n))   /* a long line is not scanned again and again */
			over = co_lines(c, &b, 0);
		if (woken && (left = left > (size_t)n ? left - (size_t)n : 0) == 0)
			break;
	}
	if (!over)
		co_lines(c, &b, 1);     /* a last line without its '\n' */
	buf_free(&b);
	close(c->out_fd);       /* a program that writes on meets a closed pipe */
	pthread_mutex_lock(&c->mu);
	c->rdone = 1;
	pthread_cond_signal(&c->rcv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static int co_start(struct coproc *c, const char *cmd, size_t limit)
{
	int in[2], out[2];
	posix_spawn_file_actions_t fa;
	char *argv[] = { "sh", "-c", (char *)cmd, NULL };
	extern char **environ;

	memset(c, 0, sizeof *c);
	c->in_fd = c->out_fd = c->wake[0] = c->wake[1] = -1;
	c->limit = limit;
	if (pipe2(c->wake, O_CLOEXEC) < 0)
		return warn_msg("cannot run the reward command:"), -1;
	if (pipe2(in, O_CLOEXEC) < 0)
		goto fail;
	if (pipe2(out, O_CLOEXEC) < 0) {
		close(in[0]), close(in[1]);
		goto fail;
	}
	c->keep = pool_children(&c->nkeep);
	fflush(NULL);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawnattr_t at;           /* a process group of its own: a stop ends all of it */
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
	posix_spawnattr_setpgroup(&at, 0);
	int e = posix_spawn(&c->pid, "/bin/sh", &fa, &at, argv, environ);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]), close(out[1]);
	if (e) {
		close(in[1]), close(out[0]);
		errno = e;
		goto fail;
	}
	c->in_fd = in[1], c->out_fd = out[0];
	fcntl(c->in_fd, F_SETFL, O_NONBLOCK);   /* ours only: the program's ends block */
	fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_cond_init(&c->rcv, NULL);
	if (pthread_create(&c->wt, NULL, co_writer, c) ||
	    pthread_create(&c->rt, NULL, co_reader, c))
		die("cannot start a thread");
	c->started = 1;
	return 0;
fail:
	warn_msg("cannot run the reward command:");
	close(c->wake[0]), close(c->wake[1]);
	return -1;
}

/* queue one record for the program: line, its text with the newline (taken) */
static void co_send(struct coproc *c, char *line)
{
	pthread_mutex_lock(&c->mu);
	if (c->qn == c->qcap) {
		c->qcap = c->qcap ? 2 * c->qcap : 256;
		c->q = xrealloc(c->q, c->qcap * sizeof *c->q);
	}
	if (!c->qn)
		c->t_first = now();
	c->q[c->qn++] = line;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* After the program has exited: what it left behind is killed, its process group (while the
 * program, a zombie still when zombie, keeps the group's id from being reused) and the
 * descendants that left the group (setsid), which as orphans come back to us, a child
 * subreaper (rl_runner_init); the program is reaped (its wait status in *st) and they are. Our
 * children from before it started are left alone. */
static void co_reap(struct coproc *c, int zombie, int *st)
{
	if (zombie) {
		kill(-c->pid, SIGKILL);
		while (waitpid(c->pid, st, 0) < 0 && errno == EINTR)
			;
	}
	pool_sweep(c->keep, c->nkeep);
}

/* Close the program's input, read the rest of its output, reap it: its wait status. Its
 * group is sent SIGTERM, then SIGKILL CO_GRACE seconds later (one that ignores SIGTERM),
 * rather than waited for, once *stop is set (a signal) or limit seconds (0: none) have
 * passed since this call, that is since its last record was handed to it: a program that
 * hangs would hold the run. The wait is for its output to end, its input to be written or
 * refused and the program to exit, so that one which closes its output and lingers is
 * timed too; its exit is looked at every 10 ms once the pipes are done. Once it has exited,
 * its pipes are waited for CO_GRACE seconds more, no longer: a process it started that left
 * its group (setsid), or any other, may hold them open for ever. Then
 * (c->held) what it left behind is killed (co_reap), the output already in the pipe is read
 * (CO_DRAIN bytes at most), and the threads stop waiting on the pipes, whoever holds them.
 * Whatever it left behind is killed when it has exited in any case. */
#define CO_GRACE 5.0
static int co_finish(struct coproc *c, volatile sig_atomic_t *stop, double limit)
{
	int st = -1, exited = 0, zombie = 0;
	double t0 = now(), t_exit = 0;

	if (!c->started)
		return -1;
	pthread_mutex_lock(&c->mu);
	c->closing = 1;
	pthread_cond_signal(&c->cv);
	for (;;) {
		struct timespec ts;
		double t = now();
		if (!exited) {  /* seen, not reaped (co_reap does): its pid stays its group's */
			siginfo_t si;
			si.si_pid = 0;
			int e = waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT);
			if (e == 0 && si.si_pid == c->pid)
				exited = zombie = 1, t_exit = t;
			else if (e < 0 && errno != EINTR)  /* nothing to wait for */
				exited = 1, t_exit = t;
		}
		if (exited && c->rdone && c->wdone)
			break;
		if (exited) {
			if (!c->held && t - t_exit >= CO_GRACE) {
				c->held = c->rdone ? 2 : 1;
				pthread_mutex_unlock(&c->mu);
				co_reap(c, zombie, &st);
				zombie = 0;
				if (write(c->wake[1], "", 1) < 0) {
					/* cannot be: a pipe of one byte, never full */
				}
				pthread_mutex_lock(&c->mu);
			}
		} else if (!c->killed && ((stop && *stop) || (limit > 0 && t - t0 >= limit))) {
			c->timedout = !(stop && *stop);
			kill(-c->pid, SIGTERM);
			c->killed = 1, c->t_kill = t;
		} else if (c->killed == 1 && t - c->t_kill >= CO_GRACE) {
			kill(-c->pid, SIGKILL);
			c->killed = 2;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += c->rdone && c->wdone ? 10000000 : 100000000;
		if (ts.tv_nsec >= 1000000000)
			ts.tv_sec++, ts.tv_nsec -= 1000000000;
		pthread_cond_timedwait(&c->rcv, &c->mu, &ts);
	}
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->wt, NULL);
	pthread_join(c->rt, NULL);
	if (!c->held)
		co_reap(c, zombie, &st);
	close(c->wake[0]), close(c->wake[1]);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	pthread_cond_destroy(&c->rcv);
	c->started = 0;
	return st;
}

static void co_free(struct coproc *c)
{
	for (size_t i = 0; i < c->qn; i++)
		free(c->q[i]);
	for (size_t i = 0; i < c->nout; i++)
		free(c->out[i]);
	free(c->q), free(c->out), free(c->keep);
}

/* How the program ended, for a message: "exit status N" or "killed by signal N". */
static const char *status_text(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	else
		snprintf(buf, len, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return buf;
}

/* The rewards (n) of the program's output lines; the compile and run seconds kbench-eval
 * records (eval.build_s, eval.run_s) summed. 0, or -1 with a warning. A program killed for
 * the time limit, or one whose pipes another process held open after it exited, fails the
 * step unless it had written every record. */
static int co_rewards(struct rl_runner *r, struct coproc *c, int n, int status, int step,
                      float *rewards, struct rl_metrics *mt)
{
	int got = 0, nbad = 0, first = 0;
	char why[200] = "", how[40];

	if (c->killed && !c->timedout)  /* stopped by a signal: the step is undone, no more said */
		return -1;
	for (size_t i = 0; i < c->nout && got < n; i++) {
		json_error_t je;
		json_t *o = json_loads(c->out[i], 0, &je);
		const char *w = NULL;
		int dec = 0;
		if (!o || !json_is_object(o))
			rewards[got] = 0.0f, w = o ? "not an object" : je.text;
		else if (record_reward(o, r->robust, &rewards[got], &dec, &w) == 0)
			w = NULL;
		if (w && !nbad++) {
			first = got + 1;
			snprintf(why, sizeof why, "%s", w);
		}
		mt->deceptive += dec;
		const json_t *ev = json_object_get(o, "eval");
		const json_t *bs = json_object_get(ev, "build_s"), *rs = json_object_get(ev, "run_s");
		if (json_is_number(bs))
			mt->t_compile += json_number_value(bs);
		if (json_is_number(rs))
			mt->t_execute += json_number_value(rs);
		got++;
		json_decref(o);
	}
	if ((int)c->nout > n) {
		warn_msg("reward command '%s' wrote more than the %d records it was given (%s)",
		         r->reward_cmd, n, status_text(status, how, sizeof how));
		return -1;
	}
	if ((int)c->nout < n && c->timedout) {
		warn_msg("reward command '%s' timed out %g s after its last record, with %d of %d "
		         "records (step %d)\nhint: raise --reward-timeout (0: no limit)", r->reward_cmd,
		         r->reward_timeout, (int)c->nout, n, step);
		return -1;
	}
	if ((int)c->nout < n && c->held) {
		warn_msg("reward command '%s' exited (%s) with %d of %d records, but its %s was held "
		         "open by another process (step %d)", r->reward_cmd,
		         status_text(status, how, sizeof how), (int)c->nout, n,
		         c->held == 1 ? "output" : "input", step);
		return -1;
	}
	if ((int)c->nout < n) {
		warn_msg("reward command '%s' wrote %d records for %d (%s)", r->reward_cmd,
		         (int)c->nout, n, status_text(status, how, sizeof how));
		return -1;
	}
	if (nbad) {          /* one line a step: how many, and what the first one lacks */
		warn_msg("reward command '%s': %d of %d records bad, rewarded 0 (output line %d: %s)",
		         r->reward_cmd, nbad, n, first, why);
		mt->bad += nbad;
	}
	if (c->timedout) {     /* its records are all there: they count */
		warn_msg("reward command '%s' had not ended %g s after its last record: killed "
		         "after its %d records (step %d)", r->reward_cmd, r->reward_timeout, n, step);
		mt->bad++;
	} else if (c->held) {  /* a flaw of the program, not of its records: they count */
		warn_msg("reward command '%s' exited after its %d records, but its %s was held open "
		         "by another process: not waited for (step %d)", r->reward_cmd, n,
		         c->held == 1 ? "output" : "input", step);
	}
	if (!c->timedout && (!WIFEXITED(status) || WEXITSTATUS(status))) {
		if (WIFEXITED(status))
			warn_msg("reward command '%s' exited with status %d after its %d records",
			         r->reward_cmd, WEXITSTATUS(status), n);
		else
			warn_msg("reward command '%s' was killed by signal %d after its %d records",
			         r->reward_cmd, WIFSIGNALED(status) ? WTERMSIG(status) : 0, n);
		mt->bad++;
	}
	return 0;
}

/* the reward record of response k, a line with its newline (new string): the task line's
 * bytes plus what was sampled */
static char *response_record(struct rl_runner *r, const struct sampler_opts *o,
                             struct rl_task *const *tasks, int group, int step, int k,
                             const struct sampler_result *res)
{
	const struct rl_task *t = tasks[k / group];
	json_t *ids = json_array();
	char *text = sample_rec_text(r->sr, res->ids, res->n, o->mask_id);
	struct jsonl_field f[4];
	struct buf b;

	for (int j = 0; j < res->n; j++)
		json_array_append_new(ids, json_integer(res->ids[j]));
	/* completion and kernel this response's: a task's kernel (a data set's solution, which
	 * infilling tasks carry) would be what kbench-eval scores */
	sample_rec_text_fields(text ? text : "", f);
	f[2] = (struct jsonl_field){ "response_ids", ids };
	f[3] = (struct jsonl_field){ "rl", json_pack("{s:i, s:i, s:i}", "step", step, "task",
	                                             k / group, "sample", k % group) };
	buf_init(&b);
	jsonl_splice(&b, t->line, t->len, t->rec, f, 4);
	buf_addc(&b, '\n');
	for (int i = 0; i < 4; i++)
		json_decref(f[i].val);
	free(text);
	char *line = buf_detach(&b, NULL);
	buf_free(&b);                   /* buf_detach re-inits b */
	return line;
}

struct feed {
	struct rl_runner *r;
	const struct sampler_opts *o;
	struct rl_task *const *tasks;
	int ntask, group, step;
	struct sampler_result *res;  /* calloc'ed: ids stays NULL until a request is finished */
	struct coproc *c;
	int next;                    /* first task whose group has not been sent */
	long tokens;
};

/* Send every group, in task order, whose requests have all finished. This leans on
 * lib/sampler's contract, which lib/sampler_fit's split runs keep: a result's ids are set
 * (non-NULL) only when its request has finished, before the progress callback for it;
 * tests/dice-rl/011-overlap compares the records with those written after the whole
 * rollout, tests/dice-rl/031-mem-split those of a split rollout with an unsplit one's. */
static void feed_groups(struct feed *f, int all)
{
	for (; f->next < f->ntask; f->next++) {
		int k0 = f->next * f->group;
		for (int g = 0; !all && g < f->group; g++)
			if (!f->res[k0 + g].ids)
				return;
		for (int g = 0; g < f->group; g++) {
			co_send(f->c, response_record(f->r, f->o, f->tasks, f->group, f->step, k0 + g,
			                              &f->res[k0 + g]));
			f->tokens += f->res[k0 + g].n;
		}
	}
}

static void on_finished(void *arg, int done, int total)
{
	(void)done, (void)total;
	feed_groups(arg, 0);
}

int rl_rollout(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
               int ntask, int group, int stage_infill, int step, float *rewards,
               struct sampler_result *res, int **prompts, int *plens, struct rl_metrics *mt)
{
	int n = ntask * group, rc = 0, st;
	struct sampler_request *rq = xcalloc((size_t)(n ? n : 1), sizeof *rq);
	struct coproc c = { .started = 0 };
	struct feed f = { r, o, tasks, ntask, group, step, res, &c, 0, 0 };
	char err[512];
	double t0 = now(), t1;
	size_t limit;

	for (int i = 0; i < ntask; i++) {
		int *ids, np;
		if (task_prompt(r, tasks[i]->rec, stage_infill, &ids, &np, err, sizeof err) < 0) {
			warn_msg("%s: %s", tasks[i]->where, err);
			rc = -1;
			ids = xcalloc(1, sizeof *ids), np = 0;
		}
		for (int g = 0; g < group; g++) {
			int k = i * group + g;
			prompts[k] = g ? prompts[i * group] : ids;
			plens[k] = np;
			rq[k] = (struct sampler_request){ ids, np, rng_u64(&r->rng) };
		}
	}
	for (int k = 0; k < n; k++)
		res[k].ids = NULL;
	/* the KV caches' limit read now: the training's buffers may have grown since the last
	 * rollout */
	if (rc == 0 && sampler_mem_limit(r->m, &limit, err, sizeof err) < 0) {
		warn_msg("%s", err);
		rc = -1;
	}
	/* overlapped: the program starts now and gets each group as soon as it is decoded */
	if (rc == 0 && r->overlap && co_start(&c, r->reward_cmd, (size_t)n) < 0)
		rc = -1;
	if (rc == 0 && sampler_run_fit(r->m, o, rq, n, res, limit, &r->mem_warned,
	                               r->overlap ? on_finished : NULL, &f) < 0) {
		warn_msg("the model failed during the rollout");
		rc = -1;
	}
	t1 = now();
	mt->t_rollout = t1 - t0;
	if (rc == 0 && !r->overlap && co_start(&c, r->reward_cmd, (size_t)n) < 0)
		rc = -1;
	if (rc == 0)
		feed_groups(&f, 1);
	st = co_finish(&c, r->stop, r->reward_timeout);
	if (rc == 0) {
		double t2 = now();
		mt->tokens += f.tokens;
		rc = co_rewards(r, &c, n, st, step, rewards, mt);
		if (!c.qn)
			c.t_first = t1;
		if (!c.nout)
			c.t_last = t2;
		mt->t_reward = c.t_last - c.t_first;
		mt->t_reward_wait = t2 - t1;
		mt->t_overlap = c.t_first < t1 ? (c.t_last < t1 ? c.t_last : t1) - c.t_first : 0.0;
	}
	co_free(&c);
	free(rq);
	return rc;
}

int rl_evaluate(struct rl_runner *r, const struct sampler_opts *o, struct rl_task *const *tasks,
                int ntask, int stage_infill, int step, double *exec)
{
	struct rl_metrics mt = { 0 };
	float *rw = xcalloc((size_t)(ntask ? ntask : 1), sizeof *rw);
	struct sampler_result *res = xcalloc((size_t)(ntask ? ntask : 1), sizeof *res);
	int **pr = xcalloc((size_t)(ntask ? ntask : 1), sizeof *pr);
	int *pl = xcalloc((size_t)(ntask ? ntask : 1), sizeof *pl);
	int rc = rl_rollout(r, o, tasks, ntask, 1, stage_infill, step, rw, res, pr, pl, &mt);
	double s = 0;

	for (int i = 0; i < ntask; i++) {
		s += rw[i];
		sampler_result_free(&res[i]);
		free(pr[i]);
	}
	/* a reward program that failed (gone, timed out, records missing): no Exec to give, not
	 * one of rewards it never wrote */
	*exec = rc < 0 ? NAN : ntask ? s / ntask : 0.0;
	free(rw), free(res), free(pr), free(pl);
	return rc < 0 || mt.bad ? -1 : 0;
}

static int dump_batch(struct rl_runner *r, const struct rl_batch *rb, const struct rl_loss_opts *lo)
{
	struct model *m = r->m;
	struct rl_stats st = { 0 };
	float eps = lo->eps, beta = lo->beta, scale = (float)lo->scale;
	char err[512];
	int N = rb->b.N, rc;
	size_t nw, nx = 0;
	struct model_weights w = m->w;
	struct ckpt_tensor *wl = checkpoint_tensor_list(&m->cfg, &w, &nw);
	char *host = xmalloc(m->wbytes), **names = xcalloc(nw ? nw : 1, sizeof *names);
	struct st_wtensor *x = xcalloc(nw + 6, sizeof *x);
	struct rl_loss_opts o = *lo;

	/* the weights the loss is taken with: the saved checkpoint has moved on by then */
	m->ops->to_host(host, m->wbuf, m->wbytes);
	x[nx++] = (struct st_wtensor){ .name = "adv", .dtype = DICE_F32, .ndim = 1, .shape = { N },
	                               .data = rb->adv };
	x[nx++] = (struct st_wtensor){ .name = "logp_old", .dtype = DICE_F32, .ndim = 1,
	                               .shape = { N }, .data = rb->logp_old };
	x[nx++] = (struct st_wtensor){ .name = "eps", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &eps };
	x[nx++] = (struct st_wtensor){ .name = "beta", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &beta };
	x[nx++] = (struct st_wtensor){ .name = "scale", .dtype = DICE_F32, .ndim = 1, .shape = { 1 },
	                               .data = &scale };
	if (rb->logp_ref)
		x[nx++] = (struct st_wtensor){ .name = "logp_ref", .dtype = DICE_F32, .ndim = 1,
		                               .shape = { N }, .data = rb->logp_ref };
	for (size_t i = 0; i < nw; i++) {
		names[i] = xasprintf("w.%s", wl[i].name);
		x[nx++] = (struct st_wtensor){ .name = names[i], .dtype = DICE_F32, .ndim = wl[i].ndim,
		                               .shape = { wl[i].shape[0], wl[i].shape[1] },
		                               .data = host + ((const char *)wl[i].ref->p -
		                                               (const char *)m->wbuf) };
	}
	o.scale = scale;                 /* the value written */
	model_train_zero_grad(&r->t);
	rc = rl_batch_loss(&r->t, rb, &o, 1, &st);
	if (rc == 0 && (rc = sft_batch_write(r->dump, "dice-rl-batch", &rb->b, &r->t, st.loss, x,
	                                     nx, err, sizeof err)) < 0)
		warn_msg("%s", err);
	model_train_zero_grad(&r->t);
	for (size_t i = 0; i < nw; i++)
		free(names[i]);
	free(names), free(x), free(host), free(wl);   /* w.layers is m->w.layers: read only */
	return rc;
}

int rl_step(struct rl_runner *r, struct rl_task *const *tasks, int ntask, int stage_infill,
            int step, struct rl_metrics *mt)
{
	int G = r->group, n = ntask * G, rc = 0;
	float *rw = xcalloc((size_t)n, sizeof *rw), *adv = xcalloc((size_t)n, sizeof *adv);
	uint8_t *keep = xcalloc((size_t)ntask, 1);
	struct sampler_result *res = xcalloc((size_t)n, sizeof *res);
	int **pr = xcalloc((size_t)n, sizeof *pr), *pl = xcalloc((size_t)n, sizeof *pl);
	struct rl_trace *tr = xcalloc((size_t)n, sizeof *tr);
	struct rl_item *items = NULL;
	size_t nitems = 0, cap = 0, *order = NULL;
	struct rl_batch *bs = NULL;
	int nb = 0, L1 = 1;
	double t0;

	double ts = now();

	memset(mt, 0, sizeof *mt);
	mt->tasks = ntask;
	mt->responses = n;
	if (rl_rollout(r, &r->so, tasks, ntask, G, stage_infill, step, rw, res, pr, pl, mt) < 0) {
		rc = -1;
		goto out;
	}
	for (int k = 0; k < n; k++)
		mt->reward += rw[k];
	mt->reward /= n ? n : 1;
	mt->skipped = rl_advantages(rw, ntask, G, adv, keep);

	/* samples of the kept tasks, shuffled */
	t0 = now();
	for (int k = 0; k < n; k++) {
		if (!keep[k / G])
			continue;
		tr[k] = (struct rl_trace){ pr[k], pl[k], res[k].ids, res[k].step, res[k].n, adv[k] };
		if (res[k].n > L1)
			L1 = res[k].n;
		for (int rd = 0, nr = rl_rounds(&tr[k], r->so.block); rd < nr; rd++) {
			if (nitems == cap) {
				cap = cap ? 2 * cap : 256;
				items = xrealloc(items, cap * sizeof *items);
			}
			items[nitems++] = (struct rl_item){ &tr[k], rd };
		}
	}
	order = xmalloc((nitems ? nitems : 1) * sizeof *order);
	sft_shuffle(order, nitems, &r->rng);
	struct rl_item *mb = xmalloc((size_t)(r->micro ? r->micro : 1) * sizeof *mb);
	nb = (int)((nitems + (size_t)r->micro - 1) / (size_t)r->micro);
	bs = xcalloc((size_t)(nb ? nb : 1), sizeof *bs);
	for (int b = 0; b < nb; b++) {
		int ns = 0;
		for (size_t i = (size_t)b * r->micro; i < nitems && ns < r->micro; i++)
			mb[ns++] = items[order[i]];
		rl_batch_build(&bs[b], mb, ns, r->so.block, r->so.mask_id, r->pad_id);
		/* pi_old: the weights before this step's first update */
		if (rl_batch_logp(&r->t, &bs[b], bs[b].logp_old) < 0)
			rc = -1;
		if (r->ref) {
			bs[b].logp_ref = xcalloc((size_t)(bs[b].b.N ? bs[b].b.N : 1), sizeof(float));
			if (rl_batch_logp(r->ref, &bs[b], bs[b].logp_ref) < 0)
				rc = -1;
		}
	}
	free(mb);
	mt->samples = (int)nitems;

	/* updates: fresh AdamW state every step */
	if (rc == 0 && nitems) {
		struct optim op;
		size_t np;
		struct optim_param *par = optim_model_params(&r->t, &np);
		struct rl_stats st = { 0 };
		int per = (r->update + r->micro - 1) / r->micro;    /* micro-batches per update */
		optim_init(&op, r->t.ops, &r->oo, par, np, r->t.gbuf, r->t.ngrad);
		for (int b0 = 0; b0 < nb && rc == 0; b0 += per) {
			int b1 = b0 + per < nb ? b0 + per : nb, nsamp = 0;
			for (int b = b0; b < b1; b++)
				nsamp += bs[b].b.nsamp;
			struct rl_loss_opts lo = r->lo;
			lo.scale = 1.0 / ((double)nsamp * L1);
			if (r->dump && b1 == nb && dump_batch(r, &bs[b0], &lo) < 0)
				rc = -1;
			model_train_zero_grad(&r->t);
			for (int b = b0; b < b1 && rc == 0; b++)
				if (rl_batch_loss(&r->t, &bs[b], &lo, 1, &st) < 0)
					rc = -1;
			if (rc == 0)
				mt->grad_norm = optim_step(&op, NULL);
			mt->updates++;
		}
		optim_free(&op);
		mt->loss = mt->updates ? st.loss / mt->updates : 0.0;
		mt->kl = st.targets ? st.kl / (double)st.targets : 0.0;
		mt->clipfrac = st.targets ? (double)st.clipped / (double)st.targets : 0.0;
	}
	mt->t_update = now() - t0;
	mt->t_step = now() - ts;
out:
	for (int b = 0; b < nb; b++)
		rl_batch_free(&bs[b]);
	for (int k = 0; k < n; k++) {
		sampler_result_free(&res[k]);
		if (k % G == 0)
			free(pr[k]);
	}
	free(bs), free(order), free(items), free(tr), free(pr), free(pl);
	free(rw), free(adv), free(keep), free(res);
	return rc;
}
