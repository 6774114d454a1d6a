/* SPDX-License-Identifier: MIT */
/*
 * The copy engine (libclient/copy/copy_engine.h) without a GPU: its consumer is a
 * fake DMA engine over a host arena that moves the bytes LATE (only when
 * the engine polls a transfer and is told it is done), so a staging buffer
 * reused too early, or copied out too early, shows up as wrong bytes. Every
 * size around chunk boundaries, misaligned host and device sides, both
 * directions, staged and pinned in place, concurrent jobs, and errors that
 * must be reported (never a hang, never a partial success). And jobs whose
 * transfers a fake GPU stream runs from a schedule queued at submit, as
 * libclient/copy/copy.c does for stream-ordered copies (COPY_EVERY_CHUNK).
 * And the producer count adapting while copying (copy_adapt.h): a slow
 * producer on a fast link makes the engine add producers, a slow link with
 * fast producers does not. And the report of each finished copy to gpusysd
 * (copy_report.h): exactly one per copy that succeeded, on the connection,
 * dropped and counted when the connection is full, never waited for.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "libclient/copy/copy_adapt.h"
#include "libclient/copy/copy_bytes.h"
#include "libclient/copy/copy_engine.h"
#include "libclient/copy/copy_report.h"
#include "libclient/attach/report.h"

#define MAX_SLOTS 16
#define MAX_SCHED 4096
#define MAX_PINNED 64
#define GUARD 64
#define GUARD_BYTE 0xA5

/* ---- the fake device ---- */

/* The engine's staging buffers (one rig at a time). */
static struct {
	void *bufs[MAX_SLOTS];
	size_t bytes;
	unsigned n;
} staging;

struct fake {
	uint8_t *mem; /* device arena: dev address = offset */
	size_t size;
	pthread_mutex_t lk;
	struct {
		bool active;
		enum copy_dir dir;
		void *host;
		uint64_t dev;
		size_t n;
	} p[MAX_SLOTS];
	struct {
		uintptr_t lo, hi; /* pages */
	} pinned[MAX_PINNED];
	unsigned npinned;
	size_t page;
	/* injected faults (0: none): the k-th start / poll / pin fails */
	atomic_uint starts, polls, pins;
	unsigned fail_start_at, fail_poll_at, fail_pin_every;
	/* what a correct engine never does */
	atomic_uint violations;
	atomic_uint begun, ended;
	atomic_int last_end_err;
	unsigned seed;
	unsigned nslots;
	/* stream-ordered jobs: the schedule a fake GPU stream runs in order */
	bool cur_ordered; /* consumer's: the running job is */
	uint64_t want[MAX_SLOTS];
	_Atomic uint64_t host_gen[MAX_SLOTS], dev_gen[MAX_SLOTS];
	struct {
		uint64_t ticket;
		enum copy_dir dir;
		uint64_t dev;
		size_t n;
	} sched[MAX_SCHED];
	atomic_uint sched_tail, sched_head;
	atomic_bool gpu_stuck, gpu_stop, abandoned;
	pthread_t gpu;
};

struct fake_arg {
	bool ordered;
	bool fail_begin;
};
static struct fake_arg arg_ordered = { true, false }, arg_ordered_fail = { true, true };

static int f_check(void *ctx, enum copy_dir dir, uint64_t dev, size_t n)
{
	struct fake *f = ctx;
	(void)dir;
	return dev > f->size || n > f->size - dev ? -EFAULT : 0;
}

static bool is_pinned(struct fake *f, const void *host, size_t n)
{
	uintptr_t lo = (uintptr_t)host, hi = lo + n;
	for (unsigned i = 0; i < f->npinned; i++)
		if (lo >= f->pinned[i].lo && hi <= f->pinned[i].hi)
			return true;
	return false;
}

static int f_start(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev, size_t n)
{
	struct fake *f = ctx;
	if (slot != ticket % f->nslots)
		atomic_fetch_add(&f->violations, 1); /* chunk t must use slot t % nslots */
	if (f->cur_ordered) {
		/* the stream's transfer is queued already: let it go */
		if (host != staging.bufs[slot])
			atomic_fetch_add(&f->violations, 1);
		f->want[slot] = ticket / f->nslots + 1;
		atomic_store(&f->host_gen[slot], f->want[slot]);
		atomic_fetch_add(&f->starts, 1);
		return 0;
	}
	unsigned k = atomic_fetch_add(&f->starts, 1) + 1;
	if (f->fail_start_at && k == f->fail_start_at)
		return -EIO;
	if (slot >= MAX_SLOTS || n == 0 || dev > f->size || n > f->size - dev) {
		atomic_fetch_add(&f->violations, 1);
		return -EFAULT;
	}
	pthread_mutex_lock(&f->lk);
	if (f->p[slot].active)
		atomic_fetch_add(&f->violations, 1); /* a slot started twice */
	f->p[slot].active = true;
	f->p[slot].dir = dir;
	f->p[slot].host = host;
	f->p[slot].dev = dev;
	f->p[slot].n = n;
	pthread_mutex_unlock(&f->lk);
	return 0;
}

/* Completes (moves the bytes) when blocking, or at random when polled. */
static int f_poll(void *ctx, unsigned slot, bool block)
{
	struct fake *f = ctx;
	if (f->cur_ordered) {
		for (int spins = 0;; spins++) {
			if (atomic_load(&f->abandoned))
				return -ECANCELED;
			if (atomic_load(&f->dev_gen[slot]) >= f->want[slot])
				return 1;
			if (!block || spins >= 50)
				return 0;
			usleep(1);
		}
	}
	pthread_mutex_lock(&f->lk);
	if (slot >= MAX_SLOTS || !f->p[slot].active) {
		pthread_mutex_unlock(&f->lk);
		atomic_fetch_add(&f->violations, 1);
		return -EINVAL;
	}
	if (!block && (rand_r(&f->seed) & 1)) {
		pthread_mutex_unlock(&f->lk);
		return 0;
	}
	f->p[slot].active = false;
	void *host = f->p[slot].host;
	uint8_t *d = f->mem + f->p[slot].dev;
	size_t n = f->p[slot].n;
	enum copy_dir dir = f->p[slot].dir;
	pthread_mutex_unlock(&f->lk);
	unsigned k = atomic_fetch_add(&f->polls, 1) + 1;
	if (f->fail_poll_at && k == f->fail_poll_at)
		return -EIO;
	if (dir == COPY_HTOD)
		memcpy(d, host, n);
	else
		memcpy(host, d, n);
	return 1;
}

