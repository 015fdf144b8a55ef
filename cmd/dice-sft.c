/* dice-sft: block-diffusion supervised fine-tuning of an SDAR checkpoint (SPEC §1.3, §5.5).
 * Reads {prompt, response} / messages / token-id records, trains with AdamW and writes a
 * Hugging Face checkpoint plus a resumable state to -o. --init makes a random checkpoint.
 * The objective is in lib/sft.c and lib/model_bwd.c, the loop pieces in lib/sft_train.c;
 * this file holds the options and the main loop. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "jsonl.h"
#include "sft_train.h"
#include "tokenizer.h"
#include "util.h"

static const char usage_text[] =
	"usage: dice-sft -m INIT_DIR -o OUT_DIR [options] [file ...]\n"
	"       dice-sft --init CONFIG.json -o OUT_DIR [-q] [-s SEED] [-t TOKENIZER_DIR]\n"
	"  -m, --model DIR         checkpoint to start from (HF directory; default $DICE_MODEL)\n"
	"  -o, --output DIR        where checkpoints and the training state go\n"
	"  -i, --init CONFIG.json  write a randomly initialised checkpoint to -o and exit\n"
	"                          (reads -o -s -t -q; any other option: usage error)\n"
	"  -t, --tokenizer DIR     tokenizer files (default: the model directory)\n"
	"  -e, --epochs N          passes over the data (3)\n"
	"  -n, --max-steps N       stop after N optimizer steps (0: no cap)\n"
	"  -l, --lr X              peak learning rate (1e-5)\n"
	"  -w, --warmup X          warm-up: a fraction of the steps (< 1) or whole steps (0.03)\n"
	"  -S, --schedule NAME     constant_with_warmup (default) or cosine\n"
	"  -b, --batch-tokens N    tokens per micro-batch, samples packed (16384)\n"
	"  -a, --grad-accum N      micro-batches per optimizer step (1)\n"
	"  -L, --max-len N         drop samples longer than N tokens (6144)\n"
	"  -s, --seed N            seed of data order, noise and --init (42)\n"
	"  -d, --device NAME       cpu or cuda (default $DICE_DEVICE, else cpu)\n"
	"  -D, --dtype NAME        compute dtype: fp32 (float32; default) or bf16 (bfloat16;\n"
	"                          cuda only: bf16 GEMMs and attention, fp32 master weights)\n"
	"  -g, --log FILE          JSONL metrics, one line per step (appended with -r)\n"
	"  -k, --save-every N      also save every N steps (0: only at the end)\n"
	"  -r, --resume            continue from -o's checkpoint and trainer state\n"
	"  -R, --recompute         recompute activations in the backward (less memory)\n"
	"  -T, --no-think          do not prepend the empty think block to responses\n"
	"  -1, --beta1 X           AdamW beta1 (0.9)\n"
	"  -2, --beta2 X           AdamW beta2 (0.999)\n"
	"  -E, --adam-eps X        AdamW epsilon (1e-8)\n"
	"  -W, --weight-decay X    AdamW weight decay of matrices (0)\n"
	"  -c, --clip X            gradient-norm clipping (1.0; 0: off)\n"
	"  -x, --dump-batch FILE   write the first micro-batch, its loss and gradients to FILE\n"
	"                          (safetensors, for tests/gpu/sft-parity.py) and exit\n"
	"  -q, --quiet             no progress lines on stderr\n"
	"  -h, --help              show this help\n"
	"  -V, --version           show the version\n";

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "output", required_argument, NULL, 'o' },
	{ "init", required_argument, NULL, 'i' },
	{ "tokenizer", required_argument, NULL, 't' },
	{ "epochs", required_argument, NULL, 'e' },
	{ "max-steps", required_argument, NULL, 'n' },
	{ "lr", required_argument, NULL, 'l' },
	{ "warmup", required_argument, NULL, 'w' },
	{ "schedule", required_argument, NULL, 'S' },
	{ "batch-tokens", required_argument, NULL, 'b' },
	{ "grad-accum", required_argument, NULL, 'a' },
	{ "max-len", required_argument, NULL, 'L' },
	{ "seed", required_argument, NULL, 's' },
	{ "device", required_argument, NULL, 'd' },
	{ "dtype", required_argument, NULL, 'D' },
	{ "log", required_argument, NULL, 'g' },
	{ "save-every", required_argument, NULL, 'k' },
	{ "resume", no_argument, NULL, 'r' },
	{ "recompute", no_argument, NULL, 'R' },
	{ "no-think", no_argument, NULL, 'T' },
	{ "beta1", required_argument, NULL, '1' },
	{ "beta2", required_argument, NULL, '2' },
	{ "adam-eps", required_argument, NULL, 'E' },
	{ "weight-decay", required_argument, NULL, 'W' },
	{ "clip", required_argument, NULL, 'c' },
	{ "dump-batch", required_argument, NULL, 'x' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const char shortopts[] = "m:o:i:t:e:n:l:w:S:b:a:L:s:d:D:g:k:rRT1:2:E:W:c:x:qhV";
/* The options --init reads; any other (a training option) is a usage error with it, as are
 * operands: it writes a random checkpoint and exits, training nothing. */
