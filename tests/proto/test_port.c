/* SPDX-License-Identifier: MIT */
/* Port protocol: the emulated client against the real port server, in one
 * process: sizes around every boundary, lane masks, contention, fire-and-
 * forget, malformed requests and a channel scribbled on while served. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/port_host.h"
#include "gpusys/emulator.h"
#include "echo_check.h"
#include "inproc_server.h"
#include "raw_client.h"


/* Packet 0's chunk edges (abi.h gpusys_inline_at: 15, 16, 17, 31, 33...),
 * its inline part's end, a data[] slot's (ABI 10: two of 1 KiB, one
 * stream packet each) and both slots', a packet's and a stream's. */
#define DATA_SLOT (GPUSYS_PACKET_BYTES / GPUSYS_STREAM_SLOTS)
static const uint32_t boundary_sizes[] = {
	0, 1, 4, GPUSYS_CHUNK_BYTES - 1, GPUSYS_CHUNK_BYTES, GPUSYS_CHUNK_BYTES + 1, 2 * GPUSYS_CHUNK_BYTES - 1,
	2 * GPUSYS_CHUNK_BYTES + 1, 3 * GPUSYS_CHUNK_BYTES, GPUSYS_INLINE_BYTES - 1, GPUSYS_INLINE_BYTES,
	GPUSYS_INLINE_BYTES + 1,
	GPUSYS_INLINE_BYTES + DATA_SLOT - 1, GPUSYS_INLINE_BYTES + DATA_SLOT, GPUSYS_INLINE_BYTES + DATA_SLOT + 1,
	GPUSYS_PACKET_BYTES - 1, GPUSYS_PACKET_BYTES, GPUSYS_PACKET_BYTES + 1,
	GPUSYS_INLINE_BYTES + GPUSYS_PACKET_BYTES + 1, 3 * GPUSYS_PACKET_BYTES + 17,
};

/* Around a window's slot and the whole window (abi.h, ABI 10: two slots of
 * 64 KiB): lanes of these sizes stream through a window port, one slot's
 * and two slots' worth of stream and one byte either side, and the plain
 * sizes around them. */
#define WINDOW_SLOT (GPUSYS_WINDOW_BYTES / GPUSYS_STREAM_SLOTS)
static const uint32_t window_sizes[] = {
	WINDOW_SLOT - 1, WINDOW_SLOT, WINDOW_SLOT + 1,
	WINDOW_SLOT + GPUSYS_INLINE_BYTES - 1, WINDOW_SLOT + GPUSYS_INLINE_BYTES, WINDOW_SLOT + GPUSYS_INLINE_BYTES + 1,
	GPUSYS_WINDOW_BYTES,
	GPUSYS_WINDOW_BYTES + GPUSYS_INLINE_BYTES - 1, GPUSYS_WINDOW_BYTES + GPUSYS_INLINE_BYTES,
	GPUSYS_WINDOW_BYTES + GPUSYS_INLINE_BYTES + 1,
};


static void test_echo_boundary_sizes(void **state)
{
	(void)state;
	uint64_t rng = 0x1234567;
	struct inproc *s = inproc_start(4, 1);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	const uint64_t masks[] = { 1, 0x80000000u, 0x5, 0x55555555u, 0xaaaaaaaau, 0xffff0000u, 0xffffffffu, 0x12345678u };
	uint32_t len[GPUSYS_WARP_LANES];

	for (size_t m = 0; m < sizeof(masks) / sizeof(masks[0]); m++) {
		/* every lane the same size */
		for (size_t z = 0; z < sizeof(boundary_sizes) / sizeof(boundary_sizes[0]); z++) {
			for (int l = 0; l < 32; l++)
				len[l] = boundary_sizes[z];
			echo_and_check(dev, masks[m], len, &rng);
		}
		/* lanes of mixed sizes: the stream interleaves them */
		for (int l = 0; l < 32; l++)
			len[l] = boundary_sizes[(l + m) % (sizeof(boundary_sizes) / sizeof(boundary_sizes[0]))];
		echo_and_check(dev, masks[m], len, &rng);
	}
	/* Window packets: one lane and two at each size; every lane once
	 * (2 MiB a message: more would only cost the sanitizer builds time). */
	const uint64_t wmasks[] = { 1, 0x80000001u };
	for (size_t m = 0; m < sizeof(wmasks) / sizeof(wmasks[0]); m++)
		for (size_t z = 0; z < sizeof(window_sizes) / sizeof(window_sizes[0]); z++) {
			for (int l = 0; l < 32; l++)
				len[l] = window_sizes[z];
			echo_and_check(dev, wmasks[m], len, &rng);
		}
	echo_and_check(dev, 0xffffffffu, len, &rng);
	/* 1 MiB, the protocol maximum, from one lane, from three and from
	 * alternate lanes (16 MiB each way: 512 window packets) */
	for (int l = 0; l < 32; l++)
		len[l] = GPUSYS_MAX_LANE_PAYLOAD;
	echo_and_check(dev, 1u << 7, len, &rng);
	echo_and_check(dev, 0x80000101u, len, &rng);
	echo_and_check(dev, 0x55555555u, len, &rng);
	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_int_equal(gpusys_channel_progress(dev->hdr), gpusys_emu_submitted(emu));
	gpusys_emu_close(emu);
	inproc_stop(s);
}

struct worker_arg {
	const gpusys_dev_t *dev;
	uint32_t warp;
	unsigned iters;
	uint64_t seed;
};

