/* SPDX-License-Identifier: MIT */
/*
 * One path resolver for clients' paths (path_resolve.h says why).
 *
 * Directories are found with openat2(RESOLVE_NO_MAGICLINKS); on a kernel
 * without openat2 (before 5.6) they are walked one component at a time
 * with O_NOFOLLOW, symlinks read and their text resolved by us, so the
 * kernel never follows a link of any kind. The last component is always
 * opened on its own (RESOLVE_NO_SYMLINKS, or O_NOFOLLOW), so a symlink
 * there is read and resolved by us too, and every directory the walk ends
 * in is checked against gpusysd's own /proc entries.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/path_resolve.h"

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif
#define PROC_ROOT_INO 1 /* procfs numbers its root 1 */
/* procfs nests a few levels (/proc/PID/task/TID/net/...; /proc/sys/a/b/c):
 * a walk up longer than this is not procfs as we know it. */
#define PROC_MAX_DEPTH 32

#ifndef RESOLVE_NO_SYMLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20 /* Linux 5.12 */
#endif

struct open_how_compat {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};

static atomic_int have_openat2 = 1;

/* openat2(2) with resolve flags; -ENOSYS where the kernel has none. */
static int open_how(int dirfd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
	if (!atomic_load_explicit(&have_openat2, memory_order_relaxed))
		return -ENOSYS;
	struct open_how_compat how = {
		.flags = (uint64_t)(unsigned)flags,
		.mode = (flags & (O_CREAT | __O_TMPFILE)) ? (mode & 07777) : 0,
		.resolve = resolve,
	};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	if (fd >= 0)
		return (int)fd;
	if (errno == ENOSYS)
		atomic_store_explicit(&have_openat2, 0, memory_order_relaxed);
	return -errno;
}

