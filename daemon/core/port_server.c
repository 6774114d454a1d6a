/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of the port protocol. See include/gpusys/abi.h for the
 * message format and device/port_client.h for the other side.
 *
 * Per port we keep a phase:
 *   IDLE  the next client flip starts a request (packet 0)
 *   RECV  request stream packets are arriving
 *   BUSY  the request is in its service: on the worker pool, or pending
 *         until the service completes it later (the claim is held meanwhile)
 *   SEND  response stream packets are being asked for
 * Nothing here ever waits for the client: each call does what one client
 * flip allows and returns, so a client that stops half way through a message
 * holds only its own port.
 *
 * Shared memory is hostile. We read the client word once per step, copy the
 * lengths and payload out before using them, and our own seen[]
 * (never the shared server word) says where we are.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/lanes.h"
#include "core/later.h"
#include "core/pending.h"
#include "core/port_server.h"
#include "common/port_host.h"

/* What the client word says about a request. */
struct request_head {
	uint16_t opcode;
	uint16_t flags; /* enum gpusys_req_flags */
	uint64_t lane_mask;
};

int port_table_init(struct port_table *t, void *channel_base, uint32_t num_ports, const struct client *client,
		    uint64_t mem_budget)
{
	uint8_t *base = channel_base;
	struct gpusys_channel_header *hdr = channel_base;

	memset(t, 0, sizeof(*t));
	if (num_ports < GPUSYS_MIN_PORTS || num_ports > GPUSYS_MAX_PORTS || hdr->num_ports != num_ports)
		return -EINVAL;
	/* The offsets as we compute them, never as the header says: a
	 * channel re-offered after a restart (docs/RESTART.md) has been in
	 * the client's hands, header included. The words and ports depend on
	 * the port count alone. */
	struct gpusys_channel_layout l = gpusys_channel_layout(num_ports, 0, 0);
	t->num_ports = num_ports;
	t->hdr = hdr;
	t->client_word = (volatile uint64_t *)(base + l.client_word_offset);
	t->server_word = (volatile uint64_t *)(base + l.server_word_offset);
	t->ports = (struct gpusys_port *)(base + l.ports_offset);
	t->num_windows = l.num_windows;
	t->windows = l.num_windows ? base + l.window_offset : NULL;
	/* Progress goes on from what the client has seen (a new channel:
	 * zero): its gpusys_synchronize compares the sum with what it
	 * submitted. Our own counts start at zero. */
	for (unsigned i = 0; i < GPUSYS_PROGRESS_SLOTS; i++)
		t->progress_base[i] = hdr->progress[i].completed;
	t->client = client;
	t->mem_budget = mem_budget;
	t->later_max = GPUSYS_MAX_PORTS;
	pthread_mutex_init(&t->later_lock, NULL);
	pthread_mutex_init(&t->later_slot_lock, NULL);
	t->seen = calloc(num_ports, sizeof(*t->seen));
	t->claim = calloc(num_ports, sizeof(*t->claim));
	t->state = calloc(num_ports, sizeof(*t->state));
	if (!t->seen || !t->claim || !t->state) {
		port_table_fini(t);
		return -ENOMEM;
	}
	/* The daemon made this channel, so every server word is ours; start
	 * from what is there (zero for a new channel). */
	for (uint32_t p = 0; p < num_ports; p++)
		atomic_init(&t->seen[p], (uint16_t)GPUSYS_WORD_SEQ(t->server_word[p]));
	int r = services_client_init(client, t->svc_state);
	if (r < 0) {
		port_table_fini(t);
		return r;
	}
	t->svc_ready = true;
	return 0;
}

void port_table_fini(struct port_table *t)
{
	if (!t->seen && !t->claim && !t->state)
		return; /* never initialised, or already torn down */
	/* Pending calls first: their services' state is still there. */
	later_cancel_table(t);
	if (t->svc_ready)
		services_client_fini(t->client, t->svc_state);
	t->svc_ready = false;
	if (t->state) {
		for (uint32_t p = 0; p < t->num_ports; p++)
			port_pending_free(t, t->state[p].pending);
	}
	stats_client_free(&t->stats);
	pthread_mutex_destroy(&t->later_lock);
	pthread_mutex_destroy(&t->later_slot_lock);
	free((void *)t->seen);
	free((void *)t->claim);
	free(t->state);
	t->seen = NULL;
	t->claim = NULL;
	t->state = NULL;
}