static int f_pin(void *ctx, void *host, size_t n)
{
	struct fake *f = ctx;
	unsigned k = atomic_fetch_add(&f->pins, 1) + 1;
	if (f->fail_pin_every && k % f->fail_pin_every == 0)
		return -EBUSY;
	uintptr_t lo = (uintptr_t)host / f->page * f->page;
	uintptr_t hi = ((uintptr_t)host + n + f->page - 1) / f->page * f->page;
	pthread_mutex_lock(&f->lk);
	for (unsigned i = 0; i < f->npinned; i++)
		if (lo < f->pinned[i].hi && f->pinned[i].lo < hi)
			atomic_fetch_add(&f->violations, 1); /* two pinned ranges share a page */
	int rc = 0;
	if (f->npinned == MAX_PINNED)
		rc = -ENOMEM;
	else
	{
		f->pinned[f->npinned].lo = lo;
		f->pinned[f->npinned++].hi = hi;
	}
	pthread_mutex_unlock(&f->lk);
	return rc;
}

static void f_unpin(void *ctx, void *host, size_t n)
{
	struct fake *f = ctx;
	uintptr_t lo = (uintptr_t)host / f->page * f->page;
	pthread_mutex_lock(&f->lk);
	bool found = false;
	for (unsigned i = 0; i < f->npinned; i++) {
		if (f->pinned[i].lo == lo) {
			f->pinned[i] = f->pinned[--f->npinned];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&f->lk);
	(void)n;
	if (!found)
		atomic_fetch_add(&f->violations, 1);
}

/* In place, a DMA must only touch pinned pages. */
static int f_start_checked(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev,
			   size_t n);

static int f_job_begin(void *ctx, void *arg)
{
	struct fake *f = ctx;
	atomic_fetch_add(&f->begun, 1);
	const struct fake_arg *a = arg == (void *)1 ? NULL : arg;
	f->cur_ordered = a && a->ordered;
	return arg == (void *)1 || (a && a->fail_begin) ? -ECANCELED : 0; /* job_arg 1: begin fails */
}

static void f_job_end(void *ctx, void *arg, int err)
{
	struct fake *f = ctx;
	(void)arg;
	f->cur_ordered = false;
	atomic_store(&f->last_end_err, err);
	atomic_fetch_add(&f->ended, 1);
}

static const struct copy_dma_ops fake_ops = {
	.start = f_start_checked,
	.poll = f_poll,
	.check = f_check,
	.pin = f_pin,
	.unpin = f_unpin,
	.job_begin = f_job_begin,
	.job_end = f_job_end,
};

static int f_start_checked(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev,
			   size_t n)
{
	if (((struct fake *)ctx)->cur_ordered)
		return f_start(ctx, slot, ticket, dir, host, dev, n);
	struct fake *f = ctx;
	bool staged = false;
	for (unsigned i = 0; i < staging.n; i++)
		if ((uint8_t *)host >= (uint8_t *)staging.bufs[i] &&
		    (uint8_t *)host + n <= (uint8_t *)staging.bufs[i] + staging.bytes)
			staged = true;
	if (!staged) {
		pthread_mutex_lock(&f->lk);
		bool ok = is_pinned(f, host, n);
		pthread_mutex_unlock(&f->lk);
		if (!ok)
			atomic_fetch_add(&f->violations, 1);
	}
	return f_start(ctx, slot, ticket, dir, host, dev, n);
}

/* The fake GPU stream: each scheduled chunk in order waits for its slot's
 * go, moves the bytes, says done (libclient/copy/copy.c's
 * cuStreamWaitValue64 / cuMemcpy*Async / cuStreamWriteValue64). */
static void *gpu_main(void *arg)
{
	struct fake *f = arg;
	while (!atomic_load(&f->gpu_stop)) {
		unsigned h = atomic_load(&f->sched_head);
		if (h == atomic_load(&f->sched_tail) || atomic_load(&f->gpu_stuck)) {
			usleep(2);
			continue;
		}
		uint64_t t = f->sched[h].ticket, gen = t / f->nslots + 1;
		unsigned b = (unsigned)(t % f->nslots);
		while (atomic_load(&f->host_gen[b]) < gen && !atomic_load(&f->gpu_stop))
			usleep(1);
		if (atomic_load(&f->gpu_stop))
			break;
		if (f->sched[h].dir == COPY_HTOD)
			memcpy(f->mem + f->sched[h].dev, staging.bufs[b], f->sched[h].n);
		else
			memcpy(staging.bufs[b], f->mem + f->sched[h].dev, f->sched[h].n);
		atomic_store(&f->dev_gen[b], gen);
		atomic_store(&f->sched_head, h + 1);
	}
	return NULL;
}

/* ---- set-up ---- */

struct rig {
	struct fake f;
	struct copy_engine *e;
};

/* The reporter the next rig_up plugs in as the engine's finished hook
 * (NULL: none). */
static struct copy_reporter *rig_reporter;
/* Whether the next rig_up's producers copy into staging with streaming
 * stores (copy_bytes.h). */
static bool rig_streaming;

static void rig_up_adaptive(struct rig *r, size_t dev_bytes, size_t buf_bytes, unsigned nslots, unsigned nprod,
			    size_t min_chunk, const struct copy_dma_ops *ops, unsigned max_prod, unsigned slow_us);

static void rig_up(struct rig *r, size_t dev_bytes, size_t buf_bytes, unsigned nslots, unsigned nprod, size_t min_chunk,
		   const struct copy_dma_ops *ops)
{
	rig_up_adaptive(r, dev_bytes, buf_bytes, nslots, nprod, min_chunk, ops, 0, 0);
}

/* max_prod > nprod: producers may be added while copying; slow_us: the
 * first producer holds each chunk that much longer. */
static void rig_up_adaptive(struct rig *r, size_t dev_bytes, size_t buf_bytes, unsigned nslots, unsigned nprod,
			    size_t min_chunk, const struct copy_dma_ops *ops, unsigned max_prod, unsigned slow_us)
{
	memset(r, 0, sizeof(*r));
	r->f.mem = malloc(dev_bytes);
	assert_non_null(r->f.mem);
	r->f.size = dev_bytes;
	r->f.page = 4096;
	r->f.seed = 12345;
	r->f.nslots = nslots;
	pthread_mutex_init(&r->f.lk, NULL);
	assert_int_equal(pthread_create(&r->f.gpu, NULL, gpu_main, &r->f), 0);
	assert_true(nslots <= MAX_SLOTS);
	staging.n = nslots;
	staging.bytes = buf_bytes;
	for (unsigned i = 0; i < nslots; i++) {
		staging.bufs[i] = malloc(buf_bytes);
		assert_non_null(staging.bufs[i]);
	}
	struct copy_engine_config cfg = {
		.ops = ops ? ops : &fake_ops,
		.ctx = &r->f,
		.buffers = staging.bufs,
		.nslots = nslots,
		.buffer_bytes = buf_bytes,
		.min_chunk = min_chunk,
		.nproducers = nprod,
		.page_size = 4096,
		.max_producers = max_prod,
		.slow_producer_us = slow_us,
		.streaming = rig_streaming,
		.finished = rig_reporter ? copy_report_job : NULL,
		.finished_arg = rig_reporter,
	};
	assert_int_equal(copy_engine_create(&cfg, &r->e), 0);
}

static void rig_down(struct rig *r)
{
	copy_engine_destroy(r->e);
	atomic_store(&r->f.gpu_stop, true);
	pthread_join(r->f.gpu, NULL);
	assert_int_equal(atomic_load(&r->f.violations), 0);
	assert_int_equal(r->f.npinned, 0);
	for (unsigned i = 0; i < staging.n; i++)
		free(staging.bufs[i]);
	staging.n = 0;
	free(r->f.mem);
	pthread_mutex_destroy(&r->f.lk);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* One copy each way of n bytes, host at offset hoff in a guarded buffer,
 * device at doff; verified byte for byte, guards untouched. */
static void round_trip(struct rig *r, size_t n, size_t hoff, uint64_t doff, enum copy_mode mode, uint64_t seed)
{
	size_t total = GUARD + hoff + n + GUARD;
	uint8_t *src = malloc(total), *dst = malloc(total);
	assert_non_null(src);
	assert_non_null(dst);
	memset(src, GUARD_BYTE, total);
	fill(src + GUARD + hoff, n, seed);
	memset(r->f.mem, 0x5A, doff + n + GUARD < r->f.size ? doff + n + GUARD : r->f.size);

	struct copy_request h2d = { .dir = COPY_HTOD, .mode = mode, .host = src + GUARD + hoff, .dev = doff, .n = n };
	int rc = copy_engine_copy(r->e, &h2d);
	if (rc != 0)
		fail_msg("htod n=%zu hoff=%zu doff=%llu mode=%d: %d", n, hoff, (unsigned long long)doff, mode, rc);
	if (memcmp(r->f.mem + doff, src + GUARD + hoff, n) != 0)
		fail_msg("htod n=%zu hoff=%zu doff=%llu mode=%d: device bytes differ", n, hoff,
			 (unsigned long long)doff, mode);
	if (doff + n < r->f.size)
		assert_int_equal(r->f.mem[doff + n], 0x5A);
	if (doff > 0)
		assert_int_equal(r->f.mem[doff - 1], 0x5A);

	memset(dst, GUARD_BYTE, total);
	struct copy_request d2h = { .dir = COPY_DTOH, .mode = mode, .host = dst + GUARD + hoff, .dev = doff, .n = n };
	rc = copy_engine_copy(r->e, &d2h);
	if (rc != 0)
		fail_msg("dtoh n=%zu hoff=%zu mode=%d: %d", n, hoff, mode, rc);
	if (memcmp(dst, src, total) != 0)
		fail_msg("dtoh n=%zu hoff=%zu doff=%llu mode=%d: host bytes or guards differ", n, hoff,
			 (unsigned long long)doff, mode);
	free(src);
	free(dst);
}

/* Every size from 0 across four 64-byte chunks, every host and device
 * misalignment 0..7 (staged: a chunk can be any size). */
static void test_every_small_size(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 4096, 64, 3, 2, 0, NULL);
	for (size_t n = 0; n <= 4 * 64 + 3; n++)
		for (size_t off = 0; off < 8; off++)
			round_trip(&r, n, off, (off * 3) % 8, COPY_STAGED, n * 8 + off);
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_int_equal(st.jobs, 2u * 260 * 8);
	assert_true(st.max_in_flight >= 2); /* it pipelined */
	rig_down(&r);
}

/* Sizes within 3 bytes of every page-sized chunk boundary up to 24 chunks,
 * staged and in place, host misaligned against the page grid. */
static void test_chunk_boundaries(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 6, 3, 0, NULL);
	for (size_t k = 0; k <= 24; k++)
		for (int d = -3; d <= 3; d++) {
			if ((long)(k * 4096) + d < 0)
				continue;
			size_t n = k * 4096 + (size_t)(long)d;
			for (int mode = COPY_STAGED; mode <= COPY_IN_PLACE; mode++)
				for (size_t off = 0; off < 4096; off += 1365)
					round_trip(&r, n, off, 17 + off % 5, (enum copy_mode)mode, k * 100 + (size_t)(d + 3));
		}
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_true(st.chunks_in_place > 0);
	assert_int_equal(st.pin_fallbacks, 0);
	rig_down(&r);
}

