/* attention_train.cu: attention and its backward for training on long sequences, on the
 * tensor cores. Same contract as gpu_attention / gpu_attention_backward (fp32 q, k, v, out
 * and gradients; the mask rule of struct attn_mask); the CPU twins are cpu_attention and
 * cpu_attention_backward.
 *
 * One query head at a time (GQA: head h reads kv head h / (NH/NKV)), the T x S scores are
 * materialised for that head only:
 *   forward   S = scale Q K^T (cuBLAS, bf16 in, fp32 out); P = masked softmax(S) (bf16);
 *             O = P V (bf16 in, fp32 out, written strided into out)
 *   backward  S and P again; dP = dO V^T (fp32); dS = scale P (dP - D), D = rowsum(dO O);
 *             dQ = dS K;  dK += dS^T Q;  dV += P^T dO   (fp32 accumulation in dk, dv)
 * q, k, v, dO are rounded to bf16 once per call, P and dS are bf16: the results differ from
 * the fp32 twin by bf16 rounding (tests/gpu/test_attention_train.cu: a few 1e-3 relative).
 * Every score of the head is computed, visible or not (dense GEMMs): memory T*S*8 bytes
 * (forward) or T*S*8 + T*NH*4 (backward) in the backend scratch, plus the bf16 operands. */
#include <math.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define AT_THREADS 256

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void cast_bf16_kernel(__nv_bfloat16 *d, const float *s, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = __float2bfloat16_rn(s[i]);
}

/* the row's visibility of key j, given the row's block, segment and noisy flag */
static __device__ __forceinline__ int at_sees(const struct attn_mask &m, int qb, int qs, int qn,
                                              int j)
{
	int kb = m.kpos[j] / m.block;

	if (m.qseg && m.kseg && qs != m.kseg[j])
		return 0;
	if (!m.qnoisy || !m.knoisy)
		return kb <= qb;
	if (qn)
		return m.knoisy[j] ? kb == qb : kb < qb;
	return m.knoisy[j] ? 0 : kb <= qb;
}

static __device__ float block_reduce(float v, int is_max)
{
	__shared__ float part[32];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	v = is_max ? warp_max(v) : warp_sum(v);
	__syncthreads();
	if (lane == 0)
		part[wid] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : (is_max ? -INFINITY : 0.0f);
	v = is_max ? warp_max(v) : warp_sum(v);
	return v;                               /* every warp holds the result */
}

/* one block per query row: p(row, S) bf16 = softmax over the visible keys of s(row, S);
 * a row without a visible key gets zeros */
static __global__ void masked_softmax_kernel(__nv_bfloat16 *p, const float *s, int S,
                                             struct attn_mask m)
{
	int i = blockIdx.x;
	int qb = m.qpos[i] / m.block, qs = m.qseg ? m.qseg[i] : 0, qn = m.qnoisy ? m.qnoisy[i] : 0;
	const float *row = s + (size_t)i * S;
	__nv_bfloat16 *out = p + (size_t)i * S;
	float mx = -INFINITY, sum = 0.0f;

	for (int j = threadIdx.x; j < S; j += blockDim.x)
		if (at_sees(m, qb, qs, qn, j))
			mx = fmaxf(mx, row[j]);
	mx = block_reduce(mx, 1);
	if (mx == -INFINITY) {
		for (int j = threadIdx.x; j < S; j += blockDim.x)
			out[j] = __float2bfloat16_rn(0.0f);
		return;
	}
	for (int j = threadIdx.x; j < S; j += blockDim.x)
		if (at_sees(m, qb, qs, qn, j))
			sum += __expf(row[j] - mx);
	sum = block_reduce(sum, 0);
	float inv = 1.0f / sum;
	for (int j = threadIdx.x; j < S; j += blockDim.x)
		out[j] = __float2bfloat16_rn(at_sees(m, qb, qs, qn, j) ? __expf(row[j] - mx) * inv
		                                                       : 0.0f);
}

