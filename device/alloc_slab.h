/* SPDX-License-Identifier: MIT */
/*
 * Small blocks on the device: slabs cut from pool chunks that gpusysd
 * grants as ordinary large blocks (include/gpusys/alloc.h "Small blocks on
 * the device", docs/ALLOC.md "Slabs"). Written once for nvcc and the host
 * compiler; the functions named *_leader run in one lane (the warp's
 * leader), the others in every lane of mask.
 *
 * The fast path is two atomics per warp and class, with no request and no
 * host memory: malloc adds the group's block count to the slab's ctl word
 * (a reservation: it says whether that many slots are free) and claims the
 * bits of one bitmap word; free clears each lane's bit (a bit already clear
 * is a double free, found for nothing) and takes the count back. Each SM
 * has its own current slab per class (hp->cur), so warps of different SMs
 * never touch the same words; a slab is per class, so a class's blocks are
 * aligned to their size.
 *
 * A slab's life (ctl's state): FREE on the pool's list -> ACTIVE, an SM's
 * current slab -> DETACHED when it ran full and the SM took another ->
 * LISTED on the partial list of the freeing SM's group once frees emptied
 * half of it -> ACTIVE again for the SM that needs one, or FREE when trim finds it empty.
 * Every change of state is a compare-and-swap of ctl, which carries the
 * count: a slab goes back to FREE only while nobody holds or reserves a
 * block of it, and a warp that reserved on a slab in the wrong state or
 * class gives the reservation back before touching a bit. Every count
 * taken back goes through gpusys_slab_put_back_leader, so the last one to
 * leave a DETACHED slab lists it, whether it was a block or a reservation.
 * The ctl words are in private memory (alloc.h, slab_ctl[]) and are never
 * re-initialised: a stalled warp's reservation on a slab number it read
 * long ago lands on that word, never on the heap, and nothing wipes it.
 * A free pins its slab's count (an add, checked against the state, class
 * and generation it read) before it clears a bit, so a wrong free racing
 * a give-back and a re-cut of the chunk is refused, not applied to the
 * new cut's bitmap.
 *
 * All of this is the client's own memory (slab headers inside its heap;
 * the lists and per-SM words in its private device memory). Indices read
 * from it are bounded before use, so a scribbled list can only lose blocks
 * or hand them out twice within this heap, never write outside it.
 *
 * Every function here is inlined on the GPU (GPUSYS_FN is
 * __forceinline__), so each call site of a slow path is a whole copy of
 * it, and nested sites multiply: with the claim retiring a slab from three
 * places, take asking for a chunk from two and the chunk request asking
 * twice, one malloc held a dozen copies of the chunk request and of trim,
 * and cicc ran for more than ten minutes on test_gpu_alloc.cu. So each
 * slow path has one call site in its caller (the claim's retire, take's
 * chunk request, the request's retry loop). Out of line (__noinline__)
 * they compiled faster still, but every kernel then needed 25-75 more
 * registers per thread: ptxas keeps a caller's live values apart from the
 * registers of what it calls, down the whole chain.
 */
#ifndef GPUSYS_ALLOC_SLAB_H
#define GPUSYS_ALLOC_SLAB_H

#include "alloc_lanes.h"

/* GPUSYS_ALLOC_LEADER_NOINLINE (bench/device-alloc-variants.sh): the
 * leader's paths out of line, to see whether how ptxas optimises them
 * inlined is what faults with divergent calls of one warp. */
#if defined(__CUDACC__) && defined(GPUSYS_ALLOC_LEADER_NOINLINE)
#define GPUSYS_SLAB_LEADER_FN static __device__ __noinline__
#else
#define GPUSYS_SLAB_LEADER_FN GPUSYS_FN
#endif

/* --------------------------------------------------------------- atomics */

#if defined(__CUDACC__)
/* Device scope: the heap is one GPU's memory. A reservation acquires what
 * the slab's last change of state published (a fresh bitmap); a claim
 * acquires what the last free of a slot published (the block's bytes),
 * frees release them. Counts taken back need no order. */
