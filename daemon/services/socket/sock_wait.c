/* SPDX-License-Identifier: MIT */
/*
 * Lanes that wait, on their call's event loop (sock_loops.c): watching a
 * descriptor (or a poll's descriptors) with a libevent event bounded by the
 * lane's deadline, retrying when it fires, finishing lanes and completing
 * the call when the last is done; and the core's cancel (deadline, detach),
 * which may come from another thread.
 */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "services/socket/sock_call.h"
#include "common/clock.h"
#include "util/creds.h"

/* -------------------------------------------------- finishing a lane */

/* Off its socket's list of waiters (any thread). */
static void lane_unlist(struct sock_lane *l)
{
	if (!l->s)
		return;
	pthread_mutex_lock(&l->s->lock);
	for (struct sock_lane **pp = &l->s->waiters; *pp; pp = &(*pp)->wnext) {
		if (*pp == l) {
			*pp = l->wnext;
			break;
		}
	}
	pthread_mutex_unlock(&l->s->lock);
}

/* Free the lane's events (the call's loop, or a thread before any exist). */
static void lane_unwatch(struct sock_lane *l)
{
	lane_unlist(l);
	if (l->ev) {
		if (l->s)
			pthread_mutex_lock(&l->s->lock);
		event_free(l->ev);
		l->ev = NULL;
		if (l->s)
			pthread_mutex_unlock(&l->s->lock);
	}
	for (uint32_t i = 0; l->pev && i < l->npoll; i++)
		if (l->pev[i])
			event_free(l->pev[i]);
	free(l->pev);
	l->pev = NULL;
	if (l->dns) {
		l->dns->lane = NULL; /* its callback frees it */
		l->dns = NULL;
	}
}

/* Let go of the lane's descriptors (any thread; after lane_unlist). A lane
 * that holds none touches nothing of its client: a completed call is freed
 * after call_complete(), when the client may be gone (its table and state
 * freed by a detach on the main loop), and every lane of it let go of its
 * descriptors when it finished. */
static void lane_unref(struct sock_lane *l)
{
	if (!l->e && !l->pe) {
		free(l->pfd);
		l->pfd = NULL;
		l->s = NULL;
		return;
	}
	struct handle_table *ht = l->sc->cl->ht;
	if (l->e)
		handle_table_put(ht, l->e);
	l->e = NULL;
	l->s = NULL;
	if (l->pe)
		handle_table_put_many(ht, l->pe, l->npoll);
	free(l->pe);
	free(l->pfd);
	l->pe = NULL;
	l->pfd = NULL;
}

/* Let go of everything the lane holds (events, descriptors). */
void sock_lane_drop(struct sock_lane *l)
{
	lane_unwatch(l);
	lane_unref(l);
}

/* Write lane l's answer into the call. */
void sock_lane_answer(struct sock_lane *l, int r)
{
	struct port_call *call = l->sc->call;
	unsigned i = l->idx;
	call->lane_status[i] = r;
	if (r != GPUSYS_STATUS_NO_ROOM) /* not an error: the lane is sent again */
		sock_error_count(call->opcode, r);
	if (r < 0)
		return;
	if (l->value_op) {
		memcpy(l->out, &l->val, sizeof(l->val));
		l->out_len = sizeof(l->val);
	}
	call->resp_len[i] = l->out_len;
	call->resp_data[i] = l->out;
}

void sock_call_free(struct sock_call *sc)
{
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++)
		if (sc->lane[i].sc)
			sock_lane_drop(&sc->lane[i]);
	if (sc->ev_arm)
		event_free(sc->ev_arm);
	pthread_cond_destroy(&sc->finished);
	pthread_mutex_destroy(&sc->lock);
	free(sc);
}

/* Entering from the call's loop: false when the call was cancelled (the
 * caller returns at once; the cleanup is on its way). */
bool sock_call_enter(struct sock_call *sc)
{
	sock_loop_worked();
	pthread_mutex_lock(&sc->lock);
	if (sc->cancelled) {
		pthread_mutex_unlock(&sc->lock);
		return false;
	}
	return true;
}

