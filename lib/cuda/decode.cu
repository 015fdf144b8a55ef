/* decode.cu: the engine forward's cache and fused ops (struct ops kv_append, attention_kv,
 * qkv_prep, swiglu_cat, add_rmsnorm), for all sequences of a forward in one launch each.
 *
 * attention_kv is flash-decoding: one block per (sequence, tile of 32 query rows, kv head,
 * split of the keys). Row r = t * group + g is query t of head kh * group + g, so a K/V tile
 * is read from global memory once for all query heads of its kv group and all T rows. Keys
 * stream through shared memory (converted to fp32) DK_KT at a time with 16-byte loads, the
 * next tile's loads in flight while the current one is used. Warp w owns rows w, w+4, ...:
 * lane j scores key j against each of them, then every lane folds the tile into its output
 * channels (4 or 8 per lane) of each row. Scores are in the log2 domain (q scaled by
 * log2(e) / sqrt(HD) once). A sequence of S keys (cache + new rows) is split into
 * dk_split_len(S) keys per block (at least DK_SPLIT_TILES tiles, and at most DK_SPLITS splits:
 * a function of S alone, never of the batch or the grid, so a row's result is the same bits
 * alone or in any batch); when a sequence has more than one split its partial (max, sum,
 * output) triples per (row, head) are merged in split order: by a second kernel here, inside
 * the cluster of its splits in the tensor-core variant below. DICE_DK_SPLIT=SPLITS,TILES sets
 * the two for a process (bench/: both trade batch-1 parallelism against per-block work). */
#include <math.h>

#include "common.cuh"

#define DK_WARPS 4
#define DK_THREADS (32 * DK_WARPS)
#define DK_RW 8                         /* rows per warp, at most */
#define DK_ROWS (DK_RW * DK_WARPS)      /* rows per block */
#define DK_KT 32                        /* keys per tile (= lanes) */
#define DK_HDMAX 256
#define DK_SPLIT_TILES 8                /* keys per split: at least 8 tiles ... */
#define DK_SPLITS 8                     /* ... and at most 8 splits (defaults) */
#define DK_SPLITS_MAX 8                 /* (a cluster of dm_kernel blocks, portable) */

/* the split geometry of this process: at most sp.n splits of at least sp.tiles tiles */
struct dk_splits {
	int n, tiles;
};

/* keys per split of a sequence of S keys, and its number of splits */
static __host__ __device__ __forceinline__ int dk_split_len(int S, struct dk_splits sp)
{
	int tiles = CEIL_DIV(CEIL_DIV(S, DK_KT), sp.n);
	return DK_KT * (tiles > sp.tiles ? tiles : sp.tiles);
}

static __host__ __device__ __forceinline__ int dk_nsplit(int S, struct dk_splits sp)
{
	return CEIL_DIV(S, dk_split_len(S, sp));
}

/* DICE_DK_SPLIT=N,TILES or the defaults, read once */
static struct dk_splits dk_splits_get(void)
{
	static struct dk_splits sp;
	if (!sp.n) {
		const char *e = getenv("DICE_DK_SPLIT");
		int n = DK_SPLITS, t = DK_SPLIT_TILES;
		if (e && (sscanf(e, "%d,%d", &n, &t) != 2 || n < 1 || n > DK_SPLITS_MAX || t < 1)) {
			warn_msg("DICE_DK_SPLIT=%s: want SPLITS,TILES (1..%d, >= 1); "
			         "using %d,%d", e, DK_SPLITS_MAX, DK_SPLITS, DK_SPLIT_TILES);
			n = DK_SPLITS;
			t = DK_SPLIT_TILES;
		}
		sp.n = n;
		sp.tiles = t;
	}
	return sp;
}

struct dk_args {
	float *out;
	void *out16;                        /* or NULL: out rounded to 16 bits (f16o 1: f16, 0: bf16) */
	int f16o;
	const float *q;
	struct kv_batch b;                  /* device arrays */
	int l, NH, NKV, HD, group, block, rtiles;
	float qscale;                       /* log2(e) / sqrt(HD) */
	float *pm, *pl, *po;                /* partials ((split, row, head)[, HD]) */
	struct dk_splits sp;
	int nz, cl;                         /* dm_kernel: splits per place; 1: as a cluster */
	int trig;                           /* dm_kernel: where it lets the next kernel start (0 at
	                                     * its start, 1 after its wait, 2 after its keys) */
};

/* element type loads: 16 bytes of the cache as fp32 into dst (8 or 4 values) */
static __device__ __forceinline__ void dk_unpack(float *dst, uint4 u, int dt)
{
	if (dt == DICE_F32) {
		*(float4 *)dst = make_float4(__uint_as_float(u.x), __uint_as_float(u.y),
		                             __uint_as_float(u.z), __uint_as_float(u.w));
		return;
	}
	unsigned w[4] = { u.x, u.y, u.z, u.w };
	float f[8];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (dt == DICE_BF16) {
			f[2 * i] = __uint_as_float(w[i] << 16);
			f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
		} else {
			f[2 * i] = __half2float(__ushort_as_half((unsigned short)(w[i] & 0xffff)));
			f[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(w[i] >> 16)));
		}
	}
	*(float4 *)dst = make_float4(f[0], f[1], f[2], f[3]);
	*(float4 *)(dst + 4) = make_float4(f[4], f[5], f[6], f[7]);
}

/* the tile of keys s0.. into registers: NLD 16-byte chunks per thread and matrix */
static __device__ __forceinline__ void dk_load(uint4 *kr, uint4 *vr, const char *kb,
                                               const char *vb, int NLD, int s0, int s_end,
                                               int cpk, int rowb, int es)
{
#pragma unroll
	for (int u = 0; u < NLD; u++) {
		int idx = threadIdx.x + u * DK_THREADS, j = idx / cpk, c = idx % cpk;
		kr[u] = make_uint4(0, 0, 0, 0);
		vr[u] = kr[u];
		if (j < DK_KT && s0 + j < s_end) {
			size_t g = (size_t)(s0 + j) * rowb + (size_t)c * 16;
			kr[u] = __ldg((const uint4 *)(kb + g));
			vr[u] = __ldg((const uint4 *)(vb + g));
		}
	}
}

static __device__ __forceinline__ void dk_store(const uint4 *kr, const uint4 *vr, float *ks,
                                                float *vs, int NLD, int cpk, int HD, int dt,
                                                int es)
{
	int per = 16 / es;
#pragma unroll
	for (int u = 0; u < NLD; u++) {
		int idx = threadIdx.x + u * DK_THREADS, j = idx / cpk, c = (idx % cpk) * per;
		if (j < DK_KT) {
			dk_unpack(ks + j * (HD + 4) + c, kr[u], dt);
			dk_unpack(vs + j * HD + c, vr[u], dt);
		}
	}
}

static __device__ __forceinline__ void dk_body(const struct dk_args &a, const int NLD,
                                               const int NO4)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	extern __shared__ float4 dk_smem[];
	float *qs = (float *)dk_smem;                   /* (DK_ROWS, HD) */
	int HD = a.HD;
	float *ks = qs + DK_ROWS * HD;                  /* (DK_KT, HD + 4): no bank conflicts */
	float *vs = ks + DK_KT * (HD + 4);              /* (DK_KT, HD) */
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int s = blockIdx.x / a.rtiles, rt = blockIdx.x % a.rtiles, kh = blockIdx.y;
	int r0 = a.b.row0[s], T = a.b.row0[s + 1] - r0, len = a.b.len[s], S = len + T;
	int TG = T * a.group, rbase = rt * DK_ROWS;
	int split_len = dk_split_len(S, a.sp), split = dk_nsplit(S, a.sp) > 1;
	int s_begin = blockIdx.z * split_len, s_end = min(S, s_begin + split_len);
	int dt = (int)a.b.dt, es = dt == DICE_F32 ? 4 : 2;

	if (rbase >= TG || s_begin >= S)
		return;
	/* the last key any row of this block may see: the end of the last row's block */
	int tlast = min(T, CEIL_DIV(min(TG, rbase + DK_ROWS), a.group)) - 1;
	s_end = min(s_end, ((len + tlast) / a.block + 1) * a.block);

	int nr = 0, qb[DK_RW], hh[DK_RW], tt[DK_RW];
#pragma unroll
	for (int i = 0; i < DK_RW; i++) {
		int row = rbase + wid + DK_WARPS * i;
		int ok = row < TG && wid + DK_WARPS * i < DK_ROWS;
		tt[i] = ok ? row / a.group : 0;
		hh[i] = kh * a.group + (ok ? row % a.group : 0);
		qb[i] = (len + tt[i]) / a.block;
		nr += ok;
	}
	for (int idx = threadIdx.x; idx < DK_ROWS * HD; idx += DK_THREADS) {
		int r = idx / HD, c = idx % HD, row = rbase + r;
		float v = 0.0f;
		if (row < TG) {
			int t = row / a.group, h = kh * a.group + row % a.group;
			v = a.q[((size_t)(r0 + t) * a.NH + h) * HD + c] * a.qscale;
		}
		qs[idx] = v;
	}

	size_t lay = (size_t)a.l * a.b.cap[s] * a.NKV * HD;
	int rowb = a.NKV * HD * es, cpk = HD * es / 16;
	const char *kb = (const char *)a.b.k[s] + (lay + (size_t)kh * HD) * es;
	const char *vb = (const char *)a.b.v[s] + (lay + (size_t)kh * HD) * es;
	uint4 kr[16], vr[16];
	float o[DK_RW][4 * 2], mx[DK_RW], lsum[DK_RW];

#pragma unroll
	for (int i = 0; i < DK_RW; i++) {
		mx[i] = -INFINITY;
		lsum[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < 4 * NO4; c++)
			o[i][c] = 0.0f;
	}
	int s0 = s_begin;
	if (s0 < s_end)
		dk_load(kr, vr, kb, vb, NLD, s0, s_end, cpk, rowb, es);
	while (s0 < s_end) {
		__syncthreads();                        /* the last tile's readers are done */
		dk_store(kr, vr, ks, vs, NLD, cpk, HD, dt, es);
		__syncthreads();
		int s1 = s0 + DK_KT;
		if (s1 < s_end)
			dk_load(kr, vr, kb, vb, NLD, s1, s_end, cpk, rowb, es);
		int key = s0 + lane, kblk = key / a.block;
		float d[DK_RW], p[DK_RW];
#pragma unroll
		for (int i = 0; i < DK_RW; i++)
			d[i] = 0.0f;
		const float4 *kk = (const float4 *)(ks + lane * (HD + 4));
		for (int c4 = 0; c4 < HD / 4; c4++) {
			float4 k4 = kk[c4];
#pragma unroll
			for (int i = 0; i < DK_RW; i++) {
				if (i < nr) {
					float4 q4 = ((const float4 *)(qs + (wid + DK_WARPS * i) * HD))[c4];
					d[i] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
				}
			}
		}
#pragma unroll
		for (int i = 0; i < DK_RW; i++) {
			if (i >= nr)
				continue;
			int ok = key < s_end && kblk <= qb[i];
			float sc = ok ? d[i] : -INFINITY;
			float mnew = fmaxf(mx[i], warp_max(sc));
			float corr = mnew == -INFINITY ? 1.0f : exp2f(mx[i] - mnew);
			p[i] = ok ? exp2f(sc - mnew) : 0.0f;
			lsum[i] = lsum[i] * corr + p[i];
#pragma unroll
			for (int c = 0; c < 4 * NO4; c++)
				o[i][c] *= corr;
			mx[i] = mnew;
		}
		int nk = min(DK_KT, s_end - s0);
		for (int j = 0; j < nk; j++) {
#pragma unroll
			for (int u = 0; u < NO4; u++) {
				int ch = 128 * u + 4 * lane;
				float4 v4 = ch < HD ? *(const float4 *)(vs + j * HD + ch) :
				                      make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
				for (int i = 0; i < DK_RW; i++) {
					if (i < nr) {
						float pj = __shfl_sync(0xffffffffu, p[i], j);
						o[i][4 * u] += pj * v4.x;
						o[i][4 * u + 1] += pj * v4.y;
						o[i][4 * u + 2] += pj * v4.z;
						o[i][4 * u + 3] += pj * v4.w;
					}
				}
			}
		}
		s0 = s1;
	}
#pragma unroll
	for (int i = 0; i < DK_RW; i++) {
		if (i >= nr)
			continue;
		float l = warp_sum(lsum[i]);
		size_t n = (size_t)r0 + tt[i], pi = ((size_t)blockIdx.z * a.b.N + n) * a.NH + hh[i];
		float *dst = !split ? a.out + (n * a.NH + hh[i]) * HD : a.po + pi * HD;
		float inv = split ? 1.0f : l > 0.0f ? 1.0f / l : 0.0f;
		if (split && lane == 0) {
			a.pm[pi] = mx[i];
			a.pl[pi] = l;
		}
#pragma unroll
		for (int u = 0; u < NO4; u++) {
			int ch = 128 * u + 4 * lane;
			if (ch < HD)
				*(float4 *)(dst + ch) = make_float4(o[i][4 * u] * inv, o[i][4 * u + 1] * inv,
				                                    o[i][4 * u + 2] * inv,
				                                    o[i][4 * u + 3] * inv);
		}
	}
}

/* 16-bit cache with HD <= 128; fp32 with HD <= 128 or 16-bit with HD <= 256; the rest */
static __global__ void __launch_bounds__(DK_THREADS) dk_kernel4(struct dk_args a)
{
	dk_body(a, 4, 1);
}

