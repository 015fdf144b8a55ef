/* bench.cuh: what the standalone GPU benches of bench/ (built by bench/gpu-ops.sh) share */
#include <stdlib.h>

static int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* v[0..n) in ascending order (the benches take their medians from it) */
static void bench_sort(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
}
