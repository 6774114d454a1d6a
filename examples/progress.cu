/* SPDX-License-Identifier: MIT */
/*
 * gpusys-progress: a long kernel that reports each block's result as soon as
 * the block finishes, as in "GPU-to-CPU Callbacks" (Stuart, Cox, Owens 2010):
 * the lines reach the terminal while the kernel is still running, instead of
 * all at once after cudaDeviceSynchronize (which is what CUDA's printf does).
 *
 * Each block integrates 4/(1+x^2) over its slice of [0, 1] with many more
 * steps than it needs (and 1 to 8 passes, so blocks finish at different
 * times), so the kernel runs for a few seconds; thread 0 prints the block's
 * partial sum and when it finished. The host adds the partial
 * sums at the end: pi.
 *
 *     gpusysd --runtime-dir /tmp/g &
 *     GPUSYS_RUNTIME_DIR=/tmp/g gpusys-progress [--blocks N] [--steps N]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define THREADS 256

static __device__ __forceinline__ unsigned long long now_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __global__ void integrate(gpusys_dev_t dev, long long steps_per_block, unsigned long long t0,
				 double *partial)
{
	__shared__ double sums[THREADS];
	const double h = 1.0 / ((double)steps_per_block * gridDim.x);
	const long long first = (long long)blockIdx.x * steps_per_block;
	/* Blocks do 1 to 8 passes over their slice (averaged), so that they
	 * finish at different times, as real blocks of uneven work do. */
	const int passes = 1 + (int)(blockIdx.x % 8);
	double s = 0;

	for (int p = 0; p < passes; p++)
		for (long long i = threadIdx.x; i < steps_per_block; i += blockDim.x) {
			double x = ((double)(first + i) + 0.5 + 1e-9 * p) * h;
			s += 4.0 / (1.0 + x * x);
		}
	sums[threadIdx.x] = s * h / passes;
	__syncthreads();
	for (int w = blockDim.x / 2; w > 0; w /= 2) {
		if ((int)threadIdx.x < w)
			sums[threadIdx.x] += sums[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		partial[blockIdx.x] = sums[0];
		unsigned smid;
		asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
		gpusys_printf(dev, "block %4u of %u (SM %3u) done at %8.1f ms: partial sum %.15f\n", blockIdx.x,
			      gridDim.x, smid, (now_ns() - t0) / 1e6, sums[0]);
	}
}

static __global__ void flush_prints(gpusys_dev_t dev)
{
	gpusys_print_flush(dev);
}

static __global__ void start_time(unsigned long long *t)
{
	*t = now_ns();
}

int main(int argc, char **argv)
{
	int blocks = 0, opt;
	long long steps = 0;
	static const struct option opts[] = {
		{ "blocks", required_argument, NULL, 'b' },
		{ "steps", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'b': blocks = atoi(optarg); break;
		case 's': steps = atoll(optarg); break;
		default:
			fprintf(stderr, "usage: gpusys-progress [--blocks N] [--steps N per block]\n");
			return 2;
		}
	}

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g); /* our stdout goes to gpusysd with it */
	if (rc) {
		fprintf(stderr, "gpusys-progress: %s\n", gpusys_last_error());
		return 1;
	}
	cudaDeviceProp prop;
	cudaGetDeviceProperties(&prop, 0);
	if (!blocks)
		blocks = prop.multiProcessorCount * 4;
	if (!steps)
		steps = 1ll << 29;

	double *partial, *hp = (double *)calloc((size_t)blocks, sizeof(double));
	unsigned long long *t0;
	cudaMalloc(&partial, sizeof(double) * blocks);
	cudaMalloc(&t0, sizeof(*t0));
	start_time<<<1, 1>>>(t0);
	unsigned long long ht0;
	cudaMemcpy(&ht0, t0, sizeof(ht0), cudaMemcpyDeviceToHost);

	printf("%s: %d blocks of %d threads integrate 4/(1+x^2), %lld steps each; each block reports when it "
	       "finishes:\n",
	       prop.name, blocks, THREADS, steps);
	fflush(stdout);
	integrate<<<blocks, THREADS>>>(gpusys_device(g), steps, ht0, partial);
	rc = gpusys_synchronize(g, NULL, -1);
	if (rc) {
		fprintf(stderr, "gpusys-progress: %s\n", gpusys_strerror(rc));
		return 1;
	}
	cudaMemcpy(hp, partial, sizeof(double) * blocks, cudaMemcpyDeviceToHost);
	double pi = 0;
	for (int b = 0; b < blocks; b++)
		pi += hp[b];
	/* Our own printf after the kernel's lines: make sure they are out. */
	flush_prints<<<1, 1>>>(gpusys_device(g));
	cudaDeviceSynchronize();
	printf("pi = %.15f (error %.3g)\n", pi, pi - 3.14159265358979323846);
	cudaFree(partial);
	cudaFree(t0);
	free(hp);
	gpusys_detach(g);
	return 0;
}
