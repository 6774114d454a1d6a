/* SPDX-License-Identifier: MIT */
/*
 * The client side of the port protocol (include/gpusys/abi.h), written once.
 * nvcc compiles it into device/ for kernels; the host compiler compiles it
 * into the emulator (libclient/emulator/emulator.c). See device/lane.h for how one
 * source serves both: per-lane arguments are arrays indexed with
 * GPUSYS_LI(lane), which has one element per lane on the host and a single
 * element (the calling lane's) on the GPU.
 *
 * gpusys_rpc() is the one entry point: every service call (noop, echo,
 * print, files...) is a message of per-lane payloads and a response of
 * per-lane payloads and statuses.
 */
#ifndef GPUSYS_PORT_CLIENT_H
#define GPUSYS_PORT_CLIENT_H

#include <errno.h>
#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "dma_client.h"
#include "lane.h"

/* Check the daemon and host state words every this many spins. On a GPU each
 * spin is a ~1 us read across PCIe. */
#define GPUSYS_SPIN_CHECK_EVERY 256u

/* Trace points of one call, for profiling (bench/trace_gpu.cu defines it
 * before including this header): GPUSYS_RPC_TRACE(k) runs in every lane at
 * point k. Empty otherwise: it costs nothing.
 *   0 start   1 port owned   2 packet 0 written   3 published
 *   4 response word seen   5 acquire fence done   6 response packet 0 read
 *   7 port released (5 and 6 only for a response that is not TRIVIAL) */
#ifndef GPUSYS_RPC_TRACE
#define GPUSYS_RPC_TRACE(k) ((void)0)
#endif
/* Trace points of a message's stream packets, likewise (bench/trace_gpu.cu
 * --streams adds up the time before each point over a call):
 *   request packet:  0 before the wait for the port, 1 owned, 2 copied in,
 *                    3 published
 *   response packet: 4 before the ask (of the next packet but one, after
 *                    this one's copy: two are in flight, abi.h), 5 asked,
 *                    6 owned (written by the daemon), 7 copied out */
#ifndef GPUSYS_STREAM_TRACE
#define GPUSYS_STREAM_TRACE(k) ((void)0)
#endif
/* The port a call's leader has locked (before it waits for the daemon's
 * hand-back, if it must): for the dump of a hang (tests/gpu/
 * test_gpu_async.cu). Empty otherwise. */
#ifndef GPUSYS_LOCK_TRACE
#define GPUSYS_LOCK_TRACE(p, must_wait) ((void)0)
#endif

/* ---------------------------------------------------------------- copies */

/* Copy n bytes from private memory into the channel. The channel side is
 * written with 8-byte stores wherever alignment allows: on a GPU every
 * store to host memory is a bus transaction. */
GPUSYS_FN void gpusys_copy_to_channel(uint8_t *dst, const uint8_t *src, uint32_t n)
{
#if defined(__CUDACC__)
	uint32_t i = 0;
	while (i < n && ((uintptr_t)(dst + i) & 7u))
		dst[i] = src[i], i++;
	if (((uintptr_t)(src + i) & 7u) == 0) {
		for (; i + 8 <= n; i += 8)
			*(uint64_t *)(dst + i) = *(const uint64_t *)(src + i);
	} else {
		for (; i + 8 <= n; i += 8) {
			uint64_t w = 0;
			for (uint32_t b = 0; b < 8; b++)
				w |= (uint64_t)src[i + b] << (8 * b);
			*(uint64_t *)(dst + i) = w;
		}
	}
	for (; i < n; i++)
		dst[i] = src[i];
#else
	if (n) /* a lane with nothing to send may pass no buffer */
		memcpy(dst, src, n);
#endif
}

/* Copy n bytes out of the channel. On a GPU the loads are volatile so they
 * bypass L1, which may still hold this port's previous response. */
GPUSYS_FN void gpusys_copy_from_channel(uint8_t *dst, const uint8_t *src, uint32_t n)
{
#if defined(__CUDACC__)
	uint32_t i = 0;
	const volatile uint8_t *vs = src;
	while (i < n && ((uintptr_t)(src + i) & 7u))
		dst[i] = vs[i], i++;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = *(const volatile uint64_t *)(src + i);
		if (((uintptr_t)(dst + i) & 7u) == 0) {
			*(uint64_t *)(dst + i) = w;
		} else {
			for (uint32_t b = 0; b < 8; b++)
				dst[i + b] = (uint8_t)(w >> (8 * b));
		}
	}
	for (; i < n; i++)
		dst[i] = vs[i];
#else
	if (n) /* a lane with nothing to send may pass no buffer */
		memcpy(dst, src, n);
#endif
}

#if defined(__CUDACC__)
/* Byte i (0..15) of a piece held as four words, and the piece with byte i
 * or-ed in. Written with constant word indices so that a piece stays in
 * registers: a piece that the compiler puts on the stack (a byte pointer
 * into it, an array indexed at run time) is stored there as soon as its
 * load is issued, and that store waits for the load, so the loads of a
 * batch went across the bus one after another (measured, see
 * bench/RESULTS.md: "Packet 0 as a warp (issue 27)", streams). */
GPUSYS_FN uint32_t gpusys_piece_byte(uint4 v, uint32_t i)
{
	uint32_t w = i < 8 ? (i < 4 ? v.x : v.y) : (i < 12 ? v.z : v.w);
	return (w >> (8 * (i % 4))) & 0xffu;
}

GPUSYS_FN uint4 gpusys_piece_with_byte(uint4 v, uint32_t i, uint32_t byte)
{
	uint32_t b = byte << (8 * (i % 4));
	if (i < 4)
		v.x |= b;
	else if (i < 8)
		v.y |= b;
	else if (i < 12)
		v.z |= b;
	else
		v.w |= b;
	return v;
}
#endif

/* Write the first m (<= GPUSYS_INLINE_BYTES) bytes of src into lane l's
 * chunks of packet 0 (abi.h gpusys_inline_at). On a GPU each chunk is one
 * 16-byte store, the same chunk of every lane of the warp lying together:
 * one coalesced run of whole lines for the warp, where 8-byte stores into
 * 64-byte slots were pieces of every line (bench/RESULTS.md: "Packet 0 as
 * a warp (issue 27)"). Only src's m bytes are read; a partial chunk is padded with
 * zeros. */
GPUSYS_FN void gpusys_inline_put(uint8_t *packet_data, uint32_t l, const uint8_t *src, uint32_t m)
{
#if defined(__CUDACC__)
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < m; k++) {
		const uint32_t a = k * GPUSYS_CHUNK_BYTES;
		const uint32_t c = m - a < GPUSYS_CHUNK_BYTES ? m - a : GPUSYS_CHUNK_BYTES;
		uint32_t w[4] = { 0, 0, 0, 0 };
		if (c == GPUSYS_CHUNK_BYTES && ((uintptr_t)(src + a) & 15u) == 0) {
			const uint4 v = *(const uint4 *)(src + a);
			w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
		} else if (((uintptr_t)(src + a) & 3u) == 0) {
			uint32_t i = 0;
			for (; i + 4 <= c; i += 4)
				w[i / 4] = *(const uint32_t *)(src + a + i);
			for (; i < c; i++)
				w[i / 4] |= (uint32_t)src[a + i] << (8 * (i % 4));
		} else {
			for (uint32_t i = 0; i < c; i++)
				w[i / 4] |= (uint32_t)src[a + i] << (8 * (i % 4));
		}
		asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(packet_data + gpusys_inline_at(l, k)),
			     "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
			     : "memory");
	}
#else
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < m; k++) {
		uint32_t a = k * GPUSYS_CHUNK_BYTES;
		memcpy(packet_data + gpusys_inline_at(l, k), src + a,
		       m - a < GPUSYS_CHUNK_BYTES ? m - a : GPUSYS_CHUNK_BYTES);
	}
#endif
}

/* Read lane l's part of response packet 0: its length (returned, clamped
 * to cap: the daemon never sends more, the clamp keeps a bug there from
 * becoming an overflow here), its status (*ret_status) and its inline bytes
 * into dst. On a GPU each load of host memory is a trip across the bus
 * (about 1 us), so every load is issued before any result is used: the
 * length, the status and as much of the 64-byte slot as cap allows, in
 * 16-byte pieces, together, rather than the length and then the bytes it
 * names one by one (4-6 us for a 4-byte answer, bench/RESULTS.md "calls").
 * Chunk k of every lane lies together (abi.h gpusys_inline_at), so the
 * warp's loads of it are one contiguous run. Reading past the length
 * within the lane's chunks is harmless: they are ours. */