static const int init_reads[] = { 'i', 'o', 's', 't', 'q', 0 };

static _Noreturn void usage(int status)
{
	cli_usage(status, "dice-sft -m INIT_DIR -o OUT_DIR [options] [file ...]\n"
		      "       dice-sft --init CONFIG.json -o OUT_DIR", usage_text);
}

/* Before training starts (loading, reading the input, which may block on a pipe or a fifo:
 * signal() restarts the read) a signal ends the program at once, 128 + sig: nothing has been
 * saved. From the first step on it ends training after the step in progress, saved, and the
 * exit status is 128 + sig all the same (as dice-rl's and kbench-eval's): a script that
 * chains on success does not go on from a run cut short. */
static volatile sig_atomic_t stop, training;
static void on_signal(int sig)
{
	if (!training)
		util_signal_exit(sig, "interrupted before training");
	stop = sig;
}

/* ---------------------------------------------------------------- data */

struct reader {
	struct sft_data *d;
	struct sft_opts *o;
	struct tokenizer tok;
	const char *tok_dir;
	int bad;
};

static int tok_encode(void *ctx, const char *text, size_t len, int **ids, size_t *n)
{
	return tokenizer_encode(ctx, text, len, ids, n);
}

/* The tokenizer of rd->tok_dir into rd, where there is one (checkpoint_load_tokenizer: opt
 * the option that named it, or NULL); -1 with why in err */
static int reader_tokenizer(struct reader *rd, const char *opt, char *err, size_t errlen)
{
	int rc = checkpoint_load_tokenizer(&rd->tok, rd->tok_dir, opt, err, errlen);
	if (rc <= 0)
		return rc;
	rd->o->encode = tok_encode;
	rd->o->encode_ctx = &rd->tok;
	return 0;
}

static int on_record(json_t *rec, struct jsonl_reader *r, void *arg)
{
	struct reader *rd = arg;
	char err[256];
	int rc = sft_data_add(rd->d, rec, rd->o, err, sizeof err);

	json_decref(rec);
	if (rc < 0) {
		warn_msg("%s:%zu: %s", r->name, r->lineno, err);
		rd->bad = 1;
		return 1;
	}
	return 0;
}