/* Megabytes with the job-sized chunks a real engine uses (min_chunk set):
 * sizes around 1 MiB buffers and around the per-job chunk. */
static void test_large_sizes(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 9 << 20, 1 << 20, 8, 4, 64 << 10, NULL);
	const size_t sizes[] = { (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (3 << 20) + 7, 4 << 20, (4 << 20) + 4095,
				 (8 << 20) - 1, 8 << 20, 300000, 65535, 65537, 262144 * 4 + 13 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		round_trip(&r, sizes[i], i % 7, (uint64_t)i * 4099 % 1000, COPY_STAGED, i);
		round_trip(&r, sizes[i], 4096 - i, (uint64_t)i * 13, COPY_IN_PLACE, i + 100);
	}
	rig_down(&r);
}

/* The producers' copy into staging with streaming stores, alone: every
 * size to 300 bytes and some large ones, at every misalignment of the
 * destination against a line (0..63) and of the source (0..7), bytes
 * before and after untouched; then the engine's small and large copies
 * with it (on a platform without streaming stores this is memcpy, and the
 * test says so). */
static void test_streaming_copies(void **state)
{
	(void)state;
	enum { PAD = 80 };
	const size_t big[] = { 4096, 65536 + 17, (1 << 20) + 63, (4 << 20) + 1 };
	uint8_t *src = malloc((4 << 20) + 2 * PAD), *dst = malloc((4 << 20) + 3 * PAD);
	assert_non_null(src);
	assert_non_null(dst);
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < (pass ? sizeof(big) / sizeof(big[0]) : 301); i++) {
			size_t n = pass ? big[i] : i;
			for (size_t doff = 0; doff < 64; doff += pass ? 21 : 1)
				for (size_t soff = 0; soff < 8; soff += pass ? 3 : 1) {
					fill(src, n + soff, n * 64 + doff * 8 + soff);
					memset(dst, 0xEE, n + doff + PAD);
					copy_into_staging(dst + doff, src + soff, n, true);
					if (memcmp(dst + doff, src + soff, n) != 0)
						fail_msg("n=%zu doff=%zu soff=%zu: bytes differ", n, doff, soff);
					for (size_t g = 0; g < doff; g++)
						assert_int_equal(dst[g], 0xEE);
					for (size_t g = 0; g < PAD; g++)
						assert_int_equal(dst[doff + n + g], 0xEE);
				}
		}
	free(src);
	free(dst);
	if (!copy_streaming_available())
		print_message("no streaming stores on this platform: the copies were memcpy\n");
	rig_streaming = true;
	test_every_small_size(state);
	test_large_sizes(state);
	rig_streaming = false;
}

