/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dispatch.h"
#include "core/poller.h"
#include "core/pool.h"
#include "core/session.h"
#include "core/wake.h"
#include "daemon.h"
#include "poller_groups.h"
#include "util/cpulist.h"
#include "util/log.h"

/* The idle policy, the same for every group (poller.c says why). Pollers
 * 1.. park after this long without work. */
#define PARK_US 2000
/* A dozing poller 0 still scans every port this often... */
#define RESCAN_MS 10
/* ...after this much timed dozing it sleeps until woken... */
#define DEEP_AFTER_US 2000
/* ...and still scans every port this often. */
#define SAFETY_MS 1000

/* The last slot is PORT_LATER_SLOT's. */
#define THREAD_SLOTS (GPUSYS_PROGRESS_SLOTS - 1u)

unsigned groups_auto_per_gpu(unsigned ncpu, unsigned ngpus)
{
	/* Three quarters of the GPU's share of the CPUs: under a whole GPU's
	 * load the pollers' CPU is the bound, and a quarter is left for the
	 * workers and the clients' own threads (two H200s on 32 CPUs: 8 a GPU
	 * served half the client's floor, 12 four fifths, 15 more alone but
	 * less with both busy; bench/RESULTS.md, "Poller groups per GPU (issue 34)"). */
	unsigned share = ncpu / (ngpus ? ngpus : 1);
	unsigned n = share * 3 / 4;
	return n ? n : 1;
}

/* v within [1, hi] (hi >= 1). */
static unsigned at_least_1(unsigned v, unsigned hi)
{
	return v < 1 ? 1 : v > hi ? hi : v;
}

struct group_size groups_fit_per_gpu(struct group_size want, bool auto_pollers, bool auto_workers,
				     unsigned gpus_left, unsigned slots_left)
{
	if (!gpus_left || (want.pollers + want.workers) * gpus_left <= slots_left)
		return want;
	unsigned share = slots_left / gpus_left;
	struct group_size s = want;
	/* NOTE: a quarter for the workers: the pollers' CPU bounds a whole
	 * GPU's NOOP and print rate, and a worker is a thread that sleeps
	 * unless file calls come. */
	if (auto_pollers && auto_workers) {
		s.workers = at_least_1(share / 4, want.workers);
		s.pollers = at_least_1(share > s.workers ? share - s.workers : 0, want.pollers);
	} else if (auto_workers) {
		s.workers = at_least_1(share > want.pollers ? share - want.pollers : 0, want.workers);
	} else if (auto_pollers) {
		s.pollers = at_least_1(share > want.workers ? share - want.workers : 0, want.pollers);
	}
	return s;
}

static unsigned usable_cpus(cpu_set_t *ret)
{
	CPU_ZERO(ret);
	if (sched_getaffinity(0, sizeof(*ret), ret) == 0 && CPU_COUNT(ret) > 0)
		return (unsigned)CPU_COUNT(ret);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	for (long c = 0; c < n && c < CPU_SETSIZE; c++)
		CPU_SET((int)c, ret);
	return n > 0 ? (unsigned)n : 1;
}

/* "0-7,16" for a set. */
static void format_cpus(const cpu_set_t *set, char *out, size_t len)
{
	size_t at = 0;
	out[0] = 0;
	for (int c = 0; c < CPU_SETSIZE && at < len; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		int e = c;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		int n = e > c ? snprintf(out + at, len - at, "%s%d-%d", at ? "," : "", c, e)
			      : snprintf(out + at, len - at, "%s%d", at ? "," : "", c);
		if (n < 0 || (size_t)n >= len - at) {
			out[at] = 0; /* cut at a whole entry */
			break;
		}
		at += (size_t)n;
		c = e;
	}
}

/* poller_cpus: poller after poller, one CPU each, wrapping over the list. */
static void pin_from_list(struct daemon *d, struct poller_group *g)
{
	cpu_set_t all, used;
	if (cpulist_parse(d->cfg.poller_cpus, &all) < 0 || !CPU_COUNT(&all))
		return;
	int list[CPU_SETSIZE], n = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all))
			list[n++] = c;
	unsigned failed = 0;
	CPU_ZERO(&used);
	for (unsigned i = 0; i < g->count; i++) {
		cpu_set_t one;
		int cpu = list[d->groups->next_cpu++ % (unsigned)n];
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		CPU_SET(cpu, &used);
		failed += pollers_set_affinity(g->pollers, i, &one) < 0;
	}
	format_cpus(&used, g->cpus, sizeof(g->cpus));
	if (failed)
		log_warn("poller_cpus = %s: %u of %u pollers could not be pinned (sched_setaffinity)", d->cfg.poller_cpus,
			 failed, g->count);
}

/* The CPUs of a GPU's NUMA node that gpusysd may use, when that is a
 * choice: a known node, not every usable CPU. */
