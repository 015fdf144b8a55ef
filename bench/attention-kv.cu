/* attention-kv: the engine's decode attention (attention_kv, decode.cu) alone at SDAR-4B's
 * decode shape: 32 query heads, 8 kv heads, head dim 128, block 4, a bf16 cache, B sequences
 * of LEN cached positions and ROWS new rows each (4: a block; 8: the forwards that also store
 * the finished block; mix: every fourth sequence 8, the others 4; the new rows' keys in the
 * cache too: S = LEN + rows), for each B of BATCHES. In one process, for each B:
 *   cluster  the cluster kernel (gpu_set_dk_unit(0): a thread block cluster per (sequence,
 *            kv head), a block per key split);
 *   unit1    unit kernel 1 (gpu_set_dk_unit(1), gpu_set_dk_unit_v(1, 0): du_kernel, a
 *            block per (sequence, kv head) walks all its splits), where it runs (sm_90);
 *   unit2    unit kernel 2 (gpu_set_dk_unit_v(2, 0): dv_kernel, persistent blocks, two an
 *            SM, each walking units in turn);
 *   unit3    unit kernel 3 (dv_kernel, a split's chains of tiles in turn over the warps);
 *   default  what the engine takes (gpu_set_dk_unit(-1): without DICE_DK_UNIT and
 *            DICE_DK_UNIT_V, where a sequence has at most 2048 keys, unit kernel 2 from
 *            3/4 of twice the multiprocessors' number of units on, unit kernel 1 from 3/4 of
 *            their number, else the cluster kernel).
 * A figure is the median over REPS samples, each the mean of INNER back-to-back launches
 * timed with CUDA events (programmatic dependent launch as in the engine, graphs off); each
 * launch reads the next of LAYERS cache layers (enough for 512 MB of keys and values, so
 * that small batches are not timed from the L2 cache); data are random, never zeros. The
 * floor is the keys and values read (the sequences' S x 8 x 128 x 2 bytes x 2) over the
 * device copy bandwidth measured first (1 GiB device-to-device x 10, read + write counted);
 * q in and out (rows x 32 x 128 x 4 bytes each) are not counted. The kernels' outputs are
 * compared bit for bit. Usage: attention-kv [REPS [BATCHES [LEN [ROWS]]]] (defaults 15,
 * 1,16,32,64,128, 1024, 4); REPS 0: one launch of each, not timed (for a profiler);
 * BENCH_KERN=NAME,... runs only the kernels named; DICE_DK_EXACT=1 times the exact
 * two-part products instead of the default one-part ones (lib/cuda/decode.cu). Run by bench/gpu-ops.sh
 * (BENCH=attention-kv). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include "gpu.h"
#include "bench.cuh"

#define INNER 10
#define NH 32
#define NKV 8
#define HD 128
#define TMAX 8
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "attention-kv: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
	exit(1); } } while (0)

static cudaStream_t st;

/* uniform(lo, hi) from a hash of the index, as fp32 and/or bf16 */
static __global__ void fill_kernel(float *p, __nv_bfloat16 *b, size_t n, unsigned seed, float lo,
                                   float hi)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		unsigned h = (unsigned)i * 2654435761u ^ seed ^ (unsigned)(i >> 32) * 40503u;
		h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
		float v = lo + (float)(h >> 8) * ((hi - lo) / 16777216.0f);
		if (p)
			p[i] = v;
		if (b)
			b[i] = __float2bfloat16_rn(v);
	}
}

static void *dev_copy(const void *h, size_t n)
{
	void *d;
	CK(cudaMalloc(&d, n));
	CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
	return d;
}

struct setup {
	struct kv_batch b;          /* device arrays */
	int layers;
	float *q, *out;
};