/* Run the call's service. true: the call stays pending (call_later). */
static bool run_service(struct port_table *t, struct pending *pd)
{
	if (pd->call.status != 0)
		return false;
	pd->call.state = t->svc_state[pd->service];
	pd->op->handle(&pd->call);
	/* Only an op flagged SERVICE_OP_LATER can have called call_later, and
	 * whether it did is read under the lock: a completion on another
	 * thread may be moving pd->later on right now (ThreadSanitizer caught
	 * the unlocked read racing call_complete). */
	return (pd->op->flags & SERVICE_OP_LATER) && later_after_handler(t, pd);
}

/* An op tried on the poller first (SERVICE_OP_TRY_POLLER): true when its
 * handler finished the call here, false when a worker must go on. */
static bool try_on_poller(struct port_table *t, struct pending *pd)
{
	pd->call.state = t->svc_state[pd->service];
	pd->call.on_poller = true;
	pd->op->handle(&pd->call);
	pd->call.on_poller = false;
	if (!pd->call.to_pool)
		return true;
	pd->call.to_pool = false;
	return false;
}

/* The request is assembled: run its service here, or leave it to the
 * pool. *keep: the claim stays held (by the pool's call or a pending one). */
static enum port_step dispatch(struct port_table *t, uint32_t p, uint32_t cs, struct pending *pd, unsigned slot,
			       struct port_call **ret_call, bool *keep)
{
	struct port_state *st = &t->state[p];

	pd->cs = cs;
	port_state_set_phase(st, PHASE_BUSY);
	st->pending = pd;
	if (pd->call.status == 0 && pd->op->run == SERVICE_ON_POOL) {
		if ((pd->op->flags & SERVICE_OP_TRY_POLLER) && try_on_poller(t, pd)) {
			port_answer(t, pd, slot);
			return PORT_STEP_DONE;
		}
		*ret_call = &pd->call;
		*keep = true;
		return PORT_STEP_DEFER;
	}
	if (run_service(t, pd)) {
		*keep = true;
		return PORT_STEP_DONE;
	}
	port_answer(t, pd, slot);
	return PORT_STEP_DONE;
}

void port_server_run(struct port_call *call, unsigned progress_slot)
{
	struct port_table *t = call->table;
	struct pending *pd = pending_of(call);
	uint32_t p = call->port;

	if (run_service(t, pd))
		return; /* pending: call_complete() answers it */
	port_answer(t, pd, progress_slot);
	port_release_off_poller(t, p);
}

/* Fast path: one packet, a service that runs on the poller and finishes
 * at once. No allocation: the payload is copied to the stack. len[] and
 * cap[] are zero for inactive lanes (start_request); bytes_in is their sum. */
static void serve_inline(struct port_table *t, uint32_t p, uint32_t cs, const struct service_lookup *svc,
			 const struct request_head *h, const uint32_t *len, const uint32_t *cap, uint64_t bytes_in,
			 bool heads, uint64_t t_start, unsigned slot)
{
	struct port_call call;
	uint8_t payload[GPUSYS_PACKET_BYTES];
	const uint8_t *shared = t->ports[p].data;

	call.table = t;
	call.client = t->client;
	call.state = t->svc_state[svc->service];
	call.status = 0;
	call.resp_buf = NULL;
	call.charged = 0;
	call.port = p;
	call.opcode = h->opcode;
	call.flags = h->flags;
	call.lane_mask = h->lane_mask;
	call.op_id = svc->op_id;
	call.t_start = t_start;
	call.bytes_in = bytes_in;
	call.heads = heads;
	/* Results zeroed for every lane, with two fixed-size stores, so that
	 * port_respond tells a trivial answer (every NOOP) by one OR over the
	 * arrays; the request's entries only for active lanes (services look
	 * at no other), by walking the mask. NOTE: a loop setting six fields
	 * per active lane was a third of a 32-lane NOOP's CPU time (perf,
	 * gpusys-bench-serve); whole-array stores of every field instead made a
	 * one-lane call a third slower. resp_data[] is read only where resp_len
	 * is set, so it is left alone. */
	lanes_zero(call.lane_status);
	lanes_zero(call.resp_len);
	for (uint64_t m = call.lane_mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		call.len[l] = len[l];
		call.cap[l] = cap[l];
		call.data[l] = payload + l * GPUSYS_INLINE_BYTES;
		if (heads) {
			/* The whole of the head's bytes (a fixed-size move):
			 * take_request bounded len[l] by them. */
			memcpy(call.data[l], t->ports[p].heads[l].bytes, GPUSYS_HEAD_BYTES);
			continue;
		}
		/* Whole chunks, a fixed size each (inline moves, no libc
		 * call): a chunk is fetched with its line for len bytes
		 * anyway. */
		for (uint32_t k = 0; k * GPUSYS_CHUNK_BYTES < len[l] && k < GPUSYS_INLINE_CHUNKS; k++)
			memcpy(call.data[l] + k * GPUSYS_CHUNK_BYTES, shared + gpusys_inline_at(l, k),
			       GPUSYS_CHUNK_BYTES);
	}
	svc->op->handle(&call);
	port_answer_inline(t, p, cs, &call, slot);
}

