/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "dev_handle.h"

int gpusys_channel_check(const struct gpusys_channel_header *hdr, uint64_t mapped_bytes)
{
	if (mapped_bytes < sizeof(*hdr) || hdr->magic != GPUSYS_CHANNEL_MAGIC ||
	    hdr->abi_version != GPUSYS_ABI_VERSION)
		return -EPROTO;
	if (hdr->num_ports < GPUSYS_MIN_PORTS || hdr->num_ports > GPUSYS_MAX_PORTS)
		return -EPROTO;
	struct gpusys_channel_layout l = gpusys_channel_layout(hdr->num_ports, hdr->bulk_bytes, 1);
	if (hdr->client_word_offset != l.client_word_offset || hdr->server_word_offset != l.server_word_offset ||
	    hdr->ports_offset != l.ports_offset || hdr->bulk_offset != l.bulk_offset ||
	    hdr->window_offset != l.window_offset || hdr->num_windows != l.num_windows ||
	    hdr->window_bytes != GPUSYS_WINDOW_BYTES ||
	    hdr->bulk_offset + hdr->bulk_bytes > mapped_bytes || hdr->total_bytes > mapped_bytes ||
	    l.bulk_offset + l.bulk_bytes > hdr->total_bytes)
		return -EPROTO;
	return 0;
}

void gpusys_dev_fill(gpusys_dev_t *dev, void *base, const struct gpusys_channel_header *hdr,
		     struct gpusys_port_lock *locks, unsigned long long *submitted)
{
	uint8_t *b = base;

	dev->hdr = base;
	dev->client_word = (volatile uint64_t *)(b + hdr->client_word_offset);
	dev->server_word = (volatile uint64_t *)(b + hdr->server_word_offset);
	dev->ports = (struct gpusys_port *)(b + hdr->ports_offset);
	dev->locks = locks;
	dev->submitted = submitted;
	dev->bulk = hdr->bulk_bytes ? b + hdr->bulk_offset : 0;
	dev->bulk_bytes = hdr->bulk_bytes;
	dev->num_ports = hdr->num_ports;
	dev->bulk_slots = 0;
	dev->bulk_slot_bytes = 0;
	dev->wake_fd = -1;
	dev->bulk_locks = 0;
	dev->warp_futures = 0;
	dev->warp_slots = 0;
	dev->num_windows = hdr->num_windows;
	dev->windows = hdr->num_windows ? b + hdr->window_offset : 0;
	dev->callbacks = 0;
}

void gpusys_dev_set_bulk_locks(gpusys_dev_t *dev, uint32_t *bulk_locks, uint64_t slot_bytes)
{
	if (!slot_bytes) {
		const char *v = getenv("GPUSYS_BULK_SLOT_BYTES");
		slot_bytes = v ? strtoull(v, NULL, 0) : 0;
	}
	if (!slot_bytes && dev->bulk_bytes >= 2 * GPUSYS_BULK_PREFERRED_SLOT_BYTES)
		slot_bytes = GPUSYS_BULK_PREFERRED_SLOT_BYTES;
	/* Never smaller than the default: bulk_locks holds gpusys_bulk_slots()
	 * words, the count at the default size. */
	slot_bytes = gpusys_bulk_slot_size(slot_bytes);
	dev->bulk_locks = dev->bulk ? bulk_locks : 0;
	dev->bulk_slots = dev->bulk_locks ? gpusys_bulk_slots_of(dev->bulk_bytes, slot_bytes) : 0;
	dev->bulk_slot_bytes = dev->bulk_slots ? gpusys_bulk_slot_bytes_of(dev->bulk_bytes, slot_bytes) : 0;
	if (!dev->bulk_slots)
		dev->bulk_locks = 0;
}

/* ------------------------------------------------- attached channels */

/*
 * The channels this process has attached, by mapping address: their wake
 * descriptor (emulated warps ring a dozing daemon with it) and their
 * connection to the daemon, which a watchdog thread watches for emulated
 * clients.
 *
 * Watchdog: a warp spinning on a port cannot learn that the daemon died (a
 * dead daemon writes nothing). The first gpusys_emu_open over a channel
 * starts one thread that sleeps in poll() on the connection (no CPU while
 * idle) and, when the daemon hangs up, re-offers the channel to the next
 * daemon if it was handed over for a restart (gpusys_client_reconnect,
 * docs/RESTART.md), and otherwise writes client_host_state = ABORT in
 * the channel: spinning warps then return -ESHUTDOWN within
 * GPUSYS_SPIN_CHECK_EVERY polls, as the CUDA path's watchdog makes kernels
 * do (libclient/attach/cuda.c). The thread belongs to the attachment: detach stops
 * and joins it before the channel is unmapped.
 */
