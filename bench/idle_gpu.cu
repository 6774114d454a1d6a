/* SPDX-License-Identifier: MIT */
/*
 * Idle cost and wake-up with a real CUDA client (bench/RESULTS.md, "Idle
 * cost and wake-up"). Starts gpusysd (argv[1]) on a private runtime
 * directory, attaches to GPU 0 and measures:
 *   1. the daemon's CPU time (every thread, schedstat) over 5 s with the
 *      client attached and no kernel running;
 *   2. a kernel that idles 1 s (__nanosleep on %globaltimer) then calls
 *      gpusys_noop, ROUNDS times: each call timed on the GPU with
 *      %globaltimer; and the daemon's CPU while that kernel runs;
 *   3. a compute-bound kernel's duration before the daemon has a context on
 *      the GPU and again while it watches the client's doorbell (the
 *      watch's cost to a kernel that makes no calls).
 * Run it with GPUSYSD_GPU_WATCH=0 in the environment to measure the daemon
 * on timed naps instead.
 *
 *   nvcc -O2 -arch=sm_90 -I. -Iinclude bench/idle_gpu.cu -o idle_gpu \
 *        -LBUILD/libclient -lgpusys -Xlinker -rpath=BUILD/libclient
 *   ./idle_gpu BUILD/daemon/gpusysd
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"
#include "gpusys/wire.h"
#include "gpusys/device.cuh"

#define ROUNDS 5

#define CK(x)                                                                                   \
	do {                                                                                    \
		cudaError_t e_ = (x);                                                           \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t cpu_ns(pid_t pid)
{
	char path[64];
	uint64_t sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char p[320];
		unsigned long long run = 0;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(p, "r");
		if (f) {
			if (fscanf(f, "%llu", &run) == 1)
				sum += run;
			fclose(f);
		}
	}
	closedir(d);
	return sum;
}

static int threads_of(pid_t pid)
{
	char path[64];
	int n = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
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

/* One thread: idle idle_ns, then one NOOP, timed; ROUNDS times. Then one
 * more NOOP right after the last (the daemon busy) for reference. */
