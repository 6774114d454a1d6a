/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of the port protocol. See include/gpusys/abi.h for the
 * message format and device/port_client.h for the other side.
 *
 * Per port we keep a phase:
 *   IDLE  the next client flip starts a request (packet 0)
 *   RECV  request stream packets are arriving
 *   BUSY  the request is on the worker pool (the claim is held meanwhile)
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

#include "core/port_server.h"

enum port_phase { PHASE_IDLE = 0, PHASE_RECV, PHASE_BUSY, PHASE_SEND };

/* A request that lives across steps: the call plus what the stream needs. */
struct pending {
	struct port_call call; /* first: services see only this */
	const struct service *service;
	uint8_t *req_buf;      /* every lane's payload, back to back */
	uint32_t off[GPUSYS_WARP_LANES];  /* lane's offset in the stream */
	uint32_t part[GPUSYS_WARP_LANES]; /* lane's bytes in the stream */
	uint64_t charged;      /* bytes counted against the client's budget */
};

/* What the client word says about a request. */
struct request_head {
	uint16_t opcode;
	uint16_t flags; /* enum gpusys_req_flags */
	uint64_t lane_mask;
};

struct port_state {
	uint8_t phase;
	uint32_t chunk;  /* next stream packet */
	uint32_t chunks; /* stream packets in this message */
	uint32_t busy_cs; /* BUSY: the sequence the worker's answer acknowledges */
	struct pending *pending;
};

static struct pending *pending_of(struct port_call *call)
{
	return (struct pending *)call; /* call is the first member */
}

int port_table_init(struct port_table *t, void *channel_base, uint32_t num_ports, void *owner,
		    uint64_t mem_budget)
{
	uint8_t *base = channel_base;
	struct gpusys_channel_header *hdr = channel_base;

	memset(t, 0, sizeof(*t));
	if (num_ports < GPUSYS_MIN_PORTS || num_ports > GPUSYS_MAX_PORTS || hdr->num_ports != num_ports)
		return -EINVAL;
	t->num_ports = num_ports;
	t->hdr = hdr;
	t->client_word = (volatile uint64_t *)(base + hdr->client_word_offset);
	t->server_word = (volatile uint64_t *)(base + hdr->server_word_offset);
	t->ports = (struct gpusys_port *)(base + hdr->ports_offset);
	t->owner = owner;
	t->mem_budget = mem_budget;
	pthread_mutex_init(&t->service_state_lock, NULL);
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
	return 0;
}

int port_call_charge(struct port_call *call, uint64_t bytes)
{
	struct port_table *t = call->table;
	if (atomic_fetch_add_explicit(&t->mem_used, bytes, memory_order_relaxed) + bytes > t->mem_budget) {
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
		return -ENOMEM;
	}
	call->charged += bytes;
	return 0;
}

/* Only when something was charged: on the inline path (every NOOP) a
 * locked instruction on a line all pollers share would be pure cost. */
static inline void uncharge(struct port_table *t, uint64_t bytes)
{
	if (bytes)
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
}

static void pending_free(struct port_table *t, struct pending *pd)
{
	if (!pd)
		return;
	uncharge(t, pd->charged + pd->call.charged);
	free(pd->call.resp_buf);
	free(pd->req_buf);
	free(pd);
}

void port_table_fini(struct port_table *t)
{
	if (!t->seen && !t->claim && !t->state)
		return; /* never initialised, or already torn down */
	service_client_fini(t);
	pthread_mutex_destroy(&t->service_state_lock);
	if (t->state) {
		for (uint32_t p = 0; p < t->num_ports; p++)
			pending_free(t, t->state[p].pending);
	}
	free((void *)t->seen);
	free((void *)t->claim);
	free(t->state);
	t->seen = NULL;
	t->claim = NULL;
	t->state = NULL;
}

