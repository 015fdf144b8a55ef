/* persist: the matrix products of one batch-1 decode forward (SDAR geometry: per layer the
 * fused q/k/v, o, the fused gate/up and down; then lm_head) on M rows, two ways, the same bits:
 *   kernels   gpu_matmul_fixed for each product, as the engine forward runs them (the
 *             streaming kernel, one launch a product, programmatic dependent launch),
 *             captured in a CUDA graph;
 *   persist   one kernel whose blocks all stay resident (cooperative launch) and run the
 *             products one after the other, a grid barrier between two; a warp takes the
 *             streaming kernel's work unit (8 outputs x one segment of the inputs, the same
 *             steps and the same order of sums: matmul_fixed.cu), and asks for its first
 *             weights of the next product before it waits at the barrier ("persist-nopf":
 *             after it).
 * The question it answers: how much of the floor the products lose to their kernel
 * boundaries. The floor is the weight bytes over the device-to-device copy bandwidth
 * measured in the same run (read + write counted, as tests/gpu/model-logits.c does). Every
 * layer has weights of its own; each product reads a fixed random x (the barriers and the
 * waits are there all the same). A figure is the median over REPS runs (CUDA events); the
 * outputs of every run way are compared bit for bit with the kernels'.
 * Usage: persist [REPS [GEOMS [M]]] (GEOMS e.g. 1.7b,4b,8b; M rows, at most 8).
 * Built and run by bench/gpu-ops.sh (BENCH=persist). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <cuda_runtime.h>

#include "gpu.h"
#include "cuda/common.cuh"
#include "bench.cuh"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "persist: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

#define PP_WB 4                 /* warps a block */
#define PP_U 8                  /* 32-input blocks a step (up to 8 rows: the streaming kernel's U) */
#define PP_KB 32

struct pp_phase {
	const void *w;
	const float *x;
	float *y;
	int in, out, kseg, nseg, tiles;
};

/* where a warp is: phase p (P: done), tile t, step at input k of its segment [kbeg, kend) */
struct pp_pos {
	int p, t, k, kbeg, kend;
};

/* the warp's first tile at or after phase p (its group: warp / nseg, its segment warp % nseg) */
static __device__ __forceinline__ struct pp_pos pp_first(const struct pp_phase *ph, int P, int p,
                                                          int warp)
{
	struct pp_pos s;
	for (; p < P; p++) {
		int nseg = ph[p].nseg, gpb = PP_WB / nseg, grp = warp / nseg;
		int t = blockIdx.x * gpb + grp;
		if (grp < gpb && t < ph[p].tiles) {
			s.p = p;
			s.t = t;
			s.kbeg = s.k = (warp % nseg) * ph[p].kseg;
			s.kend = min(ph[p].in, s.kbeg + ph[p].kseg);
			return s;
		}
	}
	s.p = P;
	s.t = s.k = s.kbeg = s.kend = 0;
	return s;
}

static __device__ __forceinline__ struct pp_pos pp_next(const struct pp_phase *ph, int P,
                                                         struct pp_pos s, int warp)
{
	s.k += PP_KB * PP_U;
	if (s.k < s.kend)
		return s;
	int gpb = PP_WB / ph[s.p].nseg;
	s.t += gridDim.x * gpb;
	if (s.t < ph[s.p].tiles) {
		s.k = s.kbeg;
		return s;
	}
	return pp_first(ph, P, s.p + 1, warp);
}

static __device__ __forceinline__ void pp_loadb(uint4 *b, const struct pp_phase *ph,
                                                struct pp_pos s, int g, int q)
{
	const struct pp_phase &f = ph[s.p];
	const char *wp = (const char *)f.w + ((size_t)min(s.t * 8 + g, f.out - 1) * f.in + 8 * q) * 2;
#pragma unroll
	for (int u = 0; u < PP_U; u++) {
		b[u] = make_uint4(0, 0, 0, 0);
		if (s.k + PP_KB * u + 8 * q < s.kend)
			b[u] = __ldcs((const uint4 *)(wp + (size_t)(s.k + PP_KB * u) * 2));
	}
}

