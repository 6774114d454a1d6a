/* SPDX-License-Identifier: MIT */
/*
 * Per-user quotas (daemon/core/accounts.c): what all the clients of one uid
 * hold together is bounded by max_handles_per_uid, max_pending_calls_per_uid
 * and user_mem_budget, on top of each client's own bounds. A client over
 * its user's limit gets -EMFILE, -EAGAIN or -ENOMEM; another user's client
 * never notices (checked as uid 65534 where the test runs as root); a freed
 * handle is a handle again; the refusal is logged once.
 *
 * The quotas fit the daemon's descriptor limit (daemon/quotas.h, issue 33):
 * run with RLIMIT_NOFILE 512, one user's handles are refused long before
 * the daemon runs out and others still attach; connections that never say
 * hello are bounded per user; an attach refused for want of descriptors
 * says so.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "common/port_host.h"
#include "../daemon/harness.h"
#include "../daemon/emu_client.h"
#include "../daemon/users.h"

#define L GPUSYS_WARP_LANES

static int cl_attach(struct emu_client *k, const char *runtime, uint32_t ports)
{
	return emu_client_attach(k, runtime, ports, 0, GPUSYS_ATTACH_NO_STDIO);
}

static int64_t f_open(const gpusys_dev_t *d, const char *path, int flags)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	uint32_t m[L] = { 0600 };
	int64_t r[L];
	int rc = gpusys_emu_file_open(d, 1, p, fl, m, r);
	return rc ? rc : r[0];
}

static int64_t f_close(const gpusys_dev_t *d, int64_t h)
{
	int32_t hv[L] = { (int32_t)h };
	int64_t r[L];
	int rc = gpusys_emu_file_close(d, 1, hv, r);
	return rc ? rc : r[0];
}

static bool log_has(const struct gd *d, const char *what)
{
	char *log = gd_log(d);
	bool has = log && strstr(log, what);
	free(log);
	return has;
}

/* Wait up to 2 s for what to be logged. */
static bool log_soon(const struct gd *d, const char *what)
{
	for (int i = 0; i < 200; i++) {
		if (log_has(d, what))
			return true;
		usleep(10000);
	}
	return false;
}

/* Open /dev/null until refused: how many opened, and the refusal in *why. */
static int open_until_refused(const gpusys_dev_t *d, int64_t *handles, int max, int64_t *why)
{
	int n = 0;
	*why = 0;
	while (n < max) {
		int64_t h = f_open(d, "/dev/null", O_RDONLY);
		if (h < 0) {
			*why = h;
			break;
		}
		handles[n++] = h;
	}
	return n;
}

static void test_user_handles(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_handles_per_client = 16\nmax_handles_per_uid = 20\n");
	assert_int_equal(chmod(d.dir, 0755), 0);
	assert_int_equal(chmod(d.runtime, 0755), 0);
	struct emu_client a, b;
	int64_t ha[64], hb[64], why;
	assert_int_equal(cl_attach(&a, d.runtime, 2), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 2), 0);

	/* The client's own bound first, then the user's. */
	assert_int_equal(open_until_refused(a.dev, ha, 64, &why), 16);
	assert_int_equal(why, -EMFILE);
	assert_int_equal(open_until_refused(b.dev, hb, 64, &why), 4);
	assert_int_equal(why, -EMFILE);
	assert_true(log_has(&d, "is at its limit of open handles (max_handles_per_uid)"));

	/* Another user is not affected. */
	if (geteuid() == 0) {
		pid_t child = fork();
		assert_true(child >= 0);
		if (child == 0) {
			struct emu_client c;
			int64_t hc[64], cwhy;
			if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534) ||
			    cl_attach(&c, d.runtime, 2))
				_exit(2);
			int n = open_until_refused(c.dev, hc, 64, &cwhy);
			_exit(n == 16 && cwhy == -EMFILE ? 0 : 3);
		}
		int st;
		assert_int_equal(waitpid(child, &st, 0), child);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}

	/* Handles freed by one client are the user's again. */
	assert_int_equal(f_close(a.dev, ha[0]), 0);
	assert_int_equal(f_close(a.dev, ha[1]), 0);
	assert_int_equal(open_until_refused(b.dev, hb + 4, 60, &why), 2);
	assert_int_equal(why, -EMFILE);
	/* A client that goes gives back all it held. */
	emu_client_detach(&a);
	int n = 0;
	for (int i = 0; i < 200 && n == 0; i++) {
		n = open_until_refused(b.dev, hb + 6, 58, &why);
		if (!n)
			usleep(10000); /* the detach is the main loop's */
	}
	assert_int_equal(n, 10); /* b's own bound of 16 now */
	emu_client_detach(&b);
	gd_finish(&d);
}

