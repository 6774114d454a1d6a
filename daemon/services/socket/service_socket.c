/* SPDX-License-Identifier: MIT */
/*
 * The socket service (include/gpusys/socket.h): BSD socket calls on behalf
 * of a client, on its handle table (shared with files), as the client
 * (util/creds.h) wherever a path or a privilege is involved.
 *
 * Nothing blocking holds a thread. Every descriptor is non-blocking. A
 * handler (on a worker) tries each lane once; a lane that would block
 * (accept with nobody pending, recv with nothing to read, send into a full
 * buffer, a connect in progress, a poll with nothing ready, any name
 * lookup) becomes a waiting lane and the call is handed to the core with
 * call_later(). The daemon's main loop then watches the lane's descriptor
 * (or its DNS request) with a libevent event bounded by SO_RCVTIMEO /
 * SO_SNDTIMEO or the poll timeout, retries when it fires, and the last lane
 * to finish completes the call (call_complete()).
 *
 * Per call, the service keeps a struct sock_call (the lanes' state), apart
 * from the call: the response room is call->resp_buf (freed by the core
 * with the call), which starts with a pointer to it. The hand-off from the
 * worker is a pre-made event (ev_arm) activated after call_later(); the
 * main loop then arms the lanes' events. Everything on a sock_call happens
 * under its lock; libevent events are only ever freed on the main loop. The
 * core's cancel hook normally runs on the main loop and frees everything at
 * once; when it runs on the handler's thread (a client detaching while the
 * handler was returning), it lets go of the descriptors, disowns the call
 * and has the main loop free the rest (ev_arm again).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/handles.h"
#include "core/service.h"
#include "gpusys/socket.h"
#include "services/socket/service_socket.h"
#include "services/socket/sock_obj.h"
#include "services/socket/sock_policy.h"
#include "services/socket/sock_unix_path.h"
#include "util/clock.h"

/* ------------------------------------------------------------ settings */

static const struct config_key socket_settings[] = {
	{ "socket_allow_inet", CONFIG_COUNT, 0, 1, 1 },
	{ "socket_allow_inet6", CONFIG_COUNT, 0, 1, 1 },
	{ "socket_allow_unix", CONFIG_COUNT, 0, 1, 1 },
	/* evdns: seconds per try and tries per name server */
	{ "socket_dns_timeout_s", CONFIG_COUNT, 1, 60, 2 },
	{ "socket_dns_attempts", CONFIG_COUNT, 1, 10, 2 },
	{ NULL, 0, 0, 0, 0 },
};

struct socket_global {
	struct event_base *base;
	pthread_t main_thread; /* the loop's: start() runs on it */
	struct evdns_base *dns;
	struct sock_policy pol;
};

static struct socket_global g;

/* ------------------------------------------------------------ per call */

#define LANE_WAIT 1 /* lane_try: not done, wait for l->wait */

enum lane_wait {
	WAIT_NONE,
	WAIT_READ,
	WAIT_WRITE,
	WAIT_POLL,
	WAIT_DNS,
	WAIT_RDNS,
};

struct sock_call;

/* A DNS request's link to its lane: the lane may go (cancel) while libevent
 * still holds the request; the callback then only frees this. */
struct dns_ticket {
	struct sock_lane *lane;
};

struct sock_lane {
	struct sock_call *sc;
	uint8_t idx;
	uint8_t wait;          /* enum lane_wait while waiting, WAIT_NONE when done */
	bool connecting;       /* CONNECT: in progress, SO_ERROR tells */
	bool with_creds;       /* retries act as the client (a Unix path is named) */
	bool value_op;         /* the answer is an int64_t value */
	struct gpusys_sock_req q;
	const uint8_t *body;   /* data to send, poll list, host and service */
	uint32_t body_len;
	const uint8_t *addr;   /* address argument (in the request) */
	uint32_t addr_len;
	struct handle_entry *e;  /* with a reference while the lane works */
	struct sock *s;
	uint8_t *out;          /* response room */
	uint32_t room;
	uint32_t out_len;
	int64_t val;
	uint64_t done;         /* bytes so far (send all, MSG_WAITALL, bulk) */
	uint64_t deadline_ns;  /* CLOCK_MONOTONIC; 0: none */
	struct event *ev;      /* the descriptor (or, for a poll, the timer) */
	struct event **pev;    /* POLL: one persistent event per descriptor */
	struct handle_entry **pe;
	struct pollfd *pfd;
	uint32_t npoll;
	struct dns_ticket *dns;
	struct sock_lane *wnext; /* in s->waiters */
};

struct sock_call {
	pthread_mutex_t lock;      /* recursive: a DNS answer may come inside arming */
	struct port_call *call;    /* NULL once cancelled */
	struct sock_client *cl;
	struct event *ev_arm;      /* main loop: arm the lanes, or clean up after a cancel */
	unsigned waiting;          /* lanes not done */
	bool holding;              /* arming: do not complete yet */
	bool cancelled;
	bool finishing;            /* call_complete is under way */
	struct sock_lane lane[GPUSYS_WARP_LANES];
};

/* call->resp_buf: this header, then the lanes' response room. */
struct resp_head {
	struct sock_call *sc;
	uint64_t pad;
};

struct sock_client {
	const struct client *c;
	struct handle_table *ht;
};

/* ------------------------------------------------------ socket objects */

static void sock_closed(struct handle_entry *e)
{
	struct sock *s = e->obj;
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	/* Lanes waiting on it finish with -EBADF on the main loop. */
	for (struct sock_lane *l = s->waiters; l; l = l->wnext)
		if (l->ev)
			event_active(l->ev, EV_READ, 1);
	pthread_mutex_unlock(&s->lock);
}

static void sock_release(int fd, void *obj)
{
	struct sock *s = obj;
	if (fd >= 0)
		close(fd); /* non-blocking, SO_LINGER with time 0 at most: never waits */
	if (s) {
		pthread_mutex_destroy(&s->lock);
		free(s);
	}
}

static const struct handle_entry_ops sock_entry_ops = { .closed = sock_closed, .release = sock_release };

