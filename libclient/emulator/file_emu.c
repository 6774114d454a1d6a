/* SPDX-License-Identifier: MIT */
/* File calls from the host-lane emulator: device/file_client.h compiled for
 * the CPU, each thread one warp (include/gpusys/emulator/file.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpusys/emulator.h"
#include "gpusys/emulator/file.h"
#include "../device/file_client.h"
#include "bulk_emu.h"

#define L GPUSYS_EMU_LANES

struct lane_args {
	struct gpusys_file_req q[L];
	const void *body[L];
	uint32_t body_len[L];
	const void *body2[L]; /* RENAME */
	uint32_t body2_len[L];
	void *out[L];
	uint32_t cap[L];
};

static int first_error(uint64_t mask, const int64_t *ret)
{
	for (uint32_t l = 0; l < L; l++)
		if ((mask >> l & 1) && ret[l] < 0)
			return (int)ret[l];
	return 0;
}

/* Pack every lane of mask, send, unpack. Lanes already failed (ret < 0 on
 * entry, with fail set) are left out of the call. */
static int emu_call(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, struct lane_args *a, const uint64_t failed,
		    int64_t *ret)
{
	uint8_t *scratch[L] = { 0 };
	uint32_t req_len[L] = { 0 };
	uint64_t send = mask & ~failed;

	if (!mask || (mask >> L))
		return -EINVAL;
	for (uint32_t l = 0; l < L; l++) {
		if (!(send >> l & 1))
			continue;
		uint64_t n = GPUSYS_FILE_REQ_BYTES + (uint64_t)a->body_len[l] + (a->body2[l] ? 1u + a->body2_len[l] : 0);
		scratch[l] = malloc(n);
		if (!scratch[l]) {
			ret[l] = -ENOMEM;
			send &= ~((uint64_t)1 << l);
			continue;
		}
		req_len[l] = gpusys_file_pack(scratch[l], &a->q[l], a->body[l], a->body_len[l], a->body2[l],
					      a->body2_len[l]);
	}
	if (send)
		gpusys_file_rpc(dev, op, send, (const uint8_t *const *)scratch, req_len, a->out, a->cap, ret);
	for (uint32_t l = 0; l < L; l++)
		free(scratch[l]);
	return first_error(mask, ret);
}

/* A path argument: its bytes, or -ENAMETOOLONG / -EFAULT into ret. */
static uint64_t take_paths(uint64_t mask, const char *const *path, const void **body, uint32_t *body_len, int64_t *ret)
{
	uint64_t failed = 0;
	for (uint32_t l = 0; l < L; l++) {
		if (!(mask >> l & 1))
			continue;
		if (!path[l]) {
			ret[l] = -EFAULT;
			failed |= (uint64_t)1 << l;
			continue;
		}
		uint32_t n = gpusys_file_strnlen(path[l], GPUSYS_FILE_PATH_MAX);
		if (n > GPUSYS_FILE_PATH_MAX) {
			ret[l] = -ENAMETOOLONG;
			failed |= (uint64_t)1 << l;
			continue;
		}
		body[l] = path[l];
		body_len[l] = n;
	}
	return failed;
}

static void init_args(struct lane_args *a)
{
	memset(a, 0, sizeof(*a));
	for (uint32_t l = 0; l < L; l++)
		gpusys_file_req_init(&a->q[l]);
}

int gpusys_emu_file_open(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], const int flags[L],
		    const uint32_t mode[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	uint64_t failed = take_paths(mask, path, a.body, a.body_len, ret);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].flags = flags[l];
			a.q[l].mode = mode ? mode[l] : 0;
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_OPEN, mask, &a, failed, ret);
}

static int handle_only(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const gpusys_fd_t handle[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++)
		if (mask >> l & 1)
			a.q[l].handle = handle[l];
	return emu_call(dev, op, mask, &a, 0, ret);
}

int gpusys_emu_file_close(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], int64_t ret[L])
{
	return handle_only(dev, GPUSYS_OP_FILE_CLOSE, mask, handle, ret);
}

int gpusys_emu_file_fsync(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], int64_t ret[L])
{
	return handle_only(dev, GPUSYS_OP_FILE_FSYNC, mask, handle, ret);
}

int gpusys_emu_file_closedir(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], int64_t ret[L])
{
	return handle_only(dev, GPUSYS_OP_FILE_CLOSEDIR, mask, handle, ret);
}

