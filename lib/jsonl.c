/* jsonl: JSON Lines reader and writer, and the operand loop the programs share. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "input.h"
#include "jsonl.h"
#include "util.h"

void jsonl_reader_init(struct jsonl_reader *r, FILE *fp, const char *name)
{
	memset(r, 0, sizeof *r);
	r->fp = fp;
	r->name = name;
}

void jsonl_reader_free(struct jsonl_reader *r)
{
	free(r->line);
	memset(r, 0, sizeof *r);
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return 0;
	return 1;
}

int jsonl_read_line(struct jsonl_reader *r)
{
	ssize_t n;
	size_t k;

	for (;;) {
		errno = 0;
		n = getline(&r->line, &r->cap, r->fp);
		if (n < 0)
			return ferror(r->fp) ? JSONL_IOERR : JSONL_EOF;
		r->lineno++;
		if (n > 0 && r->line[n - 1] == '\n')
			r->line[--n] = '\0';
		r->len = (size_t)n;
		if (r->lineno == 1 && (k = utf8_bom(r->line, r->len))) {
			/* a byte-order mark opening the stream is not part of its first record */
			r->len -= k;
			memmove(r->line, r->line + k, r->len + 1);
		}
		if (!blank(r->line, r->len))
			return JSONL_RECORD;
	}
}

/* A copy of the JSON text s[0..n) in which each integer past int64 (a 64-bit unsigned hash)
 * is written as a real ("N.0"), the one way jansson reads it; every other number stays as it
 * is, so a record's other integers (its level, its prompt_ids) stay integers. New string
 * (*outlen bytes). */
static char *big_ints_as_reals(const char *s, size_t n, size_t *outlen)
{
	struct buf b;
	size_t i = 0;

	buf_init(&b);
	while (i < n) {
		if (s[i] == '"') {                      /* a string: copied to its end */
			size_t j = i + 1;
			while (j < n && s[j] != '"')
				j += s[j] == '\\' ? 2 : 1;
			j = j < n ? j + 1 : n;
			buf_add(&b, s + i, j - i);
			i = j;
		} else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
			size_t j = i;
			int integer = 1;
			while (j < n && strchr("0123456789+-.eE", s[j])) {
				integer &= !strchr(".eE", s[j]);
				j++;
			}
			buf_add(&b, s + i, j - i);
			if (integer) {
				char *tok = xstrndup(s + i, j - i);
				errno = 0;
				(void)strtoll(tok, NULL, 10);
				if (errno == ERANGE)
					buf_adds(&b, ".0");
				free(tok);
			}
			i = j;
		} else {
			buf_add(&b, s + i, 1);
			i++;
		}
	}
	char *out = buf_detach(&b, outlen);
	buf_free(&b);                   /* buf_detach re-inits it */
	return out;
}

int jsonl_parse_line(struct jsonl_reader *r, json_t **rec)
{
	json_error_t e;
	json_t *v;

	*rec = NULL;
	if (!utf8_valid(r->line, r->len)) {
		snprintf(r->err, sizeof r->err, "invalid UTF-8 in record");
		return -1;
	}
	const char *nul = memchr(r->line, '\0', r->len);
	if (nul) {      /* jansson would stop there and say "end of file expected" */
		size_t col = 1;         /* in characters, as jansson counts its columns */
		for (const char *p = r->line; p < nul; p++)
			col += ((unsigned char)*p & 0xc0) != 0x80;
		snprintf(r->err, sizeof r->err, "a NUL byte at column %zu, which JSON text "
		         "cannot hold", col);
		return -1;
	}
	v = json_loadb(r->line, r->len, 0, &e);
	if (!v && json_error_code(&e) == json_error_numeric_overflow) {
		/* valid JSON all the same (a 64-bit hash as an id): that number read as a
		 * double, the others as they are (all read as doubles, prompt_ids were no
		 * token ids and every integer was written back as a real); the writers that
		 * add a field keep the line's own bytes */
		size_t n;
		char *t = big_ints_as_reals(r->line, r->len, &n);
		if (!(v = json_loadb(t, n, 0, NULL)))
			v = json_loadb(r->line, r->len, JSON_DECODE_INT_AS_REAL, &e);
		free(t);
	}
	if (!v) {
		if (json_error_code(&e) == json_error_null_character)
			snprintf(r->err, sizeof r->err, "a string at column %d holds \\u0000 (NUL), "
			         "which no field takes", e.column);
		else if (json_error_code(&e) == json_error_numeric_overflow)
			snprintf(r->err, sizeof r->err, "a number at column %d is out of a double's "
			         "range", e.column);
		else
			snprintf(r->err, sizeof r->err, "invalid JSON at column %d: %.160s", e.column,
			         e.text);
		return -1;
	}
	if (!json_is_object(v)) {
		snprintf(r->err, sizeof r->err, "record is not a JSON object");
		json_decref(v);
		return -1;
	}
	*rec = v;
	return 0;
}