GPUSYS_FN uint32_t gpusys_read_packet0(const struct gpusys_port *port, uint32_t l, uint32_t cap, uint8_t *dst,
				       int32_t *ret_status)
{
#if defined(__CUDACC__)
	const uint32_t want = cap < GPUSYS_INLINE_BYTES ? cap : GPUSYS_INLINE_BYTES;
	uint32_t n, st;
	/* The lane's chunks, in registers: indexed only with constants below,
	 * so no load's result is stored to the stack, which would make the
	 * next load wait for it (gpusys_piece_byte). */
	uint4 v[GPUSYS_INLINE_CHUNKS];
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(n) : "l"(&port->len[l]) : "memory");
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(st) : "l"(&port->aux[l]) : "memory");
#pragma unroll
	for (uint32_t k = 0; k < GPUSYS_INLINE_CHUNKS; k++) {
		v[k] = make_uint4(0, 0, 0, 0);
		if (k * GPUSYS_CHUNK_BYTES < want)
			asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
				     : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w)
				     : "l"(port->data + gpusys_inline_at(l, k))
				     : "memory");
	}
	n = n < cap ? n : cap;
	*ret_status = (int32_t)st;
	const uint32_t m = n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES;
#pragma unroll
	for (uint32_t k = 0; k < GPUSYS_INLINE_CHUNKS; k++) {
		if (k * GPUSYS_CHUNK_BYTES >= m)
			break;
		uint8_t *d = dst + k * GPUSYS_CHUNK_BYTES;
		if (m - k * GPUSYS_CHUNK_BYTES >= GPUSYS_CHUNK_BYTES && !((uintptr_t)d & 15u)) {
			*(uint4 *)d = v[k];
			continue;
		}
		for (uint32_t i = 0; i < GPUSYS_CHUNK_BYTES && k * GPUSYS_CHUNK_BYTES + i < m; i++)
			d[i] = (uint8_t)gpusys_piece_byte(v[k], i);
	}
	return n;
#else
	uint32_t n = *(volatile uint32_t *)&port->len[l];
	n = n < cap ? n : cap;
	*ret_status = *(volatile int32_t *)&port->aux[l];
	const uint32_t m = n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES;
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < m; k++) {
		uint32_t a = k * GPUSYS_CHUNK_BYTES;
		gpusys_copy_from_channel(dst + a, port->data + gpusys_inline_at(l, k),
					 m - a < GPUSYS_CHUNK_BYTES ? m - a : GPUSYS_CHUNK_BYTES);
	}
	return n;
#endif
}

/* ------------------------------------------------------- port ownership */

/* 0 while the channel is usable; -ESHUTDOWN once either state word says the
 * daemon is gone. */
GPUSYS_FN int gpusys_channel_dead(const gpusys_dev_t *dev)
{
	if (gpusys_load_shared_u32(&dev->hdr->server_state) == GPUSYS_SERVER_STOPPED)
		return -ESHUTDOWN;
	if (gpusys_load_shared_u32(&dev->hdr->client_host_state) != GPUSYS_CLIENT_HOST_OK)
		return -ESHUTDOWN;
	return 0;
}

/* One turn of a wait that has not seen what it waits for: a pause (a
 * sleep once the wait is a long one: gpusys_spin_backoff), and every
 * GPUSYS_SPIN_CHECK_EVERY turns a look for a dead channel (returned:
 * -ESHUTDOWN) and a yield. 0 to go on waiting. */
GPUSYS_FN int gpusys_spin_once(const gpusys_dev_t *dev, uint32_t *spins)
{
	gpusys_spin_pause();
	gpusys_spin_backoff(*spins);
	if (++*spins % GPUSYS_SPIN_CHECK_EVERY == 0) {
		int dead = gpusys_channel_dead(dev);
		if (dead)
			return dead;
		gpusys_spin_yield();
	}
	return 0;
}

/* Wait until the port is the client's (the sequence in the server word is
 * ours); returns the server word in *ret_word, or -ECONNABORTED when the
 * daemon handed it back refusing the request (GPUSYS_SW_ABORT: a restart),
 * or -ESHUTDOWN when the channel is dead. The leader, or every lane of the
 * warp at once (gpusys_rpc_finish, which then agrees on the result).
 * acquire: fence so that channel reads that follow see what the daemon wrote
 * before its word; a caller that may read nothing more passes 0 and fences
 * itself where it does (a TRIVIAL response saves a system-scope fence,
 * about a microsecond on a GPU). */
GPUSYS_FN int gpusys_wait_owned_ex(const gpusys_dev_t *dev, uint32_t p, uint32_t seq, uint64_t *ret_word, int acquire)
{
	uint32_t spins = 0;
	uint64_t w;
	while (GPUSYS_WORD_SEQ(w = gpusys_load_shared_u64(&dev->server_word[p])) != (seq & GPUSYS_SEQ_MASK)) {
		int dead = gpusys_spin_once(dev, &spins);
		if (dead)
			return dead;
	}
	/* A restarting daemon refused the packet we published (the request
	 * did not run): the port is ours again, at this sequence. */
	if (GPUSYS_WORD_FLAGS(w) & GPUSYS_SW_ABORT)
		return -ECONNABORTED;
	if (acquire)
		gpusys_fence_acquire(&dev->server_word[p]);
	else
		gpusys_order_after(&dev->server_word[p]);
	*ret_word = w;
	return 0;
}

GPUSYS_FN int gpusys_wait_owned(const gpusys_dev_t *dev, uint32_t p, uint32_t seq, uint64_t *ret_word)
{
	return gpusys_wait_owned_ex(dev, p, seq, ret_word, 1);
}

/* A stream's wait (abi.h: two packets in flight): until the daemon has
 * acknowledged the packet of sequence seq - behind (behind 0 or 1; seq is
 * the last one this client published), then acquire, as gpusys_wait_owned.
 * The daemon acknowledges packet by packet and may be past that packet
 * already, so the server word's sequence is taken as reached anywhere in
 * [seq - behind, seq], modulo GPUSYS_SEQ_MASK + 1: it never runs ahead of
 * ours, and never more than 2 behind while we stream, so the window of 2
 * in 4096 is never ambiguous. *ret_word is the word seen, also with
 * -ECONNABORTED (its sequence is ours then: a restarting daemon refuses
 * only a packet after which we publish nothing unacknowledged,
 * port_handover_step). The leader alone. */
GPUSYS_FN int gpusys_wait_acked(const gpusys_dev_t *dev, uint32_t p, uint32_t seq, uint32_t behind, uint64_t *ret_word)
{
	uint32_t spins = 0;
	uint64_t w;
	while (((seq - GPUSYS_WORD_SEQ(w = gpusys_load_shared_u64(&dev->server_word[p]))) & GPUSYS_SEQ_MASK) > behind) {
		int dead = gpusys_spin_once(dev, &spins);
		if (dead)
			return dead;
	}
	*ret_word = w;
	if (GPUSYS_WORD_FLAGS(w) & GPUSYS_SW_ABORT)
		return -ECONNABORTED;
	gpusys_fence_acquire(&dev->server_word[p]);
	return 0;
}

/* Write lane l's request head (abi.h: heads): its n (<= GPUSYS_HEAD_BYTES)
 * bytes, its capacity and the tag. On a GPU one 16-byte store, so the
 * daemon sees the head whole or not at all, and no fence is needed before
 * the word; on a CPU the tag last, with release. */
GPUSYS_FN void gpusys_head_put(struct gpusys_head *h, uint32_t tag, uint32_t cap, const uint8_t *src, uint32_t n)
{
#if defined(__CUDACC__)
	uint64_t b = 0;
	if (n == GPUSYS_HEAD_BYTES && ((uintptr_t)src & 7u) == 0)
		b = *(const uint64_t *)src;
	else
#pragma unroll
		for (uint32_t i = 0; i < GPUSYS_HEAD_BYTES; i++)
			if (i < n)
				b |= (uint64_t)src[i] << (8 * i);
	asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(h), "r"(tag), "r"(cap), "r"((uint32_t)b),
		     "r"((uint32_t)(b >> 32))
		     : "memory");
#else
	if (n)
		memcpy(h->bytes, src, n);
	__atomic_store_n(&h->aux, cap, __ATOMIC_RELAXED);
	if (__atomic_load_n(&gpusys_emu_heads_late, __ATOMIC_RELAXED)) {
		/* gpusys_publish lands it after the word (lane.h). */
		struct gpusys_emu_late_heads *late = &gpusys_emu_late;
		late->tag[late->n] = &h->tag;
		late->value[late->n++] = tag;
		return;
	}
	__atomic_store_n(&h->tag, tag, __ATOMIC_RELEASE);
#endif
}