static int rw(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const gpusys_fd_t handle[L], void *const rbuf[L],
	      const void *const wbuf[L], const uint32_t count[L], const int64_t *offset, int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++) {
		if (!(mask >> l & 1))
			continue;
		uint32_t n = count[l] < GPUSYS_FILE_LANE_MAX ? count[l] : GPUSYS_FILE_LANE_MAX;
		a.q[l].handle = handle[l];
		a.q[l].offset = offset ? offset[l] : 0;
		a.q[l].count = n;
		if (rbuf) {
			a.out[l] = rbuf[l];
			a.cap[l] = n;
		} else {
			a.body[l] = wbuf[l];
			a.body_len[l] = n;
		}
	}
	return emu_call(dev, op, mask, &a, 0, ret);
}

int gpusys_emu_file_read(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], void *const buf[L],
		    const uint32_t count[L], int64_t ret[L])
{
	return rw(dev, GPUSYS_OP_FILE_READ, mask, handle, buf, NULL, count, NULL, ret);
}

int gpusys_emu_file_write(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], const void *const buf[L],
		     const uint32_t count[L], int64_t ret[L])
{
	return rw(dev, GPUSYS_OP_FILE_WRITE, mask, handle, NULL, buf, count, NULL, ret);
}

int gpusys_emu_file_pread(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], void *const buf[L],
		     const uint32_t count[L], const int64_t offset[L], int64_t ret[L])
{
	return rw(dev, GPUSYS_OP_FILE_PREAD, mask, handle, buf, NULL, count, offset, ret);
}

int gpusys_emu_file_pwrite(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], const void *const buf[L],
		      const uint32_t count[L], const int64_t offset[L], int64_t ret[L])
{
	return rw(dev, GPUSYS_OP_FILE_PWRITE, mask, handle, NULL, buf, count, offset, ret);
}

int gpusys_emu_file_lseek(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], const int64_t offset[L],
		     const int whence[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].handle = handle[l];
			a.q[l].offset = offset[l];
			a.q[l].flags = whence[l];
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_LSEEK, mask, &a, 0, ret);
}

int gpusys_emu_file_fstat(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], struct gpusys_stat *const st[L],
		     int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].handle = handle[l];
			a.out[l] = st[l];
			a.cap[l] = sizeof(struct gpusys_stat);
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_FSTAT, mask, &a, 0, ret);
}

int gpusys_emu_file_stat(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], const int flags[L],
		    struct gpusys_stat *const st[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	uint64_t failed = take_paths(mask, path, a.body, a.body_len, ret);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].flags = flags ? flags[l] : 0;
			a.out[l] = st[l];
			a.cap[l] = sizeof(struct gpusys_stat);
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_STAT, mask, &a, failed, ret);
}

int gpusys_emu_file_readfile(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], void *const buf[L],
			const uint32_t count[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	uint64_t failed = take_paths(mask, path, a.body, a.body_len, ret);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			uint32_t c = count[l] < GPUSYS_MAX_LANE_PAYLOAD ? count[l] : GPUSYS_MAX_LANE_PAYLOAD;
			a.q[l].count = c;
			a.out[l] = buf[l];
			a.cap[l] = c;
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_READFILE, mask, &a, failed, ret);
}

int gpusys_emu_file_ftruncate(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L], const int64_t length[L],
			 int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].handle = handle[l];
			a.q[l].offset = length[l];
		}
	}
	return emu_call(dev, GPUSYS_OP_FILE_FTRUNCATE, mask, &a, 0, ret);
}

static int path_only(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const char *const path[L],
		     const uint32_t *mode, int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	uint64_t failed = take_paths(mask, path, a.body, a.body_len, ret);
	for (uint32_t l = 0; l < L; l++)
		if ((mask >> l & 1) && mode)
			a.q[l].mode = mode[l];
	return emu_call(dev, op, mask, &a, failed, ret);
}

int gpusys_emu_file_unlink(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], int64_t ret[L])
{
	return path_only(dev, GPUSYS_OP_FILE_UNLINK, mask, path, NULL, ret);
}

int gpusys_emu_file_rmdir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], int64_t ret[L])
{
	return path_only(dev, GPUSYS_OP_FILE_RMDIR, mask, path, NULL, ret);
}

int gpusys_emu_file_mkdir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], const uint32_t mode[L],
		     int64_t ret[L])
{
	return path_only(dev, GPUSYS_OP_FILE_MKDIR, mask, path, mode, ret);
}

