/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench calls --emulate: the synchronous path before and after the
 * split into start/finish (gpusys_rpc_v0, bench/rpc_v0.h, against
 * gpusys_rpc, same binary, alternating rounds), and a user callback round
 * trip against a NOOP, from one emulated warp; then issue 27's callback
 * storm (bench/cb_storm.h) on a small scale: --warps emulated warps (host
 * threads, 8 by default, so 256 lanes where the GPU runs 33,792 threads),
 * each lane one call a round with its own payload of 0..2 KiB to a bytes
 * callback that answers it reversed, every answer checked; beside the same
 * lanes' 8-byte call (a typed callback's shape) and the GPU's other rows
 * (bench/calls_gpu.cu). The figures are the emulation's (host threads
 * for warps), not a GPU's: this is the storm's shape and check where no GPU
 * is.
 * --storm: the storm alone, with no daemon (callbacks are served by this
 * process: nothing of gpusysd is used).
 *
 *   gpusys-bench calls --emulate [--daemon PATH | --runtime-dir DIR] [--iters N] [--lanes L]
 *                      [--storm] [--warps W] [--rounds R]
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cb_storm.h"
#include "gpusys/callback.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "rpc_v0.h"

enum { OP_INC = 0x8001, OP_INC_QUICK = 0x8002, OP_ECHO_CB = 0x8004 };

static int inc(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	uint32_t v = 0;
	if (arg_len != 4 || res_cap < 4)
		return -EINVAL;
	memcpy(&v, arg, 4);
	v++;
	memcpy(res, &v, 4);
	*res_len = 4;
	return 0;
}

/* The bytes callback of the stream rows: the argument back unchanged. */
static int echo_cb(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	if (arg_len > res_cap)
		return -EMSGSIZE;
	memcpy(res, arg, arg_len);
	*res_len = arg_len;
	return 0;
}

/* Both out of line, as in libgpusys (gpusys_emu_rpc): the compiler makes
 * the same inlining choice for both, so only the code differs. */
static __attribute__((noinline)) int rpc_new(const gpusys_dev_t *dev, uint16_t op, uint64_t mask,
					     const void *const *in, const uint32_t *in_len, void *const *out,
					     const uint32_t *cap, uint32_t *got, int32_t *st)
{
	return gpusys_rpc(dev, op, 0, mask, in, in_len, out, cap, got, st);
}

static __attribute__((noinline)) int rpc_old(const gpusys_dev_t *dev, uint16_t op, uint64_t mask,
					     const void *const *in, const uint32_t *in_len, void *const *out,
					     const uint32_t *cap, uint32_t *got, int32_t *st)
{
	return gpusys_rpc_v0(dev, op, 0, mask, in, in_len, out, cap, got, st);
}

/* which: 0 gpusys_rpc NOOP, 1 gpusys_rpc_v0 NOOP, 2 callback inc (pool),
 * 3 the same, QUICK (on the poller) */
static int measure(const gpusys_dev_t *dev, int which, uint64_t mask, unsigned iters, struct bench_stats *st)
{
	static const uint32_t zeros[GPUSYS_WARP_LANES];
	uint32_t v[GPUSYS_WARP_LANES], r[GPUSYS_WARP_LANES], four[GPUSYS_WARP_LANES];
	const void *in[GPUSYS_WARP_LANES];
	void *out[GPUSYS_WARP_LANES];
	uint32_t got[GPUSYS_WARP_LANES];
	int32_t s[GPUSYS_WARP_LANES];
	uint64_t *lat = malloc(sizeof(*lat) * iters);
	unsigned warm = iters / 10 + 1;
	for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++)
		in[l] = &v[l], out[l] = &r[l], four[l] = 4;
	for (unsigned i = 0; i < iters + warm; i++) {
		int rc;
		uint64_t t0 = bench_now_ns();
		if (which == 0) {
			rc = rpc_new(dev, GPUSYS_OP_NOOP, mask, in, zeros, out, zeros, got, s);
		} else if (which == 1) {
			rc = rpc_old(dev, GPUSYS_OP_NOOP, mask, in, zeros, out, zeros, got, s);
		} else {
			for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++)
				v[l] = i + l;
			rc = rpc_new(dev, which == 2 ? OP_INC : OP_INC_QUICK, mask, in, four, out, four, got, s);
			for (unsigned l = 0; !rc && l < GPUSYS_WARP_LANES; l++)
				if ((mask >> l & 1) && (s[l] || r[l] != i + l + 1))
					rc = -EBADMSG;
		}
		uint64_t t1 = bench_now_ns();
		if (rc) {
			free(lat);
			return rc;
		}
		if (i >= warm)
			lat[i - warm] = t1 - t0;
	}
	*st = bench_stats_of(lat, iters);
	free(lat);
	return 0;
}

