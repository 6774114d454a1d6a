/* SPDX-License-Identifier: MIT */
/*
 * libgpusys bulk copies (include/gpusys/copy.h): the copy engine
 * (copy_engine.c) with the CUDA DMA engine as its consumer, the driver's own
 * copy below the size where the engine wins, and the measurements at open
 * that choose producers, chunk and that size.
 *
 * The consumer: one non-blocking stream of the device's primary context;
 * each chunk is a cuMemcpyHtoDAsync / cuMemcpyDtoHAsync followed by an event
 * recorded for its slot, so a slot's staging buffer is reused (host to
 * device) or copied out (device to host) only after that event.
 *
 * Stream order of the asynchronous forms: the call records an event on the
 * caller's stream (the engine's stream waits for it before the job's first
 * chunk) and queues on the caller's stream a wait for a word of pinned host
 * memory (cuStreamWaitValue64 >= the job's number), written by the engine
 * after the job's last DMA, failed or not, so that the stream never hangs.
 * Jobs run in submission order, so one increasing word serves them all.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "gpusys/copy.h"
#include "copy_engine.h"
#include "../common/cuda_driver.h"

#define DEFAULT_CHUNK ((size_t)4 << 20)   /* best of 4 and 16 MiB in the prototype */
#define MIN_CHUNK ((size_t)256 << 10)      /* a job's chunks: size / producers, not below */
#define CAL_BYTES ((size_t)16 << 20)       /* threshold and link measurements */
#define CAL_THREAD_BYTES ((size_t)4 << 20) /* per thread, host copy rates */

struct gpusys_copy_handle {
	gpusys_copy_t *c;
	struct copy_job *job; /* the engine's job, or NULL (driver or empty) */
	CUevent ev;           /* engine: recorded on the caller's stream before the
				 copy; driver: after it */
	uint64_t seq;
};

