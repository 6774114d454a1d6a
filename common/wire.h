/* SPDX-License-Identifier: MIT */
/*
 * The attach handshake between libgpusys and gpusysd, on the client socket
 * RUNTIME_DIR/gpusysd.sock (AF_UNIX, SOCK_SEQPACKET: one message per
 * record, so a short or long read is a protocol error, not a partial one).
 *
 *   client -> daemon   struct gpusys_hello, with SCM_RIGHTS descriptors
 *                      (hello.nfds of them, in this order: stdout, stderr,
 *                      current working directory; each optional and -1
 *                      in the list is simply not sent, see hello.fd_mask)
 *   daemon -> client   struct gpusys_welcome, with SCM_RIGHTS when status
 *                      == 0: two descriptors, in this order: the channel
 *                      memory, then the wake descriptor
 *
 * The wake descriptor (ABI 3) is the write end of a pipe whose read end
 * only the daemon holds, one pipe per client. A host client (the emulator)
 * that rings the doorbell and then sees header.dozing set writes one byte
 * to it (abi.h gives the order); EAGAIN (the pipe is full) is fine, the
 * daemon is being woken anyway. GPU clients ignore it. Each client has its
 * own pipe, so what a client does to its descriptor (fill the pipe, make it
 * blocking, close it) touches only its own wake-ups: the most a hostile
 * client achieves is keeping the daemon awake, spinning its idle spin
 * window after each byte, as it could by sending requests.
 *
 * The connection then stays open and idle: its closing (or the client
 * process dying) is the detach, and the daemon frees everything of that
 * client. A daemon that must refuse sends a welcome with status < 0 and a
 * NUL-terminated message, then closes.
 *
 * The control socket RUNTIME_DIR/control.sock is AF_UNIX SOCK_STREAM with
 * one JSON object per line each way: {"cmd":"status"} -> status object.
 * Every request line gets one reply line, also after the client shut down
 * its sending side (a last line may then lack its newline). The status
 * (and "ports") lists the requesting user's clients only ("clients_shown":
 * "own"), or
 * every client for root, the daemon's user and members of admin_group
 * ("all"). A user may hold control_conns_per_uid connections; an idle one
 * is closed after control_idle_timeout_ms; a refused connection gets one
 * {"error": "..."} line, then the close.
 */
#ifndef GPUSYS_WIRE_H
#define GPUSYS_WIRE_H

#include <stdint.h>
#include "gpusys/abi.h"

#define GPUSYS_HELLO_MAGIC UINT32_C(0x4c454847)   /* "GHEL" */
#define GPUSYS_WELCOME_MAGIC UINT32_C(0x4c455747) /* "GWEL" */
/* A record shaped like the welcome that the daemon may send just before it
 * ends a client for a reason of its own (status < 0 and the message say
 * why: -ENODEV, "GPU ... failed: Xid 79"); the hang-up follows. */
#define GPUSYS_GOODBYE_MAGIC UINT32_C(0x45594247) /* "GBYE" */
/* 2: the hello names the client's GPU by UUID (gpu_uuid).
 * 3: a hello may re-offer a channel after a daemon restart
 *    (GPUSYS_HELLO_FD_CHANNEL). */
#define GPUSYS_WIRE_VERSION 3u

#define GPUSYS_SOCKET_NAME "gpusysd.sock"
#define GPUSYS_CONTROL_NAME "control.sock"
#define GPUSYS_DEFAULT_RUNTIME_DIR "/run/gpusysd"
#define GPUSYS_RUNTIME_DIR_ENV "GPUSYS_RUNTIME_DIR"

/* Which descriptors came with the hello, in this order. */
enum gpusys_hello_fds {
	GPUSYS_HELLO_FD_STDOUT = 1u << 0,
	GPUSYS_HELLO_FD_STDERR = 1u << 1,
	GPUSYS_HELLO_FD_CWD = 1u << 2,
	/* Re-offer (docs/RESTART.md): the channel memfd this client got from
	 * a daemon that has since stopped with the channel in HANDOVER, last
	 * in the list; hello.reserved holds the client id it had. The daemon
	 * adopts it only if it is a memfd sealed against shrinking and growing
	 * whose size and header match the layout its port count implies, and
	 * whose server_state is HANDOVER. The rest of the hello is the one the
	 * client first sent. */
	GPUSYS_HELLO_FD_CHANNEL = 1u << 3,
	GPUSYS_HELLO_FD_KNOWN = 0xfu,
};

/* How the channel memory is shared. */
enum gpusys_memory_kind {
	GPUSYS_MEMORY_MEMFD = 1,    /* memfd: mmap it; a CUDA client registers it
				       with cuMemHostRegister */
	GPUSYS_MEMORY_CUDA_VMM = 2, /* POSIX fd from cuMemExportToShareableHandle:
				       import with cuMemImportFromShareableHandle */
};

struct gpusys_hello {
	uint32_t magic;          /* GPUSYS_HELLO_MAGIC */
	uint32_t wire_version;   /* GPUSYS_WIRE_VERSION */
	uint32_t abi_version;    /* GPUSYS_ABI_VERSION */
	uint32_t num_ports;      /* requested; the daemon may lower it */
	int32_t cuda_device;     /* the client's device ordinal (in ITS numbering,
				    informational: logs), or -1: no GPU */
	uint32_t memory_kinds;   /* bit (1 << kind) for each kind the client can import */
	uint32_t fd_mask;        /* enum gpusys_hello_fds */
	uint32_t reserved;       /* with GPUSYS_HELLO_FD_CHANNEL: the client id the
				    channel had; else 0 */
	uint64_t bulk_bytes;     /* requested bulk area; the daemon may lower it */
	char comm[32];           /* informational program name, NUL-terminated */
	/* The GPU this client's kernels run on, as cuDeviceGetUuid gives it
	 * (all zero: none). Ordinals depend on each process's
	 * CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, so the daemon never
	 * trusts one: it finds the GPU with this UUID in its own numbering,
	 * and refuses (-ENODEV, saying which GPUs it has) a UUID it does not
	 * have. Required when cuda_device >= 0. An emulated client (cuda_device
	 * -1) may name one too: it is then counted as that GPU's client (tests
	 * use the daemon's emulated_gpus setting). */
	uint8_t gpu_uuid[16];
};

struct gpusys_welcome {
	uint32_t magic;          /* GPUSYS_WELCOME_MAGIC */
	uint32_t wire_version;
	int32_t status;          /* 0 or -errno; on error message says why */
	uint32_t client_id;
	uint32_t memory_kind;    /* enum gpusys_memory_kind */
	uint32_t num_ports;
	uint64_t channel_bytes;  /* size of the shared memory */
	uint64_t bulk_bytes;
	char message[256];       /* human-readable, NUL-terminated (wire 2: was 128) */
};

#endif /* GPUSYS_WIRE_H */
