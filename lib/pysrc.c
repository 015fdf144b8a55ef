/* pysrc: tokenise Python source in one pass, then derive class/def blocks, call sites and
 * assignments from the tokens. See pysrc.h for the model and a tutorial.
 *
 * Pass 1 (scan) walks the bytes once: comments, strings (all forms), names, numbers,
 * operators, brackets with their matches, logical lines and indentation. Pass 2 walks the
 * tokens: blocks from the logical lines' indentation, calls from NAME '(' chains,
 * assignments from depth-0 '=' in each logical line.
 */
#include <stdlib.h>
#include <string.h>

#include "pysrc.h"

#define GROW(arr, n, cap) do { \
	if ((n) == (cap)) { \
		(cap) = (cap) ? (cap) * 2 : 64; \
		(arr) = xrealloc((arr), (cap) * sizeof(*(arr))); \
	} \
} while (0)

static int is_ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static int is_ident(unsigned char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9');
}

static int is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static void add_utf8(struct buf *b, unsigned long cp)
{
	char u[4];

	if (cp < 0x80) {
		buf_addc(b, (int)cp);
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 2);
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 3);
	} else {
		u[0] = (char)(0xF0 | ((cp >> 18) & 0x07));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		buf_add(b, u, 4);
	}
}

/* ------------------------------------------------------------------------------------ */
/* pass 1: the scanner */

struct scanner {
	struct pysrc *p;
	const char *s;
	size_t n, i;
	int line;
	size_t line_start;      /* offset of the current physical line */
	int depth;
	int *stack;             /* open bracket token indices */
	int nstack, capstack;
	int line_open;          /* a logical line has tokens */
	int last_indent;
	struct buf text;        /* decoded string contents */
	size_t *nl;             /* the string's source newlines: decoded offsets after them */
	size_t nnl, capnl;
	size_t field_from;      /* the f-string field being copied: its first source offset */
};

/* A source newline in the string being scanned; the decoded text from offset at on is on
 * the next line */
static void str_newline(struct scanner *sc, size_t at)
{
	sc->line++;
	GROW(sc->nl, sc->nnl, sc->capnl);
	sc->nl[sc->nnl++] = at;
}

static int add_tok(struct scanner *sc, int kind, size_t start, size_t end, int line)
{
	struct pysrc *p = sc->p;
	struct pysrc_tok *t;

	if (!sc->line_open && kind != PYSRC_TOK_NEWLINE) {
		struct pysrc_line *l;
		int col = 0;

		GROW(p->lines, p->nlines, p->cap_lines);
		l = &p->lines[p->nlines++];
		l->tok = (int)p->ntok;
		l->line = line;
		for (size_t k = sc->line_start; k < start; k++)
			col = sc->s[k] == '\t' ? (col / 8 + 1) * 8 : col + 1;
		/* a statement after ';' shares its line's indentation */
		if (p->ntok && p->tok[p->ntok - 1].kind == PYSRC_TOK_NEWLINE &&
		    p->tok[p->ntok - 1].end > p->tok[p->ntok - 1].start)
			col = sc->last_indent;
		l->indent = col;
		sc->last_indent = col;
		sc->line_open = 1;
	}
	GROW(p->tok, p->ntok, p->cap_tok);
	t = &p->tok[p->ntok];
	t->kind = kind;
	t->line = line;
	t->start = start;
	t->end = end;
	t->depth = sc->depth;
	t->match = -1;
	t->str = -1;
	return (int)p->ntok++;
}

/* All tokens of the logical line are strings: a docstring or a no-op string statement. */
static void mark_docstrings(struct scanner *sc, struct pysrc_line *l)
{
	struct pysrc *p = sc->p;
	int k, strings = 0;

	for (k = l->tok; k < (int)p->ntok; k++) {
		if (p->tok[k].kind == PYSRC_TOK_STRING)
			strings++;
		else if (p->tok[k].kind == PYSRC_TOK_OP && (pysrc_tok_is(p, k, "(") || pysrc_tok_is(p, k, ")")))
			continue;
		else
			return;
	}
	if (!strings)
		return;
	for (k = l->tok; k < (int)p->ntok; k++) {
		struct pysrc_tok *t = &p->tok[k];
		if (t->kind != PYSRC_TOK_STRING)
			continue;
		p->str[t->str].flags |= PYSRC_STR_DOC;
		for (size_t b = t->start; b < t->end; b++)
			if (p->clean[b] != '\n')
				p->clean[b] = ' ';
	}
}

