/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench calls: the call model of docs/CALLS.md on the GPU, each
 * figure beside its peer measured in the same run.
 *
 *   sync A/B    one-warp NOOP round trip through gpusys_rpc (start + finish)
 *               and through gpusys_rpc_v0 (the code before the split,
 *               bench/rpc_v0.h), alternating rounds: the split must not
 *               slow the synchronous path.
 *   callback    user callback round trip (typed, a trivial host function)
 *               against the NOOP round trip, one lane and a full warp; and
 *               against today's way without gpusys: end the kernel,
 *               cudaLaunchHostFunc, launch the next (per call).
 *   overlap     kernels that start asynchronous calls (callbacks of ~50 us
 *               of host work; file preads), compute, then wait: the share
 *               of the call time hidden behind the compute, from the
 *               kernel times of calls alone, compute alone, and both.
 *   storm       issue 27's data plane: 256 threads on every SM (33,792 on
 *               the H100), each one call with its own payload of 0..2 KiB
 *               (bench/cb_storm.h) to a bytes callback that answers it
 *               reversed, every answer checked in the kernel; beside the
 *               same threads' typed 8-byte callback, payloads of 0..64 B
 *               (packet 0 only, nothing streamed) with room for 64 B and
 *               for 2 KiB back, and the 0..2 KiB storm as futures.
 *               --storm: this part alone.
 *
 *   gpusys-bench calls [--daemon PATH | --runtime-dir DIR] [--iters N] [--storm]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
#include "gpusys/gpusys.h"
}
#include "gpusys/callback.h"
#include "gpusys/device.cuh"
#include "gpusys/file.cuh"
#include "cb_storm.h"
#include "rpc_v0.h"

#define CK(x)                                                                                                  \
	do {                                                                                                   \
		cudaError_t e_ = (x);                                                                          \
		if (e_ != cudaSuccess) {                                                                       \
			fprintf(stderr, "gpusys-bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
				cudaGetErrorString(e_));                                                       \
			exit(1);                                                                               \
		}                                                                                              \
	} while (0)

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

constexpr gpusys_callback<unsigned(unsigned)> inc_cb{ 0x8001 };
constexpr gpusys_callback<unsigned(unsigned)> work_cb{ 0x8002 };
constexpr gpusys_callback<unsigned(unsigned)> inc_quick_cb{ 0x8003 }; /* the same, GPUSYS_CALLBACK_QUICK */
#define OP_ECHO_CB 0x8004 /* bytes back unchanged, for the stream rows */
#define OP_UNREGISTERED 0x8fff /* nobody registers it */
constexpr gpusys_callback<void()> tick_cb{ 0x8005 }; /* no argument, no result: a NOOP's shape */
/* The storm's comparison: a typed callback of 8 bytes each way (heads, abi.h). */
constexpr gpusys_callback<unsigned long long(unsigned long long)> inc64_cb{ CB_STORM_OP_INC64 };

static unsigned long long inc64_host(unsigned long long x)
{
	return x + 1;
}

static void tick_host(void)
{
}

static unsigned inc_host(unsigned x)
{
	return x + 1;
}

/* ~us microseconds of host work (a spin: a sleep would measure the timer). */
static unsigned work_host(unsigned us)
{
	uint64_t end = bench_now_ns() + (uint64_t)us * 1000u;
	unsigned n = 0;
	while (bench_now_ns() < end)
		n++;
	return n ? us : us;
}

/* ------------------------------------------------------------- kernels */

static int echo_cb(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	if (res_cap < arg_len)
		return -EMSGSIZE;
	memcpy(res, arg, arg_len);
	*res_len = arg_len;
	return 0;
}

/* which: 0 NOOP via gpusys_rpc, 1 NOOP via gpusys_rpc_v0, 2 typed callback,
 * 3 typed callback (QUICK); to split the callback's cost into route and
 * payload shape: 4 an empty request to an unregistered user opcode on the
 * callback channel (the same shape as a NOOP: answered -ENOSYS in the server
 * word), 5 a 4-byte ECHO through the daemon (the callback's shape on the
 * daemon's route), 6 a 4-byte bytes callback that echoes, 7 a typed
 * callback with no argument and no result (a NOOP's shape: an EMPTY request,
 * a TRIVIAL answer). */
