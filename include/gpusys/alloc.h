/* SPDX-License-Identifier: MIT */
/*
 * The alloc service: a growable per-client heap of device memory (host
 * memory for emulated clients). Opcodes, request and response layouts shared
 * by the device code (include/gpusys/alloc.cuh, device/alloc_client.h), the
 * emulator (include/gpusys/emulator/alloc.h), libgpusys's heap (libclient/) and
 * the daemon (daemon/services/alloc/). Plain C that nvcc also accepts.
 * docs/ALLOC.md says what the heap promises.
 *
 * Who holds what:
 *   - the client process reserves the heap's virtual range and maps memory
 *     into it (a libgpusys thread: cuMemCreate/cuMemMap/cuMemSetAccess on a
 *     GPU, mprotect for the emulator) when the daemon grants it;
 *   - the daemon keeps every byte of the allocator's metadata in its own
 *     memory and names blocks by their offset in the heap, never by address:
 *     it never reads or writes the heap, and the client cannot corrupt it;
 *   - the device keeps only a cache of small blocks the daemon has already
 *     handed out (refilled in batches), so most small mallocs need no round
 *     trip. Every free goes to the daemon, which checks it.
 *
 * Every request carries, in each lane's struct gpusys_alloc_req, the bytes
 * the client has mapped and the size of its reserved range; the daemon uses
 * at most min(mapped, granted). Every response carries the grant: the bytes
 * the daemon allows the client to map; the device hands it to the mapping
 * thread (struct gpusys_alloc_ctl) when it exceeds what is mapped.
 */
#ifndef GPUSYS_ALLOC_H
#define GPUSYS_ALLOC_H

#include <stdint.h>

#include "gpusys/abi.h"

enum gpusys_alloc_opcode {
	GPUSYS_OP_ALLOC_FIRST = 0x0400,
	GPUSYS_OP_ALLOC_MALLOC = 0x0400,  /* arg = size, arg2 = alignment -> off (+ extra small blocks) */
	GPUSYS_OP_ALLOC_FREE = 0x0401,    /* arg = off -> 0 */
	GPUSYS_OP_ALLOC_REALLOC = 0x0402, /* arg = off, arg2 = new size -> off, size = old usable bytes */
	GPUSYS_OP_ALLOC_STAT = 0x0403,    /* -> struct gpusys_alloc_stat (first lane only) */
	GPUSYS_OP_ALLOC_LAST = 0x04ff,
};

/* Heap geometry, fixed by the protocol. */
#define GPUSYS_ALLOC_GRANULE 16u                /* every block is aligned to this */
#define GPUSYS_ALLOC_PAGE 4096u                 /* large blocks are whole pages */
#define GPUSYS_ALLOC_SLAB_BYTES 65536u          /* small blocks are carved from slabs of this */
#define GPUSYS_ALLOC_CLASSES 8u                 /* small classes: 16, 32, ... 2048 bytes */
#define GPUSYS_ALLOC_SMALL_MAX (GPUSYS_ALLOC_GRANULE << (GPUSYS_ALLOC_CLASSES - 1))
#define GPUSYS_ALLOC_MAP_ALIGN (UINT64_C(2) << 20) /* grants and mappings: 2 MiB steps */
#define GPUSYS_ALLOC_MAX_RESERVE (UINT64_C(1) << 36) /* 64 GiB: extras are 32-bit granule numbers */
#define GPUSYS_ALLOC_MAX_ALIGN (UINT64_C(2) << 20)

/* A small block of class c is GPUSYS_ALLOC_GRANULE << c bytes and aligned to
 * its size. */
GPUSYS_ABI_FN uint32_t gpusys_alloc_class_bytes(uint32_t c)
{
	return GPUSYS_ALLOC_GRANULE << c;
}

/* The small class for size bytes aligned to align (a power of two), or
 * GPUSYS_ALLOC_CLASSES for a large block. size 0 is class 0. */
GPUSYS_ABI_FN uint32_t gpusys_alloc_class_of(uint64_t size, uint64_t align)
{
	uint64_t need = size > align ? size : align;
	if (need > GPUSYS_ALLOC_SMALL_MAX)
		return GPUSYS_ALLOC_CLASSES;
	uint32_t c = 0;
	while (((uint64_t)GPUSYS_ALLOC_GRANULE << c) < need)
		c++;
	return c;
}

/* One lane's request: 48 bytes, within a lane's inline slot. */
struct gpusys_alloc_req {
	uint64_t arg;      /* MALLOC: size; FREE, REALLOC: offset of the block */
	uint64_t arg2;     /* MALLOC: alignment (0: GPUSYS_ALLOC_GRANULE); REALLOC: new size */
	uint64_t mapped;   /* bytes of the heap the client has mapped (from offset 0) */
	uint64_t reserve;  /* bytes of virtual range the client reserved */
	uint64_t base;     /* where that range starts: names the heap. A client that
			      closes its heap and opens another gets a fresh one
			      (the daemon drops the old heap's metadata). Never
			      dereferenced by the daemon. */
	uint32_t extra;    /* MALLOC of a small block: further blocks of its class wanted (cache refill) */
	uint32_t flags;    /* 0 */
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_alloc_req) == 48, "alloc request layout");

