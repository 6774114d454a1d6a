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

/* Private per-port state of the client: the port lock that warps contend for,
 * and the client's own copy of its client_seq word (so it never has to read
 * its own word back across the bus). */
struct gpusys_port_lock {
	uint32_t lock;
	uint32_t seq;
};

typedef struct gpusys_dev {
	struct gpusys_channel_header *hdr;  /* shared */
	volatile uint32_t *client_seq;      /* shared, written by this client */
	volatile uint32_t *server_seq;      /* shared, written by the daemon */
	struct gpusys_port *ports;          /* shared */
	struct gpusys_port_lock *locks;     /* private, num_ports entries */
	unsigned long long *submitted;      /* private: requests submitted */
	uint8_t *bulk;                      /* shared bulk area (may be NULL) */
	uint64_t bulk_bytes;
	uint32_t num_ports;
	uint32_t reserved;
} gpusys_dev_t;

#endif /* GPUSYS_DEV_H */
