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
 *              2 MiB here) and an empty slab pool, which grows during the
 *              kernel; the heap and the pool at the end are printed.
 *              floor: the same grid doing only the memory operations of a
 *              small pair on the device (per warp: a reservation add and a
 *              bitmap OR on its SM's words, each lane's word written, a
 *              bitmap AND and the add taken back): what the slab design
 *              cannot beat on this GPU.
 *   chunk      one warp holding 2 KiB blocks (31 a slab, 992 a pool
 *              chunk) until 128 chunks are taken, each warp malloc timed
 *              with %globaltimer; the calls that took a new chunk from
 *              gpusysd (waiting for the mapping thread when the grant was
 *              not mapped yet) are reported apart: p50, p99, max.
 *   mm         the memory manager's program (Stuart, Cox, Owens 2010;
 *              examples/memory_manager.cu): every block, for each of its
 *              jobs, takes a page for three 64x64 float matrices (48 KiB),
 *              fills two, multiplies, checks a sample, frees the page;
 *              gpusys_malloc against CUDA's malloc, same grid, same run,
 *              and the floor: the same program with each block's page
 *              given before the launch (no allocator at all).
 *   grow       one warp, one lane: malloc of a large block beyond what is
 *              mapped (the daemon answers EAGAIN with a larger grant, the
 *              mapping thread creates and maps memory while the kernel
 *              runs, the warp asks again); next to it a 128 KiB malloc
 *              from mapped memory (one round trip) and a 64 B one (the
 *              device's slabs, none).
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

static __global__ void k_stat(gpusys_heap_t h, struct gpusys_alloc_stat *st, int *rc)
{
	*rc = gpusys_alloc_stat(h, st);
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

/* The floor of a small pair: the slab fast path's memory operations and
 * nothing else (warp-aggregated, per-SM words, device memory). */
static __global__ void k_floor(unsigned long long *words, unsigned char *blocks, int iters)
{
	unsigned sm;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
	unsigned long long *ctl = &words[sm * 80u], *bits = &words[sm * 80u + 8u];
	for (int i = 0; i < iters; i++) {
		unsigned w = (warp + (unsigned)i) & 63u;
		unsigned long long got = 0;
		if (lane == 0) {
			atomicAdd(ctl, 32ull);
			got = atomicOr(&bits[w], 0xffffffffull);
		}
		got = __shfl_sync(0xffffffffu, got, 0);
		*(volatile int *)&blocks[((size_t)sm * 64u * 64u + w * 64u + lane) * 64u] = i + (int)(got & 1u);
		if (lane == 0) {
			atomicAnd(&bits[w], ~0xffffffffull);
			atomicAdd(ctl, (unsigned long long)-32ll);
		}
		__syncwarp();
	}
}

/* One warp: 2 KiB blocks kept until the pool holds `chunks` chunks; each
 * call's time in t[], and in took[] whether it took a chunk from gpusysd
 * (the pool's count of chunks got moved). */
static __global__ void k_chunk(gpusys_heap_t h, unsigned chunks, int max_calls, unsigned long long *t,
			       unsigned char *took, int *calls, int *fails)
{
	const volatile unsigned long long *got = &h.heap.pool->chunks_got;
	int i = 0;
	for (; i < max_calls && *got < chunks; i++) {
		unsigned long long before = *got;
		__syncwarp();
		unsigned long long a = gnow();
		void *p = gpusys_malloc(h, 2000);
		__syncwarp();
		unsigned long long b = gnow();
		if (!p)
			atomicAdd(fails, 1);
		else
			*(volatile int *)p = i;
		if (threadIdx.x == 0) {
			t[i] = b - a;
			took[i] = *got != before;
		}
	}
	if (threadIdx.x == 0)
		*calls = i;
}

/* The memory manager's job loop. which: MM_GPUSYS, MM_CUDA (CUDA's malloc) or
 * MM_GIVEN (no allocator: the block's page of fixed, allocated before the
 * launch; the program's own work, the floor of both). */
#define MM_N 64
#define MM_PAGE (3 * MM_N * MM_N * sizeof(float))
enum { MM_GPUSYS, MM_CUDA, MM_GIVEN };
static __global__ void k_mm(gpusys_heap_t h, int which, int jobs, unsigned *wrong, unsigned *fails, uint8_t *fixed)
{
	__shared__ float *page;
	for (int j = 0; j < jobs; j++) {
		if (threadIdx.x == 0) {
			page = (float *)(which == MM_CUDA    ? malloc(MM_PAGE)
					 : which == MM_GIVEN ? (void *)(fixed + (size_t)blockIdx.x * MM_PAGE)
							     : gpusys_malloc(h, MM_PAGE));
			if (!page)
				atomicAdd(fails, 1u);
		}
		__syncthreads();
		float *a = page, *b = page + MM_N * MM_N, *c = page + 2 * MM_N * MM_N;
		if (page) {
			for (int i = threadIdx.x; i < MM_N * MM_N; i += blockDim.x) {
				a[i] = (float)((i + j) % 7);
				b[i] = (float)((i * 3 + blockIdx.x) % 5);
			}
			__syncthreads();
			for (int i = threadIdx.x; i < MM_N * MM_N; i += blockDim.x) {
				int r = i / MM_N, col = i % MM_N;
				float acc = 0;
				for (int k = 0; k < MM_N; k++)
					acc += a[r * MM_N + k] * b[k * MM_N + col];
				c[i] = acc;
			}
			__syncthreads();
			if (threadIdx.x == 0) {
				int i = (j * 131 + blockIdx.x) % (MM_N * MM_N), r = i / MM_N, col = i % MM_N;
				float acc = 0;
				for (int k = 0; k < MM_N; k++)
					acc += (float)((r * MM_N + k + j) % 7) * (float)(((k * MM_N + col) * 3 + blockIdx.x) % 5);
				if (acc != c[i])
					atomicAdd(wrong, 1u);
				if (which == MM_CUDA)
					free(page);
				else if (which == MM_GPUSYS && gpusys_free(h, page))
					atomicAdd(fails, 1u);
			}
		}
		__syncthreads();
	}
}

static int cmp_u64(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

/* One lane: t[0] a malloc needing a new chunk, t[1] its free, t[2] a
 * malloc from mapped memory (128 KiB: a round trip), t[3] a small one (the
 * device's slabs, after a first one took its slab). */
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
	void *q = gpusys_malloc(h, 131072);
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

	struct gpusys_alloc_stat *st;
	int *src;
	CK(cudaMallocManaged(&st, sizeof(*st)));
	CK(cudaMallocManaged(&src, sizeof(int)));

	/* The floor of the slab fast path, same grid. */
	unsigned long long *fw;
	unsigned char *fb;
	CK(cudaMalloc(&fw, (size_t)prop.multiProcessorCount * 80 * sizeof(unsigned long long)));
	CK(cudaMemset(fw, 0, (size_t)prop.multiProcessorCount * 80 * sizeof(unsigned long long)));
	CK(cudaMalloc(&fb, (size_t)prop.multiProcessorCount * 64 * 64 * 64 + 64));
	k_floor<<<blocks, threads>>>(fw, fb, 1);
	CK(cudaDeviceSynchronize());
	uint64_t f0 = bench_now_ns();
	k_floor<<<blocks, threads>>>(fw, fb, iters);
	CK(cudaDeviceSynchronize());
	uint64_t f1 = bench_now_ns();
	double frate = pairs / ((f1 - f0) / 1e9) / 1e6;
	CK(cudaFree(fw));
	CK(cudaFree(fb));

	printf("alloc: %s, %d blocks x %d threads x %d malloc+free pairs per size, each thread holding its last %d\n",
	       prop.name, blocks, threads, iters, hold);
	printf("floor (a small pair's memory operations alone, same grid): %.2f M pairs/s\n", frate);
	printf("%8s  %10s  %10s  %10s  %8s  %8s  %8s  %s\n", "size", "first M/s", "again M/s", "CUDA M/s", "first/",
	       "again/", "again of", "gpusys heap (first grant 2 MiB), slab pool");
	printf("%8s  %10s  %10s  %10s  %8s  %8s  %8s\n", "", "", "", "", "CUDA", "CUDA", "floor");
	printf("  (first: gpusys on a fresh heap, its growth timed; again: the same kernel on that heap;\n"
	       "   CUDA: its device malloc after a warm-up launch)\n");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t size = sizes[s];
		if (hold && size > 1024)
			continue; /* 33792 threads x 8 x 64 KiB would be 17 GB */
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
		/* The same kernel again on the grown heap: the steady state,
		 * the slabs alone (the first launch's start, 132 SMs taking
		 * their first slabs and the heap's mappings, is most of a
		 * short kernel's time). */
		*fails = 0;
		uint64_t w0 = bench_now_ns();
		k_gpusys_pairs<<<blocks, threads>>>(gpusys_heap_device(h), size, iters, hold, fails);
		int wrc = gpusys_synchronize(g, NULL, 600000);
		uint64_t w1 = bench_now_ns();
		CK(cudaGetLastError());
		gfails += *fails;
		rc = rc ? rc : wrc;
		double grate = pairs / ((g1 - g0) / 1e9) / 1e6, crate = pairs / ((c1 - c0) / 1e9) / 1e6;
		double wrate = pairs / ((w1 - w0) / 1e9) / 1e6;
		k_stat<<<1, 1>>>(gpusys_heap_device(h), st, src);
		if (gpusys_synchronize(g, NULL, 30000) || *src)
			memset(st, 0, sizeof(*st));
		printf("%8zu  %10.2f  %10.2f  %10.2f  %7.2fx  %7.2fx  %7.1f%%  %llu MiB mapped in %u mappings (last %.2f ms), "
		       "pool %llu MiB (%llu chunks)%s%s\n",
		       size, grate, wrate, crate, grate / crate, wrate / crate, 100.0 * wrate / frate,
		       (unsigned long long)(gpusys_heap_mapped(h) >> 20), gpusys_heap_maps(h),
		       gpusys_heap_last_map_ns(h) / 1e6, (unsigned long long)(st->pool_bytes >> 20),
		       (unsigned long long)st->pool_chunks_got, rc || gfails ? " GPUSYS FAILURES" : "",
		       cfails ? " CUDA FAILURES" : "");
		if (rc || gfails)
			fprintf(stderr, "gpusys-bench: size %zu: synchronize %s, %u failed calls\n", size,
				gpusys_strerror(rc), gfails);
		fflush(stdout);
		gpusys_heap_close(h);
		gpusys_detach(g);
	}

	/* The memory manager's program, both allocators. */
	{
		const int mm_blocks = prop.multiProcessorCount * 4, mm_jobs = 16;
		unsigned *wrong;
		CK(cudaMallocManaged(&wrong, sizeof(unsigned)));
		gpusys_t *g = attach(runtime_dir);
		struct gpusys_heap *h = heap_open(g);
		double ms[3];
		unsigned w[3], f[3];
		uint8_t *fixed;
		CK(cudaMalloc(&fixed, (size_t)mm_blocks * MM_PAGE));
		for (int which = MM_GIVEN; which >= MM_GPUSYS; which--) {
			*wrong = 0;
			*fails = 0;
			k_mm<<<mm_blocks, 256>>>(gpusys_heap_device(h), which, 1, wrong, fails, fixed); /* warm-up */
			if (gpusys_synchronize(g, NULL, 60000))
				*fails += 1;
			CK(cudaGetLastError());
			*wrong = 0;
			uint64_t t0 = bench_now_ns();
			k_mm<<<mm_blocks, 256>>>(gpusys_heap_device(h), which, mm_jobs, wrong, fails, fixed);
			int rc = gpusys_synchronize(g, NULL, 120000);
			uint64_t t1 = bench_now_ns();
			CK(cudaGetLastError());
			ms[which] = (t1 - t0) / 1e6;
			w[which] = *wrong;
			f[which] = *fails + (rc != 0);
		}
		CK(cudaFree(fixed));
		printf("mm: %d blocks x %d jobs, a 48 KiB page each: gpusys %.2f ms, CUDA %.2f ms, %.2fx (wrong %u/%u, "
		       "failed %u/%u)\n",
		       mm_blocks, mm_jobs, ms[MM_GPUSYS], ms[MM_CUDA], ms[MM_CUDA] / ms[MM_GPUSYS], w[MM_GPUSYS],
		       w[MM_CUDA], f[MM_GPUSYS], f[MM_CUDA]);
		printf("mm floor: the same program with each block's page given, no allocator: %.2f ms (wrong %u, failed "
		       "%u); at most %.2fx CUDA for any allocator, gpusys at %.2fx the floor\n",
		       ms[MM_GIVEN], w[MM_GIVEN], f[MM_GIVEN], ms[MM_CUDA] / ms[MM_GIVEN], ms[MM_GPUSYS] / ms[MM_GIVEN]);
		gpusys_heap_close(h);
		gpusys_detach(g);
	}

	/* Latency of a small malloc that takes a new pool chunk. */
	{
		gpusys_t *g = attach(runtime_dir);
		struct gpusys_heap *h = heap_open(g);
		const int max_calls = 8192;
		unsigned long long *t;
		unsigned char *took;
		int *calls, *cf;
		CK(cudaMallocManaged(&t, max_calls * sizeof(*t)));
		CK(cudaMallocManaged(&took, max_calls));
		CK(cudaMallocManaged(&calls, sizeof(int)));
		CK(cudaMallocManaged(&cf, sizeof(int)));
		*cf = 0;
		*calls = 0;
		k_chunk<<<1, 32>>>(gpusys_heap_device(h), 128, max_calls, t, took, calls, cf);
		int rc = gpusys_synchronize(g, NULL, 120000);
		CK(cudaGetLastError());
		static unsigned long long a[8192], b[8192];
		int na = 0, nb = 0;
		for (int i = 0; i < *calls; i++) {
			if (took[i])
				a[na++] = t[i];
			else
				b[nb++] = t[i];
		}
		qsort(a, na, sizeof(a[0]), cmp_u64);
		qsort(b, nb, sizeof(b[0]), cmp_u64);
		printf("chunk: one warp's 32 x 2 KiB malloc, %d calls, %d took a new 2 MiB pool chunk from gpusysd%s\n",
		       *calls, na, rc || *cf ? " FAILED" : "");
		if (na && nb)
			printf("  took a chunk: p50 %.1f us, p99 %.1f us, max %.1f us; from the slabs: p50 %.2f us, p99 "
			       "%.2f us; heap %llu MiB mapped in %u mappings\n",
			       a[na / 2] / 1e3, a[(na * 99) / 100] / 1e3, a[na - 1] / 1e3, b[nb / 2] / 1e3,
			       b[(nb * 99) / 100] / 1e3, (unsigned long long)(gpusys_heap_mapped(h) >> 20),
			       gpusys_heap_maps(h));
		gpusys_heap_close(h);
		gpusys_detach(g);
	}

	/* Latency of a large malloc that needs a new mapping, while a kernel runs. */
	gpusys_t *g = attach(runtime_dir);
	struct gpusys_heap *h = heap_open(g);
	unsigned long long *t;
	int *err;
	CK(cudaMallocManaged(&t, 4 * sizeof(*t)));
	CK(cudaMallocManaged(&err, sizeof(int)));
	printf("grow: one lane's malloc beyond what is mapped (new memory created and mapped mid-kernel)\n");
	printf("%10s  %12s  %12s  %12s  %12s  %s\n", "block", "malloc us", "host map ms", "free us", "128K us",
	       "64B (slab) us");
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
