/* SPDX-License-Identifier: MIT */
/*
 * Bulk copies between pageable host memory and device memory, faster than
 * cudaMemcpy from pageable memory (which the driver stages through one
 * small pinned buffer, a fraction of the pinned link's rate; measured, see
 * bench/RESULTS.md: "Bulk copies from pageable memory").
 * Multithreaded double queuing: producer threads copy the caller's pages
 * into a pool of pinned buffers while one thread keeps the DMA engine busy
 * on its own stream (the reverse for device to host); or the caller's own
 * pages are pinned in place chunk by chunk, pipelined with the DMA.
 * Below the size where that wins (measured at open), and for memory that is
 * already pinned, the driver's own copy is used: no size is slower than it.
 *
 *     gpusys_copy_t *c;
 *     gpusys_copy_open(NULL, &c);               // device 0, tuned at open
 *     gpusys_memcpy_htod(c, dev_ptr, host_ptr, n);
 *     gpusys_copy_handle_t *h;
 *     gpusys_memcpy_dtoh_async(c, host_ptr, dev_ptr, n, stream, &h);
 *     ...                                        // host work
 *     rc = gpusys_copy_wait(h);                 // 0 or -errno; frees h
 *     gpusys_copy_close(c);
 *
 * Needs no gpusysd; when the process is attached to one (gpusys_attach),
 * each copy through the engine is reported to it on the attachment's
 * connection (gpusysctl status shows them). Errors are 0 or a negative errno. Device pointers are
 * cudaMalloc / cuMemAlloc addresses (void * as in cudaMemcpy).
 */
#ifndef GPUSYS_COPY_H
#define GPUSYS_COPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpusys_copy gpusys_copy_t;
typedef struct gpusys_copy_handle gpusys_copy_handle_t;

enum gpusys_copy_path {
	GPUSYS_COPY_AUTO = 0,     /* by size, from the rates measured at open */
	GPUSYS_COPY_DRIVER = 1,   /* cuMemcpyHtoD / DtoH (cudaMemcpy) */
	GPUSYS_COPY_STAGED = 2,   /* the engine, through its pinned buffers */
	GPUSYS_COPY_IN_PLACE = 3, /* the engine, pinning the caller's pages chunk by chunk */
};

enum gpusys_copy_flags {
	/* Do not measure at open: defaults (or the options given) are used. */
	GPUSYS_COPY_NO_CALIBRATION = 1u << 0,
};

struct gpusys_copy_options {
	int cuda_device;          /* ordinal in this process's numbering */
	size_t chunk_bytes;       /* largest chunk = staging buffer size; 0: 4 MiB */
	unsigned buffers;         /* pinned staging buffers; 0: 2 per producer */
	unsigned producers;       /* 0: chosen from host copy rates measured at open */
	size_t min_engine_bytes;  /* below this the driver copies; 0: measured at
				     open (per direction); SIZE_MAX: never the engine */
	enum gpusys_copy_path path; /* force one path for every copy (benchmarks) */
	uint32_t flags;           /* enum gpusys_copy_flags */
	unsigned max_producers;   /* the most producers the engine puts to work
				     while copying, adding them while the DMA
				     waits on them; 0: the cores less one when
				     producers are measured, producers (a fixed
				     count) when given */
};

/* Environment overrides (read at open, for options left 0):
 * GPUSYS_COPY_CHUNK, GPUSYS_COPY_BUFFERS, GPUSYS_COPY_PRODUCERS,
 * GPUSYS_COPY_MAX_PRODUCERS, GPUSYS_COPY_MIN_BYTES (bytes),
 * GPUSYS_COPY_PATH (auto|driver|staged|in-place); GPUSYS_COPY_STREAMING=1:
 * producers copy into the staging buffers with streaming stores (x86-64;
 * off by default, no consistent gain measured).
 * For tests: GPUSYS_COPY_SLOW_PRODUCER_US makes the first producer hold
 * each chunk it copies that many microseconds longer. */

/* Start the engine for a device (its primary context, like the CUDA
 * runtime). -ENODEV without a driver or device, -ENOMEM. */
int gpusys_copy_open(const struct gpusys_copy_options *opts, gpusys_copy_t **ret);
/* Waits for copies in flight. Handles must have been waited on. */
void gpusys_copy_close(gpusys_copy_t *c);

/* Synchronous, like cudaMemcpy: after work already queued on the legacy
 * default stream, done when it returns. -EFAULT: dst (device) or src
 * (device) is not device memory or too small for n bytes; nothing moved. */
int gpusys_memcpy_htod(gpusys_copy_t *c, void *dst, const void *src, size_t n);
int gpusys_memcpy_dtoh(gpusys_copy_t *c, void *dst, const void *src, size_t n);

/* Asynchronous: ordered after the work queued on stream (a CUstream /
 * cudaStream_t; NULL: the legacy default stream) before the call; work
 * queued on stream after the call runs after the copy. The host side must
 * stay untouched until the handle is done. *ret: test or wait on it. */
int gpusys_memcpy_htod_async(gpusys_copy_t *c, void *dst, const void *src, size_t n, void *stream,
			     gpusys_copy_handle_t **ret);
int gpusys_memcpy_dtoh_async(gpusys_copy_t *c, void *dst, const void *src, size_t n, void *stream,
			     gpusys_copy_handle_t **ret);
/* 1 done (wait still needed to free it), 0 pending. */
int gpusys_copy_test(gpusys_copy_handle_t *h);
/* Wait, free the handle: the copy's result, 0 or -errno (never a partial
 * success). */
int gpusys_copy_wait(gpusys_copy_handle_t *h);

/* What open chose, and the rates it measured (GB/s; 0 when not measured). */
struct gpusys_copy_info {
	size_t chunk_bytes;
	unsigned buffers, producers;
	size_t min_engine_bytes[2];           /* [0] host to device, [1] device to host */
	enum gpusys_copy_path large_path[2];  /* path above min_engine_bytes */
	double host_copy_gbps_1;              /* one thread, pageable to pinned */
	double host_copy_gbps_n;              /* producers threads together */
	double link_gbps;                     /* pinned host to device DMA */
	double calibration_ms;                /* time open spent measuring */
	uint64_t chunks_in_place, pin_fallbacks;
	/* While copying: producers is the count chosen at open; the engine
	 * adds producers (up to producers_max) while the DMA waits on them and
	 * takes back one that did not raise the rate. */
	unsigned producers_now, producers_max;
	uint64_t producers_added, producers_removed;
	double last_copy_gbps;                /* the last copy through the engine */
	/* Each copy through the engine is reported to gpusysd when the
	 * process is attached to one (gpusysctl status shows them): sent, and
	 * dropped because the connection had no room (a copy never waits for
	 * its report). Neither counts without an attachment. */
	uint64_t reports_sent, reports_dropped;
};
void gpusys_copy_get_info(gpusys_copy_t *c, struct gpusys_copy_info *ret);
/* Change the forced path (GPUSYS_COPY_AUTO: by size again). */
void gpusys_copy_set_path(gpusys_copy_t *c, enum gpusys_copy_path path);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_COPY_H */
