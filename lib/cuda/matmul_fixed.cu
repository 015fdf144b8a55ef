/* matmul_fixed.cu: the engine forward's batch-invariant matrix product (struct ops
 * matmul_fixed): y(N,out) fp32 = x(N,in) fp32 @ w(out,in)^T where every output element is
 * accumulated in one order that depends on (in, out) only, never on N, on the row's place in
 * the batch or on the kernel that ran. Two kernels for 16-bit weights, both on the tensor
 * cores (mma.sync m16n8k16, fp32 accumulation, x rounded to the weight dtype):
 *  - up to MF_SMALL_M rows, a streaming kernel: one block per 8 outputs, one warp per
 *    segment of the inputs, 16-byte weight loads, the next step's in flight during this one
 *    (from the packed copy of w where gpu_matmul_fixed_pack made one: a step's 4 KB in one
 *    piece instead of 8 rows' 512 bytes);
 *  - above, a tiled kernel (mft_kernel) at one of several tile shapes (mf_var: 64..256 rows
 *    x 64..128 outputs, 4 or 8 warps, 3 or 4 cp.async stages of 32 or 64 inputs), chosen per
 *    (N, in, out) by a cost model fitted to H100 timings (mf_cost); a block either walks its
 *    tile's segments one after the other (no partial sums in memory) or takes one segment
 *    (grid.y) with an ordered reduce after; x is converted to the weight dtype beforehand,
 *    in the order its mma steps read it (mf_quad_kernel: one 16-byte load an A operand).
 *    The tile shape, the split and the stage depth change no output's order of sums. On a
 *    compute-capability-9.0 GPU the cost model also weighs matmul_wgmma.cu's Hopper kernels
 *    (wgmma, the same bits; some fed by TMA) and takes one where it is cheaper (DICE_WGMMA=0:
 *    never; DICE_WGMMA_TMA=0: none of the TMA ones; DICE_MX_SPLIT=1: also the TMA ones
 *    that run a tile's segments in blocks of their own; DICE_MX_ROWS=0: none of the TMA
 *    tiles of 80, 112 or 160 rows).
 * The order both follow: the inputs are cut into nseg segments of kseg inputs (a multiple of
 * 64, or all of them; gpu_matmul_fixed_segments, a function of (in, out)); within a segment
 * the products accumulate from zero in 32-input blocks, ascending, each block two mma steps
 * over a fixed permutation of its inputs (thread q of a quad holds inputs 8q..8q+7: the first
 * step takes 8q+0..3, the second 8q+4..7); the segments' sums are then added in segment order:
 * ((s0 + s1) + s2) + ...
 * Rows beyond N and inputs beyond in enter as zeros in both kernels. fp32 weights take the
 * gemv kernel of matmul.cu in chunks of 8 rows (its per-row arithmetic does not depend on
 * the row count), and shapes neither kernel takes (in not a multiple of 8, unaligned
 * pointers) a plain kernel, one thread per output, inputs in order. Both are invariant too. */
#include "common.cuh"

#define MF_KB 32                /* inputs per block of two mma steps */
#define MF_SEGMAX 8             /* segments of the inputs, at most */
#ifndef MF_WARPS_WANT                  /* (-DMF_WARPS_WANT=N: a bench variant) */
#define MF_WARPS_WANT 1280      /* streaming kernel: warps to aim for (outputs/8 x segments) */
#endif
#define MF_SMALL_M 32           /* rows up to which the streaming kernel runs */

/* ---------------------------------------------------------------- the timeline (a bench aid)
 * Built with -DDICE_TIMELINE only (config.mk's NVCCEXTRA; common.cuh): once armed
 * (gpu_timeline), the streaming and staged kernels here and the decode forward's small
 * kernels and attention (decode.cu) record for each block, from its thread 0, the global timer
 * (ns) at the kernel's start, after its wait on the kernel before (PDL) and at its end, with
 * the product's (in, out) or the small kernel's code (GPU_TL_*): where a batch-1 forward's
 * time goes, as the graph runs it (bench/timeline.py reads the dump). Without it the kernels
 * are as if it did not exist. */
#ifdef DICE_TIMELINE
#define GPU_TL_CAP (1 << 18)
GPU_TL_BINDER(gpu_tl_bind_matmul_fixed)
#endif

int gpu_timeline(int arm, FILE *f)
{
#ifdef DICE_TIMELINE
	static unsigned long long *buf;
	static unsigned *cnt;
	unsigned n;
	CUDA_CHECK(cudaDeviceSynchronize());
	if (!buf) {
		CUDA_CHECK(cudaMalloc((void **)&buf, (size_t)GPU_TL_CAP * 4 * sizeof *buf));
		CUDA_CHECK(cudaMalloc((void **)&cnt, sizeof *cnt));
	}
	if (arm)
		CUDA_CHECK(cudaMemset(cnt, 0, sizeof *cnt));
	gpu_tl_bind_matmul_fixed(buf, cnt, GPU_TL_CAP, arm != 0);
	gpu_tl_bind_decode(buf, cnt, GPU_TL_CAP, arm != 0);
	if (arm)
		return 0;
	CUDA_CHECK(cudaMemcpy(&n, cnt, sizeof n, cudaMemcpyDeviceToHost));
	n = n < GPU_TL_CAP ? n : GPU_TL_CAP;
	unsigned long long *h = (unsigned long long *)malloc((size_t)n * 4 * sizeof *h);
	if (!h)
		return -1;
	CUDA_CHECK(cudaMemcpy(h, buf, (size_t)n * 4 * sizeof *h, cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%llu %llu %llu %llu %llu\n", h[4 * i + 3] >> 32, h[4 * i + 3] & 0xffffffffu,
		        h[4 * i], h[4 * i + 1], h[4 * i + 2]);
	free(h);
	return (int)n;
#else
	(void)arm;
	(void)f;
	return -1;
#endif
}

/* ---------------------------------------------------------------- CUDA kernels */

/* one block of 32 inputs: ra, rb = inputs 8q..8q+7 of rows g and g+8 (pairs, low half first),
 * bw = the same inputs of output column g. The fixed order of the whole file. */
static __device__ __forceinline__ void mf_step(float *c, uint4 ra, uint4 rb, uint4 bw, int f16)
{
	gpu_mma16816(c, ra.x, rb.x, ra.y, rb.y, bw.x, bw.y, f16);
	gpu_mma16816(c, ra.z, rb.z, ra.w, rb.w, bw.z, bw.w, f16);
}

static __device__ __forceinline__ uint4 mf_pack8(float4 a, float4 b, int f16)
{
	return make_uint4(gpu_pack2(a.x, a.y, f16), gpu_pack2(a.z, a.w, f16), gpu_pack2(b.x, b.y, f16),
	                  gpu_pack2(b.z, b.w, f16));
}

/* the segments' partial sums of one lane added in segment order: p[0] + p[stride] + ...
 * (nseg of them; the fixed order of the whole file) */
static __device__ __forceinline__ float4 mf_segsum(const float4 *p, int nseg, int stride)
{
	float4 v = p[0];
	for (int s = 1; s < nseg; s++) {
		float4 t = p[s * stride];
		v.x += t.x;
		v.y += t.y;
		v.z += t.z;
		v.w += t.w;
	}
	return v;
}

/* the streaming kernel's weight loads: blocks k, k+32, ... (U of them) of output row g;
 * KST: bytes an input further on (2: row-major w; 16: the packed layout, mf_wp) */
static __device__ __forceinline__ void mfs_loadb(uint4 *b, const char *wp, int k, int kend,
                                                 int q, const int U, const int KST = 2)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		b[u] = make_uint4(0, 0, 0, 0);
		if (k + MF_KB * u + 8 * q < kend)
			b[u] = __ldcs((const uint4 *)(wp + (size_t)(k + MF_KB * u) * KST));
	}
}

/* where lane (g, q) of the warp for tile t (outputs 8 t ..) finds its weights: row-major
 * (PK 0), its row's inputs 8 q ..; packed (PK 1, gpu_matmul_fixed_pack), the tile's
 * 32-input blocks one after the other, 512 bytes each, lane l's 16 at 16 l (row g, inputs
 * 8 q .. 8 q + 7 of the block) */
