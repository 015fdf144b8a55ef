/* cuke-filter: CuKe dataset curation. Reads dataset records (any compression or archive),
 * keeps those that pass the filters, and writes them back unchanged but for an added `cuke`
 * object; every other record goes to --rejects with its reason. The logic is in lib/cuke.c;
 * this file holds the options and the read loop. */
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuke.h"
#include "input.h"
#include "jsonl.h"
#include "tokenizer.h"
#include "util.h"

static const char usage_text[] =
	"usage: cuke-filter [options] [file ...]\n"
	"  -m, --min-speedup X     keep records with speedup >= X\n"
	"  -M, --max-speedup X     keep records with speedup <= X\n"
	"  -c, --require-correct   keep only records whose correct (or eval.correct) is true\n"
	"  -d, --drop-deceptive    drop kernels the deceive rules find deceptive\n"
	"  -u, --dedupe            drop records whose normalised ref+kernel was seen before\n"
	"  -k, --dedupe-key KEY    what --dedupe compares: pair (ref+kernel, default) or ref\n"
	"  -t, --max-tokens N      drop records whose SFT prompt+response is over N tokens\n"
	"  -T, --tokenizer DIR     checkpoint (tokenizer.json) for -t; default $DICE_MODEL\n"
	"  -l, --level N[,N]       keep references of these levels (1 op, 2 chain, 3 model)\n"
	"  -C, --classify          write the computed level as cuke.level\n"
	"  -S, --sort-level        emit level 1 records, then 2, then 3 (stable)\n"
	"  -p, --to-sft            write SFT records {id, prompt, response} (and level with\n"
	"                          -C, -l or -S)\n"
	"  -i, --to-infill         write infill records {id, level, ref, kernel, prefix, middle,\n"
	"                          suffix}\n"
	"  -r, --rejects FILE      write every record not kept there, with cuke.rejected\n"
	"                          ('-': stdout, with -o FILE)\n"
	"  -s, --stats             print counts by reason and the speedup histogram on stderr\n"
	"  -j, --stats-json FILE   write the same summary as JSON to FILE\n"
	"                          ('-': stdout, with -o FILE)\n"
	"  -o, --output FILE       write kept records to FILE instead of stdout\n"
	"  -U, --unbuffered        flush after every record\n"
	"  -P, --parse-all         parse every record with jansson (no raw-line fast path)\n"
	"  -h, --help              show this help\n"
	"  -V, --version           show the version\n";

