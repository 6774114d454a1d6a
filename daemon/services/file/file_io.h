/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_FILE_IO_H
#define GPUSYSD_FILE_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/client.h"
#include "core/handles.h"

/* Whether a descriptor opened with oflags blocks (the client's view). */
bool file_wants_block(int oflags);

/* read/write/pread/pwrite (off >= 0: positioned) as the client would see
 * them on its descriptor: blocking unless it asked for O_NONBLOCK, in
 * poll() here, giving up with -EPIPE when the client hangs up. */
ssize_t file_io_call(const struct client *peer, int fd, int oflags, void *buf, size_t n, int64_t off, bool write_op);

/* A bulk transfer of an open file: in parallel for large transfers of
 * regular files, else as one read/write loop. off < 0: the current position
 * (which then moves). Bytes moved, or -errno when none were. */
int64_t file_bulk_transfer(const struct client *peer, struct handle_entry *e, bool write_op, uint8_t *buf,
			   int64_t off, uint64_t len);

#endif
