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

/* Give dev its bulk slot locks: gpusys_bulk_slots(dev->bulk_bytes) zeroed
 * words of private memory (device memory for a GPU), the last part of
 * gpusys_dev_private_bytes(). Without them bulk calls use packets.
 * slot_bytes: the division of the area (gpusys_options.bulk_slot_bytes; 0:
 * $GPUSYS_BULK_SLOT_BYTES, else GPUSYS_BULK_PREFERRED_SLOT_BYTES where the
 * area holds two, else GPUSYS_BULK_SLOT_BYTES). */
void gpusys_dev_set_bulk_locks(gpusys_dev_t *dev, uint32_t *bulk_locks, uint64_t slot_bytes);

/* The channels of this process's attachments (dev_handle.c): the attach
 * registers each mapping with its wake descriptor and its connection to the
 * daemon, and unregisters it (stopping its watchdog) before unmapping it.
 * 0 or -ENOMEM (then emulated warps over it neither ring nor are watched). */
/* reconnect(ctx, stop_fd): the watchdog's re-offer after a daemon restart
 * (gpusys_client_reconnect, libclient/attach/client.h), or NULL. A pointer, so
 * that programs linking the emulator without the attach code (in-process
 * tests) need none. */
typedef int (*gpusys_reconnect_fn)(void *ctx, int stop_fd);

/* A watchdog's loop (both kinds of attachment): wait on the daemon
 * connection sock_fd until stop_fd is readable (the detach: returns 0) or
 * the connection ends; then re-offer the channel with reconnect (NULL: no
 * re-offer) and go on watching if that worked. Returns -1 when the daemon is
 * gone for good: the caller marks the channel aborted. */
int gpusys_watch_connection(int sock_fd, int stop_fd, gpusys_reconnect_fn reconnect, void *ctx);
int gpusys_channel_register(void *base, int wake_fd, int sock_fd, gpusys_reconnect_fn reconnect, void *ctx);
void gpusys_channel_unregister(const void *base);

/* The wake descriptor that goes with the channel mapped at base, so
 * emulated warps wake a dozing daemon (common/wire.h). -1: none
 * known. */
int gpusys_wake_fd_of(const void *base);

/* Start the watchdog of the channel mapped at base, once: when the daemon
 * hangs up, it re-offers the channel if the daemon handed it over for a
 * restart (warps wait meanwhile), else (or when no daemon takes it) sets
 * client_host_state = ABORT, and warps waiting on the daemon return
 * -ESHUTDOWN. 0 (also for a channel not registered) or
 * -errno. */
int gpusys_channel_watch(const void *base);

#endif
