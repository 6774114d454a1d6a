/* SPDX-License-Identifier: MIT */
/*
 * The runtime directory: created if missing, locked against a second
 * daemon, holding the client and control sockets.
 */
#ifndef GPUSYSD_RUNTIME_H
#define GPUSYSD_RUNTIME_H

#include <stdbool.h>

#include <stddef.h>

struct runtime {
	char *dir;
	int lock_fd;
	int client_fd;  /* listening, SOCK_SEQPACKET */
	int control_fd; /* listening, SOCK_STREAM */
	char *client_path;
	char *control_path;
	bool activated;  /* both sockets came from systemd (gpusysd.socket): its files */
};

/* Take DIR/gpusysd.lock (flock), then use the two sockets systemd passed
 * (socket activation: sd_listen_fds, matched by path and type), or else
 * (re)create both sockets: socket
 * files left by a daemon that died are removed first, which is safe only
 * because we hold the lock. -EBUSY with "another gpusysd is serving DIR
 * (pid N)" in err if the lock is held; other errors also explain in err. */
int runtime_open(struct runtime *rt, const char *dir, char *err, size_t errlen);

/* Close the sockets, remove their files (still under the lock), release
 * the lock. */
void runtime_close(struct runtime *rt);

#endif
