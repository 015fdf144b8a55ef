/* wgmma-probe: does Hopper's wgmma (m64nNk16, fp32 accumulators, bf16 / fp16 operands) give
 * bitwise the same sums as the mma.sync m16n8k16 sequence of matmul_fixed.cu (mf_step: each
 * 32-input block two steps, inputs 8q+0..3 then 8q+4..7 of quad thread q, the k16 positions
 * 2q, 2q+1 <- 8q+4h+0, 1 and 2q+8, 2q+9 <- 8q+4h+2, 3), when each wgmma k16 step is fed the
 * same 16 inputs at the same positions and accumulates into the same fp32 registers? And do
 * wgmma's bits depend on N, on A from shared memory or registers, on the swizzle, on the
 * row's or column's place in the tile, or on which operand (x or w) is A?
 * Every case computes D (M x NC) = X (M x K) W^T (NC x K) over 16-bit random data (never
 * zeros; two distributions: uniform(-1, 1) and sign (1 + u) 2^e, e in -8..8 (fp16: -6..6)),
 * K = 32 .. 9728, and is compared bit for bit with the mma.sync reference (R) and, on sampled
 * rows, with a double-precision CPU product (rel = |D - ref| / |ref|, to catch layout bugs).
 * The wgmma kernels read copies of X and W whose inputs are reordered so that the natural k
 * order of the copy is matmul_fixed's order (perm below). Prints one line per case and K on
 * stderr, a summary table on stdout. Built for sm_90a by bench/wgmma-probe.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common.cuh"
#include "cuda/wgmma.cuh"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "wgmma-probe: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
	exit(1); } } while (0)

#define M 256                   /* rows of x */
#define NC 256                  /* outputs (rows of w) */
#define KC 64                   /* inputs a shared-memory chunk */

typedef unsigned short u16;

/* the mma.sync reference. mode 0: matmul_fixed's order over the original arrays (as mf_step
 * takes them); mode 1: the natural m16n8k16 order over the given arrays (k16 step s = inputs
 * 16s .. 16s + 15, positions in order). One warp a 16 x 8 tile. */
template <int F16>
static __global__ void ref_kernel(float *C, const u16 *A, const u16 *W, int K, int mode)
{
	int lane = threadIdx.x, g = lane >> 2, q = lane & 3;
	int r0 = blockIdx.x * 16, n = blockIdx.y * 8 + g;
	const u16 *a0p = A + (size_t)(r0 + g) * K, *a1p = A + (size_t)(r0 + g + 8) * K;
	const u16 *bp = W + (size_t)n * K;
	float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#define LD2(p, k) (*(const unsigned *)((p) + (k)))
	for (int s = 0; s < K / 16; s++) {
		int klo, khi;                   /* the inputs at positions 2q, 2q+1 and 2q+8, 2q+9 */
		if (mode == 0) {
			klo = (s >> 1) * 32 + 8 * q + 4 * (s & 1);
			khi = klo + 2;
		} else {
			klo = 16 * s + 2 * q;
			khi = klo + 8;
		}
		unsigned a0 = LD2(a0p, klo), a1 = LD2(a1p, klo), a2 = LD2(a0p, khi), a3 = LD2(a1p, khi);
		unsigned b0 = LD2(bp, klo), b1 = LD2(bp, khi);
		gpu_mma16816(c, a0, a1, a2, a3, b0, b1, F16);
	}
	int col = blockIdx.y * 8 + 2 * q;
	C[(size_t)(r0 + g) * NC + col] = c[0];
	C[(size_t)(r0 + g) * NC + col + 1] = c[1];
	C[(size_t)(r0 + g + 8) * NC + col] = c[2];
	C[(size_t)(r0 + g + 8) * NC + col + 1] = c[3];
}

/* the wgmma product D[m][n] = sum_k P[m][k] Q[n][k] (natural k order), one warpgroup a 64 x N
 * tile, KC inputs a chunk through shared memory, each chunk's steps issued back to back into
 * the same accumulators. MODE 0: A and B from shared memory, no swizzle (core matrices of 8
 * rows x 16 bytes, 128 bytes apart along K, 1024 along M / N; lbo, sbo as given, to tell
 * which field is which); 1: both 128-byte swizzled (rows of 128 bytes, 16-byte chunk c of row
 * r at c ^ (r % 8)); 2: A from registers (the m16n8k16 fragment, loaded from global), B
 * 128-byte swizzled. zfirst: the first step with scale-d 0 instead of 1. */