/* Pending calls: SLEEP completes later without holding a thread. */
struct sleeper {
	const gpusys_dev_t *dev;
	uint32_t warp;
	int rc;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	gpusys_emu_set_warp(s->warp);
	struct gpusys_sleep_req q = { .delay_ns = 1500u * 1000u * 1000u, .timeout_ns = 0 };
	const void *in[L] = { &q };
	uint32_t len[L] = { sizeof(q) }, cap[L] = { 0 }, got[L];
	void *out[L] = { NULL };
	int32_t st[L];
	s->rc = gpusys_emu_rpc(s->dev, GPUSYS_OP_SLEEP, 0, 1, in, len, out, cap, got, st);
	return NULL;
}

static void test_user_pending(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_pending_calls = 4\nmax_pending_calls_per_uid = 6\n");
	struct emu_client a, b;
	assert_int_equal(cl_attach(&a, d.runtime, 8), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 8), 0);
	struct sleeper sa[5], sb[3];
	pthread_t ta[5], tb[3];
	for (int i = 0; i < 5; i++) {
		sa[i] = (struct sleeper){ .dev = a.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&ta[i], NULL, sleeper_main, &sa[i]), 0);
	}
	usleep(400 * 1000); /* a's calls are pending (4) or refused (1) */
	for (int i = 0; i < 3; i++) {
		sb[i] = (struct sleeper){ .dev = b.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&tb[i], NULL, sleeper_main, &sb[i]), 0);
	}
	int a_again = 0, b_again = 0, ok = 0;
	for (int i = 0; i < 5; i++) {
		pthread_join(ta[i], NULL);
		a_again += sa[i].rc == -EAGAIN;
		ok += sa[i].rc == 0;
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(tb[i], NULL);
		b_again += sb[i].rc == -EAGAIN;
		ok += sb[i].rc == 0;
	}
	/* a: 4 pending (its own bound), 1 refused; b: 2 more make the user's 6. */
	assert_int_equal(a_again, 1);
	assert_int_equal(b_again, 1);
	assert_int_equal(ok, 6);
	assert_true(log_has(&d, "is at its limit of pending calls (max_pending_calls_per_uid)"));
	/* All given back: b can have its 4 now. */
	struct sleeper again[4];
	pthread_t tg[4];
	for (int i = 0; i < 4; i++) {
		again[i] = (struct sleeper){ .dev = b.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&tg[i], NULL, sleeper_main, &again[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(tg[i], NULL);
		assert_int_equal(again[i].rc, 0);
	}
	emu_client_detach(&a);
	emu_client_detach(&b);
	gd_finish(&d);
}

/* A 32 x 768 KiB pread on port p, by hand, never read past packet 0: the
 * daemon holds the 24 MiB answer for the client. Its status. */
static int32_t unread_pread(const gpusys_dev_t *dev, uint32_t p, int64_t h)
{
	enum { MIB = 1 << 20 };
	struct gpusys_port *port = &dev->ports[p];
	struct gpusys_file_req q = { .handle = (int32_t)h, .offset = 0, .count = MIB / 4 * 3 };
	for (uint32_t l = 0; l < L; l++) {
		port->len[l] = sizeof(q);
		port->aux[l] = MIB / 4 * 3;
		port_host_inline_put(port->data, l, (const uint8_t *)&q, sizeof(q));
	}
	uint32_t seq = (dev->locks[p].seq + 1) & GPUSYS_SEQ_MASK;
	__atomic_store_n(&dev->client_word[p], gpusys_client_word(seq, 0, GPUSYS_OP_FILE_PREAD, 0xffffffffu),
			 __ATOMIC_RELEASE);
	uint64_t w;
	for (int i = 0; GPUSYS_WORD_SEQ(w = __atomic_load_n(&dev->server_word[p], __ATOMIC_ACQUIRE)) != seq; i++) {
		assert_true(i < 5000);
		usleep(1000);
	}
	dev->locks[p].seq = seq; /* and never ask for the rest */
	return GPUSYS_SW_STATUS(w);
}

static void test_user_memory(void **state)
{
	(void)state;
	struct gd d;
	/* Each client may hold 64 MiB (two such answers), the user 64 MiB. */
	gd_start(&d, "client_mem_budget = 64M\nuser_mem_budget = 64M\n");
	char path[256];
	snprintf(path, sizeof(path), "%s/unread.bin", d.dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < (1 << 20) / 8; i++)
		fwrite("abcdefgh", 1, 8, f);
	fclose(f);
	struct emu_client a, b;
	assert_int_equal(cl_attach(&a, d.runtime, 4), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 4), 0);
	int64_t ha = f_open(a.dev, path, O_RDONLY), hb = f_open(b.dev, path, O_RDONLY);
	assert_true(ha > 0 && hb > 0);
	assert_int_equal(unread_pread(a.dev, 1, ha), 0);
	assert_int_equal(unread_pread(a.dev, 2, ha), 0);
	/* b alone is far from its own budget, but the user is at 48 MiB: no
	 * room yet (the device side would send it again, abi.h). */
	assert_int_equal(unread_pread(b.dev, 1, hb), GPUSYS_STATUS_NO_ROOM);
	assert_true(log_has(&d, "is at its limit of request memory (user_mem_budget)"));
	/* a goes: its answers are freed, and b gets its own. */
	emu_client_detach(&a);
	int32_t st = GPUSYS_STATUS_NO_ROOM;
	for (uint32_t i = 0, p = 2; i < 200 && st == GPUSYS_STATUS_NO_ROOM && p < 4; i++) {
		st = unread_pread(b.dev, p, hb);
		if (st == GPUSYS_STATUS_NO_ROOM) {
			p++; /* that port is the daemon's until read: use the next */
			usleep(20000);
		}
	}
	assert_int_equal(st, 0);
	emu_client_detach(&b);
	gd_finish(&d);
}

