/* test_add: the CUDA residual add against the CPU twin, vectorised and scalar paths,
 * a misaligned pointer included. */
#include "gpu_test.h"

static void one(size_t n, size_t off)
{
	float *y = gt_rand(n + off, -4, 4), *x = gt_rand(n + off, -4, 4);
	float *dy = (float *)gt_up(y, (n + off) * sizeof(float));
	float *dx = (float *)gt_up(x, (n + off) * sizeof(float));
	char what[64];

	H->add(y + off, x + off, n);
	G->add(dy + off, dx + off, n);
	float *got = gt_down(dy, n + off);
	snprintf(what, sizeof what, "add n=%zu offset %zu", n, off);
	gt_compare(what, got, y, n + off, 0, 0);       /* one fp32 addition: exact */
	free(y); free(x); free(got);
	G->free(dy); G->free(dx);
}

int main(void)
{
	if (gt_init(15))
		return 0;
	one(4096 * 5, 0);
	one(1000003, 0);
	one(1000, 1);
	return test_done();
}
