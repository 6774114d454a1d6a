/* SPDX-License-Identifier: MIT */
/*
 * One port of the callback channel, a step at a time (callback_server.c
 * claims the ports and runs the threads): what the client word allows now,
 * from where the port's message stands (struct cb_msg): packet 0, the
 * request stream packets that came, the callback for each lane once the
 * request is whole, the response stream packets asked for. Nothing here
 * waits for a kernel between packets, as gpusysd's port_server_step does
 * not: a worker that waited held the whole message, so 4 workers let 4
 * large calls progress at once, 2.5-2.8 GB/s from 132 warps against the
 * daemon's 16 (bench/RESULTS.md, "Tenth session"). Lengths are copied out
 * of the channel once and bounded (common/port_host.h), as the daemon does.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/port_host.h"
#include "gpusys/device/host_sync.h"
#include "libclient/callbacks/callback_internal.h"

static void ack(struct gpusys_callbacks *cb, uint32_t p, uint32_t seq, uint32_t sw_flags, int32_t status)
{
	__atomic_store_n(&cb->seen[p], (uint16_t)(seq & GPUSYS_SEQ_MASK), __ATOMIC_RELAXED);
	port_host_hand_back(&cb->server_word[p], seq, sw_flags, status);
}

static void count_completion(struct gpusys_callbacks *cb, unsigned slot)
{
	/* This worker is the only writer of its progress word. */
	uint64_t n = __atomic_load_n(&cb->hdr->progress[slot].completed, __ATOMIC_RELAXED) + 1;
	gpusys_host_release_before(&cb->hdr->progress[slot].completed);
	__atomic_store_n(&cb->hdr->progress[slot].completed, n, __ATOMIC_RELAXED);
}

/* The message is over: its buffers go, the port is idle, the call counts. */
static void msg_done(struct gpusys_callbacks *cb, struct cb_msg *m, unsigned slot)
{
	if (m->req_buf != m->small_req)
		free(m->req_buf);
	if (m->res_buf != m->small_res)
		free(m->res_buf);
	m->req_buf = m->res_buf = NULL;
	m->phase = CB_IDLE;
	count_completion(cb, slot);
}

/* Run the callback for each lane of the assembled request (m->seq: its
 * last packet), then answer: packet 0 or heads, and the response stream
 * if there is one (the port stays in CB_SEND for it). */
static void msg_answer(struct gpusys_callbacks *cb, uint32_t p, struct cb_msg *m, unsigned slot)
{
	struct gpusys_port *port = &cb->ports[p];
	struct cb_entry *e = NULL;
	int32_t status = m->status;
	if (m->opcode >= GPUSYS_OP_USER_FIRST)
		e = atomic_load_explicit(&cb->ops[m->opcode - GPUSYS_OP_USER_FIRST], memory_order_acquire);
	if (!e && !status)
		status = -ENOSYS;
	uint64_t out_bytes = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		m->res_len[l] = 0;
		m->lane_status[l] = 0;
		m->res[l] = NULL;
		if (e && (m->mask >> l & 1))
			out_bytes += m->cap[l] < e->d.res_max ? m->cap[l] : e->d.res_max;
	}
	if (!status && out_bytes) {
		m->res_buf = out_bytes <= sizeof(m->small_res) ? m->small_res : malloc(out_bytes);
		if (!m->res_buf)
			status = -ENOMEM;
	}
	if (!status) {
		atomic_fetch_add_explicit(&cb->running, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
		uint64_t at = 0;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(m->mask >> l & 1))
				continue;
			uint32_t room = m->cap[l] < e->d.res_max ? m->cap[l] : e->d.res_max;
			m->res[l] = m->res_buf ? m->res_buf + at : NULL;
			at += room;
			if (m->len[l] > e->d.arg_max) {
				m->lane_status[l] = -E2BIG;
				continue;
			}
			uint32_t n = 0;
			int r = e->d.fn(e->d.user, m->arg[l], m->len[l], m->res[l], room, &n);
			if (n > room) {
				/* It wrote past what it was given: the best we can do is not send it. */
				n = 0;
				r = -EMSGSIZE;
			}
			m->lane_status[l] = r > 0 ? 0 : r;
			m->res_len[l] = r < 0 ? 0 : n;
		}
		atomic_fetch_sub_explicit(&cb->running, 1, memory_order_relaxed);
	}

	/* A call of heads is answered in heads, fire-and-forget too (they
	 * overwrite the request's, as the daemon's do). res_len is bounded by
	 * the lane's capacity (room above), which take_request bounded. */
	if (m->heads) {
		port_host_put_heads(port, m->mask, m->seq, m->res_len, m->lane_status, m->res, status);
		ack(cb, p, m->seq, 0, m->noreply ? 0 : status);
		msg_done(cb, m, slot);
		return;
	}
	if (m->noreply) {
		ack(cb, p, m->seq, 0, 0);
		msg_done(cb, m, slot);
		return;
	}
	uint32_t trivial = 1, sw_flags = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (status)
			m->res_len[l] = 0, m->lane_status[l] = 0;
		trivial &= m->res_len[l] == 0 && m->lane_status[l] == 0;
	}
	m->chunk = m->chunks = 0;
	if (!trivial) {
		uint32_t pkt;
		uint8_t *stream = gpusys_port_stream(cb->ports, cb->windows, cb->num_ports, cb->num_windows, p, &pkt);
		port_host_put_response(port, m->mask, m->res_len, m->lane_status, m->res);
		m->chunks = port_host_packets_for(port_host_stream_layout(m->mask, m->res_len, m->off, m->part), pkt);
		/* As the daemon does: a stream that fits the window's slots
		 * goes with packet 0 (ABI 13). */
		sw_flags = port_host_stream_with_answer(stream, pkt, &m->chunks, m->off, m->part, m->res);
	}
	ack(cb, p, m->seq, trivial ? GPUSYS_SW_TRIVIAL : sw_flags, status);
	if (m->chunks)
		m->phase = CB_SEND;
	else
		msg_done(cb, m, slot);
}

