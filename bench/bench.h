/* SPDX-License-Identifier: MIT */
/* gpusys-bench: shared helpers of the benchmark commands. */
#ifndef GPUSYS_BENCH_H
#define GPUSYS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Also included by the .cu benchmarks (C++ to nvcc): C linkage throughout. */
#ifdef __cplusplus
extern "C" {
#endif

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct bench_stats {
	uint64_t count;
	uint64_t min_ns, p50_ns, p99_ns, max_ns;
};

/* Sorts samples in place. */
struct bench_stats bench_stats_of(uint64_t *samples, size_t n);

/* The floor: a raw round trip through one shared word each way between
 * this process and a forked one that never touches gpusys. */
int bench_floor_cpu(unsigned iters, struct bench_stats *ret);

/* Start build/daemon/gpusysd (path) on a fresh runtime dir; the dir is
 * written to dir (PATH_MAX). Returns the pid or -errno. */
int bench_spawn_daemon(const char *path, const char *extra_args, char *dir);
void bench_stop_daemon(int pid, const char *dir);

int bench_rtt_emulated(int argc, char **argv);
int bench_print_emulated(int argc, char **argv);
/* print benchmarks: attach (attach(arg)) with fd 1 pointing at a fresh file
 * at path, so that the print service writes there; returns that file's fd
 * or -errno. And the number of lines in a file. */
int bench_print_attach_to_file(const char *path, int (*attach)(void *), void *arg);
uint64_t bench_print_count_lines(int fd);
int bench_file_emulated(int argc, char **argv);
#ifdef GPUSYS_BENCH_HAVE_GPU
int bench_rtt_gpu(int argc, char **argv);
int bench_print_gpu(int argc, char **argv);
int bench_file_gpu(int argc, char **argv);
int bench_copy_gpu(int argc, char **argv);
#endif

#ifdef __cplusplus
}
#endif

#endif