/* every block arrives; all wait until gridDim.x x (p + 1) have (the counter starts at 0) */
static __device__ __forceinline__ void pp_barrier(unsigned *bar, int p)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned want = (unsigned)(p + 1) * gridDim.x, v;
		__threadfence();
		asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(bar) : "memory");
		do
			asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(bar) : "memory");
		while (v < want);
	}
	__syncthreads();
}

template <int PF>
static __global__ void __launch_bounds__(PP_WB * 32, 3)
pp_kernel(const struct pp_phase *ph, int P, int M, unsigned *bar)
{
	__shared__ float4 part[2][PP_WB][32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
	uint4 b[PP_U], bn[PP_U];
	float4 xa[PP_U][2];
	float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
	int tiles_done = 0;
	struct pp_pos cur = pp_first(ph, P, 0, warp);

	if (cur.p < P)
		pp_loadb(b, ph, cur, g, q);
	for (int p = 0; p < P; p++) {
		if (!PF && cur.p == p && p > 0)
			pp_loadb(b, ph, cur, g, q);
		while (cur.p == p) {
			const struct pp_phase &f = ph[p];
			if (cur.k == cur.kbeg)
				c[0] = c[1] = c[2] = c[3] = 0.0f;
#pragma unroll
			for (int u = 0; u < PP_U; u++) {
				int kk = cur.k + PP_KB * u + 8 * q;
				xa[u][0] = xa[u][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
				if (g < M && kk < cur.kend) {
					const float4 *xp = (const float4 *)(f.x + (size_t)g * f.in + kk);
					xa[u][0] = __ldcg(xp);
					xa[u][1] = __ldcg(xp + 1);
				}
			}
			struct pp_pos nxt = pp_next(ph, P, cur, warp);
			if (nxt.p < P && (PF || nxt.p == p))
				pp_loadb(bn, ph, nxt, g, q);
#pragma unroll
			for (int u = 0; u < PP_U; u++) {
				if (cur.k + PP_KB * u < cur.kend) {
					uint4 ra = make_uint4(gpu_pack2(xa[u][0].x, xa[u][0].y, 0),
					                      gpu_pack2(xa[u][0].z, xa[u][0].w, 0),
					                      gpu_pack2(xa[u][1].x, xa[u][1].y, 0),
					                      gpu_pack2(xa[u][1].z, xa[u][1].w, 0));
					gpu_mma16816(c, ra.x, 0u, ra.y, 0u, b[u].x, b[u].y, 0);
					gpu_mma16816(c, ra.z, 0u, ra.w, 0u, b[u].z, b[u].w, 0);
				}
			}
#pragma unroll
			for (int u = 0; u < PP_U; u++)
				b[u] = bn[u];
			if (nxt.p != p || nxt.t != cur.t) {     /* the tile's segment is done */
				int nseg = f.nseg, seg = warp % nseg, lead = warp - seg, buf = tiles_done & 1;
				if (nseg > 1) {
					part[buf][warp][lane] = make_float4(c[0], c[1], c[2], c[3]);
					asm volatile("bar.sync %0, %1;\n" ::"r"(1 + warp / nseg), "r"(32 * nseg)
					             : "memory");
				}
				if (seg == 0) {
					if (nseg > 1) {
						float4 v = part[buf][lead][lane];
						for (int s = 1; s < nseg; s++) {
							float4 a = part[buf][lead + s][lane];
							v.x += a.x;
							v.y += a.y;
							v.z += a.z;
							v.w += a.w;
						}
						c[0] = v.x, c[1] = v.y, c[2] = v.z, c[3] = v.w;
					}
					int col = cur.t * 8 + 2 * q;
					if (g < M) {
						if (col < f.out)
							f.y[(size_t)g * f.out + col] = c[0];
						if (col + 1 < f.out)
							f.y[(size_t)g * f.out + col + 1] = c[1];
					}
				}
				tiles_done++;
			}
			cur = nxt;
		}
		tiles_done = 0;
		pp_barrier(bar, p);
	}
}

/* a value in [-1, 1) from the index and a seed (a hash) */
static __device__ __forceinline__ float pp_rand(size_t i, uint32_t seed)
{
	uint32_t h = (uint32_t)i * 2654435761u ^ seed;
	h ^= h >> 15;
	h *= 2246822519u;
	h ^= h >> 13;
	return (h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

/* w: n bf16 values in [-scale, scale) (rounded to nearest even); x: n floats in [-1, 1) */
static __global__ void fill(uint16_t *w, float *x, size_t n, uint32_t seed, float scale)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float v = pp_rand(i, seed);
		if (x) {
			x[i] = v;
			continue;
		}
		uint32_t bits = __float_as_uint(v * scale);
		w[i] = (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1)) >> 16);
	}
}