int jsonl_read(struct jsonl_reader *r, json_t **rec)
{
	int s = jsonl_read_line(r);

	*rec = NULL;
	if (s != JSONL_RECORD)
		return s;
	return jsonl_parse_line(r, rec) < 0 ? JSONL_BAD : JSONL_RECORD;
}

void jsonl_report_bad(const struct jsonl_reader *r)
{
	warn_msg("%s:%zu: %s", r->name, r->lineno, r->err);
}

json_t *jsonl_bad_record(const struct jsonl_reader *r)
{
	struct buf b;
	json_t *o = json_object();

	buf_init(&b);
	utf8_repair(&b, r->line, r->len);
	json_object_set_new(o, "source", json_string(r->name));
	json_object_set_new(o, "line", json_integer((json_int_t)r->lineno));
	json_object_set_new(o, "error", json_string(r->err));
	json_object_set_new(o, "text", json_stringn(b.p, b.len));
	buf_free(&b);
	return o;
}

void jsonl_writer_init(struct jsonl_writer *w, FILE *fp, const char *name, int unbuffered)
{
	memset(w, 0, sizeof *w);
	w->fp = fp;
	w->name = name;
	w->unbuffered = unbuffered;
	buf_init(&w->b);
}

void jsonl_writer_free(struct jsonl_writer *w)
{
	buf_free(&w->b);
}

static int dump_cb(const char *s, size_t n, void *arg)
{
	buf_add(arg, s, n);
	return 0;
}

static int flush_buf(struct jsonl_writer *w)
{
	buf_addc(&w->b, '\n');
	if (fwrite(w->b.p, 1, w->b.len, w->fp) != w->b.len ||
	    (w->unbuffered && fflush(w->fp))) {
		if (!w->failed)
			warn_msg("write error on %s:", w->name ? w->name : "output");
		w->failed = 1;
		util_write_failed(w->fp);       /* util_fshut says no more of it */
		return -1;
	}
	return 0;
}

/*
 * Each real at the fewest digits that read back to the same double. jansson prints every
 * real at %.17g (our rounded 0.9 as 0.90000000000000002) and takes one precision per
 * dump, so its text is rewritten after it, real by real: a real's spelling never depends
 * on its neighbours. %.15g is the shortest wherever it reads back (%g drops trailing zeros,
 * and a decimal of at most 15 digits is its double's %.15g, DBL_DIG); else 16, else 17
 * digits. Spelled as jansson spells reals: ".0" on an integral one, the exponent with no
 * '+' and no leading zeros (1e-6, 1e300).
 */
static void real_shortest(struct buf *o, double x)
{
	char s[40];
	const char *e;
	int p;

	for (p = 15; p < 17; p++) {
		snprintf(s, sizeof s, "%.*g", p, x);
		if (strtod(s, NULL) == x)
			break;
	}
	if (p == 17)
		snprintf(s, sizeof s, "%.17g", x);
	if (!(e = strchr(s, 'e'))) {
		buf_adds(o, s);
		if (!strchr(s, '.'))
			buf_add(o, ".0", 2);
		return;
	}
	buf_add(o, s, (size_t)(e - s) + 1);
	if (*++e == '+')
		e++;
	else if (*e == '-')
		buf_addc(o, *e++);
	while (*e == '0' && e[1])
		e++;
	buf_adds(o, e);
}

/* the reals in the JSON text b->p[from..] (jansson's, compact) rewritten by real_shortest;
 * the text is copied only from its first real on (most records written have none) */
