/* SPDX-License-Identifier: MIT */
/*
 * Pollers and workers near the GPUs they serve: on a host whose GPUs sit on
 * different NUMA nodes, poller i and worker i run on the CPUs of the i-th
 * node (round robin over the GPUs' nodes), so each node's channels are
 * scanned from a near core by some pollers. With the GPUs on one node (or
 * nodes unknown) nothing is pinned: the scheduler's choice stands.
 *
 * poller_cpus (config) overrides both: poller i runs on the i-th CPU of the
 * list, one CPU each, and numa_spread leaves the pollers and workers alone.
 */
#ifndef GPUSYSD_NUMA_SPREAD_H
#define GPUSYSD_NUMA_SPREAD_H

struct daemon;

/* After the pollers start: pin them as poller_cpus says (nothing for
 * "none"). Main thread. */
void pollers_pin(struct daemon *d);

/* Once the GPU table is known (core/gpus.h). Main thread; once. */
void numa_spread(struct daemon *d);

/* The distinct nodes (>= 0) of the table's real GPUs, in table order, into
 * nodes[max]; their number. */
unsigned numa_spread_nodes(int *nodes, unsigned max);

#endif
