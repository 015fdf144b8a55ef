/* test_core: util (numbers, buffers, UTF-8), jsonl (reader, pass-through writer, reals
 * printed short, operand loop), input (plain, compressed, archives) and atomfile on data
 * written here at run time. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomfile.h"
#include "input.h"
#include "jsonl.h"
#include "rng.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/dice-test-core-XXXXXX";

static void write_file(const char *name, const char *text)
{
	char *p = xasprintf("%s/%s", tmpdir, name);
	FILE *fp = fopen(p, "wb");
	fputs(text, fp);
	fclose(fp);
	free(p);
}

static int sh(const char *fmt, const char *arg)
{
	char *cmd = xasprintf(fmt, tmpdir, arg, arg);
	int r = system(cmd);
	free(cmd);
	return r;
}

struct collect {
	struct buf ids;
	int bad;
};

static int on_rec(json_t *rec, struct jsonl_reader *r, void *arg)
{
	struct collect *c = arg;
	buf_addf(&c->ids, "%s@%zu;", json_get_str(rec, "id") ? json_get_str(rec, "id") : "?",
	         r->lineno);
	json_decref(rec);
	return 0;
}

static void on_bad(struct jsonl_reader *r, void *arg)
{
	struct collect *c = arg;
	c->bad++;
	buf_addf(&c->ids, "BAD@%zu;", r->lineno);
}

static void test_util(void)
{
	long l;
	double d;
	struct buf b;

	CHECK(parse_long("42", 0, 100, &l) == 0 && l == 42, "parse_long ok");
	CHECK(parse_long("42x", 0, 100, &l) < 0, "parse_long rejects trailing junk");
	CHECK(parse_long("101", 0, 100, &l) < 0, "parse_long range");
	CHECK(parse_long("", 0, 100, &l) < 0, "parse_long empty");
	CHECK(parse_double("2.5", 0, 10, &d) == 0 && d == 2.5, "parse_double ok");
	CHECK(parse_double("nan", 0, 10, &d) < 0, "parse_double nan");
	CHECK(parse_long(" 2", 0, 100, &l) < 0 && parse_double(" 2", 0, 10, &d) < 0,
	      "parse_long, parse_double: leading white space refused");
	CHECK(parse_double("0x1", 0, 10, &d) < 0 && parse_double("inf", 0, HUGE_VAL, &d) < 0,
	      "parse_double: hexadecimal and infinity spellings refused");
	CHECK(parse_double("-1.5e-3", -1, 1, &d) == 0 && d == -1.5e-3 &&
	      parse_long("-7", -10, 10, &l) == 0 && l == -7, "parse_double, parse_long: signs, exponents");
	int hex_ok = 1;
	for (int c = -128; c < 256; c++) {
		const char *at = c > 0 ? strchr("0123456789abcdef", tolower(c)) : NULL;
		hex_ok &= util_hexval(c) == (at ? (int)(at - "0123456789abcdef") : -1);
	}
	CHECK(hex_ok, "util_hexval: 0-9, a-f, A-F, -1 for every other byte, signed or not");
	buf_init(&b);
	for (int i = 0; i < 1000; i++)
		buf_addf(&b, "%d,", i);
	CHECK(b.len == strlen(b.p) && !strncmp(b.p, "0,1,2,", 6), "buf grows");
	buf_reset(&b);
	CHECK(utf8_valid("h\xc3\xa9llo", 6), "utf8 valid");
	CHECK(!utf8_valid("h\xc3llo", 5), "utf8 truncated sequence");
	CHECK(!utf8_valid("\xed\xa0\x80", 3), "utf8 surrogate");
	CHECK(!utf8_valid("\xc0\xaf", 2), "utf8 overlong");
	CHECK(utf8_repair(&b, "a\xff" "b\xc3", 4) == 2 && !strcmp(b.p, "a\xef\xbf\xbd" "b\xef\xbf\xbd"),
	      "utf8 repair");
	buf_free(&b);
}

static void test_writer(void)
{
	struct jsonl_writer w;
	struct jsonl_reader r;
	char *mem = NULL;
	size_t memlen = 0;
	FILE *fp = open_memstream(&mem, &memlen);
	const char *line = "{\"b\": 1.50, \"a\":[1, 2],\"unknown\":{\"x\":1e3}}  ";
	json_t *rec, *val = json_pack("{s:b}", "ok", 1);

	jsonl_writer_init(&w, fp, "mem", 0);
	FILE *in = fmemopen((void *)line, strlen(line), "r");
	jsonl_reader_init(&r, in, "mem");
	CHECK(jsonl_read(&r, &rec) == JSONL_RECORD, "read one record");
	jsonl_write_added(&w, r.line, r.len, rec, "added", val);
	json_decref(rec);
	fclose(in);
	jsonl_reader_free(&r);
	/* the key there already (twice, once escaped): left out, every other member's bytes
	 * kept, the new one last */
	const char *old = " {\"added\" : [1, {\"}\":\"\\\"}\"}], \"b\": 1.50,\"add\\u0065d\":2 ,\"c\":1e3}";
	in = fmemopen((void *)old, strlen(old), "r");
	jsonl_reader_init(&r, in, "mem");
	CHECK(jsonl_read(&r, &rec) == JSONL_RECORD, "read a record holding the key");
	jsonl_write_added(&w, r.line, r.len, rec, "added", val);
	json_decref(rec);
	fclose(in);
	jsonl_reader_free(&r);
	rec = json_object();
	jsonl_write_added(&w, "{}", 2, rec, "k", val);
	json_decref(rec);
	json_decref(val);
	fclose(fp);
	jsonl_writer_free(&w);
	CHECK_STR(mem,
	          "{\"b\": 1.50, \"a\":[1, 2],\"unknown\":{\"x\":1e3},\"added\":{\"ok\":true}}\n"
	          "{\"b\": 1.50,\"c\":1e3,\"added\":{\"ok\":true}}\n"
	          "{\"k\":{\"ok\":true}}\n",
	          "pass-through splice, replace when present, empty object");
	free(mem);
}

