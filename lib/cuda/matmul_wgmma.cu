/* matmul_wgmma.cu: matmul_fixed's tiled path on Hopper's warpgroup products (wgmma, built for
 * sm_90a only, run only on a compute-capability-9.0 device): the same function and the same
 * bits as mft_kernel in matmul_fixed.cu, whose header gives the order of the sums.
 * bench/wgmma-probe.cu showed (H100, bench/NOTES-device.md) that a wgmma k16 step fed the
 * same 16 inputs at the same positions gives the bits of an mma.sync m16n8k16 step, whatever
 * N, the operand sources or the row's place. The product runs swapped, y^T = w x^T: A = w
 * from registers (the m16n8k16 A fragment of 16 outputs: two 16-byte loads of a 32-input
 * block are mf_step's operands of both steps), B = x from shared memory, converted beforehand
 * to 16 bits with each 32-input block in the two steps' order (wg_xperm_kernel), so that k16
 * step h of block b reads positions 32b + 16h .. + 15 in order. A block holds WG warpgroups
 * of 64 outputs each by BN rows, walks all the inputs and ends each segment as mft_kernel
 * does: y = its sum (the first) or y + its sum. Two kernels: mw_kernel (every thread copies
 * with cp.async, each stage's products waited for before the next) and mx_kernel (TMA
 * copies from a producer warp into an mbarrier ring of stages, two consumer warpgroups with
 * one stage of products in flight, persistent blocks, the segments' sums kept in registers:
 * ((s0 + s1) + s2) ... as mft_kernel adds them into y, with one write of y at the end; or,
 * split, one block a (tile, segment) pair, each segment's sum written apart and added in that
 * order by the tile's last block: shapes of few tiles fill the GPU). */
#include "common.cuh"
#include "wgmma.cuh"

#define MW_KB 32                /* inputs a block of two k16 steps */

/* x (N, K) fp32 (glu: silu(gate) * up of x (N, 2K) = [gate | up], gpu_x2) -> xp (N, Kp = 32 nkb)
 * 16-bit, each 32-input block in matmul_fixed's order:
 * position 16h + j of block b holds input 32b + 8 (j % 8 / 2) + 4h + 2 (j / 8) + j % 2
 * (quad thread q's inputs 8q + 4h + 0, 1 at 2q, 2q + 1 and 8q + 4h + 2, 3 at 2q + 8, + 9);
 * zeros past K. Thread i: the 16 bytes of positions 8c .. 8c + 7 (c = i % (Kp / 8)). */
static __global__ void wg_xperm_kernel(uint4 *xp, const float *x, int N, int K, int Kp,
                                       size_t n16, int f16, int glu)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16;
	     i += (size_t)gridDim.x * blockDim.x) {
		int row = (int)(i / (Kp / 8)), c = (int)(i % (Kp / 8));
		int k0 = (c >> 2) * MW_KB + 4 * ((c >> 1) & 1) + 2 * (c & 1);
		unsigned p[4];
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int k = k0 + 8 * e;
			float2 v = make_float2(0.0f, 0.0f);
			if (k < K)
				v = gpu_x2(x, (size_t)row, K, k, glu);
			p[e] = gpu_pack2(v.x, v.y, f16);
		}
		xp[i] = make_uint4(p[0], p[1], p[2], p[3]);
	}
}

/* 16 bytes global -> shared, asynchronously; zeros when !valid (src is not read then) */
static __device__ __forceinline__ void mw_cp16(void *dst, const void *src, int valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
	             :: "r"(s), "l"(src), "r"(valid ? 16 : 0));
}

/* A stage: 2 blocks of 32 inputs; first w, block b's BM rows of 64 bytes at b BM 64 (a warp's
 * fragment loads cover 512 contiguous bytes), then x, BN rows of 128 bytes (the stage's 64
 * positions), 128-byte swizzled (16-byte chunk c of row r at c ^ r % 8), 1024-aligned. */
template <int WG, int BN, int STAGES>
struct mw {
	enum { BM = 64 * WG, T = 128 * WG, WBYTES = BM * 128, STAGE = WBYTES + BN * 128,
	       SMEM = STAGES * STAGE + 1024 };
};

/* one segment's end: y = acc (first) or y + acc, for this thread's outputs o, o + 8 and rows
 * n0 + 8j + 2q, + 1. The base and the bounds pass through an opaque move, so that the
 * compiler computes the addresses here rather than holding all of them through the loop. */
template <int BN>
static __device__ __forceinline__ void mw_flush(float *y, const float *d, int o, int n0, int q,
                                                int N, int out, int flushed)
{
	float *yb;
	int rows, outs;
	asm volatile("mov.b64 %0, %1;\n" : "=l"(yb) : "l"(y + (size_t)(n0 + 2 * q) * out + o));
	asm volatile("mov.b32 %0, %1;\n" : "=r"(rows) : "r"(N - n0 - 2 * q));
	asm volatile("mov.b32 %0, %1;\n" : "=r"(outs) : "r"(out - o));
#pragma unroll
	for (int j = 0; j < BN / 8; j++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = 8 * j + (e & 1), c = 8 * (e >> 1);
			if (r < rows && c < outs) {
				float *p = yb + (size_t)r * out + c;
				*p = flushed ? *p + d[4 * j + e] : d[4 * j + e];
			}
		}
	}
}

