/* SPDX-License-Identifier: MIT */
/*
 * The file service: opcodes, request and response layouts shared by the
 * device code (include/gpusys/file.cuh), the host-lane emulator
 * (include/gpusys/emulator/file.h), the client protocol (device/file_client.h) and
 * the daemon (daemon/services/file/service_file.c). Plain C that nvcc also accepts.
 *
 * Every call is a port request (include/gpusys/abi.h) with one lane payload
 * per calling lane:
 *
 *   struct gpusys_file_req   fixed 48 bytes (below)
 *   body                     path bytes (no NUL; rename: old, one NUL, new),
 *                            or the data of WRITE/PWRITE
 *
 * Results, per lane, as POSIX gives them:
 *   lane status < 0          -errno of the call (ENOENT, EACCES, EBADF...)
 *   lane status 0            success; the response payload is
 *                              READ/PREAD        the bytes read (length = result)
 *                              READFILE          the file's bytes (length = result)
 *                              FSTAT/STAT        struct gpusys_stat
 *                              READDIR           struct gpusys_dirent, or
 *                                                nothing at the end of the directory
 *                              everything else   int64_t value (handle, bytes
 *                                                written, offset, 0)
 * Client functions return that value or the -errno (the convention of Linux
 * system calls before libc puts it in errno).
 *
 * Handles are small per-client numbers, never the daemon's descriptors: a
 * handle names an entry of the client's own table and carries that entry's
 * generation, so a closed, stale or invented handle, or one of another
 * client, gives -EBADF. Handles 1 and 2 are the stdout and stderr the client
 * passed at attach (write only; -EBADF when it passed none).
 *
 * Paths: absolute, or relative to the working directory the client passed at
 * attach (gpusys_attach_opts.pass_cwd). A relative path from a client that
 * passed none gets -EINVAL. Longer than GPUSYS_FILE_PATH_MAX: -ENAMETOOLONG.
 * The daemon opens as the client: with its uid, gid and groups.
 *
 * READFILE is open, fstat, read to the end and close in one call (Linux has
 * no such system call; the daemon makes those four as the client): the path
 * must name a regular file (-EISDIR for a directory, -EINVAL for anything
 * else, whose read might wait or never end) of at most count bytes (-EFBIG
 * when it holds more; read it with OPEN and PREAD). A kernel serving files
 * makes one round trip where it made four. Added in ABI 12 without a
 * bump: a daemon that predates it answers -ENOSYS.
 *
 * Bulk transfers (BULK_PREAD/BULK_PWRITE): data moves through the channel's
 * bulk area instead of packets. The client owns [bulk_off, bulk_off + count)
 * of the area for the duration of the call (its slot locks are private:
 * struct gpusys_dev.bulk_locks); the daemon checks that the range lies inside
 * the area and preads/pwrites it directly. Result: bytes transferred.
 */
#ifndef GPUSYS_FILE_H
#define GPUSYS_FILE_H

#include <stdint.h>

#include "gpusys/abi.h"

enum gpusys_file_opcode {
	GPUSYS_OP_FILE_OPEN = GPUSYS_OP_FILE_FIRST, /* path, flags (O_*), mode -> handle */
	GPUSYS_OP_FILE_CLOSE,                       /* handle -> 0 */
	GPUSYS_OP_FILE_READ,                        /* handle, count (response capacity) -> data */
	GPUSYS_OP_FILE_WRITE,                       /* handle, body -> bytes written */
	GPUSYS_OP_FILE_PREAD,                       /* handle, offset -> data */
	GPUSYS_OP_FILE_PWRITE,                      /* handle, offset, body -> bytes written */
	GPUSYS_OP_FILE_LSEEK,                       /* handle, offset, flags = whence -> offset */
	GPUSYS_OP_FILE_FSTAT,                       /* handle -> struct gpusys_stat */
	GPUSYS_OP_FILE_STAT,                        /* path, flags (AT_SYMLINK_NOFOLLOW) -> stat */
	GPUSYS_OP_FILE_FSYNC,                       /* handle -> 0 */
	GPUSYS_OP_FILE_FTRUNCATE,                   /* handle, offset = length -> 0 */
	GPUSYS_OP_FILE_UNLINK,                      /* path -> 0 */
	GPUSYS_OP_FILE_RENAME,                      /* old NUL new -> 0 */
	GPUSYS_OP_FILE_MKDIR,                       /* path, mode -> 0 */
	GPUSYS_OP_FILE_RMDIR,                       /* path -> 0 */
	GPUSYS_OP_FILE_OPENDIR,                     /* path -> handle */
	GPUSYS_OP_FILE_READDIR,                     /* handle -> struct gpusys_dirent or nothing */
	GPUSYS_OP_FILE_CLOSEDIR,                    /* handle -> 0 */
	GPUSYS_OP_FILE_READFILE,                    /* path, count -> the whole regular file (below) */
	GPUSYS_OP_FILE_BULK_PREAD = GPUSYS_OP_FILE_FIRST + 0x20, /* handle, offset, count, bulk_off */
	GPUSYS_OP_FILE_BULK_PWRITE,                 /* handle, offset, count, bulk_off */
};

#define GPUSYS_FILE_PATH_MAX 4096u      /* bytes of a path, like PATH_MAX (without the NUL) */
/* Open files, directories and sockets per client: the daemon's
 * max_handles_per_client setting, 16384 unless set (up to 65536); EMFILE
 * past it. A handle is a positive int32 (an index and a generation). */
#define GPUSYS_FILE_DEFAULT_MAX_HANDLES 16384u
/* A file, directory or socket handle, the same type on the device, in the
 * emulator and in the daemon. Calls that open one return it widened with
 * the error in one value (long long / int64_t: the handle, or -errno). */
