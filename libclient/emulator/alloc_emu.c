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

struct gpusys_emu_heap {
	gpusys_heap_dev_t hd;
	struct gpusys_alloc_ctl ctl;
	pthread_t thread;
	atomic_bool stop;
	atomic_uint maps, unmaps;
	uint64_t mapped; /* the thread's own figure */
	uint32_t epoch;  /* the shrink epoch of that figure */
};

/* Poll want; open up [mapped, want) when it grows. 100 us between looks: a
 * warp that waits for memory waits at most that long for the thread to
 * notice (the daemon grants ahead, so warps rarely wait at all). A want of
 * a newer epoch is a shrink (include/gpusys/alloc.h, "Heap words"): what
 * lies above its bytes is closed again (PROT_NONE, its pages dropped), as
 * the CUDA heap unmaps it with GPUSYS_HEAP_UNMAP=1 (here always: the strict
 * case, where a block handed out past a shrink faults). */
static void *map_thread(void *arg)
{
	struct gpusys_emu_heap *h = arg;
	while (!atomic_load_explicit(&h->stop, memory_order_acquire)) {
		uint64_t word = __atomic_load_n(&h->ctl.want, __ATOMIC_ACQUIRE);
		uint32_t epoch = gpusys_alloc_word_epoch(word);
		uint64_t want = gpusys_alloc_word_bytes(word);
		if (want > h->hd.reserve)
			want = h->hd.reserve;
		want -= want % GPUSYS_ALLOC_MAP_ALIGN;
		if (epoch > h->epoch) {
			if (want < h->mapped) {
				mprotect(h->hd.base + want, h->mapped - want, PROT_NONE);
				madvise(h->hd.base + want, h->mapped - want, MADV_DONTNEED);
				h->mapped = want;
				atomic_fetch_add_explicit(&h->unmaps, 1, memory_order_relaxed);
			}
			h->epoch = epoch;
			__atomic_store_n(&h->ctl.mapped, gpusys_alloc_word(h->epoch, h->mapped), __ATOMIC_RELEASE);
			continue;
		}
		if (epoch == h->epoch && want > h->mapped) {
			if (mprotect(h->hd.base + h->mapped, want - h->mapped, PROT_READ | PROT_WRITE) < 0) {
				__atomic_store_n(&h->ctl.failed, (uint64_t)(int64_t)-errno, __ATOMIC_RELEASE);
			} else {
				h->mapped = want;
				atomic_fetch_add_explicit(&h->maps, 1, memory_order_relaxed);
				__atomic_store_n(&h->ctl.mapped, gpusys_alloc_word(h->epoch, want), __ATOMIC_RELEASE);
			}
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
	int r = pthread_create(&h->thread, NULL, map_thread, h);
	if (r) {
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
	return gpusys_alloc_word_bytes(__atomic_load_n(&h->ctl.mapped, __ATOMIC_ACQUIRE));
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
