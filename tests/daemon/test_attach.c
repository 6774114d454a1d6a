/* SPDX-License-Identifier: MIT */
/* Attach and detach through libgpusys against the real daemon: the channel
 * it maps, the limits, passed descriptors, and what detach frees. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "libclient/attach/client.h" /* the connection layer itself, linked from the library's objects */
#include "harness.h"

static struct gpusys_attach_opts opts(const struct gd *d, uint32_t ports)
{
	return (struct gpusys_attach_opts){ .runtime_dir = d->runtime, .num_ports = ports, .cuda_device = -1 };
}

/* Wait until the daemon lists n clients. */
static void wait_clients(const struct gd *d, int n)
{
	long t0 = now_ms();
	for (;;) {
		json_t *st = daemon_status(d->runtime);
		int k = (int)json_integer_value(json_object_get(st, "clients_attached"));
		json_decref(st);
		if (k == n)
			return;
		if (now_ms() - t0 > 1000)
			fail_msg("daemon lists %d clients, expected %d", k, n);
		usleep(2000);
	}
}

static void test_attach_detach(void **state)
{
	struct gd d;
	struct gpusys_client *c;

	(void)state;
	gd_start(&d, NULL);
	struct gpusys_attach_opts o = opts(&d, 37);
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	assert_int_equal(gpusys_client_num_ports(c), 37);
	assert_int_equal(gpusys_client_memory_kind(c), GPUSYS_MEMORY_MEMFD);
	assert_true(gpusys_client_memory_fd(c) >= 0);

	/* The channel is what the ABI says for 37 ports. */
	struct gpusys_channel_layout l = gpusys_channel_layout(37, 0, 0);
	const struct gpusys_channel_header *h = gpusys_client_channel(c);
	assert_int_equal(gpusys_client_channel_bytes(c), l.total_bytes);
	assert_int_equal(h->magic, GPUSYS_CHANNEL_MAGIC);
	assert_int_equal(h->abi_version, GPUSYS_ABI_VERSION);
	assert_int_equal(h->num_ports, 37);
	assert_int_equal(h->ports_offset, l.ports_offset);
	assert_int_equal(h->client_id, gpusys_client_conn_id(c));
	assert_int_equal(h->server_state, GPUSYS_SERVER_RUNNING);
	/* Sealed: the client cannot shrink it under the daemon. */
	int seals = fcntl(gpusys_client_memory_fd(c), F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_int_equal(ftruncate(gpusys_client_memory_fd(c), 4096), -1);

	json_t *st = daemon_status(d.runtime);
	json_t *me = status_client(st, gpusys_client_conn_id(c));
	assert_non_null(me);
	assert_int_equal(json_integer_value(json_object_get(me, "pid")), getpid());
	assert_int_equal(json_integer_value(json_object_get(me, "uid")), getuid());
	assert_int_equal(json_integer_value(json_object_get(me, "ports")), 37);
	assert_int_equal(json_integer_value(json_object_get(me, "ports_in_use")), 0);
	char comm[32] = "";
	prctl(PR_GET_NAME, comm);
	assert_string_equal(json_string_value(json_object_get(me, "comm")), comm);
	json_decref(st);

	/* Ids are not reused. */
	struct gpusys_client *c2;
	assert_int_equal(gpusys_client_attach(&o, &c2), 0);
	assert_true(gpusys_client_conn_id(c2) != gpusys_client_conn_id(c));
	gpusys_client_detach(c2);

	gpusys_client_detach(c);
	wait_clients(&d, 0);
	gd_finish(&d);
}

static void test_port_clamp(void **state)
{
	struct gd d;
	struct gpusys_client *c;
	const uint32_t asks[][2] = { { 0, 1 }, { 1, 1 }, { 8, 8 }, { 9, 8 }, { 1000000, 8 } };

	(void)state;
	gd_start(&d, "max_ports = 8\n");
	for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
		struct gpusys_attach_opts o = opts(&d, asks[i][0]);
		assert_int_equal(gpusys_client_attach(&o, &c), 0);
		assert_int_equal(gpusys_client_num_ports(c), asks[i][1]);
		gpusys_client_detach(c);
	}
	gd_finish(&d);
}

