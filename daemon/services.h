/* SPDX-License-Identifier: MIT */
/* The services gpusysd offers (daemon/services.c), for services_use(). */
#ifndef GPUSYSD_SERVICES_H
#define GPUSYSD_SERVICES_H

#include "core/service.h"

/* NULL-terminated, in the order of their hooks. */
extern const struct service *const gpusysd_services[];

#endif
