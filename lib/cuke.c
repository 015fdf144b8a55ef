/* cuke: the curation logic of cuke-filter (see cuke.h): field lookup on a tree or on the raw
 * line, the verdict and its reason, the `cuke` object, rejects, statistics and histogram. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "cuke.h"
#include "deceive.h"
#include "extract.h"
#include "prompt.h"
#include "pysrc.h"
#include "tokenizer.h"

static const char *const reason_names[CUKE_REASON_N] = {
	[CUKE_KEPT] = "kept",
	[CUKE_NO_SPEEDUP] = "no-speedup",
	[CUKE_BAD_SPEEDUP] = "bad-speedup",
	[CUKE_BELOW_MIN] = "below-min-speedup",
	[CUKE_ABOVE_MAX] = "above-max-speedup",
	[CUKE_NO_CORRECT] = "no-correct",
	[CUKE_BAD_CORRECT] = "bad-correct",
	[CUKE_INCORRECT] = "incorrect",
	[CUKE_NO_REF] = "no-ref",
	[CUKE_UNCLASSIFIED] = "unclassified",
	[CUKE_LEVEL] = "level",
	[CUKE_NO_KERNEL] = "no-kernel",
	[CUKE_TOO_LONG] = "too-long",
	[CUKE_DECEPTIVE] = "deceptive",
	[CUKE_NO_SPLIT] = "no-split",
	[CUKE_DUPLICATE] = "duplicate",
	[CUKE_MALFORMED] = "malformed",
};

const char *cuke_reason_name(enum cuke_reason r)
{
	return (unsigned)r < CUKE_REASON_N ? reason_names[r] : "?";
}

const char *const cuke_bin_names[CUKE_BINS + 1] = {
	"<1.0", "1.0-1.5", "1.5-2.0", "2.0-2.5", "2.5-3.0", ">3.0", "none",
};

int cuke_bin(double s)
{
	if (s < 1.0)
		return 0;
	if (s < 1.5)
		return 1;
	if (s < 2.0)
		return 2;
	if (s < 2.5)
		return 3;
	if (s <= 3.0)
		return 4;
	return 5;
}

/* ---- fields from a tree ---------------------------------------------------------------- */

static void val_from_json(const json_t *v, struct cuke_val *out)
{
	out->num = 0;
	if (!v)
		out->kind = CUKE_ABSENT;
	else if (json_is_null(v))
		out->kind = CUKE_NULL;
	else if (json_is_true(v))
		out->kind = CUKE_TRUE;
	else if (json_is_false(v))
		out->kind = CUKE_FALSE;
	else if (json_is_number(v)) {
		out->kind = CUKE_NUMBER;
		out->num = json_number_value(v) + 0.0;
	} else
		out->kind = CUKE_OTHER;
}

static const char *const field_keys[4] = { "speedup", "correct", "ref_ms", "kernel_ms" };
static const size_t field_klen[4] = { 7, 7, 6, 9 };

void cuke_fields_from_json(const json_t *rec, struct cuke_fields *f)
{
	const json_t *ev = json_object_get(rec, "eval");

	memset(f, 0, sizeof *f);
	for (int i = 0; i < 4; i++) {
		val_from_json(json_object_get(rec, field_keys[i]), &f->v[i]);
		val_from_json(json_is_object(ev) ? json_object_get(ev, field_keys[i]) : NULL,
		              &f->v[CUKE_F_EVAL_SPEEDUP + i]);
	}
	f->has_cuke = json_object_get(rec, "cuke") != NULL;
	f->nkeys = json_object_size(rec);
}

/* ---- fields from the raw line ------------------------------------------------------------
 * A validating scanner that accepts a subset of what jansson accepts: RFC 8259 grammar,
 * nesting below SCAN_DEPTH, numbers short enough that jansson cannot overflow on them,
 * escapes other than \u0000 and surrogates. Anything else makes it give up (0), and the
 * caller parses the line with jansson, which then decides and words the error. */

enum { SCAN_DEPTH = 64, SCAN_NUM_MAX = 24 };

struct scan {
	const unsigned char *p, *end;
	int nonascii;
};

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

#define ONES ((uint64_t)0x0101010101010101ULL)
#define HIGHS ((uint64_t)0x8080808080808080ULL)
/* nonzero when some byte of w is '"', '\\', below 0x20 or above 0x7f */
static inline uint64_t special8(uint64_t w)
{
	uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
	return ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w;
}

/* s->p just after the opening quote; leaves it after the closing one. *esc = saw '\\'.
 * The plain run between special bytes is skipped 16 (SSE2) or 8 (SWAR) bytes at a time. */
static int scan_string(struct scan *s, const unsigned char **start, size_t *len, int *esc)
{
	const unsigned char *p = s->p, *end = s->end;

	*start = p;
	*esc = 0;
	for (;;) {
#ifdef __SSE2__
		const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
		const __m128i lim = _mm_set1_epi8(0x20);
		while (end - p >= 16) {
			__m128i w = _mm_loadu_si128((const __m128i *)(const void *)p);
			/* signed compare: bytes >= 0x80 are negative, so they count as <= 0x1f */
			__m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote),
			                                      _mm_cmpeq_epi8(w, bslash)),
			                         _mm_cmpgt_epi8(lim, w));
			int bits = _mm_movemask_epi8(m);
			if (bits) {
				p += __builtin_ctz((unsigned)bits);
				break;
			}
			p += 16;
		}
#endif
		while (end - p >= 8) {
			uint64_t w;
			memcpy(&w, p, 8);
			if (special8(w) & HIGHS)
				break;
			p += 8;
		}
		if (p >= end)
			return 0;
		unsigned c = *p;
		if (c == '"')
			break;
		if (c < 0x20)
			return 0;
		if (c >= 0x80) {
			s->nonascii = 1;
			p++;
		} else if (c == '\\') {
			*esc = 1;
			if (end - p < 2)
				return 0;
			c = p[1];
			if (c == 'u') {
				int v = 0;
				if (end - p < 6)
					return 0;
				for (int i = 2; i < 6; i++) {
					int h = util_hexval(p[i]);
					if (h < 0)
						return 0;
					v = v * 16 + h;
				}
				if (v == 0 || (v >= 0xD800 && v <= 0xDFFF))
					return 0;
				p += 6;
			} else if (c == 'n' || c == '"' || c == '\\' || c == 't' || c == '/' ||
			           c == 'r' || c == 'b' || c == 'f') {
				p += 2;
			} else {
				return 0;
			}
		} else {
			p++;
		}
	}
	*len = (size_t)(p - *start);
	s->p = p + 1;
	return 1;
}

