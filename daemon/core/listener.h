/* SPDX-License-Identifier: MIT */
/*
 * The client socket: accepts connections and runs each handshake under a
 * deadline. A connection that sends a good hello is handed to the attach
 * callback; one that sends a bad one gets a refusal welcome; one that
 * closes, or says nothing in time, is dropped. Each of these is logged and
 * affects nothing else. Connections before their hello are bounded per
 * user and in total; when accept finds no descriptor left, a spare one is
 * given up to tell the client so.
 */
#ifndef GPUSYSD_LISTENER_H
#define GPUSYSD_LISTENER_H

#include "core/handshake.h"

struct event_base;
struct listener;

/* Takes ownership of fd and fds[] (and must close or keep them). */
typedef void (*listener_attach_fn)(void *arg, int fd, const struct gpusys_hello *hello, int fds[HELLO_NFDS],
				   const struct peer *peer);

int listener_new(struct event_base *base, int listen_fd, unsigned timeout_ms, listener_attach_fn attach,
		 void *arg, struct listener **ret);
/* Bound the connections that have not finished their hello: per_uid of
 * one user, total of all (0: no bound; root and gpusysd's own uid are
 * outside the total). One more is refused at once with a welcome saying
 * which bound (-EAGAIN). Applies to new connections; main thread. */
void listener_set_hello_limits(struct listener *l, unsigned per_uid, unsigned total);

/* Stop accepting and drop every handshake still pending. */
void listener_free(struct listener *l);

#endif
