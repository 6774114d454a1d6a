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
 *   - small blocks (up to GPUSYS_SLAB_MAX, 64 KiB) are the device's: it asks
 *     the daemon for whole pool chunks and cuts them into slabs itself
 *     (device/alloc_slab.h), so small mallocs and frees need no round trip.
 *     The daemon sees a pool chunk as one large block: what the device
 *     does inside it can only affect the client's own heap. Large blocks
 *     go to the daemon, which checks every free of them.
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
	GPUSYS_OP_ALLOC_REPORT = 0x0404,  /* arg = what the device refused (enum below) -> 0 */
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
	uint32_t extra;    /* MALLOC of a small block: further blocks of its class wanted (the
			      daemon honours it; the device, which cuts its own small
			      blocks since issue 29, sends 0) */
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
 *   -EIO       (the device's own) MALLOC/REALLOC: the block found failed
 *              the last check (not in a held pool chunk's slab, or past
 *              the mapped prefix): a bug or a scribbled slab, counted
 *              (gpusys_alloc_pool.wild_blocks) and not handed out
 * Refused frees are counted per client and in the daemon's totals. */

/* ALLOC_REPORT's arg: a free of a small block the device refused, counted
 * for gpusysctl. Only the client's own counters move. */
enum gpusys_alloc_refusal {
	GPUSYS_ALLOC_REFUSED_FOREIGN = 1,     /* -EFAULT: outside the heap */
	GPUSYS_ALLOC_REFUSED_INTERIOR = 2,    /* -EINVAL: not the start of a slot */
	GPUSYS_ALLOC_REFUSED_UNALLOCATED = 3, /* -ENOENT: its bit was clear (a double free) */
};

/* ALLOC_STAT's answer: the calling client's heap, and every heap the daemon
 * holds (tests measure a killed client's heap going away with it). */
struct gpusys_alloc_stat {
	uint64_t reserve, limit, grant, mapped;
	uint64_t live_bytes;      /* bytes in live blocks, as the blocks' sizes (a pool chunk is one) */
	uint64_t used_bytes;      /* bytes taken from the heap: live large blocks and slabs */
	uint64_t live_blocks;
	uint64_t mallocs, frees, reallocs;
	uint64_t enomem, eagain;
	uint64_t refused_foreign, refused_interior, refused_unallocated;
	uint64_t meta_bytes;      /* daemon memory holding this heap's metadata */
	uint64_t pool_bytes;      /* in pool chunks the device cuts into slabs */
	uint64_t pool_chunks_got, pool_chunks_back; /* chunks granted, chunks given back (trim) */
	/* bad frees the device found and reported (double frees among the unallocated) */
	uint64_t dev_refused_foreign, dev_refused_interior, dev_refused_unallocated;
	/* daemon-wide */
	uint64_t all_heaps, all_grant, all_meta_bytes, all_refused;
};

/* Shared between the device and the client's mapping thread, in memory both
 * reach (pinned host memory mapped for the device; plain memory in the
 * emulator). Each word has one writer. */
struct gpusys_alloc_ctl {
	volatile uint64_t mapped;   /* written by the mapping thread: bytes mapped from offset 0, and
				       the shrink epoch they belong to (a heap word, below) */
	uint64_t pad0[7];
	volatile uint64_t want;     /* written by device code: the largest grant it has seen (a heap
				       word: a grant of a newer epoch is larger than any older one) */
	uint64_t pad1[7];
	volatile uint64_t failed;   /* written by the mapping thread: -errno of a mapping that failed, or 0 */
	uint64_t pad2[7];
};

/*
 * Small blocks on the device (device/alloc_slab.h, docs/ALLOC.md "Slabs").
 *
 * The device asks gpusysd for whole pool chunks (a MALLOC of
 * GPUSYS_ALLOC_CHUNK_BYTES aligned to itself, flags GPUSYS_ALLOC_F_POOL):
 * to the daemon a chunk is one large block of the client's, checked and
 * counted like any other. The device cuts it into slabs of
 * GPUSYS_ALLOC_SLAB_BYTES (or makes it one slab, for classes above 2 KiB),
 * one class per slab, and hands blocks out and
 * takes them back with atomics on the slab's bitmap, with no request. All
 * of that metadata is in the client's own memory (the slab headers inside
 * the heap, the lists below in its private device memory): a kernel that
 * scribbles on it can only break its own heap; the daemon never reads it.
 */
#define GPUSYS_ALLOC_CHUNK_BYTES GPUSYS_ALLOC_MAP_ALIGN /* 2 MiB, aligned to itself */
/* The device's classes: the daemon's eight (16 B .. 2 KiB, slabs of 64 KiB,
 * 32 to a chunk) and five more (4 KiB .. 64 KiB), each slab a whole chunk. */
#define GPUSYS_SLAB_CLASSES 13u
#define GPUSYS_SLAB_MAX (GPUSYS_ALLOC_GRANULE << (GPUSYS_SLAB_CLASSES - 1)) /* 64 KiB */
/* SM groups that have their own current slab of a whole-chunk class: fewer
 * than SMs, so that a GPU does not hold a chunk per SM and class. */
#define GPUSYS_SLAB_WHOLE_GROUPS 8u
/* chunk_of[]: a chunk that is one slab of a class above 2 KiB; a chunk
 * trim is giving back (no slab of it may be touched) */
#define GPUSYS_CHUNK_WHOLE 0x40000000u
#define GPUSYS_CHUNK_GONE 0x80000000u
#define GPUSYS_ALLOC_CHUNK_SLABS ((uint32_t)(GPUSYS_ALLOC_CHUNK_BYTES / GPUSYS_ALLOC_SLAB_BYTES))
#define GPUSYS_ALLOC_SLAB_SHIFT 16u
#define GPUSYS_ALLOC_CHUNK_SHIFT 21u
GPUSYS_STATIC_ASSERT((1u << GPUSYS_ALLOC_SLAB_SHIFT) == GPUSYS_ALLOC_SLAB_BYTES, "slab shift");
GPUSYS_STATIC_ASSERT((UINT64_C(1) << GPUSYS_ALLOC_CHUNK_SHIFT) == GPUSYS_ALLOC_CHUNK_BYTES, "chunk shift");

/* How long a pool chunk stays free before trim gives it back, until the
 * daemon says (its alloc_trim_delay_ms, with each chunk it grants). */
#define GPUSYS_ALLOC_TRIM_DELAY_NS (UINT64_C(1000) * 1000000u)

/* gpusys_alloc_req.flags */
#define GPUSYS_ALLOC_F_POOL 1u    /* MALLOC / FREE of a whole pool chunk */
#define GPUSYS_ALLOC_F_SHRINKS 2u /* FREE of a pool chunk: the client can unmap what gpusysd no
				     longer grants, and wants the grant in the answer */

/*
 * Heap words: the grant (gpusys_alloc_resp.grant), what the client mapped
 * (gpusys_alloc_req.mapped, ctl->mapped) and what it wants mapped
 * (ctl->want) are bytes in the low 40 bits and a shrink epoch above them.
 * gpusysd shrinks a heap whose top has been given back (docs/ALLOC.md,
 * "Trim"): it lowers the grant and starts a new epoch; the mapping thread
 * unmaps what lies above the new grant and reports its mapping in the new
 * epoch. A report of an older epoch (a request that read ctl->mapped
 * before the unmap) is ignored, so gpusysd never hands out memory that a
 * stale figure said was mapped. Compared as whole words, a newer epoch is
 * larger; a client that never sends GPUSYS_ALLOC_F_SHRINKS stays in epoch
 * 0, where a heap word is plain bytes.
 */
#define GPUSYS_ALLOC_EPOCH_SHIFT 40
#define GPUSYS_ALLOC_EPOCH_MAX 8191u /* the device reduces grants >> 21 in 32 bits */
GPUSYS_ABI_FN uint64_t gpusys_alloc_word_bytes(uint64_t w)
{
	return w & ((UINT64_C(1) << GPUSYS_ALLOC_EPOCH_SHIFT) - 1);
}
GPUSYS_ABI_FN uint32_t gpusys_alloc_word_epoch(uint64_t w)
{
	return (uint32_t)(w >> GPUSYS_ALLOC_EPOCH_SHIFT);
}
GPUSYS_ABI_FN uint64_t gpusys_alloc_word(uint32_t epoch, uint64_t bytes)
{
	return (uint64_t)epoch << GPUSYS_ALLOC_EPOCH_SHIFT | bytes;
}

/* The header at the start of every slab of a pool chunk (heap memory).
 * Each slab's ctl word is in the pool's private memory (slab_ctl[] of
 * gpusys_heap_dev_t, one per 64 KiB of the range, never re-initialised):
 * a warp that stalled holding an old slab number can only touch that
 * word, never the heap, and a chunk granted again finds its words as the
 * give-back left them (FREE, with any stale reservation still counted).
 * ctl packs what must change together: the blocks handed out or reserved
 * (low 32 bits), the class (bits 32-39), the state (bits 40-47) and the
 * cut's generation (bits 48-63, one more at every cut: a free that read
 * an older one is stale and refused). */
enum gpusys_alloc_slab_state {
	GPUSYS_SLAB_FREE = 0,     /* on the pool's free list (or being cut) */
	GPUSYS_SLAB_ACTIVE = 1,   /* some SM's current slab of its class: mallocs take from it */
	GPUSYS_SLAB_DETACHED = 2, /* was current, ran full; on no list */
	GPUSYS_SLAB_LISTED = 3,   /* on an SM group's partial list of its class: frees made room */
	GPUSYS_SLAB_BROKEN = 4,   /* a claim found its bitmap scribbled: frees still work, but it is never
				     handed out from, listed or given back again (until the heap closes) */
};
struct gpusys_alloc_slab {
	unsigned long long unused; /* was the ctl word: now the pool's slab_ctl[] (above) */
	uint32_t next;           /* list link: slab number + 1, 0 ends */
	uint32_t hint;           /* the bitmap word to look at first */
	unsigned long long since; /* first slab of a chunk: when the whole chunk became free (ns), 0 if not */
	/* then the bitmap: one bit per slot, the header's own slots set */
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_alloc_slab) == 24, "slab header layout");
#define GPUSYS_SLAB_CTL(state, cls, live) \
	((unsigned long long)(state) << 40 | (unsigned long long)(cls) << 32 | (unsigned long long)(live))