/* Clinger's fast path: [-]digits[.digits] with at most 15 digits in all is an exact integer
 * divided by an exact power of ten, so one IEEE division rounds it as strtod would. */
static int fast_decimal(const unsigned char *p, const unsigned char *end, double *out)
{
	static const double pow10[16] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
	                                   1e10, 1e11, 1e12, 1e13, 1e14, 1e15 };
	int neg = 0, nd = 0, frac = -1;
	uint64_t m = 0;

	if (*p == '-')
		neg = 1, p++;
	for (; p < end; p++) {
		if (*p == '.') {
			frac = 0;
			continue;
		}
		if (*p < '0' || *p > '9' || ++nd > 15)
			return 0;
		m = m * 10 + (uint64_t)(*p - '0');
		if (frac >= 0)
			frac++;
	}
	*out = (double)m / pow10[frac > 0 ? frac : 0];
	if (neg)
		*out = -*out;
	*out += 0.0;
	return 1;
}

static int scan_number(struct scan *s, double *out)
{
	const unsigned char *p = s->p, *st = p, *end = s->end;
	int real = 0, ndig = 0, edig = 0;
	char tmp[SCAN_NUM_MAX + 1];

	if (p < end && *p == '-')
		p++;
	if (p >= end || *p < '0' || *p > '9')
		return 0;
	if (*p == '0') {
		p++;
		ndig = 1;
	} else {
		while (p < end && *p >= '0' && *p <= '9')
			p++, ndig++;
	}
	if (p < end && *p == '.') {
		real = 1;
		p++;
		if (p >= end || *p < '0' || *p > '9')
			return 0;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < end && (*p == 'e' || *p == 'E')) {
		real = 1;
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		while (p < end && *p >= '0' && *p <= '9')
			p++, edig++;
		if (!edig || edig > 2)
			return 0;
	}
	if (p - st > SCAN_NUM_MAX || (!real && ndig > 18))
		return 0;
	if (out && !fast_decimal(st, p, out)) {
		memcpy(tmp, st, (size_t)(p - st));
		tmp[p - st] = '\0';
		*out = strtod(tmp, NULL) + 0.0;
	}
	s->p = p;
	return 1;
}

static int lit(struct scan *s, const char *w, size_t n)
{
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
		return 0;
	s->p += n;
	return 1;
}

enum scan_ctx { SCAN_ANY, SCAN_TOP, SCAN_EVAL };
static int scan_value(struct scan *s, int depth, struct cuke_val *v, enum scan_ctx ctx,
                      struct cuke_fields *f);

/* s->p at '{' or '['. In SCAN_TOP/SCAN_EVAL objects the wanted members land in f. */
static int scan_container(struct scan *s, int depth, enum scan_ctx ctx, struct cuke_fields *f)
{
	int obj = *s->p == '{';
	unsigned char close = obj ? '}' : ']';

	if (depth >= SCAN_DEPTH)
		return 0;
	s->p++;
	skip_ws(s);
	if (s->p < s->end && *s->p == close) {
		s->p++;
		return 1;
	}
	for (;;) {
		struct cuke_val *want = NULL;
		enum scan_ctx sub = SCAN_ANY;
		if (obj) {
			const unsigned char *k;
			size_t kn;
			int esc;
			if (s->p >= s->end || *s->p != '"')
				return 0;
			s->p++;
			if (!scan_string(s, &k, &kn, &esc))
				return 0;
			if (ctx != SCAN_ANY) {
				if (esc)
					return 0;   /* an escaped key might spell a wanted one */
				for (int i = 0; i < 4; i++)
					if (kn == field_klen[i] && !memcmp(k, field_keys[i], kn))
						want = &f->v[(ctx == SCAN_EVAL ? CUKE_F_EVAL_SPEEDUP : 0) + i];
				if (ctx == SCAN_TOP) {
					f->nkeys = 1;
					if (kn == 4 && !memcmp(k, "cuke", 4))
						f->has_cuke = 1;
					if (kn == 4 && !memcmp(k, "eval", 4)) {
						memset(&f->v[CUKE_F_EVAL_SPEEDUP], 0,
						       (CUKE_F_N - CUKE_F_EVAL_SPEEDUP) * sizeof f->v[0]);
						sub = SCAN_EVAL;
					}
				}
			}
			skip_ws(s);
			if (s->p >= s->end || *s->p != ':')
				return 0;
			s->p++;
			skip_ws(s);
		}
		if (sub == SCAN_EVAL && s->p < s->end && *s->p == '{') {
			if (!scan_container(s, depth + 1, SCAN_EVAL, f))
				return 0;
		} else if (!scan_value(s, depth + 1, want, SCAN_ANY, f)) {
			return 0;
		}
		skip_ws(s);
		if (s->p >= s->end)
			return 0;
		if (*s->p == close) {
			s->p++;
			return 1;
		}
		if (*s->p != ',')
			return 0;
		s->p++;
		skip_ws(s);
	}
}

static int scan_value(struct scan *s, int depth, struct cuke_val *v, enum scan_ctx ctx,
                      struct cuke_fields *f)
{
	struct cuke_val tmp;
	const unsigned char *k;
	size_t kn;
	int esc;

	if (!v)
		v = &tmp;
	v->num = 0;
	if (s->p >= s->end)
		return 0;
	switch (*s->p) {
	case '{':
	case '[':
		v->kind = CUKE_OTHER;
		return scan_container(s, depth, ctx, f);
	case '"':
		v->kind = CUKE_OTHER;
		s->p++;
		return scan_string(s, &k, &kn, &esc);
	case 't':
		v->kind = CUKE_TRUE;
		return lit(s, "true", 4);
	case 'f':
		v->kind = CUKE_FALSE;
		return lit(s, "false", 5);
	case 'n':
		v->kind = CUKE_NULL;
		return lit(s, "null", 4);
	default:
		v->kind = CUKE_NUMBER;
		return scan_number(s, v == &tmp ? NULL : &v->num);
	}
}

int cuke_fields_scan(const char *line, size_t len, struct cuke_fields *f)
{
	struct scan s = { (const unsigned char *)line, (const unsigned char *)line + len, 0 };

	memset(f, 0, sizeof *f);
	skip_ws(&s);
	if (s.p >= s.end || *s.p != '{' || !scan_container(&s, 0, SCAN_TOP, f))
		return 0;
	skip_ws(&s);
	if (s.p != s.end)
		return 0;
	if (s.nonascii && !utf8_valid(line, len))
		return 0;
	return 1;
}

