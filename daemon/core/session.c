/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "core/session.h"

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int session_create(const struct session_params *prm, struct session **ret)
{
	struct session *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	atomic_init(&s->refs, 1);
	s->id = prm->id;
	s->peer = *prm->peer;
	s->cuda_device = prm->cuda_device;
	clock_gettime(CLOCK_MONOTONIC, &s->attached);
	s->sock = -1;
	s->stdout_fd = s->stderr_fd = s->cwd_fd = -1;
	s->chan.fd = -1;
	s->retired_requests = prm->retired_requests;
	s->wake_wfd = -1;
	s->wakec.rfd = -1;

	r = channel_create(&s->chan, prm->ops, prm->num_ports, prm->bulk_bytes, prm->id);
	if (r < 0)
		goto fail;
	r = port_table_init(&s->ports, s->chan.base, prm->num_ports, s, prm->mem_budget);
	if (r < 0)
		goto fail;
	s->ports_ready = true;
	if (prm->wake) {
		r = wake_chan_open(prm->wake, &s->wakec, s->id, &s->wake_wfd);
		if (r < 0) {
			port_table_fini(&s->ports);
			goto fail;
		}
		s->wake = prm->wake;
		if (prm->cuda_device >= 0)
			wake_gpu_open(prm->wake, &s->wakec, &s->chan, prm->cuda_device);
	}
	s->stdout_fd = prm->fds[0];
	s->stderr_fd = prm->fds[1];
	s->cwd_fd = prm->fds[2];
	*ret = s;
	return 0;
fail:
	channel_destroy(&s->chan);
	free(s);
	return r;
}

struct wake_chan *session_wake_of_table(struct port_table *t)
{
	struct session *s = t->owner;
	return s && s->wake ? &s->wakec : NULL;
}

void session_ref(struct session *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static void session_free(struct session *s)
{
	/* Clients see STOPPED before the port table goes: a warp still
	 * spinning on a port gives up instead of waiting forever. */
	channel_mark_stopped(&s->chan);
	if (s->retired_requests)
		atomic_fetch_add_explicit(s->retired_requests, session_requests(s), memory_order_relaxed);
	if (s->ports_ready)
		port_table_fini(&s->ports);
	bool mem_free = true;
	if (s->wake) {
		/* No GPU wait of ours may read the channel once it is gone. */
		mem_free = wake_gpu_close(&s->wakec, &s->chan);
		wake_chan_close(s->wake, &s->wakec);
	}
	close_fd(&s->wake_wfd);
	if (mem_free)
		channel_destroy(&s->chan);
	else
		close_fd(&s->chan.fd); /* the memory stays mapped (wake_cuda.c says why) */
	close_fd(&s->stdout_fd);
	close_fd(&s->stderr_fd);
	close_fd(&s->cwd_fd);
	close_fd(&s->sock);
	free(s);
}

void session_unref(struct session *s)
{
	/* acq_rel: the thread that frees must see every other thread's
	 * writes made before its unref. */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		session_free(s);
}

uint32_t session_ports_in_use(const struct session *s)
{
	const struct port_table *t = &s->ports;
	uint32_t n = 0;

	if (!s->ports_ready)
		return 0;
	for (uint32_t p = 0; p < t->num_ports; p++)
		n += port_in_use(t, p);
	return n;
}

void peer_set_comm(struct peer *p, const char *name, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && name[i] && o < sizeof(p->comm) - 1; i++) {
		unsigned char c = (unsigned char)name[i];
		p->comm[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	p->comm[o] = 0;
}

int peer_comm_from_proc(struct peer *p)
{
	char path[64], buf[64];

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)p->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return -e;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == 0))
		n--;
	peer_set_comm(p, buf, (size_t)n);
	return 0;
}
