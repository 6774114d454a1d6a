/* SPDX-License-Identifier: MIT */
/*
 * User host callbacks (include/gpusys/callback.h) from emulated warps: the
 * real device protocol against this process's callback server. Every lane
 * of every warp with its result checked, payloads from 0 bytes to 1 MiB per
 * lane, unregistered opcodes and oversize arguments, slow callbacks while
 * other calls keep flowing, fire-and-forget, asynchronous calls completed
 * out of order, and a pool that sleeps when idle and wakes quickly; and
 * issue 27's storm (bench/cb_storm.h) on a small scale: warps at once whose
 * lanes each send their own 0..2 KiB, mixing packet 0 and streamed lanes in
 * every call.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bench/cb_storm.h" /* the storm's lengths and bytes, as the GPU's (tests/gpu/test_gpu_cbstorm.cu) */
#include "gpusys/callback.h"
#include "gpusys/gpusys.h" /* gpusys_strerror */
#include "gpusys/emulator.h"
#include "tests/proto/raw_client.h" /* a client by hand: two packets in flight, always */

#define LANES GPUSYS_WARP_LANES
#define ALL_LANES UINT64_C(0xffffffff)
#define MIB (UINT32_C(1) << 20)

enum {
	OP_MIX = 0x8001,    /* 16-byte (warp, lane, i, salt) -> 8-byte hash */
	OP_XFORM = 0x8002,  /* bytes -> the same bytes reversed, each ^ 0x5a; up to 1 MiB */
	OP_SLOW = 0x8003,   /* sleeps its argument's milliseconds */
	OP_COUNT = 0x8004,  /* adds its argument to a counter (fire-and-forget) */
	OP_SMALL = 0x8005,  /* arg_max 8: larger arguments get -E2BIG */
	OP_NOT_THERE = 0x8123,
};

static struct gpusys_callbacks *cb_;
static unsigned workers_; /* the server's */
static const gpusys_dev_t *dev_;
static atomic_uint_fast64_t counter_;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static int cb_mix(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	uint32_t v[4];
	if (arg_len != sizeof(v) || res_cap < 8)
		return -EINVAL;
	memcpy(v, arg, sizeof(v));
	uint64_t h = mix64(((uint64_t)v[0] << 40) ^ ((uint64_t)v[1] << 32) ^ v[2] ^ ((uint64_t)v[3] << 48));
	memcpy(res, &h, 8);
	*res_len = 8;
	return 0;
}

static int cb_xform(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	if (res_cap < arg_len)
		return -EMSGSIZE;
	const uint8_t *a = arg;
	uint8_t *r = res;
	for (uint32_t i = 0; i < arg_len; i++)
		r[i] = a[arg_len - 1 - i] ^ 0x5a;
	*res_len = arg_len;
	return 0;
}

static int cb_slow(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user, (void)res, (void)res_cap, (void)res_len;
	uint32_t ms = 0;
	if (arg_len == 4)
		memcpy(&ms, arg, 4);
	nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 }, NULL);
	return 0;
}

