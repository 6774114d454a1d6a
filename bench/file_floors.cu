/* SPDX-License-Identifier: MIT */
/*
 * The floors of GPU-initiated file reads, measured in the same run as
 * gpusys_pread_block (bench/file_gpu.cu): the GPU's copy of a pinned buffer
 * alone, host threads' pread(2) into pinned memory alone, and the two
 * pipelined over slots of two halves with nothing but two counters per half
 * between them (no gpusysd, no requests). gpusys reads cannot beat the
 * third; how close they come is what the protocol costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "file_floors.h"

const struct floor_variant floor_variants[] = {
	{ 4, FLOOR_LD_CV, "4 x 16 B ld.cv (library before)" },
	{ 8, FLOOR_LD_CV, "8 x 16 B ld.cv" },
	{ 4, FLOOR_LD_RELAXED, "4 x 16 B ld.relaxed.sys" },
	{ 8, FLOOR_LD_RELAXED, "8 x 16 B ld.relaxed.sys" },
	{ 8, FLOOR_LD_WEAK_NA, "8 x 16 B ld.L1::no_allocate (weak)" },
	{ 8, FLOOR_LD_NC_NA, "8 x 16 B ld.nc.L1::no_allocate (not coherent)" },
};
const int floor_nvariants = (int)(sizeof(floor_variants) / sizeof(floor_variants[0]));

/* ------------------------------------------------------------ device side */

/* asm volatile: never merged with a load of the same address in an earlier
 * round (the halves are rewritten while the kernel runs), never moved
 * across the fences, which are asm volatile too. */
static __device__ __forceinline__ uint4 floor_load(const uint4 *p, const int kind)
{
	uint4 v;
	switch (kind) {
	case FLOOR_LD_CV:
		return __ldcv(p);
	case FLOOR_LD_RELAXED:
		asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];"
			     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			     : "l"(p));
		return v;
	case FLOOR_LD_WEAK_NA:
		asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
			     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			     : "l"(p));
		return v;
	default:
		asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
			     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			     : "l"(p));
		return v;
	}
}

/* n bytes (a multiple of 16, both ends 16-byte aligned), as thread idx of
 * cnt, depth loads in flight per thread. */
static __device__ __forceinline__ void floor_copy(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx,
						  uint32_t cnt, const int depth, const int kind)
{
	const uint4 *s = (const uint4 *)src;
	uint4 *d = (uint4 *)dst;
	const uint64_t n16 = n / 16;
	uint64_t i = idx;
	asm volatile("fence.acq_rel.sys;" ::: "memory");
	for (; i + (uint64_t)(depth - 1) * cnt < n16; i += (uint64_t)depth * cnt) {
		uint4 v[8];
#pragma unroll
		for (int k = 0; k < 8; k++)
			if (k < depth)
				v[k] = floor_load(s + i + (uint64_t)k * cnt, kind);
#pragma unroll
		for (int k = 0; k < 8; k++)
			if (k < depth)
				d[i + (uint64_t)k * cnt] = v[k];
	}
	for (; i < n16; i += cnt)
		d[i] = floor_load(s + i, kind);
}

/* Literal depth and kind per case, so each loop is unrolled on its own. */
static __device__ void floor_copy_variant(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx, uint32_t cnt,
					  int variant)
{
	switch (variant) {
	case 0: floor_copy(dst, src, n, idx, cnt, 4, FLOOR_LD_CV); break;
	case 1: floor_copy(dst, src, n, idx, cnt, 8, FLOOR_LD_CV); break;
	case 2: floor_copy(dst, src, n, idx, cnt, 4, FLOOR_LD_RELAXED); break;
	case 3: floor_copy(dst, src, n, idx, cnt, 8, FLOOR_LD_RELAXED); break;
	case 4: floor_copy(dst, src, n, idx, cnt, 8, FLOOR_LD_WEAK_NA); break;
	default: floor_copy(dst, src, n, idx, cnt, 8, FLOOR_LD_NC_NA); break;
	}
}

/* Block b's share of size, as k_move in file_gpu.cu cuts it. */
static __host__ __device__ void floor_share(uint64_t size, uint32_t blocks, uint32_t b, uint64_t *lo, uint64_t *n)
{
	uint64_t per = (size / blocks + 4095) & ~4095ull, l = per * b;
	if (l > size)
		l = size;
	*lo = l;
	*n = size - l < per ? size - l : per;
}

static __global__ void __launch_bounds__(1024) k_sm_copy(uint8_t *dst, const uint8_t *src, uint64_t size, int variant)
{
	uint64_t lo, n;
	floor_share(size, gridDim.x, blockIdx.x, &lo, &n);
	if (threadIdx.x >= 32)
		floor_copy_variant(dst + lo, src + lo, n, threadIdx.x - 32, blockDim.x - 32, variant);
}

/* One block's two halves: counters the host bumps (full: pieces written
 * into the half, all uses together) and the block sets (empty: uses of the
 * half copied out). A cache line each side. */
struct pipe_ctl {
	unsigned int full[2];
	unsigned int pad0[30];
	unsigned int empty[2];
	unsigned int pad1[30];
};

