/* gpu-ops: times every op of the CUDA backend (lib/gpu.h) at SDAR-8B shapes (C 4096, MLP
 * 12288, 32/8 heads of 128, vocab 151936) for decode (N=4..64) and prefill (N=4096), and
 * prints each against its roofline floor: max(bytes / copy bandwidth, FLOPs / peak), with
 * the copy bandwidth (device-to-device copy, bytes read + written), the bf16 tensor-core peak
 * and the fp32 peak (cuBLAS GEMM 8192^3 on random data) all measured in the same run.
 * A figure is the median over REPS samples; a sample is the mean of INNER back-to-back
 * launches timed with CUDA events (launch gaps included, as an eager decode step sees).
 * Last, one SDAR-8B decoder layer's decode step (N=4, 1028 keys) through the ops table, eager
 * and replayed as a CUDA graph, against its floor (weight bytes + K/V cache over bandwidth).
 * Usage: gpu-ops [REPS] (default 30). Run by bench/gpu-ops.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

#include "gpu.h"
#include "bench.cuh"

#define INNER 10
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "gpu-ops: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	fprintf(stderr, "gpu-ops: %s:%d: cublas %d\n", __FILE__, __LINE__, (int)s_); exit(1); } } while (0)

enum op { OP_MATMUL, OP_GEMV, OP_CUBLAS, OP_RMSNORM, OP_ROPE, OP_SWIGLU, OP_ADD, OP_ATTN, OP_EMBED,
          OP_COPY, OP_GEMM_BF16, OP_GEMM_F32, OP_LAYER, OP_LAYER_GRAPH };

struct bcase {
	enum op op;
	const char *label;
	int N, in, out;                         /* matmul; N,C for the others in N,in */
	enum dice_dtype dt;
	int T, S;                               /* attention */
	double bytes, flops;
	int peak;                               /* 0 none, 1 bf16 tensor, 2 fp32 */
};

static int REPS = 30;
static cudaStream_t st;
static cublasHandle_t cub;
static float *A, *B, *Cbuf;                 /* activations (fp32) */
static void *W;                             /* weights, big enough for the lm head in bf16 */
static int *ids, *qpos, *kpos;

static __global__ void fill_kernel(float *p, size_t n, unsigned int seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned int h = (unsigned int)i * 2654435761u ^ seed;
		h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
		p[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
	}
}

static __global__ void fill_bf16_kernel(__nv_bfloat16 *p, size_t n, unsigned int seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned int h = (unsigned int)i * 2654435761u ^ seed;
		h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
		p[i] = __float2bfloat16_rn((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
	}
}

static __global__ void iota_kernel(int *p, int n, int start, int mod)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = mod ? (start + i) % mod : start + i;
}

/* one SDAR-8B decoder layer's decode step through the ops table: N=4 tokens (one block),
 * S keys in the cache (the block's own K/V copied in), bf16 weights at distinct offsets */