static __global__ void __launch_bounds__(DK_THREADS) dk_kernel8(struct dk_args a)
{
	dk_body(a, 8, 2);
}

static __global__ void __launch_bounds__(DK_THREADS) dk_kernel16(struct dk_args a)
{
	dk_body(a, 16, 2);
}

/* ---------------------------------------------------------------- the tensor-core variant
 * For a 16-bit cache and HD 128 (the SDAR models): one block per (sequence, tile of 16 query
 * rows, kv head, split); its 4 warps take the split's 32-key tiles in turn (warp w: tiles w,
 * w+4, ...), each with its own online softmax over all 16 rows, and the block merges the
 * four (max, sum, output) triples in warp order. Scores and P V run on the tensor cores
 * (mma m16n8k16, fp32 accumulation). By default q (scaled) and the probabilities are each
 * rounded to the cache's 16-bit type, as a bf16 / fp16 flash attention (and the prefill
 * path) takes them, the softmax sums staying in fp32; with DICE_DK_EXACT=1
 * (gpu_set_dk_exact) each is split into a 16-bit high part and a 16-bit remainder (two
 * products each), which keeps fp32 accuracy against the cache's exact keys and values, at
 * about twice the tensor work (template HL: the parts, 1 or 2; every kernel below takes the
 * same, so the bits never depend on which runs). A tile multiplies its running output by
 * the softmax's correction only when some row's maximum moved (o * 1 is o). Keys come from global
 * memory straight into the B fragments (16-byte loads); values go through shared memory
 * (cp.async, 16-byte chunks swizzled by key) and ldmatrix.trans. While a warp works on a tile,
 * the values of its next two are in flight (two buffers), the keys of the next one into the
 * registers the scores no longer need, and those of the one after into L2; the first tile and
 * the second's values are asked for before the q fragments are made.
 *
 * The splits of one (sequence, row tile, kv head) are the blocks of one thread block cluster
 * (sm_90; blockIdx.x = its place * splits + split): each block leaves its merged triple in
 * shared memory, and after a cluster barrier block z finishes the output elements z, z +
 * splits, ... (in float4s) from the triples of all the sequence's splits, read in split order
 * through distributed shared memory; a second barrier keeps every block's shared memory alive
 * until the others are done. A sequence with one split finishes alone the same way, so a
 * row's bits never depend on the cluster size (the batch's largest split count). Without
 * clusters (before sm_90, or if the cluster launch is refused), a sequence with more than one
 * split writes its triples to global memory and dk_merge_kernel merges them. */
#define DM_ROWS 16
#define DM_HD 128
#ifndef DM_WARPS                        /* (-DDM_WARPS=8: a bench variant) */
#define DM_WARPS 4
#endif
#define DM_KT 32
#define DM_VBYTES (DM_KT * DM_HD * 2)               /* one value tile */
#define DM_QOFF (DM_WARPS * 2 * DM_VBYTES)          /* after (warp, stage) value tiles */
#define DM_QBYTES (4 * 2 * 2 * 32 * 16)             /* q fragments: blk, step, hi/lo, lane */
#define DM_SMEM (DM_QOFF + DM_QBYTES)
/* after the walk, over the value tiles: the warps' triples, then the block's */
#define DM_WST (DM_HD + 8)                          /* warp output row stride (floats) */
#define DM_WO 0                                     /* (warp, row, DM_WST) */
#define DM_WML (DM_WO + DM_WARPS * DM_ROWS * DM_WST * 4)    /* (warp, row, max / sum) */
#define DM_BO (DM_WML + DM_WARPS * DM_ROWS * 2 * 4)         /* (row, HD) */
#define DM_BML (DM_BO + DM_ROWS * DM_HD * 4)                /* (row, max / sum) */
#if DM_BML + DM_ROWS * 2 * 4 > DM_QOFF
#error "dm_kernel: the merge does not fit over the value tiles"
#endif

/* v = hi + lo, both 16-bit pairs */
static __device__ __forceinline__ void dm_split(float a, float b, int f16, unsigned *hi,
                                                unsigned *lo)
{
	float ha, hb;
	if (f16) {
		__half2 h = __floats2half2_rn(a, b);
		ha = __low2float(h);
		hb = __high2float(h);
		*hi = *(unsigned *)&h;
	} else {
		__nv_bfloat162 h = __floats2bfloat162_rn(a, b);
		ha = __low2float(h);
		hb = __high2float(h);
		*hi = *(unsigned *)&h;
	}
	*lo = gpu_pack2(a - ha, b - hb, f16);
}

/* a warp's keys s0 .. s0 + 31 (past s_end: zero) as B fragments: n-tile j holds key
 * s0 + 8 j + g, inputs 32 blk + 8 q .. +7. CLAMP: past s_end, key s_end - 1 again (key 0
 * if s_end is 0) instead of zero: their scores are masked to -inf by value, so the same bits
 * with fewer instructions. */
template <int CLAMP = 0>
static __device__ __forceinline__ void dm_kload(uint4 kr[4][4], const char *kb, unsigned rowb,
                                                int s0, int s_end, int g, int q)
{
#pragma unroll
	for (int j = 0; j < 4; j++) {
		int key = s0 + 8 * j + g;
		if (CLAMP)
			key = max(min(key, s_end - 1), 0);
		const char *p = kb + (unsigned)key * rowb + 16 * q;
#pragma unroll
		for (int blk = 0; blk < 4; blk++) {
			if (CLAMP) {
				kr[j][blk] = __ldg((const uint4 *)(p + 64 * blk));
				continue;
			}
			kr[j][blk] = make_uint4(0, 0, 0, 0);
			if (key < s_end)
				kr[j][blk] = __ldg((const uint4 *)(p + 64 * blk));
		}
	}
}

/* the same keys into L2 (the rows' 256 bytes, lane j: key s0 + j) */
static __device__ __forceinline__ void dm_kprefetch(const char *kb, unsigned rowb, int s0,
                                                    int s_end, int lane)
{
	if (s0 + lane < s_end) {
		const char *p = kb + (unsigned)(s0 + lane) * rowb;
		asm volatile("prefetch.global.L2 [%0];\n" :: "l"(p));
		asm volatile("prefetch.global.L2 [%0];\n" :: "l"(p + 128));
	}
}

/* the warp's values of keys s0 .. s0 + 31 into the tile at shared address vs (cp.async, past
 * s_end: zero): 32 keys x 16 chunks, chunk c of key r at chunk c ^ (r & 7); one commit group
 * (empty when the tile is past the split). LEAN: the same copies with the addresses stepped
 * (lane's chunk i: key 2 i + lane / 16, chunk lane % 16) and no checks for a whole tile. */
template <int LEAN = 0>
static __device__ __forceinline__ void dm_vload(unsigned vs, const char *vb, unsigned rowb,
                                                int s0, int s_end, int lane)
{
	if (LEAN && s0 < s_end) {
		/* (r & 7 = 2 (i & 3) + hi, so chunk ch ^ (r & 7) = (ch ^ hi) ^ 2 (i & 3)) */
		int hi = lane >> 4, cx = (lane & 15) ^ hi, n = s_end - s0 - hi;
		unsigned off = (unsigned)(s0 + hi) * rowb + (lane & 15) * 16;
		unsigned d0 = vs + hi * (DM_HD * 2);
		if (s0 + DM_KT <= s_end) {
#pragma unroll
			for (int i = 0; i < 16; i++)
				asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
				             :: "r"(d0 + i * 2 * (DM_HD * 2) + ((cx ^ (2 * (i & 3))) << 4)),
				                "l"(vb + (off + 2 * i * rowb)) : "memory");
		} else {
#pragma unroll
			for (int i = 0; i < 16; i++) {
				int ok = 2 * i < n;
				asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
				             :: "r"(d0 + i * 2 * (DM_HD * 2) + ((cx ^ (2 * (i & 3))) << 4)),
				                "l"(ok ? vb + (off + 2 * i * rowb) : vb), "r"(ok ? 16 : 0)
				             : "memory");
			}
		}
	} else if (!LEAN && s0 < s_end) {
#pragma unroll
		for (int i = 0; i < 16; i++) {
			int c = lane + 32 * i, r = c >> 4, ch = c & 15, ok = s0 + r < s_end;
			const char *src = ok ? vb + (unsigned)(s0 + r) * rowb + ch * 16 : vb;
			unsigned dst = vs + r * (DM_HD * 2) + ((ch ^ (r & 7)) * 16);
			asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
			             :: "r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
		}
	}
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* a warp's first loads: the keys of its first tile (s0 .., up to e0) into kr and its values
 * into vs0, the values of its second (s1 .., up to e1) into vs1 and that one's keys into L2 */
template <int KL, int VL>
static __device__ __forceinline__ void dm_first(uint4 kr[4][4], const char *kb, const char *vb,
                                                unsigned rowb, int s0, int e0, int s1, int e1,
                                                unsigned vs0, unsigned vs1)
{
	int lane = threadIdx.x & 31;
	dm_kload<KL>(kr, kb, rowb, s0, e0, lane >> 2, lane & 3);
	dm_vload<VL>(vs0, vb, rowb, s0, e0, lane);
	dm_vload<VL>(vs1, vb, rowb, s1, e1, lane);
	dm_kprefetch(kb, rowb, s1, e1, lane);
}

/* one tile of a warp, keys s0 .. s0 + 31, its keys in kr and its values at vs: the scores of
 * the 16 rows (row g + 8 hh sees keys below lim[hh]), the online softmax (m, lsum, o), o +=
 * P V. Once the scores are made, the warp's next tile's keys (s1 .., up to e1; in L2 by then)
 * go into kr and the keys of the one after (s2 .., up to e2) into L2; at the end, that one's
 * values into vs. */
template <int KL = 0, int VL = 0, int HL = 2>
static __device__ __forceinline__ void dm_tile(float o[16][4], float *m, float *lsum,
                                               uint4 kr[4][4], unsigned vs, const uint4 *qf,
                                               const int *lim, int s0, int s1, int e1, int s2,
                                               int e2, const char *kb, const char *vb,
                                               unsigned rowb, int f16)
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	float sc[4][4], cr[2];

#pragma unroll
	for (int j = 0; j < 4; j++)
		sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
	for (int blk = 0; blk < 4; blk++) {
#pragma unroll
		for (int st = 0; st < 2; st++) {
#pragma unroll
			for (int hl = 0; hl < HL; hl++) {
				uint4 qa = qf[((blk * 2 + st) * 2 + hl) * 32 + lane];
#pragma unroll
				for (int j = 0; j < 4; j++) {
					unsigned b0 = st ? kr[j][blk].z : kr[j][blk].x;
					unsigned b1 = st ? kr[j][blk].w : kr[j][blk].y;
					gpu_mma16816(sc[j], qa.x, qa.y, qa.z, qa.w, b0, b1, f16);
				}
			}
		}
	}
	dm_kload<KL>(kr, kb, rowb, s1, e1, g, q);
	dm_kprefetch(kb, rowb, s2, e2, lane);
	/* online softmax per row (g: hh 0, g + 8: hh 1); a row's 32 keys sit in its quad */
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		float mx = -INFINITY;
#pragma unroll
		for (int j = 0; j < 4; j++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float v = s0 + 8 * j + 2 * q + e < lim[hh] ? sc[j][2 * hh + e] : -INFINITY;
				sc[j][2 * hh + e] = v;
				mx = fmaxf(mx, v);
			}
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		float mnew = fmaxf(m[hh], mx);
		float corr = mnew == -INFINITY ? 1.0f : exp2f(m[hh] - mnew), rs = 0.0f;
#pragma unroll
		for (int j = 0; j < 4; j++) {
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float v = sc[j][2 * hh + e];
				float p = v == -INFINITY ? 0.0f : exp2f(v - mnew);
				sc[j][2 * hh + e] = p;
				rs += p;
			}
		}
		rs += __shfl_xor_sync(0xffffffffu, rs, 1);
		rs += __shfl_xor_sync(0xffffffffu, rs, 2);
		lsum[hh] = lsum[hh] * corr + rs;
		m[hh] = mnew;
		cr[hh] = corr;
	}
	/* o *= corr only where some row's maximum moved: o * 1 is o, so the same bits */
	if (__any_sync(0xffffffffu, cr[0] != 1.0f || cr[1] != 1.0f)) {
#pragma unroll
		for (int nt = 0; nt < 16; nt++) {
#pragma unroll
			for (int hh = 0; hh < 2; hh++) {
				o[nt][2 * hh] *= cr[hh];
				o[nt][2 * hh + 1] *= cr[hh];
			}
		}
	}
	/* P (hi + lo) as the A fragments of keys 16 kk .. 16 kk + 15 */
	unsigned ph[2][4], pl[2][4];
#pragma unroll
	for (int kk = 0; kk < 2; kk++) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const float *p2 = &sc[2 * kk + (i >> 1)][2 * (i & 1)];
			if (HL == 2)
				dm_split(p2[0], p2[1], f16, &ph[kk][i], &pl[kk][i]);
			else
				ph[kk][i] = gpu_pack2(p2[0], p2[1], f16);
		}
	}
	asm volatile("cp.async.wait_group 1;\n" ::: "memory");     /* this tile's values */
	__syncwarp();