/* median over reps of the mean of INNER launches, us; layer l cycles */
static double time_us(struct setup *s, int reps)
{
	double *v = (double *)malloc(sizeof(double) * reps);
	cudaEvent_t e0, e1;
	int l = 0;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++) {
		gpu_attention_kv(st, s->out, s->q, &s->b, l, NH, NKV, HD, 4);
		l = (l + 1) % s->layers;
	}
	for (int r = 0; r < reps; r++) {
		float ms;
		CK(cudaEventRecord(e0, st));
		for (int i = 0; i < INNER; i++) {
			gpu_attention_kv(st, s->out, s->q, &s->b, l, NH, NKV, HD, 4);
			l = (l + 1) % s->layers;
		}
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaGetLastError());
		CK(cudaEventElapsedTime(&ms, e0, e1));
		v[r] = ms * 1e3 / INNER;
	}
	bench_sort(v, reps);
	double m = v[reps / 2];
	free(v);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return m;
}

/* the output of one launch on layer 0, to the host */
static float *output(struct setup *s, size_t n)
{
	float *h = (float *)malloc(n * sizeof(float));
	CK(cudaMemsetAsync(s->out, 0xff, n * sizeof(float), st));
	gpu_attention_kv(st, s->out, s->q, &s->b, 0, NH, NKV, HD, 4);
	CK(cudaStreamSynchronize(st));
	CK(cudaGetLastError());
	CK(cudaMemcpy(h, s->out, n * sizeof(float), cudaMemcpyDeviceToHost));
	return h;
}

/* the kernels timed: name, gpu_set_dk_unit, gpu_set_dk_unit_v */
#define NKERN 5
static const struct {
	const char *name;
	int unit, v;
} kern[NKERN] = {
	{ "cluster", 0, 0 }, { "unit1", 1, 1 }, { "unit2", 1, 2 }, { "unit3", 1, 3 },
	{ "default", -1, 0 },
};