GPUSYS_FN unsigned long long gpusys_slab_reserve(unsigned long long *p, unsigned long long v)
{
	unsigned long long old;
	asm volatile("atom.acquire.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
}
GPUSYS_FN unsigned long long gpusys_slab_add(unsigned long long *p, unsigned long long v)
{
	unsigned long long old;
	asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
}
GPUSYS_FN unsigned long long gpusys_slab_or(unsigned long long *p, unsigned long long v)
{
	unsigned long long old;
	asm volatile("atom.acquire.gpu.global.or.b64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
}
GPUSYS_FN unsigned long long gpusys_slab_and(unsigned long long *p, unsigned long long v)
{
	unsigned long long old;
	asm volatile("atom.release.gpu.global.and.b64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
}
GPUSYS_FN int gpusys_slab_cas(unsigned long long *p, unsigned long long expect, unsigned long long want)
{
	unsigned long long old;
	asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, %3;"
		     : "=l"(old)
		     : "l"(p), "l"(expect), "l"(want)
		     : "memory");
	return old == expect;
}
GPUSYS_FN unsigned long long gpusys_slab_load(const unsigned long long *p)
{
	unsigned long long v;
	asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}
GPUSYS_FN uint32_t gpusys_slab_load32(const uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}
GPUSYS_FN void gpusys_slab_store32(uint32_t *p, uint32_t v)
{
	asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
GPUSYS_FN void gpusys_slab_store(unsigned long long *p, unsigned long long v)
{
	asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
GPUSYS_FN uint32_t gpusys_slab_group(const gpusys_heap_dev_t *hp)
{
	uint32_t sm;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	return sm % hp->pool->groups;
}
/* The n-th (from 0) set bit of v; v has more than n. */
GPUSYS_FN uint32_t gpusys_slab_nth_bit(unsigned long long v, uint32_t n)
{
	uint32_t lo = (uint32_t)v, c = (uint32_t)__popc(lo);
	if (n < c)
		return __fns(lo, 0, (int)n + 1);
	return 32u + __fns((uint32_t)(v >> 32), 0, (int)(n - c) + 1);
}
#else
GPUSYS_FN unsigned long long gpusys_slab_reserve(unsigned long long *p, unsigned long long v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_ACQUIRE);
}
GPUSYS_FN unsigned long long gpusys_slab_add(unsigned long long *p, unsigned long long v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
GPUSYS_FN unsigned long long gpusys_slab_or(unsigned long long *p, unsigned long long v)
{
	return __atomic_fetch_or(p, v, __ATOMIC_ACQUIRE);
}
GPUSYS_FN unsigned long long gpusys_slab_and(unsigned long long *p, unsigned long long v)
{
	return __atomic_fetch_and(p, v, __ATOMIC_RELEASE);
}
GPUSYS_FN int gpusys_slab_cas(unsigned long long *p, unsigned long long expect, unsigned long long want)
{
	return __atomic_compare_exchange_n(p, &expect, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}
GPUSYS_FN unsigned long long gpusys_slab_load(const unsigned long long *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
GPUSYS_FN uint32_t gpusys_slab_load32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
GPUSYS_FN void gpusys_slab_store32(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}
GPUSYS_FN void gpusys_slab_store(unsigned long long *p, unsigned long long v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}
GPUSYS_FN uint32_t gpusys_slab_group(const gpusys_heap_dev_t *hp)
{
	return gpusys_port_hint() % hp->pool->groups;
}
GPUSYS_FN uint32_t gpusys_slab_nth_bit(unsigned long long v, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		v &= v - 1;
	return (uint32_t)__builtin_ctzll(v);
}
#endif

GPUSYS_FN uint32_t gpusys_slab_popc(unsigned long long v)
{
	return (uint32_t)__builtin_popcountll(v);
}

/* How a trim is asked for: by gpusys_heap_trim (waits for a trim under
 * way, then runs), or by a free that emptied a slab (skipped while another
 * warp trims, and within a quarter of the trim delay of the last one: a
 * trim walks every partial list and the free list under their locks, and
 * at 1 KiB every other warp's free empties a slab). Empty slabs wait on
 * their class's list meanwhile, where that class takes them first, and a
 * class that finds the free list empty trims (spaced out the same way)
 * before it asks gpusysd for a chunk (gpusys_slab_take_leader). */
#define GPUSYS_TRIM_NOW 0u
#define GPUSYS_TRIM_LAZY 1u
#define GPUSYS_TRIM_FORCE 2u /* at the client's limit: chunks back without the delay */

/* ------------------------------------------------------------ the layout */

GPUSYS_FN struct gpusys_alloc_slab *gpusys_slab_at(const gpusys_heap_dev_t *hp, uint32_t s)
{
	return (struct gpusys_alloc_slab *)(hp->base + ((uint64_t)s << GPUSYS_ALLOC_SLAB_SHIFT));
}

GPUSYS_FN unsigned long long *gpusys_slab_bits(struct gpusys_alloc_slab *sl)
{
	return (unsigned long long *)(sl + 1);
}

/* Slab s's ctl word (private memory), and that of the slab whose header
 * is sl. */
GPUSYS_FN unsigned long long *gpusys_slab_ctl(const gpusys_heap_dev_t *hp, uint32_t s)
{
	return &hp->slab_ctl[s];
}
GPUSYS_FN unsigned long long *gpusys_slab_ctl_of(const gpusys_heap_dev_t *hp, const struct gpusys_alloc_slab *sl)
{
	return gpusys_slab_ctl(hp, (uint32_t)((uint64_t)((const uint8_t *)sl - hp->base) >> GPUSYS_ALLOC_SLAB_SHIFT));
}

/* Whether ctl value v is state st, class c, count live (any generation). */
GPUSYS_FN int gpusys_slab_ctl_is(unsigned long long v, uint32_t st, uint32_t c, uint32_t live)
{
	return (v & ~GPUSYS_SLAB_CTL_GEN_MASK) == GPUSYS_SLAB_CTL(st, c, live);
}

/* Whether slab number s lies in a pool chunk of this heap: the only slabs
 * whose headers may be touched (a number read from a list could be
 * anything). */
GPUSYS_FN int gpusys_slab_valid(const gpusys_heap_dev_t *hp, uint32_t s)
{
	uint64_t off = (uint64_t)s << GPUSYS_ALLOC_SLAB_SHIFT;
	if (off >= hp->reserve)
		return 0;
	uint32_t co = gpusys_slab_load32(&hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT]);
	/* a whole-chunk slab has its header at the chunk's start only; a
	 * chunk being given back is still walked by trim (GONE) */
	return co != 0 && (!(co & GPUSYS_CHUNK_WHOLE) || s % GPUSYS_ALLOC_CHUNK_SLABS == 0);
}

/* The slab holding offset off of a pool chunk whose chunk_of entry is co:
 * its 64 KiB slab, or the whole chunk. */
GPUSYS_FN uint32_t gpusys_slab_of(uint64_t off, uint32_t co)
{
	uint32_t s = (uint32_t)(off >> GPUSYS_ALLOC_SLAB_SHIFT);
	return co & GPUSYS_CHUNK_WHOLE ? s - s % GPUSYS_ALLOC_CHUNK_SLABS : s;
}

/* SM group g's words for class c: [0] its current slab (number + 1) and
 * [1] that word's lock; [2] its partial list (slabs frees made room in:
 * number + 1, linked through the headers) and [3] that list's lock.
 * Whole-chunk classes share theirs among fewer groups. The partial lists
 * are per group, not per class, because at 1 KiB a slab holds 63 blocks:
 * every other warp call swaps its SM's slab and every other free lists one,
 * and one lock per class for all SMs serialised the GPU on it. A slab goes
 * on the list of the SM that freed it (the SM that took it, in a kernel
 * that frees where it mallocs); trim moves empty ones to the pool. */
GPUSYS_FN uint32_t *gpusys_slab_cur(const gpusys_heap_dev_t *hp, uint32_t g, uint32_t c)
{
	if (gpusys_slab_whole(c))
		g %= GPUSYS_SLAB_WHOLE_GROUPS;
	return &hp->cur[(g * GPUSYS_SLAB_CLASSES + c) * 4u];
}

/* Move a slab (its ctl word) from state `from` to `to` (class cls),
 * keeping its count and adding gen to its generation. 0 when it was not in
 * `from` with class cls (check_cls: check the class). */
GPUSYS_FN int gpusys_slab_move(unsigned long long *ctl, uint32_t from, uint32_t to, uint32_t cls, int check_cls,
			       uint32_t gen)
{
	for (;;) {
		unsigned long long v = gpusys_slab_load(ctl);
		if (GPUSYS_SLAB_CTL_STATE(v) != from || (check_cls && GPUSYS_SLAB_CTL_CLS(v) != cls))
			return 0;
		unsigned long long g = ((v >> 48) + gen) << 48;
		if (gpusys_slab_cas(ctl, v, g | GPUSYS_SLAB_CTL(to, cls, GPUSYS_SLAB_CTL_LIVE(v))))
			return 1;
	}
}

/* A slab whose chunk has just come from gpusysd: its ctl word must be
 * FREE, as trim left it (a chunk goes back only with every slab FREE) or
 * as the heap opened (zeroed). Its count may hold reservations of warps
 * that read the slab's number before the chunk went back: kept, they are
 * taken back. Anything else is a bug here: the state and class are
 * cleared with an atomic AND, which keeps the count, so no concurrent
 * reservation is wiped (the plain store this replaces could, and the
 * later take-back then borrowed from the class bits). */
GPUSYS_FN void gpusys_slab_fresh(const gpusys_heap_dev_t *hp, uint32_t s)
{
	unsigned long long *ctl = gpusys_slab_ctl(hp, s);
	if (GPUSYS_SLAB_CTL_STATE(gpusys_slab_load(ctl)) != GPUSYS_SLAB_FREE) {
		gpusys_slab_add(&hp->pool->corrupt_slabs, 1);
		gpusys_slab_and(ctl, GPUSYS_SLAB_CTL_GEN_MASK | 0xffffffffull);
	}
}

/* Take cnt counts back from slab sl (blocks whose bits are clear, or
 * reservations, or a free's pin), and do what its state asks: a DETACHED
 * slab with room again goes onto this SM group's partial list of its
 * class. Every count taken back comes here: a slab retired on a count that
 * was mostly other warps' reservations is listed by the last of them to
 * leave (a plain add there left an empty slab DETACHED for good: no free
 * would ever list it). cnt 0 only looks. Returns whether the slab is now
 * empty and no SM's current one (trim may give it back). One lane. */
GPUSYS_SLAB_LEADER_FN uint32_t gpusys_slab_put_back_leader(const gpusys_heap_dev_t *hp, struct gpusys_alloc_slab *sl, uint32_t cnt)
{
	unsigned long long *ctl = gpusys_slab_ctl_of(hp, sl);
	unsigned long long old = gpusys_slab_add(ctl, (unsigned long long)-(long long)cnt);
	uint32_t c = GPUSYS_SLAB_CTL_CLS(old), st = GPUSYS_SLAB_CTL_STATE(old);
	uint32_t live = GPUSYS_SLAB_CTL_LIVE(old) - cnt;
	if (st == GPUSYS_SLAB_DETACHED && c < GPUSYS_SLAB_CLASSES && live <= gpusys_slab_usable(c) / 2 &&
	    gpusys_slab_move(ctl, GPUSYS_SLAB_DETACHED, GPUSYS_SLAB_LISTED, c, 1, 0)) {
		uint32_t *list = gpusys_slab_cur(hp, gpusys_slab_group(hp), c) + 2;
		uint32_t s = (uint32_t)((uint64_t)((uint8_t *)sl - hp->base) >> GPUSYS_ALLOC_SLAB_SHIFT);
		gpusys_alloc_lock(&list[1]);
		gpusys_slab_store32(&sl->next, gpusys_slab_load32(&list[0]));
		gpusys_slab_store32(&list[0], s + 1);
		gpusys_lock_release(&list[1]);
		st = GPUSYS_SLAB_LISTED;
	}
	return live == 0 && st != GPUSYS_SLAB_ACTIVE && st != GPUSYS_SLAB_BROKEN;
}

/* -------------------------------------------------------- the pool (leader) */

/* Put free slab s on the pool's list (pool lock held): chunk_of counts the
 * chunk's free slabs, and a chunk whose slabs are all free is stamped, for
 * trim's delay. */
GPUSYS_FN void gpusys_slab_push_free_locked(const gpusys_heap_dev_t *hp, uint32_t s)
{
	struct gpusys_alloc_pool *po = hp->pool;
	struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s);
	uint32_t ci = s / GPUSYS_ALLOC_CHUNK_SLABS;
	gpusys_slab_store32(&sl->next, gpusys_slab_load32(&po->free_head));
	gpusys_slab_store32(&po->free_head, s + 1);
	gpusys_slab_store32(&po->free_slabs, gpusys_slab_load32(&po->free_slabs) + 1);
	uint32_t n = gpusys_slab_load32(&hp->chunk_of[ci]) + 1;
	gpusys_slab_store32(&hp->chunk_of[ci], n);
	if (n == 1 + GPUSYS_ALLOC_CHUNK_SLABS)
		gpusys_slab_store(&gpusys_slab_at(hp, ci * GPUSYS_ALLOC_CHUNK_SLABS)->since, gpusys_alloc_now_ns());
}

/* Ask gpusysd for one more pool chunk: 0 and its offset, or -errno
 * (-ENOMEM: the client's limit). Waits for the mapping thread when the
 * chunk is granted but not mapped. Lane l, alone. */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_chunk_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l,
				       uint64_t *ret_off)
{
	struct gpusys_alloc_pool *po = hp->pool;
	struct gpusys_alloc_resp a;
	for (;;) {
		uint64_t mapped = gpusys_load_shared_u64(&hp->ctl->mapped);
		a.grant = 0;
		int r = gpusys_alloc_rpc_one(dev, hp, l, GPUSYS_OP_ALLOC_MALLOC, GPUSYS_ALLOC_CHUNK_BYTES,
					     GPUSYS_ALLOC_CHUNK_BYTES, GPUSYS_ALLOC_F_POOL, &a);
		if (r == -EAGAIN) {
			r = gpusys_alloc_wait_mapped(dev, hp, a.grant, mapped);
			if (r)
				return r;
			continue;
		}
		if (r)
			return r;
		/* Ask for the grant ahead of need: the mapping is made before
		 * the next chunk is wanted. */
		gpusys_alloc_want(hp, a.grant);
		break;
	}
	/* gpusysd is trusted for this: a chunk, aligned, inside the range. */
	if (a.off % GPUSYS_ALLOC_CHUNK_BYTES || a.off + GPUSYS_ALLOC_CHUNK_BYTES > hp->reserve)
		return -EIO;
	if (a.size)
		gpusys_slab_store(&po->trim_delay_ns, a.size); /* the daemon's alloc_trim_delay_ms, in ns */
	/* The chunk lies below the mapped prefix the request carried (gpusysd
	 * grants nothing above it: -EAGAIN), and the prefix never shrinks
	 * while the heap is open: malloc's last check bounds blocks by this. */
	for (uint64_t hi = gpusys_slab_load(&po->pool_hi); hi < a.off + GPUSYS_ALLOC_CHUNK_BYTES;) {
		if (gpusys_slab_cas(&po->pool_hi, hi, a.off + GPUSYS_ALLOC_CHUNK_BYTES))
			break;
		hi = gpusys_slab_load(&po->pool_hi);
	}
	*ret_off = a.off;
	return 0;
}

GPUSYS_SLAB_LEADER_FN int gpusys_slab_trim_when_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l,
					   uint32_t how);

/* A new chunk, and when the client's limit is reached, one more try after
 * a trim that does not wait for the delay: the pool's empty chunks go back
 * to gpusysd first. */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_chunk_or_trim_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l,
					       uint64_t *ret_off)
{
	/* a loop, not two calls: one copy of the request where it is inlined */
	for (int again = 0;; again = 1) {
		int r = gpusys_slab_chunk_leader(dev, hp, l, ret_off);
		if (again || r != -ENOMEM || gpusys_slab_trim_when_leader(dev, hp, l, GPUSYS_TRIM_FORCE) <= 0)
			return r;
	}
}

/* The pool chunk at off, just granted (gpusys_slab_chunk_or_trim_leader),
 * cut into 64 KiB slabs: the first is the caller's (returned, its number),
 * the others go on the free list. They are linked to each other before the
 * pool lock is taken, with stores only, and the chain is put on the list
 * with one load of its head: pushed one at a time under the lock, each
 * slab was three loads of pool words that the next push waited for. The
 * caller keeps a slab, so the SM that waited on gpusysd for the chunk is
 * served even when SMs waiting on the list take the rest first. The
 * leader, alone. */
GPUSYS_SLAB_LEADER_FN uint32_t gpusys_slab_grow_leader(const gpusys_heap_dev_t *hp, uint64_t off)
{
	struct gpusys_alloc_pool *po = hp->pool;
	uint32_t first = (uint32_t)(off >> GPUSYS_ALLOC_SLAB_SHIFT), n = GPUSYS_ALLOC_CHUNK_SLABS;
	for (uint32_t i = 0; i < n; i++) {
		struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, first + i);
		gpusys_slab_fresh(hp, first + i);
		gpusys_slab_store32(&sl->hint, 0);
		gpusys_slab_store(&sl->since, 0);
		/* slab number + 1 of the next; the first is not listed */
		gpusys_slab_store32(&sl->next, i > 0 && i + 1 < n ? first + i + 2 : 0);
	}
	struct gpusys_alloc_slab *last = gpusys_slab_at(hp, first + n - 1);
	gpusys_alloc_lock(&po->lock);
	gpusys_slab_store32(&last->next, gpusys_slab_load32(&po->free_head));
	gpusys_slab_store32(&po->free_head, first + 2);
	gpusys_slab_store32(&po->free_slabs, gpusys_slab_load32(&po->free_slabs) + n - 1);
	gpusys_slab_store32(&hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT], n); /* 1 + its n - 1 free slabs */
	gpusys_slab_store32(&po->chunks, gpusys_slab_load32(&po->chunks) + 1);
	gpusys_slab_store(&po->chunks_got, gpusys_slab_load(&po->chunks_got) + 1);
	gpusys_lock_release(&po->lock);
	return first;
}

