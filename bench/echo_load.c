/* SPDX-License-Identifier: MIT */
/*
 * echo_load HOST PORT CONNECTIONS SECONDS [THREADS [PAYLOAD]]: holds
 * CONNECTIONS TCP connections open to an echo server at once, and on each,
 * round after round, sends a payload of 1 B to 64 KiB (small ones more
 * often; or always PAYLOAD bytes, for one size's round trip) and reads it
 * back, checking every byte, for SECONDS. Prints the rounds, bytes, round
 * trip percentiles, and how many connections were dropped (closed or failed
 * by the server) and how many echoes were wrong; exits 1 if any was. The
 * load of issue 28's "1000 connections, 0 dropped, 0 wrong", for tcp_echo
 * and its CPU peer bench/echo_cpu alike.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAYLOAD (64u << 10)
#define SAMPLES (1u << 16) /* round trips kept per thread for the percentiles */

struct worker {
	unsigned id;
	uint32_t payload; /* 0: random sizes */
	int *fds;
	unsigned n;
	double until;
	unsigned long long rounds, bytes;
	unsigned dropped, wrong;
	double *rtt;
	unsigned nrtt;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t pattern(unsigned conn, unsigned long long round, uint32_t i)
{
	return (uint8_t)(conn * 131u + round * 7u + i * 13u + (i >> 8));
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint8_t *out = malloc(MAX_PAYLOAD), *in = malloc(MAX_PAYLOAD);
	char *dead = calloc(w->n, 1);
	unsigned seed = 12345u + w->id;
	if (!out || !in || !dead)
		return NULL;
	while (now_s() < w->until) {
		for (unsigned c = 0; c < w->n && now_s() < w->until; c++) {
			if (dead[c])
				continue;
			uint32_t len = w->payload ? w->payload
						  : 1u + (uint32_t)rand_r(&seed) % (rand_r(&seed) % 4 == 0 ? MAX_PAYLOAD : 512u);
			for (uint32_t i = 0; i < len; i++)
				out[i] = pattern(w->id * 100000u + c, w->rounds, i);
			double t0 = now_s();
			ssize_t s = send(w->fds[c], out, len, MSG_NOSIGNAL);
			ssize_t r = s == (ssize_t)len ? recv(w->fds[c], in, len, MSG_WAITALL) : -1;
			if (r != (ssize_t)len) {
				dead[c] = 1;
				w->dropped++;
				fprintf(stderr, "echo_load: connection %u of thread %u dropped after %llu rounds: %s\n", c,
					w->id, w->rounds, r == 0 ? "closed by the server" : strerror(errno));
				continue;
			}
			if (w->nrtt < SAMPLES)
				w->rtt[w->nrtt++] = now_s() - t0;
			if (memcmp(in, out, len))
				w->wrong++;
			w->bytes += len;
		}
		w->rounds++;
	}
	free(out);
	free(in);
	free(dead);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: echo_load HOST PORT CONNECTIONS SECONDS [THREADS [PAYLOAD]]\n");
		return 2;
	}
	long payload = argc > 6 ? atol(argv[6]) : 0;
	if (payload < 0 || payload > (long)MAX_PAYLOAD) {
		fprintf(stderr, "echo_load: PAYLOAD: 1 to %u bytes (0: random sizes)\n", MAX_PAYLOAD);
		return 2;
	}
	unsigned conns = (unsigned)atoi(argv[3]), threads = argc > 5 ? (unsigned)atoi(argv[5]) : 8;
	double secs = atof(argv[4]);
	if (!conns || !threads || threads > conns) {
		fprintf(stderr, "echo_load: CONNECTIONS >= THREADS >= 1\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
		fprintf(stderr, "echo_load: %s: not an IPv4 address\n", argv[1]);
		return 2;
	}
	int *fds = calloc(conns, sizeof(*fds));
	for (unsigned i = 0; i < conns; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int one = 1;
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct timeval tv = { .tv_sec = 10 };
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fds[i], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0) {
			fprintf(stderr, "echo_load: connection %u: %s\n", i, strerror(errno));
			return 1;
		}
	}
	struct worker *w = calloc(threads, sizeof(*w));
	pthread_t *t = calloc(threads, sizeof(*t));
	double t0 = now_s();
	unsigned per = conns / threads;
	for (unsigned k = 0; k < threads; k++) {
		unsigned from = k * per, n = k + 1 == threads ? conns - from : per;
		w[k] = (struct worker){ .id = k, .payload = (uint32_t)payload, .fds = fds + from, .n = n, .until = t0 + secs,
					.rtt = malloc(SAMPLES * sizeof(double)) };
		pthread_create(&t[k], NULL, run, &w[k]);
	}
	unsigned long long rounds = 0, bytes = 0, echoes = 0;
	unsigned dropped = 0, wrong = 0, nrtt = 0;
	double *all = malloc((size_t)threads * SAMPLES * sizeof(double));
	for (unsigned k = 0; k < threads; k++) {
		pthread_join(t[k], NULL);
		rounds += w[k].rounds;
		bytes += w[k].bytes;
		dropped += w[k].dropped;
		wrong += w[k].wrong;
		memcpy(all + nrtt, w[k].rtt, w[k].nrtt * sizeof(double));
		nrtt += w[k].nrtt;
		echoes += w[k].nrtt;
	}
	double el = now_s() - t0;
	qsort(all, nrtt, sizeof(double), cmp_double);
	printf("echo_load: %u connections held %.1f s: %llu bytes each way (%.1f MB/s), round trip p50 %.1f us p99 "
	       "%.1f us (%u sampled), %u dropped, %u wrong\n",
	       conns, el, bytes, (double)bytes / el / 1e6, nrtt ? all[nrtt / 2] * 1e6 : 0,
	       nrtt ? all[(size_t)(nrtt * 0.99)] * 1e6 : 0, nrtt, dropped, wrong);
	(void)rounds;
	(void)echoes;
	for (unsigned i = 0; i < conns; i++)
		close(fds[i]);
	return dropped || wrong ? 1 : 0;
}