#pragma unroll
	for (int np = 0; np < 8; np++) {                /* channel n-tiles 2 np, 2 np + 1 */
#pragma unroll
		for (int kk = 0; kk < 2; kk++) {
			int mi = lane >> 3, r = 16 * kk + (mi & 1) * 8 + (lane & 7);
			int ch = 2 * np + (mi >> 1);
			unsigned addr = vs + r * (DM_HD * 2) + ((ch ^ (r & 7)) * 16);
			unsigned b0, b1, b2, b3;
			asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			             : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3) : "r"(addr) : "memory");
			gpu_mma16816(o[2 * np], ph[kk][0], ph[kk][1], ph[kk][2], ph[kk][3], b0, b1, f16);
			if (HL == 2)
				gpu_mma16816(o[2 * np], pl[kk][0], pl[kk][1], pl[kk][2], pl[kk][3], b0, b1,
				             f16);
			gpu_mma16816(o[2 * np + 1], ph[kk][0], ph[kk][1], ph[kk][2], ph[kk][3], b2, b3,
			             f16);
			if (HL == 2)
				gpu_mma16816(o[2 * np + 1], pl[kk][0], pl[kk][1], pl[kk][2], pl[kk][3], b2, b3,
				             f16);
		}
	}
	__syncwarp();                                   /* every lane is done with the tile */
	dm_vload<VL>(vs, vb, rowb, s2, e2, lane);
}

/* one (max m, sum *lp, output xp[0..3]) triple folded into the running (L, O) at the common
 * max M: how the warps of a block, then the splits of a sequence, are merged in order */
static __device__ __forceinline__ void dm_fold(float4 &O, float &L, float M, float m,
                                               const float *lp, const float *xp)
{
	float sc = exp2f(m - M);
	float4 x = *(const float4 *)xp;
	L += *lp * sc;
	O.x += x.x * sc;
	O.y += x.y * sc;
	O.z += x.z * sc;
	O.w += x.w * sc;
}

/* the splits of a sequence, merged in split order into a running (max M, sum L, output O),
 * from (-inf, 0, 0): split (m, l, x) with m = -inf (no keys) is passed over, else M' =
 * max(M, m), L' = L a + l b, O' = O a + x b with a = 2^(M - M'), b = 2^(m - M') (explicit
 * roundings: every kernel's merge gives the same bits). dm_scales: a and b, and M'. */
static __device__ __forceinline__ float dm_scales(float M, float m, float *a, float *b)
{
	float Mn = fmaxf(M, m);
	*a = exp2f(M - Mn);
	*b = exp2f(m - Mn);
	return Mn;
}

static __device__ __forceinline__ float dm_merge1(float O, float a, float x, float b)
{
	return __fmaf_rn(O, a, __fmul_rn(x, b));
}

static __device__ __forceinline__ void dm_merge(float4 &O, float &L, float &M, float m, float l,
                                                float4 x)
{
	if (m == -INFINITY)
		return;
	float a, b;
	M = dm_scales(M, m, &a, &b);
	L = dm_merge1(L, a, l, b);
	O.x = dm_merge1(O.x, a, x.x, b);
	O.y = dm_merge1(O.y, a, x.y, b);
	O.z = dm_merge1(O.z, a, x.z, b);
	O.w = dm_merge1(O.w, a, x.w, b);
}

/* distributed shared memory (cluster launches, sm_90): a cluster barrier whose arrival
 * releases this block's writes to the others (REL 1), or orders nothing (REL 0: where every
 * read of another block's shared memory before it has been used already, so that only its
 * lifetime is at stake) */
template <int REL>
static __device__ __forceinline__ void dm_cluster_sync(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	if (REL)
		__cluster_barrier_arrive();
	else
		__cluster_barrier_arrive_relaxed();
	__cluster_barrier_wait();
#endif
}

static __device__ __forceinline__ const float *dm_rank(const float *p, int cl, int z)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	if (cl)
		return (const float *)__cluster_map_shared_rank(p, (unsigned)z);
#endif
	return p;
}

/* where a lane's rows g and g + 8 of the row tile at rbase (kv head kh) start in q, NULL past
 * TG (reads no memory: before the PDL wait) */
static __device__ __forceinline__ void dm_qrows(const float *qr[2], const struct dk_args &a,
                                                int r0, int rbase, int TG, int kh)
{
	int g = (threadIdx.x & 31) >> 2;
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		int row = rbase + g + 8 * hh, t = row / a.group, h = kh * a.group + row % a.group;
		qr[hh] = row < TG ? a.q + ((size_t)(r0 + t) * a.NH + h) * DM_HD : NULL;
	}
}

/* the q fragments of those rows (dm_qrows), scaled, by a block of THREADS / 32 warps: entry
 * (blk, step, hl, lane) holds rows g, g+8 and inputs 32 blk + 8 q + 4 step .. +3 (the
 * permutation of matmul_fixed.cu), the 16-bit high parts (hl 0) and, with HL 2, the
 * remainders (hl 1) */
template <int WARPS, int HL>
static __device__ __forceinline__ void dm_qfrags_at(uint4 *qf, const float *const qr[2],
                                                    float qs, int f16)
{
#pragma unroll
	for (int i = 0; i < 256 / (WARPS * 32); i++) {
		int e = threadIdx.x + WARPS * 32 * i, blk = e >> 6, st = (e >> 5) & 1;
		int l = e & 31, d0 = 32 * blk + 8 * (l & 3) + 4 * st;
		float4 x[2];
#pragma unroll
		for (int hh = 0; hh < 2; hh++)
			x[hh] = qr[hh] ? *(const float4 *)(qr[hh] + d0) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		uint4 hi, lo;
		if (HL == 2) {
			dm_split(x[0].x * qs, x[0].y * qs, f16, &hi.x, &lo.x);
			dm_split(x[1].x * qs, x[1].y * qs, f16, &hi.y, &lo.y);
			dm_split(x[0].z * qs, x[0].w * qs, f16, &hi.z, &lo.z);
			dm_split(x[1].z * qs, x[1].w * qs, f16, &hi.w, &lo.w);
			qf[((blk * 2 + st) * 2 + 1) * 32 + l] = lo;
		} else {
			hi = make_uint4(gpu_pack2(x[0].x * qs, x[0].y * qs, f16),
			                gpu_pack2(x[1].x * qs, x[1].y * qs, f16),
			                gpu_pack2(x[0].z * qs, x[0].w * qs, f16),
			                gpu_pack2(x[1].z * qs, x[1].w * qs, f16));
		}
		qf[((blk * 2 + st) * 2 + 0) * 32 + l] = hi;
	}
}

/* the q fragments of rows rbase .. rbase + 15 (kv head kh): dm_qrows, then dm_qfrags_at */
template <int WARPS, int HL>
static __device__ __forceinline__ void dm_qfrags(uint4 *qf, const struct dk_args &a, int r0,
                                                 int rbase, int TG, int kh, int f16)
{
	const float *qr[2];
	dm_qrows(qr, a, r0, rbase, TG, kh);
	dm_qfrags_at<WARPS, HL>(qf, qr, a.qscale, f16);
}

/* output channels c .. c + 3 of row rbase + r of a tile, O / L (zeros where L is 0) */
static __device__ __forceinline__ void dm_out(const struct dk_args &a, float4 O, float L, int r0,
                                              int kh, int rbase, int r, int c)
{
	int row = rbase + r, t = row / a.group, h = kh * a.group + row % a.group;
	size_t i = ((size_t)(r0 + t) * a.NH + h) * DM_HD + c;
	float4 v = L > 0.0f ? make_float4(O.x / L, O.y / L, O.z / L, O.w / L) :
	                      make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	*(float4 *)(a.out + i) = v;
	if (a.out16)
		*(uint2 *)((char *)a.out16 + i * 2) = make_uint2(gpu_pack2(v.x, v.y, a.f16o),
		                                                 gpu_pack2(v.z, v.w, a.f16o));
}

/* output channels c .. c + 3 of row rbase + r of a tile: the triples of splits 0 .. ns - 1
 * merged in split order (dm_merge). Split j's: maxima and sums at dm_rank(ml, cl, j) + j *
 * mlz (row r's at 2 r, 2 r + 1), outputs at dm_rank(ob, cl, j) + j * oz (row r's at r * ost). */
static __device__ __forceinline__ void dm_finish(const struct dk_args &a, const float *ml,
                                                 const float *ob, int cl, int mlz, int oz,
                                                 int ost, int ns, int r0, int kh, int rbase,
                                                 int r, int c)
{
	float M = -INFINITY, L = 0.0f;
	float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
	for (int j = 0; j < DK_SPLITS_MAX; j++) {
		if (j < ns) {
			const float *mlj = dm_rank(ml, cl, j) + j * mlz + 2 * r;
			dm_merge(O, L, M, mlj[0], mlj[1],
			         *(const float4 *)(dm_rank(ob, cl, j) + j * oz + r * ost + c));
		}
	}
	dm_out(a, O, L, r0, kh, rbase, r, c);
}

/* the start of a split [.., e) for the rows g, g + 8 of the tile at rbase: their key limits
 * (a row sees the keys below its block's end, at most e) and empty (o, m, lsum) */
static __device__ __forceinline__ void dm_begin(const struct dk_args &a, int rbase, int TG,
                                                int len, int e, int lim[2], float o[16][4],
                                                float m[2], float lsum[2])
{
	int g = (threadIdx.x & 31) >> 2;
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		int row = rbase + g + 8 * hh;
		lim[hh] = row < TG ? min(e, ((len + row / a.group) / a.block + 1) * a.block) : 0;
		m[hh] = -INFINITY;
		lsum[hh] = 0.0f;
	}
#pragma unroll
	for (int nt = 0; nt < 16; nt++)
		o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
}

template <int F16, int HL>
static __global__ void __launch_bounds__(DM_WARPS * 32) dm_kernel(struct dk_args a)
{
	if (!a.trig)
		gpu_pdl_trigger();
	GPU_TL_START
	extern __shared__ float4 dk_smem[];
	char *sm = (char *)dk_smem;
	uint4 *qf = (uint4 *)(sm + DM_QOFF);
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
	int z = blockIdx.x % a.nz, place = blockIdx.x / a.nz;
	int s = place / a.rtiles, rt = place % a.rtiles, kh = blockIdx.y;
	int r0 = a.b.row0[s], T = a.b.row0[s + 1] - r0, len = a.b.len[s], S = len + T;
	int TG = T * a.group, rbase = rt * DM_ROWS, NH = a.NH;
	int split_len = dk_split_len(S, a.sp), ns = dk_nsplit(S, a.sp);
	int s_begin = z * split_len, s_end = min(S, s_begin + split_len);
	const int f16 = F16;                            /* (the cache type, compiled in) */

	/* a row tile past the sequence's rows: so is the whole cluster; without a cluster, a
	 * split past the sequence's keys has nothing to do */
	if (rbase >= TG || (!a.cl && z >= ns))
		return;
	int tlast = min(T, CEIL_DIV(min(TG, rbase + DM_ROWS), a.group)) - 1;
	s_end = max(s_begin, min(s_end, ((len + tlast) / a.block + 1) * a.block));

	size_t lay = (size_t)a.l * a.b.cap[s] * a.NKV * DM_HD;
	unsigned rowb = (unsigned)a.NKV * DM_HD * 2;  /* (a layer of a cache is under 4 GB) */
	const char *kb = (const char *)a.b.k[s] + (lay + (size_t)kh * DM_HD) * 2;
	const char *vb = (const char *)a.b.v[s] + (lay + (size_t)kh * DM_HD) * 2;
	unsigned vs0 = (unsigned)__cvta_generic_to_shared(sm) + wid * 2 * DM_VBYTES;
	unsigned vs1 = vs0 + DM_VBYTES;
	const int step = DM_WARPS * DM_KT;
	int s0 = s_begin + wid * DM_KT;
	uint4 kr[4][4];

	/* the warp's first tile, the values of its second and the keys of its second into L2;
	 * then the q fragments, scaled, hi and lo: entry (blk, step, lane) holds rows g, g+8 and
	 * inputs 32 blk + 8 q + 4 step .. +3 (the permutation of matmul_fixed.cu). Up to here
	 * nothing read was written by the kernels before in the stream (the batch's arrays come
	 * with the forward's upload, which those kernels follow, and so do the cache's keys
	 * below len, written by earlier forwards): where the first two tiles' keys are all below
	 * len, their loads go out before the wait for the kernel that writes q and the new keys */
	const float *qr[2];
	int lim[2];
	float o[16][4], m[2], lsum[2];
	dm_qrows(qr, a, r0, rbase, TG, kh);
	dm_begin(a, rbase, TG, len, s_end, lim, o, m, lsum);
	int early = s_begin < s_end && min(s0 + step + DM_KT, s_end) - 1 < len;
	for (int pass = 0; pass < 2; pass++) {          /* (one copy of the loads' code) */
		if (pass) {
			gpu_pdl_wait();
			GPU_TL_WAITED
			if (a.trig == 1)
				gpu_pdl_trigger();
		}
		if (s_begin < s_end && early == !pass)
			dm_first<1, 1>(kr, kb, vb, rowb, s0, s_end, s0 + step, s_end, vs0, vs1);
	}
	if (s_begin < s_end)
		dm_qfrags_at<DM_WARPS, HL>(qf, qr, a.qscale, f16);
	__syncthreads();

	for (; s0 < s_end; s0 += step) {
		dm_tile<1, 1, HL>(o, m, lsum, kr, vs0, qf, lim, s0, s0 + step, s_end, s0 + 2 * step,
		                  s_end, kb, vb, rowb, f16);
		unsigned t = vs0;
		vs0 = vs1;
		vs1 = t;
	}
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
	/* the next kernel (the o product) starts only now, by default: its blocks, resident
	 * earlier, asked for their first weights while qkv_prep and these tiles ran, and both
	 * waited behind those loads (2.0% off SDAR-4B's batch-1 decode forward on an H200,
	 * bench/NOTES-device.md, session 24) */
	if (a.trig == 2)
		gpu_pdl_trigger();

	/* merge the warps in order: each warp's (m, l) and o into shared memory, then the
	 * block's triple (rows past TG too: max -inf, sum 0) */
	__syncthreads();                                /* every warp is done with its values */
	float *wo = (float *)(sm + DM_WO), *wml = (float *)(sm + DM_WML);
	float *bo = (float *)(sm + DM_BO), *bml = (float *)(sm + DM_BML);
#pragma unroll
	for (int nt = 0; nt < 16; nt++) {
#pragma unroll
		for (int hh = 0; hh < 2; hh++)
			*(float2 *)(wo + (wid * DM_ROWS + g + 8 * hh) * DM_WST + 8 * nt + 2 * q) =
				make_float2(o[nt][2 * hh], o[nt][2 * hh + 1]);
	}
	if (q == 0) {
		for (int hh = 0; hh < 2; hh++) {
			wml[(wid * DM_ROWS + g + 8 * hh) * 2] = m[hh];
			wml[(wid * DM_ROWS + g + 8 * hh) * 2 + 1] = lsum[hh];
		}
	}
	__syncthreads();
	for (int e = threadIdx.x; e < DM_ROWS * DM_HD / 4; e += DM_WARPS * 32) {
		int r = e / (DM_HD / 4), c = 4 * (e % (DM_HD / 4));
		float M = -INFINITY, L = 0.0f;
		float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
		for (int w = 0; w < DM_WARPS; w++)
			M = fmaxf(M, wml[(w * DM_ROWS + r) * 2]);
#pragma unroll
		for (int w = 0; w < DM_WARPS; w++) {
			float mw = wml[(w * DM_ROWS + r) * 2];
			if (mw == -INFINITY)
				continue;
			dm_fold(O, L, M, mw, wml + (w * DM_ROWS + r) * 2 + 1,
			        wo + (w * DM_ROWS + r) * DM_WST + c);
		}
		*(float4 *)(bo + r * DM_HD + c) = O;
		if (c == 0) {
			bml[2 * r] = M;
			bml[2 * r + 1] = L;
		}
	}

	if (!a.cl && ns > 1) {                          /* the triple to dk_merge_kernel */
		__syncthreads();
		for (int e = threadIdx.x; e < DM_ROWS * DM_HD / 4; e += DM_WARPS * 32) {
			int r = e / (DM_HD / 4), c = 4 * (e % (DM_HD / 4)), row = rbase + r;
			if (row >= TG)
				continue;
			int t = row / a.group, h = kh * a.group + row % a.group;
			size_t pi = ((size_t)z * a.b.N + r0 + t) * NH + h;
			*(float4 *)(a.po + pi * DM_HD + c) = *(const float4 *)(bo + r * DM_HD + c);
			if (c == 0) {
				a.pm[pi] = bml[2 * r];
				a.pl[pi] = bml[2 * r + 1];
			}
		}
		GPU_TL_END(GPU_TL_ATTENTION, 0)
		return;
	}
	/* finish: this block's share of the output, from the triples of splits 0 .. ns - 1 */
	int C = a.cl ? a.nz : 1, zc = a.cl ? z : 0;
	if (a.cl)
		dm_cluster_sync<1>();                   /* every split's triple is there */
	else
		__syncthreads();
	for (int e = threadIdx.x + DM_WARPS * 32 * zc; e < DM_ROWS * DM_HD / 4;
	     e += DM_WARPS * 32 * C) {
		int r = e / (DM_HD / 4), c = 4 * (e % (DM_HD / 4));
		if (rbase + r < TG)
			dm_finish(a, bml, bo, a.cl, 0, 0, DM_HD, ns, r0, kh, rbase, r, c);
	}
	if (a.cl)
		dm_cluster_sync<0>();                   /* the others are done reading ours */
	GPU_TL_END(GPU_TL_ATTENTION, 0)
}