/* Cut free slab s for class c: its bitmap with the header's own slots (and
 * any beyond the last) taken, then ACTIVE. */
GPUSYS_FN void gpusys_slab_cut(const gpusys_heap_dev_t *hp, uint32_t s, uint32_t c)
{
	struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s);
	unsigned long long *bits = gpusys_slab_bits(sl);
	uint32_t words = gpusys_slab_words(c), first = gpusys_slab_first(c), slots = gpusys_slab_slots(c);
	for (uint32_t w = 0; w < words; w++) {
		unsigned long long v = 0;
		for (uint32_t b = 0; b < 64; b++) {
			uint32_t slot = w * 64u + b;
			if (slot < first || slot >= slots)
				v |= 1ull << b;
		}
		gpusys_slab_store(&bits[w], v);
	}
	gpusys_slab_store32(&sl->next, 0);
	gpusys_slab_store32(&sl->hint, first / 64u);
	/* Stale reservations of a warp that read this slab before it was
	 * freed may still be in the count: kept, they are taken back. The
	 * CAS orders the bitmap's stores before the state others test; the
	 * new generation tells a free that read the old cut it is stale. */
	gpusys_slab_move(gpusys_slab_ctl(hp, s), GPUSYS_SLAB_FREE, GPUSYS_SLAB_ACTIVE, c, 0, 1);
}

