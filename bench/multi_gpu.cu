/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench multigpu: one process drives every GPU it sees through one
 * gpusysd (issues 17 and 34). Each GPU gets its own attach (its channel
 * named by the GPU's UUID) and a kernel of all its warps making NOOP calls;
 * first each GPU alone, then all at once. In the same run, before gpusysd
 * serves anything, the same kernels against the floor: the real client
 * code against a minimal server of each GPU's own (bench/cpu_server.h),
 * each GPU alone, then all at once. So one table holds what issue 34 judges:
 * all GPUs at once against one alone, and each GPU against its own floor.
 *
 * Rates of a run are its requests over the wall time from its first launch
 * to its last kernel's end; a GPU's own rate within an all-at-once run is
 * timed by events on its stream (events of two devices cannot be compared).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
#include "cpu_server.h"
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "libclient/attach/dev_handle.h"
}
#include "gpusys/device.cuh"

#define MAX_DEV 16

static __global__ void k_noops(gpusys_dev_t dev, int iters, int *err)
{
	for (int i = 0; i < iters; i++) {
		int rc = gpusys_noop(dev);
		if (rc)
			atomicCAS(err, 0, rc);
	}
}

/* M warp requests/s of the runs of one GPU. */
struct rates {
	double alone, at_once;
};

struct gpu_run {
	int device;
	gpusys_t *g;
	cudaStream_t stream;
	cudaEvent_t e0, e1;
	int *derr;
	int grid, block;
	long warps;
	char name[64];
	/* The floor: the client against a minimal server of this GPU's own. */
	struct cpu_server *mini; /* NULL: none (more GPUs than servers forked) */
	gpusys_dev_t floor_dev;
	void *floor_priv;
	struct rates gpusysd, floor;
};

/* The GPUs to fork minimal servers for, counted without CUDA (the servers
 * must be forked before this process touches it): the driver's GPUs, or as
 * many as CUDA_VISIBLE_DEVICES names when fewer. 1 when neither says. */
static int gpus_before_cuda(void)
{
	int n = 0;
	DIR *dir = opendir("/proc/driver/nvidia/gpus");
	if (dir) {
		struct dirent *e;
		while ((e = readdir(dir)))
			n += e->d_name[0] != '.';
		closedir(dir);
	}
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	if (vis) {
		int v = *vis ? 1 : 0;
		for (const char *c = vis; *c; c++)
			v += *c == ',';
		if (!n || v < n)
			n = v;
	}
	if (n < 1)
		n = 1;
	return n > MAX_DEV ? MAX_DEV : n;
}

static int launch(struct gpu_run *r, int floor, int iters)
{
	if (cudaSetDevice(r->device) != cudaSuccess)
		return -ENODEV;
	gpusys_dev_t dev = floor ? r->floor_dev : gpusys_device_on(r->g, r->stream);
	cudaEventRecord(r->e0, r->stream);
	k_noops<<<r->grid, r->block, 0, r->stream>>>(dev, iters, r->derr);
	cudaEventRecord(r->e1, r->stream);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

/* Wait for r's kernel; *rate (may be NULL): its M warp requests/s by its
 * events. */
static int finish(struct gpu_run *r, int floor, int iters, double *rate)
{
	const char *what = floor ? "client + minimal server" : "gpusysd";
	cudaSetDevice(r->device);
	int rc = floor ? (cudaStreamSynchronize(r->stream) == cudaSuccess ? 0 : -EIO)
		       : gpusys_synchronize(r->g, r->stream, 120000);
	if (rc) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d, %s: %s\n", r->device, what, gpusys_strerror(rc));
		return rc;
	}
	int err = 0;
	if (cudaMemcpy(&err, r->derr, sizeof(err), cudaMemcpyDeviceToHost) != cudaSuccess || err) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d, %s: a call failed: %s\n", r->device, what,
			gpusys_strerror(err));
		return err ? err : -EIO;
	}
	float ms = 0;
	if (rate && cudaEventElapsedTime(&ms, r->e0, r->e1) == cudaSuccess && ms > 0)
		*rate = (double)r->warps * iters / (ms / 1e3) / 1e6;
	return 0;
}

/* Each GPU of runs[0..n) (those with a floor, when floor) alone, then all
 * at once; the rates into each GPU's rates and *aggregate. */