static void end_logical_line(struct scanner *sc, size_t at, size_t width)
{
	struct pysrc *p = sc->p;
	struct pysrc_line *l;

	if (!sc->line_open)
		return;
	l = &p->lines[p->nlines - 1];
	mark_docstrings(sc, l);
	add_tok(sc, PYSRC_TOK_NEWLINE, at, at + width, sc->line);
	l->ntok = (int)p->ntok - l->tok;
	sc->line_open = 0;
}

/* Skip a string nested in an f-string replacement field; returns the offset after it. */
static size_t skip_nested_string(struct scanner *sc, size_t i)
{
	const char *s = sc->s;
	char q = s[i];
	int triple = i + 2 < sc->n && s[i + 1] == q && s[i + 2] == q;

	i += triple ? 3 : 1;
	while (i < sc->n) {
		if (s[i] == '\\') {
			/* a backslash as the source's last byte escapes nothing */
			if (i + 1 < sc->n && s[i + 1] == '\n') {
				str_newline(sc, sc->text.len + (i + 2 - sc->field_from));
				sc->line_start = i + 2;
			}
			i += 2;
			continue;
		}
		if (s[i] == '\n') {
			if (!triple)
				return i;       /* left open: the newline is the field's to count */
			str_newline(sc, sc->text.len + (i + 1 - sc->field_from));
			sc->line_start = i + 1;
		}
		if (s[i] == q && (!triple || (i + 2 < sc->n && s[i + 1] == q && s[i + 2] == q)))
			return i + (triple ? 3 : 1);
		i++;
	}
	return i < sc->n ? i : sc->n;
}

/* An f-string replacement field starting at s[i] == '{'; copies it verbatim to text and
 * returns the offset after its closing '}'. */
static size_t scan_field(struct scanner *sc, size_t i, int triple)
{
	const char *s = sc->s;
	size_t from = i;
	int d = 0;

	sc->field_from = from;
	while (i < sc->n) {
		char c = s[i];
		if (c == '{' || c == '(' || c == '[') {
			d++;
		} else if (c == '}' || c == ')' || c == ']') {
			if (--d == 0 && c == '}') {
				i++;
				break;
			}
		} else if (c == '\'' || c == '"') {
			i = skip_nested_string(sc, i);
			continue;
		} else if (c == '\n') {
			if (!triple && d <= 1)
				break;
			str_newline(sc, sc->text.len + (i + 1 - from));
			sc->line_start = i + 1;
		}
		i++;
	}
	buf_add(&sc->text, s + from, i - from);
	return i;
}

