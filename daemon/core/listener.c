/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/listener.h"
#include "util/log.h"

struct pending {
	struct listener *l;
	int fd;
	struct peer peer;
	struct event *ev;
	struct pending *prev, *next;
};

struct listener {
	struct event_base *base;
	int fd;
	struct event *ev;
	struct event *resume; /* re-arms ev after running out of descriptors */
	struct timeval timeout;
	listener_attach_fn attach;
	void *arg;
	struct pending *pending;
	time_t last_accept_warn;
};

static void pending_free(struct pending *p, bool close_fd)
{
	struct listener *l = p->l;

	if (p->prev)
		p->prev->next = p->next;
	else
		l->pending = p->next;
	if (p->next)
		p->next->prev = p->prev;
	event_free(p->ev);
	if (close_fd)
		close(p->fd);
	free(p);
}

static void on_pending(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	struct listener *l = p->l;
	struct gpusys_hello hello;
	int fds[HELLO_NFDS];
	char msg[128];

	(void)fd;
	if (what & EV_TIMEOUT) {
		log_warn("connection from pid %d: no hello within %ld ms, dropped", (int)p->peer.pid,
			 (long)(l->timeout.tv_sec * 1000 + l->timeout.tv_usec / 1000));
		pending_free(p, true);
		return;
	}
	int r = hello_receive(p->fd, &hello, fds, msg, sizeof(msg));
	if (r == -EAGAIN)
		return;
	if (r == -ECONNRESET) {
		log_info("connection from pid %d closed during the handshake", (int)p->peer.pid);
		pending_free(p, true);
		return;
	}
	if (r < 0) {
		struct gpusys_welcome w;
		log_warn("connection from pid %d refused: %s", (int)p->peer.pid, msg);
		welcome_refusal(&w, r, "%s", msg);
		welcome_send(p->fd, &w, -1); /* best effort: it may be gone */
		pending_free(p, true);
		return;
	}

	/* comm: the client's word first (it knows its program name best),
	 * /proc as the fallback for clients that leave it empty. */
	peer_set_comm(&p->peer, hello.comm, sizeof(hello.comm));
	if (!p->peer.comm[0] && peer_comm_from_proc(&p->peer) < 0)
		strcpy(p->peer.comm, "?");
	int cfd = p->fd;
	struct peer peer = p->peer;
	pending_free(p, false);
	l->attach(l->arg, cfd, &hello, fds, &peer);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct listener *l = arg;

	(void)what;
	/* Several may be queued; take them all (the socket is non-blocking). */
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
				return;
			/* EMFILE and friends: the connection stays queued, and
			 * the socket stays readable, so a level-triggered loop
			 * would spin on it. Pause accepting for a moment; say
			 * so at most once a second. */
			time_t now = time(NULL);
			if (now != l->last_accept_warn) {
				l->last_accept_warn = now;
				log_warn("accept: %s; pausing new connections", strerror(errno));
			}
			event_del(l->ev);
			event_add(l->resume, &(struct timeval){ .tv_usec = 100000 });
			return;
		}
		struct pending *p = calloc(1, sizeof(*p));
		if (!p) {
			close(fd);
			continue;
		}
		p->l = l;
		p->fd = fd;
		if (peer_credentials(fd, &p->peer) < 0)
			p->peer.pid = -1;
		p->ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_pending, p);
		if (!p->ev || event_add(p->ev, &l->timeout) < 0) {
			if (p->ev)
				event_free(p->ev);
			close(fd);
			free(p);
			continue;
		}
		p->next = l->pending;
		if (p->next)
			p->next->prev = p;
		l->pending = p;
	}
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	(void)fd;
	(void)what;
	event_add(l->ev, NULL);
}

int listener_new(struct event_base *base, int listen_fd, unsigned timeout_ms, listener_attach_fn attach,
		 void *arg, struct listener **ret)
{
	struct listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->base = base;
	l->fd = listen_fd;
	l->timeout.tv_sec = timeout_ms / 1000;
	l->timeout.tv_usec = (timeout_ms % 1000) * 1000;
	l->attach = attach;
	l->arg = arg;
	l->ev = event_new(base, listen_fd, EV_READ | EV_PERSIST, on_accept, l);
	l->resume = evtimer_new(base, on_resume, l);
	if (!l->ev || !l->resume || event_add(l->ev, NULL) < 0) {
		if (l->ev)
			event_free(l->ev);
		if (l->resume)
			event_free(l->resume);
		free(l);
		return -ENOMEM;
	}
	*ret = l;
	return 0;
}

void listener_free(struct listener *l)
{
	if (!l)
		return;
	event_free(l->ev);
	event_free(l->resume);
	while (l->pending)
		pending_free(l->pending, true);
	free(l);
}
