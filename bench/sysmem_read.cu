/* SPDX-License-Identifier: MIT */
/*
 * sysmem_read: how fast can warps read pinned host memory, and does an L2
 * prefetch make them faster without giving stale bytes? A probe for issue
 * 27's stream copies (a response window read by the warp: 1.1 GB/s for one
 * warp with four 16-byte pieces a lane in flight, bench/RESULTS.md "Stream
 * windows").
 *
 * Each round the host fills the buffer with a pattern of the round, then
 * publishes the round number (a release store); the warps wait for it with
 * a system-scope acquire, copy their part into device memory by the mode's
 * loads, record the time, then check every word they copied against the
 * round's pattern (not timed) and answer. A line left in L2 by the last
 * round and read again would show as a wrong word.
 *
 *   nvcc -O3 -arch=sm_90 -o sysmem_read bench/sysmem_read.cu -lcuda
 *   ./sysmem_read [bytes per warp] [warps] [rounds]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>

#define CK(x)                                                                                              \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));       \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

enum mode {
	M_VOLATILE,   /* ld.volatile.global.v4, 4 pieces a lane a trip (the stream loop today) */
	M_CG,         /* ld.global.cg.v4 (L2, not L1), 4 pieces */
	M_CG_PF,      /* M_CG, each lane prefetching its lines to L2 one window ahead */
	M_CG_BULK,    /* M_CG, lane 0 prefetching the next 16 KiB with cp.async.bulk.prefetch.L2 */
	M_VOL_BULK,   /* M_VOLATILE after the bulk prefetch: does a volatile load hit L2? */
	M_CG8,        /* ld.global.cg, 8 pieces a lane (the register cost the stream loop refused) */
	M_LANE0_VOL,  /* lane 0 alone, volatile, 4 pieces */
	M_LANE0_BULK, /* lane 0 alone, cg after prefetching its whole part with one bulk prefetch a 16 KiB */
	M_LANE0_CG,   /* lane 0 alone, cg, 4 pieces */
	M_DMA,        /* lane 0 asks a host thread of this process to copy its part with the copy engine
			 (cudaMemcpyAsync, then cuStreamWriteValue32 of a device word the lane waits for) */
	M_COUNT
};
static const char *const mode_name[M_COUNT] = { "volatile x4",     "cg x4",           "cg x4 + lane prefetch",
						"cg x4 + bulk prefetch", "volatile x4 + bulk prefetch", "cg x8",
						"lane 0: volatile x4", "lane 0: cg + bulk prefetch",
						"lane 0: cg x4",       "lane 0: DMA by a host thread" };

#define MAX_WARPS 1024

/* A warp's request to the host thread: copy len bytes from src to dst. */
struct dma_ask {
	volatile unsigned long long src, dst;
	volatile unsigned len, seq;
} __attribute__((aligned(32)));

