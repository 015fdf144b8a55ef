/* cross_entropy.cu: weighted cross-entropy over logits(N,V) and its gradient, one block per
 * row: each thread keeps an online (max, sum of exp) over a strided slice of the row, the
 * block merges the pairs, then every thread writes its slice of
 *   dlogits = weight (softmax - onehot(target)),  loss = weight (logsumexp - logit[target]).
 * target < 0: loss 0 and a zero row. dlogits may equal logits: the target logit is read by
 * every thread before the reduction's barriers, each other element is read and written by
 * the same thread. gpu_cross_entropy_xb: the gradient rounded to bf16, into another buffer. */
#include <math.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define CE_THREADS 512

/* ---------------------------------------------------------------- CUDA kernels */

/* (m, s) += (m2, s2): s is a sum of exp(l - m); m = -inf means empty */
static __device__ __forceinline__ void ce_merge(float *m, float *s, float m2, float s2)
{
	if (m2 == -INFINITY)
		return;
	if (*m == -INFINITY) {
		*m = m2;
		*s = s2;
		return;
	}
	float M = fmaxf(*m, m2);
	*s = *s * expf(*m - M) + s2 * expf(m2 - M);
	*m = M;
}

/* the gradient's element type: fp32, or bf16 rounded as gpu_cast_bf16 rounds */
static __device__ __forceinline__ void ce_put(float *d, float v) { *d = v; }
static __device__ __forceinline__ void ce_put(__nv_bfloat16 *d, float v)
{
	*d = __float2bfloat16_rn(v);
}

template <typename D>
static __global__ void ce_kernel(float *loss, D *dlogits, const float *logits,
                                 const int *target, const float *weight, int V)
{
	__shared__ float pm[CE_THREADS / 32], ps[CE_THREADS / 32];
	size_t row = blockIdx.x;
	const float *l = logits + row * V;
	D *d = dlogits + row * V;
	int tgt = target[row], lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	float w = weight[row], m = -INFINITY, s = 0.0f;

	if (tgt < 0) {
		for (int i = threadIdx.x; i < V; i += blockDim.x)
			ce_put(d + i, 0.0f);
		if (threadIdx.x == 0)
			loss[row] = 0.0f;
		return;
	}
	float lt = l[tgt];
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float x = l[i];
		if (x > m) {
			s = (m == -INFINITY ? 0.0f : s * expf(m - x)) + 1.0f;
			m = x;
		} else {
			s += expf(x - m);
		}
	}
	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
		ce_merge(&m, &s, m2, s2);
	}
	if (lane == 0) {
		pm[wid] = m;
		ps[wid] = s;
	}
	__syncthreads();
	m = -INFINITY;
	s = 0.0f;
	for (int k = 0; k < (int)(blockDim.x >> 5); k++)
		ce_merge(&m, &s, pm[k], ps[k]);
	float lse = m + logf(s);
	if (threadIdx.x == 0)
		loss[row] = w * (lse - lt);
	for (int i = threadIdx.x; i < V; i += blockDim.x) {
		float p = w * expf(l[i] - lse);
		ce_put(d + i, i == tgt ? p - w : p);
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_cross_entropy(cudaStream_t st, float *loss, float *dlogits, const float *logits,
                      const int *target, const float *weight, int N, int V)
{
	GPU_REQUIRE(N >= 0 && V > 0, "cross_entropy");
	if (N == 0)
		return 0;
	int threads = V >= CE_THREADS ? CE_THREADS : 32 * CEIL_DIV(V, 32);
	ce_kernel<<<N, threads, 0, st>>>(loss, dlogits, logits, target, weight, V);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_cross_entropy_xb(cudaStream_t st, float *loss, void *dlb, const float *logits,
                         const int *target, const float *weight, int N, int V)
{
	GPU_REQUIRE(N >= 0 && V > 0 && dlb != (const void *)logits, "cross_entropy_xb");
	if (N == 0)
		return 0;
	int threads = V >= CE_THREADS ? CE_THREADS : 32 * CEIL_DIV(V, 32);
	ce_kernel<<<N, threads, 0, st>>>(loss, (__nv_bfloat16 *)dlb, logits, target, weight, V);
	CUDA_CHECK_LAUNCH();
	return 0;
}
