/* SPDX-License-Identifier: MIT */
/*
 * callback_tcp: the first test of the GPU-to-CPU callbacks paper. One
 * kernel, two threads in different warps: thread 0 is a TCP server
 * (socket, bind to 127.0.0.1 on a port the system picks, listen, accept,
 * recv, send a reply), thread 32 a TCP client (connect to that port, send a
 * greeting, recv the reply). Each prints what it got. Needs a running
 * gpusysd.
 */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

struct result {
	int port;            /* published by the server when it listens (0: not yet, < 0: failed) */
	long long server_rc, client_rc;
	char server_got[64], client_got[64];
	char server_call[24], client_call[24]; /* the call that failed, if one did */
};

static __device__ void failed_at(char *dst, const char *call)
{
	unsigned i = 0;
	for (; call[i] && i < 23; i++)
		dst[i] = call[i];
	dst[i] = 0;
}

static __global__ void k_callback_tcp(gpusys_dev_t dev, struct result *res)
{
	volatile int *port = &res->port;
	if (threadIdx.x == 0) {
		/* the server */
		long long l = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a;
		memset(&a, 0, sizeof(a));
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
		long long r = l < 0 ? l : gpusys_bind(dev, l, &a, sizeof(a));
		if (r == 0)
			r = gpusys_listen(dev, l, 1);
		unsigned len = sizeof(a);
		if (r == 0)
			r = gpusys_getsockname(dev, l, &a, &len);
		if (r < 0) {
			failed_at(res->server_call, "socket/bind/listen");
			res->server_rc = r;
			*port = -1;
			return;
		}
		__threadfence();
		*port = gpusys_ntohs(a.sin_port);
		long long c = gpusys_accept(dev, l);
		if (c < 0)
			failed_at(res->server_call, "accept");
		long long n = c < 0 ? c : gpusys_recv(dev, c, res->server_got, sizeof(res->server_got) - 1);
		if (c >= 0 && n < 0)
			failed_at(res->server_call, "recv");
		if (n > 0) {
			/* a short send is not an error: gpusys_send_all sends the rest */
			const char reply[] = "hello from the server thread";
			n = gpusys_send_all(dev, c, reply, sizeof(reply) - 1);
			if (n < 0)
				failed_at(res->server_call, "send");
		}
		res->server_rc = n;
		gpusys_close(dev, c);
		gpusys_close(dev, l);
	} else if (threadIdx.x == 32) {
		/* the client, in another warp */
		int p;
		while ((p = *port) == 0)
			;
		if (p < 0)
			return;
		long long c = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a;
		memset(&a, 0, sizeof(a));
		a.sin_family = AF_INET;
		a.sin_port = gpusys_htons((uint16_t)p);
		a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
		long long r = c < 0 ? c : gpusys_connect(dev, c, &a, sizeof(a));
		if (r < 0)
			failed_at(res->client_call, c < 0 ? "socket" : "connect");
		if (r == 0) {
			const char hello[] = "hello from the client thread";
			r = gpusys_send_all(dev, c, hello, sizeof(hello) - 1);
			if (r < 0)
				failed_at(res->client_call, "send");
		}
		if (r > 0) {
			r = gpusys_recv(dev, c, res->client_got, sizeof(res->client_got) - 1, MSG_WAITALL);
			if (r < 0)
				failed_at(res->client_call, "recv");
		}
		res->client_rc = r;
		gpusys_close(dev, c);
	}
}

int main(void)
{
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 8;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "callback_tcp: %s\n", gpusys_last_error());
		return 1;
	}
	struct result *res;
	if (cudaMallocManaged(&res, sizeof(*res))) {
		fprintf(stderr, "callback_tcp: out of memory\n");
		return 1;
	}
	memset(res, 0, sizeof(*res));
	k_callback_tcp<<<1, 64>>>(gpusys_device(g), res);
	rc = gpusys_synchronize(g, NULL, 30000);
	if (rc) {
		fprintf(stderr, "callback_tcp: %s\n", gpusys_strerror(rc));
		return 1;
	}
	printf("server thread got: \"%s\" (%lld)\n", res->server_got, res->server_rc);
	printf("client thread got: \"%s\" (%lld)\n", res->client_got, res->client_rc);
	/* every error with its errno */
	if (res->server_rc < 0)
		fprintf(stderr, "callback_tcp: server thread: %s: %s (errno %lld)\n", res->server_call,
			strerror((int)-res->server_rc), -res->server_rc);
	if (res->client_rc < 0)
		fprintf(stderr, "callback_tcp: client thread: %s: %s (errno %lld)\n", res->client_call,
			strerror((int)-res->client_rc), -res->client_rc);
	gpusys_detach(g);
	return res->server_rc > 0 && res->client_rc > 0 ? 0 : 1;
}
