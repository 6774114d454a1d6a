/* SPDX-License-Identifier: MIT */
/* The emulator's bulk loop (device/bulk_client.h), for every service's block
 * calls: file_emu.c's and socket_emu.c's. Private to libclient. */
#ifndef GPUSYS_LIBCLIENT_BULK_EMU_H
#define GPUSYS_LIBCLIENT_BULK_EMU_H

#include <stdint.h>

#include "gpusys/dev.h"
#include "../device/bulk_client.h"

/*
 * Move len bytes between buf and the daemon through a slot of the bulk area
 * (the device must have slots): to_daemon, copy each piece into the slot and
 * then ask; else ask, then copy the piece out. One thread copies and waits
 * in turn, so a whole slot per request. A short piece ends the transfer.
 * Bytes moved, or -errno when the first piece failed. (Named outside the
 * gpusys_emu_ family: libgpusys.map exports that one.)
 */
int64_t gpusys_bulk_emu_move(const gpusys_dev_t *dev, gpusys_bulk_ask_fn ask, const struct gpusys_bulk_ask *a,
			     uint8_t *buf, uint64_t len, int to_daemon);

#endif /* GPUSYS_LIBCLIENT_BULK_EMU_H */
