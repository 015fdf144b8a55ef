/* util: the small things every module and program uses.
 *
 * - Messages: warn_msg() prints "prog: message" on stderr; a format ending in ':' appends
 *   ": strerror(errno)". die() does the same and exits (only cmd/ may call it).
 * - Allocation is fatal: the x* functions never return NULL, so callers never check.
 * - Numbers: parse_long()/parse_double() are range-checked and return -1 on a bad string.
 * - struct buf: a growable byte buffer; invariant: p is never NULL after buf_init and
 *   p[len] == '\0'. The caller owns it and releases it with buf_free.
 * - utf8: validation and repair (invalid bytes become U+FFFD) for text that goes into JSON.
 */
#ifndef DICE_UTIL_H
#define DICE_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdarg.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define BUG(...) util_bug(__FILE__, __LINE__, __VA_ARGS__)

/* Exit statuses shared by every program (DESIGN.md conventions). */
enum exit_status {
	EXIT_STATUS_OK = 0,     /* every record processed */
	EXIT_STATUS_BAD = 1,    /* a record failed or was bad; the rest were processed */
	EXIT_STATUS_USAGE = 2,  /* usage error */
};

extern const char *argv0;   /* program name for messages; set by util_set_progname */
void util_set_progname(const char *path);

void warn_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vwarn_msg(const char *fmt, va_list ap);
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void die_status(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void util_bug(const char *file, int line, const char *fmt, ...);
/* From a signal handler: removes the atomfile temporaries not yet renamed
 * (atomfile_unlink_pending), then "prog: why" on stderr with write(2) alone, then
 * _exit(128 + sig) (async-signal-safe: no stdio, no allocation). */
_Noreturn void util_signal_exit(int sig, const char *why);
/* Hold off, in the calling thread, every signal that can be blocked (its mask before into
 * *old), and let them in again: for a step that a handler ending the program at once
 * (util_signal_exit) must not cut in two, a file made and not yet removed or noted. */
void util_signals_hold(sigset_t *old);
void util_signals_release(const sigset_t *old);

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 1 when the n bytes of s are white space alone (" \t\r\n\f\v"; none counts): an empty
 * reference or kernel */
int util_blank(const char *s, size_t n);
/* The value of the hexadecimal digit c (0-9, a-f, A-F), -1 for any other byte. */
int util_hexval(int c);
/* Whole string must be a number within [min, max]; 0 on success, -1 otherwise. */
int parse_long(const char *s, long min, long max, long *out);
int parse_double(const char *s, double min, double max, double *out);
/* "3,1,2": the numbers of a comma-separated list, each within [min, max], into *out (the
 * caller frees it); their count, or -1 (nothing allocated) for an empty item or a bad one. */
int parse_long_list(const char *s, long min, long max, long **out);

struct buf {
	char *p;      /* (cap) bytes, p[len] == '\0' */
	size_t len;
	size_t cap;
};
void buf_init(struct buf *b);
void buf_free(struct buf *b);
void buf_reset(struct buf *b);                 /* len = 0, keeps the memory */
void buf_grow(struct buf *b, size_t extra);    /* room for extra more bytes + NUL */
void buf_add(struct buf *b, const void *data, size_t n);
void buf_adds(struct buf *b, const char *s);
void buf_addc(struct buf *b, int c);
void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *buf_detach(struct buf *b, size_t *len);  /* caller owns the result; b is re-inited */

/* For cmd/ only (they exit): the number in option `opt` within [min, max], else
 * "prog: bad OPT 'S' (want an integer from MIN to MAX)" and exit 2. */
long cli_long(const char *opt, const char *s, long min, long max);
double cli_double(const char *opt, const char *s, double min, double max);
/* status 0 (--help): the full text on stdout, exit 0 (1 when stdout fails); otherwise the
 * synopsis and "try 'prog --help'" on stderr and exit with status. */
_Noreturn void cli_usage(int status, const char *synopsis, const char *text);

/* --version: "prog VERSION" on stdout, exit 0 (1 when stdout fails). */
_Noreturn void cli_version(void);
/* getopt_long, which says itself what is wrong on '?' or ':' (an unknown or ambiguous
 * option, a missing argument, an argument to an option that takes none, each named as
 * given: -Z inside -Zc too) and then returns '?'. */
/* Die with the usage status where the file out is one of the n operands, or is stdin when
 * stdin is read (n == 0, or a "-" operand) (a regular file both, by device and inode):
 * opening it for writing would empty an input. */
void cli_output_not_input(const char *out, char **ops, int n);
/* arg, or die with the usage status where it is "" ("option '-o' needs a file name, not ''",
 * what being "a file name"): an empty name is a slip, never a file or field. */
const char *cli_nonempty(int opt, const char *what, const char *arg);
/* The -o of a program that writes records to standard output by default: '' a usage error
 * (cli_nonempty), "-" standard output (NULL), else the file name. */
const char *cli_output_file(int opt, const char *arg);
/* For a program's outputs besides its records (rejects, statistics) as well as -o: NULL or
 * "-" is standard output. cli_open_out opens one for writing (dies naming it when it cannot);
 * cli_out_name is its name in messages ("stdout"); cli_close_out closes it, 0 or 1 when a
 * write failed (said), but leaves standard output, which two outputs may share, to be
 * closed once, at the end. */
int cli_is_stdout(const char *path);
FILE *cli_open_out(const char *path);
const char *cli_out_name(const char *path);
int cli_close_out(FILE *fp, const char *path);
/* Die with the usage status where two of the n outputs are one file: opt[i] names the
 * option (for the message; NULL: not in use), path[i] the file, NULL for standard output.
 * Compared by device and inode where the files exist, else by directory and name; character
 * devices (a terminal, /dev/null) may be shared. Call before opening any of them. */
void cli_outputs_distinct(int n, const char *const opt[], const char *const path[]);
struct option;
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);
/* For a mode that reads only some of the options (kbench-eval --list, dice-sample --dry-run):
 * the long name of the first option of longopts that was given and is not among reads, or
 * NULL when there is none. given[v] is nonzero for each value v that cli_getopt returned
 * (n entries, indexed by value: a short option's letter, a long-only option's code); reads
 * holds the values the mode reads, 0-terminated. One given that it does not read is a usage
 * error naming it, never ignored unsaid; an environment default is no option. */
