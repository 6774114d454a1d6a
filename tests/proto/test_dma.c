/* SPDX-License-Identifier: MIT */
/* The DMA ring (include/gpusys/dma.h, device/dma_client.h) from emulated
 * warps against the real port server: request and response streams
 * copied by the agent (libclient/dma/) byte for byte, the thresholds that keep small
 * streams on the warp, the agent's dozing and waking, and an engine that
 * refuses copies, which the warp must notice and make good. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gpusys/device/dma_client.h"
#include "gpusys/emulator.h"
#include "echo_check.h"
#include "inproc_server.h"
#include "libclient/dma/dma_agent.h"
#include "libclient/dma/dma_order.h"
#include "libclient/emulator/emu_dma.h"



static void all_lanes(uint32_t *len, uint32_t n)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		len[l] = n;
}

/* The stream bytes of an echo's response: each lane's beyond its inline
 * bytes. */
static uint64_t stream_bytes(uint64_t mask, const uint32_t *len)
{
	uint64_t n = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		if (mask >> l & 1 && len[l] > GPUSYS_INLINE_BYTES)
			n += len[l] - GPUSYS_INLINE_BYTES;
	return n;
}

/* Whether the device side sends this echo's response by the agent. */
static int expect_dma(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *len)
{
	uint32_t shares = 0, lanes = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		if (mask >> l & 1) {
			lanes++;
			shares += len[l] > GPUSYS_INLINE_BYTES;
		}
	return gpusys_dma_worth(dev->dma, stream_bytes(mask, len), shares, lanes);
}

static void stats(const struct gpusys_emu *emu, struct gpusys_dma_agent_stats *st)
{
	const struct gpusys_dma_agent *a = gpusys_dma_agent_of_emu(emu);
	assert_non_null(a);
	gpusys_dma_agent_stats(a, st);
}

/* The tests' agents spin for 10 s with nothing to do before they doze, so
 * that a call's decision never races the doze (the emulated calls are slow
 * under the sanitizers); test_dma_dozes_and_wakes sets 20 ms. */
static struct gpusys_emu *open_emu(struct inproc *s, const char *spin_ms)
{
	struct gpusys_emu *emu;
	setenv("GPUSYS_DMA_SPIN_MS", spin_ms, 1);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	unsetenv("GPUSYS_DMA_SPIN_MS");
	return emu;
}

