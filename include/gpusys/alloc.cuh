/* SPDX-License-Identifier: MIT */
/*
 * Device memory from a heap that grows while kernels run (the alloc
 * service; host side include/gpusys/heap.h, promises docs/ALLOC.md). Pass
 * gpusys_heap_device(heap) to the kernel by value.
 *
 * Calls are warp-aggregated: the lanes that reach one together share the
 * work. Small blocks (up to 64 KiB) are malloc'd and freed on the device,
 * from slabs in the heap, without a request; large blocks are one request
 * per warp to gpusysd, which checks their frees against its own metadata.
 *
 *   gpusys_malloc          NULL on error: gpusys_alloc_errno() says why
 *                          (ENOMEM: the client's alloc_limit_bytes is
 *                          reached; ETIMEDOUT: the mapping thread never
 *                          mapped; ESHUTDOWN: the daemon has gone)
 *   gpusys_calloc          zeroed
 *   gpusys_realloc         NULL: malloc; size 0: free, NULL back; on error
 *                          NULL and the old block untouched
 *   gpusys_aligned_alloc   a power of two up to 2 MiB
 *   gpusys_free            0, or -EFAULT (not in the heap), -EINVAL (into
 *                          the middle of a block), -ENOENT (not allocated:
 *                          a double free): refused, nothing changes, and
 *                          counted (gpusysctl status). NULL is a no-op.
 *   gpusys_heap_trim       empty slabs back to the pool, chunks empty for
 *                          the daemon's alloc_trim_delay_ms back to gpusysd
 *
 * Blocks are 16-byte aligned (small ones to their size class), device
 * memory usable by every thread of the client's kernels until freed or
 * until the heap is closed.
 */
#ifndef GPUSYS_ALLOC_CUH
#define GPUSYS_ALLOC_CUH

#include <stddef.h>
#include <stdint.h>

#include "gpusys/heap.h"
#include "gpusys/device/alloc_client.h"

/* Where this thread's last error goes (its warp slot, its lane). */
static __device__ __forceinline__ int32_t *gpusys_alloc_err_slot(const gpusys_heap_t &h)
{
	return &h.heap.last_err[(gpusys_port_hint() % h.heap.err_slots) * GPUSYS_WARP_LANES + gpusys_lane_id()];
}

/* The errno of this thread's last heap call (0: it succeeded). Valid until
 * its next heap call; kept per (warp slot, lane). */
static __device__ __forceinline__ int gpusys_alloc_errno(const gpusys_heap_t &h)
{
	return -*gpusys_alloc_err_slot(h);
}

/* One allocator call of a warp at a time. Lanes of one warp in different
 * calls at once (a malloc beside a free, each group with its own lane mask)
 * made test_gpu_alloc's random kernel fault in ptxas-optimised code on the
 * H200 (Xid 31), while -G and -Xptxas -O0 builds, uniform warps, calls kept
 * apart by __syncwarp, and the emulator's split warps all passed; with this
 * entry it passes (bench/RESULTS.md, "The allocator's fault, narrowed" and
 * "Fifth session"). Which construct the optimised code runs wrongly with
 * two groups of a warp inside is not known. The lanes that arrive together
 * take their warp slot's lock: the leader tries once and the whole group
 * loops, so no lane spins inside a branch for a sibling group of its own
 * warp (bench/diverge_gpu.cu: such spins do resolve, but at about 18 ms a
 * round). A call of the whole warp has no sibling group and takes no lock.
 * Returns the lock's index for the leave, or ~0u for none. Built with
 * GPUSYS_ALLOC_GROUPS_AT_ONCE defined it takes none at all: that build
 * reproduces the fault (bench/device-alloc-variants.sh), for whoever looks
 * for its cause. */
#define GPUSYS_ALLOC_WHOLE_WARP 0xffffffffull
static __device__ __forceinline__ uint32_t gpusys_alloc_warp_enter(const gpusys_heap_t &h, uint64_t mask)
{
#if defined(GPUSYS_ALLOC_GROUPS_AT_ONCE)
	(void)h;
	(void)mask;
	return ~0u;
#else
	if (mask == GPUSYS_ALLOC_WHOLE_WARP)
		return ~0u;
	uint32_t slot = gpusys_port_hint() % h.heap.err_slots;
	uint32_t ld = gpusys_lane_leader_of(mask);
	slot = __shfl_sync((unsigned)mask, slot, ld); /* %warpid is only a hint: the leader's */
	for (;;) {
		uint32_t got = 0;
		if (gpusys_lane_id() == ld)
			got = (uint32_t)gpusys_lock_try(&h.heap.warp_locks[slot]);
		if (__shfl_sync((unsigned)mask, got, ld))
			return slot;
		__nanosleep(64);
	}
#endif
}

static __device__ __forceinline__ void gpusys_alloc_warp_leave(const gpusys_heap_t &h, uint64_t mask, uint32_t slot)
{
	if (slot == ~0u)
		return;
	__syncwarp((unsigned)mask);
	if (gpusys_lane_id() == gpusys_lane_leader_of(mask))
		gpusys_lock_release(&h.heap.warp_locks[slot]);
}

