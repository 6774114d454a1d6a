/* SPDX-License-Identifier: MIT */
/*
 * The client side of the alloc service (include/gpusys/alloc.h), written
 * once for nvcc and the host compiler like port_client.h: per-lane
 * arguments are arrays indexed with GPUSYS_LI(lane); code marked
 * GPUSYS_ALLOC_AS_LANE(x) runs on lane x on a GPU and once on the host.
 *
 * Small blocks (up to GPUSYS_SLAB_MAX, 64 KiB) are the device's own: malloc
 * and free run on slabs in the client's heap (device/alloc_slab.h), one
 * class group of lanes at a time, with no request to gpusysd except when
 * the pool needs another chunk. Large blocks are a warp-aggregated request
 * to gpusysd, which keeps their metadata and checks their frees. -EAGAIN
 * from the daemon means "granted, not mapped yet": the warp tells the
 * mapping thread (ctl->want), waits until ctl->mapped grows and asks again.
 */
#ifndef GPUSYS_ALLOC_CLIENT_H
#define GPUSYS_ALLOC_CLIENT_H

#include "alloc_lanes.h"
#include "alloc_slab.h"

GPUSYS_FN void gpusys_alloc_report_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					 const uint32_t *refused, const int32_t *err);

/* The last check of a large block gpusysd granted (off, size bytes): in
 * the mapped prefix. gpusysd grants only below the mapped value a request
 * carried, or a larger one another warp reported: mapped is read again
 * (host memory: only then) before a block is refused. */
GPUSYS_FN int gpusys_alloc_large_ok(const gpusys_heap_dev_t *hp, uint64_t off, uint64_t size, uint64_t mapped)
{
	mapped = gpusys_alloc_word_bytes(mapped);
	if (off <= mapped && size <= mapped - off)
		return 1;
	mapped = gpusys_alloc_word_bytes(gpusys_load_shared_u64(&hp->ctl->mapped));
	return off <= mapped && size <= mapped - off;
}

/* Small blocks for the lanes of mask that want one (want[l]: class cls[l]),
 * one class group at a time: the group's leader claims slots of one bitmap
 * word per round, the lanes take them in rank order. Lanes served get
 * ret[l]; on failure err[l]. want[l] is cleared for both. A block that
 * fails the last check (gpusys_slab_block_ok: a bug, not a user's error)
 * is not handed out: NULL, -EIO, counted (wild_blocks) and reported with
 * the refused frees. Every lane of mask calls it. */
