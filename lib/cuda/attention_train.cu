/* attention_train.cu: attention and its backward for training on long sequences, on the
 * tensor cores. Same contract as gpu_attention / gpu_attention_backward (fp32 q, k, v, out
 * and gradients; the mask rule of struct attn_mask); the CPU twins are cpu_attention and
 * cpu_attention_backward. Head dims 64 and 128 take the fused kernels (the "fused (flash)
 * path" below); other head dims, and every call under DICE_ATTN_CUBLAS=1, the chunked cuBLAS
 * path described here:
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
#include "wgmma.cuh"

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

/* the same, 8 elements a thread (n8 groups of 8; s and d 16-byte aligned): two 16-byte loads,
 * one 16-byte store */
static __global__ void cast_bf16_x8_kernel(uint4 *d, const float4 *s, size_t n8)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 a = s[2 * i], b = s[2 * i + 1];
		__nv_bfloat162 x = __floats2bfloat162_rn(a.x, a.y);
		__nv_bfloat162 y = __floats2bfloat162_rn(a.z, a.w);
		__nv_bfloat162 z = __floats2bfloat162_rn(b.x, b.y);
		__nv_bfloat162 w = __floats2bfloat162_rn(b.z, b.w);
		d[i] = make_uint4(*(unsigned *)&x, *(unsigned *)&y, *(unsigned *)&z,
		                  *(unsigned *)&w);
	}
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
	if (n % 8 == 0 && !((uintptr_t)d & 15) && !((uintptr_t)s & 15)) {
		g = CEIL_DIV(n / 8, (size_t)256);
		cast_bf16_x8_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>((uint4 *)d,
		                                                               (const float4 *)s,
		                                                               n / 8);
		CUDA_CHECK_LAUNCH();
		return;
	}
	cast_bf16_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(d, s, n);
	CUDA_CHECK_LAUNCH();
}

int gpu_cast_bf16(cudaStream_t st, void *dst, const float *src, size_t n)
{
	cast(st, (__nv_bfloat16 *)dst, src, n);
	return 0;
}

/* ---------------------------------------------------------------- fused (flash) path
 *
 * For head dims 64 and 128: one kernel per pass, scores never leave the chip.
 * A tile map first: for every (64 query rows, 64 keys) tile 0 = no visible pair (skipped),
 * 1 = some (the mask rule per score), 2 = all (no mask). Operands bf16 (q, k, v, dO cast once
 * per call), mma.sync m16n8k16 with fp32 accumulation, fragments through ldmatrix from padded
 * shared-memory rows, the next tile loaded by cp.async while the current one is used.
 *   forward   one block per (64 query rows, head), 4 warps x 16 rows: S = scale Q K^T, online
 *             softmax in fp32 (exp2), O += P V with P rounded to bf16; out = O / l. The same
 *             kernel in "stats" mode writes only lse (log2 units) for the backward; with
 *             gpu_attention_tc_stat the forward writes lse as well and the backward takes it
 *             (no stats pass).
 *   backward  one block per (64 keys, kv head), 4 warps x 16 keys, over the heads of the group
 *             and the visible query tiles: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
 *             dS^T = P^T (dP^T - D) (bf16), dV += P^T dO, dK += dS^T Q in registers (written
 *             once at the end: the block owns those rows), dQ += dS K through shared memory and
 *             fp32 atomics into dq.
 * The rounding is the cuBLAS path's (bf16 q, k, v, dO, P, dS; fp32 accumulation). */

#define FA_T 64                 /* rows of a tile (queries and keys) */
#define FA_THREADS 128          /* 4 warps x 16 rows */
#define FA_PAD 8                /* bf16 elements of padding per shared-memory row */
#define FA_DS_LD (FA_T + FA_PAD)
#define FA_SMEM_MAX (227 * 1024)      /* Hopper's opt-in limit */

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ void cp_async16(void *d, const void *s, int bytes)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(d);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(s), "r"(bytes));
}

static __device__ __forceinline__ void cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

static __device__ __forceinline__ void cp_wait_all(void)
{
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

static __device__ __forceinline__ void ldm4(unsigned *r, const bf16 *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

static __device__ __forceinline__ void ldm4t(unsigned *r, const bf16 *p)
{
	unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* c(16x8) += a(16x16) b(16x8), bf16 in, fp32 accumulate */
static __device__ __forceinline__ void mma16816(float *c, const unsigned *a, unsigned b0,
                                                unsigned b1)
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
	    "{%8,%9}, {%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ unsigned pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(unsigned *)&v;
}

/* the A fragment of a 16x16 tile at (row 0, col k0) of a row-major [m][k] array */
static __device__ __forceinline__ void frag_a(unsigned *a, const bf16 *base, int ld, int k0)
{
	int l = threadIdx.x & 31;
	ldm4(a, base + (l & 15) * ld + k0 + (l >> 4) * 8);
}

/* B fragments of two n-tiles (n0, n0 + 8) x k16 at k0 from an [n][k] array (b[0..1]: n0,
 * b[2..3]: n0 + 8) */
static __device__ __forceinline__ void frag_b_nk(unsigned *b, const bf16 *base, int ld, int n0,
                                                 int k0)
{
	int l = threadIdx.x & 31, mi = l >> 3, r = l & 7;
	ldm4(b, base + (n0 + (mi >> 1) * 8 + r) * ld + k0 + (mi & 1) * 8);
}

/* the same from a [k][n] array */
static __device__ __forceinline__ void frag_b_kn(unsigned *b, const bf16 *base, int ld, int n0,
                                                 int k0)
{
	int l = threadIdx.x & 31, mi = l >> 3, r = l & 7;
	ldm4t(b, base + (k0 + (mi & 1) * 8 + r) * ld + n0 + (mi >> 1) * 8);
}

/* the A fragment of rows m0..m0+15, cols k0..k0+15 from a [k][m] array */
static __device__ __forceinline__ void frag_a_km(unsigned *a, const bf16 *base, int ld, int m0,
                                                 int k0)
{
	int l = threadIdx.x & 31, mi = l >> 3, r = l & 7;
	ldm4t(a, base + (k0 + (mi >> 1) * 8 + r) * ld + m0 + (mi & 1) * 8);
}

/* the A fragment of a 16 x 16 block (columns 16 kk..16 kk+15) held as accumulators c in the
 * C layout of 8-column tiles (tiles 2 kk and 2 kk + 1), rounded to bf16 */
static __device__ __forceinline__ void frag_c2a(unsigned *a, float (*c)[4], int kk)
{
	a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
	a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
	a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
	a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* acc (nt 8-column tiles) += a (16 x k16) times rows k0.. of a [k][n] array from column n0 */
static __device__ __forceinline__ void mma_kn(float (*acc)[4], const unsigned *a, const bf16 *b,
                                              int ld, int n0, int k0, const int nt)
{
#pragma unroll
	for (int np = 0; np < nt / 2; np++) {
		unsigned f[4];
		frag_b_kn(f, b, ld, n0 + np * 16, k0);
		mma16816(acc[2 * np], a, f[0], f[1]);
		mma16816(acc[2 * np + 1], a, f[2], f[3]);
	}
}

/* acc (8 tiles: 64 columns) += a (16 x k16) times the k16 slice at k0 of 64 rows of an [n][k]
 * array */
static __device__ __forceinline__ void mma_nk64(float (*acc)[4], const unsigned *a,
                                                const bf16 *b, int ld, int k0)
{
#pragma unroll
	for (int np = 0; np < 4; np++) {
		unsigned f[4];
		frag_b_nk(f, b, ld, np * 16, k0);
		mma16816(acc[2 * np], a, f[0], f[1]);
		mma16816(acc[2 * np + 1], a, f[2], f[3]);
	}
}

/* the mask rule of at_sees on packed row facts: b = block index (-1 for a query past T,
 * INT_MAX for a key past S), f = 2 segment + noisy (0 where the mask has none) */
static __device__ __forceinline__ int fa_sees(int qb, int qf, int kb, int kf)
{
	if ((qf >> 1) != (kf >> 1))
		return 0;
	if (qf & 1)
		return (kf & 1) ? kb == qb : kb < qb;
	return !(kf & 1) && kb <= qb;
}

/* the packed facts of query (q 1) or key (q 0) row i of n */
static __device__ __forceinline__ void fa_facts(const struct attn_mask &m, int nz, int sg, int q,
                                                int i, int n, int *b, int *f)
{
	if (i >= n) {
		*b = q ? -1 : 0x7fffffff;
		*f = 0;
		return;
	}
	*b = (q ? m.qpos : m.kpos)[i] / m.block;
	*f = (sg ? 2 * (q ? m.qseg : m.kseg)[i] : 0) + (nz ? (q ? m.qnoisy : m.knoisy)[i] : 0);
}


/* list[] = (j << sh) + code for every j < n with code = map[j stride] + (two ? 4 map[j stride
 * + off2] : 0) != 0, in order, by the calling warp; returns the count to every lane */
static __device__ int fb_list_warp(int *list, const unsigned char *map, int n, int stride,
                                   int off2, int two, int sh)
{
	int lane = threadIdx.x & 31, c = 0;
	for (int b = 0; b < n; b += 32) {
		int j = b + lane, code = 0;
		if (j < n)
			code = map[(size_t)j * stride] + (two ? 4 * map[(size_t)j * stride + off2] : 0);
		unsigned bal = __ballot_sync(0xffffffffu, code != 0);
		if (code)
			list[c + __popc(bal & ((1u << lane) - 1))] = (j << sh) + code;
		c += __popc(bal);
	}
	return c;
}

/* fb_list_warp by warp 0 for the block; returns the count to every thread (ends with a
 * barrier) */
static __device__ int fb_list(int *list, int *cnt, const unsigned char *map, int n, int stride,
                              int off2, int two, int sh)
{
	if (threadIdx.x < 32) {
		int c = fb_list_warp(list, map, n, stride, off2, two, sh);
		if (threadIdx.x == 0)
			*cnt = c;
	}
	__syncthreads();
	return *cnt;
}

/* list[] = 4 j + map[j stride] for the j < n with a visible pair (fb_list of one line) */
static __device__ int fa_list(int *list, int *cnt, const unsigned char *map, int n, int stride)
{
	return fb_list(list, cnt, map, n, stride, 0, 0, 2);
}

/* rows r0 .. r0+R-1 (those < n; zeros past it) of a bf16 array with row stride ld, HD wide,
 * into shared memory with row stride HD + FA_PAD, by cp.async from the block's NTHR threads */
template <int R, int NTHR>
static __device__ __forceinline__ void fb_load(bf16 *dst, const bf16 *src, size_t ld, int r0,
                                               int n, const int HD)
{
	const int ch = HD / 8;

	for (int c = threadIdx.x; c < R * ch; c += NTHR) {
		int r = c / ch, x = c % ch, ok = r0 + r < n;
		cp_async16(dst + r * (HD + FA_PAD) + x * 8, src + (size_t)(ok ? r0 + r : 0) * ld + x * 8,
		           ok ? 16 : 0);
	}
}

/* 64 rows by the FA_THREADS of a version-1 block */
static __device__ __forceinline__ void fa_load(bf16 *dst, const bf16 *src, size_t ld, int r0,
                                               int n, const int HD)
{
	fb_load<FA_T, FA_THREADS>(dst, src, ld, r0, n, HD);
}

/* the online softmax of one m16 tile of scores s (8 tiles of 8 keys) against the keys' facts
 * KB, KF (64) for the rows' facts qb, qf (rows g, g + 8 of the tile at qb[0], qb[qs]; the
 * same for qf): s becomes P (unnormalised,
 * exp2 units: sl2 = log2(e) / sqrt(HD)), the running max mrow and sum lrow move on and the
 * output accumulators o (NT tiles) are rescaled; code 1: the mask per score, 2: none */
static __device__ __forceinline__ void fa_softmax(float (*s)[4], float (*o)[4], const int NT,
                                                  float *mrow, float *lrow, const int *qb,
                                                  const int *qf, const int qs, const int *KB,
                                                  const int *KF, int code, float sl2)
{
	int t4 = threadIdx.x & 3;
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float mx = -INFINITY, mu, alpha, sum = 0.0f;
#pragma unroll
		for (int n = 0; n < 8; n++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int c = n * 8 + 2 * t4 + e;
				float x = s[n][2 * r + e] * sl2;
				if (code == 1 && !fa_sees(qb[r * qs], qf[r * qs], KB[c], KF[c]))
					x = -INFINITY;
				s[n][2 * r + e] = x;
				mx = fmaxf(mx, x);
			}
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		mx = fmaxf(mx, mrow[r]);
		mu = mx == -INFINITY ? 0.0f : mx;
		alpha = exp2f(mrow[r] - mu);
		mrow[r] = mx;
#pragma unroll
		for (int n = 0; n < 8; n++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float p = exp2f(s[n][2 * r + e] - mu);
				s[n][2 * r + e] = p;
				sum += p;
			}
		}
		lrow[r] = lrow[r] * alpha + sum;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			o[n][2 * r] *= alpha;
			o[n][2 * r + 1] *= alpha;
		}
	}
}

/* the forward's end for one m16 tile whose row g is i: out = o / l (rows < T), lse (log2
 * units, INFINITY for a row without a visible key) */
static __device__ __forceinline__ void fa_fwd_store(float *out, float *lse, float (*o)[4],
                                                    const int NT, const float *mrow,
                                                    const float *lrow, int i, int T, int NH,
                                                    int h, const int HD)
{
	int t4 = threadIdx.x & 3;
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float l = lrow[r], inv;
		int row = i + 8 * r;
		l += __shfl_xor_sync(0xffffffffu, l, 1);
		l += __shfl_xor_sync(0xffffffffu, l, 2);
		inv = l > 0.0f ? 1.0f / l : 0.0f;
		if (row >= T)
			continue;
		if (lse && t4 == 0)
			lse[(size_t)row * NH + h] = l > 0.0f ? mrow[r] + log2f(l) : INFINITY;
		if (!out)
			continue;
		float *orow = out + (size_t)row * NH * HD + (size_t)h * HD + 2 * t4;
#pragma unroll
		for (int n = 0; n < NT; n++)
			*(float2 *)(orow + n * 8) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
	}
}