/* malloc, calloc and realloc are functions of their own (__noinline__):
 * each holds the whole allocator path (the warp's claim, inlined, and the
 * slow path behind it: a slab to take, a chunk from gpusysd, trim).
 * Inlined into every kernel that calls them, ptxas spent minutes on a file
 * of a few such kernels (bench/alloc_gpu.cu: 5 minutes on a 2-core VM);
 * out of line there is one copy per file, and the kernels of the tests and
 * benchmarks need fewer registers, not more. gpusys_free is left to the
 * compiler: out of line as well, a kernel holding an array of pointers
 * across both calls (test_gpu_alloc's k_limit) spilled 16 KB. */
static __device__ __noinline__ void *gpusys_aligned_alloc(const gpusys_heap_t &h, size_t align, size_t size)
{
	uint64_t mask = (uint64_t)__activemask();
	uint64_t s[1] = { size }, a[1] = { align };
	void *r[1];
	int32_t e[1];
	uint32_t wl = gpusys_alloc_warp_enter(h, mask);
	gpusys_alloc_malloc_lanes(&h.dev, &h.heap, mask, s, a, r, e);
	gpusys_alloc_warp_leave(h, mask, wl);
	*gpusys_alloc_err_slot(h) = e[0];
	return r[0];
}

static __device__ __forceinline__ void *gpusys_malloc(const gpusys_heap_t &h, size_t size)
{
	return gpusys_aligned_alloc(h, 0, size);
}

static __device__ __noinline__ void *gpusys_calloc(const gpusys_heap_t &h, size_t n, size_t size)
{
	uint64_t mask = (uint64_t)__activemask();
	uint64_t nv[1] = { n }, s[1] = { size };
	void *r[1];
	int32_t e[1];
	uint32_t wl = gpusys_alloc_warp_enter(h, mask);
	gpusys_alloc_calloc_lanes(&h.dev, &h.heap, mask, nv, s, r, e);
	gpusys_alloc_warp_leave(h, mask, wl);
	*gpusys_alloc_err_slot(h) = e[0];
	return r[0];
}

static __device__ __noinline__ void *gpusys_realloc(const gpusys_heap_t &h, void *p, size_t size)
{
	uint64_t mask = (uint64_t)__activemask();
	void *pv[1] = { p }, *r[1];
	uint64_t s[1] = { size };
	int32_t e[1];
	uint32_t wl = gpusys_alloc_warp_enter(h, mask);
	gpusys_alloc_realloc_lanes(&h.dev, &h.heap, mask, pv, s, r, e);
	gpusys_alloc_warp_leave(h, mask, wl);
	*gpusys_alloc_err_slot(h) = e[0];
	return r[0];
}

#if defined(GPUSYS_ALLOC_FREE_NOINLINE) /* bench/device-alloc-variants.sh */
static __device__ __noinline__ int gpusys_free(const gpusys_heap_t &h, void *p)
#else
static __device__ int gpusys_free(const gpusys_heap_t &h, void *p)
#endif
{
	uint64_t mask = (uint64_t)__activemask();
	void *pv[1] = { p };
	int32_t e[1];
	uint32_t wl = gpusys_alloc_warp_enter(h, mask);
	gpusys_alloc_free_lanes(&h.dev, &h.heap, mask, pv, e);
	gpusys_alloc_warp_leave(h, mask, wl);
	*gpusys_alloc_err_slot(h) = e[0];
	return e[0];
}

/* Bytes of the heap the host's mapping thread last reported mapped: no
 * request. It grows with the heap and drops when gpusysd shrinks a heap
 * whose top was given back; while such a shrink waits for
 * gpusys_heap_release it counts only what the shrink keeps, so it can be
 * less than the host's gpusys_heap_mapped. */
static __device__ __forceinline__ uint64_t gpusys_heap_mapped_bytes(const gpusys_heap_t &h)
{
	return gpusys_alloc_word_bytes(gpusys_load_shared_u64(&h.heap.ctl->mapped));
}

/* Give back what is empty (also done whenever a free empties a slab): the
 * number of pool chunks given back to gpusysd, or -errno. */
static __device__ int gpusys_heap_trim(const gpusys_heap_t &h)
{
	uint64_t mask = (uint64_t)__activemask();
	uint32_t wl = gpusys_alloc_warp_enter(h, mask);
	int r = gpusys_alloc_trim_lanes(&h.dev, &h.heap, mask, GPUSYS_TRIM_NOW);
	gpusys_alloc_warp_leave(h, mask, wl);
	return r;
}

/* The daemon's figures for this client's heap (one lane asks). 0 or -errno. */
static __device__ int gpusys_alloc_stat(const gpusys_heap_t &h, struct gpusys_alloc_stat *st)
{
	return gpusys_alloc_stat_lanes(&h.dev, &h.heap, (uint64_t)__activemask(), st);
}

#endif /* GPUSYS_ALLOC_CUH */
