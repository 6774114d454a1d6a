/* SPDX-License-Identifier: MIT */
/*
 * Idle cost and wake-up with a real CUDA client (bench/RESULTS.md, "Idle
 * cost and wake-up"). Starts gpusysd (argv[1]) on a private runtime
 * directory, attaches to GPU 0 and measures:
 *   1. the daemon's CPU time (every thread, schedstat) over IDLE_SECONDS
 *      (default 5) with the client attached and no kernel running;
 *   2. a kernel that idles 1 s (__nanosleep on %globaltimer) then calls
 *      gpusys_noop, IDLE_ROUNDS times (default 5, at most 64): each call
 *      timed on the GPU with %globaltimer; and the daemon's CPU while that
 *      kernel runs. The same warp calls every round, or with IDLE_SPREAD=1
 *      a new one each round (one block a round);
 *   3. a compute-bound kernel's duration before the daemon has a context on
 *      the GPU and again while it watches the client's doorbell (the
 *      watch's cost to a kernel that makes no calls).
 * Run it with GPUSYSD_GPU_WATCH=0 in the environment to measure the daemon
 * on timed naps instead, and with IDLE_ALL_GPUS=1 to keep a quiet client
 * attached on every other GPU through it (each GPU's pollers and watch).
 *
 *   nvcc -O2 -arch=sm_90 -I. -Iinclude bench/idle_gpu.cu bench/spawn.c bench/stats.c \
 *        -o idle_gpu -LBUILD/libclient -lgpusys -Xlinker -rpath=BUILD/libclient
 *   ./idle_gpu BUILD/daemon/gpusysd
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "common/proc_tasks.h"
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "gpusys/device.cuh"

#define MAX_ROUNDS 64

/* The daemon's threads and their CPU time (schedstat, ns). */
static struct proc_tasks tasks_of(pid_t pid)
{
	struct proc_tasks t;
	proc_tasks_of(pid, &t);
	return t;
}

