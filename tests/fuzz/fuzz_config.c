/* SPDX-License-Identifier: MIT */
/* The configuration parser (daemon/util/config_file.c) on any bytes: it
 * must return 0 or a located error, never crash, and on error say where. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "util/config_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpusysd_config cfg;
	char err[512];

	if (size == 0 || size > 65536)
		return 0;
	FILE *f = fmemopen((void *)data, size, "r");
	if (!f)
		return 0;
	config_defaults(&cfg);
	err[0] = 0;
	int r = config_parse(&cfg, "fuzz.conf", f, err, sizeof(err));
	fclose(f);
	/* Every refusal names the file (and, for lines, the line). */
	if (r < 0 && strncmp(err, "fuzz.conf", 9) != 0)
		abort();
	if (r == 0) {
		char why[256];
		/* What parsed is within every key's limits... */
		if (cfg.workers < 1 || cfg.max_clients < 1 || cfg.control_conns_per_uid < 1 ||
		    cfg.control_idle_timeout_ms < 100)
			abort();
		/* ...and the cross-key check never crashes on it. */
		config_check(&cfg, why, sizeof(why));
	}
	return 0;
}