/* Leaving: when every lane is done, complete the call (without our lock:
 * the core may be cancelling on another thread). */
void sock_call_leave(struct sock_call *sc)
{
	bool fin = sc->waiting == 0 && !sc->holding && !sc->finishing && !sc->cancelled;
	struct port_call *call = sc->call;
	if (fin)
		sc->finishing = true;
	pthread_mutex_unlock(&sc->lock);
	if (!fin)
		return;
	if (call_complete(call)) {
		/* Ours: no cancel can come now. Every lane has let go of its
		 * descriptors (sock_lane_finish), so this frees only sc and its
		 * events, on its loop: the client may be gone already. */
		sock_call_free(sc);
		return;
	}
	/* The core took the call back (its deadline, a detach) on another
	 * thread: its cancel waits for this (call.h: a completer on another
	 * thread than the main loop), then has this loop free sc. */
	pthread_mutex_lock(&sc->lock);
	sc->finishing = false;
	pthread_cond_broadcast(&sc->finished);
	pthread_mutex_unlock(&sc->lock);
}

/* A waiting lane is done (on the call's loop, sc locked). */
void sock_lane_finish(struct sock_lane *l, int r)
{
	struct sock_call *sc = l->sc;
	sock_lane_drop(l);
	sock_lane_answer(l, r);
	l->wait = WAIT_NONE;
	sc->waiting--;
}

/* ---------------------------------------------------------- waiting */

static void lane_event(evutil_socket_t fd, short what, void *arg);

/* Watch l's descriptor for its wait, until its deadline. */
static void lane_watch(struct sock_lane *l)
{
	struct timeval tv, *tvp = NULL;
	if (l->deadline_ns) {
		uint64_t now = now_ns();
		uint64_t left = l->deadline_ns > now ? l->deadline_ns - now : 0;
		tv.tv_sec = (time_t)(left / 1000000000u);
		tv.tv_usec = (suseconds_t)(left % 1000000000u / 1000u);
		tvp = &tv;
	}
	short ev = l->wait == WAIT_READ ? EV_READ : EV_WRITE;
	/* A fresh event each time, under the socket's lock: a close on a
	 * worker activates the lane's event under that lock too. */
	pthread_mutex_lock(&l->s->lock);
	if (l->ev)
		event_free(l->ev);
	l->ev = event_new(l->sc->base, l->e->fd, ev, lane_event, l);
	bool ok = l->ev && event_add(l->ev, tvp) == 0;
	if (ok && l->s->closed)
		event_active(l->ev, EV_READ, 1);
	pthread_mutex_unlock(&l->s->lock);
	if (!ok)
		sock_lane_finish(l, -ENOMEM);
}

/* What a lane answers when its time is up: POSIX's for an expired
 * SO_RCVTIMEO / SO_SNDTIMEO (bytes so far, else EAGAIN; connect:
 * EINPROGRESS), or 0 descriptors ready for a poll. */
/* A receive or send (not recvfrom, whose address is built only when it
 * completes) that moved bytes before its time was up answers their count:
 * true, with the lane's answer set. */
static bool lane_short_count(struct sock_lane *l, uint16_t op)
{
	if (!l->done || op == GPUSYS_OP_SOCK_RECVFROM || op == GPUSYS_OP_SOCK_POLL || op == GPUSYS_OP_SOCK_CONNECT)
		return false;
	l->val = (int64_t)l->done;
	if (op == GPUSYS_OP_SOCK_RECV)
		l->out_len = (uint32_t)l->done;
	return true;
}

static int lane_timeout_result(struct sock_lane *l)
{
	uint16_t op = l->sc->call->opcode;
	if (op == GPUSYS_OP_SOCK_POLL)
		return sock_poll_timed_out(l);
	if (op == GPUSYS_OP_SOCK_CONNECT)
		return -EINPROGRESS;
	return lane_short_count(l, op) ? 0 : -EAGAIN;
}

