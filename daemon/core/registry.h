/* SPDX-License-Identifier: MIT */
/* The attached sessions (main thread only) and the channel lists the pollers
 * serve, kept in step: each session's channel is published to its own
 * poller group only (session.pollers). */
#ifndef GPUSYSD_REGISTRY_H
#define GPUSYSD_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/session.h"

struct pollers;

struct registry {
	struct session *head, *tail; /* in attach order */
	unsigned count;
	unsigned max;
	uint32_t next_id;
	struct port_table **scratch; /* max entries: the list being published */
};

int registry_init(struct registry *r, unsigned max_clients);
void registry_fini(struct registry *r);

static inline bool registry_full(const struct registry *r)
{
	return r->count >= r->max;
}

/* Client ids are never reused while the daemon runs (0 is never one). */
uint32_t registry_new_id(struct registry *r);

/* Add s and let its pollers (s->pollers) serve it. */
void registry_add(struct registry *r, struct session *s);

/* Take s out; when this returns none of its pollers touches it any more. The caller
 * still holds its reference. */
void registry_remove(struct registry *r, struct session *s);

#define registry_for_each(r, s) for (struct session *s = (r)->head; s; s = s->next)

#endif
