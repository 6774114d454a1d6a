/* SPDX-License-Identifier: MIT */
/*
 * dma_submit: what one copy by the copy engine costs the thread that asks
 * for it, the way libgpusys's DMA agent asks (libclient/dma/): many small
 * copies between pinned host memory and device memory on a stream of its
 * own, then one cuStreamWriteValue32. A probe for issue 27's "10 GB/s from
 * all SMs", where 132 warps' 32 x 64 KiB echoes went at 2.6-3.4 GB/s through
 * the agent (bench/RESULTS.md "Eighth session"; a 64 KiB packet is about one
 * lane's share, so 33 copies a call each way). It showed what batches and a
 * stream a way are worth; the bound at 132 warps turned out to be elsewhere
 * (one poller copied every window: "Ninth session").
 *
 * Rows, for copies host to device, device to host, and both alternating
 * (an echo's): one thread with cuMemcpyAsync a copy, with and without the
 * agent's two cuPointerGetAttribute checks a copy; cuMemcpyBatchAsync (CUDA
 * 12.8) in batches of 32 and 256; one thread over 2, 4 and 8 streams, the
 * first waiting for the others before its count; 2, 4 and 8 threads with a
 * stream each. Each row: the submitting thread's time a copy, the time a
 * copy until the last stream is done, and GB/s; the bytes are checked after
 * every row.
 *
 *   gcc -O2 -std=gnu11 -I/usr/local/cuda/include -o dma_submit bench/dma_submit.c -lcuda -lpthread
 *   ./dma_submit [bytes a copy (2048)] [copies (8192)]
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                              \
	do {                                                                                               \
		CUresult r_ = (x);                                                                         \
		if (r_ != CUDA_SUCCESS) {                                                                  \
			const char *s_ = "?";                                                              \
			cuGetErrorName(r_, &s_);                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                  \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

enum how { ONE_BY_ONE, CHECKED, BATCH };

#define MAX_STREAMS 8

struct job {
	CUcontext ctx;
	CUstream stream[MAX_STREAMS];
	int streams;                /* copies go round robin over them */
	CUevent ev[MAX_STREAMS];
	CUdeviceptr done; /* a word of device memory the stream writes at the end */
	uint8_t *host;
	CUdeviceptr dev;
	size_t size, n;
	int dir; /* 1: host to device, 0: device to host, 2: both, alternating */
	enum how how;
	size_t batch;
	double submit_ns;
	pthread_barrier_t *start;
};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void submit(struct job *j)
{
	size_t b = j->batch ? j->batch : 1;
	CUdeviceptr *dsts = calloc(b, sizeof(*dsts)), *srcs = calloc(b, sizeof(*srcs));
	size_t *sizes = calloc(b, sizeof(*sizes));
	CUmemcpyAttributes attr;
	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	size_t attr_idx = 0;
	double t0 = now_ns();
	for (size_t i = 0; i < j->n;) {
		size_t k = j->n - i < b ? j->n - i : b;
		for (size_t q = 0; q < k; q++) {
			CUdeviceptr h = (CUdeviceptr)(uintptr_t)(j->host + (i + q) * j->size);
			CUdeviceptr d = j->dev + (i + q) * j->size;
			int to_device = j->dir == 2 ? (int)((i + q) % 2 == 0) : j->dir;
			dsts[q] = to_device ? d : h;
			srcs[q] = to_device ? h : d;
			sizes[q] = j->size;
		}
		if (j->how == BATCH) {
			CK(cuMemcpyBatchAsync(dsts, srcs, sizes, k, &attr, &attr_idx, 1,
					      j->stream[(i / b) % (size_t)j->streams]));
		} else {
			for (size_t q = 0; q < k; q++) {
				if (j->how == CHECKED) {
					unsigned int type = 0;
					CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, srcs[q]));
					CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
								 srcs[q] + j->size - 1));
				}
				CK(cuMemcpyAsync(dsts[q], srcs[q], sizes[q], j->stream[(i + q) % (size_t)j->streams]));
			}
		}
		i += k;
	}
	/* as the agent would: the first stream waits for the others, then
	 * writes the count */
	for (int s = 1; s < j->streams; s++) {
		CK(cuEventRecord(j->ev[s], j->stream[s]));
		CK(cuStreamWaitEvent(j->stream[0], j->ev[s], 0));
	}
	CK(cuStreamWriteValue32(j->stream[0], j->done, 1, 0));
	j->submit_ns = now_ns() - t0;
	free(dsts);
	free(srcs);
	free(sizes);
}

static void *thread_main(void *arg)
{
	struct job *j = arg;
	CK(cuCtxSetCurrent(j->ctx));
	pthread_barrier_wait(j->start);
	submit(j);
	CK(cuStreamSynchronize(j->stream[0]));
	return NULL;
}

