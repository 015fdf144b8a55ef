/* train.cu: the optimizer-side training ops of the CUDA backend: zero (a memset on the
 * stream), sumsq (sum of squares in double: per-block partials in the scratch, one block
 * folds them in a fixed order, so the result is deterministic; returned to the host) and
 * adamw (PyTorch's AdamW, one thread per parameter; the bias corrections are computed on
 * the host exactly as lib/ops_bwd_cpu.c does). */
#include <math.h>
#include <string.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define SQ_THREADS 256
#define SQ_BLOCKS 1024

/* ---------------------------------------------------------------- CUDA kernels */

static __device__ __forceinline__ double warp_sum_d(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* blockDim.x a multiple of 32; the result in thread 0 */
static __device__ double block_sum_d(double v)
{
	__shared__ double part[32];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	v = warp_sum_d(v);
	if (lane == 0)
		part[wid] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : 0.0;
	return wid == 0 ? warp_sum_d(v) : 0.0;
}

static __global__ void sumsq_kernel(double *partial, const float *x, size_t n)
{
	double s = 0.0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += (double)x[i] * x[i];
	s = block_sum_d(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

static __global__ void sumsq_fold_kernel(double *res, const double *partial, int nb)
{
	double s = 0.0;

	for (int i = threadIdx.x; i < nb; i += blockDim.x)
		s += partial[i];
	s = block_sum_d(s);
	if (threadIdx.x == 0)
		*res = s;
}

struct adamw_k {
	float b1, b2, omb1, omb2, eps, gscale, step_size, bc2_sqrt, decay;
};

static __global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n,
                                    struct adamw_k k)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float gi = g[i] * k.gscale, pi = p[i] * k.decay;
		float mi = k.b1 * m[i] + k.omb1 * gi;
		float vi = k.b2 * v[i] + k.omb2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		p[i] = pi - k.step_size * mi / (sqrtf(vi) / k.bc2_sqrt + k.eps);
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_zero(cudaStream_t st, void *p, size_t bytes)
{
	if (bytes)
		CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st));
	return 0;
}

int gpu_sumsq(cudaStream_t st, double *res, const float *x, size_t n)
{
	*res = 0.0;
	if (n == 0)
		return 0;
	size_t g = CEIL_DIV(n, (size_t)SQ_THREADS);
	int nb = (int)(g < SQ_BLOCKS ? g : SQ_BLOCKS);
	double *partial = (double *)gpu_scratch((SQ_BLOCKS + 1) * sizeof(double));
	sumsq_kernel<<<nb, SQ_THREADS, 0, st>>>(partial, x, n);
	CUDA_CHECK_LAUNCH();
	sumsq_fold_kernel<<<1, SQ_THREADS, 0, st>>>(partial + SQ_BLOCKS, partial, nb);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpyAsync(res, partial + SQ_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost,
	                           st));
	CUDA_CHECK(cudaStreamSynchronize(st));
	return 0;
}

int gpu_adamw(cudaStream_t st, float *p, float *m, float *v, const float *g, size_t n,
              const struct adamw_step *s)
{
	struct adamw_k k;

	GPU_REQUIRE(s && s->step >= 1, "adamw");
	if (n == 0)
		return 0;
	/* as cpu_adamw, in fp32 on the host */
	float bc1 = 1.0f - powf(s->beta1, (float)s->step), bc2 = 1.0f - powf(s->beta2, (float)s->step);
	k.b1 = s->beta1;
	k.b2 = s->beta2;
	k.omb1 = 1.0f - s->beta1;
	k.omb2 = 1.0f - s->beta2;
	k.eps = s->eps;
	k.gscale = s->gscale;
	k.step_size = s->lr / bc1;
	k.bc2_sqrt = sqrtf(bc2);
	k.decay = 1.0f - s->lr * s->weight_decay;
	size_t gr = CEIL_DIV(n, (size_t)256);
	adamw_kernel<<<(int)(gr < 8192 ? gr : 8192), 256, 0, st>>>(p, m, v, g, n, k);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* Dense bf16 tensor-core peak by device name: H100 SXM 989e12 FLOP/s (NVIDIA's datasheet,
 * without sparsity), H200 the same; H100 PCIe 756e12; others unknown (0: no MFU). */
int gpu_device_info(size_t *mem_used, double *peak_flops)
{
	size_t fr = 0, tot = 0;
	struct cudaDeviceProp pr;
	int dev = 0;

	CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
	*mem_used = tot - fr;
	*peak_flops = 0.0;
	CUDA_CHECK(cudaGetDevice(&dev));
	CUDA_CHECK(cudaGetDeviceProperties(&pr, dev));
	if (strstr(pr.name, "H100") || strstr(pr.name, "H200"))
		*peak_flops = strstr(pr.name, "PCIe") ? 756e12 : 989e12;
	return 0;
}