GPUSYS_FN void gpusys_alloc_small_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					const uint32_t *cls, uint32_t *want, void **ret, int32_t *err)
{
	uint64_t todo = gpusys_alloc_ballot(mask, want);
	uint32_t ld0 = gpusys_lane_leader_of(mask), g = 0;
	(void)ld0;
	GPUSYS_ALLOC_AS_LANE(ld0)
	{
		g = gpusys_slab_group(hp);
	}
	g = GPUSYS_ALLOC_BCAST(mask, g, ld0);
	uint32_t in[GPUSYS_ALLOC_LANES], wild[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		wild[GPUSYS_LI(l)] = 0;
	}
	while (todo) {
		uint32_t ld = gpusys_lane_leader_of(todo);
		uint32_t c = GPUSYS_ALLOC_FROM(mask, cls, ld);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			in[GPUSYS_LI(l)] = (todo >> l & 1u) && cls[GPUSYS_LI(l)] == c;
		}
		uint64_t left = gpusys_alloc_ballot(mask, in);
		todo &= ~left;
		uint32_t cb = gpusys_alloc_class_bytes(c);
		while (left) {
			uint32_t s = 0, w = 0;
			unsigned long long bits = 0;
			int r = 0;
			GPUSYS_ALLOC_AS_LANE(ld)
			{
				r = gpusys_slab_claim_leader(dev, hp, ld, g, c,
							     (uint32_t)__builtin_popcountll(left), &s, &w, &bits);
			}
			r = (int)GPUSYS_ALLOC_BCAST(mask, (uint32_t)r, ld);
			s = GPUSYS_ALLOC_BCAST(mask, s, ld);
			w = GPUSYS_ALLOC_BCAST(mask, w, ld);
			bits = GPUSYS_ALLOC_BCAST(mask, bits, ld);
			uint32_t k = gpusys_slab_popc(bits);
			GPUSYS_FOR_EACH_LANE(mask, l)
			{
				if (!(left >> l & 1u))
					continue;
				uint32_t rk = gpusys_alloc_rank(left, l);
				if (r) {
					err[GPUSYS_LI(l)] = r;
					want[GPUSYS_LI(l)] = 0;
				} else if (rk < k) {
					uint32_t slot = w * 64u + gpusys_slab_nth_bit(bits, rk);
					uint64_t bo = ((uint64_t)s << GPUSYS_ALLOC_SLAB_SHIFT) + (uint64_t)slot * cb;
					if (gpusys_slab_block_ok(hp, bo, cb)) {
						ret[GPUSYS_LI(l)] = hp->base + bo;
					} else {
						gpusys_slab_add(&hp->pool->wild_blocks, 1);
						err[GPUSYS_LI(l)] = -EIO;
						wild[GPUSYS_LI(l)] = 1;
					}
					want[GPUSYS_LI(l)] = 0;
				}
			}
			if (r)
				break;
			/* the k lowest lanes of left are served */
			for (uint32_t i = 0; i < k && left; i++)
				left &= left - 1;
		}
	}
	gpusys_alloc_report_lanes(dev, hp, mask, wild, err);
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
	uint32_t cls[GPUSYS_ALLOC_LANES], need[GPUSYS_ALLOC_LANES], small[GPUSYS_ALLOC_LANES];

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint64_t a = align[GPUSYS_LI(l)] ? align[GPUSYS_LI(l)] : GPUSYS_ALLOC_GRANULE;
		uint64_t s = size[GPUSYS_LI(l)];
		ret[GPUSYS_LI(l)] = 0;
		err[GPUSYS_LI(l)] = 0;
		need[GPUSYS_LI(l)] = s != 0;
		cls[GPUSYS_LI(l)] = gpusys_slab_class_of(s, a);
		if (s && ((a & (a - 1)) || a > GPUSYS_ALLOC_MAX_ALIGN)) {
			err[GPUSYS_LI(l)] = -EINVAL;
			need[GPUSYS_LI(l)] = 0;
		}
		small[GPUSYS_LI(l)] = need[GPUSYS_LI(l)] && cls[GPUSYS_LI(l)] < GPUSYS_SLAB_CLASSES;
		if (small[GPUSYS_LI(l)])
			need[GPUSYS_LI(l)] = 0;
	}

	/* Small blocks: the device's slabs. */
	gpusys_alloc_small_lanes(dev, hp, mask, cls, small, ret, err);

	/* Large blocks: the daemon; again while it says "mapping". */
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
		int32_t st[GPUSYS_ALLOC_LANES];
		int rc = 0;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			st[GPUSYS_LI(l)] = 0;
			if (!(m >> l & 1u))
				continue;
			gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, size[GPUSYS_LI(l)], align[GPUSYS_LI(l)], 0);
			in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
			in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
			out[GPUSYS_LI(l)] = &a[GPUSYS_LI(l)];
			cap[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_resp);
			a[GPUSYS_LI(l)].grant = 0;
		}
		/* entered by exactly the lanes of m, the request's lane set */
		GPUSYS_ALLOC_IF_IN(m)
		{
			rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_MALLOC, 0, m, in, in_len, out, cap, got, st);
		}
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
			if (!gpusys_alloc_large_ok(hp, a[GPUSYS_LI(l)].off, size[GPUSYS_LI(l)], mapped)) {
				gpusys_slab_add(&hp->pool->wild_blocks, 1);
				err[GPUSYS_LI(l)] = -EIO;
				continue;
			}
			ret[GPUSYS_LI(l)] = hp->base + a[GPUSYS_LI(l)].off;
		}
