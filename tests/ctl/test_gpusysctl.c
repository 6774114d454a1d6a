/* SPDX-License-Identifier: MIT */
/* gpusysctl and the control protocol against the real daemon. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"

static char *ctl(const struct gd *d, const char *a1, const char *a2, int *ret_status, char **ret_err)
{
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", d->runtime, a1, a2, NULL };
	char *out, *err;
	*ret_status = run_capture(argv, &out, &err);
	if (ret_err)
		*ret_err = err;
	else
		free(err);
	return out;
}

/* A line of the client table that starts with this id and has pid and comm. */
static bool table_has(const char *out, unsigned id, pid_t pid, const char *comm)
{
	char want_id[32], want_pid[32];
	snprintf(want_id, sizeof(want_id), "%u", id);
	snprintf(want_pid, sizeof(want_pid), "%d", (int)pid);
	for (const char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		char buf[512];
		size_t n = strcspn(line, "\n");
		if (n >= sizeof(buf))
			continue;
		memcpy(buf, line, n);
		buf[n] = 0;
		char *tok[4];
		int k = 0;
		for (char *save, *s = strtok_r(buf, " ", &save); s && k < 4; s = strtok_r(NULL, " ", &save))
			tok[k++] = s;
		if (k == 4 && !strcmp(tok[0], want_id) && !strcmp(tok[1], want_pid) && !strcmp(tok[3], comm))
			return true;
	}
	return false;
}

static void test_status_lists_client(void **state)
{
	struct gd d;
	gpusys_t *c;
	int st;
	char comm[32] = "";

	(void)state;
	prctl(PR_GET_NAME, comm);
	gd_start(&d, NULL);
	char *out = ctl(&d, "status", NULL, &st, NULL);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "0 clients attached"));
	free(out);

	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 12,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	unsigned id = gpusys_client_id(c);
	out = ctl(&d, "status", NULL, &st, NULL);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "1 client attached"));
	if (!table_has(out, id, getpid(), comm))
		fail_msg("client %u (pid %d, %s) not in:\n%s", id, (int)getpid(), comm, out);
	free(out);

	gpusys_detach(c);
	long t0 = now_ms();
	for (;;) {
		out = ctl(&d, "status", NULL, &st, NULL);
		bool listed = table_has(out, id, getpid(), comm);
		free(out);
		if (!listed)
			break;
		if (now_ms() - t0 > 1000)
			fail_msg("client %u still listed 1 s after detach", id);
		usleep(5000);
	}
	gd_finish(&d);
}

static void test_status_json(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	int st;

	(void)state;
	gd_start(&d, "pollers = 1\nworkers = 2\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 3,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < 250; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);

	char *out = ctl(&d, "status", "--json", &st, NULL);
	assert_int_equal(st, 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "runtime_dir")), d.runtime);
	assert_int_equal(json_integer_value(json_object_get(j, "pid")), d.pid);
	assert_int_equal(json_integer_value(json_object_get(j, "pollers")), 1);
	assert_int_equal(json_integer_value(json_object_get(j, "workers")), 2);
	/* No GPU: every worker is the default group's, after its poller. */
	json_t *dw = json_object_get(j, "default_workers");
	assert_int_equal(json_integer_value(json_object_get(dw, "count")), 2);
	assert_int_equal(json_integer_value(json_object_get(dw, "first_slot")), 1);
	assert_int_equal(json_array_size(json_object_get(dw, "ran")), 2);
	assert_int_equal(json_integer_value(json_object_get(j, "clients_attached")), 1);
	assert_int_equal(json_integer_value(json_object_get(j, "requests_served")), 250);
	assert_true(json_is_string(json_object_get(j, "version")));
	assert_true(json_integer_value(json_object_get(j, "uptime_s")) >= 0);
	json_t *me = status_client(j, gpusys_client_id(c));
	assert_non_null(me);
	const char *keys[] = { "id", "pid", "uid", "gid", "comm", "ports", "ports_in_use", "requests", "rejected",
			       "attached_s" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!json_object_get(me, keys[i]))
			fail_msg("client entry lacks \"%s\": %s", keys[i], out);
	assert_int_equal(json_integer_value(json_object_get(me, "requests")), 250);
	assert_int_equal(json_integer_value(json_object_get(me, "ports")), 3);
	assert_int_equal(json_integer_value(json_object_get(me, "gid")), getgid());
	assert_int_equal(json_integer_value(json_object_get(me, "ports_in_use")), 0);
	/* an emulated client: no GPU, a memfd channel */
	assert_int_equal(json_integer_value(json_object_get(me, "cuda_device")), -1);
	assert_string_equal(json_string_value(json_object_get(me, "memory")), "memfd");
	json_decref(j);
	free(out);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

