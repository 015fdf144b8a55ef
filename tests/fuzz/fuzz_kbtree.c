/* fuzz_kbtree: libFuzzer target for the KernelBench problem reader (kbench_tree_load in
 * lib/kbench.c over lib/input.c), which kbench-eval -k, dice-sample --kernelbench and dice-rl
 * run on a checkout's archive. The input is the archive's bytes (a .tar, .tar.gz, .zip, or
 * anything), written to a temporary file. Invariants: loaded, the tree holds at least one
 * problem, in strictly increasing (level, number) order; each problem's path is
 * "levelN/<num>_<Name>.py" naming its own level and number, found by kbench_tree_find (by
 * path, by path without ".py", by "levelN/NUM") and kbench_tree_find_num, and its record
 * has the id of its path without ".py" and its source; kbench_tree_select with no sets
 * takes every problem. Build and run: sh tests/fuzz/run.sh kbtree (seed it with small
 * .tar.gz and .zip archives of tests/fixtures/kernelbench). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kbench.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void cleanup(void)
{
	unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd;

	(void)argc, (void)argv;
	snprintf(path, sizeof path, "/tmp/fuzz_kbtree.XXXXXX");
	if ((fd = mkstemp(path)) < 0)
		abort();
	close(fd);
	atexit(cleanup);
	return 0;
}

static void check_tree(const struct kbench_tree *t)
{
	const struct kbench_problem **sel;
	char name[64];

	if (!t->n)
		abort();
	for (size_t i = 0; i < t->n; i++) {
		const struct kbench_problem *p = &t->p[i];
		size_t n = strlen(p->path);
		int lv, nm;

		if (i && (p->level < t->p[i - 1].level ||
		          (p->level == t->p[i - 1].level && p->num <= t->p[i - 1].num)))
			abort();
		if (kbench_parse_path(p->path, &lv, &nm) < 0 || lv != p->level || nm != p->num ||
		    strncmp(p->path, "level", 5) || !p->src)
			abort();
		if (kbench_tree_find(t, p->path) != p || kbench_tree_find_num(t, lv, nm) != p)
			abort();
		char *bare = xstrndup(p->path, n - 3);
		snprintf(name, sizeof name, "level%d/%d", lv, nm);
		if (kbench_tree_find(t, bare) != p || kbench_tree_find(t, name) != p)
			abort();
		json_t *rec = kbench_problem_record(p);
		if (strcmp(json_string_value(json_object_get(rec, "id")), bare) ||
		    strcmp(json_string_value(json_object_get(rec, "ref")), p->src) ||
		    json_integer_value(json_object_get(rec, "level")) != lv)
			abort();
		json_decref(rec);
		free(bare);
	}
	if (kbench_tree_select(t, NULL, NULL, &sel) != t->n)
		abort();
	free(sel);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kbench_tree t;
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(data, 1, size, f) != size || fclose(f))
		abort();
	if (kbench_tree_load(&t, path) == 0) {
		check_tree(&t);
		kbench_tree_free(&t);
	}
	return 0;
}
