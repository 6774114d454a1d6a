/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_FILE_PATHS_H
#define GPUSYSD_FILE_PATHS_H

#include <stdint.h>
#include <sys/types.h>

#include "core/client.h"

/* Copy the path of a request out of its body into buf (at least
 * GPUSYS_FILE_PATH_MAX + 1 bytes, NUL-terminated) and pick the directory it
 * is relative to. 0 or -errno. */
int file_take_path(const struct client *peer, const uint8_t *body, uint32_t n, char *buf, int *dirfd);

/* Set this thread's umask (a private copy of the process's, where
 * unshare(CLONE_FS) allows); returns the previous one. */
mode_t file_thread_umask(mode_t m);

/* The mode to create with: the kernel applies the (thread's) umask. */
mode_t file_create_mode(const struct client *peer, uint32_t mode);

#endif
