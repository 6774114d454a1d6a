/* SPDX-License-Identifier: MIT */
/*
 * Large transfers between a descriptor and memory, cut into chunks (1 MiB
 * unless set) that the calling thread and a few shared I/O threads take in
 * turn: one thread copies page cache at about 10 GB/s, the link to a GPU
 * does 50.
 * Used by the services that move bulk data (files today); each starts the
 * threads in its start hook and stops them in its stop hook (counted: the
 * last stop joins them).
 */
#ifndef GPUSYSD_UTIL_PARALLEL_IO_H
#define GPUSYSD_UTIL_PARALLEL_IO_H

#include <stdbool.h>
#include <stdint.h>

#define PARALLEL_IO_MAX_THREADS 16u
/* Below this a transfer is not worth splitting. */
#define PARALLEL_IO_MIN (UINT64_C(2) << 20)

/* Chunks: at least 64 KiB, multiples of it (a smaller figure, 0 included,
 * means the default). */
#define PARALLEL_IO_MIN_CHUNK (UINT64_C(64) << 10)
#define PARALLEL_IO_DEFAULT_CHUNK (UINT64_C(1) << 20)

/* Set by the first caller of parallel_io_start (later ones share its
 * threads). threads: 0, the caller's thread alone does the work; at most
 * PARALLEL_IO_MAX_THREADS and one less than the CPUs online. chunk: bytes
 * per chunk. spin_us: how long an idle I/O thread, and a caller waiting
 * for its job's other chunks, spin before sleeping (0: never). */
struct parallel_io_config {
	unsigned threads;
	uint64_t chunk;
	unsigned spin_us;
};

/* 0 or -errno. */
int parallel_io_start(const struct parallel_io_config *cfg);
void parallel_io_stop(void);

/* pread (write_op false) or pwrite len bytes between buf and fd at off, in
 * parallel. The bytes transferred before the first short or failed chunk,
 * or -errno if the first chunk failed. The I/O threads only ever pread and
 * pwrite descriptors already open, so they need no credentials of their
 * own and wait for nothing but work. */
int64_t parallel_io(int fd, bool write_op, uint8_t *buf, int64_t off, uint64_t len);

/* pwrite len bytes from buf to the regular file open as wr_fd, at off, by
 * copying into a shared mapping of the file in parallel: writes to one file
 * through write(2) serialise on its inode lock (no faster from 16 threads
 * than from one), copies into a mapping do not (measured, see
 * bench/RESULTS.md: "GPU-initiated writes through a shared mapping"). rw_fd: the same file open for reading and writing (a
 * mapping needs both). The last page goes first through wr_fd so the file
 * reaches off + len; a chunk whose copy faults (a concurrent truncation, a
 * full file system) is written with pwrite instead. Returns as parallel_io;
 * on a short result the last page may be written beyond it. */
int64_t parallel_io_write_mapped(int wr_fd, int rw_fd, uint8_t *buf, int64_t off, uint64_t len);

#endif
