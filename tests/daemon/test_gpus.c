/* SPDX-License-Identifier: MIT */
/*
 * GPUs named by UUID (issue 17), without a GPU: the daemon invents two
 * (emulated_gpus) and emulated clients claim them. Ordinals in a hello are
 * the client's own numbering and must never decide the GPU: two clients
 * with opposite numberings (as two processes with opposite
 * CUDA_VISIBLE_DEVICES would have) land on the GPU their UUID names.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "libclient/attach/client.h" /* the connection layer: the hello itself */
#include "gpusys/emulator.h"
#include "harness.h"

#define UUID_A "GPU-0a0a0a0a-1111-2222-3333-444444444444"
#define UUID_B "GPU-0b0b0b0b-5555-6666-7777-888888888888"
#define UUID_UNKNOWN "GPU-deadbeef-0000-0000-0000-000000000001"

static const uint8_t uuid_a[16] = { 0x0a, 0x0a, 0x0a, 0x0a, 0x11, 0x11, 0x22, 0x22,
				    0x33, 0x33, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44 };
static const uint8_t uuid_b[16] = { 0x0b, 0x0b, 0x0b, 0x0b, 0x55, 0x55, 0x66, 0x66,
				    0x77, 0x77, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88 };
static const uint8_t uuid_unknown[16] = { 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };

struct fixture {
	struct gd d;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	/* Pollers per GPU set, so that the groups' sizes are known here
	 * whatever the machine's CPUs. */
	gd_start(&f->d, "emulated_gpus = " UUID_A "=alpha, " UUID_B "=beta\npollers = 1\nworkers = 4\n"
			"pollers_per_gpu = 2\n");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	gd_finish(&f->d);
	free(f);
	return 0;
}

static int attach(struct fixture *f, int ordinal, const uint8_t *uuid, struct gpusys_client **c)
{
	struct gpusys_attach_opts o = {
		.runtime_dir = f->d.runtime, .num_ports = 2, .cuda_device = ordinal, .gpu_uuid = uuid,
	};
	return gpusys_client_attach(&o, c);
}

static json_t *gpu_entry(json_t *st, const char *uuid)
{
	json_t *gpus = json_object_get(st, "gpus"), *g;
	size_t i;
	json_array_foreach(gpus, i, g) if (!strcmp(json_string_value(json_object_get(g, "uuid")), uuid)) return g;
	return NULL;
}

/* A round of NOOPs from every lane: the client is served. */
static void serve(struct gpusys_client *c)
{
	struct gpusys_emu *emu;
	assert_int_equal(gpusys_emu_open(gpusys_client_channel(c), &emu), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);
	gpusys_emu_close(emu);
}

/* Client ordinal 1 names A, client ordinal 0 names B (opposite numberings):
 * each is A's or B's client by its UUID, whatever its ordinal says. */
static void test_opposite_numberings(void **state)
{
	struct fixture *f = *state;
	struct gpusys_client *ca, *cb, *plain;

	assert_int_equal(attach(f, 1, uuid_a, &ca), 0);
	assert_int_equal(attach(f, 0, uuid_b, &cb), 0);
	assert_int_equal(attach(f, -1, NULL, &plain), 0);
	serve(ca);
	serve(cb);

	json_t *st = daemon_status(f->d.runtime);
	assert_non_null(st);
	json_t *a = status_client(st, gpusys_client_conn_id(ca)), *b = status_client(st, gpusys_client_conn_id(cb)),
	       *p = status_client(st, gpusys_client_conn_id(plain));
	assert_string_equal(json_string_value(json_object_get(a, "gpu")), UUID_A);
	assert_string_equal(json_string_value(json_object_get(b, "gpu")), UUID_B);
	assert_true(json_is_null(json_object_get(p, "gpu")));
	assert_int_equal(json_integer_value(json_object_get(a, "client_cuda_device")), 1);
	assert_int_equal(json_integer_value(json_object_get(b, "client_cuda_device")), 0);
	/* An emulated GPU has no ordinal in the daemon: memfd, no GPU watch. */
	assert_int_equal(json_integer_value(json_object_get(a, "cuda_device")), -1);
	assert_string_equal(json_string_value(json_object_get(a, "memory")), "memfd");

	json_t *ga = gpu_entry(st, UUID_A), *gb = gpu_entry(st, UUID_B);
	assert_non_null(ga);
	assert_non_null(gb);
	assert_string_equal(json_string_value(json_object_get(ga, "name")), "alpha");
	assert_string_equal(json_string_value(json_object_get(gb, "name")), "beta");
	assert_true(json_is_true(json_object_get(ga, "emulated")));
	assert_true(json_is_false(json_object_get(ga, "failed")));
	assert_int_equal(json_integer_value(json_object_get(ga, "clients")), 1);
	assert_int_equal(json_integer_value(json_object_get(gb, "clients")), 1);
	assert_int_equal(json_integer_value(json_object_get(ga, "ports")), 2);
	assert_int_equal(json_array_size(json_object_get(st, "gpus")), 2);
	json_decref(st);

	/* gpusysctl shows them per GPU, and each client with its GPU. */
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", f->d.runtime, "status", NULL };
	char *out = NULL, *err = NULL;
	assert_int_equal(run_capture(argv, &out, &err), 0);
	assert_non_null(strstr(out, UUID_A));
	assert_non_null(strstr(out, UUID_B));
	assert_non_null(strstr(out, "alpha"));
	assert_non_null(strstr(out, "emulated"));
	free(out);
	free(err);

	/* Gone from its GPU's count when it detaches. */
	gpusys_client_detach(ca);
	long t0 = now_ms();
	for (;;) {
		st = daemon_status(f->d.runtime);
		json_int_t n = json_integer_value(json_object_get(gpu_entry(st, UUID_A), "clients"));
		json_decref(st);
		if (n == 0)
			break;
		assert_true(now_ms() - t0 < 3000);
		usleep(10000);
	}
	serve(cb); /* the other GPU's client never noticed */
	gpusys_client_detach(cb);
	gpusys_client_detach(plain);
}

