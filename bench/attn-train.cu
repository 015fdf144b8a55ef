/* attn-train: the training attention ops alone (gpu_attention_tc_stat, the forward that keeps
 * its statistics, and gpu_attention_tc_backward_stat, the backward that takes them: what
 * dice-sft runs in --dtype bf16) at the SFT shape of SDAR-1.7B: one sample of L tokens
 * (default 4096) as [x_t | x_0], T = S = 2L rows, positions 0..L-1 in each half, the noisy
 * flags of the first half, block 4, no segments (lib/sft.c sft_batch_build_masked with
 * lib/model_bwd.c sample_mask), 16 query heads over 8 kv heads of HD (default 128).
 * Each fused-kernel version of lib/cuda/attention_train.cu (DICE_FA=1: version 1, DICE_FA=2:
 * version 2, DICE_FA=3: version 3 forward and backward, version 2 where version 3 does not
 * run: HD 64, not sm_90; set in this process between calls; BENCH_FA
 * names the versions to time, e.g. "2 3", default all three) is timed in the same process,
 * interleaved run by run; a run is one op call between CUDA events (casts, tile map and ordering
 * included, as the trainer calls it); the table gives the median of REPS runs (default 9)
 * after 2 warm-up calls of each. FLOP/s two ways: "pairs" counts 4 HD flops per visible
 * (query, key) pair and head forward, 10 backward (S, dP, dV, dK, dQ); "tiles" counts every
 * pair of the 64 x 64 tiles with a visible pair (bench/NOTES-device.md's estimate of 4224
 * tiles a head). Last, each version's outputs against the first's (max |diff| / max |first|).
 * BENCH_BF=1 in the environment times the _bf ops instead (q, k, v in bf16, cast once before
 * the runs: what a caller that makes them in bf16 saves).
 * Usage: attn-train [REPS [L [HD]]]. Run by `BENCH=attn-train sh bench/gpu-ops.sh`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>

#include "gpu.h"
#include "bench.cuh"
#include "gpu_bwd.h"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "attn-train: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define NVMAX 3

static const char *vers[NVMAX] = { "1", "2", "3" };
static int NV = NVMAX;

/* the versions of BENCH_FA ("2 3": digits 1 to 3, spaces between), else all */
static void pick_versions(void)
{
	static const char *const all[NVMAX] = { "1", "2", "3" };
	const char *e = getenv("BENCH_FA");
	int n = 0;
	for (; e && *e && n < NVMAX; e++)
		if (*e >= '1' && *e <= '3')
			vers[n++] = all[*e - '1'];
	if (n)
		NV = n;
}