#if defined(__CUDACC__)
		grant = __reduce_max_sync((unsigned)mask, (unsigned)(grant >> 21)) * GPUSYS_ALLOC_MAP_ALIGN;
#endif
		/* Ask for the grant ahead of need even when nobody waits: the
		 * daemon grows it before the heap runs out. */
		uint64_t w = gpusys_alloc_ballot(mask, again);
		int wr = 0;
		GPUSYS_ALLOC_AS_LANE(gpusys_lane_leader_of(mask))
		{
			if (w)
				wr = gpusys_alloc_wait_mapped(dev, hp, grant, mapped);
			else if (grant > mapped)
				gpusys_alloc_want(hp, grant);
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

/* Where each lane's pointer goes: nowhere (NULL), the device's slabs, the
 * daemon (inside the heap, not a pool chunk), or refused here (outside the
 * heap: -EFAULT). *off gets its offset in the heap, *co its chunk's
 * chunk_of entry. */
enum { GPUSYS_ALLOC_TO_NONE, GPUSYS_ALLOC_TO_SLAB, GPUSYS_ALLOC_TO_DAEMON, GPUSYS_ALLOC_TO_REFUSED };

GPUSYS_FN uint32_t gpusys_alloc_route(const gpusys_heap_dev_t *hp, const void *p, uint64_t *off, uint32_t *co)
{
	if (!p)
		return GPUSYS_ALLOC_TO_NONE;
	/* unsigned difference: a pointer below the base is a huge offset */
	*off = (uint64_t)((uintptr_t)p - (uintptr_t)hp->base);
	if (*off >= hp->reserve)
		return GPUSYS_ALLOC_TO_REFUSED;
	*co = gpusys_slab_load32(&hp->chunk_of[*off >> GPUSYS_ALLOC_CHUNK_SHIFT]);
	return *co ? GPUSYS_ALLOC_TO_SLAB : GPUSYS_ALLOC_TO_DAEMON;
}

/* Tell gpusysd what the device refused (err[l] of the lanes in m: -EFAULT,
 * -EINVAL, -ENOENT), for its counters and gpusysctl; one request, only on
 * this error path. The device's own counters move too. Called by exactly
 * the lanes of m (the request's collectives are over m); mapped is what
 * the caller read for the whole warp before it branched. */
GPUSYS_FN void gpusys_alloc_report(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t m, uint64_t mapped,
				   const int32_t *err)
{
	struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
	const void *in[GPUSYS_ALLOC_LANES];
	void *out[GPUSYS_ALLOC_LANES];
	uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
	int32_t st[GPUSYS_ALLOC_LANES];
	struct gpusys_alloc_pool *po = hp->pool;
	GPUSYS_FOR_EACH_LANE(m, l)
	{
		int32_t e = err[GPUSYS_LI(l)];
		uint32_t kind = e == -EFAULT ? GPUSYS_ALLOC_REFUSED_FOREIGN
				: e == -EINVAL ? GPUSYS_ALLOC_REFUSED_INTERIOR
					       : GPUSYS_ALLOC_REFUSED_UNALLOCATED;
		unsigned long long *n = kind == GPUSYS_ALLOC_REFUSED_FOREIGN    ? &po->refused_foreign
					: kind == GPUSYS_ALLOC_REFUSED_INTERIOR ? &po->refused_interior
										: &po->refused_unallocated;
		gpusys_slab_add(n, 1);
		gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, kind, 0, 0);
		in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
		in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
		out[GPUSYS_LI(l)] = 0;
		cap[GPUSYS_LI(l)] = 0;
		st[GPUSYS_LI(l)] = 0;
	}
	/* the counts are for observing: a failed report changes no result */
	gpusys_rpc(dev, GPUSYS_OP_ALLOC_REPORT, 0, m, in, in_len, out, cap, got, st);
}

/* Report the lanes of mask that have refused[l] (every lane of mask calls
 * it; only those lanes enter the request, with the mask that names them). */
