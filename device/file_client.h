/* SPDX-License-Identifier: MIT */
/*
 * The client side of the file service (include/gpusys/file.h), written once
 * for nvcc and the host compiler like port_client.h: per-lane arguments are
 * arrays indexed with GPUSYS_LI(lane).
 *
 * Every call returns, per lane, the call's value (a handle, a byte count, an
 * offset, 0) or a negative errno, as Linux system calls do before the C
 * library moves it to errno. A whole-request failure (-ESHUTDOWN: the daemon
 * has gone) is every lane's result.
 *
 * A lane's request is its 48-byte struct gpusys_file_req followed by its
 * path or data, and must be contiguous: callers give each lane a scratch
 * buffer of sizeof(struct gpusys_file_req) + body bytes (the GPU wrappers in
 * include/gpusys/file.cuh use a local array and cut large writes into
 * pieces; the emulator allocates).
 *
 * Bulk transfers: gpusys_file_bulk_ask() asks the daemon to pread or
 * pwrite between a file and a range of the channel's bulk area; the loops
 * that use it are bulk_client.h's, for every service: bulk_block.cuh (GPU:
 * all threads of a block copy) and libclient/emulator/bulk_emu.c (emulator: the
 * calling thread copies).
 */
#ifndef GPUSYS_FILE_CLIENT_H
#define GPUSYS_FILE_CLIENT_H

#include <errno.h>
#include <stdint.h>

#include "gpusys/file.h"
#include "bulk_client.h"
#include "port_client.h"

#define GPUSYS_FILE_REQ_BYTES ((uint32_t)sizeof(struct gpusys_file_req))

GPUSYS_FN void gpusys_file_req_init(struct gpusys_file_req *q)
{
	q->handle = 0;
	q->flags = 0;
	q->mode = 0;
	q->path_len = 0;
	q->offset = 0;
	q->count = 0;
	q->bulk_off = 0;
	q->reserved = 0;
}

/* Bytes of a NUL-terminated string, at most max + 1 looked at (a result
 * above max means "too long"). */
GPUSYS_FN uint32_t gpusys_file_strnlen(const char *s, uint32_t max)
{
	uint32_t n = 0;
	while (n <= max && s[n])
		n++;
	return n;
}

#if defined(__CUDACC__)
/* The word loop of gpusys_file_bytecopy, out of line: inlined into every
 * call that packs a body, it took plain_pread_pwrite of
 * tests/file/block_registers.cu to 136 registers, past the 128 that a
 * block of 512 threads may use (126 out of line). d is 4-byte aligned; s
 * is d's source rounded down to 4 bytes, sh the bytes it was rounded by. */
static __device__ __noinline__ void gpusys_file_copy_words(uint32_t *d, const uint32_t *s, uint32_t words,
							    uint32_t sh)
{
	if (sh == 0) {
		for (uint32_t w = 0; w < words; w++)
			d[w] = s[w];
		return;
	}
	uint32_t lo = s[0];
	for (uint32_t w = 0; w < words; w++) {
		uint32_t hi = s[w + 1];
		d[w] = __funnelshift_r(lo, hi, sh * 8u);
		lo = hi;
	}
}
#endif

/* A lane's copy of a request's body into its scratch (a send's 3920 bytes,
 * a write's piece). Byte by byte, each of a warp's loads touches 32 lines
 * and a 4 KiB body takes thousands of them; past a short head this copies
 * 4-byte words: the destination aligned by a few bytes first (at least 4,
 * so that the first aligned source word starts inside src), the source
 * read as aligned words and joined with a funnel shift where the two
 * alignments differ, never past src + n. */
