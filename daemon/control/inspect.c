/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/inspect.h"
#include "core/poller.h"
#include "core/port_server.h"
#include "core/service.h"
#include "core/stats.h"

static const char *const phase_names[] = { "idle", "receiving", "in service", "sending" };

struct busy_port {
	const struct session *s;
	uint32_t port;
	struct port_activity a;
};

static int older_first(const void *x, const void *y)
{
	const struct busy_port *a = x, *b = y;
	return a->a.since_ns < b->a.since_ns ? -1 : a->a.since_ns > b->a.since_ns;
}

static json_t *opcode_json(uint16_t opcode)
{
	char hex[8];
	snprintf(hex, sizeof(hex), "0x%04x", opcode);
	return json_string(hex);
}

static const char *op_name(uint16_t opcode)
{
	struct service_lookup l;
	return service_lookup(opcode, &l) ? l.op->name : "unknown";
}

json_t *inspect_ports(struct registry *reg, unsigned limit, const struct control_peer *who)
{
	size_t n = 0, cap = 64;
	struct busy_port *b = malloc(cap * sizeof(*b));
	uint64_t now = stats_now();

	if (!b)
		return NULL;
	/* A racy read of each port's phase: a report, not a lock. */
	registry_for_each(reg, s)
	{
		if (!s->ports_ready || (!who->admin && s->peer.uid != who->uid))
			continue;
		for (uint32_t p = 0; p < s->ports.num_ports; p++) {
			struct port_activity a;
			if (!port_server_activity(&s->ports, p, &a))
				continue;
			if (n == cap) {
				struct busy_port *nb = realloc(b, 2 * cap * sizeof(*b));
				if (!nb)
					break;
				b = nb;
				cap *= 2;
			}
			b[n++] = (struct busy_port){ .s = s, .port = p, .a = a };
		}
	}
	qsort(b, n, sizeof(*b), older_first);
	json_t *list = json_array();
	for (size_t i = 0; list && i < n && i < limit; i++) {
		const struct busy_port *x = &b[i];
		uint64_t age = x->a.since_ns ? stats_elapsed_ns(x->a.since_ns, now) : 0;
		json_array_append_new(list, json_pack("{s:I, s:I, s:s, s:I, s:o, s:s, s:s, s:b, s:I}",
						      "client", (json_int_t)x->s->id,
						      "pid", (json_int_t)x->s->peer.pid,
						      "comm", x->s->peer.comm,
						      "port", (json_int_t)x->port,
						      "opcode", opcode_json(x->a.opcode),
						      "name", op_name(x->a.opcode),
						      "phase", phase_names[x->a.phase & 3],
						      "later", x->a.later,
						      "age_us", (json_int_t)(age / 1000)));
	}
	free(b);
	if (!list)
		return NULL;
	return json_pack("{s:o, s:I, s:b}", "ports", list, "busy", (json_int_t)n, "truncated", n > limit);
}

static json_t *us(uint64_t ns)
{
	return json_real((double)ns / 1000.0);
}

/* A non-admin's latency: per opcode, the counts of that user's attached
 * clients only. The histograms are daemon-wide (one per opcode, not per
 * client: per-client ones would cost the hot path memory and stores), so
 * they, and every figure drawn from them, are an admin's. */
static json_t *own_counts(struct registry *reg, const struct control_peer *who)
{
	json_t *ops = json_array();
	if (!ops)
		return NULL;
	for (uint32_t id = 0; id < service_op_count(); id++) {
		struct stats_op sum = { 0 }, one;
		registry_for_each(reg, s)
		{
			if (!s->ports_ready || s->peer.uid != who->uid)
				continue;
			stats_client_op(&s->ports.stats, id, &one);
			sum.requests += one.requests;
			sum.errors += one.errors;
			sum.bytes_in += one.bytes_in;
			sum.bytes_out += one.bytes_out;
		}
		if (!sum.requests)
			continue;
		const struct service_op *op = service_op_by_id(id);
		json_array_append_new(ops, json_pack("{s:o, s:s, s:I, s:I, s:I, s:I}",
						     "opcode", opcode_json(op->opcode),
						     "name", op->name,
						     "count", (json_int_t)sum.requests,
						     "errors", (json_int_t)sum.errors,
						     "bytes_in", (json_int_t)sum.bytes_in,
						     "bytes_out", (json_int_t)sum.bytes_out));
	}
	return json_pack("{s:o, s:b, s:s}", "ops", ops, "timed", stats_enabled(), "shown", "own");
}