/* 16 bytes of shared memory at address a (a shared-window load, not a generic one) */
static __device__ __forceinline__ uint4 mw_lds16(unsigned a)
{
	uint4 r;
	asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
	             : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a) : "memory");
	return r;
}

/* one stage's products, issued and committed (not waited for): w's blocks 2s, 2s + 1 (BM
 * rows of 64 bytes each at st) from registers, this thread's rows orow, orow + 8, times x's
 * 64 positions (BN swizzled rows of 128 bytes after w's blocks); the second block only if
 * two (GUARD: under a guard predicate, else a branch); acc 0: the first product ignores
 * what d holds (a segment's start). Step h of block b: w inputs 8q + 4h .. + 3 (a
 * fragment's registers x, y or z, w of the 16-byte loads), x positions 32b + 16h .. + 15. */
template <int BN, int F16, int GUARD>
static __device__ __forceinline__ void mw_stage(float *d, const char *st, int BM, int orow,
                                                int q, int two, int acc)
{
	uint4 u[2], v[2];
	unsigned sa = (unsigned)__cvta_generic_to_shared(st) + orow * 64 + q * 16;
#pragma unroll
	for (int b = 0; b < 2; b++) {
		u[b] = mw_lds16(sa + b * BM * 64);
		v[b] = mw_lds16(sa + b * BM * 64 + 8 * 64);
	}
	const char *xs = st + BM * 128;
	wg_fence();
	wg_op<BN>::rs(d, make_uint4(u[0].x, v[0].x, u[0].y, v[0].y), wg_desc(xs, 16, 1024, 1), acc,
	              F16);
	wg_op<BN>::rs(d, make_uint4(u[0].z, v[0].z, u[0].w, v[0].w), wg_desc(xs + 32, 16, 1024, 1),
	              1, F16);
	if (GUARD) {
		wg_op<BN>::rs_if(d, make_uint4(u[1].x, v[1].x, u[1].y, v[1].y),
		                 wg_desc(xs + 64, 16, 1024, 1), 1, F16, two);
		wg_op<BN>::rs_if(d, make_uint4(u[1].z, v[1].z, u[1].w, v[1].w),
		                 wg_desc(xs + 96, 16, 1024, 1), 1, F16, two);
	} else if (two) {
		wg_op<BN>::rs(d, make_uint4(u[1].x, v[1].x, u[1].y, v[1].y),
		              wg_desc(xs + 64, 16, 1024, 1), 1, F16);
		wg_op<BN>::rs(d, make_uint4(u[1].z, v[1].z, u[1].w, v[1].w),
		              wg_desc(xs + 96, 16, 1024, 1), 1, F16);
	}
	wg_commit();
}

template <int WG, int BN, int STAGES, int MINB, int F16>
static __global__ void __launch_bounds__(128 * WG, MINB)
mw_kernel(float *y, const void *xp, const void *w, int N, int K, int out, int kseg)
{
	typedef mw<WG, BN, STAGES> P;
	extern __shared__ uint4 mw_smem[];
	char *sm = (char *)(((uintptr_t)mw_smem + 1023) & ~(uintptr_t)1023);
	const char *xc = (const char *)xp, *wc = (const char *)w;
	int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, q = lane & 3;
	int nkb = CEIL_DIV(K, MW_KB), Kp = nkb * MW_KB, ntr = CEIL_DIV(N, BN);
	int n0 = blockIdx.x % ntr * BN, o0 = blockIdx.x / ntr * P::BM;
	int nst = CEIL_DIV(nkb, 2), segb = kseg / MW_KB;
	int orow = 16 * wid + g, flushed = 0;
	float d[BN / 2];

	/* slot <- the stage of blocks 2s, 2s + 1. Thread tid copies rows tid / 8 + u T / 8: of w
	 * block (tid / 4) % 2, inputs 8 (tid % 4) ..; of x 16-byte chunk tid % 8 (the same chunk
	 * of the swizzle in every row it copies); zeros past out, N and K */
	int lr = tid >> 3, wb = (tid >> 2) & 1, wq = tid & 3, xc8 = tid & 7;
	const char *wsrc = wc + ((size_t)min(o0 + lr, out - 1) * K + wb * MW_KB + 8 * wq) * 2;
	const char *xsrc = xc + ((size_t)min(n0 + lr, N - 1) * Kp + 8 * xc8) * 2;
	unsigned wdst = wb * P::BM * 64 + lr * 64 + wq * 16;
	unsigned xdst = P::WBYTES + lr * 128 + ((xc8 ^ (lr & 7)) << 4);
	int wrows = out - o0 - lr, xrows = N - n0 - lr;
	auto load = [&](int slot, int s) {
		char *st = sm + slot * P::STAGE;
		int kb = 2 * s, wk = (kb + wb) * MW_KB + 8 * wq < K, xk = kb + (xc8 >> 2) < nkb;
#pragma unroll
		for (int u = 0; u < P::BM * 8 / P::T; u++) {
			int ok = u * (P::T / 8) < wrows && wk;
			mw_cp16(st + wdst + u * (P::T / 8) * 64,
			        ok ? wsrc + ((size_t)u * (P::T / 8) * K + kb * MW_KB) * 2 : wc, ok);
		}
#pragma unroll
		for (int u = 0; u < BN * 8 / P::T; u++) {
			int ok = u * (P::T / 8) < xrows && xk;
			mw_cp16(st + xdst + u * (P::T / 8) * 128,
			        ok ? xsrc + ((size_t)u * (P::T / 8) * Kp + kb * MW_KB) * 2 : xc, ok);
		}
	};

#pragma unroll
	for (int i = 0; i < BN / 2; i++)
		d[i] = 0.0f;
#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nst)
			load(s, s);
		asm volatile("cp.async.commit_group;\n" ::);
	}
	int cs = 0, ls = STAGES - 1;
	for (int s = 0; s < nst; s++) {
		asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
		__syncthreads();
		if (s + STAGES - 1 < nst)
			load(ls, s + STAGES - 1);
		asm volatile("cp.async.commit_group;\n" ::);
		ls = ls + 1 == STAGES ? 0 : ls + 1;
		const char *st = sm + cs * P::STAGE;
		cs = cs + 1 == STAGES ? 0 : cs + 1;
		/* segments end at stage ends (an even number of blocks a segment, or one segment) */
		int kb = 2 * s, end = (kb + 2) % segb == 0 || kb + 2 >= nkb;
		mw_stage<BN, F16, 0>(d, st, P::BM, orow, q, kb + 1 < nkb, 1);
		wg_wait<0>();
		if (end) {
			mw_flush<BN>(y, d, o0 + orow, n0, q, N, out, flushed);
			flushed = 1;
#pragma unroll
			for (int i = 0; i < BN / 2; i++)
				d[i] = 0.0f;
		}
	}
	asm volatile("cp.async.wait_group 0;\n" ::);
}

