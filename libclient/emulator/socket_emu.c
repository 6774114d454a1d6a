/* SPDX-License-Identifier: MIT */
/* Socket calls from the host-lane emulator: device/sock_client.h compiled
 * for the CPU, each thread one warp (include/gpusys/emulator/socket.h). */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "gpusys/emulator.h"
#include "gpusys/emulator/socket.h"
#include "../device/sock_client.h"
#include "bulk_emu.h"

#define L GPUSYS_WARP_LANES


/* One lane. */
static int64_t one(const gpusys_dev_t *dev, uint16_t op, struct gpusys_emu_sock_lane *a)
{
	struct gpusys_emu_sock_lane lanes[1];
	lanes[0] = *a;
	gpusys_emu_sock_call(dev, op, 1, lanes);
	*a = lanes[0];
	return a->ret;
}

static void lane_init(struct gpusys_emu_sock_lane *a, gpusys_fd_t h)
{
	memset(a, 0, sizeof(*a));
	gpusys_sock_req_init(&a->q);
	a->q.handle = (int32_t)h;
}

int64_t gpusys_emu_socket(const gpusys_dev_t *dev, int domain, int type, int protocol)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, 0);
	a.q.a = domain;
	a.q.b = type;
	a.q.c = protocol;
	return one(dev, GPUSYS_OP_SOCK_SOCKET, &a);
}

static int64_t with_addr(const gpusys_dev_t *dev, uint16_t op, gpusys_fd_t h, const void *addr, uint32_t len)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	if (len > GPUSYS_SOCK_ADDR_MAX)
		return -EINVAL;
	a.addr = addr;
	a.q.addr_len = len;
	return one(dev, op, &a);
}

int64_t gpusys_emu_bind(const gpusys_dev_t *dev, gpusys_fd_t h, const void *addr, uint32_t len)
{
	return with_addr(dev, GPUSYS_OP_SOCK_BIND, h, addr, len);
}

int64_t gpusys_emu_connect(const gpusys_dev_t *dev, gpusys_fd_t h, const void *addr, uint32_t len)
{
	return with_addr(dev, GPUSYS_OP_SOCK_CONNECT, h, addr, len);
}

int64_t gpusys_emu_listen(const gpusys_dev_t *dev, gpusys_fd_t h, int backlog)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.a = backlog;
	return one(dev, GPUSYS_OP_SOCK_LISTEN, &a);
}

static void addr_out(const struct gpusys_sock_addr *r, void *addr, uint32_t *len)
{
	if (!addr || !len)
		return;
	uint32_t n = r->len < *len ? r->len : *len; /* truncated, as accept(2) does */
	memcpy(addr, r->addr, n);
	*len = r->len;
}

int64_t gpusys_emu_accept4(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len, int flags)
{
	struct gpusys_sock_accepted acc;
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.flags = flags;
	a.out = &acc;
	a.out_cap = sizeof(acc);
	int64_t r = one(dev, GPUSYS_OP_SOCK_ACCEPT, &a);
	if (r < 0)
		return r;
	if ((uint64_t)r < sizeof(acc))
		return -EPROTO;
	addr_out(&acc.peer, addr, len);
	return acc.handle;
}

int64_t gpusys_emu_send(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t n, int flags)
{
	return gpusys_emu_sendto(dev, h, buf, n, flags, NULL, 0);
}

int64_t gpusys_emu_sendto(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t n, int flags,
			  const void *addr, uint32_t len)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	if (len > GPUSYS_SOCK_ADDR_MAX)
		return -EINVAL;
	a.q.flags = flags;
	a.addr = addr;
	a.q.addr_len = addr ? len : 0;
	a.body = buf;
	a.body_len = n < GPUSYS_SOCK_LANE_MAX ? (uint32_t)n : GPUSYS_SOCK_LANE_MAX; /* a short send, as POSIX allows */
	return one(dev, addr ? GPUSYS_OP_SOCK_SENDTO : GPUSYS_OP_SOCK_SEND, &a);
}

int64_t gpusys_emu_recv(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t n, int flags)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.flags = flags;
	a.q.count = n < GPUSYS_MAX_LANE_PAYLOAD ? n : GPUSYS_MAX_LANE_PAYLOAD;
	a.out = buf;
	a.out_cap = (uint32_t)a.q.count;
	return one(dev, GPUSYS_OP_SOCK_RECV, &a);
}

