/* SPDX-License-Identifier: MIT */
/* The config file parser: every key, sizes, limits, and error locations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/service.h"
#include "services.h"
#include "util/config_file.h"

static int parse(struct gpusysd_config *cfg, const char *text, char *err, size_t len)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	assert_non_null(f);
	int r = config_parse(cfg, "test.conf", f, err, len);
	fclose(f);
	return r;
}

static void test_defaults(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(c.pollers, 0);
	assert_int_equal(c.workers, 4);
	assert_int_equal(c.max_clients, 256);
	assert_int_equal(c.idle_spin_us, 200);
	assert_int_equal(c.idle_sleep_us, 50);
	assert_int_equal(c.client_mem_budget, 64u << 20);
	assert_int_equal(c.channel_bulk_bytes, 256u << 20);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);
	/* An empty or comment-only file changes nothing. */
	struct gpusysd_config d = c;
	assert_int_equal(parse(&d, "\n  # nothing\n\t\n", err, sizeof(err)), 0);
	assert_memory_equal(&c, &d, sizeof(c));
}

static void test_every_key(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(parse(&c,
			       "pollers = 3\n"
			       "workers=7 # trailing comment\n"
			       "  max_clients   =   9  \n"
			       "max_ports = 100\n"
			       "channel_bulk_bytes = 2M\n"
			       "idle_spin_us = 0\n"
			       "idle_sleep_us = 75\r\n"
			       "client_mem_budget = 3GiB\n"
			       "handshake_timeout_ms = 250",
			       err, sizeof(err)),
			 0);
	assert_int_equal(c.pollers, 3);
	assert_int_equal(c.workers, 7);
	assert_int_equal(c.max_clients, 9);
	assert_int_equal(c.max_ports, 100);
	assert_int_equal(c.channel_bulk_bytes, 2u << 20);
	assert_int_equal(c.idle_spin_us, 0);
	assert_int_equal(c.idle_sleep_us, 75);
	assert_int_equal(c.client_mem_budget, 3ull << 30);
	assert_int_equal(c.handshake_timeout_ms, 250);
}

static void test_sizes(void **state)
{
	struct gpusysd_config c;
	char err[256];
	const struct {
		const char *v;
		unsigned long long bytes;
	} ok[] = { { "4096", 4096 }, { "4k", 4096 }, { "4K", 4096 }, { "4KB", 4096 }, { "4KiB", 4096 },
		   { "1m", 1 << 20 }, { "1G", 1 << 30 } };

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		config_defaults(&c);
		assert_int_equal(config_set(&c, "client_mem_budget", ok[i].v, err, sizeof(err)), 0);
		assert_int_equal(c.client_mem_budget, ok[i].bytes);
	}
	const char *bad[] = { "", "k", "4T", "4Kb", "4 K", "-4K", "+4K", "0x10", "4096.0", "99999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_defaults(&c);
		assert_int_equal(config_set(&c, "client_mem_budget", bad[i], err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "client_mem_budget"));
	}
	/* Counts take no suffix. */
	assert_int_equal(config_set(&c, "workers", "4k", err, sizeof(err)), -EINVAL);
}

static void test_limits(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_set(&c, "max_ports", "16384", err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "max_ports", "16385", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "1..16384"));
	assert_int_equal(config_set(&c, "max_ports", "0", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "workers", "0", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "idle_sleep_us", "0", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "nope", "1", err, sizeof(err)), -ENOENT);

	/* Progress slots: pollers + workers <= 63 (the 64th completes calls
	 * that complete later). */
	config_defaults(&c);
	c.pollers = 32;
	c.workers = 31;
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);
	c.workers = 32;
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL);
}

