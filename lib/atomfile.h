/* atomfile: write a file so that readers see either the old file or the complete new one.
 *
 * atomfile_open creates a temporary file in the target's own directory (same filesystem);
 * atomfile_commit flushes it, fsyncs it, renames it over the target and fsyncs the
 * directory; atomfile_abort (or a failed commit) removes the temporary file. Through a
 * symbolic link the file it names is replaced and the link kept; a device or fifo
 * (/dev/null, /dev/stdout) is written into directly, as is a dangling link's file; a
 * directory is an error. The caller
 * writes through af->fp between open and commit/abort. All return 0 or -1 with a message
 * in err (size errlen) naming the target path.
 */
#ifndef DICE_ATOMFILE_H
#define DICE_ATOMFILE_H

#include <stddef.h>
#include <stdio.h>

struct atomfile {
	char *path;     /* the target */
	char *tmp;      /* the temporary file beside it */
	FILE *fp;
};

int atomfile_open(struct atomfile *af, const char *path, char *err, size_t errlen);
int atomfile_commit(struct atomfile *af, char *err, size_t errlen);
void atomfile_abort(struct atomfile *af);
/* Removes every temporary file an atomfile_open made that no commit or abort has renamed or
 * removed yet: for a signal handler that ends the program at once (util_signal_exit calls
 * it); async-signal-safe. */
void atomfile_unlink_pending(void);
/* The whole thing for a buffer in memory. */
int atomfile_write(const char *path, const void *data, size_t len, char *err, size_t errlen);

#endif
