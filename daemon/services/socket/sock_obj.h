/* SPDX-License-Identifier: MIT */
/*
 * A client's socket as the socket service keeps it: the descriptor lives in
 * the client's handle table (services/file/file_table.h, kind
 * FILE_KIND_SOCKET, shared with files); this object is the entry's obj and
 * holds what the descriptor cannot: the waiting behaviour the client asked
 * for (the daemon's descriptor is always non-blocking) and the lanes that
 * wait on it, so a close wakes them.
 */
#ifndef GPUSYSD_SOCK_OBJ_H
#define GPUSYSD_SOCK_OBJ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct sock_lane;

struct sock {
	int domain;
	int type;           /* SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET */
	bool nonblock;      /* SOCK_NONBLOCK: never wait, -EAGAIN / -EINPROGRESS */
	int64_t rcvtimeo_ns; /* SO_RCVTIMEO; 0: wait for ever */
	int64_t sndtimeo_ns; /* SO_SNDTIMEO */
	int linger_onoff, linger_sec; /* SO_LINGER as set (only l_linger 0 reaches the kernel) */
	pthread_mutex_t lock;  /* closed, waiters */
	bool closed;
	struct sock_lane *waiters;
};

#endif
