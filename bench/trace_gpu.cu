/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench trace: where the time of one round trip goes on the GPU side.
 *
 * This file compiles the client protocol with its trace points on
 * (GPUSYS_RPC_TRACE in device/port_client.h): lane 0 of the one calling warp
 * stamps %globaltimer at each point, and the medians of the segments between
 * points are printed for a few call shapes, all in the same run:
 *
 *   lock      start -> port owned (port lock in device memory)
 *   write     -> packet 0 written (lengths, capacities, inline bytes)
 *   publish   -> published (release fence, client word, doorbell, flush)
 *   wait      -> response word seen (PCIe both ways and the server's work)
 *   fence     -> the acquire fence after the response word (zero for a
 *                TRIVIAL response, which reads nothing more)
 *   read      -> response packet 0 read (lengths, statuses, inline bytes;
 *                zero for a TRIVIAL response)
 *   release   -> port released
 *
 *   gpusys-bench trace [--daemon PATH | --runtime-dir DIR] [--iters N]
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

static __device__ unsigned long long trace_stamp[8];

static __device__ __forceinline__ unsigned long long trace_now(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Stream points (--streams): the time before each point, added up over a
 * call; a packet 0 point restarts the clock. */
static __device__ unsigned long long stream_sum[8], stream_last;

#define GPUSYS_RPC_TRACE(k)                                                                                  \
	do {                                                                                                 \
		if (threadIdx.x == 0) {                                                                      \
			unsigned long long t_ = trace_now();                                                 \
			trace_stamp[k] = t_;                                                                 \
			stream_last = t_;                                                                    \
		}                                                                                            \
	} while (0)
#define GPUSYS_STREAM_TRACE(k)                                                                               \
	do {                                                                                                 \
		if (threadIdx.x == 0) {                                                                      \
			unsigned long long t_ = trace_now();                                                 \
			stream_sum[k] += t_ - stream_last;                                                   \
			stream_last = t_;                                                                    \
		}                                                                                            \
	} while (0)

extern "C" {
#include "bench.h"
#include "gpusys/gpusys.h"
}
#include "gpusys/callback.h"
#include "gpusys/device.cuh"

#define SEGMENTS 7
#define OP_ECHO_CB 0x8004
#define OP_UNREGISTERED 0x8fff

static const char *const segment_name[SEGMENTS] = { "lock", "write", "publish", "wait", "fence", "read", "release" };

static int echo_cb(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	if (res_cap < arg_len)
		return -EMSGSIZE;
	memcpy(res, arg, arg_len);
	*res_len = arg_len;
	return 0;
}

/* shape: 0 NOOP (empty), 1 ECHO 4 B, 2 empty request on the callback
 * channel (-ENOSYS), 3 bytes callback 4 B. seg: iters x SEGMENTS. */
static __global__ void k_trace(gpusys_dev_t dev, int shape, int lanes, int iters, int warm, unsigned long long *seg,
			       int *err)
{
	if ((int)(threadIdx.x % 32) >= lanes)
		return;
	const uint64_t mask = (uint64_t)__activemask();
	const void *in[1] = { 0 };
	void *out[1] = { 0 };
	uint32_t zero[1] = { 0 }, got[1];
	int32_t st[1];
	for (int i = 0; i < iters + warm; i++) {
		if (threadIdx.x == 0)
			for (int k = 0; k < 8; k++)
				trace_stamp[k] = 0;
		__syncwarp((unsigned)mask);
		int rc;
		unsigned x = (unsigned)i + threadIdx.x, y = 0;
		uint32_t n = 0;
		if (shape == 0) {
			rc = gpusys_rpc(&dev, GPUSYS_OP_NOOP, 0, mask, in, zero, out, zero, got, st);
		} else if (shape == 2) {
			rc = gpusys_rpc(dev.callbacks, OP_UNREGISTERED, 0, mask, in, zero, out, zero, got, st);
			rc = rc == -ENOSYS ? 0 : rc ? rc : -EBADMSG;
		} else {
			rc = shape == 1 ? gpusys_echo(dev, &x, 4, &y, 4, &n)
					: gpusys_call_bytes(dev, OP_ECHO_CB, &x, 4, &y, 4, &n);
			rc = rc ? rc : n != 4 || y != x ? -EBADMSG : 0;
		}
		if (rc)
			atomicCAS(err, 0, rc);
		if (threadIdx.x == 0 && i >= warm) {
			unsigned long long t[8];
			for (int k = 0; k < 8; k++)
				t[k] = trace_stamp[k];
			if (!t[5])
				t[5] = t[6] = t[4]; /* TRIVIAL: nothing read */
			for (int k = 0; k < SEGMENTS; k++)
				seg[(size_t)(i - warm) * SEGMENTS + k] = t[k + 1] - t[k];
		}
	}
}

/* One warp's ECHOs of n bytes a lane (global buffers, so the lanes share the
 * stream copies): per call, the sum of each stream segment and the total.
 * sums: 9 per call (8 points, then the whole call). */
static __global__ void k_stream_trace(gpusys_dev_t dev, int lanes, unsigned n, uint8_t *buf, int iters, int warm,
				      unsigned long long *sums, int *err)
{
	if ((int)threadIdx.x >= lanes)
		return;
	uint8_t *in = buf + (size_t)threadIdx.x * 2 * n, *out = in + n;
	for (unsigned i = 0; i < n; i++)
		in[i] = (uint8_t)(i * 7u + threadIdx.x);
	for (int i = 0; i < iters + warm; i++) {
		if (threadIdx.x == 0)
			for (int k = 0; k < 8; k++)
				stream_sum[k] = 0;
		__syncwarp(__activemask());
		unsigned long long t0 = trace_now();
		uint32_t got = 0;
		int rc = gpusys_echo(dev, in, n, out, n, &got);
		if (rc || got != n)
			atomicCAS(err, 0, rc ? rc : -EBADMSG);
		unsigned long long t1 = trace_now();
		if (threadIdx.x == 0 && i >= warm) {
			for (int k = 0; k < 8; k++)
				sums[(size_t)(i - warm) * 9 + k] = stream_sum[k];
			sums[(size_t)(i - warm) * 9 + 8] = t1 - t0;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (out[i] != in[i]) {
			atomicCAS(err, 0, -EBADMSG);
			break;
		}
}

static void stream_row(gpusys_t *g, int lanes, unsigned n, int iters)
{
	unsigned long long *d;
	uint8_t *buf;
	int *derr, err = 0;
	int warm = iters / 10 + 1;
	BENCH_CK(cudaMalloc(&d, sizeof(unsigned long long) * 9 * iters));
	BENCH_CK(cudaMalloc(&buf, (size_t)32 * 2 * n));
	BENCH_CK(cudaMalloc(&derr, sizeof(int)));
	BENCH_CK(cudaMemset(derr, 0, sizeof(int)));
	k_stream_trace<<<1, 32>>>(gpusys_device(g), lanes, n, buf, iters, warm, d, derr);
	BENCH_CK(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 120000);
	if (rc) {
		fprintf(stderr, "gpusys-bench: stream trace kernel: %s\n", gpusys_strerror(rc));
		exit(1);
	}
	BENCH_CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
	uint64_t *h = (uint64_t *)malloc(sizeof(uint64_t) * 9 * iters);
	uint64_t *col = (uint64_t *)malloc(sizeof(uint64_t) * iters);
	BENCH_CK(cudaMemcpy(h, d, sizeof(uint64_t) * 9 * iters, cudaMemcpyDeviceToHost));
	double p50[9], rest;
	for (int k = 0; k < 9; k++) {
		for (int i = 0; i < iters; i++)
			col[i] = h[(size_t)i * 9 + k];
		p50[k] = bench_stats_of(col, iters).p50_ns / 1e3;
	}
	rest = p50[8];
	for (int k = 0; k < 8; k++)
		rest -= p50[k];
	char what[48];
	snprintf(what, sizeof(what), "ECHO %d x %u B", lanes, n);
	printf("  %-18s %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f %8.1f | %8.1f %9.1f  %.2f GB/s each way%s\n", what,
	       p50[0], p50[1], p50[2], p50[3], p50[4], p50[5], p50[6], p50[7], rest, p50[8],
	       (double)lanes * n / (p50[8] * 1e3), err ? "  (A CALL FAILED)" : "");
	free(h);
	free(col);
	cudaFree(d);
	cudaFree(buf);
	cudaFree(derr);
}

static void trace_row(gpusys_t *g, const char *runtime_dir, const char *what, int shape, int lanes, int iters)
{
	/* Words the daemon saw before their heads (left for its next pass):
	 * a call's wait grows by a pass each time. */
	long long early0 = bench_clients_sum(runtime_dir, "heads_early");
	unsigned long long *d;
	int *derr, err = 0;
	int warm = iters / 10 + 1;
	BENCH_CK(cudaMalloc(&d, sizeof(unsigned long long) * SEGMENTS * iters));
	BENCH_CK(cudaMalloc(&derr, sizeof(int)));
	BENCH_CK(cudaMemset(derr, 0, sizeof(int)));
	k_trace<<<1, 32>>>(gpusys_device(g), shape, lanes, iters, warm, d, derr);
	BENCH_CK(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 60000);
	if (rc) {
		fprintf(stderr, "gpusys-bench: trace kernel: %s\n", gpusys_strerror(rc));
		exit(1);
	}
	BENCH_CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
	uint64_t *h = (uint64_t *)malloc(sizeof(uint64_t) * SEGMENTS * iters);
	uint64_t *col = (uint64_t *)malloc(sizeof(uint64_t) * iters);
	uint64_t *sum = (uint64_t *)calloc(iters, sizeof(uint64_t));
	BENCH_CK(cudaMemcpy(h, d, sizeof(uint64_t) * SEGMENTS * iters, cudaMemcpyDeviceToHost));
	printf("  %-34s", what);
	for (int k = 0; k < SEGMENTS; k++) {
		for (int i = 0; i < iters; i++) {
			col[i] = h[(size_t)i * SEGMENTS + k];
			sum[i] += col[i];
		}
		struct bench_stats s = bench_stats_of(col, iters);
		printf(" %7.2f", s.p50_ns / 1e3);
	}
	struct bench_stats s = bench_stats_of(sum, iters);
	long long early1 = bench_clients_sum(runtime_dir, "heads_early");
	printf(" %7.2f", s.p50_ns / 1e3);
	if (early0 >= 0 && early1 >= 0)
		printf(" %7.3f", (double)(early1 - early0) / (iters + warm));
	else
		printf(" %7s", "?");
	printf("%s\n", err ? "  (A CALL FAILED)" : "");
	free(h);
	free(col);
	free(sum);
	cudaFree(d);
	cudaFree(derr);
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench trace [--daemon PATH | --runtime-dir DIR] [--iters N] [--streams]\n");
}

extern "C" int bench_trace_gpu(int argc, char **argv)
{
	int iters = 20000, opt, streams = 0;
	const char *runtime_dir = NULL, *daemon = NULL;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },
		{ "streams", no_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 's': streams = 1; break;
		default: usage(); return 2;
		}
	}
	if (iters < 1) {
		usage();
		return 2;
	}
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.runtime_dir = runtime_dir;
	gpusys_t *g;
	if (gpusys_attach(&o, &g)) {
		fprintf(stderr, "gpusys-bench: attach: %s\n", gpusys_last_error());
		bench_daemon_stop(&bd);
		return 1;
	}
	struct gpusys_callback_desc ed;
	memset(&ed, 0, sizeof(ed));
	ed.opcode = OP_ECHO_CB;
	ed.name = "echo";
	ed.arg_max = ed.res_max = 64;
	ed.fn = echo_cb;
	if (gpusys_register_callback(g, &ed)) {
		fprintf(stderr, "gpusys-bench: cannot register the callback\n");
		gpusys_detach(g);
		bench_daemon_stop(&bd);
		return 1;
	}
	if (streams) {
		int it = iters < 200 ? iters : 200;
		printf("gpusys-bench trace --streams: one warp's ECHO through gpusysd, p50 per call of the time spent in "
		       "each stream segment, summed over the call's packets (us), %d calls per row\n", it);
		printf("  %-18s %8s %8s %8s %8s | %8s %8s %8s %8s | %8s %9s\n", "call", "req-loop", "req-wait",
		       "req-copy", "req-pub", "rsp-loop", "rsp-ask", "rsp-wait", "rsp-copy", "packet0", "total");
		stream_row(g, 1, 65536, it);
		stream_row(g, 32, 4096, it);
		stream_row(g, 32, 65536, it / 4 > 10 ? it / 4 : 10);
		gpusys_detach(g);
		bench_daemon_stop(&bd);
		return 0;
	}
	printf("gpusys-bench trace: one warp, p50 of each segment of one call (us), %d calls per row; early: words gpusysd saw before their heads, per call\n", iters);
	printf("  %-34s", "call");
	for (int k = 0; k < SEGMENTS; k++)
		printf(" %7s", segment_name[k]);
	printf(" %7s %7s\n", "total", "early");
	for (int lanes = 1; lanes <= 32; lanes += 31) {
		char what[64];
		static const char *const shape_name[] = { "NOOP (daemon)", "ECHO 4 B (daemon)",
							  "empty, callback channel", "bytes callback 4 B" };
		for (int shape = 0; shape < 4; shape++) {
			snprintf(what, sizeof(what), "%s, %d lane%s", shape_name[shape], lanes, lanes > 1 ? "s" : "");
			trace_row(g, runtime_dir, what, shape, lanes, iters);
		}
	}
	gpusys_detach(g);
	bench_daemon_stop(&bd);
	return 0;
}
