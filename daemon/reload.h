/* SPDX-License-Identifier: MIT */
/*
 * The configuration as the daemon reads it (defaults, the services' keys, the
 * file, then GPUSYSD_<KEY> from the environment, then the checks that span
 * keys), at start, for --check-config, and again on SIGHUP.
 */
#ifndef GPUSYSD_RELOAD_H
#define GPUSYSD_RELOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "util/config_file.h"

struct daemon;

/* Read everything into cfg, and check it: start-up, --check-config and
 * SIGHUP all call this. path NULL: the default file, if present (cfg->source
 * stays "" when it is not); a named file must exist. 0, or -errno with
 * "FILE:LINE: why" (or the key) in err. */
int daemon_read_config(struct gpusysd_config *cfg, const char *path, char *err, size_t errlen);

/* SIGHUP: read the file again, as --check-config does, and refuse a new
 * metrics_listen that cannot be bound now. An invalid file changes nothing
 * (said in the log with FILE:LINE, the daemon goes on with the settings in
 * use); a valid one applies at once the settings of reload.c's LIVE_KEYS
 * (what new clients and the quotas read) and names every other changed key
 * as taking effect at the next start. A missing default file means the
 * defaults, as at start; a missing --config file is invalid. Returns 0 when
 * the file was valid. Main thread. */
int daemon_reload(struct daemon *d);

#endif
