/* SPDX-License-Identifier: MIT */
/*
 * A client of the port protocol written by hand (include/gpusys/abi.h, ABI
 * 13), for tests of both servers (the daemon's port server, tests/proto;
 * the callback server, tests/callback). Where device/port_client.h keeps
 * two stream packets in flight as the timing gives it, this one always
 * does: it writes two packets and publishes them with one word whenever
 * the protocol allows, so a server sees a word two packets past what it
 * took at packet 0 (through a window), in every request stream step and in
 * every response stream step, deterministically. Its pieces (raw_publish,
 * raw_wait) also let a test break the protocol on purpose.
 * Packets are laid out with the servers' own helpers (common/port_host.h):
 * a copy is a copy either way, and the layout is what abi.h says.
 */
#ifndef GPUSYS_TEST_RAW_CLIENT_H
#define GPUSYS_TEST_RAW_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common/port_host.h"

/* Answers whose stream came with packet 0 (GPUSYS_SW_STREAMED), in this
 * test program. */
static uint32_t raw_streamed_answers;

struct raw_client {
	struct gpusys_channel_header *hdr;
	volatile uint64_t *cw, *sw;
	struct gpusys_port *ports;
	uint8_t *windows;
	uint32_t num_ports, num_windows;
};

static inline void raw_client_init(struct raw_client *c, void *base)
{
	struct gpusys_channel_header *h = base;
	c->hdr = h;
	c->cw = (volatile uint64_t *)((uint8_t *)base + h->client_word_offset);
	c->sw = (volatile uint64_t *)((uint8_t *)base + h->server_word_offset);
	c->ports = (struct gpusys_port *)((uint8_t *)base + h->ports_offset);
	c->windows = h->num_windows ? (uint8_t *)base + h->window_offset : NULL;
	c->num_ports = h->num_ports;
	c->num_windows = h->num_windows;
}

/* Port p's stream area and its packet (slot) size. */
static inline uint8_t *raw_stream(const struct raw_client *c, uint32_t p, uint32_t *pkt)
{
	return gpusys_port_stream(c->ports, c->windows, c->num_ports, c->num_windows, p, pkt);
}

/* Publish n packets at once: the word with *seq + n, and a ring. */
static inline void raw_publish(const struct raw_client *c, uint32_t p, uint32_t *seq, uint32_t n, uint64_t word)
{
	*seq += n;
	__atomic_store_n(&c->cw[p], word | (*seq & GPUSYS_SEQ_MASK), __ATOMIC_RELEASE);
	__atomic_store_n(&c->hdr->doorbell, GPUSYS_RING_STREAM | (uint64_t)p << 32 | (*seq & GPUSYS_SEQ_MASK),
			 __ATOMIC_RELEASE);
}

/* Wait for the server word to be at or past seq (serial number
 * arithmetic: within half the sequence space): true with it in *ret_word
 * (may be NULL), false after 10 s. */
static inline bool raw_wait_word(const struct raw_client *c, uint32_t p, uint32_t seq, uint64_t *ret_word)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0;; i++) {
		uint64_t w = __atomic_load_n(&c->sw[p], __ATOMIC_ACQUIRE);
		if (((GPUSYS_WORD_SEQ(w) - seq) & GPUSYS_SEQ_MASK) <= GPUSYS_SEQ_MASK / 2) {
			if (ret_word)
				*ret_word = w;
			return true;
		}
		if (i % 1024 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 10) {
				fprintf(stderr, "raw_wait: port %u, sequence %u not reached: server word %llx\n", p,
					seq & GPUSYS_SEQ_MASK, (unsigned long long)w);
				return false;
			}
			nanosleep(&(struct timespec){ .tv_nsec = 1000 }, NULL);
		}
	}
}

static inline bool raw_wait(const struct raw_client *c, uint32_t p, uint32_t seq)
{
	return raw_wait_word(c, p, seq, NULL);
}

/* Packet 0 of a request from the lanes of mask (len[l] bytes of in[l],
 * room for cap[l] back), not published. */
