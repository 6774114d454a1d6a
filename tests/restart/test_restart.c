/* SPDX-License-Identifier: MIT */
/*
 * Restarting gpusysd under load (issue 16, docs/RESTART.md).
 *
 * With restart_grace_ms set, a SIGTERM hands every client over: libgpusys
 * re-offers its channel to the next daemon by itself, and a call in flight
 * completes once or fails with -ECONNABORTED having not run. This test
 * holds the daemon to that over 20 SIGTERM restarts while 4 emulated
 * clients, attached once and never by hand again, call ECHO (a payload of
 * ECHO_BYTES that streams, the sequence number in it, checked on return)
 * and FILE_PWRITE (the sequence number at offset 4*seq of the client's own
 * file, checked in the file afterwards). A handle of the old daemon fails
 * -EBADF after the restart (the write did not run; the client opens its
 * file again): exactly once per restart and client. It prints the gap
 * clients see at each restart (bench/RESULTS.md).
 *
 * A kill -9 is no handover: clients still get -ESHUTDOWN within a second
 * and the next daemon adopts nothing.
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
#include "libclient/attach/client.h" /* the connection layer: attach once */
#include "gpusys/emulator.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES
#define NCLIENTS 4
#define NRESTARTS 20
#define MAX_SEQ 2000000u
/* More than one packet each way: requests and responses stream, so a
 * restart meets ports receiving and sending, not only idle ones. */
#define ECHO_BYTES 3000u
#define MAX_SLOW 4096
#define HANDOVER_CONF "pollers = 1\nrestart_grace_ms = 5000\nrestart_drain_ms = 1000\n"

/* What happened to one sequence number of one client. */
enum outcome { NONE = 0, OK, ECHO_ABORTED, WRITE_ABORTED, WRITE_STALE };

struct slow_call {
	long start, end;
};

struct worker {
	struct gd *d;
	int id;
	char path[256];
	atomic_bool stop;
	atomic_uint restarts_seen; /* stale handles met: one per restart */
	atomic_uint ok_since_restart;
	uint8_t *outcome; /* [MAX_SEQ] */
	uint32_t n;       /* sequence numbers used */
	uint32_t wrong;   /* echoes that came back with other bytes */
	uint32_t other_errors;
	int last_other;
	const char *last_other_op;
	struct slow_call slow[MAX_SLOW]; /* calls of 1 ms or more */
	unsigned nslow;
	const char *fatal;
};

static void fill(uint8_t *b, uint64_t tag)
{
	memcpy(b, &tag, sizeof(tag));
	for (uint32_t i = sizeof(tag); i < ECHO_BYTES; i++)
		b[i] = (uint8_t)(tag * 31 + i);
}

static int open_file(const char *p, struct gpusys_emu *emu, int32_t *ret_handle)
{
	const char *path[L] = { p };
	int flags[L] = { O_WRONLY };
	uint32_t mode[L] = { 0 };
	int64_t ret[L];
	int r = gpusys_emu_file_open(gpusys_emu_dev(emu), 1, path, flags, mode, ret);
	if (r == 0 && ret[0] < 0)
		r = (int)ret[0];
	if (r == 0)
		*ret_handle = (int32_t)ret[0];
	return r;
}

/* open_file, again while a restarting daemon refuses it unrun
 * (-ECONNABORTED: a path that streams past packet 0 can be caught half sent
 * by a restart, as the writes are), until stop; any other result is
 * returned. */
static int open_file_retrying(const char *p, const atomic_bool *stop, struct gpusys_emu *emu, int32_t *ret_handle)
{
	int r;
	while ((r = open_file(p, emu, ret_handle)) == -ECONNABORTED && !atomic_load(stop))
		usleep(1000);
	return r;
}

