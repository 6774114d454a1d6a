/* SPDX-License-Identifier: MIT */
/*
 * GPU calls through the real gpusysd, for each channel memory kind: one
 * thread, a full warp, divergent lanes, a partial warp; NOOP and ECHO with
 * payloads below, at and above the 64-byte inline slot; and streamed
 * payloads (up to 64 KiB a lane, and 1 MiB from one lane) through the
 * channel's window ports, one warp and one warp per SM at once.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"
#include "gpusys/file.cuh" /* the body copy of its calls */

struct result {
	unsigned int errors;
	int first_rc;
	unsigned int first_tid;
	unsigned int calls;
};

static __device__ void fill(uint8_t *b, uint32_t n, uint32_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 3));
}

static __device__ void report(struct result *r, int rc)
{
	if (atomicAdd(&r->errors, 1u) == 0) {
		r->first_rc = rc;
		r->first_tid = blockIdx.x * blockDim.x + threadIdx.x;
	}
}

/* Echo len bytes derived from seed; check what came back. */
static __device__ void echo_check(gpusys_dev_t dev, struct result *r, uint32_t len, uint32_t seed)
{
	uint8_t in[200], out[200];
	uint32_t got = 0xffffffffu;
	fill(in, len, seed);
	int rc = gpusys_echo(dev, in, len, out, sizeof(out), &got);
	atomicAdd(&r->calls, 1u);
	if (rc) {
		report(r, rc);
		return;
	}
	if (got != len) {
		report(r, 1000000 + (int)got);
		return;
	}
	for (uint32_t i = 0; i < len; i++) {
		if (out[i] != in[i]) {
			report(r, 2000000 + (int)i);
			return;
		}
	}
}

static __global__ void k_single(gpusys_dev_t dev, struct result *r)
{
	int rc = gpusys_noop(dev);
	atomicAdd(&r->calls, 1u);
	if (rc)
		report(r, rc);
	echo_check(dev, r, 40, 1);
	echo_check(dev, r, 0, 2);
	echo_check(dev, r, 64, 3);
	echo_check(dev, r, 200, 4);
}

static __global__ void k_warp(gpusys_dev_t dev, struct result *r, int iters)
{
	uint32_t lane = threadIdx.x % 32u;
	for (int i = 0; i < iters; i++) {
		int rc = gpusys_noop(dev);
		atomicAdd(&r->calls, 1u);
		if (rc)
			report(r, rc);
		echo_check(dev, r, (lane * 7u + (uint32_t)i * 13u) % 200u, lane + 32u * (uint32_t)i);
	}
}

/* Three groups of lanes take three different paths. */
static __global__ void k_divergent(gpusys_dev_t dev, struct result *r, int iters)
{
	uint32_t lane = threadIdx.x % 32u;
	for (int i = 0; i < iters; i++) {
		if (lane % 3u == 0) {
			echo_check(dev, r, 8u + lane, 7u * lane + (uint32_t)i);
		} else if (lane % 3u == 1) {
			int rc = gpusys_noop(dev);
			atomicAdd(&r->calls, 1u);
			if (rc)
				report(r, rc);
		} else if (lane & 4u) {
			echo_check(dev, r, 100u + lane, lane ^ (uint32_t)i);
		}
		/* the remaining lanes make no call at all this round */
	}
}

/* Lanes that leave early: the rest of the warp still calls. */
static __global__ void k_ragged(gpusys_dev_t dev, struct result *r)
{
	uint32_t lane = threadIdx.x % 32u;
	if (lane >= 5u && lane < 9u)
		return;
	echo_check(dev, r, 3u * lane, 99u + lane);
}

/* Streamed echoes: lane lengths 0..max, boundary sizes first, then mixed;
 * every third round the odd lanes sit out (a partial mask). Buffers in
 * global memory, 2 x max a thread. Every byte checked. */
static __global__ void k_streams(gpusys_dev_t dev, struct result *r, uint8_t *bufs, uint32_t max, int iters)
{
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32u;
	uint8_t *in = bufs + (size_t)tid * 2 * max, *out = in + max;
	const uint32_t edges[] = { 0, 1, 63, 64, 65, 2047, 2048, 2049, max - 1, max };
	for (int i = 0; i < iters; i++) {
		if (i % 3 == 2 && (lane & 1))
			continue;
		uint32_t len = i < 10 ? edges[(i + lane) % 10] : (lane * 2654435761u + (uint32_t)i * 40503u + blockIdx.x) % (max + 1);
		fill(in, len, tid + 977u * (uint32_t)i);
		uint32_t got = 0xffffffffu;
		int rc = gpusys_echo(dev, in, len, out, max, &got);
		atomicAdd(&r->calls, 1u);
		if (rc) {
			report(r, rc);
			return;
		}
		if (got != len) {
			report(r, 1000000 + (int)got);
			return;
		}
		for (uint32_t k = 0; k < len; k++)
			if (out[k] != in[k]) {
				report(r, 2000000 + (int)k);
				return;
			}
	}
}