static __global__ void k_lat(gpusys_dev_t dev, int which, int lanes, int iters, int warm,
			     unsigned long long *lat, int *err)
{
	if ((int)(threadIdx.x % 32) >= lanes)
		return;
	const uint64_t mask = (uint64_t)__activemask();
	const void *in[1] = { 0 };
	void *out[1] = { 0 };
	uint32_t zero[1] = { 0 }, got[1];
	int32_t st[1];
	for (int i = 0; i < iters + warm; i++) {
		unsigned long long t0 = gtimer();
		int rc;
		if (which == 0) {
			rc = gpusys_rpc(&dev, GPUSYS_OP_NOOP, 0, mask, in, zero, out, zero, got, st);
		} else if (which == 1) {
			rc = gpusys_rpc_v0(&dev, GPUSYS_OP_NOOP, 0, mask, in, zero, out, zero, got, st);
		} else if (which == 2) {
			gpusys_result<unsigned> r = gpusys_call<unsigned>(dev, inc_cb, (unsigned)i);
			rc = r.err ? r.err : r.value != (unsigned)i + 1 ? -EBADMSG : 0;
		} else if (which == 3) {
			gpusys_result<unsigned> r = gpusys_call<unsigned>(dev, inc_quick_cb, (unsigned)i);
			rc = r.err ? r.err : r.value != (unsigned)i + 1 ? -EBADMSG : 0;
		} else if (which == 7) {
			gpusys_result<void> r = gpusys_call<void>(dev, tick_cb);
			rc = r.err;
		} else if (which == 4) {
			rc = gpusys_rpc(dev.callbacks, OP_UNREGISTERED, 0, mask, in, zero, out, zero, got, st);
			rc = rc == -ENOSYS ? 0 : rc ? rc : -EBADMSG;
		} else {
			unsigned x = (unsigned)i, y = 0;
			uint32_t n = 0;
			rc = which == 5 ? gpusys_echo(dev, &x, 4, &y, 4, &n)
					: gpusys_call_bytes(dev, OP_ECHO_CB, &x, 4, &y, 4, &n);
			rc = rc ? rc : n != 4 || y != x ? -EBADMSG : 0;
		}
		unsigned long long t1 = gtimer();
		if (rc)
			atomicCAS(err, 0, rc);
		if (threadIdx.x == 0 && i >= warm)
			lat[i - warm] = t1 - t0;
	}
}

/* which 0: ECHO through the daemon, 1: the echo callback; each lane n
 * bytes of buf (2n per lane: in, then out), iters times. */
static __global__ void k_stream(gpusys_dev_t dev, int which, uint8_t *buf, unsigned n, int iters, int *err)
{
	uint8_t *in = buf + ((size_t)blockIdx.x * 32 + threadIdx.x) * 2 * n, *out = in + n;
	for (unsigned i = 0; i < n; i++)
		in[i] = (uint8_t)(i * 7u + threadIdx.x + blockIdx.x);
	for (int i = 0; i < iters; i++) {
		uint32_t got = 0;
		int rc = which ? gpusys_call_bytes(dev, OP_ECHO_CB, in, n, out, n, &got)
			       : gpusys_echo(dev, in, n, out, n, &got);
		if (rc || got != n)
			atomicCAS(err, 0, rc ? rc : -EBADMSG);
	}
	/* The last answer, checked (once: the check is not what is timed). */
	for (unsigned i = 0; i < n; i++)
		if (out[i] != in[i]) {
			atomicCAS(err, 0, -EBADMSG);
			break;
		}
}

/* The storm (bench/cb_storm.h): each thread one call. max_len 0: the typed
 * 8-byte callback; otherwise a bytes call of cb_storm_len(tid, max_len)
 * bytes from bufs (2 x CB_STORM_MAX a thread: in, then out) with room for
 * cap back, answered reversed; async: started, then waited (a future). The
 * byte after the answer is poisoned first: a write past what the call
 * reported is wrong too. Counts calls that failed (status) and answers that
 * came back wrong. Writing and checking the payloads is inside the timed
 * kernel (each thread's own 4 KiB of device memory, next to nothing beside
 * a round trip to the host). No __launch_bounds__: with it ptxas kept to 64
 * registers and spilled (84 bytes); without, 72 and no spill (sm_90, CUDA
 * 13.0). */
static __global__ void k_storm(gpusys_dev_t dev, uint32_t max_len, uint32_t cap, int async, uint32_t salt,
			       uint8_t *bufs, unsigned *counts, int *first)
{
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	int rc, bad = 0;
	if (!max_len) {
		const unsigned long long x = cb_storm_word(tid, salt);
		gpusys_result<unsigned long long> r = gpusys_call<unsigned long long>(dev, inc64_cb, x);
		rc = r.err;
		bad = !rc && r.value != x + 1;
	} else {
		const uint32_t n = cb_storm_len(tid, max_len);
		uint8_t *in = bufs + (size_t)tid * 2 * CB_STORM_MAX, *out = in + CB_STORM_MAX;
		for (uint32_t b = 0; b < n; b++)
			in[b] = cb_storm_byte(tid, salt, b);
		if (n < CB_STORM_MAX)
			out[n] = 0xee;
		uint32_t got = ~0u;
		if (async) {
			gpusys_future_t f = gpusys_call_bytes_async(dev, CB_STORM_OP_REVERSE, in, n, out, cap);
			rc = (int)gpusys_wait(dev, f);
			got = gpusys_future_len(f);
		} else {
			rc = gpusys_call_bytes(dev, CB_STORM_OP_REVERSE, in, n, out, cap, &got);
		}
		if (!rc) {
			bad = got != n || (n < CB_STORM_MAX && out[n] != 0xee);
			for (uint32_t b = 0; !bad && b < n; b++)
				bad = out[b] != cb_storm_byte(tid, salt, n - 1 - b);
		}
	}
	if (rc) {
		atomicAdd(&counts[0], 1u);
		atomicCAS(first, 0, rc);
	} else if (bad) {
		atomicAdd(&counts[1], 1u);
	}
}

