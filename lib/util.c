/* util: messages, fatal allocation, checked number parsing, growable buffers, UTF-8 repair.
 * See util.h for the contracts. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "atomfile.h"
#include "util.h"

const char *argv0 = "dice";

void util_set_progname(const char *path)
{
	const char *s = strrchr(path, '/');
	argv0 = s ? s + 1 : path;
}

_Noreturn void util_signal_exit(int sig, const char *why)
{
	const char *part[3] = { argv0, ": ", why };

	atomfile_unlink_pending();      /* no half-written file.tmp.XXXXXX left behind */
	for (int i = 0; i < 3; i++) {
		ssize_t w = write(2, part[i], strlen(part[i]));
		(void)w;
	}
	ssize_t w = write(2, "\n", 1);
	(void)w;
	_exit(128 + sig);
}

void util_signals_hold(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, old);
}

void util_signals_release(const sigset_t *old)
{
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* Every line of the message gets the program's name, a "hint: ..." line after an error too,
 * so that in a pipeline each line says which program wrote it. */
void vwarn_msg(const char *fmt, va_list ap)
{
	int saved = errno;
	size_t n = strlen(fmt);
	char small[512], *text = small;
	va_list aq;

	va_copy(aq, ap);
	int len = vsnprintf(small, sizeof small, fmt, aq);
	va_end(aq);
	if (len < 0)
		len = 0, small[0] = 0;
	else if ((size_t)len >= sizeof small) {
		text = malloc((size_t)len + 1);
		if (text)
			vsnprintf(text, (size_t)len + 1, fmt, ap);
		else
			text = small, len = (int)sizeof small - 1;  /* out of memory: cut short */
	}
	while (len > 0 && text[len - 1] == '\n')   /* one line end, ours */
		text[--len] = '\0';
	fprintf(stderr, "%s: ", argv0);
	for (const char *p = text, *nl; *p; p = nl + 1) {
		if (!(nl = strchr(p, '\n'))) {
			fputs(p, stderr);
			break;
		}
		fprintf(stderr, "%.*s\n%s: ", (int)(nl - p), p, argv0);
	}
	if (text != small)
		free(text);
	if (n && fmt[n - 1] == ':')
		fprintf(stderr, " %s", strerror(saved));
	fputc('\n', stderr);
}

void warn_msg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn_msg(fmt, ap);
	va_end(ap);
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn_msg(fmt, ap);
	va_end(ap);
	exit(EXIT_STATUS_BAD);
}

void die_status(int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn_msg(fmt, ap);
	va_end(ap);
	exit(status);
}

void util_bug(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: BUG: %s:%d: ", argv0, file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

static _Noreturn void oom(size_t n)
{
	fprintf(stderr, "%s: out of memory allocating %zu bytes\n", argv0, n);
	exit(EXIT_STATUS_BAD);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (!p)
		oom(nmemb * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	struct buf b;
	va_list ap;
	int n;

	buf_init(&b);
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		BUG("bad format '%s'", fmt);
	buf_grow(&b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b.p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b.len = (size_t)n;
	return b.p;
}

/* A number as a person writes it: no leading white space (strtol and strtod skip it), and for
 * reals no hexadecimal, infinity or NaN spellings (strtod reads "0x10" as 16) */
static int plain_number(const char *s, int real)
{
	if (!s || !*s || isspace((unsigned char)*s))
		return 0;
	return !real || !strpbrk(s, "xXiInN");
}

int util_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!s[i] || !strchr(" \t\r\n\f\v", s[i]))
			return 0;
	return 1;
}

int util_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	if (!plain_number(s, 0))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!plain_number(s, 1))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || isnan(v) || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int parse_long_list(const char *s, long min, long max, long **out)
{
	const char *p = s;
	int n = 0;

	*out = xmalloc((strlen(s) / 2 + 1) * sizeof **out);
	for (;;) {
		size_t len = strcspn(p, ",");
		char *item = xstrndup(p, len);
		int bad = parse_long(item, min, max, &(*out)[n]) < 0;

		free(item);
		if (bad) {
			free(*out);
			*out = NULL;
			return -1;
		}
		n++;
		if (!p[len])
			return n;
		p += len + 1;
	}
}

/* The message names the range, open-ended where the top is there only to stop an overflow. */
long cli_long(const char *opt, const char *s, long min, long max)
{
	long v;

	if (parse_long(s, min, max, &v) < 0) {
		if (max == LONG_MAX)
			die_status(EXIT_STATUS_USAGE, "bad %s '%s' (want an integer of at least %ld)",
			           opt, s, min);
		die_status(EXIT_STATUS_USAGE, "bad %s '%s' (want an integer from %ld to %ld)", opt, s,
		           min, max);
	}
	return v;
}