#define LC 4096
#define LI 12288
static void layer(int S)
{
	const struct ops *o = gpu_ops();
	const int N = 4, NH = 32, NKV = 8, HD = 128, KV = NKV * HD;
	char *w = (char *)W;
	const void *wq = w, *wk = w + (size_t)LC * LC * 2, *wv = (char *)wk + (size_t)KV * LC * 2;
	const void *wo = (char *)wv + (size_t)KV * LC * 2, *wg = (char *)wo + (size_t)LC * LC * 2;
	const void *wu = (char *)wg + (size_t)LI * LC * 2, *wd = (char *)wu + (size_t)LI * LC * 2;
	const void *wn = (char *)wd + (size_t)LC * LI * 2;          /* norm weights */
	float *x = Cbuf, *h = x + N * LC, *q = h + N * LC, *k = q + N * LC, *v = k + N * KV;
	float *att = v + N * KV, *g = att + N * LC, *u = g + N * LI;
	float *kc = B, *vc = B + (size_t)S * KV;                    /* the cache */
	struct attn_mask m = { 4, qpos, kpos, NULL, NULL, NULL, NULL };

	o->rmsnorm(h, x, wn, DICE_BF16, N, LC, 1e-6f);
	o->matmul(q, h, wq, DICE_BF16, N, LC, LC);
	o->matmul(k, h, wk, DICE_BF16, N, LC, KV);
	o->matmul(v, h, wv, DICE_BF16, N, LC, KV);
	o->rmsnorm(q, q, wn, DICE_BF16, N * NH, HD, 1e-6f);
	o->rmsnorm(k, k, wn, DICE_BF16, N * NKV, HD, 1e-6f);
	o->rope(q, qpos, N, NH, HD, 1000000.0f);
	o->rope(k, qpos, N, NKV, HD, 1000000.0f);
	o->copy(kc + (size_t)(S - N) * KV, k, sizeof(float) * N * KV);
	o->copy(vc + (size_t)(S - N) * KV, v, sizeof(float) * N * KV);
	o->attention(att, q, kc, vc, N, S, NH, NKV, HD, &m);
	o->matmul(h, att, wo, DICE_BF16, N, LC, LC);
	o->add(x, h, (size_t)N * LC);
	o->rmsnorm(h, x, wn, DICE_BF16, N, LC, 1e-6f);
	o->matmul(g, h, wg, DICE_BF16, N, LC, LI);
	o->matmul(u, h, wu, DICE_BF16, N, LC, LI);
	o->swiglu(g, g, u, N, LI);
	o->matmul(h, g, wd, DICE_BF16, N, LI, LC);
	o->add(x, h, (size_t)N * LC);
}

static cudaGraphExec_t layer_graph;

