/* SPDX-License-Identifier: MIT */
/*
 * The public attach of include/gpusys/gpusys.h, through the shared library
 * as a program links it: one gpusys_attach for emulated and GPU handles,
 * and every failure's full reason in gpusys_last_error().
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpusys/emulator.h"
#include "gpusys/gpusys.h"
#include "../daemon/harness.h"

#define EMU_BARE (GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD)

/* No daemon: -ENOENT, and the reason names the socket that was tried. */
static void test_no_daemon_names_the_socket(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusys-api.XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct gpusys_options o = { .runtime_dir = dir, .flags = EMU_BARE };
	gpusys_t *g = (gpusys_t *)0x1;
	assert_int_equal(gpusys_attach(&o, &g), -ENOENT);
	assert_ptr_equal(g, (gpusys_t *)0x1); /* nothing written on failure */
	char sock[256];
	snprintf(sock, sizeof(sock), "%s/gpusysd.sock", dir);
	if (!strstr(gpusys_last_error(), sock))
		fail_msg("\"%s\" does not name %s", gpusys_last_error(), sock);
	assert_non_null(strstr(gpusys_last_error(), "not running"));
	assert_string_not_equal(gpusys_strerror(-ENOENT), "");
	rmdir(dir);
}

/* An emulated handle: the accessors agree with the channel header, warps
 * call through it, the GPU-only calls refuse it and say why. */
static void test_emulated_handle(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, NULL);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 5, .flags = EMU_BARE };
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc)
		fail_msg("attach: %s (%s)", gpusys_strerror(rc), gpusys_last_error());
	assert_string_equal(gpusys_last_error(), "");
	const struct gpusys_channel_header *h = gpusys_host_channel(g);
	assert_non_null(h);
	assert_int_equal(gpusys_num_ports(g), 5);
	assert_int_equal(h->num_ports, 5);
	assert_int_equal(gpusys_client_id(g), h->client_id);
	assert_int_equal(gpusys_channel_bytes(g), h->total_bytes);
	assert_int_equal(gpusys_memory_kind(g), GPUSYS_MEMORY_MEMFD);
	assert_int_equal(h->bulk_bytes, 0); /* GPUSYS_ATTACH_NO_BULK */

	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(g), &emu), 0);
	assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);
	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_true(gpusys_progress(g) >= 1);

	assert_int_equal(gpusys_synchronize(g, NULL, 0), -EINVAL);
	assert_non_null(strstr(gpusys_last_error(), "gpusys_emu_synchronize"));
	assert_int_equal(gpusys_query(g, NULL), -EINVAL);
	gpusys_emu_close(emu);
	gpusys_detach(g);
	gpusys_detach(NULL); /* fine */
	gd_finish(&d);
}

/* Bulk by default: an emulated attach without NO_BULK gets the default
 * bulk area (or what the daemon grants), not none. */
static void test_emulated_default_bulk(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, NULL);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 1, .flags = GPUSYS_ATTACH_EMULATED };
	gpusys_t *g;
	assert_int_equal(gpusys_attach(&o, &g), 0);
	const struct gpusys_channel_header *h = gpusys_host_channel(g);
	assert_true(h->bulk_bytes > 0 && h->bulk_bytes <= GPUSYS_DEFAULT_BULK_BYTES);
	gpusys_detach(g);
	gd_finish(&d);
}

/* A GPU attach where there is no usable GPU says so (not "No such
 * device" alone). Where a GPU is, tests/gpu covers the attach. */
static void test_gpu_attach_without_gpu(void **state)
{
	(void)state;
	if (access("/dev/nvidiactl", F_OK) == 0)
		skip();
	char dir[] = "/tmp/gpusys-api.XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct gpusys_options o = { .runtime_dir = dir };
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	assert_true(rc < 0);
	if (!strstr(gpusys_last_error(), "no usable GPU"))
		fail_msg("%d: \"%s\"", rc, gpusys_last_error());
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_daemon_names_the_socket),
		cmocka_unit_test(test_emulated_handle),
		cmocka_unit_test(test_emulated_default_bulk),
		cmocka_unit_test(test_gpu_attach_without_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
