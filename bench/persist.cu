/* persist: the matrix products of one batch-1 decode forward (SDAR geometry: per layer the
 * fused q/k/v, o, the fused gate/up and down; then lm_head) on M rows, three ways, the same bits:
 *   kernels   gpu_matmul_fixed for each product, as the engine forward runs them (the
 *             streaming kernel, one launch a product, programmatic dependent launch),
 *             captured in a CUDA graph;
 *   persist   one kernel whose blocks all stay resident (cooperative launch) and run the
 *             products one after the other, a grid barrier between two; a warp takes the
 *             streaming kernel's work unit (8 outputs x one segment of the inputs, the same
 *             steps and the same order of sums: matmul_fixed.cu), and asks for its first
 *             weights of the next product before it waits at the barrier ("persist-nopf":
 *             after it);
 *   ring      one kernel, a block an SM, whose warps stream their weights into shared memory
 *             by bulk copies, pages ahead of their use and across the products' boundaries
 *             (rg_kernel below; RING_STALL=NS,NS,NS,NS adds "ring-stall", RING_TL=1 prints
 *             its timeline, RING_NP and RING_DIAG vary it; -DRG_W=N, -DRG_PK=N rebuild it);
 *   packed    the kernels way on copies of the weights in the packed layout
 *             (gpu_matmul_fixed_pack: a warp's step one contiguous 4 KB) instead of row-major.
 * PERSIST_WAYS=kernels,packed runs only the ways named (kernels always).
 * The question it answers: how much of the floor the products lose to their kernel
 * boundaries. The floor is the weight bytes over the device-to-device copy bandwidth
 * measured in the same run (read + write counted, as tests/gpu/model-logits.c does). Every
 * layer has weights of its own; each product reads a fixed random x (the barriers and the
 * waits are there all the same). A figure is the median over REPS runs (CUDA events); the
 * outputs of every run way are compared bit for bit with the kernels' (RING_DIAG's runs
 * excepted: they time parts of the ring only).
 * Usage: persist [REPS [GEOMS [M]]] (GEOMS e.g. 1.7b,4b,8b; M rows, at most 8); exit status
 * 2 for bad arguments or a malformed RING_NP / RING_STALL, 1 for a CUDA error or differing bits.
 * Built and run by bench/gpu-ops.sh (BENCH=persist). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <cuda_runtime.h>

#include "gpu.h"
#include "cuda/common.cuh"
#include "cuda/wgmma.cuh"
#include "bench.cuh"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "persist: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

#define PP_WB 4                 /* warps a block */
#define PP_U 8                  /* 32-input blocks a step (up to 8 rows: the streaming kernel's U) */
#define PP_KB 32

struct pp_phase {
	const void *w;
	const float *x;
	float *y;
	const uint16_t *xb;     /* ring: x rounded to 16 bits */
	int in, out, kseg, nseg, tiles;
	int npg, bpp;           /* ring: pages a unit, 32-input blocks a page */
};

/* where a warp is: phase p (P: done), tile t, step at input k of its segment [kbeg, kend) */
struct pp_pos {
	int p, t, k, kbeg, kend;
};

/* the warp's first tile at or after phase p (its group: warp / nseg, its segment warp % nseg) */
static __device__ __forceinline__ struct pp_pos pp_first(const struct pp_phase *ph, int P, int p,
                                                          int warp)
{
	struct pp_pos s;
	for (; p < P; p++) {
		int nseg = ph[p].nseg, gpb = PP_WB / nseg, grp = warp / nseg;
		int t = blockIdx.x * gpb + grp;
		if (grp < gpb && t < ph[p].tiles) {
			s.p = p;
			s.t = t;
			s.kbeg = s.k = (warp % nseg) * ph[p].kseg;
			s.kend = min(ph[p].in, s.kbeg + ph[p].kseg);
			return s;
		}
	}
	s.p = P;
	s.t = s.k = s.kbeg = s.kend = 0;
	return s;
}

static __device__ __forceinline__ struct pp_pos pp_next(const struct pp_phase *ph, int P,
                                                         struct pp_pos s, int warp)
{
	s.k += PP_KB * PP_U;
	if (s.k < s.kend)
		return s;
	int gpb = PP_WB / ph[s.p].nseg;
	s.t += gridDim.x * gpb;
	if (s.t < ph[s.p].tiles) {
		s.k = s.kbeg;
		return s;
	}
	return pp_first(ph, P, s.p + 1, warp);
}

static __device__ __forceinline__ void pp_loadb(uint4 *b, const struct pp_phase *ph,
                                                struct pp_pos s, int g, int q)
{
	const struct pp_phase &f = ph[s.p];
	const char *wp = (const char *)f.w + ((size_t)min(s.t * 8 + g, f.out - 1) * f.in + 8 * q) * 2;
#pragma unroll
	for (int u = 0; u < PP_U; u++) {
		b[u] = make_uint4(0, 0, 0, 0);
		if (s.k + PP_KB * u + 8 * q < s.kend)
			b[u] = __ldcs((const uint4 *)(wp + (size_t)(s.k + PP_KB * u) * 2));
	}
}

