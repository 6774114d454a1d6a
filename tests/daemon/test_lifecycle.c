/* SPDX-License-Identifier: MIT */
/* gpusysd start-up and shut-down: signals, the runtime directory and its
 * lock, stale sockets, config errors, and what systemd is told. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "harness.h"

static void assert_contains(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

static void test_start_stop(void **state)
{
	struct gd d;
	struct stat st;
	char path[256];

	(void)state;
	/* Created 0755 whatever the umask; sockets open to everyone. */
	mode_t old = umask(077);
	gd_start(&d, NULL);
	umask(old);
	assert_int_equal(stat(d.runtime, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	snprintf(path, sizeof(path), "%s/gpusysd.sock", d.runtime);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0666);
	json_t *s = daemon_status(d.runtime);
	assert_int_equal(json_integer_value(json_object_get(s, "pid")), d.pid);
	json_decref(s);

	gd_stop(&d, NULL);
	/* A clean stop removes the sockets it made. */
	assert_int_equal(stat(path, &st), -1);
	gd_cleanup(&d);
}

static void test_sigint_with_clients(void **state)
{
	struct gd d;
	gpusys_t *c;

	(void)state;
	gd_start(&d, NULL);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 8,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	struct gpusys_channel_header *h = gpusys_host_channel(c);
	assert_int_equal(h->server_state, GPUSYS_SERVER_RUNNING);

	long t0 = now_ms();
	kill(d.pid, SIGINT);
	int st = wait_exit(d.pid, 3000);
	d.pid = 0;
	assert_true(st >= 0 && WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(now_ms() - t0 < 1000);
	/* Our mapping outlives the daemon, and says it is gone. */
	assert_int_equal(h->server_state, GPUSYS_SERVER_STOPPED);
	gpusys_detach(c);
	gd_cleanup(&d);
}

struct blocked_read {
	const gpusys_dev_t *dev;
	const char *path;
	int open_rc, read_rc;
	atomic_bool opened;
};

static void *blocked_reader(void *arg)
{
	struct blocked_read *b = arg;
	const char *path[GPUSYS_WARP_LANES] = { b->path };
	int flags[GPUSYS_WARP_LANES] = { O_RDWR };
	uint32_t mode[GPUSYS_WARP_LANES] = { 0 }, count[GPUSYS_WARP_LANES] = { 16 };
	int64_t ret[GPUSYS_WARP_LANES];
	char buf[16];
	void *bufs[GPUSYS_WARP_LANES] = { buf };

	gpusys_emu_set_warp(0);
	b->open_rc = gpusys_emu_file_open(b->dev, 1, path, flags, mode, ret);
	int32_t handle[GPUSYS_WARP_LANES] = { (int32_t)ret[0] };
	atomic_store(&b->opened, true);
	if (b->open_rc == 0)
		b->read_rc = gpusys_emu_file_read(b->dev, 1, handle, bufs, count, ret); /* nobody writes */
	return NULL;
}

/* A worker blocked on a client's behalf (a read from an empty FIFO) must
 * not hold up the stop. */
static void test_stop_with_blocked_call(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	char fifo[256];
	pthread_t t;

	(void)state;
	gd_start(&d, NULL);
	snprintf(fifo, sizeof(fifo), "%s/fifo", d.dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	struct blocked_read b = { .dev = gpusys_emu_dev(emu), .path = fifo };
	pthread_create(&t, NULL, blocked_reader, &b);
	while (!atomic_load(&b.opened))
		usleep(1000);
	assert_int_equal(b.open_rc, 0);
	usleep(300000); /* the read is on a worker, waiting */
	json_t *st = daemon_status(d.runtime);
	assert_int_equal(json_integer_value(json_object_get(status_client(st, gpusys_client_id(c)), "ports_in_use")), 1);
	json_decref(st);

	long ms;
	int ws = gd_stop(&d, &ms);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	if (ms > 1000)
		fail_msg("gpusysd took %ld ms to stop with a blocked call", ms);
	pthread_join(t, NULL);
	assert_true(b.read_rc < 0); /* the daemon went away under it */
	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_cleanup(&d);
}

static void test_second_daemon_refused(void **state)
{
	struct gd d;
	char *out, *err, expect[256];

	(void)state;
	gd_start(&d, NULL);
	const char *argv[] = { test_env("GPUSYSD_BIN"), "--runtime-dir", d.runtime, "--config", d.config, NULL };
	int st = run_capture(argv, &out, &err);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	snprintf(expect, sizeof(expect), "gpusysd: another gpusysd is serving %s (pid %d)", d.runtime, (int)d.pid);
	assert_contains(err, expect);
	free(out);
	free(err);

	/* The first one still serves: its sockets were left alone. */
	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	json_t *s = daemon_status(d.runtime);
	assert_int_equal(json_integer_value(json_object_get(s, "clients_attached")), 1);
	json_decref(s);
	gpusys_detach(c);
	gd_finish(&d);
}

/* A daemon that died leaves its socket files; nobody holds the lock. */
static void test_stale_sockets(void **state)
{
	struct gd d;
	const char *names[] = { GPUSYS_SOCKET_NAME, GPUSYS_CONTROL_NAME };

	(void)state;
	gd_prepare(&d, NULL);
	assert_int_equal(mkdir(d.runtime, 0755), 0);
	for (int i = 0; i < 2; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", d.runtime, names[i]) >=
		    (int)sizeof(sa.sun_path))
			fail_msg("path too long");
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		close(fd);
	}
	char dir[sizeof(d.dir)];
	strcpy(dir, d.dir);
	d.pid = gd_spawn(&d, NULL);
	long t0 = now_ms();
	gpusys_t *c = NULL;
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	int rc;
	/* The stale file refuses connections until the daemon replaced it. */
	while ((rc = gpusys_attach(&o, &c)) == -ECONNREFUSED && now_ms() - t0 < 5000)
		usleep(5000);
	assert_int_equal(rc, 0);
	gpusys_detach(c);
	gd_finish(&d);
}

/* expect is looked for after "CONFIG_PATH" when located is set. */
static void check_bad_config(const char *config, const char *extra, bool located, const char *expect)
{
	struct gd d;
	char *out, *err, full[512];

	gd_prepare(&d, config);
	const char *argv[] = { test_env("GPUSYSD_BIN"), "--runtime-dir", d.runtime, "--config", d.config, extra,
			       NULL };
	int st = run_capture(argv, &out, &err);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	snprintf(full, sizeof(full), "%s%s", located ? d.config : "", expect);
	assert_contains(err, full);
	/* Refused before touching the runtime directory. */
	assert_int_equal(access(d.runtime, F_OK), -1);
	free(out);
	free(err);
	gd_cleanup(&d);
}

static void test_bad_config(void **state)
{
	(void)state;
	check_bad_config("# comment\npollers = 1\n\nworkers = banana\n", NULL, true,
			 ":4: bad value 'banana' for workers");
	check_bad_config("frobnicate = 3\n", NULL, true, ":1: unknown key 'frobnicate'");
	check_bad_config("pollers = 1\nmax_ports\n", NULL, true, ":2: expected 'key = value'");
	check_bad_config("max_ports = 16385\n", NULL, true, ":1: bad value '16385' for max_ports");
	check_bad_config("client_mem_budget = 12X\n", NULL, true, ":1: bad value '12X'");
	check_bad_config("workers = -1\n", NULL, true, ":1: bad value '-1'");
	check_bad_config("pollers = 40\nworkers = 40\n", NULL, false, "exceed the 63 progress slots");
	check_bad_config(NULL, "--pollers=x", false, "--pollers: bad value 'x'");
}

static void test_missing_config(void **state)
{
	char *out, *err;
	(void)state;
	const char *argv[] = { test_env("GPUSYSD_BIN"), "--runtime-dir", "/tmp/gpusysd-test-never",
			       "--config", "/nonexistent/gpusysd.conf", NULL };
	int st = run_capture(argv, &out, &err);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	assert_contains(err, "/nonexistent/gpusysd.conf: No such file or directory");
	free(out);
	free(err);
}

static void test_good_config(void **state)
{
	struct gd d;
	(void)state;
	gd_start(&d, "# every key\npollers = 2\nworkers = 3\nmax_clients = 5\nmax_ports = 64\n"
		     "channel_bulk_bytes = 1M\nidle_spin_us = 100\nidle_sleep_us = 20\n"
		     "client_mem_budget = 8MiB\nhandshake_timeout_ms = 1000\n");
	json_t *s = daemon_status(d.runtime);
	assert_int_equal(json_integer_value(json_object_get(s, "pollers")), 2);
	assert_int_equal(json_integer_value(json_object_get(s, "workers")), 3);
	json_decref(s);

	/* The bulk area is bounded by the config. */
	gpusys_t *c;
	struct gpusys_options o = {
					.runtime_dir = d.runtime,
					.num_ports = 1000,
					.bulk_bytes = 64 << 20,
					.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD,
				};
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_num_ports(c), 64);
	struct gpusys_channel_header *h = gpusys_host_channel(c);
	assert_int_equal(h->bulk_bytes, 1 << 20);
	gpusys_detach(c);
	gd_finish(&d);
}