static void shorten_reals(struct buf *b, size_t from)
{
	static const char numch[] = "0123456789+-.eE";
	struct buf o;
	size_t i = from, j, kept = from;        /* b->p[from..kept) is already final */
	int any = 0;

	while (i < b->len) {
		i += strcspn(b->p + i, "\"-0123456789");   /* b->p is NUL-terminated */
		if (i >= b->len)
			break;
		if (b->p[i] == '"') {                        /* a string, whole */
			for (j = i + 1; j < b->len && b->p[j] != '"'; j++)
				j += b->p[j] == '\\';
			i = j < b->len ? j + 1 : b->len;
			continue;
		}
		j = i + strspn(b->p + i, numch);
		if (memchr(b->p + i, '.', j - i) || memchr(b->p + i, 'e', j - i) ||
		    memchr(b->p + i, 'E', j - i)) {
			if (!any++)
				buf_init(&o);
			buf_add(&o, b->p + kept, i - kept);
			real_shortest(&o, strtod(b->p + i, NULL));
			kept = j;
		}
		i = j;
	}
	if (!any)
		return;
	buf_add(&o, b->p + kept, b->len - kept);
	b->len = from;
	buf_add(b, o.p, o.len);
	buf_free(&o);
}

/* v as the writer prints it, appended to b */
static void dump_value(struct buf *b, const json_t *v, size_t flags)
{
	size_t from = b->len;

	json_dump_callback(v, dump_cb, b, flags);
	shorten_reals(b, from);
}

char *jsonl_dumps(const json_t *v)
{
	struct buf b;
	char *s;

	buf_init(&b);
	dump_value(&b, v, JSON_COMPACT | JSON_ENCODE_ANY);
	s = buf_detach(&b, NULL);
	buf_free(&b);                   /* buf_detach re-inits b */
	return s;
}

int jsonl_log(FILE *fp, const char *name, const json_t *v)
{
	char *text = jsonl_dumps(v);
	int rc;

	errno = 0;
	fprintf(fp, "%s\n", text);
	rc = util_fcheck(fp, name);
	free(text);
	return rc;
}

int jsonl_write(struct jsonl_writer *w, json_t *rec)
{
	buf_reset(&w->b);
	dump_value(&w->b, rec, JSON_COMPACT);
	return flush_buf(w);
}

static int json_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The end of the JSON value at p (a line the parser took whole), or NULL. */
static const char *value_end(const char *p, const char *e)
{
	int depth = 0;

	for (; p < e; p++) {
		if (*p == '"') {
			for (p++; p < e && *p != '"'; p++)
				if (*p == '\\')
					p++;
			if (p >= e)
				return NULL;
			if (!depth)
				return p + 1;
		} else if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			if (--depth < 0)
				return p;       /* the end of a number or literal at the object's end */
			if (!depth)
				return p + 1;
		} else if (!depth && (*p == ',' || json_ws(*p))) {
			return p;
		}
	}
	return depth ? NULL : p;
}

/* 1 when name is the key of one of the n fields */
static int is_field(const char *name, const struct jsonl_field *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(name, f[i].key))
			return 1;
	return 0;
}

/* The line's object with the members named by the fields left out, their bytes and the
 * others' as they were: "{" then the kept members joined by ",", into b (no closing brace).
 * Returns the number of members kept, or -1 where the line is not an object as expected. */
static int members_without(struct buf *b, const char *line, size_t n,
                           const struct jsonl_field *f, size_t nf)
{
	const char *p = line, *e = line + n;
	int kept = 0;

	while (p < e && json_ws(*p))
		p++;
	if (p >= e || *p++ != '{')
		return -1;
	buf_addc(b, '{');
	for (;;) {
		while (p < e && (json_ws(*p) || *p == ','))
			p++;
		if (p < e && *p == '}')
			return kept;
		if (p >= e || *p != '"')
			return -1;
		const char *k = p, *ke = value_end(p, e), *v;
		if (!ke)
			return -1;
		for (v = ke; v < e && *v != ':'; v++)
			;
		for (v++; v < e && json_ws(*v); v++)
			;
		const char *ve = value_end(v, e);
		if (!ve || v >= e)
			return -1;
		json_t *name = json_loadb(k, (size_t)(ke - k), JSON_DECODE_ANY, NULL);
		int drop = name && json_is_string(name) && is_field(json_string_value(name), f, nf);
		json_decref(name);
		if (!drop) {
			if (kept++)
				buf_addc(b, ',');
			buf_add(b, k, (size_t)(ve - k));
		}
		p = ve;
	}
}

