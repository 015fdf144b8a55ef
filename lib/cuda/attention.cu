/* attention.cu: out(T,NH,HD) = softmax(q k^T / sqrt(HD) + mask) v under the attn_mask rule of
 * lib/ops.h (device arrays), GQA, online softmax, never a materialised mask.
 *
 * One block holds ATT_ROWS "query rows" of one kv head: row r = t * group + g is query t,
 * head kh * group + g, so the heads that share a K/V tile read it once. Keys stream through
 * shared memory ATT_KT at a time; a tile that no row of the block may see is skipped before
 * it is loaded (the upper triangle of a block-causal prefill costs only the mask test).
 * Each warp owns ATT_RW rows: lane j scores key j of the tile against each of them (every K
 * value read from shared memory serves ATT_RW rows), then the warp folds the tile into each
 * row's running max / sum / output (lane owns output channels lane, lane+32, ...; every V
 * value read serves ATT_RW rows). The next
 * visible tile is loaded into registers (16-byte loads) while the current one is used.
 * HD must be a multiple of 4 and at most 256; q, k, v 16-byte aligned.
 * When the grid is too small to fill the GPU (decode: T=4, S large) the keys are split over
 * gridDim.z and a second kernel merges the partial (max, sum, output) triples. A query with
 * no visible key gets zeros. */
#include <math.h>

#include "common.cuh"

#define ATT_RW 4           /* query rows per warp */
#define ATT_WARPS 8
#define ATT_ROWS (ATT_RW * ATT_WARPS)   /* query rows per block */
#define ATT_KT 32          /* keys per shared-memory tile (= lanes) */
#define ATT_HDMAX 256
#define ATT_SPLIT_MIN 64   /* fewest keys per split */
#define ATT_THREADS (32 * ATT_WARPS)
#define ATT_NLD_MAX (ATT_KT * ATT_HDMAX / 4 / ATT_THREADS)

struct att_args {
	float *out;                         /* (T,NH,HD) */
	const float *q, *k, *v;             /* (T,NH,HD), (S,NKV,HD), (S,NKV,HD) */
	int T, S, NH, NKV, HD, group;
	float scale;
	struct attn_mask m;                 /* device arrays */
	int split_len;                      /* keys per split (gridDim.z splits) */
	float *pm, *pl, *po;                /* partials (splits, NKV, T*group[, HD]) when split */
};

/* ---------------------------------------------------------------- CUDA kernels */

/* attn_allowed() of ops_cpu.c, for one (query, key) pair; qpos etc. already read */
static __device__ __forceinline__ int att_allowed(const struct attn_mask *m, int qb, int qseg,
                                                  int qnz, int j)
{
	int kb = m->kpos[j] / m->block;

	if (m->qseg && m->kseg && qseg != m->kseg[j])
		return 0;
	if (!m->qnoisy || !m->knoisy)
		return kb <= qb;
	if (qnz)
		return m->knoisy[j] ? kb == qb : kb < qb;
	return m->knoisy[j] ? 0 : kb <= qb;
}

/* one warp's rows: validity and what the mask needs of each query */
struct att_rows {
	int valid[ATT_RW], t[ATT_RW], h[ATT_RW], qb[ATT_RW], qseg[ATT_RW], qnz[ATT_RW];
};

/* may row i of this warp see key s (s < s_end)? */
static __device__ __forceinline__ int row_sees(const struct att_args *a, const struct att_rows *w,
                                               int i, int s, int s_end)
{
	return w->valid[i] && s < s_end && att_allowed(&a->m, w->qb[i], w->qseg[i], w->qnz[i], s);
}

/* does any row of the block see any key of the tile at s0? (every thread must call) */
static __device__ __forceinline__ int tile_visible(const struct att_args *a,
                                                   const struct att_rows *w, int s0, int s_end)
{
	int s = s0 + (threadIdx.x & 31), any = 0;
#pragma unroll
	for (int i = 0; i < ATT_RW; i++)
		any |= row_sees(a, w, i, s, s_end);
	return __syncthreads_or(any);
}

