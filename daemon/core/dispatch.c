/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "core/dispatch.h"
#include "core/pool.h"
#include "core/port_server.h"
#include "core/session.h"

void dispatch_defer(struct port_call *call, unsigned slot, void *arg)
{
	struct pool *pool = arg;

	/* The reference keeps the channel and port table alive while the call
	 * waits in the queue, whatever happens to the client meanwhile. It is
	 * taken before this poller's pass ends, so before any grace period
	 * that could let the main thread drop the last other one. */
	session_ref(call->table->owner);
	if (pool_submit(pool, call) < 0)
		dispatch_run(call, slot, NULL); /* no queue space: serve it here rather than drop it */
}

void dispatch_run(struct port_call *call, unsigned slot, void *arg)
{
	struct session *s = call->table->owner;
	const struct service *svc = service_find(call->opcode);

	(void)arg;
	/* port_server_step defers only opcodes it found a service for; the
	 * check costs nothing and keeps a mismatch from being a crash. */
	if (svc)
		svc->handle(call);
	else
		call->status = -ENOSYS;
	port_server_finish(call, slot);
	session_unref(s);
}
