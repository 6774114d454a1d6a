/* SPDX-License-Identifier: MIT */
/*
 * A client's socket as the socket service keeps it: the descriptor lives in
 * the client's handle table (core/handles.h, kind HANDLE_KIND_SOCKET,
 * shared with files); this object is the entry's obj and
 * holds what the descriptor cannot: the waiting behaviour the client asked
 * for (the daemon's descriptor is always non-blocking) and the lanes that
 * wait on it, so a close wakes them.
 */
#ifndef GPUSYSD_SOCK_OBJ_H
#define GPUSYSD_SOCK_OBJ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

struct sock_lane;

struct sock {
	int domain;
	int type;           /* SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET */
	bool nonblock;      /* SOCK_NONBLOCK: never wait, -EAGAIN / -EINPROGRESS */
	int64_t rcvtimeo_ns; /* SO_RCVTIMEO; 0: wait for ever */
	int64_t sndtimeo_ns; /* SO_SNDTIMEO */
	int linger_onoff, linger_sec; /* SO_LINGER as set (only l_linger 0 reaches the kernel) */
	/* The Unix path the client bound (getsockname's answer): the kernel
	 * holds the name as the resolver made it (sock_unix_path.h). */
	struct sockaddr_un bound;
	socklen_t bound_len;
	pthread_mutex_t lock;  /* closed, waiters */
	bool closed;
	struct sock_lane *waiters;
};

/* Remember the path a client bound s to (len bytes of addr, at most a
 * sockaddr_un). */
static inline void sock_set_bound(struct sock *s, const void *addr, socklen_t len)
{
	if (len > sizeof(s->bound))
		len = sizeof(s->bound);
	memcpy(&s->bound, addr, len);
	s->bound_len = len;
}

#endif
