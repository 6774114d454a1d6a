/* SPDX-License-Identifier: MIT */
/*
 * What the alloc service's device code shares (device/alloc_slab.h,
 * device/alloc_client.h): per-lane votes and broadcasts written once for
 * nvcc and the host compiler (see lane.h), requests to gpusysd, and the
 * wait for the mapping thread.
 */
#ifndef GPUSYS_ALLOC_LANES_H
#define GPUSYS_ALLOC_LANES_H

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
/* The body runs in exactly the lanes of m (on the host: once, for them).
 * Only a call whose collectives are over m itself goes in it. */
#define GPUSYS_ALLOC_IF_IN(m) if (((m) >> gpusys_lane_id()) & 1u)
#else
#define GPUSYS_ALLOC_AS_LANE(x)
#define GPUSYS_ALLOC_FROM(mask, arr, src) ((arr)[(src)])
#define GPUSYS_ALLOC_BCAST(mask, v, src) (v)
#define GPUSYS_ALLOC_IF_IN(m) if (m)
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

/* The OR of v[l] over the lanes of mask with in[l], in every lane of mask
 * (all of which call it). */
GPUSYS_FN uint64_t gpusys_alloc_or64(uint64_t mask, const uint32_t *in, const uint64_t *v)
{
#if defined(__CUDACC__)
	uint64_t x = in[0] ? v[0] : 0;
	uint32_t lo = __reduce_or_sync((unsigned)mask, (unsigned)x);
	uint32_t hi = __reduce_or_sync((unsigned)mask, (unsigned)(x >> 32));
	return (uint64_t)hi << 32 | lo;
#else
	uint64_t x = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (in[l])
			x |= v[l];
	}
	return x;
#endif
}

/* Of the lanes of mask with ok[l] whose key[l] is the same, only the lowest
 * keeps ok (every lane of mask calls it). */
GPUSYS_FN void gpusys_alloc_first_of_each(uint64_t mask, uint32_t *ok, const uint64_t *key)
{
#if defined(__CUDACC__)
	/* lanes without ok match each other on a key no block has */
	unsigned same = __match_any_sync((unsigned)mask, ok[0] ? (unsigned long long)key[0] : ~0ull);
	if (ok[0] && (same & ((1u << gpusys_lane_id()) - 1u)))
		ok[0] = 0;
#else
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (!ok[l])
			continue;
		for (uint32_t k = 0; k < l; k++) {
			if ((mask >> k & 1u) && ok[k] && key[k] == key[l]) {
				ok[l] = 0;
				break;
			}
		}
	}
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

/* Device locks of the heap (private memory; held for a few list
 * operations, or across a chunk request by the warp that grows the pool). */
GPUSYS_FN void gpusys_alloc_lock(uint32_t *lock)
{
	for (uint32_t spins = 1; !gpusys_lock_try(lock); spins++) {
		gpusys_spin_pause();
		if (spins % GPUSYS_SPIN_CHECK_EVERY == 0)
			gpusys_spin_yield();
	}
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

/* Tell the mapping thread about grant (a heap word) unless want already
 * says as much. Warps store want without a lock: a warp answered before a
 * shrink can write a grant of the old epoch over a newer one. */
GPUSYS_FN void gpusys_alloc_want(const gpusys_heap_dev_t *hp, uint64_t grant)
{
	if (grant > gpusys_load_shared_u64(&hp->ctl->want)) {
		gpusys_store_shared_u64(&hp->ctl->want, grant);
		gpusys_fence_flush();
	}
}

/* Ask the mapping thread for grant bytes and wait until it has mapped more
 * than seen (or failed, or the daemon went away). 0 or -errno. Leader only.
 * The ask is made again while it waits: another warp may have written an
 * older grant over it, which the mapping thread would never act on. */
GPUSYS_FN int gpusys_alloc_wait_mapped(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t grant,
				       uint64_t seen)
{
	if (grant > seen)
		gpusys_alloc_want(hp, grant);
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
			if (grant > seen)
				gpusys_alloc_want(hp, grant);
			gpusys_spin_yield();
		}
	}
}

/* One request from one lane (the caller, lane l of a single-lane mask):
 * for the pool's chunk requests, reports and trim. 0, or -errno of the
 * call or of the lane. resp may be NULL (cap 0). */
GPUSYS_FN int gpusys_alloc_rpc_one(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint32_t l, uint16_t op,
				   uint64_t arg, uint64_t arg2, uint32_t flags, struct gpusys_alloc_resp *resp)
{
	struct gpusys_alloc_req q;
	const void *in[GPUSYS_ALLOC_LANES];
	void *out[GPUSYS_ALLOC_LANES];
	uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
	int32_t st[GPUSYS_ALLOC_LANES];
	gpusys_alloc_req_fill(&q, hp, gpusys_load_shared_u64(&hp->ctl->mapped), arg, arg2, 0);
	q.flags = flags;
	in[GPUSYS_LI(l)] = &q;
	in_len[GPUSYS_LI(l)] = sizeof(q);
	out[GPUSYS_LI(l)] = resp;
	cap[GPUSYS_LI(l)] = resp ? (uint32_t)sizeof(*resp) : 0u;
	got[GPUSYS_LI(l)] = 0;
	st[GPUSYS_LI(l)] = 0;
	int rc = gpusys_rpc(dev, op, 0, UINT64_C(1) << l, in, in_len, out, cap, got, st);
	if (rc)
		return rc;
	if (st[GPUSYS_LI(l)])
		return st[GPUSYS_LI(l)];
	if (resp && got[GPUSYS_LI(l)] < sizeof(*resp))
		return -EIO;
	return 0;
}

#endif /* GPUSYS_ALLOC_LANES_H */