static void other_error(struct worker *w, const char *op, int r)
{
	w->other_errors++;
	w->last_other = r;
	w->last_other_op = op;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct gpusys_client *c = NULL;
	struct gpusys_emu *emu = NULL;
	int32_t handle = -1;
	static _Thread_local uint8_t in[ECHO_BYTES], out[ECHO_BYTES];

	gpusys_emu_set_warp(0);
	struct gpusys_attach_opts o = { .runtime_dir = w->d->runtime, .num_ports = 4, .cuda_device = -1 };
	if (gpusys_client_attach(&o, &c) < 0 || gpusys_emu_open(gpusys_client_channel(c), &emu) < 0 ||
	    open_file(w->path, emu, &handle) < 0) {
		w->fatal = "first attach failed";
		goto out;
	}
	for (uint32_t seq = 0; !atomic_load(&w->stop); seq++) {
		if (seq >= MAX_SEQ) {
			w->fatal = "sequence space exhausted";
			break;
		}
		w->n = seq + 1;
		long t0 = now_ms();
		fill(in, (uint64_t)w->id << 32 | seq);
		memset(out, 0, sizeof(out));
		const void *ins[L] = { in };
		void *outs[L] = { out };
		uint32_t in_len[L] = { ECHO_BYTES }, cap[L] = { ECHO_BYTES }, out_len[L] = { 0 };
		int32_t st[L] = { 0 };
		int r = gpusys_emu_echo(gpusys_emu_dev(emu), 1, ins, in_len, outs, cap, out_len, st);
		if (r == 0 && (st[0] != 0 || out_len[0] != ECHO_BYTES || memcmp(in, out, ECHO_BYTES)))
			w->wrong++;
		if (r == -ECONNABORTED) {
			w->outcome[seq] = ECHO_ABORTED;
		} else if (r < 0) {
			other_error(w, "echo", r);
		} else {
			const void *bufs[L] = { &seq };
			uint32_t count[L] = { 4 };
			int64_t off[L] = { (int64_t)seq * 4 }, ret[L] = { 0 };
			int32_t h[L] = { handle };
			r = gpusys_emu_file_pwrite(gpusys_emu_dev(emu), 1, h, bufs, count, off, ret);
			if (r == 0 && ret[0] != 4)
				r = ret[0] < 0 ? (int)ret[0] : -EIO;
			if (r == 0) {
				w->outcome[seq] = OK;
				atomic_fetch_add(&w->ok_since_restart, 1);
			} else if (r == -ECONNABORTED) {
				w->outcome[seq] = WRITE_ABORTED;
			} else if (r == -EBADF) {
				/* The handle was the old daemon's: the write did
				 * not run. Open the file again on the new one. */
				w->outcome[seq] = WRITE_STALE;
				atomic_store(&w->ok_since_restart, 0);
				atomic_fetch_add(&w->restarts_seen, 1);
				int ro = open_file_retrying(w->path, &w->stop, emu, &handle);
				if (ro < 0 && !(ro == -ECONNABORTED && atomic_load(&w->stop)))
					other_error(w, "reopen", ro);
			} else {
				other_error(w, "pwrite", r);
			}
		}
		long t1 = now_ms();
		if (t1 - t0 >= 1 && w->nslow < MAX_SLOW)
			w->slow[w->nslow++] = (struct slow_call){ t0, t1 };
		if (w->other_errors) {
			w->fatal = "a call failed with an error a restart does not explain";
			break;
		}
	}
out:
	if (emu)
		gpusys_emu_close(emu);
	gpusys_client_detach(c);
	return NULL;
}

/* Load on this daemon: every client has met restart r (its stale handle)
 * and done a few calls since. */
