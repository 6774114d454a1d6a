/* SPDX-License-Identifier: MIT */
/* End to end through the real daemon: emulated warps (CPU threads running
 * the device protocol code) make ECHO calls with random lane masks and
 * random payloads, streamed ones included, and check every byte back;
 * meanwhile other clients attach and detach, so channel-list changes
 * happen under load. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "harness.h"

#define WARPS 8
#define CALLS 100000
#define MAX_LEN 300 /* beyond the 64-byte slot: some lanes stream */

struct warp {
	const gpusys_dev_t *dev;
	uint32_t index;
	uint64_t seed;
	unsigned calls;
	int rc;         /* first failure */
	unsigned failed_call;
	uint64_t bytes; /* echoed and verified */
};

static uint64_t next_rand(uint64_t *s)
{
	/* xorshift64*: fast, and each warp's stream is reproducible. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

static void *warp_main(void *arg)
{
	struct warp *w = arg;
	static _Thread_local uint8_t in_buf[GPUSYS_WARP_LANES][MAX_LEN], out_buf[GPUSYS_WARP_LANES][MAX_LEN];
	const void *in[GPUSYS_WARP_LANES];
	void *out[GPUSYS_WARP_LANES];
	uint32_t in_len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES], out_len[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];

	/* Real warps do not compete with the daemon for CPUs; emulated ones
	 * spin on them. On a machine with fewer cores than warps + pollers,
	 * lowest priority keeps the daemon's pollers running, as they would
	 * beside a GPU. */
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), 19) < 0)
		w->rc = -errno;
	gpusys_emu_set_warp(w->index);
	for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++) {
		in[l] = in_buf[l];
		out[l] = out_buf[l];
		cap[l] = MAX_LEN;
	}
	for (unsigned i = 0; i < w->calls; i++) {
		uint64_t r = next_rand(&w->seed);
		uint64_t mask = (uint32_t)r;
		if (!mask)
			mask = 1;
		/* Most calls small, every eighth with long lanes. */
		unsigned max = (r >> 32) % 8 == 0 ? MAX_LEN : 48;
		for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			uint64_t x = next_rand(&w->seed);
			in_len[l] = (uint32_t)(x % (max + 1));
			for (uint32_t b = 0; b < in_len[l]; b++)
				in_buf[l][b] = (uint8_t)(x >> (b % 7 * 8)) ^ (uint8_t)b;
			out_len[l] = UINT32_MAX;
			st[l] = 1;
		}
		int rc = gpusys_emu_echo(w->dev, mask, in, in_len, out, cap, out_len, st);
		for (unsigned l = 0; !rc && l < GPUSYS_WARP_LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			if (st[l] != 0 || out_len[l] != in_len[l] || memcmp(in_buf[l], out_buf[l], in_len[l]))
				rc = -EBADMSG;
			w->bytes += in_len[l];
		}
		if (rc) {
			w->rc = rc;
			w->failed_call = i;
			return NULL;
		}
	}
	return NULL;
}

struct churn {
	const char *runtime;
	atomic_bool stop;
	unsigned cycles;
	int rc;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	struct gpusys_options o = { .runtime_dir = c->runtime, .num_ports = 16,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	while (!atomic_load(&c->stop)) {
		gpusys_t *cl;
		int rc = gpusys_attach(&o, &cl);
		if (rc) {
			c->rc = rc;
			return NULL;
		}
		usleep(1000);
		gpusys_detach(cl);
		c->cycles++;
	}
	return NULL;
}

static void echo_round(const char *config, const char *label, unsigned calls)
{
	struct gd d;
	gpusys_t *cl;
	struct gpusys_emu *emu;
	struct warp w[WARPS];
	pthread_t t[WARPS], ct;

	gd_start(&d, config);
	struct gpusys_options o = { .runtime_dir = d.runtime, .num_ports = WARPS,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	assert_int_equal(gpusys_attach(&o, &cl), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(cl), &emu), 0);

	struct churn churn = { .runtime = d.runtime };
	pthread_create(&ct, NULL, churn_main, &churn);
	long t0 = now_ms();
	for (uint32_t i = 0; i < WARPS; i++) {
		w[i] = (struct warp){ .dev = gpusys_emu_dev(emu), .index = i, .seed = 0x9e3779b97f4a7c15ull * (i + 1),
				      .calls = calls };
		pthread_create(&t[i], NULL, warp_main, &w[i]);
	}
	uint64_t bytes = 0;
	for (int i = 0; i < WARPS; i++) {
		pthread_join(t[i], NULL);
		if (w[i].rc)
			fail_msg("warp %d call %u: %s", i, w[i].failed_call, gpusys_strerror(w[i].rc));
		bytes += w[i].bytes;
	}
	long ms = now_ms() - t0;
	atomic_store(&churn.stop, true);
	pthread_join(ct, NULL);
	assert_int_equal(churn.rc, 0);
	print_message("%d warps x %u ECHO calls, %.1f MB verified, in %ld ms (%.0f calls/s); %u attach/detach "
		      "cycles meanwhile (%s)\n",
		      WARPS, calls, bytes / 1e6, ms, WARPS * (double)calls * 1000 / (ms ? ms : 1), churn.cycles,
		      label);

	/* Every request counted, by the channel and by the daemon. */
	assert_int_equal(gpusys_emu_synchronize(emu, 2000), 0);
	assert_int_equal(gpusys_channel_progress(gpusys_host_channel(cl)), (uint64_t)WARPS * calls);
	json_t *st = daemon_status(d.runtime);
	json_t *me = status_client(st, gpusys_client_id(cl));
	assert_non_null(me);
	assert_int_equal(json_integer_value(json_object_get(me, "requests")), (json_int_t)WARPS * calls);
	assert_int_equal(json_integer_value(json_object_get(me, "rejected")), 0);
	assert_int_equal(json_integer_value(json_object_get(me, "ports_in_use")), 0);
	json_decref(st);

	gpusys_emu_close(emu);
	gpusys_detach(cl);
	/* The total keeps the requests of clients gone. */
	long t1 = now_ms();
	for (;;) {
		st = daemon_status(d.runtime);
		json_int_t served = json_integer_value(json_object_get(st, "requests_served"));
		json_int_t n = json_integer_value(json_object_get(st, "clients_attached"));
		json_decref(st);
		if (n == 0) {
			assert_int_equal(served, (json_int_t)WARPS * calls);
			break;
		}
		assert_true(now_ms() - t1 < 1000);
		usleep(2000);
	}
	gd_finish(&d);
}

static void test_echo_warps(void **state)
{
	(void)state;
	echo_round("pollers = 1\n", "1 poller", CALLS);
}

/* Several pollers: claims keep them off each other's ports, helpers park
 * and are woken, every poller's progress word counts. */
static void test_echo_pollers(void **state)
{
	(void)state;
	echo_round("pollers = 3\nworkers = 2\n", "3 pollers", CALLS / 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_warps),
		cmocka_unit_test(test_echo_pollers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
