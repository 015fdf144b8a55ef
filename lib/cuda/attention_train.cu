/* attention_train.cu: attention and its backward for training on long sequences, on the
 * tensor cores. Same contract as gpu_attention / gpu_attention_backward (fp32 q, k, v, out
 * and gradients; the mask rule of struct attn_mask); the CPU twins are cpu_attention and
 * cpu_attention_backward.
 *
 * One chunk of AT_CHUNK query rows at a time, the NKV query heads g, g + group, ... of each
 * group member g in one strided-batched cuBLAS call (GQA: head h reads kv head h / group); the chunk's scores are materialised over the key range
 * [k0, k1) that holds every key a row of the chunk may see (found on the device by one pass
 * of the mask rule per call, then read back: one sync per call), so whole masked regions
 * (SFT: clean queries never see the noisy half; the noisy half sees its own block only) cost
 * nothing. Per (head, chunk):
 *   forward   S = scale Q K^T (cuBLAS, bf16 in, fp32 out); P = masked softmax(S) (bf16);
 *             O = P V (bf16 in, fp32 out, written strided into out)
 *   backward  S and P again; dP = dO V^T (fp32); dS = scale P (dP - D), D = rowsum(dO O);
 *             dQ = dS K;  dK += dS^T Q;  dV += P^T dO   (fp32 accumulation in dk, dv)
 * q, k, v, dO are rounded to bf16 once per call, P and dS are bf16: the results differ from
 * the fp32 twin by bf16 rounding (tests/gpu/test_attention_train.cu: a few 1e-3 relative).
 * Inside the range every score is computed (dense GEMMs) and masked in the softmax, which
 * holds a row in shared memory when it fits (one read of the scores). Memory in the backend
 * scratch: NKV x AT_CHUNK x S x 8 bytes of scores plus T*NH*4 and the bf16 operands. */
#include <math.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define AT_THREADS 256
#define AT_CHUNK 2048                   /* query rows per chunk */
#define AT_SMEM_MAX (160 * 1024)        /* largest shared-memory row (floats x 4) */

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

/* one block per query row r0 + blockIdx.x and head blockIdx.y: p(row, W) bf16 = softmax over the visible keys
 * k0 .. k0+W-1 of s(row, W); a row without a visible key gets zeros. With smem the row
 * is read once into dynamic shared memory (W floats), else three passes over s. */
static __global__ void masked_softmax_kernel(__nv_bfloat16 *p, const float *s, int W, int r0,
                                             int k0, struct attn_mask m, int smem)
{
	extern __shared__ float rs[];
	int i = r0 + blockIdx.x;
	int qb = m.qpos[i] / m.block, qs = m.qseg ? m.qseg[i] : 0, qn = m.qnoisy ? m.qnoisy[i] : 0;
	size_t o = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * W;   /* head y, row x */
	const float *row = s + o;
	__nv_bfloat16 *out = p + o;
	float mx = -INFINITY, sum = 0.0f;

	if (smem) {
		for (int j = threadIdx.x; j < W; j += blockDim.x) {
			float v = at_sees(m, qb, qs, qn, k0 + j) ? row[j] : -INFINITY;
			rs[j] = v;
			mx = fmaxf(mx, v);
		}
	} else {
		for (int j = threadIdx.x; j < W; j += blockDim.x)
			if (at_sees(m, qb, qs, qn, k0 + j))
				mx = fmaxf(mx, row[j]);
	}
	mx = block_reduce(mx, 1);
	if (mx == -INFINITY) {
		for (int j = threadIdx.x; j < W; j += blockDim.x)
			out[j] = __float2bfloat16_rn(0.0f);
		return;
	}
	if (smem) {
		for (int j = threadIdx.x; j < W; j += blockDim.x) {
			float e = __expf(rs[j] - mx);
			rs[j] = e;
			sum += e;
		}
	} else {
		for (int j = threadIdx.x; j < W; j += blockDim.x)
			if (at_sees(m, qb, qs, qn, k0 + j))
				sum += __expf(row[j] - mx);
	}
	sum = block_reduce(sum, 0);
	float inv = 1.0f / sum;
	if (smem) {
		for (int j = threadIdx.x; j < W; j += blockDim.x)
			out[j] = __float2bfloat16_rn(rs[j] * inv);
	} else {
		for (int j = threadIdx.x; j < W; j += blockDim.x)
			out[j] = __float2bfloat16_rn(at_sees(m, qb, qs, qn, k0 + j)
			                             ? __expf(row[j] - mx) * inv : 0.0f);
	}
}