/* ------------------------------------------- the daemon's descriptor limit */

/* The daemon's RLIMIT_NOFILE in the tests that set one. */
#define LOW_NOFILE 512
/* What the daemon keeps for itself and root at least, out of LOW_NOFILE
 * (daemon/quotas.h): a user never gets more than a quarter of the rest. */
#define USER_SHARE_MAX (LOW_NOFILE / 4)

/* gpusysd with RLIMIT_NOFILE LOW_NOFILE, soft and hard, from its start: run
 * through a shell that sets the limit and execs it (the same pid; lowering
 * our own hard limit could not be undone without CAP_SYS_RESOURCE). Its
 * sockets open to all users. */
static void gd_start_low(struct gd *d, const char *config)
{
	const char *bin = test_env("GPUSYSD_BIN");
	char *real = strdup(bin), dir[] = "/tmp/gpusysd-low.XXXXXX", wrapper[64];
	assert_non_null(real);
	assert_non_null(mkdtemp(dir));
	snprintf(wrapper, sizeof(wrapper), "%s/gpusysd", dir);
	FILE *f = fopen(wrapper, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\nulimit -n %d || exit 99\nexec '%s' \"$@\"\n", LOW_NOFILE, real);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(chmod(wrapper, 0755), 0);
	assert_int_equal(setenv("GPUSYSD_BIN", wrapper, 1), 0);
	gd_start(d, config);
	assert_int_equal(setenv("GPUSYSD_BIN", real, 1), 0);
	free(real);
	unlink(wrapper); /* run already */
	rmdir(dir);
	assert_int_equal(chmod(d->dir, 0755), 0);
	assert_int_equal(chmod(d->runtime, 0755), 0);
}

