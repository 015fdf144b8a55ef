/* test_safetensors: write -> read round trips of every dtype, metadata and format checks,
 * sharded indexes, and hostile files (truncated, header past EOF, 2^60 header, bad JSON,
 * offsets outside, overlaps, shape/length mismatch, unknown dtypes, ...) which must each give
 * one clear error. Every fixture is written here at run time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops.h"
#include "safetensors.h"
#include "test.h"
#include "util.h"
#include "tmpdir.h"

static char err[1024];

/* A raw file: u64 header length (hlen, or strlen(header) when hlen < 0), header, data. */
static char *raw(const char *name, const char *header, long long hlen, const void *data,
                 size_t dlen)
{
	char *p = tmpdir_path(name);
	FILE *fp = fopen(p, "wb");
	uint64_t n = hlen < 0 ? strlen(header) : (uint64_t)hlen;
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(n >> (8 * i));
	fwrite(b, 1, 8, fp);
	fwrite(header, 1, strlen(header), fp);
	if (dlen)
		fwrite(data, 1, dlen, fp);
	fclose(fp);
	return p;
}

static void test_roundtrip(void)
{
	float f32[15], scalar = 3.25f;
	uint16_t bf[7], f16[6];
	struct st_wtensor t[5] = {
		{ "b.bf16", DICE_BF16, 1, { 7 }, bf },
		{ "a.f32", DICE_F32, 2, { 3, 5 }, f32 },
		{ "c.f16", DICE_F16, 2, { 2, 3 }, f16 },
		{ "d.scalar", DICE_F32, 0, { 0 }, &scalar },
		{ "e.empty", DICE_F32, 2, { 0, 4 }, NULL },
	};
	const char *meta[] = { "dice_format", "dice-test", "dice_format_version", "2" };
	char *p = tmpdir_path("rt.safetensors");
	struct safetensors st;
	const struct st_tensor *x;
	int ok = 1;

	for (int i = 0; i < 15; i++)
		f32[i] = (float)i * 0.5f - 3.0f;
	for (int i = 0; i < 7; i++)
		bf[i] = dice_f32_to_bf16((float)i - 2.5f);
	for (int i = 0; i < 6; i++)
		f16[i] = dice_f32_to_f16((float)i / 4.0f);
	CHECK(safetensors_write(p, t, 5, meta, 2, err, sizeof err) == 0, "write five tensors");
	CHECK(safetensors_open(&st, p, err, sizeof err) == 0, "read them back");
	if (st.ntensors != 5) {
		printf("# %s\n", err);
		return;
	}
	x = safetensors_find(&st, "a.f32");
	CHECK(x && x->dtype == DICE_F32 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 5 &&
	      x->nbytes == 60 && !memcmp(x->data, f32, 60), "F32 round trip");
	x = safetensors_find(&st, "b.bf16");
	CHECK(x && x->dtype == DICE_BF16 && x->ndim == 1 && x->nelem == 7 &&
	      !memcmp(x->data, bf, 14), "BF16 round trip");
	for (int i = 0; x && i < 7; i++)
		ok &= dice_bf16_to_f32(((const uint16_t *)x->data)[i]) == (float)i - 2.5f;
	CHECK(ok, "BF16 values");
	x = safetensors_find(&st, "c.f16");
	CHECK(x && x->dtype == DICE_F16 && !memcmp(x->data, f16, 12), "F16 round trip");
	x = safetensors_find(&st, "d.scalar");
	CHECK(x && x->ndim == 0 && x->nelem == 1 && *(const float *)x->data == 3.25f, "scalar");
	x = safetensors_find(&st, "e.empty");
	CHECK(x && x->nelem == 0 && x->nbytes == 0, "empty tensor");
	CHECK(!safetensors_find(&st, "zzz"), "absent name -> NULL");
	ok = 1;
	for (size_t i = 0; i < st.ntensors; i++)
		ok &= (uintptr_t)st.tensors[i].data % dice_dtype_size(st.tensors[i].dtype) == 0 &&
		      !st.tensors[i].owned;
	CHECK(ok, "every tensor aligned in place (4-byte dtypes laid out first)");
	CHECK_STR(safetensors_meta(&st, "dice_format"), "dice-test", "metadata read");
	CHECK(safetensors_check_format(&st, "dice-test", 2, err, sizeof err) == 0, "format ok");
	CHECK(safetensors_check_format(&st, "dice-test", 3, err, sizeof err) < 0 &&
	      strstr(err, "version 2") && strstr(err, "hint:"), "version mismatch has a hint");
	CHECK(safetensors_check_format(&st, "dice-adam", 2, err, sizeof err) < 0 &&
	      strstr(err, "not a 'dice-adam' file"), "format mismatch");
	safetensors_close(&st);

	/* the header is padded to a multiple of 8 */
	{
		FILE *fp = fopen(p, "rb");
		unsigned char b[8];
		uint64_t n = 0;
		CHECK(fp && fread(b, 1, 8, fp) == 8, "read header length");
		for (int i = 7; i >= 0; i--)
			n = n << 8 | b[i];
		CHECK(n % 8 == 0, "header length is a multiple of 8");
		if (fp)
			fclose(fp);
	}
	/* rewrite in place: atomic, no temp files left */
	t[1].shape[0] = 1;
	CHECK(safetensors_write(p, t, 2, NULL, 0, err, sizeof err) == 0, "overwrite");
	CHECK(safetensors_open(&st, p, err, sizeof err) == 0 && st.ntensors == 2 &&
	      safetensors_find(&st, "a.f32")->shape[0] == 1 && st.nmeta == 0, "overwritten file");
	safetensors_close(&st);
	{
		char *cmd = xasprintf("ls %s | grep -q tmp", tmpdir);
		CHECK(system(cmd) != 0, "no temporary file left behind");
		free(cmd);
	}
	free(p);
	p = xasprintf("%s/no/such/dir/x.safetensors", tmpdir);
	CHECK(safetensors_write(p, t, 1, NULL, 0, err, sizeof err) < 0 &&
	      strstr(err, "cannot create"), "write into a missing folder fails cleanly");
	free(p);
	p = tmpdir_path("dup.safetensors");
	t[1].name = "b.bf16";
	CHECK(safetensors_write(p, t, 2, NULL, 0, err, sizeof err) < 0 &&
	      strstr(err, "duplicate"), "duplicate names refused by the writer");
	CHECK(access(p, F_OK) != 0, "failed write leaves no file");
	free(p);
}