int gpusys_emu_file_opendir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[L], int64_t ret[L])
{
	return path_only(dev, GPUSYS_OP_FILE_OPENDIR, mask, path, NULL, ret);
}

int gpusys_emu_file_rename(const gpusys_dev_t *dev, uint64_t mask, const char *const from[L], const char *const to[L],
		      int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	uint64_t failed = take_paths(mask, from, a.body, a.body_len, ret);
	failed |= take_paths(mask & ~failed, to, a.body2, a.body2_len, ret);
	for (uint32_t l = 0; l < L; l++)
		if (mask >> l & 1)
			a.q[l].path_len = a.body_len[l];
	return emu_call(dev, GPUSYS_OP_FILE_RENAME, mask, &a, failed, ret);
}

int gpusys_emu_file_readdir(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[L],
		       struct gpusys_dirent *const ent[L], int64_t ret[L])
{
	struct lane_args a;
	init_args(&a);
	for (uint32_t l = 0; l < L; l++) {
		if (mask >> l & 1) {
			a.q[l].handle = handle[l];
			a.out[l] = ent[l];
			a.cap[l] = sizeof(struct gpusys_dirent);
		}
	}
	int r = emu_call(dev, GPUSYS_OP_FILE_READDIR, mask, &a, 0, ret);
	for (uint32_t l = 0; l < L; l++)
		if ((mask >> l & 1) && ret[l] > 0)
			ret[l] = 1;
	return r;
}

/* ---------------------------------------------------------------- blocks */

static int64_t block_io(const gpusys_dev_t *dev, gpusys_fd_t handle, uint8_t *buf, uint64_t len, int64_t off, int write_op)
{
	uint64_t done = 0;

	if (!dev->bulk_slots) {
		/* No bulk area: one lane through packets. */
		while (done < len) {
			uint32_t n = len - done < GPUSYS_FILE_LANE_MAX ? (uint32_t)(len - done) : GPUSYS_FILE_LANE_MAX;
			int32_t h[L] = { handle };
			int64_t o[L] = { off < 0 ? 0 : off + (int64_t)done }, ret[L];
			uint32_t c[L] = { n };
			void *rb[L] = { buf + done };
			const void *wb[L] = { buf + done };
			if (write_op)
				rw(dev, off < 0 ? GPUSYS_OP_FILE_WRITE : GPUSYS_OP_FILE_PWRITE, 1, h, NULL, wb, c,
				   off < 0 ? NULL : o, ret);
			else
				rw(dev, off < 0 ? GPUSYS_OP_FILE_READ : GPUSYS_OP_FILE_PREAD, 1, h, rb, NULL, c,
				   off < 0 ? NULL : o, ret);
			if (ret[0] < 0)
				return done ? (int64_t)done : ret[0];
			done += (uint64_t)ret[0];
			if ((uint64_t)ret[0] < n)
				break;
		}
		return (int64_t)done;
	}

	struct gpusys_bulk_ask a = {
		.op = write_op ? GPUSYS_OP_FILE_BULK_PWRITE : GPUSYS_OP_FILE_BULK_PREAD,
		.handle = handle,
		.off = off,
	};
	return gpusys_bulk_emu_move(dev, gpusys_file_bulk_ask, &a, buf, len, write_op);
}

int64_t gpusys_emu_pread_block(const gpusys_dev_t *dev, gpusys_fd_t handle, void *buf, uint64_t len, int64_t off)
{
	if (off < 0)
		return -EINVAL;
	return block_io(dev, handle, buf, len, off, 0);
}

int64_t gpusys_emu_pwrite_block(const gpusys_dev_t *dev, gpusys_fd_t handle, const void *buf, uint64_t len, int64_t off)
{
	if (off < 0)
		return -EINVAL;
	return block_io(dev, handle, (uint8_t *)(uintptr_t)buf, len, off, 1);
}

int64_t gpusys_emu_read_block(const gpusys_dev_t *dev, gpusys_fd_t handle, void *buf, uint64_t len)
{
	return block_io(dev, handle, buf, len, -1, 0);
}

int64_t gpusys_emu_write_block(const gpusys_dev_t *dev, gpusys_fd_t handle, const void *buf, uint64_t len)
{
	return block_io(dev, handle, (uint8_t *)(uintptr_t)buf, len, -1, 1);
}
