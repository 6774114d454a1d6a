/* SPDX-License-Identifier: MIT */
/*
 * What the CPU peers of the socket benchmarks (echo_cpu, http_cpu) share:
 * a listening TCP socket on every address, and a pool of threads that all
 * run the same worker.
 */
#ifndef GPUSYS_BENCH_CPU_PEER_H
#define GPUSYS_BENCH_CPU_PEER_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

/* A listening socket on port (a decimal string); flags are or-ed into the
 * socket type (SOCK_NONBLOCK for an epoll server). -1 after saying why
 * as who. */
static inline int cpu_peer_listen(const char *port, int flags, const char *who)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
	int one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4096) < 0) {
		perror(who);
		return -1;
	}
	return fd;
}

/* Run worker on threads threads, this one among them; returns when this
 * thread's worker does. */
static inline void cpu_peer_run(int threads, void *(*worker)(void *))
{
	for (int i = 1; i < threads; i++) {
		pthread_t t;
		pthread_create(&t, NULL, worker, NULL);
	}
	worker(NULL);
}

#endif
