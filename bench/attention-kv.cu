/* attention-kv: the engine's decode attention (attention_kv, decode.cu) alone at SDAR-4B's
 * decode shape: 32 query heads, 8 kv heads, head dim 128, block 4, a bf16 cache, B sequences
 * of LEN cached positions and 4 new rows each (the new rows' keys in the cache too: S = LEN +
 * 4), for each B of BATCHES. In one process, for each B:
 *   cluster  the cluster kernel (gpu_set_dk_unit(0): a thread block cluster per (sequence,
 *            kv head), a block per key split);
 *   unit1    unit kernel 1 (gpu_set_dk_unit(1), gpu_set_dk_unit_v(1, 0): du_kernel, a
 *            block per (sequence, kv head) walks all its splits), where it runs (sm_90);
 *   unit2    unit kernel 2 (gpu_set_dk_unit_v(2, 0): dv_kernel, persistent blocks, two an
 *            SM, each walking units in turn);
 *   default  what the engine takes (gpu_set_dk_unit(-1): without DICE_DK_UNIT and
 *            DICE_DK_UNIT_V, where a sequence has at most 2048 keys, unit kernel 2 from
 *            3/4 of twice the multiprocessors' number of units on, unit kernel 1 from 3/4 of
 *            their number, else the cluster kernel).
 * A figure is the median over REPS samples, each the mean of INNER back-to-back launches
 * timed with CUDA events (programmatic dependent launch as in the engine, graphs off); each
 * launch reads the next of LAYERS cache layers (enough for 512 MB of keys and values, so
 * that small batches are not timed from the L2 cache); data are random, never zeros. The
 * floor is the keys and values read (B x S x 8 x 128 x 2 bytes x 2) over the device copy
 * bandwidth measured first (1 GiB device-to-device x 10, read + write counted); q in and out
 * (B x 4 x 32 x 128 x 4 bytes each) are not counted. The kernels' outputs are compared bit
 * for bit. Usage: attention-kv [REPS [BATCHES [LEN]]] (defaults 15, 1,16,32,64,128,
 * 1024). Run by bench/attention-kv.sh. */
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
#define TNEW 4
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

static double copy_bandwidth(void)
{
	size_t n = (size_t)1 << 30;
	void *a, *b;
	cudaEvent_t e0, e1;
	float ms;

	CK(cudaMalloc(&a, n));
	CK(cudaMalloc(&b, n));
	CK(cudaMemsetAsync(a, 1, n, st));
	CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, st));
	for (int i = 0; i < 10; i++)
		CK(cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, n, cudaMemcpyDeviceToDevice, st));
	CK(cudaEventRecord(e1, st));
	CK(cudaEventSynchronize(e1));
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaFree(a));
	CK(cudaFree(b));
	return 2.0 * n * 10 / (ms * 1e-3);
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

