/* SPDX-License-Identifier: MIT */
/* The status object of the control protocol (see docs and gpusysctl). */
#include <unistd.h>

#include "config.h" /* generated: GPUSYS_VERSION */
#include <errno.h>
#include <string.h>

#include "control/control.h"
#include "control/inspect.h"
#include "core/gpus.h"
#include "core/service.h"
#include "core/stats.h"
#include "core/poller.h"
#include "core/pool.h"
#include "daemon.h"
#include "poller_groups.h"
#include "services.h"
#include "util/log.h"

static int64_t seconds_since(const struct timespec *t0)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t0->tv_sec) - (now.tv_nsec < t0->tv_nsec);
}

uint64_t daemon_requests_served(struct daemon *d)
{
	uint64_t total = atomic_load_explicit(&d->retired_requests, memory_order_relaxed);
	registry_for_each(&d->reg, s) total += session_requests(s);
	return total;
}

/* What the client's copy reports said (core/report.h): every client has
 * the member; "last" is null until it copied (and for clients of wire 3,
 * which never report). */
static json_t *copies_json(const struct session *s)
{
	const struct copy_counts *c = &s->copies;
	const struct gpusys_report *r = &c->last;
	json_t *last = c->count ? json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I}",
					    "direction", r->direction ? "dtoh" : "htod",
					    "bytes", (json_int_t)r->bytes,
					    "ns", (json_int_t)r->ns,
					    "gbs", report_gbs(r),
					    "producers_open", (json_int_t)r->producers_open,
					    "producers_end", (json_int_t)r->producers_end,
					    "added", (json_int_t)r->added,
					    "taken_back", (json_int_t)r->taken_back)
				: json_null();
	return json_pack("{s:I, s:I, s:o*}", "count", (json_int_t)c->count, "bytes", (json_int_t)c->bytes, "last",
			 last);
}

static json_t *client_json(const struct session *s)
{
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			 "id", (json_int_t)s->id,
			 "pid", (json_int_t)s->peer.pid,
			 "uid", (json_int_t)s->peer.uid,
			 "gid", (json_int_t)s->peer.gid,
			 "comm", s->peer.comm,
			 "memory", s->chan.ops ? s->chan.ops->name : "none",
			 "cuda_device", (json_int_t)s->client.cuda_device,
			 "ports", (json_int_t)s->ports.num_ports,
			 "ports_in_use", (json_int_t)session_ports_in_use(s),
			 "requests", (json_int_t)session_requests(s),
			 "rejected", (json_int_t)session_rejected(s),
			 "heads_early", (json_int_t)session_heads_early(s),
			 "attached_s", (json_int_t)seconds_since(&s->attached));
	if (o && s->ports_ready) {
		/* What its requests moved and how many failed, over all opcodes
		 * (the per-opcode counters of core/stats.h). */
		uint64_t in = 0, out = 0, errors = 0;
		for (uint32_t id = 0; id < service_op_count(); id++) {
			struct stats_op op;
			stats_client_op(&s->ports.stats, id, &op);
			in += op.bytes_in;
			out += op.bytes_out;
			errors += op.errors;
		}
		json_object_set_new(o, "bytes_in", json_integer((json_int_t)in));
		json_object_set_new(o, "bytes_out", json_integer((json_int_t)out));
		json_object_set_new(o, "errors", json_integer((json_int_t)errors));
	}
	if (o)
	{
		json_object_set_new(o, "gpu", s->client.gpu ? json_string(s->client.gpu->uuid_text) : json_null());
		json_object_set_new(o, "client_cuda_device", json_integer(s->client.client_ordinal));
		json_object_set_new(o, "copies", copies_json(s));
	}
	for (const struct service_status *h = gpusysd_service_status; o && s->ports_ready && h->svc; h++) {
		int i = service_index(h->svc);
		json_t *part = h->client_json && i >= 0 ? h->client_json(s->ports.svc_state[i]) : NULL;
		if (part)
			json_object_set_new(o, h->svc->name, part);
	}
	return o;
}

