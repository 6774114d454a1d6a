/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "dev_handle.h"

int gpusys_channel_check(const struct gpusys_channel_header *hdr, uint64_t mapped_bytes)
{
	if (mapped_bytes < sizeof(*hdr) || hdr->magic != GPUSYS_CHANNEL_MAGIC ||
	    hdr->abi_version != GPUSYS_ABI_VERSION)
		return -EPROTO;
	if (hdr->num_ports < GPUSYS_MIN_PORTS || hdr->num_ports > GPUSYS_MAX_PORTS)
		return -EPROTO;
	struct gpusys_channel_layout l = gpusys_channel_layout(hdr->num_ports, hdr->bulk_bytes, 1);
	if (hdr->client_seq_offset != l.client_seq_offset || hdr->server_seq_offset != l.server_seq_offset ||
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
	dev->client_seq = (volatile uint32_t *)(b + hdr->client_seq_offset);
	dev->server_seq = (volatile uint32_t *)(b + hdr->server_seq_offset);
	dev->ports = (struct gpusys_port *)(b + hdr->ports_offset);
	dev->locks = locks;
	dev->submitted = submitted;
	dev->bulk = hdr->bulk_bytes ? b + hdr->bulk_offset : 0;
	dev->bulk_bytes = hdr->bulk_bytes;
	dev->num_ports = hdr->num_ports;
	dev->reserved = 0;
}
