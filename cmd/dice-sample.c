/* dice-sample: block-diffusion sampling from an SDAR/DICE checkpoint (lib/sampler.h).
 * A .py operand is a KernelBench reference: its kernel (or, with --raw, the whole completion)
 * goes to stdout. JSONL operands (or --jsonl) are records: each comes back with `completion`,
 * `kernel` and a `sample` object; so are the problems of --kernelbench (the records of
 * `kbench-eval --list`). The prompt rules are in lib/sample_rec.h; this file holds the options
 * and the read/decode/write loop. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "extract.h"
#include "input.h"
#include "jsonl.h"
#include "kbench.h"
#include "model.h"
#include "sample_rec.h"
#include "sampler.h"
#include "sampler_fit.h"
#include "tokenizer.h"
#include "util.h"

static const char usage_text[] =
	"usage: dice-sample [options] [file.py | file.jsonl ...]\n"
	"       dice-sample [options] --kernelbench PATH [-L LIST] [--problems LIST]\n"
	"  -m, --model DIR         checkpoint directory ($DICE_MODEL)\n"
	"  -d, --device DEV        cpu or cuda ($DICE_DEVICE; default cuda when present)\n"
	"  -t, --dtype T           bf16, fp16 or fp32 (default bf16 on cuda, fp32 on cpu)\n"
	"  -p, --preset NAME       eval (static, top-k 1) or rl (dynamic 0.9, top-k 0)\n"
	"  -D, --decoding MODE     static, dynamic or sequential (static)\n"
	"  -T, --threshold X       confidence threshold of dynamic decoding (0.9)\n"
	"  -s, --steps N           denoising steps per block (4)\n"
	"  -B, --block-size N      block size (the checkpoint's, 4)\n"
	"  -e, --temperature X     temperature (1)\n"
	"  -k, --top-k N           keep the N largest logits, 0 = all (0)\n"
	"  -P, --top-p X           nucleus sampling, 1 = off (1)\n"
	"  -n, --max-tokens N      new tokens at most (4096)\n"
	"  -S, --stop IDS|none     stop ids, comma-separated (the tokenizer's end ids)\n"
	"  -r, --seed N            seed of the first sample; each next sample takes the next (0)\n"
	"  -N, --samples N         samples per record (1)\n"
	"  -b, --batch N           sequences decoded together (1); fewer where their KV\n"
	"                          caches would not fit in memory (the same results)\n"
	"  -j, --jsonl             write records even for .py operands\n"
	"  -R, --raw               print .py operands' whole completion, not the kernel\n"
	"  -x, --trace             add sample.trace: step and log-probability per token\n"
	"  -I, --infill            use the infilling prompt for every record with ref\n"
	"  -c, --template CHAT     qwen3 (default) or none (feed the text raw)\n"
	"  -F, --prompt-template FILE  your own prompt template for ref records\n"
	"      --kernelbench PATH  sample the problems of a KernelBench tree or archive (the\n"
	"                          records of kbench-eval --list), not operands or stdin\n"
	"  -L, --level LIST        only these levels, e.g. 1 or 1-2 (with no --kernelbench:\n"
	"                          the problems of $KERNELBENCH)\n"
	"      --problems LIST     only these problem numbers, e.g. 1-10,19 (likewise)\n"
	"  -E, --encode            tokenize each operand (or stdin): one JSON id array each\n"
	"  -Z, --decode            the inverse: JSON id arrays (one per line) to text\n"
	"                          (-E, -Z read -m -o -U; any other option: usage error)\n"
	"  -y, --dry-run           write the record that would be sampled: prompt, prompt_ids\n"
	"                          (reads -m -I -c -F --kernelbench -L --problems -o -U)\n"
	"  -o, --output FILE       write to FILE instead of stdout\n"
	"  -U, --unbuffered        flush after every record (or .py text); sample what a\n"
	"                          pipe gave whenever it has nothing more yet\n"
	"  -v, --progress          progress on stderr even when it is not a terminal\n"
	"  -h, --help              show this help\n"
	"  -V, --version           show the version\n";

enum { OPT_KERNELBENCH = 256, OPT_PROBLEMS };   /* long-only options */

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "device", required_argument, NULL, 'd' },
	{ "dtype", required_argument, NULL, 't' },
	{ "preset", required_argument, NULL, 'p' },
	{ "decoding", required_argument, NULL, 'D' },
	{ "threshold", required_argument, NULL, 'T' },
	{ "steps", required_argument, NULL, 's' },
	{ "block-size", required_argument, NULL, 'B' },
	{ "temperature", required_argument, NULL, 'e' },
	{ "top-k", required_argument, NULL, 'k' },
	{ "top-p", required_argument, NULL, 'P' },
	{ "max-tokens", required_argument, NULL, 'n' },
	{ "stop", required_argument, NULL, 'S' },
	{ "seed", required_argument, NULL, 'r' },
	{ "samples", required_argument, NULL, 'N' },
	{ "batch", required_argument, NULL, 'b' },
	{ "jsonl", no_argument, NULL, 'j' },
	{ "raw", no_argument, NULL, 'R' },
	{ "trace", no_argument, NULL, 'x' },
	{ "infill", no_argument, NULL, 'I' },
	{ "template", required_argument, NULL, 'c' },
	{ "prompt-template", required_argument, NULL, 'F' },
	{ "kernelbench", required_argument, NULL, OPT_KERNELBENCH },
	{ "level", required_argument, NULL, 'L' },
	{ "problems", required_argument, NULL, OPT_PROBLEMS },
	{ "encode", no_argument, NULL, 'E' },
	{ "decode", no_argument, NULL, 'Z' },
	{ "dry-run", no_argument, NULL, 'y' },
	{ "output", required_argument, NULL, 'o' },
	{ "unbuffered", no_argument, NULL, 'U' },
	{ "progress", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const char shortopts[] = ":m:d:t:p:D:T:s:B:e:k:P:n:S:r:N:b:jRxIc:F:L:EZyo:UvhV";
/* The options each front-half mode reads (the tokenizer's directory, the output; --dry-run the
 * prompt's options and the records' selection too). Any other (one that acts only when
 * sampling) is a usage error with it, not ignored unsaid. */
static const int encode_reads[] = { 'E', 'm', 'o', 'U', 0 };
static const int decode_reads[] = { 'Z', 'm', 'o', 'U', 0 };
static const int dry_run_reads[] = { 'y', 'm', 'I', 'c', 'F', OPT_KERNELBENCH, 'L', OPT_PROBLEMS,
                                     'o', 'U', 0 };

static _Noreturn void usage(int status)
{
	cli_usage(status, "dice-sample [options] [file.py | file.jsonl ...]", usage_text);
}

static _Noreturn void bad_arg(const char *opt, const char *arg, const char *want)
{
	die_status(EXIT_STATUS_USAGE, "bad --%s '%s' (want %s)", opt, arg, want);
}

/* one sample to draw: a record (or a .py file) and its sample number */
struct job {
	json_t *rec;                 /* owned; shared by a record's samples, never changed */
	char *line;                  /* the input line rec was read from (len bytes), owned;
	                              * NULL for a record built here (.py, --kernelbench) */
	size_t len;
	char *where;                 /* "file:line" or the .py path */
	int text;                    /* 1: print the kernel / completion, not a record */
	int k;                       /* its sample number, 0 .. --samples - 1 */
	int *ids, n;                 /* prompt ids; NULL when the prompt failed */
	char *err;
	int bad_line;                /* rec is a malformed line's, sample set: written as it is */
	uint64_t seed;
};

struct state {
	struct model m;
	struct sampler_opts o;
	struct sample_rec sr;
	struct jsonl_writer w;
	FILE *out;
	const char *device, *dtype;
	int samples, trace, raw, jsonl, progress, ret;
	int headers, texts;          /* several texts to stdout: each under a "==> NAME <==" line */
	int ctx_warned;              /* a prompt + --max-tokens past the context, said once */
	long queued, done;           /* samples queued and written, for the progress line */
	uint64_t next_seed;
	struct job *jobs;
	int njobs, cap;
	size_t kv_limit;             /* bytes the KV caches may take (0: unchecked) */
	int split_warned;            /* a batch split to fit kv_limit, said once */
};

/* samples written / samples queued so far, over the whole run (the line ends at its end) */
static void progress_show(struct state *st, int done)
{
	fprintf(stderr, "\rdice-sample: %ld/%ld", st->done + done, st->queued);
}

static void progress_cb(void *arg, int done, int total)
{
	(void)total;
	progress_show(arg, done);
}

/* The name of a text job, in its header and its messages: the path, and with -N > 1 which
 * sample it is. New string. */
static char *job_name(const struct state *st, const struct job *j)
{
	if (st->samples > 1)
		return xasprintf("%s (sample %d, seed %llu)", j->where, j->k + 1,
		                 (unsigned long long)j->seed);
	return xstrdup(j->where);
}

static void write_job(struct state *st, struct job *j, struct sampler_result *r)
{
	char *text = r ? sample_rec_text(&st->sr, r->ids, r->n, st->o.mask_id) : NULL;

	if (j->text && !st->jsonl) {
		char *kernel = text ? extract_code(text, strlen(text)) : NULL;
		char *name = job_name(st, j);

		errno = 0;                      /* util_fcheck's reason is that of these writes */
		if (st->headers)
			fprintf(st->out, "%s==> %s <==\n", st->texts++ ? "\n" : "", name);
		if (!r) {
			st->ret = 1;            /* reported as it was queued */
		} else if (st->raw || !kernel) {
			if (!st->raw) {
				warn_msg("%s: no code block in the completion (--raw prints it)", name);
				st->ret = 1;
			} else {
				fputs(text ? text : "", st->out);
				fputc('\n', st->out);
			}
		} else {
			fputs(kernel, st->out);
			fputc('\n', st->out);
		}
		if (st->w.unbuffered)           /* -U: each text as it is written */
			util_fcheck(st->out, st->w.name);
		free(kernel);
		free(name);
	} else {
		/* the input line's bytes, with this sample's fields set (lib/jsonl.h) */
		struct jsonl_field f[3];
		size_t nf = 0;
		if (j->bad_line) {
			st->ret = 1;            /* reported as it was read */
		} else if (!r) {
			/* no sample: no completion or kernel either, never the input's */
			sample_rec_text_fields(NULL, f);
			nf = 2;
			f[nf++] = (struct jsonl_field){ "sample", json_pack("{s:s}", "error", j->err) };
			st->ret = 1;            /* reported as it was queued */
		} else {
			sample_rec_text_fields(text, f);        /* this sample's, never the input's */
			nf = 2;
			f[nf++] = (struct jsonl_field){ "sample",
			        sample_rec_object(r, &st->o, j->seed, j->n, st->trace, st->device,
			                          st->dtype) };
		}
		jsonl_write_fields(&st->w, j->line, j->len, j->rec, f, nf);
		for (size_t i = 0; i < nf; i++)
			json_decref(f[i].val);
	}
	free(text);
}

static void job_free(struct job *j)
{
	json_decref(j->rec);
	free(j->line), free(j->where), free(j->ids), free(j->err);
}

/* decode every queued job and write them in order: in runs of fewer than --batch where
 * --batch of their KV caches would pass kv_limit (lib/sampler_fit.h), the same results */
static void flush(struct state *st)
{
	struct sampler_request *rq = xcalloc((size_t)st->njobs + 1, sizeof *rq);
	struct sampler_result *res = xcalloc((size_t)st->njobs + 1, sizeof *res);
	int *map = xcalloc((size_t)st->njobs + 1, sizeof *map), nr = 0;

	for (int i = 0; i < st->njobs; i++) {
		if (!st->jobs[i].ids)
			continue;
		rq[nr] = (struct sampler_request){ st->jobs[i].ids, st->jobs[i].n, st->jobs[i].seed };
		map[i] = nr++;
	}
	if (st->progress && st->njobs)
		progress_show(st, 0);
	if (nr && sampler_run_fit(&st->m, &st->o, rq, nr, res, st->kv_limit, &st->split_warned,
	                          st->progress ? progress_cb : NULL, st) < 0)
		die("the model failed");
	for (int i = 0; i < st->njobs; i++) {
		struct job *j = &st->jobs[i];
		write_job(st, j, j->ids ? &res[map[i]] : NULL);
		if (j->ids)
			sampler_result_free(&res[map[i]]);
		job_free(j);
	}
	st->done += st->njobs;
	st->njobs = 0;
	free(rq), free(res), free(map);
}

/* a new job at the end of the queue, zeroed */
static struct job *job_add(struct state *st)
{
	struct job *j;

	if (st->njobs == st->cap) {
		st->cap = st->cap ? 2 * st->cap : 16;
		st->jobs = xrealloc(st->jobs, (size_t)st->cap * sizeof *st->jobs);
	}
	j = &st->jobs[st->njobs++];
	st->queued++;
	memset(j, 0, sizeof *j);
	return j;
}

/* rec's samples (it is taken), line the input line it was read from (NULL: none) */
static void queue(struct state *st, json_t *rec, const char *line, size_t len,
                  const char *where, int text)
{
	char err[512];
	int *ids = NULL, n = 0, ok;

	ok = sample_rec_prompt(&st->sr, rec, &ids, &n, err, sizeof err) == 0;
	/* too long to decode even alone: this record's error */
	if (ok && sampler_fit_alone(&st->m, &st->o, n, st->kv_limit, err, sizeof err) < 0)
		ok = 0;
	if (!ok)                        /* once, whatever --samples */
		warn_msg("%s: %s", where, err);
	if (ok && !st->ctx_warned && (long)n + st->o.max_tokens > st->sr.ctx) {
		warn_msg("%s: warning: a prompt of %d tokens plus --max-tokens %d passes the model's "
		         "context (%d): tokens past it are sampled at positions it was not trained "
		         "for (said once)", where, n, st->o.max_tokens, st->sr.ctx);
		st->ctx_warned = 1;
	}
	for (int k = 0; k < st->samples; k++) {
		struct job *j = job_add(st);
		j->rec = json_incref(rec);
		if (line) {
			j->line = xmalloc(len + 1);
			memcpy(j->line, line, len + 1);
			j->len = len;
		}
		j->where = xstrdup(where);
		j->text = text;
		j->k = k;
		j->seed = st->next_seed;        /* within --seed's range: the record reproduces */
		st->next_seed = (st->next_seed + 1) & INT64_MAX;
		if (ok) {
			j->ids = xmalloc((size_t)(n ? n : 1) * sizeof *ids);
			memcpy(j->ids, ids, (size_t)n * sizeof *ids);
			j->n = n;
		} else {
			j->err = xstrdup(err);
		}
		if (st->njobs >= 4 * st->o.max_active)  /* within the copies too: -N 100000 */
			flush(st);
	}
	free(ids);
	json_decref(rec);
}

/* the output is gone (a closed pipe, a full disk): nothing more is worth sampling */
static int output_dead(const struct state *st)
{
	return st->w.failed || ferror(st->out);
}

/* -U: the input (a pipe, a FIFO) is open and has nothing to read: the samples queued are
 * drawn and written now, so that a coprocess that waits for a result before it sends the next
 * record is served; with nothing queued, a wait of up to 1 s on the input. -1 once the output
 * is gone: no more reading. */
static int on_idle(int fd, void *arg)
{
	struct state *st = arg;

	if (st->njobs && !output_dead(st)) {
		flush(st);
	} else if (!output_dead(st)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, 1000);
	}
	return output_dead(st) ? -1 : 0;
}