/* A string literal with its prefix at s[start..i), quote at s[i]. */
static void scan_string(struct scanner *sc, size_t start, int flags)
{
	struct pysrc *p = sc->p;
	const char *s = sc->s;
	size_t i = sc->i;
	char q = s[i];
	int triple = i + 2 < sc->n && s[i + 1] == q && s[i + 2] == q;
	int line0 = sc->line, t, closed = 0;
	size_t line_start0 = sc->line_start, line_start1;
	struct pysrc_string *st;

	if (triple)
		flags |= PYSRC_STR_TRIPLE;
	i += triple ? 3 : 1;
	buf_reset(&sc->text);
	sc->nnl = 0;
	while (i < sc->n) {
		unsigned char c = (unsigned char)s[i];
		if (c == (unsigned char)q && (!triple || (i + 2 < sc->n && s[i + 1] == q && s[i + 2] == q))) {
			i += triple ? 3 : 1;
			closed = 1;
			break;
		}
		if (c == '\n') {
			if (!triple)
				break;
			buf_addc(&sc->text, '\n');
			str_newline(sc, sc->text.len);
			sc->line_start = i + 1;
			i++;
			continue;
		}
		if ((flags & PYSRC_STR_FSTRING) && c == '{') {
			if (i + 1 < sc->n && s[i + 1] == '{') {
				buf_addc(&sc->text, '{');
				i += 2;
			} else {
				i = scan_field(sc, i, triple);
			}
			continue;
		}
		if ((flags & PYSRC_STR_FSTRING) && c == '}' && i + 1 < sc->n && s[i + 1] == '}') {
			buf_addc(&sc->text, '}');
			i += 2;
			continue;
		}
		if (c != '\\' || i + 1 >= sc->n) {
			buf_addc(&sc->text, c);
			i++;
			continue;
		}
		/* an escape */
		if (flags & PYSRC_STR_RAW) {
			/* raw: the backslash stays, and it protects the next byte (a quote) */
			buf_add(&sc->text, s + i, 2);
			if (s[i + 1] == '\n') {
				str_newline(sc, sc->text.len);
				sc->line_start = i + 2;
			}
			i += 2;
			continue;
		}
		c = (unsigned char)s[i + 1];
		i += 2;
		switch (c) {
		case '\n':
			str_newline(sc, sc->text.len);
			sc->line_start = i;
			break;
		case 'n': buf_addc(&sc->text, '\n'); break;
		case 't': buf_addc(&sc->text, '\t'); break;
		case 'r': buf_addc(&sc->text, '\r'); break;
		case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
			int v = c - '0', k = 0;
			while (k < 2 && i < sc->n && s[i] >= '0' && s[i] <= '7')
				v = v * 8 + (s[i++] - '0'), k++;
			buf_addc(&sc->text, v & 0xFF);
			break;
		}
		case 'x': case 'u': case 'U': {
			int want = c == 'x' ? 2 : c == 'u' ? 4 : 8, k;
			unsigned long v = 0;
			for (k = 0; k < want && i + k < sc->n && util_hexval((unsigned char)s[i + k]) >= 0; k++)
				v = v * 16 + (unsigned long)util_hexval((unsigned char)s[i + k]);
			if (k < want || (flags & PYSRC_STR_BYTES && c != 'x') || v > 0x10FFFF) {
				buf_add(&sc->text, s + i - 2, 2);
				break;
			}
			i += (size_t)k;
			if (c == 'x')
				buf_addc(&sc->text, (int)v);
			else
				add_utf8(&sc->text, v);
			break;
		}
		case 'a': buf_addc(&sc->text, '\a'); break;
		case 'b': buf_addc(&sc->text, '\b'); break;
		case 'f': buf_addc(&sc->text, '\f'); break;
		case 'v': buf_addc(&sc->text, '\v'); break;
		case '\\': case '\'': case '"':
			buf_addc(&sc->text, c);
			break;
		default:        /* unknown escapes (\N{..} too) stay as written */
			buf_addc(&sc->text, '\\');
			buf_addc(&sc->text, c);
			break;
		}
	}
	if (!closed)
		flags |= PYSRC_STR_UNTERMINATED;
	/* the indentation of a line opened by this string is measured on its first line */
	line_start1 = sc->line_start;
	sc->line_start = line_start0;
	t = add_tok(sc, PYSRC_TOK_STRING, start, i, line0);
	sc->line_start = line_start1;
	GROW(p->str, p->nstr, p->cap_str);
	st = &p->str[p->nstr];
	st->start = start;
	st->end = i;
	st->line = line0;
	st->end_line = sc->line;
	st->flags = flags;
	st->tok = t;
	st->group = (int)p->nstr;
	if (t > 0 && p->tok[t - 1].kind == PYSRC_TOK_STRING)
		st->group = p->str[p->tok[t - 1].str].group;
	st->len = sc->text.len;
	st->text = xmalloc(sc->text.len + 1);
	memcpy(st->text, sc->text.p, sc->text.len);
	st->text[sc->text.len] = '\0';
	st->nnl = sc->nnl;
	st->nl = NULL;
	if (sc->nnl) {
		st->nl = xmalloc(sc->nnl * sizeof(*st->nl));
		memcpy(st->nl, sc->nl, sc->nnl * sizeof(*st->nl));
	}
	p->tok[t].str = (int)p->nstr++;
	sc->i = i;
}

static const char *ops3[] = { "**=", "//=", ">>=", "<<=", "...", NULL };
static const char *ops2[] = { "**", "//", "==", "!=", "<=", ">=", "->", "+=", "-=", "*=", "/=",
	"%=", "&=", "|=", "^=", "@=", ":=", "<<", ">>", NULL };

static size_t op_len(const char *s, size_t n)
{
	for (int k = 0; ops3[k]; k++)
		if (n >= 3 && !memcmp(s, ops3[k], 3))
			return 3;
	for (int k = 0; ops2[k]; k++)
		if (n >= 2 && !memcmp(s, ops2[k], 2))
			return 2;
	return 1;
}

