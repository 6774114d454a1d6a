/* SPDX-License-Identifier: MIT */
/*
 * The print service through the real gpusysd. Each scenario runs in a child
 * process whose stdout and stderr are files (or a pipe) of the test's: the
 * child attaches with pass_stdio, prints from emulated warps, and the test
 * reads what the daemon wrote there.
 *
 *  - conformance: every case of cases.c, byte for byte, on stdout and stderr
 *  - many warps x lanes printing numbered lines at once, into a pipe read
 *    slowly (the 4 MiB buffer fills: -EAGAIN and retries): every line once,
 *    whole, and each lane's lines in order
 *  - %n and other refusals through the daemon; the varargs emulator calls
 *  - a client killed with SIGKILL after printing: every line is in the file;
 *    and one killed while printing: the file is an exact prefix, whole lines
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cases.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"

static struct gd daemon_;

static int setup(void **state)
{
	(void)state;
	/* A small output buffer (4 MiB by default), so that a reader slower
	 * than the printers makes the daemon answer -EAGAIN and the lanes
	 * retry: nothing may be lost or reordered. */
	setenv("GPUSYSD_PRINT_BUFFER_BYTES", "65536", 1);
	gd_start(&daemon_, NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gd_finish(&daemon_);
	return 0;
}

/* ------------------------------------------------------------ child side */

/* Diagnostics from the child go to the test's own stderr. */
static int diag_fd = -1;

static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
	char b[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b, sizeof(b), fmt, ap);
	va_end(ap);
	if (n > 0 && diag_fd >= 0 && write(diag_fd, b, (size_t)n < sizeof(b) ? (size_t)n : sizeof(b) - 1) < 0)
		_exit(99);
}

struct child_ctx {
	gpusys_t *client;
	struct gpusys_emu *emu;
	const gpusys_dev_t *dev;
};

static int child_attach(struct child_ctx *cx, uint32_t ports)
{
	struct gpusys_options o = { .runtime_dir = daemon_.runtime, .num_ports = ports,
				    .flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_CWD };
	int rc = gpusys_attach(&o, &cx->client);
	if (rc < 0) {
		diag("attach: %s (%s)\n", gpusys_strerror(rc), gpusys_last_error());
		return rc;
	}
	rc = gpusys_emu_open(gpusys_host_channel(cx->client), &cx->emu);
	if (rc < 0) {
		diag("emu_open: %d\n", rc);
		return rc;
	}
	cx->dev = gpusys_emu_dev(cx->emu);
	return 0;
}

static void child_detach(struct child_ctx *cx)
{
	gpusys_emu_close(cx->emu);
	gpusys_detach(cx->client);
}

/* Run fn in a child whose stdout/stderr are out_fd/err_fd. Returns its pid. */
static pid_t spawn_child(int out_fd, int err_fd, int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		diag_fd = dup(2);
		if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
			_exit(98);
		_exit(fn(arg));
	}
	return pid;
}

