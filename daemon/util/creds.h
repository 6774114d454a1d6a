/* SPDX-License-Identifier: MIT */
/*
 * Acting as a client on files. A daemon running as root switches the
 * calling worker thread to the client's uid, gid and groups around each file
 * operation (raw syscalls: glibc's wrappers would change every thread of the
 * process, see nptl(7)); a daemon running as anyone else serves only clients
 * of its own uid (the per-user daemon) and never switches.
 */
#ifndef GPUSYSD_CREDS_H
#define GPUSYSD_CREDS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* More supplementary groups than this and a client gets -EACCES for files:
 * leaving one out could grant access that group is denied (mode 0604). */
#define CREDS_MAX_GROUPS 1024u

struct creds {
	uid_t uid;
	gid_t gid;
	uint32_t ngroups;
	gid_t groups[CREDS_MAX_GROUPS];
	bool groups_known; /* false: too many or unreadable; the client gets -EACCES */
};

/* What creds_enter replaced, for creds_leave. */
struct creds_saved {
	bool switched;
	uid_t euid;
	gid_t egid;
	int ngroups;
	gid_t groups[CREDS_MAX_GROUPS];
};

/* Become c on this thread, or check that this daemon may serve c without
 * switching (same uid as the daemon; a root client of a root daemon). 0, or
 * -EACCES (another user of a per-user daemon, unknown groups), or the errno
 * of a failed step: then nothing is left switched. */
int creds_enter(const struct creds *c, struct creds_saved *save);

/* Undo creds_enter (in reverse: uid, gid, groups). A failure here would
 * leave a daemon thread with a client's identity: it aborts the daemon. */
void creds_leave(struct creds_saved *save);

/* Supplementary groups of the peer of a connected AF_UNIX socket (as they
 * were at connect time), or of pid from /proc/PID/status when the socket
 * cannot tell. 0 or -errno. */
int creds_peer_groups(int sock, pid_t pid, struct creds *c);

#endif
