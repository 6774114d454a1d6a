/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "core/gpus.h"
#include "util/config_text.h"
#include "util/cpulist.h"
#include "util/listen_addr.h"

int config_text_check(const char *key, const char *value, char *err, size_t errlen)
{
	char why[224];

	if (!strcmp(key, "metrics_listen")) {
		/* "" is "none" to metrics_start (GPUSYSD_METRICS_LISTEN=). */
		if (!*value || !strcmp(value, "none"))
			return 0;
		if (listen_addr_parse(value, NULL, 0, NULL, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "metrics_listen = %s", why);
			return -EINVAL;
		}
	} else if (!strcmp(key, "poller_cpus")) {
		cpu_set_t cpus;
		if (strcmp(value, "none") && (cpulist_parse(value, &cpus) < 0 || CPU_COUNT(&cpus) == 0)) {
			snprintf(err, errlen, "poller_cpus = %s: expected a CPU list (0-7,16) or none", value);
			return -EINVAL;
		}
	} else if (!strcmp(key, "emulated_gpus")) {
		/* Its messages start "emulated_gpus: ". */
		return gpus_check_emulated(value, err, errlen) < 0 ? -EINVAL : 0;
	} else if (!strcmp(key, "cuda_memory")) {
		if (strcmp(value, "memfd") && strcmp(value, "vmm")) {
			snprintf(err, errlen, "cuda_memory = %s: expected memfd or vmm", value);
			return -EINVAL;
		}
	}
	return 0;
}