static int cb_count(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user, (void)res, (void)res_cap, (void)res_len;
	uint32_t v = 0;
	if (arg_len == 4)
		memcpy(&v, arg, 4);
	atomic_fetch_add(&counter_, v);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	/* TEST_CALLBACK_THREADS: meson runs the program again with more
	 * workers than spin at once (SPINNERS_MAX, 4), so that the others'
	 * sleeping and waking is tested too. */
	const char *t = getenv("TEST_CALLBACK_THREADS");
	workers_ = t ? (unsigned)atoi(t) : 4;
	assert_true(workers_ >= 1 && workers_ <= 16);
	struct gpusys_callbacks_opts o = { .num_ports = 32, .threads = workers_ };
	assert_int_equal(gpusys_callbacks_create(&o, &cb_), 0);
	const struct gpusys_callback_desc d[] = {
		{ .opcode = OP_MIX, .name = "mix", .arg_max = 16, .res_max = 8, .fn = cb_mix },
		{ .opcode = OP_XFORM, .name = "xform", .arg_max = MIB, .res_max = MIB, .fn = cb_xform },
		{ .opcode = OP_SLOW, .name = "slow", .arg_max = 4, .res_max = 0, .fn = cb_slow },
		{ .opcode = OP_COUNT, .name = "count", .arg_max = 4, .res_max = 0, .fn = cb_count },
		{ .opcode = OP_SMALL, .name = "small", .arg_max = 8, .res_max = MIB, .fn = cb_xform },
	};
	for (unsigned i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		assert_int_equal(gpusys_callbacks_register(cb_, &d[i]), 0);
	dev_ = gpusys_callbacks_emu_dev(cb_);
	assert_non_null(dev_);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gpusys_callbacks_destroy(cb_);
	return 0;
}

/* Wait until the server has completed every request submitted to it. */
static void sync_callbacks(void)
{
	uint64_t t0 = now_ns();
	while (gpusys_channel_progress(dev_->hdr) < __atomic_load_n(dev_->submitted, __ATOMIC_ACQUIRE)) {
		assert_true(now_ns() - t0 < 5000000000ull);
		usleep(100);
	}
}

static void test_registration(void **state)
{
	(void)state;
	struct gpusys_callback_desc d = { .opcode = 0x7fff, .name = "x", .arg_max = 4, .res_max = 4, .fn = cb_mix };
	assert_int_equal(gpusys_callbacks_register(cb_, &d), -EINVAL); /* not a user opcode */
	d.opcode = OP_MIX;
	assert_int_equal(gpusys_callbacks_register(cb_, &d), -EEXIST);
	d.opcode = 0x9000;
	d.arg_max = MIB + 1;
	assert_int_equal(gpusys_callbacks_register(cb_, &d), -EINVAL);
	d.arg_max = 4;
	d.fn = NULL;
	assert_int_equal(gpusys_callbacks_register(cb_, &d), -EINVAL);
	const char *name;
	uint16_t op;
	assert_int_equal(gpusys_callbacks_info(cb_, 1, &name, &op, NULL), 0);
	assert_string_equal(name, "xform");
	assert_int_equal(op, OP_XFORM);
	assert_int_equal(gpusys_callbacks_info(cb_, 5, &name, &op, NULL), -ENOENT);
}

/* ------------------------------------------------ every lane, every warp */

struct warp_job {
	uint32_t warp;
	unsigned calls;
	int async;
	int rc;
	unsigned bad_call;
};

static void *mix_warp(void *arg)
{
	struct warp_job *j = arg;
	uint32_t v[LANES][4];
	uint64_t r[LANES];
	const void *in[LANES];
	void *out[LANES];
	uint32_t in_len[LANES], cap[LANES], got[LANES];
	int32_t st[LANES];

	gpusys_emu_set_warp(j->warp);
	for (unsigned i = 0; i < j->calls && !j->rc; i++) {
		/* Full warps mostly, some partial masks. */
		uint64_t mask = i % 5 ? ALL_LANES : (uint64_t)(uint32_t)mix64(i * 977u + j->warp) | 1u;
		for (uint32_t l = 0; l < LANES; l++) {
			v[l][0] = j->warp, v[l][1] = l, v[l][2] = i, v[l][3] = 0xabcd;
			in[l] = v[l];
			out[l] = &r[l];
			in_len[l] = 16;
			cap[l] = 8;
			r[l] = 0;
			got[l] = 0;
			st[l] = 1;
		}
		int rc;
		if (j->async) {
			struct gpusys_emu_future f;
			gpusys_emu_rpc_async(dev_, OP_MIX, 0, mask, in, in_len, out, cap, got, st, &f);
			rc = gpusys_emu_wait(dev_, &f);
		} else {
			rc = gpusys_emu_rpc(dev_, OP_MIX, 0, mask, in, in_len, out, cap, got, st);
		}
		for (uint32_t l = 0; !rc && l < LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			uint64_t want = mix64(((uint64_t)j->warp << 40) ^ ((uint64_t)l << 32) ^ i ^ (0xabcdull << 48));
			if (st[l] || got[l] != 8 || r[l] != want)
				rc = -EBADMSG;
		}
		if (rc)
			j->rc = rc, j->bad_call = i;
	}
	return NULL;
}

static void test_every_lane_every_warp(void **state)
{
	(void)state;
	enum { WARPS = 8, CALLS = 400 };
	struct warp_job j[WARPS];
	pthread_t t[WARPS];
	uint64_t t0 = now_ns();
	for (uint32_t w = 0; w < WARPS; w++) {
		j[w] = (struct warp_job){ .warp = w, .calls = CALLS, .async = w % 2 };
		pthread_create(&t[w], NULL, mix_warp, &j[w]);
	}
	for (uint32_t w = 0; w < WARPS; w++) {
		pthread_join(t[w], NULL);
		if (j[w].rc)
			fail_msg("warp %u call %u: %s", w, j[w].bad_call, gpusys_strerror(j[w].rc));
	}
	print_message("%d warps x %d calls x up to 32 lanes, every result checked, %.0f ms\n", WARPS, CALLS,
		      (now_ns() - t0) / 1e6);
	sync_callbacks();
}

/* ---------------------------------------- small futures, ports scarce */

/* The shape of test_gpu_async's typed stage, which hung on the H200 (the
 * kernel still running with every request answered): every warp starts
 * three calls of 8 bytes each way (heads) as futures, then waits for all
 * three, round after round, with more futures wanted than the 24
 * asynchronous ports of this 32-port server (the others are made
 * synchronously). Every lane's result checked. It never hung here: emulated
 * warps land their heads before their word, and the GPU's hang needed a
 * word ahead of its heads (test_heads_late below makes them so). */
struct heads_job {
	uint32_t warp;
	unsigned rounds;
	int rc;
};

static void *heads_futures_warp(void *arg)
{
	struct heads_job *j = arg;
	uint64_t in[3][LANES], out[3][LANES];
	const void *inp[3][LANES];
	void *outp[3][LANES];
	uint32_t in_len[LANES], cap[LANES], got[3][LANES];
	int32_t st[3][LANES];
	gpusys_emu_set_warp(j->warp);
	for (uint32_t l = 0; l < LANES; l++)
		in_len[l] = 8, cap[l] = 8;
	for (unsigned r = 0; r < j->rounds && !j->rc; r++) {
		struct gpusys_emu_future f[3];
		for (unsigned k = 0; k < 3; k++) {
			for (uint32_t l = 0; l < LANES; l++) {
				in[k][l] = mix64(((uint64_t)j->warp << 40) ^ ((uint64_t)r << 8) ^ (k << 5) ^ l);
				out[k][l] = 0;
				got[k][l] = 0;
				st[k][l] = 1;
				inp[k][l] = &in[k][l];
				outp[k][l] = &out[k][l];
			}
			gpusys_emu_rpc_async(dev_, OP_SMALL, 0, ALL_LANES, inp[k], in_len, outp[k], cap, got[k], st[k],
					     &f[k]);
		}
		for (unsigned k = 0; k < 3; k++) {
			int rc = gpusys_emu_wait(dev_, &f[k]);
			for (uint32_t l = 0; !rc && l < LANES; l++) {
				uint8_t want[8], a[8];
				memcpy(a, &in[k][l], 8);
				for (unsigned i = 0; i < 8; i++)
					want[i] = a[7 - i] ^ 0x5a;
				if (st[k][l] || got[k][l] != 8 || memcmp(&out[k][l], want, 8))
					rc = -EBADMSG;
			}
			if (rc && !j->rc)
				j->rc = rc;
		}
	}
	return NULL;
}

/* warps emulated warps (at most 16) of rounds rounds of heads_futures_warp,
 * every one joined before this returns; 0, or the error of the first that
 * failed (which: *bad). */
static int run_heads_warps(uint32_t warps, unsigned rounds, uint32_t *bad)
{
	struct heads_job j[16];
	pthread_t t[16];
	assert_true(warps <= 16);
	for (uint32_t w = 0; w < warps; w++) {
		j[w] = (struct heads_job){ .warp = w, .rounds = rounds };
		pthread_create(&t[w], NULL, heads_futures_warp, &j[w]);
	}
	for (uint32_t w = 0; w < warps; w++)
		pthread_join(t[w], NULL);
	for (uint32_t w = 0; w < warps; w++)
		if (j[w].rc) {
			*bad = w;
			return j[w].rc;
		}
	return 0;
}

static void test_heads_futures_ports_scarce(void **state)
{
	(void)state;
	enum { WARPS = 16, ROUNDS = 300 };
	uint32_t bad = 0;
	uint64_t t0 = now_ns();
	int rc = run_heads_warps(WARPS, ROUNDS, &bad);
	if (rc)
		fail_msg("warp %u: %s", bad, gpusys_strerror(rc));
	print_message("%d warps x %d rounds of 3 futures of 8 B each way, every lane checked, %.0f ms\n", WARPS,
		      ROUNDS, (now_ns() - t0) / 1e6);
	sync_callbacks();
}

/* The same with every heads' tag landing after its word, as a GPU may let
 * them (gpusys_emu_set_heads_late): the server waits for them. Before the
 * fix (f3c8f73) the server answered such a word with status 1 and the late
 * heads overwrote the answer: a lane waited for ever. The watchdog turns
 * that into a failure that says so. */
/* A watchdog for a test whose failure is a wait that never ends: it turns
 * that into a failure that says what was waited for. */
static atomic_int watch_done;
static const char *watch_what;

static void *watchdog_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < 600 && !atomic_load(&watch_done); i++)
		usleep(50000);
	if (!atomic_load(&watch_done)) {
		fprintf(stderr, "%s\n", watch_what);
		_exit(1);
	}
	return NULL;
}

