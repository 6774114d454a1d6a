/* SPDX-License-Identifier: MIT */
/*
 * libgpusys for CUDA programs (include/gpusys/gpusys.h): the channel from
 * the attach handshake, made addressable by one device.
 *
 *  - memfd channels: the attach mapping is registered with
 *    cuMemHostRegister(DEVICEMAP); the device address comes from
 *    cuMemHostGetDevicePointer.
 *  - CUDA VMM channels: the descriptor is imported with
 *    cuMemImportFromShareableHandle and mapped once, readable and writable
 *    by the device and by the CPU (one address for both).
 *
 * Port locks and the submitted counter are private to this client: device
 * memory (cuMemAlloc, zeroed), never the shared channel (GPU atomics on host
 * memory are not atomic with respect to the CPU).
 *
 * Watchdog: a kernel spinning on a port cannot learn that the daemon died
 * (a dead daemon writes nothing), and the host thread that could tell it is
 * usually blocked in a stream synchronisation. So one small thread per
 * attach sleeps in poll() on the daemon socket (no CPU use while idle) and,
 * when the daemon hangs up, re-offers a handed-over channel to the next
 * daemon (a restart, docs/RESTART.md) or else writes client_host_state =
 * ABORT in the channel:
 * spinning warps then return -ESHUTDOWN within GPUSYS_SPIN_CHECK_EVERY polls.
 * gpusys_synchronize checks the same flag and the daemon's state word.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gpusys/callback.h"
#include "gpusys/emulator.h" /* gpusys_channel_progress */
#include "gpusys/gpusys.h"
#include "common/wire.h"
#include "gpusys/device/host_sync.h"
#include "client.h"
#include "dev_handle.h"
#include "libclient/attach/channel_dump.h"
#include "libclient/callbacks/callback_dump.h"
#include "../common/cuda_driver.h"
#include "libclient/dma/dma_agent.h"
#include "libclient/dma/dma_cuda.h"

#define GPUSYS_TRACKED_STREAMS 64

struct gpusys {
	const struct gpusys_cuda *cu;
	struct gpusys_client *client;
	CUdevice cudev;
	CUcontext ctx;
	int ordinal;
	int numa_id;
	uint32_t kind;
	void *host;           /* the channel as the CPU sees it */
	CUdeviceptr dbase;    /* ... and the device */
	size_t bytes;
	int registered;       /* memfd: cuMemHostRegister done */
	CUmemGenericAllocationHandle vmm_handle;
	int vmm_state;        /* 1 imported, 2 reserved, 3 mapped */
	CUdeviceptr priv;     /* locks[num_ports], then the submitted counter */
	CUstream copy_stream; /* non-blocking: reads the counter while other streams run */
	struct gpusys_dma_cuda *dma; /* the DMA agent and its ring (include/gpusys/dma.h); NULL: none */
	gpusys_dev_t dev;
	pthread_t watchdog;
	int have_watchdog;
	int wake[2];
	atomic_int daemon_gone;
	atomic_int goodbye_status;  /* the daemon's goodbye (wire.h), or 0 */
	char goodbye[256];          /* its message, written before goodbye_status */
	CUdeviceptr warp_futures; /* per-warp future counts (SMs x 64 words) */
	uint32_t warp_slots;
	uint32_t sms;             /* the GPU's SM count (at least 1) */

	/* User host callbacks: the server of this client's own callback
	 * channel, made at the first registration (callback.h). */
	pthread_mutex_t cb_lock;
	struct gpusys_callbacks *cb;
	void *cb_host;            /* its channel, registered with the driver */
	uint64_t cb_bytes;
	CUdeviceptr cb_priv;      /* its locks, submitted counter, warp counts */
	CUdeviceptr cb_dev;       /* its gpusys_dev_t, in device memory */
	gpusys_dev_t cb_dev_host; /* ... and the same here */

	/* The in-flight hint (abi.h, active_until_ns) must not end while a
	 * stream that gpusys_device_on() named still has kernels: those
	 * streams and their launches not yet seen done. */
	pthread_mutex_t streams_lock;
	struct {
		void *stream;
		uint64_t launches;
	} streams[GPUSYS_TRACKED_STREAMS];
	unsigned nstreams;
};

static void ctx_push(const gpusys_t *g)
{
	g->cu->cuCtxPushCurrent(g->ctx);
}

static void ctx_pop(const gpusys_t *g)
{
	CUcontext c;
	g->cu->cuCtxPopCurrent(&c);
}

/* A CUDA failure: its errno, and its words for gpusys_last_error(). */
static int cu_err(const gpusys_t *g, CUresult r, const char *what)
{
	char buf[256];
	gpusys_cuda_describe(g->cu, r, what, buf, sizeof(buf));
	if (getenv("GPUSYS_DEBUG"))
		fprintf(stderr, "libgpusys: %s\n", buf);
	return gpusys_set_last_error(gpusys_cuda_errno(r), "%s", buf);
}

