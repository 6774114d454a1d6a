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
	unsigned count;      /* threads; poller k uses progress slot k */
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

/* Pin poller i to the CPUs of set (the GPUs' NUMA nodes, numa_spread.c).
 * 0 or -errno. */
int pollers_set_affinity(struct pollers *ps, unsigned i, const cpu_set_t *set);
unsigned pollers_count(const struct pollers *ps);

/* Main thread: make tables[0..n) the channels to serve. When it returns no
 * poller touches a table left out of the list any more. Allocates nothing;
 * 0, or -E2BIG for more than capacity tables. */
int pollers_publish(struct pollers *ps, struct port_table *const *tables, uint32_t n);

#endif