/* jsonl_splice / jsonl_write_fields: several fields set at once (dice-sample's completion,
 * kernel and sample; dice-rl's reward records), one removed, the line's bytes kept (an id
 * past int64 too, which the reader holds as a double); with no line, the record with them
 * applied, rec itself unchanged */
static void test_fields(void)
{
	const char *line = "{\"kernel\":\"old\", \"id\" : 18446744073709551615,\"w\":1.50,"
	                   "\"completion\":\"c\" }";
	struct jsonl_reader r;
	json_t *rec, *c = json_string("new");
	struct jsonl_field f[3] = { { "completion", c }, { "kernel", NULL }, { "n", NULL } };
	struct buf b;
	FILE *in = fmemopen((void *)line, strlen(line), "r");

	f[2].val = json_integer(3);
	jsonl_reader_init(&r, in, "mem");
	CHECK(jsonl_read(&r, &rec) == JSONL_RECORD, "fields: read a record with an id past int64");
	buf_init(&b);
	jsonl_splice(&b, r.line, r.len, rec, f, 3);
	CHECK_STR(b.p, "{\"id\" : 18446744073709551615,\"w\":1.50,\"completion\":\"new\","
	          "\"n\":3}", "fields: old ones cut, one removed, two added, the id's bytes kept");
	buf_reset(&b);
	const char *plain = "{\"id\":18446744073709551615,\"w\":1.50}";
	json_t *prec = json_pack("{s:f,s:f}", "id", 18446744073709551615.0, "w", 1.5);
	jsonl_splice(&b, plain, strlen(plain), prec, f + 1, 2);
	json_decref(prec);
	CHECK_STR(b.p, "{\"id\":18446744073709551615,\"w\":1.50,\"n\":3}",
	          "fields: none of them there, the line kept whole");
	buf_reset(&b);
	json_t *built = json_pack("{s:s,s:s,s:i}", "kernel", "k", "id", "x", "n", 1);
	jsonl_splice(&b, NULL, 0, built, f, 3);
	CHECK_STR(b.p, "{\"id\":\"x\",\"n\":3,\"completion\":\"new\"}",
	          "fields: no line, the record re-serialised with them");
	CHECK(json_object_size(built) == 3 && json_object_get(built, "kernel"),
	      "fields: the record itself unchanged");
	json_decref(built);
	buf_free(&b);
	json_decref(rec);
	json_decref(c);
	json_decref(f[2].val);
	fclose(in);
	jsonl_reader_free(&r);
}