/* A goodbye waiting on the connection says why the daemon ended us. */
static void read_goodbye(gpusys_t *g)
{
	struct gpusys_welcome w;
	ssize_t n = recv(gpusys_client_socket_fd(g->client), &w, sizeof(w), MSG_DONTWAIT);
	if (n != (ssize_t)sizeof(w) || w.magic != GPUSYS_GOODBYE_MAGIC || w.status >= 0)
		return;
	w.message[sizeof(w.message) - 1] = 0;
	memcpy(g->goodbye, w.message, sizeof(g->goodbye));
	atomic_store(&g->goodbye_status, w.status);
}

static void mark_abort(gpusys_t *g)
{
	read_goodbye(g);
	atomic_store(&g->daemon_gone, 1);
	struct gpusys_channel_header *h = g->host;
	__atomic_store_n(&h->client_host_state, GPUSYS_CLIENT_HOST_ABORT, __ATOMIC_RELEASE);
}

static int reconnect_client(void *ctx, int stop_fd)
{
	return gpusys_client_reconnect(ctx, stop_fd);
}

/* A restart that handed the channel over (memfd channels only) is
 * re-offered; kernels keep spinning on the still registered mapping
 * meanwhile, so they see a pause, not an error (docs/RESTART.md). */
static void *watchdog_main(void *arg)
{
	gpusys_t *g = arg;
	if (gpusys_watch_connection(gpusys_client_socket_fd(g->client), g->wake[0], reconnect_client, g->client) < 0)
		mark_abort(g);
	return NULL;
}