/* Hand the port back to the client: everything we wrote, then the word. */
static void port_ack(struct port_table *t, uint32_t p, uint32_t seq, uint32_t sw_flags, int32_t status)
{
	atomic_store_explicit(&t->seen[p], (uint16_t)(seq & GPUSYS_SEQ_MASK), memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	t->server_word[p] = gpusys_server_word(seq, sw_flags, status);
}

static void count_completion(struct port_table *t, unsigned slot)
{
	/* This thread is the only writer of its counter and progress word. */
	uint64_t n = atomic_load_explicit(&t->completed[slot], memory_order_relaxed) + 1;
	atomic_store_explicit(&t->completed[slot], n, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	t->hdr->progress[slot].completed = n;
}

static uint32_t packets_for(uint64_t stream_bytes)
{
	return (uint32_t)((stream_bytes + GPUSYS_PACKET_BYTES - 1) / GPUSYS_PACKET_BYTES);
}

/* Stream layout: each lane's bytes beyond its inline slot, in lane order. */
static uint64_t stream_layout(uint64_t mask, const uint32_t *len, uint32_t *off, uint32_t *part)
{
	uint64_t total = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		part[l] = (mask >> l & 1) ? gpusys_stream_part(len[l]) : 0;
		off[l] = (uint32_t)total;
		total += part[l];
	}
	return total;
}

/* Copy stream packet k between the channel and each lane's buffer. */
static void stream_copy(uint8_t *packet, uint32_t k, const uint32_t *off, const uint32_t *part,
			uint8_t *const *lane_buf, int to_channel)
{
	uint64_t lo = (uint64_t)k * GPUSYS_PACKET_BYTES, hi = lo + GPUSYS_PACKET_BYTES;
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

/* Write response packet 0 (unless NOREPLY) and hand the port back. Returns
 * the number of response stream packets still to send. */
static uint32_t respond(struct port_table *t, uint32_t p, uint32_t seq, struct port_call *call, uint32_t *off,
			uint32_t *part)
{
	struct gpusys_port *port = &t->ports[p];
	uint32_t chunks = 0, trivial = 1;

	if (call->flags & GPUSYS_REQ_NOREPLY) {
		port_ack(t, p, seq, 0, 0);
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
		trivial &= n == 0 && call->lane_status[l] == 0;
	}
	if (!trivial) {
		/* Inactive lanes too: the client reads only its lanes, but
		 * stale words from an earlier message help nobody. */
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			uint32_t n = call->resp_len[l];
			port->len[l] = n;
			port->aux[l] = (uint32_t)call->lane_status[l];
			if (n)
				memcpy(port->data + l * GPUSYS_INLINE_BYTES, call->resp_data[l],
				       n < GPUSYS_INLINE_BYTES ? n : GPUSYS_INLINE_BYTES);
		}
		if (off)
			chunks = packets_for(stream_layout(call->lane_mask, call->resp_len, off, part));
	}
	port_ack(t, p, seq, trivial ? GPUSYS_SW_TRIVIAL : 0, call->status);
	return chunks;
}

/* After the service ran: respond, then either finish or go on streaming. */
static void complete(struct port_table *t, uint32_t p, uint32_t cs, struct pending *pd, unsigned slot)
{
	struct port_state *st = &t->state[p];
	uint32_t chunks = respond(t, p, cs, &pd->call, pd->off, pd->part);

	if (chunks) {
		st->phase = PHASE_SEND;
		st->chunk = 0;
		st->chunks = chunks;
		st->pending = pd;
		return;
	}
	st->phase = PHASE_IDLE;
	st->pending = NULL;
	pending_free(t, pd);
	count_completion(t, slot);
}

/* The service has been chosen and the request assembled: run it here, or
 * leave it to the pool. */
static enum port_step dispatch(struct port_table *t, uint32_t p, uint32_t cs, struct pending *pd, unsigned slot,
			       struct port_call **ret_call)
{
	struct port_state *st = &t->state[p];

	if (pd->call.status == 0 && pd->service->where == SERVICE_POOL) {
		st->phase = PHASE_BUSY;
		st->pending = pd;
		st->busy_cs = cs;
		*ret_call = &pd->call;
		return PORT_STEP_DEFER;
	}
	if (pd->call.status == 0)
		pd->service->handle(&pd->call);
	complete(t, p, cs, pd, slot);
	port_release(t, p);
	return PORT_STEP_DONE;
}

/* Fast path: one packet, a service that runs inline. No allocation: the
 * payload is copied to the stack. */
static void serve_inline(struct port_table *t, uint32_t p, uint32_t cs, const struct service *svc,
			 const struct request_head *h, const uint32_t *len, const uint32_t *cap, unsigned slot)
{
	struct port_call call;
	uint8_t payload[GPUSYS_PACKET_BYTES];
	const uint8_t *shared = t->ports[p].data;

	/* Only the active lanes' entries are set (services look at no
	 * other); respond() clears the rest before anything is shared. */
	call.table = t;
	call.status = 0;
	call.resp_buf = NULL;
	call.charged = 0;
	call.port = p;
	call.opcode = h->opcode;
	call.flags = h->flags;
	call.lane_mask = h->lane_mask;
	for (uint64_t m = call.lane_mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		call.len[l] = len[l];
		call.cap[l] = cap[l];
		call.data[l] = payload + l * GPUSYS_INLINE_BYTES;
		call.lane_status[l] = 0;
		call.resp_len[l] = 0;
		call.resp_data[l] = NULL;
		if (len[l])
			memcpy(call.data[l], shared + l * GPUSYS_INLINE_BYTES, len[l]);
	}
	svc->handle(&call);
	uint32_t off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES];
	uint32_t chunks = respond(t, p, cs, &call, off, part);
	if (chunks) {
		/* The response outgrew its packet: keep it for streaming. Its
		 * bytes may point into this stack frame, so copy them out. */
		struct pending *pd = calloc(1, sizeof(*pd));
		uint64_t total = 0;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
			total += call.resp_len[l];
		uint8_t *copy = pd ? malloc(total) : NULL;
		if (!copy) {
			free(pd);
			/* Too late to refuse: the client already has packet 0
			 * and waits for the rest. Mark the channel dead for
			 * this client rather than leave it spinning. */
			t->hdr->server_state = GPUSYS_SERVER_STOPPED;
			uncharge(t, call.charged);
			free(call.resp_buf);
			count_completion(t, slot);
			return;
		}
		for (uint64_t l = 0, at = 0; l < GPUSYS_WARP_LANES; l++) {
			if (call.resp_len[l])
				memcpy(copy + at, call.resp_data[l], call.resp_len[l]);
			call.resp_data[l] = copy + at;
			at += call.resp_len[l];
		}
		free(call.resp_buf);
		call.resp_buf = copy;
		pd->call = call;
		memcpy(pd->off, off, sizeof(off));
		memcpy(pd->part, part, sizeof(part));
		t->state[p] = (struct port_state){ .phase = PHASE_SEND, .chunk = 0, .chunks = chunks, .pending = pd };
		return;
	}
	uncharge(t, call.charged);
	free(call.resp_buf);
	count_completion(t, slot);
}