static struct sock *sock_new(int domain, int type, bool nonblock)
{
	struct sock *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->domain = domain;
	s->type = type;
	s->nonblock = nonblock;
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

/* Enter a new descriptor; the handle, or -errno with fd closed. */
static int sock_insert(struct sock_client *cl, int fd, int domain, int type, bool nonblock)
{
	struct sock *s = sock_new(domain, type, nonblock);
	int h = s ? handle_table_insert_obj(cl->ht, fd, HANDLE_KIND_SOCKET, 0, s, &sock_entry_ops) : -ENOMEM;
	if (h < 0)
		sock_release(fd, s);
	return h;
}

/* ---------------------------------------------------------- addresses */

static void addr_record(struct gpusys_sock_addr *r, const struct sockaddr_storage *ss, socklen_t len)
{
	memset(r, 0, sizeof(*r));
	if (len > sizeof(r->addr))
		len = sizeof(r->addr);
	r->len = len;
	memcpy(r->addr, ss, len);
}

static bool family_allowed(int domain)
{
	return domain >= 0 && domain < 32 && (g.pol.families & SOCK_FAMILY_BIT(domain));
}

/* ------------------------------------------------ acting as the client */

/* A Unix socket file is created with the client's umask: each worker takes
 * a private fs_struct once (as the file service's do). */
static __thread int fs_private;

static mode_t thread_umask(mode_t m)
{
	if (fs_private == 0)
		fs_private = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (fs_private < 0) {
		mode_t cur = umask(0);
		umask(cur);
		return cur;
	}
	return umask(m);
}

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

static int do_setsockopt(struct sock_lane *l)
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

static int do_getsockopt(struct sock_lane *l)
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

/* ---------------------------------------------------- name resolution */

static int eai_from_evutil(int r)
{
	switch (r) {
	case 0:
		return 0;
	case EVUTIL_EAI_ADDRFAMILY:
	case EVUTIL_EAI_FAMILY:
		return EAI_FAMILY;
	case EVUTIL_EAI_AGAIN:
		return EAI_AGAIN;
	case EVUTIL_EAI_BADFLAGS:
		return EAI_BADFLAGS;
	case EVUTIL_EAI_FAIL:
		return EAI_FAIL;
	case EVUTIL_EAI_MEMORY:
		return EAI_MEMORY;
	case EVUTIL_EAI_NODATA:
	case EVUTIL_EAI_NONAME:
		return EAI_NONAME;
	case EVUTIL_EAI_SERVICE:
		return EAI_SERVICE;
	case EVUTIL_EAI_SOCKTYPE:
		return EAI_SOCKTYPE;
	default:
		return EAI_FAIL;
	}
}

/* RFC 6761 6.4: resolvers should answer names under .invalid with
 * NXDOMAIN themselves; we do, without asking a server. */
static bool name_is_invalid(const char *host)
{
	size_t n = strlen(host);
	while (n && host[n - 1] == '.')
		n--;
	if (n == 7 && strncasecmp(host, "invalid", 7) == 0)
		return true;
	return n > 8 && strncasecmp(host + n - 8, ".invalid", 8) == 0;
}

/* ------------------------------------------------------------ one step */

static bool lane_nonblock(const struct sock_lane *l)
{
	return l->s->nonblock || (l->q.flags & MSG_DONTWAIT);
}

/* A transfer that stops on an error (or would block) after moving some
 * bytes answers with the count, as send(2) and recv(2) do; the error is
 * what the next call sees. */
static int lane_partial_or(struct sock_lane *l, int err)
{
	if (l->done) {
		l->val = (int64_t)l->done;
		return 0;
	}
	return err;
}

/* connect(2) or sendto(2) the lane's address, a Unix path going through
 * the path resolver (sock_unix_path.h): 0 (or bytes sent) or -errno. */
typedef ssize_t addr_call_fn(struct sock_lane *l, const struct sockaddr *to, socklen_t tolen, const void *data,
			     size_t len, int flags);

static ssize_t connect_to(struct sock_lane *l, const struct sockaddr *to, socklen_t tolen, const void *data,
			  size_t len, int flags)
{
	(void)data, (void)len, (void)flags;
	return connect(l->e->fd, to, tolen) < 0 ? -errno : 0;
}

static ssize_t send_to(struct sock_lane *l, const struct sockaddr *to, socklen_t tolen, const void *data,
		       size_t len, int flags)
{
	ssize_t r = sendto(l->e->fd, data, len, flags, to, tolen);
	return r < 0 ? -errno : r;
}

static ssize_t addr_call(struct sock_lane *l, addr_call_fn *fn, const void *data, size_t len, int flags)
{
	const struct sockaddr *to = l->addr_len ? (const struct sockaddr *)(const void *)l->addr : NULL;
	if (!to || !sock_unix_is_path(l->addr, l->addr_len))
		return fn(l, to, l->addr_len, data, len, flags);
	struct sockaddr_un sun;
	socklen_t sl;
	int hold;
	int r = sock_unix_target(l->addr, l->addr_len, &sun, &sl, &hold);
	if (r < 0)
		return r;
	ssize_t n = fn(l, (const struct sockaddr *)&sun, sl, data, len, flags);
	close(hold);
	return n;
}

#define SEND_FLAGS (MSG_DONTWAIT | MSG_MORE | MSG_OOB | MSG_EOR | MSG_NOSIGNAL | MSG_CONFIRM)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_TRUNC | MSG_OOB)

static int step_send(struct sock_lane *l, const uint8_t *data, uint64_t len)
{
	int flags = (l->q.flags & SEND_FLAGS) | MSG_NOSIGNAL | MSG_DONTWAIT;
	bool stream = l->s->type == SOCK_STREAM;
	for (;;) {
		ssize_t r = addr_call(l, send_to, data + l->done, len - l->done, flags);
		if (r < 0) {
			errno = (int)-r;
			r = -1;
		}
		if (r >= 0) {
			l->done += (uint64_t)r;
			if (l->done >= len || !stream) {
				l->val = (int64_t)l->done;
				return 0;
			}
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
			return lane_partial_or(l, -errno);
		if (lane_nonblock(l))
			return lane_partial_or(l, -EAGAIN);
		l->wait = WAIT_WRITE;
		return LANE_WAIT;
	}
}

/* Receive into dst (room bytes). With MSG_WAITALL (and for bulk receives
 * that ask for it) until room is full on a stream. */
static int step_recv(struct sock_lane *l, uint8_t *dst, uint64_t room, struct sockaddr_storage *from,
		     socklen_t *fromlen)
{
	int flags = (l->q.flags & RECV_FLAGS & ~MSG_WAITALL) | MSG_DONTWAIT;
	bool all = (l->q.flags & MSG_WAITALL) && l->s->type == SOCK_STREAM && !(l->q.flags & MSG_PEEK);
	for (;;) {
		ssize_t r = recvfrom(l->e->fd, dst + l->done, room - l->done, flags, (struct sockaddr *)from, fromlen);
		if (r >= 0) {
			if ((flags & MSG_TRUNC) && l->s->type != SOCK_STREAM && (uint64_t)r > room) {
				l->val = r; /* the datagram's real length, as MSG_TRUNC asks */
				l->done = room;
				return 0;
			}
			l->done += (uint64_t)r;
			if (!all || r == 0 || l->done >= room) {
				l->val = (int64_t)l->done;
				return 0;
			}
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return lane_partial_or(l, -errno);
		if (lane_nonblock(l))
			return lane_partial_or(l, -EAGAIN);
		l->wait = WAIT_READ;
		return LANE_WAIT;
	}
}

static int step_accept(struct sock_lane *l)
{
	int flags = l->q.flags;
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return -EINVAL;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = accept4(l->e->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (err == EAGAIN || err == EWOULDBLOCK) {
			if (l->s->nonblock)
				return -EAGAIN;
			l->wait = WAIT_READ;
			return LANE_WAIT;
		}
		/* Errors of the new connection (ECONNABORTED...) are the
		 * caller's to see, as accept(2) reports them. */
		return -err;
	}
	int h = sock_insert(l->sc->cl, fd, l->s->domain, l->s->type, flags & SOCK_NONBLOCK);
	if (h < 0)
		return h;
	struct gpusys_sock_accepted a;
	memset(&a, 0, sizeof(a));
	a.handle = h;
	addr_record(&a.peer, &ss, len);
	memcpy(l->out, &a, sizeof(a));
	l->out_len = sizeof(a);
	return 0;
}

static int step_connect(struct sock_lane *l)
{
	if (l->connecting) {
		int err = 0;
		socklen_t n = sizeof(err);
		if (getsockopt(l->e->fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0)
			return -errno;
		return -err;
	}
	int err = (int)addr_call(l, connect_to, NULL, 0, 0);
	if (err == 0)
		return 0;
	err = -err;
	if (err == EINPROGRESS) {
		if (l->s->nonblock)
			return -EINPROGRESS;
		l->connecting = true;
		l->wait = WAIT_WRITE;
		return LANE_WAIT;
	}
	if (err == EAGAIN && l->s->domain == AF_UNIX && !l->s->nonblock) {
		l->wait = WAIT_WRITE; /* the listener's backlog is full: wait for room */
		return LANE_WAIT;
	}
	return -err;
}

static int step_poll(struct sock_lane *l)
{
	int n = poll(l->pfd, l->npoll, 0);
	if (n < 0)
		return -errno;
	for (uint32_t i = 0; i < l->npoll; i++)
		n += !l->pe[i]; /* a bad handle is ready at once, with POLLNVAL */
	if (n > 0 || l->q.timeout_ms == 0) {
		int16_t *rev = (int16_t *)(void *)l->out;
		for (uint32_t i = 0; i < l->npoll; i++) {
			int16_t v = l->pe[i] ? l->pfd[i].revents : POLLNVAL;
			memcpy(&rev[i], &v, sizeof(v));
		}
		l->out_len = l->npoll * (uint32_t)sizeof(int16_t);
		return 0;
	}
	l->wait = WAIT_POLL;
	return LANE_WAIT;
}

/* One attempt of lane l's call (every op). 0 or -errno: done (value in
 * l->val, data in l->out, l->out_len); LANE_WAIT: l->wait says on what. */
static int lane_try(struct sock_lane *l)
{
	const struct client *c = l->sc->cl->c;
	switch (l->sc->call->opcode) {
	case GPUSYS_OP_SOCK_SEND:
	case GPUSYS_OP_SOCK_SENDTO:
		return step_send(l, l->body, l->body_len);
	case GPUSYS_OP_SOCK_BULK_SEND:
		return step_send(l, c->bulk + l->q.bulk_off, l->q.count);
	case GPUSYS_OP_SOCK_RECV: {
		int r = step_recv(l, l->out, l->room, NULL, NULL);
		if (r == 0)
			l->out_len = (uint32_t)l->done;
		return r;
	}
	case GPUSYS_OP_SOCK_BULK_RECV:
		return step_recv(l, c->bulk + l->q.bulk_off, l->q.count, NULL, NULL);
	case GPUSYS_OP_SOCK_RECVFROM: {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		memset(&ss, 0, sizeof(ss));
		struct gpusys_sock_addr rec;
		int r = step_recv(l, l->out + sizeof(rec), l->room - sizeof(rec), &ss, &len);
		if (r != 0)
			return r;
		addr_record(&rec, &ss, l->s->type == SOCK_STREAM ? 0 : len);
		if (l->s->type == SOCK_STREAM && getpeername(l->e->fd, (struct sockaddr *)&ss, &len) == 0)
			addr_record(&rec, &ss, len);
		memcpy(l->out, &rec, sizeof(rec));
		l->out_len = (uint32_t)(sizeof(rec) + l->done);
		return 0;
	}
	case GPUSYS_OP_SOCK_ACCEPT:
		return step_accept(l);
	case GPUSYS_OP_SOCK_CONNECT:
		return step_connect(l);
	case GPUSYS_OP_SOCK_POLL:
		return step_poll(l);
	default:
		return -ENOSYS;
	}
}

/* -------------------------------------------------- finishing a lane */

/* Off its socket's list of waiters (any thread). */
static void lane_unlist(struct sock_lane *l)
{
	if (!l->s)
		return;
	pthread_mutex_lock(&l->s->lock);
	for (struct sock_lane **pp = &l->s->waiters; *pp; pp = &(*pp)->wnext) {
		if (*pp == l) {
			*pp = l->wnext;
			break;
		}
	}
	pthread_mutex_unlock(&l->s->lock);
}

/* Free the lane's events (main loop, or a thread before any exist). */
static void lane_unwatch(struct sock_lane *l)
{
	lane_unlist(l);
	if (l->ev) {
		if (l->s)
			pthread_mutex_lock(&l->s->lock);
		event_free(l->ev);
		l->ev = NULL;
		if (l->s)
			pthread_mutex_unlock(&l->s->lock);
	}
	for (uint32_t i = 0; l->pev && i < l->npoll; i++)
		if (l->pev[i])
			event_free(l->pev[i]);
	free(l->pev);
	l->pev = NULL;
	if (l->dns) {
		l->dns->lane = NULL; /* its callback frees it */
		l->dns = NULL;
	}
}

/* Let go of the lane's descriptors (any thread; after lane_unlist). */
static void lane_unref(struct sock_lane *l)
{
	struct handle_table *ht = l->sc->cl->ht;
	if (l->e)
		handle_table_put(ht, l->e);
	l->e = NULL;
	l->s = NULL;
	for (uint32_t i = 0; l->pe && i < l->npoll; i++)
		if (l->pe[i])
			handle_table_put(ht, l->pe[i]);
	free(l->pe);
	free(l->pfd);
	l->pe = NULL;
	l->pfd = NULL;
}

/* Let go of everything the lane holds (events, descriptors). */
static void lane_drop(struct sock_lane *l)
{
	lane_unwatch(l);
	lane_unref(l);
}

/* Write lane l's answer into the call. */
static void lane_answer(struct sock_lane *l, int r)
{
	struct port_call *call = l->sc->call;
	unsigned i = l->idx;
	call->lane_status[i] = r;
	if (r < 0)
		return;
	if (l->value_op) {
		memcpy(l->out, &l->val, sizeof(l->val));
		l->out_len = sizeof(l->val);
	}
	call->resp_len[i] = l->out_len;
	call->resp_data[i] = l->out;
}

static void sc_free(struct sock_call *sc)
{
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++)
		if (sc->lane[i].sc)
			lane_drop(&sc->lane[i]);
	if (sc->ev_arm)
		event_free(sc->ev_arm);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
}

/* Entering from the main loop: false when the call was cancelled (the
 * caller returns at once; the cleanup is on its way). */
static bool sc_enter(struct sock_call *sc)
{
	pthread_mutex_lock(&sc->lock);
	if (sc->cancelled) {
		pthread_mutex_unlock(&sc->lock);
		return false;
	}
	return true;
}

/* Leaving: when every lane is done, complete the call (without our lock:
 * the core may be cancelling on another thread). */
static void sc_leave(struct sock_call *sc)
{
	bool fin = sc->waiting == 0 && !sc->holding && !sc->finishing && !sc->cancelled;
	struct port_call *call = sc->call;
	if (fin)
		sc->finishing = true;
	pthread_mutex_unlock(&sc->lock);
	if (fin && call_complete(call))
		sc_free(sc); /* ours: no cancel can come now */
	/* else the core took the call back: its cancel frees sc */
}

/* A waiting lane is done (on the main loop, sc locked). */
static void lane_finish(struct sock_lane *l, int r)
{
	struct sock_call *sc = l->sc;
	lane_drop(l);
	lane_answer(l, r);
	l->wait = WAIT_NONE;
	sc->waiting--;
}

/* ---------------------------------------------------------- waiting */

static void lane_event(evutil_socket_t fd, short what, void *arg);

/* Watch l's descriptor for its wait, until its deadline. */
static void lane_watch(struct sock_lane *l)
{
	struct timeval tv, *tvp = NULL;
	if (l->deadline_ns) {
		uint64_t now = now_ns();
		uint64_t left = l->deadline_ns > now ? l->deadline_ns - now : 0;
		tv.tv_sec = (time_t)(left / 1000000000u);
		tv.tv_usec = (suseconds_t)(left % 1000000000u / 1000u);
		tvp = &tv;
	}
	short ev = l->wait == WAIT_READ ? EV_READ : EV_WRITE;
	/* A fresh event each time, under the socket's lock: a close on a
	 * worker activates the lane's event under that lock too. */
	pthread_mutex_lock(&l->s->lock);
	if (l->ev)
		event_free(l->ev);
	l->ev = event_new(g.base, l->e->fd, ev, lane_event, l);
	bool ok = l->ev && event_add(l->ev, tvp) == 0;
	if (ok && l->s->closed)
		event_active(l->ev, EV_READ, 1);
	pthread_mutex_unlock(&l->s->lock);
	if (!ok)
		lane_finish(l, -ENOMEM);
}

/* What a lane answers when its time is up: POSIX's for an expired
 * SO_RCVTIMEO / SO_SNDTIMEO (bytes so far, else EAGAIN; connect:
 * EINPROGRESS), or 0 descriptors ready for a poll. */
static int lane_timeout_result(struct sock_lane *l)
{
	uint16_t op = l->sc->call->opcode;
	if (op == GPUSYS_OP_SOCK_POLL) {
		int16_t *rev = (int16_t *)(void *)l->out;
		memset(rev, 0, l->npoll * sizeof(int16_t));
		l->out_len = l->npoll * (uint32_t)sizeof(int16_t);
		return 0;
	}
	if (op == GPUSYS_OP_SOCK_CONNECT)
		return -EINPROGRESS;
	if (l->done && op != GPUSYS_OP_SOCK_RECVFROM) {
		l->val = (int64_t)l->done;
		if (op == GPUSYS_OP_SOCK_RECV)
			l->out_len = (uint32_t)l->done;
		return 0;
	}
	return -EAGAIN;
}

static void lane_retry(struct sock_lane *l)
{
	struct creds_saved saved;
	int r;
	if (l->with_creds) {
		r = creds_enter(&l->sc->cl->c->creds, &saved);
		if (r == 0) {
			r = lane_try(l);
			creds_leave(&saved);
		}
	} else {
		r = lane_try(l);
	}
	if (r == LANE_WAIT) {
		if (l->wait == WAIT_POLL)
			return; /* its events persist */
		lane_watch(l);
		return;
	}
	lane_finish(l, r);
}

static void lane_step(struct sock_lane *l, short what)
{
	if (l->s) {
		pthread_mutex_lock(&l->s->lock);
		bool closed = l->s->closed;
		pthread_mutex_unlock(&l->s->lock);
		if (closed) {
			lane_finish(l, -EBADF);
			return;
		}
	}
	if (what & EV_TIMEOUT) {
		/* One last look: what arrived with the deadline counts (not
		 * for a connect: SO_ERROR is 0 while it is still going). */
		int r = l->connecting ? LANE_WAIT : lane_try(l);
		lane_finish(l, r == LANE_WAIT ? lane_timeout_result(l) : r);
		return;
	}
	lane_retry(l);
}

static void lane_event(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	if (!sc_enter(sc))
		return;
	if (l->wait != WAIT_NONE)
		lane_step(l, what);
	sc_leave(sc);
}

static void poll_event(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	(void)what;
	if (!sc_enter(sc))
		return;
	if (l->wait != WAIT_NONE)
		lane_retry(l);
	sc_leave(sc);
}

static void poll_timer(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	(void)what;
	if (!sc_enter(sc))
		return;
	if (l->wait != WAIT_NONE) {
		int r = step_poll(l);
		lane_finish(l, r == LANE_WAIT ? lane_timeout_result(l) : r);
	}
	sc_leave(sc);
}

static void poll_arm(struct sock_lane *l)
{
	l->pev = calloc(l->npoll, sizeof(*l->pev));
	if (!l->pev) {
		lane_finish(l, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < l->npoll; i++) {
		if (!l->pe[i])
			continue;
		short ev = EV_PERSIST | ((l->pfd[i].events & POLLOUT) ? EV_WRITE : 0) |
			   ((l->pfd[i].events & ~POLLOUT) || !(l->pfd[i].events & POLLOUT) ? EV_READ : 0);
		l->pev[i] = event_new(g.base, l->pfd[i].fd, ev, poll_event, l);
		if (!l->pev[i] || event_add(l->pev[i], NULL) < 0) {
			lane_finish(l, -ENOMEM);
			return;
		}
	}
	if (l->q.timeout_ms > 0) {
		struct timeval tv = { .tv_sec = l->q.timeout_ms / 1000, .tv_usec = l->q.timeout_ms % 1000 * 1000 };
		l->ev = evtimer_new(g.base, poll_timer, l);
		if (!l->ev || evtimer_add(l->ev, &tv) < 0) {
			lane_finish(l, -ENOMEM);
			return;
		}
	}
	/* Ready between the worker's look and now: the events fire at once
	 * (level triggered). */
}

/* --------------------------------------------------------------- DNS */

static void dns_fill(struct sock_lane *l, int result, struct evutil_addrinfo *res);

static void dns_answer(int result, struct evutil_addrinfo *res, void *arg)
{
	struct dns_ticket *t = arg;
	struct sock_lane *l = t->lane;
	if (!l) { /* the lane went away: cancelled */
		if (res)
			evutil_freeaddrinfo(res);
		free(t);
		return;
	}
	free(t);
	struct sock_call *sc = l->sc;
	if (!sc_enter(sc)) {
		if (res)
			evutil_freeaddrinfo(res);
		return;
	}
	l->dns = NULL;
	dns_fill(l, result, res);
	sc_leave(sc);
}

static void dns_fill(struct sock_lane *l, int result, struct evutil_addrinfo *res)
{
	if (result != 0) {
		lane_finish(l, eai_from_evutil(result));
		return;
	}
	uint32_t n = 0, max = l->room / sizeof(struct gpusys_addrinfo);
	for (struct evutil_addrinfo *ai = res; ai && n < max; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(((struct gpusys_addrinfo *)0)->addr))
			continue;
		struct gpusys_addrinfo a;
		memset(&a, 0, sizeof(a));
		a.family = ai->ai_family;
		a.socktype = ai->ai_socktype;
		a.protocol = ai->ai_protocol;
		a.addr_len = (uint32_t)ai->ai_addrlen;
		memcpy(a.addr, ai->ai_addr, ai->ai_addrlen);
		memcpy(l->out + n * sizeof(a), &a, sizeof(a));
		n++;
	}
	evutil_freeaddrinfo(res);
	l->out_len = n * (uint32_t)sizeof(struct gpusys_addrinfo);
	lane_finish(l, n ? 0 : EAI_NONAME);
}

static void dns_start(struct sock_lane *l)
{
	const char *host = (const char *)l->body;
	const char *serv = host + strlen(host) + 1;
	struct evutil_addrinfo hints;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = l->q.a;
	hints.ai_socktype = l->q.b;
	hints.ai_protocol = l->q.c;
	hints.ai_flags = l->q.flags;
	struct dns_ticket *t = calloc(1, sizeof(*t));
	if (!t || !g.dns) {
		free(t);
		lane_finish(l, EAI_MEMORY);
		return;
	}
	t->lane = l;
	l->dns = t;
	/* The answer may come at once (a number, /etc/hosts): then l is
	 * already finished when this returns. */
	evdns_getaddrinfo(g.dns, *host ? host : NULL, *serv ? serv : NULL, &hints, dns_answer, t);
}

static void rdns_fill(struct sock_lane *l, int result, char type, int count, int ttl, void *addresses);

static void rdns_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	struct dns_ticket *t = arg;
	struct sock_lane *l = t->lane;
	free(t);
	if (!l)
		return;
	struct sock_call *sc = l->sc;
	if (!sc_enter(sc))
		return;
	l->dns = NULL;
	rdns_fill(l, result, type, count, ttl, addresses);
	sc_leave(sc);
}

static void rdns_fill(struct sock_lane *l, int result, char type, int count, int ttl, void *addresses)
{
	(void)ttl;
	char *host = (char *)l->out;
	size_t room = l->room;
	if (result == DNS_ERR_NONE && type == DNS_PTR && count > 0 && addresses) {
		snprintf(host, room, "%s", *(char **)addresses);
	} else if (l->q.flags & NI_NAMEREQD) {
		lane_finish(l, result == DNS_ERR_NOTEXIST ? EAI_NONAME : EAI_AGAIN);
		return;
	} else if (getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, host, (socklen_t)room, NULL,
			       0, NI_NUMERICHOST) != 0) {
		lane_finish(l, EAI_FAIL);
		return;
	}
	/* The service follows the host: asked for again, numerically or by
	 * name from /etc/services. */
	size_t hl = strlen(host) + 1;
	char serv[GPUSYS_SOCK_SERV_MAX];
	int r = getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, NULL, 0, serv, sizeof(serv),
			    NI_NUMERICHOST | (l->q.flags & (NI_NUMERICSERV | NI_DGRAM)));
	if (r != 0) {
		lane_finish(l, r);
		return;
	}
	snprintf(host + hl, room - hl, "%s", serv);
	l->out_len = (uint32_t)(hl + strlen(serv) + 1);
	lane_finish(l, 0);
}