template <int PK>
static __device__ __forceinline__ const char *mf_wp(const void *w, int t, int lane, int K, int out)
{
	if (PK)
		return (const char *)w + ((size_t)t * CEIL_DIV(K, MF_KB) * 32 + lane) * 16;
	return (const char *)w + ((size_t)min(8 * t + (lane >> 2), out - 1) * K + 8 * (lane & 3)) * 2;
}

/* h's outputs i, i + 1 (i even), and where h16 is given the same rounded to the weights'
 * 16-bit type, as every product rounds its input (a later product's x16) */
static __device__ __forceinline__ void mf_hstore(float *h, void *h16, size_t i, float a, float b,
                                                 int f16)
{
	h[i] = a;
	h[i + 1] = b;
	if (h16)
		((unsigned *)h16)[i / 2] = gpu_pack2(a, b, f16);
}

/* the streaming kernel: block = 8 outputs, warp s = segment s; R8 groups of 8 rows (1, 2 or
 * 4: up to 8, 16, 32 rows), U = 8 / R8 blocks of 32 inputs per step. The next step's weights
 * are in flight while this step's x is converted and multiplied. Launched with programmatic
 * dependent launch (gpu_launch): the first step's weights are asked for before the wait on
 * the kernel that writes x. PAIR (R8 1; gpu_matmul_fixed_gu): out = 16 np outputs [gate |
 * up], block p = gate tile p (warps 0 .. nseg - 1) and up tile p + np (the next nseg); the up
 * tile's sums go through shared memory to the gate tile's warp, which also writes
 * hout = silu(gate) * up (gpu_swiglu1, as swiglu_cat). */
template <int PAIR, int PK = 0, int X16 = 0>
static __device__ __forceinline__ void mfs_body(float *y, const float *x, const void *w, int f16,
                                                const int R8, int M, int K, int out, int kseg,
                                                float *hout, int np, const void *x16 = NULL,
                                                void *h16 = NULL)
{
	const int U = 8 / R8, MT = (R8 + 1) / 2;
	__shared__ float4 parts[PAIR + 1][MF_SEGMAX][2][32];
	__shared__ float2 upv[PAIR ? 32 : 1];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nseg = (blockDim.x >> 5) / (PAIR + 1);
	int half = PAIR ? wid / nseg : 0, seg = PAIR ? wid % nseg : wid;
	float4 (*part)[2][32] = parts[half];
	int g = lane >> 2, q = lane & 3, o0 = (blockIdx.x + half * np) * 8;
	const char *wp = mf_wp<PK>(w, blockIdx.x + half * np, lane, K, out);
	int kbeg = seg * kseg, kend = min(K, kbeg + kseg);
	float c[2][4];
	uint4 b[8], bn[8];
	float4 xa[X16 ? 1 : 8][2];
	uint4 xh[X16 ? 8 : 1];

	gpu_pdl_trigger();
	GPU_TL_START
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
		c[mt][0] = c[mt][1] = c[mt][2] = c[mt][3] = 0.0f;
	mfs_loadb(b, wp, kbeg, kend, q, U, PK ? 16 : 2);
	gpu_pdl_wait();                         /* x and y belong to earlier kernels */
	GPU_TL_WAITED
	for (int k = kbeg; k < kend; k += MF_KB * U) {
#pragma unroll
		for (int u = 0; X16 && u < U; u++) {    /* (R8 1) the 16-bit copy: 16 bytes a step */
			int kk = k + MF_KB * u + 8 * q;
			xh[u] = make_uint4(0, 0, 0, 0);
			if (g < M && kk < kend)
				xh[u] = __ldg((const uint4 *)((const char *)x16 + ((size_t)g * K + kk) * 2));
		}
#pragma unroll
		for (int u = 0; !X16 && u < U; u++) {
#pragma unroll
			for (int h = 0; h < R8; h++) {
				int row = 8 * h + g, kk = k + MF_KB * u + 8 * q;
				xa[u * R8 + h][0] = xa[u * R8 + h][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				if (row < M && kk < kend) {
					const float4 *p = (const float4 *)(x + (size_t)row * K + kk);
					xa[u * R8 + h][0] = __ldg(p);
					xa[u * R8 + h][1] = __ldg(p + 1);
				}
			}
		}
		if (k + MF_KB * U < kend)
			mfs_loadb(bn, wp, k + MF_KB * U, kend, q, U, PK ? 16 : 2);
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (k + MF_KB * u < kend) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					if (X16) {
						mf_step(c[0], xh[u], make_uint4(0, 0, 0, 0), b[u], f16);
						continue;
					}
					int h = u * R8 + 2 * mt;
					uint4 ra = mf_pack8(xa[h][0], xa[h][1], f16), rb = make_uint4(0, 0, 0, 0);
					if (2 * mt + 1 < R8)
						rb = mf_pack8(xa[h + 1][0], xa[h + 1][1], f16);
					mf_step(c[mt], ra, rb, b[u], f16);
				}
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++)
			b[u] = bn[u];
	}
	if (nseg > 1) {
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
			part[seg][mt][lane] = make_float4(c[mt][0], c[mt][1], c[mt][2], c[mt][3]);
		__syncthreads();
		if (seg)
			return;
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			float4 v = mf_segsum(&part[0][mt][lane], nseg, 2 * 32);
			c[mt][0] = v.x;
			c[mt][1] = v.y;
			c[mt][2] = v.z;
			c[mt][3] = v.w;
		}
	}
	if (PAIR) {                             /* the up tile's sums to the gate tile's warp */
		if (half)
			upv[lane] = make_float2(c[0][0], c[0][1]);
		asm volatile("bar.sync 1, 64;\n" ::: "memory");   /* (the two segment-0 warps) */
	}
	int col = o0 + 2 * q;
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int row = 16 * mt + g + 8 * h;
			if (row >= M)
				continue;
			if (col < out)
				y[(size_t)row * out + col] = c[mt][2 * h];
			if (col + 1 < out)
				y[(size_t)row * out + col + 1] = c[mt][2 * h + 1];
		}
	}
	if (PAIR && !half && g < M) {           /* h = silu(gate) * up, as swiglu_cat */
		float2 u = upv[lane];
		mf_hstore(hout, h16, (size_t)g * np * 8 + col, gpu_swiglu1(c[0][0], u.x),
		          gpu_swiglu1(c[0][1], u.y), f16);
	}
	GPU_TL_END(K, out)
}

template <int PK>
static __global__ void mfs_kernel8(float *y, const float *x, const void *w, int f16, int M,
                                   int K, int out, int kseg)
{
	mfs_body<0, PK>(y, x, w, f16, 1, M, K, out, kseg, NULL, 0);
}

/* the same reading x16, x's 16-bit copy */
template <int PK>
static __global__ void mfs_kernel8_x16(float *y, const void *x16, const void *w, int f16, int M,
                                       int K, int out, int kseg)
{
	mfs_body<0, PK, 1>(y, NULL, w, f16, 1, M, K, out, kseg, NULL, 0, x16);
}

template <int PK>
static __global__ void mfs_kernel16(float *y, const float *x, const void *w, int f16, int M,
                                    int K, int out, int kseg)
{
	mfs_body<0, PK>(y, x, w, f16, 2, M, K, out, kseg, NULL, 0);
}

template <int PK>
static __global__ void mfs_kernel32(float *y, const float *x, const void *w, int f16, int M,
                                    int K, int out, int kseg)
{
	mfs_body<0, PK>(y, x, w, f16, 4, M, K, out, kseg, NULL, 0);
}

/* the pairs of gpu_matmul_fixed_gu on the streaming kernel (up to 8 rows): block p, gate tile
 * p and up tile p + np */
template <int PK, int X16>
static __global__ void mfs_kernel8_gu(float *y, const float *x, const void *w, int f16, int M,
                                      int K, int out, int kseg, float *h, int np,
                                      const void *x16, void *h16)
{
	mfs_body<1, PK, X16>(y, x, w, f16, 1, M, K, out, kseg, h, np, x16, h16);
}