static void *contend(void *p)
{
	struct worker_arg *a = p;
	uint64_t rng = a->seed;
	uint32_t len[GPUSYS_WARP_LANES];

	gpusys_emu_set_warp(a->warp);
	for (unsigned i = 0; i < a->iters; i++) {
		uint64_t mask = rng_next(&rng) & 0xffffffffu;
		uint32_t lanes = 1 + (uint32_t)(rng_next(&rng) % 32);
		if (lanes == 1)
			mask = 1ull << (rng_next(&rng) % 32);
		else if (lanes == 32)
			mask = 0xffffffffu;
		if (!mask)
			mask = 1;
		for (int l = 0; l < 32; l++) {
			uint64_t r = rng_next(&rng);
			len[l] = (r & 3) ? (uint32_t)(r >> 40) % (GPUSYS_INLINE_BYTES + 1)
					 : boundary_sizes[(r >> 8) % (sizeof(boundary_sizes) / sizeof(boundary_sizes[0]))];
		}
		if (i % 7 == 3) {
			/* fire-and-forget between the echoes */
			const void *in[32] = { 0 };
			void *out[32] = { 0 };
			uint32_t z[32] = { 0 };
			assert_int_equal(gpusys_emu_rpc(a->dev, GPUSYS_OP_NOOP, GPUSYS_REQ_NOREPLY, mask, in, z, out,
							z, NULL, NULL),
					 0);
		}
		echo_and_check(a->dev, mask, len, &rng);
	}
	return NULL;
}

