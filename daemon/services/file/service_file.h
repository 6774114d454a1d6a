/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_FILE_H
#define GPUSYSD_SERVICE_FILE_H

#include "core/port_server.h"

extern const struct service *const service_file_table[]; /* 0x02xx, include/gpusys/file.h */

/* Close every file and directory the client of t still has open and free
 * its file state (service_client_fini). Returns the descriptors closed. */
unsigned service_file_client_fini(struct port_table *t);

#endif
