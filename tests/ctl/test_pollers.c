/* SPDX-License-Identifier: MIT */
/*
 * gpusysctl pollers against a live gpusysd: the pollers' counters add up.
 * N single-packet ECHOs are N steps served; every port found with work is
 * either served, a collision, or held by a call; calls pending later show
 * as held; the sampled times are there while counting is on and absent
 * while it is off (stats = 0); the window ports, which carry every large
 * stream, are served by more than one poller.
 */
#include <errno.h>
#include <pthread.h>
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
#define ECHOES 3000

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

/* The counters summed over the pollers. */
struct totals {
	long long passes, empty, scanned, found, served, collisions, held, hot, timed, pass_ns, serve_ns;
	long long answer_ns, count_ns, timed_served;
	size_t pollers;
	size_t serving; /* pollers that served a step */
};

static struct totals read_totals(const struct gd *d)
{
	char *out = ctl(d, "pollers", "--json");
	json_error_t jerr;
	json_t *r = json_loads(out, 0, &jerr), *p;
	assert_non_null(r);
	struct totals t = { 0 };
	size_t i;
	json_array_foreach(json_object_get(r, "pollers"), i, p)
	{
#define F(k) (long long)json_integer_value(json_object_get(p, k))
		assert_int_equal(F("index"), (long long)i);
		t.passes += F("passes");
		t.empty += F("empty_passes");
		t.scanned += F("ports_scanned");
		t.found += F("found");
		t.served += F("served");
		t.collisions += F("collisions");
		t.held += F("held");
		t.hot += F("hot_hits");
		t.timed += F("timed_passes");
		t.pass_ns += F("timed_pass_ns");
		t.serve_ns += F("timed_serve_ns");
		t.answer_ns += F("timed_answer_ns");
		t.count_ns += F("timed_count_ns");
		t.timed_served += F("timed_served");
		t.serving += F("served") > 0;
#undef F
	}
	t.pollers = json_array_size(json_object_get(r, "pollers"));
	json_decref(r);
	free(out);
	return t;
}

/* A poller adds a pass's counts after the pass, so after its answer: wait
 * until served reaches want (2 s at most). */
static struct totals wait_served(const struct gd *d, long long want)
{
	long t0 = now_ms();
	for (;;) {
		struct totals t = read_totals(d);
		if (t.served >= want || now_ms() - t0 > 2000)
			return t;
		usleep(5000);
	}
}

static void echo_n(const gpusys_dev_t *dev, int n)
{
	char msg[16] = "count me";
	for (int i = 0; i < n; i++) {
		const void *in[GPUSYS_WARP_LANES] = { msg };
		uint32_t in_len[GPUSYS_WARP_LANES] = { sizeof(msg) };
		char back[16];
		void *outp[GPUSYS_WARP_LANES] = { back };
		uint32_t cap[GPUSYS_WARP_LANES] = { sizeof(back) }, out_len[GPUSYS_WARP_LANES];
		int32_t st[GPUSYS_WARP_LANES];
		assert_int_equal(gpusys_emu_echo(dev, 1, in, in_len, outp, cap, out_len, st), 0);
		assert_int_equal(st[0], 0);
	}
}

static void attach(const struct gd *d, uint32_t num_ports, gpusys_t **c, struct gpusys_emu **emu)
{
	struct gpusys_options o = { .runtime_dir = d->runtime, .num_ports = num_ports,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(*c), emu), 0);
}