/* The staged streaming kernel (up to 8 rows; matmul_fixed's default there, DICE_MFX=0: the
 * streaming kernel): the streaming kernel's products in its order (the same bits), but a block
 * holds T tiles of 8 outputs x nseg segments (warp w: tile T blockIdx.x + w / nseg, segment
 * w % nseg), and once its first weights are asked for and x is written it converts all of x
 * to the weights' 16-bit type into shared memory (rows of K + 8 values: a warp's A operands
 * fall in distinct banks). A step then reads its A operands from shared memory: it has no
 * global load of x for its weights to wait behind and no registers for x (more warps an SM,
 * and at batch 1 all the blocks of a product at once). NB: the steps whose weights a warp
 * has in flight, 2 (96 registers, blocks of up to 19 warps) or 1 (76, up to 24 warps: for
 * products whose warps would not fit the GPU at once with 2, such as SDAR-8B's gate/up).
 * PAIRS (gpu_matmul_fixed_gu; blocks of up to 20 warps with 2 steps in flight: SDAR-4B's 1216
 * pairs over 132 SMs): out = 16 np outputs [gate | up], block b takes the tile pairs
 * (p, p + np) for p in [b np / grid, (b + 1) np / grid), warps 2 j and 2 j + 1 (times the
 * segments) the j-th pair's gate and up tiles; the up tile's sums go through shared memory to
 * the gate tile's warp, which writes h = silu(gate) * up (gpu_swiglu1, as swiglu_cat) besides
 * both tiles' y. */
#define MFX_WARPS 19                    /* warps a block, at most (at 96 registers, about an SM's) */
#define MFXP_WARPS 20                   /* the pairs' kernel (a few registers spilled) */
#define MFX1_WARPS 24                   /* the same with one step's weights in flight */
#define MFX_SMEM (200 * 1024)           /* shared memory a block, at most (x and the partial sums;
                                         * less where the GPU allows less) */

template <int NB, int PAIRS, int PK = 0>
static __global__ void __launch_bounds__(NB == 1 ? 32 * MFX1_WARPS :
                                         32 * (PAIRS ? MFXP_WARPS : MFX_WARPS))
mfx_kernel(float *y, const float *x, const void *w, int f16, int M, int K, int out, int kseg,
           int T, float *h, int np, void *h16)
{
	extern __shared__ uint4 mfx_smem[];
	char *xs = (char *)mfx_smem;
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nseg = (blockDim.x >> 5) / T;
	int tl = wid / nseg, seg = wid % nseg, tiles = CEIL_DIV(out, 8), RS = K + 8;
	int t = blockIdx.x * T + tl, live = t < tiles;
	if (PAIRS) {                            /* pairs (gate tile p, up tile p + np) */
		int p0 = (int)((long long)blockIdx.x * np / gridDim.x);
		int p1 = (int)((long long)(blockIdx.x + 1) * np / gridDim.x), p = p0 + (tl >> 1);
		live = p < p1;
		t = p + (tl & 1) * np;
	}
	int g = lane >> 2, q = lane & 3, o0 = min(t, tiles - 1) * 8;
	const char *wp = mf_wp<PK>(w, o0 / 8, lane, K, out);
	int kbeg = seg * kseg, kend = min(K, kbeg + kseg);
	float4 *part = (float4 *)(xs + (size_t)M * RS * 2);     /* (T, nseg, 32) */
	float2 *upv = (float2 *)(part + T * nseg * 32);         /* (T / 2, 32): the up tiles' sums */
	float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
	uint4 b[8], bn[8];

	gpu_pdl_trigger();
	GPU_TL_START
	mfs_loadb(b, wp, kbeg, kend, q, 8, PK ? 16 : 2);
	gpu_pdl_wait();                         /* x and y belong to earlier kernels */
	GPU_TL_WAITED
	/* x -> shared memory, 8 values (16 bytes) an item, SB items' loads before their stores */
	const int SB = NB == 1 ? 2 : 4;         /* items a thread has in flight */
	int K8 = K / 8, items = M * K8, nt = blockDim.x;
	for (int j0 = threadIdx.x; j0 < items; j0 += SB * nt) {
		float4 v[SB][2];
#pragma unroll
		for (int u = 0; u < SB; u++) {
			int j = j0 + u * nt, r = j / K8, i = j - r * K8;
			if (j < items) {
				const float4 *p = (const float4 *)(x + (size_t)r * K + 8 * i);
				v[u][0] = __ldg(p);
				v[u][1] = __ldg(p + 1);
			}
		}
#pragma unroll
		for (int u = 0; u < SB; u++) {
			int j = j0 + u * nt, r = j / K8, i = j - r * K8;
			if (j < items)
				*(uint4 *)(xs + ((size_t)r * RS + 8 * i) * 2) = mf_pack8(v[u][0], v[u][1], f16);
		}
	}
	__syncthreads();
	for (int k = kbeg; k < kend; k += MF_KB * 8) {
		if (NB == 1 && k > kbeg)
			mfs_loadb(b, wp, k, kend, q, 8, PK ? 16 : 2);
		if (NB == 2 && k + MF_KB * 8 < kend)
			mfs_loadb(bn, wp, k + MF_KB * 8, kend, q, 8, PK ? 16 : 2);
#pragma unroll
		for (int u = 0; u < 8; u++) {
			int kk = k + MF_KB * u + 8 * q;
			if (k + MF_KB * u < kend) {
				uint4 ra = make_uint4(0, 0, 0, 0);
				if (g < M && kk < kend)
					ra = *(const uint4 *)(xs + ((size_t)g * RS + kk) * 2);
				mf_step(c, ra, make_uint4(0, 0, 0, 0), b[u], f16);
			}
		}
#pragma unroll
		for (int u = 0; u < 8; u++)
			if (NB == 2)
				b[u] = bn[u];
	}
	if (nseg > 1) {                         /* the segments' sums in order, as mfs_body */
		part[(tl * nseg + seg) * 32 + lane] = make_float4(c[0], c[1], c[2], c[3]);
		__syncthreads();
		if (seg)
			return;
		float4 v = mf_segsum(part + tl * nseg * 32 + lane, nseg, 32);
		c[0] = v.x;
		c[1] = v.y;
		c[2] = v.z;
		c[3] = v.w;
	}
	if (PAIRS) {                            /* the up tile's sums to its gate tile's warp */
		if (tl & 1)
			upv[(tl >> 1) * 32 + lane] = make_float2(c[0], c[1]);
		asm volatile("bar.sync 1, %0;\n" :: "r"(32 * T) : "memory");   /* (segment 0's warps) */
	}
	int col = o0 + 2 * q;
	if (!live || g >= M)                    /* (rows g + 8 are past M) */
		return;
	if (col < out)
		y[(size_t)g * out + col] = c[0];
	if (col + 1 < out)
		y[(size_t)g * out + col + 1] = c[1];
	if (PAIRS && !(tl & 1)) {               /* h = silu(gate) * up, as swiglu_cat */
		float2 u = upv[(tl >> 1) * 32 + lane];
		mf_hstore(h, h16, (size_t)g * np * 8 + col, gpu_swiglu1(c[0], u.x),
		          gpu_swiglu1(c[1], u.y), f16);
	}
	GPU_TL_END(K, out)
}

/* ---------------------------------------------------------------- packed copies
 * gpu_matmul_fixed_pack keeps, for a 16-bit w(out, in), a copy in the layout the streaming
 * and staged kernels stream fastest (mf_wp: a warp's step one contiguous 4 KB instead of 8
 * rows' 512 bytes); products of up to MF_SMALL_M rows on that (w, out, in) then read the copy
 * (the same values into the same registers: the same bits). The copies are kept in an array
 * sorted by w (one thread uses the backend). */
struct mf_pk {
	const void *w;
	void *p;
	int out, in;
};
static struct mf_pk *mf_pks;
static int mf_npk, mf_pkcap;