static int child_status(pid_t pid)
{
	int ws = wait_exit(pid, 60000);
	assert_true(ws != -1);
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

static int temp_file(char *path, const char *name)
{
	snprintf(path, 256, "%s/%s", daemon_.dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	return fd;
}

static char *slurp(const char *path, size_t *len)
{
	char *b = cases_read_file(path, len);
	assert_non_null(b);
	return b;
}

/* ---------------------------------------------------------- conformance */

static struct case_set cases;

/* Case i goes to stdout when even, stderr when odd. 32 cases per call,
 * with a partial warp now and then. */
static int conformance_child(void *arg)
{
	(void)arg;
	struct child_ctx cx;
	int bad = 0;

	if (child_attach(&cx, 4) < 0)
		return 2;
	for (size_t i = 0; i < cases.n;) {
		struct gpusys_print_line lines[GPUSYS_WARP_LANES];
		int32_t ret[GPUSYS_WARP_LANES];
		uint32_t width = (i / 32) % 7 == 3 ? 5 : 32; /* lanes this call */
		uint64_t mask = 0;
		for (uint32_t l = 0; l < width && i + l < cases.n; l++) {
			const struct print_case *c = &cases.c[i + l];
			lines[l] = (struct gpusys_print_line){ (i + l) % 2 ? GPUSYS_PRINT_STDERR : GPUSYS_PRINT_STDOUT,
							       c->fmt, c->args, c->nargs };
			mask |= 1ull << l;
		}
		if (gpusys_emu_print(cx.dev, mask, lines, ret) != 0)
			return 3;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			const struct print_case *c = &cases.c[i + l];
			if (ret[l] != (int32_t)c->expected_len && bad++ < 10)
				diag("case %zu \"%s\": returned %d, want %zu\n", i + l, c->fmt, ret[l], c->expected_len);
		}
		i += (size_t)__builtin_popcountll(mask);
	}
	int rc = gpusys_emu_print_flush(cx.dev);
	if (rc)
		diag("flush: %d\n", rc);
	child_detach(&cx);
	return bad || rc ? 1 : 0;
}

static void expect_file(const char *path, const char *want, size_t want_len)
{
	size_t len;
	char *got = slurp(path, &len);
	size_t k = cases_mismatch(got, len, want, want_len);
	if (k != SIZE_MAX) {
		fprintf(stderr, "%s: %zu bytes, want %zu; first difference at byte %zu\n", path, len, want_len, k);
		fprintf(stderr, "  got:  \"%.60s\"\n  want: \"%.60s\"\n", got + k, want + k);
		fail();
	}
	free(got);
}

static void test_conformance(void **state)
{
	(void)state;
	char out_path[256], err_path[256];
	int out = temp_file(out_path, "conf.out"), err = temp_file(err_path, "conf.err");

	cases_build(&cases);
	assert_true(cases.n >= 200);
	pid_t pid = spawn_child(out, err, conformance_child, NULL);
	assert_int_equal(child_status(pid), 0);
	close(out);
	close(err);

	/* The expected files: the cases' texts in order, split by stream. */
	struct print_buf_ {
		char *d;
		size_t n;
	} want[2] = { 0 };
	for (int s = 0; s < 2; s++) {
		size_t total = 0;
		for (size_t i = s; i < cases.n; i += 2)
			total += cases.c[i].expected_len;
		want[s].d = malloc(total + 1);
		for (size_t i = s; i < cases.n; i += 2) {
			memcpy(want[s].d + want[s].n, cases.c[i].expected, cases.c[i].expected_len);
			want[s].n += cases.c[i].expected_len;
		}
	}
	expect_file(out_path, want[0].d, want[0].n);
	expect_file(err_path, want[1].d, want[1].n);
	fprintf(stderr, "%zu cases through gpusysd: %zu + %zu bytes, identical to snprintf\n", cases.n, want[0].n,
		want[1].n);
	free(want[0].d);
	free(want[1].d);
	cases_free(&cases);
}

/* ----------------------------------------------------------- many lanes */

#define MANY_WARPS 8
#define MANY_LINES 400 /* per lane */

struct warp_arg {
	const gpusys_dev_t *dev;
	uint32_t warp;
	int bad;
};

static const char pad[] = "................................................................................"
			  "................................................................................";

/* Lane l of warp w prints lines n = 0..MANY_LINES-1 as
 * "w<w> l<l> n<n> <pad>|\n", padding of (w + l + n) % 150 bytes (short
 * lines and lines that stream). Some calls are by part of the warp. */
static void *warp_main(void *p)
{
	struct warp_arg *a = p;
	uint32_t next[GPUSYS_WARP_LANES] = { 0 };
	uint32_t round = 0;

	gpusys_emu_set_warp(a->warp);
	for (;;) {
		struct gpusys_print_line lines[GPUSYS_WARP_LANES];
		struct gpusys_print_arg args[GPUSYS_WARP_LANES][5];
		int32_t ret[GPUSYS_WARP_LANES];
		uint64_t mask = 0;
		round++;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (next[l] >= MANY_LINES)
				continue;
			if ((round + l) % 5 == 0)
				continue; /* diverged this round */
			uint32_t n = next[l];
			args[l][0] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = a->warp } };
			args[l][1] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = l } };
			args[l][2] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = n } };
			args[l][3] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_I32,
								.v = { .i = (int)((a->warp + l + n) % 150) } };
			args[l][4] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_STR, .v = { .s = pad } };
			lines[l] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, "w%u l%u n%u %.*s|\n", args[l], 5 };
			mask |= 1ull << l;
		}
		if (!mask) {
			bool left = false;
			for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
				left |= next[l] < MANY_LINES;
			if (!left)
				break;
			continue;
		}
		if (gpusys_emu_print(a->dev, mask, lines, ret) != 0) {
			a->bad++;
			break;
		}
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			if (ret[l] <= 0) {
				if (a->bad++ < 5)
					diag("warp %u lane %u line %u: %d\n", a->warp, l, next[l], ret[l]);
				return NULL;
			}
			next[l]++;
		}
	}
	return NULL;
}

