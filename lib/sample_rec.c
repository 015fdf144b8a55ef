/* sample_rec: prompts of records, completion text, the `sample` object (see sample_rec.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "extract.h"
#include "jsonl.h"
#include "sample_rec.h"
#include "sft.h"
#include "util.h"

void sample_rec_init(struct sample_rec *s, struct tokenizer *tok, enum prompt_chat chat, int infill)
{
	memset(s, 0, sizeof *s);
	s->tok = tok;
	s->chat = chat;
	s->infill = infill;
}

void sample_rec_free(struct sample_rec *s)
{
	if (s->kb)
		prompt_free(s->kb);
	if (s->fill)
		prompt_free(s->fill);
	memset(s, 0, sizeof *s);
}

json_t *sample_rec_from_py(const char *name, const char *data, size_t len)
{
	struct buf b;
	json_t *rec = json_object();

	buf_init(&b);
	utf8_repair(&b, data, len);
	json_object_set_new(rec, "id", json_string(name));
	json_object_set_new(rec, "ref", json_stringn(b.p, b.len));
	buf_free(&b);
	return rec;
}

static int ids_from_array(const json_t *a, int **ids, int *n, char *err, size_t errlen)
{
	size_t i, len = json_array_size(a);
	json_t *v;

	*ids = xmalloc((len ? len : 1) * sizeof **ids);
	json_array_foreach(a, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
			snprintf(err, errlen, "prompt_ids[%zu] is not a token id", i);
			free(*ids);
			*ids = NULL;
			return -1;
		}
		(*ids)[i] = (int)json_integer_value(v);
	}
	*n = (int)len;
	return 0;
}

int sample_rec_check_infill(const struct prompt_template *t, const char *why, char *err,
                            size_t errlen)
{
	static const char *const need[] = { "prefix", "suffix" };

	for (size_t i = 0; i < sizeof need / sizeof *need; i++)
		if (!prompt_has_placeholder(t, need[i])) {
			snprintf(err, errlen, "%s: the template has no {{%s}}, which the infilling "
			         "prompt fills (%s)", prompt_path(t), need[i], why);
			return -1;
		}
	return 0;
}

static char *fill_ref(struct sample_rec *s, const json_t *rec, const char *ref, char *err,
                        size_t errlen)
{
	const char *prefix = json_get_str(rec, "prefix"), *suffix = json_get_str(rec, "suffix");
	const char *keys[3], *vals[3];
	struct prompt_template **t;
	size_t n = 0;

	if (s->infill || prefix || suffix) {
		t = &s->fill;
		if (!*t && !(*t = prompt_load(s->template_path ? s->template_path : "infill", err, errlen)))
			return NULL;
		/* both are filled, "" for one the record lacks: say so, not "this record fills" */
		if (sample_rec_check_infill(*t, s->infill ? "--infill" : "the record has prefix or "
		                            "suffix", err, errlen) < 0)
			return NULL;
		keys[n] = "prefix", vals[n++] = prefix ? prefix : "";
		keys[n] = "suffix", vals[n++] = suffix ? suffix : "";
	} else {
		t = &s->kb;
		if (!*t && !(*t = prompt_load(s->template_path ? s->template_path : "kernelbench", err,
		                              errlen)))
			return NULL;
	}
	keys[n] = "ref", vals[n++] = ref;
	return prompt_fill(*t, keys, vals, n, err, errlen);
}

int sample_rec_prompt(struct sample_rec *s, const json_t *rec, int **ids, int *n, char *err,
                      size_t errlen)
{
	return sample_rec_prompt_text(s, rec, NULL, ids, n, err, errlen);
}

static int prompt_text(struct sample_rec *s, const json_t *rec, char **textp, int **ids,
                       int *n, char *err, size_t errlen);

int sample_rec_prompt_text(struct sample_rec *s, const json_t *rec, char **textp, int **ids,
                           int *n, char *err, size_t errlen)
{
	int bad = 0;

	if (prompt_text(s, rec, textp, ids, n, err, errlen) < 0)
		return -1;
	for (int i = 0; s->vocab > 0 && i < *n && !bad; i++)
		if ((*ids)[i] >= s->vocab) {
			snprintf(err, errlen, "prompt token %d (id %d) is outside the model's "
			         "vocabulary (%d)", i, (*ids)[i], s->vocab);
			bad = 1;
		}
	if (!bad && s->ctx > 0 && *n >= s->ctx) {
		snprintf(err, errlen, "the prompt has %d tokens, no fewer than the model's context "
		         "(max_position_embeddings %d)", *n, s->ctx);
		bad = 1;
	}
	if (!bad)
		return 0;
	free(*ids);
	*ids = NULL;
	if (textp) {
		free(*textp);
		*textp = NULL;
	}
	return -1;
}

