/* SPDX-License-Identifier: MIT */
/*
 * The client side of the alloc service (include/gpusys/alloc.h), written
 * once for nvcc and the host compiler like port_client.h: per-lane
 * arguments are arrays indexed with GPUSYS_LI(lane); code marked
 * GPUSYS_ALLOC_AS_LANE(x) runs on lane x on a GPU and once on the host.
 *
 * malloc: lanes asking for a small block first try the cache of their warp
 * slot (struct gpusys_alloc_cache, private memory), one class at a time:
 * the first lane of each class group locks that class's cache, the group
 * takes what is there, the lock is released. Lanes left over (and large
 * blocks) go to the daemon in one warp-aggregated request; each small lane
 * also asks for up to GPUSYS_ALLOC_EXTRA_MAX further blocks of its class,
 * which go into the cache (so a warp refills up to 32 x 10 blocks per
 * round trip). -EAGAIN from the daemon means "granted, not mapped yet": the
 * warp tells the mapping thread (ctl->want), waits until ctl->mapped grows
 * and asks again.
 *
 * free and realloc always go to the daemon, which checks the pointer
 * against its own metadata: a cached block is live in the daemon's eyes,
 * and nothing the device writes can make it hand a block out twice.
 */
#ifndef GPUSYS_ALLOC_CLIENT_H
#define GPUSYS_ALLOC_CLIENT_H

#include <errno.h>
#include <stdint.h>

#include "gpusys/alloc.h"
#include "port_client.h"
#if !defined(__CUDACC__)
#include <time.h>
#endif

#define GPUSYS_ALLOC_LANES (GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1)
/* How long a warp waits for its mapping thread before giving up (-ETIMEDOUT). */
#define GPUSYS_ALLOC_MAP_WAIT_NS (UINT64_C(20) * 1000000000u)

#if defined(__CUDACC__)
#define GPUSYS_ALLOC_AS_LANE(x) if (gpusys_lane_id() == (x))
/* lane src's element of a per-lane array, in every lane of mask */
#define GPUSYS_ALLOC_FROM(mask, arr, src) __shfl_sync((unsigned)(mask), (arr)[0], (src))
#define GPUSYS_ALLOC_BCAST(mask, v, src) __shfl_sync((unsigned)(mask), (v), (src))
#else
#define GPUSYS_ALLOC_AS_LANE(x)
#define GPUSYS_ALLOC_FROM(mask, arr, src) ((arr)[(src)])
#define GPUSYS_ALLOC_BCAST(mask, v, src) (v)
#endif

GPUSYS_FN uint64_t gpusys_alloc_ballot(uint64_t mask, const uint32_t *pred)
{
#if defined(__CUDACC__)
	return (uint64_t)__ballot_sync((unsigned)mask, pred[0] != 0);
#else
	uint64_t b = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (pred[l])
			b |= UINT64_C(1) << l;
	}
	return b;
#endif
}

GPUSYS_FN uint32_t gpusys_alloc_rank(uint64_t group, uint32_t l)
{
	return (uint32_t)__builtin_popcountll(group & ((UINT64_C(1) << l) - 1));
}

