/* SPDX-License-Identifier: MIT */
/*
 * diverge_gpu: does the allocator's warp pattern survive lane groups of one
 * warp running it at once? (issue 29: test_gpu_alloc's random kernel
 * faults only when lanes of a warp make different calls at the same time,
 * and only in code ptxas optimised; bench/RESULTS.md, "The allocator's
 * fault, narrowed".) No daemon, no allocator: the pattern alone.
 *
 * Each thread loops; each iteration it takes one of three branches at
 * random, so a warp's lanes split into groups that run at once. Every
 * branch calls an out-of-line function (as gpusys_malloc, gpusys_realloc
 * are) that does what a slab claim does:
 *   mask = __activemask(); the lowest lane (the leader) takes a spin lock
 *   (device/lane.h's, as the allocator's locks are), reads a counter with a
 *   relaxed load, adds the group's size with a relaxed store, releases; the
 *   start it read is shuffled to the group, and each lane takes start + its
 *   rank among the group.
 * If the lock and the shuffles hold, every number from 0 to the total is
 * taken exactly once and the counter ends at the total; the program checks
 * both. Modes (argv[1]):
 *   lock     the above
 *   atomic   no lock: the leader reserves with one atomic add
 *   wide     the lock, and the leader's critical section longer (a second
 *            relaxed counter, per group class, as the allocator keeps
 *            lists per SM and class)
 *   trylock  the lock without a spin inside the leader's branch: the
 *            leader tries once, the group learns by a shuffle whether it
 *            got it, and the whole group loops until it has. No lane then
 *            waits at the branch's reconvergence for a leader that is
 *            waiting for a sibling group of its own warp (the suspect:
 *            test_gpu_alloc with a per-warp spin lock hung).
 *
 * Build (the device scripts do): nvcc -O3 -arch=sm_90 -Iinclude -Idevice
 *   bench/diverge_gpu.cu -o diverge_gpu; add -Xptxas -O0 for the variant
 *   that the allocator's test passed with.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "lane.h"

#define CK(x)                                                                                   \
	do {                                                                                    \
		cudaError_t e_ = (x);                                                           \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "diverge_gpu: %s: %s\n", #x, cudaGetErrorString(e_));   \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

enum { MODE_LOCK, MODE_ATOMIC, MODE_WIDE, MODE_TRYLOCK };

struct shared {
	uint32_t lock;
	uint32_t pad;
	unsigned long long next;      /* the counter the leaders advance */
	unsigned long long per[3];    /* MODE_WIDE: one more counter per branch */
	unsigned long long bad_lanes; /* a lane whose number was out of range */
};

