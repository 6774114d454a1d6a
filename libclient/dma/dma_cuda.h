/* SPDX-License-Identifier: MIT */
/*
 * The DMA ring and agent of a GPU handle (dma_cuda.c); needs cuda.h.
 */
#ifndef GPUSYS_DMA_CUDA_H
#define GPUSYS_DMA_CUDA_H

#include <stddef.h>

#include "common/cuda_driver.h"

struct gpusys_dma_cuda;
struct gpusys_dma_agent;

/* With ctx current: the ring in pinned and device memory, and the agent's
 * thread. 0, or -errno with the reason in err. */
int gpusys_dma_cuda_start(const struct gpusys_cuda *cu, CUcontext ctx, struct gpusys_dma_cuda **ret, char *err,
			  size_t err_size);
/* What gpusys_dev_t.dma of the handle's kernels points at (device memory);
 * NULL c: NULL, no agent. */
const struct gpusys_dma *gpusys_dma_cuda_device(const struct gpusys_dma_cuda *c);
/* With ctx current, kernels done; NULL is fine. */
void gpusys_dma_cuda_stop(struct gpusys_dma_cuda *c);
/* A channel the handle's kernels stream through, as they address it
 * (gpusys_dma_agent_allow); NULL c: nothing to do. */
int gpusys_dma_cuda_allow(struct gpusys_dma_cuda *c, uint64_t base, uint64_t bytes);
const struct gpusys_dma_agent *gpusys_dma_cuda_agent(const struct gpusys_dma_cuda *c);

#endif /* GPUSYS_DMA_CUDA_H */
