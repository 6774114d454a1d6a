/* SPDX-License-Identifier: MIT */
/* Reports after the welcome (common/wire.h, wire 4) against the real
 * gpusysd: good ones are counted in the status, whole or in pieces, from a
 * raw client and through libgpusys; bad ones (magic, kind, length, records
 * that run past the report, descriptors, fields out of bounds or that do
 * not add up) end that client with a goodbye saying why and a log line;
 * a wire-3 client is answered in version 3 and may send nothing; a flood
 * costs the flooder and no memory. A bystander is served throughout. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/fdpass.h"
#include "gpusys/gpusys.h"
#include "libclient/attach/report.h" /* the library's own sending, linked from its objects */
#include "harness.h"

struct fixture {
	struct gd d;
	gpusys_t *bystander;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	gd_start(&f->d, NULL);
	struct gpusys_options o = { .runtime_dir = f->d.runtime, .num_ports = 2,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO |
			 GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &f->bystander), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	gpusys_detach(f->bystander);
	gd_finish(&f->d);
	free(f);
	return 0;
}

/* The bystander is still attached and running. */
static void assert_bystander(struct fixture *f)
{
	struct gpusys_channel_header *h = gpusys_host_channel(f->bystander);
	assert_int_equal(h->server_state, GPUSYS_SERVER_RUNNING);
	json_t *st = daemon_status(f->d.runtime);
	assert_non_null(status_client(st, gpusys_client_id(f->bystander)));
	json_decref(st);
}

/* A raw client that said hello in version; its welcome in *ret_w. */
static int raw_session(struct fixture *f, uint32_t version, struct gpusys_welcome *ret_w)
{
	struct gpusys_hello h;
	hello_init(&h);
	h.wire_version = version;
	int s = raw_connect(f->d.runtime);
	assert_int_equal(send(s, &h, sizeof(h), MSG_NOSIGNAL), (ssize_t)sizeof(h));
	int memfd;
	assert_int_equal(raw_recv_welcome(s, ret_w, &memfd), 0);
	assert_int_equal(ret_w->status, 0);
	assert_true(memfd >= 0);
	close(memfd);
	return s;
}

static struct gpusys_report good_report(uint64_t bytes)
{
	return (struct gpusys_report){
		.magic = GPUSYS_REPORT_MAGIC,
		.kind = GPUSYS_REPORT_COPY,
		.length = sizeof(struct gpusys_report),
		.direction = 0,
		.producers_open = 4,
		.producers_end = 6,
		.bytes = bytes,
		.ns = bytes / 40, /* 40 GB/s */
		.added = 3,
		.taken_back = 1,
	};
}

/* The client's "copies" once its count is want (2 s at most); borrowed
 * from *ret_st, which the caller frees. */
static json_t *copies_when(struct fixture *f, unsigned id, long long want, json_t **ret_st)
{
	long t0 = now_ms();
	for (;;) {
		json_t *st = daemon_status(f->d.runtime);
		json_t *c = status_client(st, id);
		assert_non_null(c);
		json_t *cp = json_object_get(c, "copies");
		assert_true(json_is_object(cp));
		if (json_integer_value(json_object_get(cp, "count")) == want) {
			*ret_st = st;
			return cp;
		}
		json_decref(st);
		if (now_ms() - t0 > 2000)
			fail_msg("client %u: %lld copies never counted", id, want);
		usleep(5000);
	}
}

static void test_reports_counted(void **state)
{
	struct fixture *f = *state;
	struct gpusys_welcome w;
	int s = raw_session(f, GPUSYS_WIRE_VERSION, &w);
	assert_int_equal(w.wire_version, GPUSYS_WIRE_VERSION);

	/* Nothing yet: the member is there, "last" null. */
	json_t *st;
	json_t *cp = copies_when(f, w.client_id, 0, &st);
	assert_true(json_is_null(json_object_get(cp, "last")));
	json_decref(st);

	struct gpusys_report r = good_report(1 << 20);
	assert_int_equal(send(s, &r, sizeof(r), MSG_NOSIGNAL), (ssize_t)sizeof(r));
	/* One in three pieces: joined. */
	r = good_report(256 << 20);
	r.direction = 1;
	const char *p = (const char *)&r;
	assert_int_equal(send(s, p, 5, MSG_NOSIGNAL), 5);
	usleep(20000); /* the daemon sees the first piece alone */
	assert_int_equal(send(s, p + 5, 20, MSG_NOSIGNAL), 20);
	assert_int_equal(send(s, p + 25, sizeof(r) - 25, MSG_NOSIGNAL), (ssize_t)(sizeof(r) - 25));

	cp = copies_when(f, w.client_id, 2, &st);
	assert_int_equal(json_integer_value(json_object_get(cp, "bytes")), (1 << 20) + (256 << 20));
	json_t *last = json_object_get(cp, "last");
	assert_string_equal(json_string_value(json_object_get(last, "direction")), "dtoh");
	assert_int_equal(json_integer_value(json_object_get(last, "bytes")), 256 << 20);
	assert_int_equal(json_integer_value(json_object_get(last, "producers_open")), 4);
	assert_int_equal(json_integer_value(json_object_get(last, "producers_end")), 6);
	assert_int_equal(json_integer_value(json_object_get(last, "added")), 3);
	assert_int_equal(json_integer_value(json_object_get(last, "taken_back")), 1);
	double gbs = json_number_value(json_object_get(last, "gbs"));
	assert_true(gbs > 39.9 && gbs < 40.1);
	json_decref(st);
	close(s);
	assert_bystander(f);
}

