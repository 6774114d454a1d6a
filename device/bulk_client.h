/* SPDX-License-Identifier: MIT */
/*
 * The client side of bulk transfers, for every service that moves data
 * through the channel's bulk area (files: BULK_PREAD/BULK_PWRITE; sockets:
 * BULK_SEND/BULK_RECV), written once for nvcc and the host compiler like
 * port_client.h.
 *
 * A bulk transfer locks a slot of the bulk area (private lock words: device
 * memory on a GPU), then asks the daemon, one request per piece, to move
 * count bytes between the service's object and a range of that slot. Each
 * request is a value call from one lane alone: the service packs its own
 * 48-byte header naming the range (file_client.h, sock_client.h) and
 * gpusys_bulk_call() sends it and reads the value. The loops around the
 * requests are the GPU's block loop (bulk_block.cuh: all threads of a block
 * copy while thread 0 asks) and the emulator's (libclient/emulator/bulk_emu.c: the
 * calling thread copies, then asks).
 */
#ifndef GPUSYS_BULK_CLIENT_H
#define GPUSYS_BULK_CLIENT_H

#include <stdint.h>

#include "port_client.h"

/* One element a lane on the GPU, one a lane of the warp on the host. */
#define GPUSYS_LANE_ARRAY (GPUSYS_LI(GPUSYS_WARP_LANES - 1) + 1)

/*
 * What a block transfer asks the daemon for, piece after piece. A service
 * reads the fields it knows: op and handle always; files the offset of the
 * transfer's first byte (-1: the handle's position), sockets the MSG_* flags.
 */
struct gpusys_bulk_ask {
	uint16_t op;
	int32_t handle;
	int32_t flags;
	int64_t off;
};

/* A service's request for one piece: count bytes, done bytes into the
 * transfer, through [bulk_off, bulk_off + count) of the bulk area. Bytes
 * moved or -errno. Defined with GPUSYS_BULK_ASK_FN: out of line on the GPU,
 * so that the request's registers (the port protocol's: about 64) are not
 * added to those of the copy loops around it (bulk_block.cuh). */
typedef int64_t (*gpusys_bulk_ask_fn)(const gpusys_dev_t *dev, const struct gpusys_bulk_ask *a, uint64_t done,
				      uint64_t count, uint64_t bulk_off);
#if defined(__CUDACC__)
#define GPUSYS_BULK_ASK_FN static __device__ __noinline__
#else
#define GPUSYS_BULK_ASK_FN static inline
#endif

/*
 * One value call from the calling lane alone (thread 0 of a block, or the
 * emulator's thread): hdr is the packed request (hdr_len bytes, the
 * service's header naming a range of the bulk area). The daemon's value
 * (bytes moved) or -errno; -ESHUTDOWN when the daemon has gone.
 */
GPUSYS_FN int64_t gpusys_bulk_call(const gpusys_dev_t *dev, uint16_t op, const void *hdr, uint32_t hdr_len)
{
	const void *in[GPUSYS_LANE_ARRAY];
	uint32_t in_len[GPUSYS_LANE_ARRAY], cap[GPUSYS_LANE_ARRAY], got[GPUSYS_LANE_ARRAY];
	void *out[GPUSYS_LANE_ARRAY];
	int32_t st[GPUSYS_LANE_ARRAY];
	uint32_t tries = 0;

	for (;;) {
		int64_t val = 0;
		in[0] = hdr;
		in_len[0] = hdr_len;
		out[0] = &val;
		cap[0] = (uint32_t)sizeof(val);
		got[0] = 0;
		st[0] = 0;
		int rc = gpusys_rpc(dev, op, 0, 1u, in, in_len, out, cap, got, st);
		int64_t r = rc ? rc : st[0] < 0 ? st[0] : val;
		if (r != GPUSYS_STATUS_NO_ROOM)
			return r;
		/* nothing ran: again, once the budget has room (abi.h) */
		int w = gpusys_no_room_pause(&tries);
		if (w)
			return w;
	}
}

/* Lock a bulk slot (private lock words), starting at hint. Returns the
 * slot. A holder never waits for anything but the daemon, so spinning here
 * cannot deadlock. */
GPUSYS_FN uint32_t gpusys_bulk_slot_lock(const gpusys_dev_t *dev, uint32_t hint)
{
	uint32_t n = dev->bulk_slots, s = hint % n;
	for (uint32_t tries = 1;; tries++) {
		if (gpusys_lock_try(&dev->bulk_locks[s]))
			return s;
		s = s + 1 == n ? 0 : s + 1;
		if (tries % n == 0)
			gpusys_pass_pause(tries / n - 1); /* as the port locks (lane.h) */
	}
}

GPUSYS_FN void gpusys_bulk_slot_unlock(const gpusys_dev_t *dev, uint32_t s)
{
	gpusys_lock_release(&dev->bulk_locks[s]);
}

#endif /* GPUSYS_BULK_CLIENT_H */
