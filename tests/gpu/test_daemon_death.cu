/* SPDX-License-Identifier: MIT */
/*
 * gpusysd killed (SIGKILL: it writes nothing on the way out) while warps of
 * a running kernel call it in a loop: libgpusys's watchdog sees the socket
 * hang up and sets client_host_state = ABORT, so every warp's call returns
 * -ESHUTDOWN instead of spinning forever, the kernel ends, and
 * gpusys_synchronize reports -ESHUTDOWN. For each channel memory kind.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"

static __global__ void k_until_error(gpusys_dev_t dev, unsigned long long max_calls, int *first_rc,
				     unsigned int *shutdown_lanes, unsigned long long *calls)
{
	int rc = 0;
	unsigned long long n = 0;
	while (n < max_calls && (rc = gpusys_noop(dev)) == 0)
		n++;
	atomicAdd(calls, n);
	if (rc == -ESHUTDOWN)
		atomicAdd(shutdown_lanes, 1u);
	else
		atomicCAS(first_rc, 0, rc ? rc : 1);
}

static void run(uint32_t kind)
{
	gt_start_daemon(NULL);
	gpusys_t *g = gt_attach(1u << kind, 0);
	struct {
		int first_rc;
		unsigned int shutdown_lanes;
		unsigned long long calls;
	} *d, h;
	GT_CUDA(cudaMalloc(&d, sizeof(*d)));
	GT_CUDA(cudaMemset(d, 0, sizeof(*d)));
	const int grid = 264, block = 128;
	k_until_error<<<grid, block>>>(gpusys_device(g), 1ull << 40, &d->first_rc, &d->shutdown_lanes, &d->calls);
	GT_CUDA(cudaGetLastError());
	usleep(300000);
	GT_CHECK(gt_daemon_alive(), "gpusysd died on its own");
	kill(gt_daemon, SIGKILL);
	double t0 = gt_now();
	int rc = gpusys_synchronize(g, NULL, 20000);
	double t1 = gt_now();
	GT_CHECK(rc == -ESHUTDOWN, "%s: gpusys_synchronize after the daemon died: %s (expected -ESHUTDOWN)",
		 gt_kind_name(kind), gpusys_strerror(rc));
	GT_CUDA(cudaDeviceSynchronize());
	GT_CUDA(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h.first_rc == 0, "%s: a call failed with %d before the daemon died", gt_kind_name(kind), h.first_rc);
	GT_CHECK(h.shutdown_lanes == (unsigned)(grid * block), "%s: %u of %d lanes saw -ESHUTDOWN",
		 gt_kind_name(kind), h.shutdown_lanes, grid * block);
	printf("ok %s: %llu calls, then every lane got -ESHUTDOWN; the kernel ended %.0f ms after the kill\n",
	       gt_kind_name(kind), h.calls, (t1 - t0) * 1e3);
	GT_CUDA(cudaFree(d));
	gpusys_detach(g);
	gt_stop_daemon();
}

int main(void)
{
	gt_name = "test_daemon_death";
	gt_require_gpu();
	run(GPUSYS_MEMORY_CUDA_VMM);
	run(GPUSYS_MEMORY_MEMFD);
	printf("test_daemon_death: all passed\n");
	return 0;
}