GPUSYS_FN void gpusys_alloc_report_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					 const uint32_t *refused, const int32_t *err)
{
	uint64_t mr = gpusys_alloc_ballot(mask, refused);
	if (!mr)
		return;
	uint64_t mapped = gpusys_alloc_mapped(hp, mask);
	GPUSYS_ALLOC_IF_IN(mr)
	{
		gpusys_alloc_report(dev, hp, mr, mapped, err);
	}
}

/* Trim (device/alloc_slab.h) from the leader of mask: how many chunks went
 * back to gpusysd, or -errno. how: GPUSYS_TRIM_NOW (gpusys_heap_trim), or
 * GPUSYS_TRIM_LAZY (after a free emptied a slab: skipped while another
 * warp trims or one did lately). */
GPUSYS_FN int gpusys_alloc_trim_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
				      uint32_t how)
{
	int r = 0;
	uint32_t ld = gpusys_lane_leader_of(mask);
	(void)dev;
	GPUSYS_ALLOC_AS_LANE(ld)
	{
		r = gpusys_slab_trim_when_leader(dev, hp, ld, how);
	}
	return (int)GPUSYS_ALLOC_BCAST(mask, (uint32_t)r, ld);
}

/* free for the lanes of mask: err[l] 0, or -EFAULT (outside the heap),
 * -EINVAL (into a block, not its start), -ENOENT (not allocated: a double
 * free), -ESHUTDOWN. Refused frees change nothing and are counted. A small
 * block is freed here; a large one by the daemon. NULL is a no-op. Every
 * lane of mask calls it. */
GPUSYS_FN void gpusys_alloc_free_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
				       void *const *ptr, int32_t *err)
{
	uint32_t to[GPUSYS_ALLOC_LANES], is[GPUSYS_ALLOC_LANES], co[GPUSYS_ALLOC_LANES];
	uint64_t off[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		off[GPUSYS_LI(l)] = 0;
		co[GPUSYS_LI(l)] = 0;
		to[GPUSYS_LI(l)] = gpusys_alloc_route(hp, ptr[GPUSYS_LI(l)], &off[GPUSYS_LI(l)], &co[GPUSYS_LI(l)]);
		err[GPUSYS_LI(l)] = to[GPUSYS_LI(l)] == GPUSYS_ALLOC_TO_REFUSED ? -EFAULT : 0;
		is[GPUSYS_LI(l)] = to[GPUSYS_LI(l)] == GPUSYS_ALLOC_TO_SLAB;
	}
	/* Small blocks: every lane of mask takes part, those without one too. */
	int emptied = 0;
	if (gpusys_alloc_ballot(mask, is)) {
		emptied = gpusys_slab_free_lanes(hp, mask, off, co, is, err);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (is[GPUSYS_LI(l)] && err[GPUSYS_LI(l)])
				to[GPUSYS_LI(l)] = GPUSYS_ALLOC_TO_REFUSED;
		}
	}

	/* Large blocks: one request for the lanes that have one, entered by
	 * exactly those lanes (the request's collectives are over m). */
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		is[GPUSYS_LI(l)] = to[GPUSYS_LI(l)] == GPUSYS_ALLOC_TO_DAEMON;
	}
	uint64_t m = gpusys_alloc_ballot(mask, is);
	if (m) {
		struct gpusys_alloc_req q[GPUSYS_ALLOC_LANES];
		const void *in[GPUSYS_ALLOC_LANES];
		void *out[GPUSYS_ALLOC_LANES];
		uint32_t in_len[GPUSYS_ALLOC_LANES], cap[GPUSYS_ALLOC_LANES], got[GPUSYS_ALLOC_LANES];
		int32_t st[GPUSYS_ALLOC_LANES];
		uint64_t mapped = gpusys_alloc_mapped(hp, mask);
		GPUSYS_ALLOC_IF_IN(m)
		{
			GPUSYS_FOR_EACH_LANE(m, l)
			{
				gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, off[GPUSYS_LI(l)], 0, 0);
				in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
				in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
				out[GPUSYS_LI(l)] = 0;
				cap[GPUSYS_LI(l)] = 0;
				st[GPUSYS_LI(l)] = 0;
			}
			int rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_FREE, 0, m, in, in_len, out, cap, got, st);
			GPUSYS_FOR_EACH_LANE(m, l)
			{
				err[GPUSYS_LI(l)] = rc ? rc : st[GPUSYS_LI(l)];
			}
		}
	}

	/* What the device refused is reported; the daemon counts its own. */
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		is[GPUSYS_LI(l)] = to[GPUSYS_LI(l)] == GPUSYS_ALLOC_TO_REFUSED;
	}
	gpusys_alloc_report_lanes(dev, hp, mask, is, err);
	/* A slab emptied (the same answer in every lane): give back what has
	 * been empty long enough, unless another warp is at it or did lately. */
	if (emptied)
		gpusys_alloc_trim_lanes(dev, hp, mask, GPUSYS_TRIM_LAZY);
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
 * Otherwise the block stays when the new size fits it and wastes at most
 * half of it, else the lane gets a new block, copies what the old one held
 * and frees it. A small block is judged here, a large one by the daemon.
 * On error ret[l] is NULL, err[l] says why and the old block is untouched.
 *
 * Lanes of one call want different things (a malloc, a free, a small block
 * moved, a large one the daemon keeps or moves). Each step below is
 * entered by every lane of mask, a lane with nothing to do in it passing a
 * size 0 or a NULL pointer: no step is called from inside a branch that
 * some lanes of mask skip, so each step's warp-wide operations over mask
 * meet every lane of mask (only the daemon's requests are entered by their
 * own lanes, with the mask that names them).
 */
