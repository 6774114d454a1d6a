/* SPDX-License-Identifier: MIT */
/*
 * Prometheus metrics over HTTP (text exposition format 0.0.4), at
 * http://metrics_listen/metrics, served by libevent's evhttp on the main
 * loop; off unless metrics_listen is set. Labels are bounded: opcode and
 * name (from the service table), GPU UUID (the host's GPUs), direction.
 * Never a pid or a client id.
 */
#ifndef GPUSYSD_METRICS_H
#define GPUSYSD_METRICS_H

struct daemon;
struct evhttp;

/* Listen on d->cfg.metrics_listen ("HOST:PORT"; "none": nothing). 0, or
 * -errno having logged "FILE:LINE: metrics_listen = VALUE: why". */
int metrics_start(struct daemon *d, struct evhttp **ret);
void metrics_stop(struct evhttp *http);

#endif
