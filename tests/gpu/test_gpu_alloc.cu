/* SPDX-License-Identifier: MIT */
/*
 * The alloc service from CUDA kernels through the real gpusysd: a client
 * killed with a large heap (device memory and the daemon's figures back to
 * baseline, measured); 10^6 random malloc/realloc/free from every SM with
 * each block's contents written and checked while the heap grows during
 * the kernel; growth to the limit, ENOMEM and recovery; double, foreign and
 * interior frees refused (small blocks' on the device), trim.
 */
#include "gpu_test.h"
#include "gpusys/alloc.cuh"

#define MiB (1ull << 20)
/* 2 GiB: the random run's live set (67 584 threads x 4 blocks, up to 64 KiB)
 * in slabs, with the SMs' current slabs, stays well under it */
#define LIMIT_MIB 2048ull
#define CHUNK_MIB 16ull

struct result {
	unsigned int errors;
	int first;
	unsigned int first_tid;
	unsigned long long ops;
	unsigned long long count;
};

static __device__ void report(struct result *r, int code)
{
	if (atomicAdd(&r->errors, 1u) == 0) {
		r->first = code;
		r->first_tid = blockIdx.x * blockDim.x + threadIdx.x;
	}
}

static __device__ uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Blocks are 16-byte aligned: whole words, then the tail's bytes. */
static __device__ void fillb(void *p, uint64_t n, uint64_t tag)
{
	uint64_t *q = (uint64_t *)p;
	for (uint64_t i = 0; i < n / 8; i++)
		q[i] = tag;
	for (uint64_t i = n / 8 * 8; i < n; i++)
		((uint8_t *)p)[i] = (uint8_t)(tag >> (8 * (i % 8)));
}

static __device__ int checkb(const void *p, uint64_t n, uint64_t tag)
{
	const uint64_t *q = (const uint64_t *)p;
	for (uint64_t i = 0; i < n / 8; i++)
		if (q[i] != tag)
			return 0;
	for (uint64_t i = n / 8 * 8; i < n; i++)
		if (((const uint8_t *)p)[i] != (uint8_t)(tag >> (8 * (i % 8))))
			return 0;
	return 1;
}

static __device__ uint64_t rsize(uint64_t r)
{
	switch (r % 64) {
	case 0:
		return 16384 + (r >> 8) % (48 * 1024);
	case 1: case 2: case 3: case 4:
		return 2049 + (r >> 8) % 6000;
	default:
		return 1 + (r >> 8) % 2048;
	}
}

#define HOLD 4

static __global__ void k_random(gpusys_heap_t h, struct result *res, int iters)
{
	uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	void *p[HOLD] = { 0 };
	uint64_t sz[HOLD] = { 0 }, tag[HOLD] = { 0 };
	uint64_t ops = 0, seq = 0;
	for (int it = 0; it < iters; it++) {
		uint64_t r = mix(((uint64_t)tid << 32) | (uint64_t)it);
		int s = (int)(r % HOLD);
		uint64_t t = ((uint64_t)tid << 24) | ++seq;
		if (!p[s]) {
			uint64_t n = rsize(r >> 8);
			void *q = gpusys_malloc(h, n);
			if (!q) {
				report(res, 100000 + gpusys_alloc_errno(h));
				continue;
			}
			fillb(q, n, t);
			p[s] = q, sz[s] = n, tag[s] = t;
		} else if ((r >> 40) % 4 == 0) {
			if (!checkb(p[s], sz[s], tag[s]))
				report(res, 1);
			uint64_t n = rsize(r >> 16);
			void *q = gpusys_realloc(h, p[s], n);
			if (!q) {
				report(res, 200000 + gpusys_alloc_errno(h));
				continue;
			}
			if (!checkb(q, n < sz[s] ? n : sz[s], tag[s]))
				report(res, 2);
			fillb(q, n, t);
			p[s] = q, sz[s] = n, tag[s] = t;
		} else {
			if (!checkb(p[s], sz[s], tag[s]))
				report(res, 3);
			int rc = gpusys_free(h, p[s]);
			if (rc)
				report(res, 300000 - rc);
			p[s] = 0;
		}
		ops++;
	}
	for (int s = 0; s < HOLD; s++) {
		if (!p[s])
			continue;
		if (!checkb(p[s], sz[s], tag[s]))
			report(res, 4);
		if (gpusys_free(h, p[s]))
			report(res, 5);
	}
	atomicAdd(&res->ops, ops);
}