/* The bytes jsonl_write prints for rec, or, with key, the bytes jsonl_write_added prints
 * for line with key:val added (line NULL: its whole-record path); a string to free. */
static char *written(const char *line, json_t *rec, const char *key, json_t *val)
{
	struct jsonl_writer w;
	char *mem = NULL;
	size_t memlen = 0;
	FILE *fp = open_memstream(&mem, &memlen);

	jsonl_writer_init(&w, fp, "mem", 0);
	if (key)
		jsonl_write_added(&w, line, line ? strlen(line) : 0, rec, key, val);
	else
		jsonl_write(&w, rec);
	jsonl_writer_free(&w);
	fclose(fp);
	return mem;
}

/* written() against want; rec is read from line where there is one. Takes rec and val. */
static void check_written(const char *line, json_t *rec, const char *key, json_t *val,
                          const char *want, const char *what)
{
	if (line)
		rec = json_loads(line, 0, NULL);
	char *got = written(line, rec, key, val);
	CHECK_STR(got, want, what);
	free(got);
	json_decref(rec);
	json_decref(val);
}

/* Each real prints at the fewest digits that give it back, whatever its neighbours need. */
static void test_reals(void)
{
	check_written(NULL, json_pack("{s:f,s:f,s:f,s:f}", "a", 0.9, "b", 0.1, "c", 1e-06,
	                              "d", 2.5),
	              NULL, NULL, "{\"a\":0.9,\"b\":0.1,\"c\":1e-6,\"d\":2.5}\n",
	              "jsonl_write: 0.9 0.1 1e-06 2.5 short");
	check_written(NULL, json_pack("{s:f,s:f,s:f,s:f,s:f}", "a", 0.9, "b", 0.1, "c", 1e-06,
	                              "d", 2.5, "e", 0.12345678901234567),
	              NULL, NULL, "{\"a\":0.9,\"b\":0.1,\"c\":1e-6,\"d\":2.5,"
	              "\"e\":0.12345678901234566}\n",
	              "jsonl_write: a 17-digit real beside short ones: each its own digits");
	check_written(NULL, json_pack("{s:f,s:[i,{s:[f,f]}]}", "e", 0.12345678901234567, "x", 1,
	                              "y", 0.9, 0.1),
	              NULL, NULL, "{\"e\":0.12345678901234566,\"x\":[1,{\"y\":[0.9,0.1]}]}\n",
	              "jsonl_write: 17 first, nested short reals after it short");
	check_written(NULL, json_pack("{s:[i,{s:[f,f]}],s:f}", "x", 1, "y", 0.9, 0.1,
	                              "e", 0.12345678901234567),
	              NULL, NULL, "{\"x\":[1,{\"y\":[0.9,0.1]}],\"e\":0.12345678901234566}\n",
	              "jsonl_write: nested short reals, then one of 17 digits");
	check_written(NULL, json_pack("{s:f,s:f}", "a", 9007199254740992.0, "b", 0.9),
	              NULL, NULL, "{\"a\":9007199254740992.0,\"b\":0.9}\n",
	              "jsonl_write: 2^53 needs 16 digits, 0.9 is 0.9 at 16");
	check_written(NULL, json_pack("{s:[f,f,f,f,i]}", "v", 1e300, 5e-324, -0.0, 1.0, 7),
	              NULL, NULL, "{\"v\":[1e300,4.94065645841247e-324,-0.0,1.0,7]}\n",
	              "jsonl_write: 1e300, the least subnormal, -0.0, 1.0 at 15");
	check_written(NULL, json_pack("{s:f,s:f}", "v", 123456789012345678.0, "w", 0.9),
	              NULL, NULL, "{\"v\":1.2345678901234568e17,\"w\":0.9}\n",
	              "jsonl_write: 123456789012345678.0 needs 17");
	check_written(NULL, json_pack("{s:f}", "v", 1.7976931348623157e308),
	              NULL, NULL, "{\"v\":1.7976931348623157e308}\n",
	              "jsonl_write: the largest double needs 17 (at 15 it reads back as inf)");

	/* jsonl_write_added: the line's bytes as they were, the added value short */
	check_written("{\"id\":1, \"x\":0.90000000000000002}", NULL, "added",
	              json_pack("{s:f,s:[f,f,f]}", "t", 0.9, "l", 0.1, 1e-06, 2.5),
	              "{\"id\":1, \"x\":0.90000000000000002,"
	              "\"added\":{\"t\":0.9,\"l\":[0.1,1e-6,2.5]}}\n",
	              "jsonl_write_added: the added value short, the line's bytes kept");
	check_written("{\"id\":1}", NULL, "added",
	              json_pack("{s:f,s:f}", "t", 0.9, "e", 0.12345678901234567),
	              "{\"id\":1,\"added\":{\"t\":0.9,\"e\":0.12345678901234566}}\n",
	              "jsonl_write_added: a 17-digit real beside a short one");
	check_written("{\"id\":1}", NULL, "t", json_real(0.9), "{\"id\":1,\"t\":0.9}\n",
	              "jsonl_write_added: a bare real added");
	check_written("{\"id\":1}", NULL, "v",
	              json_pack("[f,f,f,f]", 1e300, 5e-324, -0.0, 1.0),
	              "{\"id\":1,\"v\":[1e300,4.94065645841247e-324,-0.0,1.0]}\n",
	              "jsonl_write_added: 1e300, the least subnormal, -0.0, 1.0 at 15");
	check_written("{\"id\":1}", NULL, "v", json_real(123456789012345678.0),
	              "{\"id\":1,\"v\":1.2345678901234568e17}\n",
	              "jsonl_write_added: 123456789012345678.0 needs 17");
	/* no line to splice into: the whole record, at the digits its reals need */
	check_written(NULL, json_pack("{s:f}", "a", 0.1), "t", json_real(0.9),
	              "{\"a\":0.1,\"t\":0.9}\n", "jsonl_write_added whole: 0.1 and 0.9 short");
	check_written(NULL, json_pack("{s:f}", "a", 0.12345678901234567), "t", json_real(0.9),
	              "{\"a\":0.12345678901234566,\"t\":0.9}\n",
	              "jsonl_write_added whole: the record's 17-digit real, the added one short");
}