/* Packets both ways of a call so far: the sum over dev's ports of their
 * client words' sequences (each publish adds one; fewer than 4096 a call). */
static uint32_t publishes(const gpusys_dev_t *dev)
{
	uint32_t n = 0;
	for (uint32_t p = 0; p < dev->num_ports; p++)
		n += GPUSYS_WORD_SEQ(__atomic_load_n(&dev->client_word[p], __ATOMIC_RELAXED));
	return n;
}

/* The GPU's stream rows (bench/calls_gpu.cu), emulated: one warp of 32
 * lanes, n bytes a lane each way, through the daemon's ECHO (dev) and the
 * echo callback (cbdev); p50 per call and the client words published per
 * call (request and response packets, asks included). Every answer checked. */
static int stream_rows(const gpusys_dev_t *dev, const gpusys_dev_t *cbdev)
{
	int rc = 0;
	for (unsigned n = 4096; n <= 65536 && !rc; n *= 16) {
		const unsigned iters = n == 4096 ? 2000 : 200, warm = iters / 10 + 1;
		uint8_t *buf = malloc((size_t)64 * n);
		uint64_t *lat = malloc(sizeof(*lat) * iters);
		const void *in[GPUSYS_WARP_LANES];
		void *out[GPUSYS_WARP_LANES];
		uint32_t len[GPUSYS_WARP_LANES], got[GPUSYS_WARP_LANES];
		int32_t s[GPUSYS_WARP_LANES];
		struct bench_stats st[2];
		uint32_t pubs[2] = { 0, 0 };
		if (!buf || !lat) {
			free(buf);
			free(lat);
			return -ENOMEM;
		}
		for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++) {
			in[l] = buf + (size_t)l * 2 * n;
			out[l] = buf + (size_t)l * 2 * n + n;
			len[l] = n;
			for (unsigned i = 0; i < n; i++)
				((uint8_t *)buf)[(size_t)l * 2 * n + i] = (uint8_t)(i * 7u + l);
		}
		for (int w = 0; w < 2 && !rc; w++) {
			const gpusys_dev_t *d = w ? cbdev : dev;
			for (unsigned i = 0; i < iters + warm && !rc; i++) {
				uint32_t p0 = publishes(d);
				uint64_t t0 = bench_now_ns();
				rc = rpc_new(d, w ? OP_ECHO_CB : GPUSYS_OP_ECHO, 0xffffffffu, in, len, out, len, got, s);
				uint64_t t1 = bench_now_ns();
				if (i == warm)
					pubs[w] = (publishes(d) - p0) & GPUSYS_SEQ_MASK;
				if (i >= warm)
					lat[i - warm] = t1 - t0;
			}
			for (unsigned l = 0; !rc && l < GPUSYS_WARP_LANES; l++)
				if (s[l] || got[l] != n || memcmp(in[l], out[l], n))
					rc = -EBADMSG;
			if (!rc)
				st[w] = bench_stats_of(lat, iters);
		}
		if (!rc) {
			double each_way = 32.0 * n;
			printf("  stream, 32 lanes x %5u B each way: daemon ECHO p50 %8.1f us (%.2f GB/s, %u packets), "
			       "bytes callback %8.1f us (%.2f GB/s, %u packets)\n",
			       n, st[0].p50_ns / 1e3, each_way / st[0].p50_ns, pubs[0], st[1].p50_ns / 1e3,
			       each_way / st[1].p50_ns, pubs[1]);
		}
		free(buf);
		free(lat);
	}
	return rc;
}

/* ------------------------------------------------------------- the storm */

struct storm_warp {
	struct bench_warp w; /* first: bench_run_warps */
	const gpusys_dev_t *dev;
	uint32_t max_len;    /* 0: the 8-byte call */
	uint32_t cap;        /* room for the answer, each lane */
	int async;           /* started, then waited */
	unsigned rounds;
	uint32_t salt;
	uint8_t *buf;        /* 32 lanes x (in, out) x CB_STORM_MAX */
	unsigned wrong, failed;
	int first;           /* the first failure's -errno */
};

