/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench sys --emulate: what one call that does system calls costs
 * through the real gpusysd, from one emulated warp, against the same system
 * calls made in this process: readfile of a small file (one lane and 32),
 * send and recv of an HTTP-sized message on a loopback TCP connection, a
 * poll that brings the bytes (GPUSYS_POLL_RECV), and a warp's 32 sends as
 * one call.
 *
 * Why: at 100 connections gpu_httpd is bound by the pollers' CPU per request
 * (bench/RESULTS.md, "Fourteenth session"), and each request is a poll, a
 * readfile and a send. The difference between a row and its floor is what
 * gpusysd adds to the system calls themselves: the round trip through the
 * channel and its own steps (path resolution, handle lookups, the answer).
 * On a machine with few cores the pollers' spinning shares them with this
 * thread, so compare rows of one run, not across machines.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "gpusys/emulator/file.h"
#include "gpusys/emulator/socket.h"

#define L GPUSYS_WARP_LANES
#define REQUEST 100u  /* bytes: an HTTP request head */
#define RESPONSE 150u /* bytes: a head and a small body */
#define FILE_TEXT "hello\n"

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench sys --emulate [--iters N] [--dir DIR]\n"
			"                        [--daemon PATH | --runtime-dir DIR]\n");
}

struct conn {
	int listener, peer;   /* this process's ends */
	int64_t handle;       /* gpusysd's end, the client's handle */
	int a, b;             /* a connected pair of this process's own: the floor */
};

static int tcp_listener(struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof(*sa);
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || bind(fd, (struct sockaddr *)sa, sizeof(*sa)) < 0 || listen(fd, 4) < 0 ||
	    getsockname(fd, (struct sockaddr *)sa, &len) < 0)
		return -1;
	return fd;
}