/* A child acting as another user: fn runs there and writes what it found
 * to out (no cmocka in children); the child then keeps what it holds until
 * the parent closes hold. */
struct kid {
	pid_t pid;
	int out, hold;
};

static void kid_start(struct kid *k, uid_t uid, void (*fn)(int out, void *arg), void *arg)
{
	int o[2], h[2];
	assert_int_equal(pipe(o), 0);
	assert_int_equal(pipe(h), 0);
	fflush(NULL);
	k->pid = fork();
	assert_true(k->pid >= 0);
	if (k->pid == 0) {
		char c;
		/* Nothing of the parent's: other children's hold pipes
		 * above all, or ending one would wait for the others. */
		for (int fd = 3; fd < 1024; fd++)
			if (fd != o[1] && fd != h[0])
				close(fd);
		if (setgroups(0, NULL) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
			_exit(100);
		fn(o[1], arg);
		close(o[1]);
		while (read(h[0], &c, 1) > 0) {
		}
		_exit(0);
	}
	close(o[1]);
	close(h[0]);
	k->out = o[0];
	k->hold = h[1];
}

/* n values the child wrote (within 30 s). */
static void kid_read(struct kid *k, int64_t *v, size_t n)
{
	struct pollfd p = { .fd = k->out, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 30000), 1);
	size_t got = 0;
	while (got < n * sizeof(*v)) {
		ssize_t r = read(k->out, (char *)v + got, n * sizeof(*v) - got);
		if (r <= 0)
			fail_msg("child %d wrote %zu of %zu bytes", (int)k->pid, got, n * sizeof(*v));
		got += (size_t)r;
	}
}

