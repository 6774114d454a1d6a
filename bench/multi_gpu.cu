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
 * --op print and file do the same with the other services issue 34 names:
 * every thread printing lines (the print bench's kernel, print_kernels.cuh)
 * into a file of its GPU's own, and every thread preading small blocks of
 * a page-cached file. They have no floor.
 *
 * Rates of a run are its units (warp requests, lines in the file, reads)
 * over the wall time from its first launch until the last GPU's run was
 * waited for; a GPU's own rate within an all-at-once run is timed by
 * events on its stream (events of two devices cannot be compared).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
#include "cpu_server.h"
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "libclient/attach/dev_handle.h"
}
#include "gpusys/device.cuh"
#include "file_kernels.cuh"
#include "print_kernels.cuh"

#define MAX_DEV 16

/* The workloads, each measured alone on every GPU and on all at once. */
enum mg_work {
	MG_NOOP,  /* NOOPs through gpusysd */
	MG_FLOOR, /* the same NOOPs against a minimal server of the GPU's own */
	MG_PRINT, /* gpusys_printf lines into a file of the GPU's own */
	MG_FILE,  /* gpusys_pread of small blocks from a page-cached file */
	MG_NWORK,
};

/* What the runs are asked for (the options). */
struct mg_params {
	int warps_per_sm[MG_NWORK];
	int iters;                  /* NOOP calls per thread */
	int lines;                  /* print: lines per thread */
	int reads;                  /* file: preads per thread */
	unsigned read_bytes;        /* file: bytes per pread */
	unsigned long long blocks;  /* file: read_bytes blocks in the file */
};

static __global__ void k_noops(gpusys_dev_t dev, int iters, int *err)
{
	for (int i = 0; i < iters; i++) {
		int rc = gpusys_noop(dev);
		if (rc)
			atomicCAS(err, 0, rc);
	}
}

/* Every thread preads reads blocks of bytes from h into its own piece of
 * buf and checks the block's first and last words (the file holds each
 * 8-byte word's index): a read that returned the wrong bytes fails the
 * run instead of counting. Consecutive threads read consecutive blocks, so
 * a warp's request covers 32 blocks of the file, as a kernel reading a
 * table in pieces would. */
static __global__ void k_preads(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned bytes,
				unsigned long long blocks, int reads, int *err)
{
	unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long nthreads = (unsigned long long)gridDim.x * blockDim.x;
	const uint64_t *w = (const uint64_t *)(buf + t * bytes);
	for (int i = 0; i < reads; i++) {
		long long off = (long long)((t + (unsigned long long)i * nthreads) % blocks * bytes);
		long long r = gpusys_pread(dev, (gpusys_fd_t)h, buf + t * bytes, bytes, off);
		int rc = r == (long long)bytes ? 0 : r < 0 ? (int)r : -EIO;
		if (!rc && (w[0] != (uint64_t)off / 8 || w[bytes / 8 - 1] != ((uint64_t)off + bytes) / 8 - 1))
			rc = -EBADMSG;
		if (rc)
			atomicCAS(err, 0, rc);
	}
}

/* M units/s of one workload on one GPU: warp requests (NOOP), lines
 * (print), reads (file). */
struct rates {
	double alone, at_once;
};

struct gpu_run {
	int device, sms;
	gpusys_t *g;
	cudaStream_t stream;
	cudaEvent_t e0, e1;
	int *derr; /* [0]: the kernel's first failure (an errno; print: failed lines), [1]: the flush's */
	double t_done; /* bench_now_s() when its last run was waited for */
	char name[64];
	/* The floor: the client against a minimal server of this GPU's own. */
	struct cpu_server *mini; /* NULL: none (more GPUs than servers forked) */
	gpusys_dev_t floor_dev;
	void *floor_priv;
	/* print: the file this GPU's client prints into (its stdout at attach). */
	int print_fd; /* -1: none */
	char print_path[PATH_MAX];
	double line_bytes; /* bytes a line in the last print run */
	/* file: the handle in gpusysd and every thread's read buffer. */
	long long fh; /* < 0: none */
	uint8_t *rbuf;
	struct rates rt[MG_NWORK];
};

