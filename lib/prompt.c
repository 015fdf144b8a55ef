/* prompt: load a prompt template (built-in from share/prompts/ or a user's file), split it
 * into literal text and {{name}} placeholders once, resolve {{> file}} includes at load
 * time, and fill it with (key, value) pairs, refusing unknown and missing names. Also the
 * Qwen3 chat wrapping (SPEC §1.2). The syntax is documented in prompt.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prompt.h"
#include "errmsg.h"
#include "util.h"

struct seg {
	int slot;            /* -1: literal text; else index into names */
	size_t off, len;     /* literal: bytes of text[] */
};

struct prompt_template {
	char *path;
	struct buf text;     /* every literal byte, segments point into it */
	struct seg *segs;
	size_t nsegs, capsegs;
	char **names;
	size_t nnames;
};

static int is_builtin_name(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static void add_seg(struct prompt_template *t, int slot, size_t off, size_t len)
{
	if (slot < 0 && len == 0)
		return;
	if (slot < 0 && t->nsegs && t->segs[t->nsegs - 1].slot < 0 &&
	    t->segs[t->nsegs - 1].off + t->segs[t->nsegs - 1].len == off) {
		t->segs[t->nsegs - 1].len += len;
		return;
	}
	if (t->nsegs == t->capsegs) {
		t->capsegs = t->capsegs ? 2 * t->capsegs : 16;
		t->segs = xrealloc(t->segs, t->capsegs * sizeof *t->segs);
	}
	t->segs[t->nsegs++] = (struct seg){ slot, off, len };
}

static void add_literal(struct prompt_template *t, const char *s, size_t n)
{
	size_t off = t->text.len;

	buf_add(&t->text, s, n);
	add_seg(t, -1, off, n);
}

static int slot_of(struct prompt_template *t, const char *name, size_t n)
{
	for (size_t i = 0; i < t->nnames; i++)
		if (strlen(t->names[i]) == n && !memcmp(t->names[i], name, n))
			return (int)i;
	t->names = xrealloc(t->names, (t->nnames + 1) * sizeof *t->names);
	t->names[t->nnames] = xstrndup(name, n);
	return (int)t->nnames++;
}

static int line_at(const char *s, size_t off)
{
	int line = 1;

	for (size_t i = 0; i < off; i++)
		line += s[i] == '\n';
	return line;
}

/* A template's or an included file's text, as a .py reference's is read (util_text): no
 * byte-order mark, LF line endings. NULL with errno set where it cannot be read. */
static char *read_text(const char *path, size_t *len)
{
	char *data = util_read_file(path, len), *t;

	if (data) {
		t = util_text(data, len, 1);
		memmove(data, t, *len + 1);
	}
	return data;
}

/* Insert the file named by inc[0..n) relative to dir. */
static int do_include(struct prompt_template *t, const char *dir, const char *inc, size_t n,
                      int line, char *err, size_t errlen)
{
	char *name = xstrndup(inc, n);
	char *path = name[0] == '/' ? xstrdup(name) : xasprintf("%s/%s", dir, name);
	size_t len;
	char *data = read_text(path, &len);

	if (!data) {
		errmsg_set(err, errlen, "%s:%d: cannot include '%s': %s", t->path, line, path,
		       strerror(errno));
		free(name);
		free(path);
		return -1;
	}
	while (len && data[len - 1] == '\n')
		len--;
	add_literal(t, data, len);
	free(data);
	free(name);
	free(path);
	return 0;
}

/* If s[i] starts a tag, set its extent and kind; 0 when "{{" here is plain text. */
static int scan_tag(const char *s, size_t i, size_t n, size_t *end, int *include,
                    size_t *nb, size_t *nl)
{
	size_t j = i + 2, b;

	while (j < n && (s[j] == ' ' || s[j] == '\t'))
		j++;
	*include = j < n && s[j] == '>';
	if (*include) {
		j++;
		while (j < n && (s[j] == ' ' || s[j] == '\t'))
			j++;
		b = j;
		while (j < n && !isspace((unsigned char)s[j]) && s[j] != '}')
			j++;
	} else {
		b = j;
		if (j >= n || !(isalpha((unsigned char)s[j]) || s[j] == '_'))
			return 0;
		while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
			j++;
	}
	if (j == b)
		return 0;
	*nb = b;
	*nl = j - b;
	while (j < n && (s[j] == ' ' || s[j] == '\t'))
		j++;
	if (j + 1 >= n || s[j] != '}' || s[j + 1] != '}')
		return 0;
	*end = j + 2;
	return 1;
}

static int parse(struct prompt_template *t, const char *s, size_t n, char *err, size_t errlen)
{
	char *dir = xstrdup(t->path), *slash = strrchr(dir, '/');
	size_t i = 0, lit = 0;
	int rc = 0;

	if (slash)
		*slash = '\0';
	else
		strcpy(dir, ".");
	while (i + 1 < n) {
		size_t end, nb, nl;
		int inc;

		if (s[i] != '{' || s[i + 1] != '{' || !scan_tag(s, i, n, &end, &inc, &nb, &nl)) {
			i++;
			continue;
		}
		add_literal(t, s + lit, i - lit);
		if (inc) {
			if (do_include(t, dir, s + nb, nl, line_at(s, i), err, errlen) < 0) {
				rc = -1;
				break;
			}
		} else {
			add_seg(t, slot_of(t, s + nb, nl), 0, 0);
		}
		i = lit = end;
	}
	if (!rc)
		add_literal(t, s + lit, n - lit);
	free(dir);
	return rc;
}

struct prompt_template *prompt_load(const char *name, char *err, size_t errlen)
{
	struct prompt_template *t;
	char *path, *data;
	size_t len;

	if (!name || !*name) {
		errmsg_set(err, errlen, "empty template name");
		return NULL;
	}
	if (is_builtin_name(name))
		path = xasprintf("%s/prompts/%s.txt", util_sharedir(), name);
	else
		path = xstrdup(name);
	data = read_text(path, &len);
	if (!data) {
		if (is_builtin_name(name))
			errmsg_set(err, errlen, "no built-in template '%s' (%s: %s): set DICE_SHARE to "
			           "dice's share/ directory, or name a template file (a path with a '/' "
			           "or a '.')", name, path, strerror(errno));
		else
			errmsg_set(err, errlen, "cannot read template '%s': %s", path, strerror(errno));
		free(path);
		return NULL;
	}
	if (memchr(data, '\0', len)) {
		errmsg_set(err, errlen, "%s: template holds a NUL byte", path);
		free(data);
		free(path);
		return NULL;
	}
	if (len && data[len - 1] == '\n')
		len--;
	t = xcalloc(1, sizeof *t);
	t->path = path;
	buf_init(&t->text);
	if (parse(t, data, len, err, errlen) < 0) {
		free(data);
		prompt_free(t);
		return NULL;
	}
	free(data);
	return t;
}

void prompt_free(struct prompt_template *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nnames; i++)
		free(t->names[i]);
	free(t->names);
	free(t->segs);
	buf_free(&t->text);
	free(t->path);
	free(t);
}

