/* SPDX-License-Identifier: MIT */
/* The print service (daemon/service_print.c): its table, its teardown, and a
 * hook for tests that serve a channel without a session. */
#ifndef GPUSYSD_SERVICE_PRINT_H
#define GPUSYSD_SERVICE_PRINT_H

#include <stdint.h>

#include "core/port_server.h"

extern const struct service *const service_print_table[]; /* PRINT, PRINT_FLUSH */

/* Flush what t's client printed (bounded wait) and free the print state.
 * From service_client_fini, when no thread serves t any more. */
void print_client_fini(struct port_table *t);

/* Give t (a table with no session as owner) its output descriptors: dup'ed,
 * the caller keeps its own. -1: none (that stream's lines get -EBADF).
 * 0 or -errno; -EEXIST if t already has a print state. */
int print_client_set_fds(struct port_table *t, int stdout_fd, int stderr_fd);

/* The client output buffer's bound: beyond it, lanes get -EAGAIN (and the
 * device side retries). Tests shrink it. */
void print_set_buffer_limit(uint64_t bytes);

/* What t's print state has seen (for status and tests). */
struct print_stats {
	uint64_t lines, bytes, written, refused, again, write_errors;
};
void print_client_stats(struct port_table *t, struct print_stats *ret);

#endif
