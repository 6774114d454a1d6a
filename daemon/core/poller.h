/* SPDX-License-Identifier: MIT */
/*
 * Poller threads: find ports whose client word moved and step them with the
 * port server. They read the list of channels from an immutable snapshot
 * that the main thread replaces on attach/detach; pollers_publish() returns
 * only when no poller can still be looking at the old one.
 */
#ifndef GPUSYSD_POLLER_H
#define GPUSYSD_POLLER_H

#include <sched.h>
#include <stdint.h>

struct port_call;
struct port_table;
struct pollers;

struct poller_params {
	unsigned count;      /* threads; poller k uses progress slot first_slot + k */
	unsigned first_slot; /* unique across the daemon's threads: core/stats.c shards by slot */
	int gpu_index;       /* the GPU (core/gpus.h index) whose channels they serve, -1: none (thread names) */
	unsigned spin_us;    /* spin this long after the last work seen */
	unsigned sleep_us;   /* then poller 0 sleeps this long between doorbell checks */
	unsigned park_us;    /* pollers 1.. park on a condition variable after this idle time */
	unsigned rescan_ms;  /* dozing poller 0 still scans every port this often */
	/* Deep doze (poller.c): after deep_after_us of timed naps poller 0
	 * sleeps until a client wakes it through wake, scanning everything
	 * every safety_ms. wake NULL: timed naps only. */
	unsigned deep_after_us;
	unsigned safety_ms;
	struct wake *wake;
	/* The wake means of a channel (NULL: it has none). */
	struct wake_chan *(*chan_wake)(struct port_table *t);
	/* A call the port server wants on the pool (PORT_STEP_DEFER). It owns
	 * the call from here and must finish it. */
	void (*defer)(struct port_call *call, unsigned slot, void *arg);
	void *defer_arg;
};

/* capacity: the most channels a snapshot will ever hold (max_clients). */
int pollers_create(const struct poller_params *prm, uint32_t capacity, struct pollers **ret);
int pollers_start(struct pollers *ps);
/* Stop and join the threads (a deep-dozing poller 0 is woken). */
void pollers_stop(struct pollers *ps);
void pollers_destroy(struct pollers *ps);

/* Pin poller i to the CPUs of set (poller_cpus, or its GPU's NUMA node:
 * poller_groups.c). 0 or -errno. */
int pollers_set_affinity(struct pollers *ps, unsigned i, const cpu_set_t *set);
unsigned pollers_count(const struct pollers *ps);
/* Poller i's progress slot. */
unsigned pollers_slot(const struct pollers *ps, unsigned i);

/* What one poller did since start (gpusysctl pollers, gpusys-bench rtt
 * --breakdown). Counts are exact and always kept: each poller tallies a
 * pass in registers and stores the totals once per pass, relaxed, on a
 * cache line of its own. The times are sampled: one pass in
 * POLLER_TIME_EVERY, chosen at random, is timed (two TSC reads, and two more
 * around each port it serves), while per-opcode counting is on (config key
 * "stats"); off, nothing is timed and the *_ns fields stay where they were.
 * At random rather than every 16th pass, so that the sample cannot lock
 * onto a rhythm of busy and empty passes. NOTE: a timed pass pays its own
 * TSC reads (up to five per request it serves), so the times are upper
 * bounds: scaled up, the sampled passes come to more than the pollers'
 * wall time (measured, see bench/RESULTS.md: "The daemon's side of the hot
 * path"). Counts are exact. */
#define POLLER_TIME_EVERY 16u
struct poller_counters {
	uint64_t passes;        /* scans of the poller's share (and of parked pollers' shares) */
	uint64_t empty_passes;  /* passes that made no progress */
	uint64_t ports_scanned; /* client words read by passes */
	uint64_t found;         /* ports whose client word had moved past seen[] */
	uint64_t served;        /* steps that made progress: one per packet, one per single-packet request */
	uint64_t collisions;    /* found, but another poller held the port or served it first */
	uint64_t held;          /* found, but a call (pool, pending later) holds the port */
	uint64_t hot_hits;      /* of served: by the re-check of recently busy ports */
	uint64_t rung_served;   /* poller 0, of served: the port a ring named, on waking (serve_rung);
				 * each waking also counts a pass of the ports it looked at */
	uint64_t dozes;         /* poller 0: times it went to naps */
	uint64_t deep_dozes;    /* poller 0: sleeps until woken */
	uint64_t wakeups;       /* poller 0: deep dozes ended by a client's wake */
	uint64_t parks;         /* pollers 1..: times parked */
	uint64_t helper_wakes;  /* poller 0: broadcasts that woke parked pollers */
	/* The sample: passes timed, their total time and, within it, the time
	 * spent on found ports (claim, copy-out, service, answer); the rest of
	 * a timed pass is scanning. */
	uint64_t timed_passes;
	uint64_t timed_pass_ns;
	uint64_t timed_serve_ns;
	uint64_t timed_answer_ns; /* of serve: writing fast-path answers into the channel */
	uint64_t timed_count_ns;  /* of serve: counting fast-path requests (stats, completed) */
	uint64_t timed_served;  /* steps with progress in the timed passes */
	uint64_t timed_found;   /* found ports in the timed passes */
};

/* Poller i's counters (racy relaxed reads: each field is exact, fields
 * may be a pass apart). -ERANGE for no such poller. */
int pollers_counters(const struct pollers *ps, unsigned i, struct poller_counters *ret);

/* Main thread: make tables[0..n) the channels to serve. When it returns no
 * poller touches a table left out of the list any more. Allocates nothing;
 * 0, or -E2BIG for more than capacity tables. */
int pollers_publish(struct pollers *ps, struct port_table *const *tables, uint32_t n);

#endif
