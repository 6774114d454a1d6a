/* SPDX-License-Identifier: MIT */
/*
 * The hot path: a tight scan of the client words of every channel against
 * the daemon's private seen[], no locks, no allocation. Poller k scans the
 * k-th share of each channel's ports (poller 0 also the shares of parked
 * pollers). A poller whose passes are long and find little re-checks
 * recently busy ports between chunks of its scan (scan(), use_hot).
 *
 * Idle policy. While work was seen in the last spin_us every poller spins
 * (a hand-off to a sleeping thread costs microseconds, see DESIGN-NOTES).
 * The other pollers keep spinning up to park_us, then park on a condition
 * variable; poller 0 wakes them when one of its passes finds more than one
 * port with work (parallel work for them; a lone warp calling is served as
 * fast by poller 0 alone). Poller 0 then dozes, in two steps:
 *
 *  1. Timed naps, for deep_after_us (2 ms): it sleeps sleep_us at a time
 *     and in between reads one word per channel, the header doorbell the
 *     client rings with every packet, instead of scanning every port; and
 *     scans every port every rescan_ms (or rarer, so that this costs at
 *     most 0.1% of a core). Before the first nap it records the doorbells
 *     and scans once more, so a request published just before the record
 *     is not left waiting.
 *  2. Deep doze: it sleeps with no timer until a client wakes it (wake.h),
 *     with a safety rescan of every port every safety_ms (1 s). The order
 *     is io_uring SQPOLL's: announce (header.dozing = 1 in every channel),
 *     full fence, re-check every doorbell against the recorded copy, sleep
 *     only if none moved. A host client stores its doorbell, fences, reads
 *     dozing and if set writes its wake pipe (device/lane.h): one side
 *     always sees the other. A CUDA client cannot make a system call, so
 *     for its channel the GPU watches the doorbell (wake_cuda.c: a stream
 *     wait on it, then a host function that writes our eventfd), armed
 *     here before sleeping. A channel whose doorbell cannot be watched (a
 *     GPU without stream memory operations, a daemon built without CUDA)
 *     keeps poller 0 on timed naps while it is attached, and so does a
 *     client whose host library says kernels may be in flight
 *     (header.active_until_ns, set by gpusys_device, cleared by
 *     gpusys_synchronize): a GPU's watch is far slower to wake us than
 *     a nap (measured, see bench/RESULTS.md: "Idle cost and wake-up"). Attach (a channel
 *     that was not told) and stop kick the eventfd. On waking, poller 0
 *     clears dozing, serves the port each channel's last ring names
 *     (serve_rung) and spins again.
 *
 * Lost wake-ups are bounded by the safety rescan: a client that ignores
 * its pipe, a GPU doorbell value stored out of order by racing warps (the
 * watch fires on a bit set that the recorded value lacked, see
 * wake_cuda.c), a pipe that the client closed.
 *
 * NOTE: timer naps alone cannot meet both idle targets (<= 1% of a core,
 * <= 100 us to the first request after 1 s of quiet): idle CPU is wake-ups
 * times their cost, and a nap short enough for the latency target costs
 * several percent of a core. Hence the deep doze, and the naps only while
 * a client says kernels may call. Measured, see bench/RESULTS.md: "Idle
 * cost and wake-up" (its "Timed naps alone" table, and each client kind
 * with the deep doze).
 *
 * Counters (poller.h, gpusysctl pollers). Each pass tallies on the stack
 * what it read, found, served and collided on, and adds it to the poller's
 * own cache line at its end; a random one pass in 16 is timed. They showed
 * that under load the pollers are busy serving, not colliding: the whole
 * GPU's throughput is the pollers over their CPU time per request
 * (measured, see bench/RESULTS.md: "The daemon's side of the hot path").
 *
 * Grace periods. Each poller publishes a counter after every pass and an
 * offline flag while it sleeps or parks. pollers_publish() swaps the
 * snapshot pointer, then waits until every poller has either completed a
 * pass or is offline: a poller only reads the snapshot pointer after it
 * has come online and after the previous pass's counter store, and all of
 * these are sequentially consistent, so a poller seen offline or seen
 * passing will load the new snapshot next (Dekker's pattern: store mine,
 * load yours, on both sides).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "util/log.h"
#include "common/clock.h"
#include "core/port_server.h"
#include "core/poller.h"
#include "core/wake.h"

struct snapshot {
	uint64_t gen;
	uint32_t n;
	uint64_t *doze_seen; /* poller 0 only: doorbells as last recorded */
	struct port_table *t[];
};