/* Wait for lane l's answer head to request seq (abi.h: heads) and take it:
 * its length (returned in *ret_len, clamped to cap), its status, its bytes
 * into dst. The head is polled itself: on a GPU one 16-byte load a try,
 * which brings the whole answer in the trip that finds it. Returns 0, the
 * request's status when the head says the request failed as a whole
 * (GPUSYS_HEAD_FAILED), or -ESHUTDOWN once the daemon is gone. */
GPUSYS_FN int gpusys_head_wait(const gpusys_dev_t *dev, const struct gpusys_head *h, uint32_t seq, uint32_t cap,
			       uint8_t *dst, uint32_t *ret_len, int32_t *ret_status)
{
	const uint32_t want = gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 0);
	uint32_t spins = 0, tag, n;
	int32_t status;
#if defined(__CUDACC__)
	uint4 v;
	for (;;) {
		asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
			     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
			     : "l"(h)
			     : "memory");
		if ((v.x & GPUSYS_HEAD_WHO) == want)
			break;
		int dead = gpusys_spin_once(dev, &spins);
		if (dead)
			return dead;
	}
	tag = v.x, status = (int32_t)v.y;
	n = gpusys_head_len(tag);
	n = n < cap ? n : cap;
	n = n < GPUSYS_HEAD_BYTES ? n : GPUSYS_HEAD_BYTES;
	const uint64_t b = (uint64_t)v.z | (uint64_t)v.w << 32;
#pragma unroll
	for (uint32_t i = 0; i < GPUSYS_HEAD_BYTES; i++)
		if (i < n)
			dst[i] = (uint8_t)(b >> (8 * i));
#else
	while (((tag = __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE)) & GPUSYS_HEAD_WHO) != want) {
		int dead = gpusys_spin_once(dev, &spins);
		if (dead)
			return dead;
	}
	status = (int32_t)__atomic_load_n(&h->aux, __ATOMIC_RELAXED);
	n = gpusys_head_len(tag);
	n = n < cap ? n : cap;
	n = n < GPUSYS_HEAD_BYTES ? n : GPUSYS_HEAD_BYTES;
	if (n)
		memcpy(dst, h->bytes, n);
#endif
	if (tag & GPUSYS_HEAD_FAILED) {
		*ret_len = 0;
		*ret_status = 0;
		return status ? status : -EPROTO;
	}
	*ret_len = n;
	*ret_status = status;
	return 0;
}

/* Hand the port to the daemon: every lane's stores first, then the word.
 * word is the client word less its sequence. ring: for a message's first
 * packet, the leader's fresh doorbell stamp (gpusys_count_and_ring), to
 * which the port is added; 0 for the packets after it. */
GPUSYS_FN uint32_t gpusys_publish(const gpusys_dev_t *dev, uint64_t mask, uint32_t p, uint32_t seq, uint64_t word,
				  uint64_t ring)
{
	/* An EMPTY request wrote nothing to the channel, and the heads of a
	 * HEADS request check themselves (abi.h): no release fence (on a GPU
	 * a system fence before the flag store costs about 1 us). */
	if (!(word & (GPUSYS_CW_EMPTY | GPUSYS_CW_HEADS)))
		gpusys_fence_release(&dev->client_word[p]);
	gpusys_lane_sync(mask);
	seq++; /* the word carries the low bits; we keep them all */
	if (gpusys_lane_is_leader(mask)) {
		/* Every packet rings, so a dozing daemon wakes for the rest of
		 * a message too. A message's first packet rings with a fresh
		 * stamp (gpusys_count_and_ring, which also counts the request
		 * for gpusys_synchronize) and its port; later packets with
		 * their port and sequence, tagged by the top bit (abi.h
		 * GPUSYS_RING_*): every value differs from the last one the
		 * daemon saw, and names the port a woken daemon looks at
		 * first.
		 * Word, then doorbell, then one flushing fence for both (the
		 * floor's store-then-fence; the counter was read before).
		 * NOTE: ringing and counting after the fence measured no
		 * faster in the real client (trace: publish 0.67 us either
		 * way, H200), and a count that lands after the daemon has
		 * completed the request can let gpusys_synchronize return
		 * early while another stream's kernels call
		 * (bench/RESULTS.md, 2026-11-27). */
		ring = ring ? ring | p : GPUSYS_RING_STREAM | (uint64_t)p << 32 | seq;
		gpusys_store_shared_u64(&dev->client_word[p], word | (seq & GPUSYS_SEQ_MASK));
		gpusys_store_shared_u64(&dev->hdr->doorbell, ring);
		gpusys_fence_flush();
	}
#ifndef __CUDACC__
	/* Late heads (lane.h): the word is out; a moment (tens of us, with the
	 * timer's slack) for a server to see it alone, then the tags. */
	struct gpusys_emu_late_heads *late = &gpusys_emu_late;
	if (late->n) {
		nanosleep(&(struct timespec){ .tv_nsec = 1000 }, NULL);
		for (uint32_t i = 0; i < late->n; i++)
			__atomic_store_n(late->tag[i], late->value[i], __ATOMIC_RELEASE);
		late->n = 0;
	}
	/* A host warp is one thread, its own leader: wake a dozing daemon. */
	gpusys_wake_daemon(&dev->hdr->dozing, dev->wake_fd);
#endif
	return seq;
}

/* Port lock states (private memory). A holder that saw the daemon hand the
 * port back releases it as OWNED, so the next holder need not read the
 * server word across the bus before writing (about 1 us on a GPU); after a
 * fire-and-forget request or an error it releases it as UNACKED, and the
 * next holder waits for the acknowledgement first. */
#define GPUSYS_PORT_FREE_OWNED 0u
#define GPUSYS_PORT_HELD 1u
#define GPUSYS_PORT_FREE_UNACKED 2u

/* Leader: try to take port p's lock (one exchange, whatever free state it
 * was in). True with *must_wait (whether the daemon may still own the port)
 * and *seq (the sequence its last holder left). */
GPUSYS_FN int gpusys_port_take(const gpusys_dev_t *dev, uint32_t p, int *must_wait, uint32_t *seq)
{
	uint64_t old = gpusys_lock_pair_take(&dev->locks[p], GPUSYS_PORT_HELD);
	uint32_t state = (uint32_t)old;
	if (state == GPUSYS_PORT_HELD)
		return 0;
	*must_wait = state != GPUSYS_PORT_FREE_OWNED;
	*seq = (uint32_t)(old >> 32);
	return 1;
}

/* Leader: give port p back, with its sequence; owned: the last thing seen
 * was the daemon's hand-back. ordered: every lane's accesses to the port
 * are ordered before the give-back already (gpusys_lock_pair_release_ordered:
 * stores published by a fence, every load's value used before the warp
 * barrier in front of this). */
GPUSYS_FN void gpusys_port_give_back(const gpusys_dev_t *dev, uint32_t p, uint32_t seq, int owned, int ordered)
{
	uint32_t state = owned ? GPUSYS_PORT_FREE_OWNED : GPUSYS_PORT_FREE_UNACKED;
	if (ordered)
		gpusys_lock_pair_release_ordered(&dev->locks[p], state, seq);
	else
		gpusys_lock_pair_release(&dev->locks[p], state, seq);
}

/* Leader: lock a port (private lock), starting at this warp's hint.
 * *must_wait: whether the daemon may still own it; *seq: its sequence. */
GPUSYS_FN uint32_t gpusys_port_lock(const gpusys_dev_t *dev, int *must_wait, uint32_t *seq)
{
	uint32_t n = dev->num_ports;
	uint32_t p = gpusys_port_hint() % n;
	for (uint32_t tries = 1;; tries++) {
		if (gpusys_port_take(dev, p, must_wait, seq))
			return p;
		p = p + 1 == n ? 0 : p + 1;
		if (tries % n == 0) {
			gpusys_pass_pause(tries / n - 1);
			if (tries % (n * GPUSYS_SPIN_CHECK_EVERY) == 0)
				gpusys_spin_yield();
		}
	}
}

/* Leader: lock one of the window ports (the last dev->num_windows; futures
 * hold only the first half of them, the rest only synchronous calls: see
 * "Asynchronous calls" below), starting at this warp's hint; as
 * gpusys_port_lock otherwise. Only when num_windows > 0. */
GPUSYS_FN uint32_t gpusys_port_lock_window(const gpusys_dev_t *dev, int *must_wait, uint32_t *seq)
{
	uint32_t n = dev->num_windows, first = dev->num_ports - n;
	uint32_t i = gpusys_port_hint() % n;
	for (uint32_t tries = 1;; tries++) {
		if (gpusys_port_take(dev, first + i, must_wait, seq))
			return first + i;
		i = i + 1 == n ? 0 : i + 1;
		if (tries % n == 0) {
			gpusys_pass_pause(tries / n - 1);
			if (tries % (n * GPUSYS_SPIN_CHECK_EVERY) == 0)
				gpusys_spin_yield();
		}
	}
}