static void scan(struct scanner *sc)
{
	struct pysrc *p = sc->p;
	const char *s = sc->s;

	while (sc->i < sc->n) {
		size_t i = sc->i;
		unsigned char c = (unsigned char)s[i];

		if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
			sc->i++;
		} else if (c == '\n') {
			if (sc->depth == 0)
				end_logical_line(sc, i, 0);
			sc->line++;
			sc->i++;
			sc->line_start = sc->i;
		} else if (c == '\\' && i + 1 < sc->n && (s[i + 1] == '\n' || (s[i + 1] == '\r' &&
		           i + 2 < sc->n && s[i + 2] == '\n'))) {
			/* a continuation: before LF or CR LF (lines end at LF; a lone CR is blank) */
			sc->i += s[i + 1] == '\r' ? 3 : 2;
			sc->line++;
			sc->line_start = sc->i;
		} else if (c == '#') {
			while (sc->i < sc->n && s[sc->i] != '\n')
				p->clean[sc->i++] = ' ';
		} else if (c == '\'' || c == '"') {
			scan_string(sc, i, 0);
		} else if (is_ident_start(c)) {
			size_t e = i + 1;
			while (e < sc->n && is_ident((unsigned char)s[e]))
				e++;
			if (e < sc->n && (s[e] == '\'' || s[e] == '"') && e - i <= 2) {
				int flags = 0, ok = 1;
				for (size_t k = i; k < e; k++) {
					switch (s[k]) {
					case 'r': case 'R': flags |= PYSRC_STR_RAW; break;
					case 'b': case 'B': flags |= PYSRC_STR_BYTES; break;
					case 'f': case 'F': flags |= PYSRC_STR_FSTRING; break;
					case 'u': case 'U': break;
					default: ok = 0;
					}
				}
				if (ok) {
					sc->i = e;
					scan_string(sc, i, flags);
					continue;
				}
			}
			add_tok(sc, PYSRC_TOK_NAME, i, e, sc->line);
			sc->i = e;
		} else if (is_digit(c) || (c == '.' && i + 1 < sc->n && is_digit((unsigned char)s[i + 1]))) {
			size_t e = i + 1;
			while (e < sc->n) {
				unsigned char d = (unsigned char)s[e];
				if (is_ident(d) || d == '.')
					e++;
				else if ((d == '+' || d == '-') && (s[e - 1] == 'e' || s[e - 1] == 'E') &&
				         !(s[i] == '0' && i + 1 < e && (s[i + 1] == 'x' || s[i + 1] == 'X')))
					e++;
				else
					break;
			}
			add_tok(sc, PYSRC_TOK_NUMBER, i, e, sc->line);
			sc->i = e;
		} else if (c == ';' && sc->depth == 0) {
			end_logical_line(sc, i, 1);
			sc->i++;
		} else {
			size_t k = op_len(s + i, sc->n - i);
			if (c == '(' || c == '[' || c == '{') {
				int t = add_tok(sc, PYSRC_TOK_OP, i, i + 1, sc->line);
				GROW(sc->stack, sc->nstack, sc->capstack);
				sc->stack[sc->nstack++] = t;
				sc->depth++;
			} else if (c == ')' || c == ']' || c == '}') {
				if (sc->nstack) {
					int o = sc->stack[--sc->nstack];
					sc->depth--;
					int t = add_tok(sc, PYSRC_TOK_OP, i, i + 1, sc->line);
					p->tok[t].match = o;
					p->tok[o].match = t;
				} else {
					add_tok(sc, PYSRC_TOK_OP, i, i + 1, sc->line);
				}
			} else {
				add_tok(sc, PYSRC_TOK_OP, i, i + k, sc->line);
			}
			sc->i = i + k;
		}
	}
	sc->depth = 0;
	end_logical_line(sc, sc->n, 0);
	p->nlines_phys = sc->line;
}

/* ------------------------------------------------------------------------------------ */
/* pass 2: blocks, calls, assignments */

int pysrc_tok_is(const struct pysrc *p, int i, const char *text)
{
	size_t n;

	if (i < 0 || (size_t)i >= p->ntok)
		return 0;
	n = p->tok[i].end - p->tok[i].start;
	if (n == 0)                                     /* NEWLINE at the end of the source */
		return text[0] == '\0';
	if (p->src[p->tok[i].start] != text[0])        /* the common miss, without strlen */
		return 0;
	return strlen(text) == n && !memcmp(p->src + p->tok[i].start, text, n);
}

