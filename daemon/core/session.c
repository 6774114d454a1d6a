/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/accounts.h"
#include "gpusys/device/host_sync.h"
#include "util/log.h"
#include "core/gpus.h"
#include "core/handles.h"
#include "core/session.h"

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void owner_ref(void *s)
{
	session_ref(s);
}

static void owner_unref(void *s)
{
	session_unref(s);
}

/* Ring as a client does (port_release_off_poller): a doorbell value no
 * client writes (bit 62; GPU rings stay below it, stream rings use bit 63),
 * new each time, then the wake-up if poller 0 dozes. */
static void owner_rescan(void *arg)
{
	static _Atomic uint64_t rings;
	struct session *s = arg;
	struct gpusys_channel_header *hdr = s->ports.hdr;
	uint64_t v = GPUSYS_RING_HOST | (atomic_fetch_add_explicit(&rings, 1, memory_order_relaxed) & (GPUSYS_RING_HOST - 1));
	__atomic_store_n(&hdr->doorbell, v, __ATOMIC_RELAXED);
	gpusys_host_full_fence();
	if (s->wake && __atomic_load_n(&hdr->dozing, __ATOMIC_RELAXED))
		wake_kick(s->wake);
}

/* What services may know of the client, taken once. The descriptors stay
 * the caller's until the session is made (then they are the session's). */
static void client_fill(struct session *s, const struct session_params *prm)
{
	struct client *c = &s->client;

	c->id = prm->id;
	c->pid = prm->peer->pid;
	memcpy(c->comm, prm->peer->comm, sizeof(c->comm));
	c->creds.uid = prm->peer->uid;
	c->creds.gid = prm->peer->gid;
	/* Groups as they were when the client connected (SO_PEERGROUPS); a
	 * client with more than we can hold gets -EACCES for files. */
	creds_peer_groups(prm->sock, prm->peer->pid, &c->creds);
	c->umask = client_umask_of(prm->peer->pid);
	c->stdout_fd = prm->fds[0];
	c->stderr_fd = prm->fds[1];
	c->cwd_fd = prm->fds[2];
	c->sock = prm->sock;
	c->bulk_bytes = s->chan.layout.bulk_bytes;
	c->bulk = c->bulk_bytes ? (uint8_t *)s->chan.base + s->chan.layout.bulk_offset : NULL;
	c->cuda_device = prm->cuda_device;
	c->client_ordinal = prm->client_ordinal;
	c->gpu = prm->gpu;
	c->account = account_get(c->creds.uid);
}

/* The client's handle table, before any service takes it: an adopted
 * channel's handles start past the old daemon's (read once; a client that
 * spoiled the word only spoils its own handles). */
static int handles_open(struct session *s, const struct session_params *prm)
{
	struct gpusys_channel_header *hdr = s->chan.base;
	uint32_t start = prm->adopted ? __atomic_load_n(&hdr->handle_gen_floor, __ATOMIC_RELAXED) : 1;
	s->handles = handle_table_open(&s->client, start, &hdr->handle_gen_floor);
	return s->handles ? 0 : -ENOMEM;
}

mode_t client_umask_of(pid_t pid)
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

/* session_create's work: s freed on failure. */
static int session_build(struct session *s, const struct session_params *prm)
{
	int r;
	s->wake_wfd = -1;
	s->wakec.rfd = -1;

	if (prm->adopted) {
		/* The daemon's words of the header are ours again: the new
		 * id, nobody dozing. server_state stays HANDOVER until the
		 * caller serves it (channel_mark_running). */
		s->chan = *prm->adopted;
		struct gpusys_channel_header *hdr = s->chan.base;
		hdr->client_id = prm->id;
		hdr->dozing = 0;
	} else {
		r = channel_create(&s->chan, prm->ops, prm->num_ports, prm->bulk_bytes, prm->id,
				   prm->gpu ? prm->gpu->numa_node : -1);
		if (r < 0)
			goto fail;
	}
	client_fill(s, prm);
	/* The channel is the user's too: the client can make every page of it
	 * resident (a CUDA client pins it), for as long as it is attached.
	 * Counted apart from user_mem_budget, as channels are sized apart. */
	if (!account_charge(s->client.account, ACCOUNT_CHANNEL, s->chan.bytes)) {
		if (prm->why)
			snprintf(prm->why, prm->why_len,
				 "uid %u: user_channel_bytes exhausted: its clients' channels leave no room for "
				 "this one's %llu KiB",
				 (unsigned)s->client.creds.uid, (unsigned long long)(s->chan.bytes >> 10));
		r = -ENOMEM;
		goto fail;
	}
	s->chan_charged = s->chan.bytes;
	r = handles_open(s, prm);
	if (r < 0)
		goto fail;
	r = port_table_init(&s->ports, s->chan.base, prm->num_ports, &s->client, prm->mem_budget);
	if (r < 0)
		goto fail;
	s->ports.owner = (struct port_table_owner){ .ref = owner_ref, .unref = owner_unref, .rescan = owner_rescan, .owner = s };
	if (prm->max_pending_calls)
		s->ports.later_max = prm->max_pending_calls;
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
	return 0;
fail:
	handle_table_release(s->handles);
	channel_destroy(&s->chan);
	account_uncharge(s->client.account, ACCOUNT_CHANNEL, s->chan_charged);
	account_put(s->client.account); /* NULL before client_fill */
	free(s);
	return r;
}

