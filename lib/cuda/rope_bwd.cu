/* rope_bwd.cu: the backward of rotate-half RoPE, in place on dx(N,NH,HD): the rotation by
 * minus the angle. With P = negate the second half of every head, R(-a) = P R(a) P, so the
 * backward is P, the forward kernel (gpu_rope: same inv_freq table, same cos/sin), P again;
 * negation is exact, so this equals the CPU twin's formula up to the forward's rounding. */
#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void negate_half_kernel(float *x, size_t rows, int HD)
{
	int half = HD / 2;
	size_t total = rows * half;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / half;
		int j = (int)(i % half);
		float *p = x + r * HD + half + j;
		*p = -*p;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

static int negate_half(cudaStream_t st, float *x, size_t rows, int HD)
{
	size_t g = CEIL_DIV(rows * (HD / 2), (size_t)256);
	negate_half_kernel<<<(int)(g < 8192 ? (g ? g : 1) : 8192), 256, 0, st>>>(x, rows, HD);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_rope_backward(cudaStream_t st, float *dx, const int *pos, int N, int NH, int HD,
                      float theta)
{
	GPU_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024, "rope_backward");
	if (N == 0)
		return 0;
	negate_half(st, dx, (size_t)N * NH, HD);
	if (gpu_rope(st, dx, pos, N, NH, HD, theta) != 0)
		return -1;
	return negate_half(st, dx, (size_t)N * NH, HD);
}
