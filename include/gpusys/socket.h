/* SPDX-License-Identifier: MIT */
/*
 * The socket service: opcodes, request and response layouts shared by the
 * device code (include/gpusys/socket.cuh), the host-lane emulator
 * (include/gpusys/emulator/socket.h), the client protocol (device/sock_client.h)
 * and the daemon (daemon/services/socket/). Plain C that nvcc also accepts.
 *
 * Every call is a port request with one lane payload per calling lane:
 *
 *   struct gpusys_sock_req   fixed 48 bytes (below)
 *   body                     BIND/CONNECT/SENDTO: the address
 *                            (addr_len bytes, a Linux struct sockaddr_in,
 *                            sockaddr_in6 or sockaddr_un), then for
 *                            SEND/SENDTO the data; SETSOCKOPT: the option
 *                            value (optlen bytes); POLL: nfds struct
 *                            gpusys_pollfd; GETADDRINFO: host NUL service
 *                            (host may be empty); GETNAMEINFO: the address
 *
 * Results, per lane, as POSIX gives them: the lane status is -errno, or 0
 * with a response payload:
 *   RECV                 the bytes received (length = result; 0 = end of stream)
 *   RECVFROM/ACCEPT      struct gpusys_sock_addr (the peer), then the data (RECVFROM)
 *   GETSOCKNAME/GETPEERNAME  struct gpusys_sock_addr
 *   GETSOCKOPT           the option value (result = its length)
 *   POLL                 nfds int16 revents (result = how many are ready);
 *                        with GPUSYS_POLL_RECV on any pollfd, then the
 *                        handles' lengths and bytes (below)
 *   GETADDRINFO          struct gpusys_addrinfo[] (result = how many)
 *   GETNAMEINFO          host NUL service NUL
 *   everything else      int64_t value (handle, bytes sent, 0)
 *
 * Handles come from the same per-client table as file handles (a socket and
 * a file never get the same handle; close works on both). Nothing waits in
 * a daemon thread: accept with nobody pending, recv with nothing to read,
 * send into a full buffer, a connect in progress, poll and name lookups wait
 * on the daemon's event loop and complete when ready, after SO_RCVTIMEO /
 * SO_SNDTIMEO (-EAGAIN; connect: -EINPROGRESS) or the poll timeout.
 *
 * Name resolution errors are the C library's EAI_* values (negative on
 * glibc: EAI_NONAME -2, EAI_AGAIN -3, EAI_FAIL -4, EAI_FAMILY -6,
 * EAI_SERVICE -8, EAI_MEMORY -10, EAI_SYSTEM -11), returned as the lane
 * status of GETADDRINFO/GETNAMEINFO in place of -errno.
 */
#ifndef GPUSYS_SOCKET_H
#define GPUSYS_SOCKET_H

#include <stdint.h>

#include "gpusys/abi.h"

#define GPUSYS_OP_SOCK_FIRST 0x0300
#define GPUSYS_OP_SOCK_LAST 0x03ff

enum gpusys_sock_opcode {
	GPUSYS_OP_SOCK_SOCKET = GPUSYS_OP_SOCK_FIRST, /* a = domain, b = type (| SOCK_NONBLOCK/CLOEXEC), c = protocol */
	GPUSYS_OP_SOCK_BIND,        /* handle, address */
	GPUSYS_OP_SOCK_LISTEN,      /* handle, a = backlog */
	GPUSYS_OP_SOCK_ACCEPT,      /* handle, flags = accept4 flags -> addr; value in status... see below */
	GPUSYS_OP_SOCK_CONNECT,     /* handle, address */
	GPUSYS_OP_SOCK_SEND,        /* handle, flags = MSG_*, data */
	GPUSYS_OP_SOCK_RECV,        /* handle, flags, count -> data */
	GPUSYS_OP_SOCK_SENDTO,      /* handle, flags, address, data */
	GPUSYS_OP_SOCK_RECVFROM,    /* handle, flags, count -> addr, data */
	GPUSYS_OP_SOCK_SHUTDOWN,    /* handle, a = how */
	GPUSYS_OP_SOCK_CLOSE,       /* handle (a socket or a file) */
	GPUSYS_OP_SOCK_SETSOCKOPT,  /* handle, a = level, b = name, value */
	GPUSYS_OP_SOCK_GETSOCKOPT,  /* handle, a = level, b = name, count = room -> value */
	GPUSYS_OP_SOCK_GETSOCKNAME, /* handle -> addr */
	GPUSYS_OP_SOCK_GETPEERNAME, /* handle -> addr */
	GPUSYS_OP_SOCK_POLL,        /* a = nfds, timeout_ms, count = room per GPUSYS_POLL_RECV handle,
				     * gpusys_pollfd[] -> revents[] (and got[], bytes) */
	GPUSYS_OP_SOCK_GETADDRINFO, /* a = family, b = socktype, c = protocol, flags = AI_*, host NUL service */
	GPUSYS_OP_SOCK_GETNAMEINFO, /* flags = NI_*, address -> host NUL service NUL */
	GPUSYS_OP_SOCK_BULK_SEND = GPUSYS_OP_SOCK_FIRST + 0x20, /* handle, flags, count, bulk_off */
	GPUSYS_OP_SOCK_BULK_RECV,   /* handle, flags, count, bulk_off (MSG_WAITALL: until count) */
};