int64_t gpusys_emu_recvfrom(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t n, int flags, void *addr,
			    uint32_t *len)
{
	uint64_t c = n < GPUSYS_MAX_LANE_PAYLOAD - sizeof(struct gpusys_sock_addr)
			     ? n
			     : GPUSYS_MAX_LANE_PAYLOAD - sizeof(struct gpusys_sock_addr);
	uint8_t *tmp = malloc(sizeof(struct gpusys_sock_addr) + c);
	if (!tmp)
		return -ENOMEM;
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.flags = flags;
	a.q.count = c;
	a.out = tmp;
	a.out_cap = (uint32_t)(sizeof(struct gpusys_sock_addr) + c);
	int64_t r = one(dev, GPUSYS_OP_SOCK_RECVFROM, &a);
	if (r >= 0) {
		if ((uint64_t)r < sizeof(struct gpusys_sock_addr)) {
			r = -EPROTO;
		} else {
			struct gpusys_sock_addr rec;
			memcpy(&rec, tmp, sizeof(rec));
			addr_out(&rec, addr, len);
			r -= (int64_t)sizeof(rec);
			memcpy(buf, tmp + sizeof(rec), (size_t)r);
		}
	}
	free(tmp);
	return r;
}

int64_t gpusys_emu_shutdown(const gpusys_dev_t *dev, gpusys_fd_t h, int how)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.a = how;
	return one(dev, GPUSYS_OP_SOCK_SHUTDOWN, &a);
}

int64_t gpusys_emu_sock_close(const gpusys_dev_t *dev, gpusys_fd_t h)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	return one(dev, GPUSYS_OP_SOCK_CLOSE, &a);
}

int64_t gpusys_emu_setsockopt(const gpusys_dev_t *dev, gpusys_fd_t h, int level, int name, const void *val,
			      uint32_t len)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.a = level;
	a.q.b = name;
	a.body = val;
	a.body_len = len;
	return one(dev, GPUSYS_OP_SOCK_SETSOCKOPT, &a);
}

int64_t gpusys_emu_getsockopt(const gpusys_dev_t *dev, gpusys_fd_t h, int level, int name, void *val, uint32_t *len)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.q.a = level;
	a.q.b = name;
	a.q.count = *len;
	a.out = val;
	a.out_cap = *len;
	int64_t r = one(dev, GPUSYS_OP_SOCK_GETSOCKOPT, &a);
	if (r < 0)
		return r;
	*len = (uint32_t)r;
	return 0;
}

static int64_t name_of(const gpusys_dev_t *dev, uint16_t op, gpusys_fd_t h, void *addr, uint32_t *len)
{
	struct gpusys_sock_addr rec;
	struct gpusys_emu_sock_lane a;
	lane_init(&a, h);
	a.out = &rec;
	a.out_cap = sizeof(rec);
	int64_t r = one(dev, op, &a);
	if (r < 0)
		return r;
	if ((uint64_t)r < sizeof(rec))
		return -EPROTO;
	addr_out(&rec, addr, len);
	return 0;
}

int64_t gpusys_emu_getsockname(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len)
{
	return name_of(dev, GPUSYS_OP_SOCK_GETSOCKNAME, h, addr, len);
}

int64_t gpusys_emu_getpeername(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len)
{
	return name_of(dev, GPUSYS_OP_SOCK_GETPEERNAME, h, addr, len);
}

/* One poll request (as the device's gpusys_poll_ask): the answer's
 * length, or -errno. */
static int64_t poll_ask(const gpusys_dev_t *dev, struct gpusys_pollfd *fds, uint32_t n, int64_t timeout_ms,
			uint32_t room_each, void *out, uint32_t cap)
{
	struct gpusys_emu_sock_lane a;
	lane_init(&a, 0);
	a.q.a = (int32_t)n;
	a.q.timeout_ms = timeout_ms;
	a.q.count = room_each;
	a.body = fds;
	a.body_len = n * (uint32_t)sizeof(*fds);
	a.out = out;
	a.out_cap = cap;
	return one(dev, GPUSYS_OP_SOCK_POLL, &a);
}

int64_t gpusys_emu_poll(const gpusys_dev_t *dev, struct gpusys_pollfd *fds, uint32_t n, int64_t timeout_ms)
{
	int16_t rev[GPUSYS_SOCK_POLL_MAX];
	if (n > GPUSYS_SOCK_POLL_MAX)
		return -EINVAL;
	int64_t r = poll_ask(dev, fds, n, timeout_ms, 0, rev, n * (uint32_t)sizeof(int16_t));
	if (r < 0)
		return r;
	int64_t ready = 0;
	for (uint32_t i = 0; i < n; i++) {
		fds[i].revents = (uint64_t)r >= (i + 1) * sizeof(int16_t) ? rev[i] : 0;
		ready += fds[i].revents != 0;
	}
	return ready;
}