/* The port a call takes (gpusys_wants_window, gpusys_port_lock_for). */
enum gpusys_window_want {
	GPUSYS_WINDOW_NO = 0,      /* a plain port */
	GPUSYS_WINDOW_WAIT = 1,    /* a window, waiting for one */
	GPUSYS_WINDOW_IF_FREE = 2, /* a window that is free at once, else a plain port */
};

/* Whether a message should take a window port: GPUSYS_WINDOW_WAIT when
 * its request stream, or the response stream its capacities allow, needs
 * more than one packet of a plain port; GPUSYS_WINDOW_IF_FREE when it
 * streams less: through a window a stream that fits the two slots costs
 * no exchange of its own either way (stream packet 0 follows packet 0
 * without a wait, and an answer comes with its packet 0, ABI 13), through
 * data[] one each way. GPUSYS_WINDOW_NO: no stream. Every lane of mask
 * calls it; the same answer in each. */
GPUSYS_FN int gpusys_wants_window(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *in_len,
				  const uint32_t *out_cap, uint32_t biggest, uint32_t cap_biggest)
{
	if (!dev->num_windows || (biggest <= GPUSYS_INLINE_BYTES && cap_biggest <= GPUSYS_INLINE_BYTES))
		return 0;
	uint32_t part[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t off[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	GPUSYS_FOR_EACH_LANE(mask, l)
	part[GPUSYS_LI(l)] = gpusys_stream_part(in_len[GPUSYS_LI(l)]);
	uint32_t in_stream = gpusys_lane_exscan(mask, part, off);
	GPUSYS_FOR_EACH_LANE(mask, l)
	part[GPUSYS_LI(l)] = out_cap ? gpusys_stream_part(out_cap[GPUSYS_LI(l)]) : 0;
	uint32_t out_stream = gpusys_lane_exscan(mask, part, off);
	if (in_stream > GPUSYS_PACKET_BYTES || out_stream > GPUSYS_PACKET_BYTES)
		return GPUSYS_WINDOW_WAIT;
	return in_stream || out_stream ? GPUSYS_WINDOW_IF_FREE : GPUSYS_WINDOW_NO;
}

/* -------------------------------------------------------------- streams */

/* Lane l's bytes beyond its inline slot form [off, off + part) of the
 * message's stream; packet k carries stream bytes [k*P, (k+1)*P), P = pkt
 * (the port's packet size, gpusys_port_stream). Copy this lane's share of
 * packet k in the given direction. */
GPUSYS_FN void gpusys_stream_chunk(uint8_t *packet, uint32_t pkt, uint32_t k, uint32_t off, uint32_t part,
				   uint8_t *buf, int to_channel)
{
	uint64_t lo = (uint64_t)k * pkt, hi = lo + pkt;
	uint64_t a = off > lo ? off : lo, b = (uint64_t)off + part < hi ? (uint64_t)off + part : hi;
	if (a >= b)
		return;
	uint8_t *in_packet = packet + (a - lo);
	uint8_t *in_buf = buf + GPUSYS_INLINE_BYTES + (a - off);
	if (to_channel)
		gpusys_copy_to_channel(in_packet, in_buf, (uint32_t)(b - a));
	else
		gpusys_copy_from_channel(in_buf, in_packet, (uint32_t)(b - a));
}

/* Copy packet k of a message's stream, every lane's share of it, in the given
 * direction. Per-lane arrays as everywhere: off and part from the stream
 * layout, buf the lane's buffer (its bytes beyond the inline slot are the
 * stream's); total the stream's length. Every lane of mask calls it.
 *
 * On a GPU each load of the channel is a trip across the bus, so loads go in
 * 16-byte pieces, issued in batches before any is used: a 2 KiB packet read
 * by one lane 8 bytes at a time, each load waiting for the last, took about
 * 300 us. Where every buffer is one the lanes can all reach (global or
 * shared memory, not a thread's stack) the lanes also share the work
 * whoever owns the bytes: lane r of c takes pieces r, r + c, ... of the
 * packet, a packet then costs about one trip, and pieces go to or come from
 * the owning lanes' buffers, found from the layout that every lane gathers
 * with shuffles. Otherwise each lane reads its own share (whole pieces: the
 * bytes around it are read and dropped) and writes its own bytes. */
#if defined(__CUDACC__)
/* Pieces whose loads are in flight at once, per lane, writing to the
 * channel and reading from it. Each is four registers for the whole call
 * path, which every kernel that makes calls carries: 8 raised the registers
 * of the bench's kernels, 4 keeps them where they were (ptxas -v; see
 * bench/RESULTS.md: "Packet 0 as a warp (issue 27)"). */
#define GPUSYS_STREAM_BATCH 4u
#define GPUSYS_STREAM_PIECE 16u

struct gpusys_stream_spans {
	uint32_t n;                         /* lanes with a share, in lane order */
	uint32_t off[GPUSYS_WARP_LANES];
	uint32_t end[GPUSYS_WARP_LANES];    /* off + part */
	uint8_t *buf[GPUSYS_WARP_LANES];    /* the lane's stream bytes: buf + GPUSYS_INLINE_BYTES */
};

GPUSYS_FN void gpusys_stream_spans_fill(uint64_t mask, uint32_t off, uint32_t part, uint8_t *buf,
					struct gpusys_stream_spans *sp)
{
	sp->n = 0;
	for (uint64_t m = mask; m; m &= m - 1) {
		int src = __ffsll((long long)m) - 1;
		uint32_t o = __shfl_sync((unsigned)mask, off, src);
		uint32_t q = __shfl_sync((unsigned)mask, part, src);
		unsigned long long b = __shfl_sync((unsigned)mask, (unsigned long long)(uintptr_t)buf, src);
		if (!q)
			continue;
		sp->off[sp->n] = o;
		sp->end[sp->n] = o + q;
		sp->buf[sp->n] = (uint8_t *)(uintptr_t)b + GPUSYS_INLINE_BYTES;
		sp->n++;
	}
}

/* The span holding stream byte x, from *at on (pieces come in increasing
 * order); sp->n when none does. */
GPUSYS_FN uint32_t gpusys_stream_span_at(const struct gpusys_stream_spans *sp, uint32_t *at, uint32_t x)
{
	uint32_t i = *at;
	while (i < sp->n && sp->end[i] <= x)
		i++;
	*at = i;
	return i;
}

/* The stream bytes of [x, x + 16) that the spans hold (and that lie below
 * total), gathered from the owners' buffers; zeros elsewhere. */
GPUSYS_FN uint4 gpusys_stream_gather(const struct gpusys_stream_spans *sp, uint32_t *at, uint32_t x, uint32_t total)
{
	uint32_t end = x + GPUSYS_STREAM_PIECE < total ? x + GPUSYS_STREAM_PIECE : total;
	uint4 v = make_uint4(0, 0, 0, 0);
	for (uint32_t i = gpusys_stream_span_at(sp, at, x); i < sp->n && sp->off[i] < end; i++) {
		uint32_t y = x > sp->off[i] ? x : sp->off[i];
		uint32_t e = end < sp->end[i] ? end : sp->end[i];
		const uint8_t *b = sp->buf[i] + (y - sp->off[i]);
		if (y == x && e == x + GPUSYS_STREAM_PIECE && !((uintptr_t)b & 15u))
			return *(const uint4 *)b; /* the whole piece, aligned: one 16-byte access */
		for (; y < e; y++)
			v = gpusys_piece_with_byte(v, y - x, *b++);
	}
	return v;
}

/* The bytes of piece v (stream bytes [x, x + 16)) that the spans hold, to
 * the owners' buffers. */
GPUSYS_FN void gpusys_stream_scatter(const struct gpusys_stream_spans *sp, uint32_t *at, uint32_t x, uint32_t total,
				     uint4 v)
{
	uint32_t end = x + GPUSYS_STREAM_PIECE < total ? x + GPUSYS_STREAM_PIECE : total;
	for (uint32_t i = gpusys_stream_span_at(sp, at, x); i < sp->n && sp->off[i] < end; i++) {
		uint32_t y = x > sp->off[i] ? x : sp->off[i];
		uint32_t e = end < sp->end[i] ? end : sp->end[i];
		uint8_t *b = sp->buf[i] + (y - sp->off[i]);
		if (y == x && e == x + GPUSYS_STREAM_PIECE && !((uintptr_t)b & 15u)) {
			*(uint4 *)b = v;
			return;
		}
		for (; y < e; y++)
			*b++ = (uint8_t)gpusys_piece_byte(v, y - x);
	}
}

/* Pieces first, first + step, ... below last of packet (stream bytes from
 * lo), in batches whose loads are all issued before any is used. to_channel
 * writes whole pieces: only for spans that cover the packet (the bytes past
 * total are zeros). */
GPUSYS_FN void gpusys_stream_pieces(const struct gpusys_stream_spans *sp, uint8_t *packet, uint32_t lo,
				    uint32_t total, uint32_t first, uint32_t last, uint32_t step, int to_channel)
{
	uint32_t at = 0;
	if (to_channel) {
		/* Gather a batch, then store it: no load waits behind a store
		 * to the channel. */
		for (uint32_t j0 = first; j0 < last; j0 += GPUSYS_STREAM_BATCH * step) {
			uint4 v[GPUSYS_STREAM_BATCH];
#pragma unroll
			for (uint32_t t = 0; t < GPUSYS_STREAM_BATCH; t++) {
				uint32_t j = j0 + t * step;
				v[t] = make_uint4(0, 0, 0, 0);
				if (j < last)
					v[t] = gpusys_stream_gather(sp, &at, lo + j * GPUSYS_STREAM_PIECE, total);
			}
#pragma unroll
			for (uint32_t t = 0; t < GPUSYS_STREAM_BATCH; t++) {
				uint32_t j = j0 + t * step;
				if (j < last)
					*(uint4 *)(packet + j * GPUSYS_STREAM_PIECE) = v[t];
			}
		}
		return;
	}
	/* ld.global.cg, not ld.volatile: both skip L1 (which may hold the
	 * slot's last packet; host memory is not kept in L2), but a lane's
	 * volatile loads of host memory go one after another: a lane alone
	 * read 4 KiB in 191.7 us with them, 80.7 with these, and a warp the
	 * same either way (bench/sysmem_read.cu; bench/RESULTS.md, "What
	 * bounds one warp's reads of pinned memory"). The acquire before the
	 * copy orders them after the daemon's word. */
	for (uint32_t j0 = first; j0 < last; j0 += GPUSYS_STREAM_BATCH * step) {
		uint4 v[GPUSYS_STREAM_BATCH];
#pragma unroll
		for (uint32_t t = 0; t < GPUSYS_STREAM_BATCH; t++) {
			uint32_t j = j0 + t * step;
			if (j < last)
				asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
					     : "=r"(v[t].x), "=r"(v[t].y), "=r"(v[t].z), "=r"(v[t].w)
					     : "l"(packet + j * GPUSYS_STREAM_PIECE)
					     : "memory");
		}
#pragma unroll
		for (uint32_t t = 0; t < GPUSYS_STREAM_BATCH; t++) {
			uint32_t j = j0 + t * step;
			if (j < last)
				gpusys_stream_scatter(sp, &at, lo + j * GPUSYS_STREAM_PIECE, total, v[t]);
		}
	}
}

GPUSYS_FN void gpusys_stream_packet(uint64_t mask, uint8_t *packet, uint32_t pkt, uint32_t k, const uint32_t *off,
				    const uint32_t *part, void *const *buf, uint32_t total, int to_channel)
{
	struct gpusys_stream_spans sp;
	const uint32_t lo = k * pkt;
	const uint32_t bytes = total - lo < pkt ? total - lo : pkt;
	const int on_stack = part[0] && __isLocal(buf[0]);
	if (!__any_sync((unsigned)mask, on_stack)) {
		gpusys_stream_spans_fill(mask, off[0], part[0], (uint8_t *)buf[0], &sp);
		const uint32_t rank = (uint32_t)__popcll(mask & ((1ull << gpusys_lane_id()) - 1));
		gpusys_stream_pieces(&sp, packet, lo, total, rank, (bytes + GPUSYS_STREAM_PIECE - 1) / GPUSYS_STREAM_PIECE,
				     (uint32_t)__popcll(mask), to_channel);
		return;
	}
	/* This lane's share [a, b) of the packet's stream bytes. */
	uint32_t a = off[0] > lo ? off[0] : lo, b = off[0] + part[0] < lo + bytes ? off[0] + part[0] : lo + bytes;
	if (a >= b)
		return;
	if (to_channel) {
		/* Posted stores: nothing waits on them. Whole pieces would
		 * overwrite the neighbours' bytes. */
		gpusys_copy_to_channel(packet + (a - lo), (const uint8_t *)buf[0] + GPUSYS_INLINE_BYTES + (a - off[0]), b - a);
		return;
	}
	sp.n = 1;
	sp.off[0] = off[0];
	sp.end[0] = off[0] + part[0];
	sp.buf[0] = (uint8_t *)buf[0] + GPUSYS_INLINE_BYTES;
	gpusys_stream_pieces(&sp, packet, lo, total, (a - lo) / GPUSYS_STREAM_PIECE,
			     (b - lo + GPUSYS_STREAM_PIECE - 1) / GPUSYS_STREAM_PIECE, 1, 0);
}
#else
GPUSYS_FN void gpusys_stream_packet(uint64_t mask, uint8_t *packet, uint32_t pkt, uint32_t k, const uint32_t *off,
				    const uint32_t *part, void *const *buf, uint32_t total, int to_channel)
{
	(void)total;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		gpusys_stream_chunk(packet, pkt, k, off[GPUSYS_LI(l)], part[GPUSYS_LI(l)], (uint8_t *)buf[GPUSYS_LI(l)],
				    to_channel);
	}
}
#endif