void jsonl_splice(struct buf *b, const char *line, size_t len, const json_t *rec,
                  const struct jsonl_field *f, size_t nf)
{
	size_t n = len, start = b->len;
	int kept = -1, old = 0;

	while (line && n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
		n--;
	for (size_t i = 0; i < nf; i++)
		old |= json_object_get(rec, f[i].key) != NULL;
	if (line && n && line[n - 1] == '}') {
		if (!old) {
			buf_add(b, line, n - 1);
			kept = (int)json_object_size(rec);
		} else if ((kept = members_without(b, line, n, f, nf)) < 0) {
			b->len = start;         /* the old members out, the others' bytes kept */
			b->p[start] = '\0';
		}
	}
	if (kept < 0) {                 /* no line to keep: the record re-serialised */
		json_t *c = json_copy((json_t *)rec);
		for (size_t i = 0; i < nf; i++) {
			if (f[i].val)
				json_object_set(c, f[i].key, f[i].val);
			else
				json_object_del(c, f[i].key);
		}
		dump_value(b, c, JSON_COMPACT);
		json_decref(c);
		return;
	}
	for (size_t i = 0; i < nf; i++) {
		if (!f[i].val)
			continue;
		if (kept++)
			buf_addc(b, ',');
		json_t *k = json_string(f[i].key);
		json_dump_callback(k, dump_cb, b, JSON_ENCODE_ANY);
		json_decref(k);
		buf_addc(b, ':');
		dump_value(b, f[i].val, JSON_COMPACT | JSON_ENCODE_ANY);
	}
	buf_addc(b, '}');
}

int jsonl_write_fields(struct jsonl_writer *w, const char *line, size_t len, const json_t *rec,
                       const struct jsonl_field *f, size_t nf)
{
	buf_reset(&w->b);
	jsonl_splice(&w->b, line, len, rec, f, nf);
	return flush_buf(w);
}

int jsonl_write_added(struct jsonl_writer *w, const char *line, size_t len, const json_t *rec,
                      const char *key, json_t *val)
{
	struct jsonl_field f = { key, val };

	return jsonl_write_fields(w, line, len, rec, &f, 1);
}

int jsonl_each(char **operands, int n, jsonl_record_fn fn, jsonl_bad_fn bad, void *arg)
{
	static char *dash[] = { "-" };
	struct jsonl_reader r;
	struct input in;
	json_t *rec;
	int ret = 0, s, k;

	if (n == 0) {
		operands = dash;
		n = 1;
	}
	for (int i = 0; i < n; i++) {
		if (input_open(&in, operands[i]) < 0) {
			ret = 1;
			continue;
		}
		while ((k = input_next(&in)) > 0) {
			jsonl_reader_init(&r, in.fp, in.name);
			while ((s = jsonl_read(&r, &rec)) != JSONL_EOF) {
				if (s == JSONL_IOERR) {
					warn_msg("%s:%zu: read error: %s", r.name, r.lineno + 1,
					         input_error(&in));
					ret = 1;
					break;
				}
				if (s == JSONL_BAD) {
					ret = 1;
					if (bad)
						bad(&r, arg);
					else
						jsonl_report_bad(&r);
					continue;
				}
				int v = fn(rec, &r, arg);
				if (v < 0) {
					jsonl_reader_free(&r);
					input_close(&in);
					return v;
				}
				if (v > 0)
					ret = 1;
			}
			jsonl_reader_free(&r);
		}
		if (k < 0)
			ret = 1;
		input_close(&in);
	}
	return ret;
}

json_t *json_load_file_bom(const char *path, size_t flags, json_error_t *err)
{
	size_t len;
	char *text = util_read_file(path, &len);
	json_t *v;

	if (!text)
		return json_load_file(path, flags, err);    /* jansson's message for the failure */
	const char *t = util_text(text, &len, 0);
	v = json_loadb(t, len, flags, err);
	free(text);
	return v;
}

const char *json_get_str(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

json_t *json_get_set(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_null(v) ? NULL : v;
}

int json_level_value(const json_t *v, long lo, long hi, int *out)
{
	const char *s = json_string_value(v);
	double x = json_number_value(v);
	long l;

	if (json_is_number(v) && x == floor(x) && x >= lo && x <= hi) {
		*out = (int)x;
		return 0;
	}
	if (!s)
		return -1;
	if (!strncmp(s, "level", 5))
		s += 5;
	if (parse_long(s, lo, hi, &l) < 0)
		return -1;
	*out = (int)l;
	return 0;
}

int json_get_num(const json_t *o, const char *key, double *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_number(v))
		return 0;
	*out = json_number_value(v);
	return 1;
}
