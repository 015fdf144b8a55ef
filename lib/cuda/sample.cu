/* sample.cu: the sampling op (lib/ops.h .sample) on the GPU: one thread block per sampled row
 * of logits (top-k 1: one per CHUNK of it); only the token ids and probabilities go back to
 * the host.
 *
 * The CPU twin is sample_draw (lib/ops_cpu.c). Its draw is a walk in index order over the
 * filtered, unnormalised weights e(i) = exp(l(i)/T - max) (0 for filtered-out tokens) that
 * stops at the first index whose running double sum exceeds u * sum. Here each thread owns a
 * contiguous chunk of indices: pass 1 the maximum (strided, coalesced), pass 2 the chunk's
 * double sum, a block-wide exclusive scan of the chunk sums, pass 3 each thread walks its
 * chunk from its prefix and proposes the first index past the target; the lowest proposal
 * wins. Top-k 1 keeps the values equal to the maximum with weight exp(0) = 1, so sums are
 * exact integers and the draw (ties split by u, lowest index for small u) is the twin's,
 * bitwise. For the full softmax the sums differ from the twin's sequential ones by rounding
 * (and expf by an ulp or two), so a draw can differ only where u * sum lies within that
 * rounding of a CDF boundary (tests/gpu/test_sample.cu checks it against a double CDF).
 *
 * Top-k 1 and top-k 0 (or >= V) with top-p 1 run here, at any temperature: DICE's evaluation
 * and RL settings. With top-k 1, pass 1 also counts the maxima: one maximum (no tie) is the
 * draw, with probability 1, and passes 2 and 3 are skipped. A row of more than CHUNK logits
 * then takes a block of CHUNK_THREADS per CHUNK of it (one block reading a 150K-entry row is
 * bound by its own loads in flight): each block's pass 1 over its chunk, and the row's last
 * block to finish merges the chunks' results in order (the same maximum, first index and
 * count), so the draw is the one-block draw's; a tie sends that block through the whole row
 * as above. Other filters copy only the R rows to the host and run the twin. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "choose.h"
#include "common.cuh"

#define SAMPLE_THREADS 1024
#define CHUNK 4096              /* top-k 1: logits a block of the split draw (a multiple of 4) */
#define CHUNK_THREADS 256

/* exclusive prefix of v over the block (blockDim.x a multiple of 32, <= 1024); *total gets
 * the block's sum. sh: 32 doubles of shared memory. */
static __device__ double block_scan_d(double v, double *total, double *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
	double inc = v;

	for (int o = 1; o < 32; o <<= 1) {
		double t = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += t;
	}
	if (lane == 31)
		sh[wid] = inc;
	__syncthreads();
	if (wid == 0) {
		double w = lane < nw ? sh[lane] : 0.0;
		for (int o = 1; o < 32; o <<= 1) {
			double t = __shfl_up_sync(0xffffffffu, w, o);
			if (lane >= o)
				w += t;
		}
		sh[lane] = w;               /* inclusive prefix of the warp sums */
	}
	__syncthreads();
	double pre = (wid ? sh[wid - 1] : 0.0) + inc - v;
	*total = sh[nw - 1];
	__syncthreads();
	return pre;
}

/* the reductions' operators; a warp's, then a block's (blockDim.x a multiple of 32) reduction
 * of v, returned to every thread (id: op's identity; sh: 32 T of shared memory) */