/* Packet k of a stream, as gpusys_stream_packet: by the copy engine where
 * the call's stream goes that way (by_dma, from gpusys_dma_for_stream) and
 * the agent took every copy of the packet, else by the warp. */
GPUSYS_FN void gpusys_stream_copy(const gpusys_dev_t *dev, int by_dma, uint64_t mask, uint8_t *packet, uint32_t pkt,
				  uint32_t k, const uint32_t *off, const uint32_t *part, void *const *buf, uint32_t total,
				  int to_channel)
{
	if (!by_dma || gpusys_stream_packet_dma(dev, mask, packet, pkt, k, off, part, buf, total, to_channel))
		gpusys_stream_packet(mask, packet, pkt, k, off, part, buf, total, to_channel);
}

/* ------------------------------------------------------------------ rpc */

/*
 * Asynchronous calls. A call is split in two: gpusys_rpc_start() locks a
 * port, sends the whole request and returns with the port still locked;
 * gpusys_rpc_finish() waits for the response, reads it and releases the
 * port; gpusys_rpc_test() says without waiting whether the response is
 * there. gpusys_rpc() is the two back to back (the synchronous path: the
 * same instructions as before the split, measured in bench/RESULTS.md).
 *
 * A started call owns its port until it is finished, so futures are
 * bounded, for two reasons:
 *
 *  - Deadlock. A warp that holds ports while it waits for another port can
 *    deadlock with the others doing the same (the ports are only given
 *    back when their owners finish their futures). So futures take their
 *    ports only from the first GPUSYS_ASYNC_PORTS(n) of the channel's n
 *    ports, and only by trying (GPUSYS_ASYNC_PROBES ports from the warp's
 *    hint), or, for a message large enough for a window, from the first
 *    half of the window ports (gpusys_port_trylock_async_window): the
 *    rest of the last quarter (at least one port; the windows are at most
 *    a quarter of the ports and the last of them) is never held by a
 *    future, only by synchronous calls, which the daemon alone completes.
 *    A call
 *    that finds no free asynchronous port is made synchronously (the warp
 *    waits for it, then has a completed future): it never fails and never
 *    waits on another warp, even when every resident warp does so at once.
 *
 *  - Fairness. One warp may hold at most GPUSYS_FUTURES_PER_WARP futures
 *    (counted per hardware warp slot in private memory): there is about
 *    one port per warp slot, so each future beyond a warp's first takes a
 *    neighbour's port, and a few warps would otherwise take every
 *    asynchronous port of the GPU; 8 calls in flight already cover a warp's
 *    round trip (~5 us for a NOOP on an H100) with ~0.6 us of issue each. A warp
 *    at the bound makes its next call synchronously: it waits for that
 *    call, its own, never for another warp's.
 *
 * Every future must be finished (waited, or tested until done) by the lanes
 * that started it, before the kernel ends: its port stays locked until then
 * (fire-and-forget calls use GPUSYS_REQ_NOREPLY instead and need no
 * future). A warp that holds futures across a __syncthreads() while other
 * warps of its block start calls makes those warps wait for ports
 * (synchronously), never deadlock: the reserved ports keep them going.
 */
#define GPUSYS_FUTURES_PER_WARP 8u

/* start and finish are always inlined, on the host too: out of line, the
 * synchronous path (the two back to back) measured 10-17% slower in the
 * emulator than the single function it replaced (bench/RESULTS.md). */
#if defined(__CUDACC__)
#define GPUSYS_FN_RPC GPUSYS_FN
#else
#define GPUSYS_FN_RPC static inline __attribute__((always_inline))
#endif
#define GPUSYS_ASYNC_PROBES 32u
#define GPUSYS_ASYNC_PORTS(n) ((n) - ((n) / 4u > 0u ? (n) / 4u : 1u))

