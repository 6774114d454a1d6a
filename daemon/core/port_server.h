/* SPDX-License-Identifier: MIT */
/*
 * The daemon side of the port protocol (include/gpusys/abi.h), one port at a
 * time, with no threads of its own: pollers call port_server_step() on a
 * port whose client word moved, the worker pool calls port_server_finish()
 * for requests that had to block.
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

#include "gpusys/abi.h"

struct port_state; /* private to port_server.c */

/* The daemon's private view and state of one channel's ports. */
struct port_table {
	uint32_t num_ports;
	struct gpusys_channel_header *hdr; /* shared */
	volatile uint64_t *client_word;    /* shared, client-written */
	volatile uint64_t *server_word;    /* shared, written here only */
	struct gpusys_port *ports;         /* shared */
	/* private: the sequence we last acknowledged. Atomic (relaxed) only
	 * because every poller and the status report read it while the
	 * claim holder writes it. */
	_Atomic uint16_t *seen;
	atomic_uchar *claim;               /* private: 1 while a daemon thread works on the port */
	struct port_state *state;          /* private: per-port message assembly */
	void *owner;                       /* the session, for services */
	atomic_uint_fast64_t mem_used;     /* bytes held for this client's requests */
	uint64_t mem_budget;               /* bound on mem_used (-ENOMEM past it) */
	/* Requests completed, one counter per daemon thread (progress slot),
	 * each written by its thread only: no locked instruction on the hot
	 * path. The shared progress[] words are copies of these, so a client
	 * scribbling on its header cannot skew what we count. */
	atomic_uint_fast64_t completed[GPUSYS_PROGRESS_SLOTS];
	atomic_uint_fast64_t rejected;     /* requests refused as malformed */
	/* Per-client state of services that keep some (print buffers, open
	 * files), created on first use and torn down by port_table_fini()
	 * through service_client_fini(), before the session closes the
	 * client's descriptors. Index: enum service_state_slot. */
	void *service_state[4];
	pthread_mutex_t service_state_lock; /* guards creating them */
};

enum service_state_slot {
	SERVICE_STATE_PRINT = 0,
	SERVICE_STATE_FILE = 1,
	SERVICE_STATE_ALLOC = 2,
};

/* A request copied out of the channel and validated, and its response. */
struct port_call {
	struct port_table *table;
	uint32_t port;
	uint16_t opcode;
	uint16_t flags;
	uint64_t lane_mask;
	uint32_t len[GPUSYS_WARP_LANES];   /* request bytes per lane (0 if inactive) */
	uint32_t cap[GPUSYS_WARP_LANES];   /* response capacity per lane */
	uint8_t *data[GPUSYS_WARP_LANES];  /* request payload per lane, private memory */

	/* Filled by the service. resp_data[i] may point into data[] (echo) or
	 * into resp_buf. Lengths above cap[i] are refused with -EMSGSIZE. */
	int32_t status;                        /* whole request */
	int32_t lane_status[GPUSYS_WARP_LANES];
	uint32_t resp_len[GPUSYS_WARP_LANES];
	const uint8_t *resp_data[GPUSYS_WARP_LANES];
	void *resp_buf;                        /* freed with the call */
	uint64_t charged;                      /* port_call_charge()d bytes */
};

enum service_where {
	SERVICE_INLINE, /* cheap: run on the poller, no hand-off */
	SERVICE_POOL,   /* may block: run on the worker pool */
};

struct service {
	uint16_t opcode;
	enum service_where where;
	const char *name;
	void (*handle)(struct port_call *call);
};

/* Registry of services by opcode (daemon/service.c). NULL: unknown opcode. */
const struct service *service_find(uint16_t opcode);

/* Tear down every service's per-client state of t (flush output, close
 * files). Called once, from port_table_fini, when no thread serves t. */
void service_client_fini(struct port_table *t);

/* Count bytes a service is about to allocate for call's response against
 * the client's budget (mem_budget), until the call is freed: a client that
 * asks for large answers and never takes them (a response stream it stops
 * reading) holds at most its own budget. 0 or -ENOMEM. */
int port_call_charge(struct port_call *call, uint64_t bytes);

int port_table_init(struct port_table *t, void *channel_base, uint32_t num_ports, void *owner,
		    uint64_t mem_budget);
void port_table_fini(struct port_table *t);

/* Requests this table has completed, summed over the threads. */
static inline uint64_t port_table_requests(const struct port_table *t)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < GPUSYS_PROGRESS_SLOTS; i++)
		n += atomic_load_explicit(&t->completed[i], memory_order_relaxed);
	return n;
}

/* Cheap test for work: reads the shared word once. */
static inline bool port_pending(const struct port_table *t, uint32_t p)
{
	return GPUSYS_WORD_SEQ(t->client_word[p]) != atomic_load_explicit(&t->seen[p], memory_order_relaxed);
}

/* For status: a daemon thread holds the port or the client has moved. A
 * racy read, good enough for a report. */
static inline bool port_in_use(const struct port_table *t, uint32_t p)
{
	return atomic_load_explicit(&t->claim[p], memory_order_relaxed) || port_pending(t, p);
}

static inline bool port_try_claim(struct port_table *t, uint32_t p)
{
	unsigned char expected = 0;
	return atomic_compare_exchange_strong_explicit(&t->claim[p], &expected, 1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void port_release(struct port_table *t, uint32_t p)
{
	atomic_store_explicit(&t->claim[p], 0, memory_order_release);
}

enum port_step {
	PORT_STEP_NONE,  /* nothing to do (the client had not moved after all) */
	PORT_STEP_DONE,  /* progress made; the claim is released */
	PORT_STEP_DEFER, /* *ret_call must go to the worker pool; the claim stays
			    held until port_server_finish() */
};

/* Advance port p of t by one packet. The caller holds the claim on p.
 * progress_slot: this thread's word in the header's progress[] array. */
enum port_step port_server_step(struct port_table *t, uint32_t p, unsigned progress_slot,
				struct port_call **ret_call);

/* Run on a worker after call's service returned: write the response, hand
 * the port back, release the claim, free the call. */
void port_server_finish(struct port_call *call, unsigned progress_slot);

#endif /* GPUSYSD_PORT_SERVER_H */