/* key tile kt of the forward into one stage (K rows at sk, V rows at sv when withv, the
 * keys' facts at skb, skf), by the block's first FA_THREADS threads */
static __device__ __forceinline__ void fa_kv_stage(bf16 *sk, bf16 *sv, int *skb, int *skf,
                                                   const bf16 *kh, const bf16 *vh, size_t KVD,
                                                   int kt, int S, const int HD, int withv,
                                                   const struct attn_mask &m, int nz, int sg)
{
	int tid = threadIdx.x;

	fa_load(sk, kh, KVD, kt * FA_T, S, HD);
	if (withv)
		fa_load(sv, vh, KVD, kt * FA_T, S, HD);
	if (tid < FA_T)
		fa_facts(m, nz, sg, 0, kt * FA_T + tid, S, &skb[tid], &skf[tid]);
}

static __device__ __forceinline__ void fa_fwd_body(float *out, float *lse, const bf16 *q,
                                                   const bf16 *k, const bf16 *v,
                                                   const unsigned char *map, int T, int S,
                                                   int NH, int NKV, const int HD,
                                                   struct attn_mask m, int nz, int sg, float sl2)
{
	extern __shared__ __align__(16) unsigned char fa_smem[];
	const int LD = HD + FA_PAD, NT = HD / 8;
	bf16 *sq = (bf16 *)fa_smem, *sk = sq + FA_T * LD, *sv = sk + 2 * FA_T * LD;
	int *skb = (int *)(sv + 2 * FA_T * LD), *skf = skb + 2 * FA_T, *cnt = skf + 2 * FA_T;
	int *list = cnt + 4;
	int qt = blockIdx.x, h = blockIdx.y, hk = h / (NH / NKV), nkt = CEIL_DIV(S, FA_T);
	int QD = NH * HD, KVD = NKV * HD, i0 = qt * FA_T;
	int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
	int nl = fa_list(list, cnt, map + (size_t)qt * nkt, nkt, 1);
	const bf16 *kh = k + (size_t)hk * HD, *vh = v + (size_t)hk * HD;
	int qb[2], qf[2];
	float o[16][4], mrow[2] = { -INFINITY, -INFINITY }, lrow[2] = { 0.0f, 0.0f };
	unsigned qa[8][4];

	fa_load(sq, q + (size_t)h * HD, QD, i0, T, HD);
	if (nl)
		fa_kv_stage(sk, sv, skb, skf, kh, vh, KVD, list[0] >> 2, S, HD, out != NULL, m, nz,
		            sg);
	cp_commit();
	for (int r = 0; r < 2; r++)
		fa_facts(m, nz, sg, 1, i0 + w * 16 + g + 8 * r, T, &qb[r], &qf[r]);
#pragma unroll
	for (int n = 0; n < NT; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	for (int it = 0; it < nl; it++) {
		int st = it & 1, code = list[it] & 3;
		const bf16 *K = sk + st * FA_T * LD, *V = sv + st * FA_T * LD;
		float s[8][4];

		cp_wait_all();
		__syncthreads();
		if (it == 0) {
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++)
				frag_a(qa[kk], sq + w * 16 * LD, LD, kk * 16);
		}
		if (it + 1 < nl) {
			int ns = st ^ 1;
			fa_kv_stage(sk + ns * FA_T * LD, sv + ns * FA_T * LD, skb + ns * FA_T,
			            skf + ns * FA_T, kh, vh, KVD, list[it + 1] >> 2, S, HD, out != NULL,
			            m, nz, sg);
		}
		cp_commit();
#pragma unroll
		for (int n = 0; n < 8; n++)
			s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++)
			mma_nk64(s, qa[kk], K, LD, kk * 16);
		fa_softmax(s, o, NT, mrow, lrow, qb, qf, 1, skb + st * FA_T, skf + st * FA_T, code, sl2);
		if (!out)
			continue;
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			unsigned pa[4];
			frag_c2a(pa, s, kk);
			mma_kn(o, pa, V, LD, 0, kk * 16, NT);
		}
	}
	fa_fwd_store(out, lse, o, NT, mrow, lrow, i0 + w * 16 + g, T, NH, h, HD);
}

/* out (NULL: only lse) and/or lse (NULL: only out); grid (query tiles, NH); HD 64 or 128 */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS)
fa_fwd(float *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
       const unsigned char *map, int T, int S, int NH, int NKV, struct attn_mask m, int nz,
       int sg, float sl2)
{
	fa_fwd_body(out, lse, q, k, v, map, T, S, NH, NKV, HD, m, nz, sg, sl2);
}

/* p[0..3] += a..d (16-byte aligned global memory) */
static __device__ __forceinline__ void atomic_add4(float *p, float a, float b, float c, float d)
{
#if __CUDA_ARCH__ >= 900
	atomicAdd((float4 *)p, make_float4(a, b, c, d));
#else
	atomicAdd(p, a);
	atomicAdd(p + 1, b);
	atomicAdd(p + 2, c);
	atomicAdd(p + 3, d);
#endif
}

/* p[0..1] += a, b (8-byte aligned global memory) */
static __device__ __forceinline__ void atomic_add2(float *p, float a, float b)
{
#if __CUDA_ARCH__ >= 900
	atomicAdd((float2 *)p, make_float2(a, b));
#else
	atomicAdd(p, a);
	atomicAdd(p + 1, b);
#endif
}

/* the query-side rows of a backward step into one stage, by the block's NTHR threads: the Q
 * tile of head h, lse, D, facts (the dO tile goes to its buffer separately) */
template <int NTHR>
static __device__ __forceinline__ void fb_stage(bf16 *sq, float *slse, float *sd, int *sqb,
                                                int *sqf, const bf16 *q, const float *lse,
                                                const float *d, int qt, int h, int T, int NH,
                                                const int HD, const struct attn_mask &m, int nz,
                                                int sg)
{
	int i = qt * FA_T + threadIdx.x;

	fb_load<FA_T, NTHR>(sq, q + (size_t)h * HD, (size_t)NH * HD, qt * FA_T, T, HD);
	if (threadIdx.x < FA_T) {
		slse[threadIdx.x] = i < T ? lse[(size_t)i * NH + h] : INFINITY;
		sd[threadIdx.x] = i < T ? d[(size_t)i * NH + h] : 0.0f;
		fa_facts(m, nz, sg, 1, i, T, &sqb[threadIdx.x], &sqf[threadIdx.x]);
	}
}

static __device__ __forceinline__ void fa_bwd_stage(bf16 *sq, float *slse, float *sd, int *sqb,
                                                    int *sqf, const bf16 *q, const float *lse,
                                                    const float *d, int qt, int h, int T,
                                                    int NH, const int HD,
                                                    const struct attn_mask &m, int nz, int sg)
{
	fb_stage<FA_THREADS>(sq, slse, sd, sqb, sqf, q, lse, d, qt, h, T, NH, HD, m, nz, sg);
}

/* one backward step of a warp's 16 keys (rows Kw, Vw in shared memory; facts of its rows g,
 * g + 8 at kb[0], kb[ks] and kf[0], kf[ks]) against a 64-query tile (Q, DO in shared memory, their lse L, D Dd and facts
 * QB, QF): S^T = K Q^T, P^T, dP^T = V dO^T, dS^T = P^T (dP^T - D) into the warp's 16 rows
 * dsw of the bf16 dS^T array (row stride FA_DS_LD); dva += P^T dO, dka += dS^T Q */
static __device__ __forceinline__ void fa_bwd_step(float (*dka)[4], float (*dva)[4],
                                                   const int HD, const bf16 *Kw,
                                                   const bf16 *Vw, const bf16 *Q,
                                                   const bf16 *DO, const float *L,
                                                   const float *Dd, const int *QB,
                                                   const int *QF, const int *kb, const int *kf,
                                                   const int ks, int code, float sl2, bf16 *dsw)
{
	const int LD = HD + FA_PAD, NT = HD / 8;
	int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
	float s[8][4], dp[8][4];

#pragma unroll
	for (int n = 0; n < 8; n++) {
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
		dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
	}
#pragma unroll
	for (int kk = 0; kk < HD / 16; kk++) {
		unsigned ka[4], va[4];
		frag_a(ka, Kw, LD, kk * 16);
		frag_a(va, Vw, LD, kk * 16);
		mma_nk64(s, ka, Q, LD, kk * 16);
		mma_nk64(dp, va, DO, LD, kk * 16);
	}
	/* P^T and dS^T (rows: this warp's keys, columns: the tile's queries) */
#pragma unroll
	for (int n = 0; n < 8; n++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int c = n * 8 + 2 * t4 + (e & 1), r = e >> 1;
			float p = exp2f(s[n][e] * sl2 - L[c]);
			if (code == 1 && !fa_sees(QB[c], QF[c], kb[r * ks], kf[r * ks]))
				p = 0.0f;
			s[n][e] = p;
			dp[n][e] = p * (dp[n][e] - Dd[c]);
		}
	}
#pragma unroll
	for (int n = 0; n < 8; n++) {
#pragma unroll
		for (int r = 0; r < 2; r++)
			*(unsigned *)(dsw + (g + 8 * r) * FA_DS_LD + n * 8 + 2 * t4) =
				pack_bf16(dp[n][2 * r], dp[n][2 * r + 1]);
	}
#pragma unroll
	for (int kk = 0; kk < 4; kk++) {
		unsigned pa[4], da[4];
		frag_c2a(pa, s, kk);
		frag_c2a(da, dp, kk);
		mma_kn(dva, pa, DO, LD, 0, kk * 16, NT);
		mma_kn(dka, da, Q, LD, 0, kk * 16, NT);
	}
}

/* dq rows i and i + 8 (i: an m16 tile's first row + g), columns c0 + 8 n + 2 t4 + (0, 1)
 * (the C layout of nt 8-column tiles acc) += scale acc, rows past T left out; lane pairs swap
 * halves: the even lane adds 4 columns of row i, the odd one 4 columns of row i + 8 (one
 * 16-byte atomic each) */
static __device__ __forceinline__ void fa_dq_add(float *dq, float (*acc)[4], const int nt, int i,
                                                 int T, size_t QD, size_t c0, float scale)
{
	int t4 = threadIdx.x & 3, odd = t4 & 1, row = i + 8 * odd;
	float *dst = dq + (size_t)row * QD + c0 + 2 * (t4 & ~1);
#pragma unroll
	for (int n = 0; n < nt; n++) {
		float s0 = odd ? acc[n][0] : acc[n][2], s1 = odd ? acc[n][1] : acc[n][3];
		float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
		float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
		if (row >= T)
			continue;
		if (odd)
			atomic_add4(dst + n * 8, scale * r0, scale * r1, scale * acc[n][2],
			            scale * acc[n][3]);
		else
			atomic_add4(dst + n * 8, scale * acc[n][0], scale * acc[n][1], scale * r0,
			            scale * r1);
	}
}

/* the end of a backward block: dk, dv rows j and j + 8 (j: a warp's first key + g), columns
 * c0 + 8 n + 2 t4 + (0, 1) = scale dka, dva (the C layout of NT 8-column tiles), keys past S
 * left out; stored, or added (atomic) where several blocks sum into the rows */
static __device__ __forceinline__ void fa_dkv_store(float *dk, float *dv, float (*dka)[4],
                                                    float (*dva)[4], const int NT, int j, int S,
                                                    size_t KVD, size_t c0, float scale,
                                                    int atomic)
{
	int t4 = threadIdx.x & 3;
#pragma unroll
	for (int r = 0; r < 2; r++) {
		int row = j + 8 * r;
		if (row >= S)
			continue;
		float *kr = dk + (size_t)row * KVD + c0 + 2 * t4;
		float *vr = dv + (size_t)row * KVD + c0 + 2 * t4;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			float k0 = scale * dka[n][2 * r], k1 = scale * dka[n][2 * r + 1];
			if (atomic) {
				atomic_add2(kr + n * 8, k0, k1);
				atomic_add2(vr + n * 8, dva[n][2 * r], dva[n][2 * r + 1]);
			} else {
				*(float2 *)(kr + n * 8) = make_float2(k0, k1);
				*(float2 *)(vr + n * 8) = make_float2(dva[n][2 * r], dva[n][2 * r + 1]);
			}
		}
	}
}