static int is_name(const struct pysrc *p, int i)
{
	return i >= 0 && (size_t)i < p->ntok && p->tok[i].kind == PYSRC_TOK_NAME;
}

static const char *keywords[] = { "and", "as", "assert", "async", "await", "break", "class",
	"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
	"if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
	"try", "while", "with", "yield", "None", "True", "False", NULL };

static int is_keyword(const struct pysrc *p, int i)
{
	for (int k = 0; keywords[k]; k++)
		if (pysrc_tok_is(p, i, keywords[k]))
			return 1;
	return 0;
}

static int tok_line_end(const struct pysrc *p, int i)
{
	const struct pysrc_tok *t = &p->tok[i];
	return t->kind == PYSRC_TOK_STRING ? p->str[t->str].end_line : t->line;
}

static void squeeze(struct buf *b, const char *s, size_t n)
{
	int space = 0;

	for (size_t k = 0; k < n; k++) {
		char c = s[k];
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\\') {
			space = 1;
			continue;
		}
		if (space && b->len && c != ',' && c != ')' && b->p[b->len - 1] != '(')
			buf_addc(b, ' ');
		space = 0;
		buf_addc(b, c);
	}
}

static void close_block(struct pysrc *p, int b, int last_tok)
{
	struct pysrc_block *bl = &p->block[b];

	if (last_tok < bl->tok_start)
		last_tok = bl->tok_start;
	bl->tok_end = last_tok + 1;
	bl->end = p->tok[last_tok].end;
	bl->end_line = tok_line_end(p, last_tok);
}

static void find_blocks(struct pysrc *p)
{
	int stack[256], nst = 0, decor = -1;
	struct buf b;

	buf_init(&b);
	for (size_t li = 0; li < p->nlines; li++) {
		struct pysrc_line *l = &p->lines[li];
		int t = l->tok, kind = 0;

		while (nst && p->block[stack[nst - 1]].indent >= l->indent) {
			int last = l->tok - 1;
			while (last > 0 && p->tok[last].kind == PYSRC_TOK_NEWLINE)
				last--;
			close_block(p, stack[--nst], last);
		}
		if (pysrc_tok_is(p, t, "@")) {
			if (decor < 0)
				decor = t;
			continue;
		}
		if (pysrc_tok_is(p, t, "async"))
			t++;
		if (pysrc_tok_is(p, t, "def"))
			kind = PYSRC_DEF;
		else if (pysrc_tok_is(p, t, "class"))
			kind = PYSRC_CLASS;
		if (!kind || !is_name(p, t + 1)) {
			decor = -1;
			continue;
		}
		GROW(p->block, p->nblock, p->cap_block);
		struct pysrc_block *bl = &p->block[p->nblock];
		memset(bl, 0, sizeof(*bl));
		bl->kind = kind;
		bl->name = xstrndup(p->src + p->tok[t + 1].start, p->tok[t + 1].end - p->tok[t + 1].start);
		bl->line = p->tok[l->tok].line;
		bl->start = p->tok[l->tok].start;
		bl->tok_start = l->tok;
		bl->tok_decor = decor >= 0 ? decor : l->tok;
		bl->ndecor = l->tok - bl->tok_decor;
		bl->indent = l->indent;
		bl->parent = nst ? stack[nst - 1] : -1;
		decor = -1;
		buf_reset(&b);
		int k = t + 2, end = l->tok + l->ntok;
		if (pysrc_tok_is(p, k, "(") && p->tok[k].match > k) {
			int m = p->tok[k].match;
			squeeze(&b, p->src + p->tok[k].end, p->tok[m].start - p->tok[k].end);
			k = m + 1;
		}
		bl->bases = buf_detach(&b, NULL);
		while (k < end && !(pysrc_tok_is(p, k, ":") && p->tok[k].depth == p->tok[l->tok].depth))
			k++;
		bl->tok_body = k < end ? k + 1 : end;
		bl->body_start = k < end ? p->tok[k].end : p->tok[end - 1].end;
		bl->tok_end = end;
		bl->end = p->tok[end - 1].start;
		bl->end_line = bl->line;
		if (nst < (int)ARRAY_LEN(stack))
			stack[nst++] = (int)p->nblock;
		p->nblock++;
	}
	while (nst) {
		int last = (int)p->ntok - 1;
		while (last > 0 && p->tok[last].kind == PYSRC_TOK_NEWLINE)
			last--;
		close_block(p, stack[--nst], last);
	}
	buf_free(&b);
}

