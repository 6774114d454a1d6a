/* SPDX-License-Identifier: MIT */
/* Tests that act as other users (users.h). */
#include <grp.h>
#include <poll.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "users.h"

bool need_root(void)
{
	if (geteuid() == 0)
		return true;
	skip(); /* acting as other users needs root */
	return false;
}

void open_to_all(const struct gd *d)
{
	assert_int_equal(chmod(d->dir, 0755), 0);
	assert_int_equal(chmod(d->runtime, 0755), 0);
}

int become(uid_t uid, gid_t extra_group)
{
	gid_t g = extra_group;
	if (setgroups(extra_group ? 1 : 0, &g) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
		return -1;
	return 0;
}

pid_t spawn_as(uid_t uid, gid_t extra_group, int (*fn)(void *), void *arg)
{
	fflush(NULL);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		if (become(uid, extra_group) < 0)
			_exit(100);
		_exit(fn(arg));
	}
	return p;
}

int join(pid_t p)
{
	int ws;
	assert_int_equal(waitpid(p, &ws, 0), p);
	if (!WIFEXITED(ws))
		fail_msg("child %d died (status 0x%x)", (int)p, ws);
	return WEXITSTATUS(ws);
}

void pipe_put(int fd)
{
	char c = 'x';
	if (write(fd, &c, 1) != 1)
		abort();
}

bool pipe_get(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;
	return poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 1;
}
