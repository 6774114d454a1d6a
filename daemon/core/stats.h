/* SPDX-License-Identifier: MIT */
/*
 * Per-opcode counters and latency, counted by the core on every request.
 *
 * Writers are the daemon's threads, each in its own shard (its progress
 * slot), so a request costs a few plain relaxed stores and no locked
 * instruction; readers (gpusysctl) merge the shards. Per client and op:
 * requests, errors, bytes in and out. Per op, daemon-wide: a log-linear
 * latency histogram (8 buckets per power of two, so a percentile read
 * from it is within 12.5%), from the moment a poller found the request to
 * the moment its answer was handed back.
 *
 * What it costs: counts are exact (a few relaxed stores); requests served on
 * the poller's fast path are timed one in STATS_SAMPLE per thread (two TSC
 * reads and a histogram store are most of the cost at 2 M requests/s per
 * poller), every other request (pool, later, streamed) is timed.
 */
#ifndef GPUSYSD_CORE_STATS_H
#define GPUSYSD_CORE_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpusys/abi.h"

#define STATS_SUB_BITS 3u
#define STATS_SUB (1u << STATS_SUB_BITS)
#define STATS_MAX_EXP 42u /* 2^42 ns: 73 minutes; longer lands in the last bucket */
#define STATS_BUCKETS ((STATS_MAX_EXP - STATS_SUB_BITS + 2u) * STATS_SUB)

struct stats_op {
	uint64_t requests, errors, bytes_in, bytes_out;
};

struct stats_client {
	struct stats_op *_Atomic shard[GPUSYS_PROGRESS_SLOTS]; /* each: service_op_count() entries */
};

#define STATS_SAMPLE 8u /* power of two */

/* Counting on or off (config key "stats"): off, requests are not timed. */
void stats_set_enabled(bool on);
bool stats_enabled(void);

/* Whether this thread times its next fast-path request (one in
 * STATS_SAMPLE while counting is on). */
bool stats_sample(void);

/* A timestamp for latency: cheap (the TSC where there is one). */
uint64_t stats_now(void);
/* Nanoseconds between two stats_now() values. */
uint64_t stats_elapsed_ns(uint64_t from, uint64_t to);

/* Count one finished request of op_id for client c, on progress slot
 * slot (the caller is that slot's only writer, or holds its lock).
 * t_start: stats_now() when it arrived; 0: not timed. */
void stats_record(struct stats_client *c, unsigned slot, uint32_t op_id, uint64_t t_start, bool error,
		  uint64_t bytes_in, uint64_t bytes_out);

void stats_client_free(struct stats_client *c);

/* Merged totals of client c for op_id (zeros if none). */
void stats_client_op(const struct stats_client *c, uint32_t op_id, struct stats_op *ret);

/* Daemon-wide latency of op_id, merged over the shards. */
struct stats_latency {
	uint64_t count, errors, bytes_in, bytes_out;
	uint64_t timed; /* requests in the histogram (fast-path ones sampled) */
	uint64_t max_ns;
	uint64_t sum_ns;
	uint64_t bucket[STATS_BUCKETS];
};
void stats_op_latency(uint32_t op_id, struct stats_latency *ret);

/* The value below which a fraction q (0..1) of the counted requests fall
 * (the upper edge of the bucket holding it, at most the maximum seen). */
uint64_t stats_percentile_ns(const struct stats_latency *l, double q);

/* Bucket b's range in nanoseconds: [lo, hi). */
void stats_bucket_range(unsigned b, uint64_t *lo, uint64_t *hi);
unsigned stats_bucket_of(uint64_t ns);

#endif