/* jsonl_dumps: strings (with quotes, backslashes and digits in them) and integers as
 * jansson wrote them, each real shortened */
static void test_dumps(void)
{
	json_t *v = json_pack("{s:s,s:[i,f,f],s:s,s:f}", "k\"1.5", "a\\\"2.5e3\\", "n", -3,
	                      -2.5e-07, 0.30000000000000004, "e", "", "z", -0.9);
	char *got = jsonl_dumps(v);

	CHECK_STR(got, "{\"k\\\"1.5\":\"a\\\\\\\"2.5e3\\\\\",\"n\":[-3,-2.5e-7,"
	          "0.30000000000000004],\"e\":\"\",\"z\":-0.9}",
	          "jsonl_dumps: strings and integers kept, reals short");
	free(got);
	json_decref(v);
	v = json_real(0.9);
	got = jsonl_dumps(v);
	CHECK_STR(got, "0.9", "jsonl_dumps: a bare real");
	free(got);
	json_decref(v);
}

/* Random reals: any double's bits come back from what jsonl_write prints, and a normal
 * double read from a decimal of 15 digits or fewer prints as jansson prints it at 15. */
static void test_reals_random(void)
{
	struct rng g;
	int lost = 0, longer = 0;

	rng_seed(&g, 7);
	for (int i = 0; i < 10000; i++) {
		uint64_t u = rng_u64(&g);
		double x, y, gx, gy;
		char d[32];

		memcpy(&x, &u, sizeof x);
		snprintf(d, sizeof d, "%.*g", 1 + (int)rng_below(&g, 15), x);
		y = strtod(d, NULL);
		if (!isfinite(x) || !isfinite(y) || fpclassify(y) == FP_SUBNORMAL)
			continue;
		json_t *rec = json_pack("{s:[f],s:f}", "y", y, "x", x);
		char *got = written(NULL, rec, NULL, NULL);
		char *at15 = json_dumps(json_object_get(rec, "y"), JSON_COMPACT | JSON_REAL_PRECISION(15));
		if (strncmp(got + 5, at15, strlen(at15)))   /* {"y":[...] beside any x */
			longer++;
		free(at15);
		json_t *back = json_loads(got, 0, NULL);
		gx = json_real_value(json_object_get(back, "x"));
		gy = json_real_value(json_array_get(json_object_get(back, "y"), 0));
		if (memcmp(&gx, &x, sizeof x) || memcmp(&gy, &y, sizeof y))
			lost++;
		free(got), json_decref(back), json_decref(rec);
	}
	CHECK(!lost, "jsonl_write: 10000 random doubles read back bit for bit");
	CHECK(!longer, "jsonl_write: normal doubles of 15 digits or fewer print at 15, beside any");
}