static void test_chunk_for(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 4096, 1 << 20, 4, 4, 64 << 10, NULL);
	assert_int_equal(copy_engine_chunk_for(r.e, 0), 64 << 10);
	assert_int_equal(copy_engine_chunk_for(r.e, 1 << 20), 320 << 10); /* 256 KiB + 1, to 64 KiB */
	assert_int_equal(copy_engine_chunk_for(r.e, 1 << 30), 1 << 20);
	rig_down(&r);
}

/* Pins that fail (pages pinned by someone else) fall back to staging. */
static void test_pin_fallback(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 4, 2, 0, NULL);
	r.f.fail_pin_every = 3;
	for (size_t n = 1; n < 200000; n = n * 3 + 1)
		round_trip(&r, n, n % 4096, 5, COPY_IN_PLACE, n);
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_true(st.pin_fallbacks > 0);
	assert_true(st.chunks_in_place > 0);
	rig_down(&r);
}

/* ---- concurrency ---- */

struct worker {
	struct rig *r;
	unsigned id;
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned seed = w->id * 7919u + 1;
	size_t region = w->r->f.size / 6;
	uint8_t *src = malloc(region), *dst = malloc(region);
	for (int it = 0; it < 25 && src && dst; it++) {
		size_t n = (size_t)rand_r(&seed) % (region - 16);
		size_t off = (size_t)rand_r(&seed) % 16;
		if (off + n > region)
			n = region - off;
		enum copy_mode mode = rand_r(&seed) & 1 ? COPY_IN_PLACE : COPY_STAGED;
		uint64_t dev = (uint64_t)w->id * region;
		fill(src + off, n, seed);
		struct copy_request a = { COPY_HTOD, mode, src + off, dev, n, NULL };
		struct copy_job *j;
		if (copy_engine_submit(w->r->e, &a, &j) != 0 || copy_job_release(j) != 0) {
			w->failures++;
			continue;
		}
		memset(dst, 0, region);
		struct copy_request b = { COPY_DTOH, mode, dst + off, dev, n, NULL };
		if (copy_engine_copy(w->r->e, &b) != 0 || memcmp(dst + off, src + off, n) != 0)
			w->failures++;
	}
	free(src);
	free(dst);
	return NULL;
}

static void test_concurrent_callers(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 6 * (600 << 10), 32 << 10, 8, 3, 4096, NULL);
	pthread_t t[6];
	struct worker w[6];
	for (unsigned i = 0; i < 6; i++) {
		w[i] = (struct worker){ &r, i, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_int_equal(st.jobs, 6 * 25 * 2);
	rig_down(&r);
}

/* Several jobs in flight at once from one thread, waited out of order:
 * they run in submission order, each handle reports its own result. */
static void test_async_handles(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 8 << 20, 64 << 10, 4, 2, 0, NULL);
	enum { N = 8 };
	size_t n = 1 << 20;
	uint8_t *src = malloc(N * n);
	assert_non_null(src);
	fill(src, N * n, 99);
	struct copy_job *j[N];
	for (int i = 0; i < N; i++) {
		struct copy_request q = { COPY_HTOD, i & 1 ? COPY_IN_PLACE : COPY_STAGED, src + (size_t)i * n,
					  (uint64_t)i * n, n, NULL };
		assert_int_equal(copy_engine_submit(r.e, &q, &j[i]), 0);
	}
	assert_int_equal(copy_job_wait(j[N - 1]), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(copy_job_test(j[i]), 1); /* FIFO: all earlier ones are done */
	for (int i = N - 1; i >= 0; i--)
		assert_int_equal(copy_job_release(j[i]), 0);
	assert_memory_equal(r.f.mem, src, N * n);
	assert_int_equal(atomic_load(&r.f.begun), N);
	assert_int_equal(atomic_load(&r.f.ended), N);
	free(src);
	rig_down(&r);
}

/* ---- errors ---- */

static void test_destination_too_small(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 100000, 4096, 4, 2, 0, NULL);
	uint8_t *src = malloc(200000);
	assert_non_null(src);
	fill(src, 200000, 5);
	memset(r.f.mem, 0x5A, r.f.size);
	struct copy_request q = { COPY_HTOD, COPY_STAGED, src, 0, 100001, NULL };
	struct copy_job *j = NULL;
	assert_int_equal(copy_engine_submit(r.e, &q, &j), -EFAULT);
	q.dev = 1;
	q.n = 100000;
	assert_int_equal(copy_engine_copy(r.e, &q), -EFAULT);
	q.dev = UINT64_MAX - 10;
	q.n = 100;
	assert_int_equal(copy_engine_copy(r.e, &q), -EINVAL); /* wraps */
	q.dir = COPY_DTOH;
	q.dev = 50000;
	q.n = 60000;
	assert_int_equal(copy_engine_copy(r.e, &q), -EFAULT);
	/* nothing moved */
	for (size_t i = 0; i < r.f.size; i++)
		if (r.f.mem[i] != 0x5A)
			fail_msg("byte %zu of the device written by a refused copy", i);
	assert_int_equal(atomic_load(&r.f.starts), 0);
	/* bad requests */
	q = (struct copy_request){ COPY_HTOD, COPY_STAGED, NULL, 0, 10, NULL };
	assert_int_equal(copy_engine_copy(r.e, &q), -EINVAL);
	q = (struct copy_request){ (enum copy_dir)7, COPY_STAGED, src, 0, 10, NULL };
	assert_int_equal(copy_engine_copy(r.e, &q), -EINVAL);
	q = (struct copy_request){ COPY_HTOD, COPY_STAGED, NULL, 0, 0, NULL };
	assert_int_equal(copy_engine_copy(r.e, &q), 0); /* zero bytes from nowhere is fine */
	free(src);
	rig_down(&r);
}

