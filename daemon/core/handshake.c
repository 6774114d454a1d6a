/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "core/handshake.h"

/* More than a hello may carry, so a peer that sends extra descriptors is
 * seen doing so (and they are closed) rather than truncated silently. */
#define MAX_RECV_FDS 8

static void close_all(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

int hello_check(const struct gpusys_hello *h, size_t len, unsigned nfds, char *msg, size_t msglen)
{
	if (len < 2 * sizeof(uint32_t) || h->magic != GPUSYS_HELLO_MAGIC) {
		snprintf(msg, msglen, "not a gpusys hello");
		return -EPROTO;
	}
	/* The version first: a newer client's hello may have another size.
	 * Older ones down to GPUSYS_WIRE_VERSION_MIN share this layout; their
	 * sessions speak their version (wire.h). */
	if (h->wire_version < GPUSYS_WIRE_VERSION_MIN || h->wire_version > GPUSYS_WIRE_VERSION) {
		snprintf(msg, msglen, "protocol version %u not supported (daemon speaks %u to %u)", h->wire_version,
			 GPUSYS_WIRE_VERSION_MIN, GPUSYS_WIRE_VERSION);
		return -EPROTO;
	}
	if (len != sizeof(*h)) {
		snprintf(msg, msglen, "hello is %zu bytes, expected %zu", len, sizeof(*h));
		return -EPROTO;
	}
	if (h->abi_version != GPUSYS_ABI_VERSION) {
		snprintf(msg, msglen, "channel ABI version %u not supported (daemon speaks %u)", h->abi_version,
			 GPUSYS_ABI_VERSION);
		return -EPROTO;
	}
	if (h->fd_mask & ~(uint32_t)GPUSYS_HELLO_FD_KNOWN) {
		snprintf(msg, msglen, "unknown descriptor flags 0x%x", h->fd_mask & ~(uint32_t)GPUSYS_HELLO_FD_KNOWN);
		return -EINVAL;
	}
	if ((unsigned)__builtin_popcount(h->fd_mask) != nfds) {
		snprintf(msg, msglen, "hello announces %d descriptors but %u arrived", __builtin_popcount(h->fd_mask),
			 nfds);
		return -EINVAL;
	}
	return 0;
}

int hello_receive(int fd, struct gpusys_hello *ret_hello, int ret_fds[HELLO_NFDS], char *msg, size_t msglen)
{
	/* One byte more than a hello so a longer message shows as longer
	 * (SOCK_SEQPACKET would otherwise truncate it to fit). */
	union {
		struct gpusys_hello h;
		char bytes[sizeof(struct gpusys_hello) + 1];
	} buf;
	int fds[MAX_RECV_FDS], msg_flags = 0;
	unsigned nfds = 0;
	int r;

	memset(&buf, 0, sizeof(buf));
	/* Every descriptor that did arrive is in fds[] before anything is
	 * judged, so no error path leaks one. MSG_TRUNC: n is the message's
	 * real length even when it did not fit (SOCK_SEQPACKET, Linux 3.4+),
	 * so a refusal can say it. */
	ssize_t n = fdpass_recv(fd, &buf, sizeof(buf), fds, MAX_RECV_FDS, &nfds, &msg_flags, MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0) {
		if (n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR)
			return -EAGAIN;
		return -ECONNRESET;
	}
	if (n == 0 && nfds == 0)
		return -ECONNRESET; /* orderly close (or an empty record) */
	if (msg_flags & MSG_CTRUNC) {
		/* The kernel truncates for two reasons: more descriptors than
		 * fds[] has room for (it fills every slot first), or none
		 * left in this process to install one in (it stops short). */
		if (nfds < MAX_RECV_FDS) {
			snprintf(msg, msglen, "gpusysd is out of file descriptors; try again later");
			r = -EMFILE;
		} else {
			snprintf(msg, msglen, "too many descriptors with the hello");
			r = -EINVAL;
		}
		goto fail;
	}
	if (msg_flags & MSG_TRUNC || (size_t)n > sizeof(buf.h)) {
		/* Only the first sizeof(buf) bytes are here; the length
		 * checked (and reported) is the real one. */
		r = hello_check(&buf.h, (size_t)n > sizeof(buf) ? (size_t)n : sizeof(buf), nfds, msg, msglen);
		if (r == 0) {
			snprintf(msg, msglen, "hello is longer than %zu bytes", sizeof(buf.h));
			r = -EPROTO;
		}
		goto fail;
	}
	r = hello_check(&buf.h, (size_t)n, nfds, msg, msglen);
	if (r < 0)
		goto fail;

	unsigned next = 0;
	for (unsigned role = 0; role < HELLO_NFDS; role++)
		ret_fds[role] = buf.h.fd_mask & (1u << role) ? fds[next++] : -1;

	/* cwd is used with openat() later: it must be a directory. */
	struct stat st;
	if (ret_fds[HELLO_FD_CWD] >= 0 && (fstat(ret_fds[HELLO_FD_CWD], &st) < 0 || !S_ISDIR(st.st_mode))) {
		snprintf(msg, msglen, "the working-directory descriptor is not a directory");
		close_all(ret_fds, HELLO_NFDS);
		return -EINVAL;
	}
	*ret_hello = buf.h;
	return 0;
fail:
	close_all(fds, nfds);
	return r;
}

int welcome_send_fds(int fd, const struct gpusys_welcome *w, const int *fds, unsigned nfds)
{
	if (nfds > WELCOME_MAX_FDS)
		return -EINVAL;
	ssize_t n = fdpass_send(fd, w, sizeof(*w), fds, nfds, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0)
		return (int)n;
	return (size_t)n == sizeof(*w) ? 0 : -EIO;
}

int welcome_send(int fd, const struct gpusys_welcome *w, int mem_fd)
{
	return welcome_send_fds(fd, w, &mem_fd, mem_fd >= 0 ? 1 : 0);
}

void welcome_refusal(struct gpusys_welcome *w, int status, const char *fmt, ...)
{
	va_list ap;

	memset(w, 0, sizeof(*w));
	w->magic = GPUSYS_WELCOME_MAGIC;
	w->wire_version = GPUSYS_WIRE_VERSION;
	w->status = status;
	va_start(ap, fmt);
	vsnprintf(w->message, sizeof(w->message), fmt, ap);
	va_end(ap);
}

int peer_credentials(int fd, struct peer *p)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	p->pid = uc.pid;
	p->uid = uc.uid;
	p->gid = uc.gid;
	return 0;
}
