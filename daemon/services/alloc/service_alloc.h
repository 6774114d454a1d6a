/* SPDX-License-Identifier: MIT */
/* The alloc service (opcodes 0x04xx): a growable per-client heap. */
#ifndef GPUSYSD_SERVICE_ALLOC_H
#define GPUSYSD_SERVICE_ALLOC_H

#include "core/port_server.h"

extern const struct service *const service_alloc_table[];

/* Free the client's heap metadata (port_table_fini, via service_client_fini). */
void service_alloc_client_fini(struct port_table *t);

#endif