#define GPUSYS_SLAB_CTL_LIVE(v) ((uint32_t)(v))
#define GPUSYS_SLAB_CTL_CLS(v) ((uint32_t)((v) >> 32) & 0xffu)
#define GPUSYS_SLAB_CTL_STATE(v) ((uint32_t)((v) >> 40) & 0xffu)
#define GPUSYS_SLAB_CTL_GEN(v) ((uint32_t)((v) >> 48))
#define GPUSYS_SLAB_CTL_GEN_MASK (0xffffull << 48)

/* The device's class for size bytes aligned to align, or
 * GPUSYS_SLAB_CLASSES for a large block (the daemon's). */
GPUSYS_ABI_FN uint32_t gpusys_slab_class_of(uint64_t size, uint64_t align)
{
	uint64_t need = size > align ? size : align;
	if (need > GPUSYS_SLAB_MAX)
		return GPUSYS_SLAB_CLASSES;
	uint32_t c = 0;
	while (((uint64_t)GPUSYS_ALLOC_GRANULE << c) < need)
		c++;
	return c;
}

/* A slab of class c is 64 KiB, or a whole chunk above 2 KiB. */
GPUSYS_ABI_FN int gpusys_slab_whole(uint32_t c)
{
	return c >= GPUSYS_ALLOC_CLASSES;
}
GPUSYS_ABI_FN uint32_t gpusys_slab_bytes(uint32_t c)
{
	return gpusys_slab_whole(c) ? (uint32_t)GPUSYS_ALLOC_CHUNK_BYTES : GPUSYS_ALLOC_SLAB_BYTES;
}