GPUSYS_FN void gpusys_alloc_realloc_lanes(const gpusys_dev_t *dev, const gpusys_heap_dev_t *hp, uint64_t mask,
					  void *const *ptr, const uint64_t *size, void **ret, int32_t *err)
{
	enum { RA_MALLOC, RA_FREE, RA_DAEMON, RA_SLAB_MOVE, RA_DONE };
	uint32_t kind[GPUSYS_ALLOC_LANES], is[GPUSYS_ALLOC_LANES], refused[GPUSYS_ALLOC_LANES];
	uint64_t zero[GPUSYS_ALLOC_LANES], off[GPUSYS_ALLOC_LANES], keep[GPUSYS_ALLOC_LANES];
	uint64_t want[GPUSYS_ALLOC_LANES];
	void *nret[GPUSYS_ALLOC_LANES], *old[GPUSYS_ALLOC_LANES];
	int32_t nerr[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		void *p = ptr[GPUSYS_LI(l)];
		uint64_t sz = size[GPUSYS_LI(l)];
		ret[GPUSYS_LI(l)] = 0;
		err[GPUSYS_LI(l)] = 0;
		zero[GPUSYS_LI(l)] = 0;
		refused[GPUSYS_LI(l)] = 0;
		keep[GPUSYS_LI(l)] = 0;
		off[GPUSYS_LI(l)] = 0;
		kind[GPUSYS_LI(l)] = !p ? RA_MALLOC : sz == 0 ? RA_FREE : RA_DAEMON;
		if (kind[GPUSYS_LI(l)] != RA_DAEMON)
			continue;
		uint32_t co = 0;
		uint32_t to = gpusys_alloc_route(hp, p, &off[GPUSYS_LI(l)], &co);
		if (to == GPUSYS_ALLOC_TO_REFUSED) {
			err[GPUSYS_LI(l)] = -EFAULT;
		} else if (to == GPUSYS_ALLOC_TO_SLAB) {
			uint32_t cb = 0;
			int32_t e = gpusys_slab_probe(hp, off[GPUSYS_LI(l)], co, &cb);
			err[GPUSYS_LI(l)] = e;
			if (!e && sz <= cb && sz > cb / 2) {
				ret[GPUSYS_LI(l)] = p;
				kind[GPUSYS_LI(l)] = RA_DONE;
			} else if (!e) {
				keep[GPUSYS_LI(l)] = cb < sz ? cb : sz;
				kind[GPUSYS_LI(l)] = RA_SLAB_MOVE;
			}
		}
		if (err[GPUSYS_LI(l)]) {
			refused[GPUSYS_LI(l)] = 1;
			kind[GPUSYS_LI(l)] = RA_DONE;
		}
	}
	gpusys_alloc_report_lanes(dev, hp, mask, refused, err);

	/* NULL pointers and small blocks that move: a new block (the others
	 * ask for 0 bytes: nothing). */
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t k = kind[GPUSYS_LI(l)];
		want[GPUSYS_LI(l)] = k == RA_MALLOC || k == RA_SLAB_MOVE ? size[GPUSYS_LI(l)] : 0;
	}
	gpusys_alloc_malloc_lanes(dev, hp, mask, want, zero, nret, nerr);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t k = kind[GPUSYS_LI(l)];
		if (k == RA_MALLOC || k == RA_SLAB_MOVE) {
			ret[GPUSYS_LI(l)] = nret[GPUSYS_LI(l)];
			err[GPUSYS_LI(l)] = nerr[GPUSYS_LI(l)];
		}
		/* Moved small blocks: copy now; the old one is freed below
		 * with the sizes 0 (a failed malloc leaves it as it was). */
		is[GPUSYS_LI(l)] = k == RA_SLAB_MOVE && ret[GPUSYS_LI(l)] != 0;
		if (is[GPUSYS_LI(l)])
			gpusys_alloc_copy((uint8_t *)ret[GPUSYS_LI(l)], (const uint8_t *)ptr[GPUSYS_LI(l)],
					  keep[GPUSYS_LI(l)]);
		old[GPUSYS_LI(l)] = k == RA_FREE || is[GPUSYS_LI(l)] ? ptr[GPUSYS_LI(l)] : 0;
		is[GPUSYS_LI(l)] = old[GPUSYS_LI(l)] != 0;
	}
	/* Sizes 0 and the old blocks of moved small ones: one free. */
	if (gpusys_alloc_ballot(mask, is)) {
		gpusys_alloc_free_lanes(dev, hp, mask, old, nerr);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			if (kind[GPUSYS_LI(l)] == RA_FREE)
				err[GPUSYS_LI(l)] = nerr[GPUSYS_LI(l)];
		}
	}

	/* Large blocks: the daemon keeps or moves them. */
	uint32_t need[GPUSYS_ALLOC_LANES], move[GPUSYS_ALLOC_LANES];
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		need[GPUSYS_LI(l)] = kind[GPUSYS_LI(l)] == RA_DAEMON;
		move[GPUSYS_LI(l)] = 0;
	}
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
			gpusys_alloc_req_fill(&q[GPUSYS_LI(l)], hp, mapped, off[GPUSYS_LI(l)], size[GPUSYS_LI(l)], 0);
			in[GPUSYS_LI(l)] = &q[GPUSYS_LI(l)];
			in_len[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_req);
			out[GPUSYS_LI(l)] = &a[GPUSYS_LI(l)];
			cap[GPUSYS_LI(l)] = sizeof(struct gpusys_alloc_resp);
			a[GPUSYS_LI(l)].grant = 0;
		}
		GPUSYS_ALLOC_IF_IN(m)
		{
			rc = gpusys_rpc(dev, GPUSYS_OP_ALLOC_REALLOC, 0, m, in, in_len, out, cap, got, st);
		}
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
			if (!gpusys_alloc_large_ok(hp, a[GPUSYS_LI(l)].off, size[GPUSYS_LI(l)], mapped)) {
				gpusys_slab_add(&hp->pool->wild_blocks, 1);
				err[GPUSYS_LI(l)] = -EIO;
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
				gpusys_alloc_want(hp, grant);
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
	uint64_t mvd = gpusys_alloc_ballot(mask, move);
	if (mvd) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			old[GPUSYS_LI(l)] = move[GPUSYS_LI(l)] ? ptr[GPUSYS_LI(l)] : 0;
		}
		gpusys_alloc_free_lanes(dev, hp, mask, old, nerr);
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