static __device__ __forceinline__ unsigned int ld_acquire_sys(const unsigned int *p)
{
	unsigned int v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ void st_release_sys(unsigned int *p, unsigned int v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ unsigned long long floor_clock(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __global__ void __launch_bounds__(1024) k_pipe(uint8_t *dst, uint8_t *slots, struct pipe_ctl *ctl, uint64_t size,
						      uint64_t half, uint32_t pieces, int variant,
						      unsigned long long *times)
{
	uint64_t lo, n;
	floor_share(size, gridDim.x, blockIdx.x, &lo, &n);
	uint8_t *slot = slots + (uint64_t)blockIdx.x * 2 * half;
	struct pipe_ctl *c = ctl + blockIdx.x;
	const unsigned long long start = floor_clock();
	unsigned long long waited = 0;
	uint32_t r = 0;
	for (uint64_t done = 0; done < n; done += half, r++) {
		const uint64_t want = n - done < half ? n - done : half;
		const uint32_t h = r & 1u, k = r >> 1;
		if (threadIdx.x == 0) {
			unsigned long long t0 = floor_clock();
			while (ld_acquire_sys(&c->full[h]) < pieces * (k + 1))
				;
			waited += floor_clock() - t0;
		}
		__syncthreads();
		if (threadIdx.x >= 32)
			floor_copy_variant(dst + lo + done, slot + h * half, want, threadIdx.x - 32, blockDim.x - 32, variant);
		/* Every load of the half has returned (its data is stored):
		 * the host may write the half again. */
		__syncthreads();
		if (threadIdx.x == 0)
			st_release_sys(&c->empty[h], k + 1);
	}
	if (threadIdx.x == 0) {
		times[2 * blockIdx.x] = waited;
		times[2 * blockIdx.x + 1] = floor_clock() - start;
	}
}

static __global__ void k_count_diff(const uint8_t *a, const uint8_t *b, uint64_t n, unsigned long long *bad)
{
	const uint4 *x = (const uint4 *)a, *y = (const uint4 *)b;
	unsigned long long mine = 0;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n / 16; i += (uint64_t)gridDim.x * blockDim.x) {
		uint4 p = x[i], q = y[i];
		mine += p.x != q.x || p.y != q.y || p.z != q.z || p.w != q.w;
	}
	if (mine)
		atomicAdd(bad, mine);
}

/* -------------------------------------------------------------- host side */

static double gbs_since(uint64_t bytes, uint64_t t0)
{
	return (double)bytes / ((double)(bench_now_ns() - t0) / 1e9) / 1e9;
}

double floor_sm_copy(uint8_t *dst, const uint8_t *pinned, uint64_t size, int blocks, int variant, int reps)
{
	double best = -1;
	for (int r = 0; r < reps; r++) {
		cudaDeviceSynchronize();
		uint64_t t0 = bench_now_ns();
		k_sm_copy<<<blocks, 1024>>>(dst, pinned, size, variant);
		if (cudaDeviceSynchronize() != cudaSuccess) {
			fprintf(stderr, "gpusys-bench: floor copy: %s\n", cudaGetErrorString(cudaGetLastError()));
			return -1;
		}
		double g = gbs_since(size, t0);
		best = g > best ? g : best;
	}
	return best;
}

static int pread_all(int fd, uint8_t *dst, uint64_t n, uint64_t off)
{
	for (uint64_t at = 0; at < n;) {
		ssize_t r = pread(fd, dst + at, n - at, (off_t)(off + at));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		at += (uint64_t)r;
	}
	return 0;
}

struct pread_part {
	int fd;
	uint8_t *dst;
	uint64_t off, len;
	int err;
};

static void *pread_part_main(void *arg)
{
	struct pread_part *p = (struct pread_part *)arg;
	p->err = pread_all(p->fd, p->dst + p->off, p->len, p->off);
	return NULL;
}

double floor_host_pread(const char *path, uint8_t *pinned, uint64_t size, int nthreads, int reps)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || nthreads < 1 || nthreads > 64)
		return -1;
	double best = -1;
	for (int r = 0; r < reps; r++) {
		pthread_t t[64];
		struct pread_part p[64];
		uint64_t t0 = bench_now_ns();
		for (int i = 0; i < nthreads; i++) {
			uint64_t lo, n;
			floor_share(size, (uint32_t)nthreads, (uint32_t)i, &lo, &n);
			p[i] = (struct pread_part){ fd, pinned, lo, n, 0 };
			pthread_create(&t[i], NULL, pread_part_main, &p[i]);
		}
		int err = 0;
		for (int i = 0; i < nthreads; i++) {
			pthread_join(t[i], NULL);
			err |= p[i].err;
		}
		double g = err ? -1 : gbs_since(size, t0);
		best = g > best ? g : best;
	}
	close(fd);
	return best;
}

struct pipe_thread {
	int fd;
	uint8_t *slot;        /* the block's two halves */
	struct pipe_ctl *ctl; /* the block's counters */
	uint64_t lo, n, half; /* the block's share of the file */
	uint32_t piece, pieces;
	int err;
};