/* A poller group (poller_groups.h): how many pollers, which progress
 * slots, which CPUs, and each poller's served-request count (every user's
 * requests together: a count, no client named). null: g has none. */
static json_t *group_json(struct daemon *d, const struct gpu *g)
{
	char why[8];
	struct poller_group *grp = groups_of(d, g, why, sizeof(why));
	if (!grp)
		return json_null();
	json_t *served = json_array();
	for (unsigned i = 0; served && i < grp->count; i++) {
		struct poller_counters c;
		if (pollers_counters(grp->pollers, i, &c) == 0)
			json_array_append_new(served, json_integer((json_int_t)c.served));
	}
	return json_pack("{s:I, s:I, s:s, s:o*}", "count", (json_int_t)grp->count, "first_slot",
			 (json_int_t)grp->first_slot, "cpus", grp->cpus, "served", served);
}

/* The same group's workers: how many, their slots and CPUs, and the calls
 * each ran (daemon-wide, as above). null: g has none (or they stopped). */
static json_t *group_workers_json(struct daemon *d, const struct gpu *g)
{
	char why[8];
	struct poller_group *grp = groups_of(d, g, why, sizeof(why));
	if (!grp || !grp->pool)
		return json_null();
	json_t *ran = json_array();
	for (unsigned i = 0; ran && i < grp->workers; i++)
		json_array_append_new(ran, json_integer((json_int_t)pool_ran(grp->pool, i)));
	return json_pack("{s:I, s:I, s:s, s:o*}", "count", (json_int_t)grp->workers, "first_slot",
			 (json_int_t)pool_first_slot(grp->pool), "cpus", grp->worker_cpus, "ran", ran);
}

/* The GPUs the daemon knows (those clients named, and emulated ones), with
 * the clients and ports the asker may see on each. */
static json_t *gpus_json(struct daemon *d, const struct control_peer *who)
{
	json_t *arr = json_array();
	unsigned n = gpus_count();
	for (unsigned i = 0; arr && i < n; i++) {
		const struct gpu *g = gpus_at(i);
		json_int_t clients = 0, ports = 0, busy = 0;
		registry_for_each(&d->reg, s)
		{
			if (s->client.gpu != g || (!who->admin && s->peer.uid != who->uid))
				continue;
			clients++;
			ports += s->ports.num_ports;
			busy += session_ports_in_use(s);
		}
		json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:b, s:b, s:s*, s:I, s:I, s:I}",
						     "index", (json_int_t)g->index, "uuid", g->uuid_text, "name",
						     g->name, "pci_bus_id", g->pci_bus_id, "cuda_ordinal",
						     (json_int_t)g->ordinal, "numa_node", (json_int_t)g->numa_node,
						     "emulated", g->ordinal < 0, "failed", g->failed, "failure",
						     g->failed ? g->failure : NULL, "clients", clients, "ports", ports,
						     "ports_in_use", busy);
		if (o) {
			json_object_set_new(o, "pollers", group_json(d, g));
			json_object_set_new(o, "workers", group_workers_json(d, g));
		}
		json_array_append_new(arr, o);
	}
	return arr;
}

json_t *daemon_status_json(void *arg, const struct control_peer *who)
{
	struct daemon *d = arg;
	json_t *clients = json_array();
	unsigned shown = 0;

	if (!clients)
		return NULL;
	/* Privacy: a client's pid, command and activity are its user's
	 * business (and an admin's). */
	registry_for_each(&d->reg, s)
	{
		if (!who->admin && s->peer.uid != who->uid)
			continue;
		json_array_append_new(clients, client_json(s));
		shown++;
	}
	struct group_size threads = groups_total(d);
	json_t *st = json_pack("{s:s, s:I, s:I, s:s, s:I, s:I, s:o, s:I, s:I, s:s, s:I}",
			 "version", GPUSYS_VERSION,
			 "pid", (json_int_t)getpid(),
			 "uptime_s", (json_int_t)seconds_since(&d->started),
			 "runtime_dir", d->rt.dir,
			 "pollers", (json_int_t)threads.pollers,
			 "workers", (json_int_t)threads.workers,
			 "clients", clients,
			 "requests_served", (json_int_t)daemon_requests_served(d),
			 "clients_attached", (json_int_t)shown,
			 "clients_shown", who->admin ? "all" : "own",
			 "log_lines_suppressed", (json_int_t)log_dropped_total());
	for (const struct service_status *h = gpusysd_service_status; st && h->svc; h++) {
		json_t *part = h->daemon_json ? h->daemon_json() : NULL;
		if (part)
			json_object_set_new(st, h->svc->name, part);
	}
	if (st) {
		json_object_set_new(st, "gpus", gpus_json(d, who));
		/* Clients that name no GPU: the default group. */
		json_object_set_new(st, "default_pollers", group_json(d, NULL));
		json_object_set_new(st, "default_workers", group_workers_json(d, NULL));
	}
	return st;
}

