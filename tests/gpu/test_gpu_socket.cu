/* SPDX-License-Identifier: MIT */
/*
 * The socket service from CUDA kernels through the real gpusysd, against
 * CPU peers on loopback: 32 lanes each with its own UDP socket at once; the
 * errors (a bad handle, a refused connection, a name under .invalid); a
 * server thread and a client thread of one kernel talking TCP; 1,000 CPU
 * clients connecting at once to one kernel server (256 warps); 64 MiB sent
 * from device memory with the block call and received back, compared.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/resource.h>

#include "gpu_test.h"
#include "gpusys/socket.cuh"

#define CONNS 1000
#define SERVER_WARPS 256
#define BULK (64ull << 20)

/* --------------------------------------------------- 32 lanes at once */

static __global__ void k_lanes(gpusys_dev_t dev, int refused_port, int *fail, long long *got)
{
	const unsigned lane = threadIdx.x;
	int step = 0;
	long long r = 0;
#define STEP(cond)                        \
	do {                              \
		step++;                   \
		if (!(cond)) {            \
			fail[lane] = step; \
			got[lane] = r;     \
			return;           \
		}                         \
	} while (0)
	fail[lane] = 0;
	long long h = r = gpusys_socket(dev, AF_INET, SOCK_DGRAM, 0);
	STEP(h > 2);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
	r = gpusys_bind(dev, h, &a, sizeof(a));
	STEP(r == 0);
	unsigned len = sizeof(a);
	r = gpusys_getsockname(dev, h, &a, &len);
	STEP(r == 0 && len == sizeof(a) && a.sin_port != 0);
	char msg[16] = "lane..", back[16];
	msg[4] = (char)('0' + lane / 10);
	msg[5] = (char)('0' + lane % 10);
	r = gpusys_sendto(dev, h, msg, 6, 0, &a, sizeof(a)); /* to itself */
	STEP(r == 6);
	struct sockaddr_in from;
	unsigned flen = sizeof(from);
	r = gpusys_recvfrom(dev, h, back, sizeof(back), 0, &from, &flen);
	STEP(r == 6 && back[4] == msg[4] && back[5] == msg[5] && from.sin_port == a.sin_port);
	r = gpusys_close(dev, h);
	STEP(r == 0);
	r = gpusys_recv(dev, h, back, sizeof(back), MSG_DONTWAIT);
	STEP(r == -EBADF);
	/* a port nobody listens on */
	long long t = r = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
	STEP(t > 2);
	a.sin_port = gpusys_htons((uint16_t)refused_port);
	r = gpusys_connect(dev, t, &a, sizeof(a));
	STEP(r == -ECONNREFUSED);
	gpusys_close(dev, t);
	struct gpusys_addrinfo ai[2];
	r = gpusys_getaddrinfo(dev, "nonexistent.invalid", "80", AF_UNSPEC, SOCK_STREAM, 0, ai, 2);
	STEP(r == EAI_NONAME);
	r = gpusys_getaddrinfo(dev, "127.0.0.1", "8080", AF_INET, SOCK_STREAM, 0, ai, 2);
	STEP(r == 1 && ai[0].family == AF_INET);
#undef STEP
}

/* ------------------------------------------- one kernel, two threads */

struct talk {
	int port;
	long long server_rc, client_rc;
	char server_got[64], client_got[64];
};

