/* SPDX-License-Identifier: MIT */
/*
 * The heap for emulated warps (include/gpusys/emulator/alloc.h): host memory
 * reserved once, opened up by a mapping thread when device code (here: an
 * emulated warp) asks for what the daemon granted. The device side is
 * device/alloc_client.h compiled for the CPU, so CI runs the same slabs and
 * requests a GPU does.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "gpusys/emulator/alloc.h"
#include "../device/alloc_client.h"
#include "../heap/heap_map.h"

struct gpusys_emu_heap {
	gpusys_heap_dev_t hd;
	struct gpusys_alloc_ctl ctl;
	pthread_t thread;
	atomic_bool stop;
	struct heap_map hm; /* what is open, and the shrinks (heap_map.h) */
	atomic_uint maps, unmaps;
};

/* heap_map's operations: open up with mprotect; a shrink closes the top
 * again (PROT_NONE, its pages dropped), as the CUDA heap unmaps it, so a
 * block used past a shrink faults here too. */
static int op_map(void *arg, uint64_t from, uint64_t to)
{
	struct gpusys_emu_heap *h = arg;
	if (mprotect(h->hd.base + from, to - from, PROT_READ | PROT_WRITE) < 0)
		return -errno;
	atomic_fetch_add_explicit(&h->maps, 1, memory_order_relaxed);
	return 0;
}

static uint64_t op_unmap_above(void *arg, uint64_t keep, uint64_t mapped)
{
	struct gpusys_emu_heap *h = arg;
	mprotect(h->hd.base + keep, mapped - keep, PROT_NONE);
	madvise(h->hd.base + keep, mapped - keep, MADV_DONTNEED);
	atomic_fetch_add_explicit(&h->unmaps, 1, memory_order_relaxed);
	return keep;
}

static const struct heap_map_ops emu_ops = { op_map, op_unmap_above };

/* Poll want; open up what is granted, take shrinks (heap_map.h). 100 us
 * between looks: a warp that waits for memory waits at most that long for
 * the thread to notice (the daemon grants ahead, so warps rarely wait). */
