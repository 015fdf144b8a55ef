/* matmul-fixed: the batch-invariant tiled product (matmul_fixed.cu) against cuBLAS's bf16
 * GEMM on the engine forward's shapes: SDAR 1.7B/4B/8B geometry, the fused q/k/v product
 * (hidden -> q + 2 kv), o (q -> hidden), the fused gate/up (hidden -> 2 x intermediate) and
 * down (intermediate -> hidden), at N rows (default 512, 2048, 8192: decode at batch 128 x
 * block 4, and prefill). For each shape, in one process:
 *   cublas   cublasGemmEx, bf16 x (converted beforehand, not timed) and w, fp32 y, fp32
 *            accumulation (CUBLAS_COMPUTE_32F, default algorithm);
 *   op       the training matmul op (gpu_matmul_cublas: x converted to bf16, then the same
 *            GEMM), the engine's product before it took matmul_fixed;
 *   mma      gpu_matmul_fixed's tiled path on the mma.sync kernel only (gpu_set_wgmma(0): x
 *            converted, the tile shape it picks);
 *   fixed    the tiled path as the engine takes it (on an H100 / H200 the wgmma kernel where
 *            its cost model says faster: matmul_wgmma.cu), then on a line "wgmma" each
 *            wgmma tile shape forced, where they run (gpu_matmul_fixed_variants);
 *   rows off the same with the TMA tiles of 80, 112 and 160 rows off (gpu_set_mx_rows(0):
 *            main's variants before session 10), and the tile shape it takes then, on a
 *            line of its own;
 *   and, with "sweep", every tile shape of the tiled kernel, split by segment and not.
 * A figure is the median over REPS samples, each the mean of INNER back-to-back launches
 * timed with CUDA events; data are random (never zeros). The weights of one shape are read
 * over and over: those that fit the L2 cache (50 MB on an H100) are timed warm, for all sides.
 * A line "host" gives the host's microseconds a call of the tiled path as the engine takes it,
 * with the TMA kernels' tensor maps kept (the default) and made each call, and of mma.sync.
 * Usage: matmul-fixed [REPS [GEOMS [NS [sweep]]]] (GEOMS e.g. 1.7b,4b,8b; NS e.g. 512,8192);
 * MF_OPS (e.g. "o,down") times those products alone.
 * Run by bench/matmul-fixed.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

#include "gpu.h"
#include "bench.cuh"

#define INNER 3
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "matmul-fixed: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	fprintf(stderr, "matmul-fixed: %s:%d: cublas %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)

static int REPS = 10;
static cudaStream_t st;
static cublasHandle_t cub;
static float *X, *Y;
static __nv_bfloat16 *XB, *W;

static __global__ void fill_kernel(float *p, __nv_bfloat16 *b, size_t n, unsigned int seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		unsigned int h = (unsigned int)i * 2654435761u ^ seed;
		h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
		float v = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
		if (p)
			p[i] = v;
		if (b)
			b[i] = __float2bfloat16_rn(v);
	}
}

enum side { CUBLAS, OP, FIXED, TILED };

static void launch(enum side s, int N, int in, int out, int v, int split)
{
	const float one = 1.0f, zero = 0.0f;
	switch (s) {
	case CUBLAS:
		CB(cublasGemmEx(cub, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, &one, W, CUDA_R_16BF, in, XB,
		                CUDA_R_16BF, in, &zero, Y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
		                CUBLAS_GEMM_DEFAULT));
		break;
	case OP:
		gpu_matmul_cublas(st, Y, X, W, DICE_BF16, N, in, out);
		break;
	case FIXED:
		gpu_matmul_fixed_path(st, Y, X, W, DICE_BF16, N, in, out, 2);
		break;
	case TILED:
		gpu_matmul_fixed_tiled(st, Y, X, W, DICE_BF16, N, in, out, v, split);
		break;
	}
}

/* median ms of one launch */
static double time_ms(enum side s, int N, int in, int out, int v, int split)
{
	cudaEvent_t e0, e1;
	double *t = (double *)malloc(sizeof(double) * REPS);
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	launch(s, N, in, out, v, split);        /* warm-up: handles, attributes, scratch */
	CK(cudaStreamSynchronize(st));
	for (int r = 0; r < REPS; r++) {
		float ms;
		CK(cudaEventRecord(e0, st));
		for (int i = 0; i < INNER; i++)
			launch(s, N, in, out, v, split);
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		t[r] = ms / INNER;
	}
	CK(cudaGetLastError());
	bench_sort(t, REPS);
	double m = t[REPS / 2];
	free(t);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return m;
}

/* host microseconds a call of the tiled path takes to enqueue (the mean over 100 calls, the
 * GPU left to catch up after; the queue holds them all) */
static double host_us(int N, int in, int out)
{
	struct timespec a, b;
	launch(FIXED, N, in, out, 0, 0);
	CK(cudaStreamSynchronize(st));
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 100; i++)
		launch(FIXED, N, in, out, 0, 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	CK(cudaStreamSynchronize(st));
	return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 100 / 1e3;
}

/* whether name is one of the comma-separated list */
static int bench_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
			return 1;
	}
	return 0;
}

