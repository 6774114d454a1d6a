/* SPDX-License-Identifier: MIT */
/*
 * The socket service (include/gpusys/socket.h): BSD socket calls on behalf
 * of a client, on its handle table (shared with files), as the client
 * (util/creds.h) wherever a path or a privilege is involved.
 *
 * Nothing blocking holds a thread. Every descriptor is non-blocking. A
 * handler (on a poller or a worker) tries each lane once; a lane that would
 * block (accept with nobody pending, recv with nothing to read, send into a
 * full buffer, a connect in progress, a poll with nothing ready, any name
 * lookup) becomes a waiting lane and the call is handed to the core with
 * call_later(). One of the service's event loops (sock_loops.c: threads of
 * their own, one libevent event_base each; the main loop for name lookups,
 * where evdns runs) then watches the lane's descriptor (or its DNS request)
 * with an event bounded by SO_RCVTIMEO / SO_SNDTIMEO or the poll timeout,
 * retries when it fires, and the last lane to finish completes the call
 * (call_complete()).
 *
 * Per call, the service keeps a struct sock_call (the lanes' state, its
 * loop), apart from the call (call->later_data); the response room is
 * call->resp_buf (sock_room.c; freed by the core with the call). The
 * hand-off from the handler is a pre-made event (ev_arm) activated after
 * call_later(); the call's loop then arms the lanes' events. Everything on
 * a sock_call happens under its lock; libevent events are only ever freed
 * on the call's loop. The core's cancel hook (deadline, detach: the main
 * loop; or the handler's thread when a client detaches while the handler
 * returns) waits for a completion under way on the call's loop, disowns
 * the call, and waits while the call's loop lets go of the events and
 * descriptors (ev_arm again), then frees sc; on the call's own loop it
 * frees everything at once.
 *
 * This file: the ops table, parsing each lane, its first try and the
 * hand-off to the main loop. The rest, by concern, is listed in
 * sock_call.h.
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
#include "services/socket/sock_call.h"
#include "services/socket/sock_obj.h"
#include "services/socket/sock_policy.h"
#include "services/socket/sock_unix_path.h"
#include "common/clock.h"

/* ------------------------------------------------------------ settings */

static const struct config_key socket_settings[] = {
	{ "socket_allow_inet", CONFIG_COUNT, 0, 1, 1 },
	{ "socket_allow_inet6", CONFIG_COUNT, 0, 1, 1 },
	{ "socket_allow_unix", CONFIG_COUNT, 0, 1, 1 },
	/* event loops of their own threads that calls wait on (0: the main loop) */
	{ "socket_wait_loops", CONFIG_COUNT, 0, 64, 4 },
	/* how long a wait loop polls without sleeping after an event (us) */
	{ "socket_wait_spin_us", CONFIG_COUNT, 0, 100000, 0 },
	/* evdns: seconds per try and tries per name server */
	{ "socket_dns_timeout_s", CONFIG_COUNT, 1, 60, 2 },
	{ "socket_dns_attempts", CONFIG_COUNT, 1, 10, 2 },
	{ NULL, 0, 0, 0, 0 },
};


