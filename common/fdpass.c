/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "fdpass.h"

union fdpass_cbuf {
	struct cmsghdr align;
	char bytes[CMSG_SPACE(FDPASS_MAX_FDS * sizeof(int))];
};

ssize_t fdpass_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds, int flags)
{
	union fdpass_cbuf cbuf;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > FDPASS_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.bytes;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	ssize_t n = sendmsg(sock, &mh, flags);
	return n < 0 ? -errno : n;
}

ssize_t fdpass_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *ret_nfds,
		    int *ret_msg_flags, int flags)
{
	union fdpass_cbuf cbuf;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	/* Room for exactly max_fds, so that one more shows as MSG_CTRUNC. */
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cbuf.bytes,
		.msg_controllen = CMSG_SPACE((size_t)max_fds * sizeof(int)),
	};
	unsigned nfds = 0;

	*ret_nfds = 0;
	if (max_fds > FDPASS_MAX_FDS)
		return -EINVAL;
	ssize_t n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	/* Every descriptor that did arrive, whatever the message: the caller
	 * judges it and closes them, so no error path leaks one. */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *data = CMSG_DATA(c);
		for (size_t i = 0; i < k && nfds < max_fds; i++)
			memcpy(&fds[nfds++], data + i * sizeof(int), sizeof(int));
	}
	*ret_nfds = nfds;
	if (ret_msg_flags)
		*ret_msg_flags = mh.msg_flags;
	return n;
}