static void test_misaligned(void)
{
	unsigned char data[10] = { 0 };
	float v = 1.5f;
	struct safetensors st;
	const struct st_tensor *x;
	char *p;

	memcpy(data + 2, &v, 4);
	p = raw("mis.safetensors", "{\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
	        "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", -1, data, 6);
	CHECK(safetensors_open(&st, p, err, sizeof err) == 0, "misaligned file opens");
	x = safetensors_find(&st, "f");
	CHECK(x && (uintptr_t)x->data % 4 == 0 && *(const float *)x->data == 1.5f,
	      "misaligned F32 gets an aligned copy");
	safetensors_close(&st);
	free(p);
}

static void expect_error(const char *what, const char *path, const char *needle)
{
	struct safetensors st;
	int rc = safetensors_open(&st, path, err, sizeof err);

	if (!CHECK(rc < 0 && strstr(err, needle), what))
		printf("#   rc %d, err: %s\n", rc, err);
	if (rc == 0)
		safetensors_close(&st);
}

static void test_corrupt(void)
{
	unsigned char data[64] = { 0 };
	char *p;

	p = tmpdir_path("short.safetensors");
	tmpdir_write("short.safetensors", "abc");
	expect_error("truncated header (3-byte file)", p, "too short");
	free(p);
	p = tmpdir_path("empty.safetensors");
	tmpdir_write("empty.safetensors", "");
	expect_error("empty file", p, "too short");
	free(p);
	p = raw("past.safetensors", "{}", 1000, NULL, 0);
	expect_error("header length past EOF", p, "runs past the end");
	free(p);
	p = raw("huge.safetensors", "{}", 1LL << 60, NULL, 0);
	expect_error("header length 2^60", p, "runs past the end");
	free(p);
	p = raw("badjson.safetensors", "{\"a\": [1, 2", -1, NULL, 0);
	expect_error("bad JSON", p, "not a JSON object");
	free(p);
	p = raw("array.safetensors", "[1,2]", -1, NULL, 0);
	expect_error("header not an object", p, "not a JSON object");
	free(p);
	p = raw("dupkey.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, data, 4);
	expect_error("duplicate key", p, "not a JSON object");
	free(p);
	p = raw("outside.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
	        "\"data_offsets\":[0,16]}}", -1, data, 8);
	expect_error("offsets outside the file", p, "tensor 'w': data_offsets [0, 16] outside");
	free(p);
	p = raw("neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
	        "\"data_offsets\":[-4,0]}}", -1, data, 8);
	expect_error("negative offset", p, "outside");
	free(p);
	p = raw("overlap.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, data, 12);
	expect_error("overlapping tensors", p, "overlaps");
	free(p);
	/* an empty tensor sorted between the two must not hide their overlap */
	p = raw("overlap0.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
	        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, data, 12);
	expect_error("overlap around an empty tensor", p, "tensor 'b' overlaps tensor 'a'");
	free(p);
	p = raw("mismatch.safetensors", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,2],"
	        "\"data_offsets\":[0,8]}}", -1, data, 8);
	expect_error("shape/length mismatch", p, "tensor 'w': shape x BF16 size is 12 bytes");
	free(p);
	p = raw("dtype.safetensors", "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],"
	        "\"data_offsets\":[0,1]}}", -1, data, 1);
	expect_error("unknown dtype", p, "dtype 'Q7' not supported");
	free(p);
	p = raw("i64.safetensors", "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],"
	        "\"data_offsets\":[0,8]}}", -1, data, 8);
	expect_error("unsupported dtype I64", p, "dtype 'I64' not supported");
	free(p);
	p = raw("negshape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
	        "\"data_offsets\":[0,4]}}", -1, data, 4);
	expect_error("negative dimension", p, "shape[0] is not a non-negative integer");
	free(p);
	p = raw("bigshape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
	        "4294967296],\"data_offsets\":[0,4]}}", -1, data, 4);
	expect_error("shape overflowing size_t", p, "shape too large");
	free(p);
	p = raw("offs.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
	        "\"data_offsets\":[0]}}", -1, data, 4);
	expect_error("one data offset", p, "two integers");
	free(p);
	p = raw("nodtype.safetensors", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", -1, data, 4);
	expect_error("entry without dtype", p, "needs dtype");
	free(p);
	p = raw("meta.safetensors", "{\"__metadata__\":{\"step\":3}}", -1, NULL, 0);
	expect_error("metadata value not a string", p, "'step' is not a string");
	free(p);
	p = raw("nul.safetensors", "{\"w\":", 7, "\0}", 2);
	expect_error("NUL inside the header", p, "not a JSON object");
	free(p);
	expect_error("missing file", "/nonexistent/x.safetensors", "cannot open");
	expect_error("a directory", tmpdir, "not a regular file");
	/* a valid file cut short in its data section */
	{
		float v[8] = { 0 };
		struct st_wtensor t = { "w", DICE_F32, 1, { 8 }, v };
		char *q = tmpdir_path("cut.safetensors");
		CHECK(safetensors_write(q, &t, 1, NULL, 0, err, sizeof err) == 0, "write for cut");
		CHECK(truncate(q, 8 + 64 + 16) == 0, "truncate data section");
		expect_error("data section cut short", q, "outside the data section");
		free(q);
	}
}

static void test_sharded(void)
{
	float a[4] = { 1, 2, 3, 4 }, b[2] = { 5, 6 };
	struct st_wtensor ta = { "x.a", DICE_F32, 1, { 4 }, a }, tb = { "y.b", DICE_F32, 1, { 2 }, b };
	struct safetensors st;
	char *p1 = tmpdir_path("m-1.safetensors"), *p2 = tmpdir_path("m-2.safetensors"), *ix;
	const struct st_tensor *x;

	CHECK(safetensors_write(p1, &ta, 1, NULL, 0, err, sizeof err) == 0 &&
	      safetensors_write(p2, &tb, 1, NULL, 0, err, sizeof err) == 0, "write two shards");
	tmpdir_write("ok.index.json", "{\"metadata\":{\"total_size\":24},\"weight_map\":"
	           "{\"x.a\":\"m-1.safetensors\",\"y.b\":\"m-2.safetensors\"}}");
	ix = tmpdir_path("ok.index.json");
	CHECK(safetensors_open(&st, ix, err, sizeof err) == 0, "open the index");
	x = safetensors_find(&st, "y.b");
	CHECK(st.nfiles == 2 && x && ((const float *)x->data)[1] == 6 && x->shard == 1 &&
	      strstr(safetensors_file(&st, x->shard), "m-2.safetensors"), "tensor from shard 2");
	x = safetensors_find(&st, "x.a");
	CHECK(x && ((const float *)x->data)[3] == 4 && x->shard == 0, "tensor from shard 1");
	safetensors_close(&st);
	free(ix);

	tmpdir_write("miss.index.json", "{\"weight_map\":{\"x.a\":\"m-1.safetensors\","
	           "\"q.q\":\"m-2.safetensors\"}}");
	ix = tmpdir_path("miss.index.json");
	expect_error("index names a tensor its shard lacks", ix,
	             "tensor 'q.q' is not in shard 'm-2.safetensors'");
	free(ix);
	tmpdir_write("wrong.index.json", "{\"weight_map\":{\"x.a\":\"m-2.safetensors\","
	           "\"y.b\":\"m-2.safetensors\"}}");
	ix = tmpdir_path("wrong.index.json");
	expect_error("index puts a tensor in the wrong shard", ix, "tensor 'x.a' is not in shard");
	free(ix);
	tmpdir_write("nofile.index.json", "{\"weight_map\":{\"x.a\":\"m-9.safetensors\"}}");
	ix = tmpdir_path("nofile.index.json");
	expect_error("index names a missing shard", ix, "cannot open");
	free(ix);
	tmpdir_write("slash.index.json", "{\"weight_map\":{\"x.a\":\"../m-1.safetensors\"}}");
	ix = tmpdir_path("slash.index.json");
	expect_error("shard outside the folder refused", ix, "file name in the index's folder");
	free(ix);
	tmpdir_write("nomap.index.json", "{\"metadata\":{}}");
	ix = tmpdir_path("nomap.index.json");
	expect_error("index without weight_map", ix, "no \"weight_map\"");
	free(ix);
	tmpdir_write("badjs.index.json", "{\"weight_map\":");
	ix = tmpdir_path("badjs.index.json");
	expect_error("index bad JSON", ix, "badjs.index.json:1");
	free(ix);
	/* the same tensor name in two shards */
	CHECK(safetensors_write(p2, &ta, 1, NULL, 0, err, sizeof err) == 0, "shard 2 now holds x.a");
	tmpdir_write("twice.index.json", "{\"weight_map\":{\"x.a\":\"m-1.safetensors\","
	           "\"z\":\"m-2.safetensors\"}}");
	ix = tmpdir_path("twice.index.json");
	expect_error("one name in two shards", ix, "x.a");
	free(ix);
	free(p1);
	free(p2);
}

int main(void)
{
	if (tmpdir_make("dice-test-st") < 0)
		return 1;
	test_roundtrip();
	test_misaligned();
	test_corrupt();
	test_sharded();
	tmpdir_remove();
	return test_done();
}
