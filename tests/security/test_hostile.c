/* SPDX-License-Identifier: MIT */
/*
 * Hostile clients at scale against the real gpusysd (issue 16):
 *
 *  - test_scribbler_vs_honest: one client scribbles its own channel for at
 *    least 10^4 rounds (random bytes, absurd lengths, unaligned lanes,
 *    flipped sequence words, random opcodes, its header) while an honest
 *    client completes 10^5 ECHO calls, each answer checked byte for byte;
 *    the honest client's rate with the scribbler is compared with its rate
 *    alone (fairness: at least half on a machine of 8 cores or more; on
 *    fewer the two clients, the daemon's pollers and the scribbler share
 *    too few cores for the figure to mean anything, so it is printed only).
 *  - test_thousand_kills: 1000 clients SIGKILLed at random moments (before,
 *    during and after their attach, mid-call, with a file open); then the
 *    daemon's descriptors are back to their count before, and its resident
 *    memory within 32 MiB of it (from /proc).
 *
 * The scribbler is a child process; as root it runs as nobody (65534), so
 * random file and socket requests act with nobody's rights.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/alloc.h"
#include "gpusys/emulator.h"
#include "gpusys/socket.h"
#include "libclient/attach/client.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES
#define HONEST_CALLS 100000
#define ALONE_CALLS 20000
#define SCRIBBLE_ROUNDS 10000
#define KILLS 1000
#define KILL_BATCH 8

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64* */
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* ------------------------------------------------------ the honest client */

struct honest {
	const char *runtime;
	long calls;
	long wrong;
	int err;
	double secs;
};

/* calls ECHOs of 1-4 lanes with 0-200 bytes each (inline and streamed),
 * every answer checked. */
static void honest_run(struct honest *h, long calls)
{
	struct gpusys_attach_opts o = { .runtime_dir = h->runtime, .num_ports = 4, .cuda_device = -1 };
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	h->err = gpusys_client_attach(&o, &c);
	if (h->err)
		return;
	h->err = gpusys_emu_open(gpusys_client_channel(c), &emu);
	if (h->err) {
		gpusys_client_detach(c);
		return;
	}
	gpusys_emu_set_warp(0);
	static uint8_t in[L][200], out[L][200];
	const void *ins[L];
	void *outs[L];
	uint32_t len[L], cap[L], got[L];
	int32_t st[L];
	uint64_t s = 0x1234567 + (uint64_t)calls;
	double t0 = now_s();
	for (long i = 0; i < calls; i++) {
		uint64_t r = rnd(&s);
		unsigned lanes = 1 + (unsigned)(r % 4);
		uint64_t mask = (1ull << lanes) - 1;
		for (unsigned l = 0; l < L; l++) {
			len[l] = l < lanes ? (uint32_t)(rnd(&s) % 201) : 0;
			cap[l] = 200;
			for (uint32_t b = 0; b < len[l]; b++)
				in[l][b] = (uint8_t)(r >> (b % 56)) ^ (uint8_t)b ^ (uint8_t)l;
			ins[l] = in[l];
			outs[l] = out[l];
			got[l] = ~0u;
		}
		int rc = gpusys_emu_echo(gpusys_emu_dev(emu), mask, ins, len, outs, cap, got, st);
		if (rc) {
			h->err = rc;
			break;
		}
		for (unsigned l = 0; l < lanes; l++)
			if (st[l] || got[l] != len[l] || memcmp(in[l], out[l], len[l]) != 0) {
				h->wrong++;
				break;
			}
		h->calls++;
	}
	h->secs = now_s() - t0;
	gpusys_emu_close(emu);
	gpusys_client_detach(c);
}

static void *honest_main(void *arg)
{
	struct honest *h = arg;
	honest_run(h, HONEST_CALLS);
	return NULL;
}

/* ------------------------------------------------------- the scribbler */

struct scribble_shared {
	atomic_long rounds;
	atomic_int stop;
	atomic_int attached;
	atomic_int failed;
};

