/* deceive-check: find kernels that bypass their own CUDA code (SPEC §8 rules, lib/deceive).
 * Reads kernel records (JSONL) or .py files, writes every record back with a `deceive`
 * object. Options and the main loop only; the rules live in lib/deceive.c. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "deceive.h"
#include "extract.h"
#include "input.h"
#include "jsonl.h"
#include "util.h"

static const char usage_text[] =
	"usage: deceive-check [options] [file.jsonl | file.py | -]...\n"
	"Check kernel records (or .py files) for deception; write each record with a `deceive` object.\n"
	"  -d, --drop          write only the records that are not deceptive\n"
	"  -x, --rejects FILE  with --drop, write the deceptive records (with `deceive`) to FILE\n"
	"                      ('-': stdout, with -o FILE)\n"
	"  -s, --strict        exit 1 when any record is deceptive\n"
	"  -e, --explain       print findings on stderr as `where:line: rule: message`\n"
	"                      (where: the record's id, else file:record-line; line: the kernel's)\n"
	"  -r, --rules LIST    run only these rules (comma-separated names)\n"
	"  -l, --list-rules    print the rules (name, severity, description; those of -r\n"
	"                      only, when given) and exit\n"
	"  -f, --field NAME    take the kernel from field NAME (its code block if fenced;\n"
	"                      default: kernel, else completion)\n"
	"  -R, --ref FILE      reference source for records without a `ref` field (and .py files)\n"
	"  -o, --output FILE   write records to FILE instead of stdout\n"
	"  -u, --unbuffered    flush after every record\n"
	"  -h, --help          print this help and exit\n"
	"  -V, --version       print the version and exit\n";

static const struct option long_opts[] = {
	{ "drop", no_argument, NULL, 'd' },
	{ "rejects", required_argument, NULL, 'x' },
	{ "strict", no_argument, NULL, 's' },
	{ "explain", no_argument, NULL, 'e' },
	{ "rules", required_argument, NULL, 'r' },
	{ "list-rules", no_argument, NULL, 'l' },
	{ "field", required_argument, NULL, 'f' },
	{ "ref", required_argument, NULL, 'R' },
	{ "output", required_argument, NULL, 'o' },
	{ "unbuffered", no_argument, NULL, 'u' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct state {
	struct deceive_checker *checker;
	struct jsonl_writer w, rw;     /* rw: --rejects (rw.fp NULL without it) */
	const char *field;
	char *ref;                      /* --ref FILE contents, or NULL */
	int drop, explain;
	long records, deceptive, missing, dropped;
};

static _Noreturn void usage_error(void)
{
	fputs("usage: deceive-check [-dselu] [-x rejects] [-r rules] [-f field] [-R ref.py] [-o file]"
	      " [file ...]\n", stderr);
	exit(EXIT_STATUS_USAGE);
}

static void explain(const struct deceive_result *res, const char *where)
{
	for (size_t i = 0; i < res->n; i++)
		fprintf(stderr, "%s:%d: %s: %s\n", where, res->findings[i].line, res->findings[i].rule,
		        res->findings[i].message);
}

/* Check one record; line/len is its raw text for pass-through (NULL: serialise rec); where
 * names it in --explain's lines (its id, else loc), loc in warnings (file:line, or the file). */
