/* SPDX-License-Identifier: MIT */
/*
 * Per-thread credential switching, after nfs-ganesha (src/os/linux/subr.c):
 * syscall() for setgroups, setresgid and setresuid, which on Linux act on the
 * calling thread only, in that order; undone in reverse. The effective ids
 * also set the filesystem ids; setfsuid(-1)/setfsgid(-1) confirm them (they
 * return the current value and change nothing).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/creds.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

static long sys_setgroups(size_t n, const gid_t *g)
{
	return syscall(SYS_setgroups, n, g);
}

static long sys_setresgid(gid_t r, gid_t e, gid_t s)
{
	return syscall(SYS_setresgid, r, e, s);
}

static long sys_setresuid(uid_t r, uid_t e, uid_t s)
{
	return syscall(SYS_setresuid, r, e, s);
}

static int fsuid_now(void)
{
	return (int)syscall(SYS_setfsuid, (uid_t)-1);
}

static int fsgid_now(void)
{
	return (int)syscall(SYS_setfsgid, (gid_t)-1);
}

int creds_enter(const struct creds *c, struct creds_saved *save)
{
	uid_t euid = geteuid();

	save->switched = false;
	if (euid != 0) {
		/* Per-user daemon: its own user only, as itself. */
		return c->uid == euid ? 0 : -EACCES;
	}
	if (c->uid == 0 && c->gid == 0)
		return 0; /* root asking a root daemon: nothing to drop */
	if (!c->groups_known)
		return -EACCES;

	save->euid = euid;
	save->egid = getegid();
	save->ngroups = getgroups(CREDS_MAX_GROUPS, save->groups);
	if (save->ngroups < 0)
		return -errno;

	if (sys_setgroups(c->ngroups, c->groups) < 0)
		return -errno;
	if (sys_setresgid((gid_t)-1, c->gid, (gid_t)-1) < 0) {
		int e = -errno;
		if (sys_setgroups((size_t)save->ngroups, save->groups) < 0)
			abort();
		return e;
	}
	if (sys_setresuid((uid_t)-1, c->uid, (uid_t)-1) < 0) {
		int e = -errno;
		if (sys_setresgid((gid_t)-1, save->egid, (gid_t)-1) < 0 ||
		    sys_setgroups((size_t)save->ngroups, save->groups) < 0)
			abort();
		return e;
	}
	save->switched = true;
	if ((uid_t)fsuid_now() != c->uid || (gid_t)fsgid_now() != c->gid) {
		creds_leave(save);
		return -EPERM;
	}
	return 0;
}

void creds_leave(struct creds_saved *save)
{
	if (!save->switched)
		return;
	save->switched = false;
	if (sys_setresuid((uid_t)-1, save->euid, (uid_t)-1) < 0 ||
	    sys_setresgid((gid_t)-1, save->egid, (gid_t)-1) < 0 ||
	    sys_setgroups((size_t)save->ngroups, save->groups) < 0 || (uid_t)fsuid_now() != save->euid ||
	    (gid_t)fsgid_now() != save->egid) {
		/* Never go on serving as someone else. */
		fprintf(stderr, "gpusysd: cannot restore the daemon's credentials on a worker thread: %s; stopping\n",
			strerror(errno));
		abort();
	}
}

static int groups_from_proc(pid_t pid, struct creds *c)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	int r = -ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		char *p = line + 7, *end;
		c->ngroups = 0;
		r = 0;
		for (;;) {
			errno = 0;
			unsigned long g = strtoul(p, &end, 10);
			if (end == p)
				break;
			if (errno || c->ngroups == CREDS_MAX_GROUPS) {
				r = -E2BIG;
				break;
			}
			c->groups[c->ngroups++] = (gid_t)g;
			p = end;
		}
		break;
	}
	fclose(f);
	return r;
}

int creds_peer_groups(int sock, pid_t pid, struct creds *c)
{
	socklen_t len = sizeof(c->groups);

	c->groups_known = false;
	c->ngroups = 0;
	if (sock >= 0 && getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, c->groups, &len) == 0) {
		c->ngroups = len / sizeof(gid_t);
		c->groups_known = true;
		return 0;
	}
	if (sock >= 0 && errno == ERANGE)
		return -E2BIG;
	if (pid <= 0)
		return -ESRCH;
	int r = groups_from_proc(pid, c);
	if (r == 0)
		c->groups_known = true;
	return r;
}
