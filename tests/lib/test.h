/* test.h: a tiny TAP harness for the library tests (tests/lib/test_<mod>.c).
 *
 *     CHECK(cond, "what")           one TAP line: ok / not ok
 *     CHECK_STR(got, want, "what")  string equality, shows both on failure
 *     CHECK_NEAR(got, want, tol, "what")
 *     return test_done();           exit status: 0 when every check passed
 *
 * tests/run.sh counts the ok / not ok lines. */
#ifndef DICE_TEST_H
#define DICE_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int test_n, test_failed;

static inline int test_check(int ok, const char *file, int line, const char *what)
{
	test_n++;
	if (ok) {
		printf("ok %d - %s\n", test_n, what);
	} else {
		test_failed++;
		printf("not ok %d - %s (%s:%d)\n", test_n, what, file, line);
	}
	fflush(stdout);
	return ok;
}

#define CHECK(cond, what) test_check(!!(cond), __FILE__, __LINE__, (what))
#define CHECK_STR(got, want, what) do { \
	const char *g_ = (got), *w_ = (want); \
	if (!test_check(g_ && w_ && !strcmp(g_, w_), __FILE__, __LINE__, (what))) \
		printf("#   got:  '%s'\n#   want: '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
	} while (0)
#define CHECK_NEAR(got, want, tol, what) do { \
	double g_ = (got), w_ = (want); \
	if (!test_check(fabs(g_ - w_) <= (tol), __FILE__, __LINE__, (what))) \
		printf("#   got: %.9g want: %.9g\n", g_, w_); \
	} while (0)

static inline int test_done(void)
{
	return test_failed ? 1 : 0;
}

#endif
