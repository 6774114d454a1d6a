/* SPDX-License-Identifier: MIT */
/*
 * Per-user quotas (daemon/core/accounts.c): what all the clients of one uid
 * hold together is bounded by max_handles_per_uid, max_pending_calls_per_uid
 * and user_mem_budget, on top of each client's own bounds. A client over
 * its user's limit gets -EMFILE, -EAGAIN or -ENOMEM; another user's client
 * never notices (checked as uid 65534 where the test runs as root); a freed
 * handle is a handle again; the refusal is logged once.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "gpusys/file_emu.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES

struct cl {
	gpusys_t *g;
	struct gpusys_emu *emu;
	const gpusys_dev_t *dev;
};

static int cl_attach(struct cl *k, const char *runtime, uint32_t ports)
{
	struct gpusys_options o = {
		.runtime_dir = runtime,
		.num_ports = ports,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO,
	};
	int r = gpusys_attach(&o, &k->g);
	if (r)
		return r;
	r = gpusys_emu_open(gpusys_host_channel(k->g), &k->emu);
	if (r) {
		gpusys_detach(k->g);
		return r;
	}
	k->dev = gpusys_emu_dev(k->emu);
	return 0;
}

static void cl_detach(struct cl *k)
{
	gpusys_emu_close(k->emu);
	gpusys_detach(k->g);
}

static int64_t f_open(const gpusys_dev_t *d, const char *path, int flags)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	uint32_t m[L] = { 0600 };
	int64_t r[L];
	int rc = gpusys_emu_file_open(d, 1, p, fl, m, r);
	return rc ? rc : r[0];
}

static int64_t f_close(const gpusys_dev_t *d, int64_t h)
{
	int32_t hv[L] = { (int32_t)h };
	int64_t r[L];
	int rc = gpusys_emu_file_close(d, 1, hv, r);
	return rc ? rc : r[0];
}

static bool log_has(const struct gd *d, const char *what)
{
	char *log = gd_log(d);
	bool has = log && strstr(log, what);
	free(log);
	return has;
}

/* Open /dev/null until refused: how many opened, and the refusal in *why. */
static int open_until_refused(const gpusys_dev_t *d, int64_t *handles, int max, int64_t *why)
{
	int n = 0;
	*why = 0;
	while (n < max) {
		int64_t h = f_open(d, "/dev/null", O_RDONLY);
		if (h < 0) {
			*why = h;
			break;
		}
		handles[n++] = h;
	}
	return n;
}

static void test_user_handles(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_handles_per_client = 16\nmax_handles_per_uid = 20\n");
	assert_int_equal(chmod(d.dir, 0755), 0);
	assert_int_equal(chmod(d.runtime, 0755), 0);
	struct cl a, b;
	int64_t ha[64], hb[64], why;
	assert_int_equal(cl_attach(&a, d.runtime, 2), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 2), 0);

	/* The client's own bound first, then the user's. */
	assert_int_equal(open_until_refused(a.dev, ha, 64, &why), 16);
	assert_int_equal(why, -EMFILE);
	assert_int_equal(open_until_refused(b.dev, hb, 64, &why), 4);
	assert_int_equal(why, -EMFILE);
	assert_true(log_has(&d, "is at its limit of open handles (max_handles_per_uid)"));

	/* Another user is not affected. */
	if (geteuid() == 0) {
		pid_t child = fork();
		assert_true(child >= 0);
		if (child == 0) {
			struct cl c;
			int64_t hc[64], cwhy;
			if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534) ||
			    cl_attach(&c, d.runtime, 2))
				_exit(2);
			int n = open_until_refused(c.dev, hc, 64, &cwhy);
			_exit(n == 16 && cwhy == -EMFILE ? 0 : 3);
		}
		int st;
		assert_int_equal(waitpid(child, &st, 0), child);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}

	/* Handles freed by one client are the user's again. */
	assert_int_equal(f_close(a.dev, ha[0]), 0);
	assert_int_equal(f_close(a.dev, ha[1]), 0);
	assert_int_equal(open_until_refused(b.dev, hb + 4, 60, &why), 2);
	assert_int_equal(why, -EMFILE);
	/* A client that goes gives back all it held. */
	cl_detach(&a);
	int n = 0;
	for (int i = 0; i < 200 && n == 0; i++) {
		n = open_until_refused(b.dev, hb + 6, 58, &why);
		if (!n)
			usleep(10000); /* the detach is the main loop's */
	}
	assert_int_equal(n, 10); /* b's own bound of 16 now */
	cl_detach(&b);
	gd_finish(&d);
}

/* Pending calls: SLEEP completes later without holding a thread. */
struct sleeper {
	const gpusys_dev_t *dev;
	uint32_t warp;
	int rc;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	gpusys_emu_set_warp(s->warp);
	struct gpusys_sleep_req q = { .delay_ns = 1500u * 1000u * 1000u, .timeout_ns = 0 };
	const void *in[L] = { &q };
	uint32_t len[L] = { sizeof(q) }, cap[L] = { 0 }, got[L];
	void *out[L] = { NULL };
	int32_t st[L];
	s->rc = gpusys_emu_rpc(s->dev, GPUSYS_OP_SLEEP, 0, 1, in, len, out, cap, got, st);
	return NULL;
}