static int many_child(void *arg)
{
	(void)arg;
	struct child_ctx cx;
	pthread_t th[MANY_WARPS];
	struct warp_arg wa[MANY_WARPS];
	int bad = 0;

	if (child_attach(&cx, MANY_WARPS / 2) < 0) /* fewer ports than warps: they contend */
		return 2;
	for (uint32_t w = 0; w < MANY_WARPS; w++) {
		wa[w] = (struct warp_arg){ cx.dev, w, 0 };
		pthread_create(&th[w], NULL, warp_main, &wa[w]);
	}
	for (uint32_t w = 0; w < MANY_WARPS; w++) {
		pthread_join(th[w], NULL);
		bad += wa[w].bad;
	}
	int rc = gpusys_emu_print_flush(cx.dev);
	child_detach(&cx);
	return bad || rc ? 1 : 0;
}

/* Check the numbered lines: each whole, each (warp, lane) 0..MANY_LINES-1
 * in order. */
static void check_numbered(const char *buf, size_t len)
{
	static uint32_t next[MANY_WARPS][GPUSYS_WARP_LANES];
	size_t lines = 0;

	memset(next, 0, sizeof(next));
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(buf + at, '\n', len - at);
		assert_non_null(nl);
		unsigned w, l, n;
		int off = 0;
		char line[512];
		size_t ll = (size_t)(nl - (buf + at));
		assert_true(ll < sizeof(line));
		memcpy(line, buf + at, ll);
		line[ll] = 0;
		if (sscanf(line, "w%u l%u n%u %n", &w, &l, &n, &off) != 3 || w >= MANY_WARPS || l >= GPUSYS_WARP_LANES) {
			fprintf(stderr, "bad line %zu: \"%s\"\n", lines, line);
			fail();
		}
		size_t dots = (w + l + n) % 150;
		if (n != next[w][l] || strlen(line + off) != dots + 1 || line[off + dots] != '|' ||
		    strspn(line + off, ".") != dots) {
			fprintf(stderr, "line %zu out of order or torn: \"%s\" (want n=%u)\n", lines, line, next[w][l]);
			fail();
		}
		next[w][l]++;
		lines++;
		at += ll + 1;
	}
	for (unsigned w = 0; w < MANY_WARPS; w++)
		for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++)
			assert_int_equal(next[w][l], MANY_LINES);
	assert_int_equal(lines, MANY_WARPS * GPUSYS_WARP_LANES * MANY_LINES);
}

static void test_many_lanes_pipe(void **state)
{
	(void)state;
	int p[2];
	char err_path[256];
	int err = temp_file(err_path, "many.err");

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = spawn_child(p[1], err, many_child, NULL);
	close(p[1]);
	/* Let the daemon's buffer fill before reading anything. */
	usleep(300 * 1000);
	size_t cap = 8 << 20, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len == cap)
			buf = realloc(buf, cap *= 2);
		ssize_t r = read(p[0], buf + len, cap - len);
		if (r < 0 && errno == EINTR)
			continue;
		assert_true(r >= 0);
		if (r == 0)
			break; /* the child and the daemon's copy are both closed */
		len += (size_t)r;
	}
	close(p[0]);
	assert_int_equal(child_status(pid), 0);
	close(err);
	fprintf(stderr, "%d warps x 32 lanes x %d lines: %zu bytes through a pipe\n", MANY_WARPS, MANY_LINES, len);
	check_numbered(buf, len);
	free(buf);
}

