/* SPDX-License-Identifier: MIT */
/*
 * tcp_echo PORT [CONNECTIONS [WARPS]]: a kernel serves TCP echo on PORT
 * (all addresses, IPv4), many connections per warp: each warp polls its
 * connections and the listener (one gpusys_poll of up to 64 handles), takes
 * new connections while it has room (up to 63), and its 32 lanes serve the
 * ready connections together (a receive and a send each, one request for
 * the warp). WARPS (default 160) times 63 is how many connections are
 * served at once: 10,080 by default. docs/SOCKETS.md, "How to write a
 * kernel server", explains the pattern. With CONNECTIONS > 0 the kernel ends
 * after that many connections have closed (polls wake every 200 ms to look);
 * 0 serves until the program is killed. Every error a connection's calls
 * return is printed with its errno. Needs a running gpusysd.
 *
 *   $ tcp_echo 7777 &
 *   $ echo hello | socat - TCP:127.0.0.1:7777     (or any TCP client)
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

/* Receive room per lane: 32 lanes of a warp receive in one request, so a
 * warp's request asks the daemon for 32 x BUF of room while it runs (within
 * the client's memory budget, client_mem_budget, for every warp at once). */
#define BUF (8u << 10)
#define CONNS_PER_WARP (GPUSYS_SOCK_POLL_MAX - 1) /* one poll: the connections and the listener */

struct shared_state {
	long long listener;
	unsigned long long served;
	int error;
};

/* A warp's connections, in device memory (one per warp). */
struct warp_conns {
	long long h[CONNS_PER_WARP];
	unsigned n;
	struct gpusys_pollfd pf[GPUSYS_SOCK_POLL_MAX];
	int npf;
	bool listener_ready;
	bool closed[CONNS_PER_WARP];
};

