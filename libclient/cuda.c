/* SPDX-License-Identifier: MIT */
/*
 * libgpusys for CUDA programs (include/gpusys/gpusys.h): the channel from
 * the attach handshake, made addressable by one device.
 *
 *  - memfd channels: the attach mapping is registered with
 *    cuMemHostRegister(DEVICEMAP | PORTABLE); the device address comes from
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
 * when the daemon hangs up, writes client_host_state = ABORT in the channel:
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
#include <time.h>
#include <unistd.h>

#include "gpusys/client.h"
#include "gpusys/emulator.h" /* gpusys_channel_progress */
#include "gpusys/gpusys.h"
#include "gpusys/wire.h"
#include "dev_handle.h"
#include "../common/cuda_driver.h"

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
	gpusys_dev_t dev;
	pthread_t watchdog;
	int have_watchdog;
	int wake[2];
	atomic_int daemon_gone;
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

static int cu_err(const gpusys_t *g, CUresult r, const char *what)
{
	char buf[256];
	if (getenv("GPUSYS_DEBUG"))
		fprintf(stderr, "libgpusys: %s\n", gpusys_cuda_describe(g->cu, r, what, buf, sizeof(buf)));
	return gpusys_cuda_errno(r);
}

static void mark_abort(gpusys_t *g)
{
	atomic_store(&g->daemon_gone, 1);
	struct gpusys_channel_header *h = g->host;
	__atomic_store_n(&h->client_host_state, GPUSYS_CLIENT_HOST_ABORT, __ATOMIC_RELEASE);
}

static void *watchdog_main(void *arg)
{
	gpusys_t *g = arg;
	struct pollfd p[2] = {
		{ .fd = gpusys_client_socket_fd(g->client), .events = POLLRDHUP },
		{ .fd = g->wake[0], .events = POLLIN },
	};
	for (;;) {
		int n = poll(p, 2, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || p[1].revents)
			return NULL; /* detach */
		if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
			mark_abort(g);
			return NULL;
		}
	}
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
		return -EPROTO;
	r = cu->cuMemHostRegister(g->host, g->bytes, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
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
	if (g->client)
		gpusys_client_detach(g->client);
	free(g);
}

