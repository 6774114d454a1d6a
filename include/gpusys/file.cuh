/* SPDX-License-Identifier: MIT */
/*
 * Files from CUDA kernels (the file service, include/gpusys/file.h). Pass
 * the handle from gpusys_device() to the kernel by value.
 *
 * Per-thread calls (gpusys_open ... gpusys_closedir) are warp-aggregated:
 * the lanes that reach a call together share one request and one round trip
 * to gpusysd, each with its own arguments. They return what the POSIX call
 * returns (a handle, a byte count, an offset, 0) or a negative errno
 * (-ENOENT, -EACCES, -EBADF...; -ESHUTDOWN when the daemon has gone).
 * Relative paths are relative to the working directory of the process that
 * attached. Handles 1 and 2 write to that process's stdout and stderr.
 *
 * Data of per-thread reads goes straight from the packets into buf (up to
 * 1 MiB per call: a larger read is short, as POSIX allows). Per-thread
 * writes send GPUSYS_FILE_GPU_PIECE bytes per round trip (several lanes
 * writing more than that to one handle with gpusys_write may interleave;
 * use gpusys_pwrite or the block calls).
 *
 * Block calls (gpusys_pread_block, gpusys_pwrite_block, gpusys_read_block,
 * gpusys_write_block) move large data through the channel's bulk area: every
 * thread of the block calls them with the same arguments; thread 0 asks
 * the daemon, which preads/pwrites directly into/out of a slot of the bulk
 * area (several threads at once), while the other warps copy the previous
 * half of the slot to or from buf with 16-byte loads and stores. They need a
 * bulk area (gpusys_options.bulk_bytes, bounded by the daemon's
 * channel_bulk_bytes); without one they fall back to packets, slowly.
 * Every thread gets the same result: bytes moved (short only at the end of
 * the file) or -errno. Keep blocks of one grid on separate file ranges.
 *
 * Blocks of 1024 threads: declare the kernel __launch_bounds__(1024, 1),
 * else its launch fails with "too many resources requested"; blocks of up
 * to 512 threads need nothing. A block of 1024 may have 64 registers per
 * thread, and ptxas (CUDA 13.0, sm_90) gives a kernel that declares nothing
 * and moves its block's share of a range with gpusys_pread_block 102
 * registers (gpusys_pwrite_block 114, one then the other 122; socket.cuh's
 * send and recv 96). tests/file/block-registers.sh checks, with every nvcc
 * build, the two limits this advice rests on: 64 declared, 128 (blocks of
 * 512) not.
 * Why the calls cannot fit in 64 by themselves (measured, issue 27): ptxas
 * compiles a __noinline__ call that it can resolve together with its
 * caller, numbering the callee's registers above every value live at the
 * call, so moving thread 0's request out of line adds its registers (about
 * 56) to the copy loop's and the caller's instead of overlapping them.
 * Through a pointer that ptxas cannot follow, a call is compiled to the ABI
 * and the kernel needs only its largest piece; but compiled so, one request
 * of the port protocol alone takes 64-72 registers and the packets fallback
 * (no bulk area) 72-114. And nothing a header compiles sees the bounds of
 * the kernel it is called from, so no compile-time error is possible:
 * gpusys_block_kernel_check() (host side, below) says before a launch
 * whether it would fail, and what to declare. Say the 1: with
 * __launch_bounds__(1024) alone, ptxas caps such a kernel at 32 registers
 * and the copy loop spills (bench/RESULTS.md, "GPU-initiated reads").
 * -maxrregcount=64 for the whole file, or __maxnreg__(64) on the kernel
 * (CUDA 12.4 and later), also fit.
 *
 * Local memory: calls that take a path use a 4 KiB + 48 B local buffer
 * (rename twice that), so kernels calling them reserve that much per thread.
 */
#ifndef GPUSYS_FILE_CUH
#define GPUSYS_FILE_CUH