/* Every group's pollers in one list, the default group's first. */
static json_t *pollers_reply(struct daemon *d)
{
	json_t *list = json_array();
	unsigned index = 0;
	for (unsigned i = 0; list && i < GPUS_MAX + 1; i++) {
		struct poller_group *g = groups_at(d, i);
		if (g && g->pollers &&
		    inspect_pollers_add(list, &index, g->pollers, g->gpu ? g->gpu->uuid_text : NULL, g->cpus) < 0) {
			json_decref(list);
			return NULL;
		}
	}
	return list ? inspect_pollers_reply(list) : NULL;
}

int daemon_control(void *arg, const struct control_peer *who, const char *cmd, json_t *req, json_t **reply)
{
	struct daemon *d = arg;
	if (!strcmp(cmd, "status"))
		*reply = daemon_status_json(d, who);
	else if (!strcmp(cmd, "ports")) {
		/* The oldest 100 unless asked for more (at most 10 000); of the
		 * asker's own clients unless an admin asks. */
		json_int_t limit = json_integer_value(json_object_get(req, "limit"));
		*reply = inspect_ports(&d->reg, limit > 0 ? (unsigned)(limit < 10000 ? limit : 10000) : 100, who);
	}
	else if (!strcmp(cmd, "latency"))
		*reply = inspect_latency(&d->reg, who); /* others: their own clients' counts */
	else if (!strcmp(cmd, "pollers")) {
		/* Daemon-wide counts and times of every user's requests: how
		 * busy others are, and when. An operator's tuning aid. */
		if (!who->admin)
			*reply = json_pack("{s:s}", "error",
					   "pollers: counts every user's requests; only root, gpusysd's user and admin_group may");
		else
			*reply = pollers_reply(d);
	}
	else if (!strcmp(cmd, "transfers")) {
		/* {"cmd":"transfers","window_ms":N}: active in the last N ms
		 * (default 2000, at most a day). */
		json_int_t w = json_integer_value(json_object_get(req, "window_ms"));
		*reply = inspect_transfers(&d->reg, w > 0 ? (unsigned)(w < 86400000 ? w : 86400000) : 2000, who);
	}
	else if (!strcmp(cmd, "gpu-fail")) {
		/* {"cmd":"gpu-fail","uuid":"GPU-...","reason":"..."}: end a GPU's
		 * clients as a hardware failure would (draining a GPU, tests).
		 * Admins only: it ends other users' programs. */
		const char *uuid = json_string_value(json_object_get(req, "uuid"));
		const char *reason = json_string_value(json_object_get(req, "reason"));
		struct gpu *g = uuid ? gpus_lookup_text(uuid) : NULL;
		if (!who->admin)
			*reply = json_pack("{s:s}", "error", "gpu-fail: only root, gpusysd's user and admin_group may");
		else if (!g)
			*reply = json_pack("{s:s}", "error", "gpu-fail: no such GPU (give \"uuid\": \"GPU-...\")");
		else {
			char why[128];
			snprintf(why, sizeof(why), "%s (gpu-fail by uid %u)", reason ? reason : "administrator",
				 (unsigned)who->uid);
			d->fail_gpu(d, g, why);
			*reply = json_pack("{s:s, s:b}", "uuid", g->uuid_text, "failed", 1);
		}
	}
	else
		return -ENOENT;
	return 0;
}