/* A run's grid for w: warps_per_sm warps on every SM, in blocks of 256
 * threads, or of one warp when 256 does not divide them (the warps column
 * must be what ran). */
static void shape(const struct gpu_run *r, const struct mg_params *p, enum mg_work w, int *grid, int *block)
{
	int wps = p->warps_per_sm[w];
	*block = wps % 8 ? 32 : 256;
	*grid = r->sms * wps * 32 / *block;
}

static long warps_of(const struct gpu_run *r, const struct mg_params *p, enum mg_work w)
{
	return (long)r->sms * p->warps_per_sm[w];
}

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

static int launch(struct gpu_run *r, const struct mg_params *p, enum mg_work w)
{
	int grid, block;
	if (cudaSetDevice(r->device) != cudaSuccess)
		return -ENODEV;
	shape(r, p, w, &grid, &block);
	gpusys_dev_t dev = w == MG_FLOOR ? r->floor_dev : gpusys_device_on(r->g, r->stream);
	cudaEventRecord(r->e0, r->stream);
	switch (w) {
	case MG_NOOP:
	case MG_FLOOR: k_noops<<<grid, block, 0, r->stream>>>(dev, p->iters, r->derr); break;
	case MG_PRINT:
		/* The flush in the same stream: the stream's end event is
		 * when the last line is in the file. */
		k_print_lines<<<grid, block, 0, r->stream>>>(dev, p->lines, r->derr);
		k_print_flush<<<1, 1, 0, r->stream>>>(dev, r->derr + 1);
		break;
	case MG_FILE:
		k_preads<<<grid, block, 0, r->stream>>>(dev, r->fh, r->rbuf, p->read_bytes, p->blocks, p->reads,
							r->derr);
		break;
	case MG_NWORK: return -EINVAL;
	}
	cudaEventRecord(r->e1, r->stream);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

static const char *work_name(enum mg_work w)
{
	static const char *const names[MG_NWORK] = { "gpusysd", "client + minimal server", "print", "file" };
	return w < MG_NWORK ? names[w] : "?";
}

/* Wait for r's run (its kernels and every request they made); r->t_done:
 * when it was done, taken before anything else is read. */
static int wait_run(struct gpu_run *r, enum mg_work w)
{
	cudaSetDevice(r->device);
	int rc = w == MG_FLOOR ? (cudaStreamSynchronize(r->stream) == cudaSuccess ? 0 : -EIO)
			       : gpusys_synchronize(r->g, r->stream, 120000);
	r->t_done = bench_now_s();
	if (rc)
		fprintf(stderr, "gpusys-bench multigpu: GPU %d, %s: %s\n", r->device, work_name(w), gpusys_strerror(rc));
	return rc;
}

/* Before a print run: the GPU's file emptied, so that its lines can be
 * counted after. The daemon's descriptor shares the file offset: rewinding
 * ours rewinds it. */
static int prepare(struct gpu_run *r, enum mg_work w)
{
	if (w == MG_PRINT && (ftruncate(r->print_fd, 0) < 0 || lseek(r->print_fd, 0, SEEK_SET) < 0)) {
		int e = errno;
		fprintf(stderr, "gpusys-bench multigpu: %s: %s\n", r->print_path, strerror(e));
		return -e;
	}
	return 0;
}

/* After wait_run: the run's failures, and *units, what it did (warp
 * requests, lines found in the file, reads); *event_s (may be NULL): its
 * time by its stream's events. */
static int tally(struct gpu_run *r, const struct mg_params *p, enum mg_work w, double *units, double *event_s)
{
	int err[2] = { 0, 0 };
	cudaSetDevice(r->device);
	if (cudaMemcpy(err, r->derr, sizeof(err), cudaMemcpyDeviceToHost) != cudaSuccess) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d, %s: cannot read its errors\n", r->device, work_name(w));
		return -EIO;
	}
	int grid, block;
	shape(r, p, w, &grid, &block);
	double threads = (double)grid * block;
	switch (w) {
	case MG_NOOP:
	case MG_FLOOR: *units = (double)warps_of(r, p, w) * p->iters; break;
	case MG_FILE: *units = threads * p->reads; break;
	case MG_PRINT: {
		/* Lines in the file, as the print bench counts them: a line lost
		 * would not count. */
		struct stat st;
		uint64_t found = bench_print_count_lines(r->print_fd);
		*units = (double)found;
		r->line_bytes = found && fstat(r->print_fd, &st) == 0 ? (double)st.st_size / (double)found : 0;
		if (err[0] || err[1] || found != (uint64_t)(threads * p->lines)) {
			fprintf(stderr, "gpusys-bench multigpu: GPU %d, print: %d lines failed, flush: %s, %llu lines in the "
					"file of %.0f printed\n",
				r->device, err[0], gpusys_strerror(err[1]), (unsigned long long)found, threads * p->lines);
			return -EIO;
		}
		err[0] = 0;
		break;
	}
	case MG_NWORK: return -EINVAL;
	}
	if (err[0]) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d, %s: a call failed: %s\n", r->device, work_name(w),
			gpusys_strerror(err[0]));
		/* gpusysd holds each warp's read data until the warp has taken
		 * it, charged to the client and its user: every thread's block in
		 * flight at once may be more than the defaults allow (64 MiB a
		 * client, 256 MiB a user). Reads then wait for room, and fail
		 * -ENOMEM only after 10 s without any (docs/FILES.md). */
		if (w == MG_FILE && err[0] == -ENOMEM)
			fprintf(stderr, "gpusys-bench multigpu: every thread's read in flight is %.0f MiB a GPU: gpusysd's "
					"client_mem_budget and user_mem_budget must hold it (--daemon sets them)\n",
				threads * p->read_bytes / 1048576.0);
		return err[0];
	}
	float ms = 0;
	if (event_s)
		*event_s = cudaEventElapsedTime(&ms, r->e0, r->e1) == cudaSuccess ? ms / 1e3 : 0;
	return 0;
}

