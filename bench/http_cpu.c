/* SPDX-License-Identifier: MIT */
/*
 * http_cpu DIR PORT [THREADS]: the CPU peer of examples/gpu_httpd.cu, doing
 * the same work the same way: THREADS threads (default 128, as gpu_httpd's
 * warps) each accept one connection at a time and serve its keep-alive
 * requests (read the head, parse, open + fstat + pread + send, close the
 * file). GET/HEAD, 404, 400, 403 for "..", like gpu_httpd; for comparison
 * only.
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
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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

static void connection(int c, char *req, uint8_t *file)
{
	size_t have = 0;
	for (;;) {
		char *end;
		while (!(end = memmem(req, have, "\r\n\r\n", 4))) {
			if (have >= 8192) {
				simple(c, "400 Bad Request", 0);
				return;
			}
			ssize_t r = recv(c, req + have, 8192 - have, 0);
			if (r <= 0)
				return;
			have += (size_t)r;
		}
		size_t headlen = (size_t)(end - req) + 4;
		char *sp1 = memchr(req, ' ', headlen), *eol = memchr(req, '\r', headlen);
		char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
		if (!sp1 || !sp2 || eol - sp2 - 1 != 8 || strncasecmp(sp2 + 1, "HTTP/1.", 7)) {
			simple(c, "400 Bad Request", 0);
			return;
		}
		int keep = sp2[8] == '1';
		char *conn = memmem(req, headlen, "\nConnection:", 12);
		if (conn && !strncasecmp(conn + 13, "close", 5))
			keep = 0;
		int get = sp1 - req == 3 && !strncmp(req, "GET", 3), head = sp1 - req == 4 && !strncmp(req, "HEAD", 4);
		int ok;
		if (!get && !head) {
			ok = simple(c, "501 Not Implemented", keep) == 0 && keep;
		} else {
			char path[PATH_MAX + 64];
			size_t tl = (size_t)(sp2 - sp1 - 1);
			if (tl == 0 || sp1[1] != '/' || memmem(sp1 + 1, tl, "..", 2) || tl > 1024) {
				ok = simple(c, "403 Forbidden", keep) == 0 && keep;
			} else {
				snprintf(path, sizeof(path), "%s%.*s%s", root, (int)tl, sp1 + 1, sp1[tl] == '/' ? "index.html" : "");
				int f = open(path, O_RDONLY | O_CLOEXEC);
				struct stat st;
				if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
					if (f >= 0)
						close(f);
					ok = simple(c, "404 Not Found", keep) == 0 && keep;
				} else {
					char h[256];
					int n = snprintf(h, sizeof(h),
							 "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %lld\r\nConnection: %s\r\n\r\n",
							 (long long)st.st_size, keep ? "keep-alive" : "close");
					ok = send_all(c, h, (size_t)n) == 0;
					off_t off = 0;
					while (ok && get && off < st.st_size) {
						ssize_t got = pread(f, file, 256 << 10, off);
						if (got <= 0 || send_all(c, file, (size_t)got) < 0)
							ok = 0;
						off += got > 0 ? got : 0;
					}
					close(f);
					ok = ok && keep;
				}
			}
		}
		if (!ok)
			return;
		memmove(req, req + headlen, have - headlen);
		have -= headlen;
	}
}

static void *worker(void *arg)
{
	(void)arg;
	char *req = malloc(8193);
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
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
		perror("http_cpu");
		return 1;
	}
	for (int i = 1; i < threads; i++) {
		pthread_t t;
		pthread_create(&t, NULL, worker, NULL);
	}
	worker(NULL);
	return 0;
}
