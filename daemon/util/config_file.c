/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "gpusys/abi.h"
#include "util/config_file.h"
#include "util/config_text.h"
#include "util/cpulist.h"

#define MAX_LINE 4096

#define VAL_COUNT CONFIG_COUNT
#define VAL_BYTES CONFIG_BYTES
#define VAL_GROUP CONFIG_GROUP
#define VAL_TEXT CONFIG_TEXT
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
	U(pollers_per_gpu, VAL_COUNT, 0, GPUSYS_PROGRESS_SLOTS - 3),
	U(workers_per_gpu, VAL_COUNT, 0, GPUSYS_PROGRESS_SLOTS - 3),
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
	U(max_clients_per_uid, VAL_COUNT, 1, 65536),
	U64(user_mem_budget, VAL_BYTES, 4096, UINT64_C(1) << 42),
	U64(user_channel_bytes, VAL_BYTES, 4096, UINT64_C(1) << 44),
	U(max_handles_per_uid, VAL_COUNT, 0, 1u << 24),
	U(max_pending_hellos, VAL_COUNT, 0, 65536),
	U(max_pending_hellos_per_uid, VAL_COUNT, 0, 65536),
	U(max_pending_calls_per_uid, VAL_COUNT, 1, 1u << 24),
	U(control_conns_per_uid, VAL_COUNT, 1, CONFIG_CONTROL_MAX_CONNS),
	U(control_idle_timeout_ms, VAL_COUNT, 100, 3600000),
	{ "admin_group", VAL_GROUP, offsetof(struct gpusysd_config, admin_gid), 1, 0, UINT32_MAX - 1 },
	{ "emulated_gpus", VAL_TEXT, offsetof(struct gpusysd_config, emulated_gpus), 0, 0,
	  sizeof(((struct gpusysd_config *)0)->emulated_gpus) - 1 },
	U(gpu_watch, VAL_COUNT, 0, 1),
	U(restart_grace_ms, VAL_COUNT, 0, 600000),
	U(restart_drain_ms, VAL_COUNT, 0, 600000),
	{ "cuda_memory", VAL_TEXT, offsetof(struct gpusysd_config, cuda_memory), 0, 0,
	  sizeof(((struct gpusysd_config *)0)->cuda_memory) - 1 },
	{ "metrics_listen", VAL_TEXT, offsetof(struct gpusysd_config, metrics_listen), 0, 0,
	  sizeof(((struct gpusysd_config *)0)->metrics_listen) - 1 },
	{ "poller_cpus", VAL_TEXT, offsetof(struct gpusysd_config, poller_cpus), 0, 0,
	  sizeof(((struct gpusysd_config *)0)->poller_cpus) - 1 },
};

#define NCORE (sizeof(core_keys) / sizeof(core_keys[0]))
_Static_assert(NCORE <= CONFIG_CORE_MAX, "raise CONFIG_CORE_MAX");

/* cfg->line's slot of set_key's index (core keys, then the added ones). */
static size_t line_slot(size_t index)
{
	return index < NCORE ? index : CONFIG_CORE_MAX + (index - NCORE);
}

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
		.max_clients_per_uid = 64,
		/* A user's clients together: four clients' worth each. */
		.user_mem_budget = UINT64_C(256) << 20,
		/* Channels are sized apart (max_ports, channel_bulk_bytes):
		 * 4 GiB is 14 of the largest, or 8 GPUs' clients with room. */
		.user_channel_bytes = UINT64_C(4) << 30,
		/* 0: derived from the descriptor limit gpusysd runs with
		 * (quotas.h), so that no user can take all of it. */
		.max_handles_per_uid = 0,
		.max_pending_hellos = 0,
		.max_pending_hellos_per_uid = 0,
		.max_pending_calls_per_uid = 4 * GPUSYS_MAX_PORTS,
		.control_conns_per_uid = 4,
		.control_idle_timeout_ms = 10000,
		.admin_gid = -1,
		.emulated_gpus = "none",
		.metrics_listen = "none",
		.gpu_watch = 1,
		.restart_grace_ms = 0,
		.restart_drain_ms = 1000,
		.cuda_memory = "memfd",
		.poller_cpus = "none",
	};
}

