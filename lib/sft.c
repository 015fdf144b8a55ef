/* sft: records -> padded token samples -> packed [x_t | x_0] batches with the block-diffusion
 * noise (lib/sft.h, SPEC §1.3 and §5.5). */
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "sft.h"
#include "util.h"

#define THINK_EMPTY "<think>\n\n</think>\n\n"

void sft_data_init(struct sft_data *d)
{
	memset(d, 0, sizeof *d);
}

void sft_data_free(struct sft_data *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->s[i].ids);
	free(d->s);
	memset(d, 0, sizeof *d);
}

static void turn(struct buf *b, const char *role, const char *text)
{
	buf_addf(b, "<|im_start|>%s\n", role);
	buf_adds(b, text);
	buf_adds(b, "<|im_end|>\n");
}

/* An earlier assistant turn's text as Qwen3's chat template renders it (LLaMA-Factory's
 * ReasoningTemplate too): its reasoning left out, what follows the last </think> with the
 * newlines that open it taken off; the text itself where it has none */
static const char *earlier_answer(const char *text)
{
	const char *p = text, *t;

	while ((t = strstr(p, "</think>")))
		p = t + strlen("</think>");
	if (p == text)
		return text;
	while (*p == '\n')
		p++;
	return p;
}

static char *response_text(const char *resp, int think)
{
	struct buf b;

	buf_init(&b);
	/* LLaMA-Factory's ReasoningTemplate: only a response without think tags gets one */
	if (think && !strstr(resp, "<think>") && !strstr(resp, "</think>"))
		buf_adds(&b, THINK_EMPTY);
	buf_adds(&b, resp);
	buf_adds(&b, "<|im_end|>\n");
	char *s = buf_detach(&b, NULL);
	buf_free(&b);                   /* detach leaves b re-initialised */
	return s;
}

/* a field there and not null: null counts as absent, in the choice of a record's form too */
static int present(const json_t *rec, const char *key)
{
	return json_get_set(rec, key) != NULL;
}

/* A record of form ("messages", or token ids: "prompt_ids" or "response_ids") with a text
 * field of another form beside it ("messages", "prompt", "response", "system"; null counts
 * as absent): one form or the other, not both (the fields beside were dropped unsaid). 0,
 * or -1 with err. */
static int one_form(const json_t *rec, const char *form, char *err, size_t errlen)
{
	static const char *const text[] = { "messages", "prompt", "response", "system" };

	for (size_t i = 0; i < sizeof text / sizeof *text; i++)
		if (strcmp(text[i], form) && present(rec, text[i])) {
			snprintf(err, errlen, "both \"%s\" and \"%s\": a record is one or "
			         "the other", form, text[i]);
			return -1;
		}
	return 0;
}

int sft_render(const json_t *rec, int think, char **prompt, char **response, char *err,
               size_t errlen)
{
	const json_t *msgs = present(rec, "messages") ? json_object_get(rec, "messages") : NULL;
	const char *resp;
	struct buf b;

	if (msgs && one_form(rec, "messages", err, errlen) < 0)
		return -1;
	buf_init(&b);
	if (msgs) {
		size_t n = json_is_array(msgs) ? json_array_size(msgs) : 0, users = 0;
		const json_t *last = n ? json_array_get(msgs, n - 1) : NULL;
		const char *role = last ? json_get_str(last, "role") : NULL;
		if (!role || strcmp(role, "assistant") || !(resp = json_get_str(last, "content"))) {
			snprintf(err, errlen, "\"messages\" must end with an assistant message");
			buf_free(&b);
			return -1;
		}
		for (size_t i = 0; i + 1 < n; i++) {
			const json_t *m = json_array_get(msgs, i);
			const char *r = json_get_str(m, "role"), *c = json_get_str(m, "content");
			if (!r || !c || (strcmp(r, "system") && strcmp(r, "user") &&
			                 strcmp(r, "assistant"))) {
				snprintf(err, errlen, "message %zu: needs role system/user/assistant "
				         "and string content", i + 1);
				buf_free(&b);
				return -1;
			}
			users += !strcmp(r, "user");
			if (!strcmp(r, "assistant"))    /* the reasoning of earlier answers is dropped */
				turn(&b, r, earlier_answer(c));
			else if (strcmp(r, "system") || *c)     /* an empty system is none */
				turn(&b, r, c);
		}
		if (!users) {           /* Qwen3's template refuses it: "no user query" */
			snprintf(err, errlen, "\"messages\" has no user message before the response");
			buf_free(&b);
			return -1;
		}
	} else {
		const char *sys = json_get_str(rec, "system"), *p = json_get_str(rec, "prompt");
		resp = json_get_str(rec, "response");
		if (!p || !resp) {
			snprintf(err, errlen, "need string fields \"prompt\" and \"response\" "
			         "(or \"messages\", or \"prompt_ids\" and \"response_ids\")");
			buf_free(&b);
			return -1;
		}
		if (!sys && present(rec, "system")) {   /* not dropped unsaid */
			snprintf(err, errlen, "\"system\" must be a string");
			buf_free(&b);
			return -1;
		}
		if (sys && *sys)                /* an empty one is none, as LLaMA-Factory reads it */
			turn(&b, "system", sys);
		turn(&b, "user", p);
	}
	buf_adds(&b, "<|im_start|>assistant\n");
	*prompt = buf_detach(&b, NULL);
	buf_free(&b);
	*response = response_text(resp, think);
	return 0;
}