static const struct option longopts[] = {
	{ "min-speedup", required_argument, NULL, 'm' },
	{ "max-speedup", required_argument, NULL, 'M' },
	{ "require-correct", no_argument, NULL, 'c' },
	{ "drop-deceptive", no_argument, NULL, 'd' },
	{ "dedupe", no_argument, NULL, 'u' },
	{ "dedupe-key", required_argument, NULL, 'k' },
	{ "max-tokens", required_argument, NULL, 't' },
	{ "tokenizer", required_argument, NULL, 'T' },
	{ "level", required_argument, NULL, 'l' },
	{ "classify", no_argument, NULL, 'C' },
	{ "sort-level", no_argument, NULL, 'S' },
	{ "to-sft", no_argument, NULL, 'p' },
	{ "to-infill", no_argument, NULL, 'i' },
	{ "rejects", required_argument, NULL, 'r' },
	{ "stats", no_argument, NULL, 's' },
	{ "stats-json", required_argument, NULL, 'j' },
	{ "output", required_argument, NULL, 'o' },
	{ "unbuffered", no_argument, NULL, 'U' },
	{ "parse-all", no_argument, NULL, 'P' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
static const char shortopts[] = ":m:M:cduk:t:T:l:CSpir:sj:o:UPhV";

static _Noreturn void usage(int status)
{
	cli_usage(status, "cuke-filter [options] [file ...]", usage_text);
}

/* "1,3" -> bits 1 and 3 */
static unsigned parse_levels(const char *arg)
{
	unsigned bits = 0;
	long *v;
	int n = parse_long_list(arg, 1, 3, &v);

	if (n < 0)
		die_status(EXIT_STATUS_USAGE, "bad --level '%s': levels are 1, 2 and 3", arg);
	for (int i = 0; i < n; i++)
		bits |= 1u << v[i];
	free(v);
	return bits;
}

/* a write to the output or the rejects failed (a closed pipe, a full disk): stop reading */
static int sink_gone(const struct cuke_sink *k)
{
	return k->out->failed || (k->rejects && k->rejects->failed);
}

int main(int argc, char **argv)
{
	struct cuke_config cfg = { 0 };
	const char *rejects_path = NULL, *stats_json = NULL, *out_path = NULL;
	int stats = 0, unbuffered = 0, ret = 0, opt;
	enum cuke_format f;
	char err[256];

	util_set_progname(argv[0]);
	while ((opt = cli_getopt(argc, argv, shortopts, longopts)) != -1) {
		switch (opt) {
		case 'm':
			cfg.min_speedup = cli_double("--min-speedup", optarg, 0, 1e300);
			cfg.has_min = 1;
			break;
		case 'M':
			cfg.max_speedup = cli_double("--max-speedup", optarg, 0, 1e300);
			cfg.has_max = 1;
			break;
		case 'c': cfg.require_correct = 1; break;
		case 'd': cfg.drop_deceptive = 1; break;
		case 'u':
			if (!cfg.dedupe)
				cfg.dedupe = CUKE_DEDUPE_ALL;
			break;
		case 'k':
			if (!strcmp(optarg, "ref"))
				cfg.dedupe = CUKE_DEDUPE_REF;
			else if (!strcmp(optarg, "pair"))
				cfg.dedupe = CUKE_DEDUPE_ALL;
			else
				die_status(EXIT_STATUS_USAGE, "bad --dedupe-key '%s': use pair or ref", optarg);
			break;
		case 't':
			cfg.max_tokens = cli_long("--max-tokens", optarg, 1, LONG_MAX);
			break;
		case 'T': cfg.tokenizer = cli_nonempty(opt, "a file name", optarg); break;
		case 'l': cfg.levels = parse_levels(optarg); break;
		case 'C': cfg.classify = 1; break;
		case 'S': cfg.sort_level = 1; break;
		case 'p':
		case 'i':
			f = opt == 'p' ? CUKE_OUT_SFT : CUKE_OUT_INFILL;
			if (cfg.format != CUKE_OUT_RECORDS && cfg.format != f)
				die_status(EXIT_STATUS_USAGE, "--to-sft and --to-infill exclude each other");
			cfg.format = f;
			break;
		case 'r': rejects_path = cli_nonempty(opt, "a file name", optarg); break;
		case 's': stats = 1; break;
		case 'j': stats_json = cli_nonempty(opt, "a file name", optarg); break;
		case 'o': out_path = cli_output_file(opt, optarg); break;
		case 'U': unbuffered = 1; break;
		case 'P': cfg.no_fast = 1; break;
		case 'h': usage(0);
		case 'V': cli_version();
		default:
			usage(EXIT_STATUS_USAGE);
		}
	}

	if (cfg.has_min && cfg.has_max && cfg.min_speedup > cfg.max_speedup)
		die_status(EXIT_STATUS_USAGE, "--min-speedup %g is above --max-speedup %g: nothing "
		           "would be kept", cfg.min_speedup, cfg.max_speedup);
	if (cfg.max_tokens > 0 && !cfg.tokenizer && !(cfg.tokenizer = util_env("DICE_MODEL", NULL)))
		die_status(EXIT_STATUS_USAGE, "--max-tokens needs --tokenizer DIR (or DICE_MODEL)");
	if (cfg.tokenizer && cfg.max_tokens <= 0)
		die_status(EXIT_STATUS_USAGE, "--tokenizer is only used with --max-tokens N");
	const char *outs_opt[] = { "--output", rejects_path ? "--rejects" : NULL,
	                           stats_json ? "--stats-json" : NULL };
	const char *outs[] = { out_path, cli_is_stdout(rejects_path) ? NULL : rejects_path,
	                       cli_is_stdout(stats_json) ? NULL : stats_json };
	char *tok[2] = { NULL, NULL };  /* the tokenizer's files are inputs too */
	if (cfg.tokenizer)
		tokenizer_paths(cfg.tokenizer, tok);
	for (int i = 0; i < 3; i++) {
		cli_output_not_input(outs[i], argv + optind, argc - optind);
		if (cfg.tokenizer)
			cli_output_not_input(outs[i], tok, 2);
	}
	free(tok[0]);
	free(tok[1]);
	cli_outputs_distinct(3, outs_opt, outs);
	struct cuke *c = cuke_new(&cfg, err, sizeof err);
	if (!c)
		die("%s", err);
	FILE *out = cli_open_out(out_path);
	FILE *rej = rejects_path ? cli_open_out(rejects_path) : NULL;
	FILE *sj = stats_json ? cli_open_out(stats_json) : NULL;   /* before the run, not after */
	/* records are often bigger than stdio's default buffer: write in 64 KiB pieces */
	static char obuf[1 << 16], rbuf[1 << 16];
	if (!unbuffered) {
		setvbuf(out, obuf, _IOFBF, sizeof obuf);
		if (rej)
			setvbuf(rej, rbuf, _IOFBF, sizeof rbuf);
	}
	struct jsonl_writer wout, wrej;
	struct cuke_sink sink = { &wout, rej ? &wrej : NULL };
	jsonl_writer_init(&wout, out, cli_out_name(out_path), unbuffered);
	if (rej)
		jsonl_writer_init(&wrej, rej, cli_out_name(rejects_path), unbuffered);

	char **ops = argv + optind, *dash[] = { "-" };
	int nops = argc - optind;
	if (!nops) {
		ops = dash;
		nops = 1;
	}
	for (int i = 0; i < nops && !sink_gone(&sink); i++) {
		struct input in;
		struct jsonl_reader r;
		int k, s;
		if (input_open(&in, ops[i]) < 0) {
			ret = 1;
			continue;
		}
		while ((k = input_next(&in)) > 0) {
			jsonl_reader_init(&r, in.fp, in.name);
			s = JSONL_EOF;
			while (!sink_gone(&sink) && (s = jsonl_read_line(&r)) == JSONL_RECORD)
				if (cuke_line(c, &r, &sink) == CUKE_MALFORMED)
					ret = 1;
			if (s == JSONL_IOERR) {
				warn_msg("%s:%zu: read error: %s", r.name, r.lineno + 1,
				         input_error(&in));
				ret = 1;
			}
			jsonl_reader_free(&r);
		}
		if (k < 0)
			ret = 1;
		input_close(&in);
	}
	if (cuke_finish(c, &sink) < 0)
		ret = 1;

	const struct cuke_stats *st = cuke_stats(c);
	if (st->kept + cuke_rejected_total(st) != st->read)
		BUG("kept %zu + rejected %zu != read %zu", st->kept, cuke_rejected_total(st), st->read);
	if (stats)
		cuke_stats_print(st, stderr);
	if (stats_json) {
		json_t *j = cuke_stats_json(st);
		char *text = jsonl_dumps(j);
		int bad = fputs(text, sj) == EOF || fputc('\n', sj) == EOF;
		free(text);
		if (bad)
			ret = 1;        /* util_fshut says why */
		if (cli_close_out(sj, stats_json))
			ret = 1;
		json_decref(j);
	}
	if (wout.failed || (rej && wrej.failed))
		ret = 1;
	jsonl_writer_free(&wout);
	if (rej) {
		jsonl_writer_free(&wrej);
		if (cli_close_out(rej, rejects_path))
			ret = 1;
	}
	cuke_free(c);
	if (cli_close_out(out, out_path))
		ret = 1;
	if ((out == stdout || rej == stdout || sj == stdout) && util_fshut(stdout, "stdout"))
		ret = 1;
	return ret;
}
