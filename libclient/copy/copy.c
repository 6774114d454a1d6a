/* SPDX-License-Identifier: MIT */
/*
 * libgpusys bulk copies (include/gpusys/copy.h): the copy engine
 * (copy_engine.c) with the CUDA DMA engine as its consumer, the driver's own
 * copy below the size where the engine wins, and the measurements at open
 * that choose producers, chunk and that size.
 *
 * Staged copies queue their DMAs on a stream AT SUBMIT, before any byte is
 * staged: chunk t (the engine's chunk numbers, copy_engine.h) always uses
 * slot b = t % nslots, so the call queues, for each chunk,
 *     cuStreamWaitValue64(host_gen[b] >= t / nslots + 1)   the host says go
 *     cuMemcpyHtoDAsync / DtoHAsync with staging buffer b
 *     cuStreamWriteValue64(dev_gen[b] = t / nslots + 1)    the GPU says done
 * and the engine's consumer thread only flips host_gen (its "start") and
 * reads dev_gen (its "poll"), with no CUDA call. Asynchronous copies queue
 * on the caller's stream, so they run after the work already there and
 * before the work queued later; synchronous ones on the engine's own
 * stream, after an event on the legacy default stream (cudaMemcpy's order).
 *
 * Why so: a first version issued each DMA from the consumer thread on its
 * own stream and made the caller's stream wait for a "job done" word. It
 * hung on the H100: a stream blocked on a word the host writes only after
 * CUDA work the driver cannot see is the deadlock the CUDA documentation
 * warns of (two streams can share a hardware queue, and some calls
 * synchronise the context). Here a stream waits only for host threads that
 * make no CUDA call, and for its own earlier commands; every submitter
 * queues its schedule under one lock, so that a hardware queue shared by two
 * streams holds them in the order the engine serves them. Every scheduled
 * chunk passes the engine even after an error (COPY_EVERY_CHUNK), so a
 * stream never waits forever; the handle reports the error.
 *
 * Pinned in place (synchronous only): a chunk's DMA can only be queued once
 * its pages are pinned, so those jobs issue each DMA from the consumer
 * thread on the engine's stream, with an event per slot, and hold the
 * submit lock until done: no schedule can be queued behind them meanwhile.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "gpusys/copy.h"
#include "copy_bytes.h"
#include "copy_engine.h"
#include "copy_report.h"
#include "../common/cuda_driver.h"

#define DEFAULT_CHUNK ((size_t)4 << 20)   /* best of 4 and 16 MiB in the prototype */
#define MIN_CHUNK ((size_t)256 << 10)      /* a job's chunks: size / producers, not below */
#define CAL_BYTES ((size_t)16 << 20)       /* threshold and link measurements */
#define CAL_THREAD_BYTES ((size_t)4 << 20) /* per thread, host copy rates */

struct gpusys_copy_handle {
	gpusys_copy_t *c;
	struct copy_job *job; /* the engine's job, or NULL (driver or empty) */
	CUevent ev;           /* after the copy on its stream (in place: before it,
				 on the legacy stream) */
	bool in_place;        /* DMAs issued by the consumer thread */
	atomic_int abandoned; /* the stream failed: stop waiting for the GPU */
};

/* Per slot, a word each way on its own cache line, in pinned host memory
 * the device maps (a stream waits on host_gen and writes dev_gen). */
struct slot_flags {
	uint64_t host_gen;
	char pad0[56];
	uint64_t dev_gen;
	char pad1[56];
};

struct gpusys_copy {
	const struct gpusys_cuda *cu;
	CUdevice cudev;
	CUcontext ctx;
	CUstream stream;          /* synchronous copies */
	CUevent *slot_ev;         /* in place: a slot's DMA done */
	void **bufs;
	unsigned nbuf, nprod;
	bool streaming; /* producers copy into staging with streaming stores (copy_bytes.h) */
	size_t chunk;
	size_t page;
	struct copy_engine *engine;
	struct slot_flags *flags; /* nbuf of them */
	CUdeviceptr flags_dev;
	uint64_t *want;           /* consumer's: dev_gen that ends slot's transfer */
	struct gpusys_copy_handle *cur; /* consumer's: the job running */
	pthread_mutex_t submit_lk; /* tickets and schedules queued in one order */
	size_t min_bytes[2];
	enum gpusys_copy_path large_path[2];
	atomic_int forced;
	struct copy_reporter reporter; /* finished copies, told to gpusysd */
	struct gpusys_copy_info info;
};

static int cu_err(const gpusys_copy_t *c, CUresult r, const char *what)
{
	char buf[256];
	if (getenv("GPUSYS_DEBUG"))
		fprintf(stderr, "libgpusys copy: %s\n", gpusys_cuda_describe(c->cu, r, what, buf, sizeof(buf)));
	return gpusys_cuda_errno(r);
}

static void ctx_push(const gpusys_copy_t *c)
{
	c->cu->cuCtxPushCurrent(c->ctx);
}

