/* swiglu_bwd.cu: the backward of y = silu(gate) * up, elementwise over (N,C):
 *   dup = dy g s,  dgate = dy up s (1 + g (1 - s)),  s = sigmoid(g)
 * Each element is read before it is written by the same thread: dgate may equal dy.
 * gpu_swiglu_backward_xb: the same values rounded to bf16 (as gpu_cast_bf16 rounds them), the
 * gate/up backward GEMMs' dy in one pass; gpu_swiglu_cat_backward_bb: gate and up given in
 * bf16 as rows [gate | up], the result in bf16 rows [dgate | dup] (one GEMM pair over both). */
#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

/* one element: *dg, *du from dy d, gate g, up u */
static __device__ __forceinline__ void swiglu_bwd1(float d, float g, float u, float *dg, float *du)
{
	float sg = 1.0f / (1.0f + expf(-g));
	*du = d * g * sg;
	*dg = d * u * sg * (1.0f + g * (1.0f - sg));
}

static __global__ void swiglu_bwd_kernel(float *dgate, float *dup, const float *dy,
                                         const float *gate, const float *up, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float dg, du;
		swiglu_bwd1(dy[i], gate[i], up[i], &dg, &du);
		dup[i] = du;
		dgate[i] = dg;
	}
}

static __global__ void swiglu_bwd_xb_kernel(__nv_bfloat16 *dgate, __nv_bfloat16 *dup,
                                            const float *dy, const float *gate, const float *up,
                                            size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float dg, du;
		swiglu_bwd1(dy[i], gate[i], up[i], &dg, &du);
		dup[i] = __float2bfloat16_rn(du);
		dgate[i] = __float2bfloat16_rn(dg);
	}
}

/* swiglu_cat_backward_bb, 8 columns a thread: dgu and gu rows [gate | up] as 16-byte pieces
 * of bf16 (I8 = I / 8 a half row), dy as float4 pairs */
static __global__ void swiglu_cat_bwd_bb8_kernel(uint4 *dgu, const float4 *dy, const uint4 *gu,
                                                 size_t I8, size_t n8)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / I8, c = i - r * I8;
		uint4 g4 = gu[r * 2 * I8 + c], u4 = gu[r * 2 * I8 + I8 + c];
		float4 d0 = __ldcs(dy + 2 * i), d1 = __ldcs(dy + 2 * i + 1);
		const unsigned *g = &g4.x, *u = &u4.x;
		float d[8] = { d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w };
		unsigned og[4], ou[4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&g[j]);
			float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u[j]);
			float dg0, du0, dg1, du1;
			swiglu_bwd1(d[2 * j], a.x, b.x, &dg0, &du0);
			swiglu_bwd1(d[2 * j + 1], a.y, b.y, &dg1, &du1);
			og[j] = gpu_pack2(dg0, dg1, 0);
			ou[j] = gpu_pack2(du0, du1, 0);
		}
		dgu[r * 2 * I8 + c] = make_uint4(og[0], og[1], og[2], og[3]);
		dgu[r * 2 * I8 + I8 + c] = make_uint4(ou[0], ou[1], ou[2], ou[3]);
	}
}

static __global__ void swiglu_cat_bwd_bb_kernel(__nv_bfloat16 *dgu, const float *dy,
                                                const __nv_bfloat16 *gu, size_t I, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / I, c = i - r * I, o = r * 2 * I + c;
		float dg, du;
		swiglu_bwd1(dy[i], __bfloat162float(gu[o]), __bfloat162float(gu[o + I]), &dg, &du);
		dgu[o] = __float2bfloat16_rn(dg);
		dgu[o + I] = __float2bfloat16_rn(du);
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_swiglu_backward(cudaStream_t st, float *dgate, float *dup, const float *dy,
                        const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;

	GPU_REQUIRE(N >= 0 && C >= 0, "swiglu_backward");
	GPU_REQUIRE(dup != dy && dup != gate && dup != up, "swiglu_backward aliasing");
	if (n == 0)
		return 0;
	size_t g = CEIL_DIV(n, (size_t)256);
	swiglu_bwd_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(dgate, dup, dy, gate, up, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_swiglu_backward_xb(cudaStream_t st, void *dgate, void *dup, const float *dy,
                           const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;

	GPU_REQUIRE(N >= 0 && C >= 0, "swiglu_backward_xb");
	if (n == 0)
		return 0;
	size_t g = CEIL_DIV(n, (size_t)256);
	swiglu_bwd_xb_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(
		(__nv_bfloat16 *)dgate, (__nv_bfloat16 *)dup, dy, gate, up, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_swiglu_cat_backward_bb(cudaStream_t st, void *dgub, const float *dy, const void *gub,
                               int N, int I)
{
	size_t n = (size_t)N * I;

	GPU_REQUIRE(N >= 0 && I >= 0 && dgub != gub && dgub != (const void *)dy,
	            "swiglu_cat_backward_bb");
	if (n == 0)
		return 0;
	size_t g = CEIL_DIV(n, (size_t)256);
	if (I % 8 == 0 && (((uintptr_t)dgub | (uintptr_t)gub | (uintptr_t)dy) & 15) == 0) {
		g = CEIL_DIV(n / 8, (size_t)256);
		swiglu_cat_bwd_bb8_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(
			(uint4 *)dgub, (const float4 *)dy, (const uint4 *)gub, (size_t)I / 8, n / 8);
	} else {
		swiglu_cat_bwd_bb_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(
			(__nv_bfloat16 *)dgub, dy, (const __nv_bfloat16 *)gub, (size_t)I, n);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