typedef int32_t gpusys_fd_t;
#define GPUSYS_FILE_HANDLES_LIMIT 65536u
#define GPUSYS_FILE_NAME_MAX 255u
#define GPUSYS_FILE_STDOUT 1
#define GPUSYS_FILE_STDERR 2

struct gpusys_file_req {
	int32_t handle;
	int32_t flags;     /* OPEN: O_* (Linux values); LSEEK: whence; STAT: AT_SYMLINK_NOFOLLOW or 0 */
	uint32_t mode;     /* OPEN with O_CREAT, MKDIR */
	uint32_t path_len; /* RENAME: bytes of the old path (the NUL and the new path follow) */
	int64_t offset;    /* PREAD/PWRITE/BULK_*: file offset; LSEEK: offset; FTRUNCATE: length */
	uint64_t count;    /* READ/PREAD/BULK_*: bytes asked for */
	uint64_t bulk_off; /* BULK_*: where in the bulk area */
	uint64_t reserved; /* 0 */
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_file_req) == 48, "file request header layout");

/* struct stat, in a layout that does not depend on the C library. */
struct gpusys_stat {
	uint64_t dev;
	uint64_t ino;
	uint64_t nlink;
	uint32_t mode;
	uint32_t uid;
	uint32_t gid;
	uint32_t reserved0;
	uint64_t rdev;
	int64_t size;
	int64_t blksize;
	int64_t blocks;
	int64_t atime_sec, atime_nsec;
	int64_t mtime_sec, mtime_nsec;
	int64_t ctime_sec, ctime_nsec;
	int64_t reserved1;
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_stat) == 128, "gpusys_stat layout");

struct gpusys_dirent {
	uint64_t ino;
	uint32_t type;    /* DT_* */
	uint32_t namelen; /* bytes of name before its NUL */
	char name[GPUSYS_FILE_NAME_MAX + 1];
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_dirent) == 272, "gpusys_dirent layout");

/* The client's division of the bulk area: slots of GPUSYS_BULK_SLOT_BYTES
 * (a smaller area is one slot), each used by one cooperative call at a time
 * as two halves (the daemon fills one while the caller copies the other).
 * Below GPUSYS_BULK_MIN_SLOT there are no slots and bulk calls fall back to
 * packets. The division is the client's alone (the daemon bounds every
 * range to the whole area): a client may choose larger slots
 * (gpusys_options.bulk_slot_bytes), up to GPUSYS_BULK_MAX_SLOT_BYTES, so
 * that each block asks for fewer, larger halves (measured, see
 * bench/RESULTS.md: "GPU-initiated reads and what bounds them"); never
 * smaller, as the slot locks are counted with the default size. */
#define GPUSYS_BULK_SLOT_BYTES (UINT64_C(16) << 20)
/* The division a client gets when it names none, where the area holds two
 * such slots (libclient/attach/dev_handle.c): one block's halves of 16 MiB
 * read a file 1.8x faster than halves of 8 MiB (38.6 against 21.7 GB/s,
 * H200, bench/RESULTS.md "Twelfth session"); a smaller area keeps
 * GPUSYS_BULK_SLOT_BYTES. */
#define GPUSYS_BULK_PREFERRED_SLOT_BYTES (UINT64_C(32) << 20)
#define GPUSYS_BULK_MAX_SLOT_BYTES (UINT64_C(256) << 20)
#define GPUSYS_BULK_MIN_SLOT (UINT64_C(64) << 10)
#define GPUSYS_BULK_MAX_SLOTS 1024u

/* The slot size a wish for one gives: 0 or too small the default, too
 * large the most, else rounded down to a whole MiB. */
GPUSYS_ABI_FN uint64_t gpusys_bulk_slot_size(uint64_t wanted)
{
	if (wanted <= GPUSYS_BULK_SLOT_BYTES)
		return GPUSYS_BULK_SLOT_BYTES;
	if (wanted >= GPUSYS_BULK_MAX_SLOT_BYTES)
		return GPUSYS_BULK_MAX_SLOT_BYTES;
	return wanted >> 20 << 20;
}

/* Slots of an area divided in slots of slot_bytes (gpusys_bulk_slot_size). */
GPUSYS_ABI_FN uint32_t gpusys_bulk_slots_of(uint64_t bulk_bytes, uint64_t slot_bytes)
{
	if (bulk_bytes < GPUSYS_BULK_MIN_SLOT)
		return 0;
	uint64_t n = bulk_bytes / slot_bytes;
	if (n == 0)
		return 1;
	return n > GPUSYS_BULK_MAX_SLOTS ? GPUSYS_BULK_MAX_SLOTS : (uint32_t)n;
}

GPUSYS_ABI_FN uint32_t gpusys_bulk_slot_bytes_of(uint64_t bulk_bytes, uint64_t slot_bytes)
{
	uint32_t n = gpusys_bulk_slots_of(bulk_bytes, slot_bytes);
	if (n == 0)
		return 0;
	if (n == 1 && bulk_bytes < slot_bytes)
		return (uint32_t)(bulk_bytes / 8192u * 8192u); /* halves stay page aligned */
	return (uint32_t)slot_bytes;
}

/* With the default slot size. */
GPUSYS_ABI_FN uint32_t gpusys_bulk_slots(uint64_t bulk_bytes)
{
	return gpusys_bulk_slots_of(bulk_bytes, GPUSYS_BULK_SLOT_BYTES);
}

GPUSYS_ABI_FN uint32_t gpusys_bulk_slot_bytes(uint64_t bulk_bytes)
{
	return gpusys_bulk_slot_bytes_of(bulk_bytes, GPUSYS_BULK_SLOT_BYTES);
}

#endif /* GPUSYS_FILE_H */
