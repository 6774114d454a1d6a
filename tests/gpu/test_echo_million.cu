/* SPDX-License-Identifier: MIT */
/*
 * 10^6 ECHO calls with random payloads (0..256 bytes: inline and streamed),
 * each verified in the kernel, from every SM at once.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"

#define MAX_LEN 256u

static __device__ uint32_t xorshift(uint32_t *s)
{
	uint32_t x = *s;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *s = x;
}

static __global__ void k_echo(gpusys_dev_t dev, uint32_t seed, int iters, unsigned long long *bytes,
			      unsigned int *errors, unsigned int *calls, int *first)
{
	uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t s = seed ^ (tid * 2654435761u) ^ 0x9e3779b9u;
	uint8_t in[MAX_LEN], out[MAX_LEN];
	for (int i = 0; i < iters; i++) {
		uint32_t len = xorshift(&s) % (MAX_LEN + 1);
		for (uint32_t b = 0; b < len; b += 4) {
			uint32_t v = xorshift(&s);
			for (uint32_t k = 0; k < 4 && b + k < len; k++)
				in[b + k] = (uint8_t)(v >> (8 * k));
		}
		uint32_t got = 0xffffffffu;
		int rc = gpusys_echo(dev, in, len, out, MAX_LEN, &got);
		int bad = rc != 0 || got != len;
		for (uint32_t b = 0; !bad && b < len; b++)
			bad = out[b] != in[b];
		if (bad && atomicAdd(errors, 1u) == 0)
			*first = rc ? rc : 1000000 + (int)got;
		atomicAdd(calls, 1u);
		atomicAdd(bytes, (unsigned long long)len);
	}
}

int main(void)
{
	gt_name = "test_echo_million";
	gt_require_gpu();
	gt_start_daemon(NULL);

	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	const int block = 256, grid = prop.multiProcessorCount * 2;
	const int iters = (1000000 + grid * block - 1) / (grid * block);
	gpusys_t *g = gt_attach(0, 0);

	struct {
		unsigned long long bytes;
		unsigned int errors, calls;
		int first;
	} *d, h;
	GT_CUDA(cudaMalloc(&d, sizeof(*d)));
	GT_CUDA(cudaMemset(d, 0, sizeof(*d)));
	uint32_t seed = (uint32_t)time(NULL);
	double t0 = gt_now();
	k_echo<<<grid, block>>>(gpusys_device(g), seed, iters, &d->bytes, &d->errors, &d->calls, &d->first);
	GT_CUDA(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 120000);
	double t1 = gt_now();
	GT_CHECK(rc == 0, "gpusys_synchronize: %s", gpusys_strerror(rc));
	GT_CUDA(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h.errors == 0, "%u of %u echoes wrong (first: %d), seed %u", h.errors, h.calls, h.first, seed);
	GT_CHECK(h.calls >= 1000000u, "only %u calls", h.calls);
	printf("ok %u echo calls (%s), %.1f MB each way, seed %u, %.2f s: %.2f M lane calls/s\n", h.calls,
	       gt_kind_name(gpusys_memory_kind(g)), h.bytes / 1e6, seed, t1 - t0, h.calls / (t1 - t0) / 1e6);
	GT_CUDA(cudaFree(d));
	gpusys_detach(g);
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	printf("test_echo_million: all passed\n");
	return 0;
}