/* a record to sample (an input line's, or a --kernelbench problem's, line NULL); -1: stop
 * reading */
static int queue_record(struct state *st, json_t *rec, const char *line, size_t len,
                        const char *where)
{
	if (output_dead(st)) {
		json_decref(rec);
		return -1;
	}
	queue(st, rec, line, len, where, 0);
	return 0;
}

static int on_problem(json_t *rec, const char *where, void *arg)
{
	return queue_record(arg, rec, NULL, 0, where);
}

static int on_record(json_t *rec, struct jsonl_reader *r, void *arg)
{
	char *where = xasprintf("%s:%zu", r->name, r->lineno);
	int ret = queue_record(arg, rec, r->line, r->len, where);
	free(where);
	return ret;
}

/* A malformed line (bad JSON, not an object, invalid UTF-8), reported: the record that
 * stands in its place, as deceive-check and kbench-eval pass one through: {"source", "line",
 * "error", "text"} with "sample": {"error": "bad_record", "message": reason}. New reference. */
static json_t *bad_line_record(struct jsonl_reader *r)
{
	json_t *rec = jsonl_bad_record(r);

	jsonl_report_bad(r);
	json_object_set_new(rec, "sample", json_pack("{s:s, s:s}", "error", "bad_record",
	                                             "message", r->err));
	return rec;
}