template <int N, int MODE, int F16>
static __global__ void __launch_bounds__(128)
wg_kernel(float *D, const u16 *P, const u16 *Q, int K, int ldd, int lbo, int sbo, int zfirst)
{
	extern __shared__ uint4 probe_smem[];
	char *base = (char *)(((uintptr_t)probe_smem + 1023) & ~(uintptr_t)1023);
	char *sa = base, *sb = base + 64 * KC * 2;
	int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
	int m0 = blockIdx.x * 64, n0 = blockIdx.y * N;
	float d[N / 2];
#pragma unroll
	for (int i = 0; i < N / 2; i++)
		d[i] = 0.0f;
	for (int kc = 0; kc < K; kc += KC) {
		int steps = min(KC, K - kc) / 16;
		/* fill: row r, 16-byte chunk c (inputs kc + 8c ..) */
		for (int i = tid; i < (64 + N) * 8; i += 128) {
			int isb = i >= 64 * 8, r = isb ? i / 8 - 64 : i / 8, c = i % 8;
			const u16 *src = (isb ? Q + (size_t)(n0 + r) * K : P + (size_t)(m0 + r) * K) + kc + 8 * c;
			uint4 v = make_uint4(0, 0, 0, 0);
			if (kc + 8 * c < K)
				v = *(const uint4 *)src;
			char *t = isb ? sb : sa;
			size_t off = MODE == 0 ? (size_t)(r / 8) * 1024 + c * 128 + (r % 8) * 16
			                       : (size_t)r * 128 + ((c ^ (r % 8)) * 16);
			if (!(MODE == 2 && !isb))
				*(uint4 *)(t + off) = v;
		}
		wg_fence_proxy();
		__syncthreads();
		uint4 ar[KC / 16];
		if (MODE == 2) {
			const u16 *p0 = P + (size_t)(m0 + 16 * w + g) * K, *p1 = p0 + 8 * (size_t)K;
#pragma unroll
			for (int s = 0; s < KC / 16; s++) {
				int k = kc + 16 * s + 2 * q;
				ar[s] = make_uint4(0, 0, 0, 0);
				if (s < steps)
					ar[s] = make_uint4(*(const unsigned *)(p0 + k), *(const unsigned *)(p1 + k),
					                   *(const unsigned *)(p0 + k + 8),
					                   *(const unsigned *)(p1 + k + 8));
			}
		}
		wg_fence();
#pragma unroll
		for (int s = 0; s < KC / 16; s++) {
			if (s >= steps)
				break;
			int acc = !(zfirst && kc == 0 && s == 0);
			uint64_t da, db;
			if (MODE == 0) {
				da = wg_desc(sa + s * 256, lbo, sbo, 0);
				db = wg_desc(sb + s * 256, lbo, sbo, 0);
			} else {
				da = wg_desc(sa + s * 32, 16, 1024, 1);
				db = wg_desc(sb + s * 32, 16, 1024, 1);
			}
			if (MODE == 2)
				wg_op<N>::rs(d, ar[s], db, acc, F16);
			else
				wg_op<N>::ss(d, da, db, acc, F16);
		}
		wg_commit();
		wg_wait<0>();
		__syncthreads();
	}
#pragma unroll
	for (int j = 0; j < N / 8; j++) {
		int row = m0 + 16 * w + g, col = n0 + 8 * j + 2 * q;
		D[(size_t)row * ldd + col] = d[4 * j];
		D[(size_t)row * ldd + col + 1] = d[4 * j + 1];
		D[(size_t)(row + 8) * ldd + col] = d[4 * j + 2];
		D[(size_t)(row + 8) * ldd + col + 1] = d[4 * j + 3];
	}
}

/* ---------------------------------------------------------------- host */

static unsigned long long rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static u16 to16(float v, int f16)
{
	if (f16) {
		__half h = __float2half_rn(v);
		return *(u16 *)&h;
	}
	__nv_bfloat16 b = __float2bfloat16_rn(v);
	return *(u16 *)&b;
}