/* The TMA kernel: persistent blocks (at most one per tile slot of the GPU) walk the work
 * units u = blockIdx.x, + gridDim.x, ...: the tiles (row tile fastest, as mw_kernel's blocks)
 * or, SPLIT, the (tile, segment) pairs (u = tile nseg + segment: a tile's segments run side
 * by side); warpgroup 0 is the producer (one thread: per stage, the bulk tensor copies of w's
 * two 32-input blocks and of x's 64 positions into the next free slot of STAGES, completing
 * on that slot's "full" barrier), warpgroups 1 .. WG the consumers (64 outputs each, by BN
 * rows): each waits for a slot, issues its products (mw_stage), then waits for the stage
 * before (one stage of products in flight while the next is issued) and frees that one's
 * slot (its "empty" barrier, one arrival a consumer warp). The inputs, stages and segments
 * are walked as in mw_kernel; at a segment's end the sum goes, with SR, into registers (tot
 * = s0, then tot + s1, ...: y's sums in the same order, no pass over y) and only the tile's
 * last segment writes y (tot + its sum); without SR (BN 256: too many registers) y = its sum
 * or y + its sum as in mw_kernel. SPLIT (mx_split_end): each segment's sum goes to part, and
 * the warp that finishes a tile's last segment (a counter a tile and warp) adds the tile's
 * sums in segment order, ((s0 + s1) + s2) ..., and writes y. The tensor maps: tw over w (K,
 * out), boxes of 32 inputs by BM rows (rows of 64 bytes, mw_kernel's layout); tx over the
 * converted x (Kp, N), boxes of 64 positions by BN rows, 128-byte swizzle. The copies give
 * zeros past K, out and N. */
template <int WG, int BN, int STAGES>
struct mx {
	enum { BM = 64 * WG, T = 128 * (WG + 1), STAGE = BM * 128 + BN * 128,
	       SMEM = STAGES * STAGE + 1024 + 16 * STAGES };
};

/* the split counters: one a tile and consumer warp, zero between launches (the last arrival
 * puts its counter back to zero); MX_CNT of them, so SPLIT runs up to MX_CNT / (4 WG) tiles */
#define MX_CNT 65536
static __device__ unsigned mx_cnt[MX_CNT];

/* SPLIT, a segment's end: this warp's sums d (segment sg of nseg, unit u = tile t) into part
 * (float4 i of thread ct at ((u BN / 8 + i) threads + ct)), then the warp's arrival on the
 * tile's counter; the last warp to arrive (its stores and theirs ordered by the fences)
 * reads all the sums back, a segment's BN / 8 loads at once, and leaves ((s0 + s1) + s2) ...
 * in d; returns whether it did (it writes y then). (The first version read segment by
 * segment for each float4, one load in flight: 2x slower than unsplit, NOTES-device.md.) */
