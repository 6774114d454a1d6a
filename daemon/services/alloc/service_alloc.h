/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_ALLOC_H
#define GPUSYSD_SERVICE_ALLOC_H

#include "core/service.h"

extern const struct service service_alloc; /* the growable per-client heap (0x04xx) */

#endif
