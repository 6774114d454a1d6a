/* SPDX-License-Identifier: MIT */
/*
 * Asynchronous calls (futures) from emulated warps, through the real gpusysd
 * (ECHO, NOOP, file calls) and through the callback server of this process
 * (include/gpusys/callback.h), whose callbacks the test holds back and lets
 * go in any order: futures completed out of order, every warp waiting at
 * once, the per-warp bound reached from every warp, fire-and-forget, and
 * gpusys_emu_query false while a call is unanswered and true after.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/callback.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "device/file_client.h"
#include "../daemon/harness.h"

#define LANES GPUSYS_WARP_LANES
#define ALL_LANES UINT64_C(0xffffffff)

static struct gd daemon_;
static gpusys_t *client_;
static struct gpusys_emu *emu_;

/* One warp's echo buffers for one call. */
struct echo_call {
	uint8_t *in[LANES];
	uint8_t *out[LANES];
	const void *inp[LANES];
	void *outp[LANES];
	uint32_t in_len[LANES], cap[LANES], got[LANES];
	int32_t st[LANES];
};

static void echo_prepare(struct echo_call *c, uint64_t mask, uint32_t len, uint32_t tag)
{
	for (uint32_t l = 0; l < LANES; l++) {
		c->in[l] = c->out[l] = NULL;
		c->inp[l] = c->outp[l] = NULL;
		c->in_len[l] = c->cap[l] = 0;
		c->got[l] = UINT32_MAX;
		c->st[l] = 12345;
		if (!(mask >> l & 1))
			continue;
		uint32_t n = len + l; /* every lane a different length */
		c->in[l] = malloc(n + 1);
		c->out[l] = malloc(n + 8);
		for (uint32_t b = 0; b < n; b++)
			c->in[l][b] = (uint8_t)(tag * 131 + l * 7 + b);
		memset(c->out[l], 0xa5, n + 8);
		c->inp[l] = c->in[l];
		c->outp[l] = c->out[l];
		c->in_len[l] = n;
		c->cap[l] = n + 8;
	}
}

/* Every lane's bytes back, nothing past them touched; frees. */
static int echo_check(struct echo_call *c, uint64_t mask)
{
	int bad = 0;
	for (uint32_t l = 0; l < LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		if (c->st[l] != 0 || c->got[l] != c->in_len[l] || memcmp(c->in[l], c->out[l], c->in_len[l]))
			bad = 1;
		for (int k = 0; k < 8; k++)
			bad |= c->out[l][c->in_len[l] + k] != 0xa5;
		free(c->in[l]);
		free(c->out[l]);
	}
	return bad;
}

static int echo_start(const gpusys_dev_t *dev, uint64_t mask, struct echo_call *c, struct gpusys_emu_future *f)
{
	return gpusys_emu_rpc_async(dev, GPUSYS_OP_ECHO, 0, mask, c->inp, c->in_len, c->outp, c->cap, c->got, c->st,
				    f);
}

static int setup(void **state)
{
	(void)state;
	gd_start(&daemon_, "channel_bulk_bytes = 0\n");
	/* 512 ports: 384 asynchronous ones, enough for 16 warps x 8 futures
	 * (the bound test); the deadlock test makes a small channel of its own. */
	struct gpusys_options o = {
					.runtime_dir = daemon_.runtime,
					.num_ports = 512,

						.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
							  GPUSYS_ATTACH_NO_STDIO,
				};
	assert_int_equal(gpusys_attach(&o, &client_), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(client_), &emu_), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gpusys_emu_close(emu_);
	gpusys_detach(client_);
	gd_finish(&daemon_);
	return 0;
}

/* Eight futures of one warp, payloads from nothing to several packets,
 * waited in the reverse order; every lane's bytes checked. */