/* One emulated warp: every round, all 32 lanes in one call, lane l being
 * thread warp * 32 + l of the GPU's storm (the same lengths and bytes). */
static void *storm_warp_main(void *arg)
{
	struct storm_warp *a = arg;
	const void *in[GPUSYS_WARP_LANES];
	void *out[GPUSYS_WARP_LANES];
	uint32_t len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES], got[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];
	uint64_t x[GPUSYS_WARP_LANES], y[GPUSYS_WARP_LANES];

	bench_warp_begin(&a->w);
	for (unsigned r = 0; r < a->rounds; r++) {
		uint32_t salt = a->salt + r;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			uint32_t tid = a->w.warp * GPUSYS_WARP_LANES + l;
			uint8_t *i = a->buf + (size_t)l * 2 * CB_STORM_MAX, *o = i + CB_STORM_MAX;
			if (!a->max_len) {
				x[l] = cb_storm_word(tid, salt);
				in[l] = &x[l], out[l] = &y[l];
				len[l] = cap[l] = sizeof(x[l]);
				continue;
			}
			len[l] = cb_storm_len(tid, a->max_len);
			for (uint32_t b = 0; b < len[l]; b++)
				i[b] = cb_storm_byte(tid, salt, b);
			if (len[l] < CB_STORM_MAX)
				o[len[l]] = 0xee; /* a write past the answer is wrong too */
			in[l] = i, out[l] = o;
			cap[l] = a->cap;
		}
		const uint16_t op = a->max_len ? CB_STORM_OP_REVERSE : CB_STORM_OP_INC64;
		int rc;
		if (a->async) {
			struct gpusys_emu_future f;
			gpusys_emu_rpc_async(a->dev, op, 0, 0xffffffffu, in, len, out, cap, got, st, &f);
			rc = gpusys_emu_wait(a->dev, &f);
		} else {
			rc = gpusys_emu_rpc(a->dev, op, 0, 0xffffffffu, in, len, out, cap, got, st);
		}
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			uint32_t tid = a->w.warp * GPUSYS_WARP_LANES + l, n = len[l];
			int lrc = rc ? rc : st[l], bad = 0;
			if (lrc) {
				a->failed++;
				if (!a->first)
					a->first = lrc;
				continue;
			}
			if (!a->max_len) {
				bad = got[l] != 8 || y[l] != x[l] + 1;
			} else {
				const uint8_t *o = a->buf + (size_t)l * 2 * CB_STORM_MAX + CB_STORM_MAX;
				bad = got[l] != n || (n < CB_STORM_MAX && o[n] != 0xee);
				for (uint32_t b = 0; !bad && b < n; b++)
					bad = o[b] != cb_storm_byte(tid, salt, n - 1 - b);
			}
			a->wrong += (unsigned)bad;
		}
	}
	return NULL;
}

/* The storm's table: a callback server of its own (one port per warp, as
 * the GPU's callback channel has about, bench/calls_gpu.cu), the GPU's rows
 * (typed 8 B; 0..64 B with room for 64 B and for 2 KiB; 0..2048 B,
 * synchronous and as futures); each row one warm-up round, then rounds
 * timed. Returns 0, or 1 having said why (a wrong answer included). */