static int mf_tc_ok(const float *x, const void *w, enum dice_dtype wdt, int in);

/* the first entry whose w is not below w */
static int mf_pk_find(const void *w)
{
	int lo = 0, hi = mf_npk;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if ((uintptr_t)mf_pks[mid].w < (uintptr_t)w)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* w's packed copy for a product of that shape, or NULL */
static const void *mf_packed(const void *w, int out, int in)
{
	int i = mf_npk ? mf_pk_find(w) : 0;
	return i < mf_npk && mf_pks[i].w == w && mf_pks[i].out == out && mf_pks[i].in == in ?
	       mf_pks[i].p : NULL;
}

/* one 16-byte item (8 inputs) of the packed layout a thread: item i = (tile, block, lane) */
static __global__ void mf_pack_kernel(uint4 *d, const uint16_t *w, int out, int K, size_t n)
{
	int nkb = CEIL_DIV(K, MF_KB);
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		int lane = (int)(i & 31);
		size_t tb = i >> 5;
		int j = (int)(tb % nkb), t = (int)(tb / nkb);
		int row = 8 * t + (lane >> 2), k0 = j * MF_KB + 8 * (lane & 3);
		uint16_t v[8];
		for (int e = 0; e < 8; e++)
			v[e] = row < out && k0 + e < K ? w[(size_t)row * K + k0 + e] : 0;
		uint4 u;
		memcpy(&u, v, 16);
		d[i] = u;
	}
}

size_t gpu_matmul_fixed_packed_bytes(int out, int in)
{
	return (size_t)CEIL_DIV(out, 8) * CEIL_DIV(in, MF_KB) * 512;
}

int gpu_matmul_fixed_pack(cudaStream_t st, const void *w, enum dice_dtype wdt, int out, int in)
{
	size_t bytes = gpu_matmul_fixed_packed_bytes(out, in), fr = 0, tot = 0;
	void *p = NULL;

	GPU_REQUIRE(out > 0 && in > 0, "matmul_fixed_pack");
	if (!mf_tc_ok(NULL, w, wdt, in))
		return 0;
	int i = mf_pk_find(w);
	if (i < mf_npk && mf_pks[i].w == w) {   /* made again (w's values changed) */
		if (mf_pks[i].out != out || mf_pks[i].in != in)
			return 0;
		p = mf_pks[i].p;
	} else {
		/* only where a quarter of the GPU's memory stays free */
		CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
		if (fr < bytes + tot / 4)
			return 0;
		cudaError_t e = cudaMalloc(&p, bytes);
		if (e == cudaErrorMemoryAllocation) {
			cudaGetLastError();
			return 0;
		}
		CUDA_CHECK(e);
		if (mf_npk == mf_pkcap) {
			mf_pkcap = mf_pkcap ? 2 * mf_pkcap : 64;
			mf_pks = (struct mf_pk *)realloc(mf_pks, (size_t)mf_pkcap * sizeof *mf_pks);
			if (!mf_pks) {
				warn_msg("out of memory");
				exit(1);
			}
		}
		memmove(mf_pks + i + 1, mf_pks + i, (size_t)(mf_npk - i) * sizeof *mf_pks);
		mf_pks[i] = (struct mf_pk){ w, p, out, in };
		mf_npk++;
		gpu_graphs_stale();             /* graphs captured before: on w, now on the copy */
	}
	size_t n = bytes / 16;
	int grid = (int)(CEIL_DIV(n, (size_t)256) < 65536 ? CEIL_DIV(n, (size_t)256) : 65536);
	mf_pack_kernel<<<grid, 256, 0, st>>>((uint4 *)p, (const uint16_t *)w, out, in, n);
	CUDA_CHECK_LAUNCH();
	return 1;
}

void gpu_matmul_fixed_unpack(const void *w)
{
	int i = mf_npk ? mf_pk_find(w) : 0;

	if (i == mf_npk || mf_pks[i].w != w)
		return;
	CUDA_CHECK(cudaFree(mf_pks[i].p));      /* (cudaFree waits for the kernels using it) */
	memmove(mf_pks + i, mf_pks + i + 1, (size_t)(mf_npk - i - 1) * sizeof *mf_pks);
	mf_npk--;
	gpu_graphs_stale();                     /* no graph may hold the freed copy */
}

/* whether the streaming path takes a staged kernel (gpu_set_mfx; -1: DICE_MFX, read once) */
static int mfx_on = -1;

void gpu_set_mfx(int on)
{
	mfx_on = on;
}

/* the staged kernel (one: with one step in flight) where it takes the shape (M <= 8, its
 * shared memory within MFX_SMEM and the GPU's limit) and, unless forced, beats the streaming
 * kernel's waves: 0, else -1 (nothing launched). h: out = 2 I outputs [gate | up] (I a
 * multiple of 8), and h(M, I) = silu(gate) * up made too, a block taking tile pairs (gate
 * tile p, up tile p + I / 8) over every SM; -2 where the plain kernel would run but the
 * pairs' blocks do not fit (nothing launched) */
static int mfx_launch(cudaStream_t st, float *y, const float *x, const void *w, int f16, int M,
                      int K, int out, int kseg, int nseg, int force, int one, float *h, int pk,
                      void *h16 = NULL)
{
	static int attr;
	/* [pairs][one][pk] */
	static const void *const fns[2][2][2] = {
		{ { (const void *)mfx_kernel<2, 0, 0>, (const void *)mfx_kernel<2, 0, 1> },
		  { (const void *)mfx_kernel<1, 0, 0>, (const void *)mfx_kernel<1, 0, 1> } },
		{ { (const void *)mfx_kernel<2, 1, 0>, (const void *)mfx_kernel<2, 1, 1> },
		  { (const void *)mfx_kernel<1, 1, 0>, (const void *)mfx_kernel<1, 1, 1> } } };
	const void *fn = fns[0][one][pk];
	/* T tiles a block: a block an SM where they fit (at batch 1 all of a product's blocks at
	 * once, none waiting for a second wave), at most MFX_WARPS warps a block */
	int tiles = CEIL_DIV(out, 8), sms = gpu_sm_count(), T = CEIL_DIV(tiles, sms);
	int wmax = one ? MFX1_WARPS : MFX_WARPS, tmax = wmax / nseg > 1 ? wmax / nseg : 1;
	T = T < tmax ? T : tmax;
	size_t smem = (size_t)M * (K + 8) * 2 + (size_t)T * nseg * 32 * 16;

	if (!attr) {                            /* MFX_SMEM, or less where the GPU allows less */
		int dev, optin = 0;
		CUDA_CHECK(cudaGetDevice(&dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
		attr = optin < MFX_SMEM ? optin : MFX_SMEM;
		for (int i = 0; i < 8; i++)
			CUDA_CHECK(cudaFuncSetAttribute(fns[i >> 2][(i >> 1) & 1][i & 1],
			                                cudaFuncAttributeMaxDynamicSharedMemorySize, attr));
	}
	if (M > 8 || smem > (size_t)attr)
		return -1;
	/* where the streaming kernel's blocks fit the GPU at once, it keeps the product (its x
	 * is read a step at a time: no staging first); the staged one only where it takes fewer
	 * waves of blocks */
	if (!force) {
		static struct { int M, K, out, one, take; } memo[32];
		static int nmemo;
		int i = 0;
		while (i < nmemo && !(memo[i].M == M && memo[i].K == K && memo[i].out == out &&
		                      memo[i].one == one))
			i++;
		if (i == nmemo) {
			int ob = 0, nb = 0;
			CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ob, mfs_kernel8<0>, 32 * nseg,
			                                                         0));
			CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, fn, 32 * T * nseg,
			                                                         smem));
			long ow = CEIL_DIV((long)tiles, (long)sms * (ob > 0 ? ob : 1));
			long nw = CEIL_DIV((long)CEIL_DIV(tiles, T), (long)sms * (nb > 0 ? nb : 1));
			if (nmemo == 32)
				i = nmemo = 0;          /* (a full memo starts over) */
			memo[i].M = M, memo[i].K = K, memo[i].out = out, memo[i].one = one;
			memo[i].take = ow > 1 && nw < ow;
			nmemo++;
		}
		if (!memo[i].take)
			return -1;
	}
	int np = 0, grid = CEIL_DIV(tiles, T);
	if (h) {                                /* pairs, dealt evenly over the blocks */
		np = tiles / 2;
		grid = np < sms ? np : sms;
		T = 2 * CEIL_DIV(np, grid);
		smem = (size_t)M * (K + 8) * 2 + (size_t)T * nseg * 32 * 16 + (size_t)T / 2 * 32 * 8;
		if (T * nseg > (one ? MFX1_WARPS : MFXP_WARPS) || smem > (size_t)attr)
			return -2;
		fn = fns[1][one][pk];
	}
	void *args[] = { &y, &x, &w, &f16, &M, &K, &out, &kseg, &T, &h, &np, &h16 };
	gpu_launch(fn, dim3(grid), dim3(32 * T * nseg), smem, st, args);
	return 0;
}