static int save(struct sft_train *st, const char *out, const char *tok_dir)
{
	char err[512];
	if (sft_train_save(st, out, tok_dir, err, sizeof err) < 0) {
		warn_msg("%s", err);
		return -1;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The throughput figures of a step. Model FLOPs (man dice-sft, PERFORMANCE):
 * 6 x (matrix parameters of the layers) x rows (2n per sample) + 12 x L x NH x HD x sum n^2
 * (the query-key pairs the mask lets through, about n^2 of the (2n)^2); the embedding
 * gather and the lm_head (only on the masked rows) are not counted. Peak memory: the
 * backend's memory in use after the step (device memory on cuda: allocations only grow),
 * else the process's peak RSS. */
struct perf {
	double tok_s, flops, mfu, mem_mb, peak;
};

static void perf_of(struct perf *pf, const struct sft_train *st, const struct sft_step *s,
                    double dt_s)
{
	const struct model_config *c = &st->m->cfg;
	const struct ops *o = st->m->ops;
	double C = c->hidden_size, HD = c->head_dim, I = c->intermediate_size;
	double layer = (c->num_heads + c->num_kv_heads) * HD * C * 2 + 3 * I * C;
	size_t used = 0;
	struct rusage ru;

	memset(pf, 0, sizeof *pf);
	pf->tok_s = dt_s > 0 ? (double)s->tokens / dt_s : 0.0;
	pf->flops = 6.0 * layer * c->num_layers * 2.0 * (double)s->tokens +
	            12.0 * c->num_layers * c->num_heads * HD * s->attn_pairs;
	if (o->device_info)
		o->device_info(&used, &pf->peak);
	if (pf->peak > 0 && dt_s > 0)
		pf->mfu = pf->flops / dt_s / pf->peak;
	if (used) {
		pf->mem_mb = (double)used / (1024.0 * 1024.0);
	} else {
		getrusage(RUSAGE_SELF, &ru);
		pf->mem_mb = (double)ru.ru_maxrss / 1024.0;
	}
}

int main(int argc, char **argv)
{
	const char *model_dir = NULL, *out = NULL, *init = NULL, *tok_dir = NULL, *log_path = NULL;
	const char *device = util_env("DICE_DEVICE", "cpu");
	const char *dtype_name = NULL, *dump = NULL;
	long epochs = 3, max_steps = 0, batch_tokens = 16384, grad_accum = 1, max_len = 6144;
	long save_every = 0;
	unsigned long long seed = 42;
	double warmup = 0.03;
	int resume = 0, recompute = 0, think = 1, quiet = 0, ret = 0, opt;
	unsigned char given[256] = { 0 };       /* the options given, by letter */
	struct optim_opts oo;
	char err[512];

	util_set_progname(argv[0]);
	signal(SIGINT, on_signal);      /* see on_signal */
	signal(SIGTERM, on_signal);
	optim_defaults(&oo);
	while ((opt = cli_getopt(argc, argv, shortopts, longopts)) != -1) {
		if (opt > 0 && opt < (int)sizeof given)
			given[opt] = 1;
		switch (opt) {
		case 'm': model_dir = cli_nonempty(opt, "a checkpoint directory", optarg); break;
		case 'o': out = cli_nonempty('o', "a directory", optarg); break;
		case 'i': init = cli_nonempty(opt, "a config.json", optarg); break;
		case 't': tok_dir = cli_nonempty(opt, "a tokenizer directory", optarg); break;
		case 'e': epochs = cli_long("--epochs", optarg, 1, 1000000); break;
		case 'n': max_steps = cli_long("--max-steps", optarg, 0, 1L << 30); break;
		case 'l': oo.lr = (float)cli_double("--lr", optarg, 0, 10); break;
		case 'w':       /* a fraction below 1, else steps: 1.5 is neither */
			warmup = cli_double("--warmup", optarg, 0, 1e9);
			if (warmup >= 1 && warmup != floor(warmup))
				die_status(EXIT_STATUS_USAGE, "bad --warmup '%s' (want a fraction below "
				           "1 or a whole number of steps)", optarg);
			break;
		case 'S':
			if (optim_schedule_parse(optarg, &oo.schedule) < 0)
				die_status(EXIT_STATUS_USAGE, "bad --schedule '%s' (constant_with_warmup "
				           "or cosine)", optarg);
			break;
		case 'b': batch_tokens = cli_long("--batch-tokens", optarg, 1, 1L << 30); break;
		case 'a': grad_accum = cli_long("--grad-accum", optarg, 1, 1L << 20); break;
		case 'L': max_len = cli_long("--max-len", optarg, 1, 1L << 30); break;
		case 's': seed = (unsigned long long)cli_long("--seed", optarg, 0, 0x7fffffffffffffffL); break;
		case 'd': device = optarg; break;
		case 'D': dtype_name = optarg; break;
		case 'g': log_path = cli_nonempty(opt, "a file name", optarg); break;
		case 'k': save_every = cli_long("--save-every", optarg, 0, 1L << 30); break;
		case 'r': resume = 1; break;
		case 'R': recompute = 1; break;
		case 'T': think = 0; break;
		case '1': oo.beta1 = (float)cli_double("--beta1", optarg, 0, 0.999999); break;
		case '2': oo.beta2 = (float)cli_double("--beta2", optarg, 0, 0.999999999); break;
		case 'E': oo.eps = (float)cli_double("--adam-eps", optarg, 0, 1); break;
		case 'W': oo.weight_decay = (float)cli_double("--weight-decay", optarg, 0, 10); break;
		case 'c': oo.clip = (float)cli_double("--clip", optarg, 0, 1e9); break;
		case 'x': dump = cli_nonempty(opt, "a file name", optarg); break;
		case 'q': quiet = 1; break;
		case 'h': usage(0);
		case 'V': cli_version();
		default:
			usage(EXIT_STATUS_USAGE);
		}
	}
	if (init) {
		const char *o = cli_unread(longopts, given, sizeof given, init_reads);
		if (o)
			die_status(EXIT_STATUS_USAGE, "--%s has no effect with --init, which writes "
			           "a random checkpoint and exits (train it in a second run: -m DIR)", o);
		if (optind < argc)
			die_status(EXIT_STATUS_USAGE, "--init writes a random checkpoint and exits: "
			           "unexpected operand '%s' (train it in a second run: -m DIR)",
			           argv[optind]);
	}
	if (!out && !(dump && model_dir))
		die_status(EXIT_STATUS_USAGE, "-o OUT_DIR is required (where the checkpoint goes)");
	/* -o is written at the end: one that cannot be is said now, not after the training */
	if (!dump && checkpoint_dir_writable(out, err, sizeof err) < 0)
		die("%s", err);
	/* no output may be an input: -g and -x would empty it before it is read */
	cli_output_not_input(log_path, argv + optind, argc - optind);
	cli_output_not_input(dump, argv + optind, argc - optind);

	if (init) {                             /* a random checkpoint */
		struct model_config cfg;
		struct model_init mi;
		if (config_load(&cfg, init, err, sizeof err) < 0)
			die("%s", err);
		model_init_defaults(&mi);
		mi.seed = seed;
		mi.tokenizer_dir = tok_dir;
		if (checkpoint_init_random(out, &cfg, &mi, err, sizeof err) < 0)
			die("%s", err);
		if (!quiet)
			warn_msg("wrote a random %s model (%zu parameters, seed %llu) to %s",
			         cfg.model_type, config_nparams(&cfg), seed, out);
		return 0;
	}
	if (!model_dir && !resume)
		model_dir = util_env("DICE_MODEL", NULL);
	if (!model_dir && !resume)
		die_status(EXIT_STATUS_USAGE, "-m INIT_DIR (or DICE_MODEL) is required, or --resume");

	const struct ops *ops = ops_get(device);
	if (!ops)
		die_status(EXIT_STATUS_USAGE, "no device '%s' %s", device, ops_missing(device));
	/* the tokenizer is loaded now, as dice-rl's: one named with -t that is not there, or
	 * one (-t's or the model directory's) that does not load, stops the run before
	 * anything is read; where the model directory has none, text records are bad */
	struct sft_opts so = { .think = think };
	const char *tok_opt = tok_dir ? "--tokenizer" : NULL;
	if (!tok_dir)
		tok_dir = model_dir ? model_dir : out;
	struct reader rd = { .o = &so, .tok_dir = tok_dir };
	if (reader_tokenizer(&rd, tok_opt, err, sizeof err) < 0)
		die("%s", err);
	/* where there is none, each well-formed text record says so (one line each) */
	char *no_tok = xasprintf("text record but no tokenizer (none in '%s'; -t DIR gives one)",
	                         tok_dir);
	so.no_encode = no_tok;
	enum dice_dtype dt = DICE_F32;
	if (dtype_name && config_dtype_arg(dtype_name, &dt) < 0)
		die_status(EXIT_STATUS_USAGE, "bad --dtype '%s' (fp32, bf16)", dtype_name);
	if (dt == DICE_F16)
		die_status(EXIT_STATUS_USAGE, "--dtype %s: training computes in float32 or bf16",
		           dtype_name);
	if (dt == DICE_BF16 && strcmp(device, "cuda"))
		die_status(EXIT_STATUS_USAGE, "--dtype %s needs --device cuda", dtype_name);

	/* the model: from -m, or from -o when resuming */
	const char *load_dir = resume ? out : model_dir;
	struct checkpoint ck;
	struct model m;
	if (checkpoint_open(&ck, load_dir, err, sizeof err) < 0)
		die("%s", err);
	if (model_init(&m, &ck.cfg, &ck.w, ops, DICE_F32) < 0)
		die("%s: cannot set up the model", load_dir);
	checkpoint_close(&ck);

	/* the data */
	struct sft_data data;
	const struct model_config *c = &m.cfg;
	so.block = c->block_size;
	so.max_len = (int)max_len;
	so.vocab = c->vocab_size;
	so.pad_id = c->pad_token_id >= 0 ? c->pad_token_id :
	            c->eos_token_id >= 0 ? c->eos_token_id : 151643;
	rd.d = &data;
	sft_data_init(&data);
	if (jsonl_each(argv + optind, argc - optind, on_record, NULL, &rd))
		ret = 1;
	tokenizer_free(&rd.tok);
	free(no_tok);
	if (!quiet)
		warn_msg("%zu samples (%zu tokens), %zu dropped longer than --max-len %ld; seed %llu",
		         data.n, data.tokens, data.dropped, max_len, seed);

	struct sft_train st;
	if (!data.n && data.dropped)
		die("no training samples: all %zu longer than --max-len %ld", data.dropped, max_len);
	if (!data.n)
		die("no training samples");
	if (sft_train_init(&st, &m, &data, &oo, warmup, seed, (size_t)batch_tokens,
	                   (int)grad_accum, (int)epochs, max_steps, recompute) < 0)
		exit(EXIT_STATUS_BAD);          /* said why: a backend that cannot train */
	if (resume && sft_train_resume(&st, out, err, sizeof err) < 0)
		die("%s", err);
	if (dt == DICE_BF16 && sft_train_set_bf16(&st) < 0)
		die("cannot set up bf16 training");

	if (dump) {
		if (sft_train_dump(&st, dump, err, sizeof err) < 0)
			die("%s", err);
		sft_train_free(&st);
		sft_data_free(&data);
		model_free(&m);
		return ret;
	}

	FILE *logf = NULL;
	int log_bad = 0;
	if (log_path && !(logf = fopen(log_path, resume ? "a" : "w")))
		die("cannot open '%s':", log_path);
	const char *copy_tok = checkpoint_has_tokenizer(tok_dir) ? tok_dir : NULL;
	double t0 = now();
	training = 1;
	while (sft_train_more(&st) && !stop) {
		struct sft_step s;
		double t1 = now();
		if (sft_train_step(&st, &s) < 0)
			die("training step %d failed", st.op.step + 1);
		double dt_s = now() - t1;
		struct perf pf;
		perf_of(&pf, &st, &s, dt_s);
		if (logf && !log_bad) {         /* a failed write: reported once, training goes on */
			json_t *j = json_pack("{s:i, s:i, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f}",
			                      "step", st.op.step, "epoch", st.epoch, "loss", s.loss, "lr",
			                      (double)s.lr, "grad_norm", s.grad_norm, "tokens",
			                      (json_int_t)s.tokens, "tokens_per_s", pf.tok_s,
			                      "elapsed_s", now() - t0, "peak_mem_mb", pf.mem_mb,
			                      "tflops", pf.flops / (dt_s > 0 ? dt_s : 1) / 1e12,
			                      "step_s", dt_s);
			if (pf.peak > 0)
				json_object_set_new(j, "mfu", json_real(pf.mfu));
			if (jsonl_log(logf, log_path, j) < 0)
				log_bad = 1, ret = 1;
			json_decref(j);
		}
		if (!quiet) {
			fprintf(stderr, "dice-sft: step %d/%ld epoch %d loss %.4f lr %.3g grad_norm "
			        "%.3g tokens/s %.0f", st.op.step, st.total_steps, st.epoch, s.loss,
			        (double)s.lr, s.grad_norm, pf.tok_s);
			if (pf.peak > 0)
				fprintf(stderr, " mfu %.1f%% mem %.0f MiB", 100 * pf.mfu, pf.mem_mb);
			fputc('\n', stderr);
		}
		if (save_every && st.op.step % save_every == 0 && sft_train_more(&st) &&
		    save(&st, out, copy_tok) < 0)
			ret = 1;
	}
	int unsaved = save(&st, out, copy_tok) < 0;
	if (unsaved)
		ret = 1;
	if (stop) {             /* the run is not done: no success for the caller's next step */
		if (!unsaved)
			warn_msg("interrupted: saved step %d to %s; continue with --resume",
			         st.op.step, out);
		ret = 128 + stop;
	}
	if (logf && util_fshut(logf, log_path))
		ret = 1;
	sft_train_free(&st);
	sft_data_free(&data);
	model_free(&m);
	if (util_fshut(stdout, "stdout"))
		ret = 1;
	return ret;
}