/* a malformed line comes out in its place, once (whatever --samples; it takes no seed) */
static void on_bad(struct jsonl_reader *r, void *arg)
{
	struct state *st = arg;
	struct job *j;

	if (output_dead(st))
		return;
	j = job_add(st);
	j->rec = bad_line_record(r);
	j->where = xasprintf("%s:%zu", r->name, r->lineno);
	j->bad_line = 1;
	if (st->njobs >= 4 * st->o.max_active)
		flush(st);
}

/* A reference worth sampling on: not empty (white space alone) and valid UTF-8 (a binary
 * file given by mistake); else a message naming the file. */
static int py_usable(const char *name, const char *data, size_t len)
{
	if (util_blank(data, len))
		warn_msg("%s: the reference is empty", name);
	else if (!utf8_valid(data, len))
		warn_msg("%s: the reference is not UTF-8 text", name);
	else
		return 1;
	return 0;
}

static int on_py(const char *name, const char *data, size_t len, void *arg)
{
	struct state *st = arg;

	if (output_dead(st))
		return -1;
	if (py_usable(name, data, len))
		queue(st, sample_rec_from_py(name, data, len), NULL, 0, name, 1);
	else
		st->ret = 1;
	return 0;
}

/* --stop: "none" or ids (checked against the vocabulary once the model is known) */
static int parse_stop(const char *arg, int **stop)
{
	long *v;
	int n;

	*stop = NULL;
	if (!strcmp(arg, "none"))
		return 0;
	if ((n = parse_long_list(arg, 0, INT32_MAX, &v)) < 0)
		return -1;
	*stop = xmalloc((size_t)n * sizeof **stop);
	for (int i = 0; i < n; i++)
		(*stop)[i] = (int)v[i];
	free(v);
	return n;
}