static int *json_ids(const json_t *a, size_t *n)
{
	int *ids;

	if (!json_is_array(a))
		return NULL;
	*n = json_array_size(a);
	ids = xmalloc((*n ? *n : 1) * sizeof *ids);
	for (size_t i = 0; i < *n; i++) {
		const json_t *v = json_array_get(a, i);
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > 0x7fffffff) {
			free(ids);
			return NULL;
		}
		ids[i] = (int)json_integer_value(v);
	}
	return ids;
}

int sft_data_add_ids(struct sft_data *d, const int *prompt, size_t np, const int *resp,
                     size_t nr, const struct sft_opts *o, char *err, size_t errlen)
{
	size_t n = np + nr, padded;
	struct sft_sample *s;

	if (o->vocab) {
		for (size_t i = 0; i < n; i++) {
			int id = i < np ? prompt[i] : resp[i - np];
			if (id < 0 || id >= o->vocab) {
				snprintf(err, errlen, "token id %d outside the vocabulary (%d)", id,
				         o->vocab);
				return -1;
			}
		}
	}
	if (!nr) {              /* whatever np: nothing to learn but padding */
		snprintf(err, errlen, "no response tokens");
		return -1;
	}
	if ((long)n > o->max_len) {
		d->dropped++;
		return 1;
	}
	padded = (n + (size_t)o->block - 1) / (size_t)o->block * (size_t)o->block;
	if (d->n == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 64;
		d->s = xrealloc(d->s, d->cap * sizeof *d->s);
	}
	s = &d->s[d->n++];
	s->ids = xmalloc(padded * sizeof *s->ids);
	memcpy(s->ids, prompt, np * sizeof *s->ids);
	memcpy(s->ids + np, resp, nr * sizeof *s->ids);
	for (size_t i = n; i < padded; i++)
		s->ids[i] = o->pad_id;
	s->n = (int)padded;
	s->prompt_len = (int)np;
	d->tokens += padded;
	return 0;
}

int sft_record_is_text(const json_t *rec)
{
	return !present(rec, "prompt_ids") && !present(rec, "response_ids");
}

int sft_data_add(struct sft_data *d, const json_t *rec, const struct sft_opts *o, char *err,
                 size_t errlen)
{
	int *p = NULL, *r = NULL, ret = -1;
	size_t np = 0, nr = 0;
	char *pt, *rt;

	if (!sft_record_is_text(rec)) {
		if (one_form(rec, present(rec, "prompt_ids") ? "prompt_ids" : "response_ids", err,
		             errlen) < 0)
			return -1;
		p = json_ids(json_object_get(rec, "prompt_ids"), &np);
		r = json_ids(json_object_get(rec, "response_ids"), &nr);
		if (!p || !r)
			snprintf(err, errlen, "\"prompt_ids\" and \"response_ids\" must be arrays of "
			         "token ids");
		else
			ret = sft_data_add_ids(d, p, np, r, nr, o, err, errlen);
		free(p);
		free(r);
		return ret;
	}
	/* the record's own faults first: a user who gives a tokenizer meets no second error */
	if (sft_render(rec, o->think, &pt, &rt, err, errlen) < 0)
		return -1;
	if (!o->encode)
		snprintf(err, errlen, "%s", o->no_encode ? o->no_encode :
		         "text record but no tokenizer");
	else if (o->encode(o->encode_ctx, pt, strlen(pt), &p, &np) < 0 ||
	         o->encode(o->encode_ctx, rt, strlen(rt), &r, &nr) < 0)
		snprintf(err, errlen, "tokenizer failed");
	else
		ret = sft_data_add_ids(d, p, np, r, nr, o, err, errlen);
	free(p);
	free(r);
	free(pt);
	free(rt);
	return ret;
}

