/* SPDX-License-Identifier: MIT */
/*
 * Copies by the copy engine for the client's own kernels: the ring between
 * a warp and libgpusys's DMA agent (libclient/dma/), a thread of the
 * client's process that copies with the GPU's copy engine on the warp's
 * behalf.
 *
 * Why: a warp reads pinned host memory at the rate its loads in flight
 * allow, about 1.6 GB/s with the four 16-byte pieces a lane that the call
 * path can hold in registers, and one lane alone at 20-50 MB/s; the copy
 * engine moves 64 KiB for one lane in 16 us and 2 MiB in 76 us (H200,
 * bench/sysmem_read.cu, bench/RESULTS.md "Eighth session"). A response
 * stream's packets (abi.h, windows) are copied into the lanes' buffers this
 * way when the buffers are global memory and the stream is large enough.
 *
 * The ring is private to the client: gpusysd never sees it, so a kernel
 * that scribbles on it can only hurt its own process, and the agent copies
 * only between the handle's channels and memory the driver knows
 * (libclient/dma/dma_agent.c, ask_allowed). A warp takes a
 * ticket (tail), waits until the slot's last ask is done, writes the ask
 * and then its ticket + 1 (release); the agent takes asks in ticket order,
 * starts each copy and, when it finds no more, has its stream write the
 * count of asks taken into `completed` after the copies: a ticket t is done
 * once completed - t - 1 >= 0 (wrapping). An ask the agent cannot start
 * (a bad address) is counted in `failures` and its ticket still completes:
 * the warp compares failures before and after and copies for itself.
 *
 * While the agent has had nothing to do for a while it dozes (awake 0) and
 * looks only now and then; a warp that finds it dozing copies for itself
 * and sets `wanted`, which wakes it within a doze step.
 */
#ifndef GPUSYS_DMA_H
#define GPUSYS_DMA_H

#include <stdint.h>

#include "gpusys/abi.h"

#define GPUSYS_DMA_ASKS 256u /* ring slots, a power of two */

struct gpusys_dma_ask {
	uint64_t src; /* addresses in the client process (unified addressing) */
	uint64_t dst;
	uint64_t len_ticket; /* len | (ticket + 1) << 32, stored last (release):
				the ask is there */
	uint64_t pad;
};

/* Pinned host memory: written by warps, read by the agent (awake and
 * failures the other way). */
struct gpusys_dma_host {
	uint64_t awake;    /* 1 while the agent spins */
	uint64_t pad0[15];
	uint64_t wanted;   /* a warp found the agent dozing */
	uint64_t pad1[15];
	uint64_t failures; /* asks the agent could not start */
	uint64_t pad2[15];
	struct gpusys_dma_ask asks[GPUSYS_DMA_ASKS];
};

/* Private (device memory on a GPU). */
struct gpusys_dma_priv {
	uint32_t tail;      /* tickets taken */
	uint32_t pad[31];
	uint32_t completed; /* written by the agent's stream after the copies */
};

/* What a kernel holds (gpusys_dev_t.dma points at it; device memory on a
 * GPU). */
struct gpusys_dma {
	struct gpusys_dma_host *host;
	struct gpusys_dma_priv *priv;
	uint32_t min_stream_lane; /* gpusys_dma_worth */
	uint32_t min_share_lane;
};

/* The defaults (measured, bench/RESULTS.md "Eighth session"): a copy by
 * the engine costs about 10 us whatever its size, in which a warp of 32
 * lanes reads about 16 KiB of pinned memory, and a lane alone about 500
 * bytes (it copies alone: the warp's loads are shared among the call's
 * lanes); each further copy costs the agent about 2 us, in which 32 lanes
 * read about 3 KiB. Hence per lane of the call: 2 KiB of stream, and
 * shares of 512 bytes on average. */
#define GPUSYS_DMA_MIN_STREAM_LANE 2048u
#define GPUSYS_DMA_MIN_SHARE_LANE 512u
/* No stream below this goes by the copy engine, whatever the settings. */
#define GPUSYS_DMA_MIN_STREAM_FLOOR 4096u
/* A stream goes by the copy engine only while the agent has at most this
 * many asks taken and not done: past it the agent is the bound, and the
 * warps copy faster themselves (H200, 132 warps x 32 x 64 KiB ECHO at
 * once: 5.5-5.7 GB/s each way by the agent, 15-20 GB/s by the warps; one
 * warp alone: 0.98 by the agent, 0.58 by itself; bench/RESULTS.md "Ninth
 * session"). */
#define GPUSYS_DMA_MAX_BACKLOG 8u

/* Whether a stream (a request's or an answer's) of total bytes in shares
 * lanes' shares, in a call of lanes lanes, is worth the copy engine: at
 * least min_stream_lane bytes a lane of the call, and shares that average
 * min_share_lane bytes a lane of the call. */
GPUSYS_ABI_FN int gpusys_dma_worth(const struct gpusys_dma *d, uint64_t total, uint32_t shares, uint32_t lanes)
{
	return total >= GPUSYS_DMA_MIN_STREAM_FLOOR && total >= (uint64_t)lanes * d->min_stream_lane &&
	       total >= (uint64_t)shares * lanes * d->min_share_lane;
}

#endif /* GPUSYS_DMA_H */
