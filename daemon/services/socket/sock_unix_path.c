/* SPDX-License-Identifier: MIT */
/* Unix socket paths through the one path resolver (sock_unix_path.h). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "services/socket/sock_unix_path.h"
#include "util/path_resolve.h"

#define SUN_PATH_OFF offsetof(struct sockaddr_un, sun_path)

bool sock_unix_is_path(const void *addr, socklen_t len)
{
	sa_family_t fam;
	if (len <= SUN_PATH_OFF)
		return false;
	memcpy(&fam, addr, sizeof(fam));
	return fam == AF_UNIX && ((const char *)addr)[SUN_PATH_OFF] != 0;
}

/* The path of addr, NUL-terminated (sock_addr_check made sure it is). */
static const char *unix_path(const void *addr)
{
	return (const char *)addr + SUN_PATH_OFF;
}

/* sun_path = text; its length for bind/connect, or -ENAMETOOLONG. */
static int unix_addr(struct sockaddr_un *sun, socklen_t *len, const char *text)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	size_t n = strlen(text);
	if (n >= sizeof(sun->sun_path))
		return -ENAMETOOLONG;
	memcpy(sun->sun_path, text, n + 1);
	*len = (socklen_t)(SUN_PATH_OFF + n + 1);
	return 0;
}

int sock_unix_bind(int fd, const void *addr, socklen_t len, bool cwd_private)
{
	(void)len;
	struct path_at at;
	int r = path_resolve_parent(-1, unix_path(addr), &at); /* sock_addr_check: absolute */
	if (r < 0)
		return r;
	struct sockaddr_un sun;
	socklen_t sl;
	if (cwd_private) {
		/* bind(2) makes the file where the name resolves, following
		 * nothing in the last component: from the resolved directory,
		 * the name alone is safe. */
		int here = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (here < 0 || (r = unix_addr(&sun, &sl, at.name)) < 0 || fchdir(at.dirfd) < 0) {
			r = r < 0 ? r : -errno;
		} else {
			r = bind(fd, (const struct sockaddr *)&sun, sl) < 0 ? -errno : 0;
			if (fchdir(here) < 0)
				r = r < 0 ? r : -errno; /* cannot happen: the directory is open */
		}
		if (here >= 0)
			close(here);
	} else {
		char text[sizeof(sun.sun_path) + 1];
		int n = snprintf(text, sizeof(text), "/proc/self/fd/%d/%s", at.dirfd, at.name);
		r = n < 0 || (size_t)n >= sizeof(text) ? -ENAMETOOLONG : unix_addr(&sun, &sl, text);
		if (r == 0)
			r = bind(fd, (const struct sockaddr *)&sun, sl) < 0 ? -errno : 0;
	}
	path_at_close(&at);
	return r;
}

int sock_unix_target(const void *addr, socklen_t len, struct sockaddr_un *out, socklen_t *outlen, int *hold)
{
	(void)len;
	*hold = -1;
	/* The socket file itself, opened O_PATH: connecting through its
	 * descriptor reaches exactly this inode, and the kernel still checks
	 * write permission on it with the client's credentials. */
	int fd = path_open(-1, unix_path(addr), O_PATH, 0, NULL);
	if (fd < 0)
		return fd;
	char text[32];
	snprintf(text, sizeof(text), "/proc/self/fd/%d", fd);
	int r = unix_addr(out, outlen, text);
	if (r < 0) {
		close(fd);
		return r;
	}
	*hold = fd;
	return 0;
}
