/* SPDX-License-Identifier: MIT */
/*
 * Hostile and careless users against the real gpusysd (SECURITY.md maps
 * each promise to its test here): a daemon killed under emulated warps,
 * control connections hoarded or half-closed, one user's clients hidden
 * from another, client slots per user, log floods, configuration files
 * that are not files. Tests that act as other users (65534, 65533) need
 * root and are skipped without it.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "util/log.h" /* LOG_BURST, LOG_PER_S */
#include "../daemon/harness.h"
#include "../daemon/users.h"

#define L GPUSYS_WARP_LANES

/* ------------------------------------------------------------ helpers */

static int ctl_connect(const char *runtime)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_CONTROL_NAME);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static bool send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		buf += n;
		len -= (size_t)n;
	}
	return true;
}

/* One reply line (parsed) within ms, or NULL (EOF, timeout, not JSON). */
static json_t *read_line_json(int fd, int ms)
{
	char buf[65536];
	size_t n = 0;
	while (n < sizeof(buf) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, ms) <= 0)
			return NULL;
		if (recv(fd, buf + n, 1, 0) != 1)
			return NULL;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return json_loads(buf, 0, NULL);
}

static json_t *ctl_status_on(int fd)
{
	static const char req[] = "{\"cmd\":\"status\"}\n";
	if (!send_all(fd, req, sizeof(req) - 1))
		return NULL;
	return read_line_json(fd, 2000);
}

/* One request on a fresh connection (usable in children). */
static json_t *ctl_ask(const char *runtime, const char *line)
{
	int fd = ctl_connect(runtime);
	if (fd < 0)
		return NULL;
	json_t *j = send_all(fd, line, strlen(line)) ? read_line_json(fd, 2000) : NULL;
	close(fd);
	return j;
}

static json_t *ctl_status(const char *runtime)
{
	return ctl_ask(runtime, "{\"cmd\":\"status\"}\n");
}

static size_t count_str(const char *hay, const char *needle)
{
	size_t n = 0;
	for (const char *s = hay; (s = strstr(s, needle)); s += strlen(needle))
		n++;
	return n;
}

/* ------------------------------------- item 2: the daemon dies mid-call */

struct warp {
	const gpusys_dev_t *dev;
	uint32_t id;
	const char *fifo; /* NULL: ECHO in a loop; else a read that blocks */
	atomic_ulong calls;
	atomic_bool started, done;
	int rc;
	long done_ms;
};

static void *warp_main(void *arg)
{
	struct warp *w = arg;
	gpusys_emu_set_warp(w->id);
	if (w->fifo) {
		const char *path[L] = { w->fifo };
		int flags[L] = { O_RDWR };
		uint32_t mode[L] = { 0 }, count[L] = { 16 };
		int64_t ret[L];
		char buf[16];
		void *bufs[L] = { buf };
		int rc = gpusys_emu_file_open(w->dev, 1, path, flags, mode, ret);
		int32_t h[L] = { (int32_t)ret[0] };
		atomic_store(&w->started, true);
		if (rc == 0 && ret[0] >= 0)
			rc = gpusys_emu_file_read(w->dev, 1, h, bufs, count, ret); /* nobody writes */
		else
			rc = -1000; /* the open failed: not what is tested */
		w->rc = rc;
	} else {
		char in[8] = "ping", out[8];
		const void *ins[L] = { in };
		void *outs[L] = { out };
		uint32_t in_len[L] = { 4 }, cap[L] = { 8 }, out_len[L];
		int32_t st[L];
		int rc;
		while ((rc = gpusys_emu_echo(w->dev, 1, ins, in_len, outs, cap, out_len, st)) == 0) {
			atomic_fetch_add(&w->calls, 1);
			atomic_store(&w->started, true);
		}
		w->rc = rc;
	}
	w->done_ms = now_ms();
	atomic_store(&w->done, true);
	return NULL;
}

/* kill -9 of the daemon while emulated warps wait on it: every one returns
 * -ESHUTDOWN within a second, as CUDA kernels do (tests/gpu/test_daemon_death). */