static void wait_load(struct worker *w, unsigned r)
{
	long t0 = now_ms();
	for (int i = 0; i < NCLIENTS; i++)
		while (atomic_load(&w[i].restarts_seen) < r || atomic_load(&w[i].ok_since_restart) < 50) {
			/* With the daemons' log, which the test's stderr does
			 * not carry: CI saw a client's -ESHUTDOWN here and a
			 * slow start in gd_wait_up, twice in six runs
			 * (2026-11-29), never a run alone. */
			if (w[i].fatal)
				fail_msg("client %d: %s (%s: %d); the end of gpusysd's log:\n%s", i, w[i].fatal,
					 w[i].last_other_op ? w[i].last_other_op : "-", w[i].last_other,
					 gd_log_tail(w[i].d, 4000));
			if (now_ms() - t0 > 10000)
				fail_msg("client %d did no calls on the daemon of restart %u within 10 s; the end of "
					 "gpusysd's log:\n%s",
					 i, r, gd_log_tail(w[i].d, 4000));
			usleep(1000);
		}
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* 20 SIGTERM restarts under 4 clients, handed over: every call accounted
 * for exactly once. */
static void test_restart_under_load(void **state)
{
	struct gd d;
	struct worker *w = calloc(NCLIENTS, sizeof(*w));
	pthread_t t[NCLIENTS];
	long stop_at[NRESTARTS], up_at[NRESTARTS], stop_ms_max = 0;

	(void)state;
	assert_non_null(w);
	gd_start(&d, getenv("RESTART_CONF") ? getenv("RESTART_CONF") : HANDOVER_CONF);
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
		stop_at[r] = now_ms();
		int ws = gd_stop(&d, &ms);
		assert_true(WIFEXITED(ws));
		assert_int_equal(WEXITSTATUS(ws), 0);
		if (ms > stop_ms_max)
			stop_ms_max = ms;
		d.pid = gd_spawn(&d, NULL);
		gd_wait_up(&d);
		up_at[r] = now_ms();
	}
	wait_load(w, NRESTARTS);
	for (int i = 0; i < NCLIENTS; i++)
		atomic_store(&w[i].stop, true);
	for (int i = 0; i < NCLIENTS; i++)
		pthread_join(t[i], NULL);
	long t_total = now_ms() - t_begin;

	uint64_t ok = 0, echo_aborted = 0, write_aborted = 0, stale = 0;
	for (int i = 0; i < NCLIENTS; i++) {
		if (w[i].fatal)
			fail_msg("client %d: %s (%s: %d)", i, w[i].fatal, w[i].last_other_op ? w[i].last_other_op : "-",
				 w[i].last_other);
		if (w[i].wrong)
			fail_msg("client %d: %u echoes came back with other bytes", i, w[i].wrong);
		/* One stale handle per restart: each restart reached the
		 * client, through the library alone. */
		if (atomic_load(&w[i].restarts_seen) != NRESTARTS)
			fail_msg("client %d met %u stale handles over %d restarts", i, atomic_load(&w[i].restarts_seen),
				 NRESTARTS);

		/* The file: each slot holds its sequence number exactly where
		 * the call said done, zero wherever it said not run (aborted,
		 * stale handle, or the echo before it failed). */
		FILE *f = fopen(w[i].path, "rb");
		assert_non_null(f);
		uint32_t v, slot = 0;
		while (fread(&v, 4, 1, f) == 1) {
			uint8_t o = slot < w[i].n ? w[i].outcome[slot] : NONE;
			if (o == OK && v != slot)
				fail_msg("client %d: slot %u holds %u after a write that succeeded", i, slot, v);
			if (o != OK && v != 0)
				fail_msg("client %d: slot %u holds %u after a write that did not run (outcome %u)", i, slot,
					 v, o);
			slot++;
		}
		fclose(f);
		for (uint32_t s = 0; s < w[i].n; s++) {
			switch (w[i].outcome[s]) {
			case OK:
				ok++;
				if (s >= slot)
					fail_msg("client %d: write %u succeeded but the file ends at slot %u", i, s, slot);
				break;
			case ECHO_ABORTED: echo_aborted++; break;
			case WRITE_ABORTED: write_aborted++; break;
			case WRITE_STALE: stale++; break;
			default: break;
			}
		}
		free(w[i].outcome);
	}
	/* The gap each restart cost: the longest call that was under way
	 * between the SIGTERM and the next daemon answering. */
	long gaps[NRESTARTS];
	for (int r = 0; r < NRESTARTS; r++) {
		gaps[r] = 0;
		for (int i = 0; i < NCLIENTS; i++)
			for (unsigned k = 0; k < w[i].nslow; k++)
				if (w[i].slow[k].start <= up_at[r] && w[i].slow[k].end >= stop_at[r] &&
				    w[i].slow[k].end - w[i].slow[k].start > gaps[r])
					gaps[r] = w[i].slow[k].end - w[i].slow[k].start;
		print_message("restart %2d: client-seen gap %ld ms (stop to up %ld ms)\n", r, gaps[r],
			      up_at[r] - stop_at[r]);
	}
	qsort(gaps, NRESTARTS, sizeof(gaps[0]), cmp_long);
	print_message("restart: %d handovers x %d clients in %ld ms: %" PRIu64 " calls done, %" PRIu64
		      " echoes and %" PRIu64 " writes refused unrun (-ECONNABORTED), %" PRIu64
		      " writes on stale handles (-EBADF); 0 wrong, 0 repeated; gap median %ld ms, max %ld ms;"
		      " slowest stop %ld ms\n",
		      NRESTARTS, NCLIENTS, t_total, ok, echo_aborted, write_aborted, stale, gaps[NRESTARTS / 2],
		      gaps[NRESTARTS - 1], stop_ms_max);
	assert_true(ok > 0);
	assert_int_equal(stale, (uint64_t)NCLIENTS * NRESTARTS);
	/* Calls wait through the restart instead of failing: a gap is a stop
	 * and a start (tens of ms here), never the re-offer's 10 s bound. */
	assert_true(gaps[NRESTARTS / 2] < 1000);
	gd_finish(&d);
	free(w);
}

