/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "config.h" /* GPUSYS_DEFAULT_CONFIG */
#include "core/accounts.h"
#include "core/service.h"
#include "daemon.h"
#include "quotas.h"
#include "reload.h"
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
 * under running clients. */
#define LIVE_KEYS(X)                                                                                   \
	X(max_clients_per_uid) X(max_ports) X(channel_bulk_bytes) X(client_mem_budget) X(max_pending_calls)   \
	X(user_mem_budget) X(user_channel_bytes) X(max_handles_per_uid) X(max_pending_calls_per_uid)              \
	X(restart_grace_ms) X(restart_drain_ms) X(max_pending_hellos) X(max_pending_hellos_per_uid)

int daemon_reload(struct daemon *d)
{
	struct gpusysd_config n;
	char err[512];
	const char *path = d->config_path ? d->config_path : GPUSYS_DEFAULT_CONFIG;

	notify_reloading();
	int r = daemon_read_config(&n, d->config_path, err, sizeof(err));
	if (r < 0) {
		log_err("reload: %s: keeping the settings in use", err);
		notify_ready();
		return r;
	}
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
#define LATER(k)                                                                                   \
	if (n.k != d->cfg_read.k) {                                                                \
		log_warn("reload: %s changed in %s: takes effect at the next start", #k, path);  \
		later++;                                                                           \
	}
	LATER(pollers) LATER(workers) LATER(max_clients) LATER(idle_spin_us) LATER(idle_sleep_us) LATER(handshake_timeout_ms)
	LATER(call_timeout_ms) LATER(stats) LATER(control_conns_per_uid) LATER(control_idle_timeout_ms)
	LATER(admin_gid) LATER(gpu_watch)
#undef LATER
	if (strcmp(n.cuda_memory, d->cfg_read.cuda_memory)) {
		log_warn("reload: cuda_memory changed in %s: takes effect at the next start", path);
		later++;
	}
	if (strcmp(n.poller_cpus, d->cfg_read.poller_cpus)) {
		log_warn("reload: poller_cpus changed in %s: takes effect at the next start", path);
		later++;
	}
	if (strcmp(n.metrics_listen, d->cfg_read.metrics_listen)) {
		log_warn("reload: metrics_listen changed in %s: takes effect at the next start", path);
		later++;
	}
	if (strcmp(n.emulated_gpus, d->cfg_read.emulated_gpus)) {
		log_warn("reload: emulated_gpus changed in %s: takes effect at the next start", path);
		later++;
	}
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
