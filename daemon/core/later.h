/* SPDX-License-Identifier: MIT */
/* Calls that complete later (core/call.h): the daemon-wide part, and what
 * the port module (port_server.c) and the daemon ask of them. */
#ifndef GPUSYSD_CORE_LATER_H
#define GPUSYSD_CORE_LATER_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct pending;
struct port_table;

/* Deadlines run on base (the main loop, evthread-enabled); NULL (tests
 * without a loop): pending calls have no deadline. default_timeout_ns: for
 * calls whose service names none. */
void later_setup(struct event_base *base, uint64_t default_timeout_ns);

/* After a handler returned: true when the call stays pending (the port
 * stays claimed), false when it must be answered now. */
bool later_after_handler(struct port_table *t, struct pending *pd);

/* Cancel every pending call of t (the client is gone): each service's
 * cancel hook runs, the calls are answered -ECANCELED and freed. Main
 * thread. Returns how many were cancelled. */
unsigned later_cancel_table(struct port_table *t);

#endif