static __global__ void k_listen(gpusys_dev_t dev, int port, struct shared_state *st)
{
	/* Non-blocking: every warp polls it, and the ones that lose the race
	 * for a new connection get EAGAIN at once. */
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (h < 0) {
		st->error = (int)h;
		return;
	}
	int one = 1;
	gpusys_setsockopt(dev, h, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = gpusys_htons((uint16_t)port);
	a.sin_addr.s_addr = 0; /* INADDR_ANY */
	int r = gpusys_bind(dev, h, &a, sizeof(a));
	if (r == 0)
		r = gpusys_listen(dev, h, 4096);
	st->listener = h;
	st->error = r;
}

/* Every error a connection's calls return is logged with its errno (the
 * client's stderr, through gpusysd): a connection this server ends for any
 * reason but its peer's close says why. */
static __device__ void echo_error(gpusys_dev_t dev, long long c, const char *call, long long r)
{
	gpusys_fprintf(dev, GPUSYS_PRINT_STDERR, "tcp_echo: warp %u: connection %lld: %s: errno %lld\n", blockIdx.x,
		       c, call, -r);
}

/* Lane 0: take new connections while there is room and one is pending. */
static __device__ void accept_some(gpusys_dev_t dev, struct shared_state *st, struct warp_conns *w)
{
	while (w->n < CONNS_PER_WARP) {
		long long c = gpusys_accept(dev, st->listener);
		if (c == -EAGAIN)
			return; /* none left (or another warp took it) */
		if (c == -ESHUTDOWN || c == -EBADF) {
			st->error = (int)c; /* the daemon or the listener is gone */
			return;
		}
		if (c < 0) {
			/* EMFILE (our handle quota), ECONNABORTED...: this one
			 * fails, the next may not */
			echo_error(dev, -1, "accept", c);
			if (c == -EMFILE || c == -ENFILE || c == -ENOMEM)
				for (int i = 0; i < 10; i++)
					__nanosleep(1000000); /* 10 ms: a quota does not clear at once */
			return;
		}
		w->closed[w->n] = false;
		w->h[w->n++] = c;
	}
}

/* One lane's ready connection: what arrived, echoed. false: it is done. */
static __device__ bool echo_once(gpusys_dev_t dev, long long c, uint8_t *buf)
{
	long long n = gpusys_recv(dev, c, buf, BUF, MSG_DONTWAIT); /* ready: never waits */
	if (n == -EAGAIN)
		return true;
	if (n == 0)
		return false; /* the peer closed */
	if (n < 0) {
		echo_error(dev, c, "recv", n);
		return false;
	}
	/* A short send is not an error: gpusys_send_all sends the rest. */
	long long r = gpusys_send_all(dev, c, buf, (unsigned long long)n);
	if (r < 0) {
		echo_error(dev, c, "send", r);
		return false;
	}
	return true;
}

static __global__ void k_echo(gpusys_dev_t dev, struct shared_state *st, unsigned long long quota,
			      struct warp_conns *conns, uint8_t *bufs)
{
	unsigned lane = threadIdx.x & 31;
	struct warp_conns *w = &conns[blockIdx.x];
	uint8_t *buf = bufs + ((size_t)blockIdx.x * 32 + lane) * BUF;
	volatile unsigned long long *served = &st->served;
	volatile int *error = &st->error;
	while ((quota == 0 || *served < quota) && !*error) {
		/* Lane 0 polls the warp's connections and, with room, the
		 * listener: one request; the warp sleeps in it until one is
		 * ready (no warp spins on an idle connection). */
		if (lane == 0) {
			w->npf = 0;
			for (unsigned i = 0; i <= w->n; i++) {
				if (i == w->n && w->n == CONNS_PER_WARP)
					break; /* full: no new connections */
				struct gpusys_pollfd *p = &w->pf[w->npf++];
				p->handle = (int32_t)(i < w->n ? w->h[i] : st->listener);
				p->events = POLLIN;
				p->revents = 0;
			}
			int r = gpusys_poll(dev, w->pf, (unsigned)w->npf, 200);
			if (r < 0) {
				echo_error(dev, -1, "poll", r);
				if (r == -ESHUTDOWN)
					st->error = r;
				w->npf = 0;
			}
			w->listener_ready = w->n < CONNS_PER_WARP && w->npf > (int)w->n && w->pf[w->n].revents;
		}
		__syncwarp();
		/* The lanes take the ready connections, 32 at a time: their
		 * receives (and sends) go as one request of the warp. */
		unsigned n = w->n;
		int npf = w->npf;
		for (unsigned base = 0; base < n; base += 32) {
			unsigned i = base + lane;
			bool ready = i < n && (int)i < npf && w->pf[i].revents;
			if (ready && !echo_once(dev, w->h[i], buf)) {
				long long r = gpusys_close(dev, w->h[i]);
				if (r < 0)
					echo_error(dev, w->h[i], "close", r);
				w->closed[i] = true;
				atomicAdd(&st->served, 1ull);
			}
		}
		__syncwarp();
		if (lane == 0) {
			/* Forget the closed ones, then take new ones. */
			unsigned k = 0;
			for (unsigned i = 0; i < w->n; i++)
				if (!w->closed[i]) {
					w->h[k] = w->h[i];
					w->closed[k++] = false;
				}
			w->n = k;
			if (w->listener_ready)
				accept_some(dev, st, w);
		}
		__syncwarp();
	}
	/* Ending (quota or error): close what is still open. */
	if (lane == 0)
		for (unsigned i = 0; i < w->n; i++)
			gpusys_close(dev, w->h[i]);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tcp_echo PORT [CONNECTIONS [WARPS]]\n");
		return 2;
	}
	int port = atoi(argv[1]);
	unsigned long long quota = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	unsigned warps = argc > 3 ? (unsigned)atoi(argv[3]) : 160;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = warps < 64 ? 64 : warps;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "tcp_echo: %s\n", gpusys_last_error());
		return 1;
	}
	struct shared_state *st;
	struct warp_conns *conns;
	uint8_t *bufs;
	if (cudaMallocManaged(&st, sizeof(*st)) || cudaMalloc(&conns, (size_t)warps * sizeof(*conns)) ||
	    cudaMemset(conns, 0, (size_t)warps * sizeof(*conns)) || cudaMalloc(&bufs, (size_t)warps * 32 * BUF)) {
		fprintf(stderr, "tcp_echo: out of device memory\n");
		return 1;
	}
	memset(st, 0, sizeof(*st));
	k_listen<<<1, 1>>>(gpusys_device(g), port, st);
	if ((rc = gpusys_synchronize(g, NULL, -1)) || st->error) {
		fprintf(stderr, "tcp_echo: port %d: %s\n", port, rc ? gpusys_strerror(rc) : strerror(-st->error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: serving port %d with %u warps, up to %u connections at once\n", port, warps,
		warps * CONNS_PER_WARP);
	k_echo<<<warps, 32>>>(gpusys_device(g), st, quota, conns, bufs);
	rc = gpusys_synchronize(g, NULL, -1);
	if (rc || st->error) {
		fprintf(stderr, "tcp_echo: %s\n", rc ? gpusys_strerror(rc) : strerror(-st->error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: served %llu connections\n", st->served);
	gpusys_detach(g);
	return 0;
}