struct op_max {
	__device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct op_min {
	__device__ int operator()(int a, int b) const { return min(a, b); }
};
struct op_add {
	__device__ int operator()(int a, int b) const { return a + b; }
};

template <typename T, typename Op>
static __device__ __forceinline__ T warp_reduce(T v, Op op)
{
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

template <typename T, typename Op>
static __device__ T block_reduce(T v, T id, Op op, T *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	v = warp_reduce(v, op);
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	v = warp_reduce(lane < nw ? sh[lane] : id, op);
	__syncthreads();
	return v;
}

/* the filtered weight of one logit: the twin's e(i) */
static __device__ __forceinline__ float weight(float l, float temperature, float thr, float mx)
{
	float e = temperature == 1.0f ? l : l / temperature;
	return e >= thr ? expf(e - mx) : 0.0f;
}

/* pass 1 over logits [lo, hi) of a row of V (lo and hi multiples of 4 where V is): this
 * thread's maximum of l / temperature, its first index and how many equal it, strided over
 * the block; 16-byte loads where the row allows (V a multiple of 4), a few in flight a
 * thread. Each thread meets its indices in increasing order, so its first maximum and count
 * are those of the scalar walk. */
static __device__ __forceinline__ void pass1(const float *l, int lo, int hi, int V,
                                             float temperature, float *mxp, int *firstp,
                                             int *np)
{
	float mx = -INFINITY;
	int first = INT_MAX, n = 0;

	if (!(V & 3)) {
		const float4 *l4 = (const float4 *)l;
#pragma unroll 4
		for (int i = lo / 4 + threadIdx.x; i < hi / 4; i += blockDim.x) {
			float4 q = l4[i];
			float e4[4] = { q.x, q.y, q.z, q.w };
			for (int j = 0; j < 4; j++) {
				float e = temperature == 1.0f ? e4[j] : e4[j] / temperature;
				if (e > mx)
					mx = e, first = 4 * i + j, n = 1;
				else if (e == mx)
					n++;
			}
		}
	} else {
		for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
			float e = temperature == 1.0f ? l[i] : l[i] / temperature;
			if (e > mx)
				mx = e, first = i, n = 1;
			else if (e == mx)
				n++;
		}
	}
	*mxp = mx, *firstp = first, *np = n;
}

/* one row's draw by the whole block: l (V), the uniform uu; thread 0 writes *tok, *prob */
static __device__ void sample_row(int *tok, float *prob, const float *l, double uu, int V,
                                  float temperature, int top1)
{
	__shared__ double shd[32];
	__shared__ float shf[32];
	__shared__ int shi[32];
	int per = CEIL_DIV(V, (int)blockDim.x), lo = threadIdx.x * per, hi = min(V, lo + per);
	float mx, thr;
	double s = 0, total, acc, target;
	int last = -1, cand = INT_MAX, first, n;        /* top-k 1: the first maximum, how many */

	pass1(l, 0, V, V, temperature, &mx, &first, &n);
	float mine = mx;
	mx = block_reduce(mx, -INFINITY, op_max(), shf);
	thr = top1 ? mx : -INFINITY;
	if (top1) {             /* one maximum (the rule, not the exception): it is the draw */
		int all = block_reduce(mine == mx ? n : 0, 0, op_add(), shi);
		first = block_reduce(mine == mx ? first : INT_MAX, INT_MAX, op_min(), shi);
		if (all == 1) {
			if (threadIdx.x == 0)
				*tok = first, *prob = 1.0f;
			return;
		}
	}
	for (int i = lo; i < hi; i++) {
		float e = weight(l[i], temperature, thr, mx);
		s += e;
		if (e > 0.0f)
			last = i;
	}
	acc = block_scan_d(s, &total, shd);
	target = uu * total;
	for (int i = lo; i < hi; i++) {
		float e = weight(l[i], temperature, thr, mx);
		if (e <= 0.0f)
			continue;
		acc += e;
		if (acc > target) {
			cand = i;
			break;
		}
	}
	cand = block_reduce(cand, INT_MAX, op_min(), shi);
	/* u * sum at or past the end (rounding): the last kept index, as the twin's walk ends */
	last = -block_reduce(-last, INT_MAX, op_min(), shi);
	if (threadIdx.x == 0) {
		int t = cand == INT_MAX ? last : cand;
		*tok = t;
		*prob = (float)(weight(l[t], temperature, thr, mx) / total);
	}
}

/* a chunk's pass 1 of the split top-k 1 draw */
struct top1_part {
	float mx;
	int first, n;
};

/* blocks a row's draw takes: CHUNK logits each for top-k 1 (1 where the row is no more) */
static int row_blocks(int V, int top1)
{
	return top1 && V > CHUNK ? CEIL_DIV(V, CHUNK) : 1;
}

/* block c's part of a split row: sample_row's pass 1 over logits [c CHUNK, (c + 1) CHUNK),
 * thread 0 writing *part */
static __device__ void top1_part(struct top1_part *part, const float *l, int V,
                                 float temperature, int c)
{
	__shared__ float shf[32];
	__shared__ int shi[32];
	int lo = c * CHUNK, hi = min(V, lo + CHUNK), first, n;
	float mx;

	pass1(l, lo, hi, V, temperature, &mx, &first, &n);
	float mine = mx;
	mx = block_reduce(mx, -INFINITY, op_max(), shf);
	n = block_reduce(mine == mx ? n : 0, 0, op_add(), shi);
	first = block_reduce(mine == mx ? first : INT_MAX, INT_MAX, op_min(), shi);
	if (threadIdx.x == 0)
		*part = (struct top1_part){ mx, first, n };
}

/* one warp merges a row's G parts (written by other blocks) into its draw: the maximum's
 * first index and count over the row, as sample_row's pass 1 finds them. Returns 1 where
 * that is the draw (one maximum), 0 for a tie (or no maximum): sample_row over the row then.
 * *tok, *prob set by lane 0 in the first case. */
static __device__ int top1_merge(int *tok, float *prob, const struct top1_part *part, int G)
{
	int lane = threadIdx.x & 31, f = INT_MAX, n = 0;
	float m = -INFINITY;

	for (int i = lane; i < G; i += 32) {    /* (each lane's parts in chunk order) */
		float pm = __ldcg(&part[i].mx);
		int pf = __ldcg(&part[i].first), pn = __ldcg(&part[i].n);
		if (pm > m)
			m = pm, f = pf, n = pn;
		else if (pm == m)
			n += pn;
	}
	float M = warp_reduce(m, op_max());
	n = warp_reduce(m == M ? n : 0, op_add());
	f = warp_reduce(m == M ? f : INT_MAX, op_min());
	if (n != 1 || f == INT_MAX)
		return 0;
	if (lane == 0)
		*tok = f, *prob = 1.0f;
	return 1;
}

/* row r = blockIdx.x / G of the R, block blockIdx.x % G of it; the row's last block to finish
 * (rc[r], left at 0 again) merges its parts */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(int *tok, float *prob, const float *logits, const int *rows, const double *u,
              int V, float temperature, int top1, int G, struct top1_part *part, unsigned *rc)
{
	__shared__ int last, drawn;
	int r = blockIdx.x / G;
	const float *l = logits + (size_t)rows[r] * V;

	if (G == 1) {
		sample_row(&tok[r], &prob[r], l, u[r], V, temperature, top1);
		return;
	}
	top1_part(&part[(size_t)r * G + blockIdx.x % G], l, V, temperature, blockIdx.x % G);
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&rc[r], 1u) == (unsigned)G - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	if (threadIdx.x < 32) {
		int ok = top1_merge(&tok[r], &prob[r], &part[(size_t)r * G], G);
		if (threadIdx.x == 0)
			drawn = ok, rc[r] = 0;
	}
	__syncthreads();
	if (!drawn)
		sample_row(&tok[r], &prob[r], l, u[r], V, temperature, 1);
}

