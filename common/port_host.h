/* SPDX-License-Identifier: MIT */
/*
 * The server side of the port protocol (include/gpusys/abi.h), written once:
 * gpusysd's port server (daemon/core/port_server.c, port_answer.c) and
 * libgpusys's callback server (libclient/callbacks/callback_server.c) both serve
 * ports with it, as device/port_client.h is the one client side.
 *
 * What is here is what both must do alike: take a request's packet 0 out of
 * shared memory once and bound it, lay out and copy the streams of packets
 * beyond it, write a response's packet 0, hand the port back. How each
 * server keeps a message's state between packets (both step a port per
 * client flip and never wait for it) stays with it.
 *
 * All static inline: the daemon's fast path (every NOOP) runs through these
 * and was tuned instruction by instruction (bench/RESULTS.md); a call out of
 * line would cost it.
 */
#ifndef GPUSYS_PORT_HOST_H
#define GPUSYS_PORT_HOST_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "common/cache_push.h"
#include "gpusys/abi.h"
#include "gpusys/device/host_sync.h"

/* Copy a request's lengths and capacities out of packet 0, once, and bound
 * them; only the copies may be looked at afterwards (the client can rewrite
 * the port at any time). Inactive lanes get 0 in both; a capacity is only a
 * limit, so it is clamped to GPUSYS_MAX_LANE_PAYLOAD rather than refused.
 * *ret_bytes: the sum of the lengths. Returns 0, or the status to refuse the
 * request with (its lengths then mean nothing, not even a stream layout):
 * -E2BIG for a length past GPUSYS_MAX_LANE_PAYLOAD, -EINVAL for a request of
 * no lane or with an unknown flag. An honest client never sends either: it
 * checks the same bounds first. */
/* Lane l's head in packet 0 (abi.h struct gpusys_head). */
static inline struct gpusys_head *port_host_head(const struct gpusys_port *port, uint32_t l)
{
	return (struct gpusys_head *)(uintptr_t)&port->heads[l];
}

/* A request of heads (GPUSYS_CW_HEADS): each active lane's length and
 * capacity out of its head, once each, after its tag says the head is this
 * request's (acquire: the rest of the head is read after it). Returns 0,
 * PORT_HOST_NOT_YET while a head has not landed, or -EINVAL for a head
 * that names this request with a length or capacity past
 * GPUSYS_HEAD_BYTES (an honest client never sends one). */
#define PORT_HOST_NOT_YET 1

static inline int32_t port_host_take_heads(const struct gpusys_port *port, uint64_t word, uint32_t *len,
					   uint32_t *cap)
{
	const uint32_t want = gpusys_head_tag(GPUSYS_WORD_SEQ(word), GPUSYS_HEAD_REQUEST, 0);
	int32_t status = 0;
	for (uint64_t m = GPUSYS_CW_MASK(word); m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		struct gpusys_head *h = port_host_head(port, l);
		uint32_t tag = __atomic_load_n(&h->tag, __ATOMIC_ACQUIRE);
		if ((tag & GPUSYS_HEAD_WHO) != want)
			return PORT_HOST_NOT_YET;
		len[l] = gpusys_head_len(tag);
		cap[l] = __atomic_load_n(&h->aux, __ATOMIC_RELAXED);
		if (len[l] > GPUSYS_HEAD_BYTES || cap[l] > GPUSYS_HEAD_BYTES)
			status = -EINVAL;
	}
	return status;
}

static inline int32_t port_host_take_request(const struct gpusys_port *port, uint64_t word, uint32_t *len,
					     uint32_t *cap, uint64_t *ret_bytes)
{
	const uint64_t mask = GPUSYS_CW_MASK(word);
	int32_t status = 0;
	uint64_t bytes = 0;

	memset(len, 0, GPUSYS_WARP_LANES * sizeof(*len));
	memset(cap, 0, GPUSYS_WARP_LANES * sizeof(*cap));
	if (GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS) {
		if ((GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_EMPTY) || mask == 0)
			status = -EINVAL;
		else
			status = port_host_take_heads(port, word, len, cap);
		if (status == PORT_HOST_NOT_YET)
			return status;
		for (uint64_t m = mask; m; m &= m - 1)
			bytes += len[__builtin_ctzll(m)];
	} else if (!(GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_EMPTY)) {
		uint32_t len_in[GPUSYS_WARP_LANES], cap_in[GPUSYS_WARP_LANES];
		memcpy(len_in, port->len, sizeof(len_in));
		memcpy(cap_in, port->aux, sizeof(cap_in));
		for (uint64_t m = mask; m; m &= m - 1) {
			uint32_t l = (uint32_t)__builtin_ctzll(m);
			len[l] = len_in[l];
			cap[l] = cap_in[l] < GPUSYS_MAX_LANE_PAYLOAD ? cap_in[l] : GPUSYS_MAX_LANE_PAYLOAD;
			if (len[l] > GPUSYS_MAX_LANE_PAYLOAD)
				status = -E2BIG;
			bytes += len[l];
		}
	}
	if (mask == 0 || (GPUSYS_WORD_FLAGS(word) & ~GPUSYS_CW_KNOWN))
		status = -EINVAL;
	*ret_bytes = bytes;
	return status;
}