struct poller {
	/* Read by the main thread during grace periods: a line of its own so
	 * the scan does not share it with anything. */
	_Alignas(64) atomic_uint_fast64_t quiescent;
	atomic_bool offline;
	struct pollers *set;
	pthread_t thread;
	unsigned index;
	unsigned slot;  /* progress slot: prm.first_slot + index */
	bool running;
	uint64_t passes; /* private copy of quiescent */

	/* Ports that had work lately, checked between chunks of the scan so
	 * a warp calling again and again is seen within a chunk, not a whole
	 * pass (which is ~1 ns a port). Valid for snapshot generation hot_gen
	 * only: a table may be gone in the next. */
	uint64_t hot_gen;
	unsigned hot_next;
	unsigned last_work; /* ports the last pass's scan served (hot checks not counted) */
	uint32_t sample_rng; /* xorshift32: which passes are timed */
	struct {
		struct port_table *t;
		uint32_t p;
	} hot[4];

	/* Written by this poller only, once per pass; read by gpusysctl. A
	 * line of its own, away from the snapshot and the scan's state. */
	_Alignas(64) struct poller_counters ctr;
};

struct pollers {
	struct poller_params prm;
	uint64_t spin_ns, park_ns, rescan_ns, deep_ns;
	_Atomic(struct snapshot *) snap;
	/* Two snapshots, so publishing allocates nothing and cannot fail (a
	 * detach must always be able to take a channel out): the main thread
	 * fills the one not published, swaps, and after the grace period the
	 * old one is free to be filled next time. */
	struct snapshot *buf[2];
	uint32_t capacity;
	uint64_t gen; /* main thread only */
	atomic_bool stop;

	/* Parking of pollers 1..count-1. */
	pthread_mutex_t park_mu;
	pthread_cond_t park_cv;
	uint64_t wake_gen;
	atomic_uint parked;

	struct poller *p; /* count entries, 64-byte aligned */
};

static struct snapshot *snapshot_alloc(uint32_t capacity)
{
	struct snapshot *s = calloc(1, sizeof(*s) + capacity * (sizeof(s->t[0]) + sizeof(uint64_t)));
	if (s)
		s->doze_seen = (uint64_t *)(s->t + capacity);
	return s;
}

/* ------------------------------------------------------------ one pass */

/* What a pass did, kept in registers and on the stack while it runs and
 * added to the poller's counters once at its end (poller.h). */
struct pass_tally {
	bool timed;
	uint64_t ports, found, served, collisions, held, hot_hits;
	uint64_t serve_ticks; /* stats_now() units, timed passes only */
};

static inline unsigned serve_port(struct poller *pl, struct pass_tally *tl, struct port_table *t, uint32_t p)
{
	/* A port a call holds (on the pool, or pending later) first, by its
	 * claim byte alone: its request is unanswered, so it reads as pending
	 * on every pass until the answer, and those are not collisions
	 * between pollers. NOTE: one dense byte instead of the client word,
	 * seen[] and the claim twice; with 10 000 calls pending, a pass over
	 * them had cut a NOOP's rate to 77-92% of its rate alone
	 * (tests/daemon/test_later.c). */
	if (port_held_by_call(t, p)) {
		tl->found++;
		tl->held++;
		return 0;
	}
	if (!port_pending(t, p))
		return 0;
	tl->found++;
	if (!port_try_claim(t, p)) {
		if (port_held_by_call(t, p))
			tl->held++;
		else
			tl->collisions++;
		return 0;
	}
	uint64_t t0 = tl->timed ? stats_now() : 0;
	unsigned done = 0;
	struct port_call *call = NULL;
	switch (port_server_step(t, p, pl->slot, &call)) {
	case PORT_STEP_NONE:
		/* Another poller served it between our look and our claim. */
		tl->collisions++;
		break;
	case PORT_STEP_DONE:
		done = 1;
		break;
	case PORT_STEP_DEFER:
		pl->set->prm.defer(call, pl->slot, pl->set->prm.defer_arg);
		done = 1;
		break;
	}
	tl->served += done;
	if (tl->timed)
		tl->serve_ticks += stats_now() - t0;
	return done;
}

