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
 * Blocks of 1024 threads: the block calls' copy loops plus the request code
 * would take more than the 64 registers per thread such a block may have;
 * declare such kernels __launch_bounds__(1024, 1) (or use up to 768
 * threads), else the launch fails with "too many resources requested".
 * Say the 1: with __launch_bounds__(1024) alone, ptxas (CUDA 13.0, sm_90)
 * caps a kernel that calls the block calls at 32 registers, and the copy
 * loop spills (bench/RESULTS.md, "GPU-initiated reads").
 *
 * Local memory: calls that take a path use a 4 KiB + 48 B local buffer
 * (rename twice that), so kernels calling them reserve that much per thread.
 */
#ifndef GPUSYS_FILE_CUH
#define GPUSYS_FILE_CUH

#include <fcntl.h> /* O_* flags: Linux values, passed through */
#include <stdint.h>
#include <unistd.h> /* SEEK_* */

#include "gpusys/dev.h"
#include "gpusys/file.h"
#include "gpusys/device/file_client.h"
#include "gpusys/future.cuh"

#define GPUSYS_FILE_GPU_PIECE (4096u - GPUSYS_FILE_REQ_BYTES)

/* One call of the calling lane, with the lanes of mask. */
static __device__ __forceinline__ long long gpusys_file_call1(const gpusys_dev_t &dev, uint16_t op, uint64_t mask,
							      uint8_t *scratch, uint32_t req_len, void *out,
							      uint32_t out_cap)
{
	const uint8_t *req[1] = { scratch };
	uint32_t rl[1] = { req_len }, cap[1] = { out_cap };
	void *o[1] = { out };
	int64_t ret[1] = { 0 };
	gpusys_file_rpc(&dev, op, mask, req, rl, o, cap, ret);
	return (long long)ret[0];
}

/* A call whose argument is one path (and fixed fields in q). */
static __device__ long long gpusys_file_path_call(const gpusys_dev_t &dev, uint16_t op, struct gpusys_file_req &q,
						  const char *path, void *out, uint32_t out_cap)
{
	uint8_t scratch[GPUSYS_FILE_REQ_BYTES + GPUSYS_FILE_PATH_MAX];
	uint64_t active = (uint64_t)__activemask();
	uint32_t n = path ? gpusys_file_strnlen(path, GPUSYS_FILE_PATH_MAX) : 0;
	long long err = !path ? -EFAULT : n > GPUSYS_FILE_PATH_MAX ? -ENAMETOOLONG : 0;
	uint64_t mask = (uint64_t)__ballot_sync((unsigned)active, err == 0);
	if (err)
		return err;
	uint32_t len = gpusys_file_pack(scratch, &q, path, n, 0, 0);
	return gpusys_file_call1(dev, op, mask, scratch, len, out, out_cap);
}

static __device__ long long gpusys_file_handle_call(const gpusys_dev_t &dev, uint16_t op, struct gpusys_file_req &q,
						    void *out, uint32_t out_cap)
{
	uint64_t mask = (uint64_t)__activemask();
	return gpusys_file_call1(dev, op, mask, (uint8_t *)&q, GPUSYS_FILE_REQ_BYTES, out, out_cap);
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
						unsigned long long n, long long off)
{
	struct gpusys_file_req q;
	gpusys_file_req_init(&q);
	uint32_t c = n < GPUSYS_MAX_LANE_PAYLOAD ? (uint32_t)n : GPUSYS_MAX_LANE_PAYLOAD;
	q.handle = (int32_t)h;
	q.offset = off;
	q.count = c;
	return gpusys_file_handle_call(dev, op, q, buf, c);
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
						 unsigned long long n, long long off)
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
		long long r = gpusys_file_call1(dev, op, (uint64_t)__activemask(), scratch, len, 0, 0);
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
	uint64_t active = (uint64_t)__activemask();
	uint32_t n = path ? gpusys_file_strnlen(path, GPUSYS_FILE_PATH_MAX) : 0;
	long long err = !path ? -EFAULT : n > GPUSYS_FILE_PATH_MAX ? -ENAMETOOLONG : 0;
	uint64_t mask = (uint64_t)__ballot_sync((unsigned)active, err == 0);
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

