/* rmsnorm_bwd.cu: the backward of y = x r w, r = 1/sqrt(mean(x^2) + eps), per row of C:
 *   dx_c = r w_c dy_c - x_c r^3/C sum_j dy_j w_j x_j   (written, or added into dres)
 *   dw_c += sum over rows of dy_c x_c r                 (accumulate; skipped when NULL)
 * and, fused in front of it for the per-head q/k norms, the backward of rotate-half RoPE on
 * dy (rows of HD = C, NH heads a token at pos[token]; the rotation by minus the angle, the
 * same inv_freq table and sincosf as gpu_rope).
 *
 * One pass (rb_kernel): a group of G threads a row (32, or 32 k for C > 256), each thread
 * holding the E <= 16 columns t, t + G, .. of x, dy and w in registers; a block walks units
 * (a row, or with RoPE a token's NH rows, one sincos a column for all of them), the row's
 * two sums (x^2, dy w x) by shuffles (and shared memory across a group's warps), dx written
 * or added from the registers (and, asked, its bf16 copy: instead of dx without the add, beside
 * it with the add), and each thread's dw columns summed over the rows it saw.
 * The blocks' dw partials go to the scratch and rb_dw_kernel adds them to dw in block
 * order: dw's bits do not depend on timing. dx may equal dy: a row is read before it is
 * written, by the same threads. */
#include "gpu_bwd.h"
#include "common.cuh"

#define RB_THREADS 256
#define RB_CMAX 16384               /* widest row: 1024 threads x 16 columns */

/* ---------------------------------------------------------------- CUDA kernels */

/* x(rows, C), dy: rows = nunit NH; a unit is NH consecutive rows (the heads of token u with
 * ROPE, else NH = 1); part: gridDim.x x C dw partials (when DW) */
template <int E, int ROPE, int ACC, int DW>
static __global__ void __launch_bounds__(1024)
rb_kernel(float *dx, __nv_bfloat16 *xb, int ldb, float *part, const float *dy, const float *x,
          const void *w, int dt, const int *pos, const float *inv_freq, int nunit, int NH, int C,
          int G, float eps)
{
	__shared__ float red[2 * 32];           /* a group's warps' sums, per slot (G > 32) */
	extern __shared__ float dwred[];        /* (slots, E G) dw partials, when slots > 1 */
	int tid = threadIdx.x, t = tid % G, slot = tid / G, slots = blockDim.x / G;
	int lane = tid & 31, gw = t >> 5, nw = G >> 5;
	float wv[E], dwa[E], cs[E], sn[E];

#pragma unroll
	for (int e = 0; e < E; e++) {
		int c = t + G * e;
		wv[e] = c < C ? gpu_load_w(w, dt, (size_t)c) : 0.0f;
		dwa[e] = 0.0f;
		cs[e] = 1.0f;
		sn[e] = 0.0f;
	}
	for (int u0 = blockIdx.x * slots; u0 < nunit; u0 += gridDim.x * slots) {
		int u = u0 + slot, ok = u < nunit;
		if (ROPE && ok) {       /* C = HD = G E (E even): partners in this thread */
			float p = (float)pos[u];
#pragma unroll
			for (int e = 0; e < E / 2; e++)
				sincosf(p * inv_freq[t + G * e], &sn[e], &cs[e]);
		}
		for (int h = 0; h < NH; h++) {
			size_t row = (size_t)u * NH + h;
			float xv[E], gv[E], ss = 0.0f, dot = 0.0f;
#pragma unroll
			for (int e = 0; e < E; e++) {
				int c = t + G * e;
				xv[e] = ok && c < C ? x[row * C + c] : 0.0f;
				gv[e] = ok && c < C ? dy[row * C + c] : 0.0f;
			}
			if (ROPE) {
				/* d1' = d1 c + d2 s, d2' = d2 c - d1 s for column j < HD/2 and j + HD/2
				 * (element e + E/2 is e's partner: HD = G E) */
#pragma unroll
				for (int e = 0; e < E / 2; e++) {
					float d1 = gv[e], d2 = gv[e + E / 2];
					gv[e] = d1 * cs[e] + d2 * sn[e];
					gv[e + E / 2] = d2 * cs[e] - d1 * sn[e];
				}
			}
#pragma unroll
			for (int e = 0; e < E; e++) {
				ss += xv[e] * xv[e];
				dot += gv[e] * wv[e] * xv[e];
			}
			ss = warp_sum(ss);
			dot = warp_sum(dot);
			if (nw > 1) {           /* uniform: G is the block's */
				__syncthreads();        /* red may still be read for the last row */
				if (lane == 0) {
					red[2 * (slot * nw + gw)] = ss;
					red[2 * (slot * nw + gw) + 1] = dot;
				}
				__syncthreads();
				ss = dot = 0.0f;
				for (int i = 0; i < nw; i++) {
					ss += red[2 * (slot * nw + i)];
					dot += red[2 * (slot * nw + i) + 1];
				}
			}
			if (!ok)
				continue;
			float r = 1.0f / sqrtf(ss / (float)C + eps), k = r * r * r * dot / (float)C;
#pragma unroll
			for (int e = 0; e < E; e++) {
				int c = t + G * e;
				if (c >= C)
					continue;
				float d = r * wv[e] * gv[e] - k * xv[e];
				if (ACC)
					d += dx[row * C + c];
				if (xb)         /* uniform */
					xb[(size_t)u * ldb + (size_t)h * C + c] = __float2bfloat16_rn(d);
				if (!xb || ACC)
					dx[row * C + c] = d;
				if (DW)
					dwa[e] += gv[e] * xv[e] * r;
			}
		}
	}
	if (!DW)
		return;
	if (slots == 1) {
#pragma unroll
		for (int e = 0; e < E; e++)
			if (t + G * e < C)
				part[(size_t)blockIdx.x * C + t + G * e] = dwa[e];
		return;
	}
#pragma unroll
	for (int e = 0; e < E; e++)
		dwred[slot * E * G + e * G + t] = dwa[e];
	__syncthreads();
	if (slot == 0) {
#pragma unroll
		for (int e = 0; e < E; e++) {
			float s = dwa[e];
			for (int i = 1; i < slots; i++)
				s += dwred[i * E * G + e * G + t];
			if (t + G * e < C)
				part[(size_t)blockIdx.x * C + t + G * e] = s;
		}
	}
}