static void test_daemon_killed_mid_call(void **state)
{
	enum { NW = 4 };
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	struct warp w[NW];
	pthread_t t[NW];
	char fifo[256];

	(void)state;
	gd_start(&d, "pollers = 1\n");
	snprintf(fifo, sizeof(fifo), "%s/fifo", d.dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 8,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < NW; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].dev = gpusys_emu_dev(emu);
		w[i].id = (uint32_t)i;
		w[i].fifo = i == 0 ? fifo : NULL;
		assert_int_equal(pthread_create(&t[i], NULL, warp_main, &w[i]), 0);
	}
	long t0 = now_ms();
	for (int i = 0; i < NW; i++)
		while (!atomic_load(&w[i].started)) {
			if (now_ms() - t0 > 5000)
				fail_msg("warp %d did not start", i);
			usleep(1000);
		}
	usleep(200000); /* the read waits on a worker; the echoes run */
	for (int i = 0; i < NW; i++)
		assert_false(atomic_load(&w[i].done));

	long killed = now_ms();
	assert_int_equal(kill(d.pid, SIGKILL), 0);
	for (int i = 0; i < NW; i++) {
		while (!atomic_load(&w[i].done)) {
			if (now_ms() - killed > 3000)
				fail_msg("warp %d still waits 3 s after the daemon died", i);
			usleep(1000);
		}
		pthread_join(t[i], NULL);
		if (w[i].rc != -ESHUTDOWN)
			fail_msg("warp %d returned %d, not -ESHUTDOWN", i, w[i].rc);
		if (w[i].done_ms - killed > 1000)
			fail_msg("warp %d took %ld ms to notice", i, w[i].done_ms - killed);
	}
	assert_true(atomic_load(&w[1].calls) > 0);
	/* Later calls fail at once; so does a synchronize. */
	long t1 = now_ms();
	assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 1), -ESHUTDOWN);
	assert_int_equal(gpusys_emu_synchronize(emu, -1), -ESHUTDOWN);
	assert_true(now_ms() - t1 < 500);

	gpusys_emu_close(emu);
	gpusys_detach(c); /* joins the watchdog */
	int ws;
	assert_int_equal(waitpid(d.pid, &ws, 0), d.pid);
	d.pid = 0;
	gd_cleanup(&d);
}

/* A daemon killed while it dozes leaves its wake pipe without a reader:
 * the next call's wake-up write must not kill the client with SIGPIPE; the
 * call fails with -ESHUTDOWN. */
static void test_daemon_killed_dozing(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;

	(void)state;
	gd_start(&d, "pollers = 1\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 1), 0);
	const struct gpusys_channel_header *h = gpusys_host_channel(c);
	long t0 = now_ms();
	while (!__atomic_load_n(&h->dozing, __ATOMIC_ACQUIRE)) {
		if (now_ms() - t0 > 5000)
			fail_msg("the idle daemon never dozed off");
		usleep(10000);
	}
	assert_int_equal(kill(d.pid, SIGKILL), 0);
	int ws;
	assert_int_equal(waitpid(d.pid, &ws, 0), d.pid);
	d.pid = 0;
	/* SIG_DFL for SIGPIPE, as in a program that never touched it. */
	signal(SIGPIPE, SIG_DFL);
	assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 1), -ESHUTDOWN);
	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_cleanup(&d);
}

/* ------------------------ item 3: control connections per user, idle */

struct hoard {
	const char *runtime;
	int ready, go; /* pipes: child -> parent, parent -> child */
};

/* As uid 65534: hold the allowed 2 connections, see the rest refused
 * with a reason, then see the idle ones closed and get a fresh one. */
static int hoarder(void *arg)
{
	struct hoard *h = arg;
	int held[2], extra[8];

	for (int i = 0; i < 2; i++) {
		if ((held[i] = ctl_connect(h->runtime)) < 0)
			return 1;
		json_t *j = ctl_status_on(held[i]);
		if (!j || json_object_get(j, "error"))
			return 2;
		json_decref(j);
	}
	long held_since = now_ms(); /* their last activity */
	for (int i = 0; i < 8; i++) {
		if ((extra[i] = ctl_connect(h->runtime)) < 0)
			return 3;
		json_t *j = read_line_json(extra[i], 2000);
		const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
		if (!e || !strstr(e, "uid 65534 has 2 control connections open"))
			return 4;
		json_decref(j);
		char b;
		if (read(extra[i], &b, 1) != 0) /* and closed */
			return 5;
		close(extra[i]);
	}
	pipe_put(h->ready);
	if (!pipe_get(h->go, 10000))
		return 6;
	/* control_idle_timeout_ms = 600: the silent two are closed. */
	for (int i = 0; i < 2; i++) {
		if (!wait_peer_close(held[i], 3000))
			return 7;
		close(held[i]);
	}
	if (now_ms() - held_since < 500)
		return 8; /* closed before they were idle long enough */
	json_t *j = ctl_status(h->runtime);
	if (!j || json_object_get(j, "error"))
		return 9;
	json_decref(j);
	return 0;
}

