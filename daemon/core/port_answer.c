/* SPDX-License-Identifier: MIT */
/*
 * The answer side of the port module: the response's packet 0 and the
 * hand-back of the port, the response stream, the client's memory budget,
 * and the counting of every completion. The request side (port_server.c)
 * and calls that complete later (later.c) call it, whichever thread
 * finishes them; it calls neither of them (its entries: core/pending.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/accounts.h"
#include "gpusys/device/host_sync.h"
#include "core/client.h"
#include "core/lanes.h"
#include "core/pending.h"
#include "common/port_host.h"

/* port_server.h: the fast path's answer and count, sampled by the pollers;
 * defined here, where the fast path answers (port_answer_inline). */
_Thread_local struct port_timing port_timing;

/* The one place bytes are counted against the client's budget. */
int port_charge(struct port_table *t, uint64_t bytes)
{
	if (!bytes)
		return 0;
	if (atomic_fetch_add_explicit(&t->mem_used, bytes, memory_order_relaxed) + bytes > t->mem_budget) {
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
		return -ENOMEM;
	}
	/* Then the user's, whose other clients hold memory too. */
	if (!account_charge(t->client ? t->client->account : NULL, ACCOUNT_MEMORY, bytes)) {
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
		return -ENOMEM;
	}
	return 0;
}

int port_call_charge(struct port_call *call, uint64_t bytes)
{
	int r = port_charge(call->table, bytes);
	if (r == 0)
		call->charged += bytes;
	return r;
}

int port_call_charge_or_later(struct port_call *call, uint64_t bytes)
{
	int r = port_call_charge(call, bytes);
	return r < 0 && bytes <= call->table->mem_budget ? GPUSYS_STATUS_NO_ROOM : r;
}

/* Only when something was charged: on the inline path (every NOOP) a
 * locked instruction on a line all pollers share would be pure cost. */
void port_uncharge(struct port_table *t, uint64_t bytes)
{
	if (bytes) {
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
		account_uncharge(t->client ? t->client->account : NULL, ACCOUNT_MEMORY, bytes);
	}
}

void port_pending_free(struct port_table *t, struct pending *pd)
{
	if (!pd)
		return;
	port_uncharge(t, pd->call.charged);
	free(pd->call.resp_buf);
	free(pd->req_buf);
	free(pd);
}

/* The answer of a request of heads (abi.h): every active lane's head, then
 * the hand-back. A fire-and-forget request gets its heads too (unread):
 * they overwrite the request's, so no stale request head is left to pass
 * for a later request of the same sequence. */
static void port_respond_heads(struct port_table *t, uint32_t p, uint32_t seq, struct port_call *call)
{
	bool noreply = call->flags & GPUSYS_REQ_NOREPLY;

	for (uint64_t m = call->lane_mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		uint32_t n = call->status ? 0 : call->resp_len[l];
		if (n > call->cap[l]) {
			n = 0;
			call->lane_status[l] = -EMSGSIZE;
		}
		call->resp_len[l] = n;
		call->failed |= call->lane_status[l] != 0;
		if (!noreply)
			call->bytes_out += n;
	}
	port_host_put_heads(&t->ports[p], call->lane_mask, seq, call->resp_len, call->lane_status,
			    (uint8_t *const *)call->resp_data, call->status);
	port_ack(t, p, seq, 0, noreply ? 0 : call->status);
}

/* Write response packet 0 (unless NOREPLY) and hand the port back. Returns
 * the number of response stream packets still to send. */