/* Copy lane l's first n bytes (n <= GPUSYS_INLINE_BYTES) out of packet 0's
 * chunks (abi.h gpusys_inline_at) into dst, or in from src. */
static inline void port_host_inline_get(const uint8_t *packet_data, uint32_t l, uint8_t *dst, uint32_t n)
{
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < n; k++) {
		uint32_t a = k * GPUSYS_CHUNK_BYTES, c = n - a < GPUSYS_CHUNK_BYTES ? n - a : GPUSYS_CHUNK_BYTES;
		memcpy(dst + a, packet_data + gpusys_inline_at(l, k), c);
	}
}

static inline void port_host_inline_put(uint8_t *packet_data, uint32_t l, const uint8_t *src, uint32_t n)
{
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < n; k++) {
		uint32_t a = k * GPUSYS_CHUNK_BYTES, c = n - a < GPUSYS_CHUNK_BYTES ? n - a : GPUSYS_CHUNK_BYTES;
		memcpy(packet_data + gpusys_inline_at(l, k), src + a, c);
	}
}

/* Lane l's first n bytes of a request (n <= GPUSYS_INLINE_BYTES; with
 * heads, n <= GPUSYS_HEAD_BYTES, as port_host_take_request bounded it),
 * into dst. */
static inline void port_host_lane_bytes(const struct gpusys_port *port, uint64_t word, uint32_t l, uint8_t *dst,
					uint32_t n)
{
	if (GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS)
		memcpy(dst, port_host_head(port, l)->bytes, n);
	else
		port_host_inline_get(port->data, l, dst, n);
}

/* Each lane's first bytes of packet 0 (at most GPUSYS_INLINE_BYTES), to
 * where data[l] points, for the lanes of the word's mask with a length. */
static inline void port_host_take_inline(const struct gpusys_port *port, uint64_t word, const uint32_t *len,
					 uint8_t *const *data)
{
	for (uint64_t m = GPUSYS_CW_MASK(word); m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		if (len[l])
			port_host_lane_bytes(port, word, l, data[l],
					     len[l] < GPUSYS_INLINE_BYTES ? len[l] : GPUSYS_INLINE_BYTES);
	}
}

/* The stream layout of a message: each lane's bytes beyond its inline slot
 * (part[l]) at off[l], in lane order. Returns the stream's length. */
static inline uint64_t port_host_stream_layout(uint64_t mask, const uint32_t *len, uint32_t *off, uint32_t *part)
{
	uint64_t total = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		part[l] = (mask >> l & 1) ? gpusys_stream_part(len[l]) : 0;
		off[l] = (uint32_t)total;
		total += part[l];
	}
	return total;
}

/* Stream packets of pkt bytes (the port's: gpusys_port_stream) a stream
 * of this many bytes takes. */
static inline uint32_t port_host_packets_for(uint64_t stream_bytes, uint32_t pkt)
{
	return (uint32_t)((stream_bytes + pkt - 1) / pkt);
}

/* Two stream packets in flight (abi.h, ABI 10): how many packets a client
 * word of sequence cs covers, seen being the sequence of the last packet
 * the server took (request packets taken, asks answered), when left more
 * may come in this message (request packets not taken yet; response
 * packets not asked for yet). 1 or 2, to be taken one by one in order; 0
 * for any other jump (the word stood, went back, moved past
 * GPUSYS_STREAM_SLOTS or past the message's end): malformed input, which
 * each server refuses as it refuses a malformed packet 0. Both servers
 * (the daemon's port_server_step, the callback server's serve) ask here. */
static inline uint32_t port_host_flip_packets(uint32_t cs, uint32_t seen, uint32_t left)
{
	uint32_t d = (cs - seen) & GPUSYS_SEQ_MASK;
	return d >= 1 && d <= GPUSYS_STREAM_SLOTS && d <= left ? d : 0;
}

/* Whether a client word that moved d (>= 1) past the last packet taken may
 * announce a request's packet 0: alone (d == 1), or with its first stream
 * packet behind it (d == 2), which heads and empty requests never have.
 * Once the stream is known, d must also be within port_host_first_flip_max.
 * Both servers ask here before reading packet 0. */
static inline int port_host_first_word_ok(uint64_t word, uint32_t d)
{
	return d == 1 ||
	       (d <= GPUSYS_STREAM_SLOTS && !(GPUSYS_WORD_FLAGS(word) & (GPUSYS_CW_HEADS | GPUSYS_CW_EMPTY)));
}

/* The packets a request may have published by the time its packet 0 is
 * taken: packet 0, and its first stream packet with it where there is
 * one and it goes through a window (stream, as gpusys_port_stream gave it,
 * is not the port's data[], which packet 0 fills). */
static inline uint32_t port_host_first_flip_max(const struct gpusys_port *port, const uint8_t *stream,
						uint32_t stream_packets)
{
	return 1u + (stream_packets && stream != port->data);
}

/* Copy stream packet k (pkt bytes in its slot of stream: the port's data or
 * window, gpusys_port_stream, gpusys_stream_slot) between the channel and
 * each lane's buffer (lane_buf[l]: the lane's whole message; its stream
 * bytes follow its inline slot), in the given direction. */
