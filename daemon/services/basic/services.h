/* SPDX-License-Identifier: MIT */
/* The service tables, NULL-terminated, one per opcode group. */
#ifndef GPUSYSD_SERVICES_H
#define GPUSYSD_SERVICES_H

#include "core/port_server.h"

extern const struct service *const service_basic_table[]; /* NOOP, ECHO */

#endif
