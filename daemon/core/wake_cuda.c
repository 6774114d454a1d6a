/* SPDX-License-Identifier: MIT */
/*
 * The GPU watch of a CUDA client's doorbell (wake.h): a kernel cannot make
 * a system call, so the daemon has the GPU tell it. Per channel, on a
 * stream of its own in the daemon's (primary) context for the client's
 * GPU, poller 0 enqueues before it sleeps:
 *
 *   cuStreamWaitValue64(stream, &hdr->doorbell, ~seen, CU_STREAM_WAIT_VALUE_AND)
 *   cuLaunchHostFunc(stream, on_doorbell, g)    -> writes the daemon's eventfd
 *
 * The GPU's front end polls the word; no CPU time is spent while it waits,
 * and a stream blocked on it takes no time slices from the client's
 * kernels. The price is latency: the wait is slow to notice a store to
 * host memory, slower still while the client's context shares the GPU
 * (tenths of a millisecond; measured, see bench/RESULTS.md: "Idle cost and
 * wake-up"). gpu_watch = 0 (or GPUSYSD_GPU_WATCH=0) turns the watch off:
 * timed naps for CUDA clients, quicker to answer and costlier in CPU.
 *
 * Why AND ~seen and not GEQ seen + 1: the doorbell is not monotonic. A
 * message's later packets ring with (1 << 63) | port << 32 | seq, its first with
 * a time stamp above its port (abi.h GPUSYS_RING_*), and racing warps may
 * store their values out of order. (*addr & ~seen) != 0 fires as soon as
 * the word has a bit that seen lacks: every first-packet value with a later
 * stamp does (a number above seen cannot be a bit subset of it), and so
 * does nearly every other change. A change to a bit subset of seen (a value
 * stored late, below one already seen, or a stamp past its wrap every 52
 * days) is missed; the safety rescan (1 s) serves it.
 *
 * A wait stays pending across dozes until it fires: poller 0 re-arms a
 * channel only after its host function ran (g->fired), so at most one wait
 * per stream is outstanding.
 *
 * Teardown. A pending wait reads the channel through our mapping; freeing
 * that memory under it would fault the daemon's context (every channel of
 * that GPU would die with it), and cuStreamDestroy does not cancel it (the
 * stream's resources go once the device has completed its work, which a
 * client that has gone never lets happen). So when the session is freed
 * (the client has detached, the channel is out of every poller's list and
 * marked STOPPED) and a wait may be pending, the daemon stores ~armed in
 * the doorbell itself: the one place it writes that client-written word,
 * at a time when nobody reads it any more (the client's code only ever
 * stores to it). Then it waits, up to a second, for the stream to finish;
 * a stream that does not finish keeps the channel memory alive (leaked,
 * logged) rather than risk the fault.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/wire.h"
#include "core/channel.h"
#include "util/log.h"
#include "core/wake.h"
#include "../common/cuda_driver.h"

struct wake_gpu {
	const struct gpusys_cuda *cu;
	CUdevice dev;
	CUcontext ctx;          /* primary context, retained */
	CUstream stream;
	CUdeviceptr doorbell;   /* &hdr->doorbell in our context */
	void *registered;       /* memfd channel: the header range we registered */
	int efd;
	int device;
	volatile uint64_t *host_doorbell; /* the same word, as the CPU sees it (wake_gpu_hold) */
	struct wake_gpu *prev, *next; /* every watch: watches, under watch_mu */
	/* its group's poller 0, under watch_mu (read by wake_gpu_hold) */
	bool pending;
	bool callback; /* the pending wait has its host function behind it */
	uint64_t armed;
	/* written by the host function (a CUDA thread) */
	atomic_bool fired;
};

static void gpu_warn(const struct gpusys_cuda *cu, CUresult r, const char *what, int device)
{
	char buf[256];
	log_warn("wake: GPU %d: %s: the daemon naps on a timer while this client is attached", device,
		 gpusys_cuda_describe(cu, r, what, buf, sizeof(buf)));
}

