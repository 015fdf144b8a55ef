/* prompt: prompt templates from share/prompts/ with named placeholders, and chat wrapping.
 *
 * CONTRACT (other modules code against these declarations; the implementation may add
 * functions but keeps these). Templates are files; a placeholder is {{name}}; filling a
 * template with a name it does not know, or leaving one unfilled, is an error.
 * Built-in templates (in util_sharedir()/prompts/):
 *   "kernelbench"  the one-shot KernelBench prompt (SPEC §4), placeholder {{ref}}
 *   "infill"       the kernel-infilling prompt (SPEC §5.1), {{ref}} {{prefix}} {{suffix}}
 *
 * Template syntax (share/prompts/README):
 *  - {{name}} with name [A-Za-z_][A-Za-z0-9_]* and optional blanks inside the braces
 *    ({{ ref }} works, as in Jinja) is a placeholder; values are inserted verbatim, and
 *    placeholders inside values are not expanded.
 *  - {{> file}} inserts a file when the template is loaded: relative paths are taken from
 *    the template's own folder; the file's final newlines are dropped and no placeholder
 *    is looked for inside it (the worked example is shared this way).
 *  - Any other "{{" is plain text (C++ initialisers like {{1, 2}} are safe).
 *  - The template file's own final newline is dropped.
 * A name made only of [a-z0-9_-] is a built-in (util_sharedir()/prompts/<name>.txt);
 * anything else is a path (write ./foo for a file named foo in the current folder).
 */
#ifndef DICE_PROMPT_H
#define DICE_PROMPT_H

#include <stddef.h>

struct prompt_template;

/* name: a built-in name ("kernelbench", "infill") or a path to a template file.
 * NULL with a message in err (size errlen) on failure. */
struct prompt_template *prompt_load(const char *name, char *err, size_t errlen);
void prompt_free(struct prompt_template *t);

/* Fill with n (key, value) pairs. New string, or NULL with a message in err when a
 * placeholder has no value or a key is not a placeholder of the template. */
char *prompt_fill(const struct prompt_template *t, const char *const *keys,
                  const char *const *values, size_t n, char *err, size_t errlen);

enum prompt_chat {
	PROMPT_CHAT_QWEN3 = 0,   /* <|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n */
	PROMPT_CHAT_NONE = 1,    /* raw text */
};
/* Wrap a user message for generation (SPEC §1.2). New string. */
char *prompt_chat_wrap(const char *user, enum prompt_chat chat);

/* Additions. */
/* The placeholder names, in order of first appearance; i < prompt_nplaceholders(t). */
size_t prompt_nplaceholders(const struct prompt_template *t);
const char *prompt_placeholder(const struct prompt_template *t, size_t i);
/* 1 when name is a placeholder of t. */
int prompt_has_placeholder(const struct prompt_template *t, const char *name);
/* prompt_chat_wrap with a system turn before the user's when system is neither NULL nor ""
 * (QWEN3: <|im_start|>system\n{system}<|im_end|>\n, as dice-sft renders a record's "system";
 * an empty one is none). NONE has no turns: NULL with a message in err when system is given.
 * New string. */
char *prompt_chat_wrap_system(const char *system, const char *user, enum prompt_chat chat,
                              char *err, size_t errlen);
/* The file the template was read from. */
const char *prompt_path(const struct prompt_template *t);
/* "qwen3" or "none" -> *out; 0, or -1 for an unknown name. */
int prompt_chat_parse(const char *name, enum prompt_chat *out);
const char *prompt_chat_name(enum prompt_chat chat);
/* The assistant turn that follows prompt_chat_wrap's text in a training sequence (SPEC
 * §5.5). QWEN3: [empty think block "<think>\n\n</think>\n\n" when empty_think] + response +
 * "<|im_end|>\n" (LLaMA-Factory's qwen3 template; responses carry no think tags, so the
 * DICE SFT data gets an empty one). NONE: the response as is. New string. */
char *prompt_chat_answer(const char *response, enum prompt_chat chat, int empty_think);
/* prompt_fill then prompt_chat_wrap. New string, or NULL with a message in err. */
char *prompt_render(const struct prompt_template *t, const char *const *keys,
                    const char *const *values, size_t n, enum prompt_chat chat,
                    char *err, size_t errlen);

#endif