/* libgpusys lists a connection whose welcome said wire 4, and its reports
 * reach the daemon as that client's. */
static void test_library_reports(void **state)
{
	struct fixture *f = *state;
	/* The bystander's connection takes reports: any device will do. */
	struct gpusys_report r = good_report(64 << 20);
	assert_int_equal(gpusys_report_send(&r, -1), 0);
	json_t *st;
	json_t *cp = copies_when(f, gpusys_client_id(f->bystander), 1, &st);
	assert_int_equal(json_integer_value(json_object_get(cp, "bytes")), 64 << 20);
	json_decref(st);
	assert_bystander(f);
}

/* A wire-3 hello still attaches (a client across a daemon upgrade), is
 * answered in version 3, and its connection carries nothing: a report from
 * it is a protocol error, as any byte was. */
static void test_wire3_client(void **state)
{
	struct fixture *f = *state;
	struct gpusys_welcome w;
	int s = raw_session(f, 3, &w);
	assert_int_equal(w.wire_version, 3);
	struct gpusys_report r = good_report(4096);
	assert_int_equal(send(s, &r, sizeof(r), MSG_NOSIGNAL), (ssize_t)sizeof(r));
	assert_true(wait_peer_close(s, 2000));
	close(s);
	char *log = gd_log(&f->d);
	char want[64];
	snprintf(want, sizeof(want), "client %u detached (unexpected message)", w.client_id);
	assert_non_null(strstr(log, want));
	free(log);
	assert_bystander(f);
}

/* Send len bytes of msg (in one record) as a wire-4 client; the client
 * must get a goodbye (-EPROTO) whose message has want, be hung up on, and
 * the log must say why. */
static void expect_ended(struct fixture *f, const void *msg, size_t len, const int *fds, unsigned nfds,
			 const char *want)
{
	struct gpusys_welcome w;
	int s = raw_session(f, GPUSYS_WIRE_VERSION, &w);
	assert_int_equal(fdpass_send(s, msg, len, fds, nfds, MSG_NOSIGNAL), (ssize_t)len);
	struct pollfd p = { .fd = s, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 2000), 1);
	struct gpusys_welcome bye;
	assert_int_equal(recv(s, &bye, sizeof(bye), MSG_DONTWAIT), (ssize_t)sizeof(bye));
	assert_int_equal(bye.magic, GPUSYS_GOODBYE_MAGIC);
	assert_int_equal(bye.status, -EPROTO);
	bye.message[sizeof(bye.message) - 1] = 0;
	if (!strstr(bye.message, want))
		fail_msg("goodbye \"%s\" does not say \"%s\"", bye.message, want);
	assert_true(wait_peer_close(s, 2000));
	close(s);
	char *log = gd_log(&f->d);
	char line[64];
	snprintf(line, sizeof(line), "client %u (pid", w.client_id);
	const char *at = strstr(log, line);
	if (!at || !strstr(at, "sent a bad report") || !strstr(at, want))
		fail_msg("no log line for client %u saying \"%s\":\n%s", w.client_id, want, log);
	free(log);
	assert_bystander(f);
}

