/* fuzz_sft: libFuzzer target for dice-sft's record reader and packing (lib/sft.c): records
 * {prompt, response[, system]}, chat "messages", token ids "prompt_ids"/"response_ids", null
 * fields, the Qwen3 rendering with its think block, --max-len, block padding, the shuffle,
 * the micro-batch plan and the noisy batches.
 *
 * The input is an options byte (think, block 1..4, --max-len 16 / 64 / 6144, --batch-tokens
 * 1 / 16 / 64 / 16384) then JSONL, read as dice-sft reads it (lib/jsonl.h), through the Qwen3
 * tokenizer of $DICE_TOKENIZER (default build/qwen3; without it only token-id records are
 * served). Invariants: a record is a sample (added, or dropped as longer than --max-len and
 * counted) or a one-line error, never both, never neither; a sample is its prompt, its
 * response, then pad ids up to a multiple of the block, fewer than a block of them, all ids
 * inside the vocabulary, and at most --max-len before the pads; a text record's rendering
 * puts its prompt (and system) in the Qwen3 turns and the response, with the empty think block
 * exactly when think is on and it has no think tag, before <|im_end|>; the sample's ids are
 * the rendering's encoding, and decode to it (verbatim for ASCII text, else to a text that
 * encodes to the same ids: NFC); a token-id record's sample is its ids as given. The plan
 * of a shuffled order keeps every sample once, in that order, each micro-batch within
 * --batch-tokens unless a sample alone is longer, greedily (the next sample would not fit);
 * a batch of a micro-batch is its samples' x_0 rows verbatim, prompt rows never masked,
 * targets only at masked response rows, with positive finite weights.
 * Build and run: sh tests/fuzz/run.sh sft (seeds: tests/fuzz/seed.py sft). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "rng.h"
#include "sft.h"
#include "tokenizer.h"
#include "util.h"

#include "fuzz_qwen.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tokenizer qwen;
static int have_qwen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	have_qwen = fuzz_qwen_load(&qwen, "fuzz_sft", "text records are refused");
	return 0;
}

static int encode(void *ctx, const char *text, size_t len, int **ids, size_t *n)
{
	return tokenizer_encode(ctx, text, len, ids, n);
}

static int ascii(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s >= 0x80)
			return 0;
	return 1;
}

/* ids[0..n) are the encoding of text, and decode back to it (see above) */
static void check_encoding(const char *text, const int *ids, size_t n)
{
	int *want, *again;
	size_t nw, na;
	struct buf b;

	if (tokenizer_encode(&qwen, text, strlen(text), &want, &nw) < 0 || nw != n ||
	    memcmp(want, ids, n * sizeof *ids))
		abort();
	buf_init(&b);
	if (tokenizer_decode(&qwen, ids, n, 0, &b) < 0)
		abort();
	buf_add(&b, "", 0);
	if (ascii(text) && (b.len != strlen(text) || memcmp(b.p ? b.p : "", text, b.len)))
		abort();
	if (tokenizer_encode(&qwen, b.p ? b.p : "", b.len, &again, &na) < 0 || na != n ||
	    memcmp(again, ids, n * sizeof *ids))
		abort();
	free(want), free(again);
	buf_free(&b);
}

static int has_think_tag(const char *s)
{
	return strstr(s, "<think>") || strstr(s, "</think>");
}

