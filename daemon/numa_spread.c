/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <string.h>

#include "core/gpus.h"
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

void numa_spread(struct daemon *d)
{
	static bool done;
	int nodes[GPUS_MAX];
	cpu_set_t cpus[GPUS_MAX];

	if (done)
		return;
	done = true;
	unsigned k = numa_spread_nodes(nodes, GPUS_MAX);
	if (k < 2)
		return; /* one node (or none known): nothing to choose */
	for (unsigned j = 0; j < k; j++)
		if (cpulist_of_node(nodes[j], &cpus[j]) < 0) {
			log_warn("numa: cannot read node %d's CPUs: threads stay unpinned", nodes[j]);
			return;
		}
	unsigned nw = pool_workers(d->pool), failed = 0;
	for (unsigned i = 0; i < nw; i++)
		failed += pool_set_affinity(d->pool, i, &cpus[i % k]) < 0;
	log_info("numa: GPUs on %u nodes: %u workers spread over them%s", k, nw,
		 failed ? " (some could not be pinned)" : "");
}
