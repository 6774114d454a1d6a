/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/port_server.h"
#include "core/service.h"
#include "core/stats.h"
#include "common/clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

struct stats_hist {
	uint64_t count;                      /* every request */
	uint64_t timed, max_ns, sum_ns;      /* the ones timed (all, or a sample of the fast path) */
	uint64_t errors, bytes_in, bytes_out; /* daemon-wide, detached clients' too */
	uint64_t bucket[STATS_BUCKETS];
};

struct stats_global {
	atomic_bool enabled;
	pthread_once_t once;
	double ns_per_tick;
	struct stats_hist *_Atomic hist[GPUSYS_PROGRESS_SLOTS]; /* each: service_op_count() entries */
	pthread_mutex_t later_mu; /* PORT_LATER_SLOT's histogram: several tables write it */
};

static struct stats_global g = { .enabled = true, .once = PTHREAD_ONCE_INIT, .later_mu = PTHREAD_MUTEX_INITIALIZER };

void stats_set_enabled(bool on)
{
	atomic_store_explicit(&g.enabled, on, memory_order_relaxed);
}

bool stats_enabled(void)
{
	return atomic_load_explicit(&g.enabled, memory_order_relaxed);
}

bool stats_sample(void)
{
	static __thread unsigned tick;
	return stats_enabled() && (++tick & (STATS_SAMPLE - 1u)) == 0;
}

#ifdef HAVE_TSC
/* The TSC's rate against the monotonic clock, over 5 ms, once. */
static void calibrate(void)
{
	uint64_t n0 = now_ns(), t0 = __rdtsc();
	nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
	uint64_t n1 = now_ns(), t1 = __rdtsc();
	g.ns_per_tick = t1 > t0 ? (double)(n1 - n0) / (double)(t1 - t0) : 1.0;
}
#endif

uint64_t stats_now(void)
{
#ifdef HAVE_TSC
	return __rdtsc();
#else
	return now_ns();
#endif
}

uint64_t stats_elapsed_ns(uint64_t from, uint64_t to)
{
	if (to <= from)
		return 0;
#ifdef HAVE_TSC
	pthread_once(&g.once, calibrate);
	return (uint64_t)((double)(to - from) * g.ns_per_tick);
#else
	return to - from;
#endif
}

unsigned stats_bucket_of(uint64_t ns)
{
	if (ns < STATS_SUB)
		return (unsigned)ns;
	unsigned e = 63u - (unsigned)__builtin_clzll(ns); /* >= STATS_SUB_BITS */
	if (e > STATS_MAX_EXP)
		return STATS_BUCKETS - 1u;
	unsigned sub = (unsigned)(ns >> (e - STATS_SUB_BITS)) & (STATS_SUB - 1u);
	return (e - STATS_SUB_BITS + 1u) * STATS_SUB + sub;
}

void stats_bucket_range(unsigned b, uint64_t *lo, uint64_t *hi)
{
	if (b < STATS_SUB) {
		*lo = b;
		*hi = b + 1u;
		return;
	}
	unsigned e = b / STATS_SUB - 1u + STATS_SUB_BITS, sub = b % STATS_SUB;
	uint64_t step = UINT64_C(1) << (e - STATS_SUB_BITS);
	*lo = (UINT64_C(1) << e) + sub * step;
	*hi = *lo + step;
}

/* Each shard is made by its own writer on its first use, then only read. */
static void *shard_get(void *_Atomic *slot, size_t bytes)
{
	void *p = atomic_load_explicit(slot, memory_order_acquire);
	if (p)
		return p;
	p = calloc(1, bytes);
	if (!p)
		return NULL;
	void *expected = NULL;
	if (!atomic_compare_exchange_strong_explicit(slot, &expected, p, memory_order_acq_rel, memory_order_acquire)) {
		free(p);
		return expected;
	}
	return p;
}

static inline void bump(uint64_t *v, uint64_t by);

