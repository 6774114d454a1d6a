/* SPDX-License-Identifier: MIT */
/*
 * The file service (include/gpusys/file.h): POSIX file calls on behalf of a
 * client, on the worker pool, as the client (util/creds.h), on its own
 * handle table (core/handles.h, shared with sockets). One function per call (file_ops.c); this
 * file is the service's descriptor and the driver every call shares.
 *
 * Each request is served lane by lane in lane order, so the lanes of one
 * warp calling read() on one handle read consecutive parts, as sequential
 * calls would. Every lane's request header is copied out of the call's
 * payload before it is looked at (lanes' payloads lie back to back, at any
 * alignment).
 *
 * Descriptors are opened non-blocking whatever the client asked: a read from
 * a FIFO or a terminal that would block instead waits in poll() (file_io.c),
 * along with the client's attach connection, so a client that dies frees
 * its worker (and, with the last reference to its session, its
 * descriptors).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/handles.h"
#include "core/service.h"
#include "services/file/file_ops.h"
#include "services/file/file_paths.h"
#include "services/file/service_file.h"
#include "util/parallel_io.h"

/* ------------------------------------------------------------ lifecycle */

/* Whether pread and readfile are tried on the poller first
 * (file_try_poller; SERVICE_OP_TRY_POLLER). */
static bool try_poller = true;
/* A poller serves other ports too: it reads no lane with more room than
 * this, and no lane more once the call's lanes have read this much. */
#define FILE_TRY_POLLER_MAX (256u << 10)

static const struct config_key settings[] = {
	/* I/O threads that share large transfers with the worker serving
	 * them (util/parallel_io.h). */
	{ "file_io_threads", CONFIG_COUNT, 0, PARALLEL_IO_MAX_THREADS, 15 },
	/* Bytes each of them takes at a time: one block's 8 MiB half of a
	 * bulk slot is 16 chunks of 512 KiB, one for each thread. */
	{ "file_io_chunk", CONFIG_BYTES, PARALLEL_IO_MIN_CHUNK, UINT64_C(64) << 20, UINT64_C(512) << 10 },
	/* Microseconds they spin for the next chunk before sleeping: 0, as
	 * spinning gained nothing consistent in gpusys-bench file and costs CPU
	 * after every transfer (measured, see bench/RESULTS.md: "GPU-initiated
	 * reads and what bounds them"). */
	{ "file_io_spin_us", CONFIG_COUNT, 0, 10000, 0 },
	/* Reads of what the page cache holds (pread, readfile) served on the
	 * poller that found them, without a worker (1), or always on a worker
	 * (0). */
	{ "file_try_poller", CONFIG_COUNT, 0, 1, 1 },
	/* Open files, directories and sockets per client (one space). */
	{ "max_handles_per_client", CONFIG_COUNT, 16, GPUSYS_FILE_HANDLES_LIMIT, GPUSYS_FILE_DEFAULT_MAX_HANDLES },
	{ NULL, 0, 0, 0, 0 },
};

static int file_start(const struct service_env *env)
{
	handle_table_set_max((uint32_t)config_value(env->cfg, "max_handles_per_client"));
	try_poller = config_value(env->cfg, "file_try_poller") != 0;
	struct parallel_io_config io = {
		.threads = (unsigned)config_value(env->cfg, "file_io_threads"),
		.chunk = config_value(env->cfg, "file_io_chunk"),
		.spin_us = (unsigned)config_value(env->cfg, "file_io_spin_us"),
	};
	return parallel_io_start(&io);
}

static void file_stop(void)
{
	parallel_io_stop();
}

static int file_client_init(const struct client *c, void **ret_state)
{
	struct file_client *fc = calloc(1, sizeof(*fc));
	if (!fc)
		return -ENOMEM;
	/* One handle space with the socket service: the same table. */
	fc->ht = handle_table_acquire(c);
	if (!fc->ht) {
		free(fc);
		return -ENOMEM;
	}
	fc->c = c;
	*ret_state = fc;
	return 0;
}

static void file_client_transfers(void *state, uint64_t since_ns,
				  void (*emit)(void *arg, const struct service_transfer *t), void *arg)
{
	struct file_client *fc = state;
	handle_table_transfers(fc->ht, since_ns, emit, arg);
}

