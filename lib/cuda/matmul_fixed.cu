/* matmul_fixed.cu: the engine forward's batch-invariant matrix product (struct ops
 * matmul_fixed): y(N,out) fp32 = x(N,in) fp32 @ w(out,in)^T where every output element is
 * accumulated in one order that depends on (in, out) only, never on N, on the row's place in
 * the batch or on the kernel that ran. Two kernels for 16-bit weights, both on the tensor
 * cores (mma.sync m16n8k16, fp32 accumulation, x rounded to the weight dtype):
 *  - up to MF_SMALL_M rows, a streaming kernel: one block per 8 outputs, one warp per
 *    segment of the inputs, 16-byte weight loads, the next step's in flight during this one;
 *  - above, a tiled kernel: 128x128 tiles, 32 inputs per stage, 4 cp.async stages, one
 *    block per (tile, segment); x is converted to the weight dtype once beforehand.
 * The order both follow: the inputs are cut into nseg segments of kseg inputs (a multiple of
 * 32; mf_segments, a function of (in, out)); within a segment the products accumulate from
 * zero in 32-input blocks, ascending, each block two mma steps over a fixed permutation of its
 * inputs (thread q of a quad holds inputs 8q..8q+7: the first step takes 8q+0..3, the second
 * 8q+4..7); the segments' sums are then added in segment order: ((s0 + s1) + s2) + ...
 * Rows beyond N and inputs beyond in enter as zeros in both kernels. fp32 weights take the
 * gemv kernel of matmul.cu in chunks of 8 rows (its per-row arithmetic does not depend on
 * the row count), and shapes neither kernel takes (in not a multiple of 8, unaligned
 * pointers) a plain kernel, one thread per output, inputs in order. Both are invariant too. */
#include "common.cuh"

#define MF_KB 32                /* inputs per block of two mma steps */
#define MF_SEGMAX 8             /* segments of the inputs, at most */
#define MF_WARPS_WANT 1024      /* streaming kernel: warps to aim for (outputs/8 x segments) */
#define MF_SMALL_M 32           /* rows up to which the streaming kernel runs */
#define MF_BM 128               /* tiled kernel: rows, outputs per tile */
#define MF_BN 128
#define MF_STAGES 4
#define MF_THREADS 256
#define MF_STAGE_BYTES ((MF_BM + MF_BN) * MF_KB * 2)

/* ---------------------------------------------------------------- CUDA kernels */

/* one block of 32 inputs: ra, rb = inputs 8q..8q+7 of rows g and g+8 (pairs, low half first),
 * bw = the same inputs of output column g. The fixed order of the whole file. */
static __device__ __forceinline__ void mf_step(float *c, uint4 ra, uint4 rb, uint4 bw, int f16)
{
	gpu_mma16816(c, ra.x, rb.x, ra.y, rb.y, bw.x, bw.y, f16);
	gpu_mma16816(c, ra.z, rb.z, ra.w, rb.w, bw.z, bw.w, f16);
}

static __device__ __forceinline__ uint4 mf_pack8(float4 a, float4 b, int f16)
{
	return make_uint4(gpu_pack2(a.x, a.y, f16), gpu_pack2(a.z, a.w, f16), gpu_pack2(b.x, b.y, f16),
	                  gpu_pack2(b.z, b.w, f16));
}

/* the streaming kernel's weight loads: blocks k, k+32, ... (U of them) of output row g */
static __device__ __forceinline__ void mfs_loadb(uint4 *b, const char *wp, int k, int kend,
                                                 int q, const int U)
{
#pragma unroll
	for (int u = 0; u < U; u++) {
		b[u] = make_uint4(0, 0, 0, 0);
		if (k + MF_KB * u + 8 * q < kend)
			b[u] = __ldcs((const uint4 *)(wp + (size_t)(k + MF_KB * u) * 2));
	}
}

/* the streaming kernel: block = 8 outputs, warp s = segment s; R8 groups of 8 rows (1, 2 or
 * 4: up to 8, 16, 32 rows), U = 8 / R8 blocks of 32 inputs per step. The next step's weights
 * are in flight while this step's x is converted and multiplied. Launched with programmatic
 * dependent launch (gpu_launch): the first step's weights are asked for before the wait on
 * the kernel that writes x. */
