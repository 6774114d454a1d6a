/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench rtt (GPU): NOOP round trips from CUDA kernels through a real
 * gpusysd, in one table with what they are judged against, all measured in
 * this run:
 *   - the floor: the same mailbox shape with nothing of gpusys in it (one
 *     warp stores a word into shared pinned host memory, then
 *     __threadfence_system; a forked process that never touches CUDA spins
 *     on it and answers), as shared/reference/pingpong.cu;
 *   - one-warp null call latency (p50, p99, min by %globaltimer in the
 *     kernel), for each channel memory kind;
 *   - throughput with full warps from 1 warp up to every resident warp;
 *   - the kernel-split alternative: end the kernel, cudaLaunchHostFunc,
 *     launch the next.
 * Optionally (--idle) the daemon's CPU use with an attached idle client and
 * the first call's latency after 1 s of idle.
 * C-style CUDA: the only C++ is what nvcc needs for kernels.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
#include "cpu_server.h"
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "libclient/attach/dev_handle.h"
}
#include "gpusys/device.cuh"

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* ------------------------------------------------------------- the floor */

struct floor_slot {
	volatile uint64_t req __attribute__((aligned(128)));
	volatile uint64_t resp __attribute__((aligned(128)));
};

#define FLOOR_SLOTS 1024
#define FLOOR_THREADS 4

static void *floor_poll(void *p)
{
	struct cpu_slice *a = (struct cpu_slice *)p;
	struct floor_slot *slots = (struct floor_slot *)a->host;
	uint64_t *seen = (uint64_t *)calloc(a->count, sizeof(uint64_t));
	while (!*a->stop) {
		for (unsigned k = 0; k < a->count; k++) {
			struct floor_slot *s = &slots[a->first + k];
			uint64_t r = s->req;
			if (r != seen[k]) {
				seen[k] = r;
				__atomic_thread_fence(__ATOMIC_SEQ_CST);
				s->resp = r;
			}
		}
	}
	free(seen);
	return NULL;
}

/* The floor's CPU side: raw mailboxes, before this process touches CUDA. */
static int floor_start(struct cpu_server *f)
{
	int rc = cpu_server_map(f, "gpusys-bench-floor", sizeof(struct floor_slot) * FLOOR_SLOTS);
	return rc ? rc : cpu_server_fork(f, floor_poll, FLOOR_SLOTS, FLOOR_THREADS, NULL, 0);
}

/* Warp w pings slot (w * FLOOR_SLOTS / nwarps)... one lane per warp, as the
 * reference. lat: warp 0's samples. */
static __global__ void k_floor(struct floor_slot *slots, int nwarps, int iters, int warm, unsigned long long *lat)
{
	int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
	if (threadIdx.x % 32 != 0 || w >= nwarps)
		return;
	/* spread over the server threads' slices */
	int per = FLOOR_SLOTS / FLOOR_THREADS;
	int slot = (w % FLOOR_THREADS) * per + (w / FLOOR_THREADS) % per;
	struct floor_slot *s = &slots[slot];
	uint64_t base = s->resp;
	for (int i = 1; i <= iters + warm; i++) {
		unsigned long long t0 = gtimer();
		s->req = base + (uint64_t)i;
		__threadfence_system();
		while (s->resp != base + (uint64_t)i) {
		}
		unsigned long long t1 = gtimer();
		if (w == 0 && i > warm)
			lat[i - warm - 1] = t1 - t0;
	}
}

/* Where the client's time goes (--breakdown): the raw mailbox with one
 * piece of the client's fast path added at a time. bits: 1 the port lock
 * (acquiring exchange before, releasing store after, device memory: the
 * client's), 2 the request count (a reduction) and a second sysmem store
 * (the doorbell), 4 the whole warp takes part (activemask, shuffles, warp
 * syncs). Lock flavours, in place of 1: 8 relaxed exchange and relaxed
 * store (no ordering), 16 the exchange alone (no release), 32 a ticket
 * lock's shape (acquiring add before, releasing reduction after). 64: the
 * count and the doorbell after the flushing fence instead of before it. */
