/* SPDX-License-Identifier: MIT */
/*
 * gpu_httpd DIR PORT [WARPS]: a kernel serves the static files under DIR
 * over HTTP/1.1 on PORT (all IPv4 addresses). GET and HEAD, keep-alive
 * (HTTP/1.1 by default, HTTP/1.0 with "Connection: keep-alive"),
 * Content-Length, 404 for what is not a regular file, 400 for a malformed
 * request, 403 for a path that would leave DIR (a ".." segment), 501 for
 * other methods. "/" and paths ending in "/" serve index.html. Paths are
 * percent-decoded ("/with%20space.txt"); the parser (http_request.h) is
 * shared with the CPU peer, bench/http_cpu.c, and tested on the host.
 *
 * Each warp's first lane serves one connection at a time (accept, then
 * requests until the peer closes or asks to), so WARPS (default 128) is how
 * many connections are served at once. Needs a running gpusysd; the
 * process's working directory does not matter (DIR is made absolute).
 * Symbolic links inside DIR are followed.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"
#include "gpusys/print.cuh"
#include "gpusys/socket.cuh"
#include "http_request.h"

#define REQ_MAX HTTP_HEAD_MAX     /* request head */
#define FILE_CHUNK (256u << 10)  /* file bytes per pread */
#define PATH_ROOM 1024u

struct warp_mem {
	char req[REQ_MAX + 1];
	char path[PATH_ROOM];
	char head[512];
	uint8_t file[FILE_CHUNK];
};

struct server {
	long long listener;
	int error;
	unsigned long long requests;
	char root[PATH_ROOM];
	unsigned root_len;
};

static __device__ unsigned d_strlen(const char *s)
{
	unsigned n = 0;
	while (s[n])
		n++;
	return n;
}

static __device__ bool d_prefix_ci(const char *s, const char *p)
{
	for (; *p; s++, p++) {
		char a = *s, b = *p;
		if (a >= 'A' && a <= 'Z')
			a = (char)(a - 'A' + 'a');
		if (b >= 'A' && b <= 'Z')
			b = (char)(b - 'A' + 'a');
		if (a != b)
			return false;
	}
	return true;
}

static __device__ char *d_utoa(char *o, unsigned long long v)
{
	char t[24];
	int n = 0;
	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*o++ = t[--n];
	return o;
}

static __device__ char *d_cat(char *o, const char *s)
{
	while (*s)
		*o++ = *s++;
	return o;
}

static __device__ const char *content_type(const char *path, unsigned n)
{
	const char *dot = 0;
	for (unsigned i = 0; i < n; i++)
		if (path[i] == '.')
			dot = path + i;
		else if (path[i] == '/')
			dot = 0;
	if (!dot)
		return "application/octet-stream";
	if (d_prefix_ci(dot, ".html") || d_prefix_ci(dot, ".htm"))
		return "text/html";
	if (d_prefix_ci(dot, ".txt"))
		return "text/plain";
	if (d_prefix_ci(dot, ".css"))
		return "text/css";
	if (d_prefix_ci(dot, ".js"))
		return "text/javascript";
	if (d_prefix_ci(dot, ".png"))
		return "image/png";
	if (d_prefix_ci(dot, ".jpg") || d_prefix_ci(dot, ".jpeg"))
		return "image/jpeg";
	return "application/octet-stream";
}

/* Every error a connection's calls return is logged with its errno (the
 * client's stderr, through gpusysd). */
static __device__ void conn_error(const gpusys_dev_t &dev, long long c, const char *call, long long r)
{
	gpusys_fprintf(dev, GPUSYS_PRINT_STDERR, "gpu_httpd: warp %u: connection %lld: %s: errno %lld\n", blockIdx.x,
		       c, call, -r);
}

/* A short send is not an error: gpusys_send_all sends the rest. */
static __device__ bool send_all(const gpusys_dev_t &dev, long long c, const void *b, unsigned long long n)
{
	long long r = gpusys_send_all(dev, c, b, n);
	if (r < 0)
		conn_error(dev, c, "send", r);
	return r >= 0;
}