/* ---- --kernelbench: the problems of a tree, as the records kbench-eval --list writes */

struct kb_sel {
	const char *path;                    /* the tree or archive; NULL: no --kernelbench run */
	struct kbench_tree tree;
	const struct kbench_problem **p;     /* (n) the problems selected, in the tree's order */
	size_t n;
};

/* The problems to sample, chosen before any weight is read. $KERNELBENCH stands in for
 * --kernelbench only beside --level or --problems: alone it does not turn a run that reads
 * its operands or stdin into one over the whole benchmark. Operands with it are a usage
 * error; a tree that cannot be read, or a selection without a problem, an error (status 1). */
static void kb_select(struct kb_sel *k, const char *path, const char *level_arg,
                      const char *problems_arg, const struct kbench_ranges *levels,
                      const struct kbench_ranges *problems, char **ops, int nops)
{
	const char *opt = path ? "--kernelbench" : level_arg ? "--level" : "--problems";

	memset(k, 0, sizeof *k);
	if (!path && !level_arg && !problems_arg)
		return;
	if (path && !*path)
		bad_arg("kernelbench", path, "a KernelBench tree or archive");
	if (!path && !(path = util_env("KERNELBENCH", NULL)))
		die_status(EXIT_STATUS_USAGE, "%s needs a KernelBench tree (--kernelbench or "
		           "$KERNELBENCH)", opt);
	if (nops)
		die_status(EXIT_STATUS_USAGE, "%s samples KernelBench problems, not operands: "
		           "unexpected operand '%s'", opt, ops[0]);
	k->path = path;
	if (kbench_tree_load(&k->tree, path) < 0)
		exit(EXIT_STATUS_BAD);          /* the library said why, in one line */
	if (!(k->n = kbench_tree_select(&k->tree, levels, problems, &k->p))) {
		kbench_warn_empty(path, level_arg, problems_arg);
		exit(EXIT_STATUS_BAD);
	}
}