int main(int argc, char **argv)
{
	int reps = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 15;
	char batches[256] = "1,16,32,64,128";
	int len = argc > 3 && atoi(argv[3]) >= 0 ? atoi(argv[3]) : 1024;

	if (argc > 2)
		snprintf(batches, sizeof batches, "%s", argv[2]);
	int dev, sms;
	st = gpu_stream();
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	double bw = copy_bandwidth();
	printf("copy bandwidth (1 GiB device-to-device x10, read+write counted): %.1f GB/s\n",
	       bw * 1e-9);
	printf("%5s %6s %7s %9s %8s | %9s %6s | %9s %6s | %9s %6s | %9s %-9s | %s\n", "batch",
	       "units", "layers", "KV MB", "floor us", "cluster", "floor", "unit1", "floor", "unit2",
	       "floor", "default", "(takes)", "bits: unit1 = unit2 = cluster = default");
	for (char *tok = strtok(batches, ","); tok; tok = strtok(NULL, ",")) {
		int B = atoi(tok), S = len + TNEW, cap = S + 4;
		if (B < 1)
			continue;
		size_t per_layer = (size_t)cap * NKV * HD;          /* elements, one of k / v */
		double kvb = (double)B * S * NKV * HD * 2 * 2;     /* bytes a launch must read */
		int layers = (int)((512e6 + kvb - 1) / kvb);
		layers = layers < 1 ? 1 : layers > 256 ? 256 : layers;
		size_t seqn = (size_t)layers * per_layer;
		__nv_bfloat16 *K, *V;
		CK(cudaMalloc((void **)&K, seqn * B * 2));
		CK(cudaMalloc((void **)&V, seqn * B * 2));
		fill_kernel<<<4096, 256, 0, st>>>(NULL, K, seqn * B, 11u + B, -2.0f, 2.0f);
		fill_kernel<<<4096, 256, 0, st>>>(NULL, V, seqn * B, 23u + B, -1.0f, 1.0f);

		int N = B * TNEW;
		int *row0 = (int *)malloc(sizeof(int) * (B + 1)), *lens = (int *)malloc(sizeof(int) * B);
		int *caps = (int *)malloc(sizeof(int) * B), *rowseq = (int *)malloc(sizeof(int) * N);
		void **kp = (void **)malloc(sizeof(void *) * B), **vp = (void **)malloc(sizeof(void *) * B);
		for (int s = 0; s <= B; s++)
			row0[s] = s * TNEW;
		for (int s = 0; s < B; s++) {
			lens[s] = len;
			caps[s] = cap;
			kp[s] = K + seqn * s;
			vp[s] = V + seqn * s;
			for (int t = 0; t < TNEW; t++)
				rowseq[s * TNEW + t] = s;
		}
		struct setup su;
		su.layers = layers;
		su.b.nseq = B;
		su.b.N = N;
		su.b.maxT = TNEW;
		su.b.maxS = S;
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

		gpu_set_dk_unit(0);
		float *o0 = output(&su, qn);
		double tc = time_us(&su, reps);
		gpu_set_dk_unit(1);
		gpu_set_dk_unit_v(1, 0);
		float *o1 = output(&su, qn);
		double tu = time_us(&su, reps);
		gpu_set_dk_unit_v(2, 0);
		float *o2 = output(&su, qn);
		double tv = time_us(&su, reps);
		gpu_set_dk_unit(-1);
		gpu_set_dk_unit_v(0, 0);
		float *od = output(&su, qn);
		double td = time_us(&su, reps);
		int same = !memcmp(o0, o1, qn * 4) && !memcmp(o0, o2, qn * 4) &&
		           !memcmp(o0, od, qn * 4);
		double floor_us = kvb / bw * 1e6;
		int du_default = B * NKV < 3 * sms / 4 || S > 2048 ? 0 : B * NKV >= 3 * sms / 2 ? 2 : 1;
		printf("%5d %6d %7d %9.1f %8.2f | %9.2f %5.1f%% | %9.2f %5.1f%% | %9.2f %5.1f%% | "
		       "%9.2f %-9s | %s\n", B, B * NKV, layers, kvb * 1e-6, floor_us, tc,
		       100 * floor_us / tc, tu, 100 * floor_us / tu, tv, 100 * floor_us / tv, td,
		       getenv("DICE_DK_UNIT") || getenv("DICE_DK_UNIT_V") ? "(env)" :
		       du_default == 2 ? "(unit2)" : du_default ? "(unit1)" : "(cluster)",
		       same ? "yes" : "NO");
		fflush(stdout);
		free(o0); free(o1); free(o2); free(od);
		free(row0); free(lens); free(caps); free(rowseq); free(kp); free(vp);
		CK(cudaFree((void *)su.b.row0)); CK(cudaFree((void *)su.b.len));
		CK(cudaFree((void *)su.b.cap)); CK(cudaFree((void *)su.b.rowseq));
		CK(cudaFree((void *)su.b.k)); CK(cudaFree((void *)su.b.v));
		CK(cudaFree(su.q)); CK(cudaFree(su.out)); CK(cudaFree(K)); CK(cudaFree(V));
	}
	return 0;
}
