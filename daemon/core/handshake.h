/* SPDX-License-Identifier: MIT */
/* The attach handshake on the wire (common/wire.h): receiving and
 * checking a hello, sending a welcome. No event loop, no sessions. */
#ifndef GPUSYSD_HANDSHAKE_H
#define GPUSYSD_HANDSHAKE_H

#include <stddef.h>

#include "common/wire.h"
#include "core/session.h"

enum { HELLO_FD_STDOUT, HELLO_FD_STDERR, HELLO_FD_CWD, HELLO_FD_CHANNEL, HELLO_NFDS };

/*
 * Receive one hello from fd (non-blocking). On 0, *ret_hello is checked
 * and ret_fds[] holds the descriptors it announced, by role, -1 for the
 * ones it did not send; they are the caller's. Errors (every descriptor
 * that arrived is closed):
 *   -EAGAIN      nothing to read yet
 *   -ECONNRESET  the peer closed or reset before sending
 *   other        the message is bad; why is in msg, fit for a refusal
 *                welcome (-EPROTO for version or format, -EINVAL for
 *                inconsistent fields, -EMFILE when the daemon had no
 *                descriptor left for those the hello carried)
 */
int hello_receive(int fd, struct gpusys_hello *ret_hello, int ret_fds[HELLO_NFDS], char *msg, size_t msglen);

/* Check a hello that arrived as len bytes with nfds descriptors. */
int hello_check(const struct gpusys_hello *h, size_t len, unsigned nfds, char *msg, size_t msglen);

/* Send w with mem_fd (or -1: none) attached. Never blocks. */
int welcome_send(int fd, const struct gpusys_welcome *w, int mem_fd);

/* Send w with nfds (<= WELCOME_MAX_FDS) descriptors attached, in order:
 * an accepted client gets the channel memory, then its wake descriptor. */
#define WELCOME_MAX_FDS 2
int welcome_send_fds(int fd, const struct gpusys_welcome *w, const int *fds, unsigned nfds);

/* A refusal: status < 0 and a message. */
void welcome_refusal(struct gpusys_welcome *w, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* SO_PEERCRED of a connected socket into p (comm left alone). */
int peer_credentials(int fd, struct peer *p);

#endif