static __device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long *p)
{
	unsigned long long v;
	asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ void st_relaxed(unsigned long long *p, unsigned long long v)
{
	asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* One group's claim: the numbers [start, start + group size) are its own. */
static __device__ __forceinline__ void claim(struct shared *s, uint32_t *taken, unsigned long long limit, int mode,
					     int branch)
{
	unsigned mask = __activemask();
	unsigned lane = gpusys_lane_id();
	unsigned ld = (unsigned)__ffs(mask) - 1u;
	unsigned n = (unsigned)__popc(mask);
	unsigned long long start = 0;
	if (mode == MODE_TRYLOCK) {
		for (;;) {
			unsigned got = 0;
			if (lane == ld && gpusys_lock_try(&s->lock)) {
				start = ld_relaxed(&s->next);
				st_relaxed(&s->next, start + n);
				gpusys_lock_release(&s->lock);
				got = 1;
			}
			if (__shfl_sync(mask, got, ld))
				break;
			__nanosleep(100);
		}
	} else if (lane == ld) {
		if (mode == MODE_ATOMIC) {
			start = atomicAdd(&s->next, (unsigned long long)n);
		} else {
			while (!gpusys_lock_try(&s->lock))
				;
			start = ld_relaxed(&s->next);
			st_relaxed(&s->next, start + n);
			if (mode == MODE_WIDE)
				st_relaxed(&s->per[branch], ld_relaxed(&s->per[branch]) + n);
			gpusys_lock_release(&s->lock);
		}
	}
	start = __shfl_sync(mask, start, ld);
	unsigned long long mine = start + (unsigned)__popc(mask & ((1u << lane) - 1u));
	if (mine < limit)
		atomicAdd(&taken[mine], 1u);
	else
		atomicAdd(&s->bad_lanes, 1ull);
}

/* Three call sites of three functions, as a kernel's malloc, realloc and
 * free branches are. */
static __device__ __noinline__ void op0(struct shared *s, uint32_t *t, unsigned long long lim, int mode)
{
	claim(s, t, lim, mode, 0);
}
static __device__ __noinline__ void op1(struct shared *s, uint32_t *t, unsigned long long lim, int mode)
{
	claim(s, t, lim, mode, 1);
}
static __device__ __noinline__ void op2(struct shared *s, uint32_t *t, unsigned long long lim, int mode)
{
	claim(s, t, lim, mode, 2);
}

static __global__ void k_diverge(struct shared *s, uint32_t *taken, unsigned long long limit, int iters, int mode)
{
	uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	for (int it = 0; it < iters; it++) {
		uint64_t r = mix((uint64_t)tid << 32 | (uint64_t)it);
		/* uneven work first, so the groups drift apart in time */
		for (unsigned k = (unsigned)(r >> 40) % 64; k; k--)
			r = mix(r);
		switch (r % 3) {
		case 0:
			op0(s, taken, limit, mode);
			break;
		case 1:
			op1(s, taken, limit, mode);
			break;
		default:
			op2(s, taken, limit, mode);
			break;
		}
	}
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "lock";
	int mode = !strcmp(m, "atomic")	 ? MODE_ATOMIC
		   : !strcmp(m, "wide")	 ? MODE_WIDE
		   : !strcmp(m, "trylock") ? MODE_TRYLOCK
					   : MODE_LOCK;
	int blocks_per_sm = argc > 2 ? atoi(argv[2]) : 1, threads = argc > 3 ? atoi(argv[3]) : 32;
	int iters = argc > 4 ? atoi(argv[4]) : 2000;
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int blocks = prop.multiProcessorCount * blocks_per_sm;
	unsigned long long total = (unsigned long long)blocks * threads * iters;
	struct shared *s;
	uint32_t *taken;
	CK(cudaMalloc(&s, sizeof(*s)));
	CK(cudaMemset(s, 0, sizeof(*s)));
	CK(cudaMalloc(&taken, total * sizeof(uint32_t)));
	CK(cudaMemset(taken, 0, total * sizeof(uint32_t)));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventRecord(a));
	k_diverge<<<blocks, threads>>>(s, taken, total, iters, mode);
	CK(cudaEventRecord(b));
	cudaError_t e = cudaDeviceSynchronize();
	if (e != cudaSuccess) {
		printf("diverge %s, %d x %d threads, %d iterations: kernel failed: %s\n", m, blocks, threads, iters,
		       cudaGetErrorString(e));
		return 1;
	}
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, a, b));
	struct shared h;
	CK(cudaMemcpy(&h, s, sizeof(h), cudaMemcpyDeviceToHost));
	uint32_t *t = (uint32_t *)malloc(total * sizeof(uint32_t));
	CK(cudaMemcpy(t, taken, total * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	unsigned long long never = 0, twice = 0;
	for (unsigned long long i = 0; i < total; i++) {
		never += t[i] == 0;
		twice += t[i] > 1;
	}
	int ok = h.next == total && !never && !twice && !h.bad_lanes &&
		 (mode != MODE_WIDE || h.per[0] + h.per[1] + h.per[2] == total);
	printf("diverge %s, %d x %d threads, %d iterations, %.1f ms: counter %llu of %llu, numbers never taken %llu, "
	       "taken twice or more %llu, out of range %llu: %s\n",
	       m, blocks, threads, iters, ms, h.next, total, never, twice, h.bad_lanes, ok ? "ok" : "WRONG");
	free(t);
	return ok ? 0 : 1;
}