static __device__ __forceinline__ uint32_t gpusys_block_tid(void)
{
	return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static __device__ __forceinline__ uint32_t gpusys_block_threads(void)
{
	return blockDim.x * blockDim.y * blockDim.z;
}

/* 16-byte loads each copier of a block read keeps in flight. A program may
 * define it (4 or 8) before including this header. */
#ifndef GPUSYS_BULK_COPY_DEPTH
#define GPUSYS_BULK_COPY_DEPTH 8
#endif

/* Copy n bytes from the bulk area (host memory the daemon just wrote) to
 * dst, as thread idx of cnt. Loads bypass the caches (ld.cv: a cached
 * line of system memory is treated as stale and fetched again): a slot's
 * earlier contents must never be seen. In gpusys-bench file (2026-11-25)
 * weak loads after the acquire fence (ld.L1::no_allocate), ld.relaxed.sys
 * and ld.nc (which may return stale data) were no faster than ld.cv by
 * more than 2%, so the loads that need no argument about the memory model
 * stay. GPUSYS_BULK_COPY_DEPTH loads in flight per thread: 8 copy 29% faster
 * than 4 from one block in a kernel with the registers for them (44.8
 * against 34.8 GB/s); kernels calling the block calls are compiled to 32
 * registers, where both depths read alike (bench/RESULTS.md). */
static __device__ void gpusys_bulk_copy_in(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx, uint32_t cnt)
{
	uint64_t n16 = 0;
	/* Thread 0 saw the daemon's answer (and acquired); the block barrier
	 * since then orders us after it; this orders our loads too. */
	gpusys_fence_acquire(src);
	if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
		n16 = n / 16;
		const uint4 *s = (const uint4 *)src;
		uint4 *d = (uint4 *)dst;
		const uint64_t c = cnt;
		uint64_t i = idx;
		for (; i + (GPUSYS_BULK_COPY_DEPTH - 1) * c < n16; i += GPUSYS_BULK_COPY_DEPTH * c) {
			uint4 v[GPUSYS_BULK_COPY_DEPTH];
#pragma unroll
			for (int k = 0; k < GPUSYS_BULK_COPY_DEPTH; k++)
				v[k] = __ldcv(s + i + k * c);
#pragma unroll
			for (int k = 0; k < GPUSYS_BULK_COPY_DEPTH; k++)
				d[i + k * c] = v[k];
		}
		for (; i < n16; i += c)
			d[i] = __ldcv(s + i);
	}
	const volatile uint8_t *vs = src;
	for (uint64_t i = n16 * 16 + idx; i < n; i += cnt)
		dst[i] = vs[i];
}

/* Copy n bytes of src into the bulk area, then make them visible to the
 * CPU (the caller synchronises the block before asking the daemon). */
static __device__ void gpusys_bulk_copy_out(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx, uint32_t cnt)
{
	uint64_t n16 = 0;
	if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
		n16 = n / 16;
		const uint4 *s = (const uint4 *)src;
		uint4 *d = (uint4 *)dst;
		uint64_t i = idx;
		for (; i + 3ull * cnt < n16; i += 4ull * cnt) {
			uint4 a = s[i], b = s[i + cnt], c = s[i + 2ull * cnt], e = s[i + 3ull * cnt];
			d[i] = a;
			d[i + cnt] = b;
			d[i + 2ull * cnt] = c;
			d[i + 3ull * cnt] = e;
		}
		for (; i < n16; i += cnt)
			d[i] = s[i];
	}
	for (uint64_t i = n16 * 16 + idx; i < n; i += cnt)
		dst[i] = src[i];
	__threadfence_system();
}

/* Thread 0's request, out of line: the rpc's registers stay out of the
 * copy loops, so blocks of 1024 threads fit the register file. */
static __device__ __noinline__ long long gpusys_block_rpc(const gpusys_dev_t &dev, uint16_t op, int32_t h, long long off,
							 unsigned long long count, unsigned long long bulk_off)
{
	return gpusys_bulk_rpc(&dev, op, h, off, count, bulk_off);
}

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
			long long r;
			if (write_op)
				r = off < 0 ? gpusys_write(dev, h, buf + done, want) : gpusys_pwrite(dev, h, buf + done, want, at);
			else
				r = off < 0 ? gpusys_read(dev, h, buf + done, want) : gpusys_pread(dev, h, buf + done, want, at);
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

/* Benchmarks may see where a read's time goes: defining
 * GPUSYS_BLOCK_IO_TIMING as a number of blocks before including this header
 * adds gpusys_block_io_times[that many], summed over calls by reads of the
 * block of that index (nanoseconds, %globaltimer): thread 0 waiting for the
 * daemon to fill a half, the first copier copying one, and the whole call.
 * Without it the timing compiles to nothing. */