static int measure(struct gpu_run *runs, int n, int floor, int iters, double *aggregate)
{
	long total = 0;
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		struct rates *rt = floor ? &r->floor : &r->gpusysd;
		if (floor && !r->mini)
			continue;
		double t0 = bench_now_s();
		if (launch(r, floor, iters) || finish(r, floor, iters, NULL))
			return -1;
		rt->alone = (double)r->warps * iters / (bench_now_s() - t0) / 1e6;
	}
	double t0 = bench_now_s();
	for (int d = 0; d < n; d++)
		if ((!floor || runs[d].mini) && launch(&runs[d], floor, iters))
			return -1;
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		if (floor && !r->mini)
			continue;
		if (finish(r, floor, iters, floor ? &r->floor.at_once : &r->gpusysd.at_once))
			return -1;
		total += r->warps;
	}
	*aggregate = (double)total * iters / (bench_now_s() - t0) / 1e6;
	return 0;
}

/* This GPU's channel on its minimal server, mapped for it, and a warm-up. */
static int floor_setup(struct gpu_run *r)
{
	void *dbase;
	size_t priv = MINI_PORTS * sizeof(struct gpusys_port_lock) + 64;
	if (cudaHostRegister(r->mini->host, r->mini->bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
	    cudaSuccess) {
		r->mini = NULL; /* not registered: nothing to undo */
		return -EIO;
	}
	if (cudaHostGetDevicePointer(&dbase, r->mini->host, 0) != cudaSuccess ||
	    cudaMalloc(&r->floor_priv, priv) != cudaSuccess || cudaMemset(r->floor_priv, 0, priv) != cudaSuccess)
		return -EIO;
	gpusys_dev_fill(&r->floor_dev, dbase, (const struct gpusys_channel_header *)r->mini->host,
			(struct gpusys_port_lock *)r->floor_priv,
			(unsigned long long *)((char *)r->floor_priv + MINI_PORTS * sizeof(struct gpusys_port_lock)));
	return launch(r, 1, 5) || finish(r, 1, 5, NULL) ? -EIO : 0;
}

static void floor_teardown(struct gpu_run *r)
{
	if (!r->mini)
		return;
	cudaSetDevice(r->device);
	cudaFree(r->floor_priv);
	r->floor_priv = NULL;
	cudaHostUnregister(r->mini->host);
	r->mini = NULL;
}

static void print_ratio(double num, double den)
{
	if (num > 0 && den > 0)
		printf(" %.2fx |\n", num / den);
	else
		printf(" - |\n");
}

static void print_rate(double rate)
{
	if (rate > 0)
		printf(" %.2f |", rate);
	else
		printf(" - |");
}

static void print_table(const struct gpu_run *runs, int n, int iters, double agg, double floor_agg)
{
	double alone_sum = 0, floor_alone_sum = 0;
	int floors = 0;
	printf("gpusys-bench multigpu: %d GPU%s, NOOP from every warp, %d calls each; the floor: the same "
	       "kernel, the gpusys client against a minimal server of the GPU's own (%u threads)\n\n",
	       n, n == 1 ? "" : "s", iters, MINI_THREADS);
	printf("| run | GPU | warps | gpusysd M warp requests/s | floor M warp requests/s | gpusysd / floor |\n"
	       "|---|---|---|---|---|---|\n");
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		alone_sum += r->gpusysd.alone;
		if (r->floor.alone > 0) {
			floor_alone_sum += r->floor.alone;
			floors++;
		}
		printf("| alone | %d: %s | %ld |", d, r->name, r->warps);
		print_rate(r->gpusysd.alone);
		print_rate(r->floor.alone);
		print_ratio(r->gpusysd.alone, r->floor.alone);
	}
	long total = 0;
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		total += r->warps;
		printf("| all at once, this GPU's kernel | %d | %ld |", d, r->warps);
		print_rate(r->gpusysd.at_once);
		print_rate(r->floor.at_once);
		print_ratio(r->gpusysd.at_once, r->floor.at_once);
	}
	printf("| all at once | %d GPUs | %ld |", n, total);
	print_rate(agg);
	print_rate(floors == n ? floor_agg : 0);
	print_ratio(agg, floors == n ? floor_agg : 0);

	printf("\nall GPUs at once / one GPU alone (mean of the alone rows): gpusysd %.2fx", agg / (alone_sum / n));
	if (floors == n)
		printf(", floor %.2fx", floor_agg / (floor_alone_sum / n));
	printf(" (issue 34's target for gpusysd: >= 1.8x with two GPUs)\n");
	printf("each GPU / its own floor (issue 34's target: >= 0.8x), alone:");
	for (int d = 0; d < n; d++)
		if (runs[d].floor.alone > 0)
			printf(" GPU %d %.2fx", d, runs[d].gpusysd.alone / runs[d].floor.alone);
	printf("; all at once:");
	for (int d = 0; d < n; d++)
		if (runs[d].floor.at_once > 0 && runs[d].gpusysd.at_once > 0)
			printf(" GPU %d %.2fx", d, runs[d].gpusysd.at_once / runs[d].floor.at_once);
	printf("\n");
	if (floors < n)
		printf("(%d GPU%s without a floor: minimal servers are forked before CUDA, for the GPUs "
		       "/proc/driver/nvidia/gpus and CUDA_VISIBLE_DEVICES name)\n",
		       n - floors, n - floors == 1 ? "" : "s");
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
	if (iters < 1 || warps_per_sm < 1) {
		fprintf(stderr, "gpusys-bench multigpu: --iters and --warps-per-sm must be positive\n");
		return 2;
	}

	/* Processes first: neither the minimal servers nor gpusysd may inherit
	 * a CUDA context. */
	static struct cpu_server minis[MAX_DEV];
	int nmini = 0, n = 0, rc = 1;
	for (int want = gpus_before_cuda(); nmini < want; nmini++) {
		memset(&minis[nmini], 0, sizeof(minis[nmini]));
		int m = mini_server_start(&minis[nmini], minis, (unsigned)nmini);
		if (m) {
			fprintf(stderr, "gpusys-bench multigpu: minimal server: %s\n", strerror(-m));
			break;
		}
	}
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	struct gpu_run runs[MAX_DEV];
	memset(runs, 0, sizeof(runs));
	double agg = 0, floor_agg = 0;
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		goto out;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		fprintf(stderr, "gpusys-bench multigpu: no GPU\n");
		n = 0;
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
		    cudaEventCreate(&r->e0) != cudaSuccess || cudaEventCreate(&r->e1) != cudaSuccess ||
		    cudaMalloc(&r->derr, sizeof(int)) != cudaSuccess || cudaMemset(r->derr, 0, sizeof(int)) != cudaSuccess)
			goto out;
		r->block = 256;
		r->warps = (long)prop.multiProcessorCount * warps_per_sm;
		r->grid = (int)(r->warps * 32 / r->block);
		if (launch(r, 0, 5) || finish(r, 0, 5, NULL)) /* warm-up */
			goto out;
		if (d < nmini) {
			r->mini = &minis[d];
			if (floor_setup(r)) {
				fprintf(stderr, "gpusys-bench multigpu: GPU %d: the floor's channel failed\n", d);
				goto out;
			}
		}
	}

	/* The floors first, then their servers stopped: their spinning threads
	 * must not take CPUs from gpusysd's pollers. */
	if (measure(runs, n, 1, iters, &floor_agg))
		goto out;
	for (int d = 0; d < n; d++)
		floor_teardown(&runs[d]);
	for (int i = 0; i < nmini; i++)
		cpu_server_stop(&minis[i]);
	if (measure(runs, n, 0, iters, &agg))
		goto out;
	print_table(runs, n, iters, agg, floor_agg);
	rc = 0;
out:
	for (int d = 0; d < n; d++) {
		floor_teardown(&runs[d]);
		cudaSetDevice(d);
		if (runs[d].derr)
			cudaFree(runs[d].derr);
		if (runs[d].e0)
			cudaEventDestroy(runs[d].e0);
		if (runs[d].e1)
			cudaEventDestroy(runs[d].e1);
		if (runs[d].stream)
			cudaStreamDestroy(runs[d].stream);
		if (runs[d].g)
			gpusys_detach(runs[d].g);
	}
	for (int i = 0; i < nmini; i++)
		cpu_server_stop(&minis[i]);
	bench_daemon_stop(&bd);
	return rc;
}
