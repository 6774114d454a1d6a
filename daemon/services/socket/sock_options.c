/* SPDX-License-Identifier: MIT */
/*
 * setsockopt / getsockopt for the options a client may use (the list is in
 * docs/SOCKETS.md). SO_RCVTIMEO / SO_SNDTIMEO and SO_LINGER's time are kept
 * by the daemon: its descriptor never blocks.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "services/socket/sock_call.h"

/* ------------------------------------------------------------- options */

static int opt_known(int level, int name, bool set)
{
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_REUSEPORT:
		case SO_KEEPALIVE:
		case SO_RCVBUF:
		case SO_SNDBUF:
		case SO_LINGER:
		case SO_RCVTIMEO:
		case SO_SNDTIMEO:
		case SO_BROADCAST:
		case SO_OOBINLINE:
		case SO_RCVLOWAT:
			return 0;
		case SO_ERROR:
		case SO_TYPE:
		case SO_DOMAIN:
		case SO_PROTOCOL:
		case SO_ACCEPTCONN:
			return set ? -ENOPROTOOPT : 0;
		}
		return -ENOPROTOOPT;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
		case TCP_KEEPIDLE:
		case TCP_KEEPINTVL:
		case TCP_KEEPCNT:
		case TCP_CORK:
		case TCP_QUICKACK:
			return 0;
		}
		return -ENOPROTOOPT;
	case IPPROTO_IPV6:
		return name == IPV6_V6ONLY ? 0 : -ENOPROTOOPT;
	case IPPROTO_IP:
		return name == IP_TOS || name == IP_TTL ? 0 : -ENOPROTOOPT;
	}
	return -ENOPROTOOPT;
}

static int64_t tv_ns(const struct timeval *tv)
{
	return (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
}

int sock_setsockopt(struct sock_lane *l)
{
	int level = l->q.a, name = l->q.b, r;
	if ((r = opt_known(level, name, true)) < 0)
		return r;
	const uint8_t *v = l->body;
	uint32_t n = l->body_len;
	if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) {
		struct timeval tv;
		if (n < sizeof(tv))
			return -EINVAL;
		memcpy(&tv, v, sizeof(tv));
		if (tv.tv_sec < 0 || tv.tv_usec < 0 || tv.tv_usec >= 1000000)
			return -EDOM;
		pthread_mutex_lock(&l->s->lock);
		*(name == SO_RCVTIMEO ? &l->s->rcvtimeo_ns : &l->s->sndtimeo_ns) = tv_ns(&tv);
		pthread_mutex_unlock(&l->s->lock);
		return 0; /* ours: the descriptor itself never blocks */
	}
	if (level == SOL_SOCKET && name == SO_LINGER) {
		struct linger lg;
		if (n < sizeof(lg))
			return -EINVAL;
		memcpy(&lg, v, sizeof(lg));
		l->s->linger_onoff = lg.l_onoff;
		l->s->linger_sec = lg.l_linger;
		/* A linger time would make close() wait in a daemon thread;
		 * only the abortive close (time 0) reaches the kernel. */
		struct linger k = { .l_onoff = lg.l_onoff && lg.l_linger == 0, .l_linger = 0 };
		return setsockopt(l->e->fd, SOL_SOCKET, SO_LINGER, &k, sizeof(k)) < 0 ? -errno : 0;
	}
	return setsockopt(l->e->fd, level, name, v, n) < 0 ? -errno : 0;
}

int sock_getsockopt(struct sock_lane *l)
{
	int level = l->q.a, name = l->q.b, r;
	if ((r = opt_known(level, name, false)) < 0)
		return r;
	uint8_t v[GPUSYS_SOCK_OPT_MAX];
	socklen_t n = sizeof(v);
	if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO)) {
		int64_t ns = name == SO_RCVTIMEO ? l->s->rcvtimeo_ns : l->s->sndtimeo_ns;
		struct timeval tv = { .tv_sec = ns / 1000000000, .tv_usec = ns % 1000000000 / 1000 };
		memcpy(v, &tv, sizeof(tv));
		n = sizeof(tv);
	} else if (level == SOL_SOCKET && name == SO_LINGER) {
		struct linger lg = { .l_onoff = l->s->linger_onoff, .l_linger = l->s->linger_sec };
		memcpy(v, &lg, sizeof(lg));
		n = sizeof(lg);
	} else if (getsockopt(l->e->fd, level, name, v, &n) < 0) {
		return -errno;
	}
	if (n > l->room)
		n = l->room; /* truncated, as getsockopt(2) does */
	memcpy(l->out, v, n);
	l->out_len = n;
	return 0;
}