int main(int argc, char **argv)
{
	int reps = argc > 1 && atoi(argv[1]) >= 0 ? atoi(argv[1]) : 15;
	const char *only = getenv("BENCH_KERN") && *getenv("BENCH_KERN") ? getenv("BENCH_KERN") : NULL;
	int run[NKERN];
	char batches[256] = "1,16,32,64,128";
	int len = argc > 3 && atoi(argv[3]) >= 0 ? atoi(argv[3]) : 1024;
	const char *rows = argc > 4 ? argv[4] : "4";
	int mix = !strcmp(rows, "mix"), T0 = mix ? 4 : atoi(rows);

	if (argc > 2)
		snprintf(batches, sizeof batches, "%s", argv[2]);
	if (T0 < 1 || T0 > TMAX) {
		fprintf(stderr, "attention-kv: ROWS %s: want 1 to %d or mix\n", rows, TMAX);
		return 2;
	}
	st = gpu_stream();
	double bw = bench_copy_bw(st);
	printf("copy bandwidth (1 GiB device-to-device x10, read+write counted): %.1f GB/s\n",
	       bw * 1e-9);
	printf("rows a sequence: %s, cached keys %d\n", mix ? "8 for every fourth, else 4" : rows,
	       len);
	printf("%5s %6s %7s %9s %8s", "batch", "units", "layers", "KV MB", "floor us");
	for (int k = 0; k < NKERN; k++) {
		size_t n = strlen(kern[k].name);
		const char *p = only ? strstr(only, kern[k].name) : NULL;
		run[k] = !only || (p && (p == only || p[-1] == ',') && (!p[n] || p[n] == ','));
		if (run[k])
			printf(" | %9s %6s", kern[k].name, "floor");
	}
	printf(" | bits all equal\n");
	for (char *tok = strtok(batches, ","); tok; tok = strtok(NULL, ",")) {
		int B = atoi(tok), Smax = len + (mix ? TMAX : T0), cap = Smax + 4;
		if (B < 1)
			continue;
		int N = 0, maxT = 0, rt = 0;
		int *row0 = (int *)malloc(sizeof(int) * (B + 1)), *lens = (int *)malloc(sizeof(int) * B);
		double kvb = 0;                                     /* bytes a launch must read */
		for (int s = 0; s < B; s++) {
			int T = mix && s % 4 == 3 ? TMAX : T0;
			row0[s] = N;
			N += T;
			maxT = T > maxT ? T : maxT;
			lens[s] = len;
			kvb += (double)(len + T) * NKV * HD * 2 * 2;
		}
		row0[B] = N;
		rt = (maxT * (NH / NKV) + 15) / 16;                  /* row tiles a sequence */
		size_t per_layer = (size_t)cap * NKV * HD;          /* elements, one of k / v */
		int layers = (int)((512e6 + kvb - 1) / kvb);
		layers = layers < 1 ? 1 : layers > 256 ? 256 : layers;
		size_t seqn = (size_t)layers * per_layer;
		__nv_bfloat16 *K, *V;
		CK(cudaMalloc((void **)&K, seqn * B * 2));
		CK(cudaMalloc((void **)&V, seqn * B * 2));
		fill_kernel<<<4096, 256, 0, st>>>(NULL, K, seqn * B, 11u + B, -2.0f, 2.0f);
		fill_kernel<<<4096, 256, 0, st>>>(NULL, V, seqn * B, 23u + B, -1.0f, 1.0f);

		int *caps = (int *)malloc(sizeof(int) * B), *rowseq = (int *)malloc(sizeof(int) * N);
		void **kp = (void **)malloc(sizeof(void *) * B), **vp = (void **)malloc(sizeof(void *) * B);
		for (int s = 0; s < B; s++) {
			caps[s] = cap;
			kp[s] = K + seqn * s;
			vp[s] = V + seqn * s;
			for (int n = row0[s]; n < row0[s + 1]; n++)
				rowseq[n] = s;
		}
		struct setup su;
		su.layers = layers;
		su.b.nseq = B;
		su.b.N = N;
		su.b.maxT = maxT;
		su.b.maxS = len + maxT;
		su.b.dt = DICE_BF16;
		su.b.row0 = (const int *)dev_copy(row0, sizeof(int) * (B + 1));
		su.b.len = (const int *)dev_copy(lens, sizeof(int) * B);
		su.b.cap = (const int *)dev_copy(caps, sizeof(int) * B);
		su.b.rowseq = (const int *)dev_copy(rowseq, sizeof(int) * N);
		su.b.k = (void *const *)dev_copy(kp, sizeof(void *) * B);
		su.b.v = (void *const *)dev_copy(vp, sizeof(void *) * B);
		size_t qn = (size_t)N * NH * HD;
		CK(cudaMalloc((void **)&su.q, qn * 4));
		CK(cudaMalloc((void **)&su.out, qn * 4));
		fill_kernel<<<1024, 256, 0, st>>>(su.q, NULL, qn, 37u + B, -2.0f, 2.0f);
		CK(cudaGetLastError());
		CK(cudaStreamSynchronize(st));

		double floor_us = kvb / bw * 1e6, t[NKERN];
		float *o[NKERN], *o0 = NULL;
		int same = 1;
		for (int k = 0; k < NKERN; k++) {
			o[k] = NULL;
			t[k] = 0;
			if (!run[k])
				continue;
			gpu_set_dk_unit(kern[k].unit);
			gpu_set_dk_unit_v(kern[k].v, 0);
			o[k] = output(&su, qn);
			if (reps)
				t[k] = time_us(&su, reps);
			o0 = o0 ? o0 : o[k];
			same = same && !memcmp(o0, o[k], qn * 4);
		}
		printf("%5d %6d %7d %9.1f %8.2f", B, B * rt * NKV, layers, kvb * 1e-6, floor_us);
		for (int k = 0; k < NKERN; k++)
			if (run[k])
				printf(" | %9.2f %5.1f%%", t[k], t[k] > 0 ? 100 * floor_us / t[k] : 0.0);
		printf(" | %s\n", same ? "yes" : "NO");
		fflush(stdout);
		for (int k = 0; k < NKERN; k++)
			free(o[k]);
		free(row0); free(lens); free(caps); free(rowseq); free(kp); free(vp);
		CK(cudaFree((void *)su.b.row0)); CK(cudaFree((void *)su.b.len));
		CK(cudaFree((void *)su.b.cap)); CK(cudaFree((void *)su.b.rowseq));
		CK(cudaFree((void *)su.b.k)); CK(cudaFree((void *)su.b.v));
		CK(cudaFree(su.q)); CK(cudaFree(su.out)); CK(cudaFree(K)); CK(cudaFree(V));
	}
	return 0;
}
