/* SPDX-License-Identifier: MIT */
/*
 * The print service served in process (the real port server and service,
 * no daemon), where its state can be looked at: a full buffer makes lanes
 * retry (-EAGAIN) and loses nothing; flush means written; missing
 * descriptors give -EBADF; teardown with a writer stuck on a pipe nobody
 * reads neither hangs nor leaks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpusys/emulator.h"
#include "../proto/inproc_server.h"
#include "services/print/service_print.h"

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

struct reader {
	int fd;
	int delay_ms;
	atomic_int *go; /* when set: read only once this is nonzero (after delay_ms) */
	char *buf;
	size_t len, cap;
};

static void *reader_main(void *p)
{
	struct reader *r = p;
	usleep((useconds_t)r->delay_ms * 1000);
	while (r->go && !atomic_load(r->go))
		usleep(1000);
	for (;;) {
		if (r->len == r->cap)
			r->buf = realloc(r->buf, r->cap = r->cap ? r->cap * 2 : 1 << 20);
		ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n <= 0)
			break;
		r->len += (size_t)n;
	}
	return NULL;
}

#define WARPS 4
#define LINES 300

struct warp {
	const gpusys_dev_t *dev;
	uint32_t w;
	int bad;
	atomic_int *done; /* counts warps that have printed all their lines */
};

static void *warp_main(void *p)
{
	struct warp *a = p;
	gpusys_emu_set_warp(a->w);
	for (uint32_t n = 0; n < LINES; n++) {
		struct gpusys_print_line lines[GPUSYS_WARP_LANES];
		struct gpusys_print_arg args[GPUSYS_WARP_LANES][3];
		int32_t ret[GPUSYS_WARP_LANES];
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			args[l][0] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = a->w } };
			args[l][1] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = l } };
			args[l][2] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = n } };
			lines[l] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, "w%u l%u n%u\n", args[l], 3 };
		}
		gpusys_emu_print(a->dev, 0xffffffffu, lines, ret);
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
			if (ret[l] <= 0)
				a->bad++;
	}
	atomic_fetch_add(a->done, 1);
	return NULL;
}

static void test_backpressure(void **state)
{
	(void)state;
	int p[2];
	struct gpusys_emu *emu;

	assert_int_equal(pipe(p), 0);
	print_set_buffer_limit(4096);
	struct inproc *s = inproc_start_fds(WARPS, 2, p[1], -1);
	close(p[1]); /* the service has its own */
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);

	/* Nothing reads until the service has refused a line as full (or
	 * the warps are done, which they cannot be without a refusal while the
	 * pipe and a 4 KiB buffer hold all there is): a fixed delay missed the
	 * refusal on a loaded machine, where the warps took longer than it to
	 * fill the pipe. */
	atomic_int go = 0;
	atomic_int done = 0;
	struct reader r = { .fd = p[0], .go = &go };
	pthread_t rt, th[WARPS];
	struct warp wa[WARPS];
	pthread_create(&rt, NULL, reader_main, &r);
	for (uint32_t w = 0; w < WARPS; w++) {
		wa[w] = (struct warp){ gpusys_emu_dev(emu), w, 0, &done };
		pthread_create(&th[w], NULL, warp_main, &wa[w]);
	}
	struct print_stats st;
	for (long t0 = now_ms(); now_ms() - t0 < 60000 && atomic_load(&done) < WARPS; usleep(1000)) {
		print_client_stats(inproc_state(s, &service_print), &st);
		if (st.again > 0)
			break;
	}
	atomic_store(&go, 1);
	for (uint32_t w = 0; w < WARPS; w++) {
		pthread_join(th[w], NULL);
		assert_int_equal(wa[w].bad, 0);
	}
	assert_int_equal(gpusys_emu_print_flush(gpusys_emu_dev(emu)), 0);
	print_client_stats(inproc_state(s, &service_print), &st);
	fprintf(stderr, "%llu lines, %llu bytes, %llu refused as full (-EAGAIN) and retried\n",
		(unsigned long long)st.lines, (unsigned long long)st.bytes, (unsigned long long)st.again);
	assert_int_equal(st.lines, WARPS * GPUSYS_WARP_LANES * LINES);
	assert_int_equal(st.written, st.bytes);
	assert_true(st.again > 0);
	gpusys_emu_close(emu);
	inproc_stop(s); /* closes the service's descriptor: the reader sees EOF */
	pthread_join(rt, NULL);
	close(p[0]);
	print_set_buffer_limit(4u << 20);

	/* Every line once, and each lane's in order. */
	uint32_t next[WARPS][GPUSYS_WARP_LANES] = { { 0 } };
	size_t lines = 0;
	for (size_t at = 0; at < r.len;) {
		unsigned w, l, n;
		const char *nl = memchr(r.buf + at, '\n', r.len - at);
		assert_non_null(nl);
		assert_int_equal(sscanf(r.buf + at, "w%u l%u n%u\n", &w, &l, &n), 3);
		assert_true(w < WARPS && l < GPUSYS_WARP_LANES);
		assert_int_equal(n, next[w][l]);
		next[w][l]++;
		lines++;
		at = (size_t)(nl - r.buf) + 1;
	}
	assert_int_equal(lines, WARPS * GPUSYS_WARP_LANES * LINES);
	free(r.buf);
}

