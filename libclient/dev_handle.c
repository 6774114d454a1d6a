/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

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
	dev->reserved_ = 0;
	dev->callbacks = 0;
}

void gpusys_dev_set_bulk_locks(gpusys_dev_t *dev, uint32_t *bulk_locks)
{
	dev->bulk_locks = dev->bulk ? bulk_locks : 0;
	dev->bulk_slots = dev->bulk_locks ? gpusys_bulk_slots(dev->bulk_bytes) : 0;
	dev->bulk_slot_bytes = dev->bulk_slots ? gpusys_bulk_slot_bytes(dev->bulk_bytes) : 0;
	if (!dev->bulk_slots)
		dev->bulk_locks = 0;
}

/* Few channels per process: a short list. */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const void *base;
	int fd;
} *wake_map;
static size_t wake_n, wake_cap;

void gpusys_wake_fd_set(const void *base, int fd)
{
	pthread_mutex_lock(&wake_lock);
	size_t i = 0;
	while (i < wake_n && wake_map[i].base != base)
		i++;
	if (fd < 0) {
		if (i < wake_n)
			wake_map[i] = wake_map[--wake_n];
	} else if (i < wake_n) {
		wake_map[i].fd = fd;
	} else {
		if (wake_n == wake_cap) {
			size_t cap = wake_cap ? 2 * wake_cap : 4;
			void *m = realloc(wake_map, cap * sizeof(*wake_map));
			if (!m)
				goto out; /* no wake-ups: the daemon's safety rescan still serves */
			wake_map = m;
			wake_cap = cap;
		}
		wake_map[wake_n].base = base;
		wake_map[wake_n].fd = fd;
		wake_n++;
	}
out:
	pthread_mutex_unlock(&wake_lock);
}

int gpusys_wake_fd_of(const void *base)
{
	int fd = -1;
	pthread_mutex_lock(&wake_lock);
	for (size_t i = 0; i < wake_n; i++)
		if (wake_map[i].base == base)
			fd = wake_map[i].fd;
	pthread_mutex_unlock(&wake_lock);
	return fd;
}