static void run_streams(gpusys_t *g, uint32_t kind)
{
	gpusys_dev_t dev = gpusys_device(g);
	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	struct {
		const char *name;
		int grid;
		uint32_t max;
		int iters;
	} cases[] = {
		{ "one warp, lanes of 0..64 KiB", 1, 64u * 1024u + 65u, 14 },
		{ "one warp per SM, lanes of 0..8 KiB", prop.multiProcessorCount, 8192u, 14 },
		{ "one lane of 1 MiB", 1, GPUSYS_MAX_LANE_PAYLOAD, 2 },
	};
	struct result *r, h;
	GT_CUDA(cudaMalloc(&r, sizeof(*r)));
	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int block = c == 2 ? 1 : 32;
		uint8_t *bufs;
		GT_CUDA(cudaMalloc(&bufs, (size_t)cases[c].grid * block * 2 * cases[c].max));
		GT_CUDA(cudaMemset(r, 0, sizeof(*r)));
		k_streams<<<cases[c].grid, block>>>(dev, r, bufs, cases[c].max, cases[c].iters);
		GT_CUDA(cudaGetLastError());
		int rc = gpusys_synchronize(g, NULL, 60000);
		GT_CHECK(rc == 0, "%s (%s): gpusys_synchronize: %s", cases[c].name, gt_kind_name(kind), gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(&h, r, sizeof(h), cudaMemcpyDeviceToHost));
		GT_CHECK(h.errors == 0, "%s (%s): %u errors, first rc %d at thread %u", cases[c].name, gt_kind_name(kind),
			 h.errors, h.first_rc, h.first_tid);
		GT_CHECK(h.calls > 0, "%s: no call made", cases[c].name);
		printf("ok streams, %s (%s): %u lane calls\n", cases[c].name, gt_kind_name(kind), h.calls);
		GT_CUDA(cudaFree(bufs));
	}
	GT_CUDA(cudaFree(r));
	/* The large streams above went by the copy engine once the first had
	 * woken the DMA agent (include/gpusys/dma.h), and every byte was
	 * checked. */
	struct gpusys_dma_info di;
	int drc = gpusys_dma_info(g, &di);
	if (getenv("GPUSYS_DMA") && !strcmp(getenv("GPUSYS_DMA"), "0")) {
		GT_CHECK(drc == -ENOTSUP, "GPUSYS_DMA=0, yet a DMA agent: %s", gpusys_strerror(drc));
		return;
	}
	GT_CHECK(drc == 0, "no DMA agent: %s", gpusys_strerror(drc));
	GT_CHECK(di.copies > 0 && di.bytes > 0 && di.failures == 0 && di.wakes > 0,
		 "DMA agent (%s): %llu copies, %llu bytes, %llu failures, %llu wakes", gt_kind_name(kind),
		 (unsigned long long)di.copies, (unsigned long long)di.bytes, (unsigned long long)di.failures,
		 (unsigned long long)di.wakes);
	printf("ok streams (%s): the DMA agent copied %llu bytes in %llu copies, woken %llu times\n", gt_kind_name(kind),
	       (unsigned long long)di.bytes, (unsigned long long)di.copies, (unsigned long long)di.wakes);
}

/* The device side's body copy (device/file_client.h: a send's or a write's
 * piece into the lane's scratch) at every pair of source and destination
 * offsets mod 8 and lengths around its word path's edges, into local memory
 * as the calls use it and into global memory; the bytes around the copy
 * must stay as they were. errors: the cases that differ. */
static __global__ void k_bytecopy(const uint8_t *src, uint8_t *gdst, unsigned *errors)
{
	const uint32_t lens[] = { 0, 1, 3, 4, 5, 7, 8, 31, 32, 33, 34, 35, 36, 37, 63, 64, 65, 100, 1000, 1024, 3920 };
	uint8_t local[3920 + 32];
	uint32_t lane = threadIdx.x, so = lane % 8, dof = lane / 8 * 2 + blockIdx.x; /* 8 x 8 over two blocks */
	uint8_t *g = gdst + (size_t)(blockIdx.x * 32 + lane) * sizeof(local);
	for (unsigned k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		uint32_t n = lens[k];
		for (int where = 0; where < 2; where++) {
			uint8_t *d = where ? g : local;
			for (uint32_t i = 0; i < sizeof(local); i++)
				d[i] = 0xee;
			gpusys_file_bytecopy(d + dof + 8, src + so, n);
			bool bad = false;
			for (uint32_t i = 0; i < sizeof(local); i++) {
				uint8_t want = i >= dof + 8 && i < dof + 8 + n ? src[so + i - dof - 8] : 0xee;
				bad |= d[i] != want;
			}
			if (bad)
				atomicAdd(errors, 1u);
		}
	}
}