#define HOT_PORTS (sizeof(((struct poller *)0)->hot) / sizeof(((struct poller *)0)->hot[0]))
#define SCAN_CHUNK 64u

static inline unsigned serve_hot(struct poller *pl, struct pass_tally *tl)
{
	unsigned work = 0;
	for (unsigned i = 0; i < HOT_PORTS; i++)
		if (pl->hot[i].t) {
			tl->ports++;
			work += serve_port(pl, tl, pl->hot[i].t, pl->hot[i].p);
		}
	tl->hot_hits += work;
	return work;
}

static void remember_hot(struct poller *pl, struct port_table *t, uint32_t p)
{
	for (unsigned i = 0; i < HOT_PORTS; i++)
		if (pl->hot[i].t == t && pl->hot[i].p == p)
			return;
	unsigned i = pl->hot_next++ % HOT_PORTS;
	pl->hot[i].t = t;
	pl->hot[i].p = p;
}

/* Serve port p; one that made progress is remembered among the hot ones.
 * 1 or 0: whether it made progress. */
static inline unsigned serve_remembered(struct poller *pl, struct pass_tally *tl, struct port_table *t, uint32_t p)
{
	if (!serve_port(pl, tl, t, p))
		return 0;
	remember_hot(pl, t, p);
	return 1;
}

static unsigned scan_range(struct poller *pl, struct pass_tally *tl, struct port_table *t, uint32_t lo, uint32_t hi,
			   bool use_hot)
{
	unsigned work = 0;
	tl->ports += hi - lo;
	for (uint32_t c = lo; c < hi; c += SCAN_CHUNK) {
		uint32_t end = hi - c > SCAN_CHUNK ? c + SCAN_CHUNK : hi;
		if (use_hot)
			work += serve_hot(pl, tl);
		for (uint32_t p = c; p < end; p++)
			work += serve_remembered(pl, tl, t, p);
	}
	return work;
}

/* The window ports (the last num_windows; abi.h) of share j: windows j,
 * j + count, ... Every large stream goes through them, 64 KiB a packet
 * copied by the poller that serves the port: in one poller's range, as the
 * last of the equal ranges, they bounded the whole GPU's large calls to
 * what one thread copies (bench/RESULTS.md "Ninth session"). */
static unsigned scan_windows(struct poller *pl, struct pass_tally *tl, struct port_table *t, uint32_t j,
			     uint32_t count)
{
	unsigned work = 0;
	uint32_t first = t->num_ports - t->num_windows;
	for (uint32_t w = j; w < t->num_windows; w += count) {
		tl->ports++;
		work += serve_remembered(pl, tl, t, first + w);
	}
	return work;
}

/* Single writer (the poller): a plain load and store, relaxed, so that a
 * reader on another thread sees whole values; no locked instruction. */
static inline void ctr_add(uint64_t *v, uint64_t by)
{
	__atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + by, __ATOMIC_RELAXED);
}

static void tally_flush(struct poller *pl, const struct pass_tally *tl, unsigned work, uint64_t t0)
{
	struct poller_counters *c = &pl->ctr;
	ctr_add(&c->passes, 1);
	ctr_add(&c->ports_scanned, tl->ports);
	if (!work)
		ctr_add(&c->empty_passes, 1);
	if (tl->found) {
		ctr_add(&c->found, tl->found);
		ctr_add(&c->served, tl->served);
		ctr_add(&c->collisions, tl->collisions);
		ctr_add(&c->held, tl->held);
		ctr_add(&c->hot_hits, tl->hot_hits);
	}
	if (tl->timed) {
		uint64_t t1 = stats_now();
		port_timing.on = false;
		ctr_add(&c->timed_answer_ns, stats_elapsed_ns(0, port_timing.answer));
		ctr_add(&c->timed_count_ns, stats_elapsed_ns(0, port_timing.count));
		port_timing.answer = port_timing.count = 0;
		ctr_add(&c->timed_passes, 1);
		ctr_add(&c->timed_pass_ns, stats_elapsed_ns(t0, t1));
		ctr_add(&c->timed_serve_ns, stats_elapsed_ns(0, tl->serve_ticks));
		ctr_add(&c->timed_served, tl->served);
		ctr_add(&c->timed_found, tl->found);
	}
}

