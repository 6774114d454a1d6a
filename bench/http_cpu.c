/* SPDX-License-Identifier: MIT */
/*
 * http_cpu DIR PORT [THREADS]: the CPU peer of examples/gpu_httpd.cu, doing
 * the same work the same way: THREADS threads (default 128, as gpu_httpd's
 * warps) each accept one connection at a time and serve its keep-alive
 * requests (read the head, parse, open + fstat + pread, one send of the
 * response's head and the file's first 256 KiB, close the file). GET/HEAD,
 * 404, 400, 403 for "..", percent-decoded paths: the request parser is
 * gpu_httpd's own (examples/http_request.h); for comparison only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cpu_peer.h"

#include "../examples/http_request.h"

static char root[PATH_MAX];
static int lfd;

static int send_all(int c, const void *b, size_t n)
{
	return send(c, b, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static int simple(int c, const char *status, int keep)
{
	char h[256];
	int n = snprintf(h, sizeof(h), "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n%s\n",
			 status, strlen(status) + 1, keep ? "keep-alive" : "close", status);
	return send_all(c, h, (size_t)n);
}

/* The file at path (DIR and the decoded path). 0: keep the connection. */
static int serve(int c, const char *path, uint8_t *file, int head_only, int keep)
{
	int f = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (f >= 0)
			close(f);
		return simple(c, "404 Not Found", keep) == 0 && keep ? 0 : -1;
	}
	char h[256];
	int n = snprintf(h, sizeof(h), "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %lld\r\nConnection: %s\r\n\r\n",
			 (long long)st.st_size, keep ? "keep-alive" : "close");
	/* The head goes out with the first chunk in one send, as gpu_httpd
	 * sends a file of up to a chunk. */
	struct iovec iov[2] = { { h, (size_t)n }, { file, 0 } };
	off_t off = 0;
	int ok = 1;
	do {
		ssize_t got = 0;
		if (!head_only && off < st.st_size && (got = pread(f, file, 256 << 10, off)) <= 0)
			ok = 0;
		if (!ok)
			break;
		iov[1].iov_len = (size_t)got;
		struct msghdr mh = { .msg_iov = off ? iov + 1 : iov, .msg_iovlen = off ? 1 : 2 };
		size_t want = (off ? 0 : (size_t)n) + (size_t)got;
		if (sendmsg(c, &mh, MSG_NOSIGNAL) != (ssize_t)want)
			ok = 0;
		off += got;
	} while (ok && !head_only && off < st.st_size);
	close(f);
	return ok && keep ? 0 : -1;
}

static void connection(int c, char *req, uint8_t *file)
{
	char path[PATH_MAX + 64];
	size_t rl = strlen(root);
	memcpy(path, root, rl);
	unsigned have = 0;
	for (;;) {
		unsigned end;
		while (!(end = http_head_end(req, have))) {
			if (have >= HTTP_HEAD_MAX) {
				simple(c, "400 Bad Request", 0);
				return;
			}
			ssize_t r = recv(c, req + have, HTTP_HEAD_MAX - have, 0);
			if (r <= 0)
				return;
			have += (unsigned)r;
		}
		/* The same parser as gpu_httpd (examples/http_request.h), with
		 * the same room for the path (its PATH_ROOM, 1024 with DIR). */
		struct http_request rq;
		unsigned room = rl < 1024 ? 1024 - (unsigned)rl : 1;
		int status = http_parse_request(req, end, &rq, path + rl, room);
		int ok;
		if (status == 400)
			ok = (simple(c, http_status_text(status), 0), 0);
		else if (status)
			ok = simple(c, http_status_text(status), rq.keep_alive) == 0 && rq.keep_alive;
		else
			ok = serve(c, path, file, rq.method == HTTP_HEAD, rq.keep_alive) == 0;
		if (!ok)
			return;
		memmove(req, req + end, have - end);
		have -= end;
	}
}

static void *worker(void *arg)
{
	(void)arg;
	char *req = malloc(HTTP_HEAD_MAX + 1);
	uint8_t *file = malloc(256 << 10);
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		int one = 1;
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		connection(c, req, file);
		close(c);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || !realpath(argv[1], root)) {
		fprintf(stderr, "usage: http_cpu DIR PORT [THREADS]\n");
		return 2;
	}
	int threads = argc > 3 ? atoi(argv[3]) : 128;
	lfd = cpu_peer_listen(argv[2], 0, "http_cpu");
	if (lfd < 0)
		return 1;
	cpu_peer_run(threads, worker);
	return 0;
}