/* Another SM is getting the pool a chunk: wait until it is done. 1 to
 * take from the free list again; 0 when the wait has lasted past the
 * mapping wait's bound since *since (set at the first wait): then the
 * caller asks for a chunk of its own. */
GPUSYS_FN int gpusys_slab_wait_growth(const gpusys_heap_dev_t *hp, uint64_t *since)
{
	struct gpusys_alloc_pool *po = hp->pool;
	if (!*since) {
		*since = gpusys_alloc_now_ns();
		gpusys_slab_add(&po->growths_waited, 1);
	}
	for (uint32_t spins = 1; gpusys_slab_load32(&po->growing); spins++) {
		gpusys_spin_pause();
		if (spins % GPUSYS_SPIN_CHECK_EVERY == 0) {
			if (gpusys_alloc_now_ns() - *since > GPUSYS_ALLOC_MAP_WAIT_NS)
				return 0;
			gpusys_spin_yield();
		}
	}
	return 1;
}

/* A slab for an SM's class c: one from its group's partial list of the class, else a
 * free one, else from a new chunk. 0 and *ret_s, or -errno. */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_take_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l, uint32_t g,
				      uint32_t c, uint32_t *ret_s)
{
	struct gpusys_alloc_pool *po = hp->pool;
	uint32_t *list = gpusys_slab_cur(hp, g, c) + 2;
	for (;;) {
		gpusys_alloc_lock(&list[1]);
		uint32_t s1 = gpusys_slab_load32(&list[0]);
		if (s1 && !gpusys_slab_valid(hp, s1 - 1)) {
			gpusys_slab_store32(&list[0], 0); /* scribbled: drop the list */
			s1 = 0;
		}
		if (s1) {
			struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
			gpusys_slab_store32(&list[0], gpusys_slab_load32(&sl->next));
			gpusys_slab_store32(&sl->next, 0);
		}
		gpusys_lock_release(&list[1]);
		if (!s1)
			break;
		struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
		if (gpusys_slab_move(gpusys_slab_ctl(hp, s1 - 1), GPUSYS_SLAB_LISTED, GPUSYS_SLAB_ACTIVE, c, 1, 0)) {
			gpusys_slab_store(&sl->since, 0); /* in use again: trim's clock stops */
			*ret_s = s1 - 1;
			return 0;
		}
	}
	/* A class above 2 KiB: a new chunk is its slab. The others: a free
	 * slab, else a new chunk cut into slabs. One chunk request for both
	 * (where it is inlined, each call was a copy of the request and of
	 * trim). */
	int whole = gpusys_slab_whole(c);
	uint64_t waited_since = 0;
	for (uint32_t trimmed = 0;;) {
		if (!whole) {
			gpusys_alloc_lock(&po->lock);
			uint32_t s1 = gpusys_slab_load32(&po->free_head);
			if (s1 && !gpusys_slab_valid(hp, s1 - 1)) {
				gpusys_slab_store32(&po->free_head, 0); /* scribbled: drop the list */
				gpusys_slab_store32(&po->free_slabs, 0);
				s1 = 0;
			}
			if (s1) {
				struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
				uint32_t ci = (s1 - 1) / GPUSYS_ALLOC_CHUNK_SLABS;
				uint32_t n = gpusys_slab_load32(&hp->chunk_of[ci]);
				gpusys_slab_store32(&po->free_head, gpusys_slab_load32(&sl->next));
				gpusys_slab_store32(&po->free_slabs, gpusys_slab_load32(&po->free_slabs) - 1);
				gpusys_slab_store32(&hp->chunk_of[ci], n - 1);
				if (n == 1 + GPUSYS_ALLOC_CHUNK_SLABS)
					gpusys_slab_store(&gpusys_slab_at(hp, ci * GPUSYS_ALLOC_CHUNK_SLABS)->since, 0);
			}
			gpusys_lock_release(&po->lock);
			if (s1) {
				gpusys_slab_cut(hp, s1 - 1, c);
				*ret_s = s1 - 1;
				return 0;
			}
			/* Empty slabs of other classes may wait on their lists
			 * (trims from frees are spaced out): take them before a
			 * chunk. Spaced out here too: a trim peeks at every
			 * group's lists (groups x classes loads), and a heap
			 * growing from empty takes a chunk per 32 slabs. */
			if (!trimmed++) {
				int t = gpusys_slab_trim_when_leader(dev, hp, l, GPUSYS_TRIM_LAZY);
				if (t >= 0 && gpusys_slab_load32(&po->free_head))
					continue;
			}
		}
		/* The free list is empty. One SM at a time asks gpusysd for a
		 * chunk of slabs; the others wait for its 32 slabs and take
		 * from the list again (132 SMs starting together took a 2 MiB
		 * chunk each, 264 MiB for 132 slabs, each SM waiting on its
		 * own request and the mappings they made). A grower that
		 * holds the flag past the mapping wait's bound (a scribbled
		 * flag) no longer holds the others back. */
		int grower = 1;
		if (!whole && !gpusys_lock_try(&po->growing)) {
			if (gpusys_slab_wait_growth(hp, &waited_since))
				continue;
			grower = 0;
		}
		uint64_t off = 0;
		int r = gpusys_slab_chunk_or_trim_leader(dev, hp, l, &off);
		if (!whole) {
			uint32_t s = r ? 0 : gpusys_slab_grow_leader(hp, off);
			if (grower)
				gpusys_lock_release(&po->growing);
			if (r)
				return r;
			gpusys_slab_cut(hp, s, c);
			*ret_s = s;
			return 0;
		}
		if (r)
			return r;
		uint32_t s = (uint32_t)(off >> GPUSYS_ALLOC_SLAB_SHIFT);
		struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s);
		gpusys_slab_fresh(hp, s);
		gpusys_slab_store(&sl->since, 0);
		gpusys_alloc_lock(&po->lock);
		gpusys_slab_store32(&hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT], GPUSYS_CHUNK_WHOLE | 1u);
		gpusys_slab_store32(&po->chunks, gpusys_slab_load32(&po->chunks) + 1);
		gpusys_slab_store(&po->chunks_got, gpusys_slab_load(&po->chunks_got) + 1);
		gpusys_lock_release(&po->lock);
		gpusys_slab_cut(hp, s, c);
		*ret_s = s;
		return 0;
	}
}