static int storm_emulated(unsigned warps, unsigned rounds)
{
	struct gpusys_callbacks *cb = NULL;
	struct gpusys_callbacks_opts co = { .num_ports = warps };
	struct gpusys_callback_desc rd = { .opcode = CB_STORM_OP_REVERSE, .name = "reverse",
					   .arg_max = CB_STORM_MAX, .res_max = CB_STORM_MAX, .fn = cb_storm_reverse };
	struct gpusys_callback_desc id = { .opcode = CB_STORM_OP_INC64, .name = "inc64", .arg_max = 8,
					   .res_max = 8, .fn = cb_storm_inc64 };
	int rc = gpusys_callbacks_create(&co, &cb);
	if (!rc)
		rc = gpusys_callbacks_register(cb, &rd);
	if (!rc)
		rc = gpusys_callbacks_register(cb, &id);
	if (rc) {
		fprintf(stderr, "gpusys-bench: storm: callback server: %s\n", gpusys_strerror(rc));
		if (cb)
			gpusys_callbacks_destroy(cb);
		return 1;
	}
	struct storm_warp *a = calloc(warps, sizeof(*a));
	uint8_t *bufs = malloc((size_t)warps * GPUSYS_WARP_LANES * 2 * CB_STORM_MAX);
	if (!a || !bufs) {
		fprintf(stderr, "gpusys-bench: storm: out of memory\n");
		rc = -ENOMEM;
	}
	const unsigned lanes = warps * GPUSYS_WARP_LANES;
	int bad = 0;
	if (!rc) {
		printf("callback storm, emulated (bench/cb_storm.h): %u warps x 32 lanes = %u lanes, each one call a "
		       "round, every answer checked; %u rounds timed after 1 warm-up:\n",
		       warps, lanes, rounds);
		printf("  %-48s %12s %10s %8s %8s\n", "call", "ms a round", "M calls/s", "wrong", "failed");
	}
	static const struct {
		uint32_t max_len, cap;
		int async;
		const char *name;
	} rows[] = {
		{ 0, 8, 0, "8 B each way (a typed call's shape)" },
		{ 64, 64, 0, "bytes reverse, 0..64 B, room for 64 B" },
		{ 64, CB_STORM_MAX, 0, "bytes reverse, 0..64 B, room for 2 KiB" },
		{ CB_STORM_MAX, CB_STORM_MAX, 0, "bytes reverse, 0..2048 B (issue 27's row)" },
		{ CB_STORM_MAX, CB_STORM_MAX, 1, "bytes reverse, 0..2048 B, async + wait" },
	};
	for (unsigned r = 0; r < sizeof(rows) / sizeof(rows[0]) && !rc; r++) {
		uint64_t t0, t1;
		unsigned wrong = 0, failed = 0;
		int first = 0;
		for (int timed = 0; timed < 2 && !rc; timed++) {
			for (unsigned w = 0; w < warps; w++)
				a[w] = (struct storm_warp){ .dev = gpusys_callbacks_emu_dev(cb),
							    .max_len = rows[r].max_len,
							    .cap = rows[r].cap,
							    .async = rows[r].async,
							    .rounds = timed ? rounds : 1,
							    .salt = r * 1000u + (unsigned)timed * 100u + 1u,
							    .buf = bufs + (size_t)w * GPUSYS_WARP_LANES * 2 * CB_STORM_MAX };
			/* A warp's own failures are counted, not returned:
			 * bench_run_warps sees rc 0 and the table says them. */
			rc = bench_run_warps(warps, storm_warp_main, a, sizeof(*a), &t0, &t1);
			for (unsigned w = 0; w < warps; w++) {
				wrong += a[w].wrong, failed += a[w].failed;
				if (!first)
					first = a[w].first;
			}
		}
		if (rc)
			break;
		double ms = (double)(t1 - t0) / 1e6 / rounds;
		printf("  %-48s %12.3f %10.3f %8u %8u%s%s\n", rows[r].name, ms, lanes / ms / 1e3, wrong, failed,
		       first ? "  first failure: " : "", first ? gpusys_strerror(first) : "");
		if (wrong || failed)
			bad = 1; /* said in the row; the other rows go on */
	}
	if (!rc)
		printf("  (wrong, failed: over every round of the row, the warm-up's too; host threads for warps: "
		       "the times depend on this host's cores, they are not a GPU's)\n");
	free(a);
	free(bufs);
	gpusys_callbacks_destroy(cb);
	return rc || bad ? 1 : 0;
}