static bool node_cpus(const struct poller_group *g, cpu_set_t *ret)
{
	cpu_set_t usable, node;
	if (!g->gpu || g->gpu->numa_node < 0)
		return false;
	usable_cpus(&usable);
	if (cpulist_of_node(g->gpu->numa_node, &node) < 0) {
		log_warn("numa: cannot read node %d's CPUs: GPU %s's threads stay unpinned", g->gpu->numa_node,
			 g->gpu->uuid_text);
		return false;
	}
	CPU_AND(ret, &usable, &node);
	return CPU_COUNT(ret) && !CPU_EQUAL(ret, &usable);
}

/* A GPU's workers, and its pollers too unless poller_cpus placed them, on
 * its NUMA node's CPUs: file calls then touch memory near the GPU that
 * asked for them. */
static void pin_to_node(struct poller_group *g, bool pollers_too)
{
	cpu_set_t both;
	if (!node_cpus(g, &both))
		return;
	unsigned failed = 0, pinned_pollers = 0, pinned_workers = 0;
	for (unsigned i = 0; pollers_too && i < g->count; i++) {
		bool bad = pollers_set_affinity(g->pollers, i, &both) < 0;
		failed += bad;
		pinned_pollers += !bad;
	}
	for (unsigned i = 0; i < g->workers; i++) {
		bool bad = pool_set_affinity(g->pool, i, &both) < 0;
		failed += bad;
		pinned_workers += !bad;
	}
	if (!pinned_pollers && !pinned_workers)
		return;
	char where[sizeof(g->cpus)];
	format_cpus(&both, where, sizeof(where));
	if (pinned_pollers)
		snprintf(g->cpus, sizeof(g->cpus), "%s", where);
	if (pinned_workers)
		snprintf(g->worker_cpus, sizeof(g->worker_cpus), "%s", where);
	if (pollers_too)
		log_info("numa: GPU %s's %u pollers and %u workers on node %d's CPUs %s%s", g->gpu->uuid_text,
			 g->count, g->workers, g->gpu->numa_node, where, failed ? " (some could not be pinned)" : "");
	else
		log_info("numa: GPU %s's %u workers on node %d's CPUs %s (its pollers on poller_cpus)%s",
			 g->gpu->uuid_text, g->workers, g->gpu->numa_node, where,
			 failed ? " (some could not be pinned)" : "");
}

static void group_free(struct poller_group *g)
{
	if (!g)
		return;
	/* Pollers first: none defers to the pool once they are joined. */
	pollers_destroy(g->pollers);
	pool_destroy(g->pool);
	wake_destroy(g->wake);
	free(g);
}

/* Make and start a group of size.pollers pollers and size.workers workers
 * at the next free slots. NULL (out of memory) or a group; a group whose
 * threads could not be made has pollers and pool NULL and says why in
 * error. */
static struct poller_group *group_new(struct daemon *d, struct gpu *gpu, struct group_size size)
{
	struct poller_groups *gs = d->groups;
	struct poller_group *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->gpu = gpu;
	g->count = size.pollers;
	g->workers = size.workers;
	snprintf(g->cpus, sizeof(g->cpus), "any");
	snprintf(g->worker_cpus, sizeof(g->worker_cpus), "any");
	unsigned left = gs->next_slot < THREAD_SLOTS ? THREAD_SLOTS - gs->next_slot : 0;
	if (size.pollers + size.workers > left) {
		snprintf(g->error, sizeof(g->error),
			 "GPU %s has no pollers: its %u pollers and %u workers do not fit the %u progress slots left of %u "
			 "(pollers %u + workers %u + other GPUs' pollers and workers; lower pollers_per_gpu or "
			 "workers_per_gpu)",
			 gpu ? gpu->uuid_text : "-", size.pollers, size.workers, left, THREAD_SLOTS, d->cfg.pollers,
			 d->cfg.workers);
		log_err("%s", g->error);
		return g;
	}
	/* The pool first: the pollers defer to it from their first pass. */
	char name[16];
	if (gpu)
		snprintf(name, sizeof(name), "gpusysd-g%u-w", gpu->index);
	else
		snprintf(name, sizeof(name), "gpusysd-work");
	int r = pool_create(size.workers, gs->next_slot + size.pollers, name, dispatch_run, NULL, &g->pool);
	if (r == 0)
		r = wake_create(&g->wake);
	struct poller_params pp = {
		.count = size.pollers,
		.first_slot = gs->next_slot,
		.gpu_index = gpu ? (int)gpu->index : -1,
		.spin_us = d->cfg.idle_spin_us,
		.sleep_us = d->cfg.idle_sleep_us,
		.park_us = PARK_US,
		.rescan_ms = RESCAN_MS,
		.deep_after_us = DEEP_AFTER_US,
		.safety_ms = SAFETY_MS,
		.wake = g->wake,
		.chan_wake = session_wake_of_table,
		.defer = dispatch_defer,
		.defer_arg = g->pool,
	};
	if (r == 0)
		r = pollers_create(&pp, d->cfg.max_clients, &g->pollers);
	if (r == 0 && (r = pollers_start(g->pollers)) < 0) {
		pollers_destroy(g->pollers);
		g->pollers = NULL;
	}
	if (r < 0) {
		g->pollers = NULL;
		pool_destroy(g->pool); /* nothing was deferred to it */
		g->pool = NULL;
		snprintf(g->error, sizeof(g->error), "%s%s has no pollers: %s", gpu ? "GPU " : "",
			 gpu ? gpu->uuid_text : "the default group", strerror(-r));
		log_err("%s", g->error);
		return g;
	}
	g->first_slot = gs->next_slot;
	gs->next_slot += size.pollers + size.workers;
	bool listed = strcmp(d->cfg.poller_cpus, "none");
	if (listed)
		pin_from_list(d, g);
	pin_to_node(g, !listed);
	return g;
}

