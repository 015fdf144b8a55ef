/* tmpdir.h: a scratch folder for a library test (fixtures are written at run time).
 *
 *     tmpdir_make("dice-test-x")      creates /tmp/dice-test-x-XXXXXX; 0 or -1
 *     char *p = tmpdir_path("f")      xmalloc'ed "<tmpdir>/f"
 *     tmpdir_write("f", "text")       writes a file there
 *     tmpdir_remove()                 rm -rf the folder (at the end of main)
 * Include after util.h. */
#ifndef DICE_TEST_TMPDIR_H
#define DICE_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

static char tmpdir[64];

static inline int tmpdir_make(const char *prefix)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/%s-XXXXXX", prefix);
	return mkdtemp(tmpdir) ? 0 : -1;
}

static inline char *tmpdir_path(const char *name)
{
	return xasprintf("%s/%s", tmpdir, name);
}

static inline void tmpdir_write(const char *name, const char *text)
{
	char *p = tmpdir_path(name);
	FILE *fp = fopen(p, "wb");

	if (fp) {
		fputs(text, fp);
		fclose(fp);
	}
	free(p);
}

static inline void tmpdir_remove(void)
{
	char *cmd = xasprintf("rm -rf '%s'", tmpdir);

	if (system(cmd) != 0)
		printf("# cannot remove %s\n", tmpdir);
	free(cmd);
}

#endif