/* Where a call stands between start and finish (the same in every lane). */
enum gpusys_rpc_phase {
	GPUSYS_RPC_DONE = 0, /* nothing held: rc is the result (or NOREPLY sent) */
	GPUSYS_RPC_SENT = 1, /* request sent, port held, response not read */
};

struct gpusys_rpc_pending {
	uint64_t mask;
	uint64_t word;    /* the client word less its sequence */
	uint32_t port;
	uint32_t seq;
	uint32_t warp_slot; /* counted in dev->warp_futures, or ~0u */
	int32_t rc;
	uint32_t phase;   /* enum gpusys_rpc_phase */
	uint32_t sync;    /* start could not make it asynchronous: finish it now */
};

/* Leader: try to lock one of the n ports from first, at most probes of
 * them from the warp's hint on, without waiting. 0 and *ret_port, or
 * -EBUSY. */
GPUSYS_FN int gpusys_port_try_among(const gpusys_dev_t *dev, uint32_t first, uint32_t n, uint32_t probes,
				    int *must_wait, uint32_t *ret_port, uint32_t *seq)
{
	if (n == 0)
		return -EBUSY;
	uint32_t i = gpusys_port_hint() % n;
	for (uint32_t k = 0; k < probes; k++) {
		if (gpusys_port_take(dev, first + i, must_wait, seq)) {
			*ret_port = first + i;
			return 0;
		}
		i = i + 1 == n ? 0 : i + 1;
	}
	return -EBUSY;
}

/* Leader: try to lock one of the asynchronous ports near the warp's hint,
 * without waiting. 0 and *ret_port, or -EBUSY. */
GPUSYS_FN int gpusys_port_trylock_async(const gpusys_dev_t *dev, int *must_wait, uint32_t *ret_port, uint32_t *seq)
{
	uint32_t n = GPUSYS_ASYNC_PORTS(dev->num_ports);
	return gpusys_port_try_among(dev, 0, n, n < GPUSYS_ASYNC_PROBES ? n : GPUSYS_ASYNC_PROBES, must_wait, ret_port,
				     seq);
}

/* Leader: try to lock one of the window ports a future may hold (the
 * first half of dev->num_windows; none where there is only one), without
 * waiting: a future whose answer streams 64 KiB a packet, not 1 KiB (a
 * 64 KiB pread issued asynchronously took 64 exchanges through a plain
 * port). 0 and *ret_port, or -EBUSY. */
GPUSYS_FN int gpusys_port_trylock_async_window(const gpusys_dev_t *dev, int *must_wait, uint32_t *ret_port,
					       uint32_t *seq)
{
	uint32_t n = dev->num_windows / 2u;
	return gpusys_port_try_among(dev, dev->num_ports - dev->num_windows, n, n, must_wait, ret_port, seq);
}

/* Window ports a call with a small stream tries before a plain port
 * (GPUSYS_WINDOW_IF_FREE). */
#define GPUSYS_WINDOW_PROBES 8u

/* Leader: lock a port for a synchronous call with a stream (waiting for
 * one), of the kind gpusys_wants_window said (GPUSYS_WINDOW_WAIT or
 * GPUSYS_WINDOW_IF_FREE). Out of line on a GPU: inlined into
 * gpusys_rpc_start it took the block calls of a kernel declaring nothing
 * to 138 registers of their 128 (tests/file/block-registers.sh). Calls
 * without a stream lock inline (gpusys_port_lock): out of line for them
 * too, a NOOP of 32 lanes took 3.52 us against 2.78-2.82 (H200, calls). */
#if defined(__CUDACC__)
#define GPUSYS_PORT_LOCK_FN static __device__ __noinline__
#else
#define GPUSYS_PORT_LOCK_FN static inline
#endif
GPUSYS_PORT_LOCK_FN uint32_t gpusys_port_lock_for(const gpusys_dev_t *dev, int window, int *must_wait, uint32_t *seq)
{
	uint32_t p;
	if (window == GPUSYS_WINDOW_WAIT)
		return gpusys_port_lock_window(dev, must_wait, seq);
	if (gpusys_port_try_among(dev, dev->num_ports - dev->num_windows, dev->num_windows,
					    GPUSYS_WINDOW_PROBES, must_wait, &p, seq) == 0)
		return p;
	return gpusys_port_lock(dev, must_wait, seq);
}

/* Leader: count a future for this warp; ~0u when the warp is at its bound
 * (or there is no count), and the call must be made synchronously. */
GPUSYS_FN uint32_t gpusys_warp_future_take(const gpusys_dev_t *dev)
{
	if (!dev->warp_futures || !dev->warp_slots)
		return ~0u;
	uint32_t slot = gpusys_port_hint() % dev->warp_slots;
	if (gpusys_count_add_u32(&dev->warp_futures[slot], 1u) >= GPUSYS_FUTURES_PER_WARP) {
		gpusys_count_sub_u32(&dev->warp_futures[slot], 1u);
		return ~0u;
	}
	return slot;
}

/*
 * Start one call from the lanes in mask (the caller's lane must be in it):
 * lock a port, send the request. Per-lane arrays (index GPUSYS_LI(lane)):
 *   in, in_len      request payload (in_len <= GPUSYS_MAX_LANE_PAYLOAD)
 *   out_cap         how much of the response each lane can take (may be
 *                   NULL: nothing)
 * async: try for an asynchronous port (see above); if there is none, or the
 * warp is at its bound, pd->sync says so and the caller finishes at once.
 * With GPUSYS_REQ_NOREPLY the call is done when this returns (the port is
 * released; the next holder waits for the daemon's acknowledgement).
 * Every lane of mask calls it together (converged).
 */
