/* SPDX-License-Identifier: MIT */
/* The daemon as a whole: what the main thread owns, and its lifecycle. */
#ifndef GPUSYSD_DAEMON_H
#define GPUSYSD_DAEMON_H

#include <stdatomic.h>
#include <time.h>

#include <jansson.h>

#include "util/config_file.h"
#include "core/registry.h"
#include "core/runtime.h"

struct event;
struct event_base;
struct control;
struct control_peer;
struct listener;
struct poller_groups;

struct gpu;

struct daemon {
	struct gpusysd_config cfg; /* pollers resolved (never 0) */
	struct gpusysd_config cfg_read; /* as the file last read said (reload.c) */
	const char *config_path;   /* --config, or NULL: the default file */
	struct runtime rt;
	struct event_base *base;
	struct event *ev_sigterm, *ev_sigint, *ev_sighup, *ev_status;
	struct listener *listener;
	struct control *control;
	struct evhttp *metrics;    /* NULL unless metrics_listen is set */
	unsigned metrics_port;     /* the port it listens on (reload.c: not "in use" by another) */
	/* A GPU failed (gpu_health.c, or an administrator's "gpu-fail" in
	 * status.c): mark it, send each of its clients a goodbye saying why and
	 * end it; new clients of it are refused, other GPUs' clients are not
	 * touched. Main thread. A hook, so that those modules need not call
	 * back into daemon.c, which uses them. */
	void (*fail_gpu)(struct daemon *d, struct gpu *g, const char *why);
	struct poller_groups *groups; /* pollers and workers: one group per GPU and a default one (poller_groups.h) */
	struct registry reg;
	struct timespec started; /* CLOCK_MONOTONIC */
	atomic_uint_fast64_t retired_requests; /* of sessions already freed */
	bool handover; /* stopping on SIGTERM with restart_grace_ms: hand clients over (handover.c) */
};

/* Serve until SIGTERM/SIGINT. Returns the process exit status. */
int daemon_run(const struct gpusysd_config *cfg, const struct gpusysd_config *as_read, const char *config_path,
	       const char *runtime_dir);

/* The control "status" reply for who: an admin sees every client, anyone
 * else only the clients of their own uid. */
json_t *daemon_status_json(void *daemon, const struct control_peer *who);

/* Every control command (control.h's control_cmd_fn): status, ports,
 * latency. */
int daemon_control(void *daemon, const struct control_peer *who, const char *cmd, json_t *req, json_t **reply);

/* Requests served over the daemon's life, attached clients included. */
uint64_t daemon_requests_served(struct daemon *d);

#endif
