/* SPDX-License-Identifier: MIT */
/*
 * Printing from emulated warps (see include/gpusys/emulator.h): the same
 * packer and warp call (device/print_pack.h) that kernels use through
 * include/gpusys/print.cuh, run from a CPU thread.
 *
 * Results are like printf's: the bytes the line printed, or a negative errno
 * (include/gpusys/print.h lists them).
 */
#ifndef GPUSYS_EMU_PRINT_H
#define GPUSYS_EMU_PRINT_H

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "gpusys/print.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One lane's line: a format and its arguments as tagged values. */
struct gpusys_print_line {
	uint32_t stream; /* GPUSYS_PRINT_STDOUT or GPUSYS_PRINT_STDERR */
	const char *fmt;
	const struct gpusys_print_arg *args;
	uint32_t nargs;
};

/* One call from the lanes of mask, each with its own line: one request to
 * gpusysd for the warp. ret[l] receives lane l's result. Returns 0, or
 * -EINVAL for a bad mask. */
int gpusys_emu_print(const gpusys_dev_t *dev, uint64_t mask, const struct gpusys_print_line lines[GPUSYS_WARP_LANES],
		     int32_t ret[GPUSYS_WARP_LANES]);

/* One lane (a warp of one), with C variadic arguments: the format is walked
 * to read each argument with its conversion's type, as printf does. */
int gpusys_emu_printf(const gpusys_dev_t *dev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gpusys_emu_fprintf(const gpusys_dev_t *dev, uint32_t stream, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* s and a newline on stdout, like puts (returns the bytes, not puts's
 * nonnegative-or-EOF). */
int gpusys_emu_puts(const gpusys_dev_t *dev, const char *s);

/* Wait until every line accepted so far is written out. 0 or -errno. */
int gpusys_emu_print_flush(const gpusys_dev_t *dev);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_EMU_PRINT_H */
