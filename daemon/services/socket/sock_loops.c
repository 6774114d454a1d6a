/* SPDX-License-Identifier: MIT */
/*
 * The event loops socket calls wait on: socket_wait_loops threads, each
 * with its own libevent event_base (as memcached's worker threads each
 * have theirs), so that the calls that wait (accept, recv, send on a full
 * buffer, connect, poll) are armed, retried and completed on several
 * threads instead of all on the daemon's main loop. A call stays on the
 * loop it was given (its events, retries, completion and cleanup); name
 * lookups stay on the main loop, where evdns runs. With 0 loops, every call
 * waits on the main loop, as before.
 *
 * socket_wait_spin_us: a loop that handled an event within that long polls
 * its descriptors without sleeping (epoll_wait with no timeout, over and
 * over) instead of sleeping in epoll_wait. A busy connection's next wait
 * is then armed, and its readiness seen, without waking a sleeping thread
 * (microseconds each, twice a round trip), at the cost of a busy core per
 * loop while sockets are busy, as the pollers spin while warps call. 0:
 * always sleep.
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "services/socket/sock_call.h"
#include "common/clock.h"

#define LOOPS_MAX 64

struct sock_loop {
	struct event_base *base;
	pthread_t thread;
	atomic_bool stop;
};

struct sock_loop_set {
	struct sock_loop loop[LOOPS_MAX];
	unsigned n;
	atomic_uint next;
	uint64_t spin_ns;
};
static struct sock_loop_set L;

/* Events this thread's loop has handled (sock_loop_worked). */
static _Thread_local uint64_t worked;

void sock_loop_worked(void)
{
	worked++;
}

static void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *run(void *arg)
{
	struct sock_loop *lp = arg;
	if (!L.spin_ns) {
		event_base_loop(lp->base, EVLOOP_NO_EXIT_ON_EMPTY);
		return NULL;
	}
	uint64_t last = 0; /* quiet at start: sleep until the first event */
	while (!atomic_load_explicit(&lp->stop, memory_order_relaxed)) {
		uint64_t before = worked;
		event_base_loop(lp->base, EVLOOP_NONBLOCK);
		uint64_t now = now_ns();
		if (worked != before) {
			last = now;
		} else if (now - last > L.spin_ns) {
			/* Quiet: sleep until the next event (or the stop's). */
			event_base_loop(lp->base, EVLOOP_ONCE | EVLOOP_NO_EXIT_ON_EMPTY);
			last = now_ns();
		} else {
			spin_pause();
		}
	}
	return NULL;
}

int sock_loops_start(unsigned n, unsigned spin_us)
{
	L.spin_ns = (uint64_t)spin_us * 1000u;
	if (n > LOOPS_MAX)
		n = LOOPS_MAX;
	for (L.n = 0; L.n < n; L.n++) {
		struct sock_loop *lp = &L.loop[L.n];
		atomic_store(&lp->stop, false);
		lp->base = event_base_new();
		if (!lp->base || pthread_create(&lp->thread, NULL, run, lp) != 0) {
			if (lp->base)
				event_base_free(lp->base);
			sock_loops_stop();
			return -ENOMEM;
		}
		pthread_setname_np(lp->thread, "sock-wait"); /* top -H, /proc/PID/task/N/comm */
	}
	return 0;
}

void sock_loops_stop(void)
{
	for (unsigned i = 0; i < L.n; i++) {
		/* After the active events: a cancelled call's cleanup (ev_arm)
		 * runs before the loop ends. */
		atomic_store(&L.loop[i].stop, true);
		event_base_loopexit(L.loop[i].base, NULL);
		pthread_join(L.loop[i].thread, NULL);
		event_base_free(L.loop[i].base);
	}
	L.n = 0;
}

void sock_loop_pick(struct sock_call *sc, bool main_loop)
{
	if (main_loop || L.n == 0) {
		sc->base = sock_g.base;
		sc->loop_thread = sock_g.main_thread;
		return;
	}
	unsigned i = atomic_fetch_add_explicit(&L.next, 1, memory_order_relaxed) % L.n;
	sc->base = L.loop[i].base;
	sc->loop_thread = L.loop[i].thread;
}