/* Until the agent's wakes reach n, at most 2 s. */
static void wait_wakes(const struct gpusys_emu *emu, uint64_t n)
{
	struct gpusys_dma_agent_stats st;
	for (int i = 0; i < 2000; i++) {
		gpusys_dma_agent_stats(gpusys_dma_agent_of_emu(emu), &st);
		if (st.wakes >= n)
			return;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	fail_msg("the agent woke %llu times, not %llu", (unsigned long long)st.wakes, (unsigned long long)n);
}

/* Until the agent says it spins (1) or dozes (0), at most 2 s. */
static void wait_awake(const gpusys_dev_t *dev, uint64_t want)
{
	for (int i = 0; i < 2000; i++) {
		if (__atomic_load_n(&dev->dma->host->awake, __ATOMIC_ACQUIRE) == want)
			return;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	fail_msg("the agent's awake word never became %llu", (unsigned long long)want);
}

static void test_dma_copies_streams(void **state)
{
	(void)state;
	uint64_t rng = 7;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "10000");
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	assert_non_null(dev->dma);
	uint32_t len[GPUSYS_WARP_LANES];
	struct gpusys_dma_agent_stats a, b;

	/* The agent starts dozing: the first large call's request is copied
	 * by the warp, which wakes it (its answer may then go by the agent). */
	all_lanes(len, 64 * 1024);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	stats(emu, &a);
	assert_true(a.bytes <= stream_bytes(0xffffffffu, len));
	wait_wakes(emu, 1);
	wait_awake(dev, 1);
	stats(emu, &a);
	assert_int_equal(a.wakes, 1);

	/* Awake: every byte of both streams by the agent, each lane's share
	 * of each packet one ask (a lane's 65,472 stream bytes span two 64 KiB
	 * packets at most), each way. */
	echo_and_check(dev, 0xffffffffu, len, &rng);
	stats(emu, &b);
	assert_int_equal(b.bytes - a.bytes, 2 * stream_bytes(0xffffffffu, len));
	assert_true(b.asks - a.asks >= 2 * 32 && b.asks - a.asks <= 2 * 64);
	assert_int_equal(b.failures, 0);

	/* Sizes around a packet's and the protocol's edges, masks of one lane,
	 * alternate lanes and scattered ones; each copied by the agent. */
	const uint32_t sizes[] = { GPUSYS_INLINE_BYTES + 2048, GPUSYS_INLINE_BYTES + 4095, GPUSYS_INLINE_BYTES + 4096,
				   16384 + GPUSYS_INLINE_BYTES, 65535, 65536 + GPUSYS_INLINE_BYTES,
				   65536 + GPUSYS_INLINE_BYTES + 1, 3 * 65536 + 17, GPUSYS_MAX_LANE_PAYLOAD };
	const uint64_t masks[] = { 1, 0x80000000u, 0x55555555u, 0x80000101u, 0xffffffffu };
	int by_agent = 0, by_warp = 0;
	for (size_t m = 0; m < sizeof(masks) / sizeof(masks[0]); m++)
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			all_lanes(len, sizes[z]);
			if (masks[m] == 0xffffffffu && sizes[z] > 65536 + GPUSYS_INLINE_BYTES + 1)
				continue; /* 32 MiB a call: more than the sanitizer builds need */
			int want = expect_dma(dev, masks[m], len);
			stats(emu, &a);
			echo_and_check(dev, masks[m], len, &rng);
			stats(emu, &b);
			assert_int_equal(b.bytes - a.bytes, want ? 2 * stream_bytes(masks[m], len) : 0);
			by_agent += want;
			by_warp += !want;
		}
	assert_true(by_agent >= 10 && by_warp >= 5); /* both sides of the thresholds */
	/* Lanes of mixed sizes, some with no stream at all. */
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		len[l] = l % 3 == 0 ? 5 : (uint32_t)(l * 9000 + 40000);
	stats(emu, &a);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	stats(emu, &b);
	assert_int_equal(b.bytes - a.bytes, 2 * stream_bytes(0xffffffffu, len));

	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* Streams under the thresholds stay with the warp: small in all, or of
 * many small shares (32 x 4 KiB, where an ask a share costs more than the
 * warp's own loads). */
static void test_dma_thresholds(void **state)
{
	(void)state;
	uint64_t rng = 8;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "10000");
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	uint32_t len[GPUSYS_WARP_LANES];
	struct gpusys_dma_agent_stats a, b;

	all_lanes(len, 64 * 1024);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	wait_awake(dev, 1);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	stats(emu, &a);
	assert_true(a.asks >= 32); /* the agent is there, and copies this size */
	all_lanes(len, 4096);
	assert_false(expect_dma(dev, 0xffffffffu, len));
	echo_and_check(dev, 0xffffffffu, len, &rng); /* 32 x 4 KiB: 128 KiB, shares of 4 KiB */
	all_lanes(len, GPUSYS_INLINE_BYTES + GPUSYS_DMA_MIN_STREAM_FLOOR - 1);
	assert_false(expect_dma(dev, 1, len));
	echo_and_check(dev, 1, len, &rng); /* one lane, below the floor */
	stats(emu, &b);
	assert_int_equal(b.asks, a.asks);
	assert_int_equal(b.bytes, a.bytes);
	/* A lane alone copies slowly (the warp's loads are shared among the
	 * call's lanes): 8 KiB from one lane is worth the agent, from all 32
	 * it is not. */
	all_lanes(len, GPUSYS_INLINE_BYTES + 8192);
	assert_true(expect_dma(dev, 1u << 9, len));
	assert_false(expect_dma(dev, 0xffffffffu, len));
	echo_and_check(dev, 1u << 9, len, &rng);
	stats(emu, &a);
	assert_int_equal(a.bytes - b.bytes, 2 * 8192); /* request and answer */
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* With nothing to do the agent dozes; a large call then copies with the
 * warp and wakes it for the next. */
static void test_dma_dozes_and_wakes(void **state)
{
	(void)state;
	uint64_t rng = 9;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "20");
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	uint32_t len[GPUSYS_WARP_LANES];
	struct gpusys_dma_agent_stats a, b;

	all_lanes(len, 128 * 1024);
	echo_and_check(dev, 0x3, len, &rng); /* by the warp; wakes it */
	wait_wakes(emu, 1);
	wait_awake(dev, 0); /* 20 ms with nothing to do: it dozes */
	stats(emu, &a);
	assert_true(a.bytes <= stream_bytes(0x3, len)); /* the first request was the warp's */
	echo_and_check(dev, 0x3, len, &rng); /* the request by the warp again, and wakes it */
	wait_wakes(emu, 2);
	stats(emu, &b);
	assert_true(b.bytes - a.bytes <= stream_bytes(0x3, len));
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* A ring of the test's own (the emulator's agent left aside), served by an
 * agent over a test engine. The engines' contexts begin with the ring's
 * private half: completing is a store into it. */
struct own_ring {
	struct gpusys_dma_host host __attribute__((aligned(64)));
	struct gpusys_dma_priv priv __attribute__((aligned(64)));
	struct gpusys_dma dma;
	struct gpusys_dma_agent *agent;
};

static int complete_by_store(void *ctx, uint32_t n)
{
	struct gpusys_dma_priv *priv = *(struct gpusys_dma_priv **)ctx;
	__atomic_store_n(&priv->completed, n, __ATOMIC_RELEASE);
	return 0;
}

/* Start r (zeroed first)'s agent over copy with ctx, whose first member
 * is set to the ring's private half; the channel it may copy to and from
 * is [base, base + bytes). */
static void own_ring_start(struct own_ring *r, void *ctx,
			   int (*copy)(void *, enum gpusys_dma_way, const struct gpusys_dma_copy *, uint32_t),
			   const void *base, uint64_t bytes)
{
	memset(r, 0, sizeof(*r));
	r->dma = (struct gpusys_dma){ &r->host, &r->priv, GPUSYS_DMA_MIN_STREAM_LANE, GPUSYS_DMA_MIN_SHARE_LANE };
	*(struct gpusys_dma_priv **)ctx = &r->priv;
	struct gpusys_dma_engine e = { .ctx = ctx, .copy = copy, .complete = complete_by_store };
	assert_int_equal(gpusys_dma_agent_start(&e, &r->host, 10000, &r->agent), 0);
	assert_int_equal(gpusys_dma_agent_allow(r->agent, (uint64_t)(uintptr_t)base, bytes), 0);
}

/* An engine that refuses every other batch of copies (as CUDA refuses an
 * address it cannot reach): the warp sees the failure count move and copies
 * the packet itself, so every byte still arrives. */
struct refusing {
	struct gpusys_dma_priv *priv; /* first: own_ring_start */
	unsigned n;
};

static int refusing_copy(void *ctx, enum gpusys_dma_way way, const struct gpusys_dma_copy *c, uint32_t n)
{
	struct refusing *r = ctx;
	(void)way;
	if (r->n++ % 2)
		return -EFAULT;
	for (uint32_t i = 0; i < n; i++)
		memcpy((void *)(uintptr_t)c[i].dst, (const void *)(uintptr_t)c[i].src, c[i].len);
	return 0;
}

static void test_dma_refused_copies(void **state)
{
	(void)state;
	uint64_t rng = 10;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "10000");
	gpusys_dev_t dev = *gpusys_emu_dev(emu);

	static struct own_ring ring;
	struct refusing r = { NULL, 0 };
	own_ring_start(&ring, &r, refusing_copy, dev.hdr, dev.hdr->total_bytes);
	dev.dma = &ring.dma;

	uint32_t len[GPUSYS_WARP_LANES];
	all_lanes(len, 200 * 1024);
	echo_and_check(&dev, 0xf, len, &rng); /* wakes it */
	for (int i = 0; i < 2000 && !__atomic_load_n(&ring.host.awake, __ATOMIC_ACQUIRE); i++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < 4; i++)
		echo_and_check(&dev, 0xf, len, &rng);
	struct gpusys_dma_agent_stats st;
	gpusys_dma_agent_stats(ring.agent, &st);
	assert_true(st.asks >= 4 * 4);
	assert_true(st.failures >= 4 * 2);
	assert_int_equal(__atomic_load_n(&ring.host.failures, __ATOMIC_ACQUIRE), st.failures);
	gpusys_dma_agent_stop(ring.agent);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* An engine whose first batch waits at a gate, so that the asks made
 * meanwhile are all there when the agent looks again: it must start them
 * as one batch a way (a request's packets into the channel, an answer's out
 * of it), each copy with the way the ask's sides give. */
struct gated {
	struct gpusys_dma_priv *priv; /* first: own_ring_start */
	uint8_t *chan;
	uint64_t chan_bytes;
	int open;                /* the gate */
	int at_gate;             /* the first batch waits there */
	unsigned calls;          /* batches */
	unsigned copies[GPUSYS_DMA_WAYS];
	unsigned biggest;        /* the largest batch */
	unsigned wrong_way;      /* copies whose sides do not fit their way */
};

static int gated_copy(void *ctx, enum gpusys_dma_way way, const struct gpusys_dma_copy *c, uint32_t n)
{
	struct gated *g = ctx;
	if (g->calls == 0) {
		__atomic_store_n(&g->at_gate, 1, __ATOMIC_RELEASE);
		while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
			sched_yield();
	}
	g->calls++;
	if (n > g->biggest)
		g->biggest = n;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t in_chan = way == GPUSYS_DMA_INTO_CHANNEL ? c[i].dst : c[i].src;
		g->wrong_way += in_chan - (uint64_t)(uintptr_t)g->chan >= g->chan_bytes;
		memcpy((void *)(uintptr_t)c[i].dst, (const void *)(uintptr_t)c[i].src, c[i].len);
	}
	g->copies[way] += n;
	return 0;
}

