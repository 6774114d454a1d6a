/* SPDX-License-Identifier: MIT */
/*
 * The configuration after start (issue 15): gpusysd --check-config, and
 * SIGHUP with a valid, an invalid and a missing file. The daemon keeps
 * serving an attached client through all three; a valid file's live settings
 * apply to new clients at once; what needs a restart is said to need one.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/emulator.h"
#include "gpusys/gpusys.h"
#include "libclient/client.h" /* the connection layer: ports granted */
#include "harness.h"

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int check_config(const char *file, char **out, char **err)
{
	const char *argv[] = { test_env("GPUSYSD_BIN"), "--check-config", file, NULL };
	return run_capture(argv, out, err);
}

static void test_check_config(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusys-check.XXXXXX", good[64], bad[64], none[64], *out, *err;
	assert_non_null(mkdtemp(dir));
	snprintf(good, sizeof(good), "%s/good.conf", dir);
	snprintf(bad, sizeof(bad), "%s/bad.conf", dir);
	snprintf(none, sizeof(none), "%s/none.conf", dir);
	write_text(good, "max_ports = 64\n# a comment\nworkers = 3\n");
	write_text(bad, "max_ports = 64\nmax_ports = 32\n");

	int st = check_config(good, &out, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_non_null(strstr(out, "valid"));
	free(out), free(err);

	st = check_config(bad, &out, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 78);
	char where[96];
	snprintf(where, sizeof(where), "%s:2:", bad); /* FILE:LINE of the second max_ports */
	assert_non_null(strstr(err, where));
	free(out), free(err);

	st = check_config(none, &out, &err);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 78);
	assert_non_null(strstr(err, "No such file"));
	free(out), free(err);

	unlink(good), unlink(bad), rmdir(dir);
}

/* Issue 33: the four settings --check-config passed or refused without
 * FILE:LINE (the daemon then failed at start): each refused with exit 78
 * and where. */
static void test_check_config_where(void **state)
{
	(void)state;
	char dir[] = "/tmp/gpusys-where.XXXXXX", file[64], *out, *err;
	const struct {
		const char *text;
		unsigned line;
		const char *why;
	} bad[] = {
		{ "pollers = 40\n# x\nworkers = 30\n", 3, "pollers (40, line 1) + workers (30, line 3) exceed" },
		{ "workers = 2\npoller_cpus = two\n", 2, "poller_cpus = two: expected a CPU list" },
		{ "\nemulated_gpus = GPU-nope\n", 2, "emulated_gpus: 'GPU-nope' is not a GPU UUID" },
		{ "metrics_listen = 127.0.0.1:99999\n", 1, "metrics_listen = '127.0.0.1:99999': port 99999" },
		{ "max_ports = 64\nmetrics_listen = nonsense\n", 2, "metrics_listen = 'nonsense': expected HOST:PORT" },
	};
	unsigned wrong = 0;
	assert_non_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/bad.conf", dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_text(file, bad[i].text);
		int st = check_config(file, &out, &err);
		char want[256];
		snprintf(want, sizeof(want), "%s:%u: %s", file, bad[i].line, bad[i].why);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 78 || !strstr(err, want)) {
			print_error("case %zu: exit %d, stderr \"%s\"; expected 78 and \"%s\"\n", i,
				    WIFEXITED(st) ? WEXITSTATUS(st) : -1, err, want);
			wrong++;
		}
		free(out), free(err);
	}
	unlink(file), rmdir(dir);
	assert_int_equal(wrong, 0);
}

static uint32_t ports_granted(struct gd *d, uint32_t asked)
{
	struct gpusys_attach_opts o = { .runtime_dir = d->runtime, .num_ports = asked, .cuda_device = -1 };
	struct gpusys_client *c;
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	uint32_t n = gpusys_client_num_ports(c);
	gpusys_client_detach(c);
	return n;
}

/* Wait until the log has said `what` `count` times (a reload is done when it
 * has logged its summary or its refusal). */
static void wait_log(struct gd *d, const char *what, int count)
{
	long t0 = now_ms();
	for (;;) {
		char *log = gd_log(d);
		int n = 0;
		for (const char *p = log; (p = strstr(p, what)); p++)
			n++;
		free(log);
		if (n >= count)
			return;
		assert_true(now_ms() - t0 < 3000);
		usleep(5000);
	}
}

static void assert_served(struct gpusys_emu *emu)
{
	for (int i = 0; i < 20; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);
}

static void test_sighup(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_ports = 64\n");
	struct gpusys_attach_opts o = { .runtime_dir = d.runtime, .num_ports = 8, .cuda_device = -1 };
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_client_channel(c), &emu), 0);
	assert_served(emu);
	assert_int_equal(ports_granted(&d, 100), 64);

	/* Valid: max_ports applies to the next client; workers needs a restart. */
	write_text(d.config, "max_ports = 16\nworkers = 3\n");
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "reload: ", 3);
	char *log = gd_log(&d);
	assert_non_null(strstr(log, "max_ports 64 -> 16"));
	assert_non_null(strstr(log, "workers changed"));
	assert_non_null(strstr(log, "next start"));
	free(log);
	assert_int_equal(ports_granted(&d, 100), 16);
	assert_served(emu);

	/* Invalid: nothing changes, the daemon says so and goes on. */
	write_text(d.config, "max_ports = 32\nthis is not a setting\n");
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "keeping the settings in use", 1);
	assert_int_equal(ports_granted(&d, 100), 16);
	assert_served(emu);

	/* Missing: the same. */
	assert_int_equal(unlink(d.config), 0);
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	wait_log(&d, "keeping the settings in use", 2);
	log = gd_log(&d);
	assert_non_null(strstr(log, "No such file"));
	free(log);
	assert_int_equal(ports_granted(&d, 100), 16);
	assert_served(emu);

	gpusys_emu_close(emu);
	gpusys_client_detach(c);
	write_text(d.config, "");
	gd_finish(&d); /* exits 0, as after no reload at all */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_config),
		cmocka_unit_test(test_check_config_where),
		cmocka_unit_test(test_sighup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
