/* SPDX-License-Identifier: MIT */
/* An in-process channel served by the real port server from test threads:
 * the protocol under test without sockets or a daemon. */
#ifndef GPUSYS_TEST_INPROC_SERVER_H
#define GPUSYS_TEST_INPROC_SERVER_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/port_server.h"

struct inproc {
	void *base;
	size_t bytes;
	struct port_table table;
	pthread_t threads[8];
	unsigned nthreads;
	atomic_int stop;
};

/* Create a zeroed channel of num_ports and start nservers serving threads. */
struct inproc *inproc_start(uint32_t num_ports, unsigned nservers);
void inproc_stop(struct inproc *s);

#endif