static __device__ __forceinline__ void mfs_body(float *y, const float *x, const void *w, int f16,
                                                const int R8, int M, int K, int out, int kseg)
{
	const int U = 8 / R8, MT = (R8 + 1) / 2;
	__shared__ float4 part[MF_SEGMAX][2][32];
	int lane = threadIdx.x & 31, seg = threadIdx.x >> 5, nseg = blockDim.x >> 5;
	int g = lane >> 2, q = lane & 3, o0 = blockIdx.x * 8;
	const char *wp = (const char *)w + ((size_t)min(o0 + g, out - 1) * K + 8 * q) * 2;
	int kbeg = seg * kseg, kend = min(K, kbeg + kseg);
	float c[2][4];
	uint4 b[8], bn[8];
	float4 xa[8][2];

	gpu_pdl_trigger();
#pragma unroll
	for (int mt = 0; mt < 2; mt++)
		c[mt][0] = c[mt][1] = c[mt][2] = c[mt][3] = 0.0f;
	mfs_loadb(b, wp, kbeg, kend, q, U);
	gpu_pdl_wait();                         /* x and y belong to earlier kernels */
	for (int k = kbeg; k < kend; k += MF_KB * U) {
#pragma unroll
		for (int u = 0; u < U; u++) {
#pragma unroll
			for (int h = 0; h < R8; h++) {
				int row = 8 * h + g, kk = k + MF_KB * u + 8 * q;
				xa[u * R8 + h][0] = xa[u * R8 + h][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				if (row < M && kk < kend) {
					const float4 *p = (const float4 *)(x + (size_t)row * K + kk);
					xa[u * R8 + h][0] = __ldg(p);
					xa[u * R8 + h][1] = __ldg(p + 1);
				}
			}
		}
		if (k + MF_KB * U < kend)
			mfs_loadb(bn, wp, k + MF_KB * U, kend, q, U);
#pragma unroll
		for (int u = 0; u < U; u++) {
			if (k + MF_KB * u < kend) {
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					int h = u * R8 + 2 * mt;
					uint4 ra = mf_pack8(xa[h][0], xa[h][1], f16), rb = make_uint4(0, 0, 0, 0);
					if (2 * mt + 1 < R8)
						rb = mf_pack8(xa[h + 1][0], xa[h + 1][1], f16);
					mf_step(c[mt], ra, rb, b[u], f16);
				}
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++)
			b[u] = bn[u];
	}
	if (nseg > 1) {
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
			part[seg][mt][lane] = make_float4(c[mt][0], c[mt][1], c[mt][2], c[mt][3]);
		__syncthreads();
		if (seg)
			return;
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			float4 v = part[0][mt][lane];
			for (int s = 1; s < nseg; s++) {
				float4 p = part[s][mt][lane];
				v.x += p.x;
				v.y += p.y;
				v.z += p.z;
				v.w += p.w;
			}
			c[mt][0] = v.x;
			c[mt][1] = v.y;
			c[mt][2] = v.z;
			c[mt][3] = v.w;
		}
	}
	int col = o0 + 2 * q;
#pragma unroll
	for (int mt = 0; mt < MT; mt++) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int row = 16 * mt + g + 8 * h;
			if (row >= M)
				continue;
			if (col < out)
				y[(size_t)row * out + col] = c[mt][2 * h];
			if (col + 1 < out)
				y[(size_t)row * out + col + 1] = c[mt][2 * h + 1];
		}
	}
}

static __global__ void mfs_kernel8(float *y, const float *x, const void *w, int f16, int M,
                                   int K, int out, int kseg)
{
	mfs_body(y, x, w, f16, 1, M, K, out, kseg);
}

static __global__ void mfs_kernel16(float *y, const float *x, const void *w, int f16, int M,
                                    int K, int out, int kseg)
{
	mfs_body(y, x, w, f16, 2, M, K, out, kseg);
}

static __global__ void mfs_kernel32(float *y, const float *x, const void *w, int f16, int M,
                                    int K, int out, int kseg)
{
	mfs_body(y, x, w, f16, 4, M, K, out, kseg);
}

/* 16 bytes global -> shared, asynchronously; zeros when !valid (src is not read then) */
static __device__ __forceinline__ void mf_cp16(void *dst, const void *src, int valid)
{
	unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
	             :: "r"(s), "l"(src), "r"(valid ? 16 : 0));
}

/* stage `st` <- block kb (global input index kb * 32) of the tile: 128 rows of x (converted
 * already), 128 rows of w, 64 bytes each; two chunks of each per thread */
static __device__ __forceinline__ void mfl_load(char *sm, int st, const char *xb, const char *w,
                                                int M, int K, int out, int m0, int n0, int k0)
{
	char *as = sm + st * MF_STAGE_BYTES, *bs = as + MF_BM * MF_KB * 2;
#pragma unroll
	for (int u = 0; u < 2; u++) {
		int c = threadIdx.x + u * MF_THREADS, r = c >> 2, k = k0 + 8 * (c & 3);
		int va = m0 + r < M && k < K, vb = n0 + r < out && k < K;
		mf_cp16(as + c * 16, va ? xb + ((size_t)(m0 + r) * K + k) * 2 : xb, va);
		mf_cp16(bs + c * 16, vb ? w + ((size_t)(n0 + r) * K + k) * 2 : w, vb);
	}
}