static int on_gpu(int V, int top_k, float top_p)
{
	return top_p >= 1.0f && (top_k == 1 || top_k <= 0 || top_k >= V);
}

/* a device buffer of at least need bytes (its contents not kept): 1 when it was made anew */
static int dev_grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	if (*p)
		CUDA_CHECK(cudaFree(*p));
	*cap = need + need / 2;
	CUDA_CHECK(cudaMalloc(p, *cap));
	return 1;
}

/* at least n counters, zeros between launches (each launch's last blocks leave them so):
 * the two ops' per-row and per-sequence counters, a new array zeroed */
static unsigned *counters(cudaStream_t st, size_t n)
{
	static char *cnt;
	static size_t cap;

	if (dev_grow(&cnt, &cap, n * sizeof(unsigned)))
		CUDA_CHECK(cudaMemsetAsync(cnt, 0, cap, st));
	return (unsigned *)cnt;
}

extern "C" int gpu_sample(cudaStream_t st, int *tok, float *prob, const float *logits,
                          const int *rows, const double *u, int R, int V, float temperature,
                          int top_k, float top_p)
{
	GPU_REQUIRE(R >= 0 && V > 0 && temperature > 0.0f, "sample");
	GPU_REQUIRE(on_gpu(V, top_k, top_p), "sample");
	if (!R)
		return 0;
	static char *parts;
	static size_t parts_cap;
	int G = row_blocks(V, top_k == 1);
	if (G > 1)
		dev_grow(&parts, &parts_cap, (size_t)R * G * sizeof(struct top1_part));
	sample_kernel<<<R * G, G > 1 ? CHUNK_THREADS : SAMPLE_THREADS, 0, st>>>(
		tok, prob, logits, rows, u, V, temperature, top_k == 1, G, (struct top1_part *)parts,
		G > 1 ? counters(st, (size_t)R) : NULL);
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* host staging of the table op, grown on demand: g_host for the rows of the host path,
 * g_pin (page-locked, so that the copies are asynchronous and the host's wait is the op's
 * one sync) for the draws' inputs and results */
static void *g_host, *g_pin;
static size_t g_host_cap, g_pin_cap;

static void *pin_buf(size_t bytes)
{
	if (bytes > g_pin_cap) {
		if (g_pin)
			CUDA_CHECK(cudaFreeHost(g_pin));
		g_pin_cap = bytes + bytes / 4;
		CUDA_CHECK(cudaMallocHost(&g_pin, g_pin_cap));
	}
	return g_pin;
}

static void *host_buf(size_t bytes)
{
	if (bytes > g_host_cap) {
		free(g_host);
		g_host_cap = bytes + bytes / 4;
		g_host = malloc(g_host_cap);
		if (!g_host) {
			warn_msg("sample: out of host memory");
			exit(1);
		}
	}
	return g_host;
}

/* the table entry: uniforms and row indices up, ids and probabilities down; other filters
 * than the two above take the R rows to the host and the twin */
void cu_sample(int *tok, float *prob, const float *logits, const int *rows, const double *u,
               int R, int V, float temperature, int top_k, float top_p)
{
	cudaStream_t st = gpu_stream();

	if (R <= 0)
		return;
	if (!on_gpu(V, top_k, top_p)) {
		float *h = (float *)host_buf((size_t)R * V * 4 * sizeof(float));
		float *work = h + (size_t)R * V;
		for (int r = 0; r < R; r++)
			CUDA_CHECK(cudaMemcpyAsync(h + (size_t)r * V,
			                           logits + (size_t)(rows ? rows[r] : r) * V,
			                           (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, st));
		CUDA_CHECK(cudaStreamSynchronize(st));
		for (int r = 0; r < R; r++)
			tok[r] = sample_draw(h + (size_t)r * V, V, temperature, top_k, top_p, u[r],
			                     &prob[r], work);
		return;
	}
	/* one buffer each way: [u (R doubles) | rows (R ints)] and [tok (R ints) | prob (R floats)] */
	size_t up = (size_t)R * (sizeof(double) + sizeof(int)), down = (size_t)R * 8;
	char *h = (char *)pin_buf(up + down), *d = (char *)gpu_scratch(up + down);
	memcpy(h, u, (size_t)R * sizeof(double));
	for (int r = 0; r < R; r++)
		((int *)(h + (size_t)R * sizeof(double)))[r] = rows ? rows[r] : r;
	CUDA_CHECK(cudaMemcpyAsync(d, h, up, cudaMemcpyHostToDevice, st));
	if (gpu_sample(st, (int *)(d + up), (float *)(d + up + (size_t)R * 4), logits,
	               (const int *)(d + (size_t)R * sizeof(double)), (const double *)d, R, V,
	               temperature, top_k, top_p) != 0)
		abort();
	CUDA_CHECK(cudaMemcpyAsync(h + up, d + up, down, cudaMemcpyDeviceToHost, st));
	CUDA_CHECK(cudaStreamSynchronize(st));
	memcpy(tok, h + up, (size_t)R * sizeof(int));
	memcpy(prob, h + up + (size_t)R * 4, (size_t)R * sizeof(float));
}

/* .denoise (lib/ops.h): G thread blocks per (sequence, position) draw a masked position as
 * sample_kernel does (G > 1: each a chunk's part); the last of a sequence's B G blocks to
 * finish (a counter per sequence, left at 0 again) merges the parts (a warp a position),
 * and applies lib/choose.h's rule to the block's draws, as the CPU twin does. ds, u on the
 * device; tok, prob (n B), part (n B G) scratch; count (n) zeros at rest (a launch of fewer
 * sequences must find its counters at zero). */
static __global__ void __launch_bounds__(SAMPLE_THREADS)
denoise_kernel(const float *logits, int V, const struct denoise_seq *ds, int B, const double *u,
               int *out, int *tok, float *prob, unsigned *count, int decoding, float threshold,
               float temperature, int top1, int G, struct top1_part *part)
{
	__shared__ int last, tie[32], stok[32];
	__shared__ float sprob[32];
	int r = blockIdx.x / G, c = blockIdx.x % G, s = r / B, j = r % B;
	const struct denoise_seq d = ds[s];
	const float *row = logits + (size_t)d.row * V;

	if (d.msk[j]) {
		if (G > 1) {
			top1_part(&part[(size_t)r * G + c], row + (size_t)j * V, V, temperature, c);
		} else {
			int k = d.u0;
			for (int i = 0; i < j; i++)
				k += d.msk[i];
			sample_row(&tok[r], &prob[r], row + (size_t)j * V, u[k], V, temperature,
			           top1);
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&count[s], 1u) == (unsigned)(B * G) - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	if (G > 1) {                    /* the parts merged, a warp a position; then the ties */
		for (int i = threadIdx.x >> 5; i < B; i += blockDim.x >> 5) {
			int t = d.msk[i] && !top1_merge(&stok[i], &sprob[i],
			                                &part[(size_t)(s * B + i) * G], G);
			if ((threadIdx.x & 31) == 0)
				tie[i] = t;
		}
		__syncthreads();
		for (int i = 0, k = d.u0; i < B; k += d.msk[i], i++)
			if (d.msk[i] && tie[i])
				sample_row(&stok[i], &sprob[i], row + (size_t)i * V, u[k], V, temperature,
				           1);
		__syncthreads();
	}
	if (threadIdx.x)
		return;
	count[s] = 0;
	int tk[32];
	float conf[32];
	for (int i = 0; i < B; i++) {
		int mi = d.msk[i];
		tk[i] = !mi ? d.x[i] : G > 1 ? stok[i] : __ldcg(&tok[s * B + i]);
		conf[i] = !mi ? 0.0f : G > 1 ? sprob[i] : __ldcg(&prob[s * B + i]);
	}
	dice_commit(decoding, B, d.x, d.msk, d.step, d.conf, d.gstep, d.quota, threshold, tk,
	            conf, out + s * B);
}

extern "C" int gpu_denoise(cudaStream_t st, const float *logits, int V,
                           const struct denoise_seq *ds, int n, int B, const double *u, int *out,
                           int decoding, float threshold, float temperature, int top_k,
                           float top_p)
{
	/* the draws (tok, prob, the chunks' parts), grown on demand; the counters */
	static char *draws;
	static size_t draws_cap;
	size_t nd = (size_t)n * B;
	int G;

	GPU_REQUIRE(n >= 0 && V > 0 && B >= 1 && B <= 32 && temperature > 0.0f, "denoise");
	if (!on_gpu(V, top_k, top_p))
		return -1;
	if (!n)
		return 0;
	G = row_blocks(V, top_k == 1);
	dev_grow(&draws, &draws_cap, nd * (8 + G * sizeof(struct top1_part)));
	denoise_kernel<<<n * B * G, G > 1 ? CHUNK_THREADS : SAMPLE_THREADS, 0, st>>>(
		logits, V, ds, B, u, out, (int *)draws, (float *)(draws + nd * 4),
		counters(st, (size_t)n), decoding, threshold, temperature, top_k == 1, G,
		(struct top1_part *)(draws + nd * 8));
	CUDA_CHECK_LAUNCH();
	return 0;
}

/* the table entry: ds and u go up together through gpu_upload (no wait), into a buffer of
 * their own (the kernel before reads the last ones in stream order) */
int cu_denoise(const float *logits, int V, const struct denoise_seq *ds, int n, int B,
               const double *u, int nu, int *out, int decoding, float threshold,
               float temperature, int top_k, float top_p)
{
	static char *dev;
	static size_t cap;
	size_t a = ((size_t)n * sizeof *ds + 15) / 16 * 16, bytes = a + (size_t)nu * sizeof *u;
	cudaStream_t st = gpu_stream();

	if (n <= 0 || !on_gpu(V, top_k, top_p))         /* (the answer alone) */
		return gpu_denoise(st, logits, V, NULL, n, B, NULL, out, decoding, threshold,
		                   temperature, top_k, top_p);
	dev_grow(&dev, &cap, bytes);
	char *host = (char *)host_buf(bytes);
	memcpy(host, ds, (size_t)n * sizeof *ds);
	memcpy(host + a, u, (size_t)nu * sizeof *u);
	gpu_upload(dev, host, bytes);
	return gpu_denoise(st, logits, V, (const struct denoise_seq *)dev, n, B,
	                   (const double *)(dev + a), out, decoding, threshold, temperature, top_k,
	                   top_p);
}