/* Take n request stream packets (port_host_flip_packets), in order, each
 * from its slot (abi.h): each but the stream's last is acknowledged as
 * soon as it is copied out, so the client writes the next into its slot
 * while we copy the other; the last goes to the callback, whose answer
 * acknowledges it. */
static void msg_take_packets(struct gpusys_callbacks *cb, uint32_t p, struct cb_msg *m, uint32_t n, unsigned slot)
{
	uint32_t pkt;
	uint8_t *stream = gpusys_port_stream(cb->ports, cb->windows, cb->num_ports, cb->num_windows, p, &pkt);
	for (; n; n--) {
		m->seq++;
		if (m->req_buf)
			port_host_stream_copy(stream, pkt, m->chunk, m->off, m->part, m->arg, 0);
		if (++m->chunk == m->chunks) {
			msg_answer(cb, p, m, slot);
			return;
		}
		ack(cb, p, m->seq, 0, 0);
	}
}

/* Write the n response stream packets the client asked for, each into its
 * slot and acknowledged at once, so the client reads one while we copy the
 * next; the stream's last ends the message. */
static void msg_send_packets(struct gpusys_callbacks *cb, uint32_t p, struct cb_msg *m, uint32_t n, unsigned slot)
{
	uint32_t pkt;
	uint8_t *stream = gpusys_port_stream(cb->ports, cb->windows, cb->num_ports, cb->num_windows, p, &pkt);
	for (; n; n--) {
		port_host_stream_copy(stream, pkt, m->chunk, m->off, m->part, m->res, 1);
		ack(cb, p, ++m->seq, 0, 0);
		if (++m->chunk == m->chunks)
			msg_done(cb, m, slot);
	}
}

/* A request that cannot be taken (status): answered at once, in heads for
 * a call of heads, as the daemon's refusals are. */
static void msg_refuse(struct gpusys_callbacks *cb, uint32_t p, uint64_t word, uint32_t sw_flags, int32_t status,
		       unsigned slot)
{
	uint32_t cs = GPUSYS_WORD_SEQ(word);
	bool noreply = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_NOREPLY;
	if (GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS)
		port_host_put_heads(&cb->ports[p], GPUSYS_CW_MASK(word), cs, NULL, NULL, NULL, status);
	ack(cb, p, cs, sw_flags, noreply ? 0 : status);
	count_completion(cb, slot);
}

/* Packet 0 of a request (word; d: how far it moved past seen, 1, or 2 with
 * the first stream packet behind packet 0, abi.h). Copied out once and
 * bounded (common/port_host.h), as the daemon does. */