GPUSYS_FN void gpusys_file_bytecopy(uint8_t *dst, const uint8_t *src, uint32_t n)
{
#if defined(__CUDACC__)
	uint32_t i = 0;
	if (n >= 32) {
		while (i < 4 || ((uintptr_t)(dst + i) & 3u)) {
			dst[i] = src[i];
			i++;
		}
		/* Word w takes the top bytes of aligned source word w and the
		 * low of word w + 1, which must end by src + n. */
		uint32_t sh = (uint32_t)((uintptr_t)(src + i) & 3u);
		uint32_t words = sh ? (n - i + sh) / 4u - 1u : (n - i) / 4u;
		gpusys_file_copy_words((uint32_t *)(dst + i), (const uint32_t *)(src + i - sh), words, sh);
		i += words * 4u;
	}
	for (; i < n; i++)
		dst[i] = src[i];
#else
	if (n)
		memcpy(dst, src, n);
#endif
}

/* Pack a lane's request into scratch; returns its length. body2 (may be
 * NULL) follows body after one NUL: RENAME's second path. */
GPUSYS_FN uint32_t gpusys_file_pack(uint8_t *scratch, const struct gpusys_file_req *q, const void *body,
				    uint32_t body_len, const void *body2, uint32_t body2_len)
{
	gpusys_file_bytecopy(scratch, (const uint8_t *)q, GPUSYS_FILE_REQ_BYTES);
	uint32_t n = GPUSYS_FILE_REQ_BYTES;
	gpusys_file_bytecopy(scratch + n, (const uint8_t *)body, body_len);
	n += body_len;
	if (body2) {
		scratch[n++] = 0;
		gpusys_file_bytecopy(scratch + n, (const uint8_t *)body2, body2_len);
		n += body2_len;
	}
	return n;
}

/* A file call between its start and its finish (port_client.h's futures):
 * what the finish needs to turn the response into each lane's result. */
struct gpusys_file_pending {
	struct gpusys_rpc_pending pd;
	uint32_t data; /* data-returning op: the result is the byte count */
	int64_t val[GPUSYS_LANE_ARRAY];  /* the daemon's 64-bit value (not data) */
	void *out[GPUSYS_LANE_ARRAY];
	uint32_t cap[GPUSYS_LANE_ARRAY];
};

GPUSYS_FN int gpusys_file_op_returns_data(uint16_t op)
{
	return op == GPUSYS_OP_FILE_READ || op == GPUSYS_OP_FILE_PREAD || op == GPUSYS_OP_FILE_FSTAT ||
	       op == GPUSYS_OP_FILE_STAT || op == GPUSYS_OP_FILE_READDIR || op == GPUSYS_OP_FILE_READFILE;
}

/*
 * Start one file call from the lanes of mask. Each lane's packed request is
 * req[l] (req_len[l] bytes). Data-returning calls (READ, PREAD, FSTAT,
 * STAT, READDIR, READFILE) will put up to out_cap[l] bytes at out[l] (which must stay
 * valid until the finish). async: as gpusys_rpc_start; flags: 0 or
 * GPUSYS_REQ_NOREPLY (fire-and-forget: the results are not known).
 */
GPUSYS_FN void gpusys_file_rpc_start(const gpusys_dev_t *dev, uint16_t op, uint16_t flags, uint64_t mask,
				     const uint8_t *const *req, const uint32_t *req_len, void *const *out,
				     const uint32_t *out_cap, int async, struct gpusys_file_pending *fp)
{
	fp->data = (uint32_t)gpusys_file_op_returns_data(op);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t i = GPUSYS_LI(l);
		fp->val[i] = 0;
		fp->out[i] = fp->data ? out[i] : 0;
		fp->cap[i] = fp->data ? out_cap[i] : (uint32_t)sizeof(int64_t);
	}
	gpusys_rpc_start(dev, op, flags, mask, (const void *const *)req, req_len, fp->cap, async, &fp->pd);
}

/* As gpusys_file_rpc_finish, but a lane's ret may be GPUSYS_STATUS_NO_ROOM
 * (abi.h: nothing ran; send it again). */