static void file_client_fini(const struct client *c, void *state)
{
	struct file_client *fc = state;
	(void)c;
	if (!fc)
		return;
	handle_table_release(fc->ht); /* the last of file and socket closes them all */
	free(fc);
}

/* --------------------------------------------------------------- driver */

/* What a call answers per lane: data of the request's count (read), a
 * fixed-size record (stat, readdir), or a value (an int64_t). */
enum answer { ANSWER_VALUE, ANSWER_DATA, ANSWER_RECORD };

/* Whether the call runs here: a client's state is there, and a poller
 * tries only with file_try_poller (else the call goes to a worker). */
static bool call_may_run(struct port_call *call)
{
	if (!call->state) {
		call->status = -ENOTCONN;
		return false;
	}
	if (call->on_poller && !try_poller) {
		call->to_pool = true;
		return false;
	}
	return true;
}

/* Stop on the poller at lane l: a worker goes on from it. */
static void resume_on_worker(struct port_call *call, uint32_t l)
{
	call->resume_at = l + 1;
	call->to_pool = true;
}

/* On a poller, stop at lane l for a worker when its room, or what the
 * call read here so far, is past FILE_TRY_POLLER_MAX. Whether it stopped. */
static bool poller_stops_at(struct port_call *call, uint32_t l, uint64_t room, uint64_t read_here)
{
	if (!call->on_poller || (room <= FILE_TRY_POLLER_MAX && read_here < FILE_TRY_POLLER_MAX))
		return false;
	resume_on_worker(call, l);
	return true;
}

/* Lane l's request into q: 0, or -EINVAL when it is shorter than one. */
static int lane_request(const struct port_call *call, uint32_t l, struct gpusys_file_req *q)
{
	if (call->len[l] < sizeof(*q))
		return -EINVAL;
	memcpy(q, call->data[l], sizeof(*q)); /* any alignment */
	return 0;
}

/* Run fn for lane l (request q, its body after it; room bytes at out):
 * fn's result, or FILE_LANE_TO_POOL with the call stopped there for a
 * worker. */
static int lane_run(struct port_call *call, file_lane_fn *fn, uint32_t l, const struct gpusys_file_req *q,
		    uint32_t room, uint8_t *out, int64_t *val, uint32_t *out_len)
{
	struct file_lane lane = {
		.fc = call->state, .opcode = call->opcode, .q = *q, .body = call->data[l] + sizeof(*q),
		.body_len = call->len[l] - (uint32_t)sizeof(*q), .room = room, .val = val, .out = out,
		.out_len = out_len, .nowait = call->on_poller,
	};
	int r = fn(&lane);
	if (r == FILE_LANE_TO_POOL)
		resume_on_worker(call, l);
	return r;
}

/* A call runs its lanes in order. On a poller (call->on_poller: pread and
 * readfile, SERVICE_OP_TRY_POLLER) each lane runs without waiting; at the
 * first that would wait, or past FILE_TRY_POLLER_MAX, the call stops there
 * (call->resume_at = that lane + 1) and a worker goes on from it, with the
 * room, its charge and the lanes' answers so far as the poller left them. */
