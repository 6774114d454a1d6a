/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gpusys/abi.h"
#include "util/config_file.h"

#define MAX_LINE 4096

enum value_kind {
	VAL_COUNT, /* plain integer */
	VAL_BYTES, /* integer with optional K/M/G (binary) suffix */
};

/* One entry per key: where it lives and what it accepts. */
struct key_spec {
	const char *key;
	enum value_kind kind;
	size_t offset;
	int is_u64;
	uint64_t min, max;
};

#define U(field, kind, lo, hi) { #field, kind, offsetof(struct gpusysd_config, field), 0, lo, hi }
#define U64(field, kind, lo, hi) { #field, kind, offsetof(struct gpusysd_config, field), 1, lo, hi }

static const struct key_spec keys[] = {
	U(pollers, VAL_COUNT, 0, GPUSYS_PROGRESS_SLOTS - 1),
	U(workers, VAL_COUNT, 1, GPUSYS_PROGRESS_SLOTS - 1),
	U(max_clients, VAL_COUNT, 1, 65536),
	U(max_ports, VAL_COUNT, GPUSYS_MIN_PORTS, GPUSYS_MAX_PORTS),
	U64(channel_bulk_bytes, VAL_BYTES, 0, UINT64_C(1) << 34),
	U64(client_mem_budget, VAL_BYTES, 4096, UINT64_C(1) << 40),
	U(idle_spin_us, VAL_COUNT, 0, 1000000),
	U(idle_sleep_us, VAL_COUNT, 1, 100000),
	U(handshake_timeout_ms, VAL_COUNT, 10, 600000),
};

void config_defaults(struct gpusysd_config *cfg)
{
	*cfg = (struct gpusysd_config){
		.pollers = 0,
		.workers = 4,
		.max_clients = 256,
		.max_ports = GPUSYS_MAX_PORTS,
		.channel_bulk_bytes = UINT64_C(256) << 20,
		.client_mem_budget = UINT64_C(64) << 20,
		.idle_spin_us = 200,
		.idle_sleep_us = 50,
		.handshake_timeout_ms = 5000,
	};
}

unsigned config_auto_pollers(unsigned ncpu)
{
	if (ncpu <= 2)
		return 1;
	/* Up to 8: measured on the H100 (bench/RESULTS.md) the whole GPU
	 * reached 11.9 M warp requests/s with 4 pollers and 18.1 M with 8.
	 * Busy pollers each spin on a core; idle ones sleep. */
	return ncpu / 2 < 8 ? ncpu / 2 : 8;
}

static int parse_number(const char *s, enum value_kind kind, uint64_t *ret)
{
	char *end;
	uint64_t shift = 0;

	/* strtoull accepts "-1" and leading spaces; neither is a count. */
	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (kind == VAL_BYTES && *end) {
		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; break;
		case 'M': shift = 20; break;
		case 'G': shift = 30; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i' && end[1] == 'B')
			end += 2;
		else if (*end == 'B')
			end++;
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*ret = (uint64_t)v << shift;
	return 0;
}

int config_set(struct gpusysd_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct key_spec *k = &keys[i];
		uint64_t v;

		if (strcmp(k->key, key))
			continue;
		if (parse_number(value, k->kind, &v) < 0 || v < k->min || v > k->max) {
			snprintf(err, errlen, "bad value '%s' for %s (expected %s %" PRIu64 "..%" PRIu64 ")", value,
				 key, k->kind == VAL_BYTES ? "a size in bytes, K/M/G suffix allowed," : "an integer",
				 k->min, k->max);
			return -EINVAL;
		}
		if (k->is_u64)
			*(uint64_t *)((char *)cfg + k->offset) = v;
		else
			*(unsigned *)((char *)cfg + k->offset) = (unsigned)v;
		return 0;
	}
	snprintf(err, errlen, "unknown key '%s'", key);
	return -ENOENT;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

int config_parse(struct gpusysd_config *cfg, const char *name, FILE *f, char *err, size_t errlen)
{
	char buf[MAX_LINE];
	char why[256];
	unsigned line = 0;

	while (fgets(buf, sizeof(buf), f)) {
		line++;
		size_t n = strlen(buf);
		if (n == sizeof(buf) - 1 && buf[n - 1] != '\n' && !feof(f)) {
			snprintf(err, errlen, "%s:%u: line too long", name, line);
			return -EINVAL;
		}
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = 0;
		char *s = trim(buf);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%u: expected 'key = value', got '%s'", name, line, s);
			return -EINVAL;
		}
		*eq = 0;
		char *key = trim(s), *value = trim(eq + 1);
		if (!*key || !*value) {
			snprintf(err, errlen, "%s:%u: expected 'key = value'", name, line);
			return -EINVAL;
		}
		if (config_set(cfg, key, value, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s:%u: %s", name, line, why);
			return -EINVAL;
		}
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", name);
		return -EIO;
	}
	return 0;
}

int config_load(struct gpusysd_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	int r = config_parse(cfg, path, f, err, errlen);
	fclose(f);
	return r;
}

int config_check(const struct gpusysd_config *cfg, char *err, size_t errlen)
{
	/* Every thread that completes requests owns one progress word. */
	if (cfg->pollers + cfg->workers > GPUSYS_PROGRESS_SLOTS) {
		snprintf(err, errlen, "pollers (%u) + workers (%u) exceed the %u progress slots", cfg->pollers,
			 cfg->workers, GPUSYS_PROGRESS_SLOTS);
		return -EINVAL;
	}
	return 0;
}