#define GPUSYS_ALLOC_EXTRA_MAX 9u

/* One lane's response (MALLOC, REALLOC): 64 bytes, one inline slot, so a
 * response never streams. FREE answers with the lane status only. */
struct gpusys_alloc_resp {
	uint64_t off;      /* the block's offset in the heap */
	uint64_t grant;    /* bytes the client may map now */
	uint64_t size;     /* REALLOC: the old block's usable bytes (what to copy) */
	uint32_t nextra;   /* MALLOC: extra blocks of the same class in extra[] */
	uint32_t extra[GPUSYS_ALLOC_EXTRA_MAX]; /* their offsets / GPUSYS_ALLOC_GRANULE */
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_alloc_resp) == 64, "alloc response fits a slot");

/* Lane statuses of the alloc service:
 *   0          done
 *   -EAGAIN    the block fits in granted memory the client has not mapped
 *              yet: the device waits for its mapping thread and asks again
 *   -ENOMEM    the per-client limit is reached (alloc_limit_bytes)
 *   -EINVAL    size 0 or too large, alignment not a power of two or above
 *              GPUSYS_ALLOC_MAX_ALIGN; FREE/REALLOC: a pointer into the
 *              middle of a live block
 *   -EFAULT    FREE/REALLOC: a pointer outside the heap
 *   -ENOENT    FREE/REALLOC: a pointer to memory that is not allocated
 *              (freed already, or never handed out)
 * Refused frees are counted per client and in the daemon's totals. */

/* ALLOC_STAT's answer: the calling client's heap, and every heap the daemon
 * holds (tests measure a killed client's heap going away with it). */
struct gpusys_alloc_stat {
	uint64_t reserve, limit, grant, mapped;
	uint64_t live_bytes;      /* bytes in live blocks, as the blocks' sizes (cached small blocks included) */
	uint64_t used_bytes;      /* bytes taken from the heap: live large blocks and slabs */
	uint64_t live_blocks;
	uint64_t mallocs, frees, reallocs;
	uint64_t enomem, eagain;
	uint64_t refused_foreign, refused_interior, refused_unallocated;
	uint64_t meta_bytes;      /* daemon memory holding this heap's metadata */
	/* daemon-wide */
	uint64_t all_heaps, all_grant, all_meta_bytes, all_refused;
};

/* Shared between the device and the client's mapping thread, in memory both
 * reach (pinned host memory mapped for the device; plain memory in the
 * emulator). Each word has one writer. */
struct gpusys_alloc_ctl {
	volatile uint64_t mapped;   /* written by the mapping thread: bytes mapped from offset 0 */
	uint64_t pad0[7];
	volatile uint64_t want;     /* written by device code: the largest grant it has seen */
	uint64_t pad1[7];
	volatile uint64_t failed;   /* written by the mapping thread: -errno of a mapping that failed, or 0 */
	uint64_t pad2[7];
};

/* The device's cache of one class for one warp slot (private memory). */
#define GPUSYS_ALLOC_CACHE_CAP 62u /* entries: 256 bytes per class and slot */
#define GPUSYS_ALLOC_CACHE_BYTES 4096u /* and at most this much memory per class and slot */

/* How many blocks of class c a slot's cache holds at most: caches must not
 * hoard the heap (8448 warp slots on an H100 hold at most 27 KiB each). */
GPUSYS_ABI_FN uint32_t gpusys_alloc_cache_cap(uint32_t c)
{
	uint32_t n = GPUSYS_ALLOC_CACHE_BYTES / gpusys_alloc_class_bytes(c);
	return n < GPUSYS_ALLOC_CACHE_CAP ? n : GPUSYS_ALLOC_CACHE_CAP;
}
struct gpusys_alloc_cache {
	uint32_t lock;
	uint32_t count;
	uint32_t block[GPUSYS_ALLOC_CACHE_CAP]; /* offsets / GPUSYS_ALLOC_GRANULE */
};

/* What a kernel (or an emulated warp) needs to use the heap: pass by value. */
typedef struct gpusys_heap_dev {
	uint8_t *base;                      /* the reserved range */
	uint64_t reserve;
	struct gpusys_alloc_ctl *ctl;       /* shared with the mapping thread */
	struct gpusys_alloc_cache *cache;   /* cache_slots * GPUSYS_ALLOC_CLASSES entries, private */
	int32_t *last_err;                  /* cache_slots * GPUSYS_WARP_LANES: errno of each thread's last call */
	uint32_t cache_slots;
	uint32_t pad;
} gpusys_heap_dev_t;

#endif /* GPUSYS_ALLOC_H */
