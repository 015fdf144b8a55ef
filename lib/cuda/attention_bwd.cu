/* attention_bwd.cu: the backward of out = softmax(q k^T / sqrt(HD) + mask) v under the
 * attn_mask rule of lib/ops.h (device arrays), GQA (query head h uses kv head h / group).
 * With P the probabilities, dP = dout v^T, D = rowsum(dout * out) = rowsum(P * dP):
 *   dS = P (dP - D),  dq = scale dS k,  dk = scale dS^T q,  dv = P^T dout.
 * Plain and deliberately simple, three kernels, one warp per row, lanes over the head dim
 * (lane owns channels lane, lane+32, ...; HD <= 256), every dot product a warp reduction:
 *   1. per query row (t, h): logsumexp of the visible scores (online) and D;
 *   2. per query row: dq, recomputing P = exp(score - lse);
 *   3. per key row (s, kv head): dk and dv over every query row of its group that sees s.
 * No atomics: each output row is written by one warp. A query that sees no key gets
 * dq = 0 and adds nothing to dk, dv (as the CPU twin). lse and D sit in the scratch. */
#include <math.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define AB_WARPS 4                  /* rows per block */
#define AB_HDMAX 256
#define AB_NO (AB_HDMAX / 32)       /* channels per lane */

/* ---------------------------------------------------------------- CUDA kernels */

/* attn_allowed() of lib/ops_cpu.c on device arrays: may query i see key j? */
static __device__ __forceinline__ int ab_allowed(const struct attn_mask &m, int i, int j)
{
	int qb = m.qpos[i] / m.block, kb = m.kpos[j] / m.block;

	if (m.qseg && m.kseg && m.qseg[i] != m.kseg[j])
		return 0;
	if (!m.qnoisy || !m.knoisy)
		return kb <= qb;
	if (m.qnoisy[i])
		return m.knoisy[j] ? kb == qb : kb < qb;
	return m.knoisy[j] ? 0 : kb <= qb;
}

/* this lane's channels of row p (HD wide) into r, zeros past HD */
static __device__ __forceinline__ void ab_load(float *r, const float *p, int HD)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int i = 0; i < AB_NO; i++) {
		int c = lane + 32 * i;
		r[i] = c < HD ? p[c] : 0.0f;
	}
}

/* sum over the warp of r . row p (every lane gets it) */
static __device__ __forceinline__ float ab_dot(const float *r, const float *p, int HD)
{
	int lane = threadIdx.x & 31;
	float d = 0.0f;
#pragma unroll
	for (int i = 0; i < AB_NO; i++) {
		int c = lane + 32 * i;
		if (c < HD)
			d += r[i] * p[c];
	}
	return warp_sum(d);
}

/* lse[row] (INFINITY when the query sees no key) and D[row], row = t * NH + h */
static __global__ void ab_stats_kernel(float *lse, float *D, const float *q, const float *k,
                                       const float *out, const float *dout, int T, int S,
                                       int NH, int NKV, int HD, int group, float scale,
                                       struct attn_mask m)
{
	int row = blockIdx.x * AB_WARPS + (threadIdx.x >> 5);
	float qr[AB_NO], o[AB_NO];

	if (row >= T * NH)
		return;
	int t = row / NH, h = row % NH, kh = h / group;
	ab_load(qr, q + (size_t)row * HD, HD);
	ab_load(o, out + (size_t)row * HD, HD);
	float dd = ab_dot(o, dout + (size_t)row * HD, HD);
	float mx = -INFINITY, sum = 0.0f;
	for (int s = 0; s < S; s++) {
		if (!ab_allowed(m, t, s))
			continue;
		float sc = ab_dot(qr, k + ((size_t)s * NKV + kh) * HD, HD) * scale;
		if (sc > mx) {
			sum = (mx == -INFINITY ? 0.0f : sum * expf(mx - sc)) + 1.0f;
			mx = sc;
		} else {
			sum += expf(sc - mx);
		}
	}
	if ((threadIdx.x & 31) == 0) {
		lse[row] = mx == -INFINITY ? INFINITY : mx + logf(sum);
		D[row] = dd;
	}
}

static __global__ void ab_dq_kernel(float *dq, const float *lse, const float *D, const float *q,
                                    const float *k, const float *v, const float *dout, int T,
                                    int S, int NH, int NKV, int HD, int group, float scale,
                                    struct attn_mask m)
{
	int row = blockIdx.x * AB_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	float qr[AB_NO], dor[AB_NO], acc[AB_NO];