GPUSYS_FN_RPC void gpusys_rpc_start(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
				const void *const *in, const uint32_t *in_len, const uint32_t *out_cap, int async,
				struct gpusys_rpc_pending *pd)
{
	uint32_t part[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t off[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	struct gpusys_port *port;
	uint8_t *stream; /* where the port's stream packets go, pkt bytes each */
	uint32_t p = 0, seq = 0, total, rcu = 0, slot = ~0u, sync = 0, pkt;
	uint64_t ring = 0; /* leader: the doorbell stamp (gpusys_count_and_ring) */
	uint64_t word, sw = 0;
	int rc = 0, by_dma;

	GPUSYS_RPC_TRACE(0);
	pd->mask = mask;
	pd->phase = GPUSYS_RPC_DONE;
	pd->warp_slot = ~0u;
	pd->sync = 0;
	pd->word = 0;
	pd->port = 0;
	pd->seq = 0;
	if (flags & ~GPUSYS_REQ_KNOWN_FLAGS) {
		pd->rc = -EINVAL;
		return;
	}
	uint32_t biggest = gpusys_lane_max(mask, in_len);
	if (biggest > GPUSYS_MAX_LANE_PAYLOAD) {
		pd->rc = -E2BIG;
		return;
	}
	/* EMPTY: no lane sends or expects bytes, so len[] and aux[] stay
	 * untouched and the daemon reads only our word. */
	uint32_t cap_biggest = out_cap ? gpusys_lane_max(mask, out_cap) : 0;
	int empty = biggest == 0 && cap_biggest == 0;
	/* HEADS: a small call, each lane's packet 0 and answer one 16-byte
	 * head (abi.h). */
	int heads = !empty && biggest <= GPUSYS_HEAD_BYTES && cap_biggest <= GPUSYS_HEAD_BYTES;
	/* A large message streams through a window port (abi.h): 64 KiB an
	 * exchange instead of 2 KiB; a small stream takes one if one is free
	 * (gpusys_wants_window). A future tries the windows futures may hold,
	 * then a plain asynchronous port. */
	int window = flags & GPUSYS_REQ_NO_WINDOW ? GPUSYS_WINDOW_NO
						 : gpusys_wants_window(dev, mask, in_len, out_cap, biggest, cap_biggest);
	word = gpusys_client_word(0,
				  (flags & GPUSYS_REQ_NOREPLY ? GPUSYS_CW_NOREPLY : 0) | (empty ? GPUSYS_CW_EMPTY : 0) |
					  (heads ? GPUSYS_CW_HEADS : 0),
				  opcode, mask & 0xffffffffu);

	/* Own a port: lock it, then wait until the daemon has handed it back
	 * (a fire-and-forget request of a previous holder may be in flight). */
	if (gpusys_lane_is_leader(mask)) {
		int must_wait = 0;
		ring = gpusys_count_and_ring(dev->submitted);
		if (async && !(flags & GPUSYS_REQ_NOREPLY)) {
			slot = gpusys_warp_future_take(dev);
			if (slot == ~0u ||
			    ((!window || gpusys_port_trylock_async_window(dev, &must_wait, &p, &seq) < 0) &&
			     gpusys_port_trylock_async(dev, &must_wait, &p, &seq) < 0)) {
				if (slot != ~0u)
					gpusys_count_sub_u32(&dev->warp_futures[slot], 1u);
				slot = ~0u;
				sync = 1;
			}
		}
		if (!async || sync || (flags & GPUSYS_REQ_NOREPLY))
			p = window ? gpusys_port_lock_for(dev, window, &must_wait, &seq)
				   : gpusys_port_lock(dev, &must_wait, &seq);
		GPUSYS_LOCK_TRACE(p, must_wait);
		if (must_wait) {
			rcu = (uint32_t)gpusys_wait_owned(dev, p, seq, &sw);
			/* The previous holder's fire-and-forget request was
			 * refused by a restarting daemon: the port is ours
			 * all the same. */
			if ((int)rcu == -ECONNABORTED)
				rcu = 0;
		}
	}
	if (async) {
		pd->warp_slot = gpusys_lane_bcast_u32(mask, slot);
		pd->sync = gpusys_lane_bcast_u32(mask, sync);
	}
	p = gpusys_lane_bcast_u32(mask, p);
	seq = gpusys_lane_bcast_u32(mask, seq);
	rc = (int)gpusys_lane_bcast_u32(mask, rcu);
	if (rc)
		goto unlock;
	port = &dev->ports[p];
	GPUSYS_RPC_TRACE(1);

	/* Packet 0: lengths, capacities, inline bytes (none of it when empty),
	 * or each lane's head, tagged with the sequence publish will give. */
	total = 0;
	if (heads) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			uint32_t n = in_len[GPUSYS_LI(l)];
			gpusys_head_put(&port->heads[l], gpusys_head_tag(seq + 1, GPUSYS_HEAD_REQUEST, n),
					out_cap ? out_cap[GPUSYS_LI(l)] : 0, (const uint8_t *)in[GPUSYS_LI(l)], n);
		}
	} else if (!empty) {
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
	GPUSYS_RPC_TRACE(2);
	seq = gpusys_publish(dev, mask, p, seq, word, ring);
	GPUSYS_RPC_TRACE(3);

	/* Request stream, two packets in flight (abi.h): packet k goes in
	 * slot k % 2 of the port's data or window (gpusys_port_stream) once
	 * the daemon has acknowledged the packet published before the last
	 * one (seq - 1: packet k - 2, the slot's last, or for k = 1 packet 0),
	 * so that we write packet k while it copies packet k - 1. Packet 0
	 * fills data[], so there stream packet 0 waits for its acknowledgement
	 * (seq); a window's (its packets are the larger) goes at once. */
	stream = gpusys_port_stream(dev->ports, dev->windows, dev->num_ports, dev->num_windows, p, &pkt);
	/* Large shares in global memory go by the copy engine (dma.h), as a
	 * response's do in gpusys_rpc_finish: a lane alone stores 64 KiB in
	 * about 640 us. The copies of packet k are done before its word. */
	by_dma = total ? gpusys_dma_for_stream(dev, mask, part, (void *const *)in, total) : 0;
	for (uint32_t k = 0; k * pkt < total; k++) {
		GPUSYS_STREAM_TRACE(0);
		if (k || pkt < GPUSYS_WINDOW_BYTES / GPUSYS_STREAM_SLOTS) {
			if (gpusys_lane_is_leader(mask))
				rcu = (uint32_t)gpusys_wait_acked(dev, p, seq, k != 0, &sw);
			rc = (int)gpusys_lane_bcast_u32(mask, rcu);
			if (rc)
				goto unlock;
		}
		GPUSYS_STREAM_TRACE(1);
		gpusys_stream_copy(dev, by_dma, mask, gpusys_stream_slot(stream, pkt, k), pkt, k, off, part,
				   (void *const *)in, total, 1);
		GPUSYS_STREAM_TRACE(2);
		seq = gpusys_publish(dev, mask, p, seq, word, 0);
		GPUSYS_STREAM_TRACE(3);
	}

	if (flags & GPUSYS_REQ_NOREPLY)
		goto unlock; /* the next holder waits for the daemon's ack */

	pd->phase = GPUSYS_RPC_SENT;
	pd->word = word;
	pd->port = p;
	pd->seq = seq;
	pd->rc = 0;
	return;

unlock:
	gpusys_lane_sync(mask);
	if (gpusys_lane_is_leader(mask)) {
		/* -ECONNABORTED: the daemon handed the port back at seq. A
		 * fire-and-forget request read nothing after publishing. */
		gpusys_port_give_back(dev, p, seq, rc == -ECONNABORTED, rc == 0);
		if (pd->warp_slot != ~0u)
			gpusys_count_sub_u32(&dev->warp_futures[pd->warp_slot], 1u);
	}
	pd->warp_slot = ~0u;
	pd->rc = rc;
}

/* Whether a started call's response has arrived (or it is done): nonzero
 * means gpusys_rpc_finish() will not wait. One read of the server word;
 * every lane of pd->mask calls it together. */
GPUSYS_FN int gpusys_rpc_test(const gpusys_dev_t *dev, const struct gpusys_rpc_pending *pd)
{
	if (pd->phase != GPUSYS_RPC_SENT)
		return 1;
	uint32_t ready = 0;
	if (gpusys_lane_is_leader(pd->mask)) {
		uint64_t w = gpusys_load_shared_u64(&dev->server_word[pd->port]);
		ready = GPUSYS_WORD_SEQ(w) == (pd->seq & GPUSYS_SEQ_MASK) || gpusys_channel_dead(dev) != 0;
	}
	return (int)gpusys_lane_bcast_u32(pd->mask, ready);
}

/*
 * Finish a started call: wait for the response, read it, release the port.
 * Per-lane arrays:
 *   out, out_cap    where the response goes and how much fits (the caps
 *                   given to start)
 *   out_len         bytes received
 *   lane_status     0 or -errno from the service
 * Returns 0 or a negative errno for the whole call: -E2BIG (a payload is too
 * large, nothing sent), -ESHUTDOWN (daemon gone), or the request status the
 * daemon set (-ENOSYS unknown opcode, -EINVAL malformed...). A call already
 * done (failed at start, NOREPLY, finished) returns its result again.
 */
GPUSYS_FN_RPC int gpusys_rpc_finish(const gpusys_dev_t *dev, struct gpusys_rpc_pending *pd, void *const *out,
				const uint32_t *out_cap, uint32_t *out_len, int32_t *lane_status)
{
	uint32_t part[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	uint32_t off[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	const uint64_t mask = pd->mask;
	const uint32_t p = pd->port;
	const uint64_t word = pd->word;
	uint32_t seq = pd->seq, total, rcu = 0, pkt;
	struct gpusys_port *port = &dev->ports[p];
	uint8_t *stream; /* where the port's stream packets go, pkt bytes each */
	int owned = 0; /* the daemon has handed the port back to us (the leader's is used) */
	uint64_t sw = 0;
	int rc, by_dma;

	if (pd->phase != GPUSYS_RPC_SENT)
		return pd->rc;

	/* A call of heads: each lane polls its answer head, which carries its
	 * length, status and bytes (abi.h). A lane that saw the channel dead
	 * while another saw its answer: every lane takes the leader's view,
	 * as below. The daemon wrote the server word after the heads, so the
	 * port is ours (owned) whenever a head arrived. */
	if (word & GPUSYS_CW_HEADS) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			int r = gpusys_head_wait(dev, &port->heads[l], seq, out_cap[GPUSYS_LI(l)],
						 (uint8_t *)out[GPUSYS_LI(l)], &out_len[GPUSYS_LI(l)],
						 &lane_status[GPUSYS_LI(l)]);
			if (r && !rcu)
				rcu = (uint32_t)r;
		}
		if (gpusys_lane_any(mask, rcu != 0))
			rcu = gpusys_lane_bcast_u32(mask, rcu);
		rc = (int)rcu;
		owned = rc != -ESHUTDOWN;
		GPUSYS_RPC_TRACE(4);
		GPUSYS_RPC_TRACE(5);
		GPUSYS_RPC_TRACE(6);
		goto unlock;
	}

	/* Response packet 0: the status is in the server word. Every lane
	 * waits for it, not the leader alone: the lanes' loads of one word are
	 * one read across the bus, and once the word carries our sequence it
	 * stays (the daemon writes it once per answer), so every lane leaves
	 * with the same value. Against the leader spinning alone while the
	 * rest wait, then shuffling the word out: best one-warp p50 2.66-2.82
	 * us against 2.75-2.91, the client against a minimal server 2.59-2.78
	 * against 2.66-2.91 (H100, six tables each, interleaved; throughput the
	 * same within its noise). But a lane whose wait looked for a dead
	 * channel (every GPUSYS_SPIN_CHECK_EVERY spins) can leave with an error
	 * while another saw the answer: then every lane takes the leader's
	 * view. The vote is all the fast path pays, and it reconverges the
	 * lanes, which may have come in apart. */
	rcu = (uint32_t)gpusys_wait_owned_ex(dev, p, seq, &sw, 0);
	if (gpusys_lane_any(mask, rcu != 0)) {
		rcu = gpusys_lane_bcast_u32(mask, rcu);
		sw = gpusys_lane_bcast_u64(mask, sw);
	}
	if (!rcu) {
		owned = 1, rcu = (uint32_t)GPUSYS_SW_STATUS(sw);
		if (!(GPUSYS_WORD_FLAGS(sw) & GPUSYS_SW_TRIVIAL))
			gpusys_fence_acquire(&dev->server_word[p]); /* the lanes read the response next */
	} else if ((int)rcu == -ECONNABORTED) {
		owned = 1; /* refused at our last request packet */
	}
	rc = (int)rcu;
	GPUSYS_RPC_TRACE(4);
	if (rc)
		goto unlock;
	if (GPUSYS_WORD_FLAGS(sw) & GPUSYS_SW_TRIVIAL) {
		GPUSYS_FOR_EACH_LANE(mask, l)
		{
			out_len[GPUSYS_LI(l)] = 0;
			lane_status[GPUSYS_LI(l)] = 0;
		}
		goto unlock;
	}
	gpusys_lane_sync(mask);
	GPUSYS_RPC_TRACE(5);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t n = gpusys_read_packet0(port, l, out_cap[GPUSYS_LI(l)], (uint8_t *)out[GPUSYS_LI(l)],
						 &lane_status[GPUSYS_LI(l)]);
		out_len[GPUSYS_LI(l)] = n;
		part[GPUSYS_LI(l)] = gpusys_stream_part(n);
	}
	total = gpusys_lane_exscan(mask, part, off);
	GPUSYS_RPC_TRACE(6);

