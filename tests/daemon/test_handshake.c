/* SPDX-License-Identifier: MIT */
/* Hostile and broken handshakes: each is refused or dropped, leaks nothing,
 * and leaves an attached client and new attaches unaffected. */
#include <errno.h>
#include <fcntl.h>
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
#include "harness.h"

struct fixture {
	struct gd d;
	gpusys_t *bystander; /* attached all along */
	int base_fds;                    /* daemon's descriptors with only it */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	gd_start(&f->d, "handshake_timeout_ms = 300\n");
	struct gpusys_options o = { .runtime_dir = f->d.runtime, .num_ports = 4,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &f->bystander), 0);
	f->base_fds = settled_fds(f->d.pid);
	assert_true(f->base_fds > 0);
	*state = f;
	return 0;
}

/* The bystander is still served and a new client still gets in; the
 * daemon holds no descriptor more than before. */
static void assert_unharmed(struct fixture *f)
{
	struct gpusys_channel_header *h = gpusys_host_channel(f->bystander);
	assert_int_equal(h->server_state, GPUSYS_SERVER_RUNNING);
	json_t *st = daemon_status(f->d.runtime);
	assert_non_null(status_client(st, gpusys_client_id(f->bystander)));
	json_decref(st);

	gpusys_t *c;
	struct gpusys_options o = { .runtime_dir = f->d.runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	gpusys_detach(c);

	/* Detach is asynchronous (the daemon sees EOF in its loop). */
	wait_fds(f->d.pid, f->base_fds);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	gpusys_detach(f->bystander);
	gd_finish(&f->d);
	free(f);
	return 0;
}

/* Send bytes with descriptors; return the welcome status (or the error of
 * not getting one) and the message. */
static int exchange(struct fixture *f, const void *buf, size_t len, const int *fds, int nfds, char *msg)
{
	int s = raw_connect(f->d.runtime);
	assert_int_equal(fdpass_send(s, buf, len, fds, (unsigned)nfds, MSG_NOSIGNAL), (ssize_t)len);
	struct gpusys_welcome w;
	int memfd;
	int r = raw_recv_welcome(s, &w, &memfd);
	if (r == 0) {
		r = w.status;
		if (msg) {
			w.message[sizeof(w.message) - 1] = 0;
			strcpy(msg, w.message);
		}
		/* A refusal carries no descriptor, and the daemon hangs up. */
		if (r < 0) {
			assert_int_equal(memfd, -1);
			assert_true(wait_peer_close(s, 1000));
		}
	}
	if (memfd >= 0)
		close(memfd);
	close(s);
	return r;
}

static void test_wrong_wire_version(void **state)
{
	struct fixture *f = *state;
	struct gpusys_hello h;
	char msg[256];

	hello_init(&h);
	h.wire_version = 7;
	assert_int_equal(exchange(f, &h, sizeof(h), NULL, 0, msg), -EPROTO);
	char want[128];
	snprintf(want, sizeof(want), "protocol version 7 not supported (daemon speaks %u to %u)",
		 GPUSYS_WIRE_VERSION_MIN, GPUSYS_WIRE_VERSION);
	assert_string_equal(msg, want);
	/* A newer client's hello may be longer: the version still decides. */
	char big[sizeof(h) + 64] = { 0 };
	memcpy(big, &h, sizeof(h));
	assert_int_equal(exchange(f, big, sizeof(big), NULL, 0, msg), -EPROTO);
	assert_string_equal(msg, want);
	assert_unharmed(f);
}

static void test_wrong_abi_version(void **state)
{
	struct fixture *f = *state;
	struct gpusys_hello h;
	char msg[256], expect[128];

	hello_init(&h);
	h.abi_version = GPUSYS_ABI_VERSION + 1;
	assert_int_equal(exchange(f, &h, sizeof(h), NULL, 0, msg), -EPROTO);
	snprintf(expect, sizeof(expect), "channel ABI version %u not supported (daemon speaks %u)",
		 GPUSYS_ABI_VERSION + 1, GPUSYS_ABI_VERSION);
	assert_string_equal(msg, expect);
	assert_unharmed(f);
}

static void test_garbage(void **state)
{
	struct fixture *f = *state;
	char msg[256];
	unsigned char junk[sizeof(struct gpusys_hello)];

	srand(42);
	for (int round = 0; round < 20; round++) {
		size_t len = 1 + (size_t)rand() % sizeof(junk);
		for (size_t i = 0; i < len; i++)
			junk[i] = (unsigned char)rand();
		assert_int_equal(exchange(f, junk, len, NULL, 0, msg), -EPROTO);
		assert_string_equal(msg, "not a gpusys hello");
	}
	assert_unharmed(f);
}

static void test_wrong_size(void **state)
{
	struct fixture *f = *state;
	struct gpusys_hello h;
	char msg[256];
	char big[sizeof(h) + 1] = { 0 };

	hello_init(&h);
	assert_int_equal(exchange(f, &h, sizeof(h) - 8, NULL, 0, msg), -EPROTO);
	assert_non_null(strstr(msg, "expected"));
	memcpy(big, &h, sizeof(h));
	assert_int_equal(exchange(f, big, sizeof(big), NULL, 0, msg), -EPROTO);
	/* An over-long hello is reported with its real length, not the size
	 * of the daemon's buffer. */
	static char huge[4000];
	memcpy(huge, &h, sizeof(h));
	assert_int_equal(exchange(f, huge, sizeof(huge), NULL, 0, msg), -EPROTO);
	char expect[128];
	snprintf(expect, sizeof(expect), "hello is 4000 bytes, expected %zu", sizeof(h));
	assert_string_equal(msg, expect);
	assert_unharmed(f);
}

static void test_descriptor_mismatch(void **state)
{
	struct fixture *f = *state;
	struct gpusys_hello h;
	char msg[256];
	int fds[12];

	for (int i = 0; i < 12; i++)
		fds[i] = open("/dev/null", O_RDWR | O_CLOEXEC);

	hello_init(&h);
	h.fd_mask = GPUSYS_HELLO_FD_STDOUT; /* announces one, sends two */
	assert_int_equal(exchange(f, &h, sizeof(h), fds, 2, msg), -EINVAL);
	assert_string_equal(msg, "hello announces 1 descriptors but 2 arrived");

	h.fd_mask = GPUSYS_HELLO_FD_STDOUT | GPUSYS_HELLO_FD_STDERR; /* announces two, sends none */
	assert_int_equal(exchange(f, &h, sizeof(h), NULL, 0, msg), -EINVAL);

	h.fd_mask = 1u << 5; /* unknown */
	assert_int_equal(exchange(f, &h, sizeof(h), fds, 1, msg), -EINVAL);
	assert_non_null(strstr(msg, "unknown descriptor"));

	h.fd_mask = GPUSYS_HELLO_FD_CWD; /* not a directory */
	assert_int_equal(exchange(f, &h, sizeof(h), fds, 1, msg), -EINVAL);
	assert_non_null(strstr(msg, "not a directory"));

	/* More than the daemon makes room for: truncated control data. */
	h.fd_mask = GPUSYS_HELLO_FD_KNOWN;
	assert_int_equal(exchange(f, &h, sizeof(h), fds, 12, msg), -EINVAL);

	/* Garbage with descriptors: they are closed too. */
	char junk[7] = "garbage";
	assert_int_equal(exchange(f, junk, sizeof(junk), fds, 3, msg), -EPROTO);

	for (int i = 0; i < 12; i++)
		close(fds[i]);
	assert_unharmed(f); /* also: every descriptor we sent was closed */
}

static void test_good_raw_hello(void **state)
{
	struct fixture *f = *state;
	struct gpusys_hello h;
	char msg[256];
	int fds[3] = { 1, 2, open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) };

	/* The reference: the same path with a correct hello succeeds, so
	 * the refusals above are about what they changed. */
	hello_init(&h);
	h.fd_mask = GPUSYS_HELLO_FD_STDOUT | GPUSYS_HELLO_FD_STDERR | GPUSYS_HELLO_FD_CWD;
	assert_int_equal(exchange(f, &h, sizeof(h), fds, 3, msg), 0);
	close(fds[2]);
	assert_unharmed(f);
}