/* The ports of every channel are shared out: poller k owns the k-th of
 * count equal ranges of the plain ports, so pollers do not read (and
 * bounce) each other's seen[] and claim[] lines, and a pass costs 1/count
 * of the ports; the window ports are dealt out one by one instead
 * (scan_windows), so that large streams are copied by every poller. Poller 0
 * also covers the ranges of pollers that are parked. A poller coming back
 * may overlap with poller 0 for a pass: the claim keeps that safe. Returns
 * the number of ports that made progress. */
static unsigned scan(struct poller *pl, const struct snapshot *s)
{
	struct pollers *ps = pl->set;
	unsigned work = 0, k = pl->index, count = ps->prm.count;
	uint64_t cover = 1ull << k; /* ranges to scan this pass */
	/* One pass in POLLER_TIME_EVERY, at random, is timed (poller.h),
	 * while counting is on. */
	uint32_t x = pl->sample_rng;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	pl->sample_rng = x;
	struct pass_tally tl = { .timed = (x % POLLER_TIME_EVERY) == 0 && stats_enabled() };
	uint64_t t0 = tl.timed ? stats_now() : 0;
	port_timing.on = tl.timed;

	if (s->gen != pl->hot_gen) {
		memset(pl->hot, 0, sizeof(pl->hot));
		pl->hot_gen = s->gen;
	}
	if (k == 0) {
		for (unsigned j = 1; j < count; j++)
			if (atomic_load_explicit(&ps->p[j].offline, memory_order_relaxed))
				cover |= 1ull << j;
	}
	/* Once a pass: without -mpopcnt this is a libgcc call. */
	uint64_t shares = (uint64_t)__builtin_popcountll(cover);
	for (uint32_t i = 0; i < s->n; i++) {
		struct port_table *t = s->t[i];
		uint64_t n = t->num_ports - t->num_windows; /* the plain ports */
		/* The hot ports matter when a pass is long and finds little:
		 * few warps calling, each waiting a whole pass for its next
		 * call to be seen. Under load they are a loss: the checks cost
		 * throughput, and serving the ports that had work first lets
		 * some warps finish early and others late (print slows). So
		 * only after a pass whose scan served no more ports than there
		 * are hot ones. Measured, see bench/RESULTS.md: "Figures that
		 * stood in code comments". */
		bool use_hot = shares * n / count > 512 && pl->last_work <= HOT_PORTS;
		for (uint64_t m = cover; m; m &= m - 1) {
			unsigned j = (unsigned)__builtin_ctzll(m);
			work += scan_range(pl, &tl, t, (uint32_t)(j * n / count), (uint32_t)((j + 1) * n / count),
					   use_hot);
			work += scan_windows(pl, &tl, t, j, count);
		}
	}
	tally_flush(pl, &tl, work, t0);
	/* What the scan itself found: a lone warp served by the hot checks
	 * several times in one long pass must not switch them off. */
	pl->last_work = work - (unsigned)tl.hot_hits;
	return work;
}

/* ------------------------------------------------------ grace periods */

static void pass_done(struct poller *pl)
{
	atomic_store_explicit(&pl->quiescent, ++pl->passes, memory_order_seq_cst);
}

static void go_offline(struct poller *pl)
{
	atomic_store_explicit(&pl->offline, true, memory_order_seq_cst);
}

static void go_online(struct poller *pl)
{
	atomic_store_explicit(&pl->offline, false, memory_order_seq_cst);
}

static struct snapshot *load_snapshot(struct pollers *ps)
{
	return atomic_load_explicit(&ps->snap, memory_order_seq_cst);
}