static void test_max_clients(void **state)
{
	struct gd d;
	struct gpusys_client *c[3];

	(void)state;
	gd_start(&d, "max_clients = 2\n");
	struct gpusys_attach_opts o = opts(&d, 1);
	assert_int_equal(gpusys_client_attach(&o, &c[0]), 0);
	assert_int_equal(gpusys_client_attach(&o, &c[1]), 0);
	assert_int_equal(gpusys_client_attach(&o, &c[2]), -EUSERS);
	assert_non_null(strstr(gpusys_last_error(), "maximum of 2 clients"));
	gpusys_client_detach(c[0]);
	wait_clients(&d, 1);
	assert_int_equal(gpusys_client_attach(&o, &c[2]), 0);
	assert_string_equal(gpusys_last_error(), "");
	gpusys_client_detach(c[1]);
	gpusys_client_detach(c[2]);
	gd_finish(&d);
}

/* Passed descriptors are held while attached and closed on detach. */
static void test_passed_descriptors(void **state)
{
	struct gd d;
	struct gpusys_client *c;

	(void)state;
	gd_start(&d, NULL);
	int base = settled_fds(d.pid);
	struct gpusys_attach_opts o = opts(&d, 2);
	o.pass_stdio = true;
	o.pass_cwd = true;
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	/* socket + channel + stdout + stderr + cwd + our end of its wake pipe,
	 * and the print service's own copies of stdout and stderr (its
	 * per-client state is made at attach) */
	wait_fds(d.pid, base + 8);
	gpusys_client_detach(c);
	wait_fds(d.pid, base);
	gd_finish(&d);
}

static void test_not_running(void **state)
{
	struct gpusys_client *c;
	char dir[] = "/tmp/gpusysd-none.XXXXXX";

	(void)state;
	assert_non_null(mkdtemp(dir));
	struct gpusys_attach_opts o = { .runtime_dir = dir, .num_ports = 1, .cuda_device = -1 };
	assert_int_equal(gpusys_client_attach(&o, &c), -ENOENT);
	char expect[128];
	snprintf(expect, sizeof(expect), "gpusysd is not running at %s", dir);
	assert_non_null(strstr(gpusys_last_error(), expect));
	/* $GPUSYS_RUNTIME_DIR is the default. */
	setenv(GPUSYS_RUNTIME_DIR_ENV, dir, 1);
	o.runtime_dir = NULL;
	assert_int_equal(gpusys_client_attach(&o, &c), -ENOENT);
	assert_non_null(strstr(gpusys_last_error(), expect));
	unsetenv(GPUSYS_RUNTIME_DIR_ENV);
	rmdir(dir);
}

/* Many clients come and go: detach frees everything each time. */
static void test_churn(void **state)
{
	struct gd d;
	struct gpusys_client *c[16];

	(void)state;
	gd_start(&d, NULL);
	int base = settled_fds(d.pid);
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 16; i++) {
			struct gpusys_attach_opts o = opts(&d, 1 + (uint32_t)(i * 37 % 300));
			assert_int_equal(gpusys_client_attach(&o, &c[i]), 0);
		}
		for (int i = 0; i < 16; i++)
			gpusys_client_detach(c[(i * 7) % 16]);
	}
	wait_clients(&d, 0);
	wait_fds(d.pid, base);
	gd_finish(&d);
}

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(gpusys_strerror(-ESHUTDOWN), "gpusysd stopped or went away");
	assert_non_null(strstr(gpusys_strerror(-EPROTO), "protocol mismatch"));
	assert_non_null(strstr(gpusys_strerror(-ENOSYS), "opcode"));
	assert_string_equal(gpusys_strerror(-ENOENT), "No such file or directory");
	assert_string_equal(gpusys_strerror(0), "success");
	assert_string_equal(gpusys_strerror(-100000), "unknown error");
	assert_string_equal(gpusys_strerror(5), "unknown error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attach_detach),
		cmocka_unit_test(test_port_clamp),
		cmocka_unit_test(test_max_clients),
		cmocka_unit_test(test_passed_descriptors),
		cmocka_unit_test(test_not_running),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
