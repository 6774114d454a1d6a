/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench rtt --emulate: NOOP round trips through a real gpusysd from
 * emulated warps (CPU threads running the device protocol code), against the
 * floor of a raw cross-process ping-pong measured in the same run.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"

struct warp_arg {
	struct bench_warp w;
	const gpusys_dev_t *dev;
	uint64_t mask;
	unsigned iters;
	uint64_t *lat;
};

static void *warp_main(void *p)
{
	struct warp_arg *a = p;
	unsigned warm = a->iters / 10 + 1;

	bench_warp_begin(&a->w);
	for (unsigned i = 0; i < a->iters + warm; i++) {
		uint64_t t0 = bench_now_ns();
		int rc = gpusys_emu_noop(a->dev, a->mask);
		uint64_t t1 = bench_now_ns();
		if (rc) {
			a->w.rc = rc;
			return NULL;
		}
		if (i >= warm)
			a->lat[i - warm] = t1 - t0;
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench rtt --emulate [--warps N] [--lanes L] [--iters N]\n"
			"                          [--runtime-dir DIR | --daemon PATH] [--json] [--breakdown]\n"
			"  --breakdown  also the daemon's side: its pollers' counters over the run\n");
}

int bench_rtt_emulated(int argc, char **argv)
{
	unsigned warps = 1, lanes = 32, iters = 100000;
	const char *runtime_dir = NULL, *daemon = NULL;
	int json = 0, breakdown = 0, opt;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' },   { "warps", required_argument, NULL, 'w' },
		{ "lanes", required_argument, NULL, 'l' }, { "iters", required_argument, NULL, 'i' },
		{ "runtime-dir", required_argument, NULL, 'r' }, { "daemon", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },      { "breakdown", no_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 'w': warps = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': lanes = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'i': iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'j': json = 1; break;
		case 'b': breakdown = 1; break;
		default: usage(); return 2;
		}
	}
	if (!warps || warps > 1024 || !lanes || lanes > 32 || !iters) {
		usage();
		return 2;
	}

	/* The floor first, while nothing else spins. */
	struct bench_stats floor;
	int rc = bench_floor_cpu(iters, &floor);
	if (rc) {
		fprintf(stderr, "gpusys-bench: floor: %s\n", strerror(-rc));
		return 1;
	}

	struct bench_daemon bd = { 0 };
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	struct gpusys_options ao = { .runtime_dir = runtime_dir, .num_ports = warps,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	gpusys_t *client;
	struct gpusys_emu *emu;
	if (bench_emu_attach(&ao, &client, &emu)) {
		bench_daemon_stop(&bd);
		return 1;
	}

	struct warp_arg *args = calloc(warps, sizeof(*args));
	uint64_t *lat = calloc((size_t)warps * iters, sizeof(*lat));
	uint64_t mask = lanes == 32 ? 0xffffffffu : (1ull << lanes) - 1;
	for (unsigned w = 0; w < warps; w++)
		args[w] = (struct warp_arg){ .dev = gpusys_emu_dev(emu), .mask = mask, .iters = iters,
					     .lat = lat + (size_t)w * iters };
	struct bench_pollers before, after, during;
	int counted = breakdown && bench_pollers_read(runtime_dir, bd.pid, &before) == 0;
	uint64_t t0, t1;
	if (bench_run_warps(warps, warp_main, args, sizeof(*args), &t0, &t1))
		return 1;
	counted = counted && bench_pollers_read(runtime_dir, bd.pid, &after) == 0;
	double secs = (double)(t1 - t0) / 1e9;
	struct bench_stats s = bench_stats_of(lat, (size_t)warps * iters);
	/* warm-up calls are in the elapsed time too */
	double calls = (double)warps * (iters + iters / 10 + 1);
	double ratio = (double)s.p50_ns / (double)(floor.p50_ns ? floor.p50_ns : 1);

	if (json) {
		printf("{\"mode\":\"emulate\",\"warps\":%u,\"lanes\":%u,\"iters\":%u,\"p50_ns\":%llu,\"p99_ns\":%llu,"
		       "\"min_ns\":%llu,\"requests_per_s\":%.0f,\"lane_calls_per_s\":%.0f,\"floor_p50_ns\":%llu,"
		       "\"floor_p99_ns\":%llu,\"floor_min_ns\":%llu,\"ratio\":%.3f}\n",
		       warps, lanes, iters, (unsigned long long)s.p50_ns, (unsigned long long)s.p99_ns,
		       (unsigned long long)s.min_ns, calls / secs, calls * lanes / secs,
		       (unsigned long long)floor.p50_ns, (unsigned long long)floor.p99_ns,
		       (unsigned long long)floor.min_ns, ratio);
	} else {
		printf("gpusys-bench rtt --emulate: NOOP through gpusysd, %u warp(s) x %u lane(s), %u calls each\n",
		       warps, lanes, iters);
		printf("%-34s %10s %10s %10s %14s\n", "", "p50", "p99", "min", "requests/s");
		printf("%-34s %8.2f us %8.2f us %8.2f us %14s\n", "floor: raw cross-process ping-pong",
		       floor.p50_ns / 1e3, floor.p99_ns / 1e3, floor.min_ns / 1e3, "-");
		printf("%-34s %8.2f us %8.2f us %8.2f us %14.0f\n", "gpusysd NOOP (emulated warps)", s.p50_ns / 1e3,
		       s.p99_ns / 1e3, s.min_ns / 1e3, calls / secs);
		printf("p50 ratio to floor: %.2fx\n", ratio);
		if (counted) {
			bench_pollers_since(&before, &after, &during);
			printf("\n");
			bench_pollers_header();
			bench_pollers_row("gpusysd NOOP (emulated warps)", "memfd", &during);
		} else if (breakdown) {
			printf("(no daemon counters: gpusysctl pollers did not answer)\n");
		}
	}
	free(lat);
	free(args);
	bench_emu_detach(client, emu);
	bench_daemon_stop(&bd);
	return 0;
}
