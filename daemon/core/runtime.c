/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "common/wire.h"

#include "core/runtime.h"

#define LOCK_NAME "gpusysd.lock"

static char *path_join(const char *dir, const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* The pid the holder wrote into the lock file. It writes it right after
 * locking, so a reader racing with a starting daemon may find it empty for
 * a moment: look a few times. */
static long lock_holder_pid(int fd)
{
	for (int tries = 0; tries < 20; tries++) {
		char buf[32];
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		if (n > 0) {
			buf[n] = 0;
			long pid = strtol(buf, NULL, 10);
			if (pid > 0)
				return pid;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
	}
	return -1;
}

static int take_lock(struct runtime *rt, char *err, size_t errlen)
{
	char *path = path_join(rt->dir, LOCK_NAME);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	int e = errno;
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
		free(path);
		return -e;
	}
	free(path);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		e = errno;
		if (e == EWOULDBLOCK) {
			long pid = lock_holder_pid(fd);
			if (pid > 0)
				snprintf(err, errlen, "another gpusysd is serving %s (pid %ld)", rt->dir, pid);
			else
				snprintf(err, errlen, "another gpusysd is serving %s", rt->dir);
			close(fd);
			return -EBUSY;
		}
		snprintf(err, errlen, "cannot lock %s/%s: %s", rt->dir, LOCK_NAME, strerror(e));
		close(fd);
		return -e;
	}
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
		e = errno;
		snprintf(err, errlen, "cannot write %s/%s: %s", rt->dir, LOCK_NAME, strerror(e));
		close(fd);
		return -e;
	}
	rt->lock_fd = fd;
	return 0;
}

static int listen_on(const char *path, int type, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int e;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "socket: %s", strerror(e));
		return -e;
	}
	/* A file left by a daemon that died: nobody holds the lock, so nobody
	 * serves it. */
	if (unlink(path) < 0 && errno != ENOENT) {
		e = errno;
		snprintf(err, errlen, "cannot remove stale %s: %s", path, strerror(e));
		goto fail;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(e));
		goto fail;
	}
	/* Any local user may attach; what they may do is decided per request
	 * with their credentials. */
	if (chmod(path, 0666) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot chmod %s: %s", path, strerror(e));
		goto fail;
	}
	if (listen(fd, 128) < 0) {
		e = errno;
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
		goto fail;
	}
	return fd;
fail:
	close(fd);
	return -e;
}

/* A socket systemd passed us for path (gpusysd.socket), made non-blocking,
 * or -1. The listening state is systemd's: we only accept on it. */
static int passed_socket(const char *path, int type)
{
	int n = sd_listen_fds(0);
	for (int fd = SD_LISTEN_FDS_START; n > 0 && fd < SD_LISTEN_FDS_START + n; fd++)
		if (sd_is_socket_unix(fd, type, 1, path, 0) > 0) {
			int fl = fcntl(fd, F_GETFL);
			if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
				return -1;
			return fd;
		}
	return -1;
}

int runtime_open(struct runtime *rt, const char *dir, char *err, size_t errlen)
{
	int r;

	*rt = (struct runtime){ .lock_fd = -1, .client_fd = -1, .control_fd = -1 };
	rt->dir = strdup(dir);
	rt->client_path = path_join(dir, GPUSYS_SOCKET_NAME);
	rt->control_path = path_join(dir, GPUSYS_CONTROL_NAME);
	if (!rt->dir || !rt->client_path || !rt->control_path) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto fail;
	}
	if (mkdir(dir, 0755) == 0) {
		/* Exactly 0755 whatever the umask: clients must reach the socket. */
		chmod(dir, 0755);
	} else if (errno != EEXIST) {
		r = -errno;
		snprintf(err, errlen, "cannot create runtime directory %s: %s", dir, strerror(-r));
		goto fail;
	}
	r = take_lock(rt, err, errlen);
	if (r < 0)
		goto fail;
	rt->client_fd = passed_socket(rt->client_path, SOCK_SEQPACKET);
	rt->control_fd = passed_socket(rt->control_path, SOCK_STREAM);
	if (rt->client_fd >= 0 && rt->control_fd >= 0) {
		rt->activated = true;
		return 0;
	}
	if (rt->client_fd >= 0 || rt->control_fd >= 0) {
		snprintf(err, errlen, "systemd passed one of %s and %s but not both: give gpusysd.socket both",
			 rt->client_path, rt->control_path);
		r = -EINVAL;
		goto fail;
	}
	r = listen_on(rt->client_path, SOCK_SEQPACKET, err, errlen);
	if (r < 0)
		goto fail;
	rt->client_fd = r;
	r = listen_on(rt->control_path, SOCK_STREAM, err, errlen);
	if (r < 0)
		goto fail;
	rt->control_fd = r;
	return 0;
fail:
	runtime_close(rt);
	return r;
}

void runtime_close(struct runtime *rt)
{
	/* Remove the files only if they are ours: we hold the lock, and
	 * systemd did not make them (it keeps them for the next start). */
	bool ours = rt->lock_fd >= 0 && !rt->activated;
	if (rt->client_fd >= 0) {
		close(rt->client_fd);
		if (ours)
			unlink(rt->client_path);
	}
	if (rt->control_fd >= 0) {
		close(rt->control_fd);
		if (ours)
			unlink(rt->control_path);
	}
	if (rt->lock_fd >= 0)
		close(rt->lock_fd);
	free(rt->dir);
	free(rt->client_path);
	free(rt->control_path);
	*rt = (struct runtime){ .lock_fd = -1, .client_fd = -1, .control_fd = -1 };
}
