/* SPDX-License-Identifier: MIT */
/*
 * Each GPU's own workers (issue 34): a file call that blocks on one GPU
 * holds only that GPU's workers; another GPU's file calls go on, and each
 * group's calls run on its own workers. Two emulated GPUs, clients that
 * name them by UUID (and one that names none), a FIFO whose writer the
 * test holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

static int64_t f_stat(const gpusys_dev_t *d, const char *path)
{
	const char *p[L] = { path };
	int fl[L] = { 0 };
	struct gpusys_stat st, *sp[L] = { &st };
	int64_t r[L];
	gpusys_emu_file_stat(d, 1, p, fl, sp, r);
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

static json_t *gpu_entry(json_t *st, const char *uuid)
{
	json_t *g;
	size_t i;
	json_array_foreach(json_object_get(st, "gpus"), i, g) if (!strcmp(json_string_value(json_object_get(g, "uuid")), uuid))
		return g;
	return NULL;
}

/* Calls a group's workers ran (status "workers": a GPU's, or
 * "default_workers"), summed. */
static long long group_ran(json_t *w)
{
	json_t *ran = json_object_get(w, "ran"), *v;
	size_t i;
	long long n = 0;
	assert_true(json_is_array(ran));
	json_array_foreach(ran, i, v) n += json_integer_value(v);
	return n;
}

struct ran_by {
	long long a, b, plain;
};

static struct ran_by ran_now(struct gd *d)
{
	json_t *st = daemon_status(d->runtime);
	assert_non_null(st);
	struct ran_by r = {
		.a = group_ran(json_object_get(gpu_entry(st, UUID_A), "workers")),
		.b = group_ran(json_object_get(gpu_entry(st, UUID_B), "workers")),
		.plain = group_ran(json_object_get(st, "default_workers")),
	};
	json_decref(st);
	return r;
}

/* A worker counts a call once it has finished it, just after the answer:
 * wait until the counts reach want (or 3 s), then a little longer for any
 * count that would go past it. */
static struct ran_by ran_settled(struct gd *d, struct ran_by want)
{
	long t0 = now_ms();
	struct ran_by r;
	do {
		r = ran_now(d);
		if (r.a >= want.a && r.b >= want.b && r.plain >= want.plain)
			break;
		usleep(5000);
	} while (now_ms() - t0 < 3000);
	usleep(50000);
	return ran_now(d);
}