static void test_dma_batches_by_way(void **state)
{
	(void)state;
	enum { N = 40, LEN = 4096 };
	static struct own_ring ring;
	static uint8_t chan[N * LEN], buf[N * LEN];
	struct gated g = { .chan = chan, .chan_bytes = sizeof(chan) };
	own_ring_start(&ring, &g, gated_copy, chan, sizeof(chan)); /* it takes asks dozing too */
	struct gpusys_dma *dma = &ring.dma;
	for (size_t i = 0; i < sizeof(buf); i++) {
		buf[i] = (uint8_t)(i * 7 + 1);
		chan[i] = (uint8_t)(i * 13 + 5);
	}
	uint8_t want_chan[N * LEN], want_buf[N * LEN];
	memcpy(want_chan, chan, sizeof(chan));
	memcpy(want_buf, buf, sizeof(buf));
	/* ask 0 holds the agent at the gate; asks 1 .. N-1 alternate ways:
	 * odd ones copy buf's piece into the channel, even ones the
	 * channel's piece out */
	uint32_t last = 0;
	for (uint32_t i = 0; i < N; i++) {
		uint8_t *c = chan + i * LEN, *b = buf + i * LEN;
		if (i % 2) {
			memcpy(want_chan + i * LEN, b, LEN);
			last = gpusys_dma_post(dma, c, b, LEN);
		} else {
			memcpy(want_buf + i * LEN, c, LEN);
			last = gpusys_dma_post(dma, b, c, LEN);
		}
		if (i == 0) /* the agent has taken ask 0 and waits at the gate */
			while (!__atomic_load_n(&g.at_gate, __ATOMIC_ACQUIRE))
				sched_yield();
	}
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	gpusys_dma_wait(dma, last);
	assert_memory_equal(chan, want_chan, sizeof(chan));
	assert_memory_equal(buf, want_buf, sizeof(buf));
	assert_int_equal(g.copies[GPUSYS_DMA_INTO_CHANNEL], N / 2);
	assert_int_equal(g.copies[GPUSYS_DMA_OUT_OF_CHANNEL], N / 2);
	assert_int_equal(g.wrong_way, 0);
	struct gpusys_dma_agent_stats st;
	gpusys_dma_agent_stats(ring.agent, &st);
	assert_int_equal(st.asks, N);
	assert_int_equal(st.failures, 0);
	/* ask 0 alone, then the asks made at the gate: one batch a way */
	if (g.biggest != N / 2 || g.calls != 3)
		fail_msg("batches: %u, the largest %u copies (expected 3: ask 0, then %d a way)", g.calls, g.biggest,
			 N / 2);
	gpusys_dma_agent_stop(ring.agent);
}

