/* SPDX-License-Identifier: MIT */
/*
 * The CPU sides of the GPU benchmarks' floors (bench/cpu_server.c): a
 * server in a forked process that never touches CUDA, its threads each
 * polling a slice of the slots of a shared mapping until this process
 * closes its stop pipe. Fork before this process touches CUDA: the child
 * must not inherit a context. Shared by rtt (the raw mailbox and the
 * minimal server) and multigpu (a minimal server per GPU).
 */
#ifndef GPUSYS_BENCH_CPU_SERVER_H
#define GPUSYS_BENCH_CPU_SERVER_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cpu_server {
	void *host; /* this process's mapping */
	size_t bytes;
	pid_t pid; /* 0: not running */
	int stop_fd;
};

/* What each server thread is given. */
struct cpu_slice {
	void *host;
	unsigned first, count;
	volatile int *stop;
};

#define CPU_SERVER_MAX_THREADS 8

/* A fresh shared mapping of bytes (memfd name). 0 or -errno. */
int cpu_server_map(struct cpu_server *m, const char *name, size_t bytes);

/* threads (<= CPU_SERVER_MAX_THREADS) threads run serve, each over
 * slots / threads slots. others[0..nothers): servers forked before this
 * one, whose stop pipes the child must close (each must see EOF when this
 * process closes its end). 0 or -errno. */
int cpu_server_fork(struct cpu_server *m, void *(*serve)(void *), unsigned slots, unsigned threads,
		    const struct cpu_server *others, unsigned nothers);

/* Stop it and wait for it; nothing when it is not running. */
void cpu_server_stop(struct cpu_server *m);

/* The protocol floor: the real client code (gpusys_noop) against the
 * smallest possible server, which answers every packet of its ports with a
 * trivial response. The gap between this and the raw mailbox is the
 * client's cost; the gap between gpusysd and this is the daemon's. A
 * channel of MINI_PORTS ports, MINI_THREADS threads. */
#define MINI_PORTS 1056u
#define MINI_THREADS 4u
int mini_server_start(struct cpu_server *m, const struct cpu_server *others, unsigned nothers);

#ifdef __cplusplus
}
#endif

#endif
