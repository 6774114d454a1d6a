/* SPDX-License-Identifier: MIT */
/*
 * A client whose kernel traps after some calls: its process dies with the
 * CUDA context broken. gpusysd must survive, free that client (the control
 * status no longer lists it) and serve the next client.
 */
#include "gpu_test.h"
#include "gpusys/device.cuh"

static __global__ void k_trap(gpusys_dev_t dev, int calls)
{
	for (int i = 0; i < calls; i++) {
		uint32_t v = threadIdx.x + 1000u * (uint32_t)i, back = 0;
		gpusys_echo(dev, &v, 4, &back, 4, NULL);
	}
	if (threadIdx.x == 0)
		__trap();
}

static __global__ void k_noop(gpusys_dev_t dev, unsigned int *errors)
{
	if (gpusys_noop(dev))
		atomicAdd(errors, 1u);
}

static long long clients_attached(void)
{
	char buf[65536];
	int rc = gt_control("{\"cmd\":\"status\"}\n", buf, sizeof(buf));
	if (rc)
		gt_fail("control status: %s", strerror(-rc));
	return gt_json_int(buf, "clients_attached");
}

int main(void)
{
	gt_name = "test_trap";
	gt_require_gpu_forked();
	gt_start_daemon(NULL);

	for (int round = 0; round < 2; round++) {
		pid_t pid = fork();
		if (pid == 0) {
			gpusys_t *g = gt_attach(0, 0);
			k_trap<<<2, 64>>>(gpusys_device(g), 3 + round);
			int rc = gpusys_synchronize(g, NULL, 30000);
			fprintf(stderr, "test_trap: child: gpusys_synchronize after __trap: %s\n", gpusys_strerror(rc));
			/* Die without detaching, as a crashed program does. */
			_exit(rc == -EIO ? 0 : 3);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		GT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x", round, st);
		GT_CHECK(gt_daemon_alive(), "gpusysd died after client %d trapped", round);
		double t0 = gt_now();
		long long n;
		while ((n = clients_attached()) != 0 && gt_now() - t0 < 10)
			usleep(20000);
		GT_CHECK(n == 0, "the trapped client is still listed (%lld attached)", n);
		printf("ok trapped client %d freed after %.0f ms\n", round, (gt_now() - t0) * 1e3);
	}

	/* The next client is served (this process initialises CUDA only now). */
	gpusys_t *g = gt_attach(0, 0);
	GT_CHECK(clients_attached() == 1, "new client not listed");
	unsigned int *d, h = 1;
	GT_CUDA(cudaMalloc(&d, sizeof(*d)));
	GT_CUDA(cudaMemset(d, 0, sizeof(*d)));
	k_noop<<<132, 256>>>(gpusys_device(g), d);
	GT_CUDA(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 30000);
	GT_CHECK(rc == 0, "next client: gpusys_synchronize: %s", gpusys_strerror(rc));
	GT_CUDA(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h == 0, "next client: %u failed calls", h);
	printf("ok next client served (%s)\n", gt_kind_name(gpusys_memory_kind(g)));
	GT_CUDA(cudaFree(d));
	gpusys_detach(g);
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	printf("test_trap: all passed\n");
	return 0;
}