int64_t gpusys_emu_poll_recv(const gpusys_dev_t *dev, struct gpusys_pollfd *fds, uint32_t n, int64_t timeout_ms,
			    void *buf, uint32_t cap, uint32_t room_each, int32_t *lens, uint32_t *offs)
{
	if (n > GPUSYS_SOCK_POLL_MAX)
		return -EINVAL;
	int64_t r = poll_ask(dev, fds, n, timeout_ms, room_each, buf, cap);
	if (r < 0)
		return r;
	return gpusys_poll_recv_parse(buf, (uint32_t)r, fds, n, lens, offs);
}

int64_t gpusys_emu_getaddrinfo(const gpusys_dev_t *dev, const char *host, const char *serv, int family,
			       int socktype, int protocol, int flags, struct gpusys_addrinfo *res, uint32_t max)
{
	size_t hl = host ? strlen(host) : 0, sl = serv ? strlen(serv) : 0;
	if (hl >= GPUSYS_SOCK_HOST_MAX || sl >= GPUSYS_SOCK_SERV_MAX)
		return EAI_OVERFLOW;
	char body[GPUSYS_SOCK_HOST_MAX + GPUSYS_SOCK_SERV_MAX + 2];
	memcpy(body, host ? host : "", hl + 1);
	memcpy(body + hl + 1, serv ? serv : "", sl + 1);
	struct gpusys_emu_sock_lane a;
	lane_init(&a, 0);
	a.q.a = family;
	a.q.b = socktype;
	a.q.c = protocol;
	a.q.flags = flags;
	a.body = body;
	a.body_len = (uint32_t)(hl + sl + 2);
	a.out = res;
	a.out_cap = (max < GPUSYS_SOCK_AI_MAX ? max : GPUSYS_SOCK_AI_MAX) * (uint32_t)sizeof(*res);
	int64_t r = one(dev, GPUSYS_OP_SOCK_GETADDRINFO, &a);
	return r < 0 ? r : r / (int64_t)sizeof(*res);
}

int64_t gpusys_emu_getnameinfo(const gpusys_dev_t *dev, const void *addr, uint32_t len, char *host,
			       uint32_t hostlen, char *serv, uint32_t servlen, int flags)
{
	char out[GPUSYS_SOCK_HOST_MAX + GPUSYS_SOCK_SERV_MAX];
	struct gpusys_emu_sock_lane a;
	lane_init(&a, 0);
	if (len > GPUSYS_SOCK_ADDR_MAX)
		return EAI_FAMILY;
	a.q.flags = flags;
	a.addr = addr;
	a.q.addr_len = len;
	a.out = out;
	a.out_cap = sizeof(out);
	int64_t r = one(dev, GPUSYS_OP_SOCK_GETNAMEINFO, &a);
	if (r < 0)
		return r;
	if (r < 2 || out[r - 1] != 0)
		return EAI_FAIL;
	size_t hl = strnlen(out, (size_t)r);
	const char *sv = out + hl + 1;
	if (host && hostlen) {
		if (hl + 1 > hostlen)
			return EAI_OVERFLOW;
		memcpy(host, out, hl + 1);
	}
	if (serv && servlen) {
		if (strlen(sv) + 1 > servlen)
			return EAI_OVERFLOW;
		memcpy(serv, sv, strlen(sv) + 1);
	}
	return 0;
}

/* ---------------------------------------------------------------- bulk */

static int64_t block_io(const gpusys_dev_t *dev, gpusys_fd_t h, uint8_t *buf, uint64_t len, int send_op)
{
	uint64_t done = 0;
	if (!dev->bulk_slots) {
		while (done < len) {
			uint64_t want = len - done < GPUSYS_SOCK_LANE_MAX ? len - done : GPUSYS_SOCK_LANE_MAX;
			int64_t r = send_op ? gpusys_emu_send(dev, h, buf + done, want, 0)
					    : gpusys_emu_recv(dev, h, buf + done, want, MSG_WAITALL);
			if (r < 0)
				return done ? (int64_t)done : r;
			done += (uint64_t)r;
			if ((uint64_t)r < want)
				break;
		}
		return (int64_t)done;
	}
	struct gpusys_bulk_ask a = {
		.op = send_op ? GPUSYS_OP_SOCK_BULK_SEND : GPUSYS_OP_SOCK_BULK_RECV,
		.handle = (int32_t)h,
		.flags = send_op ? 0 : MSG_WAITALL,
		.off = -1,
	};
	return gpusys_bulk_emu_move(dev, gpusys_sock_bulk_ask, &a, buf, len, send_op);
}

int64_t gpusys_emu_send_block(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t len)
{
	return block_io(dev, h, (uint8_t *)buf, len, 1);
}

int64_t gpusys_emu_recv_block(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t len)
{
	return block_io(dev, h, buf, len, 0);
}
