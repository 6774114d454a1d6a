/* SPDX-License-Identifier: MIT */
/*
 * examples/warp_server.cuh: the loop of a kernel server in which one warp
 * serves many connections (docs/SOCKETS.md, "How to write a kernel
 * server"), written once for tcp_echo.cu and gpu_httpd.cu.
 *
 * A warp keeps up to WARP_SERVER_CONNS connections in device memory. Each
 * turn, lane 0 polls them and, while the warp has room, the listener, in one
 * gpusys_poll_recv (the warp sleeps in that request on the daemon's event
 * loop, never spinning on an idle connection): each connection (not the
 * listener) asks for its bytes (GPUSYS_POLL_RECV, up to srv->poll_room
 * each), so that what arrived comes with the poll's answer, into the warp's
 * poll buffer. The lanes then serve the ready connections 32 at a time
 * (calls the lanes reach together go as one request of the warp): with the
 * bytes in hand a message costs a poll and a send, not a poll, a receive
 * and a send. Lane 0 forgets the closed ones and takes new ones. With
 * srv->poll_room 0 the poll is a plain gpusys_poll and serve receives
 * itself (b.n is -EAGAIN).
 *
 * A server supplies its connection type, which has at least
 *     long long h;   the socket handle
 *     bool closed;   set by the loop when it closes the connection
 * and three functions (functors, so that nvcc inlines them):
 *     bool serve(Conn *k, const warp_server_bytes &b)
 *                                      a ready connection's turn, on its lane,
 *                                      with what came with the poll (below);
 *                                      false: close it
 *     void opened(Conn *k)             lane 0, a new connection (k->h is set)
 *     void moved(Conn *to, const Conn *from)   lane 0, when the closed ones
 *                                      are forgotten: copy what it keeps
 * and a stop condition, looked at by every lane once a turn.
 */
#ifndef GPUSYS_EXAMPLES_WARP_SERVER_CUH
#define GPUSYS_EXAMPLES_WARP_SERVER_CUH

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>

#include "gpusys/gpusys.cuh"

/* One poll of GPUSYS_SOCK_POLL_MAX handles: the connections and the
 * listener. */
#define WARP_SERVER_CONNS (GPUSYS_SOCK_POLL_MAX - 1)

/* A warp's poll buffer (device memory, one per warp) for a room of
 * poll_room bytes per connection: the answer's header and every
 * connection's room. */
#define WARP_SERVER_POLL_BYTES(poll_room) \
	(GPUSYS_POLL_RECV_HDR(GPUSYS_SOCK_POLL_MAX) + WARP_SERVER_CONNS * (unsigned long long)(poll_room))

/* What every warp of a server shares (device or managed memory). */
struct warp_server {
	char name[16];      /* in the error lines (read by the device: kept here, not a host pointer) */
	long long listener; /* non-blocking: the warps that lose a race get EAGAIN */
	int poll_ms;        /* how often a quiet warp looks at its stop condition */
	unsigned poll_room; /* bytes per connection the poll receives (0: a plain poll) */
	int error;          /* the first fatal error (the daemon or listener gone): every warp stops */
};

/* What came with the poll for a ready connection: n bytes at data (n > 0),
 * 0 when the peer closed, or -errno (-EAGAIN: nothing came, receive
 * yourself). more: the room was full (n == poll_room), more may be
 * waiting: receive it (MSG_DONTWAIT) after using these. */
struct warp_server_bytes {
	const uint8_t *data;
	long long n;
	bool more;
};

/* A warp's connections (device memory, one per warp, zeroed). */
template <typename Conn> struct warp_conns {
	Conn c[WARP_SERVER_CONNS];
	unsigned n;
	struct gpusys_pollfd pf[GPUSYS_SOCK_POLL_MAX];
	int lens[GPUSYS_SOCK_POLL_MAX];      /* the poll's bytes per handle, or -errno */
	unsigned offs[GPUSYS_SOCK_POLL_MAX]; /* where in the poll buffer */
	int npf;
	bool listener_ready;
};

/* Every error a connection's call returns is logged with its errno (the
 * client's stderr, through gpusysd): a connection the server ends for any
 * reason but its peer's close says why. name: memory the device reads (a
 * string literal of device code, or warp_server.name); c < 0: no
 * connection (poll, accept). */
static __device__ void warp_server_error(const gpusys_dev_t &dev, const char *name, long long c, const char *call,
					 long long r)
{
	gpusys_fprintf(dev, GPUSYS_PRINT_STDERR, "%s: warp %u: connection %lld: %s: errno %lld\n", name, blockIdx.x, c,
		       call, -r);
}

/* One thread, before the serving kernel: a non-blocking TCP listener on
 * port (all IPv4 addresses) in srv->listener; srv->error says how it went. */
