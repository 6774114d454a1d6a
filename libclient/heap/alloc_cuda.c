/* SPDX-License-Identifier: MIT */
/*
 * The device heap of a CUDA client (include/gpusys/heap.h): a virtual range
 * reserved on the client's GPU, device memory created and mapped into it by
 * a thread of this process while kernels run, as gpusysd grants it.
 *
 * Why here and not in gpusysd (docs/ALLOC.md has the figures): creating the
 * memory in this process means no export to a POSIX descriptor (8-9 ms per
 * chunk while a kernel runs, on the H100), no import and no descriptor
 * passing on the growth path, and no CUDA context in the daemon on the
 * client's GPU; the driver frees the memory when this process dies, however
 * it dies. The daemon still decides how much may be mapped (the grant) and
 * keeps all the metadata.
 *
 * Shared with device code, in pinned host memory mapped for the device:
 * struct gpusys_alloc_ctl (want: written by warps; mapped, failed: written
 * here). Private device memory: the slab pool's lists and per-SM current
 * slabs (struct gpusys_alloc_pool and its arrays), and last errors.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpusys/heap.h"
#include "heap_map.h"
#include "../common/cuda_driver.h"
#include "common/clock.h"

struct gpusys_heap {
	gpusys_t *g;
	const struct gpusys_cuda *cu;
	CUdevice cudev;
	CUcontext ctx;
	CUdeviceptr base;
	uint64_t reserve;
	uint64_t granularity;
	struct gpusys_alloc_ctl *ctl;   /* host view */
	CUdeviceptr ctl_dev;            /* device view */
	CUdeviceptr priv;               /* the pool, then last errors */
	uint64_t pool_bytes;
	uint32_t groups;                /* SMs: each has its current slabs */
	uint32_t err_slots;
	struct heap_map hm;             /* what is mapped, and the shrinks (heap_map.h) */
	bool have_hm;
	/* One handle per mapping, released (and unmapped) at close. */
	CUmemGenericAllocationHandle *handles;
	uint64_t *handle_off, *handle_bytes;
	uint32_t nhandles, cap_handles;
	pthread_t thread;
	bool have_thread;
	atomic_bool stop;
	atomic_uint maps, unmaps;
	atomic_uint_fast64_t last_map_ns;
};

static void say(const struct gpusys_heap *h, CUresult r, const char *what)
{
	char buf[160];
	if (getenv("GPUSYS_DEBUG"))
		fprintf(stderr, "libgpusys heap: %s\n", gpusys_cuda_describe(h->cu, r, what, buf, sizeof(buf)));
}

/* Map [from, to) with one new allocation. 0 or -errno. */
static int map_more(struct gpusys_heap *h, uint64_t from, uint64_t to)
{
	const struct gpusys_cuda *cu = h->cu;
	uint64_t bytes = to - from;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)h->cudev;
	CUmemGenericAllocationHandle hd;
	CUresult r;
	if (h->nhandles == h->cap_handles) {
		uint32_t cap = h->cap_handles ? h->cap_handles * 2 : 16;
		void *a = realloc(h->handles, cap * sizeof(*h->handles));
		if (a)
			h->handles = a;
		void *b = realloc(h->handle_off, cap * sizeof(uint64_t));
		if (b)
			h->handle_off = b;
		void *c = realloc(h->handle_bytes, cap * sizeof(uint64_t));
		if (c)
			h->handle_bytes = c;
		if (!a || !b || !c)
			return -ENOMEM;
		h->cap_handles = cap;
	}
	if ((r = cu->cuMemCreate(&hd, bytes, &prop, 0)) != CUDA_SUCCESS) {
		say(h, r, "cuMemCreate");
		return gpusys_cuda_errno(r);
	}
	if ((r = cu->cuMemMap(h->base + from, bytes, 0, hd, 0)) != CUDA_SUCCESS) {
		say(h, r, "cuMemMap");
		cu->cuMemRelease(hd);
		return gpusys_cuda_errno(r);
	}
	CUmemAccessDesc acc;
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = (int)h->cudev;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if ((r = cu->cuMemSetAccess(h->base + from, bytes, &acc, 1)) != CUDA_SUCCESS) {
		say(h, r, "cuMemSetAccess");
		cu->cuMemUnmap(h->base + from, bytes);
		cu->cuMemRelease(hd);
		return gpusys_cuda_errno(r);
	}
	h->handles[h->nhandles] = hd;
	h->handle_off[h->nhandles] = from;
	h->handle_bytes[h->nhandles] = bytes;
	h->nhandles++;
	return 0;
}