/* This thread's piece of every half of its block, in turn. */
static void *pipe_thread_main(void *arg)
{
	struct pipe_thread *p = (struct pipe_thread *)arg;
	uint32_t r = 0;
	for (uint64_t done = 0; done < p->n; done += p->half, r++) {
		const uint64_t want = p->n - done < p->half ? p->n - done : p->half;
		const uint32_t h = r & 1u, k = r >> 1;
		const uint64_t pl = ((want + p->pieces - 1) / p->pieces + 4095) & ~4095ull;
		const uint64_t a = (uint64_t)p->piece * pl < want ? (uint64_t)p->piece * pl : want;
		const uint64_t e = a + pl < want ? a + pl : want;
		while (__atomic_load_n(&p->ctl->empty[h], __ATOMIC_ACQUIRE) < k)
			__builtin_ia32_pause();
		/* A failure still counts the piece (the block must not wait
		 * forever); the data check then fails. */
		if (e > a && pread_all(p->fd, p->slot + h * p->half + a, e - a, p->lo + done + a) < 0)
			p->err = EIO;
		__atomic_fetch_add(&p->ctl->full[h], 1u, __ATOMIC_RELEASE);
	}
	return NULL;
}

double floor_pipeline(const char *path, uint8_t *dst, const uint8_t *expect, uint64_t size, int blocks,
		      int nthreads, uint64_t half_bytes, int variant, int reps, double *ret_wait)
{
	if (blocks < 1 || nthreads < blocks || nthreads % blocks || nthreads > 64 || half_bytes % 4096)
		return -1;
	const uint32_t pieces = (uint32_t)(nthreads / blocks);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *slots = NULL;
	struct pipe_ctl *ctl = NULL;
	unsigned long long *d_times = NULL, *d_bad = NULL;
	double best = -1, best_wait = 0;
	if (fd < 0 || cudaMallocHost(&slots, (size_t)blocks * 2 * half_bytes) != cudaSuccess ||
	    cudaMallocHost(&ctl, (size_t)blocks * sizeof(*ctl)) != cudaSuccess ||
	    cudaMalloc(&d_times, (size_t)blocks * 2 * sizeof(unsigned long long)) != cudaSuccess ||
	    cudaMalloc(&d_bad, sizeof(unsigned long long)) != cudaSuccess) {
		fprintf(stderr, "gpusys-bench: floor pipeline: out of memory\n");
		goto out;
	}
	for (int r = 0; r < reps; r++) {
		pthread_t t[64];
		struct pipe_thread p[64];
		memset(ctl, 0, (size_t)blocks * sizeof(*ctl));
		cudaMemset(dst, 0, size);
		cudaDeviceSynchronize();
		uint64_t t0 = bench_now_ns();
		k_pipe<<<blocks, 1024>>>(dst, slots, ctl, size, half_bytes, pieces, variant, d_times);
		for (int i = 0; i < nthreads; i++) {
			uint32_t b = (uint32_t)i % (uint32_t)blocks;
			uint64_t lo, n;
			floor_share(size, (uint32_t)blocks, b, &lo, &n);
			p[i] = (struct pipe_thread){ fd, slots + (uint64_t)b * 2 * half_bytes, ctl + b, lo, n, half_bytes,
						     (uint32_t)i / (uint32_t)blocks, pieces, 0 };
			pthread_create(&t[i], NULL, pipe_thread_main, &p[i]);
		}
		int err = 0;
		for (int i = 0; i < nthreads; i++) {
			pthread_join(t[i], NULL);
			err |= p[i].err;
		}
		cudaError_t ce = cudaDeviceSynchronize();
		double g = gbs_since(size, t0);
		unsigned long long times[2 * 1024], bad = 0;
		cudaMemset(d_bad, 0, sizeof(bad));
		k_count_diff<<<264, 1024>>>(dst, expect, size, d_bad);
		cudaMemcpy(&bad, d_bad, sizeof(bad), cudaMemcpyDeviceToHost);
		cudaMemcpy(times, d_times, (size_t)blocks * 2 * sizeof(times[0]), cudaMemcpyDeviceToHost);
		if (ce != cudaSuccess || err || bad) {
			fprintf(stderr, "gpusys-bench: floor pipeline (%d blocks, %d threads, %s): %s\n", blocks,
				nthreads, floor_variants[variant].name,
				ce != cudaSuccess ? cudaGetErrorString(ce) : err ? "pread failed" : "data differs");
			best = -1;
			goto out;
		}
		if (g > best) {
			double w = 0;
			for (int b = 0; b < blocks; b++)
				w += times[2 * b + 1] ? (double)times[2 * b] / (double)times[2 * b + 1] : 0;
			best = g;
			best_wait = w / blocks;
		}
	}
	if (ret_wait)
		*ret_wait = best_wait;
out:
	if (fd >= 0)
		close(fd);
	cudaFreeHost(slots);
	cudaFreeHost(ctl);
	cudaFree(d_times);
	cudaFree(d_bad);
	return best;
}
