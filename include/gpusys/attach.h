/* SPDX-License-Identifier: MIT */
/*
 * libgpusys for CUDA programs: attach to gpusysd for a GPU, get the handle a
 * kernel receives, wait for a stream's kernels and every request they made,
 * detach. Kernels call the daemon through include/gpusys/gpusys.cuh. A
 * program includes gpusys/gpusys.h, which includes this.
 *
 *     struct gpusys_options o = { .cuda_device = 0 };
 *     gpusys_t *g;
 *     int rc = gpusys_attach(&o, &g);          // 0 or -errno
 *     if (rc) fprintf(stderr, "%s\n", gpusys_last_error());
 *     kernel<<<grid, block, 0, stream>>>(gpusys_device(g), ...);
 *     rc = gpusys_synchronize(g, stream, -1);
 *     gpusys_detach(g);
 *
 * The library uses the device's primary context (the one the CUDA runtime
 * uses), so runtime and driver-API programs share it. libcuda is loaded at
 * run time: a program linked with libgpusys starts on a machine with no
 * driver, and gpusys_attach says -ENODEV.
 *
 * The same attach serves programs with no GPU: GPUSYS_ATTACH_EMULATED maps
 * the channel for the CPU only, and emulated warps call through it
 * (include/gpusys/emulator.h: gpusys_emu_open(gpusys_host_channel(g), ...)).
 *
 * Errors are 0 or a negative errno; gpusys_strerror() names them (with the
 * protocol's meanings, e.g. -ESHUTDOWN: the daemon has gone), and after a
 * failed gpusys_attach, gpusys_last_error() says why in full (which socket
 * has no daemon, what the driver said, the daemon's refusal).
 */
#ifndef GPUSYS_ATTACH_H
#define GPUSYS_ATTACH_H

#include <stdint.h>

#include "gpusys/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpusys gpusys_t;
struct gpusys_callbacks;

/* Two slots of 32 MiB, each one block call's two halves of 16 MiB
 * (include/gpusys/file.h, GPUSYS_BULK_PREFERRED_SLOT_BYTES). Pinned host
 * memory, per client. */
#define GPUSYS_DEFAULT_BULK_BYTES (UINT64_C(64) << 20)

/* All zero (or a NULL pointer) is the usual choice: GPU 0, the default
 * runtime directory, port count and bulk area, stdio and working directory
 * passed to the daemon. */
struct gpusys_options {
	const char *runtime_dir; /* NULL: $GPUSYS_RUNTIME_DIR, else /run/gpusysd */
	int cuda_device;         /* device ordinal (in this process's numbering);
				    unused with GPUSYS_ATTACH_EMULATED */
	uint32_t num_ports;      /* 0: one per resident warp slot (SMs x warps
				    per SM; libclient/attach/cuda.c says why), capped at
				    GPUSYS_MAX_PORTS;
				    emulated: as asked (0 counts as 1); the daemon
				    may grant fewer */
	uint64_t bulk_bytes;     /* bulk area for block file transfers; 0: the
				    default, GPUSYS_DEFAULT_BULK_BYTES (the daemon
				    may grant less); GPUSYS_ATTACH_NO_BULK: none */
	uint32_t memory_kinds;   /* 0: every kind this library can import; else a
				    mask of (1u << enum gpusys_memory_kind) to force one
				    (emulated: always memfd) */
	uint32_t flags;          /* enum gpusys_attach_flags */
	uint64_t bulk_slot_bytes; /* how the bulk area is divided among block
				     calls (include/gpusys/file.h,
				     gpusys_bulk_slot_size); 0:
				     $GPUSYS_BULK_SLOT_BYTES, else 32 MiB (halves
				     of 16 MiB) where the area holds two such
				     slots, else 16 MiB. Larger slots: fewer of
				     them */
};

enum gpusys_attach_flags {
	/* No watchdog thread: the program promises to call gpusys_synchronize
	 * (which also notices a daemon that has gone). */
	GPUSYS_ATTACH_NO_WATCHDOG = 1u << 0,
	/* No bulk area: block file calls then move data through packets. */
	GPUSYS_ATTACH_NO_BULK = 1u << 1,
	/* No GPU: the channel is mapped for this process's CPU, for emulated
	 * warps (include/gpusys/emulator.h); CUDA is not loaded. Such a
	 * handle has no kernels: gpusys_device, gpusys_synchronize,
	 * gpusys_query and gpusys_callbacks_of are for GPU handles. */
	GPUSYS_ATTACH_EMULATED = 1u << 2,
	/* Do not give the daemon our stdout and stderr: the print service
	 * then has nowhere to write for this client. */
	GPUSYS_ATTACH_NO_STDIO = 1u << 3,
	/* Do not give the daemon our working directory: relative paths in
	 * file calls are then refused. */
	GPUSYS_ATTACH_NO_CWD = 1u << 4,
};

