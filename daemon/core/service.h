/* SPDX-License-Identifier: MIT */
/*
 * The service interface. A service is one module exporting one descriptor:
 * its name, its opcode group (the opcode's high byte), a table of
 * operations, its settings, daemon-wide start/stop hooks and per-client
 * state. The core never names a service: the list is one table,
 * gpusysd_services[] (daemon/services.c), the only place that knows them,
 * handed to the core at start-up (services_use).
 *
 * Lifecycle, all driven by the core:
 *   start(env)            once, at start-up, in table order, after the
 *                         configuration is read (settings are final)
 *   client_init(c, &st)   at attach, in table order, before any request
 *   op->handle(call)      per request (call->state is this service's st)
 *   client_fini(c, st)    when no thread serves the client any more and its
 *                         pending calls are cancelled, in table order (so
 *                         print, listed before files, flushes its output
 *                         before the files close)
 *   stop()                at shutdown, after every client is gone, in
 *                         reverse table order
 */
#ifndef GPUSYSD_CORE_SERVICE_H
#define GPUSYSD_CORE_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/call.h"
#include "core/client.h"
#include "util/config_file.h"

struct event_base;

/* Where a handler runs. */
enum service_run {
	SERVICE_ON_POLLER, /* cheap and never blocks: on the poller that found the request, no hand-off */
	SERVICE_ON_POOL,   /* may block briefly (file I/O): on a worker */
};

enum service_op_flags {
	/* The handler may return without finishing (call_later()); such a
	 * call never takes the poller's stack-only fast path. */
	SERVICE_OP_LATER = 1u << 0,
	/* A SERVICE_ON_POOL op that is tried on the poller first, without a
	 * hand-off: its handler does what it can without blocking (a read the
	 * page cache holds, a path the dentry cache knows) and sets
	 * call->to_pool for the rest (core/call.h), which a worker then runs.
	 * io_uring's inline attempt, for the same reason: a thread hop costs
	 * more than a cached read. Not with SERVICE_OP_LATER. */
	SERVICE_OP_TRY_POLLER = 1u << 1,
};

struct service_op {
	uint16_t opcode;
	uint8_t run;   /* enum service_run */
	uint8_t flags; /* enum service_op_flags */
	const char *name; /* gpusysctl ports and latency */
	void (*handle)(struct port_call *call);
};

/* What start() gets from the daemon. */
struct service_env {
	const struct gpusysd_config *cfg; /* service settings: config_value() */
	struct event_base *base;          /* the main loop (thread-safe: evthread), for calls that complete later */
};

/* A long transfer in progress, as a service reports it (gpusysctl
 * transfers): bytes moved through one handle by its bulk calls so far. */
struct service_transfer {
	int32_t handle;
	const char *path;     /* what the handle names, or "" */
	bool write;           /* the direction of its latest bytes */
	uint64_t bytes;       /* moved so far in that direction */
	uint64_t first_ns;    /* CLOCK_MONOTONIC of its first and latest bulk call */
	uint64_t last_ns;
};

struct service {
	const char *name;
	uint8_t group; /* opcodes group << 8 .. group << 8 | 0xff */
	const struct service_op *ops;
	unsigned nops;
	/* Settings this service reads (NULL-terminated by key, or NULL):
	 * accepted in the configuration file and as GPUSYSD_<KEY> in the
	 * environment, read back with config_value() in start(). */
	const struct config_key *settings;
	int (*start)(const struct service_env *env); /* may be NULL; 0 or -errno (the daemon does not start) */
	void (*stop)(void);                          /* may be NULL */
	int (*client_init)(const struct client *c, void **ret_state); /* may be NULL; 0 or -errno (attach refused) */
	void (*client_fini)(const struct client *c, void *state);     /* may be NULL */
	/* May be NULL: call emit for each of the client's transfers that moved
	 * bytes since since_ns (a report: racy reads are fine). */
	void (*client_transfers)(void *state, uint64_t since_ns,
				 void (*emit)(void *arg, const struct service_transfer *t), void *arg);
	/* May be NULL: the errors its calls answered since start, daemon-wide,
	 * by opcode and errno (lanes and whole calls: one count each); emit is
	 * called for each count that is not 0 (a report: racy reads are fine).
	 * gpusysctl latency and the metrics show them. */
	void (*errors)(void (*emit)(void *arg, uint16_t opcode, int err, uint64_t count), void *arg);
};

/* The table the core serves (before anything else: lookups use it). */
void services_use(const struct service *const *table);
/* Its index of svc, or -1. */
int service_index(const struct service *svc);

/* Every service's errors hook. */
void services_errors(void (*emit)(void *arg, uint16_t opcode, int err, uint64_t count), void *arg);

#define SERVICES_MAX 16u    /* entries of gpusysd_services */
#define SERVICE_OPS_MAX 256u /* operations of all services together (op_id) */

/* An operation found by opcode: the op, its service's index in the table
 * and its op_id (dense, over all services: counters are indexed by it). */
struct service_lookup {
	const struct service_op *op;
	uint32_t service;
	uint32_t op_id;
};

/* Find the operation for opcode. false: no service serves it. */
bool service_lookup(uint16_t opcode, struct service_lookup *ret);

/* Operations known, and the one with a given op_id (NULL past the end). */
uint32_t service_op_count(void);
const struct service_op *service_op_by_id(uint32_t op_id);

/* Register every service's settings with cfg (before it is parsed). */
int services_add_settings(struct gpusysd_config *cfg);

/* Daemon-wide hooks: start each service in table order (on failure, the
 * ones started are stopped again), stop in reverse order. */
int services_start(const struct service_env *env, char *err, size_t errlen);
void services_stop(void);

/* Per client: init every service's state into states[] (on failure the
 * ones made are torn down again), fini in table order. */
int services_client_init(const struct client *c, void *states[SERVICES_MAX]);
void services_client_fini(const struct client *c, void *states[SERVICES_MAX]);
/* Every service's transfers of one client (client_transfers hooks). */
void services_client_transfers(void *const states[SERVICES_MAX], uint64_t since_ns,
			       void (*emit)(void *arg, const struct service_transfer *t), void *arg);

#endif