static void rdns_start(struct sock_lane *l)
{
	struct dns_ticket *t = calloc(1, sizeof(*t));
	if (!t || !g.dns) {
		free(t);
		lane_finish(l, EAI_MEMORY);
		return;
	}
	t->lane = l;
	l->dns = t;
	struct sockaddr_storage ss;
	memcpy(&ss, l->addr, l->addr_len);
	struct evdns_request *rq;
	if (ss.ss_family == AF_INET)
		rq = evdns_base_resolve_reverse(g.dns, &((struct sockaddr_in *)&ss)->sin_addr, 0, rdns_answer, t);
	else
		rq = evdns_base_resolve_reverse_ipv6(g.dns, &((struct sockaddr_in6 *)&ss)->sin6_addr, 0, rdns_answer, t);
	if (!rq && l->dns == t) {
		l->dns = NULL;
		free(t);
		lane_finish(l, EAI_FAIL);
	}
}

/* -------------------------------------------------- the hand-off */

static void lane_arm(struct sock_lane *l)
{
	switch (l->wait) {
	case WAIT_DNS:
		dns_start(l);
		return;
	case WAIT_RDNS:
		rdns_start(l);
		return;
	case WAIT_POLL:
		poll_arm(l);
		return;
	default:
		break;
	}
	pthread_mutex_lock(&l->s->lock);
	bool closed = l->s->closed;
	if (!closed) {
		l->wnext = l->s->waiters;
		l->s->waiters = l;
	}
	pthread_mutex_unlock(&l->s->lock);
	if (closed) {
		lane_finish(l, -EBADF);
		return;
	}
	/* Retry now: the descriptor may have become ready since. */
	lane_retry(l);
}