static enum port_step start_request(struct port_table *t, uint32_t p, uint64_t word, unsigned slot,
				    struct port_call **ret_call)
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

	/* Copy out once; from here on only the copies are looked at. */
	if (GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_EMPTY) {
		memset(len, 0, sizeof(len));
		memset(cap, 0, sizeof(cap));
	} else {
		memcpy(len, port->len, sizeof(len));
		memcpy(cap, port->aux, sizeof(cap));
	}

	uint64_t bytes = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES && !(GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_EMPTY); l++) {
		if (!(h.lane_mask >> l & 1)) {
			len[l] = cap[l] = 0;
			continue;
		}
		if (len[l] > GPUSYS_MAX_LANE_PAYLOAD)
			status = -E2BIG;
		/* A capacity is only a limit: nothing larger is ever sent. */
		if (cap[l] > GPUSYS_MAX_LANE_PAYLOAD)
			cap[l] = GPUSYS_MAX_LANE_PAYLOAD;
		bytes += len[l];
	}
	if (h.lane_mask == 0 || (GPUSYS_WORD_FLAGS(word) & ~GPUSYS_CW_KNOWN))
		status = -EINVAL;
	if (status) {
		/* The lengths cannot be trusted, so neither can the stream
		 * layout: answer at once. An honest client never gets here
		 * (it checks the same bounds before sending). */
		atomic_fetch_add_explicit(&t->rejected, 1, memory_order_relaxed);
		struct port_call call = { .lane_mask = h.lane_mask, .flags = h.flags, .status = status };
		respond(t, p, cs, &call, NULL, NULL);
		count_completion(t, slot);
		port_release(t, p);
		return PORT_STEP_DONE;
	}

	const struct service *svc = service_find(h.opcode);
	if (svc && svc->where == SERVICE_INLINE && bytes <= GPUSYS_PACKET_BYTES) {
		int single = 1;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
			single &= len[l] <= GPUSYS_INLINE_BYTES;
		if (single) {
			serve_inline(t, p, cs, svc, &h, len, cap, slot);
			port_release(t, p);
			return PORT_STEP_DONE;
		}
	}

	/* General path: assemble the request in private memory. */
	struct pending *pd = calloc(1, sizeof(*pd));
	if (!pd)
		status = -ENOMEM;
	else if (!svc)
		status = -ENOSYS;
	else if (atomic_fetch_add_explicit(&t->mem_used, bytes, memory_order_relaxed) + bytes > t->mem_budget) {
		atomic_fetch_sub_explicit(&t->mem_used, bytes, memory_order_relaxed);
		status = -ENOMEM;
	} else {
		pd->charged = bytes;
		pd->req_buf = malloc(bytes ? bytes : 1);
		if (!pd->req_buf)
			status = -ENOMEM;
	}
	if (!pd) {
		/* Not even room to track the stream: answer now. */
		struct pending tmp = { .call = { .lane_mask = h.lane_mask, .flags = h.flags, .status = status } };
		respond(t, p, cs, &tmp.call, NULL, NULL);
		count_completion(t, slot);
		port_release(t, p);
		return PORT_STEP_DONE;
	}

	struct port_call *call = &pd->call;
	call->table = t;
	call->port = p;
	call->opcode = h.opcode;
	call->flags = h.flags;
	call->lane_mask = h.lane_mask;
	call->status = status;
	pd->service = svc;
	memcpy(call->len, len, sizeof(len));
	memcpy(call->cap, cap, sizeof(cap));
	uint64_t stream = stream_layout(h.lane_mask, len, pd->off, pd->part);
	if (status == 0) {
		uint64_t at = 0;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(h.lane_mask >> l & 1))
				continue;
			call->data[l] = pd->req_buf + at;
			memcpy(call->data[l], port->data + l * GPUSYS_INLINE_BYTES,
			       len[l] < GPUSYS_INLINE_BYTES ? len[l] : GPUSYS_INLINE_BYTES);
			at += len[l];
		}
	}
	if (stream) {
		/* A failed request still takes its stream, so the client's
		 * next packets are not mistaken for a new request. */
		t->state[p] = (struct port_state){ .phase = PHASE_RECV, .chunk = 0, .chunks = packets_for(stream),
						   .pending = pd };
		port_ack(t, p, cs, 0, 0);
		port_release(t, p);
		return PORT_STEP_DONE;
	}
	return dispatch(t, p, cs, pd, slot, ret_call);
}

