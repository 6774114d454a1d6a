/* SPDX-License-Identifier: MIT */
/*
 * The DMA agent (dma_agent.h): takes the ring's asks in ticket order, gathers
 * them into a batch for each way (into a channel, out of one), starts a
 * batch with its engine when it is full and, when it finds no more asks,
 * starts what it has gathered and has the engine complete them all at once. The ring is the client's own memory (dma.h):
 * a kernel that scribbles on it hurts only its process, and not even all of
 * that: every copy goes between a channel the agent was given and memory
 * its engine accepts (ask_allowed); anything else is refused, counted, and
 * the warp learns of it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libclient/dma/dma_agent.h"
#include "common/clock.h"

/* Dozing: a look every 200 us for the first 100 ms, every 2 ms after that
 * (a warp that finds the agent dozing copies for itself and sets wanted,
 * so dozing costs nothing but the copies of the first calls). */
#define DOZE_SHORT_NS 200000ull
#define DOZE_LONG_NS 2000000ull
#define DOZE_SHORT_FOR_NS 100000000ull

struct channel_range {
	uint64_t base, bytes;
};

/* The copies of one way gathered and not yet started. */
struct batch {
	uint32_t n;
	struct gpusys_dma_copy c[GPUSYS_DMA_BATCH_MAX];
};

struct gpusys_dma_agent {
	struct gpusys_dma_engine e;
	struct batch batch[GPUSYS_DMA_WAYS];
	struct gpusys_dma_host *host;
	struct channel_range chan[GPUSYS_DMA_AGENT_CHANNELS];
	uint32_t nchan; /* published with release after its range */
	uint64_t spin_ns;
	pthread_t thread;
	int stop;
	struct gpusys_dma_agent_stats st; /* written by the thread, read with atomics */
};

static void nap(uint64_t ns)
{
	struct timespec ts = { 0, (long)ns };
	nanosleep(&ts, NULL);
}

static void count(uint64_t *c, uint64_t v)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

/* Whether [p, p + len) lies wholly in one of the channels. */
static int in_channel(const struct gpusys_dma_agent *a, uint32_t n, uint64_t p, uint32_t len)
{
	for (uint32_t i = 0; i < n; i++)
		if (p >= a->chan[i].base && p - a->chan[i].base <= a->chan[i].bytes &&
		    len <= a->chan[i].bytes - (p - a->chan[i].base))
			return 1;
	return 0;
}

/* An ask's copy goes between a channel and a buffer the engine accepts:
 * whatever a kernel writes into the ring (it is the process's own memory),
 * the agent copies nothing from one place of the process to another that
 * a kernel could not reach itself. Its way, or -1: refused. */
static int ask_way(const struct gpusys_dma_agent *a, uint64_t dst, uint64_t src, uint32_t len)
{
	uint32_t n = __atomic_load_n(&a->nchan, __ATOMIC_ACQUIRE);
	int d = in_channel(a, n, dst, len), s = in_channel(a, n, src, len);
	if (d == s)
		return -1;
	uint64_t buf = d ? src : dst;
	if (a->e.buffer_ok && !a->e.buffer_ok(a->e.ctx, buf, len))
		return -1;
	return d ? GPUSYS_DMA_INTO_CHANNEL : GPUSYS_DMA_OUT_OF_CHANNEL;
}

/* Count n asks the agent could not copy; the warps compare the count
 * before and after their asks (dma.h). */
static void fail(struct gpusys_dma_agent *a, uint64_t *failures, uint64_t n)
{
	*failures += n;
	__atomic_store_n(&a->host->failures, *failures, __ATOMIC_RELEASE);
	count(&a->st.failures, n);
}

/* Start the copies of way w gathered so far. */
static void start_batch(struct gpusys_dma_agent *a, enum gpusys_dma_way w, uint64_t *failures)
{
	struct batch *b = &a->batch[w];
	if (!b->n)
		return;
	if (a->e.copy(a->e.ctx, w, b->c, b->n) < 0)
		fail(a, failures, b->n);
	count(&a->st.batches, 1);
	b->n = 0;
}

/* Whether ask `next` is there. */
static int ask_ready(const struct gpusys_dma_host *h, uint32_t next, uint64_t *len_ticket)
{
	const struct gpusys_dma_ask *a = &h->asks[next % GPUSYS_DMA_ASKS];
	uint64_t lt = __atomic_load_n(&a->len_ticket, __ATOMIC_ACQUIRE);
	*len_ticket = lt;
	return (uint32_t)(lt >> 32) == next + 1u;
}

