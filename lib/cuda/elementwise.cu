/* elementwise.cu: the pointwise ops: swiglu y = silu(gate) * up (y may equal gate; swiglu_xb:
 * y rounded to bf16; swiglu_cat_bb: bf16 rows [gate | up] in, bf16 out), and add y += x. Grid-stride loops, 16-byte accesses when the pointers
 * allow. */
#include "gpu_bwd.h"
#include "common.cuh"

#define EW_THREADS 256

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void swiglu_kernel(float *y, const float *gate, const float *up, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = gpu_swiglu1(gate[i], up[i]);
}

static __global__ void swiglu4_kernel(float4 *y, const float4 *gate, const float4 *up, size_t n4)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 g = gate[i], u = up[i], r;
		r.x = gpu_swiglu1(g.x, u.x);
		r.y = gpu_swiglu1(g.y, u.y);
		r.z = gpu_swiglu1(g.z, u.z);
		r.w = gpu_swiglu1(g.w, u.w);
		y[i] = r;
	}
}

/* yb = bf16(swiglu): 4 results stored as 8 bytes */
static __global__ void swiglu4_xb_kernel(uint2 *y, const float4 *gate, const float4 *up,
                                         size_t n4)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 g = gate[i], u = up[i];
		y[i] = make_uint2(gpu_pack2(gpu_swiglu1(g.x, u.x), gpu_swiglu1(g.y, u.y), 0),
		                  gpu_pack2(gpu_swiglu1(g.z, u.z), gpu_swiglu1(g.w, u.w), 0));
	}
}

static __global__ void swiglu_xb_kernel(__nv_bfloat16 *y, const float *gate, const float *up,
                                        size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] = __float2bfloat16_rn(gpu_swiglu1(gate[i], up[i]));
}

/* the SwiGLU of two bf16 pairs (gate g, up u), packed as bf16 */
static __device__ __forceinline__ unsigned swiglu_bf2(unsigned g, unsigned u)
{
	float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)&g);
	float2 b = __bfloat1622float2(*(const __nv_bfloat162 *)&u);
	return gpu_pack2(gpu_swiglu1(a.x, b.x), gpu_swiglu1(a.y, b.y), 0);
}

/* swiglu_cat_bb, 8 columns a thread: hb and gub as 16-byte pieces, I8 = I / 8 per row */
static __global__ void swiglu_cat_bb8_kernel(uint4 *hb, const uint4 *gu, size_t I8, size_t n8)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / I8, c = i - r * I8;
		uint4 g = gu[r * 2 * I8 + c], u = gu[r * 2 * I8 + I8 + c];
		hb[i] = make_uint4(swiglu_bf2(g.x, u.x), swiglu_bf2(g.y, u.y), swiglu_bf2(g.z, u.z),
		                   swiglu_bf2(g.w, u.w));
	}
}

static __global__ void swiglu_cat_bb_kernel(__nv_bfloat16 *hb, const __nv_bfloat16 *gu, size_t I,
                                            size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / I, c = i - r * I;
		float g = __bfloat162float(gu[r * 2 * I + c]), u = __bfloat162float(gu[r * 2 * I + I + c]);
		hb[i] = __float2bfloat16_rn(gpu_swiglu1(g, u));
	}
}

static __global__ void add_kernel(float *y, const float *x, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		y[i] += x[i];
}

static __global__ void add4_kernel(float4 *y, const float4 *x, size_t n4)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 a = y[i], b = x[i];
		a.x += b.x;
		a.y += b.y;
		a.z += b.z;
		a.w += b.w;
		y[i] = a;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

static int ew_grid(size_t n)
{
	size_t g = CEIL_DIV(n, (size_t)EW_THREADS);
	return (int)(g < 8192 ? (g ? g : 1) : 8192);
}

static int vec4_ok(size_t n, const void *a, const void *b, const void *c)
{
	return n % 4 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

int gpu_swiglu(cudaStream_t st, float *y, const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;

	GPU_REQUIRE(N >= 0 && C >= 0, "swiglu");
	if (n == 0)
		return 0;
	if (vec4_ok(n, y, gate, up))
		swiglu4_kernel<<<ew_grid(n / 4), EW_THREADS, 0, st>>>((float4 *)y, (const float4 *)gate,
		                                                    (const float4 *)up, n / 4);
	else
		swiglu_kernel<<<ew_grid(n), EW_THREADS, 0, st>>>(y, gate, up, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_swiglu_xb(cudaStream_t st, void *yb, const float *gate, const float *up, int N, int C)
{
	size_t n = (size_t)N * C;

	GPU_REQUIRE(N >= 0 && C >= 0, "swiglu_xb");
	if (n == 0)
		return 0;
	if (vec4_ok(n, gate, up, up) && ((uintptr_t)yb & 7) == 0)
		swiglu4_xb_kernel<<<ew_grid(n / 4), EW_THREADS, 0, st>>>(
			(uint2 *)yb, (const float4 *)gate, (const float4 *)up, n / 4);
	else
		swiglu_xb_kernel<<<ew_grid(n), EW_THREADS, 0, st>>>((__nv_bfloat16 *)yb, gate, up, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_swiglu_cat_bb(cudaStream_t st, void *hb, const void *gub, int N, int I)
{
	size_t n = (size_t)N * I;

	GPU_REQUIRE(N >= 0 && I >= 0, "swiglu_cat_bb");
	if (n == 0)
		return 0;
	if (I % 8 == 0 && (((uintptr_t)hb | (uintptr_t)gub) & 15) == 0)
		swiglu_cat_bb8_kernel<<<ew_grid(n / 8), EW_THREADS, 0, st>>>(
			(uint4 *)hb, (const uint4 *)gub, (size_t)I / 8, n / 8);
	else
		swiglu_cat_bb_kernel<<<ew_grid(n), EW_THREADS, 0, st>>>(
			(__nv_bfloat16 *)hb, (const __nv_bfloat16 *)gub, (size_t)I, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_add(cudaStream_t st, float *y, const float *x, size_t n)
{
	if (n == 0)
		return 0;
	if (vec4_ok(n, y, x, x))
		add4_kernel<<<ew_grid(n / 4), EW_THREADS, 0, st>>>((float4 *)y, (const float4 *)x, n / 4);
	else
		add_kernel<<<ew_grid(n), EW_THREADS, 0, st>>>(y, x, n);
	CUDA_CHECK_LAUNCH();
	return 0;
}