static void synchronize(struct pollers *ps)
{
	uint64_t seen[GPUSYS_PROGRESS_SLOTS];
	unsigned n = ps->prm.count;

	for (unsigned i = 0; i < n; i++)
		seen[i] = atomic_load_explicit(&ps->p[i].quiescent, memory_order_seq_cst);
	for (unsigned i = 0; i < n; i++) {
		struct poller *pl = &ps->p[i];
		while (!atomic_load_explicit(&pl->offline, memory_order_seq_cst) &&
		       atomic_load_explicit(&pl->quiescent, memory_order_seq_cst) == seen[i])
			nanosleep(&(struct timespec){ .tv_nsec = 10000 }, NULL);
	}
}

/* ------------------------------------------------------------- idling */

static void wake_parked(struct poller *pl)
{
	struct pollers *ps = pl->set;

	/* The common case, nobody parked, costs one load. A poller that is
	 * just about to park misses this wake-up and sleeps until the next:
	 * harmless, poller 0 serves what it found. */
	if (atomic_load_explicit(&ps->parked, memory_order_relaxed) == 0)
		return;
	ctr_add(&pl->ctr.helper_wakes, 1);
	pthread_mutex_lock(&ps->park_mu);
	ps->wake_gen++;
	pthread_cond_broadcast(&ps->park_cv);
	pthread_mutex_unlock(&ps->park_mu);
}

static void park(struct poller *pl)
{
	struct pollers *ps = pl->set;

	ctr_add(&pl->ctr.parks, 1);
	pthread_mutex_lock(&ps->park_mu);
	uint64_t gen = ps->wake_gen;
	atomic_fetch_add_explicit(&ps->parked, 1, memory_order_relaxed);
	go_offline(pl);
	while (gen == ps->wake_gen && !atomic_load_explicit(&ps->stop, memory_order_relaxed))
		pthread_cond_wait(&ps->park_cv, &ps->park_mu);
	atomic_fetch_sub_explicit(&ps->parked, 1, memory_order_relaxed);
	pthread_mutex_unlock(&ps->park_mu);
	go_online(pl);
}

static void record_doorbells(struct snapshot *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		s->doze_seen[i] = __atomic_load_n(&s->t[i]->hdr->doorbell, __ATOMIC_RELAXED);
}

static bool doorbell_rang(const struct snapshot *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (__atomic_load_n(&s->t[i]->hdr->doorbell, __ATOMIC_RELAXED) != s->doze_seen[i])
			return true;
	return false;
}

/* A woken poller 0 serves the port each channel's last ring names (abi.h
 * GPUSYS_RING_*) before its first pass: a warp that calls after a quiet
 * spell rings with its port, and the pass would reach it only after the
 * ports before it (with 8448 ports a pass of cold lines is tens of us).
 * The value is the client's to scribble on: bounded by the channel's
 * ports, and a port with nothing pending costs one look. Counted as a pass
 * of the ports it looked at (rung_served: what it served). Called online
 * with a snapshot loaded after going online, so s stays valid until the
 * next pass_done. */
static void serve_rung(struct poller *pl, const struct snapshot *s)
{
	struct pass_tally tl = { .timed = false };
	unsigned work = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		struct port_table *t = s->t[i];
		uint64_t ring = __atomic_load_n(&t->hdr->doorbell, __ATOMIC_RELAXED);
		uint32_t p = gpusys_ring_port(ring);
		if (p >= t->num_ports)
			continue;
		tl.ports++;
		if (serve_port(pl, &tl, t, p)) {
			work++;
			if (s->gen == pl->hot_gen)
				remember_hot(pl, t, p);
		}
	}
	tally_flush(pl, &tl, work, 0);
	if (work)
		ctr_add(&pl->ctr.rung_served, work);
}

/* Scan for a dozing poller 0, and how long that took: the safety rescan
 * is spaced so that it costs at most 1/RESCAN_SHARE of a core however many
 * ports there are. */
#define RESCAN_SHARE 1000

static bool timed_scan(struct poller *pl, const struct snapshot *s, uint64_t *ret_next)
{
	struct pollers *ps = pl->set;
	uint64_t t0 = now_ns();
	bool work = scan(pl, s) > 0;
	uint64_t t1 = now_ns(), gap = (t1 - t0) * RESCAN_SHARE;
	*ret_next = t1 + (gap > ps->rescan_ns ? gap : ps->rescan_ns);
	return work;
}

