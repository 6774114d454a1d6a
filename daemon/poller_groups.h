/* SPDX-License-Identifier: MIT */
/*
 * Poller groups: each GPU's channels are served by pollers and workers of
 * its own (issue 34), so one GPU's load never takes another's pollers or
 * workers (a file call blocked on one GPU holds only that GPU's workers),
 * and one group's grace periods, parking and dozing never wait on
 * another's.
 *
 * - The default group (`pollers` threads, `workers` workers) serves the
 *   clients that name no GPU (host programs, emulated clients without a
 *   UUID). It exists from start.
 * - Each GPU of the table (core/gpus.h) gets `pollers_per_gpu` threads (0:
 *   from the CPUs and the GPU count) and `workers_per_gpu` workers (0: as
 *   many as `workers`), made for the emulated GPUs at start and for the
 *   driver's GPUs once the table is complete (the first client that names
 *   a real GPU).
 *
 * Every group has its own wake (core/wake.h): its own poller 0 naps and
 * deep-dozes over its own channels, and a CUDA client's doorbell watch
 * writes its own group's eventfd. An idle GPU costs what the one idle
 * GPU of a one-GPU daemon costs. Every group has its own worker pool
 * (core/pool.h): its pollers defer SERVICE_ON_POOL calls there.
 *
 * Progress slots (abi.h: one word per daemon thread that completes
 * requests, 63 for threads): each group takes its pollers' slots, then its
 * workers' right after them: the default group [0, pollers) and
 * [pollers, pollers + workers), the GPU groups the slots after them in
 * table order. Unique across groups, though a channel only ever sees its
 * own group's: the per-opcode histograms (core/stats.c) are sharded by
 * slot daemon-wide. A GPU whose pollers and workers do not fit has
 * neither: its clients are refused, saying why.
 *
 * Placement: with poller_cpus, each poller gets the next CPU of that list
 * (the default group's first, then each GPU's in table order, wrapping).
 * Without it, a GPU's pollers are pinned to the CPUs of the GPU's NUMA
 * node (within the CPUs gpusysd may use), where the node is known and is
 * not all of them. A GPU's workers go to its node either way (poller_cpus
 * names CPUs for pollers only); the default group's workers, whose
 * clients have no GPU, are left to the scheduler.
 */
#ifndef GPUSYSD_POLLER_GROUPS_H
#define GPUSYSD_POLLER_GROUPS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/gpus.h"

struct daemon;
struct pollers;
struct pool;
struct wake;

struct poller_group {
	struct gpu *gpu;         /* NULL: the default group */
	struct pollers *pollers; /* NULL: this GPU has none (error says why) */
	struct wake *wake;
	struct pool *pool;       /* its workers; NULL once stopped (groups_stop_workers), or with no pollers */
	unsigned first_slot, count; /* the pollers' slots; the workers' follow */
	unsigned workers;
	char cpus[128];          /* where the pollers run: a CPU list, "any" unpinned */
	char worker_cpus[128];   /* where the workers run */
	char error[256];
};

/* How many threads of each kind a group has. */
struct group_size {
	unsigned pollers, workers;
};

struct poller_groups {
	struct poller_group *g[GPUS_MAX + 1]; /* [0] default, [1 + gpu->index] */
	unsigned next_slot;                   /* the first progress slot not taken */
	unsigned next_cpu;                    /* poller_cpus: the next CPU of the list */
};

/* The default group and the emulated GPUs' groups, started. 0 or -errno
 * (said why in the log). Main thread. */
int groups_start(struct daemon *d);

/* A group for each GPU of the table that has none yet (once the driver's
 * GPUs are known). Main thread. */
void groups_add_gpus(struct daemon *d);

/* The group that serves g's clients (NULL: the default group). NULL with
 * why in msg when g has none. */
struct poller_group *groups_of(struct daemon *d, const struct gpu *g, char *msg, size_t msglen);

/* The groups in order (default first), i < GPUS_MAX + 1; NULL past the end
 * or for a GPU without one. */
struct poller_group *groups_at(struct daemon *d, unsigned i);

/* Every group's running pollers and workers together. */
struct group_size groups_total(struct daemon *d);

/* Stop (join) every group's pollers. Calls already deferred stay queued
 * in the pools. Again: nothing. */
void groups_stop(struct daemon *d);

/* After groups_stop: every group's pool runs what is queued (each call
 * drops its session reference) and its workers are joined. A worker
 * blocked on a client's behalf gives up once that client's connection is
 * hung up, so hang up first whoever must not be waited for. Again:
 * nothing. */
void groups_stop_workers(struct daemon *d);

/* Destroy the groups: pollers, pools (where groups_stop_workers did not
 * already), wakes. */
void groups_destroy(struct daemon *d);

/* pollers_per_gpu = 0: each GPU's pollers from the CPUs gpusysd may use
 * and the GPUs: three quarters of the CPUs' share per GPU, at least 1. */
unsigned groups_auto_per_gpu(unsigned ncpu, unsigned ngpus);

/* A GPU's group size when gpus_left GPUs still need groups and slots_left
 * progress slots are free: want when every GPU's fits. Else counts asked
 * for (not auto_*) stay, and automatic ones come from an even share of
 * what is left: with both automatic, workers a quarter of the share and
 * pollers the rest; with one, the share less the other. Never more than
 * want, each at least 1 (a GPU that then does not fit has no pollers and
 * says why, rather than a count being 0). */
struct group_size groups_fit_per_gpu(struct group_size want, bool auto_pollers, bool auto_workers,
				     unsigned gpus_left, unsigned slots_left);

#endif
