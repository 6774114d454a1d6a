/* SPDX-License-Identifier: MIT */
/* Filling a gpusys_dev_t from a mapped channel (shared by the emulator and
 * the CUDA path, which pass the base address as the device sees it). */
#ifndef GPUSYS_DEV_HANDLE_H
#define GPUSYS_DEV_HANDLE_H

#include "gpusys/dev.h"

/* Check a channel header against the layout its port count implies.
 * 0 or -EPROTO. */
int gpusys_channel_check(const struct gpusys_channel_header *hdr, uint64_t mapped_bytes);

/* base: the channel as the code using dev will address it; hdr: the header
 * as this process can read it now. */
void gpusys_dev_fill(gpusys_dev_t *dev, void *base, const struct gpusys_channel_header *hdr,
		     struct gpusys_port_lock *locks, unsigned long long *submitted);

#endif