static uint32_t port_respond(struct port_table *t, uint32_t p, uint32_t seq, struct port_call *call, uint32_t *off,
			     uint32_t *part)
{
	struct gpusys_port *port = &t->ports[p];
	uint32_t chunks = 0, trivial = 1, longest = 0, sw_flags = 0;

	call->bytes_out = 0;
	call->failed = call->status != 0;
	if (call->heads) {
		port_respond_heads(t, p, seq, call);
		return 0;
	}
	if (call->flags & GPUSYS_REQ_NOREPLY) {
		for (uint64_t m = call->lane_mask; m; m &= m - 1)
			call->failed |= call->lane_status[__builtin_ctzll(m)] != 0;
		port_ack(t, p, seq, 0, 0);
		return 0;
	}
	/* The common answer first: no lane has bytes or a status (every
	 * NOOP). One OR over the whole arrays, branch-free; it holds only if
	 * inactive lanes are zero too, and a call that leaves garbage there
	 * takes the loop below, which clears them. */
	uint32_t any = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		any |= call->resp_len[l] | (uint32_t)call->lane_status[l];
	if (!any) {
		port_ack(t, p, seq, GPUSYS_SW_TRIVIAL, call->status);
		return 0;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1)) {
			call->resp_len[l] = 0;
			call->lane_status[l] = 0;
			continue;
		}
		uint32_t n = call->status ? 0 : call->resp_len[l];
		if (n > call->cap[l]) {
			n = 0;
			call->lane_status[l] = -EMSGSIZE;
		}
		call->resp_len[l] = n;
		call->bytes_out += n;
		call->failed |= call->lane_status[l] != 0;
		longest = n > longest ? n : longest;
		trivial &= n == 0 && call->lane_status[l] == 0;
	}
	if (!trivial) {
		/* Inactive lanes too (the loop above zeroed them): the client
		 * reads only its lanes, but stale words from an earlier
		 * message help nobody. */
		port_host_put_response(port, call->lane_mask, call->resp_len, call->lane_status,
				       (uint8_t *const *)call->resp_data);
		/* Streamed only past a lane's inline slot. */
		if (off && longest > GPUSYS_INLINE_BYTES) {
			uint32_t pkt;
			uint8_t *stream = port_table_stream(t, p, &pkt);
			chunks = port_host_packets_for(port_host_stream_layout(call->lane_mask, call->resp_len, off, part),
						       pkt);
			/* A stream that fits the window's slots goes now,
			 * before the word: the client reads it without asking
			 * for it, and a call is one exchange, not two (the
			 * ask and its answer cost a poller's pass and a trip
			 * across the bus each way). */
			sw_flags = port_host_stream_with_answer(stream, pkt, &chunks, off, part,
								(uint8_t *const *)call->resp_data);
		}
	}
	port_ack(t, p, seq, trivial ? GPUSYS_SW_TRIVIAL : sw_flags, call->status);
	return chunks;
}

static void port_count_call(struct port_table *t, const struct port_call *call, unsigned slot)
{
	stats_record(&t->stats, slot, call->op_id, call->t_start, call->failed, call->bytes_in, call->bytes_out);
}

void port_answer(struct port_table *t, struct pending *pd, unsigned slot)
{
	uint32_t p = pd->call.port;
	struct port_state *st = &t->state[p];
	uint32_t chunks = port_respond(t, p, pd->cs, &pd->call, pd->off, pd->part);

	if (pd->op)
		port_count_call(t, &pd->call, slot);
	if (chunks) {
		port_state_set_phase(st, PHASE_SEND);
		__atomic_store_n(&st->later, false, __ATOMIC_RELAXED);
		st->chunk = 0;
		st->chunks = chunks;
		st->pending = pd;
		return;
	}
	port_state_set_phase(st, PHASE_IDLE);
	__atomic_store_n(&st->later, false, __ATOMIC_RELAXED);
	st->pending = NULL;
	port_pending_free(t, pd);
	port_count_completion(t, slot);
}

void port_state_set_later(struct port_table *t, uint32_t p, bool later)
{
	__atomic_store_n(&t->state[p].later, later, __ATOMIC_RELAXED);
}

/* The fast path's answer (a call served on the poller from the stack,
 * port_server.c serve_inline): packet 0 and the hand-back, the counts, and
 * when the answer outgrew its packet, a pending call of its own for the
 * stream (its bytes may point into the caller's frame: they are copied). */
