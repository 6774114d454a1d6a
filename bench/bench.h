/* SPDX-License-Identifier: MIT */
/* gpusys-bench: shared helpers of the benchmark commands. */
#ifndef GPUSYS_BENCH_H
#define GPUSYS_BENCH_H

#include <limits.h>
#include <pthread.h>
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

static inline double bench_now_s(void)
{
	return (double)bench_now_ns() / 1e9;
}

/* In the CUDA benchmarks: a CUDA runtime call that must succeed, else say
 * which and where, and exit. */
#ifdef __CUDACC__
#define BENCH_CK(x)                                                                                        \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess) {                                                                   \
			fprintf(stderr, "gpusys-bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,           \
				cudaGetErrorString(e_));                                                   \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)
#endif

struct bench_stats {
	uint64_t count;
	uint64_t min_ns, p50_ns, p99_ns, max_ns;
};

/* Sorts samples in place. */
struct bench_stats bench_stats_of(uint64_t *samples, size_t n);

/* The floor: a raw round trip through one shared word each way between
 * this process and a forked one that never touches gpusys. */
int bench_floor_cpu(unsigned iters, struct bench_stats *ret);

/* A private gpusysd for one benchmark run (bench/spawn.c). The caller
 * sets the inputs (zero: none); bench_daemon_start fills in the rest. */
struct bench_daemon {
	const char *config; /* the lines of its config file; NULL: no --config */
	const char *args;   /* more arguments, split at spaces */
	const char *log;    /* a file for its stdout and stderr; NULL: ours */
	int pid;            /* 0: none started */
	char dir[PATH_MAX]; /* its runtime directory */
	char conf[PATH_MAX]; /* its config file, "" for none */
};

/* Start gpusysd (path; NULL: nothing to start) on a fresh runtime
 * directory and point *runtime_dir at that. Before this process touches
 * CUDA: the daemon must not inherit a context. Returns 0, or -errno having
 * said why on stderr. */
int bench_daemon_start(struct bench_daemon *d, const char *path, const char **runtime_dir);
/* Stop it (SIGTERM) and remove what it leaves; nothing when none was
 * started. Returns its exit status, -1 when it did not exit (or none ran). */
int bench_daemon_stop(struct bench_daemon *d);

/* The --emulate benchmarks: attach with o and open the host-lane emulator
 * on the channel. Returns 0, or -errno having said why on stderr (nothing
 * left attached). bench_emu_detach undoes it (NULLs are skipped). */
struct gpusys_options;
struct gpusys;
struct gpusys_emu;
int bench_emu_attach(const struct gpusys_options *o, struct gpusys **ret_client,
		     struct gpusys_emu **ret_emu);
void bench_emu_detach(struct gpusys *client, struct gpusys_emu *emu);

/* The --emulate benchmarks' warps, a thread each. Each thread's argument
 * starts with a struct bench_warp; the thread calls bench_warp_begin first
 * (its emulated warp id, then the common start) and leaves its result, 0
 * or -errno, in rc. */
struct bench_warp {
	uint32_t warp;
	int rc;
	pthread_barrier_t *start;
};
void bench_warp_begin(struct bench_warp *w);
/* Run fn(args + i * arg_size) for warps i < n, released together; *ret_t0
 * and *ret_t1 (bench_now_ns): their release and the last one's end.
 * Returns 0, or the first failed warp's rc having said which on stderr. */
int bench_run_warps(unsigned n, void *(*fn)(void *), void *args, size_t arg_size, uint64_t *ret_t0,
		    uint64_t *ret_t1);

/* The file benchmarks' table (markdown): the header, then a row per
 * transfer, its label formatted like printf. */
void bench_gbs_header(void);
void bench_gbs_row(double gbs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The daemon's side of a benchmark row (bench/daemon_counters.c): its
 * pollers' counters (gpusysctl pollers) summed, and where its poller
 * threads ran (pid > 0: /proc/pid/task). */
#define BENCH_MAX_POLLERS 64
struct bench_pollers {
	uint64_t t_ns; /* when read (a difference: the interval) */
	unsigned n;    /* pollers */
	unsigned long long passes, empty, scanned, found, served, collisions, held, hot, parks, dozes;
	unsigned long long timed_passes, timed_pass_ns, timed_serve_ns, timed_answer_ns, timed_count_ns, timed_served;
	unsigned long long served_each[BENCH_MAX_POLLERS], pass_each[BENCH_MAX_POLLERS];
	unsigned long long preempted[BENCH_MAX_POLLERS]; /* involuntary context switches */
	int cpu[BENCH_MAX_POLLERS];                      /* last CPU, -1: unknown */
};
int bench_pollers_read(const char *runtime_dir, int pid, struct bench_pollers *ret);
/* d = b - a (counts and the interval); d's CPUs are b's. */
void bench_pollers_since(const struct bench_pollers *a, const struct bench_pollers *b, struct bench_pollers *d);
void bench_pollers_header(void);
void bench_pollers_row(const char *what, const char *kind, const struct bench_pollers *d);

/* The sum over gpusysd's clients of one per-client counter of its status
 * (bench/daemon_counters.c), or -1 when it does not answer. */
long long bench_clients_sum(const char *runtime_dir, const char *field);

int bench_rtt_emulated(int argc, char **argv);
int bench_print_emulated(int argc, char **argv);
/* print benchmarks: attach (attach(arg), which says why it failed) with
 * fd 1 pointing at a fresh file at path, so that the print service writes
 * there; returns that file's fd, or -errno having said why on stderr. And
 * the number of lines in a file. */
int bench_print_attach_to_file(const char *path, int (*attach)(void *), void *arg);
uint64_t bench_print_count_lines(int fd);
int bench_file_emulated(int argc, char **argv);
int bench_calls_emulated(int argc, char **argv); /* calls_emu.c */
int bench_sys_emulated(int argc, char **argv);   /* sys_emu.c */
#ifdef GPUSYS_BENCH_HAVE_GPU
int bench_rtt_gpu(int argc, char **argv);
int bench_print_gpu(int argc, char **argv);
int bench_file_gpu(int argc, char **argv);
int bench_calls_gpu(int argc, char **argv); /* futures and user callbacks (calls_gpu.cu) */
int bench_alloc_gpu(int argc, char **argv);
int bench_copy_gpu(int argc, char **argv);
int bench_multi_gpu(int argc, char **argv); /* bench/multi_gpu.cu */
int bench_trace_gpu(int argc, char **argv); /* where one round trip's time goes (trace_gpu.cu) */
int bench_packet_gpu(int argc, char **argv); /* packet 0's floor by layout (packet_floor.cu) */
#endif

#ifdef __cplusplus
}
#endif

#endif
