/* SPDX-License-Identifier: MIT */
/*
 * Each GPU's own workers (issue 34): a file call that blocks on one GPU
 * holds only that GPU's workers; another GPU's file calls go on. Two
 * emulated GPUs, clients that name them by UUID, a FIFO whose writer the
 * test holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "libclient/attach/client.h" /* the connection layer: a hello naming a GPU */
#include "gpusys/emulator.h"
#include "harness.h"

#define L GPUSYS_WARP_LANES
#define UUID_A "GPU-0a0a0a0a-1111-2222-3333-444444444444"
#define UUID_B "GPU-0b0b0b0b-5555-6666-7777-888888888888"

static const uint8_t uuid_a[16] = { 0x0a, 0x0a, 0x0a, 0x0a, 0x11, 0x11, 0x22, 0x22,
				    0x33, 0x33, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44 };
static const uint8_t uuid_b[16] = { 0x0b, 0x0b, 0x0b, 0x0b, 0x55, 0x55, 0x66, 0x66,
				    0x77, 0x77, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88 };

/* A client of an emulated GPU (or of none: uuid NULL) and its emulator. */
struct cl {
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	const gpusys_dev_t *dev;
};

static void cl_attach(struct gd *d, const uint8_t *uuid, struct cl *k)
{
	struct gpusys_attach_opts o = {
		.runtime_dir = d->runtime, .num_ports = 4, .cuda_device = -1, .gpu_uuid = uuid,
	};
	assert_int_equal(gpusys_client_attach(&o, &k->c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_client_channel(k->c), &k->emu), 0);
	k->dev = gpusys_emu_dev(k->emu);
}

static void cl_detach(struct cl *k)
{
	gpusys_emu_close(k->emu);
	gpusys_client_detach(k->c);
}

static int64_t f_open(const gpusys_dev_t *d, const char *path, int flags)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	uint32_t m[L] = { 0 };
	int64_t r[L];
	gpusys_emu_file_open(d, 1, p, fl, m, r);
	return r[0];
}

static int64_t f_close(const gpusys_dev_t *d, int64_t h)
{
	gpusys_fd_t hv[L] = { (gpusys_fd_t)h };
	int64_t r[L];
	gpusys_emu_file_close(d, 1, hv, r);
	return r[0];
}

static int64_t f_read(const gpusys_dev_t *d, int64_t h, void *buf, uint32_t n)
{
	gpusys_fd_t hv[L] = { (gpusys_fd_t)h };
	void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t r[L];
	gpusys_emu_file_read(d, 1, hv, b, c, r);
	return r[0];
}

static int64_t f_pread(const gpusys_dev_t *d, int64_t h, void *buf, uint32_t n, int64_t off)
{
	gpusys_fd_t hv[L] = { (gpusys_fd_t)h };
	void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t o[L] = { off }, r[L];
	gpusys_emu_file_pread(d, 1, hv, b, c, o, r);
	return r[0];
}

/* A file call on another thread, so that the test can wait for it with a
 * bound and still unblock it when the bound passes. */
struct call {
	const gpusys_dev_t *dev;
	int64_t h;
	bool positional; /* pread at 0, else read */
	char buf[4096];
	int64_t got;
	atomic_int done;
};

static void *call_main(void *arg)
{
	struct call *c = arg;
	c->got = c->positional ? f_pread(c->dev, c->h, c->buf, sizeof(c->buf), 0)
			       : f_read(c->dev, c->h, c->buf, sizeof(c->buf));
	atomic_store(&c->done, 1);
	return NULL;
}

/* Wait up to ms for c; true when it finished. */
static bool call_wait(struct call *c, long ms)
{
	long t0 = now_ms();
	while (!atomic_load(&c->done) && now_ms() - t0 < ms)
		usleep(2000);
	return atomic_load(&c->done);
}

struct fixture {
	struct gd d;
	char dir[64]; /* the files both clients use (absolute paths: no cwd passed) */
	char fifo[96], data[96];
};

static void fixture_start(struct fixture *f, const char *config)
{
	gd_start(&f->d, config);
	snprintf(f->dir, sizeof(f->dir), "/tmp/gpusys-gw-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->fifo, sizeof(f->fifo), "%s/fifo", f->dir);
	snprintf(f->data, sizeof(f->data), "%s/data", f->dir);
	assert_int_equal(mkfifo(f->fifo, 0600), 0);
	FILE *fp = fopen(f->data, "w");
	assert_non_null(fp);
	for (int i = 0; i < 4096; i++)
		fputc('a' + i % 26, fp);
	fclose(fp);
}

static void fixture_finish(struct fixture *f)
{
	unlink(f->fifo);
	unlink(f->data);
	rmdir(f->dir);
	gd_finish(&f->d);
}

/* One worker a GPU (workers = 1: workers_per_gpu follows it). GPU A's only
 * worker blocks in a read of a FIFO nobody writes yet; GPU B's client
 * preads a page-cached file meanwhile, and must have it at once. With one
 * pool for every GPU (before issue 34's per-GPU workers) B's pread waited
 * for A's FIFO. */
static void test_blocked_gpu_stalls_no_other(void **state)
{
	(void)state;
	struct fixture f;
	fixture_start(&f, "emulated_gpus = " UUID_A "=alpha, " UUID_B "=beta\npollers = 1\nworkers = 1\n"
			  "pollers_per_gpu = 1\n");
	/* Our writer (a reader too, so that opening cannot fail): the
	 * daemon's read waits for data. */
	int wfd = open(f.fifo, O_RDWR | O_CLOEXEC);
	assert_true(wfd >= 0);
	struct cl a, b;
	cl_attach(&f.d, uuid_a, &a);
	cl_attach(&f.d, uuid_b, &b);
	int64_t hf = f_open(a.dev, f.fifo, O_RDONLY);
	assert_true(hf >= 0);
	int64_t hd = f_open(b.dev, f.data, O_RDONLY);
	assert_true(hd >= 0);

	static struct call blocked, other;
	blocked = (struct call){ .dev = a.dev, .h = hf };
	other = (struct call){ .dev = b.dev, .h = hd, .positional = true };
	pthread_t tb, to;
	assert_int_equal(pthread_create(&tb, NULL, call_main, &blocked), 0);
	usleep(100000);
	assert_false(atomic_load(&blocked.done)); /* A's worker is in read(2) */

	long t0 = now_ms();
	assert_int_equal(pthread_create(&to, NULL, call_main, &other), 0);
	bool in_time = call_wait(&other, 2000);
	long took = now_ms() - t0;
	bool a_still_blocked = !atomic_load(&blocked.done);

	/* Unblock whatever happened, then judge. */
	assert_int_equal(write(wfd, "ping", 4), 4);
	pthread_join(tb, NULL);
	pthread_join(to, NULL);
	print_message("GPU B's pread took %ld ms while GPU A's worker was blocked\n", took);
	assert_true(in_time);
	assert_true(a_still_blocked);
	assert_int_equal(other.got, 4096);
	assert_memory_equal(other.buf, "abcdefghijklmnopqrstuvwxyz", 26);
	assert_int_equal(blocked.got, 4);
	assert_memory_equal(blocked.buf, "ping", 4);

	assert_int_equal(f_close(a.dev, hf), 0);
	assert_int_equal(f_close(b.dev, hd), 0);
	close(wfd);
	cl_detach(&a);
	cl_detach(&b);
	fixture_finish(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocked_gpu_stalls_no_other),
	};
	return cmocka_run_group_tests_name("gpu_workers", tests, NULL, NULL);
}
