/* SPDX-License-Identifier: MIT */
/*
 * Restarting gpusysd under load (issue 16, docs/RESTART.md).
 *
 * What a restart guarantees TODAY (no handover yet): a call in flight when
 * the daemon stops either completes once or fails with -ESHUTDOWN; no call
 * runs twice and no write lands anywhere but where it was asked; a client
 * that attaches again to the restarted daemon carries on. This test holds
 * the daemon to that over 20 SIGTERM restarts while 4 emulated clients call
 * ECHO (sequence number in the payload, checked on return) and FILE_PWRITE
 * (the sequence number at offset 8*seq of the client's own file, checked in
 * the file afterwards), and prints the gap clients see and the calls that
 * failed (the figure in bench/RESULTS.md). The handover of docs/RESTART.md
 * would bring the failed count to 0; this test then tightens to that.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
#include "libclient/client.h" /* the connection layer: attach again after a restart */
#include "gpusys/emulator.h"
#include "gpusys/file_emu.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES
#define NCLIENTS 4
#define NRESTARTS 20
#define MAX_SEQ 2000000u
#define REATTACH_MS 5000

/* What happened to one sequence number of one client. */
enum outcome { NONE = 0, OK = 1, FAILED_ECHO = 2, FAILED_WRITE = 3 };

struct worker {
	struct gd *d;
	int id;
	char path[256];
	atomic_bool stop;
	atomic_uint restarts_seen;
	atomic_uint ok_since_attach; /* calls done on the current daemon */
	uint8_t *outcome; /* [MAX_SEQ] */
	uint32_t n;       /* sequence numbers used */
	uint32_t wrong;   /* echoes that came back with another payload */
	uint32_t other_errors;
	int last_other;
	long gap_ms[NRESTARTS * 2];
	unsigned gaps;
	const char *fatal;
};

struct conn {
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	int32_t handle;
};

static void conn_close(struct conn *k)
{
	if (k->emu)
		gpusys_emu_close(k->emu);
	if (k->c)
		gpusys_client_detach(k->c);
	k->emu = NULL;
	k->c = NULL;
}

/* Attach and open the client's file; 0 or the failing call's error. */
static int conn_open(struct worker *w, struct conn *k)
{
	struct gpusys_attach_opts o = { .runtime_dir = w->d->runtime, .num_ports = 4, .cuda_device = -1 };
	int r = gpusys_client_attach(&o, &k->c);
	if (r < 0) {
		k->c = NULL;
		return r;
	}
	r = gpusys_emu_open(gpusys_client_channel(k->c), &k->emu);
	if (r < 0) {
		k->emu = NULL;
		conn_close(k);
		return r;
	}
	const char *path[L] = { w->path };
	int flags[L] = { O_WRONLY };
	uint32_t mode[L] = { 0 };
	int64_t ret[L];
	r = gpusys_emu_file_open(gpusys_emu_dev(k->emu), 1, path, flags, mode, ret);
	if (r == 0 && ret[0] < 0)
		r = (int)ret[0];
	if (r < 0) {
		conn_close(k);
		return r;
	}
	k->handle = (int32_t)ret[0];
	return 0;
}

