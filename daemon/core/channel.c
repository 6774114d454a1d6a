/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/wire.h"
#include "gpusys/device/host_sync.h"
#include "core/channel.h"

const struct channel_ops *channel_pick(int32_t cuda_device, uint32_t memory_kinds)
{
	/* The CUDA backend decides for GPU clients (memfd is its default,
	 * VMM on request); memfd works for everyone else, GPU clients
	 * included (they cuMemHostRegister it). */
	const struct channel_ops *ops = channel_cuda_pick(cuda_device, memory_kinds);
	if (ops)
		return ops;
	if (memory_kinds & (1u << GPUSYS_MEMORY_MEMFD))
		return &channel_memfd_ops;
	return NULL;
}

int channel_create(struct channel *ch, const struct channel_ops *ops, uint32_t num_ports, uint64_t bulk_bytes,
		   uint32_t client_id, int numa_node)
{
	struct channel c = { .ops = ops, .fd = -1, .num_ports = num_ports, .numa_node = numa_node };

	int r = ops->alloc(&c, num_ports, bulk_bytes);
	if (r < 0)
		return r;

	/* The memory is not shared yet (the client gets it with the
	 * welcome), so plain stores are enough. */
	gpusys_channel_format(c.base, num_ports, &c.layout, client_id);
	*ch = c;
	return 0;
}

void channel_mark_stopped(struct channel *ch)
{
	if (!ch->base || ch->handover)
		return;
	/* Everything we wrote before (responses, progress) stays visible to a
	 * client that sees STOPPED. */
	gpusys_host_release_before(&channel_header(ch)->server_state);
	__atomic_store_n(&channel_header(ch)->server_state, GPUSYS_SERVER_STOPPED, __ATOMIC_RELAXED);
}

void channel_destroy(struct channel *ch)
{
	if (!ch->ops)
		return;
	channel_mark_stopped(ch);
	ch->ops->free(ch);
	memset(ch, 0, sizeof(*ch));
	ch->fd = -1;
}

void channel_mark_handover(struct channel *ch)
{
	if (!ch->base)
		return;
	/* Every answer and progress word we wrote is visible to a client
	 * that sees HANDOVER (it re-offers the channel on that word). */
	atomic_thread_fence(memory_order_release);
	channel_header(ch)->server_state = GPUSYS_SERVER_HANDOVER;
	ch->handover = true;
}

void channel_mark_running(struct channel *ch)
{
	atomic_thread_fence(memory_order_release);
	channel_header(ch)->server_state = GPUSYS_SERVER_RUNNING;
}