GPUSYS_FN uint64_t gpusys_alloc_now_ns(void)
{
#if defined(__CUDACC__)
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#else
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

GPUSYS_FN void gpusys_alloc_lock(uint32_t *lock)
{
	while (!gpusys_lock_try(lock))
		gpusys_spin_pause();
}

GPUSYS_FN uint32_t gpusys_alloc_cache_load(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

/* The warp slot whose caches this warp uses (a hint: a lock guards each). */
GPUSYS_FN uint32_t gpusys_alloc_slot(const gpusys_heap_dev_t *hp, uint64_t mask)
{
	uint32_t s = 0;
	(void)mask;
	GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
	{
		s = gpusys_port_hint() % hp->cache_slots;
	}
	return GPUSYS_ALLOC_BCAST(mask, s, gpusys_lane_leader_of(mask));
}

GPUSYS_FN void gpusys_alloc_req_fill(struct gpusys_alloc_req *q, const gpusys_heap_dev_t *hp, uint64_t mapped,
				     uint64_t arg, uint64_t arg2, uint32_t extra)
{
	q->arg = arg;
	q->arg2 = arg2;
	q->mapped = mapped;
	q->reserve = hp->reserve;
	q->base = (uint64_t)(uintptr_t)hp->base;
	q->extra = extra;
	q->flags = 0;
}

/* What the mapping thread has mapped (leader reads, everyone gets it). */
GPUSYS_FN uint64_t gpusys_alloc_mapped(const gpusys_heap_dev_t *hp, uint64_t mask)
{
	uint64_t m = 0;
	(void)mask;
	GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
	{
		m = gpusys_load_shared_u64(&hp->ctl->mapped);
	}
#if defined(__CUDACC__)
	m = __shfl_sync((unsigned)mask, m, gpusys_lane_leader_of(mask));
#endif
	return m;
}

/* Ask the mapping thread for grant bytes and wait until it has mapped more
 * than seen (or failed, or the daemon went away). 0 or -errno. Leader only. */
GPUSYS_FN int gpusys_alloc_wait_mapped(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t grant,
				       uint64_t seen)
{
	if (grant > seen) {
		gpusys_store_shared_u64(&hp->ctl->want, grant);
		gpusys_fence_flush();
	}
	uint64_t t0 = gpusys_alloc_now_ns();
	for (uint32_t spins = 1;; spins++) {
		if (gpusys_load_shared_u64(&hp->ctl->mapped) > seen)
			return 0;
		uint64_t failed = gpusys_load_shared_u64(&hp->ctl->failed);
		if (failed)
			return (int)(int64_t)failed;
		gpusys_spin_pause();
		if (spins % GPUSYS_SPIN_CHECK_EVERY == 0) {
			int dead = gpusys_channel_dead(dev);
			if (dead)
				return dead;
			if (gpusys_alloc_now_ns() - t0 > GPUSYS_ALLOC_MAP_WAIT_NS)
				return -ETIMEDOUT;
			gpusys_spin_yield();
		}
	}
}

/* Give blocks the cache had no room for back to the daemon (rare: another
 * warp filled the same slot's cache meanwhile). */
GPUSYS_FN void gpusys_alloc_free_offsets(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					 const uint32_t *n, uint32_t (*blocks)[GPUSYS_ALLOC_EXTRA_MAX])
{
	for (uint32_t k = 0; k < GPUSYS_ALLOC_EXTRA_MAX; k++) {
		uint32_t has[GPUSYS_ALLOC_LANES];
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			has[GPUSYS_LI(l)] = n[GPUSYS_LI(l)] > k;
		}
		uint64_t m = gpusys_alloc_ballot(mask, has);
		if (!m)
			return;
		uint64_t mapped = gpusys_alloc_mapped(hp, mask);
		struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
		const void *in[GPUSYS_ALLOC_LANES];
		uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
		int32_t st[GPUSYS_ALLOC_LANES];
		void *out[GPUSYS_ALLOC_LANES];
		GPUSYS_FOR_EACH_LANE(m, l)
		{
			gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped,
					      (uint64_t)blocks[GPUSYS_LI(l)][k] * GPUSYS_ALLOC_GRANULE, 0, 0);
			in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
			in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
			cap[GPUSYS_LI(l)] = 0;
			out[GPUSYS_LI(l)] = 0;
		}
#if defined(__CUDACC__)
		if (has[0])
#endif
			gpusys_rpc(dev, GPUSYS_OP_ALLOC_FREE, 0, m, in, in_len, out, cap, got, st);
	}
}

/* Put each lane's extra blocks (nex[l] of class cls[l]) into the slot's
 * caches, one class group at a time; what does not fit is freed. */