static void test_bad_reports(void **state)
{
	struct fixture *f = *state;
	struct gpusys_report r;

	r = good_report(4096);
	r.magic = 0x12345678;
	expect_ended(f, &r, sizeof(r), NULL, 0, "not a report (magic 0x12345678");
	/* Judged by its first piece, not after bytes that never come. */
	expect_ended(f, &r, 4, NULL, 0, "not a report");
	r = good_report(4096);
	r.kind = 9;
	expect_ended(f, &r, sizeof(r), NULL, 0, "unknown report kind 9");
	r = good_report(4096);
	r.length = 64;
	expect_ended(f, &r, sizeof(r), NULL, 0, "copy report of 64 bytes, expected 56");

	/* Records that run past the report: one long, two in one. */
	char big[sizeof(r) * 2];
	r = good_report(4096);
	memcpy(big, &r, sizeof(r));
	memcpy(big + sizeof(r), &r, sizeof(r));
	expect_ended(f, big, sizeof(r) + 1, NULL, 0, "a record of 57 bytes runs past the end of the report");
	expect_ended(f, big, sizeof(big), NULL, 0, "a record of 112 bytes runs past");

	/* Descriptors along with it: refused (and closed by the kernel). */
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	expect_ended(f, &r, sizeof(r), &fd, 1, "descriptors sent with a report");
	close(fd);

	/* Fields out of bounds. */
	r = good_report(4096);
	r.direction = 2;
	expect_ended(f, &r, sizeof(r), NULL, 0, "direction 2");
	r = good_report(4096);
	r.reserved = 1;
	expect_ended(f, &r, sizeof(r), NULL, 0, "reserved 1");
	r = good_report(4096);
	r.bytes = 0;
	expect_ended(f, &r, sizeof(r), NULL, 0, "copy report of 0 bytes");
	r = good_report(4096);
	r.ns = 0;
	expect_ended(f, &r, sizeof(r), NULL, 0, "in 0 ns");
	r = good_report(4096);
	r.bytes = UINT64_MAX;
	expect_ended(f, &r, sizeof(r), NULL, 0, "copy report of 18446744073709551615 bytes");
	r = good_report(1 << 30);
	r.ns = 10; /* 100 GB in a ns */
	expect_ended(f, &r, sizeof(r), NULL, 0, "faster than 10000 GB/s");
	r = good_report(4096);
	r.producers_open = 0;
	expect_ended(f, &r, sizeof(r), NULL, 0, "with 0 -> 6 producers");
	r = good_report(4096);
	r.producers_end = 100000;
	expect_ended(f, &r, sizeof(r), NULL, 0, "with 4 -> 100000 producers");
	r = good_report(4096);
	r.added = UINT64_MAX;
	expect_ended(f, &r, sizeof(r), NULL, 0, "producers added");
	r = good_report(4096);
	r.taken_back = 0; /* 4 + 3 - 0 != 6 */
	expect_ended(f, &r, sizeof(r), NULL, 0, "does not add up");
}

static long rss_kib(pid_t pid)
{
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *fp = fopen(path, "re");
	assert_non_null(fp);
	long kib = -1;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(fp);
	return kib;
}

/* Send reports on s without blocking for ms; status requests every 1000
 * sends when ask (their slowest answer in *ret_slowest). Reports sent. */
static long long flood(struct fixture *f, int s, int ms, bool ask, long long *ret_full, long *ret_slowest)
{
	struct gpusys_report r = good_report(4096);
	long long sent = 0;
	long t0 = now_ms();
	while (now_ms() - t0 < ms) {
		for (int i = 0; i < 1000; i++) {
			ssize_t n = send(s, &r, sizeof(r), MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n == (ssize_t)sizeof(r))
				sent++;
			else if (n < 0 && errno == EAGAIN)
				++*ret_full;
			else
				fail_msg("send: %zd %s", n, strerror(errno));
		}
		if (!ask)
			continue;
		long q0 = now_ms();
		json_decref(daemon_status(f->d.runtime));
		if (now_ms() - q0 > *ret_slowest)
			*ret_slowest = now_ms() - q0;
	}
	return sent;
}

/* A client sends reports as fast as it can: its sends fail when its socket
 * is full (it never blocks), every report that went out is counted, the
 * daemon's memory does not grow with the flood (measured with no control
 * requests, whose replies an ASan build keeps in its quarantine), and the
 * control socket and the bystander are served meanwhile. */
static void test_flood(void **state)
{
	struct fixture *f = *state;
	struct gpusys_welcome w;
	int s = raw_session(f, GPUSYS_WIRE_VERSION, &w);
	long long full = 0;
	long slowest = 0;

	long before = rss_kib(f->d.pid);
	long long sent = flood(f, s, 700, false, &full, &slowest);
	json_t *st;
	copies_when(f, w.client_id, sent, &st);
	json_decref(st);
	long after = rss_kib(f->d.pid);
	sent += flood(f, s, 700, true, &full, &slowest);
	copies_when(f, w.client_id, sent, &st);
	json_decref(st);
	print_message("flood: %lld reports sent, %lld sends found the socket full, slowest status %ld ms, "
		      "RSS %ld -> %ld KiB\n", sent, full, slowest, before, after);
	assert_true(sent > 1000);
	assert_true(full > 0);
	assert_true(slowest < 500);
	assert_true(after - before < 2048);
	close(s);
	assert_bystander(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reports_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_library_reports, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wire3_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_reports, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
