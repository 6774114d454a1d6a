/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_BASIC_H
#define GPUSYSD_SERVICE_BASIC_H

#include "core/service.h"

extern const struct service service_basic; /* NOOP, ECHO, SLEEP (0x00xx) */

#endif
