/* SPDX-License-Identifier: MIT */
/*
 * gpusys-progress-callback: a kernel reports its progress to a host
 * function of this program, which draws a progress bar in the terminal
 * while the kernel runs (user host callbacks, docs/CALLS.md).
 *
 * Each block integrates 4/(1+x^2) over its slice of [0, 1] (pi), in
 * several passes of different lengths; after each pass thread 0 calls the
 * host function `progress(done_steps)` fire-and-forget: the kernel never
 * waits for the terminal. The host adds the counts up and redraws the bar
 * at most every 50 ms.
 *
 *     gpusysd --runtime-dir /tmp/g &
 *     GPUSYS_RUNTIME_DIR=/tmp/g gpusys-progress-callback [--blocks N] [--steps N]
 */
#include <atomic>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define THREADS 256

/* The host function the kernel calls, and its signature. */
constexpr gpusys_callback<void(unsigned long long)> progress_cb{ 0x8001 };

static std::atomic<unsigned long long> done_steps{ 0 };
static std::atomic<unsigned long long> last_draw_ns{ 0 };
static unsigned long long total_steps;

static unsigned long long mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

static void draw(unsigned long long done)
{
	const int width = 50;
	int filled = total_steps ? (int)(done * width / total_steps) : width;
	char bar[width + 1];
	for (int i = 0; i < width; i++)
		bar[i] = i < filled ? '#' : '.';
	bar[width] = 0;
	fprintf(stderr, "\r[%s] %5.1f%%", bar, total_steps ? 100.0 * (double)done / (double)total_steps : 100.0);
	fflush(stderr);
}

/* Runs on a libgpusys pool thread, in this process. */
static void progress(unsigned long long steps)
{
	unsigned long long done = done_steps.fetch_add(steps) + steps;
	unsigned long long now = mono_ns(), last = last_draw_ns.load();
	if (now - last >= 50000000ull && last_draw_ns.compare_exchange_strong(last, now))
		draw(done);
}

static __global__ void integrate(gpusys_dev_t dev, long long steps_per_block, double *partial)
{
	__shared__ double sums[THREADS];
	const int passes = 1 + (blockIdx.x * 7) % 8;
	const double h = 1.0 / ((double)steps_per_block * gridDim.x);
	const long long first = (long long)blockIdx.x * steps_per_block;
	const long long per_pass = steps_per_block / passes;
	double s = 0;
	for (int p = 0; p < passes; p++) {
		long long lo = p * per_pass, hi = p == passes - 1 ? steps_per_block : lo + per_pass;
		for (long long i = lo + threadIdx.x; i < hi; i += THREADS) {
			double x = ((double)(first + i) + 0.5) * h;
			s += 4.0 / (1.0 + x * x);
		}
		__syncthreads();
		if (threadIdx.x == 0)
			gpusys_call_nowait(dev, progress_cb, (unsigned long long)(hi - lo));
	}
	sums[threadIdx.x] = s * h;
	__syncthreads();
	for (int w = THREADS / 2; w > 0; w /= 2) {
		if (threadIdx.x < w)
			sums[threadIdx.x] += sums[threadIdx.x + w];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[blockIdx.x] = sums[0];
}

int main(int argc, char **argv)
{
	int blocks = 2048, opt;
	long long steps = 1ll << 22;
	static const struct option opts[] = { { "blocks", required_argument, NULL, 'b' },
					      { "steps", required_argument, NULL, 's' },
					      { NULL, 0, NULL, 0 } };
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'b')
			blocks = atoi(optarg);
		else if (opt == 's')
			steps = atoll(optarg);
		else
			return 2;
	}
	total_steps = (unsigned long long)blocks * (unsigned long long)steps;

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys_attach: %s\n", gpusys_last_error());
		return 1;
	}
	rc = gpusys_register(gpusys_callbacks_of(g), progress_cb, "progress", progress);
	if (rc) {
		fprintf(stderr, "register: %s\n", gpusys_strerror(rc));
		return 1;
	}
	double *d, *h = (double *)malloc(sizeof(double) * blocks);
	cudaMalloc(&d, sizeof(double) * blocks);
	unsigned long long t0 = mono_ns();
	draw(0);
	integrate<<<blocks, THREADS>>>(gpusys_device(g), steps, d);
	rc = gpusys_synchronize(g, NULL, -1);
	draw(done_steps.load());
	fprintf(stderr, "\n");
	if (rc) {
		fprintf(stderr, "gpusys_synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}
	cudaMemcpy(h, d, sizeof(double) * blocks, cudaMemcpyDeviceToHost);
	double pi = 0;
	for (int b = 0; b < blocks; b++)
		pi += h[b];
	printf("pi = %.12f after %llu steps in %.2f s; the bar saw %llu of them\n", pi, total_steps,
	       (mono_ns() - t0) / 1e9, done_steps.load());
	uint64_t calls = 0;
	gpusys_callbacks_info(gpusys_callbacks_of(g), 0, NULL, NULL, &calls);
	printf("%llu progress callbacks\n", (unsigned long long)calls);
	gpusys_detach(g);
	return done_steps.load() == total_steps ? 0 : 1;
}
