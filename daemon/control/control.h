/* SPDX-License-Identifier: MIT */
/*
 * The control socket: JSON lines each way (wire.h). One request per line;
 * every line gets exactly one reply line; errors are {"error": "..."} and
 * leave the connection usable.
 */
#ifndef GPUSYSD_CONTROL_H
#define GPUSYSD_CONTROL_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

struct event_base;
struct control;

#define CONTROL_MAX_LINE (64 * 1024)
#define CONTROL_MAX_CONNS 64

/* Who sent a request (SO_PEERCRED of the connection). admin: root, the
 * daemon's own user or a member of the admin group; others see only their
 * own clients. */
struct control_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin;
};

/* Builds the reply to {"cmd": cmd, ...} (req, the whole request) from who
 * in *reply (a new reference). -ENOENT: no such command. */
typedef int (*control_cmd_fn)(void *arg, const struct control_peer *who, const char *cmd, json_t *req,
			      json_t **reply);

struct control_limits {
	unsigned conns_per_uid;   /* open connections of one user at most (root: no bound but the total) */
	unsigned idle_timeout_ms; /* nothing read or written for this long: closed */
	long long admin_gid;      /* -1: no admin group */
};

int control_new(struct event_base *base, int listen_fd, const struct control_limits *lim,
		control_cmd_fn handler, void *arg, struct control **ret);
void control_free(struct control *c);

/* The reply to one request line (a new reference); exposed for tests and
 * the fuzzer. */
json_t *control_handle_line(const char *line, size_t len, const struct control_peer *who,
			    control_cmd_fn handler, void *arg);

/* Whether a peer with these credentials may see every client: uid 0, the
 * daemon's effective uid, or admin_gid among gid and groups. */
bool control_is_admin(uid_t uid, gid_t gid, const gid_t *groups, unsigned ngroups, long long admin_gid);

#endif
