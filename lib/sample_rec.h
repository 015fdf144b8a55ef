/* sample_rec: the records side of dice-sample: which prompt a record asks for, the text of a
 * completion, and the `sample` object written back (DESIGN.md "Records").
 *
 * Prompt of a record, first match wins:
 *   - `ref` with `prefix`/`suffix` present, or --infill: the "infill" template ({{ref}}
 *     {{prefix}} {{suffix}}), chat-wrapped;
 *   - `ref`: the "kernelbench" template ({{ref}}), chat-wrapped;
 *   - `messages` (array of {role, content}, an SFT pair chat style): its turns as dice-sft
 *     renders them (sft_render, lib/sft.h), less a last assistant message, then the
 *     assistant header (Qwen3 only); before `prompt`, where --dry-run writes its text;
 *   - `prompt` (string): that text as the user turn, chat-wrapped;
 *   - `prompt_ids` (array of token ids): fed as they are (no tokenizer needed).
 * A user template (template_path, dice-sample --prompt-template) replaces whichever built-in
 * a ref record would use; it is filled with the same placeholders. A `ref` of white space
 * alone is the record's error (no code to write a kernel for), as an empty .py file is.
 * Chat wrapping is Qwen3's unless chat is PROMPT_CHAT_NONE (--template none); a `system`
 * string puts a system turn before the user turn, as dice-sft renders one (lib/sft.h), and
 * is the record's error where there is no turn for it (PROMPT_CHAT_NONE, prompt_ids). Text
 * is encoded with the tokenizer's added tokens recognised, and no BOS (SPEC §1.2).
 */
#ifndef DICE_SAMPLE_REC_H
#define DICE_SAMPLE_REC_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "jsonl.h"
#include "prompt.h"
#include "sampler.h"
#include "tokenizer.h"

struct sample_rec {
	struct tokenizer *tok;              /* NULL: only prompt_ids records can be served */
	enum prompt_chat chat;
	int infill;                          /* --infill: the infill template for every ref */
	struct prompt_template *kb, *fill;  /* loaded on first use */
	const char *template_path;          /* --prompt-template: replaces both built-ins */
	int vocab;                          /* > 0: a prompt's ids must be below it (the
	                                     * record's error, not the model's, for the run) */
	int ctx;                            /* > 0: a prompt must be shorter (the model's
	                                     * max_position_embeddings) */
};

void sample_rec_init(struct sample_rec *s, struct tokenizer *tok, enum prompt_chat chat, int infill);
void sample_rec_free(struct sample_rec *s);

/* 0 when t (a --prompt-template) has the placeholders the infilling prompt fills, {{prefix}}
 * and {{suffix}}; else -1 with a message in err naming the one missing and, in why, what
 * asked for the infilling prompt ("--infill"). */
int sample_rec_check_infill(const struct prompt_template *t, const char *why, char *err,
                            size_t errlen);

/* The record of a .py reference operand: {"id": name, "ref": its source, repaired to valid
 * UTF-8}. New reference. */
json_t *sample_rec_from_py(const char *name, const char *data, size_t len);

/* The prompt ids of rec into *ids (xmalloc'ed), *n. 0, or -1 with a message in err: no
 * prompt field, one of the wrong type (null counts as absent), a blank ref, a system with
 * no turn to go in, an id outside the vocabulary, a prompt of ctx tokens or more. */
int sample_rec_prompt(struct sample_rec *s, const json_t *rec, int **ids, int *n,
                      char *err, size_t errlen);

/* The same, also handing back the rendered prompt text in *text (new string; NULL for a
 * prompt_ids record). */
int sample_rec_prompt_text(struct sample_rec *s, const json_t *rec, char **text, int **ids,
                           int *n, char *err, size_t errlen);

/* The completion text of ids (special tokens and the mask id dropped, valid UTF-8), or NULL
 * when there is no tokenizer. New string. */
char *sample_rec_text(const struct sample_rec *s, const int *ids, int n, int mask_id);

/* The fields a sample sets on its record (lib/jsonl.h, jsonl_write_fields): f[0] completion,
 * text, and f[1] kernel, the first code block of text (lib/extract.h), each with no value
 * (removed) where there is none (text NULL: no tokenizer, or no sample: a record's
 * sample.error): a sampled record, or one that could not be sampled, carries this
 * sample's, never a completion or kernel it came with, which kbench-eval (kernel before
 * completion) would evaluate as the model's. The values are new references. */
void sample_rec_text_fields(const char *text, struct jsonl_field f[2]);

/* The `sample` object: ids, tokens, prompt_tokens, forwards, steps, ms, seed, stopped,
 * settings (decoding, block, steps, threshold, temperature, top_k, top_p, max_tokens, stop,
 * device, dtype) and, with trace, trace.step and trace.logp (one per generated token). */
json_t *sample_rec_object(const struct sampler_result *r, const struct sampler_opts *o,
                          uint64_t seed, int prompt_tokens, int trace, const char *device,
                          const char *dtype);

#endif