static enum port_step receive_packet(struct port_table *t, uint32_t p, uint32_t cs, unsigned slot,
				     struct port_call **ret_call)
{
	struct port_state *st = &t->state[p];
	struct pending *pd = st->pending;

	if (pd->call.status == 0)
		stream_copy(t->ports[p].data, st->chunk, pd->off, pd->part, pd->call.data, 0);
	if (++st->chunk < st->chunks) {
		port_ack(t, p, cs, 0, 0);
		port_release(t, p);
		return PORT_STEP_DONE;
	}
	return dispatch(t, p, cs, pd, slot, ret_call);
}

static enum port_step send_packet(struct port_table *t, uint32_t p, uint32_t cs, unsigned slot)
{
	struct port_state *st = &t->state[p];
	struct pending *pd = st->pending;

	stream_copy(t->ports[p].data, st->chunk, pd->off, pd->part, (uint8_t *const *)pd->call.resp_data, 1);
	if (++st->chunk == st->chunks) {
		st->phase = PHASE_IDLE;
		st->pending = NULL;
		pending_free(t, pd);
		count_completion(t, slot);
	}
	port_ack(t, p, cs, 0, 0);
	port_release(t, p);
	return PORT_STEP_DONE;
}

enum port_step port_server_step(struct port_table *t, uint32_t p, unsigned progress_slot,
				struct port_call **ret_call)
{
	uint64_t word = t->client_word[p]; /* read once */
	uint32_t cs = GPUSYS_WORD_SEQ(word);

	if (cs == atomic_load_explicit(&t->seen[p], memory_order_relaxed)) {
		port_release(t, p);
		return PORT_STEP_NONE;
	}
	/* Pairs with the client's release before its flag store. */
	atomic_thread_fence(memory_order_acquire);

	switch (t->state[p].phase) {
	case PHASE_IDLE:
		return start_request(t, p, word, progress_slot, ret_call);
	case PHASE_RECV:
		return receive_packet(t, p, cs, progress_slot, ret_call);
	case PHASE_SEND:
		return send_packet(t, p, cs, progress_slot);
	default:
		/* BUSY ports stay claimed by their worker; never here. */
		port_release(t, p);
		return PORT_STEP_NONE;
	}
}

void port_server_finish(struct port_call *call, unsigned progress_slot)
{
	struct port_table *t = call->table;
	uint32_t p = call->port;
	uint32_t cs = t->state[p].busy_cs;

	complete(t, p, cs, pending_of(call), progress_slot);
	port_release(t, p);
}