static int other_user_status(void *arg)
{
	json_t *j = ctl_status(arg);
	int ok = j && json_object_get(j, "clients") && !json_object_get(j, "error");
	json_decref(j);
	return ok ? 0 : 1;
}

static void test_control_per_uid(void **state)
{
	struct gd d;
	int ready[2], go[2];

	(void)state;
	if (!need_root())
		return;
	gd_start(&d, "control_conns_per_uid = 2\ncontrol_idle_timeout_ms = 600\n");
	open_to_all(&d);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	struct hoard h = { .runtime = d.runtime, .ready = ready[1], .go = go[0] };
	pid_t p = spawn_as(65534, 0, hoarder, &h);
	assert_true(pipe_get(ready[0], 10000));
	/* While user 65534 holds all it may, root and another user still get
	 * their status. */
	json_t *st = daemon_status(d.runtime);
	assert_non_null(st);
	json_decref(st);
	assert_int_equal(join(spawn_as(65533, 0, other_user_status, d.runtime)), 0);
	pipe_put(go[1]);
	int rc = join(p);
	if (rc)
		fail_msg("user 65534's side failed at step %d", rc);
	char *log = gd_log(&d);
	assert_non_null(strstr(log, "control: pid"));
	assert_non_null(strstr(log, "idle for 600 ms, closed"));
	free(log);
	for (int i = 0; i < 2; i++) {
		close(ready[i]);
		close(go[i]);
	}
	gd_finish(&d);
}

/* As uid 65534 with no per-user bound that matters: fill every control
 * slot, then hold them. */
static int filler(void *arg)
{
	struct hoard *h = arg;
	int fds[70], n = 0;

	for (; n < 70; n++) {
		if ((fds[n] = ctl_connect(h->runtime)) < 0)
			return 1;
		/* A refused connection may be closed before the request
		 * goes out; its error line is there to read anyway. */
		static const char req[] = "{\"cmd\":\"status\"}\n";
		send_all(fds[n], req, sizeof(req) - 1);
		json_t *j = read_line_json(fds[n], 2000);
		if (!j)
			return 2;
		const char *e = json_string_value(json_object_get(j, "error"));
		bool refused = e != NULL, right = e && n == 64 && strstr(e, "64 control connections open");
		json_decref(j);
		if (refused) {
			if (!right)
				return 3;
			close(fds[n]);
			break;
		}
	}
	if (n != 64)
		return 4;
	pipe_put(h->ready);
	if (!pipe_get(h->go, 10000))
		return 5;
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return 0;
}

static int refused_user(void *arg)
{
	int fd = ctl_connect(arg);
	if (fd < 0)
		return 1;
	json_t *j = read_line_json(fd, 2000);
	const char *e = j ? json_string_value(json_object_get(j, "error")) : NULL;
	int rc = e && strstr(e, "control connections open") ? 0 : 2;
	json_decref(j);
	close(fd);
	return rc;
}

/* All 64 control connections taken by one user (allowed 64 here): other
 * users are refused with a reason, root still gets in. */
static void test_control_root_reserve(void **state)
{
	struct gd d;
	int ready[2], go[2];

	(void)state;
	if (!need_root())
		return;
	gd_start(&d, "control_conns_per_uid = 64\n");
	open_to_all(&d);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	struct hoard h = { .runtime = d.runtime, .ready = ready[1], .go = go[0] };
	pid_t p = spawn_as(65534, 0, filler, &h);
	if (!pipe_get(ready[0], 10000)) {
		kill(p, SIGKILL);
		fail_msg("the filler failed at step %d", join(p));
	}
	assert_int_equal(join(spawn_as(65533, 0, refused_user, d.runtime)), 0);
	json_t *st = daemon_status(d.runtime);
	assert_non_null(st);
	assert_non_null(json_object_get(st, "clients"));
	json_decref(st);
	pipe_put(go[1]);
	int rc = join(p);
	if (rc)
		fail_msg("the filler failed at step %d", rc);
	for (int i = 0; i < 2; i++) {
		close(ready[i]);
		close(go[i]);
	}
	gd_finish(&d);
}

/* ------------------------------------- item 5: whose clients are shown */