static __device__ __forceinline__ void fa_bwd_body(float *dq, float *dk, float *dv, const bf16 *q,
                                                   const bf16 *k, const bf16 *v,
                                                   const bf16 *dout, const float *lse,
                                                   const float *d, const unsigned char *map,
                                                   int T, int S, int NH, int NKV, const int HD,
                                                   struct attn_mask m, int nz, int sg,
                                                   float sl2, float scale)
{
	extern __shared__ __align__(16) unsigned char fa_smem[];
	const int LD = HD + FA_PAD, NT = HD / 8;
	bf16 *sk = (bf16 *)fa_smem, *sv = sk + FA_T * LD, *sq = sv + FA_T * LD;
	bf16 *sdo = sq + 2 * FA_T * LD, *sds = sdo + FA_T * LD;
	float *slse = (float *)(sds + FA_T * FA_DS_LD), *sd = slse + 2 * FA_T;
	int *sqb = (int *)(sd + 2 * FA_T), *sqf = sqb + 2 * FA_T, *cnt = sqf + 2 * FA_T;
	int *list = cnt + 4;
	int kt = blockIdx.x, hk = blockIdx.y, group = NH / NKV, nkt = gridDim.x;
	int nqt = CEIL_DIV(T, FA_T), QD = NH * HD, KVD = NKV * HD, j0 = kt * FA_T;
	int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
	int nl = fa_list(list, cnt, map + kt, nqt, nkt), nit = nl * group;
	int kb[2], kf[2];
	float dka[16][4], dva[16][4];

	for (int r = 0; r < 2; r++)
		fa_facts(m, nz, sg, 0, j0 + w * 16 + g + 8 * r, S, &kb[r], &kf[r]);
#pragma unroll
	for (int n = 0; n < NT; n++) {
		dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.0f;
		dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.0f;
	}
	fa_load(sk, k + (size_t)hk * HD, KVD, j0, S, HD);
	fa_load(sv, v + (size_t)hk * HD, KVD, j0, S, HD);
	if (nit) {
		fa_bwd_stage(sq, slse, sd, sqb, sqf, q, lse, d, list[0] >> 2, hk * group, T, NH, HD,
		             m, nz, sg);
		fa_load(sdo, dout + (size_t)hk * group * HD, QD, (list[0] >> 2) * FA_T, T, HD);
	}
	cp_commit();
	for (int it = 0; it < nit; it++) {
		int st = it & 1, e0 = list[it % nl], qt = e0 >> 2, code = e0 & 3;
		int h = hk * group + it / nl;
		const bf16 *Q = sq + st * FA_T * LD, *DO = sdo;
		const float *L = slse + st * FA_T, *Dd = sd + st * FA_T;
		const int *QB = sqb + st * FA_T, *QF = sqf + st * FA_T;

		cp_wait_all();
		__syncthreads();
		if (it + 1 < nit) {
			int ns = st ^ 1;
			fa_bwd_stage(sq + ns * FA_T * LD, slse + ns * FA_T, sd + ns * FA_T,
			             sqb + ns * FA_T, sqf + ns * FA_T, q, lse, d,
			             list[(it + 1) % nl] >> 2, hk * group + (it + 1) / nl, T, NH, HD, m,
			             nz, sg);
		}
		cp_commit();
		fa_bwd_step(dka, dva, HD, sk + w * 16 * LD, sv + w * 16 * LD, Q, DO, L, Dd, QB, QF, kb,
		            kf, 1, code, sl2, sds + w * 16 * FA_DS_LD);
		__syncthreads();
		/* dO is read no more in this step: the next step's tile into its buffer */
		if (it + 1 < nit)
			fa_load(sdo, dout + (size_t)(hk * group + (it + 1) / nl) * HD, QD,
			        (list[(it + 1) % nl] >> 2) * FA_T, T, HD);
		cp_commit();
		/* dQ of this warp's 16 queries += scale dS K, 64 columns at a time */
		int i = qt * FA_T + w * 16 + g;
#pragma unroll
		for (int half = 0; half < HD / 64; half++) {
			float acc[8][4];
#pragma unroll
			for (int n = 0; n < 8; n++)
				acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
			for (int kk = 0; kk < 4; kk++) {
				unsigned a[4];
				frag_a_km(a, sds, FA_DS_LD, w * 16, kk * 16);
				mma_kn(acc, a, sk, LD, half * 64, kk * 16, 8);
			}
			fa_dq_add(dq, acc, 8, i, T, QD, (size_t)h * HD + half * 64, scale);
		}
	}
	fa_dkv_store(dk, dv, dka, dva, NT, j0 + w * 16 + g, S, KVD, (size_t)hk * HD, scale, 0);
}

/* grid (key tiles, NKV); HD 64 or 128 */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS)
fa_bwd(float *dq, float *dk, float *dv, const bf16 *q, const bf16 *k, const bf16 *v,
       const bf16 *dout, const float *lse, const float *d, const unsigned char *map, int T,
       int S, int NH, int NKV, struct attn_mask m, int nz, int sg, float sl2, float scale)
{
	fa_bwd_body(dq, dk, dv, q, k, v, dout, lse, d, map, T, S, NH, NKV, HD, m, nz, sg, sl2,
	            scale);
}

/* ---------------------------------------------------------------- fused path, version 2
 *
 * The same passes and rounding with larger blocks (the default but for the forward at HD 64;
 * DICE_FA in the environment picks, read at every call: fa_version):
 *   map      one warp per 64 x 64 tile, the rows' facts staged in shared memory once per block
 *            (version 1 evaluates them again for every pair)
 *   order    blocks start heaviest first (by their count of visible tiles in the map, a
 *            ranking on the device), so that the long blocks of a causal mask do not run last
 *   forward  one block per (128 query rows, head), 4 warps x 32 rows: every K and V fragment
 *            from shared memory feeds two m16 tiles; a warp skips a key tile its 64-row half
 *            does not see
 *   backward one block per (128 keys, query head), 8 warps x 16 keys, over the visible query
 *            tiles: dQ of a tile is summed over 128 keys before its atomics (half of version
 *            1's per FLOP); Q and dO double-buffered; dK, dV stored, or added atomically
 *            (the caller zeroed them) when a kv head serves several query heads */

#define FB_M 128                /* query rows of a forward block, keys of a backward block */
#define FB_BT 256               /* backward threads: 8 warps x 16 keys */
#define FB_MAPW 8               /* key tiles (one a warp) of a map block */

/* the summary of a 64-row tile's facts (fb at row blocks, ff at flags: f3_facts_kernel's)
 * for the calling warp: the smallest and largest row block, and the common flags f, or -1
 * where they differ */
static __device__ void fb_tile_sum(const int *fb, const int *ff, int t, int *bmin, int *bmax,
                                   int *f)
{
	int lane = threadIdx.x & 31, r = t * FA_T + lane, fl;
	int b0 = fb[r], f0 = ff[r], b1 = fb[r + 32], f1 = ff[r + 32];

	*bmin = __reduce_min_sync(0xffffffffu, min(b0, b1));
	*bmax = __reduce_max_sync(0xffffffffu, max(b0, b1));
	fl = __shfl_sync(0xffffffffu, f0, 0);
	*f = __all_sync(0xffffffffu, f0 == fl && f1 == fl) ? fl : -1;
}

/* a tile's map code from the summaries of its query rows (qlo, qhi, qf) and keys (klo,
 * khi, kf), where they decide it (fa_sees over every pair in closed form: the rows' flags
 * alike on each side, the rule a comparison of blocks), else -1 */
static __device__ __forceinline__ int fb_code_sum(int qlo, int qhi, int qf, int klo, int khi,
                                                  int kf)
{
	if (qf < 0 || kf < 0)
		return -1;
	if ((qf >> 1) != (kf >> 1))
		return 0;
	if (qf & 1) {
		if (!(kf & 1))                  /* kb < qb */
			return klo < qhi ? (khi < qlo ? 2 : 1) : 0;
		if (khi < qlo || klo > qhi)     /* kb == qb */
			return 0;
		return qlo == qhi && klo == khi ? 2 : -1;
	}
	if (kf & 1)
		return 0;
	return klo <= qhi ? (khi <= qlo ? 2 : 1) : 0;   /* kb <= qb */
}

/* map[qt * nkt + kt] for query tile qt and key tile kt: 0 none visible, 1 some, 2 all; one
 * warp a tile (FB_MAPW warps a block, walking the tiles): the code from the tiles' summaries
 * where they decide it (fb_code_sum), else the mask rule over the 4096 pairs; the rows'
 * facts from fct (f3_facts_kernel: nqr query rows, nkr keys). Only where flag[0] is set
 * (the plan changed: fa_plan), clearing flag[1], flag[2] (the orders built from the map) */
static __global__ void __launch_bounds__(32 * FB_MAPW)
fb_map_kernel(unsigned char *map, const int *fct, int nqr, int nkr, int nqt, int nkt, int *flag)
{
	const int *fqb = fct, *fqf = fct + nqr, *fkb = fqf + nqr, *fkf = fkb + nkr;
	int lane = threadIdx.x & 31, w = blockIdx.x * FB_MAPW + (threadIdx.x >> 5);

	if (!flag[0])
		return;
	if (w == 0 && lane == 0)
		flag[1] = flag[2] = 0;
	for (int t = w; t < nqt * nkt; t += gridDim.x * FB_MAPW) {   /* (a whole warp) */
		int qt = t / nkt, kt = t % nkt, qlo, qhi, qf, klo, khi, kf, code;
		fb_tile_sum(fqb, fqf, qt, &qlo, &qhi, &qf);
		fb_tile_sum(fkb, fkf, kt, &klo, &khi, &kf);
		code = fb_code_sum(qlo, qhi, qf, klo, khi, kf);
		if (code < 0) {
			int any = 0, all = 1, j = kt * FA_T + lane;
			int kb0 = fkb[j], kf0 = fkf[j], kb1 = fkb[j + 32], kf1 = fkf[j + 32];
			for (int r = qt * FA_T; r < qt * FA_T + FA_T; r++) {
				int v0 = fa_sees(fqb[r], fqf[r], kb0, kf0), v1 = fa_sees(fqb[r], fqf[r], kb1, kf1);
				any |= v0 | v1;
				all &= v0 & v1;
			}
			any = __any_sync(0xffffffffu, any);
			all = __all_sync(0xffffffffu, all);
			code = any ? (all ? 2 : 1) : 0;
		}
		if (lane == 0)
			map[t] = code;
	}
}

/* one block: work[u] = the tiles with a visible pair among map lines 2u and 2u + 1 (rows,
 * byrow: query tiles, the forward's units; or columns: key tiles, the backward's), a warp a
 * unit; then order[rank] = u for the nu units by falling work (ties: the lower u first).
 * Only where the plan changed (flag[0]) or this order is not built yet (flag[1 + !byrow]),
 * which it then marks built */
static __global__ void fb_order_kernel(int *order, int *work, const unsigned char *map, int nqt,
                                       int nkt, int byrow, int *flag)
{
	int lane = threadIdx.x & 31, nw = blockDim.x >> 5, *built = &flag[1 + !byrow];
	int nline = byrow ? nqt : nkt, len = byrow ? nkt : nqt, nu = CEIL_DIV(nline, 2);

	if (!flag[0] && *built)
		return;                         /* (the whole block) */
	for (int u = threadIdx.x >> 5; u < nu; u += nw) {
		int a = 2 * u, b = 2 * u + 1, c = 0;
		for (int x = lane; x < len; x += 32) {
			size_t ia = byrow ? (size_t)a * nkt + x : (size_t)x * nkt + a;
			size_t ib = byrow ? (size_t)b * nkt + x : (size_t)x * nkt + b;
			c += (map[ia] | (b < nline ? map[ib] : 0)) != 0;
		}
		c = __reduce_add_sync(0xffffffffu, c);
		if (lane == 0)
			work[u] = c;
	}
	__syncthreads();
	for (int u = threadIdx.x; u < nu; u += blockDim.x) {
		int r = 0;
		for (int x = 0; x < nu; x++)
			r += work[x] > work[u] || (work[x] == work[u] && x < u);
		order[r] = u;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		*built = 1;
}

/* out (NULL: only lse) and/or lse (NULL: only out); grid (query units x NH): block b takes
 * the 128 rows of unit order[b / NH] and head b % NH; HD 64 or 128 */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS, 2)
fb_fwd(float *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
       const unsigned char *map, const int *order, int T, int S, int NH, int NKV,
       struct attn_mask m, int nz, int sg, float sl2)
{
	extern __shared__ __align__(16) unsigned char fa_smem[];
	const int LD = HD + FA_PAD, NT = HD / 8;
	bf16 *sq = (bf16 *)fa_smem, *sk = sq + FB_M * LD, *sv = sk + 2 * FA_T * LD;
	int *skb = (int *)(sv + 2 * FA_T * LD), *skf = skb + 2 * FA_T, *sqb = skf + 2 * FA_T;
	int *sqf = sqb + FB_M, *cnt = sqf + FB_M, *list = cnt + 4;
	int u = order[blockIdx.x / NH], h = blockIdx.x % NH, hk = h / (NH / NKV);
	int nqt = CEIL_DIV(T, FA_T), nkt = CEIL_DIV(S, FA_T);
	int QD = NH * HD, KVD = NKV * HD, i0 = u * FB_M;
	int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
	int sh = 2 * (w >> 1);          /* the bits of this warp's 64-row half in a list entry */
	int nl = fb_list(list, cnt, map + (size_t)2 * u * nkt, nkt, 1, nkt, 2 * u + 1 < nqt, 4);
	const bf16 *kh = k + (size_t)hk * HD, *vh = v + (size_t)hk * HD;
	const bf16 *qw = sq + w * 32 * LD;
	float o[2][NT][4], mrow[2][2], lrow[2][2];

	fb_load<FB_M, FA_THREADS>(sq, q + (size_t)h * HD, QD, i0, T, HD);
	if (nl)
		fa_kv_stage(sk, sv, skb, skf, kh, vh, KVD, list[0] >> 4, S, HD, out != NULL, m, nz,
		            sg);
	cp_commit();
	fa_facts(m, nz, sg, 1, i0 + tid, T, &sqb[tid], &sqf[tid]);   /* FA_THREADS == FB_M */
#pragma unroll
	for (int mt = 0; mt < 2; mt++) {
#pragma unroll
		for (int r = 0; r < 2; r++) {
			mrow[mt][r] = -INFINITY;
			lrow[mt][r] = 0.0f;
		}
#pragma unroll
		for (int n = 0; n < NT; n++)
			o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
	}
	for (int it = 0; it < nl; it++) {
		int st = it & 1, code = (list[it] >> sh) & 3;
		const bf16 *K = sk + st * FA_T * LD, *V = sv + st * FA_T * LD;
		float s[2][8][4];

		cp_wait_all();
		__syncthreads();
		if (it + 1 < nl) {
			int ns = st ^ 1;
			fa_kv_stage(sk + ns * FA_T * LD, sv + ns * FA_T * LD, skb + ns * FA_T,
			            skf + ns * FA_T, kh, vh, KVD, list[it + 1] >> 4, S, HD, out != NULL,
			            m, nz, sg);
		}
		cp_commit();
		if (!code)
			continue;               /* (warp-uniform) nothing of this tile is visible */
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
#pragma unroll
			for (int n = 0; n < 8; n++)
				s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
		}
#pragma unroll
		for (int kk = 0; kk < HD / 16; kk++) {
			unsigned a0[4], a1[4];
			frag_a(a0, qw, LD, kk * 16);
			frag_a(a1, qw + 16 * LD, LD, kk * 16);
#pragma unroll
			for (int np = 0; np < 4; np++) {
				unsigned f[4];
				frag_b_nk(f, K, LD, np * 16, kk * 16);
				mma16816(s[0][2 * np], a0, f[0], f[1]);
				mma16816(s[0][2 * np + 1], a0, f[2], f[3]);
				mma16816(s[1][2 * np], a1, f[0], f[1]);
				mma16816(s[1][2 * np + 1], a1, f[2], f[3]);
			}
		}
		unsigned pa[2][4][4];       /* P in bf16, the A fragments of the P V products */
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
			int r0 = w * 32 + mt * 16 + g;
			fa_softmax(s[mt], o[mt], NT, mrow[mt], lrow[mt], sqb + r0, sqf + r0, 8,
			           skb + st * FA_T, skf + st * FA_T, code, sl2);
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				frag_c2a(pa[mt][kk], s[mt], kk);
		}
		if (!out)
			continue;
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
#pragma unroll
			for (int np = 0; np < NT / 2; np++) {
				unsigned f[4];
				frag_b_kn(f, V, LD, np * 16, kk * 16);
				mma16816(o[0][2 * np], pa[0][kk], f[0], f[1]);
				mma16816(o[0][2 * np + 1], pa[0][kk], f[2], f[3]);
				mma16816(o[1][2 * np], pa[1][kk], f[0], f[1]);
				mma16816(o[1][2 * np + 1], pa[1][kk], f[2], f[3]);
			}
		}
	}
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
		fa_fwd_store(out, lse, o[mt], NT, mrow[mt], lrow[mt], i0 + w * 32 + mt * 16 + g, T,
		             NH, h, HD);
}

