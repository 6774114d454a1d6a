/* SPDX-License-Identifier: MIT */
/*
 * One mutex-protected FIFO (a ring of call pointers) and a condition
 * variable; submit signals only when a worker is asleep.
 *
 * NOTE: a worker takes one call at a time, not the whole queue. These calls
 * are the ones that may block (file I/O on a slow disk, a pipe nobody
 * reads): in a batch, every call behind a blocked one would wait for it
 * while other workers sleep (tests/daemon/test_pool.c shows it). The lock
 * costs tens of nanoseconds per call, nothing next to the hand-off itself
 * and the system call that follows.
 *
 * The ring grows by doubling and never shrinks, so after warm-up submitting
 * allocates nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "core/pool.h"

struct worker {
	struct pool *pool;
	pthread_t thread;
	unsigned slot, index;
	atomic_uint_fast64_t ran; /* written by this worker only; read by status */
};

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct port_call **ring;
	size_t cap, head, len; /* cap: 0 or a power of two */
	unsigned idle;         /* workers waiting on cv */
	unsigned running;      /* workers that reached their loop (start-up barrier) */
	bool stop;
	pool_run_fn run;
	void *arg;
	char name[16]; /* thread name prefix: NAME<index>, cut to 15 characters */
	unsigned nworkers;
	struct worker workers[];
};

static void *worker_main(void *w_)
{
	struct worker *w = w_;
	struct pool *p = w->pool;
	char name[32];

	snprintf(name, sizeof(name), "%s%u", p->name, w->index);
	name[15] = 0; /* the most a thread name holds */
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&p->mu);
	/* Start-up barrier: pool_create returns once every worker is here. */
	p->running++;
	pthread_cond_broadcast(&p->cv);
	for (;;) {
		while (p->len == 0 && !p->stop) {
			p->idle++;
			pthread_cond_wait(&p->cv, &p->mu);
			p->idle--;
		}
		if (p->len == 0)
			break; /* stopping, and drained */
		struct port_call *call = p->ring[p->head];
		p->head = (p->head + 1) & (p->cap - 1);
		p->len--;
		pthread_mutex_unlock(&p->mu);
		p->run(call, w->slot, p->arg);
		atomic_store_explicit(&w->ran, atomic_load_explicit(&w->ran, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pool_create(unsigned nworkers, unsigned first_slot, const char *name, pool_run_fn run, void *arg,
		struct pool **ret)
{
	struct pool *p;
	unsigned started = 0;
	int r = 0;

	if (nworkers == 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p) + nworkers * sizeof(p->workers[0]));
	if (!p)
		return -ENOMEM;
	p->run = run;
	p->arg = arg;
	snprintf(p->name, sizeof(p->name), "%s", name);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (; started < nworkers; started++) {
		struct worker *w = &p->workers[started];
		w->pool = p;
		w->slot = first_slot + started;
		w->index = started;
		atomic_init(&w->ran, 0);
		r = -pthread_create(&w->thread, NULL, worker_main, w);
		if (r < 0) {
			log_err("cannot start worker thread %u: %s", started, strerror(-r));
			break;
		}
	}
	p->nworkers = started;
	pthread_mutex_lock(&p->mu);
	/* Workers count themselves in and broadcast; waking idle ones on the
	 * way is harmless. */
	while (p->running < started)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
	if (r < 0) {
		pool_destroy(p);
		return r;
	}
	*ret = p;
	return 0;
}

/* Lock held. Double the ring, keeping FIFO order. */
static int grow(struct pool *p)
{
	size_t cap = p->cap ? p->cap * 2 : 64;
	struct port_call **ring = malloc(cap * sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	for (size_t i = 0; i < p->len; i++)
		ring[i] = p->ring[(p->head + i) & (p->cap - 1)];
	free(p->ring);
	p->ring = ring;
	p->cap = cap;
	p->head = 0;
	return 0;
}

int pool_submit(struct pool *p, struct port_call *call)
{
	int r = 0;

	pthread_mutex_lock(&p->mu);
	if (p->stop) {
		r = -ESHUTDOWN;
		goto out;
	}
	if (p->len == p->cap && (r = grow(p)) < 0)
		goto out;
	p->ring[(p->head + p->len) & (p->cap - 1)] = call;
	p->len++;
	/* Only a sleeping worker needs a signal; a busy one comes back for
	 * the queue by itself. */
	if (p->idle)
		pthread_cond_signal(&p->cv);
out:
	pthread_mutex_unlock(&p->mu);
	return r;
}

unsigned pool_queued(struct pool *p)
{
	pthread_mutex_lock(&p->mu);
	unsigned n = (unsigned)p->len;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->nworkers; i++)
		pthread_join(p->workers[i].thread, NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->ring);
	free(p);
}

int pool_set_affinity(struct pool *p, unsigned i, const cpu_set_t *set)
{
	if (i >= p->nworkers)
		return -ERANGE;
	return -pthread_setaffinity_np(p->workers[i].thread, sizeof(*set), set);
}

unsigned pool_workers(const struct pool *p)
{
	return p->nworkers;
}

unsigned pool_first_slot(const struct pool *p)
{
	return p->workers[0].slot;
}

uint64_t pool_ran(struct pool *p, unsigned i)
{
	return i < p->nworkers ? atomic_load_explicit(&p->workers[i].ran, memory_order_relaxed) : 0;
}
