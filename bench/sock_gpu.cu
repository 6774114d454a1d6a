/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench-sock [ROUNDS [BULK_MIB]]: sockets from a kernel against
 * their CPU peers, in one run, over loopback. Needs a running gpusysd
 * ($GPUSYS_RUNTIME_DIR) with channel_bulk_bytes >= 64M.
 *
 *  1. TCP echo round trip, 64 bytes: a kernel thread sends and waits for
 *     the echo from a CPU echo server (another process); the peer: a CPU
 *     client process against the same server. p50/p99/min per round trip.
 *  2. Bulk TCP from device memory: one block sends BULK_MIB MiB of device
 *     memory with gpusys_send_block to a CPU receiver (another process);
 *     the peer: cudaMemcpy to pageable memory, then send() (what programs
 *     do today), to the same receiver. GB/s, until the receiver has all.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"
#include "gpusys/socket.cuh"

#define MSG 64

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int listen_any(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t l = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0)
		return -1;
	getsockname(fd, (struct sockaddr *)&a, &l);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A CPU echo server process: each connection in turn, until killed. */
static pid_t echo_server(int lfd)
{
	pid_t p = fork();
	if (p)
		return p;
	char b[4096];
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		int one = 1;
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ssize_t n;
		while ((n = recv(c, b, sizeof(b), 0)) > 0)
			send(c, b, (size_t)n, MSG_NOSIGNAL);
		close(c);
	}
}

/* A CPU sink process: reads each connection to its end, then answers one
 * byte (the sender's clock stops there). */
static pid_t sink_server(int lfd)
{
	pid_t p = fork();
	if (p)
		return p;
	char *b = (char *)malloc(4 << 20);
	for (;;) {
		int c = accept(lfd, NULL, NULL);
		while (recv(c, b, 4 << 20, 0) > 0)
			;
		send(c, "k", 1, MSG_NOSIGNAL);
		close(c);
	}
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *who, double *us, int n)
{
	qsort(us, (size_t)n, sizeof(double), cmp_d);
	printf("| %s | %.2f us | %.2f us | %.2f us |\n", who, us[n / 2], us[n * 99 / 100], us[0]);
}