/* the rendering of a text record that was added */
static void check_render(const json_t *rec, int think, const struct sft_sample *s, int n)
{
	char err[256], *p, *r, *want;
	const char *pr = json_get_str(rec, "prompt"), *rs = json_get_str(rec, "response");
	const char *sys = json_get_str(rec, "system");
	size_t lp, lr;

	if (sft_render(rec, think, &p, &r, err, sizeof err) < 0)
		abort();
	lp = strlen(p), lr = strlen(r);
	if (strncmp(p, "<|im_start|>", 12) || lp < 22 || strcmp(p + lp - 22, "<|im_start|>assistant\n"))
		abort();
	if (lr < 11 || strcmp(r + lr - 11, "<|im_end|>\n"))
		abort();
	if (!json_get_set(rec, "messages")) {
		if (!pr || !rs)
			abort();
		want = xasprintf("%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
		                 sys && *sys ? "<|im_start|>system\n" : "", sys && *sys ? sys : "",
		                 sys && *sys ? "<|im_end|>\n" : "", pr);
		if (strcmp(p, want))
			abort();
		free(want);
	} else {
		const json_t *m = json_object_get(rec, "messages");
		rs = json_get_str(json_array_get(m, json_array_size(m) - 1), "content");
		if (!rs)
			abort();
	}
	want = xasprintf("%s%s<|im_end|>\n", think && !has_think_tag(rs) ?
	                 "<think>\n\n</think>\n\n" : "", rs);
	if (strcmp(r, want))
		abort();
	free(want);
	check_encoding(p, s->ids, (size_t)s->prompt_len);
	check_encoding(r, s->ids + s->prompt_len, (size_t)(n - s->prompt_len));
	free(p), free(r);
}

/* the token ids of a token-id record that was added */
static void check_ids(const json_t *rec, const struct sft_sample *s, int n)
{
	const json_t *pi = json_object_get(rec, "prompt_ids"), *ri = json_object_get(rec,
	                                                                            "response_ids");

	if ((size_t)s->prompt_len != json_array_size(pi) ||
	    (size_t)(n - s->prompt_len) != json_array_size(ri))
		abort();
	for (int i = 0; i < n; i++) {
		const json_t *v = i < s->prompt_len ? json_array_get(pi, (size_t)i) :
		                  json_array_get(ri, (size_t)(i - s->prompt_len));
		if (!json_is_integer(v) || json_integer_value(v) != s->ids[i])
			abort();
	}
}

static void check_record(struct sft_data *d, json_t *rec, const struct sft_opts *o)
{
	size_t n0 = d->n, drop0 = d->dropped, tok0 = d->tokens;
	char err[256];
	int rc;

	err[0] = '\0';
	rc = sft_data_add(d, rec, o, err, sizeof err);
	if (rc < 0) {
		if (!err[0] || strchr(err, '\n') || d->n != n0 || d->dropped != drop0 ||
		    d->tokens != tok0)
			abort();
		return;
	}
	if (rc == 1) {
		if (d->n != n0 || d->dropped != drop0 + 1 || d->tokens != tok0)
			abort();
		return;
	}
	if (rc != 0 || d->n != n0 + 1 || d->dropped != drop0)
		abort();
	const struct sft_sample *s = &d->s[n0];
	int n = s->n;           /* the tokens before the pads */
	if (s->n <= 0 || s->n % o->block || s->prompt_len < 0 || s->prompt_len >= s->n ||
	    d->tokens != tok0 + (size_t)s->n)
		abort();
	for (int i = 0; i < s->n; i++)
		if (s->ids[i] < 0 || (o->vocab && s->ids[i] >= o->vocab))
			abort();
	if (sft_record_is_text(rec)) {
		/* the pads: what the rendering's encoding leaves over */
		char *p, *r;
		int *ip, *ir;
		size_t np, nr;
		if (sft_render(rec, o->think, &p, &r, err, sizeof err) < 0 ||
		    tokenizer_encode(&qwen, p, strlen(p), &ip, &np) < 0 ||
		    tokenizer_encode(&qwen, r, strlen(r), &ir, &nr) < 0)
			abort();
		n = (int)(np + nr);
		free(p), free(r), free(ip), free(ir);
	} else {
		n = s->prompt_len + (int)json_array_size(json_object_get(rec, "response_ids"));
	}
	if (n <= s->prompt_len || n > s->n || s->n - n >= o->block || n > o->max_len)
		abort();
	for (int i = n; i < s->n; i++)
		if (s->ids[i] != o->pad_id)
			abort();
	if (sft_record_is_text(rec))
		check_render(rec, o->think, s, n);
	else
		check_ids(rec, s, n);
}

