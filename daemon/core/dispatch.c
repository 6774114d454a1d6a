/* SPDX-License-Identifier: MIT */
#include "core/client.h"
#include "core/dispatch.h"
#include "core/pool.h"
#include "core/port_server.h"
#include "core/session.h"
#include "util/log.h"

void dispatch_defer(struct port_call *call, unsigned slot, void *arg)
{
	struct pool *pool = arg;

	/* The reference keeps the channel and port table alive while the call
	 * waits in the queue, whatever happens to the client meanwhile. It is
	 * taken before this poller's pass ends, so before any grace period
	 * that could let the main thread drop the last other one. */
	session_ref(call->table->owner.owner);
	if (pool_submit(pool, call) < 0)
		dispatch_run(call, slot, NULL); /* no queue space: serve it here rather than drop it */
}

void dispatch_run(struct port_call *call, unsigned slot, void *arg)
{
	struct session *s = call->table->owner.owner;

	(void)arg;
	/* What this worker logs is about this client's request (journal
	 * fields, util/log.h). */
	log_context_set(call->client->pid, call->client->id, call->opcode);
	port_server_run(call, slot);
	log_context_clear();
	/* The last reference is handed to the main thread (session.c), so
	 * no teardown runs here. */
	session_unref(s);
}