struct geom {
	const char *name;
	int C, L, NH, I;
};
static const struct geom geoms[] = {
	{ "1.7b", 2048, 28, 16, 6144 }, { "4b", 2560, 36, 32, 9728 }, { "8b", 4096, 36, 32, 12288 },
};

static void run_geom(const struct geom *gm, int reps, int M, double bw, cudaStream_t st)
{
	int C = gm->C, HD = 128, NKV = 8, V = 151936;
	int QKV = gm->NH * HD + 2 * NKV * HD, QD = gm->NH * HD;
	int shp[4][2] = { { C, QKV }, { QD, C }, { C, 2 * gm->I }, { gm->I, C } };
	int P = 4 * gm->L + 1;
	struct pp_phase *ph = (struct pp_phase *)calloc(P, sizeof *ph);
	size_t wtot = 0, ytot = 0;
	for (int p = 0; p < P; p++) {
		int in = p < P - 1 ? shp[p % 4][0] : C, out = p < P - 1 ? shp[p % 4][1] : V;
		ph[p].in = in, ph[p].out = out;
		ph[p].nseg = gpu_matmul_fixed_segments(in, out, &ph[p].kseg);
		ph[p].tiles = (out + 7) / 8;
		if (ph[p].nseg > PP_WB) {
			fprintf(stderr, "persist: %s: %d segments > %d warps a block\n", gm->name,
			        ph[p].nseg, PP_WB);
			exit(1);
		}
		wtot += (size_t)in * out;
		ytot += (size_t)M * out;
	}
	uint16_t *w;
	float *x, *y;
	size_t xmax = (size_t)M * (gm->I > QD ? gm->I : QD);
	CK(cudaMalloc(&w, wtot * 2));
	CK(cudaMalloc(&x, 4 * xmax * sizeof(float)));
	CK(cudaMalloc(&y, ytot * sizeof(float)));
	fill<<<4096, 256>>>(w, NULL, wtot, 12345u, 0.03f);
	fill<<<256, 256>>>(NULL, x, 4 * xmax, 777u, 1.0f);
	CK(cudaGetLastError());
	size_t wo = 0, yo = 0;
	for (int p = 0; p < P; p++) {
		ph[p].w = w + wo;
		ph[p].x = x + (p < P - 1 ? p % 4 : 0) * xmax;
		ph[p].y = y + yo;
		wo += (size_t)ph[p].in * ph[p].out;
		yo += (size_t)M * ph[p].out;
	}
	struct pp_phase *phd;
	unsigned *bar;
	CK(cudaMalloc(&phd, P * sizeof *phd));
	CK(cudaMemcpy(phd, ph, P * sizeof *ph, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&bar, sizeof(unsigned)));
	float *ref = (float *)malloc(ytot * sizeof(float)), *got = (float *)malloc(ytot * sizeof(float));
	double floor_ms = wtot * 2.0 / bw * 1e3;

	int sms, per;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, pp_kernel<1>, PP_WB * 32, 0));
	int blocks = sms * per;

	/* the kernels way, one graph */
	cudaGraph_t gr;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
	for (int p = 0; p < P; p++)
		if (gpu_matmul_fixed(st, ph[p].y, ph[p].x, ph[p].w, DICE_BF16, M, ph[p].in, ph[p].out))
			exit(1);
	CK(cudaStreamEndCapture(st, &gr));
	CK(cudaGraphInstantiate(&ge, gr, 0));
	CK(cudaGraphDestroy(gr));

	const char *names[3] = { "kernels", "persist", "persist-nopf" };
	double med[3];
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	double *t = (double *)malloc(sizeof(double) * 3 * (reps + 1));
	for (int r = -1; r < reps; r++) {       /* the ways alternate, run by run; r = -1 warms up */
		for (int mode = 0; mode < 3; mode++) {
			CK(cudaMemsetAsync(y, 0xff, ytot * sizeof(float), st));
			CK(cudaMemsetAsync(bar, 0, sizeof(unsigned), st));
			CK(cudaEventRecord(e0, st));
			if (mode == 0) {
				CK(cudaGraphLaunch(ge, st));
			} else {
				void *args[] = { &phd, &P, &M, &bar };
				CK(cudaLaunchCooperativeKernel(mode == 1 ? (const void *)pp_kernel<1> :
				                               (const void *)pp_kernel<0>, dim3(blocks),
				                               dim3(PP_WB * 32), args, 0, st));
			}
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (r >= 0)
				t[mode * reps + r] = ms;
			CK(cudaMemcpy(mode ? got : ref, y, ytot * sizeof(float), cudaMemcpyDeviceToHost));
			if (mode && memcmp(ref, got, ytot * sizeof(float))) {
				size_t d = 0;
				for (size_t i = 0; i < ytot; i++)
					d += memcmp(ref + i, got + i, sizeof(float)) != 0;
				fprintf(stderr, "persist: %s M=%d: %s differs from kernels in %zu of %zu\n",
				        gm->name, M, names[mode], d, ytot);
				exit(1);
			}
		}
	}
	for (int mode = 0; mode < 3; mode++) {
		bench_sort(t + mode * reps, reps);
		med[mode] = t[mode * reps + reps / 2];
		printf("%-5s M=%d %-13s %8.3f ms  %5.1f%% of floor %.3f ms  (%d products, %d blocks of %d)\n",
		       gm->name, M, names[mode], med[mode], 100 * floor_ms / med[mode], floor_ms, P,
		       mode ? blocks : 0, mode ? PP_WB * 32 : 0);
	}
	fflush(stdout);
	free(t);
	free(ref);
	free(got);
	free(ph);
	CK(cudaGraphExecDestroy(ge));
	CK(cudaFree(phd));
	CK(cudaFree(bar));
	CK(cudaFree(w));
	CK(cudaFree(x));
	CK(cudaFree(y));
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 9, M = argc > 3 ? atoi(argv[3]) : 4;
	char *list = strdup(argc > 2 ? argv[2] : "1.7b,4b,8b"), *save = NULL;
	cudaStream_t st;
	cudaDeviceProp prop;

	if (reps < 1 || M < 1 || M > 8) {
		fprintf(stderr, "usage: persist [REPS [GEOMS [M]]] (M 1..8)\n");
		return 2;
	}
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	double bw = bench_copy_bw(st);
	printf("# %s, %d SMs; copy %.1f GB/s; median of %d runs\n", prop.name,
	       prop.multiProcessorCount, bw / 1e9, reps);
	for (char *g = strtok_r(list, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
		const struct geom *gm = NULL;
		for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
			if (!strcmp(geoms[i].name, g))
				gm = &geoms[i];
		if (!gm) {
			fprintf(stderr, "persist: unknown geometry %s\n", g);
			return 2;
		}
		run_geom(gm, reps, M, bw, st);
	}
	free(list);
	return 0;
}