/* grid (key units x NH): block b takes the 128 keys of unit order[b / NH] against query
 * head b % NH; HD 64 or 128 */
template <int HD>
static __global__ void __launch_bounds__(FB_BT, 1)
fb_bwd(float *dq, float *dk, float *dv, const bf16 *q, const bf16 *k, const bf16 *v,
       const bf16 *dout, const float *lse, const float *d, const unsigned char *map,
       const int *order, int T, int S, int NH, int NKV, struct attn_mask m, int nz, int sg,
       float sl2, float scale)
{
	extern __shared__ __align__(16) unsigned char fa_smem[];
	const int LD = HD + FA_PAD, NT = HD / 8, DC = HD / 2;  /* DC: dQ columns of a warp */
	bf16 *sk = (bf16 *)fa_smem, *sv = sk + FB_M * LD, *sq = sv + FB_M * LD;
	bf16 *sdo = sq + 2 * FA_T * LD, *sds = sdo + 2 * FA_T * LD;
	float *slse = (float *)(sds + FB_M * FA_DS_LD), *sd = slse + 2 * FA_T;
	int *sqb = (int *)(sd + 2 * FA_T), *sqf = sqb + 2 * FA_T, *skb = sqf + 2 * FA_T;
	int *skf = skb + FB_M, *cnt = skf + FB_M, *list = cnt + 4;
	int u = order[blockIdx.x / NH], h = blockIdx.x % NH, group = NH / NKV, hk = h / group;
	int nqt = CEIL_DIV(T, FA_T), nkt = CEIL_DIV(S, FA_T), QD = NH * HD, KVD = NKV * HD;
	int j0 = u * FB_M, tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2;
	int sh = 2 * (w >> 2);          /* the bits of this warp's 64-key half in a list entry */
	int nl = fb_list(list, cnt, map + 2 * u, nqt, nkt, 1, 2 * u + 1 < nkt, 4);
	const bf16 *doh = dout + (size_t)h * HD;
	float dka[NT][4], dva[NT][4];

	if (tid < FB_M)
		fa_facts(m, nz, sg, 0, j0 + tid, S, &skb[tid], &skf[tid]);
#pragma unroll
	for (int n = 0; n < NT; n++) {
		dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.0f;
		dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.0f;
	}
	fb_load<FB_M, FB_BT>(sk, k + (size_t)hk * HD, KVD, j0, S, HD);
	fb_load<FB_M, FB_BT>(sv, v + (size_t)hk * HD, KVD, j0, S, HD);
	if (nl) {
		int qt = list[0] >> 4;
		fb_stage<FB_BT>(sq, slse, sd, sqb, sqf, q, lse, d, qt, h, T, NH, HD, m, nz, sg);
		fb_load<FA_T, FB_BT>(sdo, doh, QD, qt * FA_T, T, HD);
	}
	cp_commit();
	for (int it = 0; it < nl; it++) {
		int st = it & 1, e = list[it], qt = e >> 4, code = (e >> sh) & 3;

		cp_wait_all();
		__syncthreads();
		if (it + 1 < nl) {
			int ns = st ^ 1, nq = list[it + 1] >> 4;
			fb_stage<FB_BT>(sq + ns * FA_T * LD, slse + ns * FA_T, sd + ns * FA_T,
			                sqb + ns * FA_T, sqf + ns * FA_T, q, lse, d, nq, h, T, NH, HD, m,
			                nz, sg);
			fb_load<FA_T, FB_BT>(sdo + ns * FA_T * LD, doh, QD, nq * FA_T, T, HD);
		}
		cp_commit();
		if (code)                       /* warp-uniform */
			fa_bwd_step(dka, dva, HD, sk + w * 16 * LD, sv + w * 16 * LD,
			            sq + st * FA_T * LD, sdo + st * FA_T * LD, slse + st * FA_T,
			            sd + st * FA_T, sqb + st * FA_T, sqf + st * FA_T,
			            skb + w * 16 + g, skf + w * 16 + g, 8, code, sl2,
			            sds + w * 16 * FA_DS_LD);
		__syncthreads();
		/* dQ of queries 16 (w & 3) .. + 15, columns DC (w >> 2) .. + DC - 1, += scale dS K
		 * over the keys of the halves with a visible pair (the others wrote no dS) */
		float acc[DC / 8][4];
#pragma unroll
		for (int n = 0; n < DC / 8; n++)
			acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < FB_M / 16; kk++) {
			unsigned a[4];
			if (!((e >> (2 * (kk / 4))) & 3))
				continue;
			frag_a_km(a, sds, FA_DS_LD, (w & 3) * 16, kk * 16);
			mma_kn(acc, a, sk, LD, (w >> 2) * DC, kk * 16, DC / 8);
		}
		fa_dq_add(dq, acc, DC / 8, qt * FA_T + (w & 3) * 16 + g, T, QD,
		          (size_t)h * HD + (w >> 2) * DC, scale);
	}
	fa_dkv_store(dk, dv, dka, dva, NT, j0 + w * 16 + g, S, KVD, (size_t)hk * HD, scale,
	             group > 1);
}

/* ---------------------------------------------------------------- fused path, version 3
 *
 * The forward on Hopper's warpgroup products (wgmma, sm_90a; head dim 128 on a
 * compute-capability-9.0 device, else version 2 runs): the same map, unit order, rounding and
 * lse / output contract as version 2 (whose backward takes its lse), one block of 3
 * warpgroups per (128 query rows, head) item, or fewer blocks walking several (f3_fwd).
 * Warpgroup 0 is the producer: one warp copies by TMA each item's Q (128 rows) and row facts,
 * then for every visible key tile of the item's list K and V (64 keys) into the next slot of
 * a ring of F3_NS stages (with the keys' facts where a tile is masked element by element); a
 * slot's "full" barrier completes with the copies' bytes, its "empty" one with an arrival of
 * each consumer warp. Warpgroups 1 and 2 are the consumers, 64 query rows (one map line)
 * each: S = Q K^T by 8 k16 products m64n64 (Q as register A fragments, K in shared memory),
 * the online softmax of version 2 in registers (fa_softmax: a wgmma accumulator holds, per
 * warp, the C layout of mma.sync m16n8 tiles), P rounded to bf16 into the A fragments of
 * O += P V, 4 k16 products m64n128 with V as an N-major B (the transpose bit); a consumer
 * skips the tiles its map line does not see. Shared memory: every operand in rows of 128
 * bytes (64 columns), 128-byte swizzled as the TMA writes them, 1024-aligned: Q (two buffers)
 * as 2 column halves of 128 rows, a stage as K's two halves then V's (64 rows each). */

#define F3_NS 3                         /* stages of the K, V ring */
#define F3_HALF (FA_T * 128)            /* 64 rows of 128 bytes: a column half of a K or V tile */
#define F3_Q (2 * FB_M * 128)           /* Q: two column halves of 128 rows */
#define F3_STAGE (4 * F3_HALF)          /* K halves 0, 1, then V halves 0, 1 */
#define F3_THREADS 384

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)    /* (the sm_90a pass: the other passes use none) */
/* S (the accumulators of m64n64: per warp the C layout of 8 m16n8 tiles) = Q K^T, Q from
 * the A fragments qa (f3_qfrag) and the stage st's K: issued and committed, not waited for */
static __device__ __forceinline__ void f3_qk(float (*s)[4], unsigned (*qa)[4], const char *st)
{
#pragma unroll
	for (int kk = 0; kk < 8; kk++)
		wg_op<64>::rs(&s[0][0], make_uint4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]),
		              wg_desc(st + (kk >> 2) * F3_HALF + (kk & 3) * 32, 16, 1024, 1), kk, 0);
	wg_commit();
}

/* qa = the A fragments (mma.sync m16n8k16) of this warp's 16 rows of the 64 at qw (2 column
 * halves, F3_Q / 2 apart), the 8 k16 slices of the 128 columns, by ldmatrix from the
 * swizzled rows (16-byte chunk c of row r at c ^ r % 8) */
static __device__ __forceinline__ void f3_qfrag(unsigned (*qa)[4], const char *qw)
{
	int l = threadIdx.x & 31, r = ((threadIdx.x >> 5) & 3) * 16 + (l & 15);
#pragma unroll
	for (int kk = 0; kk < 8; kk++) {
		int c = (kk & 3) * 2 + (l >> 4);
		ldm4(qa[kk], (const bf16 *)(qw + (kk >> 2) * FB_M * 128 + r * 128 + ((c ^ (r & 7)) << 4)));
	}
}

/* O += P V for the stage st's V (P: the A fragments pa of the 4 k16 slices of 64 keys):
 * issued and committed. V's rows 16 kk ..: 16 keys (K) by 128 columns (N, the halves
 * F3_HALF apart: the leading offset), 8-row groups 1024 bytes apart */
static __device__ __forceinline__ void f3_pv(float (*o)[4], unsigned (*pa)[4], const char *st)
{
#pragma unroll
	for (int kk = 0; kk < 4; kk++)
		wg_op<128>::rst(&o[0][0], make_uint4(pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]),
		                wg_desc(st + 2 * F3_HALF + kk * 2048, F3_HALF, 1024, 1), 1, 0);
	wg_commit();
}

/* the mask of fa_softmax's code 1 ahead of it (a branch of its own: fa_softmax then runs as
 * for code 2, with no per-score test): the scores s of this thread's rows g, g + 8 (facts at
 * qb[0], qb[8] and qf) that the keys' facts KB, KF hide become -inf (the same bits after
 * fa_softmax's scaling) */
static __device__ __forceinline__ void f3_mask(float (*s)[4], const int *qb, const int *qf,
                                               const int *KB, const int *KF)
{
	int t4 = threadIdx.x & 3;
#pragma unroll
	for (int r = 0; r < 2; r++) {
#pragma unroll
		for (int n = 0; n < 8; n++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				int c = n * 8 + 2 * t4 + e;
				if (!fa_sees(qb[8 * r], qf[8 * r], KB[c], KF[c]))
					s[n][2 * r + e] = -INFINITY;
			}
		}
	}
}

/* the item of a block's k-th step: the rows of gridDim.x items taken in turns, every other
 * row backwards (the items run from the most work to the least: fairer shares) */