static bool family_allowed(int domain)
{
	return domain >= 0 && domain < 32 && (sock_g.pol.families & SOCK_FAMILY_BIT(domain));
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
	case GPUSYS_OP_SOCK_POLL: {
		if (q->count == 0) {
			c = GPUSYS_SOCK_POLL_MAX * sizeof(int16_t);
			return (uint32_t)(c < cap ? c : cap);
		}
		/* GPUSYS_POLL_RECV (socket.h): the header and count bytes for
		 * every handle, within the lane's capacity; first_poll checks
		 * that what the flagged handles ask for fits. */
		uint32_t n = q->a < 0 || (uint32_t)q->a > GPUSYS_SOCK_POLL_MAX ? GPUSYS_SOCK_POLL_MAX : (uint32_t)q->a;
		uint64_t each = q->count < cap ? q->count : cap; /* cap <= GPUSYS_MAX_LANE_PAYLOAD: no overflow */
		c = GPUSYS_POLL_RECV_HDR(n) + each * n;
		return (uint32_t)(c < cap ? c : cap);
	}
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

/* GPUSYS_POLL_RECV is a bit of ours only: poll(2) never sees it. */
GPUSYS_STATIC_ASSERT((GPUSYS_POLL_RECV & (POLLIN | POLLPRI | POLLOUT | POLLERR | POLLHUP | POLLNVAL | POLLRDNORM |
					  POLLRDBAND | POLLWRNORM | POLLWRBAND | POLLMSG | POLLRDHUP)) == 0,
		     "GPUSYS_POLL_RECV is not a poll(2) bit");

static int first_poll(struct sock_lane *l)
{
	uint32_t n = (uint32_t)l->q.a;
	if (l->q.a < 0 || n > GPUSYS_SOCK_POLL_MAX || l->body_len < n * sizeof(struct gpusys_pollfd))
		return -EINVAL;
	if (n * sizeof(int16_t) > l->room)
		return -EMSGSIZE;
	/* Which handles ask for their bytes, and whether the answer's room
	 * holds the header and count bytes for each of them (count is the
	 * client's: bounded by the room before it is multiplied). */
	uint64_t ask = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct gpusys_pollfd p;
		memcpy(&p, l->body + i * sizeof(p), sizeof(p));
		if (p.events & GPUSYS_POLL_RECV)
			ask |= UINT64_C(1) << i;
	}
	if (ask) {
		if (l->q.count == 0)
			return -EINVAL;
		if (l->q.count > l->room ||
		    GPUSYS_POLL_RECV_HDR(n) + (uint64_t)__builtin_popcountll(ask) * l->q.count > l->room)
			return -EMSGSIZE;
	}
	l->poll_ask = ask;
	l->npoll = n;
	l->pe = calloc(n ? n : 1, sizeof(*l->pe));
	l->pfd = calloc(n ? n : 1, sizeof(*l->pfd));
	if (!l->pe || !l->pfd)
		return -ENOMEM;
	int32_t handles[GPUSYS_SOCK_POLL_MAX];
	for (uint32_t i = 0; i < n; i++) {
		struct gpusys_pollfd p;
		memcpy(&p, l->body + i * sizeof(p), sizeof(p));
		handles[i] = p.handle;
		l->pfd[i].events = (short)(p.events & ~GPUSYS_POLL_RECV);
	}
	handle_table_get_many(l->sc->cl->ht, handles, n, l->pe);
	for (uint32_t i = 0; i < n; i++)
		l->pfd[i].fd = l->pe[i] ? l->pe[i]->fd : -1; /* poll(2) skips negative descriptors */
	if (l->q.timeout_ms > 0)
		l->deadline_ns = now_ns() + (uint64_t)l->q.timeout_ms * 1000000u;
	return sock_step_poll(l);
}

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
		if ((r = sock_bind_check(&sock_g.pol, cl->c->pid, l->addr, l->addr_len)) < 0)
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
		return sock_step_connect(l);
	case GPUSYS_OP_SOCK_SHUTDOWN:
		return shutdown(l->e->fd, l->q.a) < 0 ? -errno : 0;
	case GPUSYS_OP_SOCK_SETSOCKOPT:
		return sock_setsockopt(l);
	case GPUSYS_OP_SOCK_GETSOCKOPT:
		return sock_getsockopt(l);
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
		sock_addr_record(&rec, &ss, len);
		memcpy(l->out, &rec, sizeof(rec));
		l->out_len = sizeof(rec);
		return 0;
	}
	case GPUSYS_OP_SOCK_POLL:
		return first_poll(l);
	case GPUSYS_OP_SOCK_GETADDRINFO:
		return sock_first_getaddrinfo(l);
	case GPUSYS_OP_SOCK_GETNAMEINFO:
		return sock_first_getnameinfo(l);
	case GPUSYS_OP_SOCK_SEND:
	case GPUSYS_OP_SOCK_SENDTO:
		if ((l->q.flags & ~SEND_FLAGS) || l->q.count)
			return -EINVAL;
		return sock_lane_try(l);
	case GPUSYS_OP_SOCK_RECV:
	case GPUSYS_OP_SOCK_RECVFROM:
		if (l->q.flags & ~RECV_FLAGS)
			return -EINVAL;
		return sock_lane_try(l);
	case GPUSYS_OP_SOCK_BULK_SEND:
	case GPUSYS_OP_SOCK_BULK_RECV:
		/* The range must lie in the bulk area as we sized it. */
		if (!cl->c->bulk || l->q.count > cl->c->bulk_bytes || l->q.bulk_off > cl->c->bulk_bytes - l->q.count)
			return -EINVAL;
		if (l->q.flags & ~(op == GPUSYS_OP_SOCK_BULK_SEND ? SEND_FLAGS : RECV_FLAGS))
			return -EINVAL;
		return sock_lane_try(l);
	case GPUSYS_OP_SOCK_ACCEPT:
		return sock_lane_try(l);
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
	return 0;
}