static __global__ void k_floor_parts(struct floor_slot *slots, unsigned bits, int iters, int warm,
				     unsigned long long *lat, unsigned *lock, unsigned long long *counter)
{
	unsigned lane = threadIdx.x % 32;
	if (!(bits & 4) && lane != 0)
		return;
	struct floor_slot *s = &slots[0];
	uint64_t base = s->resp;
	volatile uint64_t *bell = &slots[1].req;
	unsigned long long *pair = (unsigned long long *)lock;
	for (int i = 1; i <= iters + warm; i++) {
		unsigned long long t0 = gtimer();
		unsigned mask = 1;
		unsigned long long old = 0;
		if (bits & 4) {
			mask = __activemask();
			mask = __shfl_sync(mask, mask, 0);
		}
		if (lane == 0) {
			if (bits & (1 | 16))
				asm volatile("atom.acquire.gpu.global.exch.b64 %0, [%1], %2;"
					     : "=l"(old)
					     : "l"(pair), "l"(1ull)
					     : "memory");
			if (bits & 8)
				asm volatile("atom.relaxed.gpu.global.exch.b64 %0, [%1], %2;"
					     : "=l"(old)
					     : "l"(pair), "l"(1ull)
					     : "memory");
			if (bits & 32)
				asm volatile("atom.acquire.gpu.global.add.u64 %0, [%1], %2;"
					     : "=l"(old)
					     : "l"(pair), "l"(1ull << 49)
					     : "memory");
			if ((bits & 2) && !(bits & 64))
				atomicAdd(counter, 1ull);
			/* the request depends on the lock's answer, as the
			 * client's does (it carries the sequence from it) */
			s->req = base + (uint64_t)i + (old & 2u);
			if ((bits & 2) && !(bits & 64))
				*bell = gtimer();
			__threadfence_system();
			if ((bits & 2) && (bits & 64)) {
				*bell = gtimer();
				atomicAdd(counter, 1ull);
			}
			while (s->resp != base + (uint64_t)i) {
			}
			if (bits & 1)
				asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(pair), "l"(0ull) : "memory");
			if (bits & 8)
				asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(pair), "l"(0ull) : "memory");
			if (bits & 32)
				asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(pair), "l"(1ull << 34)
					     : "memory");
		}
		if (bits & 4) {
			__syncwarp(mask);
			old = __shfl_sync(mask, old, 0);
		}
		unsigned long long t1 = gtimer();
		if (lane == 0 && i > warm)
			lat[i - warm - 1] = t1 - t0;
	}
}

/* ------------------------------------------------------------- gpusys */

static __global__ void k_lat(gpusys_dev_t dev, int lanes, int iters, int warm, unsigned long long *lat, int *err)
{
	if ((int)(threadIdx.x % 32) >= lanes)
		return;
	for (int i = 0; i < iters + warm; i++) {
		unsigned long long t0 = gtimer();
		int rc = gpusys_noop(dev);
		unsigned long long t1 = gtimer();
		if (rc)
			atomicCAS(err, 0, rc);
		if (threadIdx.x == 0 && i >= warm)
			lat[i - warm] = t1 - t0;
	}
}

/* Throughput: every warp calls iters times. At most 32 registers so that
 * every warp slot of an SM can be resident. lat: warp 0's samples. */
static __global__ void __launch_bounds__(1024, 2)
	k_tput(gpusys_dev_t dev, int iters, unsigned long long *lat, int *err)
{
	for (int i = 0; i < iters; i++) {
		unsigned long long t0 = gtimer();
		int rc = gpusys_noop(dev);
		if (rc)
			atomicCAS(err, 0, rc);
		if (blockIdx.x == 0 && threadIdx.x == 0)
			lat[i] = gtimer() - t0;
	}
}

/* Compute only, no calls: does a dozing daemon's GPU doorbell watch (a
 * stream wait in its own context) slow other work on the GPU? */
static __global__ void k_spin(long long cycles, int *sink)
{
	long long t0 = clock64();
	int x = threadIdx.x;
	while (clock64() - t0 < cycles)
		x = x * 1103515245 + 12345;
	if (x == 42 && sink)
		*sink = x;
}

static float time_spin(int sms)
{
	cudaEvent_t e0, e1;
	float ms = 0;
	BENCH_CK(cudaEventCreate(&e0));
	BENCH_CK(cudaEventCreate(&e1));
	BENCH_CK(cudaEventRecord(e0));
	for (int i = 0; i < 20; i++)
		k_spin<<<sms * 8, 256>>>(5000000LL, NULL); /* ~3 ms each */
	BENCH_CK(cudaEventRecord(e1));
	BENCH_CK(cudaEventSynchronize(e1));
	BENCH_CK(cudaEventElapsedTime(&ms, e0, e1));
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return ms;
}

static __global__ void k_empty(int *x)
{
	if (threadIdx.x == 0 && x)
		x[0]++;
}