static int geometry(const char *g, int *C, int *QD, int *KVD, int *I)
{
	*QD = 4096, *KVD = 1024;
	if (!strcmp(g, "1.7b"))
		*C = 2048, *QD = 2048, *I = 6144;
	else if (!strcmp(g, "4b"))
		*C = 2560, *I = 9728;
	else if (!strcmp(g, "8b"))
		*C = 4096, *I = 12288;
	else
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	char geoms[64] = "1.7b,4b,8b", ns[64] = "512,2048,8192";
	int sweep = argc > 4 && !strcmp(argv[4], "sweep");
	const size_t XMAX = (size_t)8192 * 12288, WMAX = (size_t)24576 * 4096;
	const size_t YMAX = (size_t)8192 * 24576;

	if (argc > 1)
		REPS = atoi(argv[1]) > 0 ? atoi(argv[1]) : REPS;
	if (argc > 2)
		snprintf(geoms, sizeof geoms, "%s", argv[2]);
	if (argc > 3)
		snprintf(ns, sizeof ns, "%s", argv[3]);
	st = gpu_stream();
	CB(cublasCreate(&cub));
	CB(cublasSetStream(cub, st));
	CK(cudaMalloc((void **)&X, XMAX * 4));
	CK(cudaMalloc((void **)&XB, XMAX * 2));
	CK(cudaMalloc((void **)&W, WMAX * 2));
	CK(cudaMalloc((void **)&Y, YMAX * 4));
	fill_kernel<<<4096, 256, 0, st>>>(X, XB, XMAX, 1u);
	fill_kernel<<<4096, 256, 0, st>>>(NULL, W, WMAX, 2u);
	CK(cudaGetLastError());
	CK(cudaStreamSynchronize(st));

	printf("%-5s %-5s %5s %6s %6s | %9s %7s | %9s | %9s %7s %6s | %9s %7s %6s | %s\n", "geom",
	       "op", "N", "in", "out", "cublas ms", "TFLOP/s", "op ms", "mma ms", "TFLOP/s", "/cubl",
	       "fixed ms", "TFLOP/s", "/cubl", "tile shape");
	for (char *g = strtok(geoms, ","); g; g = strtok(NULL, ",")) {
		int C, QD, KVD, I;
		if (geometry(g, &C, &QD, &KVD, &I)) {
			fprintf(stderr, "matmul-fixed: unknown geometry %s\n", g);
			return 2;
		}
		const char *opn[] = { "qkv", "o", "gu", "down" };
		int ins[] = { C, QD, C, I }, outs[] = { QD + 2 * KVD, C, 2 * I, C };
		char nl[64];
		snprintf(nl, sizeof nl, "%s", ns);
		char *save = NULL;
		for (char *n = strtok_r(nl, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
			int N = atoi(n);
			for (int o = 0; o < 4; o++) {
				int in = ins[o], out = outs[o], split;
				if (getenv("MF_OPS") && !bench_listed(getenv("MF_OPS"), opn[o]))
					continue;
				double fl = 2.0 * N * in * out * 1e-9;   /* GFLOP: / ms = TFLOP/s */
				double tc = time_ms(CUBLAS, N, in, out, 0, 0);
				double to = time_ms(OP, N, in, out, 0, 0);
				gpu_set_wgmma(0);
				double tm = time_ms(FIXED, N, in, out, 0, 0);
				gpu_set_wgmma(-1);
				double tf = time_ms(FIXED, N, in, out, 0, 0);
				int v = gpu_matmul_fixed_choice(N, in, out, &split);
				printf("%-5s %-5s %5d %6d %6d | %9.4f %7.1f | %9.4f | %9.4f %7.1f %5.0f%% | %9.4f "
				       "%7.1f %5.0f%% | %s%s\n", g, opn[o], N, in, out, tc, fl / tc, to, tm, fl / tm,
				       100 * tc / tm, tf, fl / tf, 100 * tc / tf, gpu_matmul_fixed_variant_name(v),
				       split ? " split" : "");
				gpu_set_mx_rows(0);
				double tn = time_ms(FIXED, N, in, out, 0, 0);
				v = gpu_matmul_fixed_choice(N, in, out, &split);
				gpu_set_mx_rows(-1);
				printf("  rows off: fixed %.4f ms %.0f%% (%s), default/this %.3f\n", tn,
				       100 * tc / tn, gpu_matmul_fixed_variant_name(v), tf / tn);
				for (int wv = 0, any = 0; wv < gpu_matmul_fixed_variants(); wv++) {
					const char *name = gpu_matmul_fixed_variant_name(wv);
					if (strncmp(name, "wgmma", 5))
						continue;
					double t = time_ms(TILED, N, in, out, wv, 0);
					printf("%s %s %.4f ms %.0f%%", any++ ? "," : "  wgmma:", name + 6, t,
					       100 * tc / t);
					if (wv + 1 == gpu_matmul_fixed_variants())
						printf("\n");
				}
				double hc = host_us(N, in, out);
				gpu_set_mx_mapcache(0);
				double hn = host_us(N, in, out);
				gpu_set_mx_mapcache(1);
				gpu_set_wgmma(0);
				double hm = host_us(N, in, out);
				gpu_set_wgmma(-1);
				printf("  host us a call: fixed %.2f, its tensor maps encoded each call %.2f, "
				       "mma.sync %.2f\n", hc, hn, hm);
				fflush(stdout);
				if (!sweep)
					continue;
				for (v = 0; v < gpu_matmul_fixed_variants(); v++) {
					/* the wgmma ones always walk the segments: no split row */
					int wg = !strncmp(gpu_matmul_fixed_variant_name(v), "wgmma", 5);
					for (split = 0; split < 2 - wg; split++) {
						double t = time_ms(TILED, N, in, out, v, split);
						printf("  sweep %-5s %-5s %5d %-22s %-5s %9.4f %7.1f %5.0f%%\n", g,
						       opn[o], N, gpu_matmul_fixed_variant_name(v),
						       split ? "split" : "", t, fl / t, 100 * tc / t);
					}
				}
				fflush(stdout);
			}
		}
	}
	return 0;
}