static double from16(u16 u, int f16)
{
	if (f16) {
		__half h = *(__half *)&u;
		return (double)__half2float(h);
	}
	__nv_bfloat16 b = *(__nv_bfloat16 *)&u;
	return (double)__bfloat162float(b);
}

/* position j of step h in a 32-input block holds input perm(h, j) (matmul_fixed's order) */
static int perm(int h, int j)
{
	return 8 * ((j & 7) >> 1) + 4 * h + 2 * (j >> 3) + (j & 1);
}

/* dst row = src row with its inputs in matmul_fixed's order (rev: each step's 16 reversed) */
static void reorder(u16 *dst, const u16 *src, int rows, int K, int rev)
{
	for (int r = 0; r < rows; r++)
		for (int b = 0; b < K / 32; b++)
			for (int p = 0; p < 32; p++) {
				int h = p >> 4, j = p & 15;
				dst[(size_t)r * K + 32 * b + p] = src[(size_t)r * K + 32 * b + perm(h, rev ? 15 - j : j)];
			}
}

static long long ulpdist(float a, float b)
{
	int ia, ib;
	memcpy(&ia, &a, 4);
	memcpy(&ib, &b, 4);
	long long oa = ia < 0 ? (long long)(int)0x80000000 - ia : ia;
	long long ob = ib < 0 ? (long long)(int)0x80000000 - ib : ib;
	return oa > ob ? oa - ob : ob - oa;
}

struct tally {
	const char *name;
	long long diff, n, maxulp;
	double maxrel;
	int seen;
};

#define NCASE 40
static struct tally T[NCASE];
static int ncase;

static struct tally *tal(const char *name)
{
	for (int i = 0; i < ncase; i++)
		if (!strcmp(T[i].name, name))
			return &T[i];
	T[ncase].name = name;
	return &T[ncase++];
}

static float *hR, *hD, *dD;
static double *cref;            /* CPU product on the sampled rows */
#define SAMPLE 13               /* every 13th row */

/* compare hD (transposed when tr) with R and with the CPU product; tally under name */
static void judge(const char *name, int tr, const char *cfg)
{
	long long diff = 0, mu = 0;
	double e2 = 0, r2 = 0;
	for (int r = 0; r < M; r++)
		for (int c = 0; c < NC; c++) {
			float v = tr ? hD[(size_t)c * M + r] : hD[(size_t)r * NC + c];
			float ref = hR[(size_t)r * NC + c];
			if (memcmp(&v, &ref, 4)) {
				diff++;
				long long u = ulpdist(v, ref);
				mu = u > mu ? u : mu;
			}
			if (r % SAMPLE == 0) {
				double x = cref[(size_t)(r / SAMPLE) * NC + c];
				e2 += (v - x) * (v - x);
				r2 += x * x;
			}
		}
	double rel = sqrt(e2 / r2);
	struct tally *t = tal(name);
	t->diff += diff;
	t->n += (long long)M * NC;
	t->maxulp = mu > t->maxulp ? mu : t->maxulp;
	t->maxrel = rel > t->maxrel ? rel : t->maxrel;
	t->seen++;
	fprintf(stderr, "%-26s %-22s differ %7lld / %d  max ulp %6lld  rel %.2e\n", name, cfg, diff,
	        M * NC, mu, rel);
}

template <int N, int MODE, int F16>
static void wg_run(const char *name, const u16 *P, const u16 *Q, int K, int tr, int lbo, int sbo,
                   int zfirst, const char *cfg)
{
	int smem = (64 + N) * KC * 2 + 1024;
	auto fn = wg_kernel<N, MODE, F16>;
	CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	CK(cudaMemset(dD, 0xFF, (size_t)M * NC * 4));             /* poison: NaN */
	fn<<<dim3(tr ? NC / 64 : M / 64, (tr ? M : NC) / N), 128, smem>>>(dD, P, Q, K, tr ? M : NC, lbo,
	                                                                   sbo, zfirst);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(hD, dD, (size_t)M * NC * 4, cudaMemcpyDeviceToHost));
	judge(name, tr, cfg);
}

