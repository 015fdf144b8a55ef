/* prompt: prompt templates from share/prompts/ with named placeholders, and chat wrapping.
 *
 * CONTRACT (other modules code against these declarations; the implementation may add
 * functions but keeps these). Templates are files; a placeholder is {{name}}; filling a
 * template with a name it does not know, or leaving one unfilled, is an error.
 * Built-in templates (in util_sharedir()/prompts/):
 *   "kernelbench"  the one-shot KernelBench prompt (SPEC §4), placeholder {{ref}}
 *   "infill"       the kernel-infilling prompt (SPEC §5.1), {{ref}} {{prefix}} {{suffix}}
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

#endif
