/* test_core: util (numbers, buffers, UTF-8), jsonl (reader, pass-through writer, operand
 * loop) and input (plain, compressed, archives) on data written here at run time. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "input.h"
#include "jsonl.h"
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

int main(void)
{
	if (!mkdtemp(tmpdir))
		return 1;
	util_set_progname("test_core");
	test_util();
	test_writer();
	test_inputs();
	sh("rm -rf %s", "");
	return test_done();
}
