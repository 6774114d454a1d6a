/* SPDX-License-Identifier: MIT */
/*
 * The old daemon's half of a restart (docs/RESTART.md, "The handover").
 *
 * Only a live daemon knows each port's phase (the shared words do not say
 * it), so only it can make a channel safe for the next one: every port must
 * end either idle or holding a request packet 0 nobody has read. In order:
 *   1. drain: no request starts; those receiving, in service or sending go
 *      on with the pollers and the pools, for up to restart_drain_ms;
 *   2. the pollers stop; calls in the pools (every GPU's and the default
 *      group's) may finish until restart_grace_ms, then the pools stop
 *      (a client still in service
 *      then is lost: STOPPED, its connection hung up first so a blocked
 *      worker lets go);
 *   3. a port still receiving is refused at the client's next packet
 *      (GPUSYS_SW_ABORT, -ECONNABORTED: its service never saw it), waiting
 *      for that packet until restart_grace_ms; a client that does not send
 *      it in time is lost too;
 *   4. every channel left whole is marked HANDOVER; stop() then hangs up,
 *      and libgpusys re-offers the channel to the next daemon.
 */
#include <sys/socket.h>
#include <time.h>

#include "core/channel.h"
#include "core/later.h"
#include "core/poller.h"
#include "core/port_server.h"
#include "core/registry.h"
#include "daemon.h"
#include "handover.h"
#include "poller_groups.h"
#include "util/log.h"

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void)
{
	struct timespec ts = { 0, 200000 }; /* 0.2 ms: a client's next packet comes in microseconds */
	nanosleep(&ts, NULL);
}

static bool any_busy(struct daemon *d)
{
	registry_for_each(&d->reg, s) if (port_table_busy(&s->ports)) return true;
	return false;
}

static bool claimed(struct session *s)
{
	for (uint32_t p = 0; p < s->ports.num_ports; p++)
		if (atomic_load_explicit(&s->ports.claim[p], memory_order_acquire))
			return true;
	return false;
}

static bool any_claimed(struct daemon *d)
{
	registry_for_each(&d->reg, s) if (claimed(s)) return true;
	return false;
}

/* Not handed over: -ESHUTDOWN for its warps, as without a handover. */
static void lose(struct session *s, const char *why)
{
	log_warn("client %u (pid %d comm '%s') not handed over: %s", s->id, (int)s->peer.pid, s->peer.comm, why);
	channel_mark_stopped(&s->chan);
	shutdown(s->client.sock, SHUT_RDWR);
}

/* Step 3 for one session: true once every port is READY, false while one
 * still waits for its client's packet; *lost when one ran. */
static bool settle(struct session *s, bool *lost)
{
	bool ready = true;
	for (uint32_t p = 0; p < s->ports.num_ports; p++) {
		enum port_handover h = port_handover_step(&s->ports, p);
		if (h == PORT_HANDOVER_LOST) {
			*lost = true;
			return false;
		}
		ready &= h == PORT_HANDOVER_READY;
	}
	return ready;
}

void daemon_handover(struct daemon *d)
{
	long long t0 = now_ms();
	long long drain_end = t0 + d->cfg.restart_drain_ms, grace_end = t0 + d->cfg.restart_grace_ms;
	if (drain_end > grace_end)
		drain_end = grace_end;

	/* 1. Nothing new starts; calls pending later are cancelled as on a
	 * detach (-ECANCELED: they wait on things the next daemon does not
	 * have). */
	unsigned cancelled = 0;
	registry_for_each(&d->reg, s)
	{
		port_table_drain(&s->ports);
		cancelled += later_cancel_table(&s->ports);
	}
	while (any_busy(d) && now_ms() < drain_end)
		nap();

	/* 2. Pollers first (no step is half done after this). Calls in the
	 * pools need nothing from their client: they may finish until
	 * restart_grace_ms. A client whose call is still in service then is
	 * lost, and hung up before the pools are joined so that its worker
	 * gives up. */
	groups_stop(d);
	while (any_claimed(d) && now_ms() < grace_end)
		nap();
	unsigned lost = 0;
	registry_for_each(&d->reg, s)
	{
		if (claimed(s)) {
			lose(s, "a request was still in service at restart_grace_ms");
			lost++;
		}
	}
	groups_stop_workers(d);

	/* 3. and 4. */
	unsigned handed = 0, aborted = 0;
	registry_for_each(&d->reg, s)
	{
		if (s->chan.base && channel_header(&s->chan)->server_state == GPUSYS_SERVER_STOPPED)
			continue; /* lost above */
		if (s->chan.ops != &channel_memfd_ops) {
			/* CUDA VMM memory is our allocation, not a file the
			 * next daemon could take. */
			lose(s, "its channel memory (CUDA VMM) cannot be handed over");
			lost++;
			continue;
		}
		uint64_t before = atomic_load_explicit(&s->ports.aborted, memory_order_relaxed);
		bool ran = false, ready;
		while (!(ready = settle(s, &ran)) && !ran && now_ms() < grace_end)
			nap();
		aborted += (unsigned)(atomic_load_explicit(&s->ports.aborted, memory_order_relaxed) - before);
		if (!ready) {
			lose(s, ran ? "a response was still streaming at restart_drain_ms"
				    : "a request stream did not go on within restart_grace_ms");
			lost++;
			continue;
		}
		channel_mark_handover(&s->chan);
		handed++;
	}
	log_info("restart: %u client%s handed over, %u not, in %lld ms (%u requests refused unrun, %u pending calls cancelled)",
		 handed, handed == 1 ? "" : "s", lost, now_ms() - t0, aborted, cancelled);
}