/* dw[c] += the sum over b < nb of part[b C + c], in a fixed order: block (32, 8) over 32
 * columns, slice y sums b = y, y + 8, .., then the 8 slices in order */
static __global__ void rb_dw_kernel(float *dw, const float *part, int nb, int C)
{
	__shared__ float s[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float a = 0.0f;

	if (c < C)
		for (int b = threadIdx.y; b < nb; b += 8)
			a += part[(size_t)b * C + c];
	s[threadIdx.y][threadIdx.x] = a;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		for (int y = 1; y < 8; y++)
			a += s[y][threadIdx.x];
		dw[c] += a;
	}
}

/* ---------------------------------------------------------------- kernel launchers */

template <int E, int ROPE, int ACC, int DW>
static const void *rb_pick3(void)
{
	return (const void *)rb_kernel<E, ROPE, ACC, DW>;
}

template <int E>
static const void *rb_pick(int rope, int acc, int dw)
{
	static const void *(*const f[8])(void) = {
		rb_pick3<E, 0, 0, 0>, rb_pick3<E, 0, 0, 1>, rb_pick3<E, 0, 1, 0>, rb_pick3<E, 0, 1, 1>,
		rb_pick3<E, 1, 0, 0>, rb_pick3<E, 1, 0, 1>, rb_pick3<E, 1, 1, 0>, rb_pick3<E, 1, 1, 1>,
	};
	return f[4 * rope + 2 * acc + dw]();
}

/* the one pass over nunit units of NH rows of C (see the header); pos and theta with rope */
static int rb_run(cudaStream_t st, float *dx, __nv_bfloat16 *xb, int ldb, float *dw,
                  const float *dy, const float *x, const void *w, enum dice_dtype wdt,
                  const int *pos, float theta, int rope, int acc, int nunit, int NH, int C,
                  float eps)
{
	int G = C <= 256 ? 32 : 32 * CEIL_DIV(C, 256), E = CEIL_DIV(C, G > 1024 ? 1024 : G);
	const float *inv_freq = rope ? gpu_rope_table(theta, C) : NULL;
	const void *fn;

	if (G > 1024)
		G = 1024;
	E = E <= 1 ? 1 : E <= 2 ? 2 : E <= 4 ? 4 : E <= 8 ? 8 : 16;
	switch (E) {
	case 1: fn = rb_pick<1>(rope, acc, dw != NULL); break;
	case 2: fn = rb_pick<2>(rope, acc, dw != NULL); break;
	case 4: fn = rb_pick<4>(rope, acc, dw != NULL); break;
	case 8: fn = rb_pick<8>(rope, acc, dw != NULL); break;
	default: fn = rb_pick<16>(rope, acc, dw != NULL); break;
	}
	int threads = G > RB_THREADS ? G : RB_THREADS / G * G, slots = threads / G, dti = (int)wdt;
	size_t smem = slots > 1 ? (size_t)threads * E * sizeof(float) : 0;
	int per_sm = 0;
	CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem));
	int nb = per_sm * gpu_sm_count(), need = CEIL_DIV(nunit, slots);
	if (nb > need)
		nb = need;
	if (nb < 1)
		nb = 1;
	float *part = dw ? (float *)gpu_scratch((size_t)nb * C * sizeof(float)) : NULL;
	void *args[] = { &dx, &xb, &ldb, &part, &dy, &x, &w, &dti, &pos, &inv_freq, &nunit, &NH, &C,
	                 &G, &eps };
	CUDA_CHECK(cudaLaunchKernel(fn, dim3(nb), dim3(threads), args, smem, st));
	CUDA_CHECK_LAUNCH();
	if (dw) {
		rb_dw_kernel<<<CEIL_DIV(C, 32), dim3(32, 8), 0, st>>>(dw, part, nb, C);
		CUDA_CHECK_LAUNCH();
	}
	return 0;
}