GPUSYS_FN void gpusys_alloc_cache_push(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
				       uint32_t slot, const uint32_t *cls, uint32_t *nex,
				       uint32_t (*ex)[GPUSYS_ALLOC_EXTRA_MAX])
{
	uint32_t has[GPUSYS_ALLOC_LANES], v[GPUSYS_ALLOC_LANES], off[GPUSYS_ALLOC_LANES];
	uint32_t left[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		has[GPUSYS_LI(l)] = nex[GPUSYS_LI(l)] > 0;
		left[GPUSYS_LI(l)] = 0;
	}
	uint64_t todo = gpusys_alloc_ballot(mask, has);
	uint64_t spill = 0;
	while (todo) {
		uint32_t ld = gpusys_lane_leader_of(todo);
		uint32_t c = GPUSYS_ALLOC_FROM(mask, cls, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			uint32_t in = (todo >> l & 1u) && cls[GPUSYS_LI(l)] == c;
			has[GPUSYS_LI(l)] = in;
			v[GPUSYS_LI(l)] = in ? nex[GPUSYS_LI(l)] : 0;
		}
		uint64_t g = gpusys_alloc_ballot(mask, has);
		todo &= ~g;
		gpusys_lane_exscan(mask, v, off);
		struct gpusys_alloc_cache *ca = &hp->cache[slot * GPUSYS_ALLOC_CLASSES + c];
		uint32_t cnt = 0;
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			gpusys_alloc_lock(&ca->lock);
			cnt = ca->count;
		}
		cnt = GPUSYS_ALLOC_BCAST(mask, cnt, ld);
		uint32_t cap = gpusys_alloc_cache_cap(c);
		cnt = cnt < cap ? cnt : cap;
		uint32_t room = cap - cnt, used = 0;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (g >> l & 1u) {
				uint32_t o = off[GPUSYS_LI(l)], n = nex[GPUSYS_LI(l)], i = 0;
				for (; i < n && o + i < room; i++)
					ca->block[cnt + o + i] = ex[GPUSYS_LI(l)][i];
				/* the rest moves to the front of this lane's list */
				for (uint32_t k = i; k < n; k++)
					ex[GPUSYS_LI(l)][k - i] = ex[GPUSYS_LI(l)][k];
				left[GPUSYS_LI(l)] = n - i;
				nex[GPUSYS_LI(l)] = 0;
				if (o + n > used)
					used = o + n;
			}
		}
#if defined(__CUDACC__)
		used = __reduce_max_sync((unsigned)mask, used);
#endif
		gpusys_lane_sync(mask);
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			ca->count = cnt + (used < room ? used : room);
			gpusys_lock_release(&ca->lock);
		}
		if (used > room)
			spill = 1;
	}
	if (spill)
		gpusys_alloc_free_offsets(dev, hp, mask, left, ex);
}

/*
 * malloc for the lanes of mask: size[l] bytes aligned to align[l] (0: 16).
 * ret[l] gets the block (NULL on error or for size 0), err[l] 0 or -errno:
 * -ENOMEM (the client's limit), -EINVAL (alignment not a power of two or
 * too large), -ETIMEDOUT (the mapping thread never mapped), -ESHUTDOWN.
 */