#include <fcntl.h> /* O_* flags: Linux values, passed through */
#include <stdint.h>
#include <stdio.h> /* gpusys_block_kernel_check */
#include <unistd.h> /* SEEK_* */

#include "gpusys/dev.h"
#include "gpusys/file.h"
#include "gpusys/device/file_client.h"
#include "gpusys/device/bulk_block.cuh"
#include "gpusys/future.cuh"

#define GPUSYS_FILE_GPU_PIECE (4096u - GPUSYS_FILE_REQ_BYTES)

/* One call of the calling lane, with the lanes of mask. wait_room: sent
 * again while the daemon has no room for its answers yet (abi.h); false
 * only for the block calls' packets fallback (gpusys_file_rpc_once). */
static __device__ __forceinline__ long long gpusys_file_call1(const gpusys_dev_t &dev, uint16_t op, uint64_t mask,
							      uint8_t *scratch, uint32_t req_len, void *out,
							      uint32_t out_cap, bool wait_room = true)
{
	const uint8_t *req[1] = { scratch };
	uint32_t rl[1] = { req_len }, cap[1] = { out_cap };
	void *o[1] = { out };
	int64_t ret[1] = { 0 };
	if (wait_room)
		gpusys_file_rpc(&dev, op, mask, req, rl, o, cap, ret);
	else
		gpusys_file_rpc_once(&dev, op, mask, req, rl, o, cap, ret);
	return (long long)ret[0];
}

/* A path argument, checked by every lane that arrived (the active ones):
 * *n gets its length and *mask the lanes whose path is usable, which go on
 * to make the call. 0, or this lane's -EFAULT / -ENAMETOOLONG. */
static __device__ __forceinline__ long long gpusys_file_path_check(const char *path, uint32_t *n, uint64_t *mask)
{
	uint64_t active = (uint64_t)__activemask();
	*n = path ? gpusys_file_strnlen(path, GPUSYS_FILE_PATH_MAX) : 0;
	long long err = !path ? -EFAULT : *n > GPUSYS_FILE_PATH_MAX ? -ENAMETOOLONG : 0;
	*mask = (uint64_t)__ballot_sync((unsigned)active, err == 0);
	return err;
}

/* A call whose argument is one path (and fixed fields in q). */
static __device__ long long gpusys_file_path_call(const gpusys_dev_t &dev, uint16_t op, struct gpusys_file_req &q,
						  const char *path, void *out, uint32_t out_cap)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + GPUSYS_FILE_PATH_MAX];
	uint32_t n;
	uint64_t mask;
	long long err = gpusys_file_path_check(path, &n, &mask);
	if (err)
		return err;
	uint32_t len = gpusys_file_pack(scratch, &q, path, n, 0, 0);
	return gpusys_file_call1(dev, op, mask, scratch, len, out, out_cap);
}

static __device__ long long gpusys_file_handle_call(const gpusys_dev_t &dev, uint16_t op, struct gpusys_file_req &q,
						    void *out, uint32_t out_cap, bool wait_room = true)
{
	uint64_t mask = (uint64_t)__activemask();
	return gpusys_file_call1(dev, op, mask, (uint8_t *)&q, GPUSYS_FILE_REQ_BYTES, out, out_cap, wait_room);
}

/* --------------------------------------------------------- per thread */

static __device__ long long gpusys_open(gpusys_dev_t dev, const char *path, int flags, unsigned mode = 0)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.flags = flags;
	q.mode = mode;
	return gpusys_file_path_call(dev, GPUSYS_OP_FILE_OPEN, q, path, 0, 0);
}

static __device__ long long gpusys_close(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return gpusys_file_handle_call(dev, GPUSYS_OP_FILE_CLOSE, q, 0, 0);
}