static void CUDART_CB host_fn(void *p)
{
	(*(volatile long *)p)++;
}

/* ------------------------------------------------------------- driver */

struct row {
	char what[64];
	const char *kind;
	long warps;
	struct bench_stats s;
	double req_s, lane_s;
	int has_daemon; /* --breakdown: the daemon's counters over the row */
	struct bench_pollers daemon;
};

static struct row rows[64];
static int nrows;

static struct row *add_row(const char *what, const char *kind, long warps)
{
	struct row *r = &rows[nrows++];
	memset(r, 0, sizeof(*r));
	snprintf(r->what, sizeof(r->what), "%s", what);
	r->kind = kind;
	r->warps = warps;
	return r;
}

static struct bench_stats stats_dev(unsigned long long *dlat, int n)
{
	uint64_t *h = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)n);
	BENCH_CK(cudaMemcpy(h, dlat, sizeof(uint64_t) * (size_t)n, cudaMemcpyDeviceToHost));
	struct bench_stats s = bench_stats_of(h, (size_t)n);
	free(h);
	return s;
}

static const char *kind_name(uint32_t k)
{
	return k == GPUSYS_MEMORY_CUDA_VMM ? "vmm" : k == GPUSYS_MEMORY_MEMFD ? "memfd" : "?";
}

static void launch_shape(long warps, int sms, int *grid, int *block)
{
	if (warps <= sms) {
		*grid = (int)warps;
		*block = 32;
		return;
	}
	long per_sm = warps / sms;
	if (per_sm > 32)
		per_sm = 32;
	*block = (int)per_sm * 32;
	*grid = (int)(warps * 32 / *block);
}

static uint32_t opt_ports; /* --ports: 0 = libgpusys's default */

static gpusys_t *attach_kind(const char *dir, uint32_t kinds)
{
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.num_ports = opt_ports;
	o.runtime_dir = dir;
	o.cuda_device = 0;
	o.memory_kinds = kinds;
	gpusys_t *g = NULL;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpusys-bench: gpusys_attach (kinds %#x): %s\n", kinds, gpusys_last_error());
		return NULL;
	}
	return g;
}

static uint32_t used_ports;

/* --breakdown: read gpusysd's pollers' counters around each row served by
 * it (daemon_dir set), and its poller threads' placement (daemon_pid). */
static const char *daemon_dir;
static int daemon_pid;

static int daemon_begin(struct bench_pollers *before)
{
	return daemon_dir && bench_pollers_read(daemon_dir, daemon_pid, before) == 0;
}

static void daemon_end(struct row *r, int began, const struct bench_pollers *before)
{
	struct bench_pollers after;
	if (!began || bench_pollers_read(daemon_dir, daemon_pid, &after) < 0)
		return;
	bench_pollers_since(before, &after, &r->daemon);
	r->has_daemon = 1;
}

/* Wait for g's kernels; a failed wait or a call that failed (*derr) ends
 * the benchmark, saying what failed. */
static void synchronize_or_exit(gpusys_t *g, int timeout_ms, const int *derr, const char *what)
{
	int rc = gpusys_synchronize(g, NULL, timeout_ms);
	int err = 0;
	BENCH_CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
	if (rc || err) {
		fprintf(stderr, "gpusys-bench: %s: %s\n", what, gpusys_strerror(rc ? rc : err));
		exit(1);
	}
}

static void one_warp(gpusys_t *g, int lanes, int iters, unsigned long long *dlat, int *derr, const char *what)
{
	static struct bench_pollers before;
	BENCH_CK(cudaMemset(derr, 0, sizeof(int)));
	int began = daemon_begin(&before);
	k_lat<<<1, 32>>>(gpusys_device(g), lanes, iters, iters / 10 + 10, dlat, derr);
	BENCH_CK(cudaGetLastError());
	synchronize_or_exit(g, 60000, derr, what);
	struct row *r = add_row(what, kind_name(gpusys_memory_kind(g)), 1);
	daemon_end(r, began, &before);
	r->s = stats_dev(dlat, iters);
	used_ports = gpusys_num_ports(g);
}