/* ---------------------------------------------------------------- the unit variant
 * For large batches (many (sequence, row tile, kv head) units): one block per unit walks all
 * of the unit's key splits, so a unit's keys and values stream through one block without a
 * restart at each split, with no cluster and no second kernel. The block has DU_GROUPS groups
 * of DM_WARPS warps; group G takes the splits G, G + DU_GROUPS, ... and does each exactly as
 * a dm_kernel block does (warp w of the group: the split's tiles w, w + DM_WARPS, ...; the
 * warps' triples folded in warp order), keeping the split's merged triple in shared memory;
 * at the end the block folds the triples in split order as dm_kernel's finish does. Same
 * arithmetic in the same order: the same bits as dm_kernel (tests/gpu/test_decode.cu checks
 * it), so which of the two runs may depend on the batch. A warp's tiles run on across its
 * group's splits: the loads of its next tiles are in flight while the group merges a split.
 * The warps' fold: each warp's maxima and sums through shared memory, then the warps in turn
 * add their share into the split's slot (a named barrier of the group between turns). */
#define DU_GROUPS 2
#define DU_WARPS (DU_GROUPS * DM_WARPS)
#define DU_SST (DM_HD + 8)                          /* slot row stride (floats) */
#define DU_QOFF (DU_WARPS * 2 * DM_VBYTES)          /* after (warp, stage) value tiles */
#define DU_SO (DU_QOFF + DM_QBYTES)                 /* (split, row, DU_SST) outputs */
#define DU_SML (DU_SO + DK_SPLITS_MAX * DM_ROWS * DU_SST * 4)   /* (split, row, max / sum) */
#define DU_WML (DU_SML + DK_SPLITS_MAX * DM_ROWS * 2 * 4)      /* (warp, row, max / sum) */
#define DU_SMEM (DU_WML + DU_WARPS * DM_ROWS * 2 * 4)

/* the keys of split z of a unit: [*b, *e) (dm_kernel's range) */
static __device__ __forceinline__ void du_range(int z, int split_len, int S, int kend, int *b,
                                                int *e)
{
	*b = z * split_len;
	*e = max(*b, min(min(S, *b + split_len), kend));
}

/* a warp's tile (split z, keys s0 .. up to e): the next one of its group (splits z, z +
 * GROUPS, ...; warp wl of DM_WARPS): the split's next, else the first of a later split that
 * has one for this warp; past the last: z >= ns, e = 0 */
struct du_tile {
	int z, s0, e;
};

template <int GROUPS, int ROT = 0>
static __device__ __forceinline__ struct du_tile du_next(struct du_tile t, int wl, int ns,
                                                         int split_len, int S, int kend)
{
	t.s0 += DM_WARPS * DM_KT;
	while (t.z < ns && t.s0 >= t.e) {
		t.z += GROUPS;
		int b;
		du_range(t.z, split_len, S, kend, &b, &t.e);
		t.s0 = b + (ROT ? (wl + t.z) % DM_WARPS : wl) * DM_KT;  /* (ROT: chains in turn) */
		if (t.z >= ns)
			t.e = 0;
	}
	return t;
}

static __device__ __forceinline__ void du_bar(int id)
{
	asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(DM_WARPS * 32) : "memory");
}

/* one unit: (sequence, row tile rt, kv head kh) and what its walk needs */
struct du_unit {
	int ok, r0, len, S, TG, rbase, kh, ns, split_len, kend;
	const char *kb, *vb;
};

static __device__ __forceinline__ struct du_unit du_get(const struct dk_args &a, int place,
                                                        int kh)
{
	struct du_unit x;
	int s = place / a.rtiles, rt = place % a.rtiles;
	int T = a.b.row0[s + 1] - (x.r0 = a.b.row0[s]);
	x.len = a.b.len[s];
	x.S = x.len + T;
	x.TG = T * a.group;
	x.rbase = rt * DM_ROWS;
	x.kh = kh;
	x.ok = x.rbase < x.TG;
	x.split_len = dk_split_len(x.S, a.sp);
	x.ns = dk_nsplit(x.S, a.sp);
	int tlast = min(T, CEIL_DIV(min(x.TG, x.rbase + DM_ROWS), a.group)) - 1;
	x.kend = ((x.len + tlast) / a.block + 1) * a.block;
	size_t lay = (size_t)a.l * a.b.cap[s] * a.NKV * DM_HD;
	x.kb = (const char *)a.b.k[s] + (lay + (size_t)kh * DM_HD) * 2;
	x.vb = (const char *)a.b.v[s] + (lay + (size_t)kh * DM_HD) * 2;
	return x;
}

/* a warp's first tiles of unit x (group grp of GROUPS): its first tile's keys into kr and
 * values into vs0, the second's values into vs1 and keys into L2; cur, n1, n2 its first three */
template <int GROUPS, int ROT = 0, int KL = 0, int VL = 0>
static __device__ __forceinline__ void du_start(const struct du_unit &x, int grp, int wl,
                                                struct du_tile &cur, struct du_tile &n1,
                                                struct du_tile &n2, uint4 kr[4][4],
                                                unsigned vs0, unsigned vs1, unsigned rowb)
{
	/* as if after the last tile of a split before the group's first */
	cur.z = grp - GROUPS;
	cur.s0 = -DM_WARPS * DM_KT;
	cur.e = 0;
	cur = du_next<GROUPS, ROT>(cur, wl, x.ns, x.split_len, x.S, x.kend);
	n1 = du_next<GROUPS, ROT>(cur, wl, x.ns, x.split_len, x.S, x.kend);
	n2 = du_next<GROUPS, ROT>(n1, wl, x.ns, x.split_len, x.S, x.kend);
	dm_first<KL, VL>(kr, x.kb, x.vb, rowb, cur.s0, cur.e, n1.s0, n1.e, vs0, vs1);
}

/* a group's walk of unit x: its splits grp, grp + GROUPS, ..., each as a dm_kernel block
 * does it, then the group's fold of the split (dm_kernel's warp merge, warp by warp in order,
 * a named barrier `bar` of the group between turns) into the slot so + z * DM_ROWS * DU_SST
 * and the maxima and sums into sml's split z. With run (one group a block, splits in order),
 * the slot is so itself, merged after the fold (dm_merge) into the running outputs run (row
 * r at r DM_HD) and maxima and sums rml + (z & 1) DM_ROWS 2 (from split z - 1's, at the
 * other parity): dm_finish's arithmetic, one split at a time. */
template <int GROUPS, int KL = 0, int VL = 0, int ROT = 0, int HL = 2>
static __device__ __forceinline__ void du_walk(const struct dk_args &a, const struct du_unit &x,
                                               int grp, int wl, struct du_tile &cur,
                                               struct du_tile &n1, struct du_tile &n2,
                                               uint4 kr[4][4], unsigned &vs0, unsigned &vs1,
                                               const uint4 *qf, float *wml, float *sml,
                                               float *so, float *run, float *rml, unsigned rowb,
                                               int f16)
{
	int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	for (int z = grp; z < x.ns; z += GROUPS) {
		int b, e, lim[2];
		float o[16][4], m[2], lsum[2];
		int c = ROT ? (wl + z) % DM_WARPS : wl;     /* the warp's chain of split z */
		du_range(z, x.split_len, x.S, x.kend, &b, &e);
		dm_begin(a, x.rbase, x.TG, x.len, e, lim, o, m, lsum);
		while (cur.z == z) {
			dm_tile<KL, VL, HL>(o, m, lsum, kr, vs0, qf, lim, cur.s0, n1.s0, n1.e, n2.s0, n2.e,
			                x.kb, x.vb, rowb, f16);
			unsigned t = vs0;
			vs0 = vs1;
			vs1 = t;
			cur = n1;
			n1 = n2;
			n2 = du_next<GROUPS, ROT>(n2, wl, x.ns, x.split_len, x.S, x.kend);
		}

		/* the group's fold of split z (dm_kernel's warp merge): maxima and sums first */
		if (q == 0) {
			for (int hh = 0; hh < 2; hh++) {
				wml[(c * DM_ROWS + g + 8 * hh) * 2] = m[hh];
				wml[(c * DM_ROWS + g + 8 * hh) * 2 + 1] = lsum[hh];
			}
		}
		du_bar(1 + grp);
		float M[2];
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			int r = g + 8 * hh;
			M[hh] = -INFINITY;
#pragma unroll
			for (int w = 0; w < DM_WARPS; w++)
				M[hh] = fmaxf(M[hh], wml[(w * DM_ROWS + r) * 2]);
			if (wl == 0 && q == 0) {
				float L = 0.0f;
#pragma unroll
				for (int w = 0; w < DM_WARPS; w++) {
					float mw = wml[(w * DM_ROWS + r) * 2];
					if (mw == -INFINITY)
						continue;
					L += wml[(w * DM_ROWS + r) * 2 + 1] * exp2f(mw - M[hh]);
				}
				sml[(z * DM_ROWS + r) * 2] = M[hh];
				sml[(z * DM_ROWS + r) * 2 + 1] = L;
			}
		}
		/* then the outputs, warp by warp in order (each reads what the one before wrote) */
		float *zo = run ? so : so + z * DM_ROWS * DU_SST;
#pragma unroll
		for (int w = 0; w < DM_WARPS; w++) {
			if (c == w) {
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					int r = g + 8 * hh;
					float sc = exp2f(m[hh] - M[hh]);
#pragma unroll
					for (int nt = 0; nt < 16; nt++) {
						float2 *p = (float2 *)(zo + r * DU_SST + 8 * nt + 2 * q);
						float2 O = w == 0 ? make_float2(0.0f, 0.0f) : *p;
						if (m[hh] != -INFINITY) {
							O.x += o[nt][2 * hh] * sc;
							O.y += o[nt][2 * hh + 1] * sc;
						}
						*p = O;
					}
				}
			}
			du_bar(1 + grp);
		}
		if (run) {              /* (the next fold writes so after its first barrier) */
			const float *pml = rml + ((z - 1) & 1) * DM_ROWS * 2;
			float *nml = rml + (z & 1) * DM_ROWS * 2;
			for (int i = threadIdx.x; i < DM_ROWS * DM_HD / 4; i += DM_WARPS * 32) {
				int r = i / (DM_HD / 4), c = 4 * (i % (DM_HD / 4));
				float M = -INFINITY, L = 0.0f;
				float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				if (z > 0) {
					M = pml[2 * r];
					L = pml[2 * r + 1];
					O = *(const float4 *)(run + r * DM_HD + c);
				}
				dm_merge(O, L, M, sml[(z * DM_ROWS + r) * 2], sml[(z * DM_ROWS + r) * 2 + 1],
				         *(const float4 *)(zo + r * DU_SST + c));
				*(float4 *)(run + r * DM_HD + c) = O;
				if (c == 0) {
					nml[2 * r] = M;
					nml[2 * r + 1] = L;
				}
			}
		}
	}
}