/* 16 bytes global -> shared, asynchronously; zeros when !valid (src is not read then) */
static __device__ __forceinline__ void mf_cp16(void *dst, const void *src, int valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
	             :: "r"(s), "l"(src), "r"(valid ? 16 : 0));
}

/* The tiled kernel, one instance per tile shape: WM x WN warps, each TM x TN tiles of 16 rows
 * x 8 outputs (a block of BM = 16 WM TM rows by BN = 8 WN TN outputs); a stage holds KB
 * blocks of 32 inputs, each BM rows of x (converted already) then BN rows of w, 64 bytes a
 * row (the 16-byte chunks a warp reads at once cover 128 contiguous bytes: no bank
 * conflicts). A block either walks all the inputs, its segments one after the other (each
 * accumulated from zero, then written to y (the first) or added to what y holds: ((s0 + s1)
 * + s2) ...; KB divides the segment's blocks then), or, split (grid.y = segment), one segment
 * into part (the reduce adds them in order). Tiles are numbered in groups of MF_GROUP row
 * tiles, rows fastest, so that the blocks in flight share weights. */
#define MF_GROUP 8

template <int WM, int WN, int TM, int TN, int STAGES, int KB>
struct mft {
	enum { BM = 16 * WM * TM, BN = 8 * WN * TN, T = 32 * WM * WN, SUB = (BM + BN) * MF_KB * 2,
	       STAGE = KB * SUB, AU = BM * 4 / T, BU = BN * 4 / T };
};

template <int WM, int WN, int TM, int TN, int STAGES, int KB, int F16>
static __global__ void __launch_bounds__(32 * WM * WN)
mft_kernel(float *y, float *part, const void *xb, const void *w, int M, int K, int out, int kseg)
{
	typedef mft<WM, WN, TM, TN, STAGES, KB> P;
	extern __shared__ uint4 mf_smem[];
	char *sm = (char *)mf_smem;
	const char *xc = (const char *)xb, *wc = (const char *)w;
	int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, q = lane & 3;
	int wm = wid / WN, wn = wid % WN, lr = tid >> 2, lk = 8 * (tid & 3);
	int mt = CEIL_DIV(M, P::BM), nt = CEIL_DIV(out, P::BN);
	int first = blockIdx.x / (MF_GROUP * nt) * MF_GROUP, r = blockIdx.x % (MF_GROUP * nt);
	int gsz = min(mt - first, MF_GROUP);
	int m0 = (first + r % gsz) * P::BM, n0 = r / gsz * P::BN;
	int segb = kseg / MF_KB, kb0 = 0, kb1 = CEIL_DIV(K, MF_KB);
	float *dst = y;
	if (gridDim.y > 1) {
		kb0 = blockIdx.y * segb;
		kb1 = min(kb1, kb0 + segb);
		dst = part + (size_t)blockIdx.y * M * out;
	}
	/* stages to compute, and per segment */
	int nst = CEIL_DIV(kb1 - kb0, KB), segst = segb >= kb1 - kb0 ? nst : segb / KB;
	int flushed = 0, vec = !(out & 1) && !((uintptr_t)dst & 7);
	float acc[TM][TN][4];

	/* slot <- the KB blocks from kb: x in mf_quad_kernel's order (a 1 KB piece a 16-row
	 * group, chunk tid + u T of the tile's BM / 16 pieces), then w: thread tid copies chunks
	 * tid + u T (row (tid + u T) / 4, inputs 8 (tid % 4) .. +7); zeros past M, out or K */
	int ng = CEIL_DIV(M, 16), nkb = CEIL_DIV(K, MF_KB);
	auto load = [&](int slot, int kb) {
		char *s = sm + slot * P::STAGE + tid * 16;
#pragma unroll
		for (int b = 0; b < KB; b++) {
			int k = (kb + b) * MF_KB + lk, kin = k < K;
#pragma unroll
			for (int u = 0; u < P::AU; u++) {
				int c = tid + u * P::T, grp = m0 / 16 + (c >> 6), ok = grp < ng && kb + b < nkb;
				mf_cp16(s + b * P::SUB + u * P::T * 16,
				        xc + (ok ? ((size_t)grp * nkb + kb + b) * 1024 + (c & 63) * 16 : 0), ok);
			}
#pragma unroll
			for (int u = 0; u < P::BU; u++) {
				int row = n0 + lr + u * (P::T / 4), ok = row < out && kin;
				mf_cp16(s + b * P::SUB + P::BM * 64 + u * P::T * 16,
				        wc + ((size_t)(ok ? row : 0) * K + (ok ? k : 0)) * 2, ok);
			}
		}
	};

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nst)
			load(s, kb0 + s * KB);
		asm volatile("cp.async.commit_group;\n" ::);
	}
	int cs = 0, ls = STAGES - 1, s = 0;
	while (s < nst) {
#pragma unroll
		for (int i = 0; i < TM; i++)
#pragma unroll
			for (int j = 0; j < TN; j++)
				acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
		for (int send = min(nst, s + segst); s < send; s++) {
			asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
			__syncthreads();
			if (s + STAGES - 1 < nst)
				load(ls, kb0 + (s + STAGES - 1) * KB);
			asm volatile("cp.async.commit_group;\n" ::);
			ls = ls + 1 == STAGES ? 0 : ls + 1;
			const char *stg = sm + cs * P::STAGE;
			cs = cs + 1 == STAGES ? 0 : cs + 1;
#pragma unroll
			for (int b = 0; b < KB; b++) {
				if (b && kb0 + s * KB + b >= kb1)
					break;
				const char *as = stg + b * P::SUB, *bs = as + P::BM * 64;
				uint4 bw[TN];
#pragma unroll
				for (int j = 0; j < TN; j++)
					bw[j] = *(const uint4 *)(bs + ((wn * TN + j) * 8 + g) * 64 + q * 16);
				/* mf_step's two steps for each output tile (a0, a1: its A operands, one
				 * 16-byte load each), the first steps of a row of tiles before their
				 * second (independent products between dependent ones) */
#pragma unroll
				for (int i = 0; i < TM; i++) {
					const char *ap = as + (wm * TM + i) * 1024 + g * 128 + q * 32;
					uint4 a0 = *(const uint4 *)(ap + 16 * (g & 1));
					uint4 a1 = *(const uint4 *)(ap + 16 * (~g & 1));
#pragma unroll
					for (int j = 0; j < TN; j++)
						gpu_mma16816(acc[i][j], a0.x, a0.y, a0.z, a0.w, bw[j].x, bw[j].y, F16);
#pragma unroll
					for (int j = 0; j < TN; j++)
						gpu_mma16816(acc[i][j], a1.x, a1.y, a1.z, a1.w, bw[j].z, bw[j].w, F16);
				}
			}
		}
		/* the end of a segment: y = its sum (the first) or y + its sum. Each output
		 * belongs to one thread in every segment: it reads its own writes. */
#pragma unroll
		for (int i = 0; i < TM; i++) {
#pragma unroll
			for (int j = 0; j < TN; j++) {
				int col = n0 + (wn * TN + j) * 8 + 2 * q;
#pragma unroll
				for (int h = 0; h < 2; h++) {
					int row = m0 + (wm * TM + i) * 16 + g + 8 * h;
					float *p = dst + (size_t)row * out + col;
					float a0 = acc[i][j][2 * h], a1 = acc[i][j][2 * h + 1];
					if (row >= M || col >= out)
						continue;
					if (vec) {
						float2 v = make_float2(a0, a1);
						if (flushed) {
							float2 o = *(float2 *)p;
							v.x = o.x + a0;
							v.y = o.y + a1;
						}
						*(float2 *)p = v;
					} else {
						p[0] = flushed ? p[0] + a0 : a0;
						if (col + 1 < out)
							p[1] = flushed ? p[1] + a1 : a1;
					}
				}
			}
		}
		flushed = 1;
	}
	asm volatile("cp.async.wait_group 0;\n" ::);
}

