/* input: operands as byte streams: plain files and stdin directly, compressed files and
 * archives through libarchive (filters: all; formats: tar, zip, 7z, cpio, raw). See input.h. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "input.h"
#include "util.h"

enum { INPUT_FRESH, INPUT_PLAIN_OUT, INPUT_ARCHIVE, INPUT_DONE };
enum { INNER_BUF = 1 << 16 };

#define ARCHIVE_CHECK(in, r, what) \
	do { if ((r) < ARCHIVE_WARN) { \
		warn_msg("%s: %s: %s", (in)->name, (what), ar_error((in)->ar)); \
		return -1; } } while (0)

/* libarchive's message, or a stand-in where it has none (a gzip file cut in its trailer) */
static const char *ar_error(struct archive *a)
{
	const char *s = archive_error_string(a);
	return s ? s : "damaged or truncated data";
}

/* After a failed archive_read_open: 1 where a decompressor took the stream and no format
 * took what it gave: no bytes (the raw reader takes any others). An empty input, such as
 * `gzip </dev/null`, not a bad one. (EILSEQ: libarchive's ARCHIVE_ERRNO_FILE_FORMAT on a
 * system without EFTYPE, not exported by archive.h.) */
static int ar_empty(struct archive *a)
{
	return archive_errno(a) == EILSEQ && archive_filter_count(a) > 1;
}

static la_ssize_t ar_read_cb(struct archive *a, void *arg, const void **buf)
{
	struct input *in = arg;
	size_t n = fread(in->rbuf, 1, sizeof in->rbuf, in->raw);

	(void)a;
	*buf = in->rbuf;
	if (n == 0 && ferror(in->raw))
		return -1;
	return (la_ssize_t)n;
}

/* an archive member's bytes, for the decompressor that reads it (inner) */
static la_ssize_t inner_read_cb(struct archive *a, void *arg, const void **buf)
{
	struct input *in = arg;

	(void)a;
	*buf = in->mbuf;
	return archive_read_data(in->ar, in->mbuf, INNER_BUF);
}

static ssize_t member_read(void *cookie, char *buf, size_t size)
{
	struct input *in = cookie;
	la_ssize_t n = archive_read_data(in->inner ? in->inner : in->ar, buf, size);

	if (n < 0) {
		errno = EIO;
		return -1;
	}
	return (ssize_t)n;
}

/* stdio reads st_blksize (often 4 KiB) per read(2), so a stream of 4 KB records costs one
 * system call per record; 64 KiB buffers cut that 16-fold (bench/cuke-filter.sh: about a
 * quarter of a fast filter's time). stdin gets a static buffer once, before its first read. */
enum { INPUT_IOBUF = 1 << 16 };
static char stdin_iobuf[INPUT_IOBUF];
static int stdin_iobuf_set;

static int (*idle_fn)(int fd, void *arg);
static void *idle_arg;

void input_set_idle(int (*fn)(int fd, void *arg), void *arg)
{
	idle_fn = fn;
	idle_arg = fn ? arg : NULL;
}

/* The waiting stream's reads: the idle hook's turns while the descriptor has nothing, then
 * one read(2) (its error, if any, is the stream's) */
static ssize_t idle_read(void *cookie, char *buf, size_t size)
{
	struct input *in = cookie;
	struct pollfd pf = { .fd = fileno(in->under), .events = POLLIN };
	int r;

	while (idle_fn && (r = poll(&pf, 1, 0)) <= 0) {
		if (r < 0 && errno != EINTR)
			break;
		if (r == 0 && idle_fn(pf.fd, idle_arg) < 0)
			return 0;
	}
	return read(pf.fd, buf, size);
}

/* With an idle hook, a pipe, FIFO or terminal is read through a waiting stream; a regular
 * file always has its bytes at hand */
static void wrap_idle(struct input *in)
{
	static const cookie_io_functions_t io = { .read = idle_read };
	struct stat st;

	if (!idle_fn || fstat(fileno(in->raw), &st) < 0 || S_ISREG(st.st_mode))
		return;
	in->under = in->raw;
	if (!(in->raw = fopencookie(in, "r", io)))
		BUG("fopencookie failed");
}

static const char *tree_opt;    /* the program's option that reads a KernelBench tree */

void input_set_tree_option(const char *opt)
{
	tree_opt = opt;
}

/* 1 where dir looks like a KernelBench tree: a levelN/ folder with a .py file in it, in dir
 * or, with depth 1, in one of its folders (a checkout holds its tree in KernelBench/).
 * in_level: dir is such a folder, which a .py file in it answers for. */
static int looks_like_tree(const char *dir, int depth, int in_level)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int yes = 0;

	if (!d)
		return 0;
	while (!yes && (de = readdir(d))) {
		const char *s = de->d_name;
		size_t n = strlen(s), i = 5;
		if (in_level) {
			yes = n > 3 && !strcmp(s + n - 3, ".py");
			continue;
		}
		int level = !strncmp(s, "level", 5);
		while (level && isdigit((unsigned char)s[i]))
			i++;
		level = level && i > 5 && !s[i];
		if (s[0] == '.' || (!level && depth <= 0))
			continue;
		char *sub = xasprintf("%s/%s", dir, s);
		struct stat st;
		if (!stat(sub, &st) && S_ISDIR(st.st_mode))
			yes = looks_like_tree(sub, depth - 1, level);
		free(sub);
	}
	closedir(d);
	return yes;
}