/* ------------------------------------------------------------- refusals */

static int refusal_child(void *arg)
{
	(void)arg;
	struct child_ctx cx;
	int bad = 0;
	int x = 0;

	if (child_attach(&cx, 1) < 0)
		return 2;
	if (gpusys_emu_printf(cx.dev, "before\n") != 7)
		bad |= 1;
	for (size_t i = 0; i < refused_cases_n; i++) {
		struct gpusys_print_line lines[GPUSYS_WARP_LANES];
		int32_t ret[GPUSYS_WARP_LANES];
		lines[0] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, refused_cases[i].fmt, refused_cases[i].args,
						       refused_cases[i].nargs };
		lines[1] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, "lane 1 fine %zu\n",
						       &(struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U64, .v = { .u = i } }, 1 };
		gpusys_emu_print(cx.dev, 3, lines, ret);
		if (ret[0] != -EINVAL) {
			diag("\"%s\" gave %d\n", refused_cases[i].fmt, ret[0]);
			bad |= 2;
		}
		if (ret[1] <= 0)
			bad |= 4;
	}
	/* printf-like variadic calls. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat"
	if (gpusys_emu_printf(cx.dev, "n: %n\n", &x) != -EINVAL)
		bad |= 8;
#pragma GCC diagnostic pop
	char want[256];
	int n = snprintf(want, sizeof(want), "%d %s %.2f %lld %zu %p %c %hhx %Lg %5.1s|\n", -3, "str", 2.345, -5LL,
			 (size_t)77, (void *)want, 'c', 0x1ff, (long double)1.25, "xyz");
	if (gpusys_emu_printf(cx.dev, "%d %s %.2f %lld %zu %p %c %hhx %Lg %5.1s|\n", -3, "str", 2.345, -5LL,
			      (size_t)77, (void *)want, 'c', 0x1ff, (long double)1.25, "xyz") != n)
		bad |= 16;
	if (gpusys_emu_fprintf(cx.dev, GPUSYS_PRINT_STDERR, "to stderr %d\n", 5) != 12)
		bad |= 32;
	if (gpusys_emu_puts(cx.dev, "puts") != 5)
		bad |= 64;
	if (gpusys_emu_printf(cx.dev, "after\n") != 6)
		bad |= 128;
	/* A line of the maximum length, and one over it. */
	if (gpusys_emu_printf(cx.dev, "%65536d", 1) != 65536)
		bad |= 256;
	if (gpusys_emu_printf(cx.dev, "%65536d|%d", 1, 2) != -EMSGSIZE)
		bad |= 512;
	if (gpusys_emu_print_flush(cx.dev) != 0)
		bad |= 1024;
	if (bad)
		diag("refusal child: bad = %#x\n", bad);
	child_detach(&cx);
	return bad ? 1 : 0;
}

static void test_refusals(void **state)
{
	(void)state;
	char out_path[256], err_path[256];
	int out = temp_file(out_path, "ref.out"), err = temp_file(err_path, "ref.err");
	pid_t pid = spawn_child(out, err, refusal_child, NULL);
	assert_int_equal(child_status(pid), 0);
	close(out);
	close(err);

	size_t len, elen;
	char *got = slurp(out_path, &len);
	char *egot = slurp(err_path, &elen);
	/* before, one "lane 1 fine" per refused case, the varargs line, puts,
	 * after, the long line; nothing of a refused lane. */
	char want[1 << 17];
	size_t n = (size_t)snprintf(want, sizeof(want), "before\n");
	for (size_t i = 0; i < refused_cases_n; i++)
		n += (size_t)snprintf(want + n, sizeof(want) - n, "lane 1 fine %zu\n", i);
	assert_true(len > n);
	assert_memory_equal(got, want, n);
	assert_non_null(strstr(got + n, "-3 str 2.35 -5 77 0x"));
	assert_non_null(strstr(got + n, "puts\nafter\n"));
	assert_int_equal(len - (size_t)(strstr(got + n, "after\n") + 6 - got), 65536);
	assert_int_equal(elen, 12);
	assert_memory_equal(egot, "to stderr 5\n", 12);
	free(got);
	free(egot);
}