static __device__ __forceinline__ int f3_item(int k)
{
	return k * gridDim.x + (k & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
}
#endif

/* The items (unit order[x / NH], head x % NH) x of f3_item: one a block, or persistent
 * blocks (a grid of one block per SM) that walk several; the producer runs ahead into the
 * next item (its list, row facts and Q in the other of two buffers, "qfull" barrier) while
 * the consumers end this one ("qempty" once they read no more of it); the K, V ring runs on
 * across items. The row and key facts come from fct (f3_facts_kernel) by plain bulk copies,
 * the keys' only for a tile that some consumer masks element by element (code 1), so that
 * the producer never waits for a load. A consumer issues the S of its next visible tile
 * before this tile's P V, so that the softmax of the one runs while the tensor cores do the
 * other (O rescaled once P V is done). */
static __global__ void __launch_bounds__(F3_THREADS, 1)
f3_fwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
       const __grid_constant__ CUtensorMap tv, float *out, float *lse,
       const unsigned char *map, const int *order, const int *fct, int T, int S, int NH,
       int NKV, float sl2)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	extern __shared__ uint4 f3_smem[];
	char *sq = (char *)(((uintptr_t)f3_smem + 1023) & ~(uintptr_t)1023);
	char *stg = sq + 2 * F3_Q;
	uint64_t *full = (uint64_t *)(stg + F3_NS * F3_STAGE), *empty = full + F3_NS;
	uint64_t *qfull = empty + F3_NS, *qempty = qfull + 2;
	int *skb = (int *)(qempty + 2), *skf = skb + F3_NS * FA_T, *sqb = skf + F3_NS * FA_T;
	int *sqf = sqb + 2 * FB_M, *lcnt = sqf + 2 * FB_M, *lst = lcnt + 4;
	int nqt = CEIL_DIV(T, FA_T), nkt = CEIL_DIV(S, FA_T), tid = threadIdx.x;
	int nitems = CEIL_DIV(nqt, 2) * NH, nqr = CEIL_DIV(nqt, 2) * FB_M;
	const int HD = 128;

	if (tid == 0) {
		for (int i = 0; i < F3_NS; i++) {
			mb_init(&full[i], 1);
			mb_init(&empty[i], 8);
		}
		for (int i = 0; i < 2; i++) {
			mb_init(&qfull[i], 32);
			mb_init(&qempty[i], 8);
		}
		mb_fence_init();
	}
	__syncthreads();
	if (tid < 128) {
		wg_setmaxnreg_dec<40>();
		if (tid >= 32)
			return;
		const int *fqb = fct, *fqf = fct + nqr, *fkb = fqf + nqr, *fkf = fkb + nkt * FA_T;
		tma_prefetch_map(&tq);
		tma_prefetch_map(&tk);
		tma_prefetch_map(&tv);
		int gt = 0;                     /* tiles sent into the ring so far */
		for (int k = 0, ii = 0; k * (int)gridDim.x < nitems; k++) {
			int x = f3_item(k);
			if (x >= nitems)
				continue;
			int b = ii++ & 1, u = order[x / NH], h = x % NH, hk = h / (NH / NKV);
			int i0 = u * FB_M, *list = lst + b * nkt;
			mb_wait(&qempty[b], (((ii - 1) >> 1) & 1) ^ 1);
			int nl = fb_list_warp(list, map + (size_t)2 * u * nkt, nkt, 1, nkt, 2 * u + 1 < nqt,
			                      4);
			__syncwarp();               /* the list, read by every lane below */
			if (tid == 0) {
				lcnt[b] = nl;
				mb_expect(&qfull[b], F3_Q + 2 * FB_M * 4);
				for (int c = 0; c < 2; c++)
					tma_load2(sq + b * F3_Q + c * FB_M * 128, &tq, h * HD + c * 64, i0,
					          &qfull[b]);
				tma_load1(sqb + b * FB_M, fqb + i0, FB_M * 4, &qfull[b]);
				tma_load1(sqf + b * FB_M, fqf + i0, FB_M * 4, &qfull[b]);
			} else {
				mb_arrive(&qfull[b]);
			}
			for (int it = 0; it < nl; it++, gt++) {
				int slot = gt % F3_NS, e = list[it], kt = e >> 4;
				int part = (e & 3) == 1 || ((e >> 2) & 3) == 1;
				char *st = stg + slot * F3_STAGE;
				if (tid)
					continue;
				mb_wait(&empty[slot], ((gt / F3_NS) & 1) ^ 1);
				mb_expect(&full[slot], F3_STAGE + (part ? 2 * FA_T * 4 : 0));
				for (int c = 0; c < 2; c++) {
					tma_load2(st + c * F3_HALF, &tk, hk * HD + c * 64, kt * FA_T, &full[slot]);
					tma_load2(st + (2 + c) * F3_HALF, &tv, hk * HD + c * 64, kt * FA_T,
					          &full[slot]);
				}
				if (part) {
					tma_load1(skb + slot * FA_T, fkb + kt * FA_T, FA_T * 4, &full[slot]);
					tma_load1(skf + slot * FA_T, fkf + kt * FA_T, FA_T * 4, &full[slot]);
				}
			}
		}
		return;
	}
	wg_setmaxnreg_inc<232>();
	int ct = tid - 128, wg = ct >> 7, lane = tid & 31, g = lane >> 2;
	int r0 = wg * 64 + ((ct >> 5) & 3) * 16 + g;    /* this thread's first row in the block */
	int gt = 0;                         /* ring tiles of the items before this one */
	for (int k = 0, ii = 0; k * (int)gridDim.x < nitems; k++) {
		int x = f3_item(k);
		if (x >= nitems)
			continue;
		int b = ii++ & 1, u = order[x / NH], h = x % NH;
		const char *qw = sq + b * F3_Q + wg * 64 * 128;
		const int *list = lst + b * nkt, *qb = sqb + b * FB_M + r0, *qf = sqf + b * FB_M + r0;
		float o[16][4], s[8][4], mrow[2] = { -INFINITY, -INFINITY }, lrow[2] = { 0.0f, 0.0f };
		unsigned pa[4][4], qa[8][4];
		/* ring slot and phase parity of the item's tile t */
		auto SL = [&](int t) { return (gt + t) % F3_NS; };
		auto PH = [&](int t) { return (unsigned)(((gt + t) / F3_NS) & 1); };

#pragma unroll
		for (int n = 0; n < 16; n++)
			o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
		mb_wait(&qfull[b], ((ii - 1) >> 1) & 1);
		int nl = lcnt[b];
		f3_qfrag(qa, qw);
		/* it: the tile whose P is in pa (its stage held until its P V is done); the tiles
		 * this warpgroup does not see are waited for and given back on the way, the next
		 * visible one's S issued before P V only when its stage is not the one held (fewer
		 * than F3_NS tiles on), else P V first (the ring cannot pass the held stage) */
		auto scan = [&](int t) {
			while (t < nl && !((list[t] >> (2 * wg)) & 3))
				t++;
			return t;
		};
		auto skip = [&](int t, int end) {
			for (; t < end; t++) {
				mb_wait(&full[SL(t)], PH(t));
				__syncwarp();
				if (lane == 0)
					mb_arrive(&empty[SL(t)]);
			}
		};
		/* S of tile t (waited for), its softmax (o rescaled: nothing in flight), P */
		auto first = [&](int t) {
			int sl = SL(t);
			mb_wait(&full[sl], PH(t));
			wg_fence();
			f3_qk(s, qa, stg + sl * F3_STAGE);
			wg_wait<0>();
			wg_fence_acc<32>(&s[0][0]);
			if (((list[t] >> (2 * wg)) & 3) == 1)
				f3_mask(s, qb, qf, skb + sl * FA_T, skf + sl * FA_T);
			fa_softmax(s, o, 16, mrow, lrow, qb, qf, 8, skb, skf, 2, sl2);
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				frag_c2a(pa[kk], s, kk);
		};
		int it = scan(0);
		skip(0, it);
		if (it < nl)
			first(it);
		while (it < nl) {
			int slot = SL(it), nx = scan(it + 1), ns = SL(nx);
			if (nx >= nl || nx - it >= F3_NS) {
				wg_fence();
				f3_pv(o, pa, stg + slot * F3_STAGE);
				wg_wait<0>();
				wg_fence_acc<64>(&o[0][0]);
				__syncwarp();
				if (lane == 0)
					mb_arrive(&empty[slot]);
				skip(it + 1, nx);
				if (nx >= nl)
					break;
				first(nx);
				it = nx;
				continue;
			}
			skip(it + 1, nx);
			mb_wait(&full[ns], PH(nx));
			float m0[2] = { mrow[0], mrow[1] };
			wg_fence();
			f3_qk(s, qa, stg + ns * F3_STAGE);
			f3_pv(o, pa, stg + slot * F3_STAGE);
			wg_wait<1>();
			wg_fence_acc<32>(&s[0][0]);
			if (((list[nx] >> (2 * wg)) & 3) == 1)
				f3_mask(s, qb, qf, skb + ns * FA_T, skf + ns * FA_T);
			fa_softmax(s, o, 0, mrow, lrow, qb, qf, 8, skb, skf, 2, sl2);
			wg_wait<0>();
			wg_fence_acc<64>(&o[0][0]);
			__syncwarp();
			if (lane == 0)
				mb_arrive(&empty[slot]);
#pragma unroll
			for (int r = 0; r < 2; r++) {
				/* fa_softmax's factor (o untouched there: NT 0) */
				float alpha = exp2f(m0[r] - (mrow[r] == -INFINITY ? 0.0f : mrow[r]));
#pragma unroll
				for (int n = 0; n < 16; n++) {
					o[n][2 * r] *= alpha;
					o[n][2 * r + 1] *= alpha;
				}
			}
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				frag_c2a(pa[kk], s, kk);
			it = nx;
		}
		gt += nl;
		__syncwarp();                   /* Q, the list and the row facts are read */
		if (lane == 0)
			mb_arrive(&qempty[b]);
		fa_fwd_store(out, lse, o, 16, mrow, lrow, u * FB_M + r0, T, NH, h, HD);
	}
#else
	__trap();                               /* built without sm_90a: never launched */
#endif
}

/* fct: the facts (fa_facts) of the query rows (row blocks qb, then flags qf; nqr rows: whole
 * 128-row units) and of the keys (kb, kf; nkr: whole tiles), rows past T or S as fa_facts
 * gives them; flag[0] set where they differ from what fct held (fa_plan) */
static __global__ void f3_facts_kernel(int *fct, int T, int S, int nqr, int nkr,
                                       struct attn_mask m, int nz, int sg, int *flag)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x, b, f, *pb, *pf;

	if (i >= nqr + nkr)
		return;
	if (i < nqr) {
		fa_facts(m, nz, sg, 1, i, T, &b, &f);
		pb = &fct[i];
		pf = &fct[nqr + i];
	} else {
		fa_facts(m, nz, sg, 0, i - nqr, S, &b, &f);
		pb = &fct[nqr + i];
		pf = &fct[nqr + nkr + i];
	}
	if (*pb != b || *pf != f) {
		*pb = b;
		*pf = f;
		atomicOr(flag, 1);
	}
}

/* version 3's dynamic shared memory (nkt key tiles) */
static size_t f3_smem_size(int nkt)
{
	return 1024 + 2 * F3_Q + F3_NS * F3_STAGE + (2 * F3_NS + 4) * 8 +
	       (2 * F3_NS * FA_T + 4 * FB_M + 4) * 4 + (size_t)2 * nkt * 4;
}

/* ---------------------------------------------------------------- version 3's backward
 *
 * The backward on wgmma and TMA (head dim 128, compute capability 9.0; the default there):
 * version 2's map, unit order, rounding and contract, in persistent blocks (one an SM, as
 * the forward's; DICE_FA3_PERS) of 3 warpgroups that walk items (128 keys of unit
 * order[x / NKV], kv head x % NKV: the query heads of its group in turn, so that dK and dV
 * are summed in registers and stored, no atomics; DICE_FA3B_KV=0: an item per query head as
 * version 2, dK and dV added atomically for GQA). Warpgroup 0 is the producer: one warp
 * builds each item's list of visible query tiles, one thread copies by TMA the item's K and
 * V (128 rows each, once the consumers are done with the last item's: "kvempty"), then for
 * every (head, query tile) of the item Q, dO and the rows' lse, D and facts
 * (f3b_prep_kernel, f3_facts_kernel) into the next slot of a ring of F3B_NS stages ("full"
 * barriers with the copies' bytes, "empty" ones with an arrival of each consumer warp).
 * Warpgroups 1 and 2 are the consumers, 64 keys (one map column) each, all operands from
 * shared memory in 128-byte swizzled rows of 64 columns:
 *   S^T = K Q^T, dP^T = V dO^T     8 k16 products m64n64 each (K, V, Q, dO K-major)
 *   P^T, dS^T = P^T (dP^T - D)     in registers as version 2 (fa_bwd_step), dS^T also
 *                                  into shared memory (bf16, rows = keys)
 *   dV += P^T dO, dK += dS^T Q     4 k16 products m64n128 each, P^T and dS^T as register A
 *                                  fragments, dO and Q N-major (the transpose bit)
 *   dQ (64 rows, the warpgroup's 64 columns) = dS K over the 128 keys (both consumers' dS^T:
 *                                  a named barrier), A M-major and B N-major, then fp32 atomics
 * dS^T has two buffers, so that a consumer writes the next tile's while the other may still
 * read this one. A consumer whose map column does not see a tile computes it all the same,
 * with P^T and dS^T zero (exact zeros in dV, dK and dQ; see the loop). 1.505 ms at the SFT
 * shape on an H100 (bench/attn-train.cu; 2.144 for version 2). Measured and dropped (1.70 ms
 * this way then, with an item per query head and a plan built every call): dQ staged in shared
 * memory and added by bulk reductions (1.74), each consumer's own dQ over its 64 keys
 * without the barrier (1.84: twice the atomics), a fourth warpgroup for dQ (2.59: the
 * registers it takes from the consumers). */

#define F3B_NS 2                        /* stages of the Q, dO ring */
#define F3B_KV (FB_M * 128)             /* 128 rows of 128 bytes: a column half of K or V */
#define F3B_DS (FB_M * 128)             /* one dS^T buffer: 128 keys by 64 queries */
#define F3B_ROWS (4 * FA_T * 4)         /* a stage's lse, D, row blocks, row flags */
#define F3B_STAGE (4 * F3_HALF + F3B_ROWS)  /* Q halves 0, 1, dO halves 0, 1, the rows */

/* one warp a (query row, head) of Tp rows (whole 128-row units): dob = dout in bf16; the
 * per-head arrays DT[h Tp + i] = rowsum(dout out) (rowdot_kernel's order of sums) and
 * lseT[h Tp + i] = lse[i NH + h]; rows past T: D 0, lse infinity (no visible key) */