static void CUDA_CB on_doorbell(void *arg)
{
	struct wake_gpu *g = arg;
	uint64_t one = 1;

	if (write(g->efd, &one, sizeof(one)) < 0) {
	}
	/* Last: g is not touched after this (teardown waits for the stream
	 * anyway). */
	atomic_store_explicit(&g->fired, true, memory_order_release);
}

static void gpu_free(struct wake_gpu *g)
{
	const struct gpusys_cuda *cu = g->cu;

	if (g->ctx) {
		cu->cuCtxPushCurrent(g->ctx);
		if (g->stream)
			cu->cuStreamDestroy(g->stream);
		if (g->registered)
			cu->cuMemHostUnregister(g->registered);
		cu->cuCtxPopCurrent(NULL);
		cu->cuDevicePrimaryCtxRelease(g->dev);
	}
	free(g);
}

static bool gpu_watch_enabled = true;

/* Every watch of the daemon, and whether the main thread holds them off
 * (wake_gpu_hold). A poller 0 arms under the lock, so a hold never races
 * an arming: once it holds, no new wait is queued until it lets go. */
static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct wake_gpu *watches;
static unsigned holds;

static void watch_link(struct wake_gpu *g)
{
	pthread_mutex_lock(&watch_mu);
	g->prev = NULL;
	g->next = watches;
	if (watches)
		watches->prev = g;
	watches = g;
	pthread_mutex_unlock(&watch_mu);
}

static void watch_unlink(struct wake_gpu *g)
{
	pthread_mutex_lock(&watch_mu);
	if (g->prev)
		g->prev->next = g->next;
	else if (watches == g)
		watches = g->next;
	if (g->next)
		g->next->prev = g->prev;
	g->prev = g->next = NULL;
	pthread_mutex_unlock(&watch_mu);
}

/* A wait still pending on g: end it as a ring would, by a bit that the
 * armed value lacks (see the top of the file). The lowest such bit alone,
 * so that the value left in the word, which the next arming waits to see
 * change, has one bit set: nearly every later ring has a bit it lacks and
 * fires that wait (~armed, mostly ones, would leave most rings unseen
 * until the safety rescan). Under watch_mu. The doorbell is the client's
 * word and only a hint to the daemon: a ring stored just before this is
 * overwritten, and found by the scan that the host function's wake-up
 * starts; serve_rung bounds the port the value names. true: g had a wait
 * whose host function has not run. */
static bool release_locked(struct wake_gpu *g)
{
	if (!g->pending || atomic_load_explicit(&g->fired, memory_order_acquire))
		return false;
	/* armed is never all ones (wake_gpu_arm), so the bit exists. */
	__atomic_store_n(g->host_doorbell, ~g->armed & (g->armed + 1), __ATOMIC_SEQ_CST);
	return g->callback;
}

