/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_SOCKET_H
#define GPUSYSD_SERVICE_SOCKET_H

#include "core/service.h"

extern const struct service service_socket; /* 0x03xx, include/gpusys/socket.h */

#endif
