/* pool: fork/exec of sandboxed children with pipes, process groups, limits and a private
 * temp dir; output capture with head/tail truncation; orphan sweeping. See pool.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

int pool_subreaper(void)
{
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		warn_msg("cannot become a child subreaper:");
		return -1;
	}
	return 0;
}

int pool_init(void)
{
	signal(SIGPIPE, SIG_IGN);
	return pool_subreaper();
}

double pool_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void set_limit(int what, rlim_t v)
{
	struct rlimit r = { v, v };

	setrlimit(what, &r);
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);

	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0) {
			/* nothing to do: the namespace is a best effort */
		}
		close(fd);
	}
}

/* In the child: a user namespace that maps us to ourselves, holding a network namespace
 * with only a loopback device and, where they can be had, a PID namespace for the processes
 * forked from here on and a mount namespace (for its /proc and a read-only file system). 0
 * when none worked, 1 without the PID namespace, 2 with it. */
static int enter_netns(void)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	char map[64];
	int r = 2;

	if (unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS) < 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
			return 0;
		r = 1;
	}
	write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
	write_file("/proc/self/uid_map", map);
	snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
	write_file("/proc/self/gid_map", map);
	return r;
}

/* The file system type of a bind mount or a propagation change, which the kernel ignores:
 * a string rather than NULL, which valgrind (3.19 and older) takes for a bad pointer */
#define NO_FSTYPE "none"

/* Of the mount at root (with AT_RECURSIVE in flags, of every mount under it too), all
 * read-only but the paths keep[0..n), each bound onto itself first and then made writable
 * again: seal_fs's and pool_narrow's (narrow_mounts) one way. 0; a positive errno where
 * nothing was made read-only yet (no mount_setattr: Linux before 5.12, ENOSYS); a negative
 * one where keep[*bad] could not be made writable again. */
static int ro_but(const char *root, unsigned int flags, const char *const *keep, int n, int *bad)
{
#if defined(SYS_mount_setattr) && defined(MOUNT_ATTR_RDONLY)
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	struct mount_attr wr = { .attr_clr = MOUNT_ATTR_RDONLY };

	for (int i = 0; i < n; i++)
		if (mount(keep[i], keep[i], NO_FSTYPE, MS_BIND | MS_REC, NULL) < 0)
			return errno;
	if (syscall(SYS_mount_setattr, AT_FDCWD, root, flags, &ro, sizeof ro) < 0)
		return errno;
	for (int i = 0; i < n; i++)
		if (syscall(SYS_mount_setattr, AT_FDCWD, keep[i], 0, &wr, sizeof wr) < 0) {
			*bad = i;
			return -errno;
		}
	return 0;
#else
	(void)root, (void)flags, (void)keep, (void)n, (void)bad;
	return ENOSYS;
#endif
}

/* In the child's own mount namespace (enter_netns 2): every mount read-only but the private
 * temporary directory (dir) and the caller's rw paths, each bound onto itself first and then
 * made writable again, so that a candidate writes nowhere else (not the user's home, not the
 * sources it was given). The worker, having exec'd as itself, keeps no capability to undo
 * it; a namespace it makes of its own gets the mounts locked read-only. Device nodes are
 * written through a read-only mount (the GPU's). 0, or -1 when it could not be done (no
 * mount_setattr: Linux before 5.12), the file system then as without it; a path that cannot
 * be made writable again ends the child (126). */
static int seal_fs(const char *dir, const char *const *rw)
{
	const char *keep[64];
	int n = 0, bad, r;

	keep[n++] = dir;
	for (int i = 0; rw && rw[i] && n < 64; i++)
		keep[n++] = rw[i];
	if (mount(NULL, "/", NO_FSTYPE, MS_REC | MS_PRIVATE, NULL) < 0)
		return -1;
	r = ro_but("/", AT_RECURSIVE, keep, n, &bad);
	if (r < 0) {    /* a worker that cannot write them is of no use */
		dprintf(2, "cannot leave '%s' writable: %s\n", keep[bad], strerror(-r));
		_exit(126);
	}
	return r ? -1 : 0;
}