static void test_contention(void **state)
{
	(void)state;
	enum { WARPS = 8, PORTS = 3 };
	struct inproc *s = inproc_start(PORTS, 2); /* fewer ports than warps */
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	pthread_t th[WARPS];
	struct worker_arg args[WARPS];

	for (int i = 0; i < WARPS; i++) {
		args[i] = (struct worker_arg){ gpusys_emu_dev(emu), (uint32_t)i, 400, 0x9e3779b97f4a7c15ull * (i + 1) };
		pthread_create(&th[i], NULL, contend, &args[i]);
	}
	for (int i = 0; i < WARPS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_true(gpusys_emu_submitted(emu) >= WARPS * 400);
	assert_int_equal(gpusys_channel_progress(gpusys_emu_dev(emu)->hdr), gpusys_emu_submitted(emu));
	gpusys_emu_close(emu);
	inproc_stop(s);
}

static void test_errors(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(2, 1);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	static uint8_t big[3 * GPUSYS_PACKET_BYTES], out_buf[32][64];
	const void *in[32];
	void *out[32];
	uint32_t len[32], cap[32], got[32];
	int32_t st[32];

	for (int l = 0; l < 32; l++) {
		in[l] = big;
		out[l] = out_buf[l];
		len[l] = 10;
		cap[l] = 64;
	}
	/* unknown opcodes, without and with a streamed payload */
	assert_int_equal(gpusys_emu_rpc(dev, 0x7abc, 0, 0x3, in, len, out, cap, got, st), -ENOSYS);
	len[1] = sizeof(big);
	assert_int_equal(gpusys_emu_rpc(dev, GPUSYS_OP_USER_FIRST + 9, 0, 0x3, in, len, out, cap, got, st), -ENOSYS);
	/* the port is usable afterwards */
	assert_int_equal(gpusys_emu_noop(dev, 0xffffffffu), 0);
	/* a response larger than the lane's capacity */
	len[1] = 100;
	assert_int_equal(gpusys_emu_echo(dev, 0x3, in, len, out, cap, got, st), 0);
	assert_int_equal(st[0], 0);
	assert_int_equal(got[0], 10);
	assert_int_equal(st[1], -EMSGSIZE);
	assert_int_equal(got[1], 0);
	/* a payload over the protocol maximum is refused before sending */
	len[0] = GPUSYS_MAX_LANE_PAYLOAD + 1;
	assert_int_equal(gpusys_emu_echo(dev, 0x1, in, len, out, cap, got, st), -E2BIG);
	/* an empty mask, and a flag nobody knows */
	assert_int_equal(gpusys_emu_noop(dev, 0), -EINVAL);
	assert_int_equal(gpusys_emu_rpc(dev, GPUSYS_OP_ECHO, 0x40, 0x1, in, len, out, cap, got, st), -EINVAL);

	/* Malformed requests written by hand, as a hostile client would. */
	struct gpusys_port *port = &dev->ports[0];
	uint32_t seq = dev->locks[0].seq;
	struct {
		uint32_t cw_flags;
		uint32_t mask;
		uint32_t len0;
		int32_t want;
	} bad[] = {
		{ 1u << 15, 1, 0, -EINVAL },                   /* unknown flag */
		{ 0, 0, 0, -EINVAL },                          /* empty mask */
		{ 0, 1, GPUSYS_MAX_LANE_PAYLOAD + 1, -E2BIG }, /* oversized lane */
		{ 0, 1, 0xffffffffu, -E2BIG },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		port->len[0] = bad[i].len0;
		port->aux[0] = 64;
		seq = (seq + 1) & GPUSYS_SEQ_MASK;
		__atomic_store_n(&dev->client_word[0], gpusys_client_word(seq, bad[i].cw_flags, GPUSYS_OP_ECHO, bad[i].mask),
				 __ATOMIC_RELEASE);
		uint64_t w;
		while (GPUSYS_WORD_SEQ(w = __atomic_load_n(&dev->server_word[0], __ATOMIC_ACQUIRE)) != seq)
			;
		assert_int_equal(GPUSYS_SW_STATUS(w), bad[i].want);
	}
	dev->locks[0].seq = seq;
	assert_true(atomic_load(&s->table.rejected) >= 4);
	/* and the channel still serves */
	len[0] = 10;
	assert_int_equal(gpusys_emu_echo(dev, 0xffffffffu, in, len, out, cap, got, st), 0);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

struct scribble_arg {
	struct inproc *s;
	atomic_int stop;
};

/* The scribbler stands for a hostile client process, which races the
 * server's reads of the channel by design and which ThreadSanitizer could
 * not see in real life (another process). What the test checks is that the
 * server survives it: each request copied out once, then validated (and
 * under ASan, no stray access). So under TSan the scribbler's own plain
 * reads and writes are left out of race detection; its atomics, and every
 * access of the server and the honest emulated warps, are still checked.
 * The dynamic-annotation calls are exported by the TSan run time. */
#ifdef GPUSYS_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define HOSTILE_WRITER_BEGIN() (AnnotateIgnoreReadsBegin(__FILE__, __LINE__), AnnotateIgnoreWritesBegin(__FILE__, __LINE__))
#define HOSTILE_WRITER_END() (AnnotateIgnoreWritesEnd(__FILE__, __LINE__), AnnotateIgnoreReadsEnd(__FILE__, __LINE__))
#else
#define HOSTILE_WRITER_BEGIN() ((void)0)
#define HOSTILE_WRITER_END() ((void)0)
#endif

static void *scribble(void *p)
{
	struct scribble_arg *a = p;
	uint64_t rng = 42;
	uint8_t *base = a->s->base;
	const struct gpusys_channel_header *h = a->s->base;
	/* Everything past the header page is the client's to scribble on. */
	size_t lo = h->client_word_offset, span = h->bulk_offset - lo;

	HOSTILE_WRITER_BEGIN();
	while (!atomic_load(&a->stop)) {
		size_t at = lo + rng_next(&rng) % span;
		base[at] = (uint8_t)rng_next(&rng);
		if ((rng_next(&rng) & 15) == 0) {
			/* move a client word so the server looks at garbage */
			uint32_t port = (uint32_t)(rng_next(&rng) % a->s->table.num_ports);
			volatile uint64_t *cw = (volatile uint64_t *)(base + h->client_word_offset);
			cw[port] += 1 + (rng_next(&rng) << 12);
		}
	}
	HOSTILE_WRITER_END();
	return NULL;
}

static void test_scribbled_channel(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(16, 2);
	struct scribble_arg a = { .s = s };
	pthread_t th;

	pthread_create(&th, NULL, scribble, &a);
	struct timespec d = { 0, 300 * 1000 * 1000 };
	nanosleep(&d, NULL);
	atomic_store(&a.stop, 1);
	pthread_join(th, NULL);
	/* The server survived (ASan would have caught a stray access) and
	 * bounded what it held for the garbage. */
	assert_true(atomic_load(&s->table.mem_used) <= s->table.mem_budget);
	inproc_stop(s);
}

/* A stamp is never 0, whatever the count, and keeps off the top bits. */
_Static_assert(GPUSYS_RING_STAMP(0) != 0, "a stamp is never 0");
_Static_assert((GPUSYS_RING_STAMP(UINT64_MAX) & (GPUSYS_RING_STREAM | GPUSYS_RING_HOST)) == 0,
	       "a stamp keeps off the top bits");

/* Every ring names its port (abi.h GPUSYS_RING_*): a first packet's value
 * has a stamp above every earlier one, which the GPU doorbell watch needs,
 * and a stream packet's carries port and sequence (a woken daemon serves
 * the named port first: test_idle's test_rung_served). */
static void test_doorbell_names_port(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	uint64_t last = dev->hdr->doorbell;

	for (uint32_t warp = 0; warp < 40; warp += 3) {
		gpusys_emu_set_warp(warp);
		assert_int_equal(gpusys_emu_noop(dev, 1), 0);
		uint64_t ring = dev->hdr->doorbell;
		assert_int_equal(ring & (GPUSYS_RING_STREAM | GPUSYS_RING_HOST), 0);
		assert_int_equal(gpusys_ring_port(ring), warp % 16);
		/* Above the last ring, so no bit subset of it. */
		assert_true((ring & GPUSYS_RING_STAMP_MASK) > (last & GPUSYS_RING_STAMP_MASK));
		assert_true((ring & ~last) != 0);
		last = ring;
	}

	/* A request that streams: its later packets ring with port, sequence
	 * and the top bit. It streams more than a packet, so it takes a
	 * window port (abi.h): of 16 ports the last 4, from the warp's hint. */
	uint32_t len[GPUSYS_WARP_LANES] = { [0] = 3 * GPUSYS_PACKET_BYTES };
	uint64_t rng = 7;
	gpusys_emu_set_warp(9);
	echo_and_check(dev, 1, len, &rng);
	uint64_t ring = dev->hdr->doorbell;
	assert_true(ring & GPUSYS_RING_STREAM);
	assert_int_equal(gpusys_num_windows(16), 4);
	assert_int_equal(gpusys_ring_port(ring), 12 + 9 % 4);

	/* The host library's wake names none; nor does a scribbled value past
	 * the port field's range (the daemon bounds it by its ports). */
	assert_int_equal(gpusys_ring_port(GPUSYS_RING_HOST | 5), UINT32_MAX);
	assert_true(gpusys_ring_port(GPUSYS_RING_STREAM | (UINT64_C(0x7fffffff) << 32)) >= GPUSYS_MAX_PORTS);
	assert_int_equal(gpusys_ring_port(GPUSYS_RING_STAMP(UINT64_MAX)), 0);

	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* Large messages stream through the window ports (abi.h): the last
 * num_windows ports, two 64 KiB slots each (ABI 10: two packets in
 * flight). A 32-lane echo of 64 KiB a lane takes a window port and moves 2
 * MiB each way in 1 + 32 packets, not 2047; its last response packet is in
 * the window's second slot, not in the port's data; calls that stream one
 * packet or less take a window that is free at once, else the warp's own
 * port. */
static void test_window_streams(void **state)
{
	(void)state;
	uint64_t rng = 99;
	struct inproc *s = inproc_start(16, 1);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	const struct gpusys_channel_header *h = dev->hdr;
	assert_int_equal(h->num_windows, 4);
	assert_int_equal(h->window_bytes, GPUSYS_WINDOW_BYTES);
	assert_true(h->window_offset >= h->ports_offset + 16 * sizeof(struct gpusys_port));
	assert_int_equal(h->bulk_offset, h->window_offset + 4 * GPUSYS_WINDOW_BYTES);

	uint32_t len[GPUSYS_WARP_LANES];
	for (int l = 0; l < 32; l++)
		len[l] = 64 * 1024;
	gpusys_emu_set_warp(2);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	uint64_t ring = dev->hdr->doorbell;
	uint32_t p = gpusys_ring_port(ring);
	assert_int_equal(p, 12 + 2);
	/* Its packets: packet 0, then the stream (32 x 65472 bytes) in
	 * 64 KiB packets each way, one client word each (the response's
	 * first word asks for two and the last asks for none: as many). */
	const uint32_t stream = 32u * (64u * 1024u - GPUSYS_INLINE_BYTES), pkt = GPUSYS_WINDOW_BYTES / 2;
	const uint32_t packets = (stream + pkt - 1) / pkt;
	assert_int_equal(packets, 32);
	/* The daemon's word, written by its thread: an atomic load. */
	assert_int_equal(GPUSYS_WORD_SEQ(__atomic_load_n(&dev->server_word[p], __ATOMIC_ACQUIRE)), 1 + 2 * packets);
	/* The window's second slot held the response's last packet (the
	 * stream's tail, packet 31): lane 31's last bytes, which
	 * echo_and_check compared with what it sent; here only that the
	 * window, not data[], carried them, in slot 31 % 2. */
	const uint8_t *win = (const uint8_t *)h + h->window_offset + 2 * GPUSYS_WINDOW_BYTES + pkt;
	uint32_t tail = stream % pkt;
	int nonzero = 0;
	for (uint32_t i = 0; i < (tail ? tail : pkt); i++)
		nonzero |= win[i];
	assert_true(nonzero);

	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_int_equal(gpusys_channel_progress(dev->hdr), gpusys_emu_submitted(emu));

	/* One packet's stream or less: a window if one is free at once
	 * (hint 5: window 12 + 5 % 4), whose answer then comes with its
	 * packet 0 (ABI 13; one exchange, not two)... */
	for (int l = 0; l < 32; l++)
		len[l] = l == 0 ? GPUSYS_PACKET_BYTES : 0;
	gpusys_emu_set_warp(5);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	assert_int_equal(gpusys_ring_port(dev->hdr->doorbell), 12 + 5 % 4);
	/* ...else the warp's own port, without waiting for one: every
	 * window held (their private locks taken, as a call holding them
	 * would, and given back as they were). */
	uint64_t held[4];
	for (int w = 0; w < 4; w++)
		held[w] = __atomic_exchange_n((uint64_t *)&dev->locks[12 + w], (uint64_t)1 /* GPUSYS_PORT_HELD */,
					      __ATOMIC_ACQUIRE);
	echo_and_check(dev, 0xffffffffu, len, &rng);
	assert_int_equal(gpusys_ring_port(dev->hdr->doorbell), 5);
	for (int w = 0; w < 4; w++)
		__atomic_store_n((uint64_t *)&dev->locks[12 + w], held[w], __ATOMIC_RELEASE);

	/* A capacity alone can ask for a window: the answer may be large. */
	for (int l = 0; l < 32; l++)
		len[l] = 125; /* streams 32 x 61 bytes, fewer than a packet's */
	gpusys_emu_set_warp(7);
	echo_and_check(dev, 0xffffffffu, len, &rng); /* caps of 133 a lane: 32 x 69 > 2 KiB */
	assert_int_equal(gpusys_ring_port(dev->hdr->doorbell), 12 + 7 % 4);

	/* Too few ports for windows: streams as before. */
	gpusys_emu_close(emu);
	inproc_stop(s);
	s = inproc_start(3, 1);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	dev = gpusys_emu_dev(emu);
	assert_int_equal(dev->hdr->num_windows, 0);
	for (int l = 0; l < 32; l++)
		len[l] = 3 * GPUSYS_PACKET_BYTES + 5;
	echo_and_check(dev, 0x00ff00ffu, len, &rng);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* Packet 0's inline bytes, as abi.h lays them out: lane l's chunk k at
 * data[512 k + 16 l]. The server's put and take (common/port_host.h) against
 * the layout written out by hand, both directions, every length to 64. */
static void test_inline_layout(void **state)
{
	(void)state;
	static struct gpusys_port port;
	for (uint32_t n = 0; n <= GPUSYS_INLINE_BYTES; n++) {
		memset(port.data, 0xee, sizeof(port.data));
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			uint8_t src[GPUSYS_INLINE_BYTES];
			for (uint32_t i = 0; i < n; i++)
				src[i] = (uint8_t)(l * 64 + i);
			port_host_inline_put(port.data, l, src, n);
		}
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			for (uint32_t i = 0; i < GPUSYS_INLINE_BYTES; i++) {
				uint8_t b = port.data[(i / 16) * 512 + l * 16 + i % 16];
				assert_int_equal(b, i < n ? (uint8_t)(l * 64 + i) : 0xee);
			}
			uint8_t back[GPUSYS_INLINE_BYTES];
			memset(back, 0, sizeof(back));
			port_host_inline_get(port.data, l, back, n);
			for (uint32_t i = 0; i < n; i++)
				assert_int_equal(back[i], (uint8_t)(l * 64 + i));
		}
	}
}

/* Heads (abi.h GPUSYS_CW_HEADS): a call of at most GPUSYS_HEAD_BYTES a lane
 * each way goes as one 16-byte head a lane, and its answer comes back the
 * same way; one byte more either way takes packet 0's chunks. */
static void test_heads_echo(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(2, 1);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	assert_int_equal(gpusys_emu_noop(dev, 0x1), 0);
	const uint32_t p = gpusys_ring_port(dev->hdr->doorbell); /* this warp's port */
	const struct gpusys_port *port = &dev->ports[p];
	static const uint64_t masks[] = { 0xffffffffu, 0x1, 0x80000000u, 0x55555555u, 0xaaaaaaaau };
	uint64_t rng = 0x4ead5eed;

	/* Twice: the second time every head's tag lands after its word
	 * (gpusys_emu_set_heads_late), as a GPU may let it, and the daemon
	 * leaves the word for a later pass (heads_early) until it has. */
	for (int late = 0; late < 2; late++)
	for (size_t mi = 0; mi < sizeof(masks) / sizeof(masks[0]); mi++) {
		gpusys_emu_set_heads_late(late);
		for (uint32_t n = 0; n <= GPUSYS_HEAD_BYTES + 1; n++) {
			uint8_t in_buf[32][GPUSYS_HEAD_BYTES + 1], out_buf[32][GPUSYS_HEAD_BYTES + 4];
			const void *in[32];
			void *out[32];
			uint32_t len[32], cap[32], got[32];
			int32_t st[32];
			for (int l = 0; l < 32; l++) {
				fill_random(in_buf[l], sizeof(in_buf[l]), &rng);
				memset(out_buf[l], 0xa5, sizeof(out_buf[l]));
				in[l] = in_buf[l];
				out[l] = out_buf[l];
				len[l] = n;
				cap[l] = n > GPUSYS_HEAD_BYTES ? n : GPUSYS_HEAD_BYTES;
				got[l] = 0xdeadbeef;
				st[l] = 12345;
			}
			assert_int_equal(gpusys_emu_echo(dev, masks[mi], in, len, out, cap, got, st), 0);
			assert_int_equal(gpusys_ring_port(dev->hdr->doorbell), p);
			uint32_t seq = dev->locks[p].seq & GPUSYS_SEQ_MASK;
			for (uint32_t l = 0; l < 32; l++) {
				if (!(masks[mi] >> l & 1))
					continue;
				assert_int_equal(st[l], 0);
				assert_int_equal(got[l], n);
				assert_memory_equal(out_buf[l], in_buf[l], n);
				assert_int_equal(out_buf[l][n], 0xa5);
				uint32_t tag = port->heads[l].tag;
				if (n <= GPUSYS_HEAD_BYTES) /* answered in heads */
					assert_int_equal(tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, n));
				else /* not: the lane's head is still the last call's */
					assert_int_equal(tag, gpusys_head_tag(seq - 1, GPUSYS_HEAD_ANSWER, n - 1));
			}
		}
	}
	/* The late words were seen before their heads (else keep calling:
	 * whether the poller looks within the gap is the scheduler's call). */
	for (int i = 0; i < 5000 && atomic_load(&s->table.heads_early) == 0; i++) {
		uint64_t x[32], y[32];
		const void *in[32];
		void *out[32];
		uint32_t len[32], cap[32], got[32];
		int32_t st[32];
		for (int l = 0; l < 32; l++)
			x[l] = (uint64_t)i << 8 | (uint64_t)l, in[l] = &x[l], out[l] = &y[l], len[l] = 8, cap[l] = 8;
		assert_int_equal(gpusys_emu_echo(dev, 0xffffffffu, in, len, out, cap, got, st), 0);
		for (int l = 0; l < 32; l++)
			assert_true(st[l] == 0 && got[l] == 8 && y[l] == x[l]);
	}
	assert_true(atomic_load(&s->table.heads_early) > 0);
	print_message("late heads: %llu words seen before their heads\n",
		      (unsigned long long)atomic_load(&s->table.heads_early));
	gpusys_emu_set_heads_late(0);

	/* A whole request's failure comes back in the heads. */
	uint8_t b[32][8], o[32][8];
	const void *in[32];
	void *out[32];
	uint32_t len[32], cap[32], got[32];
	int32_t st[32];
	for (int l = 0; l < 32; l++)
		in[l] = b[l], out[l] = o[l], len[l] = 4, cap[l] = 8, st[l] = 7;
	assert_int_equal(gpusys_emu_rpc(dev, 0x7abc, 0, 0x11, in, len, out, cap, got, st), -ENOSYS);
	assert_true(port->heads[4].tag & GPUSYS_HEAD_FAILED);

	/* Fire-and-forget: the daemon overwrites the request's heads, so none
	 * is left to pass for a later request of the same sequence. */
	assert_int_equal(gpusys_emu_rpc(dev, GPUSYS_OP_ECHO, GPUSYS_REQ_NOREPLY, 0x3, in, len, NULL, NULL, NULL, NULL),
			 0);
	assert_int_equal(gpusys_emu_noop(dev, 0x1), 0); /* waits for the ack of the one before */
	assert_int_equal(port->heads[0].tag & (GPUSYS_HEAD_REQUEST | GPUSYS_HEAD_ANSWER), GPUSYS_HEAD_ANSWER);
	assert_int_equal(port->heads[1].tag & (GPUSYS_HEAD_REQUEST | GPUSYS_HEAD_ANSWER), GPUSYS_HEAD_ANSWER);

	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* Write lane l's request head by hand, tag last (as a CPU client would). */
static void put_head(struct gpusys_port *port, uint32_t l, uint32_t tag, uint32_t cap, const char *bytes)
{
	memcpy(port->heads[l].bytes, bytes, GPUSYS_HEAD_BYTES);
	port->heads[l].aux = cap;
	__atomic_store_n(&port->heads[l].tag, tag, __ATOMIC_RELEASE);
}

/* Buffers for a raw call (raw_client.h): lane l sends len + l % 3 random
 * bytes (the lanes' streams end unaligned) and has room for 8 more back,
 * poisoned. */
struct raw_bufs {
	uint8_t *in[GPUSYS_WARP_LANES], *out[GPUSYS_WARP_LANES];
	uint32_t len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES], got[GPUSYS_WARP_LANES];
};

static void raw_bufs_fill(struct raw_bufs *b, uint64_t mask, uint32_t len, uint64_t *rng)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		b->len[l] = (mask >> l & 1) ? len + l % 3 : 0;
		b->cap[l] = b->len[l] + 8;
		b->in[l] = malloc(b->len[l] + 1);
		b->out[l] = malloc(b->cap[l]);
		fill_random(b->in[l], b->len[l], rng);
		memset(b->out[l], 0xa5, b->cap[l]);
	}
}

