/* SPDX-License-Identifier: MIT */
/*
 * Calls that complete later. A handler calls call_later() and returns; the
 * port stays claimed (so no poller touches it) and the call sits on its
 * table's list until one of three things takes it, each under the table's
 * later_lock, exactly once:
 *   call_complete()   its service is done (any thread)
 *   the deadline      a libevent timer on the main loop: -ETIMEDOUT
 *   a cancel          the client is gone (detach, main thread): -ECANCELED
 * Whoever takes it answers the client on PORT_LATER_SLOT, releases the port
 * and drops the reference the call held on its session. A service learns
 * that the core took its call through its cancel hook, after which it must
 * leave the call alone.
 *
 * A completion may race the handler that started the call (a timer firing
 * before the handler has returned): then the call is marked DONE_EARLY and
 * the handler's own thread answers it as an ordinary call.
 *
 * The deadline counts from call_later() on the real monotonic clock:
 * libevent's timers run on CLOCK_MONOTONIC_COARSE, up to a tick (4 ms at
 * HZ=250) behind it, and fire that much early; on_deadline waits out the
 * rest.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>

#include "core/accounts.h"
#include "core/client.h"
#include "core/later.h"
#include "core/pending.h"
#include "common/clock.h"

struct later_global {
	struct event_base *base;
	uint64_t default_timeout_ns;
};

static struct later_global L = { .default_timeout_ns = UINT64_C(3600) * 1000000000u };

/* What a call holds while it waits, charged to its client's and its user's
 * memory budgets (client_mem_budget, user_mem_budget) for as long as it
 * is pending: its state (struct pending, about 1.5 KiB, all 32 lanes'
 * fields) and two libevent timers with the allocator's overhead (its
 * deadline, and the service's own: SLEEP's). Its request and response
 * bytes are charged already (port_charge, port_call_charge). Without this,
 * 65,536 pending SLEEPs (max_pending_calls_per_uid) held ~300 MB that no
 * budget saw. */
#define LATER_CALL_BYTES (sizeof(struct pending) + 512)

void later_setup(struct event_base *base, uint64_t default_timeout_ns)
{
	L.base = base;
	if (default_timeout_ns)
		L.default_timeout_ns = default_timeout_ns;
}

static void list_add(struct port_table *t, struct pending *pd)
{
	pd->lprev = NULL;
	pd->lnext = t->later_head;
	if (t->later_head)
		t->later_head->lprev = pd;
	t->later_head = pd;
	t->later_count++;
}

static void list_remove(struct port_table *t, struct pending *pd)
{
	if (pd->lprev)
		pd->lprev->lnext = pd->lnext;
	else
		t->later_head = pd->lnext;
	if (pd->lnext)
		pd->lnext->lprev = pd->lprev;
	pd->lprev = pd->lnext = NULL;
	t->later_count--;
	account_uncharge(t->client ? t->client->account : NULL, ACCOUNT_PENDING, 1);
	port_uncharge(t, LATER_CALL_BYTES);
}

/* ns as a timeval, rounded up: never shorter than asked. */
static struct timeval tv_of(uint64_t ns)
{
	uint64_t us = ns / 1000u + (ns % 1000u != 0);
	return (struct timeval){ .tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u) };
}

static void on_deadline(evutil_socket_t fd, short what, void *arg);

int call_later(struct port_call *call, uint64_t timeout_ns, const struct call_later_ops *ops)
{
	struct port_table *t = call->table;
	struct pending *pd = pending_of(call);

	/* Only ops flagged SERVICE_OP_LATER are given a struct pending (the
	 * fast path's calls live on a poller's stack). */
	if (!pd->op || !(pd->op->flags & SERVICE_OP_LATER))
		return -EINVAL;
	pthread_mutex_lock(&t->later_lock);
	if (pd->later != LATER_NONE) {
		/* Twice: the first may be completing on another thread. */
		pthread_mutex_unlock(&t->later_lock);
		return -EINVAL;
	}
	if (t->later_closing) {
		pthread_mutex_unlock(&t->later_lock);
		return -ESHUTDOWN;
	}
	if (t->later_count >= t->later_max ||
	    !account_charge(t->client ? t->client->account : NULL, ACCOUNT_PENDING, 1)) {
		pthread_mutex_unlock(&t->later_lock);
		return -EAGAIN;
	}
	if (port_charge(t, LATER_CALL_BYTES) < 0) {
		account_uncharge(t->client ? t->client->account : NULL, ACCOUNT_PENDING, 1);
		pthread_mutex_unlock(&t->later_lock);
		return -ENOMEM;
	}
	list_add(t, pd); /* charged: list_remove gives both back */
	pd->later = LATER_ARMING;
	pd->later_ops = ops;
	pthread_mutex_unlock(&t->later_lock);

	if (L.base) {
		uint64_t timeout = timeout_ns ? timeout_ns : L.default_timeout_ns, t0 = now_ns();
		pd->deadline_ns = timeout > UINT64_MAX - t0 ? UINT64_MAX : t0 + timeout;
		pd->deadline = evtimer_new(L.base, on_deadline, pd);
		struct timeval tv = tv_of(timeout);
		if (pd->deadline)
			evtimer_add(pd->deadline, &tv);
		/* Without the event (out of memory) the call has no
		 * deadline; detach still cancels it. */
	}
	port_state_set_later(t, call->port, true);
	return 0;
}

