/* SPDX-License-Identifier: MIT */
/*
 * The client side of the socket service (include/gpusys/socket.h), written
 * once for nvcc and the host compiler like file_client.h: per-lane
 * arguments are arrays indexed with GPUSYS_LI(lane).
 *
 * A lane's request is its 48-byte struct gpusys_sock_req, then its address
 * (addr_len bytes), then its body (data, option value, poll list, names),
 * contiguous in a scratch buffer the caller provides.
 *
 * Results per lane: the call's value (a handle, bytes sent, 0) for value
 * ops; for data ops (RECV, RECVFROM, ACCEPT, GETSOCKNAME, GETPEERNAME,
 * GETSOCKOPT, POLL, GETADDRINFO, GETNAMEINFO) the bytes of the answer; or
 * the negative errno (EAI_* for the two name calls). -ESHUTDOWN when the
 * daemon has gone.
 */
#ifndef GPUSYS_SOCK_CLIENT_H
#define GPUSYS_SOCK_CLIENT_H

#include <errno.h>
#include <stdint.h>

#include "gpusys/socket.h"
#include "file_client.h"

#define GPUSYS_SOCK_REQ_BYTES ((uint32_t)sizeof(struct gpusys_sock_req))

GPUSYS_FN void gpusys_sock_req_init(struct gpusys_sock_req *q)
{
	q->handle = 0;
	q->flags = 0;
	q->a = 0;
	q->b = 0;
	q->c = 0;
	q->addr_len = 0;
	q->timeout_ms = 0;
	q->count = 0;
	q->bulk_off = 0;
}

GPUSYS_FN int gpusys_sock_op_returns_data(uint16_t op)
{
	return op == GPUSYS_OP_SOCK_RECV || op == GPUSYS_OP_SOCK_RECVFROM || op == GPUSYS_OP_SOCK_ACCEPT ||
	       op == GPUSYS_OP_SOCK_GETSOCKNAME || op == GPUSYS_OP_SOCK_GETPEERNAME ||
	       op == GPUSYS_OP_SOCK_GETSOCKOPT || op == GPUSYS_OP_SOCK_POLL || op == GPUSYS_OP_SOCK_GETADDRINFO ||
	       op == GPUSYS_OP_SOCK_GETNAMEINFO;
}

/* Pack a lane's request; returns its length. */
GPUSYS_FN uint32_t gpusys_sock_pack(uint8_t *scratch, const struct gpusys_sock_req *q, const void *addr,
				    uint32_t addr_len, const void *body, uint32_t body_len)
{
	gpusys_file_bytecopy(scratch, (const uint8_t *)q, GPUSYS_SOCK_REQ_BYTES);
	uint32_t n = GPUSYS_SOCK_REQ_BYTES;
	gpusys_file_bytecopy(scratch + n, (const uint8_t *)addr, addr_len);
	n += addr_len;
	gpusys_file_bytecopy(scratch + n, (const uint8_t *)body, body_len);
	return n + body_len;
}

/* One try of a socket call from the lanes of mask. */
GPUSYS_FN void gpusys_sock_rpc_once(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const uint8_t *const *req,
				    const uint32_t *req_len, void *const *out, const uint32_t *out_cap, int64_t *ret)
{
	int data = gpusys_sock_op_returns_data(op);
	int64_t val[GPUSYS_LANE_ARRAY];
	void *dst[GPUSYS_LANE_ARRAY];
	uint32_t cap[GPUSYS_LANE_ARRAY], got[GPUSYS_LANE_ARRAY];
	int32_t st[GPUSYS_LANE_ARRAY];

	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t i = GPUSYS_LI(l);
		val[i] = 0;
		dst[i] = data ? out[i] : (void *)&val[i];
		cap[i] = data ? out_cap[i] : (uint32_t)sizeof(int64_t);
		got[i] = 0;
		st[i] = 0;
	}
	/* A poll waits: it must not hold one of the few window ports while
	 * it does, though a poll asking for bytes has a large capacity. */
	uint16_t flags = op == GPUSYS_OP_SOCK_POLL ? GPUSYS_REQ_NO_WINDOW : 0;
	int rc = gpusys_rpc(dev, op, flags, mask, (const void *const *)req, req_len, dst, cap, got, st);
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		uint32_t i = GPUSYS_LI(l);
		if (rc)
			ret[i] = rc;
		else if (st[i] < 0)
			ret[i] = st[i];
		else
			ret[i] = data ? (int64_t)got[i] : val[i];
	}
}