/* ---- the speedup ------------------------------------------------------------------------ */

static int ratio(const struct cuke_val *a, const struct cuke_val *b, double *s)
{
	if (a->kind != CUKE_NUMBER || b->kind != CUKE_NUMBER)
		return 0;
	if (!(a->num > 0) || !(b->num > 0))
		return -1;
	*s = a->num / b->num;
	return isfinite(*s) && *s > 0 ? 1 : -1;
}

static int present(const struct cuke_val *v)
{
	return v->kind != CUKE_ABSENT && v->kind != CUKE_NULL;
}

int cuke_speedup(const struct cuke_fields *f, double *s, const char **from)
{
	static const int direct[2] = { CUKE_F_SPEEDUP, CUKE_F_EVAL_SPEEDUP };
	static const char *const direct_name[2] = { "speedup", "eval.speedup" };

	for (int i = 0; i < 2; i++) {
		const struct cuke_val *v = &f->v[direct[i]];
		if (!present(v))
			continue;
		*from = direct_name[i];
		if (v->kind != CUKE_NUMBER || !(v->num > 0) || !isfinite(v->num))
			return -1;
		*s = v->num;
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		const struct cuke_val *r = &f->v[i ? CUKE_F_EVAL_REF_MS : CUKE_F_REF_MS];
		const struct cuke_val *k = &f->v[i ? CUKE_F_EVAL_KERNEL_MS : CUKE_F_KERNEL_MS];
		if (!present(r) && !present(k))
			continue;
		*from = i ? "eval.ref_ms/eval.kernel_ms" : "ref_ms/kernel_ms";
		if (!present(r) || !present(k))
			return -1;
		int v = ratio(r, k, s);
		return v ? v : -1;
	}
	*from = NULL;
	return 0;
}

/* ---- content: level, dedupe key, infill split, SFT ------------------------------------- */

/* layout, conversion and bookkeeping calls (torch.X, F.X, x.X): no arithmetic of their own */
static const char *const not_ops[] = {
	"view", "view_as", "reshape", "size", "dim", "contiguous", "unsqueeze", "squeeze",
	"flatten", "expand", "expand_as", "to", "type", "float", "double", "half", "bfloat16",
	"cuda", "cpu", "detach", "numel", "item", "is_contiguous", "shape", "clone", "__init__",
};
/* Python builtins, called by a bare name (max(a, b) is Python's; x.max() is a tensor op) */
static const char *const builtins[] = {
	"super", "range", "len", "int", "float", "bool", "str", "isinstance", "print", "tuple",
	"list", "dict", "zip", "enumerate", "getattr", "setattr", "hasattr", "min", "max", "abs",
	"sum", "round", "type",
};
static const char *const containers[] = { "Sequential", "ModuleList", "ModuleDict" };
static const char *const arith[] = {
	"+", "-", "*", "/", "//", "%", "@", "**", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "**=",
};
static const char *const unary_after[] = {
	"return", "and", "or", "not", "in", "if", "else", "lambda", "yield", "is",
};

static int in_list(const char *s, size_t n, const char *const *list, size_t nlist)
{
	for (size_t i = 0; i < nlist; i++)
		if (strlen(list[i]) == n && !memcmp(list[i], s, n))
			return 1;
	return 0;
}

static const char *last_part(const char *dotted)
{
	const char *d = strrchr(dotted, '.');
	return d ? d + 1 : dotted;
}

struct opset {
	const char *name[64];   /* distinct op names (borrowed from the scan or static) */
	size_t len[64];
	int n, instances;
};

static void op_add(struct opset *o, const char *name, size_t len)
{
	o->instances++;
	for (int i = 0; i < o->n; i++)
		if (o->len[i] == len && !memcmp(o->name[i], name, len))
			return;
	if (o->n < 64) {
		o->name[o->n] = name;
		o->len[o->n++] = len;
	}
}

/* The callee of the call that starts at token t, or NULL. */
static const struct pysrc_call *call_at(const struct pysrc *p, int t)
{
	for (size_t i = 0; i < p->ncall; i++)
		if (p->call[i].tok_name == t)
			return &p->call[i];
	return NULL;
}

/* self.NAME = <call> in __init__: the callee, else NULL. */
static const char *submodule(const struct pysrc *p, int init, const char *attr)
{
	for (size_t i = 0; init >= 0 && i < p->nassign; i++) {
		const struct pysrc_assign *a = &p->assign[i];
		if (a->block < 0 || !pysrc_block_within(p, a->block, init) ||
		    strncmp(a->target, "self.", 5) || strcmp(a->target + 5, attr))
			continue;
		const struct pysrc_call *c = call_at(p, a->tok_value);
		return c ? c->callee : NULL;
	}
	return NULL;
}

static int defined_here(const struct pysrc *p, const char *name)
{
	return pysrc_find_block(p, name, 0, -1) >= 0;
}

/* Whether token t is a decorator's '@' or in the name after it (@staticmethod,
 * @torch.no_grad()): at the start of a logical line, not an operator and not an op. */
static int in_decorator(const struct pysrc *p, const char *src, int t)
{
	while (t > 0 && (p->tok[t].kind == PYSRC_TOK_NAME ||
	                 (p->tok[t].kind == PYSRC_TOK_OP && src[p->tok[t].start] == '.' &&
	                  p->tok[t].end - p->tok[t].start == 1)))
		t--;
	return p->tok[t].kind == PYSRC_TOK_OP && p->tok[t].end - p->tok[t].start == 1 &&
	       src[p->tok[t].start] == '@' && (t == 0 || p->tok[t - 1].kind == PYSRC_TOK_NEWLINE);
}

