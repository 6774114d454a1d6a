/* SPDX-License-Identifier: MIT */
/*
 * How fast can the GPU tell a host thread that a word in pinned host memory
 * changed? In one process, one context: a stream waits (cuStreamWaitValue64,
 * AND) on a host word, then either a host function runs (what gpusysd's
 * watch uses) or a blocking-sync event is recorded that a host thread waits
 * for. The CPU stores the word; we time until the host side runs. With and
 * without a kernel of the same context running on another stream.
 *
 *   nvcc -O2 -arch=sm_90 bench/wake_paths.cu -o wake_paths -lcuda
 */
#include <pthread.h>
#include <atomic>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

#include "bench.h" /* bench_now_s */

#define CK(x)                                                                          \
	do {                                                                           \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = 0;                                            \
			cuGetErrorName(r_, &s_);                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static std::atomic<double> cb_time;
static void CUDA_CB on_word(void *arg)
{
	(void)arg;
	cb_time.store(bench_now_s());
}

static CUevent ev;
static CUcontext ctx;
static std::atomic<int> ev_go;
static void *ev_thread(void *arg)
{
	(void)arg;
	cuCtxSetCurrent(ctx);
	for (;;) {
		while (!ev_go.load())
			usleep(100);
		ev_go.store(0);
		if (cuEventSynchronize(ev) != CUDA_SUCCESS)
			return NULL;
		cb_time.store(bench_now_s());
	}
}

static __global__ void k_sleep(unsigned long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		__nanosleep(100000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(void)
{
	CUdevice dev;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	volatile uint64_t *word;
	CK(cuMemHostAlloc((void **)&word, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	CUdeviceptr dword;
	CK(cuMemHostGetDevicePointer(&dword, (void *)word, 0));
	CUstream s, ks;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuStreamCreate(&ks, CU_STREAM_NON_BLOCKING));
	CK(cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
	pthread_t t;
	pthread_create(&t, NULL, ev_thread, NULL);

	for (int kernel = 0; kernel < 2; kernel++) {
		if (kernel)
			k_sleep<<<1, 1, 0, (cudaStream_t)ks>>>(4000000000ull);
		for (int mode = 0; mode < 2; mode++) {
			enum { N = 9 };
			double lat[N];
			for (int i = 0; i < N; i++) {
				*word = 0;
				cb_time.store(0.0);
				CK(cuStreamWaitValue64(s, dword, 1, CU_STREAM_WAIT_VALUE_AND));
				if (mode == 0) {
					CK(cuLaunchHostFunc(s, on_word, NULL));
				} else {
					CK(cuEventRecord(ev, s));
					ev_go.store(1);
				}
				usleep(50000);
				double a = bench_now_s();
				*word = 1;
				__atomic_thread_fence(__ATOMIC_SEQ_CST);
				while (cb_time.load() == 0.0 && bench_now_s() - a < 2)
					;
				lat[i] = (cb_time.load() - a) * 1e6;
				CK(cuStreamSynchronize(s));
			}
			qsort(lat, N, sizeof(lat[0]), cmp_d);
			printf("%s, %s: host store -> host side runs: p50 %.1f us, min %.1f, max %.1f\n",
			       kernel ? "kernel running (same context)" : "GPU idle",
			       mode == 0 ? "cuLaunchHostFunc" : "blocking-sync event + thread", lat[N / 2], lat[0],
			       lat[N - 1]);
		}
		CK(cuStreamSynchronize(ks));
	}
	return 0;
}
