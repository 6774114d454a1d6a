/* SPDX-License-Identifier: MIT */
/*
 * One client's heap as the daemon sees it: metadata only, in the daemon's
 * memory. Blocks are named by their offset in the client's heap; the heap's
 * bytes are never read or written here, so nothing a client writes into its
 * heap can reach this state.
 *
 * Geometry (include/gpusys/alloc.h): pages of GPUSYS_ALLOC_PAGE bytes. A
 * large block is a run of whole pages; small blocks (8 classes, 16 B to
 * 2 KiB) are slots of slabs of GPUSYS_ALLOC_SLAB_BYTES. Free page runs are
 * coalesced at once and kept in power-of-two bins. A page map (one pointer
 * per mapped page) finds the span of any offset, which is how frees of
 * foreign, interior and unallocated pointers are told apart and refused.
 *
 * Growth: the daemon grants bytes (grant <= limit), the client maps them
 * and reports how much it mapped; blocks come only from
 * min(mapped, grant). When free granted room runs low the grant grows ahead
 * of demand, doubling, by at least one chunk. Shrink: when the top half of
 * the mapping is free again the grant drops below it (alloc_heap_shrink).
 *
 * Not thread-safe: the service holds a lock around each call.
 */
#ifndef GPUSYSD_ALLOC_HEAP_H
#define GPUSYSD_ALLOC_HEAP_H

#include <stdint.h>

#include "gpusys/alloc.h"

struct alloc_heap;

/* limit and chunk are rounded to GPUSYS_ALLOC_MAP_ALIGN; the first grant is
 * one chunk. reserve bounds everything (the client's virtual range). */
int alloc_heap_create(uint64_t reserve, uint64_t limit, uint64_t chunk, struct alloc_heap **ret);
void alloc_heap_destroy(struct alloc_heap *h);

/* The client says it has mapped [0, bytes) (a heap word: bytes and the
 * shrink epoch they were read in, include/gpusys/alloc.h). Only the granted
 * part is used; a smaller figure than before, or one of another epoch, is
 * ignored (within an epoch mappings only grow). */
void alloc_heap_set_mapped(struct alloc_heap *h, uint64_t word);

/* A block of size bytes aligned to align (0 or a power of two up to
 * GPUSYS_ALLOC_MAX_ALIGN): 0 and *ret_off, -EINVAL, -EAGAIN (it will fit once
 * the client maps what is granted: the grant may just have grown), -ENOMEM
 * (the limit is reached). */
int alloc_heap_malloc(struct alloc_heap *h, uint64_t size, uint64_t align, uint64_t *ret_off);

/* Up to n more free slots of small class cls, marked live, from memory
 * already mapped (never grows, never waits). Returns how many. */
uint32_t alloc_heap_refill(struct alloc_heap *h, uint32_t cls, uint32_t n, uint64_t *offs);

/* Free the block at off: 0, -EFAULT (outside the heap), -EINVAL (inside a
 * live block, not its start), -ENOENT (not allocated). Refusals counted. */
int alloc_heap_free(struct alloc_heap *h, uint64_t off);

/* The usable bytes of the live block at off (same errors as free, counted
 * the same way). */
int alloc_heap_usable(struct alloc_heap *h, uint64_t off, uint64_t *ret_size);

/* The grant as a heap word: bytes and the current epoch. */
uint64_t alloc_heap_grant(const struct alloc_heap *h);

/* Give the top of the mapping back when it is a free run of at least half
 * of it (never below the first grant): the grant and the usable mapping
 * drop to where the run starts (2 MiB aligned) and a new epoch begins; the
 * client unmaps what lies above and reports in the new epoch. 1 when it
 * shrank. */
int alloc_heap_shrink(struct alloc_heap *h);

/* Shrinks so far, and the bytes they took off the mapping. */
uint64_t alloc_heap_shrinks(const struct alloc_heap *h, uint64_t *ret_bytes);

/* A malloc refused from outside the heap (the client's memory budget):
 * counted with those refused at the limit. */
void alloc_heap_count_enomem(struct alloc_heap *h);

/* Counters and figures (the per-heap part of struct gpusys_alloc_stat). */
void alloc_heap_stat(const struct alloc_heap *h, struct gpusys_alloc_stat *st);

/* Walk every live block (tests: no two overlap). */
void alloc_heap_foreach_live(const struct alloc_heap *h, void (*fn)(uint64_t off, uint64_t size, void *arg),
			     void *arg);

#endif
