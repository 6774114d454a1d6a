/* SPDX-License-Identifier: MIT */
/*
 * CUDA clients of one GPU coming and going while another sits idle. An
 * idle client's channel has a doorbell wait pending on the GPU (wake_cuda.c);
 * gpusysd's main thread makes CUDA calls at every CUDA client's attach and
 * detach, and until 6370714 (one GPU) those stalled behind the idle
 * client's wait, with the main thread and every later hello and detach,
 * until the idle client rang: `gpusys-bench file --halves 16` got no
 * welcome within 10 s (bench/RESULTS.md, "Twelfth session"). Here: one
 * client idle long enough for its wait to be armed, three others attach,
 * call and detach in turn, each attach and detach bounded, then the idle
 * one calls again; for each channel memory kind.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"

static __global__ void k_calls(gpusys_dev_t dev, int *bad)
{
	uint32_t in = threadIdx.x * 7u + 1u, out = 0, got = 0;
	int rc = gpusys_noop(dev);
	if (rc == 0)
		rc = gpusys_echo(dev, &in, sizeof(in), &out, sizeof(out), &got);
	if (rc != 0 || got != sizeof(in) || out != in)
		atomicAdd(bad, 1);
}

/* One kernel of a warp on g: every lane's NOOP and ECHO answered. */
static void calls_on(gpusys_t *g, int *bad, const char *who, const char *kind)
{
	GT_CUDA(cudaMemset(bad, 0, sizeof(int)));
	k_calls<<<1, 32>>>(gpusys_device(g), bad);
	GT_CUDA(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 10000);
	GT_CHECK(rc == 0, "%s (%s): gpusys_synchronize: %s", who, kind, gpusys_strerror(rc));
	int h = -1;
	GT_CUDA(cudaMemcpy(&h, bad, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h == 0, "%s (%s): %d lanes' calls failed", who, kind, h);
}

static void run(uint32_t kind)
{
	const char *kn = gt_kind_name(kind);
	int *bad;
	GT_CUDA(cudaMalloc(&bad, sizeof(int)));
	gpusys_t *idle = gt_attach(1u << kind, 0);
	calls_on(idle, bad, "the idle client, first", kn);
	/* Quiet for far longer than gpusysd's pollers spin (idle_spin_us,
	 * 200 us): poller 0 dozes and arms the idle channel's doorbell wait. */
	usleep(300000);
	for (int i = 0; i < 3; i++) {
		char who[64];
		snprintf(who, sizeof(who), "client %d of 3", i + 1);
		double t0 = gt_now();
		gpusys_t *g = gt_attach(1u << kind, 0); /* fails after 10 s without a welcome */
		double attach_s = gt_now() - t0;
		GT_CHECK(attach_s < 5.0, "%s (%s): attach took %.1f s beside an idle client", who, kn, attach_s);
		calls_on(g, bad, who, kn);
		t0 = gt_now();
		gpusys_detach(g);
		double detach_s = gt_now() - t0;
		GT_CHECK(detach_s < 5.0, "%s (%s): detach took %.1f s beside an idle client", who, kn, detach_s);
		printf("ok %s (%s): attach %.0f ms, detach %.0f ms, the idle client untouched\n", who, kn,
		       attach_s * 1e3, detach_s * 1e3);
		usleep(50000); /* gpusysd dozes again between them */
	}
	calls_on(idle, bad, "the idle client, again", kn);
	gpusys_detach(idle);
	GT_CUDA(cudaFree(bad));
}

int main(void)
{
	return gt_main_each_kind("test_gpu_clients", run);
}
