/* swiglu_bwd.cu: the backward of y = silu(gate) * up, elementwise over (N,C):
 *   dup = dy g s,  dgate = dy up s (1 + g (1 - s)),  s = sigmoid(g)
 * Each element is read before it is written by the same thread: dgate may equal dy. */
#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void swiglu_bwd_kernel(float *dgate, float *dup, const float *dy,
                                         const float *gate, const float *up, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float g = gate[i], u = up[i], d = dy[i];
		float sg = 1.0f / (1.0f + expf(-g));
		dup[i] = d * g * sg;
		dgate[i] = d * u * sg * (1.0f + g * (1.0f - sg));
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