/* d(T*NH) = rowsum over HD of dout * out, one warp per (query, head) */
static __global__ void rowdot_kernel(float *d, const float *dout, const float *out, int rows,
                                     int HD)
{
	int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	float acc = 0.0f;

	if (r >= rows)
		return;
	for (int c = lane; c < HD; c += 32)
		acc += dout[(size_t)r * HD + c] * out[(size_t)r * HD + c];
	acc = warp_sum(acc);
	if (lane == 0)
		d[r] = acc;
}

/* one block per query row: ds = scale * p * (dp - d[row]) in bf16 (0 where p is 0) */
static __global__ void dsoftmax_kernel(__nv_bfloat16 *ds, const __nv_bfloat16 *p,
                                       const float *dp, const float *d, int dstride, int S,
                                       float scale)
{
	int i = blockIdx.x;
	float di = d[(size_t)i * dstride];
	size_t o = (size_t)i * S;

	for (int j = threadIdx.x; j < S; j += blockDim.x) {
		float pj = __bfloat162float(p[o + j]);
		ds[o + j] = __float2bfloat16_rn(scale * pj * (dp[o + j] - di));
	}
}

/* ---------------------------------------------------------------- kernel launchers */

static void cast(cudaStream_t st, __nv_bfloat16 *d, const float *s, size_t n)
{
	size_t g = CEIL_DIV(n, (size_t)256);
	if (!n)
		return;
	cast_bf16_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(d, s, n);
	CUDA_CHECK_LAUNCH();
}

int gpu_cast_bf16(cudaStream_t st, void *dst, const float *src, size_t n)
{
	cast(st, (__nv_bfloat16 *)dst, src, n);
	return 0;
}

/* C(m,n) (column-major, ldc) = alpha op(A) op(B) + beta C; A, B bf16, C fp32 */
static void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                 int k, float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                 float *c, int ldc)
{
	CUBLAS_CHECK(cublasGemmEx(h, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF,
	                          ldb, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
	                          CUBLAS_GEMM_DEFAULT));
}

/* row-major s(T,S) = alpha a_h(T,HD) b_j(S,HD)^T, a with row stride lda, b with ldb */
static void gemm_abt(cublasHandle_t h, float *s, const __nv_bfloat16 *a, int lda,
                     const __nv_bfloat16 *b, int ldb, int T, int S, int HD, float alpha)
{
	gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, S, T, HD, alpha, b, ldb, a, lda, 0.0f, s, S);
}

struct at_shape {
	int T, S, NH, NKV, HD, QD, KVD, group;
	float scale;
};

static int at_check(struct at_shape *z, int T, int S, int NH, int NKV, int HD,
                    const struct attn_mask *m)
{
	GPU_REQUIRE(T >= 0 && S >= 0 && NH > 0 && NKV > 0 && HD > 0 && NH % NKV == 0,
	            "attention_tc");
	GPU_REQUIRE(HD % 8 == 0 && m && m->block > 0 && m->qpos && m->kpos, "attention_tc");
	z->T = T;
	z->S = S;
	z->NH = NH;
	z->NKV = NKV;
	z->HD = HD;
	z->QD = NH * HD;
	z->KVD = NKV * HD;
	z->group = NH / NKV;
	z->scale = 1.0f / sqrtf((float)HD);
	return 0;
}

int gpu_attention_tc(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                     int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_shape z;
	cublasHandle_t h = gpu_cublas();

	if (at_check(&z, T, S, NH, NKV, HD, m) < 0)
		return -1;
	if (T == 0)
		return 0;
	if (S == 0)
		return gpu_zero(st, out, (size_t)T * z.QD * sizeof(float));
	size_t nq = (size_t)T * z.QD, nk = (size_t)S * z.KVD, ts = (size_t)T * S;
	char *sc = (char *)gpu_scratch(ts * 4 + ts * 2 + (nq + 2 * nk) * 2);
	float *sf = (float *)sc;
	__nv_bfloat16 *p = (__nv_bfloat16 *)(sc + ts * 4), *qb = p + ts, *kb = qb + nq, *vb = kb + nk;

	CUBLAS_CHECK(cublasSetStream(h, st));
	cast(st, qb, q, nq);
	cast(st, kb, k, nk);
	cast(st, vb, v, nk);
	for (int hh = 0; hh < NH; hh++) {
		int j = hh / z.group;
		gemm_abt(h, sf, qb + (size_t)hh * HD, z.QD, kb + (size_t)j * HD, z.KVD, T, S, HD,
		         z.scale);
		masked_softmax_kernel<<<T, AT_THREADS, 0, st>>>(p, sf, S, *m);
		CUDA_CHECK_LAUNCH();
		/* out_h^T(HD,T) = v_j^T(HD,S) p^T(S,T) */
		gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, HD, T, S, 1.0f, vb + (size_t)j * HD, z.KVD, p, S, 0.0f,
		     out + (size_t)hh * HD, z.QD);
	}
	return 0;
}

