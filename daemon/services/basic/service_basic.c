/* SPDX-License-Identifier: MIT */
/*
 * The protocol's own services: NOOP and ECHO, served on the poller, and
 * SLEEP, the smallest call that completes later: its handler arms a timer
 * on the main loop and returns; the timer completes the call. No thread
 * waits meanwhile, so thousands of SLEEPs can be pending while other calls
 * flow.
 *
 * A SLEEP of N ns ends no sooner than N ns after its handler ran (the
 * request had reached the daemon): libevent counts timers on
 * CLOCK_MONOTONIC_COARSE (a tick, 4 ms at HZ=250, behind the real clock),
 * so its timer may fire up to a tick early; the timer checks the real
 * clock and waits out the rest.
 */
#include <errno.h>
#include <event2/event.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "services/basic/service_basic.h"
#include "common/clock.h"

static struct event_base *loop; /* the main loop (start hook); NULL: no SLEEP */

static void noop_handle(struct port_call *call)
{
	(void)call; /* statuses and lengths are already zero */
}

static void echo_handle(struct port_call *call)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		if (call->len[l] > call->cap[l]) {
			call->lane_status[l] = -EMSGSIZE;
			continue;
		}
		call->resp_len[l] = call->len[l];
		call->resp_data[l] = call->data[l];
	}
}

/* ----------------------------------------------------------------- sleep */

/* A pending SLEEP: its timer and when it may end (now_ns()). */
struct sleep_timer {
	struct event *ev;
	uint64_t due_ns;
};

/* ns as a timeval, rounded up: never shorter than asked. */
static struct timeval tv_ceil(uint64_t ns)
{
	uint64_t us = ns / 1000u + (ns % 1000u != 0);
	return (struct timeval){ .tv_sec = (time_t)(us / 1000000u), .tv_usec = (suseconds_t)(us % 1000000u) };
}

/* The timer. Whoever ends the call frees it: the timer when it completed
 * the call, the cancel hook when the core took the call back. */
static void sleep_fired(evutil_socket_t fd, short what, void *arg)
{
	struct port_call *call = arg;
	struct sleep_timer *st = call->later_data;

	(void)fd;
	(void)what;
	uint64_t now = now_ns();
	if (now < st->due_ns) {
		/* Early by libevent's coarse clock: the rest. A cancel on
		 * another thread waits for this callback, then deletes the
		 * re-added event with the rest of st. */
		struct timeval tv = tv_ceil(st->due_ns - now);
		evtimer_add(st->ev, &tv);
		return;
	}
	/* Completing may free the call: take what we need first. */
	if (call_complete(call)) {
		event_free(st->ev);
		free(st);
	}
	/* else the core took it back: its cancel hook frees st (it waits
	 * for this callback to return if it runs on another thread). */
}

static bool sleep_cancel(struct port_call *call, enum call_cancel_reason why)
{
	struct sleep_timer *st = call->later_data;

	(void)why;
	event_free(st->ev);
	free(st);
	return false;
}

static const struct call_later_ops sleep_ops = { .cancel = sleep_cancel };

static void sleep_handle(struct port_call *call)
{
	uint64_t delay = 0, timeout = 0;

	if (!loop) {
		call->status = -EOPNOTSUPP;
		return;
	}
	for (uint64_t m = call->lane_mask; m; m &= m - 1) {
		uint32_t l = (uint32_t)__builtin_ctzll(m);
		struct gpusys_sleep_req q = { 0, 0 };
		if (call->len[l] != 0 && call->len[l] != sizeof(q)) {
			call->status = -EINVAL;
			return;
		}
		if (call->len[l])
			memcpy(&q, call->data[l], sizeof(q));
		if (q.delay_ns > delay)
			delay = q.delay_ns;
		if (q.timeout_ns && (!timeout || q.timeout_ns < timeout))
			timeout = q.timeout_ns;
	}
	/* From now, not from when the timer is armed below: the request has
	 * been here since the poller read it. */
	uint64_t t0 = now_ns();
	struct sleep_timer *st = malloc(sizeof(*st));
	if (!st) {
		call->status = -ENOMEM;
		return;
	}
	st->due_ns = delay > UINT64_MAX - t0 ? UINT64_MAX : t0 + delay;
	st->ev = evtimer_new(loop, sleep_fired, call);
	if (!st->ev) {
		free(st);
		call->status = -ENOMEM;
		return;
	}
	call->later_data = st;
	int r = call_later(call, timeout, &sleep_ops);
	if (r < 0) {
		event_free(st->ev);
		free(st);
		call->status = r;
		return;
	}
	struct timeval tv = tv_ceil(delay);
	/* After this the call may complete at any moment (even before we
	 * return): nothing here touches it again. */
	evtimer_add(st->ev, &tv);
}

static int basic_start(const struct service_env *env)
{
	loop = env->base;
	return 0;
}

static void basic_stop(void)
{
	loop = NULL;
}

static const struct service_op ops[] = {
	{ GPUSYS_OP_NOOP, SERVICE_ON_POLLER, 0, "noop", noop_handle },
	{ GPUSYS_OP_ECHO, SERVICE_ON_POLLER, 0, "echo", echo_handle },
	{ GPUSYS_OP_SLEEP, SERVICE_ON_POLLER, SERVICE_OP_LATER, "sleep", sleep_handle },
};

const struct service service_basic = {
	.name = "basic",
	.group = 0,
	.ops = ops,
	.nops = sizeof(ops) / sizeof(ops[0]),
	.start = basic_start,
	.stop = basic_stop,
};
