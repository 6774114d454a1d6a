/* SPDX-License-Identifier: MIT */
/*
 * The GPUs this daemon serves, found by UUID.
 *
 * A client names its GPU by UUID in the hello (common/wire.h), never
 * by ordinal: ordinals depend on each process's CUDA_VISIBLE_DEVICES and
 * CUDA_DEVICE_ORDER, so the same number can mean different GPUs in the client
 * and here. The table is filled once, the first time a client names a GPU
 * (the CUDA driver is loaded only then, so a daemon of emulated clients never
 * loads it), plus the emulated GPUs the configuration invents for tests.
 *
 * Entries never move or go away while the daemon runs, so a session keeps a
 * plain pointer to its GPU. A GPU can be marked failed (an error from the
 * driver that means the device is gone, or an administrator's command): its
 * clients are then detached and new ones refused, the others not touched.
 */
#ifndef GPUSYSD_GPUS_H
#define GPUSYSD_GPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GPUS_MAX 64
#define GPU_UUID_TEXT 41 /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL */

struct gpu {
	unsigned index;        /* position in the table (status) */
	uint8_t uuid[16];
	char uuid_text[GPU_UUID_TEXT];
	char name[96];
	char pci_bus_id[24];   /* "0000:3b:00.0", "" for an emulated GPU */
	int ordinal;           /* this daemon's CUDA ordinal, or -1: emulated */
	int numa_node;         /* the host NUMA node nearest the GPU, or -1 */
	bool failed;           /* read and written on the main thread */
	char failure[160];     /* why, once failed */
};

/* "GPU-01234567-89ab-..." for a UUID. */
void gpu_uuid_format(const uint8_t uuid[16], char out[GPU_UUID_TEXT]);
/* Parse that form (the "GPU-" prefix optional, case ignored). 0 or -EINVAL. */
int gpu_uuid_parse(const char *text, uint8_t out[16]);
bool gpu_uuid_is_zero(const uint8_t uuid[16]);

/* Add emulated GPUs from the emulated_gpus setting: a comma-separated list
 * of UUIDs, each optionally followed by "=NAME" (no comma in the name), or
 * "none" (as "").
 * Called once at start-up. 0, or -EINVAL with why in err. */
int gpus_add_emulated(const char *list, char *err, size_t errlen);
/* Whether that list is well formed (UUIDs, none twice, at most GPUS_MAX),
 * adding nothing: the config parser's check. 0, or -EINVAL with why. */
int gpus_check_emulated(const char *list, char *err, size_t errlen);

/* The GPU with this UUID, enumerating the driver's GPUs on first use. NULL
 * with why in msg (no driver, not one of ours: the message lists ours). */
struct gpu *gpus_find(const uint8_t uuid[16], char *msg, size_t msglen);

/* The table as far as it is known (emulated GPUs, and the driver's once a
 * client named a GPU). */
unsigned gpus_count(void);
struct gpu *gpus_at(unsigned i);

/* How many real GPUs (not emulated) the driver showed the daemon; 0 until a
 * client named a GPU. */
unsigned gpus_real_count(void);

/* The GPU with this UUID text, without enumerating. NULL if unknown. */
struct gpu *gpus_lookup_text(const char *uuid_text);

#endif /* GPUSYSD_GPUS_H */
