/* common.cuh: what every lib/cuda/*.cu shares: the CUDA_CHECK / CUBLAS_CHECK macros (fatal,
 * file:line), CEIL_DIV, device-side dtype loads, warp reductions, and the backend's
 * per-process state (stream, cuBLAS handle, scratch) defined in backend.cu. C-like CUDA:
 * no templates, no STL, no constexpr. */
#ifndef DICE_CUDA_COMMON_CUH
#define DICE_CUDA_COMMON_CUH

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>

#include "gpu.h"

/* lib/util.c's: "prog: message" on stderr (every line of it prefixed) */
extern "C" void warn_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void gpu_check_cuda(cudaError_t e, const char *file, int line);
void gpu_check_cublas(cublasStatus_t s, const char *file, int line);
#define CUDA_CHECK(call) gpu_check_cuda((call), __FILE__, __LINE__)
#define CUBLAS_CHECK(call) gpu_check_cublas((call), __FILE__, __LINE__)
/* after a launch: the launch itself (bad configuration), not the kernel's completion */
#define CUDA_CHECK_LAUNCH() gpu_check_cuda(cudaGetLastError(), __FILE__, __LINE__)

/* shape preconditions of a launcher: warn and return -1 */
#define GPU_REQUIRE(cond, op) do { if (!(cond)) { \
	warn_msg("%s: bad shape (%s) at %s:%d", (op), #cond, __FILE__, __LINE__); \
	return -1; } } while (0)

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

/* backend state (backend.cu) */
cublasHandle_t gpu_cublas(void);
void *gpu_scratch(size_t bytes);        /* grows on demand; valid until the next call */
/* the table's sample op (sample.cu): host arrays in and out, see lib/ops.h */
void cu_sample(int *tok, float *prob, const float *logits, const int *rows, const double *u,
               int R, int V, float temperature, int top_k, float top_p);
/* the table's denoise op (sample.cu): lib/ops.h's .denoise */
int cu_denoise(const float *logits, int V, const struct denoise_seq *ds, int n, int B,
               const double *u, int nu, int *out, int decoding, float threshold,
               float temperature, int top_k, float top_p);
/* the table's to_device (backend.cu): a copy of up to 64 KiB returns at once (through
 * page-locked slots, in order with the stream), a larger one when it is done */
void gpu_upload(void *dst, const void *src, size_t bytes);
int gpu_sm_count(void);                 /* multiprocessors of the current device */
int gpu_cc(void);                       /* its compute capability, 10 major + minor */
/* an on/off switch read once from the environment into *sw (-1: not read yet): on unless the
 * variable is exactly "0" (DICE_GRAPH, DICE_PDL, DICE_WGMMA, DICE_DK_CLUSTER, DICE_MFX,
 * DICE_MFX_GU) */
int gpu_switch(int *sw, const char *env);
/* RoPE's inv_freq(HD/2) on the device for (theta, HD), made on first use and never freed or
 * moved: replayed graphs hold its address (rope.cu) */
const float *gpu_rope_table(float theta, int HD);
/* matmul_fixed's tiled path on wgmma (matmul_wgmma.cu, sm_90a): ok when the device has
 * compute capability 9.0 and gpu_set_wgmma / DICE_WGMMA allow; variants, their names, the
 * estimated cycles of variant v on a shape, whether it takes segments of kseg inputs, and the
 * product (kseg: matmul_fixed's segment length; 16-bit w, in % 8 == 0, x and w 16-byte
 * aligned) */
int gpu_matmul_wgmma_ok(void);
int gpu_matmul_wgmma_variants(void);
const char *gpu_matmul_wgmma_variant_name(int v);
double gpu_matmul_wgmma_cost(int v, int N, int in, int out, int nseg);
int gpu_matmul_wgmma_walks(int in, int kseg);
int gpu_matmul_wgmma(cudaStream_t st, float *y, const float *x, const void *w, int f16, int N,
                     int in, int out, int kseg, int v, int glu);

/* Programmatic dependent launch (sm_90): a kernel that gpu_launch starts may begin while
 * the kernel before it in the stream still runs. Such a kernel calls gpu_pdl_wait() on every
 * path before it reads or writes memory that an earlier kernel reads or writes (the weights,
 * never written, may be read before; so may what no kernel has written since the last
 * stream operation that is not a kernel, such as the engine forward's upload: decode.cu's
 * dm_kernel reads the batch's arrays and the caches' keys below len before it); the wait
 * returns when the kernel before it has
 * finished and its writes are visible, and since that kernel waited likewise, when
 * everything before has. gpu_pdl_trigger() lets the next kernel start (its own wait still
 * holds it). Both are no-ops without PDL. */
static __device__ __forceinline__ void gpu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

static __device__ __forceinline__ void gpu_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}

/* The block timeline (a bench aid, matmul_fixed.cu's gpu_timeline; built with
 * -DDICE_TIMELINE only, else the macros are empty): GPU_TL_START at a kernel's start,
 * GPU_TL_WAITED after its PDL wait, GPU_TL_END(a, b) where its block is done (every path
 * that gets there after GPU_TL_START) record, from thread 0, the global timer at each and
 * (a, b): a product's (in, out), or a small kernel's GPU_TL_* code and 0. Each translation
 * unit has its own copy of the buffer's pointers, set by its GPU_TL_BINDER function. */
enum { GPU_TL_ATTENTION = 1, GPU_TL_QKV_PREP, GPU_TL_ADD_RMSNORM, GPU_TL_SWIGLU };