template <int F16, int HL>
static __global__ void __launch_bounds__(DU_WARPS * 32, 1) du_kernel(struct dk_args a)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	extern __shared__ float4 dk_smem[];
	char *sm = (char *)dk_smem;
	uint4 *qf = (uint4 *)(sm + DU_QOFF);
	int wid = threadIdx.x >> 5, grp = wid / DM_WARPS, wl = wid % DM_WARPS;
	struct du_unit x = du_get(a, blockIdx.x, blockIdx.y);
	const int f16 = F16;

	if (!x.ok)
		return;
	unsigned rowb = (unsigned)a.NKV * DM_HD * 2;
	unsigned vs0 = (unsigned)__cvta_generic_to_shared(sm) + wid * 2 * DM_VBYTES;
	unsigned vs1 = vs0 + DM_VBYTES;
	float *so = (float *)(sm + DU_SO), *sml = (float *)(sm + DU_SML);
	float *wml = (float *)(sm + DU_WML) + grp * DM_WARPS * DM_ROWS * 2;
	struct du_tile cur, n1, n2;
	uint4 kr[4][4];

	du_start<DU_GROUPS>(x, grp, wl, cur, n1, n2, kr, vs0, vs1, rowb);
	dm_qfrags<DU_WARPS, HL>(qf, a, x.r0, x.rbase, x.TG, x.kh, f16);
	__syncthreads();
	du_walk<DU_GROUPS, 0, 0, 0, HL>(a, x, grp, wl, cur, n1, n2, kr, vs0, vs1, qf, wml, sml, so,
	                                NULL, NULL, rowb, f16);
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
	__syncthreads();                                /* every split's triple is there */

	/* finish: dm_kernel's, from the slots */
	for (int e = threadIdx.x; e < DM_ROWS * DM_HD / 4; e += DU_WARPS * 32) {
		int r = e / (DM_HD / 4), c = 4 * (e % (DM_HD / 4));
		if (x.rbase + r < x.TG)
			dm_finish(a, sml, so, 0, DM_ROWS * 2, DM_ROWS * DU_SST, DU_SST, x.ns, x.r0, x.kh,
			          x.rbase, r, c);
	}
}

/* ---------------------------------------------------------------- the persistent unit variant
 * Version 2 of the unit kernel (dv_kernel): blocks of one group (DM_WARPS warps, 91 KB of
 * shared memory, two blocks an SM) on as many blocks as fit at once; block i takes the units
 * i, i + gridDim.x, ... (unit u: kv head u % NKV, place u / NKV). A unit is walked as one
 * du_kernel group walks it (each split as a dm_kernel block, the warps' fold in turns), the
 * fold into one shared slot, merged at once into the unit's running output in shared memory
 * (dm_merge, split by split: dm_finish's arithmetic; a first version copied each split's
 * slot to global memory for the finish, traffic that reached the DRAM: 16% more bytes than
 * the keys and values at 1K keys, ncu, NOTES-device.md); once the unit's last split is
 * merged, the warps ask for the next unit's first tiles before writing its output and the
 * next q fragments, so the next unit's loads are in flight while the block finishes the
 * current one; the other block on the SM covers the rest. It is compiled once per cache
 * type (F16: the tile loop's mma and 16-bit splits without a runtime branch), its key loads
 * past a split's end take the split's last key again (masked by value) instead of zeroing
 * registers, and its value copies step their addresses (dm_kload / dm_vload's lean forms):
 * about a quarter fewer instructions, which is what bounds it (ncu, H200, 1K keys x batch
 * 128: 2 warps a scheduler issuing every 6-8 cycles; NOTES-device.md, helper att). ROT:
 * warp w walks chain (w + z) mod DM_WARPS of split z (chain c: the split's tiles c, c +
 * DM_WARPS, ...), so that a split's longer chain (chain 0 of a 9-tile split at 2K keys)
 * falls on each warp in turn; the fold still takes the chains in order. Same arithmetic in
 * the same order: the same bits as dm_kernel and du_kernel. */
#define DV_QOFF (DM_WARPS * 2 * DM_VBYTES)          /* after (warp, stage) value tiles */
#define DV_SO (DV_QOFF + DM_QBYTES)                 /* one split's (row, DU_SST) outputs */
#define DV_SML (DV_SO + DM_ROWS * DU_SST * 4)       /* (split, row, max / sum) */
#define DV_WML (DV_SML + DK_SPLITS_MAX * DM_ROWS * 2 * 4)      /* (warp, row, max / sum) */
#define DV_RUN (DV_WML + DM_WARPS * DM_ROWS * 2 * 4)      /* (row, HD) running outputs */
#define DV_RML (DV_RUN + DM_ROWS * DM_HD * 4)       /* (parity, row, max / sum) running */
#define DV_SMEM (DV_RML + 2 * DM_ROWS * 2 * 4)

template <int F16, int ROT, int HL>
static __global__ void __launch_bounds__(DM_WARPS * 32, 2) dv_kernel(struct dk_args a)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	extern __shared__ float4 dk_smem[];
	char *sm = (char *)dk_smem;
	uint4 *qf = (uint4 *)(sm + DV_QOFF);
	int wl = threadIdx.x >> 5, nu = a.b.nseq * a.rtiles * a.NKV, f16 = F16;
	unsigned rowb = (unsigned)a.NKV * DM_HD * 2;
	unsigned vs0 = (unsigned)__cvta_generic_to_shared(sm) + wl * 2 * DM_VBYTES;
	unsigned vs1 = vs0 + DM_VBYTES;
	float *so = (float *)(sm + DV_SO), *sml = (float *)(sm + DV_SML);
	float *wml = (float *)(sm + DV_WML), *run = (float *)(sm + DV_RUN);
	float *rml = (float *)(sm + DV_RML);
	struct du_tile cur, n1, n2;
	uint4 kr[4][4];
	int u = blockIdx.x;
	struct du_unit x;

	if (u >= nu)
		return;
	x = du_get(a, u / a.NKV, u % a.NKV);
	if (x.ok) {
		du_start<1, ROT, 1, 1>(x, 0, wl, cur, n1, n2, kr, vs0, vs1, rowb);
		dm_qfrags<DM_WARPS, HL>(qf, a, x.r0, x.rbase, x.TG, x.kh, f16);
	}
	__syncthreads();
	for (;;) {
		if (x.ok)
			du_walk<1, 1, 1, ROT, HL>(a, x, 0, wl, cur, n1, n2, kr, vs0, vs1, qf, wml, sml, so,
			                          run, rml, rowb, f16);
		int un = u + gridDim.x;
		struct du_unit y;
		y.ok = 0;
		if (un < nu) {
			y = du_get(a, un / a.NKV, un % a.NKV);
			if (y.ok)                   /* (each warp is done with its value tiles) */
				du_start<1, ROT, 1, 1>(y, 0, wl, cur, n1, n2, kr, vs0, vs1, rowb);
		}
		__syncthreads();                        /* the merged outputs are there; qf is free */
		if (x.ok) {
			const float *fml = rml + ((x.ns - 1) & 1) * DM_ROWS * 2;
			for (int e = threadIdx.x; e < DM_ROWS * DM_HD / 4; e += DM_WARPS * 32) {
				int r = e / (DM_HD / 4), c = 4 * (e % (DM_HD / 4));
				if (x.rbase + r < x.TG)
					dm_out(a, *(const float4 *)(run + r * DM_HD + c), fml[2 * r + 1], x.r0,
					       x.kh, x.rbase, r, c);
			}
		}
		if (un >= nu)
			break;
		if (y.ok)
			dm_qfrags<DM_WARPS, HL>(qf, a, y.r0, y.rbase, y.TG, y.kh, f16);
		__syncthreads();                        /* qf is there; the outputs were read */
		u = un;
		x = y;
	}
	asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* one warp per (row n, head h): merge the splits of n's sequence, if it has more than one */
static __global__ void dk_merge_kernel(struct dk_args a)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
	int N = a.b.N;

	if (w >= N * a.NH)
		return;
	int n = w / a.NH, h = w % a.NH, s = a.b.rowseq[n];
	int S = a.b.len[s] + a.b.row0[s + 1] - a.b.row0[s], ns = dk_nsplit(S, a.sp);
	if (ns == 1)                            /* written by the attention kernel */
		return;

	float *orow = a.out + ((size_t)n * a.NH + h) * a.HD;
	for (int c = lane; c < a.HD; c += 32) {        /* dm_merge, one channel */
		float M = -INFINITY, L = 0.0f, acc = 0.0f;
		for (int z = 0; z < ns; z++) {
			size_t pi = ((size_t)z * N + n) * a.NH + h;
			float m = a.pm[pi], sa, sb;
			if (m == -INFINITY)
				continue;
			M = dm_scales(M, m, &sa, &sb);
			L = dm_merge1(L, sa, a.pl[pi], sb);
			acc = dm_merge1(acc, sa, a.po[pi * a.HD + c], sb);
		}
		orow[c] = L > 0.0f ? acc / L : 0.0f;
	}
}

/* ---------------------------------------------------------------- small fused kernels */

static __device__ __forceinline__ void kv_store(void *base, int dt, size_t i, float x)
{
	if (dt == DICE_BF16)
		((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(x);
	else if (dt == DICE_F16)
		((__half *)base)[i] = __float2half_rn(x);
	else
		((float *)base)[i] = x;
}

/* element offset of channel i of new row n in its sequence's layer-l cache */
static __device__ __forceinline__ size_t kv_slot(const struct kv_batch &b, int l, int n, int KVD,
                                                 int *s_out)
{
	int s = b.rowseq[n];
	*s_out = s;
	return ((size_t)l * b.cap[s] + b.len[s] + (n - b.row0[s])) * KVD;
}

static __global__ void kv_append_kernel(struct kv_batch b, int l, const float *k, const float *v,
                                        int KVD)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	size_t total = (size_t)b.N * KVD;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int n = (int)(i / KVD), c = (int)(i % KVD), s;
		size_t at = kv_slot(b, l, n, KVD, &s) + c;
		kv_store(b.k[s], (int)b.dt, at, k[i]);
		kv_store(b.v[s], (int)b.dt, at, v[i]);
	}
}

/* rotated channels j and j + HD / 2 of row n's head h (q, or k into its cache slot at) */
static __device__ __forceinline__ void qp_store(float *q, const struct kv_batch &b, int s,
                                                size_t at, int n, int h, int NH, int HD, int j,
                                                float x1, float x2, float sn, float cs)
{
	float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
	if (h < NH) {
		float *qh = q + ((size_t)n * NH + h) * HD;
		qh[j] = y1;
		qh[j + HD / 2] = y2;
	} else {
		size_t kat = at + (size_t)(h - NH) * HD;
		kv_store(b.k[s], (int)b.dt, kat + j, y1);
		kv_store(b.k[s], (int)b.dt, kat + j + HD / 2, y2);
	}
}

/* one warp per (row n, head): q and k heads get rmsnorm then rope, v heads are copied. At HD
 * 128 (QP_HD, the SDAR models) a lane holds its four channels in registers, and what does not
 * come from the kernel before (the row's cache slot, the norm's weights, the rotation's sines
 * and cosines from the positions) is read and computed before the wait for it; the same
 * arithmetic in the same order as the plain loop, which takes other head sizes. */
