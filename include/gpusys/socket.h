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
 *   POLL                 nfds int16 revents (result = how many are ready)
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
	GPUSYS_OP_SOCK_POLL,        /* a = nfds, timeout_ms, gpusys_pollfd[] -> revents[] */
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
	uint64_t count;     /* RECV/RECVFROM/GETSOCKOPT: room for the answer; BULK_*: bytes */
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
 * POLLERR, POLLHUP, POLLRDHUP, POLLNVAL (Linux values). */
struct gpusys_pollfd {
	int32_t handle;
	int16_t events;
	int16_t revents; /* ignored in requests */
};

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
