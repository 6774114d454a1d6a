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
 * the listener (one gpusys_poll_recv, which brings up to 1 KiB of each
 * ready connection's request with it), takes new connections while it has
 * room (up to 63), and its 32 lanes serve the ready connections together
 * (their file reads and sends, and receives when the poll's room was
 * full, go as the warp's requests). A request for a file of up to 64 KiB
 * is three calls: the poll that brought it, one gpusys_readfile (the
 * daemon opens, reads and closes the file) and one send of head and body;
 * larger files are opened and read in 64 KiB chunks. WARPS
 * (default 160) times 63 is how many connections are served at once:
 * 10,080 by default. Every error a connection's calls return is printed
 * with its errno. Needs a running gpusysd; the process's working directory
 * does not matter (DIR is made absolute). Symbolic links inside DIR are
 * followed. GPU_HTTPD_STATS=SECS prints, every SECS seconds, the mean time
 * of its readfiles, sends and whole requests from the warps' side.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */
#include "http_request.h"
#include "warp_server.cuh" /* one warp, many connections */

#define NAME "gpu_httpd"        /* in error lines */
#define REQ_MAX HTTP_HEAD_MAX     /* request head */
#define FILE_CHUNK (64u << 10)   /* file bytes per pread, per lane */
#define PATH_ROOM 1024u
/* Bytes of each connection's poll (warp_server.cuh): a request head up to
 * this size comes with the poll, with no receive of its own. */
#define POLL_ROOM 1024u

/* Where a lane's requests spend their time, from the warp's side (ns of
 * the GPU's global timer, and how many): the readfile, the send, and the
 * whole request from its parse to its send. Read by the host while the
 * kernel runs (GPU_HTTPD_STATS). */
enum { PHASE_READFILE, PHASE_SEND, PHASE_REQUEST, PHASES };
struct lane_stats {
	unsigned long long ns[PHASES];
	unsigned long long n[PHASES];
};

static __device__ unsigned long long now_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

static __device__ void phase_add(struct lane_stats *st, int phase, unsigned long long t0)
{
	st->ns[phase] += now_ns() - t0;
	st->n[phase]++;
}

/* A lane's working memory (device memory). The head lies just before the
 * file's bytes, so that a response goes out in one send. */
struct warp_mem {
	struct lane_stats st; /* first: the host copies these alone */
	char path[PATH_ROOM];
	char head[512];
	uint8_t file[FILE_CHUNK];
};
static_assert(offsetof(struct warp_mem, file) == offsetof(struct warp_mem, head) + 512, "head just before file");
static_assert(offsetof(struct warp_mem, file) % 16 == 0, "file bytes aligned");

/* A keep-alive connection: its handle and what arrived of its next
 * request(s). */
struct conn {
	long long h;
	unsigned have;
	bool closed;
	char req[REQ_MAX + 1];
};

struct server {
	struct warp_server ws;
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

/* A short send is not an error: gpusys_send_all sends the rest. */
static __device__ bool send_all(const gpusys_dev_t &dev, long long c, const void *b, unsigned long long n)
{
	long long r = gpusys_send_all(dev, c, b, n);
	if (r < 0)
		warp_server_error(dev, NAME, c, "send", r);
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

/* The response head for a file of size bytes, written so that it ends where
 * m->file begins (head and body then go out as one send); returns where it
 * starts. */
static __device__ char *file_head(struct warp_mem *m, unsigned plen, unsigned long long size, bool keep)
{
	char *o = m->head;
	o = d_cat(o, "HTTP/1.1 200 OK\r\nContent-Type: ");
	o = d_cat(o, content_type(m->path, plen));
	o = d_cat(o, "\r\nContent-Length: ");
	o = d_utoa(o, size);
	o = d_cat(o, keep ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
	unsigned n = (unsigned)(o - m->head);
	char *at = m->head + sizeof(m->head) - n;
	for (unsigned i = n; i-- > 0;) /* backwards: the two may overlap */
		at[i] = m->head[i];
	return at;
}

/* A file larger than one read's room: open, fstat, the head, then the body
 * chunk by chunk. false: drop the connection. */
static __device__ bool serve_large(const gpusys_dev_t &dev, long long c, struct warp_mem *m, unsigned plen,
				   bool head_only, bool keep)
{
	long long f = gpusys_open(dev, m->path, O_RDONLY);
	struct gpusys_stat st;
	if (f < 0 || gpusys_fstat(dev, f, &st) < 0 || (st.mode & S_IFMT) != S_IFREG) {
		if (f >= 0)
			gpusys_close(dev, f);
		return respond_simple(dev, c, m, "404 Not Found", head_only, keep) && keep;
	}
	char *h = file_head(m, plen, (unsigned long long)st.size, keep);
	bool ok = send_all(dev, c, h, (unsigned long long)(m->file - (uint8_t *)h));
	long long off = 0;
	while (ok && !head_only && off < st.size) {
		long long want = st.size - off < FILE_CHUNK ? st.size - off : FILE_CHUNK;
		long long got = gpusys_pread(dev, f, m->file, (unsigned long long)want, off);
		if (got <= 0) {
			if (got < 0)
				warp_server_error(dev, NAME, c, "pread", got);
			ok = false; /* the file shrank: the length we promised is wrong, close */
			break;
		}
		ok = send_all(dev, c, m->file, (unsigned long long)got);
		off += got;
	}
	gpusys_close(dev, f);
	return ok && keep;
}

/* Serve one parsed request: the file at m->path (DIR and the decoded path,
 * plen bytes). A file of up to FILE_CHUNK bytes is one gpusys_readfile (the
 * daemon opens, reads and closes it: one round trip, where open, fstat,
 * pread and close were four) and one send of head and body together.
 * false: drop the connection. */
static __device__ bool serve(const gpusys_dev_t &dev, long long c, struct warp_mem *m, unsigned plen,
			     bool head_only, bool keep)
{
	unsigned long long t0 = now_ns();
	long long n = gpusys_readfile(dev, m->path, m->file, FILE_CHUNK);
	phase_add(&m->st, PHASE_READFILE, t0);
	if (n == -EFBIG)
		return serve_large(dev, c, m, plen, head_only, keep);
	if (n < 0) /* missing, not a regular file, not ours to read */
		return respond_simple(dev, c, m, "404 Not Found", head_only, keep) && keep;
	char *h = file_head(m, plen, (unsigned long long)n, keep);
	unsigned long long len = (unsigned long long)(m->file - (uint8_t *)h) + (head_only ? 0 : (unsigned long long)n);
	t0 = now_ns();
	bool sent = send_all(dev, c, h, len);
	phase_add(&m->st, PHASE_SEND, t0);
	return sent && keep;
}

/* Every complete request of what has arrived answered (pipelined ones
 * too). false: close it. */
static __device__ bool conn_requests(const gpusys_dev_t &dev, struct conn *k, struct server *srv, struct warp_mem *m)
{
	long long c = k->h;
	unsigned long long t0 = now_ns();
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
		phase_add(&m->st, PHASE_REQUEST, t0);
		t0 = now_ns();
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

/* A ready connection: what came with the poll (b) and, when the poll
 * brought nothing or filled its room, what a receive finds; every
 * complete request in it answered. false: close it. */
static __device__ bool conn_ready(const gpusys_dev_t &dev, struct conn *k, struct server *srv, struct warp_mem *m,
				  const struct warp_server_bytes &b)
{
	long long c = k->h;
	if (k->have >= REQ_MAX) {
		respond_simple(dev, c, m, "400 Bad Request", false, false);
		return false;
	}
	if (b.n == 0)
		return false; /* the peer closed */
	if (b.n < 0 && b.n != -EAGAIN) {
		warp_server_error(dev, NAME, c, "recv (with the poll)", b.n);
		return false;
	}
	/* The poll's bytes, as much as the request buffer holds at a time:
	 * answering the complete requests makes room for the rest. */
	for (long long at = 0; at < b.n;) {
		unsigned n = REQ_MAX - k->have; /* > 0: conn_requests closes a full one */
		if ((long long)n > b.n - at)
			n = (unsigned)(b.n - at);
		for (unsigned i = 0; i < n; i++)
			k->req[k->have + i] = (char)b.data[at + i];
		k->have += n;
		at += n;
		if (!conn_requests(dev, k, srv, m))
			return false;
	}
	if (b.n > 0 && !b.more)
		return true;
	long long r = gpusys_recv(dev, c, k->req + k->have, REQ_MAX - k->have, MSG_DONTWAIT); /* ready: never waits */
	if (r == -EAGAIN)
		return true;
	if (r < 0)
		warp_server_error(dev, NAME, c, "recv", r);
	if (r <= 0)
		return false;
	k->have += (unsigned)r;
	return conn_requests(dev, k, srv, m);
}

static __global__ void k_listen(gpusys_dev_t dev, int port, struct server *srv)
{
	warp_server_listen(dev, &srv->ws, port);
}

/* The warp server's functions (examples/warp_server.cuh). */
struct httpd_serve {
	const gpusys_dev_t &dev;
	struct server *srv;
	struct warp_mem *m;

	__device__ bool operator()(struct conn *k, const struct warp_server_bytes &b) const
	{
		return conn_ready(dev, k, srv, m, b);
	}
};

/* A new connection: replies go out at once (no Nagle delay behind the
 * previous reply's last segment), nothing received yet. */
struct httpd_opened {
	const gpusys_dev_t &dev;

	__device__ void operator()(struct conn *k) const
	{
		int one = 1;
		long long r = gpusys_setsockopt(dev, k->h, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof(one));
		if (r < 0)
			warp_server_error(dev, NAME, k->h, "setsockopt", r);
		k->have = 0;
	}
};

/* What a kept connection has received of its next request moves with it. */
struct httpd_moved {
	__device__ void operator()(struct conn *to, const struct conn *from) const
	{
		to->have = from->have;
		for (unsigned j = 0; j < from->have; j++)
			to->req[j] = from->req[j];
	}
};

struct httpd_never_stop {
	__device__ bool operator()() const { return false; }
};

static __global__ void k_httpd(gpusys_dev_t dev, struct server *srv, warp_conns<struct conn> *conns,
			       struct warp_mem *mem, uint8_t *poll_bufs)
{
	struct warp_mem *m = &mem[(size_t)blockIdx.x * 32 + (threadIdx.x & 31)];
	uint8_t *poll_buf = poll_bufs + (size_t)blockIdx.x * WARP_SERVER_POLL_BYTES(POLL_ROOM);
	warp_server_run(dev, &srv->ws, &conns[blockIdx.x], poll_buf, httpd_serve{ dev, srv, m }, httpd_opened{ dev },
			httpd_moved{}, httpd_never_stop{});
}

/* GPU_HTTPD_STATS=SECS: every SECS seconds, while the kernel serves, the
 * lanes' phases summed (copied on a stream of their own) and printed as
 * the last interval's mean per call: where a request's time goes from the
 * warp's side (bench/httpd-profile.sh). */
struct stats_reader {
	const struct warp_mem *mem;
	size_t lanes;
	unsigned secs;
};

static void *stats_main(void *arg)
{
	const struct stats_reader *r = (const struct stats_reader *)arg;
	cudaStream_t s;
	struct lane_stats *h = (struct lane_stats *)calloc(r->lanes, sizeof(*h));
	struct lane_stats last;
	memset(&last, 0, sizeof(last));
	if (!h || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) {
		free(h);
		return NULL;
	}
	static const char *const names[PHASES] = { "readfile", "send", "request" };
	for (;;) {
		sleep(r->secs);
		if (cudaMemcpy2DAsync(h, sizeof(*h), r->mem, sizeof(*r->mem), sizeof(*h), r->lanes,
				      cudaMemcpyDeviceToHost, s) ||
		    cudaStreamSynchronize(s))
			return NULL;
		struct lane_stats sum;
		memset(&sum, 0, sizeof(sum));
		for (size_t i = 0; i < r->lanes; i++)
			for (int p = 0; p < PHASES; p++) {
				sum.ns[p] += h[i].ns[p];
				sum.n[p] += h[i].n[p];
			}
		fprintf(stderr, "gpu_httpd: stats:");
		for (int p = 0; p < PHASES; p++) {
			unsigned long long n = sum.n[p] - last.n[p], ns = sum.ns[p] - last.ns[p];
			fprintf(stderr, " %s %llu/s %.1f us", names[p], n / r->secs, n ? ns / 1e3 / n : 0.0);
		}
		fprintf(stderr, "\n");
		last = sum;
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
	warp_conns<struct conn> *conns;
	struct warp_mem *mem;
	uint8_t *poll_bufs;
	if (cudaMallocManaged(&srv, sizeof(*srv)) || cudaMalloc(&conns, (size_t)warps * sizeof(*conns)) ||
	    cudaMemset(conns, 0, (size_t)warps * sizeof(*conns)) ||
	    cudaMalloc(&mem, (size_t)warps * 32 * sizeof(*mem)) ||
	    cudaMalloc(&poll_bufs, (size_t)warps * WARP_SERVER_POLL_BYTES(POLL_ROOM))) {
		fprintf(stderr, "gpu_httpd: out of memory\n");
		return 1;
	}
	memset(srv, 0, sizeof(*srv));
	snprintf(srv->ws.name, sizeof(srv->ws.name), "gpu_httpd");
	srv->ws.poll_ms = 1000;
	srv->ws.poll_room = POLL_ROOM;
	strcpy(srv->root, root);
	srv->root_len = (unsigned)strlen(root);
	k_listen<<<1, 1>>>(gpusys_device(g), port, srv);
	if ((rc = gpusys_synchronize(g, NULL, -1)) || srv->ws.error) {
		fprintf(stderr, "gpu_httpd: port %d: %s\n", port, rc ? gpusys_strerror(rc) : strerror(-srv->ws.error));
		return 1;
	}
	fprintf(stderr, "gpu_httpd: serving %s on port %d with %u warps, up to %u connections at once\n", root, port,
		warps, warps * WARP_SERVER_CONNS);
	if (cudaMemset(mem, 0, (size_t)warps * 32 * sizeof(*mem))) {
		fprintf(stderr, "gpu_httpd: cudaMemset failed\n");
		return 1;
	}
	k_httpd<<<warps, 32>>>(gpusys_device(g), srv, conns, mem, poll_bufs);
	struct stats_reader sr = { mem, (size_t)warps * 32, getenv("GPU_HTTPD_STATS") ? (unsigned)atoi(getenv("GPU_HTTPD_STATS")) : 0 };
	pthread_t st;
	if (sr.secs && pthread_create(&st, NULL, stats_main, &sr) == 0)
		pthread_detach(st);
	rc = gpusys_synchronize(g, NULL, -1);
	fprintf(stderr, "gpu_httpd: ended: %s\n", rc ? gpusys_strerror(rc) : "ok");
	gpusys_detach(g);
	return rc ? 1 : 0;
}