static __device__ long long gpusys_file_read_op(gpusys_dev_t dev, uint16_t op, gpusys_fd_t h, void *buf,
						unsigned long long n, long long off, bool wait_room = true)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	uint32_t c = n < GPUSYS_MAX_LANE_PAYLOAD ? (uint32_t)n : GPUSYS_MAX_LANE_PAYLOAD;
	q.handle = (int32_t)h;
	q.offset = off;
	q.count = c;
	return gpusys_file_handle_call(dev, op, q, buf, c, wait_room);
}

static __device__ long long gpusys_read(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n)
{
	return gpusys_file_read_op(dev, GPUSYS_OP_FILE_READ, h, buf, n, 0);
}

static __device__ long long gpusys_pread(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n, long long off)
{
	return gpusys_file_read_op(dev, GPUSYS_OP_FILE_PREAD, h, buf, n, off);
}

/* Write in pieces until done, a short piece or an error. */
static __device__ long long gpusys_file_write_op(gpusys_dev_t dev, uint16_t op, gpusys_fd_t h, const void *buf,
						 unsigned long long n, long long off, bool wait_room = true)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + GPUSYS_FILE_GPU_PIECE];
	unsigned long long done = 0;
	do {
		uint32_t piece = n - done < GPUSYS_FILE_GPU_PIECE ? (uint32_t)(n - done) : GPUSYS_FILE_GPU_PIECE;
		struct gpusys_file_req q;
		gpusys_file_req_init(&q);
		q.handle = (int32_t)h;
		q.offset = off + (long long)done;
		uint32_t len = gpusys_file_pack(scratch, &q, (const uint8_t *)buf + done, piece, 0, 0);
		long long r = gpusys_file_call1(dev, op, (uint64_t)__activemask(), scratch, len, 0, 0, wait_room);
		if (r < 0)
			return done ? (long long)done : r;
		done += (unsigned long long)r;
		if ((uint32_t)r < piece)
			break;
	} while (done < n);
	return (long long)done;
}

static __device__ long long gpusys_write(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long n)
{
	return gpusys_file_write_op(dev, GPUSYS_OP_FILE_WRITE, h, buf, n, 0);
}

static __device__ long long gpusys_pwrite(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long n,
					  long long off)
{
	return gpusys_file_write_op(dev, GPUSYS_OP_FILE_PWRITE, h, buf, n, off);
}

static __device__ long long gpusys_lseek(gpusys_dev_t dev, gpusys_fd_t h, long long off, int whence)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	q.offset = off;
	q.flags = whence;
	return gpusys_file_handle_call(dev, GPUSYS_OP_FILE_LSEEK, q, 0, 0);
}

/* 0 or -errno (the struct on success). */
static __device__ int gpusys_fstat(gpusys_dev_t dev, gpusys_fd_t h, struct gpusys_stat *st)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	long long r = gpusys_file_handle_call(dev, GPUSYS_OP_FILE_FSTAT, q, st, sizeof(*st));
	return r < 0 ? (int)r : 0;
}

/* flags: 0, or AT_SYMLINK_NOFOLLOW (0x100) for lstat. 0 or -errno. */
static __device__ int gpusys_stat(gpusys_dev_t dev, const char *path, struct gpusys_stat *st, int flags = 0)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.flags = flags;
	long long r = gpusys_file_path_call(dev, GPUSYS_OP_FILE_STAT, q, path, st, sizeof(*st));
	return r < 0 ? (int)r : 0;
}

/* The whole regular file at path into buf, in one round trip (open, fstat,
 * read to the end and close, made by the daemon as the client): its length
 * (at most n, and at most GPUSYS_MAX_LANE_PAYLOAD), or -EFBIG when it holds
 * more than n bytes (read it with gpusys_open and gpusys_pread), -EISDIR for
 * a directory, -EINVAL for anything but a regular file, or the open's
 * -errno. */
static __device__ long long gpusys_readfile(gpusys_dev_t dev, const char *path, void *buf, unsigned long long n)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	uint32_t c = n < GPUSYS_MAX_LANE_PAYLOAD ? (uint32_t)n : GPUSYS_MAX_LANE_PAYLOAD;
	q.count = c;
	return gpusys_file_path_call(dev, GPUSYS_OP_FILE_READFILE, q, path, buf, c);
}

