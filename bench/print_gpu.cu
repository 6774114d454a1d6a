/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench print: lines per second printed by every thread of a kernel
 * that fills all SMs, into a file, against CUDA's own device printf in the
 * same run.
 *
 *   gpusysd   gpusys_printf; time from launch until the last line is written
 *             to the file (the kernel's end, then a flush request); the lines
 *             are in the file while the kernel runs
 *   CUDA      printf with cudaLimitPrintfFifoSize large enough for every
 *             line; stdout is the same kind of file; time from launch until
 *             cudaDeviceSynchronize has written them (nothing is visible
 *             before)
 *
 * Both print the same line ("block %d thread %d line %d value %f\n") the
 * same number of times; the file's line count is checked for each.
 */
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
}
#include "gpusys/gpusys.h"
#include "print_kernels.cuh"

static __global__ void k_cuda(int lines, int long_line)
{
	for (int n = 0; n < lines; n++) {
		if (long_line)
			printf(BENCH_PRINT_LONG_LINE, (int)blockIdx.x, (int)threadIdx.x, n, n * 0.5 + threadIdx.x);
		else
			printf(BENCH_PRINT_LINE, (int)blockIdx.x, (int)threadIdx.x, n, n * 0.5 + threadIdx.x);
	}
}

struct gpu_attach {
	const char *runtime_dir;
	uint32_t ports; /* 0: the library's default */
	gpusys_t *g;
};

static int do_attach(void *p)
{
	struct gpu_attach *a = (struct gpu_attach *)p;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.runtime_dir = a->runtime_dir;
	o.cuda_device = 0;
	o.num_ports = a->ports;
	int rc = gpusys_attach(&o, &a->g); /* passes our stdout (the file now) to gpusysd */
	if (rc)
		fprintf(stderr, "gpusys-bench: gpusys_attach: %s\n", gpusys_last_error());
	return rc;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench print [--blocks-per-sm N] [--threads N] [--lines N (per thread)]\n"
			"                          [--out FILE] [--ports N] [--runtime-dir DIR | --daemon PATH] [--json]\n"
			"                          [--long-line (a line whose record is past a lane's 64 inline bytes)]\n");
}