int cuke_classify(const char *ref, size_t len, struct cuke_level *out)
{
	struct pysrc p;
	struct opset ops = { 0 };
	int model, fwd, init, structure = 0;

	memset(out, 0, sizeof *out);
	out->level = -1;
	pysrc_scan(&p, ref, len);
	model = pysrc_find_block(&p, "Model", PYSRC_CLASS, -1);
	fwd = model < 0 ? -1 : pysrc_find_block(&p, "forward", PYSRC_DEF, model);
	if (fwd < 0) {
		out->why = model < 0 ? "no class Model" : "no Model.forward";
		pysrc_free(&p);
		return -1;
	}
	init = pysrc_find_block(&p, "__init__", PYSRC_DEF, model);
	const struct pysrc_block *mb = &p.block[model];

	/* loops anywhere in Model (forward, helpers, or layers built in __init__) */
	for (int t = mb->tok_body; t < mb->tok_end; t++)
		if (p.tok[t].kind == PYSRC_TOK_NAME &&
		    (pysrc_tok_is(&p, t, "for") || pysrc_tok_is(&p, t, "while")))
			structure = 1, out->why = "loop";
	for (size_t i = 0; i < p.ncall; i++) {
		const struct pysrc_call *c = &p.call[i];
		if (c->block < 0 || !pysrc_block_within(&p, c->block, model) ||
		    in_decorator(&p, ref, c->tok_name))
			continue;
		const char *name = last_part(c->callee);
		if (in_list(name, strlen(name), containers, ARRAY_LEN(containers)))
			structure = 1, out->why = "container submodule";
		if (init >= 0 && pysrc_block_within(&p, c->block, init)) {
			if (!strchr(c->callee, '.') && defined_here(&p, c->callee))
				structure = 1, out->why = "submodule defined in the file";
			continue;
		}
		/* a call in forward or a helper method */
		if (!strncmp(c->callee, "self.", 5)) {
			const char *sub = submodule(&p, init, c->callee + 5);
			if (sub) {
				if (!strchr(sub, '.') && defined_here(&p, sub))
					structure = 1, out->why = "submodule defined in the file";
				name = last_part(sub);
			} else if (pysrc_find_block(&p, c->callee + 5, PYSRC_DEF, model) >= 0) {
				continue;   /* a helper method: its own calls are counted */
			}
		} else if (!strchr(c->callee, '.')) {
			if (in_list(name, strlen(name), builtins, ARRAY_LEN(builtins)))
				continue;
			if (defined_here(&p, c->callee))
				structure = 1, out->why = "helper defined in the file";
		}
		if (!in_list(name, strlen(name), not_ops, ARRAY_LEN(not_ops)))
			op_add(&ops, name, strlen(name));
	}
	for (int t = mb->tok_body; t < mb->tok_end; t++) {
		const struct pysrc_tok *k = &p.tok[t];
		if (init >= 0 && t >= p.block[init].tok_start && t < p.block[init].tok_end)
			continue;
		if (k->kind != PYSRC_TOK_OP ||
		    !in_list(ref + k->start, k->end - k->start, arith, ARRAY_LEN(arith)) ||
		    in_decorator(&p, ref, t))
			continue;
		const struct pysrc_tok *prev = &p.tok[t - 1];
		const char *ps = ref + prev->start;
		size_t pn = prev->end - prev->start;
		if (prev->kind == PYSRC_TOK_OP && !(pn == 1 && strchr(")]}", *ps)))
			continue;   /* unary, or *args / **kwargs */
		if (prev->kind == PYSRC_TOK_NAME && in_list(ps, pn, unary_after, ARRAY_LEN(unary_after)))
			continue;
		size_t n = k->end - k->start;
		if (n > 1 && ref[k->start + n - 1] == '=' )
			n--;        /* x += y counts as + */
		op_add(&ops, ref + k->start, n);
	}
	out->ops = ops.instances;
	out->distinct = ops.n;
	if (structure) {
		out->level = 3;
	} else if (ops.instances >= 8) {
		out->level = 3;
		out->why = "8 or more ops";
	} else if (ops.instances <= 1) {
		out->level = 1;
		out->why = ops.instances ? "one op" : "no op";
	} else {
		out->level = 2;
		out->why = "chain of ops";
	}
	pysrc_free(&p);
	return out->level;
}

static void add_normalised(struct buf *key, const char *src, size_t len)
{
	struct pysrc p;
	struct buf b;

	buf_init(&b);
	pysrc_scan(&p, src, len);
	pysrc_normalize(&p, &b);
	for (size_t i = 0; i < b.len; i++)
		if (b.p[i] != ' ' && b.p[i] != '\t' && b.p[i] != '\n' && b.p[i] != '\r' &&
		    b.p[i] != '\f' && b.p[i] != '\v')
			buf_addc(key, b.p[i]);
	pysrc_free(&p);
	buf_free(&b);
}

unsigned long long cuke_dedupe_key(const char *ref, size_t rlen, const char *kernel, size_t klen)
{
	struct buf key;
	unsigned long long h;

	buf_init(&key);
	add_normalised(&key, ref, rlen);
	if (kernel) {
		buf_addc(&key, '\0');
		add_normalised(&key, kernel, klen);
	}
	h = util_hash64(key.p, key.len);
	buf_free(&key);
	return h;
}

/* 1 if the value tokens [a, b) are string literals only (parenthesised or not) and one of
 * them holds __global__ */
static int cuda_string(const struct pysrc *p, int a, int b)
{
	int cuda = 0;
	for (int t = a; t < b; t++) {
		if (p->tok[t].kind == PYSRC_TOK_OP && (pysrc_tok_is(p, t, "(") || pysrc_tok_is(p, t, ")")))
			continue;   /* ("..." "...") */
		if (p->tok[t].kind != PYSRC_TOK_STRING)
			return 0;
		const struct pysrc_string *s = &p->str[p->tok[t].str];
		if (memmem(s->text, s->len, "__global__", 10))
			cuda = 1;
	}
	return cuda;
}

static int is_load_inline(const struct pysrc_call *c)
{
	return !strcmp(last_part(c->callee), "load_inline");
}

