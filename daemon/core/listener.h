/* SPDX-License-Identifier: MIT */
/*
 * The client socket: accepts connections and runs each handshake under a
 * deadline. A connection that sends a good hello is handed to the attach
 * callback; one that sends a bad one gets a refusal welcome; one that
 * closes, or says nothing in time, is dropped. Each of these is logged and
 * affects nothing else.
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
/* Stop accepting and drop every handshake still pending. */
void listener_free(struct listener *l);

#endif