int groups_start(struct daemon *d)
{
	d->groups = calloc(1, sizeof(*d->groups));
	if (!d->groups)
		return -ENOMEM;
	struct poller_group *g =
		group_new(d, NULL, (struct group_size){ .pollers = d->cfg.pollers, .workers = d->cfg.workers });
	if (!g || !g->pollers) {
		if (!g)
			log_err("out of memory");
		group_free(g);
		return g ? -EAGAIN : -ENOMEM;
	}
	d->groups->g[0] = g;
	groups_add_gpus(d);
	return 0;
}

void groups_add_gpus(struct daemon *d)
{
	struct poller_groups *gs = d->groups;
	cpu_set_t usable;
	unsigned n = gpus_count(), ncpu = usable_cpus(&usable);
	struct group_size want = {
		.pollers = d->cfg.pollers_per_gpu ? d->cfg.pollers_per_gpu : groups_auto_per_gpu(ncpu, n),
		.workers = d->cfg.workers_per_gpu ? d->cfg.workers_per_gpu : d->cfg.workers,
	};
	for (unsigned i = 0; i < n && i < GPUS_MAX; i++) {
		struct gpu *gpu = gpus_at(i);
		if (gs->g[1 + i])
			continue;
		/* Chosen counts, not asked for: as many as fit. */
		struct group_size size =
			groups_fit_per_gpu(want, !d->cfg.pollers_per_gpu, !d->cfg.workers_per_gpu, n - i,
					   gs->next_slot < THREAD_SLOTS ? THREAD_SLOTS - gs->next_slot : 0);
		struct poller_group *g = gs->g[1 + i] = group_new(d, gpu, size);
		if (g && g->pollers)
			log_info("GPU %s (%s): %u pollers and %u workers of its own (progress slots %u-%u and %u-%u, "
				 "pollers' CPUs %s, workers' CPUs %s)",
				 gpu->uuid_text, gpu->name, g->count, g->workers, g->first_slot,
				 g->first_slot + g->count - 1, g->first_slot + g->count,
				 g->first_slot + g->count + g->workers - 1, g->cpus, g->worker_cpus);
	}
}

struct poller_group *groups_of(struct daemon *d, const struct gpu *g, char *msg, size_t msglen)
{
	struct poller_group *grp = d->groups->g[g ? 1 + g->index : 0];
	if (grp && grp->pollers)
		return grp;
	if (grp)
		snprintf(msg, msglen, "%s", grp->error);
	else
		snprintf(msg, msglen, "GPU %s has no pollers (out of memory when they were made)",
			 g ? g->uuid_text : "-");
	return NULL;
}

struct poller_group *groups_at(struct daemon *d, unsigned i)
{
	return d->groups && i < GPUS_MAX + 1 ? d->groups->g[i] : NULL;
}

struct group_size groups_total(struct daemon *d)
{
	struct group_size n = { 0, 0 };
	for (unsigned i = 0; i < GPUS_MAX + 1; i++) {
		struct poller_group *g = groups_at(d, i);
		if (g && g->pollers)
			n.pollers += g->count;
		if (g && g->pool)
			n.workers += g->workers;
	}
	return n;
}

void groups_stop(struct daemon *d)
{
	for (unsigned i = 0; i < GPUS_MAX + 1; i++) {
		struct poller_group *g = groups_at(d, i);
		if (g && g->pollers)
			pollers_stop(g->pollers);
	}
}

void groups_stop_workers(struct daemon *d)
{
	/* NOTE: every group's pollers are joined (groups_stop) before any pool
	 * goes, so no poller defers into a pool being destroyed; one pool at a
	 * time is enough, as a call never waits on another group's. */
	for (unsigned i = 0; i < GPUS_MAX + 1; i++) {
		struct poller_group *g = groups_at(d, i);
		if (g && g->pool) {
			pool_destroy(g->pool);
			g->pool = NULL;
		}
	}
}

void groups_destroy(struct daemon *d)
{
	if (!d->groups)
		return;
	for (unsigned i = 0; i < GPUS_MAX + 1; i++)
		group_free(d->groups->g[i]);
	free(d->groups);
	d->groups = NULL;
}