struct viewer {
	const char *runtime;
	int ready, go;
	int expect_all; /* 1: an admin (sees root's client too) */
};

static int viewer(void *arg)
{
	struct viewer *v = arg;
	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = v->runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	if (gpusys_attach(&o, &c) < 0)
		return 1;
	json_t *st = ctl_status(v->runtime);
	if (!st)
		return 2;
	json_t *cl = json_object_get(st, "clients"), *e;
	size_t i, mine = 0, others = 0;
	json_array_foreach(cl, i, e)
	{
		if (json_integer_value(json_object_get(e, "uid")) == (json_int_t)getuid() &&
		    json_integer_value(json_object_get(e, "id")) == gpusys_client_id(c))
			mine++;
		else
			others++;
	}
	const char *shown = json_string_value(json_object_get(st, "clients_shown"));
	int rc = 0;
	/* gpusysctl says that others' clients are not shown. */
	char cmd[512], out[4096] = "";
	snprintf(cmd, sizeof(cmd), "'%s' --runtime-dir '%s' status", getenv("GPUSYSCTL_BIN"), v->runtime);
	FILE *f = popen(cmd, "r");
	size_t got = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
	out[got] = 0;
	int ctl_ok = f && pclose(f) == 0;
	bool says_own = strstr(out, "(yours; others' are not shown)") != NULL;
	if (!ctl_ok || says_own == (bool)v->expect_all)
		rc = 7;
	if (rc)
		;
	else if (mine != 1)
		rc = 3;
	else if (v->expect_all && (others != 1 || !shown || strcmp(shown, "all")))
		rc = 4;
	else if (!v->expect_all && (others != 0 || !shown || strcmp(shown, "own") ||
				    json_integer_value(json_object_get(st, "clients_attached")) != 1))
		rc = 5;
	json_decref(st);
	/* The busy ports: root's one (a pending SLEEP) for an admin only. */
	json_t *pj = ctl_ask(v->runtime, "{\"cmd\":\"ports\"}\n");
	json_int_t busy = pj ? json_integer_value(json_object_get(pj, "busy")) : -1;
	json_decref(pj);
	if (!rc && busy != (v->expect_all ? 1 : 0))
		rc = 8;
	pipe_put(v->ready);
	if (!pipe_get(v->go, 10000))
		rc = rc ? rc : 6;
	gpusys_detach(c);
	return rc;
}

/* Run a viewer as uid (with an extra group) while root has one client. */
static void view_as(const struct gd *d, uid_t uid, gid_t group, int expect_all)
{
	gpusys_t *mine;
	int ready[2], go[2];

	struct gpusys_options o = { .runtime_dir = d->runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &mine), 0);
	/* A call of root's pending all along: its port is busy. */
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(mine), &emu), 0);
	gpusys_emu_set_warp(0);
	assert_int_equal(emu_sleep(gpusys_emu_dev(emu), UINT64_C(20) * 1000000000u, 0, GPUSYS_REQ_NOREPLY), 0);
	long t0 = now_ms();
	for (;;) {
		json_t *pj = control_request(d->runtime, "{\"cmd\":\"ports\"}\n");
		json_int_t busy = json_integer_value(json_object_get(pj, "busy"));
		json_decref(pj);
		if (busy == 1)
			break;
		if (now_ms() - t0 > 2000)
			fail_msg("root's SLEEP is not pending (%lld busy ports)", (long long)busy);
		usleep(5000);
	}
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	struct viewer v = { .runtime = d->runtime, .ready = ready[1], .go = go[0], .expect_all = expect_all };
	pid_t p = spawn_as(uid, group, viewer, &v);
	assert_true(pipe_get(ready[0], 10000));
	/* Root sees both, and the user's uid on theirs. */
	json_t *st = daemon_status(d->runtime);
	assert_non_null(st);
	const char *shown = json_string_value(json_object_get(st, "clients_shown"));
	assert_non_null(shown);
	assert_string_equal(shown, "all");
	json_t *cl = json_object_get(st, "clients"), *e;
	size_t i, theirs = 0;
	assert_int_equal(json_array_size(cl), 2);
	json_array_foreach(cl, i, e) theirs += json_integer_value(json_object_get(e, "uid")) == (json_int_t)uid;
	assert_int_equal(theirs, 1);
	json_decref(st);
	pipe_put(go[1]);
	int rc = join(p);
	if (rc)
		fail_msg("viewer uid %u (group %u) failed at step %d", (unsigned)uid, (unsigned)group, rc);
	gpusys_emu_close(emu);
	gpusys_detach(mine);
	for (int k = 0; k < 2; k++) {
		close(ready[k]);
		close(go[k]);
	}
}