static void test_echo_futures_reverse(void **state)
{
	(void)state;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	static const uint32_t sizes[8] = { 0, 1, 40, 64, 65, 2000, 2048, 5000 };
	struct echo_call c[8];
	struct gpusys_emu_future f[8];

	gpusys_emu_set_warp(3);
	for (int i = 0; i < 8; i++) {
		uint64_t mask = i % 2 ? ALL_LANES : UINT64_C(0x0f0f00f1);
		echo_prepare(&c[i], mask, sizes[i], (uint32_t)i);
		assert_int_equal(echo_start(dev, mask, &c[i], &f[i]), 0);
		assert_int_equal(f[i].pd.sync, 0); /* below the bound, ports free */
	}
	for (int i = 7; i >= 0; i--) {
		assert_int_equal(gpusys_emu_wait(dev, &f[i]), 0);
		assert_int_equal(echo_check(&c[i], f[i].pd.mask), 0);
		/* Waiting again gives the same result. */
		assert_int_equal(gpusys_emu_wait(dev, &f[i]), 0);
	}
	assert_int_equal(gpusys_emu_synchronize(emu_, 2000), 0);
	assert_true(gpusys_emu_query(emu_));
}

/* Futures whose message is large take the window ports futures may hold
 * (the first half of the windows: 64 KiB a packet), from several warps;
 * once those are all held, the next takes a plain asynchronous port, and a
 * synchronous call of the same size still finds a window (the other half)
 * and completes while they are held. Every lane's bytes checked. */
static void test_large_futures_take_windows(void **state)
{
	(void)state;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	const uint32_t nw = dev->num_windows, first = dev->num_ports - nw, held = nw / 2;
	const uint64_t one = 1; /* one lane: 64 KiB through a window is one packet each way */
	assert_true(held >= 2 && held + 1 <= 64);
	struct echo_call c[64];
	struct gpusys_emu_future f[64];
	for (uint32_t i = 0; i <= held; i++) {
		gpusys_emu_set_warp(i); /* each warp below its bound */
		echo_prepare(&c[i], one, 65536, i);
		assert_int_equal(echo_start(dev, one, &c[i], &f[i]), 0);
		assert_int_equal(f[i].pd.sync, 0);
		if (i < held) {
			if (f[i].pd.port < first || f[i].pd.port >= first + held)
				fail_msg("future %u: port %u, not one of the windows futures hold [%u, %u)", i, f[i].pd.port,
					 first, first + held);
		} else if (f[i].pd.port >= GPUSYS_ASYNC_PORTS(dev->num_ports)) {
			fail_msg("future %u, the windows futures hold all taken: port %u, not a plain asynchronous one", i,
				 f[i].pd.port);
		}
	}
	struct echo_call sync_call;
	echo_prepare(&sync_call, one, 65536, 99);
	gpusys_emu_set_warp(held + 1);
	assert_int_equal(gpusys_emu_rpc(dev, GPUSYS_OP_ECHO, 0, one, sync_call.inp, sync_call.in_len, sync_call.outp,
					sync_call.cap, sync_call.got, sync_call.st),
			 0);
	assert_int_equal(echo_check(&sync_call, one), 0);
	for (uint32_t i = 0; i <= held; i++) {
		assert_int_equal(gpusys_emu_wait(dev, &f[i]), 0);
		assert_int_equal(echo_check(&c[i], one), 0);
	}
	assert_int_equal(gpusys_emu_synchronize(emu_, 5000), 0);
}

/* gpusys_emu_test polls without waiting; NOOP futures too. */
static void test_test_until_done(void **state)
{
	(void)state;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	struct gpusys_emu_future f[4];
	static const uint32_t zeros[LANES];
	const void *in[LANES] = { 0 };
	void *out[LANES] = { 0 };
	uint32_t got[4][LANES];
	int32_t st[4][LANES];

	gpusys_emu_set_warp(5);
	for (int i = 0; i < 4; i++)
		assert_int_equal(gpusys_emu_rpc_async(dev, GPUSYS_OP_NOOP, 0, ALL_LANES, in, zeros, out, zeros, got[i],
						      st[i], &f[i]),
				 0);
	unsigned done = 0, polls = 0;
	while (done != 0xf) {
		for (int i = 0; i < 4; i++)
			if (!(done >> i & 1) && gpusys_emu_test(dev, &f[i]))
				done |= 1u << i, assert_int_equal(f[i].rc, 0);
		polls++;
	}
	print_message("4 NOOP futures done after %u polls\n", polls);
	for (int i = 0; i < 4; i++)
		for (int l = 0; l < (int)LANES; l++)
			assert_int_equal(st[i][l], 0);
}