/* A response with a small body (errors). */
static __device__ bool respond_simple(const gpusys_dev_t &dev, long long c, struct warp_mem *m, const char *status,
				      bool head_only, bool keep)
{
	char *o = m->head;
	o = d_cat(o, "HTTP/1.1 ");
	o = d_cat(o, status);
	o = d_cat(o, "\r\nContent-Type: text/plain\r\nContent-Length: ");
	unsigned bl = d_strlen(status) + 1;
	o = d_utoa(o, bl);
	o = d_cat(o, keep ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
	if (!head_only) {
		o = d_cat(o, status);
		*o++ = '\n';
	}
	return send_all(dev, c, m->head, (unsigned long long)(o - m->head));
}

static __device__ const char *status_text(int status)
{
	switch (status) {
	case 400:
		return "400 Bad Request";
	case 403:
		return "403 Forbidden";
	case 414:
		return "414 URI Too Long";
	default:
		return "501 Not Implemented";
	}
}

/* Serve one parsed request: the file at m->path (DIR and the decoded path,
 * plen bytes). false: drop the connection. */
static __device__ bool serve(const gpusys_dev_t &dev, long long c, struct warp_mem *m, unsigned plen,
			     bool head_only, bool keep)
{
	long long f = gpusys_open(dev, m->path, O_RDONLY);
	struct gpusys_stat st;
	if (f < 0 || gpusys_fstat(dev, f, &st) < 0 || (st.mode & S_IFMT) != S_IFREG) {
		if (f >= 0)
			gpusys_close(dev, f);
		return respond_simple(dev, c, m, "404 Not Found", head_only, keep) && keep;
	}
	char *o = m->head;
	o = d_cat(o, "HTTP/1.1 200 OK\r\nContent-Type: ");
	o = d_cat(o, content_type(m->path, plen));
	o = d_cat(o, "\r\nContent-Length: ");
	o = d_utoa(o, (unsigned long long)st.size);
	o = d_cat(o, keep ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
	bool ok = send_all(dev, c, m->head, (unsigned long long)(o - m->head));
	long long off = 0;
	while (ok && !head_only && off < st.size) {
		long long want = st.size - off < FILE_CHUNK ? st.size - off : FILE_CHUNK;
		long long got = gpusys_pread(dev, f, m->file, (unsigned long long)want, off);
		if (got <= 0) {
			if (got < 0)
				conn_error(dev, c, "pread", got);
			ok = false; /* the file shrank: the length we promised is wrong, close */
			break;
		}
		ok = send_all(dev, c, m->file, (unsigned long long)got);
		off += got;
	}
	gpusys_close(dev, f);
	return ok && keep;
}

/* Requests of one connection until it closes or asks to. */
static __device__ void connection(const gpusys_dev_t &dev, long long c, struct server *srv, struct warp_mem *m)
{
	unsigned have = 0;
	for (unsigned i = 0; i < srv->root_len; i++)
		m->path[i] = srv->root[i];
	for (;;) {
		/* Read until the head is complete. */
		unsigned end;
		while (!(end = http_head_end(m->req, have))) {
			if (have >= REQ_MAX) {
				respond_simple(dev, c, m, "400 Bad Request", false, false);
				return;
			}
			long long r = gpusys_recv(dev, c, m->req + have, REQ_MAX - have);
			if (r < 0)
				conn_error(dev, c, "recv", r);
			if (r <= 0)
				return;
			have += (unsigned)r;
		}
		/* The parser (http_request.h, shared with bench/http_cpu.c)
		 * decodes the path after DIR in m->path. */
		struct http_request rq;
		int status = http_parse_request(m->req, end, &rq, m->path + srv->root_len, PATH_ROOM - srv->root_len);
		bool head = rq.method == HTTP_HEAD;
		bool ok;
		if (status == 400)
			ok = respond_simple(dev, c, m, status_text(status), head, false) && false;
		else if (status)
			ok = respond_simple(dev, c, m, status_text(status), head, rq.keep_alive) && rq.keep_alive;
		else
			ok = serve(dev, c, m, srv->root_len + rq.path_len, head, rq.keep_alive);
		atomicAdd(&srv->requests, 1ull);
		if (!ok)
			return;
		/* A pipelined next request may already be here. */
		for (unsigned i = end; i < have; i++)
			m->req[i - end] = m->req[i];
		have -= end;
	}
}

static __global__ void k_listen(gpusys_dev_t dev, int port, struct server *srv)
{
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
	int one = 1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = gpusys_htons((uint16_t)port);
	int r = h < 0 ? (int)h : gpusys_setsockopt(dev, h, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (r == 0)
		r = gpusys_bind(dev, h, &a, sizeof(a));
	if (r == 0)
		r = gpusys_listen(dev, h, 4096);
	srv->listener = h;
	srv->error = r;
}

static __global__ void k_httpd(gpusys_dev_t dev, struct server *srv, struct warp_mem *mem)
{
	if (threadIdx.x != 0)
		return;
	struct warp_mem *m = &mem[blockIdx.x];
	for (;;) {
		long long c = gpusys_accept(dev, srv->listener);
		if (c < 0) {
			if (c == -ESHUTDOWN || c == -EBADF)
				return;
			/* EMFILE (our handle quota), ECONNABORTED...: the next one */
			conn_error(dev, -1, "accept", c);
			if (c == -EMFILE || c == -ENFILE || c == -ENOMEM)
				for (int i = 0; i < 10; i++)
					__nanosleep(1000000); /* 10 ms: a quota does not clear at once */
			continue;
		}
		int one = 1;
		long long r = gpusys_setsockopt(dev, c, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
		if (r < 0)
			conn_error(dev, c, "setsockopt", r);
		connection(dev, c, srv, m);
		r = gpusys_close(dev, c);
		if (r < 0)
			conn_error(dev, c, "close", r);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gpu_httpd DIR PORT [WARPS]\n");
		return 2;
	}
	char root[PATH_MAX];
	if (!realpath(argv[1], root) || strlen(root) >= PATH_ROOM - 64) {
		fprintf(stderr, "gpu_httpd: %s: %s\n", argv[1], strerror(errno ? errno : ENAMETOOLONG));
		return 1;
	}
	int port = atoi(argv[2]);
	unsigned warps = argc > 3 ? (unsigned)atoi(argv[3]) : 128;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = warps < 64 ? 64 : warps;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpu_httpd: %s\n", gpusys_last_error());
		return 1;
	}
	struct server *srv;
	struct warp_mem *mem;
	if (cudaMallocManaged(&srv, sizeof(*srv)) || cudaMalloc(&mem, (size_t)warps * sizeof(*mem))) {
		fprintf(stderr, "gpu_httpd: out of memory\n");
		return 1;
	}
	memset(srv, 0, sizeof(*srv));
	strcpy(srv->root, root);
	srv->root_len = (unsigned)strlen(root);
	k_listen<<<1, 1>>>(gpusys_device(g), port, srv);
	if ((rc = gpusys_synchronize(g, NULL, -1)) || srv->error) {
		fprintf(stderr, "gpu_httpd: port %d: %s\n", port, rc ? gpusys_strerror(rc) : strerror(-srv->error));
		return 1;
	}
	fprintf(stderr, "gpu_httpd: serving %s on port %d with %u warps\n", root, port, warps);
	k_httpd<<<warps, 32>>>(gpusys_device(g), srv, mem);
	rc = gpusys_synchronize(g, NULL, -1);
	fprintf(stderr, "gpu_httpd: ended: %s\n", rc ? gpusys_strerror(rc) : "ok");
	gpusys_detach(g);
	return rc ? 1 : 0;
}