static __device__ int gpusys_fsync(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return (int)gpusys_file_handle_call(dev, GPUSYS_OP_FILE_FSYNC, q, 0, 0);
}

static __device__ int gpusys_ftruncate(gpusys_dev_t dev, gpusys_fd_t h, long long length)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	q.offset = length;
	return (int)gpusys_file_handle_call(dev, GPUSYS_OP_FILE_FTRUNCATE, q, 0, 0);
}

static __device__ int gpusys_unlink(gpusys_dev_t dev, const char *path)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	return (int)gpusys_file_path_call(dev, GPUSYS_OP_FILE_UNLINK, q, path, 0, 0);
}

static __device__ int gpusys_rmdir(gpusys_dev_t dev, const char *path)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	return (int)gpusys_file_path_call(dev, GPUSYS_OP_FILE_RMDIR, q, path, 0, 0);
}

static __device__ int gpusys_mkdir(gpusys_dev_t dev, const char *path, unsigned mode)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.mode = mode;
	return (int)gpusys_file_path_call(dev, GPUSYS_OP_FILE_MKDIR, q, path, 0, 0);
}

static __device__ long long gpusys_opendir(gpusys_dev_t dev, const char *path)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	return gpusys_file_path_call(dev, GPUSYS_OP_FILE_OPENDIR, q, path, 0, 0);
}

/* 1 with *ent filled, 0 at the end of the directory, or -errno. */
static __device__ int gpusys_readdir(gpusys_dev_t dev, gpusys_fd_t h, struct gpusys_dirent *ent)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	long long r = gpusys_file_handle_call(dev, GPUSYS_OP_FILE_READDIR, q, ent, sizeof(*ent));
	return r < 0 ? (int)r : r > 0 ? 1 : 0;
}

static __device__ int gpusys_closedir(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return (int)gpusys_file_handle_call(dev, GPUSYS_OP_FILE_CLOSEDIR, q, 0, 0);
}

static __device__ int gpusys_rename(gpusys_dev_t dev, const char *from, const char *to)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + 2 * GPUSYS_FILE_PATH_MAX + 1];
	uint64_t active = (uint64_t)__activemask();
	uint32_t n1 = from ? gpusys_file_strnlen(from, GPUSYS_FILE_PATH_MAX) : 0;
	uint32_t n2 = to ? gpusys_file_strnlen(to, GPUSYS_FILE_PATH_MAX) : 0;
	int err = !from || !to ? -EFAULT : n1 > GPUSYS_FILE_PATH_MAX || n2 > GPUSYS_FILE_PATH_MAX ? -ENAMETOOLONG : 0;
	uint64_t mask = (uint64_t)__ballot_sync((unsigned)active, err == 0);
	if (err)
		return err;
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.path_len = n1;
	uint32_t len = gpusys_file_pack(scratch, &q, from, n1, to, n2);
	return (int)gpusys_file_call1(dev, GPUSYS_OP_FILE_RENAME, mask, scratch, len, 0, 0);
}

/* ------------------------------------------------ asynchronous forms */

/* Each returns a future (include/gpusys/future.cuh); gpusys_wait gives what
 * the synchronous call returns. The request (path, data) is sent before the
 * call returns, so its buffers may be reused at once; a read's buf must
 * stay valid until the future is waited. An asynchronous write sends at
 * most GPUSYS_FILE_GPU_PIECE bytes (a larger one is short, as POSIX
 * allows): loop, or use gpusys_pwrite / the block calls. */

