/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench packet: the floor of a call that carries bytes in packet 0.
 *
 * One warp and one host thread in this process, no gpusys: the warp writes
 * each active lane's length, capacity and n payload bytes into a pinned
 * "port", publishes a word (release fence, store, flush: the client's
 * publish), the host thread spins on the word, copies the request port into
 * a reply port (an echo: what a server's copy-out and answer cost at least)
 * and writes its word; the warp waits for it, fences, and every active lane
 * reads its length, status and bytes back. Per row, the p50 round trip.
 *
 * Layouts of the payload bytes in the port's 2 KiB of data:
 *   word      no payload: the word alone (a NOOP's shape; the floor's floor)
 *   slots     lane l's bytes at data[64 l ...], written with the client's
 *             8-byte stores and read with its 16-byte loads (ABI 6)
 *   chunks    lane l's bytes 16k..16k+15 at data[512 k + 16 l]: every
 *             16-byte store and load of the warp is one contiguous run
 *
 *   gpusys-bench packet [--iters N]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "gpusys/device.cuh"

enum layout { LAYOUT_WORD, LAYOUT_SLOTS, LAYOUT_CHUNKS };
static const char *const layout_name[] = { "word", "slots", "chunks" };

struct floor_words {
	volatile uint64_t req __attribute__((aligned(128)));
	volatile uint64_t rep __attribute__((aligned(128)));
	volatile uint64_t stop __attribute__((aligned(128)));
};

struct floor_shared {
	struct floor_words w;
	struct gpusys_port req __attribute__((aligned(128)));
	struct gpusys_port rep __attribute__((aligned(128)));
};

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ __forceinline__ void st16(uint8_t *p, uint4 v)
{
	asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
		     : "memory");
}

static __device__ __forceinline__ uint4 ld16(const uint8_t *p)
{
	uint4 v;
	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

/* One warp; lanes below `lanes` call. bad counts wrong bytes read back. */
static __global__ void k_floor(struct floor_shared *sh, int layout, int lanes, uint32_t n, int iters, int warm,
			       unsigned long long *lat, unsigned *bad)
{
	const uint32_t l = threadIdx.x;
	if ((int)l >= lanes)
		return;
	const unsigned mask = __activemask();
	uint8_t mine[64], got[64];
	for (uint32_t i = 0; i < 64; i++)
		mine[i] = (uint8_t)(l * 7 + i);
	for (int it = 1; it <= iters + warm; it++) {
		mine[0] = (uint8_t)it;
		unsigned long long t0 = gtimer();
		if (layout != LAYOUT_WORD) {
			sh->req.len[l] = n;
			sh->req.aux[l] = n;
			if (layout == LAYOUT_SLOTS) {
				gpusys_copy_to_channel(sh->req.data + l * 64, mine, n);
			} else {
				for (uint32_t k = 0; 16 * k < n; k++) {
					uint4 v;
					memcpy(&v, mine + 16 * k, 16);
					st16(sh->req.data + 512 * k + 16 * l, v);
				}
			}
			asm volatile("fence.acq_rel.sys;" ::: "memory");
		}
		__syncwarp(mask);
		if (l == __ffs(mask) - 1) {
			asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(&sh->w.req), "l"((uint64_t)it) : "memory");
			__threadfence_system();
		}
		uint64_t w;
		do
			asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(w) : "l"(&sh->w.rep) : "memory");
		while (w != (uint64_t)it);
		uint32_t len = n;
		if (layout != LAYOUT_WORD) {
			asm volatile("fence.acq_rel.sys;" ::: "memory");
			if (layout == LAYOUT_SLOTS) {
				int32_t st;
				len = gpusys_read_packet0(&sh->rep, l, n, got, &st);
			} else {
				uint4 v[4];
				uint32_t nl, st;
				asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(nl) : "l"(&sh->rep.len[l]) : "memory");
				asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(st) : "l"(&sh->rep.aux[l]) : "memory");
#pragma unroll
				for (uint32_t k = 0; k < 4; k++)
					if (16 * k < n)
						v[k] = ld16(sh->rep.data + 512 * k + 16 * l);
				len = nl + st - n; /* uses both loads */
#pragma unroll
				for (uint32_t k = 0; k < 4; k++)
					if (16 * k < n)
						memcpy(got + 16 * k, &v[k], 16);
			}
			for (uint32_t i = 0; i < n; i++)
				if (got[i] != mine[i])
					atomicAdd(bad, 1u);
		}
		if (len != n)
			atomicAdd(bad, 1u);
		__syncwarp(mask);
		if (l == 0 && it > warm)
			lat[it - warm - 1] = gtimer() - t0;
	}
}

