/* SPDX-License-Identifier: MIT */
/*
 * Sockets from CUDA kernels (the socket service, include/gpusys/socket.h).
 * Pass the handle from gpusys_device() to the kernel by value; include
 * <netinet/in.h>, <sys/un.h> for the address structures (Linux layouts:
 * both ends run on one host) and use gpusys_htons()/gpusys_htonl() on the
 * device.
 *
 * Per-thread calls are warp-aggregated like the file calls: the lanes that
 * reach a call together share one request and one round trip, each with
 * its own socket and arguments. They return what the POSIX call returns or
 * a negative errno (-ECONNREFUSED, -EAGAIN...; -ESHUTDOWN when the daemon
 * has gone). A call that must wait (accept with nobody pending, recv with
 * nothing there, send into a full buffer, connect in progress, poll, name
 * lookups) waits in the daemon's event loop, not in a daemon thread; the
 * calling warp spins on its port meanwhile, so other warps' calls flow.
 * Lanes of one warp that wait for different things complete together, when
 * the last one is done: give long waits (accept, recv on idle peers) their
 * own warps, or use gpusys_poll (gpusys_poll_recv: the poll that brings the
 * readable connections' bytes with it, one call fewer a message).
 *
 * Handles share one space with files: gpusys_close() (file.cuh) closes a
 * socket too.
 *
 * Sizes: gpusys_recv puts up to 1 MiB straight into buf; gpusys_send sends
 * GPUSYS_SOCK_GPU_PIECE bytes per round trip (a stream: all of it, in
 * pieces; on a datagram socket each piece is its own datagram, so keep
 * datagrams within one piece); gpusys_recvfrom
 * receives at most GPUSYS_SOCK_GPU_PIECE bytes (the address comes with the
 * data through a local buffer; larger datagrams are truncated as recvfrom(2)
 * truncates them; use gpusys_recv on a connected socket for more).
 *
 * Block calls (gpusys_send_block, gpusys_recv_block) move large data
 * through the channel's bulk area: every thread of the block calls them
 * with the same arguments; see file.cuh for the bulk area and its needs.
 * A kernel that calls either with blocks of 1024 threads needs more than 64
 * registers per thread: declare it __launch_bounds__(1024, 1), else the
 * launch fails with "too many resources requested"; blocks of up to 512
 * threads need nothing (file.cuh gives the figures, why the calls cannot
 * fit by themselves, why the 1, and gpusys_block_kernel_check()).
 *
 * Local memory: send/sendto/recvfrom use a 4 KiB local buffer per thread,
 * getaddrinfo/getnameinfo about 1.1 KiB.
 */
#ifndef GPUSYS_SOCKET_CUH
#define GPUSYS_SOCKET_CUH

#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>

#include "gpusys/dev.h"
#include "gpusys/file.cuh"
#include "gpusys/socket.h"
#include "gpusys/device/sock_client.h"

#define GPUSYS_SOCK_GPU_PIECE (4096u - GPUSYS_SOCK_REQ_BYTES - GPUSYS_SOCK_ADDR_MAX)

static __device__ __forceinline__ uint16_t gpusys_htons(uint16_t v)
{
	return (uint16_t)((v >> 8) | (v << 8));
}

static __device__ __forceinline__ uint32_t gpusys_htonl(uint32_t v)
{
	return __byte_perm(v, 0, 0x0123);
}

#define gpusys_ntohs gpusys_htons
#define gpusys_ntohl gpusys_htonl

/* One call of the calling lane, with the other active lanes. */
static __device__ __forceinline__ long long gpusys_sock_call1(const gpusys_dev_t &dev, uint16_t op, const uint8_t *req,
							      uint32_t req_len, void *out, uint32_t out_cap)
{
	const uint8_t *r[1] = { req };
	uint32_t rl[1] = { req_len }, cap[1] = { out_cap };
	void *o[1] = { out };
	int64_t ret[1] = { 0 };
	gpusys_sock_rpc(&dev, op, (uint64_t)__activemask(), r, rl, o, cap, ret);
	return (long long)ret[0];
}

static __device__ long long gpusys_sock_simple(const gpusys_dev_t &dev, uint16_t op, struct gpusys_sock_req &q,
					       void *out = 0, uint32_t out_cap = 0)
{
	return gpusys_sock_call1(dev, op, (const uint8_t *)&q, GPUSYS_SOCK_REQ_BYTES, out, out_cap);
}