static int check_record(struct state *st, json_t *rec, const char *line, size_t len,
                        const char *where, const char *loc)
{
	struct jsonl_writer *w = &st->w;
	const char *from, *ref = json_get_str(rec, "ref");
	json_t *ref_v = json_get_set(rec, "ref");
	/* a `ref` of another type than a string (a null one is absent) is the record's error, as
	 * for `kernel`: checking without it would miss the rules that compare with it */
	int ref_bad = ref_v && !json_is_string(ref_v);
	char *kernel = ref_bad ? NULL : extract_record_kernel(rec, st->field, &from);
	struct deceive_result res;
	json_t *obj;
	int bad = 0;

	if (!ref)
		ref = st->ref;
	st->records++;
	if (!kernel) {
		char msg[256];
		if (ref_bad)
			snprintf(msg, sizeof msg, "'ref' is not a string");
		else
			extract_record_why(rec, st->field, from, msg, sizeof msg);
		warn_msg("%s: %s", loc, msg);
		obj = json_pack("{s:b, s:[], s:s}", "deceptive", 0, "findings", "error", msg);
		st->missing++;
		bad = 1;
	} else {
		deceive_check(st->checker, kernel, strlen(kernel), ref, ref ? strlen(ref) : 0, &res);
		if (st->explain)
			explain(&res, where);
		obj = deceive_result_json(&res);
		if (res.deceptive)
			st->deceptive++;
		if (res.deceptive && st->drop) {
			st->dropped++;
			w = &st->rw;
		}
		deceive_result_free(&res);
		free(kernel);
	}
	if (w->fp) {
		if (line)
			jsonl_write_added(w, line, len, rec, "deceive", obj);
		else {
			json_object_set(rec, "deceive", obj);
			jsonl_write(w, rec);
		}
	}
	json_decref(obj);
	return bad;
}

/* a write to the output or the rejects failed (a closed pipe, a full disk) */
static int output_gone(const struct state *st)
{
	return st->w.failed || st->rw.failed;
}

/* An id that can name a record in a one-line message: not empty, no control characters (a
 * newline in it would split --explain's line, and could forge one) */
static int id_usable(const char *id)
{
	if (!id || !*id)
		return 0;
	for (; *id; id++)
		if ((unsigned char)*id < 0x20 || *id == 0x7f)
			return 0;
	return 1;
}

static int on_record(json_t *rec, struct jsonl_reader *r, void *arg)
{
	struct state *st = arg;
	if (output_gone(st)) {                  /* stop reading */
		json_decref(rec);
		return -1;
	}
	const char *id = json_get_str(rec, "id");
	char *loc = xasprintf("%s:%zu", r->name, r->lineno);
	int bad = check_record(st, rec, r->line, r->len, id_usable(id) ? id : loc, loc);

	free(loc);
	json_decref(rec);
	return bad;
}

/* A malformed line: reported, and passed through in its place (never lost, also with --drop)
 * as the record {"source", "line", "error", "text"} that kbench-eval writes for one, with
 * {"deceptive": false, "findings": [], "error": "bad_record", "message": reason} */
static void on_bad(struct jsonl_reader *r, void *arg)
{
	struct state *st = arg;
	json_t *rec, *obj;

	jsonl_report_bad(r);
	if (output_gone(st))
		return;
	st->records++;
	rec = jsonl_bad_record(r);
	obj = json_pack("{s:b, s:[], s:s, s:s}", "deceptive", 0, "findings", "error", "bad_record",
	                "message", r->err);
	json_object_set_new(rec, "deceive", obj);
	jsonl_write(&st->w, rec);
	json_decref(rec);
}

static int py_file(const char *name, const char *data, size_t len, void *arg)
{
	struct state *st = arg;
	struct buf b;
	json_t *rec;
	int bad;

	if (output_gone(st))
		return 1;
	buf_init(&b);
	utf8_repair(&b, data, len);
	rec = json_object();
	json_object_set_new(rec, "id", json_string(name));
	json_object_set_new(rec, "kernel", json_stringn(b.p, b.len));
	bad = check_record(st, rec, NULL, 0, name, name);
	json_decref(rec);
	buf_free(&b);
	return bad ? 2 : 0;
}

