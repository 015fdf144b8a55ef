/* swiglu_bwd.cu: the backward of y = silu(gate) * up, elementwise over (N,C):
 *   dup = dy g s,  dgate = dy up s (1 + g (1 - s)),  s = sigmoid(g)
 * Each element is read before it is written by the same thread: dgate may equal dy.
 * gpu_swiglu_backward_xb: the same values rounded to bf16 (as gpu_cast_bf16 rounds them), the
 * gate/up backward GEMMs' dy in one pass. */
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