/* A client that reported a copy (common/wire.h, wire 4): its counters in
 * the status JSON, a line in `status` and in `clients`. */
static void test_copies_shown(void **state)
{
	struct gd d;
	int st;

	(void)state;
	gd_start(&d, NULL);
	struct gpusys_hello h;
	hello_init(&h);
	int s = raw_connect(d.runtime);
	assert_int_equal(send(s, &h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
	struct gpusys_welcome w;
	int memfd;
	assert_int_equal(raw_recv_welcome(s, &w, &memfd), 0);
	assert_int_equal(w.status, 0);
	close(memfd);
	struct gpusys_report r = {
		.magic = GPUSYS_REPORT_MAGIC, .kind = GPUSYS_REPORT_COPY, .length = sizeof(r),
		.direction = 0, .producers_open = 4, .producers_end = 6,
		.bytes = 256 << 20, .ns = (256 << 20) / 40, .added = 3, .taken_back = 1,
	};
	assert_int_equal(send(s, &r, sizeof(r), MSG_NOSIGNAL), (ssize_t)sizeof(r));

	const char *want = "1 copy, 256.0 MiB; last: host to device 256.0 MiB at 40.00 GB/s, producers 4 -> 6 "
			   "(3 added, 1 taken back since open)";
	long t0 = now_ms();
	char *out;
	for (;;) {
		out = ctl(&d, "status", NULL, &st, NULL);
		assert_int_equal(st, 0);
		if (strstr(out, want))
			break;
		free(out);
		if (now_ms() - t0 > 2000)
			fail_msg("gpusysctl status never showed the copy");
		usleep(5000);
	}
	assert_non_null(strstr(out, "BULK COPIES"));
	free(out);
	out = ctl(&d, "clients", NULL, &st, NULL);
	assert_int_equal(st, 0);
	char line[256];
	snprintf(line, sizeof(line), "copies: %s", want);
	if (!strstr(out, line))
		fail_msg("gpusysctl clients lacks \"%s\":\n%s", line, out);
	free(out);

	out = ctl(&d, "status", "--json", &st, NULL);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	json_t *cp = json_object_get(status_client(j, w.client_id), "copies");
	assert_int_equal(json_integer_value(json_object_get(cp, "count")), 1);
	assert_int_equal(json_integer_value(json_object_get(cp, "bytes")), 256 << 20);
	json_t *last = json_object_get(cp, "last");
	assert_string_equal(json_string_value(json_object_get(last, "direction")), "htod");
	assert_int_equal(json_integer_value(json_object_get(last, "producers_end")), 6);
	json_decref(j);
	free(out);
	close(s);
	gd_finish(&d);
}

static void test_not_running(void **state)
{
	struct gd d;
	int st;
	char *err;

	(void)state;
	gd_prepare(&d, NULL);
	char *out = ctl(&d, "status", NULL, &st, &err);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	char expect[256];
	snprintf(expect, sizeof(expect), "gpusysctl: gpusysd is not running at %s", d.runtime);
	if (!strstr(err, expect))
		fail_msg("expected \"%s\" in: %s", expect, err);
	assert_string_equal(out, "");
	free(out);
	free(err);

	out = ctl(&d, "frobnicate", NULL, &st, &err);
	assert_int_equal(WEXITSTATUS(st), 2);
	assert_non_null(strstr(err, "unknown command 'frobnicate'"));
	free(out);
	free(err);
	gd_cleanup(&d);
}

/* ---------------------------------------------- the control protocol */

static int control_connect(const struct gd *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", d->runtime, GPUSYS_CONTROL_NAME) >=
	    (int)sizeof(sa.sun_path))
		fail_msg("path too long");
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		assert_true(n > 0);
		buf += n;
		len -= (size_t)n;
	}
}

