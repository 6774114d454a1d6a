/* SPDX-License-Identifier: MIT */
/*
 * The host-lane emulator: runs the real client protocol (device/port_client.h)
 * from CPU threads, each thread acting as one warp with any lane mask. It is
 * how the protocol is tested, benchmarked and demonstrated on machines with no
 * GPU; the bytes it puts in the channel are exactly those a warp would.
 *
 * Per-lane arguments are arrays of GPUSYS_WARP_LANES, indexed by lane; only
 * lanes in mask are read or written.
 *
 * The emulator's whole API, apart from the real one (gpusys/gpusys.h does
 * not include it): this header, and at its end the service calls of
 * emulated warps, one header each under gpusys/emulator/ (print, file,
 * socket, alloc).
 */
#ifndef GPUSYS_EMULATOR_H
#define GPUSYS_EMULATOR_H

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "gpusys/device/port_client.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpusys_emu;

/* Build an emulated device handle over a channel mapped at base (the
 * client's mapping). Allocates the private port locks and request counter. */
int gpusys_emu_open(void *channel_base, struct gpusys_emu **ret);
void gpusys_emu_close(struct gpusys_emu *emu);
const gpusys_dev_t *gpusys_emu_dev(const struct gpusys_emu *emu);

/* The user callback server emulated warps call (gpusys_callbacks_emu_dev,
 * include/gpusys/callback.h): it becomes dev->callbacks. NULL: none. */
void gpusys_emu_set_callbacks(struct gpusys_emu *emu, const gpusys_dev_t *callbacks);

/* Which emulated warp this thread is: the port it tries first. */
void gpusys_emu_set_warp(uint32_t warp);

/* Nonzero: every emulated warp publishes a call of heads (abi.h) before
 * its heads' tags, as a GPU may let them land, so that a server's wait for
 * late heads is tested (tests: callback, proto). Off by default. Process
 * wide; set it while no warp calls. */
void gpusys_emu_set_heads_late(int on);

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

/* ------------------------------------------------ asynchronous calls */

/*
 * A future of an emulated warp (device/port_client.h explains the bound and
 * the ports it uses). The per-lane arrays given to gpusys_emu_rpc_async
 * (out, out_cap, out_len, lane_status) must stay valid until the future is
 * finished: the response is written there then.
 */
struct gpusys_emu_future {
	struct gpusys_rpc_pending pd;
	void *const *out;
	const uint32_t *out_cap;
	uint32_t *out_len;
	int32_t *lane_status;
	int rc;      /* the call's result once finished */
	int waited;  /* gpusys_emu_wait_any has returned it */
};

/* Start a call; the arguments are gpusys_emu_rpc's. 0: started (or, at the
 * warp's bound or with no asynchronous port free, already made
 * synchronously: f->pd.sync); the call's own result comes from
 * gpusys_emu_wait. With GPUSYS_REQ_NOREPLY the call is done at return. */
int gpusys_emu_rpc_async(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
			 const void *const in[GPUSYS_WARP_LANES], const uint32_t in_len[GPUSYS_WARP_LANES],
			 void *const out[GPUSYS_WARP_LANES], const uint32_t out_cap[GPUSYS_WARP_LANES],
			 uint32_t out_len[GPUSYS_WARP_LANES], int32_t lane_status[GPUSYS_WARP_LANES],
			 struct gpusys_emu_future *f);

/* 1 when the call is done (its response is then read, the port released),
 * 0 while it is not. Never waits. */
int gpusys_emu_test(const gpusys_dev_t *dev, struct gpusys_emu_future *f);

/* Wait for the call; its result (0 or -errno, as gpusys_emu_rpc). Again on
 * a finished future: the same result. */
int gpusys_emu_wait(const gpusys_dev_t *dev, struct gpusys_emu_future *f);

/* Wait for all n; 0 or the first nonzero result. */
int gpusys_emu_wait_all(const gpusys_dev_t *dev, struct gpusys_emu_future *f, unsigned n);

/* Wait until one of the n not yet returned by this function is done; its
 * index (its result in f[i].rc), or -ENOENT when every one was returned. */
int gpusys_emu_wait_any(const gpusys_dev_t *dev, struct gpusys_emu_future *f, unsigned n);

/* Whether every request submitted through emu so far (asynchronous and
 * fire-and-forget ones included) is complete, without waiting. */
int gpusys_emu_query(const struct gpusys_emu *emu);

#ifdef __cplusplus
}
#endif

/* The services' calls from emulated warps. */
#include "gpusys/emulator/print.h"
#include "gpusys/emulator/file.h"
#include "gpusys/emulator/socket.h"
#include "gpusys/emulator/alloc.h"

#endif /* GPUSYS_EMULATOR_H */