static bool on_procfs(int fd)
{
	struct statfs sf;
	return fstatfs(fd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}

/* "Tgid:" of a /proc/PID (or /proc/TID) directory; -1 when it has none. */
static long proc_dir_tgid(int dirfd)
{
	int fd = openat(dirfd, "status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char buf[1024];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *t = strstr(buf, "\nTgid:");
	return t ? strtol(t + 6, NULL, 10) : -1;
}

/* Our own pid as the procfs whose root is rootfd numbers it ("self" there);
 * -1 when that procfs cannot see us. */
static long proc_self_pid(int rootfd)
{
	if (rootfd < 0)
		return (long)getpid(); /* no root reached: a bind mount of a part */
	char buf[32];
	ssize_t n = readlinkat(rootfd, "self", buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return strtol(buf, NULL, 10);
}

int path_is_own_proc(int fd)
{
	if (!on_procfs(fd))
		return 0;
	struct stat st0;
	if (fstat(fd, &st0) < 0)
		return -errno;
	/* Walk up to the procfs root; top is the directory just below it
	 * (/proc/PID, /proc/sys...). The process a pid directory belongs to
	 * answers in its own status file. */
	int cur = fcntl(fd, F_DUPFD_CLOEXEC, 0), below = -1, root = -1, top = -1, r = 0;
	if (cur < 0)
		return -errno;
	for (int depth = 0;; depth++) {
		struct stat st;
		if (depth > PROC_MAX_DEPTH || fstat(cur, &st) < 0) {
			r = -ELOOP;
			break;
		}
		if (st.st_ino == PROC_ROOT_INO) {
			root = cur;
			top = below;
			cur = below = -1;
			break;
		}
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0) {
			r = -errno;
			break;
		}
		struct stat ust;
		if (fstat(up, &ust) < 0 || ust.st_dev != st0.st_dev) {
			close(up); /* left procfs: a part of it mounted elsewhere */
			top = cur;
			cur = -1;
			break;
		}
		if (below >= 0)
			close(below);
		below = cur;
		cur = up;
	}
	if (r == 0 && top >= 0) {
		long tgid = proc_dir_tgid(top);
		long self = tgid > 0 ? proc_self_pid(root) : -1;
		r = tgid > 0 && tgid == self;
	}
	int fds[] = { cur, below, root, top };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return r;
}

/* Refuse a directory that is gpusysd's own /proc entry: 0 or -EACCES. */
static int refuse_own_proc(int dirfd)
{
	int r = path_is_own_proc(dirfd);
	return r == 0 ? 0 : -EACCES;
}

static int walk_dirs(int base, const char *path, int *hops);

/* The directory a component names from cur, the component not followed by
 * the kernel: a symlink there is read and its text walked from cur. */
static int walk_one(int cur, const char *name, int *hops)
{
	int next = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (next >= 0)
		return next;
	int err = errno;
	if (err != ENOTDIR && err != ELOOP)
		return -err;
	char target[PATH_MAX];
	ssize_t n = readlinkat(cur, name, target, sizeof(target) - 1);
	if (n < 0)
		return -err; /* not a symlink: a file where a directory was named */
	if (++*hops > PATH_HOPS)
		return -ELOOP;
	target[n] = 0;
	return walk_dirs(cur, target, hops);
}

/* A directory path walked one component at a time from base (or from "/"
 * for an absolute path). The directory, or -errno. */
static int walk_dirs(int base, const char *path, int *hops)
{
	int cur = path[0] == '/' ? open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)
				 : fcntl(base, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -errno;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		size_t len = strcspn(p, "/");
		if (len == 0)
			break;
		if (len > NAME_MAX) {
			close(cur);
			return -ENAMETOOLONG;
		}
		char name[NAME_MAX + 1];
		memcpy(name, p, len);
		name[len] = 0;
		p += len;
		if (strcmp(name, ".") == 0)
			continue;
		int next = walk_one(cur, name, hops);
		close(cur);
		if (next < 0)
			return next;
		cur = next;
	}
	return cur;
}

/* The directory dir names from base, no magic link followed. */
static int open_dir(int base, const char *dir, int *hops, uint64_t cached)
{
	int fd = open_how(base, dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0, RESOLVE_NO_MAGICLINKS | cached);
	if (fd == -ENOSYS)
		fd = cached ? -EAGAIN : walk_dirs(base, dir, hops); /* the walk is never cached-only */
	return fd;
}

/* cached: RESOLVE_CACHED (path_open_cached), or 0. */
static int resolve_parent(int base, const char *path, struct path_at *at, int *hops, uint64_t cached)
{
	at->dirfd = -1;
	size_t len = strlen(path);
	if (len == 0)
		return -ENOENT;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	if (path[0] != '/' && base < 0)
		return -EINVAL; /* never the daemon's working directory */
	char buf[PATH_MAX];
	memcpy(buf, path, len + 1);
	at->trailing_slash = false;
	while (len > 1 && buf[len - 1] == '/') {
		buf[--len] = 0;
		at->trailing_slash = true;
	}
	char *slash = strrchr(buf, '/');
	const char *dir, *name;
	if (!slash) {
		dir = ".";
		name = buf;
	} else if (slash == buf) {
		dir = "/";
		name = buf[1] ? buf + 1 : ".";
	} else {
		*slash = 0;
		dir = buf;
		name = slash + 1;
	}
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	int fd = open_dir(base, dir, hops, cached);
	if (fd < 0)
		return fd;
	int r = refuse_own_proc(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	at->dirfd = fd;
	/* Fits: checked against NAME_MAX above (memcpy, not snprintf: gcc
	 * at -O1, the sanitized builds, cannot see that and warns). */
	memcpy(at->name, name, strlen(name) + 1);
	return 0;
}

int path_resolve_parent(int base, const char *path, struct path_at *at)
{
	int hops = 0;
	return resolve_parent(base, path, at, &hops, 0);
}

void path_at_close(struct path_at *at)
{
	if (at->dirfd >= 0)
		close(at->dirfd);
	at->dirfd = -1;
}

/* Open the last component of at on its own, never following a symlink
 * there: the descriptor, -ELOOP for a symlink (when flags has no O_PATH
 * with O_NOFOLLOW), or -errno. */
static int open_last(const struct path_at *at, int flags, mode_t mode, uint64_t cached)
{
	int fd = open_how(at->dirfd, at->name, flags, mode, RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | cached);
	if (fd != -ENOSYS)
		return fd;
	if (cached)
		return -EAGAIN;
	fd = openat(at->dirfd, at->name, flags | O_NOFOLLOW, mode & 07777);
	if (fd < 0)
		return -errno;
	if ((flags & O_PATH) && !(flags & O_NOFOLLOW)) {
		/* O_PATH|O_NOFOLLOW opens a symlink itself: we added the
		 * O_NOFOLLOW, so a link here is one to follow. */
		struct stat st;
		if (fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
			close(fd);
			return -ELOOP;
		}
	}
	return fd;
}

/* The short way, one openat2 for the whole path with no magic link
 * followed, kept when what it opened is not on procfs: a file or
 * directory outside procfs reached without a magic link lies in none of
 * gpusysd's own /proc entries, which is all that the careful way (the
 * last component on its own, every directory it ends in checked) adds.
 * On procfs, or where the kernel has no openat2, the careful way runs
 * instead (-ENOSYS here). What the careful way took 8 system calls for
 * (open the directory, check it, open the name, check it, close the
 * directory; then the caller's fstat) is 2, the fstat's result in st.
 * Not for O_CREAT, whose follow rules (O_EXCL) the careful way keeps. A
 * failure is left to the careful way too: errors are rare, and each stays
 * the one it has always been (a path into gpusysd's own /proc entry is
 * -EACCES there, where the short way would say -ELOOP). */
static int open_short(int base, const char *path, int flags, uint64_t cached, struct stat *st)
{
	if (flags & (O_CREAT | __O_TMPFILE))
		return -ENOSYS;
	int fd = open_how(base, path, flags | O_CLOEXEC, 0, RESOLVE_NO_MAGICLINKS | cached);
	if (fd == -EAGAIN && cached)
		return fd; /* not all in the cache: the careful way would not be either */
	if (fd < 0)
		return -ENOSYS; /* the careful way says why, as it always has */
	/* procfs numbers its devices as every in-memory file system does
	 * (major 0); one on a block device is never procfs, without the
	 * statfs (ext4's sums a counter over every CPU). */
	if (fstat(fd, st) == 0 && (major(st->st_dev) != 0 || !on_procfs(fd)))
		return fd;
	close(fd);
	return -ENOSYS;
}

static int open_careful(int base, const char *path, int flags, mode_t mode, uint64_t cached)
{
	bool follow = !(flags & O_NOFOLLOW) && !((flags & O_CREAT) && (flags & O_EXCL));
	struct path_at at;
	int hops = 0;
	int r = resolve_parent(base, path, &at, &hops, cached);
	if (r < 0)
		return r;
	for (;;) {
		if (at.trailing_slash && (flags & O_CREAT)) {
			r = -EISDIR; /* open("new/", O_CREAT) */
			break;
		}
		int fl = flags | O_CLOEXEC | (at.trailing_slash ? O_DIRECTORY : 0);
		int fd = open_last(&at, fl, mode, cached);
		if (fd >= 0) {
			struct stat st;
			r = on_procfs(fd) && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) ? refuse_own_proc(fd) : 0;
			if (r < 0) {
				close(fd);
				break;
			}
			r = fd;
			break;
		}
		r = fd;
		if (fd == -ELOOP && cached && follow) {
			r = -EAGAIN; /* a symlink to follow: that walk is the full resolver's */
			break;
		}
		if (fd != -ELOOP || !follow)
			break;
		/* A magic link of procfs (a client's /proc/PID/fd/N, cwd, exe)
		 * stays refused: its text is not what it points to. */
		if (on_procfs(at.dirfd)) {
			int probe = open_how(at.dirfd, at.name, O_PATH | O_CLOEXEC, 0, RESOLVE_NO_MAGICLINKS);
			if (probe >= 0)
				close(probe);
			else if (probe == -ELOOP)
				break;
		}
		/* A symlink (or an ELOOP of another kind: readlinkat says). */
		char target[PATH_MAX];
		ssize_t n = readlinkat(at.dirfd, at.name, target, sizeof(target) - 1);
		if (n < 0)
			break; /* keep -ELOOP */
		if (++hops > PATH_HOPS)
			break;
		target[n] = 0;
		if (at.trailing_slash && n + 1 < (ssize_t)sizeof(target)) {
			target[n] = '/'; /* "link/": its target must be a directory */
			target[n + 1] = 0;
		}
		struct path_at next;
		r = resolve_parent(at.dirfd, target, &next, &hops, 0);
		if (r < 0)
			break;
		path_at_close(&at);
		at = next;
	}
	path_at_close(&at);
	return r;
}

/* 0, or -errno before anything is opened: what the kernel would not
 * check for us. */
static int path_check(int base, const char *path)
{
	if (path[0] == 0)
		return -ENOENT;
	if (path[0] != '/' && base < 0)
		return -EINVAL; /* never the daemon's working directory */
	return 0;
}

static int open_path(int base, const char *path, int flags, mode_t mode, uint64_t cached, struct stat *st)
{
	int r = path_check(base, path);
	if (r < 0)
		return r;
	struct stat local;
	int fd = open_short(base, path, flags, cached, st ? st : &local);
	if (fd != -ENOSYS)
		return fd;
	fd = open_careful(base, path, flags, mode, cached);
	if (fd >= 0 && st && fstat(fd, st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int path_open(int base, const char *path, int flags, mode_t mode, struct stat *st)
{
	return open_path(base, path, flags, mode, 0, st);
}

/* Whether openat2 knows RESOLVE_CACHED: 1 yes, 0 no, -1 not asked yet. */
static atomic_int have_cached = -1;

int path_open_cached(int base, const char *path, int flags, struct stat *st)
{
	if (flags & (O_CREAT | O_TRUNC))
		return -EAGAIN; /* RESOLVE_CACHED refuses them */
	int known = atomic_load_explicit(&have_cached, memory_order_relaxed);
	if (known < 0) {
		int fd = open_how(AT_FDCWD, "/", O_PATH | O_CLOEXEC, 0, RESOLVE_CACHED);
		if (fd >= 0)
			close(fd);
		known = fd >= 0 || fd == -EAGAIN;
		atomic_store_explicit(&have_cached, known, memory_order_relaxed);
	}
	if (!known)
		return -EAGAIN;
	return open_path(base, path, flags, 0, RESOLVE_CACHED, st);
}
