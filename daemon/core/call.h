/* SPDX-License-Identifier: MIT */
/*
 * One request as a service sees it: copied out of the channel and
 * validated, with room for its response. What a handler may do with it:
 * fill the response and return (the core answers at once), or start the
 * work, call call_later() and return; then the port stays the daemon's
 * until call_complete(), from any thread, with no thread waiting meanwhile.
 */
#ifndef GPUSYSD_CORE_CALL_H
#define GPUSYSD_CORE_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "gpusys/abi.h"

struct client;
struct port_table;

struct port_call {
	struct port_table *table;
	const struct client *client;       /* who asked */
	void *state;                       /* the service's per-client state (its client_init) */
	uint32_t port;
	uint16_t opcode;
	uint16_t flags;                    /* enum gpusys_req_flags */
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
	void *later_data;                      /* the service's, for a call that completes later */

	/* The core's: bytes charged to the client's budget, the op's
	 * counters, when the request arrived. */
	uint64_t charged;
	uint32_t op_id;
	uint64_t t_start;
	uint64_t bytes_in;
	/* Set by port_respond, for the counters: the answer's bytes (what
	 * was sent: none for NOREPLY or a refused lane) and whether the
	 * request or any lane failed. */
	uint64_t bytes_out;
	bool failed;
	bool heads; /* the request came as heads (GPUSYS_CW_HEADS): so goes the answer */

	/* An op flagged SERVICE_OP_TRY_POLLER (core/service.h) runs first on
	 * the poller that found it, with on_poller set: a lane that would
	 * block sets to_pool and the handler returns; the call then runs again
	 * on a worker (on_poller clear), where the handler goes on from
	 * resume_at, a mark of its own (0 at the start). */
	bool on_poller;
	bool to_pool;
	uint32_t resume_at;
};

/* Count bytes a service is about to allocate for the call's response against
 * the client's budget, until the call is freed: a client that asks for large
 * answers and never takes them holds at most its own budget. 0 or -ENOMEM. */
int port_call_charge(struct port_call *call, uint64_t bytes);

/* The same for a call the device side sends again when told to (abi.h,
 * GPUSYS_STATUS_NO_ROOM: file and socket calls, before anything ran): 0;
 * GPUSYS_STATUS_NO_ROOM
 * when bytes fit the client's budget but not while it holds what it holds
 * now; -ENOMEM when they never fit. */
int port_call_charge_or_later(struct port_call *call, uint64_t bytes);

/* ------------------------------------------------- calls that complete later */

/* Why the core takes a pending call back from its service. */
enum call_cancel_reason {
	CALL_CANCEL_DEADLINE, /* its deadline passed: answered -ETIMEDOUT */
	CALL_CANCEL_DETACH,   /* the client is gone (or the daemon stops): nobody waits */
};

/* The service's side of a pending call. cancel runs at most once, when the
 * core takes the call back (on the daemon's main thread); once it returns
 * the service must never touch the call again, nor call call_complete()
 * for it: it stops whatever would have completed it. A service whose
 * completions come from another thread than the main loop makes cancel
 * wait for them. At a deadline, cancel may answer the call itself (every
 * lane's status and response set, as a completion would) and return true:
 * the core then sends that, not -ETIMEDOUT for the whole call, so that what
 * lanes already did (bytes received or sent) is not lost. Otherwise (and
 * always for a detach) false. */
struct call_later_ops {
	bool (*cancel)(struct port_call *call, enum call_cancel_reason why);
};

/* From a handler of an op flagged SERVICE_OP_LATER: the call is not done
 * when the handler returns. timeout_ns bounds it (0: the daemon's
 * call_timeout_ms); past it the core cancels it and answers -ETIMEDOUT.
 * 0, or -EAGAIN: the client already has max_pending_calls pending (or its
 * user max_pending_calls_per_uid), or -ENOMEM: the call's state while it
 * waits does not fit its client's or its user's memory budget
 * (client_mem_budget, user_mem_budget); the handler then answers now, with
 * that status. */
int call_later(struct port_call *call, uint64_t timeout_ns, const struct call_later_ops *ops);

/* The service is done with a pending call (status and responses set): the
 * core answers the client and frees the call. Any thread. false: too late,
 * the core has taken the call back (its cancel hook runs or ran); the call
 * must not be touched. */
bool call_complete(struct port_call *call);

#endif
