/* grid-sync: what one phase boundary of a small decode forward costs, two ways, on one GPU:
 *   kernels  a chain of P kernels, one a phase, captured as a CUDA graph and launched with
 *            programmatic dependent launch (each triggers its dependents at its start and
 *            waits before it reads what the kernel before wrote), as the engine's batch-1
 *            forward runs its ops; also without PDL;
 *   barrier  one kernel whose blocks all fit at once (cooperative launch) running the P
 *            phases, separated by a grid barrier: each block's thread 0 adds 1 to a global
 *            counter after a fence and spins until the counter reaches the phase's total.
 * A phase's work is the same token in both: every block reads the value phase p - 1 left and
 * block 0 writes phase p's. Grids of (SMs x blocks an SM) blocks of T threads. A figure is the
 * median over REPS runs of the microseconds a boundary (a run's time / P), CUDA events.
 * Usage: grid-sync [REPS [P]]. Built and run by bench/gpu-ops.sh (BENCH=grid-sync). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "gpu.h"
#include "cuda/common.cuh"
#include "bench.cuh"

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "grid-sync: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

static __device__ __forceinline__ void phase_work(int *data, int p)
{
	if (threadIdx.x == 0) {
		int v = ((volatile int *)data)[p - 1];
		if (blockIdx.x == 0)
			data[p] = v + 1;
	}
}

static __global__ void k_phase(int *data, int p)
{
	gpu_pdl_trigger();
	gpu_pdl_wait();
	phase_work(data, p);
}

/* counter: phases done x blocks; a phase ends when every block has arrived */
static __global__ void k_persist(int *data, unsigned *counter, int P)
{
	for (int p = 1; p <= P; p++) {
		phase_work(data, p);
		__syncthreads();
		if (threadIdx.x == 0) {
			unsigned want = (unsigned)p * gridDim.x;
			__threadfence();
			atomicAdd(counter, 1u);
			while (atomicAdd(counter, 0u) < want)
				;
			__threadfence();
		}
		__syncthreads();
	}
}


int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 9, P = argc > 2 ? atoi(argv[2]) : 512;
	int dev, sms, cc;
	cudaDeviceProp prop;
	cudaStream_t st;
	cudaEvent_t e0, e1;
	int *data;
	unsigned *counter;
	static const int shapes[][2] = { { 1, 256 }, { 2, 128 }, { 4, 128 } };

	if (reps < 1 || P < 1) {
		fprintf(stderr, "usage: grid-sync [REPS [P]]\n");
		return 2;
	}
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	sms = prop.multiProcessorCount;
	cc = 10 * prop.major + prop.minor;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaMalloc(&data, (size_t)(P + 1) * sizeof(int)));
	CK(cudaMalloc(&counter, sizeof(unsigned)));
	printf("# %s, %d SMs; %d phases a run, median of %d runs, us a boundary\n", prop.name, sms,
	       P, reps);
	printf("%-8s %-8s | %12s %12s %12s\n", "blocks", "threads", "kernels+PDL", "kernels",
	       "barrier");
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		int blocks = sms * shapes[si][0], threads = shapes[si][1];
		double med[3];
		for (int mode = 0; mode < 3; mode++) {
			double *t = (double *)malloc(sizeof(double) * reps);
			cudaGraphExec_t exec = NULL;
			if (mode < 2) {
				if (mode == 0 && cc < 90) {     /* no PDL before compute capability 9.0 */
					med[0] = -1;
					free(t);
					continue;
				}
				cudaGraph_t g;
				CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
				gpu_set_pdl(mode == 0);         /* gpu_launch: with PDL or not */
				for (int p = 1; p <= P; p++) {
					void *args[] = { &data, &p };
					gpu_launch((const void *)k_phase, dim3(blocks), dim3(threads), 0, st, args);
				}
				CK(cudaStreamEndCapture(st, &g));
				CK(cudaGraphInstantiate(&exec, g, 0));
				CK(cudaGraphDestroy(g));
			} else {
				int per = 0;
				CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_persist, threads, 0));
				if (per * sms < blocks) {
					fprintf(stderr, "grid-sync: %d blocks of %d do not fit at once\n", blocks,
					        threads);
					exit(1);
				}
			}
			for (int r = -1; r < reps; r++) {       /* r = -1: a warm-up */
				CK(cudaMemsetAsync(data, 0, (size_t)(P + 1) * sizeof(int), st));
				CK(cudaMemsetAsync(counter, 0, sizeof(unsigned), st));
				CK(cudaEventRecord(e0, st));
				if (mode < 2) {
					CK(cudaGraphLaunch(exec, st));
				} else {
					void *args[] = { &data, &counter, &P };
					CK(cudaLaunchCooperativeKernel((const void *)k_persist, dim3(blocks),
					                               dim3(threads), args, 0, st));
				}
				CK(cudaEventRecord(e1, st));
				CK(cudaEventSynchronize(e1));
				int last;
				CK(cudaMemcpy(&last, data + P, sizeof last, cudaMemcpyDeviceToHost));
				if (last != P) {
					fprintf(stderr, "grid-sync: mode %d: phase %d left %d\n", mode, P, last);
					exit(1);
				}
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				if (r >= 0)
					t[r] = 1000.0 * ms / P;
			}
			bench_sort(t, reps);
			med[mode] = t[reps / 2];
			free(t);
			if (exec)
				CK(cudaGraphExecDestroy(exec));
		}
		printf("%-8d %-8d | %12.2f %12.2f %12.2f\n", blocks, threads, med[0], med[1], med[2]);
	}
	CK(cudaFree(data));
	CK(cudaFree(counter));
	return 0;
}