GPUSYS_FN void gpusys_alloc_malloc_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					 const uint64_t *size, const uint64_t *align, void **ret, int32_t *err)
{
	uint32_t cls[GPUSYS_ALLOC_LANES], need[GPUSYS_ALLOC_LANES], extra[GPUSYS_ALLOC_LANES];
	uint32_t slot = gpusys_alloc_slot(hp, mask);

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint64_t a = align[GPUSYS_LI(l)] ? align[GPUSYS_LI(l)] : GPUSYS_ALLOC_GRANULE;
		uint64_t s = size[GPUSYS_LI(l)];
		ret[GPUSYS_LI(l)] = 0;
		err[GPUSYS_LI(l)] = 0;
		extra[GPUSYS_LI(l)] = 0;
		need[GPUSYS_LI(l)] = s != 0;
		cls[GPUSYS_LI(l)] = gpusys_alloc_class_of(s, a);
		if (s && ((a & (a - 1)) || a > GPUSYS_ALLOC_MAX_ALIGN)) {
			err[GPUSYS_LI(l)] = -EINVAL;
			need[GPUSYS_LI(l)] = 0;
		}
	}

	/* The cache, one class group at a time. */
	uint32_t small[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		small[GPUSYS_LI(l)] = need[GPUSYS_LI(l)] && cls[GPUSYS_LI(l)] < GPUSYS_ALLOC_CLASSES;
	}
	uint64_t todo = gpusys_alloc_ballot(mask, small);
	while (todo) {
		uint32_t ld = gpusys_lane_leader_of(todo);
		uint32_t c = GPUSYS_ALLOC_FROM(mask, cls, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			small[GPUSYS_LI(l)] = (todo >> l & 1u) && cls[GPUSYS_LI(l)] == c;
		}
		uint64_t g = gpusys_alloc_ballot(mask, small);
		todo &= ~g;
		uint32_t k = (uint32_t)__builtin_popcountll(g);
		struct gpusys_alloc_cache *ca = &hp->cache[slot * GPUSYS_ALLOC_CLASSES + c];
		uint32_t n = 0, base = 0;
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			gpusys_alloc_lock(&ca->lock);
			uint32_t cnt = ca->count;
			if (cnt > gpusys_alloc_cache_cap(c)) /* our own memory, but never trust a count */
				cnt = 0;
			n = cnt < k ? cnt : k;
			base = cnt - n;
		}
		n = GPUSYS_ALLOC_BCAST(mask, n, ld);
		base = GPUSYS_ALLOC_BCAST(mask, base, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (g >> l & 1u) {
				uint32_t r = gpusys_alloc_rank(g, l);
				if (r < n) {
					uint32_t b = gpusys_alloc_cache_load(&ca->block[base + n - 1 - r]);
					ret[GPUSYS_LI(l)] = hp->base + (uint64_t)b * GPUSYS_ALLOC_GRANULE;
					need[GPUSYS_LI(l)] = 0;
				} else {
					/* share the cache's free room among the lanes going to the daemon */
					uint32_t room = gpusys_alloc_cache_cap(c) - base, m = k - n;
					uint32_t e = room / m + (r - n < room % m);
					extra[GPUSYS_LI(l)] = e < GPUSYS_ALLOC_EXTRA_MAX ? e : GPUSYS_ALLOC_EXTRA_MAX;
				}
			}
		}
		gpusys_lane_sync(mask);
		GPUSYS_ALLOC_AS_LANE(ld)
		{
			ca->count = base;
			gpusys_lock_release(&ca->lock);
		}
	}

	/* The daemon, for the rest; again while it says "mapping". */
	for (;;) {
		uint64_t m = gpusys_alloc_ballot(mask, need);
		if (!m)
			break;
		uint64_t mapped = gpusys_alloc_mapped(hp, mask);
		struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
		struct gpusys_alloc_resp a[GPUSYS_ALLOC_LANES];
		const void *in[GPUSYS_ALLOC_LANES];
		void *out[GPUSYS_ALLOC_LANES];
		uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
		uint32_t nex[GPUSYS_ALLOC_LANES], ex[GPUSYS_ALLOC_LANES][GPUSYS_ALLOC_EXTRA_MAX];
		int32_t st[GPUSYS_ALLOC_LANES];
		int rc = 0;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			nex[GPUSYS_LI(l)] = 0;
			st[GPUSYS_LI(l)] = 0;
			if (!(m >> l & 1u))
				continue;
			gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, size[GPUSYS_LI(l)], align[GPUSYS_LI(l)],
					      extra[GPUSYS_LI(l)]);
			in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
			in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
			out[GPUSYS_LI(l)] = &a[GPUSYS_LI(l)];
			cap[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_resp);
			a[GPUSYS_LI(l)].grant = 0;
		}
#if defined(__CUDACC__)
		if (need[0])
#endif
			rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_MALLOC, 0, m, in, in_len, out, cap, got, st);
		uint64_t grant = 0;
		uint32_t again[GPUSYS_ALLOC_LANES];
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			again[GPUSYS_LI(l)] = 0;
			if (!(m >> l & 1u))
				continue;
			int32_t s = rc ? rc : got[GPUSYS_LI(l)] < sizeof(struct gpusys_alloc_resp) && !st[GPUSYS_LI(l)] ? -EIO
											       : st[GPUSYS_LI(l)];
			if (!rc && got[GPUSYS_LI(l)] >= sizeof(struct gpusys_alloc_resp)) {
				uint64_t gr = a[GPUSYS_LI(l)].grant;
				grant = gr > grant ? gr : grant;
			}
			if (s == -EAGAIN) {
				again[GPUSYS_LI(l)] = 1;
				continue;
			}
			need[GPUSYS_LI(l)] = 0;
			if (s) {
				err[GPUSYS_LI(l)] = s;
				continue;
			}
			ret[GPUSYS_LI(l)] = hp->base + a[GPUSYS_LI(l)].off;
			uint32_t ne = a[GPUSYS_LI(l)].nextra;
			ne = ne < GPUSYS_ALLOC_EXTRA_MAX ? ne : GPUSYS_ALLOC_EXTRA_MAX;
			for (uint32_t i = 0; i < ne; i++)
				ex[GPUSYS_LI(l)][i] = a[GPUSYS_LI(l)].extra[i];
			nex[GPUSYS_LI(l)] = ne;
		}