template <int BN>
static __device__ __forceinline__ int mx_split_end(float *d, float *part, int t, int sg,
                                                   int nseg, int ct, int threads, int cnt)
{
	float4 *pp = (float4 *)part + (size_t)t * nseg * (BN / 8) * threads + ct;
	size_t ps = (size_t)(BN / 8) * threads;            /* float4s a segment */
#pragma unroll
	for (int i = 0; i < BN / 8; i++)
		__stcg(pp + sg * ps + (size_t)i * threads,
		       make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
	__threadfence();
	__syncwarp();
	unsigned old = 0;
	if ((ct & 31) == 0) {
		old = atomicAdd(&mx_cnt[cnt], 1u);
		if (old == (unsigned)nseg - 1)
			mx_cnt[cnt] = 0;                /* for the next launch */
	}
	old = __shfl_sync(0xffffffffu, old, 0);
	if (old != (unsigned)nseg - 1)
		return 0;
	__threadfence();
#pragma unroll
	for (int i = 0; i < BN / 8; i++) {
		float4 a = __ldcg(pp + (size_t)i * threads);
		d[4 * i] = a.x;
		d[4 * i + 1] = a.y;
		d[4 * i + 2] = a.z;
		d[4 * i + 3] = a.w;
	}
	for (int s = 1; s < nseg; s++) {
		float4 b[BN / 8];
#pragma unroll
		for (int i = 0; i < BN / 8; i++)
			b[i] = __ldcg(pp + s * ps + (size_t)i * threads);
#pragma unroll
		for (int i = 0; i < BN / 8; i++) {
			d[4 * i] = __fadd_rn(d[4 * i], b[i].x);
			d[4 * i + 1] = __fadd_rn(d[4 * i + 1], b[i].y);
			d[4 * i + 2] = __fadd_rn(d[4 * i + 2], b[i].z);
			d[4 * i + 3] = __fadd_rn(d[4 * i + 3], b[i].w);
		}
	}
	return 1;
}

template <int WG, int BN, int STAGES, int MINB, int SR, int SPLIT, int F16>
static __global__ void __launch_bounds__(128 * (WG + 1), MINB)
mx_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
          float *y, float *part, int N, int K, int out, int kseg)
{
	typedef mx<WG, BN, STAGES> P;
	/* registers a thread: the block holds T x ENTRY (the launch bounds' cap, which ptxas
	 * allocates in full with setmaxnreg; 168 for 384 threads, 128 for 256 threads and 2
	 * blocks) and setmaxnreg only moves them between its warpgroups: the producer keeps
	 * PREG, the consumers get the rest, at most 232. (A setmaxnreg.inc asking for more than
	 * the block holds waits for ever; a 4-consumer variant whose sum counted the SM's free
	 * registers too hung at its first launch on an H100, most likely so: NOTES-device.md.) */
	const int PREG = 40, ENTRY = 65536 / (P::T * MINB) / 8 * 8;
	const int CREG0 = (P::T * ENTRY - 128 * PREG) / (128 * WG) / 8 * 8;
	const int CREG = CREG0 > 232 ? 232 : CREG0;
	extern __shared__ uint4 mw_smem[];
	char *sm = (char *)(((uintptr_t)mw_smem + 1023) & ~(uintptr_t)1023);
	uint64_t *full = (uint64_t *)(sm + STAGES * P::STAGE), *empty = full + STAGES;
	int nkb = CEIL_DIV(K, MW_KB), nst = CEIL_DIV(nkb, 2), segb = kseg / MW_KB;
	int ntr = CEIL_DIV(N, BN), ntiles = ntr * CEIL_DIV(out, P::BM);
	/* stages a segment: a segment ends where a stage ends (an even number of blocks a
	 * segment, or one segment); SPLIT: segments, each a unit of its own (segb is even where
	 * there are several, so that a unit's stages are the segment's) */
	int sst = segb % 2 == 0 && segb / 2 < nst ? segb / 2 : nst;
	int nseg = SPLIT ? CEIL_DIV(nkb, segb) : 1, segst = nseg > 1 ? sst : nst;
	int units = ntiles * nseg;

	if (threadIdx.x == 0) {
		for (int i = 0; i < STAGES; i++) {
			mb_init(&full[i], 1);
			mb_init(&empty[i], 4 * WG);
		}
		mb_fence_init();
	}
	__syncthreads();
	if (threadIdx.x < 128) {
		wg_setmaxnreg_dec<PREG>();
		if (threadIdx.x)
			return;
		tma_prefetch_map(&tw);
		tma_prefetch_map(&tx);
		int slot = 0;
		unsigned ph = 0;
		for (int u = blockIdx.x; u < units; u += gridDim.x) {
			int t = u / nseg, sg = u % nseg;
			int n0 = t % ntr * BN, o0 = t / ntr * P::BM;
			int s1 = min(nst, (sg + 1) * segst);
			for (int s = sg * segst; s < s1; s++) {
				char *st = sm + slot * P::STAGE;
				int two = 2 * s + 1 < nkb;      /* else w's second block is past K: not copied */
				mb_wait(&empty[slot], ph ^ 1);
				mb_expect(&full[slot], P::STAGE - (two ? 0 : P::BM * 64));
				tma_load2(st, &tw, 2 * s * MW_KB, o0, &full[slot]);
				if (two)
					tma_load2(st + P::BM * 64, &tw, (2 * s + 1) * MW_KB, o0, &full[slot]);
				tma_load2(st + P::BM * 128, &tx, 2 * s * MW_KB, n0, &full[slot]);
				if (++slot == STAGES)
					slot = 0, ph ^= 1;
			}
		}
		return;
	}
	wg_setmaxnreg_inc<CREG>();
	int ct = threadIdx.x - 128, lane = ct & 31, g = lane >> 2, q = lane & 3;
	int orow = 16 * (ct >> 5) + g;
	float d[BN / 2], tot[SR && !SPLIT ? BN / 2 : 1];
	int slot = 0;
	unsigned ph = 0;
	for (int u = blockIdx.x; u < units; u += gridDim.x) {
		int t = u / nseg, sg = u % nseg;
		int n0 = t % ntr * BN, o0 = t / ntr * P::BM, first = 1;
		int s1 = min(nst, (sg + 1) * segst);
		for (int s = sg * segst; s < s1;) {
			/* one segment, stages s .. e - 1: only the products touch d in here (for
			 * the loop of before, with a segment's end inside, ptxas reported a wait for
			 * the products injected near the loop's back edge; for this one, 6-9% faster
			 * on the 640-row products, at the inner loop's exit) */
			int e = min(s1, (s / sst + 1) * sst), rel = -1;
			for (int acc = 0; s < e; s++, acc = 1) {
				mb_wait(&full[slot], ph);
				mw_stage<BN, F16, 1>(d, sm + slot * P::STAGE, P::BM, orow, q, 2 * s + 1 < nkb,
				                     acc);
				if (s + 1 < e) {
					wg_wait<1>();
					if (lane == 0 && rel >= 0)
						mb_arrive(&empty[rel]);
				} else {
					wg_wait<0>();
					if (lane == 0) {
						if (rel >= 0)
							mb_arrive(&empty[rel]);
						mb_arrive(&empty[slot]);
					}
				}
				rel = slot;
				if (++slot == STAGES)
					slot = 0, ph ^= 1;
			}
			wg_fence_acc<BN / 2>(d);
			int last = 2 * e >= nkb;        /* the tile's last segment */
			if constexpr (SPLIT) {
				if (nseg == 1 || mx_split_end<BN>(d, part, t, sg, nseg, ct, 128 * WG,
				                                  t * 4 * WG + (ct >> 5)))
					mw_flush<BN>(y, d, o0 + orow, n0, q, N, out, 0);
			} else if constexpr (SR) {
				if (!last) {
#pragma unroll
					for (int i = 0; i < BN / 2; i++)
						tot[i] = first ? d[i] : tot[i] + d[i];
				} else if (!first) {
#pragma unroll
					for (int i = 0; i < BN / 2; i++)
						tot[i] += d[i];
					mw_flush<BN>(y, tot, o0 + orow, n0, q, N, out, 0);
				} else {
					mw_flush<BN>(y, d, o0 + orow, n0, q, N, out, 0);
				}
			} else {
				mw_flush<BN>(y, d, o0 + orow, n0, q, N, out, !first);
			}
			first = 0;
			wg_fence_acc<BN / 2>(d);
		}
	}
}