int pysrc_block_at(const struct pysrc *p, int tok)
{
	if (tok < 0 || (size_t)tok >= p->ntok)
		return -1;
	return p->tok[tok].block;
}

/* tok[].block: blocks come in source order, parents before children, so a later block
 * overwrites its parent's range. */
static void mark_token_blocks(struct pysrc *p)
{
	for (size_t i = 0; i < p->ntok; i++)
		p->tok[i].block = -1;
	for (size_t b = 0; b < p->nblock; b++)
		for (int k = p->block[b].tok_start; k < p->block[b].tok_end && (size_t)k < p->ntok; k++)
			p->tok[k].block = (int)b;
}

int pysrc_block_count(const struct pysrc *p, int b, const char *text)
{
	int n = 0;

	if (b < 0 || (size_t)b >= p->nblock)
		return 0;
	for (int k = p->block[b].tok_body; k < p->block[b].tok_end; k++)
		n += pysrc_tok_is(p, k, text);
	return n;
}

int pysrc_find_block(const struct pysrc *p, const char *name, int kind, int parent)
{
	for (size_t b = 0; b < p->nblock; b++)
		if ((!kind || p->block[b].kind == kind) && !strcmp(p->block[b].name, name) &&
		    (parent == -2 || p->block[b].parent == parent))
			return (int)b;
	return -1;
}

int pysrc_block_within(const struct pysrc *p, int b, int outer)
{
	while (b >= 0) {
		if (b == outer)
			return 1;
		b = p->block[b].parent;
	}
	return 0;
}

int pysrc_line_of(const struct pysrc *p, int tok)
{
	size_t lo = 0, hi = p->nlines;

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (p->lines[mid].tok <= tok)
			lo = mid;
		else
			hi = mid;
	}
	return (int)lo;
}

int pysrc_suite_end(const struct pysrc *p, int l)
{
	int ind = p->lines[l].indent;
	size_t k;

	for (k = (size_t)l + 1; k < p->nlines; k++)
		if (p->lines[k].indent <= ind)
			break;
	return (int)k;
}

/* Dotted text of the expression chain ending at token j: NAME(.NAME)*, with "()" for a call
 * in the chain and "?" for anything else; returns the chain's first token. */
static int chain_text(const struct pysrc *p, int j, struct buf *b, int level)
{
	int first = j;

	if (level > 16) {
		buf_addc(b, '?');
		return j;
	}
	if (is_name(p, j) && !is_keyword(p, j)) {
		if (pysrc_tok_is(p, j - 1, ".") && j >= 2) {
			first = chain_text(p, j - 2, b, level + 1);
			buf_addc(b, '.');
		}
		buf_add(b, p->src + p->tok[j].start, p->tok[j].end - p->tok[j].start);
		return first;
	}
	if (pysrc_tok_is(p, j, ")") && p->tok[j].match >= 1 && is_name(p, p->tok[j].match - 1) &&
	    !is_keyword(p, p->tok[j].match - 1)) {
		first = chain_text(p, p->tok[j].match - 1, b, level + 1);
		buf_adds(b, "()");
		return first;
	}
	buf_addc(b, '?');
	return j;
}

static void find_calls(struct pysrc *p)
{
	struct buf b;

	buf_init(&b);
	for (size_t i = 1; i < p->ntok; i++) {
		int j = (int)i - 1;
		if (!pysrc_tok_is(p, (int)i, "(") || !is_name(p, j) || is_keyword(p, j))
			continue;
		if (pysrc_tok_is(p, j - 1, "def") || pysrc_tok_is(p, j - 1, "class"))
			continue;
		buf_reset(&b);
		GROW(p->call, p->ncall, p->cap_call);
		struct pysrc_call *c = &p->call[p->ncall];
		c->tok_name = chain_text(p, j, &b, 0);
		c->callee = buf_detach(&b, NULL);
		c->line = p->tok[j].line;
		c->tok_open = (int)i;
		c->tok_close = p->tok[i].match >= 0 ? p->tok[i].match : (int)i;
		c->block = pysrc_block_at(p, (int)i);
		p->ncall++;
	}
	buf_free(&b);
}