static const uint16_t some_ops[] = {
	GPUSYS_OP_INVALID, GPUSYS_OP_NOOP, GPUSYS_OP_ECHO, GPUSYS_OP_SLEEP, GPUSYS_OP_PRINT, GPUSYS_OP_PRINT_FLUSH,
	GPUSYS_OP_FILE_FIRST, GPUSYS_OP_FILE_FIRST + 1, GPUSYS_OP_FILE_FIRST + 3, GPUSYS_OP_FILE_BULK_PREAD,
	GPUSYS_OP_SOCK_FIRST, GPUSYS_OP_SOCK_FIRST + 2, GPUSYS_OP_SOCK_BULK_SEND, GPUSYS_OP_ALLOC_MALLOC,
	GPUSYS_OP_ALLOC_FREE, GPUSYS_OP_ALLOC_STAT, GPUSYS_OP_SYSTEM_LAST, GPUSYS_OP_USER_FIRST,
};

static uint16_t any_op(uint64_t r)
{
	if (r & 1)
		return (uint16_t)(r >> 8); /* anything at all */
	return some_ops[(r >> 8) % (sizeof(some_ops) / sizeof(some_ops[0]))];
}

/* One round: one of seven ways to scribble, over every port, then ring. */
static void scribble_round(const gpusys_dev_t *dev, int wake_fd, uint64_t *s, long round)
{
	uint32_t n = dev->num_ports;
	for (uint32_t p = 0; p < n; p++) {
		struct gpusys_port *port = &dev->ports[p];
		uint64_t r = rnd(s);
		uint64_t w = dev->client_word[p];
		switch (round % 7) {
		case 0: /* random bytes over the port */
			for (size_t i = 0; i < sizeof(*port) / 8; i++)
				((uint64_t *)port)[i] = rnd(s);
			break;
		case 1: /* absurd lengths */
			for (unsigned l = 0; l < L; l++) {
				static const uint32_t absurd[] = { 0xffffffffu, GPUSYS_MAX_LANE_PAYLOAD + 1, 0x80000000u,
								   GPUSYS_MAX_LANE_PAYLOAD, 65, 1u << 30 };
				port->len[l] = absurd[rnd(s) % 6];
				port->aux[l] = absurd[rnd(s) % 6];
				/* heads that name the next request, with any
				 * length (4 bits: up to 15) and capacity */
				port->heads[l].aux = absurd[rnd(s) % 6];
				port->heads[l].tag = gpusys_head_tag(GPUSYS_WORD_SEQ(w) + 1, GPUSYS_HEAD_REQUEST,
								     (uint32_t)rnd(s));
			}
			break;
		case 2: /* unaligned lanes: odd lengths, sparse masks */
			for (unsigned l = 0; l < L; l++) {
				port->len[l] = (uint32_t)(rnd(s) % 97) | 1u;
				port->aux[l] = (uint32_t)(rnd(s) % 131);
			}
			break;
		case 3: /* flip the sequence without a request behind it */
			dev->client_word[p] = w + 1 + (r & 7);
			continue;
		case 4: /* random header words (the daemon must not trust them) */
			((volatile uint64_t *)dev->hdr)[r % (sizeof(*dev->hdr) / 8)] = rnd(s);
			break;
		case 5: /* flags nobody knows */
			break;
		default: /* a well formed word with a random opcode */
			break;
		}
		uint64_t mask = round % 7 == 2 ? (rnd(s) & 0xffffffffu) | 1u : rnd(s) & 0xffffffffu;
		uint16_t flags = round % 7 == 5 ? (uint16_t)rnd(s) : (uint16_t)(rnd(s) & (GPUSYS_CW_EMPTY | GPUSYS_CW_NOREPLY | GPUSYS_CW_HEADS));
		uint64_t word = gpusys_client_word(0, flags, any_op(r), mask);
		dev->client_word[p] = word | ((GPUSYS_WORD_SEQ(w) + 1) & GPUSYS_SEQ_MASK);
	}
	dev->hdr->doorbell = rnd(s);
	if (wake_fd >= 0 && (round & 63) == 0) {
		char b = 1;
		if (write(wake_fd, &b, 1) < 0) {
			/* the daemon closed it: it is done with us */
		}
	}
}

