/* SPDX-License-Identifier: MIT */
/*
 * What every service may know about the client it serves: one typed view,
 * filled once at attach (core/session.c) or, in in-process tests, by the
 * test itself. Services never reach the session behind it.
 */
#ifndef GPUSYSD_CORE_CLIENT_H
#define GPUSYSD_CORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/creds.h"

struct gpu;
struct account;

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
	int32_t cuda_device;    /* the client's GPU as THIS process numbers it (the
				   UUID mapped, core/gpus.h), or -1: emulated warps */
	int32_t client_ordinal; /* the same GPU in the client's numbering (its hello) */
	struct gpu *gpu;        /* the GPU it named by UUID, or NULL */
	struct account *account; /* its user's quotas (core/accounts.h); NULL in in-process tests */
};

/* [off, off + count) of the client's bulk area, as the daemon sized it
 * (never the shared header's figure): its address, or NULL when the range
 * does not lie inside (or there is no bulk area). Any service that moves
 * bulk data (files, sockets) checks its range here. */
static inline uint8_t *client_bulk_range(const struct client *c, uint64_t off, uint64_t count)
{
	if (!c->bulk || count > c->bulk_bytes || off > c->bulk_bytes - count)
		return NULL;
	return c->bulk + off;
}

/* The Umask line of /proc/PID/status, or 022 when it cannot be read. */
mode_t client_umask_of(pid_t pid);

#endif
