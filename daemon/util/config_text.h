/* SPDX-License-Identifier: MIT */
/* The text-valued settings (metrics_listen, poller_cpus, emulated_gpus,
 * cuda_memory) checked when they are read, so that a bad one is refused
 * with its FILE:LINE (and by gpusysd --check-config), not later at start. */
#ifndef GPUSYSD_CONFIG_TEXT_H
#define GPUSYSD_CONFIG_TEXT_H

#include <stddef.h>

/* 0 if key's value is one the daemon can use (or key is none of these),
 * else -EINVAL with why in err (naming the key, not where it was set). */
int config_text_check(const char *key, const char *value, char *err, size_t errlen);

#endif