static void raw_bufs_check(struct raw_bufs *b, uint64_t mask)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (mask >> l & 1) {
			assert_int_equal(b->got[l], b->len[l]);
			assert_memory_equal(b->out[l], b->in[l], b->len[l]);
			for (uint32_t k = b->len[l]; k < b->cap[l]; k++)
				assert_int_equal(b->out[l][k], 0xa5);
		}
		free(b->in[l]);
		free(b->out[l]);
	}
}

/* Two stream packets in flight (abi.h, ABI 10), always: a client that
 * publishes two packets with one word wherever the protocol allows
 * (raw_client.h) makes the server take a word two past what it took at
 * packet 0 (through a window: packet 0 and stream packet 0), in each
 * request stream step and in each response stream step; every byte comes
 * back, from data[] ports (two 1 KiB slots) and window ports (two of 32
 * KiB), for one lane, alternate lanes and every lane. A server that took
 * one packet per word, or packet k from the wrong slot, or acknowledged
 * only the last of two, fails here. So does one that sends a window's
 * answer of one or two packets otherwise than with its packet 0
 * (GPUSYS_SW_STREAMED, ABI 13), or a longer one so. */
static void test_two_in_flight(void **state)
{
	(void)state;
	uint64_t rng = 0xfeedf00d;
	struct inproc *s = inproc_start(16, 2);
	struct raw_client c;
	raw_client_init(&c, s->base);
	static const uint32_t sizes[] = {
		GPUSYS_INLINE_BYTES + 1, GPUSYS_INLINE_BYTES + DATA_SLOT, GPUSYS_INLINE_BYTES + 2 * DATA_SLOT + 1,
		WINDOW_SLOT + GPUSYS_INLINE_BYTES, GPUSYS_WINDOW_BYTES, 200000,
	};
	static const uint64_t masks[] = { 1u << 9, 0xaaaaaaaau, 0xffffffffu };
	uint32_t seq[2] = { 0, 0 };
	const uint32_t ports[2] = { 3, 13 }; /* a port of its own data[], a window port (the last 4 of 16) */
	uint32_t pkt;
	assert_true(raw_stream(&c, 3, &pkt) == c.ports[3].data && pkt == DATA_SLOT);
	assert_true(raw_stream(&c, 13, &pkt) != c.ports[13].data && pkt == WINDOW_SLOT);

	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
		for (size_t m = 0; m < sizeof(masks) / sizeof(masks[0]); m++)
			for (int w = 0; w < 2; w++) {
				if (sizes[z] >= 200000 && masks[m] == 0xffffffffu)
					continue; /* 6 MiB a message: alternate lanes say it */
				struct raw_bufs b;
				raw_bufs_fill(&b, masks[m], sizes[z], &rng);
				uint32_t before = raw_streamed_answers, off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES];
				int32_t rc = raw_call(&c, ports[w], &seq[w], GPUSYS_OP_ECHO, masks[m], b.len, b.cap, b.in, b.out,
						      b.got);
				if (rc)
					fail_msg("size %u, mask %llx, port %u: %d", sizes[z], (unsigned long long)masks[m],
						 ports[w], rc);
				/* A window's answer of at most two packets comes
				 * with packet 0 (ABI 13); every other is asked for. */
				uint32_t n = port_host_packets_for(port_host_stream_layout(masks[m], b.len, off, part),
								   w ? WINDOW_SLOT : DATA_SLOT);
				assert_int_equal(raw_streamed_answers - before, w && n && n <= GPUSYS_STREAM_SLOTS);
				raw_bufs_check(&b, masks[m]);
			}
	assert_int_equal(atomic_load(&s->table.rejected), 0);
	inproc_stop(s);
}

