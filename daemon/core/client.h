/* SPDX-License-Identifier: MIT */
/*
 * What every service may know about the client it serves: one typed view,
 * filled once at attach (core/session.c) or, in in-process tests, by the
 * test itself. Services never reach the session behind it.
 */
#ifndef GPUSYSD_CORE_CLIENT_H
#define GPUSYSD_CORE_CLIENT_H

#include <stdint.h>
#include <sys/types.h>

#include "util/creds.h"

struct client {
	uint32_t id;
	pid_t pid;
	char comm[32];          /* printable, NUL-terminated */
	struct creds creds;     /* uid, gid and groups as the client connected */
	mode_t umask;           /* the client's, for files and sockets it creates */
	int cwd_fd;             /* relative paths resolve here; -1: they get -EINVAL */
	int stdout_fd;          /* passed at attach, or -1 */
	int stderr_fd;
	int sock;               /* the attach connection: it hangs up when the client dies (-1: unknown) */
	uint8_t *bulk;          /* the channel's bulk area as the daemon maps it (NULL: none) */
	uint64_t bulk_bytes;    /* the daemon's own figure, never the shared header's */
	int32_t cuda_device;    /* the client's GPU ordinal (its numbering), or -1: emulated warps */
};

/* The Umask line of /proc/PID/status, or 022 when it cannot be read. */
mode_t client_umask_of(pid_t pid);

#endif
