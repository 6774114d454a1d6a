/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of the port protocol (include/gpusys/abi.h), one port at a
 * time, with no threads of its own: pollers call port_server_step() on a
 * port whose client word moved; a call that had to go to the worker pool is
 * run there with port_server_run(); a call a service finishes later ends in
 * call_complete() (core/call.h).
 *
 * Every packet is copied out of shared memory before it is looked at; the
 * server's own copy of its sequence (seen[]) is the truth, never the shared
 * word; every length is bounded. A client that scribbles on its channel can
 * only get its own requests failed.
 */
#ifndef GPUSYSD_PORT_SERVER_H
#define GPUSYSD_PORT_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/call.h"
#include "core/service.h"
#include "core/stats.h"
#include "gpusys/abi.h"
#include "gpusys/device/host_sync.h"

struct port_state; /* private to port_server.c */
struct pending;

/* The progress slot of completions of calls that complete later: they come
 * from any thread, so they share one slot under a lock. */
#define PORT_LATER_SLOT (GPUSYS_PROGRESS_SLOTS - 1u)

/* Who keeps a table alive while calls are out (the session): a call handed
 * to the pool or pending later holds a reference. NULL in tests. */
struct port_table_owner {
	void (*ref)(void *owner);
	void (*unref)(void *owner);
	/* Make a poller look at this channel again, as a client's ring does
	 * (port_release_off_poller says when). NULL: nothing to do. */
	void (*rescan)(void *owner);
	void *owner;
};

/* The daemon's private view and state of one channel's ports. */
struct port_table {
	uint32_t num_ports;
	struct gpusys_channel_header *hdr; /* shared */
	volatile uint64_t *client_word;    /* shared, client-written */
	volatile uint64_t *server_word;    /* shared, written here only */
	struct gpusys_port *ports;         /* shared */
	uint8_t *windows;                  /* shared: the last num_windows ports' stream packets */
	uint32_t num_windows;
	/* private: the sequence we last acknowledged. Atomic (relaxed) only
	 * because every poller and the status report read it while the
	 * claim holder writes it. */
	_Atomic uint16_t *seen;
	atomic_uchar *claim;               /* private: PORT_CLAIM_* (0: free) */
	struct port_state *state;          /* private: per-port message assembly */
	const struct client *client;       /* the client, for services */
	struct port_table_owner owner;
	atomic_uint_fast64_t mem_used;     /* bytes held for this client's requests */
	uint64_t mem_budget;               /* bound on mem_used (-ENOMEM past it) */
	/* Requests completed, one counter per daemon thread (progress slot),
	 * each written by its thread only: no locked instruction on the hot
	 * path. The shared progress[] words are copies of these, so a client
	 * scribbling on its header cannot skew what we count. Each on a cache
	 * line of its own (padding, so no alignment is asked of the session's
	 * allocation), away from the fields every poller reads.
	 * NOTE: packed, eight pollers wrote one line on every request. */
	char completed_gap[64];
	struct {
		atomic_uint_fast64_t n;
		char pad[64 - sizeof(atomic_uint_fast64_t)];
	} completed[GPUSYS_PROGRESS_SLOTS];
	atomic_uint_fast64_t rejected;     /* requests refused as malformed */
	atomic_uint_fast64_t heads_early;  /* words seen before their heads (left for the next pass) */
	atomic_uint_fast64_t aborted;      /* requests refused by a restart (GPUSYS_SW_ABORT) */
	/* What the client's progress words held when this table took the
	 * channel (a channel adopted after a restart goes on counting). */
	uint64_t progress_base[GPUSYS_PROGRESS_SLOTS];
	/* Draining for a restart: no new request starts (port_table_drain). */
	atomic_bool handover;
	pthread_mutex_t later_slot_lock;   /* the PORT_LATER_SLOT writer */
	/* Calls that complete later (core/later.c). */
	pthread_mutex_t later_lock;
	struct pending *later_head;        /* pending calls, under later_lock */
	unsigned later_count;              /* under later_lock */
	unsigned later_max;                /* bound on later_count (-EAGAIN past it) */
	bool later_closing;                /* the client is gone: no new pending calls */
	struct stats_client stats;         /* per-opcode counters */
	/* Each service's per-client state (its client_init), index = the
	 * service's place in gpusysd_services[]. */
	void *svc_state[SERVICES_MAX];
	bool svc_ready;
};

_Static_assert(sizeof(((struct port_table *)0)->completed[0]) == 64, "one completed counter per cache line");

/* Set up t over a formatted channel and create every service's state for
 * client (services_client_init). 0 or -errno. */
int port_table_init(struct port_table *t, void *channel_base, uint32_t num_ports, const struct client *client,
		    uint64_t mem_budget);
/* Cancel what is pending, tear down the services' state, free t's memory.
 * Only when no thread serves t any more. */
void port_table_fini(struct port_table *t);

/* Requests this table has completed, summed over the threads. */
static inline uint64_t port_table_requests(const struct port_table *t)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < GPUSYS_PROGRESS_SLOTS; i++)
		n += atomic_load_explicit(&t->completed[i].n, memory_order_relaxed);
	return n;
}

/* Cheap test for work: reads the shared word once. */
static inline bool port_pending(const struct port_table *t, uint32_t p)
{
	/* An atomic read (relaxed: a mov on x86): the client writes the word
	 * at any time, and a plain read racing a write is undefined. */
	return GPUSYS_WORD_SEQ(__atomic_load_n(&t->client_word[p], __ATOMIC_RELAXED)) !=
	       atomic_load_explicit(&t->seen[p], memory_order_relaxed);
}