size_t prompt_nplaceholders(const struct prompt_template *t)
{
	return t->nnames;
}

const char *prompt_placeholder(const struct prompt_template *t, size_t i)
{
	return i < t->nnames ? t->names[i] : NULL;
}

int prompt_has_placeholder(const struct prompt_template *t, const char *name)
{
	for (size_t i = 0; i < t->nnames; i++)
		if (!strcmp(t->names[i], name))
			return 1;
	return 0;
}

const char *prompt_path(const struct prompt_template *t)
{
	return t->path;
}

/* "a, b, c" or "none" for messages. */
static char *name_list(const struct prompt_template *t)
{
	struct buf b;
	char *list;

	buf_init(&b);
	for (size_t i = 0; i < t->nnames; i++)
		buf_addf(&b, "%s%s", i ? ", " : "", t->names[i]);
	if (!t->nnames)
		buf_adds(&b, "none");
	list = buf_detach(&b, NULL);
	buf_free(&b);
	return list;
}

char *prompt_fill(const struct prompt_template *t, const char *const *keys,
                  const char *const *values, size_t n, char *err, size_t errlen)
{
	const char **val = xcalloc(t->nnames ? t->nnames : 1, sizeof *val);
	struct buf out;
	char *list;

	for (size_t k = 0; k < n; k++) {
		size_t i;

		for (i = 0; i < t->nnames; i++)
			if (keys[k] && !strcmp(keys[k], t->names[i]))
				break;
		if (i == t->nnames || !values[k] || val[i]) {
			list = name_list(t);
			if (i == t->nnames)
				errmsg_set(err, errlen, "%s: the template has no {{%s}}, which this record "
				           "fills (it has: %s)", t->path, keys[k] ? keys[k] : "(null)", list);
			else if (!values[k])
				errmsg_set(err, errlen, "%s: no value for placeholder '%s'", t->path, keys[k]);
			else
				errmsg_set(err, errlen, "%s: placeholder '%s' given twice", t->path, keys[k]);
			free(list);
			free(val);
			return NULL;
		}
		val[i] = values[k];
	}
	for (size_t i = 0; i < t->nnames; i++) {
		if (!val[i]) {
			errmsg_set(err, errlen, "%s: placeholder '%s' has no value", t->path, t->names[i]);
			free(val);
			return NULL;
		}
	}
	buf_init(&out);
	for (size_t s = 0; s < t->nsegs; s++) {
		const struct seg *g = &t->segs[s];

		if (g->slot < 0)
			buf_add(&out, t->text.p + g->off, g->len);
		else
			buf_adds(&out, val[g->slot]);
	}
	free(val);
	list = buf_detach(&out, NULL);
	buf_free(&out);
	return list;
}

