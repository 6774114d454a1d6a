/* SPDX-License-Identifier: MIT */
/*
 * gpusysd killed (SIGKILL: it writes nothing on the way out) while warps of
 * a running kernel call it in a loop: libgpusys's watchdog sees the socket
 * hang up and sets client_host_state = ABORT, so every warp's call returns
 * -ESHUTDOWN instead of spinning forever, the kernel ends, and
 * gpusys_synchronize reports -ESHUTDOWN. For each channel memory kind.
 *
 * And a restart (SIGTERM with restart_grace_ms, docs/RESTART.md) while a
 * kernel's warps spin on ECHO: the watchdog re-offers the memfd channel to
 * the next gpusysd, and every call returns its own payload (or
 * -ECONNABORTED, not run): the kernel sees a pause, never -ESHUTDOWN.
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


static __global__ void k_echo_until(gpusys_dev_t dev, volatile int *stop, int *bad_rc, unsigned long long *calls,
				    unsigned long long *aborted, unsigned long long *wrong)
{
	unsigned long long n = 0, ab = 0, wr = 0;
	const unsigned long long me = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	for (unsigned long long i = 0; !*stop; i++) {
		unsigned long long in = me << 32 | (i & 0xffffffffu), out = 0;
		uint32_t len = 0;
		int rc = gpusys_echo(dev, &in, sizeof(in), &out, sizeof(out), &len);
		if (rc == -ECONNABORTED) {
			ab++;
			continue;
		}
		if (rc) {
			atomicCAS(bad_rc, 0, rc);
			break;
		}
		n++;
		wr += out != in || len != sizeof(in);
	}
	atomicAdd(calls, n);
	atomicAdd(aborted, ab);
	atomicAdd(wrong, wr);
}

/* SIGTERM the daemon and start another on the same directory. */
static pid_t restart_daemon(void)
{
	const char *path = getenv("GPUSYSD") ? getenv("GPUSYSD") : GPUSYSD_PATH;
	kill(gt_daemon, SIGTERM);
	waitpid(gt_daemon, NULL, 0);
	gt_daemon = fork();
	if (gt_daemon == 0) {
		execl(path, path, "--foreground", "--runtime-dir", gt_dir, (char *)NULL);
		_exit(127);
	}
	return gt_daemon;
}

static void run_restart(void)
{
	/* Every daemon of this case hands over (the restarted ones too). */
	setenv("GPUSYSD_RESTART_GRACE_MS", "5000", 1);
	gt_start_daemon(NULL);
	gpusys_t *g = gt_attach(1u << GPUSYS_MEMORY_MEMFD, 0);
	struct {
		int bad_rc;
		unsigned long long calls, aborted, wrong;
	} *d, h;
	int *stop;
	GT_CUDA(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
	*stop = 0;
	GT_CUDA(cudaMalloc(&d, sizeof(*d)));
	GT_CUDA(cudaMemset(d, 0, sizeof(*d)));
	const int grid = 132, block = 64;
	k_echo_until<<<grid, block>>>(gpusys_device(g), stop, &d->bad_rc, &d->calls, &d->aborted, &d->wrong);
	GT_CUDA(cudaGetLastError());
	usleep(300000);
	const int restarts = 3;
	double worst = 0;
	for (int r = 0; r < restarts; r++) {
		double t0 = gt_now();
		restart_daemon();
		/* Served again: the kernel's calls reach the new daemon. */
		char buf[4096];
		int up = 0;
		for (int i = 0; i < 500 && !up; i++) {
			const char *at = gt_control("{\"cmd\":\"status\"}\n", buf, sizeof(buf)) == 0
						 ? strstr(buf, "\"clients_attached\"")
						 : NULL;
			up = at && strchr(at, ':') && strtol(strchr(at, ':') + 1, NULL, 10) >= 1;
			if (!up)
				usleep(10000);
		}
		GT_CHECK(up, "restart %d: the next gpusysd has not taken the client back within 5 s", r);
		double dt = gt_now() - t0;
		worst = dt > worst ? dt : worst;
		usleep(200000);
	}
	*stop = 1;
	int rc = gpusys_synchronize(g, NULL, 20000);
	GT_CHECK(rc == 0, "gpusys_synchronize after %d restarts: %s", restarts, gpusys_strerror(rc));
	GT_CUDA(cudaDeviceSynchronize());
	GT_CUDA(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h.bad_rc == 0, "a call failed with %d across the restarts", h.bad_rc);
	GT_CHECK(h.wrong == 0, "%llu echoes came back with another payload", h.wrong);
	printf("ok restart: %d SIGTERM restarts under %d spinning threads: %llu echoes, %llu refused unrun, 0 "
	       "wrong; slowest stop-to-served %.0f ms\n",
	       restarts, grid * block, h.calls, h.aborted, worst * 1e3);
	GT_CUDA(cudaFree(d));
	GT_CUDA(cudaFreeHost(stop));
	gpusys_detach(g);
	gt_stop_daemon();
	unsetenv("GPUSYSD_RESTART_GRACE_MS");
}

int main(void)
{
	gt_name = "test_daemon_death";
	gt_require_gpu();
	run(GPUSYS_MEMORY_CUDA_VMM);
	run(GPUSYS_MEMORY_MEMFD);
	run_restart();
	printf("test_daemon_death: all passed\n");
	return 0;
}
