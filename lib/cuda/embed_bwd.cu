/* embed_bwd.cu: the backward of the embedding lookup: dw(V,C) += dy(N,C) rows scattered at
 * ids(N). One thread per element of dy with an atomicAdd, so repeated ids add up (in no
 * fixed order: equal to the CPU twin up to fp32 rounding). ids are not range-checked. */
#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void embed_bwd_kernel(float *dw, const int *ids, const float *dy, int N, int C)
{
	size_t total = (size_t)N * C;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int n = (int)(i / C), c = (int)(i % C);
		atomicAdd(dw + (size_t)ids[n] * C + c, dy[i]);
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_embed_backward(cudaStream_t st, float *dw, const int *ids, const float *dy, int N, int C)
{
	GPU_REQUIRE(N >= 0 && C > 0, "embed_backward");
	if (N == 0)
		return 0;
	size_t g = CEIL_DIV((size_t)N * C, (size_t)256);
	embed_bwd_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(dw, ids, dy, N, C);
	CUDA_CHECK_LAUNCH();
	return 0;
}
