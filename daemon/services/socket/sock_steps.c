/* SPDX-License-Identifier: MIT */
/*
 * One non-blocking attempt of a lane's call (send, recv, accept, connect,
 * poll and their bulk and addressed forms): done, or LANE_WAIT with what to
 * wait for in l->wait. Run by the first try (a poller or a worker) and by
 * every retry on the call's loop.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "services/socket/sock_call.h"
#include "services/socket/sock_unix_path.h"

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
	/* At its handle quota the client gets -EMFILE and the connection
	 * stays queued, as accept(2) leaves it: taking it and closing it for
	 * want of a handle would look to the peer like a server hanging up. */
	if (sock_table_full(l->sc->cl))
		return -EMFILE;
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
	sock_addr_record(&a.peer, &ss, len);
	memcpy(l->out, &a, sizeof(a));
	l->out_len = sizeof(a);
	return 0;
}

int sock_step_connect(struct sock_lane *l)
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

/* Handle i of a poll asking for its bytes (GPUSYS_POLL_RECV): receive up
 * to count bytes into dst if poll(2) found it readable. Bytes, 0 (the peer
 * closed) or -errno (socket.h). */
static int32_t poll_recv_one(struct sock_lane *l, uint32_t i, uint8_t *dst, uint64_t count)
{
	struct handle_entry *e = l->pe[i];
	if (!e)
		return -EBADF;
	if (e->kind != HANDLE_KIND_SOCKET)
		return -ENOTSOCK;
	/* POLLHUP, POLLERR: recv says what (0 at the end, the error). */
	if (!(l->pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
		return -EAGAIN;
	struct sock *s = e->obj;
	pthread_mutex_lock(&s->lock);
	bool closed = s->closed;
	pthread_mutex_unlock(&s->lock);
	if (closed)
		return -EBADF; /* closed by another call while the poll held it */
	for (;;) {
		ssize_t r = recv(e->fd, dst, count, MSG_DONTWAIT);
		if (r >= 0)
			return (int32_t)r; /* count <= the lane's room, < 2^31 */
		if (errno != EINTR)
			return -errno;
	}
}

/* Write a poll's answer into l->out: revents (all 0 when none is ready),
 * and for a poll asking for bytes each handle's length and the bytes,
 * received here, in the step that found them readable, so that nothing
 * taken from a socket can miss the answer. first_poll checked that the
 * room holds the header and count bytes for every handle asking. */
static void poll_answer(struct sock_lane *l, bool none)
{
	uint32_t n = l->npoll;
	int16_t *rev = (int16_t *)(void *)l->out;
	for (uint32_t i = 0; i < n; i++) {
		int16_t v = none ? 0 : l->pe[i] ? l->pfd[i].revents : POLLNVAL;
		memcpy(&rev[i], &v, sizeof(v));
	}
	l->out_len = n * (uint32_t)sizeof(int16_t);
	if (!l->poll_ask)
		return;
	uint32_t at = GPUSYS_POLL_RECV_HDR(n);
	memset(l->out + l->out_len, 0, GPUSYS_POLL_RECV_REV_BYTES(n) - l->out_len); /* no heap bytes in the padding */
	for (uint32_t i = 0; i < n; i++) {
		int32_t got = -EAGAIN;
		if (!none && (l->poll_ask >> i & 1))
			got = poll_recv_one(l, i, l->out + at, l->q.count);
		memcpy(l->out + GPUSYS_POLL_RECV_REV_BYTES(n) + i * sizeof(got), &got, sizeof(got));
		if (got > 0)
			at += (uint32_t)got;
	}
	l->out_len = at;
}

int sock_step_poll(struct sock_lane *l)
{
	int n = poll(l->pfd, l->npoll, 0);
	if (n < 0)
		return -errno;
	for (uint32_t i = 0; i < l->npoll; i++)
		n += !l->pe[i]; /* a bad handle is ready at once, with POLLNVAL */
	if (n > 0 || l->q.timeout_ms == 0) {
		/* A poll asking for bytes let its room go while it waited
		 * (sock_room.c): take it back before anything is received,
		 * so that -ENOMEM loses nothing. */
		int r = l->out ? 0 : sock_room_grow(l->sc);
		if (r < 0)
			return r;
		poll_answer(l, false);
		return 0;
	}
	l->wait = WAIT_POLL;
	return LANE_WAIT;
}

int sock_poll_timed_out(struct sock_lane *l)
{
	/* A poll asking for the bytes that let its room go while it waited
	 * answers with no room at all: nothing is ready, and an answer of no
	 * bytes says so (gpusys_poll_recv_parse: no revents, no lengths).
	 * Taking the room back could meet a budget that other calls hold,
	 * and a poll answered GPUSYS_STATUS_NO_ROOM is sent again and waits
	 * its time again, until -ENOMEM after GPUSYS_NO_ROOM_WAIT_NS
	 * (tests/socket test_poll_timeout_needs_no_room). */
	if (!l->out) {
		l->out_len = 0;
		return 0;
	}
	poll_answer(l, true);
	return 0;
}

/* One attempt of lane l's call (every op). 0 or -errno: done (value in
 * l->val, data in l->out, l->out_len); LANE_WAIT: l->wait says on what. */
int sock_lane_try(struct sock_lane *l)
{
	const struct client *c = l->sc->cl->c;
	/* A poll takes its room back only when it answers (sock_step_poll):
	 * most of its looks find nothing. */
	if (l->lazy && !l->out && l->sc->call->opcode != GPUSYS_OP_SOCK_POLL) {
		int r = sock_room_grow(l->sc); /* nothing received yet: -ENOMEM loses nothing */
		if (r < 0)
			return r;
	}
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
		sock_addr_record(&rec, &ss, l->s->type == SOCK_STREAM ? 0 : len);
		if (l->s->type == SOCK_STREAM && getpeername(l->e->fd, (struct sockaddr *)&ss, &len) == 0)
			sock_addr_record(&rec, &ss, len);
		memcpy(l->out, &rec, sizeof(rec));
		l->out_len = (uint32_t)(sizeof(rec) + l->done);
		return 0;
	}
	case GPUSYS_OP_SOCK_ACCEPT:
		return step_accept(l);
	case GPUSYS_OP_SOCK_CONNECT:
		return sock_step_connect(l);
	case GPUSYS_OP_SOCK_POLL:
		return sock_step_poll(l);
	default:
		return -ENOSYS;
	}
}