	if (row >= T * NH)
		return;
	int t = row / NH, h = row % NH, kh = h / group;
	float l = lse[row], dd = D[row];
#pragma unroll
	for (int i = 0; i < AB_NO; i++)
		acc[i] = 0.0f;
	if (l != INFINITY) {
		ab_load(qr, q + (size_t)row * HD, HD);
		ab_load(dor, dout + (size_t)row * HD, HD);
		for (int s = 0; s < S; s++) {
			if (!ab_allowed(m, t, s))
				continue;
			const float *ks = k + ((size_t)s * NKV + kh) * HD;
			const float *vs = v + ((size_t)s * NKV + kh) * HD;
			float p = expf(ab_dot(qr, ks, HD) * scale - l);
			float dp = ab_dot(dor, vs, HD);
			float ds = p * (dp - dd) * scale;
#pragma unroll
			for (int i = 0; i < AB_NO; i++) {
				int c = lane + 32 * i;
				if (c < HD)
					acc[i] += ds * ks[c];
			}
		}
	}
	float *dqr = dq + (size_t)row * HD;
#pragma unroll
	for (int i = 0; i < AB_NO; i++) {
		int c = lane + 32 * i;
		if (c < HD)
			dqr[c] = acc[i];
	}
}

/* one warp per key row kr = s * NKV + kh */
static __global__ void ab_dkv_kernel(float *dk, float *dv, const float *lse, const float *D,
                                     const float *q, const float *k, const float *v,
                                     const float *dout, int T, int S, int NH, int NKV, int HD,
                                     int group, float scale, struct attn_mask m)
{
	int kr = blockIdx.x * AB_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	float kv[AB_NO], vv[AB_NO], ak[AB_NO], av[AB_NO];

	if (kr >= S * NKV)
		return;
	int s = kr / NKV, kh = kr % NKV;
	ab_load(kv, k + (size_t)kr * HD, HD);
	ab_load(vv, v + (size_t)kr * HD, HD);
#pragma unroll
	for (int i = 0; i < AB_NO; i++)
		ak[i] = av[i] = 0.0f;
	for (int t = 0; t < T; t++) {
		if (!ab_allowed(m, t, s))
			continue;
		for (int g = 0; g < group; g++) {
			int row = t * NH + kh * group + g;
			const float *qr = q + (size_t)row * HD, *dor = dout + (size_t)row * HD;
			float p = expf(ab_dot(kv, qr, HD) * scale - lse[row]);
			float dp = ab_dot(vv, dor, HD);
			float ds = p * (dp - D[row]) * scale;
#pragma unroll
			for (int i = 0; i < AB_NO; i++) {
				int c = lane + 32 * i;
				if (c < HD) {
					av[i] += p * dor[c];
					ak[i] += ds * qr[c];
				}
			}
		}
	}
	float *dkr = dk + (size_t)kr * HD, *dvr = dv + (size_t)kr * HD;
#pragma unroll
	for (int i = 0; i < AB_NO; i++) {
		int c = lane + 32 * i;
		if (c < HD) {
			dkr[c] = ak[i];
			dvr[c] = av[i];
		}
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_attention_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	GPU_REQUIRE(T >= 0 && S >= 0 && NH > 0 && NKV > 0 && NH % NKV == 0, "attention_backward");
	GPU_REQUIRE(HD > 0 && HD <= AB_HDMAX && m && m->block > 0, "attention_backward");
	GPU_REQUIRE((T == 0 || m->qpos) && (S == 0 || m->kpos), "attention_backward mask");
	int group = NH / NKV;
	float scale = 1.0f / sqrtf((float)HD);
	size_t rows = (size_t)T * NH, krows = (size_t)S * NKV;

	GPU_REQUIRE(rows < 0x7fffffff && krows < 0x7fffffff, "attention_backward size");
	if (rows == 0 && krows == 0)
		return 0;
	if (rows && !krows) {           /* no keys: the forward gave zeros */
		CUDA_CHECK(cudaMemsetAsync(dq, 0, rows * HD * sizeof(float), st));
		return 0;
	}
	float *lse = (float *)gpu_scratch((rows + 1) * 2 * sizeof(float)), *D = lse + rows + 1;
	if (rows) {
		int grid = (int)CEIL_DIV(rows, (size_t)AB_WARPS);
		ab_stats_kernel<<<grid, 32 * AB_WARPS, 0, st>>>(lse, D, q, k, out, dout, T, S, NH, NKV,
		                                               HD, group, scale, *m);
		CUDA_CHECK_LAUNCH();
		ab_dq_kernel<<<grid, 32 * AB_WARPS, 0, st>>>(dq, lse, D, q, k, v, dout, T, S, NH, NKV,
		                                            HD, group, scale, *m);
		CUDA_CHECK_LAUNCH();
	}
	int kgrid = (int)CEIL_DIV(krows, (size_t)AB_WARPS);
	ab_dkv_kernel<<<kgrid, 32 * AB_WARPS, 0, st>>>(dk, dv, lse, D, q, k, v, dout, T, S, NH, NKV,
	                                              HD, group, scale, *m);
	CUDA_CHECK_LAUNCH();
	return 0;
}