static const char *compound[] = { "if", "elif", "else", "while", "for", "with", "try", "except",
	"finally", "def", "class", "async", NULL };

/* One target [a, e): NAME(.NAME)* or a subscript of one. */
static void add_target(struct pysrc *p, int a, int e, int op, int v, int end)
{
	struct buf b;

	if (pysrc_tok_is(p, a, "*"))
		a++;
	if (a >= e)
		return;
	buf_init(&b);
	int last = e - 1;
	int sub = 0;
	if (pysrc_tok_is(p, last, "]") && p->tok[last].match > a) {
		last = p->tok[last].match - 1;
		sub = 1;
	}
	if (chain_text(p, last, &b, 0) != a || strchr(b.p, '?')) {
		buf_free(&b);
		return;
	}
	if (sub)
		buf_adds(&b, "[]");
	GROW(p->assign, p->nassign, p->cap_assign);
	struct pysrc_assign *s = &p->assign[p->nassign++];
	s->target = buf_detach(&b, NULL);
	buf_free(&b);
	s->op = op;
	s->line = p->tok[a].line;
	s->tok_target = a;
	s->tok_value = v;
	s->tok_end = end;
	s->value_start = v < end ? p->tok[v].start : p->tok[end - 1].start;
	s->value_end = v < end ? p->tok[end - 1].end : s->value_start;
	s->block = pysrc_block_at(p, a);
}

/* Targets [a, e) of one '=': (a, b) and [a, b] unwrapped, a tuple split at its commas. */
static void add_assign(struct pysrc *p, int a, int e, int op, int v, int end)
{
	if (e - a >= 2 && (pysrc_tok_is(p, a, "(") || pysrc_tok_is(p, a, "[")) &&
	    p->tok[a].match == e - 1) {
		a++;
		e--;
	}
	if (a >= e)
		return;
	int d = p->tok[a].depth, s = a;
	for (int k = a; k <= e; k++) {
		if (k < e && !(pysrc_tok_is(p, k, ",") && p->tok[k].depth == d))
			continue;
		if (s == a && k == e)
			add_target(p, s, k, op, v, end);
		else if (k > s)
			add_assign(p, s, k, op, v, end);     /* a part: may be (x, y) itself */
		s = k + 1;
	}
}

static void find_assigns(struct pysrc *p)
{
	int eq[64];

	for (size_t li = 0; li < p->nlines; li++) {
		const struct pysrc_line *l = &p->lines[li];
		int start = l->tok, end = l->tok + l->ntok, neq = 0, op = '=', base;
		if (end > start && p->tok[end - 1].kind == PYSRC_TOK_NEWLINE)
			end--;
		if (end <= start)
			continue;
		base = p->tok[start].depth;
		for (int k = 0; compound[k]; k++) {
			if (!pysrc_tok_is(p, start, compound[k]))
				continue;
			int c = start;
			while (c < end && !(pysrc_tok_is(p, c, ":") && p->tok[c].depth == base))
				c++;
			start = c + 1;
			break;
		}
		for (int k = start; k < end && neq < (int)ARRAY_LEN(eq); k++) {
			if (p->tok[k].kind != PYSRC_TOK_OP || p->tok[k].depth != base)
				continue;
			if (pysrc_tok_is(p, k, "=")) {
				eq[neq++] = k;
			} else if (pysrc_tok_is(p, k, "lambda")) {
				break;
			} else if (!neq && p->tok[k].end - p->tok[k].start >= 2 &&
			           p->src[p->tok[k].end - 1] == '=' && !pysrc_tok_is(p, k, "==") &&
			           !pysrc_tok_is(p, k, "!=") && !pysrc_tok_is(p, k, "<=") &&
			           !pysrc_tok_is(p, k, ">=") && !pysrc_tok_is(p, k, ":=")) {
				eq[neq++] = k;
				op = p->src[p->tok[k].start];
				break;
			}
		}
		if (!neq)
			continue;
		int v = eq[neq - 1] + 1;
		int a = start;
		for (int k = 0; k < neq; k++) {
			int e = eq[k];
			/* annotated target: x: int = 1 */
			for (int c = a; c < e; c++)
				if (pysrc_tok_is(p, c, ":") && p->tok[c].depth == base) {
					add_assign(p, a, c, op, v, end);
					a = -1;
					break;
				}
			if (a >= 0)
				add_assign(p, a, e, op, v, end);
			a = e + 1;
		}
	}
}