static void test_dma_failures(void **state)
{
	(void)state;
	for (int mode = COPY_STAGED; mode <= COPY_IN_PLACE; mode++) {
		for (int kind = 0; kind < 4; kind++) {
			struct rig r;
			rig_up(&r, 4 << 20, 16 << 10, 6, 3, 0, NULL);
			size_t n = 3 << 20;
			uint8_t *h = malloc(n);
			assert_non_null(h);
			fill(h, n, 1);
			enum copy_dir dir = kind & 1 ? COPY_DTOH : COPY_HTOD;
			if (kind < 2)
				r.f.fail_start_at = 37;
			else
				r.f.fail_poll_at = 41;
			struct copy_request q = { dir, (enum copy_mode)mode, h + 3, 5, n - 3, NULL };
			assert_int_equal(copy_engine_copy(r.e, &q), -EIO);
			assert_int_equal(atomic_load(&r.f.last_end_err), -EIO);
			/* the engine still works afterwards */
			r.f.fail_start_at = r.f.fail_poll_at = 0;
			round_trip(&r, 1 << 20, 1, 2, (enum copy_mode)mode, 7);
			free(h);
			rig_down(&r); /* every pinned page was unpinned */
		}
	}
}

static void test_job_begin_failure(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 4, 2, 0, NULL);
	uint8_t h[10000];
	fill(h, sizeof(h), 3);
	struct copy_request q = { COPY_HTOD, COPY_STAGED, h, 0, sizeof(h), (void *)1 };
	assert_int_equal(copy_engine_copy(&*r.e, &q), -ECANCELED);
	assert_int_equal(atomic_load(&r.f.starts), 0);
	assert_int_equal(atomic_load(&r.f.ended), 1);
	rig_down(&r);
}

static int no_start(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev, size_t n)
{
	(void)ctx, (void)slot, (void)ticket, (void)dir, (void)host, (void)dev, (void)n;
	return -EIO;
}

static int bad_thread(void *ctx, enum copy_thread_role role)
{
	(void)ctx;
	return role == COPY_THREAD_PRODUCER ? -ENODEV : 0;
}

static void test_bad_config(void **state)
{
	(void)state;
	struct fake f = { 0 };
	void *bufs[2] = { &f, &f };
	struct copy_dma_ops ops = { .start = no_start, .poll = f_poll };
	struct copy_engine_config cfg = { &ops, &f, bufs, 2, 64, 0, 1, 4096 };
	struct copy_engine *e = NULL;
	cfg.nslots = 0;
	assert_int_equal(copy_engine_create(&cfg, &e), -EINVAL);
	cfg.nslots = 2;
	cfg.nproducers = 0;
	assert_int_equal(copy_engine_create(&cfg, &e), -EINVAL);
	cfg.nproducers = 1;
	cfg.min_chunk = 65;
	assert_int_equal(copy_engine_create(&cfg, &e), -EINVAL);
	cfg.min_chunk = 0;
	ops.thread_start = bad_thread;
	assert_int_equal(copy_engine_create(&cfg, &e), -ENODEV);
	ops.thread_start = NULL;
	assert_int_equal(copy_engine_create(&cfg, &e), 0);
	/* no pin: in place is refused, staged works up to the DMA error */
	uint8_t h[100];
	struct copy_request q = { COPY_HTOD, COPY_IN_PLACE, h, 0, 100, NULL };
	assert_int_equal(copy_engine_copy(e, &q), -ENOTSUP);
	q.mode = COPY_STAGED;
	assert_int_equal(copy_engine_copy(e, &q), -EIO);
	copy_engine_destroy(e);
}

/* ---- stream-ordered jobs ---- */

/* Submit as copy.c's async forms do: the job, then its whole schedule. */
static struct copy_job *submit_ordered(struct rig *r, enum copy_dir dir, void *host, uint64_t dev, size_t n,
				       struct fake_arg *arg)
{
	struct copy_request q = { dir, COPY_STAGED, host, dev, n, arg, COPY_EVERY_CHUNK };
	struct copy_job *j = NULL;
	assert_int_equal(copy_engine_submit(r->e, &q, &j), 0);
	uint64_t first;
	size_t nchunks;
	copy_job_geometry(j, &first, &nchunks);
	unsigned tail = atomic_load(&r->f.sched_tail);
	assert_true(tail + nchunks <= MAX_SCHED);
	for (size_t i = 0; i < nchunks; i++) {
		void *h;
		uint64_t d;
		size_t len;
		copy_job_chunk(j, i, &h, &d, &len);
		assert_ptr_equal(h, (char *)host + (d - dev)); /* host and device move together */
		r->f.sched[tail + i].ticket = first + i;
		r->f.sched[tail + i].dir = dir;
		r->f.sched[tail + i].dev = d;
		r->f.sched[tail + i].n = len;
	}
	atomic_store(&r->f.sched_tail, tail + (unsigned)nchunks);
	return j;
}

static void test_ordered_round_trips(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 4, 3, 0, NULL);
	uint8_t *src = malloc(200000), *dst = malloc(200000 + 64);
	assert_non_null(src);
	assert_non_null(dst);
	for (size_t k = 0; k <= 12; k++)
		for (int d = -2; d <= 2; d++) {
			if ((long)(k * 4096) + d < 0)
				continue;
			size_t n = k * 4096 + (size_t)(long)d, off = k % 7;
			fill(src, n + off, k * 5 + (size_t)(d + 2));
			/* ordered and plain jobs share the slots: tickets interleave */
			struct copy_request plain = { COPY_HTOD, COPY_STAGED, src + off, 500000, n, NULL, 0 };
			assert_int_equal(copy_engine_copy(r.e, &plain), 0);
			struct copy_job *j = submit_ordered(&r, COPY_HTOD, src + off, 3 + k, n, &arg_ordered);
			assert_int_equal(copy_job_release(j), 0);
			assert_memory_equal(r.f.mem + 3 + k, src + off, n);
			assert_memory_equal(r.f.mem + 500000, src + off, n);
			memset(dst, 0xA5, n + 64);
			j = submit_ordered(&r, COPY_DTOH, dst, 3 + k, n, &arg_ordered);
			assert_int_equal(copy_job_release(j), 0);
			assert_memory_equal(dst, src + off, n);
			for (size_t i = n; i < n + 64; i++)
				assert_int_equal(dst[i], 0xA5);
		}
	assert_int_equal(atomic_load(&r.f.sched_head), atomic_load(&r.f.sched_tail));
	free(src);
	free(dst);
	rig_down(&r);
}