static __global__ void f3b_prep_kernel(bf16 *dob, float *DT, float *lseT, const float *dout,
                                       const float *out, const float *lse, int T, int Tp,
                                       int NH, int HD)
{
	int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	int i = r / NH, h = r % NH;
	float acc = 0.0f;

	if (r >= Tp * NH)
		return;
	if (i < T) {
		for (int c = lane; c < HD; c += 32) {
			float x = dout[(size_t)r * HD + c];
			acc += x * out[(size_t)r * HD + c];
			dob[(size_t)r * HD + c] = __float2bfloat16_rn(x);
		}
		acc = warp_sum(acc);
	}
	if (lane == 0) {
		DT[(size_t)h * Tp + i] = i < T ? acc : 0.0f;
		lseT[(size_t)h * Tp + i] = i < T ? lse[r] : INFINITY;
	}
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* D = A B (acc 0) or + D, m64n64k16 bf16, A M-major and B N-major from shared memory */
static __device__ __forceinline__ void f3b_ss_tt(float *d, uint64_t da, uint64_t db, int acc)
{
	asm volatile(WG_PRED(34) WG_MMA(64, "bf16") "{" WG_R64 "}" ", %32, %33, p, 1, 1, 1, 1;\n}\n"
	             : WG_O64 : "l"(da), "l"(db), "r"(acc));
}

/* the descriptor (wg_desc) of a 128-byte swizzled operand (8-row groups 1024 bytes apart) at
 * shared-memory address a4 << 4, leading byte offset lbo: one add on a base for the
 * compiler, where wg_desc converts and masks an address for every product */
static __device__ __forceinline__ uint64_t f3b_desc(unsigned a4, unsigned lbo)
{
	return (uint64_t)(a4 + ((lbo >> 4) << 16)) | (uint64_t)((1024 >> 4) | (1u << 30)) << 32;
}

/* named barrier id for n threads */
static __device__ __forceinline__ void f3b_bar(int id, int n)
{
	asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}

#endif

/* items (key units x NKV with pkv, else x NH) walked by gridDim.x blocks (f3_item); lseT,
 * DT: f3b_prep_kernel's (Tp rows a head); fct: f3_facts_kernel's (Tp query rows) */
static __global__ void __launch_bounds__(F3_THREADS, 1)
f3_bwd(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
       const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
       float *dq, float *dk, float *dv, const float *lseT, const float *DT, const int *fct,
       const unsigned char *map, const int *order, int T, int S, int NH, int NKV, int Tp,
       float sl2, float scale, int pkv)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	extern __shared__ uint4 f3_smem[];
	char *sk = (char *)(((uintptr_t)f3_smem + 1023) & ~(uintptr_t)1023);
	char *sv = sk + 2 * F3B_KV, *sds = sv + 2 * F3B_KV, *stg = sds + 2 * F3B_DS;
	unsigned b4 = wg_smem(sk) >> 4;
	/* the descriptor of the operand at p (wg_desc's, from b4) */
	auto D = [&](const char *p, unsigned lbo) {
		return f3b_desc(b4 + (unsigned)((p - sk) >> 4), lbo);
	};
	uint64_t *full = (uint64_t *)(stg + F3B_NS * F3B_STAGE), *empty = full + F3B_NS;
	uint64_t *kvfull = empty + F3B_NS, *kvempty = kvfull + 1, *lempty = kvempty + 1;
	int *lcnt = (int *)(lempty + 2), *lst = lcnt + 4;
	int group = NH / NKV, nqt = CEIL_DIV(T, FA_T), nkt = CEIL_DIV(S, FA_T), tid = threadIdx.x;
	int NI = pkv ? NKV : NH, nh = pkv ? group : 1, nitems = CEIL_DIV(nkt, 2) * NI;
	const int HD = 128;

	if (tid == 0) {
		for (int i = 0; i < F3B_NS; i++) {
			mb_init(&full[i], 1);
			mb_init(&empty[i], 8);
		}
		mb_init(kvfull, 32);
		mb_init(kvempty, 8);
		for (int i = 0; i < 2; i++) {
			mb_init(&lempty[i], 8);
		}
		mb_fence_init();
	}
	__syncthreads();
	if (tid < 128) {
		wg_setmaxnreg_dec<40>();
		if (tid >= 32)
			return;
		const int *fqb = fct, *fqf = fct + Tp;
		if (tid == 0) {
			tma_prefetch_map(&tq);
			tma_prefetch_map(&tdo);
			tma_prefetch_map(&tk);
			tma_prefetch_map(&tv);
		}
		int gt = 0;                     /* tiles sent into the ring so far */
		for (int k = 0, ii = 0; k * (int)gridDim.x < nitems; k++) {
			int x = f3_item(k);
			if (x >= nitems)
				continue;
			int b = ii & 1, u = order[x / NI], hk = pkv ? x % NI : x % NI / group;
			int h0 = pkv ? hk * group : x % NI, *list = lst + b * nqt;
			/* the list's buffer (read by the consumers of item ii - 2), then K and V (of
			 * item ii - 1) given back */
			mb_wait(&lempty[b], ((ii >> 1) & 1) ^ 1);
			int nl = fb_list_warp(list, map + 2 * u, nqt, nkt, 1, 2 * u + 1 < nkt, 4);
			__syncwarp();
			mb_wait(kvempty, (ii & 1) ^ 1);
			if (tid == 0) {
				lcnt[b] = nl;
				mb_expect(kvfull, 4 * F3B_KV);
				for (int c = 0; c < 2; c++) {
					tma_load2(sk + c * F3B_KV, &tk, hk * HD + c * 64, u * FB_M, kvfull);
					tma_load2(sv + c * F3B_KV, &tv, hk * HD + c * 64, u * FB_M, kvfull);
				}
			} else {
				mb_arrive(kvfull);
			}
			ii++;
			for (int it = 0; it < nl * nh; it++, gt++) {
				int slot = gt % F3B_NS, i0 = (list[it % nl] >> 4) * FA_T, h = h0 + it / nl;
				char *st = stg + slot * F3B_STAGE;
				float *rows = (float *)(st + 4 * F3_HALF);
				if (tid)
					continue;
				mb_wait(&empty[slot], ((gt / F3B_NS) & 1) ^ 1);
				mb_expect(&full[slot], F3B_STAGE);
				for (int c = 0; c < 2; c++) {
					tma_load2(st + c * F3_HALF, &tq, h * HD + c * 64, i0, &full[slot]);
					tma_load2(st + (2 + c) * F3_HALF, &tdo, h * HD + c * 64, i0,
					          &full[slot]);
				}
				tma_load1(rows, lseT + (size_t)h * Tp + i0, FA_T * 4, &full[slot]);
				tma_load1(rows + FA_T, DT + (size_t)h * Tp + i0, FA_T * 4, &full[slot]);
				tma_load1(rows + 2 * FA_T, fqb + i0, FA_T * 4, &full[slot]);
				tma_load1(rows + 3 * FA_T, fqf + i0, FA_T * 4, &full[slot]);
			}
		}
		return;
	}
	wg_setmaxnreg_inc<232>();
	int ct = tid - 128, wg = ct >> 7, w4 = (ct >> 5) & 3, lane = tid & 31, g = lane >> 2;
	int t4 = lane & 3, jr = wg * 64 + w4 * 16 + g;  /* this thread's first key in the item */
	const int *fkb = fct + 2 * Tp, *fkf = fkb + nkt * FA_T;
	int gt = 0;                             /* ring tiles of the items before this one */
	for (int k = 0, ii = 0; k * (int)gridDim.x < nitems; k++) {
	int x = f3_item(k);
	if (x >= nitems)
		continue;
	int b = ii & 1, u = order[x / NI], hk = pkv ? x % NI : x % NI / group, j0 = u * FB_M;
	int h0 = pkv ? hk * group : x % NI;
	int kb[2], kf[2];
	float dka[16][4], dva[16][4];

	for (int r = 0; r < 2; r++) {
		int j = j0 + jr + 8 * r, in = j < nkt * FA_T;
		kb[r] = in ? fkb[j] : 0x7fffffff;
		kf[r] = in ? fkf[j] : 0;
	}
#pragma unroll
	for (int n = 0; n < 16; n++) {
		dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.0f;
		dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.0f;
	}
	mb_wait(kvfull, ii & 1);
	int nl = lcnt[b];
	const int *list = lst + b * nqt;
	for (int it = 0; it < nl * nh; it++) {
		int rt = gt + it;               /* the tile's number in the ring */
		int slot = rt % F3B_NS, e = list[it % nl], qt = e >> 4, c0 = e & 3, c1 = (e >> 2) & 3;
		int h = h0 + it / nl;
		int code = wg ? c1 : c0;
		const char *stq = stg + slot * F3B_STAGE, *sdo = stq + 2 * F3_HALF;
		const float *L = (const float *)(stq + 4 * F3_HALF), *Dd = L + FA_T;
		const int *QB = (const int *)(Dd + FA_T), *QF = QB + FA_T;
		char *ds = sds + (rt & 1) * F3B_DS;

		mb_wait(&full[slot], (rt / F3B_NS) & 1);
		/* every product runs, also where this warpgroup's column does not see the tile (P
		 * and dS^T zeros then): a product under a branch or a guard would serialise all of
		 * them (ptxas C7520); version 2 skips those (a few per cent at the SFT shape) */
		{
			float s[8][4], dp[8][4];
			unsigned pa[4][4], da[4][4];
			const char *kw = sk + wg * 64 * 128, *vw = sv + wg * 64 * 128;
			wg_fence();
#pragma unroll
			for (int kk = 0; kk < 8; kk++)
				wg_op<64>::ss(&s[0][0], D(kw + (kk >> 2) * F3B_KV + (kk & 3) * 32, 16),
				              D(stq + (kk >> 2) * F3_HALF + (kk & 3) * 32, 16), kk, 0);
#pragma unroll
			for (int kk = 0; kk < 8; kk++)
				wg_op<64>::ss(&dp[0][0], D(vw + (kk >> 2) * F3B_KV + (kk & 3) * 32, 16),
				              D(sdo + (kk >> 2) * F3_HALF + (kk & 3) * 32, 16), kk, 0);
			wg_commit();
			wg_wait<0>();
			wg_fence_acc<32>(&s[0][0]);
			wg_fence_acc<32>(&dp[0][0]);
			/* P^T and dS^T (rows: this thread's keys, columns: the tile's queries); the
			 * products dV += P^T dO, dK += dS^T Q issued before dS^T is stored (dV's issued
			 * before dS^T is computed measured slower: 1.62 ms against 1.51, spills) */
#pragma unroll
			for (int n = 0; n < 8; n++) {
#pragma unroll
				for (int x = 0; x < 4; x++) {
					int c = n * 8 + 2 * t4 + (x & 1), r = x >> 1;
					float p = exp2f(s[n][x] * sl2 - L[c]);
					if (code != 2 && (!code || !fa_sees(QB[c], QF[c], kb[r], kf[r])))
						p = 0.0f;
					s[n][x] = p;
					dp[n][x] = p * (dp[n][x] - Dd[c]);
				}
			}
#pragma unroll
			for (int kk = 0; kk < 4; kk++) {
				frag_c2a(pa[kk], s, kk);
				frag_c2a(da[kk], dp, kk);
			}
			wg_fence();
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				wg_op<128>::rst(&dva[0][0], make_uint4(pa[kk][0], pa[kk][1], pa[kk][2],
				                                       pa[kk][3]),
				                D(sdo + kk * 2048, F3_HALF), 1, 0);
#pragma unroll
			for (int kk = 0; kk < 4; kk++)
				wg_op<128>::rst(&dka[0][0], make_uint4(da[kk][0], da[kk][1], da[kk][2],
				                                       da[kk][3]),
				                D(stq + kk * 2048, F3_HALF), 1, 0);
			wg_commit();
			/* dS^T into its buffer: key row R, 16-byte chunk n at n ^ R % 8 */
#pragma unroll
			for (int n = 0; n < 8; n++) {
#pragma unroll
				for (int r = 0; r < 2; r++) {
					int R = jr + 8 * r;
					*(unsigned *)(ds + R * 128 + ((n ^ (R & 7)) << 4) + t4 * 4) =
						pack_bf16(dp[n][2 * r], dp[n][2 * r + 1]);
				}
			}
		}
		wg_fence_proxy();               /* dS^T written, for the tensor cores */
		f3b_bar(1, 256);                /* both consumers' dS^T */
		/* dQ of the tile's 64 queries, columns 64 wg .. + 63, over the 128 keys */
		float acc[8][4];
		wg_fence();
#pragma unroll
		for (int kk = 0; kk < 8; kk++)
			f3b_ss_tt(&acc[0][0], D(ds + kk * 2048, F3B_DS),
			              D(sk + wg * F3B_KV + kk * 2048, F3B_KV), kk);
		wg_commit();
		wg_wait<0>();
		wg_fence_acc<32>(&acc[0][0]);
		wg_fence_acc<64>(&dka[0][0]);
		wg_fence_acc<64>(&dva[0][0]);
		__syncwarp();
		if (lane == 0)
			mb_arrive(&empty[slot]);
		fa_dq_add(dq, acc, 8, qt * FA_T + w4 * 16 + g, T, (size_t)NH * HD,
		          (size_t)h * HD + wg * 64, scale);
	}
	/* K, V and the list read no more (every product waited for) */
	__syncwarp();
	if (lane == 0) {
		mb_arrive(kvempty);
		mb_arrive(&lempty[b]);
	}
	gt += nl * nh;
	ii++;
	fa_dkv_store(dk, dv, dka, dva, 16, j0 + jr, S, (size_t)NKV * HD, (size_t)hk * HD, scale,
	             !pkv && group > 1);
	}
#else
	__trap();                               /* built without sm_90a: never launched */
#endif
}

/* version 3's backward dynamic shared memory (nqt query tiles) */
static size_t f3b_smem_size(int nqt)
{
	return 1024 + 4 * F3B_KV + 2 * F3B_DS + F3B_NS * F3B_STAGE + (2 * F3B_NS + 4) * 8 + 16 +
	       (size_t)2 * nqt * 4;
}

/* whether version 3's backward takes an item per kv head (the heads of its group in turn: dK,
 * dV summed in registers and stored, no atomics, no zeroing; 1.505 ms against 1.593 per
 * query head at the SFT shape, H100), the default, or per query head as version 2
 * (DICE_FA3B_KV=0 in the environment) */
static int f3b_pkv(void)
{
	const char *e = getenv("DICE_FA3B_KV");
	return !(e && *e == '0');
}

/* whether version 3 runs here: head dim 128, a compute-capability-9.0 device, the driver's
 * tensor-map encoder */
static int f3_ok(int HD)
{
	return HD == 128 && gpu_cc() == 90 && wg_tensor_map_ok();
}

/* ---------------------------------------------------------------- fused path launchers */

#define FA_RND(x) (((x) + 255) / 256 * 256)

/* the fused kernels' version for the forward (bwd 0) or the backward op (bwd 1) at head dim
 * HD: by default 3 where it runs (f3_ok: HD 128 on compute capability 9.0; forward 0.54 ms
 * against 1.04 on an H200, NOTES-device.md session 7), else 2, except the forward at HD 64
 * (version 1 measured faster there: 0.81 ms against 0.85 at the SFT shape, NOTES-device.md
 * session 6); DICE_FA in the environment overrides: "1", "2" or "3" for both ops, two digits
 * for the forward's and the backward's (1 to 3 each): "12" is version 1 forward, version 2
 * backward, "32" version 3 forward, version 2 backward. Version 3 only where it runs, else 2.
 * Read at every call, so that a bench can time the versions in one process. */