static inline void port_host_stream_copy(uint8_t *stream, uint32_t pkt, uint32_t k, const uint32_t *off,
					 const uint32_t *part, uint8_t *const *lane_buf, int to_channel)
{
	uint8_t *packet = gpusys_stream_slot(stream, pkt, k);
	uint64_t lo = (uint64_t)k * pkt, hi = lo + pkt;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		uint64_t a = off[l] > lo ? off[l] : lo;
		uint64_t b = (uint64_t)off[l] + part[l] < hi ? (uint64_t)off[l] + part[l] : hi;
		if (!part[l] || a >= b)
			continue;
		uint8_t *in_buf = lane_buf[l] + GPUSYS_INLINE_BYTES + (a - off[l]);
		if (to_channel)
			memcpy(packet + (a - lo), in_buf, b - a);
		else
			memcpy(in_buf, packet + (a - lo), b - a);
	}
}

/* An answer's stream of *chunks packets (port_host_packets_for), through a
 * stream area of pkt-byte packets, written into its slots now, before
 * packet 0's word, when it fits them (gpusys_stream_with_answer: a window's
 * two slots): then *chunks becomes 0 and the word's flag is returned
 * (GPUSYS_SW_STREAMED; the client reads the stream without asking for it,
 * ABI 13); else 0, and the packets go when asked for. Both servers answer
 * through it, so a client meets one protocol. */
static inline uint32_t port_host_stream_with_answer(uint8_t *stream, uint32_t pkt, uint32_t *chunks,
						     const uint32_t *off, const uint32_t *part,
						     uint8_t *const *lane_buf)
{
	if (!*chunks || !gpusys_stream_with_answer(pkt, *chunks))
		return 0;
	for (uint32_t k = 0; k < *chunks; k++)
		port_host_stream_copy(stream, pkt, k, off, part, lane_buf, 1);
	*chunks = 0;
	return GPUSYS_SW_STREAMED;
}

/* Write a response's packet 0: every lane's length and status (whole
 * arrays: inactive lanes must be 0 in both, so no stale word of an earlier
 * message is left there), and each active lane's first bytes. */
static inline void port_host_put_response(struct gpusys_port *port, uint64_t mask, const uint32_t *len,
					  const int32_t *lane_status, uint8_t *const *data)
{
	memcpy(port->len, len, GPUSYS_WARP_LANES * sizeof(*len));
	memcpy(port->aux, lane_status, GPUSYS_WARP_LANES * sizeof(*lane_status));
	uint32_t longest = 0;
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m), n = len[l];
		if (n)
			port_host_inline_put(port->data, l, data[l], n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES);
		longest = n > longest ? n : longest;
	}
	gpusys_cache_push(port->len, sizeof(port->len) + sizeof(port->aux));
	longest = longest < GPUSYS_INLINE_BYTES ? longest : GPUSYS_INLINE_BYTES;
	for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < longest; k++)
		gpusys_cache_push(port->data + gpusys_inline_at(0, k), GPUSYS_WARP_LANES * GPUSYS_CHUNK_BYTES);
}

/* Write an answer of heads (the request was GPUSYS_CW_HEADS): each active
 * lane's length, status and bytes (len[l] <= GPUSYS_HEAD_BYTES: the lane's
 * capacity, which the caller bounded the answer by), the tag last, with
 * release. req_status != 0: the request failed as a whole; every lane's
 * head says so and carries it, and len, lane_status and data are not read
 * (NULL will do). The server word follows (port_host_hand_back). */
static inline void port_host_put_heads(struct gpusys_port *port, uint64_t mask, uint32_t seq, const uint32_t *len,
				       const int32_t *lane_status, uint8_t *const *data, int32_t req_status)
{
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		struct gpusys_head *h = port_host_head(port, l);
		uint32_t n = req_status ? 0 : len[l];
		if (n)
			memcpy(h->bytes, data[l], n);
		__atomic_store_n(&h->aux, (uint32_t)(req_status ? req_status : lane_status[l]), __ATOMIC_RELAXED);
		__atomic_store_n(&h->tag,
				 gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER | (req_status ? GPUSYS_HEAD_FAILED : 0), n),
				 __ATOMIC_RELEASE);
	}
	if (mask) {
		uint32_t lo = (uint32_t)__builtin_ctzll(mask), hi = 63u - (uint32_t)__builtin_clzll(mask);
		gpusys_cache_push(&port->heads[lo], (hi - lo + 1) * sizeof(port->heads[0]));
	}
}

/* Hand the port back to the client: everything written before, then the
 * server word (the caller records seq as seen first). */
static inline void port_host_hand_back(volatile uint64_t *server_word, uint32_t seq, uint32_t sw_flags,
				       int32_t status)
{
	gpusys_host_release_before(server_word);
	__atomic_store_n(server_word, gpusys_server_word(seq, sw_flags, status), __ATOMIC_RELAXED);
	gpusys_cache_push(server_word, sizeof(*server_word));
}

#endif /* GPUSYS_PORT_HOST_H */
