/* SPDX-License-Identifier: MIT */
/*
 * Channel memory from CUDA: pinned host memory allocated with cuMemCreate
 * (location HOST_NUMA, POSIX file-descriptor handle), exported as a
 * descriptor the client imports with cuMemImportFromShareableHandle and maps
 * for its device. The daemon maps it for the CPU through its own VMM mapping.
 *
 * CUDA is touched only when a client asks for a device and can import this
 * kind: the first such client of GPU n loads the driver, calls cuInit and
 * retains GPU n's primary context (one context per GPU served, kept until
 * exit). A daemon that only serves memfd clients never loads libcuda.
 *
 * Without cuda.h at build time this file provides a pick that always says
 * no, so the daemon builds and serves memfd channels everywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/wire.h"
#include "core/channel.h"
#include "util/log.h"
#include "../common/cuda_driver.h"

#if GPUSYS_HAVE_CUDA_H

#define MAX_GPUS 64

struct cuda_gpu {
	int state; /* 0 not tried, 1 ready, -1 failed (errno in err) */
	int err;
	CUdevice dev;
	CUcontext ctx;
	int numa_id;
	size_t granularity;
	char name[96];
};

struct cuda_backend {
	struct channel_ops ops; /* first: ch->ops points here */
	int device;
};

struct cuda_mem {
	CUmemGenericAllocationHandle handle;
	CUdeviceptr va;
	size_t size;
	int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const struct gpusys_cuda *cu;
static struct cuda_gpu gpus[MAX_GPUS];
static struct cuda_backend backends[MAX_GPUS];

/* Which kind a CUDA client gets when it can import both (the cuda_memory
 * setting, channel_cuda_prefer): memfd unless told otherwise. */
static uint32_t preferred = GPUSYS_MEMORY_MEMFD;

void channel_cuda_prefer(uint32_t kind)
{
	preferred = kind;
}

static uint32_t preferred_kind(void)
{
	/* memfd by default: one warp's round trip is the same either way, but
	 * under load the daemon's scans of a cuMemCreate host allocation are
	 * slower and the whole GPU's request rate lower (measured, see
	 * bench/RESULTS.md: "After the pollers share out the ports").
	 * VMM stays the fallback. */
	return preferred;
}

static int cuda_fail(CUresult r, const char *what, int device)
{
	char buf[256];
	gpusys_cuda_describe(cu, r, what, buf, sizeof(buf));
	log_warn("cuda: GPU %d: %s", device, buf);
	return gpusys_cuda_errno(r);
}

static CUmemAllocationProp host_prop(const struct cuda_gpu *g)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	prop.location.id = g->numa_id;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return prop;
}

