/* SPDX-License-Identifier: MIT */
/*
 * Private to the core's request path (port_server.c, later.c): a request
 * that lives across steps, and what the two files ask of each other.
 */
#ifndef GPUSYSD_CORE_PENDING_H
#define GPUSYSD_CORE_PENDING_H

#include "core/port_server.h"

struct event;

enum port_phase { PHASE_IDLE = 0, PHASE_RECV, PHASE_BUSY, PHASE_SEND };

/* What the daemon knows of one port between steps. */
struct port_state {
	uint8_t phase;
	bool later;       /* BUSY: pending until its service completes it */
	uint16_t opcode;  /* of the request in progress (gpusysctl ports) */
	uint32_t chunk;   /* next stream packet */
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

/* port_answer.c: answer a call whose service is done (packet 0 of the
 * response, or the whole of it), count it, free it unless a response
 * stream follows. Does not release the claim. */
void port_answer(struct port_table *t, struct pending *pd, unsigned slot);
void port_pending_free(struct port_table *t, struct pending *pd);

/* The client's budget: 0 or -ENOMEM; and giving bytes back. */
int port_charge(struct port_table *t, uint64_t bytes);
void port_uncharge(struct port_table *t, uint64_t bytes);

/* Hand the port back (seq, flags, status in the server word). */
void port_ack(struct port_table *t, uint32_t p, uint32_t seq, uint32_t sw_flags, int32_t status);
/* One request done, on progress slot slot (its only writer). */
void port_count_completion(struct port_table *t, unsigned slot);
/* Count a call in the per-opcode statistics (after port_respond, which
 * sets what it counts). */
void port_count_call(struct port_table *t, const struct port_call *call, unsigned slot);

/* Packet 0 of call's answer, and the hand-back. The number of response
 * stream packets still to send (off/part NULL: none may follow). */
uint32_t port_respond(struct port_table *t, uint32_t p, uint32_t seq, struct port_call *call, uint32_t *off,
		      uint32_t *part);
/* For gpusysctl ports: mark port p's call as pending later (or not). */
void port_state_set_later(struct port_table *t, uint32_t p, bool later);

/* later.c: after a handler returned: true when the call stays pending
 * (the port stays claimed), false when it must be answered now. */
bool later_after_handler(struct port_table *t, struct pending *pd);

#endif