static void run_bytecopy(void)
{
	uint8_t h[4096], *src, *dst;
	for (unsigned i = 0; i < sizeof(h); i++)
		h[i] = (uint8_t)(i * 131u + (i >> 8) + 7u);
	unsigned *errors, e = 0;
	GT_CUDA(cudaMalloc(&src, sizeof(h)));
	GT_CUDA(cudaMalloc(&dst, 64 * (3920 + 32)));
	GT_CUDA(cudaMalloc(&errors, sizeof(*errors)));
	GT_CUDA(cudaMemcpy(src, h, sizeof(h), cudaMemcpyHostToDevice));
	GT_CUDA(cudaMemset(errors, 0, sizeof(*errors)));
	k_bytecopy<<<2, 32>>>(src, dst, errors);
	GT_CUDA(cudaDeviceSynchronize());
	GT_CUDA(cudaMemcpy(&e, errors, sizeof(e), cudaMemcpyDeviceToHost));
	GT_CHECK(e == 0, "body copies: %u of 2688 cases differ", e);
	printf("ok body copies: 64 offset pairs x 21 lengths, local and global\n");
	GT_CUDA(cudaFree(src));
	GT_CUDA(cudaFree(dst));
	GT_CUDA(cudaFree(errors));
}

static void run(uint32_t kind)
{
	gpusys_t *g = gt_attach(1u << kind, 0);
	GT_CHECK(gpusys_memory_kind(g) == kind, "asked for %s, got %s", gt_kind_name(kind),
		 gt_kind_name(gpusys_memory_kind(g)));
	/* The default: one port per resident warp slot (libclient/attach/cuda.c),
	 * which the daemon's default max_ports grants. */
	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	unsigned want = (unsigned)prop.multiProcessorCount * (unsigned)(prop.maxThreadsPerMultiProcessor / 32);
	want = want > GPUSYS_MAX_PORTS ? GPUSYS_MAX_PORTS : want;
	GT_CHECK(gpusys_num_ports(g) == want, "default ports: %u, expected %u (one per warp slot)", gpusys_num_ports(g),
		 want);
	gpusys_dev_t dev = gpusys_device(g);
	run_bytecopy();
	struct result *r, h;
	GT_CUDA(cudaMalloc(&r, sizeof(*r)));

	struct {
		const char *name;
		int grid, block, iters;
		unsigned expect_calls;
	} cases[] = {
		{ "single thread", 1, 1, 1, 5 },
		{ "full warp", 1, 32, 20, 32 * 20 * 2 },
		{ "divergent lanes", 1, 32, 20, 0 },
		{ "partial warp (20 threads)", 1, 20, 20, 20 * 20 * 2 },
		{ "ragged warp", 2, 32, 1, 2 * 28 },
		{ "4 blocks x 4 warps", 4, 128, 10, 4 * 128 * 10 * 2 },
	};
	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		GT_CUDA(cudaMemset(r, 0, sizeof(*r)));
		uint64_t before = gpusys_progress(g);
		if (c == 0)
			k_single<<<1, 1>>>(dev, r);
		else if (c == 2)
			k_divergent<<<cases[c].grid, cases[c].block>>>(dev, r, cases[c].iters);
		else if (c == 4)
			k_ragged<<<cases[c].grid, cases[c].block>>>(dev, r);
		else
			k_warp<<<cases[c].grid, cases[c].block>>>(dev, r, cases[c].iters);
		GT_CUDA(cudaGetLastError());
		int rc = gpusys_synchronize(g, NULL, 30000);
		GT_CHECK(rc == 0, "%s (%s): gpusys_synchronize: %s", cases[c].name, gt_kind_name(kind),
			 gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(&h, r, sizeof(h), cudaMemcpyDeviceToHost));
		GT_CHECK(h.errors == 0, "%s (%s): %u errors, first rc %d at thread %u", cases[c].name,
			 gt_kind_name(kind), h.errors, h.first_rc, h.first_tid);
		GT_CHECK(!cases[c].expect_calls || h.calls == cases[c].expect_calls, "%s: %u calls, expected %u",
			 cases[c].name, h.calls, cases[c].expect_calls);
		printf("ok %s (%s): %u lane calls, %llu warp requests\n", cases[c].name, gt_kind_name(kind), h.calls,
		       (unsigned long long)(gpusys_progress(g) - before));
	}
	GT_CUDA(cudaFree(r));
	run_streams(g, kind);
	gpusys_detach(g);
}

int main(void)
{
	return gt_main_each_kind("test_basic", run);
}