template <int F16>
static void one(int K, int dist)
{
	size_t na = (size_t)M * K, nw = (size_t)NC * K;
	u16 *A = (u16 *)malloc(na * 2), *W = (u16 *)malloc(nw * 2);
	u16 *Ap = (u16 *)malloc(na * 2), *Wp = (u16 *)malloc(nw * 2);
	u16 *Ar = (u16 *)malloc(na * 2), *Wr = (u16 *)malloc(nw * 2);
	u16 *Aro = (u16 *)malloc(na * 2), *Wro = (u16 *)malloc(nw * 2);
	int emax = F16 ? 6 : 8;
	for (size_t i = 0; i < na + nw; i++) {
		float v;
		if (dist == 0) {
			do
				v = (float)(urand() * 2 - 1);
			while (to16(v, F16) == 0 || to16(v, F16) == 0x8000);
		} else {
			int e = (int)(urand() * (2 * emax + 1)) - emax;
			v = (float)ldexp(1 + urand(), e) * (urand() < 0.5 ? -1.0f : 1.0f);
		}
		if (i < na)
			A[i] = to16(v, F16);
		else
			W[i - na] = to16(v, F16);
	}
	reorder(Ap, A, M, K, 0);
	reorder(Wp, W, NC, K, 0);
	reorder(Ar, A, M, K, 1);
	reorder(Wr, W, NC, K, 1);
	/* rotated: row r of Aro = row (r + 37) of Ap; output c of Wro = output (c + 13) of Wp */
	for (int r = 0; r < M; r++)
		memcpy(Aro + (size_t)r * K, Ap + (size_t)((r + 37) % M) * K, (size_t)K * 2);
	for (int c = 0; c < NC; c++)
		memcpy(Wro + (size_t)c * K, Wp + (size_t)((c + 13) % NC) * K, (size_t)K * 2);
	for (int r = 0; r < M; r += SAMPLE)
		for (int c = 0; c < NC; c++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += from16(A[(size_t)r * K + k], F16) * from16(W[(size_t)c * K + k], F16);
			cref[(size_t)(r / SAMPLE) * NC + c] = s;
		}
	u16 *dA, *dW, *dAp, *dWp, *dAr, *dWr, *dAro, *dWro;
	u16 **dp[] = { &dA, &dW, &dAp, &dWp, &dAr, &dWr, &dAro, &dWro };
	u16 *hp[] = { A, W, Ap, Wp, Ar, Wr, Aro, Wro };
	for (int i = 0; i < 8; i++) {
		size_t n = i % 2 ? nw : na;
		CK(cudaMalloc(dp[i], n * 2));
		CK(cudaMemcpy(*dp[i], hp[i], n * 2, cudaMemcpyHostToDevice));
	}
	char cfg[64];
	snprintf(cfg, sizeof cfg, "%s K=%d %s", F16 ? "f16" : "bf16", K, dist ? "wide" : "unif");
	ref_kernel<F16><<<dim3(M / 16, NC / 8), 32>>>(dD, dA, dW, K, 0);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(hR, dD, (size_t)M * NC * 4, cudaMemcpyDeviceToHost));
	memcpy(hD, hR, (size_t)M * NC * 4);
	judge("R mma.sync mf order", 0, cfg);
	struct { const u16 *a, *w; const char *name; } rv[] = {
		{ dAp, dWp, "mma.sync reordered copy" },    /* must equal R: checks perm() */
		{ dAr, dWr, "mma.sync steps reversed" },    /* same 16 a step, other positions */
		{ dA, dW, "mma.sync natural order" },       /* other inputs a step */
	};
	for (int i = 0; i < 3; i++) {
		ref_kernel<F16><<<dim3(M / 16, NC / 8), 32>>>(dD, rv[i].a, rv[i].w, K, 1);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(hD, dD, (size_t)M * NC * 4, cudaMemcpyDeviceToHost));
		judge(rv[i].name, 0, cfg);
	}
	/* (a) and (b): x as A, w as B */
	wg_run<8, 1, F16>("wg n8 ss swz128", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<64, 1, F16>("wg n64 ss swz128", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<128, 1, F16>("wg n128 ss swz128", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<256, 1, F16>("wg n256 ss swz128", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<8, 2, F16>("wg n8 rs", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<64, 2, F16>("wg n64 rs", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<128, 2, F16>("wg n128 rs", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<256, 2, F16>("wg n256 rs", dAp, dWp, K, 0, 16, 1024, 0, cfg);
	wg_run<64, 0, F16>("wg n64 ss noswz lbo=K", dAp, dWp, K, 0, 128, 1024, 0, cfg);
	wg_run<64, 0, F16>("wg n64 ss noswz lbo=MN", dAp, dWp, K, 0, 1024, 128, 0, cfg);
	wg_run<128, 1, F16>("wg n128 ss scale-d 0 first", dAp, dWp, K, 0, 16, 1024, 1, cfg);
	wg_run<64, 1, F16>("wg reversed steps n64 ss", dAr, dWr, K, 0, 16, 1024, 0, cfg);
	/* the row's and the column's place: rotated inputs, outputs rotated back */
	{
		const char *nm[] = { "wg rotated n128 rs", "wg rotated n256 ss" };
		for (int v = 0; v < 2; v++) {
			if (v == 0)
				wg_run<128, 2, F16>("tmp", dAro, dWro, K, 0, 16, 1024, 0, cfg);
			else
				wg_run<256, 1, F16>("tmp", dAro, dWro, K, 0, 16, 1024, 0, cfg);
			float *t = (float *)malloc((size_t)M * NC * 4);
			for (int r = 0; r < M; r++)
				for (int c = 0; c < NC; c++)
					t[(size_t)((r + 37) % M) * NC + (c + 13) % NC] = hD[(size_t)r * NC + c];
			memcpy(hD, t, (size_t)M * NC * 4);
			free(t);
			judge(nm[v], 0, cfg);
		}
	}
	/* swap AB: w as A (rows = outputs), x as B; D transposed */
	wg_run<8, 2, F16>("swap n8 rs (w regs)", dWp, dAp, K, 1, 16, 1024, 0, cfg);
	wg_run<64, 2, F16>("swap n64 rs (w regs)", dWp, dAp, K, 1, 16, 1024, 0, cfg);
	wg_run<128, 2, F16>("swap n128 rs (w regs)", dWp, dAp, K, 1, 16, 1024, 0, cfg);
	wg_run<256, 2, F16>("swap n256 rs (w regs)", dWp, dAp, K, 1, 16, 1024, 0, cfg);
	wg_run<128, 1, F16>("swap n128 ss swz128", dWp, dAp, K, 1, 16, 1024, 0, cfg);
	for (int i = 0; i < 8; i++)
		CK(cudaFree(*dp[i]));
	for (int i = 0; i < 8; i++)
		free(hp[i]);
}

int main(void)
{
	static const int Ks[] = { 32, 64, 96, 1024, 2560, 4096, 9728 };
	cudaDeviceProp pr;
	CK(cudaGetDeviceProperties(&pr, 0));
	printf("# %s, cc %d.%d\n", pr.name, pr.major, pr.minor);
	if (pr.major != 9) {
		printf("wgmma-probe: needs a compute-capability-9.0 GPU\n");
		return 1;
	}
	hR = (float *)malloc((size_t)M * NC * 4);
	hD = (float *)malloc((size_t)M * NC * 4);
	cref = (double *)malloc((size_t)(M / SAMPLE + 1) * NC * 8);
	CK(cudaMalloc(&dD, (size_t)M * NC * 4));
	for (int f = 0; f < 2; f++)
		for (int dist = 0; dist < 2; dist++)
			for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++) {
				if (f)
					one<1>(Ks[i], dist);
				else
					one<0>(Ks[i], dist);
			}
	printf("%-26s %13s %13s %8s %9s\n", "case", "differ from R", "of", "max ulp", "max rel");
	for (int i = 0; i < ncase; i++)
		if (strcmp(T[i].name, "tmp"))
			printf("%-26s %13lld %13lld %8lld %9.2e\n", T[i].name, T[i].diff, T[i].n, T[i].maxulp,
			       T[i].maxrel);
	printf("(rel: against a double-precision CPU product on every %dth row; R: mma.sync in "
	       "matmul_fixed's order; every case over bf16 and fp16, 2 distributions, K = 32 .. 9728)\n",
	       SAMPLE);
	return 0;
}