/* Requests served by a poller group (status: a GPU's "pollers", or
 * "default_pollers" for clients that name no GPU), summed over its pollers. */
static long long group_served(json_t *grp)
{
	json_t *served = json_object_get(grp, "served"), *v;
	size_t i;
	long long n = 0;
	assert_true(json_is_array(served));
	json_array_foreach(served, i, v) n += json_integer_value(v);
	return n;
}

struct served_by {
	long long a, b, plain;
};

static struct served_by served_now(struct fixture *f)
{
	json_t *st = daemon_status(f->d.runtime);
	assert_non_null(st);
	struct served_by s = {
		.a = group_served(json_object_get(gpu_entry(st, UUID_A), "pollers")),
		.b = group_served(json_object_get(gpu_entry(st, UUID_B), "pollers")),
		.plain = group_served(json_object_get(st, "default_pollers")),
	};
	json_decref(st);
	return s;
}

/* A pass adds its counts after its answers: wait until the groups have
 * counted want (or 3 s), then the counts are what they are. */
static struct served_by served_settled(struct fixture *f, struct served_by want)
{
	long t0 = now_ms();
	struct served_by s;
	do {
		s = served_now(f);
		if (s.a >= want.a && s.b >= want.b && s.plain >= want.plain)
			break;
		usleep(10000);
	} while (now_ms() - t0 < 3000);
	usleep(50000); /* anything extra would have shown by now */
	return served_now(f);
}

/* One NOOP round of serve() is one request served (one packet each). */
#define ROUND 10

/* Issue 34: each GPU has pollers of its own (pollers_per_gpu = 2 here, the
 * default group 1): a GPU's client is served by its GPU's pollers only, the
 * other group's count stays where it was, and status and gpusysctl show each
 * GPU's pollers and each poller's GPU. */