/* the cost model's margin and cycles a byte of y for each segment after the first (its
 * read-add-write), gpu_matmul_wgmma_cost */
#define MW_MARGIN 1.15
#define MW_SEG_CYCLES_BYTE 0.00297

typedef void (*mw_fn)(float *, const void *, const void *, int, int, int, int);
typedef void (*mx_fn)(const CUtensorMap, const CUtensorMap, float *, float *, int, int, int,
                      int);

/* the tile shapes, mw_kernel's then mx_kernel's (tma); rate: flop per cycle and SM with the
 * SM full, mw_kernel's fitted to H100 timings of the engine's 36 shapes, mx_kernel's to H200
 * timings (bench/NOTES-device.md); seg: cycles a byte of y for each later segment
 * (mx_kernel with SR: none; split: for each segment's sums written and read back) */
static struct mw_variant {
	const char *name;
	mw_fn fn[2];                            /* bf16, fp16 */
	mx_fn fx[2];                            /* the same for the tma kernels */
	int bm, bn, threads, smem;
	double rate, seg;
	int split;                              /* mx_kernel's SPLIT: (tile, segment) units */
	int occ;                                /* blocks per SM (0: not asked yet) */
} mw_var[] = {
#define MWV(name, WG, BN, S, MINB, rate) \
	{ name, { mw_kernel<WG, BN, S, MINB, 0>, mw_kernel<WG, BN, S, MINB, 1> }, { NULL, NULL }, \
	  64 * WG, BN, 128 * WG, mw<WG, BN, S>::SMEM, rate, MW_SEG_CYCLES_BYTE, 0, 0 }
#define MXV(name, WG, BN, S, MINB, SR, SPLIT, rate, seg) \
	{ name, { NULL, NULL }, { mx_kernel<WG, BN, S, MINB, SR, SPLIT, 0>, \
	                          mx_kernel<WG, BN, S, MINB, SR, SPLIT, 1> }, \
	  64 * WG, BN, 128 * (WG + 1), mx<WG, BN, S>::SMEM, rate, seg, SPLIT, 0 }
	MWV("wgmma 128x256 wg2 s4", 2, 256, 4, 1, 1498.0),
	MWV("wgmma 128x128 wg2 s3", 2, 128, 3, 2, 1859.0),
	MWV("wgmma 128x64 wg2 s4", 2, 64, 4, 2, 1285.0),
	MWV("wgmma 64x128 wg1 s4", 1, 128, 4, 3, 1257.0),
	/* the same tile sizes as the MW_NOLD before, in the same order */
	/* rates fitted to H200 timings of the engine's 24 decode shapes (1.7B / 4B / 8B at 512
	 * and 1024 rows, session 7: the median rate each implies at 1.8e6 cycles a ms, the clock
	 * at which mw_kernel's H100 rates fit the same table) */
	MXV("wgmma tma 128x256 wg2 s4", 2, 256, 4, 1, 0, 0, 2127.0, MW_SEG_CYCLES_BYTE),
	MXV("wgmma tma 128x128 wg2 s6", 2, 128, 6, 1, 1, 0, 1969.0, 0.0),
	MXV("wgmma tma 128x64 wg2 s8", 2, 64, 8, 1, 1, 0, 1317.0, 0.0),
	MXV("wgmma tma 64x128 wg1 s4", 1, 128, 4, 2, 1, 0, 1849.0, 0.0),
	/* split by segment (mx_kernel's SPLIT; weighed only with DICE_MX_SPLIT=1): rate and
	 * cycles a byte of y a segment fitted to a second H200 table (session 7, the epilogue
	 * that reads a segment's sums at once); even so they won only 4b down at 1024 rows (0.151
	 * ms against 0.164), 1.7b down at 512 and 8b qkv at 512 (by 1-2%) */
	MXV("wgmma tma split 128x128 wg2 s6", 2, 128, 6, 1, 0, 1, 2208.0, 0.0011),
	MXV("wgmma tma split 128x64 wg2 s8", 2, 64, 8, 1, 0, 1, 1461.0, 0.0013),
	MXV("wgmma tma split 128x64 wg2 s4 2/SM", 2, 64, 4, 2, 0, 1, 1457.0, 0.0010),
	MXV("wgmma tma split 64x128 wg1 s4", 1, 128, 4, 2, 0, 1, 1819.0, 0.0011),
	/* tiles of 80, 112 or 160 rows (weighed unless DICE_MX_ROWS is 0): 640 rows (the
	 * batch-128 sampler's usual forward) are 8, 6 or 4 of them, against 5 of 128 rows, so
	 * that e.g. 4B's o and down (20 output tiles) take 120 tiles of 112 rows, one round on
	 * 132 SMs, and 8B's (32) 128 tiles of 160 rather than 160 of 128 (two rounds). Rates
	 * guessed (session 10); on an H100 table of the engine's 36 shapes (512, 640, 8192
	 * rows) the picks they give sum to 1.3% over the fastest TMA shape of each
	 * (NOTES-device.md); 160 rows' rate raised from 2000 in session 12, when an H200 table
	 * of the 24 decode shapes at 512 and 640 rows had 4B's gate/up at 640 rows 4.8% faster
	 * on it than on the 128 x 128 tile the model took (no other pick changes) */
	MXV("wgmma tma 128x112 wg2 s6", 2, 112, 6, 1, 1, 0, 1900.0, 0.0),
	MXV("wgmma tma 128x160 wg2 s6", 2, 160, 6, 1, 1, 0, 2100.0, 0.0),
	MXV("wgmma tma 128x80 wg2 s8", 2, 80, 8, 1, 1, 0, 1600.0, 0.0),
#undef MWV
#undef MXV
};
#define MW_NVAR ((int)(sizeof mw_var / sizeof mw_var[0]))
#define MW_NOLD 4                       /* mw_kernel's variants, first */
#define MW_NTMA 4                       /* then mx_kernel's unsplit ones (their mw_kernel: - MW_NOLD) */