static void test_inputs(void)
{
	const char *text = "{\"id\":\"a\"}\n\n{bad\n[1]\n{\"id\":\"b\"}\n{\"id\":\"\xff\"}\n{\"id\":\"c\"}";
	const char *want = "a@1;BAD@3;BAD@4;b@5;BAD@6;c@7;";
	static const char *formats[][2] = {
		{ "plain.jsonl", "true" },
		{ "gz.jsonl.gz", "gzip -c %s/plain.jsonl > %s/gz.jsonl.gz" },
		{ "zst.jsonl.zst", "zstd -q -c %s/plain.jsonl > %s/zst.jsonl.zst" },
		{ "xz.jsonl.xz", "xz -c %s/plain.jsonl > %s/xz.jsonl.xz" },
		{ "bz.jsonl.bz2", "bzip2 -c %s/plain.jsonl > %s/bz.jsonl.bz2" },
	};
	write_file("plain.jsonl", text);
	for (size_t i = 0; i < ARRAY_LEN(formats); i++) {
		char *path = xasprintf("%s/%s", tmpdir, formats[i][0]);
		char *cmd = xasprintf(formats[i][1], tmpdir, tmpdir);
		struct collect c = { .bad = 0 };
		char *ops[] = { path };
		int r;

		if (system(cmd) != 0) {
			printf("ok - %s # SKIP compressor missing\n", formats[i][0]);
			free(path), free(cmd);
			continue;
		}
		buf_init(&c.ids);
		r = jsonl_each(ops, 1, on_rec, on_bad, &c);
		char *what = xasprintf("%s: every record and every bad line, in order", formats[i][0]);
		CHECK_STR(c.ids.p, want, what);
		CHECK(r == 1 && c.bad == 3, "malformed lines make the loop return 1");
		free(what), free(path), free(cmd);
		buf_free(&c.ids);
	}

	/* archives: members in order, directories skipped */
	write_file("m1.jsonl", "{\"id\":\"m1\"}\n");
	write_file("m2.jsonl", "{\"id\":\"m2\"}\n{\"id\":\"m2b\"}\n");
	CHECK(sh("cd %s && mkdir -p d && cp m2.jsonl d/ && tar cf t.tar m1.jsonl d && "
	         "tar czf t.tar.gz m1.jsonl d && zip -q -r t.zip m1.jsonl d", "") == 0,
	      "make archives");
	const char *arch[] = { "t.tar", "t.tar.gz", "t.zip" };
	for (size_t i = 0; i < ARRAY_LEN(arch); i++) {
		char *path = xasprintf("%s/%s", tmpdir, arch[i]);
		struct input in;
		struct buf names;
		int r;

		buf_init(&names);
		CHECK(input_open(&in, path) == 0, "open archive");
		while ((r = input_next(&in)) > 0) {
			size_t len;
			char *data = util_read_all(in.fp, &len);
			buf_addf(&names, "%s=%zu;", in.member ? in.member : "-", len);
			free(data);
		}
		input_close(&in);
		char *what = xasprintf("%s members in order", arch[i]);
		CHECK_STR(names.p, "m1.jsonl=12;d/m2.jsonl=25;", what);
		free(what), free(path);
		buf_free(&names);
	}
	struct input in;
	CHECK(input_open(&in, "/nonexistent/x.jsonl") < 0, "missing file fails to open");
	write_file("empty.jsonl", "");
	char *p = xasprintf("%s/empty.jsonl", tmpdir);
	struct collect c = { .bad = 0 };
	char *ops[] = { p };
	buf_init(&c.ids);
	CHECK(jsonl_each(ops, 1, on_rec, NULL, &c) == 0 && c.ids.len == 0, "empty input");
	buf_free(&c.ids);
	free(p);
}

/* input_set_idle: a pipe with nothing to read calls the hook, which here is the writer: each
 * call sends the next line, then closes the pipe. Every line is read as soon as it is there,
 * in order; a regular file never calls the hook; a hook that returns -1 ends the input. */