/* Errors by errno, as the services count them (service.h errors): a JSON
 * object per opcode ("0x0306": {"ECONNRESET": 3...}). */
static const char *errno_name(int err)
{
	const char *n = err ? strerrorname_np(err) : NULL;
	return n ? n : "other";
}

static void errno_json(void *arg, uint16_t opcode, int err, uint64_t count)
{
	json_t *by_op = arg;
	char key[8];
	snprintf(key, sizeof(key), "0x%04x", opcode);
	json_t *o = json_object_get(by_op, key);
	if (!o) {
		o = json_object();
		if (!o || json_object_set_new(by_op, key, o) < 0)
			return;
	}
	json_object_set_new(o, errno_name(err), json_integer((json_int_t)count));
}

json_t *inspect_latency(struct registry *reg, const struct control_peer *who)
{
	if (!who->admin)
		return own_counts(reg, who);
	json_t *ops = json_array();
	struct stats_latency *l = malloc(sizeof(*l));

	if (!ops || !l) {
		json_decref(ops);
		free(l);
		return NULL;
	}
	json_t *errnos = json_object();
	if (errnos)
		services_errors(errno_json, errnos);
	for (uint32_t id = 0; id < service_op_count(); id++) {
		stats_op_latency(id, l);
		if (!l->count)
			continue;
		const struct service_op *op = service_op_by_id(id);
		json_t *hist = json_array();
		for (unsigned b = 0; hist && b < STATS_BUCKETS; b++) {
			uint64_t lo, hi;
			if (!l->bucket[b])
				continue;
			stats_bucket_range(b, &lo, &hi);
			json_array_append_new(hist, json_pack("[I, I, I]", (json_int_t)lo, (json_int_t)hi,
							      (json_int_t)l->bucket[b]));
		}
		json_t *entry = json_pack("{s:o, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
						     "opcode", opcode_json(op->opcode),
						     "name", op->name,
						     "count", (json_int_t)l->count,
						     "timed", (json_int_t)l->timed,
						     "errors", (json_int_t)l->errors,
						     "bytes_in", (json_int_t)l->bytes_in,
						     "bytes_out", (json_int_t)l->bytes_out,
						     "mean_us", us(l->timed ? l->sum_ns / l->timed : 0),
						     "p50_us", us(stats_percentile_ns(l, 0.50)),
						     "p90_us", us(stats_percentile_ns(l, 0.90)),
						     "p99_us", us(stats_percentile_ns(l, 0.99)),
						     "p999_us", us(stats_percentile_ns(l, 0.999)),
						     "max_us", us(l->max_ns),
						     "histogram", hist ? hist : json_array());
		char key[8];
		snprintf(key, sizeof(key), "0x%04x", op->opcode);
		json_t *by_errno = errnos ? json_object_get(errnos, key) : NULL;
		if (entry && by_errno)
			json_object_set(entry, "errnos", by_errno);
		json_array_append_new(ops, entry);
	}
	json_decref(errnos);
	free(l);
	return json_pack("{s:o, s:b, s:s}", "ops", ops, "timed", stats_enabled(), "shown", "all");
}

/* gpusysctl transfers: every handle whose bulk calls moved bytes in the
 * last window_ms, with its totals and rate (bytes over the time from its
 * first bulk call to its latest). */
struct transfers_ctx {
	json_t *list;
	const struct session *s;
	uint64_t now;
};

static void transfer_json(void *arg, const struct service_transfer *t)
{
	struct transfers_ctx *x = arg;
	double secs = t->last_ns > t->first_ns ? (double)(t->last_ns - t->first_ns) / 1e9 : 0;
	json_array_append_new(x->list, json_pack("{s:I, s:I, s:s, s:I, s:s, s:s, s:I, s:f, s:f, s:I}",
						 "client", (json_int_t)x->s->id,
						 "pid", (json_int_t)x->s->peer.pid,
						 "comm", x->s->peer.comm,
						 "handle", (json_int_t)t->handle,
						 "path", t->path,
						 "direction", t->write ? "write" : "read",
						 "bytes", (json_int_t)t->bytes,
						 "seconds", secs,
						 "gb_per_s", secs > 0 ? (double)t->bytes / secs / 1e9 : 0.0,
						 "idle_ms", (json_int_t)(x->now > t->last_ns ? (x->now - t->last_ns) / 1000000 : 0)));
}

