/* SPDX-License-Identifier: MIT */
/*
 * Private to the port module (port_server.c, the request side;
 * port_answer.c, the answer side) and later.c: a request that lives across
 * steps, and the answer side's entries.
 */
#ifndef GPUSYSD_CORE_PENDING_H
#define GPUSYSD_CORE_PENDING_H

#include "common/port_host.h"
#include "core/port_server.h"

struct event;

enum port_phase { PHASE_IDLE = 0, PHASE_RECV, PHASE_BUSY, PHASE_SEND };

/* What the daemon knows of one port between steps. */
struct port_state {
	uint8_t phase;
	bool later;       /* BUSY: pending until its service completes it */
	uint16_t opcode;  /* of the request in progress (gpusysctl ports) */
	uint32_t chunk;   /* next stream packet (its slot: chunk % 2, abi.h) */
	uint32_t chunks;  /* stream packets in this message */
	uint64_t since;   /* stats_now() when the request arrived */
	struct pending *pending;
};

/* gpusysctl ports reads phase, opcode, later and since from the main thread
 * while the port's holder writes them (port_server_activity, a racy read by
 * design): so the holder stores them atomically, relaxed (a plain mov; a
 * plain store racing that read is undefined, and ThreadSanitizer says so).
 * Its own reads of them need nothing: it is their only writer. */
static inline void port_state_set_phase(struct port_state *st, enum port_phase phase)
{
	__atomic_store_n(&st->phase, (uint8_t)phase, __ATOMIC_RELAXED);
}


/* Where a call that completes later stands (under its table's later_lock). */
enum later_state {
	LATER_NONE = 0,   /* not deferred: the handler's return finishes it */
	LATER_ARMING,     /* call_later() ran, the handler has not returned yet */
	LATER_PENDING,    /* waiting for its service, its deadline or a cancel */
	LATER_DONE_EARLY, /* completed before its handler returned: the handler's thread answers */
	LATER_TAKEN,      /* completed or cancelled: whoever took it finishes it */
};

struct pending {
	struct port_call call; /* first: services see only this */
	const struct service_op *op;
	uint32_t service;      /* index in gpusysd_services */
	uint32_t cs;           /* the client sequence the answer acknowledges */
	uint8_t *req_buf;      /* every lane's payload, back to back */
	uint32_t off[GPUSYS_WARP_LANES];  /* lane's offset in the stream */
	uint32_t part[GPUSYS_WARP_LANES]; /* lane's bytes in the stream */

	/* Calls that complete later. */
	enum later_state later;
	const struct call_later_ops *later_ops;
	struct event *deadline;
	uint64_t deadline_ns; /* now_ns() past which the deadline may take it */
	struct pending *lprev, *lnext; /* t->later_head list */
};

static inline struct pending *pending_of(struct port_call *call)
{
	return (struct pending *)call; /* call is the first member */
}

/* The hand-back and the progress count, on every path of both sides (and
 * the fast path of every NOOP): inline, so that the request side asks the
 * answer side nothing for them. */
/* Hand the port back to the client: everything we wrote, then the word. */
static inline void port_ack(struct port_table *t, uint32_t p, uint32_t seq, uint32_t sw_flags, int32_t status)
{
	atomic_store_explicit(&t->seen[p], (uint16_t)(seq & GPUSYS_SEQ_MASK), memory_order_relaxed);
	port_host_hand_back(&t->server_word[p], seq, sw_flags, status);
}

static inline void port_count_completion(struct port_table *t, unsigned slot)
{
	/* This thread is the only writer of its counter and progress word
	 * (PORT_LATER_SLOT's writers hold later_slot_lock). */
	uint64_t n = atomic_load_explicit(&t->completed[slot].n, memory_order_relaxed) + 1;
	atomic_store_explicit(&t->completed[slot].n, n, memory_order_relaxed);
	gpusys_host_release_before(&t->hdr->progress[slot].completed);
	__atomic_store_n(&t->hdr->progress[slot].completed, t->progress_base[slot] + n, __ATOMIC_RELAXED);
}

/* port_answer.c, the answer side. The request side (port_server.c) and
 * later.c call it; it calls neither: one way. Each request enters it once
 * to be answered (port_answer_inline, port_answer or port_refuse), and once
 * for each client word of a response stream (port_send_packets). */

/* A call served from the stack on the poller (serve_inline): answer it,
 * count it, and keep it for its response stream when it has one. */
void port_answer_inline(struct port_table *t, uint32_t p, uint32_t cs, struct port_call *call, unsigned slot);
/* A pending call whose service is done: packet 0 of the response (or the
 * whole of it), counted, freed unless a response stream follows. Does not
 * release the claim. */
void port_answer(struct port_table *t, struct pending *pd, unsigned slot);
/* A request refused before any service saw it. */
void port_refuse(struct port_table *t, uint32_t p, uint32_t cs, uint64_t lane_mask, uint16_t flags, bool heads,
		 int32_t status, unsigned slot);
/* The response stream's next n packets (1 or 2) that word cs asked for;
 * the last one ends the call. */
void port_send_packets(struct port_table *t, uint32_t p, uint32_t cs, uint32_t n, unsigned slot);
/* A stream's word that jumped (port_host_flip_packets: 0): the message
 * ends, -EINVAL at the client's sequence. */
void port_stream_refuse(struct port_table *t, uint32_t p, uint32_t cs, unsigned slot);
void port_pending_free(struct port_table *t, struct pending *pd);

/* The client's budget: 0 or -ENOMEM; and giving bytes back. */
int port_charge(struct port_table *t, uint64_t bytes);
void port_uncharge(struct port_table *t, uint64_t bytes);

/* For gpusysctl ports: mark port p's call as pending later (or not). */
void port_state_set_later(struct port_table *t, uint32_t p, bool later);

#endif
