/* SPDX-License-Identifier: MIT */
/* The services gpusysd offers (daemon/services.c), for services_use(). */
#ifndef GPUSYSD_SERVICES_H
#define GPUSYSD_SERVICES_H

#include "core/service.h"

/* NULL-terminated, in the order of their hooks. */
extern const struct service *const gpusysd_services[];

/* What a service adds to `gpusysctl status` (daemon/status.c, which names
 * no service): a member named after the service in the daemon's object
 * and in each client's. Either hook may be NULL; client_json gets the
 * service's state of that client and returns NULL when it has nothing to
 * say (an alloc client without a heap yet). */
typedef struct json_t json_t;
struct service_status {
	const struct service *svc;
	json_t *(*daemon_json)(void);
	json_t *(*client_json)(void *state);
};

/* Terminated by an entry whose svc is NULL. */
extern const struct service_status gpusysd_service_status[];

#endif
