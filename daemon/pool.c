/* SPDX-License-Identifier: MIT */
/*
 * One mutex-protected queue (an array of call pointers) and a condition
 * variable. A worker takes calls in batches so the lock is not taken per
 * call under load. NOTE: the batch is the whole queue only when no other
 * worker is idle; otherwise the worker takes its equal share, because these
 * calls may block (file I/O) and a whole queue behind one blocked worker
 * would wait for nothing while other workers sleep.
 *
 * The queue array and each worker's batch array swap owners instead of
 * copying, so after warm-up submitting allocates nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pool.h"

struct worker {
	struct pool *pool;
	pthread_t thread;
	unsigned slot;
	struct port_call **batch; /* owned by this worker between swaps */
	size_t batch_cap;
};

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct port_call **q;
	size_t len, cap;
	unsigned idle; /* workers waiting on cv */
	bool stop;
	pool_run_fn run;
	void *arg;
	unsigned running; /* workers that reached their loop (start-up barrier) */
	unsigned nworkers;
	struct worker workers[];
};

static void *worker_main(void *p_)
{
	struct worker *w = p_;
	struct pool *p = w->pool;

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
			break; /* stopping and drained */

		size_t take = p->len;
		if (p->idle > 0)
			take = (p->len + p->idle) / (p->idle + 1);
		size_t n;
		if (take == p->len) {
			/* Whole queue: swap arrays. */
			struct port_call **q = p->q;
			size_t cap = p->cap;
			p->q = w->batch;
			p->cap = w->batch_cap;
			w->batch = q;
			w->batch_cap = cap;
			n = p->len;
			p->len = 0;
		} else {
			/* A share from the tail; the batch array is at least
			 * as large as a share, or we grow it. */
			if (w->batch_cap < take) {
				struct port_call **b = realloc(w->batch, take * sizeof(*b));
				if (!b)
					take = w->batch_cap ? w->batch_cap : 0;
				else {
					w->batch = b;
					w->batch_cap = take;
				}
			}
			if (take == 0) {
				/* No memory even for one: run one in place. */
				struct port_call *c = p->q[--p->len];
				pthread_mutex_unlock(&p->mu);
				p->run(c, w->slot, p->arg);
				pthread_mutex_lock(&p->mu);
				continue;
			}
			p->len -= take;
			memcpy(w->batch, p->q + p->len, take * sizeof(*w->batch));
			n = take;
			/* Leftovers: wake another idle worker. */
			if (p->len && p->idle)
				pthread_cond_signal(&p->cv);
		}
		pthread_mutex_unlock(&p->mu);
		for (size_t i = 0; i < n; i++)
			p->run(w->batch[i], w->slot, p->arg);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int pool_create(unsigned nworkers, unsigned first_slot, pool_run_fn run, void *arg, struct pool **ret)
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
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (; started < nworkers; started++) {
		struct worker *w = &p->workers[started];
		w->pool = p;
		w->slot = first_slot + started;
		r = -pthread_create(&w->thread, NULL, worker_main, w);
		if (r < 0) {
			log_err("cannot start worker thread %u: %s", started, strerror(-r));
			break;
		}
	}
	p->nworkers = started;
	pthread_mutex_lock(&p->mu);
	/* Workers count themselves in and broadcast; the ones already idle
	 * also wait on cv, so this loop may wake them: harmless. */
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

int pool_submit(struct pool *p, struct port_call *call)
{
	int r = 0;

	pthread_mutex_lock(&p->mu);
	if (p->stop) {
		r = -ESHUTDOWN;
		goto out;
	}
	if (p->len == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 64;
		struct port_call **q = realloc(p->q, cap * sizeof(*q));
		if (!q) {
			r = -ENOMEM;
			goto out;
		}
		p->q = q;
		p->cap = cap;
	}
	p->q[p->len++] = call;
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
	for (unsigned i = 0; i < p->nworkers; i++) {
		pthread_join(p->workers[i].thread, NULL);
		free(p->workers[i].batch);
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p->q);
	free(p);
}