/* fn(record, "PATH:levelN/<file>", arg) for each problem selected, until fn returns nonzero */
static void kb_each(const struct kb_sel *k, int (*fn)(json_t *rec, const char *where, void *arg),
                    void *arg)
{
	for (size_t i = 0; i < k->n; i++) {
		char *where = xasprintf("%s:%s", k->path, k->p[i]->path);
		int r = fn(kbench_problem_record(k->p[i]), where, arg);
		free(where);
		if (r)
			break;
	}
}

static void kb_free(struct kb_sel *k)
{
	free(k->p);
	kbench_tree_free(&k->tree);
}

/* ---- the front half: tokenizer and prompts only, no weights (--encode, --decode, --dry-run) */

enum front { FRONT_NONE, FRONT_ENCODE, FRONT_DECODE, FRONT_DRY_RUN };

struct front_state {
	struct tokenizer *tok;
	struct sample_rec sr;
	struct jsonl_writer w;
	FILE *out;
	int ret;
};

/* --encode: the ids of a whole file's text (no byte-order mark), added tokens recognised, as one
 * JSON array */
static int front_encode(const char *name, const char *data, size_t len, void *arg)
{
	struct front_state *f = arg;
	int *ids;
	size_t n;

	if (tokenizer_encode(f->tok, data, len, &ids, &n) < 0) {
		warn_msg("%s: the tokenizer failed", name);
		f->ret = 1;
		return 0;
	}
	fputc('[', f->out);
	for (size_t i = 0; i < n; i++)
		fprintf(f->out, i ? ",%d" : "%d", ids[i]);
	fputs("]\n", f->out);
	if (f->w.unbuffered)
		fflush(f->out);
	free(ids);
	return 0;
}

/* --decode: each line a JSON array of ids; the bytes they stand for, special tokens kept */
static int front_decode(const char *name, const char *data, size_t len, void *arg)
{
	struct front_state *f = arg;
	const char *p = data, *end = data + len;
	struct buf out;
	size_t lineno = 0;

	buf_init(&out);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		json_error_t je;
		json_t *a;
		int *ids = NULL;
		size_t n = 0, i;
		json_t *v;

		const char *q = p;

		lineno++;
		while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
			q++;
		a = q < e ? json_loadb(p, (size_t)(e - p), 0, &je) : NULL;
		p = nl ? nl + 1 : end;
		if (q == e)
			continue;            /* blank line */
		if (!json_is_array(a)) {
			warn_msg("%s:%zu: not a JSON array of token ids", name, lineno);
			f->ret = 1;
			json_decref(a);
			continue;
		}
		ids = xmalloc((json_array_size(a) + 1) * sizeof *ids);
		json_array_foreach(a, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) >= tokenizer_vocab_size(f->tok))
				break;
			ids[n++] = (int)json_integer_value(v);
		}
		if (n != json_array_size(a)) {
			warn_msg("%s:%zu: element %zu is not a token id of this tokenizer", name, lineno, n);
			f->ret = 1;
		} else {
			buf_reset(&out);
			tokenizer_decode(f->tok, ids, n, 0, &out);
			fwrite(out.p, 1, out.len, f->out);
			if (f->w.unbuffered)
				fflush(f->out);
		}
		free(ids);
		json_decref(a);
	}
	buf_free(&out);
	return 0;
}

/* --dry-run: the record (read from line, NULL: built here) with the prompt text and ids it
 * would be sampled from; rec is taken */
static void front_dry(struct front_state *f, json_t *rec, const char *line, size_t len,
                      const char *where)
{
	char err[512], *text;
	int *ids, n;
	struct jsonl_field fl[2];
	size_t nf = 0;

	if (sample_rec_prompt_text(&f->sr, rec, &text, &ids, &n, err, sizeof err) < 0) {
		warn_msg("%s: %s", where, err);
		fl[nf++] = (struct jsonl_field){ "sample", json_pack("{s:s}", "error", err) };
		f->ret = 1;
	} else {
		json_t *a = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(a, json_integer(ids[i]));
		/* a given prompt stays as it was; a null one is none (json_get_set) */
		if (text && !json_get_set(rec, "prompt"))
			fl[nf++] = (struct jsonl_field){ "prompt", json_string(text) };
		fl[nf++] = (struct jsonl_field){ "prompt_ids", a };
		free(text);
		free(ids);
	}
	jsonl_write_fields(&f->w, line, len, rec, fl, nf);
	for (size_t i = 0; i < nf; i++)
		json_decref(fl[i].val);
	json_decref(rec);
}

static int front_dry_record(json_t *rec, struct jsonl_reader *r, void *arg)
{
	char *where = xasprintf("%s:%zu", r->name, r->lineno);
	front_dry(arg, rec, r->line, r->len, where);
	free(where);
	return 0;
}

static void front_dry_bad(struct jsonl_reader *r, void *arg)
{
	struct front_state *f = arg;
	json_t *rec = bad_line_record(r);

	jsonl_write(&f->w, rec);
	json_decref(rec);
}

static int front_dry_kb(json_t *rec, const char *where, void *arg)
{
	front_dry(arg, rec, NULL, 0, where);
	return 0;
}

