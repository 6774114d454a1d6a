/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_FILE_H
#define GPUSYSD_SERVICE_FILE_H

#include "core/service.h"

extern const struct service service_file; /* 0x02xx, include/gpusys/file.h */

#endif
