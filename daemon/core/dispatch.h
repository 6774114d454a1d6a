/* SPDX-License-Identifier: MIT */
/* Glue between pollers, the worker pool and the services: what "defer a
 * call" and "run a deferred call" mean. */
#ifndef GPUSYSD_DISPATCH_H
#define GPUSYSD_DISPATCH_H

struct port_call;

/* Poller side (struct poller_params.defer): arg is the struct pool. */
void dispatch_defer(struct port_call *call, unsigned slot, void *arg);

/* Worker side (pool_run_fn): run the service, finish the call, drop the
 * session reference dispatch_defer took. */
void dispatch_run(struct port_call *call, unsigned slot, void *arg);

#endif