/* Retire SM group g's current slab of class c (cur's word read as s1) to
 * state `to` (DETACHED, or BROKEN) and take another, under cur's lock: 0,
 * or -errno. A slab retired on a count that held other warps' reservations
 * may be nearly empty: whichever count leaves it last lists it
 * (gpusys_slab_put_back_leader); the look with cnt 0 here lists it when
 * they all left before the move. Lane l. */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_retire_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l, uint32_t g,
					uint32_t c, uint32_t s1, uint32_t to)
{
	uint32_t *cur = gpusys_slab_cur(hp, g, c);
	gpusys_alloc_lock(&cur[1]);
	int r = 0;
	if (gpusys_slab_load32(cur) == s1) {
		uint32_t ns = 0;
		if (s1 && gpusys_slab_valid(hp, s1 - 1) &&
		    gpusys_slab_move(gpusys_slab_ctl(hp, s1 - 1), GPUSYS_SLAB_ACTIVE, to, c, 1, 0) &&
		    to == GPUSYS_SLAB_DETACHED)
			gpusys_slab_put_back_leader(hp, gpusys_slab_at(hp, s1 - 1), 0);
		r = gpusys_slab_take_leader(dev, hp, l, g, c, &ns);
		gpusys_slab_store32(cur, r ? 0u : ns + 1);
	}
	gpusys_lock_release(&cur[1]);
	return r;
}

/* The bits of bitmap word w of a class-c slab that are no block: past the
 * last slot (a class whose blocks do not fill the last word: 2 KiB and
 * 64 KiB have 32), where gpusys_slab_cut sets them for good. */
GPUSYS_FN unsigned long long gpusys_slab_spare(uint32_t c, uint32_t w)
{
	uint32_t slots = gpusys_slab_slots(c);
	if ((w + 1u) * 64u <= slots)
		return 0;
	if (w * 64u >= slots)
		return ~0ull;
	return ~0ull << (slots - w * 64u);
}

/* A claim found a bit past the blocks of its slab clear: count it
 * (corrupt_slabs, and to gpusysd as an unallocated refusal). The claim
 * then retires the slab as BROKEN (see below). Lane l. */
GPUSYS_SLAB_LEADER_FN void gpusys_slab_broken_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l)
{
	gpusys_slab_add(&hp->pool->corrupt_slabs, 1);
	gpusys_slab_add(&hp->pool->refused_unallocated, 1);
	gpusys_alloc_rpc_one(dev, hp, l, GPUSYS_OP_ALLOC_REPORT, GPUSYS_ALLOC_REFUSED_UNALLOCATED, 0, 0, NULL);
}

/*
 * Claim up to n slots of class c for SM group g from one bitmap word of its
 * current slab: 0 with *ret_s, *ret_w and *ret_bits (at least one bit), or
 * -errno when no slab can be had (-ENOMEM: the client's limit). Lane l.
 *
 * A claim never hands out a bit past the slab's blocks: such a bit was
 * clear only because the bitmap was scribbled (a kernel writing past its
 * block into the next slab's header), and its address would be past the
 * slab (2 MiB on for 64 KiB blocks: maybe unmapped, an MMU fault). It is
 * set again, counted (corrupt_slabs, and reported to gpusysd as an
 * unallocated refusal), and the slab is retired as BROKEN: the SM takes
 * another, and the slab is never handed out from again (its bitmap and
 * count disagree: listed, it would come back as a current slab whose
 * count promises slots its bitmap does not have, and claims would spin).
 */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_claim_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l, uint32_t g,
				       uint32_t c, uint32_t n, uint32_t *ret_s, uint32_t *ret_w,
				       unsigned long long *ret_bits)
{
	uint32_t *cur = gpusys_slab_cur(hp, g, c);
	uint32_t usable = gpusys_slab_usable(c), words = gpusys_slab_words(c);
	for (;;) {
		/* What the retire at the bottom makes of the current slab, and
		 * whether slots were got all the same (then they are returned
		 * whatever the retire says). One retire site: each is a call
		 * of the whole slow path (take, a chunk, trim). */
		uint32_t to = GPUSYS_SLAB_DETACHED, got_any = 0;
		uint32_t s1 = gpusys_slab_load32(cur);
		if (s1 && gpusys_slab_valid(hp, s1 - 1)) {
			struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
			unsigned long long old = gpusys_slab_reserve(gpusys_slab_ctl(hp, s1 - 1), n);
			uint32_t live = GPUSYS_SLAB_CTL_LIVE(old);
			if (GPUSYS_SLAB_CTL_STATE(old) == GPUSYS_SLAB_ACTIVE && GPUSYS_SLAB_CTL_CLS(old) == c &&
			    live < usable) {
				/* k slots are ours: they are free somewhere in the bitmap */
				uint32_t k = usable - live < n ? usable - live : n;
				if (k < n)
					gpusys_slab_put_back_leader(hp, sl, n - k);
				unsigned long long *bits = gpusys_slab_bits(sl);
				uint32_t h = gpusys_slab_load32(&sl->hint) % words;
				int bad = 0;
				for (uint32_t i = 0; i < words && !bad; i++) {
					uint32_t w = h + i < words ? h + i : h + i - words;
					unsigned long long f = ~gpusys_slab_load(&bits[w]);
					while (f) {
						unsigned long long t = 0;
						for (uint32_t j = 0; j < k && f; j++) {
							t |= f & (0ull - f);
							f &= f - 1;
						}
						unsigned long long was = gpusys_slab_or(&bits[w], t);
						unsigned long long got = t & ~was;
						unsigned long long spare = got & gpusys_slab_spare(c, w);
						if (spare) {
							/* the OR set them again: the bitmap is
							 * whole; those bits are no blocks */
							got &= ~spare;
							bad = 1;
						}
						if (got) {
							uint32_t m = gpusys_slab_popc(got);
							if (m < k)
								gpusys_slab_put_back_leader(hp, sl, k - m);
							if (w != h)
								gpusys_slab_store32(&sl->hint, w);
							*ret_s = s1 - 1;
							*ret_w = w;
							*ret_bits = got;
							if (!bad)
								return 0;
							/* the slots got are real: handed out
							 * (below); the next claim takes
							 * another slab */
							got_any = 1;
							break;
						}
						if (bad)
							break;
						f = ~was;
					}
				}
				if (!bad) {
					/* Other warps' reservations hold the free
					 * bits for a moment: give ours back and
					 * look again. */
					gpusys_slab_put_back_leader(hp, sl, k);
					gpusys_spin_pause();
					continue;
				}
				if (!got_any)
					gpusys_slab_put_back_leader(hp, sl, k);
				gpusys_slab_broken_leader(dev, hp, l);
				to = GPUSYS_SLAB_BROKEN;
			} else {
				gpusys_slab_put_back_leader(hp, sl, n);
			}
		}
		/* The current slab is full (or none yet) or broken: retire it,
		 * take another. */
		int r = gpusys_slab_retire_leader(dev, hp, l, g, c, s1, to);
		if (got_any)
			return 0;
		if (r)
			return r;
	}
}