static void lane_retry(struct sock_lane *l)
{
	struct creds_saved saved;
	int r;
	if (l->with_creds) {
		r = creds_enter(&l->sc->cl->c->creds, &saved);
		if (r == 0) {
			r = sock_lane_try(l);
			creds_leave(&saved);
		}
	} else {
		r = sock_lane_try(l);
	}
	if (r == LANE_WAIT) {
		if (l->wait == WAIT_POLL)
			return; /* its events persist */
		sock_room_shrink(l->sc);
		lane_watch(l);
		return;
	}
	sock_lane_finish(l, r);
}

static void lane_step(struct sock_lane *l, short what)
{
	if (l->s) {
		pthread_mutex_lock(&l->s->lock);
		bool closed = l->s->closed;
		pthread_mutex_unlock(&l->s->lock);
		if (closed) {
			sock_lane_finish(l, -EBADF);
			return;
		}
	}
	if (what & EV_TIMEOUT) {
		/* One last look: what arrived with the deadline counts (not
		 * for a connect: SO_ERROR is 0 while it is still going). */
		int r = l->connecting ? LANE_WAIT : sock_lane_try(l);
		sock_lane_finish(l, r == LANE_WAIT ? lane_timeout_result(l) : r);
		return;
	}
	lane_retry(l);
}

static void lane_event(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	if (!sock_call_enter(sc))
		return;
	if (l->wait != WAIT_NONE)
		lane_step(l, what);
	sock_call_leave(sc);
}

static void poll_event(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	(void)what;
	if (!sock_call_enter(sc))
		return;
	if (l->wait != WAIT_NONE)
		lane_retry(l);
	sock_call_leave(sc);
}

static void poll_timer(evutil_socket_t fd, short what, void *arg)
{
	struct sock_lane *l = arg;
	struct sock_call *sc = l->sc;
	(void)fd;
	(void)what;
	if (!sock_call_enter(sc))
		return;
	if (l->wait != WAIT_NONE) {
		int r = sock_step_poll(l);
		sock_lane_finish(l, r == LANE_WAIT ? lane_timeout_result(l) : r);
	}
	sock_call_leave(sc);
}

static void poll_arm(struct sock_lane *l)
{
	l->pev = calloc(l->npoll, sizeof(*l->pev));
	if (!l->pev) {
		sock_lane_finish(l, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < l->npoll; i++) {
		if (!l->pe[i])
			continue;
		short ev = EV_PERSIST | ((l->pfd[i].events & POLLOUT) ? EV_WRITE : 0) |
			   ((l->pfd[i].events & ~POLLOUT) || !(l->pfd[i].events & POLLOUT) ? EV_READ : 0);
		l->pev[i] = event_new(l->sc->base, l->pfd[i].fd, ev, poll_event, l);
		if (!l->pev[i] || event_add(l->pev[i], NULL) < 0) {
			sock_lane_finish(l, -ENOMEM);
			return;
		}
	}
	if (l->q.timeout_ms > 0) {
		struct timeval tv = { .tv_sec = l->q.timeout_ms / 1000, .tv_usec = l->q.timeout_ms % 1000 * 1000 };
		l->ev = evtimer_new(l->sc->base, poll_timer, l);
		if (!l->ev || evtimer_add(l->ev, &tv) < 0) {
			sock_lane_finish(l, -ENOMEM);
			return;
		}
	}
	/* Ready between the worker's look and now: the events fire at once
	 * (level triggered). */
}

/* -------------------------------------------------- the hand-off */

static void lane_arm(struct sock_lane *l)
{
	switch (l->wait) {
	case WAIT_DNS:
	case WAIT_RDNS:
		l->start_lookup(l);
		return;
	case WAIT_POLL:
		poll_arm(l);
		return;
	default:
		break;
	}
	pthread_mutex_lock(&l->s->lock);
	bool closed = l->s->closed;
	if (!closed) {
		l->wnext = l->s->waiters;
		l->s->waiters = l;
	}
	pthread_mutex_unlock(&l->s->lock);
	if (closed) {
		sock_lane_finish(l, -EBADF);
		return;
	}
	/* Retry now: the descriptor may have become ready since. */
	lane_retry(l);
}

void sock_call_arm(evutil_socket_t fd, short what, void *arg)
{
	struct sock_call *sc = arg;
	(void)fd;
	(void)what;
	sock_loop_worked();
	pthread_mutex_lock(&sc->lock);
	if (sc->cancelled) {
		/* Cancelled on another thread, which waits: let go of the
		 * events (ours to free) and the descriptors (while the client's
		 * table still exists: the detach waits too), then hand sc back
		 * to the canceller, which frees it. */
		for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++)
			if (sc->lane[i].sc)
				sock_lane_drop(&sc->lane[i]);
		sc->cleaned = true;
		pthread_cond_broadcast(&sc->finished);
		pthread_mutex_unlock(&sc->lock);
		return;
	}
	sc->holding = true;
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++)
		if (sc->lane[i].wait != WAIT_NONE)
			lane_arm(&sc->lane[i]);
	sc->holding = false;
	sock_call_leave(sc);
}