/* the GPU's global timer, ns (the timeline's and the benches' clock) */
static __device__ __forceinline__ unsigned long long gpu_tl_now(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

#ifdef DICE_TIMELINE
static __device__ unsigned long long (*gpu_tl_buf)[4];
static __device__ unsigned *gpu_tl_cnt;
static __device__ unsigned gpu_tl_cap, gpu_tl_on;

static __device__ __forceinline__ void gpu_tl_put(unsigned long long t0, unsigned long long t1,
                                                  unsigned a, unsigned b)
{
	unsigned i = atomicAdd(gpu_tl_cnt, 1u);
	if (i < gpu_tl_cap) {
		gpu_tl_buf[i][0] = t0;
		gpu_tl_buf[i][1] = t1;
		gpu_tl_buf[i][2] = gpu_tl_now();
		gpu_tl_buf[i][3] = (unsigned long long)a << 32 | b;
	}
}

#define GPU_TL_START unsigned long long tl0 = 0, tl1 = 0; \
	if (threadIdx.x == 0 && gpu_tl_on) tl0 = gpu_tl_now();
#define GPU_TL_WAITED if (tl0) tl1 = gpu_tl_now();
#define GPU_TL_END(a, b) if (tl0) gpu_tl_put(tl0, tl1, (unsigned)(a), (unsigned)(b));
#define GPU_TL_BINDER(fn) \
void fn(void *buf, void *cnt, unsigned cap, unsigned on) \
{ \
	CUDA_CHECK(cudaMemcpyToSymbol(gpu_tl_buf, &buf, sizeof buf)); \
	CUDA_CHECK(cudaMemcpyToSymbol(gpu_tl_cnt, &cnt, sizeof cnt)); \
	CUDA_CHECK(cudaMemcpyToSymbol(gpu_tl_cap, &cap, sizeof cap)); \
	CUDA_CHECK(cudaMemcpyToSymbol(gpu_tl_on, &on, sizeof on)); \
}
void gpu_tl_bind_matmul_fixed(void *buf, void *cnt, unsigned cap, unsigned on);
void gpu_tl_bind_decode(void *buf, void *cnt, unsigned cap, unsigned on);
#else
#define GPU_TL_START
#define GPU_TL_WAITED
#define GPU_TL_END(a, b)
#endif

/* launch fn(args) on st, with programmatic dependent launch when gpu_pdl() (every kernel so
 * launched follows the rule above); checks the launch */
void gpu_launch(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                void **args);

/* SwiGLU of one value: silu(g) * u, as every kernel that computes it must (the same bits) */
static __device__ __forceinline__ float gpu_swiglu1(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

/* inputs k, k + 1 (gpu_x2) or k .. k + 3 (gpu_x4) of row r of a product's input x (rows of K;
 * k even / a multiple of 4, x aligned to match); glu: x holds rows of 2K, [gate | up], and the
 * inputs are gpu_swiglu1(gate, up) (matmul_fixed_glu: the SwiGLU folded into the product's
 * input conversion) */
static __device__ __forceinline__ float2 gpu_x2(const float *x, size_t r, int K, int k, int glu)
{
	if (!glu)
		return __ldg((const float2 *)(x + r * K + k));
	const float *g = x + r * 2 * K + k;
	float2 a = __ldg((const float2 *)g), b = __ldg((const float2 *)(g + K));
	return make_float2(gpu_swiglu1(a.x, b.x), gpu_swiglu1(a.y, b.y));
}

static __device__ __forceinline__ float4 gpu_x4(const float *x, size_t r, int K, int k, int glu)
{
	if (!glu)
		return __ldg((const float4 *)(x + r * K + k));
	const float *g = x + r * 2 * K + k;
	float4 a = __ldg((const float4 *)g), b = __ldg((const float4 *)(g + K));
	return make_float4(gpu_swiglu1(a.x, b.x), gpu_swiglu1(a.y, b.y), gpu_swiglu1(a.z, b.z),
	                   gpu_swiglu1(a.w, b.w));
}

static __device__ __forceinline__ float gpu_load_w(const void *w, int dt, size_t i)
{
	if (dt == DICE_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
	if (dt == DICE_F16)
		return __half2float(((const __half *)w)[i]);
	return ((const float *)w)[i];
}

static __device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* the sum of v over the block (blockDim.x a multiple of 32), returned to every thread; part
 * is __shared__ space of blockDim.x / 32 floats */
static __device__ __forceinline__ float block_sum(float v, float *part)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;

	v = warp_sum(v);
	if (lane == 0)
		part[wid] = v;
	__syncthreads();
	if (wid == 0) {
		v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
		v = warp_sum(v);
		if (lane == 0)
			part[0] = v;
	}
	__syncthreads();
	return part[0];
}

/* c += a b on the tensor cores: mma.sync m16n8k16, fp32 accumulators; f16: fp16 operands,
 * else bf16. a0..a3 / b0, b1: pairs of 16-bit values, the lower index in the low half. */
static __device__ __forceinline__ void gpu_mma16816(float *c, unsigned a0, unsigned a1,
                                                    unsigned a2, unsigned a3, unsigned b0,
                                                    unsigned b1, int f16)
{
	if (f16)
		asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
		    "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
	else
		asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
		    "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
		    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* (lo, hi) rounded to fp16 (f16) or bf16 and packed, lo in the low half */
static __device__ __forceinline__ unsigned gpu_pack2(float lo, float hi, int f16)
{
	if (f16) {
		__half2 h = __floats2half2_rn(lo, hi);
		return *(unsigned *)&h;
	}
	__nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
	return *(unsigned *)&b;
}

#endif
