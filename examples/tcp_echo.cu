/* SPDX-License-Identifier: MIT */
/*
 * tcp_echo PORT [CONNECTIONS [WARPS [POLL_MS]]]: a kernel serves TCP echo on PORT
 * (all addresses, IPv4), many connections per warp: each warp polls its
 * connections and the listener (one gpusys_poll_recv of up to 64 handles,
 * which brings up to 2 KiB of each ready connection's bytes with it), takes
 * new connections while it has room (up to 63), and its 32 lanes serve the
 * ready connections together (a send each, one request for the warp; a
 * receive too when the poll's room was full). WARPS (default 160) times 63 is how many connections are
 * served at once: 10,080 by default. docs/SOCKETS.md, "How to write a
 * kernel server", explains the pattern. With CONNECTIONS > 0 the kernel ends
 * after that many connections have closed (polls wake every POLL_MS, default
 * 1000 ms, to look); 0 serves until the program is killed. Each quiet warp's
 * poll that times out is answered and made again: with 1056 warps, 200 ms
 * timeouts made one busy connection's round trip 185 us against 126 us
 * with 1000 ms (H200, bench/RESULTS.md, "Sixth session"). Every error a connection's calls
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
#include "warp_server.cuh"  /* one warp, many connections */

/* Receive room per lane: 32 lanes of a warp receive in one request, so a
 * warp's request asks the daemon for 32 x BUF of room while it runs (within
 * the client's memory budget, client_mem_budget, for every warp at once). */
#define BUF (8u << 10)

/* Bytes each connection's poll brings (warp_server.cuh): a message up to
 * this size is echoed with a poll and a send; a larger one's rest is
 * received as before. A warp's poll answer has room for 63 of them
 * (WARP_SERVER_POLL_BYTES: 126 KiB of device memory a warp), taken on the
 * client's budget only while the poll answers, not while it waits. */
#define POLL_ROOM (2u << 10)

struct shared_state {
	struct warp_server srv;
	unsigned long long served; /* connections closed */
};

/* An echo connection needs nothing but its handle. */
struct echo_conn {
	long long h;
	bool closed;
};

static __global__ void k_listen(gpusys_dev_t dev, int port, struct shared_state *st)
{
	warp_server_listen(dev, &st->srv, port);
}

/* A lane's ready connection: what arrived, echoed. false: it is done. */
struct echo_serve {
	const gpusys_dev_t &dev;
	struct shared_state *st;
	uint8_t *buf;

	__device__ bool operator()(struct echo_conn *k, const struct warp_server_bytes &b) const
	{
		bool open = true;
		if (b.n > 0) {
			/* The bytes came with the poll: no receive. */
			long long r = gpusys_send_all(dev, k->h, b.data, (unsigned long long)b.n);
			if (r < 0) {
				warp_server_error(dev, st->srv.name, k->h, "send", r);
				open = false;
			}
		} else if (b.n == 0) {
			open = false; /* the peer closed */
		} else if (b.n != -EAGAIN) {
			warp_server_error(dev, st->srv.name, k->h, "recv (with the poll)", b.n);
			open = false;
		}
		if (open && (b.n == -EAGAIN || b.more))
			open = receive(k);
		if (!open)
			atomicAdd(&st->served, 1ull);
		return open;
	}

	/* What the poll did not bring: received and echoed. false: it is done. */
	__device__ bool receive(struct echo_conn *k) const
	{
		long long n = gpusys_recv(dev, k->h, buf, BUF, MSG_DONTWAIT); /* ready: never waits */
		bool open = true;
		if (n == 0) {
			open = false; /* the peer closed */
		} else if (n < 0 && n != -EAGAIN) {
			warp_server_error(dev, st->srv.name, k->h, "recv", n);
			open = false;
		} else if (n > 0) {
			/* A short send is not an error: gpusys_send_all sends the rest. */
			long long r = gpusys_send_all(dev, k->h, buf, (unsigned long long)n);
			if (r < 0) {
				warp_server_error(dev, st->srv.name, k->h, "send", r);
				open = false;
			}
		}
		return open;
	}
};

struct echo_opened {
	__device__ void operator()(struct echo_conn *) const {}
};

struct echo_moved {
	__device__ void operator()(struct echo_conn *, const struct echo_conn *) const {}
};

/* The connection quota (0: none) is the stop condition. */
struct echo_stop {
	volatile unsigned long long *served;
	unsigned long long quota;

	__device__ bool operator()() const { return quota && *served >= quota; }
};

static __global__ void k_echo(gpusys_dev_t dev, struct shared_state *st, unsigned long long quota,
			      warp_conns<struct echo_conn> *conns, uint8_t *bufs, uint8_t *poll_bufs)
{
	uint8_t *buf = bufs + ((size_t)blockIdx.x * 32 + (threadIdx.x & 31)) * BUF;
	uint8_t *poll_buf = poll_bufs + (size_t)blockIdx.x * WARP_SERVER_POLL_BYTES(POLL_ROOM);
	warp_server_run(dev, &st->srv, &conns[blockIdx.x], poll_buf, echo_serve{ dev, st, buf }, echo_opened{},
			echo_moved{}, echo_stop{ &st->served, quota });
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tcp_echo PORT [CONNECTIONS [WARPS [POLL_MS]]]\n");
		return 2;
	}
	int port = atoi(argv[1]);
	unsigned long long quota = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	unsigned warps = argc > 3 ? (unsigned)atoi(argv[3]) : 160;
	int poll_ms = argc > 4 ? atoi(argv[4]) : 1000;
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
	warp_conns<struct echo_conn> *conns;
	uint8_t *bufs, *poll_bufs;
	if (cudaMallocManaged(&st, sizeof(*st)) || cudaMalloc(&conns, (size_t)warps * sizeof(*conns)) ||
	    cudaMemset(conns, 0, (size_t)warps * sizeof(*conns)) || cudaMalloc(&bufs, (size_t)warps * 32 * BUF) ||
	    cudaMalloc(&poll_bufs, (size_t)warps * WARP_SERVER_POLL_BYTES(POLL_ROOM))) {
		fprintf(stderr, "tcp_echo: out of device memory\n");
		return 1;
	}
	memset(st, 0, sizeof(*st));
	snprintf(st->srv.name, sizeof(st->srv.name), "tcp_echo");
	st->srv.poll_ms = poll_ms; /* how often a quiet warp looks at the quota */
	st->srv.poll_room = POLL_ROOM;
	k_listen<<<1, 1>>>(gpusys_device(g), port, st);
	if ((rc = gpusys_synchronize(g, NULL, -1)) || st->srv.error) {
		fprintf(stderr, "tcp_echo: port %d: %s\n", port, rc ? gpusys_strerror(rc) : strerror(-st->srv.error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: serving port %d with %u warps, up to %u connections at once\n", port, warps,
		warps * WARP_SERVER_CONNS);
	k_echo<<<warps, 32>>>(gpusys_device(g), st, quota, conns, bufs, poll_bufs);
	rc = gpusys_synchronize(g, NULL, -1);
	if (rc || st->srv.error) {
		fprintf(stderr, "tcp_echo: %s\n", rc ? gpusys_strerror(rc) : strerror(-st->srv.error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: served %llu connections\n", st->served);
	gpusys_detach(g);
	return 0;
}
