/* atomfile: temp file + fsync + rename + directory fsync. See atomfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomfile.h"
#include "errmsg.h"
#include "util.h"

/* Where the file goes, and how. A regular file (or none) is replaced atomically; through a
 * symbolic link, the file it names is, and the link stays. A device or a fifo (/dev/null,
 * /dev/stdout, a pipe) cannot be replaced: it is written into directly (direct = 1), as is
 * the file a dangling link names. A directory is an error. */
static char *target(const char *path, int *direct, char *err, size_t errlen)
{
	struct stat st, lst;

	*direct = 0;
	if (stat(path, &st) < 0) {
		if (errno != ENOENT) {
			errmsg_set(err, errlen, "cannot write '%s': %s", path, strerror(errno));
			return NULL;
		}
		*direct = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
		return xstrdup(path);
	}
	if (S_ISDIR(st.st_mode)) {
		errmsg_set(err, errlen, "cannot write '%s': %s", path, strerror(EISDIR));
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		*direct = 1;
		return xstrdup(path);
	}
	if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
		char *real = realpath(path, NULL);
		if (real)
			return real;
	}
	return xstrdup(path);
}

/* The temporary files made and not yet renamed or removed, for atomfile_unlink_pending (a
 * handler that ends the program at once): a slot holds a temporary's name from just after
 * mkstemp made it (every signal held off in between) until after its rename or unlink, so a
 * handler that unlinks a name gone already only gets ENOENT. More open at once than slots:
 * the rest are not seen (the programs hold one or two). */
#define PENDING_SLOTS 16
static _Atomic(char *) pending[PENDING_SLOTS];

static void pending_add(char *tmp)
{
	for (int i = 0; i < PENDING_SLOTS; i++) {
		char *none = NULL;
		if (atomic_compare_exchange_strong(&pending[i], &none, tmp))
			return;
	}
}

static void pending_drop(char *tmp)
{
	for (int i = 0; i < PENDING_SLOTS; i++) {
		char *was = tmp;
		if (atomic_compare_exchange_strong(&pending[i], &was, NULL))
			return;
	}
}

void atomfile_unlink_pending(void)
{
	for (int i = 0; i < PENDING_SLOTS; i++) {
		char *tmp = atomic_load(&pending[i]);
		if (tmp)
			unlink(tmp);
	}
}

int atomfile_open(struct atomfile *af, const char *path, char *err, size_t errlen)
{
	sigset_t old;
	int fd, direct;

	af->fp = NULL;
	af->tmp = NULL;
	if (!(af->path = target(path, &direct, err, errlen)))
		return -1;
	if (direct) {
		if (!(af->fp = fopen(af->path, "wb"))) {
			errmsg_set(err, errlen, "cannot write '%s': %s", path, strerror(errno));
			free(af->path);
			af->path = NULL;
			return -1;
		}
		return 0;
	}
	af->tmp = xasprintf("%s.tmp.XXXXXX", af->path);
	util_signals_hold(&old);
	if ((fd = mkstemp(af->tmp)) >= 0)
		pending_add(af->tmp);
	util_signals_release(&old);
	if (fd < 0 || !(af->fp = fdopen(fd, "wb"))) {
		errmsg_set(err, errlen, "cannot create '%s': %s", path, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(af->tmp);
			pending_drop(af->tmp);
		}
		free(af->path);
		free(af->tmp);
		af->path = af->tmp = NULL;
		return -1;
	}
	fchmod(fd, 0644);
	return 0;
}

void atomfile_abort(struct atomfile *af)
{
	if (af->fp)
		fclose(af->fp);
	if (af->tmp) {
		unlink(af->tmp);
		pending_drop(af->tmp);
	}
	free(af->path);
	free(af->tmp);
	af->fp = NULL;
	af->path = af->tmp = NULL;
}

int atomfile_commit(struct atomfile *af, char *err, size_t errlen)
{
	char *dir, *slash;
	int fd, rc;

	errno = EIO;                /* ferror alone keeps no errno */
	if (fflush(af->fp) != 0 || ferror(af->fp) || (af->tmp && fsync(fileno(af->fp)) != 0)) {
		errmsg_set(err, errlen, "cannot write '%s': %s", af->path, strerror(errno));
		atomfile_abort(af);
		return -1;
	}
	rc = fclose(af->fp);
	af->fp = NULL;
	if (!af->tmp) {             /* written in place */
		if (rc != 0)
			errmsg_set(err, errlen, "cannot write '%s': %s", af->path, strerror(errno));
		free(af->path);
		af->path = NULL;
		return rc ? -1 : 0;
	}
	if (rc != 0 || rename(af->tmp, af->path) != 0) {
		errmsg_set(err, errlen, "cannot write '%s': %s", af->path, strerror(errno));
		atomfile_abort(af);
		return -1;
	}
	pending_drop(af->tmp);
	/* make the rename itself durable */
	dir = xstrdup(af->path);
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir] = '\0';
	fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
	free(af->path);
	free(af->tmp);
	af->path = af->tmp = NULL;
	return 0;
}

int atomfile_write(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
	struct atomfile af;

	if (atomfile_open(&af, path, err, errlen) < 0)
		return -1;
	if (len && fwrite(data, 1, len, af.fp) != len) {
		errmsg_set(err, errlen, "cannot write '%s': %s", path, strerror(errno));
		atomfile_abort(&af);
		return -1;
	}
	return atomfile_commit(&af, err, errlen);
}