#if defined(__CUDACC__)
		grant = __reduce_max_sync((unsigned)mask, (unsigned)(grant >> 21)) * GPUSYS_ALLOC_MAP_ALIGN;
#endif
		gpusys_alloc_cache_push(dev, hp, mask, slot, cls, nex, ex);
		/* Ask for the grant ahead of need even when nobody waits: the
		 * daemon grows it before the heap runs out. */
		uint64_t w = gpusys_alloc_ballot(mask, again);
		int wr = 0;
		GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
		{
			if (w)
				wr = gpusys_alloc_wait_mapped(dev, hp, grant, mapped);
			else if (grant > mapped)
				gpusys_store_shared_u64(&hp->ctl->want, grant), gpusys_fence_flush();
		}
		wr = (int)GPUSYS_ALLOC_BCAST(mask, (uint32_t)wr, gpusys_lane_leader_of(mask));
		if (wr) {
			GPUSYS_FOR_EACH_LANE(mask, l)
			{
				if (again[GPUSYS_LI(l)]) {
					err[GPUSYS_LI(l)] = wr;
					need[GPUSYS_LI(l)] = 0;
				}
			}
		}
	}
}

/* free for the lanes of mask: err[l] 0, or -EFAULT / -EINVAL / -ENOENT
 * (a pointer outside the heap, into a block, or not allocated: refused and
 * counted by the daemon), -ESHUTDOWN. NULL is a no-op. */
GPUSYS_FN void gpusys_alloc_free_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
				       void *const *ptr, int32_t *err)
{
	uint32_t has[GPUSYS_ALLOC_LANES];
	struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
	const void *in[GPUSYS_ALLOC_LANES];
	void *out[GPUSYS_ALLOC_LANES];
	uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
	int32_t st[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		has[GPUSYS_LI(l)] = ptr[GPUSYS_LI(l)] != 0;
		err[GPUSYS_LI(l)] = 0;
	}
	uint64_t m = gpusys_alloc_ballot(mask, has);
	if (!m)
		return;
	uint64_t mapped = gpusys_alloc_mapped(hp, mask);
	GPUSYS_FOR_EACH_LANE(m, l)
	{
		/* unsigned difference: a pointer below the base becomes a
		 * huge offset, which the daemon refuses as foreign */
		uint64_t off = (uint64_t)((uintptr_t)ptr[GPUSYS_LI(l)] - (uintptr_t)hp->base);
		gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, off, 0, 0);
		in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
		in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
		out[GPUSYS_LI(l)] = 0;
		cap[GPUSYS_LI(l)] = 0;
		st[GPUSYS_LI(l)] = 0;
	}
#if defined(__CUDACC__)
	if (has[0])
#endif
	{
		int rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_FREE, 0, m, in, in_len, out, cap, got, st);
		GPUSYS_FOR_EACH_LANE(m, l)
		{
			err[GPUSYS_LI(l)] = rc ? rc : st[GPUSYS_LI(l)];
		}
	}
}

GPUSYS_FN void gpusys_alloc_copy(uint8_t *dst, const uint8_t *src, uint64_t n)
{
#if defined(__CUDACC__)
	/* both blocks are 16-byte aligned */
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16)
		*(uint4 *)(dst + i) = *(const uint4 *)(src + i);
	for (; i < n; i++)
		dst[i] = src[i];
#else
	memcpy(dst, src, n);
#endif
}

GPUSYS_FN void gpusys_alloc_zero(uint8_t *dst, uint64_t n)
{
#if defined(__CUDACC__)
	uint64_t i = 0;
	for (; i + 16 <= n; i += 16)
		*(uint4 *)(dst + i) = make_uint4(0, 0, 0, 0);
	for (; i < n; i++)
		dst[i] = 0;
#else
	memset(dst, 0, n);
#endif
}

