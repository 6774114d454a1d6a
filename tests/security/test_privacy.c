/* SPDX-License-Identifier: MIT */
/*
 * One user's activity hidden from another in gpusysctl latency and pollers
 * (issue 33): user A (uid 65534) makes 37 NOOPs, user B (uid 65533) makes 3;
 * B's latency shows B's 3 and nothing of A's (no daemon-wide percentiles
 * either), B's pollers is refused with a reason gpusysctl prints; root and
 * members of admin_group still see every user's 40 and the pollers.
 * Acting as other users needs root: skipped without it.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"
#include "../daemon/users.h"

#define A_NOOPS 37 /* distinctive: nobody else makes exactly this many */
#define B_NOOPS 3

/* ------------------------------------------------------------ helpers
 * (need_root, open_to_all, become, spawn_as, join, pipe_put and pipe_get:
 * ../daemon/users.h) */

/* One control request, without cmocka (children use it): the reply or NULL. */
static json_t *ask(const char *runtime, const char *line)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_CONTROL_NAME);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	char buf[1 << 16];
	size_t n = 0;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    send(fd, line, strlen(line), MSG_NOSIGNAL) == (ssize_t)strlen(line)) {
		while (n < sizeof(buf) - 1 && !memchr(buf, '\n', n)) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, 2000) <= 0)
				break;
			ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
			if (k <= 0)
				break;
			n += (size_t)k;
		}
	}
	close(fd);
	buf[n] = 0;
	return json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL);
}

/* The latency entry of NOOP in a reply, or NULL. */
static json_t *noop_entry(json_t *lat)
{
	char want[8];
	json_t *o;
	size_t i;
	snprintf(want, sizeof(want), "0x%04x", GPUSYS_OP_NOOP);
	json_array_foreach(json_object_get(lat, "ops"), i, o)
	{
		const char *op = json_string_value(json_object_get(o, "opcode"));
		if (op && !strcmp(op, want))
			return o;
	}
	return NULL;
}

/* NOOPs in a latency reply (-1: not a reply, or an error). */
static long long noops_in(json_t *lat)
{
	if (!lat || json_object_get(lat, "error"))
		return -1;
	json_t *o = noop_entry(lat);
	return o ? (long long)json_integer_value(json_object_get(o, "count")) : 0;
}

/* Run gpusysctl ARGS; its exit status, stdout and stderr in out/err. */
static int ctl_run(const char *runtime, const char *cmd, char *out, size_t outlen, char *err, size_t errlen)
{
	char line[1024], errfile[] = "/tmp/gpusys-privacy-err.XXXXXX";
	int efd = mkstemp(errfile);
	if (efd < 0)
		return -1;
	close(efd);
	snprintf(line, sizeof(line), "'%s' --runtime-dir '%s' %s 2>'%s'", getenv("GPUSYSCTL_BIN"), runtime, cmd,
		 errfile);
	FILE *f = popen(line, "r");
	size_t got = f ? fread(out, 1, outlen - 1, f) : 0;
	out[got] = 0;
	int st = f ? pclose(f) : -1;
	FILE *e = fopen(errfile, "r");
	got = e ? fread(err, 1, errlen - 1, e) : 0;
	err[got] = 0;
	if (e)
		fclose(e);
	unlink(errfile);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------------ the two users */

struct user {
	const char *runtime;
	int noops;       /* NOOPs to make */
	bool admin;      /* expected to be an admin (admin_group) */
	int ready, go;   /* pipes: "my calls are made", "you may leave" */
};

/* Attach an emulated client, make u->noops NOOPs, then check what this
 * user sees; stay attached until told (so that the others' counts are of
 * attached clients too). Exit status: 0, or the step that failed. */
static int user_main(void *arg)
{
	struct user *u = arg;
	struct gpusys_options o = { .runtime_dir = u->runtime, .num_ports = 1,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO |
			 GPUSYS_ATTACH_NO_CWD };
	gpusys_t *g;
	struct gpusys_emu *emu;
	if (gpusys_attach(&o, &g) != 0)
		return 2;
	if (gpusys_emu_open(gpusys_host_channel(g), &emu) != 0)
		return 3;
	gpusys_emu_set_warp(0);
	for (int i = 0; i < u->noops; i++)
		if (gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu) != 0)
			return 4;
	pipe_put(u->ready);
	/* Wait for the go: the other user's calls are made by then. */
	if (!pipe_get(u->go, 20000))
		return 5;
	int rc = 0;
	json_t *lat = ask(u->runtime, "{\"cmd\":\"latency\"}\n");
	json_t *pol = ask(u->runtime, "{\"cmd\":\"pollers\"}\n");
	const char *shown = json_string_value(json_object_get(lat, "shown"));
	json_t *mine = noop_entry(lat);
	if (!lat || !pol)
		rc = 6;
	else if (u->admin) {
		/* Everyone's: A's and B's NOOPs, and the pollers. */
		if (noops_in(lat) != A_NOOPS + B_NOOPS || !shown || strcmp(shown, "all"))
			rc = 7;
		else if (!json_is_array(json_object_get(pol, "pollers")))
			rc = 8;
	} else {
		/* Only this user's own count, and no daemon-wide latency
		 * figures drawn from every user's requests. */
		if (noops_in(lat) != u->noops)
			rc = 9;
		else if (!shown || strcmp(shown, "own"))
			rc = 10;
		else if (!mine || json_object_get(mine, "p50_us") || json_object_get(mine, "histogram") ||
			 json_object_get(mine, "max_us"))
			rc = 11;
		else if (json_object_get(pol, "pollers") || !json_string_value(json_object_get(pol, "error")) ||
			 !strstr(json_string_value(json_object_get(pol, "error")), "admin_group"))
			rc = 12;
	}
	json_decref(lat);
	json_decref(pol);
	/* What gpusysctl makes of it. */
	char out[8192], err[2048];
	if (!rc && !u->admin) {
		if (ctl_run(u->runtime, "latency", out, sizeof(out), err, sizeof(err)) != 0 ||
		    !strstr(out, "your clients attached now") || strstr(out, "P50"))
			rc = 13;
		else if (ctl_run(u->runtime, "pollers", out, sizeof(out), err, sizeof(err)) != 1 ||
			 !strstr(err, "gpusysd says: pollers:"))
			rc = 14;
	}
	gpusys_emu_close(emu);
	gpusys_detach(g);
	return rc;
}