#define QP_HD 128
static __global__ void qkv_prep_kernel(float *q, const float *qkv, const float *qw,
                                       const float *kw, const int *pos, const float *inv_freq,
                                       struct kv_batch b, int l, int NH, int NKV, int HD,
                                       float eps)
{
	gpu_pdl_trigger();
	GPU_TL_START
	int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
	int heads = NH + 2 * NKV, half = HD / 2;

	if (w >= b.N * heads)
		return;
	int n = w / heads, h = w % heads, s;
	const float *x = qkv + (size_t)n * heads * HD + (size_t)h * HD;
	const float *nw = h < NH ? qw : kw;
	size_t at = kv_slot(b, l, n, NKV * HD, &s);
	if (HD == QP_HD) {
		float xv[4], wv[4], sn[2], cs[2];
		if (h < NH + NKV) {
#pragma unroll
			for (int i = 0; i < 4; i++)
				wv[i] = nw[lane + 32 * i];
#pragma unroll
			for (int i = 0; i < 2; i++)
				sincosf((float)pos[n] * inv_freq[lane + 32 * i], &sn[i], &cs[i]);
		}
		gpu_pdl_wait();
		GPU_TL_WAITED
#pragma unroll
		for (int i = 0; i < 4; i++)
			xv[i] = x[lane + 32 * i];
		if (h >= NH + NKV) {            /* v */
#pragma unroll
			for (int i = 0; i < 4; i++)
				kv_store(b.v[s], (int)b.dt, at + (size_t)(h - NH - NKV) * HD + lane + 32 * i,
				         xv[i]);
		} else {
			float ss = 0.0f;
#pragma unroll
			for (int i = 0; i < 4; i++)
				ss += xv[i] * xv[i];
			ss = warp_sum(ss);
			float r = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
			for (int i = 0; i < 2; i++) /* channels lane + 32 i and that + 64 */
				qp_store(q, b, s, at, n, h, NH, HD, lane + 32 * i, xv[i] * r * wv[i],
				         xv[i + 2] * r * wv[i + 2], sn[i], cs[i]);
		}
		GPU_TL_END(GPU_TL_QKV_PREP, 0)
		return;
	}
	gpu_pdl_wait();
	GPU_TL_WAITED
	if (h >= NH + NKV) {                    /* v */
		for (int c = lane; c < HD; c += 32)
			kv_store(b.v[s], (int)b.dt, at + (size_t)(h - NH - NKV) * HD + c, x[c]);
		GPU_TL_END(GPU_TL_QKV_PREP, 0)
		return;
	}
	float ss = 0.0f;
	for (int c = lane; c < HD; c += 32)
		ss += x[c] * x[c];
	ss = warp_sum(ss);
	float r = 1.0f / sqrtf(ss / (float)HD + eps);
	for (int j = lane; j < half; j += 32) {
		float sn, cs;
		sincosf((float)pos[n] * inv_freq[j], &sn, &cs);
		qp_store(q, b, s, at, n, h, NH, HD, j, x[j] * r * nw[j], x[j + half] * r * nw[j + half],
		         sn, cs);
	}
	GPU_TL_END(GPU_TL_QKV_PREP, 0)
}

static __global__ void swiglu_cat_kernel(float *y, const float *gu, int N, int C)
{
	gpu_pdl_trigger();
	GPU_TL_START
	gpu_pdl_wait();
	GPU_TL_WAITED
	size_t total = (size_t)N * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / C, c = i % C;
		y[i] = gpu_swiglu1(gu[n * 2 * C + c], gu[n * 2 * C + C + c]);
	}
	GPU_TL_END(GPU_TL_SWIGLU, 0)
}

#define AR_THREADS 256
#define AR_TPT 2                        /* tiles of 8 a thread holds: rows up to 2 x 8 x 256 wide */

/* one block per row: x += r, then y = rmsnorm(x) * w. The order of the sum of squares: the
 * row in tiles of 8 values (past C: 0), a tile's ((v0 v0 + v1 v1) + (v2 v2 + v3 v3)) +
 * ((v4 v4 + v5 v5) + (v6 v6 + v7 v7)), then lane l of a warp adds tiles l, l + 32, l + 64,
 * ... in turn from 0 and the lanes' sums meet in a butterfly (xor 16, 8, 4, 2, 1); the scale
 * is 1 / sqrt(ss / C + eps) and y = (v * scale) * w. Thread t takes tiles t, t + blockDim,
 * ...; a row of up to AR_TPT tiles a thread is read into registers (16 bytes a load where
 * the row allows) before anything is written (x, r and y may alias as far as the compiler
 * knows); the tiles' sums meet in shared memory (dynamic, T floats). */
static __device__ __forceinline__ float ar_sq2(float a, float b)
{
	return __fadd_rn(__fmul_rn(a, a), __fmul_rn(b, b));
}

static __device__ __forceinline__ float ar_tile(const float *v)
{
	return __fadd_rn(__fadd_rn(ar_sq2(v[0], v[1]), ar_sq2(v[2], v[3])),
	                 __fadd_rn(ar_sq2(v[4], v[5]), ar_sq2(v[6], v[7])));
}

/* the scale from the tiles' sums of shared memory tss (T) in the order above, made by every
 * warp alike (the butterfly leaves the sum in every lane): no second barrier */
static __device__ __forceinline__ float ar_scale(const float *tss, int T, int C, float eps)
{
	float ss = 0.0f;
	for (int t = threadIdx.x % 32; t < T; t += 32)
		ss = __fadd_rn(ss, tss[t]);
#pragma unroll
	for (int o = 16; o; o >>= 1)
		ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
	return 1.0f / sqrtf(ss / (float)C + eps);
}

static __device__ __forceinline__ void ar_put4(float *d, float4 a)
{
	d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w;
}

static __global__ void add_rmsnorm_kernel(float *y, float *x, const float *r, const float *w,
                                          int C, float eps, void *y16, int f16)
{
	gpu_pdl_trigger();
	GPU_TL_START
	extern __shared__ float ar_tss[];       /* (T) the tiles' sums */
	float *xn = x + (size_t)blockIdx.x * C;
	const float *rn = r + (size_t)blockIdx.x * C;
	float *yn = y + (size_t)blockIdx.x * C;
	int T = CEIL_DIV(C, 8), nt = blockDim.x;

	if (T <= AR_TPT * nt) {
		float v[AR_TPT][8], wv[AR_TPT][8];
		int vec = C % 8 == 0 &&
		          !(((uintptr_t)xn | (uintptr_t)rn | (uintptr_t)w | (uintptr_t)yn) & 15);
		/* the norm's weights before the wait: no kernel of the forward writes them (and
		 * they come from DRAM, where x and r come from L2) */
#pragma unroll
		for (int i = 0; i < AR_TPT; i++) {
			int c0 = 8 * (threadIdx.x + i * nt);
#pragma unroll
			for (int e = 0; e < 8; e++)
				wv[i][e] = !vec && c0 + e < C ? w[c0 + e] : 0.0f;
			if (vec && c0 < C) {            /* (the same values, 16 bytes a load) */
				ar_put4(wv[i], *(const float4 *)(w + c0));
				ar_put4(wv[i] + 4, *(const float4 *)(w + c0 + 4));
			}
		}
		gpu_pdl_wait();
		GPU_TL_WAITED
#pragma unroll
		for (int i = 0; i < AR_TPT; i++) {
			int c0 = 8 * (threadIdx.x + i * nt);
			if (vec) {
#pragma unroll
				for (int h = 0; h < 2; h++) {
					float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
					if (c0 < C) {
						a = *(const float4 *)(xn + c0 + 4 * h);
						b = *(const float4 *)(rn + c0 + 4 * h);
					}
					v[i][4 * h] = a.x + b.x, v[i][4 * h + 1] = a.y + b.y;
					v[i][4 * h + 2] = a.z + b.z, v[i][4 * h + 3] = a.w + b.w;
				}
				continue;
			}
#pragma unroll
			for (int e = 0; e < 8; e++) {
				int c = c0 + e;
				v[i][e] = c < C ? xn[c] + rn[c] : 0.0f;
			}
		}
#pragma unroll
		for (int i = 0; i < AR_TPT; i++) {
			int t = threadIdx.x + i * nt;
			if (t >= T)
				continue;
			if (vec) {
				*(float4 *)(xn + 8 * t) = make_float4(v[i][0], v[i][1], v[i][2], v[i][3]);
				*(float4 *)(xn + 8 * t + 4) = make_float4(v[i][4], v[i][5], v[i][6], v[i][7]);
			} else {
#pragma unroll
				for (int e = 0; e < 8; e++)
					if (8 * t + e < C)
						xn[8 * t + e] = v[i][e];
			}
			ar_tss[t] = ar_tile(v[i]);
		}
		__syncthreads();
		float rs = ar_scale(ar_tss, T, C, eps);
#pragma unroll
		for (int i = 0; i < AR_TPT; i++) {
			int c0 = 8 * (threadIdx.x + i * nt);
			float yv[8];
#pragma unroll
			for (int e = 0; e < 8; e++)
				yv[e] = __fmul_rn(__fmul_rn(v[i][e], rs), wv[i][e]);
			if (vec) {
				if (c0 < C) {
					*(float4 *)(yn + c0) = make_float4(yv[0], yv[1], yv[2], yv[3]);
					*(float4 *)(yn + c0 + 4) = make_float4(yv[4], yv[5], yv[6], yv[7]);
					if (y16)        /* y rounded to 16 bits, as a product rounds it */
						*(uint4 *)((char *)y16 + ((size_t)blockIdx.x * C + c0) * 2) =
							make_uint4(gpu_pack2(yv[0], yv[1], f16),
							           gpu_pack2(yv[2], yv[3], f16),
							           gpu_pack2(yv[4], yv[5], f16),
							           gpu_pack2(yv[6], yv[7], f16));
				}
				continue;
			}
#pragma unroll
			for (int e = 0; e < 8; e++)
				if (c0 + e < C)
					yn[c0 + e] = yv[e];
		}
		GPU_TL_END(GPU_TL_ADD_RMSNORM, 0)
		return;
	}
	gpu_pdl_wait();
	GPU_TL_WAITED
	for (int t = threadIdx.x; t < T; t += nt) {
		float v[8];
		for (int e = 0; e < 8; e++) {
			int c = 8 * t + e;
			v[e] = c < C ? xn[c] + rn[c] : 0.0f;
			if (c < C)
				xn[c] = v[e];
		}
		ar_tss[t] = ar_tile(v);
	}
	__syncthreads();
	float rs = ar_scale(ar_tss, T, C, eps);
	for (int c = threadIdx.x; c < C; c += nt)
		yn[c] = __fmul_rn(__fmul_rn(xn[c], rs), w[c]);
	GPU_TL_END(GPU_TL_ADD_RMSNORM, 0)
}

/* ---------------------------------------------------------------- kernel launchers */

#ifdef DICE_TIMELINE
GPU_TL_BINDER(gpu_tl_bind_decode)
#endif

static int grid_for(size_t total)
{
	size_t g = CEIL_DIV(total, (size_t)256);
	return (int)(g < 65536 ? (g ? g : 1) : 65536);
}

int gpu_kv_append(cudaStream_t st, const struct kv_batch *b, int l, const float *k,
                  const float *v, int NKV, int HD)
{
	GPU_REQUIRE(b && b->N >= 0 && NKV > 0 && HD > 0 && l >= 0, "kv_append");
	if (b->N == 0)
		return 0;
	struct kv_batch bb = *b;
	int KVD = NKV * HD;
	void *args[] = { &bb, &l, &k, &v, &KVD };
	gpu_launch((const void *)kv_append_kernel, dim3(grid_for((size_t)b->N * KVD)), dim3(256), 0,
	           st, args);
	return 0;
}

/* the scratch for the splits' partial triples, when there is more than one split */
static void dk_partials(struct dk_args *a, int nsplit, int NH, int HD)
{
	if (nsplit > 1) {
		size_t np = (size_t)nsplit * a->b.N * NH;
		float *p = (float *)gpu_scratch(sizeof(float) * np * (HD + 2));
		a->po = p;
		a->pm = p + np * HD;
		a->pl = a->pm + np;
	}
}

/* the tensor-core kernels' products: 1, q and P each one 16-bit part (the cache's type), as
 * a bf16 / fp16 flash attention takes them; 2 (DICE_DK_EXACT=1, gpu_set_dk_exact), each a
 * high and a low part, fp32-accurate. -1: not read yet. */
static int dk_exact = -1;

void gpu_set_dk_exact(int on)
{
	dk_exact = on < 0 ? -1 : on != 0;
}

static int dk_parts(void)
{
	if (dk_exact < 0) {
		const char *e = getenv("DICE_DK_EXACT");
		dk_exact = e && e[0] == '1' && !e[1];
	}
	return dk_exact ? 2 : 1;
}

/* dm_kernel<F16, HL> and du_kernel<F16, HL> by [the parts (1, 2) - 1][bf16, f16 cache]: the
 * cache type compiled in, so that no mma or rounding of the tile loop branches on it */
static const void *const dm_fn[2][2] = {
	{ (const void *)dm_kernel<0, 1>, (const void *)dm_kernel<1, 1> },
	{ (const void *)dm_kernel<0, 2>, (const void *)dm_kernel<1, 2> },
};
static const void *const du_fn[2][2] = {
	{ (const void *)du_kernel<0, 1>, (const void *)du_kernel<1, 1> },
	{ (const void *)du_kernel<0, 2>, (const void *)du_kernel<1, 2> },
};

/* dm_kernel's shared memory, once */
static void dm_setup(void)
{
	static int done;
	if (!done) {
		for (int i = 0; i < 4; i++)
			CUDA_CHECK(cudaFuncSetAttribute(dm_fn[i >> 1][i & 1],
			                                cudaFuncAttributeMaxDynamicSharedMemorySize,
			                                DM_SMEM));
		done = 1;
	}
}

