/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench-serve: the daemon's CPU cost of serving one request, with
 * nothing else in the way. One thread plays both sides on a channel in
 * private memory: it stores a client word (as a warp would), then does what
 * a poller does for a port it finds pending (port_pending, port_try_claim,
 * port_server_step), over and over on a ring of ports.
 *
 * Why: at the whole GPU the pollers' CPU time per request is the bound
 * (bench/RESULTS.md, "The daemon's side of the hot path"), and the GPU
 * machine has no perf. This measures the software part of that time alone,
 * warm caches, no other core writing the lines, so a change to the serving
 * code can be judged here in seconds. The rest of the real figure is the
 * cache lines moving between the GPU, the pollers and this code.
 *
 * usage: gpusys-bench-serve [--iters N] [--ports N] [--stats 0|1] [--row K]
 *   --row K: only the K-th row of the table (0..3), for a profiler
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"
#include "core/port_server.h"
#include "core/client.h"
#include "core/stats.h"
#include "services.h"

struct row {
	const char *name;
	uint16_t opcode;
	uint32_t cw_flags;
	uint64_t mask;
	uint32_t len; /* per active lane; 0 with GPUSYS_CW_EMPTY */
};

/* ns per request served, best of 5 rounds (the least disturbed). */
static double run_row(struct port_table *t, const struct row *r, uint32_t ports, unsigned iters)
{
	double best = 1e30;
	for (int round = 0; round < 5; round++) {
		uint64_t t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++) {
			uint32_t p = i % ports;
			uint32_t seq = (atomic_load_explicit(&t->seen[p], memory_order_relaxed) + 1u) & GPUSYS_SEQ_MASK;
			if (!(r->cw_flags & GPUSYS_CW_EMPTY)) {
				for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
					t->ports[p].len[l] = r->mask >> l & 1 ? r->len : 0;
					t->ports[p].aux[l] = r->mask >> l & 1 ? GPUSYS_INLINE_BYTES : 0;
				}
			}
			__atomic_store_n(&t->client_word[p], gpusys_client_word(seq, r->cw_flags, r->opcode, r->mask),
					 __ATOMIC_RELEASE);
			struct port_call *call = NULL;
			if (!port_pending(t, p) || !port_try_claim(t, p) ||
			    port_server_step(t, p, 0, &call) != PORT_STEP_DONE) {
				fprintf(stderr, "gpusys-bench-serve: %s: request %u not served on the fast path\n",
					r->name, i);
				exit(1);
			}
		}
		double ns = (double)(bench_now_ns() - t0) / iters;
		if (ns < best)
			best = ns;
	}
	return best;
}

int main(int argc, char **argv)
{
	unsigned iters = 2000000, ports = 1056;
	int stats = 1, only = -1, opt;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },
		{ "ports", required_argument, NULL, 'p' },
		{ "stats", required_argument, NULL, 's' },
		{ "row", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'p': ports = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': stats = atoi(optarg); break;
		case 'r': only = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: gpusys-bench-serve [--iters N] [--ports N] [--stats 0|1] [--row K]\n");
			return 2;
		}
	}
	if (!iters || ports < GPUSYS_MIN_PORTS || ports > GPUSYS_MAX_PORTS) {
		fprintf(stderr, "gpusys-bench-serve: bad --iters or --ports\n");
		return 2;
	}

	services_use(gpusysd_services);
	stats_set_enabled(stats != 0);
	struct gpusys_channel_layout l = gpusys_channel_layout(ports, 0, 0);
	void *base = mmap(NULL, l.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	gpusys_channel_format(base, ports, &l, 1);
	struct client cl = { .pid = getpid(), .umask = 022, .cwd_fd = -1, .stdout_fd = -1, .stderr_fd = -1,
			     .sock = -1, .cuda_device = -1, .client_ordinal = -1 };
	cl.creds.uid = getuid();
	cl.creds.gid = getgid();
	struct port_table t;
	if (port_table_init(&t, base, ports, &cl, 256u << 20)) {
		fprintf(stderr, "gpusys-bench-serve: port_table_init failed\n");
		return 1;
	}

	const struct row rows[] = {
		{ "NOOP, 32 lanes (empty)", GPUSYS_OP_NOOP, GPUSYS_CW_EMPTY, 0xffffffffu, 0 },
		{ "NOOP, 1 lane (empty)", GPUSYS_OP_NOOP, GPUSYS_CW_EMPTY, 1, 0 },
		{ "ECHO 4 B, 32 lanes", GPUSYS_OP_ECHO, 0, 0xffffffffu, 4 },
		{ "ECHO 4 B, 1 lane", GPUSYS_OP_ECHO, 0, 1, 4 },
	};
	printf("gpusys-bench-serve: one thread, both sides, %u ports, %u requests a round, stats %s\n", ports,
	       iters, stats ? "on" : "off");
	printf("%-28s %12s\n", "request", "ns/request");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (only < 0 || (size_t)only == i)
			printf("%-28s %12.1f\n", rows[i].name, run_row(&t, &rows[i], ports, iters));
	port_table_fini(&t);
	munmap(base, l.total_bytes);
	return 0;
}
