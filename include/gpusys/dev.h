/* SPDX-License-Identifier: MIT */
/*
 * gpusys_dev_t: what a kernel (or an emulated warp) needs to call gpusysd.
 * The client library fills it in at attach and it is passed to kernels by
 * value. Pointers into the channel are shared with the daemon; locks and the
 * request counter are private to the client (device memory on a GPU).
 */
#ifndef GPUSYS_DEV_H
#define GPUSYS_DEV_H

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/file.h"

struct gpusys_dma;

/* Private per-port state of the client: the port lock that warps contend for,
 * and the client's own copy of its sequence (so it never has to read its own
 * word back across the bus). */
struct gpusys_port_lock {
	uint32_t lock;
	uint32_t seq;
} __attribute__((aligned(8))); /* one 64-bit word (device/lane.h, gpusys_lock_pair_take) */

typedef struct gpusys_dev {
	struct gpusys_channel_header *hdr;  /* shared */
	volatile uint64_t *client_word;     /* shared, written by this client */
	volatile uint64_t *server_word;     /* shared, written by the daemon */
	struct gpusys_port *ports;          /* shared */
	struct gpusys_port_lock *locks;     /* private, num_ports entries */
	unsigned long long *submitted;      /* private: requests submitted */
	uint8_t *bulk;                      /* shared bulk area (may be NULL) */
	uint64_t bulk_bytes;
	uint32_t num_ports;
	uint32_t bulk_slots;                /* gpusys_bulk_slots(bulk_bytes) when bulk_locks is set */
	uint32_t bulk_slot_bytes;           /* gpusys_bulk_slot_bytes(bulk_bytes) */
	int32_t wake_fd;                    /* host clients: the daemon's wake descriptor
					       (wire.h), written when the daemon dozes;
					       -1 on a GPU and where there is none */
	uint32_t *bulk_locks;               /* private, bulk_slots words (NULL: no bulk slots;
					       bulk calls then go through packets) */
	/* Asynchronous calls (port_client.h, "futures"): outstanding futures
	 * per warp slot, private, warp_slots words (NULL: no per-warp count;
	 * every asynchronous call is then made synchronously). */
	uint32_t *warp_futures;
	uint32_t warp_slots;
	/* Stream windows (abi.h): the last num_windows ports stream through
	 * windows[(p - (num_ports - num_windows)) * GPUSYS_WINDOW_BYTES], two
	 * slots of half that (gpusys_port_stream, gpusys_stream_slot). */
	uint32_t num_windows;
	uint8_t *windows;                   /* shared (NULL: none) */
	/* User host callbacks (include/gpusys/callback.h): the handle of the
	 * client's own callback channel, served by libgpusys threads in the
	 * client process (private memory; NULL: none, user opcodes fail with
	 * -ENOSYS). */
	const struct gpusys_dev *callbacks;
	/* Copies by the copy engine (include/gpusys/dma.h): libgpusys's DMA
	 * agent, private memory (NULL: none; the warps copy everything). */
	const struct gpusys_dma *dma;
} gpusys_dev_t;

/* Warp slots an emulated handle counts futures in (a GPU handle has one
 * per hardware warp slot: SMs x 64). */
#define GPUSYS_EMU_WARP_SLOTS 1024u

/* Bytes of private (device) memory a client handle needs: num_ports port
 * locks, the submitted counter, then one lock word per bulk slot, in that
 * order (see gpusys_dev_fill and gpusys_dev_set_bulk_locks). */
static inline uint64_t gpusys_dev_private_bytes(uint32_t num_ports, uint64_t bulk_bytes)
{
	return (uint64_t)num_ports * sizeof(struct gpusys_port_lock) + sizeof(unsigned long long) +
	       (uint64_t)gpusys_bulk_slots(bulk_bytes) * sizeof(uint32_t);
}

#endif /* GPUSYS_DEV_H */
