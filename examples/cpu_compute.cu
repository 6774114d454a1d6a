/* SPDX-License-Identifier: MIT */
/*
 * gpusys-cpu-compute: a kernel hands a piece of work to a host function of
 * this program and uses its result, as in the CPU-compute case of
 * "GPU-to-CPU Callbacks" (Stuart, Cox, Owens 2010): work the GPU does badly
 * (here: long-double / libm evaluation of a series, standing for anything
 * that needs a host library) goes to the CPU mid-kernel, and the kernel
 * overlaps it with its own work through a future.
 *
 * Each block computes a partial sum of 1/k^2 on the GPU for its range,
 * asks the host (asynchronously) for the same range's exact sum in long
 * double, keeps computing its own float estimate meanwhile, then waits for
 * the host's answer and records the error of its float estimate.
 *
 *     gpusysd --runtime-dir /tmp/g &
 *     GPUSYS_RUNTIME_DIR=/tmp/g gpusys-cpu-compute [--blocks N]
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define THREADS 256
#define PER_BLOCK 1000000ull

/* exact_sum(first, count): sum of 1/k^2 for k in [first, first + count),
 * in long double, on the host. */
constexpr gpusys_callback<double(unsigned long long, unsigned long long)> exact_sum_cb{ 0x8101 };

static double exact_sum(unsigned long long first, unsigned long long count)
{
	long double s = 0;
	for (unsigned long long k = first + count - 1; k >= first; k--) {
		s += 1.0L / ((long double)k * (long double)k);
		if (k == first)
			break;
	}
	return (double)s;
}

static __global__ void series(gpusys_dev_t dev, double *exact, float *approx, int *err)
{
	__shared__ float sums[THREADS];
	__shared__ double host_sum;
	__shared__ gpusys_future_t fut;
	unsigned long long first = 1 + blockIdx.x * PER_BLOCK;
	if (threadIdx.x == 0)
		fut = gpusys_call_async<double>(dev, exact_sum_cb, &host_sum, first, PER_BLOCK);
	/* The GPU's own estimate, meanwhile. */
	float s = 0;
	for (unsigned long long i = threadIdx.x; i < PER_BLOCK; i += THREADS) {
		float k = (float)(first + i);
		s += 1.0f / (k * k);
	}
	sums[threadIdx.x] = s;
	__syncthreads();
	for (int w = THREADS / 2; w > 0; w /= 2) {
		if (threadIdx.x < w)
			sums[threadIdx.x] += sums[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		err[blockIdx.x] = (int)gpusys_wait(dev, fut);
		exact[blockIdx.x] = host_sum;
		approx[blockIdx.x] = sums[0];
	}
}

int main(int argc, char **argv)
{
	int blocks = 512, opt;
	static const struct option opts[] = { { "blocks", required_argument, NULL, 'b' }, { NULL, 0, NULL, 0 } };
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'b')
			blocks = atoi(optarg);
		else
			return 2;
	}
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys_attach: %s\n", gpusys_last_error());
		return 1;
	}
	rc = gpusys_register(gpusys_callbacks_of(g), exact_sum_cb, "exact_sum", exact_sum);
	if (rc) {
		fprintf(stderr, "register: %s\n", gpusys_strerror(rc));
		return 1;
	}
	double *de;
	float *da;
	int *derr;
	cudaMalloc(&de, sizeof(double) * blocks);
	cudaMalloc(&da, sizeof(float) * blocks);
	cudaMalloc(&derr, sizeof(int) * blocks);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	series<<<blocks, THREADS>>>(gpusys_device(g), de, da, derr);
	rc = gpusys_synchronize(g, NULL, -1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc) {
		fprintf(stderr, "gpusys_synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}
	double *he = (double *)malloc(sizeof(double) * blocks);
	float *ha = (float *)malloc(sizeof(float) * blocks);
	int *herr = (int *)malloc(sizeof(int) * blocks);
	cudaMemcpy(he, de, sizeof(double) * blocks, cudaMemcpyDeviceToHost);
	cudaMemcpy(ha, da, sizeof(float) * blocks, cudaMemcpyDeviceToHost);
	cudaMemcpy(herr, derr, sizeof(int) * blocks, cudaMemcpyDeviceToHost);
	double total = 0, worst = 0;
	for (int b = 0; b < blocks; b++) {
		if (herr[b]) {
			fprintf(stderr, "block %d: %s\n", b, gpusys_strerror(herr[b]));
			return 1;
		}
		/* the host's answer checked here too */
		double want = exact_sum(1 + b * PER_BLOCK, PER_BLOCK);
		if (he[b] != want) {
			fprintf(stderr, "block %d: host sum %.17g, want %.17g\n", b, he[b], want);
			return 1;
		}
		total += he[b];
		double rel = fabs((double)ha[b] - he[b]) / he[b];
		if (rel > worst)
			worst = rel;
	}
	double tail = 1.0 / (1.0 + (double)blocks * PER_BLOCK); /* ~ sum beyond the last k */
	printf("sum of 1/k^2 over %llu terms by %d host callbacks: %.15f (pi^2/6 - tail: %.15f); worst float "
	       "estimate of a block off by %.2e; %.1f ms\n",
	       (unsigned long long)blocks * PER_BLOCK, blocks, total, M_PI * M_PI / 6 - tail, worst,
	       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	gpusys_detach(g);
	return fabs(total - (M_PI * M_PI / 6 - tail)) < 1e-9 ? 0 : 1;
}