/* ------------------------------------------------------------------ trim */

/*
 * Give back what is empty: LISTED slabs without a live block go to the free
 * list; pool chunks whose slabs have all been free for trim_delay_ns go back
 * to gpusysd (a FREE of the chunk), which can hand the memory out again.
 * Returns how many chunks went back, or -errno. Lane l.
 */
GPUSYS_SLAB_LEADER_FN int gpusys_slab_trim_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l, int force)
{
	struct gpusys_alloc_pool *po = hp->pool;
	const uint32_t GONE = GPUSYS_CHUNK_GONE;
	uint64_t now = gpusys_alloc_now_ns(), delay = force ? 0 : gpusys_slab_load(&po->trim_delay_ns);
	uint32_t marked = 0;
	uint32_t groups = gpusys_slab_load32(&po->groups);
	/* Current slabs with no block: detached and listed, so that the walk
	 * below frees them and their chunks can go back (an SM's current
	 * slab was never trimmed: the last slabs a kernel used pinned their
	 * chunks, most often the heap's top, until the heap closed). A warp
	 * that read the slab as current finds it DETACHED, gives its
	 * reservation back and takes another; the next malloc of the SM
	 * takes a slab as after a full one. At most once a trim, which runs
	 * at most once in a quarter of the delay. */
	for (uint32_t gc = 0; gc < groups * GPUSYS_SLAB_CLASSES; gc++) {
		uint32_t g = gc / GPUSYS_SLAB_CLASSES, c = gc % GPUSYS_SLAB_CLASSES;
		if (gpusys_slab_whole(c) && g >= GPUSYS_SLAB_WHOLE_GROUPS)
			continue;
		uint32_t *cur = gpusys_slab_cur(hp, g, c);
		uint32_t s1 = gpusys_slab_load32(cur);
		if (!s1 || !gpusys_slab_valid(hp, s1 - 1) ||
		    !gpusys_slab_ctl_is(gpusys_slab_load(gpusys_slab_ctl(hp, s1 - 1)), GPUSYS_SLAB_ACTIVE, c, 0))
			continue;
		/* Tried, never waited for: its holder is retiring this slab
		 * anyway, and may itself be waiting for a chunk that this
		 * trim's warp is getting (the forced trim at the limit). */
		if (!gpusys_lock_try(&cur[1]))
			continue;
		if (gpusys_slab_load32(cur) == s1 &&
		    gpusys_slab_move(gpusys_slab_ctl(hp, s1 - 1), GPUSYS_SLAB_ACTIVE, GPUSYS_SLAB_DETACHED, c, 1, 0)) {
			gpusys_slab_store32(cur, 0);
			gpusys_slab_put_back_leader(hp, gpusys_slab_at(hp, s1 - 1), 0);
		}
		gpusys_lock_release(&cur[1]);
	}
	for (uint32_t gc = 0; gc < groups * GPUSYS_SLAB_CLASSES; gc++) {
		uint32_t g = gc / GPUSYS_SLAB_CLASSES, c = gc % GPUSYS_SLAB_CLASSES;
		if (gpusys_slab_whole(c) && g >= GPUSYS_SLAB_WHOLE_GROUPS)
			continue; /* the same lists as g % GPUSYS_SLAB_WHOLE_GROUPS */
		uint32_t *list = gpusys_slab_cur(hp, g, c) + 2;
		if (!gpusys_slab_load32(&list[0]))
			continue; /* a slab listed meanwhile waits for the next trim */
		gpusys_alloc_lock(&list[1]);
		uint32_t *link = &list[0];
		uint32_t s1;
		while ((s1 = gpusys_slab_load32(link)) != 0) {
			if (!gpusys_slab_valid(hp, s1 - 1)) {
				gpusys_slab_store32(link, 0); /* scribbled: cut the list here */
				break;
			}
			struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
			int gone = 0;
			unsigned long long *ctl = gpusys_slab_ctl(hp, s1 - 1), v = gpusys_slab_load(ctl);
			if (gpusys_slab_ctl_is(v, GPUSYS_SLAB_LISTED, c, 0) && gpusys_slab_whole(c)) {
				/* A whole chunk: back to gpusysd once it has been
				 * seen empty for the delay (its clock starts now). */
				uint64_t since = gpusys_slab_load(&sl->since);
				if (!since)
					gpusys_slab_store(&sl->since, now);
				else if (now >= since && now - since >= delay &&
					 gpusys_slab_cas(ctl, v, (v & GPUSYS_SLAB_CTL_GEN_MASK) |
									 GPUSYS_SLAB_CTL(GPUSYS_SLAB_FREE, 0, 0)))
					gone = 2;
			} else if (!gpusys_slab_whole(c) && gpusys_slab_ctl_is(v, GPUSYS_SLAB_LISTED, c, 0) &&
				   gpusys_slab_cas(ctl, v, (v & GPUSYS_SLAB_CTL_GEN_MASK) |
							       GPUSYS_SLAB_CTL(GPUSYS_SLAB_FREE, 0, 0))) {
				gone = 1;
			}
			if (!gone) {
				link = &sl->next;
				continue;
			}
			gpusys_slab_store32(link, gpusys_slab_load32(&sl->next));
			gpusys_alloc_lock(&po->lock);
			if (gone == 1) {
				gpusys_slab_push_free_locked(hp, s1 - 1);
			} else {
				gpusys_slab_store32(&hp->chunk_of[(s1 - 1) / GPUSYS_ALLOC_CHUNK_SLABS], GONE);
				gpusys_slab_store32(&po->chunks, gpusys_slab_load32(&po->chunks) - 1);
				marked++;
			}
			gpusys_lock_release(&po->lock);
		}
		gpusys_lock_release(&list[1]);
	}

	/* Unlink every slab of the cut chunks old enough, marking them. The
	 * clock is read again: the loop above may have stamped chunks. */
	uint32_t cut_marked = 0;
	now = gpusys_alloc_now_ns();
	gpusys_alloc_lock(&po->lock);
	uint32_t *link = &po->free_head;
	uint32_t s1;
	while ((s1 = gpusys_slab_load32(link)) != 0) {
		if (!gpusys_slab_valid(hp, s1 - 1)) {
			gpusys_slab_store32(link, 0); /* scribbled: cut the list here */
			break;
		}
		uint32_t ci = (s1 - 1) / GPUSYS_ALLOC_CHUNK_SLABS;
		struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s1 - 1);
		uint32_t n = gpusys_slab_load32(&hp->chunk_of[ci]);
		if (n == 1 + GPUSYS_ALLOC_CHUNK_SLABS) {
			uint64_t since = gpusys_slab_load(&gpusys_slab_at(hp, ci * GPUSYS_ALLOC_CHUNK_SLABS)->since);
			if (since && now >= since && now - since >= delay) {
				gpusys_slab_store32(&hp->chunk_of[ci], GONE);
				cut_marked++;
				n = GONE;
			}
		}
		if (n == GONE) {
			gpusys_slab_store32(link, gpusys_slab_load32(&sl->next));
			gpusys_slab_store32(&po->free_slabs, gpusys_slab_load32(&po->free_slabs) - 1);
		} else {
			link = &sl->next;
		}
	}
	gpusys_slab_store32(&po->chunks, gpusys_slab_load32(&po->chunks) - cut_marked);
	gpusys_lock_release(&po->lock);
	marked += cut_marked;
	if (!marked)
		return 0;

	/* Back to gpusysd. A free of a stale pointer into such a chunk now
	 * goes to the daemon, which refuses it. */
	uint32_t nchunks = (uint32_t)(hp->reserve >> GPUSYS_ALLOC_CHUNK_SHIFT), back = 0;
	int err = 0;
	uint64_t grant = 0;
	for (uint32_t ci = 0; ci < nchunks && back < marked; ci++) {
		if (gpusys_slab_load32(&hp->chunk_of[ci]) != GONE)
			continue;
		gpusys_slab_store32(&hp->chunk_of[ci], 0);
		back++;
		struct gpusys_alloc_resp a;
		a.grant = 0;
		int r = gpusys_alloc_rpc_one(dev, hp, l, GPUSYS_OP_ALLOC_FREE, (uint64_t)ci << GPUSYS_ALLOC_CHUNK_SHIFT,
					     0, GPUSYS_ALLOC_F_POOL | GPUSYS_ALLOC_F_SHRINKS, &a);
		if (r && !err)
			err = r;
		if (!r && a.grant > grant)
			grant = a.grant;
	}
	/* gpusysd may have shrunk the heap (the top of it was free): the
	 * grant of the new epoch tells the mapping thread, which may unmap
	 * what lies above it (libclient/heap/heap_map.h). No block of this
	 * pool is there: the chunks went back after their slabs left every
	 * list. */
	gpusys_alloc_want(hp, grant);
	gpusys_alloc_lock(&po->lock);
	gpusys_slab_store(&po->chunks_trimmed, gpusys_slab_load(&po->chunks_trimmed) + back);
	gpusys_lock_release(&po->lock);
	return err ? err : (int)back;
}