int gpusys_attach(const struct gpusys_options *opts, gpusys_t **ret)
{
	const struct gpusys_cuda *cu;
	char msg[256];
	CUresult r;
	int rc, v = 0;

	int device = opts ? opts->cuda_device : 0;
	rc = gpusys_cuda_probe(device, &cu, msg, sizeof(msg));
	if (rc < 0) {
		if (getenv("GPUSYS_DEBUG"))
			fprintf(stderr, "libgpusys: %s\n", msg);
		return rc;
	}
	gpusys_t *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->cu = cu;
	g->ordinal = device;
	g->wake[0] = g->wake[1] = -1;

	if ((r = cu->cuDeviceGet(&g->cudev, device)) != CUDA_SUCCESS) {
		rc = cu_err(g, r, "cuDeviceGet");
		goto fail;
	}
	if ((r = cu->cuDevicePrimaryCtxRetain(&g->ctx, g->cudev)) != CUDA_SUCCESS) {
		g->ctx = NULL;
		rc = cu_err(g, r, "cuDevicePrimaryCtxRetain");
		goto fail;
	}
	if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, g->cudev) != CUDA_SUCCESS || v < 0)
		v = 0;
	g->numa_id = v;

	/* Default: 8 ports per SM, not one per resident warp (64 per SM). No
	 * warp waits on another for a port except while that one's request is
	 * in flight, so fewer ports cannot deadlock (tests/gpu/test_allwarps
	 * runs every resident warp over 7 ports); but the daemon's pollers scan
	 * every port on every pass (~1.1 ns a port): with 8448 ports a one-warp
	 * NOOP took 6.3-12.8 us p50 on the H100, with 1056 or 132 ports
	 * 4.4-4.7 us, at the same peak throughput (bench/RESULTS.md). */
	uint32_t ports = opts ? opts->num_ports : 0;
	if (!ports) {
		int sms = 0;
		cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->cudev);
		uint64_t n = (uint64_t)(sms > 0 ? sms : 1) * 8u;
		ports = n > GPUSYS_MAX_PORTS ? GPUSYS_MAX_PORTS : (uint32_t)n;
	}

	uint32_t kinds = opts && opts->memory_kinds ? opts->memory_kinds
						     : (1u << GPUSYS_MEMORY_MEMFD) | (1u << GPUSYS_MEMORY_CUDA_VMM);
	struct gpusys_attach_opts ao = {
		.runtime_dir = opts ? opts->runtime_dir : NULL,
		.num_ports = ports,
		.cuda_device = device,
		.memory_kinds = kinds,
		.bulk_bytes = opts && (opts->flags & GPUSYS_ATTACH_NO_BULK) ? 0
			      : opts && opts->bulk_bytes			? opts->bulk_bytes
										: GPUSYS_DEFAULT_BULK_BYTES,
		.pass_stdio = true, /* print service: gpusys_printf goes where our stdout/stderr go */
		.pass_cwd = true,   /* file service: relative paths are relative to our working directory */
	};
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
		rc = -EPROTO;
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
	if (rc == 0)
		rc = gpusys_channel_check(g->host, g->bytes);
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
	if (rc == 0 && (r = cu->cuStreamCreate(&g->copy_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		g->copy_stream = NULL;
		rc = cu_err(g, r, "cuStreamCreate");
	}
	if (rc == 0 && (r = cu->cuCtxSynchronize()) != CUDA_SUCCESS)
		rc = cu_err(g, r, "cuCtxSynchronize");
	ctx_pop(g);
	if (rc < 0)
		goto fail;

	gpusys_dev_fill(&g->dev, (void *)(uintptr_t)g->dbase, g->host, (struct gpusys_port_lock *)(uintptr_t)g->priv,
			(unsigned long long *)(uintptr_t)(g->priv + (size_t)n * sizeof(struct gpusys_port_lock)));
	gpusys_dev_set_bulk_locks(&g->dev, (uint32_t *)(uintptr_t)(g->priv + (size_t)n * sizeof(struct gpusys_port_lock) +
								  sizeof(unsigned long long)));

	if (!(opts && (opts->flags & GPUSYS_ATTACH_NO_WATCHDOG))) {
		if (pipe2(g->wake, O_CLOEXEC) < 0) {
			rc = -errno;
			goto fail;
		}
		rc = -pthread_create(&g->watchdog, NULL, watchdog_main, g);
		if (rc < 0)
			goto fail;
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

gpusys_dev_t gpusys_device(const gpusys_t *g)
{
	/* A handle is asked for to launch a kernel: tell the daemon calls may
	 * come, so it naps rather than sleeping until the GPU's slow wake-up
	 * (abi.h, active_until_ns). */
	struct gpusys_channel_header *h = g->host;
	__atomic_store_n(&h->active_until_ns, monotonic_ns() + GPUSYS_ACTIVE_HOLD_NS, __ATOMIC_RELAXED);
	/* A daemon already sleeping deeply must hear it now, not at the
	 * kernel's first call (the same store, fence, load dozing handshake
	 * as an emulated warp's, device/lane.h). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	int wake_fd = gpusys_client_wake_fd(g->client);
	if (wake_fd >= 0 && __atomic_load_n(&h->dozing, __ATOMIC_RELAXED)) {
		/* Its GPU watch on our doorbell is pending too. Left alone it
		 * fires at the kernel's first request, and the daemon's context
		 * then takes the GPU for ~0.3 ms in front of that request
		 * (measured on the H100); rung now, it fires around the launch.
		 * The value has a bit the last one lacked: bit 62 (device rings
		 * stay below it), or, if that is already set, the lowest clear
		 * bit under it (+1). */
		uint64_t bell = __atomic_load_n(&h->doorbell, __ATOMIC_RELAXED);
		__atomic_store_n(&h->doorbell, (bell | (UINT64_C(1) << 62)) + ((bell >> 62 & 1) ? 1 : 0),
				 __ATOMIC_RELAXED);
		char one = 1;
		if (write(wake_fd, &one, 1) < 0) {
			/* full pipe: the daemon is being woken anyway */
		}
	}
	return g->dev;
}

uint32_t gpusys_num_ports(const gpusys_t *g)
{
	return g->dev.num_ports;
}

uint32_t gpusys_memory_kind_of(const gpusys_t *g)
{
	return g->kind;
}

uint32_t gpusys_client_id_of(const gpusys_t *g)
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
	if (atomic_load(&g->daemon_gone) || h->client_host_state != GPUSYS_CLIENT_HOST_OK ||
	    h->server_state == GPUSYS_SERVER_STOPPED)
		return -ESHUTDOWN;
	if (!g->have_watchdog) {
		struct pollfd p = { .fd = gpusys_client_socket_fd(g->client), .events = POLLRDHUP };
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
			mark_abort(g);
			return -ESHUTDOWN;
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

int gpusys_synchronize(gpusys_t *g, void *stream, int timeout_ms)
{
	const struct gpusys_cuda *cu = g->cu;
	int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : INT64_MAX;
	unsigned long long want = 0;
	CUresult r;
	int rc = 0;

	/* 1. The stream's kernels: queried, not waited on, so a timeout and a
	 *    dead daemon are noticed while a kernel still runs. */
	ctx_push(g);
	for (unsigned spins = 0;; spins++) {
		r = cu->cuStreamQuery((CUstream)stream);
		if (r == CUDA_SUCCESS)
			break;
		if (r != CUDA_ERROR_NOT_READY) {
			rc = cu_err(g, r, "cuStreamQuery");
			rc = rc == -EAGAIN ? -EIO : -EIO;
			goto out;
		}
		if (now_ms() >= deadline) {
			rc = -ETIMEDOUT;
			goto out;
		}
		/* A kernel waiting on a dead daemon returns -ESHUTDOWN on its own
		 * (the watchdog set the flag); keep waiting for it to finish. */
		backoff(spins);
	}
	/* 2. How many requests they made. */
	if ((r = cu->cuMemcpyDtoHAsync(&want, (CUdeviceptr)(uintptr_t)g->dev.submitted, sizeof(want),
				       g->copy_stream)) != CUDA_SUCCESS ||
	    (r = cu->cuStreamSynchronize(g->copy_stream)) != CUDA_SUCCESS) {
		rc = cu_err(g, r, "reading the submitted counter");
		rc = -EIO;
		goto out;
	}
out:
	ctx_pop(g);
	if (rc)
		return rc;

	/* 3. The daemon's progress. */
	for (unsigned spins = 0;; spins++) {
		if (gpusys_channel_progress(g->host) >= want) {
			/* Done: the daemon may sleep deeply again (until the
			 * next gpusys_device). */
			__atomic_store_n(&((struct gpusys_channel_header *)g->host)->active_until_ns, 0,
					 __ATOMIC_RELAXED);
			return 0;
		}
		if ((rc = check_alive(g)) < 0)
			return rc;
		if (now_ms() >= deadline)
			return -ETIMEDOUT;
		backoff(spins);
	}
}

void gpusys_detach(gpusys_t *g)
{
	if (g)
		release(g);
}