/* x as %g spells it, or with the fewer digits past %g's 6 that read back as x: a bound
 * said rounded (0.999999999 as 1) would seem to hold values that are refused */
static const char *bound_str(char *b, size_t n, double x)
{
	for (int p = 6; p <= 17; p++) {
		snprintf(b, n, "%.*g", p, x);
		if (strtod(b, NULL) == x)
			break;
	}
	return b;
}

double cli_double(const char *opt, const char *s, double min, double max)
{
	double v;
	char lo[32], hi[32];

	if (parse_double(s, min, max, &v) < 0) {
		if (max >= 1e300)
			die_status(EXIT_STATUS_USAGE, "bad %s '%s' (want a finite number of at least "
			           "%s)", opt, s, bound_str(lo, sizeof lo, min));  /* inf, 1e400: no value */
		die_status(EXIT_STATUS_USAGE, "bad %s '%s' (want a number from %s to %s)", opt, s,
		           bound_str(lo, sizeof lo, min), bound_str(hi, sizeof hi, max));
	}
	return v;
}

void cli_usage(int status, const char *synopsis, const char *text)
{
	if (status) {
		fprintf(stderr, "usage: %s\ntry '%s --help' for the options\n", synopsis, argv0);
		exit(status);
	}
	fputs(text, stdout);
	exit(util_fshut(stdout, "stdout") ? 1 : 0);
}

void cli_version(void)
{
	printf("%s %s\n", argv0, DICE_VERSION);
	exit(util_fshut(stdout, "stdout") ? 1 : 0);
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
	int before = optind, c;

	opterr = 0;     /* our own messages: "program: ...", not the full argv[0] */
	c = getopt_long(argc, argv, shortopts, longopts, NULL);
	if (c != '?' && c != ':')
		return c;
	/* the word at fault: a long option's, or none inside a group of short ones (-Zc) */
	const char *w = optind > before && optind - 1 < argc ? argv[optind - 1] : "";
	if (w[0] != '-' || w[1] != '-') {
		if (c == ':' || (optopt > 0 && optopt < 256 && strchr(shortopts, optopt) &&
		                 strchr(shortopts, optopt)[1] == ':'))
			warn_msg("option '-%c' needs an argument", optopt);
		else if (optopt > ' ' && optopt < 127)
			warn_msg("unknown option '-%c'", optopt);
		else
			warn_msg("unknown option '%s'", w);
		return '?';
	}
	size_t n = strcspn(w + 2, "=");
	int match = 0, exact = -1, last = -1;
	for (int i = 0; longopts[i].name; i++)
		if (!strncmp(longopts[i].name, w + 2, n)) {
			match++;
			last = i;
			if (strlen(longopts[i].name) == n)
				exact = i;
		}
	int k = exact >= 0 ? exact : match == 1 ? last : -1;      /* the option meant */
	if (k >= 0 && (c == ':' || (w[2 + n] != '=' && longopts[k].has_arg == required_argument)))
		warn_msg("option '--%s' needs an argument", longopts[k].name);
	else if (k >= 0 && w[2 + n] == '=' && longopts[k].has_arg == no_argument)
		warn_msg("option '--%s' takes no argument", longopts[k].name);
	else if (k < 0 && match > 1)
		warn_msg("ambiguous option '%.*s'", (int)(n + 2), w);
	else
		warn_msg("unknown option '%.*s'", (int)(n + 2), w);
	return '?';
}

const char *cli_unread(const struct option *longopts, const unsigned char *given, size_t n,
                       const int *reads)
{
	for (const struct option *o = longopts; o->name; o++) {
		const int *r = reads;
		if (o->val <= 0 || (size_t)o->val >= n || !given[o->val])
			continue;
		while (*r && *r != o->val)
			r++;
		if (!*r)
			return o->name;
	}
	return NULL;
}