static void test_user_pending(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "max_pending_calls = 4\nmax_pending_calls_per_uid = 6\n");
	struct cl a, b;
	assert_int_equal(cl_attach(&a, d.runtime, 8), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 8), 0);
	struct sleeper sa[5], sb[3];
	pthread_t ta[5], tb[3];
	for (int i = 0; i < 5; i++) {
		sa[i] = (struct sleeper){ .dev = a.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&ta[i], NULL, sleeper_main, &sa[i]), 0);
	}
	usleep(400 * 1000); /* a's calls are pending (4) or refused (1) */
	for (int i = 0; i < 3; i++) {
		sb[i] = (struct sleeper){ .dev = b.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&tb[i], NULL, sleeper_main, &sb[i]), 0);
	}
	int a_again = 0, b_again = 0, ok = 0;
	for (int i = 0; i < 5; i++) {
		pthread_join(ta[i], NULL);
		a_again += sa[i].rc == -EAGAIN;
		ok += sa[i].rc == 0;
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(tb[i], NULL);
		b_again += sb[i].rc == -EAGAIN;
		ok += sb[i].rc == 0;
	}
	/* a: 4 pending (its own bound), 1 refused; b: 2 more make the user's 6. */
	assert_int_equal(a_again, 1);
	assert_int_equal(b_again, 1);
	assert_int_equal(ok, 6);
	assert_true(log_has(&d, "is at its limit of pending calls (max_pending_calls_per_uid)"));
	/* All given back: b can have its 4 now. */
	struct sleeper again[4];
	pthread_t tg[4];
	for (int i = 0; i < 4; i++) {
		again[i] = (struct sleeper){ .dev = b.dev, .warp = (uint32_t)i };
		assert_int_equal(pthread_create(&tg[i], NULL, sleeper_main, &again[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(tg[i], NULL);
		assert_int_equal(again[i].rc, 0);
	}
	cl_detach(&a);
	cl_detach(&b);
	gd_finish(&d);
}

/* A 32 x 768 KiB pread on port p, by hand, never read past packet 0: the
 * daemon holds the 24 MiB answer for the client. Its status. */
static int32_t unread_pread(const gpusys_dev_t *dev, uint32_t p, int64_t h)
{
	enum { MIB = 1 << 20 };
	struct gpusys_port *port = &dev->ports[p];
	struct gpusys_file_req q = { .handle = (int32_t)h, .offset = 0, .count = MIB / 4 * 3 };
	for (uint32_t l = 0; l < L; l++) {
		port->len[l] = sizeof(q);
		port->aux[l] = MIB / 4 * 3;
		memcpy(port->data + l * GPUSYS_INLINE_BYTES, &q, sizeof(q));
	}
	uint32_t seq = (dev->locks[p].seq + 1) & GPUSYS_SEQ_MASK;
	__atomic_store_n(&dev->client_word[p], gpusys_client_word(seq, 0, GPUSYS_OP_FILE_PREAD, 0xffffffffu),
			 __ATOMIC_RELEASE);
	uint64_t w;
	for (int i = 0; GPUSYS_WORD_SEQ(w = __atomic_load_n(&dev->server_word[p], __ATOMIC_ACQUIRE)) != seq; i++) {
		assert_true(i < 5000);
		usleep(1000);
	}
	dev->locks[p].seq = seq; /* and never ask for the rest */
	return GPUSYS_SW_STATUS(w);
}

static void test_user_memory(void **state)
{
	(void)state;
	struct gd d;
	/* Each client may hold 64 MiB (two such answers), the user 64 MiB. */
	gd_start(&d, "client_mem_budget = 64M\nuser_mem_budget = 64M\n");
	char path[256];
	snprintf(path, sizeof(path), "%s/unread.bin", d.dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < (1 << 20) / 8; i++)
		fwrite("abcdefgh", 1, 8, f);
	fclose(f);
	struct cl a, b;
	assert_int_equal(cl_attach(&a, d.runtime, 4), 0);
	assert_int_equal(cl_attach(&b, d.runtime, 4), 0);
	int64_t ha = f_open(a.dev, path, O_RDONLY), hb = f_open(b.dev, path, O_RDONLY);
	assert_true(ha > 0 && hb > 0);
	assert_int_equal(unread_pread(a.dev, 1, ha), 0);
	assert_int_equal(unread_pread(a.dev, 2, ha), 0);
	/* b alone is far from its own budget, but the user is at 48 MiB. */
	assert_int_equal(unread_pread(b.dev, 1, hb), -ENOMEM);
	assert_true(log_has(&d, "is at its limit of request memory (user_mem_budget)"));
	/* a goes: its answers are freed, and b gets its own. */
	cl_detach(&a);
	int32_t st = -ENOMEM;
	for (uint32_t i = 0, p = 2; i < 200 && st == -ENOMEM && p < 4; i++) {
		st = unread_pread(b.dev, p, hb);
		if (st == -ENOMEM) {
			p++; /* that port is the daemon's until read: use the next */
			usleep(20000);
		}
	}
	assert_int_equal(st, 0);
	cl_detach(&b);
	gd_finish(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_user_handles),
		cmocka_unit_test(test_user_pending),
		cmocka_unit_test(test_user_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