/* A call whose body is an address (bind, connect). */
static __device__ long long gpusys_sock_addr_call(const gpusys_dev_t &dev, uint16_t op, gpusys_fd_t h, const void *addr,
						  unsigned len)
{
	uint8_t scratch[GPUSYS_SOCK_REQ_BYTES + GPUSYS_SOCK_ADDR_MAX];
	if (len > GPUSYS_SOCK_ADDR_MAX)
		len = GPUSYS_SOCK_ADDR_MAX + 1; /* the daemon says -EINVAL */
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	uint32_t n = len > GPUSYS_SOCK_ADDR_MAX ? 0 : len;
	q.addr_len = len > GPUSYS_SOCK_ADDR_MAX ? 0 : len;
	uint32_t rl = gpusys_sock_pack(scratch, &q, addr, n, 0, 0);
	return gpusys_sock_call1(dev, op, scratch, rl, 0, 0);
}

/* ------------------------------------------------------- per thread */

static __device__ long long gpusys_socket(gpusys_dev_t dev, int domain, int type, int protocol = 0)
{
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.a = domain;
	q.b = type;
	q.c = protocol;
	return gpusys_sock_simple(dev, GPUSYS_OP_SOCK_SOCKET, q);
}

static __device__ int gpusys_bind(gpusys_dev_t dev, gpusys_fd_t h, const void *addr, unsigned len)
{
	return (int)gpusys_sock_addr_call(dev, GPUSYS_OP_SOCK_BIND, h, addr, len);
}

static __device__ int gpusys_connect(gpusys_dev_t dev, gpusys_fd_t h, const void *addr, unsigned len)
{
	return (int)gpusys_sock_addr_call(dev, GPUSYS_OP_SOCK_CONNECT, h, addr, len);
}

/* A call on a handle with one number (listen's backlog, shutdown's how). */
static __device__ int gpusys_sock_handle_call(const gpusys_dev_t &dev, uint16_t op, gpusys_fd_t h, int a)
{
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	q.a = a;
	return (int)gpusys_sock_simple(dev, op, q);
}

static __device__ int gpusys_listen(gpusys_dev_t dev, gpusys_fd_t h, int backlog)
{
	return gpusys_sock_handle_call(dev, GPUSYS_OP_SOCK_LISTEN, h, backlog);
}

static __device__ void gpusys_sock_addr_out(const struct gpusys_sock_addr &r, void *addr, unsigned *len)
{
	if (!addr || !len)
		return;
	unsigned n = r.len < *len ? r.len : *len;
	for (unsigned i = 0; i < n; i++)
		((uint8_t *)addr)[i] = r.addr[i];
	*len = r.len;
}

/* The new handle, or -errno. addr/len may be NULL. flags: SOCK_NONBLOCK,
 * SOCK_CLOEXEC. */
static __device__ long long gpusys_accept4(gpusys_dev_t dev, gpusys_fd_t h, void *addr, unsigned *len, int flags)
{
	struct gpusys_sock_accepted acc;
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	q.flags = flags;
	long long r = gpusys_sock_simple(dev, GPUSYS_OP_SOCK_ACCEPT, q, &acc, sizeof(acc));
	if (r < 0)
		return r;
	if (r < (long long)sizeof(acc))
		return -EPROTO;
	gpusys_sock_addr_out(acc.peer, addr, len);
	return acc.handle;
}

static __device__ long long gpusys_accept(gpusys_dev_t dev, gpusys_fd_t h, void *addr = 0, unsigned *len = 0)
{
	return gpusys_accept4(dev, h, addr, len, 0);
}

/* send/sendto: pieces of GPUSYS_SOCK_GPU_PIECE until done. */
static __device__ long long gpusys_sendto(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long n,
					  int flags, const void *addr, unsigned alen)
{
	uint8_t scratch[GPUSYS_SOCK_REQ_BYTES + GPUSYS_SOCK_ADDR_MAX + GPUSYS_SOCK_GPU_PIECE];
	if (addr && alen > GPUSYS_SOCK_ADDR_MAX)
		return -EINVAL;
	uint16_t op = addr ? GPUSYS_OP_SOCK_SENDTO : GPUSYS_OP_SOCK_SEND;
	unsigned long long done = 0;
	do {
		uint32_t piece = n - done < GPUSYS_SOCK_GPU_PIECE ? (uint32_t)(n - done) : GPUSYS_SOCK_GPU_PIECE;
		struct gpusys_sock_req q;
		gpusys_sock_req_init(&q);
		q.handle = (int32_t)h;
		q.flags = flags;
		q.addr_len = addr ? alen : 0;
		uint32_t rl = gpusys_sock_pack(scratch, &q, addr, q.addr_len, (const uint8_t *)buf + done, piece);
		long long r = gpusys_sock_call1(dev, op, scratch, rl, 0, 0);
		if (r < 0)
			return done ? (long long)done : r;
		done += (unsigned long long)r;
		if ((uint32_t)r < piece)
			break;
	} while (done < n);
	return (long long)done;
}

