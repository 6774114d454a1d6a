/* SPDX-License-Identifier: MIT */
/*
 * tcp_echo PORT [CONNECTIONS [WARPS]]: a kernel serves TCP echo on PORT
 * (all addresses, IPv4). Each warp's first lane accepts a connection and
 * echoes what it receives until the peer closes, then accepts the next; the
 * warps serve their connections at once. With CONNECTIONS > 0 the kernel
 * ends after serving that many (accepts wake every 200 ms to look); 0 serves
 * until the program is killed. Needs a running gpusysd.
 *
 *   $ tcp_echo 7777 &
 *   $ echo hello | socat - TCP:127.0.0.1:7777     (or any TCP client)
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"
#include "gpusys/print.cuh"
#include "gpusys/socket.cuh"

#define BUF (64u << 10)

struct shared_state {
	long long listener;
	unsigned long long served;
	int error;
};

static __global__ void k_listen(gpusys_dev_t dev, int port, struct shared_state *st)
{
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
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
		r = gpusys_listen(dev, h, 1024);
	/* accepts give up every 200 ms so that a kernel with a quota ends */
	struct timeval tv = { 0, 200000 };
	if (r == 0)
		r = gpusys_setsockopt(dev, h, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
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

static __global__ void k_echo(gpusys_dev_t dev, struct shared_state *st, unsigned long long quota, uint8_t *bufs)
{
	if (threadIdx.x != 0)
		return;
	uint8_t *buf = bufs + (size_t)blockIdx.x * BUF;
	volatile unsigned long long *served = &st->served;
	while (quota == 0 || *served < quota) {
		long long c = gpusys_accept(dev, st->listener);
		if (c == -EAGAIN)
			continue; /* nobody within 200 ms: look at the quota again */
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
			continue;
		}
		for (;;) {
			long long n = gpusys_recv(dev, c, buf, BUF);
			if (n == 0)
				break; /* the peer closed */
			if (n < 0) {
				echo_error(dev, c, "recv", n);
				break;
			}
			/* A short send is not an error: gpusys_send_all sends the rest. */
			long long w = gpusys_send_all(dev, c, buf, (unsigned long long)n);
			if (w < 0) {
				echo_error(dev, c, "send", w);
				break;
			}
		}
		long long r = gpusys_close(dev, c);
		if (r < 0)
			echo_error(dev, c, "close", r);
		atomicAdd(&st->served, 1ull);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tcp_echo PORT [CONNECTIONS [WARPS]]\n");
		return 2;
	}
	int port = atoi(argv[1]);
	unsigned long long quota = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	unsigned warps = argc > 3 ? (unsigned)atoi(argv[3]) : 32;
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
	uint8_t *bufs;
	if (cudaMallocManaged(&st, sizeof(*st)) || cudaMalloc(&bufs, (size_t)warps * BUF)) {
		fprintf(stderr, "tcp_echo: out of device memory\n");
		return 1;
	}
	memset(st, 0, sizeof(*st));
	k_listen<<<1, 1>>>(gpusys_device(g), port, st);
	if ((rc = gpusys_synchronize(g, NULL, -1)) || st->error) {
		fprintf(stderr, "tcp_echo: port %d: %s\n", port, rc ? gpusys_strerror(rc) : strerror(-st->error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: serving port %d with %u warps\n", port, warps);
	k_echo<<<warps, 32>>>(gpusys_device(g), st, quota, bufs);
	rc = gpusys_synchronize(g, NULL, -1);
	if (rc || st->error) {
		fprintf(stderr, "tcp_echo: %s\n", rc ? gpusys_strerror(rc) : strerror(-st->error));
		return 1;
	}
	fprintf(stderr, "tcp_echo: served %llu connections\n", st->served);
	gpusys_detach(g);
	return 0;
}