/* An honest emulated warp that echoes until told to stop (and at least 20
 * times): small calls on its own port, large ones through the window
 * ports left to it. */
struct honest_arg {
	const gpusys_dev_t *dev;
	uint32_t warp;
	atomic_int *stop;
	unsigned calls;
};

static void *honest_echoes(void *p)
{
	struct honest_arg *a = p;
	uint64_t rng = 0x51515151u + a->warp;
	uint32_t len[GPUSYS_WARP_LANES];
	gpusys_emu_set_warp(a->warp);
	while (!atomic_load(a->stop) || a->calls < 20) {
		for (int l = 0; l < 32; l++)
			len[l] = a->calls % 3 == 2 ? 5000 + 977u * (uint32_t)l : (uint32_t)(rng_next(&rng) % 300);
		echo_and_check(a->dev, a->calls % 2 ? 0xffffffffu : 0x0f0f0f0fu, len, &rng);
		a->calls++;
	}
	return NULL;
}

/* Publish packet 0 of an ECHO of len bytes from lane 0 on port p, n
 * packets under one word (any stream packets among them written first,
 * or not). */
static void hostile_start(const struct raw_client *c, uint32_t p, uint32_t *seq, uint32_t len, uint32_t n,
			  uint8_t *buf)
{
	uint32_t cap[GPUSYS_WARP_LANES] = { [0] = len }, lens[GPUSYS_WARP_LANES] = { [0] = len };
	uint8_t *in[GPUSYS_WARP_LANES] = { [0] = buf };
	raw_packet0(c, p, 1, lens, cap, in);
	raw_publish(c, p, seq, n, gpusys_client_word(0, 0, GPUSYS_OP_ECHO, 1));
}

