/* rmsnorm.cu: y(N,C) = x / sqrt(mean(x^2) + eps) * w(C), one block per row, the sum of
 * squares reduced in fp32 across the block (16-byte accesses when the row allows). y may
 * equal x (each element is read and then written by the same thread). rmsnorm_xb: the same
 * kernel with y rounded to bf16 as it is stored. */
#include "gpu_bwd.h"
#include "common.cuh"

#define RMS_THREADS 256

/* ---------------------------------------------------------------- CUDA kernels */

/* stores of 4 and 1 results: fp32, or rounded to bf16 (rmsnorm_xb) */
static __device__ __forceinline__ void st4(float *y, float4 v)
{
	*(float4 *)y = v;
}

static __device__ __forceinline__ void st4(__nv_bfloat16 *y, float4 v)
{
	*(uint2 *)y = make_uint2(gpu_pack2(v.x, v.y, 0), gpu_pack2(v.z, v.w, 0));
}

static __device__ __forceinline__ void st1(float *y, float v)
{
	*y = v;
}

static __device__ __forceinline__ void st1(__nv_bfloat16 *y, float v)
{
	*y = __float2bfloat16_rn(v);
}

template <typename Y>
static __global__ void rmsnorm_kernel(Y *y, const float *x, const void *w, int dt, int C,
                                      float eps, int vec4)
{
	__shared__ float part[RMS_THREADS / 32];
	const float *xn = x + (size_t)blockIdx.x * C;
	Y *yn = y + (size_t)blockIdx.x * C;
	float ss = 0.0f;

	if (vec4) {
		for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
			float4 v = *(const float4 *)(xn + c);
			ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			ss += xn[c] * xn[c];
	}
	float r = 1.0f / sqrtf(block_sum(ss, part) / (float)C + eps);
	if (vec4) {
		for (int c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
			float4 v = *(const float4 *)(xn + c);
			v.x = v.x * r * gpu_load_w(w, dt, (size_t)c);
			v.y = v.y * r * gpu_load_w(w, dt, (size_t)c + 1);
			v.z = v.z * r * gpu_load_w(w, dt, (size_t)c + 2);
			v.w = v.w * r * gpu_load_w(w, dt, (size_t)c + 3);
			st4(yn + c, v);
		}
	} else {
		for (int c = threadIdx.x; c < C; c += blockDim.x)
			st1(yn + c, xn[c] * r * gpu_load_w(w, dt, (size_t)c));
	}
}

/* ---------------------------------------------------------------- kernel launchers */

/* Y float (gpu_rmsnorm) or bf16 (gpu_rmsnorm_xb); ya: y's alignment needed for 4 at a time */
template <typename Y>
static int rmsnorm_launch(cudaStream_t st, Y *y, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int C, float eps)
{
	GPU_REQUIRE(N >= 0 && C > 0, "rmsnorm");
	if (N == 0)
		return 0;
	int vec4 = C % 4 == 0 && (((uintptr_t)x & 15) == 0) &&
	           (((uintptr_t)y & (4 * sizeof(Y) - 1)) == 0);
	int per = vec4 ? 4 : 1;
	int threads = C >= RMS_THREADS * per ? RMS_THREADS : 32 * CEIL_DIV(CEIL_DIV(C, per), 32);
	rmsnorm_kernel<Y><<<N, threads, 0, st>>>(y, x, w, (int)wdt, C, eps, vec4);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_rmsnorm(cudaStream_t st, float *y, const float *x, const void *w, enum dice_dtype wdt,
                int N, int C, float eps)
{
	return rmsnorm_launch(st, y, x, w, wdt, N, C, eps);
}

int gpu_rmsnorm_xb(cudaStream_t st, void *yb, const float *x, const void *w, enum dice_dtype wdt,
                   int N, int C, float eps)
{
	return rmsnorm_launch(st, (__nv_bfloat16 *)yb, x, w, wdt, N, C, eps);
}