/* the tiled kernel: block (x: 128 outputs, y: 128 rows, z: segment); 8 warps of 64 rows x 32
 * outputs. One segment's sum goes to y (nseg 1) or to part[z] (the reduce adds them). */
static __global__ void __launch_bounds__(MF_THREADS) mfl_kernel(float *y, float *part,
                                                                 const void *xb, const void *w,
                                                                 int f16, int M, int K, int out,
                                                                 int kseg)
{
	extern __shared__ uint4 mf_smem[];
	char *sm = (char *)mf_smem;
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
	int wm = wid >> 2, wn = wid & 3;
	int m0 = blockIdx.y * MF_BM, n0 = blockIdx.x * MF_BN;
	int kbeg = blockIdx.z * kseg, kend = min(K, kbeg + kseg), nkb = CEIL_DIV(kend - kbeg, MF_KB);
	float acc[4][4][4];

#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
#pragma unroll
	for (int s = 0; s < MF_STAGES - 1; s++) {
		if (s < nkb)
			mfl_load(sm, s, (const char *)xb, (const char *)w, M, K, out, m0, n0,
			         kbeg + s * MF_KB);
		asm volatile("cp.async.commit_group;\n" ::);
	}
	for (int kb = 0; kb < nkb; kb++) {
		asm volatile("cp.async.wait_group 2;\n" ::);       /* MF_STAGES - 2 */
		__syncthreads();
		int nk = kb + MF_STAGES - 1;
		if (nk < nkb)
			mfl_load(sm, nk % MF_STAGES, (const char *)xb, (const char *)w, M, K, out, m0, n0,
			         kbeg + nk * MF_KB);
		asm volatile("cp.async.commit_group;\n" ::);
		const char *as = sm + (kb % MF_STAGES) * MF_STAGE_BYTES;
		const char *bs = as + MF_BM * MF_KB * 2;
		uint4 bw[4];
#pragma unroll
		for (int j = 0; j < 4; j++)
			bw[j] = *(const uint4 *)(bs + (wn * 32 + j * 8 + g) * 64 + q * 16);
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int r = wm * 64 + i * 16 + g;
			uint4 ra = *(const uint4 *)(as + r * 64 + q * 16);
			uint4 rb = *(const uint4 *)(as + (r + 8) * 64 + q * 16);
#pragma unroll
			for (int j = 0; j < 4; j++)
				mf_step(acc[i][j], ra, rb, bw[j], f16);
		}
	}
	asm volatile("cp.async.wait_group 0;\n" ::);
	float *dst = gridDim.z == 1 ? y : part + (size_t)blockIdx.z * M * out;
#pragma unroll
	for (int i = 0; i < 4; i++) {
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int col = n0 + wn * 32 + j * 8 + 2 * q;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int row = m0 + wm * 64 + i * 16 + g + 8 * h;
				if (row >= M)
					continue;
				if (col < out)
					dst[(size_t)row * out + col] = acc[i][j][2 * h];
				if (col + 1 < out)
					dst[(size_t)row * out + col + 1] = acc[i][j][2 * h + 1];
			}
		}
	}
}

/* y(n) = part[0](n) + part[1](n) + ... in segment order */
static __global__ void mf_reduce_kernel(float *y, const float *part, size_t n, int nseg)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = part[i];
		for (int s = 1; s < nseg; s++)
			v += part[(size_t)s * n + i];
		y[i] = v;
	}
}

static __global__ void mf_convert_kernel(unsigned *d, const float2 *s, size_t n2, int f16)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n2;
	     i += (size_t)gridDim.x * blockDim.x) {
		float2 v = s[i];
		d[i] = gpu_pack2(v.x, v.y, f16);
	}
}