/* ---------------------------------------------------------- deep doze */

static void set_dozing(const struct snapshot *s, uint32_t v)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (__atomic_load_n(&s->t[i]->hdr->dozing, __ATOMIC_RELAXED) != v)
			__atomic_store_n(&s->t[i]->hdr->dozing, v, __ATOMIC_RELAXED);
}

/* Have every channel of s able to wake us: host clients always are (their
 * pipe); CUDA clients once the GPU watches their doorbell. false: some
 * channel cannot, so timed naps it is. */
/* Some client's host library says kernels may be in flight: nap, for a
 * wake-up the GPU watch cannot give. A value further off than a hold is
 * garbage and ignored. */
static bool kernels_in_flight(const struct snapshot *s)
{
	uint64_t now = now_ns();
	for (uint32_t i = 0; i < s->n; i++) {
		uint64_t until = __atomic_load_n(&s->t[i]->hdr->active_until_ns, __ATOMIC_RELAXED);
		if (until > now && until - now <= GPUSYS_ACTIVE_HOLD_NS)
			return true;
	}
	return false;
}

static bool arm_all(const struct pollers *ps, const struct snapshot *s)
{
	for (uint32_t i = 0; i < s->n; i++) {
		struct wake_chan *c = ps->prm.chan_wake(s->t[i]);
		if (!c || c->needs_timer)
			return false;
		if (c->gpu && !wake_gpu_arm(c, s->doze_seen[i]))
			return false;
	}
	return true;
}

/* wake_drain's view of the clients: those of the snapshot poller 0 is
 * online with, so every one found is alive. */
static struct wake_chan *find_chan(void *arg, uint64_t tag)
{
	struct pollers *ps = arg;
	const struct snapshot *s = load_snapshot(ps);
	for (uint32_t i = 0; i < s->n; i++) {
		struct wake_chan *c = ps->prm.chan_wake(s->t[i]);
		if (c && c->tag == tag)
			return c;
	}
	return NULL;
}

/* Poller 0, idle: returns when there may be work (or on stop). Timed naps
 * first, then (after deep_ns) sleep until woken. */
static void doze(struct poller *pl)
{
	struct pollers *ps = pl->set;
	const struct timespec nap = { .tv_nsec = (long)ps->prm.sleep_us * 1000 };
	uint64_t gen = 0, next_scan = 0, deep_at = now_ns() + ps->deep_ns;
	bool recorded = false, scan_due = false;

	ctr_add(&pl->ctr.dozes, 1);

	for (;;) {
		struct snapshot *s = load_snapshot(ps);
		bool work, deep = false;
		if (!recorded || s->gen != gen) {
			/* New or changed channel list: record, then re-check. */
			record_doorbells(s);
			gen = s->gen;
			recorded = true;
			work = timed_scan(pl, s, &next_scan);
		} else if (scan_due) {
			/* The deep doze's safety rescan. */
			work = timed_scan(pl, s, &next_scan);
		} else {
			work = doorbell_rang(s);
			if (!work && ps->rescan_ns && now_ns() >= next_scan)
				work = timed_scan(pl, s, &next_scan);
		}
		scan_due = false;
		if (!work && ps->prm.wake && now_ns() >= deep_at && !kernels_in_flight(s)) {
			/* Announce, full fence, re-check (io_uring's SQPOLL
			 * order; the client stores its doorbell or its
			 * active_until_ns, fences, reads dozing: one of us sees
			 * the other). The check above keeps dozing quiet while
			 * kernels are in flight; the one below closes the race. */
			set_dozing(s, 1);
			gpusys_host_full_fence();
			work = doorbell_rang(s);
			deep = !work && !kernels_in_flight(s) && arm_all(ps, s);
			if (!work && !deep)
				set_dozing(s, 0); /* timed naps: nobody need write */
		}
		pass_done(pl);
		if (work)
			break;
		go_offline(pl);
		if (deep) {
			struct wake_events ev;
			ctr_add(&pl->ctr.deep_dozes, 1);
			int n = wake_sleep(ps->prm.wake, (int)ps->prm.safety_ms, &ev);
			go_online(pl);
			if (n > 0) {
				ctr_add(&pl->ctr.wakeups, 1);
				wake_drain(ps->prm.wake, &ev, find_chan, ps);
				break;
			}
			scan_due = true;
		} else {
			/* Relative sleep: the timer slack set on this thread
			 * keeps the wake-up within a microsecond or so of nap. */
			clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
			go_online(pl);
		}
		if (atomic_load_explicit(&ps->stop, memory_order_relaxed))
			break;
	}
	/* Spinning again: clients need not wake us (cleared first, so that a
	 * host client served next does not take the wake pipe for its next
	 * call). Then what woke us. Channels that left while we slept are not
	 * in this snapshot and are not touched. */
	struct snapshot *s = load_snapshot(ps);
	if (ps->prm.wake)
		set_dozing(s, 0);
	serve_rung(pl, s);
}