extern "C" int bench_print_gpu(int argc, char **argv)
{
	int per_sm = 2, threads = 256, lines = 8, json = 0, long_line = 0, opt;
	uint32_t ports = 0;
	const char *runtime_dir = NULL, *daemon = NULL, *out = NULL;
	static const struct option opts[] = {
		{ "blocks-per-sm", required_argument, NULL, 'b' }, { "threads", required_argument, NULL, 't' },
		{ "lines", required_argument, NULL, 'l' },         { "out", required_argument, NULL, 'o' },
		{ "runtime-dir", required_argument, NULL, 'r' },   { "daemon", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },                { "ports", required_argument, NULL, 'p' },
		{ "long-line", no_argument, NULL, 'L' },           { NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'b': per_sm = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'l': lines = atoi(optarg); break;
		case 'o': out = optarg; break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'j': json = 1; break;
		case 'p': ports = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'L': long_line = 1; break;
		default: usage(); return 2;
		}
	}
	if (per_sm < 1 || threads < 1 || threads > 1024 || lines < 1) {
		usage();
		return 2;
	}
	char out_buf[PATH_MAX], cuda_path[PATH_MAX + 8];
	if (!out) {
		snprintf(out_buf, sizeof(out_buf), "/tmp/gpusys-bench-print.%d.out", (int)getpid());
		out = out_buf;
	}
	snprintf(cuda_path, sizeof(cuda_path), "%s.cuda", out);

	/* The daemon before CUDA: it must not inherit a context. */
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "gpusys-bench: no usable GPU; use print --emulate\n");
		bench_daemon_stop(&bd);
		return 77;
	}
	cudaDeviceProp prop;
	BENCH_CK(cudaGetDeviceProperties(&prop, 0));
	int blocks = prop.multiProcessorCount * per_sm;
	long long total = (long long)blocks * threads * lines;
	/* CUDA printf's buffer: generous per line, so that none is dropped (96
	 * bytes a line still lost 14% of them on an H100). */
	size_t fifo = (size_t)total * 512 + (64u << 20);
	BENCH_CK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, fifo));

	struct gpu_attach at = { runtime_dir, ports, NULL };
	int file = bench_print_attach_to_file(out, do_attach, &at);
	if (file < 0) {
		bench_daemon_stop(&bd);
		return 1;
	}
	gpusys_dev_t dev = gpusys_device(at.g);
	int *derr, *dflush, herr = 0, hflush = -1;
	BENCH_CK(cudaMalloc(&derr, sizeof(int)));
	BENCH_CK(cudaMalloc(&dflush, sizeof(int)));
	BENCH_CK(cudaMemset(derr, 0, sizeof(int)));

	/* Warm-up (module load, the daemon's first-use state), then truncate. */
	k_print_lines<<<1, 32>>>(dev, 1, derr, long_line);
	k_print_flush<<<1, 1>>>(dev, dflush);
	BENCH_CK(cudaDeviceSynchronize());
	/* The daemon's descriptor shares this file offset: rewind it too. */
	if (ftruncate(file, 0) < 0 || lseek(file, 0, SEEK_SET) < 0)
		perror("truncate");

	/* 1. gpusysd. */
	uint64_t t0 = bench_now_ns();
	k_print_lines<<<blocks, threads>>>(dev, lines, derr, long_line);
	BENCH_CK(cudaGetLastError());
	int rc = gpusys_synchronize(at.g, NULL, 600000);
	uint64_t t1 = bench_now_ns();
	k_print_flush<<<1, 1>>>(dev, dflush);
	BENCH_CK(cudaDeviceSynchronize());
	uint64_t t2 = bench_now_ns();
	BENCH_CK(cudaMemcpy(&herr, derr, sizeof(int), cudaMemcpyDeviceToHost));
	BENCH_CK(cudaMemcpy(&hflush, dflush, sizeof(int), cudaMemcpyDeviceToHost));
	if (rc || herr || hflush)
		fprintf(stderr, "gpusys-bench: gpusysd run: synchronize %s, %d failed lines, flush %d\n",
			gpusys_strerror(rc), herr, hflush);
	uint64_t g_lines = bench_print_count_lines(file);
	struct stat st;
	fstat(file, &st);
	long long g_bytes = (long long)st.st_size;

	/* 2. CUDA printf, stdout on a file of the same kind. */
	fflush(stdout);
	int cfile = open(cuda_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int saved = dup(1);
	if (cfile < 0 || saved < 0 || dup2(cfile, 1) < 0) {
		fprintf(stderr, "gpusys-bench: %s: %s\n", cuda_path, strerror(errno));
		return 1;
	}
	k_cuda<<<1, 32>>>(1, long_line); /* warm-up */
	BENCH_CK(cudaDeviceSynchronize());
	fflush(stdout);
	if (ftruncate(cfile, 0) < 0 || lseek(1, 0, SEEK_SET) < 0)
		perror("truncate");
	uint64_t c0 = bench_now_ns();
	k_cuda<<<blocks, threads>>>(lines, long_line);
	BENCH_CK(cudaGetLastError());
	BENCH_CK(cudaDeviceSynchronize());
	fflush(stdout);
	uint64_t c1 = bench_now_ns();
	dup2(saved, 1);
	close(saved);
	uint64_t c_lines = bench_print_count_lines(cfile);
	fstat(cfile, &st);
	long long c_bytes = (long long)st.st_size;

	double gs = (double)(t2 - t0) / 1e9, gk = (double)(t1 - t0) / 1e9, cs = (double)(c1 - c0) / 1e9;
	/* Rates count the lines that reached the file. */
	double g_rate = g_lines / gs, c_rate = c_lines / cs;
	if (json) {
		printf("{\"mode\":\"gpu\",\"device\":\"%s\",\"blocks\":%d,\"threads\":%d,\"lines_per_thread\":%d,"
		       "\"lines\":%lld,\"gpusys_lines_in_file\":%llu,\"gpusys_bytes\":%lld,\"gpusys_kernel_s\":%.6f,"
		       "\"gpusys_written_s\":%.6f,\"gpusys_lines_per_s\":%.0f,\"cuda_lines_in_file\":%llu,"
		       "\"cuda_bytes\":%lld,\"cuda_s\":%.6f,\"cuda_lines_per_s\":%.0f}\n",
		       prop.name, blocks, threads, lines, total, (unsigned long long)g_lines, g_bytes, gk, gs,
		       g_rate, (unsigned long long)c_lines, c_bytes, cs, c_rate);
	} else {
		printf("gpusys-bench print: %s, %d blocks x %d threads x %d lines = %lld lines into files%s\n",
		       prop.name, blocks, threads, lines, total, long_line ? " (the long line)" : "");
		printf("%-44s %12s %12s %12s %14s %s\n", "", "lines", "bytes", "seconds", "lines/s", "visible");
		printf("%-44s %12llu %12lld %12.3f %14.0f %s\n", "gpusysd gpusys_printf (until written)",
		       (unsigned long long)g_lines, g_bytes, gs, g_rate, "while the kernel runs");
		printf("%-44s %12s %12s %12.3f %14.0f\n", "  of which the kernel ran", "", "", gk, g_lines / gk);
		printf("%-44s %12llu %12lld %12.3f %14.0f %s\n", "CUDA printf (until synchronize returned)",
		       (unsigned long long)c_lines, c_bytes, cs, c_rate, "after synchronisation");
		printf("ratio gpusysd / CUDA printf (lines/s): %.2fx\n", g_rate / (c_rate > 0 ? c_rate : 1));
	}
	int bad = rc || herr || hflush || g_lines != (uint64_t)total;
	if (g_lines != (uint64_t)total)
		fprintf(stderr, "gpusys-bench: gpusysd: %llu lines in the file, %lld printed\n",
			(unsigned long long)g_lines, total);
	if (c_lines != (uint64_t)total)
		fprintf(stderr, "gpusys-bench: CUDA printf: %llu lines in the file, %lld printed (dropped)\n",
			(unsigned long long)c_lines, total);
	close(file);
	close(cfile);
	if (out == out_buf)
		unlink(out);
	unlink(cuda_path);
	BENCH_CK(cudaFree(derr));
	BENCH_CK(cudaFree(dflush));
	gpusys_detach(at.g);
	bench_daemon_stop(&bd);
	return bad;
}