static void test_errors_have_line(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(parse(&c, "pollers = 1\n# x\nbogus = 2\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:3: unknown key 'bogus'");
	assert_int_equal(parse(&c, "\n\nworkers = lots\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:3: bad value 'lots' for workers (expected an integer 1..63)");
	assert_int_equal(parse(&c, "workers\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:1: expected 'key = value', got 'workers'");
	assert_int_equal(parse(&c, "workers =\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:1: expected 'key = value'");
	assert_int_equal(parse(&c, "= 3\n", err, sizeof(err)), -EINVAL);

	char long_line[5000];
	memset(long_line, 'x', sizeof(long_line) - 1);
	long_line[sizeof(long_line) - 1] = 0;
	assert_int_equal(parse(&c, long_line, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:1: line too long");
}

static void test_auto_pollers(void **state)
{
	(void)state;
	assert_int_equal(config_auto_pollers(1), 1);
	assert_int_equal(config_auto_pollers(2), 1);
	assert_int_equal(config_auto_pollers(3), 1);
	assert_int_equal(config_auto_pollers(4), 2);
	assert_int_equal(config_auto_pollers(6), 3);
	assert_int_equal(config_auto_pollers(10), 5);
	assert_int_equal(config_auto_pollers(16), 8);
	assert_int_equal(config_auto_pollers(128), 8);
}

/* config/gpusysd.conf documents every key with its default, commented
 * out: uncommented, it must parse and change nothing. */
static void test_example_file(void **state)
{
	const char *path = getenv("GPUSYS_EXAMPLE_CONFIG");
	char line[1024], text[16384] = "", err[256];
	struct gpusysd_config def, c;
	unsigned keys = 0;

	(void)state;
	if (!path)
		fail_msg("$GPUSYS_EXAMPLE_CONFIG is not set (meson passes it)");
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		/* "#key = value" is a setting; "# text" is prose. */
		const char *l = line;
		if (line[0] == '#' && line[1] >= 'a' && line[1] <= 'z') {
			l = line + 1;
			keys++;
		}
		strncat(text, l, sizeof(text) - strlen(text) - 1);
	}
	fclose(f);
	/* The core's keys and the services' (services_add_settings). */
	assert_int_equal(keys, 14);
	config_defaults(&def);
	services_use(gpusysd_services);
	assert_int_equal(services_add_settings(&def), 0);
	c = def;
	if (parse(&c, text, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_memory_equal(&c, &def, sizeof(c));
}

/* Settings of services: accepted once registered, with their defaults;
 * the environment overrides any key as GPUSYSD_<KEY>. */
static void test_service_keys_and_env(void **state)
{
	static const struct config_key keys[] = {
		{ "widget_bytes", CONFIG_BYTES, 16, 1u << 20, 4096 },
		{ NULL, 0, 0, 0, 0 },
	};
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_set(&c, "widget_bytes", "8K", err, sizeof(err)), -ENOENT);
	assert_int_equal(config_add_keys(&c, keys), 0);
	assert_int_equal(config_add_keys(&c, keys), -EEXIST);
	assert_int_equal(config_value(&c, "widget_bytes"), 4096);
	assert_int_equal(config_set(&c, "widget_bytes", "8K", err, sizeof(err)), 0);
	assert_int_equal(config_value(&c, "widget_bytes"), 8192);
	assert_int_equal(config_set(&c, "widget_bytes", "2M", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "widget_bytes"));

	setenv("GPUSYSD_WIDGET_BYTES", "1K", 1);
	setenv("GPUSYSD_WORKERS", "7", 1);
	assert_int_equal(config_apply_env(&c, err, sizeof(err)), 0);
	assert_int_equal(config_value(&c, "widget_bytes"), 1024);
	assert_int_equal(c.workers, 7);
	setenv("GPUSYSD_WORKERS", "banana", 1);
	assert_int_equal(config_apply_env(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "GPUSYSD_WORKERS: bad value 'banana'"));
	unsetenv("GPUSYSD_WORKERS");
	unsetenv("GPUSYSD_WIDGET_BYTES");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_every_key),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_errors_have_line),
		cmocka_unit_test(test_auto_pollers),
		cmocka_unit_test(test_example_file),
		cmocka_unit_test(test_service_keys_and_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
