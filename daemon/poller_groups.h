/* SPDX-License-Identifier: MIT */
/*
 * Poller groups: each GPU's channels are served by pollers of its own
 * (issue 34), so one GPU's load never takes another's pollers, and one
 * group's grace periods, parking and dozing never wait on another's.
 *
 * - The default group (`pollers` threads) serves the clients that name no
 *   GPU (host programs, emulated clients without a UUID). It exists from
 *   start.
 * - Each GPU of the table (core/gpus.h) gets `pollers_per_gpu` threads (0:
 *   from the CPUs and the GPU count, at most `pollers`), made for the
 *   emulated GPUs at start and for the driver's GPUs once the table is
 *   complete (the first client that names a real GPU).
 *
 * Every group has its own wake (core/wake.h): its own poller 0 naps and
 * deep-dozes over its own channels, and a CUDA client's doorbell watch
 * writes its own group's eventfd. An idle GPU costs what the one idle
 * GPU of a one-GPU daemon costs.
 *
 * Progress slots (abi.h: one word per daemon thread that completes
 * requests, 63 for threads): the default group has [0, pollers), the
 * workers [pollers, pollers + workers), the GPU groups the slots after
 * them in table order. Unique across groups, though a channel only ever
 * sees its own group's: the per-opcode histograms (core/stats.c) are
 * sharded by slot daemon-wide. A GPU whose group does not fit has none:
 * its clients are refused, saying why.
 *
 * Placement: with poller_cpus, each poller gets the next CPU of that list
 * (the default group's first, then each GPU's in table order, wrapping).
 * Without it, a GPU's pollers are pinned to the CPUs of the GPU's NUMA
 * node (within the CPUs gpusysd may use), where the node is known and is
 * not all of them.
 */
#ifndef GPUSYSD_POLLER_GROUPS_H
#define GPUSYSD_POLLER_GROUPS_H

#include <stddef.h>

#include "core/gpus.h"

struct daemon;
struct pollers;
struct wake;

struct poller_group {
	struct gpu *gpu;         /* NULL: the default group */
	struct pollers *pollers; /* NULL: this GPU has none (error says why) */
	struct wake *wake;
	unsigned first_slot, count;
	char cpus[128];          /* where they run: a CPU list, "any" unpinned */
	char error[224];
};

struct poller_groups {
	struct poller_group *g[GPUS_MAX + 1]; /* [0] default, [1 + gpu->index] */
	unsigned next_slot;                   /* the first progress slot not taken */
	unsigned next_cpu;                    /* poller_cpus: the next CPU of the list */
};

/* The default group and the emulated GPUs' groups, started. 0 or -errno
 * (said why in the log). Main thread, after the pool. */
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

/* Every group's pollers together. */
unsigned groups_pollers_total(struct daemon *d);

/* Stop (join) every group's pollers; destroy them and their wakes. */
void groups_stop(struct daemon *d);
void groups_destroy(struct daemon *d);

/* pollers_per_gpu = 0: each GPU's pollers from the CPUs gpusysd may use
 * and the GPUs: three quarters of the CPUs' share per GPU, at least 1. */
unsigned groups_auto_per_gpu(unsigned ncpu, unsigned ngpus);

/* A chosen (automatic) count when gpus_left GPUs still need groups and
 * slots_left progress slots are free: per when all fit, else an even share
 * of what is left, at least 1 (a GPU that then does not fit has no pollers
 * and says why, rather than the count being 0). */
unsigned groups_fit_per_gpu(unsigned per, unsigned gpus_left, unsigned slots_left);

#endif