#ifdef GPUSYS_BLOCK_IO_TIMING
struct gpusys_block_io_time {
	unsigned long long daemon_ns, copy_ns, call_ns, halves;
};
static __device__ struct gpusys_block_io_time gpusys_block_io_times[GPUSYS_BLOCK_IO_TIMING];
static __device__ __forceinline__ unsigned long long gpusys_block_io_clock(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
#define GPUSYS_BLOCK_IO_ADD(field, since)                                                                  \
	atomicAdd(&gpusys_block_io_times[blockIdx.x].field, gpusys_block_io_clock() - (since))
#define GPUSYS_BLOCK_IO_COUNT(field) atomicAdd(&gpusys_block_io_times[blockIdx.x].field, 1ull)
#else
#define gpusys_block_io_clock() 0ull
#define GPUSYS_BLOCK_IO_ADD(field, since) ((void)(since))
#define GPUSYS_BLOCK_IO_COUNT(field) ((void)0)
#endif

/*
 * The pipelined block transfer. The slot is two halves. Reading: while
 * thread 0 has the daemon fill one half with the next chunk, warps 1.. copy
 * the other half (the chunk before) to buf. Writing: while thread 0 has the
 * daemon write one half, warps 1.. fill the other with the next chunk. With
 * a single warp there is no overlap: everyone copies, then thread 0 asks.
 */
static __device__ long long gpusys_block_io(const gpusys_dev_t &dev, gpusys_fd_t handle, uint8_t *buf,
					    unsigned long long len, long long off, bool write_op)
{
	__shared__ long long sh_res[2];
	__shared__ uint32_t sh_slot;
	const int32_t h = (int32_t)handle;
	const uint32_t tid = gpusys_block_tid(), nthr = gpusys_block_threads();
	const uint16_t op = write_op ? GPUSYS_OP_FILE_BULK_PWRITE : GPUSYS_OP_FILE_BULK_PREAD;

	if (len == 0)
		return 0;
	if (!dev.bulk_slots || dev.bulk_slot_bytes < 8192u)
		return gpusys_block_io_packets(dev, h, buf, len, off, write_op);

	__syncthreads(); /* an earlier call's readers of the shared words are done */
	if (tid == 0)
		sh_slot = gpusys_bulk_slot_lock(&dev, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
	__syncthreads();
	const uint64_t H = dev.bulk_slot_bytes / 2;
	const uint64_t slot_off = (uint64_t)sh_slot * dev.bulk_slot_bytes;
	uint8_t *const half0 = dev.bulk + slot_off;
	const bool overlap = nthr > 32;
	const uint32_t cidx = overlap ? tid - 32 : tid, ccnt = overlap ? nthr - 32 : nthr;
	const bool copier = !overlap || tid >= 32;
#define GPUSYS_AT(d) (off < 0 ? -1ll : off + (long long)(d))
	unsigned long long done = 0;
	long long result = 0;

	if (!write_op) {
		const unsigned long long call_t0 = gpusys_block_io_clock();
		if (tid == 0) {
			sh_res[0] = gpusys_block_rpc(dev, op, h, GPUSYS_AT(0), len < H ? len : H, slot_off);
			GPUSYS_BLOCK_IO_ADD(daemon_ns, call_t0);
		}
		__syncthreads();
		for (uint32_t i = 0;; i++) {
			const uint32_t cur = i & 1u;
			const uint64_t want = len - done < H ? len - done : H;
			long long got = sh_res[cur];
			if (got < 0) {
				result = done ? (long long)done : got;
				break;
			}
			if ((uint64_t)got > want)
				got = (long long)want;
			const bool more = (uint64_t)got == want && done + want < len;
			const uint64_t next = done + want;
			const uint64_t next_want = len - next < H ? len - next : H;
			if (!overlap) {
				gpusys_bulk_copy_in(buf + done, half0 + cur * H, (uint64_t)got, cidx, ccnt);
				__syncthreads();
			}
			const unsigned long long t0 = gpusys_block_io_clock();
			if (tid == 0 && more) {
				sh_res[cur ^ 1u] = gpusys_block_rpc(dev, op, h, GPUSYS_AT(next), next_want,
								   slot_off + (cur ^ 1u) * H);
				GPUSYS_BLOCK_IO_ADD(daemon_ns, t0);
			} else if (overlap && copier) {
				gpusys_bulk_copy_in(buf + done, half0 + cur * H, (uint64_t)got, cidx, ccnt);
				if (tid == 32) {
					GPUSYS_BLOCK_IO_ADD(copy_ns, t0);
					GPUSYS_BLOCK_IO_COUNT(halves);
				}
			}
			__syncthreads();
			done += (uint64_t)got;
			if (!more) {
				result = (long long)done;
				break;
			}
		}
		if (tid == 0)
			GPUSYS_BLOCK_IO_ADD(call_ns, call_t0);
	} else {
		gpusys_bulk_copy_out(half0, buf, len < H ? len : H, tid, nthr);
		__syncthreads();
		for (uint32_t i = 0;; i++) {
			const uint32_t cur = i & 1u;
			const uint64_t want = len - done < H ? len - done : H;
			const bool has_next = done + want < len;
			const uint64_t next = done + want;
			const uint64_t next_want = has_next ? (len - next < H ? len - next : H) : 0;
			if (tid == 0)
				sh_res[cur] = gpusys_block_rpc(dev, op, h, GPUSYS_AT(done), want, slot_off + cur * H);
			else if (overlap && copier && has_next)
				gpusys_bulk_copy_out(half0 + (cur ^ 1u) * H, buf + next, next_want, cidx, ccnt);
			__syncthreads();
			long long put = sh_res[cur];
			if (put < 0) {
				result = done ? (long long)done : put;
				break;
			}
			if ((uint64_t)put > want)
				put = (long long)want;
			done += (uint64_t)put;
			if ((uint64_t)put < want || !has_next) {
				result = (long long)done;
				break;
			}
			if (!overlap) {
				gpusys_bulk_copy_out(half0 + (cur ^ 1u) * H, buf + next, next_want, cidx, ccnt);
				__syncthreads();
			}
		}
	}
#undef GPUSYS_AT
	__syncthreads();
	if (tid == 0)
		gpusys_bulk_slot_unlock(&dev, sh_slot);
	return result;
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

#endif /* GPUSYS_FILE_CUH */
