/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
	unsigned npending;
	/* Connections before their hello hold a descriptor each: at most
	 * this many of one uid, and all together (0: no bound). Root and
	 * gpusysd's own uid are outside the total. */
	unsigned max_per_uid, max_total;
	/* Open on /dev/null while descriptors last: closed to take (and
	 * refuse) one connection when accept finds none left. -1: none. */
	int spare;
	time_t last_accept_warn;
	time_t last_bound_warn;
	unsigned refused_since_warn;
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
	l->npending--;
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

/* Refuse a connection that has not been through its hello, saying why. Its
 * hello, if already sent, is read first, with no room for descriptors (the
 * kernel drops those it carried instead of installing them here): closing
 * a socket with unread data would reset the connection before the client
 * read the refusal. */
static void refuse_early(int fd, int status, const char *why)
{
	struct gpusys_welcome w;
	char byte;

	if (recv(fd, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) < 0) {
		/* nothing sent yet: the refusal is all it will read */
	}
	welcome_refusal(&w, status, "%s", why);
	welcome_send(fd, &w, -1); /* best effort: it may be gone */
	close(fd);
}

/* One line a second at most, with how many were refused since the last. */
static bool bound_warn_due(struct listener *l)
{
	time_t now = time(NULL);
	l->refused_since_warn++;
	if (now == l->last_bound_warn)
		return false;
	l->last_bound_warn = now;
	return true;
}

/* Serve every pending connection whose hello (or close) has arrived but
 * whose event has not run yet: a burst of clients accepted in one go is
 * otherwise counted as silent. */
static void settle(struct listener *l)
{
	struct pending *next;
	for (struct pending *p = l->pending; p; p = next) {
		next = p->next; /* on_pending may free p, never another */
		on_pending(p->fd, EV_READ, p);
	}
}

static unsigned pending_of(const struct listener *l, uid_t uid)
{
	unsigned n = 0;
	for (const struct pending *p = l->pending; p; p = p->next)
		n += p->peer.uid == uid;
	return n;
}

/* Whether a new connection of peer fits the bounds on connections before
 * their hello; refused (and closed) when not. The first time a bound is met
 * in an accept batch (*settled false), what already arrived is served
 * before counting again. */
static bool admit(struct listener *l, int fd, const struct peer *peer, bool *settled)
{
	char why[200];
	bool exempt = peer->uid == 0 || peer->uid == geteuid();
	unsigned mine = l->max_per_uid ? pending_of(l, peer->uid) : 0;
	bool full = (l->max_per_uid && mine >= l->max_per_uid) ||
		    (l->max_total && !exempt && l->npending >= l->max_total);

	if (full && !*settled) {
		*settled = true;
		settle(l);
		mine = l->max_per_uid ? pending_of(l, peer->uid) : 0;
	}
	if (l->max_per_uid && mine >= l->max_per_uid)
		snprintf(why, sizeof(why),
			 "uid %u already has %u connections waiting to attach, the most gpusysd allows one user "
			 "(max_pending_hellos_per_uid)", (unsigned)peer->uid, mine);
	else if (l->max_total && !exempt && l->npending >= l->max_total)
		snprintf(why, sizeof(why),
			 "gpusysd already has %u connections waiting to attach, its maximum (max_pending_hellos); "
			 "try again", l->npending);
	else
		return true;
	if (bound_warn_due(l)) {
		log_warn("connection from pid %d uid %u refused: %s (%u refused since the last such line)",
			 (int)peer->pid, (unsigned)peer->uid, why, l->refused_since_warn);
		l->refused_since_warn = 0;
	}
	refuse_early(fd, -EAGAIN, why);
	return false;
}

/* accept found no descriptor left: give up the spare one to take the
 * first queued connection and tell it so, rather than leave it to time out
 * while the socket, still readable, keeps the loop spinning. 1: one was
 * refused; 0: none was queued; -1: no spare (to be had again), or accept
 * failed even so (another thread took the number): pause instead. */
static int refuse_with_spare(struct listener *l, int err)
{
	if (l->spare < 0 && (l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	close(l->spare);
	int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int e = errno;
	if (fd >= 0) {
		struct peer peer = { .pid = -1, .uid = (uid_t)-1 };
		peer_credentials(fd, &peer);
		time_t now = time(NULL);
		if (now != l->last_accept_warn) {
			l->last_accept_warn = now;
			log_warn("accept: %s: gpusysd is out of file descriptors; connection from pid %d uid %u refused",
				 strerror(err), (int)peer.pid, (unsigned)peer.uid);
		}
		refuse_early(fd, -EMFILE, "gpusysd is out of file descriptors; try again later");
	}
	l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return 1;
	return e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED ? 0 : -1;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
	struct listener *l = arg;
	bool settled = false;

	(void)what;
	/* Several may be queued; take them all (the socket is non-blocking). */
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int err = errno;
			if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED)
				return;
			if (err == EMFILE || err == ENFILE) {
				int r = refuse_with_spare(l, err);
				if (r > 0)
					continue;
				if (r == 0)
					return;
			}
			/* No spare, or another error: the connection stays
			 * queued, and the socket stays readable, so a
			 * level-triggered loop would spin on it. Pause
			 * accepting for a moment; say so at most once a
			 * second. */
			time_t now = time(NULL);
			if (now != l->last_accept_warn) {
				l->last_accept_warn = now;
				log_warn("accept: %s; pausing new connections", strerror(err));
			}
			event_del(l->ev);
			event_add(l->resume, &(struct timeval){ .tv_usec = 100000 });
			return;
		}
		struct peer peer = { .pid = -1, .uid = (uid_t)-1 };
		if (peer_credentials(fd, &peer) < 0)
			peer = (struct peer){ .pid = -1, .uid = (uid_t)-1 };
		if (!admit(l, fd, &peer, &settled))
			continue;
		struct pending *p = calloc(1, sizeof(*p));
		if (!p) {
			close(fd);
			continue;
		}
		p->l = l;
		p->fd = fd;
		p->peer = peer;
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
		l->npending++;
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
	l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	l->ev = event_new(base, listen_fd, EV_READ | EV_PERSIST, on_accept, l);
	l->resume = evtimer_new(base, on_resume, l);
	if (!l->ev || !l->resume || event_add(l->ev, NULL) < 0) {
		if (l->ev)
			event_free(l->ev);
		if (l->resume)
			event_free(l->resume);
		if (l->spare >= 0)
			close(l->spare);
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
	if (l->spare >= 0)
		close(l->spare);
	free(l);
}

void listener_set_hello_limits(struct listener *l, unsigned per_uid, unsigned total)
{
	l->max_per_uid = per_uid;
	l->max_total = total;
}