size_t sft_plan(const struct sft_data *d, const size_t *order, size_t batch_tokens,
                size_t **starts)
{
	size_t nb = 0, cur = 0;
	size_t *st = xmalloc((d->n + 1) * sizeof *st);

	for (size_t i = 0; i < d->n; i++) {
		size_t n = (size_t)d->s[order[i]].n;
		if (i == 0 || cur + n > batch_tokens) {
			st[nb++] = i;
			cur = 0;
		}
		cur += n;
	}
	st[nb] = d->n;
	*starts = st;
	return nb;
}

void sft_shuffle(size_t *order, size_t n, struct rng *r)
{
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)rng_below(r, i), t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
}

size_t sft_labels(const struct sft_sample *const *s, int ns)
{
	size_t n = 0;
	for (int i = 0; i < ns; i++)
		n += (size_t)(s[i]->n - s[i]->prompt_len);
	return n;
}

void sft_batch_build_masked(struct train_batch *b, const struct sft_sample *const *s, int ns,
                            int mask_id, double scale, const uint8_t *const *mask,
                            const double *p)
{
	int N = 0;
	double labels = (double)sft_labels(s, ns);

	for (int i = 0; i < ns; i++)
		N += 2 * s[i]->n;
	memset(b, 0, sizeof *b);
	b->N = N;
	b->nsamp = ns;
	b->ids = xmalloc((size_t)(N ? N : 1) * sizeof *b->ids);
	b->pos = xmalloc((size_t)(N ? N : 1) * sizeof *b->pos);
	b->target = xmalloc((size_t)(N ? N : 1) * sizeof *b->target);
	b->weight = xmalloc((size_t)(N ? N : 1) * sizeof *b->weight);
	b->noisy = xmalloc((size_t)(N ? N : 1));
	b->start = xmalloc((size_t)(ns ? ns : 1) * sizeof *b->start);
	b->len = xmalloc((size_t)(ns ? ns : 1) * sizeof *b->len);
	for (int i = 0, row = 0; i < ns; i++) {
		int n = s[i]->n;
		float w = (float)(1.0 / (p[i] * labels * scale));
		b->start[i] = row;
		b->len[i] = 2 * n;
		for (int h = 0; h < 2; h++) {
			for (int j = 0; j < n; j++, row++) {
				int masked = !h && j >= s[i]->prompt_len && mask[i][j];
				b->ids[row] = masked ? mask_id : s[i]->ids[j];
				b->pos[row] = j;
				b->noisy[row] = !h;
				b->target[row] = masked ? s[i]->ids[j] : -1;
				b->weight[row] = masked ? w : 0.0f;
			}
		}
	}
}

void sft_batch_build(struct train_batch *b, const struct sft_sample *const *s, int ns,
                     int mask_id, double scale, struct rng *r, double *pout)
{
	uint8_t **mask = xmalloc((size_t)(ns ? ns : 1) * sizeof *mask);
	double *p = xmalloc((size_t)(ns ? ns : 1) * sizeof *p);

	for (int i = 0; i < ns; i++) {
		int n = s[i]->n, p0 = s[i]->prompt_len, any = 0;
		mask[i] = xcalloc((size_t)n, 1);
		p[i] = (1.0 - SFT_EPS) * rng_uniform(r) + SFT_EPS;
		for (int try = 0; try <= SFT_REDRAWS && !any; try++)
			for (int j = p0; j < n; j++)
				any |= mask[i][j] = rng_uniform(r) < p[i];
		if (!any)
			mask[i][p0 + (int)rng_below(r, (uint64_t)(n - p0))] = 1;
	}
	sft_batch_build_masked(b, s, ns, mask_id, scale, (const uint8_t *const *)mask, p);
	if (pout)
		memcpy(pout, p, (size_t)ns * sizeof *p);
	for (int i = 0; i < ns; i++)
		free(mask[i]);
	free(mask);
	free(p);
}

void sft_batch_free(struct train_batch *b)
{
	free(b->ids);
	free(b->pos);
	free(b->target);
	free(b->weight);
	free(b->noisy);
	free(b->start);
	free(b->len);
	memset(b, 0, sizeof *b);
}
