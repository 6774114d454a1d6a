/* SPDX-License-Identifier: MIT */
/* An in-process channel served by the real port server from test threads:
 * the protocol under test without sockets or a daemon. */
#ifndef GPUSYS_TEST_INPROC_SERVER_H
#define GPUSYS_TEST_INPROC_SERVER_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/port_server.h"

struct inproc {
	struct client client; /* what the services see: no descriptors unless given */
	void *base;
	size_t bytes;
	struct port_table table;
	pthread_t threads[8];
	unsigned nthreads;
	atomic_int stop;
};

/* Create a zeroed channel of num_ports and start nservers serving threads
 * (services with their per-client state, no event loop: no SLEEP). */
struct inproc *inproc_start(uint32_t num_ports, unsigned nservers);
/* The same for a client with these stdout and stderr descriptors (-1:
 * none; the services dup what they keep, the caller keeps its own). */
struct inproc *inproc_start_fds(uint32_t num_ports, unsigned nservers, int stdout_fd, int stderr_fd);
/* The per-client state of service svc for this channel. */
void *inproc_state(struct inproc *s, const struct service *svc);
void inproc_stop(struct inproc *s);

#endif
