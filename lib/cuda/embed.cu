/* embed.cu: y(N,C) = rows ids[n] of the embedding table w(V,C) (fp32, bf16 or fp16), as
 * fp32. ids live on the device and are not range-checked (as the CPU twin). */
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void embed_kernel(float *y, const int *ids, const void *w, int dt, int N, int C)
{
	size_t total = (size_t)N * C;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int n = (int)(i / C), c = (int)(i % C);
		y[i] = gpu_load_w(w, dt, (size_t)ids[n] * C + c);
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_embed(cudaStream_t st, float *y, const int *ids, const void *w, enum dice_dtype wdt,
              int N, int C)
{
	GPU_REQUIRE(N >= 0 && C > 0, "embed");
	if (N == 0)
		return 0;
	size_t g = CEIL_DIV((size_t)N * C, (size_t)256);
	embed_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(y, ids, w, (int)wdt, N, C);
	CUDA_CHECK_LAUNCH();
	return 0;
}