/* Each GPU of runs[0..n) (those with a floor, for the floor) alone, then
 * all at once; the rates into each GPU's rt[w] and *aggregate. */
static int measure(struct gpu_run *runs, int n, const struct mg_params *p, enum mg_work w, double *aggregate)
{
	double total = 0, units, s;
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		if (w == MG_FLOOR && !r->mini)
			continue;
		if (prepare(r, w))
			return -1;
		double t0 = bench_now_s();
		if (launch(r, p, w) || wait_run(r, w) || tally(r, p, w, &units, NULL))
			return -1;
		r->rt[w].alone = units / (r->t_done - t0) / 1e6;
	}
	for (int d = 0; d < n; d++)
		if ((w != MG_FLOOR || runs[d].mini) && prepare(&runs[d], w))
			return -1;
	double t0 = bench_now_s(), t1 = t0;
	for (int d = 0; d < n; d++)
		if ((w != MG_FLOOR || runs[d].mini) && launch(&runs[d], p, w))
			return -1;
	/* Every GPU waited for before any is tallied: counting one's lines
	 * must not delay the time of the next. */
	for (int d = 0; d < n; d++) {
		if (w == MG_FLOOR && !runs[d].mini)
			continue;
		if (wait_run(&runs[d], w))
			return -1;
		t1 = runs[d].t_done > t1 ? runs[d].t_done : t1;
	}
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		if (w == MG_FLOOR && !r->mini)
			continue;
		if (tally(r, p, w, &units, &s))
			return -1;
		r->rt[w].at_once = s > 0 ? units / s / 1e6 : 0;
		total += units;
	}
	*aggregate = total / (t1 - t0) / 1e6;
	return 0;
}

/* A short run of w on r, outside the timings: module load, the daemon's
 * first-use state. */
static int warm_up(struct gpu_run *r, const struct mg_params *p, enum mg_work w)
{
	struct mg_params small = *p;
	double units;
	small.iters = 5;
	small.lines = 1;
	small.reads = 1;
	if (prepare(r, w) || launch(r, &small, w) || wait_run(r, w) || tally(r, &small, w, &units, NULL))
		return -1;
	return 0;
}