static int front_dry_py(const char *name, const char *data, size_t len, void *arg)
{
	struct front_state *f = arg;

	if (py_usable(name, data, len))
		front_dry(f, sample_rec_from_py(name, data, len), NULL, 0, name);
	else
		f->ret = 1;
	return 0;
}

static int run_front(enum front mode, const char *model_dir, const char *template_path,
                     enum prompt_chat chat, int infill, const char *out_path, int unbuffered,
                     const struct kb_sel *kb, char **ops_v, int nops)
{
	static struct front_state f;
	struct tokenizer tok;
	char err[512], *dash[] = { "-" };

	if (tokenizer_load(&tok, model_dir, err, sizeof err) < 0)
		die("%s", err);
	f.tok = &tok;
	f.out = stdout;
	if (out_path && !(f.out = fopen(out_path, "w")))
		die("cannot open '%s':", out_path);
	jsonl_writer_init(&f.w, f.out, out_path ? out_path : "stdout", unbuffered);
	sample_rec_init(&f.sr, &tok, chat, infill);
	f.sr.template_path = template_path;
	if (mode == FRONT_DRY_RUN) {    /* the run's checks on the prompt, when there is a config */
		char *path = xasprintf("%s/config.json", model_dir);
		struct model_config cfg;
		if (!access(path, F_OK)) {
			if (config_load(&cfg, path, err, sizeof err) < 0)
				die("%s", err);
			f.sr.vocab = cfg.vocab_size;
			f.sr.ctx = cfg.max_position_embeddings;
		}
		free(path);
	}
	if (kb->path)           /* no operands then (kb_select) */
		kb_each(kb, front_dry_kb, &f);
	else if (!nops)
		ops_v = dash, nops = 1;
	for (int i = 0; i < nops; i++) {
		int r;
		if (mode == FRONT_ENCODE)
			r = input_each_file(ops_v[i], front_encode, &f);
		else if (mode == FRONT_DECODE)
			r = input_each_file(ops_v[i], front_decode, &f);
		else if (input_is_py(ops_v[i]))
			r = input_each_py(ops_v[i], front_dry_py, &f);
		else
			r = jsonl_each(ops_v + i, 1, front_dry_record, front_dry_bad, &f);
		if (r)
			f.ret = 1;
	}
	if (f.w.failed)
		f.ret = 1;
	jsonl_writer_free(&f.w);
	if (util_fshut(f.out, out_path ? out_path : "stdout"))
		f.ret = 1;
	sample_rec_free(&f.sr);
	tokenizer_free(&tok);
	return f.ret;
}