int input_open(struct input *in, const char *path)
{
	int c;

	memset(in, 0, sizeof *in);
	in->path = path;
	if (!strcmp(path, "-")) {
		in->name = xstrdup("<stdin>");
		in->raw = stdin;
	} else {
		in->name = xstrdup(path);
		struct stat st;
		if (!(in->raw = fopen(path, "rb")) ||
		    (!fstat(fileno(in->raw), &st) && S_ISDIR(st.st_mode) && (errno = EISDIR))) {
			if (errno == EISDIR && tree_opt && looks_like_tree(path, 1, 0))
				warn_msg("cannot open '%s': %s (a KernelBench tree? use %s DIR)", path,
				         strerror(EISDIR), tree_opt);
			else
				warn_msg("cannot open '%s':", path);   /* a directory: "Is a directory" */
			if (in->raw)
				fclose(in->raw);
			free(in->name);
			in->name = NULL;
			return -1;
		}
	}
	wrap_idle(in);
	if (in->raw != stdin) {
		in->iobuf = xmalloc(INPUT_IOBUF);
		setvbuf(in->raw, in->iobuf, _IOFBF, INPUT_IOBUF);
	} else if (!stdin_iobuf_set++) {
		setvbuf(stdin, stdin_iobuf, _IOFBF, sizeof stdin_iobuf);
	}
	errno = 0;
	c = getc(in->raw);
	if (c == EOF && ferror(in->raw)) {      /* stdin a directory, a failing device */
		warn_msg("cannot read '%s':", in->name);
		input_close(in);
		return -1;
	}
	if (c != EOF)
		ungetc(c, in->raw);
	if (c == EOF || c == '{' || c == '[' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
		in->fp = in->raw;
		return 0;
	}
	in->ar = archive_read_new();
	archive_read_support_filter_all(in->ar);
	/* not format_all: the mtree reader bids on ordinary text */
	archive_read_support_format_tar(in->ar);
	archive_read_support_format_gnutar(in->ar);
	archive_read_support_format_zip(in->ar);
	archive_read_support_format_7zip(in->ar);
	archive_read_support_format_cpio(in->ar);
	archive_read_support_format_raw(in->ar);
	if (archive_read_open(in->ar, in, NULL, ar_read_cb, NULL) != ARCHIVE_OK) {
		if (ar_empty(in->ar)) {
			in->state = INPUT_DONE;         /* no member to read */
			return 0;
		}
		warn_msg("%s: cannot read: %s", in->name, ar_error(in->ar));
		input_close(in);
		return -1;
	}
	in->state = INPUT_ARCHIVE;
	return 0;
}

/* The current member through the decompression filters (a plain member passes as it is):
 * 0; 1 where it decompresses to nothing; -1 with a message */
static int open_inner(struct input *in)
{
	struct archive_entry *e;

	if (!in->mbuf)
		in->mbuf = xmalloc(INNER_BUF);
	in->inner = archive_read_new();
	/* the compressors, not filter_all: uuencode would bid on a text member's "begin " */
	archive_read_support_filter_gzip(in->inner);
	archive_read_support_filter_bzip2(in->inner);
	archive_read_support_filter_xz(in->inner);
	archive_read_support_filter_lzma(in->inner);
	archive_read_support_filter_zstd(in->inner);
	archive_read_support_filter_lz4(in->inner);
	archive_read_support_filter_compress(in->inner);
	archive_read_support_format_raw(in->inner);
	if (archive_read_open(in->inner, in, NULL, inner_read_cb, NULL) != ARCHIVE_OK) {
		if (ar_empty(in->inner))
			return 1;
		warn_msg("%s: cannot read: %s", in->name, ar_error(in->inner));
		return -1;
	}
	if (archive_read_next_header(in->inner, &e) != ARCHIVE_OK) {
		warn_msg("%s: cannot read: %s", in->name, ar_error(in->inner));
		return -1;
	}
	return 0;
}