GPUSYS_SLAB_LEADER_FN int gpusys_slab_trim_when_leader(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l,
					   uint32_t how)
{
	struct gpusys_alloc_pool *po = hp->pool;
	if (how == GPUSYS_TRIM_LAZY) {
		uint64_t now = gpusys_alloc_now_ns();
		if (now < gpusys_slab_load(&po->trim_next_ns) || !gpusys_lock_try(&po->trim_lock))
			return 0;
		gpusys_slab_store(&po->trim_next_ns, now + gpusys_slab_load(&po->trim_delay_ns) / 4u);
	} else {
		gpusys_alloc_lock(&po->trim_lock);
	}
	/* Trims run one at a time: two could both find a chunk GONE and give
	 * it back twice, the second time after gpusysd had granted it again. */
	int r = gpusys_slab_trim_leader(dev, hp, l, how == GPUSYS_TRIM_FORCE);
	gpusys_slab_store(&po->trims, gpusys_slab_load(&po->trims) + 1);
	gpusys_lock_release(&po->trim_lock);
	return r;
}

/* Whether off (in a pool chunk) is the start of a live small block: 0 and
 * *ret_bytes (its class's size), -EINVAL (inside a slot or the header) or
 * -ENOENT (not allocated). For realloc, which keeps or copies the block. */
/* The slab of off (chunk_of entry co), its class in *ret_c, off's place
 * in it, and the ctl value read in *ret_v (its generation: see the pin in
 * gpusys_slab_free_lanes); -ENOENT when the slab holds no blocks (free, or
 * a class that does not fit the chunk's kind). */
GPUSYS_FN int gpusys_slab_locate(const gpusys_heap_dev_t *hp, uint64_t off, uint32_t co,
				 struct gpusys_alloc_slab **ret_sl, uint32_t *ret_c, uint32_t *ret_rel,
				 unsigned long long *ret_v)
{
	uint32_t s = gpusys_slab_of(off, co);
	struct gpusys_alloc_slab *sl = gpusys_slab_at(hp, s);
	*ret_sl = sl;
	*ret_c = 0;
	*ret_rel = 0;
	*ret_v = 0;
	if (co & GPUSYS_CHUNK_GONE)
		return -ENOENT; /* trim is giving it back: no block is live there */
	unsigned long long v = gpusys_slab_load(gpusys_slab_ctl(hp, s));
	uint32_t c = GPUSYS_SLAB_CTL_CLS(v), st = GPUSYS_SLAB_CTL_STATE(v);
	*ret_v = v;
	*ret_sl = sl;
	*ret_c = c;
	*ret_rel = (uint32_t)(off - ((uint64_t)s << GPUSYS_ALLOC_SLAB_SHIFT));
	if (st == GPUSYS_SLAB_FREE || st > GPUSYS_SLAB_BROKEN || c >= GPUSYS_SLAB_CLASSES ||
	    gpusys_slab_whole(c) != !!(co & GPUSYS_CHUNK_WHOLE))
		return -ENOENT;
	return 0;
}

GPUSYS_FN int gpusys_slab_probe(const gpusys_heap_dev_t *hp, uint64_t off, uint32_t co, uint32_t *ret_bytes)
{
	struct gpusys_alloc_slab *sl;
	uint32_t c, rel;
	unsigned long long v;
	if (gpusys_slab_locate(hp, off, co, &sl, &c, &rel, &v))
		return -ENOENT;
	uint32_t cb = gpusys_alloc_class_bytes(c);
	if (rel % cb || rel / cb < gpusys_slab_first(c))
		return -EINVAL;
	uint32_t slot = rel / cb;
	if (!(gpusys_slab_load(&gpusys_slab_bits(sl)[slot / 64u]) >> (slot % 64u) & 1u))
		return -ENOENT;
	*ret_bytes = cb;
	return 0;
}

/* malloc's last check of a block it is about to hand out (off, cb bytes):
 * inside one slab of a pool chunk the pool holds, and below pool_hi (so in
 * the mapped prefix). A claim cannot give anything else; this turns a bug
 * that would give a wild pointer (an MMU fault, or another block's bytes)
 * into an error. Two loads of private memory. */
GPUSYS_FN int gpusys_slab_block_ok(const gpusys_heap_dev_t *hp, uint64_t off, uint32_t cb)
{
	uint64_t end = off + cb;
	if (end > gpusys_slab_load(&hp->pool->pool_hi) || end > hp->reserve || end < off)
		return 0;
	uint32_t co = gpusys_slab_load32(&hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT]);
	if (!co || (co & GPUSYS_CHUNK_GONE))
		return 0;
	uint64_t sb = co & GPUSYS_CHUNK_WHOLE ? GPUSYS_ALLOC_CHUNK_BYTES : GPUSYS_ALLOC_SLAB_BYTES;
	return off % sb >= sizeof(struct gpusys_alloc_slab) && off % sb + cb <= sb;
}

/* ------------------------------------------------------------------ free */