static void test_flush_and_badf(void **state)
{
	(void)state;
	char path[] = "/tmp/gpusys-print-test.XXXXXX";
	int fd = mkstemp(path);
	struct inproc *s = inproc_start(1, 1);
	struct gpusys_emu *emu;

	assert_true(fd >= 0);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);

	/* A client that passed no descriptors: -EBADF; flush has nothing. */
	assert_int_equal(gpusys_emu_printf(dev, "x\n"), -EBADF);
	assert_int_equal(gpusys_emu_print_flush(dev), 0);
	gpusys_emu_close(emu);
	inproc_stop(s);

	/* One that passed stdout only. */
	s = inproc_start_fds(1, 1, fd, -1);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	dev = gpusys_emu_dev(emu);
	assert_int_equal(gpusys_emu_fprintf(dev, GPUSYS_PRINT_STDERR, "no stderr\n"), -EBADF);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(gpusys_emu_printf(dev, "line %04d\n", i), 10);
	/* After flush, the file holds every line, without waiting. */
	assert_int_equal(gpusys_emu_print_flush(dev), 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 10000);

	gpusys_emu_close(emu);
	inproc_stop(s);
	close(fd);
	unlink(path);
}

/* A flush while the descriptor is slow: the daemon answers -EAGAIN with the
 * byte count to wait for, the client retries; flush returns once all of it
 * is written, and no daemon thread waited meanwhile. */
static void test_flush_waits_for_slow_reader(void **state)
{
	(void)state;
	int p[2];
	struct gpusys_emu *emu;

	assert_int_equal(pipe(p), 0);
	struct inproc *s = inproc_start_fds(1, 1, p[1], -1);
	close(p[1]);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	struct reader r = { .fd = p[0], .delay_ms = 300 };
	pthread_t rt;
	pthread_create(&rt, NULL, reader_main, &r);
	char big[3000];
	memset(big, 'f', sizeof(big) - 2);
	big[sizeof(big) - 2] = '\n';
	big[sizeof(big) - 1] = 0;
	long t0 = now_ms();
	for (int i = 0; i < 100; i++) /* 300 KB: more than the pipe holds, less than the buffer */
		assert_int_equal(gpusys_emu_printf(dev, "%s", big), 2999);
	assert_int_equal(gpusys_emu_print_flush(dev), 0);
	long took = now_ms() - t0;
	struct print_stats st;
	print_client_stats(inproc_state(s, &service_print), &st);
	fprintf(stderr, "flush returned after %ld ms, %llu of %llu bytes written\n", took,
		(unsigned long long)st.written, (unsigned long long)st.bytes);
	assert_int_equal(st.written, st.bytes);
	assert_true(took >= 200);
	gpusys_emu_close(emu);
	inproc_stop(s);
	pthread_join(rt, NULL);
	close(p[0]);
	assert_int_equal(r.len, 299900);
	free(r.buf);
}

/* A writer blocked on a pipe that nobody reads: teardown (which may run on
 * the daemon's main thread) waits only a moment, then leaves the writer to
 * finish alone; closing the pipe ends it, and it frees its state (the
 * sanitizer build checks for leaks). */
static void test_fini_stuck_writer(void **state)
{
	(void)state;
	int p[2];
	struct gpusys_emu *emu;

	signal(SIGPIPE, SIG_IGN);
	print_set_buffer_limit(4u << 20); /* the default, whatever a failed test left */
	assert_int_equal(pipe(p), 0);
	struct inproc *s = inproc_start_fds(1, 1, p[1], -1);
	close(p[1]);
	assert_int_equal(gpusys_emu_open(s->base, &emu), 0);
	char big[4000];
	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	for (int i = 0; i < 100; i++) /* 400 KB: more than the pipe holds */
		assert_int_equal(gpusys_emu_printf(gpusys_emu_dev(emu), "%s", big), 3999);
	gpusys_emu_close(emu);
	long t0 = now_ms();
	inproc_stop(s);
	long took = now_ms() - t0;
	fprintf(stderr, "teardown with a stuck writer took %ld ms\n", took);
	assert_true(took < 1000);
	close(p[0]); /* the writer's write fails (EPIPE): it frees the state */
	usleep(200 * 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_flush_and_badf),
		cmocka_unit_test(test_flush_waits_for_slow_reader),
		cmocka_unit_test(test_fini_stuck_writer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