/* Several queued before any is waited for, both ways, from two buffers. */
static void test_ordered_many_queued(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 4 << 20, 16384, 6, 4, 4096, NULL);
	enum { N = 8 };
	size_t n = 300000;
	uint8_t *src = malloc(N * n), *back = malloc(N * n);
	assert_non_null(src);
	assert_non_null(back);
	fill(src, N * n, 42);
	struct copy_job *j[2 * N];
	for (int i = 0; i < N; i++)
		j[i] = submit_ordered(&r, COPY_HTOD, src + (size_t)i * n, (uint64_t)i * n, n, &arg_ordered);
	for (int i = 0; i < N; i++) /* reads after the writes: the same order on the one fake stream */
		j[N + i] = submit_ordered(&r, COPY_DTOH, back + (size_t)i * n, (uint64_t)i * n, n, &arg_ordered);
	for (int i = 2 * N - 1; i >= 0; i--)
		assert_int_equal(copy_job_release(j[i]), 0);
	assert_memory_equal(r.f.mem, src, N * n);
	assert_memory_equal(back, src, N * n);
	free(src);
	free(back);
	rig_down(&r);
}

/* A failed ordered job still lets every scheduled chunk through (the
 * stream must not wait forever), reports the error, and the next works. */
static void test_ordered_error_drains(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 4, 2, 0, NULL);
	uint8_t *src = malloc(100000);
	assert_non_null(src);
	fill(src, 100000, 8);
	struct copy_job *j = submit_ordered(&r, COPY_HTOD, src, 0, 100000, &arg_ordered_fail);
	assert_int_equal(copy_job_release(j), -ECANCELED);
	for (int i = 0; i < 2000 && atomic_load(&r.f.sched_head) != atomic_load(&r.f.sched_tail); i++)
		usleep(1000);
	assert_int_equal(atomic_load(&r.f.sched_head), atomic_load(&r.f.sched_tail));
	j = submit_ordered(&r, COPY_DTOH, src, 0, 100000, &arg_ordered_fail);
	assert_int_equal(copy_job_release(j), -ECANCELED);
	memset(r.f.mem, 0, 100000);
	j = submit_ordered(&r, COPY_HTOD, src, 0, 100000, &arg_ordered);
	assert_int_equal(copy_job_release(j), 0);
	assert_memory_equal(r.f.mem, src, 100000);
	/* in place cannot be scheduled ahead */
	struct copy_request q = { COPY_HTOD, COPY_IN_PLACE, src, 0, 10, NULL, COPY_EVERY_CHUNK };
	assert_int_equal(copy_engine_submit(r.e, &q, &j), -EINVAL);
	q.mode = COPY_STAGED;
	q.flags = 0x80;
	assert_int_equal(copy_engine_submit(r.e, &q, &j), -EINVAL);
	free(src);
	rig_down(&r);
}

/* A stream that never runs (a failed context): cancelling the job ends it
 * with the error instead of a hang. */
static void test_ordered_cancel_stuck(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, 1 << 20, 4096, 4, 2, 0, NULL);
	uint8_t *src = malloc(100000);
	assert_non_null(src);
	atomic_store(&r.f.gpu_stuck, true);
	struct copy_job *j = submit_ordered(&r, COPY_HTOD, src, 0, 100000, &arg_ordered);
	assert_int_equal(copy_job_timedwait(j, 20 * 1000 * 1000), 0); /* stuck, as it should be */
	/* Cancel first, then let the stuck stream give up: the other way
	 * round the engine's poll could see the stream fail (-ECANCELED)
	 * before the cancel, and the first error wins (CI saw it once under
	 * ThreadSanitizer on a loaded machine). */
	copy_job_cancel(j, -EIO);
	atomic_store(&r.f.abandoned, true);
	assert_int_equal(copy_job_timedwait(j, 5000000000ull), 1);
	assert_int_equal(copy_job_release(j), -EIO);
	free(src);
	rig_down(&r);
}

/* ---- producers adapting while copying ---- */

