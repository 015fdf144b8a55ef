/* sample.cu: the sampling op (lib/ops.h .sample) on the GPU: one thread block per sampled row
 * of logits; only the token ids and probabilities go back to the host.
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
 * draw, with probability 1, and passes 2 and 3 are skipped. Other filters copy only the R rows to the host and run the twin. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "choose.h"
#include "common.cuh"

#define SAMPLE_THREADS 1024

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

static __device__ float block_max_f(float v, float *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	v = warp_max(v);
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : -INFINITY;
	v = warp_max(v);
	__syncthreads();
	return v;
}

static __device__ int block_min_i(int v, int *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : INT_MAX;
	for (int o = 16; o > 0; o >>= 1)
		v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
	__syncthreads();
	return v;
}

static __device__ int block_sum_i(int v, int *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	return v;
}

/* the filtered weight of one logit: the twin's e(i) */
static __device__ __forceinline__ float weight(float l, float temperature, float thr, float mx)
{
	float e = temperature == 1.0f ? l : l / temperature;
	return e >= thr ? expf(e - mx) : 0.0f;
}

/* one row's draw by the whole block: l (V), the uniform uu; thread 0 writes *tok, *prob */
static __device__ void sample_row(int *tok, float *prob, const float *l, double uu, int V,
                                  float temperature, int top1)
{
	__shared__ double shd[32];
	__shared__ float shf[32];
	__shared__ int shi[32];
	int per = CEIL_DIV(V, (int)blockDim.x), lo = threadIdx.x * per, hi = min(V, lo + per);
	float mx = -INFINITY, thr;
	double s = 0, total, acc, target;
	int last = -1, cand = INT_MAX;

	int first = INT_MAX, n = 0;            /* top-k 1: this thread's first maximum, how many */

	/* pass 1: 16-byte loads where the rows allow (V a multiple of 4), a few in flight a
	 * thread; each thread still meets its indices in increasing order, so its first maximum
	 * and count are those of the scalar walk */
	if (!(V & 3)) {
		const float4 *l4 = (const float4 *)l;
#pragma unroll 4
		for (int i = threadIdx.x; i < V / 4; i += blockDim.x) {
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
		for (int i = threadIdx.x; i < V; i += blockDim.x) {
			float e = temperature == 1.0f ? l[i] : l[i] / temperature;
			if (e > mx)
				mx = e, first = i, n = 1;
			else if (e == mx)
				n++;
		}
	}
	float mine = mx;
	mx = block_max_f(mx, shf);
	thr = top1 ? mx : -INFINITY;
	if (top1) {             /* one maximum (the rule, not the exception): it is the draw */
		int all = block_sum_i(mine == mx ? n : 0, shi);
		first = block_min_i(mine == mx ? first : INT_MAX, shi);
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
	cand = block_min_i(cand, shi);
	/* u * sum at or past the end (rounding): the last kept index, as the twin's walk ends */
	last = -block_min_i(-last, shi);
	if (threadIdx.x == 0) {
		int t = cand == INT_MAX ? last : cand;
		*tok = t;
		*prob = (float)(weight(l[t], temperature, thr, mx) / total);
	}
}

static __global__ void sample_kernel(int *tok, float *prob, const float *logits,
                                     const int *rows, const double *u, int V,
                                     float temperature, int top1)
{
	sample_row(&tok[blockIdx.x], &prob[blockIdx.x], logits + (size_t)rows[blockIdx.x] * V,
	           u[blockIdx.x], V, temperature, top1);
}

static int on_gpu(int V, int top_k, float top_p)
{
	return top_p >= 1.0f && (top_k == 1 || top_k <= 0 || top_k >= V);
}

extern "C" int gpu_sample(cudaStream_t st, int *tok, float *prob, const float *logits,
                          const int *rows, const double *u, int R, int V, float temperature,
                          int top_k, float top_p)
{
	GPU_REQUIRE(R >= 0 && V > 0 && temperature > 0.0f, "sample");
	GPU_REQUIRE(on_gpu(V, top_k, top_p), "sample");
	if (!R)
		return 0;
	sample_kernel<<<R, SAMPLE_THREADS, 0, st>>>(tok, prob, logits, rows, u, V, temperature,
	                                            top_k == 1);
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
			fprintf(stderr, "dice: sample: out of host memory\n");
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

/* .denoise (lib/ops.h): one thread block per (sequence, position) draws a masked position as
 * sample_kernel does; the last of a sequence's blocks to finish (a counter per sequence, left
 * at 0 again) applies lib/choose.h's rule to the block's draws, as the CPU twin does. ds, u
 * on the device; tok, prob (n * B) and count (n, zeros) scratch, count apart from the others
 * (a launch of fewer sequences must find its counters where they were left at zero). */
static __global__ void denoise_kernel(const float *logits, int V, const struct denoise_seq *ds,
                                      int B, const double *u, int *out, int *tok, float *prob,
                                      unsigned *count, int decoding, float threshold,
                                      float temperature, int top1)
{
	__shared__ int last;
	int s = blockIdx.x / B, j = blockIdx.x % B;
	const struct denoise_seq d = ds[s];

	if (d.msk[j]) {
		int k = d.u0;
		for (int i = 0; i < j; i++)
			k += d.msk[i];
		sample_row(&tok[blockIdx.x], &prob[blockIdx.x], logits + (size_t)(d.row + j) * V, u[k],
		           V, temperature, top1);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		last = atomicAdd(&count[s], 1u) == (unsigned)B - 1;
	}
	__syncthreads();
	if (!last || threadIdx.x)
		return;
	__threadfence();
	count[s] = 0;
	int tk[32];
	float conf[32];
	for (int i = 0; i < B; i++) {
		int mi = d.msk[i];
		tk[i] = mi ? __ldcg(&tok[s * B + i]) : d.x[i];
		conf[i] = mi ? __ldcg(&prob[s * B + i]) : 0.0f;
	}
	dice_commit(decoding, B, d.x, d.msk, d.step, d.conf, d.gstep, d.quota, threshold, tk,
	            conf, out + s * B);
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

extern "C" int gpu_denoise(cudaStream_t st, const float *logits, int V,
                           const struct denoise_seq *ds, int n, int B, const double *u, int *out,
                           int decoding, float threshold, float temperature, int top_k,
                           float top_p)
{
	/* the counters (zeros between launches: each launch's last blocks leave them so) and
	 * the draws, each grown on demand, a new counter array zeroed */
	static char *cnt, *draws;
	static size_t cnt_cap, draws_cap;
	size_t nd = (size_t)n * B;

	GPU_REQUIRE(n >= 0 && V > 0 && B >= 1 && B <= 32 && temperature > 0.0f, "denoise");
	if (!on_gpu(V, top_k, top_p))
		return -1;
	if (!n)
		return 0;
	if (dev_grow(&cnt, &cnt_cap, (size_t)n * sizeof(unsigned)))
		CUDA_CHECK(cudaMemsetAsync(cnt, 0, cnt_cap, st));
	dev_grow(&draws, &draws_cap, nd * 8);          /* tok (nd ints), then prob (nd floats) */
	denoise_kernel<<<n * B, SAMPLE_THREADS, 0, st>>>(logits, V, ds, B, u, out, (int *)draws,
	                                                (float *)(draws + nd * 4), (unsigned *)cnt,
	                                                decoding, threshold, temperature,
	                                                top_k == 1);
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