static const char *const chat_names[] = {
	[PROMPT_CHAT_QWEN3] = "qwen3",
	[PROMPT_CHAT_NONE] = "none",
};

int prompt_chat_parse(const char *name, enum prompt_chat *out)
{
	for (size_t i = 0; i < ARRAY_LEN(chat_names); i++) {
		if (!strcmp(name, chat_names[i])) {
			*out = (enum prompt_chat)i;
			return 0;
		}
	}
	return -1;
}

const char *prompt_chat_name(enum prompt_chat chat)
{
	return (size_t)chat < ARRAY_LEN(chat_names) ? chat_names[chat] : "?";
}

char *prompt_chat_wrap(const char *user, enum prompt_chat chat)
{
	return prompt_chat_wrap_system(NULL, user, chat, NULL, 0);
}

char *prompt_chat_wrap_system(const char *system, const char *user, enum prompt_chat chat,
                              char *err, size_t errlen)
{
	if (system && !*system)         /* an empty system is none, as dice-sft renders it */
		system = NULL;
	if (chat == PROMPT_CHAT_NONE) {
		if (system) {
			errmsg_set(err, errlen, "system needs a chat template's turn "
			           "(--template none has none)");
			return NULL;
		}
		return xstrdup(user);
	}
	/* Qwen3: the system turn when there is one (no default), the user turn, then the
	 * generation prompt */
	return xasprintf("%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
	                 system ? "<|im_start|>system\n" : "", system ? system : "",
	                 system ? "<|im_end|>\n" : "", user);
}

char *prompt_chat_answer(const char *response, enum prompt_chat chat, int empty_think)
{
	if (chat == PROMPT_CHAT_NONE)
		return xstrdup(response);
	return xasprintf("%s%s<|im_end|>\n", empty_think ? "<think>\n\n</think>\n\n" : "",
	                 response);
}

char *prompt_render(const struct prompt_template *t, const char *const *keys,
                    const char *const *values, size_t n, enum prompt_chat chat,
                    char *err, size_t errlen)
{
	char *text = prompt_fill(t, keys, values, n, err, errlen), *out;

	if (!text)
		return NULL;
	out = prompt_chat_wrap(text, chat);
	free(text);
	return out;
}