/* The decisions alone, on made-up windows. */
static void test_adapt_decisions(void **state)
{
	(void)state;
	struct copy_adapt a;
	copy_adapt_init(&a, 2, 6);
	/* a link that never waits: nothing added */
	for (int i = 0; i < 10; i++)
		assert_int_equal(copy_adapt_window(&a, 0.01, 40.0), 2);
	/* one starved window is not enough, two in a row are */
	assert_int_equal(copy_adapt_window(&a, 0.5, 20.0), 2);
	assert_int_equal(copy_adapt_window(&a, 0.02, 40.0), 2);
	assert_int_equal(copy_adapt_window(&a, 0.5, 20.0), 2);
	assert_int_equal(copy_adapt_window(&a, 0.5, 20.0), 3);
	/* the trial helped and the link still waits: the next one at once */
	assert_int_equal(copy_adapt_window(&a, 0.3, 30.0), 4);
	/* helped, and the link no longer waits: stays */
	assert_int_equal(copy_adapt_window(&a, 0.01, 40.0), 4);
	assert_int_equal(copy_adapt_window(&a, 0.01, 40.0), 4);
	/* starved again; a producer that does not raise the rate goes, and
	 * each next trial waits for twice as many starved windows in a row */
	assert_int_equal(copy_adapt_window(&a, 0.2, 40.0), 4);
	assert_int_equal(copy_adapt_window(&a, 0.2, 40.0), 5);
	assert_int_equal(copy_adapt_window(&a, 0.2, 40.5), 4);
	for (unsigned wait = 2 * COPY_ADAPT_PATIENCE; wait <= 4 * COPY_ADAPT_PATIENCE; wait *= 2) {
		for (unsigned i = 1; i < wait; i++)
			assert_int_equal(copy_adapt_window(&a, 0.9, 10.0), 4);
		assert_int_equal(copy_adapt_window(&a, 0.9, 10.0), 5);
		assert_int_equal(copy_adapt_window(&a, 0.9, 10.0), 4); /* no better: goes */
	}
	assert_int_equal(a.added, 5);
	assert_int_equal(a.removed, 3);
	/* a trial that helps brings the wait back to its start */
	for (unsigned i = 1; i < 8 * COPY_ADAPT_PATIENCE; i++)
		assert_int_equal(copy_adapt_window(&a, 0.9, 10.0), 4);
	assert_int_equal(copy_adapt_window(&a, 0.9, 10.0), 5);
	assert_int_equal(copy_adapt_window(&a, 0.01, 20.0), 5);
	assert_int_equal(a.patience, COPY_ADAPT_PATIENCE);
	/* the ceiling holds */
	copy_adapt_init(&a, 1, 2);
	for (int i = 0; i < 20; i++)
		assert_true(copy_adapt_window(&a, 0.9, 1.0 + i) <= 2);
	assert_int_equal(a.active, 2);
	/* a trial cut short by the job's end stays, unjudged */
	copy_adapt_init(&a, 1, 4);
	copy_adapt_window(&a, 0.9, 1.0);
	assert_int_equal(copy_adapt_window(&a, 0.9, 1.0), 2);
	copy_adapt_job_end(&a);
	assert_int_equal(copy_adapt_window(&a, 0.0, 0.5), 2);
	/* a fixed count never moves */
	copy_adapt_init(&a, 3, 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(copy_adapt_window(&a, 0.9, 1.0), 3);
}

/* A fake link that takes link_us per transfer, one after another: a poll
 * says done once the transfer's time has passed (and moves the bytes then,
 * as f_poll does). */
static struct {
	unsigned us;
	uint64_t free_ns;          /* when the link has finished what it was given */
	uint64_t due_ns[MAX_SLOTS];
} link_time;

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int timed_start(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev, size_t n)
{
	uint64_t t = mono_ns();
	link_time.free_ns = (link_time.free_ns > t ? link_time.free_ns : t) + link_time.us * 1000ull;
	link_time.due_ns[slot % MAX_SLOTS] = link_time.free_ns;
	return f_start_checked(ctx, slot, ticket, dir, host, dev, n);
}

static int timed_poll(void *ctx, unsigned slot, bool block)
{
	uint64_t t = mono_ns(), due = link_time.due_ns[slot % MAX_SLOTS];
	if (t < due) {
		if (!block)
			return 0;
		usleep((useconds_t)((due - t) / 1000 + 1));
	}
	return f_poll(ctx, slot, true);
}

static const struct copy_dma_ops timed_ops = {
	.start = timed_start,
	.poll = timed_poll,
	.check = f_check,
	.job_begin = f_job_begin,
	.job_end = f_job_end,
};

/* One copy each way of n bytes, checked. */
static void copy_both_ways(struct rig *r, size_t n, uint64_t seed)
{
	uint8_t *src = malloc(n), *dst = malloc(n);
	assert_non_null(src);
	assert_non_null(dst);
	fill(src, n, seed);
	struct copy_request q = { COPY_HTOD, COPY_STAGED, src, 0, n, NULL };
	assert_int_equal(copy_engine_copy(r->e, &q), 0);
	assert_memory_equal(r->f.mem, src, n);
	memset(dst, 0, n);
	q = (struct copy_request){ COPY_DTOH, COPY_STAGED, dst, 0, n, NULL };
	assert_int_equal(copy_engine_copy(r->e, &q), 0);
	assert_memory_equal(dst, src, n);
	free(src);
	free(dst);
}

/* Start with one producer, and make it slow (2 ms a chunk) against a link
 * that takes 50 us a chunk: the link waits on it, so the engine puts more
 * producers to work; the copies finish with the right bytes. */
static void test_slow_producer_adds(void **state)
{
	(void)state;
	struct rig r;
	link_time.us = 50;
	link_time.free_ns = 0;
	rig_up_adaptive(&r, 4 << 20, 64 << 10, 8, 1, 0, &timed_ops, 4, 2000);
	copy_both_ways(&r, 4 << 20, 31);
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_int_equal(st.producers_start, 1);
	assert_int_equal(st.producers_max, 4);
	assert_true(st.producers_added >= 1);
	assert_true(st.producers_active >= 2);
	assert_true(st.producers_active <= 4);
	assert_int_equal(st.producers_added - st.producers_removed, st.producers_active - 1);
	assert_int_equal(st.last_job_bytes, 4 << 20);
	assert_true(st.last_job_ns > 0);
	/* later copies start from what was learned */
	copy_both_ways(&r, 1 << 20, 32);
	copy_engine_get_stats(r.e, &st);
	assert_true(st.producers_active >= 2);
	rig_down(&r);
}

/* A slow link (1 ms a chunk) with fast producers: the link never waits on
 * them, so none is added. */
static void test_slow_link_adds_none(void **state)
{
	(void)state;
	struct rig r;
	link_time.us = 1000;
	link_time.free_ns = 0;
	rig_up_adaptive(&r, 2 << 20, 64 << 10, 8, 2, 0, &timed_ops, 4, 0);
	copy_both_ways(&r, 2 << 20, 33);
	struct copy_engine_stats st;
	copy_engine_get_stats(r.e, &st);
	assert_int_equal(st.producers_added, 0);
	assert_int_equal(st.producers_active, 2);
	rig_down(&r);
}

/* ---- reports to gpusysd ---- */

/* A record on fd within ms: its length (into *ret), or -1: none came. */
static ssize_t next_report(int fd, struct gpusys_report *ret, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return -1;
	return recv(fd, ret, sizeof(*ret), MSG_DONTWAIT | MSG_TRUNC);
}

/* The daemon's end of a connection that takes reports: sv[1]; ours, sv[0],
 * is listed as an attachment's (libclient/attach/report.h). */
static void report_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(gpusys_report_conn_add(sv[0], -1), 0);
}

static void report_pair_close(int sv[2])
{
	gpusys_report_conn_remove(sv[0]);
	close(sv[0]);
	close(sv[1]);
}

/* Each copy that succeeded sends exactly one report, with what it did;
 * an empty or refused copy sends none. */