	/* Response stream, two packets in flight (abi.h): one word asks for
	 * packets 0 and 1 (both slots); packet k is ours once acknowledged
	 * (at seq - 1 while packet k + 1 is asked for too: the daemon may be
	 * past it); once it is read, its slot is free and we ask for packet
	 * k + 2, which the daemon copies in while we read packet k + 1. */
	stream = gpusys_port_stream(dev->ports, dev->windows, dev->num_ports, dev->num_windows, p, &pkt);
	/* GPUSYS_SW_STREAMED: the whole stream came with packet 0 (abi.h), in
	 * its slots, at most two packets: nothing to ask for, and each wait
	 * below returns at once (the server word is at our sequence). Not
	 * a branch around the waits: that took the block calls of a kernel
	 * declaring nothing from 126 registers to 132-138 of their 128
	 * (tests/file/block-registers.sh). */
	if (total && !(GPUSYS_WORD_FLAGS(sw) & GPUSYS_SW_STREAMED)) {
		GPUSYS_STREAM_TRACE(4);
		seq = gpusys_publish(dev, mask, p, seq + (pkt < total), word, 0);
	}
	/* Large shares in global memory: the copy engine copies each packet
	 * into the buffers (dma.h), at link speed, where the warp's loads
	 * would be bound by how many it keeps in flight. */
	by_dma = total ? gpusys_dma_for_stream(dev, mask, part, out, total) : 0;
	for (uint32_t k = 0; k * pkt < total; k++) {
		GPUSYS_STREAM_TRACE(5);
		if (gpusys_lane_is_leader(mask)) {
			rcu = (uint32_t)gpusys_wait_acked(dev, p, seq, (k + 1) * pkt < total, &sw);
			owned = rcu == 0 || (int)rcu == -ECONNABORTED;
		}
		rc = (int)gpusys_lane_bcast_u32(mask, rcu);
		if (rc)
			goto unlock;
		gpusys_lane_sync(mask);
		GPUSYS_STREAM_TRACE(6);
		gpusys_stream_copy(dev, by_dma, mask, gpusys_stream_slot(stream, pkt, k), pkt, k, off, part, out, total, 0);
		GPUSYS_STREAM_TRACE(7);
		GPUSYS_STREAM_TRACE(4);
		if ((k + 2) * pkt < total)
			seq = gpusys_publish(dev, mask, p, seq, word, 0);
	}

unlock:
	gpusys_lane_sync(mask);
	if (gpusys_lane_is_leader(mask)) {
		/* owned: the last thing seen was the daemon's hand-back (a
		 * response stream ends with one). Ordered on every path: each
		 * lane's loads of the port were used before the warp barrier
		 * above (the server word by the wait, the response by the
		 * stores that copied it out; a piece read and dropped does not
		 * matter), and its stores were published by fences. */
		gpusys_port_give_back(dev, p, seq, owned, 1);
		if (pd->warp_slot != ~0u)
			gpusys_count_sub_u32(&dev->warp_futures[pd->warp_slot], 1u);
	}
	pd->warp_slot = ~0u;
	pd->phase = GPUSYS_RPC_DONE;
	pd->rc = rc;
	GPUSYS_RPC_TRACE(7);
	return rc;
}

/* Before a call answered GPUSYS_STATUS_NO_ROOM is sent again (abi.h): a
 * pause of 1 us doubling to 256 us (in that time the warps whose answers
 * hold the client's budget take them), GPUSYS_NO_ROOM_WAIT_NS in all.
 * *tries counts them (start at 0): one register across the call, which the
 * block calls of a kernel declaring nothing cannot spare more of
 * (tests/file/block-registers.sh). 0 after the pause, or -ENOMEM once the
 * wait is spent (the call then fails as it did before ABI 9). */
#define GPUSYS_NO_ROOM_PAUSE_MAX_NS 256000u
#define GPUSYS_NO_ROOM_TRIES (9u + (uint32_t)(GPUSYS_NO_ROOM_WAIT_NS / GPUSYS_NO_ROOM_PAUSE_MAX_NS))
GPUSYS_FN int gpusys_no_room_pause(uint32_t *tries)
{
	if (*tries >= GPUSYS_NO_ROOM_TRIES)
		return -ENOMEM;
	uint32_t t = (*tries)++;
	gpusys_backoff_sleep(t < 8u ? 1000u << t : GPUSYS_NO_ROOM_PAUSE_MAX_NS);
	return 0;
}

/* After a call of the lanes of m whose results are in ret: the lanes
 * answered GPUSYS_STATUS_NO_ROOM, to be sent again after the pause taken
 * here; 0 when there are none, or when the wait is spent (their ret is then
 * -ENOMEM). On a GPU a lane that is not among them gets 0: its result is
 * in. *tries starts at 0. Every lane of m calls it. The loop of a call that
 * may be told "no room yet" (file and socket calls):
 *   for (m = mask; m; m = gpusys_no_room_again(m, ret, &tries))
 *           the call from the lanes of m, results into ret; */
GPUSYS_FN uint64_t gpusys_no_room_again(uint64_t m, int64_t *ret, uint32_t *tries)
{
	int again[GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1];
	GPUSYS_FOR_EACH_LANE(m, l)
	{
		again[GPUSYS_LI(l)] = ret[GPUSYS_LI(l)] == GPUSYS_STATUS_NO_ROOM;
	}
	uint64_t m2 = gpusys_lane_ballot(m, again);
	if (!m2)
		return 0;
#if defined(__CUDACC__)
	if (!again[0])
		return 0; /* this lane's result is in: no pause for it */
#endif
	/* the same pause in every lane of m2: they have tried alike */
	int w = gpusys_no_room_pause(tries);
	GPUSYS_FOR_EACH_LANE(m2, l)
	{
		if (w)
			ret[GPUSYS_LI(l)] = w;
	}
	return w ? 0 : m2;
}

/*
 * One synchronous call: gpusys_rpc_start() then gpusys_rpc_finish(), with
 * the arrays of both. out_len and lane_status may be NULL with NOREPLY.
 * Returns as gpusys_rpc_finish. Every lane of mask calls it together
 * (converged), as with any warp collective.
 */
GPUSYS_FN int gpusys_rpc(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
			 const void *const *in, const uint32_t *in_len, void *const *out,
			 const uint32_t *out_cap, uint32_t *out_len, int32_t *lane_status)
{
	struct gpusys_rpc_pending pd;
	gpusys_rpc_start(dev, opcode, flags, mask, in, in_len, out_cap, 0, &pd);
	return gpusys_rpc_finish(dev, &pd, out, out_cap, out_len, lane_status);
}

#endif /* GPUSYS_PORT_CLIENT_H */