/* Fail the whole test program with the message what unless
 * watchdog_stop comes within 30 s. */
static pthread_t watchdog_start(const char *what)
{
	pthread_t dog;
	watch_what = what;
	atomic_store(&watch_done, 0);
	assert_int_equal(pthread_create(&dog, NULL, watchdog_main, NULL), 0);
	return dog;
}

static void watchdog_stop(pthread_t dog)
{
	atomic_store(&watch_done, 1);
	pthread_join(dog, NULL);
}

static void test_heads_late(void **state)
{
	(void)state;
	enum { WARPS = 8, ROUNDS = 200 };
	uint32_t bad = 0;
	pthread_t dog = watchdog_start("test_heads_late: warps still waiting after 30 s: a late head's call answered "
				       "before its heads landed?");
	gpusys_emu_set_heads_late(1);
	int rc = run_heads_warps(WARPS, ROUNDS, &bad);
	watchdog_stop(dog);
	gpusys_emu_set_heads_late(0);
	if (rc)
		fail_msg("warp %u: %s", bad, gpusys_strerror(rc));
	sync_callbacks();
}

/* ------------------------------------------------------------- payloads */

static void xform_call(uint64_t mask, const uint32_t *len, int async)
{
	uint8_t *in_b[LANES] = { 0 }, *out_b[LANES] = { 0 };
	const void *in[LANES] = { 0 };
	void *out[LANES] = { 0 };
	uint32_t in_len[LANES] = { 0 }, cap[LANES] = { 0 }, got[LANES];
	int32_t st[LANES];

	for (uint32_t l = 0; l < LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		in_b[l] = malloc(len[l] + 1);
		out_b[l] = malloc(len[l] + 16);
		for (uint32_t b = 0; b < len[l]; b++)
			in_b[l][b] = (uint8_t)(mix64(b + (uint64_t)l * 1000003u) >> 17);
		memset(out_b[l], 0xee, len[l] + 16);
		in[l] = in_b[l];
		out[l] = out_b[l];
		in_len[l] = len[l];
		cap[l] = len[l] + 16 > MIB ? MIB : len[l] + 16;
		got[l] = UINT32_MAX;
		st[l] = 1;
	}
	int rc;
	if (async) {
		struct gpusys_emu_future f;
		gpusys_emu_rpc_async(dev_, OP_XFORM, 0, mask, in, in_len, out, cap, got, st, &f);
		rc = gpusys_emu_wait(dev_, &f);
	} else {
		rc = gpusys_emu_rpc(dev_, OP_XFORM, 0, mask, in, in_len, out, cap, got, st);
	}
	assert_int_equal(rc, 0);
	for (uint32_t l = 0; l < LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		assert_int_equal(st[l], 0);
		assert_int_equal(got[l], len[l]);
		for (uint32_t b = 0; b < len[l]; b++)
			if (out_b[l][b] != (in_b[l][len[l] - 1 - b] ^ 0x5a))
				fail_msg("lane %u byte %u of %u", l, b, len[l]);
		if (cap[l] > len[l])
			assert_int_equal(out_b[l][len[l]], 0xee);
		free(in_b[l]);
		free(out_b[l]);
	}
}

static void test_payloads(void **state)
{
	(void)state;
	/* packet 0's 16-byte chunks (abi.h gpusys_inline_at) and its end, a
	 * data[] slot's (ABI 10: 1 KiB, two packets in flight), a packet's, a
	 * window slot's (64 KiB) and a window's, the protocol's maximum */
	static const uint32_t sizes[] = { 0,	  1,	  4,	  15,	  16,	  17,	  31,	  33,	  63,
					  64,	  65,	  1087,	  1088,	  1089,	  2047,	  2048,	  2049,	  4097,
					  32768,  65535,  65536,  65537,  65599,  65600,  65601,  131072, 131136,
					  131137, 262144, MIB - 1, MIB };
	uint32_t len[LANES];
	gpusys_emu_set_warp(1);
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		/* one lane, alternate lanes, then every lane at that size */
		for (uint32_t l = 0; l < LANES; l++)
			len[l] = sizes[s];
		xform_call(UINT64_C(1) << (s % LANES), len, s % 2);
		if (sizes[s] <= 4097)
			xform_call(UINT64_C(0x55555555) << (s % 2), len, s % 2);
		if (sizes[s] <= 262144 || s == sizeof(sizes) / sizeof(sizes[0]) - 1)
			xform_call(ALL_LANES, len, (s + 1) % 2);
	}
	/* mixed sizes in one warp: 0 .. 1 MiB */
	for (uint32_t l = 0; l < LANES; l++)
		len[l] = l == 31 ? MIB : (uint32_t)(mix64(l) % 70000) * (l % 3);
	xform_call(ALL_LANES, len, 1);
	sync_callbacks();
}

/* -------------------------------------------------------------- storm */

struct storm_job {
	uint32_t warp;   /* the emulated warp (its first port) */
	uint32_t base;   /* the storm's thread id of lane 0 */
	unsigned rounds;
	uint8_t (*ib)[CB_STORM_MAX], (*ob)[CB_STORM_MAX]; /* LANES each */
	int rc;          /* the first failure: -errno, or -EBADMSG for a wrong answer */
	uint32_t bad_lane, bad_round, bad_byte;
};

/* Lane l of this warp is thread base + l of the GPU storm: its length
 * and bytes (cb_storm_len, cb_storm_byte), a new salt each round. Rounds
 * alternate synchronous and asynchronous calls, and room for 2 KiB back
 * with room for exactly the answer. */
static void *storm_warp(void *arg)
{
	struct storm_job *j = arg;
	uint8_t (*ib)[CB_STORM_MAX] = j->ib, (*ob)[CB_STORM_MAX] = j->ob;
	const void *in[LANES];
	void *out[LANES];
	uint32_t len[LANES], cap[LANES], got[LANES];
	int32_t st[LANES];

	gpusys_emu_set_warp(j->warp);
	for (unsigned r = 0; r < j->rounds && !j->rc; r++) {
		const uint32_t salt = r * 131u + j->warp;
		for (uint32_t l = 0; l < LANES; l++) {
			uint32_t tid = j->base + l;
			len[l] = cb_storm_len(tid, CB_STORM_MAX);
			for (uint32_t b = 0; b < len[l]; b++)
				ib[l][b] = cb_storm_byte(tid, salt, b);
			memset(ob[l], 0xee, CB_STORM_MAX);
			in[l] = ib[l], out[l] = ob[l];
			cap[l] = r % 4 >= 2 ? len[l] : CB_STORM_MAX;
			got[l] = UINT32_MAX;
			st[l] = 1;
		}
		int rc;
		if (r % 2) {
			struct gpusys_emu_future f;
			gpusys_emu_rpc_async(dev_, CB_STORM_OP_REVERSE, 0, ALL_LANES, in, len, out, cap, got, st, &f);
			rc = gpusys_emu_wait(dev_, &f);
		} else {
			rc = gpusys_emu_rpc(dev_, CB_STORM_OP_REVERSE, 0, ALL_LANES, in, len, out, cap, got, st);
		}
		for (uint32_t l = 0; l < LANES && !j->rc; l++) {
			uint32_t tid = j->base + l, n = len[l], b = 0;
			if (rc || st[l] || got[l] != n) {
				j->rc = rc ? rc : st[l] ? st[l] : -EBADMSG;
				b = UINT32_MAX;
			} else {
				while (b < n && ob[l][b] == cb_storm_byte(tid, salt, n - 1 - b))
					b++;
				if (b < n || (n < CB_STORM_MAX && ob[l][n] != 0xee))
					j->rc = -EBADMSG;
			}
			if (j->rc)
				j->bad_lane = l, j->bad_round = r, j->bad_byte = b;
		}
	}
	return NULL;
}

