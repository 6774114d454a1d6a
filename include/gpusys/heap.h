/* SPDX-License-Identifier: MIT */
/*
 * The growable device heap of a CUDA client (host side; the kernel side is
 * include/gpusys/alloc.cuh, the promises are in docs/ALLOC.md).
 *
 *     struct gpusys_heap *heap;
 *     struct gpusys_heap_options ho = { .cuda_device = 0 };
 *     gpusys_heap_open(g, &ho, &heap);          // after gpusys_attach
 *     kernel<<<...>>>(gpusys_heap_device(heap)); // for each launch
 *     gpusys_synchronize(g, NULL, -1);
 *     gpusys_heap_close(heap);                  // kernels done; before gpusys_detach
 *
 * gpusys_heap_open reserves the heap's virtual range on the client's GPU
 * and starts a mapping thread: when device code asks for what gpusysd
 * granted, the thread creates device memory (cuMemCreate) and maps it at
 * the end of what is mapped (cuMemMap, cuMemSetAccess) while kernels keep
 * running. The allocator's metadata lives in gpusysd.
 */
#ifndef GPUSYS_HEAP_H
#define GPUSYS_HEAP_H

#include <stdint.h>

#include "gpusys/alloc.h"
#include "gpusys/dev.h"
#include "gpusys/attach.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What kernels take by value: the channel and the heap. */
typedef struct gpusys_heap_handle {
	gpusys_dev_t dev;
	gpusys_heap_dev_t heap;
} gpusys_heap_t;

struct gpusys_heap;

struct gpusys_heap_options {
	int cuda_device;        /* the device ordinal given to gpusys_attach */
	uint64_t reserve_bytes; /* virtual range (0: 64 GiB, the protocol's most); the
				   daemon's alloc_limit_bytes bounds what is mapped */
	uint64_t initial_bytes; /* mapped before the first kernel (0: nothing; the
				   first malloc then waits for the first grant's mapping) */
};

int gpusys_heap_open(gpusys_t *g, const struct gpusys_heap_options *o, struct gpusys_heap **ret);

/* The handle for a launch (calls gpusys_device(g), which it contains). */
gpusys_heap_t gpusys_heap_device(struct gpusys_heap *h);

/* Bytes mapped now, mappings made, mappings unmapped again (gpusysd shrank
 * a heap whose top the device had given back: docs/ALLOC.md, "Trim"), and
 * the time the last mapping took (ns, from seeing the request to publishing
 * it: cuMemCreate + cuMemMap + cuMemSetAccess). */
uint64_t gpusys_heap_mapped(const struct gpusys_heap *h);
uint32_t gpusys_heap_maps(const struct gpusys_heap *h);
uint32_t gpusys_heap_unmaps(const struct gpusys_heap *h);
uint64_t gpusys_heap_last_map_ns(const struct gpusys_heap *h);

/* Give the GPU back what gpusysd's last shrink took off the heap (its top,
 * given back by the device's trim: docs/ALLOC.md, "Trim"), unless the heap
 * has grown again since. Call it only while no kernel uses the heap (after
 * gpusys_synchronize of every stream that runs one): cuMemUnmap waits for
 * running kernels, and the heap cannot grow meanwhile. The bytes unmapped
 * (0: no shrink waited). GPUSYS_HEAP_UNMAP=1 makes the mapping thread do
 * this at every shrink, without being asked. */
int64_t gpusys_heap_release(struct gpusys_heap *h);

/* Stop the mapping thread, unmap and free. Kernels using the heap must be
 * done. */
void gpusys_heap_close(struct gpusys_heap *h);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_HEAP_H */