namespace gpusys_file_detail {

static __device__ gpusys_future_t start(const gpusys_dev_t &dev, uint16_t op, uint16_t flags, uint64_t mask,
					const uint8_t *req, uint32_t req_len, void *out, uint32_t cap)
{
	gpusys_future_t f;
	gpusys_future_detail::init(f, GPUSYS_FUTURE_FILE, out, cap);
	f.file_data = (uint8_t)gpusys_file_op_returns_data(op);
	const void *inv[1] = { req };
	uint32_t lenv[1] = { req_len }, capv[1] = { f.file_data ? cap : (uint32_t)sizeof(f.val) };
	gpusys_rpc_start(&dev, op, flags, mask, inv, lenv, capv, !(flags & GPUSYS_REQ_NOREPLY), &f.pd);
	gpusys_future_detail::started(dev, f);
	return f;
}

static __device__ gpusys_future_t failed(long long err)
{
	gpusys_future_t f;
	gpusys_future_detail::init(f, GPUSYS_FUTURE_FILE, 0, 0);
	f.pd.mask = gpusys_lane_active_mask();
	f.pd.phase = GPUSYS_RPC_DONE;
	f.pd.rc = (int32_t)err;
	f.pd.warp_slot = ~0u;
	f.pd.sync = 0;
	f.result = err;
	return f;
}

static __device__ gpusys_future_t path_call(const gpusys_dev_t &dev, uint16_t op, struct gpusys_file_req &q,
					    const char *path, void *out, uint32_t cap)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + GPUSYS_FILE_PATH_MAX];
	uint32_t n;
	uint64_t mask;
	long long err = gpusys_file_path_check(path, &n, &mask);
	if (err)
		return failed(err);
	uint32_t len = gpusys_file_pack(scratch, &q, path, n, 0, 0);
	return start(dev, op, 0, mask, scratch, len, out, cap);
}

static __device__ gpusys_future_t handle_call(const gpusys_dev_t &dev, uint16_t op, uint16_t flags,
					      struct gpusys_file_req &q, void *out, uint32_t cap)
{
	return start(dev, op, flags, (uint64_t)__activemask(), (const uint8_t *)&q, GPUSYS_FILE_REQ_BYTES, out,
		     cap);
}

static __device__ gpusys_future_t read_op(const gpusys_dev_t &dev, uint16_t op, gpusys_fd_t h, void *buf,
					  unsigned long long n, long long off)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	uint32_t c = n < GPUSYS_MAX_LANE_PAYLOAD ? (uint32_t)n : GPUSYS_MAX_LANE_PAYLOAD;
	q.handle = (int32_t)h;
	q.offset = off;
	q.count = c;
	return handle_call(dev, op, 0, q, buf, c);
}

static __device__ gpusys_future_t write_op(const gpusys_dev_t &dev, uint16_t op, gpusys_fd_t h, const void *buf,
					   unsigned long long n, long long off)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + GPUSYS_FILE_GPU_PIECE];
	uint32_t piece = n < GPUSYS_FILE_GPU_PIECE ? (uint32_t)n : GPUSYS_FILE_GPU_PIECE;
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	q.offset = off;
	uint32_t len = gpusys_file_pack(scratch, &q, buf, piece, 0, 0);
	return start(dev, op, 0, (uint64_t)__activemask(), scratch, len, 0, 0);
}

} /* namespace gpusys_file_detail */

static __device__ gpusys_future_t gpusys_open_async(gpusys_dev_t dev, const char *path, int flags, unsigned mode = 0)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.flags = flags;
	q.mode = mode;
	return gpusys_file_detail::path_call(dev, GPUSYS_OP_FILE_OPEN, q, path, 0, 0);
}

static __device__ gpusys_future_t gpusys_close_async(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_CLOSE, 0, q, 0, 0);
}

/* Fire-and-forget close: 0 once sent (or -ESHUTDOWN); its outcome is not
 * known (a close that fails, e.g. -EBADF, fails silently). */
static __device__ int gpusys_close_nowait(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return (int)gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_CLOSE, GPUSYS_REQ_NOREPLY, q, 0, 0).result;
}

