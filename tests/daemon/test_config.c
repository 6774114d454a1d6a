/* SPDX-License-Identifier: MIT */
/* The config file parser: every key, sizes, limits, and error locations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/service.h"
#include "services.h"
#include "util/config_file.h"

static int parse_n(struct gpusysd_config *cfg, const char *text, size_t n, char *err, size_t len)
{
	FILE *f = fmemopen((void *)text, n, "r");
	assert_non_null(f);
	int r = config_parse(cfg, "test.conf", f, err, len);
	fclose(f);
	return r;
}

static int parse(struct gpusysd_config *cfg, const char *text, char *err, size_t len)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	assert_non_null(f);
	int r = config_parse(cfg, "test.conf", f, err, len);
	fclose(f);
	return r;
}

/* The settings of two configurations alike, whatever file and lines they
 * came from (source, line: config_where). */
static void assert_same_settings(const struct gpusysd_config *a, const struct gpusysd_config *b)
{
	struct gpusysd_config x = *a, y = *b;
	memset(x.source, 0, sizeof(x.source)), memset(y.source, 0, sizeof(y.source));
	memset(x.line, 0, sizeof(x.line)), memset(y.line, 0, sizeof(y.line));
	assert_memory_equal(&x, &y, sizeof(x));
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
	assert_int_equal(c.max_clients_per_uid, 64);
	assert_int_equal(c.control_conns_per_uid, 4);
	assert_int_equal(c.control_idle_timeout_ms, 10000);
	assert_int_equal(c.admin_gid, -1);
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
			       "handshake_timeout_ms = 250\n"
			       "max_clients_per_uid = 5\n"
			       "control_conns_per_uid = 2\n"
			       "control_idle_timeout_ms = 700\n"
			       "admin_group = 4321\n"
			       "restart_grace_ms = 3000\n"
			       "restart_drain_ms = 20\n",
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
	assert_int_equal(c.max_clients_per_uid, 5);
	assert_int_equal(c.control_conns_per_uid, 2);
	assert_int_equal(c.control_idle_timeout_ms, 700);
	assert_int_equal(c.admin_gid, 4321);
	assert_int_equal(c.restart_grace_ms, 3000);
	assert_int_equal(c.restart_drain_ms, 20);
}

