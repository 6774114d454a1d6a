/* SPDX-License-Identifier: MIT */
/*
 * echo_cpu PORT [THREADS]: the CPU peer of examples/tcp_echo.cu: THREADS
 * threads (default 16), each with its own epoll set of connections (accepted
 * from one shared non-blocking listener), echo what arrives: receive what
 * is there, send it all back. For comparison only (bench/socket-bench.sh).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cpu_peer.h"

#define BUF (64u << 10)

static int lfd;

/* All n bytes; a short send waits for room (the socket is non-blocking). */
static int send_all(int c, const char *b, size_t n)
{
	while (n) {
		ssize_t r = send(c, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = c, .events = POLLOUT };
			poll(&p, 1, 1000);
			continue;
		}
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static void *worker(void *arg)
{
	(void)arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.fd = lfd };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	char *buf = malloc(BUF);
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == lfd) {
				int c;
				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					int one = 1;
					setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					struct epoll_event ce = { .events = EPOLLIN, .data.fd = c };
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce);
				}
				continue;
			}
			ssize_t r = recv(fd, buf, BUF, 0);
			if (r == 0 || (r < 0 && errno != EAGAIN) || (r > 0 && send_all(fd, buf, (size_t)r) < 0)) {
				if (r < 0)
					perror("echo_cpu: recv");
				close(fd);
			}
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: echo_cpu PORT [THREADS]\n");
		return 2;
	}
	int threads = argc > 2 ? atoi(argv[2]) : 16;
	lfd = cpu_peer_listen(argv[1], SOCK_NONBLOCK, "echo_cpu");
	if (lfd < 0)
		return 1;
	cpu_peer_run(threads, worker);
	return 0;
}
