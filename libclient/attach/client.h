/* SPDX-License-Identifier: MIT */
/*
 * libgpusys, inside: the connection to gpusysd (attach.c). Private to the
 * library (not installed, not exported): programs attach with gpusys_attach()
 * (include/gpusys/gpusys.h), which uses this for both its GPU and its
 * emulated handles. Tests of the handshake itself (tests/daemon/test_attach,
 * test_idle) link the library's objects to reach it.
 *
 * Functions return 0 or a negative errno; out-parameters are written only on
 * success. Closing the connection (detach, or the process ending) is what
 * tells the daemon to free the channel.
 */
#ifndef GPUSYS_LIBCLIENT_CLIENT_H
#define GPUSYS_LIBCLIENT_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpusys_client;

struct gpusys_attach_opts {
	const char *runtime_dir; /* NULL: $GPUSYS_RUNTIME_DIR, else /run/gpusysd */
	uint32_t num_ports;      /* asked for; the daemon may grant fewer (0 counts as 1) */
	uint64_t bulk_bytes;     /* asked for; the daemon may grant less */
	int cuda_device;         /* device ordinal in this process's numbering, or
				    -1: no GPU (emulated warps) */
	bool pass_stdio;         /* give the daemon our stdout and stderr (print service) */
	bool pass_cwd;           /* give the daemon our working directory (file service) */
	uint32_t memory_kinds;   /* (1u << enum gpusys_memory_kind) this process can
				    import; 0 means memfd only. A channel of a kind
				    other than memfd is not mapped here:
				    gpusys_client_channel() is NULL and the
				    importer (CUDA) maps and checks it. */
	/* The GPU by UUID (16 bytes, cuDeviceGetUuid), or NULL. The daemon
	 * identifies the GPU by this, never by cuda_device (numberings differ
	 * between processes); gpusys_attach fills it. A host client (emulated
	 * warps) may name one of the daemon's emulated GPUs. */
	const uint8_t *gpu_uuid;
};

/*
 * Connect to DIR/gpusysd.sock, send the hello, receive the welcome and the
 * channel descriptor, map the channel and check its header against the
 * layout its port count implies. Errors:
 *   -ENOENT, -ECONNREFUSED  no daemon at DIR
 *   -EPROTO                 version mismatch or a malformed welcome/channel
 *   -EUSERS                 the daemon serves its maximum of clients
 *   -ENODEV                 the daemon has no GPU with gpu_uuid (or it failed)
 *   -ETIMEDOUT              no welcome within 10 s
 *   any refusal status the daemon sent
 * gpusys_last_error() then says why in words.
 */
int gpusys_client_attach(const struct gpusys_attach_opts *opts, struct gpusys_client **ret);

/* Unmap the channel and close the connection. NULL is fine. */
void gpusys_client_detach(struct gpusys_client *c);

void *gpusys_client_channel(const struct gpusys_client *c);
uint64_t gpusys_client_channel_bytes(const struct gpusys_client *c);
uint32_t gpusys_client_num_ports(const struct gpusys_client *c);
uint32_t gpusys_client_conn_id(const struct gpusys_client *c);
/* The descriptor the daemon sent (owned by c; dup it to keep it), for an
 * importer such as CUDA. */
int gpusys_client_memory_fd(const struct gpusys_client *c);
uint32_t gpusys_client_memory_kind(const struct gpusys_client *c); /* enum gpusys_memory_kind */
/* The wake descriptor (owned by c; common/wire.h): a host thread
 * that rings the doorbell of a dozing daemon writes a byte to it. The
 * emulator does this by itself (gpusys_emu_open finds it). */
int gpusys_client_wake_fd(const struct gpusys_client *c);
/* The connection to the daemon (owned by c): poll it for POLLRDHUP to learn
 * that the daemon went away. */
int gpusys_client_socket_fd(const struct gpusys_client *c);

/* Daemon restarts (docs/RESTART.md). When the daemon hangs up with the
 * channel in GPUSYS_SERVER_HANDOVER, the watchdogs (dev_handle.c, cuda.c)
 * call gpusys_client_reconnect: it re-offers the channel to the next daemon
 * for up to GPUSYS_RECONNECT_MS (environment, milliseconds; 0: never,
 * today's -ESHUTDOWN) and returns 0 once one took it (the connection and
 * wake descriptors keep their numbers), -ECANCELED when stop_fd (or -1)
 * became readable, or -ESHUTDOWN / the refusal: then the caller aborts. */
#define GPUSYS_RECONNECT_ENV "GPUSYS_RECONNECT_MS"
#define GPUSYS_RECONNECT_DEFAULT_MS 10000
int gpusys_client_reconnect(struct gpusys_client *c, int stop_fd);
int gpusys_client_reconnect_ms(void);

/* Set what gpusys_last_error() says in this thread (printf format);
 * returns err. Every failing step of gpusys_attach says why through it. */
int gpusys_set_last_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gpusys_clear_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_LIBCLIENT_CLIENT_H */