struct feeder {
	int fd;             /* the pipe's write end, -1 once closed */
	int calls, sent, stop_after;
	const char *const *lines;
	struct collect *c;
	size_t seen_at[8];  /* records collected when the hook was called */
};

static int feed_idle(int fd, void *arg)
{
	struct feeder *f = arg;
	const char *line = f->lines[f->sent];

	(void)fd;
	if (f->calls < 8)
		f->seen_at[f->calls] = f->c->ids.len;
	f->calls++;
	if (f->stop_after && f->calls > f->stop_after)
		return -1;
	if (line) {
		CHECK(write(f->fd, line, strlen(line)) == (ssize_t)strlen(line), "the feeder writes");
		f->sent++;
	} else if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	return 0;
}

static void test_idle(void)
{
	static const char *const lines[] = { "{\"id\":\"a\"}\n", "{\"id\":\"b\"}\n{\"id\":",
		"\"c\"}\n", NULL };
	for (int stop = 0; stop <= 1; stop++) {
		struct collect c = { .bad = 0 };
		struct feeder f = { .lines = lines, .c = &c, .stop_after = stop };
		int p[2];
		if (!CHECK(pipe(p) == 0, "pipe"))
			return;
		f.fd = p[1];
		char *path = xasprintf("/dev/fd/%d", p[0]);
		char *ops[] = { path };
		buf_init(&c.ids);
		input_set_idle(feed_idle, &f);
		int r = jsonl_each(ops, 1, on_rec, on_bad, &c);
		input_set_idle(NULL, NULL);
		if (!stop) {
			CHECK(r == 0 && c.ids.p && !strcmp(c.ids.p, "a@1;b@2;c@3;"),
			      "pipe: every line, in order, read while the writer holds it open");
			CHECK(f.calls == 4 && f.seen_at[1] == strlen("a@1;") &&
			      f.seen_at[3] == strlen("a@1;b@2;c@3;"),
			      "pipe: a record is handed out before the hook is called again");
		} else {
			CHECK(r == 0 && c.ids.p && !strcmp(c.ids.p, "a@1;") && f.calls == 2,
			      "pipe: a hook's -1 ends the input there");
		}
		if (f.fd >= 0)
			close(f.fd);
		close(p[0]);
		buf_free(&c.ids);
		free(path);
	}
	struct collect c = { .bad = 0 };
	struct feeder f = { .lines = lines, .c = &c, .fd = -1 };
	write_file("idle.jsonl", "{\"id\":\"a\"}\n");
	char *path = xasprintf("%s/idle.jsonl", tmpdir);
	char *ops[] = { path };
	buf_init(&c.ids);
	input_set_idle(feed_idle, &f);
	jsonl_each(ops, 1, on_rec, on_bad, &c);
	input_set_idle(NULL, NULL);
	CHECK(f.calls == 0 && c.ids.p && !strcmp(c.ids.p, "a@1;"), "a regular file never waits");
	buf_free(&c.ids);
	free(path);
}

/* A UTF-8 byte-order mark opening a stream (each operand, each archive member) is skipped,
 * by the JSONL reader and by json_load_file_bom; anywhere else it stays an error. */
