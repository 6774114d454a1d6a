/* SPDX-License-Identifier: MIT */
/*
 * libgpusys's DMA agent: the thread that serves the DMA ring of
 * include/gpusys/dma.h, copying on the warps' behalf with an engine: CUDA's
 * copy engine for a GPU (dma_cuda.c), memcpy for emulated warps.
 */
#ifndef GPUSYS_DMA_AGENT_H
#define GPUSYS_DMA_AGENT_H

#include <stdint.h>

#include "gpusys/dma.h"

/* One copy of a batch. */
struct gpusys_dma_copy {
	uint64_t dst, src;
	uint32_t len;
};

/* The two ways a copy goes, each batched on its own (the copy engine moves
 * a batch of one way at the link's speed, 47-51 GB/s for 64 KiB copies on
 * an H200, but a stream that mixes them at 12-14 GB/s: bench/dma_submit.c,
 * bench/RESULTS.md "Ninth session"). */
enum gpusys_dma_way {
	GPUSYS_DMA_INTO_CHANNEL,  /* a request's packet, from the kernel's buffers */
	GPUSYS_DMA_OUT_OF_CHANNEL, /* an answer's, into them */
	GPUSYS_DMA_WAYS
};

/* At most this many copies a batch: the agent starts a way's batch when
 * it is full or when no more asks are there. */
#define GPUSYS_DMA_BATCH_MAX 64u

struct gpusys_dma_engine {
	void *ctx;
	/* Runs first on the agent's thread (CUDA: make the context current);
	 * NULL: nothing. 0 or -errno (the agent then stops, awake stays 0). */
	int (*thread_start)(void *ctx);
	/* Whether [addr, addr + len) is memory the engine may copy to or from
	 * on a kernel's word (CUDA: memory the driver knows, not the process's
	 * pageable memory); NULL: any. The other side of every copy is in a
	 * channel the agent was given (gpusys_dma_agent_allow). */
	int (*buffer_ok)(void *ctx, uint64_t addr, uint32_t len);
	/* Start n (1 .. GPUSYS_DMA_BATCH_MAX) copies, all of one way; 0 or
	 * -errno (then each of the n is counted in failures, and their
	 * tickets still complete: the warps copy those packets themselves). */
	int (*copy)(void *ctx, enum gpusys_dma_way way, const struct gpusys_dma_copy *c, uint32_t n);
	/* After the copies started so far, of both ways: make completed =
	 * count visible to the warps once they are done. 0 or -errno. */
	int (*complete)(void *ctx, uint32_t count);
};

/* The memcpy engine: copies at once and stores completed (priv, host
 * memory) with release. */
void gpusys_dma_memcpy_engine(struct gpusys_dma_engine *e, struct gpusys_dma_priv *priv);

struct gpusys_dma_agent_stats {
	uint64_t asks;     /* copies asked for */
	uint64_t batches;  /* calls of the engine's copy */
	uint64_t bytes;
	uint64_t failures; /* asks an engine refused */
	uint64_t wakes;    /* times it woke from dozing */
};

struct gpusys_dma_agent;

/* Start the agent's thread over host (zeroed by the caller), dozing until a
 * warp wants it; spin_ms: how long it spins with nothing to do before it
 * dozes again. 0 or -errno. */
int gpusys_dma_agent_start(const struct gpusys_dma_engine *e, struct gpusys_dma_host *host, uint32_t spin_ms,
			   struct gpusys_dma_agent **ret);
/* A channel's range as kernels address it (its windows and data are one
 * side of every copy): an ask whose one side is not wholly inside a
 * channel given here, or whose other side is, is refused. At most
 * GPUSYS_DMA_AGENT_CHANNELS, before kernels use them. 0 or -ENOSPC. */
#define GPUSYS_DMA_AGENT_CHANNELS 4
int gpusys_dma_agent_allow(struct gpusys_dma_agent *a, uint64_t base, uint64_t bytes);
/* Stop and join it (kernels that ask must be done); NULL is fine. */
void gpusys_dma_agent_stop(struct gpusys_dma_agent *a);
void gpusys_dma_agent_stats(const struct gpusys_dma_agent *a, struct gpusys_dma_agent_stats *st);

/* Whether GPUSYS_DMA in the environment turns the agent off ("0"). */
int gpusys_dma_disabled(void);
/* GPUSYS_DMA_SPIN_MS from the environment (0 .. 60000), else dflt. */
uint32_t gpusys_dma_spin_ms(uint32_t dflt);
/* d's thresholds (gpusys_dma_worth): GPUSYS_DMA_MIN_STREAM and
 * GPUSYS_DMA_MIN_SHARE from the environment (bytes a lane of the call),
 * else GPUSYS_DMA_MIN_STREAM_LANE and GPUSYS_DMA_MIN_SHARE_LANE. */
void gpusys_dma_thresholds(struct gpusys_dma *d);

#endif /* GPUSYS_DMA_AGENT_H */
