/* SPDX-License-Identifier: MIT */
/* Descriptors over a Unix socket (SCM_RIGHTS): one message with the
 * descriptors attached, and its receipt. Used by both ends of the attach
 * handshake (common/wire.h) and by the tests that play one end. */
#ifndef GPUSYS_COMMON_FDPASS_H
#define GPUSYS_COMMON_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one call sends or makes room for. */
#define FDPASS_MAX_FDS 16

/* Send len bytes of buf as one message with fds[0..nfds) attached (none
 * when nfds is 0); flags go to sendmsg (MSG_NOSIGNAL, MSG_DONTWAIT).
 * Returns the bytes sent or -errno (-EINVAL: nfds > FDPASS_MAX_FDS). */
ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags);

/* Receive one message of at most len bytes into buf, with room for
 * max_fds (<= FDPASS_MAX_FDS) descriptors: the kernel closes any beyond
 * that and sets MSG_CTRUNC. The descriptors that arrived are in
 * fds[0..*ret_nfds), the caller's to close whatever else happens (0 on an
 * error); *ret_msg_flags (if not NULL) gets the message's flags (MSG_TRUNC,
 * MSG_CTRUNC); flags go to recvmsg (MSG_CMSG_CLOEXEC is always added).
 * Returns the bytes received (0: the peer closed) or -errno. */
ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *ret_nfds,
		    int *ret_msg_flags, int flags);

#endif
