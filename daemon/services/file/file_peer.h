/* SPDX-License-Identifier: MIT */
/*
 * What the file service needs to know about a client, taken from its
 * session once (file_peer.c) or, in unit tests without sessions, from a
 * stand-in (tests/file/peer_stub.c).
 */
#ifndef GPUSYSD_FILE_PEER_H
#define GPUSYSD_FILE_PEER_H

#include <stdint.h>
#include <sys/types.h>

#include "util/creds.h"
#include "core/port_server.h"

struct file_peer {
	int cwd_fd;       /* -1: relative paths get -EINVAL */
	int stdout_fd;    /* handle GPUSYS_FILE_STDOUT, or -1 */
	int stderr_fd;
	int sock;         /* the attach connection: it hangs up when the client dies (-1: unknown) */
	pid_t pid;
	mode_t umask;     /* the client's, applied to files and directories it creates */
	uint8_t *bulk;    /* the bulk area, as the daemon maps it (NULL: none) */
	uint64_t bulk_bytes; /* the daemon's own figure, never the shared header's */
	struct creds creds;
};

/* Fill p for the client of t. 0 or -errno. */
int file_peer_get(struct port_table *t, struct file_peer *p);

/* The Umask line of /proc/PID/status, or 022 when it cannot be read. */
mode_t file_peer_umask(pid_t pid);

#endif
