/* SPDX-License-Identifier: MIT */
#ifndef GPUSYSD_SERVICE_ALLOC_H
#define GPUSYSD_SERVICE_ALLOC_H

#include "core/service.h"

extern const struct service service_alloc; /* the growable per-client heap (0x04xx) */

/* gpusysctl status: the daemon's heaps together, and one client's heap
 * from its state (NULL when it has none yet), as JSON objects. */
typedef struct json_t json_t;
json_t *service_alloc_status_json(void);
json_t *service_alloc_client_json(void *state);

#endif