static void *agent_main(void *arg)
{
	struct gpusys_dma_agent *a = arg;
	struct gpusys_dma_host *h = a->host;
	uint32_t next = 0, started = 0;
	uint64_t idle_since = now_ns(), failures = 0;
	int awake = 0; /* it starts dozing: the first warp that wants it wakes it */

	if (a->e.thread_start && a->e.thread_start(a->e.ctx) < 0)
		return NULL;
	while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
		uint64_t lt;
		if (ask_ready(h, next, &lt)) {
			const struct gpusys_dma_ask *q = &h->asks[next % GPUSYS_DMA_ASKS];
			uint64_t src = __atomic_load_n(&q->src, __ATOMIC_RELAXED);
			uint64_t dst = __atomic_load_n(&q->dst, __ATOMIC_RELAXED);
			uint32_t len = (uint32_t)lt;
			int w = len ? ask_way(a, dst, src, len) : GPUSYS_DMA_WAYS;
			if (w < 0) {
				fail(a, &failures, 1);
			} else if (w < GPUSYS_DMA_WAYS) {
				struct batch *b = &a->batch[w];
				b->c[b->n++] = (struct gpusys_dma_copy){ dst, src, len };
				if (b->n == GPUSYS_DMA_BATCH_MAX)
					start_batch(a, (enum gpusys_dma_way)w, &failures);
			}
			count(&a->st.asks, 1);
			count(&a->st.bytes, len);
			next++;
			started++;
			continue;
		}
		if (started) {
			for (int w = 0; w < GPUSYS_DMA_WAYS; w++)
				start_batch(a, (enum gpusys_dma_way)w, &failures);
			/* An engine that cannot complete leaves the warps
			 * waiting; count it, and try again on the next look. */
			if (a->e.complete(a->e.ctx, next) < 0) {
				count(&a->st.failures, 1);
				nap(DOZE_SHORT_NS);
				continue;
			}
			started = 0;
			idle_since = now_ns();
			continue;
		}
		uint64_t idle = now_ns() - idle_since;
		if (awake && idle < a->spin_ns) {
			cpu_relax();
			continue;
		}
		if (awake) {
			awake = 0;
			__atomic_store_n(&h->awake, 0, __ATOMIC_RELEASE);
			continue; /* one more look: an ask may have come as we dozed off */
		}
		if (__atomic_load_n(&h->wanted, __ATOMIC_ACQUIRE)) {
			__atomic_store_n(&h->wanted, 0, __ATOMIC_RELAXED);
			awake = 1;
			__atomic_store_n(&h->awake, 1, __ATOMIC_RELEASE);
			count(&a->st.wakes, 1);
			idle_since = now_ns();
			continue;
		}
		/* an ask of a warp that saw it awake just before it dozed */
		if (ask_ready(h, next, &lt)) {
			awake = 1;
			__atomic_store_n(&h->awake, 1, __ATOMIC_RELEASE);
			count(&a->st.wakes, 1);
			continue;
		}
		nap(idle - a->spin_ns < DOZE_SHORT_FOR_NS ? DOZE_SHORT_NS : DOZE_LONG_NS);
	}
	__atomic_store_n(&h->awake, 0, __ATOMIC_RELEASE);
	return NULL;
}

int gpusys_dma_agent_start(const struct gpusys_dma_engine *e, struct gpusys_dma_host *host, uint32_t spin_ms,
			   struct gpusys_dma_agent **ret)
{
	struct gpusys_dma_agent *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->e = *e;
	a->host = host;
	a->spin_ns = (uint64_t)spin_ms * 1000000ull;
	int r = pthread_create(&a->thread, NULL, agent_main, a);
	if (r) {
		free(a);
		return -r;
	}
	*ret = a;
	return 0;
}

int gpusys_dma_agent_allow(struct gpusys_dma_agent *a, uint64_t base, uint64_t bytes)
{
	uint32_t n = __atomic_load_n(&a->nchan, __ATOMIC_RELAXED);
	if (n == GPUSYS_DMA_AGENT_CHANNELS)
		return -ENOSPC;
	a->chan[n].base = base;
	a->chan[n].bytes = bytes;
	__atomic_store_n(&a->nchan, n + 1, __ATOMIC_RELEASE);
	return 0;
}

void gpusys_dma_agent_stop(struct gpusys_dma_agent *a)
{
	if (!a)
		return;
	__atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
	pthread_join(a->thread, NULL);
	free(a);
}

void gpusys_dma_agent_stats(const struct gpusys_dma_agent *a, struct gpusys_dma_agent_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!a)
		return;
	st->asks = __atomic_load_n(&a->st.asks, __ATOMIC_RELAXED);
	st->batches = __atomic_load_n(&a->st.batches, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&a->st.bytes, __ATOMIC_RELAXED);
	st->failures = __atomic_load_n(&a->st.failures, __ATOMIC_RELAXED);
	st->wakes = __atomic_load_n(&a->st.wakes, __ATOMIC_RELAXED);
}

int gpusys_dma_disabled(void)
{
	const char *v = getenv("GPUSYS_DMA");
	return v && !strcmp(v, "0");
}

/* A setting of the environment, 0 .. max, else dflt. */
static uint32_t env_u32(const char *name, uint32_t dflt, uint32_t max)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return dflt;
	unsigned long n = strtoul(v, &end, 10);
	return *end || n > max ? dflt : (uint32_t)n;
}

uint32_t gpusys_dma_spin_ms(uint32_t dflt)
{
	return env_u32("GPUSYS_DMA_SPIN_MS", dflt, 60000);
}

void gpusys_dma_thresholds(struct gpusys_dma *d)
{
	d->min_stream_lane = env_u32("GPUSYS_DMA_MIN_STREAM", GPUSYS_DMA_MIN_STREAM_LANE, GPUSYS_MAX_LANE_PAYLOAD);
	d->min_share_lane = env_u32("GPUSYS_DMA_MIN_SHARE", GPUSYS_DMA_MIN_SHARE_LANE, GPUSYS_MAX_LANE_PAYLOAD);
}

/* ---------------------------------------------------------- the memcpy engine */

static int memcpy_copy(void *ctx, enum gpusys_dma_way way, const struct gpusys_dma_copy *c, uint32_t n)
{
	(void)ctx;
	(void)way;
	for (uint32_t i = 0; i < n; i++)
		memcpy((void *)(uintptr_t)c[i].dst, (const void *)(uintptr_t)c[i].src, c[i].len);
	return 0;
}

static int memcpy_complete(void *ctx, uint32_t n)
{
	struct gpusys_dma_priv *p = ctx;
	__atomic_store_n(&p->completed, n, __ATOMIC_RELEASE);
	return 0;
}

void gpusys_dma_memcpy_engine(struct gpusys_dma_engine *e, struct gpusys_dma_priv *priv)
{
	memset(e, 0, sizeof(*e));
	e->ctx = priv;
	e->copy = memcpy_copy;
	e->complete = memcpy_complete;
}