/* ------------------------------------------------------------------------------------ */

int pysrc_scan(struct pysrc *p, const char *src, size_t len)
{
	struct scanner sc;

	memset(p, 0, sizeof(*p));
	p->src = src;
	p->len = len;
	p->clean = xmalloc(len + 1);
	memcpy(p->clean, src, len);
	p->clean[len] = '\0';
	memset(&sc, 0, sizeof(sc));
	sc.p = p;
	sc.s = src;
	sc.n = len;
	sc.line = 1;
	buf_init(&sc.text);
	scan(&sc);
	buf_free(&sc.text);
	free(sc.stack);
	free(sc.nl);
	find_blocks(p);
	mark_token_blocks(p);
	find_calls(p);
	find_assigns(p);
	return 0;
}

int pysrc_string_line(const struct pysrc_string *st, size_t off)
{
	size_t lo = 0, hi = st->nnl;

	while (lo < hi) {       /* the newlines whose next line starts at or before off */
		size_t mid = (lo + hi) / 2;
		if (st->nl[mid] <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return st->line + (int)lo;
}

void pysrc_free(struct pysrc *p)
{
	for (size_t i = 0; i < p->nstr; i++) {
		free(p->str[i].text);
		free(p->str[i].nl);
	}
	for (size_t i = 0; i < p->nblock; i++) {
		free(p->block[i].name);
		free(p->block[i].bases);
	}
	for (size_t i = 0; i < p->ncall; i++)
		free(p->call[i].callee);
	for (size_t i = 0; i < p->nassign; i++)
		free(p->assign[i].target);
	free(p->clean);
	free(p->tok);
	free(p->str);
	free(p->block);
	free(p->call);
	free(p->assign);
	free(p->lines);
	memset(p, 0, sizeof(*p));
}

int pysrc_call_arg(const struct pysrc *p, const struct pysrc_call *c, const char *name, int pos,
                   int *a, int *b)
{
	int d = p->tok[c->tok_open].depth + 1, s = c->tok_open + 1, n = 0;

	for (int k = s; k <= c->tok_close; k++) {
		if (k < c->tok_close && !(pysrc_tok_is(p, k, ",") && p->tok[k].depth == d))
			continue;
		if (k > s) {
			int kw = is_name(p, s) && pysrc_tok_is(p, s + 1, "=");
			if (name && kw && pysrc_tok_is(p, s, name)) {
				*a = s + 2;
				*b = k;
				return 0;
			}
			if (!kw && !pysrc_tok_is(p, s, "*") && !pysrc_tok_is(p, s, "**") && n++ == pos &&
			    pos >= 0) {
				*a = s;
				*b = k;
				return 0;
			}
		}
		s = k + 1;
	}
	return -1;
}

void pysrc_strings_in(const struct pysrc *p, int a, int b, struct buf *out)
{
	int prev = -1;

	for (int k = a; k < b && k < (int)p->ntok; k++) {
		const struct pysrc_tok *t = &p->tok[k];
		if (t->kind != PYSRC_TOK_STRING || (p->str[t->str].flags & PYSRC_STR_DOC))
			continue;
		const struct pysrc_string *s = &p->str[t->str];
		int joined = prev >= 0 && (prev == k - 1 || (prev == k - 2 && pysrc_tok_is(p, k - 1, "+")));
		if (prev >= 0 && !joined)
			buf_addc(out, '\n');
		buf_add(out, s->text, s->len);
		prev = k;
	}
}

void pysrc_normalize(const struct pysrc *p, struct buf *out)
{
	int prev_word = 0;

	for (size_t k = 0; k < p->ntok; k++) {
		const struct pysrc_tok *t = &p->tok[k];
		if (t->kind == PYSRC_TOK_NEWLINE) {
			if (out->len && out->p[out->len - 1] != '\n')
				buf_addc(out, '\n');
			prev_word = 0;
			continue;
		}
		if (t->kind == PYSRC_TOK_STRING && (p->str[t->str].flags & PYSRC_STR_DOC))
			continue;
		int word = is_ident((unsigned char)p->src[t->start]);
		if (prev_word && word)
			buf_addc(out, ' ');
		buf_add(out, p->src + t->start, t->end - t->start);
		prev_word = is_ident((unsigned char)p->src[t->end - 1]);
	}
}
