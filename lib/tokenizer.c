/* tokenizer: Hugging Face byte-level BPE, see tokenizer.h for the pipeline and guarantees.
 *
 * Sections: hash maps -> NFC -> loading tokenizer.json -> BPE -> encode -> decode.
 * BPE works on token ids, not strings: every byte starts as the id of its byte-level
 * character, and the merge table maps an id pair to (rank, merged id).
 */
#include "tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>

#include "jsonl.h"
#include "nfc_tables.h"
#include "unicode_tables.h"

#define CACHE_SLOTS (1u << 18)        /* pre-token cache: slots (power of 2) */
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_KEY 64              /* longer pre-tokens are not cached */
#define TOKENIZER_MAX_ID (1 << 24)      /* larger ids in tokenizer.json are refused */
#define BPE_SMALL 48                  /* pre-tokens up to this many bytes use the simple loop */

struct added {
	const char *s;    /* content (owned by impl->tok_str) */
	size_t len;
	int id;
	int special, lstrip, rstrip;
};

struct str_slot {
	const char *s;    /* NULL: empty slot */
	uint32_t len;
	int id;
};

struct merge_slot {
	uint64_t key;     /* left << 32 | right; UINT64_MAX: empty */
	int rank;
	int id;
};

struct cache_slot {
	uint64_t h;
	uint32_t key_off, key_len;   /* into cache_keys */
	uint32_t ids_off, n_ids;     /* into cache_ids */
	int used;
};

struct tokenizer_impl {
	char **tok_str;          /* (vocab_size) token strings, NULL for unused ids */
	char **tok_bytes;        /* (vocab_size) decoded bytes of each token */
	uint32_t *tok_nbytes;    /* (vocab_size) */
	unsigned char *special;  /* (vocab_size) 1 for special added tokens */
	struct str_slot *vocab;  /* string -> id, vocab_cap slots */
	size_t vocab_cap;
	struct merge_slot *merges;
	size_t merges_cap;
	int byte_id[256];        /* id of the byte-level character of each byte */
	uint32_t byte_cp[256];   /* the byte-level character of each byte */
	struct added *added;     /* sorted by length, longest first */
	size_t n_added;
	unsigned char added_first[256];  /* 1 if some added token starts with this byte */
	int nfc;
	int ignore_merges;
	pcre2_code *re[2];       /* the regex with PCRE2's \p{L} \p{N}; with unicode_tables.h's */
	pcre2_match_data *md;
	int jit[2];
	struct cache_slot *cache;
	size_t cache_n;
	struct buf cache_keys;
	int *cache_ids;
	size_t cache_ids_len, cache_ids_cap;
	struct buf norm;         /* scratch for NFC output */
};

/* ---- hash maps ---------------------------------------------------------------------- */

static uint64_t hash_pair(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static int vocab_get(const struct tokenizer_impl *im, const char *s, size_t len)
{
	size_t mask = im->vocab_cap - 1, i = util_hash64(s, len) & mask;
	for (;; i = (i + 1) & mask) {
		const struct str_slot *e = &im->vocab[i];
		if (!e->s)
			return -1;
		if (e->len == len && !memcmp(e->s, s, len))
			return e->id;
	}
}

static void vocab_put(struct tokenizer_impl *im, const char *s, size_t len, int id)
{
	size_t mask = im->vocab_cap - 1, i = util_hash64(s, len) & mask;
	for (;; i = (i + 1) & mask) {
		struct str_slot *e = &im->vocab[i];
		if (!e->s) {
			e->s = s;
			e->len = (uint32_t)len;
			e->id = id;
			return;
		}
		if (e->len == len && !memcmp(e->s, s, len)) {
			e->id = id;
			return;
		}
	}
}

static const struct merge_slot *merge_get(const struct tokenizer_impl *im, int a, int b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t mask = im->merges_cap - 1, i = hash_pair(key) & mask;
	for (;; i = (i + 1) & mask) {
		const struct merge_slot *e = &im->merges[i];
		if (e->key == key)
			return e;
		if (e->key == UINT64_MAX)
			return NULL;
	}
}

static void merge_put(struct tokenizer_impl *im, int a, int b, int rank, int id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t mask = im->merges_cap - 1, i = hash_pair(key) & mask;
	for (;; i = (i + 1) & mask) {
		struct merge_slot *e = &im->merges[i];
		if (e->key == key)
			return;   /* the first (lowest) rank wins */
		if (e->key == UINT64_MAX) {
			e->key = key;
			e->rank = rank;
			e->id = id;
			return;
		}
	}
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n)
		c <<= 1;
	return c;
}

/* ---- UTF-8 and NFC ------------------------------------------------------------------ */

/* Decode one code point at s[0..n); returns its length, or 0 for an invalid sequence. */
static size_t utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
	if (!len || len > n || s[0] > 0xF4 || !utf8_valid((const char *)s, len))
		return 0;
	uint32_t c = s[0] & (0x7F >> len);
	for (size_t i = 1; i < len; i++)
		c = c << 6 | (s[i] & 0x3F);
	*cp = c;
	return len;
}

