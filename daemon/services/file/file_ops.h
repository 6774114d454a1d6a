/* SPDX-License-Identifier: MIT */
/*
 * The file service's calls, one function per operation, each serving one
 * lane: q is the lane's request header (copied out, aligned), body what
 * follows it. Value results go to *val; data results to out (room bytes),
 * *out_len of them. Each returns 0 or -errno (what POSIX gives).
 *
 * With nowait set (the lane runs on a poller: SERVICE_OP_TRY_POLLER), an
 * op that would wait for the disk returns FILE_LANE_TO_POOL instead, having
 * changed nothing the client can see; a worker then runs it again. Only
 * pread and readfile take nowait.
 */
#ifndef GPUSYSD_FILE_OPS_H
#define GPUSYSD_FILE_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/client.h"
#include "core/handles.h"
#include "gpusys/file.h"

struct file_client {
	struct handle_table *ht;
	const struct client *c;
};

struct file_lane {
	struct file_client *fc;
	uint16_t opcode;
	struct gpusys_file_req q;
	const uint8_t *body;
	uint32_t body_len;
	uint32_t room;
	int64_t *val;
	uint8_t *out;
	uint32_t *out_len;
	bool nowait;
};

/* Not an errno: "run this lane on a worker" (never answered). */
#define FILE_LANE_TO_POOL (-(1 << 20))

typedef int file_lane_fn(const struct file_lane *l);

file_lane_fn file_op_open, file_op_opendir, file_op_close, file_op_closedir, file_op_read, file_op_write,
	file_op_lseek, file_op_fstat, file_op_stat, file_op_fsync, file_op_ftruncate, file_op_unlink, file_op_rmdir,
	file_op_mkdir, file_op_rename, file_op_readdir, file_op_readfile, file_op_bulk;

#endif