static inline void raw_packet0(const struct raw_client *c, uint32_t p, uint64_t mask, const uint32_t *len,
			       const uint32_t *cap, uint8_t *const *in)
{
	struct gpusys_port *port = &c->ports[p];
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		port->len[l] = len[l];
		port->aux[l] = cap[l];
		port_host_inline_put(port->data, l, in[l], len[l] < GPUSYS_INLINE_BYTES ? len[l] : GPUSYS_INLINE_BYTES);
	}
}

/* One call on port p, whose words are both at *seq (the port is ours),
 * two stream packets in flight wherever allowed, each pair under one word:
 * through a window packet 0 goes with stream packet 0; then, each time
 * the server has taken everything, the next two; the response's packets
 * are asked for two at a time. pause (NULL: none) is called once, with
 * pause_arg, when the server has taken the request's first flip and more
 * stream packets are to come: a client stalled part way. Returns the
 * request's status (the answer's server word), 0 with got[l] and out[l]
 * (room for cap[l]) filled. */
static inline int32_t raw_call_paused(const struct raw_client *c, uint32_t p, uint32_t *seq, uint16_t opcode,
				      uint64_t mask, const uint32_t *len, const uint32_t *cap, uint8_t *const *in,
				      uint8_t *const *out, uint32_t *got, void (*pause)(void *), void *pause_arg)
{
	struct gpusys_port *port = &c->ports[p];
	uint32_t off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES], pkt;
	uint8_t *stream = raw_stream(c, p, &pkt);
	const uint64_t word = gpusys_client_word(0, 0, opcode, mask);

	raw_packet0(c, p, mask, len, cap, in);
	uint32_t n = port_host_packets_for(port_host_stream_layout(mask, len, off, part), pkt), k = 0;
	if (n && stream != port->data)
		port_host_stream_copy(stream, pkt, k++, off, part, in, 1);
	raw_publish(c, p, seq, 1 + k, word);
	while (k < n) {
		uint32_t m = n - k < 2 ? n - k : 2;
		if (!raw_wait(c, p, *seq))
			return -ETIMEDOUT;
		if (pause) {
			pause(pause_arg);
			pause = NULL;
		}
		for (uint32_t i = 0; i < m; i++)
			port_host_stream_copy(stream, pkt, k + i, off, part, in, 1);
		raw_publish(c, p, seq, m, word);
		k += m;
	}
	uint64_t w;
	if (!raw_wait_word(c, p, *seq, &w))
		return -ETIMEDOUT;
	if (GPUSYS_SW_STATUS(w))
		return GPUSYS_SW_STATUS(w);
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		got[l] = 0;
		if (!(mask >> l & 1) || (GPUSYS_WORD_FLAGS(w) & GPUSYS_SW_TRIVIAL))
			continue;
		got[l] = port->len[l] < cap[l] ? port->len[l] : cap[l];
		port_host_inline_get(port->data, l, out[l], got[l] < GPUSYS_INLINE_BYTES ? got[l] : GPUSYS_INLINE_BYTES);
	}
	n = port_host_packets_for(port_host_stream_layout(mask, got, off, part), pkt);
	if (GPUSYS_WORD_FLAGS(w) & GPUSYS_SW_STREAMED) {
		/* The whole stream came with packet 0 (ABI 13): only ever
		 * through a window whose slots hold it. */
		if (!n || !gpusys_stream_with_answer(pkt, n))
			return -EPROTO;
		for (k = 0; k < n; k++)
			port_host_stream_copy(stream, pkt, k, off, part, out, 0);
		raw_streamed_answers++;
		return 0;
	}
	for (k = 0; k < n;) {
		uint32_t m = n - k < 2 ? n - k : 2;
		raw_publish(c, p, seq, m, word);
		if (!raw_wait(c, p, *seq))
			return -ETIMEDOUT;
		for (uint32_t i = 0; i < m; i++, k++)
			port_host_stream_copy(stream, pkt, k, off, part, out, 0);
	}
	return 0;
}

static inline int32_t raw_call(const struct raw_client *c, uint32_t p, uint32_t *seq, uint16_t opcode, uint64_t mask,
			       const uint32_t *len, const uint32_t *cap, uint8_t *const *in, uint8_t *const *out,
			       uint32_t *got)
{
	return raw_call_paused(c, p, seq, opcode, mask, len, cap, in, out, got, NULL, NULL);
}

#endif /* GPUSYS_TEST_RAW_CLIENT_H */
