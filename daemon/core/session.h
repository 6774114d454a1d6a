/* SPDX-License-Identifier: MIT */
/*
 * One attached client: who it is, its channel, the descriptors it passed,
 * and the port table the pollers serve.
 *
 * Lifetime: the main thread holds one reference from attach until detach;
 * every call handed to the worker pool holds one more. Pollers hold none:
 * they only see sessions through a snapshot, and detach waits out a grace
 * period (pollers_publish) before dropping the main reference. The last
 * reference, on whichever thread, tears the session down.
 */
#ifndef GPUSYSD_SESSION_H
#define GPUSYSD_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "core/channel.h"
#include "core/client.h"
#include "core/port_server.h"
#include "core/report.h"
#include "core/wake.h"

struct event;
struct event_base;

struct peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char comm[32]; /* printable, NUL-terminated */
};

struct session {
	atomic_uint refs;
	uint32_t id;
	struct peer peer;
	struct timespec attached; /* CLOCK_MONOTONIC */
	/* What services see of the client. Its descriptors are the
	 * session's: the attach connection (client.sock, open until the
	 * session is freed: workers poll it to notice the client die) and
	 * the stdout, stderr and working directory it passed (or -1). */
	struct client client;

	struct event *ev;   /* the connection's watch (EOF, reports); main thread */
	void *daemon;       /* for that watch's callback */
	/* The version the session speaks, the hello's (common/wire.h): from
	 * GPUSYS_WIRE_REPORTS on, the client may send reports; the bytes of
	 * one not yet whole, and what its copy reports said. Main thread only
	 * (status is read there too). */
	uint32_t wire_version;
	struct report_reader reports;
	struct copy_counts copies;

	struct channel chan;
	uint64_t chan_charged; /* chan.bytes, charged to the user's ACCOUNT_CHANNEL */
	struct port_table ports;
	bool ports_ready;
	/* The client's handle table (core/handles.h), opened at attach with the
	 * channel's handle generations, before its services take it; released
	 * after they let go. */
	struct handle_table *handles;

	/* Waking a dozing poller 0 (wake.h): the client's pipe, the GPU watch
	 * of its doorbell. wake_wfd is the client's end until the welcome
	 * carries it (then -1). */
	struct wake *wake;
	struct wake_chan wakec;
	int wake_wfd;

	/* The pollers that serve this channel: its GPU's group (docs/GPUS.md),
	 * or the group of clients that name no GPU. Set before registry_add. */
	struct pollers *pollers;
	bool cuda; /* a CUDA client: its teardown makes CUDA calls (wake_gpu_hold) */

	/* Where this session's request count goes when it is freed, so the
	 * daemon's total keeps the requests of detached clients. */
	atomic_uint_fast64_t *retired_requests;

	struct session *prev, *next; /* registry list; main thread */
};

struct session_params {
	uint32_t id;
	const struct peer *peer;
	const struct channel_ops *ops;
	uint32_t num_ports;
	uint64_t bulk_bytes;
	uint64_t mem_budget;
	int sock;           /* the attach connection; owned by the session on success */
	int fds[3];         /* stdout, stderr, cwd, or -1; owned by the session on success */
	unsigned max_pending_calls;
	struct wake *wake;  /* its poller group's; NULL: no wake pipe (in-process tests) */
	struct pollers *pollers; /* its poller group's */
	int32_t cuda_device; /* the daemon's ordinal of the client's GPU, or -1: no CUDA client */
	int32_t client_ordinal; /* the hello's cuda_device: the client's own numbering */
	struct gpu *gpu;     /* the GPU it named (core/gpus.h), or NULL */
	atomic_uint_fast64_t *retired_requests;
	/* A channel re-offered after a restart and mapped by
	 * channel_memfd_adopt (docs/RESTART.md), or NULL: make a new one.
	 * The session takes it over, on failure too. */
	struct channel *adopted;
	/* Where a refusal the client should read is written (user_channel_bytes
	 * exhausted), or NULL. Untouched on other failures. */
	char *why;
	size_t why_len;
};

/* Create the channel and the port table (and with it every service's state
 * for this client). On success the session holds one reference (the main
 * thread's) and owns sock and fds. */
int session_create(const struct session_params *prm, struct session **ret);

/* The wake means of the session that owns a port table (the pollers'
 * view of it), or NULL when it has none. */
struct wake_chan *session_wake_of_table(struct port_table *t);

void session_ref(struct session *s);
/* The last reference frees the session: on the main thread, where a
 * reaper is set (session_reaper_start), whichever thread drops it, so
 * that teardown (flushing output, closing files) never runs on a worker's
 * or a completion's path. */
void session_unref(struct session *s);

/* Hand last references dropped off the main thread to base's loop. Call on
 * the main thread. 0 or -ENOMEM. */
int session_reaper_start(struct event_base *base);
/* Free what the reaper holds, now, and stop handing over (at shutdown,
 * when no other thread is left). */
void session_reaper_stop(void);

/* Ports whose claim is held or whose client moved past what we have seen
 * (a racy read, for status). */
uint32_t session_ports_in_use(const struct session *s);

static inline uint64_t session_requests(const struct session *s)
{
	return port_table_requests(&s->ports);
}

static inline uint64_t session_rejected(const struct session *s)
{
	return atomic_load_explicit(&s->ports.rejected, memory_order_relaxed);
}

/* Requests whose word came before their heads, looked at again (abi.h). */
static inline uint64_t session_heads_early(const struct session *s)
{
	return atomic_load_explicit(&s->ports.heads_early, memory_order_relaxed);
}

/* Copy a client-supplied name into a peer's comm: printable ASCII only,
 * stopping at the first NUL, at most len bytes read. */
void peer_set_comm(struct peer *p, const char *name, size_t len);

/* Fill comm from /proc/PID/comm; 0 or -errno. */
int peer_comm_from_proc(struct peer *p);

#endif
