/* SPDX-License-Identifier: MIT */
/*
 * The attach handshake (daemon/core/handshake.c) on any message: the input
 * is sent as one SOCK_SEQPACKET record, as a client would, with 0-3
 * descriptors chosen by its first byte, and hello_receive decodes it.
 * Accepted or refused, no descriptor may leak and a refusal must say why.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/handshake.h"
#include "fuzz.h"

/* More than any hello: bigger inputs are cut (the record limit is larger,
 * but nothing past the first bytes matters beyond its length). */
#define MAX_MSG 8192

static int open_fd(unsigned kind)
{
	/* /dev/null is no directory: a hello announcing it as the working
	 * directory must be refused. */
	return kind ? open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : open("/dev/null", O_RDWR | O_CLOEXEC);
}

static int count_open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 256; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2], fds[3];
	if (size < 1)
		return 0;
	/* First byte: how many descriptors (bits 0-1) and which kind each
	 * is (bits 4-6: 1 a directory, 0 /dev/null). */
	unsigned nfds = data[0] & 3, kinds = data[0] >> 4;
	data++, size--;
	if (size > MAX_MSG)
		size = MAX_MSG;

	int before = count_open_fds();
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	for (unsigned i = 0; i < nfds; i++)
		fds[i] = open_fd((kinds >> i) & 1);

	union {
		struct cmsghdr align;
		char bytes[CMSG_SPACE(3 * sizeof(int))];
	} cbuf;
	struct iovec iov = { .iov_base = (void *)data, .iov_len = size };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
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
	ssize_t sent = sendmsg(sv[0], &mh, MSG_NOSIGNAL);
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	if (sent >= 0) {
		struct gpusys_hello h;
		int got[HELLO_NFDS];
		char msg[128] = "";
		int r = hello_receive(sv[1], &h, got, msg, sizeof(msg));
		if (r == 0) {
			for (int i = 0; i < HELLO_NFDS; i++)
				if (got[i] >= 0)
					close(got[i]);
		} else if (r != -EAGAIN && r != -ECONNRESET && !msg[0]) {
			abort(); /* a refusal without a reason */
		}
	}
	close(sv[0]);
	close(sv[1]);
	if (count_open_fds() != before)
		abort(); /* a descriptor leaked */
	return 0;
}