static void arm(evutil_socket_t fd, short what, void *arg)
{
	struct sock_call *sc = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&sc->lock);
	if (sc->cancelled) {
		/* Cancelled on another thread: the rest is ours to free. */
		pthread_mutex_unlock(&sc->lock);
		sc_free(sc);
		return;
	}
	sc->holding = true;
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++)
		if (sc->lane[i].wait != WAIT_NONE)
			lane_arm(&sc->lane[i]);
	sc->holding = false;
	sc_leave(sc);
}

static void sock_cancel(struct port_call *call, enum call_cancel_reason why)
{
	struct resp_head head;
	(void)why;
	memcpy(&head, call->resp_buf, sizeof(head));
	struct sock_call *sc = head.sc;
	pthread_mutex_lock(&sc->lock);
	sc->cancelled = true;
	sc->call = NULL;
	if (pthread_equal(pthread_self(), g.main_thread)) {
		pthread_mutex_unlock(&sc->lock);
		sc_free(sc); /* events and all: nothing else runs on this loop now */
		return;
	}
	/* The handler's thread (the client went while it returned): let go of
	 * the descriptors now, the events on the main loop. */
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		struct sock_lane *l = &sc->lane[i];
		if (!l->sc)
			continue;
		lane_unlist(l);
		lane_unref(l);
	}
	event_active(sc->ev_arm, EV_TIMEOUT, 1);
	pthread_mutex_unlock(&sc->lock);
}

