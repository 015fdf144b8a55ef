/* attention.cu: out(T,NH,HD) = softmax(q k^T / sqrt(HD) + mask) v under the attn_mask rule of
 * lib/ops.h (device arrays), GQA, online softmax, never a materialised mask.
 *
 * One block holds ATT_ROWS "query rows" of one kv head: row r = t * group + g is query t,
 * head kh * group + g, so the heads that share a K/V tile read it once. Keys stream through
 * shared memory ATT_KT at a time; a tile that no row of the block may see is skipped before
 * it is loaded (the upper triangle of a block-causal prefill costs only the mask test).
 * Each warp owns one row: lane j scores key j of the tile, then the warp folds the tile into
 * its running max / sum / output (lane owns output channels lane, lane+32, ...).
 * When the grid is too small to fill the GPU (decode: T=4, S large) the keys are split over
 * gridDim.z and a second kernel merges the partial (max, sum, output) triples. A query with
 * no visible key gets zeros. */
#include <math.h>

#include "common.cuh"

#define ATT_ROWS 8         /* query rows (= warps) per block */
#define ATT_KT 32          /* keys per shared-memory tile (= lanes) */
#define ATT_HDMAX 256
#define ATT_SPLIT_MIN 256  /* fewest keys per split */

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

static __global__ void attention_kernel(struct att_args a)
{
	extern __shared__ float smem[];
	int HD = a.HD, ldk = HD + 1;                    /* K rows padded: no bank conflicts */
	float *qs = smem;                               /* (ATT_ROWS, HD) */
	float *ks = qs + ATT_ROWS * HD;                 /* (ATT_KT, HD+1) */
	float *vs = ks + ATT_KT * ldk;                  /* (ATT_KT, HD) */
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int kh = blockIdx.y, TG = a.T * a.group;
	int row = blockIdx.x * ATT_ROWS + wid;
	int valid = row < TG;
	int t = valid ? row / a.group : 0, h = kh * a.group + (valid ? row % a.group : 0);
	int s_begin = blockIdx.z * a.split_len, s_end = min(a.S, s_begin + a.split_len);
	int qb = a.m.qpos[t] / a.m.block;
	int qseg = a.m.qseg ? a.m.qseg[t] : 0, qnz = a.m.qnoisy ? a.m.qnoisy[t] : 0;
	float o[ATT_HDMAX / 32];
	float mx = -INFINITY, l = 0.0f;

	for (int i = 0; i < ATT_HDMAX / 32; i++)
		o[i] = 0.0f;
	for (int c = lane; c < HD; c += 32)
		qs[wid * HD + c] = valid ? a.q[((size_t)t * a.NH + h) * HD + c] : 0.0f;

	for (int s0 = s_begin; s0 < s_end; s0 += ATT_KT) {
		int s = s0 + lane;
		int ok = valid && s < s_end && att_allowed(&a.m, qb, qseg, qnz, s);
		unsigned int vis = __ballot_sync(0xffffffffu, ok);
		if (!__syncthreads_or(vis != 0))
			continue;                       /* no row sees any key of this tile */
		for (int i = threadIdx.x; i < ATT_KT * HD; i += blockDim.x) {
			int j = i / HD, c = i % HD;
			size_t g = ((size_t)(s0 + j) * a.NKV + kh) * HD + c;
			int in = s0 + j < s_end;
			ks[j * ldk + c] = in ? a.k[g] : 0.0f;
			vs[j * HD + c] = in ? a.v[g] : 0.0f;
		}
		__syncthreads();
		if (vis) {
			float sc = -INFINITY;
			if (ok) {
				const float *qr = qs + wid * HD, *kr = ks + lane * ldk;
				float d = 0.0f;
				for (int c = 0; c < HD; c++)
					d += qr[c] * kr[c];
				sc = d * a.scale;
			}
			float mnew = fmaxf(mx, warp_max(sc));
			float corr = expf(mx - mnew);           /* 0 on the first visible tile */
			float p = ok ? expf(sc - mnew) : 0.0f;
			l = l * corr + warp_sum(p);
#pragma unroll
			for (int i = 0; i < ATT_HDMAX / 32; i++)
				o[i] *= corr;
			for (int j = 0; j < ATT_KT; j++) {
				float pj = __shfl_sync(0xffffffffu, p, j);
				if (pj == 0.0f)
					continue;
#pragma unroll
				for (int i = 0; i < ATT_HDMAX / 32; i++) {
					int c = lane + 32 * i;
					if (c < HD)
						o[i] += pj * vs[j * HD + c];
				}
			}
			mx = mnew;
		}
		__syncthreads();
	}
	if (!valid)
		return;
	if (gridDim.z == 1) {
		float *orow = a.out + ((size_t)t * a.NH + h) * HD;
		float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
		for (int i = 0; i < ATT_HDMAX / 32; i++) {
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
	for (int i = 0; i < ATT_HDMAX / 32; i++) {
		int c = lane + 32 * i;
		if (c < HD)
			a.po[pi * HD + c] = o[i];
	}
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
	GPU_REQUIRE(HD > 0 && HD <= ATT_HDMAX && m && m->block > 0, "attention");
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
		CUDA_CHECK(cudaFuncSetAttribute(attention_kernel,
		                                cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                (int)(sizeof(float) * (ATT_ROWS + 2 * ATT_KT + 1) * ATT_HDMAX)));
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
	attention_kernel<<<grid, 32 * ATT_ROWS, smem, st>>>(a);
	CUDA_CHECK_LAUNCH();
	if (nsplit > 1) {
		int warps = T * NH;
		attention_merge_kernel<<<CEIL_DIV(warps, 8), 256, 0, st>>>(a, nsplit);
		CUDA_CHECK_LAUNCH();
	}
	return 0;
}