/* heap_map's operations: a mapping per growth step, timed. */
static int op_map(void *arg, uint64_t from, uint64_t to)
{
	struct gpusys_heap *h = arg;
	uint64_t t0 = now_ns();
	int r = map_more(h, from, to);
	if (r == 0) {
		atomic_store_explicit(&h->last_map_ns, now_ns() - t0, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->maps, 1, memory_order_relaxed);
	}
	return r;
}

/* Unmap and release the mappings that start at or above keep. Mappings
 * are whole growth steps: one that straddles keep stays. cuMemUnmap waits
 * for running kernels: heap_map calls this only when told no kernel uses
 * the heap (gpusys_heap_release, GPUSYS_HEAP_UNMAP=1). */
static uint64_t op_unmap_above(void *arg, uint64_t keep, uint64_t mapped)
{
	struct gpusys_heap *h = arg;
	const struct gpusys_cuda *cu = h->cu;
	while (h->nhandles && h->handle_off[h->nhandles - 1] >= keep) {
		uint32_t i = --h->nhandles;
		CUresult r = cu->cuMemUnmap(h->base + h->handle_off[i], h->handle_bytes[i]);
		if (r != CUDA_SUCCESS)
			say(h, r, "cuMemUnmap");
		cu->cuMemRelease(h->handles[i]);
		mapped = h->handle_off[i];
		atomic_fetch_add_explicit(&h->unmaps, 1, memory_order_relaxed);
	}
	return mapped;
}

static const struct heap_map_ops cuda_ops = { op_map, op_unmap_above };

/* Poll want (a PCIe-free read: the ctl is host memory); map when it grows,
 * and take shrinks (heap_map.h). 20 us between looks while idle: a warp
 * that waits for memory loses at most that on top of the mapping itself
 * (milliseconds while kernels run), and the daemon grants ahead, so warps
 * rarely wait. */