static __global__ void k_talk(gpusys_dev_t dev, struct talk *res)
{
	volatile int *port = &res->port;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
	if (threadIdx.x == 0) {
		long long l = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
		long long r = l < 0 ? l : gpusys_bind(dev, l, &a, sizeof(a));
		unsigned len = sizeof(a);
		if (r == 0)
			r = gpusys_listen(dev, l, 1);
		if (r == 0)
			r = gpusys_getsockname(dev, l, &a, &len);
		if (r < 0) {
			res->server_rc = r;
			*port = -1;
			return;
		}
		__threadfence();
		*port = gpusys_ntohs(a.sin_port);
		long long c = gpusys_accept(dev, l);
		/* 20 bytes through the poll that returns them (GPUSYS_POLL_RECV),
		 * never more than are still wanted. */
		long long n = c < 0 ? c : 0;
		uint8_t pbuf[GPUSYS_POLL_RECV_HDR(1) + 20];
		while (n >= 0 && n < 20) {
			struct gpusys_pollfd pf = { (int32_t)c, (int16_t)(POLLIN | GPUSYS_POLL_RECV), 0 };
			int len;
			unsigned off;
			int r = gpusys_poll_recv(dev, &pf, 1, 5000, pbuf, sizeof(pbuf), 20 - (unsigned)n, &len, &off);
			if (r <= 0 || (len <= 0 && len != -EAGAIN)) {
				n = r < 0 ? r : r == 0 ? -ETIMEDOUT : len < 0 ? len : -ECONNRESET;
				break;
			}
			for (int i = 0; i < len; i++)
				res->server_got[n + i] = (char)pbuf[off + i];
			n += len > 0 ? len : 0;
		}
		if (n > 0)
			n = gpusys_send(dev, c, "hello from the server", 21);
		res->server_rc = n;
		gpusys_close(dev, c);
		gpusys_close(dev, l);
	} else if (threadIdx.x == 32) {
		int p;
		while ((p = *port) == 0)
			;
		if (p < 0)
			return;
		long long c = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
		a.sin_port = gpusys_htons((uint16_t)p);
		long long r = c < 0 ? c : gpusys_connect(dev, c, &a, sizeof(a));
		if (r == 0)
			r = gpusys_send(dev, c, "hello from the client", 21) == 21 ? 20 : -EIO;
		if (r > 0)
			r = gpusys_recv(dev, c, res->client_got, 21, MSG_WAITALL);
		res->client_rc = r;
		gpusys_close(dev, c);
	}
}

/* ------------------------------------- a thousand clients, one kernel */

struct server {
	long long listener;
	int error;
	unsigned long long served;
};