static float *dev_rand(size_t n, unsigned seed, float amp)
{
	float *h = (float *)malloc(n * sizeof(float)), *d;
	unsigned x = seed * 2654435761u + 12345u;
	if (!h)
		exit(1);
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		h[i] = amp * ((float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
	}
	CK(cudaMalloc(&d, n * sizeof(float)));
	CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
	free(h);
	return d;
}

/* max |a - b| / max |a| over n device floats */
static double rel_diff(const float *a_d, const float *b_d, size_t n)
{
	float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
	double md = 0, ma = 0;
	if (!a || !b)
		exit(1);
	CK(cudaMemcpy(a, a_d, n * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(b, b_d, n * 4, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d > md || d != d)
			md = d;
		if (fabs(a[i]) > ma)
			ma = fabs(a[i]);
	}
	free(a);
	free(b);
	return ma > 0 ? md / ma : md;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 9, L = argc > 2 ? atoi(argv[2]) : 4096;
	int HD = argc > 3 ? atoi(argv[3]) : 128, NH = 16, NKV = 8, block = 4, T = 2 * L;
	size_t nq = (size_t)T * NH * HD, nk = (size_t)T * NKV * HD;
	int *pos = (int *)malloc(T * sizeof(int)), *pos_d;
	unsigned char *nz = (unsigned char *)malloc(T), *nz_d;
	cudaStream_t st;
	cudaEvent_t e0, e1;

	pick_versions();
	if (reps < 1 || L < 1 || (HD != 64 && HD != 128) || !pos || !nz) {
		fprintf(stderr, "usage: attn-train [REPS [L [HD 64|128]]]\n");
		return 2;
	}
	for (int i = 0; i < T; i++) {
		pos[i] = i % L;
		nz[i] = i < L;
	}
	/* visible pairs and visible 64 x 64 tiles, by the mask rule (lib/ops.h) */
	double pairs = 0, tiles = 0;
	int nt = (T + 63) / 64;
	char *tv = (char *)calloc((size_t)nt * nt, 1);
	for (int i = 0; i < T; i++)
		for (int j = 0; j < T; j++) {
			int qb = pos[i] / block, kb = pos[j] / block, v;
			if (nz[i])
				v = nz[j] ? kb == qb : kb < qb;
			else
				v = !nz[j] && kb <= qb;
			if (v) {
				pairs += 1;
				tv[(size_t)(i / 64) * nt + j / 64] = 1;
			}
		}
	for (size_t t = 0; t < (size_t)nt * nt; t++)
		tiles += tv[t];
	free(tv);

	CK(cudaStreamCreate(&st));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc(&pos_d, T * sizeof(int)));
	CK(cudaMalloc(&nz_d, T));
	CK(cudaMemcpy(pos_d, pos, T * sizeof(int), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(nz_d, nz, T, cudaMemcpyHostToDevice));
	struct attn_mask m = { block, pos_d, pos_d, NULL, NULL, nz_d, nz_d };
	float *q = dev_rand(nq, 1, 2.0f), *k = dev_rand(nk, 2, 2.0f), *v = dev_rand(nk, 3, 1.0f);
	float *dout = dev_rand(nq, 4, 1.0f), *out[NVMAX], *lse[NVMAX], *dq[NVMAX], *dk[NVMAX];
	float *dv[NVMAX];
	for (int x = 0; x < NV; x++) {
		CK(cudaMalloc(&out[x], nq * 4));
		CK(cudaMalloc(&lse[x], (size_t)T * NH * 4));
		CK(cudaMalloc(&dq[x], nq * 4));
		CK(cudaMalloc(&dk[x], nk * 4));
		CK(cudaMalloc(&dv[x], nk * 4));
	}
	const char *be = getenv("BENCH_BF");
	int bf = be && *be && *be != '0';
	void *qb = NULL, *kb = NULL, *vb = NULL;
	if (bf) {
		CK(cudaMalloc(&qb, nq * 2));
		CK(cudaMalloc(&kb, nk * 2));
		CK(cudaMalloc(&vb, nk * 2));
		if (gpu_cast_bf16(st, qb, q, nq) || gpu_cast_bf16(st, kb, k, nk) ||
		    gpu_cast_bf16(st, vb, v, nk))
			return 1;
	}
	double *tf = (double *)malloc(sizeof(double) * NV * reps);
	double *tb = (double *)malloc(sizeof(double) * NV * reps);
	for (int r = -2; r < reps; r++)
		for (int x = 0; x < NV; x++) {
			float ms;
			setenv("DICE_FA", vers[x], 1);
			CK(cudaEventRecord(e0, st));
			if (bf ? gpu_attention_tc_stat_bf(st, out[x], lse[x], qb, kb, vb, T, T, NH, NKV, HD,
			                                  &m)
			       : gpu_attention_tc_stat(st, out[x], lse[x], q, k, v, T, T, NH, NKV, HD, &m))
				return 1;
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= 0)
				tf[x * reps + r] = ms;
			CK(cudaEventRecord(e0, st));
			if (bf ? gpu_attention_tc_backward_stat_bf(st, dq[x], dk[x], dv[x], dout, qb, kb, vb,
			                                           out[x], lse[x], T, T, NH, NKV, HD, &m)
			       : gpu_attention_tc_backward_stat(st, dq[x], dk[x], dv[x], dout, q, k, v,
			                                        out[x], lse[x], T, T, NH, NKV, HD, &m))
				return 1;
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= 0)
				tb[x * reps + r] = ms;
		}
	CK(cudaGetLastError());

	double fl_pf = 4.0 * HD * NH * pairs, fl_pb = 10.0 * HD * NH * pairs;
	double fl_tf = 4.0 * HD * NH * tiles * 4096, fl_tb = 10.0 * HD * NH * tiles * 4096;
	double med[NVMAX][2];
	printf("# attn-train%s: T=S=%d (L=%d [x_t|x_0], block %d), NH %d, NKV %d, HD %d; "
	       "visible pairs %.0f (%.2f%%), visible 64x64 tiles %.0f of %d per head; "
	       "median of %d runs each, versions interleaved\n", bf ? " (the _bf ops)" : "", T, L,
	       block, NH, NKV, HD, pairs,
	       100.0 * pairs / ((double)T * T), tiles, nt * nt, reps);
	printf("| op | version | median ms | min ms | max ms | TFLOP/s (pairs) | TFLOP/s (tiles) |\n");
	printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
	for (int p = 0; p < 2; p++)
		for (int x = 0; x < NV; x++) {
			double *a = (p ? tb : tf) + x * reps;
			bench_sort(a, reps);
			double md = reps % 2 ? a[reps / 2] : 0.5 * (a[reps / 2 - 1] + a[reps / 2]);
			med[x][p] = md;
			printf("| %s | %s | %.3f | %.3f | %.3f | %.1f | %.1f |\n",
			       p ? "attention_tc_backward_stat" : "attention_tc_stat", vers[x], md, a[0],
			       a[reps - 1], (p ? fl_pb : fl_pf) / md * 1e-9,
			       (p ? fl_tb : fl_tf) / md * 1e-9);
		}
	for (int x = 1; x < NV; x++) {
		printf("# version %s / version %s time: forward %.3f, backward %.3f\n", vers[x],
		       vers[0], med[x][0] / med[0][0], med[x][1] / med[0][1]);
		printf("# version %s against version %s (max |diff| / max |v%s|): out %.2e lse %.2e "
		       "dq %.2e dk %.2e dv %.2e\n", vers[x], vers[0], vers[0],
		       rel_diff(out[0], out[x], nq), rel_diff(lse[0], lse[x], (size_t)T * NH),
		       rel_diff(dq[0], dq[x], nq), rel_diff(dk[0], dk[x], nk), rel_diff(dv[0], dv[x], nk));
	}
	return 0;
}