static void test_storm(void **state)
{
	(void)state;
	enum { WARPS = 8, ROUNDS = 24 };
	struct storm_job j[WARPS];
	pthread_t t[WARPS];
	/* Registered here, not in setup: test_registration counts the
	 * callbacks registered before it. */
	const struct gpusys_callback_desc d = { .opcode = CB_STORM_OP_REVERSE, .name = "reverse",
						.arg_max = CB_STORM_MAX, .res_max = CB_STORM_MAX,
						.fn = cb_storm_reverse };
	assert_int_equal(gpusys_callbacks_register(cb_, &d), 0);
	uint32_t streamed = 0, edges[CB_STORM_NEDGES] = { 0 };
	for (uint32_t tid = 0; tid < WARPS * LANES; tid++) {
		uint32_t n = cb_storm_len(tid, CB_STORM_MAX);
		streamed += n > GPUSYS_INLINE_BYTES;
		for (uint32_t e = 0; e < CB_STORM_NEDGES; e++)
			edges[e] += n == cb_storm_edge(e);
	}
	/* The shape the storm promises: every edge, and both kinds of lane. */
	for (uint32_t e = 0; e < CB_STORM_NEDGES; e++)
		assert_true(edges[e] > 0);
	assert_true(streamed > WARPS * LANES / 4 && streamed < WARPS * LANES);
	uint64_t t0 = now_ns();
	for (uint32_t w = 0; w < WARPS; w++) {
		j[w] = (struct storm_job){ .warp = 40 + w, .base = w * LANES, .rounds = ROUNDS };
		j[w].ib = malloc(LANES * CB_STORM_MAX);
		j[w].ob = malloc(LANES * CB_STORM_MAX);
		assert_non_null(j[w].ib);
		assert_non_null(j[w].ob);
		pthread_create(&t[w], NULL, storm_warp, &j[w]);
	}
	for (uint32_t w = 0; w < WARPS; w++) {
		pthread_join(t[w], NULL);
		free(j[w].ib);
		free(j[w].ob);
		if (j[w].rc)
			fail_msg("warp %u lane %u round %u (%u bytes): %s at byte %u", j[w].warp, j[w].bad_lane,
				 j[w].bad_round, cb_storm_len(j[w].base + j[w].bad_lane, CB_STORM_MAX),
				 gpusys_strerror(j[w].rc), j[w].bad_byte);
	}
	print_message("storm: %d warps x 32 lanes x %d rounds, 0..2048 B a lane (%u of %d lanes streamed), every "
		      "byte checked, %.0f ms\n",
		      WARPS, ROUNDS, streamed, WARPS * LANES, (now_ns() - t0) / 1e6);
	sync_callbacks();
}

/* --------------------------------------------------------------- errors */

static void test_unregistered_and_oversize(void **state)
{
	(void)state;
	const void *in[LANES] = { 0 };
	void *out[LANES] = { 0 };
	uint32_t in_len[LANES] = { 0 }, cap[LANES] = { 0 }, got[LANES];
	int32_t st[LANES];
	uint8_t big[LANES][16], res[LANES][16];

	gpusys_emu_set_warp(2);
	uint64_t t0 = now_ns();
	assert_int_equal(gpusys_emu_rpc(dev_, OP_NOT_THERE, 0, ALL_LANES, in, in_len, out, cap, got, st), -ENOSYS);
	struct gpusys_emu_future f;
	gpusys_emu_rpc_async(dev_, OP_NOT_THERE, 0, 1, in, in_len, out, cap, got, st, &f);
	assert_int_equal(gpusys_emu_wait(dev_, &f), -ENOSYS);
	/* A daemon opcode sent to the callback channel is nobody's here either. */
	assert_int_equal(gpusys_emu_rpc(dev_, GPUSYS_OP_ECHO, 0, 1, in, in_len, out, cap, got, st), -ENOSYS);
	assert_true(now_ns() - t0 < 2000000000ull); /* an answer, not a hang */

	/* arg_max 8: lanes sending 9 get -E2BIG, the others their answer. */
	for (uint32_t l = 0; l < LANES; l++) {
		memset(big[l], (int)l, sizeof(big[l]));
		in[l] = big[l];
		in_len[l] = l % 2 ? 9 : 8;
		out[l] = res[l];
		cap[l] = 16;
	}
	assert_int_equal(gpusys_emu_rpc(dev_, OP_SMALL, 0, ALL_LANES, in, in_len, out, cap, got, st), 0);
	for (uint32_t l = 0; l < LANES; l++) {
		if (l % 2) {
			assert_int_equal(st[l], -E2BIG);
			assert_int_equal(got[l], 0);
		} else {
			assert_int_equal(st[l], 0);
			assert_int_equal(got[l], 8);
			assert_int_equal(res[l][0], (uint8_t)(l ^ 0x5a));
		}
	}
	/* A capacity below the result: the callback says -EMSGSIZE. */
	for (uint32_t l = 0; l < LANES; l++)
		in_len[l] = 8, cap[l] = 4;
	assert_int_equal(gpusys_emu_rpc(dev_, OP_SMALL, 0, ALL_LANES, in, in_len, out, cap, got, st), 0);
	for (uint32_t l = 0; l < LANES; l++)
		assert_int_equal(st[l], -EMSGSIZE);
	sync_callbacks();
}

/* ------------------------------------------------ slow ones, others flow */

struct slow_job {
	uint32_t warp;
	uint32_t ms;
	int rc;
};

