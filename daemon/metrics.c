/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gpus.h"
#include "core/service.h"
#include "core/stats.h"
#include "daemon.h"
#include "metrics.h"
#include "util/listen_addr.h"
#include "util/log.h"

/* 1, 2, 5, 10, ... us up to 100 s. */
#define LE_COUNT 25
static uint64_t le_ns(unsigned e)
{
	static const unsigned step[3] = { 1, 2, 5 };
	uint64_t v = 1000u * step[e % 3];
	for (unsigned i = 0; i < e / 3; i++)
		v *= 10;
	return v;
}

static void help(struct evbuffer *b, const char *name, const char *type, const char *text)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* Errors by opcode and errno, where a service counts them (service.h). */
static void errno_metric(void *arg, uint16_t opcode, int err, uint64_t count)
{
	struct evbuffer *b = arg;
	const struct service_op *op = NULL;
	struct service_lookup look;
	if (service_lookup(opcode, &look))
		op = look.op;
	const char *name = err ? strerrorname_np(err) : NULL;
	evbuffer_add_printf(b, "gpusysd_request_errno_total{opcode=\"0x%04x\",name=\"%s\",errno=\"%s\"} %llu\n", opcode,
			    op ? op->name : "?", name ? name : "other", (unsigned long long)count);
}

/* Per opcode: counters and the latency histogram (its buckets cumulative,
 * +Inf equal to _count: the requests timed, a sample on the fast path). */
static void ops_metrics(struct evbuffer *b)
{
	struct stats_latency *l = malloc(sizeof(*l));
	if (!l)
		return;
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{ "gpusysd_requests_total", "counter", "Warp requests answered, by opcode." },
		{ "gpusysd_request_errors_total", "counter", "Warp requests answered with an error, by opcode." },
		{ "gpusysd_request_bytes_total", "counter", "Payload bytes moved, by opcode and direction." },
		{ "gpusysd_request_latency_seconds", "histogram",
		  "From a poller finding a request to its answer (timed requests: a sample on the fast path)." },
	};
	for (unsigned f = 0; f < 4; f++) {
		help(b, fam[f].name, fam[f].type, fam[f].help);
		for (uint32_t id = 0; id < service_op_count(); id++) {
			stats_op_latency(id, l);
			const struct service_op *op = service_op_by_id(id);
			char lab[96];
			snprintf(lab, sizeof(lab), "opcode=\"0x%04x\",name=\"%s\"", op->opcode, op->name);
			if (f == 0)
				evbuffer_add_printf(b, "%s{%s} %llu\n", fam[f].name, lab, (unsigned long long)l->count);
			else if (f == 1)
				evbuffer_add_printf(b, "%s{%s} %llu\n", fam[f].name, lab, (unsigned long long)l->errors);
			else if (f == 2)
				evbuffer_add_printf(b, "%s{%s,direction=\"in\"} %llu\n%s{%s,direction=\"out\"} %llu\n",
						    fam[f].name, lab, (unsigned long long)l->bytes_in, fam[f].name, lab,
						    (unsigned long long)l->bytes_out);
			else {
				/* Fixed 1-2-5 boundaries from 1 us to 100 s, so that a
				 * scrape is small and bucket sets match across scrapes:
				 * a fine bucket counts below the first boundary at or
				 * above its upper edge. */
				uint64_t cum[LE_COUNT] = { 0 };
				for (unsigned k = 0; k < STATS_BUCKETS; k++) {
					uint64_t lo, hi;
					if (!l->bucket[k])
						continue;
					stats_bucket_range(k, &lo, &hi);
					for (unsigned e = 0; e < LE_COUNT; e++)
						if (hi <= le_ns(e))
							cum[e] += l->bucket[k];
				}
				for (unsigned e = 0; e < LE_COUNT; e++)
					evbuffer_add_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", fam[f].name, lab,
							    (double)le_ns(e) / 1e9, (unsigned long long)cum[e]);
				evbuffer_add_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", fam[f].name, lab,
						    (unsigned long long)l->timed);
				evbuffer_add_printf(b, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", fam[f].name, lab,
						    (double)l->sum_ns / 1e9, fam[f].name, lab, (unsigned long long)l->timed);
			}
		}
	}
	free(l);
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
	struct daemon *d = arg;
	struct evbuffer *b = evbuffer_new();
	if (!b) {
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	ops_metrics(b);
	help(b, "gpusysd_request_errno_total", "counter", "Errors answered, by opcode and errno (services that count them).");
	services_errors(errno_metric, b);
	unsigned long long busy = 0;
	registry_for_each(&d->reg, s) busy += session_ports_in_use(s);
	help(b, "gpusysd_clients", "gauge", "Clients attached.");
	evbuffer_add_printf(b, "gpusysd_clients %u\n", d->reg.count);
	help(b, "gpusysd_ports_busy", "gauge", "Ports with a request in flight, all clients.");
	evbuffer_add_printf(b, "gpusysd_ports_busy %llu\n", busy);
	help(b, "gpusysd_requests_served_total", "counter", "Warp requests served, all clients, since start.");
	evbuffer_add_printf(b, "gpusysd_requests_served_total %llu\n", (unsigned long long)daemon_requests_served(d));
	help(b, "gpusysd_gpu_clients", "gauge", "Clients attached per GPU (by UUID); failed GPUs have 0.");
	help(b, "gpusysd_gpu_failed", "gauge", "1 once a GPU has failed (Xid, lost, gpu-fail).");
	for (unsigned i = 0, n = gpus_count(); i < n; i++) {
		const struct gpu *g = gpus_at(i);
		unsigned c = 0;
		registry_for_each(&d->reg, s) c += s->client.gpu == g;
		evbuffer_add_printf(b, "gpusysd_gpu_clients{gpu=\"%s\"} %u\ngpusysd_gpu_failed{gpu=\"%s\"} %d\n",
				    g->uuid_text, c, g->uuid_text, g->failed ? 1 : 0);
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, HTTP_OK, "OK", b);
	evbuffer_free(b);
}