/* Lazy per-GPU set-up; lock held. 0 or -errno (remembered). */
static int gpu_init(int device)
{
	struct cuda_gpu *g = &gpus[device];
	CUresult r;
	int v = 0;

	if (g->state)
		return g->state > 0 ? 0 : g->err;
	g->state = -1;
	if (!cu) {
		int rc = gpusys_cuda_load(&cu);
		if (rc < 0) {
			log_info("cuda: %s: CUDA clients get memfd channels", gpusys_cuda_load_error());
			cu = NULL;
			return g->err = rc;
		}
		r = cu->cuInit(0);
		if (r != CUDA_SUCCESS) {
			g->err = cuda_fail(r, "cuInit", device);
			cu = NULL; /* a later client of another GPU tries again */
			return g->err;
		}
	}
	if ((r = cu->cuDeviceGet(&g->dev, device)) != CUDA_SUCCESS)
		return g->err = cuda_fail(r, "cuDeviceGet", device);
	cu->cuDeviceGetName(g->name, sizeof(g->name), g->dev);
	cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, g->dev);
	if (!v) {
		log_info("cuda: GPU %d (%s) cannot share memory as POSIX descriptors", device, g->name);
		return g->err = -ENOTSUP;
	}
	v = -1;
	if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g->dev) != CUDA_SUCCESS || v < 0)
		v = 0;
	g->numa_id = v;
	if ((r = cu->cuDevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS)
		return g->err = cuda_fail(r, "cuDevicePrimaryCtxRetain", device);
	CUmemAllocationProp prop = host_prop(g);
	cu->cuCtxPushCurrent(g->ctx);
	r = cu->cuMemGetAllocationGranularity(&g->granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	cu->cuCtxPopCurrent(NULL);
	if (r != CUDA_SUCCESS) {
		cu->cuDevicePrimaryCtxRelease(g->dev);
		return g->err = cuda_fail(r, "cuMemGetAllocationGranularity(HOST_NUMA)", device);
	}
	g->state = 1;
	log_info("cuda: serving GPU %d (%s): VMM host channels, granularity %zu KiB, NUMA node %d", device,
		 g->name, g->granularity >> 10, g->numa_id);
	return 0;
}

static int vmm_alloc(struct channel *ch, uint32_t num_ports, uint64_t bulk_bytes)
{
	const struct cuda_backend *be = (const struct cuda_backend *)ch->ops;
	struct cuda_gpu *g = &gpus[be->device];
	struct cuda_mem *m = calloc(1, sizeof(*m));
	CUresult r;
	int rc = -EIO, fd = -1;

	if (!m)
		return -ENOMEM;
	m->device = be->device;
	struct gpusys_channel_layout l = gpusys_channel_layout(num_ports, bulk_bytes, g->granularity);
	CUmemAllocationProp prop = host_prop(g);
	CUmemAccessDesc acc[2];
	memset(acc, 0, sizeof(acc));
	acc[0].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	acc[0].location.id = g->numa_id;
	acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

	pthread_mutex_lock(&lock);
	cu->cuCtxPushCurrent(g->ctx);
	m->size = l.total_bytes;
	if ((r = cu->cuMemCreate(&m->handle, m->size, &prop, 0)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, "cuMemCreate", m->device);
		goto out;
	}
	if ((r = cu->cuMemExportToShareableHandle(&fd, m->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) !=
	    CUDA_SUCCESS) {
		rc = cuda_fail(r, "cuMemExportToShareableHandle", m->device);
		goto release;
	}
	if ((r = cu->cuMemAddressReserve(&m->va, m->size, g->granularity, 0, 0)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, "cuMemAddressReserve", m->device);
		goto close_fd;
	}
	if ((r = cu->cuMemMap(m->va, m->size, 0, m->handle, 0)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, "cuMemMap", m->device);
		goto free_va;
	}
	/* The daemon only needs the CPU's view. */
	if ((r = cu->cuMemSetAccess(m->va, m->size, acc, 1)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, "cuMemSetAccess(host)", m->device);
		goto unmap;
	}
	cu->cuCtxPopCurrent(NULL);
	pthread_mutex_unlock(&lock);

	memset((void *)(uintptr_t)m->va, 0, m->size);
	/* The descriptor is sent to the client; keep it close-on-exec here. */
	int fl = fcntl(fd, F_GETFD);
	if (fl >= 0)
		fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	ch->layout = l;
	ch->base = (void *)(uintptr_t)m->va;
	ch->bytes = m->size;
	ch->fd = fd;
	ch->priv = m;
	return 0;

unmap:
	cu->cuMemUnmap(m->va, m->size);
free_va:
	cu->cuMemAddressFree(m->va, m->size);
close_fd:
	close(fd);
release:
	cu->cuMemRelease(m->handle);
out:
	cu->cuCtxPopCurrent(NULL);
	pthread_mutex_unlock(&lock);
	free(m);
	return rc;
}

static void vmm_free(struct channel *ch)
{
	struct cuda_mem *m = ch->priv;

	if (m) {
		/* The client's import holds its own reference: the pages live on
		 * until it unmaps them too. */
		pthread_mutex_lock(&lock);
		cu->cuCtxPushCurrent(gpus[m->device].ctx);
		cu->cuMemUnmap(m->va, m->size);
		cu->cuMemAddressFree(m->va, m->size);
		cu->cuMemRelease(m->handle);
		cu->cuCtxPopCurrent(NULL);
		pthread_mutex_unlock(&lock);
		free(m);
	}
	if (ch->fd >= 0)
		close(ch->fd);
	ch->fd = -1;
	ch->base = NULL;
	ch->priv = NULL;
}

const struct channel_ops *channel_cuda_pick(int32_t cuda_device, uint32_t memory_kinds)
{
	const uint32_t vmm = 1u << GPUSYS_MEMORY_CUDA_VMM, memfd = 1u << GPUSYS_MEMORY_MEMFD;

	if (cuda_device < 0 || cuda_device >= MAX_GPUS || !(memory_kinds & vmm))
		return NULL;
	/* A client that can take either gets the measured default. */
	if ((memory_kinds & memfd) && preferred_kind() == GPUSYS_MEMORY_MEMFD)
		return NULL;
	pthread_mutex_lock(&lock);
	int rc = gpu_init(cuda_device);
	pthread_mutex_unlock(&lock);
	if (rc < 0)
		return NULL; /* memfd, if the client can take it */
	struct cuda_backend *be = &backends[cuda_device];
	be->ops.name = "cuda-vmm";
	be->ops.memory_kind = GPUSYS_MEMORY_CUDA_VMM;
	be->ops.alloc = vmm_alloc;
	be->ops.free = vmm_free;
	be->device = cuda_device;
	return &be->ops;
}

#else /* !GPUSYS_HAVE_CUDA_H */
void channel_cuda_prefer(uint32_t kind)
{
	(void)kind;
}


const struct channel_ops *channel_cuda_pick(int32_t cuda_device, uint32_t memory_kinds)
{
	(void)cuda_device;
	(void)memory_kinds;
	return NULL;
}

#endif
