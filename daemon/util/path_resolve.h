/* SPDX-License-Identifier: MIT */
/*
 * The one path resolver for every call that names a path for a client
 * (files, directories, stat, mkdir, rmdir, unlink, rename, Unix socket bind,
 * connect and sendto). Call it with the client's credentials entered
 * (util/creds.h): the kernel's permission checks then apply as for the
 * client itself.
 *
 * Why a resolver of our own: gpusysd's descriptors include other clients'
 * working directories and open directories, and /proc/self inside gpusysd
 * is gpusysd. The kernel lets any thread of a process through its own
 * /proc/self/fd/N magic links whatever its credentials, so a plain
 * fstatat(.., "/proc/self/fd/7/secret") run as uid nobody reaches behind a
 * 0700 directory. Here:
 *
 *   - every directory is found with openat2(RESOLVE_NO_MAGICLINKS): a magic
 *     link anywhere in a path is -ELOOP;
 *   - the last component is never left to the kernel to follow: the call
 *     acts on (parent directory, name), and where a call follows a symlink
 *     we read it and resolve its text the same way (at most PATH_HOPS);
 *   - anything that lands in one of gpusysd's own /proc entries (its pid
 *     directory, reached as /proc/self, /proc/thread-self, /proc/PID or
 *     /proc/TID, directly or through symlinks) is -EACCES.
 *
 * path_open and path_open_cached (not O_CREAT) first try the whole path in
 * one openat2(RESOLVE_NO_MAGICLINKS), the kernel following ordinary
 * symlinks, and keep what it opened when that is not on procfs: nothing
 * outside procfs reached without a magic link is part of gpusysd's own
 * /proc entries. Anything on procfs, and every failure, goes the careful
 * way above.
 *
 * Relative paths are relative to base (the client's working directory);
 * with base < 0 they are refused (-EINVAL), never taken relative to the
 * daemon's own.
 */
#ifndef GPUSYSD_PATH_RESOLVE_H
#define GPUSYSD_PATH_RESOLVE_H

#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Symlinks followed in the last component before -ELOOP (the kernel's
 * limit for a whole path is also 40). */
#define PATH_HOPS 40

/* A path split into its directory, opened O_PATH, and its last component. */
struct path_at {
	int dirfd;              /* owned: path_at_close */
	char name[NAME_MAX + 1]; /* "." for "/" and paths ending in "/." */
	bool trailing_slash;    /* the path ended in '/': it must name a directory */
};

/* Resolve all of path but its last component (which is not followed).
 * 0 or -errno; on error nothing is open. */
int path_resolve_parent(int base, const char *path, struct path_at *at);

void path_at_close(struct path_at *at);

/* Open path as open(2) would (flags O_*, mode for O_CREAT), following a
 * symlink in the last component unless flags has O_NOFOLLOW or
 * O_CREAT|O_EXCL. The descriptor, with its fstat in *st unless st is NULL
 * (the short way below takes one anyway), or -errno. */
int path_open(int base, const char *path, int flags, mode_t mode, struct stat *st);

/* The same without waiting for the disk or a network file system: every
 * component must be in the kernel's lookup cache (openat2's
 * RESOLVE_CACHED). -EAGAIN where that does not hold, or the kernel has no
 * RESOLVE_CACHED (before 5.12): call path_open, on a thread that may
 * block. No O_CREAT or O_TRUNC. The descriptor (its fstat in *st as
 * path_open's), or -errno as path_open. */
int path_open_cached(int base, const char *path, int flags, struct stat *st);

/* Whether the directory fd is, or lies inside, one of gpusysd's own /proc
 * entries: 1 yes, 0 no, -errno when it cannot tell (treat as yes). Exposed
 * for the tests. */
int path_is_own_proc(int fd);

#endif