static const struct call_later_ops sock_later_ops = { .cancel = sock_cancel };

/* --------------------------------------------------------- first try */

/* Bytes of response room lane l needs for op (q copied). */
static uint32_t room_for(uint16_t op, const struct gpusys_sock_req *q, uint32_t cap, bool *value_op)
{
	*value_op = false;
	uint64_t c;
	switch (op) {
	case GPUSYS_OP_SOCK_RECV:
		return q->count < cap ? (uint32_t)q->count : cap;
	case GPUSYS_OP_SOCK_RECVFROM:
		if (cap < sizeof(struct gpusys_sock_addr))
			return 0;
		c = q->count < cap - sizeof(struct gpusys_sock_addr) ? q->count : cap - sizeof(struct gpusys_sock_addr);
		return (uint32_t)(c + sizeof(struct gpusys_sock_addr));
	case GPUSYS_OP_SOCK_ACCEPT:
		return sizeof(struct gpusys_sock_accepted);
	case GPUSYS_OP_SOCK_GETSOCKNAME:
	case GPUSYS_OP_SOCK_GETPEERNAME:
		return sizeof(struct gpusys_sock_addr);
	case GPUSYS_OP_SOCK_GETSOCKOPT:
		c = q->count < GPUSYS_SOCK_OPT_MAX ? q->count : GPUSYS_SOCK_OPT_MAX;
		return (uint32_t)(c < cap ? c : cap);
	case GPUSYS_OP_SOCK_POLL:
		c = GPUSYS_SOCK_POLL_MAX * sizeof(int16_t);
		return (uint32_t)(c < cap ? c : cap);
	case GPUSYS_OP_SOCK_GETADDRINFO:
		c = cap < GPUSYS_SOCK_AI_MAX * sizeof(struct gpusys_addrinfo) ? cap
									      : GPUSYS_SOCK_AI_MAX * sizeof(struct gpusys_addrinfo);
		return (uint32_t)(c / sizeof(struct gpusys_addrinfo) * sizeof(struct gpusys_addrinfo));
	case GPUSYS_OP_SOCK_GETNAMEINFO:
		c = GPUSYS_SOCK_HOST_MAX + GPUSYS_SOCK_SERV_MAX;
		return (uint32_t)(c < cap ? c : cap);
	default:
		*value_op = true;
		return sizeof(int64_t);
	}
}