static void *floor_server(void *arg)
{
	struct floor_shared *sh = (struct floor_shared *)arg;
	uint64_t seen = 0;
	while (!sh->w.stop) {
		uint64_t v = sh->w.req;
		if (v == seen) {
			__builtin_ia32_pause();
			continue;
		}
		seen = v;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		struct gpusys_port copy;
		memcpy(&copy, (const void *)&sh->req, sizeof(copy)); /* copy out, as gpusysd does */
		memcpy((void *)&sh->rep, &copy, sizeof(copy));
		__atomic_thread_fence(__ATOMIC_RELEASE);
		sh->w.rep = v;
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

extern "C" int bench_packet_gpu(int argc, char **argv)
{
	int iters = 20000, c;
	static const struct option opts[] = { { "iters", required_argument, NULL, 'i' }, { NULL, 0, NULL, 0 } };
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c != 'i') {
			fprintf(stderr, "usage: gpusys-bench packet [--iters N]\n");
			return 2;
		}
		iters = atoi(optarg);
	}
	if (iters < 100)
		iters = 100;
	const int warm = iters / 10;

	struct floor_shared *sh;
	unsigned long long *lat;
	unsigned *bad;
	BENCH_CK(cudaHostAlloc((void **)&sh, sizeof(*sh), cudaHostAllocMapped));
	memset(sh, 0, sizeof(*sh));
	BENCH_CK(cudaMalloc((void **)&lat, sizeof(*lat) * iters));
	BENCH_CK(cudaMalloc((void **)&bad, sizeof(*bad)));
	uint64_t *host_lat = (uint64_t *)malloc(sizeof(*host_lat) * iters);

	static const struct {
		int layout, lanes;
		uint32_t n;
	} rows[] = {
		{ LAYOUT_WORD, 1, 0 },    { LAYOUT_WORD, 32, 0 },    { LAYOUT_SLOTS, 1, 4 },   { LAYOUT_CHUNKS, 1, 4 },
		{ LAYOUT_SLOTS, 32, 4 },  { LAYOUT_CHUNKS, 32, 4 },  { LAYOUT_SLOTS, 32, 16 }, { LAYOUT_CHUNKS, 32, 16 },
		{ LAYOUT_SLOTS, 1, 64 },  { LAYOUT_CHUNKS, 1, 64 },  { LAYOUT_SLOTS, 32, 64 }, { LAYOUT_CHUNKS, 32, 64 },
	};
	printf("packet 0 floor: one warp, one host thread echoing the port (p50 / p99 us, %d round trips)\n", iters);
	printf("| layout | lanes | bytes each way | p50 | p99 | vs word |\n|---|---|---|---|---|---|\n");
	double word_p50[2] = { 0, 0 };
	for (int repeat = 0; repeat < 2; repeat++) {
		for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
			pthread_t th;
			sh->w.req = sh->w.rep = sh->w.stop = 0;
			BENCH_CK(cudaMemset(bad, 0, sizeof(*bad)));
			if (pthread_create(&th, NULL, floor_server, sh) != 0)
				return 1;
			k_floor<<<1, 32>>>(sh, rows[r].layout, rows[r].lanes, rows[r].n, iters, warm, lat, bad);
			BENCH_CK(cudaDeviceSynchronize());
			sh->w.stop = 1;
			pthread_join(th, NULL);
			unsigned nbad;
			BENCH_CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
			BENCH_CK(cudaMemcpy(host_lat, lat, sizeof(*host_lat) * iters, cudaMemcpyDeviceToHost));
			qsort(host_lat, iters, sizeof(*host_lat), cmp_u64);
			double p50 = host_lat[iters / 2] / 1e3, p99 = host_lat[iters * 99 / 100] / 1e3;
			if (rows[r].layout == LAYOUT_WORD)
				word_p50[rows[r].lanes == 32] = p50;
			printf("| %s | %d | %u | %.2f | %.2f | %.2fx |%s\n", layout_name[rows[r].layout], rows[r].lanes,
			       rows[r].n, p50, p99, p50 / word_p50[rows[r].lanes == 32], nbad ? " WRONG BYTES" : "");
			if (nbad)
				return 1;
		}
	}
	free(host_lat);
	cudaFree(lat);
	cudaFree(bad);
	cudaFreeHost(sh);
	return 0;
}
