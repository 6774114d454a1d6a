/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench calls --emulate: the synchronous path before and after the
 * split into start/finish (gpusys_rpc_v0, bench/rpc_v0.h, against
 * gpusys_rpc, same binary, alternating rounds), and a user callback round
 * trip against a NOOP, from one emulated warp.
 *
 *   gpusys-bench calls --emulate [--daemon PATH | --runtime-dir DIR] [--iters N] [--lanes L]
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpusys/callback.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "rpc_v0.h"

enum { OP_INC = 0x8001, OP_INC_QUICK = 0x8002 };

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

int bench_calls_emulated(int argc, char **argv)
{
	unsigned iters = 50000, lanes = 32;
	const char *runtime_dir = NULL, *daemon = NULL;
	int opt;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' },		 { "iters", required_argument, NULL, 'i' },
		{ "lanes", required_argument, NULL, 'l' },	 { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },	 { NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 'i': iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': lanes = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		default:
			fprintf(stderr, "usage: gpusys-bench calls --emulate [--daemon PATH | --runtime-dir DIR] "
					"[--iters N] [--lanes L]\n");
			return 2;
		}
	}
	if (!lanes || lanes > 32 || iters < 10)
		return 2;
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
	}
	gpusys_callbacks_destroy(cb);
	gpusys_emu_close(emu);
	gpusys_detach(client);
	bench_daemon_stop(&bd);
	return rc ? 1 : 0;
}