static void *slow_warp(void *arg)
{
	struct slow_job *j = arg;
	const void *in[LANES] = { &j->ms };
	void *out[LANES] = { 0 };
	uint32_t in_len[LANES] = { 4 }, cap[LANES] = { 0 }, got[LANES];
	int32_t st[LANES];
	struct gpusys_emu_future f;
	gpusys_emu_set_warp(j->warp);
	/* Asynchronously, polled every millisecond: a warp waiting on a GPU
	 * takes no CPU, so an emulated one should not either. */
	gpusys_emu_rpc_async(dev_, OP_SLOW, 0, 1, in, in_len, out, cap, got, st, &f);
	while (!gpusys_emu_test(dev_, &f))
		usleep(1000);
	j->rc = f.rc;
	return NULL;
}

/* Fast calls for ms milliseconds; how many. */
static unsigned fast_calls_for(unsigned ms)
{
	uint32_t v[4] = { 1, 2, 3, 4 };
	uint64_t r;
	const void *in[LANES] = { v };
	void *out[LANES] = { &r };
	uint32_t in_len[LANES] = { 16 }, cap[LANES] = { 8 }, got[LANES];
	int32_t st[LANES];
	unsigned n = 0;
	gpusys_emu_set_warp(20);
	uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
	while (now_ns() < end) {
		assert_int_equal(gpusys_emu_rpc(dev_, OP_MIX, 0, 1, in, in_len, out, cap, got, st), 0);
		assert_int_equal(st[0], 0);
		n++;
	}
	return n;
}

static void test_slow_callbacks_others_flow(void **state)
{
	(void)state;
	unsigned before = fast_calls_for(200);
	/* Two callbacks of 600 ms hold two of the four pool threads. */
	struct slow_job s[2] = { { .warp = 21, .ms = 600 }, { .warp = 22, .ms = 600 } };
	pthread_t t[2];
	uint64_t t0 = now_ns();
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, slow_warp, &s[i]);
	while (gpusys_callbacks_running(cb_) < 2)
		usleep(500);
	unsigned during = fast_calls_for(200);
	assert_int_equal(gpusys_callbacks_running(cb_) >= 2, 1); /* still running all along */
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(s[i].rc, 0);
	}
	uint64_t slow_ms = (now_ns() - t0) / 1000000u;
	print_message("fast callbacks: %u in 200 ms alone, %u in 200 ms beside two 600 ms callbacks (%.0f%%); "
		      "the slow ones took %llu ms\n",
		      before, during, 100.0 * during / (before ? before : 1), (unsigned long long)slow_ms);
	assert_true(slow_ms >= 600);
	/* Not stalled: fast calls kept completing while both slow ones ran
	 * (a stalled pool would give none for 600 ms). The rate itself is
	 * the emulation's CPU share on a small machine; the GPU figures are
	 * in bench/RESULTS.md. */
	assert_true(during >= 100);
	sync_callbacks();
}

/* ---------------------------------------------------- fire-and-forget */

static void test_noreply_callbacks(void **state)
{
	(void)state;
	uint32_t one[LANES];
	const void *in[LANES];
	void *out[LANES] = { 0 };
	uint32_t in_len[LANES], cap[LANES] = { 0 };
	for (uint32_t l = 0; l < LANES; l++)
		one[l] = l + 1, in[l] = &one[l], in_len[l] = 4;
	atomic_store(&counter_, 0);
	gpusys_emu_set_warp(4);
	for (int i = 0; i < 500; i++)
		assert_int_equal(gpusys_emu_rpc(dev_, OP_COUNT, GPUSYS_REQ_NOREPLY, ALL_LANES, in, in_len, out, cap,
						NULL, NULL),
				 0);
	sync_callbacks();
	assert_int_equal(atomic_load(&counter_), 500ull * (32 * 33 / 2));
}

/* --------------------------------------------- async, out of order */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static uint32_t gate_open_bits;

/* Held until the test opens its gate (bit = the argument). */
static int cb_gate(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user, (void)res, (void)res_cap, (void)res_len;
	uint32_t i = 0;
	if (arg_len != 4)
		return -EINVAL;
	memcpy(&i, arg, 4);
	pthread_mutex_lock(&gate_lock);
	while (!(gate_open_bits >> i & 1))
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	return (int)i; /* > 0 counts as success: the lane gets 0 */
}

static void test_async_out_of_order(void **state)
{
	(void)state;
	/* Four futures whose callbacks all run at once (one per pool
	 * thread: the test waits until four are running) and are let go in
	 * the order 3, 1, 2, 0: wait_any returns them in that order. */
	struct gpusys_callback_desc d = { .opcode = 0x8006, .name = "gate", .arg_max = 4, .fn = cb_gate };
	assert_int_equal(gpusys_callbacks_register(cb_, &d), 0);
	uint32_t idx[4] = { 0, 1, 2, 3 };
	const void *in[4][LANES];
	void *out[4][LANES];
	uint32_t in_len[4][LANES], cap[4][LANES], got[4][LANES];
	int32_t st[4][LANES];
	struct gpusys_emu_future f[4];
	gpusys_emu_set_warp(6);
	for (int i = 0; i < 4; i++) {
		in[i][0] = &idx[i];
		in_len[i][0] = 4;
		out[i][0] = NULL;
		cap[i][0] = 0;
		gpusys_emu_rpc_async(dev_, 0x8006, 0, 1, in[i], in_len[i], out[i], cap[i], got[i], st[i], &f[i]);
		assert_int_equal(f[i].pd.sync, 0);
	}
	uint64_t t0 = now_ns();
	while (gpusys_callbacks_running(cb_) < 4) {
		assert_true(now_ns() - t0 < 20000000000ull); /* four pool threads, four at once */
		usleep(1000);
	}
	for (int i = 0; i < 4; i++)
		assert_false(gpusys_emu_test(dev_, &f[i]));
	static const int order[4] = { 3, 1, 2, 0 };
	for (int k = 0; k < 4; k++) {
		pthread_mutex_lock(&gate_lock);
		gate_open_bits |= 1u << order[k];
		pthread_cond_broadcast(&gate_cond);
		pthread_mutex_unlock(&gate_lock);
		int i = gpusys_emu_wait_any(dev_, f, 4);
		assert_int_equal(i, order[k]);
		assert_int_equal(f[i].rc, 0);
		assert_int_equal(st[i][0], 0);
	}
	assert_int_equal(gpusys_emu_wait_any(dev_, f, 4), -ENOENT);
	sync_callbacks();
}

/* ------------------------------------------- two packets in flight */

/* Two stream packets in flight (abi.h, ABI 10), always, against the
 * callback server: a client written by hand that publishes two packets
 * under one word wherever the protocol allows (tests/proto/raw_client.h)
 * makes the server take packet 0 with the first stream packet (through a
 * window), two request packets a word and two response packets an ask;
 * every byte comes back transformed, through a port of its own data[] and
 * a window port, for one lane, alternate lanes and every lane; a window's
 * answer of one or two packets comes with its packet 0 (ABI 13). Then
 * words that break the rules: a jump of 3 at packet 0 and in a request
 * stream, and asks for more packets than the response has, each -EINVAL
 * at the client's sequence; the ports then serve honest calls again. */