/* Read exactly one line (the connection stays open). */
static json_t *read_reply(int fd)
{
	char buf[65536];
	size_t n = 0;
	while (n < sizeof(buf) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 2000) <= 0)
			fail_msg("no reply within 2 s");
		ssize_t k = recv(fd, buf + n, 1, 0);
		assert_true(k == 1);
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	json_t *j = json_loads(buf, 0, NULL);
	if (!j)
		fail_msg("reply is not JSON: %s", buf);
	return j;
}

static void expect_error(int fd, const char *needle)
{
	json_t *j = read_reply(fd);
	const char *e = json_string_value(json_object_get(j, "error"));
	if (!e || !strstr(e, needle))
		fail_msg("expected an error with \"%s\", got %s", needle, json_dumps(j, 0));
	json_decref(j);
}

static void expect_status(int fd)
{
	json_t *j = read_reply(fd);
	assert_null(json_object_get(j, "error"));
	assert_non_null(json_object_get(j, "clients"));
	json_decref(j);
}

static void test_control_errors(void **state)
{
	struct gd d;

	(void)state;
	gd_start(&d, NULL);
	int fd = control_connect(&d);

	const char *status = "{\"cmd\":\"status\"}\n";
	send_all(fd, "{not json\n", 10);
	expect_error(fd, "bad JSON");
	send_all(fd, status, strlen(status));
	expect_status(fd);
	send_all(fd, "{\"cmd\":\"reboot\"}\n", 17);
	expect_error(fd, "unknown command 'reboot'");
	send_all(fd, "[1,2]\n", 6);
	expect_error(fd, "expected a JSON object");
	send_all(fd, "{\"cmd\":5}\n", 10);
	expect_error(fd, "missing \"cmd\"");
	/* Empty lines are no requests; CRLF is accepted. */
	send_all(fd, "\n\r\n{\"cmd\":\"status\"}\r\n", 21);
	expect_status(fd);

	/* A line over 64 KiB: one error, and the next line works. */
	size_t big = 70 * 1024;
	char *line = malloc(big + 1);
	memset(line, ' ', big);
	line[0] = '{';
	line[big] = '\n';
	send_all(fd, line, big + 1);
	free(line);
	expect_error(fd, "line longer than 65536 bytes");
	send_all(fd, status, strlen(status));
	expect_status(fd);

	/* Several requests in one write: one reply each, in order. */
	char many[512] = "";
	for (int i = 0; i < 5; i++)
		strcat(many, status);
	strcat(many, "{\"cmd\":\"x\"}\n");
	send_all(fd, many, strlen(many));
	for (int i = 0; i < 5; i++)
		expect_status(fd);
	expect_error(fd, "unknown command");
	close(fd);

	/* A half-sent line on a closed connection harms nothing. */
	fd = control_connect(&d);
	send_all(fd, "{\"cmd\":", 7);
	close(fd);
	json_decref(daemon_status(d.runtime));
	gd_finish(&d);
}

/* The commands beyond status: clients, watch, --version, options after
 * the command, usage errors (exit 2) and a daemon that says no (exit 1). */
/* gpusysctl transfers: a client writing a file by block calls shows with
 * the handle, the path, bytes growing and a rate; once it stops, nothing. */
struct writer {
	const gpusys_dev_t *dev;
	int32_t handle;
	atomic_int stop;
	atomic_int rounds;
	int err;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	enum { N = 4 << 20 };
	uint8_t *buf = calloc(1, N);
	while (!atomic_load(&w->stop)) {
		int64_t r = gpusys_emu_pwrite_block(w->dev, w->handle, buf, N, 0);
		if (r != N) {
			w->err = r < 0 ? (int)r : -EIO;
			break;
		}
		atomic_fetch_add(&w->rounds, 1);
		usleep(2000); /* a paced transfer: the reports must see it between calls */
	}
	free(buf);
	return NULL;
}

