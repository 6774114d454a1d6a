/* SPDX-License-Identifier: MIT */
/*
 * The bulk copy engine: multithreaded double queuing (SAC 2019) between
 * pageable host memory and a "device" that a pluggable DMA consumer moves
 * data to and from. No CUDA in here: libclient/copy/copy.c plugs in the CUDA
 * DMA engine (cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on the engine's own
 * stream), tests/copy plugs in a host memcpy that completes late.
 *
 * A job is cut into chunks. Each chunk holds a slot (a staging buffer,
 * pinned by whoever made the engine) from its first stage to its last, so
 * the slot count bounds what is in flight. The stages:
 *
 *     host to device, staged:    producer copies in    -> consumer DMA
 *     device to host, staged:    consumer DMA          -> producer copies out
 *     either way, in place:      producer pins the caller's pages -> DMA
 *                                -> producer unpins them
 *
 * Chunks are numbered across the engine's life (tickets, in submission
 * order) and chunk t always uses slot t % nslots, so a consumer can queue a
 * job's transfers before any byte is staged (a CUDA stream that waits for a
 * flag per chunk: libclient/copy/copy.c); COPY_EVERY_CHUNK then makes every
 * chunk pass through start/poll even after an error, so that such a
 * schedule never waits forever.
 *
 * Free slots are the empty-buffer queue; slots waiting for the consumer are
 * the full-buffer queue (FIFO); slots waiting for a producer a third queue.
 * N producer threads, one consumer thread; with max_producers above
 * nproducers, threads up to max_producers are started and the engine puts
 * more of them to work while the consumer is found waiting on producers
 * (copy_adapt.h). Jobs run one at a time, in the
 * order they were submitted (the link is one resource; a job from another
 * thread waits its turn, it does not share the pool). A chunk whose pages
 * cannot be pinned falls back to staging.
 *
 * Errors: the first one ends the job; chunks in flight finish their DMA,
 * pinned pages are always unpinned, and the job reports the error (never a
 * partial success). Functions return 0 or -errno.
 */
#ifndef GPUSYS_COPY_ENGINE_H
#define GPUSYS_COPY_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum copy_dir {
	COPY_HTOD = 0,
	COPY_DTOH = 1,
};

enum copy_mode {
	COPY_STAGED = 0,   /* through the slots' staging buffers */
	COPY_IN_PLACE = 1, /* pin the caller's pages chunk by chunk (needs ops->pin) */
};

enum copy_thread_role {
	COPY_THREAD_PRODUCER = 0,
	COPY_THREAD_CONSUMER = 1,
};

/* The consumer side, called from the engine's threads. start/poll only
 * from the consumer thread; pin/unpin from producers. */
struct copy_dma_ops {
	/* Start moving n bytes for slot: COPY_HTOD host -> dev, COPY_DTOH dev ->
	 * host. host is the slot's staging buffer or, in place, the caller's
	 * pinned pages. May complete later. */
	int (*start)(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev, size_t n);
	/* 1 when slot's transfer is done, 0 when not yet, -errno when it
	 * failed. With block, wait for it (a consumer may still return 0 after
	 * a bounded wait: it is asked again). Called until it answers != 0,
	 * once per successful start. */
	int (*poll)(void *ctx, unsigned slot, bool block);
	/* Optional: whether [dev, dev + n) may be moved at all (checked at
	 * submit, before anything moves; e.g. -EFAULT: the device buffer is
	 * too small). */
	int (*check)(void *ctx, enum copy_dir dir, uint64_t dev, size_t n);
	/* Optional (COPY_IN_PLACE): make [host, host + n) DMA-able, and undo it.
	 * Ranges handed to pin never share a page with another range pinned by
	 * this engine. */
	int (*pin)(void *ctx, void *host, size_t n);
	void (*unpin)(void *ctx, void *host, size_t n);
	/* Optional: consumer thread, before a job's first chunk and after its
	 * last (always called once each, even when the job failed; err is the
	 * job's result). begin's error fails the job. */
	int (*job_begin)(void *ctx, void *job_arg);
	void (*job_end)(void *ctx, void *job_arg, int err);
	/* Optional: each engine thread once at its start (a CUDA context made
	 * current) and at its end. */
	int (*thread_start)(void *ctx, enum copy_thread_role role);
	void (*thread_stop)(void *ctx, enum copy_thread_role role);
};

/* What one finished job measured, for its report (copy_report.h). */
struct copy_job_summary {
	enum copy_dir dir;
	uint64_t bytes;
	uint64_t ns;               /* from its taking up to its end */
	unsigned producers_start;  /* working when the engine was made */
	unsigned producers_end;    /* working when the job ended */
	uint64_t producers_added, producers_removed; /* since the engine was made */
};