static int mw_occupancy(struct mw_variant *v)
{
	if (!v->occ) {
		const void *f[2] = { v->fn[0] ? (const void *)v->fn[0] : (const void *)v->fx[0],
		                     v->fn[1] ? (const void *)v->fn[1] : (const void *)v->fx[1] };
		for (int i = 0; i < 2; i++)
			CUDA_CHECK(cudaFuncSetAttribute(f[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
			                                v->smem));
		CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v->occ, f[0], v->threads,
		                                                         v->smem));
		if (v->occ < 1)
			v->occ = 1;
	}
	return v->occ;
}

static int mw_on = -1, mx_on = -1, mx_split_on = -1, mx_rows_on = -1;

void gpu_set_mx_rows(int on)
{
	mx_rows_on = on < 0 ? -1 : on != 0;
}

void gpu_set_wgmma(int on)
{
	mw_on = on < 0 ? -1 : on != 0;
}

void gpu_set_mx_split(int on)
{
	mx_split_on = on < 0 ? -1 : on != 0;
}

int gpu_matmul_wgmma_ok(void)
{
	return gpu_cc() == 90 && gpu_switch(&mw_on, "DICE_WGMMA");
}

int gpu_matmul_wgmma_variants(void)
{
	return MW_NVAR;
}

const char *gpu_matmul_wgmma_variant_name(int v)
{
	return v >= 0 && v < MW_NVAR ? mw_var[v].name : "?";
}