static size_t utf8_enc(uint32_t c, char *o)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	} else if (c < 0x800) {
		o[0] = (char)(0xC0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3F));
		return 2;
	} else if (c < 0x10000) {
		o[0] = (char)(0xE0 | c >> 12);
		o[1] = (char)(0x80 | (c >> 6 & 0x3F));
		o[2] = (char)(0x80 | (c & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | c >> 18);
	o[1] = (char)(0x80 | (c >> 12 & 0x3F));
	o[2] = (char)(0x80 | (c >> 6 & 0x3F));
	o[3] = (char)(0x80 | (c & 0x3F));
	return 4;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_u32x2(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

static unsigned nfc_class(uint32_t c)
{
	if (c < 0x300)
		return 0;
	const unsigned *e = bsearch(&c, nfc_ccc, ARRAY_LEN(nfc_ccc), sizeof nfc_ccc[0], cmp_u32);
	return e ? e[1] : 0;
}

/* 1 if c lies in one of the n sorted, disjoint ranges r[i][0]..r[i][1]. */
static int in_ranges(const unsigned (*r)[2], size_t n, uint32_t c)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < r[mid][0])
			hi = mid;
		else if (c > r[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

static int nfc_is_unsafe(uint32_t c)
{
	return c >= 0x300 && in_ranges(nfc_unsafe, ARRAY_LEN(nfc_unsafe), c);
}

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19,
       VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

/* A growable int array: token ids, and code points in the NFC code. */
struct ids {
	int *p;
	size_t n, cap;
};

static void ids_push(struct ids *v, int id)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? v->cap * 2 : 256;
		v->p = xrealloc(v->p, v->cap * sizeof *v->p);
	}
	v->p[v->n++] = id;
}

/* In NFC buffers an invalid byte b is kept as -1 - b: a starter that never composes. */
#define NFC_IS_BYTE(c) ((c) < 0)

static void nfc_decompose(struct ids *v, int c)
{
	if (c >= SBASE && c < SBASE + SCOUNT) {
		int s = c - SBASE;
		ids_push(v, LBASE + s / NCOUNT);
		ids_push(v, VBASE + s % NCOUNT / TCOUNT);
		if (s % TCOUNT)
			ids_push(v, TBASE + s % TCOUNT);
		return;
	}
	if (c >= 0xC0) {
		unsigned key = (unsigned)c;
		const unsigned *e = bsearch(&key, nfc_dec, ARRAY_LEN(nfc_dec), sizeof nfc_dec[0],
					    cmp_u32);
		if (e) {
			nfc_decompose(v, (int)e[1]);
			if (e[2])
				nfc_decompose(v, (int)e[2]);
			return;
		}
	}
	ids_push(v, c);
}

static uint32_t nfc_compose_pair(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
	    b < TBASE + TCOUNT)
		return a + (b - TBASE);
	uint32_t key[2] = { a, b };
	const unsigned *e = bsearch(key, nfc_comp, ARRAY_LEN(nfc_comp), sizeof nfc_comp[0],
				    cmp_u32x2);
	return e ? e[2] : 0;
}

static unsigned nfc_cc(int c)
{
	return NFC_IS_BYTE(c) ? 0 : nfc_class((uint32_t)c);
}

/* Canonical ordering: a stable sort by combining class of each run of non-starters;
 * insertion sort for short runs, counting sort for long ones (hostile text must not make
 * this quadratic). */
static void nfc_reorder(int *p, size_t n)
{
	for (size_t a = 0; a < n; a++) {
		if (!nfc_cc(p[a]))
			continue;
		size_t b = a + 1;
		while (b < n && nfc_cc(p[b]))
			b++;
		if (b - a <= 32) {
			for (size_t k = a + 1; k < b; k++) {
				int c = p[k];
				unsigned cc = nfc_cc(c);
				size_t j = k;
				while (j > a && nfc_cc(p[j - 1]) > cc) {
					p[j] = p[j - 1];
					j--;
				}
				p[j] = c;
			}
		} else {
			size_t count[257] = { 0 };
			int *tmp = xmalloc((b - a) * sizeof *tmp);
			for (size_t k = a; k < b; k++)
				count[nfc_cc(p[k]) + 1]++;
			for (int c = 1; c < 257; c++)
				count[c] += count[c - 1];
			for (size_t k = a; k < b; k++)
				tmp[count[nfc_cc(p[k])]++] = p[k];
			memcpy(p + a, tmp, (b - a) * sizeof *tmp);
			free(tmp);
		}
		a = b;
	}
}

/* Append the NFC form of s[0..n) to out (the slow path: decompose, reorder, compose). */
static void nfc_slow(const unsigned char *u, size_t n, struct buf *out)
{
	size_t i;
	struct ids v = { 0 };
	for (i = 0; i < n;) {
		uint32_t c;
		size_t l = utf8_dec(u + i, n - i, &c);
		if (!l) {
			ids_push(&v, -1 - u[i]);
			i++;
			continue;
		}
		nfc_decompose(&v, (int)c);
		i += l;
	}
	nfc_reorder(v.p, v.n);
	/* canonical composition */
	size_t w = 0, starter = SIZE_MAX;
	unsigned last_cc = 0;
	for (size_t k = 0; k < v.n; k++) {
		int c = v.p[k];
		unsigned cc = nfc_cc(c);
		if (starter != SIZE_MAX && !NFC_IS_BYTE(c) && !NFC_IS_BYTE(v.p[starter]) &&
		    (w == starter + 1 || (last_cc != 0 && last_cc < cc))) {
			uint32_t m = nfc_compose_pair((uint32_t)v.p[starter], (uint32_t)c);
			if (m) {
				v.p[starter] = (int)m;
				continue;
			}
		}
		if (!cc) {
			starter = w;
			last_cc = 0;
		} else {
			last_cc = cc;
		}
		v.p[w++] = c;
	}
	for (size_t k = 0; k < w; k++) {
		char tmp[4];
		if (NFC_IS_BYTE(v.p[k]))
			buf_addc(out, -1 - v.p[k]);
		else
			buf_add(out, tmp, utf8_enc((uint32_t)v.p[k], tmp));
	}
	free(v.p);
}

/* NFC of s[0..n) into out; returns 0 when s is already in NFC (out untouched). Only the
 * stretches around "unsafe" code points go through nfc_slow: each starts at the code point
 * before the first unsafe one (a starter they may compose with) and ends before the next
 * safe one, which neither composes with nor reorders across what precedes it. */
static int nfc_apply(const char *s, size_t n, struct buf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, copied = 0, prev = SIZE_MAX;   /* prev: start of the last safe code point */
	int changed = 0;
	while (i < n) {
		uint32_t c;
		size_t l = u[i] < 0x80 ? 1 : utf8_dec(u + i, n - i, &c);
		if (u[i] < 0x80 || !l || !nfc_is_unsafe(c)) {   /* invalid bytes are safe too */
			prev = i;
			i += l ? l : 1;
			continue;
		}
		size_t rs = prev == SIZE_MAX ? i : prev, j = i + l;
		while (j < n) {
			size_t m = u[j] < 0x80 ? 1 : utf8_dec(u + j, n - j, &c);
			if (u[j] < 0x80 || !m || !nfc_is_unsafe(c))
				break;
			j += m;
		}
		if (!changed)
			buf_reset(out);
		changed = 1;
		buf_add(out, u + copied, rs - copied);
		nfc_slow(u + rs, j - rs, out);
		copied = i = j;
		prev = SIZE_MAX;
	}
	if (changed)
		buf_add(out, u + copied, n - copied);
	return changed;
}

/* ---- loading ------------------------------------------------------------------------ */

/* GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others are
 * mapped in order to U+0100 and up. */
static uint32_t byte_char(int b)
{
	if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
		return (uint32_t)b;
	int n = 0;
	for (int i = 0; i < b; i++)
		if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF)))
			n++;
	return 256 + (uint32_t)n;
}

