/* test_sample: the CUDA sample op against its CPU twin (sample_draw) on random logits.
 *
 * Top-k 1: tokens and probabilities identical, bitwise (one maximum: the kernel's first pass
 * alone; ties included: integer logits make
 * many tokens share the maximum, and u picks among them). Full softmax (top-k 0, top-p 1,
 * temperatures 1 and 0.6, flat and peaked logits): the probability of the drawn token within
 * 1e-5 relative of the one computed in double, and the drawn index consistent with the CDF
 * computed in double: CDF(before) <= u + 1e-6 and CDF(through) > u - 1e-6; the draws that
 * differ from the twin's must be few and each such a boundary case. Other filters (top-k 50,
 * top-p 0.9) go through the host twin: identical. Rows are a permuted subset of the matrix. */
#include <string.h>

#include "gpu_test.h"

static double *draws(int NROW, double ulo)
{
	double *u = (double *)xmalloc(NROW * sizeof *u);
	for (int r = 0; r < NROW; r++)
		u[r] = ulo + (1 - ulo) * rng_uniform(&R);
	u[0] = 0;
	if (NROW > 1)
		u[1] = 0.9999999;
	return u;
}

/* the row's CDF in double, with the twin's float filter: before/through of token g */
static void cdf(const float *l, int V, float temp, int g, double *before, double *through,
                double *p)
{
	float mx = -INFINITY;
	double s = 0, b = 0, eg = 0;
	for (int i = 0; i < V; i++) {
		float e = temp == 1.0f ? l[i] : l[i] / temp;
		if (e > mx)
			mx = e;
	}
	for (int i = 0; i < V; i++) {
		float e = temp == 1.0f ? l[i] : l[i] / temp;
		double x = exp((double)e - mx);
		s += x;
		if (i < g)
			b += x;
		if (i == g)
			eg = x;
	}
	*before = b / s;
	*through = (b + eg) / s;
	*p = eg / s;
}

static void one(const char *what, int V, int NROW, float lo, float hi, int integer, float temp,
                int top_k, float top_p)
{
	int NR = NROW + 3;
	float *l = gt_rand((size_t)NR * V, lo, hi);
	if (integer)
		for (size_t i = 0; i < (size_t)NR * V; i++)
			l[i] = floorf(l[i]);
	int *rows = (int *)xmalloc(NROW * sizeof *rows), *tg = (int *)xmalloc(NROW * sizeof(int)),
	    *tc = (int *)xmalloc(NROW * sizeof(int));
	float *pg = (float *)xmalloc(NROW * sizeof(float)), *pc = (float *)xmalloc(NROW * sizeof(float));
	double *u = draws(NROW, 0);
	for (int r = 0; r < NROW; r++)
		rows[r] = (NR - 1 - r * 7 % NR + NR) % NR;         /* a permuted subset */
	float *dl = (float *)gt_up(l, (size_t)NR * V * sizeof(float));
	int exact = top_k == 1 || top_p < 1.0f || (top_k > 1 && top_k < V);
	int same = 0, bad = 0, badp = 0;
	char name[160];

	H->sample(tc, pc, l, rows, u, NROW, V, temp, top_k, top_p);
	G->sample(tg, pg, dl, rows, u, NROW, V, temp, top_k, top_p);
	for (int r = 0; r < NROW; r++) {
		same += tg[r] == tc[r];
		if (exact) {
			if (tg[r] != tc[r] || pg[r] != pc[r]) {
				if (!bad++)
					printf("#   row %d: gpu %d (%.9g) cpu %d (%.9g)\n", r, tg[r], pg[r], tc[r], pc[r]);
			}
			continue;
		}
		double b, t, p;
		if (tg[r] < 0 || tg[r] >= V) {
			bad++;
			continue;
		}
		cdf(l + (size_t)rows[r] * V, V, temp, tg[r], &b, &t, &p);
		if (!(b <= u[r] + 1e-6 && t > u[r] - 1e-6 && p > 0)) {
			if (!bad++)
				printf("#   row %d: u %.9f, gpu %d has CDF [%.9f, %.9f)\n", r, u[r], tg[r], b, t);
		}
		if (!(fabs(pg[r] - p) <= 1e-5 * p)) {
			if (!badp++)
				printf("#   row %d: prob gpu %.9g double %.9g\n", r, pg[r], p);
		}
	}
	snprintf(name, sizeof name, "sample %s: V=%d NROW=%d T=%g top-k %d top-p %g: %d/%d draws as the twin's",
	         what, V, NROW, temp, top_k, top_p, same, NROW);
	CHECK(bad == 0 && badp == 0 && (exact ? same == NROW : same >= NROW - NROW / 16), name);
	free(l), free(rows), free(tg), free(tc), free(pg), free(pc), free(u);
	G->free(dl);
}

int main(void)
{
	if (gt_init(61))
		return 0;
	int V = 151936;
	one("greedy", V, 64, -8, 8, 0, 1.0f, 1, 1.0f);
	one("greedy T", V, 64, -8, 8, 0, 0.7f, 1, 1.0f);
	one("greedy ties", V, 128, -3, 3, 1, 1.0f, 1, 1.0f);
	one("greedy ties T", 1000, 128, -2, 2, 1, 0.5f, 1, 1.0f);
	one("greedy small V", 7, 32, -1, 1, 1, 1.0f, 1, 1.0f);
	one("softmax flat", V, 256, -4, 4, 0, 1.0f, 0, 1.0f);
	one("softmax peaked", V, 256, -30, 30, 0, 1.0f, 0, 1.0f);
	one("softmax T 0.6", V, 256, -8, 8, 0, 0.6f, 0, 1.0f);
	one("softmax top-k >= V", 1000, 64, -8, 8, 0, 1.0f, 1000, 1.0f);
	one("softmax small V", 33, 64, -2, 2, 0, 1.3f, 0, 1.0f);
	one("host top-k", V, 8, -8, 8, 0, 1.0f, 50, 1.0f);
	one("host top-p", V, 8, -8, 8, 0, 0.8f, 0, 0.9f);
	return test_done();
}