static void check_plan(const struct sft_data *d, size_t batch_tokens, uint64_t seed)
{
	size_t *order = xmalloc((d->n ? d->n : 1) * sizeof *order), *st, nb;
	uint8_t *seen = xcalloc(d->n ? d->n : 1, 1);
	struct rng r;

	rng_seed(&r, seed);
	sft_shuffle(order, d->n, &r);
	for (size_t i = 0; i < d->n; i++) {
		if (order[i] >= d->n || seen[order[i]])
			abort();
		seen[order[i]] = 1;
	}
	nb = sft_plan(d, order, batch_tokens, &st);
	if ((d->n ? nb < 1 : nb != 0) || st[0] != 0 || st[nb] != d->n)
		abort();
	for (size_t b = 0; b < nb; b++) {
		size_t sum = 0;
		const struct sft_sample *ss[64];
		int ns = 0;
		if (st[b + 1] <= st[b])
			abort();
		for (size_t i = st[b]; i < st[b + 1]; i++) {
			sum += (size_t)d->s[order[i]].n;
			if (ns < 64)
				ss[ns++] = &d->s[order[i]];
		}
		if (sum > batch_tokens && st[b + 1] - st[b] != 1)
			abort();
		if (b + 1 < nb && sum + (size_t)d->s[order[st[b + 1]]].n <= batch_tokens)
			abort();        /* the next one would have fitted */
		/* the batch of the first samples of the micro-batch */
		struct train_batch tb;
		int mask_id = 151669, row = 0;
		sft_batch_build(&tb, ss, ns, mask_id, 1.0, &r, NULL);
		for (int i = 0; i < ns; i++) {
			const struct sft_sample *s = ss[i];
			if (tb.start[i] != row || tb.len[i] != 2 * s->n)
				abort();
			for (int h = 0; h < 2; h++)
				for (int j = 0; j < s->n; j++, row++) {
					int masked = tb.target[row] >= 0;
					if (tb.pos[row] != j || tb.noisy[row] != !h ||
					    (masked && (h || j < s->prompt_len ||
					                tb.target[row] != s->ids[j] ||
					                tb.ids[row] != mask_id ||
					                !(tb.weight[row] > 0 && isfinite(tb.weight[row])))) ||
					    (!masked && (tb.ids[row] != s->ids[j] || tb.weight[row] != 0)))
						abort();
				}
		}
		if (row != tb.N)
			abort();
		sft_batch_free(&tb);
	}
	free(st);
	free(order);
	free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int max_len[4] = { 16, 64, 6144, 6144 };
	static const size_t btok[4] = { 1, 16, 64, 16384 };
	struct sft_data d;
	struct sft_opts o = { .pad_id = 151643, .vocab = have_qwen ? tokenizer_vocab_size(&qwen) :
	                      151936 };
	struct jsonl_reader r;
	json_t *rec;
	FILE *fp;
	int st;

	if (size < 2)
		return 0;
	o.think = data[0] & 1;
	o.block = 1 + (data[0] >> 1 & 3);
	o.max_len = max_len[data[0] >> 3 & 3];
	if (have_qwen) {
		o.encode = encode;
		o.encode_ctx = &qwen;
	}
	if (!(fp = fmemopen((void *)(data + 1), size - 1, "r")))
		abort();
	sft_data_init(&d);
	jsonl_reader_init(&r, fp, "fuzz");
	while ((st = jsonl_read(&r, &rec)) != JSONL_EOF) {
		if (st == JSONL_IOERR)
			abort();
		if (st == JSONL_RECORD) {
			check_record(&d, rec, &o);
			json_decref(rec);
		}
	}
	jsonl_reader_free(&r);
	fclose(fp);
	check_plan(&d, btok[data[0] >> 5 & 3], data[0] >> 7);
	sft_data_free(&d);
	return 0;
}
