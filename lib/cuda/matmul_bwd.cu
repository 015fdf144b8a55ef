/* matmul_bwd.cu: the backward of y(N,out) = x(N,in) @ w(out,in)^T:
 *   dx(N,in) = dy(N,out) @ w        (write; skipped when dx is NULL)
 *   dw(out,in) += dy^T @ x          (accumulate; skipped when dw is NULL)
 * fp32 or fp16 w: cuBLAS SGEMMs in fp32 (the handle keeps CUBLAS_DEFAULT_MATH: no TF32), an
 * fp16 w first widened to fp32 in the backend scratch (exact), so the math is the CPU twin's
 * up to summation order. bf16 w (mixed-precision training): dy and x are rounded to bf16 in
 * the scratch and both products run on the tensor cores with fp32 accumulation and fp32
 * output, as the forward gpu_matmul does with x: the twin's result up to that rounding.
 * gpu_matmul_backward_xb: the bf16 case with x given in bf16 (no rounding pass) and dx
 * optionally accumulated (beta 1); gpu_matmul_backward_xbb: dy given in bf16 too. */
#include "gpu_bwd.h"
#include "common.cuh"

/* ---------------------------------------------------------------- CUDA kernels */

static __global__ void widen_kernel(float *d, const void *w, int dt, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i] = gpu_load_w(w, dt, i);
}

/* ---------------------------------------------------------------- kernel launchers */

/* the bf16 case; xb: x already in bf16 (else x is rounded into the scratch); dyb: dy already
 * in bf16 (else dy is rounded into the scratch); dx_beta 0 writes dx, 1 adds into it */
static int matmul_backward_bf16(cudaStream_t st, cublasHandle_t h, float *dx, float *dw,
                                const float *dy, const void *dyb, const float *x, const void *xb,
                                const void *w, int N, int in, int out, float dx_beta)
{
	const float one = 1.0f, zero = 0.0f;
	size_t ny = dyb ? 0 : (size_t)N * out, nx = dw && !xb ? (size_t)N * in : 0;
	char *s = (char *)gpu_scratch((ny + nx) * 2);

	if (!dyb) {
		dyb = s;
		gpu_cast_bf16(st, (void *)dyb, dy, ny);
	}
	if (dx)
		CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, &one, w, CUDA_R_16BF,
		                          in, dyb, CUDA_R_16BF, out, dx_beta != 0.0f ? &one : &zero,
		                          dx, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	if (dw) {
		if (!xb) {
			xb = s + ny * 2;
			gpu_cast_bf16(st, (void *)xb, x, nx);
		}
		CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, &one, xb, CUDA_R_16BF,
		                          in, dyb, CUDA_R_16BF, out, &one, dw, CUDA_R_32F, in,
		                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	}
	return 0;
}

int gpu_matmul_backward_xb(cudaStream_t st, float *dx, float *dw, const float *dy,
                           const void *xb, const void *w, int N, int in, int out, int dx_acc)
{
	cublasHandle_t h = gpu_cublas();

	GPU_REQUIRE(N >= 0 && in > 0 && out > 0 && (xb || !dw), "matmul_backward_xb");
	if (N == 0)
		return 0;
	CUBLAS_CHECK(cublasSetStream(h, st));
	return matmul_backward_bf16(st, h, dx, dw, dy, NULL, NULL, xb, w, N, in, out,
	                            dx_acc ? 1.0f : 0.0f);
}

int gpu_matmul_backward_xbb(cudaStream_t st, float *dx, float *dw, const void *dyb,
                            const void *xb, const void *w, int N, int in, int out, int dx_acc)
{
	cublasHandle_t h = gpu_cublas();

	GPU_REQUIRE(N >= 0 && in > 0 && out > 0 && dyb && (xb || !dw), "matmul_backward_xbb");
	if (N == 0)
		return 0;
	CUBLAS_CHECK(cublasSetStream(h, st));
	return matmul_backward_bf16(st, h, dx, dw, NULL, dyb, NULL, xb, w, N, in, out,
	                            dx_acc ? 1.0f : 0.0f);
}

int gpu_matmul_backward(cudaStream_t st, float *dx, float *dw, const float *dy, const float *x,
                        const void *w, enum dice_dtype wdt, int N, int in, int out)
{
	cublasHandle_t h = gpu_cublas();
	const float one = 1.0f, zero = 0.0f;

	GPU_REQUIRE(N >= 0 && in > 0 && out > 0, "matmul_backward");
	GPU_REQUIRE(wdt == DICE_F32 || wdt == DICE_BF16 || wdt == DICE_F16, "matmul_backward dtype");
	if (N == 0)
		return 0;
	CUBLAS_CHECK(cublasSetStream(h, st));
	if (wdt == DICE_BF16)
		return matmul_backward_bf16(st, h, dx, dw, dy, NULL, x, NULL, w, N, in, out, 0.0f);
	if (dx) {
		const float *wf = (const float *)w;
		if (wdt != DICE_F32) {
			size_t n = (size_t)in * out;
			float *s = (float *)gpu_scratch(n * sizeof(float));
			size_t g = CEIL_DIV(n, (size_t)256);
			widen_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>(s, w, (int)wdt, n);
			CUDA_CHECK_LAUNCH();
			wf = s;
		}
		/* column-major: dx^T(in,N) = w^T(in,out) dy^T(out,N) */
		CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, &one, wf, in, dy, out,
		                         &zero, dx, in));
	}
	if (dw) {
		/* column-major: dw^T(in,out) += x^T(in,N) dy(N,out) */
		CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, &one, x, in, dy, out,
		                         &one, dw, in));
	}
	return 0;
}
