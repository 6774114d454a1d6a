/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench alloc: malloc+free pairs per second from every SM, gpusys
 * heap against CUDA's device malloc with a heap sized beforehand (4 GiB),
 * in the same run; and the latency of one warp's malloc that needs a new
 * chunk mapped.
 *
 *   pairs      each thread of SMs x blocks-per-sm blocks of 256 threads:
 *              p = malloc(size); write a word; free(p); iters times.
 *              gpusys: a fresh client and heap per size, so each run
 *              starts from the daemon's first grant (alloc_chunk_bytes,
 *              2 MiB here) and the heap grows during the kernel; its size
 *              at the end is printed.
 *   grow       one warp, one lane: malloc of a block larger than what is
 *              mapped (the daemon answers EAGAIN with a larger grant, the
 *              mapping thread creates and maps memory while the kernel
 *              runs, the warp asks again), timed on the GPU with
 *              %globaltimer; next to it a malloc from mapped memory (one
 *              round trip) and one from the warp's cache (none).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "gpusys/alloc.cuh"
#include "gpusys/gpusys.h"
#include "gpusys/heap.h"

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "gpusys-bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				cudaGetErrorString(e_));                                                   \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

static __device__ __forceinline__ unsigned long long gnow(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

#define HOLD_MAX 16

/* Each thread: malloc, write a word, free, iters times. With hold > 0 it
 * keeps its last hold blocks and frees the oldest before each malloc (a
 * live set of threads x hold blocks: the gpusys heap grows mid-kernel). */
static __global__ void k_gpusys_pairs(gpusys_heap_t h, size_t size, int iters, int hold, unsigned *fails)
{
	void *ring[HOLD_MAX] = { 0 };
	for (int i = 0; i < iters; i++) {
		void *p = gpusys_malloc(h, size);
		if (!p) {
			atomicAdd(fails, 1u);
			continue;
		}
		*(volatile int *)p = i;
		if (hold) {
			void *old = ring[i % hold];
			ring[i % hold] = p;
			p = old;
		}
		if (p && gpusys_free(h, p))
			atomicAdd(fails, 1u);
	}
	for (int k = 0; k < hold; k++)
		if (ring[k] && gpusys_free(h, ring[k]))
			atomicAdd(fails, 1u);
}

static __global__ void k_cuda_pairs(size_t size, int iters, int hold, unsigned *fails)
{
	void *ring[HOLD_MAX] = { 0 };
	for (int i = 0; i < iters; i++) {
		void *p = malloc(size);
		if (!p) {
			atomicAdd(fails, 1u);
			continue;
		}
		*(volatile int *)p = i;
		if (hold) {
			void *old = ring[i % hold];
			ring[i % hold] = p;
			p = old;
		}
		free(p);
	}
	for (int k = 0; k < hold; k++)
		free(ring[k]);
}

/* One lane: t[0] a malloc needing a new chunk, t[1] its free, t[2] a
 * malloc from mapped memory (64 KiB: a round trip), t[3] a small one (the
 * cache, after a first one filled it). */
static __global__ void k_grow(gpusys_heap_t h, size_t big, unsigned long long *t, int *err)
{
	unsigned long long a = gnow();
	void *p = gpusys_malloc(h, big);
	unsigned long long b = gnow();
	*err = p ? 0 : gpusys_alloc_errno(h);
	if (p)
		*(volatile int *)p = 1;
	t[0] = b - a;
	a = gnow();
	gpusys_free(h, p);
	t[1] = gnow() - a;
	a = gnow();
	void *q = gpusys_malloc(h, 65536);
	t[2] = gnow() - a;
	gpusys_free(h, q);
	q = gpusys_malloc(h, 64);
	gpusys_free(h, q);
	a = gnow();
	q = gpusys_malloc(h, 64);
	t[3] = gnow() - a;
	gpusys_free(h, q);
}

static gpusys_t *attach(const char *runtime_dir)
{
	if (runtime_dir)
		setenv("GPUSYS_RUNTIME_DIR", runtime_dir, 1);
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys-bench: gpusys_attach: %s\n", gpusys_last_error());
		exit(1);
	}
	return g;
}

static struct gpusys_heap *heap_open(gpusys_t *g)
{
	struct gpusys_heap *h;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	int rc = gpusys_heap_open(g, &ho, &h);
	if (rc) {
		fprintf(stderr, "gpusys-bench: gpusys_heap_open: %s\n", gpusys_strerror(rc));
		exit(1);
	}
	return h;
}

