/* SPDX-License-Identifier: MIT */
/*
 * The host-lane emulator: runs the real client protocol (device/port_client.h)
 * from CPU threads, each thread acting as one warp with any lane mask. It is
 * how the protocol is tested, benchmarked and demonstrated on machines with no
 * GPU; the bytes it puts in the channel are exactly those a warp would.
 *
 * Per-lane arguments are arrays of GPUSYS_WARP_LANES, indexed by lane; only
 * lanes in mask are read or written.
 */
#ifndef GPUSYS_EMULATOR_H
#define GPUSYS_EMULATOR_H

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpusys_emu;

/* Build an emulated device handle over a channel mapped at base (the
 * client's mapping). Allocates the private port locks and request counter. */
int gpusys_emu_open(void *channel_base, struct gpusys_emu **ret);
void gpusys_emu_close(struct gpusys_emu *emu);
const gpusys_dev_t *gpusys_emu_dev(const struct gpusys_emu *emu);

/* Which emulated warp this thread is: the port it tries first. */
void gpusys_emu_set_warp(uint32_t warp);

/* Requests submitted through this handle, and the daemon's progress value
 * (requests it has completed on this channel). */
uint64_t gpusys_emu_submitted(const struct gpusys_emu *emu);
uint64_t gpusys_channel_progress(const struct gpusys_channel_header *hdr);

/* Wait until every request submitted so far is complete, up to timeout_ms
 * (-1: no limit). 0, -ETIMEDOUT or -ESHUTDOWN. */
int gpusys_emu_synchronize(const struct gpusys_emu *emu, int timeout_ms);

int gpusys_emu_rpc(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
		   const void *const in[GPUSYS_WARP_LANES], const uint32_t in_len[GPUSYS_WARP_LANES],
		   void *const out[GPUSYS_WARP_LANES], const uint32_t out_cap[GPUSYS_WARP_LANES],
		   uint32_t out_len[GPUSYS_WARP_LANES], int32_t lane_status[GPUSYS_WARP_LANES]);

int gpusys_emu_noop(const gpusys_dev_t *dev, uint64_t mask);

int gpusys_emu_echo(const gpusys_dev_t *dev, uint64_t mask, const void *const in[GPUSYS_WARP_LANES],
		    const uint32_t in_len[GPUSYS_WARP_LANES], void *const out[GPUSYS_WARP_LANES],
		    const uint32_t out_cap[GPUSYS_WARP_LANES], uint32_t out_len[GPUSYS_WARP_LANES],
		    int32_t lane_status[GPUSYS_WARP_LANES]);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_EMULATOR_H */