static int errf(char *err, size_t errlen, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int errf(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
	if (err && errlen) {
		int k = snprintf(err, errlen, "%s: ", path);
		va_list ap;
		va_start(ap, fmt);
		if (k >= 0 && (size_t)k < errlen)
			vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int added_cmp(const void *a, const void *b)
{
	const struct added *x = a, *y = b;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return x->id - y->id;
}

/* The regex of the pre-tokenizer, or NULL with *why set. */
static const char *pretok_pattern(json_t *pt, const char **why)
{
	static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+|"
				   " ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
	const char *pattern = NULL;
	json_t *list = pt, *one[1] = { pt };
	size_t n = 1;
	json_t **items = one;
	const char *type = json_string_value(json_object_get(pt, "type"));
	if (type && !strcmp(type, "Sequence")) {
		list = json_object_get(pt, "pretokenizers");
		n = json_array_size(list);
		items = NULL;
	}
	int byte_level = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *p = items ? items[i] : json_array_get(list, i);
		const char *t = json_string_value(json_object_get(p, "type"));
		if (t && !strcmp(t, "Split")) {
			json_t *re = json_object_get(json_object_get(p, "pattern"), "Regex");
			const char *beh = json_string_value(json_object_get(p, "behavior"));
			if (!json_is_string(re) || !beh || strcmp(beh, "Isolated") ||
			    json_is_true(json_object_get(p, "invert"))) {
				*why = "only a Split pre-tokenizer with a Regex pattern, Isolated, not inverted is supported";
				return NULL;
			}
			if (pattern) {
				*why = "more than one Split pre-tokenizer";
				return NULL;
			}
			pattern = json_string_value(re);
		} else if (t && !strcmp(t, "ByteLevel")) {
			if (json_is_true(json_object_get(p, "add_prefix_space"))) {
				*why = "ByteLevel add_prefix_space is not supported";
				return NULL;
			}
			json_t *ur = json_object_get(p, "use_regex");
			if (!ur || json_is_true(ur)) {
				if (pattern) {
					*why = "Split followed by ByteLevel with use_regex is not supported";
					return NULL;
				}
				pattern = gpt2;
			}
			byte_level = 1;
		} else {
			*why = "unsupported pre-tokenizer (want Split and ByteLevel)";
			return NULL;
		}
	}
	if (!byte_level) {
		*why = "no ByteLevel pre-tokenizer: not a byte-level BPE tokenizer";
		return NULL;
	}
	if (!pattern)
		*why = "no Split pattern";
	return pattern;
}

/* The pre-tokenizer regex as PCRE2 must see it to match like the reference's engine
 * (Oniguruma in HF tokenizers), whose Unicode is newer than the system PCRE2's:
 * - \s and \S are spelled as Unicode White_Space: PCRE2 in UCP mode also counts U+180E, the
 *   Mongolian vowel separator (a format character since Unicode 6.3), as \s, and so split
 *   "  \u180E" otherwise than the reference. White_Space is \t-\r, U+0085 and the Z
 *   categories. \S inside a class is left as it is (no such pattern ships).
 * - \p{L} and \p{N} (\pL, \pN; \P outside a class) get the letters and numbers that
 *   lib/unicode_tables.h lists (Unicode UNICODE_REGEX_VERSION less the system PCRE2's
 *   UNICODE_PCRE2_VERSION): CJK extensions H and I, Kaktovik numerals, Garay...
 * Escapes whose meaning follows the Unicode version and that are not mended so (any other
 * property, \P{L} inside a class, \w \d \X and their capitals, \b \B outside a class,
 * [:posix:] classes) are refused: *why is set and NULL returned. Otherwise returns an
 * xmalloc'ed string; with extended 0, \p{L} and \p{N} are left as they are (for text
 * without any of those code points, where both match alike and the plain classes are
 * faster). */
static char *pattern_unicode(const char *re, int extended, const char **why)
{
	static const char ws[] = "\\t-\\r\\x{85}\\p{Z}";
	struct buf b;
	buf_init(&b);
	int in_class = 0;
	for (const char *p = re; *p; p++) {
		if (p[0] == '\\' && p[1] == 'Q') {   /* \Q...\E: literal text */
			const char *e = strstr(p + 2, "\\E");
			size_t n = e ? (size_t)(e + 2 - p) : strlen(p);
			buf_add(&b, p, n);
			p += n - 1;
		} else if (p[0] == '\\' && p[1] == 's') {
			buf_addf(&b, in_class ? "%s" : "[%s]", ws);
			p++;
		} else if (p[0] == '\\' && p[1] == 'S' && !in_class) {
			buf_addf(&b, "[^%s]", ws);
			p++;
		} else if (p[0] == '\\' && (p[1] == 'p' || p[1] == 'P')) {
			const char *name = p + 2, *end = p + 3;   /* \pL: one letter */
			int braced = *name == '{';                  /* \p{L}: *end its '}' */
			if (braced)
				end = strchr(++name, '}');
			if (!*name || !end) {   /* a bad escape: PCRE2 reports it */
				buf_adds(&b, p);
				break;
			}
			size_t len = (size_t)(end - name);
			const char *extra = len != 1 ? NULL : *name == 'L' ? unicode_extra_letter :
					    *name == 'N' ? unicode_extra_number : NULL;
			if (!extra || (p[1] == 'P' && in_class)) {
				*why = extra ? "the regex uses \\P{L} or \\P{N} inside a class "
					       "(not supported)" :
					       "the regex uses a Unicode property other than \\p{L} and "
					       "\\p{N} (not supported: its Unicode version would differ "
					       "from the reference's)";
				buf_free(&b);
				return NULL;
			}
			if (!extended)
				buf_add(&b, p, (size_t)(end + braced - p));
			else
				buf_addf(&b, in_class ? "\\p{%c}%s" : p[1] == 'P' ? "[^\\p{%c}%s]" :
					 "[\\p{%c}%s]", *name, extra);
			p = end + braced - 1;   /* a '}' after \pL is the pattern's own */
		} else if (p[0] == '\\' && p[1] && (strchr("wWdDX", p[1]) ||
						    (!in_class && (p[1] == 'b' || p[1] == 'B')))) {
			*why = "the regex uses \\w, \\d, \\b or \\X (not supported: their Unicode "
			       "version would differ from the reference's)";
			buf_free(&b);
			return NULL;
		} else if (p[0] == '\\' && p[1]) {
			buf_add(&b, p, 2);
			p++;
		} else if (in_class && p[0] == '[' && p[1] == ':' && strstr(p + 2, ":]")) {
			*why = "the regex uses a POSIX class such as [:alpha:] (not supported: its "
			       "Unicode version would differ from the reference's)";
			buf_free(&b);
			return NULL;
		} else if (!in_class && p[0] == '[') {
			in_class = 1;   /* a ']' first in the class (after '^') is a literal */
			size_t n = 1 + (p[1] == '^');
			n += p[n] == ']';
			buf_add(&b, p, n);
			p += n - 1;
		} else {
			if (in_class && p[0] == ']')
				in_class = 0;
			buf_addc(&b, p[0]);
		}
	}
	return b.p;
}

static int config_token(json_t *cfg, const char *key, struct tokenizer *tok)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_object(v))   /* {"content": "<|im_end|>", ...} in older files */
		v = json_object_get(v, "content");
	const char *s = json_string_value(v);
	return s ? tokenizer_token_id(tok, s) : -1;
}