/*
 * Free the pool blocks of the lanes of mask that have is[l] (off[l]: the
 * block's offset, in a pool chunk whose chunk_of entry is co[l]). Their
 * err[l] gets 0, -EINVAL (not the start of a slot: an interior pointer), or
 * -ENOENT (not allocated: a double free, within this call too, or a free
 * slab); the other lanes' err is left alone. Returns, in every lane, whether
 * a slab became empty (time to trim).
 *
 * Every lane of mask calls this together, and every warp-wide operation in
 * it is over the whole of mask, in loops whose trip count every lane
 * computes alike (from ballots over mask): no lane waits at a collective
 * that another lane of mask skips, and no collective names a lane that is
 * elsewhere, however the lanes' slabs and words differ. One atomic AND per
 * bitmap word and two adds per slab, by the lowest lane that has it: 32
 * lanes freeing blocks of one word were 32 atomics on one address.
 *
 * The first add pins the slab (its count, one per lane): it cannot go FREE
 * while pinned, so its chunk can be neither given back nor cut again, and
 * the value the add returns says whether it is still the cut the lane read
 * (state, class, generation). A lane whose slab changed meanwhile is
 * refused (-ENOENT) before it touches a bit: only a wrong free can see that
 * (a live block's count keeps its slab), and unpinned it could clear a bit
 * of the next cut's bitmap, a spare one included. The second add takes the
 * pins back with the freed blocks' counts.
 */
GPUSYS_FN int gpusys_slab_free_lanes(const gpusys_heap_dev_t *hp, uint64_t mask, const uint64_t *off,
				     const uint32_t *co, const uint32_t *is, int32_t *err)
{
	uint64_t word[GPUSYS_ALLOC_LANES], slab[GPUSYS_ALLOC_LANES], bit[GPUSYS_ALLOC_LANES];
	uint64_t seen[GPUSYS_ALLOC_LANES];
	uint32_t ok[GPUSYS_ALLOC_LANES], in[GPUSYS_ALLOC_LANES], pinned[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		struct gpusys_alloc_slab *sl;
		uint32_t c, rel;
		unsigned long long v = 0;
		word[GPUSYS_LI(l)] = 0;
		slab[GPUSYS_LI(l)] = 0;
		bit[GPUSYS_LI(l)] = 0;
		ok[GPUSYS_LI(l)] = 0;
		pinned[GPUSYS_LI(l)] = 0;
		seen[GPUSYS_LI(l)] = 0;
		if (!is[GPUSYS_LI(l)])
			continue;
		int32_t e = 0;
		if (gpusys_slab_locate(hp, off[GPUSYS_LI(l)], co[GPUSYS_LI(l)], &sl, &c, &rel, &v)) {
			e = -ENOENT;
		} else if (rel % gpusys_alloc_class_bytes(c) || rel / gpusys_alloc_class_bytes(c) < gpusys_slab_first(c)) {
			e = -EINVAL;
		} else {
			uint32_t slot = rel / gpusys_alloc_class_bytes(c);
			word[GPUSYS_LI(l)] = (uint64_t)(uintptr_t)&gpusys_slab_bits(sl)[slot / 64u];
			slab[GPUSYS_LI(l)] = (uint64_t)(uintptr_t)sl;
			bit[GPUSYS_LI(l)] = 1ull << (slot % 64u);
			seen[GPUSYS_LI(l)] = v & (GPUSYS_SLAB_CTL_GEN_MASK | GPUSYS_SLAB_CTL(0, 0xffu, 0));
			ok[GPUSYS_LI(l)] = 1;
		}
		err[GPUSYS_LI(l)] = e;
	}
	/* Two lanes freeing one block in one call: the later ones free it
	 * twice (the bits below are merged, so the atomic cannot tell). */
	gpusys_alloc_first_of_each(mask, ok, off);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (is[GPUSYS_LI(l)] && !err[GPUSYS_LI(l)] && !ok[GPUSYS_LI(l)])
			err[GPUSYS_LI(l)] = -ENOENT;
	}

	/* The pins, a slab at a time: the lowest pending lane's slab and every
	 * lane that shares it. */
	for (uint64_t pend = gpusys_alloc_ballot(mask, ok); pend;) {
		uint32_t ld = gpusys_lane_leader_of(pend);
		uint64_t sa = GPUSYS_ALLOC_FROM(mask, slab, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			in[GPUSYS_LI(l)] = (pend >> l & 1u) && slab[GPUSYS_LI(l)] == sa;
		}
		uint64_t grp = gpusys_alloc_ballot(mask, in);
		pend &= ~grp;
		unsigned long long old = 0;
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			/* acquire: the bitmap read below is this cut's */
			old = gpusys_slab_reserve(gpusys_slab_ctl_of(hp, (struct gpusys_alloc_slab *)(uintptr_t)sa),
						  gpusys_slab_popc(grp));
		}
		old = GPUSYS_ALLOC_BCAST(mask, old, ld);
		uint32_t st = GPUSYS_SLAB_CTL_STATE(old);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (!in[GPUSYS_LI(l)])
				continue;
			pinned[GPUSYS_LI(l)] = 1;
			if (st == GPUSYS_SLAB_FREE || st > GPUSYS_SLAB_BROKEN ||
			    (old & (GPUSYS_SLAB_CTL_GEN_MASK | GPUSYS_SLAB_CTL(0, 0xffu, 0))) != seen[GPUSYS_LI(l)]) {
				err[GPUSYS_LI(l)] = -ENOENT; /* its slab was given back or cut again */
				ok[GPUSYS_LI(l)] = 0;
			}
		}
	}

	/* The bits, a word at a time: the lowest pending lane's word and every
	 * lane that shares it. */
	for (uint64_t pend = gpusys_alloc_ballot(mask, ok); pend;) {
		uint32_t ld = gpusys_lane_leader_of(pend);
		uint64_t w = GPUSYS_ALLOC_FROM(mask, word, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			in[GPUSYS_LI(l)] = (pend >> l & 1u) && word[GPUSYS_LI(l)] == w;
		}
		pend &= ~gpusys_alloc_ballot(mask, in);
		uint64_t bits = gpusys_alloc_or64(mask, in, bit), old = 0;
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			old = gpusys_slab_and((unsigned long long *)(uintptr_t)w, ~bits);
		}
		old = GPUSYS_ALLOC_BCAST(mask, old, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (in[GPUSYS_LI(l)] && !(old & bit[GPUSYS_LI(l)])) {
				err[GPUSYS_LI(l)] = -ENOENT; /* already clear: a double free */
				ok[GPUSYS_LI(l)] = 0;
			}
		}
	}

	/* The counts (pins, and the blocks freed), a slab at a time, and what
	 * the slab's state asks for. */
	uint32_t emptied = 0;
	for (uint64_t pend = gpusys_alloc_ballot(mask, pinned); pend;) {
		uint32_t ld = gpusys_lane_leader_of(pend);
		uint64_t sa = GPUSYS_ALLOC_FROM(mask, slab, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			in[GPUSYS_LI(l)] = (pend >> l & 1u) && slab[GPUSYS_LI(l)] == sa;
		}
		uint64_t grp = gpusys_alloc_ballot(mask, in);
		pend &= ~grp;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			in[GPUSYS_LI(l)] = in[GPUSYS_LI(l)] && ok[GPUSYS_LI(l)];
		}
		uint32_t cnt = gpusys_slab_popc(grp) + gpusys_slab_popc(gpusys_alloc_ballot(mask, in)), e = 0;
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			e = gpusys_slab_put_back_leader(hp, (struct gpusys_alloc_slab *)(uintptr_t)sa, cnt);
		}
		emptied |= GPUSYS_ALLOC_BCAST(mask, e, ld);
	}
	return emptied != 0;
}

#endif /* GPUSYS_ALLOC_SLAB_H */