static __device__ long long gpusys_send(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long n,
					int flags = 0)
{
	return gpusys_sendto(dev, h, buf, n, flags, 0, 0);
}

/* All n bytes, or the -errno that stopped it. A send may be short (a
 * non-blocking socket, MSG_DONTWAIT, SO_SNDTIMEO, an error after some
 * bytes): that is not an error, the rest goes in the next call, as a server
 * must do with send(2). *sent (if not NULL): the bytes sent either way. */
static __device__ long long gpusys_send_all(gpusys_dev_t dev, gpusys_fd_t h, const void *buf, unsigned long long n,
					    int flags = 0, unsigned long long *sent = 0)
{
	unsigned long long done = 0;
	long long r = 0;
	while (done < n) {
		r = gpusys_send(dev, h, (const uint8_t *)buf + done, n - done, flags);
		if (r <= 0) {
			r = r < 0 ? r : -EAGAIN; /* nothing moved, no error: do not spin */
			break;
		}
		done += (unsigned long long)r;
		r = 0;
	}
	if (sent)
		*sent = done;
	return r < 0 ? r : (long long)done;
}

/* Bytes received (0: the peer closed), straight into buf, at most 1 MiB. */
static __device__ long long gpusys_recv(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n, int flags = 0)
{
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	uint32_t c = n < GPUSYS_MAX_LANE_PAYLOAD ? (uint32_t)n : GPUSYS_MAX_LANE_PAYLOAD;
	q.handle = (int32_t)h;
	q.flags = flags;
	q.count = c;
	return gpusys_sock_simple(dev, GPUSYS_OP_SOCK_RECV, q, buf, c);
}

static __device__ long long gpusys_recvfrom(gpusys_dev_t dev, gpusys_fd_t h, void *buf, unsigned long long n, int flags,
					    void *addr, unsigned *alen)
{
	uint8_t scratch[sizeof(struct gpusys_sock_addr) + GPUSYS_SOCK_GPU_PIECE];
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	uint32_t c = n < GPUSYS_SOCK_GPU_PIECE ? (uint32_t)n : GPUSYS_SOCK_GPU_PIECE;
	q.handle = (int32_t)h;
	q.flags = flags;
	q.count = c;
	long long r = gpusys_sock_simple(dev, GPUSYS_OP_SOCK_RECVFROM, q, scratch, (uint32_t)sizeof(struct gpusys_sock_addr) + c);
	if (r < 0)
		return r;
	if (r < (long long)sizeof(struct gpusys_sock_addr))
		return -EPROTO;
	struct gpusys_sock_addr rec;
	gpusys_file_bytecopy((uint8_t *)&rec, scratch, sizeof(rec));
	gpusys_sock_addr_out(rec, addr, alen);
	r -= (long long)sizeof(rec);
	gpusys_file_bytecopy((uint8_t *)buf, scratch + sizeof(rec), (uint32_t)r);
	return r;
}

static __device__ int gpusys_shutdown(gpusys_dev_t dev, gpusys_fd_t h, int how)
{
	return gpusys_sock_handle_call(dev, GPUSYS_OP_SOCK_SHUTDOWN, h, how);
}

static __device__ int gpusys_setsockopt(gpusys_dev_t dev, gpusys_fd_t h, int level, int name, const void *val,
					unsigned len)
{
	uint8_t scratch[GPUSYS_SOCK_REQ_BYTES + GPUSYS_SOCK_OPT_MAX];
	if (len > GPUSYS_SOCK_OPT_MAX)
		return -EINVAL;
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	q.a = level;
	q.b = name;
	uint32_t rl = gpusys_sock_pack(scratch, &q, 0, 0, val, len);
	return (int)gpusys_sock_call1(dev, GPUSYS_OP_SOCK_SETSOCKOPT, scratch, rl, 0, 0);
}

/* *len: room in, bytes out. 0 or -errno. */
static __device__ int gpusys_getsockopt(gpusys_dev_t dev, gpusys_fd_t h, int level, int name, void *val, unsigned *len)
{
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	q.a = level;
	q.b = name;
	q.count = *len;
	long long r = gpusys_sock_simple(dev, GPUSYS_OP_SOCK_GETSOCKOPT, q, val, *len);
	if (r < 0)
		return (int)r;
	*len = (unsigned)r;
	return 0;
}