void port_answer_inline(struct port_table *t, uint32_t p, uint32_t cs, struct port_call *call, unsigned slot)
{
	uint32_t off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES];
	bool timed = port_timing.on;
	uint64_t a0 = timed ? stats_now() : 0;
	uint32_t chunks = port_respond(t, p, cs, call, off, part);
	uint64_t a1 = timed ? stats_now() : 0;
	port_count_call(t, call, slot);
	if (chunks) {
		/* The response outgrew its packet: keep it for streaming. Its
		 * bytes may point into this stack frame, so copy them out. */
		struct pending *pd = calloc(1, sizeof(*pd));
		uint64_t total = call->bytes_out;
		uint8_t *copy = pd ? malloc(total) : NULL;
		if (!copy) {
			free(pd);
			/* Too late to refuse: the client already has packet 0
			 * and waits for the rest. Mark the channel dead for
			 * this client rather than leave it spinning. */
			__atomic_store_n(&t->hdr->server_state, GPUSYS_SERVER_STOPPED, __ATOMIC_RELAXED);
			port_uncharge(t, call->charged);
			free(call->resp_buf);
			port_count_completion(t, slot);
			return;
		}
		for (uint64_t l = 0, at = 0; l < GPUSYS_WARP_LANES; l++) {
			if (call->resp_len[l])
				memcpy(copy + at, call->resp_data[l], call->resp_len[l]);
			call->resp_data[l] = copy + at;
			at += call->resp_len[l];
		}
		free(call->resp_buf);
		call->resp_buf = copy;
		pd->call = *call;
		memcpy(pd->off, off, sizeof(off));
		memcpy(pd->part, part, sizeof(part));
		struct port_state *st = &t->state[p];
		st->chunk = 0;
		st->chunks = chunks;
		st->pending = pd;
		port_state_set_phase(st, PHASE_SEND);
		__atomic_store_n(&st->later, false, __ATOMIC_RELAXED);
		return;
	}
	port_uncharge(t, call->charged);
	free(call->resp_buf);
	port_count_completion(t, slot);
	if (timed) {
		port_timing.answer += a1 - a0;
		port_timing.count += stats_now() - a1;
	}
}

/* Answer a request refused before a service saw it. */
void port_refuse(struct port_table *t, uint32_t p, uint32_t cs, uint64_t lane_mask, uint16_t flags, bool heads,
		 int32_t status, unsigned slot)
{
	struct port_call call = { .lane_mask = lane_mask, .flags = flags, .status = status, .heads = heads };
	port_respond(t, p, cs, &call, NULL, NULL);
	port_count_completion(t, slot);
}

/* Response stream packets: the n (port_host_flip_packets) the client
 * asked for with word cs, in order, each into its slot (abi.h) and
 * acknowledged at once, so the client reads the first while we copy the
 * second; the stream's last ends the call. */
void port_send_packets(struct port_table *t, uint32_t p, uint32_t cs, uint32_t n, unsigned slot)
{
	struct port_state *st = &t->state[p];
	struct pending *pd = st->pending;
	uint32_t pkt;
	uint8_t *stream = port_table_stream(t, p, &pkt);

	for (uint32_t seq = cs - n + 1; n; n--, seq++) {
		port_host_stream_copy(stream, pkt, st->chunk, pd->off, pd->part, (uint8_t *const *)pd->call.resp_data,
				      1);
		if (++st->chunk == st->chunks) {
			port_state_set_phase(st, PHASE_IDLE);
			st->pending = NULL;
			port_pending_free(t, pd);
			port_count_completion(t, slot);
		}
		port_ack(t, p, seq, 0, 0);
	}
}

/* A stream's client word that moved otherwise than port_host_flip_packets
 * allows: malformed input. The message ends here: a request not run yet is
 * refused as a malformed packet 0 is (-EINVAL), a response is cut short;
 * either way the port is the client's again at its own sequence, with
 * nothing to read (TRIVIAL), and the call is counted done. */
void port_stream_refuse(struct port_table *t, uint32_t p, uint32_t cs, unsigned slot)
{
	struct port_state *st = &t->state[p];
	struct pending *pd = st->pending;

	port_state_set_phase(st, PHASE_IDLE);
	__atomic_store_n(&st->later, false, __ATOMIC_RELAXED);
	st->pending = NULL;
	port_pending_free(t, pd);
	atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
	port_ack(t, p, cs, GPUSYS_SW_TRIVIAL, -EINVAL);
	port_count_completion(t, slot);
}