/* Give l its socket: e, its handle's entry if that is open as a socket or
 * a file (socket_handle looked every lane's up at once), is l's or let go
 * here. 0 or -errno. */
static int lane_attach(struct sock_call *sc, struct sock_lane *l, struct handle_entry *e)
{
	if (!op_needs_socket(sc->call->opcode))
		return 0; /* nothing was looked up */
	if (!e)
		return -EBADF;
	if (e->kind != HANDLE_KIND_SOCKET) {
		handle_table_put(sc->cl->ht, e);
		return -ENOTSOCK;
	}
	l->e = e;
	l->s = e->obj;
	return 0;
}

static void socket_handle(struct port_call *call)
{
	struct sock_client *cl = call->state;
	uint16_t op = call->opcode;
	uint32_t room[GPUSYS_WARP_LANES] = { 0 };
	bool value_op[GPUSYS_WARP_LANES] = { false };
	uint64_t fixed = 0, lazy = 0;
	int32_t handles[GPUSYS_WARP_LANES] = { 0 }; /* 0: none to look up */
	/* Receives' rooms last (sock_room.c): let go while they wait. */
	bool receives = op == GPUSYS_OP_SOCK_RECV || op == GPUSYS_OP_SOCK_RECVFROM;
	bool poll_bytes = false; /* a poll whose lanes may ask for bytes: all its room is lazy */

	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		if (!(call->lane_mask >> i & 1))
			continue;
		struct gpusys_sock_req q;
		memset(&q, 0, sizeof(q));
		if (call->len[i] >= sizeof(q))
			memcpy(&q, call->data[i], sizeof(q));
		if (call->len[i] >= sizeof(q))
			handles[i] = q.handle;
		room[i] = room_for(op, &q, call->cap[i], &value_op[i]);
		*(receives ? &lazy : &fixed) += room[i];
		poll_bytes |= op == GPUSYS_OP_SOCK_POLL && q.count != 0;
	}
	if (poll_bytes) {
		/* Every lane of the call is a poll: the whole room is let go
		 * while they wait (the order of the rooms does not matter). */
		lazy += fixed;
		fixed = 0;
		receives = true;
	}
	/* Nothing has run yet: without room now the device side sends the
	 * call again (abi.h, GPUSYS_STATUS_NO_ROOM); a receive's room is let
	 * go while it waits (sock_room.c), so a burst of receives starting
	 * together would otherwise fail -ENOMEM for what a moment later fits. */
	int r = port_call_charge_or_later(call, sizeof(struct sock_call) + fixed + lazy);
	struct sock_call *sc = r == 0 ? calloc(1, sizeof(*sc)) : NULL;
	if (sc) {
		sc->call = call;
		sc->cl = cl;
		if (sock_room_alloc(sc, fixed, lazy) < 0) {
			free(sc);
			sc = NULL;
		}
	}
	if (!sc) {
		call->status = r < 0 ? r : -ENOMEM;
		if (call->status != GPUSYS_STATUS_NO_ROOM) /* not an error: sent again */
			sock_error_count(op, call->status);
		return;
	}
	call->later_data = sc;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&sc->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&sc->finished, NULL);
	/* Name lookups wait where evdns runs, the main loop; the rest on a
	 * socket loop (sock_loops.c). */
	sock_loop_pick(sc, op == GPUSYS_OP_SOCK_GETADDRINFO || op == GPUSYS_OP_SOCK_GETNAMEINFO);

	/* Every lane's socket under one hold of the client's table lock (a
	 * warp's sends: up to 32 lanes, pollers sharing the table); not for
	 * ops without one (a poll takes its list's in first_poll). */
	struct handle_entry *entry[GPUSYS_WARP_LANES] = { NULL };
	if (op_needs_socket(op))
		handle_table_get_many(cl->ht, handles, GPUSYS_WARP_LANES, entry);

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
		l->off = (uint32_t)at; /* fixed + lazy: within the bounded lane payloads */
		l->out = sc->resp + at;
		l->room = room[i];
		l->lazy = receives;
		l->value_op = value_op[i];
		at += room[i];
		struct handle_entry *e = entry[i];
		entry[i] = NULL;
		int early = 0;
		if (call->cap[i] < room[i] || (value_op[i] && call->cap[i] < sizeof(int64_t)) ||
		    (op == GPUSYS_OP_SOCK_RECVFROM && room[i] == 0))
			early = -EMSGSIZE;
		else if (cr < 0)
			early = cr;
		if (early) {
			if (e)
				handle_table_put(cl->ht, e);
			call->lane_status[i] = early;
			sock_error_count(op, early);
			continue;
		}
		r = lane_parse(sc, i, l);
		if (r == 0)
			r = lane_attach(sc, l, e);
		else if (e)
			handle_table_put(cl->ht, e);
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
		sock_lane_drop(l);
		sock_lane_answer(l, r);
	}
	if (as_client && cr == 0)
		creds_leave(&saved);
	if (!waiting) {
		sock_call_free(sc);
		return;
	}

	/* Some lanes wait: the call completes later, from its loop. */
	uint64_t timeout = 0;
	if (!forever && latest) {
		uint64_t now = now_ns();
		timeout = (latest > now ? latest - now : 0) + 1000000000u; /* the lanes' own timers go first */
	}
	sc->waiting = waiting;
	sock_room_shrink(sc); /* before call_later charges for the wait */
	sc->ev_arm = event_new(sc->base, -1, 0, sock_call_arm, sc);
	r = sc->ev_arm ? call_later(call, timeout, &sock_later_ops) : -ENOMEM;
	if (r < 0) {
		for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
			struct sock_lane *l = &sc->lane[i];
			if (l->wait != WAIT_NONE) {
				sock_lane_drop(l);
				l->wait = WAIT_NONE;
				sock_lane_answer(l, r);
			}
		}
		sock_call_free(sc);
		return;
	}
	/* From here sc belongs to its loop (and the core's cancel). */
	event_active(sc->ev_arm, EV_TIMEOUT, 1);
}