static void load_config(struct tokenizer *tok, const char *path)
{
	json_error_t je;
	json_t *cfg = json_load_file_bom(path, 0, &je);
	if (!cfg)
		return;   /* optional file */
	tok->eos_id = config_token(cfg, "eos_token", tok);
	tok->pad_id = config_token(cfg, "pad_token", tok);
	tok->bos_id = config_token(cfg, "bos_token", tok);
	json_decref(cfg);
}

static int load_json(struct tokenizer *tok, json_t *root, const char *path, char *err,
		     size_t errlen)
{
	struct tokenizer_impl *im = tok->impl;
	json_t *model = json_object_get(root, "model");
	const char *type = json_string_value(json_object_get(model, "type"));
	if (!type || strcmp(type, "BPE"))
		return errf(err, errlen, path, "model.type is not \"BPE\"");
	json_t *vocab = json_object_get(model, "vocab");
	json_t *merges = json_object_get(model, "merges");
	if (!json_is_object(vocab) || !json_is_array(merges))
		return errf(err, errlen, path, "model.vocab or model.merges missing");
	if (json_is_true(json_object_get(model, "byte_fallback")))
		return errf(err, errlen, path, "byte_fallback BPE is not supported");
	const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
	const char *suf = json_string_value(json_object_get(model, "end_of_word_suffix"));
	if ((pre && *pre) || (suf && *suf))
		return errf(err, errlen, path, "subword prefix/suffix is not supported");
	im->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

	json_t *norm = json_get_set(root, "normalizer");
	if (norm) {
		const char *nt = json_string_value(json_object_get(norm, "type"));
		if (!nt || strcmp(nt, "NFC"))
			return errf(err, errlen, path, "normalizer %s is not supported (only NFC)",
				    nt ? nt : "?");
		im->nfc = 1;
	}
	json_t *dec = json_get_set(root, "decoder");
	const char *dt = json_string_value(json_object_get(dec, "type"));
	if (dec && (!dt || strcmp(dt, "ByteLevel")))
		return errf(err, errlen, path, "decoder %s is not supported (only ByteLevel)",
			    dt ? dt : "?");

	/* ids: vocab and added tokens */
	json_t *added = json_object_get(root, "added_tokens");
	long long max_id = -1;
	const char *key;
	json_t *val;
	json_object_foreach(vocab, key, val) {
		json_int_t id = json_integer_value(val);
		if (!json_is_integer(val) || id < 0 || id >= TOKENIZER_MAX_ID)
			return errf(err, errlen, path, "vocab entry '%s' has a bad id", key);
		if (id > max_id)
			max_id = id;
	}
	size_t i;
	json_array_foreach(added, i, val) {
		json_t *idv = json_object_get(val, "id");
		json_int_t id = json_integer_value(idv);
		if (!json_is_integer(idv) || id < 0 || id >= TOKENIZER_MAX_ID ||
		    !json_is_string(json_object_get(val, "content")) ||
		    !json_string_length(json_object_get(val, "content")))
			return errf(err, errlen, path, "added_tokens[%zu]: bad id or content", i);
		if (json_is_true(json_object_get(val, "single_word")))
			return errf(err, errlen, path, "added_tokens[%zu]: single_word is not supported", i);
		if (id > max_id)
			max_id = id;
	}
	if (max_id < 0)
		return errf(err, errlen, path, "empty vocabulary");
	int V = (int)max_id + 1;
	tok->vocab_size = V;
	im->tok_str = xcalloc((size_t)V, sizeof *im->tok_str);
	im->tok_bytes = xcalloc((size_t)V, sizeof *im->tok_bytes);
	im->tok_nbytes = xcalloc((size_t)V, sizeof *im->tok_nbytes);
	im->special = xcalloc((size_t)V, 1);
	im->vocab_cap = pow2_at_least(((size_t)json_object_size(vocab) + json_array_size(added)) * 2);
	im->vocab = xcalloc(im->vocab_cap, sizeof *im->vocab);

	/* byte-level inverse table: char -> byte, for decoding vocab strings */
	int char_byte[324];
	for (int c = 0; c < 324; c++)
		char_byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		im->byte_cp[b] = byte_char(b);
		char_byte[im->byte_cp[b]] = b;
	}

	json_object_foreach(vocab, key, val) {
		int id = (int)json_integer_value(val);
		size_t len = strlen(key);
		if (im->tok_str[id])
			return errf(err, errlen, path, "id %d used twice in the vocab", id);
		im->tok_str[id] = xstrndup(key, len);
		vocab_put(im, im->tok_str[id], len, id);
		char *b = xmalloc(len + 1);
		size_t nb = 0;
		const unsigned char *u = (const unsigned char *)key;
		for (size_t k = 0; k < len;) {
			uint32_t c;
			size_t l = utf8_dec(u + k, len - k, &c);
			if (l && c < 324 && char_byte[c] >= 0) {
				b[nb++] = (char)char_byte[c];
			} else {   /* not a byte-level character: keep it as it is */
				l = l ? l : 1;
				memcpy(b + nb, u + k, l);
				nb += l;
			}
			k += l;
		}
		b[nb] = 0;
		im->tok_bytes[id] = b;
		im->tok_nbytes[id] = (uint32_t)nb;
	}
	im->n_added = json_array_size(added);
	im->added = xcalloc(im->n_added + 1, sizeof *im->added);
	json_array_foreach(added, i, val) {
		int id = (int)json_integer_value(json_object_get(val, "id"));
		json_t *cv = json_object_get(val, "content");
		size_t len = json_string_length(cv);
		if (!im->tok_str[id]) {
			im->tok_str[id] = xstrndup(json_string_value(cv), len);
			im->tok_bytes[id] = xstrndup(json_string_value(cv), len);
			im->tok_nbytes[id] = (uint32_t)len;
		} else if (strlen(im->tok_str[id]) != len ||
			   memcmp(im->tok_str[id], json_string_value(cv), len)) {
			return errf(err, errlen, path, "added_tokens[%zu]: id %d is already '%s'", i, id,
				    im->tok_str[id]);
		}
		vocab_put(im, im->tok_str[id], len, id);
		struct added *a = &im->added[i];
		a->s = im->tok_str[id];
		a->len = len;
		a->id = id;
		a->special = json_is_true(json_object_get(val, "special"));
		a->lstrip = json_is_true(json_object_get(val, "lstrip"));
		a->rstrip = json_is_true(json_object_get(val, "rstrip"));
		im->special[id] = (unsigned char)a->special;
		im->added_first[(unsigned char)a->s[0]] = 1;
	}
	qsort(im->added, im->n_added, sizeof *im->added, added_cmp);

	for (int b = 0; b < 256; b++) {
		char tmp[4];
		size_t l = utf8_enc(im->byte_cp[b], tmp);
		im->byte_id[b] = vocab_get(im, tmp, l);
		if (im->byte_id[b] < 0)
			return errf(err, errlen, path, "vocab lacks the byte-level token of byte 0x%02X", b);
	}

	/* merges: ["a", "b"] pairs, or "a b" strings in older files */
	im->merges_cap = pow2_at_least(json_array_size(merges) * 2);
	im->merges = xmalloc(im->merges_cap * sizeof *im->merges);
	for (size_t k = 0; k < im->merges_cap; k++)
		im->merges[k].key = UINT64_MAX;
	struct buf cat;
	buf_init(&cat);
	json_array_foreach(merges, i, val) {
		const char *a, *b;
		size_t la, lb;
		if (json_is_array(val) && json_array_size(val) == 2 &&
		    json_is_string(json_array_get(val, 0)) && json_is_string(json_array_get(val, 1))) {
			a = json_string_value(json_array_get(val, 0));
			la = json_string_length(json_array_get(val, 0));
			b = json_string_value(json_array_get(val, 1));
			lb = json_string_length(json_array_get(val, 1));
		} else if (json_is_string(val) && json_string_length(val) >= 3 &&
			   strchr(json_string_value(val) + 1, ' ')) {
			a = json_string_value(val);
			b = strchr(a + 1, ' ') + 1;
			la = (size_t)(b - 1 - a);
			lb = strlen(b);
		} else {
			buf_free(&cat);
			return errf(err, errlen, path, "merges[%zu] is not a pair of strings", i);
		}
		buf_reset(&cat);
		buf_add(&cat, a, la);
		buf_add(&cat, b, lb);
		int ia = vocab_get(im, a, la), ib = vocab_get(im, b, lb);
		int im_ = vocab_get(im, cat.p, cat.len);
		if (ia < 0 || ib < 0 || im_ < 0) {
			buf_free(&cat);
			return errf(err, errlen, path, "merges[%zu]: token not in the vocab", i);
		}
		merge_put(im, ia, ib, (int)i, im_);
	}
	buf_free(&cat);

	const char *why = NULL;
	const char *pattern = pretok_pattern(json_object_get(root, "pre_tokenizer"), &why);
	if (!pattern)
		return errf(err, errlen, path, "pre_tokenizer: %s", why);
	int ecode;
	PCRE2_SIZE eoff;
	for (int k = 0; k < 2; k++) {
		char *ws = pattern_unicode(pattern, k, &why);
		if (!ws)
			return errf(err, errlen, path, "pre_tokenizer: %s", why);
		im->re[k] = pcre2_compile((PCRE2_SPTR)ws, PCRE2_ZERO_TERMINATED,
					  PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ecode, &eoff,
					  NULL);
		free(ws);
		if (!im->re[k]) {   /* the offset into the pattern as the file has it */
			pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
						       PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
			pcre2_code_free(re);
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(ecode, msg, sizeof msg);
			return errf(err, errlen, path, "pre_tokenizer regex at offset %zu: %s",
				    (size_t)eoff, (const char *)msg);
		}
		im->jit[k] = pcre2_jit_compile(im->re[k], PCRE2_JIT_COMPLETE) == 0;
	}
	im->md = pcre2_match_data_create_from_pattern(im->re[1], NULL);
	return 0;
}