/* Is there a thread of pid named name? */
static bool has_thread(pid_t pid, const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	assert_non_null(dir);
	bool found = false;
	struct dirent *e;
	while (!found && (e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		char comm_path[400], comm[32] = "";
		snprintf(comm_path, sizeof(comm_path), "%s/%s/comm", path, e->d_name);
		FILE *f = fopen(comm_path, "r");
		if (!f)
			continue; /* a thread that just ended */
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		found = !strcmp(comm, name);
	}
	closedir(dir);
	return found;
}

/* workers_per_gpu = 2: each GPU's file calls run on its own two workers
 * (their counts in status grow by its calls exactly, the other groups'
 * not at all), named after their GPU; status, gpusysctl and the log say
 * how many each GPU has, and where their slots are. */
static void test_calls_run_on_their_gpus_workers(void **state)
{
	(void)state;
	struct fixture f;
	fixture_start(&f, "emulated_gpus = " UUID_A "=alpha, " UUID_B "=beta\npollers = 1\nworkers = 1\n"
			  "pollers_per_gpu = 1\nworkers_per_gpu = 2\n");
	struct cl a, b, plain;
	cl_attach(&f.d, uuid_a, &a);
	cl_attach(&f.d, uuid_b, &b);
	cl_attach(&f.d, NULL, &plain);

	/* Slots: default poller 0, worker 1; A's poller 2, workers 3-4; B's
	 * poller 5, workers 6-7. */
	json_t *st = daemon_status(f.d.runtime);
	assert_non_null(st);
	json_t *wa = json_object_get(gpu_entry(st, UUID_A), "workers"),
	       *wb = json_object_get(gpu_entry(st, UUID_B), "workers"), *wd = json_object_get(st, "default_workers");
	assert_int_equal(json_integer_value(json_object_get(wa, "count")), 2);
	assert_int_equal(json_integer_value(json_object_get(wb, "count")), 2);
	assert_int_equal(json_integer_value(json_object_get(wd, "count")), 1);
	assert_int_equal(json_integer_value(json_object_get(wd, "first_slot")), 1);
	assert_int_equal(json_integer_value(json_object_get(wa, "first_slot")), 3);
	assert_int_equal(json_integer_value(json_object_get(wb, "first_slot")), 6);
	assert_int_equal(json_array_size(json_object_get(wa, "ran")), 2);
	assert_non_null(json_string_value(json_object_get(wa, "cpus")));
	assert_int_equal(json_integer_value(json_object_get(st, "workers")), 5);
	json_t *pb = json_object_get(gpu_entry(st, UUID_B), "pollers");
	assert_int_equal(json_integer_value(json_object_get(pb, "first_slot")), 5);
	json_decref(st);

	struct ran_by r0 = ran_now(&f.d);
	for (int i = 0; i < 20; i++)
		assert_int_equal(f_stat(a.dev, f.data), sizeof(struct gpusys_stat));
	struct ran_by r1 = ran_settled(&f.d, (struct ran_by){ r0.a + 20, r0.b, r0.plain });
	assert_int_equal(r1.a - r0.a, 20);
	assert_int_equal(r1.b, r0.b);
	assert_int_equal(r1.plain, r0.plain);

	for (int i = 0; i < 10; i++)
		assert_int_equal(f_stat(b.dev, f.data), sizeof(struct gpusys_stat));
	struct ran_by r2 = ran_settled(&f.d, (struct ran_by){ r1.a, r1.b + 10, r1.plain });
	assert_int_equal(r2.b - r1.b, 10);
	assert_int_equal(r2.a, r1.a);
	assert_int_equal(r2.plain, r1.plain);

	for (int i = 0; i < 5; i++)
		assert_int_equal(f_stat(plain.dev, f.data), sizeof(struct gpusys_stat));
	struct ran_by r3 = ran_settled(&f.d, (struct ran_by){ r2.a, r2.b, r2.plain + 5 });
	assert_int_equal(r3.plain - r2.plain, 5);
	assert_int_equal(r3.a, r2.a);
	assert_int_equal(r3.b, r2.b);

	/* Named like the pollers: GPU index, then w and the worker's index. */
	const char *names[] = { "gpusysd-g0-w0", "gpusysd-g0-w1", "gpusysd-g1-w0", "gpusysd-g1-w1", "gpusysd-work0",
				"gpusysd-g0-p0", "gpusysd-g1-p0" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!has_thread(f.d.pid, names[i]))
			fail_msg("gpusysd has no thread named %s", names[i]);
	assert_false(has_thread(f.d.pid, "gpusysd-g0-w2"));
	assert_false(has_thread(f.d.pid, "gpusysd-work1"));

	/* gpusysctl's GPU table has a WORKERS column, and the log says what
	 * each GPU got. */
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", f.d.runtime, "status", NULL };
	char *out = NULL, *err = NULL;
	assert_int_equal(run_capture(argv, &out, &err), 0);
	assert_non_null(strstr(out, "POLLERS WORKERS POLLER-CPUS"));
	assert_non_null(strstr(out, "3 pollers, 5 workers"));
	assert_non_null(strstr(out, "and 1 of the workers serve clients that name no GPU"));
	free(out);
	free(err);
	char *log = gd_log(&f.d);
	assert_non_null(strstr(log, "GPU " UUID_A " (alpha): 1 pollers and 2 workers of its own (progress slots 2-2 and 3-4"));
	assert_non_null(strstr(log, "GPU " UUID_B " (beta): 1 pollers and 2 workers of its own (progress slots 5-5 and 6-7"));
	free(log);

	cl_detach(&a);
	cl_detach(&b);
	cl_detach(&plain);
	fixture_finish(&f);
}

/* SIGTERM while GPU A's worker is blocked in a FIFO read: its pool is
 * drained and joined like the default one (the client hung up first, so
 * the worker gives up), and gpusysd exits 0 in time, with a handover
 * (restart_grace_ms: A's call still in service at its end, A not handed
 * over) or without. Under ASan, nothing leaks. */
static void stop_with_blocked_worker(const char *extra)
{
	struct fixture f;
	char config[512];
	snprintf(config, sizeof(config),
		 "emulated_gpus = " UUID_A "=alpha, " UUID_B "=beta\npollers = 1\nworkers = 1\n"
		 "pollers_per_gpu = 1\n%s",
		 extra);
	fixture_start(&f, config);
	int wfd = open(f.fifo, O_RDWR | O_CLOEXEC);
	assert_true(wfd >= 0);
	struct cl a, b;
	cl_attach(&f.d, uuid_a, &a);
	cl_attach(&f.d, uuid_b, &b);
	int64_t hf = f_open(a.dev, f.fifo, O_RDONLY);
	assert_true(hf >= 0);
	static struct call blocked;
	blocked = (struct call){ .dev = a.dev, .h = hf };
	pthread_t tb;
	assert_int_equal(pthread_create(&tb, NULL, call_main, &blocked), 0);
	usleep(100000);
	assert_false(atomic_load(&blocked.done));
	assert_int_equal(f_stat(b.dev, f.data), sizeof(struct gpusys_stat)); /* B's own worker */

	long ms;
	int st = gd_stop(&f.d, &ms);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(call_wait(&blocked, 2000)); /* told, not left waiting */
	pthread_join(tb, NULL);
	assert_true(blocked.got < 0);
	print_message("stopped in %ld ms with GPU A's worker blocked (%s): its read got %lld\n", ms,
		      *extra ? "handover" : "no handover", (long long)blocked.got);
	char *log = gd_log(&f.d);
	if (*extra)
		assert_non_null(strstr(log, "not handed over: a request was still in service"));
	free(log);
	close(wfd);
	cl_detach(&a);
	cl_detach(&b);
	unlink(f.fifo);
	unlink(f.data);
	rmdir(f.dir);
	gd_cleanup(&f.d);
}

static void test_stop_with_blocked_worker(void **state)
{
	(void)state;
	stop_with_blocked_worker("");
}

static void test_handover_with_blocked_worker(void **state)
{
	(void)state;
	stop_with_blocked_worker("restart_grace_ms = 300\nrestart_drain_ms = 100\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocked_gpu_stalls_no_other),
		cmocka_unit_test(test_calls_run_on_their_gpus_workers),
		cmocka_unit_test(test_stop_with_blocked_worker),
		cmocka_unit_test(test_handover_with_blocked_worker),
	};
	return cmocka_run_group_tests_name("gpu_workers", tests, NULL, NULL);
}