const char *cli_unread(const struct option *longopts, const unsigned char *given, size_t n,
                       const int *reads);

/* Read a whole stream; returns a NUL-terminated xmalloc'ed buffer or NULL with errno set. */
char *util_read_all(FILE *fp, size_t *len);
char *util_read_file(const char *path, size_t *len);

/* 1 if s[0..n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int utf8_valid(const char *s, size_t n);
/* Append s[0..n) to out with every invalid byte replaced by U+FFFD; returns the count replaced. */
size_t utf8_repair(struct buf *out, const char *s, size_t n);
/* 3 when s[0..n) starts with a UTF-8 byte-order mark (EF BB BF), else 0: the bytes a reader
 * skips at the start of a stream or file (editors on Windows save one). */
size_t utf8_bom(const char *s, size_t n);
/* The text of a whole file or stream data[0..*len) (read by util_read_file, util_read_all):
 * a UTF-8 byte-order mark opening it left out and, with lf, each line ending a CR LF or a
 * lone CR (Windows and old Mac editors) made one LF, as Python reads a .py file, so the text
 * is that of the same file saved with LF endings. In place: returns where the text starts
 * (data or data + 3) and sets *len to its length; NUL-terminated when data was. */
char *util_text(char *data, size_t *len, int lf);

/* fflush + ferror + fclose; returns 0, or -1 after a message naming `name` (none where
 * util_write_failed said the stream's write error was reported already). */
int util_fshut(FILE *fp, const char *name);
void util_write_failed(FILE *fp);
/* Flush fp and check its error flag, for a stream written as the program goes (a log): 0,
 * or -1 with "write error on NAME: reason" the first time (then util_fshut stays quiet).
 * Set errno to 0 before the writes checked: the cause of a failed write that fflush does
 * not repeat is then errno, not a stale value. */
int util_fcheck(FILE *fp, const char *name);

/* 64-bit FNV-1a; a stable hash for keys and cache names. */
unsigned long long util_hash64(const void *p, size_t n);

/* Whether environment variable name is set to exactly "0": the engine's switches that are on
 * unless so (DICE_PACK, DICE_PREFILL_MM, DICE_X16, ...). */
int util_env_zero(const char *name);
/* Environment variable name's value where set and not empty, else dflt (DICE_MODEL,
 * DICE_DEVICE: the defaults of -m and --device; DICE_SHARE, DICE_PYTHON, ...) */
const char *util_env(const char *name, const char *dflt);

/* Directory holding share/ data: $DICE_SHARE if set, else the source tree's share/ when the
 * program runs from bin/ of a checkout, else the installed DICE_SHAREDIR. Never NULL. */
const char *util_sharedir(void);

#endif