int cuke_split(const char *kernel, size_t len, size_t *a, size_t *b, const char **why)
{
	struct pysrc p;
	int found = -1, n = 0, ok = 0;

	pysrc_scan(&p, kernel, len);
	for (size_t i = 0; i < p.nassign; i++) {
		const struct pysrc_assign *as = &p.assign[i];
		if (as->block == -1 && as->op == '=' && p.tok[as->tok_target].depth == 0 &&
		    cuda_string(&p, as->tok_value, as->tok_end))
			found = (int)i, n++;
	}
	*why = NULL;
	if (n == 0) {
		*why = "no module-level assignment of a CUDA source string";
	} else if (n > 1) {
		*why = "more than one CUDA source string";
	} else {
		const struct pysrc_assign *as = &p.assign[found];
		size_t s = p.tok[as->tok_target].start, e = p.tok[as->tok_end - 1].end;
		while (s > 0 && kernel[s - 1] != '\n')
			s--;
		while (e < len && kernel[e] != '\n')
			e++;
		if (e < len)
			e++;
		*a = s;
		*b = e;
		for (size_t i = 0; i < p.nblock && !*why; i++)
			if (p.block[i].start < s)
				*why = "a class or def before the CUDA source";
		int li = 0, cls = 0;
		for (size_t i = 0; i < p.ncall && !*why; i++)
			if (is_load_inline(&p.call[i])) {
				if (p.tok[p.call[i].tok_name].start < s)
					*why = "load_inline before the CUDA source";
				li = 1;
			}
		for (size_t i = 0; i < p.nblock; i++)
			if (p.block[i].kind == PYSRC_CLASS && !strcmp(p.block[i].name, "ModelNew") &&
			    p.block[i].start >= e)
				cls = 1;
		if (!*why && !li)
			*why = "no load_inline call after the CUDA source";
		if (!*why && !cls)
			*why = "no class ModelNew after the CUDA source";
		ok = !*why;
	}
	pysrc_free(&p);
	return ok ? 0 : -1;
}

char *cuke_sft_response(const char *kernel, size_t len)
{
	struct buf b;

	while (len && (kernel[len - 1] == '\n' || kernel[len - 1] == ' ' ||
	               kernel[len - 1] == '\t' || kernel[len - 1] == '\r'))
		len--;
	buf_init(&b);
	buf_adds(&b, "```python\n");
	buf_add(&b, kernel, len);
	buf_adds(&b, "\n```");
	char *s = buf_detach(&b, NULL);
	buf_free(&b);   /* buf_detach re-inits b */
	return s;
}

/* ---- the filter: state, judging, output ----------------------------------------------- */

/* A set of 64-bit keys: open addressing, linear probing, 0 stands for 1. */
struct keyset {
	unsigned long long *k;
	size_t n, cap;
};

/* 1 if key was there already; else adds it and returns 0. */
static int keyset_add(struct keyset *s, unsigned long long key)
{
	if (!key)
		key = 1;
	if (2 * (s->n + 1) > s->cap) {
		struct keyset t = { xcalloc(s->cap ? 2 * s->cap : 1024, sizeof *t.k), 0,
		                    s->cap ? 2 * s->cap : 1024 };
		for (size_t i = 0; i < s->cap; i++)
			if (s->k[i])
				keyset_add(&t, s->k[i]);
		free(s->k);
		*s = t;
	}
	for (size_t i = key & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		if (s->k[i] == key)
			return 1;
		if (!s->k[i]) {
			s->k[i] = key;
			s->n++;
			return 0;
		}
	}
}

struct cuke {
	struct cuke_config cfg;
	struct cuke_stats st;
	int can_fast;           /* judge the cheap fields off the raw line */
	int need_level;
	int need_content;       /* a record that passes them needs its tree */
	json_t *stub;           /* a non-empty object without "cuke": the rec the fast path
	                         * hands to jsonl_write_added, which only asks it that */
	json_t *stub_empty;
	json_t *kept_checks;    /* ["min-speedup", ...]: the same for every kept record */
	struct keyset seen;
	struct prompt_template *sft;   /* the KernelBench prompt: --to-sft, --max-tokens */
	struct deceive_checker *dc;
	struct tokenizer tok;
	int has_tok;
	FILE *spool[2];         /* --sort-level: kept records of levels 2 and 3 */
	struct jsonl_writer spool_w[2];
};

struct cuke *cuke_new(const struct cuke_config *cfg, char *err, size_t errlen)
{
	struct cuke *c = xcalloc(1, sizeof *c);

	c->cfg = *cfg;
	c->need_level = cfg->classify || cfg->levels || cfg->sort_level;
	c->need_content = c->need_level || cfg->dedupe || cfg->format != CUKE_OUT_RECORDS ||
	                  cfg->drop_deceptive || cfg->max_tokens > 0;
	c->can_fast = !cfg->no_fast;
	if ((cfg->format == CUKE_OUT_SFT || cfg->max_tokens > 0) &&
	    !(c->sft = prompt_load("kernelbench", err, errlen))) {
		free(c);
		return NULL;
	}
	if (cfg->drop_deceptive && !(c->dc = deceive_checker_new(NULL, NULL))) {
		snprintf(err, errlen, "cannot set up the deception rules");
		cuke_free(c);
		return NULL;
	}
	if (cfg->tokenizer) {
		if (tokenizer_load(&c->tok, cfg->tokenizer, err, errlen) < 0) {
			cuke_free(c);
			return NULL;
		}
		c->has_tok = 1;
	}
	for (int i = 0; cfg->sort_level && i < 2; i++) {
		if (!(c->spool[i] = tmpfile())) {
			snprintf(err, errlen, "cannot create a temporary file: %s", strerror(errno));
			cuke_free(c);
			return NULL;
		}
		jsonl_writer_init(&c->spool_w[i], c->spool[i], "temporary file", 0);
	}
	c->stub = json_pack("{s:n}", "-");
	c->stub_empty = json_object();
	c->kept_checks = json_array();
	if (cfg->has_min)
		json_array_append_new(c->kept_checks, json_string("min-speedup"));
	if (cfg->has_max)
		json_array_append_new(c->kept_checks, json_string("max-speedup"));
	if (cfg->require_correct)
		json_array_append_new(c->kept_checks, json_string("correct"));
	if (cfg->levels)
		json_array_append_new(c->kept_checks, json_string("level"));
	if (cfg->max_tokens > 0)
		json_array_append_new(c->kept_checks, json_string("max-tokens"));
	if (cfg->drop_deceptive)
		json_array_append_new(c->kept_checks, json_string("not-deceptive"));
	if (cfg->format == CUKE_OUT_INFILL)
		json_array_append_new(c->kept_checks, json_string("infill-split"));
	if (cfg->dedupe)
		json_array_append_new(c->kept_checks, json_string("unique"));
	return c;
}

void cuke_free(struct cuke *c)
{
	if (!c)
		return;
	json_decref(c->stub);
	json_decref(c->stub_empty);
	json_decref(c->kept_checks);
	free(c->seen.k);
	prompt_free(c->sft);
	deceive_checker_free(c->dc);
	if (c->has_tok)
		tokenizer_free(&c->tok);
	for (int i = 0; i < 2; i++)
		if (c->spool[i]) {
			jsonl_writer_free(&c->spool_w[i]);
			fclose(c->spool[i]);
		}
	free(c);
}