/* A file call as a future: open, write, pread, close, all asynchronous
 * (the data lands where the lanes said when the future is waited). */
static void test_file_futures(void **state)
{
	(void)state;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	char path[256];
	snprintf(path, sizeof(path), "%s/async-file", daemon_.dir);
	uint8_t scratch[LANES][GPUSYS_FILE_REQ_BYTES + 300];
	const uint8_t *req[LANES];
	uint32_t req_len[LANES], cap[LANES];
	void *out[LANES];
	int64_t ret[LANES];
	struct gpusys_file_req q;
	struct gpusys_file_pending fp;
	const uint64_t one = 1;

	gpusys_emu_set_warp(7);
	/* open (lane 0) */
	gpusys_file_req_init(&q);
	q.flags = O_CREAT | O_RDWR | O_TRUNC;
	q.mode = 0600;
	req[0] = scratch[0];
	req_len[0] = gpusys_file_pack(scratch[0], &q, path, (uint32_t)strlen(path), NULL, 0);
	gpusys_file_rpc_start(dev, GPUSYS_OP_FILE_OPEN, 0, one, req, req_len, out, cap, 1, &fp);
	assert_int_equal(fp.pd.sync, 0);
	gpusys_file_rpc_finish(dev, &fp, ret);
	assert_true(ret[0] > 0);
	int32_t h = (int32_t)ret[0];

	/* pwrite from 32 lanes, each its own 100 bytes */
	uint8_t data[LANES][100];
	for (uint32_t l = 0; l < LANES; l++) {
		memset(data[l], 'a' + (int)(l % 26), sizeof(data[l]));
		gpusys_file_req_init(&q);
		q.handle = h;
		q.offset = (int64_t)l * 100;
		req[l] = scratch[l];
		req_len[l] = gpusys_file_pack(scratch[l], &q, data[l], 100, NULL, 0);
	}
	gpusys_file_rpc_start(dev, GPUSYS_OP_FILE_PWRITE, 0, ALL_LANES, req, req_len, out, cap, 1, &fp);
	gpusys_file_rpc_finish(dev, &fp, ret);
	for (uint32_t l = 0; l < LANES; l++)
		assert_int_equal(ret[l], 100);

	/* pread back, asynchronously, into each lane's buffer */
	uint8_t back[LANES][128];
	for (uint32_t l = 0; l < LANES; l++) {
		gpusys_file_req_init(&q);
		q.handle = h;
		q.offset = (int64_t)(LANES - 1 - l) * 100;
		q.count = 100;
		req[l] = scratch[l];
		req_len[l] = gpusys_file_pack(scratch[l], &q, NULL, 0, NULL, 0);
		out[l] = back[l];
		cap[l] = 100;
	}
	gpusys_file_rpc_start(dev, GPUSYS_OP_FILE_PREAD, 0, ALL_LANES, req, req_len, out, cap, 1, &fp);
	gpusys_file_rpc_finish(dev, &fp, ret);
	for (uint32_t l = 0; l < LANES; l++) {
		assert_int_equal(ret[l], 100);
		assert_memory_equal(back[l], data[LANES - 1 - l], 100);
	}

	/* close, fire-and-forget */
	gpusys_file_req_init(&q);
	q.handle = h;
	req[0] = scratch[0];
	req_len[0] = gpusys_file_pack(scratch[0], &q, NULL, 0, NULL, 0);
	gpusys_file_rpc_start(dev, GPUSYS_OP_FILE_CLOSE, GPUSYS_REQ_NOREPLY, one, req, req_len, out, cap, 1, &fp);
	assert_int_equal(fp.pd.phase, GPUSYS_RPC_DONE);
	assert_int_equal(gpusys_emu_synchronize(emu_, 2000), 0);
	/* The handle is gone: a second close says so. */
	gpusys_file_rpc_start(dev, GPUSYS_OP_FILE_CLOSE, 0, one, req, req_len, out, cap, 1, &fp);
	gpusys_file_rpc_finish(dev, &fp, ret);
	assert_int_equal(ret[0], -EBADF);
}