static void launch(const struct bcase *c)
{
	struct attn_mask m = { 4, qpos, kpos, NULL, NULL, NULL, NULL };
	size_t big = (size_t)1 << 28;           /* 1 GiB of floats for the copy */
	const float one = 1.0f, zero = 0.0f;

	switch (c->op) {
	case OP_MATMUL: gpu_matmul(st, Cbuf, A, W, c->dt, c->N, c->in, c->out); break;
	case OP_GEMV: gpu_matmul_gemv(st, Cbuf, A, W, c->dt, c->N, c->in, c->out); break;
	case OP_CUBLAS: gpu_matmul_cublas(st, Cbuf, A, W, c->dt, c->N, c->in, c->out); break;
	case OP_RMSNORM: gpu_rmsnorm(st, B, A, W, c->dt, c->N, c->in, 1e-6f); break;
	case OP_ROPE: gpu_rope(st, A, qpos, c->N, c->in / 128, 128, 1000000.0f); break;
	case OP_SWIGLU: gpu_swiglu(st, Cbuf, A, B, c->N, c->in); break;
	case OP_ADD: gpu_add(st, A, B, (size_t)c->N * c->in); break;
	case OP_ATTN: gpu_attention(st, Cbuf, A, B, B + (size_t)c->S * 8 * 128, c->T, c->S, 32, 8, 128, &m); break;
	case OP_EMBED: gpu_embed(st, A, ids, W, c->dt, c->N, c->in); break;
	case OP_LAYER: layer(c->S); break;
	case OP_LAYER_GRAPH: CK(cudaGraphLaunch(layer_graph, st)); break;
	case OP_COPY: CK(cudaMemcpyAsync((char *)W + big * 4, W, big * 4, cudaMemcpyDeviceToDevice, st)); break;
	case OP_GEMM_BF16:
		CB(cublasGemmEx(cub, CUBLAS_OP_T, CUBLAS_OP_N, 8192, 8192, 8192, &one, W, CUDA_R_16BF, 8192,
		                (char *)W + ((size_t)8192 * 8192 * 2), CUDA_R_16BF, 8192, &zero, Cbuf, CUDA_R_32F,
		                8192, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
		break;
	case OP_GEMM_F32:
		CB(cublasGemmEx(cub, CUBLAS_OP_T, CUBLAS_OP_N, 8192, 8192, 8192, &one, W, CUDA_R_32F, 8192,
		                (char *)W + ((size_t)8192 * 8192 * 4), CUDA_R_32F, 8192, &zero, Cbuf, CUDA_R_32F,
		                8192, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
		break;
	}
}

/* median seconds per launch */
static double time_case(const struct bcase *c)
{
	cudaEvent_t e0, e1;
	double *s = (double *)malloc(sizeof(double) * REPS);
	int inner = c->op == OP_COPY || c->op == OP_GEMM_BF16 || c->op == OP_GEMM_F32 ? 1 : INNER;

	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < 3; i++)
		launch(c);
	CK(cudaStreamSynchronize(st));
	for (int r = 0; r < REPS; r++) {
		float ms;
		CK(cudaEventRecord(e0, st));
		for (int i = 0; i < inner; i++)
			launch(c);
		CK(cudaEventRecord(e1, st));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventElapsedTime(&ms, e0, e1));
		s[r] = ms * 1e-3 / inner;
	}
	CK(cudaGetLastError());
	bench_sort(s, REPS);
	double med = s[REPS / 2];
	free(s);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return med;
}

static struct bcase mm(enum op op, const char *label, int N, int in, int out, enum dice_dtype dt)
{
	struct bcase c;
	memset(&c, 0, sizeof c);
	c.op = op; c.label = label; c.N = N; c.in = in; c.out = out; c.dt = dt;
	c.bytes = (double)in * out * dice_dtype_size(dt) + 4.0 * N * in + 4.0 * N * out;
	c.flops = 2.0 * N * in * out;
	c.peak = dt == DICE_F32 ? 2 : 1;
	return c;
}

static struct bcase ew(enum op op, const char *label, int N, int C, double bytes)
{
	struct bcase c;
	memset(&c, 0, sizeof c);
	c.op = op; c.label = label; c.N = N; c.in = C; c.dt = DICE_BF16; c.bytes = bytes;
	return c;
}

static struct bcase attn(const char *label, int T, int S, double visible)
{
	struct bcase c;
	memset(&c, 0, sizeof c);
	c.op = OP_ATTN; c.label = label; c.T = T; c.S = S;
	c.bytes = 4.0 * (2.0 * T * 32 * 128 + 2.0 * S * 8 * 128);
	c.flops = 4.0 * T * S * 32 * 128 * visible;
	c.peak = 2;
	return c;
}

int main(int argc, char **argv)
{
	struct cudaDeviceProp prop;
	size_t wbytes = (size_t)3 << 30;        /* 3 GiB: lm head bf16 (1.2 GB), copy 2 x 1 GiB */
	size_t abytes = (size_t)4096 * 12288 * 4;

	if (argc > 1)
		REPS = atoi(argv[1]) > 2 ? atoi(argv[1]) : 3;
	if (!gpu_ops()) {
		fprintf(stderr, "gpu-ops: no GPU\n");
		return 1;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	st = gpu_stream();
	CB(cublasCreate(&cub));
	CB(cublasSetStream(cub, st));
	CK(cudaMalloc(&W, wbytes));
	CK(cudaMalloc(&A, abytes));
	CK(cudaMalloc(&B, abytes));
	CK(cudaMalloc(&Cbuf, (size_t)8192 * 8192 * 4 > abytes ? (size_t)8192 * 8192 * 4 : abytes));
	CK(cudaMalloc(&ids, 4096 * sizeof(int)));
	CK(cudaMalloc(&qpos, 8192 * sizeof(int)));
	CK(cudaMalloc(&kpos, 8192 * sizeof(int)));
	fill_kernel<<<4096, 256, 0, st>>>(A, abytes / 4, 1);
	fill_kernel<<<4096, 256, 0, st>>>(B, abytes / 4, 2);
	fill_bf16_kernel<<<4096, 256, 0, st>>>((__nv_bfloat16 *)W, wbytes / 2, 3);
	iota_kernel<<<16, 256, 0, st>>>(ids, 4096, 0, 151936);
	CK(cudaStreamSynchronize(st));

	/* the ceilings, measured now */
	struct bcase cp = ew(OP_COPY, "", 0, 0, 2.0 * ((size_t)1 << 30));
	double bw = cp.bytes / time_case(&cp);
	struct bcase g16 = ew(OP_GEMM_BF16, "", 0, 0, 0);
	double pk16 = 2.0 * 8192 * 8192 * 8192 / time_case(&g16);
	fill_kernel<<<4096, 256, 0, st>>>((float *)W, wbytes / 4, 4);
	struct bcase g32 = ew(OP_GEMM_F32, "", 0, 0, 0);
	double pk32 = 2.0 * 8192 * 8192 * 8192 / time_case(&g32);
	fill_bf16_kernel<<<4096, 256, 0, st>>>((__nv_bfloat16 *)W, wbytes / 2, 3);

	/* the decode step's pos: the block at 4096..4099 (attention uses kpos 0..S-1) */
	iota_kernel<<<32, 256, 0, st>>>(kpos, 8192, 0, 0);
	CK(cudaStreamSynchronize(st));

	struct bcase cs[80];
	int n = 0;
	const int C = 4096, I = 12288, V = 151936;
	cs[n++] = mm(OP_GEMV, "matmul gemv up (decode)", 4, C, I, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas up (decode)", 4, C, I, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv up (decode)", 8, C, I, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas up (decode)", 8, C, I, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv down (decode)", 4, I, C, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas down (decode)", 4, I, C, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv q_proj (decode)", 4, C, C, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas q_proj (decode)", 4, C, C, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv k_proj (decode)", 4, C, 1024, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas k_proj (decode)", 4, C, 1024, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv k_proj (2 blocks)", 8, C, 1024, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas k_proj (2 blocks)", 8, C, 1024, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv q_proj (2 blocks)", 8, C, C, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas q_proj (2 blocks)", 8, C, C, DICE_BF16);
	cs[n++] = mm(OP_MATMUL, "matmul k_proj (ops)", 4, C, 1024, DICE_BF16);
	cs[n++] = mm(OP_MATMUL, "matmul up (ops)", 4, C, I, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv lm_head (decode)", 4, C, V, DICE_BF16);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas lm_head (decode)", 4, C, V, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv f16 up (decode)", 4, C, I, DICE_F16);
	cs[n++] = mm(OP_MATMUL, "matmul up", 16, C, I, DICE_BF16);
	cs[n++] = mm(OP_MATMUL, "matmul up", 64, C, I, DICE_BF16);
	cs[n++] = mm(OP_MATMUL, "matmul up (batch 128 decode)", 512, C, I, DICE_BF16);
	cs[n++] = mm(OP_MATMUL, "matmul up (prefill)", 4096, C, I, DICE_BF16);
	cs[n++] = mm(OP_GEMV, "matmul gemv f32 o_proj (decode)", 4, C, C, DICE_F32);
	cs[n++] = mm(OP_CUBLAS, "matmul cublas f32 o_proj (decode)", 4, C, C, DICE_F32);
	cs[n++] = ew(OP_RMSNORM, "rmsnorm (decode)", 4, C, 8.0 * 4 * C + 2.0 * C);
	cs[n++] = ew(OP_RMSNORM, "rmsnorm q heads (decode)", 4 * 32, 128, 8.0 * 4 * 32 * 128 + 256);
	cs[n++] = ew(OP_RMSNORM, "rmsnorm (prefill)", 4096, C, 8.0 * 4096 * C + 2.0 * C);
	cs[n++] = ew(OP_ROPE, "rope q (decode)", 4, 32 * 128, 8.0 * 4 * 32 * 128);
	cs[n++] = ew(OP_ROPE, "rope q (prefill)", 4096, 32 * 128, 8.0 * 4096 * 32 * 128);
	cs[n++] = ew(OP_SWIGLU, "swiglu (decode)", 4, I, 12.0 * 4 * I);
	cs[n++] = ew(OP_SWIGLU, "swiglu (prefill)", 4096, I, 12.0 * 4096 * I);
	cs[n++] = ew(OP_ADD, "add (decode)", 4, C, 12.0 * 4 * C);
	cs[n++] = ew(OP_ADD, "add (prefill)", 4096, C, 12.0 * 4096 * C);
	cs[n++] = ew(OP_EMBED, "embed bf16 (decode)", 4, C, 6.0 * 4 * C);
	cs[n++] = ew(OP_EMBED, "embed bf16 (prefill)", 4096, C, 6.0 * 4096 * C);
	cs[n++] = attn("attention decode S=1028", 4, 1028, 1.0);
	cs[n++] = attn("attention decode S=4100", 4, 4100, 1.0);
	cs[n++] = attn("attention prefill 1024", 1024, 1024, 0.5);
	cs[n++] = attn("attention prefill 4096", 4096, 4096, 0.5);

	/* the layer: bytes = its bf16 weights + the K/V cache read; eager and as a CUDA graph */
	{
		double wb = 2.0 * ((double)LC * LC * 2 + 2.0 * 1024 * LC + 3.0 * LI * LC);
		struct bcase l = ew(OP_LAYER, "decoder layer 8B eager (decode)", 4, 1028, wb + 8.0 * 1028 * 1024);
		l.S = 1028;
		cs[n++] = l;
		l.op = OP_LAYER_GRAPH;
		l.label = "decoder layer 8B CUDA graph (decode)";
		cs[n++] = l;
	}

	printf("# %s, %d SMs; median of %d samples, each the mean of %d back-to-back launches\n",
	       prop.name, prop.multiProcessorCount, REPS, INNER);
	printf("# ceilings measured in this run: copy %.0f GB/s (read+write), bf16 GEMM %.0f TFLOP/s, "
	       "fp32 GEMM %.1f TFLOP/s\n", bw * 1e-9, pk16 * 1e-12, pk32 * 1e-12);
	printf("%-34s %6s %6s %7s %10s %10s %7s %8s %8s\n", "op", "N/T", "in/S", "out", "us", "floor_us",
	       "%floor", "GB/s", "TFLOP/s");
	for (int i = 0; i < n; i++) {
		struct bcase *c = &cs[i];
		/* attention: q in A, k/v in B, decode queries at the block after the cache */
		if (c->op == OP_ATTN) {
			int q0 = c->T == 4 ? c->S - 4 : 0;
			iota_kernel<<<32, 256, 0, st>>>(qpos, c->T, q0, 0);
		} else if (c->op == OP_LAYER) {
			iota_kernel<<<32, 256, 0, st>>>(qpos, 4, c->S - 4, 0);
			CK(cudaMemsetAsync(Cbuf, 0, sizeof(float) * 4 * 4096, st));
			layer(c->S);                    /* warm: scratch, rope table, cuBLAS */
			CK(cudaStreamSynchronize(st));
		} else if (c->op == OP_LAYER_GRAPH) {
			cudaGraph_t gr;
			CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
			layer(c->S);
			CK(cudaStreamEndCapture(st, &gr));
			CK(cudaGraphInstantiate(&layer_graph, gr, 0));
			CK(cudaGraphDestroy(gr));
		} else if (c->op == OP_ROPE) {
			iota_kernel<<<32, 256, 0, st>>>(qpos, c->N, 0, 0);
		}
		double t = time_case(c);
		double fl = c->peak == 1 ? c->flops / pk16 : c->peak == 2 ? c->flops / pk32 : 0;
		double floor_t = c->bytes / bw > fl ? c->bytes / bw : fl;
		printf("%-34s %6d %6d %7d %10.2f %10.2f %6.1f%% %8.0f %8.2f\n", c->label,
		       c->op == OP_ATTN ? c->T : c->N, c->op == OP_ATTN ? c->S : c->in, c->out,
		       t * 1e6, floor_t * 1e6, 100.0 * floor_t / t, c->bytes / t * 1e-9, c->flops / t * 1e-12);
	}
	CK(cudaDeviceSynchronize());
	return 0;
}