int main(int argc, char **argv)
{
	static struct state st;
	struct checkpoint ck;
	struct tokenizer tok;
	const char *model_dir = util_env("DICE_MODEL", NULL), *out_path = NULL, *stop_arg = NULL;
	const char *dtype_arg = NULL, *preset = NULL, *template_path = NULL;
	const char *kb_arg = NULL, *level_arg = NULL, *problems_arg = NULL;
	struct kbench_ranges levels = { 0 }, problems = { 0 };
	struct kb_sel kb;
	struct prompt_template *user_t = NULL;   /* -F's, read to be checked */
	enum front front = FRONT_NONE;
	enum dice_dtype dt = DICE_F32;
	enum prompt_chat chat = PROMPT_CHAT_QWEN3;
	int infill = 0, unbuffered = 0, block = 0, opt, nstop = 0, have_tok;
	int *stop = NULL;
	char err[512];
	struct sampler_opts set;     /* options given, applied over the preset */
	unsigned char given[OPT_PROBLEMS + 1] = { 0 };   /* the options given, by code */

	util_set_progname(argv[0]);
	input_set_tree_option("--kernelbench");   /* a tree given as an operand: say so */
	sampler_opts_default(&st.o);
	set = st.o;
	st.samples = 1;
	st.device = util_env("DICE_DEVICE", NULL);
	while ((opt = cli_getopt(argc, argv, shortopts, longopts)) != -1) {
		if (opt > 0 && opt <= OPT_PROBLEMS)
			given[opt] = 1;
		switch (opt) {
		case 'm': model_dir = cli_nonempty(opt, "a checkpoint directory", optarg); break;
		case 'd': st.device = optarg; break;
		case 't': dtype_arg = optarg; break;
		case 'p':
			if (sampler_preset(&st.o, optarg) < 0)
				bad_arg("preset", optarg, "eval or rl");
			preset = optarg;
			break;
		case 'D':
			if (sampler_decoding_parse(optarg, &set.decoding) < 0)
				bad_arg("decoding", optarg, "static, dynamic or sequential");
			break;
		case 'T':
			set.threshold = (float)cli_double("--threshold", optarg, 0, 1);
			break;
		case 's':
			st.o.steps = (int)cli_long("--steps", optarg, 1, 1024);
			break;
		case 'B':
			block = (int)cli_long("--block-size", optarg, 1, 1024);
			break;
		case 'e':
			set.temperature = (float)cli_double("--temperature", optarg, 1e-6, 1e6);
			break;
		case 'k':
			set.top_k = (int)cli_long("--top-k", optarg, 0, 1 << 30);
			break;
		case 'P':
			set.top_p = (float)cli_double("--top-p", optarg, 1e-9, 1);
			break;
		case 'n':
			st.o.max_tokens = (int)cli_long("--max-tokens", optarg, 0, 1 << 24);
			break;
		case 'S': stop_arg = optarg; break;
		case 'r':
			st.next_seed = (uint64_t)cli_long("--seed", optarg, 0, LONG_MAX);
			break;
		case 'N':
			st.samples = (int)cli_long("--samples", optarg, 1, 1 << 20);
			break;
		case 'b':
			st.o.max_active = (int)cli_long("--batch", optarg, 1, 1 << 20);
			break;
		case 'j': st.jsonl = 1; break;
		case 'R': st.raw = 1; break;
		case 'x': st.trace = 1; break;
		case 'I': infill = 1; break;
		case 'c':
			if (prompt_chat_parse(optarg, &chat) < 0)
				bad_arg("template", optarg, "qwen3 or none");
			break;
		case 'F':       /* read now: a missing file is a usage error, not one per record */
			if (user_t)
				prompt_free(user_t);
			if (!(user_t = prompt_load(optarg, err, sizeof err)))
				die_status(EXIT_STATUS_USAGE, "%s", err);
			template_path = optarg;
			break;
		case OPT_KERNELBENCH: kb_arg = optarg; break;
		case 'L':
			kbench_ranges_free(&levels);
			if (kbench_levels_parse(&levels, optarg) < 0)
				die_status(EXIT_STATUS_USAGE, "bad --level '%s' (want e.g. 1 or 1-2, "
				           "levels 0 to %d)", optarg, KBENCH_MAX_LEVEL);
			level_arg = optarg;
			break;
		case OPT_PROBLEMS:
			kbench_ranges_free(&problems);
			if (kbench_ranges_parse(&problems, optarg) < 0)
				bad_arg("problems", optarg, "e.g. 1-10,19");
			problems_arg = optarg;
			break;
		case 'E': front = FRONT_ENCODE; break;
		case 'Z': front = FRONT_DECODE; break;
		case 'y': front = FRONT_DRY_RUN; break;
		case 'o': out_path = cli_output_file(opt, optarg); break;
		case 'U': unbuffered = 1; break;
		case 'v': st.progress = 1; break;
		case 'h': usage(0);
		case 'V': cli_version();
		default:
			usage(EXIT_STATUS_USAGE);
		}
	}
	(void)preset;
	if (user_t) {           /* -I: every ref record's prompt fills {{prefix}} and {{suffix}} */
		if (infill && sample_rec_check_infill(user_t, "--infill", err, sizeof err) < 0)
			die_status(EXIT_STATUS_USAGE, "%s", err);
		prompt_free(user_t);
	}
	if (given['D']) st.o.decoding = set.decoding;
	if (given['T']) st.o.threshold = set.threshold;
	if (given['e']) st.o.temperature = set.temperature;
	if (given['k']) st.o.top_k = set.top_k;
	if (given['P']) st.o.top_p = set.top_p;
	if (!model_dir) {
		warn_msg("no checkpoint: give -m DIR or set DICE_MODEL");
		usage(EXIT_STATUS_USAGE);
	}
	if (stop_arg && (nstop = parse_stop(stop_arg, &stop)) < 0)
		bad_arg("stop", stop_arg, "none or token ids, e.g. 151643,151645");
	/* checked here, whatever the mode: a value a run refuses ($DICE_DEVICE's too, which
	 * --dry-run takes as no option is) is no value for --dry-run */
	if (st.device && strcmp(st.device, "cpu") && strcmp(st.device, "cuda"))
		bad_arg("device", st.device, "cpu or cuda");
	if (dtype_arg && config_dtype_arg(dtype_arg, &dt) < 0)
		bad_arg("dtype", dtype_arg, "bf16, fp16 or fp32");
	if ((kb_arg || level_arg || problems_arg) && (front == FRONT_ENCODE || front == FRONT_DECODE))
		die_status(EXIT_STATUS_USAGE, "--%s reads files, not KernelBench problems",
		           front == FRONT_ENCODE ? "encode" : "decode");
	if (front != FRONT_NONE) {
		const char *mode = front == FRONT_ENCODE ? "encode" :
		                   front == FRONT_DECODE ? "decode" : "dry-run";
		const char *o = cli_unread(longopts, given, sizeof given,
		                           front == FRONT_ENCODE ? encode_reads :
		                           front == FRONT_DECODE ? decode_reads : dry_run_reads);
		if (o)
			die_status(EXIT_STATUS_USAGE, "--%s has no effect with --%s", o, mode);
	}
	kb_select(&kb, kb_arg, level_arg, problems_arg, &levels, &problems, argv + optind,
	          argc - optind);
	kbench_ranges_free(&levels);
	kbench_ranges_free(&problems);
	if (kb.path)            /* the tree is the input: -o must not name it */
		cli_output_not_input(out_path, (char **)&kb.path, 1);
	else
		cli_output_not_input(out_path, argv + optind, argc - optind);
	if (front == FRONT_NONE) {
		int npy = 0;
		for (int i = optind; i < argc; i++)
			npy += input_is_py(argv[i]);
		if (st.trace && !st.jsonl && optind < argc && npy == argc - optind)
			die_status(EXIT_STATUS_USAGE, "--trace adds sample.trace to records, and .py "
			           "operands are written as text: add --jsonl");
		if (st.raw && (st.jsonl || !npy))       /* no text to print whole */
			die_status(EXIT_STATUS_USAGE, "--raw applies to .py operands written as text; "
			           "records carry the whole completion in `completion`");
	}
	if (front != FRONT_NONE) {
		int ret = run_front(front, model_dir, template_path, chat, infill, out_path,
		                    unbuffered, &kb, argv + optind, argc - optind);
		kb_free(&kb);
		return ret;
	}

	/* backend and precision */
	const struct ops *ops;
	if (!st.device)
		st.device = ops_get("cuda") ? "cuda" : "cpu";
	if (!(ops = ops_get(st.device)))
		die("no CUDA device (or this build has no CUDA backend)\nhint: --device cpu");
	if (!dtype_arg)
		dt = !strcmp(st.device, "cuda") ? DICE_BF16 : DICE_F32;
	st.dtype = dt == DICE_BF16 ? "bf16" : dt == DICE_F16 ? "fp16" : "fp32";

	/* checkpoint, tokenizer, model */
	if (checkpoint_open(&ck, model_dir, err, sizeof err) < 0)
		die("%s", err);
	/* none is allowed (token-id records), one that does not load is not (as in dice-sft
	 * and dice-rl) */
	if ((have_tok = checkpoint_load_tokenizer(&tok, model_dir, NULL, err, sizeof err)) < 0)
		die("%s", err);
	if (!have_tok)
		warn_msg("%s: no tokenizer.json (only prompt_ids records can be sampled)", model_dir);
	if (!stop_arg) {                 /* the tokenizer's end ids */
		static const char *const ends[] = { "<|endoftext|>", "<|im_end|>" };
		stop = xmalloc(2 * sizeof *stop);
		for (size_t i = 0; i < 2; i++) {
			int id = have_tok ? tokenizer_token_id(&tok, ends[i]) : (i ? 151645 : 151643);
			if (id >= 0)
				stop[nstop++] = id;
		}
	}
	for (int i = 0; stop_arg && i < nstop; i++)
		if (stop[i] >= ck.cfg.vocab_size)
			die_status(EXIT_STATUS_USAGE, "bad --stop '%s': id %d is outside the model's "
			           "vocabulary (%d)", stop_arg, stop[i], ck.cfg.vocab_size);
	st.o.stop = stop, st.o.nstop = nstop;
	st.o.block = block ? block : ck.cfg.block_size;
	st.o.mask_id = ck.cfg.mask_token_id;
	if (model_init(&st.m, &ck.cfg, &ck.w, ops, dt) < 0)
		die("%s: cannot set up the model", model_dir);
	checkpoint_close(&ck);
	if (sampler_mem_limit(&st.m, &st.kv_limit, err, sizeof err) < 0)
		die_status(EXIT_STATUS_USAGE, "%s", err);
	/* not even an empty prompt fits: no record would */
	if (sampler_fit_alone(&st.m, &st.o, -1, st.kv_limit, err, sizeof err) < 0)
		die("%s\nhint: lower --max-tokens", err);
	sample_rec_init(&st.sr, have_tok ? &tok : NULL, chat, infill);
	st.sr.template_path = template_path;
	st.sr.vocab = st.m.cfg.vocab_size;
	st.sr.ctx = st.m.cfg.max_position_embeddings;
	st.progress |= isatty(2);

	st.out = stdout;
	if (out_path && !(st.out = fopen(out_path, "w")))
		die("cannot open '%s':", out_path);
	jsonl_writer_init(&st.w, st.out, out_path ? out_path : "stdout", unbuffered);
	char **ops_v = argv + optind, *dash[] = { "-" };
	int nops = argc - optind, npy = 0;
	if (!nops && !kb.path)
		ops_v = dash, nops = 1;
	for (int i = 0; i < nops; i++)
		npy += input_is_py(ops_v[i]);
	st.headers = !st.jsonl && (long)npy * st.samples > 1;
	if (kb.path)            /* no operands then (kb_select) */
		kb_each(&kb, on_problem, &st);
	if (unbuffered)
		input_set_idle(on_idle, &st);
	for (int i = 0; i < nops && !output_dead(&st); i++) {
		if (input_is_py(ops_v[i])) {
			if (input_each_py(ops_v[i], on_py, &st) != 0)
				st.ret = 1;
		} else if (jsonl_each(ops_v + i, 1, on_record, on_bad, &st)) {
			st.ret = 1;
		}
	}
	input_set_idle(NULL, NULL);
	if (!output_dead(&st))
		flush(&st);
	if (st.progress && st.queued)
		fputc('\n', stderr);
	for (int i = 0; i < st.njobs; i++)     /* queued when the output died: not sampled */
		job_free(&st.jobs[i]);
	if (st.w.failed)
		st.ret = 1;
	jsonl_writer_free(&st.w);
	if (util_fshut(st.out, out_path ? out_path : "stdout"))
		st.ret = 1;
	sample_rec_free(&st.sr);
	if (have_tok)
		tokenizer_free(&tok);
	model_free(&st.m);
	kb_free(&kb);
	free(st.jobs);
	free(stop);
	return st.ret;
}