static __global__ void k_listen(gpusys_dev_t dev, struct server *s)
{
	long long h = gpusys_socket(dev, AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = gpusys_htonl(0x7f000001);
	int r = h < 0 ? (int)h : gpusys_bind(dev, h, &a, sizeof(a));
	if (r == 0)
		r = gpusys_listen(dev, h, 4096);
	struct timeval tv = { 0, 200000 };
	if (r == 0)
		r = gpusys_setsockopt(dev, h, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	s->listener = h;
	s->error = r;
}

static __global__ void k_serve(gpusys_dev_t dev, struct server *s, unsigned long long quota)
{
	if (threadIdx.x != 0)
		return;
	volatile unsigned long long *served = &s->served;
	while (*served < quota) {
		long long c = gpusys_accept(dev, s->listener);
		if (c == -EAGAIN)
			continue;
		if (c < 0) {
			s->error = (int)c;
			return;
		}
		uint64_t v;
		if (gpusys_recv(dev, c, &v, 8, MSG_WAITALL) == 8)
			gpusys_send(dev, c, &v, 8);
		gpusys_close(dev, c);
		atomicAdd(&s->served, 1ull);
	}
}

static __global__ void k_getname(gpusys_dev_t d, long long h, struct sockaddr_in *p)
{
	unsigned len = sizeof(*p);
	gpusys_getsockname(d, h, p, &len);
}

struct clients {
	int port;
	unsigned ok;
};

/* CONNS CPU clients, all connected at once, in CLIENT_PROCS processes
 * (a process may be held to 1024 descriptors): each connects its share,
 * sends its index, then reads every echo. ok: how many came back right. */
#define CLIENT_PROCS 4

static unsigned client_share(int port, unsigned first, unsigned n)
{
	int *fds = (int *)malloc(n * sizeof(int));
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (unsigned i = 0; i < n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0)
			continue;
		uint64_t v = first + i;
		send(fds[i], &v, 8, MSG_NOSIGNAL);
	}
	unsigned ok = 0;
	for (unsigned i = 0; i < n; i++) {
		uint64_t v = ~0ull;
		struct timeval tv = { 20, 0 };
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (fds[i] >= 0 && recv(fds[i], &v, 8, MSG_WAITALL) == 8 && v == first + i)
			ok++;
		close(fds[i]);
	}
	free(fds);
	return ok;
}

static void *many_clients(void *arg)
{
	struct clients *cl = (struct clients *)arg;
	pid_t kids[CLIENT_PROCS];
	unsigned per = CONNS / CLIENT_PROCS;
	for (unsigned k = 0; k < CLIENT_PROCS; k++) {
		kids[k] = fork();
		if (kids[k] == 0) /* sockets only in the child: no CUDA */
			_exit((int)(per - client_share(cl->port, k * per, per)));
	}
	for (unsigned k = 0; k < CLIENT_PROCS; k++) {
		int st = 0;
		waitpid(kids[k], &st, 0);
		if (WIFEXITED(st))
			cl->ok += per - (unsigned)WEXITSTATUS(st);
	}
	return NULL;
}

/* ---------------------------------------------------------- bulk */

static __global__ void __launch_bounds__(1024, 1) k_bulk(gpusys_dev_t dev, struct server *s, uint8_t *out, uint8_t *in, long long *res)
{
	__shared__ long long c;
	if (threadIdx.x == 0) {
		c = -EAGAIN;
		while (c == -EAGAIN)
			c = gpusys_accept(dev, s->listener);
	}
	__syncthreads();
	if (c < 0) {
		res[0] = c;
		return;
	}
	long long t0 = clock64();
	long long sent = gpusys_send_block(dev, c, out, BULK);
	long long t1 = clock64();
	long long got = gpusys_recv_block(dev, c, in, BULK);
	if (threadIdx.x == 0) {
		res[0] = sent;
		res[1] = got;
		res[2] = t1 - t0;
		gpusys_close(dev, c);
	}
}

static void *bulk_peer(void *arg)
{
	int port = *(int *)arg;
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return NULL;
	struct timeval tv = { 30, 0 }; /* a kernel that never came must not hang the test */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	uint8_t *b = (uint8_t *)malloc(BULK);
	ssize_t got = recv(fd, b, BULK, MSG_WAITALL);
	if (got > 0)
		send(fd, b, (size_t)got, MSG_NOSIGNAL);
	close(fd);
	free(b);
	return NULL;
}

static __global__ void k_fill(uint8_t *p, unsigned long long n)
{
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		p[i] = (uint8_t)(i * 2654435761ull >> 13);
}

int main(void)
{
	gt_name = "test_gpu_socket";
	setvbuf(stdout, NULL, _IOLBF, 0);
	gt_require_gpu();
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		setrlimit(RLIMIT_NOFILE, &rl); /* both ends of 1000 connections; the daemon inherits it */
	}
	char work[] = "/tmp/gpusys-gpu-sock.XXXXXX";
	GT_CHECK(mkdtemp(work), "mkdtemp: %s", strerror(errno));
	char conf[PATH_MAX + 32], extra[PATH_MAX + 64];
	snprintf(conf, sizeof(conf), "%s/gpusysd.conf", work);
	FILE *f = fopen(conf, "w");
	GT_CHECK(f, "cannot write %s", conf);
	fprintf(f, "channel_bulk_bytes = 256M\nworkers = 8\n");
	fclose(f);
	snprintf(extra, sizeof(extra), "--config %s", conf);
	gt_start_daemon(extra);

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 512;
	o.bulk_bytes = 64u << 20;
	gpusys_t *g = NULL;
	int rc = gpusys_attach(&o, &g);
	GT_CHECK(rc == 0, "gpusys_attach: %s", gpusys_strerror(rc));
	gpusys_dev_t dev = gpusys_device(g);

	/* a port nobody listens on */
	int tmp = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(a);
	bind(tmp, (struct sockaddr *)&a, sizeof(a));
	getsockname(tmp, (struct sockaddr *)&a, &al);
	close(tmp);

	int *d_fail;
	long long *d_got;
	GT_CUDA(cudaMallocManaged(&d_fail, 32 * sizeof(int)));
	GT_CUDA(cudaMallocManaged(&d_got, 32 * sizeof(long long)));
	k_lanes<<<1, 32>>>(dev, ntohs(a.sin_port), d_fail, d_got);
	rc = gpusys_synchronize(g, NULL, 60000);
	GT_CHECK(rc == 0, "lanes: %s", gpusys_strerror(rc));
	for (int l = 0; l < 32; l++)
		GT_CHECK(d_fail[l] == 0, "lane %d failed at step %d (got %lld)", l, d_fail[l], d_got[l]);
	printf("32 lanes: UDP, bad handle, refused, .invalid, numeric name: ok\n");

	struct talk *t;
	GT_CUDA(cudaMallocManaged(&t, sizeof(*t)));
	memset(t, 0, sizeof(*t));
	k_talk<<<1, 64>>>(dev, t);
	rc = gpusys_synchronize(g, NULL, 60000);
	GT_CHECK(rc == 0, "talk: %s", gpusys_strerror(rc));
	printf("server thread got \"%s\"; client thread got \"%s\"\n", t->server_got, t->client_got);
	GT_CHECK(t->server_rc == 21 && t->client_rc == 21 && !strcmp(t->server_got, "hello from the clien") &&
			 !strcmp(t->client_got, "hello from the server"),
		 "talk: %lld %lld", t->server_rc, t->client_rc);

	struct server *s;
	GT_CUDA(cudaMallocManaged(&s, sizeof(*s)));
	memset(s, 0, sizeof(*s));
	k_listen<<<1, 1>>>(dev, s);
	rc = gpusys_synchronize(g, NULL, 60000);
	GT_CHECK(rc == 0 && s->error == 0, "listen: %s / %d", gpusys_strerror(rc), s->error);
	/* its port, from a one-thread kernel */
	struct clients cl = { 0, 0 };
	{
		struct sockaddr_in *d_a;
		GT_CUDA(cudaMallocManaged(&d_a, sizeof(*d_a)));
		k_getname<<<1, 1>>>(dev, s->listener, d_a);
		GT_CHECK(gpusys_synchronize(g, NULL, 60000) == 0, "getsockname kernel");
		cl.port = ntohs(d_a->sin_port);
	}
	double t0 = gt_now();
	k_serve<<<SERVER_WARPS, 32>>>(dev, s, CONNS);
	GT_CUDA(cudaGetLastError());
	pthread_t th;
	pthread_create(&th, NULL, many_clients, &cl);
	rc = gpusys_synchronize(g, NULL, 120000);
	pthread_join(th, NULL);
	double dt = gt_now() - t0;
	GT_CHECK(rc == 0 && s->error == 0, "serve: %s / %d", gpusys_strerror(rc), s->error);
	printf("%d CPU clients served by %d warps of one kernel in %.1f ms: %u echoed correctly\n", CONNS, SERVER_WARPS,
	       dt * 1e3, cl.ok);
	GT_CHECK(cl.ok == CONNS, "%u of %d clients got their echo", cl.ok, CONNS);

	uint8_t *out, *in;
	long long *res;
	GT_CUDA(cudaMalloc(&out, BULK));
	GT_CUDA(cudaMalloc(&in, BULK));
	GT_CUDA(cudaMallocManaged(&res, 3 * sizeof(long long)));
	k_fill<<<256, 256>>>(out, BULK);
	GT_CUDA(cudaMemset(in, 0, BULK));
	GT_CUDA(cudaDeviceSynchronize());
	pthread_create(&th, NULL, bulk_peer, &cl.port);
	t0 = gt_now();
	k_bulk<<<1, 1024>>>(dev, s, out, in, res);
	GT_CUDA(cudaGetLastError()); /* a block of 1024 needs the launch bounds */
	rc = gpusys_synchronize(g, NULL, 120000);
	dt = gt_now() - t0;
	pthread_join(th, NULL);
	GT_CHECK(rc == 0, "bulk: %s", gpusys_strerror(rc));
	GT_CHECK(res[0] == (long long)BULK && res[1] == (long long)BULK, "bulk: sent %lld, got back %lld", res[0], res[1]);
	uint8_t *h1 = (uint8_t *)malloc(BULK), *h2 = (uint8_t *)malloc(BULK);
	GT_CUDA(cudaMemcpy(h1, out, BULK, cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(h2, in, BULK, cudaMemcpyDeviceToHost));
	GT_CHECK(memcmp(h1, h2, BULK) == 0, "bulk: data came back different");
	int clk = 0;
	cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
	printf("64 MiB from device memory over TCP and back: ok (send part %.2f GB/s by the SM clock; both ways %.2f s)\n",
	       clk ? (double)BULK / ((double)res[2] / (clk * 1e3)) / 1e9 : 0.0, dt);
	free(h1);
	free(h2);

	gpusys_detach(g);
	gt_stop_daemon();
	printf("test_gpu_socket: ok\n");
	return 0;
}
