/* SPDX-License-Identifier: MIT */
/*
 * The warp's side of the DMA ring (include/gpusys/dma.h): a response
 * stream's packet copied into the lanes' buffers by the copy engine, asked
 * of libgpusys's agent. Written once for nvcc and the host compiler, like
 * port_client.h, which uses it. Its waits are on the agent, a thread of
 * this process, not on gpusysd: they need no look for a dead channel.
 */
#ifndef GPUSYS_DMA_CLIENT_H
#define GPUSYS_DMA_CLIENT_H

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "gpusys/dma.h"
#include "lane.h"


/* Whether a stream of total bytes over shares lanes' shares, in a call of
 * lanes lanes, goes by the copy engine: the leader asks (one read of
 * pinned memory, two of the ring's device memory). An agent that dozes is
 * woken for the calls that follow; this one copies for itself, as does one
 * whose backlog is past GPUSYS_DMA_MAX_BACKLOG asks. */
GPUSYS_FN int gpusys_dma_wanted(const struct gpusys_dma *d, uint32_t total, uint32_t shares, uint32_t lanes)
{
	if (!d || !gpusys_dma_worth(d, total, shares, lanes))
		return 0;
	if (gpusys_load_shared_u32(&d->priv->tail) - gpusys_load_shared_u32(&d->priv->completed) >
	    GPUSYS_DMA_MAX_BACKLOG)
		return 0;
	struct gpusys_dma_host *h = d->host;
	if (gpusys_load_shared_u64(&h->awake))
		return 1;
	if (!gpusys_load_shared_u64(&h->wanted)) {
		gpusys_store_shared_u64(&h->wanted, 1);
		gpusys_fence_flush();
	}
	return 0;
}

/* Whether a call's stream, request or response (per-lane shares part,
 * buffers buf, total bytes), goes by the copy engine: every buffer with a
 * share in global memory (not a thread's stack or shared memory, which the
 * copy engine cannot reach) and gpusys_dma_wanted. Every lane of mask calls
 * it and gets the same answer. */
GPUSYS_FN int gpusys_dma_for_stream(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *part, void *const *buf,
				    uint32_t total)
{
	if (!dev->dma || total < GPUSYS_DMA_MIN_STREAM_FLOOR) /* gpusys_dma_worth's floor, before the votes */
		return 0;
#if defined(__CUDACC__)
	uint32_t shares = (uint32_t)__popc(__ballot_sync((unsigned)mask, part[0] != 0)), lanes = (uint32_t)__popcll(mask);
	if (!__all_sync((unsigned)mask, !part[0] || __isGlobal(buf[0])))
		return 0;
#else
	uint32_t shares = 0, lanes = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		shares += part[l] != 0;
		lanes++;
	}
	(void)buf;
#endif
	uint32_t yes = 0;
	if (gpusys_lane_is_leader(mask))
		yes = (uint32_t)gpusys_dma_wanted(dev->dma, total, shares, lanes);
	return (int)gpusys_lane_bcast_u32(mask, yes);
}

/* Whether ticket t is done: completed counts the tickets done, in order. */
GPUSYS_FN int gpusys_dma_done(const struct gpusys_dma *d, uint32_t t)
{
	return (int32_t)(gpusys_load_shared_u32(&d->priv->completed) - (t + 1u)) >= 0;
}

/* Ask for one copy (any lane, for its share); its ticket. Tickets wrap at
 * 2^32: every comparison of them is modular, the first lap's too (a slot
 * never used counts as done, completed - (t - 255) being positive). */
GPUSYS_FN uint32_t gpusys_dma_post(const struct gpusys_dma *d, void *dst, const void *src, uint32_t len)
{
	uint32_t t = gpusys_count_add_u32(&d->priv->tail, 1u), spins = 0;
	struct gpusys_dma_ask *a = &d->host->asks[t % GPUSYS_DMA_ASKS];
	/* the slot's last ask, GPUSYS_DMA_ASKS tickets ago, must be done */
	while (!gpusys_dma_done(d, t - GPUSYS_DMA_ASKS)) {
		gpusys_spin_pause();
		gpusys_spin_backoff(spins++);
	}
	gpusys_order_after(&d->priv->completed); /* the agent's reads of the slot's last ask come first */
	a->src = (uint64_t)(uintptr_t)src;
	a->dst = (uint64_t)(uintptr_t)dst;
	gpusys_fence_release(&a->len_ticket);
	gpusys_store_shared_u64((volatile uint64_t *)&a->len_ticket, (uint64_t)len | (uint64_t)(t + 1u) << 32);
	gpusys_fence_flush();
	return t;
}

/* Wait for ticket t (and so every ticket before it). */
GPUSYS_FN void gpusys_dma_wait(const struct gpusys_dma *d, uint32_t t)
{
	uint32_t spins = 0;
	while (!gpusys_dma_done(d, t)) {
		gpusys_spin_pause();
		gpusys_spin_backoff(spins++);
	}
	gpusys_fence_acquire(&d->priv->completed);
}

/*
 * Packet k of a stream (pkt bytes a packet, total in all; per-lane arrays
 * as in gpusys_stream_packet) copied by the copy engine, into the channel
 * (to_channel: a request's) or out of it: each lane asks for the copy of
 * its share of the packet, and the leader waits for the last ticket. Every
 * lane of mask calls it. 0, or -1 when the agent could not start a copy:
 * the caller then copies the packet with the warp (a response's slot is
 * untouched until the next ask for packets; a request's is not yet
 * published).
 */
GPUSYS_FN int gpusys_stream_packet_dma(const gpusys_dev_t *dev, uint64_t mask, uint8_t *packet, uint32_t pkt,
				       uint32_t k, const uint32_t *off, const uint32_t *part, void *const *buf,
				       uint32_t total, int to_channel)
{
	const struct gpusys_dma *d = dev->dma;
	const uint32_t lo = k * pkt, hi = total - lo < pkt ? total : lo + pkt;
	uint32_t next[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1]; /* a lane's last ticket + 1; 0: none */
	uint32_t failed = 0;
	uint64_t before = 0;
	if (gpusys_lane_is_leader(mask))
		before = gpusys_load_shared_u64(&d->host->failures);
	gpusys_lane_sync(mask); /* the count is read before any ask of this packet */
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t o = off[GPUSYS_LI(l)], q = part[GPUSYS_LI(l)];
		uint32_t a = o > lo ? o : lo, e = o + q < hi ? o + q : hi;
		next[GPUSYS_LI(l)] = 0;
		uint8_t *lane_bytes = (uint8_t *)buf[GPUSYS_LI(l)] + GPUSYS_INLINE_BYTES + (a - o);
		if (a < e)
			next[GPUSYS_LI(l)] = 1u + gpusys_dma_post(d, to_channel ? packet + (a - lo) : lane_bytes,
								  to_channel ? lane_bytes : packet + (a - lo), e - a);
	}
	/* Tickets are taken in any order but done in order: the last one is
	 * the largest (they do not wrap within a packet's 32 asks). */
	uint32_t last = gpusys_lane_max(mask, next);
	if (gpusys_lane_is_leader(mask) && last) {
		gpusys_dma_wait(d, last - 1u);
		failed = gpusys_load_shared_u64(&d->host->failures) != before;
	}
	failed = gpusys_lane_bcast_u32(mask, failed);
	/* every lane reads what the copy engine wrote, after the leader saw it done */
	gpusys_fence_acquire(&d->priv->completed);
	return failed ? -1 : 0;
}

#endif /* GPUSYS_DMA_CLIENT_H */