struct gpusys_copy {
	const struct gpusys_cuda *cu;
	CUdevice cudev;
	CUcontext ctx;
	CUstream stream;
	CUevent *slot_ev;
	void **bufs;
	unsigned nbuf, nprod;
	size_t chunk;
	size_t page;
	struct copy_engine *engine;
	uint64_t *done_word; /* pinned, mapped: the last job finished */
	CUdeviceptr done_dev;
	pthread_mutex_t submit_lk;
	uint64_t next_seq;
	size_t min_bytes[2];
	enum gpusys_copy_path large_path[2];
	atomic_int forced;
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

/* ---- the consumer: the CUDA DMA engine ---- */

static int op_start(void *ctx, unsigned slot, enum copy_dir dir, void *host, uint64_t dev, size_t n)
{
	gpusys_copy_t *c = ctx;
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
	CUresult r = h->ev ? c->cu->cuStreamWaitEvent(c->stream, h->ev, 0) : CUDA_SUCCESS;
	return r == CUDA_SUCCESS ? 0 : cu_err(c, r, "cuStreamWaitEvent");
}

static void op_job_end(void *ctx, void *arg, int err)
{
	gpusys_copy_t *c = ctx;
	struct gpusys_copy_handle *h = arg;
	(void)err; /* the handle reports it; the stream must go on either way */
	__atomic_store_n(c->done_word, h->seq, __ATOMIC_RELEASE);
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

/* One copy. stream: where it is ordered (NULL: legacy default). ret NULL:
 * synchronous. */
static int copy(gpusys_copy_t *c, enum copy_dir dir, void *host, CUdeviceptr dev, size_t n, CUstream stream,
		enum gpusys_copy_path path, gpusys_copy_handle_t **ret)
{
	CUresult r;
	int rc;

	if (!c || (n && (!host || !dev)))
		return -EINVAL;
	const struct gpusys_cuda *cu = c->cu;
	struct gpusys_copy_handle local = { .c = c }, *h = &local;
	if (ret) {
		h = calloc(1, sizeof(*h));
		if (!h)
			return -ENOMEM;
		h->c = c;
	}
	if (n == 0) {
		if (ret)
			*ret = h;
		return 0;
	}
	ctx_push(c);
	if (path == GPUSYS_COPY_AUTO)
		path = choose(c, dir, host, n);
	if ((rc = op_check(c, dir, dev, n)) < 0)
		goto fail;

	if (path == GPUSYS_COPY_DRIVER) {
		if (!ret) {
			r = dir == COPY_HTOD ? cu->cuMemcpyHtoD(dev, host, n) : cu->cuMemcpyDtoH(host, dev, n);
			rc = r == CUDA_SUCCESS ? 0 : cu_err(c, r, "cuMemcpy");
			ctx_pop(c);
			return rc;
		}
		r = dir == COPY_HTOD ? cu->cuMemcpyHtoDAsync(dev, host, n, stream)
				     : cu->cuMemcpyDtoHAsync(host, dev, n, stream);
		if (r != CUDA_SUCCESS) {
			rc = cu_err(c, r, "cuMemcpyAsync");
			goto fail;
		}
		if ((r = cu->cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			h->ev = NULL;
			rc = cu_err(c, r, "cuEventCreate");
			goto fail_sync;
		}
		if ((r = cu->cuEventRecord(h->ev, stream)) != CUDA_SUCCESS) {
			rc = cu_err(c, r, "cuEventRecord");
			goto fail_sync;
		}
		ctx_pop(c);
		*ret = h;
		return 0;
	}

	/* The engine: after what the stream already holds. */
	if ((r = cu->cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		h->ev = NULL;
		rc = cu_err(c, r, "cuEventCreate");
		goto fail;
	}
	if ((r = cu->cuEventRecord(h->ev, stream)) != CUDA_SUCCESS) {
		rc = cu_err(c, r, "cuEventRecord");
		goto fail;
	}
	struct copy_request req = {
		.dir = dir,
		.mode = path == GPUSYS_COPY_IN_PLACE ? COPY_IN_PLACE : COPY_STAGED,
		.host = host,
		.dev = (uint64_t)dev,
		.n = n,
		.job_arg = h,
	};
	pthread_mutex_lock(&c->submit_lk);
	h->seq = c->next_seq + 1;
	rc = copy_engine_submit(c->engine, &req, &h->job);
	if (rc == 0) {
		c->next_seq++;
		/* Later work on the stream waits for the job's end. */
		if (ret && (r = cu->cuStreamWaitValue64(stream, c->done_dev, h->seq, CU_STREAM_WAIT_VALUE_GEQ)) !=
				   CUDA_SUCCESS)
			rc = cu_err(c, r, "cuStreamWaitValue64");
	}
	pthread_mutex_unlock(&c->submit_lk);
	if (rc < 0) {
		if (h->job)
			copy_job_release(h->job);
		h->job = NULL;
		goto fail;
	}
	ctx_pop(c);
	if (ret) {
		*ret = h;
		return 0;
	}
	rc = copy_job_release(h->job);
	cu->cuEventDestroy(h->ev);
	return rc;

fail_sync:
	cu->cuStreamSynchronize(stream);
fail:
	if (h->ev)
		cu->cuEventDestroy(h->ev);
	ctx_pop(c);
	if (ret)
		free(h);
	return rc;
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
	if (h->job)
		rc = copy_job_release(h->job);
	ctx_push(c);
	if (h->ev) {
		if (!h->job) {
			CUresult r = c->cu->cuEventSynchronize(h->ev);
			if (r != CUDA_SUCCESS)
				rc = cu_err(c, r, "cuEventSynchronize");
		}
		c->cu->cuEventDestroy(h->ev);
	}
	ctx_pop(c);
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
}

/* ---- measurements at open ---- */

struct rate_run {
	pthread_mutex_t lk;
	pthread_cond_t cv;
	unsigned ready, done;
	bool go;
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
		memcpy(t->dst, t->src, t->n);
	pthread_mutex_lock(&run->lk);
	run->done++;
	pthread_cond_broadcast(&run->cv);
	pthread_mutex_unlock(&run->lk);
	return NULL;
}

/* GB/s of k threads each memcpy'ing its own region of mem three times
 * (pages touched first; best of 2 runs). 0 if threads cannot start. */
static double host_copy_rate(char *mem, unsigned k)
{
	double best = 0;
	struct rate_thread *t = calloc(k, sizeof(*t));
	pthread_t *th = calloc(k, sizeof(*th));
	for (int rep = 0; rep < 2 && t && th; rep++) {
		struct rate_run run = { .lk = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
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
		double r = host_copy_rate(mem, kk[i]);
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
		if (c->done_word)
			cu->cuMemFreeHost(c->done_word);
		if (c->stream)
			cu->cuStreamDestroy(c->stream);
		ctx_pop(c);
		cu->cuDevicePrimaryCtxRelease(c->cudev);
	}
	free(c->bufs);
	free(c->slot_ev);
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
	long pg = sysconf(_SC_PAGESIZE);
	c->page = pg > 0 ? (size_t)pg : 4096;
	if ((r = cu->cuDeviceGet(&c->cudev, o.cuda_device)) != CUDA_SUCCESS ||
	    (r = cu->cuDevicePrimaryCtxRetain(&c->ctx, c->cudev)) != CUDA_SUCCESS) {
		c->ctx = NULL;
		rc = cu_err(c, r, "primary context");
		goto fail;
	}
	ctx_push(c);

	/* Options, then the environment, then measured or default. */
	if (!o.chunk_bytes)
		o.chunk_bytes = env_size("GPUSYS_COPY_CHUNK");
	if (!o.buffers)
		o.buffers = (unsigned)env_size("GPUSYS_COPY_BUFFERS");
	if (!o.producers)
		o.producers = (unsigned)env_size("GPUSYS_COPY_PRODUCERS");
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
	if ((r = cu->cuMemHostAlloc((void **)&c->done_word, sizeof(uint64_t),
				    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS) {
		c->done_word = NULL;
		rc = cu_err(c, r, "cuMemHostAlloc");
		goto fail_pop;
	}
	*c->done_word = 0;
	if ((r = cu->cuMemHostGetDevicePointer(&c->done_dev, c->done_word, 0)) != CUDA_SUCCESS) {
		rc = cu_err(c, r, "cuMemHostGetDevicePointer");
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
	c->nbuf = o.buffers ? o.buffers : 2 * c->nprod;
	if (c->nbuf < 2)
		c->nbuf = 2;

	c->bufs = calloc(c->nbuf, sizeof(void *));
	c->slot_ev = calloc(c->nbuf, sizeof(CUevent));
	if (!c->bufs || !c->slot_ev) {
		rc = -ENOMEM;
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
