/* input: open an operand and hand out its byte streams, one after another.
 *
 * An operand is a path or "-" (stdin). Plain text (the first byte is '{', '[' or white space)
 * is read directly; anything else goes through libarchive: a compressed file (.gz .zst .xz
 * .bz2 ...) is one stream, an archive (.tar*, .zip) yields each regular member in archive
 * order, decompressed when the member is itself compressed (a .tar of .jsonl.gz files).
 * Detection is by content, not by file name, and never reads ahead of the first byte on plain
 * input, so a JSONL coprocess on a pipe is not blocked.
 *
 *     struct input in;
 *     if (input_open(&in, path) < 0) -> message already printed, count the failure
 *     while ((r = input_next(&in)) > 0)  read in.fp; name lines as in.name
 *     if (r < 0) -> a read error was printed (for a member that cannot be decompressed: at
 *                   the end, after the members that can)
 *     input_close(&in);
 *
 * in.fp and in.name belong to the input and stay valid until the next input_next/close.
 *
 * Waiting: with input_set_idle(fn, arg), an operand that is not a regular file (stdin on a
 * pipe, a FIFO, a terminal) opened from then on is read through a stream that, whenever the
 * descriptor has nothing to read, calls fn(fd, arg) instead of blocking, again and again until
 * fd is readable or at its end. fn may work meanwhile (kbench-eval runs its workers and writes
 * what they finished) and should come back once fd is readable or after a while; when it
 * returns -1 the operand reads as ended there. input_set_idle(NULL, NULL): plain blocking
 * reads again (the default).
 */
#ifndef DICE_INPUT_H
#define DICE_INPUT_H

#include <stdio.h>

struct archive;

struct input {
	const char *path;   /* the operand as given */
	char *name;         /* display name: path, "<stdin>", or "path:member" */
	const char *member; /* member path inside an archive, NULL otherwise */
	FILE *fp;           /* the current stream */
	/* private */
	FILE *raw;          /* the opened file or stdin, or the waiting stream over under */
	FILE *under;        /* the opened file or stdin below a waiting stream, else NULL */
	struct archive *ar;
	struct archive *inner;  /* the current member through a decompressor (archives only) */
	char *mbuf;         /* the member's bytes on their way to inner */
	int state;          /* 0 fresh, 1 plain handed out, 2 archive, 3 done */
	int is_raw;         /* archive format "raw": a compressed single stream */
	int bad_member;     /* a member could not be decompressed (skipped, reported) */
	char *member_buf;
	char *iobuf;        /* stdio buffer of raw when it is a file we opened */
	char rbuf[65536];
};

void input_set_idle(int (*fn)(int fd, void *arg), void *arg);
/* opt: the program's option that reads a KernelBench tree ("--kernelbench"), NULL (the
 * default) where it has none. With one, a directory operand that looks like a KernelBench
 * tree (levelN/ folders of .py files, in it or in one of its folders) is refused with a hint
 * naming the option; any other directory, and an option's file (input_one_file), with only
 * "Is a directory". */
void input_set_tree_option(const char *opt);
int input_open(struct input *in, const char *path);
int input_next(struct input *in);
void input_close(struct input *in);

/* Why in.fp's last read failed: the decompressor's message for a compressed stream or
 * member ("truncated gzip input"), else the system's. For "NAME:LINE: read error: %s". */
const char *input_error(const struct input *in);

/* Callback form for whole-file users: calls fn(name, data, len, arg) for every stream of the
 * operand, with data NUL-terminated and a UTF-8 byte-order mark at the stream's start left
 * out (as jsonl's reader leaves it out of the first line); stops at the first nonzero return
 * and passes it back. Returns -1 on an open/read error (already reported). */
int input_each_file(const char *path,
                    int (*fn)(const char *name, const char *data, size_t len, void *arg),
                    void *arg);
/* The same for Python source (a .py operand, a KernelBench problem, a reference): each
 * stream's text as Python reads it, CR LF and lone CR line endings made LF (util_text). */
int input_each_py(const char *path,
                  int (*fn)(const char *name, const char *data, size_t len, void *arg),
                  void *arg);

/* The one file of an operand that an option names (deceive-check --ref, kbench-eval
 * --baseline), read as input_each_file (py: input_each_py) reads each stream: plain,
 * compressed, or an archive of that one file (an empty archive reads as an empty file).
 * Returns its text, a new NUL-terminated string, and, each where not NULL, its length in
 * *len and in *name the name to give its lines (a new string: "path", "<stdin>" or
 * "path:member"); NULL after a message: the operand cannot be opened or read, or the archive
 * has a second file ("OPT reads one file", opt being the option's name: "--ref"). */
char *input_one_file(const char *path, const char *opt, int py, size_t *len, char **name);

/* 1 after "prog: OPT - reads standard input, which the records come from too" where path,
 * the operand of option opt, is "-" and so are the records: no operands (ops[0..n)), or one
 * "-"; then the caller's usage error. Else 0. */
int input_stdin_twice(const char *opt, const char *path, char *const *ops, int n);

/* 1 when path names a .py file, plain or compressed (.py.gz, .py.xz, .py.zst, .py.bz2, which
 * input_open reads as the file's text): an operand of Python source, not of records. */
int input_is_py(const char *path);

#endif
