/* train.cu: the optimizer-side training ops of the CUDA backend: zero (a memset on the
 * stream), sumsq (sum of squares in double: per-block partials in the scratch, one block
 * folds them in a fixed order, so the result is deterministic; returned to the host),
 * adamw (PyTorch's AdamW, one thread per parameter; the bias corrections are computed on
 * the host exactly as lib/ops_bwd_cpu.c does) and adamw_multi (the same update over a list
 * of tensors, with the bf16 copy of each updated weight written in the same pass: up to
 * MT_MAX tensors per launch, their descriptors in the kernel parameters, one block per
 * MT_CHUNK elements of a tensor, 16-byte loads where the tensor allows them). */
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

/* one parameter (p, m, v updated in place), weight decay factor `decay` */
static __device__ __forceinline__ void adamw_one(float &p, float &m, float &v, float g,
                                                 const struct adamw_k &k, float decay)
{
	float gi = g * k.gscale, pi = p * decay;
	m = k.b1 * m + k.omb1 * gi;
	v = k.b2 * v + k.omb2 * gi * gi;
	p = pi - k.step_size * m / (sqrtf(v) / k.bc2_sqrt + k.eps);
}

static __global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n,
                                    struct adamw_k k)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float pi = p[i], mi = m[i], vi = v[i];
		adamw_one(pi, mi, vi, g[i], k, k.decay);
		m[i] = mi;
		v[i] = vi;
		p[i] = pi;
	}
}

#define MT_MAX 48          /* tensors per launch (the batch stays under 4 KB of parameters) */
#define MT_CHUNK 16384     /* elements per block */
#define MT_THREADS 256

struct mt_tensor {
	float *p, *m, *v;
	const float *g;
	__nv_bfloat16 *lp;
	size_t n;
	float decay;
	int chunk0;                     /* the tensor's first block in the launch */
	int vec;                        /* 16-byte aligned, n % 4 == 0: float4 loads */
};

struct mt_batch {
	struct mt_tensor t[MT_MAX];
	int nt;
};

/* block c: chunk c - t.chunk0 of the tensor t whose chunks hold c */
static __global__ void __launch_bounds__(MT_THREADS)
adamw_multi_kernel(const __grid_constant__ struct mt_batch b, const struct adamw_k k)
{
	int c = blockIdx.x, ti = 0;

	while (ti + 1 < b.nt && b.t[ti + 1].chunk0 <= c)
		ti++;
	const struct mt_tensor *t = &b.t[ti];
	size_t i0 = (size_t)(c - t->chunk0) * MT_CHUNK, end = i0 + MT_CHUNK;
	if (end > t->n)
		end = t->n;
	if (t->vec) {
		for (size_t i = i0 + 4 * (size_t)threadIdx.x; i < end; i += 4 * MT_THREADS) {
			float4 p = *(const float4 *)(t->p + i), m = *(const float4 *)(t->m + i);
			float4 v = *(const float4 *)(t->v + i), g = __ldcs((const float4 *)(t->g + i));
			adamw_one(p.x, m.x, v.x, g.x, k, t->decay);
			adamw_one(p.y, m.y, v.y, g.y, k, t->decay);
			adamw_one(p.z, m.z, v.z, g.z, k, t->decay);
			adamw_one(p.w, m.w, v.w, g.w, k, t->decay);
			*(float4 *)(t->p + i) = p;
			*(float4 *)(t->m + i) = m;
			*(float4 *)(t->v + i) = v;
			if (t->lp) {
				__nv_bfloat162 lo = __floats2bfloat162_rn(p.x, p.y);
				__nv_bfloat162 hi = __floats2bfloat162_rn(p.z, p.w);
				uint2 u;
				u.x = *(unsigned int *)&lo;
				u.y = *(unsigned int *)&hi;
				*(uint2 *)(t->lp + i) = u;
			}
		}
		return;
	}
	for (size_t i = i0 + threadIdx.x; i < end; i += MT_THREADS) {
		float p = t->p[i], m = t->m[i], v = t->v[i];
		adamw_one(p, m, v, t->g[i], k, t->decay);
		t->p[i] = p;
		t->m[i] = m;
		t->v[i] = v;
		if (t->lp)
			t->lp[i] = __float2bfloat16_rn(p);
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

/* the step's constants, as cpu_adamw computes them (fp32, on the host); decay with s's
 * weight decay */
static struct adamw_k adamw_consts(const struct adamw_step *s)
{
	struct adamw_k k;
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
	return k;
}

int gpu_adamw(cudaStream_t st, float *p, float *m, float *v, const float *g, size_t n,
              const struct adamw_step *s)
{
	GPU_REQUIRE(s && s->step >= 1, "adamw");
	if (n == 0)
		return 0;
	struct adamw_k k = adamw_consts(s);
	size_t gr = CEIL_DIV(n, (size_t)256);
	adamw_kernel<<<(int)(gr < 8192 ? gr : 8192), 256, 0, st>>>(p, m, v, g, n, k);
	CUDA_CHECK_LAUNCH();
	return 0;
}

static int aligned(const void *p, uintptr_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

int gpu_adamw_multi(cudaStream_t st, const struct adamw_tensor *t, int nt,
                    const struct adamw_step *s)
{
	struct adamw_k k;
	struct mt_batch b;
	int chunks = 0;

	GPU_REQUIRE(s && s->step >= 1 && nt >= 0 && (nt == 0 || t), "adamw_multi");
	k = adamw_consts(s);
	b.nt = 0;
	for (int i = 0; i <= nt; i++) {
		size_t nc = i < nt ? CEIL_DIV(t[i].n, (size_t)MT_CHUNK) : 0;
		GPU_REQUIRE(nc < (1u << 30), "adamw_multi tensor size");
		if (b.nt && (i == nt || b.nt == MT_MAX || (size_t)chunks + nc > (1u << 30))) {
			adamw_multi_kernel<<<chunks, MT_THREADS, 0, st>>>(b, k);
			CUDA_CHECK_LAUNCH();
			b.nt = 0;
			chunks = 0;
		}
		if (i == nt || !nc)
			continue;
		struct mt_tensor *d = &b.t[b.nt++];
		d->p = t[i].p;
		d->m = t[i].m;
		d->v = t[i].v;
		d->g = t[i].g;
		d->lp = (__nv_bfloat16 *)t[i].lp;
		d->n = t[i].n;
		d->decay = 1.0f - s->lr * t[i].weight_decay;
		d->chunk0 = chunks;
		d->vec = t[i].n % 4 == 0 && aligned(t[i].p, 16) && aligned(t[i].m, 16) &&
		         aligned(t[i].v, 16) && aligned(t[i].g, 16) && aligned(t[i].lp, 8);
		chunks += (int)nc;
	}
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