/* A as uid 65534 and B as b_uid (in group b_group) against one daemon;
 * B expected to be an admin or not; root checks the totals while both
 * are attached. */
static void two_users(const char *config, uid_t b_uid, gid_t b_group, bool b_admin)
{
	struct gd d;
	int a_ready[2], b_ready[2], go[2];

	gd_start(&d, config);
	open_to_all(&d);
	assert_int_equal(pipe(a_ready), 0);
	assert_int_equal(pipe(b_ready), 0);
	assert_int_equal(pipe(go), 0);
	struct user a = { .runtime = d.runtime, .noops = A_NOOPS, .ready = a_ready[1], .go = go[0] };
	struct user b = { .runtime = d.runtime, .noops = B_NOOPS, .admin = b_admin, .ready = b_ready[1],
			  .go = go[0] };
	pid_t pa = spawn_as(65534, 0, user_main, &a);
	pid_t pb = spawn_as(b_uid, b_group, user_main, &b);
	assert_true(pipe_get(a_ready[0], 10000));
	assert_true(pipe_get(b_ready[0], 10000));

	/* Root sees every user's requests, with the latency figures. */
	json_t *lat = control_request(d.runtime, "{\"cmd\":\"latency\"}\n");
	assert_int_equal(noops_in(lat), A_NOOPS + B_NOOPS);
	assert_non_null(json_object_get(noop_entry(lat), "p50_us"));
	json_decref(lat);
	json_t *pol = control_request(d.runtime, "{\"cmd\":\"pollers\"}\n");
	assert_non_null(pol);
	assert_null(json_object_get(pol, "error"));
	assert_true(json_array_size(json_object_get(pol, "pollers")) >= 1);
	json_decref(pol);

	pipe_put(go[1]);
	pipe_put(go[1]);
	int ra = join(pa), rb = join(pb);
	if (ra)
		fail_msg("user 65534 failed at step %d", ra);
	if (rb)
		fail_msg("user %u (group %u) failed at step %d", (unsigned)b_uid, (unsigned)b_group, rb);
	for (int k = 0; k < 2; k++) {
		close(a_ready[k]);
		close(b_ready[k]);
		close(go[k]);
	}
	gd_finish(&d);
}

/* latency and pollers of a user who is no admin: their own counts only;
 * A's 37 NOOPs never show in B's reply. */
static void test_latency_pollers_private(void **state)
{
	(void)state;
	if (!need_root())
		return;
	two_users(NULL, 65533, 0, false);
}

/* A member of admin_group (a supplementary group here) sees every user's
 * counts and the pollers, as root does. */
static void test_admin_group_sees_all(void **state)
{
	(void)state;
	if (!need_root())
		return;
	two_users("admin_group = 4242\n", 65533, 4242, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_latency_pollers_private),
		cmocka_unit_test(test_admin_group_sees_all),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