int input_next(struct input *in)
{
	struct archive_entry *e;
	int r;

	if (in->state == INPUT_FRESH) {
		in->state = INPUT_PLAIN_OUT;
		return 1;
	}
	if (in->state != INPUT_ARCHIVE)
		return 0;
	if (in->fp) {
		fclose(in->fp);
		in->fp = NULL;
	}
	if (in->inner) {
		archive_read_free(in->inner);
		in->inner = NULL;
	}
	for (;;) {
		r = archive_read_next_header(in->ar, &e);
		if (r == ARCHIVE_EOF) {
			in->state = INPUT_DONE;
			return in->bad_member ? -1 : 0;
		}
		ARCHIVE_CHECK(in, r, "cannot read archive");
		if (archive_format(in->ar) == ARCHIVE_FORMAT_RAW) {
			in->is_raw = 1;
			in->member = NULL;
		} else {
			if (archive_entry_filetype(e) != AE_IFREG)
				continue;
			free(in->member_buf);
			in->member_buf = xstrdup(archive_entry_pathname(e) ? archive_entry_pathname(e) : "?");
			in->member = in->member_buf;
			free(in->name);
			in->name = xasprintf("%s:%s", !strcmp(in->path, "-") ? "<stdin>" : in->path,
			                     in->member);
			/* (the raw reader refuses empty data) */
			if ((!archive_entry_size_is_set(e) || archive_entry_size(e) > 0) &&
			    (r = open_inner(in)) != 0) {
				archive_read_free(in->inner);   /* reported; the next members still count */
				in->inner = NULL;
				in->bad_member |= r < 0;        /* (1: it decompresses to nothing) */
				continue;
			}
		}
		break;
	}
	static const cookie_io_functions_t io = { .read = member_read };
	in->fp = fopencookie(in, "r", io);
	if (!in->fp)
		BUG("fopencookie failed");
	return 1;
}

void input_close(struct input *in)
{
	if (in->ar) {
		if (in->fp)
			fclose(in->fp);
		if (in->inner)
			archive_read_free(in->inner);
		archive_read_free(in->ar);
	}
	free(in->mbuf);
	if (in->raw && in->raw != stdin)
		fclose(in->raw);
	if (in->under && in->under != stdin)
		fclose(in->under);
	free(in->iobuf);
	free(in->name);
	free(in->member_buf);
	memset(in, 0, sizeof *in);
	in->state = INPUT_DONE;
}

const char *input_error(const struct input *in)
{
	if (in->ar)
		return ar_error(in->inner ? in->inner : in->ar);
	return strerror(errno ? errno : EIO);
}

/* input_each_file and input_each_py: each stream's text (util_text), with py its line endings LF */
static int each_stream(const char *path, int py,
                       int (*fn)(const char *name, const char *data, size_t len, void *arg),
                       void *arg)
{
	struct input in;
	size_t len;
	char *data;
	int r, ret = 0;

	if (input_open(&in, path) < 0)
		return -1;
	while ((r = input_next(&in)) > 0) {
		if (!(data = util_read_all(in.fp, &len))) {
			warn_msg("%s: read error: %s", in.name, input_error(&in));
			ret = -1;
			break;
		}
		const char *text = util_text(data, &len, py);
		ret = fn(in.name, text, len, arg);
		free(data);
		if (ret)
			break;
	}
	if (r < 0)
		ret = -1;
	input_close(&in);
	return ret;
}

int input_each_file(const char *path,
                    int (*fn)(const char *name, const char *data, size_t len, void *arg),
                    void *arg)
{
	return each_stream(path, 0, fn, arg);
}

int input_each_py(const char *path,
                  int (*fn)(const char *name, const char *data, size_t len, void *arg),
                  void *arg)
{
	return each_stream(path, 1, fn, arg);
}

struct one_file {
	const char *opt;
	char *text, *name;
	size_t len;
};

static int one_stream(const char *name, const char *data, size_t len, void *arg)
{
	struct one_file *o = arg;

	if (o->text) {
		warn_msg("%s: a second file in the %s archive (%s reads one file)", name, o->opt,
		         o->opt);
		return -1;
	}
	o->text = xstrndup(data, len);
	o->len = len;
	o->name = xstrdup(name);
	return 0;
}

char *input_one_file(const char *path, const char *opt, int py, size_t *len, char **name)
{
	struct one_file o = { .opt = opt };
	const char *topt = tree_opt;
	int r;

	tree_opt = NULL;        /* an option's file, not an operand: no hint */
	r = each_stream(path, py, one_stream, &o);
	tree_opt = topt;
	if (r != 0) {
		free(o.text);
		free(o.name);
		return NULL;
	}
	if (!o.text) {          /* an empty archive */
		o.text = xstrdup("");
		o.name = xstrdup(strcmp(path, "-") ? path : "<stdin>");
	}
	if (len)
		*len = o.len;
	if (name)
		*name = o.name;
	else
		free(o.name);
	return o.text;
}

int input_stdin_twice(const char *opt, const char *path, char *const *ops, int n)
{
	int records = n == 0;

	if (strcmp(path, "-"))
		return 0;
	for (int i = 0; i < n; i++)
		records |= !strcmp(ops[i], "-");
	if (records)
		warn_msg("%s - reads standard input, which the records come from too", opt);
	return records;
}

int input_is_py(const char *path)
{
	static const char *const ends[] = { ".py", ".py.gz", ".py.xz", ".py.zst", ".py.bz2" };
	size_t n = strlen(path);

	for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
		size_t m = strlen(ends[i]);
		if (n > m && !strcmp(path + n - m, ends[i]))
			return 1;
	}
	return 0;
}