/* y(n) = part[0](n) + part[1](n) + ... in segment order */
static __global__ void mf_reduce_kernel(float *y, const float *part, size_t n, int nseg)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = part[i];
		for (int s = 1; s < nseg; s++)
			v += part[(size_t)s * n + i];
		y[i] = v;
	}
}

/* x (N, K) fp32 -> 16-bit in the order the tiled kernel's mma steps read it: a 1 KB piece per
 * 16 rows (group G) and 32 inputs (block b), pieces G-major; in a piece, for row g (0..7),
 * quad thread q and step h, the 16 bytes of that step's A operand: rows 16G + g and
 * 16G + g + 8, inputs k, k + 1 then k + 2, k + 3 of each (k = 32b + 8q + 4h), pairs packed
 * {row g, row g + 8, row g, row g + 8}, at g * 128 + q * 32 + 16 (h ^ (g & 1)) (odd rows
 * swapped: no bank conflicts). Zeros past N and K. K % 4 == 0, x 16-byte aligned. glu: the
 * inputs are silu(gate) * up of x (N, 2K) = [gate | up] (gpu_x4). */
static __global__ void mf_quad_kernel(uint4 *d, const float *x, int N, int K, int nkb,
                                      size_t nq, int f16, int glu)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nq;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t piece = i >> 6;
		int s = (int)(i & 63), g = s >> 3, q = (s >> 1) & 3, h = (s & 1) ^ (g & 1);
		int r = (int)(piece / nkb) * 16 + g, k = (int)(piece % nkb) * MF_KB + 8 * q + 4 * h;
		float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
		if (k < K && r < N)
			lo = gpu_x4(x, (size_t)r, K, k, glu);
		if (k < K && r + 8 < N)
			hi = gpu_x4(x, (size_t)(r + 8), K, k, glu);
		d[i] = make_uint4(gpu_pack2(lo.x, lo.y, f16), gpu_pack2(hi.x, hi.y, f16),
		                  gpu_pack2(lo.z, lo.w, f16), gpu_pack2(hi.z, hi.w, f16));
	}
}

/* any shape: one thread per output, the inputs in order */
static __global__ void mf_plain_kernel(float *y, const float *x, const void *w, int dt, int M,
                                       int K, int out)
{
	size_t total = (size_t)M * out;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / out, o = i % out;
		const float *xr = x + n * K;
		float acc = 0.0f;
		for (int k = 0; k < K; k++) {
			float xv = xr[k];
			if (dt == DICE_BF16)
				xv = __bfloat162float(__float2bfloat16_rn(xv));
			else if (dt == DICE_F16)
				xv = __half2float(__float2half_rn(xv));
			acc = fmaf(xv, gpu_load_w(w, dt, o * K + k), acc);
		}
		y[i] = acc;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

/* the segments of the inputs for (in, out): enough warps of the streaming kernel to fill the
 * GPU (MF_WARPS_WANT: 1280 took SDAR-1.7B's and 8B's batch-1 products 5-6% faster than 1024,
 * 4B's the same, bench/NOTES-device.md, session 20), at most MF_SEGMAX; *kseg = inputs per
 * segment, a multiple of 64 unless one segment takes them all (an odd count of 32-input
 * blocks split the tiled kernels' 64-input stages at every segment's end: batch-128
 * forwards 9-19% slower) */
int gpu_matmul_fixed_segments(int in, int out, int *kseg)
{
	int kb = CEIL_DIV(in, MF_KB), tiles = CEIL_DIV(out, 8);
	int n = CEIL_DIV(MF_WARPS_WANT, tiles);

	n = n > MF_SEGMAX ? MF_SEGMAX : n < 1 ? 1 : n;
	n = n > kb ? kb : n;
	int per = CEIL_DIV(kb, n);
	per += per & 1 && per < kb;             /* 64-input multiples: the tiled kernels' stages */
	*kseg = per * MF_KB;
	return CEIL_DIV(kb, per);
}

static int mf_tc_ok(const float *x, const void *w, enum dice_dtype wdt, int in)
{
	return (wdt == DICE_BF16 || wdt == DICE_F16) && in % 8 == 0 &&
	       (((uintptr_t)x | (uintptr_t)w) & 15) == 0;
}

typedef void (*mft_fn)(float *, float *, const void *, const void *, int, int, int, int);

/* the tile shapes (none changes the order of any output's sums); rate: its speed relative to
 * the fastest on large shapes, measured on an H100 (bench/NOTES-device.md), for mf_cost */
static struct mf_variant {
	const char *name;
	mft_fn fn[2];                           /* bf16, fp16 */
	int bm, bn, threads, smem, kb;          /* kb: 32-input blocks a stage */
	double rate;
	int occ;                                /* blocks per SM (0: not asked yet) */
} mf_var[] = {
#define MFV(name, WM, WN, TM, TN, S, KB, rate) \
	{ name, { mft_kernel<WM, WN, TM, TN, S, KB, 0>, mft_kernel<WM, WN, TM, TN, S, KB, 1> }, \
	  16 * WM * TM, 8 * WN * TN, 32 * WM * WN, S * mft<WM, WN, TM, TN, S, KB>::STAGE, KB, rate, 0 }
	MFV("128x128 w4 64x64 s4", 2, 2, 4, 8, 4, 1, 0.85),
	MFV("128x128 w4 64x64 s3 k64", 2, 2, 4, 8, 3, 2, 0.85),
	MFV("256x128 w8 64x64 s4", 4, 2, 4, 8, 4, 1, 0.83),
	MFV("256x128 w8 64x64 s3 k64", 4, 2, 4, 8, 3, 2, 0.80),
	MFV("128x128 w8 64x32 s4", 2, 4, 4, 4, 4, 1, 1.00),
	MFV("128x64 w4 64x32 s4", 2, 2, 4, 4, 4, 1, 0.90),
	MFV("64x128 w4 32x64 s4", 2, 2, 2, 8, 4, 1, 0.85),
	MFV("64x128 w4 32x64 s3 k64", 2, 2, 2, 8, 3, 2, 0.83),
	MFV("64x64 w4 32x32 s4", 2, 2, 2, 4, 4, 1, 0.78),
#undef MFV
};
#define MF_NVAR ((int)(sizeof mf_var / sizeof mf_var[0]))

static int mf_occupancy(struct mf_variant *v)
{
	if (!v->occ) {
		for (int f = 0; f < 2; f++) {
			CUDA_CHECK(cudaFuncSetAttribute(v->fn[f], cudaFuncAttributeMaxDynamicSharedMemorySize,
			                                v->smem));
			CUDA_CHECK(cudaFuncSetAttribute(v->fn[f],
			                                cudaFuncAttributePreferredSharedMemoryCarveout,
			                                cudaSharedmemCarveoutMaxShared));
		}
		CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v->occ, v->fn[0], v->threads,
		                                                         v->smem));
		if (v->occ < 1)
			v->occ = 1;
	}
	return v->occ;
}