static void test_two_in_flight_raw(void **state)
{
	(void)state;
	struct raw_client c;
	raw_client_init(&c, gpusys_callbacks_channel(cb_, NULL));
	/* No deep doze while the test's words arrive (it does not wake the
	 * poller through the pipe as emulated warps do). */
	gpusys_callbacks_expect(cb_, now_ns() + UINT64_C(60000000000));
	const uint32_t ports[2] = { 2, c.num_ports - 3 }; /* data[], a window (the last quarter) */
	uint32_t seq[2], pkt;
	for (int w = 0; w < 2; w++)
		seq[w] = (uint32_t)(__atomic_exchange_n((uint64_t *)&dev_->locks[ports[w]], 1, __ATOMIC_ACQUIRE) >> 32);
	assert_true(raw_stream(&c, ports[0], &pkt) == c.ports[ports[0]].data && pkt == GPUSYS_PACKET_BYTES / 2);
	assert_true(raw_stream(&c, ports[1], &pkt) != c.ports[ports[1]].data && pkt == GPUSYS_WINDOW_BYTES / 2);
	static const uint32_t sizes[] = { 65, 64 + 1024, 64 + 2048 + 1, 64 + 65536, 65536, 150001 };
	static const uint64_t masks[] = { 1u << 4, 0x55555555u, ALL_LANES };
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++)
		for (size_t m = 0; m < sizeof(masks) / sizeof(masks[0]); m++)
			for (int w = 0; w < 2; w++) {
				if (sizes[z] > 100000 && masks[m] == ALL_LANES)
					continue;
				uint8_t *in[LANES] = { 0 }, *out[LANES] = { 0 };
				uint32_t len[LANES] = { 0 }, cap[LANES] = { 0 }, got[LANES];
				for (uint32_t l = 0; l < LANES; l++) {
					len[l] = (masks[m] >> l & 1) ? sizes[z] + l % 3 : 0;
					cap[l] = len[l] + 4;
					in[l] = malloc(len[l] + 1);
					out[l] = malloc(cap[l]);
					for (uint32_t b = 0; b < len[l]; b++)
						in[l][b] = (uint8_t)(mix64(b + (uint64_t)l * 7919u + z) >> 23);
				}
				uint32_t before = raw_streamed_answers, off[LANES], part[LANES];
				int32_t rc = raw_call(&c, ports[w], &seq[w], OP_XFORM, masks[m], len, cap, in, out, got);
				if (rc)
					fail_msg("size %u mask %llx port %u: %d", sizes[z], (unsigned long long)masks[m],
						 ports[w], rc);
				/* A window's answer of at most two packets comes
				 * with its packet 0 (ABI 13), as the daemon's. */
				uint32_t n = port_host_packets_for(port_host_stream_layout(masks[m], len, off, part),
								   w ? GPUSYS_WINDOW_BYTES / 2 : GPUSYS_PACKET_BYTES / 2);
				assert_int_equal(raw_streamed_answers - before, w && n && n <= GPUSYS_STREAM_SLOTS);
				for (uint32_t l = 0; l < LANES; l++) {
					if (masks[m] >> l & 1) {
						assert_int_equal(got[l], len[l]);
						for (uint32_t b = 0; b < len[l]; b++)
							if (out[l][b] != (in[l][len[l] - 1 - b] ^ 0x5a))
								fail_msg("size %u lane %u byte %u", sizes[z], l, b);
					}
					free(in[l]);
					free(out[l]);
				}
			}

	/* Words that break the rules, on the window port. */
	const uint32_t p = ports[1];
	static uint8_t buf[3 * GPUSYS_WINDOW_BYTES];
	uint8_t *in[LANES] = { buf };
	uint32_t len[LANES] = { 10 }, cap[LANES] = { 10 };
	const uint64_t word = gpusys_client_word(0, 0, OP_XFORM, 1);
	uint64_t w = 0;
	raw_packet0(&c, p, 1, len, cap, in); /* a jump of 3 at packet 0 */
	raw_publish(&c, p, &seq[1], 3, word);
	assert_true(raw_wait_word(&c, p, seq[1], &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq[1] & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), -EINVAL);
	len[0] = cap[0] = sizeof(buf); /* 6 window packets: 0 with packet 0, then a jump of 3 */
	raw_packet0(&c, p, 1, len, cap, in);
	raw_publish(&c, p, &seq[1], 2, word);
	assert_true(raw_wait(&c, p, seq[1]));
	raw_publish(&c, p, &seq[1], 3, word);
	assert_true(raw_wait_word(&c, p, seq[1], &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq[1] & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), -EINVAL);
	len[0] = cap[0] = 64 + 100; /* one response packet through a window: it comes with packet 0 */
	raw_packet0(&c, p, 1, len, cap, in);
	raw_publish(&c, p, &seq[1], 2, word);
	assert_true(raw_wait_word(&c, p, seq[1], &w));
	assert_int_equal(GPUSYS_SW_STATUS(w), 0);
	assert_int_equal(GPUSYS_WORD_FLAGS(w), GPUSYS_SW_STREAMED);
	/* One response packet through data[], asked for twice: packet 0,
	 * its acknowledgement, the stream packet, the answer, an ask of 2. */
	{
		const uint32_t q0 = ports[0];
		uint32_t off[LANES], part[LANES], qpkt;
		uint8_t *qs = raw_stream(&c, q0, &qpkt);
		port_host_stream_layout(1, len, off, part);
		raw_packet0(&c, q0, 1, len, cap, in);
		raw_publish(&c, q0, &seq[0], 1, word);
		assert_true(raw_wait(&c, q0, seq[0]));
		port_host_stream_copy(qs, qpkt, 0, off, part, in, 1);
		raw_publish(&c, q0, &seq[0], 1, word);
		assert_true(raw_wait_word(&c, q0, seq[0], &w));
		assert_int_equal(GPUSYS_SW_STATUS(w), 0);
		assert_int_equal(GPUSYS_WORD_FLAGS(w), 0);
		raw_publish(&c, q0, &seq[0], 2, word);
		assert_true(raw_wait_word(&c, q0, seq[0], &w));
		assert_int_equal(GPUSYS_WORD_SEQ(w), seq[0] & GPUSYS_SEQ_MASK);
		assert_int_equal(GPUSYS_SW_STATUS(w), -EINVAL);
	}

	/* A first word two ahead where only one may be: a request that does
	 * not stream, on the data[] port; and a call of heads, whose refusal
	 * comes back in its heads (GPUSYS_HEAD_FAILED). */
	const uint32_t q = ports[0];
	len[0] = cap[0] = 10;
	raw_packet0(&c, q, 1, len, cap, in);
	raw_publish(&c, q, &seq[0], 2, word);
	assert_true(raw_wait_word(&c, q, seq[0], &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq[0] & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), -EINVAL);
	struct gpusys_head *h = &c.ports[q].heads[3];
	memset(h->bytes, 0, sizeof(h->bytes));
	__atomic_store_n(&h->aux, 8, __ATOMIC_RELAXED);
	__atomic_store_n(&h->tag, gpusys_head_tag(seq[0] + 2, GPUSYS_HEAD_REQUEST, 4), __ATOMIC_RELEASE);
	raw_publish(&c, q, &seq[0], 2, gpusys_client_word(0, GPUSYS_CW_HEADS, OP_SMALL, 1u << 3));
	assert_true(raw_wait_word(&c, q, seq[0], &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq[0] & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), -EINVAL);
	assert_int_equal(h->tag, gpusys_head_tag(seq[0], GPUSYS_HEAD_ANSWER | GPUSYS_HEAD_FAILED, 0));
	assert_int_equal((int32_t)h->aux, -EINVAL);

	/* The ports go back to the emulated warps, and serve them. */
	for (int i = 0; i < 2; i++)
		__atomic_store_n((uint64_t *)&dev_->locks[ports[i]], (uint64_t)seq[i] << 32, __ATOMIC_RELEASE);
	gpusys_callbacks_expect(cb_, 0);
	uint32_t lens[LANES];
	for (uint32_t l = 0; l < LANES; l++)
		lens[l] = 70000 + l;
	gpusys_emu_set_warp(ports[1]); /* its hint names the window port */
	xform_call(ALL_LANES, lens, 0);
	gpusys_emu_set_warp(ports[0]);
	xform_call(0x3, lens, 1);
	sync_callbacks();
}

