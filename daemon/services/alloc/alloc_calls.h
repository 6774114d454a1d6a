/* SPDX-License-Identifier: MIT */
/*
 * The alloc service's requests (include/gpusys/alloc.h) against one
 * client's heap (alloc_heap.h), independent of how the service is
 * registered: service_alloc.c wires these into the daemon.
 */
#ifndef GPUSYSD_ALLOC_CALLS_H
#define GPUSYSD_ALLOC_CALLS_H

#include <stdbool.h>
#include <stdint.h>

struct port_call;
struct alloc_client;

/* Daemon-wide settings (alloc_limit_bytes, alloc_chunk_bytes,
 * alloc_trim_delay_ms). */
void alloc_calls_configure(uint64_t limit, uint64_t chunk, uint64_t trim_delay_ms);

/* Per-client state: made at attach, freed (with every block of the
 * client's heap: it is the client's own memory, which the daemon never
 * touches) when the client has gone. */
int alloc_client_new(struct alloc_client **ret);
void alloc_client_free(struct alloc_client *c);

/* Figures for gpusysctl status: one client's heap (false: it has none
 * yet), and the daemon-wide ones (all_* fields). */
struct gpusys_alloc_stat;
bool alloc_client_figures(struct alloc_client *c, struct gpusys_alloc_stat *st);
/* The heap's shrinks (alloc_heap_shrink) and the bytes they unmapped. */
uint64_t alloc_client_shrinks(struct alloc_client *c, uint64_t *ret_bytes);
void alloc_daemon_figures(struct gpusys_alloc_stat *st);

/* Handlers: cheap, never block (a lock held for microseconds). */
void alloc_call_malloc(struct alloc_client *c, struct port_call *call);
void alloc_call_free(struct alloc_client *c, struct port_call *call);
void alloc_call_realloc(struct alloc_client *c, struct port_call *call);
void alloc_call_stat(struct alloc_client *c, struct port_call *call);
void alloc_call_report(struct alloc_client *c, struct port_call *call);

#endif