/* the unit variants: taken for a launch of at least du_min (sequence, row tile, kv head)
 * units (DICE_DK_UNIT=N or gpu_set_dk_unit; 0: never), or by default (du_min -2) of at least
 * 3/4 of the GPU's multiprocessors' number of units, and where its shared memory can be had
 * (sm_90). Which unit kernel: du_v (DICE_DK_UNIT_V=1: du_kernel, 2: dv_kernel;
 * gpu_set_dk_unit_v), by default (0) dv_kernel from 3/4 of the number of its blocks that fit
 * at once (198 units on an H100 / H200, 4 warps a block, two an SM), whatever the keys, and
 * du_kernel below that where no sequence has more than DU_MAXS keys; dv_kernel on at most
 * dv_grid blocks (0: as many as fit at once); 3: dv_kernel with the chains in turn (ROT).
 * All give the same bits. The defaults come
 * from bench/attention-kv.cu (bench/NOTES-device.md, session 6), SDAR-4B's shape: on an
 * H100 du_kernel was faster than the cluster kernel from 128 units (batch 16) at 1K keys
 * and slower at 64, and slower at 4K keys x 1024 units; on an H200 dv_kernel took 206 us
 * against 269 (du_kernel) and 282 (cluster) at 1024 units x 1K keys, 645 against 774 and 784
 * at 4K keys, 59 against 74 and 82 at 256 units, but 47 against 40 and 46 at 128 units;
 * after the cache-type template and the lean loads (helper att, H200), dv_kernel took 190.6
 * us at 1024 units x 1K keys (204.0 before), 332.1 at 2K keys (382.2). */
#define DU_MAXS 2048
#define DU_VERSIONS 3
static int du_min = -1, du_can = -1, du_v = -1, dv_grid;

void gpu_set_dk_unit(int min_units)
{
	du_min = min_units < 0 ? -1 : min_units;
}

void gpu_set_dk_unit_v(int version, int grid)
{
	du_v = version >= 1 && version <= DU_VERSIONS ? version : -1;
	dv_grid = grid > 0 ? grid : 0;
}

/* the persistent unit kernels (versions 2 ..): kernel, shared memory, whether it can run
 * (-1: not yet asked) and how many blocks fit on a multiprocessor */
static struct {
	const void *fn[2][2];               /* [parts - 1][bf16, f16 cache] */
	int smem, can, fit;
} dv_k[DU_VERSIONS - 1] = {
	{ { { (const void *)dv_kernel<0, 0, 1>, (const void *)dv_kernel<1, 0, 1> },
	    { (const void *)dv_kernel<0, 0, 2>, (const void *)dv_kernel<1, 0, 2> } }, DV_SMEM, -1, 0 },
	{ { { (const void *)dv_kernel<0, 1, 1>, (const void *)dv_kernel<1, 1, 1> },
	    { (const void *)dv_kernel<0, 1, 2>, (const void *)dv_kernel<1, 1, 2> } }, DV_SMEM, -1, 0 },
};

/* whether persistent unit kernel version v can run (both cache types, both parts), once;
 * fit: the fewest blocks an SM of the four */
static int dv_ok(int v)
{
	int i = v - 2;
	if (dv_k[i].can < 0) {
		int fit = 1 << 30;
		dv_k[i].can = gpu_cc() >= 90;
		for (int t = 0; t < 4 && dv_k[i].can; t++) {
			const void *f = dv_k[i].fn[t >> 1][t & 1];
			int n = 0;
			dv_k[i].can = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
			                                   dv_k[i].smem) == cudaSuccess &&
			              cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, DM_WARPS * 32,
			                                                            dv_k[i].smem) ==
			              cudaSuccess && n > 0;
			fit = n < fit ? n : fit;
		}
		dv_k[i].fit = dv_k[i].can ? fit : 0;
		(void)cudaGetLastError();
	}
	return dv_k[i].can;
}

/* the unit kernel to take for a launch of `units` units, the longest sequence maxS keys:
 * 0 none (the cluster kernel), 1 du_kernel, 2 dv_kernel, 3 dv_kernel with the chains in turn */
static int du_ok(int units, int maxS)
{
	if (du_min == -1) {
		const char *e = getenv("DICE_DK_UNIT");
		char *end;
		long v = e ? strtol(e, &end, 10) : -2;
		if (e && (end == e || *end || v < 0 || v > 1 << 30)) {
			warn_msg("DICE_DK_UNIT=%s: want a number of units (0: off); "
			         "using the default", e);
			v = -2;
		}
		du_min = (int)v;
	}
	if (du_v == -1) {
		const char *e = getenv("DICE_DK_UNIT_V");
		du_v = 0;
		if (e && e[0] >= '1' && e[0] <= '0' + DU_VERSIONS && !e[1])
			du_v = *e - '0';
		else if (e)
			warn_msg("DICE_DK_UNIT_V=%s: want 1 to %d; using the default", e,
			         DU_VERSIONS);
	}
	if (du_min == 0 || units < (du_min > 0 ? du_min : 3 * gpu_sm_count() / 4))
		return 0;
	if (du_v >= 2)
		return dv_ok(du_v) ? du_v : 0;
	if (du_v == 0 && dv_ok(2) && units >= 3 * dv_k[0].fit * gpu_sm_count() / 4)
		return 2;
	if (du_min < 0 && maxS > DU_MAXS)       /* du_kernel by default only up to DU_MAXS */
		return 0;
	if (du_can < 0) {
		du_can = gpu_cc() >= 90;
		for (int i = 0; i < 4 && du_can; i++)
			du_can = cudaFuncSetAttribute(du_fn[i >> 1][i & 1],
			                              cudaFuncAttributeMaxDynamicSharedMemorySize,
			                              DU_SMEM) == cudaSuccess;
		(void)cudaGetLastError();
	}
	return du_can;
}

/* 1 when dm_kernel may run as clusters of up to DK_SPLITS_MAX blocks (sm_90, a cluster of
 * that size fits, and DICE_DK_CLUSTER is not 0; 0 for good once a cluster launch was
 * refused), checked once */
static int dm_cluster_ok = -1;

static int dm_clusters(void)
{
	if (dm_cluster_ok < 0) {
		static int sw = -1;
		int n = 0;
		dm_cluster_ok = 0;
		if (gpu_cc() >= 90 && gpu_switch(&sw, "DICE_DK_CLUSTER")) {
			cudaLaunchConfig_t cfg;
			cudaLaunchAttribute at[1];
			dm_setup();
			memset(&cfg, 0, sizeof cfg);
			memset(at, 0, sizeof at);
			at[0].id = cudaLaunchAttributeClusterDimension;
			at[0].val.clusterDim.x = DK_SPLITS_MAX;
			at[0].val.clusterDim.y = 1;
			at[0].val.clusterDim.z = 1;
			cfg.gridDim = dim3(DK_SPLITS_MAX, 1, 1);
			cfg.blockDim = dim3(DM_WARPS * 32);
			cfg.dynamicSmemBytes = DM_SMEM;
			cfg.attrs = at;
			cfg.numAttrs = 1;
			dm_cluster_ok = 1;
			for (int t = 0; t < 2; t++) {       /* (both cache types, two parts) */
				n = 0;
				if (cudaOccupancyMaxActiveClusters(&n, dm_fn[1][t], &cfg) != cudaSuccess)
					(void)cudaGetLastError();
				dm_cluster_ok = dm_cluster_ok && n > 0;
			}
		}
	}
	return dm_cluster_ok;
}

/* dm_kernel on grid in clusters of `cluster` blocks along x, with programmatic dependent
 * launch when gpu_pdl() (and, should the runtime refuse the two together, without it from
 * then on); 0, or -1 (with a warning, clusters off) when the launch was refused */
static int dm_launch_cluster(const void *fn, dim3 grid, int cluster, cudaStream_t st,
                             void **args)
{
	static int pdl_ok = 1;
	cudaLaunchConfig_t cfg;
	cudaLaunchAttribute at[2];
	cudaError_t e;

	for (;;) {
		int n = 0, pdl = gpu_pdl() && pdl_ok;
		memset(&cfg, 0, sizeof cfg);
		memset(at, 0, sizeof at);
		at[n].id = cudaLaunchAttributeClusterDimension;
		at[n].val.clusterDim.x = (unsigned)cluster;
		at[n].val.clusterDim.y = 1;
		at[n++].val.clusterDim.z = 1;
		if (pdl) {
			at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
			at[n++].val.programmaticStreamSerializationAllowed = 1;
		}
		cfg.gridDim = grid;
		cfg.blockDim = dim3(DM_WARPS * 32);
		cfg.dynamicSmemBytes = DM_SMEM;
		cfg.stream = st;
		cfg.attrs = at;
		cfg.numAttrs = n;
		e = cudaLaunchKernelExC(&cfg, fn, args);
		if (e == cudaSuccess)
			return 0;
		(void)cudaGetLastError();
		if (!pdl)
			break;
		warn_msg("attention_kv: cluster launch with PDL refused (%s); "
		         "without PDL", cudaGetErrorString(e));
		pdl_ok = 0;
	}
	warn_msg("attention_kv: cluster launch refused (%s); merging the splits "
	         "through global memory", cudaGetErrorString(e));
	dm_cluster_ok = 0;
	return -1;
}

int gpu_attention_kv16(cudaStream_t st, float *out, void *out16, enum dice_dtype dt16,
                       const float *q, const struct kv_batch *b, int l, int NH, int NKV, int HD,
                       int block)
{
	static int smem_set;
	struct dk_args a;
	int es = (int)dice_dtype_size(b->dt);

	GPU_REQUIRE(b && b->nseq >= 0 && NKV > 0 && NH % NKV == 0 && block > 0, "attention_kv");
	GPU_REQUIRE(HD > 0 && HD <= DK_HDMAX && HD * es % 16 == 0 && HD % 4 == 0, "attention_kv");
	GPU_REQUIRE(b->maxS >= b->maxT && b->maxT >= 0, "attention_kv");
	if (b->N == 0 || b->nseq == 0)
		return 0;
	memset(&a, 0, sizeof a);
	a.out = out;
	a.f16o = dt16 == DICE_F16;
	a.q = q;
	a.b = *b;
	a.l = l;
	a.NH = NH;
	a.NKV = NKV;
	a.HD = HD;
	a.group = NH / NKV;
	a.block = block;
	a.qscale = 1.4426950408889634f / sqrtf((float)HD);
	a.rtiles = CEIL_DIV(b->maxT * a.group, DK_ROWS);
	static int trig = -1;                       /* DICE_DK_TRIGGER, read once */
	if (trig < 0) {
		const char *v = getenv("DICE_DK_TRIGGER");
		trig = 2;
		if (v && v[0] >= '0' && v[0] <= '2' && !v[1])
			trig = *v - '0';
		else if (v)
			warn_msg("DICE_DK_TRIGGER=%s: want 0, 1 or 2; using 2", v);
	}
	a.trig = trig;

	size_t smem = sizeof(float) * (DK_ROWS * HD + DK_KT * (HD + 4) + DK_KT * HD);
	if (!smem_set) {
		int most = (int)(sizeof(float) * (DK_ROWS * DK_HDMAX + DK_KT * (DK_HDMAX + 4) +
		                                  DK_KT * DK_HDMAX));
		CUDA_CHECK(cudaFuncSetAttribute(dk_kernel4, cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                most));
		CUDA_CHECK(cudaFuncSetAttribute(dk_kernel8, cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                most));
		CUDA_CHECK(cudaFuncSetAttribute(dk_kernel16,
		                                cudaFuncAttributeMaxDynamicSharedMemorySize, most));
		smem_set = 1;
	}
	/* enough splits for every sequence (each has at most ceil(S / (32 tiles)) and at most
	 * sp.n) */
	a.sp = dk_splits_get();
	int nsplit = CEIL_DIV(b->maxS, DK_KT * a.sp.tiles);
	nsplit = nsplit < a.sp.n ? nsplit : a.sp.n;
#ifndef DICE_DK_NO_TC                           /* (defined: the fp32 kernel alone, to compare) */
	int tc = b->dt != DICE_F32 && HD == DM_HD;
#else
	int tc = 0;
#endif
	void *args[] = { &a };
	int cl = 0;
	if (tc) {                                   /* the tensor-core variant */
		int f16 = b->dt == DICE_F16;
		dm_setup();
		a.rtiles = CEIL_DIV(b->maxT * a.group, DM_ROWS);
		a.nz = nsplit;
		int units = b->nseq * a.rtiles * NKV, v = du_ok(units, b->maxS);
		/* out16 where every row ends in dm_out: the unit kernels, the cluster kernel, or a
		 * single split (cleared below where dk_merge_kernel finishes) */
		if ((dt16 == DICE_BF16 || dt16 == DICE_F16) && !((uintptr_t)out16 & 7))
			a.out16 = out16;
		if (v == 1) {
			gpu_launch(du_fn[dk_parts() - 1][f16], dim3(b->nseq * a.rtiles, NKV), dim3(DU_WARPS * 32),
			           DU_SMEM, st, args);
			return a.out16 != NULL;
		}
		if (v >= 2) {                           /* persistent: the blocks that fit at once */
			int grid = dv_k[v - 2].fit * gpu_sm_count();
			grid = dv_grid && dv_grid < grid ? dv_grid : grid;
			grid = units < grid ? units : grid;
			gpu_launch(dv_k[v - 2].fn[dk_parts() - 1][f16], dim3(grid), dim3(DM_WARPS * 32),
			           dv_k[v - 2].smem, st, args);
			return a.out16 != NULL;
		}
		a.cl = cl = nsplit > 1 && dm_clusters();
		dim3 grid(b->nseq * a.rtiles * nsplit, NKV, 1);
		if (cl && dm_launch_cluster(dm_fn[dk_parts() - 1][f16], grid, nsplit, st, args) != 0)
			a.cl = cl = 0;
		if (!cl) {
			if (nsplit > 1)             /* (dk_merge_kernel finishes: no 16-bit copy) */
				a.out16 = NULL;
			dk_partials(&a, nsplit, NH, HD);
			gpu_launch(dm_fn[dk_parts() - 1][f16], grid, dim3(DM_WARPS * 32), DM_SMEM, st, args);
		}
	} else {
		dk_partials(&a, nsplit, NH, HD);
		dim3 grid(b->nseq * a.rtiles, NKV, nsplit);
		int chunks = DK_KT * HD * es / 16;  /* 16-byte loads per matrix and tile */
		const void *fn = chunks <= 4 * DK_THREADS && HD <= 128 ? (const void *)dk_kernel4 :
		                 chunks <= 8 * DK_THREADS ? (const void *)dk_kernel8 :
		                 (const void *)dk_kernel16;
		gpu_launch(fn, grid, dim3(DK_THREADS), smem, st, args);
	}
	if (nsplit > 1 && !cl) {
		gpu_launch((const void *)dk_merge_kernel, dim3(CEIL_DIV(b->N * NH, 8)), dim3(256), 0, st,
		           args);
	}
	return a.out16 != NULL;
}