static __device__ int gpusys_sock_name(gpusys_dev_t dev, uint16_t op, gpusys_fd_t h, void *addr, unsigned *len)
{
	struct gpusys_sock_addr rec;
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.handle = (int32_t)h;
	long long r = gpusys_sock_simple(dev, op, q, &rec, sizeof(rec));
	if (r < 0)
		return (int)r;
	if (r < (long long)sizeof(rec))
		return -EPROTO;
	gpusys_sock_addr_out(rec, addr, len);
	return 0;
}

static __device__ int gpusys_getsockname(gpusys_dev_t dev, gpusys_fd_t h, void *addr, unsigned *len)
{
	return gpusys_sock_name(dev, GPUSYS_OP_SOCK_GETSOCKNAME, h, addr, len);
}

static __device__ int gpusys_getpeername(gpusys_dev_t dev, gpusys_fd_t h, void *addr, unsigned *len)
{
	return gpusys_sock_name(dev, GPUSYS_OP_SOCK_GETPEERNAME, h, addr, len);
}

/* One poll request of fds[0..n) (n <= GPUSYS_SOCK_POLL_MAX), room_each
 * bytes for each handle asking for its bytes (0: none asks), the answer
 * into out (cap bytes): its length, or -errno. */
static __device__ long long gpusys_poll_ask(const gpusys_dev_t &dev, const struct gpusys_pollfd *fds, unsigned n,
					    long long timeout_ms, unsigned room_each, void *out, unsigned cap)
{
	uint8_t scratch[GPUSYS_SOCK_REQ_BYTES + GPUSYS_SOCK_POLL_MAX * sizeof(struct gpusys_pollfd)];
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.a = (int32_t)n;
	q.timeout_ms = timeout_ms;
	q.count = room_each;
	uint32_t rl = gpusys_sock_pack(scratch, &q, 0, 0, fds, n * (uint32_t)sizeof(*fds));
	return gpusys_sock_call1(dev, GPUSYS_OP_SOCK_POLL, scratch, rl, out, cap);
}

/* How many of fds[0..n) are ready (revents filled), 0 at the timeout
 * (ms; < 0 waits for ever), or -errno. n <= GPUSYS_SOCK_POLL_MAX. */
static __device__ int gpusys_poll(gpusys_dev_t dev, struct gpusys_pollfd *fds, unsigned n, long long timeout_ms)
{
	int16_t rev[GPUSYS_SOCK_POLL_MAX];
	if (n > GPUSYS_SOCK_POLL_MAX)
		return -EINVAL;
	long long r = gpusys_poll_ask(dev, fds, n, timeout_ms, 0, rev, n * (uint32_t)sizeof(int16_t));
	if (r < 0)
		return (int)r;
	int ready = 0;
	for (unsigned i = 0; i < n; i++) {
		fds[i].revents = (unsigned long long)r >= (i + 1) * sizeof(int16_t) ? rev[i] : 0;
		ready += fds[i].revents != 0;
	}
	return ready;
}

/* gpusys_poll that also returns the bytes (socket.h, GPUSYS_POLL_RECV):
 * each pollfd whose events carry GPUSYS_POLL_RECV (with POLLIN) is
 * received from, with MSG_DONTWAIT, up to room_each bytes, in the same
 * call, when the daemon finds it readable. buf is the raw answer (cap
 * bytes: at least GPUSYS_POLL_RECV_HDR(n), at most 6n + 4, plus room_each
 * for every handle asking, else -EMSGSIZE). Fills fds[i].revents as
 * gpusys_poll does, lens[i] (bytes received, 0 when the peer closed, or
 * -errno: -EAGAIN when not asked, not readable or nothing came) and offs[i]
 * (handle i's bytes are buf[offs[i], offs[i] + lens[i])). lens[i] ==
 * room_each: more may be waiting, gpusys_recv takes it. Returns how many
 * are ready, 0 at the timeout, or -errno. Per thread, like gpusys_poll. */
static __device__ int gpusys_poll_recv(gpusys_dev_t dev, struct gpusys_pollfd *fds, unsigned n, long long timeout_ms,
				       void *buf, unsigned cap, unsigned room_each, int *lens, unsigned *offs)
{
	if (n > GPUSYS_SOCK_POLL_MAX)
		return -EINVAL;
	long long r = gpusys_poll_ask(dev, fds, n, timeout_ms, room_each, buf, cap);
	if (r < 0)
		return (int)r;
	return gpusys_poll_recv_parse((const uint8_t *)buf, (uint32_t)r, fds, n, (int32_t *)lens, (uint32_t *)offs);
}