static void test_bom(void)
{
	static const char bom[] = "\xEF\xBB\xBF";
	char *plain = xasprintf("%s/bom.jsonl", tmpdir), *gz = xasprintf("%s/bom.jsonl.gz", tmpdir);
	char *tar = xasprintf("%s/bom.tar", tmpdir), *blank = xasprintf("%s/bom-blank.jsonl", tmpdir);
	char *ops[] = { plain, blank, gz, tar };
	struct collect c = { .bad = 0 };
	struct jsonl_reader r;
	json_error_t je;
	json_t *v;

	char *text = xasprintf("%s{\"id\":\"a\"}\n%s{\"id\":\"b\"}\n{\"id\":\"c%s\"}\n", bom, bom, bom);
	write_file("bom.jsonl", text);
	free(text);
	text = xasprintf("%s\n{\"id\":\"d\"}\n", bom);
	write_file("bom-blank.jsonl", text);
	free(text);
	text = xasprintf("%s{\"id\":\"m\"}\n", bom);
	write_file("bom-m1.jsonl", text);
	write_file("bom-m2.jsonl", text);
	free(text);
	CHECK(sh("cd %s && gzip -c bom.jsonl > bom.jsonl.gz && tar cf bom.tar bom-m1.jsonl "
	         "bom-m2.jsonl", "") == 0, "bom: make the inputs");
	buf_init(&c.ids);
	CHECK(jsonl_each(ops, 4, on_rec, on_bad, &c) == 1 && c.bad == 2, "bom: two bad lines");
	CHECK_STR(c.ids.p, "a@1;BAD@2;c\xEF\xBB\xBF@3;d@2;a@1;BAD@2;c\xEF\xBB\xBF@3;m@1;m@1;",
	          "bom: skipped at each stream's start (a file, after it a blank line, gz, each "
	          "tar member), an error at a later line's start, kept inside a string");
	buf_free(&c.ids);

	/* the pass-through line carries no mark */
	FILE *fp = fopen(plain, "r");
	jsonl_reader_init(&r, fp, "bom.jsonl");
	CHECK(jsonl_read_line(&r) == JSONL_RECORD && r.len == 10 && !strcmp(r.line, "{\"id\":\"a\"}"),
	      "bom: r->line holds the record without the mark");
	jsonl_reader_free(&r);
	fclose(fp);

	text = xasprintf("%s{\"level1\": {\"1_ReLU.py\": {\"mean\": 1.5}}}\n", bom);
	write_file("bom.json", text);
	free(text);
	char *json = xasprintf("%s/bom.json", tmpdir);
	v = json_load_file_bom(json, 0, &je);
	CHECK(json_is_object(v) && json_object_get(json_object_get(v, "level1"), "1_ReLU.py"),
	      "json_load_file_bom: a file with a byte-order mark");
	json_decref(v);
	CHECK(!json_load_file_bom("/nonexistent/x.json", 0, &je) && je.line == -1 &&
	      strstr(je.text, "/nonexistent/x.json"), "json_load_file_bom: a missing file, "
	      "jansson's message");
	text = xasprintf("{\"a\":1}%s\n", bom);
	write_file("bom.json", text);
	free(text);
	CHECK(!json_load_file_bom(json, 0, &je) && je.line == 1, "json_load_file_bom: a mark after "
	      "the value is still an error");
	free(json), free(plain), free(gz), free(tar), free(blank);
}

/* atomfile: what it writes over. A regular file is replaced (no temporary file left); a
 * symbolic link's file is replaced and the link kept; /dev/null, /dev/full and a fifo are
 * written into, never replaced; a directory is an error; a dangling link's file made. */
static void test_atomfile(void)
{
	char err[256], *f = xasprintf("%s/af", tmpdir), *l = xasprintf("%s/af-link", tmpdir);
	char *fifo = xasprintf("%s/af-fifo", tmpdir), *dang = xasprintf("%s/af-dangling", tmpdir);
	char *made = xasprintf("%s/af-made", tmpdir), got[16] = { 0 };
	struct stat st;
	int fd, n;

	CHECK(atomfile_write(f, "one", 3, err, sizeof err) == 0 &&
	      atomfile_write(f, "two", 3, err, sizeof err) == 0, "atomfile: a file replaced");
	CHECK(sh("cd %s && test \"$(cat af)\" = two && ! ls af.tmp.* >/dev/null 2>&1", "") == 0,
	      "atomfile: the new bytes, no temporary file left");
	CHECK(symlink("af", l) == 0 && atomfile_write(l, "three", 5, err, sizeof err) == 0 &&
	      lstat(l, &st) == 0 && S_ISLNK(st.st_mode) &&
	      sh("test \"$(cat %s/af)\" = three", "") == 0,
	      "atomfile: through a link, its file replaced and the link kept");
	CHECK(atomfile_write("/dev/null", "x", 1, err, sizeof err) == 0 &&
	      stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "atomfile: /dev/null written into");
	if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
		CHECK(atomfile_write("/dev/full", "x", 1, err, sizeof err) < 0 &&
		      strstr(err, "No space left on device") && stat("/dev/full", &st) == 0 &&
		      S_ISCHR(st.st_mode), "atomfile: /dev/full fails with ENOSPC and stays a device");
	}
	CHECK(mkfifo(fifo, 0600) == 0 && (fd = open(fifo, O_RDWR | O_NONBLOCK)) >= 0 &&
	      atomfile_write(fifo, "pipe", 4, err, sizeof err) == 0 &&
	      (n = (int)read(fd, got, sizeof got - 1)) == 4 && !strcmp(got, "pipe") &&
	      stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode) && close(fd) == 0,
	      "atomfile: a fifo written into");
	CHECK(atomfile_write(tmpdir, "x", 1, err, sizeof err) < 0 && strstr(err, "Is a directory"),
	      "atomfile: a directory is an error");
	CHECK(symlink("af-made", dang) == 0 && atomfile_write(dang, "new", 3, err, sizeof err) == 0 &&
	      sh("test \"$(cat %s/af-made)\" = new", "") == 0 && lstat(dang, &st) == 0 &&
	      S_ISLNK(st.st_mode), "atomfile: a dangling link's file made");
	free(f), free(l), free(fifo), free(dang), free(made);
}