/* A warp's call, run on a thread of its own so that the test can wait for
 * it with a limit. */
struct echo_job {
	gpusys_dev_t dev;
	uint64_t mask;
	uint32_t len[GPUSYS_WARP_LANES];
	uint64_t rng;
	int done;
};

static void *echo_job_main(void *arg)
{
	struct echo_job *j = arg;
	echo_and_check(&j->dev, j->mask, j->len, &j->rng);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* An agent with more than GPUSYS_DMA_MAX_BACKLOG asks taken and not done is
 * the bound: a large call then copies with the warp and finishes while the
 * agent is still held at the gate (it would wait for it otherwise). */
static void test_dma_backlog_copies_itself(void **state)
{
	(void)state;
	enum { ASKS = GPUSYS_DMA_MAX_BACKLOG + 2, LEN = 4096 };
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "10000");
	static struct own_ring ring;
	struct echo_job j = { .dev = *gpusys_emu_dev(emu), .mask = 0xf, .rng = 12 };
	uint8_t *chan = (uint8_t *)j.dev.hdr;
	struct gated g = { .chan = chan, .chan_bytes = j.dev.hdr->total_bytes };
	own_ring_start(&ring, &g, gated_copy, chan, j.dev.hdr->total_bytes);
	j.dev.dma = &ring.dma;

	/* the backlog: copies out of the channel's first bytes into a buffer
	 * of the test's own, the first held at the gate */
	uint8_t *buf = malloc((size_t)ASKS * LEN);
	uint32_t last = 0;
	for (uint32_t i = 0; i < ASKS; i++) {
		last = gpusys_dma_post(&ring.dma, buf + (size_t)i * LEN, chan, LEN);
		if (i == 0)
			while (!__atomic_load_n(&g.at_gate, __ATOMIC_ACQUIRE))
				sched_yield();
	}
	/* The agent took ask 0 before it woke (it takes asks dozing too) and
	 * is held with it: say it is awake, as it would be once it had
	 * seen the ask that wanted it, so that only the backlog is left to
	 * keep the call's copies from it. */
	__atomic_store_n(&ring.host.awake, 1, __ATOMIC_RELEASE);

	all_lanes(j.len, 200 * 1024); /* worth the copy engine, but for the backlog */
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, echo_job_main, &j), 0);
	int done = 0;
	for (int ms = 0; ms < 10000 && !(done = __atomic_load_n(&j.done, __ATOMIC_ACQUIRE)); ms++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	__atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	gpusys_dma_wait(&ring.dma, last);
	if (!done)
		fail_msg("the call waited for an agent %u asks behind", ASKS);
	struct gpusys_dma_agent_stats st;
	gpusys_dma_agent_stats(ring.agent, &st);
	assert_int_equal(st.asks, ASKS); /* none of the call's */
	gpusys_dma_agent_stop(ring.agent);
	free(buf);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* The agent copies only between a channel it was given and a buffer: an
 * ask a scribbling kernel could write with both sides elsewhere, both in
 * the channel, or running past the channel's end, is refused and counted
 * (and its ticket still completes); a fair one is copied. */
static void test_dma_asks_outside_channels(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu = open_emu(s, "10000");
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	const struct gpusys_dma *d = dev->dma;
	uint8_t *chan = (uint8_t *)dev->hdr, *win = chan + dev->hdr->window_offset;
	const uint64_t end = dev->hdr->total_bytes;
	assert_true(dev->hdr->num_windows > 0 && dev->hdr->window_offset + 16384 <= end);
	uint8_t *a = malloc(4096), *b = malloc(4096);
	memset(a, 0x11, 4096);
	memset(b, 0x22, 4096);
	struct {
		void *dst;
		const void *src;
		uint32_t len;
		int ok;
	} asks[] = {
		{ b, a, 4096, 0 },                  /* neither side in the channel */
		{ win, win + 8192, 4096, 0 },       /* both sides in it */
		{ b, chan + end - 100, 4096, 0 },   /* past the channel's end */
		{ b, chan + end - 4096, 4096, 1 },  /* its last bytes: fair */
		{ win, a, 4096, 1 },                /* into a window: fair */
	};
	for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		uint64_t before = __atomic_load_n(&d->host->failures, __ATOMIC_ACQUIRE);
		uint8_t keep[4096];
		memcpy(keep, asks[i].dst, sizeof(keep));
		gpusys_dma_wait(d, gpusys_dma_post(d, asks[i].dst, asks[i].src, asks[i].len));
		if (__atomic_load_n(&d->host->failures, __ATOMIC_ACQUIRE) - before != (uint64_t)!asks[i].ok)
			fail_msg("ask %zu: refused %llu, expected %d", i,
				 (unsigned long long)(__atomic_load_n(&d->host->failures, __ATOMIC_ACQUIRE) - before), !asks[i].ok);
		if (asks[i].ok)
			assert_memory_equal(asks[i].dst, asks[i].src, asks[i].len);
		else
			assert_memory_equal(asks[i].dst, keep, sizeof(keep));
	}
	free(a);
	free(b);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* GPUSYS_DMA=0: no agent, the warps copy everything. */
static void test_dma_off(void **state)
{
	(void)state;
	uint64_t rng = 11;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu;
	setenv("GPUSYS_DMA", "0", 1);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	unsetenv("GPUSYS_DMA");
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	assert_null(dev->dma);
	assert_null(gpusys_dma_agent_of_emu(emu));
	uint32_t len[GPUSYS_WARP_LANES];
	all_lanes(len, 64 * 1024);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* The CUDA engine's count ordering (libclient/dma/dma_order.h) against a
 * model of two streams: every operation gets a vector clock (its position
 * on each stream it depends on); an event wait joins the waited stream's
 * clock into the waiter's. Over random runs of copies of either way and
 * counts, each count must come after every copy started before it and
 * after the count before it, whichever streams they were on; and a run of
 * counts after copies of one way only must need no event (the point of
 * the module: one warp's request stream made 32 cross-stream waits). */
struct model_op {
	int stream;
	unsigned clock[GPUSYS_DMA_WAYS];
};

static void model_push(unsigned clock[GPUSYS_DMA_WAYS][GPUSYS_DMA_WAYS], int stream, struct model_op *op)
{
	clock[stream][stream]++;
	op->stream = stream;
	memcpy(op->clock, clock[stream], sizeof(op->clock));
}

static int model_before(const struct model_op *a, const struct model_op *b)
{
	return a->clock[a->stream] <= b->clock[a->stream];
}

static void test_dma_count_order(void **state)
{
	(void)state;
	enum { OPS = 4000 };
	static struct model_op copies[OPS], counts[OPS];
	unsigned seed = 12345;
	for (int run = 0; run < 50; run++) {
		struct gpusys_dma_order o;
		gpusys_dma_order_init(&o);
		unsigned clock[GPUSYS_DMA_WAYS][GPUSYS_DMA_WAYS] = { { 0 } };
		int ncopies = 0, ncounts = 0, copies_before[OPS];
		bool settled = false; /* a count after copies was written */
		for (int i = 0; i < OPS / 2; i++) {
			unsigned r = rand_r(&seed) % 7;
			if (r < 4) { /* copies of one way, often several in a row */
				int way = run % 3 == 0 ? GPUSYS_DMA_INTO_CHANNEL : (int)(r & 1);
				gpusys_dma_order_copied(&o, (enum gpusys_dma_way)way);
				model_push(clock, way, &copies[ncopies++]);
				continue;
			}
			struct gpusys_dma_count_step s = gpusys_dma_order_count(&o);
			assert_true(s.on == GPUSYS_DMA_INTO_CHANNEL || s.on == GPUSYS_DMA_OUT_OF_CHANNEL);
			assert_true(s.wait_for == -1 || (s.wait_for != s.on && s.wait_for < GPUSYS_DMA_WAYS));
			if (run % 3 == 0 && settled)
				assert_int_equal(s.wait_for, -1); /* one way only: no more events */
			settled |= ncopies > 0;
			if (s.wait_for >= 0)
				for (int k = 0; k < GPUSYS_DMA_WAYS; k++)
					if (clock[s.wait_for][k] > clock[s.on][k])
						clock[s.on][k] = clock[s.wait_for][k];
			model_push(clock, s.on, &counts[ncounts]);
			copies_before[ncounts++] = ncopies;
		}
		for (int c = 0; c < ncounts; c++) {
			if (c)
				assert_true(model_before(&counts[c - 1], &counts[c]));
			for (int k = 0; k < copies_before[c]; k++)
				assert_true(model_before(&copies[k], &counts[c]));
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dma_copies_streams),  cmocka_unit_test(test_dma_thresholds),
		cmocka_unit_test(test_dma_dozes_and_wakes), cmocka_unit_test(test_dma_refused_copies),
		cmocka_unit_test(test_dma_asks_outside_channels), cmocka_unit_test(test_dma_off),
		cmocka_unit_test(test_dma_batches_by_way), cmocka_unit_test(test_dma_backlog_copies_itself),
		cmocka_unit_test(test_dma_count_order),
	};
	return cmocka_run_group_tests_name("dma", tests, NULL, NULL);
}
