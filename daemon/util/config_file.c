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

#define VAL_COUNT CONFIG_COUNT
#define VAL_BYTES CONFIG_BYTES
typedef enum config_kind value_kind_t;

/* One entry per key: where it lives and what it accepts. */
struct key_spec {
	const char *key;
	value_kind_t kind;
	size_t offset;
	int is_u64;
	uint64_t min, max;
};

#define U(field, kind, lo, hi) { #field, kind, offsetof(struct gpusysd_config, field), 0, lo, hi }
#define U64(field, kind, lo, hi) { #field, kind, offsetof(struct gpusysd_config, field), 1, lo, hi }

static const struct key_spec core_keys[] = {
	U(pollers, VAL_COUNT, 0, GPUSYS_PROGRESS_SLOTS - 1),
	U(workers, VAL_COUNT, 1, GPUSYS_PROGRESS_SLOTS - 1),
	U(max_clients, VAL_COUNT, 1, 65536),
	U(max_ports, VAL_COUNT, GPUSYS_MIN_PORTS, GPUSYS_MAX_PORTS),
	U64(channel_bulk_bytes, VAL_BYTES, 0, UINT64_C(1) << 34),
	U64(client_mem_budget, VAL_BYTES, 4096, UINT64_C(1) << 40),
	U(idle_spin_us, VAL_COUNT, 0, 1000000),
	U(idle_sleep_us, VAL_COUNT, 1, 100000),
	U(handshake_timeout_ms, VAL_COUNT, 10, 600000),
	U(max_pending_calls, VAL_COUNT, 1, 1u << 20),
	U(call_timeout_ms, VAL_COUNT, 1, 86400000),
	U(stats, VAL_COUNT, 0, 1),
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
		/* One per port of the largest channel: a kernel can have every
		 * port waiting on an accept or a recv. */
		.max_pending_calls = GPUSYS_MAX_PORTS,
		.call_timeout_ms = 3600 * 1000,
		.stats = 1,
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

static int parse_number(const char *s, value_kind_t kind, uint64_t *ret)
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

static void bad_value(char *err, size_t errlen, const char *key, const char *value, value_kind_t kind,
		      uint64_t min, uint64_t max)
{
	snprintf(err, errlen, "bad value '%s' for %s (expected %s %" PRIu64 "..%" PRIu64 ")", value, key,
		 kind == VAL_BYTES ? "a size in bytes, K/M/G suffix allowed," : "an integer", min, max);
}

int config_set(struct gpusysd_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(core_keys) / sizeof(core_keys[0]); i++) {
		const struct key_spec *k = &core_keys[i];
		uint64_t v;

		if (strcmp(k->key, key))
			continue;
		if (parse_number(value, k->kind, &v) < 0 || v < k->min || v > k->max) {
			bad_value(err, errlen, key, value, k->kind, k->min, k->max);
			return -EINVAL;
		}
		if (k->is_u64)
			*(uint64_t *)((char *)cfg + k->offset) = v;
		else
			*(unsigned *)((char *)cfg + k->offset) = (unsigned)v;
		return 0;
	}
	for (unsigned i = 0; i < cfg->nextra; i++) {
		const struct config_key *k = cfg->extra[i];
		uint64_t v;

		if (strcmp(k->key, key))
			continue;
		if (parse_number(value, k->kind, &v) < 0 || v < k->min || v > k->max) {
			bad_value(err, errlen, key, value, k->kind, k->min, k->max);
			return -EINVAL;
		}
		cfg->extra_value[i] = v;
		return 0;
	}
	snprintf(err, errlen, "unknown key '%s'", key);
	return -ENOENT;
}

int config_add_keys(struct gpusysd_config *cfg, const struct config_key *keys)
{
	for (const struct config_key *k = keys; k && k->key; k++) {
		for (size_t i = 0; i < sizeof(core_keys) / sizeof(core_keys[0]); i++)
			if (!strcmp(core_keys[i].key, k->key))
				return -EEXIST;
		for (unsigned i = 0; i < cfg->nextra; i++)
			if (!strcmp(cfg->extra[i]->key, k->key))
				return -EEXIST;
		if (cfg->nextra == CONFIG_EXTRA_MAX)
			return -ENOSPC;
		cfg->extra[cfg->nextra] = k;
		cfg->extra_value[cfg->nextra++] = k->def;
	}
	return 0;
}

uint64_t config_value(const struct gpusysd_config *cfg, const char *key)
{
	for (unsigned i = 0; i < cfg->nextra; i++)
		if (!strcmp(cfg->extra[i]->key, key))
			return cfg->extra_value[i];
	return 0;
}

static int apply_env_key(struct gpusysd_config *cfg, const char *key, char *err, size_t errlen)
{
	char name[96], why[256];
	int n = snprintf(name, sizeof(name), "GPUSYSD_%s", key);
	if (n < 0 || (size_t)n >= sizeof(name))
		return 0;
	for (char *c = name; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	const char *v = getenv(name);
	if (!v)
		return 0;
	if (config_set(cfg, key, v, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s: %s", name, why);
		return -EINVAL;
	}
	return 0;
}

int config_apply_env(struct gpusysd_config *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(core_keys) / sizeof(core_keys[0]); i++)
		if (apply_env_key(cfg, core_keys[i].key, err, errlen) < 0)
			return -EINVAL;
	for (unsigned i = 0; i < cfg->nextra; i++)
		if (apply_env_key(cfg, cfg->extra[i]->key, err, errlen) < 0)
			return -EINVAL;
	return 0;
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
	if (cfg->pollers + cfg->workers > GPUSYS_PROGRESS_SLOTS - 1) {
		snprintf(err, errlen, "pollers (%u) + workers (%u) exceed the %u progress slots (one more is for calls that complete later)",
			 cfg->pollers, cfg->workers, GPUSYS_PROGRESS_SLOTS - 1);
		return -EINVAL;
	}
	return 0;
}