int gpu_attention_tc_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                              const float *q, const float *k, const float *v, const float *out,
                              int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_shape z;
	cublasHandle_t h = gpu_cublas();

	if (at_check(&z, T, S, NH, NKV, HD, m) < 0)
		return -1;
	size_t nq = (size_t)T * z.QD, nk = (size_t)S * z.KVD, ts = (size_t)T * S;
	if (S)
		gpu_zero(st, dk, nk * 4);
	if (S)
		gpu_zero(st, dv, nk * 4);
	if (T == 0)
		return 0;
	if (S == 0)
		return gpu_zero(st, dq, nq * 4);
	char *sc = (char *)gpu_scratch(ts * 4 + ts * 4 + (size_t)T * NH * 4 + (2 * nq + 2 * nk) * 2);
	float *sf = (float *)sc, *d = (float *)(sc + ts * 4);
	__nv_bfloat16 *p = (__nv_bfloat16 *)(d + (size_t)T * NH), *ds = p + ts, *qb = ds + ts;
	__nv_bfloat16 *kb = qb + nq, *vb = kb + nk, *dob = vb + nk;

	CUBLAS_CHECK(cublasSetStream(h, st));
	cast(st, qb, q, nq);
	cast(st, kb, k, nk);
	cast(st, vb, v, nk);
	cast(st, dob, dout, nq);
	int rows = T * NH, wpb = AT_THREADS / 32;
	rowdot_kernel<<<CEIL_DIV(rows, wpb), AT_THREADS, 0, st>>>(d, dout, out, rows, HD);
	CUDA_CHECK_LAUNCH();
	for (int hh = 0; hh < NH; hh++) {
		int j = hh / z.group;
		const __nv_bfloat16 *qh = qb + (size_t)hh * HD, *kj = kb + (size_t)j * HD;
		const __nv_bfloat16 *vj = vb + (size_t)j * HD, *doh = dob + (size_t)hh * HD;
		gemm_abt(h, sf, qh, z.QD, kj, z.KVD, T, S, HD, z.scale);
		masked_softmax_kernel<<<T, AT_THREADS, 0, st>>>(p, sf, S, *m);
		CUDA_CHECK_LAUNCH();
		gemm_abt(h, sf, doh, z.QD, vj, z.KVD, T, S, HD, 1.0f);          /* dP */
		dsoftmax_kernel<<<T, AT_THREADS, 0, st>>>(ds, p, sf, d + hh, NH, S, z.scale);
		CUDA_CHECK_LAUNCH();
		/* dq_h^T(HD,T) = k_j^T(HD,S) ds^T(S,T) */
		gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, HD, T, S, 1.0f, kj, z.KVD, ds, S, 0.0f,
		     dq + (size_t)hh * HD, z.QD);
		/* dk_j^T(HD,S) += q_h^T(HD,T) ds(T,S);  dv_j^T(HD,S) += do_h^T(HD,T) p(T,S) */
		gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, HD, S, T, 1.0f, qh, z.QD, ds, S, 1.0f,
		     dk + (size_t)j * HD, z.KVD);
		gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, HD, S, T, 1.0f, doh, z.QD, p, S, 1.0f,
		     dv + (size_t)j * HD, z.KVD);
	}
	return 0;
}
