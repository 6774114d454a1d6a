/* SPDX-License-Identifier: MIT */
/*
 * One call from every resident warp of the whole GPU at once (SMs x resident
 * warps per SM), without deadlock: with the default port count (one per
 * resident warp), then with far fewer ports than warps (warps queue for
 * port locks). Also checks that the kernel was really fully resident.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"

/* At most 32 registers (2048 threads per SM / 128 a block = 16 blocks), so
 * that every warp slot of every SM can be resident at once. */
static __global__ void __launch_bounds__(128, 16)
	k_all(gpusys_dev_t dev, unsigned int *errors, unsigned int *calls, int echo)
{
	int rc;
	if (echo) {
		uint32_t v = blockIdx.x * blockDim.x + threadIdx.x, back = 0, got = 0;
		rc = gpusys_echo(dev, &v, 4, &back, 4, &got);
		if (!rc && (got != 4 || back != v))
			rc = 1;
	} else {
		rc = gpusys_noop(dev);
	}
	if (rc)
		atomicAdd(errors, 1u);
	atomicAdd(calls, 1u);
}

int main(void)
{
	gt_name = "test_allwarps";
	gt_require_gpu();
	gt_start_daemon(NULL);

	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	const int block = 128;
	int per_sm = 0;
	GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_all, block, 0));
	int ideal = prop.maxThreadsPerMultiProcessor / block;
	int grid = prop.multiProcessorCount * per_sm;
	long warps = (long)grid * block / 32;
	printf("%s: %d SMs, %d threads/SM, %d blocks of %d resident per SM (ideal %d): %d blocks, %ld warps\n",
	       prop.name, prop.multiProcessorCount, prop.maxThreadsPerMultiProcessor, per_sm, block, ideal, grid,
	       warps);

	unsigned int *d, h[2];
	GT_CUDA(cudaMalloc(&d, 2 * sizeof(unsigned int)));
	struct {
		uint32_t ports;
		int echo;
		const char *name;
	} cases[] = {
		{ 1, 0, "noop, one port per resident warp" },
		{ 1, 1, "echo, one port per resident warp" },
		{ 0, 0, "noop, default ports" },
		{ 64, 0, "noop, 64 ports" },
		{ 7, 1, "echo, 7 ports" },
	};
	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		/* ports 1 stands for one per warp slot: SMs x 64 (the port hint's range) */
		uint32_t ports = cases[c].ports == 1 ? (uint32_t)prop.multiProcessorCount * 64u : cases[c].ports;
		gpusys_t *g = gt_attach(0, ports);
		GT_CUDA(cudaMemset(d, 0, 2 * sizeof(unsigned int)));
		uint64_t before = gpusys_progress(g);
		double t0 = gt_now();
		k_all<<<grid, block>>>(gpusys_device(g), d, d + 1, cases[c].echo);
		GT_CUDA(cudaGetLastError());
		int rc = gpusys_synchronize(g, NULL, 60000);
		double t1 = gt_now();
		GT_CHECK(rc == 0, "%s: gpusys_synchronize: %s (deadlock?)", cases[c].name, gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
		GT_CHECK(h[0] == 0, "%s: %u lanes failed", cases[c].name, h[0]);
		GT_CHECK(h[1] == (unsigned)(grid * block), "%s: %u calls, expected %d", cases[c].name, h[1],
			 grid * block);
		uint64_t reqs = gpusys_progress(g) - before;
		GT_CHECK(reqs >= (uint64_t)warps, "%s: %llu requests for %ld warps", cases[c].name,
			 (unsigned long long)reqs, warps);
		printf("ok %s (%u ports, %s): %ld warps, %llu requests in %.1f ms\n", cases[c].name,
		       gpusys_num_ports(g), gt_kind_name(gpusys_memory_kind(g)), warps, (unsigned long long)reqs,
		       (t1 - t0) * 1e3);
		gpusys_detach(g);
	}
	GT_CUDA(cudaFree(d));
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	printf("test_allwarps: all passed\n");
	return 0;
}
