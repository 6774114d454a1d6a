/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "config.h" /* GPUSYS_DEFAULT_CONFIG */
#include "core/accounts.h"
#include "core/service.h"
#include "daemon.h"
#include "quotas.h"
#include "reload.h"
#include "util/listen_addr.h"
#include "util/log.h"
#include "util/notify.h"

int daemon_read_config(struct gpusysd_config *cfg, const char *path, char *err, size_t errlen)
{
	config_defaults(cfg);
	if (services_add_settings(cfg) < 0) {
		snprintf(err, errlen, "two services claim one setting");
		return -EEXIST;
	}
	int r = config_load(cfg, path ? path : GPUSYS_DEFAULT_CONFIG, err, errlen);
	if (r < 0 && !(r == -ENOENT && !path))
		return r;
	if ((r = config_apply_env(cfg, err, errlen)) < 0)
		return r;
	return config_check(cfg, err, errlen);
}

/* Settings that only new clients read, on the main thread: safe to change
 * under running clients. gpusysd.conf(5)'s list of what a reload applies is
 * made from this macro (man/conf2man.py reads it): keep it one X(key) per
 * key. */
#define LIVE_KEYS(X)                                                                                   \
	X(max_clients_per_uid) X(max_ports) X(channel_bulk_bytes) X(client_mem_budget) X(max_pending_calls)   \
	X(user_mem_budget) X(user_channel_bytes) X(max_handles_per_uid) X(max_pending_calls_per_uid)              \
	X(restart_grace_ms) X(restart_drain_ms) X(max_pending_hellos) X(max_pending_hellos_per_uid)

/* A new metrics_listen that this host cannot listen on now (in use by
 * another program, no such address) is refused with FILE:LINE. Our own
 * port is in use by us, and free again at the restart: not tried. */
static int check_metrics_listen(const struct daemon *d, const struct gpusysd_config *n, char *err, size_t errlen)
{
	const char *spec = n->metrics_listen;
	char why[256], where[300];
	unsigned port = 0;

	if (!strcmp(spec, d->cfg.metrics_listen) || !*spec || !strcmp(spec, "none"))
		return 0;
	if (listen_addr_parse(spec, NULL, 0, &port, why, sizeof(why)) == 0 && d->metrics && port == d->metrics_port)
		return 0;
	int fd = listen_addr_open(spec, why, sizeof(why));
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	snprintf(err, errlen, "%s: metrics_listen = %s: %s", config_where(n, "metrics_listen", where, sizeof(where)),
		 spec, why);
	return fd;
}

int daemon_reload(struct daemon *d)
{
	struct gpusysd_config n;
	char err[512];
	const char *path = d->config_path ? d->config_path : GPUSYS_DEFAULT_CONFIG;

	notify_reloading();
	/* The same reading as start-up and --check-config... */
	int r = daemon_read_config(&n, d->config_path, err, sizeof(err));
	/* ...and what only binding tells, for a metrics address that takes
	 * effect at the next start: a check that passes now must not be
	 * followed by a restart that fails. */
	if (r == 0)
		r = check_metrics_listen(d, &n, err, sizeof(err));
	if (r < 0) {
		log_err("reload: %s: keeping the settings in use", err);
		notify_ready();
		return r;
	}
	if (!n.source[0])
		log_info("reload: %s: not found (defaults apply)", path);
	unsigned applied = 0;
#define APPLY(k)                                                                                   \
	if (n.k != d->cfg.k) {                                                                     \
		log_info("reload: %s %llu -> %llu", #k, (unsigned long long)d->cfg.k,             \
			 (unsigned long long)n.k);                                                 \
		d->cfg.k = n.k;                                                                    \
		applied++;                                                                         \
	}
	LIVE_KEYS(APPLY)
#undef APPLY
	/* Everything else is read once at start (threads, services, control
	 * limits): name what differs from the file read last (not from what
	 * runs: --pollers and --workers override it), so nobody believes it
	 * took effect. */
	unsigned later = 0;
	/* By the key's name in the file (admin_group, not the field). */
#define LATER_AS(key, differs)                                                                     \
	if (differs) {                                                                             \
		log_warn("reload: %s changed in %s: takes effect at the next start", key, path); \
		later++;                                                                           \
	}
#define LATER(k) LATER_AS(#k, n.k != d->cfg_read.k)
#define LATER_TEXT(k) LATER_AS(#k, strcmp(n.k, d->cfg_read.k))
	LATER(pollers) LATER(pollers_per_gpu) LATER(workers) LATER(workers_per_gpu) LATER(max_clients) LATER(idle_spin_us) LATER(idle_sleep_us) LATER(handshake_timeout_ms)
	LATER(call_timeout_ms) LATER(stats) LATER(control_conns_per_uid) LATER(control_idle_timeout_ms)
	LATER_AS("admin_group", n.admin_gid != d->cfg_read.admin_gid) LATER(gpu_watch)
	LATER_TEXT(cuda_memory) LATER_TEXT(poller_cpus) LATER_TEXT(metrics_listen) LATER_TEXT(emulated_gpus)
#undef LATER_TEXT
#undef LATER
#undef LATER_AS
	for (unsigned i = 0; i < n.nextra && i < d->cfg.nextra; i++)
		if (n.extra_value[i] != d->cfg_read.extra_value[i]) {
			log_warn("reload: %s changed in %s: takes effect at the next start", n.extra[i]->key, path);
			later++;
		}
	/* Compare the next reload with this file: a key changed back and
	 * forth is reported each time it differs from the file last read. */
	d->cfg_read = n;
	quotas_reload(&d->cfg, d->listener); /* user_mem_budget, max_handles_per_uid... */
	account_set_limit(ACCOUNT_CHANNEL, d->cfg.user_channel_bytes);
	log_info("reload: %s read: %u setting%s applied, %u at the next start", path, applied,
		 applied == 1 ? "" : "s", later);
	notify_ready();
	return 0;
}
