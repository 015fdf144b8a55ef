/* matmul.cu: y(N,out) fp32 = x(N,in) fp32 @ w(out,in)^T, w in fp32, bf16 or fp16 (struct ops
 * matmul: training and everything but the engine forward, which takes matmul_fixed.cu).
 * x is rounded to the weight dtype (as the tensor cores take it) and products accumulate in
 * fp32. Two paths: for decode-sized N (<= GPU_GEMV_NMAX) a bandwidth-bound kernel that reads
 * each weight row once with 16-byte loads, 4 rows per block, all N tokens per row; otherwise
 * cuBLAS (x converted into the backend scratch, GemmEx with fp32 compute and fp32 output). */
#include <string.h>

#include <cublasLt.h>

#include "gpu_bwd.h"
#include "common.cuh"

#define GEMV_ROWS 4        /* output rows per block */
#define GEMV_WARPS 4       /* warps per block, splitting the input dimension */

/* ---------------------------------------------------------------- CUDA kernels */

/* round v to dtype dt and back, as the scratch conversion for cuBLAS does */
static __device__ __forceinline__ float round_to(float v, int dt)
{
	if (dt == DICE_BF16)
		return __bfloat162float(__float2bfloat16_rn(v));
	if (dt == DICE_F16)
		return __half2float(__float2half_rn(v));
	return v;
}

/* 16 bytes of weights -> 8 (16-bit dtypes) or 4 (fp32) floats */
static __device__ __forceinline__ void unpack16(float *f, uint4 raw, int dt)
{
	unsigned int u[4] = { raw.x, raw.y, raw.z, raw.w };
	if (dt == DICE_F32) {
		for (int e = 0; e < 4; e++)
			f[e] = __uint_as_float(u[e]);
		return;
	}
#pragma unroll
	for (int e = 0; e < 4; e++) {
		if (dt == DICE_BF16) {
			f[2 * e] = __uint_as_float(u[e] << 16);
			f[2 * e + 1] = __uint_as_float(u[e] & 0xffff0000u);
		} else {
			__half2 h = *(__half2 *)&u[e];
			float2 p = __half22float2(h);
			f[2 * e] = p.x;
			f[2 * e + 1] = p.y;
		}
	}
}

/* acc[r][n] += sum over the 16 bytes raw[r] (one chunk of row r at column i) of w * x[n] */
static __device__ __forceinline__ void gemv_chunk(float acc[GEMV_ROWS][GPU_GEMV_NMAX],
                                                  const uint4 *raw, const float *x, int dt,
                                                  const int NMAX, int N, int in, int i)
{
	const int vec = dt == DICE_F32 ? 4 : 8;
	float wv[GEMV_ROWS][8];

#pragma unroll
	for (int r = 0; r < GEMV_ROWS; r++)
		unpack16(wv[r], raw[r], dt);
#pragma unroll
	for (int n = 0; n < NMAX; n++) {
		if (n >= N)
			break;
		const float4 *xp = (const float4 *)(x + (size_t)n * in + i);
		float xv[8];
		float4 a = __ldg(xp);
		xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
		if (vec == 8) {
			float4 b = __ldg(xp + 1);
			xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
		}
#pragma unroll
		for (int e = 0; e < vec; e++) {
			float xe = round_to(xv[e], dt);
#pragma unroll
			for (int r = 0; r < GEMV_ROWS; r++)
				acc[r][n] = fmaf(xe, wv[r][e], acc[r][n]);
		}
	}
}

/* One block: GEMV_ROWS output rows, its warps splitting the input dimension; each lane keeps
 * two 16-byte loads per row in flight. NMAX (4 or 8) is the compile-time bound on N. */