static int fa_version(int bwd, int HD)
{
	static int warned;
	const char *e = getenv("DICE_FA");
	int v = bwd ? 3 : HD == 64 ? 1 : 3;
	if (e && *e) {
		if (e[0] >= '1' && e[0] <= '3' && (!e[1] || (e[1] >= '1' && e[1] <= '3' && !e[2]))) {
			if (!bwd || !e[1])
				v = e[0] - '0';
			else
				v = e[1] - '0';
		} else if (!warned++) {
			warn_msg("DICE_FA=%s: want 1, 2, 3 or a forward digit and a "
			         "backward digit (1 to 3 each); using the default", e);
		}
	}
	return v == 3 && !f3_ok(HD) ? 2 : v;
}

/* dynamic shared memory of the forward (nkt key tiles) and the backward (nqt query tiles) */
static size_t fa_fwd_smem(int ver, int HD, int nkt)
{
	if (ver == 3)
		return f3_smem_size(nkt);
	size_t rows = ver == 1 ? 5 * FA_T : FB_M + 4 * FA_T;
	return rows * (HD + FA_PAD) * 2 + 4 * FA_T * 4 + (ver == 1 ? 0 : 2 * FB_M * 4) + 16 +
	       (size_t)nkt * 4;
}

static size_t fa_bwd_smem(int ver, int HD, int nqt)
{
	if (ver == 3)
		return f3b_smem_size(nqt);
	size_t rows = ver == 1 ? 5 * FA_T : 2 * FB_M + 4 * FA_T;
	size_t dsr = ver == 1 ? FA_T : FB_M;
	return rows * (HD + FA_PAD) * 2 + dsr * FA_DS_LD * 2 + 8 * FA_T * 4 +
	       (ver == 1 ? 0 : 2 * FB_M * 4) + 16 + (size_t)nqt * 4;
}

/* the dynamic shared memory the fused kernels may take: the device's opt-in limit (capped),
 * set on the kernels at the first call */