/* The server word once it is at seq: exactly there, with status want. */
static void hostile_expect(const struct raw_client *c, uint32_t p, uint32_t seq, int32_t want)
{
	uint64_t w = 0;
	assert_true(raw_wait_word(c, p, seq, &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), want);
}

/* A client that breaks the two-in-flight rules on its ports (abi.h: the
 * word may move 1 or 2 packets past what the server took, never past the
 * message's end): a jump of 3 at packet 0, in a request stream and in a
 * response stream; 2 at packet 0 through data[] (which packet 0 fills),
 * for a call that does not stream, or for a call of heads; 2 where one
 * packet is left; a slot scribbled before its packet was published. Each
 * is refused -EINVAL at the client's own sequence (the port is its again,
 * and serves its next honest call), or gives it its own garbage back;
 * meanwhile honest warps on the other ports of the channel, window ports
 * among them, see every byte of theirs come back, and the server's budget
 * is whole afterwards. */
static void test_stream_hostile(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(16, 2);
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	struct raw_client c;
	raw_client_init(&c, s->base);
	/* The hostile ports are taken from the emulated warps' locks: a
	 * window port (13) and a port of its own data[] (3). */
	const uint32_t wp = 13, dp = 3;
	uint32_t wseq = (uint32_t)(__atomic_exchange_n((uint64_t *)&dev->locks[wp], 1, __ATOMIC_ACQUIRE) >> 32);
	uint32_t dseq = (uint32_t)(__atomic_exchange_n((uint64_t *)&dev->locks[dp], 1, __ATOMIC_ACQUIRE) >> 32);
	atomic_int stop = 0;
	struct honest_arg ha[3];
	pthread_t th[3];
	for (int i = 0; i < 3; i++) {
		ha[i] = (struct honest_arg){ dev, (uint32_t)(i * 5), &stop, 0 }; /* ports 0, 5, 10 and windows */
		pthread_create(&th[i], NULL, honest_echoes, &ha[i]);
	}
	enum { FIVE = 5 * WINDOW_SLOT + GPUSYS_INLINE_BYTES }; /* a lane whose stream is 5 window packets */
	static uint8_t buf[FIVE];
	uint64_t rng = 3;
	fill_random(buf, sizeof(buf), &rng);
	uint32_t pkt, off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES];
	uint8_t *wstream = raw_stream(&c, wp, &pkt);
	const uint64_t word = gpusys_client_word(0, 0, GPUSYS_OP_ECHO, 1);
	const uint64_t rejected0 = atomic_load(&s->table.rejected);

	/* A jump of 3 at packet 0, on either port. */
	hostile_start(&c, wp, &wseq, 10, 3, buf);
	hostile_expect(&c, wp, wseq, -EINVAL);
	hostile_start(&c, dp, &dseq, 10, 3, buf);
	hostile_expect(&c, dp, dseq, -EINVAL);
	/* 2 at packet 0 through data[], for a request that streams. */
	hostile_start(&c, dp, &dseq, 3 * DATA_SLOT, 2, buf);
	hostile_expect(&c, dp, dseq, -EINVAL);
	/* 2 at packet 0 through a window, for a request that does not stream. */
	hostile_start(&c, wp, &wseq, 10, 2, buf);
	hostile_expect(&c, wp, wseq, -EINVAL);
	/* 2 at packet 0 for a call of heads (they never stream). */
	raw_publish(&c, wp, &wseq, 2, gpusys_client_word(0, GPUSYS_CW_HEADS, GPUSYS_OP_ECHO, 1));
	hostile_expect(&c, wp, wseq, -EINVAL);

	/* A jump of 3 in a request stream of 5 packets, after packet 0 and
	 * stream packet 0 together (taken). */
	hostile_start(&c, wp, &wseq, FIVE, 2, buf);
	assert_true(raw_wait(&c, wp, wseq));
	raw_publish(&c, wp, &wseq, 3, word);
	hostile_expect(&c, wp, wseq, -EINVAL);
	/* 2 where one packet is left: a request stream of 2 packets whose
	 * packet 0 came alone, then both (legal)... */
	hostile_start(&c, wp, &wseq, WINDOW_SLOT + GPUSYS_INLINE_BYTES + 1, 1, buf);
	assert_true(raw_wait(&c, wp, wseq));
	raw_publish(&c, wp, &wseq, 2, word);
	hostile_expect(&c, wp, wseq, 0);
	/* ... and its response of 2 packets asked for 3 at once. */
	raw_publish(&c, wp, &wseq, 3, word);
	hostile_expect(&c, wp, wseq, -EINVAL);
	/* A response of 5 packets: two asked for, then a jump of 3. */
	uint32_t lens[GPUSYS_WARP_LANES] = { [0] = FIVE }, cap[GPUSYS_WARP_LANES] = { [0] = FIVE };
	uint8_t *in[GPUSYS_WARP_LANES] = { [0] = buf };
	raw_packet0(&c, wp, 1, lens, cap, in);
	port_host_stream_layout(1, lens, off, part);
	port_host_stream_copy(wstream, pkt, 0, off, part, in, 1);
	raw_publish(&c, wp, &wseq, 2, word);
	for (uint32_t k = 1; k < 5; k += 2) {
		assert_true(raw_wait(&c, wp, wseq));
		port_host_stream_copy(wstream, pkt, k, off, part, in, 1);
		port_host_stream_copy(wstream, pkt, k + 1, off, part, in, 1);
		raw_publish(&c, wp, &wseq, 2, word);
	}
	hostile_expect(&c, wp, wseq, 0); /* answered */
	raw_publish(&c, wp, &wseq, 2, word);
	hostile_expect(&c, wp, wseq, 0); /* response packets 0 and 1 */
	raw_publish(&c, wp, &wseq, 3, word);
	hostile_expect(&c, wp, wseq, -EINVAL);
	assert_int_equal(atomic_load(&s->table.rejected) - rejected0, 8);

	/* A slot scribbled between writing its packet and publishing it: the
	 * client gets its own garbage back, every other byte intact. */
	struct raw_bufs b;
	uint64_t r2 = 11;
	raw_bufs_fill(&b, 1, 3 * WINDOW_SLOT, &r2);
	raw_packet0(&c, wp, 1, b.len, b.cap, b.in);
	const uint32_t n = port_host_packets_for(port_host_stream_layout(1, b.len, off, part), pkt);
	port_host_stream_copy(wstream, pkt, 0, off, part, b.in, 1);
	wstream[100] ^= 0xff; /* stream byte 100: the lane's byte 164 */
	b.in[0][GPUSYS_INLINE_BYTES + 100] ^= 0xff;
	raw_publish(&c, wp, &wseq, 2, word);
	for (uint32_t k = 1; k < n; k += 2) {
		assert_true(raw_wait(&c, wp, wseq));
		for (uint32_t i = k; i < k + 2 && i < n; i++)
			port_host_stream_copy(wstream, pkt, i, off, part, b.in, 1);
		raw_publish(&c, wp, &wseq, k + 2 <= n ? 2 : 1, word);
	}
	hostile_expect(&c, wp, wseq, 0);
	b.got[0] = c.ports[wp].len[0];
	port_host_inline_get(c.ports[wp].data, 0, b.out[0], GPUSYS_INLINE_BYTES);
	for (uint32_t k = 0; k < n; k += 2) {
		raw_publish(&c, wp, &wseq, k + 2 <= n ? 2 : 1, word);
		assert_true(raw_wait(&c, wp, wseq));
		for (uint32_t i = k; i < k + 2 && i < n; i++)
			port_host_stream_copy(wstream, pkt, i, off, part, b.out, 0);
	}
	raw_bufs_check(&b, 1); /* what it sent, scribble included */

	/* Both ports serve an honest call again, then go back to the warps. */
	uint64_t r3 = 5;
	for (int w = 0; w < 2; w++) {
		raw_bufs_fill(&b, 0xffffffffu, 3000, &r3);
		assert_int_equal(raw_call(&c, w ? wp : dp, w ? &wseq : &dseq, GPUSYS_OP_ECHO, 0xffffffffu, b.len, b.cap,
					  b.in, b.out, b.got),
				 0);
		raw_bufs_check(&b, 0xffffffffu);
	}
	__atomic_store_n((uint64_t *)&dev->locks[wp], (uint64_t)wseq << 32, __ATOMIC_RELEASE);
	__atomic_store_n((uint64_t *)&dev->locks[dp], (uint64_t)dseq << 32, __ATOMIC_RELEASE);
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_int_equal(atomic_load(&s->table.mem_used), 0);
	gpusys_emu_close(emu);
	inproc_stop(s);
}

