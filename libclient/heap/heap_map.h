/* SPDX-License-Identifier: MIT */
/*
 * What a heap's mapping thread does with the device's `want` word, written
 * once for the CUDA heap (alloc_cuda.c) and the emulator's (alloc_emu.c),
 * which differ only in how they map and unmap.
 *
 * Growth: want grows within an epoch; the thread maps up to it and
 * publishes what it mapped. A shrink (a want of a newer epoch,
 * include/gpusys/alloc.h "Heap words"): gpusysd has lowered its grant to
 * want's bytes and believes no mapped figure of an older epoch. Then:
 *   - unmap_now (GPUSYS_HEAP_UNMAP=1): unmap what lies above, publish in
 *     the new epoch;
 *   - otherwise the shrink waits: the mapping is published in the new
 *     epoch only as far as the new grant, so gpusysd hands out nothing
 *     above it; heap_map_release (the program says no kernel uses the
 *     heap) unmaps the rest then; a want that grows past it first (a
 *     kernel needs the memory again) cancels it, and the whole mapping is
 *     published, nothing unmapped.
 * Unmapping is never done behind a running kernel unless the program said
 * so: cuMemUnmap waits for running kernels, and a mapping thread inside it
 * cannot grow the heap for them (docs/ALLOC.md, "Trim").
 */
#ifndef GPUSYS_HEAP_MAP_H
#define GPUSYS_HEAP_MAP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct heap_map_ops {
	/* Map [from, to): 0 or -errno. */
	int (*map)(void *arg, uint64_t from, uint64_t to);
	/* Unmap what lies at or above keep; return where the mapping now
	 * ends (at least keep, or the end of a mapping step that straddles
	 * it). */
	uint64_t (*unmap_above)(void *arg, uint64_t keep, uint64_t mapped);
};

struct heap_map {
	const struct heap_map_ops *ops;
	void *arg;
	uint64_t reserve, granularity;
	bool unmap_now;
	pthread_mutex_t lock;
	uint64_t mapped;        /* bytes mapped now (written under lock, atomically: read without) */
	uint32_t epoch;         /* of the last figure published */
	bool pending;           /* a shrink (of epoch) waits for heap_map_release */
	uint64_t pending_keep;
};

void heap_map_init(struct heap_map *m, const struct heap_map_ops *ops, void *arg, uint64_t reserve,
		   uint64_t granularity, uint64_t mapped, bool unmap_now);
void heap_map_fini(struct heap_map *m);

/* One look at the device's want word. Returns 1 when ctl->mapped should be
 * published again, as *ret_word; 0 when nothing changed; -errno when a
 * mapping failed (publish it as ctl->failed, and *ret_word too: a shrink
 * cancelled before the failure is reported in its epoch). */
int heap_map_step(struct heap_map *m, uint64_t want_word, uint64_t *ret_word);

/* Apply a waiting shrink: unmap what it took. The bytes unmapped (0 when
 * no shrink waits), and in *ret_word the figure to publish (unchanged when
 * nothing was done). Only while no kernel uses the heap. */
uint64_t heap_map_release(struct heap_map *m, uint64_t *ret_word);

/* Bytes mapped now (a waiting shrink's part included, though gpusysd no
 * longer hands it out). */
uint64_t heap_map_mapped(struct heap_map *m);

#endif