/* For status: a daemon thread holds the port or the client has moved. A
 * racy read, good enough for a report. */
static inline bool port_in_use(const struct port_table *t, uint32_t p)
{
	return atomic_load_explicit(&t->claim[p], memory_order_relaxed) || port_pending(t, p);
}

/* Who holds a port's claim. A call's claim is marked apart so that a
 * poller passing over the port tells the two apart (its counters) from the
 * dense claim[] bytes alone. NOTE: it read the port's phase before, a cache
 * line per port: with 10 000 calls pending, a pass paid a miss for each
 * (tests/daemon/test_later.c). */
enum {
	PORT_CLAIM_FREE = 0,
	PORT_CLAIM_THREAD = 1, /* a poller or worker, for one step */
	PORT_CLAIM_CALL = 2,   /* a call on the pool or pending later */
};

/* For the pollers' counters: a call (on the pool, or pending later) holds
 * port p, rather than another poller. A racy read. */
static inline bool port_held_by_call(const struct port_table *t, uint32_t p)
{
	return atomic_load_explicit(&t->claim[p], memory_order_relaxed) == PORT_CLAIM_CALL;
}

static inline bool port_try_claim(struct port_table *t, uint32_t p)
{
	unsigned char expected = 0;
	/* A plain load first: a port held by a worker or a pending call
	 * (thousands may be) costs a read, not a locked instruction. */
	if (atomic_load_explicit(&t->claim[p], memory_order_relaxed))
		return false;
	return atomic_compare_exchange_strong_explicit(&t->claim[p], &expected, PORT_CLAIM_THREAD, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void port_release(struct port_table *t, uint32_t p)
{
	atomic_store_explicit(&t->claim[p], PORT_CLAIM_FREE, memory_order_release);
}

/* A release by a thread that is not a poller (a pool worker, a call that
 * completed later). The client may have seen the answer and rung for its
 * next request before this release: a poller that came then found the port
 * claimed, passed over it, and may be dozing with that ring recorded as
 * seen (a 1 s stall until the safety rescan, found by the restart test).
 * So: release, full fence, and if the client has moved, ring for it. The
 * poller's side is its ring-then-claim order: either it sees the release or
 * this sees the client's word. */
static inline void port_release_off_poller(struct port_table *t, uint32_t p)
{
	port_release(t, p);
	gpusys_host_full_fence();
	if (port_pending(t, p) && t->owner.rescan)
		t->owner.rescan(t->owner.owner);
}

/* The pollers' sampled time split (core/poller.h): while on is set on this
 * thread, the fast path (one packet, served on the poller) adds the
 * stats_now() ticks it spends writing the answer into the channel to
 * answer, and counting the request (per-opcode stats, completed) to count.
 * Off, it costs a thread-local load per request. */
struct port_timing {
	bool on;
	uint64_t answer, count;
};
extern _Thread_local struct port_timing port_timing;

enum port_step {
	PORT_STEP_NONE,  /* nothing to do (the client had not moved after all) */
	PORT_STEP_DONE,  /* progress made; the claim is released, or a pending call holds it */
	PORT_STEP_DEFER, /* *ret_call must go to the worker pool; the claim stays
			    held until port_server_run() finishes it */
};

/* Advance port p of t by one packet. The caller holds the claim on p.
 * progress_slot: this thread's word in the header's progress[] array. */
enum port_step port_server_step(struct port_table *t, uint32_t p, unsigned progress_slot,
				struct port_call **ret_call);

/* On a worker: run a deferred call's service, then answer it and hand the
 * port back, unless the service keeps it for later (call_later). */
void port_server_run(struct port_call *call, unsigned progress_slot);

/* For gpusysctl ports: what port p is doing now (a racy read). false: idle. */
struct port_activity {
	uint16_t opcode;
	uint8_t phase;     /* 1 receiving, 2 in service, 3 sending */
	bool later;        /* pending: completes later */
	uint64_t since_ns; /* stats_now() when the request arrived */
};
bool port_server_activity(const struct port_table *t, uint32_t p, struct port_activity *ret);

/* Restart handover (docs/RESTART.md). Drain: from now on no request starts
 * (a packet 0 stays unread for the next daemon); requests under way go on. */
void port_table_drain(struct port_table *t);
/* Whether any port is receiving, in service or sending (a racy read while
 * pollers run; exact once they stopped). */
bool port_table_busy(const struct port_table *t);

enum port_handover {
	PORT_HANDOVER_READY, /* idle, or a packet 0 nobody read: the next daemon may serve it */
	PORT_HANDOVER_WAIT,  /* receiving, the client has not published its next packet yet */
	PORT_HANDOVER_LOST,  /* in service or sending: it ran, so it cannot be handed over */
};
/* With no poller or worker left on t: where port p stands. A port receiving
 * whose client has published its next packet is refused now
 * (GPUSYS_SW_ABORT, -ECONNABORTED: not run) and is then READY. */
enum port_handover port_handover_step(struct port_table *t, uint32_t p);

/* Where port p's stream packets go (its data or its window, abi.h) and their
 * size in *pkt, from the layout the table computed itself (never the
 * header's: the client can rewrite it). */
static inline uint8_t *port_table_stream(const struct port_table *t, uint32_t p, uint32_t *pkt)
{
	return gpusys_port_stream(t->ports, t->windows, t->num_ports, t->num_windows, p, pkt);
}

#endif /* GPUSYSD_PORT_SERVER_H */