const struct cuke_stats *cuke_stats(const struct cuke *c)
{
	return &c->st;
}

size_t cuke_rejected_total(const struct cuke_stats *s)
{
	size_t n = 0;
	for (int i = 1; i < CUKE_REASON_N; i++)
		n += s->rejected[i];
	return n;
}

/* Shortest %g spelling that reads back as v. */
static void fmt_num(char *out, size_t n, double v)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(out, n, "%.*g", prec, v);
		if (strtod(out, NULL) == v)
			return;
	}
}

/* The checks on the cheap fields. */
static enum cuke_reason judge_fields(const struct cuke *c, const struct cuke_fields *f,
                                     int sp, double s)
{
	const struct cuke_config *cfg = &c->cfg;

	if (cfg->has_min || cfg->has_max) {
		if (sp == 0)
			return CUKE_NO_SPEEDUP;
		if (sp < 0)
			return CUKE_BAD_SPEEDUP;
		if (cfg->has_min && !(s >= cfg->min_speedup))
			return CUKE_BELOW_MIN;
		if (cfg->has_max && !(s <= cfg->max_speedup))
			return CUKE_ABOVE_MAX;
	}
	if (cfg->require_correct) {
		const struct cuke_val *v = &f->v[CUKE_F_CORRECT];
		if (!present(v))
			v = &f->v[CUKE_F_EVAL_CORRECT];
		if (!present(v))
			return CUKE_NO_CORRECT;
		if (v->kind != CUKE_TRUE && v->kind != CUKE_FALSE)
			return CUKE_BAD_CORRECT;
		if (v->kind == CUKE_FALSE)
			return CUKE_INCORRECT;
	}
	return CUKE_KEPT;
}

/* cuke.detail of a reject from judge_fields (only built when rejects are written). */
static void field_detail(const struct cuke *c, const struct cuke_fields *f, enum cuke_reason why,
                         double s, const char *from, char *out, size_t n)
{
	const char *name = present(&f->v[CUKE_F_CORRECT]) ? "correct" : "eval.correct";
	char a[32], b[32];

	switch (why) {
	case CUKE_NO_SPEEDUP:
		snprintf(out, n, "no speedup, eval.speedup or ref_ms/kernel_ms");
		break;
	case CUKE_BAD_SPEEDUP:
		snprintf(out, n, "%s is not a positive number", from);
		break;
	case CUKE_BELOW_MIN:
	case CUKE_ABOVE_MAX:
		fmt_num(a, sizeof a, s);
		fmt_num(b, sizeof b, why == CUKE_BELOW_MIN ? c->cfg.min_speedup : c->cfg.max_speedup);
		snprintf(out, n, "speedup %s %s %s", a, why == CUKE_BELOW_MIN ? "<" : ">", b);
		break;
	case CUKE_NO_CORRECT:
		snprintf(out, n, "no correct or eval.correct");
		break;
	case CUKE_BAD_CORRECT:
		snprintf(out, n, "%s is not a boolean", name);
		break;
	case CUKE_INCORRECT:
		snprintf(out, n, "%s is false", name);
		break;
	default:
		snprintf(out, n, "%s", cuke_reason_name(why));
	}
}

/* What the content checks computed for one record. */
struct content {
	struct cuke_level level;
	unsigned long long key;
	const char *ref;        /* borrowed from the record */
	char *kernel;           /* owned */
	size_t a, b;            /* infill: the middle's span in kernel */
	char *prompt, *response;  /* the SFT pair (--to-sft, --max-tokens) */
	long tokens;            /* --max-tokens: tokens of prompt + response */
	json_t *deceive;        /* --drop-deceptive: the deceive result (new reference) */
};

static void content_free(struct content *ct)
{
	json_decref(ct->deceive);
	free(ct->kernel);
	free(ct->prompt);
	free(ct->response);
}

/* Tokens of an SFT pair: the prompt and the response encoded apart (added tokens in the
 * text count as one each, as a Hugging Face tokenizer does by default), summed; -1 when the
 * tokenizer fails. */
static long cuke_count_tokens(struct tokenizer *tok, const char *prompt, const char *response)
{
	const char *part[2] = { prompt, response };
	long total = 0;

	for (int i = 0; i < 2; i++) {
		int *ids = NULL;
		size_t n = 0;
		int r = tokenizer_encode(tok, part[i], strlen(part[i]), &ids, &n);
		free(ids);
		if (r < 0)
			return -1;
		total += (long)n;
	}
	return total;
}