void tokenizer_paths(const char *dir_or_file, char *path[2])
{
	size_t n = strlen(dir_or_file);

	if (n >= 5 && !strcmp(dir_or_file + n - 5, ".json")) {
		path[0] = xstrdup(dir_or_file);
		const char *slash = strrchr(dir_or_file, '/');
		path[1] = slash ? xasprintf("%.*s/tokenizer_config.json",
					    (int)(slash - dir_or_file), dir_or_file)
				: xstrdup("tokenizer_config.json");
	} else {
		path[0] = xasprintf("%s/tokenizer.json", dir_or_file);
		path[1] = xasprintf("%s/tokenizer_config.json", dir_or_file);
	}
}

int tokenizer_load(struct tokenizer *tok, const char *dir_or_file, char *err, size_t errlen)
{
	memset(tok, 0, sizeof *tok);
	tok->eos_id = tok->pad_id = tok->bos_id = -1;
	char *path[2];
	tokenizer_paths(dir_or_file, path);
	char *json_path = path[0], *cfg_path = path[1];
	json_error_t je;
	json_t *root = json_load_file_bom(json_path, 0, &je);
	int ret = 0;
	if (!root) {
		if (je.line < 0)
			ret = errf(err, errlen, json_path, "cannot read: %s", je.text);
		else
			ret = errf(err, errlen, json_path, "line %d: %s", je.line, je.text);
	} else if (!json_is_object(root)) {
		ret = errf(err, errlen, json_path, "not a JSON object");
	} else {
		tok->impl = xcalloc(1, sizeof *tok->impl);
		buf_init(&tok->impl->cache_keys);
		buf_init(&tok->impl->norm);
		ret = load_json(tok, root, json_path, err, errlen);
		if (ret == 0)
			load_config(tok, cfg_path);
		else
			tokenizer_free(tok);
	}
	json_decref(root);
	free(json_path);
	free(cfg_path);
	return ret;
}