static void file_call(struct port_call *call, file_lane_fn *fn, enum answer kind, uint32_t record)
{
	struct file_client *fc = call->state;
	uint32_t fixed = kind == ANSWER_VALUE ? (uint32_t)sizeof(int64_t) : kind == ANSWER_RECORD ? record : 0;
	const uint32_t first = call->resume_at ? call->resume_at - 1 : 0;
	const bool resumed = call->resume_at != 0;

	if (!call_may_run(call))
		return;
	/* Room for every lane's answer, in one buffer. */
	uint64_t total = 0;
	uint32_t room[GPUSYS_WARP_LANES] = { 0 };
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uint32_t want = fixed;
		if (kind == ANSWER_DATA) {
			struct gpusys_file_req q;
			uint64_t c = lane_request(call, l, &q) == 0 ? q.count : 0;
			want = c < call->cap[l] ? (uint32_t)c : call->cap[l];
		}
		room[l] = want;
		total += want;
	}
	/* Nothing has run yet: without room now (other calls' answers hold
	 * the budget until their warps take them) the device side sends the
	 * call again (abi.h); more than the whole budget is -ENOMEM. */
	uint8_t *buf = call->resp_buf;
	if (!resumed) {
		int charge = port_call_charge_or_later(call, total);
		if (charge < 0) {
			call->status = charge;
			return;
		}
		buf = total ? malloc(total) : NULL;
		if (total && !buf) {
			call->status = -ENOMEM;
			return;
		}
		call->resp_buf = buf;
	}

	struct creds_saved saved;
	int cr = creds_enter(&fc->c->creds, &saved);
	bool creates = call->opcode == GPUSYS_OP_FILE_OPEN || call->opcode == GPUSYS_OP_FILE_MKDIR;
	mode_t old_umask = 0;
	if (cr == 0 && creates)
		old_umask = file_thread_umask(fc->c->umask);

	uint64_t at = 0, read_here = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uint8_t *out = buf ? buf + at : NULL; /* no buffer when no lane has room */
		at += room[l];
		if (l < first)
			continue; /* answered on the poller */
		if (poller_stops_at(call, l, room[l], read_here))
			break;
		struct gpusys_file_req q;
		int r = cr < 0 ? cr : lane_request(call, l, &q);
		if (r < 0) {
			call->lane_status[l] = r;
			continue;
		}
		int64_t val = 0;
		uint32_t out_len = 0;
		r = lane_run(call, fn, l, &q, room[l], out, &val, &out_len);
		if (r == FILE_LANE_TO_POOL)
			break;
		call->lane_status[l] = r;
		read_here += out_len;
		if (r < 0)
			continue;
		if (kind == ANSWER_VALUE) {
			if (call->cap[l] < sizeof(val)) {
				call->lane_status[l] = -EMSGSIZE;
				continue;
			}
			memcpy(out, &val, sizeof(val));
			out_len = sizeof(val);
		}
		call->resp_len[l] = out_len;
		call->resp_data[l] = out;
	}
	if (cr == 0 && creates)
		file_thread_umask(old_umask);
	if (cr == 0)
		creds_leave(&saved);
}

/* READFILE answers what each lane read, and is charged that, not its room:
 * 32 lanes that may each read 1 MiB but name small files would otherwise
 * hold (or be refused) 32 MiB of the client's budget. Each lane reads into
 * the end of the call's buffer, grown by its room for the read (one lane's
 * room, at most 1 MiB, is all it holds uncharged) and shrunk to what came;
 * then that is charged. A lane whose bytes do not fit the budget now is
 * answered GPUSYS_STATUS_NO_ROOM and sent again by the device side (a read
 * changes nothing: it may run twice). Offsets stand in resp_data until the
 * call is done (the buffer moves as it grows), across a hand-off from the
 * poller to a worker (call->resume_at, as file_call). */
static void handle_readfile(struct port_call *call)
{
	struct file_client *fc = call->state;
	const uint32_t first = call->resume_at ? call->resume_at - 1 : 0;

	if (!call_may_run(call))
		return;
	uint64_t used = 0;
	for (uint32_t l = 0; l < first; l++)
		if ((call->lane_mask >> l & 1) && call->lane_status[l] == 0)
			used += call->resp_len[l];
	struct creds_saved saved;
	int cr = creds_enter(&fc->c->creds, &saved);
	for (uint32_t l = first; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		struct gpusys_file_req q;
		int r = lane_request(call, l, &q);
		if (r < 0) {
			call->lane_status[l] = r;
			continue;
		}
		uint32_t room = q.count < call->cap[l] ? (uint32_t)q.count : call->cap[l];
		if (poller_stops_at(call, l, room, used))
			break;
		if (cr < 0) {
			call->lane_status[l] = cr;
			continue;
		}
		uint8_t *grown = realloc(call->resp_buf, used + room + 1);
		if (!grown) {
			call->lane_status[l] = -ENOMEM;
			continue;
		}
		call->resp_buf = grown;
		int64_t val = 0;
		uint32_t got = 0;
		r = lane_run(call, file_op_readfile, l, &q, room, grown + used, &val, &got);
		if (r == FILE_LANE_TO_POOL)
			break;
		if (r == 0)
			r = port_call_charge_or_later(call, got); /* 0, GPUSYS_STATUS_NO_ROOM or -ENOMEM */
		call->lane_status[l] = r;
		call->resp_len[l] = r == 0 ? got : 0;
		call->resp_data[l] = (const uint8_t *)(uintptr_t)used; /* an offset until the end */
		if (r == 0)
			used += got;
	}
	if (cr == 0)
		creds_leave(&saved);
	if (call->to_pool)
		return;
	if (call->resp_buf) {
		uint8_t *fit = realloc(call->resp_buf, used + 1); /* what is charged, give or take a byte */
		if (fit)
			call->resp_buf = fit;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uintptr_t off = (uintptr_t)call->resp_data[l];
		call->resp_data[l] = call->lane_status[l] == 0 ? (uint8_t *)call->resp_buf + off : NULL;
	}
}