/* every block arrives; all wait until gridDim.x x (p + 1) have (the counter starts at 0) */
static __device__ __forceinline__ void pp_barrier(unsigned *bar, int p)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned want = (unsigned)(p + 1) * gridDim.x, v;
		__threadfence();
		asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
		do
			asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(bar) : "memory");
		while (v < want);
	}
	__syncthreads();
}

template <int PF>
static __global__ void __launch_bounds__(PP_WB * 32, 3)
pp_kernel(const struct pp_phase *ph, int P, int M, unsigned *bar)
{
	__shared__ float4 part[2][PP_WB][32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
	uint4 b[PP_U], bn[PP_U];
	float4 xa[PP_U][2];
	float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
	int tiles_done = 0;
	struct pp_pos cur = pp_first(ph, P, 0, warp);

	if (cur.p < P)
		pp_loadb(b, ph, cur, g, q);
	for (int p = 0; p < P; p++) {
		if (!PF && cur.p == p && p > 0)
			pp_loadb(b, ph, cur, g, q);
		while (cur.p == p) {
			const struct pp_phase &f = ph[p];
			if (cur.k == cur.kbeg)
				c[0] = c[1] = c[2] = c[3] = 0.0f;
#pragma unroll
			for (int u = 0; u < PP_U; u++) {
				int kk = cur.k + PP_KB * u + 8 * q;
				xa[u][0] = xa[u][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				if (g < M && kk < cur.kend) {
					const float4 *xp = (const float4 *)(f.x + (size_t)g * f.in + kk);
					xa[u][0] = __ldcg(xp);
					xa[u][1] = __ldcg(xp + 1);
				}
			}
			struct pp_pos nxt = pp_next(ph, P, cur, warp);
			if (nxt.p < P && (PF || nxt.p == p))
				pp_loadb(bn, ph, nxt, g, q);
#pragma unroll
			for (int u = 0; u < PP_U; u++) {
				if (cur.k + PP_KB * u < cur.kend) {
					uint4 ra = make_uint4(gpu_pack2(xa[u][0].x, xa[u][0].y, 0),
					                      gpu_pack2(xa[u][0].z, xa[u][0].w, 0),
					                      gpu_pack2(xa[u][1].x, xa[u][1].y, 0),
					                      gpu_pack2(xa[u][1].z, xa[u][1].w, 0));
					gpu_mma16816(c, ra.x, 0u, ra.y, 0u, b[u].x, b[u].y, 0);
					gpu_mma16816(c, ra.z, 0u, ra.w, 0u, b[u].z, b[u].w, 0);
				}
			}
#pragma unroll
			for (int u = 0; u < PP_U; u++)
				b[u] = bn[u];
			if (nxt.p != p || nxt.t != cur.t) {     /* the tile's segment is done */
				int nseg = f.nseg, seg = warp % nseg, lead = warp - seg, buf = tiles_done & 1;
				if (nseg > 1) {
					part[buf][warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
					asm volatile("bar.sync %0, %1;\n" ::"r"(1 + warp / nseg), "r"(32 * nseg)
					             : "memory");
				}
				if (seg == 0) {
					if (nseg > 1) {
						float4 v = part[buf][lead][lane];
						for (int s = 1; s < nseg; s++) {
							float4 a = part[buf][lead + s][lane];
							v.x += a.x;
							v.y += a.y;
							v.z += a.z;
							v.w += a.w;
						}
						c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
					}
					int col = cur.t * 8 + 2 * q;
					if (g < M) {
						if (col < f.out)
							f.y[(size_t)g * f.out + col] = c[0];
						if (col + 1 < f.out)
							f.y[(size_t)g * f.out + col + 1] = c[1];
					}
				}
				tiles_done++;
			}
			cur = nxt;
		}
		tiles_done = 0;
		pp_barrier(bar, p);
	}
}

/* ---------------------------------------------------------------- the ring
 * One block an SM (cooperative launch) of RG_W warps. A unit is the streaming kernel's (8
 * outputs x one segment of the inputs); the units of a product go to the blocks in turn (unit
 * u to block u mod grid), and a block's units to its warps in waves of RG_W. A warp copies
 * (cp.async.bulk, a row of 8 a copy) the weights of its units page by page (a page: up to
 * RG_PK inputs of a unit's 8 rows) into its NP / RG_W pages of shared memory, as many pages
 * ahead of the one it multiplies, and asks for the next page as soon as one is read, also
 * for the next product's units: those weights stream in while the block waits for the next
 * product's input. At each product the block waits for every tile of the product before (a
 * counter a product, each warp adding its tiles once), copies x (rounded to 16 bits by
 * whoever wrote it: here rg_round) into shared memory, then makes its units' sums in the
 * streaming kernel's order; a tile's segments are warps of one wave (RG_W a multiple of the
 * segments), whose sums meet in shared memory, added in order by the first (the same bits
 * as the kernels). stall[p] (ns): a wait
 * more before product p's input counts as there, standing for the small kernels between. */
#ifndef RG_W
#define RG_W 12                         /* warps a block (-DRG_W=N to vary) */
#endif
#ifndef RG_PK
#define RG_PK 256                       /* inputs a page holds, at most (-DRG_PK=N) */
#endif
#define RG_RS (RG_PK * 2 + 64)          /* a page row's bytes (rows 64 bytes apart mod 128) */
#define RG_SLOT (8 * RG_RS)
#define RG_NPMAX 32
#define RG_HEAD (512 + 2 * RG_W * 32 * 8)  /* the barriers, then the segments' sums */

struct rg_args {
	const struct pp_phase *ph;
	int P, M, NP, xrs;
	unsigned *done;
	unsigned long long *tl; /* RING_TL: thread 0's global timer a product: (P + 1, grid, 3) */
	const unsigned *stall;
	int diag;               /* RING_DIAG, bits (timing only; the results are not checked): 1
	                         * no multiplies, 2 no waits for the product before, 4 no weight
	                         * copies */
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900   /* (bulk copies: sm_90) */
static __device__ __forceinline__ void rg_bar(void)
{
	asm volatile("bar.sync 1, %0;\n" :: "n"(32 * RG_W) : "memory");
}

/* the units of product f that block b takes: its tiles b, b + grid, ... each with all its
 * segments (unit i: tile b + (i / nseg) grid, segment i % nseg) */
static __device__ __forceinline__ int rg_units(const struct pp_phase &f, int b)
{
	int tiles = f.tiles > b ? (f.tiles - 1 - b) / (int)gridDim.x + 1 : 0;
	return tiles * f.nseg;
}

/* a warp's walk over its pages: product p, wave i0, page pg (p == P: the end), and what the
 * copies want of product p, held in registers (the asm's memory clobbers would reload them
 * from the product table at every page) */
struct rg_cur {
	int p, i0, pg;
	const char *w;
	int in, out, kseg, nseg, npg, bpp;
};

/* the first wave at or after (p, i0) where this warp has a unit, and its product's fields */
static __device__ __forceinline__ void rg_seek(const struct rg_args &a, struct rg_cur *c, int warp)
{
	for (; c->p < a.P; c->p++, c->i0 = 0) {
		const struct pp_phase &f = a.ph[c->p];
		if (c->i0 + warp < rg_units(f, blockIdx.x)) {
			c->w = (const char *)f.w;
			c->in = f.in, c->out = f.out, c->kseg = f.kseg, c->nseg = f.nseg;
			c->npg = f.npg, c->bpp = f.bpp;
			return;
		}
	}
}

static __device__ __forceinline__ void rg_advance(const struct rg_args &a, struct rg_cur *c,
                                                  int warp)
{
	if (++c->pg < c->npg)
		return;
	c->pg = 0;
	c->i0 += RG_W;
	rg_seek(a, c, warp);
}

/* page pg of segment s: inputs [k0, k1) */
static __device__ __forceinline__ void rg_page(int in, int kseg, int bpp, int s, int pg, int *k0,
                                               int *k1)
{
	int kbeg = s * kseg, kend = min(in, kbeg + kseg);
	*k0 = min(kend, kbeg + pg * bpp * 32);
	*k1 = min(kend, *k0 + bpp * 32);
}

/* the warp asks for the page at c into its slot (lane 0 announces the bytes, lanes 0..7 copy
 * a row each) */
static __device__ __forceinline__ void rg_issue(int diag, const struct rg_cur &c, int warp,
                                                int lane, char *dst, uint64_t *bar)
{
	int i = c.i0 + warp, t = blockIdx.x + i / c.nseg * gridDim.x, k0, k1;
	rg_page(c.in, c.kseg, c.bpp, i % c.nseg, c.pg, &k0, &k1);
	if (lane == 0)
		mb_expect(bar, diag & 4 ? 0u : 8u * (k1 - k0) * 2);
	__syncwarp();
	if (lane < 8 && k1 > k0 && !(diag & 4)) {
		int row = min(t * 8 + lane, c.out - 1);
		tma_load1(dst + lane * RG_RS, c.w + ((size_t)row * c.in + k0) * 2,
		          (unsigned)(k1 - k0) * 2, bar);
	}
}

#endif

static __global__ void __launch_bounds__(32 * RG_W, 1) rg_kernel(struct rg_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	extern __shared__ __align__(128) unsigned char rg_smem[];
	uint64_t *full = (uint64_t *)rg_smem, *xbar = full + RG_NPMAX;
	float2 *part = (float2 *)(rg_smem + 512);       /* (2, RG_W, 32) */
	char *xs = (char *)rg_smem + RG_HEAD;
	char *ring = xs + ((size_t)a.M * a.xrs * 2 + 127) / 128 * 128;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, b = blockIdx.x, G = gridDim.x;
	int S = a.NP / RG_W;                    /* pages a warp has in flight */
	int g = lane >> 2, q = lane & 3;

	if (threadIdx.x == 0) {
		for (int i = 0; i < RG_W * S; i++)
			mb_init(full + i, 1);
		mb_init(xbar, 1);
		mb_fence_init();
	}
	__syncthreads();
	struct rg_cur ahead;
	ahead.p = ahead.i0 = ahead.pg = 0;
	rg_seek(a, &ahead, warp);
	for (int i = 0; i < S && ahead.p < a.P; i++) {
		rg_issue(a.diag, ahead, warp, lane, ring + (size_t)(warp * S + i) * RG_SLOT,
		         full + warp * S + i);
		rg_advance(a, &ahead, warp);
	}
	unsigned j = 0;                         /* this warp's pages so far */
	for (int p = 0; p < a.P; p++) {
		/* product p's fields, once, into registers */
		const struct pp_phase *fp = a.ph + p;
		const int in = fp->in, out = fp->out, kseg = fp->kseg, nseg = fp->nseg;
		const int npg = fp->npg, bpp = fp->bpp, nu = rg_units(*fp, b);
		float *y = fp->y;
		const uint16_t *xb = fp->xb;
		rg_bar();                       /* this block is done with x */
		if (a.tl && threadIdx.x == 0)
			a.tl[((size_t)p * G + b) * 3] = gpu_tl_now();
		if (threadIdx.x == 0) {
			if (p > 0 && !(a.diag & 2)) {
				unsigned want = (unsigned)a.ph[p - 1].tiles, v;
				do
					asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v)
					             : "l"(a.done + p - 1) : "memory");
				while (v < want);
				if (a.stall && a.stall[p]) {
					unsigned long long t0 = gpu_tl_now();
					while (gpu_tl_now() - t0 < a.stall[p])
						;
				}
			}
			if (a.tl)
				a.tl[((size_t)p * G + b) * 3 + 1] = gpu_tl_now();
			/* x (16-bit already) into shared memory, a copy a row */
			mb_expect(xbar, (unsigned)a.M * in * 2);
			for (int r = 0; r < a.M; r++)
				tma_load1(xs + (size_t)r * a.xrs * 2, xb + (size_t)r * in, (unsigned)in * 2,
				          xbar);
		}
		mb_wait(xbar, p & 1);
		if (a.tl && threadIdx.x == 0)
			a.tl[((size_t)p * G + b) * 3 + 2] = gpu_tl_now();
		unsigned stored = 0;
		/* lanes of rows g >= M read row g mod M: their rows of the sums are never stored, and
		 * a row's sums do not depend on the other rows */
		const char *xrow = xs + (size_t)(g % a.M) * a.xrs * 2;
		const int xon = g < a.M, kstop = a.diag & 1;
		for (int i0 = 0; i0 + warp < nu; i0 += RG_W) {
			int i = i0 + warp, t = b + i / nseg * G, s = i % nseg;
			int wn = min(RG_W, nu - i0);
			int kend = min(in, s * kseg + kseg);
			float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
			for (int pg = 0; pg < npg; pg++, j++) {
				unsigned slot = warp * S + j % S;
				int k0, k1;
				rg_page(in, kseg, bpp, s, pg, &k0, &k1);
				mb_wait(full + slot, (j / S) & 1);
				/* the page into registers, the slot asked to refill at once, then the sums
				 * (a slot is held for the loads only, not for the multiplies) */
				const char *pw = ring + (size_t)slot * RG_SLOT + g * RG_RS;
				uint4 bw[RG_PK / 32];
				const int whole = k1 - k0 == RG_PK;     /* a whole page: no checks */
				if (whole) {
#pragma unroll
					for (int u = 0; u < RG_PK / 32; u++)
						bw[u] = *(const uint4 *)(pw + (size_t)(32 * u + 8 * q) * 2);
				} else {
#pragma unroll
					for (int u = 0; u < RG_PK / 32; u++) {
						int kk = k0 + 32 * u + 8 * q;
						bw[u] = make_uint4(0, 0, 0, 0);
						if (k0 + 32 * u < k1 && kk < kend)
							bw[u] = *(const uint4 *)(pw + (size_t)(kk - k0) * 2);
					}
				}
				wg_fence_proxy();       /* this warp's reads of the slot before the copy's writes */
				__syncwarp();
				if (ahead.p < a.P) {    /* the page S ahead into the slot just read */
					rg_issue(a.diag, ahead, warp, lane, ring + (size_t)slot * RG_SLOT,
					         full + slot);
					rg_advance(a, &ahead, warp);
				}
				if (kstop)
					continue;
				if (whole) {
					const char *xp = xrow + (size_t)(k0 + 8 * q) * 2;
#pragma unroll
					for (int u = 0; u < RG_PK / 32; u++) {
						uint4 ra = *(const uint4 *)(xp + 64 * u);
						gpu_mma16816(c, ra.x, 0u, ra.y, 0u, bw[u].x, bw[u].y, 0);
						gpu_mma16816(c, ra.z, 0u, ra.w, 0u, bw[u].z, bw[u].w, 0);
					}
					continue;
				}
#pragma unroll
				for (int u = 0; u < RG_PK / 32; u++) {
					int k = k0 + 32 * u, kk = k + 8 * q;
					if (k >= k1)
						break;
					uint4 ra = make_uint4(0, 0, 0, 0);
					if (kk < kend)
						ra = *(const uint4 *)(xrow + (size_t)kk * 2);
					gpu_mma16816(c, ra.x, 0u, ra.y, 0u, bw[u].x, bw[u].y, 0);
					gpu_mma16816(c, ra.z, 0u, ra.w, 0u, bw[u].z, bw[u].w, 0);
				}
			}
			float v0 = c[0], v1 = c[1];
			int last = s == 0;
			if (nseg > 1) {                 /* the tile's segments meet in shared memory */
				float2 *pt = part + ((i0 / RG_W) & 1) * RG_W * 32;
				pt[warp * 32 + lane] = make_float2(v0, v1);
				asm volatile("bar.sync 2, %0;\n" :: "r"(32 * wn) : "memory");
				if (last) {
					float2 acc = pt[warp * 32 + lane];
					for (int sg = 1; sg < nseg; sg++) {
						float2 pp = pt[(warp + sg) * 32 + lane];
						acc.x += pp.x;
						acc.y += pp.y;
					}
					v0 = acc.x;
					v1 = acc.y;
				}
			}
			if (last) {
				int col = t * 8 + 2 * q;
				if (xon) {
					if (col < out)
						y[(size_t)g * out + col] = v0;
					if (col + 1 < out)
						y[(size_t)g * out + col + 1] = v1;
				}
				stored++;
			}
		}
		if (stored) {                   /* the tiles this warp stored, counted once */
			__threadfence();
			__syncwarp();
		}
		if (stored && lane == 0) {
			asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n"
			             :: "l"(a.done + p), "r"(stored) : "memory");
		}
	}
	rg_bar();
	if (a.tl && threadIdx.x == 0)
		a.tl[((size_t)a.P * G + b) * 3] = gpu_tl_now();
#endif
}

/* the median of v[0..n) (sorted in place) */
static double rg_median(double *v, int n)
{
	bench_sort(v, n);
	return v[n / 2];
}

/* one more ring run with thread 0's timer recorded; per product kind (q/k/v, o, gate/up,
 * down, lm_head), the mean over the layers of, us: the wait from the product before's last
 * block done to this block seeing it (median over blocks; "seen", with RING_STALL's stall),
 * x's copy ("x"), the block's units ("run", median), the last block's end after the
 * median's ("tail"), and the product's span (the product before's last end to its own) */
static void rg_timeline(struct rg_args *ra, int P, int G, size_t smem, cudaStream_t st,
                        const char *name, const unsigned *stall)
{
	size_t n = (size_t)(P + 1) * G * 3;
	unsigned long long *h = (unsigned long long *)malloc(n * 8);
	double *v = (double *)malloc(G * sizeof *v);
	CK(cudaMalloc(&ra->tl, n * 8));
	CK(cudaMemsetAsync(ra->done, 0, P * sizeof(unsigned), st));
	ra->stall = stall;
	void *args[] = { ra };
	CK(cudaLaunchCooperativeKernel((const void *)rg_kernel, dim3(G), dim3(32 * RG_W), args, smem, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaMemcpy(h, ra->tl, n * 8, cudaMemcpyDeviceToHost));
	CK(cudaFree(ra->tl));
	ra->tl = NULL;
#define TL(p, b, k) (double)h[((size_t)(p) * G + (b)) * 3 + (k)]
	double sum[5][5] = { { 0 } };
	int cnt[5] = { 0 };
	for (int p = 1; p < P; p++) {
		int kind = p == P - 1 ? 4 : p % 4;
		double lastp = 0, last = 0, med[4];
		for (int b = 0; b < G; b++) {
			lastp = TL(p, b, 0) > lastp ? TL(p, b, 0) : lastp;
			last = TL(p + 1, b, 0) > last ? TL(p + 1, b, 0) : last;
		}
		for (int k = 0; k < 4; k++) {   /* seen, x, run; the median end */
			for (int b = 0; b < G; b++)
				v[b] = k == 0 ? TL(p, b, 1) - lastp : k == 1 ? TL(p, b, 2) - TL(p, b, 1) :
				       k == 2 ? TL(p + 1, b, 0) - TL(p, b, 2) : TL(p + 1, b, 0);
			med[k] = rg_median(v, G);
		}
		sum[kind][0] += med[0];
		sum[kind][1] += med[1];
		sum[kind][2] += med[2];
		sum[kind][3] += last - med[3];
		sum[kind][4] += last - lastp;
		cnt[kind]++;
	}
#undef TL
	const char *kinds[5] = { "q/k/v", "o", "gate/up", "down", "lm_head" };
	printf("%-5s ring timeline%s, us (mean over layers): product seen x run tail span\n", name,
	       stall ? " with the stalls" : "");
	for (int k = 0; k < 5; k++)
		if (cnt[k])
			printf("%-5s   %-8s %7.2f %6.2f %7.2f %6.2f %7.2f\n", name, kinds[k],
			       sum[k][0] / cnt[k] / 1e3, sum[k][1] / cnt[k] / 1e3, sum[k][2] / cnt[k] / 1e3,
			       sum[k][3] / cnt[k] / 1e3, sum[k][4] / cnt[k] / 1e3);
	free(h);
	free(v);
}

/* x rounded to 16 bits, as the products round it (round to nearest even) */
static __global__ void rg_round(uint16_t *xb, const float *x, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		unsigned v = gpu_pack2(x[i], 0.0f, 0);
		xb[i] = (uint16_t)(v & 0xffff);
	}
}

/* a value in [-1, 1) from the index and a seed (a hash) */
static __device__ __forceinline__ float pp_rand(size_t i, uint32_t seed)
{
	uint32_t h = (uint32_t)i * 2654435761u ^ seed;
	h ^= h >> 15;
	h *= 2246822519u;
	h ^= h >> 13;
	return (h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

/* w: n bf16 values in [-scale, scale) (rounded to nearest even); x: n floats in [-1, 1) */
static __global__ void fill(uint16_t *w, float *x, size_t n, uint32_t seed, float scale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = pp_rand(i, seed);
		if (x) {
			x[i] = v;
			continue;
		}
		uint32_t bits = __float_as_uint(v * scale);
		w[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
	}
}

#define NWAYS 6

/* whether PERSIST_WAYS (a comma list of the ways' names; unset: all) names way n */
static int way_on(const char *n)
{
	const char *e = getenv("PERSIST_WAYS");
	size_t len = strlen(n);

	if (!e)
		return 1;
	for (const char *p = e; *p; p += strcspn(p, ","), p += *p == ',')
		if (strcspn(p, ",") == len && !strncmp(p, n, len))
			return 1;
	return 0;
}

struct geom {
	const char *name;
	int C, L, NH, I;
};
static const struct geom geoms[] = {
	{ "1.7b", 2048, 28, 16, 6144 }, { "4b", 2560, 36, 32, 9728 }, { "8b", 4096, 36, 32, 12288 },
};

static void run_geom(const struct geom *gm, int reps, int M, double bw, cudaStream_t st)
{
	int C = gm->C, HD = 128, NKV = 8, V = 151936;
	int QKV = gm->NH * HD + 2 * NKV * HD, QD = gm->NH * HD;
	int shp[4][2] = { { C, QKV }, { QD, C }, { C, 2 * gm->I }, { gm->I, C } };
	int P = 4 * gm->L + 1;
	struct pp_phase *ph = (struct pp_phase *)calloc(P, sizeof *ph);
	size_t wtot = 0, ytot = 0;
	int kmax = 0;
	for (int p = 0; p < P; p++) {
		int in = p < P - 1 ? shp[p % 4][0] : C, out = p < P - 1 ? shp[p % 4][1] : V;
		ph[p].in = in, ph[p].out = out;
		ph[p].nseg = gpu_matmul_fixed_segments(in, out, &ph[p].kseg);
		ph[p].tiles = (out + 7) / 8;
		int kb = (ph[p].kseg + 31) / 32;
		ph[p].npg = (kb + RG_PK / 32 - 1) / (RG_PK / 32);
		ph[p].bpp = (kb + ph[p].npg - 1) / ph[p].npg;
		ph[p].npg = (kb + ph[p].bpp - 1) / ph[p].bpp;
		kmax = in > kmax ? in : kmax;
		if (RG_W % ph[p].nseg && (way_on("ring") || way_on("ring-stall"))) {
			fprintf(stderr, "persist: %s: %d segments do not divide the ring's %d warps\n",
			        gm->name, ph[p].nseg, RG_W);
			exit(1);
		}
		if (ph[p].nseg > PP_WB && (way_on("persist") || way_on("persist-nopf"))) {
			fprintf(stderr, "persist: %s: %d segments > %d warps a block\n", gm->name,
			        ph[p].nseg, PP_WB);
			exit(1);
		}
		wtot += (size_t)in * out;
		ytot += (size_t)M * out;
	}
	uint16_t *w;
	float *x, *y;
	size_t xmax = (size_t)M * (gm->I > QD ? gm->I : QD);
	CK(cudaMalloc(&w, wtot * 2));
	CK(cudaMalloc(&x, 4 * xmax * sizeof(float)));
	CK(cudaMalloc(&y, ytot * sizeof(float)));
	fill<<<4096, 256>>>(w, NULL, wtot, 12345u, 0.03f);
	fill<<<256, 256>>>(NULL, x, 4 * xmax, 777u, 1.0f);
	uint16_t *xb;
	CK(cudaMalloc(&xb, 4 * xmax * 2));
	rg_round<<<256, 256>>>(xb, x, 4 * xmax);
	CK(cudaGetLastError());
	size_t wo = 0, yo = 0;
	for (int p = 0; p < P; p++) {
		ph[p].w = w + wo;
		ph[p].x = x + (p < P - 1 ? p % 4 : 0) * xmax;
		ph[p].xb = xb + (p < P - 1 ? p % 4 : 0) * xmax;
		ph[p].y = y + yo;
		wo += (size_t)ph[p].in * ph[p].out;
		yo += (size_t)M * ph[p].out;
	}
	struct pp_phase *phd;
	unsigned *bar;
	CK(cudaMalloc(&phd, P * sizeof *phd));
	CK(cudaMemcpy(phd, ph, P * sizeof *ph, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&bar, sizeof(unsigned)));
	float *ref = (float *)malloc(ytot * sizeof(float)), *got = (float *)malloc(ytot * sizeof(float));
	double floor_ms = wtot * 2.0 / bw * 1e3;

	int sms, per;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, pp_kernel<1>, PP_WB * 32, 0));
	int blocks = sms * per;

	/* the ring: its pages (RING_NP caps them), counters, partial sums, stalls (RING_STALL=
	 * ns before q/k/v (and lm_head), o, gate/up, down) */
	struct rg_args ra;
	int optin, rper = 0;
	CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
	ra.P = P, ra.M = M, ra.xrs = kmax + 32;
	size_t xsb = ((size_t)M * ra.xrs * 2 + 127) / 128 * 128;
	ra.NP = (int)(((size_t)optin - RG_HEAD - xsb) / RG_SLOT);
	ra.NP = ra.NP > RG_NPMAX ? RG_NPMAX : ra.NP;
	if (getenv("RING_NP")) {
		int np;
		if (sscanf(getenv("RING_NP"), "%d", &np) != 1 || np < RG_W) {
			fprintf(stderr, "persist: RING_NP=%s: want pages, at least %d\n",
			        getenv("RING_NP"), RG_W);
			exit(2);
		}
		ra.NP = np < ra.NP ? np : ra.NP;
	}
	size_t rsmem = RG_HEAD + xsb + (size_t)ra.NP * RG_SLOT;
	CK(cudaFuncSetAttribute(rg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)rsmem));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&rper, rg_kernel, 32 * RG_W, rsmem));
	if (ra.NP < RG_W || rper < 1) {
		fprintf(stderr, "persist: %s: the ring does not fit (%d pages)\n", gm->name, ra.NP);
		exit(1);
	}
	unsigned stall_h[4] = { 0, 0, 0, 0 }, *stall_d = NULL;
	int stalled = getenv("RING_STALL") != NULL;
	if (stalled && sscanf(getenv("RING_STALL"), "%u,%u,%u,%u", stall_h, stall_h + 1,
	                      stall_h + 2, stall_h + 3) != 4) {
		fprintf(stderr, "persist: RING_STALL=%s: want four ns values, NS,NS,NS,NS\n",
		        getenv("RING_STALL"));
		exit(2);
	}
	unsigned *stall_p = (unsigned *)calloc(P, sizeof(unsigned));
	for (int p = 1; p < P; p++)
		stall_p[p] = stall_h[p < P - 1 ? p % 4 : 0];
	CK(cudaMalloc(&ra.done, P * sizeof(unsigned)));
	CK(cudaMalloc(&stall_d, P * sizeof(unsigned)));
	CK(cudaMemcpy(stall_d, stall_p, P * sizeof(unsigned), cudaMemcpyHostToDevice));
	ra.ph = phd;
	ra.tl = NULL;
	ra.diag = getenv("RING_DIAG") ? atoi(getenv("RING_DIAG")) : 0;

	/* the kernels way, one graph; the packed way, another (the weights in the packed
	 * layout, gpu_matmul_fixed_pack, a copy of their own) */
	const char *names[NWAYS] = { "kernels", "persist", "persist-nopf", "ring", "ring-stall",
	                             "packed" };
	int on[NWAYS];
	for (int mode = 0; mode < NWAYS; mode++)
		on[mode] = way_on(names[mode]) && (mode != 4 || stalled);
	on[0] = 1;
	cudaGraph_t gr;
	cudaGraphExec_t ge[2];
	for (int pk = 0; pk < 1 + on[5]; pk++) {
		for (int p = 0; pk && p < P; p++)
			if (gpu_matmul_fixed_pack(st, ph[p].w, DICE_BF16, ph[p].out, ph[p].in) != 1) {
				fprintf(stderr, "persist: %s: no packed copy of product %d\n", gm->name, p);
				exit(1);
			}
		CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
		for (int p = 0; p < P; p++)
			if (gpu_matmul_fixed(st, ph[p].y, ph[p].x, ph[p].w, DICE_BF16, M, ph[p].in,
			                     ph[p].out))
				exit(1);
		CK(cudaStreamEndCapture(st, &gr));
		CK(cudaGraphInstantiate(&ge[pk], gr, 0));
		CK(cudaGraphDestroy(gr));
	}
	CK(cudaStreamSynchronize(st));

	int nmode = NWAYS;
	double med[NWAYS];
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	double *t = (double *)malloc(sizeof(double) * NWAYS * (reps + 1));
	for (int r = -1; r < reps; r++) {       /* the ways alternate, run by run; r = -1 warms up */
		for (int mode = 0; mode < nmode; mode++) {
			if (!on[mode])
				continue;
			CK(cudaMemsetAsync(y, 0xff, ytot * sizeof(float), st));
			CK(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
			CK(cudaMemsetAsync(ra.done, 0, P * sizeof(unsigned), st));
			CK(cudaEventRecord(e0, st));
			if (mode == 0 || mode == 5) {
				CK(cudaGraphLaunch(ge[mode == 5], st));
			} else if (mode >= 3) {
				ra.stall = mode == 4 ? stall_d : NULL;
				void *args[] = { &ra };
				CK(cudaLaunchCooperativeKernel((const void *)rg_kernel, dim3(sms), 
				                               dim3(32 * RG_W), args, rsmem, st));
			} else {
				void *args[] = { &phd, &P, &M, &bar };
				CK(cudaLaunchCooperativeKernel(mode == 1 ? (const void *)pp_kernel<1> :
				                               (const void *)pp_kernel<0>, dim3(blocks),
				                               dim3(PP_WB * 32), args, 0, st));
			}
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= 0)
				t[mode * reps + r] = ms;
			CK(cudaMemcpy(mode ? got : ref, y, ytot * sizeof(float), cudaMemcpyDeviceToHost));
			if (mode && !(mode >= 3 && mode <= 4 && ra.diag) &&
			    memcmp(ref, got, ytot * sizeof(float))) {
				size_t d = 0;
				for (size_t i = 0; i < ytot; i++)
					d += memcmp(ref + i, got + i, sizeof(float)) != 0;
				fprintf(stderr, "persist: %s M=%d: %s differs from kernels in %zu of %zu\n",
				        gm->name, M, names[mode], d, ytot);
				exit(1);
			}
		}
	}
	if (getenv("RING_TL"))
		rg_timeline(&ra, P, sms, rsmem, st, gm->name, stalled ? stall_d : NULL);
	for (int mode = 0; mode < nmode; mode++) {
		if (!on[mode])
			continue;
		bench_sort(t + mode * reps, reps);
		med[mode] = t[mode * reps + reps / 2];
		printf("%-5s M=%d %-13s %8.3f ms  %5.1f%% of floor %.3f ms  (%d products, %d blocks of %d)\n",
		       gm->name, M, names[mode], med[mode], 100 * floor_ms / med[mode], floor_ms, P,
		       mode == 3 || mode == 4 ? sms : mode == 1 || mode == 2 ? blocks : 0,
		       mode == 3 || mode == 4 ? 32 * RG_W : mode == 1 || mode == 2 ? PP_WB * 32 : 0);
	}
	printf("%-5s ring: %d pages of %d bytes, %zu bytes of shared memory a block%s%s\n", gm->name,
	       ra.NP, RG_SLOT, rsmem, stalled ? ", stalls (ns) " : "",
	       stalled ? getenv("RING_STALL") : "");
	fflush(stdout);
	free(t);
	free(ref);
	free(got);
	free(ph);
	for (int pk = 0; pk < 1 + on[5]; pk++)
		CK(cudaGraphExecDestroy(ge[pk]));
	for (int p = 0; on[5] && p < P; p++)
		gpu_matmul_fixed_unpack(ph[p].w);
	CK(cudaFree(phd));
	CK(cudaFree(bar));
	CK(cudaFree(ra.done));
	CK(cudaFree(stall_d));
	free(stall_p);
	CK(cudaFree(w));
	CK(cudaFree(x));
	CK(cudaFree(xb));
	CK(cudaFree(y));
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 9, M = argc > 3 ? atoi(argv[3]) : 4;
	char *list = strdup(argc > 2 ? argv[2] : "1.7b,4b,8b"), *save = NULL;
	cudaStream_t st;
	cudaDeviceProp prop;

	if (reps < 1 || M < 1 || M > 8) {
		fprintf(stderr, "usage: persist [REPS [GEOMS [M]]] (M 1..8)\n");
		return 2;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	double bw = bench_copy_bw(st);
	printf("# %s, %d SMs; copy %.1f GB/s; median of %d runs\n", prop.name,
	       prop.multiProcessorCount, bw / 1e9, reps);
	for (char *g = strtok_r(list, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
		const struct geom *gm = NULL;
		for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
			if (!strcmp(geoms[i].name, g))
				gm = &geoms[i];
		if (!gm) {
			fprintf(stderr, "persist: unknown geometry %s\n", g);
			return 2;
		}
		run_geom(gm, reps, M, bw, st);
	}
	free(list);
	return 0;
}