unsigned config_auto_pollers(unsigned ncpu)
{
	if (ncpu <= 2)
		return 1;
	/* Up to 8: the whole GPU's request rate grew from 4 pollers to 8
	 * (measured, see bench/RESULTS.md: "After the pollers share out the
	 * ports"). Busy pollers each spin on a core; idle ones sleep. */
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

/* A group by number or by name (the name is looked up once, at start). */
static int parse_group(const char *s, uint64_t *ret)
{
	if (isdigit((unsigned char)s[0]))
		return parse_number(s, VAL_COUNT, ret);
	struct group g, *res = NULL;
	char buf[4096];
	if (getgrnam_r(s, &g, buf, sizeof(buf), &res) != 0)
		return -EINVAL;
	if (!res)
		return -ENOENT;
	*ret = res->gr_gid;
	return 0;
}

/* config_set, and which key it set (for the duplicate check): core keys
 * 0..NCORE-1, then the added ones. */
static int set_key(struct gpusysd_config *cfg, const char *key, const char *value, size_t *ret_index, char *err,
		   size_t errlen)
{
	for (size_t i = 0; i < NCORE; i++) {
		const struct key_spec *k = &core_keys[i];
		uint64_t v;

		if (strcmp(k->key, key))
			continue;
		if (k->kind == VAL_TEXT) {
			if (strlen(value) > k->max) {
				snprintf(err, errlen, "value for %s is longer than %llu bytes", key,
					 (unsigned long long)k->max);
				return -EINVAL;
			}
			if (config_text_check(key, value, err, errlen) < 0)
				return -EINVAL;
			strcpy((char *)cfg + k->offset, value);
			*ret_index = i;
			return 0;
		}
		if (k->kind == VAL_GROUP) {
			int r = parse_group(value, &v);
			if (r < 0 || v > k->max) {
				snprintf(err, errlen, "bad value '%s' for %s (%s)", value, key,
					 r == -ENOENT ? "no such group" : "expected a group name or number");
				return -EINVAL;
			}
			*(int64_t *)((char *)cfg + k->offset) = (int64_t)v;
			*ret_index = i;
			return 0;
		}
		if (parse_number(value, k->kind, &v) < 0 || v < k->min || v > k->max) {
			bad_value(err, errlen, key, value, k->kind, k->min, k->max);
			return -EINVAL;
		}
		if (k->is_u64)
			*(uint64_t *)((char *)cfg + k->offset) = v;
		else
			*(unsigned *)((char *)cfg + k->offset) = (unsigned)v;
		*ret_index = i;
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
		*ret_index = NCORE + i;
		return 0;
	}
	snprintf(err, errlen, "unknown key '%s'", key);
	return -ENOENT;
}

int config_set(struct gpusysd_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	size_t i;
	return set_key(cfg, key, value, &i, err, errlen);
}

int config_add_keys(struct gpusysd_config *cfg, const struct config_key *keys)
{
	for (const struct config_key *k = keys; k && k->key; k++) {
		for (size_t i = 0; i < NCORE; i++)
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

static int apply_env_key(struct gpusysd_config *cfg, const char *key, size_t slot, char *err, size_t errlen)
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
	cfg->line[slot] = CONFIG_LINE_ENV;
	return 0;
}

int config_apply_env(struct gpusysd_config *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < NCORE; i++)
		if (apply_env_key(cfg, core_keys[i].key, line_slot(i), err, errlen) < 0)
			return -EINVAL;
	for (unsigned i = 0; i < cfg->nextra; i++)
		if (apply_env_key(cfg, cfg->extra[i]->key, line_slot(NCORE + i), err, errlen) < 0)
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

/* One line of f into buf (NUL-terminated, newline dropped), its length in
 * *ret_len: embedded NUL bytes count, so the caller can see them. 1: a
 * line; 0: end of file; -E2BIG: longer than cap - 1 (the rest of the file
 * is not read); -EIO: read error. */
static int read_line(FILE *f, char *buf, size_t cap, size_t *ret_len)
{
	size_t n = 0;
	int ch;

	while ((ch = getc(f)) != EOF && ch != '\n') {
		if (n == cap - 1)
			return -E2BIG;
		buf[n++] = (char)ch;
	}
	if (ferror(f))
		return -EIO;
	buf[n] = 0;
	*ret_len = n;
	return ch == EOF && n == 0 ? 0 : 1;
}

static unsigned line_of(const unsigned *first_line, const char *key)
{
	for (size_t i = 0; i < NCORE; i++)
		if (!strcmp(core_keys[i].key, key))
			return first_line[i];
	return 0;
}

/* config_check's pollers + workers bound, at the end of a file that set
 * either, so the error names the line of the later one (the one that made
 * the sum too big). pollers = 0 (auto) depends on the host and on
 * --pollers: config_check judges it at start. */
static int check_slots(const struct gpusysd_config *cfg, const char *name, const unsigned *first_line, char *err,
		       size_t errlen)
{
	unsigned lp = line_of(first_line, "pollers"), lw = line_of(first_line, "workers");
	if ((!lp && !lw) || !cfg->pollers || cfg->pollers + cfg->workers <= GPUSYS_PROGRESS_SLOTS - 1)
		return 0;
	char p[32] = "default", w[32] = "default";
	if (lp)
		snprintf(p, sizeof(p), "line %u", lp);
	if (lw)
		snprintf(w, sizeof(w), "line %u", lw);
	snprintf(err, errlen,
		 "%s:%u: pollers (%u, %s) + workers (%u, %s) exceed the %u progress slots (one more is for calls that complete later)",
		 name, lp > lw ? lp : lw, cfg->pollers, p, cfg->workers, w, GPUSYS_PROGRESS_SLOTS - 1);
	return -EINVAL;
}

int config_parse(struct gpusysd_config *cfg, const char *name, FILE *f, char *err, size_t errlen)
{
	static const char bom[] = "\xef\xbb\xbf";
	char buf[MAX_LINE];
	char why[256];
	unsigned line = 0;
	unsigned first_line[NCORE + CONFIG_EXTRA_MAX] = { 0 }; /* where each key was set; 0: not yet */
	size_t n;
	int r;

	memset(cfg->line, 0, sizeof(cfg->line)); /* a new file: its own lines */
	while ((r = read_line(f, buf, sizeof(buf), &n)) > 0) {
		line++;
		char *s = buf;
		/* A UTF-8 byte order mark (some editors write one) is no key. */
		if (line == 1 && !strncmp(s, bom, 3)) {
			s += 3;
			n -= 3;
		}
		if (memchr(s, 0, n)) {
			snprintf(err, errlen, "%s:%u: NUL byte at column %zu (not a text file?)", name, line,
				 (size_t)((char *)memchr(s, 0, n) - buf) + 1);
			return -EINVAL;
		}
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)s[i];
			if (ch < 0x20 && ch != '\t' && ch != '\r') {
				snprintf(err, errlen, "%s:%u: control character 0x%02x at column %zu", name,
					 line, ch, (size_t)(s + i - buf) + 1);
				return -EINVAL;
			}
		}
		char *hash = strchr(s, '#');
		if (hash)
			*hash = 0;
		s = trim(s);
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
		size_t k;
		if (set_key(cfg, key, value, &k, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s:%u: %s", name, line, why);
			return -EINVAL;
		}
		/* Two values for one key: which one was meant is a guess. */
		if (first_line[k]) {
			snprintf(err, errlen, "%s:%u: duplicate key '%s' (first set on line %u)", name, line, key,
				 first_line[k]);
			return -EINVAL;
		}
		first_line[k] = line;
		cfg->line[line_slot(k)] = line;
	}
	if (r == 0 && check_slots(cfg, name, first_line, err, errlen) < 0)
		return -EINVAL;
	if (r == -E2BIG) {
		snprintf(err, errlen, "%s:%u: line too long", name, line + 1);
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(err, errlen, "%s: read error", name);
		return -EIO;
	}
	return 0;
}

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int config_load(struct gpusysd_config *cfg, const char *path, char *err, size_t errlen)
{
	/* O_NONBLOCK: opening a FIFO without a writer would wait forever;
	 * the type check below refuses it (and /dev/zero, which never ends)
	 * before anything is read. /dev/null, the usual "no settings", is
	 * empty and allowed. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	bool dev_null = S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
	if (!S_ISREG(st.st_mode) && !dev_null) {
		snprintf(err, errlen, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
		close(fd);
		return -EINVAL;
	}
	FILE *f = fdopen(fd, "r");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		close(fd);
		return -e;
	}
	snprintf(cfg->source, sizeof(cfg->source), "%s", path);
	int r = config_parse(cfg, path, f, err, errlen);
	fclose(f);
	return r;
}

const char *config_where(const struct gpusysd_config *cfg, const char *key, char *buf, size_t len)
{
	unsigned line = 0;
	for (size_t i = 0; i < NCORE; i++)
		if (!strcmp(core_keys[i].key, key))
			line = cfg->line[line_slot(i)];
	for (unsigned i = 0; i < cfg->nextra; i++)
		if (!strcmp(cfg->extra[i]->key, key))
			line = cfg->line[line_slot(NCORE + i)];
	if (line == CONFIG_LINE_ENV) {
		int n = snprintf(buf, len, "GPUSYSD_%s", key);
		for (int i = 8; i < n && (size_t)i + 1 < len; i++)
			buf[i] = (char)toupper((unsigned char)buf[i]);
	} else if (line) {
		snprintf(buf, len, "%s:%u", cfg->source[0] ? cfg->source : "line", line);
	} else {
		snprintf(buf, len, "default");
	}
	return buf;
}

/* How many GPUs emulated_gpus names (the list itself is checked where it
 * is set): entries between commas, 0 for none. */
static unsigned emulated_count(const char *list)
{
	if (!strcmp(list, "none") || !list[0])
		return 0;
	unsigned n = 1;
	for (const char *c = list; *c; c++)
		n += *c == ',';
	return n;
}

int config_check(const struct gpusysd_config *cfg, char *err, size_t errlen)
{
	/* Every thread that completes requests owns one progress word. */
	if (cfg->pollers + cfg->workers > GPUSYS_PROGRESS_SLOTS - 1) {
		snprintf(err, errlen, "pollers (%u) + workers (%u) exceed the %u progress slots (one more is for calls that complete later)",
			 cfg->pollers, cfg->workers, GPUSYS_PROGRESS_SLOTS - 1);
		return -EINVAL;
	}
	/* Each GPU's pollers and workers have slots of their own too
	 * (poller_groups.h). The GPUs known here are the emulated ones; a
	 * host's real GPUs are counted when the driver shows them, and a GPU
	 * whose group does not fit then has none (its clients are refused,
	 * saying why). Automatic counts shrink to fit, to 1 each at least:
	 * only counts asked for can be judged here. */
	unsigned ngpus = emulated_count(cfg->emulated_gpus);
	unsigned ppg = cfg->pollers_per_gpu ? cfg->pollers_per_gpu : 1;
	unsigned wpg = cfg->workers_per_gpu ? cfg->workers_per_gpu : 1;
	if ((cfg->pollers_per_gpu || cfg->workers_per_gpu) &&
	    cfg->pollers + cfg->workers + (ppg + wpg) * (ngpus ? ngpus : 1) > GPUSYS_PROGRESS_SLOTS - 1) {
		char p[32] = "automatic, at least 1", w[32] = "automatic, at least 1";
		if (cfg->pollers_per_gpu)
			snprintf(p, sizeof(p), "%u", ppg);
		if (cfg->workers_per_gpu)
			snprintf(w, sizeof(w), "%u", wpg);
		snprintf(err, errlen,
			 "pollers (%u) + workers (%u) + %u GPU%s x (pollers_per_gpu = %s + workers_per_gpu = %s) "
			 "exceed the %u progress slots (one more is for calls that complete later)",
			 cfg->pollers, cfg->workers, ngpus ? ngpus : 1, ngpus > 1 ? "s" : "", p, w,
			 GPUSYS_PROGRESS_SLOTS - 1);
		return -EINVAL;
	}
	if (strcmp(cfg->cuda_memory, "memfd") && strcmp(cfg->cuda_memory, "vmm")) {
		snprintf(err, errlen, "cuda_memory = %s: expected memfd or vmm", cfg->cuda_memory);
		return -EINVAL;
	}
	cpu_set_t cpus;
	if (strcmp(cfg->poller_cpus, "none") &&
	    (cpulist_parse(cfg->poller_cpus, &cpus) < 0 || CPU_COUNT(&cpus) == 0)) {
		snprintf(err, errlen, "poller_cpus = %s: expected a CPU list (0-7,16) or none", cfg->poller_cpus);
		return -EINVAL;
	}
	return 0;
}
