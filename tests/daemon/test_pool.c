/* SPDX-License-Identifier: MIT */
/* The worker pool alone: every call runs exactly once on a worker's slot,
 * a blocked worker does not hold up the queue, destroy drains. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/pool.h"
#include "core/port_server.h"

#define FIRST_SLOT 3
#define WORKERS 4

struct counter {
	atomic_uint runs[20000];
	atomic_uint bad_slot;
	atomic_uint total;
	/* Calls with port == BLOCK_PORT wait here until released. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool released;
};
#define BLOCK_PORT 0xffffffffu

static void run(struct port_call *call, unsigned slot, void *arg)
{
	struct counter *c = arg;

	if (slot < FIRST_SLOT || slot >= FIRST_SLOT + WORKERS)
		atomic_fetch_add(&c->bad_slot, 1);
	if (call->port == BLOCK_PORT) {
		pthread_mutex_lock(&c->mu);
		while (!c->released)
			pthread_cond_wait(&c->cv, &c->mu);
		pthread_mutex_unlock(&c->mu);
	} else {
		atomic_fetch_add(&c->runs[call->port], 1);
	}
	atomic_fetch_add(&c->total, 1);
	free(call);
}

static struct port_call *call_for(uint32_t port)
{
	struct port_call *call = calloc(1, sizeof(*call));
	assert_non_null(call);
	call->port = port;
	return call;
}

static struct counter *counter_new(void)
{
	struct counter *c = calloc(1, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	return c;
}

static void test_every_call_once(void **state)
{
	struct counter *c = counter_new();
	struct pool *p;

	(void)state;
	assert_int_equal(pool_create(WORKERS, FIRST_SLOT, "test-w", run, c, &p), 0);
	for (uint32_t i = 0; i < 20000; i++) {
		assert_int_equal(pool_submit(p, call_for(i)), 0);
		if (i % 1000 == 0)
			usleep(100); /* let the queue drain and refill */
	}
	pool_destroy(p); /* drains */
	assert_int_equal(atomic_load(&c->total), 20000);
	for (uint32_t i = 0; i < 20000; i++)
		assert_int_equal(atomic_load(&c->runs[i]), 1);
	assert_int_equal(atomic_load(&c->bad_slot), 0);
	free(c);
}

/* Several blocked calls must not keep the rest waiting: with the whole
 * queue taken by one worker they would. */
static void test_blocked_worker(void **state)
{
	struct counter *c = counter_new();
	struct pool *p;

	(void)state;
	assert_int_equal(pool_create(WORKERS, FIRST_SLOT, "test-w", run, c, &p), 0);
	for (int i = 0; i < WORKERS - 1; i++)
		assert_int_equal(pool_submit(p, call_for(BLOCK_PORT)), 0);
	for (uint32_t i = 0; i < 100; i++)
		assert_int_equal(pool_submit(p, call_for(i)), 0);
	/* One worker is free: everything but the blocked calls completes. */
	for (int t = 0; t < 2000 && atomic_load(&c->total) < 100; t++)
		usleep(1000);
	assert_int_equal(atomic_load(&c->total), 100);
	/* Each worker counts what it ran (status shows it), once run returned. */
	uint64_t ran = 0;
	for (int t = 0; t < 2000 && ran < 100; t++) {
		ran = 0;
		for (unsigned i = 0; i < pool_workers(p); i++)
			ran += pool_ran(p, i);
		if (ran < 100)
			usleep(1000);
	}
	assert_int_equal(ran, 100);
	assert_int_equal(pool_first_slot(p), FIRST_SLOT);

	pthread_mutex_lock(&c->mu);
	c->released = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pool_destroy(p);
	assert_int_equal(atomic_load(&c->total), 100 + WORKERS - 1);
	free(c);
}

static void *submitter(void *arg)
{
	struct pool *p = arg;
	static atomic_uint next;
	for (int i = 0; i < 5000; i++)
		assert_int_equal(pool_submit(p, call_for(atomic_fetch_add(&next, 1))), 0);
	return NULL;
}

/* Pollers submit from several threads at once. */
static void test_concurrent_submit(void **state)
{
	struct counter *c = counter_new();
	struct pool *p;
	pthread_t t[4];

	(void)state;
	assert_int_equal(pool_create(2, FIRST_SLOT, "test-w", run, c, &p), 0);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, submitter, p);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	pool_destroy(p);
	assert_int_equal(atomic_load(&c->total), 20000);
	for (uint32_t i = 0; i < 20000; i++)
		assert_int_equal(atomic_load(&c->runs[i]), 1);
	free(c);
}

static void test_zero_workers(void **state)
{
	struct pool *p;
	(void)state;
	assert_int_equal(pool_create(0, 0, "test-w", run, NULL, &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_call_once),
		cmocka_unit_test(test_blocked_worker),
		cmocka_unit_test(test_concurrent_submit),
		cmocka_unit_test(test_zero_workers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