/* The call is taken and off the list: answer, release, let go. */
static void finish(struct port_table *t, struct pending *pd)
{
	uint32_t p = pd->call.port;
	struct port_table_owner owner = t->owner;

	if (pd->deadline) {
		/* From another thread this waits for a running on_deadline
		 * (which found the call taken and is returning). */
		event_free(pd->deadline);
		pd->deadline = NULL;
	}
	port_state_set_later(t, p, false);
	pthread_mutex_lock(&t->later_slot_lock);
	port_answer(t, pd, PORT_LATER_SLOT);
	pthread_mutex_unlock(&t->later_slot_lock);
	port_release_off_poller(t, p);
	/* Last: this may be the session's last reference. */
	if (owner.unref)
		owner.unref(owner.owner);
}

/* Taken back by the core: the service lets go, the client gets status. */
static void take_back(struct port_table *t, struct pending *pd, enum call_cancel_reason why, int32_t status)
{
	bool answered = pd->later_ops && pd->later_ops->cancel && pd->later_ops->cancel(&pd->call, why);
	if (!answered || why != CALL_CANCEL_DEADLINE)
		pd->call.status = status;
	finish(t, pd);
}

bool later_after_handler(struct port_table *t, struct pending *pd)
{
	pthread_mutex_lock(&t->later_lock);
	if (pd->later == LATER_NONE) {
		/* The handler answers now, without call_later. */
		pthread_mutex_unlock(&t->later_lock);
		return false;
	}
	if (pd->later == LATER_DONE_EARLY || t->later_closing) {
		bool cancelled = pd->later != LATER_DONE_EARLY;
		list_remove(t, pd);
		pd->later = LATER_TAKEN;
		pthread_mutex_unlock(&t->later_lock);
		if (cancelled && pd->later_ops && pd->later_ops->cancel) {
			pd->later_ops->cancel(&pd->call, CALL_CANCEL_DETACH);
			pd->call.status = -ECANCELED;
		}
		if (pd->deadline) {
			event_free(pd->deadline);
			pd->deadline = NULL;
		}
		port_state_set_later(t, pd->call.port, false);
		return false; /* the handler's thread answers it now */
	}
	pd->later = LATER_PENDING;
	/* From here the call outlives the thread that started it: it holds
	 * its session (the poller's grace period or the worker's reference
	 * covers the handler until now). */
	if (t->owner.ref)
		t->owner.ref(t->owner.owner);
	pthread_mutex_unlock(&t->later_lock);
	return true;
}

bool call_complete(struct port_call *call)
{
	struct port_table *t = call->table;
	struct pending *pd = pending_of(call);

	pthread_mutex_lock(&t->later_lock);
	switch (pd->later) {
	case LATER_ARMING:
		pd->later = LATER_DONE_EARLY;
		pthread_mutex_unlock(&t->later_lock);
		return true;
	case LATER_PENDING:
		pd->later = LATER_TAKEN;
		list_remove(t, pd);
		pthread_mutex_unlock(&t->later_lock);
		finish(t, pd);
		return true;
	default:
		pthread_mutex_unlock(&t->later_lock);
		return false;
	}
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct pending *pd = arg;
	struct port_table *t = pd->call.table;

	(void)fd;
	(void)what;
	pthread_mutex_lock(&t->later_lock);
	if (pd->later == LATER_ARMING) {
		/* Its handler is still running: look again shortly. */
		pthread_mutex_unlock(&t->later_lock);
		struct timeval tv = { .tv_usec = 1000 };
		evtimer_add(pd->deadline, &tv);
		return;
	}
	if (pd->later != LATER_PENDING) {
		/* Completed meanwhile: its completer frees this event once we
		 * return. */
		pthread_mutex_unlock(&t->later_lock);
		return;
	}
	uint64_t now = now_ns();
	if (now < pd->deadline_ns) {
		/* Early by libevent's coarse clock: the rest. A completer on
		 * another thread waits for this callback, then frees the
		 * re-added event. */
		pthread_mutex_unlock(&t->later_lock);
		struct timeval tv = tv_of(pd->deadline_ns - now);
		evtimer_add(pd->deadline, &tv);
		return;
	}
	pd->later = LATER_TAKEN;
	list_remove(t, pd);
	pthread_mutex_unlock(&t->later_lock);
	take_back(t, pd, CALL_CANCEL_DEADLINE, -ETIMEDOUT);
}

unsigned later_cancel_table(struct port_table *t)
{
	unsigned n = 0;

	if (!t->state)
		return 0;
	pthread_mutex_lock(&t->later_lock);
	t->later_closing = true;
	for (;;) {
		struct pending *pd = t->later_head;
		while (pd && pd->later != LATER_PENDING)
			pd = pd->lnext; /* ARMING: its handler's thread cancels it (later_after_handler) */
		if (!pd)
			break;
		pd->later = LATER_TAKEN;
		list_remove(t, pd);
		pthread_mutex_unlock(&t->later_lock);
		take_back(t, pd, CALL_CANCEL_DETACH, -ECANCELED);
		n++;
		pthread_mutex_lock(&t->later_lock);
	}
	pthread_mutex_unlock(&t->later_lock);
	return n;
}