static void scribbler_child(const char *runtime, struct scribble_shared *sh)
{
	if (geteuid() == 0 && (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0))
		_exit(3);
	struct gpusys_attach_opts o = { .runtime_dir = runtime, .num_ports = 8, .cuda_device = -1 };
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	if (gpusys_client_attach(&o, &c) || gpusys_emu_open(gpusys_client_channel(c), &emu)) {
		atomic_store(&sh->failed, 1);
		_exit(4);
	}
	atomic_store(&sh->attached, 1);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	int wake_fd = gpusys_client_wake_fd(c);
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	for (long round = 0; !atomic_load(&sh->stop); round++) {
		scribble_round(dev, wake_fd, &s, round);
		atomic_store(&sh->rounds, round + 1);
	}
	_exit(0);
}

static long daemon_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	long n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static long daemon_rss_kib(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long kib = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static long clients_attached(const struct gd *d)
{
	json_t *st = daemon_status(d->runtime);
	long n = st ? (long)json_integer_value(json_object_get(st, "clients_attached")) : -1;
	json_decref(st);
	return n;
}

/* Wait until the daemon has no client (5 s at most). */
static void wait_no_clients(const struct gd *d)
{
	for (int i = 0; i < 500 && clients_attached(d) != 0; i++)
		usleep(10000);
	assert_int_equal(clients_attached(d), 0);
}

static void test_scribbler_vs_honest(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, NULL);
	/* nobody must reach the daemon's socket */
	assert_int_equal(chmod(d.dir, 0755), 0);
	assert_int_equal(chmod(d.runtime, 0755), 0);

	struct honest alone = { .runtime = d.runtime };
	honest_run(&alone, ALONE_CALLS);
	assert_int_equal(alone.err, 0);
	assert_int_equal(alone.wrong, 0);

	struct scribble_shared *sh =
		mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0)
		scribbler_child(d.runtime, sh);
	for (int i = 0; i < 500 && !atomic_load(&sh->attached) && !atomic_load(&sh->failed); i++)
		usleep(10000);
	assert_true(atomic_load(&sh->attached));

	struct honest h = { .runtime = d.runtime };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, honest_main, &h), 0);
	pthread_join(t, NULL);
	/* At least SCRIBBLE_ROUNDS rounds, however fast the honest client was. */
	for (int i = 0; i < 6000 && atomic_load(&sh->rounds) < SCRIBBLE_ROUNDS; i++)
		usleep(10000);
	long rounds = atomic_load(&sh->rounds);
	atomic_store(&sh->stop, 1);
	int status = 0;
	assert_int_equal(waitpid(child, &status, 0), child);

	double rate_alone = alone.calls / alone.secs, rate = h.calls / h.secs;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	printf("honest client: %ld ECHO calls, %ld wrong, %.0f calls/s (alone: %.0f, %.2fx); scribbler: %ld rounds over "
	       "8 ports, exit status %#x; %ld cores\n",
	       h.calls, h.wrong, rate, rate_alone, rate / rate_alone, rounds, status, cores);
	assert_int_equal(h.err, 0);
	assert_int_equal(h.calls, HONEST_CALLS);
	assert_int_equal(h.wrong, 0);
	assert_true(rounds >= SCRIBBLE_ROUNDS);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (cores >= 8)
		assert_true(rate >= 0.5 * rate_alone);

	/* The daemon is still there, serving, and let go of both. */
	wait_no_clients(&d);
	struct honest after = { .runtime = d.runtime };
	honest_run(&after, 1000);
	assert_int_equal(after.err, 0);
	assert_int_equal(after.wrong, 0);
	munmap(sh, sizeof(*sh));
	gd_finish(&d);
}

/* --------------------------------------------------- a thousand kills */

