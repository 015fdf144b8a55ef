/* test_checkpoint_signal: checkpoint_dir_writable's trial (a file made in the directory and
 * removed, or the directory made and removed) leaves nothing behind when a signal comes
 * between the making and the removing, as dice-sft's and dice-rl's -o check did where the
 * signal's handler exits at once.
 *
 * This file's unlink and rmdir take the place of libc's for the whole program (the library's
 * calls included): when armed, they raise SIGTERM before they remove, and the handler notes
 * whether the trial's file or directory is still there when it runs. Where the signal is held
 * off until the removal is done, it is not. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "checkpoint.h"
#include "test.h"

static int armed;
static char trial[PATH_MAX];
static volatile sig_atomic_t handled, left;

static void on_term(int sig)
{
	struct stat sb;

	(void)sig;
	handled = 1;
	left = lstat(trial, &sb) == 0;
}

static void arm(const char *path)
{
	if (!armed)
		return;
	armed = 0;
	snprintf(trial, sizeof trial, "%s", path);
	raise(SIGTERM);
}

int unlink(const char *path)
{
	arm(path);
	return unlinkat(AT_FDCWD, path, 0);
}

int rmdir(const char *path)
{
	arm(path);
	return unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
}

static void check_mask(const char *what)
{
	sigset_t cur;

	sigprocmask(SIG_BLOCK, NULL, &cur);
	CHECK(!sigismember(&cur, SIGTERM) && !sigismember(&cur, SIGINT), what);
}

int main(void)
{
	char base[] = "/tmp/dice-test-sig-XXXXXX", err[256];
	struct sigaction sa;
	struct stat sb;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	if (!mkdtemp(base))
		return 1;

	/* a directory there: a trial file made in it and removed */
	armed = 1, handled = 0, left = 1;
	CHECK(checkpoint_dir_writable(base, err, sizeof err) == 0, "existing directory: writable");
	CHECK(handled && !armed, "the signal came during the trial file's removal");
	CHECK(!left, "the trial file was gone when the handler ran");
	check_mask("the signal mask is as it was");

	/* no directory there: it made and removed */
	char *sub = malloc(strlen(base) + 8);
	sprintf(sub, "%s/new", base);
	armed = 1, handled = 0, left = 1;
	CHECK(checkpoint_dir_writable(sub, err, sizeof err) == 0, "directory to make: writable");
	CHECK(handled && !armed, "the signal came during the trial directory's removal");
	CHECK(!left, "the trial directory was gone when the handler ran");
	CHECK(stat(sub, &sb) < 0 && errno == ENOENT, "no directory left");
	check_mask("the signal mask is as it was");

	/* a failed trial restores the mask too, with the error's errno */
	sprintf(sub, "%s/a/b", base);
	CHECK(checkpoint_dir_writable(sub, err, sizeof err) < 0 && strstr(err, "No such file"),
	      "two levels to make: not writable, the reason said");
	check_mask("the signal mask is as it was after a failure");

	free(sub);
	rmdir(base);
	CHECK(stat(base, &sb) < 0, "the test directory removed (nothing left in it)");
	return test_done();
}