int main(int argc, char **argv)
{
	struct state st;
	const char *rules = NULL, *output = NULL, *rejects = NULL, *bad_rule = NULL;
	char *ref_path = NULL;
	int strict = 0, unbuffered = 0, list = 0, c, ret = 0;
	FILE *out, *rej = NULL;

	util_set_progname(argv[0]);
	memset(&st, 0, sizeof st);
	while ((c = cli_getopt(argc, argv, ":dx:ser:lf:R:o:uhV", long_opts)) != -1) {
		switch (c) {
		case 'd': st.drop = 1; break;
		case 'x': rejects = cli_nonempty(c, "a file name", optarg); break;
		case 's': strict = 1; break;
		case 'e': st.explain = 1; break;
		case 'r': rules = optarg; break;
		case 'l': list = 1; break;
		case 'f': st.field = cli_nonempty(c, "a field name", optarg); break;
		case 'R':
			cli_nonempty(c, "a file name", optarg);
			ref_path = optarg;
			break;
		case 'o': output = cli_output_file(c, optarg); break;
		case 'u': unbuffered = 1; break;
		case 'h':
			fputs(usage_text, stdout);
			return util_fshut(stdout, "stdout") ? 1 : 0;
		case 'V': cli_version();
		default:
			usage_error();
		}
	}
	st.checker = deceive_checker_new(rules, &bad_rule);
	if (!st.checker) {
		if (*bad_rule)
			warn_msg("unknown rule '%s' (deceive-check --list-rules lists them)", bad_rule);
		else
			warn_msg("bad --rules '%s' (want rule names, comma-separated, none empty; "
			         "deceive-check --list-rules lists them)", rules);
		usage_error();
	}
	if (list) {     /* the rules -r selects (all by default), after every option is read */
		if (optind < argc) {
			warn_msg("--list-rules takes no operands");
			usage_error();
		}
		for (int k = 0; deceive_rules[k].name; k++)
			if (deceive_checker_runs(st.checker, k))
				printf("%-20s %-10s %s\n", deceive_rules[k].name,
				       deceive_rules[k].severity == DECEIVE_DECEPTIVE ? "deceptive" : "warn",
				       deceive_rules[k].description);
		deceive_checker_free(st.checker);
		free(st.ref);
		return util_fshut(stdout, "stdout") ? 1 : 0;
	}
	if (rejects && !st.drop) {
		warn_msg("--rejects needs --drop (without it every record is written)");
		usage_error();
	}
	/* "-" for --rejects is standard output, as for -o */
	const char *outs_opt[] = { "--output", rejects ? "--rejects" : NULL };
	const char *outs[] = { output, cli_is_stdout(rejects) ? NULL : rejects };
	for (int i = 0; i < 2; i++) {
		cli_output_not_input(outs[i], argv + optind, argc - optind);
		if (ref_path)   /* --ref is an input too */
			cli_output_not_input(outs[i], &ref_path, 1);
	}
	cli_outputs_distinct(2, outs_opt, outs);
	if (ref_path && input_stdin_twice("--ref", ref_path, argv + optind, argc - optind))
		usage_error();
	if (ref_path && !(st.ref = input_one_file(ref_path, "--ref", 1, NULL, NULL)))
		exit(EXIT_STATUS_BAD);          /* said already */
	out = cli_open_out(output);
	if (rejects)
		rej = cli_open_out(rejects);
	jsonl_writer_init(&st.w, out, cli_out_name(output), unbuffered);
	if (rej)
		jsonl_writer_init(&st.rw, rej, cli_out_name(rejects), unbuffered);

	/* operands in order: .py files are records of their own, the rest JSONL */
	char **ops = argv + optind;
	int n = argc - optind;
	if (n == 0) {
		ret |= jsonl_each(NULL, 0, on_record, on_bad, &st);
	}
	for (int i = 0; i < n && !output_gone(&st); i++) {
		if (input_is_py(ops[i])) {
			if (input_each_py(ops[i], py_file, &st) != 0)
				ret = 1;
		} else {
			ret |= jsonl_each(ops + i, 1, on_record, on_bad, &st);
		}
	}
	if (strict && st.deceptive)
		ret = 1;
	if (st.dropped && !rej)
		warn_msg("dropped %ld deceptive record%s of %ld (--rejects FILE keeps them)", st.dropped,
		         st.dropped == 1 ? "" : "s", st.records);
	if (st.w.failed || st.rw.failed)
		ret = 1;
	jsonl_writer_free(&st.w);
	if (rej) {
		jsonl_writer_free(&st.rw);
		if (cli_close_out(rej, rejects))
			ret = 1;
	}
	deceive_checker_free(st.checker);
	free(st.ref);
	if (cli_close_out(out, output))
		ret = 1;
	if ((out == stdout || rej == stdout) && util_fshut(stdout, "stdout"))
		ret = 1;
	return ret;
}