/* A client that attaches, opens a file and calls until it is killed. */
static void victim_child(const char *runtime, const char *path, int ready_fd)
{
	struct gpusys_attach_opts o = { .runtime_dir = runtime, .num_ports = 4, .cuda_device = -1 };
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	if (gpusys_client_attach(&o, &c) || gpusys_emu_open(gpusys_client_channel(c), &emu))
		_exit(4);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	const char *paths[L] = { path };
	int flags[L] = { O_RDWR | O_CREAT };
	uint32_t mode[L] = { 0600 };
	int64_t h[L];
	if (gpusys_emu_file_open(dev, 1, paths, flags, mode, h) || h[0] < 0)
		_exit(5);
	char b = 1;
	if (write(ready_fd, &b, 1) != 1)
		_exit(6);
	static uint8_t buf[L][128];
	const void *ins[L];
	void *outs[L];
	uint32_t len[L], cap[L], got[L];
	int32_t st[L];
	for (unsigned l = 0; l < L; l++)
		ins[l] = buf[l], outs[l] = buf[l], len[l] = cap[l] = 100;
	for (;;)
		gpusys_emu_echo(dev, 0xffffffffu, ins, len, outs, cap, got, st);
}

static void test_thousand_kills(void **state)
{
	(void)state;
	/* The sanitized daemon's quarantine keeps freed memory by design. */
	const char *asan = getenv("ASAN_OPTIONS");
	char opts[512];
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0", asan ? asan : "", asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
	struct gd d;
	gd_start(&d, NULL);
	char path[256];
	snprintf(path, sizeof(path), "%s/victims.dat", d.dir);

	/* Warm up: the first clients grow pools that stay. */
	struct honest warm = { .runtime = d.runtime };
	honest_run(&warm, 200);
	assert_int_equal(warm.err, 0);
	wait_no_clients(&d);
	/* The detached client's descriptors go on the main loop's next turn:
	 * the baseline is the count once it holds still for 200 ms. */
	long fds0 = daemon_fds(d.pid);
	for (int still = 0, i = 0; still < 10 && i < 500; i++) {
		usleep(20000);
		long now = daemon_fds(d.pid);
		still = now == fds0 ? still + 1 : 0;
		fds0 = now;
	}
	long rss0 = daemon_rss_kib(d.pid);
	assert_true(fds0 > 0 && rss0 > 0);

	uint64_t s = 0xfeedfacecafebeefull;
	int killed_before_ready = 0;
	double t0 = now_s();
	for (int done = 0; done < KILLS; done += KILL_BATCH) {
		pid_t kids[KILL_BATCH];
		int ready[KILL_BATCH];
		for (int k = 0; k < KILL_BATCH; k++) {
			int pfd[2];
			assert_int_equal(pipe(pfd), 0);
			kids[k] = fork();
			assert_true(kids[k] >= 0);
			if (kids[k] == 0) {
				close(pfd[0]);
				victim_child(d.runtime, path, pfd[1]);
			}
			close(pfd[1]);
			ready[k] = pfd[0];
		}
		for (int k = 0; k < KILL_BATCH; k++) {
			/* A random moment: often before the attach is done,
			 * often mid-call. */
			usleep((useconds_t)(rnd(&s) % 4000));
			char b;
			int fl = fcntl(ready[k], F_GETFL);
			fcntl(ready[k], F_SETFL, fl | O_NONBLOCK);
			if (read(ready[k], &b, 1) != 1)
				killed_before_ready++;
			kill(kids[k], SIGKILL);
		}
		for (int k = 0; k < KILL_BATCH; k++) {
			int status;
			assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
			close(ready[k]);
		}
	}
	double secs = now_s() - t0;
	wait_no_clients(&d);
	/* Let the main loop finish the last teardowns. */
	long fds1 = daemon_fds(d.pid), rss1 = daemon_rss_kib(d.pid);
	for (int i = 0; i < 100 && fds1 != fds0; i++) {
		usleep(20000);
		fds1 = daemon_fds(d.pid);
	}
	printf("%d clients killed in %.1f s (%d before they had a file open); daemon descriptors %ld -> %ld, RSS %ld -> "
	       "%ld KiB\n",
	       KILLS, secs, killed_before_ready, fds0, fds1, rss0, rss1);
	assert_int_equal(fds1, fds0);
	assert_true(rss1 - rss0 < 32 * 1024);
	/* And it still serves. */
	struct honest after = { .runtime = d.runtime };
	honest_run(&after, 1000);
	assert_int_equal(after.err, 0);
	assert_int_equal(after.wrong, 0);
	gd_finish(&d);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scribbler_vs_honest),
		cmocka_unit_test(test_thousand_kills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