/* one block per query row: widen range[2 (row / chunk)] = [first, last + 1) visible key */
static __global__ void key_range_kernel(int *range, int S, int chunk, struct attn_mask m)
{
	int i = blockIdx.x;
	int qb = m.qpos[i] / m.block, qs = m.qseg ? m.qseg[i] : 0, qn = m.qnoisy ? m.qnoisy[i] : 0;
	float lo = -(float)S, hi = -1.0f;      /* lo holds minus the first key (max-reduced) */

	for (int j = threadIdx.x; j < S; j += blockDim.x)
		if (at_sees(m, qb, qs, qn, j)) {
			lo = fmaxf(lo, -(float)j);
			hi = fmaxf(hi, (float)j);
		}
	lo = block_reduce(lo, 1);
	hi = block_reduce(hi, 1);
	if (threadIdx.x == 0 && hi >= 0.0f) {
		atomicMin(&range[2 * (i / chunk)], (int)-lo);
		atomicMax(&range[2 * (i / chunk) + 1], (int)hi + 1);
	}
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

/* one block per query row x and head y: ds = scale * p * (dp - d[x dstride + y hstride]) in
 * bf16 (0 where p is 0) */
static __global__ void dsoftmax_kernel(__nv_bfloat16 *ds, const __nv_bfloat16 *p,
                                       const float *dp, const float *d, int dstride,
                                       int hstride, int S, float scale)
{
	float di = d[(size_t)blockIdx.x * dstride + (size_t)blockIdx.y * hstride];
	size_t o = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * S;

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

/* C(m,n) (column-major, ldc) = alpha op(A) op(B) + beta C for nb problems, A, B, C advanced by
 * sa, sb, sc elements; A, B bf16, C fp32 */
static void gemm_b(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                   int k, float alpha, const void *a, int lda, long long sa, const void *b,
                   int ldb, long long sb, float beta, float *c, int ldc, long long sc, int nb)
{
	CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, sa,
	                                        b, CUDA_R_16BF, ldb, sb, &beta, c, CUDA_R_32F, ldc,
	                                        sc, nb, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* for nb heads: row-major s_i(T,S) = alpha a_i(T,HD) b_i(S,HD)^T, a with row stride lda and
 * head stride sa, b with ldb and sb; s_i at s + i T S */
static void gemm_abt(cublasHandle_t h, float *s, const __nv_bfloat16 *a, int lda, long long sa,
                     const __nv_bfloat16 *b, int ldb, long long sb, int T, int S, int HD,
                     float alpha, int nb)
{
	gemm_b(h, CUBLAS_OP_T, CUBLAS_OP_N, S, T, HD, alpha, b, ldb, sb, a, lda, sa, 0.0f, s, S,
	       (long long)T * S, nb);
}

struct at_shape {
	int T, S, NH, NKV, HD, QD, KVD, group, nchunk;
	float scale;
	int *range;                          /* host: [k0, k1) per chunk, k0 >= k1 when empty */
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
	z->nchunk = CEIL_DIV(T, AT_CHUNK);
	z->range = NULL;
	return 0;
}

/* the key range of every query chunk into z->range (host); rdev: 2 nchunk ints of scratch */
static void at_ranges(cudaStream_t st, struct at_shape *z, int *rdev, const struct attn_mask *m)
{
	z->range = (int *)malloc(2 * (size_t)z->nchunk * sizeof(int));
	if (!z->range) {
		fprintf(stderr, "dice: attention_tc: out of memory\n");
		abort();
	}
	for (int c = 0; c < z->nchunk; c++) {
		z->range[2 * c] = z->S;
		z->range[2 * c + 1] = 0;
	}
	CUDA_CHECK(cudaMemcpyAsync(rdev, z->range, 2 * (size_t)z->nchunk * sizeof(int),
	                           cudaMemcpyHostToDevice, st));
	key_range_kernel<<<z->T, AT_THREADS, 0, st>>>(rdev, z->S, AT_CHUNK, *m);
	CUDA_CHECK_LAUNCH();
	CUDA_CHECK(cudaMemcpyAsync(z->range, rdev, 2 * (size_t)z->nchunk * sizeof(int),
	                           cudaMemcpyDeviceToHost, st));
	CUDA_CHECK(cudaStreamSynchronize(st));
	for (int c = 0; c < z->nchunk; c++) {   /* 8-aligned start and width (fast GEMMs) */
		int k0 = z->range[2 * c] & ~7, k1 = z->range[2 * c + 1];
		if (k1 <= z->range[2 * c])
			continue;
		k1 = k0 + ((k1 - k0 + 7) & ~7);
		z->range[2 * c] = k0;
		z->range[2 * c + 1] = k1 < z->S ? k1 : z->S;
	}
}

static void softmax(cudaStream_t st, __nv_bfloat16 *p, const float *sf, int nr, int nb, int W,
                    int r0, int k0, const struct attn_mask *m)
{
	static int smem_set;
	size_t bytes = (size_t)W * sizeof(float);
	int smem = bytes <= AT_SMEM_MAX;

	if (smem && bytes > 48 * 1024 && !smem_set) {
		CUDA_CHECK(cudaFuncSetAttribute(masked_softmax_kernel,
		                                cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                AT_SMEM_MAX));
		smem_set = 1;
	}
	masked_softmax_kernel<<<dim3(nr, nb), AT_THREADS, smem ? bytes : 0, st>>>(p, sf, W, r0, k0,
	                                                                         *m, smem);
	CUDA_CHECK_LAUNCH();
}

/* bytes of the scratch's head: the chunk ranges, rounded to 256 */
#define AT_RANGE_BYTES(z) (((size_t)(z).nchunk * 8 + 255) / 256 * 256)

int gpu_attention_tc(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                     int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_shape z;
	cublasHandle_t h = gpu_cublas();

	if (at_check(&z, T, S, NH, NKV, HD, m) < 0)
		return -1;
	if (T == 0)
		return 0;
	size_t nq = (size_t)T * z.QD, nk = (size_t)S * z.KVD;
	gpu_zero(st, out, nq * sizeof(float));
	if (S == 0)
		return 0;
	size_t cs = (size_t)(T < AT_CHUNK ? T : AT_CHUNK) * S * NKV;
	char *sc = (char *)gpu_scratch(AT_RANGE_BYTES(z) + cs * 4 + cs * 2 + (nq + 2 * nk) * 2);
	float *sf = (float *)(sc + AT_RANGE_BYTES(z));
	__nv_bfloat16 *p = (__nv_bfloat16 *)(sf + cs), *qb = p + cs, *kb = qb + nq, *vb = kb + nk;
	long long gh = (long long)z.group * HD;    /* head stride of the batch (q, out) */

	CUBLAS_CHECK(cublasSetStream(h, st));
	at_ranges(st, &z, (int *)sc, m);
	cast(st, qb, q, nq);
	cast(st, kb, k, nk);
	cast(st, vb, v, nk);
	/* per chunk and group member g: the NKV heads g, g + group, ... in one batch */
	for (int c = 0; c < z.nchunk; c++) {
		int r0 = c * AT_CHUNK, nr = T - r0 < AT_CHUNK ? T - r0 : AT_CHUNK;
		int k0 = z.range[2 * c], W = z.range[2 * c + 1] - k0;
		long long sw = (long long)nr * W;
		if (W <= 0)
			continue;                   /* no visible key: the rows stay zero */
		for (int g = 0; g < z.group; g++) {
			const __nv_bfloat16 *kj = kb + (size_t)k0 * z.KVD;
			gemm_abt(h, sf, qb + (size_t)r0 * z.QD + (size_t)g * HD, z.QD, gh, kj, z.KVD, HD,
			         nr, W, HD, z.scale, NKV);
			softmax(st, p, sf, nr, NKV, W, r0, k0, m);
			/* out_h^T(HD,nr) = v_j^T(HD,W) p_j^T(W,nr) */
			gemm_b(h, CUBLAS_OP_N, CUBLAS_OP_N, HD, nr, W, 1.0f, vb + (size_t)k0 * z.KVD,
			       z.KVD, HD, p, W, sw, 0.0f, out + (size_t)r0 * z.QD + (size_t)g * HD, z.QD,
			       gh, NKV);
		}
	}
	free(z.range);
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
	size_t nq = (size_t)T * z.QD, nk = (size_t)S * z.KVD;
	gpu_zero(st, dk, nk * 4);
	gpu_zero(st, dv, nk * 4);
	gpu_zero(st, dq, nq * 4);
	if (T == 0 || S == 0)
		return 0;
	size_t cs = (size_t)(T < AT_CHUNK ? T : AT_CHUNK) * S * NKV;
	char *sc = (char *)gpu_scratch(AT_RANGE_BYTES(z) + cs * 4 + (size_t)T * NH * 4 + cs * 4 +
	                               (2 * nq + 2 * nk) * 2);
	float *sf = (float *)(sc + AT_RANGE_BYTES(z)), *d = sf + cs;
	__nv_bfloat16 *p = (__nv_bfloat16 *)(d + (size_t)T * NH), *ds = p + cs, *qb = ds + cs;
	__nv_bfloat16 *kb = qb + nq, *vb = kb + nk, *dob = vb + nk;
	long long gh = (long long)z.group * HD;

	CUBLAS_CHECK(cublasSetStream(h, st));
	at_ranges(st, &z, (int *)sc, m);
	cast(st, qb, q, nq);
	cast(st, kb, k, nk);
	cast(st, vb, v, nk);
	cast(st, dob, dout, nq);
	int rows = T * NH, wpb = AT_THREADS / 32;
	rowdot_kernel<<<CEIL_DIV(rows, wpb), AT_THREADS, 0, st>>>(d, dout, out, rows, HD);
	CUDA_CHECK_LAUNCH();
	for (int c = 0; c < z.nchunk; c++) {
		int r0 = c * AT_CHUNK, nr = T - r0 < AT_CHUNK ? T - r0 : AT_CHUNK;
		int k0 = z.range[2 * c], W = z.range[2 * c + 1] - k0;
		long long sw = (long long)nr * W;
		if (W <= 0)
			continue;                   /* no visible key: no gradient */
		for (int g = 0; g < z.group; g++) {
			const __nv_bfloat16 *qh = qb + (size_t)r0 * z.QD + (size_t)g * HD;
			const __nv_bfloat16 *doh = dob + (size_t)r0 * z.QD + (size_t)g * HD;
			const __nv_bfloat16 *kj = kb + (size_t)k0 * z.KVD, *vj = vb + (size_t)k0 * z.KVD;
			gemm_abt(h, sf, qh, z.QD, gh, kj, z.KVD, HD, nr, W, HD, z.scale, NKV);
			softmax(st, p, sf, nr, NKV, W, r0, k0, m);
			gemm_abt(h, sf, doh, z.QD, gh, vj, z.KVD, HD, nr, W, HD, 1.0f, NKV);   /* dP */
			dsoftmax_kernel<<<dim3(nr, NKV), AT_THREADS, 0, st>>>(
				ds, p, sf, d + (size_t)r0 * NH + g, NH, z.group, W, z.scale);
			CUDA_CHECK_LAUNCH();
			/* dq_h^T(HD,nr) = k_j^T(HD,W) ds_j^T(W,nr) */
			gemm_b(h, CUBLAS_OP_N, CUBLAS_OP_N, HD, nr, W, 1.0f, kj, z.KVD, HD, ds, W, sw,
			       0.0f, dq + (size_t)r0 * z.QD + (size_t)g * HD, z.QD, gh, NKV);
			/* dk_j^T(HD,W) += q_h^T(HD,nr) ds_j(nr,W);  dv_j^T += do_h^T(HD,nr) p_j(nr,W) */
			gemm_b(h, CUBLAS_OP_N, CUBLAS_OP_T, HD, W, nr, 1.0f, qh, z.QD, gh, ds, W, sw, 1.0f,
			       dk + (size_t)k0 * z.KVD, z.KVD, HD, NKV);
			gemm_b(h, CUBLAS_OP_N, CUBLAS_OP_T, HD, W, nr, 1.0f, doh, z.QD, gh, p, W, sw, 1.0f,
			       dv + (size_t)k0 * z.KVD, z.KVD, HD, NKV);
		}
	}
	free(z.range);
	return 0;
}