static void test_finished_copy_reports_once(void **state)
{
	(void)state;
	int sv[2];
	struct copy_reporter rep;
	struct rig r;
	report_pair(sv);
	copy_reporter_init(&rep, 0, true); /* device 0: no such attachment, any will do */
	rig_reporter = &rep;
	rig_up(&r, 1 << 20, 4096, 4, 2, 1024, NULL);
	rig_reporter = NULL;

	uint8_t *buf = malloc(100000);
	assert_non_null(buf);
	fill(buf, 100000, 7);
	struct copy_request h2d = { .dir = COPY_HTOD, .mode = COPY_STAGED, .host = buf, .dev = 0, .n = 100000 };
	assert_int_equal(copy_engine_copy(r.e, &h2d), 0);
	struct gpusys_report got;
	assert_int_equal(next_report(sv[1], &got, 2000), (ssize_t)sizeof(got));
	assert_int_equal(got.magic, GPUSYS_REPORT_MAGIC);
	assert_int_equal(got.kind, GPUSYS_REPORT_COPY);
	assert_int_equal(got.length, sizeof(got));
	assert_int_equal(got.direction, 0);
	assert_int_equal(got.bytes, 100000);
	assert_true(got.ns >= 1);
	assert_int_equal(got.producers_open, 2);
	assert_int_equal(got.producers_end, 2);
	assert_int_equal(got.added, 0);
	assert_int_equal(got.taken_back, 0);
	assert_int_equal(got.reserved, 0);
	assert_int_equal(next_report(sv[1], &got, 200), -1); /* one, not two */

	struct copy_request d2h = { .dir = COPY_DTOH, .mode = COPY_STAGED, .host = buf, .dev = 0, .n = 5000 };
	assert_int_equal(copy_engine_copy(r.e, &d2h), 0);
	assert_int_equal(next_report(sv[1], &got, 2000), (ssize_t)sizeof(got));
	assert_int_equal(got.direction, 1);
	assert_int_equal(got.bytes, 5000);

	/* Nothing moved: no report. */
	struct copy_request empty = { .dir = COPY_HTOD, .mode = COPY_STAGED, .host = buf, .dev = 0, .n = 0 };
	assert_int_equal(copy_engine_copy(r.e, &empty), 0);
	struct copy_request past = { .dir = COPY_HTOD, .mode = COPY_STAGED, .host = buf, .dev = (1 << 20) - 10,
				     .n = 100 };
	assert_int_equal(copy_engine_copy(r.e, &past), -EFAULT);
	assert_int_equal(next_report(sv[1], &got, 200), -1);
	assert_int_equal(atomic_load(&rep.sent), 2);
	assert_int_equal(atomic_load(&rep.dropped), 0);

	/* Off (while gpusys_copy_open measures): none either. */
	atomic_store(&rep.on, false);
	assert_int_equal(copy_engine_copy(r.e, &h2d), 0);
	assert_int_equal(next_report(sv[1], &got, 200), -1);
	rig_down(&r);
	free(buf);
	report_pair_close(sv);
}

/* A connection nobody reads: copies go on at full speed, the reports that
 * found no room are dropped and counted, none is lost uncounted. */
static void test_full_connection_drops(void **state)
{
	(void)state;
	int sv[2];
	struct copy_reporter rep;
	struct rig r;
	report_pair(sv);
	copy_reporter_init(&rep, -1, true);
	rig_reporter = &rep;
	rig_up(&r, 1 << 16, 4096, 4, 1, 1024, NULL);
	rig_reporter = NULL;

	uint8_t buf[256];
	memset(buf, 1, sizeof(buf));
	enum { COPIES = 300 };
	struct copy_request h2d = { .dir = COPY_HTOD, .mode = COPY_STAGED, .host = buf, .dev = 0, .n = sizeof(buf) };
	for (int i = 0; i < COPIES; i++)
		assert_int_equal(copy_engine_copy(r.e, &h2d), 0);
	/* The last report is sent after its copy returned: wait for it. */
	for (int i = 0; i < 2000 && atomic_load(&rep.sent) + atomic_load(&rep.dropped) < COPIES; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&rep.sent) + atomic_load(&rep.dropped), COPIES);
	assert_true(atomic_load(&rep.dropped) > 0);
	assert_true(atomic_load(&rep.sent) > 0);
	rig_down(&r);

	/* What came is whole reports, as many as were counted sent. */
	struct gpusys_report got;
	unsigned n = 0;
	while (next_report(sv[1], &got, 0) == (ssize_t)sizeof(got))
		n++;
	assert_int_equal(n, atomic_load(&rep.sent));
	report_pair_close(sv);
}

/* No attachment takes reports: nothing is sent, nothing counted dropped. */
static void test_no_connection_no_report(void **state)
{
	(void)state;
	struct copy_reporter rep;
	struct rig r;
	copy_reporter_init(&rep, -1, true);
	rig_reporter = &rep;
	rig_up(&r, 1 << 16, 4096, 4, 1, 1024, NULL);
	rig_reporter = NULL;
	uint8_t buf[256] = { 0 };
	struct copy_request h2d = { .dir = COPY_HTOD, .mode = COPY_STAGED, .host = buf, .dev = 0, .n = sizeof(buf) };
	assert_int_equal(copy_engine_copy(r.e, &h2d), 0);
	rig_down(&r); /* joins the consumer: its report is done */
	assert_int_equal(atomic_load(&rep.sent), 0);
	assert_int_equal(atomic_load(&rep.dropped), 0);
}

int main(void)
{
	alarm(240); /* a hang fails the run */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_small_size),
		cmocka_unit_test(test_chunk_boundaries),
		cmocka_unit_test(test_large_sizes),
		cmocka_unit_test(test_chunk_for),
		cmocka_unit_test(test_streaming_copies),
		cmocka_unit_test(test_pin_fallback),
		cmocka_unit_test(test_concurrent_callers),
		cmocka_unit_test(test_async_handles),
		cmocka_unit_test(test_destination_too_small),
		cmocka_unit_test(test_dma_failures),
		cmocka_unit_test(test_job_begin_failure),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_ordered_round_trips),
		cmocka_unit_test(test_ordered_many_queued),
		cmocka_unit_test(test_ordered_error_drains),
		cmocka_unit_test(test_ordered_cancel_stuck),
		cmocka_unit_test(test_adapt_decisions),
		cmocka_unit_test(test_slow_producer_adds),
		cmocka_unit_test(test_slow_link_adds_none),
		cmocka_unit_test(test_finished_copy_reports_once),
		cmocka_unit_test(test_full_connection_drops),
		cmocka_unit_test(test_no_connection_no_report),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