/* One row: threads threads, each with copies/threads copies of size bytes. */
static void row(CUcontext ctx, uint8_t *host, CUdeviceptr dev, CUdeviceptr done, size_t size, size_t copies,
		int threads, int streams, enum how how, size_t batch, int dir)
{
	static unsigned round;
	round++;
	size_t bytes = size * copies;
	/* a pattern of the round on the side copied from, the other side cleared */
	uint8_t *want = malloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		want[i] = (uint8_t)(i * 131u + round * 7u + (i >> 12));
	/* the side each copy reads holds the pattern, the side it writes zeros */
	uint8_t *h0 = calloc(1, bytes), *d0 = calloc(1, bytes);
	for (size_t i = 0; i < copies; i++) {
		int to_device = dir == 2 ? (int)(i % 2 == 0) : dir;
		memcpy((to_device ? h0 : d0) + i * size, want + i * size, size);
	}
	memcpy(host, h0, bytes);
	CK(cuMemcpyHtoD(dev, d0, bytes));
	free(h0);
	free(d0);
	CK(cuCtxSynchronize());

	struct job jobs[8];
	pthread_t tid[8];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	size_t per = copies / (size_t)threads;
	for (int t = 0; t < threads; t++) {
		jobs[t] = (struct job){ .ctx = ctx, .done = done + 4 * (CUdeviceptr)t, .host = host + t * per * size,
					.dev = dev + t * per * size, .size = size, .n = per, .dir = dir,
					.how = how, .batch = batch, .start = &start, .streams = streams };
		for (int s = 0; s < streams; s++) {
			CK(cuStreamCreate(&jobs[t].stream[s], CU_STREAM_NON_BLOCKING));
			CK(cuEventCreate(&jobs[t].ev[s], CU_EVENT_DISABLE_TIMING));
		}
		pthread_create(&tid[t], NULL, thread_main, &jobs[t]);
	}
	pthread_barrier_wait(&start);
	double t0 = now_ns();
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	double wall = now_ns() - t0, submit_max = 0;
	for (int t = 0; t < threads; t++) {
		if (jobs[t].submit_ns > submit_max)
			submit_max = jobs[t].submit_ns;
		for (int s = 0; s < streams; s++) {
			CK(cuStreamDestroy(jobs[t].stream[s]));
			CK(cuEventDestroy(jobs[t].ev[s]));
		}
	}
	pthread_barrier_destroy(&start);

	/* both sides now hold the pattern */
	uint8_t *got = malloc(bytes);
	size_t moved = per * (size_t)threads * size;
	CK(cuMemcpyDtoH(got, dev, moved));
	int ok = !memcmp(got, want, moved) && !memcmp(host, want, moved);
	char name[64];
	snprintf(name, sizeof(name), "%s%s", how == BATCH ? "batch " : how == CHECKED ? "checked" : "one by one",
		 how == BATCH ? (batch == 32 ? "32" : "256") : "");
	printf("| %zu | %s | %s | %d | %d | %.2f | %.2f | %.2f | %s |\n", size, dir == 2 ? "both" : dir ? "H2D" : "D2H",
	       name, threads, streams,
	       submit_max / 1e3 / (double)per, wall / 1e3 / (double)(per * (size_t)threads),
	       (double)moved / wall, ok ? "ok" : "WRONG");
	fflush(stdout);
	free(want);
	free(got);
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 0) : 2048;
	size_t copies = argc > 2 ? strtoul(argv[2], NULL, 0) : 8192;
	CUdevice d;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&d, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, d));
	CK(cuCtxSetCurrent(ctx));
	void *host;
	CUdeviceptr dev, done;
	CK(cuMemHostAlloc(&host, size * copies, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	CK(cuMemAlloc(&dev, size * copies));
	CK(cuMemAlloc(&done, 64));
	printf("dma_submit: %zu copies of %zu bytes, pinned host <-> device\n\n", copies, size);
	printf("| bytes | dir | how | threads | streams | submit us a copy | us a copy until done | GB/s | bytes |\n");
	printf("|---|---|---|---|---|---|---|---|---|\n");
	for (int dir = 2; dir >= 0; dir--) {
		row(ctx, host, dev, done, size, copies, 1, 1, ONE_BY_ONE, 0, dir);
		row(ctx, host, dev, done, size, copies, 1, 1, CHECKED, 0, dir);
		row(ctx, host, dev, done, size, copies, 1, 1, BATCH, 32, dir);
		row(ctx, host, dev, done, size, copies, 1, 1, BATCH, 256, dir);
		for (int s = 2; s <= 8; s *= 2) {
			row(ctx, host, dev, done, size, copies, 1, s, ONE_BY_ONE, 0, dir);
			row(ctx, host, dev, done, size, copies, 1, s, BATCH, 32, dir);
		}
		for (int t = 2; t <= 8; t *= 2)
			row(ctx, host, dev, done, size, copies, t, 1, ONE_BY_ONE, 0, dir);
	}
	return 0;
}