static __global__ void k_echo(gpusys_dev_t dev, int port, int rounds, unsigned long long *t, long long *rc)
{
	long long c = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = gpusys_htons((uint16_t)port);
	a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
	int one = 1;
	gpusys_setsockopt(dev, c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	long long r = gpusys_connect(dev, c, &a, sizeof(a));
	uint8_t msg[MSG], back[MSG];
	for (int i = 0; i < MSG; i++)
		msg[i] = (uint8_t)i;
	for (int i = 0; r == 0 && i <= rounds; i++) {
		unsigned long long t0;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
		if (gpusys_send(dev, c, msg, MSG) != MSG || gpusys_recv(dev, c, back, MSG, MSG_WAITALL) != MSG)
			r = -EIO;
		unsigned long long t1;
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
		t[i] = t1 - t0;
	}
	gpusys_close(dev, c);
	*rc = r;
}

static __global__ void __launch_bounds__(1024, 1) k_bulk(gpusys_dev_t dev, int port, const uint8_t *src, unsigned long long n, long long *rc)
{
	__shared__ long long c;
	if (threadIdx.x == 0) {
		c = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a;
		memset(&a, 0, sizeof(a));
		a.sin_family = AF_INET;
		a.sin_port = gpusys_htons((uint16_t)port);
		a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
		long long r = gpusys_connect(dev, c, &a, sizeof(a));
		if (r < 0)
			c = r;
	}
	__syncthreads();
	if (c < 0) {
		*rc = c;
		return;
	}
	long long sent = gpusys_send_block(dev, c, src, n);
	if (threadIdx.x == 0) {
		char k;
		gpusys_shutdown(dev, c, SHUT_WR);
		if (gpusys_recv(dev, c, &k, 1) != 1 && sent >= 0)
			sent = -EIO;
		gpusys_close(dev, c);
		*rc = sent;
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20000;
	unsigned long long bulk = (argc > 2 ? strtoull(argv[2], NULL, 10) : 1024ull) << 20;
	signal(SIGPIPE, SIG_IGN);
	int eport, sport;
	int efd = listen_any(&eport), sfd = listen_any(&sport);
	pid_t es = echo_server(efd), ss = sink_server(sfd);
	double *us = (double *)malloc(sizeof(double) * (size_t)(rounds + 1));

	/* CPU peer first, before this process touches CUDA. */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)eport);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		return 1;
	}
	char msg[MSG], back[MSG];
	memset(msg, 7, sizeof(msg));
	for (int i = 0; i <= rounds; i++) {
		double t0 = now();
		send(c, msg, MSG, 0);
		recv(c, back, MSG, MSG_WAITALL);
		us[i] = (now() - t0) * 1e6;
	}
	close(c);
	printf("TCP echo, 64 B, loopback, %d round trips\n\n| client | p50 | p99 | min |\n|---|---|---|---|\n", rounds);
	report("CPU process <-> CPU echo process", us + 1, rounds);

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 64;
	o.bulk_bytes = 64u << 20;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "cannot attach: %s\n", gpusys_last_error());
		return 1;
	}
	unsigned long long *t;
	long long *krc;
	cudaMallocManaged(&t, sizeof(*t) * (size_t)(rounds + 1));
	cudaMallocManaged(&krc, sizeof(*krc));
	k_echo<<<1, 1>>>(gpusys_device(g), eport, rounds, t, krc);
	rc = gpusys_synchronize(g, NULL, -1);
	if (rc || *krc) {
		fprintf(stderr, "echo kernel: %s / %lld\n", gpusys_strerror(rc), *krc);
		return 1;
	}
	for (int i = 0; i <= rounds; i++)
		us[i] = t[i] / 1e3;
	report("kernel thread <-> CPU echo process", us + 1, rounds);

	/* Bulk */
	uint8_t *src, *host = (uint8_t *)malloc(bulk);
	cudaMalloc(&src, bulk);
	cudaMemset(src, 0x5a, bulk);
	memset(host, 1, bulk); /* pageable and touched, as a program's buffer is */
	cudaDeviceSynchronize();
	printf("\nBulk TCP from device memory, %llu MiB, loopback, to a CPU receiver process\n\n| sender | GB/s | s |\n|---|---|---|\n",
	       bulk >> 20);
	for (int rep = 0; rep < 2; rep++) {
		double t0 = now();
		k_bulk<<<1, 1024>>>(gpusys_device(g), sport, src, bulk, krc);
		rc = gpusys_synchronize(g, NULL, -1);
		double dt = now() - t0;
		if (rc || *krc != (long long)bulk) {
			fprintf(stderr, "bulk kernel: %s / %lld\n", gpusys_strerror(rc), *krc);
			return 1;
		}
		printf("| kernel, gpusys_send_block (1 block of 1024) | %.2f | %.3f |\n", bulk / dt / 1e9, dt);

		t0 = now();
		cudaMemcpy(host, src, bulk, cudaMemcpyDeviceToHost);
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		a.sin_port = htons((uint16_t)sport);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
			perror("connect");
			return 1;
		}
		unsigned long long done = 0;
		while (done < bulk) {
			ssize_t r = send(s, host + done, bulk - done, 0);
			if (r <= 0)
				break;
			done += (unsigned long long)r;
		}
		shutdown(s, SHUT_WR);
		char k;
		recv(s, &k, 1, 0);
		close(s);
		dt = now() - t0;
		printf("| CPU: cudaMemcpy to pageable, then send() | %.2f | %.3f |\n", bulk / dt / 1e9, dt);
	}
	gpusys_detach(g);
	kill(es, SIGKILL);
	kill(ss, SIGKILL);
	waitpid(es, NULL, 0);
	waitpid(ss, NULL, 0);
	return 0;
}
