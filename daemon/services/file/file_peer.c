/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "services/file/file_peer.h"
#include "core/session.h"

int file_peer_get(struct port_table *t, struct file_peer *p)
{
	struct session *s = t->owner;

	if (!s)
		return -EINVAL;
	p->cwd_fd = s->cwd_fd;
	p->stdout_fd = s->stdout_fd;
	p->stderr_fd = s->stderr_fd;
	p->sock = s->sock;
	p->pid = s->peer.pid;
	p->bulk_bytes = s->chan.layout.bulk_bytes;
	p->bulk = p->bulk_bytes ? (uint8_t *)s->chan.base + s->chan.layout.bulk_offset : NULL;
	p->creds.uid = s->peer.uid;
	p->creds.gid = s->peer.gid;
	/* Groups as they were when the client connected (SO_PEERGROUPS); a
	 * client with more than we can hold gets -EACCES for files. */
	creds_peer_groups(s->sock, s->peer.pid, &p->creds);
	p->umask = file_peer_umask(s->peer.pid);
	return 0;
}

mode_t file_peer_umask(pid_t pid)
{
	char path[64], line[256];
	mode_t m = 022;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return m;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Umask:", 6) == 0) {
			m = (mode_t)(strtoul(line + 6, NULL, 8) & 0777);
			break;
		}
	}
	fclose(f);
	return m;
}