int session_create(const struct session_params *prm, struct session **ret)
{
	struct session *s = calloc(1, sizeof(*s));
	int r;

	if (!s) {
		if (prm->adopted)
			channel_destroy(prm->adopted);
		return -ENOMEM;
	}
	atomic_init(&s->refs, 1);
	s->id = prm->id;
	s->peer = *prm->peer;
	clock_gettime(CLOCK_MONOTONIC, &s->attached);
	s->chan.fd = -1;
	s->retired_requests = prm->retired_requests;
	s->pollers = prm->pollers;
	bool cuda = s->cuda = prm->cuda_device >= 0;
	/* A CUDA client's channel and doorbell watch are made with CUDA
	 * calls that another GPU's pending doorbell wait could stall
	 * (wake.h): none is pending while they run. */
	if (cuda)
		wake_gpu_hold();
	r = session_build(s, prm); /* frees s on failure */
	if (cuda)
		wake_gpu_unhold();
	if (r < 0)
		return r;
	*ret = s;
	return 0;
}

struct wake_chan *session_wake_of_table(struct port_table *t)
{
	struct session *s = t->owner.owner;
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
	handle_table_release(s->handles); /* after the services let go of it */
	bool mem_free = true;
	/* Unmapping a CUDA client's channel and ending its watch: CUDA calls
	 * that another GPU's pending doorbell wait could stall (wake.h). */
	if (s->cuda)
		wake_gpu_hold();
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
	if (s->cuda)
		wake_gpu_unhold();
	close_fd(&s->client.stdout_fd);
	close_fd(&s->client.stderr_fd);
	close_fd(&s->client.cwd_fd);
	close_fd(&s->client.sock);
	account_uncharge(s->client.account, ACCOUNT_CHANNEL, s->chan_charged);
	account_put(s->client.account);
	free(s);
}

/* Sessions whose last reference went on another thread, for the main one. */
struct reaper {
	pthread_mutex_t mu;
	struct session *head; /* linked through next */
	struct event *ev;
	pthread_t main_thread;
};

static struct reaper reaper = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void reap(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	pthread_mutex_lock(&reaper.mu);
	struct session *s = reaper.head;
	reaper.head = NULL;
	pthread_mutex_unlock(&reaper.mu);
	while (s) {
		struct session *next = s->next;
		session_free(s);
		s = next;
	}
}

int session_reaper_start(struct event_base *base)
{
	reaper.ev = event_new(base, -1, 0, reap, NULL);
	if (!reaper.ev)
		return -ENOMEM;
	reaper.main_thread = pthread_self();
	return 0;
}

void session_reaper_stop(void)
{
	pthread_mutex_lock(&reaper.mu);
	struct event *ev = reaper.ev;
	reaper.ev = NULL;
	pthread_mutex_unlock(&reaper.mu);
	reap(-1, 0, NULL);
	if (ev)
		event_free(ev);
}

void session_unref(struct session *s)
{
	/* acq_rel: the thread that frees must see every other thread's
	 * writes made before its unref. */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_mutex_lock(&reaper.mu);
	if (reaper.ev && !pthread_equal(pthread_self(), reaper.main_thread)) {
		s->next = reaper.head; /* off the registry already: the list link is free */
		reaper.head = s;
		event_active(reaper.ev, 0, 0);
		pthread_mutex_unlock(&reaper.mu);
		return;
	}
	pthread_mutex_unlock(&reaper.mu);
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