extern "C" int bench_alloc_gpu(int argc, char **argv)
{
	int per_sm = 1, threads = 256, iters = 64, hold = 0, opt;
	const char *runtime_dir = NULL, *daemon = NULL;
	static const struct option opts[] = {
		{ "blocks-per-sm", required_argument, NULL, 'b' }, { "threads", required_argument, NULL, 't' },
		{ "iters", required_argument, NULL, 'i' },         { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },        { "hold", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'b': per_sm = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'i': iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'H': hold = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: gpusys-bench alloc [--daemon PATH | --runtime-dir DIR] [--blocks-per-sm N] "
					"[--threads N] [--iters N] [--hold N]\n");
			return 2;
		}
	}
	if (hold < 0 || hold > HOLD_MAX || iters < 1) {
		fprintf(stderr, "gpusys-bench: --hold 0..%d, --iters >= 1\n", HOLD_MAX);
		return 2;
	}
	/* The daemon before CUDA: it must not inherit a context. First grant
	 * 2 MiB: the heap grows during each kernel. */
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	bd.config = "alloc_chunk_bytes = 2M\nalloc_limit_bytes = 16G\n";
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "gpusys-bench: no usable GPU\n");
		bench_daemon_stop(&bd);
		return 77;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, (size_t)4 << 30));
	int blocks = prop.multiProcessorCount * per_sm;
	unsigned *fails;
	CK(cudaMallocManaged(&fails, sizeof(unsigned)));
	const size_t sizes[] = { 16, 64, 1024, 65536 };
	double pairs = (double)blocks * threads * iters;

	printf("alloc: %s, %d blocks x %d threads x %d malloc+free pairs per size, each thread holding its last %d\n",
	       prop.name, blocks, threads, iters, hold);
	printf("%8s  %14s  %14s  %7s  %s\n", "size", "gpusys M/s", "CUDA M/s", "ratio", "gpusys heap (first grant 2 MiB)");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t size = sizes[s];
		if (hold && size > 1024)
			continue; /* 33792 threads x 16 x 64 KiB would be 35 GB */
		/* CUDA device malloc, heap sized beforehand: warm-up, then timed. */
		*fails = 0;
		k_cuda_pairs<<<blocks, threads>>>(size, 1, 0, fails);
		CK(cudaDeviceSynchronize());
		*fails = 0;
		uint64_t c0 = bench_now_ns();
		k_cuda_pairs<<<blocks, threads>>>(size, iters, hold, fails);
		CK(cudaDeviceSynchronize());
		uint64_t c1 = bench_now_ns();
		unsigned cfails = *fails;

		/* gpusys: a fresh client and heap; the kernel starts on the
		 * daemon's first grant. No warm-up of the heap: the growth is
		 * part of what is timed. */
		gpusys_t *g = attach(runtime_dir);
		struct gpusys_heap *h = heap_open(g);
		*fails = 0;
		uint64_t g0 = bench_now_ns();
		k_gpusys_pairs<<<blocks, threads>>>(gpusys_heap_device(h), size, iters, hold, fails);
		int rc = gpusys_synchronize(g, NULL, 600000);
		uint64_t g1 = bench_now_ns();
		CK(cudaGetLastError());
		unsigned gfails = *fails;
		double grate = pairs / ((g1 - g0) / 1e9) / 1e6, crate = pairs / ((c1 - c0) / 1e9) / 1e6;
		printf("%8zu  %14.2f  %14.2f  %6.2fx  %llu MiB mapped in %u mappings (last %.2f ms)%s%s\n", size, grate,
		       crate, grate / crate, (unsigned long long)(gpusys_heap_mapped(h) >> 20), gpusys_heap_maps(h),
		       gpusys_heap_last_map_ns(h) / 1e6,
		       rc || gfails ? " GPUSYS FAILURES" : "", cfails ? " CUDA FAILURES" : "");
		if (rc || gfails)
			fprintf(stderr, "gpusys-bench: size %zu: synchronize %s, %u failed calls\n", size,
				gpusys_strerror(rc), gfails);
		fflush(stdout);
		gpusys_heap_close(h);
		gpusys_detach(g);
	}

	/* Latency of a malloc that needs a new chunk, while a kernel runs. */
	gpusys_t *g = attach(runtime_dir);
	struct gpusys_heap *h = heap_open(g);
	unsigned long long *t;
	int *err;
	CK(cudaMallocManaged(&t, 4 * sizeof(*t)));
	CK(cudaMallocManaged(&err, sizeof(int)));
	printf("grow: one lane's malloc beyond what is mapped (new chunk created and mapped mid-kernel)\n");
	printf("%10s  %12s  %12s  %12s  %12s  %s\n", "block", "malloc us", "host map ms", "free us", "64K us",
	       "64B (cache) us");
	size_t big = (size_t)4 << 20;
	for (int i = 0; i < 6; i++, big *= 2) {
		k_grow<<<1, 1>>>(gpusys_heap_device(h), big, t, err);
		int rc = gpusys_synchronize(g, NULL, 60000);
		CK(cudaGetLastError());
		printf("%8zuMi  %12.1f  %12.2f  %12.1f  %12.1f  %12.2f%s\n", big >> 20, t[0] / 1e3,
		       gpusys_heap_last_map_ns(h) / 1e6, t[1] / 1e3, t[2] / 1e3, t[3] / 1e3,
		       rc || *err ? " FAILED" : "");
	}
	printf("heap: %llu MiB mapped in %u mappings\n", (unsigned long long)(gpusys_heap_mapped(h) >> 20),
	       gpusys_heap_maps(h));
	gpusys_heap_close(h);
	gpusys_detach(g);
	bench_daemon_stop(&bd);
	return 0;
}