/* the driver's tensor-map encoder, through the runtime (no -lcuda); NULL where the driver
 * has none (the tma variants are not taken then) */
typedef CUresult (*mx_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                 const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                 const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static mx_encode_fn mx_encoder(void)
{
	static int asked;
	static mx_encode_fn fn;
	if (!asked) {
		void *p = NULL;
		cudaDriverEntryPointQueryResult r;
		asked = 1;
		if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
		                                     cudaEnableDefault, &r) == cudaSuccess &&
		    r == cudaDriverEntryPointSuccess)
			fn = (mx_encode_fn)p;
		cudaGetLastError();
	}
	return fn;
}

/* the tensor maps made before, by their arguments (a map is a function of them alone, so a
 * hit is right even where the memory was freed and taken again): MX_MAPS slots, the slot a
 * hash of the arguments; gpu_set_mx_mapcache(0) (a bench hook) encodes every time */
#define MX_MAPS 512
static struct mx_mapslot {
	CUtensorMap map;
	const void *p;
	int f16, cols, rows, bc, br, swz;
} mx_maps[MX_MAPS];
static int mx_mapcache = 1;

void gpu_set_mx_mapcache(int on)
{
	mx_mapcache = on != 0;
}

static int mx_encode(CUtensorMap *m, const void *p, int f16, int cols, int rows, int bc, int br,
                     int swz);

int wg_tensor_map_ok(void)
{
	return mx_encoder() != NULL;
}

/* wgmma.cuh; kept by its arguments (see mx_maps) */
int wg_tensor_map(CUtensorMap *m, const void *p, int f16, int cols, int rows, int bc, int br,
                  int swz)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^
	             ((uint64_t)cols << 32 | (uint64_t)rows) * 0xC2B2AE3D27D4EB4Full ^
	             (uint64_t)(bc << 12 | br << 2 | swz << 1 | f16) * 0x165667B19E3779F9ull;
	struct mx_mapslot *e = &mx_maps[(h ^ h >> 29) % MX_MAPS];
	if (mx_mapcache && e->p == p && e->f16 == f16 && e->cols == cols && e->rows == rows &&
	    e->bc == bc && e->br == br && e->swz == swz) {
		*m = e->map;
		return 0;
	}
	if (mx_encode(m, p, f16, cols, rows, bc, br, swz))
		return -1;
	if (mx_mapcache) {
		e->map = *m;
		e->p = p, e->f16 = f16, e->cols = cols, e->rows = rows, e->bc = bc, e->br = br;
		e->swz = swz;
	}
	return 0;
}