static void throughput(gpusys_t *g, long warps, int sms, long total, unsigned long long *dlat, int *derr)
{
	int grid, block;
	launch_shape(warps, sms, &grid, &block);
	long w = (long)grid * block / 32;
	int iters = (int)(total / w);
	if (iters < 20)
		iters = 20;
	if (iters > 100000)
		iters = 100000;
	cudaEvent_t e0, e1;
	BENCH_CK(cudaEventCreate(&e0));
	BENCH_CK(cudaEventCreate(&e1));
	BENCH_CK(cudaMemset(derr, 0, sizeof(int)));
	k_tput<<<grid, block>>>(gpusys_device(g), 5, dlat, derr); /* warm-up */
	/* --breakdown: after the warm-up, so that the counters cover the
	 * timed kernel (and the reads around it). */
	if (daemon_dir)
		BENCH_CK(cudaStreamSynchronize(0));
	static struct bench_pollers before;
	int began = daemon_begin(&before);
	BENCH_CK(cudaEventRecord(e0));
	k_tput<<<grid, block>>>(gpusys_device(g), iters, dlat, derr);
	BENCH_CK(cudaEventRecord(e1));
	BENCH_CK(cudaGetLastError());
	char what[64];
	snprintf(what, sizeof(what), "throughput %ld warps", w);
	synchronize_or_exit(g, 120000, derr, what);
	float ms = 0;
	BENCH_CK(cudaEventElapsedTime(&ms, e0, e1));
	snprintf(what, sizeof(what), "gpusys NOOP, %ld warp%s x 32 lanes", w, w == 1 ? "" : "s");
	struct row *r = add_row(what, kind_name(gpusys_memory_kind(g)), w);
	daemon_end(r, began, &before);
	r->s = stats_dev(dlat, iters);
	double reqs = (double)w * iters;
	r->req_s = reqs / (ms / 1e3);
	r->lane_s = r->req_s * 32;
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

static double proc_cpu_s(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	/* fields after ')': state(3) ... utime(14) stime(15) */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench rtt [--iters N] [--runtime-dir DIR | --daemon PATH [--daemon-args ARGS]]\n"
			"                        [--ports N] [--max-warps N] [--idle] [--breakdown] [--json] [--repeat N]\n"
			"  --repeat N  run the whole table N times back to back, each in a fresh process (and a\n"
			"              fresh gpusysd with --daemon), then print the spread of the headline figures\n");
}

/* --repeat: this command again, n times, each a process of its own; every
 * run's table goes through, its last line is kept for the spread. */
static int run_repeated(int argc, char **argv, int n)
{
	char **args = (char **)calloc((size_t)argc + 2, sizeof(char *));
	int k = 0;
	args[k++] = (char *)"gpusys-bench";
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--repeat")) {
			i++;
			continue;
		}
		if (!strncmp(argv[i], "--repeat=", 9))
			continue;
		args[k++] = argv[i];
	}
	args[k] = NULL;
	double p50_min = 1e30, p50_max = 0, peak_min = 1e30, peak_max = 0;
	int ok = 0;
	for (int r = 1; r <= n; r++) {
		int pfd[2];
		if (pipe(pfd) < 0)
			return 1;
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			dup2(pfd[1], 1);
			close(pfd[0]);
			close(pfd[1]);
			execv("/proc/self/exe", args);
			_exit(127);
		}
		close(pfd[1]);
		FILE *in = fdopen(pfd[0], "r");
		char line[512];
		double p50 = -1, split, slower, peak = -1;
		printf("== run %d of %d\n", r, n);
		while (in && fgets(line, sizeof(line), in)) {
			fputs(line, stdout);
			sscanf(line, "best one-warp p50 %lf us; kernel split %lf us = %lfx slower; peak %lf", &p50, &split,
			       &slower, &peak);
		}
		if (in)
			fclose(in);
		int st = 0;
		waitpid(pid, &st, 0);
		if (p50 <= 0 || peak <= 0)
			continue;
		ok++;
		p50_min = p50 < p50_min ? p50 : p50_min;
		p50_max = p50 > p50_max ? p50 : p50_max;
		peak_min = peak < peak_min ? peak : peak_min;
		peak_max = peak > peak_max ? peak : peak_max;
	}
	free(args);
	if (!ok) {
		fprintf(stderr, "gpusys-bench: no run finished\n");
		return 1;
	}
	printf("spread over %d runs: one-warp NOOP p50 %.2f-%.2f us (max/min %.2f); peak %.2f-%.2f M warp req/s "
	       "(max/min %.2f)\n",
	       ok, p50_min, p50_max, p50_max / p50_min, peak_min, peak_max, peak_max / peak_min);
	return ok == n ? 0 : 1;
}