/* This GPU's channel on its minimal server, mapped for it, and a warm-up. */
static int floor_setup(struct gpu_run *r, const struct mg_params *p)
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
	return warm_up(r, p, MG_FLOOR) ? -EIO : 0;
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

static void print_table(const struct gpu_run *runs, int n, const struct mg_params *p, double agg, double floor_agg)
{
	double alone_sum = 0, floor_alone_sum = 0;
	int floors = 0;
	printf("gpusys-bench multigpu: %d GPU%s, NOOP from every warp, %d calls each; the floor: the same "
	       "kernel, the gpusys client against a minimal server of the GPU's own (%u threads)\n\n",
	       n, n == 1 ? "" : "s", p->iters, MINI_THREADS);
	printf("| run | GPU | warps | gpusysd M warp requests/s | floor M warp requests/s | gpusysd / floor |\n"
	       "|---|---|---|---|---|---|\n");
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		alone_sum += r->rt[MG_NOOP].alone;
		if (r->rt[MG_FLOOR].alone > 0) {
			floor_alone_sum += r->rt[MG_FLOOR].alone;
			floors++;
		}
		printf("| alone | %d: %s | %ld |", d, r->name, warps_of(r, p, MG_NOOP));
		print_rate(r->rt[MG_NOOP].alone);
		print_rate(r->rt[MG_FLOOR].alone);
		print_ratio(r->rt[MG_NOOP].alone, r->rt[MG_FLOOR].alone);
	}
	long total = 0;
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		total += warps_of(r, p, MG_NOOP);
		printf("| all at once, this GPU's kernel | %d | %ld |", d, warps_of(r, p, MG_NOOP));
		print_rate(r->rt[MG_NOOP].at_once);
		print_rate(r->rt[MG_FLOOR].at_once);
		print_ratio(r->rt[MG_NOOP].at_once, r->rt[MG_FLOOR].at_once);
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
		if (runs[d].rt[MG_FLOOR].alone > 0)
			printf(" GPU %d %.2fx", d, runs[d].rt[MG_NOOP].alone / runs[d].rt[MG_FLOOR].alone);
	printf("; all at once:");
	for (int d = 0; d < n; d++)
		if (runs[d].rt[MG_FLOOR].at_once > 0 && runs[d].rt[MG_NOOP].at_once > 0)
			printf(" GPU %d %.2fx", d, runs[d].rt[MG_NOOP].at_once / runs[d].rt[MG_FLOOR].at_once);
	printf("\n");
	if (floors < n)
		printf("(%d GPU%s without a floor: minimal servers are forked before CUDA, for the GPUs "
		       "/proc/driver/nvidia/gpus and CUDA_VISIBLE_DEVICES name)\n",
		       n - floors, n - floors == 1 ? "" : "s");
}