static __device__ gpusys_future_t gpusys_read_async(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n)
{
	return gpusys_file_detail::read_op(dev, GPUSYS_OP_FILE_READ, h, buf, n, 0);
}

static __device__ gpusys_future_t gpusys_pread_async(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n,
						     long long off)
{
	return gpusys_file_detail::read_op(dev, GPUSYS_OP_FILE_PREAD, h, buf, n, off);
}

static __device__ gpusys_future_t gpusys_write_async(gpusys_dev_t dev, gpusys_fd_t h, const void *buf,
						     unsigned long long n)
{
	return gpusys_file_detail::write_op(dev, GPUSYS_OP_FILE_WRITE, h, buf, n, 0);
}

static __device__ gpusys_future_t gpusys_pwrite_async(gpusys_dev_t dev, gpusys_fd_t h, const void *buf,
						      unsigned long long n, long long off)
{
	return gpusys_file_detail::write_op(dev, GPUSYS_OP_FILE_PWRITE, h, buf, n, off);
}

static __device__ gpusys_future_t gpusys_lseek_async(gpusys_dev_t dev, gpusys_fd_t h, long long off, int whence)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	q.offset = off;
	q.flags = whence;
	return gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_LSEEK, 0, q, 0, 0);
}

/* Waited: the bytes of *st received (sizeof) or -errno. */
static __device__ gpusys_future_t gpusys_fstat_async(gpusys_dev_t dev, gpusys_fd_t h, struct gpusys_stat *st)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_FSTAT, 0, q, st, sizeof(*st));
}

static __device__ gpusys_future_t gpusys_stat_async(gpusys_dev_t dev, const char *path, struct gpusys_stat *st,
						    int flags = 0)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.flags = flags;
	return gpusys_file_detail::path_call(dev, GPUSYS_OP_FILE_STAT, q, path, st, sizeof(*st));
}

static __device__ gpusys_future_t gpusys_fsync_async(gpusys_dev_t dev, gpusys_fd_t h)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	return gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_FSYNC, 0, q, 0, 0);
}

static __device__ gpusys_future_t gpusys_ftruncate_async(gpusys_dev_t dev, gpusys_fd_t h, long long length)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.handle = (int32_t)h;
	q.offset = length;
	return gpusys_file_detail::handle_call(dev, GPUSYS_OP_FILE_FTRUNCATE, 0, q, 0, 0);
}

static __device__ gpusys_future_t gpusys_unlink_async(gpusys_dev_t dev, const char *path)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	return gpusys_file_detail::path_call(dev, GPUSYS_OP_FILE_UNLINK, q, path, 0, 0);
}

static __device__ gpusys_future_t gpusys_mkdir_async(gpusys_dev_t dev, const char *path, unsigned mode)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	q.mode = mode;
	return gpusys_file_detail::path_call(dev, GPUSYS_OP_FILE_MKDIR, q, path, 0, 0);
}

static __device__ gpusys_future_t gpusys_rmdir_async(gpusys_dev_t dev, const char *path)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	return gpusys_file_detail::path_call(dev, GPUSYS_OP_FILE_RMDIR, q, path, 0, 0);
}

/* ---------------------------------------------------------------- block */