static __global__ void k_empty(int *x)
{
	if (threadIdx.x == 0 && x)
		x[0]++;
}

static __device__ __noinline__ float compute(long long iters, float seed)
{
	float a = seed, b = 1.0001f;
	for (long long i = 0; i < iters; i++)
		a = fmaf(a, b, 0.5f) * 0.9999f;
	return a;
}

/* mode: 0 calls only, 1 compute only, 2 both. kind: 0 callbacks of us
 * microseconds (per lane), 1 preads of bytes (per lane) from handle h.
 * all 0: lane 0 of each warp issues alone (a divergent start); all 1:
 * every lane issues, together (one warp-aggregated request per call). Each
 * warp starts K calls, computes, waits them, rounds times. */
#define K_CALLS 4
/* phase[warp * 3 + i]: lane 0's nanoseconds in the starts (i = 0), the
 * compute (1) and the waits (2), summed over the rounds: where a round's
 * time goes when the calls do not hide behind the compute. */
static __global__ void k_overlap(gpusys_dev_t dev, int mode, int kind, int all, int rounds, long long work,
				 unsigned us, long long h, uint8_t *bufs, unsigned bytes, float *sink, int *err,
				 unsigned long long *phase)
{
	unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
	bool issues = mode != 1 && (all || lane == 0);
	float acc = 0;
	unsigned long long spent[3] = { 0, 0, 0 };
	for (int r = 0; r < rounds; r++) {
		gpusys_future_t f[K_CALLS];
		unsigned res[K_CALLS];
		unsigned long long t0 = gtimer();
		if (issues) {
			for (int k = 0; k < K_CALLS; k++) {
				if (kind == 0)
					f[k] = gpusys_call_async<unsigned>(dev, work_cb, &res[k], us);
				else
					f[k] = gpusys_pread_async(
						dev, h, bufs + (((size_t)warp * K_CALLS + k) * 32 + lane) * bytes, bytes,
						(long long)(k * 32 + lane) * bytes);
			}
		}
		__syncwarp();
		unsigned long long t1 = gtimer();
		/* The seed comes out of memory after the starts, and acc is
		 * materialized before the waits: the compiler may not move the
		 * register-only compute past either. */
		float seed = (float)threadIdx.x + r;
		gpusys_materialize(seed);
		if (mode != 0)
			acc += compute(work, seed);
		gpusys_materialize(acc);
		__syncwarp();
		unsigned long long t2 = gtimer();
		if (issues) {
			for (int k = 0; k < K_CALLS; k++) {
				long long v = gpusys_wait(dev, f[k]);
				if (kind == 0 ? (v != 0 || res[k] != us) : v != (long long)bytes)
					atomicCAS(err, 0, v < 0 ? (int)v : -EBADMSG);
			}
		}
		__syncwarp();
		unsigned long long t3 = gtimer();
		spent[0] += t1 - t0, spent[1] += t2 - t1, spent[2] += t3 - t2;
	}
	sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
	if (lane == 0)
		for (int i = 0; i < 3; i++)
			phase[warp * 3 + i] = spent[i];
}

static __global__ void k_open(gpusys_dev_t dev, const char *path, long long *out)
{
	*out = gpusys_open(dev, path, O_RDONLY);
}

/* ------------------------------------------------------------- the host */