static enum port_step receive_packets(struct port_table *t, uint32_t p, uint32_t cs, uint32_t n, unsigned slot,
				      struct port_call **ret_call, bool *keep);

/* Packet 0 of a request; d: how far the client word moved past seen[] (1,
 * or 2 with the first stream packet behind it, abi.h). */
static enum port_step start_request(struct port_table *t, uint32_t p, uint64_t word, uint32_t d, unsigned slot,
				    struct port_call **ret_call, bool *keep)
{
	struct gpusys_port *port = &t->ports[p];
	uint32_t cs = GPUSYS_WORD_SEQ(word);
	struct request_head h = {
		.opcode = GPUSYS_CW_OPCODE(word),
		.flags = (GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_NOREPLY) ? GPUSYS_REQ_NOREPLY : 0,
		.lane_mask = GPUSYS_CW_MASK(word),
	};
	uint32_t len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES];
	int32_t status = 0;
	/* Fast-path requests are timed one in STATS_SAMPLE (core/stats.h). */
	uint64_t t_start = stats_sample() ? stats_now() : 0;

	/* Copy out once; from here on only the copies are looked at
	 * (common/port_host.h). Inactive lanes' entries are zero. */
	uint64_t bytes;
	const bool heads = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS;
	/* Packet 0 comes alone, or with its first stream packet (checked
	 * below); a word further ahead, or a message that cannot stream
	 * (heads, empty) ahead at all, is malformed. */
	if (!port_host_first_word_ok(word, d)) {
		atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
		port_refuse(t, p, cs, h.lane_mask, h.flags, heads, -EINVAL, slot);
		return PORT_STEP_DONE;
	}
	status = port_host_take_request(port, word, len, cap, &bytes);
	if (status == PORT_HOST_NOT_YET) {
		/* The word came before a head it announces (abi.h: heads
		 * carry no fence before the word): seen[] is left alone, so
		 * the next pass looks again. A client that never writes the
		 * heads costs a look per pass, as a port of its with work
		 * would. */
		atomic_fetch_add_explicit(&t->heads_early, 1, memory_order_relaxed);
		return PORT_STEP_NONE;
	}
	if (status) {
		/* The lengths cannot be trusted, so neither can the stream
		 * layout: answer at once. An honest client never gets here
		 * (it checks the same bounds before sending). */
		atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
		port_refuse(t, p, cs, h.lane_mask, h.flags, heads, status, slot);
		return PORT_STEP_DONE;
	}
	if (d != 1) {
		/* With its first stream packet: only a request that streams,
		 * through a window (data[] holds packet 0 and both slots). */
		uint32_t off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES], pkt;
		uint8_t *stream = port_table_stream(t, p, &pkt);
		uint32_t packets = port_host_packets_for(port_host_stream_layout(h.lane_mask, len, off, part), pkt);
		if (d > port_host_first_flip_max(port, stream, packets)) {
			atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
			port_refuse(t, p, cs, h.lane_mask, h.flags, heads, -EINVAL, slot);
			return PORT_STEP_DONE;
		}
	}

	struct service_lookup svc;
	bool found = service_lookup(h.opcode, &svc);
	if (found && svc.op->run == SERVICE_ON_POLLER && !(svc.op->flags & SERVICE_OP_LATER) &&
	    bytes <= GPUSYS_PACKET_BYTES) {
		int single = 1;
		if (bytes > GPUSYS_INLINE_BYTES) /* else no lane can exceed it */
			for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
				single &= len[l] <= GPUSYS_INLINE_BYTES;
		if (single) {
			serve_inline(t, p, cs, &svc, &h, len, cap, bytes, heads, t_start, slot);
			return PORT_STEP_DONE;
		}
	}

	/* General path: assemble the request in private memory. Every
	 * such request is timed. */
	if (!t_start && stats_enabled())
		t_start = stats_now();
	struct pending *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		/* Not even room to track the stream: answer now. */
		port_refuse(t, p, cs, h.lane_mask, h.flags, heads, -ENOMEM, slot);
		return PORT_STEP_DONE;
	}
	if (!found)
		status = -ENOSYS;
	else if (port_charge(t, bytes) < 0)
		status = -ENOMEM;
	else {
		pd->call.charged = bytes;
		pd->req_buf = malloc(bytes ? bytes : 1);
		if (!pd->req_buf)
			status = -ENOMEM;
	}

	struct port_call *call = &pd->call;
	call->table = t;
	call->client = t->client;
	call->port = p;
	call->opcode = h.opcode;
	call->flags = h.flags;
	call->lane_mask = h.lane_mask;
	call->status = status;
	call->t_start = t_start;
	call->bytes_in = bytes;
	call->heads = heads;
	if (found) {
		pd->op = svc.op;
		pd->service = svc.service;
		call->op_id = svc.op_id;
	}
	__atomic_store_n(&t->state[p].opcode, h.opcode, __ATOMIC_RELAXED);
	__atomic_store_n(&t->state[p].since, t_start, __ATOMIC_RELAXED);
	memcpy(call->len, len, sizeof(len));
	memcpy(call->cap, cap, sizeof(cap));
	uint64_t stream = port_host_stream_layout(h.lane_mask, len, pd->off, pd->part);
	if (status == 0) {
		uint64_t at = 0;
		for (uint64_t m = h.lane_mask; m; m &= m - 1) {
			uint32_t l = (uint32_t)__builtin_ctzll(m);
			call->data[l] = pd->req_buf + at;
			at += len[l];
		}
		port_host_take_inline(port, word, len, call->data);
	}
	if (stream) {
		/* A failed request still takes its stream, so the client's
		 * next packets are not mistaken for a new request. */
		port_state_set_phase(&t->state[p], PHASE_RECV);
		t->state[p].chunk = 0;
		uint32_t pkt;
		port_table_stream(t, p, &pkt);
		t->state[p].chunks = port_host_packets_for(stream, pkt);
		t->state[p].pending = pd;
		/* Packet 0 taken: through data[] the client waits for this
		 * before its first stream packet. */
		port_ack(t, p, cs - (d - 1), 0, 0);
		if (d > 1)
			return receive_packets(t, p, cs, d - 1, slot, ret_call, keep);
		return PORT_STEP_DONE;
	}
	return dispatch(t, p, cs, pd, slot, ret_call, keep);
}