static void no_delay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int conn_open(const gpusys_dev_t *dev, struct conn *c)
{
	struct sockaddr_in sa;
	c->listener = tcp_listener(&sa);
	if (c->listener < 0)
		return -1;
	c->handle = gpusys_emu_socket(dev, AF_INET, SOCK_STREAM, 0);
	if (c->handle < 0 || gpusys_emu_connect(dev, c->handle, &sa, sizeof(sa)) < 0)
		return -1;
	c->peer = accept4(c->listener, NULL, NULL, SOCK_CLOEXEC);
	c->a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->peer < 0 || c->a < 0 || connect(c->a, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	c->b = accept4(c->listener, NULL, NULL, SOCK_CLOEXEC);
	if (c->b < 0)
		return -1;
	int one = 1;
	int64_t r = gpusys_emu_setsockopt(dev, c->handle, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	no_delay(c->peer);
	no_delay(c->a);
	no_delay(c->b);
	return r < 0 ? -1 : 0;
}

/* Read exactly n bytes from fd (this process's end), into buf (4 KiB),
 * over and over. */
static int drain(int fd, uint8_t *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		size_t want = n - got < 4096 ? n - got : 4096;
		ssize_t k = recv(fd, buf, want, 0);
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* One row: ns per iteration through gpusysd and for the floor, best of 3. */
struct row {
	const char *what, *floor_what;
	double ns, floor_ns;
};

static void print_row(const struct row *r)
{
	printf("%-46s %9.2f   %-34s %9.2f   %5.2fx\n", r->what, r->ns / 1000.0, r->floor_what, r->floor_ns / 1000.0,
	       r->ns / r->floor_ns);
}

static double best(double a, double b)
{
	return a == 0 || b < a ? b : a;
}

int bench_sys_emulated(int argc, char **argv)
{
	unsigned iters = 20000;
	const char *dir = NULL, *daemon = NULL, *runtime_dir = NULL;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' },        { "iters", required_argument, NULL, 'n' },
		{ "dir", required_argument, NULL, 'D' },      { "daemon", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' }, { NULL, 0, NULL, 0 },
	};
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 'n': iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'D': dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'r': runtime_dir = optarg; break;
		default: usage(); return 2;
		}
	}
	if (iters < 32) {
		usage();
		return 2;
	}
	if (!dir)
		dir = "/tmp";
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/gpusys-bench-sys.%d", dir, (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, FILE_TEXT, strlen(FILE_TEXT)) != (ssize_t)strlen(FILE_TEXT)) {
		fprintf(stderr, "gpusys-bench: %s: %s\n", path, strerror(errno));
		return 1;
	}
	close(fd);

	int ret = 1;
	struct bench_daemon bd = { .config = "stats = 0\n" };
	gpusys_t *client = NULL;
	struct gpusys_emu *emu = NULL;
	struct conn c = { .listener = -1, .peer = -1, .a = -1, .b = -1 };
	static uint8_t buf[L][4096], msg[4096];
	memset(msg, 'x', sizeof(msg));
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		goto out;
	struct gpusys_options ao = { .runtime_dir = runtime_dir, .num_ports = 4,
				     .flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO };
	if (bench_emu_attach(&ao, &client, &emu))
		goto out;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	gpusys_emu_set_warp(0);
	if (conn_open(dev, &c) < 0) {
		fprintf(stderr, "gpusys-bench: a loopback connection through gpusysd: %s\n", strerror(errno));
		goto out;
	}

	const char *paths[L];
	void *bufs[L];
	uint32_t counts[L];
	int64_t rets[L] = { 0 };
	for (unsigned l = 0; l < L; l++) {
		paths[l] = path;
		bufs[l] = buf[l];
		counts[l] = sizeof(buf[l]);
	}
	struct gpusys_emu_sock_lane sends[L];
	memset(sends, 0, sizeof(sends));
	for (unsigned l = 0; l < L; l++) {
		sends[l].q.handle = (int32_t)c.handle;
		sends[l].body = msg;
		sends[l].body_len = RESPONSE;
	}
	struct row rows[6] = {
		{ "readfile 6 B, 1 lane", "open+fstat+read+close", 0, 0 },
		{ "readfile 6 B, 32 lanes (per lane)", "open+fstat+read+close", 0, 0 },
		{ "send 150 B (+ this process's recv)", "send + recv", 0, 0 },
		{ "recv 100 B (+ this process's send)", "send + recv", 0, 0 },
		{ "poll_recv 100 B (+ this process's send)", "send + poll + recv", 0, 0 },
		{ "send 150 B, 32 lanes (per lane)", "32 sends, then recv", 0, 0 },
	};
	for (int round = 0; round < 3; round++) {
		uint64_t t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++)
			if (gpusys_emu_file_readfile(dev, 1, paths, bufs, counts, rets) < 0 || rets[0] != 6)
				goto failed;
		rows[0].ns = best(rows[0].ns, (double)(bench_now_ns() - t0) / iters);
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters / 32; i++)
			if (gpusys_emu_file_readfile(dev, UINT32_MAX, paths, bufs, counts, rets) < 0 || rets[31] != 6)
				goto failed;
		rows[1].ns = best(rows[1].ns, (double)(bench_now_ns() - t0) / (iters / 32 * 32));
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++) {
			int f = open(path, O_RDONLY | O_CLOEXEC);
			struct stat st;
			if (f < 0 || fstat(f, &st) < 0 || read(f, buf[0], sizeof(buf[0])) != 6)
				goto failed;
			close(f);
		}
		rows[0].floor_ns = rows[1].floor_ns = best(rows[0].floor_ns, (double)(bench_now_ns() - t0) / iters);

		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++)
			if (gpusys_emu_send(dev, c.handle, msg, RESPONSE, 0) != RESPONSE || drain(c.peer, buf[0], RESPONSE))
				goto failed;
		rows[2].ns = best(rows[2].ns, (double)(bench_now_ns() - t0) / iters);
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++)
			if (send(c.peer, msg, REQUEST, MSG_NOSIGNAL) != REQUEST ||
			    gpusys_emu_recv(dev, c.handle, buf[0], sizeof(buf[0]), 0) != REQUEST)
				goto failed;
		rows[3].ns = best(rows[3].ns, (double)(bench_now_ns() - t0) / iters);
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++)
			if (send(c.a, msg, RESPONSE, MSG_NOSIGNAL) != RESPONSE || drain(c.b, buf[0], RESPONSE))
				goto failed;
		rows[2].floor_ns = rows[3].floor_ns = best(rows[2].floor_ns, (double)(bench_now_ns() - t0) / iters);

		static uint8_t pbuf[GPUSYS_POLL_RECV_HDR(1) + 1024];
		int32_t lens[1];
		uint32_t offs[1];
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++) {
			struct gpusys_pollfd pf = { .handle = (int32_t)c.handle, .events = POLLIN | GPUSYS_POLL_RECV };
			if (send(c.peer, msg, REQUEST, MSG_NOSIGNAL) != REQUEST ||
			    gpusys_emu_poll_recv(dev, &pf, 1, 1000, pbuf, sizeof(pbuf), 1024, lens, offs) != 1 ||
			    lens[0] != REQUEST)
				goto failed;
		}
		rows[4].ns = best(rows[4].ns, (double)(bench_now_ns() - t0) / iters);
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters; i++) {
			struct pollfd pf = { .fd = c.b, .events = POLLIN };
			if (send(c.a, msg, REQUEST, MSG_NOSIGNAL) != REQUEST || poll(&pf, 1, 1000) != 1 ||
			    recv(c.b, buf[0], sizeof(buf[0]), 0) != REQUEST)
				goto failed;
		}
		rows[4].floor_ns = best(rows[4].floor_ns, (double)(bench_now_ns() - t0) / iters);

		/* A warp's sends on one connection, as a 32-lane call: what a
		 * lane costs when the call's lanes share its steps. */
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters / 32; i++) {
			if (gpusys_emu_sock_call(dev, GPUSYS_OP_SOCK_SEND, UINT32_MAX, sends) != 0)
				goto failed;
			for (unsigned l = 0; l < L; l++)
				if (sends[l].ret != RESPONSE)
					goto failed;
			if (drain(c.peer, buf[0], (size_t)L * RESPONSE))
				goto failed;
		}
		rows[5].ns = best(rows[5].ns, (double)(bench_now_ns() - t0) / (iters / 32 * 32));
		t0 = bench_now_ns();
		for (unsigned i = 0; i < iters / 32; i++) {
			for (unsigned l = 0; l < L; l++)
				if (send(c.a, msg, RESPONSE, MSG_NOSIGNAL) != RESPONSE)
					goto failed;
			if (drain(c.b, buf[0], (size_t)L * RESPONSE))
				goto failed;
		}
		rows[5].floor_ns = best(rows[5].floor_ns, (double)(bench_now_ns() - t0) / (iters / 32 * 32));
	}
	printf("gpusys-bench sys --emulate: one emulated warp, %u calls a row, best of 3 rounds; file in %s\n\n", iters,
	       dir);
	printf("%-46s %9s   %-34s %9s   %6s\n", "through gpusysd", "us", "the same system calls here", "us", "ratio");
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		print_row(&rows[i]);
	ret = 0;
	goto out;
failed:
	fprintf(stderr, "gpusys-bench: a call failed or answered wrong (readfile %lld)\n", (long long)rets[0]);
out:
	int fds[] = { c.listener, c.peer, c.a, c.b };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	bench_emu_detach(client, emu);
	bench_daemon_stop(&bd);
	unlink(path);
	return ret;
}