struct words {
	volatile unsigned go __attribute__((aligned(128)));
	volatile unsigned done[MAX_WARPS] __attribute__((aligned(128)));
	struct dma_ask ask[MAX_WARPS];
	volatile int stop;
};

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ unsigned ld_acquire_sys(const volatile unsigned *p)
{
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

static __device__ __forceinline__ uint4 ld_vol(const uint8_t *p)
{
	uint4 v;
	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

static __device__ __forceinline__ uint4 ld_cg(const uint8_t *p)
{
	uint4 v;
	asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

static __device__ __forceinline__ void pf_line(const uint8_t *p)
{
	asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
}

static __device__ __forceinline__ void pf_bulk(const uint8_t *p, uint32_t n)
{
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}

#define PF_BULK 16384u

template <int P, bool CG>
static __device__ __forceinline__ void copy_warp(uint8_t *dst, const uint8_t *src, uint32_t n, uint32_t lane,
						 int lane_pf, int bulk_pf)
{
	const uint32_t trip = 32u * 16u * P;
	if (bulk_pf && lane == 0)
		pf_bulk(src, n < PF_BULK ? n : PF_BULK);
	for (uint32_t off = 0; off < n; off += trip) {
		if (bulk_pf && lane == 0 && (off % PF_BULK) == 0 && off + PF_BULK < n)
			pf_bulk(src + off + PF_BULK, n - off - PF_BULK < PF_BULK ? n - off - PF_BULK : PF_BULK);
		if (lane_pf) {
			/* the next trips' lines: each lane one 128-byte line of the window ahead */
			for (uint32_t a = off + 4 * trip + lane * 128u; a < off + 5 * trip && a < n; a += 32u * 128u)
				pf_line(src + a);
		}
		uint4 v[P];
#pragma unroll
		for (int k = 0; k < P; k++) {
			uint32_t at = off + (uint32_t)k * 512u + lane * 16u;
			v[k] = at < n ? (CG ? ld_cg(src + at) : ld_vol(src + at)) : make_uint4(0, 0, 0, 0);
		}
#pragma unroll
		for (int k = 0; k < P; k++) {
			uint32_t at = off + (uint32_t)k * 512u + lane * 16u;
			if (at < n)
				*(uint4 *)(dst + at) = v[k];
		}
	}
}

template <bool CG>
static __device__ void copy_lane(uint8_t *dst, const uint8_t *src, uint32_t n, int bulk_pf)
{
	if (bulk_pf)
		for (uint32_t a = 0; a < n; a += PF_BULK)
			pf_bulk(src + a, n - a < PF_BULK ? n - a : PF_BULK);
	for (uint32_t off = 0; off < n; off += 64) {
		uint4 v[4];
#pragma unroll
		for (int k = 0; k < 4; k++)
			v[k] = CG ? ld_cg(src + off + 16 * k) : ld_vol(src + off + 16 * k);
#pragma unroll
		for (int k = 0; k < 4; k++)
			*(uint4 *)(dst + off + 16 * k) = v[k];
	}
}

static __global__ void k_read(struct words *w, const uint8_t *host, uint8_t *dev, uint32_t per_warp, int mode,
			      int rounds, unsigned long long *ns, unsigned *wrong, volatile unsigned *dma_done,
			      int warps)
{
	uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
	if (warp >= (uint32_t)warps)
		return;
	const uint8_t *src = host + (size_t)warp * per_warp;
	uint8_t *dst = dev + (size_t)warp * per_warp;
	for (int r = 1; r <= rounds; r++) {
		if (lane == 0)
			while (ld_acquire_sys(&w->go) < (unsigned)r)
				;
		__syncwarp();
		asm volatile("fence.acq_rel.sys;" ::: "memory");
		unsigned long long t0 = gtimer();
		switch (mode) {
		case M_VOLATILE: copy_warp<4, false>(dst, src, per_warp, lane, 0, 0); break;
		case M_CG: copy_warp<4, true>(dst, src, per_warp, lane, 0, 0); break;
		case M_CG_PF: copy_warp<4, true>(dst, src, per_warp, lane, 1, 0); break;
		case M_CG_BULK: copy_warp<4, true>(dst, src, per_warp, lane, 0, 1); break;
		case M_VOL_BULK: copy_warp<4, false>(dst, src, per_warp, lane, 0, 1); break;
		case M_CG8: copy_warp<8, true>(dst, src, per_warp, lane, 0, 0); break;
		case M_LANE0_VOL:
			if (lane == 0)
				copy_lane<false>(dst, src, per_warp, 0);
			break;
		case M_LANE0_BULK:
			if (lane == 0)
				copy_lane<true>(dst, src, per_warp, 1);
			break;
		case M_LANE0_CG:
			if (lane == 0)
				copy_lane<true>(dst, src, per_warp, 0);
			break;
		case M_DMA:
			if (lane == 0) {
				struct dma_ask *a = &w->ask[warp];
				a->src = (unsigned long long)(uintptr_t)src;
				a->dst = (unsigned long long)(uintptr_t)dst;
				a->len = per_warp;
				asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(&a->seq), "r"((unsigned)r) : "memory");
				while (dma_done[warp] != (unsigned)r)
					;
				asm volatile("fence.acq_rel.gpu;" ::: "memory");
			}
			break;
		}
		__syncwarp();
		if (mode == M_DMA) /* every lane reads what the copy engine wrote */
			asm volatile("fence.acq_rel.gpu;" ::: "memory");
		unsigned long long t1 = gtimer();
		if (lane == 0)
			ns[(size_t)warp * rounds + r - 1] = t1 - t0;
		/* check: word i of the whole buffer holds r * 0x9E3779B1 + i */
		const uint32_t *d = (const uint32_t *)dst;
		uint32_t base = (uint32_t)((size_t)warp * per_warp / 4), bad = 0;
		for (uint32_t i = lane; i < per_warp / 4; i += 32)
			bad += d[i] != (uint32_t)r * 0x9E3779B1u + base + i;
		if (bad)
			atomicAdd(wrong, bad);
		__syncwarp();
		if (lane == 0) {
			__threadfence_system();
			w->done[warp] = r;
		}
	}
}

struct agent {
	struct words *w;
	unsigned *dma_done; /* device memory, a word a warp */
	int warps;
	cudaStream_t s;
};

/* The host thread: spins on the warps' asks, copies with the copy engine
 * and has the stream write the warp's done word after the copy. */
static void *agent_main(void *arg)
{
	struct agent *ag = (struct agent *)arg;
	static unsigned seen[MAX_WARPS];
	memset(seen, 0, sizeof(seen));
	CK(cudaSetDevice(0));
	while (!ag->w->stop) {
		for (int k = 0; k < ag->warps; k++) {
			unsigned q = __atomic_load_n(&ag->w->ask[k].seq, __ATOMIC_ACQUIRE);
			if (q == seen[k])
				continue;
			seen[k] = q;
			struct dma_ask *a = &ag->w->ask[k];
			CK(cudaMemcpyAsync((void *)(uintptr_t)a->dst, (const void *)(uintptr_t)a->src, a->len,
					   cudaMemcpyDefault, ag->s));
			CUresult r = cuStreamWriteValue32((CUstream)ag->s, (CUdeviceptr)(uintptr_t)&ag->dma_done[k], q, 0);
			if (r != CUDA_SUCCESS) {
				fprintf(stderr, "cuStreamWriteValue32: %d\n", (int)r);
				exit(1);
			}
		}
	}
	return NULL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t per_warp = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 0) : 2u << 20;
	int warps = argc > 2 ? atoi(argv[2]) : 1, rounds = argc > 3 ? atoi(argv[3]) : 20;
	size_t total = (size_t)per_warp * warps;
	struct words *w;
	uint8_t *host, *dev;
	unsigned long long *ns;
	unsigned *wrong;
	CK(cudaHostAlloc((void **)&w, sizeof(*w), cudaHostAllocMapped));
	CK(cudaHostAlloc((void **)&host, total, cudaHostAllocMapped));
	CK(cudaMalloc(&dev, total));
	CK(cudaMallocManaged(&ns, sizeof(*ns) * warps * rounds));
	CK(cudaMallocManaged(&wrong, sizeof(*wrong)));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (warps < 1 || warps > MAX_WARPS) {
		fprintf(stderr, "warps: 1..%d\n", MAX_WARPS);
		return 2;
	}
	struct agent ag;
	ag.w = w;
	ag.warps = warps;
	CK(cudaMalloc((void **)&ag.dma_done, sizeof(unsigned) * MAX_WARPS));
	CK(cudaStreamCreateWithFlags(&ag.s, cudaStreamNonBlocking));
	printf("sysmem_read: %u bytes a warp, %d warps, %d rounds (p50 of the device's copy time)\n", per_warp,
	       warps, rounds);
	printf("%-30s %12s %12s %10s %8s\n", "mode", "p50 us", "min us", "GB/s p50", "wrong");
	for (int m = 0; m < M_COUNT; m++) {
		uint32_t n = per_warp;
		if (m >= M_LANE0_VOL && m <= M_LANE0_CG && n > 65536)
			continue; /* one lane: 64 KiB rows only */
		w->go = 0;
		memset((void *)w->done, 0, sizeof(w->done));
		memset((void *)w->ask, 0, sizeof(w->ask));
		w->stop = 0;
		CK(cudaMemset(ag.dma_done, 0, sizeof(unsigned) * MAX_WARPS));
		CK(cudaDeviceSynchronize());
		pthread_t at;
		if (m == M_DMA)
			pthread_create(&at, NULL, agent_main, &ag);
		*wrong = 0;
		int block = warps * 32 < 256 ? warps * 32 : 256;
		k_read<<<(warps * 32 + block - 1) / block, block, 0, s>>>(w, host, dev, n, m, rounds, ns, wrong,
									 ag.dma_done, warps);
		for (int r = 1; r <= rounds; r++) {
			uint32_t *h = (uint32_t *)host;
			for (size_t i = 0; i < total / 4; i++)
				h[i] = (uint32_t)r * 0x9E3779B1u + (uint32_t)i;
			__atomic_store_n(&w->go, (unsigned)r, __ATOMIC_RELEASE);
			double t0 = now();
			for (int k = 0; k < warps; k++)
				while (__atomic_load_n(&w->done[k], __ATOMIC_ACQUIRE) < (unsigned)r)
					if (now() - t0 > 10) {
						fprintf(stderr, "round %d: warp %d did not answer\n", r, k);
						exit(1);
					}
		}
		CK(cudaStreamSynchronize(s));
		if (m == M_DMA) {
			w->stop = 1;
			pthread_join(at, NULL);
		}
		qsort(ns, (size_t)warps * rounds, sizeof(*ns), cmp_ull);
		double p50 = ns[(size_t)warps * rounds / 2] / 1e3;
		printf("%-30s %12.1f %12.1f %10.2f %8u\n", mode_name[m], p50, ns[0] / 1e3,
		       (double)n * warps / (p50 * 1e3), *wrong);
	}
	return 0;
}