/* The print or file rows: rates in units and in bytes, no floor. */
static void print_io_table(const struct gpu_run *runs, int n, const struct mg_params *p, enum mg_work w,
			   const char *dir, double agg)
{
	int grid, block;
	double alone_sum = 0;
	/* Bytes a unit: a line's average in the files (the same line
	 * everywhere), or a read's block; MB/s for lines, GB/s for reads. */
	double line_bytes = 0;
	for (int d = 0; d < n; d++)
		line_bytes = runs[d].line_bytes > line_bytes ? runs[d].line_bytes : line_bytes;
	double unit_mb = w == MG_PRINT ? line_bytes : p->read_bytes / 1e3;
	printf("\n");
	if (w == MG_PRINT)
		printf("gpusys-bench multigpu: %d GPU%s, print: every thread of %d warps an SM prints %d lines "
		       "(gpusys_printf, the print bench's line) into a file of its GPU's own in %s; timed until "
		       "written (the kernel, then a flush in the same stream)\n\n",
		       n, n == 1 ? "" : "s", p->warps_per_sm[w], p->lines, dir);
	else
		printf("gpusys-bench multigpu: %d GPU%s, file: every thread of %d warps an SM preads %d blocks of %u B "
		       "(gpusys_pread) from a %llu MiB page-cached file in %s, each block's first and last words "
		       "checked\n\n",
		       n, n == 1 ? "" : "s", p->warps_per_sm[w], p->reads, p->read_bytes,
		       p->blocks * p->read_bytes >> 20, dir);
	printf("| run | GPU | threads | %s | %s |\n|---|---|---|---|---|\n", w == MG_PRINT ? "M lines/s" : "M reads/s",
	       w == MG_PRINT ? "MB/s" : "GB/s");
	long total = 0;
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		shape(r, p, w, &grid, &block);
		alone_sum += r->rt[w].alone;
		printf("| alone | %d: %s | %ld |", d, r->name, (long)grid * block);
		print_rate(r->rt[w].alone);
		print_rate(r->rt[w].alone * unit_mb);
		printf("\n");
	}
	for (int d = 0; d < n; d++) {
		const struct gpu_run *r = &runs[d];
		shape(r, p, w, &grid, &block);
		total += (long)grid * block;
		printf("| all at once, this GPU's kernel | %d | %ld |", d, (long)grid * block);
		print_rate(r->rt[w].at_once);
		print_rate(r->rt[w].at_once * unit_mb);
		printf("\n");
	}
	printf("| all at once | %d GPUs | %ld |", n, total);
	print_rate(agg);
	print_rate(agg * unit_mb);
	printf("\n\nall GPUs at once / one GPU alone (mean of the alone rows): %s %.2fx (issue 34's target: >= 1.8x "
	       "with two GPUs)\n",
	       w == MG_PRINT ? "print" : "file", agg / (alone_sum / n));
}

static void usage(void)
{
	fprintf(stderr,
		"usage: gpusys-bench multigpu [--op noop|print|file|all[,...]] [--warps-per-sm N] [--iters N]\n"
		"                             [--lines N] [--reads N] [--read-bytes N] [--dir DIR]\n"
		"                             [--runtime-dir DIR | --daemon PATH]\n"
		"  Each GPU alone, then all at once, from one process (an attach per GPU), for each --op\n"
		"  (default noop; all: noop,print,file, in that order):\n"
		"    noop   NOOP calls from every warp (--iters per thread, default 2000), with each GPU's\n"
		"           client + minimal server floor; M warp requests/s\n"
		"    print  gpusys_printf from every thread (--lines per thread, default 8) into a file of\n"
		"           each GPU's own in DIR; M lines/s and MB/s until written\n"
		"    file   gpusys_pread of --read-bytes blocks (default 4096) from a 64 MiB file in DIR,\n"
		"           page-cached (--reads per thread, default 16); M reads/s and GB/s\n"
		"  --warps-per-sm: warps on every SM (default 64 for noop, 16 for print and file, the\n"
		"  print bench's 2 blocks of 256). DIR: /dev/shm, else /tmp.\n"
		"  file holds every thread's block in gpusysd at once (264 MiB a GPU of 132 SMs): its\n"
		"  client_mem_budget and user_mem_budget must allow it; --daemon starts one that does.\n");
}

/* --op: a comma-separated list into want[] (noop, print, file, all). */
static int parse_ops(const char *arg, bool *want)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", arg);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "all"))
			want[MG_NOOP] = want[MG_PRINT] = want[MG_FILE] = true;
		else if (!strcmp(t, "noop"))
			want[MG_NOOP] = true;
		else if (!strcmp(t, "print"))
			want[MG_PRINT] = true;
		else if (!strcmp(t, "file"))
			want[MG_FILE] = true;
		else
			return -EINVAL;
	}
	return 0;
}

/* The file rows' file: 8-byte words each holding its index (what
 * k_preads checks), written from here so that it is in the page cache. */