/* the K/V tile at s0 into registers: 16-byte loads, all issued before any is used */
static __device__ __forceinline__ void tile_load(const struct att_args *a, float4 *kr, float4 *vr,
                                                 int nld, int s0, int s_end, int kh)
{
	int hd4 = a->HD / 4;
	for (int u = 0; u < nld; u++) {
		int idx = threadIdx.x + u * ATT_THREADS, j = idx / hd4, c4 = idx % hd4;
		float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		kr[u] = z;
		vr[u] = z;
		if (j < ATT_KT && s0 + j < s_end) {
			size_t g = ((size_t)(s0 + j) * a->NKV + kh) * a->HD + 4 * c4;
			kr[u] = __ldg((const float4 *)(a->k + g));
			vr[u] = __ldg((const float4 *)(a->v + g));
		}
	}
}

static __device__ __forceinline__ void tile_store(const struct att_args *a, const float4 *kr,
                                                  const float4 *vr, int nld, float *ks, float *vs)
{
	int hd4 = a->HD / 4, ldk = a->HD + 1;
	for (int u = 0; u < nld; u++) {
		int idx = threadIdx.x + u * ATT_THREADS, j = idx / hd4, c4 = idx % hd4;
		if (j < ATT_KT) {
			float *kd = ks + j * ldk + 4 * c4;
			kd[0] = kr[u].x;
			kd[1] = kr[u].y;
			kd[2] = kr[u].z;
			kd[3] = kr[u].w;
			*(float4 *)(vs + j * a->HD + 4 * c4) = vr[u];
		}
	}
}

/* NLD: float4 loads per thread per matrix and tile (ATT_KT * HD / 4 / ATT_THREADS, rounded
 * up); NO: output channels per lane (HD / 32, rounded up). Both compile-time per kernel. */
