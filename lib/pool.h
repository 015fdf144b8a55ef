/* pool: sandboxed child processes for untrusted code (kbench-eval's workers).
 *
 * A child gets its own process group (pgid == pid), a private temporary directory (its cwd,
 * removed when it is finished), the environment the caller builds (nothing inherited),
 * resource limits (no core dumps, file size, address space, open files), a private network
 * namespace where the system allows an unprivileged one (and with it, where allowed, a PID
 * namespace and a file system read-only but for the temp dir and the caller's rw paths),
 * PR_SET_PDEATHSIG so it dies with us, and three pipes (TMPDIR and HOME point at the private
 * dir): fd 3 (requests, we write), fd 4 (replies, we read, line by line) and its
 * stdout+stderr (we read and keep a truncated copy: head and tail). stdin is /dev/null.
 *
 *     pool_init();                      once: we become a child subreaper
 *     struct pool_proc p;
 *     pool_spawn(&p, &opts);            -1 on failure (message printed)
 *     pool_poll(procs, n, ms);          read what is there, reap what exited
 *     pool_line(&p, &line) ...          complete lines from fd 4 (caller frees)
 *     pool_narrow(&p, root, keep);      only parts of a writable path left writable
 *     pool_send(&p, buf, len);          write a request and close fd 3
 *     pool_finish(&p);                  kill the group, reap, sweep orphans, remove the tmpdir
 *
 * Killing: SIGKILL to the whole process group; descendants that escaped it (setsid) are
 * re-parented to us (subreaper) and killed by pool_sweep. Deadlines are the caller's: compare
 * pool_now() with p.deadline and call pool_finish.
 */
#ifndef DICE_POOL_H
#define DICE_POOL_H

#include <sys/types.h>

#include "util.h"

struct pool_opts {
	char *const *argv;      /* argv[0] is a path (no PATH search) */
	char *const *env;       /* the child's whole environment, NULL-terminated */
	const char *tmp_root;   /* parent of the private temp dir ($TMPDIR or /tmp when NULL) */
	long nproc;             /* RLIMIT_NPROC (0: unchanged); no effect on root */
	long fsize_mb;          /* RLIMIT_FSIZE in MiB (0: unchanged) */
	long mem_mb;            /* RLIMIT_AS in MiB (0: unchanged) */
	int netns;              /* 1: try private user, network, PID and mount namespaces */
	const char *const *rw;  /* with netns, NULL-terminated, 63 at most: the paths, besides
	                         * the temp dir, left writable in a file system otherwise
	                         * read-only */
	size_t log_max;         /* bytes of output kept: half from the start, half from the end */
};

struct pool_proc {
	pid_t pid;              /* child pid and process group; 0 when none */
	int to_fd;              /* our end of the child's fd 3; -1 once closed */
	int from_fd;            /* our end of the child's fd 4; -1 at EOF */
	int log_fd;             /* our end of the child's stdout+stderr; -1 at EOF */
	int ctl_fd, ack_fd;     /* pool_narrow's requests and replies; -1 when closed */
	char *tmpdir;           /* private temporary directory (owned) */
	struct buf msg;         /* bytes from fd 4 not yet handed out as lines */
	struct buf head;        /* first log_max/2 bytes of output */
	char *tail;             /* ring of the last log_max/2 bytes (tail_cap bytes) */
	size_t tail_cap, tail_len, tail_pos;
	size_t log_total;       /* bytes of output seen */
	int exited;             /* 1 once reaped; status holds the wait status */
	int status;
	int netns;              /* 1 when the namespace was set up */
	double started;         /* pool_now() at spawn */
	double deadline;        /* the caller's; 0: none */
};

/* SIGPIPE ignored (a write to a gone worker is EPIPE), and pool_subreaper: 0, or -1 with a
 * warning. */
int pool_init(void);
/* This process becomes a child subreaper (PR_SET_CHILD_SUBREAPER): the orphans of its
 * children's descendants are re-parented to it, where pool_sweep finds them (and where,
 * once they exit, they must be reaped: pool_sweep does). 0, or -1 with a warning. */
int pool_subreaper(void);
double pool_now(void);                          /* CLOCK_MONOTONIC seconds */
int pool_spawn(struct pool_proc *p, const struct pool_opts *o);
/* Wait up to timeout_ms for output or exits of procs[0..n), read what is there, reap exited
 * children (ours and orphans). Returns 0, or -1 on a poll error. */
int pool_poll(struct pool_proc **procs, int n, int timeout_ms);
/* The same, and it also returns when fd (not read here; -1: none) is readable or at its end:
 * a caller that waits on its own input and its children at once. */
int pool_poll_fd(struct pool_proc **procs, int n, int fd, int timeout_ms);
/* Next complete line from fd 4 (without '\n'), new string in *line: 1; none yet: 0. */
int pool_line(struct pool_proc *p, char **line);
/* 1 when fd 4 is at EOF and the child has exited. */
int pool_done(const struct pool_proc *p);
/* Write a request to fd 3, then close it. 0, or -1 when the child is gone. */
int pool_send(struct pool_proc *p, const char *data, size_t len);
/* Before the child runs untrusted code: in its mount namespace, make root (one of the rw
 * paths) read-only but the paths in keep (NULL-terminated; existing paths under root), which
 * stay writable. Done by the namespace's init, which keeps its capabilities where the child
 * has none. 0 when done; 1 when the child has no namespace init (no PID or mount namespace:
 * nothing changed, root stays writable); -1 with errno on failure. */
int pool_narrow(struct pool_proc *p, const char *root, const char *const *keep);
/* Kill the group, reap the child, read the rest of its output, sweep orphans, remove the
 * temp dir, close the pipes. The captured output stays readable with pool_log. */
void pool_finish(struct pool_proc *p);
void pool_proc_free(struct pool_proc *p);       /* after pool_finish: the buffers */
/* The captured output (head, a "[... N bytes dropped ...]" line, tail), new string. */
char *pool_log(const struct pool_proc *p);
/* Kill children re-parented to us that are not in live[0..n) nor in their groups (and their
 * own process groups), and reap them; again until none is left. A child not in live is
 * reaped here: whoever waits for one of its own (waitpid(pid)) lists it in live. */
void pool_sweep(const pid_t *live, int n);
/* The pids of this process's children now (re-parented orphans included), a new array (NULL
 * when none) of *n: those a later pool_sweep is to leave alone. */
pid_t *pool_children(int *n);
/* "signal 11 (Segmentation fault)", "exit status 3": describes a wait status (static). */
const char *pool_status_str(int status);

#endif