static void kid_end(struct kid *k)
{
	int st;
	close(k->hold);
	close(k->out);
	assert_int_equal(waitpid(k->pid, &st, 0), k->pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void put(int out, const int64_t *v, size_t n)
{
	if (write(out, v, n * sizeof(*v)) < 0)
		_exit(101);
}

/* Two clients that open /dev/null until refused: the handles held in all,
 * the last refusal. */
static void hoarder(int out, void *arg)
{
	static struct emu_client c[2];
	static int64_t h[LOW_NOFILE];
	int64_t res[2] = { -1, 0 }, why = 0;
	if (cl_attach(&c[0], arg, 2) == 0 && cl_attach(&c[1], arg, 2) == 0) {
		res[0] = open_until_refused(c[0].dev, h, LOW_NOFILE, &why);
		res[0] += open_until_refused(c[1].dev, h + res[0], LOW_NOFILE - (int)res[0], &why);
		res[1] = why;
	}
	put(out, res, 2);
}

/* One client opening 16 files: how many opened, and the attach's status or
 * the refusal. */
static void opener(int out, void *arg)
{
	struct emu_client c;
	int64_t h[16], res[2] = { 0, 0 };
	int r = cl_attach(&c, arg, 2);
	if (r)
		res[1] = r;
	else
		res[0] = open_until_refused(c.dev, h, 16, &res[1]);
	put(out, res, 2);
}

/* Root attaches and opens 16 files. */
static void root_opens(const struct gd *d)
{
	struct emu_client c;
	int64_t h[16], why;
	int r = cl_attach(&c, d->runtime, 2);
	if (r)
		fail_msg("root's attach: %d: %s", r, gpusys_last_error());
	assert_int_equal(open_until_refused(c.dev, h, 16, &why), 16);
	emu_client_detach(&c);
}

/* One user's handles stop at its share of the descriptors, not at the
 * daemon's limit; another user and root still attach and open files. */
static void test_fd_user_share(void **state)
{
	(void)state;
	if (!need_root())
		return;
	struct gd d;
	gd_start_low(&d, NULL);
	struct kid hog, other;
	int64_t got[2];
	kid_start(&hog, 65534, hoarder, d.runtime);
	kid_read(&hog, got, 2);
	if (got[0] < 16 || got[0] > USER_SHARE_MAX || got[1] != -EMFILE)
		fail_msg("uid 65534 held %lld handles (limit %d, a quarter %d), then %lld", (long long)got[0],
			 LOW_NOFILE, USER_SHARE_MAX, (long long)got[1]);
	assert_true(log_soon(&d, "uid 65534 is at its limit of open handles"));
	assert_true(log_has(&d, "descriptor limit 512:")); /* what it got and what each user gets */
	kid_start(&other, 65533, opener, d.runtime);
	kid_read(&other, got, 2);
	if (got[0] != 16)
		fail_msg("uid 65533 opened %lld of 16 (%lld)", (long long)got[0], (long long)got[1]);
	kid_end(&other);
	root_opens(&d);
	kid_end(&hog);
	gd_finish(&d);
}

/* However many users fill their shares, the rest is root's. */
static void test_fd_root_reserve(void **state)
{
	(void)state;
	if (!need_root())
		return;
	struct gd d;
	gd_start_low(&d, NULL);
	struct kid hog[4];
	int64_t got[2], total = 0;
	for (int i = 0; i < 4; i++) {
		kid_start(&hog[i], 65534 - (uid_t)i, hoarder, d.runtime);
		kid_read(&hog[i], got, 2);
		assert_int_equal(got[1], -EMFILE);
		total += got[0];
	}
	/* Users other than root: three quarters of what is left for clients. */
	if (total > LOW_NOFILE * 3 / 4)
		fail_msg("four users held %lld handles of %d", (long long)total, LOW_NOFILE);
	assert_true(log_soon(&d, "users other than root together are at their limit of open handles"));
	root_opens(&d);
	for (int i = 0; i < 4; i++)
		kid_end(&hog[i]);
	gd_finish(&d);
}

/* A connection to the client socket, non-blocking (a full backlog is
 * -EAGAIN, not a wait), or -errno. */
static int try_connect(const char *runtime)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_SOCKET_NAME);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

enum { SILENT = 600 };

/* SILENT connections that never say hello: how many connected, how many the
 * daemon left open (no refusal to read), and whether the first refusal
 * named the per-user bound. */
static void silent(int out, void *arg)
{
	static int fds[SILENT];
	int64_t res[3] = { 0, 0, 0 };
	long t0 = now_ms();
	for (int i = 0; i < SILENT && now_ms() - t0 < 5000;) {
		int fd = try_connect(arg);
		if (fd == -EAGAIN) {
			usleep(1000); /* the backlog is full: the daemon is behind */
			continue;
		}
		if (fd < 0)
			break;
		fds[res[0]++] = fd;
		i++;
	}
	usleep(500 * 1000);
	for (int i = 0; i < res[0]; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };
		if (poll(&p, 1, 0) == 0) {
			res[1]++;
			continue;
		}
		struct gpusys_welcome w;
		if (!res[2] && recv(fds[i], &w, sizeof(w), 0) == (ssize_t)sizeof(w) && w.status == -EAGAIN &&
		    strstr(w.message, "max_pending_hellos_per_uid"))
			res[2] = 1;
	}
	put(out, res, 3);
}

/* Connections that never say hello, from one user: bounded, refused at
 * once with a reason, and another user still attaches. */
static void test_fd_silent_connections(void **state)
{
	(void)state;
	if (!need_root())
		return;
	struct gd d;
	gd_start_low(&d, "handshake_timeout_ms = 30000\n");
	struct kid mute, other;
	int64_t got[3];
	kid_start(&mute, 65534, silent, d.runtime);
	kid_read(&mute, got, 3);
	if (got[0] != SILENT || got[1] < 1 || got[1] > 64 || got[2] != 1)
		fail_msg("%lld of %d connected, %lld left waiting for a hello, refusal %s", (long long)got[0], SILENT,
			 (long long)got[1], got[2] ? "named the bound" : "missing or wrong");
	assert_true(log_soon(&d, "uid 65534 already has"));
	kid_start(&other, 65533, opener, d.runtime);
	kid_read(&other, got, 2);
	if (got[0] != 16)
		fail_msg("uid 65533 opened %lld of 16 (%lld)", (long long)got[0], (long long)got[1]);
	kid_end(&other);
	root_opens(&d);
	kid_end(&mute);
	gd_finish(&d);
}

/* The lowest descriptor number free in pid, once it has not changed for
 * 50 ms. */
