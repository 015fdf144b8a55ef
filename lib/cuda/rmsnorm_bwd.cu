/* rmsnorm_bwd.cu: the backward of y = x r w, r = 1/sqrt(mean(x^2) + eps), per row of C:
 *   dx_c = r w_c dy_c - x_c r^3/C sum_j dy_j w_j x_j   (write; dx may equal dy)
 *   dw_c += sum over rows of dy_c x_c r                 (accumulate; skipped when NULL)
 * Three kernels in stream order, so dx may overwrite dy: per-row r and k = r^3 dot / C (one
 * block per row, into the scratch), dw (a 32-column x 8-row tile per block over a strided
 * slice of the rows, one atomicAdd per column and block), then dx elementwise. */
#include "gpu_bwd.h"
#include "common.cuh"

#define RB_THREADS 256
#define RB_DW_ROWS 8        /* threadIdx.y of the dw kernel */
#define RB_DW_GRIDY 256     /* row slices of the dw kernel: atomics per column */

/* ---------------------------------------------------------------- CUDA kernels */

/* sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it */
static __device__ float rb_block_sum(float v, float *part)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	v = warp_sum(v);
	__syncthreads();                    /* part may be in use by a previous call */
	if (lane == 0)
		part[wid] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : 0.0f;
	return warp_sum(v);
}

/* stats[2n] = r, stats[2n+1] = r^3 dot / C for row n = blockIdx.x */
static __global__ void rb_stats_kernel(float *stats, const float *dy, const float *x,
                                       const void *w, int dt, int C, float eps)
{
	__shared__ float part[32];
	const float *xn = x + (size_t)blockIdx.x * C, *dyn = dy + (size_t)blockIdx.x * C;
	float ss = 0.0f, dot = 0.0f;

	for (int c = threadIdx.x; c < C; c += blockDim.x) {
		ss += xn[c] * xn[c];
		dot += dyn[c] * gpu_load_w(w, dt, (size_t)c) * xn[c];
	}
	ss = rb_block_sum(ss, part);
	dot = rb_block_sum(dot, part);
	if (threadIdx.x == 0) {
		float r = 1.0f / sqrtf(ss / (float)C + eps);
		stats[2 * (size_t)blockIdx.x] = r;
		stats[2 * (size_t)blockIdx.x + 1] = r * r * r * dot / (float)C;
	}
}

/* dw[c] += sum_n dy[n,c] x[n,c] r[n]; block (32, RB_DW_ROWS), columns blockIdx.x*32 + tx */
static __global__ void rb_dw_kernel(float *dw, const float *stats, const float *dy,
                                    const float *x, int N, int C)
{
	__shared__ float red[RB_DW_ROWS][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0.0f;

	if (c < C)
		for (int n = blockIdx.y * RB_DW_ROWS + threadIdx.y; n < N;
		     n += gridDim.y * RB_DW_ROWS) {
			size_t i = (size_t)n * C + c;
			acc += dy[i] * x[i] * stats[2 * (size_t)n];
		}
	red[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		float s = 0.0f;
		for (int k = 0; k < RB_DW_ROWS; k++)
			s += red[k][threadIdx.x];
		atomicAdd(dw + c, s);
	}
}

static __global__ void rb_dx_kernel(float *dx, const float *stats, const float *dy,
                                    const float *x, const void *w, int dt, int N, int C)
{
	size_t total = (size_t)N * C;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / C;
		int c = (int)(i % C);
		float r = stats[2 * n], k = stats[2 * n + 1];
		dx[i] = r * gpu_load_w(w, dt, (size_t)c) * dy[i] - k * x[i];
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_rmsnorm_backward(cudaStream_t st, float *dx, float *dw, const float *dy, const float *x,
                         const void *w, enum dice_dtype wdt, int N, int C, float eps)
{
	GPU_REQUIRE(N >= 0 && C > 0 && dx && dy && x && w, "rmsnorm_backward");
	if (N == 0)
		return 0;
	float *stats = (float *)gpu_scratch((size_t)N * 2 * sizeof(float));
	int threads = C >= RB_THREADS ? RB_THREADS : 32 * CEIL_DIV(C, 32);
	rb_stats_kernel<<<N, threads, 0, st>>>(stats, dy, x, w, (int)wdt, C, eps);
	CUDA_CHECK_LAUNCH();
	if (dw) {
		int gy = CEIL_DIV(N, RB_DW_ROWS);
		dim3 grid(CEIL_DIV(C, 32), gy < RB_DW_GRIDY ? gy : RB_DW_GRIDY), block(32, RB_DW_ROWS);
		rb_dw_kernel<<<grid, block, 0, st>>>(dw, stats, dy, x, N, C);
		CUDA_CHECK_LAUNCH();
	}
	size_t g = CEIL_DIV((size_t)N * C, (size_t)256);
	rb_dx_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(dx, stats, dy, x, w, (int)wdt, N, C);
	CUDA_CHECK_LAUNCH();
	return 0;
}
