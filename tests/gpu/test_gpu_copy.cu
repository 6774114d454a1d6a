/* SPDX-License-Identifier: MIT */
/*
 * libgpusys bulk copies through the CUDA DMA engine (include/gpusys/copy.h):
 * every path (chosen by size, the driver, staged, pinned in place) over
 * sizes around chunk boundaries with misaligned host and device sides, each
 * result checked byte for byte against an independent cudaMemcpy; a device
 * buffer too small refused with nothing moved; the asynchronous forms
 * ordered against a stream (after a slow kernel that writes the source,
 * before a kernel that checks the destination); callers on several threads;
 * an engine whose first producer is forced slow (GPUSYS_COPY_SLOW_PRODUCER_US)
 * still copies right, puts more producers to work, and is no slower than
 * cudaMemcpy from pageable memory (medians of interleaved reps).
 * No gpusysd needed. Exits 77 with the reason when no GPU can be used.
 */
#include <pthread.h>

#include "gpu_test.h"
#include "gpusys/copy.h"

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static const char *path_name(int p)
{
	static const char *names[] = { "auto", "driver", "staged", "in-place" };
	return names[p];
}

/* Host -> device -> host of n bytes at host offset hoff, device offset doff,
 * through path; the device bytes are read back with plain cudaMemcpy. */
static void round_trip(gpusys_copy_t *c, uint8_t *dev, size_t dev_bytes, uint8_t *src, uint8_t *dst, uint8_t *check,
		       size_t n, size_t hoff, size_t doff, int path, uint64_t seed)
{
	GT_CHECK(doff + n <= dev_bytes, "test bug");
	fill(src + hoff, n, seed);
	gpusys_copy_set_path(c, (enum gpusys_copy_path)path);
	int rc = gpusys_memcpy_htod(c, dev + doff, src + hoff, n);
	GT_CHECK(rc == 0, "htod %s n=%zu hoff=%zu doff=%zu: %d", path_name(path), n, hoff, doff, rc);
	GT_CUDA(cudaMemcpy(check, dev + doff, n, cudaMemcpyDeviceToHost));
	if (memcmp(check, src + hoff, n) != 0)
		gt_fail("htod %s n=%zu hoff=%zu doff=%zu: device bytes differ", path_name(path), n, hoff, doff);
	/* back, into a buffer with guards either side */
	memset(dst, 0xA5, hoff + n + 64);
	fill(check, n, seed + 1);
	GT_CUDA(cudaMemcpy(dev + doff, check, n, cudaMemcpyHostToDevice));
	rc = gpusys_memcpy_dtoh(c, dst + hoff, dev + doff, n);
	GT_CHECK(rc == 0, "dtoh %s n=%zu hoff=%zu doff=%zu: %d", path_name(path), n, hoff, doff, rc);
	if (memcmp(dst + hoff, check, n) != 0)
		gt_fail("dtoh %s n=%zu hoff=%zu doff=%zu: host bytes differ", path_name(path), n, hoff, doff);
	for (size_t i = 0; i < hoff; i++)
		GT_CHECK(dst[i] == 0xA5, "dtoh wrote before the destination");
	for (size_t i = hoff + n; i < hoff + n + 64; i++)
		GT_CHECK(dst[i] == 0xA5, "dtoh wrote past the destination");
}

static __global__ void k_fill_late(uint8_t *d, size_t n, uint8_t v, long long spin_ns)
{
	if (threadIdx.x == 0) {
		long long t0 = clock64();
		while (clock64() - t0 < spin_ns) /* about a ns a cycle: a slow producer */
			;
	}
	__syncthreads();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		d[i] = v;
}

static __global__ void k_count_mismatch(const uint8_t *d, const uint8_t *want, size_t n, unsigned long long *bad)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		if (d[i] != want[i])
			atomicAdd(bad, 1ull);
}