static json_t *transfers_of(const struct gd *d, long long *ret_bytes, char **ret_path)
{
	int st;
	char *out = ctl(d, "transfers", "--json", &st, NULL);
	assert_int_equal(st, 0);
	json_t *r = json_loads(out, 0, NULL);
	free(out);
	assert_non_null(r);
	json_t *list = json_object_get(r, "transfers");
	*ret_bytes = -1;
	json_t *t = json_array_get(list, 0);
	if (t) {
		assert_int_equal(json_integer_value(json_object_get(t, "pid")), getpid());
		assert_string_equal(json_string_value(json_object_get(t, "direction")), "write");
		*ret_bytes = json_integer_value(json_object_get(t, "bytes"));
		free(*ret_path);
		*ret_path = strdup(json_string_value(json_object_get(t, "path")));
	}
	return r;
}

static void test_transfers(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	(void)state;
	gd_start(&d, "channel_bulk_bytes = 32M\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 3, .bulk_bytes = 16u << 20,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	char path[256];
	snprintf(path, sizeof(path), "%s/transfer.bin", d.dir);
	const char *paths[GPUSYS_WARP_LANES] = { path };
	int flags[GPUSYS_WARP_LANES] = { O_WRONLY | O_CREAT | O_TRUNC };
	uint32_t mode[GPUSYS_WARP_LANES] = { 0600 };
	int64_t h[GPUSYS_WARP_LANES];
	assert_int_equal(gpusys_emu_file_open(gpusys_emu_dev(emu), 1, paths, flags, mode, h), 0);
	assert_true(h[0] > 0);

	/* Nothing before the first block call. */
	long long b0, b1;
	char *p = NULL;
	json_decref(transfers_of(&d, &b0, &p));
	assert_int_equal(b0, -1);

	struct writer w = { .dev = gpusys_emu_dev(emu), .handle = (int32_t)h[0] };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	while (atomic_load(&w.rounds) < 3 && !w.err)
		usleep(1000);
	json_t *r0 = transfers_of(&d, &b0, &p);
	usleep(300 * 1000);
	json_t *r1 = transfers_of(&d, &b1, &p);
	assert_true(b0 > 0);
	assert_true(b1 > b0);
	assert_string_equal(p, path);
	json_t *t1 = json_array_get(json_object_get(r1, "transfers"), 0);
	assert_int_equal(json_integer_value(json_object_get(t1, "handle")), h[0]);
	assert_true(json_real_value(json_object_get(t1, "gb_per_s")) > 0);
	json_decref(r0);
	json_decref(r1);
	free(p);

	/* The table names the file. */
	int st;
	char *out = ctl(&d, "transfers", NULL, &st, NULL);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "1 transfer active"));
	assert_non_null(strstr(out, "transfer.bin"));
	assert_non_null(strstr(out, " write "));
	free(out);

	atomic_store(&w.stop, 1);
	pthread_join(t, NULL);
	assert_int_equal(w.err, 0);
	/* Done: not within a 100 ms window once 200 ms have passed. */
	usleep(200 * 1000);
	json_t *q = control_request(d.runtime, "{\"cmd\":\"transfers\",\"window_ms\":100}\n");
	assert_non_null(q);
	assert_int_equal(json_array_size(json_object_get(q, "transfers")), 0);
	json_decref(q);
	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