GPUSYS_FN void gpusys_file_rpc_finish_raw(const gpusys_dev_t *dev, struct gpusys_file_pending *fp, int64_t *ret)
{
	void *dst[GPUSYS_LANE_ARRAY];
	uint32_t got[GPUSYS_LANE_ARRAY];
	int32_t st[GPUSYS_LANE_ARRAY];

	GPUSYS_FOR_EACH_LANE(fp->pd.mask, l)
	{
		uint32_t i = GPUSYS_LI(l);
		dst[i] = fp->data ? fp->out[i] : (void *)&fp->val[i];
		got[i] = 0;
		st[i] = 0;
	}
	int rc = gpusys_rpc_finish(dev, &fp->pd, dst, fp->cap, got, st);
	GPUSYS_FOR_EACH_LANE(fp->pd.mask, l)
	{
		uint32_t i = GPUSYS_LI(l);
		if (rc)
			ret[i] = rc;
		else if (st[i] < 0)
			ret[i] = st[i];
		else
			ret[i] = fp->data ? (int64_t)got[i] : fp->val[i];
	}
}

/* Finish it: ret[l] gets the lane's result (a byte count for data calls,
 * the daemon's value for the others) or -errno. A call started
 * asynchronously is not sent again when the daemon had no room for its
 * answers (its request is gone by now): -ENOMEM, as before ABI 9. */
GPUSYS_FN void gpusys_file_rpc_finish(const gpusys_dev_t *dev, struct gpusys_file_pending *fp, int64_t *ret)
{
	gpusys_file_rpc_finish_raw(dev, fp, ret);
	GPUSYS_FOR_EACH_LANE(fp->pd.mask, l)
	{
		if (ret[GPUSYS_LI(l)] == GPUSYS_STATUS_NO_ROOM)
			ret[GPUSYS_LI(l)] = -ENOMEM;
	}
}

/*
 * One file call from the lanes of mask, synchronously: start and finish.
 * ret[l]: the result or -errno. The lanes the daemon had no room for yet
 * (other calls' answers fill the client's budget) send theirs again after
 * a pause, until it fits or GPUSYS_NO_ROOM_WAIT_NS has passed (-ENOMEM).
 */
GPUSYS_FN void gpusys_file_rpc(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const uint8_t *const *req,
			       const uint32_t *req_len, void *const *out, const uint32_t *out_cap, int64_t *ret)
{
	struct gpusys_file_pending fp;
	uint32_t tries = 0;

	for (uint64_t m = mask; m; m = gpusys_no_room_again(m, ret, &tries)) {
		gpusys_file_rpc_start(dev, op, 0, m, req, req_len, out, out_cap, 0, &fp);
		gpusys_file_rpc_finish_raw(dev, &fp, ret);
	}
}

/* The same, tried once: a lane the daemon had no room for gets -ENOMEM (the
 * packets fallback of the block calls, whose kernels have no registers to
 * spare for the loop above: tests/file/block-registers.sh). */
GPUSYS_FN void gpusys_file_rpc_once(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const uint8_t *const *req,
				    const uint32_t *req_len, void *const *out, const uint32_t *out_cap, int64_t *ret)
{
	struct gpusys_file_pending fp;
	gpusys_file_rpc_start(dev, op, 0, mask, req, req_len, out, out_cap, 0, &fp);
	gpusys_file_rpc_finish(dev, &fp, ret);
}

/* ---------------------------------------------------------------- bulk */

/* One piece of a bulk transfer (bulk_client.h's asker): a->op BULK_PREAD or
 * BULK_PWRITE on a->handle, count bytes at file offset a->off + done (a->off
 * -1: the handle's position) through [bulk_off, bulk_off + count) of the
 * bulk area. Bytes moved or -errno. */
GPUSYS_BULK_ASK_FN int64_t gpusys_file_bulk_ask(const gpusys_dev_t *dev, const struct gpusys_bulk_ask *a,
						 uint64_t done, uint64_t count, uint64_t bulk_off)
{
	struct gpusys_file_req q;

	gpusys_file_req_init(&q);
	q.handle = a->handle;
	q.offset = a->off < 0 ? -1 : a->off + (int64_t)done;
	q.count = count;
	q.bulk_off = bulk_off;
	return gpusys_bulk_call(dev, a->op, &q, GPUSYS_FILE_REQ_BYTES);
}

#endif /* GPUSYS_FILE_CLIENT_H */