static void msg_start(struct gpusys_callbacks *cb, uint32_t p, struct cb_msg *m, uint64_t word, uint32_t d,
		      unsigned slot)
{
	struct gpusys_port *port = &cb->ports[p];
	uint64_t in_bytes = 0;
	int32_t status = port_host_first_word_ok(word, d) ? 0 : -EINVAL;
	if (!status) {
		/* A call of heads may show its word before its heads (abi.h):
		 * the client is a kernel of this process that just
		 * published, so they land within the bus's latency. Spin a
		 * little the first time; after that the port is looked at
		 * again on later passes, until HEADS_LATE_MAX_NS. A
		 * PORT_HOST_NOT_YET is a positive "look again", never a status
		 * (tests/callback test_heads_land_late). */
		for (unsigned spins = m->late_since ? 4095 : 0;; spins++) {
			status = port_host_take_request(port, word, m->len, m->cap, &in_bytes);
			if (status != PORT_HOST_NOT_YET || spins >= 4095)
				break;
			cpu_relax();
		}
		if (status == PORT_HOST_NOT_YET) {
			uint64_t now = now_ns();
			if (!m->late_since)
				m->late_since = now;
			if (now - m->late_since <= HEADS_LATE_MAX_NS)
				return; /* seen[] unchanged: the port is looked at again */
			status = -EPROTO;
		}
	}
	m->late_since = 0;
	if (status) {
		/* Lengths not to be trusted: no stream layout, answer now. */
		msg_refuse(cb, p, word, 0, status, slot);
		return;
	}
	m->mask = GPUSYS_CW_MASK(word);
	m->opcode = GPUSYS_CW_OPCODE(word);
	m->noreply = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_NOREPLY;
	m->heads = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS;
	m->status = 0;
	/* The request, in private memory. A failed allocation still takes
	 * the stream (so its packets are not taken for a new request). */
	m->req_buf = in_bytes <= sizeof(m->small_req) ? m->small_req : malloc(in_bytes);
	if (!m->req_buf)
		m->status = -ENOMEM;
	uint64_t at = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		m->arg[l] = m->req_buf ? m->req_buf + at : NULL;
		at += m->len[l];
	}
	if (m->req_buf)
		port_host_take_inline(port, word, m->len, m->arg);
	uint32_t pkt;
	uint8_t *stream = gpusys_port_stream(cb->ports, cb->windows, cb->num_ports, cb->num_windows, p, &pkt);
	m->chunk = 0;
	m->chunks = port_host_packets_for(port_host_stream_layout(m->mask, m->len, m->off, m->part), pkt);
	if (d > port_host_first_flip_max(port, stream, m->chunks)) {
		if (m->req_buf != m->small_req)
			free(m->req_buf);
		m->req_buf = NULL;
		msg_refuse(cb, p, word, GPUSYS_SW_TRIVIAL, -EINVAL, slot);
		return;
	}
	m->seq = GPUSYS_WORD_SEQ(word) - (d - 1); /* packet 0's */
	if (!m->chunks) {
		msg_answer(cb, p, m, slot);
		return;
	}
	/* Packet 0 taken: through data[] the client waits for this before
	 * its first stream packet. */
	m->phase = CB_RECV;
	ack(cb, p, m->seq, 0, 0);
	if (d > 1)
		msg_take_packets(cb, p, m, d - 1, slot);
}

void cb_step(struct gpusys_callbacks *cb, uint32_t p, unsigned slot)
{
	uint64_t word = __atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED);
	uint32_t cs = GPUSYS_WORD_SEQ(word), seen = __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED);
	if (cs == seen)
		return;
	gpusys_host_acquire_after(&cb->client_word[p]);
	struct cb_msg *m = cb->msg[p];
	if (!m) {
		m = cb->msg[p] = calloc(1, sizeof(*m));
		if (!m) {
			/* Nowhere to keep the message: refuse it whole. */
			msg_refuse(cb, p, word, GPUSYS_SW_TRIVIAL, -ENOMEM, slot);
			return;
		}
	}
	if (m->phase == CB_IDLE) {
		msg_start(cb, p, m, word, (cs - seen) & GPUSYS_SEQ_MASK, slot);
		return;
	}
	/* One or two stream packets (abi.h): taken, or asked for; any other
	 * move ends the call -EINVAL. */
	uint32_t n = port_host_flip_packets(cs, m->seq, m->chunks - m->chunk);
	if (!n) {
		bool noreply = m->phase == CB_RECV && m->noreply;
		ack(cb, p, cs, GPUSYS_SW_TRIVIAL, noreply ? 0 : -EINVAL);
		msg_done(cb, m, slot);
	} else if (m->phase == CB_RECV) {
		msg_take_packets(cb, p, m, n, slot);
	} else {
		msg_send_packets(cb, p, m, n, slot);
	}
}

void cb_msg_free(struct cb_msg *m)
{
	if (!m)
		return;
	if (m->req_buf != m->small_req)
		free(m->req_buf);
	if (m->res_buf != m->small_res)
		free(m->res_buf);
	free(m);
}
