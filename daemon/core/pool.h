/* SPDX-License-Identifier: MIT */
/*
 * Worker threads for requests whose service may block (SERVICE_ON_POOL).
 * Pollers submit a call with its port claim still held; a worker runs it and
 * finishes it. Generic over what "run" means so it can be tested alone.
 */
#ifndef GPUSYSD_POOL_H
#define GPUSYSD_POOL_H

#include <sched.h>
#include <stdint.h>

struct port_call;
struct pool;

/* Runs one call on a worker; slot is the worker's progress slot. */
typedef void (*pool_run_fn)(struct port_call *call, unsigned slot, void *arg);

/* Start nworkers threads and return once all of them are running. Worker j
 * uses progress slot first_slot + j and is named NAME<j> (top -H,
 * /proc/PID/task/N/comm), cut to the 15 characters a thread name has.
 * 0 or -errno. */
int pool_create(unsigned nworkers, unsigned first_slot, const char *name, pool_run_fn run, void *arg,
		struct pool **ret);

/* Queue a call. -ENOMEM (queue could not grow) or -ESHUTDOWN: the caller
 * still owns the call and must run it itself. */
int pool_submit(struct pool *p, struct port_call *call);

/* Run every call already queued, then stop and join the workers. */
void pool_destroy(struct pool *p);

/* Pin worker i to the CPUs of set (a GPU's NUMA node, poller_groups.c).
 * 0 or -errno. */
int pool_set_affinity(struct pool *p, unsigned i, const cpu_set_t *set);
unsigned pool_workers(const struct pool *p);
unsigned pool_first_slot(const struct pool *p);

/* Calls worker i has run (relaxed: for status). */
uint64_t pool_ran(struct pool *p, unsigned i);

/* Calls queued and not yet taken by a worker (racy; for status). */
unsigned pool_queued(struct pool *p);

#endif