void wake_gpu_hold(void)
{
	/* With one GPU too: a pending wait of one client stalled the
	 * teardown of another's watch on the same GPU until the first
	 * client rang, and the main thread with it (bench/RESULTS.md,
	 * "Twelfth session"). With no watch this costs one lock. */
	pthread_mutex_lock(&watch_mu);
	holds++;
	pthread_mutex_unlock(&watch_mu);
	/* Until every wait has run its host function (the stream is then
	 * idle), storing again each time: a client's kernel may store over
	 * our value. A second at most; then the call goes ahead anyway. */
	for (int i = 0; i < 10000; i++) {
		unsigned left = 0;
		pthread_mutex_lock(&watch_mu);
		for (struct wake_gpu *g = watches; g; g = g->next)
			left += release_locked(g);
		pthread_mutex_unlock(&watch_mu);
		if (!left)
			return;
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	log_warn("wake: a GPU doorbell watch did not end within 1 s of being released; CUDA calls go ahead");
}

void wake_gpu_unhold(void)
{
	pthread_mutex_lock(&watch_mu);
	if (holds)
		holds--;
	pthread_mutex_unlock(&watch_mu);
	/* Each poller 0 whose wait was released woke and arms again when it
	 * next dozes (it keeps to timed naps until then). */
}

void wake_gpu_configure(bool watch)
{
	gpu_watch_enabled = watch;
}

/* The daemon keeps one reference to each GPU's primary context it ever
 * used, until exit: otherwise the last client of a GPU to detach would
 * destroy the context, which synchronises with every other context's work
 * that shares its mappings (pending doorbell waits on the other GPUs that
 * only a client's kernel ends), and the next client would pay for a new
 * one. Called on the main thread only. */
static void keep_context(const struct gpusys_cuda *cu, int device, CUdevice dev)
{
	static bool kept[256];
	CUcontext ctx;
	if (device < 0 || device >= 256 || kept[device])
		return;
	if (cu->cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS)
		kept[device] = true;
}

void wake_gpu_open(struct wake *w, struct wake_chan *c, const struct channel *ch, int32_t cuda_device)
{
	const struct gpusys_cuda *cu;
	struct wake_gpu *g;
	CUresult r = CUDA_SUCCESS;
	const char *what = NULL;
	int v = 0;

	c->needs_timer = true; /* until the watch is set up */
	/* gpu_watch = 0: no watch, timed naps (to measure against). */
	if (!gpu_watch_enabled)
		return;
	if (gpusys_cuda_load(&cu) < 0) {
		log_info("wake: %s: GPU clients' doorbells cannot be watched", gpusys_cuda_load_error());
		return;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return;
	g->cu = cu;
	g->efd = wake_eventfd(w);
	g->device = cuda_device;
	atomic_init(&g->fired, false);

	if ((r = cu->cuInit(0)) != CUDA_SUCCESS) {
		what = "cuInit";
		goto fail;
	}
	if ((r = cu->cuDeviceGet(&g->dev, cuda_device)) != CUDA_SUCCESS) {
		what = "cuDeviceGet";
		goto fail;
	}
	/* Stream memory operations on 64-bit words. */
	if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, g->dev) != CUDA_SUCCESS ||
	    !v) {
		log_warn("wake: GPU %d cannot wait on 64-bit words from a stream: the daemon naps on a timer while "
			 "this client is attached", cuda_device);
		free(g);
		return;
	}
	if ((r = cu->cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
		g->ctx = NULL;
		what = "cuDevicePrimaryCtxRetain";
		goto fail;
	}
	keep_context(cu, cuda_device, g->dev);
	cu->cuCtxPushCurrent(g->ctx);
	size_t off = offsetof(struct gpusys_channel_header, doorbell);
	if (ch->ops->memory_kind == GPUSYS_MEMORY_CUDA_VMM) {
		/* channel_cuda.c mapped it for the CPU only: let this GPU read
		 * it too (one address for both). */
		CUmemAccessDesc acc;
		memset(&acc, 0, sizeof(acc));
		acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc.location.id = cuda_device;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		r = cu->cuMemSetAccess((CUdeviceptr)(uintptr_t)ch->base, ch->bytes, &acc, 1);
		what = "cuMemSetAccess(device)";
		g->doorbell = (CUdeviceptr)(uintptr_t)ch->base + off;
	} else {
		/* memfd: register our mapping of the header (the client
		 * registered its own mapping of the same pages). */
		/* For this GPU's context only: PORTABLE would map it into every
		 * GPU's context, and unmapping it there (or destroying that
		 * context) waits for that GPU's pending doorbell waits, which
		 * only a client's kernel ends: with two GPUs, a detach hung
		 * the daemon that way (bench/RESULTS.md, issue 17). */
		r = cu->cuMemHostRegister(ch->base, GPUSYS_HEADER_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP);
		what = "cuMemHostRegister";
		if (r == CUDA_SUCCESS) {
			g->registered = ch->base;
			CUdeviceptr base;
			r = cu->cuMemHostGetDevicePointer(&base, ch->base, 0);
			what = "cuMemHostGetDevicePointer";
			g->doorbell = base + off;
		}
	}
	if (r == CUDA_SUCCESS) {
		r = cu->cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING);
		what = "cuStreamCreate";
		if (r != CUDA_SUCCESS)
			g->stream = NULL;
	}
	cu->cuCtxPopCurrent(NULL);
	if (r != CUDA_SUCCESS)
		goto fail;
	g->host_doorbell = &channel_header(ch)->doorbell;
	watch_link(g);
	c->gpu = g;
	c->needs_timer = false;
	return;
fail:
	gpu_warn(cu, r, what, cuda_device);
	gpu_free(g);
}