static __device__ uint64_t gtimer(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __global__ void k_warm(gpusys_dev_t dev, int n, int *err)
{
	for (int i = 0; i < n; i++)
		if (gpusys_noop(dev))
			atomicAdd(err, 1);
}

/* One thread a block: idle idle_ns, then one NOOP, timed; rounds times.
 * Then one more NOOP right after the last (the daemon busy) for reference.
 * With one block every round's call is the same warp's; with a block a
 * round (IDLE_SPREAD=1), round r is block r's, a warp (and port) that has
 * not called before: the daemon cannot know it from its recent work. */
static __global__ void k_idle_then_call(gpusys_dev_t dev, uint64_t idle_ns, int rounds, uint64_t *lat, int *err)
{
	uint64_t start = gtimer();
	for (int r = 0; r <= rounds; r++) {
		if (r < rounds) {
			uint64_t until = start + (uint64_t)(r + 1) * idle_ns;
			while (gtimer() < until)
				__nanosleep(100000);
		}
		int mine = gridDim.x == 1 || (int)blockIdx.x == (r < rounds ? r : rounds - 1);
		if (!mine)
			continue;
		uint64_t t0 = gtimer();
		if (gpusys_noop(dev))
			atomicAdd(err, 1);
		lat[r] = gtimer() - t0;
		if (r < rounds)
			start = gtimer() - (uint64_t)(r + 1) * idle_ns; /* quiet idle_ns after this call */
	}
}

static __global__ void k_compute(float *out, int iters)
{
	float a = threadIdx.x * 1e-3f, b = 1.0001f;
	for (int i = 0; i < iters; i++)
		a = fmaf(a, b, 1e-7f);
	out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

static float compute_ms(float *out, int iters, int blocks)
{
	cudaEvent_t a, b;
	float ms = 0;
	BENCH_CK(cudaEventCreate(&a));
	BENCH_CK(cudaEventCreate(&b));
	BENCH_CK(cudaEventRecord(a));
	k_compute<<<blocks, 256>>>(out, iters);
	BENCH_CK(cudaEventRecord(b));
	BENCH_CK(cudaEventSynchronize(b));
	BENCH_CK(cudaEventElapsedTime(&ms, a, b));
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s GPUSYSD\n", argv[0]);
		return 2;
	}
	/* Line by line into a file too: a run stopped by its time limit keeps
	 * the measurements it finished. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *watch = getenv("GPUSYSD_GPU_WATCH");
	printf("mode: %s\n", watch && !strcmp(watch, "0") ? "timed naps (GPUSYSD_GPU_WATCH=0)" : "GPU doorbell watch");

	int sms = 0;
	BENCH_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	float *out;
	BENCH_CK(cudaMalloc(&out, (size_t)sms * 4 * 256 * sizeof(float)));
	/* 3a. Compute before the daemon has anything on the GPU. */
	compute_ms(out, 1 << 16, sms * 4); /* warm-up */
	int iters = 1 << 27; /* about 0.6 s on an H100 */
	float base_ms = compute_ms(out, iters, sms * 4);

	/* The daemon on its built-in settings (an empty config file). */
	struct bench_daemon bd;
	const char *dir = NULL;
	memset(&bd, 0, sizeof(bd));
	bd.config = "";
	bd.log = getenv("IDLE_DAEMON_LOG"); /* the daemon's output, or ours */
	if (bench_daemon_start(&bd, argv[1], &dir) < 0)
		return 1;
	pid_t d = bd.pid;

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.runtime_dir = dir;
	o.cuda_device = 0;
	/* IDLE_PORTS: ports to ask for (earlier figures: 1024); unset, the
	 * library's default, what programs get. */
	const char *ports = getenv("IDLE_PORTS");
	o.num_ports = ports ? (uint32_t)strtoul(ports, NULL, 0) : 0;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "attach: %s\n", gpusys_last_error());
		bench_daemon_stop(&bd);
		return 1;
	}
	/* IDLE_ALL_GPUS=1: a client on every other GPU too, attached and
	 * quiet through the measurements (issue 34: idle cost and wake-up
	 * with several GPUs attached, each with its pollers and watch). */
	enum { MAX_OTHERS = 16 };
	gpusys_t *others[MAX_OTHERS];
	int nothers = 0, ngpus = 1;
	const char *all = getenv("IDLE_ALL_GPUS");
	if (all && atoi(all)) {
		BENCH_CK(cudaGetDeviceCount(&ngpus));
		for (int i = 1; i < ngpus && nothers < MAX_OTHERS; i++) {
			struct gpusys_options oo = o;
			oo.cuda_device = i;
			BENCH_CK(cudaSetDevice(i));
			if (gpusys_attach(&oo, &others[nothers])) {
				fprintf(stderr, "attach to GPU %d: %s\n", i, gpusys_last_error());
				return 1;
			}
			int *oerr;
			BENCH_CK(cudaMalloc(&oerr, sizeof(int)));
			k_warm<<<1, 32>>>(gpusys_device(others[nothers]), 100, oerr);
			BENCH_CK(cudaDeviceSynchronize());
			if (gpusys_synchronize(others[nothers], NULL, 10000)) {
				fprintf(stderr, "GPU %d: synchronize failed\n", i);
				return 1;
			}
			nothers++;
		}
		BENCH_CK(cudaSetDevice(0));
	}
	printf("attached: %s channel, %u ports; %d other GPU%s attached too; daemon threads %d\n",
	       gpusys_memory_kind(g) == GPUSYS_MEMORY_CUDA_VMM ? "CUDA VMM" : "memfd", gpusys_num_ports(g), nothers,
	       nothers == 1 ? "" : "s", tasks_of(d).threads);
	gpusys_dev_t dev = gpusys_device(g);
	int *err;
	uint64_t *lat;
	BENCH_CK(cudaMalloc(&err, sizeof(int)));
	BENCH_CK(cudaMemset(err, 0, sizeof(int)));
	/* IDLE_ROUNDS: first calls to time (5 unless told; each costs 1 s). */
	const char *rounds_env = getenv("IDLE_ROUNDS");
	int rounds = rounds_env ? atoi(rounds_env) : 5;
	if (rounds < 1 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "IDLE_ROUNDS must be 1 to %d\n", MAX_ROUNDS);
		return 2;
	}
	uint64_t hlat[MAX_ROUNDS + 1];
	BENCH_CK(cudaMalloc(&lat, (MAX_ROUNDS + 1) * sizeof(uint64_t)));
	k_warm<<<1, 32>>>(dev, 1000, err);
	BENCH_CK(cudaDeviceSynchronize());
	/* As a program does after its kernels: it also tells the daemon none
	 * is in flight any more (gpusys.h), so it may sleep deeply. */
	rc = gpusys_synchronize(g, NULL, 10000);
	if (rc) {
		fprintf(stderr, "synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}

	/* 1. Attached, no kernel. IDLE_SECONDS: how long (5 unless told; a
	 * minute sees more of the daemon's slow timers, issue 34's figure);
	 * and which of the daemon's threads ran. */
	const char *secs_env = getenv("IDLE_SECONDS");
	int idle_s = secs_env ? atoi(secs_env) : 5;
	if (idle_s < 1 || idle_s > 600) {
		fprintf(stderr, "IDLE_SECONDS must be 1 to 600\n");
		return 2;
	}
	usleep(500000);
	static struct proc_tasks before, after;
	proc_tasks_of(d, &before);
	double t0 = bench_now_s();
	sleep((unsigned)idle_s);
	proc_tasks_of(d, &after);
	double t1 = bench_now_s();
	uint64_t c0 = before.cpu_ns, c1 = after.cpu_ns;
	double idle_pct = 100.0 * (c1 - c0) / 1e9 / (t1 - t0);
	printf("1. attached, no kernel: daemon CPU %.3f%% of a core over %.1f s (threads %d)\n", idle_pct, t1 - t0,
	       after.threads);
	proc_tasks_print_delta(stdout, &before, &after, t1 - t0);

	/* 2. A kernel that idles 1 s between calls. */
	c0 = tasks_of(d).cpu_ns;
	t0 = bench_now_s();
	/* A handle asked for at launch, as gpusys.h says: the daemon naps
	 * while the kernel may call. */
	const char *spread = getenv("IDLE_SPREAD");
	int blocks = spread && atoi(spread) ? rounds : 1;
	k_idle_then_call<<<blocks, 1>>>(gpusys_device(g), 1000000000ull, rounds, lat, err);
	BENCH_CK(cudaDeviceSynchronize());
	rc = gpusys_synchronize(g, NULL, 10000);
	if (rc) {
		fprintf(stderr, "synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}
	c1 = tasks_of(d).cpu_ns;
	t1 = bench_now_s();
	int h_err = 0;
	BENCH_CK(cudaMemcpy(&h_err, err, sizeof(int), cudaMemcpyDeviceToHost));
	BENCH_CK(cudaMemcpy(hlat, lat, (rounds + 1) * sizeof(uint64_t), cudaMemcpyDeviceToHost));
	uint64_t s[MAX_ROUNDS];
	memcpy(s, hlat, rounds * sizeof(uint64_t));
	struct bench_stats first = bench_stats_of(s, rounds);
	printf("2. kernel idle 1 s then NOOP, %d rounds%s: first-call latency p50 %.1f us, p99 %.1f, min %.1f, max "
	       "%.1f (each: ",
	       rounds, blocks > 1 ? " (a new warp each round)" : "", first.p50_ns / 1e3, first.p99_ns / 1e3,
	       first.min_ns / 1e3, first.max_ns / 1e3);
	for (int i = 0; i < rounds; i++)
		printf("%.1f ", hlat[i] / 1e3);
	printf("us); a NOOP right after: %.1f us; daemon CPU %.3f%% over %.1f s; errors %d\n", hlat[rounds] / 1e3,
	       100.0 * (c1 - c0) / 1e9 / (t1 - t0), t1 - t0, h_err);

	/* 3b. Compute while the daemon watches (or naps). */
	usleep(200000);
	float watched_ms = compute_ms(out, iters, sms * 4);
	float watched_ms2 = compute_ms(out, iters, sms * 4);
	printf("3. compute kernel (%d blocks): %.1f ms before attach, %.1f / %.1f ms attached with the daemon "
	       "dozing (%+.2f%%)\n",
	       sms * 4, base_ms, watched_ms, watched_ms2, 100.0 * ((watched_ms + watched_ms2) / 2 - base_ms) / base_ms);

	/* 4. The watch alone: this process's CPU stores a new doorbell value
	 *    (no wake pipe written), and we time how long until the daemon
	 *    clears dozing, i.e. woke. Once with the GPU otherwise idle, once
	 *    while a kernel of ours (sleeping) runs, so the daemon's context
	 *    must share the GPU with ours. */
	struct gpusys_channel_header *hh = (struct gpusys_channel_header *)gpusys_host_channel(g);
	for (int with_kernel = 0; with_kernel < 2; with_kernel++) {
		uint64_t w[5];
		if (with_kernel) {
			BENCH_CK(cudaMemset(err, 0, sizeof(int)));
			k_idle_then_call<<<1, 1>>>(dev, 400000000ull, 5, lat, err); /* 5 x 0.4 s, then calls */
			usleep(100000);
		}
		for (int i = 0; i < 5; i++) {
			double tw = bench_now_s();
			while (!__atomic_load_n(&hh->dozing, __ATOMIC_ACQUIRE) && bench_now_s() - tw < 2)
				usleep(1000);
			usleep(30000);
			uint64_t cur = __atomic_load_n(&hh->doorbell, __ATOMIC_RELAXED);
			double a = bench_now_s();
			__atomic_store_n(&hh->doorbell, cur + 1, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			while (__atomic_load_n(&hh->dozing, __ATOMIC_ACQUIRE) && bench_now_s() - a < 2)
				;
			w[i] = (uint64_t)((bench_now_s() - a) * 1e9);
		}
		if (with_kernel)
			BENCH_CK(cudaDeviceSynchronize());
		struct bench_stats ws = bench_stats_of(w, 5);
		printf("4. CPU store to the doorbell -> daemon awake (GPU watch only)%s: p50 %.1f us, min %.1f, max "
		       "%.1f\n",
		       with_kernel ? ", a kernel of ours running" : ", GPU idle", ws.p50_ns / 1e3, ws.min_ns / 1e3,
		       ws.max_ns / 1e3);
	}

	/* Stop: detach first (teardown of a pending watch), then the daemon. */
	double td = bench_now_s();
	for (int i = 0; i < nothers; i++)
		gpusys_detach(others[i]);
	gpusys_detach(g);
	usleep(100000);
	int status = bench_daemon_stop(&bd);
	printf("detach + stop: %.0f ms, daemon exit status %d\n", (bench_now_s() - td) * 1e3, status);
	return h_err ? 1 : 0;
}
