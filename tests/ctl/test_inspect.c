/* SPDX-License-Identifier: MIT */
/*
 * gpusysctl ports and gpusysctl latency against a live gpusysd, text and
 * JSON: the counts match the requests this test made, the latency of SLEEP
 * reflects its delay, and pending calls show up as busy ports.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"

#define MS 1000000ull
#define ECHOES 1000
#define SLEEPS 5

static char *ctl(const struct gd *d, const char *a1, const char *a2)
{
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", d->runtime, a1, a2, NULL };
	char *out, *err;
	int st = run_capture(argv, &out, &err);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("gpusysctl %s %s: status %d: %s", a1, a2 ? a2 : "", st, err);
	free(err);
	return out;
}


static json_t *op_named(json_t *ops, const char *name)
{
	size_t i;
	json_t *o;
	json_array_foreach(ops, i, o)
	{
		if (!strcmp(json_string_value(json_object_get(o, "name")), name))
			return o;
	}
	return NULL;
}

static void test_ports_and_latency(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;

	(void)state;
	gd_start(&d, NULL);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = 8,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);

	/* Nothing served yet. */
	char *out = ctl(&d, "latency", NULL);
	assert_non_null(strstr(out, "no requests served yet"));
	free(out);

	char msg[16] = "hello, latency";
	for (int i = 0; i < ECHOES; i++) {
		const void *in[GPUSYS_WARP_LANES] = { msg };
		uint32_t in_len[GPUSYS_WARP_LANES] = { sizeof(msg) };
		char back[16];
		void *outp[GPUSYS_WARP_LANES] = { back };
		uint32_t cap[GPUSYS_WARP_LANES] = { sizeof(back) }, out_len[GPUSYS_WARP_LANES];
		int32_t st[GPUSYS_WARP_LANES];
		assert_int_equal(gpusys_emu_echo(dev, 1, in, in_len, outp, cap, out_len, st), 0);
	}
	for (int i = 0; i < SLEEPS; i++)
		assert_int_equal(emu_sleep(dev, 30 * MS, 0, 0), 0);

	/* JSON: exact counts, bytes, and SLEEP's latency at least its delay. */
	out = ctl(&d, "latency", "--json");
	json_error_t jerr;
	json_t *r = json_loads(out, 0, &jerr);
	assert_non_null(r);
	json_t *ops = json_object_get(r, "ops");
	json_t *echo = op_named(ops, "echo"), *sl = op_named(ops, "sleep");
	assert_non_null(echo);
	assert_non_null(sl);
	assert_null(op_named(ops, "noop"));
	assert_int_equal(json_integer_value(json_object_get(echo, "count")), ECHOES);
	assert_int_equal(json_integer_value(json_object_get(echo, "errors")), 0);
	assert_int_equal(json_integer_value(json_object_get(echo, "bytes_in")), ECHOES * sizeof(msg));
	assert_int_equal(json_integer_value(json_object_get(echo, "bytes_out")), ECHOES * sizeof(msg));
	assert_string_equal(json_string_value(json_object_get(echo, "opcode")), "0x0002");
	assert_int_equal(json_integer_value(json_object_get(sl, "count")), SLEEPS);
	double p50 = json_number_value(json_object_get(sl, "p50_us"));
	double p99 = json_number_value(json_object_get(sl, "p99_us"));
	double mx = json_number_value(json_object_get(sl, "max_us"));
	assert_true(p50 >= 30000.0 && p50 < 1000000.0);
	assert_true(p99 >= p50 && mx >= p99);
	/* The echo calls took microseconds in the daemon, not milliseconds. */
	assert_true(json_number_value(json_object_get(echo, "p50_us")) < 30000.0);
	size_t hist = json_array_size(json_object_get(sl, "histogram"));
	assert_true(hist >= 1);
	json_decref(r);
	free(out);

	/* Text: the table and the histogram bars. */
	out = ctl(&d, "latency", "--histogram");
	assert_non_null(strstr(out, "OPCODE"));
	assert_non_null(strstr(out, "P99.9"));
	assert_non_null(strstr(out, "echo"));
	assert_non_null(strstr(out, "#"));
	free(out);

	/* Ports: three SLEEPs pending show as busy, in service, later. */
	out = ctl(&d, "ports", "--json");
	r = json_loads(out, 0, &jerr);
	assert_int_equal(json_integer_value(json_object_get(r, "busy")), 0);
	json_decref(r);
	free(out);
	for (uint32_t i = 0; i < 3; i++) {
		gpusys_emu_set_warp(i);
		assert_int_equal(emu_sleep(dev, 3000 * MS, 0, GPUSYS_REQ_NOREPLY), 0);
	}
	long t0 = now_ms();
	for (;;) {
		out = ctl(&d, "ports", "--json");
		r = json_loads(out, 0, &jerr);
		free(out);
		if (json_integer_value(json_object_get(r, "busy")) == 3)
			break;
		json_decref(r);
		assert_true(now_ms() - t0 < 2000);
		usleep(10000);
	}
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(r, "ports"), i, p)
	{
		assert_string_equal(json_string_value(json_object_get(p, "name")), "sleep");
		assert_string_equal(json_string_value(json_object_get(p, "phase")), "in service");
		assert_true(json_is_true(json_object_get(p, "later")));
		assert_true(json_integer_value(json_object_get(p, "port")) < 8);
	}
	json_decref(r);
	out = ctl(&d, "ports", NULL);
	assert_non_null(strstr(out, "3 ports busy"));
	assert_non_null(strstr(out, "sleep"));
	free(out);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ports_and_latency),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
