/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <string.h>

#include "core/gpus.h"
#include "core/poller.h"
#include "core/pool.h"
#include "daemon.h"
#include "numa_spread.h"
#include "util/cpulist.h"
#include "util/log.h"

unsigned numa_spread_nodes(int *nodes, unsigned max)
{
	unsigned n = 0;
	for (unsigned i = 0, count = gpus_count(); i < count; i++) {
		const struct gpu *g = gpus_at(i);
		bool seen = false;
		if (g->ordinal < 0 || g->numa_node < 0)
			continue;
		for (unsigned j = 0; j < n; j++)
			seen |= nodes[j] == g->numa_node;
		if (!seen && n < max)
			nodes[n++] = g->numa_node;
	}
	return n;
}

void pollers_pin(struct daemon *d)
{
	cpu_set_t all;
	if (!strcmp(d->cfg.poller_cpus, "none") || cpulist_parse(d->cfg.poller_cpus, &all) < 0 || !CPU_COUNT(&all))
		return;
	int list[CPU_SETSIZE], n = 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all))
			list[n++] = c;
	unsigned np = pollers_count(d->pollers), failed = 0;
	for (unsigned i = 0; i < np; i++) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(list[i % (unsigned)n], &one);
		failed += pollers_set_affinity(d->pollers, i, &one) < 0;
	}
	log_info("poller_cpus = %s: %u pollers pinned, one CPU each%s", d->cfg.poller_cpus, np,
		 failed ? " (some could not be: see sched_setaffinity)" : "");
}

void numa_spread(struct daemon *d)
{
	static bool done;
	int nodes[GPUS_MAX];
	cpu_set_t cpus[GPUS_MAX];

	if (done)
		return;
	done = true;
	if (strcmp(d->cfg.poller_cpus, "none"))
		return; /* placed by poller_cpus (pollers_pin): the administrator's choice */
	unsigned k = numa_spread_nodes(nodes, GPUS_MAX);
	if (k < 2)
		return; /* one node (or none known): nothing to choose */
	for (unsigned j = 0; j < k; j++)
		if (cpulist_of_node(nodes[j], &cpus[j]) < 0) {
			log_warn("numa: cannot read node %d's CPUs: threads stay unpinned", nodes[j]);
			return;
		}
	unsigned np = pollers_count(d->pollers), nw = pool_workers(d->pool), failed = 0;
	for (unsigned i = 0; i < np; i++)
		failed += pollers_set_affinity(d->pollers, i, &cpus[i % k]) < 0;
	for (unsigned i = 0; i < nw; i++)
		failed += pool_set_affinity(d->pool, i, &cpus[i % k]) < 0;
	log_info("numa: GPUs on %u nodes: %u pollers and %u workers spread over them%s", k, np, nw,
		 failed ? " (some could not be pinned)" : "");
}
