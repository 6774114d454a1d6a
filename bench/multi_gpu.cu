/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench multigpu: one process drives every GPU it sees through one
 * gpusysd (issue 17). Each GPU gets its own attach (its channel named by the
 * GPU's UUID) and a kernel of all its warps making NOOP calls; first each GPU
 * alone, then all at once. The figure: aggregate warp requests/s of all GPUs
 * at once against one GPU alone, in the same run (the daemon serves the GPUs'
 * channels with the same pollers, so this is where they would compete).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "gpusys/device.cuh"
#include "gpusys/gpusys.h"

#define MAX_DEV 16

static __global__ void k_noops(gpusys_dev_t dev, int iters, int *err)
{
	for (int i = 0; i < iters; i++) {
		int rc = gpusys_noop(dev);
		if (rc)
			atomicCAS(err, 0, rc);
	}
}

struct gpu_run {
	int device;
	gpusys_t *g;
	cudaStream_t stream;
	int *derr;
	int grid, block;
	long warps;
	char name[64];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int launch(struct gpu_run *r, int iters)
{
	if (cudaSetDevice(r->device) != cudaSuccess)
		return -ENODEV;
	k_noops<<<r->grid, r->block, 0, r->stream>>>(gpusys_device_on(r->g, r->stream), iters, r->derr);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

static int finish(struct gpu_run *r)
{
	int rc = gpusys_synchronize(r->g, r->stream, 120000);
	if (rc) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d: %s\n", r->device, gpusys_strerror(rc));
		return rc;
	}
	int err = 0;
	cudaSetDevice(r->device);
	if (cudaMemcpy(&err, r->derr, sizeof(err), cudaMemcpyDeviceToHost) != cudaSuccess || err) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d: a call failed: %s\n", r->device, gpusys_strerror(err));
		return err ? err : -EIO;
	}
	return 0;
}

extern "C" int bench_multi_gpu(int argc, char **argv)
{
	int iters = 2000, warps_per_sm = 64, opt;
	const char *runtime_dir = NULL, *daemon = NULL;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },  { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' }, { "warps-per-sm", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'w': warps_per_sm = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: gpusys-bench multigpu [--iters N] [--warps-per-sm N] "
					"[--runtime-dir DIR | --daemon PATH]\n");
			return 2;
		}
	}
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;

	int n = 0, rc = 1;
	double alone_sum = 0;
	struct gpu_run runs[MAX_DEV];
	memset(runs, 0, sizeof(runs));
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		fprintf(stderr, "gpusys-bench multigpu: no GPU\n");
		goto out;
	}
	if (n > MAX_DEV)
		n = MAX_DEV;
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		cudaDeviceProp prop;
		r->device = d;
		if (cudaSetDevice(d) != cudaSuccess || cudaGetDeviceProperties(&prop, d) != cudaSuccess)
			goto out;
		snprintf(r->name, sizeof(r->name), "%.40s, PCI %04x:%02x:%02x", prop.name, prop.pciDomainID,
			 prop.pciBusID, prop.pciDeviceID);
		struct gpusys_options o;
		memset(&o, 0, sizeof(o));
		o.runtime_dir = runtime_dir;
		o.cuda_device = d;
		int a = gpusys_attach(&o, &r->g);
		if (a) {
			fprintf(stderr, "gpusys-bench multigpu: attach GPU %d: %s\n", d, gpusys_strerror(a));
			goto out;
		}
		if (cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess ||
		    cudaMalloc(&r->derr, sizeof(int)) != cudaSuccess || cudaMemset(r->derr, 0, sizeof(int)) != cudaSuccess)
			goto out;
		r->block = 256;
		r->warps = (long)prop.multiProcessorCount * warps_per_sm;
		r->grid = (int)(r->warps * 32 / r->block);
		if (launch(r, 5) || finish(r)) /* warm-up */
			goto out;
	}

	printf("gpusys-bench multigpu: %d GPU%s, NOOP from every warp, %d calls each\n\n", n, n == 1 ? "" : "s", iters);
	printf("| run | GPU | warps | time | M warp requests/s |\n|---|---|---|---|---|\n");
	for (int d = 0; d < n; d++) {
		double t0 = now_s();
		if (launch(&runs[d], iters) || finish(&runs[d]))
			goto out;
		double t = now_s() - t0, rate = (double)runs[d].warps * iters / t / 1e6;
		alone_sum += rate;
		printf("| alone | %d: %s | %ld | %.1f ms | %.2f |\n", d, runs[d].name, runs[d].warps, t * 1e3, rate);
	}
	{
		double t0 = now_s();
		for (int d = 0; d < n; d++)
			if (launch(&runs[d], iters))
				goto out;
		long total = 0;
		for (int d = 0; d < n; d++) {
			if (finish(&runs[d]))
				goto out;
			total += runs[d].warps;
		}
		double t = now_s() - t0, rate = (double)total * iters / t / 1e6;
		printf("| all at once | %d GPUs | %ld | %.1f ms | %.2f |\n", n, total, t * 1e3, rate);
		printf("\naggregate / one GPU alone (mean of the alone rows): %.2fx\n", rate / (alone_sum / n));
	}
	rc = 0;
out:
	for (int d = 0; d < n; d++) {
		if (runs[d].derr) {
			cudaSetDevice(d);
			cudaFree(runs[d].derr);
		}
		if (runs[d].stream)
			cudaStreamDestroy(runs[d].stream);
		if (runs[d].g)
			gpusys_detach(runs[d].g);
	}
	bench_daemon_stop(&bd);
	return rc;
}
