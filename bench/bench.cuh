/* bench.cuh: what the standalone GPU benches of bench/ (built by bench/gpu-ops.sh) share */
#include <stdlib.h>

static int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* v[0..n) in ascending order (the benches take their medians from it) */
static void bench_sort(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
}

#ifdef __CUDACC__
#include <stdio.h>
#include <cuda_runtime.h>

/* device-to-device copy bandwidth on st, bytes a second: 1 GiB copied 10 times
 * (cudaMemcpyAsync), read + write counted, as tests/gpu/model-logits.c's floor takes it;
 * exits on a CUDA error */
static double bench_copy_bw(cudaStream_t st)
{
	size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	cudaEvent_t e0, e1;
	float ms = 0;
	cudaError_t e = cudaMalloc(&a, n);
	if (e == cudaSuccess)
		e = cudaMalloc(&b, n);
	if (e == cudaSuccess)
		e = cudaMemsetAsync(a, 1, n, st);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st);
	if (e == cudaSuccess)
		e = cudaEventCreate(&e0);
	if (e == cudaSuccess)
		e = cudaEventCreate(&e1);
	if (e == cudaSuccess)
		e = cudaEventRecord(e0, st);
	for (int i = 0; e == cudaSuccess && i < 10; i++)
		e = cudaMemcpyAsync(i & 1 ? a : b, i & 1 ? b : a, n, cudaMemcpyDeviceToDevice, st);
	if (e == cudaSuccess)
		e = cudaEventRecord(e1, st);
	if (e == cudaSuccess)
		e = cudaEventSynchronize(e1);
	if (e == cudaSuccess)
		e = cudaEventElapsedTime(&ms, e0, e1);
	if (e != cudaSuccess) {
		fprintf(stderr, "bench: copy bandwidth: %s\n", cudaGetErrorString(e));
		exit(1);
	}
	cudaFree(a);
	cudaFree(b);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return 2.0 * n * 10 / (ms * 1e-3);
}
#endif
