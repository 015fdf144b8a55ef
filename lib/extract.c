/* extract: first fenced code block of a response, language tag removed. See extract.h. */
#include <stdio.h>
#include <string.h>

#include "extract.h"
#include "jsonl.h"
#include "util.h"

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

char *extract_code(const char *text, size_t len)
{
	const char *end = text + len, *p, *q, *eol;

	p = memmem(text, len, "```", 3);
	if (!p)
		return NULL;
	p += 3;
	q = memmem(p, (size_t)(end - p), "```", 3);
	if (!q)
		return NULL;
	/* an info string: the rest of the opening line when it is one word (python, cpp, ...) */
	eol = memchr(p, '\n', (size_t)(q - p));
	if (eol) {
		const char *w = p;
		while (w < eol && !is_space(*w))
			w++;
		const char *r = w;
		while (r < eol && is_space(*r))
			r++;
		if (r == eol)
			p = eol + 1;
	}
	while (p < q && is_space(*p))
		p++;
	while (q > p && is_space(q[-1]))
		q--;
	return xstrndup(p, (size_t)(q - p));
}

/* Whether a line of s opens with a fence (after at most three spaces, as in Markdown): what
 * makes a field a response; ``` inside a line of code (a string literal) does not. */
static int opens_fence(const char *s, size_t n)
{
	size_t i = 0;

	for (;;) {
		size_t j = i;
		while (j < n && j - i < 3 && s[j] == ' ')
			j++;
		if (n - j >= 3 && !memcmp(s + j, "```", 3))
			return 1;
		const char *nl = memchr(s + i, '\n', n - i);
		if (!nl)
			return 0;
		i = (size_t)(nl - s) + 1;
	}
}

char *extract_record_kernel(const json_t *rec, const char *field, const char **from)
{
	json_t *v;

	if (from)
		*from = NULL;
	if (field) {
		v = json_object_get(rec, field);
		if (!json_is_string(v))
			return NULL;
		if (from)
			*from = field;
		/* a response (a line opens with a fence) gives its code block, as `completion`
		 * does */
		if (opens_fence(json_string_value(v), json_string_length(v)))
			return extract_code(json_string_value(v), json_string_length(v));
		return xstrndup(json_string_value(v), json_string_length(v));
	}
	v = json_get_set(rec, "kernel");
	if (v) {
		if (from)
			*from = "kernel";
		return json_is_string(v) ? xstrndup(json_string_value(v), json_string_length(v))
		                         : NULL;
	}
	v = json_object_get(rec, "completion");
	if (json_is_string(v)) {
		if (from)
			*from = "completion";
		return extract_code(json_string_value(v), json_string_length(v));
	}
	return NULL;
}

const char *extract_record_why(const json_t *rec, const char *field, const char *from,
                               char *buf, size_t n)
{
	if (!from && field)
		snprintf(buf, n, "no string field '%s'", field);
	else if (!from)
		snprintf(buf, n, "no kernel: neither 'kernel' nor 'completion' is a string");
	else if (!json_is_string(json_object_get(rec, from)))
		snprintf(buf, n, "'%s' is not a string", from);
	else
		snprintf(buf, n, "no fenced code block in '%s'", from);
	return buf;
}