/* calloc for the lanes of mask: n[l] * size[l] bytes, zeroed; an overflow
 * is -ENOMEM. */
GPUSYS_FN void gpusys_alloc_calloc_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					 const uint64_t *n, const uint64_t *size, void **ret, int32_t *err)
{
	uint64_t total[GPUSYS_ALLOC_LANES], al[GPUSYS_ALLOC_LANES];
	uint32_t ovf[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint64_t a = n[GPUSYS_LI(l)], b = size[GPUSYS_LI(l)];
		ovf[GPUSYS_LI(l)] = b && a > UINT64_MAX / b;
		total[GPUSYS_LI(l)] = ovf[GPUSYS_LI(l)] ? 0 : a * b;
		al[GPUSYS_LI(l)] = 0;
	}
	gpusys_alloc_malloc_lanes(dev, hp, mask, total, al, ret, err);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (ovf[GPUSYS_LI(l)])
			err[GPUSYS_LI(l)] = -ENOMEM;
		else if (ret[GPUSYS_LI(l)])
			gpusys_alloc_zero((uint8_t *)ret[GPUSYS_LI(l)], total[GPUSYS_LI(l)]);
	}
}

/*
 * realloc for the lanes of mask. NULL: malloc; size 0: free, NULL back.
 * Otherwise the daemon keeps the block (the new size fits it) or gives a
 * new one; the lane copies what the old block held and frees it. On error
 * ret[l] is NULL, err[l] says why and the old block is untouched.
 */
GPUSYS_FN void gpusys_alloc_realloc_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					  void *const *ptr, const uint64_t *size, void **ret, int32_t *err)
{
	uint32_t kind[GPUSYS_ALLOC_LANES]; /* 0 malloc, 1 free, 2 realloc */
	uint32_t is[GPUSYS_ALLOC_LANES];
	uint64_t zero[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		kind[GPUSYS_LI(l)] = !ptr[GPUSYS_LI(l)] ? 0 : size[GPUSYS_LI(l)] == 0 ? 1 : 2;
		ret[GPUSYS_LI(l)] = 0;
		err[GPUSYS_LI(l)] = 0;
		zero[GPUSYS_LI(l)] = 0;
	}
	for (uint32_t k = 0; k < 2; k++) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			is[GPUSYS_LI(l)] = kind[GPUSYS_LI(l)] == k;
		}
		uint64_t m = gpusys_alloc_ballot(mask, is);
		if (!m)
			continue;
#if defined(__CUDACC__)
		if (is[0])
#endif
		{
			if (k == 0)
				gpusys_alloc_malloc_lanes(dev, hp, m, size, zero, ret, err);
			else
				gpusys_alloc_free_lanes(dev, hp, m, ptr, err);
		}
	}

	uint32_t need[GPUSYS_ALLOC_LANES], move[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		need[GPUSYS_LI(l)] = kind[GPUSYS_LI(l)] == 2;
		move[GPUSYS_LI(l)] = 0;
	}
	void *old[GPUSYS_ALLOC_LANES];
	int32_t ferr[GPUSYS_ALLOC_LANES];
	for (;;) {
		uint64_t m = gpusys_alloc_ballot(mask, need);
		if (!m)
			break;
		uint64_t mapped = gpusys_alloc_mapped(hp, mask);
		struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
		struct gpusys_alloc_resp a[GPUSYS_ALLOC_LANES];
		const void *in[GPUSYS_ALLOC_LANES];
		void *out[GPUSYS_ALLOC_LANES];
		uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
		uint32_t again[GPUSYS_ALLOC_LANES];
		int32_t st[GPUSYS_ALLOC_LANES];
		int rc = 0;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			again[GPUSYS_LI(l)] = 0;
			st[GPUSYS_LI(l)] = 0;
			if (!(m >> l & 1u))
				continue;
			uint64_t off = (uint64_t)((uintptr_t)ptr[GPUSYS_LI(l)] - (uintptr_t)hp->base);
			gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, off, size[GPUSYS_LI(l)], 0);
			in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
			in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
			out[GPUSYS_LI(l)] = &a[GPUSYS_LI(l)];
			cap[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_resp);
			a[GPUSYS_LI(l)].grant = 0;
		}