void buf_init(struct buf *b)
{
	b->cap = 64;
	b->len = 0;
	b->p = xmalloc(b->cap);
	b->p[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	b->p[0] = '\0';
}

void buf_grow(struct buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;

	if (need <= b->cap)
		return;
	while (b->cap < need)
		b->cap = b->cap < 64 ? 64 : b->cap * 2;
	b->p = xrealloc(b->p, b->cap);
}

void buf_add(struct buf *b, const void *data, size_t n)
{
	buf_grow(b, n);
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void buf_adds(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

void buf_addc(struct buf *b, int c)
{
	buf_grow(b, 1);
	b->p[b->len++] = (char)c;
	b->p[b->len] = '\0';
}

void buf_addf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		BUG("bad format '%s'", fmt);
	if ((size_t)n >= b->cap - b->len) {
		buf_grow(b, (size_t)n);
		va_start(ap, fmt);
		vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

char *buf_detach(struct buf *b, size_t *len)
{
	char *p = b->p;
	if (len)
		*len = b->len;
	buf_init(b);
	return p;
}

char *util_read_all(FILE *fp, size_t *len)
{
	struct buf b;
	char *p;
	char tmp[65536];
	size_t n;

	buf_init(&b);
	while ((n = fread(tmp, 1, sizeof tmp, fp)) > 0)
		buf_add(&b, tmp, n);
	if (ferror(fp)) {
		int saved = errno;
		buf_free(&b);
		errno = saved ? saved : EIO;
		return NULL;
	}
	p = buf_detach(&b, len);
	buf_free(&b);   /* buf_detach re-inits b */
	return p;
}

char *util_read_file(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *p;
	int saved;

	if (!fp)
		return NULL;
	p = util_read_all(fp, len);
	saved = errno;
	fclose(fp);
	errno = saved;
	return p;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4, cp = c & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t utf8_bom(const char *s, size_t n)
{
	return n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

char *util_text(char *data, size_t *len, int lf)
{
	size_t bom = utf8_bom(data, *len), n = *len - bom, i, o;
	char *s = data + bom;

	*len = n;
	if (!lf || !memchr(s, '\r', n))
		return s;
	for (i = o = 0; i < n; i++) {
		if (s[i] == '\r') {
			s[o++] = '\n';
			i += i + 1 < n && s[i + 1] == '\n';
		} else {
			s[o++] = s[i];
		}
	}
	if (o < n)
		s[o] = '\0';
	*len = o;
	return s;
}

int utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		if (!(k = utf8_seq(u + i, n - i)))
			return 0;
		i += k;
	}
	return 1;
}

size_t utf8_repair(struct buf *out, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, k, start = 0, bad = 0;

	while (i < n) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		if ((k = utf8_seq(u + i, n - i))) {
			i += k;
			continue;
		}
		buf_add(out, s + start, i - start);
		buf_add(out, "\xef\xbf\xbd", 3);
		bad++;
		start = ++i;
	}
	buf_add(out, s + start, n - start);
	return bad;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

void cli_output_not_input(const char *out, char **ops, int n)
{
	struct stat so, si;
	int in = n == 0, same = 0;      /* in: stdin is read (no operands, or a '-' operand) */

	if (!out || stat(out, &so) || !S_ISREG(so.st_mode))
		return;
	for (int i = 0; i < n && !same; i++) {
		if (!strcmp(ops[i], "-"))
			in = 1;
		else
			same = !stat(ops[i], &si) && same_file(&si, &so);
	}
	if (!same && in)        /* stdin redirected from out ('< out') */
		same = !fstat(0, &si) && S_ISREG(si.st_mode) && same_file(&si, &so);
	if (same)
		die_status(EXIT_STATUS_USAGE, "'%s' is an input too: opening it for writing "
		           "would empty it first", out);
}

const char *cli_nonempty(int opt, const char *what, const char *arg)
{
	if (!*arg)
		die_status(EXIT_STATUS_USAGE, "option '-%c' needs %s, not ''", opt, what);
	return arg;
}

const char *cli_output_file(int opt, const char *arg)
{
	return strcmp(cli_nonempty(opt, "a file name", arg), "-") ? arg : NULL;
}

int cli_is_stdout(const char *path)
{
	return !path || !strcmp(path, "-");
}

FILE *cli_open_out(const char *path)
{
	FILE *fp;

	if (cli_is_stdout(path))
		return stdout;
	if (!(fp = fopen(path, "w")))
		die("cannot open '%s':", path);
	return fp;
}

const char *cli_out_name(const char *path)
{
	return cli_is_stdout(path) ? "stdout" : path;
}

int cli_close_out(FILE *fp, const char *path)
{
	return fp == stdout ? 0 : util_fshut(fp, path);
}

/* Where an output will be: the file's device and inode where it exists (or standard output's,
 * path NULL), else its directory's with its name; 0 where neither can be found (fopen will
 * say why). A character device (a terminal, /dev/null) is shareable: 0 too. */
struct out_place {
	struct stat st;
	const char *base;       /* NULL: st is the file's own */
};

static int out_place(const char *path, struct out_place *o)
{
	char dir[4096];
	const char *slash;

	o->base = NULL;
	if (!path ? !fstat(1, &o->st) : !stat(path, &o->st))
		return !S_ISCHR(o->st.st_mode) && !S_ISBLK(o->st.st_mode);
	if (!path || errno != ENOENT)
		return 0;
	if (!(slash = strrchr(path, '/')))
		strcpy(dir, ".");
	else if ((size_t)(slash - path) < sizeof dir)
		snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
	else
		return 0;
	o->base = slash ? slash + 1 : path;
	return !stat(dir, &o->st);
}

static int same_place(const struct out_place *a, const struct out_place *b)
{
	if (!same_file(&a->st, &b->st) || !a->base != !b->base)
		return 0;
	return !a->base || !strcmp(a->base, b->base);
}

void cli_outputs_distinct(int n, const char *const opt[], const char *const path[])
{
	struct out_place a, b;

	for (int i = 0; i < n; i++) {
		if (!opt[i] || !out_place(path[i], &a))
			continue;
		for (int j = i + 1; j < n; j++) {
			if (!opt[j] || !out_place(path[j], &b) || !same_place(&a, &b))
				continue;
			if (!path[i] || !path[j])
				die_status(EXIT_STATUS_USAGE, "%s '%s' is standard output too: the two "
				           "would overwrite or split each other's records", opt[path[i] ? i : j],
				           path[i] ? path[i] : path[j] ? path[j] : "-");
			die_status(EXIT_STATUS_USAGE, "%s '%s' and %s '%s' are one file: the two would "
			           "overwrite each other's records", opt[i], path[i], opt[j], path[j]);
		}
	}
}

static FILE *write_failed[8];    /* streams whose write error was reported already */

void util_write_failed(FILE *fp)
{
	for (int i = 0; i < 8; i++)
		if (!write_failed[i] || write_failed[i] == fp) {
			write_failed[i] = fp;
			return;
		}
}

static int write_told(FILE *fp)
{
	for (int i = 0; i < 8; i++)
		if (write_failed[i] == fp)
			return 1;
	return 0;
}

/* "write error on NAME: reason", or without a reason where errno holds none (an error flag
 * alone, set by an earlier write nobody reported) */
static void write_error(const char *name, int known)
{
	if (known)
		warn_msg("write error on %s:", name);
	else
		warn_msg("write error on %s", name);
}

int util_fcheck(FILE *fp, const char *name)
{
	int e = errno;

	if (fflush(fp))
		e = errno;
	else if (!ferror(fp))
		return 0;
	if (write_told(fp))
		return -1;
	errno = e;
	write_error(name, e != 0);
	util_write_failed(fp);
	return -1;
}

int util_fshut(FILE *fp, const char *name)
{
	int ret = 0, told = 0, fl;

	for (int i = 0; i < 8; i++)
		if (write_failed[i] == fp) {
			write_failed[i] = NULL;
			told = 1;
			ret = -1;
		}
	errno = 0;
	fl = fflush(fp);
	if ((fl || ferror(fp)) && !told) {
		write_error(name, fl != 0);     /* a failed flush has its errno, a flag alone none */
		ret = -1;
	}
	if (fclose(fp) && !ret) {
		warn_msg("cannot close %s:", name);
		ret = -1;
	}
	return ret;
}

unsigned long long util_hash64(const void *p, size_t n)
{
	const unsigned char *s = p;
	unsigned long long h = 1469598103934665603ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

int util_env_zero(const char *name)
{
	const char *e = getenv(name);
	return e && e[0] == '0' && !e[1];
}

const char *util_env(const char *name, const char *dflt)
{
	const char *e = getenv(name);
	return e && *e ? e : dflt;
}

const char *util_sharedir(void)
{
	static char *dir;
	char exe[4096], *slash;
	ssize_t n;
	struct stat st;

	if (dir)
		return dir;
	if (util_env("DICE_SHARE", NULL))
		return dir = xstrdup(util_env("DICE_SHARE", NULL));
	n = readlink("/proc/self/exe", exe, sizeof exe - 32);
	if (n > 0) {
		exe[n] = '\0';
		/* <root>/bin/prog or <root>/tests/bin/prog: look for <root>/share/prompts */
		for (int up = 0; up < 3 && (slash = strrchr(exe, '/')); up++) {
			*slash = '\0';
			char *cand = xasprintf("%s/share/prompts", exe);
			int ok = stat(cand, &st) == 0 && S_ISDIR(st.st_mode);
			free(cand);
			if (ok)
				return dir = xasprintf("%s/share", exe);
		}
	}
	return dir = xstrdup(DICE_SHAREDIR);
}
