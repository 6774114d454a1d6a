/* SPDX-License-Identifier: MIT */
/*
 * Unix socket paths named by a client, resolved by the one path resolver
 * (util/path_resolve.h) instead of by the kernel inside bind(2),
 * connect(2) and sendto(2): the kernel would follow gpusysd's own
 * /proc/self/fd magic links, whatever the client's credentials. Call with
 * the client's credentials entered.
 */
#ifndef GPUSYSD_SOCK_UNIX_PATH_H
#define GPUSYSD_SOCK_UNIX_PATH_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Whether addr (len bytes, checked by sock_addr_check) names a file: a
 * Unix address that is neither abstract nor unnamed. */
bool sock_unix_is_path(const void *addr, socklen_t len);

/* bind(2) fd to the path in addr. cwd_private: this thread has its own
 * working directory (unshare(CLONE_FS)), so the socket is made relative to
 * the resolved directory and is named by its last component; otherwise it
 * is made through /proc/self/fd/N/NAME (-ENAMETOOLONG where that does not
 * fit sun_path). 0 or -errno. */
int sock_unix_bind(int fd, const void *addr, socklen_t len, bool cwd_private);

/* The address to connect or send to for the path in addr: *out names the
 * resolved socket file as /proc/self/fd/N, N (in *hold) open until the
 * caller is done with *out (close it). 0 or -errno. */
int sock_unix_target(const void *addr, socklen_t len, struct sockaddr_un *out, socklen_t *outlen, int *hold);

#endif
