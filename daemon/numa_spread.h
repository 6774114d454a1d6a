/* SPDX-License-Identifier: MIT */
/*
 * Workers near the GPUs they serve: on a host whose GPUs sit on different
 * NUMA nodes, worker i runs on the CPUs of the i-th node (round robin over
 * the GPUs' nodes). With the GPUs on one node (or nodes unknown) nothing is
 * pinned: the scheduler's choice stands. Pollers are placed per GPU
 * (poller_groups.h): each GPU's on its own node.
 */
#ifndef GPUSYSD_NUMA_SPREAD_H
#define GPUSYSD_NUMA_SPREAD_H

struct daemon;

/* Once the GPU table is known (core/gpus.h). Main thread; once. */
void numa_spread(struct daemon *d);

/* The distinct nodes (>= 0) of the table's real GPUs, in table order, into
 * nodes[max]; their number. */
unsigned numa_spread_nodes(int *nodes, unsigned max);

#endif