json_t *inspect_transfers(struct registry *reg, unsigned window_ms, const struct control_peer *who)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	struct transfers_ctx x = { .list = json_array(), .now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec };
	if (!x.list)
		return NULL;
	uint64_t since = x.now > (uint64_t)window_ms * 1000000u ? x.now - (uint64_t)window_ms * 1000000u : 0;
	registry_for_each(reg, s)
	{
		if (!s->ports_ready || (!who->admin && s->peer.uid != who->uid))
			continue;
		x.s = s;
		services_client_transfers(s->ports.svc_state, since, transfer_json, &x);
	}
	return json_pack("{s:o, s:I}", "transfers", x.list, "window_ms", (json_int_t)window_ms);
}

/* The counters of struct poller_counters by name, in their order. */
static const struct {
	const char *name;
	size_t offset;
} poller_counter_fields[] = {
	{ "passes", offsetof(struct poller_counters, passes) },
	{ "empty_passes", offsetof(struct poller_counters, empty_passes) },
	{ "ports_scanned", offsetof(struct poller_counters, ports_scanned) },
	{ "found", offsetof(struct poller_counters, found) },
	{ "served", offsetof(struct poller_counters, served) },
	{ "collisions", offsetof(struct poller_counters, collisions) },
	{ "held", offsetof(struct poller_counters, held) },
	{ "hot_hits", offsetof(struct poller_counters, hot_hits) },
	{ "rung_served", offsetof(struct poller_counters, rung_served) },
	{ "dozes", offsetof(struct poller_counters, dozes) },
	{ "deep_dozes", offsetof(struct poller_counters, deep_dozes) },
	{ "wakeups", offsetof(struct poller_counters, wakeups) },
	{ "parks", offsetof(struct poller_counters, parks) },
	{ "helper_wakes", offsetof(struct poller_counters, helper_wakes) },
	{ "timed_passes", offsetof(struct poller_counters, timed_passes) },
	{ "timed_pass_ns", offsetof(struct poller_counters, timed_pass_ns) },
	{ "timed_serve_ns", offsetof(struct poller_counters, timed_serve_ns) },
	{ "timed_answer_ns", offsetof(struct poller_counters, timed_answer_ns) },
	{ "timed_count_ns", offsetof(struct poller_counters, timed_count_ns) },
	{ "timed_served", offsetof(struct poller_counters, timed_served) },
	{ "timed_found", offsetof(struct poller_counters, timed_found) },
};

/* gpusysctl pollers: the counters as they are; rates and ratios are the
 * reader's (two readings and a clock). */
int inspect_pollers_add(json_t *list, unsigned *index, const struct pollers *ps, const char *gpu_uuid,
			const char *cpus)
{
	for (unsigned i = 0; i < pollers_count(ps); i++) {
		struct poller_counters c;
		if (pollers_counters(ps, i, &c) < 0)
			break;
		json_t *o = json_pack("{s:I, s:s?, s:I, s:I, s:s}", "index", (json_int_t)(*index)++, "gpu", gpu_uuid,
				      "group_index", (json_int_t)i, "slot", (json_int_t)pollers_slot(ps, i), "cpus",
				      cpus);
		for (size_t f = 0; o && f < sizeof(poller_counter_fields) / sizeof(poller_counter_fields[0]); f++) {
			uint64_t v;
			memcpy(&v, (const char *)&c + poller_counter_fields[f].offset, sizeof(v));
			if (json_object_set_new(o, poller_counter_fields[f].name, json_integer((json_int_t)v)) < 0)
				json_decref(o), o = NULL;
		}
		if (!o || json_array_append_new(list, o) < 0)
			return -ENOMEM;
	}
	return 0;
}

json_t *inspect_pollers_reply(json_t *list)
{
	return json_pack("{s:o, s:I, s:b}", "pollers", list, "time_every", (json_int_t)POLLER_TIME_EVERY, "timed",
			 stats_enabled());
}