struct copy_engine_config {
	const struct copy_dma_ops *ops;
	void *ctx;
	void *const *buffers;  /* nslots staging buffers of buffer_bytes each */
	unsigned nslots;
	size_t buffer_bytes;   /* the largest chunk */
	size_t min_chunk;      /* a job's chunk: its size over nproducers, between
				  min_chunk and buffer_bytes (0: buffer_bytes) */
	unsigned nproducers;   /* >= 1: producers working at the start */
	size_t page_size;      /* in place: chunks start on these host boundaries
				  (0: sysconf(_SC_PAGESIZE)) */
	unsigned max_producers; /* the most it may put to work while copying
				   (copy_adapt.h); 0 or nproducers: a fixed count */
	unsigned slow_producer_us; /* tests: producer 0 holds each chunk it
				      copies this much longer (a slow thread) */
	bool streaming;        /* copies into staging with streaming stores
				  (copy_bytes.h) */
	/* Optional: the consumer thread calls it once for each job of n > 0
	 * that succeeded, after its waiter was woken and outside the engine's
	 * lock (copy_report_job sends it to gpusysd; a copy never waits for
	 * its report). */
	void (*finished)(void *arg, const struct copy_job_summary *s);
	void *finished_arg;
};

enum copy_request_flags {
	/* Every chunk goes through start/poll, in ticket order, even after an
	 * error (its data is then not moved: the job still fails). Staged only. */
	COPY_EVERY_CHUNK = 1u << 0,
};

struct copy_request {
	enum copy_dir dir;
	enum copy_mode mode;
	void *host;   /* source (HTOD) or destination (DTOH), any alignment */
	uint64_t dev; /* the other side, as the ops understand it */
	size_t n;
	void *job_arg; /* handed to job_begin/job_end */
	unsigned flags; /* enum copy_request_flags */
};

struct copy_engine;
struct copy_job;

/* Threads start here; the config's buffers must outlive the engine. */
int copy_engine_create(const struct copy_engine_config *cfg, struct copy_engine **ret);
/* Waits for every submitted job, stops the threads. */
void copy_engine_destroy(struct copy_engine *e);

/* Queue a copy; *ret is its handle (release it with copy_job_release).
 * -EINVAL on a bad request, the ops' check error, -ENOMEM. n == 0 is a job
 * that completes at once. */
int copy_engine_submit(struct copy_engine *e, const struct copy_request *req, struct copy_job **ret);
/* Submit and wait. */
int copy_engine_copy(struct copy_engine *e, const struct copy_request *req);

/* 1 done, 0 pending; never blocks. */
int copy_job_test(struct copy_job *j);
/* Wait: the job's result, 0 or -errno. */
int copy_job_wait(struct copy_job *j);
/* Wait, then free the handle; returns the job's result. */
int copy_job_release(struct copy_job *j);
/* 1 when done within timeout_ns, else 0. */
int copy_job_timedwait(struct copy_job *j, uint64_t timeout_ns);
/* Fail the job with err: no more chunks start (COPY_EVERY_CHUNK too);
 * those in flight still end through poll. */
void copy_job_cancel(struct copy_job *j, int err);
/* A job's chunks: tickets first .. first + nchunks - 1; chunk i's host and
 * device ranges (the same from submit on). */
void copy_job_geometry(const struct copy_job *j, uint64_t *ret_first_ticket, size_t *ret_nchunks);
void copy_job_chunk(const struct copy_job *j, size_t i, void **ret_host, uint64_t *ret_dev, size_t *ret_n);

/* Counters for tests and benchmarks. */
struct copy_engine_stats {
	uint64_t jobs, chunks, bytes;
	uint64_t chunks_in_place; /* pinned in place */
	uint64_t pin_fallbacks;   /* pin failed: staged instead */
	unsigned max_in_flight;   /* the most slots held at once */
	/* Producers (copy_adapt.h): working at the start, now, the most allowed. */
	unsigned producers_start, producers_active, producers_max;
	uint64_t producers_added, producers_removed;
	/* The last job that finished: its bytes and the time from its first
	 * chunk's start to its end. */
	uint64_t last_job_bytes, last_job_ns;
};
void copy_engine_get_stats(struct copy_engine *e, struct copy_engine_stats *ret);

/* A job's chunk size for n bytes under cfg (exposed for tests). */
size_t copy_engine_chunk_for(const struct copy_engine *e, size_t n);

#endif /* GPUSYS_COPY_ENGINE_H */