/* Request stream packets: the n (port_host_flip_packets) that the client
 * word cs covers, in order, each from its slot (abi.h). Each but the
 * stream's last is acknowledged as soon as it is copied out, so the client
 * writes the next one into its slot while we copy the other; the last
 * (then cs's) goes to its service, whose answer acknowledges it. */
static enum port_step receive_packets(struct port_table *t, uint32_t p, uint32_t cs, uint32_t n, unsigned slot,
				      struct port_call **ret_call, bool *keep)
{
	struct port_state *st = &t->state[p];
	struct pending *pd = st->pending;
	uint32_t pkt;
	uint8_t *stream = port_table_stream(t, p, &pkt);

	for (uint32_t seq = cs - n + 1;; seq++) {
		if (pd->call.status == 0)
			port_host_stream_copy(stream, pkt, st->chunk, pd->off, pd->part, pd->call.data, 0);
		if (++st->chunk == st->chunks)
			return dispatch(t, p, cs, pd, slot, ret_call, keep);
		port_ack(t, p, seq, 0, 0);
		if (seq == cs)
			return PORT_STEP_DONE;
	}
}

enum port_step port_server_step(struct port_table *t, uint32_t p, unsigned progress_slot,
				struct port_call **ret_call)
{
	/* Read once; acquire: the request the word announces is read after it. */
	uint64_t word = __atomic_load_n(&t->client_word[p], __ATOMIC_ACQUIRE);
	uint32_t cs = GPUSYS_WORD_SEQ(word);
	uint32_t seen = atomic_load_explicit(&t->seen[p], memory_order_relaxed);
	struct port_state *st = &t->state[p];
	enum port_step r = PORT_STEP_NONE;
	bool keep = false;

	if (cs == seen) {
		port_release(t, p);
		return PORT_STEP_NONE;
	}
	/* Pairs with the client's release before its flag store. */
	gpusys_host_acquire_after(&t->client_word[p]);

