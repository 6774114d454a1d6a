/* SPDX-License-Identifier: MIT */
/*
 * A client of the real gpusysd attached with GPUSYS_ATTACH_EMULATED, and the
 * emulated device its warps call through.
 */
#ifndef GPUSYS_TEST_EMU_CLIENT_H
#define GPUSYS_TEST_EMU_CLIENT_H

#include <stdint.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"

struct emu_client {
	gpusys_t *c;
	struct gpusys_emu *emu;
	const gpusys_dev_t *dev;
};

/* Attach to the daemon at runtime_dir with num_ports ports and bulk_bytes
 * of bulk area (0: none, GPUSYS_ATTACH_NO_BULK), flags added to
 * GPUSYS_ATTACH_EMULATED (GPUSYS_ATTACH_NO_STDIO, GPUSYS_ATTACH_NO_CWD...),
 * and open the emulator on its channel. 0 or gpusys_attach's or
 * gpusys_emu_open's -errno (then nothing is left attached). No cmocka:
 * children call it. */
int emu_client_attach(struct emu_client *k, const char *runtime_dir, uint32_t num_ports, uint64_t bulk_bytes,
		      uint32_t flags);

void emu_client_detach(struct emu_client *k);

#endif