static void *map_thread(void *arg)
{
	struct gpusys_emu_heap *h = arg;
	while (!atomic_load_explicit(&h->stop, memory_order_acquire)) {
		uint64_t want = __atomic_load_n(&h->ctl.want, __ATOMIC_ACQUIRE), word = 0;
		int r = __atomic_load_n(&h->ctl.failed, __ATOMIC_RELAXED) ? 0 : heap_map_step(&h->hm, want, &word);
		if (r < 0)
			__atomic_store_n(&h->ctl.failed, (uint64_t)(int64_t)r, __ATOMIC_RELEASE);
		if (r) {
			__atomic_store_n(&h->ctl.mapped, word, __ATOMIC_RELEASE);
			continue;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	return NULL;
}

/* The pool's private memory (alloc.h: the struct, slab_ctl[], chunk_of[], cur[]), and
 * its pointers in hd. */
static int pool_open(gpusys_heap_dev_t *hd, uint32_t groups)
{
	uint64_t bytes = gpusys_alloc_pool_bytes(hd->reserve, groups);
	uint8_t *m = calloc(1, bytes);
	if (!m)
		return -ENOMEM;
	hd->pool = (struct gpusys_alloc_pool *)m;
	hd->slab_ctl = (unsigned long long *)(m + sizeof(struct gpusys_alloc_pool));
	hd->chunk_of = (uint32_t *)(hd->slab_ctl + hd->reserve / GPUSYS_ALLOC_SLAB_BYTES);
	hd->cur = hd->chunk_of + hd->reserve / GPUSYS_ALLOC_CHUNK_BYTES;
	hd->pool->groups = groups;
	hd->pool->trim_delay_ns = GPUSYS_ALLOC_TRIM_DELAY_NS;
	return 0;
}

int gpusys_emu_heap_open(uint64_t reserve, uint32_t groups, struct gpusys_emu_heap **ret)
{
	if (!reserve)
		reserve = UINT64_C(1) << 30;
	if (!groups)
		groups = 64;
	reserve = gpusys_align_up(reserve, GPUSYS_ALLOC_MAP_ALIGN);
	if (reserve > GPUSYS_ALLOC_MAX_RESERVE)
		return -EINVAL;
	struct gpusys_emu_heap *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->hd.reserve = reserve;
	int pr = pool_open(&h->hd, groups);
	/* the lanes' last errors, then a lock word per warp slot */
	h->hd.last_err = calloc((size_t)groups * (GPUSYS_WARP_LANES + 1), sizeof(int32_t));
	void *base = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (pr < 0 || !h->hd.last_err || base == MAP_FAILED) {
		int e = base == MAP_FAILED ? -errno : -ENOMEM;
		if (base != MAP_FAILED)
			munmap(base, reserve);
		free(h->hd.pool);
		free(h->hd.last_err);
		free(h);
		return e;
	}
	h->hd.base = base;
	h->hd.ctl = &h->ctl;
	h->hd.err_slots = groups;
	h->hd.warp_locks = (uint32_t *)(h->hd.last_err + (size_t)groups * GPUSYS_WARP_LANES);
	const char *um = getenv("GPUSYS_HEAP_UNMAP");
	heap_map_init(&h->hm, &emu_ops, h, reserve, GPUSYS_ALLOC_MAP_ALIGN, 0, um && !strcmp(um, "1"));
	int r = pthread_create(&h->thread, NULL, map_thread, h);
	if (r) {
		heap_map_fini(&h->hm);
		munmap(base, reserve);
		free(h->hd.pool);
		free(h->hd.last_err);
		free(h);
		return -r;
	}
	*ret = h;
	return 0;
}

void gpusys_emu_heap_close(struct gpusys_emu_heap *h)
{
	if (!h)
		return;
	atomic_store_explicit(&h->stop, true, memory_order_release);
	pthread_join(h->thread, NULL);
	heap_map_fini(&h->hm);
	munmap(h->hd.base, h->hd.reserve);
	free(h->hd.pool);
	free(h->hd.last_err);
	free(h);
}

const gpusys_heap_dev_t *gpusys_emu_heap_dev(const struct gpusys_emu_heap *h)
{
	return &h->hd;
}

uint64_t gpusys_emu_heap_mapped(const struct gpusys_emu_heap *h)
{
	return heap_map_mapped(&((struct gpusys_emu_heap *)h)->hm);
}

int64_t gpusys_emu_heap_release(struct gpusys_emu_heap *h)
{
	uint64_t word = 0, bytes = heap_map_release(&h->hm, &word);
	__atomic_store_n(&h->ctl.mapped, word, __ATOMIC_RELEASE);
	return (int64_t)bytes;
}

uint32_t gpusys_emu_heap_unmaps(const struct gpusys_emu_heap *h)
{
	return atomic_load_explicit(&((struct gpusys_emu_heap *)h)->unmaps, memory_order_relaxed);
}

uint32_t gpusys_emu_heap_maps(const struct gpusys_emu_heap *h)
{
	return atomic_load_explicit(&h->maps, memory_order_relaxed);
}

static int bad_mask(uint64_t mask, int32_t err[GPUSYS_WARP_LANES])
{
	if (mask && !(mask >> GPUSYS_WARP_LANES))
		return 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		err[l] = -EINVAL;
	return 1;
}

void gpusys_emu_malloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		       const uint64_t size[GPUSYS_WARP_LANES], void *ret[GPUSYS_WARP_LANES],
		       int32_t err[GPUSYS_WARP_LANES])
{
	static const uint64_t zero[GPUSYS_WARP_LANES];
	if (!bad_mask(mask, err))
		gpusys_alloc_malloc_lanes(dev, hp, mask, size, zero, ret, err);
}

void gpusys_emu_aligned_alloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
			      const uint64_t align[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
			      void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES])
{
	if (!bad_mask(mask, err))
		gpusys_alloc_malloc_lanes(dev, hp, mask, size, align, ret, err);
}

void gpusys_emu_calloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		       const uint64_t n[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
		       void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES])
{
	if (!bad_mask(mask, err))
		gpusys_alloc_calloc_lanes(dev, hp, mask, n, size, ret, err);
}

void gpusys_emu_realloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
			void *const ptr[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
			void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES])
{
	if (!bad_mask(mask, err))
		gpusys_alloc_realloc_lanes(dev, hp, mask, ptr, size, ret, err);
}

void gpusys_emu_free(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		     void *const ptr[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES])
{
	if (!bad_mask(mask, err))
		gpusys_alloc_free_lanes(dev, hp, mask, ptr, err);
}

int gpusys_emu_alloc_stat(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, struct gpusys_alloc_stat *st)
{
	return gpusys_alloc_stat_lanes(dev, hp, 1, st);
}

int gpusys_emu_heap_trim(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp)
{
	return gpusys_alloc_trim_lanes(dev, hp, 1, GPUSYS_TRIM_NOW);
}

const struct gpusys_alloc_pool *gpusys_emu_heap_pool(const struct gpusys_emu_heap *h)
{
	return h->hd.pool;
}
