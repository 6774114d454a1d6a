/* SPDX-License-Identifier: MIT */
/*
 * File calls from the host-lane emulator (include/gpusys/emulator.h): the
 * same requests a warp sends (device/file_client.h), from a CPU thread
 * acting as one warp. Per-lane arguments are arrays of GPUSYS_WARP_LANES,
 * indexed by lane; only lanes in mask are read or written.
 *
 * ret[l] receives lane l's result: the value of the call (a handle, bytes,
 * an offset, 0; READDIR: 1 for an entry, 0 at the end) or a negative errno.
 * Each function returns 0 when every lane succeeded, else the first
 * negative result (in lane order). See include/gpusys/file.h for paths,
 * handles and the errors.
 *
 * One lane moves at most GPUSYS_FILE_LANE_MAX bytes per call (a longer
 * read or write is short, as POSIX allows). Large transfers belong to the
 * block calls, which go through the channel's bulk area.
 */
#ifndef GPUSYS_FILE_EMU_H
#define GPUSYS_FILE_EMU_H

#include <stdint.h>

#include "gpusys/dev.h"
#include "gpusys/file.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSYS_FILE_LANE_MAX (GPUSYS_MAX_LANE_PAYLOAD - (uint32_t)sizeof(struct gpusys_file_req))
#define GPUSYS_EMU_LANES GPUSYS_WARP_LANES

int gpusys_emu_file_open(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		    const int flags[GPUSYS_EMU_LANES], const uint32_t mode[GPUSYS_EMU_LANES],
		    int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_close(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_read(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		    void *const buf[GPUSYS_EMU_LANES], const uint32_t count[GPUSYS_EMU_LANES],
		    int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_write(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     const void *const buf[GPUSYS_EMU_LANES], const uint32_t count[GPUSYS_EMU_LANES],
		     int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_pread(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     void *const buf[GPUSYS_EMU_LANES], const uint32_t count[GPUSYS_EMU_LANES],
		     const int64_t offset[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_pwrite(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		      const void *const buf[GPUSYS_EMU_LANES], const uint32_t count[GPUSYS_EMU_LANES],
		      const int64_t offset[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_lseek(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     const int64_t offset[GPUSYS_EMU_LANES], const int whence[GPUSYS_EMU_LANES],
		     int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_fstat(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     struct gpusys_stat *const st[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
/* flags: 0 or AT_SYMLINK_NOFOLLOW (lstat). */
int gpusys_emu_file_stat(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		    const int flags[GPUSYS_EMU_LANES], struct gpusys_stat *const st[GPUSYS_EMU_LANES],
		    int64_t ret[GPUSYS_EMU_LANES]);
/* The whole regular file at path into buf, at most count bytes: its length,
 * or -EFBIG, -EISDIR, -EINVAL (include/gpusys/file.h, READFILE). */
int gpusys_emu_file_readfile(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
			void *const buf[GPUSYS_EMU_LANES], const uint32_t count[GPUSYS_EMU_LANES],
			int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_fsync(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		     int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_ftruncate(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
			 const int64_t length[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_unlink(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		      int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_rename(const gpusys_dev_t *dev, uint64_t mask, const char *const from[GPUSYS_EMU_LANES],
		      const char *const to[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_mkdir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		     const uint32_t mode[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_rmdir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		     int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_opendir(const gpusys_dev_t *dev, uint64_t mask, const char *const path[GPUSYS_EMU_LANES],
		       int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_readdir(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
		       struct gpusys_dirent *const ent[GPUSYS_EMU_LANES], int64_t ret[GPUSYS_EMU_LANES]);
int gpusys_emu_file_closedir(const gpusys_dev_t *dev, uint64_t mask, const gpusys_fd_t handle[GPUSYS_EMU_LANES],
			int64_t ret[GPUSYS_EMU_LANES]);

/* Block calls, as one emulated block (the calling thread): len bytes
 * between buf and the file at off (pread/pwrite) or at the handle's
 * position, which moves (read/write). Through the bulk area in slot-sized
 * pieces when the channel has one, else through packets. Bytes moved (short
 * only at end of file) or -errno. */
int64_t gpusys_emu_pread_block(const gpusys_dev_t *dev, gpusys_fd_t handle, void *buf, uint64_t len, int64_t off);
int64_t gpusys_emu_pwrite_block(const gpusys_dev_t *dev, gpusys_fd_t handle, const void *buf, uint64_t len, int64_t off);
int64_t gpusys_emu_read_block(const gpusys_dev_t *dev, gpusys_fd_t handle, void *buf, uint64_t len);
int64_t gpusys_emu_write_block(const gpusys_dev_t *dev, gpusys_fd_t handle, const void *buf, uint64_t len);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_FILE_EMU_H */