static void hist_add(struct stats_hist *h, uint64_t ns)
{
	/* Single writer: plain relaxed read-modify-write, no lock prefix. */
	uint64_t *b = &h->bucket[stats_bucket_of(ns)];
	__atomic_store_n(b, __atomic_load_n(b, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h->timed, __atomic_load_n(&h->timed, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&h->sum_ns, __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) + ns, __ATOMIC_RELAXED);
	if (ns > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
		__atomic_store_n(&h->max_ns, ns, __ATOMIC_RELAXED);
}

static inline void bump(uint64_t *v, uint64_t by)
{
	__atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}

void stats_record(struct stats_client *c, unsigned slot, uint32_t op_id, uint64_t t_start, bool error,
		  uint64_t bytes_in, uint64_t bytes_out)
{
	/* The service table is fixed before the first request. */
	static _Atomic uint32_t nops_cached;
	uint32_t nops = atomic_load_explicit(&nops_cached, memory_order_relaxed);
	if (!nops) {
		nops = service_op_count();
		atomic_store_explicit(&nops_cached, nops, memory_order_relaxed);
	}
	if (slot >= GPUSYS_PROGRESS_SLOTS || op_id >= nops || !stats_enabled())
		return;
	struct stats_op *ops = shard_get((void *_Atomic *)&c->shard[slot], nops * sizeof(struct stats_op));
	if (ops) {
		struct stats_op *o = &ops[op_id];
		bump(&o->requests, 1);
		if (error)
			bump(&o->errors, 1);
		if (bytes_in)
			bump(&o->bytes_in, bytes_in);
		if (bytes_out)
			bump(&o->bytes_out, bytes_out);
	}
	struct stats_hist *h = shard_get((void *_Atomic *)&g.hist[slot], nops * sizeof(struct stats_hist));
	if (!h)
		return;
	h += op_id;
	if (slot == PORT_LATER_SLOT)
		pthread_mutex_lock(&g.later_mu);
	bump(&h->count, 1);
	if (t_start)
		hist_add(h, stats_elapsed_ns(t_start, stats_now()));
	if (error)
		bump(&h->errors, 1);
	if (bytes_in)
		bump(&h->bytes_in, bytes_in);
	if (bytes_out)
		bump(&h->bytes_out, bytes_out);
	if (slot == PORT_LATER_SLOT)
		pthread_mutex_unlock(&g.later_mu);
}

void stats_client_free(struct stats_client *c)
{
	for (unsigned s = 0; s < GPUSYS_PROGRESS_SLOTS; s++) {
		free(atomic_load_explicit(&c->shard[s], memory_order_relaxed));
		atomic_store_explicit(&c->shard[s], NULL, memory_order_relaxed);
	}
}

void stats_client_op(const struct stats_client *c, uint32_t op_id, struct stats_op *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (op_id >= service_op_count())
		return;
	for (unsigned s = 0; s < GPUSYS_PROGRESS_SLOTS; s++) {
		const struct stats_op *ops = atomic_load_explicit(&c->shard[s], memory_order_acquire);
		if (!ops)
			continue;
		ret->requests += __atomic_load_n(&ops[op_id].requests, __ATOMIC_RELAXED);
		ret->errors += __atomic_load_n(&ops[op_id].errors, __ATOMIC_RELAXED);
		ret->bytes_in += __atomic_load_n(&ops[op_id].bytes_in, __ATOMIC_RELAXED);
		ret->bytes_out += __atomic_load_n(&ops[op_id].bytes_out, __ATOMIC_RELAXED);
	}
}

void stats_op_latency(uint32_t op_id, struct stats_latency *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (op_id >= service_op_count())
		return;
	for (unsigned s = 0; s < GPUSYS_PROGRESS_SLOTS; s++) {
		const struct stats_hist *h = atomic_load_explicit(&g.hist[s], memory_order_acquire);
		if (!h)
			continue;
		h += op_id;
		ret->count += __atomic_load_n(&h->count, __ATOMIC_RELAXED);
		ret->timed += __atomic_load_n(&h->timed, __ATOMIC_RELAXED);
		ret->errors += __atomic_load_n(&h->errors, __ATOMIC_RELAXED);
		ret->bytes_in += __atomic_load_n(&h->bytes_in, __ATOMIC_RELAXED);
		ret->bytes_out += __atomic_load_n(&h->bytes_out, __ATOMIC_RELAXED);
		ret->sum_ns += __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
		uint64_t m = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
		if (m > ret->max_ns)
			ret->max_ns = m;
		for (unsigned b = 0; b < STATS_BUCKETS; b++)
			ret->bucket[b] += __atomic_load_n(&h->bucket[b], __ATOMIC_RELAXED);
	}
}

uint64_t stats_percentile_ns(const struct stats_latency *l, double q)
{
	uint64_t total = 0;
	for (unsigned b = 0; b < STATS_BUCKETS; b++)
		total += l->bucket[b];
	if (!total)
		return 0;
	/* The rank of the q-quantile, 1-based, rounded up. */
	uint64_t rank = (uint64_t)(q * (double)total);
	if ((double)rank < q * (double)total)
		rank++;
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned b = 0; b < STATS_BUCKETS; b++) {
		seen += l->bucket[b];
		if (seen >= rank) {
			uint64_t lo, hi;
			stats_bucket_range(b, &lo, &hi);
			return hi - 1 < l->max_ns ? hi - 1 : l->max_ns;
		}
	}
	return l->max_ns;
}