/* the estimated time (cycles) of variant v, split or not: the most tiles one SM gets, each
 * BM x BN x its inputs at the variant's rate (measured on an H100, bench/NOTES-device.md;
 * about half with only 4 warps on the SM), plus the passes over y: the read-add-writes of the
 * later segments (unsplit, mostly in L2) or the partials and the reduce (split). */
static double mf_cost(struct mf_variant *v, int split, int N, int in, int out, int nseg,
                      int kseg)
{
	int sms = gpu_sm_count(), occ = mf_occupancy(v);
	long tiles = (long)CEIL_DIV(N, v->bm) * CEIL_DIV(out, v->bn) * (split ? nseg : 1);
	long per = CEIL_DIV(tiles, (long)sms);
	long res = per < occ ? per : occ;
	double rate = 1100.0 * v->rate * (res * v->threads >= 256 ? 1.0 : 0.55);
	double t = per * 2.0 * v->bm * v->bn * (split ? kseg : in) / rate;
	double bytes_clk = 1500.0;              /* device memory, all SMs, per cycle */
	double y = (double)N * out * 4;
	if (split)
		t += (2.0 * nseg + 1) * y / bytes_clk + 4000;
	else
		t += 2.0 * (nseg - 1) * y / (3 * bytes_clk);
	return t;
}

/* whether variant v may walk the segments of kseg inputs (its stages must not straddle them) */
static int mf_walks(const struct mf_variant *v, int nseg, int kseg)
{
	return nseg == 1 || kseg / MF_KB % v->kb == 0;
}

/* the variant and split the tiled path takes for this shape */
int gpu_matmul_fixed_choice(int N, int in, int out, int *split)
{
	int kseg, nseg = gpu_matmul_fixed_segments(in, out, &kseg), v = -1;
	double best = 0;
	*split = 0;
	for (int i = 0; i < MF_NVAR; i++) {
		for (int s = !mf_walks(&mf_var[i], nseg, kseg); s <= (nseg > 1); s++) {
			double c = mf_cost(&mf_var[i], s, N, in, out, nseg, kseg);
			if (v < 0 || c < best)
				best = c, v = i, *split = s;
		}
	}
	/* the wgmma kernels (variants MF_NVAR ..: matmul_wgmma.cu), on Hopper where cheaper */
	int wg = gpu_matmul_wgmma_ok() && gpu_matmul_wgmma_walks(in, kseg);
	for (int i = 0; wg && i < gpu_matmul_wgmma_variants(); i++) {
		double c = gpu_matmul_wgmma_cost(i, N, in, out, nseg);
		if (c < best)
			best = c, v = MF_NVAR + i, *split = 0;
	}
	return v;
}

/* the tiled kernel: variant v (-1: the cheapest by mf_cost, and its split); split where the
 * variant may not walk the segments; glu: x is (N, 2 in) = [gate | up] and the product's
 * input silu(gate) * up, computed where x is converted to 16 bits */
static int mf_tiled(cudaStream_t st, float *y, const float *x, const void *w, int f16, int N,
                    int in, int out, int v, int split, int glu)
{
	int kseg, nseg = gpu_matmul_fixed_segments(in, out, &kseg);

	if (v >= MF_NVAR && !(gpu_matmul_wgmma_ok() && gpu_matmul_wgmma_walks(in, kseg)))
		v = -1;                         /* no wgmma here: the mma.sync kernel */
	if (v < 0)
		v = gpu_matmul_fixed_choice(N, in, out, &split);
	if (v >= MF_NVAR)
		return gpu_matmul_wgmma(st, y, x, w, f16, N, in, out, kseg, v - MF_NVAR, glu);
	struct mf_variant *vr = &mf_var[v];
	split = nseg > 1 && (split > 0 || !mf_walks(vr, nseg, kseg));
	mf_occupancy(vr);
	int nkb = CEIL_DIV(in, MF_KB);
	size_t nq = (size_t)CEIL_DIV(N, 16) * nkb * 64, xbytes = nq * 16;
	size_t pn = split ? (size_t)nseg * N * out : 0;
	char *s = (char *)gpu_scratch(xbytes + pn * sizeof(float));
	float *part = (float *)(s + xbytes);
	int cg = (int)(CEIL_DIV(nq, (size_t)256) < 4096 ? CEIL_DIV(nq, (size_t)256) : 4096);
	mf_quad_kernel<<<cg, 256, 0, st>>>((uint4 *)s, x, N, in, nkb, nq, f16, glu);
	CUDA_CHECK_LAUNCH();
	dim3 grid(CEIL_DIV(N, vr->bm) * CEIL_DIV(out, vr->bn), split ? nseg : 1);
	vr->fn[f16]<<<grid, vr->threads, vr->smem, st>>>(y, part, s, w, N, in, out, kseg);
	CUDA_CHECK_LAUNCH();
	if (split) {
		size_t n = (size_t)N * out;
		int rg = (int)(CEIL_DIV(n, (size_t)256) < 8192 ? CEIL_DIV(n, (size_t)256) : 8192);
		mf_reduce_kernel<<<rg, 256, 0, st>>>(y, part, n, nseg);
		CUDA_CHECK_LAUNCH();
	}
	return 0;
}

/* the mma.sync tile shapes, then the wgmma ones where they run (gpu_matmul_wgmma_ok) */
int gpu_matmul_fixed_variants(void)
{
	return MF_NVAR + (gpu_matmul_wgmma_ok() ? gpu_matmul_wgmma_variants() : 0);
}

const char *gpu_matmul_fixed_variant_name(int v)
{
	return v >= 0 && v < MF_NVAR ? mf_var[v].name :
	       v >= MF_NVAR && v < gpu_matmul_fixed_variants() ?
	       gpu_matmul_wgmma_variant_name(v - MF_NVAR) : "auto";
}


/* kernel: 1 streaming, 2 tiled (16-bit weights, in % 8 == 0, 16-byte aligned x and w); x16
 * (or NULL): x rounded to wdt, read instead of x by the streaming kernel of up to 8 rows */
int gpu_matmul_fixed_path16(cudaStream_t st, float *y, const float *x, const void *x16,
                            const void *w, enum dice_dtype wdt, int N, int in, int out,
                            int kernel)
{
	GPU_REQUIRE(N >= 1 && in > 0 && out > 0 && kernel >= 1 && kernel <= 4, "matmul_fixed");
	GPU_REQUIRE(mf_tc_ok(x, w, wdt, in), "matmul_fixed");
	if (kernel == 2)
		return mf_tiled(st, y, x, w, wdt == DICE_F16, N, in, out, -1, 0, 0);
	int kseg, nseg = gpu_matmul_fixed_segments(in, out, &kseg), f16 = wdt == DICE_F16;
	int mfx = gpu_switch(&mfx_on, "DICE_MFX");
	const void *pw = N <= MF_SMALL_M ? mf_packed(w, out, in) : NULL;
	int pk = pw != NULL;
	if (pk)                                 /* the packed copy (the same bits) */
		w = pw;
	for (int one = 0; one < 2; one++)       /* two steps' weights in flight, else one */
		if ((kernel == 3 + one || (kernel == 1 && mfx)) &&
		    mfx_launch(st, y, x, w, f16, N, in, out, kseg, nseg, kernel > 1, one, NULL, pk) == 0)
			return 0;
	GPU_REQUIRE(kernel < 3, "matmul_fixed (staged kernel)");
	static const void *const fns[2][3] = {
		{ (const void *)mfs_kernel8<0>, (const void *)mfs_kernel16<0>,
		  (const void *)mfs_kernel32<0> },
		{ (const void *)mfs_kernel8<1>, (const void *)mfs_kernel16<1>,
		  (const void *)mfs_kernel32<1> } };
	if (x16 && N <= 8 && !((uintptr_t)x16 & 15)) {
		void *args[] = { &y, &x16, &w, &f16, &N, &in, &out, &kseg };
		gpu_launch(pk ? (const void *)mfs_kernel8_x16<1> : (const void *)mfs_kernel8_x16<0>,
		           dim3(CEIL_DIV(out, 8)), dim3(32 * nseg), 0, st, args);
		return 0;
	}
	for (int r0 = 0; r0 < N; r0 += MF_SMALL_M) {
		int m = N - r0 < MF_SMALL_M ? N - r0 : MF_SMALL_M;
		const float *xr = x + (size_t)r0 * in;
		float *yr = y + (size_t)r0 * out;
		void *args[] = { &yr, &xr, &w, &f16, &m, &in, &out, &kseg };
		gpu_launch(fns[pk][m <= 8 ? 0 : m <= 16 ? 1 : 2], dim3(CEIL_DIV(out, 8)), dim3(32 * nseg),
		           0, st, args);
	}
	return 0;
}