static __device__ __forceinline__ void gemv_body(float *y, const float *x, const void *w, int dt,
                                                 const int NMAX, int N, int in, int out)
{
	const int vec = dt == DICE_F32 ? 4 : 8;          /* elements per 16-byte load */
	const size_t esz = dt == DICE_F32 ? 4 : 2;
	const int stride = 32 * GEMV_WARPS * vec;
	__shared__ float red[GEMV_WARPS][GEMV_ROWS][GPU_GEMV_NMAX];
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	int o0 = blockIdx.x * GEMV_ROWS;

	x += (size_t)blockIdx.y * NMAX * in;    /* grid.y > 1: rows in chunks of NMAX */
	y += (size_t)blockIdx.y * NMAX * out;
	N = min(N - (int)blockIdx.y * NMAX, NMAX);
	float acc[GEMV_ROWS][GPU_GEMV_NMAX];
	const char *wrow[GEMV_ROWS];

#pragma unroll
	for (int r = 0; r < GEMV_ROWS; r++) {
		int o = min(o0 + r, out - 1);
		wrow[r] = (const char *)w + (size_t)o * in * esz;
#pragma unroll
		for (int n = 0; n < NMAX; n++)
			acc[r][n] = 0.0f;
	}
	for (int i0 = (wid * 32 + lane) * vec; i0 < in; i0 += 2 * stride) {
		int i1 = i0 + stride;
		uint4 raw0[GEMV_ROWS], raw1[GEMV_ROWS];
#pragma unroll
		for (int r = 0; r < GEMV_ROWS; r++) {
			raw0[r] = __ldcs((const uint4 *)(wrow[r] + (size_t)i0 * esz));
			if (i1 < in)
				raw1[r] = __ldcs((const uint4 *)(wrow[r] + (size_t)i1 * esz));
		}
		gemv_chunk(acc, raw0, x, dt, NMAX, N, in, i0);
		if (i1 < in)
			gemv_chunk(acc, raw1, x, dt, NMAX, N, in, i1);
	}
#pragma unroll
	for (int r = 0; r < GEMV_ROWS; r++) {
#pragma unroll
		for (int n = 0; n < NMAX; n++) {
			float v = warp_sum(acc[r][n]);
			if (lane == 0)
				red[wid][r][n] = v;
		}
	}
	__syncthreads();
	if (threadIdx.x < GEMV_ROWS * NMAX) {
		int r = threadIdx.x / NMAX, n = threadIdx.x % NMAX;
		if (n < N && o0 + r < out) {
			float v = 0.0f;
			for (int k = 0; k < GEMV_WARPS; k++)
				v += red[k][r][n];
			y[(size_t)n * out + o0 + r] = v;
		}
	}
}

/* kernels per (dtype, N bound) */
static __global__ void gemv_f32_4(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_F32, 4, N, in, out);
}

static __global__ void gemv_f32_8(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_F32, 8, N, in, out);
}

static __global__ void gemv_bf16_4(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_BF16, 4, N, in, out);
}

static __global__ void gemv_bf16_8(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_BF16, 8, N, in, out);
}

static __global__ void gemv_f16_4(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_F16, 4, N, in, out);
}

static __global__ void gemv_f16_8(float *y, const float *x, const void *w, int N, int in, int out)
{
	gemv_body(y, x, w, DICE_F16, 8, N, in, out);
}

static __global__ void to_bf16_kernel(__nv_bfloat16 *d, const float *s, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = __float2bfloat16_rn(s[i]);
}

static __global__ void to_f16_kernel(__half *d, const float *s, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = __float2half_rn(s[i]);
}

/* ---------------------------------------------------------------- kernel launchers */

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* the gemv kernel of (dtype, N bound: 4 when small, else 8) on grid.x = output rows / 4,
 * grid.y = chunks of 8 rows */
static int gemv_launch(cudaStream_t st, dim3 grid, int small, float *y, const float *x,
                       const void *w, enum dice_dtype wdt, int N, int in, int out)
{
	int block = 32 * GEMV_WARPS;

	switch (wdt) {
	case DICE_F32:
		if (small)
			gemv_f32_4<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		else
			gemv_f32_8<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		break;
	case DICE_BF16:
		if (small)
			gemv_bf16_4<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		else
			gemv_bf16_8<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		break;
	case DICE_F16:
		if (small)
			gemv_f16_4<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		else
			gemv_f16_8<<<grid, block, 0, st>>>(y, x, w, N, in, out);
		break;
	default:
		GPU_REQUIRE(0, "matmul_gemv dtype");
	}
	CUDA_CHECK_LAUNCH();
	return 0;
}

int gpu_matmul_gemv(cudaStream_t st, float *y, const float *x, const void *w,
                    enum dice_dtype wdt, int N, int in, int out)
{
	int vec = wdt == DICE_F32 ? 4 : 8;

	GPU_REQUIRE(N >= 1 && N <= GPU_GEMV_NMAX && in > 0 && out > 0, "matmul_gemv");
	GPU_REQUIRE(in % vec == 0 && aligned16(x) && aligned16(w), "matmul_gemv");
	return gemv_launch(st, dim3(CEIL_DIV(out, GEMV_ROWS)), N <= 4, y, x, w, wdt, N, in, out);
}

/* any N: the 8-row kernel over chunks of 8 rows (grid.y); a row's arithmetic is the same
 * whatever N is, so this is batch-invariant (matmul_fixed's fp32 path) */