/* Serve port 0 once, as a poller would. */
static enum port_step step_port0(struct inproc *s)
{
	struct port_call *call = NULL;
	if (!port_pending(&s->table, 0) || !port_try_claim(&s->table, 0))
		return PORT_STEP_NONE;
	enum port_step r = port_server_step(&s->table, 0, 0, &call);
	if (r == PORT_STEP_DEFER)
		port_server_run(call, 0);
	return r;
}

/* The word of a request of heads can land before its heads (no fence
 * between them on a GPU): the server leaves it for its next pass, and
 * serves it once the heads name it. Heads that name it with a length or
 * capacity past GPUSYS_HEAD_BYTES, or EMPTY with HEADS, are refused. */
static void test_heads_land_late(void **state)
{
	(void)state;
	struct inproc *s = inproc_start(2, 0); /* served by hand here */
	struct gpusys_port *port = &((struct gpusys_port *)((uint8_t *)s->base + gpusys_channel_layout(2, 0, 0).ports_offset))[0];
	volatile uint64_t *cw = (volatile uint64_t *)((uint8_t *)s->base + gpusys_channel_layout(2, 0, 0).client_word_offset);
	volatile uint64_t *sw = (volatile uint64_t *)((uint8_t *)s->base + gpusys_channel_layout(2, 0, 0).server_word_offset);
	uint32_t seq = 1;

	/* Lane 0's head is written, lane 2's is still an old answer. */
	put_head(port, 0, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, 3), 8, "abc\0\0\0\0");
	put_head(port, 2, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 5), 0, "old\0\0\0\0");
	__atomic_store_n(cw, gpusys_client_word(seq, GPUSYS_CW_HEADS, GPUSYS_OP_ECHO, 0x5), __ATOMIC_RELEASE);
	for (int pass = 0; pass < 3; pass++)
		assert_int_equal(step_port0(s), PORT_STEP_NONE);
	assert_int_equal(atomic_load(&s->table.heads_early), 3);
	assert_int_equal(GPUSYS_WORD_SEQ(*sw), 0); /* not answered */
	assert_int_equal(port->heads[0].tag, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, 3));

	/* Lane 2's head lands: served. */
	put_head(port, 2, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, 8), 8, "12345678");
	assert_int_equal(step_port0(s), PORT_STEP_DONE);
	assert_int_equal(GPUSYS_WORD_SEQ(*sw), seq);
	assert_int_equal(GPUSYS_SW_STATUS(*sw), 0);
	assert_int_equal(port->heads[0].tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 3));
	assert_int_equal(port->heads[0].aux, 0);
	assert_memory_equal(port->heads[0].bytes, "abc", 3);
	assert_int_equal(port->heads[2].tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 8));
	assert_memory_equal(port->heads[2].bytes, "12345678", 8);
	assert_int_equal(atomic_load(&s->table.heads_early), 3);

	/* Malformed heads, as a hostile client would write them. */
	struct {
		uint32_t cw_flags, tag_len, cap;
	} bad[] = {
		{ GPUSYS_CW_HEADS, GPUSYS_HEAD_BYTES + 1, 8 },           /* a length past the head */
		{ GPUSYS_CW_HEADS, 4, GPUSYS_HEAD_BYTES + 1 },           /* a capacity past it */
		{ GPUSYS_CW_HEADS | GPUSYS_CW_EMPTY, 4, 8 },             /* heads that say empty */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		seq++;
		put_head(port, 0, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, bad[i].tag_len), bad[i].cap, "xxxxxxxx");
		__atomic_store_n(cw, gpusys_client_word(seq, bad[i].cw_flags, GPUSYS_OP_ECHO, 0x1), __ATOMIC_RELEASE);
		assert_int_equal(step_port0(s), PORT_STEP_DONE);
		assert_int_equal(GPUSYS_WORD_SEQ(*sw), seq);
		assert_int_equal(GPUSYS_SW_STATUS(*sw), -EINVAL);
		assert_int_equal(port->heads[0].tag,
				 gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER | GPUSYS_HEAD_FAILED, 0));
		assert_int_equal((int32_t)port->heads[0].aux, -EINVAL);
	}
	inproc_stop(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inline_layout),
		cmocka_unit_test(test_echo_boundary_sizes),
		cmocka_unit_test(test_contention),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_scribbled_channel),
		cmocka_unit_test(test_doorbell_names_port),
		cmocka_unit_test(test_window_streams),
		cmocka_unit_test(test_heads_echo),
		cmocka_unit_test(test_heads_land_late),
		cmocka_unit_test(test_two_in_flight),
		cmocka_unit_test(test_stream_hostile),
	};
	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