static void run_lat(gpusys_t *g, int which, int lanes, int iters, struct bench_stats *st)
{
	unsigned long long *d;
	int *derr, err = 0;
	int warm = iters / 10 + 1;
	CK(cudaMalloc(&d, sizeof(unsigned long long) * iters));
	CK(cudaMalloc(&derr, sizeof(int)));
	CK(cudaMemset(derr, 0, sizeof(int)));
	k_lat<<<1, 32>>>(gpusys_device(g), which, lanes, iters, warm, d, derr);
	CK(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 60000);
	if (rc) {
		fprintf(stderr, "gpusys-bench: latency kernel: %s\n", gpusys_strerror(rc));
		exit(1);
	}
	CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
	if (err) {
		fprintf(stderr, "gpusys-bench: a call failed: %s\n", gpusys_strerror(err));
		exit(1);
	}
	uint64_t *h = (uint64_t *)malloc(sizeof(uint64_t) * iters);
	CK(cudaMemcpy(h, d, sizeof(uint64_t) * iters, cudaMemcpyDeviceToHost));
	*st = bench_stats_of(h, iters);
	free(h);
	cudaFree(d);
	cudaFree(derr);
}

static void row(const char *what, const struct bench_stats *s, const char *note)
{
	printf("  %-44s p50 %7.2f us  p99 %7.2f us  min %6.2f us  %s\n", what, s->p50_ns / 1e3, s->p99_ns / 1e3,
	       s->min_ns / 1e3, note ? note : "");
}

static volatile int host_calls;
static void CUDART_CB host_fn(void *arg)
{
	(void)arg;
	host_calls++;
}

/* Milliseconds of one k_overlap launch (median of 3). */
static double overlap_ms(gpusys_t *g, int grid, int mode, int kind, int all, int rounds, long long work,
			 unsigned us, long long h, uint8_t *bufs, unsigned bytes, float *sink, int *derr,
			 unsigned long long *phase)
{
	double t[3];
	for (int i = 0; i < 3; i++) {
		cudaEvent_t a, b;
		CK(cudaEventCreate(&a));
		CK(cudaEventCreate(&b));
		CK(cudaEventRecord(a));
		k_overlap<<<grid, 32>>>(gpusys_device(g), mode, kind, all, rounds, work, us, h, bufs, bytes, sink, derr,
					phase);
		CK(cudaEventRecord(b));
		int rc = gpusys_synchronize(g, NULL, 60000);
		if (rc) {
			fprintf(stderr, "gpusys-bench: overlap kernel: %s\n", gpusys_strerror(rc));
			exit(1);
		}
		float ms;
		CK(cudaEventElapsedTime(&ms, a, b));
		t[i] = ms;
		cudaEventDestroy(a);
		cudaEventDestroy(b);
	}
	double x = t[0], y = t[1], z = t[2];
	return x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
}

/* One overlap row: kind 0 callbacks (us per lane), 1 preads (bytes per
 * lane) of file; all: every lane issues, or lane 0 alone. */
static void overlap(gpusys_t *g, int kind, int all, unsigned us, unsigned bytes, const char *file, int *derr)
{
	const int grid = 16, rounds = 10;
	long long h = -1;
	uint8_t *bufs = NULL;
	float *sink;
	unsigned long long *phase, spent[3 * 16];
	CK(cudaMalloc(&sink, sizeof(float) * grid * 32));
	CK(cudaMalloc(&phase, sizeof(spent)));
	if (kind == 1) {
		/* The file: K_CALLS x 32 x bytes of data, in the page cache. */
		size_t fbytes = (size_t)K_CALLS * 32 * bytes;
		int fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0600);
		char *b = (char *)calloc(1, fbytes);
		if (fd < 0 || write(fd, b, fbytes) != (ssize_t)fbytes)
			fprintf(stderr, "gpusys-bench: cannot write %s\n", file);
		free(b);
		if (fd >= 0)
			close(fd);
		CK(cudaMalloc(&bufs, (size_t)grid * K_CALLS * 32 * bytes));
		/* Open it from the device (the handle belongs to this client). */
		long long *dhp;
		CK(cudaMalloc(&dhp, sizeof(long long)));
		char *dpath;
		CK(cudaMalloc(&dpath, strlen(file) + 1));
		CK(cudaMemcpy(dpath, file, strlen(file) + 1, cudaMemcpyHostToDevice));
		k_open<<<1, 1>>>(gpusys_device(g), dpath, dhp);
		gpusys_synchronize(g, NULL, 10000);
		CK(cudaMemcpy(&h, dhp, sizeof(h), cudaMemcpyDeviceToHost));
		cudaFree(dpath);
		cudaFree(dhp);
		if (h < 0) {
			fprintf(stderr, "gpusys-bench: open %s from the device: %s\n", file, gpusys_strerror((int)h));
			return;
		}
	}
	/* Calibrate the compute to ~1.3x the call time of a round. */
	double calls = overlap_ms(g, grid, 0, kind, all, rounds, 0, us, h, bufs, bytes, sink, derr, phase);
	long long work = 1000;
	double comp = overlap_ms(g, grid, 1, kind, all, rounds, work, us, h, bufs, bytes, sink, derr, phase);
	for (int i = 0; i < 6 && comp < 1.3 * calls; i++) {
		work = (long long)(work * (1.3 * calls / (comp > 0.01 ? comp : 0.01)));
		comp = overlap_ms(g, grid, 1, kind, all, rounds, work, us, h, bufs, bytes, sink, derr, phase);
	}
	double both = overlap_ms(g, grid, 2, kind, all, rounds, work, us, h, bufs, bytes, sink, derr, phase);
	int err = 0;
	CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
	/* Where "both"'s rounds went (its last launch), lane 0 of each warp:
	 * starts that take the calls' time mean the futures ran one at a time
	 * at their start; waits that do, that they did not run meanwhile. */
	CK(cudaMemcpy(spent, phase, sizeof(spent), cudaMemcpyDeviceToHost));
	double mean[3] = { 0, 0, 0 };
	for (int w = 0; w < grid; w++)
		for (int i = 0; i < 3; i++)
			mean[i] += (double)spent[w * 3 + i] / 1e3 / grid / rounds;
	double hidden = (calls + comp - both) / calls;
	char what[64];
	if (kind == 0)
		snprintf(what, sizeof(what), "callback, %u us host work per lane", us);
	else
		snprintf(what, sizeof(what), "file pread, %u B per lane", bytes);
	printf("  %-36s %s: %d warps x %d rounds x %d async calls: calls alone %.2f ms, compute alone %.2f ms, "
	       "both %.2f ms (serial %.2f): %.0f%% of the call time hidden%s\n",
	       what, all ? "all 32 lanes issue" : "lane 0 issues", grid, rounds, K_CALLS, calls, comp, both,
	       calls + comp, 100 * hidden, err ? " (A CALL FAILED)" : "");
	printf("  %-36s both, a warp's round: starts %.1f us, compute %.1f us, waits %.1f us\n", "", mean[0], mean[1],
	       mean[2]);
	if (kind == 1)
		unlink(file);
	cudaFree(sink);
	cudaFree(phase);
	if (bufs)
		cudaFree(bufs);
}

