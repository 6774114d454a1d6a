/* SPDX-License-Identifier: MIT */
/*
 * Reports a client sends on its connection after the welcome (common/wire.h,
 * struct gpusys_report, wire 4): reading them without blocking, joining a
 * report that came in pieces, checking every field, counting them. Main
 * thread only. Nothing here allocates: a session holds one report's bytes
 * at most, whatever and however much the client sends (the rest waits in
 * its socket, whose size the kernel bounds, and its sends then fail).
 */
#ifndef GPUSYSD_REPORT_H
#define GPUSYSD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/wire.h"

/* The bytes of the report being received. */
struct report_reader {
	union {
		struct gpusys_report r;
		unsigned char bytes[sizeof(struct gpusys_report)];
	} buf;
	uint32_t have; /* bytes of buf received so far */
};

/* A client's finished copies, as it reported them. */
struct copy_counts {
	uint64_t count, bytes;
	struct gpusys_report last; /* the latest; meaningful when count > 0 */
};

/* Check a whole report against wire.h's bounds. 0, or -EPROTO with why. */
int report_check(const struct gpusys_report *r, char *why, size_t len);

/*
 * Read one record from fd (non-blocking) into rd. Returns
 *   1            a whole report, checked, in *ret (rd is empty again)
 *   0            a piece of one, kept: read again
 *   -EAGAIN      nothing to read now
 *   -ECONNRESET  the client closed the connection (or it failed: why says)
 *   -EPROTO      not a report, or a bad one: why says (fit for a log line
 *                and a goodbye)
 */
int report_read(int fd, struct report_reader *rd, struct gpusys_report *ret, char *why, size_t len);

/* Count a checked COPY report. */
void copy_counts_add(struct copy_counts *c, const struct gpusys_report *r);

/* The report's rate in GB/s (bytes per ns). */
double report_gbs(const struct gpusys_report *r);

#endif