void tokenizer_free(struct tokenizer *tok)
{
	struct tokenizer_impl *im = tok->impl;
	if (!im)
		return;
	for (int i = 0; i < tok->vocab_size; i++) {
		if (im->tok_str)
			free(im->tok_str[i]);
		if (im->tok_bytes)
			free(im->tok_bytes[i]);
	}
	free(im->tok_str);
	free(im->tok_bytes);
	free(im->tok_nbytes);
	free(im->special);
	free(im->vocab);
	free(im->merges);
	free(im->added);
	if (im->md)
		pcre2_match_data_free(im->md);
	for (int k = 0; k < 2; k++)
		if (im->re[k])
			pcre2_code_free(im->re[k]);
	free(im->cache);
	buf_free(&im->cache_keys);
	free(im->cache_ids);
	buf_free(&im->norm);
	free(im);
	memset(tok, 0, sizeof *tok);
	tok->eos_id = tok->pad_id = tok->bos_id = -1;
}

/* ---- BPE ---------------------------------------------------------------------------- */

/* Short pre-tokens: repeatedly merge the leftmost pair of lowest rank. */
static size_t bpe_small(const struct tokenizer_impl *im, int *sym, size_t n)
{
	while (n > 1) {
		int best = INT32_MAX, best_id = -1;
		size_t at = 0;
		for (size_t i = 0; i + 1 < n; i++) {
			const struct merge_slot *m = merge_get(im, sym[i], sym[i + 1]);
			if (m && m->rank < best) {
				best = m->rank;
				best_id = m->id;
				at = i;
			}
		}
		if (best_id < 0)
			break;
		sym[at] = best_id;
		memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
		n--;
	}
	return n;
}

struct heap_item {
	int rank;
	uint32_t pos;    /* left symbol */
	uint32_t right;  /* right symbol when pushed */
};