struct watched {
	void *base;
	int wake_fd;
	int sock_fd;
	int stop[2]; /* pipe: detach writes, the watchdog wakes and ends */
	pthread_t thread;
	int running;
	pid_t owner; /* the process that started the thread (a forked child has none) */
	gpusys_reconnect_fn reconnect; /* a re-offer after a restart, or NULL */
	void *reconnect_ctx;
	struct watched *next;
};

/* Few channels per process: a short list. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct watched *list;

static struct watched **find(const void *base)
{
	struct watched **w = &list;
	while (*w && (*w)->base != base)
		w = &(*w)->next;
	return w;
}

int gpusys_channel_register(void *base, int wake_fd, int sock_fd, gpusys_reconnect_fn reconnect, void *ctx)
{
	struct watched *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->base = base;
	w->wake_fd = wake_fd;
	w->sock_fd = sock_fd;
	w->reconnect = reconnect;
	w->reconnect_ctx = ctx;
	w->stop[0] = w->stop[1] = -1;
	pthread_mutex_lock(&lock);
	w->next = list;
	list = w;
	pthread_mutex_unlock(&lock);
	return 0;
}

void gpusys_channel_unregister(const void *base)
{
	pthread_mutex_lock(&lock);
	struct watched **pw = find(base), *w = *pw;
	if (w)
		*pw = w->next;
	pthread_mutex_unlock(&lock);
	if (!w)
		return;
	/* In a child forked after the start, the thread is the parent's:
	 * nothing to stop or join here. */
	if (w->running && w->owner == getpid()) {
		char c = 0;
		if (write(w->stop[1], &c, 1) < 0) {
		}
		pthread_join(w->thread, NULL);
	}
	if (w->stop[0] >= 0)
		close(w->stop[0]);
	if (w->stop[1] >= 0)
		close(w->stop[1]);
	free(w);
}

int gpusys_wake_fd_of(const void *base)
{
	pthread_mutex_lock(&lock);
	struct watched *w = *find(base);
	int fd = w ? w->wake_fd : -1;
	pthread_mutex_unlock(&lock);
	return fd;
}

int gpusys_watch_connection(int sock_fd, int stop_fd, gpusys_reconnect_fn reconnect, void *ctx)
{
	struct pollfd p[2] = {
		{ .fd = sock_fd, .events = POLLRDHUP },
		{ .fd = stop_fd, .events = POLLIN },
	};
	for (;;) {
		int n = poll(p, 2, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || p[1].revents)
			return 0; /* detach */
		if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
			/* A restart that handed the channel over: give it to
			 * the next daemon; the connection keeps its number. */
			int r = reconnect ? reconnect(ctx, stop_fd) : -ESHUTDOWN;
			if (r == 0)
				continue;
			if (r == -ECANCELED)
				return 0; /* detach */
			return -1;
		}
	}
}

static void *watchdog_main(void *arg)
{
	struct watched *w = arg;
	if (gpusys_watch_connection(w->sock_fd, w->stop[0], w->reconnect, w->reconnect_ctx) < 0) {
		struct gpusys_channel_header *h = w->base;
		__atomic_store_n(&h->client_host_state, GPUSYS_CLIENT_HOST_ABORT, __ATOMIC_RELEASE);
	}
	return NULL;
}

int gpusys_channel_watch(const void *base)
{
	int r = 0;

	pthread_mutex_lock(&lock);
	struct watched *w = *find(base);
	if (!w || w->running || w->sock_fd < 0)
		goto out; /* not attached here (a test's own mapping) or watched */
	if (pipe2(w->stop, O_CLOEXEC) < 0) {
		r = -errno;
		goto out;
	}
	r = -pthread_create(&w->thread, NULL, watchdog_main, w);
	if (r < 0) {
		close(w->stop[0]);
		close(w->stop[1]);
		w->stop[0] = w->stop[1] = -1;
		goto out;
	}
	w->running = 1;
	w->owner = getpid();
out:
	pthread_mutex_unlock(&lock);
	return r;
}