/* Slots in a slab of class c, the first one the header leaves free, and
 * the number of bitmap words. */
GPUSYS_ABI_FN uint32_t gpusys_slab_slots(uint32_t c)
{
	return gpusys_slab_bytes(c) / gpusys_alloc_class_bytes(c);
}
GPUSYS_ABI_FN uint32_t gpusys_slab_words(uint32_t c)
{
	return (gpusys_slab_slots(c) + 63u) / 64u;
}
GPUSYS_ABI_FN uint32_t gpusys_slab_first(uint32_t c)
{
	uint32_t hdr = (uint32_t)sizeof(struct gpusys_alloc_slab) + gpusys_slab_words(c) * 8u;
	return (hdr + gpusys_alloc_class_bytes(c) - 1) / gpusys_alloc_class_bytes(c);
}
GPUSYS_ABI_FN uint32_t gpusys_slab_usable(uint32_t c)
{
	return gpusys_slab_slots(c) - gpusys_slab_first(c);
}

/* The device's lists and counters (its private memory, one per heap). */
struct gpusys_alloc_pool {
	uint32_t lock;                               /* the free list and chunk_of[] */
	uint32_t free_head;                          /* free slabs: slab number + 1 */
	uint32_t free_slabs;
	uint32_t chunks;                             /* pool chunks held */
	uint32_t groups;                             /* per-SM current slabs and partial lists: groups x classes */
	uint32_t trim_lock;                          /* one trim at a time (lists, then chunk_of) */
	unsigned long long trim_delay_ns;            /* a free chunk older than this goes back */
	unsigned long long chunks_got, chunks_trimmed;
	/* Bad frees found here (also reported to gpusysd, which shows them). */
	unsigned long long refused_foreign, refused_interior, refused_unallocated;
	unsigned long long trim_next_ns;             /* a free that empties a slab trims from then on */
	unsigned long long trims;                    /* trims run (for tests and figures) */
	/* Safety nets (also reported as refused_unallocated): claims that got
	 * a bitmap bit past their slab's blocks (a slab whose bitmap was
	 * scribbled: skipped), and blocks refused by malloc's last check (not
	 * inside a held pool chunk, or past pool_hi / the mapped prefix). */
	unsigned long long corrupt_slabs, wild_blocks;
	unsigned long long pool_hi;                  /* end (offset) of the highest chunk granted: mapped below */
	/* One chunk request for the free list at a time: SMs that find it
	 * empty together wait for the grower's 32 slabs instead of each
	 * asking gpusysd for a chunk of its own (device/alloc_slab.h). */
	uint32_t growing;
	uint32_t pad;
	unsigned long long growths_waited;           /* takes that waited for another SM's chunk */
};