static void test_status_privacy(void **state)
{
	struct gd d;

	(void)state;
	if (!need_root())
		return;
	/* No admin group: user 65534 sees only its own client. */
	gd_start(&d, NULL);
	open_to_all(&d);
	view_as(&d, 65534, 0, 0);
	gd_finish(&d);
	/* Members of admin_group see all: by primary group (65534's is
	 * 65534) and by a supplementary one (SO_PEERGROUPS). */
	gd_start(&d, "admin_group = 4242\n");
	open_to_all(&d);
	view_as(&d, 65534, 0, 0);
	view_as(&d, 65533, 4242, 1);
	gd_finish(&d);
	gd_start(&d, "admin_group = 65534\n");
	open_to_all(&d);
	view_as(&d, 65534, 0, 1);
	gd_finish(&d);
}

/* ---------------------------------- item 6: replies after a half-close */

static size_t replies_after_half_close(const struct gd *d, const char *requests, size_t len, size_t *ret_ok)
{
	int fd = ctl_connect(d->runtime);
	assert_true(fd >= 0);
	assert_true(send_all(fd, requests, len));
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	/* Read slowly at first: the daemon must hold the replies it could
	 * not send yet. */
	usleep(200000);
	size_t lines = 0, ok = 0, cap = 1 << 20, n = 0;
	char *buf = malloc(cap);
	assert_non_null(buf);
	long t0 = now_ms();
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 3000) <= 0)
			fail_msg("the daemon neither answered nor closed within 3 s (%zu replies so far)", lines);
		ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
		assert_true(k >= 0);
		if (k == 0)
			break; /* all answered: the daemon closed */
		n += (size_t)k;
		buf[n] = 0;
		char *nl;
		while ((nl = strchr(buf, '\n'))) {
			*nl = 0;
			lines++;
			ok += strstr(buf, "\"clients\"") != NULL;
			n -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, n + 1);
		}
		assert_true(now_ms() - t0 < 30000);
	}
	assert_int_equal(n, 0); /* nothing but whole lines */
	free(buf);
	close(fd);
	*ret_ok = ok;
	return lines;
}

static void test_half_close(void **state)
{
	enum { N = 2000 };
	static const char req[] = "{\"cmd\":\"status\"}\n";
	struct gd d;
	size_t ok;

	(void)state;
	gd_start(&d, NULL);
	/* A client, so that each reply has some size (> 500 KiB in all). */
	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	char *many = malloc(N * (sizeof(req) - 1) + 1);
	assert_non_null(many);
	for (int i = 0; i < N; i++)
		memcpy(many + i * (sizeof(req) - 1), req, sizeof(req) - 1);
	assert_int_equal(replies_after_half_close(&d, many, N * (sizeof(req) - 1), &ok), N);
	assert_int_equal(ok, N);
	free(many);
	/* The last request needs no newline when the sender is done. */
	assert_int_equal(replies_after_half_close(&d, "{\"cmd\":\"status\"}", 16, &ok), 1);
	assert_int_equal(ok, 1);
	gpusys_detach(c);
	gd_finish(&d);
}

/* --------------------------------------- item 4: client slots per user */

static int attach_once(void *arg)
{
	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = arg, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	if (gpusys_attach(&o, &c) < 0)
		return 1;
	gpusys_detach(c);
	return 0;
}