int gpu_matmul_fixed_path(cudaStream_t st, float *y, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int in, int out, int kernel)
{
	return gpu_matmul_fixed_path16(st, y, x, NULL, w, wdt, N, in, out, kernel);
}

int gpu_matmul_fixed_tiled(cudaStream_t st, float *y, const float *x, const void *w,
                           enum dice_dtype wdt, int N, int in, int out, int variant, int split)
{
	GPU_REQUIRE(N >= 1 && in > 0 && out > 0 && variant >= -1 &&
	            variant < gpu_matmul_fixed_variants(), "matmul_fixed");
	GPU_REQUIRE(mf_tc_ok(x, w, wdt, in), "matmul_fixed");
	return mf_tiled(st, y, x, w, wdt == DICE_F16, N, in, out, variant, split, 0);
}

/* y = swiglu_cat(gu) @ w^T, the same bits as gpu_swiglu_cat into h, then gpu_matmul_fixed: the
 * tiled path computes silu(gate) * up where it converts its input to 16 bits (h untouched);
 * the other paths (up to MF_SMALL_M rows, fp32 weights, unaligned) take the two steps */
int gpu_matmul_fixed_glu(cudaStream_t st, float *y, float *h, const float *gu, const void *w,
                         enum dice_dtype wdt, int N, int I, int out, int variant)
{
	GPU_REQUIRE(N >= 1 && I > 0 && out > 0 && variant >= -1 &&
	            variant < gpu_matmul_fixed_variants(), "matmul_fixed_glu");
	if (variant < 0 && (N <= MF_SMALL_M || !mf_tc_ok(gu, w, wdt, I))) {
		int rc = gpu_swiglu_cat(st, h, gu, N, I);
		return rc ? rc : gpu_matmul_fixed(st, y, h, w, wdt, N, I, out);
	}
	GPU_REQUIRE(mf_tc_ok(gu, w, wdt, I), "matmul_fixed_glu");
	return mf_tiled(st, y, gu, w, wdt == DICE_F16, N, I, out, variant, 0, 1);
}

/* whether gpu_matmul_fixed_gu pairs gate and up tiles (DICE_MFX_GU; -1: not read yet) */
static int mfg_on = -1;

/* gu = x @ w^T for w = [gate | up] (2 I outputs), and h = swiglu_cat(gu) in the same launch
 * where it takes up to 8 rows: the staged kernel where the product takes it, else the
 * streaming one, a gate and an up tile a block (1); else gu alone (gpu_matmul_fixed: 0); -1
 * bad arguments. kernel: 1 as the engine calls it; tests: 2 the streaming pairs forced, 3 / 4
 * the staged kernel's (-2 where that kernel does not take the shape, nothing launched) */
int gpu_matmul_fixed_gu16(cudaStream_t st, float *gu, float *h, void *h16, const float *x,
                          const void *x16, const void *w, enum dice_dtype wdt, int N, int in,
                          int I, int kernel)
{
	GPU_REQUIRE(N >= 1 && in > 0 && I > 0 && kernel >= 1 && kernel <= 4, "matmul_fixed_gu");
	if (h && N <= 8 && I % 8 == 0 && mf_tc_ok(x, w, wdt, in) &&
	    (kernel > 1 || gpu_switch(&mfg_on, "DICE_MFX_GU"))) {
		int kseg, nseg = gpu_matmul_fixed_segments(in, 2 * I, &kseg), rc = -1;
		int f16 = wdt == DICE_F16, out = 2 * I, np = I / 8;
		const void *pw = mf_packed(w, out, in), *wk = pw ? pw : w;
		int pk = pw != NULL;
		/* the staged kernel's pairs: as the engine's product tries the staged kernel (kernel
		 * 1, DICE_MFX on: two steps in flight, then one), or at the depth forced (3: two, 4:
		 * one); none for kernel 2 */
		for (int one = kernel == 4; one < 2 && rc == -1 && kernel != 2 &&
		     (kernel == 1 ? gpu_switch(&mfx_on, "DICE_MFX") : one == kernel - 3); one++)
			rc = mfx_launch(st, gu, x, wk, f16, N, in, out, kseg, nseg, kernel > 2, one, h, pk,
			                h16);
		if (rc == 0)
			return 1;
		if (kernel > 2)
			return -2;
		/* the streaming kernel, a gate and an up tile a block, where twice the segments' warps
		 * fit a block at its registers (7 segments or more do not) */
		static int fit[MF_SEGMAX + 1];
		if (rc == -1 && !fit[nseg]) {
			int n = 0, n16 = 0;
			CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, mfs_kernel8_gu<0, 0>,
			                                                         64 * nseg, 0));
			CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n16, mfs_kernel8_gu<0, 1>,
			                                                         64 * nseg, 0));
			fit[nseg] = n > 0 && n16 > 0 ? 1 : -1;
		}
		if (rc == -1 && fit[nseg] > 0) {
			/* [pk][x16] */
			static const void *const gfn[2][2] = {
				{ (const void *)mfs_kernel8_gu<0, 0>, (const void *)mfs_kernel8_gu<0, 1> },
				{ (const void *)mfs_kernel8_gu<1, 0>, (const void *)mfs_kernel8_gu<1, 1> } };
			int x16ok = x16 && !((uintptr_t)x16 & 15);
			void *args[] = { &gu, &x, &wk, &f16, &N, &in, &out, &kseg, &h, &np, &x16, &h16 };
			gpu_launch(gfn[pk][x16ok], dim3(np), dim3(64 * nseg), 0, st, args);
			return 1;
		}
		if (kernel == 2)
			return -2;
	}
	GPU_REQUIRE(kernel == 1, "matmul_fixed_gu (staged kernel)");
	return gpu_matmul_fixed(st, gu, x, w, wdt, N, in, 2 * I) ? -1 : 0;
}

int gpu_matmul_fixed_gu(cudaStream_t st, float *gu, float *h, const float *x, const void *w,
                        enum dice_dtype wdt, int N, int in, int I, int kernel)
{
	return gpu_matmul_fixed_gu16(st, gu, h, NULL, x, NULL, w, wdt, N, in, I, kernel);
}

int gpu_matmul_fixed16(cudaStream_t st, float *y, const float *x, const void *x16, const void *w,
                       enum dice_dtype wdt, int N, int in, int out)
{
	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul_fixed");
	GPU_REQUIRE(wdt == DICE_F32 || wdt == DICE_BF16 || wdt == DICE_F16, "matmul_fixed dtype");
	if (mf_tc_ok(x, w, wdt, in))
		return gpu_matmul_fixed_path16(st, y, x, x16, w, wdt, N, in, out,
		                               N <= MF_SMALL_M ? 1 : 2);
	if (wdt == DICE_F32 && in % 4 == 0 && (((uintptr_t)x | (uintptr_t)w) & 15) == 0)
		return gpu_matmul_gemv_rows(st, y, x, w, wdt, N, in, out);
	size_t total = (size_t)N * out;
	int grid = (int)(CEIL_DIV(total, (size_t)256) < 65536 ? CEIL_DIV(total, (size_t)256) : 65536);
	mf_plain_kernel<<<grid, 256, 0, st>>>(y, x, w, (int)wdt, N, in, out);
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_matmul_fixed(cudaStream_t st, float *y, const float *x, const void *w,
                     enum dice_dtype wdt, int N, int in, int out)
{
	return gpu_matmul_fixed16(st, y, x, NULL, w, wdt, N, in, out);
}