bool wake_gpu_arm(struct wake_chan *c, uint64_t seen)
{
	struct wake_gpu *g = c->gpu;
	const struct gpusys_cuda *cu = g->cu;
	CUresult r;

	pthread_mutex_lock(&watch_mu);
	if (holds) {
		/* The main thread is making CUDA calls that a pending wait
		 * could stall: no new wait until it is done (timed naps). */
		pthread_mutex_unlock(&watch_mu);
		return false;
	}
	if (g->pending && !atomic_load_explicit(&g->fired, memory_order_acquire)) {
		pthread_mutex_unlock(&watch_mu);
		return true; /* still waiting: it fires on the next change */
	}
	if (~seen == 0) {
		pthread_mutex_unlock(&watch_mu);
		return true; /* all ones (garbage): no bit to wait for; the safety rescan serves it */
	}
	atomic_store_explicit(&g->fired, false, memory_order_relaxed);
	cu->cuCtxPushCurrent(g->ctx);
	r = cu->cuStreamWaitValue64(g->stream, g->doorbell, ~seen, CU_STREAM_WAIT_VALUE_AND);
	g->pending = r == CUDA_SUCCESS;
	g->callback = false;
	if (r == CUDA_SUCCESS) {
		r = cu->cuLaunchHostFunc(g->stream, on_doorbell, g);
		g->callback = r == CUDA_SUCCESS;
	}
	cu->cuCtxPopCurrent(NULL);
	g->armed = seen;
	pthread_mutex_unlock(&watch_mu);
	if (r != CUDA_SUCCESS) {
		/* A wait may be queued without its callback: it is harmless,
		 * and teardown (and a hold) still resolves it. */
		char buf[256];
		log_warn("wake: GPU %d: %s: timed naps for this client", g->device,
			 gpusys_cuda_describe(cu, r, "arming the doorbell watch", buf, sizeof(buf)));
		c->needs_timer = true;
		return false;
	}
	return true;
}

bool wake_gpu_close(struct wake_chan *c, const struct channel *ch)
{
	struct wake_gpu *g = c->gpu;

	if (!g)
		return true;
	c->gpu = NULL;
	/* Out of every hold's sight; its poller 0 no longer has the channel
	 * (the session is being freed), so pending and armed are still. */
	watch_unlink(g);
	const struct gpusys_cuda *cu = g->cu;
	if (g->pending) {
		/* See the top of the file: release a wait that has not fired,
		 * then let the stream drain (its host function too). */
		struct gpusys_channel_header *h = channel_header(ch);
		bool release = !atomic_load_explicit(&g->fired, memory_order_acquire);
		CUresult r = CUDA_ERROR_NOT_READY;
		cu->cuCtxPushCurrent(g->ctx);
		for (int i = 0; i < 10000; i++) {
			/* Again each time: a kernel of the client may still be
			 * storing to it. */
			if (release)
				__atomic_store_n(&h->doorbell, ~g->armed, __ATOMIC_SEQ_CST);
			if ((r = cu->cuStreamQuery(g->stream)) != CUDA_ERROR_NOT_READY)
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
		}
		cu->cuCtxPopCurrent(NULL);
		if (r == CUDA_ERROR_NOT_READY) {
			log_err("wake: GPU %d: the doorbell watch did not finish within 1 s: the channel's memory is "
				"kept", g->device);
			return false; /* g, its stream and the memory stay */
		}
	}
	gpu_free(g);
	return true;
}