static void *poller_main(void *arg)
{
	struct poller *pl = arg;
	struct pollers *ps = pl->set;
	char name[32];

	/* A thread name is 15 characters at most: "gpusysd-g63-p62" fits. */
	if (ps->prm.gpu_index >= 0)
		snprintf(name, sizeof(name), "gpusysd-g%d-p%u", ps->prm.gpu_index, pl->index);
	else
		snprintf(name, sizeof(name), "gpusysd-poll%u", pl->index);
	name[15] = 0;
	pthread_setname_np(pthread_self(), name);
	/* The default slack is 50 us: a 50 us nap would take 100. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

	go_online(pl);
	uint64_t last_work = now_ns();
	unsigned empty_passes = 0;
	while (!atomic_load_explicit(&ps->stop, memory_order_relaxed)) {
		unsigned work = scan(pl, load_snapshot(ps));
		pass_done(pl);
		if (work) {
			empty_passes = 0;
			last_work = now_ns();
			/* Help is worth waking only when there is parallel work:
			 * one port at a time (one warp calling) is served as
			 * fast by one poller, and each wake-up would cost the
			 * helpers park_us of spinning. */
			if (pl->index == 0 && work > 1)
				wake_parked(pl);
			continue;
		}
		cpu_relax();
		/* Reading the clock costs as much as a pass over a few ports:
		 * look at it only every so often while spinning. */
		if (++empty_passes % 64)
			continue;
		uint64_t idle = now_ns() - last_work;
		if (idle < ps->spin_ns)
			continue;
		if (pl->index == 0) {
			doze(pl);
			last_work = now_ns();
		} else if (idle >= ps->park_ns) {
			park(pl);
			last_work = now_ns();
		}
	}
	go_offline(pl);
	return NULL;
}

/* ----------------------------------------------------------- lifecycle */

int pollers_create(const struct poller_params *prm, uint32_t capacity, struct pollers **ret)
{
	/* The last slot is PORT_LATER_SLOT's. */
	if (prm->count == 0 || prm->first_slot + prm->count > GPUSYS_PROGRESS_SLOTS - 1 || !prm->defer)
		return -EINVAL;
	struct pollers *ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	ps->prm = *prm;
	ps->spin_ns = (uint64_t)prm->spin_us * 1000;
	ps->park_ns = (uint64_t)prm->park_us * 1000;
	if (ps->park_ns < ps->spin_ns)
		ps->park_ns = ps->spin_ns;
	ps->rescan_ns = (uint64_t)prm->rescan_ms * 1000000;
	ps->deep_ns = (uint64_t)prm->deep_after_us * 1000;
	if (prm->wake && (!prm->chan_wake || !prm->safety_ms)) {
		free(ps);
		return -EINVAL;
	}
	size_t bytes = (prm->count * sizeof(struct poller) + 63) / 64 * 64;
	ps->p = aligned_alloc(64, bytes);
	ps->buf[0] = snapshot_alloc(capacity);
	ps->buf[1] = snapshot_alloc(capacity);
	ps->capacity = capacity;
	if (!ps->p || !ps->buf[0] || !ps->buf[1]) {
		free(ps->p);
		free(ps->buf[0]);
		free(ps->buf[1]);
		free(ps);
		return -ENOMEM;
	}
	memset(ps->p, 0, bytes);
	for (unsigned i = 0; i < prm->count; i++) {
		ps->p[i].set = ps;
		ps->p[i].index = i;
		ps->p[i].slot = prm->first_slot + i;
		ps->p[i].sample_rng = 2463534242u + i; /* any nonzero seed */
		/* Not started counts as offline: grace periods skip it. */
		atomic_init(&ps->p[i].offline, true);
		atomic_init(&ps->p[i].quiescent, 0);
	}
	atomic_init(&ps->snap, ps->buf[0]);
	atomic_init(&ps->stop, false);
	atomic_init(&ps->parked, 0);
	pthread_mutex_init(&ps->park_mu, NULL);
	pthread_cond_init(&ps->park_cv, NULL);
	*ret = ps;
	return 0;
}

