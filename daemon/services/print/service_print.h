/* SPDX-License-Identifier: MIT */
/* The print service (daemon/services/print/service_print.c). */
#ifndef GPUSYSD_SERVICE_PRINT_H
#define GPUSYSD_SERVICE_PRINT_H

#include <stdint.h>

#include "core/service.h"

extern const struct service service_print; /* PRINT, PRINT_FLUSH (0x01xx) */

/* The client output buffer's bound: beyond it, lanes get -EAGAIN (and the
 * device side retries). The setting print_buffer_bytes; tests shrink it. */
void print_set_buffer_limit(uint64_t bytes);

/* What a client's print state (its per-client state) has seen. */
struct print_stats {
	uint64_t lines, bytes, written, refused, again, write_errors;
};
void print_client_stats(const void *state, struct print_stats *ret);

#endif
