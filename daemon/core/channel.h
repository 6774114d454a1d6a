/* SPDX-License-Identifier: MIT */
/*
 * A client's channel memory: allocated by a backend (memfd today; CUDA VMM
 * later, in channel_cuda.c), shared with the client as one descriptor, and
 * mapped here. The header fill and the stop marking are common to all
 * backends.
 */
#ifndef GPUSYSD_CHANNEL_H
#define GPUSYSD_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gpusys/abi.h"

struct channel;

struct channel_ops {
	const char *name;
	uint32_t memory_kind; /* enum gpusys_memory_kind carried in the welcome */
	/* Allocate and map the memory for num_ports/bulk_bytes: fill ch->layout
	 * (with the backend's granularity), ch->base, ch->bytes, ch->fd (the
	 * descriptor sent to the client). Memory reads as zero. 0 or -errno;
	 * on failure nothing is left allocated. */
	int (*alloc)(struct channel *ch, uint32_t num_ports, uint64_t bulk_bytes);
	/* Unmap and release everything alloc made. */
	void (*free)(struct channel *ch);
};

struct channel {
	const struct channel_ops *ops;
	struct gpusys_channel_layout layout;
	void *base;    /* our mapping */
	uint64_t bytes;
	int fd;        /* shareable descriptor, owned by the channel */
	uint32_t num_ports;
	int numa_node; /* host node to place the memory on, or -1: anywhere */
	void *priv;    /* backend's own state */
	/* Handed over to the next daemon (docs/RESTART.md): its server_state
	 * says HANDOVER and stays so; nothing marks it STOPPED any more. */
	bool handover;
};

extern const struct channel_ops channel_memfd_ops;

/* CUDA VMM backend (channel_cuda.c): the backend for a client of a GPU that
 * can import it, or NULL (no CUDA, no such GPU, the client prefers memfd). */
const struct channel_ops *channel_cuda_pick(int32_t cuda_device, uint32_t memory_kinds);

/* The kind a CUDA client that can import both gets (GPUSYS_MEMORY_MEMFD or
 * _CUDA_VMM; the cuda_memory setting). Before the first client. */
void channel_cuda_prefer(uint32_t kind);

/* The backend for a client: cuda_device and the memory kinds it can import
 * (hello fields). NULL if no backend fits. */
const struct channel_ops *channel_pick(int32_t cuda_device, uint32_t memory_kinds);

/* Map a channel memfd a client re-offers after a restart (docs/RESTART.md),
 * if it is sealed, its header and size match the layout of its port count,
 * it has at most max_ports ports and max_bulk bulk bytes, belonged to
 * old_id and its server_state is HANDOVER. On success ch owns fd (and the
 * header is left as it is: the caller writes RUNNING when it serves it);
 * on failure msg says why and fd is still the caller's. 0 or -errno. */
int channel_memfd_adopt(struct channel *ch, int fd, uint32_t max_ports, uint64_t max_bulk, uint32_t old_id,
			char *msg, size_t msglen);

/* Allocate through ops and write the header (magic, offsets, client_id,
 * server_state = RUNNING), on host NUMA node numa_node where the backend can
 * (the client's GPU's node; -1: anywhere). 0 or -errno; ch is untouched on
 * failure. */
int channel_create(struct channel *ch, const struct channel_ops *ops, uint32_t num_ports, uint64_t bulk_bytes,
		   uint32_t client_id, int numa_node);

static inline struct gpusys_channel_header *channel_header(const struct channel *ch)
{
	return (struct gpusys_channel_header *)ch->base;
}

/* Tell the client's code no request will be served any more. */
void channel_mark_stopped(struct channel *ch);
/* A drained channel goes to the next daemon: server_state = HANDOVER, and
 * from now on channel_mark_stopped leaves it so (docs/RESTART.md). */
void channel_mark_handover(struct channel *ch);
/* An adopted channel is served: server_state = RUNNING. */
void channel_mark_running(struct channel *ch);

/* Mark stopped, then release. Safe on a zeroed channel. */
void channel_destroy(struct channel *ch);

#endif