/* any shape: one thread per output, the inputs in order */
static __global__ void mf_plain_kernel(float *y, const float *x, const void *w, int dt, int M,
                                       int K, int out)
{
	size_t total = (size_t)M * out;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t n = i / out, o = i % out;
		const float *xr = x + n * K;
		float acc = 0.0f;
		for (int k = 0; k < K; k++) {
			float xv = xr[k];
			if (dt == DICE_BF16)
				xv = __bfloat162float(__float2bfloat16_rn(xv));
			else if (dt == DICE_F16)
				xv = __half2float(__float2half_rn(xv));
			acc = fmaf(xv, gpu_load_w(w, dt, o * K + k), acc);
		}
		y[i] = acc;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

/* the segments of the inputs for (in, out): enough warps of the streaming kernel to fill the
 * GPU, at most MF_SEGMAX; *kseg = inputs per segment (a multiple of 32) */
static int mf_segments(int in, int out, int *kseg)
{
	int kb = CEIL_DIV(in, MF_KB), tiles = CEIL_DIV(out, 8);
	int n = CEIL_DIV(MF_WARPS_WANT, tiles);

	n = n > MF_SEGMAX ? MF_SEGMAX : n < 1 ? 1 : n;
	n = n > kb ? kb : n;
	int per = CEIL_DIV(kb, n);
	*kseg = per * MF_KB;
	return CEIL_DIV(kb, per);
}

static int mf_tc_ok(const float *x, const void *w, enum dice_dtype wdt, int in)
{
	return (wdt == DICE_BF16 || wdt == DICE_F16) && in % 8 == 0 &&
	       (((uintptr_t)x | (uintptr_t)w) & 15) == 0;
}

/* kernel: 1 streaming, 2 tiled (16-bit weights, in % 8 == 0, 16-byte aligned x and w) */
int gpu_matmul_fixed_path(cudaStream_t st, float *y, const float *x, const void *w,
                          enum dice_dtype wdt, int N, int in, int out, int kernel)
{
	static int smem_set;
	int kseg, nseg = mf_segments(in, out, &kseg), f16 = wdt == DICE_F16;

	GPU_REQUIRE(N >= 1 && in > 0 && out > 0 && (kernel == 1 || kernel == 2), "matmul_fixed");
	GPU_REQUIRE(mf_tc_ok(x, w, wdt, in), "matmul_fixed");
	if (kernel == 1) {
		for (int r0 = 0; r0 < N; r0 += MF_SMALL_M) {
			int m = N - r0 < MF_SMALL_M ? N - r0 : MF_SMALL_M;
			const float *xr = x + (size_t)r0 * in;
			float *yr = y + (size_t)r0 * out;
			void *args[] = { &yr, &xr, &w, &f16, &m, &in, &out, &kseg };
			const void *fn = m <= 8 ? (const void *)mfs_kernel8 :
			                 m <= 16 ? (const void *)mfs_kernel16 : (const void *)mfs_kernel32;
			gpu_launch(fn, dim3(CEIL_DIV(out, 8)), dim3(32 * nseg), 0, st, args);
		}
		return 0;
	}
	if (!smem_set) {
		CUDA_CHECK(cudaFuncSetAttribute(mfl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                MF_STAGES * MF_STAGE_BYTES));
		smem_set = 1;
	}
	size_t xbytes = ((size_t)N * in * 2 + 255) / 256 * 256;
	size_t pn = nseg > 1 ? (size_t)nseg * N * out : 0;
	char *s = (char *)gpu_scratch(xbytes + pn * sizeof(float));
	float *part = (float *)(s + xbytes);
	size_t n2 = (size_t)N * in / 2;
	int cg = (int)(CEIL_DIV(n2, (size_t)256) < 4096 ? CEIL_DIV(n2, (size_t)256) : 4096);
	mf_convert_kernel<<<cg, 256, 0, st>>>((unsigned *)s, (const float2 *)x, n2, f16);
	CUDA_CHECK_LAUNCH();
	dim3 grid(CEIL_DIV(out, MF_BN), CEIL_DIV(N, MF_BM), nseg);
	mfl_kernel<<<grid, MF_THREADS, MF_STAGES * MF_STAGE_BYTES, st>>>(y, part, s, w, f16, N, in,
	                                                                  out, kseg);
	CUDA_CHECK_LAUNCH();
	if (nseg > 1) {
		size_t n = (size_t)N * out;
		int rg = (int)(CEIL_DIV(n, (size_t)256) < 8192 ? CEIL_DIV(n, (size_t)256) : 8192);
		mf_reduce_kernel<<<rg, 256, 0, st>>>(y, part, n, nseg);
		CUDA_CHECK_LAUNCH();
	}
	return 0;
}

int gpu_matmul_fixed(cudaStream_t st, float *y, const float *x, const void *w,
                     enum dice_dtype wdt, int N, int in, int out)
{
	GPU_REQUIRE(N >= 1 && in > 0 && out > 0, "matmul_fixed");
	GPU_REQUIRE(wdt == DICE_F32 || wdt == DICE_BF16 || wdt == DICE_F16, "matmul_fixed dtype");
	if (mf_tc_ok(x, w, wdt, in))
		return gpu_matmul_fixed_path(st, y, x, w, wdt, N, in, out, N <= MF_SMALL_M ? 1 : 2);
	if (wdt == DICE_F32 && in % 4 == 0 && (((uintptr_t)x | (uintptr_t)w) & 15) == 0)
		return gpu_matmul_gemv_rows(st, y, x, w, wdt, N, in, out);
	size_t total = (size_t)N * out;
	int grid = (int)(CEIL_DIV(total, (size_t)256) < 65536 ? CEIL_DIV(total, (size_t)256) : 65536);
	mf_plain_kernel<<<grid, 256, 0, st>>>(y, x, w, (int)wdt, N, in, out);
	CUDA_CHECK_LAUNCH();
	return 0;
}