/* A prompt field that is there but of the wrong type names itself, rather than reading as
 * absent; null reads as absent. */
static int field_types(const json_t *rec, char *err, size_t errlen)
{
	static const char *const strs[] = { "ref", "prompt", "prefix", "suffix", "system" };
	const json_t *v;

	for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
		if ((v = json_get_set(rec, strs[i])) && !json_is_string(v)) {
			snprintf(err, errlen, "%s is not a string", strs[i]);
			return -1;
		}
		/* a NUL byte (from a .py file: JSON text cannot hold one) would end the text
		 * early in the prompt; it is not Python source either */
		if (v && strlen(json_string_value(v)) != json_string_length(v)) {
			snprintf(err, errlen, "%s holds a NUL byte", strs[i]);
			return -1;
		}
	}
	if ((v = json_get_set(rec, "prompt_ids")) && !json_is_array(v)) {
		snprintf(err, errlen, "prompt_ids is not an array of token ids");
		return -1;
	}
	if ((v = json_get_set(rec, "messages")) && !json_is_array(v)) {
		snprintf(err, errlen, "messages is not an array of {role, content}");
		return -1;
	}
	return 0;
}

/* The prompt of a messages record (an SFT pair, chat style): its turns as dice-sft renders
 * them for training (sft_render), less a last assistant message (the response this sample
 * stands in for), then the generation prompt. New string, or NULL with a message in err. */
static char *messages_prompt(const json_t *rec, enum prompt_chat chat, char *err,
                             size_t errlen)
{
	const json_t *msgs = json_object_get(rec, "messages");
	size_t n = json_array_size(msgs);
	const char *last = n ? json_get_str(json_array_get(msgs, n - 1), "role") : NULL;
	json_t *c = json_copy((json_t *)rec);
	char *prompt = NULL, *response;

	if (chat == PROMPT_CHAT_NONE) {
		snprintf(err, errlen, "messages need a chat template's turns (--template none has "
		         "none)");
	} else {
		json_object_del(c, "prompt");   /* --dry-run's text of them; no part of the prompt */
		json_object_del(c, "response");
		if (!last || strcmp(last, "assistant")) {       /* a turn to answer: an empty one */
			json_t *m = json_copy((json_t *)msgs);
			json_array_append_new(m, json_pack("{s:s, s:s}", "role", "assistant",
			                                   "content", ""));
			json_object_set_new(c, "messages", m);
		}
		if (sft_render(c, 0, &prompt, &response, err, errlen) == 0)
			free(response);
		else
			prompt = NULL;
	}
	json_decref(c);
	return prompt;
}

static int prompt_text(struct sample_rec *s, const json_t *rec, char **textp, int **ids,
                       int *n, char *err, size_t errlen)
{
	const char *ref = json_get_str(rec, "ref"), *prompt = json_get_str(rec, "prompt");
	const json_t *pids = json_object_get(rec, "prompt_ids");
	int msgs = json_is_array(json_object_get(rec, "messages"));
	char *user, *text;
	size_t len;
	int r;

	if (textp)
		*textp = NULL;
	if (field_types(rec, err, errlen) < 0)
		return -1;
	if (ref && util_blank(ref, json_string_length(json_object_get(rec, "ref")))) {
		snprintf(err, errlen, "ref is empty");     /* cuke-filter's words */
		return -1;
	}
	if (!ref && !prompt && !msgs) {
		if (json_is_array(pids) && json_get_str(rec, "system")) {
			snprintf(err, errlen, "system beside prompt_ids, which are fed as they are");
			return -1;
		}
		if (json_is_array(pids))
			return ids_from_array(pids, ids, n, err, errlen);
		snprintf(err, errlen, "record has no ref, prompt, messages or prompt_ids");
		return -1;
	}
	if (!s->tok) {
		snprintf(err, errlen, "no tokenizer in the checkpoint for a text prompt");
		return -1;
	}
	if (!ref && msgs) {     /* before prompt: --dry-run writes the rendered text there */
		text = messages_prompt(rec, s->chat, err, errlen);
	} else {
		user = ref ? fill_ref(s, rec, ref, err, errlen) : xstrdup(prompt);
		if (!user)
			return -1;
		text = prompt_chat_wrap_system(json_get_str(rec, "system"), user, s->chat, err,
		                               errlen);
		free(user);
	}
	if (!text)
		return -1;
	r = tokenizer_encode(s->tok, text, strlen(text), ids, &len);
	if (textp && r >= 0)
		*textp = text;
	else
		free(text);
	if (r < 0) {
		snprintf(err, errlen, "the tokenizer failed on the prompt");
		return -1;
	}
	*n = (int)len;
	return 0;
}