static int write_read_file(const char *path, uint64_t bytes)
{
	static uint64_t chunk[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	for (uint64_t at = 0; at < bytes; at += sizeof(chunk)) {
		for (size_t i = 0; i < sizeof(chunk) / 8; i++)
			chunk[i] = at / 8 + i;
		size_t n = bytes - at < sizeof(chunk) ? (size_t)(bytes - at) : sizeof(chunk);
		if (write(fd, chunk, n) != (ssize_t)n) {
			int e = errno ? -errno : -EIO;
			close(fd);
			return e;
		}
	}
	return close(fd) == 0 ? 0 : -errno;
}

struct mg_attach {
	struct gpusys_options o;
	gpusys_t *g;
};

static int do_attach(void *arg)
{
	struct mg_attach *a = (struct mg_attach *)arg;
	int rc = gpusys_attach(&a->o, &a->g);
	if (rc)
		fprintf(stderr, "gpusys-bench multigpu: attach GPU %d: %s\n", a->o.cuda_device, gpusys_last_error());
	return rc;
}

/* r's client: with print rows, attached with its stdout on a fresh file
 * of its own (the print service writes where the client's stdout went). */
static int attach_gpu(struct gpu_run *r, const char *runtime_dir, bool print, const char *dir)
{
	struct mg_attach a;
	memset(&a, 0, sizeof(a));
	a.o.runtime_dir = runtime_dir;
	a.o.cuda_device = r->device;
	if (!print) {
		int rc = do_attach(&a);
		r->g = a.g;
		return rc;
	}
	snprintf(r->print_path, sizeof(r->print_path), "%s/gpusys-bench-multigpu.%d.gpu%d.out", dir, (int)getpid(),
		 r->device);
	int fd = bench_print_attach_to_file(r->print_path, do_attach, &a);
	if (fd < 0) {
		unlink(r->print_path);
		r->print_path[0] = 0;
		return fd;
	}
	r->print_fd = fd;
	r->g = a.g;
	return 0;
}

/* r's handle on the file rows' file, opened from its GPU, and every
 * thread's read buffer. */
static int file_setup(struct gpu_run *r, const struct mg_params *p, const char *path)
{
	int grid, block;
	char *dpath = NULL;
	long long *dh = NULL;
	shape(r, p, MG_FILE, &grid, &block);
	cudaSetDevice(r->device);
	int rc = -EIO;
	if (cudaMalloc(&r->rbuf, (size_t)grid * block * p->read_bytes) != cudaSuccess ||
	    cudaMalloc(&dpath, strlen(path) + 1) != cudaSuccess || cudaMalloc(&dh, sizeof(*dh)) != cudaSuccess ||
	    cudaMemcpy(dpath, path, strlen(path) + 1, cudaMemcpyHostToDevice) != cudaSuccess) {
		fprintf(stderr, "gpusys-bench multigpu: GPU %d: out of device memory for the file rows\n", r->device);
		goto out;
	}
	k_open<<<1, 1, 0, r->stream>>>(gpusys_device_on(r->g, r->stream), dpath, O_RDONLY, dh);
	rc = gpusys_synchronize(r->g, r->stream, 10000);
	if (!rc && cudaMemcpy(&r->fh, dh, sizeof(r->fh), cudaMemcpyDeviceToHost) != cudaSuccess)
		rc = -EIO;
	if (!rc && r->fh < 0)
		rc = (int)r->fh;
	if (rc)
		fprintf(stderr, "gpusys-bench multigpu: GPU %d: gpusys_open %s: %s\n", r->device, path, gpusys_strerror(rc));
out:
	cudaFree(dpath);
	cudaFree(dh);
	return rc;
}

static void file_teardown(struct gpu_run *r)
{
	cudaSetDevice(r->device);
	if (r->fh >= 0) {
		k_close<<<1, 1, 0, r->stream>>>(gpusys_device_on(r->g, r->stream), r->fh);
		gpusys_synchronize(r->g, r->stream, 10000);
		r->fh = -1;
	}
	if (r->rbuf)
		cudaFree(r->rbuf);
	r->rbuf = NULL;
}

extern "C" int bench_multi_gpu(int argc, char **argv)
{
	struct mg_params p;
	memset(&p, 0, sizeof(p));
	p.iters = 2000;
	p.lines = 8;
	p.reads = 16;
	p.read_bytes = 4096;
	int wps = -1, opt; /* -1: each workload's own */
	bool want[MG_NWORK] = { false, false, false, false };
	const char *runtime_dir = NULL, *daemon = NULL, *dir = NULL;
	static const struct option opts[] = {
		{ "iters", required_argument, NULL, 'i' },  { "runtime-dir", required_argument, NULL, 'r' },
		{ "daemon", required_argument, NULL, 'd' }, { "warps-per-sm", required_argument, NULL, 'w' },
		{ "op", required_argument, NULL, 'o' },     { "lines", required_argument, NULL, 'l' },
		{ "reads", required_argument, NULL, 'n' },  { "read-bytes", required_argument, NULL, 'b' },
		{ "dir", required_argument, NULL, 'D' },    { NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': p.iters = atoi(optarg); break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'w': wps = atoi(optarg); break;
		case 'l': p.lines = atoi(optarg); break;
		case 'n': p.reads = atoi(optarg); break;
		case 'b': p.read_bytes = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'D': dir = optarg; break;
		case 'o':
			if (parse_ops(optarg, want)) {
				usage();
				return 2;
			}
			break;
		default: usage(); return 2;
		}
	}
	if (optind < argc) {
		usage();
		return 2;
	}
	if (p.iters < 1 || wps == 0 || wps < -1 || p.lines < 1 || p.reads < 1 || p.read_bytes < 8 ||
	    p.read_bytes % 8 || p.read_bytes > GPUSYS_MAX_LANE_PAYLOAD) {
		fprintf(stderr, "gpusys-bench multigpu: --iters, --warps-per-sm, --lines and --reads must be positive, "
				"--read-bytes a multiple of 8 up to %u\n",
			GPUSYS_MAX_LANE_PAYLOAD);
		return 2;
	}
	if (!want[MG_NOOP] && !want[MG_PRINT] && !want[MG_FILE])
		want[MG_NOOP] = true; /* what the command did before --op */
	want[MG_FLOOR] = want[MG_NOOP];
	/* The print bench's shape for print and file (2 blocks of 256 an SM);
	 * every warp slot for NOOPs. */
	p.warps_per_sm[MG_NOOP] = p.warps_per_sm[MG_FLOOR] = wps > 0 ? wps : 64;
	p.warps_per_sm[MG_PRINT] = p.warps_per_sm[MG_FILE] = wps > 0 ? wps : 16;
	struct stat st;
	if (!dir)
		dir = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";

	/* Processes first: neither the minimal servers nor gpusysd may inherit
	 * a CUDA context. The file rows' file too (no CUDA needed). */
	static struct cpu_server minis[MAX_DEV];
	static struct gpu_run runs[MAX_DEV];
	struct bench_daemon bd;
	int nmini = 0, n = 0, rc = 1;
	double agg[MG_NWORK] = { 0, 0, 0, 0 };
	char read_path[PATH_MAX] = "";
	memset(&bd, 0, sizeof(bd));
	memset(runs, 0, sizeof(runs));
	for (int d = 0; d < MAX_DEV; d++) {
		runs[d].print_fd = -1;
		runs[d].fh = -1;
	}
	if (want[MG_FILE]) {
		/* 64 MiB: larger than any CPU's last-level cache, small for
		 * /dev/shm, and 16 Ki blocks of 4 KiB for the threads to spread
		 * over. */
		const uint64_t bytes = UINT64_C(64) << 20;
		p.blocks = bytes / p.read_bytes;
		snprintf(read_path, sizeof(read_path), "%s/gpusys-bench-multigpu.%d.in", dir, (int)getpid());
		int w = write_read_file(read_path, p.blocks * p.read_bytes);
		if (w) {
			fprintf(stderr, "gpusys-bench multigpu: %s: %s\n", read_path, strerror(-w));
			goto out;
		}
	}
	for (int want_n = want[MG_FLOOR] ? gpus_before_cuda() : 0; nmini < want_n; nmini++) {
		memset(&minis[nmini], 0, sizeof(minis[nmini]));
		int m = mini_server_start(&minis[nmini], minis, (unsigned)nmini);
		if (m) {
			fprintf(stderr, "gpusys-bench multigpu: minimal server: %s\n", strerror(-m));
			break;
		}
	}
	/* Room for the file rows' reads in flight (see tally); budgets, not
	 * allocations, and the NOOP and print paths charge nothing against
	 * them. */
	bd.config = want[MG_FILE] ? "client_mem_budget = 4G\nuser_mem_budget = 16G\n" : NULL;
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		goto out;
	{
		cudaError_t ce = cudaGetDeviceCount(&n);
		if (ce != cudaSuccess || n < 1) {
			/* 77: skipped, as the other GPU benchmarks say it. */
			fprintf(stderr, "gpusys-bench multigpu: no GPU (%s)\n",
				ce != cudaSuccess ? cudaGetErrorString(ce) : "none visible");
			n = 0;
			rc = 77;
			goto out;
		}
	}
	if (n > MAX_DEV)
		n = MAX_DEV;
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		cudaDeviceProp prop;
		r->device = d;
		if (cudaSetDevice(d) != cudaSuccess || cudaGetDeviceProperties(&prop, d) != cudaSuccess)
			goto out;
		r->sms = prop.multiProcessorCount;
		snprintf(r->name, sizeof(r->name), "%.40s, PCI %04x:%02x:%02x", prop.name, prop.pciDomainID,
			 prop.pciBusID, prop.pciDeviceID);
		if (attach_gpu(r, runtime_dir, want[MG_PRINT], dir))
			goto out;
		if (cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess ||
		    cudaEventCreate(&r->e0) != cudaSuccess || cudaEventCreate(&r->e1) != cudaSuccess ||
		    cudaMalloc(&r->derr, 2 * sizeof(int)) != cudaSuccess ||
		    cudaMemset(r->derr, 0, 2 * sizeof(int)) != cudaSuccess)
			goto out;
		if (want[MG_FILE] && file_setup(r, &p, read_path))
			goto out;
		for (int w = MG_NOOP; w < MG_NWORK; w++)
			if (w != MG_FLOOR && want[w] && warm_up(r, &p, (enum mg_work)w))
				goto out;
		if (d < nmini) {
			r->mini = &minis[d];
			if (floor_setup(r, &p)) {
				fprintf(stderr, "gpusys-bench multigpu: GPU %d: the floor's channel failed\n", d);
				goto out;
			}
		}
	}

	/* Each table printed as soon as it is measured: a later workload that
	 * fails or hangs does not take it along. */
	if (want[MG_NOOP]) {
		/* The floors first, then their servers stopped: their spinning
		 * threads must not take CPUs from gpusysd's pollers. */
		if (measure(runs, n, &p, MG_FLOOR, &agg[MG_FLOOR]))
			goto out;
		for (int d = 0; d < n; d++)
			floor_teardown(&runs[d]);
		for (int i = 0; i < nmini; i++)
			cpu_server_stop(&minis[i]);
		if (measure(runs, n, &p, MG_NOOP, &agg[MG_NOOP]))
			goto out;
		print_table(runs, n, &p, agg[MG_NOOP], agg[MG_FLOOR]);
		fflush(stdout);
	}
	for (int w = MG_PRINT; w <= MG_FILE; w++) {
		if (!want[w])
			continue;
		if (measure(runs, n, &p, (enum mg_work)w, &agg[w]))
			goto out;
		print_io_table(runs, n, &p, (enum mg_work)w, dir, agg[w]);
		fflush(stdout);
	}
	rc = 0;
out:
	for (int d = 0; d < n; d++) {
		struct gpu_run *r = &runs[d];
		floor_teardown(r);
		cudaSetDevice(d);
		if (r->g)
			file_teardown(r);
		if (r->derr)
			cudaFree(r->derr);
		if (r->e0)
			cudaEventDestroy(r->e0);
		if (r->e1)
			cudaEventDestroy(r->e1);
		if (r->stream)
			cudaStreamDestroy(r->stream);
		if (r->g)
			gpusys_detach(r->g);
		if (r->print_fd >= 0)
			close(r->print_fd);
		if (r->print_path[0])
			unlink(r->print_path);
	}
	for (int i = 0; i < nmini; i++)
		cpu_server_stop(&minis[i]);
	bench_daemon_stop(&bd);
	if (read_path[0])
		unlink(read_path);
	return rc;
}