static int mx_encode(CUtensorMap *m, const void *p, int f16, int cols, int rows, int bc, int br,
                     int swz)
{
	cuuint64_t dim[2] = { (cuuint64_t)cols, (cuuint64_t)rows }, stride[1] = { (cuuint64_t)cols * 2 };
	cuuint32_t box[2] = { (cuuint32_t)bc, (cuuint32_t)br }, es[2] = { 1, 1 };
	CUresult r = mx_encoder()(m, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 :
	                          CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dim, stride, box, es,
	                          CU_TENSOR_MAP_INTERLEAVE_NONE,
	                          swz ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
	                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	GPU_REQUIRE(r == CUDA_SUCCESS, "tensor map");
	return 0;
}

/* whether mx_kernel runs: the driver has the tensor-map encoder and DICE_WGMMA_TMA is not 0 */
static int mx_ok(void)
{
	return gpu_switch(&mx_on, "DICE_WGMMA_TMA") && mx_encoder();
}

/* whether the cost model may weigh a split variant on this shape: DICE_MX_SPLIT is 1 (off
 * by default: slower than the unsplit ones on every shape measured, NOTES-device.md), there
 * are several segments and the counters hold its tiles */
static int mx_split_ok(int N, int out, int nseg, const struct mw_variant *vr)
{
	long tiles = (long)CEIL_DIV(N, vr->bn) * CEIL_DIV(out, vr->bm);
	if (mx_split_on < 0) {
		const char *e = getenv("DICE_MX_SPLIT");
		mx_split_on = e && e[0] == '1' && !e[1];
	}
	return mx_split_on && nseg > 1 && tiles * (vr->bm / 16) <= MX_CNT;
}

/* the estimated time of variant v in mf_cost's units (cycles, matmul_fixed.cu): waves of occ
 * blocks an SM at the variant's rate, plus the read-add-writes of the later segments (none
 * for the tma kernels that keep the segments' sums in registers); times MW_MARGIN, so that
 * the tiled path takes wgmma only where clearly faster. Fitted to H100 timings of both
 * kernels on the engine's 36 shapes (bench/NOTES-device.md). */
double gpu_matmul_wgmma_cost(int v, int N, int in, int out, int nseg)
{
	struct mw_variant *vr = &mw_var[v];
	if (vr->fx[0] && !mx_ok())
		return 1e30;
	if (vr->split && !mx_split_ok(N, out, nseg, vr))
		return 1e30;
	if ((vr->bn & (vr->bn - 1)) && !gpu_switch(&mx_rows_on, "DICE_MX_ROWS"))
		return 1e30;                    /* 80, 112 or 160 rows, off */
	int sms = gpu_sm_count(), occ = mw_occupancy(vr);
	long tiles = (long)CEIL_DIV(N, vr->bn) * CEIL_DIV(out, vr->bm);
	double y = (double)N * out * 4;
	if (vr->split) {                /* units of one segment; each writes its sums, the last
	                                 * warp of a tile reads nseg - 1 of them back */
		long waves = CEIL_DIV(tiles * nseg, (long)sms * occ);
		double kseg = (double)CEIL_DIV(CEIL_DIV(in, MW_KB), nseg) * MW_KB;
		return MW_MARGIN * (waves * occ * 2.0 * vr->bm * vr->bn * kseg / vr->rate +
		                    vr->seg * (2.0 * nseg - 1) * y);
	}
	long waves = CEIL_DIV(tiles, (long)sms * occ);
	return MW_MARGIN * (waves * occ * 2.0 * vr->bm * vr->bn * in / vr->rate +
	                    vr->seg * (nseg - 1) * y);
}

/* whether the kernel takes segments of kseg inputs: its 64-input stages must not straddle them */
int gpu_matmul_wgmma_walks(int in, int kseg)
{
	return kseg >= in || kseg / MW_KB % 2 == 0;
}

/* y = x w^T through variant v (kseg: matmul_fixed's segment length); 16-bit w, in % 8 == 0,
 * x and w 16-byte aligned (the caller checks); a tma variant where mx_kernel does not run
 * (mx_ok) takes mw_kernel's tile of the same size; glu: x is (N, 2 in), [gate | up], and the
 * product's input silu(gate) * up (gpu_x2) */
int gpu_matmul_wgmma(cudaStream_t st, float *y, const float *x, const void *w, int f16, int N,
                     int in, int out, int kseg, int v, int glu)
{
	GPU_REQUIRE(v >= 0 && v < MW_NVAR && gpu_matmul_wgmma_ok() && gpu_matmul_wgmma_walks(in, kseg),
	            "matmul_wgmma");
	struct mw_variant *vr = &mw_var[v];
	int nkb = CEIL_DIV(in, MW_KB), Kp = nkb * MW_KB, nseg = CEIL_DIV(nkb, kseg / MW_KB);
	/* a split variant on too many tiles: the unsplit one of its tile shape (the same bits) */
	if (vr->split && nseg > 1 && (long)CEIL_DIV(N, vr->bn) * CEIL_DIV(out, vr->bm) *
	    (vr->bm / 16) > MX_CNT)
		for (int i = MW_NOLD; i < MW_NOLD + MW_NTMA; i++)
			if (mw_var[i].bm == vr->bm && mw_var[i].bn == vr->bn)
				vr = &mw_var[i];
	if (vr->fx[0] && !mx_ok())        /* no tma: mw_kernel's tile of the same size */
		for (int i = 0; i < MW_NOLD; i++)
			if (mw_var[i].bm == vr->bm && mw_var[i].bn == vr->bn)
				vr = &mw_var[i];
	if (vr->fx[0] && !mx_ok())
		vr = &mw_var[1];
	int occ = mw_occupancy(vr);
	size_t n16 = (size_t)N * Kp / 8;
	long tiles = (long)CEIL_DIV(N, vr->bn) * CEIL_DIV(out, vr->bm);
	size_t pbytes = vr->split && nseg > 1 ? (size_t)tiles * nseg * vr->bm * vr->bn * 4 : 0;
	char *scr = (char *)gpu_scratch(n16 * 16 + pbytes);
	uint4 *xp = (uint4 *)scr;
	float *part = (float *)(scr + n16 * 16);
	int cg = (int)(CEIL_DIV(n16, (size_t)256) < 8192 ? CEIL_DIV(n16, (size_t)256) : 8192);
	wg_xperm_kernel<<<cg, 256, 0, st>>>(xp, x, N, in, Kp, n16, f16, glu);
	CUDA_CHECK_LAUNCH();
	long grid = tiles * (pbytes ? nseg : 1);
	if (vr->fx[0]) {
		CUtensorMap tw, tx;
		if (wg_tensor_map(&tw, w, f16, in, out, MW_KB, vr->bm, 0) ||
		    wg_tensor_map(&tx, xp, f16, Kp, N, 2 * MW_KB, vr->bn, 1))
			return -1;
		if (grid > gpu_sm_count() * occ)
			grid = gpu_sm_count() * occ;
		vr->fx[f16]<<<(int)grid, vr->threads, vr->smem, st>>>(tw, tx, y, part, N, in, out,
		                                                      kseg);
	} else {
		vr->fn[f16]<<<(int)grid, vr->threads, vr->smem, st>>>(y, xp, w, N, in, out, kseg);
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}