static void test_clients_per_uid(void **state)
{
	struct gd d;
	gpusys_t *c[4];

	(void)state;
	gd_start(&d, "max_clients_per_uid = 3\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	for (int i = 0; i < 3; i++)
		assert_int_equal(gpusys_attach(&o, &c[i]), 0);
	char expect[128];
	snprintf(expect, sizeof(expect), "uid %u already has 3 clients attached", (unsigned)getuid());
	for (int i = 0; i < 3; i++) {
		assert_int_equal(gpusys_attach(&o, &c[3]), -EUSERS);
		if (!strstr(gpusys_last_error(), expect))
			fail_msg("expected \"%s\" in \"%s\"", expect, gpusys_last_error());
	}
	/* Another user is not affected. */
	if (geteuid() == 0) {
		open_to_all(&d);
		assert_int_equal(join(spawn_as(65534, 0, attach_once, d.runtime)), 0);
	}
	/* A slot freed is a slot again. */
	gpusys_detach(c[1]);
	long t0 = now_ms();
	int r;
	while ((r = gpusys_attach(&o, &c[1])) == -EUSERS && now_ms() - t0 < 2000)
		usleep(5000); /* the detach reaches the daemon's loop */
	assert_int_equal(r, 0);
	for (int i = 0; i < 3; i++)
		gpusys_detach(c[i]);
	char *log = gd_log(&d);
	assert_non_null(strstr(log, expect));
	free(log);
	gd_finish(&d);
}

/* ------------------------------------------- item 7: log rate limit */

static void test_log_rate_limit(void **state)
{
	enum { N = 300 };
	struct gd d;

	(void)state;
	gd_start(&d, NULL);
	long t0 = now_ms();
	/* Connections that close without a hello: each would log a line
	 * (any user can open them as fast as they like). */
	for (int i = 0; i < N; i++)
		close(raw_connect(d.runtime));
	/* Wait until every one is either logged or counted as suppressed. */
	size_t lines;
	json_int_t dropped;
	for (;;) {
		json_t *st = daemon_status(d.runtime);
		dropped = json_integer_value(json_object_get(st, "log_lines_suppressed"));
		json_decref(st);
		char *log = gd_log(&d);
		lines = count_str(log, "closed during the handshake");
		free(log);
		if (lines + (size_t)dropped >= N)
			break;
		if (now_ms() - t0 > 10000)
			fail_msg("after 10 s: %zu lines and %lld suppressed for %d connections", lines,
				 (long long)dropped, N);
		usleep(20000);
	}
	long secs = (now_ms() - t0) / 1000 + 1;
	if (lines < LOG_BURST || lines > LOG_BURST + (size_t)(LOG_PER_S * secs) + 1)
		fail_msg("%zu lines for %d silent connections in %ld s (burst %d, %d/s)", lines, N, secs, LOG_BURST,
			 LOG_PER_S);
	/* After a pause the site writes again and says what it dropped. */
	usleep(1000000 / LOG_PER_S + 100000);
	close(raw_connect(d.runtime));
	char *log;
	for (long t1 = now_ms();; usleep(20000)) {
		log = gd_log(&d);
		if (strstr(log, "more like this suppressed)"))
			break;
		free(log);
		if (now_ms() - t1 > 5000)
			fail_msg("no line reports the suppressed ones");
	}
	assert_non_null(strstr(log, "closed during the handshake ("));
	free(log);
	/* The daemon stops normally and reports the total. */
	long ms;
	int ws = gd_stop(&d, &ms);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	log = gd_log(&d);
	assert_non_null(strstr(log, "log lines suppressed by the rate limit)"));
	free(log);
	gd_cleanup(&d);
}

/* ------------------------------------ item 8: --config that is no file */

static void test_config_not_a_file(void **state)
{
	struct gd d;
	char fifo[256];

	(void)state;
	gd_prepare(&d, NULL);
	snprintf(fifo, sizeof(fifo), "%s/fifo", d.dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	const char *paths[] = { "/dev/zero", fifo };
	for (int i = 0; i < 2; i++) {
		const char *extra[] = { "--config", paths[i], NULL }; /* the last --config counts */
		long t0 = now_ms();
		pid_t p = gd_spawn(&d, extra);
		int ws = wait_exit(p, 2000);
		if (ws < 0) {
			kill(p, SIGKILL);
			waitpid(p, NULL, 0);
			fail_msg("gpusysd --config %s still running after 2 s", paths[i]);
		}
		assert_true(WIFEXITED(ws));
		assert_int_equal(WEXITSTATUS(ws), 1);
		assert_true(now_ms() - t0 < 2000);
	}
	char *log = gd_log(&d);
	assert_non_null(strstr(log, "/dev/zero: not a regular file (a character device)"));
	assert_non_null(strstr(log, "fifo: not a regular file (a FIFO)"));
	free(log);
	gd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_killed_mid_call),
		cmocka_unit_test(test_daemon_killed_dozing),
		cmocka_unit_test(test_control_per_uid),
		cmocka_unit_test(test_control_root_reserve),
		cmocka_unit_test(test_status_privacy),
		cmocka_unit_test(test_half_close),
		cmocka_unit_test(test_clients_per_uid),
		cmocka_unit_test(test_log_rate_limit),
		cmocka_unit_test(test_config_not_a_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
