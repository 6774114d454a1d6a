/* SPDX-License-Identifier: MIT */
/*
 * http_load HOST_IPV4 PORT PATH CONNECTIONS SECONDS: a small HTTP/1.1 load
 * generator. CONNECTIONS keep-alive connections, each with one GET of PATH
 * in flight at a time (a new one as soon as the previous answer is
 * complete: Content-Length is read), for SECONDS, from one epoll thread.
 * Prints requests/s, the answers' status counts and the bytes of bodies.
 * A connection the server closes is reopened (counted).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
	int fd;
	char buf[65536];
	size_t have;
	long need;  /* bytes of the current answer still to read, -1: head not complete */
	int status;
};

static struct sockaddr_in target;
static char request[1024];
static size_t request_len;
static unsigned long long done_req, ok200, other, reopened, body_bytes;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int open_conn(int ep, struct conn *c)
{
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&target, sizeof(target)) < 0)
		return -1;
	c->have = 0;
	c->need = -1;
	if (send(c->fd, request, request_len, MSG_NOSIGNAL) != (ssize_t)request_len)
		return -1;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	return epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

/* Consume complete answers in c->buf; 1 when one completed. */
static int parse(struct conn *c)
{
	if (c->need < 0) {
		char *end = memmem(c->buf, c->have, "\r\n\r\n", 4);
		if (!end)
			return 0;
		size_t head = (size_t)(end - c->buf) + 4;
		c->status = atoi(c->buf + 9);
		char *cl = memmem(c->buf, head, "Content-Length:", 15);
		long len = cl ? atol(cl + 15) : 0;
		memmove(c->buf, c->buf + head, c->have - head);
		c->have -= head;
		c->need = len;
	}
	size_t take = c->have < (size_t)c->need ? c->have : (size_t)c->need;
	body_bytes += take;
	memmove(c->buf, c->buf + take, c->have - take);
	c->have -= take;
	c->need -= (long)take;
	if (c->need > 0)
		return 0;
	c->need = -1;
	done_req++;
	if (c->status == 200)
		ok200++;
	else
		other++;
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: http_load HOST_IPV4 PORT PATH CONNECTIONS SECONDS\n");
		return 2;
	}
	target.sin_family = AF_INET;
	target.sin_port = htons((uint16_t)atoi(argv[2]));
	inet_pton(AF_INET, argv[1], &target.sin_addr);
	request_len = (size_t)snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", argv[3], argv[1]);
	int n = atoi(argv[4]);
	double secs = atof(argv[5]);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *cs = calloc((size_t)n, sizeof(*cs));
	for (int i = 0; i < n; i++)
		if (open_conn(ep, &cs[i]) < 0) {
			fprintf(stderr, "http_load: connect: %s\n", strerror(errno));
			return 1;
		}
	double t0 = now(), t1 = t0 + secs;
	struct epoll_event evs[256];
	while (now() < t1) {
		int k = epoll_wait(ep, evs, 256, 100);
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			ssize_t r = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, 0);
			if (r <= 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				reopened++;
				if (open_conn(ep, c) < 0)
					return 1;
				continue;
			}
			c->have += (size_t)r;
			while (parse(c))
				send(c->fd, request, request_len, MSG_NOSIGNAL);
		}
	}
	double dt = now() - t0;
	printf("%.0f requests/s (%llu in %.1f s, %d connections): %llu x 200, %llu other, %llu reconnects, %.1f MB of bodies\n",
	       done_req / dt, done_req, dt, n, ok200, other, reopened, body_bytes / 1e6);
	return 0;
}