/* Each thread takes 1 MiB blocks until NULL; ENOMEM; free; again. 32
 * threads x PER is more than the limit. */
#define PER 96
static __global__ void k_limit(gpusys_heap_t h, struct result *res)
{
	void *b[PER];
	int n = 0;
	while (n < PER) {
		b[n] = gpusys_malloc(h, MiB);
		if (!b[n])
			break;
		((uint64_t *)b[n])[MiB / 8 - 1] = n; /* the memory is there */
		n++;
	}
	if (n == PER)
		report(res, 10);
	else if (gpusys_alloc_errno(h) != ENOMEM)
		report(res, 20000 + gpusys_alloc_errno(h));
	atomicAdd(&res->count, (unsigned long long)n);
	__syncthreads();
	for (int i = 0; i < n; i++) {
		if (((uint64_t *)b[i])[MiB / 8 - 1] != (uint64_t)i)
			report(res, 11);
		if (gpusys_free(h, b[i]))
			report(res, 12);
	}
	__syncthreads();
	void *again = gpusys_malloc(h, MiB);
	if (!again)
		report(res, 30000 + gpusys_alloc_errno(h));
	else if (gpusys_free(h, again))
		report(res, 13);
}

static __global__ void k_bad(gpusys_heap_t h, void *foreign, struct result *res)
{
	uint8_t *a = (uint8_t *)gpusys_malloc(h, 100);
	uint8_t *big = (uint8_t *)gpusys_malloc(h, 100000); /* above 64 KiB: the daemon's */
	if (!a || !big) {
		report(res, 40);
		return;
	}
	int want[6] = { -EFAULT, -EINVAL, -EINVAL, 0, -ENOENT, 0 };
	int got[6];
	got[0] = gpusys_free(h, foreign);
	got[1] = gpusys_free(h, a + 16);
	got[2] = gpusys_free(h, big + 4096);
	got[3] = gpusys_free(h, a);
	got[4] = gpusys_free(h, a);
	got[5] = gpusys_free(h, big);
	for (int i = 0; i < 6; i++)
		if (got[i] != want[i])
			report(res, 50 + i * 1000 - got[i]);
	if (gpusys_free(h, big) != -ENOENT)
		report(res, 60);
	struct gpusys_alloc_stat st;
	/* the small block's refusals were the device's (a bit already clear
	 * for the double free), the large block's the daemon's */
	if (gpusys_alloc_stat(h, &st) || st.dev_refused_foreign < 1 || st.dev_refused_interior < 1 ||
	    st.dev_refused_unallocated < 1 || st.refused_interior < 1 || st.refused_unallocated < 2)
		report(res, 61);
}

static __global__ void k_stat(gpusys_heap_t h, struct gpusys_alloc_stat *st, int *rc)
{
	*rc = gpusys_alloc_stat(h, st);
}

static __global__ void k_trim(gpusys_heap_t h, int *rc)
{
	int r = gpusys_heap_trim(h);
	if (threadIdx.x == 0)
		*rc = r;
}

__global__ void k_keep(gpusys_heap_t h, struct result *res)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	void *p = gpusys_malloc(h, MiB);
	if (!p) {
		report(res, 70000 + gpusys_alloc_errno(h));
		return;
	}
	((uint64_t *)p)[0] = i;
}

/* Child: big_mib threads each take and keep 1 MiB; wait to be killed.
 * go_fd < 0: take them, then detach and exit. */
static void child_big_heap(int go_fd, int ready_fd, int big_mib)
{
	char c;
	if (go_fd >= 0 && read(go_fd, &c, 1) != 1)
		_exit(2);
	gpusys_t *g = gt_attach(0, 0);
	struct gpusys_heap *heap;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	if (gpusys_heap_open(g, &ho, &heap))
		_exit(3);
	struct result *res;
	if (cudaMallocManaged(&res, sizeof(*res)) != cudaSuccess)
		_exit(4);
	memset(res, 0, sizeof(*res));
	k_keep<<<(big_mib + 127) / 128, 128>>>(gpusys_heap_device(heap), res);
	if (gpusys_synchronize(g, NULL, 120000) || res->errors) {
		fprintf(stderr, "child: %u errors, first %d\n", res->errors, res->first);
		_exit(5);
	}
	if (go_fd < 0) {
		gpusys_detach(g);
		_exit(0);
	}
	if (write(ready_fd, "r", 1) != 1)
		_exit(6);
	pause();
	_exit(0);
}

