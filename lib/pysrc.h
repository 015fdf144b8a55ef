/* pysrc: a one-pass scanner for Python source (the kernels and references of KernelBench).
 *
 * It is not a parser: it tokenises, tracks brackets and indentation, and from that finds the
 * pieces other modules need. Rules and regexes then run on those pieces, never on raw text,
 * so a `__global__` in a comment is not code and a `#` inside a string is not a comment.
 *
 * Tutorial
 *
 *     struct pysrc p;
 *     pysrc_scan(&p, src, len);          // always succeeds; bad input scans as best it can
 *     p.clean                            // src with comments and docstrings blanked to spaces:
 *                                        //   same length, same offsets, same line numbers
 *     for (i < p.nstr)   p.str[i]        // every string literal: contents decoded, line, flags
 *     for (i < p.nblock) p.block[i]      // every class/def: name, lines, body span, bases, parent
 *     for (i < p.ncall)  p.call[i]       // every call site: dotted callee "torch.relu", line, block
 *     for (i < p.nassign) p.assign[i]    // every assignment: target "self.fc", value span, block
 *     pysrc_normalize(&p, &buf)          // dedupe key text: no comments, no docstrings, no
 *                                        //   white space outside strings, string text kept
 *     pysrc_free(&p);
 *
 * Example: for
 *
 *     class ModelNew(nn.Module):          # line 1
 *         def __init__(self):             # line 2
 *             self.op = mod.relu_cuda     # line 3
 *         def forward(self, x):           # line 4
 *             return self.op(x)           # line 5
 *
 * block[0] = {CLASS "ModelNew", bases "nn.Module", lines 1-5, parent -1},
 * block[1] = {DEF "__init__", lines 2-3, parent 0}, block[2] = {DEF "forward", lines 4-5,
 * parent 0}; assign[0] = {target "self.op", value "mod.relu_cuda", block 1};
 * call[0] = {callee "self.op", line 5, block 2}.
 *
 * Tokens. Underneath everything is p.tok[0..ntok): NAME, NUMBER, STRING, OP and NEWLINE (end
 * of a logical line) tokens with byte spans into src; comments and blank lines make no token,
 * and a docstring makes a STRING token whose string has PYSRC_STR_DOC. p.lines[] lists the
 * logical lines (first token, token count, indentation column), which is what a rule needs to
 * walk an `if`/`try`/`with` suite: pysrc_suite_end().
 *
 * Strings. Every literal form is recognised: '..', "..", triple quotes, prefixes r b u f and
 * their mixes (rb, Rb, fr, ...), f-strings with nested braces, format specs and nested
 * strings in their replacement fields. Contents are "decoded enough": the usual escapes
 * (\n \t \\ \' \" \xNN \uNNNN \UNNNNNNNN octal, line continuations) are resolved in
 * non-raw literals; f-string `{{`/`}}` become braces and replacement fields are kept as
 * written, `{expr}`. Adjacent literals (implicit concatenation) share a `group`: the index of
 * the first literal of the run, so concatenated text is str[g], str[g+1], ... while
 * str[k].group == g.
 *
 * Lines are 1-based. Offsets are byte offsets into src. Spans are half-open [start, end).
 *
 * Ownership: the struct lives on the caller's stack; pysrc_scan borrows src (it must outlive
 * the struct) and allocates every array and string it hands out; pysrc_free releases them.
 * A pysrc may be scanned again after pysrc_free.
 */
#ifndef DICE_PYSRC_H
#define DICE_PYSRC_H

#include <stddef.h>

#include "util.h"

enum pysrc_tok_kind {
	PYSRC_TOK_NAME = 1,     /* identifier or keyword */
	PYSRC_TOK_NUMBER,
	PYSRC_TOK_STRING,       /* one literal; .str indexes p.str */
	PYSRC_TOK_OP,           /* operator or bracket: ( ) [ ] { } . , : = += == -> ** ... */
	PYSRC_TOK_NEWLINE,      /* end of a logical line (zero width at the line's end) */
};

struct pysrc_tok {
	int kind;               /* enum pysrc_tok_kind */
	int line;               /* 1-based line of the first byte */
	size_t start, end;      /* byte span in src */
	int depth;              /* bracket depth before this token (0 at statement level) */
	int match;              /* brackets: index of the matching bracket token, else -1 */
	int str;                /* STRING: index into p.str, else -1 */
	int block;              /* innermost class/def holding it (header included), -1 at
	                         * module level */
};

enum pysrc_str_flags {
	PYSRC_STR_RAW = 1 << 0,
	PYSRC_STR_BYTES = 1 << 1,
	PYSRC_STR_FSTRING = 1 << 2,
	PYSRC_STR_TRIPLE = 1 << 3,
	PYSRC_STR_DOC = 1 << 4,         /* a statement made of strings only: docstring/no-op */
	PYSRC_STR_UNTERMINATED = 1 << 5,
};

struct pysrc_string {
	size_t start, end;      /* span of the literal, prefix and quotes included */
	int line;               /* line of its first byte */
	int end_line;           /* line of its last byte */
	int flags;              /* enum pysrc_str_flags */
	int group;              /* first literal of its implicit-concatenation run */
	int tok;                /* its token index */
	char *text;             /* decoded contents, NUL-terminated (len bytes; may hold NULs) */
	size_t len;
	size_t *nl;             /* per source newline in the literal (a `\n` escape is none):
	                         * the offset in text where the next line starts */
	size_t nnl;
};