/* kill -9: nothing drained, so nothing is handed over: every client gets
 * -ESHUTDOWN within a second, and the next daemon adopts none. */
struct killed {
	struct gd *d;
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	atomic_bool running;
	atomic_long failed_at;
	int failed_with;
};

static void *killed_main(void *arg)
{
	struct killed *k = arg;
	gpusys_emu_set_warp(0);
	for (;;) {
		uint64_t in = 42, out = 0;
		const void *ins[L] = { &in };
		void *outs[L] = { &out };
		uint32_t in_len[L] = { 8 }, cap[L] = { 8 }, out_len[L] = { 0 };
		int32_t st[L] = { 0 };
		int r = gpusys_emu_echo(gpusys_emu_dev(k->emu), 1, ins, in_len, outs, cap, out_len, st);
		atomic_store(&k->running, true);
		if (r < 0) {
			k->failed_with = r;
			atomic_store(&k->failed_at, now_ms());
			return NULL;
		}
	}
}

static void test_kill9_no_adoption(void **state)
{
	struct gd d;
	struct killed k[2];
	pthread_t t[2];

	(void)state;
	gd_start(&d, HANDOVER_CONF);
	for (int i = 0; i < 2; i++) {
		k[i] = (struct killed){ .d = &d };
		struct gpusys_attach_opts o = { .runtime_dir = d.runtime, .num_ports = 2, .cuda_device = -1 };
		assert_int_equal(gpusys_client_attach(&o, &k[i].c), 0);
		assert_int_equal(gpusys_emu_open(gpusys_client_channel(k[i].c), &k[i].emu), 0);
		assert_int_equal(pthread_create(&t[i], NULL, killed_main, &k[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		while (!atomic_load(&k[i].running))
			usleep(1000);
	usleep(20000);
	long killed_at = now_ms();
	assert_int_equal(kill(d.pid, SIGKILL), 0);
	assert_true(wait_exit(d.pid, 2000) >= 0);
	/* The next daemon is up at once: a client that re-offered would find
	 * it (and must not be taken). */
	d.pid = gd_spawn(&d, NULL);
	gd_wait_up(&d);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(k[i].failed_with, -ESHUTDOWN);
		long ms = atomic_load(&k[i].failed_at) - killed_at;
		print_message("kill -9: client %d got -ESHUTDOWN after %ld ms\n", i, ms);
		assert_true(ms < 1000);
		const struct gpusys_channel_header *h = gpusys_client_channel(k[i].c);
		assert_int_equal(h->server_state, GPUSYS_SERVER_RUNNING); /* as the killed daemon left it */
	}
	usleep(100000);
	json_t *st = daemon_status(d.runtime);
	assert_non_null(st);
	assert_int_equal(json_array_size(json_object_get(st, "clients")), 0);
	json_decref(st);
	char *log = gd_log(&d);
	assert_null(strstr(log, "took back its channel"));
	free(log);
	for (int i = 0; i < 2; i++) {
		gpusys_emu_close(k[i].emu);
		gpusys_client_detach(k[i].c);
	}
	gd_finish(&d);
}


/* Requests still streaming in when restart_drain_ms (0 here: at once) ends
 * are refused at their next packet, unrun: a 128 KiB write goes through 64
 * request packets (no bulk area), so restarts catch writes half sent. Each
 * write's range holds its sequence number where the call said done, and
 * zeros where it said -ECONNABORTED. */
#define BIG_WRITE 131072u
#define ABORT_CLIENTS 2
/* Restarts to try before giving up on catching a write mid-stream: a run
 * usually catches one in its first 3, but CI's loaded 2 cores once went 15
 * without. */
#define ABORT_RESTARTS_MAX 40

struct streamer {
	struct gd *d;
	int id;
	char path[256];
	atomic_bool stop;
	atomic_uint ok_since_restart;
	uint8_t outcome[1u << 16];
	uint32_t n, aborted, stale;
	int other;
};

static void *streamer_main(void *arg)
{
	struct streamer *w = arg;
	struct gpusys_client *c = NULL;
	struct gpusys_emu *emu = NULL;
	int32_t handle = -1;
	static _Thread_local uint32_t buf[BIG_WRITE / 4];

	gpusys_emu_set_warp(0);
	struct gpusys_attach_opts o = { .runtime_dir = w->d->runtime, .num_ports = 2, .cuda_device = -1 };
	if (gpusys_client_attach(&o, &c) < 0 || gpusys_emu_open(gpusys_client_channel(c), &emu) < 0 ||
	    open_file_retrying(w->path, &w->stop, emu, &handle) < 0) {
		w->other = -EIO;
		goto out;
	}
	for (uint32_t seq = 1; !atomic_load(&w->stop) && seq < (1u << 16); seq++) {
		w->n = seq + 1;
		for (uint32_t i = 0; i < BIG_WRITE / 4; i++)
			buf[i] = seq;
		const void *bufs[L] = { buf };
		uint32_t count[L] = { BIG_WRITE };
		int64_t off[L] = { (int64_t)seq * BIG_WRITE }, ret[L] = { 0 };
		int32_t h[L] = { handle };
		int r = gpusys_emu_file_pwrite(gpusys_emu_dev(emu), 1, h, bufs, count, off, ret);
		if (r == 0 && ret[0] != BIG_WRITE)
			r = ret[0] < 0 ? (int)ret[0] : -EIO;
		if (r == 0) {
			w->outcome[seq] = OK;
			atomic_fetch_add(&w->ok_since_restart, 1);
		} else if (r == -ECONNABORTED) {
			w->outcome[seq] = WRITE_ABORTED;
			w->aborted++;
		} else if (r == -EBADF) {
			w->outcome[seq] = WRITE_STALE;
			w->stale++;
			atomic_store(&w->ok_since_restart, 0);
			if ((r = open_file_retrying(w->path, &w->stop, emu, &handle)) < 0) {
				/* -ECONNABORTED only once told to stop */
				if (r != -ECONNABORTED)
					w->other = r;
				break;
			}
		} else {
			w->other = r;
			break;
		}
	}
out:
	if (emu)
		gpusys_emu_close(emu);
	gpusys_client_detach(c);
	return NULL;
}

static void test_abort_unfinished_streams(void **state)
{
	struct gd d;
	struct streamer *w = calloc(ABORT_CLIENTS, sizeof(*w));
	pthread_t t[ABORT_CLIENTS];

	(void)state;
	assert_non_null(w);
	gd_start(&d, "pollers = 1\nrestart_grace_ms = 5000\nrestart_drain_ms = 0\n");
	for (int i = 0; i < ABORT_CLIENTS; i++) {
		w[i].d = &d;
		w[i].id = i;
		snprintf(w[i].path, sizeof(w[i].path), "%s/client%d.dat", d.dir, i);
		int fd = open(w[i].path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		close(fd);
		assert_int_equal(pthread_create(&t[i], NULL, streamer_main, &w[i]), 0);
	}
	unsigned restarts = 0, aborted = 0;
	while (restarts < ABORT_RESTARTS_MAX && (restarts < 3 || aborted == 0)) {
		long t0 = now_ms();
		for (int i = 0; i < ABORT_CLIENTS; i++)
			while (atomic_load(&w[i].ok_since_restart) < 2) {
				if (w[i].other)
					fail_msg("client %d: a write failed with %d", i, w[i].other);
				if (now_ms() - t0 > 10000)
					fail_msg("client %d wrote nothing on the daemon of restart %u", i, restarts);
				usleep(1000);
			}
		long ms;
		int ws = gd_stop(&d, &ms);
		assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
		d.pid = gd_spawn(&d, NULL);
		gd_wait_up(&d);
		restarts++;
		aborted = 0;
		for (int i = 0; i < ABORT_CLIENTS; i++)
			aborted += w[i].aborted; /* racy read; exact after the joins */
	}
	usleep(50000);
	for (int i = 0; i < ABORT_CLIENTS; i++)
		atomic_store(&w[i].stop, true);
	aborted = 0;
	uint64_t ok = 0;
	for (int i = 0; i < ABORT_CLIENTS; i++) {
		pthread_join(t[i], NULL);
		if (w[i].other)
			fail_msg("client %d: a write failed with %d", i, w[i].other);
		aborted += w[i].aborted;
		FILE *f = fopen(w[i].path, "rb");
		assert_non_null(f);
		static uint32_t got[BIG_WRITE / 4];
		for (uint32_t seq = 1; seq < w[i].n; seq++) {
			size_t n = fseek(f, (long)seq * BIG_WRITE, SEEK_SET) == 0 ? fread(got, 4, BIG_WRITE / 4, f) : 0;
			uint8_t o = w[i].outcome[seq];
			ok += o == OK;
			for (size_t k = 0; k < BIG_WRITE / 4; k++) {
				uint32_t want = o == OK ? seq : 0;
				uint32_t v = k < n ? got[k] : 0;
				if (v != want)
					fail_msg("client %d: write %u (outcome %u) word %zu holds %u, not %u", i, seq, o, k, v,
						 want);
			}
		}
		fclose(f);
	}
	print_message("abort: %u restarts with restart_drain_ms = 0: %" PRIu64 " writes of %u bytes done, %u refused "
		      "unrun (-ECONNABORTED), none partly written\n",
		      restarts, ok, BIG_WRITE, aborted);
	assert_true(ok > 0);
	assert_true(aborted > 0);
	gd_finish(&d);
	free(w);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restart_under_load),
		cmocka_unit_test(test_kill9_no_adoption),
		cmocka_unit_test(test_abort_unfinished_streams),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
