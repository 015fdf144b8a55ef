/* gpu_test.h: what the kernel tests (tests/gpu/test_<op>.cu) share: random host data, device
 * upload/download through the backend table, output poisoning (NaN bytes, so an unwritten
 * element fails) and the comparison with the CPU twin: |got - ref| <= atol + |ref| * eps for
 * every element, printing the largest error. With no GPU the test prints one SKIP line. */
#ifndef DICE_GPU_TEST_H
#define DICE_GPU_TEST_H

#include <stdlib.h>

#include "gpu.h"
extern "C" {
#include "rng.h"
}
#include "test.h"

static const struct ops *G;             /* the CUDA backend */
static const struct ops *H = &ops_cpu;  /* its specification */
static struct rng R;

/* util.h is C11 (_Noreturn): the tests keep their own fatal malloc */
static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		printf("Bail out! out of memory\n");
		exit(1);
	}
	return p;
}

/* call first: 0 when the test may go on, else it has printed a SKIP and the caller exits 0 */
static int gt_init(uint64_t seed)
{
	G = gpu_ops();
	rng_seed(&R, seed);
	if (!G) {
		printf("ok 1 # SKIP no GPU\n");
		return -1;
	}
	return 0;
}

static float *gt_rand(size_t n, float lo, float hi)
{
	float *p = (float *)xmalloc(n * sizeof *p + 1);
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * rng_uniformf(&R);
	return p;
}

/* host array of n elements of dtype dt (fp32 values rounded), random in [lo, hi) */
static void *gt_rand_w(size_t n, enum dice_dtype dt, float lo, float hi)
{
	float *f = gt_rand(n, lo, hi);
	if (dt == DICE_F32)
		return f;
	uint16_t *h = (uint16_t *)xmalloc(n * 2 + 1);
	for (size_t i = 0; i < n; i++)
		h[i] = dt == DICE_BF16 ? dice_f32_to_bf16(f[i]) : dice_f32_to_f16(f[i]);
	free(f);
	return h;
}

static void *gt_up(const void *host, size_t bytes)
{
	void *d = G->alloc(bytes);
	if (!d) {
		printf("Bail out! cannot allocate %zu bytes on the GPU\n", bytes);
		exit(1);
	}
	G->to_device(d, host, bytes);
	return d;
}

/* a device buffer of n floats full of NaN */
static float *gt_poisoned(size_t n)
{
	float *d = (float *)G->alloc(n * sizeof(float));
	CHECK(d != NULL, "alloc output");
	cudaMemsetAsync(d, 0xff, n * sizeof(float), gpu_stream());
	return d;
}

static float *gt_down(const float *dev, size_t n)
{
	float *h = (float *)xmalloc(n * sizeof *h + 1);
	G->to_host(h, dev, n * sizeof *h);
	return h;
}

/* one TAP line: every element within atol + |ref|*eps; the largest error as a comment */
/* n ints start, start+1, ... (xmalloc'd) */
static int *gt_iota(int n, int start)
{
	int *p = (int *)xmalloc(n * sizeof(int));
	for (int i = 0; i < n; i++)
		p[i] = start + i;
	return p;
}

/* the SFT layout of two packed samples of lengths L1 and L2, each [x_t | x_0]: positions,
 * sample ids and noisy flags of the 2 (L1 + L2) rows; returns the row count */
static int gt_sft_packed(int L1, int L2, int **pos, int **seg, uint8_t **nz)
{
	int n = 2 * (L1 + L2), i = 0;
	*pos = (int *)xmalloc(n * sizeof(int));
	*seg = (int *)xmalloc(n * sizeof(int));
	*nz = (uint8_t *)xmalloc(n);
	for (int s = 0; s < 2; s++)
		for (int half = 0; half < 2; half++)
			for (int j = 0; j < (s ? L2 : L1); j++, i++) {
				(*pos)[i] = j;
				(*seg)[i] = s;
				(*nz)[i] = half == 0;
			}
	return n;
}

/* one attention test case: shapes and the host mask arrays (NULL where the mask has none) */
struct gt_acase {
	const char *name;
	int T, S, NH, NKV, HD, block;
	int *qpos, *kpos, *qseg, *kseg;
	uint8_t *qnz, *knz;
};

static void *gt_up_or_null(const void *h, size_t bytes)
{
	return h ? gt_up(h, bytes) : NULL;
}

/* a host copy of v (n) rounded to dt's 16 bits (bf16 or f16, nearest even, as the kernels'
 * gpu_pack2) */
static uint16_t *gt_to16(const float *v, size_t n, enum dice_dtype dt)
{
	uint16_t *r = (uint16_t *)xmalloc(n * 2);
	for (size_t i = 0; i < n; i++)
		r[i] = dt == DICE_F16 ? dice_f32_to_f16(v[i]) : dice_f32_to_bf16(v[i]);
	return r;
}

/* check: the n 16-bit values at dev equal v (n) rounded to dt */
static int gt_check16(const char *what, const void *dev, const float *v, size_t n,
                      enum dice_dtype dt)
{
	uint16_t *got = (uint16_t *)xmalloc(n * 2), *want = gt_to16(v, n, dt);
	int ok = CHECK(cudaMemcpy(got, dev, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess &&
	               !memcmp(got, want, n * 2), what);
	free(got);
	free(want);
	return ok;
}

/* the case's mask with its arrays on the host (*hm) and copied to the device (*dm) */
static void gt_masks(const struct gt_acase *c, struct attn_mask *hm, struct attn_mask *dm)
{
	*hm = (struct attn_mask){ c->block, c->qpos, c->kpos, c->qseg, c->kseg, c->qnz, c->knz };
	*dm = *hm;
	dm->qpos = (int *)gt_up_or_null(c->qpos, c->T * sizeof(int));
	dm->kpos = (int *)gt_up_or_null(c->kpos, c->S * sizeof(int));
	dm->qseg = (int *)gt_up_or_null(c->qseg, c->T * sizeof(int));
	dm->kseg = (int *)gt_up_or_null(c->kseg, c->S * sizeof(int));
	dm->qnoisy = (uint8_t *)gt_up_or_null(c->qnz, c->T);
	dm->knoisy = (uint8_t *)gt_up_or_null(c->knz, c->S);
}

static void gt_masks_free(struct attn_mask *dm)
{
	G->free((void *)dm->qpos); G->free((void *)dm->kpos); G->free((void *)dm->qseg);
	G->free((void *)dm->kseg); G->free((void *)dm->qnoisy); G->free((void *)dm->knoisy);
}

static int gt_compare(const char *what, const float *got, const float *ref, size_t n,
                      double atol, double eps)
{
	double maxerr = 0, maxrel = 0;
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)got[i] - (double)ref[i]);
		if (!(e <= atol + fabs((double)ref[i]) * eps)) {       /* NaN fails */
			if (!bad++)
				first = i;
		}
		if (e > maxerr || e != e)
			maxerr = e;
		if (fabs(ref[i]) > 1e-3 && e / fabs(ref[i]) > maxrel)
			maxrel = e / fabs(ref[i]);
	}
	printf("# %s: n=%zu max abs err %.3g, max rel err %.3g (atol %.3g, eps %.3g)\n",
	       what, n, maxerr, maxrel, atol, eps);
	if (bad)
		printf("#   %zu bad; first at %zu: got %.9g want %.9g\n", bad, first,
		       got[first], ref[first]);
	return CHECK(bad == 0, what);
}

#endif