enum pysrc_block_kind {
	PYSRC_CLASS = 1,
	PYSRC_DEF = 2,          /* def and async def */
};

struct pysrc_block {
	int kind;               /* enum pysrc_block_kind */
	char *name;
	char *bases;            /* CLASS: text between the parentheses, white space squeezed
	                         * ("nn.Module", "" when none); DEF: the parameter list */
	int line, end_line;     /* header line .. last line of the body */
	size_t start;           /* offset of `def`/`class` (decorators not included) */
	size_t body_start;      /* offset just after the header's ':' */
	size_t end;             /* end of the last token of the body */
	int tok_start, tok_body, tok_end; /* token span [tok_start, tok_end); body from tok_body */
	int indent;             /* column of the header */
	int parent;             /* enclosing block index, -1 at module level */
	int ndecor;             /* decorators: tokens [tok_decor, tok_start) */
	int tok_decor;
};

struct pysrc_call {
	char *callee;           /* dotted name: "torch.relu", "self.fc", "F.conv2d", "getattr",
	                         * "super().forward"; "?" plus the attribute chain when the
	                         * callee starts with something else: "?.cuda" for x[0].cuda() */
	int line;
	int tok_name;           /* first token of the callee */
	int tok_open, tok_close;/* the call's '(' and ')' tokens */
	int block;              /* innermost enclosing class/def, -1 at module level */
};

struct pysrc_assign {
	char *target;           /* "x", "self.x", "torch.cuda.Event", "cache[]" (subscript) */
	int op;                 /* '=' or the operator of an augmented assignment: '+', '-', ... */
	int line;
	int tok_target;         /* first token of the target */
	int tok_value, tok_end; /* value tokens [tok_value, tok_end) */
	size_t value_start, value_end; /* value byte span */
	int block;              /* innermost enclosing class/def, -1 at module level */
};

struct pysrc_line {
	int tok;                /* first token */
	int ntok;               /* tokens, NEWLINE included */
	int indent;             /* column (tabs to multiples of 8) */
	int line;               /* physical line of the first token */
};

struct pysrc {
	const char *src;        /* borrowed */
	size_t len;
	char *clean;            /* len bytes + NUL: comments and docstrings blanked (newlines kept) */
	int nlines_phys;        /* physical lines */
	struct pysrc_tok *tok;  size_t ntok;
	struct pysrc_string *str; size_t nstr;
	struct pysrc_block *block; size_t nblock;
	struct pysrc_call *call; size_t ncall;
	struct pysrc_assign *assign; size_t nassign;
	struct pysrc_line *lines; size_t nlines;
	size_t cap_tok, cap_str, cap_block, cap_call, cap_assign, cap_lines; /* private */
};

/* Scan src[0..len) (need not be NUL-terminated or valid UTF-8). Returns 0. */
int pysrc_scan(struct pysrc *p, const char *src, size_t len);
void pysrc_free(struct pysrc *p);

/* The source line of offset off of a string's decoded text */
int pysrc_string_line(const struct pysrc_string *st, size_t off);
/* Text of token i (not NUL-terminated): p->src + tok.start, length tok.end - tok.start. */
int pysrc_tok_is(const struct pysrc *p, int i, const char *text);
/* Innermost class/def containing token i, or -1 (p->tok[i].block). */
int pysrc_block_at(const struct pysrc *p, int tok);
/* First block named name (of kind, 0 for any) whose parent is parent (-2: any parent); -1. */
int pysrc_find_block(const struct pysrc *p, const char *name, int kind, int parent);
/* 1 if block b is inner (or equal) to block outer. */
int pysrc_block_within(const struct pysrc *p, int b, int outer);
/* Index into p->lines of the logical line holding token i. */
int pysrc_line_of(const struct pysrc *p, int tok);
/* For a compound statement starting at logical line l (if/try/except/with/for/def...): the
 * index of the first logical line after its suite (p->nlines at the end). */
int pysrc_suite_end(const struct pysrc *p, int l);
/* Call argument: the tokens [*a, *b) of the keyword argument `name` (when name is not NULL)
 * or else of positional argument `pos` (0-based). 0 when found, -1 otherwise. */
int pysrc_call_arg(const struct pysrc *p, const struct pysrc_call *c, const char *name, int pos,
                   int *a, int *b);
/* Append to out the decoded contents of the string tokens in [a, b), docstrings left out:
 * literals of one implicit run or joined by a single `+` are concatenated directly, other
 * literals are separated by '\n'. */
void pysrc_strings_in(const struct pysrc *p, int a, int b, struct buf *out);
/* Tokens of block b's body equal to text (a keyword such as "for", "if", "while", or an
 * operator such as "+"), nested blocks included. */
int pysrc_block_count(const struct pysrc *p, int b, const char *text);
/* The dedupe text: tokens of clean source without white space except one space between two
 * words/numbers and the '\n' of logical lines; string literals as written. */
void pysrc_normalize(const struct pysrc *p, struct buf *out);

#endif