int bench_calls_emulated(int argc, char **argv)
{
	unsigned iters = 50000, lanes = 32, warps = 8, rounds = 50;
	const char *runtime_dir = NULL, *daemon = NULL;
	int opt, storm_only = 0;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' },		 { "iters", required_argument, NULL, 'i' },
		{ "lanes", required_argument, NULL, 'l' },	 { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },	 { "storm", no_argument, NULL, 's' },
		{ "warps", required_argument, NULL, 'w' },	 { "rounds", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 'i': iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': lanes = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 's': storm_only = 1; break;
		case 'w': warps = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'n': rounds = (unsigned)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: gpusys-bench calls --emulate [--daemon PATH | --runtime-dir DIR] "
					"[--iters N] [--lanes L] [--storm] [--warps W] [--rounds R]\n");
			return 2;
		}
	}
	/* warps: a host thread and a callback port each */
	if (!lanes || lanes > 32 || iters < 10 || !warps || warps > 1024 || !rounds)
		return 2;
	if (storm_only)
		return storm_emulated(warps, rounds);
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	struct gpusys_options ao = { .runtime_dir = runtime_dir, .num_ports = 4,

					.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
						  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	gpusys_t *client;
	struct gpusys_emu *emu;
	struct gpusys_callbacks *cb;
	struct gpusys_callbacks_opts co = { .num_ports = 4 };
	struct gpusys_callback_desc d = { .opcode = OP_INC, .name = "inc", .arg_max = 4, .res_max = 4, .fn = inc };
	int rc = gpusys_attach(&ao, &client);
	if (!rc)
		rc = gpusys_emu_open(gpusys_host_channel(client), &emu);
	if (!rc)
		rc = gpusys_callbacks_create(&co, &cb);
	if (!rc)
		rc = gpusys_callbacks_register(cb, &d);
	d.opcode = OP_INC_QUICK;
	d.flags = GPUSYS_CALLBACK_QUICK;
	if (!rc)
		rc = gpusys_callbacks_register(cb, &d);
	struct gpusys_callback_desc ed = { .opcode = OP_ECHO_CB,
					   .name = "echo",
					   .arg_max = GPUSYS_MAX_LANE_PAYLOAD,
					   .res_max = GPUSYS_MAX_LANE_PAYLOAD,
					   .fn = echo_cb };
	if (!rc)
		rc = gpusys_callbacks_register(cb, &ed);
	if (rc) {
		fprintf(stderr, "gpusys-bench: setup: %s\n", gpusys_strerror(rc));
		bench_daemon_stop(&bd);
		return 1;
	}
	const gpusys_dev_t *dev = gpusys_emu_dev(emu), *cbdev = gpusys_callbacks_emu_dev(cb);
	uint64_t mask = lanes == 32 ? 0xffffffffu : (UINT64_C(1) << lanes) - 1;
	gpusys_emu_set_warp(0);

	printf("gpusys-bench calls --emulate: one emulated warp, %u lanes, %u calls per row\n", lanes, iters);
	uint64_t p50[3] = { 0 }, p99[3] = { 0 };
	for (int round = 0; round < 3 && !rc; round++) {
		for (int which = 1; which >= 0 && !rc; which--) {
			struct bench_stats s;
			rc = measure(dev, which, mask, iters, &s);
			p50[which] += s.p50_ns;
			p99[which] += s.p99_ns;
		}
	}
	struct bench_stats cs, qs;
	if (!rc)
		rc = measure(cbdev, 2, mask, iters, &cs);
	if (!rc)
		rc = measure(cbdev, 3, mask, iters, &qs);
	if (rc) {
		fprintf(stderr, "gpusys-bench: %s\n", gpusys_strerror(rc));
	} else {
		printf("  NOOP gpusys_rpc_v0 (before the split)   p50 %6.2f us  p99 %6.2f us\n", p50[1] / 3e3,
		       p99[1] / 3e3);
		printf("  NOOP gpusys_rpc (start + finish)         p50 %6.2f us  p99 %6.2f us  (%.3fx)\n", p50[0] / 3e3,
		       p99[0] / 3e3, (double)p50[0] / (double)p50[1]);
		printf("  callback inc (this process's pool)       p50 %6.2f us  p99 %6.2f us  (%.2fx NOOP)\n",
		       cs.p50_ns / 1e3, cs.p99_ns / 1e3, cs.p50_ns / (p50[0] / 3.0));
		printf("  callback inc, QUICK (on the poller)      p50 %6.2f us  p99 %6.2f us  (%.2fx NOOP)\n",
		       qs.p50_ns / 1e3, qs.p99_ns / 1e3, qs.p50_ns / (p50[0] / 3.0));
		rc = stream_rows(dev, cbdev);
		if (rc)
			fprintf(stderr, "gpusys-bench: stream rows: %s\n", gpusys_strerror(rc));
	}
	gpusys_callbacks_destroy(cb);
	gpusys_emu_close(emu);
	gpusys_detach(client);
	bench_daemon_stop(&bd);
	/* The storm needs none of the above: its own callback server. */
	int src = rc ? 0 : storm_emulated(warps, rounds);
	return rc || src ? 1 : 0;
}