	switch (st->phase) {
	case PHASE_IDLE:
		/* Draining for a restart: packet 0 of a new request is left
		 * unread for the next daemon (the one safe case). */
		if (atomic_load_explicit(&t->handover, memory_order_relaxed))
			break;
		r = start_request(t, p, word, (cs - seen) & GPUSYS_SEQ_MASK, progress_slot, ret_call, &keep);
		break;
	case PHASE_RECV:
	case PHASE_SEND: {
		/* One or two stream packets (abi.h): taken, or asked for. */
		uint32_t n = port_host_flip_packets(cs, seen, st->chunks - st->chunk);
		r = PORT_STEP_DONE;
		if (!n)
			port_stream_refuse(t, p, cs, progress_slot);
		else if (st->phase == PHASE_RECV)
			r = receive_packets(t, p, cs, n, progress_slot, ret_call, &keep);
		else
			port_send_packets(t, p, cs, n, progress_slot);
		break;
	}
	default:
		/* BUSY ports stay claimed by their call; never here. */
		break;
	}
	/* The one release of the poller's path: unless the call now holds
	 * the port (on the pool, or pending later), which is marked so. Only
	 * from our own mark: a call pending later may have been completed on
	 * another thread already, which released the port (a plain store
	 * here would claim it forever). The mark feeds counters only: if
	 * the port was released and claimed by another poller in between,
	 * that poller's claim reads as a call's until it ends its step (a
	 * few passes' "held" instead of "collision"). */
	if (!keep) {
		port_release(t, p);
	} else {
		unsigned char mine = PORT_CLAIM_THREAD;
		atomic_compare_exchange_strong_explicit(&t->claim[p], &mine, PORT_CLAIM_CALL, memory_order_relaxed,
							memory_order_relaxed);
	}
	return r;
}

bool port_server_activity(const struct port_table *t, uint32_t p, struct port_activity *ret)
{
	const struct port_state *st = &t->state[p];
	uint8_t phase = __atomic_load_n(&st->phase, __ATOMIC_RELAXED);
	if (phase == PHASE_IDLE)
		return false;
	ret->phase = phase;
	ret->opcode = __atomic_load_n(&st->opcode, __ATOMIC_RELAXED);
	ret->later = __atomic_load_n(&st->later, __ATOMIC_RELAXED);
	ret->since_ns = __atomic_load_n(&st->since, __ATOMIC_RELAXED);
	return true;
}

/* ------------------------------------------------------------ handover */

void port_table_drain(struct port_table *t)
{
	atomic_store_explicit(&t->handover, true, memory_order_relaxed);
}

bool port_table_busy(const struct port_table *t)
{
	for (uint32_t p = 0; p < t->num_ports; p++)
		if (__atomic_load_n(&t->state[p].phase, __ATOMIC_RELAXED) != PHASE_IDLE ||
		    atomic_load_explicit(&t->claim[p], memory_order_relaxed))
			return true;
	return false;
}

enum port_handover port_handover_step(struct port_table *t, uint32_t p)
{
	struct port_state *st = &t->state[p];

	if (st->phase == PHASE_IDLE && !atomic_load_explicit(&t->claim[p], memory_order_relaxed))
		return PORT_HANDOVER_READY;
	if (st->phase != PHASE_RECV)
		return PORT_HANDOVER_LOST; /* it ran (BUSY, SEND) or is held */
	uint64_t word = __atomic_load_n(&t->client_word[p], __ATOMIC_ACQUIRE);
	uint32_t cs = GPUSYS_WORD_SEQ(word);
	uint32_t seen = atomic_load_explicit(&t->seen[p], memory_order_relaxed);
	if (cs == seen)
		return PORT_HANDOVER_WAIT; /* still writing its next packet */
	/* Two packets in flight (abi.h): a client one packet past what we
	 * took may publish one more without waiting for us, unless that one
	 * was its last. Refused now, that next packet would come after our
	 * answer, at a sequence the next daemon takes for a new packet 0; so
	 * wait for it (microseconds, as above). Two past us, it can publish
	 * nothing more before our acknowledgement. */
	if (((cs - seen) & GPUSYS_SEQ_MASK) == 1 && st->chunk + 1 < st->chunks)
		return PORT_HANDOVER_WAIT;
	/* The client published a packet of an unfinished request: refuse
	 * it at that sequence, so both words agree and the next daemon sees
	 * an idle port. The request never reached its service. */
	port_pending_free(t, st->pending);
	*st = (struct port_state){ .phase = PHASE_IDLE };
	port_ack(t, p, cs, GPUSYS_SW_ABORT, -ECONNABORTED);
	pthread_mutex_lock(&t->later_slot_lock);
	port_count_completion(t, PORT_LATER_SLOT);
	pthread_mutex_unlock(&t->later_slot_lock);
	atomic_fetch_add_explicit(&t->aborted, 1, memory_order_relaxed);
	return PORT_HANDOVER_READY;
}