static enum cuke_reason judge_content(struct cuke *c, const json_t *rec, struct content *ct,
                                      char *detail, size_t dn)
{
	const struct cuke_config *cfg = &c->cfg;
	int need_kernel = cfg->format != CUKE_OUT_RECORDS || cfg->dedupe == CUKE_DEDUPE_ALL ||
	                  cfg->drop_deceptive || cfg->max_tokens > 0;
	int need_ref = c->need_level || cfg->dedupe || cfg->format != CUKE_OUT_RECORDS ||
	               cfg->max_tokens > 0;
	const char *from, *why;
	char err[256];

	ct->ref = json_get_str(rec, "ref");
	if (need_ref && (!ct->ref || util_blank(ct->ref, strlen(ct->ref)))) {
		snprintf(detail, dn, ct->ref ? "ref is empty" : "no ref string");
		return CUKE_NO_REF;
	}
	if (c->need_level) {
		if (cuke_classify(ct->ref, strlen(ct->ref), &ct->level) < 0) {
			snprintf(detail, dn, "%s", ct->level.why);
			return CUKE_UNCLASSIFIED;
		}
		if (cfg->levels && !(cfg->levels & (1u << ct->level.level))) {
			snprintf(detail, dn, "level %d (%s) not selected", ct->level.level, ct->level.why);
			return CUKE_LEVEL;
		}
	}
	if (need_kernel && !(ct->kernel = extract_record_kernel(rec, NULL, &from))) {
		extract_record_why(rec, NULL, from, detail, dn);
		return CUKE_NO_KERNEL;
	}
	if (need_kernel && util_blank(ct->kernel, strlen(ct->kernel))) {
		snprintf(detail, dn, "the kernel (from %s) is empty", from);
		return CUKE_NO_KERNEL;
	}
	if (cfg->format == CUKE_OUT_SFT && strstr(ct->kernel, "```")) {
		/* KernelBench, and dice-sample, take the first fenced block: the response would
		 * not give this kernel back */
		snprintf(detail, dn, "the kernel holds a ``` fence: the response's first fenced "
		         "block would not be the kernel");
		return CUKE_NO_KERNEL;
	}
	if (cfg->format == CUKE_OUT_SFT || cfg->max_tokens > 0) {
		const char *key = "ref";
		if (!(ct->prompt = prompt_fill(c->sft, &key, &ct->ref, 1, err, sizeof err))) {
			snprintf(detail, dn, "prompt: %.120s", err);
			return CUKE_NO_REF;
		}
		ct->response = cuke_sft_response(ct->kernel, strlen(ct->kernel));
	}
	if (cfg->max_tokens > 0) {
		ct->tokens = cuke_count_tokens(&c->tok, ct->prompt, ct->response);
		if (ct->tokens < 0) {
			snprintf(detail, dn, "the tokenizer failed on this record");
			return CUKE_TOO_LONG;
		}
		if (ct->tokens > cfg->max_tokens) {
			snprintf(detail, dn, "%ld tokens > %ld", ct->tokens, cfg->max_tokens);
			return CUKE_TOO_LONG;
		}
	}
	if (cfg->drop_deceptive) {
		struct deceive_result res;
		deceive_check(c->dc, ct->kernel, strlen(ct->kernel), ct->ref,
		              ct->ref ? strlen(ct->ref) : 0, &res);
		ct->deceive = deceive_result_json(&res);
		int deceptive = res.deceptive;
		for (size_t i = 0; deceptive && i < res.n; i++)
			if (res.findings[i].severity == DECEIVE_DECEPTIVE) {
				snprintf(detail, dn, "%s: %.200s", res.findings[i].rule,
				         res.findings[i].message);
				break;
			}
		deceive_result_free(&res);
		if (deceptive)
			return CUKE_DECEPTIVE;
	}
	if (cfg->format == CUKE_OUT_INFILL &&
	    cuke_split(ct->kernel, strlen(ct->kernel), &ct->a, &ct->b, &why) < 0) {
		snprintf(detail, dn, "%s", why);
		return CUKE_NO_SPLIT;
	}
	if (cfg->dedupe) {
		int all = cfg->dedupe == CUKE_DEDUPE_ALL;
		ct->key = cuke_dedupe_key(ct->ref, strlen(ct->ref), all ? ct->kernel : NULL,
		                          all ? strlen(ct->kernel) : 0);
		if (keyset_add(&c->seen, ct->key)) {
			snprintf(detail, dn, "same %s as an earlier record (key %016llx)",
			         all ? "ref and kernel" : "ref", ct->key);
			return CUKE_DUPLICATE;
		}
	}
	return CUKE_KEPT;
}

/* cuke.from names the field the speedup came from; cuke.speedup is written only when it was
 * computed (ref_ms / kernel_ms), since otherwise the record holds it already. */
static void cuke_add_speedup(json_t *obj, int sp, double s, const char *from)
{
	if (sp == 0)
		return;
	json_object_set_new(obj, "from", json_string(from));
	if (sp > 0 && strchr(from, '/'))
		json_object_set_new(obj, "speedup", json_real(s));
}

static void write_rec(struct jsonl_writer *w, const struct jsonl_reader *r, json_t *rec,
                      json_t *stub, json_t *obj)
{
	jsonl_write_added(w, r->line, r->len, rec ? rec : stub, "cuke", obj);
}

/* The cuke object of a kept record (new reference). */
static json_t *kept_cuke(const struct cuke *c, const struct content *ct, int sp, double s,
                         const char *from)
{
	json_t *obj = json_object();

	cuke_add_speedup(obj, sp, s, from);
	if (ct->level.level > 0) {
		json_object_set_new(obj, "level", json_integer(ct->level.level));
		json_object_set_new(obj, "ops", json_integer(ct->level.ops));
	}
	if (c->cfg.max_tokens > 0)
		json_object_set_new(obj, "tokens", json_integer(ct->tokens));
	if (ct->deceive)
		json_object_set(obj, "deceive", ct->deceive);
	if (c->cfg.dedupe) {
		char hex[17];
		snprintf(hex, sizeof hex, "%016llx", ct->key);
		json_object_set_new(obj, "key", json_string(hex));
	}
	json_object_set(obj, "kept", c->kept_checks);
	return obj;
}

/* --to-sft {id, level, prompt, response} or --to-infill {id, level, ref, kernel, prefix, middle,
 * suffix} (new reference). */
static json_t *new_record(const struct cuke *c, const struct content *ct, const json_t *rec)
{
	json_t *obj = json_object(), *id = json_object_get(rec, "id");

	if (id)
		json_object_set(obj, "id", id);
	if (ct->level.level > 0)
		json_object_set_new(obj, "level", json_integer(ct->level.level));
	if (c->cfg.format == CUKE_OUT_SFT) {
		json_object_set_new(obj, "prompt", json_string(ct->prompt));
		json_object_set_new(obj, "response", json_string(ct->response));
		return obj;
	}
	json_object_set_new(obj, "ref", json_string(ct->ref));
	json_object_set_new(obj, "kernel", json_string(ct->kernel));
	json_object_set_new(obj, "prefix", json_stringn(ct->kernel, ct->a));
	json_object_set_new(obj, "middle", json_stringn(ct->kernel + ct->a, ct->b - ct->a));
	json_object_set_new(obj, "suffix", json_string(ct->kernel + ct->b));
	return obj;
}

/* A malformed line: counted, and written to the rejects file or reported on stderr. */
static enum cuke_reason bad_line(struct cuke *c, struct jsonl_reader *r, struct cuke_sink *sink)
{
	c->st.rejected[CUKE_MALFORMED]++;
	if (sink->rejects) {
		json_t *bad = jsonl_bad_record(r);
		jsonl_write(sink->rejects, bad);
		json_decref(bad);
	} else {
		jsonl_report_bad(r);
	}
	return CUKE_MALFORMED;
}

enum cuke_reason cuke_line(struct cuke *c, struct jsonl_reader *r, struct cuke_sink *sink)
{
	struct cuke_fields f;
	json_t *rec = NULL, *obj, *stub;
	const char *from = NULL;
	double s = 0;
	char detail[320];
	enum cuke_reason why;
	struct content ct = { 0 };
	int sp;