int metrics_start(struct daemon *d, struct evhttp **ret)
{
	*ret = NULL;
	const char *spec = d->cfg.metrics_listen;
	if (!*spec || !strcmp(spec, "none"))
		return 0;
	/* The config parser checked its form (with FILE:LINE); what only
	 * binding tells (a port in use, an address not on this host) is
	 * reported here with the same FILE:LINE, in the errno's own words. */
	char why[256], where[300];
	int fd = listen_addr_open(spec, why, sizeof(why));
	if (fd < 0) {
		log_err("%s: metrics_listen = %s: %s", config_where(&d->cfg, "metrics_listen", where, sizeof(where)),
			spec, why);
		return fd;
	}
	struct evhttp *http = evhttp_new(d->base);
	struct evhttp_bound_socket *bs = http ? evhttp_accept_socket_with_handle(http, fd) : NULL;
	if (!bs) {
		log_err("metrics: out of memory");
		if (http)
			evhttp_free(http);
		close(fd);
		return -ENOMEM;
	}
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_cb(http, "/metrics", on_metrics, d);
	evhttp_set_timeout(http, 10);
	struct sockaddr_storage ss;
	ev_socklen_t len = sizeof(ss);
	char name[128] = "?";
	if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &len) == 0) {
		char a[64] = "?";
		int p = 0;
		if (ss.ss_family == AF_INET) {
			evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, a, sizeof(a));
			p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
			snprintf(name, sizeof(name), "%s:%d", a, p);
		} else if (ss.ss_family == AF_INET6) {
			evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, a, sizeof(a));
			p = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
			snprintf(name, sizeof(name), "[%s]:%d", a, p);
		}
		d->metrics_port = (unsigned)p;
	}
	log_info("metrics: http://%s/metrics (Prometheus text 0.0.4)", name);
	*ret = http;
	return 0;
}

void metrics_stop(struct evhttp *http)
{
	if (http)
		evhttp_free(http);
}