/* One socket call from the lanes of mask (see the top of this file). The
 * lanes the daemon had no room for yet (other calls' answers fill the
 * client's budget: abi.h, GPUSYS_STATUS_NO_ROOM) send theirs again after a
 * pause, until it fits or GPUSYS_NO_ROOM_WAIT_NS has passed (-ENOMEM). */
GPUSYS_FN void gpusys_sock_rpc(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, const uint8_t *const *req,
			       const uint32_t *req_len, void *const *out, const uint32_t *out_cap, int64_t *ret)
{
	uint32_t tries = 0;

	for (uint64_t m = mask; m; m = gpusys_no_room_again(m, ret, &tries))
		gpusys_sock_rpc_once(dev, op, m, req, req_len, out, out_cap, ret);
}

/* The answer of a poll asking for bytes (GPUSYS_POLL_RECV, socket.h): got
 * bytes of buf, for the n pollfds of fds. Fills fds[i].revents, lens[i]
 * (bytes > 0, 0 when the peer closed, or -errno) and offs[i] (where in buf
 * handle i's bytes start; 0 when it has none). Returns how many are ready,
 * or -EPROTO for an answer that does not add up. An answer of revents
 * alone (a daemon that left the flag to poll(2)) gives -EAGAIN lengths:
 * the caller receives as it did before. */
GPUSYS_FN int gpusys_poll_recv_parse(const uint8_t *buf, uint32_t got, struct gpusys_pollfd *fds, uint32_t n,
				     int32_t *lens, uint32_t *offs)
{
	uint32_t hdr = GPUSYS_POLL_RECV_HDR(n), at = hdr;
	int full = got >= hdr, ready = 0;
	for (uint32_t i = 0; i < n; i++) {
		int16_t rev = 0;
		int32_t len = -EAGAIN;
		if (got >= (i + 1) * (uint32_t)sizeof(int16_t))
			gpusys_file_bytecopy((uint8_t *)&rev, buf + i * sizeof(int16_t), sizeof(rev));
		if (full)
			gpusys_file_bytecopy((uint8_t *)&len, buf + GPUSYS_POLL_RECV_REV_BYTES(n) + i * sizeof(len),
					     sizeof(len));
		fds[i].revents = rev;
		ready += rev != 0;
		offs[i] = 0;
		lens[i] = len;
		if (len > 0) {
			if ((uint32_t)len > got - at)
				return -EPROTO;
			offs[i] = at;
			at += (uint32_t)len;
		}
	}
	return ready;
}

/* One piece of a bulk transfer (bulk_client.h's asker): a->op BULK_SEND or
 * BULK_RECV on a->handle with the MSG_* flags a->flags, count bytes through
 * [bulk_off, bulk_off + count) of the bulk area. Bytes moved or -errno. */
GPUSYS_BULK_ASK_FN int64_t gpusys_sock_bulk_ask(const gpusys_dev_t *dev, const struct gpusys_bulk_ask *a,
						 uint64_t done, uint64_t count, uint64_t bulk_off)
{
	struct gpusys_sock_req q;

	(void)done; /* a stream has no offset */
	gpusys_sock_req_init(&q);
	q.handle = a->handle;
	q.flags = a->flags;
	q.count = count;
	q.bulk_off = bulk_off;
	return gpusys_bulk_call(dev, a->op, &q, GPUSYS_SOCK_REQ_BYTES);
}

#endif /* GPUSYS_SOCK_CLIENT_H */