static void test_more_commands(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	int st;

	(void)state;
	gd_start(&d, "pollers = 1\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 3,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO |
			  GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < 40; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);

	/* clients: our pid, the warp requests, and our command line. */
	char *out = ctl(&d, "clients", NULL, &st, NULL);
	assert_int_equal(st, 0);
	char pid[32];
	snprintf(pid, sizeof(pid), " %d ", (int)getpid());
	assert_non_null(strstr(out, pid));
	assert_non_null(strstr(out, "WARP-REQUESTS"));
	assert_non_null(strstr(out, "BYTES"));
	assert_non_null(strstr(out, " 40 "));
	assert_non_null(strstr(out, "ctl_test_gpusysctl"));
	free(out);

	/* Options after the command; --json of clients is the status object. */
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "clients", "--json", "--runtime-dir", d.runtime, NULL };
	char *err;
	st = run_capture(argv, &out, &err);
	assert_int_equal(st, 0);
	json_t *j = json_loads(out, 0, NULL);
	assert_non_null(j);
	json_t *me = status_client(j, gpusys_client_id(c));
	assert_non_null(me);
	assert_true(json_is_integer(json_object_get(me, "bytes_in")));
	assert_true(json_is_integer(json_object_get(me, "bytes_out")));
	assert_int_equal(json_integer_value(json_object_get(me, "errors")), 0);
	json_decref(j);
	free(out), free(err);

	/* watch: two rounds 100 ms apart, the NOOP row with its count. */
	const char *wargv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", d.runtime, "watch", "--interval", "100",
				"--count", "2", NULL };
	st = run_capture(wargv, &out, &err);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "PER SECOND"));
	assert_non_null(strstr(out, "noop"));
	free(out), free(err);

	out = ctl(&d, "--version", NULL, &st, NULL);
	assert_int_equal(st, 0);
	assert_non_null(strstr(out, "gpusysctl "));
	free(out);

	/* Usage errors: 2. */
	out = ctl(&d, "gpu-fail", NULL, &st, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	free(out), free(err);
	out = ctl(&d, "status", "--histogram", &st, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
	free(out), free(err);
	/* The daemon says no: 1, with its words. */
	out = ctl(&d, "gpu-fail", "GPU-00000000-0000-0000-0000-000000000009", &st, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	assert_non_null(strstr(err, "no such GPU"));
	free(out), free(err);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}


/* Issue 32: `watch --json` was refused (exit 2) while the manuals said every
 * command takes --json. It is NDJSON: one object per refresh, one a line,
 * with the status, the latency reply and the rates over the last interval
 * (null in the first round). And `latency` printed 0.0 us percentiles for
 * an opcode none of whose requests was timed: "-" now. */
static void test_watch_json_and_untimed(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;
	int st;

	(void)state;
	/* One poller times one fast-path request in 8 (STATS_SAMPLE): three
	 * NOOPs of a fresh daemon are counted and none is timed. */
	gd_start(&d, "pollers = 1\n");
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 3,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO |
			  GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0x1u), 0);

	char *err, *out = ctl(&d, "latency", NULL, &st, NULL);
	assert_int_equal(st, 0);
	const char *row = strstr(out, "noop");
	assert_non_null(row);
	char line[256];
	snprintf(line, sizeof(line), "%.*s", (int)strcspn(row, "\n"), row);
	if (strstr(line, "0.0") || !strstr(line, " -"))
		fail_msg("an opcode with no timed request shows a latency: \"%s\"", line);
	free(out);

	const char *wargv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", d.runtime, "watch", "--json", "--interval",
				"100", "--count", "3", NULL };
	st = run_capture(wargv, &out, &err);
	if (st != 0)
		fail_msg("watch --json: status %d, %s", st, err);
	unsigned lines = 0;
	for (char *save, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
		json_error_t je;
		json_t *j = json_loads(l, 0, &je);
		if (!json_is_object(j))
			fail_msg("line %u is no JSON object (%s): %s", lines + 1, je.text, l);
		assert_int_equal(json_integer_value(json_object_get(j, "round")), lines);
		assert_int_equal(json_integer_value(json_object_get(j, "interval_ms")), 100);
		assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "status"), "pid")), d.pid);
		assert_true(json_is_array(json_object_get(json_object_get(j, "latency"), "ops")));
		json_t *r, *noop = NULL;
		size_t i;
		json_array_foreach(json_object_get(j, "rates"), i, r) if (!strcmp(json_string_value(json_object_get(r, "name")), "noop"))
			noop = r;
		assert_non_null(noop);
		assert_int_equal(json_integer_value(json_object_get(noop, "count")), 3);
		/* No rate before a second sample; nothing moved since: 0/s. */
		if (lines == 0)
			assert_true(json_is_null(json_object_get(noop, "per_second")));
		else
			assert_true(json_is_number(json_object_get(noop, "per_second")) &&
				    json_number_value(json_object_get(noop, "per_second")) == 0.0);
		json_decref(j);
	}
	assert_int_equal(lines, 3);
	free(out), free(err);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copies_shown),
		cmocka_unit_test(test_status_lists_client),
		cmocka_unit_test(test_status_json),
		cmocka_unit_test(test_not_running),
		cmocka_unit_test(test_control_errors),
		cmocka_unit_test(test_more_commands),
		cmocka_unit_test(test_transfers),
		cmocka_unit_test(test_watch_json_and_untimed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