/* Up to max addresses of host/serv into res: how many, or an EAI_* value
 * (negative). family: AF_UNSPEC/AF_INET/AF_INET6; flags: AI_*. */
static __device__ int gpusys_getaddrinfo(gpusys_dev_t dev, const char *host, const char *serv, int family, int socktype,
					 int flags, struct gpusys_addrinfo *res, unsigned max)
{
	uint8_t scratch[GPUSYS_SOCK_REQ_BYTES + 256 + GPUSYS_SOCK_SERV_MAX + 2];
	uint32_t hl = host ? gpusys_file_strnlen(host, 255) : 0, sl = serv ? gpusys_file_strnlen(serv, GPUSYS_SOCK_SERV_MAX - 1) : 0;
	if (hl > 255 || sl > GPUSYS_SOCK_SERV_MAX - 1)
		return EAI_OVERFLOW;
	struct gpusys_sock_req q;
	gpusys_sock_req_init(&q);
	q.a = family;
	q.b = socktype;
	q.flags = flags;
	uint32_t n = GPUSYS_SOCK_REQ_BYTES;
	gpusys_file_bytecopy(scratch, (const uint8_t *)&q, n);
	gpusys_file_bytecopy(scratch + n, (const uint8_t *)host, hl);
	n += hl;
	scratch[n++] = 0;
	gpusys_file_bytecopy(scratch + n, (const uint8_t *)serv, sl);
	n += sl;
	scratch[n++] = 0;
	if (max > GPUSYS_SOCK_AI_MAX)
		max = GPUSYS_SOCK_AI_MAX;
	long long r = gpusys_sock_call1(dev, GPUSYS_OP_SOCK_GETADDRINFO, scratch, n, res,
					max * (uint32_t)sizeof(struct gpusys_addrinfo));
	return r < 0 ? (int)r : (int)(r / (long long)sizeof(struct gpusys_addrinfo));
}

/* ---------------------------------------------------------------- block */

/* Every thread of the block: send all of len bytes of buf (device memory)
 * through the bulk area. Thread 0 has the daemon send one half of a slot
 * while the other warps fill the other half (device/bulk_block.cuh). Bytes
 * sent or -errno. */
static __device__ long long gpusys_send_block(gpusys_dev_t dev, gpusys_fd_t handle, const void *vbuf,
					      unsigned long long len)
{
	__shared__ long long sh_res;
	const uint8_t *buf = (const uint8_t *)vbuf;
	if (len == 0)
		return 0;
	if (!gpusys_block_bulk_usable(&dev)) {
		__syncthreads();
		if (gpusys_block_tid() == 0)
			sh_res = gpusys_send(dev, handle, buf, len);
		__syncthreads();
		return sh_res;
	}
	struct gpusys_bulk_ask a;
	a.op = GPUSYS_OP_SOCK_BULK_SEND;
	a.handle = (int32_t)handle;
	a.flags = 0;
	a.off = -1;
	return gpusys_block_bulk_write(&dev, gpusys_sock_bulk_ask, &a, buf, len);
}

/* Every thread of the block: receive len bytes (fewer only if the peer
 * closes) into buf through the bulk area, a whole slot per request
 * (device/bulk_block.cuh). Bytes received or -errno. */
static __device__ long long gpusys_recv_block(gpusys_dev_t dev, gpusys_fd_t handle, void *vbuf, unsigned long long len)
{
	__shared__ long long sh_res;
	uint8_t *buf = (uint8_t *)vbuf;
	if (len == 0)
		return 0;
	if (!gpusys_block_bulk_usable(&dev)) {
		__syncthreads();
		if (gpusys_block_tid() == 0) {
			unsigned long long done = 0;
			long long r = 0;
			while (done < len) {
				r = gpusys_recv(dev, handle, buf + done, len - done, MSG_WAITALL);
				if (r <= 0)
					break;
				done += (unsigned long long)r;
			}
			sh_res = done || r >= 0 ? (long long)done : r;
		}
		__syncthreads();
		return sh_res;
	}
	struct gpusys_bulk_ask a;
	a.op = GPUSYS_OP_SOCK_BULK_RECV;
	a.handle = (int32_t)handle;
	a.flags = MSG_WAITALL;
	a.off = -1;
	return gpusys_block_bulk_read_whole(&dev, gpusys_sock_bulk_ask, &a, buf, len);
}

#endif /* GPUSYS_SOCKET_CUH */
