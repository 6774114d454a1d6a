/* SPDX-License-Identifier: MIT */
/*
 * Paths and creation for the file service: a client path is never resolved
 * against the daemon's working directory (relative paths go through the
 * directory the client passed at attach), every path goes through the one
 * resolver (util/path_resolve.h: no magic link, none of gpusysd's own /proc
 * entries), and files are created with the client's umask.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpusys/file.h"
#include "services/file/file_paths.h"

/* Copy the path of a request out of its body into buf (NUL-terminated) and
 * pick the directory it is relative to. 0 or -errno. */
int file_take_path(const struct client *peer, const uint8_t *body, uint32_t n, char *buf, int *dirfd)
{
	if (n > GPUSYS_FILE_PATH_MAX)
		return -ENAMETOOLONG;
	if (memchr(body, 0, n))
		return -EINVAL;
	memcpy(buf, body, n);
	buf[n] = 0;
	if (n == 0)
		return -ENOENT;
	if (buf[0] != '/' && peer->cwd_fd < 0)
		return -EINVAL; /* no working directory was passed: relative paths mean nothing */
	*dirfd = peer->cwd_fd;
	return 0;
}

/* Files a client creates get its umask. The umask belongs to the process
 * (all threads share one fs_struct), so a worker first takes a private copy
 * with unshare(CLONE_FS); if that fails, the daemon's own umask is applied
 * on top of the client's (never less restrictive than the client's). */
static __thread int fs_private; /* 0 unknown, 1 private, -1 shared */

mode_t file_thread_umask(mode_t m)
{
	if (fs_private == 0)
		fs_private = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (fs_private < 0) {
		mode_t cur = umask(0);
		umask(cur);
		return cur; /* leave the shared one alone */
	}
	return umask(m);
}

/* The mode to create with: the kernel applies the (thread's) umask. */
mode_t file_create_mode(const struct client *peer, uint32_t mode)
{
	mode_t m = mode & 07777;
	return fs_private < 0 ? m & ~peer->umask : m;
}