/* The storm's rows: one warm-up launch (not timed: the pool's threads and
 * the ports' first use), then STORM_LAUNCHES timed ones, each with its own
 * salt; kernel times (events) as the overlap rows, the median given. Every
 * launch's answers are checked, the warm-up's too. */
#define STORM_LAUNCHES 5
static void storm(gpusys_t *g, int sms)
{
	const uint32_t blocks = (uint32_t)sms, threads = blocks * CB_STORM_BLOCK;
	uint8_t *bufs;
	unsigned *dcounts;
	int *dfirst;
	CK(cudaMalloc(&bufs, (size_t)threads * 2 * CB_STORM_MAX));
	CK(cudaMalloc(&dcounts, 2 * sizeof(unsigned)));
	CK(cudaMalloc(&dfirst, sizeof(int)));
	/* What the lengths add up to (the host computes the same function). */
	uint64_t bytes[2] = { 0, 0 }; /* 0..64, 0..2048 */
	uint32_t streamed = 0;
	for (uint32_t t = 0; t < threads; t++) {
		bytes[0] += cb_storm_len(t, 64);
		bytes[1] += cb_storm_len(t, CB_STORM_MAX);
		streamed += cb_storm_len(t, CB_STORM_MAX) > GPUSYS_INLINE_BYTES;
	}
	printf("callback storm (issue 27; bench/cb_storm.h): %u blocks x %u threads = %u threads, one call each, "
	       "every answer checked in the kernel; kernel time, median of %d launches (1 warm-up before); "
	       "%u of the 0..2048 B payloads stream past packet 0 (%u B a lane):\n",
	       blocks, CB_STORM_BLOCK, threads, STORM_LAUNCHES, streamed, (unsigned)GPUSYS_INLINE_BYTES);
	printf("  %-48s %9s %9s %10s %12s %7s %7s\n", "call", "ms", "min ms", "M calls/s", "MB each way", "wrong",
	       "failed");
	/* Rows 2 and 3 differ only in the room given for the answer: a
	 * synchronous call whose capacities could need more than one 2 KiB
	 * packet back takes one of the channel's few window ports
	 * (gpusys_wants_window), whatever the answer turns out to be. Row 5:
	 * futures never take window ports; they stream in 2 KiB packets. */
	static const struct {
		uint32_t max_len, cap;
		int async;
		const char *name;
	} rows[] = {
		{ 0, 8, 0, "typed inc(x), 8 B each way" },
		{ 64, 64, 0, "bytes reverse, 0..64 B, room for 64 B" },
		{ 64, CB_STORM_MAX, 0, "bytes reverse, 0..64 B, room for 2 KiB" },
		{ CB_STORM_MAX, CB_STORM_MAX, 0, "bytes reverse, 0..2048 B (issue 27's row)" },
		{ CB_STORM_MAX, CB_STORM_MAX, 1, "bytes reverse, 0..2048 B, async + wait" },
	};
	const int nrows = (int)(sizeof(rows) / sizeof(rows[0]));
	for (int r = 0; r < nrows; r++) {
		double t[STORM_LAUNCHES];
		unsigned c[2]; /* failed, wrong */
		int first = 0;
		CK(cudaMemset(dcounts, 0, 2 * sizeof(unsigned)));
		CK(cudaMemset(dfirst, 0, sizeof(int)));
		for (int i = -1; i < STORM_LAUNCHES; i++) {
			cudaEvent_t a, b;
			CK(cudaEventCreate(&a));
			CK(cudaEventCreate(&b));
			CK(cudaEventRecord(a));
			k_storm<<<blocks, CB_STORM_BLOCK>>>(gpusys_device(g), rows[r].max_len, rows[r].cap,
							    rows[r].async, (uint32_t)(r * 100 + i + 1), bufs, dcounts,
							    dfirst);
			CK(cudaGetLastError());
			CK(cudaEventRecord(b));
			int rc = gpusys_synchronize(g, NULL, 120000);
			if (rc) {
				fprintf(stderr, "gpusys-bench: storm kernel: %s\n", gpusys_strerror(rc));
				exit(1);
			}
			float ms;
			CK(cudaEventElapsedTime(&ms, a, b));
			if (i >= 0)
				t[i] = ms;
			cudaEventDestroy(a);
			cudaEventDestroy(b);
		}
		CK(cudaMemcpy(c, dcounts, sizeof(c), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&first, dfirst, sizeof(int), cudaMemcpyDeviceToHost));
		/* The median of the timed launches (insertion sort: 5 of them). */
		for (int i = 1; i < STORM_LAUNCHES; i++)
			for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
				double x = t[j];
				t[j] = t[j - 1];
				t[j - 1] = x;
			}
		double med = t[STORM_LAUNCHES / 2];
		double mb = !rows[r].max_len ? threads * 8.0 / 1e6 : bytes[rows[r].max_len == 64 ? 0 : 1] / 1e6;
		printf("  %-48s %9.3f %9.3f %10.3f %12.2f %7u %7u%s%s\n", rows[r].name, med, t[0], threads / med / 1e3,
		       mb, c[1], c[0], first ? "  first failure: " : "", first ? gpusys_strerror(first) : "");
	}
	/* The callback channel's shape (its header, host view): how many warps
	 * share a port, and a window port. */
	uint64_t cb_bytes = 0;
	const struct gpusys_channel_header *hdr =
		(const struct gpusys_channel_header *)gpusys_callbacks_channel(gpusys_callbacks_of(g), &cb_bytes);
	printf("  (wrong, failed: over all %d launches of the row, %u calls each; issue 27's target for its row: "
	       "under 20 ms; the callback channel: %u ports, %u of them window ports, for %u warps)\n",
	       STORM_LAUNCHES + 1, threads, hdr ? hdr->num_ports : 0, hdr ? hdr->num_windows : 0, threads / 32);
	cudaFree(bufs);
	cudaFree(dcounts);
	cudaFree(dfirst);
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench calls [--daemon PATH | --runtime-dir DIR] [--iters N] [--storm]\n");
}