int gpu_matmul_gemv_rows(cudaStream_t st, float *y, const float *x, const void *w,
                         enum dice_dtype wdt, int N, int in, int out)
{
	int vec = wdt == DICE_F32 ? 4 : 8;

	GPU_REQUIRE(N >= 1 && CEIL_DIV(N, 8) <= 65535 && in > 0 && out > 0, "matmul_gemv_rows");
	GPU_REQUIRE(in % vec == 0 && aligned16(x) && aligned16(w), "matmul_gemv_rows");
	return gemv_launch(st, dim3(CEIL_DIV(out, GEMV_ROWS), CEIL_DIV(N, 8)), 0, y, x, w, wdt, N,
	                   in, out);
}

/* y(N,out) fp32 = xb(N,in) @ w(out,in)^T (+ y when acc), both of type t, fp32
 * accumulation */
/* y (of type yt: fp32, or bf16 when t is) = x w^T, or += with acc */
static int gemm_xw_t(cublasHandle_t h, void *y, cudaDataType_t yt, const void *xb, const void *w,
                     cudaDataType_t t, int N, int in, int out, int acc)
{
	const float one = 1.0f, zero = 0.0f;

	/* column-major view: y^T(out,N) = w(in,out)^T x^T(in,N) */
	CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, &one, w, t, in, xb, t, in,
	                          acc ? &one : &zero, y, yt, out, CUBLAS_COMPUTE_32F,
	                          CUBLAS_GEMM_DEFAULT));
	return 0;
}

static int gemm_xw(cublasHandle_t h, float *y, const void *xb, const void *w, cudaDataType_t t,
                   int N, int in, int out, int acc)
{
	return gemm_xw_t(h, y, CUDA_R_32F, xb, w, t, N, in, out, acc);
}

int gpu_matmul_cublas(cudaStream_t st, float *y, const float *x, const void *w,
                      enum dice_dtype wdt, int N, int in, int out)
{
	cublasHandle_t h = gpu_cublas();
	size_t n = (size_t)N * in;
	const void *xb = x;
	cudaDataType_t t = CUDA_R_32F;

	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul");
	GPU_REQUIRE(wdt == DICE_F32 || wdt == DICE_BF16 || wdt == DICE_F16, "matmul dtype");
	CUBLAS_CHECK(cublasSetStream(h, st));
	if (wdt != DICE_F32) {
		void *s = gpu_scratch(n * 2);
		int grid = (int)(CEIL_DIV(n, (size_t)256) < 4096 ? CEIL_DIV(n, (size_t)256) : 4096);
		if (wdt == DICE_BF16) {
			to_bf16_kernel<<<grid, 256, 0, st>>>((__nv_bfloat16 *)s, x, n);
			t = CUDA_R_16BF;
		} else {
			to_f16_kernel<<<grid, 256, 0, st>>>((__half *)s, x, n);
			t = CUDA_R_16F;
		}
		CUDA_CHECK_LAUNCH();
		xb = s;
	}
	return gemm_xw(h, y, xb, w, t, N, in, out, 0);
}

int gpu_matmul_xb(cudaStream_t st, float *y, const void *xb, const void *w, int N, int in,
                  int out, int acc)
{
	cublasHandle_t h = gpu_cublas();

	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul_xb");
	CUBLAS_CHECK(cublasSetStream(h, st));
	return gemm_xw(h, y, xb, w, CUDA_R_16BF, N, in, out, acc);
}

int gpu_matmul_xbb(cudaStream_t st, void *yb, const void *xb, const void *w, int N, int in,
                   int out)
{
	cublasHandle_t h = gpu_cublas();

	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul_xbb");
	CUBLAS_CHECK(cublasSetStream(h, st));
	return gemm_xw_t(h, yb, CUDA_R_16BF, xb, w, CUDA_R_16BF, N, in, out, 0);
}

/* ---- y = c + xb w^T with c and y apart (gpu_matmul_xb_add): cuBLASLt, whose epilogue reads
 * C and writes D at other addresses, so the residual stream needs no copy before its add.
 * A plan (descriptors and the heuristic's first algorithm) is made once per shape; without
 * one (no handle, no algorithm, a failed call) the copy and GemmEx's += run instead. */

#define LT_PLANS 16
#define LT_WS ((size_t)32 << 20)        /* workspace, as cuBLAS gives Hopper's GEMMs */

struct lt_plan {
	int N, in, out, ok;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
};