static __global__ void k_idle_then_call(gpusys_dev_t dev, uint64_t idle_ns, uint64_t *lat, int *err)
{
	for (int r = 0; r <= ROUNDS; r++) {
		if (r < ROUNDS) {
			uint64_t until = gtimer() + idle_ns;
			while (gtimer() < until)
				__nanosleep(100000);
		}
		uint64_t t0 = gtimer();
		if (gpusys_noop(dev))
			atomicAdd(err, 1);
		lat[r] = gtimer() - t0;
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
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventRecord(a));
	k_compute<<<blocks, 256>>>(out, iters);
	CK(cudaEventRecord(b));
	CK(cudaEventSynchronize(b));
	CK(cudaEventElapsedTime(&ms, a, b));
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s GPUSYSD\n", argv[0]);
		return 2;
	}
	const char *watch = getenv("GPUSYSD_GPU_WATCH");
	printf("mode: %s\n", watch && !strcmp(watch, "0") ? "timed naps (GPUSYSD_GPU_WATCH=0)" : "GPU doorbell watch");

	int sms = 0;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	float *out;
	CK(cudaMalloc(&out, (size_t)sms * 4 * 256 * sizeof(float)));
	/* 3a. Compute before the daemon has anything on the GPU. */
	compute_ms(out, 1 << 16, sms * 4); /* warm-up */
	int iters = 1 << 27; /* about 0.6 s on an H100 */
	float base_ms = compute_ms(out, iters, sms * 4);

	char dir[] = "/tmp/gpusys-idle.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	setenv(GPUSYS_RUNTIME_DIR_ENV, dir, 1);
	pid_t d = fork();
	if (d == 0) {
		const char *log = getenv("IDLE_DAEMON_LOG"); /* the daemon's output, or ours */
		int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(argv[1], argv[1], "--foreground", "--runtime-dir", dir, "--config", "/dev/null", (char *)NULL);
		_exit(127);
	}
	char sock[256];
	snprintf(sock, sizeof(sock), "%s/%s", dir, GPUSYS_SOCKET_NAME);
	for (int i = 0; i < 500; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			break;
		usleep(10000);
	}

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 1024;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "attach: %s\n", gpusys_strerror(rc));
		kill(d, SIGTERM);
		return 1;
	}
	printf("attached: %s channel, %u ports; daemon threads %d\n",
	       gpusys_memory_kind_of(g) == GPUSYS_MEMORY_CUDA_VMM ? "CUDA VMM" : "memfd", gpusys_num_ports(g),
	       threads_of(d));
	gpusys_dev_t dev = gpusys_device(g);
	int *err;
	uint64_t *lat;
	CK(cudaMalloc(&err, sizeof(int)));
	CK(cudaMemset(err, 0, sizeof(int)));
	uint64_t hlat[ROUNDS + 1];
	CK(cudaMalloc(&lat, (ROUNDS + 1) * sizeof(uint64_t)));
	k_warm<<<1, 32>>>(dev, 1000, err);
	CK(cudaDeviceSynchronize());
	/* As a program does after its kernels: it also tells the daemon none
	 * is in flight any more (gpusys.h), so it may sleep deeply. */
	rc = gpusys_synchronize(g, NULL, 10000);
	if (rc) {
		fprintf(stderr, "synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}

	/* 1. Attached, no kernel. */
	usleep(500000);
	uint64_t c0 = cpu_ns(d);
	double t0 = now_s();
	sleep(5);
	uint64_t c1 = cpu_ns(d);
	double t1 = now_s();
	double idle_pct = 100.0 * (c1 - c0) / 1e9 / (t1 - t0);
	printf("1. attached, no kernel: daemon CPU %.3f%% of a core over %.1f s (threads %d)\n", idle_pct, t1 - t0,
	       threads_of(d));

	/* 2. A kernel that idles 1 s between calls. */
	c0 = cpu_ns(d);
	t0 = now_s();
	/* A handle asked for at launch, as gpusys.h says: the daemon naps
	 * while the kernel may call. */
	k_idle_then_call<<<1, 1>>>(gpusys_device(g), 1000000000ull, lat, err);
	CK(cudaDeviceSynchronize());
	rc = gpusys_synchronize(g, NULL, 10000);
	if (rc) {
		fprintf(stderr, "synchronize: %s\n", gpusys_strerror(rc));
		return 1;
	}
	c1 = cpu_ns(d);
	t1 = now_s();
	int h_err = 0;
	CK(cudaMemcpy(&h_err, err, sizeof(int), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(hlat, lat, sizeof(hlat), cudaMemcpyDeviceToHost));
	uint64_t s[ROUNDS];
	memcpy(s, hlat, sizeof(s));
	qsort(s, ROUNDS, sizeof(s[0]), cmp_u64);
	printf("2. kernel idle 1 s then NOOP, %d rounds: first-call latency p50 %.1f us, min %.1f, max %.1f "
	       "(each: ",
	       ROUNDS, s[ROUNDS / 2] / 1e3, s[0] / 1e3, s[ROUNDS - 1] / 1e3);
	for (int i = 0; i < ROUNDS; i++)
		printf("%.1f ", hlat[i] / 1e3);
	printf("us); a NOOP right after: %.1f us; daemon CPU %.3f%% over %.1f s; errors %d\n", hlat[ROUNDS] / 1e3,
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
			CK(cudaMemset(err, 0, sizeof(int)));
			k_idle_then_call<<<1, 1>>>(dev, 400000000ull, lat, err); /* 5 x 0.4 s, then calls */
			usleep(100000);
		}
		for (int i = 0; i < 5; i++) {
			double tw = now_s();
			while (!__atomic_load_n(&hh->dozing, __ATOMIC_ACQUIRE) && now_s() - tw < 2)
				usleep(1000);
			usleep(30000);
			uint64_t cur = __atomic_load_n(&hh->doorbell, __ATOMIC_RELAXED);
			double a = now_s();
			__atomic_store_n(&hh->doorbell, cur + 1, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			while (__atomic_load_n(&hh->dozing, __ATOMIC_ACQUIRE) && now_s() - a < 2)
				;
			w[i] = (uint64_t)((now_s() - a) * 1e9);
		}
		if (with_kernel)
			CK(cudaDeviceSynchronize());
		qsort(w, 5, sizeof(w[0]), cmp_u64);
		printf("4. CPU store to the doorbell -> daemon awake (GPU watch only)%s: p50 %.1f us, min %.1f, max "
		       "%.1f\n",
		       with_kernel ? ", a kernel of ours running" : ", GPU idle", w[2] / 1e3, w[0] / 1e3, w[4] / 1e3);
	}

	/* Stop: detach first (teardown of a pending watch), then the daemon. */
	double td = now_s();
	gpusys_detach(g);
	usleep(100000);
	kill(d, SIGTERM);
	int st = 0;
	waitpid(d, &st, 0);
	printf("detach + stop: %.0f ms, daemon exit status %d\n", (now_s() - td) * 1e3,
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	char p[300];
	snprintf(p, sizeof(p), "%s/%s", dir, GPUSYS_SOCKET_NAME);
	unlink(p);
	snprintf(p, sizeof(p), "%s/%s", dir, GPUSYS_CONTROL_NAME);
	unlink(p);
	rmdir(dir);
	return h_err ? 1 : 0;
}