static bool op_needs_socket(uint16_t op)
{
	return op != GPUSYS_OP_SOCK_SOCKET && op != GPUSYS_OP_SOCK_CLOSE && op != GPUSYS_OP_SOCK_POLL &&
	       op != GPUSYS_OP_SOCK_GETADDRINFO && op != GPUSYS_OP_SOCK_GETNAMEINFO;
}

/* Ops that name a path or create a socket: done as the client. */
static bool op_as_client(uint16_t op)
{
	return op == GPUSYS_OP_SOCK_SOCKET || op == GPUSYS_OP_SOCK_BIND || op == GPUSYS_OP_SOCK_CONNECT ||
	       op == GPUSYS_OP_SOCK_SENDTO;
}

static int first_socket(struct sock_lane *l)
{
	int domain = l->q.a, type = l->q.b & ~(SOCK_NONBLOCK | SOCK_CLOEXEC), proto = l->q.c;
	if (!family_allowed(domain))
		return -EAFNOSUPPORT;
	if (type != SOCK_STREAM && type != SOCK_DGRAM && !(type == SOCK_SEQPACKET && domain == AF_UNIX))
		return type == SOCK_RAW ? -EPERM : -EINVAL;
	int fd = socket(domain, type | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
	if (fd < 0)
		return -errno;
	int h = sock_insert(l->sc->cl, fd, domain, type, l->q.b & SOCK_NONBLOCK);
	if (h < 0)
		return h;
	l->val = h;
	return 0;
}

static int first_poll(struct sock_lane *l)
{
	uint32_t n = (uint32_t)l->q.a;
	if (l->q.a < 0 || n > GPUSYS_SOCK_POLL_MAX || l->body_len < n * sizeof(struct gpusys_pollfd))
		return -EINVAL;
	if (n * sizeof(int16_t) > l->room)
		return -EMSGSIZE;
	l->npoll = n;
	l->pe = calloc(n ? n : 1, sizeof(*l->pe));
	l->pfd = calloc(n ? n : 1, sizeof(*l->pfd));
	if (!l->pe || !l->pfd)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct gpusys_pollfd p;
		memcpy(&p, l->body + i * sizeof(p), sizeof(p));
		l->pe[i] = handle_table_get(l->sc->cl->ht, p.handle, HANDLE_KIND_SOCKET);
		if (!l->pe[i])
			l->pe[i] = handle_table_get(l->sc->cl->ht, p.handle, HANDLE_KIND_FILE);
		l->pfd[i].fd = l->pe[i] ? l->pe[i]->fd : -1; /* poll(2) skips negative descriptors */
		l->pfd[i].events = p.events;
	}
	if (l->q.timeout_ms > 0)
		l->deadline_ns = now_ns() + (uint64_t)l->q.timeout_ms * 1000000u;
	return step_poll(l);
}

static bool service_known(const char *serv, int socktype)
{
	struct servent se, *res = NULL;
	char buf[1024];
	const char *proto = socktype == SOCK_DGRAM ? "udp" : socktype == SOCK_STREAM ? "tcp" : NULL;
	if (getservbyname_r(serv, proto, &se, buf, sizeof(buf), &res) == 0 && res)
		return true;
	return !proto && getservbyname_r(serv, "udp", &se, buf, sizeof(buf), &res) == 0 && res;
}

static int first_getaddrinfo(struct sock_lane *l)
{
	/* host NUL service NUL, nothing else */
	const uint8_t *nul = l->body_len ? memchr(l->body, 0, l->body_len) : NULL;
	if (!nul || nul == l->body + l->body_len - 1 || l->body[l->body_len - 1] != 0)
		return -EINVAL;
	const char *host = (const char *)l->body;
	const char *serv = (const char *)nul + 1;
	if (strlen(serv) != l->body_len - (uint32_t)(nul - l->body) - 2u || strlen(host) >= GPUSYS_SOCK_HOST_MAX ||
	    strlen(serv) >= GPUSYS_SOCK_SERV_MAX)
		return -EINVAL;
	if (!*host && !*serv)
		return EAI_NONAME;
	if (*host && name_is_invalid(host))
		return EAI_NONAME;
	if (l->q.a != AF_UNSPEC && l->q.a != AF_INET && l->q.a != AF_INET6)
		return EAI_FAMILY;
	if (l->room < sizeof(struct gpusys_addrinfo))
		return -EMSGSIZE;
	/* A service name libevent does not know is EAI_NONAME there;
	 * POSIX says EAI_SERVICE. /etc/services is a local file. */
	if (*serv && strspn(serv, "0123456789") != strlen(serv) && !service_known(serv, l->q.b))
		return EAI_SERVICE;
	l->wait = WAIT_DNS; /* evdns runs on the main loop: always there */
	return LANE_WAIT;
}

static int first_getnameinfo(struct sock_lane *l)
{
	if (l->addr_len < sizeof(sa_family_t))
		return EAI_FAMILY;
	sa_family_t fam;
	memcpy(&fam, l->addr, sizeof(fam));
	if ((fam != AF_INET && fam != AF_INET6) || sock_addr_check(fam, l->addr, l->addr_len) < 0)
		return EAI_FAMILY;
	if (l->room < 2)
		return -EMSGSIZE;
	if (!(l->q.flags & NI_NUMERICHOST)) {
		l->wait = WAIT_RDNS;
		return LANE_WAIT;
	}
	char *host = (char *)l->out;
	char serv[GPUSYS_SOCK_SERV_MAX];
	int r = getnameinfo((const struct sockaddr *)(const void *)l->addr, l->addr_len, host, l->room, serv,
			    sizeof(serv), l->q.flags & (NI_NUMERICHOST | NI_NUMERICSERV | NI_DGRAM));
	if (r != 0)
		return r;
	size_t hl = strlen(host) + 1;
	if (hl + strlen(serv) + 1 > l->room)
		return -EMSGSIZE;
	memcpy(host + hl, serv, strlen(serv) + 1);
	l->out_len = (uint32_t)(hl + strlen(serv) + 1);
	return 0;
}