extern "C" int bench_calls_gpu(int argc, char **argv)
{
	int iters = 20000, opt, storm_only = 0;
	const char *runtime_dir = NULL, *daemon = NULL;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },
		{ "storm", no_argument, NULL, 's' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 's': storm_only = 1; break;
		default: usage(); return 2;
		}
	}
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	/* The streams from every SM keep up to 64 window calls of 2 MiB each
	 * way in flight at once: past the default client_mem_budget (64 MiB),
	 * which would answer them -ENOMEM. */
	bd.config = "client_mem_budget = 1G\nuser_mem_budget = 2G\n";
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "gpusys-bench: no usable GPU\n");
		bench_daemon_stop(&bd);
		return 77;
	}
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.runtime_dir = runtime_dir;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys-bench: attach: %s\n", gpusys_last_error());
		bench_daemon_stop(&bd);
		return 1;
	}
	struct gpusys_callbacks *cb = gpusys_callbacks_of(g);
	struct gpusys_callback_desc ed;
	memset(&ed, 0, sizeof(ed));
	ed.opcode = OP_ECHO_CB;
	ed.name = "echo";
	ed.arg_max = ed.res_max = 1u << 20;
	ed.fn = echo_cb;
	struct gpusys_callback_desc rd;
	memset(&rd, 0, sizeof(rd));
	rd.opcode = CB_STORM_OP_REVERSE;
	rd.name = "reverse";
	rd.arg_max = rd.res_max = CB_STORM_MAX;
	rd.fn = cb_storm_reverse;
	if (!cb || gpusys_register(cb, inc_cb, "inc", inc_host) || gpusys_register(cb, work_cb, "work", work_host) ||
	    gpusys_register(cb, inc_quick_cb, "inc_quick", inc_host, GPUSYS_CALLBACK_QUICK) ||
	    gpusys_register(cb, tick_cb, "tick", tick_host) || gpusys_register(cb, inc64_cb, "inc64", inc64_host) ||
	    gpusys_register_callback(g, &ed) || gpusys_register_callback(g, &rd)) {
		fprintf(stderr, "gpusys-bench: cannot register the callbacks\n");
		return 1;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("gpusys-bench calls: %s, %u ports, %d iterations per row\n", prop.name, gpusys_num_ports(g), iters);
	int sms = 0;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	if (storm_only) {
		storm(g, sms);
		gpusys_detach(g);
		bench_daemon_stop(&bd);
		return 0;
	}

	/* 1. The synchronous path before and after the split, alternating. */
	printf("sync path A/B (one warp, NOOP, 3 rounds each, alternating):\n");
	for (int lanes = 32; lanes >= 1; lanes -= 31) {
		uint64_t p50[2] = { 0, 0 }, p99[2] = { 0, 0 };
		for (int round = 0; round < 3; round++) {
			for (int which = 1; which >= 0; which--) {
				struct bench_stats s;
				run_lat(g, which, lanes, iters, &s);
				p50[which] += s.p50_ns;
				p99[which] += s.p99_ns;
			}
		}
		printf("  %2d lanes: gpusys_rpc_v0 (before) p50 %.2f us p99 %.2f us | gpusys_rpc (start+finish) "
		       "p50 %.2f us p99 %.2f us | ratio %.3f\n",
		       lanes, p50[1] / 3e3, p99[1] / 3e3, p50[0] / 3e3, p99[0] / 3e3, (double)p50[0] / p50[1]);
	}

	/* 2. Callback round trip against NOOP and cudaLaunchHostFunc. */
	printf("user callback round trip (one warp):\n");
	for (int lanes = 1; lanes <= 32; lanes += 31) {
		struct bench_stats noop, cbs, qs;
		run_lat(g, 0, lanes, iters, &noop);
		run_lat(g, 2, lanes, iters, &cbs);
		run_lat(g, 3, lanes, iters, &qs);
		char what[64], note[64];
		snprintf(what, sizeof(what), "NOOP (daemon), %d lane%s", lanes, lanes > 1 ? "s" : "");
		row(what, &noop, NULL);
		snprintf(what, sizeof(what), "callback inc(x) (this process), %d lane%s", lanes, lanes > 1 ? "s" : "");
		snprintf(note, sizeof(note), "%.2fx NOOP", (double)cbs.p50_ns / noop.p50_ns);
		row(what, &cbs, note);
		snprintf(what, sizeof(what), "callback inc(x), QUICK, %d lane%s", lanes, lanes > 1 ? "s" : "");
		snprintf(note, sizeof(note), "%.2fx NOOP", (double)qs.p50_ns / noop.p50_ns);
		row(what, &qs, note);
		/* Where the difference goes: route (daemon or callback
		 * server) against payload shape (empty or 4 bytes each way). */
		static const char *const split[] = { "empty request, callback channel (-ENOSYS)",
						     "ECHO 4 B each way (daemon)", "bytes callback 4 B each way",
						     "callback tick() (no argument, no result)" };
		for (int w = 4; w <= 7; w++) {
			struct bench_stats s;
			run_lat(g, w, lanes, iters, &s);
			snprintf(what, sizeof(what), "%s, %d lane%s", split[w - 4], lanes, lanes > 1 ? "s" : "");
			snprintf(note, sizeof(note), "%.2fx NOOP", (double)s.p50_ns / noop.p50_ns);
			row(what, &s, note);
		}
	}
	/* Streams: 32 lanes x n bytes each way, daemon ECHO against a bytes
	 * callback that echoes; one warp, then one warp on every SM at once.
	 * GB/s each way: 32 x n bytes go out and come back per call. Floors
	 * (the shared notes' reference/stream_floor.cu, H100): one warp's
	 * naive round trip through pinned memory 1,495 us for 32 x 64 KiB
	 * (1.40 GB/s each way) and 102 us for 32 x 4 KiB. */
	for (int blocks = 1; blocks <= sms; blocks = blocks == 1 ? sms : sms + 1) {
		for (unsigned n = 4096; n <= 65536; n *= 16) {
			if (blocks > 1 && n < 65536)
				continue;
			double t[2];
			int failed = 0;
			const int iters = blocks > 1 ? 5 : 20;
			for (int w = 0; w < 2; w++) {
				uint8_t *buf;
				int *derr, err = 0;
				CK(cudaMalloc(&buf, (size_t)64 * n * blocks));
				CK(cudaMalloc(&derr, sizeof(int)));
				CK(cudaMemset(derr, 0, sizeof(int)));
				/* a call first: it wakes the DMA agent (dma.h) where it dozes */
				k_stream<<<blocks, 32>>>(gpusys_device(g), w, buf, n, 1, derr);
				gpusys_synchronize(g, NULL, 120000);
				uint64_t t0 = bench_now_ns();
				k_stream<<<blocks, 32>>>(gpusys_device(g), w, buf, n, iters, derr);
				gpusys_synchronize(g, NULL, 120000);
				t[w] = (bench_now_ns() - t0) / 1e3 / iters;
				CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
				if (err) {
					printf("  stream %s, %d warps x 32 lanes x %u B: a call failed: %s\n",
					       w ? "callback" : "echo", blocks, n, gpusys_strerror(err));
					failed = 1;
				}
				cudaFree(buf);
				cudaFree(derr);
			}
			if (failed)
				continue; /* said above: no rate for calls that failed */
			double each_way = 32.0 * n * blocks; /* bytes per round of calls */
			printf("  stream, %d warp%s x 32 lanes x %u B each way: daemon ECHO %.1f us per call (%.2f GB/s "
			       "each way), bytes callback %.1f us (%.2f GB/s, %.2fx)\n",
			       blocks, blocks > 1 ? "s" : "", n, t[0], each_way / (t[0] * 1e3), t[1],
			       each_way / (t[1] * 1e3), t[1] / t[0]);
		}
	}
	{
		struct gpusys_dma_info di;
		if (gpusys_dma_info(g, &di) == 0)
			printf("  DMA agent so far: %llu copies in %llu batches, %.1f MiB, %llu refused, woken %llu times\n",
			       (unsigned long long)di.copies, (unsigned long long)di.batches, di.bytes / 1048576.0,
			       (unsigned long long)di.failures, (unsigned long long)di.wakes);
		else
			printf("  no DMA agent (GPUSYS_DMA=0?): the warps copied every stream\n");
	}
	{
		cudaStream_t s;
		CK(cudaStreamCreate(&s));
		int *x;
		CK(cudaMalloc(&x, sizeof(int)));
		const int N = 2000;
		for (int i = 0; i < 100; i++) {
			k_empty<<<1, 32, 0, s>>>(x);
			CK(cudaLaunchHostFunc(s, host_fn, NULL));
		}
		CK(cudaStreamSynchronize(s));
		uint64_t t0 = bench_now_ns();
		for (int i = 0; i < N; i++) {
			k_empty<<<1, 32, 0, s>>>(x);
			CK(cudaLaunchHostFunc(s, host_fn, NULL));
		}
		CK(cudaStreamSynchronize(s));
		double per = (bench_now_ns() - t0) / 1e3 / N;
		/* And one round trip at a time: the kernel waits for the host
		 * function before the next launch (a kernel that needs the
		 * answer). */
		t0 = bench_now_ns();
		for (int i = 0; i < N / 4; i++) {
			k_empty<<<1, 32, 0, s>>>(x);
			CK(cudaLaunchHostFunc(s, host_fn, NULL));
			CK(cudaStreamSynchronize(s));
		}
		double per_sync = (bench_now_ns() - t0) / 1e3 / (N / 4);
		printf("  %-44s %.2f us per call queued back to back, %.2f us per call waited each time\n",
		       "kernel end + cudaLaunchHostFunc + launch", per, per_sync);
		cudaFree(x);
		cudaStreamDestroy(s);
	}

	/* 3. Overlap. */
	printf("overlap (kernel times, median of 3):\n");
	int *derr;
	CK(cudaMalloc(&derr, sizeof(int)));
	CK(cudaMemset(derr, 0, sizeof(int)));
	char file[PATH_MAX + 32];
	snprintf(file, sizeof(file), "%s/overlap.dat", runtime_dir ? runtime_dir : "/tmp");
	/* The first and last rows are those of bench/RESULTS.md's first
	 * figures (lane 0 issuing alone); the others issue from every lane,
	 * and read 64 B per lane (one packet each way, nothing streamed). */
	overlap(g, 0, 0, 50, 0, NULL, derr);
	overlap(g, 0, 1, 2, 0, NULL, derr);
	overlap(g, 1, 1, 0, 64, file, derr);
	overlap(g, 1, 0, 0, 64 * 1024, file, derr);
	cudaFree(derr);

	/* 4. The storm. */
	storm(g, sms);

	gpusys_detach(g);
	bench_daemon_stop(&bd);
	return 0;
}
