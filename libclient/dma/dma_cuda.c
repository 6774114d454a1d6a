/* SPDX-License-Identifier: MIT */
/*
 * The DMA ring of a GPU handle (include/gpusys/dma.h) and its agent's
 * engine: cuMemcpyAsync on a stream of the agent's own, and after a batch of
 * copies cuStreamWriteValue32 of the count into `completed`, device memory
 * the warps poll. A stream runs its work in order and the write's default
 * flags put a memory barrier before it, so a warp that sees the count sees
 * every byte of every copy before it (CUDA driver API, "Stream Memory
 * Operations").
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda_driver.h"
#include "libclient/dma/dma_agent.h"
#include "libclient/dma/dma_cuda.h"

/* A GPU's agent spins this long with nothing to do before it dozes (a
 * core of the client's while its kernels make large calls): a dozing agent
 * costs the next large call its copy by the warp, and a kernel's rounds of
 * calls and compute are often tens of milliseconds apart. */
#define CUDA_DMA_SPIN_MS 200u

struct gpusys_dma_cuda {
	const struct gpusys_cuda *cu;
	CUcontext ctx;
	CUstream stream;
	struct gpusys_dma_host *host; /* cuMemHostAlloc: the agent's view */
	CUdeviceptr priv;             /* struct gpusys_dma_priv */
	CUdeviceptr dma;              /* struct gpusys_dma, what gpusys_dev_t.dma points at */
	struct gpusys_dma_agent *agent;
};

static int cuda_thread_start(void *ctx)
{
	struct gpusys_dma_cuda *c = ctx;
	return c->cu->cuCtxSetCurrent(c->ctx) == CUDA_SUCCESS ? 0 : -EIO;
}

/* Memory the driver knows (device, pinned, managed), first byte and last:
 * not the process's pageable memory, which a kernel cannot reach itself. */
static int cuda_buffer_ok(void *ctx, uint64_t addr, uint32_t len)
{
	struct gpusys_dma_cuda *c = ctx;
	unsigned int type = 0;
	return c->cu->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)addr) ==
		       CUDA_SUCCESS &&
	       c->cu->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(addr + len - 1)) ==
		       CUDA_SUCCESS;
}

static int cuda_copy(void *ctx, uint64_t dst, uint64_t src, uint32_t len)
{
	struct gpusys_dma_cuda *c = ctx;
	CUresult r = c->cu->cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, len, c->stream);
	return r == CUDA_SUCCESS ? 0 : gpusys_cuda_errno(r);
}

static int cuda_complete(void *ctx, uint32_t n)
{
	struct gpusys_dma_cuda *c = ctx;
	CUresult r = c->cu->cuStreamWriteValue32(c->stream, c->priv + offsetof(struct gpusys_dma_priv, completed), n, 0);
	return r == CUDA_SUCCESS ? 0 : gpusys_cuda_errno(r);
}

static void release(struct gpusys_dma_cuda *c)
{
	const struct gpusys_cuda *cu = c->cu;
	gpusys_dma_agent_stop(c->agent);
	if (c->stream) {
		cu->cuStreamSynchronize(c->stream);
		cu->cuStreamDestroy(c->stream);
	}
	if (c->dma)
		cu->cuMemFree(c->dma);
	if (c->priv)
		cu->cuMemFree(c->priv);
	if (c->host)
		cu->cuMemFreeHost(c->host);
	free(c);
}

int gpusys_dma_cuda_start(const struct gpusys_cuda *cu, CUcontext ctx, struct gpusys_dma_cuda **ret, char *err,
			  size_t err_size)
{
	struct gpusys_dma_cuda *c = calloc(1, sizeof(*c));
	CUresult r = CUDA_SUCCESS;
	const char *what = "calloc";
	if (!c) {
		snprintf(err, err_size, "out of memory");
		return -ENOMEM;
	}
	c->cu = cu;
	c->ctx = ctx;
	void *host = NULL;
	CUdeviceptr host_dev = 0; /* the ring as kernels address it */
	if ((r = cu->cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		c->stream = NULL;
		what = "cuStreamCreate";
		goto fail;
	}
	if ((r = cu->cuMemHostAlloc(&host, sizeof(struct gpusys_dma_host),
				    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS) {
		what = "cuMemHostAlloc";
		goto fail;
	}
	c->host = host;
	memset(c->host, 0, sizeof(*c->host));
	if ((r = cu->cuMemHostGetDevicePointer(&host_dev, host, 0)) != CUDA_SUCCESS) {
		what = "cuMemHostGetDevicePointer";
		goto fail;
	}
	if ((r = cu->cuMemAlloc(&c->priv, sizeof(struct gpusys_dma_priv))) != CUDA_SUCCESS) {
		c->priv = 0;
		what = "cuMemAlloc";
		goto fail;
	}
	if ((r = cu->cuMemsetD8(c->priv, 0, sizeof(struct gpusys_dma_priv))) != CUDA_SUCCESS) {
		what = "cuMemsetD8";
		goto fail;
	}
	struct gpusys_dma d = {
		.host = (struct gpusys_dma_host *)(uintptr_t)host_dev,
		.priv = (struct gpusys_dma_priv *)(uintptr_t)c->priv,
		.min_stream_lane = GPUSYS_DMA_MIN_STREAM_LANE,
		.min_share_lane = GPUSYS_DMA_MIN_SHARE_LANE,
	};
	if ((r = cu->cuMemAlloc(&c->dma, sizeof(d))) != CUDA_SUCCESS) {
		c->dma = 0;
		what = "cuMemAlloc";
		goto fail;
	}
	if ((r = cu->cuMemcpyHtoD(c->dma, &d, sizeof(d))) != CUDA_SUCCESS) {
		what = "cuMemcpyHtoD";
		goto fail;
	}
	struct gpusys_dma_engine e = { .ctx = c,
				       .thread_start = cuda_thread_start,
				       .buffer_ok = cuda_buffer_ok,
				       .copy = cuda_copy,
				       .complete = cuda_complete };
	int rc = gpusys_dma_agent_start(&e, c->host, gpusys_dma_spin_ms(CUDA_DMA_SPIN_MS), &c->agent);
	if (rc < 0) {
		snprintf(err, err_size, "cannot start the DMA agent's thread: %s", strerror(-rc));
		release(c);
		return rc;
	}
	*ret = c;
	return 0;
fail:
	gpusys_cuda_describe(cu, r, what, err, err_size);
	release(c);
	return gpusys_cuda_errno(r);
}

void gpusys_dma_cuda_stop(struct gpusys_dma_cuda *c)
{
	if (c)
		release(c);
}

const struct gpusys_dma *gpusys_dma_cuda_device(const struct gpusys_dma_cuda *c)
{
	return c ? (const struct gpusys_dma *)(uintptr_t)c->dma : NULL;
}

int gpusys_dma_cuda_allow(struct gpusys_dma_cuda *c, uint64_t base, uint64_t bytes)
{
	return c ? gpusys_dma_agent_allow(c->agent, base, bytes) : 0;
}

const struct gpusys_dma_agent *gpusys_dma_cuda_agent(const struct gpusys_dma_cuda *c)
{
	return c ? c->agent : NULL;
}