/* Lane l's first try, on the worker. */
static int lane_first(struct sock_lane *l)
{
	struct sock_client *cl = l->sc->cl;
	uint16_t op = l->sc->call->opcode;
	int r;

	if (l->addr_len && op != GPUSYS_OP_SOCK_GETNAMEINFO) { /* that one has no socket: checked there */
		if ((r = sock_addr_check(l->s->domain, l->addr, l->addr_len)) < 0)
			return r;
		if (l->s->domain == AF_UNIX)
			l->with_creds = true; /* retries name the path again: as the client */
	}
	switch (op) {
	case GPUSYS_OP_SOCK_SOCKET:
		return first_socket(l);
	case GPUSYS_OP_SOCK_CLOSE:
		return handle_table_close_any(cl->ht, l->q.handle);
	case GPUSYS_OP_SOCK_BIND: {
		if (!l->addr_len)
			return -EINVAL;
		if ((r = sock_bind_check(&g.pol, cl->c->pid, l->addr, l->addr_len)) < 0)
			return r;
		mode_t old = thread_umask(cl->c->umask);
		if (sock_unix_is_path(l->addr, l->addr_len)) {
			r = sock_unix_bind(l->e->fd, l->addr, l->addr_len, fs_private > 0);
			if (r == 0) /* getsockname says what the client asked for */
				sock_set_bound(l->s, l->addr, l->addr_len);
		} else {
			r = bind(l->e->fd, (const struct sockaddr *)(const void *)l->addr, l->addr_len) < 0 ? -errno
													  : 0;
		}
		thread_umask(old);
		return r;
	}
	case GPUSYS_OP_SOCK_LISTEN:
		return listen(l->e->fd, l->q.a) < 0 ? -errno : 0;
	case GPUSYS_OP_SOCK_CONNECT:
		if (!l->addr_len)
			return -EINVAL;
		return step_connect(l);
	case GPUSYS_OP_SOCK_SHUTDOWN:
		return shutdown(l->e->fd, l->q.a) < 0 ? -errno : 0;
	case GPUSYS_OP_SOCK_SETSOCKOPT:
		return do_setsockopt(l);
	case GPUSYS_OP_SOCK_GETSOCKOPT:
		return do_getsockopt(l);
	case GPUSYS_OP_SOCK_GETSOCKNAME:
	case GPUSYS_OP_SOCK_GETPEERNAME: {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		memset(&ss, 0, sizeof(ss));
		r = op == GPUSYS_OP_SOCK_GETSOCKNAME ? getsockname(l->e->fd, (struct sockaddr *)&ss, &len)
						     : getpeername(l->e->fd, (struct sockaddr *)&ss, &len);
		if (r < 0)
			return -errno;
		if (op == GPUSYS_OP_SOCK_GETSOCKNAME && l->s->bound_len) { /* bound by path: sock_unix_bind */
			memcpy(&ss, &l->s->bound, l->s->bound_len);
			len = l->s->bound_len;
		}
		struct gpusys_sock_addr rec;
		addr_record(&rec, &ss, len);
		memcpy(l->out, &rec, sizeof(rec));
		l->out_len = sizeof(rec);
		return 0;
	}
	case GPUSYS_OP_SOCK_POLL:
		return first_poll(l);
	case GPUSYS_OP_SOCK_GETADDRINFO:
		return first_getaddrinfo(l);
	case GPUSYS_OP_SOCK_GETNAMEINFO:
		return first_getnameinfo(l);
	case GPUSYS_OP_SOCK_SEND:
	case GPUSYS_OP_SOCK_SENDTO:
		if ((l->q.flags & ~SEND_FLAGS) || l->q.count)
			return -EINVAL;
		return lane_try(l);
	case GPUSYS_OP_SOCK_RECV:
	case GPUSYS_OP_SOCK_RECVFROM:
		if (l->q.flags & ~RECV_FLAGS)
			return -EINVAL;
		return lane_try(l);
	case GPUSYS_OP_SOCK_BULK_SEND:
	case GPUSYS_OP_SOCK_BULK_RECV:
		/* The range must lie in the bulk area as we sized it. */
		if (!cl->c->bulk || l->q.count > cl->c->bulk_bytes || l->q.bulk_off > cl->c->bulk_bytes - l->q.count)
			return -EINVAL;
		if (l->q.flags & ~(op == GPUSYS_OP_SOCK_BULK_SEND ? SEND_FLAGS : RECV_FLAGS))
			return -EINVAL;
		return lane_try(l);
	case GPUSYS_OP_SOCK_ACCEPT:
		return lane_try(l);
	default:
		return -ENOSYS;
	}
}

/* Parse lane i's request into l. 0 or -errno. */
static int lane_parse(struct sock_call *sc, unsigned i, struct sock_lane *l)
{
	struct port_call *call = sc->call;
	uint16_t op = call->opcode;
	if (call->len[i] < sizeof(l->q))
		return -EINVAL;
	memcpy(&l->q, call->data[i], sizeof(l->q));
	/* poll(2) takes an int of milliseconds: longer means the same as
	 * that (and keeps every deadline computed from it in range). */
	if (l->q.timeout_ms > INT32_MAX)
		l->q.timeout_ms = INT32_MAX;
	const uint8_t *body = call->data[i] + sizeof(l->q);
	uint32_t n = call->len[i] - (uint32_t)sizeof(l->q);
	if (l->q.addr_len) {
		if (l->q.addr_len > n || l->q.addr_len > GPUSYS_SOCK_ADDR_MAX)
			return -EINVAL;
		if (op != GPUSYS_OP_SOCK_BIND && op != GPUSYS_OP_SOCK_CONNECT && op != GPUSYS_OP_SOCK_SENDTO &&
		    op != GPUSYS_OP_SOCK_GETNAMEINFO)
			return -EINVAL;
		l->addr = body;
		l->addr_len = l->q.addr_len;
		body += l->q.addr_len;
		n -= l->q.addr_len;
	}
	l->body = body;
	l->body_len = n;
	if (op_needs_socket(op)) {
		l->e = handle_table_get(sc->cl->ht, l->q.handle, HANDLE_KIND_SOCKET);
		if (!l->e) {
			struct handle_entry *f = handle_table_get(sc->cl->ht, l->q.handle, HANDLE_KIND_FILE);
			if (f)
				handle_table_put(sc->cl->ht, f);
			return f ? -ENOTSOCK : -EBADF;
		}
		l->s = l->e->obj;
	}
	return 0;
}