/* Fire-and-forget: done when started; the port's next user waits for the
 * daemon's acknowledgement; synchronize sees every one. */
static void test_noreply(void **state)
{
	(void)state;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	struct echo_call c;
	struct gpusys_emu_future f;

	gpusys_emu_set_warp(9);
	/* The daemon counts a call as done after it hands the answer back: the
	 * last test's synchronous close may not be counted yet (TSan, once). */
	assert_int_equal(gpusys_emu_synchronize(emu_, 5000), 0);
	uint64_t before = gpusys_channel_progress(gpusys_host_channel(client_));
	for (int i = 0; i < 200; i++) {
		echo_prepare(&c, ALL_LANES, (uint32_t)(i * 37 % 3000), (uint32_t)i);
		assert_int_equal(gpusys_emu_rpc_async(dev, GPUSYS_OP_ECHO, GPUSYS_REQ_NOREPLY, ALL_LANES, c.inp,
						      c.in_len, c.outp, c.cap, NULL, NULL, &f),
				 0);
		assert_int_equal(f.pd.phase, GPUSYS_RPC_DONE);
		assert_int_equal(gpusys_emu_wait(dev, &f), 0);
		for (uint32_t l = 0; l < LANES; l++) {
			assert_int_equal(c.out[l][0], 0xa5); /* no response, nothing written */
			free(c.in[l]);
			free(c.out[l]);
		}
	}
	assert_int_equal(gpusys_emu_synchronize(emu_, 5000), 0);
	assert_int_equal(gpusys_channel_progress(gpusys_host_channel(client_)) - before, 200);
}

/* ------------------------------------------------ many warps at once */

struct warp_job {
	const gpusys_dev_t *dev;
	uint32_t warp;
	unsigned futures;  /* per round */
	unsigned rounds;
	pthread_barrier_t *all_started;
	unsigned async_max; /* most futures that were asynchronous at once */
	unsigned sync_count;
	int rc;
};

static void *warp_main(void *arg)
{
	struct warp_job *j = arg;
	struct echo_call *c = calloc(j->futures, sizeof(*c));
	struct gpusys_emu_future *f = calloc(j->futures, sizeof(*f));

	if (setpriority(PRIO_PROCESS, (id_t)gettid(), 19) < 0) {
	}
	/* Hints far apart: each warp's probe window of asynchronous ports
	 * is its own, as the SMs' are on a GPU. */
	gpusys_emu_set_warp(j->warp * 24);
	for (unsigned r = 0; r < j->rounds && !j->rc; r++) {
		unsigned async = 0;
		for (unsigned i = 0; i < j->futures; i++) {
			uint64_t mask = (i + j->warp) % 3 ? ALL_LANES : (UINT64_C(1) << (j->warp % LANES));
			echo_prepare(&c[i], mask, (i * 29 + j->warp) % 200, j->warp * 1000 + i);
			int rc = echo_start(j->dev, mask, &c[i], &f[i]);
			if (rc && !j->rc)
				j->rc = rc;
			if (f[i].pd.sync)
				j->sync_count++;
			else
				async++;
			/* A synchronous one came while this warp held the bound
			 * or found no asynchronous port: never more than the bound. */
			if (async > GPUSYS_FUTURES_PER_WARP && !j->rc)
				j->rc = -EOVERFLOW;
		}
		if (async > j->async_max)
			j->async_max = async;
		/* Every warp holds its futures here at once, then waits. */
		if (j->all_started && r == 0)
			pthread_barrier_wait(j->all_started);
		/* Out of order: odd ones first, then even ones backwards. */
		for (unsigned i = 1; i < j->futures; i += 2) {
			int rc = gpusys_emu_wait(j->dev, &f[i]);
			if ((rc || echo_check(&c[i], f[i].pd.mask)) && !j->rc)
				j->rc = rc ? rc : -EBADMSG;
		}
		for (unsigned i = (j->futures - 1) / 2 * 2 + 2; i >= 2; i -= 2) {
			int rc = gpusys_emu_wait(j->dev, &f[i - 2]);
			if ((rc || echo_check(&c[i - 2], f[i - 2].pd.mask)) && !j->rc)
				j->rc = rc ? rc : -EBADMSG;
		}
	}
	free(c);
	free(f);
	return NULL;
}