extern "C" int bench_rtt_gpu(int argc, char **argv)
{
	int iters = 20000, json = 0, idle = 0, breakdown = 0, opt;
	long max_warps = 0;
	const char *runtime_dir = NULL, *daemon = NULL, *daemon_args = NULL;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },     { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' },    { "daemon-args", required_argument, NULL, 'a' },
		{ "max-warps", required_argument, NULL, 'm' }, { "idle", no_argument, NULL, 'I' },
		{ "json", no_argument, NULL, 'j' },            { "ports", required_argument, NULL, 'p' },
		{ "breakdown", no_argument, NULL, 'b' },        { "repeat", required_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int repeat = 1;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'a': daemon_args = optarg; break;
		case 'm': max_warps = atol(optarg); break;
		case 'I': idle = 1; break;
		case 'j': json = 1; break;
		case 'p': opt_ports = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'b': breakdown = 1; break;
		case 'R': repeat = atoi(optarg); break;
		default: usage(); return 2;
		}
	}
	if (iters < 100 || repeat < 1) {
		usage();
		return 2;
	}
	if (repeat > 1)
		return run_repeated(argc, argv, repeat);

	/* Processes first: neither the floor's server nor gpusysd may inherit
	 * a CUDA context. */
	struct cpu_server fl;
	memset(&fl, 0, sizeof(fl));
	int rc = floor_start(&fl);
	if (rc) {
		fprintf(stderr, "gpusys-bench: floor: %s\n", strerror(-rc));
		return 1;
	}
	struct cpu_server mini;
	memset(&mini, 0, sizeof(mini));
	rc = mini_server_start(&mini, &fl, 1);
	if (rc) {
		fprintf(stderr, "gpusys-bench: minimal server: %s\n", strerror(-rc));
		cpu_server_stop(&fl);
		return 1;
	}
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	bd.args = daemon_args;
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0) {
		cpu_server_stop(&fl);
		cpu_server_stop(&mini);
		return 1;
	}

	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "gpusys-bench: no usable GPU; use rtt --emulate\n");
		cpu_server_stop(&fl);
		cpu_server_stop(&mini);
		bench_daemon_stop(&bd);
		return 77;
	}
	cudaDeviceProp prop;
	BENCH_CK(cudaGetDeviceProperties(&prop, 0));
	int sms = prop.multiProcessorCount;
	long all_warps = (long)sms * (prop.maxThreadsPerMultiProcessor / 32);
	if (!max_warps || max_warps > all_warps)
		max_warps = all_warps;

	unsigned long long *dlat;
	int *derr;
	size_t nlat = (size_t)(iters > 100000 ? iters : 100000) + 1000;
	BENCH_CK(cudaMalloc(&dlat, sizeof(unsigned long long) * nlat));
	BENCH_CK(cudaMalloc(&derr, sizeof(int)));

	/* 1. The floor, one warp, then one warp per SM. */
	struct floor_slot *dslots;
	BENCH_CK(cudaHostRegister(fl.host, fl.bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
	BENCH_CK(cudaHostGetDevicePointer((void **)&dslots, fl.host, 0));
	k_floor<<<1, 32>>>(dslots, 1, 1000, 100, dlat);
	BENCH_CK(cudaDeviceSynchronize());
	k_floor<<<1, 32>>>(dslots, 1, iters, 100, dlat);
	BENCH_CK(cudaDeviceSynchronize());
	struct row *r = add_row("floor: raw mailbox, 1 warp", "memfd", 1);
	r->s = stats_dev(dlat, iters);
	{
		cudaEvent_t e0, e1;
		BENCH_CK(cudaEventCreate(&e0));
		BENCH_CK(cudaEventCreate(&e1));
		int fiters = 5000;
		BENCH_CK(cudaEventRecord(e0));
		k_floor<<<sms, 32>>>(dslots, sms, fiters, 0, dlat);
		BENCH_CK(cudaEventRecord(e1));
		BENCH_CK(cudaDeviceSynchronize());
		float ms;
		BENCH_CK(cudaEventElapsedTime(&ms, e0, e1));
		char what[64];
		snprintf(what, sizeof(what), "floor: raw mailbox, %d warps, %d CPU threads", sms, FLOOR_THREADS);
		r = add_row(what, "memfd", sms);
		r->s = stats_dev(dlat, fiters);
		r->req_s = (double)sms * fiters / (ms / 1e3);
	}
	if (breakdown) {
		static const unsigned variants[] = { 1, 8, 16, 32, 2, 2 | 64, 3, 4, 7, 7 | 64, 8 | 2 | 64 | 4 };
		static const char *names[] = { "floor + port lock",
					       "floor + port lock, relaxed (no ordering)",
					       "floor + lock's exchange alone (no release)",
					       "floor + ticket lock (add, release reduction)",
					       "floor + count, doorbell",
					       "floor + count, doorbell after the flush",
					       "floor + lock, count, doorbell",
					       "floor + warp collectives",
					       "floor + all of the above",
					       "floor + all, count and doorbell after flush",
					       "floor + all, relaxed lock, bell after flush" };
		unsigned *dlock;
		unsigned long long *dcount;
		BENCH_CK(cudaMalloc(&dlock, 64));
		BENCH_CK(cudaMemset(dlock, 0, 64));
		dcount = (unsigned long long *)(dlock + 8);
		for (unsigned v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
			k_floor_parts<<<1, 32>>>(dslots, variants[v], iters, 100, dlat, dlock, dcount);
			BENCH_CK(cudaDeviceSynchronize());
			r = add_row(names[v], "memfd", 1);
			r->s = stats_dev(dlat, iters);
		}
		BENCH_CK(cudaFree(dlock));
	}
	BENCH_CK(cudaHostUnregister(fl.host));
	cpu_server_stop(&fl);

	/* 1b. The real client against the minimal server. */
	{
		void *dbase;
		BENCH_CK(cudaHostRegister(mini.host, mini.bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
		BENCH_CK(cudaHostGetDevicePointer(&dbase, mini.host, 0));
		size_t priv = MINI_PORTS * sizeof(struct gpusys_port_lock) + 64;
		void *dpriv;
		BENCH_CK(cudaMalloc(&dpriv, priv));
		BENCH_CK(cudaMemset(dpriv, 0, priv));
		gpusys_dev_t dev;
		gpusys_dev_fill(&dev, dbase, (const struct gpusys_channel_header *)mini.host,
				(struct gpusys_port_lock *)dpriv,
				(unsigned long long *)((char *)dpriv + MINI_PORTS * sizeof(struct gpusys_port_lock)));
		BENCH_CK(cudaMemset(derr, 0, sizeof(int)));
		k_lat<<<1, 32>>>(dev, 32, iters, iters / 10 + 10, dlat, derr);
		BENCH_CK(cudaDeviceSynchronize());
		int err = 0;
		BENCH_CK(cudaMemcpy(&err, derr, sizeof(int), cudaMemcpyDeviceToHost));
		r = add_row("floor: gpusys client, minimal CPU server", "memfd", 1);
		r->s = stats_dev(dlat, iters);
		if (err)
			fprintf(stderr, "gpusys-bench: minimal server: calls failed: %d\n", err);
		/* and its throughput: one warp per SM, then 8 */
		long mshapes[] = { sms, 8L * sms };
		for (int k = 0; k < 2; k++) {
			int grid, block;
			launch_shape(mshapes[k], sms, &grid, &block);
			int it = 2000;
			cudaEvent_t e0, e1;
			BENCH_CK(cudaEventCreate(&e0));
			BENCH_CK(cudaEventCreate(&e1));
			BENCH_CK(cudaEventRecord(e0));
			k_tput<<<grid, block>>>(dev, it, dlat, derr);
			BENCH_CK(cudaEventRecord(e1));
			BENCH_CK(cudaDeviceSynchronize());
			float ms;
			BENCH_CK(cudaEventElapsedTime(&ms, e0, e1));
			char what[64];
			snprintf(what, sizeof(what), "floor: client + minimal server, %ld warps", mshapes[k]);
			r = add_row(what, "memfd", mshapes[k]);
			r->s = stats_dev(dlat, it);
			r->req_s = (double)mshapes[k] * it / (ms / 1e3);
			r->lane_s = r->req_s * 32;
		}
		BENCH_CK(cudaFree(dpriv));
		BENCH_CK(cudaHostUnregister(mini.host));
	}
	cpu_server_stop(&mini);

	if (breakdown && bd.pid > 0) {
		daemon_dir = runtime_dir;
		daemon_pid = bd.pid;
	} else if (breakdown) {
		daemon_dir = runtime_dir; /* a daemon of its own: counters, no /proc */
	}

	/* 2. One warp, each memory kind. */
	uint32_t kinds[2] = { GPUSYS_MEMORY_CUDA_VMM, GPUSYS_MEMORY_MEMFD };
	for (int k = 0; k < 2; k++) {
		gpusys_t *g = attach_kind(runtime_dir, 1u << kinds[k]);
		if (!g)
			continue;
		one_warp(g, 32, iters, dlat, derr, "gpusys NOOP, 1 warp x 32 lanes");
		one_warp(g, 1, iters, dlat, derr, "gpusys NOOP, 1 warp x 1 lane");
		gpusys_detach(g);
	}

	/* 3. Throughput, default kind (the daemon's choice), then the other. */
	long shapes[] = { 1, 8, 32, sms, 2L * sms, 4L * sms, 8L * sms, 16L * sms, 32L * sms, all_warps };
	for (int k = 0; k < 2; k++) {
		gpusys_t *g = attach_kind(runtime_dir, 1u << kinds[k]);
		if (!g)
			continue;
		for (unsigned s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			if (shapes[s] > max_warps || (s > 0 && shapes[s] == shapes[s - 1]))
				continue;
			throughput(g, shapes[s], sms, shapes[s] < sms ? 20000L * shapes[s] : 400000L, dlat, derr);
		}
		gpusys_detach(g);
	}

	/* 4. The kernel split: kernel, cudaLaunchHostFunc, next kernel. */
	{
		cudaStream_t st;
		BENCH_CK(cudaStreamCreate(&st));
		static volatile long hits;
		int n_split = 20000;
		for (int i = 0; i < 200; i++) {
			k_empty<<<1, 32, 0, st>>>(NULL);
			BENCH_CK(cudaLaunchHostFunc(st, host_fn, (void *)&hits));
		}
		BENCH_CK(cudaStreamSynchronize(st));
		uint64_t t0 = bench_now_ns();
		for (int i = 0; i < n_split; i++) {
			k_empty<<<1, 32, 0, st>>>(NULL);
			BENCH_CK(cudaLaunchHostFunc(st, host_fn, (void *)&hits));
		}
		BENCH_CK(cudaStreamSynchronize(st));
		uint64_t dt = bench_now_ns() - t0;
		r = add_row("kernel split: cudaLaunchHostFunc", "-", 1);
		r->s.p50_ns = r->s.min_ns = r->s.p99_ns = dt / (uint64_t)n_split; /* mean per call */
		r->s.count = (uint64_t)n_split;
		r->req_s = (double)n_split / (dt / 1e9);
		r->lane_s = r->req_s;
		cudaStreamDestroy(st);
	}

	/* 5. Idle: the daemon's CPU over 5 s with an idle attached CUDA client,
	 *    and the first call after 1 s of idle. */
	double idle_cpu = -1, first_us = -1;
	float spin_alone = 0, spin_dozing = 0;
	if (idle && bd.pid > 0) {
		time_spin(sms); /* warm-up */
		spin_alone = time_spin(sms);
		gpusys_t *g = attach_kind(runtime_dir, 0);
		if (g) {
			one_warp(g, 32, 1000, dlat, derr, "warm-up");
			nrows--;
			sleep(2);
			spin_dozing = time_spin(sms);
			sleep(1);
			double c0 = proc_cpu_s(bd.pid);
			uint64_t t0 = bench_now_ns();
			sleep(5);
			double c1 = proc_cpu_s(bd.pid);
			idle_cpu = (c1 - c0) / ((bench_now_ns() - t0) / 1e9) * 100.0;
			/* first call after 1 s idle: one call per kernel, timed in the kernel */
			uint64_t firsts[5];
			for (int i = 0; i < 5; i++) {
				sleep(1);
				k_lat<<<1, 32>>>(gpusys_device(g), 32, 1, 0, dlat, derr);
				BENCH_CK(cudaDeviceSynchronize());
				unsigned long long v;
				BENCH_CK(cudaMemcpy(&v, dlat, sizeof(v), cudaMemcpyDeviceToHost));
				firsts[i] = v;
			}
			struct bench_stats fs = bench_stats_of(firsts, 5);
			first_us = fs.p50_ns / 1e3;
			printf("# idle: first calls after 1 s idle (us): %.1f %.1f %.1f %.1f %.1f\n", firsts[0] / 1e3,
			       firsts[1] / 1e3, firsts[2] / 1e3, firsts[3] / 1e3, firsts[4] / 1e3);
			gpusys_detach(g);
		}
	}

	/* The table. */
	double split_ns = 0, best_p50 = 0, best_req = 0, best_lane = 0;
	for (int i = 0; i < nrows; i++) {
		if (!strcmp(rows[i].what, "kernel split: cudaLaunchHostFunc"))
			split_ns = (double)rows[i].s.p50_ns;
		if (!strncmp(rows[i].what, "gpusys NOOP, 1 warp x 32", 24) &&
		    (!best_p50 || rows[i].s.p50_ns < best_p50))
			best_p50 = (double)rows[i].s.p50_ns;
		if (rows[i].req_s > best_req && strncmp(rows[i].what, "floor", 5) && strncmp(rows[i].what, "kernel", 6)) {
			best_req = rows[i].req_s;
			best_lane = rows[i].lane_s;
		}
	}
	if (json) {
		printf("{\"mode\":\"gpu\",\"device\":\"%s\",\"sms\":%d,\"rows\":[", prop.name, sms);
		for (int i = 0; i < nrows; i++)
			printf("%s{\"what\":\"%s\",\"kind\":\"%s\",\"warps\":%ld,\"p50_ns\":%llu,\"p99_ns\":%llu,"
			       "\"min_ns\":%llu,\"requests_per_s\":%.0f,\"lane_calls_per_s\":%.0f}",
			       i ? "," : "", rows[i].what, rows[i].kind, rows[i].warps,
			       (unsigned long long)rows[i].s.p50_ns, (unsigned long long)rows[i].s.p99_ns,
			       (unsigned long long)rows[i].s.min_ns, rows[i].req_s, rows[i].lane_s);
		printf("],\"split_over_gpusys_p50\":%.2f,\"idle_cpu_percent\":%.3f,\"first_call_after_idle_us\":%.1f}\n",
		       best_p50 ? split_ns / best_p50 : 0, idle_cpu, first_us);
	} else {
		printf("gpusys-bench rtt: %s, %d SMs, %ld resident warps; NOOP round trips through gpusysd (%u ports)\n",
		       prop.name, sms, all_warps, used_ports);
		printf("%-46s %-6s %9s %9s %9s %13s %14s\n", "", "memory", "p50 us", "p99 us", "min us",
		       "warp req/s", "lane calls/s");
		for (int i = 0; i < nrows; i++) {
			struct row *x = &rows[i];
			char req[32] = "-", lane[32] = "-";
			if (x->req_s)
				snprintf(req, sizeof(req), "%.2f M", x->req_s / 1e6);
			if (x->lane_s)
				snprintf(lane, sizeof(lane), "%.1f M", x->lane_s / 1e6);
			printf("%-46s %-6s %9.2f %9.2f %9.2f %13s %14s\n", x->what, x->kind, x->s.p50_ns / 1e3,
			       x->s.p99_ns / 1e3, x->s.min_ns / 1e3, req, lane);
		}
		printf("(kernel split row: mean per host call; throughput rows: p50/p99/min of warp 0's calls)\n");
		int any = 0;
		for (int i = 0; i < nrows; i++) {
			if (!rows[i].has_daemon)
				continue;
			if (!any++) {
				printf("\n");
				bench_pollers_header();
			}
			bench_pollers_row(rows[i].what, rows[i].kind, &rows[i].daemon);
		}
		if (any)
			printf("(gpusysd's pollers over each row (gpusysctl pollers): req/pass: steps served per scan pass;\n"
			       " empty%%: passes that found nothing; ports/req: client words read per step served;\n"
			       " coll/req: found while another poller held it; held/req: found while a call held it;\n"
			       " scan/serve ns per request and ns per pass: from the sampled passes, answer and count:\n"
			       " the parts of serve spent writing the answer and counting it; busy%%: serving's\n"
			       " share of the pollers' wall time, spin%%: passes' share (the rest: between passes, parked,\n"
			       " dozing); max/avg: the busiest poller's steps over the mean; preempt: involuntary\n"
			       " context switches of the poller threads; poller CPUs: where each last ran)\n");
		printf("best one-warp p50 %.2f us; kernel split %.2f us = %.1fx slower; peak %.2f M warp req/s, %.0f M lane calls/s\n",
		       best_p50 / 1e3, split_ns / 1e3, best_p50 ? split_ns / best_p50 : 0, best_req / 1e6,
		       best_lane / 1e6);
		if (idle_cpu >= 0)
			printf("idle: gpusysd CPU %.2f%% of a core over 5 s, one idle CUDA client; "
			       "first call after 1 s idle p50 %.1f us; 20 compute kernels %.2f ms alone, %.2f ms "
			       "with the daemon dozing\n",
			       idle_cpu, first_us, spin_alone, spin_dozing);
	}
	cudaFree(dlat);
	cudaFree(derr);
	bench_daemon_stop(&bd);
	return 0;
}