static int heap_less(const struct heap_item *a, const struct heap_item *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!heap_less(&it, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n)
{
	struct heap_item top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
			c++;
		if (!heap_less(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Long pre-tokens: a heap of candidate merges over a linked list of symbols, O(n log n).
 * Stale heap entries (a neighbour changed since the push) are skipped when popped. */
static size_t bpe_large(const struct tokenizer_impl *im, int *sym, size_t n)
{
	uint32_t *next = xmalloc(n * sizeof *next), *prev = xmalloc(n * sizeof *prev);
	unsigned char *dead = xcalloc(n, 1);
	struct heap_item *h = xmalloc(2 * n * sizeof *h);
	size_t hn = 0;
	for (size_t i = 0; i < n; i++) {
		next[i] = (uint32_t)(i + 1);
		prev[i] = (uint32_t)(i - 1);   /* wraps for i == 0: never used */
	}
	for (size_t i = 0; i + 1 < n; i++) {
		const struct merge_slot *m = merge_get(im, sym[i], sym[i + 1]);
		if (m)
			heap_push(h, &hn, (struct heap_item){ m->rank, (uint32_t)i, (uint32_t)(i + 1) });
	}
	while (hn) {
		struct heap_item it = heap_pop(h, &hn);
		uint32_t a = it.pos, b = it.right;
		if (dead[a] || dead[b] || next[a] != b)
			continue;
		const struct merge_slot *m = merge_get(im, sym[a], sym[b]);
		if (!m || m->rank != it.rank)
			continue;
		sym[a] = m->id;
		dead[b] = 1;
		next[a] = next[b];
		if (next[a] < n)
			prev[next[a]] = a;
		if (a > 0) {
			uint32_t p = prev[a];
			const struct merge_slot *pm = merge_get(im, sym[p], sym[a]);
			if (pm)
				heap_push(h, &hn, (struct heap_item){ pm->rank, p, a });
		}
		if (next[a] < n) {
			const struct merge_slot *nm = merge_get(im, sym[a], sym[next[a]]);
			if (nm)
				heap_push(h, &hn, (struct heap_item){ nm->rank, a, next[a] });
		}
	}
	size_t w = 0;
	for (size_t i = 0; i < n; i = next[i])
		sym[w++] = sym[i];
	free(next);
	free(prev);
	free(dead);
	free(h);
	return w;
}

/* ---- encode ------------------------------------------------------------------------- */

static void cache_clear(struct tokenizer_impl *im)
{
	memset(im->cache, 0, CACHE_SLOTS * sizeof *im->cache);
	im->cache_n = 0;
	buf_reset(&im->cache_keys);
	im->cache_ids_len = 0;
}

static void encode_piece(struct tokenizer_impl *im, const char *s, size_t len, struct ids *out)
{
	const unsigned char *u = (const unsigned char *)s;
	if (len == 1) {
		ids_push(out, im->byte_id[u[0]]);
		return;
	}
	struct cache_slot *slot = NULL;
	uint64_t h = 0;
	if (len <= CACHE_MAX_KEY) {
		if (!im->cache)
			im->cache = xcalloc(CACHE_SLOTS, sizeof *im->cache);
		h = util_hash64(s, len);
		size_t i = h & (CACHE_SLOTS - 1);
		for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
			struct cache_slot *e = &im->cache[i];
			if (!e->used) {
				slot = e;
				break;
			}
			if (e->h == h && e->key_len == len &&
			    !memcmp(im->cache_keys.p + e->key_off, s, len)) {
				for (uint32_t k = 0; k < e->n_ids; k++)
					ids_push(out, im->cache_ids[e->ids_off + k]);
				return;
			}
		}
	}
	size_t start = out->n;
	int whole = -1;
	if (im->ignore_merges) {   /* a pre-token that is a vocab entry is taken whole */
		struct buf bl;
		buf_init(&bl);
		for (size_t k = 0; k < len; k++) {
			char tmp[4];
			buf_add(&bl, tmp, utf8_enc(im->byte_cp[u[k]], tmp));
		}
		whole = vocab_get(im, bl.p, bl.len);
		buf_free(&bl);
	}
	if (whole >= 0) {
		ids_push(out, whole);
	} else {
		for (size_t k = 0; k < len; k++)
			ids_push(out, im->byte_id[u[k]]);
		size_t m = len <= BPE_SMALL ? bpe_small(im, out->p + start, len)
					    : bpe_large(im, out->p + start, len);
		out->n = start + m;
	}
	if (!slot)
		return;
	if (im->cache_n >= CACHE_MAX_ENTRIES) {   /* full: start over, keep this one out */
		cache_clear(im);
		return;
	}
	size_t nid = out->n - start;
	slot->used = 1;
	slot->h = h;
	slot->key_off = (uint32_t)im->cache_keys.len;
	slot->key_len = (uint32_t)len;
	buf_add(&im->cache_keys, s, len);
	if (im->cache_ids_len + nid > im->cache_ids_cap) {
		im->cache_ids_cap = (im->cache_ids_len + nid) * 2;
		im->cache_ids = xrealloc(im->cache_ids, im->cache_ids_cap * sizeof *im->cache_ids);
	}
	slot->ids_off = (uint32_t)im->cache_ids_len;
	slot->n_ids = (uint32_t)nid;
	memcpy(im->cache_ids + im->cache_ids_len, out->p + start, nid * sizeof(int));
	im->cache_ids_len += nid;
	im->cache_n++;
}

/* 1 if s[0..n) holds a letter or number that the system PCRE2 does not know as one
 * (lib/unicode_tables.h); all of them take 3 or 4 bytes. */
static int has_extra_letter(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n; i++) {
		uint32_t c;
		size_t l;
		if (u[i] < 0xE0 || !(l = utf8_dec(u + i, n - i, &c)))
			continue;
		i += l - 1;
		if (c >= unicode_extra_ranges[0][0] &&
		    in_ranges(unicode_extra_ranges, ARRAY_LEN(unicode_extra_ranges), c))
			return 1;
	}
	return 0;
}

/* Normalize, pre-tokenize and BPE one stretch of text without added tokens. */
static int encode_text(struct tokenizer_impl *im, const char *s, size_t len, struct ids *out)
{
	if (!len)
		return 0;
	if (im->nfc && nfc_apply(s, len, &im->norm)) {
		s = im->norm.p;
		len = im->norm.len;
	}
	size_t pos = 0;
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(im->md);
	int k = has_extra_letter(s, len);
	pcre2_code *re = im->re[k];
	while (pos < len) {
		int rc = im->jit[k] ? pcre2_jit_match(re, (PCRE2_SPTR)s, len, pos, 0, im->md, NULL)
				    : PCRE2_ERROR_JIT_BADOPTION;
		if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)   /* no JIT, or its stack ran out */
			rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, 0, im->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH) {
			encode_piece(im, s + pos, len - pos, out);
			break;
		}
		if (rc < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(rc, msg, sizeof msg);
			warn_msg("tokenizer: regex match failed: %s", (const char *)msg);
			return -1;
		}
		size_t ms = ov[0], me = ov[1];
		if (ms > pos)   /* text the pattern skipped (e.g. invalid bytes): a piece of its own */
			encode_piece(im, s + pos, ms - pos, out);
		if (me > ms) {
			encode_piece(im, s + ms, me - ms, out);
			pos = me;
		} else {   /* empty match: step over one character */
			uint32_t c;
			size_t l = utf8_dec((const unsigned char *)s + ms, len - ms, &c);
			size_t step = l ? l : 1;
			encode_piece(im, s + ms, step, out);
			pos = ms + step;
		}
	}
	return 0;
}

