/* SPDX-License-Identifier: MIT */
/*
 * The heap from the host-lane emulator (include/gpusys/emulator.h): the
 * same requests and the same device cache a warp uses (device/alloc_client.h),
 * from a CPU thread acting as one warp, over a heap of host memory that this
 * library reserves (PROT_NONE) and opens up (mprotect) from a mapping
 * thread as the daemon grants it, exactly as it maps device memory for a
 * GPU client. Per-lane arguments are arrays of GPUSYS_WARP_LANES; only
 * lanes in mask are read or written. err[l] gets 0 or -errno (alloc.h).
 */
#ifndef GPUSYS_ALLOC_EMU_H
#define GPUSYS_ALLOC_EMU_H

#include <stdint.h>

#include "gpusys/alloc.h"
#include "gpusys/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpusys_emu_heap;

/* reserve: bytes of address space (0: 1 GiB); groups: how many "SMs" have
 * their own current slabs (0: 64; a warp uses group gpusys_emu_set_warp() %
 * groups). Starts the mapping thread. */
int gpusys_emu_heap_open(uint64_t reserve, uint32_t groups, struct gpusys_emu_heap **ret);
/* Stops the mapping thread and unmaps everything. */
void gpusys_emu_heap_close(struct gpusys_emu_heap *h);
const gpusys_heap_dev_t *gpusys_emu_heap_dev(const struct gpusys_emu_heap *h);
/* Bytes the mapping thread has opened up, how many times it did, and how
 * many times it closed the top again for a shrink of gpusysd's. */
uint64_t gpusys_emu_heap_mapped(const struct gpusys_emu_heap *h);
uint32_t gpusys_emu_heap_maps(const struct gpusys_emu_heap *h);
uint32_t gpusys_emu_heap_unmaps(const struct gpusys_emu_heap *h);
/* gpusys_heap_release for this heap: close what gpusysd's last shrink
 * took (unless the heap grew again since); the bytes closed. */
int64_t gpusys_emu_heap_release(struct gpusys_emu_heap *h);

void gpusys_emu_malloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		       const uint64_t size[GPUSYS_WARP_LANES], void *ret[GPUSYS_WARP_LANES],
		       int32_t err[GPUSYS_WARP_LANES]);
void gpusys_emu_aligned_alloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
			      const uint64_t align[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
			      void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES]);
void gpusys_emu_calloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		       const uint64_t n[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
		       void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES]);
void gpusys_emu_realloc(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
			void *const ptr[GPUSYS_WARP_LANES], const uint64_t size[GPUSYS_WARP_LANES],
			void *ret[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES]);
void gpusys_emu_free(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
		     void *const ptr[GPUSYS_WARP_LANES], int32_t err[GPUSYS_WARP_LANES]);
/* gpusys_heap_trim from an emulated warp: chunks given back, or -errno. */
int gpusys_emu_heap_trim(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp);
/* The device's own view of its pool (struct gpusys_alloc_pool: chunks held,
 * free slabs, bad frees it refused). */
const struct gpusys_alloc_pool *gpusys_emu_heap_pool(const struct gpusys_emu_heap *h);
/* The daemon's figures for this client's heap and all heaps. */
int gpusys_emu_alloc_stat(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, struct gpusys_alloc_stat *st);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_ALLOC_EMU_H */