/* admin_group: a number, or a name looked up in the group database. */
static void test_admin_group(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(c.admin_gid, -1);
	assert_int_equal(config_set(&c, "admin_group", "root", err, sizeof(err)), 0);
	assert_int_equal(c.admin_gid, 0);
	assert_int_equal(config_set(&c, "admin_group", "0", err, sizeof(err)), 0);
	assert_int_equal(c.admin_gid, 0);
	assert_int_equal(config_set(&c, "admin_group", "no-such-group-here", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "bad value 'no-such-group-here' for admin_group (no such group)");
	assert_int_equal(config_set(&c, "admin_group", "-1", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "admin_group", "4294967295", err, sizeof(err)), -EINVAL);
	assert_int_equal(c.admin_gid, 0);
	/* Control connection bounds. */
	assert_int_equal(config_set(&c, "control_conns_per_uid", "0", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "control_conns_per_uid", "65", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "control_idle_timeout_ms", "99", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "max_clients_per_uid", "0", err, sizeof(err)), -EINVAL);
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

	/* pollers_per_gpu and workers_per_gpu (issue 34): each GPU's own
	 * pollers and workers take slots too: pollers + workers + GPUs x
	 * (pollers_per_gpu + workers_per_gpu) (the emulated GPUs, at least
	 * one) <= 63, refused with the numbers. An automatic count (0) shrinks
	 * to fit, to 1 at least: both automatic always pass. */
	config_defaults(&c);
	assert_int_equal(c.pollers_per_gpu, 0);
	assert_int_equal(c.workers_per_gpu, 0);
	assert_int_equal(config_set(&c, "pollers_per_gpu", "63", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "pollers_per_gpu", "-1", err, sizeof(err)), -EINVAL);
	c.pollers = 8;
	c.workers = 4;
	assert_int_equal(config_set(&c, "pollers_per_gpu", "50", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0); /* 8 + 4 + 1 x (50 + 1) = 63 */
	assert_int_equal(config_set(&c, "pollers_per_gpu", "51", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "pollers_per_gpu = 51 + workers_per_gpu = automatic, at least 1"));
	assert_non_null(strstr(err, "63 progress slots"));
	assert_int_equal(config_set(&c, "emulated_gpus", "GPU-0a0a0a0a-1111-2222-3333-444444444444=a, "
							  "GPU-0b0b0b0b-5555-6666-7777-888888888888=b", err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "pollers_per_gpu", "25", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL); /* 8 + 4 + 2 x (25 + 1) = 64 */
	assert_non_null(strstr(err, "2 GPUs x (pollers_per_gpu = 25"));
	assert_int_equal(config_set(&c, "pollers_per_gpu", "24", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "pollers_per_gpu", "0", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);

	/* workers_per_gpu: 0 (as many as workers) .. 61, a count like the
	 * others; too many for the slots with two GPUs, with either per-GPU
	 * count asked for. */
	assert_int_equal(config_set(&c, "workers_per_gpu", "62", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "workers_per_gpu"));
	assert_int_equal(config_set(&c, "workers_per_gpu", "-1", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "workers_per_gpu", "two", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "workers_per_gpu", "1k", err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "workers_per_gpu", "24", err, sizeof(err)), 0);
	assert_int_equal(c.workers_per_gpu, 24);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0); /* 8 + 4 + 2 x (1 + 24) = 62 */
	assert_int_equal(config_set(&c, "workers_per_gpu", "25", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL); /* 8 + 4 + 2 x (1 + 25) = 64 */
	assert_non_null(strstr(err, "pollers_per_gpu = automatic, at least 1 + workers_per_gpu = 25"));
	assert_int_equal(config_set(&c, "pollers_per_gpu", "2", err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "workers_per_gpu", "23", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), 0); /* 8 + 4 + 2 x (2 + 23) = 62 */
	assert_int_equal(config_set(&c, "workers_per_gpu", "24", err, sizeof(err)), 0);
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL); /* 64 */
	assert_non_null(strstr(err, "2 GPUs x (pollers_per_gpu = 2 + workers_per_gpu = 24)"));

	/* poller_cpus: a CPU list or none; checked, not just stored. */
	config_defaults(&c);
	assert_string_equal(c.poller_cpus, "none");
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);
	assert_int_equal(config_set(&c, "poller_cpus", "2-9,12", err, sizeof(err)), 0);
	assert_string_equal(c.poller_cpus, "2-9,12");
	assert_int_equal(config_check(&c, err, sizeof(err)), 0);
	/* A bad list is refused when set (so a file's says where). */
	assert_int_equal(config_set(&c, "poller_cpus", "two", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "poller_cpus"));
	assert_string_equal(c.poller_cpus, "2-9,12");
	snprintf(c.poller_cpus, sizeof(c.poller_cpus), "two");
	assert_int_equal(config_check(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "poller_cpus"));
}

/* workers_per_gpu in a file and the environment, refused with FILE:LINE
 * like every count. */
static void test_workers_per_gpu_file(void **state)
{
	struct gpusysd_config c;
	char err[512];

	(void)state;
	config_defaults(&c);
	assert_int_equal(parse(&c, "workers = 2\nworkers_per_gpu = 3 # each GPU's\n", err, sizeof(err)), 0);
	assert_int_equal(c.workers, 2);
	assert_int_equal(c.workers_per_gpu, 3);
	config_defaults(&c);
	assert_int_equal(parse(&c, "\nworkers_per_gpu = 62\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:2: bad value '62' for workers_per_gpu (expected an integer 0..61)");
	assert_int_equal(parse(&c, "workers_per_gpu = many\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "test.conf:1: bad value 'many' for workers_per_gpu"));
	assert_int_equal(parse(&c, "workers_per_gpu = 1\nworkers_per_gpu = 2\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:2: duplicate key 'workers_per_gpu' (first set on line 1)");
	config_defaults(&c);
	setenv("GPUSYSD_WORKERS_PER_GPU", "5", 1);
	assert_int_equal(config_apply_env(&c, err, sizeof(err)), 0);
	assert_int_equal(c.workers_per_gpu, 5);
	setenv("GPUSYSD_WORKERS_PER_GPU", "-2", 1);
	assert_int_equal(config_apply_env(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "GPUSYSD_WORKERS_PER_GPU"));
	unsetenv("GPUSYSD_WORKERS_PER_GPU");
}

/* Issue 33: the text keys the daemon used to refuse only at start
 * (poller_cpus, emulated_gpus, metrics_listen, cuda_memory) are refused
 * as they are read, with FILE:LINE like every other key. */
static void test_text_keys_have_line(void **state)
{
	struct gpusysd_config c;
	char err[512];
	const struct {
		const char *text, *want;
	} bad[] = {
		{ "workers = 2\npoller_cpus = two\n", "test.conf:2: poller_cpus = two: expected a CPU list" },
		{ "poller_cpus = 3-1\n", "test.conf:1: poller_cpus = 3-1:" },
		{ "\n\nemulated_gpus = GPU-nope\n", "test.conf:3: emulated_gpus: 'GPU-nope' is not a GPU UUID" },
		{ "emulated_gpus = GPU-0a0a0a0a-1111-2222-3333-444444444444=a, GPU-0a0a0a0a-1111-2222-3333-444444444444\n",
		  "test.conf:1: emulated_gpus: GPU-0a0a0a0a-1111-2222-3333-444444444444 given twice" },
		{ "# port past 65535\nmetrics_listen = 127.0.0.1:99999\n",
		  "test.conf:2: metrics_listen = '127.0.0.1:99999': port 99999 is past 65535" },
		{ "metrics_listen = nonsense\n", "test.conf:1: metrics_listen = 'nonsense': expected HOST:PORT" },
		{ "metrics_listen = :9464\n", "test.conf:1: metrics_listen = ':9464': expected HOST:PORT" },
		{ "metrics_listen = localhost:\n", "test.conf:1: metrics_listen = 'localhost:': the port" },
		{ "metrics_listen = localhost:+80\n", "test.conf:1: metrics_listen = 'localhost:+80': the port" },
		{ "metrics_listen = localhost:123456\n", "test.conf:1: metrics_listen = 'localhost:123456': the port" },
		{ "metrics_listen = [::1:9464\n", "test.conf:1: metrics_listen = '[::1:9464': expected [IPv6]:PORT" },
		{ "metrics_listen = a b:9464\n", "test.conf:1: metrics_listen = 'a b:9464': 'a b' is no host" },
		{ "cuda_memory = shm\n", "test.conf:1: cuda_memory = shm: expected memfd or vmm" },
	};

	unsigned wrong = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_defaults(&c);
		if (parse(&c, bad[i].text, err, sizeof(err)) != -EINVAL) {
			print_error("case %zu accepted: %s", i, bad[i].text);
			wrong++;
		} else if (strncmp(err, bad[i].want, strlen(bad[i].want))) {
			print_error("case %zu: expected \"%s...\", got \"%s\"\n", i, bad[i].want, err);
			wrong++;
		}
	}
	assert_int_equal(wrong, 0);
	const char *good[] = { "metrics_listen = 127.0.0.1:0\n", "metrics_listen = [::1]:9464\n",
			       "metrics_listen = localhost:65535\n", "metrics_listen = none\n",
			       "poller_cpus = 0-3,8\n", "emulated_gpus = GPU-0a0a0a0a-1111-2222-3333-444444444444=alpha\n",
			       "cuda_memory = vmm\n" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		config_defaults(&c);
		if (parse(&c, good[i], err, sizeof(err)) != 0)
			fail_msg("refused \"%s\": %s", good[i], err);
	}
	/* The environment's value says which variable. */
	config_defaults(&c);
	setenv("GPUSYSD_METRICS_LISTEN", "127.0.0.1:99999", 1);
	assert_int_equal(config_apply_env(&c, err, sizeof(err)), -EINVAL);
	unsetenv("GPUSYSD_METRICS_LISTEN");
	assert_non_null(strstr(err, "GPUSYSD_METRICS_LISTEN: metrics_listen = '127.0.0.1:99999'"));
}

/* pollers + workers past the progress slots: FILE:LINE of the later of the
 * two keys, the one that made the sum too big. */
static void test_slots_have_line(void **state)
{
	struct gpusysd_config c;
	char err[512];

	(void)state;
	config_defaults(&c);
	assert_int_equal(parse(&c, "pollers = 40\n# more\nworkers = 30\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:3: pollers (40, line 1) + workers (30, line 3) exceed the 63 progress "
				 "slots (one more is for calls that complete later)");
	config_defaults(&c);
	assert_int_equal(parse(&c, "workers = 30\npollers = 40\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "test.conf:2: pollers (40, line 2) + workers (30, line 1)"));
	config_defaults(&c);
	assert_int_equal(parse(&c, "\npollers = 60\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "test.conf:2: pollers (60, line 2) + workers (4, default)"));
	config_defaults(&c);
	assert_int_equal(parse(&c, "pollers = 32\nworkers = 31\n", err, sizeof(err)), 0);
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

/* Hostile or broken files: each refused with where and why. */
static void test_odd_bytes(void **state)
{
	struct gpusysd_config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	/* A key given twice: which one was meant is a guess. */
	assert_int_equal(parse(&c, "workers = 2\n# x\n workers = 3\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:3: duplicate key 'workers' (first set on line 1)");
	/* A NUL byte is named as such, with its column. */
	static const char nul[] = "pollers = 1\nworkers = \0\n";
	assert_int_equal(parse_n(&c, nul, sizeof(nul) - 1, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:2: NUL byte at column 11 (not a text file?)");
	assert_int_equal(parse(&c, "workers = 4\x01\n", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "test.conf:1: control character 0x01 at column 12");
	/* A UTF-8 byte order mark at the start is skipped... */
	config_defaults(&c);
	assert_int_equal(parse(&c, "\xef\xbb\xbfworkers = 5\n", err, sizeof(err)), 0);
	assert_int_equal(c.workers, 5);
	assert_int_equal(parse(&c, "\xef\xbb\xbf# only a comment\n", err, sizeof(err)), 0);
	/* ...but not in the middle of the file. */
	assert_int_equal(parse(&c, "\n\xef\xbb\xbfworkers = 5\n", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "test.conf:2: unknown key"));
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* --config naming something that is not a file fails at once. */
static void test_not_a_file(void **state)
{
	struct gpusysd_config c;
	char err[512], dir[] = "/tmp/gpusys-conf-XXXXXX", fifo[64];
	struct timespec t0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	const struct {
		const char *path, *why;
	} bad[] = {
		{ "/dev/zero", "/dev/zero: not a regular file (a character device)" },
		{ fifo, "not a regular file (a FIFO)" },
		{ dir, "not a regular file (a directory)" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_defaults(&c);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		assert_int_equal(config_load(&c, bad[i].path, err, sizeof(err)), -EINVAL);
		if (ms_since(&t0) > 500)
			fail_msg("%s took %ld ms to refuse", bad[i].path, ms_since(&t0));
		if (!strstr(err, bad[i].why))
			fail_msg("expected \"%s\" in \"%s\"", bad[i].why, err);
	}
	/* /dev/null, the usual "no settings", is empty and fine. */
	struct gpusysd_config def;
	config_defaults(&def);
	c = def;
	assert_int_equal(config_load(&c, "/dev/null", err, sizeof(err)), 0);
	assert_same_settings(&c, &def);
	assert_int_equal(config_load(&c, "/nonexistent/gpusysd.conf", err, sizeof(err)), -ENOENT);
	unlink(fifo);
	rmdir(dir);
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
	assert_int_equal(keys, 46);
	config_defaults(&def);
	services_use(gpusysd_services);
	assert_int_equal(services_add_settings(&def), 0);
	c = def;
	if (parse(&c, text, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_same_settings(&c, &def);
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
		cmocka_unit_test(test_text_keys_have_line),
		cmocka_unit_test(test_slots_have_line),
		cmocka_unit_test(test_admin_group),
		cmocka_unit_test(test_odd_bytes),
		cmocka_unit_test(test_not_a_file),
		cmocka_unit_test(test_auto_pollers),
		cmocka_unit_test(test_example_file),
		cmocka_unit_test(test_workers_per_gpu_file),
		cmocka_unit_test(test_service_keys_and_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