static int map_vmm(gpusys_t *g)
{
	const struct gpusys_cuda *cu = g->cu;
	int fd = gpusys_client_memory_fd(g->client);
	CUresult r;

	r = cu->cuMemImportFromShareableHandle(&g->vmm_handle, (void *)(uintptr_t)fd,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemImportFromShareableHandle");
	g->vmm_state = 1;
	if ((r = cu->cuMemAddressReserve(&g->dbase, g->bytes, 0, 0, 0)) != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemAddressReserve");
	g->vmm_state = 2;
	if ((r = cu->cuMemMap(g->dbase, g->bytes, 0, g->vmm_handle, 0)) != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemMap");
	g->vmm_state = 3;
	CUmemAccessDesc acc[2];
	memset(acc, 0, sizeof(acc));
	acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc[0].location.id = g->ordinal;
	acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	acc[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	acc[1].location.id = g->numa_id;
	acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if ((r = cu->cuMemSetAccess(g->dbase, g->bytes, &acc[0], 1)) != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemSetAccess(device)");
	if ((r = cu->cuMemSetAccess(g->dbase, g->bytes, &acc[1], 1)) != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemSetAccess(host)");
	g->host = (void *)(uintptr_t)g->dbase;
	return 0;
}

/* Undo map_vmm as far as it got; in g's context. */
static void unmap_vmm(gpusys_t *g)
{
	const struct gpusys_cuda *cu = g->cu;

	if (g->vmm_state >= 3)
		cu->cuMemUnmap(g->dbase, g->bytes);
	if (g->vmm_state >= 2)
		cu->cuMemAddressFree(g->dbase, g->bytes);
	if (g->vmm_state >= 1)
		cu->cuMemRelease(g->vmm_handle);
	g->vmm_state = 0;
}

static int map_memfd(gpusys_t *g)
{
	const struct gpusys_cuda *cu = g->cu;
	CUresult r;

	g->host = gpusys_client_channel(g->client);
	if (!g->host)
		return gpusys_set_last_error(-EPROTO, "the memfd channel is not mapped");
	/* For this GPU's context only: only its kernels use this channel, and
	 * a process with a channel per GPU would otherwise map every channel
	 * into every GPU (and unregistering one would wait on them all). */
	r = cu->cuMemHostRegister(g->host, g->bytes, CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemHostRegister");
	g->registered = 1;
	if ((r = cu->cuMemHostGetDevicePointer(&g->dbase, g->host, 0)) != CUDA_SUCCESS)
		return cu_err(g, r, "cuMemHostGetDevicePointer");
	return 0;
}

static void release(gpusys_t *g)
{
	const struct gpusys_cuda *cu = g->cu;

	if (g->have_watchdog) {
		char c = 0;
		if (write(g->wake[1], &c, 1) < 0) {
		}
		pthread_join(g->watchdog, NULL);
	}
	if (g->wake[0] >= 0)
		close(g->wake[0]);
	if (g->wake[1] >= 0)
		close(g->wake[1]);
	if (g->ctx) {
		ctx_push(g);
		gpusys_dma_cuda_stop(g->dma); /* it copies from the channel's windows */
		if (g->cb_host)
			cu->cuMemHostUnregister(g->cb_host);
		if (g->cb_priv)
			cu->cuMemFree(g->cb_priv);
		if (g->cb_dev)
			cu->cuMemFree(g->cb_dev);
		if (g->warp_futures)
			cu->cuMemFree(g->warp_futures);
		if (g->copy_stream)
			cu->cuStreamDestroy(g->copy_stream);
		if (g->priv)
			cu->cuMemFree(g->priv);
		if (g->registered)
			cu->cuMemHostUnregister(g->host);
		unmap_vmm(g);
		ctx_pop(g);
		cu->cuDevicePrimaryCtxRelease(g->cudev);
	}
	/* Unregistered above (the CPU mapping stays): now its pool stops and
	 * the channel goes. */
	gpusys_callbacks_destroy(g->cb);
	pthread_mutex_destroy(&g->cb_lock);
	pthread_mutex_destroy(&g->streams_lock);
	if (g->client)
		gpusys_client_detach(g->client);
	free(g);
}

/* The connection's options from the program's (include/gpusys/gpusys.h). */
static struct gpusys_attach_opts connection_opts(const struct gpusys_options *opts)
{
	uint32_t flags = opts ? opts->flags : 0;
	return (struct gpusys_attach_opts){
		.runtime_dir = opts ? opts->runtime_dir : NULL,
		.num_ports = opts ? opts->num_ports : 0,
		.bulk_bytes = flags & GPUSYS_ATTACH_NO_BULK ? 0
			      : opts && opts->bulk_bytes    ? opts->bulk_bytes
							    : GPUSYS_DEFAULT_BULK_BYTES,
		.cuda_device = opts ? opts->cuda_device : 0,
		/* print service: gpusys_printf goes where our stdout/stderr go */
		.pass_stdio = !(flags & GPUSYS_ATTACH_NO_STDIO),
		/* file service: relative paths are relative to our working directory */
		.pass_cwd = !(flags & GPUSYS_ATTACH_NO_CWD),
		.memory_kinds = opts ? opts->memory_kinds : 0,
	};
}

/* GPUSYS_ATTACH_EMULATED: the channel mapped for this process's CPU only,
 * for emulated warps (include/gpusys/emulator.h); no CUDA at all. */
static int attach_emulated(const struct gpusys_options *opts, gpusys_t **ret)
{
	struct gpusys_attach_opts ao = connection_opts(opts);
	ao.cuda_device = -1;
	ao.memory_kinds = 1u << GPUSYS_MEMORY_MEMFD;

	gpusys_t *g = calloc(1, sizeof(*g));
	if (!g)
		return gpusys_set_last_error(-ENOMEM, "out of memory");
	g->ordinal = -1;
	g->wake[0] = g->wake[1] = -1;
	pthread_mutex_init(&g->cb_lock, NULL);
	pthread_mutex_init(&g->streams_lock, NULL);
	int rc = gpusys_client_attach(&ao, &g->client);
	if (rc < 0) {
		g->client = NULL;
		release(g);
		return rc;
	}
	g->kind = gpusys_client_memory_kind(g->client);
	g->bytes = gpusys_client_channel_bytes(g->client);
	g->host = gpusys_client_channel(g->client);
	g->dev.num_ports = gpusys_client_num_ports(g->client);
	*ret = g;
	return 0;
}

int gpusys_attach(const struct gpusys_options *opts, gpusys_t **ret)
{
	const struct gpusys_cuda *cu;
	char msg[256];
	CUresult r;
	int rc, v = 0;

	gpusys_clear_last_error();
	if (opts && (opts->flags & GPUSYS_ATTACH_EMULATED))
		return attach_emulated(opts, ret);
	int device = opts ? opts->cuda_device : 0;
	rc = gpusys_cuda_probe(device, &cu, msg, sizeof(msg));
	if (rc < 0) {
		if (getenv("GPUSYS_DEBUG"))
			fprintf(stderr, "libgpusys: %s\n", msg);
		return gpusys_set_last_error(rc, "no usable GPU: %s", msg);
	}
	gpusys_t *g = calloc(1, sizeof(*g));
	if (!g)
		return gpusys_set_last_error(-ENOMEM, "out of memory");
	g->cu = cu;
	g->ordinal = device;
	g->wake[0] = g->wake[1] = -1;
	pthread_mutex_init(&g->cb_lock, NULL);
	pthread_mutex_init(&g->streams_lock, NULL);

	if ((r = cu->cuDeviceGet(&g->cudev, device)) != CUDA_SUCCESS) {
		rc = cu_err(g, r, "cuDeviceGet");
		goto fail;
	}
	if ((r = cu->cuDevicePrimaryCtxRetain(&g->ctx, g->cudev)) != CUDA_SUCCESS) {
		g->ctx = NULL;
		rc = cu_err(g, r, "cuDevicePrimaryCtxRetain");
		goto fail;
	}
	/* The daemon knows the GPU by UUID: our ordinal may mean another GPU
	 * in its numbering (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER). */
	CUuuid uuid;
	if ((r = cu->cuDeviceGetUuid(&uuid, g->cudev)) != CUDA_SUCCESS) {
		rc = cu_err(g, r, "cuDeviceGetUuid");
		goto fail;
	}
	if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g->cudev) != CUDA_SUCCESS || v < 0)
		v = 0;
	g->numa_id = v;

	/* Default: one port per resident warp slot (SMs x warps per SM), so
	 * that every warp of a full GPU finds its own port (the hint,
	 * device/lane.h) and none waits on another's call. Fewer ports work
	 * too (no warp waits on another for a port except while that one's
	 * request is in flight, so they cannot deadlock: tests/gpu/test_allwarps
	 * runs every resident warp over 7 ports), but the lock then decides who
	 * goes next, unfairly: with 8 ports per SM the whole GPU's p99 stood far
	 * above its p50 and its rate lower, while a single warp was as fast
	 * either way (measured, see bench/RESULTS.md: "One port per warp, and a
	 * shorter client path"). The cost is channel memory: 2.3 KiB a port.
	 * Before the pollers' scans got cheap, 8448 ports had slowed one warp
	 * down, and the default was 8 per SM. */
	int sms = 0;
	cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->cudev);
	g->sms = sms > 0 ? (uint32_t)sms : 1u;
	uint32_t ports = opts ? opts->num_ports : 0;
	if (!ports) {
		int threads = 0;
		cu->cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, g->cudev);
		uint64_t warps = threads >= 32 ? (uint64_t)threads / 32u : 64u;
		uint64_t n = (uint64_t)g->sms * warps;
		ports = n > GPUSYS_MAX_PORTS ? GPUSYS_MAX_PORTS : (uint32_t)n;
	}

	uint32_t kinds = opts && opts->memory_kinds ? opts->memory_kinds
						     : (1u << GPUSYS_MEMORY_MEMFD) | (1u << GPUSYS_MEMORY_CUDA_VMM);
	struct gpusys_attach_opts ao = connection_opts(opts);
	ao.num_ports = ports;
	ao.cuda_device = device;
	ao.memory_kinds = kinds;
	ao.gpu_uuid = (const uint8_t *)uuid.bytes;
again:
	rc = gpusys_client_attach(&ao, &g->client);
	if (rc < 0) {
		g->client = NULL;
		goto fail;
	}
	g->kind = gpusys_client_memory_kind(g->client);
	g->bytes = gpusys_client_channel_bytes(g->client);

	ctx_push(g);
	if (g->kind == GPUSYS_MEMORY_CUDA_VMM)
		rc = map_vmm(g);
	else if (g->kind == GPUSYS_MEMORY_MEMFD)
		rc = map_memfd(g);
	else
		rc = gpusys_set_last_error(-EPROTO, "gpusysd sent a channel of unknown memory kind %u", g->kind);
	if (rc < 0 && g->kind == GPUSYS_MEMORY_CUDA_VMM && (ao.memory_kinds & (1u << GPUSYS_MEMORY_MEMFD))) {
		/* The fallback: a memfd channel, registered with the driver. */
		unmap_vmm(g);
		g->host = NULL;
		g->dbase = 0;
		ctx_pop(g);
		gpusys_client_detach(g->client);
		g->client = NULL;
		ao.memory_kinds = 1u << GPUSYS_MEMORY_MEMFD;
		goto again;
	}
	if (rc == 0 && (rc = gpusys_channel_check(g->host, g->bytes)) < 0)
		gpusys_set_last_error(rc, "the channel gpusysd sent disagrees with ABI %u", GPUSYS_ABI_VERSION);
	uint32_t n = rc == 0 ? ((struct gpusys_channel_header *)g->host)->num_ports : 0;
	/* Port locks, the submitted counter, the bulk slot locks (dev.h). */
	uint64_t bulk = rc == 0 ? ((struct gpusys_channel_header *)g->host)->bulk_bytes : 0;
	size_t priv_bytes = (size_t)gpusys_dev_private_bytes(n, bulk);
	if (rc == 0 && (r = cu->cuMemAlloc(&g->priv, priv_bytes)) != CUDA_SUCCESS) {
		g->priv = 0;
		rc = cu_err(g, r, "cuMemAlloc");
	}
	if (rc == 0 && (r = cu->cuMemsetD8(g->priv, 0, priv_bytes)) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuMemsetD8");
	/* Futures per warp: one count per hardware warp slot, found by the
	 * port hint of device/lane.h modulo this count (SMs x 64: at least
	 * SMs x %nwarpid, the hint's range, on the GPUs we know). */
	g->warp_slots = g->sms * 64u;
	if (rc == 0 && (r = cu->cuMemAlloc(&g->warp_futures, g->warp_slots * sizeof(uint32_t))) != CUDA_SUCCESS) {
		g->warp_futures = 0;
		rc = cu_err(g, r, "cuMemAlloc");
	}
	if (rc == 0 && (r = cu->cuMemsetD8(g->warp_futures, 0, g->warp_slots * sizeof(uint32_t))) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuMemsetD8");
	if (rc == 0 && (r = cu->cuStreamCreate(&g->copy_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		g->copy_stream = NULL;
		rc = cu_err(g, r, "cuStreamCreate");
	}
	/* The DMA agent: large streams between global memory and the channel
	 * (requests' and answers') are copied by the copy engine
	 * (include/gpusys/dma.h). Without it the warps copy them, as before: a
	 * failure here is said, not fatal. */
	if (rc == 0 && !gpusys_dma_disabled()) {
		char why[256];
		if (gpusys_dma_cuda_start(cu, g->ctx, &g->dma, why, sizeof(why)) < 0) {
			g->dma = NULL;
			if (getenv("GPUSYS_DEBUG"))
				fprintf(stderr, "libgpusys: no DMA agent (the warps copy every stream): %s\n", why);
		} else {
			gpusys_dma_cuda_allow(g->dma, (uint64_t)g->dbase, g->bytes);
		}
	}
	if (rc == 0 && (r = cu->cuCtxSynchronize()) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuCtxSynchronize");
	ctx_pop(g);
	if (rc < 0)
		goto fail;

	gpusys_dev_fill(&g->dev, (void *)(uintptr_t)g->dbase, g->host, (struct gpusys_port_lock *)(uintptr_t)g->priv,
			(unsigned long long *)(uintptr_t)(g->priv + (size_t)n * sizeof(struct gpusys_port_lock)));
	gpusys_dev_set_bulk_locks(&g->dev, (uint32_t *)(uintptr_t)(g->priv + (size_t)n * sizeof(struct gpusys_port_lock) +
								  sizeof(unsigned long long)),
				  opts ? opts->bulk_slot_bytes : 0);
	g->dev.warp_futures = (uint32_t *)(uintptr_t)g->warp_futures;
	g->dev.warp_slots = g->warp_slots;
	g->dev.dma = gpusys_dma_cuda_device(g->dma);

	if (!(opts && (opts->flags & GPUSYS_ATTACH_NO_WATCHDOG))) {
		if (pipe2(g->wake, O_CLOEXEC) < 0) {
			rc = gpusys_set_last_error(-errno, "pipe2: %s", strerror(errno));
			goto fail;
		}
		rc = -pthread_create(&g->watchdog, NULL, watchdog_main, g);
		if (rc < 0) {
			gpusys_set_last_error(rc, "cannot start the watchdog thread: %s", strerror(-rc));
			goto fail;
		}
		g->have_watchdog = 1;
	}
	*ret = g;
	return 0;
fail:
	release(g);
	return rc;
}

static uint64_t monotonic_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ------------------------------------------------------------ callbacks */

struct gpusys_callbacks *gpusys_callbacks_of(gpusys_t *g)
{
	const struct gpusys_cuda *cu = g->cu;
	CUresult r;
	int rc = 0;

	if (!cu) {
		gpusys_set_last_error(-EINVAL, "an emulated handle has no GPU callback channel "
					       "(emulated warps: gpusys_callbacks_create)");
		return NULL;
	}
	pthread_mutex_lock(&g->cb_lock);
	if (g->cb)
		goto out;
	struct gpusys_callbacks *cb;
	/* 8 ports per SM (at most the daemon channel's count), not one per
	 * warp slot: the callback server's threads scan every port on each
	 * pass, and with 8448 ports an empty callback was slower than with 1056
	 * (measured, see bench/RESULTS.md: "Figures that stood in code
	 * comments"). Callbacks are host work of microseconds; their ports are
	 * shared by a few warps each. */
	uint32_t cb_ports = g->sms * 8u;
	if (cb_ports > g->dev.num_ports)
		cb_ports = g->dev.num_ports;
	struct gpusys_callbacks_opts o = { .num_ports = cb_ports };
	if (gpusys_callbacks_create(&o, &cb) < 0)
		goto out;
	g->cb_host = gpusys_callbacks_channel(cb, &g->cb_bytes);
	const struct gpusys_channel_header *hdr = g->cb_host;
	uint32_t n = hdr->num_ports;
	size_t priv_bytes = (size_t)n * sizeof(struct gpusys_port_lock) + sizeof(unsigned long long) +
			    (size_t)g->warp_slots * sizeof(uint32_t);
	CUdeviceptr dbase = 0;
	ctx_push(g);
	if ((r = cu->cuMemHostRegister(g->cb_host, g->cb_bytes,
				       CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)) != CUDA_SUCCESS) {
		rc = cu_err(g, r, "cuMemHostRegister(callbacks)");
		g->cb_host = NULL;
	}
	if (!rc && (r = cu->cuMemHostGetDevicePointer(&dbase, g->cb_host, 0)) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuMemHostGetDevicePointer(callbacks)");
	if (!rc && (r = cu->cuMemAlloc(&g->cb_priv, priv_bytes)) != CUDA_SUCCESS) {
		g->cb_priv = 0;
		rc = cu_err(g, r, "cuMemAlloc(callbacks)");
	}
	if (!rc && (r = cu->cuMemsetD8(g->cb_priv, 0, priv_bytes)) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuMemsetD8(callbacks)");
	if (!rc) {
		gpusys_dev_t *d = &g->cb_dev_host;
		gpusys_dev_fill(d, (void *)(uintptr_t)dbase, hdr, (struct gpusys_port_lock *)(uintptr_t)g->cb_priv,
				(unsigned long long *)(uintptr_t)(g->cb_priv + (size_t)n * sizeof(struct gpusys_port_lock)));
		d->warp_futures = (uint32_t *)(uintptr_t)(g->cb_priv + (size_t)n * sizeof(struct gpusys_port_lock) +
							  sizeof(unsigned long long));
		d->warp_slots = g->warp_slots;
		d->dma = gpusys_dma_cuda_device(g->dma); /* callbacks' large payloads go by the copy engine too */
		if (g->dma && gpusys_dma_cuda_allow(g->dma, (uint64_t)dbase, g->cb_bytes) < 0)
			d->dma = NULL; /* (a handle has one callback channel: never) */
		if ((r = cu->cuMemAlloc(&g->cb_dev, sizeof(*d))) != CUDA_SUCCESS) {
			g->cb_dev = 0;
			rc = cu_err(g, r, "cuMemAlloc(callbacks)");
		} else if ((r = cu->cuMemcpyHtoD(g->cb_dev, d, sizeof(*d))) != CUDA_SUCCESS) {
			rc = cu_err(g, r, "cuMemcpyHtoD(callbacks)");
		}
	}
	if (rc) {
		if (g->cb_dev)
			cu->cuMemFree(g->cb_dev);
		if (g->cb_priv)
			cu->cuMemFree(g->cb_priv);
		if (g->cb_host)
			cu->cuMemHostUnregister(g->cb_host);
		g->cb_dev = g->cb_priv = 0;
		g->cb_host = NULL;
		ctx_pop(g);
		gpusys_callbacks_destroy(cb);
		goto out;
	}
	ctx_pop(g);
	g->dev.callbacks = (const gpusys_dev_t *)(uintptr_t)g->cb_dev;
	/* Published last: gpusys_device and synchronize read it unlocked. */
	__atomic_store_n(&g->cb, cb, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&g->cb_lock);
	return g->cb;
}

int gpusys_register_callback(gpusys_t *g, const struct gpusys_callback_desc *d)
{
	struct gpusys_callbacks *cb = gpusys_callbacks_of(g);
	return cb ? gpusys_callbacks_register(cb, d) : -ENOMEM;
}

/* ------------------------------------------------- the in-flight hint */

/* Launches on streams named by gpusys_device_on() and not yet seen done. */
static void note_launch(gpusys_t *g, void *stream)
{
	pthread_mutex_lock(&g->streams_lock);
	unsigned i = 0;
	while (i < g->nstreams && g->streams[i].stream != stream)
		i++;
	if (i == g->nstreams && i < GPUSYS_TRACKED_STREAMS)
		g->streams[g->nstreams++] = (__typeof__(g->streams[0])){ .stream = stream };
	if (i < g->nstreams)
		g->streams[i].launches++;
	pthread_mutex_unlock(&g->streams_lock);
}

/* stream's kernels are done: forget it. true when no named stream has
 * launches left, and the hint may end. */
static bool stream_done(gpusys_t *g, void *stream)
{
	pthread_mutex_lock(&g->streams_lock);
	for (unsigned i = 0; i < g->nstreams; i++) {
		if (g->streams[i].stream == stream) {
			g->streams[i] = g->streams[--g->nstreams];
			break;
		}
	}
	bool none = g->nstreams == 0;
	pthread_mutex_unlock(&g->streams_lock);
	return none;
}

gpusys_dev_t gpusys_device_on(gpusys_t *g, void *stream)
{
	note_launch(g, stream);
	return gpusys_device(g);
}

gpusys_dev_t gpusys_device(const gpusys_t *g)
{
	struct gpusys_callbacks *cb = __atomic_load_n(&g->cb, __ATOMIC_ACQUIRE);
	if (cb)
		gpusys_callbacks_expect(cb, monotonic_ns() + GPUSYS_ACTIVE_HOLD_NS);
	/* A handle is asked for to launch a kernel: tell the daemon calls may
	 * come, so it naps rather than sleeping until the GPU's slow wake-up
	 * (abi.h, active_until_ns). */
	struct gpusys_channel_header *h = g->host;
	__atomic_store_n(&h->active_until_ns, monotonic_ns() + GPUSYS_ACTIVE_HOLD_NS, __ATOMIC_RELAXED);
	/* A daemon already sleeping deeply must hear it now, not at the
	 * kernel's first call (the same store, fence, load dozing handshake
	 * as an emulated warp's, device/lane.h). */
	gpusys_host_full_fence();
	int wake_fd = gpusys_client_wake_fd(g->client);
	if (wake_fd >= 0 && __atomic_load_n(&h->dozing, __ATOMIC_RELAXED)) {
		/* Its GPU watch on our doorbell is pending too. Left alone it
		 * fires at the kernel's first request, and the daemon's context
		 * then takes the GPU in front of that request (measured, see
		 * bench/RESULTS.md: "Kernels in flight keep the fast wake-up");
		 * rung now, it fires around the launch.
		 * The value has a bit the last one lacked: GPUSYS_RING_HOST
		 * (bit 62; device rings stay below it, abi.h), or, if that is
		 * already set, the lowest clear bit under it (+1). */
		uint64_t bell = __atomic_load_n(&h->doorbell, __ATOMIC_RELAXED);
		__atomic_store_n(&h->doorbell, (bell | GPUSYS_RING_HOST) + ((bell & GPUSYS_RING_HOST) ? 1 : 0),
				 __ATOMIC_RELAXED);
		char one = 1;
		if (write(wake_fd, &one, 1) < 0) {
			/* full pipe: the daemon is being woken anyway */
		}
	}
	return g->dev;
}

int gpusys_dma_info(const gpusys_t *g, struct gpusys_dma_info *info)
{
	struct gpusys_dma_agent_stats st;
	memset(info, 0, sizeof(*info));
	if (!g->dma)
		return -ENOTSUP;
	gpusys_dma_agent_stats(gpusys_dma_cuda_agent(g->dma), &st);
	info->copies = st.asks;
	info->bytes = st.bytes;
	info->failures = st.failures;
	info->wakes = st.wakes;
	info->batches = st.batches;
	return 0;
}

uint32_t gpusys_num_ports(const gpusys_t *g)
{
	return g->dev.num_ports;
}

uint32_t gpusys_memory_kind(const gpusys_t *g)
{
	return g->kind;
}

uint32_t gpusys_client_id(const gpusys_t *g)
{
	return ((const struct gpusys_channel_header *)g->host)->client_id;
}

uint64_t gpusys_progress(const gpusys_t *g)
{
	return gpusys_channel_progress(g->host);
}

void *gpusys_host_channel(const gpusys_t *g)
{
	return g->host;
}

uint64_t gpusys_channel_bytes(const gpusys_t *g)
{
	return g->bytes;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 0 while the daemon is there. */
static int check_alive(gpusys_t *g)
{
	const struct gpusys_channel_header *h = g->host;
	int bye = atomic_load(&g->goodbye_status);
	if (bye)
		return gpusys_set_last_error(bye, "gpusysd ended this client: %s", g->goodbye);
	if (atomic_load(&g->daemon_gone) || h->client_host_state != GPUSYS_CLIENT_HOST_OK ||
	    h->server_state == GPUSYS_SERVER_STOPPED) {
		if (!atomic_load(&g->daemon_gone) && h->server_state == GPUSYS_SERVER_STOPPED)
			read_goodbye(g); /* the hang-up may not be seen yet */
		if ((bye = atomic_load(&g->goodbye_status)))
			return gpusys_set_last_error(bye, "gpusysd ended this client: %s", g->goodbye);
		return -ESHUTDOWN;
	}
	if (!g->have_watchdog) {
		struct pollfd p = { .fd = gpusys_client_socket_fd(g->client), .events = POLLRDHUP };
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
			mark_abort(g);
			int b = atomic_load(&g->goodbye_status);
			return b ? gpusys_set_last_error(b, "gpusysd ended this client: %s", g->goodbye) : -ESHUTDOWN;
		}
	}
	return 0;
}

static void backoff(unsigned spins)
{
	if (spins < 200)
		return;
	struct timespec ts = { 0, spins < 2000 ? 10000 : 200000 };
	nanosleep(&ts, NULL);
}

/* Requests submitted on both channels (device counters, read on the copy
 * stream, which runs beside the kernels), and whether the daemon and the
 * callback pool have completed that many. */
static int read_submitted(gpusys_t *g, unsigned long long want[2])
{
	const struct gpusys_cuda *cu = g->cu;
	CUresult r;
	want[0] = want[1] = 0;
	if ((r = cu->cuMemcpyDtoHAsync(&want[0], (CUdeviceptr)(uintptr_t)g->dev.submitted, sizeof(want[0]),
				       g->copy_stream)) != CUDA_SUCCESS ||
	    (g->cb && (r = cu->cuMemcpyDtoHAsync(&want[1], (CUdeviceptr)(uintptr_t)g->cb_dev_host.submitted,
						 sizeof(want[1]), g->copy_stream)) != CUDA_SUCCESS) ||
	    (r = cu->cuStreamSynchronize(g->copy_stream)) != CUDA_SUCCESS) {
		cu_err(g, r, "reading the submitted counters");
		return -EIO;
	}
	return 0;
}

static bool all_completed(gpusys_t *g, const unsigned long long want[2])
{
	if (gpusys_channel_progress(g->host) < want[0])
		return false;
	return !g->cb || gpusys_callbacks_completed(g->cb) >= want[1];
}

/* stream is done and so is every request counted in want: the hint ends
 * unless a stream named by gpusys_device_on() still has launches. */
static void stream_finished(gpusys_t *g, void *stream)
{
	if (!stream_done(g, stream))
		return;
	__atomic_store_n(&((struct gpusys_channel_header *)g->host)->active_until_ns, 0, __ATOMIC_RELAXED);
	if (g->cb)
		gpusys_callbacks_expect(g->cb, 0);
}

/* The stream's kernels: 1 done, 0 running, or -EIO (a kernel fault). */
static int query_stream(gpusys_t *g, void *stream)
{
	CUresult r = g->cu->cuStreamQuery((CUstream)stream);
	if (r == CUDA_SUCCESS)
		return 1;
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	cu_err(g, r, "cuStreamQuery");
	return -EIO;
}

/* Emulated handles have no streams: their warps wait with
 * gpusys_emu_synchronize. */
static int not_emulated(const gpusys_t *g, const char *fn)
{
	if (g->cu)
		return 0;
	return gpusys_set_last_error(-EINVAL, "%s needs a GPU handle (emulated warps: gpusys_emu_synchronize)", fn);
}

int gpusys_query(gpusys_t *g, void *stream)
{
	unsigned long long want[2];
	int rc;

	if ((rc = not_emulated(g, "gpusys_query")) < 0)
		return rc;

	ctx_push(g);
	rc = query_stream(g, stream);
	if (rc == 1 && read_submitted(g, want) < 0)
		rc = -EIO;
	ctx_pop(g);
	if (rc <= 0)
		return rc; /* 0: kernels still running; or -EIO */
	if (!all_completed(g, want))
		return check_alive(g) < 0 ? -ESHUTDOWN : 0;
	stream_finished(g, stream);
	return 1;
}

/* A synchronize that timed out, with GPUSYS_DEBUG set: where it stood (the
 * kernels still running, or the requests they counted not all answered)
 * and the ports that wait, on both channels. */
static void debug_timeout(gpusys_t *g, int kernels_done, const unsigned long long want[2])
{
	if (!getenv("GPUSYS_DEBUG"))
		return;
	if (!kernels_done)
		fprintf(stderr, "gpusys: synchronize timed out: the stream's kernels still run\n");
	else
		fprintf(stderr,
			"gpusys: synchronize timed out: kernels done; gpusysd completed %llu of %llu requests, "
			"callbacks %llu of %llu\n",
			(unsigned long long)gpusys_channel_progress(g->host), want[0],
			(unsigned long long)(g->cb ? gpusys_callbacks_completed(g->cb) : 0), want[1]);
	channel_dump_waiting(stderr, "gpusysd", g->host);
	if (g->cb)
		callbacks_dump_stuck(stderr, g->cb);
}

int gpusys_synchronize(gpusys_t *g, void *stream, int timeout_ms)
{
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : INT64_MAX;
	unsigned long long want[2] = { 0, 0 };
	int rc = not_emulated(g, "gpusys_synchronize");

	if (rc < 0)
		return rc;

	/* 1. The stream's kernels: queried, not waited on, so a timeout and a
	 *    dead daemon are noticed while a kernel still runs. */
	ctx_push(g);
	for (unsigned spins = 0;; spins++) {
		int q = query_stream(g, stream);
		if (q == 1)
			break;
		if (q < 0) {
			rc = q;
			goto out;
		}
		if (now_ms() >= deadline) {
			rc = -ETIMEDOUT;
			debug_timeout(g, 0, want);
			goto out;
		}
		/* A kernel waiting on a dead daemon returns -ESHUTDOWN on its own
		 * (the watchdog set the flag); keep waiting for it to finish. */
		backoff(spins);
	}
	/* 2. How many requests they made (asynchronous and fire-and-forget
	 *    ones included: each was counted when sent). */
	rc = read_submitted(g, want);
out:
	ctx_pop(g);
	if (rc)
		return rc;

	/* 3. The daemon's progress, and the callback pool's. */
	for (unsigned spins = 0;; spins++) {
		if (all_completed(g, want)) {
			/* Done: the daemon may sleep deeply again (until the
			 * next gpusys_device), unless another stream that
			 * gpusys_device_on() named still runs. */
			stream_finished(g, stream);
			return 0;
		}
		if ((rc = check_alive(g)) < 0)
			return rc;
		if (now_ms() >= deadline) {
			debug_timeout(g, 1, want);
			return -ETIMEDOUT;
		}
		backoff(spins);
	}
}

void gpusys_detach(gpusys_t *g)
{
	if (g)
		release(g);
}