#define GPUSYS_SOCK_ADDR_MAX 128u    /* sizeof(struct sockaddr_storage) */
#define GPUSYS_SOCK_POLL_MAX 64u     /* descriptors of one lane's poll */
#define GPUSYS_SOCK_AI_MAX 16u       /* addresses one GETADDRINFO returns at most */
#define GPUSYS_SOCK_HOST_MAX 1025u   /* NI_MAXHOST */
#define GPUSYS_SOCK_SERV_MAX 32u     /* NI_MAXSERV */
#define GPUSYS_SOCK_OPT_MAX 128u     /* bytes of an option value */

struct gpusys_sock_req {
	int32_t handle;
	int32_t flags;      /* MSG_* (send/recv), SOCK_NONBLOCK|SOCK_CLOEXEC (accept4), AI_*, NI_* */
	int32_t a, b, c;    /* per opcode (above) */
	uint32_t addr_len;  /* bytes of address at the start of the body */
	int64_t timeout_ms; /* POLL: < 0 waits for ever, 0 does not wait */
	uint64_t count;     /* RECV/RECVFROM/GETSOCKOPT: room for the answer; BULK_*: bytes;
			     * POLL: room per handle asked with GPUSYS_POLL_RECV (0 without) */
	uint64_t bulk_off;  /* BULK_*: where in the bulk area */
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_sock_req) == 48, "socket request header layout");

/* An address in a response: a Linux struct sockaddr_* of len bytes. */
struct gpusys_sock_addr {
	uint32_t len;
	uint32_t reserved;
	uint8_t addr[GPUSYS_SOCK_ADDR_MAX];
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_sock_addr) == 136, "socket address record layout");

/* ACCEPT's answer: the new handle and the peer. */
struct gpusys_sock_accepted {
	int64_t handle;
	struct gpusys_sock_addr peer;
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_sock_accepted) == 144, "accept answer layout");

/* One descriptor of a POLL: events and revents are POLLIN, POLLOUT,
 * POLLERR, POLLHUP, POLLRDHUP, POLLNVAL (Linux values), and in events
 * GPUSYS_POLL_RECV. */
struct gpusys_pollfd {
	int32_t handle;
	int16_t events;
	int16_t revents; /* ignored in requests */
};

/* A poll that returns the bytes: a pollfd whose events carry
 * GPUSYS_POLL_RECV (with POLLIN) asks the daemon to receive, with
 * MSG_DONTWAIT and in the same call, up to the request's count bytes from
 * that socket when poll(2) finds it readable (POLLIN, POLLHUP or POLLERR:
 * an end of stream or an error is reported too). 0x4000 is no POLL* bit of
 * Linux poll(2) (the daemon asserts it against the POLL* values and strips it before
 * poll(2)). The answer of a poll in which any pollfd carries it:
 *
 *   int16_t revents[nfds]      as a plain poll's
 *   padding to 4 bytes
 *   int32_t got[nfds]          per handle: bytes received (> 0), 0 when the
 *                              peer closed (recv returned 0), or -errno:
 *                              -EAGAIN for a handle not asked, not readable
 *                              or with nothing after all; -ENOTSOCK for a
 *                              file; -EBADF for a bad or closed handle
 *   the bytes                  of every got[i] > 0, packed in handle order
 *
 * GPUSYS_POLL_RECV_HDR(nfds) bytes come before the data; the answer's room
 * (the lane's response capacity) must hold that plus count for each handle
 * asked, else the poll is -EMSGSIZE; asking with count 0 is -EINVAL. A poll
 * with no pollfd asking keeps the plain answer. A handle's got == count
 * means more may be waiting: a plain recv takes the rest (nothing
 * received is dropped). On a datagram socket each receive is one datagram,
 * truncated to count as recv(2) truncates it. */
#define GPUSYS_POLL_RECV 0x4000
#define GPUSYS_POLL_RECV_REV_BYTES(n) (((uint32_t)(n) * 2u + 3u) & ~3u)
#define GPUSYS_POLL_RECV_HDR(n) (GPUSYS_POLL_RECV_REV_BYTES(n) + (uint32_t)(n) * 4u)

/* One address of a GETADDRINFO answer. */
struct gpusys_addrinfo {
	int32_t family;   /* AF_INET, AF_INET6 */
	int32_t socktype; /* SOCK_STREAM, SOCK_DGRAM */
	int32_t protocol;
	uint32_t addr_len;
	uint8_t addr[28]; /* sockaddr_in or sockaddr_in6 */
	uint32_t reserved;
};
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_addrinfo) == 48, "addrinfo layout");

#endif /* GPUSYS_SOCKET_H */