static void test_pollers_per_gpu(void **state)
{
	struct fixture *f = *state;
	struct gpusys_client *ca, *cb, *plain;

	assert_int_equal(attach(f, 0, uuid_a, &ca), 0);
	assert_int_equal(attach(f, 1, uuid_b, &cb), 0);
	assert_int_equal(attach(f, -1, NULL, &plain), 0);

	json_t *st = daemon_status(f->d.runtime);
	json_t *pa = json_object_get(gpu_entry(st, UUID_A), "pollers"), *pb = json_object_get(gpu_entry(st, UUID_B), "pollers"),
	       *pd = json_object_get(st, "default_pollers");
	assert_int_equal(json_integer_value(json_object_get(pa, "count")), 2);
	assert_int_equal(json_integer_value(json_object_get(pb, "count")), 2);
	assert_int_equal(json_integer_value(json_object_get(pd, "count")), 1);
	assert_int_equal(json_integer_value(json_object_get(st, "pollers")), 5);
	/* Slots: the default group's pollers [0,1) and workers [1,5), then
	 * A's pollers [5,7) and workers [7,11) (workers_per_gpu 0: as many
	 * as workers), B's [11,13) and [13,17). */
	assert_int_equal(json_integer_value(json_object_get(pd, "first_slot")), 0);
	assert_int_equal(json_integer_value(json_object_get(pa, "first_slot")), 1 + 4);
	assert_int_equal(json_integer_value(json_object_get(pb, "first_slot")), 1 + 4 + 2 + 4);
	json_t *wa = json_object_get(gpu_entry(st, UUID_A), "workers"), *wd = json_object_get(st, "default_workers");
	assert_int_equal(json_integer_value(json_object_get(wa, "count")), 4);
	assert_int_equal(json_integer_value(json_object_get(wa, "first_slot")), 1 + 4 + 2);
	assert_int_equal(json_integer_value(json_object_get(wd, "count")), 4);
	assert_int_equal(json_integer_value(json_object_get(wd, "first_slot")), 1);
	assert_int_equal(json_integer_value(json_object_get(st, "workers")), 12);
	assert_non_null(json_string_value(json_object_get(pa, "cpus")));
	json_decref(st);

	struct served_by s0 = served_now(f);
	serve(ca);
	struct served_by s1 = served_settled(f, (struct served_by){ s0.a + ROUND, s0.b, s0.plain });
	assert_int_equal(s1.a - s0.a, ROUND);
	assert_int_equal(s1.b, s0.b);
	assert_int_equal(s1.plain, s0.plain);

	serve(cb);
	serve(cb);
	struct served_by s2 = served_settled(f, (struct served_by){ s1.a, s1.b + 2 * ROUND, s1.plain });
	assert_int_equal(s2.b - s1.b, 2 * ROUND);
	assert_int_equal(s2.a, s1.a);
	assert_int_equal(s2.plain, s1.plain);

	serve(plain);
	struct served_by s3 = served_settled(f, (struct served_by){ s2.a, s2.b, s2.plain + ROUND });
	assert_int_equal(s3.plain - s2.plain, ROUND);
	assert_int_equal(s3.a, s2.a);
	assert_int_equal(s3.b, s2.b);

	/* gpusysctl pollers --json: each poller's GPU, group and slot. */
	json_t *r = control_request(f->d.runtime, "{\"cmd\":\"pollers\"}\n"), *p;
	assert_non_null(r);
	size_t i;
	int on_a = 0, on_b = 0, on_none = 0;
	json_array_foreach(json_object_get(r, "pollers"), i, p)
	{
		assert_int_equal(json_integer_value(json_object_get(p, "index")), (json_int_t)i);
		const char *gpu = json_string_value(json_object_get(p, "gpu"));
		json_int_t slot = json_integer_value(json_object_get(p, "slot"));
		if (!gpu) {
			on_none++;
			assert_int_equal(slot, 0);
		} else if (!strcmp(gpu, UUID_A)) {
			assert_int_equal(slot, 5 + json_integer_value(json_object_get(p, "group_index")));
			on_a++;
		} else {
			assert_string_equal(gpu, UUID_B);
			assert_int_equal(slot, 11 + json_integer_value(json_object_get(p, "group_index")));
			on_b++;
		}
	}
	assert_int_equal(on_none, 1);
	assert_int_equal(on_a, 2);
	assert_int_equal(on_b, 2);
	json_decref(r);

	/* The text views say so too. */
	const char *argv[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", f->d.runtime, "status", NULL };
	char *out = NULL, *err = NULL;
	assert_int_equal(run_capture(argv, &out, &err), 0);
	assert_non_null(strstr(out, "POLLERS WORKERS"));
	assert_non_null(strstr(out, "5 pollers, 12 workers"));
	assert_non_null(strstr(out, "1 of the pollers (CPUs any) and 4 of the workers serve clients that name no GPU"));
	free(out);
	free(err);
	const char *argv2[] = { test_env("GPUSYSCTL_BIN"), "--runtime-dir", f->d.runtime, "pollers", NULL };
	assert_int_equal(run_capture(argv2, &out, &err), 0);
	assert_non_null(strstr(out, UUID_A));
	assert_non_null(strstr(out, UUID_B));
	free(out);
	free(err);

	gpusys_client_detach(ca);
	gpusys_client_detach(cb);
	gpusys_client_detach(plain);
}

/* A UUID the daemon does not have is a clear refusal naming the ones it
 * has; a CUDA client that names no GPU is refused too. */
static void test_refusals(void **state)
{
	struct fixture *f = *state;
	struct gpusys_client *c = NULL;

	assert_int_equal(attach(f, 0, uuid_unknown, &c), -ENODEV);
	assert_null(c);
	const char *why = gpusys_last_error();
	assert_non_null(strstr(why, UUID_UNKNOWN));
	assert_non_null(strstr(why, "not a GPU this daemon has"));
	assert_non_null(strstr(why, UUID_A));

	/* Raw hello: cuda_device 0 and no UUID (an old or broken client). */
	int fd = raw_connect(f->d.runtime);
	struct gpusys_hello h;
	hello_init(&h);
	h.cuda_device = 0;
	struct gpusys_welcome w;
	int chan_fd;
	assert_int_equal(send(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_int_equal(raw_recv_welcome(fd, &w, &chan_fd), 0);
	assert_int_equal(chan_fd, -1);
	assert_int_equal(w.status, -EPROTO);
	assert_non_null(strstr(w.message, "UUID"));
	close(fd);

	/* The daemon is fine: a good client still gets in. */
	assert_int_equal(attach(f, 3, uuid_b, &c), 0);
	serve(c);
	gpusys_client_detach(c);
}

/* A failed GPU (here an administrator's gpu-fail, as gpu_health.c does on an
 * Xid) ends its clients with a goodbye saying why and refuses new ones; the
 * other GPU's client goes on. */
static void test_gpu_failure(void **state)
{
	struct fixture *f = *state;
	struct gpusys_client *ca, *cb, *c2;

	assert_int_equal(attach(f, 0, uuid_a, &ca), 0);
	assert_int_equal(attach(f, 1, uuid_b, &cb), 0);
	serve(ca);

	json_t *r = control_request(f->d.runtime,
				    "{\"cmd\":\"gpu-fail\",\"uuid\":\"" UUID_A "\",\"reason\":\"test Xid\"}\n");
	assert_non_null(r);
	assert_true(json_is_true(json_object_get(r, "failed")));
	json_decref(r);

	/* ca: the goodbye, then the hang-up; its channel says STOPPED. */
	struct gpusys_welcome bye;
	int fd = gpusys_client_socket_fd(ca);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 3000), 1);
	assert_int_equal(recv(fd, &bye, sizeof(bye), 0), (ssize_t)sizeof(bye));
	assert_int_equal(bye.magic, GPUSYS_GOODBYE_MAGIC);
	assert_int_equal(bye.status, -ENODEV);
	assert_non_null(strstr(bye.message, UUID_A));
	assert_non_null(strstr(bye.message, "test Xid"));
	assert_true(wait_peer_close(fd, 3000));
	struct gpusys_channel_header *h = gpusys_client_channel(ca);
	assert_int_equal(h->server_state, GPUSYS_SERVER_STOPPED);

	/* cb never noticed: its own GPU's pollers serve it, A's serve
	 * nothing more. */
	struct served_by s0 = served_now(f);
	serve(cb);
	struct served_by s1 = served_settled(f, (struct served_by){ s0.a, s0.b + ROUND, s0.plain });
	assert_int_equal(s1.b - s0.b, ROUND);
	assert_int_equal(s1.a, s0.a);

	json_t *st = daemon_status(f->d.runtime);
	json_t *ga = gpu_entry(st, UUID_A), *gb = gpu_entry(st, UUID_B);
	assert_true(json_is_true(json_object_get(ga, "failed")));
	assert_non_null(strstr(json_string_value(json_object_get(ga, "failure")), "test Xid"));
	assert_int_equal(json_integer_value(json_object_get(ga, "clients")), 0);
	assert_true(json_is_false(json_object_get(gb, "failed")));
	assert_int_equal(json_integer_value(json_object_get(gb, "clients")), 1);
	json_decref(st);

	/* New clients of the failed GPU are refused, saying so. */
	assert_int_equal(attach(f, 0, uuid_a, &c2), -ENODEV);
	assert_non_null(strstr(gpusys_last_error(), "failed"));
	/* An unknown GPU cannot be failed. */
	r = control_request(f->d.runtime, "{\"cmd\":\"gpu-fail\",\"uuid\":\"" UUID_UNKNOWN "\"}\n");
	assert_non_null(strstr(json_string_value(json_object_get(r, "error")), "no such GPU"));
	json_decref(r);

	gpusys_client_detach(ca);
	gpusys_client_detach(cb);
}

/* emulated_gpus that does not parse stops the daemon at start with a
 * message; it never runs with half a GPU table. */
static void test_bad_setting(void **state)
{
	(void)state;
	const char *bad[] = { "emulated_gpus = GPU-1234\n", "emulated_gpus = " UUID_A ", " UUID_A "\n",
			      "emulated_gpus = GPU-00000000-0000-0000-0000-000000000000\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct gd d;
		gd_prepare(&d, bad[i]);
		pid_t pid = gd_spawn(&d, NULL);
		int status = wait_exit(pid, 5000);
		assert_true(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) != 0);
		char *log = gd_log(&d);
		assert_non_null(strstr(log, "emulated_gpus"));
		free(log);
		gd_cleanup(&d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_opposite_numberings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pollers_per_gpu, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_failure, setup, teardown),
		cmocka_unit_test(test_bad_setting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