/* ------------------------------------------------------------ service */

static int socket_start(const struct service_env *env)
{
	sock_g.base = env->base;
	sock_g.main_thread = pthread_self();
	sock_g.pol.families = 0;
	if (config_value(env->cfg, "socket_allow_inet"))
		sock_g.pol.families |= SOCK_FAMILY_BIT(AF_INET);
	if (config_value(env->cfg, "socket_allow_inet6"))
		sock_g.pol.families |= SOCK_FAMILY_BIT(AF_INET6);
	if (config_value(env->cfg, "socket_allow_unix"))
		sock_g.pol.families |= SOCK_FAMILY_BIT(AF_UNIX);
	sock_g.pol.unprivileged_port_start = sock_unprivileged_port_start();
	/* Name servers from /etc/resolv.conf and names from /etc/hosts; a
	 * machine without either still resolves numbers and localhost. */
	sock_g.dns = evdns_base_new(sock_g.base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (!sock_g.dns) {
		sock_g.dns = evdns_base_new(sock_g.base, 0);
		if (sock_g.dns)
			evdns_base_load_hosts(sock_g.dns, NULL);
	}
	if (!sock_g.dns)
		return -ENOMEM;
	if (sock_loops_start((unsigned)config_value(env->cfg, "socket_wait_loops"),
			     (unsigned)config_value(env->cfg, "socket_wait_spin_us")) < 0) {
		evdns_base_free(sock_g.dns, 1);
		sock_g.dns = NULL;
		return -ENOMEM;
	}
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)config_value(env->cfg, "socket_dns_timeout_s"));
	evdns_base_set_option(sock_g.dns, "timeout:", v);
	snprintf(v, sizeof(v), "%llu", (unsigned long long)config_value(env->cfg, "socket_dns_attempts"));
	evdns_base_set_option(sock_g.dns, "attempts:", v);
	return 0;
}

static void socket_stop(void)
{
	sock_loops_stop(); /* every client is gone: their calls were cancelled */
	if (sock_g.dns)
		evdns_base_free(sock_g.dns, 1); /* pending lookups were cancelled with their clients */
	sock_g.dns = NULL;
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
	.errors = sock_errors_report,
};