/* The core's deadline took the call back (sc is the canceller's alone
 * now): answer it as the lanes stand, as their own timers would have. A
 * lane done keeps its answer; a waiting receive or send that moved bytes
 * answers them (POSIX's short count, as for an expired SO_RCVTIMEO); any
 * other waiting lane -ETIMEDOUT. Before, the whole call was -ETIMEDOUT and
 * those bytes were lost: received, or sent and then sent again. */
static void answer_at_deadline(struct sock_call *sc, struct port_call *call)
{
	sc->call = call; /* for sock_lane_answer */
	for (unsigned i = 0; i < GPUSYS_WARP_LANES; i++) {
		struct sock_lane *l = &sc->lane[i];
		if (!l->sc || l->wait == WAIT_NONE)
			continue;
		/* Bytes moved means the room was taken back (l->out is set). */
		int r = l->out && lane_short_count(l, call->opcode) ? 0 : -ETIMEDOUT;
		l->wait = WAIT_NONE;
		sock_lane_answer(l, r);
	}
	sc->call = NULL;
}

static bool sock_call_cancel(struct port_call *call, enum call_cancel_reason why)
{
	struct sock_call *sc = call->later_data;
	pthread_mutex_lock(&sc->lock);
	/* A completion under way on the call's loop: the core has taken the
	 * call, so it fails; wait until it has let go of sc. */
	while (sc->finishing)
		pthread_cond_wait(&sc->finished, &sc->lock);
	sc->cancelled = true;
	sc->call = NULL;
	if (pthread_equal(pthread_self(), sc->loop_thread)) {
		pthread_mutex_unlock(&sc->lock);
		if (why == CALL_CANCEL_DEADLINE)
			answer_at_deadline(sc, call);
		sock_call_free(sc); /* events and all: nothing else runs on this loop now */
		return why == CALL_CANCEL_DEADLINE;
	}
	/* Another thread than the call's loop (the main loop's deadline or
	 * detach for a call on a socket loop, or the handler's thread when the
	 * client went while it returned): the loop lets go of the events and
	 * the descriptors (ev_arm again) while this waits, so that no
	 * descriptor closes (the detach closes the client's table next) while
	 * the loop still watches it; then sc is ours. */
	event_active(sc->ev_arm, EV_TIMEOUT, 1);
	while (!sc->cleaned)
		pthread_cond_wait(&sc->finished, &sc->lock);
	pthread_mutex_unlock(&sc->lock);
	if (why == CALL_CANCEL_DEADLINE)
		answer_at_deadline(sc, call);
	sock_call_free(sc); /* ev_arm's callback may still be returning: event_free waits for it */
	return why == CALL_CANCEL_DEADLINE;
}

const struct call_later_ops sock_later_ops = { .cancel = sock_call_cancel };

