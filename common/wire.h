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
 * The connection then stays open: its closing (or the client process
 * dying) is the detach, and the daemon frees everything of that client. A
 * daemon that must refuse sends a welcome with status < 0 and a
 * NUL-terminated message, then closes.
 *
 * After the welcome (wire 4) the client may send reports on it
 * (struct gpusys_report below: what libgpusys did that the daemon cannot
 * see, such as a finished bulk copy), each in one record, and never expects
 * an answer; the daemon sends nothing back but a goodbye. Only when the
 * welcome's wire_version is GPUSYS_WIRE_REPORTS or more: a daemon answers a
 * hello in the hello's own version (it accepts GPUSYS_WIRE_VERSION_MIN up to
 * its own), so an older client's session stays one without reports, and
 * anything such a client sends is a protocol error as before.
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
#define GPUSYS_REPORT_MAGIC UINT32_C(0x50455247)  /* "GREP" */
/* 2: the hello names the client's GPU by UUID (gpu_uuid).
 * 3: a hello may re-offer a channel after a daemon restart
 *    (GPUSYS_HELLO_FD_CHANNEL).
 * 4: reports after the welcome (struct gpusys_report). The hello and the
 *    welcome are those of 3. */
#define GPUSYS_WIRE_VERSION 4u
/* The oldest hello a daemon still takes: its layout is this version's, and
 * a client that was running across a daemon upgrade re-offers its channel
 * with the hello it first sent (docs/RESTART.md). */
#define GPUSYS_WIRE_VERSION_MIN 3u
/* The first version whose sessions carry reports. */
#define GPUSYS_WIRE_REPORTS 4u

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

/* What a report tells (wire 4). */
enum gpusys_report_kind {
	GPUSYS_REPORT_COPY = 1, /* a bulk copy of libgpusys finished (include/gpusys/copy.h) */
};

/* Bounds the daemon holds a report to: the client is not trusted, and a
 * value past these is a lie, not a measurement (a protocol error). */
#define GPUSYS_REPORT_MAX_PRODUCERS 4096u            /* threads of one copy engine */
#define GPUSYS_REPORT_MAX_BYTES (UINT64_C(1) << 48)  /* 256 TiB in one copy */
#define GPUSYS_REPORT_MAX_NS (UINT64_C(1) << 50)     /* 13 days for one copy */
#define GPUSYS_REPORT_MAX_CHANGES (UINT64_C(1) << 40) /* producers added or taken back */
#define GPUSYS_REPORT_MAX_BYTES_PER_NS 10000u        /* 10 TB/s: beyond any link */

/*
 * One report, client -> daemon, fixed size, native byte order (both ends
 * are on one host). A report may come in pieces (several records, in
 * order), which the daemon joins; a record that runs past the end of the
 * report, a wrong magic, kind or length, or a field out of bounds ends the
 * client (a goodbye says why). The client sends it with MSG_DONTWAIT and
 * drops it when the socket is full: a report never delays what it reports.
 */
struct gpusys_report {
	uint32_t magic;          /* GPUSYS_REPORT_MAGIC */
	uint16_t kind;           /* enum gpusys_report_kind */
	uint16_t length;         /* sizeof(struct gpusys_report) */
	/* GPUSYS_REPORT_COPY: one copy that went through the copy engine
	 * (a driver copy below min_engine_bytes is not reported). */
	uint32_t direction;      /* 0 host to device, 1 device to host */
	uint32_t producers_open; /* producer threads working when the engine
				    was opened */
	uint32_t producers_end;  /* working when this copy ended: producers_open
				    + added - taken_back */
	uint32_t reserved;       /* 0 */
	uint64_t bytes;          /* the copy's size, >= 1 */
	uint64_t ns;             /* from the engine taking it up to its end, >= 1 */
	uint64_t added;          /* producers put to work since the engine was opened */
	uint64_t taken_back;     /* and taken back since then (copy_adapt.h) */
};

GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_report) == 56, "the report's layout is part of wire 4");
GPUSYS_STATIC_ASSERT(sizeof(struct gpusys_report) < 65536, "length is 16 bits");

#endif /* GPUSYS_WIRE_H */
