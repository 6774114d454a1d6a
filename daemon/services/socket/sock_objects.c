/* SPDX-License-Identifier: MIT */
/*
 * The socket object behind a HANDLE_KIND_SOCKET entry (sock_obj.h): made
 * when a socket is created or accepted, told when the handle closes (its
 * waiting lanes wake with -EBADF), freed with the descriptor. And the
 * address records the calls answer with.
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "services/socket/sock_call.h"

/* ------------------------------------------------------ socket objects */

static void sock_closed(struct handle_entry *e)
{
	struct sock *s = e->obj;
	pthread_mutex_lock(&s->lock);
	s->closed = true;
	/* Lanes waiting on it finish with -EBADF on their loop. */
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
int sock_insert(struct sock_client *cl, int fd, int domain, int type, bool nonblock)
{
	struct sock *s = sock_new(domain, type, nonblock);
	int h = s ? handle_table_insert_obj(cl->ht, fd, HANDLE_KIND_SOCKET, 0, s, &sock_entry_ops) : -ENOMEM;
	if (h < 0)
		sock_release(fd, s);
	return h;
}

bool sock_table_full(struct sock_client *cl)
{
	pthread_mutex_lock(&cl->ht->lock);
	bool full = cl->ht->count >= cl->ht->max;
	pthread_mutex_unlock(&cl->ht->lock);
	return full;
}

/* ---------------------------------------------------------- addresses */

void sock_addr_record(struct gpusys_sock_addr *r, const struct sockaddr_storage *ss, socklen_t len)
{
	memset(r, 0, sizeof(*r));
	if (len > sizeof(r->addr))
		len = sizeof(r->addr);
	r->len = len;
	memcpy(r->addr, ss, len);
}