/* atomfile and util_signal_exit: a handler that ends the program at once (dice-sft's and
 * dice-rl's before training, during dice-sft --init's writes) removes the temporaries still
 * open, and only those: a child commits and aborts more files than the pending slots hold
 * (each slot freed again), then leaves one open and one written but not committed, and exits
 * through util_signal_exit. */
static void test_atomfile_signal(void)
{
	char *dir = xasprintf("%s/afsig", tmpdir);
	int status = -1;
	pid_t pid;

	if (mkdir(dir, 0755) < 0 || (pid = fork()) < 0) {
		CHECK(0, "atomfile_signal: setup");
		free(dir);
		return;
	}
	if (pid == 0) {
		char err[256];
		struct atomfile a, b;
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 2);            /* util_signal_exit's line */
		for (int i = 0; i < 40; i++) {
			char *p = xasprintf("%s/f%d", dir, i);
			if (atomfile_open(&a, p, err, sizeof err) < 0)
				_exit(3);
			if (i % 2)
				atomfile_abort(&a);
			else if (atomfile_commit(&a, err, sizeof err) < 0)
				_exit(4);
			free(p);
		}
		char *p = xasprintf("%s/open", dir), *q = xasprintf("%s/full", dir);
		if (atomfile_open(&a, p, err, sizeof err) < 0 ||
		    atomfile_open(&b, q, err, sizeof err) < 0 || fputs("data", b.fp) < 0 ||
		    fflush(b.fp) != 0)
			_exit(5);
		util_signal_exit(SIGTERM, "interrupted");
	}
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM,
	      "atomfile_signal: the child exits 128 + SIGTERM");
	CHECK(sh("cd %s/afsig && test \"$(ls | wc -l)\" = 20 && ! ls *.tmp.* >/dev/null 2>&1 && "
	         "! ls open full >/dev/null 2>&1", "") == 0,
	      "atomfile_signal: no temporary left, the committed files kept, nothing else made");
	free(dir);
}

/* warn_msg: every line of a message carries the program's name (a hint line too), a message's
 * own trailing line ends are dropped, a long message is whole, and a format ending in ':'
 * gets strerror(errno). */
static void test_messages(void)
{
	char *path = xasprintf("%s/stderr.txt", tmpdir), *long_msg = xmalloc(2001), *want, *got;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), saved = dup(2);
	size_t len;

	memset(long_msg, 'x', 2000);
	long_msg[2000] = 0;
	fflush(stderr);
	dup2(fd, 2);
	close(fd);
	warn_msg("a: bad\nhint: do b");
	warn_msg("trailing\n\n");
	warn_msg("%s", long_msg);
	errno = ENOENT;
	warn_msg("cannot open 'x':");
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	want = xasprintf("test_core: a: bad\ntest_core: hint: do b\ntest_core: trailing\n"
	                 "test_core: %s\ntest_core: cannot open 'x': %s\n", long_msg,
	                 strerror(ENOENT));
	got = util_read_file(path, &len);
	CHECK(got && !strcmp(got, want), "warn_msg: each line named, trailing ends dropped, long "
	      "messages whole, errno after ':'");
	free(got), free(want), free(long_msg), free(path);
}

int main(void)
{
	if (!mkdtemp(tmpdir))
		return 1;
	util_set_progname("test_core");
	test_util();
	test_messages();
	test_writer();
	test_fields();
	test_reals();
	test_reals_random();
	test_dumps();
	test_inputs();
	test_idle();
	test_bom();
	test_atomfile();
	test_atomfile_signal();
	sh("rm -rf %s", "");
	return test_done();
}