/* Packets only (no bulk slots): thread 0 moves up to 1 MiB per round trip. */
static __device__ __noinline__ long long gpusys_block_io_packets(const gpusys_dev_t &dev, int32_t h, uint8_t *buf,
						    unsigned long long len, long long off, bool write_op)
{
	__shared__ long long sh_ret;
	__syncthreads();
	if (gpusys_block_tid() == 0) {
		unsigned long long done = 0;
		long long rc = 0;
		while (done < len) {
			unsigned long long want = len - done < (1u << 20) ? len - done : (1u << 20);
			long long at = off < 0 ? off : off + (long long)done;
			/* one call site each way (READ or PREAD...: the op is an
			 * argument), not four: each inlines the whole call; tried
			 * once, the retry loop costs registers (gpusys_file_rpc_once) */
			long long r = write_op ? gpusys_file_write_op(dev, off < 0 ? GPUSYS_OP_FILE_WRITE : GPUSYS_OP_FILE_PWRITE,
								    h, buf + done, want, off < 0 ? 0 : at, false)
					       : gpusys_file_read_op(dev, off < 0 ? GPUSYS_OP_FILE_READ : GPUSYS_OP_FILE_PREAD, h,
								   buf + done, want, off < 0 ? 0 : at, false);
			if (r < 0) {
				rc = done ? 0 : r;
				break;
			}
			done += (unsigned long long)r;
			if ((unsigned long long)r < want)
				break;
		}
		sh_ret = rc < 0 ? rc : (long long)done;
	}
	__syncthreads();
	return sh_ret;
}

/* A block call: through the bulk area (device/bulk_block.cuh's loops, with
 * the file service's request), or packets where there is none. */
static __device__ long long gpusys_block_io(const gpusys_dev_t &dev, gpusys_fd_t handle, uint8_t *buf,
					    unsigned long long len, long long off, bool write_op)
{
	if (len == 0)
		return 0;
	if (!gpusys_block_bulk_usable(&dev))
		return gpusys_block_io_packets(dev, (int32_t)handle, buf, len, off, write_op);
	struct gpusys_bulk_ask a;
	a.op = write_op ? GPUSYS_OP_FILE_BULK_PWRITE : GPUSYS_OP_FILE_BULK_PREAD;
	a.handle = (int32_t)handle;
	a.flags = 0;
	a.off = off;
	if (write_op)
		return gpusys_block_bulk_write(&dev, gpusys_file_bulk_ask, &a, buf, len);
	return gpusys_block_bulk_read(&dev, gpusys_file_bulk_ask, &a, buf, len);
}

static __device__ long long gpusys_pread_block(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long len,
					       long long off)
{
	if (off < 0)
		return -EINVAL;
	return gpusys_block_io(dev, h, (uint8_t *)buf, len, off, false);
}

static __device__ long long gpusys_pwrite_block(gpusys_dev_t dev, gpusys_fd_t h, const void *buf,
						unsigned long long len, long long off)
{
	if (off < 0)
		return -EINVAL;
	return gpusys_block_io(dev, h, (uint8_t *)buf, len, off, true);
}

static __device__ long long gpusys_read_block(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long len)
{
	return gpusys_block_io(dev, h, (uint8_t *)buf, len, -1, false);
}

static __device__ long long gpusys_write_block(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long len)
{
	return gpusys_block_io(dev, h, (uint8_t *)buf, len, -1, true);
}

/*
 * Host side: whether kernel (a __global__ function, cast to const void *)
 * can be launched with blocks of threads threads, as its registers allow.
 * 0; -E2BIG when it cannot (the launch would fail with "too many resources
 * requested"), after a line on stderr that gives the kernel's registers per
 * thread and the __launch_bounds__ to declare (the block calls' usual trap:
 * see "Blocks of 1024 threads" above); -EINVAL when CUDA cannot tell
 * (cudaFuncGetAttributes failed: no device, not a kernel).
 */
static inline __host__ int gpusys_block_kernel_check(const void *kernel, unsigned threads)
{
	struct cudaFuncAttributes fa;
	if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
		return -EINVAL;
	if (fa.maxThreadsPerBlock > 0 && threads <= (unsigned)fa.maxThreadsPerBlock)
		return 0;
	fprintf(stderr,
		"gpusys: a kernel of %d registers per thread launches with at most %d threads per block, not %u: "
		"declare it __launch_bounds__(%u, 1) (gpusys/file.cuh: \"Blocks of 1024 threads\")\n",
		fa.numRegs, fa.maxThreadsPerBlock, threads, threads);
	return -E2BIG;
}

#endif /* GPUSYS_FILE_CUH */