static void test_counters_add_up(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;

	(void)state;
	gd_start(&d, "pollers = 2\n");
	/* Nothing attached: nothing found, nothing served. */
	struct totals t = read_totals(&d);
	assert_int_equal(t.pollers, 2);
	assert_int_equal(t.found, 0);
	assert_int_equal(t.served, 0);

	attach(&d, 8, &c, &emu);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	echo_n(dev, ECHOES);
	t = wait_served(&d, ECHOES);
	/* One warp, one port at a time, each ECHO one packet: one step each.
	 * (The attach itself sends no request through the ports.) */
	assert_int_equal(t.served, ECHOES);
	assert_int_equal(t.found, t.served + t.collisions + t.held);
	assert_true(t.hot <= t.served);
	assert_true(t.passes > 0 && t.empty <= t.passes);
	/* Every pass reads at least one port of its share; found ones among them. */
	assert_true(t.scanned >= t.passes);
	assert_true(t.scanned >= t.found);
	/* Counting is on by default: one pass in 16 timed, serving a part of it. */
	assert_true(t.timed > 0 && t.timed <= t.passes);
	assert_true(t.pass_ns > 0 && t.serve_ns <= t.pass_ns);
	/* Answering and counting are parts of serving; ECHOs of 16 bytes take
	 * the fast path, so a timed pass that served one timed both. */
	assert_true(t.answer_ns + t.count_ns <= t.serve_ns);
	assert_true(t.timed_served <= t.served);
	if (t.timed_served)
		assert_true(t.answer_ns > 0 && t.count_ns > 0);

	/* Calls pending later hold their ports: found while held, not served
	 * and not collisions, until they complete. */
	for (uint32_t i = 0; i < 3; i++) {
		gpusys_emu_set_warp(i);
		assert_int_equal(emu_sleep(dev, 300 * MS, 0, GPUSYS_REQ_NOREPLY), 0);
	}
	long t0 = now_ms();
	struct totals u;
	do {
		usleep(10000);
		u = read_totals(&d);
	} while (u.held == t.held && now_ms() - t0 < 2000);
	assert_true(u.held > t.held);
	assert_int_equal(u.served, ECHOES + 3); /* the three SLEEPs' first steps */
	assert_int_equal(u.found, u.served + u.collisions + u.held);

	/* The text view: a line per poller and a total. */
	char *out = ctl(&d, "pollers", NULL);
	assert_non_null(strstr(out, "POLLER"));
	assert_non_null(strstr(out, "SERVE ns"));
	assert_non_null(strstr(out, "\nall "));
	assert_null(strstr(out, "timing is off"));
	free(out);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

/* Warps streaming large ECHOs through the window ports at once. */
struct window_warp {
	const gpusys_dev_t *dev;
	uint32_t warp;
	int bad;
};

static void *window_warp_main(void *arg)
{
	struct window_warp *w = arg;
	enum { LEN = 32 * 1024 }; /* past a plain port's packet: a window's */
	uint8_t *in = malloc(LEN), *back = malloc(LEN);
	gpusys_emu_set_warp(w->warp);
	for (int i = 0; i < 40 && !w->bad; i++) {
		for (uint32_t b = 0; b < LEN; b++)
			in[b] = (uint8_t)(b * 3 + i + w->warp);
		const void *inp[GPUSYS_WARP_LANES] = { in };
		uint32_t in_len[GPUSYS_WARP_LANES] = { LEN };
		void *outp[GPUSYS_WARP_LANES] = { back };
		uint32_t cap[GPUSYS_WARP_LANES] = { LEN }, out_len[GPUSYS_WARP_LANES];
		int32_t st[GPUSYS_WARP_LANES];
		w->bad = gpusys_emu_echo(w->dev, 1, inp, in_len, outp, cap, out_len, st) != 0 || st[0] != 0 ||
			 out_len[0] != LEN || memcmp(in, back, LEN) != 0;
	}
	free(in);
	free(back);
	return NULL;
}

/* The window ports are the last of a channel's ports: in one poller's
 * share of equal ranges, every large stream was copied by that poller
 * alone (bench/RESULTS.md "Ninth session": the whole GPU's 32 x 64 KiB
 * echoes at what one thread copies). They are dealt out one by one, so
 * with warps streaming through all of them at once, more than one poller
 * serves them. */
static void test_windows_served_by_every_poller(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;

	(void)state;
	/* Pollers that saw work within the last second spin: none parks
	 * between one warp's steps on a loaded machine (a parked poller's
	 * share is poller 0's). */
	gd_start(&d, "pollers = 4\nidle_spin_us = 1000000\n");
	attach(&d, 64, &c, &emu);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	assert_int_equal(dev->num_windows, 16);

	/* Rounds of warps until every poller has served (a poller that a
	 * loaded machine leaves unscheduled for a round gets another): with
	 * the windows in one poller's share, two of the four never serve. */
	enum { WARPS = 16, ROUNDS = 10 };
	struct totals t = { 0 };
	for (int round = 0; round < ROUNDS && t.serving < 4; round++) {
		struct window_warp w[WARPS];
		pthread_t th[WARPS];
		for (uint32_t i = 0; i < WARPS; i++) {
			w[i] = (struct window_warp){ dev, i, 0 };
			assert_int_equal(pthread_create(&th[i], NULL, window_warp_main, &w[i]), 0);
		}
		for (uint32_t i = 0; i < WARPS; i++) {
			pthread_join(th[i], NULL);
			assert_int_equal(w[i].bad, 0);
		}
		t = read_totals(&d);
	}
	if (t.serving < 4)
		fail_msg("%zu of 4 pollers served the window ports (%lld steps, %d rounds)", t.serving, t.served, ROUNDS);

	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

/* stats = 0: the counts are still kept, nothing is timed. */
static void test_untimed_when_stats_off(void **state)
{
	struct gd d;
	gpusys_t *c;
	struct gpusys_emu *emu;

	(void)state;
	gd_start(&d, "stats = 0\npollers = 1\n");
	attach(&d, 8, &c, &emu);
	echo_n(gpusys_emu_dev(emu), 500);
	struct totals t = wait_served(&d, 500);
	assert_int_equal(t.pollers, 1);
	assert_int_equal(t.served, 500);
	assert_int_equal(t.found, t.served + t.collisions + t.held);
	assert_int_equal(t.timed, 0);
	assert_int_equal(t.pass_ns, 0);
	assert_int_equal(t.answer_ns + t.count_ns, 0);
	char *out = ctl(&d, "pollers", NULL);
	assert_non_null(strstr(out, "timing is off"));
	free(out);
	gpusys_emu_close(emu);
	gpusys_detach(c);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_add_up),
		cmocka_unit_test(test_untimed_when_stats_off),
		cmocka_unit_test(test_windows_served_by_every_poller),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
