/* SPDX-License-Identifier: MIT */
/* gpusysd settings: defaults, the config file ("key = value" lines) and the
 * limits every value is checked against. */
#ifndef GPUSYSD_CONFIG_FILE_H
#define GPUSYSD_CONFIG_FILE_H

#include <stdint.h>
#include <stdio.h>

enum config_kind {
	CONFIG_COUNT, /* plain integer */
	CONFIG_BYTES, /* integer with optional K/M/G (binary) suffix */
	CONFIG_GROUP, /* a group name or number (core key admin_group only) */
	CONFIG_TEXT,  /* a string, checked when set (util/config_text.h: emulated_gpus, metrics_listen, ...) */
};

/* A setting some module (a service) reads: accepted in the file and as
 * GPUSYSD_<KEY, upper case> in the environment. */
struct config_key {
	const char *key;
	enum config_kind kind;
	uint64_t min, max, def;
};

#define CONFIG_EXTRA_MAX 64
/* Core keys at most (config_file.c's table; checked there). */
#define CONFIG_CORE_MAX 48
/* config_where: a key set from GPUSYSD_<KEY>, not from a line. */
#define CONFIG_LINE_ENV 0xffffffffu

struct gpusysd_config {
	unsigned pollers;              /* 0: chosen from the CPU count; the group of clients that name no GPU */
	unsigned pollers_per_gpu;      /* each GPU's own pollers; 0: from the CPUs and GPUs, at most pollers */
	unsigned workers;              /* the default group's workers (file calls of clients that name no GPU) */
	unsigned workers_per_gpu;      /* each GPU's own workers; 0: as many as workers */
	unsigned max_clients;
	unsigned max_ports;            /* per client */
	uint64_t channel_bulk_bytes;   /* upper bound on a client's bulk area */
	uint64_t client_mem_budget;    /* bytes of daemon memory per client */
	unsigned idle_spin_us;         /* pollers spin this long after the last work */
	unsigned idle_sleep_us;        /* then poller 0 sleeps this long between doorbell checks */
	unsigned handshake_timeout_ms; /* a connection must say hello within this */
	unsigned max_pending_calls;    /* per client: calls that complete later, at once */
	unsigned call_timeout_ms;      /* deadline of a pending call whose service names none */
	unsigned stats;                /* 1: count and time every request (gpusysctl latency) */
	unsigned max_clients_per_uid;  /* attached clients of one user at most */
	uint64_t user_mem_budget;      /* bytes of daemon memory for all of one user's clients */
	uint64_t user_channel_bytes;   /* bytes of channel memory (ports, bulk) of all of one user's clients */
	unsigned max_handles_per_uid;  /* open handles of all of one user's clients; 0: derived (quotas.h) */
	unsigned max_pending_hellos;   /* connections not yet past their hello, all users; 0: derived */
	unsigned max_pending_hellos_per_uid; /* of them, one user's; 0: derived */
	unsigned max_pending_calls_per_uid; /* pending calls of all of one user's clients */
	unsigned control_conns_per_uid; /* open control connections of one user at most */
	unsigned control_idle_timeout_ms; /* a control connection idle this long is closed */
	int64_t admin_gid;             /* members see every client in status; -1: none */
	char emulated_gpus[1024];      /* GPUs invented for tests (core/gpus.h); "none" */
	char metrics_listen[128];      /* "HOST:PORT" of the Prometheus endpoint; "none" */
	unsigned gpu_watch;            /* 1: watch CUDA clients' doorbells from the GPU (wake.h) */
	char cuda_memory[8];           /* channel kind for CUDA clients that can take both: memfd, vmm */
	char poller_cpus[256];         /* CPU list: poller i runs on its i-th CPU (wrapping); "none": unpinned */
	unsigned restart_grace_ms;     /* SIGTERM: hand clients over within this (0: end them, -ESHUTDOWN) */
	unsigned restart_drain_ms;     /* of which requests under way may take this long */

	/* Settings registered by services (config_add_keys), with their values. */
	unsigned nextra;
	const struct config_key *extra[CONFIG_EXTRA_MAX];
	uint64_t extra_value[CONFIG_EXTRA_MAX];

	/* Where each value came from, so that what fails after parsing (a
	 * metrics port in use at start) still names FILE:LINE: the file
	 * config_load read ("" none), and per key its line there (0: not in
	 * it; CONFIG_LINE_ENV: the environment). Core keys, then extra ones. */
	char source[256];
	unsigned line[CONFIG_CORE_MAX + CONFIG_EXTRA_MAX];
};

/* Control connections at most, all users together. */
#define CONFIG_CONTROL_MAX_CONNS 64

void config_defaults(struct gpusysd_config *cfg);

/* Parse "key = value" lines from f; name is used in messages. On error
 * returns -EINVAL with "NAME:LINE: why" in err: unknown keys, bad values,
 * a key given twice, NUL bytes and other control characters. A UTF-8 byte
 * order mark at the start is skipped. Keys not in the file keep the values
 * cfg had. */
int config_parse(struct gpusysd_config *cfg, const char *name, FILE *f, char *err, size_t errlen);

/* Open and parse path. A missing file is -ENOENT (with a message) so the
 * caller decides whether that matters. Anything but a regular file (or
 * /dev/null) is -EINVAL at once: a FIFO or /dev/zero is never read. */
int config_load(struct gpusysd_config *cfg, const char *path, char *err, size_t errlen);

/* Set one key from a string, as a config line would ("pollers", "4").
 * -ENOENT: unknown key; -EINVAL: bad value (why in err, without location). */
int config_set(struct gpusysd_config *cfg, const char *key, const char *value, char *err, size_t errlen);

/* Accept keys (an array ended by a NULL key) with their defaults.
 * -EEXIST: a key is already known; -ENOSPC: too many. */
int config_add_keys(struct gpusysd_config *cfg, const struct config_key *keys);

/* The value of a key added with config_add_keys (its default when the file
 * did not set it); 0 for a key never added. */
uint64_t config_value(const struct gpusysd_config *cfg, const char *key);

/* Override settings from the environment: GPUSYSD_<KEY> for every key
 * (POLLERS, PRINT_BUFFER_BYTES...). 0, or -EINVAL with "GPUSYSD_X: why". */
int config_apply_env(struct gpusysd_config *cfg, char *err, size_t errlen);

/* Where key's value came from, for messages: "FILE:LINE", "GPUSYSD_KEY"
 * or "default" (written to buf, which is returned). */
const char *config_where(const struct gpusysd_config *cfg, const char *key, char *buf, size_t len);

/* Checks that involve several keys (progress slots). */
int config_check(const struct gpusysd_config *cfg, char *err, size_t errlen);

/* Pollers to run when the config says 0 ("auto"), for a given CPU count:
 * one on small machines, where a spinning poller would take half of it. */
unsigned config_auto_pollers(unsigned ncpu);

#endif