/* The word of a call of heads can land before its heads (a GPU publishes
 * them without a fence before the word, abi.h): the server waits for the
 * heads and answers the call as sent. It used to answer at once with the
 * status 1 (its own "not yet"), in heads that the late request heads then
 * overwrote: the warp waited forever (test_gpu_async on the H200). */
static void put_head(struct gpusys_port *port, uint32_t l, uint32_t tag, uint32_t cap, const char *bytes)
{
	memcpy(port->heads[l].bytes, bytes, GPUSYS_HEAD_BYTES);
	__atomic_store_n(&port->heads[l].aux, cap, __ATOMIC_RELAXED);
	__atomic_store_n(&port->heads[l].tag, tag, __ATOMIC_RELEASE);
}

/* Port p of the callback channel taken from the emulated warps (its lock
 * held) for a client written by hand; the poller kept awake meanwhile (the
 * test does not wake it through the pipe as emulated warps do). Its
 * sequence, once the server has handed it back. */
static uint32_t take_port_by_hand(struct raw_client *c, uint32_t p)
{
	raw_client_init(c, gpusys_callbacks_channel(cb_, NULL));
	gpusys_callbacks_expect(cb_, now_ns() + UINT64_C(60000000000));
	uint32_t seq = (uint32_t)(__atomic_exchange_n((uint64_t *)&dev_->locks[p], 1, __ATOMIC_ACQUIRE) >> 32);
	assert_true(raw_wait(c, p, seq)); /* ours */
	return seq;
}

/* Port p back to the emulated warps at seq. */
static void give_port_back(uint32_t p, uint32_t seq)
{
	__atomic_store_n((uint64_t *)&dev_->locks[p], (uint64_t)seq << 32, __ATOMIC_RELEASE);
	gpusys_callbacks_expect(cb_, 0);
}

static void test_heads_land_late(void **state)
{
	(void)state;
	struct raw_client c;
	const uint32_t p = 5;
	uint32_t seq = take_port_by_hand(&c, p);
	struct gpusys_port *port = &c.ports[p];

	/* Lane 0's head has landed; lane 2's is still the last call's answer. */
	put_head(port, 0, gpusys_head_tag(seq + 1, GPUSYS_HEAD_REQUEST, 3), 8, "abc\0\0\0\0");
	put_head(port, 2, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 5), 0, "old\0\0\0\0");
	raw_publish(&c, p, &seq, 1, gpusys_client_word(0, GPUSYS_CW_HEADS, OP_SMALL, 0x5));
	usleep(20000);
	assert_int_not_equal(GPUSYS_WORD_SEQ(__atomic_load_n(&c.sw[p], __ATOMIC_ACQUIRE)), seq & GPUSYS_SEQ_MASK);
	assert_int_equal(port->heads[0].tag, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, 3));

	/* Lane 2's head lands: the call is served as sent. */
	put_head(port, 2, gpusys_head_tag(seq, GPUSYS_HEAD_REQUEST, 8), 8, "12345678");
	uint64_t w = 0;
	assert_true(raw_wait_word(&c, p, seq, &w));
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), 0);
	const char want0[3] = { 'c' ^ 0x5a, 'b' ^ 0x5a, 'a' ^ 0x5a };
	assert_int_equal(port->heads[0].tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 3));
	assert_int_equal(port->heads[0].aux, 0);
	assert_memory_equal(port->heads[0].bytes, want0, 3);
	assert_int_equal(port->heads[2].tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER, 8));
	assert_int_equal(port->heads[2].aux, 0);
	for (uint32_t b = 0; b < 8; b++)
		assert_int_equal(port->heads[2].bytes[b], "12345678"[7 - b] ^ 0x5a);

	give_port_back(p, seq);
}

/* A call of heads whose heads never land (its kernel scribbled the word,
 * or died between): the server answers it -EPROTO in its heads after
 * HEADS_LATE_MAX_NS (1 s), instead of looking at its port for ever; the port
 * then serves honest calls. */
static void test_heads_never_land(void **state)
{
	(void)state;
	struct raw_client c;
	const uint32_t p = 6;
	uint32_t seq = take_port_by_hand(&c, p);
	struct gpusys_port *port = &c.ports[p];

	/* Lane 2's head is an old request's, and stays so. */
	put_head(port, 2, gpusys_head_tag(seq - 6, GPUSYS_HEAD_REQUEST, 3), 8, "abc\0\0\0\0");
	const uint64_t t0 = now_ns();
	raw_publish(&c, p, &seq, 1, gpusys_client_word(0, GPUSYS_CW_HEADS, OP_SMALL, 1u << 2));
	uint64_t w = 0;
	assert_true(raw_wait_word(&c, p, seq, &w));
	const uint64_t waited = now_ns() - t0;
	assert_int_equal(GPUSYS_WORD_SEQ(w), seq & GPUSYS_SEQ_MASK);
	assert_int_equal(GPUSYS_SW_STATUS(w), -EPROTO);
	assert_int_equal(port->heads[2].tag, gpusys_head_tag(seq, GPUSYS_HEAD_ANSWER | GPUSYS_HEAD_FAILED, 0));
	assert_int_equal((int32_t)port->heads[2].aux, -EPROTO);
	if (waited < UINT64_C(1000000000))
		fail_msg("answered after %llu ms, before the heads could be called lost",
			 (unsigned long long)(waited / 1000000));

	/* The port goes back to the emulated warps, and serves them. */
	give_port_back(p, seq);
	uint32_t lens[LANES];
	for (uint32_t l = 0; l < LANES; l++)
		lens[l] = 3 + l % 5;
	gpusys_emu_set_warp(p);
	xform_call(ALL_LANES, lens, 0);
}