int gpu_attention_kv(cudaStream_t st, float *out, const float *q, const struct kv_batch *b,
                     int l, int NH, int NKV, int HD, int block)
{
	int rc = gpu_attention_kv16(st, out, NULL, DICE_BF16, q, b, l, NH, NKV, HD, block);
	return rc < 0 ? rc : 0;
}

int gpu_qkv_prep(cudaStream_t st, float *q, const float *qkv, const float *qw, const float *kw,
                 const int *pos, const struct kv_batch *b, int l, int NH, int NKV, int HD,
                 float eps, float theta)
{
	GPU_REQUIRE(b && b->N >= 0 && NH > 0 && NKV > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024,
	            "qkv_prep");
	if (b->N == 0)
		return 0;
	const float *inv_freq = gpu_rope_table(theta, HD);
	int warps = b->N * (NH + 2 * NKV);
	struct kv_batch bb = *b;
	void *args[] = { &q, &qkv, &qw, &kw, &pos, &inv_freq, &bb, &l, &NH, &NKV, &HD, &eps };
	gpu_launch((const void *)qkv_prep_kernel, dim3(CEIL_DIV(warps, 8)), dim3(256), 0, st, args);
	return 0;
}

int gpu_swiglu_cat(cudaStream_t st, float *y, const float *gu, int N, int C)
{
	GPU_REQUIRE(N >= 0 && C > 0, "swiglu_cat");
	if (N == 0)
		return 0;
	void *args[] = { &y, &gu, &N, &C };
	gpu_launch((const void *)swiglu_cat_kernel, dim3(grid_for((size_t)N * C)), dim3(256), 0, st,
	           args);
	return 0;
}

int gpu_add_rmsnorm16(cudaStream_t st, float *y, void *y16, enum dice_dtype dt16, float *x,
                      const float *r, const float *w, int N, int C, float eps)
{
	GPU_REQUIRE(N >= 0 && C > 0, "add_rmsnorm");
	if (N == 0)
		return 0;
	int T = CEIL_DIV(C, 8), threads = T >= AR_THREADS ? AR_THREADS : 32 * CEIL_DIV(T, 32);
	size_t smem = (size_t)T * sizeof(float);
	GPU_REQUIRE(smem <= 48 * 1024, "add_rmsnorm (row too wide)");
	/* y16 only where the kernel's 16-byte path takes the rows (it writes it there) */
	int f16 = dt16 == DICE_F16;
	if (!(dt16 == DICE_BF16 || f16) || C % 8 || T > AR_TPT * threads ||
	    (((uintptr_t)y | (uintptr_t)x | (uintptr_t)r | (uintptr_t)w | (uintptr_t)y16) & 15))
		y16 = NULL;
	void *args[] = { &y, &x, &r, &w, &C, &eps, &y16, &f16 };
	gpu_launch((const void *)add_rmsnorm_kernel, dim3(N), dim3(threads), smem, st, args);
	return y16 != NULL;
}

int gpu_add_rmsnorm(cudaStream_t st, float *y, float *x, const float *r, const float *w, int N,
                    int C, float eps)
{
	int rc = gpu_add_rmsnorm16(st, y, NULL, DICE_BF16, x, r, w, N, C, eps);
	return rc < 0 ? rc : 0;
}

/* ---------------------------------------------------------------- prefill attention
 *
 * attention_prefill: the rows of the sequences s0 .. nseq-1 of a kv_batch through the fused
 * training attention (attention_train.cu, gpu_attention_bf16: flash attention on the tensor
 * cores, version 3 on sm_90 at HD 128), instead of attention_kv's flash-decoding, which is
 * built for a few rows a sequence. The rows stay where they are (q's rows row0[s0] .. N-1,
 * cast to bf16 once); each sequence's keys 0 .. len+T-1 (its cache, the new rows appended
 * already) are gathered from the bf16 caches into one key array, each sequence from a
 * multiple of 64 keys (the fused kernels' key tile) with the tail of its last tile zero, and
 * the mask is the engine's: segment = the sequence, positions len + t and 0 .. len+T-1,
 * block-causal. So a sequence's keys fall into the same tiles, in the same order, alone or
 * in any batch, and a query row's result is the same bits either way: the tiles of the other
 * sequences that its 64-row line visits are all masked for it (P = 0 against finite V: the
 * sums do not move). Sequences go to the fused kernels in groups of at most PF_CHUNK keys
 * (a longer sequence alone), which bounds the tile map's cost (T x S) and changes no bit.
 * The rounding is the fused path's (bf16 q and P, fp32 accumulation), not attention_kv's. */

#define PF_CHUNK 8192                   /* keys of one fused call (a longer sequence alone) */
#define PF_KT 64                        /* the fused kernels' key tile */
#define PF_GR 16                        /* keys a block of pf_kv_kernel gathers */

static int pf_on = -1;                  /* -1: DICE_PREFILL_FA; 0 off; 1 on */

void gpu_set_prefill_fa(int on)
{
	pf_on = on < 0 ? -1 : !!on;
}

/* q rows r0 .. r0+Np-1 to bf16 (qb, rows from 0), 8 values a thread; the rows' positions and
 * sequences (the mask's qpos, qseg) */
static __global__ void pf_q_kernel(__nv_bfloat16 *qb, int *qpos, int *qseg, const float *q,
                                   struct kv_batch b, int r0, int Np, int QD)
{
	int ch = QD / 8;
	size_t total = (size_t)Np * ch;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int r = (int)(i / ch), c = (int)(i % ch), n = r0 + r;
		const float4 *src = (const float4 *)(q + (size_t)n * QD + (size_t)c * 8);
		float4 a = src[0], e = src[1];
		__nv_bfloat162 h[4] = { __floats2bfloat162_rn(a.x, a.y),
		                        __floats2bfloat162_rn(a.z, a.w),
		                        __floats2bfloat162_rn(e.x, e.y),
		                        __floats2bfloat162_rn(e.z, e.w) };
		*(uint4 *)(qb + (size_t)r * QD + (size_t)c * 8) = *(const uint4 *)h;
		if (c == 0) {
			int s = b.rowseq[n];
			qpos[r] = b.len[s] + n - b.row0[s];
			qseg[r] = s;
		}
	}
}

/* keys PF_GR blockIdx.x .. of sequence s0 + blockIdx.y (up to the end of its last tile of
 * PF_KT): its layer-l cache rows into kb, vb from the sequence's key offset (the sum of the
 * whole tiles of the sequences before it, from s0), zeros past its len + T keys; the keys'
 * positions and sequences (-1: no sequence, seen by no row) */
static __global__ void pf_kv_kernel(__nv_bfloat16 *kb, __nv_bfloat16 *vb, int *kpos, int *kseg,
                                    struct kv_batch b, int s0, int l, int KVD)
{
	__shared__ int off;
	int s = s0 + blockIdx.y, S = b.len[s] + b.row0[s + 1] - b.row0[s];
	int p0 = blockIdx.x * PF_GR, ch = KVD / 8;

	if (p0 >= CEIL_DIV(S, PF_KT) * PF_KT)   /* (block-uniform) past the sequence's tiles */
		return;
	if (threadIdx.x == 0) {
		int o = 0;
		for (int x = s0; x < s; x++)
			o += CEIL_DIV(b.len[x] + b.row0[x + 1] - b.row0[x], PF_KT) * PF_KT;
		off = o;
	}
	__syncthreads();
	size_t layer = (size_t)l * b.cap[s] * KVD;
	const uint4 *kc = (const uint4 *)((const __nv_bfloat16 *)b.k[s] + layer);
	const uint4 *vc = (const uint4 *)((const __nv_bfloat16 *)b.v[s] + layer);
	for (int i = threadIdx.x; i < PF_GR * ch; i += blockDim.x) {
		int r = i / ch, c = i % ch, p = p0 + r;
		size_t at = (size_t)(off + p) * ch + c;
		uint4 z = make_uint4(0, 0, 0, 0);
		((uint4 *)kb)[at] = p < S ? kc[(size_t)p * ch + c] : z;
		((uint4 *)vb)[at] = p < S ? vc[(size_t)p * ch + c] : z;
		if (c == 0) {
			kpos[off + p] = p;
			kseg[off + p] = p < S ? s : -1;
		}
	}
}

#define PF_RND(x) (((x) + 255) / 256 * 256)

/* the keys a sequence of S takes in the gathered key array: whole tiles */
static int pf_keys(int S)
{
	return CEIL_DIV(S, PF_KT) * PF_KT;
}

int gpu_attention_prefill(cudaStream_t st, float *out, const float *q, const struct kv_batch *b,
                          int s0, const int *row0h, const int *lenh, int l, int NH, int NKV,
                          int HD, int block)
{
	static int sw = -1;

	if (!(pf_on < 0 ? gpu_switch(&sw, "DICE_PREFILL_FA") : pf_on))
		return -1;
	if (!b || b->dt != DICE_BF16 || (HD != 64 && HD != 128) || gpu_cc() < 80 || NKV <= 0 ||
	    NH % NKV || block <= 0)
		return -1;
	if (!row0h)                             /* only whether it could serve this model */
		return out ? -1 : 0;
	GPU_REQUIRE(lenh && s0 >= 0 && s0 <= b->nseq && l >= 0, "attention_prefill");
	int np = b->nseq - s0, r0 = row0h[s0], Np = b->N - r0, QD = NH * HD, KVD = NKV * HD;
	if (np == 0 || Np == 0)
		return 0;
	/* the groups of sequences: keys of each, whether the fused kernels take them, the
	 * largest scratch */
	size_t head = 0;
	int Sall = 0, keys = 0, rows = 0, g0 = s0;
	for (int s = s0; s <= b->nseq; s++) {
		int Ss = s < b->nseq ? pf_keys(lenh[s] + row0h[s + 1] - row0h[s]) : 0;
		if (s == b->nseq || (s > g0 && keys + Ss > PF_CHUNK)) {  /* group g0 .. s-1 ends */
			if (rows && !gpu_attention_bf16_ok(rows, keys, HD))
				return -1;
			size_t h = rows ? gpu_attention_bf16_scratch(rows, keys) : 0;
			head = h > head ? h : head;
			g0 = s;
			keys = rows = 0;
		}
		keys += Ss;
		rows += s < b->nseq ? row0h[s + 1] - row0h[s] : 0;
		Sall += Ss;
	}
	if (!out)
		return 0;
	head = PF_RND(head);
	size_t nq = (size_t)Np * QD, nk = (size_t)Sall * KVD;
	size_t oq = head, ok = oq + PF_RND(nq * 2), ov = ok + PF_RND(nk * 2);
	size_t of = ov + PF_RND(nk * 2), total = of + (size_t)(2 * Np + 2 * Sall) * 4;
	char *sc = (char *)gpu_scratch(total);
	__nv_bfloat16 *qb = (__nv_bfloat16 *)(sc + oq), *kb = (__nv_bfloat16 *)(sc + ok);
	__nv_bfloat16 *vb = (__nv_bfloat16 *)(sc + ov);
	int *qpos = (int *)(sc + of), *qseg = qpos + Np, *kpos = qseg + Np, *kseg = kpos + Sall;
	struct kv_batch bb = *b;
	int maxg = CEIL_DIV(pf_keys(b->maxS), PF_GR);

	pf_q_kernel<<<grid_for(nq / 8), 256, 0, st>>>(qb, qpos, qseg, q, bb, r0, Np, QD);
	CUDA_CHECK_LAUNCH();
	pf_kv_kernel<<<dim3(maxg, np), 256, 0, st>>>(kb, vb, kpos, kseg, bb, s0, l, KVD);
	CUDA_CHECK_LAUNCH();
	keys = rows = 0;
	g0 = s0;
	for (int s = s0, ko = 0, qo = 0; s <= b->nseq; s++) {
		int Ss = s < b->nseq ? pf_keys(lenh[s] + row0h[s + 1] - row0h[s]) : 0;
		if (s == b->nseq || (s > g0 && keys + Ss > PF_CHUNK)) {
			if (rows) {
				struct attn_mask m = { block, qpos + qo, kpos + ko, qseg + qo, kseg + ko,
				                       NULL, NULL };
				float *o = out + (size_t)(r0 + qo) * QD;
				const void *gq = qb + (size_t)qo * QD, *gk = kb + (size_t)ko * KVD;
				const void *gv = vb + (size_t)ko * KVD;
				int e = gpu_attention_bf16(st, o, gq, gk, gv, rows, keys, NH, NKV, HD, &m,
				                           sc);
				if (e)
					return -1;
			}
			g0 = s;
			ko += keys;
			qo += rows;
			keys = rows = 0;
		}
		keys += Ss;
		rows += s < b->nseq ? row0h[s + 1] - row0h[s] : 0;
	}
	return 0;
}