static __device__ void warp_server_listen(const gpusys_dev_t &dev, struct warp_server *srv, int port)
{
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int one = 1;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = gpusys_htons((uint16_t)port);
	a.sin_addr.s_addr = 0; /* INADDR_ANY */
	int r = h < 0 ? (int)h : gpusys_setsockopt(dev, h, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (r == 0)
		r = gpusys_bind(dev, h, &a, sizeof(a));
	if (r == 0)
		r = gpusys_listen(dev, h, 4096);
	srv->listener = h;
	srv->error = r;
}

/* Lane 0: poll the warp's connections and, with room, the listener; the
 * connections (never the listener: it has no bytes) ask for theirs. */
template <typename Conn>
static __device__ void warp_server_poll(const gpusys_dev_t &dev, struct warp_server *srv, warp_conns<Conn> *w,
					uint8_t *poll_buf)
{
	const unsigned room = srv->poll_room;
	w->npf = 0;
	for (unsigned i = 0; i <= w->n; i++) {
		if (i == w->n && w->n == WARP_SERVER_CONNS)
			break; /* full: no new connections */
		struct gpusys_pollfd *p = &w->pf[w->npf++];
		p->handle = (int32_t)(i < w->n ? w->c[i].h : srv->listener);
		p->events = (int16_t)(POLLIN | (i < w->n && room ? GPUSYS_POLL_RECV : 0));
		p->revents = 0;
	}
	int r;
	if (room) {
		r = gpusys_poll_recv(dev, w->pf, (unsigned)w->npf, srv->poll_ms, poll_buf,
				     (unsigned)WARP_SERVER_POLL_BYTES(room), room, w->lens, w->offs);
	} else {
		r = gpusys_poll(dev, w->pf, (unsigned)w->npf, srv->poll_ms);
		for (int i = 0; i < w->npf; i++)
			w->lens[i] = -EAGAIN;
	}
	if (r < 0) {
		warp_server_error(dev, srv->name, -1, "poll", r);
		if (r == -ESHUTDOWN)
			srv->error = r;
		w->npf = 0;
	}
	w->listener_ready = w->n < WARP_SERVER_CONNS && w->npf > (int)w->n && w->pf[w->n].revents;
}

/* Lane 0: take new connections while there is room and one is pending. */
template <typename Conn, typename Opened>
static __device__ void warp_server_accept(const gpusys_dev_t &dev, struct warp_server *srv, warp_conns<Conn> *w,
					  Opened opened)
{
	while (w->n < WARP_SERVER_CONNS) {
		long long c = gpusys_accept(dev, srv->listener);
		if (c == -EAGAIN)
			return; /* none left (or another warp took it) */
		if (c == -ESHUTDOWN || c == -EBADF) {
			srv->error = (int)c; /* the daemon or the listener is gone */
			return;
		}
		if (c < 0) {
			/* EMFILE (our handle quota), ECONNABORTED...: this one
			 * fails, the next may not; connections stay queued. */
			warp_server_error(dev, srv->name, -1, "accept", c);
			if (c == -EMFILE || c == -ENFILE || c == -ENOMEM)
				for (int i = 0; i < 10; i++)
					__nanosleep(1000000); /* 10 ms: a quota does not clear at once */
			return;
		}
		Conn *k = &w->c[w->n++];
		k->h = c;
		k->closed = false;
		opened(k);
	}
}

/* Lane 0: forget the closed connections, moving the open ones down. */
template <typename Conn, typename Moved>
static __device__ void warp_server_compact(warp_conns<Conn> *w, Moved moved)
{
	unsigned kept = 0;
	for (unsigned i = 0; i < w->n; i++) {
		if (w->c[i].closed)
			continue;
		if (kept != i) {
			Conn *to = &w->c[kept];
			moved(to, &w->c[i]);
			to->h = w->c[i].h;
			to->closed = false;
		}
		kept++;
	}
	w->n = kept;
}

/* The whole warp: serve until stop() or a fatal error, then close what is
 * still open. poll_buf: this warp's WARP_SERVER_POLL_BYTES(srv->poll_room)
 * bytes of device memory (unused when poll_room is 0). */
template <typename Conn, typename Serve, typename Opened, typename Moved, typename Stop>
static __device__ void warp_server_run(const gpusys_dev_t &dev, struct warp_server *srv, warp_conns<Conn> *w,
				       uint8_t *poll_buf, Serve serve, Opened opened, Moved moved, Stop stop)
{
	const unsigned lane = threadIdx.x & 31;
	volatile int *error = &srv->error;
	while (!*error && !stop()) {
		if (lane == 0)
			warp_server_poll(dev, srv, w, poll_buf);
		__syncwarp();
		unsigned n = w->n;
		int npf = w->npf;
		for (unsigned base = 0; base < n; base += 32) {
			unsigned i = base + lane;
			Conn *k = &w->c[i < n ? i : 0];
			if (i >= n || (int)i >= npf || !w->pf[i].revents)
				continue;
			long long got = w->lens[i];
			struct warp_server_bytes b = { got > 0 ? poll_buf + w->offs[i] : 0, got,
						       got > 0 && (unsigned)got == srv->poll_room };
			if (!serve(k, b)) {
				long long r = gpusys_close(dev, k->h);
				if (r < 0)
					warp_server_error(dev, srv->name, k->h, "close", r);
				k->closed = true;
			}
		}
		__syncwarp();
		if (lane == 0) {
			warp_server_compact(w, moved);
			if (w->listener_ready)
				warp_server_accept(dev, srv, w, opened);
		}
		__syncwarp();
	}
	if (lane == 0)
		for (unsigned i = 0; i < w->n; i++)
			gpusys_close(dev, w->c[i].h);
}

#endif /* GPUSYS_EXAMPLES_WARP_SERVER_CUH */
