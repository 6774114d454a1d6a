/* SPDX-License-Identifier: MIT */
/*
 * Socket activation (systemd/gpusysd.socket): the test plays systemd. It
 * makes both listening sockets, passes them as LISTEN_FDS, and checks that
 * gpusysd serves on them, leaves their files in place when it stops (they are
 * systemd's), and that the next gpusysd serves on the same sockets: clients
 * reach the daemon across a restart without anything recreated. One socket
 * of the two is refused with a message.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

#include "gpusys/emulator.h"
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "harness.h"

static int listening(const char *path, int type)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int fd = socket(AF_UNIX, type, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

/* gpusysd with these descriptors as fds 3.. and LISTEN_FDS set for it. */
static pid_t spawn_activated(struct gd *d, const int *fds, int n)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int copies[4];
		for (int i = 0; i < n; i++)
			copies[i] = dup(fds[i]) ; /* above 3..3+n, so dup2 cannot clobber */
		for (int i = 0; i < n; i++)
			dup2(copies[i], 3 + i);
		char num[16], me[16];
		snprintf(num, sizeof(num), "%d", n);
		snprintf(me, sizeof(me), "%d", (int)getpid());
		setenv("LISTEN_FDS", num, 1);
		setenv("LISTEN_PID", me, 1);
		int log = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(log, 1);
		dup2(log, 2);
		execl(test_env("GPUSYSD_BIN"), "gpusysd", "--runtime-dir", d->runtime, "--config", d->config, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void serve_one(struct gd *d)
{
	gpusys_t *c;
	struct gpusys_emu *emu;
	struct gpusys_options o = { .runtime_dir = d->runtime, .num_ports = 2,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD };
	long t0 = now_ms();
	int rc;
	while ((rc = gpusys_attach(&o, &c)) != 0) { /* the daemon may still be starting */
		assert_true(now_ms() - t0 < 5000);
		usleep(10000);
	}
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(c), &emu), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(gpusys_emu_noop(gpusys_emu_dev(emu), 0xffffffffu), 0);
	json_t *st = daemon_status(d->runtime);
	assert_non_null(st);
	json_decref(st);
	gpusys_emu_close(emu);
	gpusys_detach(c);
}

static void test_activation(void **state)
{
	(void)state;
	struct gd d;
	gd_prepare(&d, "");
	assert_int_equal(mkdir(d.runtime, 0755), 0);
	char client[200], control[200];
	snprintf(client, sizeof(client), "%s/%s", d.runtime, GPUSYS_SOCKET_NAME);
	snprintf(control, sizeof(control), "%s/%s", d.runtime, GPUSYS_CONTROL_NAME);
	/* systemd's order is the unit's; the daemon matches by path. */
	int fds[2] = { listening(control, SOCK_STREAM), listening(client, SOCK_SEQPACKET) };
	struct stat before, after;
	assert_int_equal(stat(client, &before), 0);

	for (int round = 0; round < 2; round++) {
		pid_t pid = spawn_activated(&d, fds, 2);
		serve_one(&d);
		assert_int_equal(kill(pid, SIGTERM), 0);
		int st = wait_exit(pid, 3000);
		assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		/* The socket file is systemd's: still there, the same one. */
		assert_int_equal(stat(client, &after), 0);
		assert_true(after.st_ino == before.st_ino);
	}

	/* Only one of the two: refused at start, saying so. */
	pid_t pid = spawn_activated(&d, fds + 1, 1);
	int st = wait_exit(pid, 5000);
	assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0);
	char *log = gd_log(&d);
	assert_non_null(strstr(log, "but not both"));
	free(log);

	close(fds[0]);
	close(fds[1]);
	unlink(client);
	unlink(control);
	gd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_activation) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