static int lowest_free_fd(pid_t pid)
{
	int last = -1;
	for (int tries = 0; tries < 100; tries++) {
		char path[64];
		static bool used[4096];
		memset(used, 0, sizeof(used));
		snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
		DIR *dir = opendir(path);
		assert_non_null(dir);
		for (struct dirent *e; (e = readdir(dir));) {
			int n = atoi(e->d_name);
			if (e->d_name[0] != '.' && n >= 0 && n < 4096)
				used[n] = true;
		}
		closedir(dir);
		int f = 0;
		while (used[f])
			f++;
		if (f == last)
			return f;
		last = f;
		usleep(50000);
	}
	fail_msg("descriptors of %d never settled", (int)pid);
	return -1;
}

static void set_soft_nofile(pid_t pid, rlim_t soft)
{
	struct rlimit rl;
	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = soft;
	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &rl, NULL), 0);
}

/* An attach refused because gpusysd has no descriptor left says so: with
 * descriptors in the hello, with none (the channel cannot be made), and
 * with none even for the connection (it is refused at once, not left to
 * time out). */
static void test_fd_refusal_says_so(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, NULL);
	struct rlimit rl;
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &rl), 0);
	struct gpusys_options o = {
		.runtime_dir = d.runtime,
		.num_ports = 2,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK, /* stdout, stderr and cwd go with the hello */
	};
	static const char *const what[] = { "descriptors with the hello", "the channel", "the connection" };
	for (int i = 0; i < 3; i++) {
		int f = lowest_free_fd(d.pid);
		/* Room for the connection (i < 2), nothing more. */
		set_soft_nofile(d.pid, (rlim_t)(i < 2 ? f + 1 : f));
		if (i == 1)
			o.flags |= GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD;
		gpusys_t *g;
		long t0 = now_ms();
		int r = gpusys_attach(&o, &g);
		long ms = now_ms() - t0;
		if (r != -EMFILE || !strstr(gpusys_last_error(), "gpusysd is out of file descriptors") || ms > 3000)
			fail_msg("no descriptor for %s: attach %d after %ld ms: %s", what[i], r, ms, gpusys_last_error());
		set_soft_nofile(d.pid, rl.rlim_cur);
	}
	assert_true(log_soon(&d, "gpusysd is out of file descriptors"));
	/* Given its descriptors back, it serves again. */
	struct emu_client c;
	assert_int_equal(cl_attach(&c, d.runtime, 2), 0);
	emu_client_detach(&c);
	gd_finish(&d);
}

/* A max_handles_per_uid above what the descriptor limit allows is lowered
 * to fit, with a warning; on reload too, against the limit then in force. */
static void test_fd_explicit_lowered(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_handles_per_uid = 100000\n");
	assert_true(log_soon(&d, "serving ")); /* SIGHUP is handled from here on */
	set_soft_nofile(d.pid, LOW_NOFILE);
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	assert_true(log_soon(&d, " read: ")); /* the reload is done */
	struct emu_client c;
	static int64_t h[LOW_NOFILE];
	int64_t why;
	assert_int_equal(cl_attach(&c, d.runtime, 2), 0);
	int n = open_until_refused(c.dev, h, LOW_NOFILE, &why);
	assert_int_equal(why, -EMFILE);
	if (n > LOW_NOFILE * 3 / 4)
		fail_msg("%d handles with a descriptor limit of %d", n, LOW_NOFILE);
	assert_true(log_soon(&d, "is at its limit of open handles"));
	assert_true(log_has(&d, "reload: descriptor limit 512:"));
	assert_true(log_has(&d, "max_handles_per_uid = 100000 lowered to"));
	emu_client_detach(&c);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_user_handles),
		cmocka_unit_test(test_user_pending),
		cmocka_unit_test(test_user_memory),
		cmocka_unit_test(test_fd_user_share),
		cmocka_unit_test(test_fd_root_reserve),
		cmocka_unit_test(test_fd_silent_connections),
		cmocka_unit_test(test_fd_refusal_says_so),
		cmocka_unit_test(test_fd_explicit_lowered),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