static void socket_handle(struct port_call *call)
{
	struct sock_client *cl = call->state;
	uint16_t op = call->opcode;
	uint32_t room[GPUSYS_WARP_LANES] = { 0 };
	bool value_op[GPUSYS_WARP_LANES] = { false };
	uint64_t total = 0;

	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		if (!(call->lane_mask >> i & 1))
			continue;
		struct gpusys_sock_req q;
		memset(&q, 0, sizeof(q));
		if (call->len[i] >= sizeof(q))
			memcpy(&q, call->data[i], sizeof(q));
		room[i] = room_for(op, &q, call->cap[i], &value_op[i]);
		total += room[i];
	}
	int r = port_call_charge(call, sizeof(struct sock_call) + sizeof(struct resp_head) + total);
	if (r < 0) {
		call->status = r;
		return;
	}
	struct sock_call *sc = calloc(1, sizeof(*sc));
	uint8_t *resp = malloc(sizeof(struct resp_head) + total);
	if (!sc || !resp) {
		free(sc);
		free(resp);
		call->status = -ENOMEM;
		return;
	}
	struct resp_head head = { .sc = sc };
	memcpy(resp, &head, sizeof(head));
	call->resp_buf = resp;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&sc->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	sc->call = call;
	sc->cl = cl;
	uint8_t *data = resp + sizeof(struct resp_head);

	bool as_client = op_as_client(op);
	struct creds_saved saved;
	int cr = as_client ? creds_enter(&cl->c->creds, &saved) : 0;

	uint64_t at = 0;
	unsigned waiting = 0;
	uint64_t latest = 0;
	bool forever = false;
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		if (!(call->lane_mask >> i & 1))
			continue;
		struct sock_lane *l = &sc->lane[i];
		l->sc = sc;
		l->idx = (uint8_t)i;
		l->out = data + at;
		l->room = room[i];
		l->value_op = value_op[i];
		at += room[i];
		if (call->cap[i] < room[i] || (value_op[i] && call->cap[i] < sizeof(int64_t)) ||
		    (op == GPUSYS_OP_SOCK_RECVFROM && room[i] == 0)) {
			call->lane_status[i] = -EMSGSIZE;
			continue;
		}
		if (cr < 0) {
			call->lane_status[i] = cr;
			continue;
		}
		r = lane_parse(sc, i, l);
		if (r == 0)
			r = lane_first(l);
		if (r == LANE_WAIT) {
			/* When it gives up: its socket's timeout, the poll's. */
			int64_t t = 0;
			if (l->wait == WAIT_READ)
				t = l->s->rcvtimeo_ns;
			else if (l->wait == WAIT_WRITE)
				t = l->s->sndtimeo_ns;
			if (op == GPUSYS_OP_SOCK_POLL)
				t = l->q.timeout_ms > 0 ? l->q.timeout_ms * 1000000 : 0;
			if (t > 0)
				l->deadline_ns = now_ns() + (uint64_t)t;
			if (l->deadline_ns > latest)
				latest = l->deadline_ns;
			if (!l->deadline_ns && l->wait != WAIT_DNS && l->wait != WAIT_RDNS)
				forever = true;
			waiting++;
			continue;
		}
		lane_drop(l);
		lane_answer(l, r);
	}
	if (as_client && cr == 0)
		creds_leave(&saved);
	if (!waiting) {
		sc_free(sc);
		return;
	}

	/* Some lanes wait: the call completes later, from the main loop. */
	uint64_t timeout = 0;
	if (!forever && latest) {
		uint64_t now = now_ns();
		timeout = (latest > now ? latest - now : 0) + 1000000000u; /* the lanes' own timers go first */
	}
	sc->waiting = waiting;
	sc->ev_arm = event_new(g.base, -1, 0, arm, sc);
	r = sc->ev_arm ? call_later(call, timeout, &sock_later_ops) : -ENOMEM;
	if (r < 0) {
		for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
			struct sock_lane *l = &sc->lane[i];
			if (l->wait != WAIT_NONE) {
				lane_drop(l);
				l->wait = WAIT_NONE;
				lane_answer(l, r);
			}
		}
		sc_free(sc);
		return;
	}
	/* From here sc belongs to the main loop (and the core's cancel). */
	event_active(sc->ev_arm, EV_TIMEOUT, 1);
}

/* ------------------------------------------------------------ service */

static int socket_start(const struct service_env *env)
{
	g.base = env->base;
	g.main_thread = pthread_self();
	g.pol.families = 0;
	if (config_value(env->cfg, "socket_allow_inet"))
		g.pol.families |= SOCK_FAMILY_BIT(AF_INET);
	if (config_value(env->cfg, "socket_allow_inet6"))
		g.pol.families |= SOCK_FAMILY_BIT(AF_INET6);
	if (config_value(env->cfg, "socket_allow_unix"))
		g.pol.families |= SOCK_FAMILY_BIT(AF_UNIX);
	g.pol.unprivileged_port_start = sock_unprivileged_port_start();
	/* Name servers from /etc/resolv.conf and names from /etc/hosts; a
	 * machine without either still resolves numbers and localhost. */
	g.dns = evdns_base_new(g.base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!g.dns) {
		g.dns = evdns_base_new(g.base, 0);
		if (g.dns)
			evdns_base_load_hosts(g.dns, NULL);
	}
	if (!g.dns)
		return -ENOMEM;
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)config_value(env->cfg, "socket_dns_timeout_s"));
	evdns_base_set_option(g.dns, "timeout:", v);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)config_value(env->cfg, "socket_dns_attempts"));
	evdns_base_set_option(g.dns, "attempts:", v);
	return 0;
}

static void socket_stop(void)
{
	if (g.dns)
		evdns_base_free(g.dns, 1); /* pending lookups were cancelled with their clients */
	g.dns = NULL;
}

static int socket_client_init(const struct client *c, void **ret_state)
{
	struct sock_client *cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	cl->c = c;
	cl->ht = handle_table_acquire(c);
	if (!cl->ht) {
		free(cl);
		return -ENOMEM;
	}
	*ret_state = cl;
	return 0;
}

static void socket_client_fini(const struct client *c, void *state)
{
	struct sock_client *cl = state;
	(void)c;
	if (!cl)
		return;
	handle_table_release(cl->ht); /* the last of files and sockets closes them all */
	free(cl);
}

/* Where each op runs: what acts as the client (creds: socket, bind,
 * connect, sendto to a path), reads files (/etc/services) or moves bulk
 * data goes to a worker; the rest only tries a non-blocking system call
 * once and is served on the poller that found it, without a hand-off. */
#define OP(code, name, run, flags) { code, run, flags, "socket." name, socket_handle }
#define POOL SERVICE_ON_POOL
#define POLLER SERVICE_ON_POLLER
static const struct service_op socket_ops[] = {
	OP(GPUSYS_OP_SOCK_SOCKET, "socket", POOL, 0),
	OP(GPUSYS_OP_SOCK_BIND, "bind", POOL, 0),
	OP(GPUSYS_OP_SOCK_LISTEN, "listen", POLLER, 0),
	OP(GPUSYS_OP_SOCK_ACCEPT, "accept", POLLER, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_CONNECT, "connect", POOL, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_SEND, "send", POLLER, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_RECV, "recv", POLLER, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_SENDTO, "sendto", POOL, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_RECVFROM, "recvfrom", POLLER, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_SHUTDOWN, "shutdown", POLLER, 0),
	OP(GPUSYS_OP_SOCK_CLOSE, "close", POLLER, 0),
	OP(GPUSYS_OP_SOCK_SETSOCKOPT, "setsockopt", POLLER, 0),
	OP(GPUSYS_OP_SOCK_GETSOCKOPT, "getsockopt", POLLER, 0),
	OP(GPUSYS_OP_SOCK_GETSOCKNAME, "getsockname", POLLER, 0),
	OP(GPUSYS_OP_SOCK_GETPEERNAME, "getpeername", POLLER, 0),
	OP(GPUSYS_OP_SOCK_POLL, "poll", POLLER, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_GETADDRINFO, "getaddrinfo", POOL, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_GETNAMEINFO, "getnameinfo", POOL, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_BULK_SEND, "bulk_send", POOL, SERVICE_OP_LATER),
	OP(GPUSYS_OP_SOCK_BULK_RECV, "bulk_recv", POOL, SERVICE_OP_LATER),
};

const struct service service_socket = {
	.name = "socket",
	.group = GPUSYS_OP_SOCK_FIRST >> 8,
	.ops = socket_ops,
	.nops = sizeof(socket_ops) / sizeof(socket_ops[0]),
	.settings = socket_settings,
	.start = socket_start,
	.stop = socket_stop,
	.client_init = socket_client_init,
	.client_fini = socket_client_fini,
};