/* Kernels that stop part way through a message (a stream's next packet
 * late, a warp descheduled, a kernel that died) hold no worker: the server
 * steps each port as far as its client word allows and lets it go, as the
 * daemon does. Before, a worker followed one message to its end, so as
 * many stalled streams as workers (one for each of the setup's) stopped every other call of the
 * process; at scale, 4 workers let only 4 large calls progress at once
 * (bench/RESULTS.md, "Tenth session"). The stalled calls then finish, with
 * their bytes checked. */
struct stalled_call {
	uint32_t p, seq;
	struct raw_client c;
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	unsigned *paused;
	bool *go;
	int32_t rc;
	int bad;
};

static void stall_here(void *arg)
{
	struct stalled_call *s = arg;
	pthread_mutex_lock(s->lock);
	(*s->paused)++;
	pthread_cond_broadcast(s->cond);
	while (!*s->go)
		pthread_cond_wait(s->cond, s->lock);
	pthread_mutex_unlock(s->lock);
}

static void *stalled_caller(void *arg)
{
	struct stalled_call *s = arg;
	enum { N = 64 + 5 * GPUSYS_PACKET_BYTES + 17 }; /* several stream packets */
	uint8_t *in[LANES] = { 0 }, *out[LANES] = { 0 };
	uint32_t len[LANES] = { 0 }, cap[LANES] = { 0 }, got[LANES];
	const uint64_t mask = 0x81u;
	for (uint32_t l = 0; l < LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		len[l] = cap[l] = N + l;
		in[l] = malloc(len[l]);
		out[l] = malloc(cap[l]);
		for (uint32_t b = 0; b < len[l]; b++)
			in[l][b] = (uint8_t)(mix64(b + (uint64_t)s->p * 131u + l) >> 17);
	}
	s->rc = raw_call_paused(&s->c, s->p, &s->seq, OP_XFORM, mask, len, cap, in, out, got, stall_here, s);
	for (uint32_t l = 0; l < LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		if (!s->rc && got[l] != len[l])
			s->bad++;
		for (uint32_t b = 0; !s->rc && b < got[l]; b++)
			s->bad += out[l][b] != (in[l][len[l] - 1 - b] ^ 0x5a);
		free(in[l]);
		free(out[l]);
	}
	return NULL;
}

static void test_stalled_streams_hold_no_worker(void **state)
{
	(void)state;
	enum { STALLED_MAX = 16 };
	const uint32_t STALLED = workers_; /* one for each worker: ports 8 .. 23 */
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	unsigned paused = 0;
	bool go = false;
	struct stalled_call s[STALLED_MAX];
	pthread_t th[STALLED_MAX];
	for (uint32_t i = 0; i < STALLED; i++) {
		s[i] = (struct stalled_call){ .p = 8 + i, .lock = &lock, .cond = &cond, .paused = &paused, .go = &go };
		s[i].seq = take_port_by_hand(&s[i].c, s[i].p);
		assert_int_equal(pthread_create(&th[i], NULL, stalled_caller, &s[i]), 0);
	}
	pthread_mutex_lock(&lock);
	while (paused < STALLED)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	/* Every stalled call has had its first packets taken; the other
	 * calls of the process flow meanwhile. */
	pthread_t dog = watchdog_start("test_stalled_streams_hold_no_worker: a call waited 30 s behind stalled "
				       "streams: each holds a worker?");
	uint32_t lens[LANES];
	for (uint32_t l = 0; l < LANES; l++)
		lens[l] = 3 + 700 * (l % 4);
	gpusys_emu_set_warp(26);
	xform_call(ALL_LANES, lens, 0);
	xform_call(0x30, lens, 1);
	watchdog_stop(dog);

	pthread_mutex_lock(&lock);
	go = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	for (uint32_t i = 0; i < STALLED; i++) {
		pthread_join(th[i], NULL);
		if (s[i].rc || s[i].bad)
			fail_msg("stalled call on port %u: status %d, %d bytes wrong", s[i].p, s[i].rc, s[i].bad);
		give_port_back(s[i].p, s[i].seq);
	}
	sync_callbacks();
}

/* ------------------------------------------------------------- idle */

static double cpu_ms(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 +
	       ru.ru_stime.tv_usec / 1e3;
}

static void test_idle_and_wakeup(void **state)
{
	(void)state;
	/* After a quiet of 50 ms the pool is asleep: half a second costs
	 * (almost) no CPU. */
	usleep(50000);
	double c0 = cpu_ms();
	usleep(500000);
	double idle = cpu_ms() - c0;
	/* The first call after the quiet: the emulated warp wakes the poller
	 * through the eventfd (the dozing handshake). */
	uint32_t v[4] = { 9, 9, 9, 9 };
	uint64_t r;
	const void *in[LANES] = { v };
	void *out[LANES] = { &r };
	uint32_t in_len[LANES] = { 16 }, cap[LANES] = { 8 }, got[LANES];
	int32_t st[LANES];
	uint64_t t0 = now_ns();
	assert_int_equal(gpusys_emu_rpc(dev_, OP_MIX, 0, 1, in, in_len, out, cap, got, st), 0);
	double first_us = (now_ns() - t0) / 1e3;
	print_message("idle pool: %.2f ms of CPU in 500 ms (%.2f%%); first call after the quiet %.0f us\n", idle,
		      idle / 5.0, first_us);
	assert_true(idle < 10.0);        /* < 2% of a core: no spinning thread */
	/* Woken by the pipe, not found by the safety rescan (due about 450 ms
	 * after this call); the bound leaves room for a loaded machine. */
	assert_true(first_us < 200000.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registration),
		cmocka_unit_test(test_every_lane_every_warp),
		cmocka_unit_test(test_payloads),
		cmocka_unit_test(test_storm),
		cmocka_unit_test(test_unregistered_and_oversize),
		cmocka_unit_test(test_slow_callbacks_others_flow),
		cmocka_unit_test(test_noreply_callbacks),
		cmocka_unit_test(test_async_out_of_order),
		cmocka_unit_test(test_heads_futures_ports_scarce),
		cmocka_unit_test(test_heads_land_late),
		cmocka_unit_test(test_heads_never_land),
		cmocka_unit_test(test_heads_late),
		cmocka_unit_test(test_two_in_flight_raw),
		cmocka_unit_test(test_stalled_streams_hold_no_worker),
		cmocka_unit_test(test_idle_and_wakeup),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