/* ------------------------------------------------------------ the table */

#define VALUE_CALL(name, fn)                                   \
	static void handle_##name(struct port_call *call)      \
	{                                                      \
		file_call(call, fn, ANSWER_VALUE, 0);          \
	}
#define DATA_CALL(name, fn)                                    \
	static void handle_##name(struct port_call *call)      \
	{                                                      \
		file_call(call, fn, ANSWER_DATA, 0);           \
	}
#define RECORD_CALL(name, fn, type)                            \
	static void handle_##name(struct port_call *call)      \
	{                                                      \
		file_call(call, fn, ANSWER_RECORD, sizeof(type)); \
	}

VALUE_CALL(open, file_op_open)
VALUE_CALL(close, file_op_close)
DATA_CALL(read, file_op_read)
VALUE_CALL(write, file_op_write)
DATA_CALL(pread, file_op_read)
VALUE_CALL(pwrite, file_op_write)
VALUE_CALL(lseek, file_op_lseek)
RECORD_CALL(fstat, file_op_fstat, struct gpusys_stat)
RECORD_CALL(stat, file_op_stat, struct gpusys_stat)
VALUE_CALL(fsync, file_op_fsync)
VALUE_CALL(ftruncate, file_op_ftruncate)
VALUE_CALL(unlink, file_op_unlink)
VALUE_CALL(rename, file_op_rename)
VALUE_CALL(mkdir, file_op_mkdir)
VALUE_CALL(rmdir, file_op_rmdir)
VALUE_CALL(opendir, file_op_opendir)
RECORD_CALL(readdir, file_op_readdir, struct gpusys_dirent)
VALUE_CALL(closedir, file_op_closedir)
VALUE_CALL(bulk_pread, file_op_bulk)
VALUE_CALL(bulk_pwrite, file_op_bulk)

#define OP(code, name) { GPUSYS_OP_FILE_##code, SERVICE_ON_POOL, 0, "file." #name, handle_##name }
/* Tried on the poller first: a read the page cache holds needs no worker. */
#define OP_TRY(code, name) { GPUSYS_OP_FILE_##code, SERVICE_ON_POOL, SERVICE_OP_TRY_POLLER, "file." #name, handle_##name }
static const struct service_op ops[] = {
	OP(OPEN, open),         OP(CLOSE, close),       OP(READ, read),
	OP(WRITE, write),       OP_TRY(PREAD, pread),   OP(PWRITE, pwrite),
	OP(LSEEK, lseek),       OP(FSTAT, fstat),       OP(STAT, stat),
	OP(FSYNC, fsync),       OP(FTRUNCATE, ftruncate), OP(UNLINK, unlink),
	OP(RENAME, rename),     OP(MKDIR, mkdir),       OP(RMDIR, rmdir),
	OP(OPENDIR, opendir),   OP(READDIR, readdir),   OP(CLOSEDIR, closedir),
	OP_TRY(READFILE, readfile),
	OP(BULK_PREAD, bulk_pread), OP(BULK_PWRITE, bulk_pwrite),
};

const struct service service_file = {
	.name = "file",
	.group = GPUSYS_OP_FILE_FIRST >> 8,
	.ops = ops,
	.nops = sizeof(ops) / sizeof(ops[0]),
	.settings = settings,
	.start = file_start,
	.stop = file_stop,
	.client_init = file_client_init,
	.client_fini = file_client_fini,
	.client_transfers = file_client_transfers,
};