#if defined(__CUDACC__)
		if (need[0])
#endif
			rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_REALLOC, 0, m, in, in_len, out, cap, got, st);
		uint64_t grant = 0;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (!(m >> l & 1u))
				continue;
			int32_t s = rc ? rc : got[GPUSYS_LI(l)] < sizeof(struct gpusys_alloc_resp) && !st[GPUSYS_LI(l)] ? -EIO
											       : st[GPUSYS_LI(l)];
			if (!rc && got[GPUSYS_LI(l)] >= sizeof(struct gpusys_alloc_resp)) {
				uint64_t gr = a[GPUSYS_LI(l)].grant;
				grant = gr > grant ? gr : grant;
			}
			if (s == -EAGAIN) {
				again[GPUSYS_LI(l)] = 1;
				continue;
			}
			need[GPUSYS_LI(l)] = 0;
			if (s) {
				err[GPUSYS_LI(l)] = s;
				continue;
			}
			uint8_t *p = hp->base + a[GPUSYS_LI(l)].off;
			ret[GPUSYS_LI(l)] = p;
			if (p != (uint8_t *)ptr[GPUSYS_LI(l)]) {
				uint64_t n = a[GPUSYS_LI(l)].size < size[GPUSYS_LI(l)] ? a[GPUSYS_LI(l)].size : size[GPUSYS_LI(l)];
				gpusys_alloc_copy(p, (const uint8_t *)ptr[GPUSYS_LI(l)], n);
				move[GPUSYS_LI(l)] = 1;
			}
		}
#if defined(__CUDACC__)
		grant = __reduce_max_sync((unsigned)mask, (unsigned)(grant >> 21)) * GPUSYS_ALLOC_MAP_ALIGN;
#endif
		uint64_t w = gpusys_alloc_ballot(mask, again);
		int wr = 0;
		GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
		{
			if (w)
				wr = gpusys_alloc_wait_mapped(dev, hp, grant, mapped);
			else if (grant > mapped)
				gpusys_store_shared_u64(&hp->ctl->want, grant), gpusys_fence_flush();
		}
		wr = (int)GPUSYS_ALLOC_BCAST(mask, (uint32_t)wr, gpusys_lane_leader_of(mask));
		if (wr) {
			GPUSYS_FOR_EACH_LANE(mask, l)
			{
				if (again[GPUSYS_LI(l)]) {
					err[GPUSYS_LI(l)] = wr;
					need[GPUSYS_LI(l)] = 0;
				}
			}
		}
	}
	/* The copies are done: free the old blocks. */
	uint64_t mv = gpusys_alloc_ballot(mask, move);
	if (mv) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			old[GPUSYS_LI(l)] = move[GPUSYS_LI(l)] ? ptr[GPUSYS_LI(l)] : 0;
		}
		gpusys_alloc_free_lanes(dev, hp, mask, old, ferr);
	}
}

/* ALLOC_STAT for one lane (the first of mask). */
GPUSYS_FN int gpusys_alloc_stat_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
				      struct gpusys_alloc_stat *st)
{
	struct gpusys_alloc_req q;
	const void *in[GPUSYS_ALLOC_LANES];
	void *out[GPUSYS_ALLOC_LANES];
	uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
	int32_t s[GPUSYS_ALLOC_LANES];
	uint64_t one = UINT64_C(1) << gpusys_lane_leader_of(mask);
	int rc = 0;
	GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
	{
		gpusys_alloc_req_fill(&q, hp, gpusys_load_shared_u64(&hp->ctl->mapped), 0, 0, 0);
		uint32_t l = gpusys_lane_leader_of(mask);
		in[GPUSYS_LI(l)] = &q;
		in_len[GPUSYS_LI(l)] = sizeof(q);
		out[GPUSYS_LI(l)] = st;
		cap[GPUSYS_LI(l)] = sizeof(*st);
		rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_STAT, 0, one, in, in_len, out, cap, got, s);
		if (!rc)
			rc = s[GPUSYS_LI(l)];
	}
	return rc;
}

#endif /* GPUSYS_ALLOC_CLIENT_H */