/* systemd's notify protocol, received the way systemd receives it. */
static int notify_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Everything sent so far, "\n"-joined, waiting up to ms for needle. */
static void notify_wait(int fd, char *acc, size_t cap, const char *needle, int ms)
{
	long t0 = now_ms();
	while (!strstr(acc, needle) && now_ms() - t0 < ms) {
		char buf[512];
		ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n <= 0) {
			usleep(2000);
			continue;
		}
		buf[n] = 0;
		strncat(acc, buf, cap - strlen(acc) - 2);
		strcat(acc, "\n");
	}
	assert_contains(acc, needle);
}

static void test_sd_notify(void **state)
{
	struct gd d;
	char path[200], acc[8192] = "";

	(void)state;
	gd_prepare(&d, NULL);
	snprintf(path, sizeof(path), "%s/notify", d.dir);
	int nfd = notify_socket(path);
	setenv("NOTIFY_SOCKET", path, 1);
	d.pid = gd_spawn(&d, NULL);
	notify_wait(nfd, acc, sizeof(acc), "READY=1", 5000);
	notify_wait(nfd, acc, sizeof(acc), "STATUS=0 clients attached", 2000);

	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	notify_wait(nfd, acc, sizeof(acc), "STATUS=1 client attached", 2000);
	gpusys_detach(c);

	/* A second daemon's refusal is an exit path too. */
	char *out, *err;
	const char *argv[] = { test_env("GPUSYSD_BIN"), "--runtime-dir", d.runtime, "--config", d.config, NULL };
	acc[0] = 0;
	run_capture(argv, &out, &err);
	notify_wait(nfd, acc, sizeof(acc), "STOPPING=1", 2000);
	free(out);
	free(err);
	unsetenv("NOTIFY_SOCKET");

	acc[0] = 0;
	kill(d.pid, SIGTERM);
	notify_wait(nfd, acc, sizeof(acc), "STOPPING=1", 2000);
	int st = wait_exit(d.pid, 2000);
	d.pid = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(nfd);
	gd_cleanup(&d);
}

static void test_version_help(void **state)
{
	char *out, *err;
	(void)state;
	const char *v[] = { test_env("GPUSYSD_BIN"), "--version", NULL };
	assert_int_equal(run_capture(v, &out, &err), 0);
	assert_contains(out, "gpusysd ");
	free(out);
	free(err);
	const char *h[] = { test_env("GPUSYSD_BIN"), "--help", NULL };
	assert_int_equal(run_capture(h, &out, &err), 0);
	assert_contains(out, "--runtime-dir");
	free(out);
	free(err);
	const char *bad[] = { test_env("GPUSYSD_BIN"), "--frobnicate", NULL };
	int st = run_capture(bad, &out, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2); /* bad usage, as gpusysctl's */
	free(out);
	free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_stop),
		cmocka_unit_test(test_sigint_with_clients),
		cmocka_unit_test(test_stop_with_blocked_call),
		cmocka_unit_test(test_second_daemon_refused),
		cmocka_unit_test(test_stale_sockets),
		cmocka_unit_test(test_bad_config),
		cmocka_unit_test(test_missing_config),
		cmocka_unit_test(test_good_config),
		cmocka_unit_test(test_sd_notify),
		cmocka_unit_test(test_version_help),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