/* --------------------------------------------------------------- SIGKILL */

#define KILL_LINES 20000

static int kill_child(void *arg)
{
	int ready_fd = (int)(intptr_t)arg;
	struct child_ctx cx;

	if (child_attach(&cx, 2) < 0)
		return 2;
	for (uint32_t i = 0; i < KILL_LINES; i += GPUSYS_WARP_LANES) {
		struct gpusys_print_line lines[GPUSYS_WARP_LANES];
		struct gpusys_print_arg args[GPUSYS_WARP_LANES];
		int32_t ret[GPUSYS_WARP_LANES];
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			args[l] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = i + l } };
			lines[l] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, "line %06u of a client about to die\n",
							       &args[l], 1 };
		}
		gpusys_emu_print(cx.dev, 0xffffffffu, lines, ret);
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
			if (ret[l] <= 0)
				return 3;
	}
	/* Every line is accepted (not necessarily written yet). Tell the
	 * parent, and wait for the kill. */
	if (write(ready_fd, "k", 1) != 1)
		return 4;
	for (;;)
		pause();
}

static void test_sigkill_after_print(void **state)
{
	(void)state;
	char out_path[256];
	int out = temp_file(out_path, "kill.out");
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = spawn_child(out, out, kill_child, (void *)(intptr_t)p[1]);
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	kill(pid, SIGKILL);
	assert_int_equal(child_status(pid), 128 + SIGKILL);
	close(out);

	size_t want = (size_t)KILL_LINES * strlen("line 000000 of a client about to die\n");
	long t0 = now_ms();
	while (cases_file_size(out_path) < want && now_ms() - t0 < 10000)
		usleep(10000);
	size_t len;
	char *got = slurp(out_path, &len);
	assert_int_equal(len, want);
	for (uint32_t i = 0; i < KILL_LINES; i++) {
		char line[64];
		snprintf(line, sizeof(line), "line %06u of a client about to die\n", i);
		assert_memory_equal(got + (size_t)i * strlen(line), line, strlen(line));
	}
	free(got);
}

/* One lane printing as fast as it can when the kill comes: the file must be
 * lines 0..M-1 exactly, each whole. */
static int stream_child(void *arg)
{
	int ready_fd = (int)(intptr_t)arg;
	struct child_ctx cx;

	if (child_attach(&cx, 1) < 0)
		return 2;
	for (uint32_t i = 0;; i++) {
		if (gpusys_emu_printf(cx.dev, "streaming line %u %s\n", i, pad) <= 0)
			return 3;
		if (i == 1000 && write(ready_fd, "k", 1) != 1)
			return 4;
	}
}

static void test_sigkill_while_printing(void **state)
{
	(void)state;
	char out_path[256];
	int out = temp_file(out_path, "stream.out");
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = spawn_child(out, out, stream_child, (void *)(intptr_t)p[1]);
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	usleep(20000);
	kill(pid, SIGKILL);
	assert_int_equal(child_status(pid), 128 + SIGKILL);
	close(out);

	/* Wait for the daemon to notice and flush: the size stops moving. */
	size_t last = (size_t)-1, now;
	for (int i = 0; i < 100 && (now = cases_file_size(out_path)) != last; i++) {
		last = now;
		usleep(50000);
	}
	size_t len;
	char *got = slurp(out_path, &len);
	uint32_t i = 0;
	size_t at = 0;
	while (at < len) {
		char line[256];
		int n = snprintf(line, sizeof(line), "streaming line %u %s\n", i, pad);
		assert_true(at + (size_t)n <= len); /* never a torn line */
		assert_memory_equal(got + at, line, (size_t)n);
		at += (size_t)n;
		i++;
	}
	assert_true(i > 1000);
	fprintf(stderr, "killed while printing: %u whole lines, in order\n", i);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conformance),
		cmocka_unit_test(test_many_lanes_pipe),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_sigkill_after_print),
		cmocka_unit_test(test_sigkill_while_printing),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