/* JavaScript's String.prototype.trim white space (what the reference strips around lstrip /
 * rstrip added tokens). */
static int is_js_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 0x20 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
	       c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

static size_t trim_end(const char *s, size_t n)
{
	while (n > 0) {
		size_t k = n - 1;
		while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80 && n - k < 4)
			k--;
		uint32_t c;
		if (utf8_dec((const unsigned char *)s + k, n - k, &c) != n - k || !is_js_space(c))
			break;
		n = k;
	}
	return n;
}

static size_t trim_start(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint32_t c;
		size_t l = utf8_dec((const unsigned char *)s + i, n - i, &c);
		if (!l || !is_js_space(c))
			break;
		i += l;
	}
	return i;
}

static const struct added *added_at(const struct tokenizer_impl *im, const char *s, size_t n,
				    int with_special)
{
	for (size_t k = 0; k < im->n_added; k++) {
		const struct added *a = &im->added[k];
		if (a->len <= n && (with_special || !a->special) && !memcmp(a->s, s, a->len))
			return a;   /* longest first */
	}
	return NULL;
}

static int encode(struct tokenizer *tok, const char *text, size_t len, int with_special,
		  int **ids, size_t *n)
{
	struct tokenizer_impl *im = tok->impl;
	struct ids out = { 0 };
	size_t start = 0, i = 0;
	int ret = 0, rstrip = 0;
	while (i < len && ret == 0) {
		const struct added *a = NULL;
		if (im->added_first[(unsigned char)text[i]])
			a = added_at(im, text + i, len - i, with_special);
		if (!a) {
			i++;
			continue;
		}
		size_t s0 = start, e0 = i;
		if (rstrip)
			s0 += trim_start(text + s0, e0 - s0);
		if (a->lstrip)
			e0 = s0 + trim_end(text + s0, e0 - s0);
		ret = encode_text(im, text + s0, e0 - s0, &out);
		ids_push(&out, a->id);
		rstrip = a->rstrip;
		i += a->len;
		start = i;
	}
	if (ret == 0) {
		size_t s0 = start;
		if (rstrip)
			s0 += trim_start(text + s0, len - s0);
		ret = encode_text(im, text + s0, len - s0, &out);
	}
	if (ret) {
		free(out.p);
		*ids = NULL;
		*n = 0;
		return -1;
	}
	*ids = out.p ? out.p : xmalloc(sizeof(int));
	*n = out.n;
	return 0;
}

int tokenizer_encode(struct tokenizer *tok, const char *text, size_t len, int **ids, size_t *n)
{
	return encode(tok, text, len, 1, ids, n);
}

int tokenizer_encode_ordinary(struct tokenizer *tok, const char *text, size_t len, int **ids,
			      size_t *n)
{
	return encode(tok, text, len, 0, ids, n);
}

/* ---- decode and lookups ------------------------------------------------------------- */

int tokenizer_decode(const struct tokenizer *tok, const int *ids, size_t n, unsigned flags,
		     struct buf *out)
{
	const struct tokenizer_impl *im = tok->impl;
	for (size_t i = 0; i < n; i++) {
		int id = ids[i];
		if (id < 0 || id >= tok->vocab_size || !im->tok_bytes[id])
			return -1;
		if ((flags & TOKENIZER_DECODE_SKIP_SPECIAL) && im->special[id])
			continue;
		buf_add(out, im->tok_bytes[id], im->tok_nbytes[id]);
	}
	return 0;
}

int tokenizer_token_id(const struct tokenizer *tok, const char *token)
{
	return tok->impl ? vocab_get(tok->impl, token, strlen(token)) : -1;
}

const char *tokenizer_token_str(const struct tokenizer *tok, int id)
{
	if (!tok->impl || id < 0 || id >= tok->vocab_size)
		return NULL;
	return tok->impl->tok_str[id];
}

int tokenizer_is_special(const struct tokenizer *tok, int id)
{
	if (!tok->impl || id < 0 || id >= tok->vocab_size)
		return 0;
	return tok->impl->special[id];
}

int tokenizer_vocab_size(const struct tokenizer *tok)
{
	return tok->vocab_size;
}
