/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "core/accounts.h"
#include "core/listener.h"
#include "quotas.h"
#include "util/log.h"

/* Besides what is open at start: services open some descriptors only
 * when first used (name lookups, metrics connections, log files). */
#define OWN_MARGIN 64
/* What an attached client holds: its socket, channel memory, wake pipe and
 * up to three passed descriptors (stdout, stderr, working directory). */
#define CLIENT_FDS 6
#define DEFAULT_HANDLES_MAX 65536

static struct fd_budget started; /* own measured at start */

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Descriptors open in this process now; 64 if /proc cannot tell. */
static uint64_t open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	uint64_t n = 0;

	if (!d)
		return 64;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n ? n - 1 : 0; /* the directory's own */
}

static uint64_t fd_limit(void)
{
	struct rlimit rl;
	return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 1024;
}

/* An explicit value above what fits is lowered to it, and said. */
static uint64_t fit(const char *key, uint64_t set, uint64_t derived, uint64_t most, char *warn, size_t warnlen)
{
	if (!set)
		return derived;
	if (set <= most)
		return set;
	size_t used = strlen(warn);
	snprintf(warn + used, warnlen - used, "%s%s = %llu lowered to %llu", used ? "; " : "", key,
		 (unsigned long long)set, (unsigned long long)most);
	return most;
}

void quotas_derive(const struct fd_budget *b, const struct gpusysd_config *cfg, struct quotas *q, char *warn,
		   size_t warnlen)
{
	warn[0] = 0;
	q->budget = b->limit > b->own ? b->limit - b->own : 0;
	q->reserve = q->budget / 4;
	q->others_handles = q->budget - q->reserve;
	/* Every bound at least 1: a limit that leaves nothing refuses
	 * everything rather than nothing. */
	uint64_t most = q->others_handles ? q->others_handles : 1;
	q->handles_per_uid = fit("max_handles_per_uid", cfg->max_handles_per_uid,
				 clamp(q->budget / 4, 1, DEFAULT_HANDLES_MAX), most, warn, warnlen);
	most = q->reserve ? q->reserve : 1;
	q->hellos_total = (unsigned)fit("max_pending_hellos", cfg->max_pending_hellos,
					min64(clamp(q->budget / 8, 8, 1024), most), most, warn, warnlen);
	q->hellos_per_uid = (unsigned)fit("max_pending_hellos_per_uid", cfg->max_pending_hellos_per_uid,
					  min64(clamp(q->hellos_total / 4, 2, 64), q->hellos_total),
					  q->hellos_total, warn, warnlen);
}

static void apply(const struct fd_budget *b, const struct gpusysd_config *cfg, struct listener *l, bool start)
{
	struct quotas q;
	char warn[512];

	quotas_derive(b, cfg, &q, warn, sizeof(warn));
	accounts_set_limits(cfg->user_mem_budget, q.handles_per_uid, cfg->max_pending_calls_per_uid);
	accounts_set_others_limit(ACCOUNT_HANDLES, q.others_handles);
	if (l)
		listener_set_hello_limits(l, q.hellos_per_uid, q.hellos_total);
	if (warn[0])
		log_warn("%s: they would not fit the descriptor limit of %llu (RLIMIT_NOFILE)", warn,
			 (unsigned long long)b->limit);
	log_info("%sdescriptor limit %llu: %llu kept for gpusysd, %llu for clients; per user %llu handles "
		 "(max_handles_per_uid), %u connections before their hello (max_pending_hellos_per_uid); all users "
		 "but root together %llu handles, %u connections before their hello (max_pending_hellos)",
		 start ? "" : "reload: ", (unsigned long long)b->limit, (unsigned long long)b->own,
		 (unsigned long long)q.budget, (unsigned long long)q.handles_per_uid, q.hellos_per_uid,
		 (unsigned long long)q.others_handles, q.hellos_total);
	if ((uint64_t)cfg->max_clients * CLIENT_FDS > q.budget)
		log_warn("max_clients = %u attached clients may hold up to %llu descriptors, more than the %llu left "
			 "for clients: raise gpusysd's RLIMIT_NOFILE (LimitNOFILE=) or lower max_clients",
			 cfg->max_clients, (unsigned long long)cfg->max_clients * CLIENT_FDS,
			 (unsigned long long)q.budget);
}

void quotas_start(const struct gpusysd_config *cfg, struct listener *l)
{
	started.limit = fd_limit();
	started.own = open_fds() + CONFIG_CONTROL_MAX_CONNS + OWN_MARGIN;
	apply(&started, cfg, l, true);
}

void quotas_reload(const struct gpusysd_config *cfg, struct listener *l)
{
	struct fd_budget now = { .limit = fd_limit(), .own = started.own };
	apply(&now, cfg, l, false);
}