/* The relay's end: as the worker's (status), the same exit status or the same signal */
static _Noreturn void end_as(int status)
{
	if (WIFSIGNALED(status)) {
		sigset_t all;
		signal(WTERMSIG(status), SIG_DFL);
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		raise(WTERMSIG(status));
		_exit(128 + WTERMSIG(status));
	}
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

/* The namespace's init's side of pool_narrow: paths[0] (a mount of its own: one of the rw
 * paths) made read-only but paths[1..n), each bound onto itself first and left writable. 0,
 * or the errno of the step that failed. */
static int narrow_mounts(char **paths, int n)
{
	int bad, r = ro_but(paths[0], 0, (const char *const *)paths + 1, n - 1, &bad);

	return r < 0 ? -r : r;
}

static int chld_pipe[2] = { -1, -1 };

static void on_chld(int sig)
{
	int e = errno;

	(void)sig;
	if (write(chld_pipe[1], "c", 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
	errno = e;
}

/* The PID namespace's init (see split_pidns): reaps whatever ends in the namespace, and
 * until the worker (w) ends serves pool_narrow's requests on ctl (paths, each ended by a
 * NUL, an empty one last), one reply byte each on ack (0 or an errno); then tells the relay
 * (report) how the worker ended. Its mounts are the worker's: they share the namespace. */
static _Noreturn void ns_init(pid_t w, int report, int ctl, int ack)
{
	struct buf req;
	char b[4096];

	buf_init(&req);
	for (;;) {
		int st;
		pid_t r;
		while ((r = waitpid(-1, &st, WNOHANG)) > 0)
			if (r == w) {
				if (write(report, &st, sizeof st) < 0) {
					/* the relay is gone: nothing to tell */
				}
				_exit(0);
			}
		if (r < 0 && errno == ECHILD)
			_exit(126);
		struct pollfd pf[2] = { { .fd = chld_pipe[0], .events = POLLIN },
		                        { .fd = ctl, .events = POLLIN } };
		if (poll(pf, ctl >= 0 ? 2 : 1, -1) < 0 && errno != EINTR)
			_exit(126);
		while (read(chld_pipe[0], b, sizeof b) > 0)
			;
		if (ctl < 0 || !(pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t got = read(ctl, b, sizeof b);
		if (got <= 0) {
			if (got < 0 && errno == EINTR)
				continue;
			close(ctl);     /* the pool is done asking */
			ctl = -1;
			continue;
		}
		buf_add(&req, b, (size_t)got);
		if (req.len > (1u << 20)) {
			close(ctl);
			ctl = -1;
			continue;
		}
		/* whole requests: paths up to an empty one */
		for (;;) {
			char *paths[64];
			size_t at = 0;
			int np = 0, whole = 0;
			while (at < req.len) {
				size_t len = strnlen(req.p + at, req.len - at);
				if (at + len == req.len)
					break;          /* this path's end has not come yet */
				if (!len) {
					whole = 1;
					at++;
					break;
				}
				if (np < 64)
					paths[np++] = req.p + at;
				at += len + 1;
			}
			if (!whole)
				break;
			unsigned char e = np < 1 || np == 64 ? EINVAL : (unsigned char)narrow_mounts(paths, np);
			if (write(ack, &e, 1) < 0) {
				/* the pool is gone */
			}
			memmove(req.p, req.p + at, req.len - at);
			req.len -= at;
		}
	}
}

/* After unshare(CLONE_NEWPID), in the child: a candidate must see neither kbench-eval nor
 * anything else outside (it could signal them: os.kill(os.getppid(), ...), kill(-1, ...)),
 * and must not be the namespace's init either (PID 1 ignores the signals it sends itself,
 * so a candidate's own abort would not end it). So this process stays outside as a relay;
 * its child is the namespace's init, which reaps; the init's child returns from here to be
 * the worker. The init tells the relay how the worker ended, and the relay ends the same
 * way, so the pool sees the worker's own status. When the init ends, every process left in
 * the namespace is killed. The init first mounts the namespace's own /proc (the CUDA driver
 * fails, error 304, where /proc is the host's); where it cannot, it ends at once and this
 * process goes on to be the worker, outside the PID namespace, as without one. fds (n of
 * them) are the pipes, which only the worker keeps; ctl and ack (pool_narrow's requests
 * and replies) only the init keeps. */
static void split_pidns(const int *fds, int n, int ctl, int ack)
{
	int sp[2], st = 0;
	char proc = 0;
	pid_t init, w, r;

	if (pipe(sp) < 0 || (init = fork()) < 0)
		return;                 /* the worker outside the namespace, as without one */
	if (init > 0) {
		close(sp[1]);
		if (read(sp[0], &proc, 1) != 1 || proc != 'p') {
			close(sp[0]);
			while (waitpid(init, &w, 0) < 0 && errno == EINTR)
				;
			return;
		}
		for (int i = 0; i < n; i++)
			close(fds[i]);
		close(ctl);
		close(ack);
		ssize_t got = read(sp[0], &st, sizeof st);
		while ((r = waitpid(init, &w, 0)) < 0 && errno == EINTR)
			;
		end_as(got == (ssize_t)sizeof st ? st : r == init ? w : 126 << 8);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close(sp[0]);
	if (mount(NULL, "/", NO_FSTYPE, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		_exit(0);               /* no 'p': the relay is the worker */
	if (write(sp[1], "p", 1) != 1 || pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		_exit(126);
	struct sigaction sa = { .sa_handler = on_chld, .sa_flags = SA_RESTART | SA_NOCLDSTOP };
	sigaction(SIGCHLD, &sa, NULL);
	if ((w = fork()) < 0)
		_exit(126);
	if (w > 0) {
		for (int i = 0; i < n; i++)
			close(fds[i]);
		ns_init(w, sp[1], ctl, ack);
	}
	signal(SIGCHLD, SIG_DFL);
	close(chld_pipe[0]);
	close(chld_pipe[1]);
	close(sp[1]);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static _Noreturn void child(const struct pool_opts *o, const char *dir, int req, int rep, int out,
                            int ready, int ctl, int ack)
{
	int devnull, fd, ns = 0;
	char ok;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	signal(SIGPIPE, SIG_DFL);
	set_limit(RLIMIT_CORE, 0);
	if (o->netns && (ns = enter_netns()) == 2) {
		int fds[] = { req, rep, out, ready };
		seal_fs(dir, o->rw);
		split_pidns(fds, 4, ctl, ack);
	}
	close(ctl);     /* the init's alone (none: pool_narrow finds no reader) */
	close(ack);
	if (o->fsize_mb > 0)
		set_limit(RLIMIT_FSIZE, (rlim_t)o->fsize_mb << 20);
	if (o->mem_mb > 0)
		set_limit(RLIMIT_AS, (rlim_t)o->mem_mb << 20);
	if (o->nproc > 0)
		set_limit(RLIMIT_NPROC, (rlim_t)o->nproc);
	set_limit(RLIMIT_NOFILE, 4096);
	devnull = open("/dev/null", O_RDONLY);
	/* move the pipe ends above 4 first so the dup2s below cannot clobber each other */
	req = fcntl(req, F_DUPFD, 10);
	rep = fcntl(rep, F_DUPFD, 10);
	out = fcntl(out, F_DUPFD, 10);
	if (devnull < 0 || req < 0 || rep < 0 || out < 0 || dup2(devnull, 0) < 0 ||
	    dup2(out, 1) < 0 || dup2(out, 2) < 0 || dup2(req, 3) < 0 || dup2(rep, 4) < 0)
		_exit(126);
	ok = ns ? 'n' : 'y';
	if (write(ready, &ok, 1) < 0)
		_exit(126);
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 5, ~0U, 0) < 0)
#endif
		for (fd = 5; fd < 4096; fd++)
			close(fd);
	if (chdir(dir) < 0)
		_exit(126);
	{
		size_t n = 0;
		while (o->env && o->env[n])
			n++;
		char **env = calloc(n + 3, sizeof *env);
		if (!env)
			_exit(126);
		memcpy(env, o->env, n * sizeof *env);
		env[n] = malloc(strlen(dir) + 8);
		env[n + 1] = malloc(strlen(dir) + 8);
		if (!env[n] || !env[n + 1])
			_exit(126);
		sprintf(env[n], "TMPDIR=%s", dir);
		sprintf(env[n + 1], "HOME=%s", dir);
		execve(o->argv[0], o->argv, env);
	}
	dprintf(2, "cannot run '%s': %s\n", o->argv[0], strerror(errno));
	_exit(127);
}

int pool_spawn(struct pool_proc *p, const struct pool_opts *o)
{
	int req[2], rep[2], out[2], ready[2], ctl[2], ack[2];
	const char *root = o->tmp_root ? o->tmp_root : getenv("TMPDIR");
	char ok = 0;
	pid_t pid;

	memset(p, 0, sizeof *p);
	p->to_fd = p->from_fd = p->log_fd = p->ctl_fd = p->ack_fd = -1;
	buf_init(&p->msg);
	buf_init(&p->head);
	p->tail_cap = o->log_max / 2;
	p->tail = xmalloc(p->tail_cap + 1);
	if (!root || !*root)
		root = "/tmp";
	p->tmpdir = xasprintf("%s/kbench-XXXXXX", root);
	if (!mkdtemp(p->tmpdir)) {
		warn_msg("cannot create a temporary directory in '%s':", root);
		free(p->tmpdir);
		p->tmpdir = NULL;
		return -1;
	}
	if (pipe2(req, O_CLOEXEC) < 0)
		goto fail0;
	if (pipe2(rep, O_CLOEXEC) < 0)
		goto fail1;
	if (pipe2(out, O_CLOEXEC) < 0)
		goto fail2;
	if (pipe2(ready, O_CLOEXEC) < 0)
		goto fail3;
	if (pipe2(ctl, O_CLOEXEC) < 0)
		goto fail4;
	if (pipe2(ack, O_CLOEXEC) < 0)
		goto fail5;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		warn_msg("cannot fork:");
		goto fail6;
	}
	if (pid == 0)
		child(o, p->tmpdir, req[0], rep[1], out[1], ready[1], ctl[0], ack[1]);
	setpgid(pid, pid);   /* also here: no race with a kill before the child ran */
	close(req[0]);
	close(rep[1]);
	close(out[1]);
	close(ready[1]);
	close(ctl[0]);
	close(ack[1]);
	if (read(ready[0], &ok, 1) != 1)
		ok = 0;
	close(ready[0]);
	p->pid = pid;
	p->to_fd = req[1];
	p->from_fd = rep[0];
	p->log_fd = out[0];
	p->ctl_fd = ctl[1];
	p->ack_fd = ack[0];
	p->netns = ok == 'n';
	p->started = pool_now();
	fcntl(p->from_fd, F_SETFL, O_NONBLOCK);
	fcntl(p->log_fd, F_SETFL, O_NONBLOCK);
	return 0;
fail6:
	close(ack[0]);
	close(ack[1]);
fail5:
	close(ctl[0]);
	close(ctl[1]);
fail4:
	close(ready[0]);
	close(ready[1]);
fail3:
	close(out[0]);
	close(out[1]);
fail2:
	close(rep[0]);
	close(rep[1]);
fail1:
	close(req[0]);
	close(req[1]);
fail0:
	if (!errno)
		errno = EIO;
	warn_msg("cannot start a worker:");
	rmdir(p->tmpdir);
	return -1;
}

static void log_add(struct pool_proc *p, const char *s, size_t n)
{
	size_t half = p->tail_cap, take;

	p->log_total += n;
	if (p->head.len < half) {
		take = half - p->head.len < n ? half - p->head.len : n;
		buf_add(&p->head, s, take);
		s += take;
		n -= take;
	}
	if (!half)
		return;
	if (n >= half) {   /* keep only the last half bytes */
		memcpy(p->tail, s + n - half, half);
		p->tail_len = half;
		p->tail_pos = 0;
		return;
	}
	while (n) {
		take = half - p->tail_pos < n ? half - p->tail_pos : n;
		memcpy(p->tail + p->tail_pos, s, take);
		p->tail_pos = (p->tail_pos + take) % half;
		p->tail_len = p->tail_len + take > half ? half : p->tail_len + take;
		s += take;
		n -= take;
	}
}

/* Read everything available on fd; -1 marks EOF (fd closed by us). */
static void drain(struct pool_proc *p, int *fd, int is_log)
{
	char b[65536];
	ssize_t n;

	while (*fd >= 0) {
		n = read(*fd, b, sizeof b);
		if (n > 0) {
			if (is_log)
				log_add(p, b, (size_t)n);
			else if (p->msg.len < (64u << 20))   /* a reply is small; refuse floods */
				buf_add(&p->msg, b, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		close(*fd);
		*fd = -1;
	}
}

static void reap(struct pool_proc **procs, int n)
{
	int st, i;
	pid_t pid;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		for (i = 0; i < n; i++) {
			if (procs[i] && procs[i]->pid == pid && !procs[i]->exited) {
				procs[i]->exited = 1;
				procs[i]->status = st;
			}
		}
	}
}

int pool_poll(struct pool_proc **procs, int n, int timeout_ms)
{
	return pool_poll_fd(procs, n, -1, timeout_ms);
}

int pool_poll_fd(struct pool_proc **procs, int n, int fd, int timeout_ms)
{
	struct pollfd *fds = xcalloc((size_t)n * 2 + 1, sizeof *fds);
	int i, k = 0, r;

	if (fd >= 0)
		fds[k++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	for (i = 0; i < n; i++) {
		if (!procs[i] || !procs[i]->pid)
			continue;
		if (procs[i]->from_fd >= 0)
			fds[k++] = (struct pollfd){ .fd = procs[i]->from_fd, .events = POLLIN };
		if (procs[i]->log_fd >= 0)
			fds[k++] = (struct pollfd){ .fd = procs[i]->log_fd, .events = POLLIN };
	}
	r = poll(fds, (nfds_t)k, timeout_ms);
	free(fds);
	if (r < 0 && errno != EINTR) {
		warn_msg("poll:");
		return -1;
	}
	for (i = 0; i < n; i++) {
		if (!procs[i] || !procs[i]->pid)
			continue;
		drain(procs[i], &procs[i]->from_fd, 0);
		drain(procs[i], &procs[i]->log_fd, 1);
	}
	reap(procs, n);
	return 0;
}

int pool_line(struct pool_proc *p, char **line)
{
	char *nl = memchr(p->msg.p, '\n', p->msg.len);
	size_t n;

	if (!nl)
		return 0;
	n = (size_t)(nl - p->msg.p);
	*line = xstrndup(p->msg.p, n);
	memmove(p->msg.p, nl + 1, p->msg.len - n - 1);
	p->msg.len -= n + 1;
	p->msg.p[p->msg.len] = '\0';
	return 1;
}

int pool_done(const struct pool_proc *p)
{
	return p->exited && p->from_fd < 0;
}

int pool_send(struct pool_proc *p, const char *data, size_t len)
{
	ssize_t n;
	int ret = 0;

	while (len && p->to_fd >= 0) {
		n = write(p->to_fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -1;
			break;
		}
		data += n;
		len -= (size_t)n;
	}
	if (p->to_fd >= 0)
		close(p->to_fd);
	p->to_fd = -1;
	return ret;
}

int pool_narrow(struct pool_proc *p, const char *root, const char *const *keep)
{
	struct buf m;
	unsigned char e = 0;
	int ret = 0;
	size_t at = 0;

	if (p->ctl_fd < 0)
		return 1;
	buf_init(&m);
	buf_add(&m, root, strlen(root) + 1);
	for (int i = 0; keep && keep[i]; i++)
		buf_add(&m, keep[i], strlen(keep[i]) + 1);
	buf_add(&m, "", 1);
	while (at < m.len) {
		ssize_t n = write(p->ctl_fd, m.p + at, m.len - at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {    /* EPIPE: no init reads (no namespace of its own) */
			ret = errno == EPIPE ? 1 : -1;
			break;
		}
		at += (size_t)n;
	}
	buf_free(&m);
	if (ret) {
		close(p->ctl_fd);
		close(p->ack_fd);
		p->ctl_fd = p->ack_fd = -1;
		return ret;
	}
	for (;;) {      /* a few mounts: a reply comes at once, or the init is wedged */
		struct pollfd pf = { .fd = p->ack_fd, .events = POLLIN };
		int r = poll(&pf, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = r ? errno : ETIMEDOUT;
			return -1;
		}
		ssize_t n = read(p->ack_fd, &e, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != 1) {
			errno = n ? errno : ESRCH;      /* the init ended: so did the worker */
			return -1;
		}
		break;
	}
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static int open_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D || flag == FTW_DNR)
		chmod(path, (st->st_mode & 07777) | S_IRWXU);
	return 0;
}

static void remove_tree(const char *dir)
{
	nftw(dir, open_entry, 32, FTW_PHYS);   /* a candidate may have chmod'ed dirs to 000 */
	nftw(dir, rm_entry, 32, FTW_PHYS | FTW_DEPTH);
}

/* ppid and pgrp of pid from /proc/pid/stat; -1 when gone. */
static int proc_stat(pid_t pid, pid_t *ppid, pid_t *pgrp)
{
	char path[64], b[512], *rp;
	int fd, ppi, pgr;
	ssize_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return -1;
	b[n] = '\0';
	rp = strrchr(b, ')');
	if (!rp || sscanf(rp + 1, " %*c %d %d", &ppi, &pgr) != 2)
		return -1;
	*ppid = ppi;
	*pgrp = pgr;
	return 0;
}

/* The next child of self (re-parented orphans included) in the /proc listing d: 1 with its
 * pid and process group, 0 at the end of the listing. */
static int next_child(DIR *d, pid_t self, pid_t *pid, pid_t *pgrp)
{
	struct dirent *e;
	pid_t ppid;

	while ((e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		*pid = (pid_t)atoi(e->d_name);
		if (proc_stat(*pid, &ppid, pgrp) == 0 && ppid == self)
			return 1;
	}
	return 0;
}

pid_t *pool_children(int *n)
{
	pid_t self = getpid(), pid, pgrp, *v = NULL;
	size_t cap = 0;
	DIR *d = opendir("/proc");

	*n = 0;
	if (!d)
		return NULL;
	while (next_child(d, self, &pid, &pgrp)) {
		if ((size_t)*n == cap) {
			cap = cap ? 2 * cap : 16;
			v = xrealloc(v, cap * sizeof *v);
		}
		v[(*n)++] = pid;
	}
	closedir(d);
	return v;
}

void pool_sweep(const pid_t *live, int n)
{
	pid_t self = getpid(), mygrp = getpgrp(), pgrp, pid;
	int round, found, i, keep;
	DIR *d;

	for (round = 0; round < 200; round++) {
		found = 0;
		if (!(d = opendir("/proc")))
			return;
		while (next_child(d, self, &pid, &pgrp)) {
			keep = 0;
			for (i = 0; i < n; i++)
				if (live[i] == pid || live[i] == pgrp)
					keep = 1;
			if (keep)
				continue;
			found++;
			if (pgrp != mygrp && pgrp > 1)
				kill(-pgrp, SIGKILL);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, WNOHANG);
		}
		closedir(d);
		if (!found)
			return;
		usleep(2000);
	}
}

void pool_finish(struct pool_proc *p)
{
	double until;

	if (!p->pid)
		return;
	kill(-p->pid, SIGKILL);
	kill(p->pid, SIGKILL);
	if (!p->exited && waitpid(p->pid, &p->status, 0) == p->pid)
		p->exited = 1;
	/* the rest of the output: writers are dead, but escaped descendants may hold the pipes */
	until = pool_now() + 0.5;
	while ((p->log_fd >= 0 || p->from_fd >= 0) && pool_now() < until) {
		struct pool_proc *one = p;
		pool_poll(&one, 1, 20);
	}
	if (p->log_fd >= 0)
		close(p->log_fd);
	if (p->from_fd >= 0)
		close(p->from_fd);
	if (p->to_fd >= 0)
		close(p->to_fd);
	if (p->ctl_fd >= 0)
		close(p->ctl_fd);
	if (p->ack_fd >= 0)
		close(p->ack_fd);
	p->log_fd = p->from_fd = p->to_fd = p->ctl_fd = p->ack_fd = -1;
	if (p->tmpdir) {
		remove_tree(p->tmpdir);
		free(p->tmpdir);
		p->tmpdir = NULL;
	}
	p->pid = 0;
}

void pool_proc_free(struct pool_proc *p)
{
	buf_free(&p->msg);
	buf_free(&p->head);
	free(p->tail);
	p->tail = NULL;
	free(p->tmpdir);
	p->tmpdir = NULL;
}

char *pool_log(const struct pool_proc *p)
{
	struct buf b;
	size_t kept = p->head.len + p->tail_len, start;

	buf_init(&b);
	buf_add(&b, p->head.p, p->head.len);
	if (p->log_total > kept)
		buf_addf(&b, "\n[... %zu bytes dropped ...]\n", p->log_total - kept);
	if (p->tail_len) {
		start = p->tail_len < p->tail_cap ? 0 : p->tail_pos;
		buf_add(&b, p->tail + start, p->tail_len - start);
		buf_add(&b, p->tail, start);
	}
	char *s = buf_detach(&b, NULL);
	buf_free(&b);
	return s;
}

const char *pool_status_str(int status)
{
	static char s[96];

	if (WIFSIGNALED(status))
		snprintf(s, sizeof s, "killed by signal %d (%s)", WTERMSIG(status),
		         strsignal(WTERMSIG(status)));
	else if (WIFEXITED(status))
		snprintf(s, sizeof s, "exit status %d", WEXITSTATUS(status));
	else
		snprintf(s, sizeof s, "wait status %d", status);
	return s;
}