static __device__ __forceinline__ void attention_body(const struct att_args &a, const int NLD,
                                                      const int NO)
{
	extern __shared__ float4 smem4[];
	float *smem = (float *)smem4;
	int HD = a.HD, ldk = HD + 1;                    /* K rows padded: no bank conflicts */
	float *qs = smem;                               /* (ATT_ROWS, HD) */
	float *ks = qs + ATT_ROWS * HD;                 /* (ATT_KT, HD+1) */
	float *vs = ks + ATT_KT * ldk;                  /* (ATT_KT, HD), 16-byte aligned */
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int kh = blockIdx.y, TG = a.T * a.group;
	int row0 = blockIdx.x * ATT_ROWS + wid * ATT_RW;
	int s_begin = blockIdx.z * a.split_len, s_end = min(a.S, s_begin + a.split_len);
	struct att_rows w;
	float4 kr[ATT_NLD_MAX], vr[ATT_NLD_MAX];
	float o[ATT_RW][ATT_HDMAX / 32], mx[ATT_RW], l[ATT_RW];

#pragma unroll
	for (int i = 0; i < ATT_RW; i++) {
		int row = row0 + i;
		w.valid[i] = row < TG;
		w.t[i] = w.valid[i] ? row / a.group : 0;
		w.h[i] = kh * a.group + (w.valid[i] ? row % a.group : 0);
		w.qb[i] = a.m.qpos[w.t[i]] / a.m.block;
		w.qseg[i] = a.m.qseg ? a.m.qseg[w.t[i]] : 0;
		w.qnz[i] = a.m.qnoisy ? a.m.qnoisy[w.t[i]] : 0;
		mx[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < NO; c++)
			o[i][c] = 0.0f;
		float *qr = qs + (wid * ATT_RW + i) * HD;
		const float *qg = a.q + ((size_t)w.t[i] * a.NH + w.h[i]) * HD;
		for (int c = lane; c < HD; c += 32)
			qr[c] = w.valid[i] ? qg[c] : 0.0f;
	}

	int s0 = s_begin;
	while (s0 < s_end && !tile_visible(&a, &w, s0, s_end))
		s0 += ATT_KT;
	if (s0 < s_end)
		tile_load(&a, kr, vr, NLD, s0, s_end, kh);
	while (s0 < s_end) {
		__syncthreads();                        /* the last tile's readers are done */
		tile_store(&a, kr, vr, NLD, ks, vs);
		__syncthreads();
		/* the next visible tile's loads fly while this one is used */
		int s1 = s0 + ATT_KT;
		while (s1 < s_end && !tile_visible(&a, &w, s1, s_end))
			s1 += ATT_KT;
		if (s1 < s_end)
			tile_load(&a, kr, vr, NLD, s1, s_end, kh);

		int s = s0 + lane, ok[ATT_RW], any = 0;
#pragma unroll
		for (int i = 0; i < ATT_RW; i++) {
			ok[i] = row_sees(&a, &w, i, s, s_end);
			any |= ok[i];
		}
		if (__ballot_sync(0xffffffffu, any)) {
			float d[ATT_RW], p[ATT_RW];
#pragma unroll
			for (int i = 0; i < ATT_RW; i++)
				d[i] = 0.0f;
			if (any) {
				const float *kk = ks + lane * ldk;
				for (int c4 = 0; c4 < HD / 4; c4++) {
					float k0 = kk[4 * c4], k1 = kk[4 * c4 + 1];
					float k2 = kk[4 * c4 + 2], k3 = kk[4 * c4 + 3];
#pragma unroll
					for (int i = 0; i < ATT_RW; i++) {
						float4 qq = ((const float4 *)(qs + (wid * ATT_RW + i) * HD))[c4];
						d[i] += qq.x * k0;
						d[i] += qq.y * k1;
						d[i] += qq.z * k2;
						d[i] += qq.w * k3;
					}
				}
			}
#pragma unroll
			for (int i = 0; i < ATT_RW; i++) {
				float sc = ok[i] ? d[i] * a.scale : -INFINITY;
				float mnew = fmaxf(mx[i], warp_max(sc));
				/* a row that has seen nothing yet keeps l = 0, o = 0 */
				float corr = mnew == -INFINITY ? 1.0f : expf(mx[i] - mnew);
				p[i] = ok[i] ? expf(sc - mnew) : 0.0f;
				l[i] = l[i] * corr + warp_sum(p[i]);
#pragma unroll
				for (int c = 0; c < NO; c++)
					o[i][c] *= corr;
				mx[i] = mnew;
			}
			for (int j = 0; j < ATT_KT; j++) {
				float pj[ATT_RW];
				int nz = 0;
#pragma unroll
				for (int i = 0; i < ATT_RW; i++) {
					pj[i] = __shfl_sync(0xffffffffu, p[i], j);
					nz |= pj[i] != 0.0f;
				}
				if (!nz)
					continue;
#pragma unroll
				for (int c = 0; c < NO; c++) {
					int ch = lane + 32 * c;
					if (ch < HD) {
						float vv = vs[j * HD + ch];
#pragma unroll
						for (int i = 0; i < ATT_RW; i++)
							o[i][c] += pj[i] * vv;
					}
				}
			}
		}
		s0 = s1;
	}
#pragma unroll
	for (int i = 0; i < ATT_RW; i++) {
		if (!w.valid[i])
			continue;
		if (gridDim.z == 1) {
			float *orow = a.out + ((size_t)w.t[i] * a.NH + w.h[i]) * HD;
			float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
#pragma unroll
			for (int c = 0; c < NO; c++) {
				int ch = lane + 32 * c;
				if (ch < HD)
					orow[ch] = o[i][c] * inv;
			}
			continue;
		}
		size_t pi = ((size_t)blockIdx.z * a.NKV + kh) * TG + row0 + i;
		if (lane == 0) {
			a.pm[pi] = mx[i];
			a.pl[pi] = l[i];
		}
#pragma unroll
		for (int c = 0; c < NO; c++) {
			int ch = lane + 32 * c;
			if (ch < HD)
				a.po[pi * HD + ch] = o[i][c];
		}
	}
}

/* HD <= 128 and HD <= 256 */
static __global__ void __launch_bounds__(ATT_THREADS) attention128_kernel(struct att_args a)
{
	attention_body(a, ATT_KT * 128 / 4 / ATT_THREADS, 4);
}

static __global__ void __launch_bounds__(ATT_THREADS) attention256_kernel(struct att_args a)
{
	attention_body(a, ATT_KT * 256 / 4 / ATT_THREADS, 8);
}