int gpu_rmsnorm_backward(cudaStream_t st, float *dx, float *dw, const float *dy, const float *x,
                         const void *w, enum dice_dtype wdt, int N, int C, float eps)
{
	GPU_REQUIRE(N >= 0 && C > 0 && C <= RB_CMAX && dx && dy && x && w, "rmsnorm_backward");
	if (N == 0)
		return 0;
	return rb_run(st, dx, NULL, 0, dw, dy, x, w, wdt, NULL, 0.0f, 0, 0, N, 1, C, eps);
}

int gpu_rmsnorm_backward_add(cudaStream_t st, float *dres, void *dresb, float *dw,
                             const float *dy, const float *x, const void *w,
                             enum dice_dtype wdt, int N, int C, float eps)
{
	GPU_REQUIRE(N >= 0 && C > 0 && C <= RB_CMAX && dres && dy && x && w && dres != dy &&
	            dres != x, "rmsnorm_backward_add");
	if (N == 0)
		return 0;
	return rb_run(st, dres, (__nv_bfloat16 *)dresb, C, dw, dy, x, w, wdt, NULL, 0.0f, 0, 1, N, 1,
	              C, eps);
}

int gpu_rope_rmsnorm_backward(cudaStream_t st, float *dx, void *dxb, int ldb, float *dw,
                              const float *dy, const float *x, const void *w,
                              enum dice_dtype wdt, const int *pos, int N, int NH, int HD,
                              float theta, float eps)
{
	__nv_bfloat16 *xb = (__nv_bfloat16 *)dxb;

	GPU_REQUIRE(N >= 0 && NH > 0 && HD > 0 && HD % 2 == 0 && HD <= 1024 && dx && dy && x &&
	            w && pos && (!dxb || ldb >= NH * HD), "rope_rmsnorm_backward");
	if (N == 0)
		return 0;
	if (HD != 64 && HD != 128 && HD != 256) {  /* partners elsewhere: RoPE's pass, the norm's */
		if (dx != dy)
			CUDA_CHECK(cudaMemcpyAsync(dx, dy, (size_t)N * NH * HD * sizeof(float),
			                           cudaMemcpyDeviceToDevice, st));
		if (gpu_rope_backward(st, dx, pos, N, NH, HD, theta))
			return -1;
		/* units of NH rows (no RoPE): a token's rows go to its row of xb */
		return rb_run(st, dx, xb, ldb, dw, dx, x, w, wdt, NULL, 0.0f, 0, 0, N, NH, HD, eps);
	}
	return rb_run(st, dx, xb, ldb, dw, dy, x, w, wdt, pos, theta, 1, 0, N, NH, HD, eps);
}

/* dst row n (stride ld) = bf16 of src row n (C), an element a thread */
static __global__ void cast_rows_kernel(__nv_bfloat16 *d, int ld, const float *s, int N, int C)
{
	size_t total = (size_t)N * C;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x)
		d[i / C * ld + i % C] = __float2bfloat16_rn(s[i]);
}

int gpu_cast_bf16_rows(cudaStream_t st, void *dst, int ld, const float *src, int N, int C)
{
	GPU_REQUIRE(N >= 0 && C > 0 && ld >= C && dst && src, "cast_bf16_rows");
	if (N == 0)
		return 0;
	size_t g = CEIL_DIV((size_t)N * C, (size_t)256);
	cast_rows_kernel<<<(int)(g < 8192 ? g : 8192), 256, 0, st>>>((__nv_bfloat16 *)dst, ld, src,
	                                                             N, C);
	CUDA_CHECK_LAUNCH();
	return 0;
}
