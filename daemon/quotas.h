/* SPDX-License-Identifier: MIT */
/*
 * The per-user limits as applied: the configuration's, fitted to the
 * descriptors gpusysd can have (issue 33). Open handles and connections
 * that have not finished their hello each hold a descriptor in the daemon;
 * if their bounds exceed RLIMIT_NOFILE, one user can take every descriptor
 * and nobody else can attach. So, from the limit the daemon got at start
 * (daemon.c raises the soft limit to the hard one):
 *
 *   own      descriptors open once the daemon is set up, plus room for the
 *            control connections and a margin: kept for gpusysd itself;
 *   budget   limit - own: what clients may make it hold;
 *   reserve  a quarter of the budget that users other than root and
 *            gpusysd's own uid never get: root's handles, new clients'
 *            channels and connections before their hello fit there.
 *
 * Settings left at 0 are derived: max_handles_per_uid a quarter of the
 * budget (at most 65536, the old default), max_pending_hellos an eighth (8
 * to 1024), max_pending_hellos_per_uid a quarter of that (2 to 64). A
 * setting above what fits keeps its meaning but is lowered to it, with a
 * warning: handles to budget - reserve, the hello total to the reserve, the
 * per-user hellos to the total. Users other than root together hold at most
 * budget - reserve handles whatever the settings.
 */
#ifndef GPUSYSD_QUOTAS_H
#define GPUSYSD_QUOTAS_H

#include <stddef.h>
#include <stdint.h>

#include "util/config_file.h"

struct listener;

struct fd_budget {
	uint64_t limit; /* RLIMIT_NOFILE (soft) */
	uint64_t own;   /* kept for the daemon itself */
};

struct quotas {
	uint64_t budget, reserve;
	uint64_t handles_per_uid;
	uint64_t others_handles;  /* all users but root and gpusysd's uid together */
	unsigned hellos_per_uid;
	unsigned hellos_total;    /* root and gpusysd's uid outside it */
};

/* The quotas cfg asks for within b; what had to be lowered is said in warn
 * ("" when nothing was). No side effects. */
void quotas_derive(const struct fd_budget *b, const struct gpusysd_config *cfg, struct quotas *q, char *warn,
		   size_t warnlen);

/* Once everything but clients is set up: measure the budget, apply the
 * quotas (accounts, listener l) and log the limit and what each user gets. */
void quotas_start(const struct gpusysd_config *cfg, struct listener *l);

/* SIGHUP: the same with cfg as reloaded, against the limit in force now
 * (an administrator may have changed it with prlimit). */
void quotas_reload(const struct gpusysd_config *cfg, struct listener *l);

#endif