static void *map_thread(void *arg)
{
	struct gpusys_heap *h = arg;
	h->cu->cuCtxSetCurrent(h->ctx);
	while (!atomic_load_explicit(&h->stop, memory_order_acquire)) {
		uint64_t want = __atomic_load_n(&h->ctl->want, __ATOMIC_ACQUIRE), word = 0;
		int r = __atomic_load_n(&h->ctl->failed, __ATOMIC_RELAXED) ? 0 : heap_map_step(&h->hm, want, &word);
		if (r < 0)
			__atomic_store_n(&h->ctl->failed, (uint64_t)(int64_t)r, __ATOMIC_RELEASE);
		if (r) {
			__atomic_store_n(&h->ctl->mapped, word, __ATOMIC_RELEASE);
			continue;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
	return NULL;
}

static void heap_free(struct gpusys_heap *h)
{
	const struct gpusys_cuda *cu = h->cu;
	if (h->ctx)
		cu->cuCtxPushCurrent(h->ctx);
	for (uint32_t i = 0; i < h->nhandles; i++) {
		cu->cuMemUnmap(h->base + h->handle_off[i], h->handle_bytes[i]);
		cu->cuMemRelease(h->handles[i]);
	}
	if (h->base)
		cu->cuMemAddressFree(h->base, h->reserve);
	if (h->priv)
		cu->cuMemFree(h->priv);
	if (h->ctl) {
		cu->cuMemHostUnregister(h->ctl);
		free(h->ctl);
	}
	if (h->ctx) {
		CUcontext c;
		cu->cuCtxPopCurrent(&c);
		cu->cuDevicePrimaryCtxRelease(h->cudev);
	}
	free(h->handles);
	free(h->handle_off);
	free(h->handle_bytes);
	if (h->have_hm)
		heap_map_fini(&h->hm);
	free(h);
}

int gpusys_heap_open(gpusys_t *g, const struct gpusys_heap_options *o, struct gpusys_heap **ret)
{
	const struct gpusys_cuda *cu;
	CUcontext c;
	CUresult r;
	int rc;
	if ((rc = gpusys_cuda_load(&cu)) < 0)
		return rc;
	struct gpusys_heap *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->g = g;
	h->cu = cu;
	h->reserve = o && o->reserve_bytes ? o->reserve_bytes : GPUSYS_ALLOC_MAX_RESERVE;
	if (h->reserve > GPUSYS_ALLOC_MAX_RESERVE)
		h->reserve = GPUSYS_ALLOC_MAX_RESERVE;
	h->reserve = gpusys_align_up(h->reserve, GPUSYS_ALLOC_MAP_ALIGN);
	if ((r = cu->cuDeviceGet(&h->cudev, o ? o->cuda_device : 0)) != CUDA_SUCCESS) {
		say(h, r, "cuDeviceGet");
		free(h);
		return gpusys_cuda_errno(r);
	}
	if ((r = cu->cuDevicePrimaryCtxRetain(&h->ctx, h->cudev)) != CUDA_SUCCESS) {
		say(h, r, "cuDevicePrimaryCtxRetain");
		free(h);
		return gpusys_cuda_errno(r);
	}
	cu->cuCtxPushCurrent(h->ctx);

	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)h->cudev;
	size_t gran = 0;
	if ((r = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) != CUDA_SUCCESS)
		goto cuda_fail;
	/* Grants are 2 MiB steps; a GPU with a coarser granularity maps in
	 * its own steps (at most granularity - 2 MiB beyond the grant). */
	h->granularity = gran > GPUSYS_ALLOC_MAP_ALIGN ? gran : GPUSYS_ALLOC_MAP_ALIGN;
	if ((r = cu->cuMemAddressReserve(&h->base, h->reserve, GPUSYS_ALLOC_MAP_ALIGN, 0, 0)) != CUDA_SUCCESS) {
		h->base = 0;
		goto cuda_fail;
	}

	int sms = 0;
	cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, h->cudev);
	h->groups = (uint32_t)(sms > 0 ? sms : 1);
	h->err_slots = h->groups * 64u; /* one per (SM, warp slot): gpusys_port_hint */
	h->pool_bytes = gpusys_align_up(gpusys_alloc_pool_bytes(h->reserve, h->groups), 16);
	/* the lanes' last errors, then a lock word per warp slot */
	size_t err_bytes = (size_t)h->err_slots * (GPUSYS_WARP_LANES + 1) * sizeof(int32_t);
	if ((r = cu->cuMemAlloc(&h->priv, h->pool_bytes + err_bytes)) != CUDA_SUCCESS) {
		h->priv = 0;
		goto cuda_fail;
	}
	if ((r = cu->cuMemsetD8(h->priv, 0, h->pool_bytes + err_bytes)) != CUDA_SUCCESS)
		goto cuda_fail;
	{
		struct gpusys_alloc_pool po;
		memset(&po, 0, sizeof(po));
		po.groups = h->groups;
		po.trim_delay_ns = GPUSYS_ALLOC_TRIM_DELAY_NS;
		if ((r = cu->cuMemcpyHtoD(h->priv, &po, sizeof(po))) != CUDA_SUCCESS)
			goto cuda_fail;
	}

	h->ctl = aligned_alloc(4096, 4096);
	if (!h->ctl) {
		rc = -ENOMEM;
		goto fail;
	}
	memset(h->ctl, 0, 4096);
	if ((r = cu->cuMemHostRegister(h->ctl, 4096, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)) !=
	    CUDA_SUCCESS) {
		free(h->ctl);
		h->ctl = NULL;
		goto cuda_fail;
	}
	if ((r = cu->cuMemHostGetDevicePointer(&h->ctl_dev, h->ctl, 0)) != CUDA_SUCCESS)
		goto cuda_fail;

	uint64_t first = 0;
	if (o && o->initial_bytes) {
		first = gpusys_align_up(o->initial_bytes, h->granularity);
		if (first > h->reserve)
			first = h->reserve;
		if ((rc = map_more(h, 0, first)) < 0)
			goto fail;
		h->ctl->mapped = first;
	}
	const char *um = getenv("GPUSYS_HEAP_UNMAP");
	heap_map_init(&h->hm, &cuda_ops, h, h->reserve, h->granularity, first, um && !strcmp(um, "1"));
	h->have_hm = true;
	cu->cuCtxPopCurrent(&c);
	rc = pthread_create(&h->thread, NULL, map_thread, h);
	if (rc) {
		cu->cuCtxPushCurrent(h->ctx);
		rc = -rc;
		goto fail;
	}
	h->have_thread = true;
	*ret = h;
	return 0;

cuda_fail:
	say(h, r, "heap setup");
	rc = gpusys_cuda_errno(r);
fail:
	cu->cuCtxPopCurrent(&c);
	heap_free(h);
	return rc;
}