static size_t free_mem(void)
{
	size_t f = 0, t = 0;
	GT_CUDA(cudaMemGetInfo(&f, &t));
	return f;
}

int main(void)
{
	gt_name = "test_gpu_alloc";
	gt_require_gpu_forked();
	char v[64];
	snprintf(v, sizeof(v), "%lluM", LIMIT_MIB);
	setenv("GPUSYSD_ALLOC_LIMIT_BYTES", v, 1);
	snprintf(v, sizeof(v), "%lluM", CHUNK_MIB);
	setenv("GPUSYSD_ALLOC_CHUNK_BYTES", v, 1);
	/* 1 ms: chunks go back and come again all through the random run.
	 * GT_ALLOC_TRIM_DELAY_MS overrides it, to tell a fault of that churn
	 * from one without it. */
	const char *td = getenv("GT_ALLOC_TRIM_DELAY_MS");
	setenv("GPUSYSD_ALLOC_TRIM_DELAY_MS", td && *td ? td : "1", 1);
	gt_start_daemon(NULL);

	/* 1. A killed client: fork before this process touches CUDA. First a
	 * client that takes a little and exits: the daemon keeps one CUDA
	 * context per GPU from then until it exits (daemon/core/channel_cuda.c),
	 * so the baseline is taken with that context in place. */
	pid_t warm = fork();
	GT_CHECK(warm >= 0, "fork");
	if (warm == 0)
		child_big_heap(-1, -1, 8);
	int warm_status = 0;
	GT_CHECK(waitpid(warm, &warm_status, 0) == warm && WIFEXITED(warm_status) && WEXITSTATUS(warm_status) == 0,
		 "the first client failed (status %#x)", warm_status);
	const int big_mib = 768;
	int go[2], ready[2];
	GT_CHECK(pipe(go) == 0 && pipe(ready) == 0, "pipe");
	pid_t child = fork();
	GT_CHECK(child >= 0, "fork");
	if (child == 0) {
		close(go[1]);
		close(ready[0]);
		child_big_heap(go[0], ready[1], big_mib);
	}
	close(go[0]);
	close(ready[1]);
	GT_CUDA(cudaSetDevice(0));
	GT_CUDA(cudaFree(0));
	size_t free0 = free_mem();
	GT_CHECK(write(go[1], "g", 1) == 1, "go");
	char c;
	GT_CHECK(read(ready[0], &c, 1) == 1, "the child did not build its heap");
	size_t free1 = free_mem();
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	size_t free2 = free_mem();
	for (int i = 0; i < 200 && free2 + 64 * MiB < free0; i++) {
		usleep(10000);
		free2 = free_mem();
	}
	printf("killed client: device free %zu MiB before, %zu MiB with its %d MiB heap, %zu MiB after\n",
	       free0 >> 20, free1 >> 20, big_mib, free2 >> 20);
	GT_CHECK(free0 - free1 >= (size_t)big_mib * MiB, "the child's heap did not take device memory");
	GT_CHECK(free2 + 64 * MiB >= free0, "device memory not back after the kill");

	gpusys_t *g = gt_attach(0, 0);
	struct gpusys_heap *heap;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	ho.cuda_device = 0;
	int rc = gpusys_heap_open(g, &ho, &heap);
	GT_CHECK(rc == 0, "gpusys_heap_open: %s", gpusys_strerror(rc));
	struct gpusys_alloc_stat *st;
	int *src;
	GT_CUDA(cudaMallocManaged(&st, sizeof(*st)));
	GT_CUDA(cudaMallocManaged(&src, sizeof(int)));
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
	printf("daemon after the kill: %llu heaps, %llu MiB granted, %llu B metadata\n",
	       (unsigned long long)st->all_heaps, (unsigned long long)(st->all_grant >> 20),
	       (unsigned long long)st->all_meta_bytes);
	GT_CHECK(*src == 0 && st->all_heaps == 0 && st->all_grant == 0 && st->all_meta_bytes == 0,
		 "the killed client's heap is still in the daemon (rc %d, heaps %llu)", *src,
		 (unsigned long long)st->all_heaps);

	/* 2. 10^6 random operations from every SM; the heap grows meanwhile. */
	struct result *res;
	GT_CUDA(cudaMallocManaged(&res, sizeof(*res)));
	memset(res, 0, sizeof(*res));
	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	int blocks = prop.multiProcessorCount * 2, threads = 256;
	int iters = (int)(1000000ll / (blocks * threads)) + 1;
	double t0 = gt_now();
	k_random<<<blocks, threads>>>(gpusys_heap_device(heap), res, iters);
	rc = gpusys_synchronize(g, NULL, 120000);
	double t1 = gt_now();
	GT_CHECK(rc == 0, "synchronize: %s", gpusys_strerror(rc));
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0 && *src == 0, "stat");
	printf("random: %llu ops from %d threads in %.3f s, %u errors (first %d at thread %u); heap mapped %llu MiB "
	       "in %u mappings (first grant %llu MiB), last mapping %.2f ms; daemon: %llu mallocs %llu frees %llu "
	       "reallocs, %llu live blocks (a pool chunk is one), pool %llu MiB (%llu chunks got, %llu back)\n",
	       res->ops, blocks * threads, t1 - t0, res->errors, res->first, res->first_tid,
	       (unsigned long long)(gpusys_heap_mapped(heap) >> 20), gpusys_heap_maps(heap), CHUNK_MIB,
	       gpusys_heap_last_map_ns(heap) / 1e6, (unsigned long long)st->mallocs, (unsigned long long)st->frees,
	       (unsigned long long)st->reallocs, (unsigned long long)st->live_blocks,
	       (unsigned long long)(st->pool_bytes >> 20), (unsigned long long)st->pool_chunks_got,
	       (unsigned long long)st->pool_chunks_back);
	GT_CHECK(res->errors == 0, "random: %u errors, first code %d", res->errors, res->first);
	GT_CHECK(res->ops >= 1000000ull, "random: %llu ops", res->ops);
	GT_CHECK(gpusys_heap_mapped(heap) >= 8 * CHUNK_MIB * MiB, "the heap did not grow 8x during the kernel");

	/* 3. The limit: ENOMEM, then recovery. Trim first: the random run's
	 * small blocks are all freed, so its pool chunks go back to the daemon
	 * (the delay is 1 ms here), except those holding an SM's current slab. */
	usleep(10000);
	k_trim<<<1, 32>>>(gpusys_heap_device(heap), src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
	printf("trim: %d pool chunks back to gpusysd\n", *src);
	GT_CHECK(*src >= 0, "trim: %d", *src);
	memset(res, 0, sizeof(*res));
	k_limit<<<1, 32>>>(gpusys_heap_device(heap), res);
	GT_CHECK(gpusys_synchronize(g, NULL, 120000) == 0, "synchronize");
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0 && *src == 0, "stat");
	printf("limit: %llu x 1 MiB taken before ENOMEM (limit %llu MiB), grant %llu MiB, enomem %llu\n", res->count,
	       LIMIT_MIB, (unsigned long long)(st->grant >> 20), (unsigned long long)st->enomem);
	GT_CHECK(res->errors == 0, "limit: %u errors, first code %d", res->errors, res->first);
	/* SMs' current slabs keep some pool chunks (bounded by SMs x classes) */
	GT_CHECK(res->count >= LIMIT_MIB / 2 && res->count <= LIMIT_MIB, "limit: %llu blocks", res->count);
	GT_CHECK(st->grant == LIMIT_MIB * MiB && st->enomem >= 32, "limit: grant/enomem");

	/* 4. Bad frees. */
	void *foreign;
	GT_CUDA(cudaMalloc(&foreign, 4096));
	memset(res, 0, sizeof(*res));
	k_bad<<<1, 1>>>(gpusys_heap_device(heap), foreign, res);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
	GT_CHECK(res->errors == 0, "bad frees: %u errors, first code %d", res->errors, res->first);

	gpusys_heap_close(heap);
	gpusys_detach(g);
	gt_stop_daemon();
	printf("test_gpu_alloc: ok\n");
	return 0;
}