static size_t fa_smem_cap(void)
{
	static int cap = -1;
	if (cap < 0) {
		int dev = 0, optin = 0;
		CUDA_CHECK(cudaGetDevice(&dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
		cap = optin < FA_SMEM_MAX ? optin : FA_SMEM_MAX;
		const void *fns[] = { (const void *)fa_fwd<128>, (const void *)fa_fwd<64>,
		                      (const void *)fa_bwd<128>, (const void *)fa_bwd<64>,
		                      (const void *)fb_fwd<128>, (const void *)fb_fwd<64>,
		                      (const void *)fb_bwd<128>, (const void *)fb_bwd<64>,
		                      (const void *)f3_fwd, (const void *)f3_bwd };
		for (int i = 0; i < 10; i++)
			CUDA_CHECK(cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
			                                cap));
	}
	return (size_t)cap;
}

/* whether the fused kernels (version ver) take this shape (DICE_ATTN_CUBLAS=1 in the
 * environment: never, the chunked cuBLAS path for comparison) */
static int fa_ok(int ver, int T, int S, int HD)
{
	static int off = -1;
	if (off < 0) {
		const char *e = getenv("DICE_ATTN_CUBLAS");
		off = e && *e && *e != '0';
	}
	return !off && (HD == 64 || HD == 128) &&
	       fa_fwd_smem(ver, HD, CEIL_DIV(S, FA_T)) <= fa_smem_cap() &&
	       fa_bwd_smem(ver, HD, CEIL_DIV(T, FA_T)) <= fa_smem_cap();
}

/* units (pairs of map lines) of version 2's blocks: query units (byrow) or key units */
static int fb_units(int T, int S, int byrow)
{
	return CEIL_DIV(CEIL_DIV(byrow ? T : S, FA_T), 2);
}

/* the fused path's plan: the tile map, version 2's forward and backward unit orders and the
 * work array that ranks them, the rows' facts (f3_facts_kernel) */
struct fa_head {
	unsigned char *map;
	int *ordf, *ordb, *work;
	int *fct;
	int *flag;                      /* 4: plan changed, forward order built, backward's */
};

/* the rows of version 3's facts: query rows (whole 128-row units), keys (whole tiles) */
static int f3_facts_rows(int T, int S, int q)
{
	return q ? fb_units(T, S, 1) * FB_M : CEIL_DIV(S, FA_T) * FA_T;
}

static size_t fa_head_carve(struct fa_head *hd, char *sc, int T, int S)
{
	int nf = fb_units(T, S, 1), nb = fb_units(T, S, 0);
	size_t nmap = (size_t)CEIL_DIV(T, FA_T) * CEIL_DIV(S, FA_T);
	size_t o1 = FA_RND(nmap), o2 = o1 + FA_RND((size_t)nf * 4), o3 = o2 + FA_RND((size_t)nb * 4);
	size_t o4 = o3 + FA_RND((size_t)(nf > nb ? nf : nb) * 4);
	size_t o5 = o4 + FA_RND((size_t)(f3_facts_rows(T, S, 1) + f3_facts_rows(T, S, 0)) * 8);

	if (hd) {
		hd->map = (unsigned char *)sc;
		hd->ordf = (int *)(sc + o1);
		hd->ordb = (int *)(sc + o2);
		hd->work = (int *)(sc + o3);
		hd->fct = (int *)(sc + o4);
		hd->flag = (int *)(sc + o5);
	}
	return o5 + FA_RND(16);
}

/* The plan of the fused kernels lives in device memory of its own, kept from call to call
 * (the trainer's layers, forward and backward, share a mask): every call computes the rows'
 * facts and compares them with the kept ones on the device (flag[0]); the tile map and the
 * orders are built again only where they differ, or T, S did (their kernels look at the flag
 * and return at once), and an order where it was not built yet (flag[1] forward, flag[2]
 * backward). */
static struct {
	char *buf;
	size_t cap;
	int T, S;
} fa_plan = { NULL, 0, -1, -1 };

/* hd = the plan for T, S and the mask m: the tile map and the facts, and the order of the
 * forward's units (with fwd) and of the backward's (with bwd); on the stream st */
static void fa_prepare(cudaStream_t st, struct fa_head *hd, int T, int S,
                       const struct attn_mask *m, int fwd, int bwd)
{
	int nz = m->qnoisy && m->knoisy, sg = m->qseg && m->kseg, nqt = CEIL_DIV(T, FA_T);
	int nkt = CEIL_DIV(S, FA_T), nqr = f3_facts_rows(T, S, 1), nkr = f3_facts_rows(T, S, 0);
	size_t nh = fa_head_carve(NULL, NULL, T, S);
	int fresh = T != fa_plan.T || S != fa_plan.S, mb = CEIL_DIV(nqt * nkt, FB_MAPW);

	if (nh > fa_plan.cap) {
		if (fa_plan.buf)
			CUDA_CHECK(cudaFree(fa_plan.buf));      /* (waits for the kernels using it) */
		CUDA_CHECK(cudaMalloc((void **)&fa_plan.buf, nh));
		fa_plan.cap = nh;
		fresh = 1;
	}
	fa_plan.T = T;
	fa_plan.S = S;
	fa_head_carve(hd, fa_plan.buf, T, S);
	int *flag = hd->flag;
	CUDA_CHECK(cudaMemsetAsync(flag, fresh, 4, st));    /* (bytes of 1: flag[0] set) */
	f3_facts_kernel<<<CEIL_DIV(nqr + nkr, 256), 256, 0, st>>>(hd->fct, T, S, nqr, nkr, *m, nz,
	                                                         sg, flag);
	CUDA_CHECK_LAUNCH();
	fb_map_kernel<<<mb < 1024 ? mb : 1024, 32 * FB_MAPW, 0, st>>>(hd->map, hd->fct, nqr, nkr,
	                                                                nqt, nkt, flag);
	CUDA_CHECK_LAUNCH();
	for (int byrow = 1; byrow >= 0; byrow--) {
		if (!(byrow ? fwd : bwd))
			continue;
		fb_order_kernel<<<1, 1024, 0, st>>>(byrow ? hd->ordf : hd->ordb, hd->work, hd->map,
		                                    nqt, nkt, byrow, flag);
		CUDA_CHECK_LAUNCH();
	}
}

/* out NULL (only lse): version 1 or 2 */
static int fa_forward(cudaStream_t st, int ver, float *out, float *lse, const bf16 *q,
                      const bf16 *k, const bf16 *v, const struct fa_head *hd, int T, int S,
                      int NH, int NKV, int HD, const struct attn_mask *m)
{
	int nz = m->qnoisy && m->knoisy, sg = m->qseg && m->kseg, nkt = CEIL_DIV(S, FA_T);
	float sl2 = 1.4426950408889634f / sqrtf((float)HD);
	size_t sm = fa_fwd_smem(ver, HD, nkt);

	if (ver == 3) {
		CUtensorMap tq, tk, tv;
		int grid = fb_units(T, S, 1) * NH, sms = gpu_sm_count();
		if (wg_tensor_map(&tq, q, 0, NH * HD, T, 64, FB_M, 1) ||
		    wg_tensor_map(&tk, k, 0, NKV * HD, S, 64, FA_T, 1) ||
		    wg_tensor_map(&tv, v, 0, NKV * HD, S, 64, FA_T, 1))
			return -1;
		/* persistent blocks, one an SM (0.535 ms against 0.558 with one block an item at
		 * the SFT shape, H200); DICE_FA3_PERS=0 in the environment: one block an item, n > 1:
		 * n blocks (for the tests: few blocks walking many items) */
		const char *ps = getenv("DICE_FA3_PERS");
		int pn = ps && *ps ? atoi(ps) : 1;
		if (pn == 1)
			pn = sms;
		if (pn > 0 && grid > pn)
			grid = pn;
		f3_fwd<<<grid, F3_THREADS, sm, st>>>(tq, tk, tv, out, lse, hd->map, hd->ordf, hd->fct, T,
		                                     S, NH, NKV, sl2);
	} else if (ver == 1)
		(HD == 128 ? fa_fwd<128> : fa_fwd<64>)<<<dim3(CEIL_DIV(T, FA_T), NH), FA_THREADS, sm,
		                                         st>>>(out, lse, q, k, v, hd->map, T, S, NH,
		                                               NKV, *m, nz, sg, sl2);
	else
		(HD == 128 ? fb_fwd<128> : fb_fwd<64>)<<<fb_units(T, S, 1) * NH, FA_THREADS, sm,
		                                         st>>>(out, lse, q, k, v, hd->map, hd->ordf,
		                                               T, S, NH, NKV, *m, nz, sg, sl2);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* the operands q, k, v of an attention call: fp32 (rounded to bf16 here) or given in bf16
 * (qb, kb, vb; then q, k, v are not read) */
struct at_in {
	const float *q, *k, *v;
	const bf16 *qb, *kb, *vb;
};

/* x's bf16 copy: xb where given, else x cast into the n elements at sc */
static const bf16 *at_operand(cudaStream_t st, bf16 *sc, const float *x, const bf16 *xb,
                              size_t n)
{
	if (xb)
		return xb;
	cast(st, sc, x, n);
	return sc;
}

/* lse: NULL, or (T, NH) to keep the statistics for fa_attention_backward */
static int fa_attention(cudaStream_t st, int ver, float *out, float *lse,
                        const struct at_in *in, int T, int S, int NH, int NKV, int HD,
                        const struct attn_mask *m)
{
	size_t nq = (size_t)T * NH * HD, nk = (size_t)S * NKV * HD;
	bf16 *qs = (bf16 *)gpu_scratch((nq + 2 * nk) * 2);
	struct fa_head hd;
	const bf16 *qb = at_operand(st, qs, in->q, in->qb, nq);
	const bf16 *kb = at_operand(st, qs + nq, in->k, in->kb, nk);
	const bf16 *vb = at_operand(st, qs + nq + nk, in->v, in->vb, nk);

	fa_prepare(st, &hd, T, S, m, ver != 1, 0);
	return fa_forward(st, ver, out, lse, qb, kb, vb, &hd, T, S, NH, NKV, HD, m);
}

/* stat: the forward's lse (fa_attention), or NULL: a stats-only forward (version 2 for a
 * version-3 backward) recomputes it */
static int fa_attention_backward(cudaStream_t st, int ver, float *dq, float *dk, float *dv,
                                 const float *dout, const struct at_in *in, const float *out,
                                 const float *stat, int T, int S, int NH, int NKV, int HD,
                                 const struct attn_mask *m)
{
	size_t nq = (size_t)T * NH * HD, nk = (size_t)S * NKV * HD;
	int nqt = CEIL_DIV(T, FA_T), nkt = CEIL_DIV(S, FA_T), rows = T * NH;
	int nz = m->qnoisy && m->knoisy, sg = m->qseg && m->kseg;
	int Tp = f3_facts_rows(T, S, 1);        /* version 3's rows a head (whole 128-row units) */
	size_t nr = FA_RND((size_t)Tp * NH * 4);
	char *sc = (char *)gpu_scratch(3 * nr + (2 * nq + 2 * nk) * 2);
	struct fa_head hd;
	float *lse = (float *)sc, *d = (float *)((char *)lse + nr);
	float *lset = (float *)((char *)d + nr);
	bf16 *qs = (bf16 *)((char *)lset + nr), *dob = qs + nq + 2 * nk;
	float scale = 1.0f / sqrtf((float)HD), sl2 = 1.4426950408889634f * scale;
	size_t sm = fa_bwd_smem(ver, HD, nqt);

	/* dq (and dk, dv unless version 3 stores them) are zero already (the caller's gpu_zero) */
	const bf16 *qb = at_operand(st, qs, in->q, in->qb, nq);
	const bf16 *kb = at_operand(st, qs + nq, in->k, in->kb, nk);
	const bf16 *vb = at_operand(st, qs + nq + nk, in->v, in->vb, nk);
	if (ver != 3) {
		cast(st, dob, dout, nq);
		rowdot_kernel<<<CEIL_DIV(rows, AT_THREADS / 32), AT_THREADS, 0, st>>>(d, dout, out,
		                                                                      rows, HD);
		CUDA_CHECK_LAUNCH();
	}
	fa_prepare(st, &hd, T, S, m, stat == NULL && ver != 1, ver != 1);
	if (stat)
		lse = (float *)stat;
	else if (fa_forward(st, ver == 3 ? 2 : ver, NULL, lse, qb, kb, vb, &hd, T, S, NH, NKV, HD,
	                    m))
		return -1;
	if (ver == 3) {
		CUtensorMap tq, tdo, tk, tv;
		if (wg_tensor_map(&tq, qb, 0, NH * HD, T, 64, FA_T, 1) ||
		    wg_tensor_map(&tdo, dob, 0, NH * HD, T, 64, FA_T, 1) ||
		    wg_tensor_map(&tk, kb, 0, NKV * HD, S, 64, FB_M, 1) ||
		    wg_tensor_map(&tv, vb, 0, NKV * HD, S, 64, FB_M, 1))
			return -1;
		f3b_prep_kernel<<<CEIL_DIV(Tp * NH, AT_THREADS / 32), AT_THREADS, 0, st>>>(
			dob, d, lset, dout, out, lse, T, Tp, NH, HD);
		CUDA_CHECK_LAUNCH();
		/* persistent blocks as the forward's (DICE_FA3_PERS) */
		const char *ps = getenv("DICE_FA3_PERS");
		int pkv = f3b_pkv(), pn = ps && *ps ? atoi(ps) : 1;
		int grid = fb_units(T, S, 0) * (pkv ? NKV : NH);
		if (pn == 1)
			pn = gpu_sm_count();
		if (pn > 0 && grid > pn)
			grid = pn;
		f3_bwd<<<grid, F3_THREADS, sm, st>>>(
			tq, tdo, tk, tv, dq, dk, dv, lset, d, hd.fct, hd.map, hd.ordb, T, S, NH, NKV, Tp,
			sl2, scale, pkv);
	} else if (ver == 1)
		(HD == 128 ? fa_bwd<128> : fa_bwd<64>)<<<dim3(nkt, NKV), FA_THREADS, sm, st>>>(
			dq, dk, dv, qb, kb, vb, dob, lse, d, hd.map, T, S, NH, NKV, *m, nz, sg, sl2,
			scale);
	else
		(HD == 128 ? fb_bwd<128> : fb_bwd<64>)<<<fb_units(T, S, 0) * NH, FB_BT, sm, st>>>(
			dq, dk, dv, qb, kb, vb, dob, lse, d, hd.map, hd.ordb, T, S, NH, NKV, *m, nz, sg,
			sl2, scale);
	CUDA_CHECK_LAUNCH();
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
		warn_msg("attention_tc: out of memory");
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

static int at_forward(cudaStream_t st, float *out, float *stat, const struct at_in *in, int T,
                      int S, int NH, int NKV, int HD, const struct attn_mask *m);
static int at_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                       const struct at_in *in, const float *out, const float *stat, int T,
                       int S, int NH, int NKV, int HD, const struct attn_mask *m);

int gpu_attention_tc(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                     int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	return gpu_attention_tc_stat(st, out, NULL, q, k, v, T, S, NH, NKV, HD, m);
}

int gpu_attention_tc_stat(cudaStream_t st, float *out, float *stat, const float *q,
                          const float *k, const float *v, int T, int S, int NH, int NKV, int HD,
                          const struct attn_mask *m)
{
	struct at_in in = { q, k, v, NULL, NULL, NULL };
	return at_forward(st, out, stat, &in, T, S, NH, NKV, HD, m);
}

int gpu_attention_tc_stat_bf(cudaStream_t st, float *out, float *stat, const void *qb,
                             const void *kb, const void *vb, int T, int S, int NH, int NKV,
                             int HD, const struct attn_mask *m)
{
	struct at_in in = { NULL, NULL, NULL, (const bf16 *)qb, (const bf16 *)kb,
	                    (const bf16 *)vb };
	return at_forward(st, out, stat, &in, T, S, NH, NKV, HD, m);
}

/* gpu_attention_tc_stat on the operands in */
static int at_forward(cudaStream_t st, float *out, float *stat, const struct at_in *in, int T,
                      int S, int NH, int NKV, int HD, const struct attn_mask *m)
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
	int ver = fa_version(0, HD);
	if (fa_ok(ver, T, S, HD))
		return fa_attention(st, ver, out, stat, in, T, S, NH, NKV, HD, m);
	size_t cs = (size_t)(T < AT_CHUNK ? T : AT_CHUNK) * S * NKV;
	char *sc = (char *)gpu_scratch(AT_RANGE_BYTES(z) + cs * 4 + cs * 2 + (nq + 2 * nk) * 2);
	float *sf = (float *)(sc + AT_RANGE_BYTES(z));
	__nv_bfloat16 *p = (__nv_bfloat16 *)(sf + cs), *qs = p + cs;
	long long gh = (long long)z.group * HD;    /* head stride of the batch (q, out) */

	CUBLAS_CHECK(cublasSetStream(h, st));
	at_ranges(st, &z, (int *)sc, m);
	const bf16 *qb = at_operand(st, qs, in->q, in->qb, nq);
	const bf16 *kb = at_operand(st, qs + nq, in->k, in->kb, nk);
	const bf16 *vb = at_operand(st, qs + nq + nk, in->v, in->vb, nk);
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
	return gpu_attention_tc_backward_stat(st, dq, dk, dv, dout, q, k, v, out, NULL, T, S, NH,
	                                      NKV, HD, m);
}

int gpu_attention_tc_backward_stat(cudaStream_t st, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *stat, int T,
                                   int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_in in = { q, k, v, NULL, NULL, NULL };
	return at_backward(st, dq, dk, dv, dout, &in, out, stat, T, S, NH, NKV, HD, m);
}

int gpu_attention_tc_backward_stat_bf(cudaStream_t st, float *dq, float *dk, float *dv,
                                      const float *dout, const void *qb, const void *kb,
                                      const void *vb, const float *out, const float *stat, int T,
                                      int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_in in = { NULL, NULL, NULL, (const bf16 *)qb, (const bf16 *)kb,
	                    (const bf16 *)vb };
	return at_backward(st, dq, dk, dv, dout, &in, out, stat, T, S, NH, NKV, HD, m);
}

/* gpu_attention_tc_backward_stat on the operands in */
static int at_backward(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                       const struct at_in *in, const float *out, const float *stat, int T,
                       int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	struct at_shape z;
	cublasHandle_t h = gpu_cublas();

	if (at_check(&z, T, S, NH, NKV, HD, m) < 0)
		return -1;
	size_t nq = (size_t)T * z.QD, nk = (size_t)S * z.KVD;
	int ver = fa_version(1, HD), fused = T && S && fa_ok(ver, T, S, HD);
	if (!(fused && ver == 3 && f3b_pkv())) {   /* (else every row is stored) */
		gpu_zero(st, dk, nk * 4);
		gpu_zero(st, dv, nk * 4);
	}
	gpu_zero(st, dq, nq * 4);
	if (T == 0 || S == 0)
		return 0;
	if (fused)
		return fa_attention_backward(st, ver, dq, dk, dv, dout, in, out, stat, T, S, NH,
		                             NKV, HD, m);
	size_t cs = (size_t)(T < AT_CHUNK ? T : AT_CHUNK) * S * NKV;
	char *sc = (char *)gpu_scratch(AT_RANGE_BYTES(z) + cs * 4 + (size_t)T * NH * 4 + cs * 4 +
	                               (2 * nq + 2 * nk) * 2);
	float *sf = (float *)(sc + AT_RANGE_BYTES(z)), *d = sf + cs;
	__nv_bfloat16 *p = (__nv_bfloat16 *)(d + (size_t)T * NH), *ds = p + cs, *qs = ds + cs;
	__nv_bfloat16 *dob = qs + nq + 2 * nk;
	long long gh = (long long)z.group * HD;

	CUBLAS_CHECK(cublasSetStream(h, st));
	at_ranges(st, &z, (int *)sc, m);
	const bf16 *qb = at_operand(st, qs, in->q, in->qb, nq);
	const bf16 *kb = at_operand(st, qs + nq, in->k, in->kb, nk);
	const bf16 *vb = at_operand(st, qs + nq + nk, in->v, in->vb, nk);
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

/* ---------------------------------------------------------------- bf16 operands (the engine) */

/* the lowest and highest of v over the warp, to every lane */
static __device__ __forceinline__ void pf_minmax(int *lo, int *hi)
{
	for (int o = 16; o; o >>= 1) {
		*lo = min(*lo, __shfl_xor_sync(0xffffffffu, *lo, o));
		*hi = max(*hi, __shfl_xor_sync(0xffffffffu, *hi, o));
	}
}

/* fb_map_kernel's map, the same bytes, for masks of many segments (the engine's packed
 * sequences): a tile whose query rows and keys have disjoint ranges of segments (fa_sees
 * sees nothing there) is 0 without its 4096 pairs; grid (key tiles / FB_MAPW, query tiles) */
static __global__ void __launch_bounds__(32 * FB_MAPW)
pf_map_kernel(unsigned char *map, int T, int S, struct attn_mask m, int nz, int sg)
{
	__shared__ int sqb[FA_T], sqf[FA_T], skb[FB_MAPW * FA_T], skf[FB_MAPW * FA_T];
	int qt = blockIdx.y, kt0 = blockIdx.x * FB_MAPW, nkt = CEIL_DIV(S, FA_T);
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, kt = kt0 + w, any = 0, all = 1;

	if (threadIdx.x < FA_T)
		fa_facts(m, nz, sg, 1, qt * FA_T + threadIdx.x, T, &sqb[threadIdx.x],
		         &sqf[threadIdx.x]);
	for (int j = threadIdx.x; j < FB_MAPW * FA_T; j += blockDim.x)
		fa_facts(m, nz, sg, 0, kt0 * FA_T + j, S, &skb[j], &skf[j]);
	__syncthreads();
	if (kt >= nkt)
		return;
	int qlo = 0x7fffffff, qhi = -0x7fffffff, klo = 0x7fffffff, khi = -0x7fffffff;
	for (int r = lane; r < FA_T; r += 32) {
		qlo = min(qlo, sqf[r] >> 1);
		qhi = max(qhi, sqf[r] >> 1);
		klo = min(klo, skf[w * FA_T + r] >> 1);
		khi = max(khi, skf[w * FA_T + r] >> 1);
	}
	pf_minmax(&qlo, &qhi);
	pf_minmax(&klo, &khi);
	if (qhi < klo || khi < qlo) {           /* (warp-uniform) no segment in common */
		if (lane == 0)
			map[(size_t)qt * nkt + kt] = 0;
		return;
	}
	for (int e = lane; e < FA_T * FA_T; e += 32) {
		int r = e / FA_T, c = w * FA_T + e % FA_T;
		int v = fa_sees(sqb[r], sqf[r], skb[c], skf[c]);
		any |= v;
		all &= v;
	}
	any = __any_sync(0xffffffffu, any);
	all = __all_sync(0xffffffffu, all);
	if (lane == 0)
		map[(size_t)qt * nkt + kt] = any ? (all ? 2 : 1) : 0;
}

/* The fused forward on operands that are bf16 already (the engine's prefill attention,
 * decode.cu: q cast once, K and V gathered from its bf16 caches): whether it takes the
 * shape (HD 64 or 128, an sm_80 or later GPU, and fa_ok for S keys), the scratch it
 * needs, and the call. Same kernels, versions (DICE_FA) and rounding as gpu_attention_tc_stat
 * on the fused path, which rounds its fp32 operands to these same bf16 values. */
int gpu_attention_bf16_ok(int T, int S, int HD)
{
	/* (fa_ok's T sizes only the backward's shared memory: not this one's) */
	return T > 0 && S > 0 && (HD == 64 || HD == 128) && gpu_cc() >= 80 &&
	       fa_ok(fa_version(0, HD), 1, S, HD);
}

size_t gpu_attention_bf16_scratch(int T, int S)
{
	return fa_head_carve(NULL, NULL, T, S);
}

/* out(T,NH,HD) fp32 from q(T,NH,HD), k, v(S,NKV,HD) bf16 (device, 16-byte aligned rows) under
 * mask m (device arrays); scratch: gpu_attention_bf16_scratch(T, S) bytes of device memory,
 * 256-aligned. Every row of out is written (zeros for a row without a visible key). */
int gpu_attention_bf16(cudaStream_t st, float *out, const void *q, const void *k, const void *v,
                       int T, int S, int NH, int NKV, int HD, const struct attn_mask *m,
                       void *scratch)
{
	struct fa_head hd;
	int ver = fa_version(0, HD);

	GPU_REQUIRE(NH > 0 && NKV > 0 && NH % NKV == 0 && m && m->block > 0, "attention_bf16");
	GPU_REQUIRE(gpu_attention_bf16_ok(T, S, HD), "attention_bf16");
	fa_head_carve(&hd, (char *)scratch, T, S);
	/* fa_prepare's facts, map and forward order, built every call (flag[0] set: the plan
	 * kept by the training calls is not this one), the map by pf_map_kernel */
	int nz = m->qnoisy && m->knoisy, sg = m->qseg && m->kseg, nkt = CEIL_DIV(S, FA_T);
	int nqr = f3_facts_rows(T, S, 1), nkr = f3_facts_rows(T, S, 0);
	CUDA_CHECK(cudaMemsetAsync(hd.flag, 1, 4, st));
	f3_facts_kernel<<<CEIL_DIV(nqr + nkr, 256), 256, 0, st>>>(hd.fct, T, S, nqr, nkr, *m, nz,
	                                                         sg, hd.flag);
	CUDA_CHECK_LAUNCH();
	pf_map_kernel<<<dim3(CEIL_DIV(nkt, FB_MAPW), CEIL_DIV(T, FA_T)), 32 * FB_MAPW, 0, st>>>(
		hd.map, T, S, *m, nz, sg);
	CUDA_CHECK_LAUNCH();
	if (ver != 1) {
		fb_order_kernel<<<1, 1024, 0, st>>>(hd.ordf, hd.work, hd.map, CEIL_DIV(T, FA_T), nkt,
		                                    1, hd.flag);
		CUDA_CHECK_LAUNCH();
	}
	return fa_forward(st, ver, out, NULL, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
	                  &hd, T, S, NH, NKV, HD, m);
}