static void run_warps(const gpusys_dev_t *dev, unsigned warps, unsigned futures, unsigned rounds, int barrier,
		      struct warp_job *j)
{
	pthread_t t[64];
	pthread_barrier_t b;
	pthread_barrier_init(&b, NULL, warps);
	for (unsigned i = 0; i < warps; i++) {
		j[i] = (struct warp_job){ .dev = dev, .warp = i, .futures = futures, .rounds = rounds,
					  .all_started = barrier ? &b : NULL };
		pthread_create(&t[i], NULL, warp_main, &j[i]);
	}
	for (unsigned i = 0; i < warps; i++) {
		pthread_join(t[i], NULL);
		if (j[i].rc)
			fail_msg("warp %u: %s", i, gpusys_strerror(j[i].rc));
	}
	pthread_barrier_destroy(&b);
}

/* 16 warps, 12 futures each: every warp reaches its bound (8) and makes
 * the rest synchronously; nobody holds more than 8; all results right. */
static void test_bound_every_warp(void **state)
{
	(void)state;
	struct warp_job j[16];
	run_warps(gpusys_emu_dev(emu_), 16, 12, 20, 0, j);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(j[i].async_max, GPUSYS_FUTURES_PER_WARP);
		assert_int_equal(j[i].sync_count, 20 * (12 - GPUSYS_FUTURES_PER_WARP));
	}
	assert_int_equal(gpusys_emu_synchronize(emu_, 5000), 0);
	/* Every count back to zero: each future gave its place back. */
	const gpusys_dev_t *dev = gpusys_emu_dev(emu_);
	for (uint32_t s = 0; s < dev->warp_slots; s++)
		assert_int_equal(dev->warp_futures[s], 0);
}

/* Every warp holding futures at once on a channel with fewer ports than
 * futures (8 ports: 6 asynchronous, 2 kept for synchronous calls): the
 * warps that find no port make their calls synchronously, and everyone
 * then waits at once; no deadlock, every result right. */
static void test_all_warps_waiting(void **state)
{
	(void)state;
	struct gpusys_options o = { .runtime_dir = daemon_.runtime, .num_ports = 8,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
			  GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	gpusys_t *cl;
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_attach(&o, &cl), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(cl), &emu), 0);
	struct warp_job j[24];
	long t0 = now_ms();
	run_warps(gpusys_emu_dev(emu), 24, 8, 10, 1, j);
	unsigned sync = 0, async_max = 0;
	for (int i = 0; i < 24; i++) {
		sync += j[i].sync_count;
		if (j[i].async_max > async_max)
			async_max = j[i].async_max;
	}
	print_message("24 warps x 8 futures x 10 rounds on 8 ports: %u made synchronously, at most %u held by "
		      "one warp, %ld ms\n",
		      sync, async_max, now_ms() - t0);
	assert_true(sync > 0); /* the ports ran out: the fallback was used */
	assert_int_equal(gpusys_emu_synchronize(emu, 5000), 0);
	assert_true(gpusys_emu_query(emu));
	gpusys_emu_close(emu);
	gpusys_detach(cl);
}

/* --------------------------------------- held back by the test, let go */

struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint32_t open; /* bit i: call i may return */
	atomic_uint entered;
};
static struct gate gate_ = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

