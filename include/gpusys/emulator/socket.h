/* SPDX-License-Identifier: MIT */
/*
 * Socket calls from the host-lane emulator (include/gpusys/emulator.h): the
 * same requests a warp sends (device/sock_client.h), from a CPU thread
 * acting as one warp.
 *
 * gpusys_emu_sock_call() is the general form: up to 32 lanes, each with its
 * own request, as a warp makes them. The gpusys_emu_<call> functions are
 * one lane each, with the arguments and results of the POSIX call: the
 * value, or a negative errno (EAI_* for getaddrinfo/getnameinfo). Addresses
 * are Linux struct sockaddr_* (both ends run on one host).
 */
#ifndef GPUSYS_SOCKET_EMU_H
#define GPUSYS_SOCKET_EMU_H

#include <stdint.h>
#include <sys/socket.h>

#include "gpusys/dev.h"
#include "gpusys/socket.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes one lane sends per call (a longer send is short, as POSIX allows). */
#define GPUSYS_SOCK_LANE_MAX (GPUSYS_MAX_LANE_PAYLOAD - 48u - GPUSYS_SOCK_ADDR_MAX)

/* One lane of a socket call: its request header, address, body, where its
 * answer goes; ret receives its result. */
struct gpusys_emu_sock_lane {
	struct gpusys_sock_req q; /* q.addr_len: bytes of addr */
	const void *addr;
	const void *body;
	uint32_t body_len;
	void *out;
	uint32_t out_cap;
	int64_t ret;
};

/* The lanes of mask make one call together. 0 when every lane succeeded,
 * else the first negative result (in lane order). */
int gpusys_emu_sock_call(const gpusys_dev_t *dev, uint16_t op, uint64_t mask, struct gpusys_emu_sock_lane *lanes);

int64_t gpusys_emu_socket(const gpusys_dev_t *dev, int domain, int type, int protocol);
int64_t gpusys_emu_bind(const gpusys_dev_t *dev, gpusys_fd_t h, const void *addr, uint32_t len);
int64_t gpusys_emu_listen(const gpusys_dev_t *dev, gpusys_fd_t h, int backlog);
/* addr/len may be NULL. flags: accept4's SOCK_NONBLOCK | SOCK_CLOEXEC. */
int64_t gpusys_emu_accept4(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len, int flags);
int64_t gpusys_emu_connect(const gpusys_dev_t *dev, gpusys_fd_t h, const void *addr, uint32_t len);
int64_t gpusys_emu_send(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t n, int flags);
int64_t gpusys_emu_recv(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t n, int flags);
int64_t gpusys_emu_sendto(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t n, int flags,
			  const void *addr, uint32_t len);
int64_t gpusys_emu_recvfrom(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t n, int flags, void *addr,
			    uint32_t *len);
int64_t gpusys_emu_shutdown(const gpusys_dev_t *dev, gpusys_fd_t h, int how);
int64_t gpusys_emu_sock_close(const gpusys_dev_t *dev, gpusys_fd_t h); /* sockets and files */
int64_t gpusys_emu_setsockopt(const gpusys_dev_t *dev, gpusys_fd_t h, int level, int name, const void *val,
			      uint32_t len);
/* *len: room in, bytes out. */
int64_t gpusys_emu_getsockopt(const gpusys_dev_t *dev, gpusys_fd_t h, int level, int name, void *val, uint32_t *len);
int64_t gpusys_emu_getsockname(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len);
int64_t gpusys_emu_getpeername(const gpusys_dev_t *dev, gpusys_fd_t h, void *addr, uint32_t *len);
/* fds[i].revents filled; how many are ready. timeout_ms < 0: for ever. */
int64_t gpusys_emu_poll(const gpusys_dev_t *dev, struct gpusys_pollfd *fds, uint32_t n, int64_t timeout_ms);
/* The poll that returns the bytes (socket.h, GPUSYS_POLL_RECV): as
 * gpusys_emu_poll, and for each handle asking, up to room_each bytes
 * received in the same call into buf (cap bytes: GPUSYS_POLL_RECV_HDR(n)
 * plus room_each per handle asking); lens[i]: bytes, 0 (peer closed) or
 * -errno; offs[i]: where in buf they are. How many are ready, or -errno. */
int64_t gpusys_emu_poll_recv(const gpusys_dev_t *dev, struct gpusys_pollfd *fds, uint32_t n, int64_t timeout_ms,
			    void *buf, uint32_t cap, uint32_t room_each, int32_t *lens, uint32_t *offs);
/* Up to max addresses into res; how many, or EAI_*. hints: family,
 * socktype, protocol, flags (AI_*) as in struct addrinfo. */
int64_t gpusys_emu_getaddrinfo(const gpusys_dev_t *dev, const char *host, const char *serv, int family,
			       int socktype, int protocol, int flags, struct gpusys_addrinfo *res, uint32_t max);
int64_t gpusys_emu_getnameinfo(const gpusys_dev_t *dev, const void *addr, uint32_t len, char *host,
			       uint32_t hostlen, char *serv, uint32_t servlen, int flags);

/* Large transfers through the channel's bulk area, in slot-sized pieces
 * (packets when there is none): all of len bytes, unless the peer stops
 * (recv: end of stream) or an error comes after some bytes. Bytes moved or
 * -errno. */
int64_t gpusys_emu_send_block(const gpusys_dev_t *dev, gpusys_fd_t h, const void *buf, uint64_t len);
int64_t gpusys_emu_recv_block(const gpusys_dev_t *dev, gpusys_fd_t h, void *buf, uint64_t len);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_SOCKET_EMU_H */