static cublasLtHandle_t lt_handle;
static void *lt_ws;
static int lt_state;                    /* 0 not tried, 1 ready, -1 unavailable */
static struct lt_plan lt_plans[LT_PLANS];
static int lt_nplans;

static const struct lt_plan *lt_plan_get(int N, int in, int out)
{
	struct lt_plan *p;
	cublasLtMatmulPreference_t pref = NULL;
	cublasLtMatmulHeuristicResult_t res;
	cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	size_t ws = LT_WS;
	int n = 0;

	if (!lt_state) {
		lt_state = cublasLtCreate(&lt_handle) == CUBLAS_STATUS_SUCCESS &&
		           cudaMalloc(&lt_ws, LT_WS) == cudaSuccess ? 1 : -1;
		cudaGetLastError();
	}
	if (lt_state < 0)
		return NULL;
	for (int i = 0; i < lt_nplans; i++)
		if (lt_plans[i].N == N && lt_plans[i].in == in && lt_plans[i].out == out)
			return lt_plans[i].ok ? &lt_plans[i] : NULL;
	if (lt_nplans == LT_PLANS) {            /* full: the oldest goes */
		p = &lt_plans[0];
		if (p->ok) {
			cublasLtMatmulDescDestroy(p->op);
			cublasLtMatrixLayoutDestroy(p->a);
			cublasLtMatrixLayoutDestroy(p->b);
			cublasLtMatrixLayoutDestroy(p->c);
		}
		memmove(&lt_plans[0], &lt_plans[1], sizeof lt_plans[0] * (LT_PLANS - 1));
		lt_nplans--;
	}
	p = &lt_plans[lt_nplans++];
	memset(p, 0, sizeof *p);
	p->N = N;
	p->in = in;
	p->out = out;
	/* column-major view as gemm_xw: y^T(out,N) = w(in,out)^T x^T(in,N) + c^T */
	if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
	    cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, in, out, in) ||
	    cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, in, N, in) ||
	    cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, out, N, out) ||
	    cublasLtMatmulPreferenceCreate(&pref) ||
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
	                                         &ws, sizeof ws) ||
	    cublasLtMatmulAlgoGetHeuristic(lt_handle, p->op, p->a, p->b, p->c, p->c, pref, 1, &res,
	                                   &n) || n < 1) {
		if (pref)
			cublasLtMatmulPreferenceDestroy(pref);
		if (p->op)
			cublasLtMatmulDescDestroy(p->op);
		if (p->a)
			cublasLtMatrixLayoutDestroy(p->a);
		if (p->b)
			cublasLtMatrixLayoutDestroy(p->b);
		if (p->c)
			cublasLtMatrixLayoutDestroy(p->c);
		return NULL;                    /* p stays, not ok: the fallback from now on */
	}
	cublasLtMatmulPreferenceDestroy(pref);
	p->algo = res.algo;
	p->ok = 1;
	return p;
}

int gpu_matmul_xb_add(cudaStream_t st, float *y, const void *xb, const void *w, const float *c,
                      int N, int in, int out)
{
	const float one = 1.0f;
	const struct lt_plan *p;

	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul_xb_add");
	if (y != c && (p = lt_plan_get(N, in, out)) &&
	    cublasLtMatmul(lt_handle, p->op, &one, w, p->a, xb, p->b, &one, c, p->c, y, p->c,
	                   &p->algo, lt_ws, LT_WS, st) == CUBLAS_STATUS_SUCCESS)
		return 0;
	if (y != c)
		CUDA_CHECK(cudaMemcpyAsync(y, c, (size_t)N * out * sizeof(float),
		                           cudaMemcpyDeviceToDevice, st));
	return gpu_matmul_xb(st, y, xb, w, N, in, out, 1);
}

/* The decode kernel where it measured faster than cuBLAS on an H200 (bench/NOTES-gpu-ops.md):
 * N <= 4 up to 32M weights (cuBLAS pays ~20 us even for 4M), N <= 8 up to 8M. */
int gpu_matmul(cudaStream_t st, float *y, const float *x, const void *w, enum dice_dtype wdt,
               int N, int in, int out)
{
	int vec = wdt == DICE_F32 ? 4 : 8;
	size_t wn = (size_t)in * out;
	int small = (N <= 4 && wn <= ((size_t)32 << 20)) || (N <= 8 && wn <= ((size_t)8 << 20));

	if (N >= 1 && small && in % vec == 0 && aligned16(x) && aligned16(w))
		return gpu_matmul_gemv(st, y, x, w, wdt, N, in, out);
	return gpu_matmul_cublas(st, y, x, w, wdt, N, in, out);
}