/* one warp per (query t, head h): merge the splits' (max, sum, output) */
static __global__ void attention_merge_kernel(struct att_args a, int nsplit)
{
	int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
	int TG = a.T * a.group;

	if (w >= a.T * a.NH)
		return;
	int t = w / a.NH, h = w % a.NH, kh = h / a.group;
	int row = t * a.group + h % a.group;
	float M = -INFINITY, L = 0.0f;

	for (int z = 0; z < nsplit; z++)
		M = fmaxf(M, a.pm[((size_t)z * a.NKV + kh) * TG + row]);
	for (int z = 0; z < nsplit; z++) {
		size_t pi = ((size_t)z * a.NKV + kh) * TG + row;
		if (a.pm[pi] != -INFINITY)
			L += a.pl[pi] * expf(a.pm[pi] - M);
	}
	float *orow = a.out + ((size_t)t * a.NH + h) * a.HD;
	for (int c = lane; c < a.HD; c += 32) {
		float acc = 0.0f;
		for (int z = 0; z < nsplit; z++) {
			size_t pi = ((size_t)z * a.NKV + kh) * TG + row;
			if (a.pm[pi] != -INFINITY)
				acc += a.po[pi * a.HD + c] * expf(a.pm[pi] - M);
		}
		orow[c] = L > 0.0f ? acc / L : 0.0f;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

int gpu_attention(cudaStream_t st, float *out, const float *q, const float *k, const float *v,
                  int T, int S, int NH, int NKV, int HD, const struct attn_mask *m)
{
	static int smem_set;
	struct att_args a;

	GPU_REQUIRE(T >= 0 && S >= 0 && NKV > 0 && NH % NKV == 0, "attention");
	GPU_REQUIRE(HD > 0 && HD <= ATT_HDMAX && HD % 4 == 0 && m && m->block > 0, "attention");
	GPU_REQUIRE((((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15) == 0, "attention alignment");
	if (T == 0)
		return 0;
	if (S == 0) {                           /* nothing to see: zeros, as the CPU twin */
		CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float) * T * NH * HD, st));
		return 0;
	}
	GPU_REQUIRE(m->qpos && m->kpos, "attention mask");
	memset(&a, 0, sizeof a);
	a.out = out;
	a.q = q;
	a.k = k;
	a.v = v;
	a.T = T;
	a.S = S;
	a.NH = NH;
	a.NKV = NKV;
	a.HD = HD;
	a.group = NH / NKV;
	a.scale = 1.0f / sqrtf((float)HD);
	a.m = *m;

	size_t smem = sizeof(float) * (ATT_ROWS * HD + ATT_KT * (HD + 1) + ATT_KT * HD);
	if (!smem_set) {
		int most = (int)(sizeof(float) * (ATT_ROWS + 2 * ATT_KT + 1) * ATT_HDMAX);
		CUDA_CHECK(cudaFuncSetAttribute(attention128_kernel,
		                                cudaFuncAttributeMaxDynamicSharedMemorySize, most));
		CUDA_CHECK(cudaFuncSetAttribute(attention256_kernel,
		                                cudaFuncAttributeMaxDynamicSharedMemorySize, most));
		smem_set = 1;
	}
	int gx = CEIL_DIV(T * a.group, ATT_ROWS);
	int blocks = gx * NKV, want = 2 * gpu_sm_count();
	int nsplit = 1;
	if (blocks < want && S >= 2 * ATT_SPLIT_MIN) {
		nsplit = CEIL_DIV(want, blocks);
		if (nsplit > S / ATT_SPLIT_MIN)
			nsplit = S / ATT_SPLIT_MIN;
	}
	a.split_len = ATT_KT * CEIL_DIV(CEIL_DIV(S, nsplit), ATT_KT);
	nsplit = CEIL_DIV(S, a.split_len);
	if (nsplit > 1) {
		size_t np = (size_t)nsplit * NKV * T * a.group;
		float *p = (float *)gpu_scratch(sizeof(float) * np * (HD + 2));
		a.pm = p;
		a.pl = p + np;
		a.po = p + 2 * np;
	}
	dim3 grid(gx, NKV, nsplit);
	if (HD <= 128)
		attention128_kernel<<<grid, ATT_THREADS, smem, st>>>(a);
	else
		attention256_kernel<<<grid, ATT_THREADS, smem, st>>>(a);
	CUDA_CHECK_LAUNCH();
	if (nsplit > 1) {
		int warps = T * NH;
		attention_merge_kernel<<<CEIL_DIV(warps, 8), 256, 0, st>>>(a, nsplit);
		CUDA_CHECK_LAUNCH();
	}
	return 0;
}
