/* SPDX-License-Identifier: MIT */
/*
 * The control socket: JSON lines each way (wire.h). One request per line;
 * every line gets exactly one reply line; errors are {"error": "..."} and
 * leave the connection usable.
 */
#ifndef GPUSYSD_CONTROL_H
#define GPUSYSD_CONTROL_H

#include <jansson.h>

struct event_base;
struct control;

#define CONTROL_MAX_LINE (64 * 1024)
#define CONTROL_MAX_CONNS 64

/* Builds the reply to {"cmd": cmd, ...} (req, the whole request) in
 * *reply (a new reference). -ENOENT: no such command. */
typedef int (*control_cmd_fn)(void *arg, const char *cmd, json_t *req, json_t **reply);

int control_new(struct event_base *base, int listen_fd, control_cmd_fn handler, void *arg,
		struct control **ret);
void control_free(struct control *c);

/* The reply to one request line (a new reference); exposed for tests. */
json_t *control_handle_line(const char *line, size_t len, control_cmd_fn handler, void *arg);

#endif
