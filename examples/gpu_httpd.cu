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
 * Many connections per warp, as examples/tcp_echo.cu (docs/SOCKETS.md, "How
 * to write a kernel server"): each warp polls its keep-alive connections and
 * the listener (one gpusys_poll), takes new connections while it has room
 * (up to 63), and its 32 lanes serve the ready connections together (their
 * receives, opens, reads and sends go as the warp's requests). WARPS
 * (default 160) times 63 is how many connections are served at once:
 * 10,080 by default. Every error a connection's calls return is printed
 * with its errno. Needs a running gpusysd; the process's working directory
 * does not matter (DIR is made absolute). Symbolic links inside DIR are
 * followed.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */
#include "http_request.h"

#define REQ_MAX HTTP_HEAD_MAX     /* request head */
#define FILE_CHUNK (64u << 10)   /* file bytes per pread, per lane */
#define PATH_ROOM 1024u
#define CONNS_PER_WARP (GPUSYS_SOCK_POLL_MAX - 1) /* one poll: the connections and the listener */

/* A lane's working memory (device memory). */
struct warp_mem {
	char path[PATH_ROOM];
	char head[512];
	uint8_t file[FILE_CHUNK];
};

/* A keep-alive connection: its handle and what arrived of its next
 * request(s). */
struct conn {
	long long h;
	unsigned have;
	bool closed;
	char req[REQ_MAX + 1];
};

/* A warp's connections. */
struct warp_conns {
	struct conn c[CONNS_PER_WARP];
	unsigned n;
	struct gpusys_pollfd pf[GPUSYS_SOCK_POLL_MAX];
	int npf;
	bool listener_ready;
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

/* A ready connection: what arrived, and every complete request in it
 * answered (pipelined ones too). false: close it. */
static __device__ bool conn_ready(const gpusys_dev_t &dev, struct conn *k, struct server *srv, struct warp_mem *m)
{
	long long c = k->h;
	if (k->have >= REQ_MAX) {
		respond_simple(dev, c, m, "400 Bad Request", false, false);
		return false;
	}
	long long r = gpusys_recv(dev, c, k->req + k->have, REQ_MAX - k->have, MSG_DONTWAIT); /* ready: never waits */
	if (r == -EAGAIN)
		return true;
	if (r < 0)
		conn_error(dev, c, "recv", r);
	if (r <= 0)
		return false;
	k->have += (unsigned)r;
	for (unsigned i = 0; i < srv->root_len; i++)
		m->path[i] = srv->root[i];
	unsigned end;
	while ((end = http_head_end(k->req, k->have))) {
		/* The parser (http_request.h, shared with bench/http_cpu.c)
		 * decodes the path after DIR in m->path. */
		struct http_request rq;
		int status = http_parse_request(k->req, end, &rq, m->path + srv->root_len, PATH_ROOM - srv->root_len);
		bool head = rq.method == HTTP_HEAD;
		bool ok;
		if (status == 400)
			ok = respond_simple(dev, c, m, http_status_text(status), head, false) && false;
		else if (status)
			ok = respond_simple(dev, c, m, http_status_text(status), head, rq.keep_alive) && rq.keep_alive;
		else
			ok = serve(dev, c, m, srv->root_len + rq.path_len, head, rq.keep_alive);
		atomicAdd(&srv->requests, 1ull);
		if (!ok)
			return false;
		/* A pipelined next request may already be here. */
		for (unsigned i = end; i < k->have; i++)
			k->req[i - end] = k->req[i];
		k->have -= end;
	}
	if (k->have >= REQ_MAX) {
		respond_simple(dev, c, m, "400 Bad Request", false, false);
		return false;
	}
	return true;
}

static __global__ void k_listen(gpusys_dev_t dev, int port, struct server *srv)
{
	/* Non-blocking: every warp with room polls it, and the ones that lose
	 * the race for a new connection get EAGAIN at once. */
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
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

/* Lane 0: take new connections while there is room and one is pending. */
static __device__ void accept_some(const gpusys_dev_t &dev, struct server *srv, struct warp_conns *w)
{
	while (w->n < CONNS_PER_WARP) {
		long long c = gpusys_accept(dev, srv->listener);
		if (c == -EAGAIN)
			return; /* none left (or another warp took it) */
		if (c == -ESHUTDOWN || c == -EBADF) {
			srv->error = (int)c;
			return;
		}
		if (c < 0) {
			/* EMFILE (our handle quota), ECONNABORTED...: the next one */
			conn_error(dev, -1, "accept", c);
			if (c == -EMFILE || c == -ENFILE || c == -ENOMEM)
				for (int i = 0; i < 10; i++)
					__nanosleep(1000000); /* 10 ms: a quota does not clear at once */
			return;
		}
		int one = 1;
		long long r = gpusys_setsockopt(dev, c, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
		if (r < 0)
			conn_error(dev, c, "setsockopt", r);
		struct conn *k = &w->c[w->n++];
		k->h = c;
		k->have = 0;
		k->closed = false;
	}
}

static __global__ void k_httpd(gpusys_dev_t dev, struct server *srv, struct warp_conns *conns, struct warp_mem *mem)
{
	unsigned lane = threadIdx.x & 31;
	struct warp_conns *w = &conns[blockIdx.x];
	struct warp_mem *m = &mem[(size_t)blockIdx.x * 32 + lane];
	volatile int *error = &srv->error;
	while (!*error) {
		/* Lane 0 polls the warp's connections and, with room, the
		 * listener: one request, in which the warp sleeps until one is
		 * ready. */
		if (lane == 0) {
			w->npf = 0;
			for (unsigned i = 0; i <= w->n; i++) {
				if (i == w->n && w->n == CONNS_PER_WARP)
					break; /* full: no new connections */
				struct gpusys_pollfd *p = &w->pf[w->npf++];
				p->handle = (int32_t)(i < w->n ? w->c[i].h : srv->listener);
				p->events = POLLIN;
				p->revents = 0;
			}
			int r = gpusys_poll(dev, w->pf, (unsigned)w->npf, 1000);
			if (r < 0) {
				conn_error(dev, -1, "poll", r);
				if (r == -ESHUTDOWN)
					srv->error = r;
				w->npf = 0;
			}
			w->listener_ready = w->n < CONNS_PER_WARP && w->npf > (int)w->n && w->pf[w->n].revents;
		}
		__syncwarp();
		/* The lanes take the ready connections, 32 at a time. */
		unsigned n = w->n;
		int npf = w->npf;
		for (unsigned base = 0; base < n; base += 32) {
			unsigned i = base + lane;
			struct conn *k = &w->c[i < n ? i : 0];
			if (i < n && (int)i < npf && w->pf[i].revents && !conn_ready(dev, k, srv, m)) {
				long long r = gpusys_close(dev, k->h);
				if (r < 0)
					conn_error(dev, k->h, "close", r);
				k->closed = true;
			}
		}
		__syncwarp();
		if (lane == 0) {
			/* Forget the closed ones (moving the open ones down, with
			 * what they have received), then take new ones. */
			unsigned kept = 0;
			for (unsigned i = 0; i < w->n; i++) {
				if (w->c[i].closed)
					continue;
				if (kept != i) {
					struct conn *from = &w->c[i], *to = &w->c[kept];
					to->h = from->h;
					to->have = from->have;
					to->closed = false;
					for (unsigned j = 0; j < from->have; j++)
						to->req[j] = from->req[j];
				}
				kept++;
			}
			w->n = kept;
			if (w->listener_ready)
				accept_some(dev, srv, w);
		}
		__syncwarp();
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
	unsigned warps = argc > 3 ? (unsigned)atoi(argv[3]) : 160;
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
	struct warp_conns *conns;
	struct warp_mem *mem;
	if (cudaMallocManaged(&srv, sizeof(*srv)) || cudaMalloc(&conns, (size_t)warps * sizeof(*conns)) ||
	    cudaMemset(conns, 0, (size_t)warps * sizeof(*conns)) ||
	    cudaMalloc(&mem, (size_t)warps * 32 * sizeof(*mem))) {
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
	fprintf(stderr, "gpu_httpd: serving %s on port %d with %u warps, up to %u connections at once\n", root, port,
		warps, warps * CONNS_PER_WARP);
	k_httpd<<<warps, 32>>>(gpusys_device(g), srv, conns, mem);
	rc = gpusys_synchronize(g, NULL, -1);
	fprintf(stderr, "gpu_httpd: ended: %s\n", rc ? gpusys_strerror(rc) : "ok");
	gpusys_detach(g);
	return rc ? 1 : 0;
}