struct worker {
	gpusys_copy_t *c;
	int id;
	int failures;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Two producers at the start, the first holding each 4 MiB chunk 1 ms
 * longer: the engine must add producers (when the machine has cores for
 * them) and copy 256 MiB each way right, with a median rate at least 0.97x
 * cudaMemcpy's from the same pageable buffer, rep by rep interleaved. */
static void slow_producer(uint8_t *host, uint8_t *back)
{
	enum { REPS = 5 };
	const size_t n = (size_t)256 << 20;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	setenv("GPUSYS_COPY_SLOW_PRODUCER_US", "1000", 1);
	struct gpusys_copy_options o = {};
	o.producers = 2;
	o.max_producers = ncpu > 3 ? (unsigned)ncpu - 1 : 2;
	o.path = GPUSYS_COPY_STAGED;
	o.flags = GPUSYS_COPY_NO_CALIBRATION;
	gpusys_copy_t *c = NULL;
	int rc = gpusys_copy_open(&o, &c);
	unsetenv("GPUSYS_COPY_SLOW_PRODUCER_US");
	GT_CHECK(rc == 0, "slow producer: gpusys_copy_open: %d", rc);
	uint8_t *dev;
	GT_CUDA(cudaMalloc(&dev, n));
	fill(host, n, 77);
	for (int htod = 1; htod >= 0; htod--) {
		double tc[REPS], tg[REPS];
		for (int r = 0; r < REPS; r++) {
			double t0 = gt_now();
			GT_CUDA(htod ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)
				     : cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
			tc[r] = (double)n / (gt_now() - t0) / 1e9;
			if (!htod)
				memset(back, 0, n);
			t0 = gt_now();
			rc = htod ? gpusys_memcpy_htod(c, dev, host, n) : gpusys_memcpy_dtoh(c, back, dev, n);
			tg[r] = (double)n / (gt_now() - t0) / 1e9;
			GT_CHECK(rc == 0, "slow producer %s rep %d: %d", htod ? "htod" : "dtoh", r, rc);
			if (htod) {
				GT_CUDA(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
				GT_CHECK(memcmp(back, host, n) == 0, "slow producer htod rep %d: device bytes differ", r);
			} else {
				GT_CHECK(memcmp(back, host, n) == 0, "slow producer dtoh rep %d: host bytes differ", r);
			}
		}
		qsort(tc, REPS, sizeof(double), cmp_double);
		qsort(tg, REPS, sizeof(double), cmp_double);
		struct gpusys_copy_info in;
		gpusys_copy_get_info(c, &in);
		fprintf(stderr,
			"%s: slow first producer, 256 MiB %s: gpusys median %.1f GB/s (last %.1f), cudaMemcpy %.1f; "
			"producers %u at open, %u now (max %u, %llu added, %llu taken back)\n",
			gt_name, htod ? "htod" : "dtoh", tg[REPS / 2], in.last_copy_gbps, tc[REPS / 2], in.producers,
			in.producers_now, in.producers_max, (unsigned long long)in.producers_added,
			(unsigned long long)in.producers_removed);
		GT_CHECK(tg[REPS / 2] >= 0.97 * tc[REPS / 2], "slow producer %s: %.2f GB/s against cudaMemcpy %.2f",
			 htod ? "htod" : "dtoh", tg[REPS / 2], tc[REPS / 2]);
		if (in.producers_max > in.producers)
			GT_CHECK(in.producers_added >= 1, "slow producer: the engine never added a producer");
	}
	gpusys_copy_close(c);
	cudaFree(dev);
}

static void *worker_main(void *arg)
{
	struct worker *w = (struct worker *)arg;
	size_t max = 24u << 20;
	uint8_t *dev = NULL;
	uint8_t *a = (uint8_t *)malloc(max), *b = (uint8_t *)malloc(max);
	if (cudaMalloc(&dev, max) != cudaSuccess || !a || !b) {
		w->failures++;
		return NULL;
	}
	unsigned seed = 77u + (unsigned)w->id;
	cudaStream_t s;
	if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
		w->failures++;
		return NULL;
	}
	for (int it = 0; it < 12; it++) {
		size_t n = (size_t)rand_r(&seed) % (max - 8);
		size_t off = (size_t)rand_r(&seed) % 8;
		fill(a + off, n, seed);
		if (w->id & 1) { /* odd threads: both ways queued on their own stream, then one wait each */
			gpusys_copy_handle_t *h1 = NULL, *h2 = NULL;
			if (gpusys_memcpy_htod_async(w->c, dev + off, a + off, n, s, &h1) != 0 ||
			    gpusys_memcpy_dtoh_async(w->c, b, dev + off, n, s, &h2) != 0 || gpusys_copy_wait(h2) != 0 ||
			    gpusys_copy_wait(h1) != 0 || memcmp(a + off, b, n) != 0)
				w->failures++;
		} else if (gpusys_memcpy_htod(w->c, dev + off, a + off, n) != 0 ||
			   gpusys_memcpy_dtoh(w->c, b, dev + off, n) != 0 || memcmp(a + off, b, n) != 0) {
			w->failures++;
		}
	}
	cudaStreamDestroy(s);
	cudaFree(dev);
	free(a);
	free(b);
	return NULL;
}

int main(void)
{
	gt_name = "test_gpu_copy";
	(void)gt_start_daemon; /* no daemon: copies need none */
	gt_require_gpu();
	GT_CUDA(cudaSetDevice(0));
	GT_CUDA(cudaFree(0));

	gpusys_copy_t *c = NULL;
	double t0 = gt_now();
	int rc = gpusys_copy_open(NULL, &c);
	GT_CHECK(rc == 0, "gpusys_copy_open: %d", rc);
	struct gpusys_copy_info info;
	gpusys_copy_get_info(c, &info);
	fprintf(stderr,
		"%s: open %.0f ms: %u producers, %u buffers of %zu KiB; engine from %zu B (htod) / %zu B (dtoh), "
		"large: %s / %s; host copy %.1f GB/s (1 thread) %.1f (all); link %.1f GB/s\n",
		gt_name, (gt_now() - t0) * 1e3, info.producers, info.buffers, info.chunk_bytes >> 10,
		info.min_engine_bytes[0], info.min_engine_bytes[1], path_name(info.large_path[0]),
		path_name(info.large_path[1]), info.host_copy_gbps_1, info.host_copy_gbps_n, info.link_gbps);
	GT_CHECK(info.producers >= 1 && info.buffers >= 2 && info.chunk_bytes > 0, "info");

	size_t chunk = info.chunk_bytes;
	size_t dev_bytes = 3 * chunk + (8u << 20);
	uint8_t *dev;
	GT_CUDA(cudaMalloc(&dev, dev_bytes));
	uint8_t *src = (uint8_t *)malloc(dev_bytes + 8192), *dst = (uint8_t *)malloc(dev_bytes + 8192),
		*check = (uint8_t *)malloc(dev_bytes);
	GT_CHECK(src && dst && check, "malloc");

	/* sizes around the chunk (the staging buffer) and the per-job chunks */
	size_t sizes[] = { 0,
			   1,
			   3,
			   4095,
			   4096,
			   4097,
			   65535,
			   (256u << 10) + 1,
			   (1u << 20) - 1,
			   chunk - 1,
			   chunk,
			   chunk + 1,
			   2 * chunk + 4097,
			   3 * chunk - 1,
			   3 * chunk + (5u << 20) };
	size_t hoffs[] = { 0, 1, 4095 }, doffs[] = { 0, 3 };
	unsigned cases = 0;
	for (int path = GPUSYS_COPY_AUTO; path <= GPUSYS_COPY_IN_PLACE; path++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			for (size_t h = 0; h < 3; h++) {
				size_t doff = doffs[(i + h) % 2];
				round_trip(c, dev, dev_bytes, src, dst, check, sizes[i], hoffs[h], doff, path,
					   i * 10 + h + 1000u * path);
				cases++;
			}
	gpusys_copy_get_info(c, &info);
	GT_CHECK(info.chunks_in_place > 0, "in place never pinned a chunk (%llu fallbacks)",
		 (unsigned long long)info.pin_fallbacks);
	fprintf(stderr, "%s: %u round trips verified, %.1f s (%llu chunks pinned in place, %llu fallbacks)\n", gt_name, cases,
		gt_now() - t0,
		(unsigned long long)info.chunks_in_place, (unsigned long long)info.pin_fallbacks);
	gpusys_copy_set_path(c, GPUSYS_COPY_AUTO);

	/* pinned host memory: the driver's DMA, still correct */
	uint8_t *pinned;
	GT_CUDA(cudaMallocHost(&pinned, 1u << 20));
	fill(pinned, 1u << 20, 5);
	GT_CHECK(gpusys_memcpy_htod(c, dev, pinned, 1u << 20) == 0, "htod from pinned");
	GT_CUDA(cudaMemcpy(check, dev, 1u << 20, cudaMemcpyDeviceToHost));
	GT_CHECK(memcmp(check, pinned, 1u << 20) == 0, "htod from pinned: bytes differ");

	/* a destination too small: refused, nothing moved */
	uint8_t *small;
	GT_CUDA(cudaMalloc(&small, 1u << 20));
	GT_CUDA(cudaMemset(small, 0x5A, 1u << 20));
	for (int path = GPUSYS_COPY_AUTO; path <= GPUSYS_COPY_IN_PLACE; path++) {
		gpusys_copy_set_path(c, (enum gpusys_copy_path)path);
		rc = gpusys_memcpy_htod(c, small, src, (1u << 20) + 1);
		GT_CHECK(rc == -EFAULT, "%s: 1 MiB + 1 into 1 MiB: %d, want -EFAULT", path_name(path), rc);
		rc = gpusys_memcpy_htod(c, small + 4096, src, 1u << 20);
		GT_CHECK(rc == -EFAULT, "%s: past the end from an offset: %d", path_name(path), rc);
		rc = gpusys_memcpy_dtoh(c, dst, small + 1, 1u << 20);
		GT_CHECK(rc == -EFAULT, "%s: dtoh source too small: %d", path_name(path), rc);
		rc = gpusys_memcpy_htod(c, src, src + 100, 100); /* host memory as the device side */
		GT_CHECK(rc == -EFAULT, "%s: host pointer as device: %d", path_name(path), rc);
	}
	GT_CUDA(cudaMemcpy(check, small, 1u << 20, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < (1u << 20); i++)
		GT_CHECK(check[i] == 0x5A, "a refused copy wrote byte %zu", i);
	fprintf(stderr, "%s: too-small destinations refused, %.1f s\n", gt_name, gt_now() - t0);
	gpusys_copy_set_path(c, GPUSYS_COPY_AUTO);

	/* stream order, for each path: a slow kernel writes, the async copy
	 * reads after it; an async copy writes, a kernel checks after it */
	cudaStream_t s;
	GT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	size_t n = 2 * chunk + 12345;
	uint8_t *want;
	unsigned long long *bad;
	GT_CUDA(cudaMalloc(&want, n));
	GT_CUDA(cudaMalloc(&bad, sizeof(*bad)));
	for (int path = GPUSYS_COPY_AUTO; path <= GPUSYS_COPY_IN_PLACE; path++) {
		gpusys_copy_set_path(c, (enum gpusys_copy_path)path); /* async in place: staged */
		memset(dst, 0, n);
		k_fill_late<<<64, 256, 0, s>>>(dev, n, (uint8_t)(0x40 + path), 50 * 1000 * 1000);
		gpusys_copy_handle_t *h = NULL;
		rc = gpusys_memcpy_dtoh_async(c, dst, dev, n, s, &h);
		GT_CHECK(rc == 0, "dtoh_async %s: %d", path_name(path), rc);
		rc = gpusys_copy_wait(h);
		GT_CHECK(rc == 0, "dtoh_async %s wait: %d", path_name(path), rc);
		for (size_t i = 0; i < n; i++)
			GT_CHECK(dst[i] == 0x40 + path, "dtoh_async %s: byte %zu is %#x: read before the kernel wrote",
				 path_name(path), i, dst[i]);

		fill(src, n, 900 + path);
		GT_CUDA(cudaMemcpy(want, src, n, cudaMemcpyHostToDevice));
		k_fill_late<<<64, 256, 0, s>>>(dev, n, 0, 20 * 1000 * 1000);
		rc = gpusys_memcpy_htod_async(c, dev, src, n, s, &h);
		GT_CHECK(rc == 0, "htod_async %s: %d", path_name(path), rc);
		GT_CUDA(cudaMemsetAsync(bad, 0, sizeof(*bad), s));
		k_count_mismatch<<<64, 256, 0, s>>>(dev, want, n, bad);
		unsigned long long nbad = 1;
		GT_CUDA(cudaMemcpyAsync(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost, s));
		GT_CUDA(cudaStreamSynchronize(s));
		/* the stream went on after the copy's last DMA; the handle says
		 * done a moment later at most */
		double tw = gt_now();
		while (gpusys_copy_test(h) != 1 && gt_now() - tw < 2)
			usleep(100);
		GT_CHECK(gpusys_copy_test(h) == 1, "htod_async %s: stream done, handle not", path_name(path));
		rc = gpusys_copy_wait(h);
		GT_CHECK(rc == 0 && nbad == 0, "htod_async %s: %d, %llu bytes wrong in stream order", path_name(path),
			 rc, nbad);
	}
	gpusys_copy_set_path(c, GPUSYS_COPY_AUTO);
	fprintf(stderr, "%s: stream order both ways on each path, %.1f s\n", gt_name, gt_now() - t0);

	/* callers on several threads, synchronous and queued on streams */
	pthread_t th[4];
	struct worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ c, i, 0 };
		GT_CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "pthread_create");
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		GT_CHECK(w[i].failures == 0, "thread %d: %d copies wrong", i, w[i].failures);
	}

	fprintf(stderr, "%s: 4 threads, %.1f s\n", gt_name, gt_now() - t0);
	gpusys_copy_close(c);

	uint8_t *big = (uint8_t *)malloc((size_t)256 << 20), *big_back = (uint8_t *)malloc((size_t)256 << 20);
	GT_CHECK(big && big_back, "malloc 2 x 256 MiB");
	slow_producer(big, big_back);
	free(big);
	free(big_back);
	fprintf(stderr, "%s: slow producer, %.1f s\n", gt_name, gt_now() - t0);
	cudaStreamDestroy(s);
	cudaFree(dev);
	cudaFree(small);
	cudaFree(want);
	cudaFree(bad);
	cudaFreeHost(pinned);
	free(src);
	free(dst);
	free(check);
	fprintf(stderr, "%s: ok\n", gt_name);
	return 0;
}
