/* rope.cu: rotate-half RoPE in place on x(N,NH,HD) at positions pos(N). inv_freq(HD/2) is
 * computed on the host exactly as the CPU twin does (fp32 powf), uploaded once per
 * (theta, HD) and kept for the process; the angle pos*inv_freq and its cos/sin are taken in
 * fp32 on the GPU. One thread per (n, j < HD/2): one sincos, applied to every head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void rope_kernel(float *x, const int *pos, const float *inv_freq,
                                   int N, int NH, int HD)
{
	int half = HD / 2;
	size_t total = (size_t)N * half;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int j = (int)(i % half), n = (int)(i / half);
		float ang = (float)pos[n] * inv_freq[j];
		float c, s;
		sincosf(ang, &s, &c);
		for (int h = 0; h < NH; h++) {
			float *xh = x + ((size_t)n * NH + h) * HD;
			float x1 = xh[j], x2 = xh[j + half];
			xh[j] = x1 * c - x2 * s;
			xh[j + half] = x2 * c + x1 * s;
		}
	}
}

/* rmsnorm (per row of HD, weight w) then RoPE, y(N,NH,HD) from x (y may equal x): a warp a
 * token, its lane t holding columns t + 32 e (e < E = HD / 32, so column j < HD / 2 and its
 * partner j + HD / 2 are elements e and e + E / 2 of one lane), one sincos a column for the
 * token's NH heads; the products in the order of gpu_rmsnorm then gpu_rope */
static __device__ __forceinline__ void rr_put(float *y, float v) { *y = v; }
static __device__ __forceinline__ void rr_put(__nv_bfloat16 *y, float v)
{
	*y = __float2bfloat16_rn(v);
}

template <int E, typename Y>
static __global__ void rmsnorm_rope_kernel(Y *y, const float *x, const void *w, int dt,
                                           const int *pos, const float *inv_freq, int N, int NH,
                                           float eps)
{
	const int HD = 32 * E;
	int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), t = threadIdx.x & 31;
	float wv[E], cs[E / 2], sn[E / 2];

	if (n >= N)
		return;
#pragma unroll
	for (int e = 0; e < E; e++)
		wv[e] = gpu_load_w(w, dt, (size_t)(t + 32 * e));
#pragma unroll
	for (int e = 0; e < E / 2; e++)
		sincosf((float)pos[n] * inv_freq[t + 32 * e], &sn[e], &cs[e]);
	for (int h = 0; h < NH; h++) {
		size_t o = ((size_t)n * NH + h) * HD + t;
		float v[E], ss = 0.0f;
#pragma unroll
		for (int e = 0; e < E; e++) {
			v[e] = x[o + 32 * e];
			ss += v[e] * v[e];
		}
		float r = 1.0f / sqrtf(warp_sum(ss) / (float)HD + eps);
#pragma unroll
		for (int e = 0; e < E; e++)
			v[e] = v[e] * r * wv[e];
#pragma unroll
		for (int e = 0; e < E / 2; e++) {
			float x1 = v[e], x2 = v[e + E / 2];
			rr_put(y + o + 32 * e, x1 * cs[e] - x2 * sn[e]);
			rr_put(y + o + 32 * (e + E / 2), x2 * cs[e] + x1 * sn[e]);
		}
	}
}

/* ---------------------------------------------------------------- kernel launchers */

/* The tables made so far, each kept until the process ends: a replayed CUDA graph holds the
 * address its kernels read, so a table, once handed out, is never freed or moved (a model
 * needs one; each is HD / 2 floats) */
static struct rope_table {
	float theta;
	int HD;
	float *d;
} *tables;
static int ntables;

const float *gpu_rope_table(float theta, int HD)
{
	float h[512];

	for (int i = 0; i < ntables; i++)
		if (tables[i].theta == theta && tables[i].HD == HD)
			return tables[i].d;
	struct rope_table *t = (struct rope_table *)realloc(tables, sizeof *t * (ntables + 1));
	if (!t) {
		warn_msg("cuda: out of host memory for a rope table");
		abort();
	}
	tables = t;
	t += ntables;
	for (int j = 0; j < HD / 2; j++)        /* as ops_cpu.c: fp32 powf on the host */
		h[j] = 1.0f / powf(theta, (float)(2 * j) / (float)HD);
	CUDA_CHECK(cudaMalloc(&t->d, sizeof(float) * (HD / 2)));
	CUDA_CHECK(cudaMemcpy(t->d, h, sizeof(float) * (HD / 2), cudaMemcpyHostToDevice));
	t->theta = theta;
	t->HD = HD;
	ntables++;
	return t->d;
}

/* the one pass (HD 64, 128, 256) into y of type Y */
template <typename Y>
static void rr_launch(cudaStream_t st, Y *y, const float *x, const void *w, int d, const int *pos,
                      const float *inv_freq, int N, int NH, int HD, float eps)
{
	int grid = CEIL_DIV(N, 8);

	if (HD == 64)
		rmsnorm_rope_kernel<2><<<grid, 256, 0, st>>>(y, x, w, d, pos, inv_freq, N, NH, eps);
	else if (HD == 128)
		rmsnorm_rope_kernel<4><<<grid, 256, 0, st>>>(y, x, w, d, pos, inv_freq, N, NH, eps);
	else
		rmsnorm_rope_kernel<8><<<grid, 256, 0, st>>>(y, x, w, d, pos, inv_freq, N, NH, eps);
}

int gpu_rmsnorm_rope_xb(cudaStream_t st, void *yb, const float *x, const void *w,
                        enum dice_dtype wdt, const int *pos, int N, int NH, int HD, float theta,
                        float eps)
{
	GPU_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024, "rmsnorm_rope_xb");
	if (N == 0)
		return 0;
	if (HD != 64 && HD != 128 && HD != 256) {       /* the fp32 op, then the cast */
		size_t n = (size_t)N * NH * HD;
		float *s = (float *)gpu_scratch(n * sizeof(float));
		if (gpu_rmsnorm_rope(st, s, x, w, wdt, pos, N, NH, HD, theta, eps))
			return -1;
		return gpu_cast_bf16(st, yb, s, n);
	}
	rr_launch(st, (__nv_bfloat16 *)yb, x, w, (int)wdt, pos, gpu_rope_table(theta, HD), N, NH,
	          HD, eps);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_rmsnorm_rope(cudaStream_t st, float *y, const float *x, const void *w,
                     enum dice_dtype wdt, const int *pos, int N, int NH, int HD, float theta,
                     float eps)
{
	GPU_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024, "rmsnorm_rope");
	if (N == 0)
		return 0;
	if (HD != 64 && HD != 128 && HD != 256) {       /* the two ops */
		if (gpu_rmsnorm(st, y, x, w, wdt, N * NH, HD, eps))
			return -1;
		return gpu_rope(st, y, pos, N, NH, HD, theta);
	}
	rr_launch(st, y, x, w, (int)wdt, pos, gpu_rope_table(theta, HD), N, NH, HD, eps);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_rope(cudaStream_t st, float *x, const int *pos, int N, int NH, int HD, float theta)
{
	GPU_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024, "rope");
	if (N == 0)
		return 0;
	const float *inv_freq = gpu_rope_table(theta, HD);
	size_t total = (size_t)N * (HD / 2);
	int grid = (int)(CEIL_DIV(total, (size_t)256) < 65536 ? CEIL_DIV(total, (size_t)256) : 65536);
	rope_kernel<<<grid, 256, 0, st>>>(x, pos, inv_freq, N, NH, HD);
	CUDA_CHECK_LAUNCH();
	return 0;
}
