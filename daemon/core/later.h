/* SPDX-License-Identifier: MIT */
/* Calls that complete later (core/call.h): the daemon-wide part. */
#ifndef GPUSYSD_CORE_LATER_H
#define GPUSYSD_CORE_LATER_H

#include <stdint.h>

struct event_base;

/* Deadlines run on base (the main loop, evthread-enabled); NULL (tests
 * without a loop): pending calls have no deadline. default_timeout_ns: for
 * calls whose service names none. */
void later_setup(struct event_base *base, uint64_t default_timeout_ns);

#endif