/* What a kernel (or an emulated warp) needs to use the heap: pass by value. */
typedef struct gpusys_heap_dev {
	uint8_t *base;                      /* the reserved range */
	uint64_t reserve;
	struct gpusys_alloc_ctl *ctl;       /* shared with the mapping thread */
	struct gpusys_alloc_pool *pool;     /* private */
	uint32_t *chunk_of;                 /* reserve / CHUNK_BYTES: 0; 1 + free slabs of a pool chunk
					       cut in 64 KiB slabs; GPUSYS_CHUNK_WHOLE | 1 for a whole-chunk slab */
	uint32_t *cur;                      /* groups x classes, 4 words each: an SM's current slab + 1 and its
					       lock, its partial list's head (slab + 1) and that list's lock */
	unsigned long long *slab_ctl;       /* reserve / SLAB_BYTES: each slab's ctl word (private) */
	int32_t *last_err;                  /* err_slots * GPUSYS_WARP_LANES: errno of each thread's last call */
	uint32_t *warp_locks;               /* err_slots words: one call of a warp at a time
					       (gpusys_alloc_warp_enter, alloc.cuh) */
	uint32_t err_slots;
	uint32_t pad;
} gpusys_heap_dev_t;

/* Bytes of private device memory the pool needs for a range of reserve
 * bytes and groups SMs (struct, slab_ctl, chunk_of, cur and its locks, in
 * that order: slab_ctl right after the struct keeps it 8-byte aligned). */
GPUSYS_ABI_FN uint64_t gpusys_alloc_pool_bytes(uint64_t reserve, uint32_t groups)
{
	return sizeof(struct gpusys_alloc_pool) + (reserve / GPUSYS_ALLOC_SLAB_BYTES) * 8u +
	       (reserve / GPUSYS_ALLOC_CHUNK_BYTES) * 4u + (uint64_t)groups * GPUSYS_SLAB_CLASSES * 16u;
}
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_alloc_pool) % 8 == 0, "slab_ctl after the pool stays aligned");

#endif /* GPUSYS_ALLOC_H */