int pollers_start(struct pollers *ps)
{
	for (unsigned i = 0; i < ps->prm.count; i++) {
		int r = pthread_create(&ps->p[i].thread, NULL, poller_main, &ps->p[i]);
		if (r) {
			log_err("cannot start poller thread %u: %s", i, strerror(r));
			pollers_stop(ps);
			return -r;
		}
		ps->p[i].running = true;
	}
	return 0;
}

void pollers_stop(struct pollers *ps)
{
	atomic_store(&ps->stop, true);
	if (ps->prm.wake)
		wake_kick(ps->prm.wake);
	pthread_mutex_lock(&ps->park_mu);
	ps->wake_gen++;
	pthread_cond_broadcast(&ps->park_cv);
	pthread_mutex_unlock(&ps->park_mu);
	for (unsigned i = 0; i < ps->prm.count; i++) {
		if (ps->p[i].running)
			pthread_join(ps->p[i].thread, NULL);
		ps->p[i].running = false;
	}
}

void pollers_destroy(struct pollers *ps)
{
	if (!ps)
		return;
	pollers_stop(ps);
	free(ps->buf[0]);
	free(ps->buf[1]);
	pthread_cond_destroy(&ps->park_cv);
	pthread_mutex_destroy(&ps->park_mu);
	free(ps->p);
	free(ps);
}

int pollers_publish(struct pollers *ps, struct port_table *const *tables, uint32_t n)
{
	if (n > ps->capacity)
		return -E2BIG;
	struct snapshot *cur = atomic_load_explicit(&ps->snap, memory_order_relaxed);
	struct snapshot *s = cur == ps->buf[0] ? ps->buf[1] : ps->buf[0];
	s->gen = ++ps->gen;
	s->n = n;
	for (uint32_t i = 0; i < n; i++) {
		s->t[i] = tables[i];
		s->doze_seen[i] = 0;
	}
	atomic_store_explicit(&ps->snap, s, memory_order_seq_cst);
	/* A new channel's header does not say dozing, so its client would
	 * not wake a deep-dozing poller 0: wake it, and it announces the
	 * doze again to every channel. A channel that leaves needs nothing. */
	if (ps->prm.wake && n > cur->n)
		wake_kick(ps->prm.wake);
	synchronize(ps);
	return 0;
}

int pollers_set_affinity(struct pollers *ps, unsigned i, const cpu_set_t *set)
{
	if (i >= ps->prm.count || !ps->p[i].running)
		return -ERANGE;
	return -pthread_setaffinity_np(ps->p[i].thread, sizeof(*set), set);
}

unsigned pollers_count(const struct pollers *ps)
{
	return ps->prm.count;
}

unsigned pollers_slot(const struct pollers *ps, unsigned i)
{
	return ps->prm.first_slot + i;
}

int pollers_counters(const struct pollers *ps, unsigned i, struct poller_counters *ret)
{
	_Static_assert(sizeof(struct poller_counters) % sizeof(uint64_t) == 0, "all uint64_t");
	if (i >= ps->prm.count)
		return -ERANGE;
	const uint64_t *from = (const uint64_t *)&ps->p[i].ctr;
	uint64_t *to = (uint64_t *)ret;
	for (size_t k = 0; k < sizeof(*ret) / sizeof(uint64_t); k++)
		to[k] = __atomic_load_n(&from[k], __ATOMIC_RELAXED);
	return 0;
}