char *sample_rec_text(const struct sample_rec *s, const int *ids, int n, int mask_id)
{
	struct buf raw, out;
	int *keep;
	int m = 0;

	if (!s->tok)
		return NULL;
	keep = xmalloc((size_t)(n ? n : 1) * sizeof *keep);
	for (int i = 0; i < n; i++)
		if (ids[i] != mask_id)
			keep[m++] = ids[i];
	buf_init(&raw);
	buf_init(&out);
	tokenizer_decode(s->tok, keep, (size_t)m, TOKENIZER_DECODE_SKIP_SPECIAL, &raw);
	utf8_repair(&out, raw.p, raw.len);
	char *text = buf_detach(&out, NULL);
	buf_free(&out);                  /* buf_detach re-inits it */
	buf_free(&raw);
	free(keep);
	return text;
}

void sample_rec_text_fields(const char *text, struct jsonl_field f[2])
{
	char *kernel = text ? extract_code(text, strlen(text)) : NULL;

	f[0] = (struct jsonl_field){ "completion", text ? json_string(text) : NULL };
	f[1] = (struct jsonl_field){ "kernel", kernel ? json_string(kernel) : NULL };
	free(kernel);
}

static json_t *int_array(const int *v, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

/* floats rounded to 6 significant digits so the output stays short and stable */
static json_t *real6(double x)
{
	char s[32];
	if (!isfinite(x))
		return json_real(x < 0 ? -1e30 : 1e30);
	snprintf(s, sizeof s, "%.6g", x);
	return json_real(strtod(s, NULL));
}

json_t *sample_rec_object(const struct sampler_result *r, const struct sampler_opts *o,
                          uint64_t seed, int prompt_tokens, int trace, const char *device,
                          const char *dtype)
{
	json_t *s = json_object(), *set = json_object();

	json_object_set_new(s, "ids", int_array(r->ids, r->n));
	json_object_set_new(s, "tokens", json_integer(r->n));
	json_object_set_new(s, "prompt_tokens", json_integer(prompt_tokens));
	json_object_set_new(s, "forwards", json_integer(r->forwards));
	json_object_set_new(s, "steps", json_integer(r->steps));
	json_object_set_new(s, "ms", real6(r->ms));
	json_object_set_new(s, "seed", json_integer((json_int_t)seed));
	json_object_set_new(s, "stopped", json_boolean(r->stopped));
	json_object_set_new(set, "decoding", json_string(sampler_decoding_name(o->decoding)));
	json_object_set_new(set, "block_size", json_integer(o->block));
	json_object_set_new(set, "steps", json_integer(o->steps));
	json_object_set_new(set, "threshold", real6(o->threshold));
	json_object_set_new(set, "temperature", real6(o->temperature));
	json_object_set_new(set, "top_k", json_integer(o->top_k));
	json_object_set_new(set, "top_p", real6(o->top_p));
	json_object_set_new(set, "max_tokens", json_integer(o->max_tokens));
	json_object_set_new(set, "stop", int_array(o->stop, o->nstop));
	json_object_set_new(set, "device", json_string(device));
	json_object_set_new(set, "dtype", json_string(dtype));
	json_object_set_new(s, "settings", set);
	if (trace) {
		json_t *t = json_object(), *lp = json_array();
		json_object_set_new(t, "step", int_array(r->step, r->n));
		for (int i = 0; i < r->n; i++)
			json_array_append_new(lp, real6(r->logp[i]));
		json_object_set_new(t, "logp", lp);
		json_object_set_new(s, "trace", t);
	}
	return s;
}
