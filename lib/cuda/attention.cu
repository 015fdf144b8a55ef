/* attention.cu: out(T,NH,HD) = softmax(q k^T / sqrt(HD) + mask) v under the attn_mask rule of
 * lib/ops.h (device arrays), GQA, online softmax, never a materialised mask.
 *
 * One block holds ATT_ROWS "query rows" of one kv head: row r = t * group + g is query t,
 * head kh * group + g, so the heads that share a K/V tile read it once. Keys stream through
 * shared memory ATT_KT at a time; a tile that no row of the block may see is skipped before
 * it is loaded (the upper triangle of a block-causal prefill costs only the mask test).
 * Each warp owns one row: lane j scores key j of the tile, then the warp folds the tile into
 * its running max / sum / output (lane owns output channels lane, lane+32, ...). The next
 * visible tile is loaded into registers (16-byte loads) while the current one is used.
 * HD must be a multiple of 4 and at most 256; q, k, v 16-byte aligned.
 * When the grid is too small to fill the GPU (decode: T=4, S large) the keys are split over
 * gridDim.z and a second kernel merges the partial (max, sum, output) triples. A query with
 * no visible key gets zeros. */
#include <math.h>

#include "common.cuh"

#define ATT_ROWS 8         /* query rows (= warps) per block */
#define ATT_KT 32          /* keys per shared-memory tile (= lanes) */
#define ATT_HDMAX 256
#define ATT_SPLIT_MIN 128  /* fewest keys per split */
#define ATT_THREADS (32 * ATT_ROWS)
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

/* does any row of the block see any key of the tile at s0? (every thread must call) */
static __device__ __forceinline__ int tile_visible(const struct att_args *a, int s0, int s_end,
                                                   int valid, int qb, int qseg, int qnz)
{
	int s = s0 + (threadIdx.x & 31);
	int ok = valid && s < s_end && att_allowed(&a->m, qb, qseg, qnz, s);
	return __syncthreads_or(ok);
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
	int row = blockIdx.x * ATT_ROWS + wid;
	int valid = row < TG;
	int t = valid ? row / a.group : 0, h = kh * a.group + (valid ? row % a.group : 0);
	int s_begin = blockIdx.z * a.split_len, s_end = min(a.S, s_begin + a.split_len);
	int qb = a.m.qpos[t] / a.m.block;
	int qseg = a.m.qseg ? a.m.qseg[t] : 0, qnz = a.m.qnoisy ? a.m.qnoisy[t] : 0;
	float4 kr[ATT_NLD_MAX], vr[ATT_NLD_MAX];
	float o[ATT_HDMAX / 32];
	float mx = -INFINITY, l = 0.0f;

#pragma unroll
	for (int i = 0; i < NO; i++)
		o[i] = 0.0f;
	for (int c = lane; c < HD; c += 32)
		qs[wid * HD + c] = valid ? a.q[((size_t)t * a.NH + h) * HD + c] : 0.0f;

	int s0 = s_begin;
	while (s0 < s_end && !tile_visible(&a, s0, s_end, valid, qb, qseg, qnz))
		s0 += ATT_KT;
	if (s0 < s_end)
		tile_load(&a, kr, vr, NLD, s0, s_end, kh);
	while (s0 < s_end) {
		__syncthreads();                        /* the last tile's readers are done */
		tile_store(&a, kr, vr, NLD, ks, vs);
		__syncthreads();
		/* the next visible tile's loads fly while this one is used */
		int s1 = s0 + ATT_KT;
		while (s1 < s_end && !tile_visible(&a, s1, s_end, valid, qb, qseg, qnz))
			s1 += ATT_KT;
		if (s1 < s_end)
			tile_load(&a, kr, vr, NLD, s1, s_end, kh);

		int s = s0 + lane;
		int ok = valid && s < s_end && att_allowed(&a.m, qb, qseg, qnz, s);
		if (__ballot_sync(0xffffffffu, ok)) {
			float sc = -INFINITY;
			if (ok) {
				const float4 *q4 = (const float4 *)(qs + wid * HD);
				const float *kk = ks + lane * ldk;
				float d = 0.0f;
				for (int c4 = 0; c4 < HD / 4; c4++) {
					float4 qq = q4[c4];
					d += qq.x * kk[4 * c4];
					d += qq.y * kk[4 * c4 + 1];
					d += qq.z * kk[4 * c4 + 2];
					d += qq.w * kk[4 * c4 + 3];
				}
				sc = d * a.scale;
			}
			float mnew = fmaxf(mx, warp_max(sc));
			float corr = expf(mx - mnew);           /* 0 on the first visible tile */
			float p = ok ? expf(sc - mnew) : 0.0f;
			l = l * corr + warp_sum(p);
#pragma unroll
			for (int i = 0; i < NO; i++)
				o[i] *= corr;
			for (int j = 0; j < ATT_KT; j++) {
				float pj = __shfl_sync(0xffffffffu, p, j);
				if (pj == 0.0f)
					continue;
#pragma unroll
				for (int i = 0; i < NO; i++) {
					int c = lane + 32 * i;
					if (c < HD)
						o[i] += pj * vs[j * HD + c];
				}
			}
			mx = mnew;
		}
		s0 = s1;
	}
	if (!valid)
		return;
	if (gridDim.z == 1) {
		float *orow = a.out + ((size_t)t * a.NH + h) * HD;
		float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
		for (int i = 0; i < NO; i++) {
			int c = lane + 32 * i;
			if (c < HD)
				orow[c] = o[i] * inv;
		}
		return;
	}
	size_t pi = ((size_t)blockIdx.z * a.NKV + kh) * TG + row;
	if (lane == 0) {
		a.pm[pi] = mx;
		a.pl[pi] = l;
	}
#pragma unroll
	for (int i = 0; i < NO; i++) {
		int c = lane + 32 * i;
		if (c < HD)
			a.po[pi * HD + c] = o[i];
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

static int sm_count(void)
{
	static int n;
	if (!n) {
		int dev;
		CUDA_CHECK(cudaGetDevice(&dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
	}
	return n;
}

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
	int blocks = gx * NKV, want = 2 * sm_count();
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