static void test_disconnect_mid_handshake(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; i < 20; i++) {
		int s = raw_connect(f->d.runtime);
		if (i % 2)
			shutdown(s, SHUT_WR);
		close(s);
	}
	/* Half a hello (SOCK_SEQPACKET: a short record), then gone. */
	struct gpusys_hello h;
	hello_init(&h);
	int s = raw_connect(f->d.runtime);
	assert_int_equal(send(s, &h, 12, MSG_NOSIGNAL), 12);
	close(s);
	assert_unharmed(f);
	char *log = gd_log(&f->d);
	assert_non_null(strstr(log, "closed during the handshake"));
	free(log);
}

static void test_handshake_timeout(void **state)
{
	struct fixture *f = *state;

	int s = raw_connect(f->d.runtime);
	long t0 = now_ms();
	/* The daemon was started with a 300 ms deadline. */
	assert_true(wait_peer_close(s, 2000));
	long dt = now_ms() - t0;
	assert_true(dt >= 250 && dt < 1500);
	close(s);
	char *log = gd_log(&f->d);
	assert_non_null(strstr(log, "no hello within 300 ms"));
	free(log);
	assert_unharmed(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_wrong_wire_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_abi_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_size, setup, teardown),
		cmocka_unit_test_setup_teardown(test_descriptor_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_good_raw_hello, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_mid_handshake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handshake_timeout, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