/* arg: the call's index; result: index * 3 + 1. */
static int gated(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	struct gate *g = user;
	uint32_t i;
	if (arg_len != 4 || res_cap < 4)
		return -EINVAL;
	memcpy(&i, arg, 4);
	atomic_fetch_add(&g->entered, 1);
	pthread_mutex_lock(&g->lock);
	while (!(g->open >> i & 1))
		pthread_cond_wait(&g->cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	uint32_t r = i * 3 + 1;
	memcpy(res, &r, 4);
	*res_len = 4;
	return 0;
}

static void gate_open(struct gate *g, uint32_t i)
{
	pthread_mutex_lock(&g->lock);
	g->open |= 1u << i;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* Four futures whose answers the test releases in the order 2, 0, 3, 1:
 * wait_any returns them in that order, each with its own result; query
 * is false until the last is answered. */
static void test_out_of_order(void **state)
{
	(void)state;
	struct gpusys_callbacks *cb;
	struct gpusys_callbacks_opts co = { .num_ports = 16, .threads = 4 };
	assert_int_equal(gpusys_callbacks_create(&co, &cb), 0);
	struct gpusys_callback_desc d = { .opcode = 0x8001, .name = "gated", .arg_max = 4, .res_max = 4,
					  .fn = gated, .user = &gate_ };
	assert_int_equal(gpusys_callbacks_register(cb, &d), 0);
	const gpusys_dev_t *cbdev = gpusys_callbacks_emu_dev(cb);
	gpusys_emu_set_callbacks(emu_, cbdev);
	assert_true(gpusys_emu_query(emu_));

	uint32_t idx[4], res[4], got[4][LANES], cap[4][LANES];
	int32_t st[4][LANES];
	const void *in[4][LANES];
	void *out[4][LANES];
	uint32_t in_len[4][LANES];
	struct gpusys_emu_future f[4];
	gpusys_emu_set_warp(11);
	for (uint32_t i = 0; i < 4; i++) {
		idx[i] = i;
		res[i] = 0;
		in[i][0] = &idx[i];
		in_len[i][0] = 4;
		out[i][0] = &res[i];
		cap[i][0] = 4;
		assert_int_equal(gpusys_emu_rpc_async(cbdev, 0x8001, 0, 1, in[i], in_len[i], out[i], cap[i], got[i],
						      st[i], &f[i]),
				 0);
		assert_int_equal(f[i].pd.sync, 0);
	}
	while (atomic_load(&gate_.entered) < 4)
		usleep(1000);
	for (uint32_t i = 0; i < 4; i++)
		assert_false(gpusys_emu_test(cbdev, &f[i]));
	assert_false(gpusys_emu_query(emu_));

	static const uint32_t order[4] = { 2, 0, 3, 1 };
	for (int k = 0; k < 4; k++) {
		assert_false(gpusys_emu_query(emu_));
		gate_open(&gate_, order[k]);
		int i = gpusys_emu_wait_any(cbdev, f, 4);
		assert_int_equal(i, (int)order[k]);
		assert_int_equal(f[i].rc, 0);
		assert_int_equal(st[i][0], 0);
		assert_int_equal(got[i][0], 4);
		assert_int_equal(res[i], order[k] * 3 + 1);
	}
	assert_int_equal(gpusys_emu_wait_any(cbdev, f, 4), -ENOENT);
	/* Answered: query true once the server counted them (no waiting
	 * beyond that: the responses have been read). */
	long t0 = now_ms();
	while (!gpusys_emu_query(emu_) && now_ms() - t0 < 2000)
		usleep(100);
	assert_true(gpusys_emu_query(emu_));
	gpusys_emu_set_callbacks(emu_, NULL);
	gpusys_callbacks_destroy(cb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_futures_reverse),
		cmocka_unit_test(test_large_futures_take_windows),
		cmocka_unit_test(test_test_until_done),
		cmocka_unit_test(test_file_futures),
		cmocka_unit_test(test_noreply),
		cmocka_unit_test(test_bound_every_warp),
		cmocka_unit_test(test_all_warps_waiting),
		cmocka_unit_test(test_out_of_order),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