/* Attach again until the restarted daemon takes us (REATTACH_MS at most). */
static int reattach(struct worker *w, struct conn *k)
{
	long t0 = now_ms();
	int r;
	conn_close(k);
	while ((r = conn_open(w, k)) < 0) {
		if (atomic_load(&w->stop) || now_ms() - t0 > REATTACH_MS)
			return r;
		usleep(2000);
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct conn k = { 0 };
	long failed_at = -1;

	gpusys_emu_set_warp(0);
	if (conn_open(w, &k) < 0) {
		w->fatal = "first attach failed";
		return NULL;
	}
	for (uint32_t seq = 0; !atomic_load(&w->stop); seq++) {
		if (seq >= MAX_SEQ) {
			w->fatal = "sequence space exhausted";
			break;
		}
		w->n = seq + 1;
		uint64_t in = (uint64_t)w->id << 32 | seq, out = 0;
		const void *ins[L] = { &in };
		void *outs[L] = { &out };
		uint32_t in_len[L] = { 8 }, cap[L] = { 8 }, out_len[L] = { 0 };
		int32_t st[L] = { 0 };
		int r = gpusys_emu_echo(gpusys_emu_dev(k.emu), 1, ins, in_len, outs, cap, out_len, st);
		if (r == 0 && (st[0] != 0 || out_len[0] != 8 || out != in))
			w->wrong++;
		if (r == 0) {
			const void *bufs[L] = { &seq };
			uint32_t count[L] = { 4 };
			int64_t off[L] = { (int64_t)seq * 4 }, ret[L] = { 0 };
			int32_t h[L] = { k.handle };
			r = gpusys_emu_file_pwrite(gpusys_emu_dev(k.emu), 1, h, bufs, count, off, ret);
			if (r == 0 && ret[0] != 4)
				r = ret[0] < 0 ? (int)ret[0] : -EIO;
			w->outcome[seq] = r == 0 ? OK : FAILED_WRITE;
		} else {
			w->outcome[seq] = FAILED_ECHO;
		}
		if (r == 0) {
			atomic_fetch_add(&w->ok_since_attach, 1);
			if (failed_at >= 0 && w->gaps < NRESTARTS * 2)
				w->gap_ms[w->gaps++] = now_ms() - failed_at;
			failed_at = -1;
			continue;
		}
		if (r != -ESHUTDOWN) {
			w->other_errors++;
			w->last_other = r;
		}
		if (getenv("RESTART_TRACE") && w->id == 0)
			fprintf(stderr, "%ld fail seq %u r %d op %d\n", now_ms(), seq, r, w->outcome[seq]);
		if (failed_at < 0)
			failed_at = now_ms();
		atomic_fetch_add(&w->restarts_seen, 1);
		atomic_store(&w->ok_since_attach, 0);
		int ra = reattach(w, &k);
		if (getenv("RESTART_TRACE") && w->id == 0)
			fprintf(stderr, "%ld reattach %d\n", now_ms(), ra);
		if (ra < 0 && !atomic_load(&w->stop)) {
			w->fatal = "the restarted daemon did not take us back";
			break;
		}
	}
	conn_close(&k);
	return NULL;
}

static void wait_up(struct gd *d)
{
	long t0 = now_ms();
	for (;;) {
		json_t *st = control_request(d->runtime, "{\"cmd\":\"status\"}\n");
		if (st) {
			json_decref(st);
			return;
		}
		if (now_ms() - t0 > 5000)
			fail_msg("restarted gpusysd not up within 5 s");
		usleep(2000);
	}
}

/* Load on this daemon: every client has done a few calls on it since it
 * attached (after the r-th restart). */
static void wait_load(struct worker *w, unsigned r)
{
	long t0 = now_ms();
	for (int i = 0; i < NCLIENTS; i++)
		while (atomic_load(&w[i].restarts_seen) < r || atomic_load(&w[i].ok_since_attach) < 50) {
			if (w[i].fatal)
				fail_msg("client %d: %s", i, w[i].fatal);
			if (now_ms() - t0 > 5000)
				fail_msg("client %d did no calls on the daemon of restart %u within 5 s", i, r);
			usleep(1000);
		}
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* 20 SIGTERM restarts under 4 clients: every call accounted for once. */
static void test_restart_under_load(void **state)
{
	struct gd d;
	struct worker *w = calloc(NCLIENTS, sizeof(*w));
	pthread_t t[NCLIENTS];
	long stop_ms_max = 0;

	(void)state;
	assert_non_null(w);
	gd_start(&d, getenv("RESTART_CONF") ? getenv("RESTART_CONF") : "pollers = 1\n");
	for (int i = 0; i < NCLIENTS; i++) {
		w[i].d = &d;
		w[i].id = i;
		snprintf(w[i].path, sizeof(w[i].path), "%s/client%d.dat", d.dir, i);
		int fd = open(w[i].path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		close(fd);
		w[i].outcome = calloc(MAX_SEQ, 1);
		assert_non_null(w[i].outcome);
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	long t_begin = now_ms();
	for (int r = 0; r < NRESTARTS; r++) {
		wait_load(w, (unsigned)r);
		long ms = 0;
		int ws = gd_stop(&d, &ms);
		assert_true(WIFEXITED(ws));
		if (ms > stop_ms_max)
			stop_ms_max = ms;
		d.pid = gd_spawn(&d, NULL);
		wait_up(&d);
	}
	wait_load(w, NRESTARTS);
	for (int i = 0; i < NCLIENTS; i++)
		atomic_store(&w[i].stop, true);
	for (int i = 0; i < NCLIENTS; i++)
		pthread_join(t[i], NULL);
	long t_total = now_ms() - t_begin;

	long gaps[NCLIENTS * NRESTARTS * 2];
	unsigned ngaps = 0;
	uint64_t ok = 0, failed = 0;
	for (int i = 0; i < NCLIENTS; i++) {
		if (w[i].fatal)
			fail_msg("client %d: %s", i, w[i].fatal);
		if (w[i].wrong)
			fail_msg("client %d: %u echoes came back with another call's payload", i, w[i].wrong);
		if (w[i].other_errors)
			fail_msg("client %d: %u calls failed with %d, not -ESHUTDOWN", i, w[i].other_errors,
				 w[i].last_other);
		/* Every client sees every restart: it calls without pause. */
		if (atomic_load(&w[i].restarts_seen) < NRESTARTS)
			fail_msg("client %d noticed %u of %d restarts", i, atomic_load(&w[i].restarts_seen), NRESTARTS);

		/* The file: each slot holds its sequence number where the call
		 * said done, and nothing else anywhere. A failed write may or
		 * may not have happened (-ESHUTDOWN after the daemon ran it):
		 * then the slot is 0 or its own number, never another. */
		FILE *f = fopen(w[i].path, "rb");
		assert_non_null(f);
		uint32_t v;
		uint32_t slot = 0;
		while (fread(&v, 4, 1, f) == 1) {
			uint8_t o = slot < w[i].n ? w[i].outcome[slot] : NONE;
			if (o == OK && v != slot)
				fail_msg("client %d: slot %u holds %u after a write that succeeded", i, slot, v);
			if (o == FAILED_WRITE && v != slot && v != 0)
				fail_msg("client %d: slot %u holds %u after a failed write", i, slot, v);
			if ((o == FAILED_ECHO || o == NONE) && v != 0)
				fail_msg("client %d: slot %u holds %u, never written", i, slot, v);
			slot++;
		}
		fclose(f);
		for (uint32_t s = 0; s < w[i].n; s++) {
			if (w[i].outcome[s] == OK) {
				ok++;
				if (s >= slot)
					fail_msg("client %d: write %u succeeded but the file ends at slot %u", i, s, slot);
			} else if (w[i].outcome[s] != NONE) {
				failed++;
			}
		}
		for (unsigned g = 0; g < w[i].gaps; g++)
			gaps[ngaps++] = w[i].gap_ms[g];
		free(w[i].outcome);
	}
	for (int i = 0; i < NCLIENTS; i++)
		print_message("client %d: %u calls, %u failures, %u gaps\n", i, w[i].n, atomic_load(&w[i].restarts_seen), w[i].gaps);
	assert_true(ok > 0);
	assert_true(ngaps >= NCLIENTS * NRESTARTS);
	qsort(gaps, ngaps, sizeof(gaps[0]), cmp_long);
	print_message("restart: %d restarts x %d clients in %ld ms: %" PRIu64 " calls done, %" PRIu64
		      " failed with -ESHUTDOWN (0 wrong, 0 repeated); client-seen gap median %ld ms, max %ld ms;"
		      " slowest stop %ld ms\n",
		      NRESTARTS, NCLIENTS, t_total, ok, failed, gaps[ngaps / 2], gaps[ngaps - 1], stop_ms_max);
	/* Today every restart costs each client the call in flight at most. */
	assert_true(failed <= (uint64_t)NCLIENTS * NRESTARTS * 2);
	/* A restart is a stop and a start (tens of ms): a median gap of a
	 * second was a lost wake-up (a pool call's release after its answer;
	 * core/port_server.h, port_release_off_poller). */
	assert_true(gaps[ngaps / 2] < 500);
	gd_finish(&d);
	free(w);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restart_under_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