static void ctx_pop(const gpusys_copy_t *c)
{
	CUcontext x;
	c->cu->cuCtxPopCurrent(&x);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- the consumer side ---- */

static int op_start(void *ctx, unsigned slot, uint64_t ticket, enum copy_dir dir, void *host, uint64_t dev, size_t n)
{
	gpusys_copy_t *c = ctx;
	if (!c->cur->in_place) {
		/* The stream's DMA for this chunk is queued already: let it go. */
		uint64_t gen = ticket / c->nbuf + 1;
		c->want[slot] = gen;
		__atomic_store_n(&c->flags[slot].host_gen, gen, __ATOMIC_RELEASE);
		return 0;
	}
	CUresult r = dir == COPY_HTOD ? c->cu->cuMemcpyHtoDAsync((CUdeviceptr)dev, host, n, c->stream)
				      : c->cu->cuMemcpyDtoHAsync(host, (CUdeviceptr)dev, n, c->stream);
	if (r != CUDA_SUCCESS)
		return cu_err(c, r, dir == COPY_HTOD ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync");
	if ((r = c->cu->cuEventRecord(c->slot_ev[slot], c->stream)) != CUDA_SUCCESS)
		return cu_err(c, r, "cuEventRecord");
	return 0;
}

static int op_poll(void *ctx, unsigned slot, bool block)
{
	gpusys_copy_t *c = ctx;
	if (!c->cur->in_place) {
		/* No CUDA call (see the top of the file). A blocking poll still
		 * returns within ~50 us: an earlier chunk may not have been
		 * started yet, and the stream runs them in order. */
		for (unsigned spins = 0;; spins++) {
			if (atomic_load(&c->cur->abandoned))
				return -ECANCELED;
			if (__atomic_load_n(&c->flags[slot].dev_gen, __ATOMIC_ACQUIRE) >= c->want[slot])
				return 1;
			if (!block || spins >= 50)
				return 0;
			struct timespec ts = { 0, 1000 };
			nanosleep(&ts, NULL);
		}
	}
	CUresult r = block ? c->cu->cuEventSynchronize(c->slot_ev[slot]) : c->cu->cuEventQuery(c->slot_ev[slot]);
	if (r == CUDA_SUCCESS)
		return 1;
	if (r == CUDA_ERROR_NOT_READY && !block)
		return 0;
	return cu_err(c, r, "a chunk's DMA");
}

/* The device side must be one allocation at least n bytes long. */
static int op_check(void *ctx, enum copy_dir dir, uint64_t dev, size_t n)
{
	gpusys_copy_t *c = ctx;
	CUdeviceptr base = 0;
	size_t size = 0;
	(void)dir;
	if (c->cu->cuMemGetAddressRange(&base, &size, (CUdeviceptr)dev) != CUDA_SUCCESS)
		return -EFAULT;
	if (dev < base || n > size - (size_t)(dev - base))
		return -EFAULT;
	return 0;
}

static int op_pin(void *ctx, void *host, size_t n)
{
	gpusys_copy_t *c = ctx;
	uintptr_t lo = (uintptr_t)host / c->page * c->page;
	uintptr_t hi = ((uintptr_t)host + n + c->page - 1) / c->page * c->page;
	CUresult r = c->cu->cuMemHostRegister((void *)lo, hi - lo, 0);
	return r == CUDA_SUCCESS ? 0 : gpusys_cuda_errno(r); /* quiet: the engine stages instead */
}

static void op_unpin(void *ctx, void *host, size_t n)
{
	gpusys_copy_t *c = ctx;
	(void)n;
	CUresult r = c->cu->cuMemHostUnregister((void *)((uintptr_t)host / c->page * c->page));
	if (r != CUDA_SUCCESS)
		cu_err(c, r, "cuMemHostUnregister");
}

static int op_job_begin(void *ctx, void *arg)
{
	gpusys_copy_t *c = ctx;
	struct gpusys_copy_handle *h = arg;
	c->cur = h;
	if (!h->in_place)
		return 0; /* its stream orders it */
	CUresult r = c->cu->cuStreamWaitEvent(c->stream, h->ev, 0);
	return r == CUDA_SUCCESS ? 0 : cu_err(c, r, "cuStreamWaitEvent");
}

static void op_job_end(void *ctx, void *arg, int err)
{
	gpusys_copy_t *c = ctx;
	(void)arg, (void)err; /* the handle reports err */
	c->cur = NULL;
}

static int op_thread_start(void *ctx, enum copy_thread_role role)
{
	gpusys_copy_t *c = ctx;
	(void)role;
	CUresult r = c->cu->cuCtxSetCurrent(c->ctx);
	return r == CUDA_SUCCESS ? 0 : cu_err(c, r, "cuCtxSetCurrent");
}

static const struct copy_dma_ops cuda_dma_ops = {
	.start = op_start,
	.poll = op_poll,
	.check = op_check,
	.pin = op_pin,
	.unpin = op_unpin,
	.job_begin = op_job_begin,
	.job_end = op_job_end,
	.thread_start = op_thread_start,
};

/* ---- copies ---- */

static enum copy_dir dir_of(int htod)
{
	return htod ? COPY_HTOD : COPY_DTOH;
}

static enum gpusys_copy_path choose(gpusys_copy_t *c, enum copy_dir dir, const void *host, size_t n)
{
	enum gpusys_copy_path forced = (enum gpusys_copy_path)atomic_load_explicit(&c->forced, memory_order_relaxed);
	if (forced != GPUSYS_COPY_AUTO)
		return forced;
	if (n < c->min_bytes[dir])
		return GPUSYS_COPY_DRIVER;
	unsigned int flags;
	if (c->cu->cuMemHostGetFlags(&flags, (void *)host) == CUDA_SUCCESS)
		return GPUSYS_COPY_DRIVER; /* already pinned: the driver DMAs it directly */
	return c->large_path[dir];
}

/* The stream's waits for chunks already queued can no longer be met by
 * the engine (the job was cancelled): meet them here, so the stream goes on
 * (those chunks move stale bytes; the handle reports the error). */
static void release_schedule(gpusys_copy_t *c, struct copy_job *job, size_t queued)
{
	uint64_t first;
	size_t nchunks;
	copy_job_geometry(job, &first, &nchunks);
	for (size_t i = 0; i < queued && i < nchunks; i++) {
		uint64_t t = first + i, gen = t / c->nbuf + 1;
		uint64_t *w = &c->flags[t % c->nbuf].host_gen;
		uint64_t old = __atomic_load_n(w, __ATOMIC_RELAXED);
		while (old < gen && !__atomic_compare_exchange_n(w, &old, gen, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			;
	}
}

/* Staged through the engine: submit, queue the job's schedule on stream,
 * an event after it. Called with the context pushed. */
static int engine_staged(gpusys_copy_t *c, struct gpusys_copy_handle *h, enum copy_dir dir, void *host,
			 CUdeviceptr dev, size_t n, CUstream stream)
{
	const struct gpusys_cuda *cu = c->cu;
	CUresult r = CUDA_SUCCESS;
	int rc;
	if ((r = cu->cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		h->ev = NULL;
		return cu_err(c, r, "cuEventCreate");
	}
	struct copy_request req = {
		.dir = dir,
		.mode = COPY_STAGED,
		.host = host,
		.dev = (uint64_t)dev,
		.n = n,
		.job_arg = h,
		.flags = COPY_EVERY_CHUNK,
	};
	pthread_mutex_lock(&c->submit_lk);
	if ((rc = copy_engine_submit(c->engine, &req, &h->job)) < 0) {
		pthread_mutex_unlock(&c->submit_lk);
		h->job = NULL;
		return rc;
	}
	uint64_t first;
	size_t nchunks, i;
	copy_job_geometry(h->job, &first, &nchunks);
	for (i = 0; i < nchunks; i++) {
		void *hp;
		uint64_t d, t = first + i, gen = t / c->nbuf + 1;
		size_t len;
		unsigned b = (unsigned)(t % c->nbuf);
		copy_job_chunk(h->job, i, &hp, &d, &len);
		CUdeviceptr fl = c->flags_dev + (CUdeviceptr)b * sizeof(struct slot_flags);
		r = cu->cuStreamWaitValue64(stream, fl + offsetof(struct slot_flags, host_gen), gen,
					    CU_STREAM_WAIT_VALUE_GEQ);
		if (r == CUDA_SUCCESS)
			r = dir == COPY_HTOD ? cu->cuMemcpyHtoDAsync((CUdeviceptr)d, c->bufs[b], len, stream)
					     : cu->cuMemcpyDtoHAsync(c->bufs[b], (CUdeviceptr)d, len, stream);
		if (r == CUDA_SUCCESS)
			r = cu->cuStreamWriteValue64(stream, fl + offsetof(struct slot_flags, dev_gen), gen, 0);
		if (r != CUDA_SUCCESS)
			break;
	}
	if (r == CUDA_SUCCESS)
		r = cu->cuEventRecord(h->ev, stream);
	pthread_mutex_unlock(&c->submit_lk);
	if (r != CUDA_SUCCESS) {
		/* Only with a broken context or stream. The job ends after every
		 * earlier one (FIFO); then the waits already queued are met by
		 * hand. NOTE: a device-to-host chunk so released may still write
		 * into a staging buffer a later job uses; the context is most
		 * likely lost anyway. */
		rc = cu_err(c, r, "queueing a copy");
		atomic_store(&h->abandoned, 1);
		copy_job_cancel(h->job, rc);
		copy_job_wait(h->job);
		release_schedule(c, h->job, i + 1);
		copy_job_release(h->job);
		h->job = NULL;
		return rc;
	}
	return 0;
}

/* Wait for an engine job, watching its stream: one that failed never
 * reaches our chunks, so the job is then stopped. Frees the job. */
static int wait_job(gpusys_copy_t *c, struct gpusys_copy_handle *h)
{
	while (!copy_job_timedwait(h->job, 2000000)) {
		if (h->in_place)
			continue; /* the consumer's own CUDA calls see errors */
		ctx_push(c);
		CUresult r = c->cu->cuEventQuery(h->ev);
		ctx_pop(c);
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
			atomic_store(&h->abandoned, 1);
			copy_job_cancel(h->job, cu_err(c, r, "the copy's stream"));
		}
	}
	int rc = copy_job_release(h->job);
	h->job = NULL;
	return rc;
}

/* Pinned in place, synchronous: DMAs from the consumer thread; the submit
 * lock is held to the end (see the top of the file). Context pushed. */
static int engine_in_place(gpusys_copy_t *c, enum copy_dir dir, void *host, CUdeviceptr dev, size_t n)
{
	const struct gpusys_cuda *cu = c->cu;
	struct gpusys_copy_handle h = { .c = c, .in_place = true };
	CUresult r;
	int rc;
	if ((r = cu->cuEventCreate(&h.ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
		return cu_err(c, r, "cuEventCreate");
	if ((r = cu->cuEventRecord(h.ev, NULL)) != CUDA_SUCCESS) { /* after the legacy stream's work */
		cu->cuEventDestroy(h.ev);
		return cu_err(c, r, "cuEventRecord");
	}
	struct copy_request req = {
		.dir = dir,
		.mode = COPY_IN_PLACE,
		.host = host,
		.dev = (uint64_t)dev,
		.n = n,
		.job_arg = &h,
	};
	pthread_mutex_lock(&c->submit_lk);
	rc = copy_engine_submit(c->engine, &req, &h.job);
	if (rc == 0)
		rc = wait_job(c, &h);
	pthread_mutex_unlock(&c->submit_lk);
	cu->cuEventDestroy(h.ev);
	return rc;
}

/* One copy. stream: where an asynchronous one is ordered (NULL: legacy
 * default). ret NULL: synchronous. */
static int copy(gpusys_copy_t *c, enum copy_dir dir, void *host, CUdeviceptr dev, size_t n, CUstream stream,
		enum gpusys_copy_path path, gpusys_copy_handle_t **ret)
{
	CUresult r;
	int rc;

	if (!c || (n && (!host || !dev)))
		return -EINVAL;
	const struct gpusys_cuda *cu = c->cu;
	if (n == 0) {
		if (ret && !(*ret = calloc(1, sizeof(**ret))))
			return -ENOMEM;
		if (ret)
			(*ret)->c = c;
		return 0;
	}
	ctx_push(c);
	if (path == GPUSYS_COPY_AUTO)
		path = choose(c, dir, host, n);
	if (ret && path == GPUSYS_COPY_IN_PLACE)
		path = GPUSYS_COPY_STAGED; /* a DMA from pages not pinned yet cannot be queued */
	if ((rc = op_check(c, dir, dev, n)) < 0) {
		ctx_pop(c);
		return rc;
	}

	if (!ret) {
		switch (path) {
		case GPUSYS_COPY_DRIVER:
			r = dir == COPY_HTOD ? cu->cuMemcpyHtoD(dev, host, n) : cu->cuMemcpyDtoH(host, dev, n);
			rc = r == CUDA_SUCCESS ? 0 : cu_err(c, r, "cuMemcpy");
			break;
		case GPUSYS_COPY_IN_PLACE:
			rc = engine_in_place(c, dir, host, dev, n);
			break;
		default: {
			/* On our stream, after the legacy stream's work. */
			struct gpusys_copy_handle h = { .c = c };
			CUevent before;
			if ((r = cu->cuEventCreate(&before, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
				rc = cu_err(c, r, "cuEventCreate");
				break;
			}
			if ((r = cu->cuEventRecord(before, NULL)) != CUDA_SUCCESS ||
			    (r = cu->cuStreamWaitEvent(c->stream, before, 0)) != CUDA_SUCCESS)
				rc = cu_err(c, r, "ordering after the legacy stream");
			else
				rc = engine_staged(c, &h, dir, host, dev, n, c->stream);
			cu->cuEventDestroy(before);
			ctx_pop(c);
			if (rc == 0)
				rc = wait_job(c, &h);
			ctx_push(c);
			if (h.ev)
				cu->cuEventDestroy(h.ev);
		}
		}
		ctx_pop(c);
		return rc;
	}

	struct gpusys_copy_handle *h = calloc(1, sizeof(*h));
	if (!h) {
		ctx_pop(c);
		return -ENOMEM;
	}
	h->c = c;
	if (path == GPUSYS_COPY_DRIVER) {
		r = dir == COPY_HTOD ? cu->cuMemcpyHtoDAsync(dev, host, n, stream)
				     : cu->cuMemcpyDtoHAsync(host, dev, n, stream);
		if (r != CUDA_SUCCESS)
			rc = cu_err(c, r, "cuMemcpyAsync");
		else if ((r = cu->cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
			rc = cu_err(c, r, "cuEventCreate"), h->ev = NULL;
		else if ((r = cu->cuEventRecord(h->ev, stream)) != CUDA_SUCCESS)
			rc = cu_err(c, r, "cuEventRecord");
		if (rc < 0)
			cu->cuStreamSynchronize(stream); /* the copy may be queued: let it end */
	} else {
		rc = engine_staged(c, h, dir, host, dev, n, stream);
	}
	if (rc < 0) {
		if (h->ev)
			cu->cuEventDestroy(h->ev);
		free(h);
		ctx_pop(c);
		return rc;
	}
	ctx_pop(c);
	*ret = h;
	return 0;
}

int gpusys_memcpy_htod(gpusys_copy_t *c, void *dst, const void *src, size_t n)
{
	return copy(c, dir_of(1), (void *)src, (CUdeviceptr)(uintptr_t)dst, n, NULL, GPUSYS_COPY_AUTO, NULL);
}

int gpusys_memcpy_dtoh(gpusys_copy_t *c, void *dst, const void *src, size_t n)
{
	return copy(c, dir_of(0), dst, (CUdeviceptr)(uintptr_t)src, n, NULL, GPUSYS_COPY_AUTO, NULL);
}

int gpusys_memcpy_htod_async(gpusys_copy_t *c, void *dst, const void *src, size_t n, void *stream,
			     gpusys_copy_handle_t **ret)
{
	if (!ret)
		return -EINVAL;
	return copy(c, dir_of(1), (void *)src, (CUdeviceptr)(uintptr_t)dst, n, (CUstream)stream, GPUSYS_COPY_AUTO, ret);
}

int gpusys_memcpy_dtoh_async(gpusys_copy_t *c, void *dst, const void *src, size_t n, void *stream,
			     gpusys_copy_handle_t **ret)
{
	if (!ret)
		return -EINVAL;
	return copy(c, dir_of(0), dst, (CUdeviceptr)(uintptr_t)src, n, (CUstream)stream, GPUSYS_COPY_AUTO, ret);
}

int gpusys_copy_test(gpusys_copy_handle_t *h)
{
	if (!h)
		return -EINVAL;
	if (h->job)
		return copy_job_test(h->job);
	if (!h->ev)
		return 1;
	ctx_push(h->c);
	CUresult r = h->c->cu->cuEventQuery(h->ev);
	ctx_pop(h->c);
	return r == CUDA_ERROR_NOT_READY ? 0 : 1; /* an error: done, wait says which */
}

int gpusys_copy_wait(gpusys_copy_handle_t *h)
{
	if (!h)
		return -EINVAL;
	gpusys_copy_t *c = h->c;
	int rc = 0;
	if (h->job) {
		rc = wait_job(c, h);
	} else if (h->ev) {
		ctx_push(c);
		CUresult r = c->cu->cuEventSynchronize(h->ev);
		if (r != CUDA_SUCCESS)
			rc = cu_err(c, r, "cuEventSynchronize");
		ctx_pop(c);
	}
	if (h->ev) {
		ctx_push(c);
		c->cu->cuEventDestroy(h->ev);
		ctx_pop(c);
	}
	free(h);
	return rc;
}

void gpusys_copy_set_path(gpusys_copy_t *c, enum gpusys_copy_path path)
{
	atomic_store(&c->forced, (int)path);
}

void gpusys_copy_get_info(gpusys_copy_t *c, struct gpusys_copy_info *ret)
{
	*ret = c->info;
	struct copy_engine_stats st;
	copy_engine_get_stats(c->engine, &st);
	ret->chunks_in_place = st.chunks_in_place;
	ret->pin_fallbacks = st.pin_fallbacks;
	ret->producers_now = st.producers_active;
	ret->producers_max = st.producers_max;
	ret->producers_added = st.producers_added;
	ret->producers_removed = st.producers_removed;
	ret->last_copy_gbps = st.last_job_ns ? (double)st.last_job_bytes / (double)st.last_job_ns : 0;
	ret->reports_sent = atomic_load(&c->reporter.sent);
	ret->reports_dropped = atomic_load(&c->reporter.dropped);
}

/* ---- measurements at open ---- */

struct rate_run {
	pthread_mutex_t lk;
	pthread_cond_t cv;
	unsigned ready, done;
	bool go;
	bool streaming; /* copy as the producers copy into staging */
};

struct rate_thread {
	char *src, *dst;
	size_t n;
	struct rate_run *run;
};

static void *rate_main(void *arg)
{
	struct rate_thread *t = arg;
	struct rate_run *run = t->run;
	memset(t->src, 1, t->n); /* fault the pages in before the clock runs */
	memset(t->dst, 2, t->n);
	pthread_mutex_lock(&run->lk);
	run->ready++;
	pthread_cond_broadcast(&run->cv);
	while (!run->go)
		pthread_cond_wait(&run->cv, &run->lk);
	pthread_mutex_unlock(&run->lk);
	for (int i = 0; i < 3; i++)
		copy_into_staging(t->dst, t->src, t->n, run->streaming);
	pthread_mutex_lock(&run->lk);
	run->done++;
	pthread_cond_broadcast(&run->cv);
	pthread_mutex_unlock(&run->lk);
	return NULL;
}

/* GB/s of k threads each copying its own region of mem three times, as
 * producers copy into staging (pages touched first; best of 2 runs). 0 if
 * threads cannot start. */
static double host_copy_rate(char *mem, unsigned k, bool streaming)
{
	double best = 0;
	struct rate_thread *t = calloc(k, sizeof(*t));
	pthread_t *th = calloc(k, sizeof(*th));
	for (int rep = 0; rep < 2 && t && th; rep++) {
		struct rate_run run = { .lk = PTHREAD_MUTEX_INITIALIZER,
					.cv = PTHREAD_COND_INITIALIZER,
					.streaming = streaming };
		unsigned started = 0;
		for (unsigned i = 0; i < k; i++) {
			t[i] = (struct rate_thread){ mem + 2 * i * CAL_THREAD_BYTES, mem + (2 * i + 1) * CAL_THREAD_BYTES,
						     CAL_THREAD_BYTES, &run };
			if (pthread_create(&th[i], NULL, rate_main, &t[i]) != 0)
				break;
			started++;
		}
		pthread_mutex_lock(&run.lk);
		while (run.ready < started)
			pthread_cond_wait(&run.cv, &run.lk);
		double t0 = now_s();
		run.go = true;
		pthread_cond_broadcast(&run.cv);
		while (run.done < started)
			pthread_cond_wait(&run.cv, &run.lk);
		double dt = now_s() - t0;
		pthread_mutex_unlock(&run.lk);
		for (unsigned i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		double rate = started == k ? 3.0 * (double)CAL_THREAD_BYTES * k / dt / 1e9 : 0;
		if (rate > best)
			best = rate;
	}
	free(t);
	free(th);
	return best;
}

/* Producers: the fewest threads that reach 95% of the best
 * min(host copy rate, link) — the paper's two conditions: enough threads to
 * cover the link, no more than the memory bus rewards. */
static unsigned choose_producers(gpusys_copy_t *c, double link, unsigned maxk)
{
	static const unsigned ks[] = { 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64 };
	double eff[sizeof(ks) / sizeof(ks[0]) + 1];
	unsigned kk[sizeof(ks) / sizeof(ks[0]) + 1], n = 0;
	char *mem = malloc(2 * (size_t)maxk * CAL_THREAD_BYTES);
	if (!mem)
		return maxk < 8 ? maxk : 8;
	for (unsigned i = 0; i < sizeof(ks) / sizeof(ks[0]) && ks[i] < maxk; i++)
		kk[n++] = ks[i];
	kk[n++] = maxk;
	double best = 0;
	for (unsigned i = 0; i < n; i++) {
		double r = host_copy_rate(mem, kk[i], c->streaming);
		if (kk[i] == 1)
			c->info.host_copy_gbps_1 = r;
		eff[i] = r < link || link <= 0 ? r : link;
		if (eff[i] > best)
			best = eff[i];
	}
	free(mem);
	for (unsigned i = 0; i < n; i++)
		if (eff[i] >= 0.95 * best) {
			c->info.host_copy_gbps_n = eff[i];
			return kk[i];
		}
	return maxk;
}

/* Seconds of the best of 3 copies by path. */
static double time_copy(gpusys_copy_t *c, enum copy_dir dir, void *host, CUdeviceptr dev, size_t n,
			enum gpusys_copy_path path)
{
	double best = 1e9;
	for (int i = 0; i < 3; i++) {
		double t0 = now_s();
		if (copy(c, dir, host, dev, n, NULL, path, NULL) < 0)
			return 1e9;
		double t = now_s() - t0;
		if (t < best)
			best = t;
	}
	return best;
}

/* The smallest size from which the engine beats the driver at every larger
 * size measured; and whether pinning in place beats staging at the top. */
static void choose_thresholds(gpusys_copy_t *c, void *host, CUdeviceptr dev)
{
	static const size_t sizes[] = { 256 << 10, 1 << 20, 4 << 20, 16 << 20 };
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	for (int d = 0; d < 2; d++) {
		enum copy_dir dir = d ? COPY_DTOH : COPY_HTOD;
		bool wins[NS];
		for (int i = 0; i < NS; i++)
			wins[i] = time_copy(c, dir, host, dev, sizes[i], GPUSYS_COPY_STAGED) <
				  time_copy(c, dir, host, dev, sizes[i], GPUSYS_COPY_DRIVER);
		size_t min = SIZE_MAX;
		for (int i = NS - 1; i >= 0 && wins[i]; i--)
			min = sizes[i];
		if (c->min_bytes[d] == 0)
			c->min_bytes[d] = min;
		double st = time_copy(c, dir, host, dev, CAL_BYTES, GPUSYS_COPY_STAGED);
		double ip = time_copy(c, dir, host, dev, CAL_BYTES, GPUSYS_COPY_IN_PLACE);
		c->large_path[d] = ip < st ? GPUSYS_COPY_IN_PLACE : GPUSYS_COPY_STAGED;
	}
}

static size_t env_size(const char *name)
{
	const char *v = getenv(name);
	return v ? (size_t)strtoull(v, NULL, 0) : 0;
}

static void release_copy(gpusys_copy_t *c)
{
	const struct gpusys_cuda *cu = c->cu;
	if (c->engine)
		copy_engine_destroy(c->engine);
	if (c->ctx) {
		ctx_push(c);
		for (unsigned i = 0; c->bufs && i < c->nbuf; i++)
			if (c->bufs[i])
				cu->cuMemFreeHost(c->bufs[i]);
		for (unsigned i = 0; c->slot_ev && i < c->nbuf; i++)
			if (c->slot_ev[i])
				cu->cuEventDestroy(c->slot_ev[i]);
		if (c->flags)
			cu->cuMemFreeHost(c->flags);
		if (c->stream)
			cu->cuStreamDestroy(c->stream);
		ctx_pop(c);
		cu->cuDevicePrimaryCtxRelease(c->cudev);
	}
	free(c->bufs);
	free(c->slot_ev);
	free(c->want);
	pthread_mutex_destroy(&c->submit_lk);
	free(c);
}

int gpusys_copy_open(const struct gpusys_copy_options *opts, gpusys_copy_t **ret)
{
	struct gpusys_copy_options o = { 0 };
	const struct gpusys_cuda *cu;
	char msg[256];
	CUresult r;
	int rc;

	if (opts)
		o = *opts;
	if (!ret || o.path > GPUSYS_COPY_IN_PLACE)
		return -EINVAL;
	if ((rc = gpusys_cuda_probe(o.cuda_device, &cu, msg, sizeof(msg))) < 0) {
		if (getenv("GPUSYS_DEBUG"))
			fprintf(stderr, "libgpusys copy: %s\n", msg);
		return rc;
	}
	gpusys_copy_t *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cu = cu;
	pthread_mutex_init(&c->submit_lk, NULL);
	/* Off until the measurements below are done: those copies are
	 * open's, not the program's. */
	copy_reporter_init(&c->reporter, o.cuda_device, false);
	long pg = sysconf(_SC_PAGESIZE);
	c->page = pg > 0 ? (size_t)pg : 4096;
	if ((r = cu->cuDeviceGet(&c->cudev, o.cuda_device)) != CUDA_SUCCESS ||
	    (r = cu->cuDevicePrimaryCtxRetain(&c->ctx, c->cudev)) != CUDA_SUCCESS) {
		c->ctx = NULL;
		rc = cu_err(c, r, "primary context");
		goto fail;
	}
	ctx_push(c);

	/* Streaming stores into staging: off unless asked; two interleaved
	 * pairs of runs on an H200 showed no consistent gain (bench/RESULTS.md,
	 * "Twelfth session"). */
	const char *sv = getenv("GPUSYS_COPY_STREAMING");
	c->streaming = copy_streaming_available() && sv && strcmp(sv, "1") == 0;
	/* Options, then the environment, then measured or default. */
	if (!o.chunk_bytes)
		o.chunk_bytes = env_size("GPUSYS_COPY_CHUNK");
	if (!o.buffers)
		o.buffers = (unsigned)env_size("GPUSYS_COPY_BUFFERS");
	if (!o.producers)
		o.producers = (unsigned)env_size("GPUSYS_COPY_PRODUCERS");
	if (!o.max_producers)
		o.max_producers = (unsigned)env_size("GPUSYS_COPY_MAX_PRODUCERS");
	if (!o.min_engine_bytes)
		o.min_engine_bytes = env_size("GPUSYS_COPY_MIN_BYTES");
	const char *p = getenv("GPUSYS_COPY_PATH");
	if (p && o.path == GPUSYS_COPY_AUTO)
		o.path = !strcasecmp(p, "driver") ? GPUSYS_COPY_DRIVER
			 : !strcasecmp(p, "staged") ? GPUSYS_COPY_STAGED
			 : !strcasecmp(p, "in-place") ? GPUSYS_COPY_IN_PLACE
						      : GPUSYS_COPY_AUTO;
	bool calibrate = !(o.flags & GPUSYS_COPY_NO_CALIBRATION);
	c->chunk = o.chunk_bytes ? (o.chunk_bytes + c->page - 1) / c->page * c->page : DEFAULT_CHUNK;
	c->min_bytes[0] = c->min_bytes[1] = o.min_engine_bytes;
	c->large_path[0] = c->large_path[1] = GPUSYS_COPY_STAGED;
	atomic_store(&c->forced, (int)o.path);

	if ((r = cu->cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		c->stream = NULL;
		rc = cu_err(c, r, "cuStreamCreate");
		goto fail_pop;
	}
	/* Scratch for the measurements: pinned and pageable host, device. */
	double t_cal = now_s();
	void *pinned = NULL, *pageable = NULL;
	CUdeviceptr scratch = 0;
	if (calibrate) {
		if (cu->cuMemHostAlloc(&pinned, CAL_BYTES, 0) != CUDA_SUCCESS)
			pinned = NULL;
		if (cu->cuMemAlloc(&scratch, CAL_BYTES) != CUDA_SUCCESS)
			scratch = 0;
		pageable = malloc(CAL_BYTES);
		if (!pinned || !scratch || !pageable)
			calibrate = false;
		else
			memset(pageable, 3, CAL_BYTES);
	}
	if (calibrate) {
		double best = 1e9;
		for (int i = 0; i < 3; i++) {
			double t0 = now_s();
			if (cu->cuMemcpyHtoD(scratch, pinned, CAL_BYTES) != CUDA_SUCCESS)
				break;
			double t = now_s() - t0;
			best = t < best ? t : best;
		}
		c->info.link_gbps = best < 1e9 ? (double)CAL_BYTES / best / 1e9 : 0;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* One core for the consumer; the caller usually waits. */
	unsigned maxk = ncpu > 2 ? (unsigned)ncpu - 1 : 1;
	c->nprod = o.producers ? o.producers : calibrate ? choose_producers(c, c->info.link_gbps, maxk)
					     : (maxk < 8 ? maxk : 8);
	/* The count measured at open can be short (the DMA's own memory
	 * traffic is not in the measurement): let the engine add producers
	 * up to the cores less one. A count given is a fixed count. */
	unsigned maxp = o.max_producers ? o.max_producers : o.producers ? o.producers : maxk;
	if (maxp < c->nprod)
		maxp = c->nprod;
	/* Two buffers per producer as before; growing producers need one each
	 * and the link a few queued, not two each. */
	unsigned grown = maxp + 4 < 2 * maxp ? maxp + 4 : 2 * maxp;
	c->nbuf = o.buffers ? o.buffers : 2 * c->nprod > grown ? 2 * c->nprod : grown;
	if (c->nbuf < 2)
		c->nbuf = 2;

	c->bufs = calloc(c->nbuf, sizeof(void *));
	c->slot_ev = calloc(c->nbuf, sizeof(CUevent));
	c->want = calloc(c->nbuf, sizeof(uint64_t));
	if (!c->bufs || !c->slot_ev || !c->want) {
		rc = -ENOMEM;
		goto fail_cal;
	}
	/* The slots' go and done words for stream-ordered copies. */
	if ((r = cu->cuMemHostAlloc((void **)&c->flags, c->nbuf * sizeof(struct slot_flags),
				    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS) {
		c->flags = NULL;
		rc = cu_err(c, r, "cuMemHostAlloc(flags)");
		goto fail_cal;
	}
	memset(c->flags, 0, c->nbuf * sizeof(struct slot_flags));
	if ((r = cu->cuMemHostGetDevicePointer(&c->flags_dev, c->flags, 0)) != CUDA_SUCCESS) {
		rc = cu_err(c, r, "cuMemHostGetDevicePointer");
		goto fail_cal;
	}
	for (unsigned i = 0; i < c->nbuf; i++) {
		if ((r = cu->cuMemHostAlloc(&c->bufs[i], c->chunk, 0)) != CUDA_SUCCESS) {
			c->bufs[i] = NULL;
			rc = cu_err(c, r, "cuMemHostAlloc(staging)");
			goto fail_cal;
		}
		if ((r = cu->cuEventCreate(&c->slot_ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			c->slot_ev[i] = NULL;
			rc = cu_err(c, r, "cuEventCreate");
			goto fail_cal;
		}
	}
	struct copy_engine_config cfg = {
		.ops = &cuda_dma_ops,
		.ctx = c,
		.buffers = c->bufs,
		.nslots = c->nbuf,
		.buffer_bytes = c->chunk,
		.min_chunk = c->chunk < MIN_CHUNK ? c->chunk : MIN_CHUNK,
		.nproducers = c->nprod,
		.page_size = c->page,
		.max_producers = maxp,
		.slow_producer_us = (unsigned)env_size("GPUSYS_COPY_SLOW_PRODUCER_US"),
		.streaming = c->streaming,
		.finished = copy_report_job,
		.finished_arg = &c->reporter,
	};
	if ((rc = copy_engine_create(&cfg, &c->engine)) < 0) {
		c->engine = NULL;
		goto fail_cal;
	}
	if (calibrate)
		choose_thresholds(c, pageable, scratch);
	for (int d = 0; d < 2; d++)
		if (!c->min_bytes[d])
			c->min_bytes[d] = (size_t)1 << 20; /* uncalibrated default */
	c->info.calibration_ms = calibrate ? (now_s() - t_cal) * 1e3 : 0;
	rc = 0;
fail_cal:
	if (pinned)
		cu->cuMemFreeHost(pinned);
	if (scratch)
		cu->cuMemFree(scratch);
	free(pageable);
	if (rc < 0)
		goto fail_pop;
	ctx_pop(c);

	c->info.chunk_bytes = c->chunk;
	c->info.buffers = c->nbuf;
	c->info.producers = c->nprod;
	c->info.min_engine_bytes[0] = c->min_bytes[0];
	c->info.min_engine_bytes[1] = c->min_bytes[1];
	c->info.large_path[0] = c->large_path[0];
	c->info.large_path[1] = c->large_path[1];
	atomic_store(&c->reporter.on, true);
	*ret = c;
	return 0;

fail_pop:
	ctx_pop(c);
fail:
	release_copy(c);
	return rc;
}

void gpusys_copy_close(gpusys_copy_t *c)
{
	if (c)
		release_copy(c);
}