	c->st.read++;
	if (c->can_fast && cuke_fields_scan(r->line, r->len, &f) && !f.has_cuke) {
		c->st.fast++;
	} else {
		if (jsonl_parse_line(r, &rec) < 0)
			return bad_line(c, r, sink);
		cuke_fields_from_json(rec, &f);
	}
	stub = f.nkeys ? c->stub : c->stub_empty;
	sp = cuke_speedup(&f, &s, &from);
	c->st.hist_read[sp > 0 ? cuke_bin(s) : CUKE_BIN_NONE]++;
	why = judge_fields(c, &f, sp, s);
	if (why == CUKE_KEPT && c->need_content) {
		/* only records that passed the cheap checks pay for a tree */
		if (!rec && jsonl_parse_line(r, &rec) < 0) {
			/* cannot happen: the scanner accepts a subset of what jansson does */
			c->st.hist_read[sp > 0 ? cuke_bin(s) : CUKE_BIN_NONE]--;
			return bad_line(c, r, sink);
		}
		why = judge_content(c, rec, &ct, detail, sizeof detail);
	}
	if (why != CUKE_KEPT) {
		c->st.rejected[why]++;
		if (sink->rejects) {
			if (why < CUKE_NO_REF)
				field_detail(c, &f, why, s, from, detail, sizeof detail);
			obj = json_object();
			json_object_set_new(obj, "rejected", json_string(cuke_reason_name(why)));
			json_object_set_new(obj, "detail", json_string(detail));
			cuke_add_speedup(obj, sp, s, from);
			if (ct.tokens)
				json_object_set_new(obj, "tokens", json_integer(ct.tokens));
			if (ct.deceive)
				json_object_set(obj, "deceive", ct.deceive);
			write_rec(sink->rejects, r, rec, stub, obj);
			json_decref(obj);
		}
		content_free(&ct);
		json_decref(rec);
		return why;
	}

	c->st.kept++;
	c->st.hist_kept[sp > 0 ? cuke_bin(s) : CUKE_BIN_NONE]++;
	struct jsonl_writer *w = sink->out;
	if (c->cfg.sort_level && ct.level.level >= 2)
		w = &c->spool_w[ct.level.level - 2];
	if (c->cfg.format == CUKE_OUT_RECORDS) {
		obj = kept_cuke(c, &ct, sp, s, from);
		write_rec(w, r, rec, stub, obj);
	} else {
		obj = new_record(c, &ct, rec);
		jsonl_write(w, obj);
	}
	json_decref(obj);
	content_free(&ct);
	json_decref(rec);
	return why;
}

int cuke_finish(struct cuke *c, struct cuke_sink *sink)
{
	char buf[65536];
	size_t n;
	int ret = 0;

	for (int i = 0; c->cfg.sort_level && i < 2; i++) {
		if (fflush(c->spool[i]) || c->spool_w[i].failed || fseek(c->spool[i], 0, SEEK_SET)) {
			warn_msg("temporary file:");
			ret = -1;
			continue;
		}
		while ((n = fread(buf, 1, sizeof buf, c->spool[i])) > 0)
			if (fwrite(buf, 1, n, sink->out->fp) != n) {
				ret = -1;
				break;
			}
		if (ferror(c->spool[i]))
			ret = -1;
	}
	return ret;
}

/* ---- statistics ------------------------------------------------------------------------- */

static double pct(size_t a, size_t n)
{
	return n ? 100.0 * (double)a / (double)n : 0.0;
}

/* pct as --stats-json writes it: rounded to two decimals, as the table prints it */
static json_t *json_pct(size_t a, size_t n)
{
	return json_real(round(pct(a, n) * 100) / 100);
}

void cuke_stats_print(const struct cuke_stats *s, FILE *fp)
{
	size_t rej = cuke_rejected_total(s), nr = 0, nk = 0;

	fprintf(fp, "read %zu = kept %zu + rejected %zu (malformed %zu)\n", s->read, s->kept, rej,
	        s->rejected[CUKE_MALFORMED]);
	for (int i = 1; i < CUKE_REASON_N; i++)
		if (s->rejected[i])
			fprintf(fp, "  %-18s %10zu  %5.1f%%\n", cuke_reason_name(i), s->rejected[i],
			        pct(s->rejected[i], s->read));
	for (int i = 0; i < CUKE_BINS; i++) {
		nr += s->hist_read[i];
		nk += s->hist_kept[i];
	}
	fprintf(fp, "speedup    %10s %7s %10s %7s\n", "read", "%", "kept", "%");
	for (int i = 0; i < CUKE_BINS; i++)
		fprintf(fp, "  %-8s %10zu %6.1f%% %10zu %6.1f%%\n", cuke_bin_names[i],
		        s->hist_read[i], pct(s->hist_read[i], nr), s->hist_kept[i],
		        pct(s->hist_kept[i], nk));
	fprintf(fp, "  %-8s %10zu %7s %10zu\n", cuke_bin_names[CUKE_BINS], s->hist_read[CUKE_BINS],
	        "", s->hist_kept[CUKE_BINS]);
}

json_t *cuke_stats_json(const struct cuke_stats *s)
{
	json_t *o = json_object(), *rej = json_object(), *h = json_array();
	size_t nr = 0, nk = 0;

	for (int i = 1; i < CUKE_REASON_N; i++)
		json_object_set_new(rej, cuke_reason_name(i), json_integer((json_int_t)s->rejected[i]));
	for (int i = 0; i < CUKE_BINS; i++) {
		nr += s->hist_read[i];
		nk += s->hist_kept[i];
	}
	for (int i = 0; i <= CUKE_BINS; i++) {
		json_t *b = json_object();
		json_object_set_new(b, "bin", json_string(cuke_bin_names[i]));
		json_object_set_new(b, "read", json_integer((json_int_t)s->hist_read[i]));
		json_object_set_new(b, "kept", json_integer((json_int_t)s->hist_kept[i]));
		if (i < CUKE_BINS) {
			json_object_set_new(b, "read_pct", json_pct(s->hist_read[i], nr));
			json_object_set_new(b, "kept_pct", json_pct(s->hist_kept[i], nk));
		}
		json_array_append_new(h, b);
	}
	json_object_set_new(o, "read", json_integer((json_int_t)s->read));
	json_object_set_new(o, "kept", json_integer((json_int_t)s->kept));
	json_object_set_new(o, "rejected", json_integer((json_int_t)cuke_rejected_total(s)));
	json_object_set_new(o, "reasons", rej);
	json_object_set_new(o, "histogram", h);
	return o;
}
