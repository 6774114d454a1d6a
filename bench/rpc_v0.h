/* SPDX-License-Identifier: MIT */
/*
 * gpusys_rpc as it was before the split into start/test/finish (commit
 * 8b7c16c, device/port_client.h), renamed gpusys_rpc_v0: the baseline of
 * gpusys-bench calls' A/B of the synchronous path, compiled in the same
 * binary with the same helpers so that only the split differs. Its streams
 * keep the lock-step (one packet in flight), which ABI 10 still accepts, in
 * ABI 10's slots (gpusys_stream_slot); gpusys-bench runs it for NOOPs only.
 */
#ifndef GPUSYS_BENCH_RPC_V0_H
#define GPUSYS_BENCH_RPC_V0_H

#include "device/port_client.h"

GPUSYS_FN int gpusys_rpc_v0(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
			 const void *const *in, const uint32_t *in_len, void *const *out,
			 const uint32_t *out_cap, uint32_t *out_len, int32_t *lane_status)
{
	uint32_t part[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t off[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	struct gpusys_port *port;
	uint8_t *stream; /* the port's stream packets (abi.h windows), pkt bytes each */
	uint32_t p = 0, seq = 0, total, rcu = 0, pkt;
	int owned = 0; /* leader: the daemon has handed the port back to us */
	uint64_t ring = 0; /* leader: the request counter's new value */
	uint64_t word, sw = 0;
	int rc = 0;

	if (flags & ~GPUSYS_REQ_KNOWN_FLAGS)
		return -EINVAL;
	uint32_t biggest = gpusys_lane_max(mask, in_len);
	if (biggest > GPUSYS_MAX_LANE_PAYLOAD)
		return -E2BIG;
	/* EMPTY: no lane sends or expects bytes, so len[] and aux[] stay
	 * untouched and the daemon reads only our word. */
	int empty = biggest == 0 && (!out_cap || gpusys_lane_max(mask, out_cap) == 0);
	word = gpusys_client_word(0, (flags & GPUSYS_REQ_NOREPLY ? GPUSYS_CW_NOREPLY : 0) | (empty ? GPUSYS_CW_EMPTY : 0),
				  opcode, mask & 0xffffffffu);

	/* Own a port: lock it, then wait until the daemon has handed it back
	 * (a fire-and-forget request of a previous holder may be in flight). */
	if (gpusys_lane_is_leader(mask)) {
		int must_wait;
		ring = gpusys_count_and_ring(dev->submitted);
		p = gpusys_port_lock(dev, &must_wait, &seq); /* today's lock (one exchange) on both sides of the A/B */
		if (must_wait)
			rcu = (uint32_t)gpusys_wait_owned(dev, p, seq, &sw);
	}
	p = gpusys_lane_bcast_u32(mask, p);
	seq = gpusys_lane_bcast_u32(mask, seq);
	rc = (int)gpusys_lane_bcast_u32(mask, rcu);
	if (rc)
		goto unlock;
	port = &dev->ports[p];

	/* Packet 0: lengths, capacities, inline bytes (none of it when empty). */
	total = 0;
	if (!empty) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			uint32_t n = in_len[GPUSYS_LI(l)];
			port->len[l] = n;
			port->aux[l] = out_cap ? out_cap[GPUSYS_LI(l)] : 0;
			gpusys_inline_put(port->data, l, (const uint8_t *)in[GPUSYS_LI(l)],
					  n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES);
			part[GPUSYS_LI(l)] = gpusys_stream_part(n);
		}
		if (biggest > GPUSYS_INLINE_BYTES)
			total = gpusys_lane_exscan(mask, part, off);
	}
	seq = gpusys_publish(dev, mask, p, seq, word, ring);

	/* Request stream: each further packet once the daemon took the last. */
	stream = gpusys_port_stream(dev->ports, dev->windows, dev->num_ports, dev->num_windows, p, &pkt);
	for (uint32_t k = 0; k * pkt < total; k++) {
		if (gpusys_lane_is_leader(mask))
			rcu = (uint32_t)gpusys_wait_owned(dev, p, seq, &sw);
		rc = (int)gpusys_lane_bcast_u32(mask, rcu);
		if (rc)
			goto unlock;
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			gpusys_stream_chunk(gpusys_stream_slot(stream, pkt, k), pkt, k, off[GPUSYS_LI(l)], part[GPUSYS_LI(l)],
					    (uint8_t *)in[GPUSYS_LI(l)], 1);
		}
		seq = gpusys_publish(dev, mask, p, seq, word, 0);
	}

	if (flags & GPUSYS_REQ_NOREPLY)
		goto unlock; /* the next holder waits for the daemon's ack */

	/* Response packet 0: the status is in the server word. */
	if (gpusys_lane_is_leader(mask)) {
		rcu = (uint32_t)gpusys_wait_owned_ex(dev, p, seq, &sw, 0);
		if (!rcu) {
			owned = 1, rcu = (uint32_t)GPUSYS_SW_STATUS(sw);
			if (!(GPUSYS_WORD_FLAGS(sw) & GPUSYS_SW_TRIVIAL))
				gpusys_fence_acquire(&dev->server_word[p]); /* the lanes read the response next */
		}
	}
	rc = (int)gpusys_lane_bcast_u32(mask, rcu);
	if (rc)
		goto unlock;
	if (GPUSYS_WORD_FLAGS(gpusys_lane_bcast_u32(mask, (uint32_t)sw)) & GPUSYS_SW_TRIVIAL) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			out_len[GPUSYS_LI(l)] = 0;
			lane_status[GPUSYS_LI(l)] = 0;
		}
		goto unlock;
	}
	gpusys_lane_sync(mask);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t n = *(volatile uint32_t *)&port->len[l];
		uint32_t cap = out_cap[GPUSYS_LI(l)];
		/* The daemon never sends more than cap; the clamp keeps a bug
		 * there from becoming an overflow here. */
		n = n < cap ? n : cap;
		out_len[GPUSYS_LI(l)] = n;
		lane_status[GPUSYS_LI(l)] = *(volatile int32_t *)&port->aux[l];
		for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < n && k < GPUSYS_INLINE_CHUNKS; k++) {
			uint32_t a = k * GPUSYS_CHUNK_BYTES, m = n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES;
			gpusys_copy_from_channel((uint8_t *)out[GPUSYS_LI(l)] + a, port->data + gpusys_inline_at(l, k),
						 m - a < GPUSYS_CHUNK_BYTES ? m - a : GPUSYS_CHUNK_BYTES);
		}
		part[GPUSYS_LI(l)] = gpusys_stream_part(n);
	}
	total = gpusys_lane_exscan(mask, part, off);

	/* Response stream: ask for each further packet, then read it. */
	for (uint32_t k = 0; k * pkt < total; k++) {
		seq = gpusys_publish(dev, mask, p, seq, word, 0);
		if (gpusys_lane_is_leader(mask)) {
			rcu = (uint32_t)gpusys_wait_owned(dev, p, seq, &sw);
			owned = rcu == 0;
		}
		rc = (int)gpusys_lane_bcast_u32(mask, rcu);
		if (rc)
			goto unlock;
		gpusys_lane_sync(mask);
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			gpusys_stream_chunk(gpusys_stream_slot(stream, pkt, k), pkt, k, off[GPUSYS_LI(l)], part[GPUSYS_LI(l)],
					    (uint8_t *)out[GPUSYS_LI(l)], 0);
		}
	}

unlock:
	gpusys_lane_sync(mask);
	if (gpusys_lane_is_leader(mask)) {
		/* owned: the last thing seen was the daemon's hand-back (a
		 * response stream ends with one). */
		gpusys_port_give_back(dev, p, seq, owned, 0);
	}
	return rc;
}

#endif
