/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "core/poller.h"
#include "core/registry.h"

int registry_init(struct registry *r, unsigned max_clients)
{
	*r = (struct registry){ .max = max_clients, .next_id = 1 };
	r->scratch = calloc(max_clients, sizeof(*r->scratch));
	return r->scratch ? 0 : -ENOMEM;
}

void registry_fini(struct registry *r)
{
	free(r->scratch);
	r->scratch = NULL;
}

uint32_t registry_new_id(struct registry *r)
{
	uint32_t id = r->next_id++;
	if (r->next_id == 0)
		r->next_id = 1;
	return id;
}

/* The channels of one poller group: only that group's grace period is
 * waited for, so a change on one GPU never waits for another GPU's
 * pollers. */
static void publish(struct registry *r, struct pollers *ps)
{
	uint32_t n = 0;

	registry_for_each(r, s) if (s->pollers == ps) r->scratch[n++] = &s->ports;
	/* Cannot fail: count never exceeds max, the pollers' capacity. */
	pollers_publish(ps, r->scratch, n);
}

void registry_add(struct registry *r, struct session *s)
{
	s->next = NULL;
	s->prev = r->tail;
	if (r->tail)
		r->tail->next = s;
	else
		r->head = s;
	r->tail = s;
	r->count++;
	publish(r, s->pollers);
}

void registry_remove(struct registry *r, struct session *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		r->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		r->tail = s->prev;
	s->prev = s->next = NULL;
	r->count--;
	publish(r, s->pollers);
}
