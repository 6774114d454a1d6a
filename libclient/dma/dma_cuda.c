/* SPDX-License-Identifier: MIT */
/*
 * The DMA ring of a GPU handle (include/gpusys/dma.h) and its agent's
 * engine: each way's batch of copies by cuMemcpyBatchAsync (one call for
 * the batch; cuMemcpyAsync a copy where the driver predates it) on a
 * stream of that way's own, and after them cuStreamWriteValue32 of the
 * count into `completed`, device memory the warps poll, on the stream that
 * dma_order.h chooses, after an event of the other where that must wait
 * for its copies or its last count. A stream runs its
 * work in order and the write's default flags put a memory barrier before
 * it, so a warp that sees the count sees every byte of every copy before it
 * (CUDA driver API, "Stream Memory Operations").
 *
 * Why a stream a way: the copy engine moves a batch of 64 KiB copies of one
 * way at 47-51 GB/s on an H200, one stream that mixes the ways at 12-14
 * GB/s, and cuMemcpyAsync a copy at 17-18 GB/s (bench/dma_submit.c,
 * bench/RESULTS.md "Ninth session").
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda_driver.h"
#include "libclient/dma/dma_agent.h"
#include "libclient/dma/dma_cuda.h"
#include "libclient/dma/dma_order.h"

/* A GPU's agent spins this long with nothing to do before it dozes (a
 * core of the client's while its kernels make large calls): a dozing agent
 * costs the next large call its copy by the warp, and a kernel's rounds of
 * calls and compute are often tens of milliseconds apart. */
#define CUDA_DMA_SPIN_MS 200u

struct gpusys_dma_cuda {
	const struct gpusys_cuda *cu;
	CUcontext ctx;
	CUstream stream[GPUSYS_DMA_WAYS];
	CUevent done[GPUSYS_DMA_WAYS]; /* recorded on a way's stream for a count on the other */
	struct gpusys_dma_order order; /* which stream a count goes on (dma_order.h) */
	int batch;             /* cuMemcpyBatchAsync is there and not turned off (GPUSYS_DMA_BATCH=0) */
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

/* One batch, of one way, on that way's stream. */
static CUresult batch_async(struct gpusys_dma_cuda *c, CUstream st, const struct gpusys_dma_copy *cp, uint32_t n)
{
#if CUDA_VERSION >= 12080
	if (c->batch && n > 1) { /* one copy: cuMemcpyAsync, the call measured alone */
		CUdeviceptr dst[GPUSYS_DMA_BATCH_MAX], src[GPUSYS_DMA_BATCH_MAX];
		size_t len[GPUSYS_DMA_BATCH_MAX], attr_at = 0;
		CUmemcpyAttributes attr;
		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM; /* kernels write the sources */
		for (uint32_t i = 0; i < n; i++) {
			dst[i] = (CUdeviceptr)cp[i].dst;
			src[i] = (CUdeviceptr)cp[i].src;
			len[i] = cp[i].len;
		}
#if CUDA_VERSION >= 13000
		return c->cu->cuMemcpyBatchAsync(dst, src, len, n, &attr, &attr_at, 1, st);
#else
		size_t fail_at = 0;
		return c->cu->cuMemcpyBatchAsync(dst, src, len, n, &attr, &attr_at, 1, &fail_at, st);
#endif
	}
#endif
	for (uint32_t i = 0; i < n; i++) {
		CUresult r = c->cu->cuMemcpyAsync((CUdeviceptr)cp[i].dst, (CUdeviceptr)cp[i].src, cp[i].len, st);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

static int cuda_copy(void *ctx, enum gpusys_dma_way way, const struct gpusys_dma_copy *cp, uint32_t n)
{
	struct gpusys_dma_cuda *c = ctx;
	CUresult r = batch_async(c, c->stream[way], cp, n);
	gpusys_dma_order_copied(&c->order, way); /* even a failed call may have started some */
	return r == CUDA_SUCCESS ? 0 : gpusys_cuda_errno(r);
}

/* The count goes after every copy started so far and after the last
 * count, on the stream dma_order.h picks. */
static int cuda_complete(void *ctx, uint32_t n)
{
	struct gpusys_dma_cuda *c = ctx;
	struct gpusys_dma_count_step s = gpusys_dma_order_count(&c->order);
	CUstream st = c->stream[s.on];
	CUresult r = CUDA_SUCCESS;
	if (s.wait_for >= 0 &&
	    ((r = c->cu->cuEventRecord(c->done[s.wait_for], c->stream[s.wait_for])) != CUDA_SUCCESS ||
	     (r = c->cu->cuStreamWaitEvent(st, c->done[s.wait_for], 0)) != CUDA_SUCCESS))
		return gpusys_cuda_errno(r);
	r = c->cu->cuStreamWriteValue32(st, c->priv + offsetof(struct gpusys_dma_priv, completed), n, 0);
	return r == CUDA_SUCCESS ? 0 : gpusys_cuda_errno(r);
}

static void release(struct gpusys_dma_cuda *c)
{
	const struct gpusys_cuda *cu = c->cu;
	gpusys_dma_agent_stop(c->agent);
	for (int w = 0; w < GPUSYS_DMA_WAYS; w++)
		if (c->stream[w]) {
			cu->cuStreamSynchronize(c->stream[w]);
			cu->cuStreamDestroy(c->stream[w]);
		}
	for (int w = 0; w < GPUSYS_DMA_WAYS; w++)
		if (c->done[w])
			cu->cuEventDestroy(c->done[w]);
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
	const char *b = getenv("GPUSYS_DMA_BATCH");
	c->batch = cu->cuMemcpyBatchAsync && !(b && !strcmp(b, "0"));
	void *host = NULL;
	CUdeviceptr host_dev = 0; /* the ring as kernels address it */
	for (int w = 0; w < GPUSYS_DMA_WAYS; w++)
		if ((r = cu->cuStreamCreate(&c->stream[w], CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
			c->stream[w] = NULL;
			what = "cuStreamCreate";
			goto fail;
		}
	for (int w = 0; w < GPUSYS_DMA_WAYS; w++)
		if ((r = cu->cuEventCreate(&c->done[w], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			c->done[w] = NULL;
			what = "cuEventCreate";
			goto fail;
		}
	gpusys_dma_order_init(&c->order);
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
	};
	gpusys_dma_thresholds(&d);
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