/* Connect to RUNTIME_DIR/gpusysd.sock, receive the channel, map it for
 * the device (or, emulated, for the CPU). opts NULL: all defaults. 0 (and
 * *ret set), or:
 *   -ENODEV                 no driver, no GPU, no such device
 *   -ENOENT, -ECONNREFUSED  no daemon at the runtime directory
 *   -EPROTO                 protocol version mismatch, malformed welcome
 *   -EUSERS                 the daemon serves its maximum of clients
 *   -ENOMEM                 the user's clients' channels fill user_channel_bytes
 *   -ETIMEDOUT              no welcome within 10 s
 *   any other refusal status the daemon sent, and CUDA failures as errno
 * gpusys_last_error() then says why in words. */
int gpusys_attach(const struct gpusys_options *opts, gpusys_t **ret);

/* Why the last failed gpusys_attach (or other libgpusys call that says so)
 * of this thread failed, in full: "gpusysd is not running at /run/gpusysd
 * (/run/gpusysd/gpusysd.sock: No such file or directory)", "no usable GPU:
 * cuInit: CUDA_ERROR_NO_DEVICE ...". "" when there is nothing to say; never
 * NULL. Thread-local: valid until this thread's next libgpusys call. */
const char *gpusys_last_error(void);

/* The handle kernels take by value; its pointers are device addresses.
 * Call it for each launch (it is cheap): it also tells gpusysd that kernels
 * may call soon, so the daemon keeps its fast wake-up (~0.1 ms after a long
 * quiet, a few % of a core) until gpusys_synchronize sees their requests
 * done or 30 s pass; otherwise an idle daemon sleeps at ~0.1% of a core and
 * a kernel's first call after a quiet takes ~0.4 ms. */
gpusys_dev_t gpusys_device(const gpusys_t *g);

/* Wait until the kernels queued on stream (a CUstream / cudaStream_t; NULL:
 * the legacy default stream) are done, then until the daemon has completed
 * every request they submitted (its published progress value reaches the
 * client's submitted count). timeout_ms < 0: no limit. 0, -ETIMEDOUT,
 * -ESHUTDOWN (the daemon went away), or -EIO with the CUDA error of the
 * stream (a kernel fault). */
int gpusys_synchronize(gpusys_t *g, void *stream, int timeout_ms);

/* Without blocking: 1 when the kernels queued on stream are done and so is
 * every request they made (asynchronous and fire-and-forget ones, and user
 * callbacks, included), 0 while not, or -EIO (a kernel fault), -ESHUTDOWN.
 * It reads two counters from the device (a few microseconds), never waits
 * for the kernels. Requests are counted per client, not per stream: with
 * kernels of several streams calling at once, 1 may come only once the
 * others' requests are done too (never before this stream's are). */
int gpusys_query(gpusys_t *g, void *stream);

/* gpusys_device() for a launch on stream: the in-flight hint then lasts
 * until gpusys_synchronize or gpusys_query has seen every stream named
 * this way done (plain gpusys_device() launches are not tracked per
 * stream: their hint ends at the first synchronize that finds every named
 * stream done). */
gpusys_dev_t gpusys_device_on(gpusys_t *g, void *stream);

/* User host callbacks (include/gpusys/callback.h): this client's callback
 * server, made on first use (its channel registered with the driver; a
 * kernel launched after this gets it in its handle). NULL if it could not
 * be made. gpusys_register_callback() is gpusys_callbacks_register() on
 * it: 0 or -errno. */
struct gpusys_callbacks *gpusys_callbacks_of(gpusys_t *g);
struct gpusys_callback_desc;
int gpusys_register_callback(gpusys_t *g, const struct gpusys_callback_desc *d);

/* Release the device mappings and the connection: the daemon frees the
 * channel. Kernels using the handle must be finished. */
void gpusys_detach(gpusys_t *g);

/* What the daemon granted: ports, this client's id (as gpusysctl status
 * shows it), the channel's memory kind (enum gpusys_memory_kind). */
uint32_t gpusys_num_ports(const gpusys_t *g);
uint32_t gpusys_client_id(const gpusys_t *g);
uint32_t gpusys_memory_kind(const gpusys_t *g);
/* Requests the daemon has completed on this channel so far. */
uint64_t gpusys_progress(const gpusys_t *g);
/* The channel as this process's CPU sees it, and its size: emulated warps
 * open it (gpusys_emu_open); tests and tools read its header (abi.h). */
void *gpusys_host_channel(const gpusys_t *g);
uint64_t gpusys_channel_bytes(const gpusys_t *g);

/* The DMA agent (include/gpusys/dma.h): the thread of this process that
 * copies large streams between kernels' global memory and the channel
 * with the copy engine. 0 and its figures so far, or -ENOTSUP where the handle has none
 * (GPUSYS_DMA=0 in the environment at attach, or it could not start: with
 * GPUSYS_DEBUG set, attach says why). */
struct gpusys_dma_info {
	uint64_t copies;   /* copies started, one per lane's share of a packet */
	uint64_t bytes;
	uint64_t failures; /* copies the copy engine refused (the warp copied those) */
	uint64_t wakes;    /* times a warp woke it from dozing */
	uint64_t batches;  /* calls of the copy engine: copies / batches is how many it started at once */
};
int gpusys_dma_info(const gpusys_t *g, struct gpusys_dma_info *info);

/* A description of 0 or a negative errno, with the protocol's meanings
 * (-ESHUTDOWN: "gpusysd stopped or went away", ...). Never NULL. */
const char *gpusys_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_ATTACH_H */