gpusys_heap_t gpusys_heap_device(struct gpusys_heap *h)
{
	gpusys_heap_t t;
	memset(&t, 0, sizeof(t));
	t.dev = gpusys_device(h->g);
	t.heap.base = (uint8_t *)(uintptr_t)h->base;
	t.heap.reserve = h->reserve;
	t.heap.ctl = (struct gpusys_alloc_ctl *)(uintptr_t)h->ctl_dev;
	t.heap.pool = (struct gpusys_alloc_pool *)(uintptr_t)h->priv;
	t.heap.slab_ctl = (unsigned long long *)(uintptr_t)(h->priv + sizeof(struct gpusys_alloc_pool));
	t.heap.chunk_of = (uint32_t *)(t.heap.slab_ctl + h->reserve / GPUSYS_ALLOC_SLAB_BYTES);
	t.heap.cur = t.heap.chunk_of + h->reserve / GPUSYS_ALLOC_CHUNK_BYTES;
	t.heap.last_err = (int32_t *)(uintptr_t)(h->priv + h->pool_bytes);
	t.heap.err_slots = h->err_slots;
	t.heap.warp_locks = (uint32_t *)(uintptr_t)(h->priv + h->pool_bytes +
						    (uint64_t)h->err_slots * GPUSYS_WARP_LANES * sizeof(int32_t));
	return t;
}

uint64_t gpusys_heap_mapped(const struct gpusys_heap *h)
{
	return heap_map_mapped(&((struct gpusys_heap *)h)->hm);
}

uint32_t gpusys_heap_maps(const struct gpusys_heap *h)
{
	return atomic_load_explicit(&((struct gpusys_heap *)h)->maps, memory_order_relaxed);
}

int64_t gpusys_heap_release(struct gpusys_heap *h)
{
	uint64_t word = 0;
	h->cu->cuCtxPushCurrent(h->ctx);
	uint64_t bytes = heap_map_release(&h->hm, &word);
	CUcontext c;
	h->cu->cuCtxPopCurrent(&c);
	__atomic_store_n(&h->ctl->mapped, word, __ATOMIC_RELEASE);
	return (int64_t)bytes;
}

uint32_t gpusys_heap_unmaps(const struct gpusys_heap *h)
{
	return atomic_load_explicit(&((struct gpusys_heap *)h)->unmaps, memory_order_relaxed);
}

uint64_t gpusys_heap_last_map_ns(const struct gpusys_heap *h)
{
	return atomic_load_explicit(&((struct gpusys_heap *)h)->last_map_ns, memory_order_relaxed);
}

void gpusys_heap_close(struct gpusys_heap *h)
{
	if (!h)
		return;
	if (h->have_thread) {
		atomic_store_explicit(&h->stop, true, memory_order_release);
		pthread_join(h->thread, NULL);
	}
	heap_free(h);
}
