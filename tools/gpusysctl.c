/* SPDX-License-Identifier: MIT */
/* gpusysctl: ask a running gpusysd about itself over its control socket. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "config.h" /* GPUSYS_VERSION */
#include "common/wire.h"

#define REPLY_TIMEOUT_MS 5000
#define MAX_REPLY (16u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpusysctl [OPTION]... COMMAND [OPTION]...\n"
		"\n"
		"Commands:\n"
		"  status            the daemon, its GPUs and its attached clients\n"
		"  clients           one line per client: pid, uid, GPU, ports, warp requests, errors,\n"
		"                    command line\n"
		"  ports             ports busy now: client, opcode, phase, how long\n"
		"  transfers         long transfers in progress: each handle whose block calls moved\n"
		"                    bytes in the last 2 s, with bytes so far, time and rate\n"
		"  latency [--histogram]\n"
		"                    per opcode: requests, errors, latency percentiles (from a poller\n"
		"                    finding the request to its answer), with a text histogram;\n"
		"                    others than root, gpusysd's user and admin_group: counts of\n"
		"                    their own attached clients only\n"
		"  pollers           per poller since start: passes, ports scanned, requests found and\n"
		"                    served, collisions, parks and dozes; scan and serve time (sampled);\n"
		"                    root, gpusysd's user and admin_group only\n"
		"  watch [--interval MS] [--count N]\n"
		"                    status and per-opcode rates, redrawn every MS (1000) until ^C;\n"
		"                    with --json one JSON object per refresh, one a line (NDJSON)\n"
		"  gpu-fail UUID [REASON]\n"
		"                    end a GPU's clients as a hardware failure would (root, gpusysd's\n"
		"                    user or admin_group): to drain a GPU\n"
		"\n"
		"  --json             the daemon's reply as it sent it (status, clients, ports, latency,\n"
		"                     transfers, pollers); watch: one object per refresh\n"
		"  --runtime-dir DIR  where gpusysd runs (default $" GPUSYS_RUNTIME_DIR_ENV " or " GPUSYS_DEFAULT_RUNTIME_DIR
		")\n"
		"  --version, --help\n"
		"\n"
		"Exit status: 0 done; 1 gpusysd unreachable, or it refused or failed the command;\n"
		"2 bad usage. Requests are warp requests: one carries the calls of up to 32 lanes.\n");
}

static int connect_control(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, GPUSYS_CONTROL_NAME);

	if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
		fprintf(stderr, "gpusysctl: runtime directory path too long: %s\n", dir);
		return -ENAMETOOLONG;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fprintf(stderr, "gpusysctl: socket: %s\n", strerror(errno));
		return -errno;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		if (e == ENOENT || e == ECONNREFUSED)
			fprintf(stderr, "gpusysctl: gpusysd is not running at %s (%s: %s)\n", dir, sa.sun_path,
				strerror(e));
		else
			fprintf(stderr, "gpusysctl: cannot connect to %s: %s\n", sa.sun_path, strerror(e));
		close(fd);
		return -e;
	}
	return fd;
}

/* Send one request line, return the reply line (malloc'd, no newline). */
static char *request(int fd, const char *req)
{
	size_t len = strlen(req), cap = 4096, n = 0;
	char *buf;

	if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		fprintf(stderr, "gpusysctl: cannot send the request: %s\n", strerror(errno));
		return NULL;
	}
	buf = malloc(cap);
	while (buf) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, REPLY_TIMEOUT_MS);
		if (r == 0) {
			fprintf(stderr, "gpusysctl: no reply from gpusysd within %d ms\n", REPLY_TIMEOUT_MS);
			break;
		}
		if (r < 0 && errno == EINTR)
			continue;
		ssize_t k = r < 0 ? -1 : recv(fd, buf + n, cap - n - 1, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			fprintf(stderr, "gpusysctl: gpusysd closed the connection%s%s\n", k < 0 ? ": " : "",
				k < 0 ? strerror(errno) : "");
			break;
		}
		n += (size_t)k;
		buf[n] = 0;
		char *nl = memchr(buf, '\n', n);
		if (nl) {
			*nl = 0;
			return buf;
		}
		if (n + 1 == cap) {
			if (cap >= MAX_REPLY) {
				fprintf(stderr, "gpusysctl: reply too long\n");
				break;
			}
			char *b = realloc(buf, cap * 2);
			if (!b)
				break;
			buf = b;
			cap *= 2;
		}
	}
	free(buf);
	return NULL;
}

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "?";
}

static long long num(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

static void format_duration(long long s, char *buf, size_t len)
{
	if (s < 60)
		snprintf(buf, len, "%llds", s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lldh%02lldm", s / 3600, s / 60 % 60);
	else
		snprintf(buf, len, "%lldd%02lldh", s / 86400, s / 3600 % 24);
}

/* A size as people read it: 512 B, 64.0 KiB, 256.0 MiB, 1.50 GiB. */
static void format_bytes(long long b, char *buf, size_t len)
{
	if (b < 1024)
		snprintf(buf, len, "%lld B", b);
	else if (b < (1LL << 20))
		snprintf(buf, len, "%.1f KiB", (double)b / 1024);
	else if (b < (1LL << 30))
		snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
	else
		snprintf(buf, len, "%.2f GiB", (double)b / (1LL << 30));
}

/* A client's bulk copies as libgpusys reported them (status "copies"), in
 * one line; false when it has reported none. */
static bool copies_line(json_t *c, char *buf, size_t len)
{
	json_t *cp = json_object_get(c, "copies"), *last = json_object_get(cp, "last");
	if (num(cp, "count") <= 0 || !json_is_object(last))
		return false;
	char total[32], size[32];
	format_bytes(num(cp, "bytes"), total, sizeof(total));
	format_bytes(num(last, "bytes"), size, sizeof(size));
	snprintf(buf, len,
		 "%lld cop%s, %s; last: %s %s at %.2f GB/s, producers %lld -> %lld (%lld added, %lld taken back since open)",
		 num(cp, "count"), num(cp, "count") == 1 ? "y" : "ies", total,
		 !strcmp(str(last, "direction"), "dtoh") ? "device to host" : "host to device", size,
		 json_number_value(json_object_get(last, "gbs")), num(last, "producers_open"), num(last, "producers_end"),
		 num(last, "added"), num(last, "taken_back"));
	return true;
}

static int print_status(json_t *st)
{
	char up[32];
	json_t *clients = json_object_get(st, "clients");
	size_t i;
	json_t *c;

	format_duration(num(st, "uptime_s"), up, sizeof(up));
	printf("gpusysd %s, pid %lld, up %s, serving %s\n", str(st, "version"), num(st, "pid"), up,
	       str(st, "runtime_dir"));
	/* The daemon shows another user's clients to admins only. */
	bool own = !strcmp(str(st, "clients_shown"), "own");
	printf("%lld poller%s, %lld worker%s, %lld client%s attached%s, %lld warp requests served\n", num(st, "pollers"),
	       num(st, "pollers") == 1 ? "" : "s", num(st, "workers"), num(st, "workers") == 1 ? "" : "s",
	       num(st, "clients_attached"), num(st, "clients_attached") == 1 ? "" : "s",
	       own ? " (yours; others' are not shown)" : "", num(st, "requests_served"));
	/* Clients that name no GPU have pollers and workers of their own too. */
	json_t *dp = json_object_get(st, "default_pollers"), *dw = json_object_get(st, "default_workers");
	if (json_is_object(dp) && json_is_object(dw))
		printf("%lld of the pollers (CPUs %s) and %lld of the workers serve clients that name no GPU, the others "
		       "their own GPU's\n",
		       num(dp, "count"), str(dp, "cpus"), num(dw, "count"));
	else if (json_is_object(dp)) /* a daemon from before per-GPU workers */
		printf("%lld of the pollers serve clients that name no GPU (CPUs %s), the others their own GPU's\n",
		       num(dp, "count"), str(dp, "cpus"));
	/* GPUs by the daemon's index; clients name theirs by UUID. */
	json_t *gpus = json_object_get(st, "gpus"), *g;
	if (json_array_size(gpus)) {
		printf("\n%4s %-40s %-24s %-13s %4s %7s %6s %6s %7s %7s %-12s %s\n", "GPU", "UUID", "NAME", "PCI", "NUMA",
		       "CLIENTS", "PORTS", "IN-USE", "POLLERS", "WORKERS", "POLLER-CPUS", "STATE");
		json_array_foreach(gpus, i, g)
		{
			char numa[16] = "-";
			if (num(g, "numa_node") >= 0)
				snprintf(numa, sizeof(numa), "%lld", num(g, "numa_node"));
			const char *state = json_is_true(json_object_get(g, "failed")) ? "failed: "
					    : json_is_true(json_object_get(g, "emulated")) ? "emulated"
											     : "ok";
			/* Its own pollers and workers (issue 34); none: its
			 * clients are refused. */
			json_t *pg = json_object_get(g, "pollers"), *wg = json_object_get(g, "workers");
			char np[16] = "none", nw[16] = "none";
			if (json_is_object(pg))
				snprintf(np, sizeof(np), "%lld", num(pg, "count"));
			if (json_is_object(wg))
				snprintf(nw, sizeof(nw), "%lld", num(wg, "count"));
			else if (!wg) /* a daemon from before per-GPU workers */
				snprintf(nw, sizeof(nw), "-");
			printf("%4lld %-40s %-24.24s %-13s %4s %7lld %6lld %6lld %7s %7s %-12s %s%s\n", num(g, "index"),
			       str(g, "uuid"), str(g, "name"), *str(g, "pci_bus_id") ? str(g, "pci_bus_id") : "-", numa,
			       num(g, "clients"), num(g, "ports"), num(g, "ports_in_use"), np, nw,
			       json_is_object(pg) ? str(pg, "cpus") : "-", state,
			       json_is_true(json_object_get(g, "failed")) ? str(g, "failure") : "");
		}
	}
	if (!json_array_size(clients))
		return 0;
	printf("\n%6s %8s %6s %-16s %4s %-8s %6s %6s %12s %8s %9s\n", "ID", "PID", "UID", "COMM", "GPU", "MEMORY",
	       "PORTS", "IN-USE", "REQUESTS", "REJECTED", "ATTACHED");
	json_array_foreach(clients, i, c)
	{
		size_t j;
		char at[32];
		format_duration(num(c, "attached_s"), at, sizeof(at));
		char gpu[16] = "-";
		const char *uuid = json_string_value(json_object_get(c, "gpu"));
		json_array_foreach(gpus, j, g) if (uuid && !strcmp(uuid, str(g, "uuid")))
			snprintf(gpu, sizeof(gpu), "%lld", num(g, "index"));
		printf("%6lld %8lld %6lld %-16s %4s %-8s %6lld %6lld %12lld %8lld %9s\n", num(c, "id"), num(c, "pid"),
		       num(c, "uid"), str(c, "comm"), gpu, str(c, "memory"), num(c, "ports"), num(c, "ports_in_use"),
		       num(c, "requests"), num(c, "rejected"), at);
	}
	/* Device heaps (the alloc service), for the clients that have one. */
	int heading = 0;
	json_array_foreach(clients, i, c)
	{
		json_t *h = json_object_get(c, "alloc");
		if (!json_is_object(h))
			continue;
		if (!heading++)
			printf("\n%6s %10s %10s %10s %10s %10s %8s %21s %10s %13s\n", "ID", "HEAP MiB", "LIMIT MiB",
			       "LIVE", "MALLOCS", "FREES", "ENOMEM", "REFUSED FRG/INT/UNAL", "SLABS MiB", "CHUNKS GOT/BACK");
		char refused[48], chunks[48];
		snprintf(refused, sizeof(refused), "%lld/%lld/%lld", num(h, "refused_foreign"), num(h, "refused_interior"),
			 num(h, "refused_unallocated"));
		snprintf(chunks, sizeof(chunks), "%lld/%lld", num(h, "pool_chunks_got"), num(h, "pool_chunks_back"));
		printf("%6lld %10lld %10lld %10lld %10lld %10lld %8lld %21s %10lld %13s\n", num(c, "id"),
		       num(h, "mapped_bytes") >> 20, num(h, "limit_bytes") >> 20, num(h, "live_blocks"), num(h, "mallocs"),
		       num(h, "frees"), num(h, "enomem"), refused, num(h, "pool_bytes") >> 20, chunks);
	}
	/* Bulk copies (gpusys_memcpy_*), for the clients that reported some. */
	heading = 0;
	json_array_foreach(clients, i, c)
	{
		char line[256];
		if (!copies_line(c, line, sizeof(line)))
			continue;
		if (!heading++)
			printf("\n%6s %s\n", "ID", "BULK COPIES (libgpusys's engine, as the client reports them)");
		printf("%6lld %s\n", num(c, "id"), line);
	}
	return 0;
}

static double real(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static int print_ports(json_t *r)
{
	json_t *ports = json_object_get(r, "ports"), *p;
	size_t i;

	printf("%lld port%s busy%s\n", num(r, "busy"), num(r, "busy") == 1 ? "" : "s",
	       json_is_true(json_object_get(r, "truncated")) ? " (the oldest shown)" : "");
	if (!json_array_size(ports))
		return 0;
	printf("\n%6s %8s %-16s %6s %-7s %-14s %-10s %5s %12s\n", "CLIENT", "PID", "COMM", "PORT", "OPCODE", "NAME",
	       "PHASE", "LATER", "AGE");
	json_array_foreach(ports, i, p)
	{
		printf("%6lld %8lld %-16s %6lld %-7s %-14s %-10s %5s %10lldus\n", num(p, "client"), num(p, "pid"),
		       str(p, "comm"), num(p, "port"), str(p, "opcode"), str(p, "name"), str(p, "phase"),
		       json_is_true(json_object_get(p, "later")) ? "yes" : "no", num(p, "age_us"));
	}
	return 0;
}

/* One op's histogram as bars, one line per non-empty bucket. */
static void print_histogram(json_t *hist)
{
	long long most = 0;
	size_t i;
	json_t *b;

	json_array_foreach(hist, i, b)
	{
		long long n = (long long)json_integer_value(json_array_get(b, 2));
		if (n > most)
			most = n;
	}
	json_array_foreach(hist, i, b)
	{
		double lo = (double)json_integer_value(json_array_get(b, 0)) / 1000.0;
		double hi = (double)json_integer_value(json_array_get(b, 1)) / 1000.0;
		long long n = (long long)json_integer_value(json_array_get(b, 2));
		int bar = most ? (int)((n * 40 + most - 1) / most) : 0;
		printf("    %11.3f - %-11.3f us %10lld |%.*s\n", lo, hi, n, bar,
		       "########################################");
	}
}

/* A percentile in us, or "-" where there is none: an opcode none of whose
 * requests was timed (only a sample of the fast path is) has no latency,
 * and 0.0 would claim one. */
static void us_or_dash(json_t *o, const char *key, char *buf, size_t len)
{
	if (json_object_get(o, key) && num(o, "timed") > 0)
		snprintf(buf, len, "%.1f", real(o, key));
	else
		snprintf(buf, len, "-");
}

static int print_latency(json_t *r, bool hist)
{
	json_t *ops = json_object_get(r, "ops"), *o;
	size_t i;

	if (!json_is_true(json_object_get(r, "timed")))
		printf("(timing is off: stats = 0 in the configuration)\n");
	/* Not an admin: the daemon counts only the asker's own attached
	 * clients, and keeps the latency figures (every user's) back. */
	if (!strcmp(str(r, "shown"), "own")) {
		printf("(your clients attached now; latency figures are daemon-wide: root, gpusysd's user and "
		       "admin_group only)\n");
		if (!json_array_size(ops)) {
			printf("no requests of yours served\n");
			return 0;
		}
		printf("%-7s %-16s %12s %8s %14s %14s\n", "OPCODE", "NAME", "COUNT", "ERRORS", "BYTES IN", "BYTES OUT");
		json_array_foreach(ops, i, o)
			printf("%-7s %-16s %12lld %8lld %14lld %14lld\n", str(o, "opcode"), str(o, "name"), num(o, "count"),
			       num(o, "errors"), num(o, "bytes_in"), num(o, "bytes_out"));
		return 0;
	}
	if (!json_array_size(ops)) {
		printf("no requests served yet\n");
		return 0;
	}
	printf("%-7s %-16s %12s %8s %10s %10s %10s %10s %10s %10s\n", "OPCODE", "NAME", "COUNT", "ERRORS", "P50", "P90",
	       "P99", "P99.9", "MAX", "(us)");
	json_array_foreach(ops, i, o)
	{
		static const char *const pct[5] = { "p50_us", "p90_us", "p99_us", "p999_us", "max_us" };
		char v[5][16];
		for (unsigned k = 0; k < 5; k++)
			us_or_dash(o, pct[k], v[k], sizeof(v[k]));
		printf("%-7s %-16s %12lld %8lld %10s %10s %10s %10s %10s\n", str(o, "opcode"), str(o, "name"),
		       num(o, "count"), num(o, "errors"), v[0], v[1], v[2], v[3], v[4]);
		/* which errors, where the service counts them by errno */
		json_t *errnos = json_object_get(o, "errnos"), *n;
		const char *e;
		if (json_object_size(errnos)) {
			printf("%-7s %-16s errors:", "", "");
			json_object_foreach(errnos, e, n)
				printf(" %s %lld", e, (long long)json_integer_value(n));
			printf("\n");
		}
		if (hist)
			print_histogram(json_object_get(o, "histogram"));
	}
	return 0;
}

/* One request line to gpusysd; its reply parsed (NULL: said why on stderr,
 * the daemon's own "error" included). */
static json_t *ask(const char *dir, const char *req, char **ret_line)
{
	int fd = connect_control(dir);
	if (fd < 0)
		return NULL;
	char *line = request(fd, req);
	close(fd);
	if (!line)
		return NULL;
	json_error_t err;
	json_t *r = json_loads(line, 0, &err);
	if (!r || !json_is_object(r)) {
		fprintf(stderr, "gpusysctl: gpusysd sent a malformed reply: %s\n", r ? "not an object" : err.text);
		json_decref(r);
		free(line);
		return NULL;
	}
	if (json_object_get(r, "error")) {
		fprintf(stderr, "gpusysctl: gpusysd says: %s\n", str(r, "error"));
		json_decref(r);
		free(line);
		return NULL;
	}
	if (ret_line)
		*ret_line = line;
	else
		free(line);
	return r;
}

/* Ask one command, print the reply as JSON (--json) or through show. */
static int run_cmd(const char *dir, const char *cmd, bool json, bool hist, int (*show)(json_t *, bool))
{
	char req[64], *line = NULL;
	snprintf(req, sizeof(req), "{\"cmd\":\"%s\"}\n", cmd);
	json_t *r = ask(dir, req, &line);
	if (!r)
		return 1;
	int rc = 0;
	if (json)
		printf("%s\n", line);
	else
		rc = show(r, hist);
	json_decref(r);
	free(line);
	if (fflush(stdout) != 0 || ferror(stdout))
		rc = 1;
	return rc;
}

static int show_status(json_t *r, bool hist)
{
	(void)hist;
	return print_status(r);
}

static int show_ports(json_t *r, bool hist)
{
	(void)hist;
	return print_ports(r);
}

/* Handles whose block calls moved bytes lately: the progress of long
 * transfers. */
static int show_transfers(json_t *r, bool hist)
{
	json_t *list = json_object_get(r, "transfers"), *t;
	size_t i;
	(void)hist;
	printf("%zu transfer%s active in the last %lld ms\n", json_array_size(list), json_array_size(list) == 1 ? "" : "s",
	       num(r, "window_ms"));
	if (!json_array_size(list))
		return 0;
	printf("\n%6s %8s %-16s %8s %-5s %12s %9s %8s %8s  %s\n", "CLIENT", "PID", "COMM", "HANDLE", "DIR", "MIB", "SECONDS",
	       "GB/S", "IDLE", "PATH");
	json_array_foreach(list, i, t)
	{
		printf("%6lld %8lld %-16s %8lld %-5s %12.1f %9.2f %8.2f %6lldms  %s\n", num(t, "client"), num(t, "pid"),
		       str(t, "comm"), num(t, "handle"), str(t, "direction"), (double)num(t, "bytes") / 1048576.0,
		       real(t, "seconds"), real(t, "gb_per_s"), num(t, "idle_ms"), str(t, "path"));
	}
	return 0;
}

/* The pollers' counters (core/poller.h), one line each and a total. The
 * times come from one pass in time_every: per found port the serve time,
 * per pass the scan time (pass minus serve), and the share of pass time
 * spent serving. */
static int show_pollers(json_t *r, bool hist)
{
	static const char *const keys[] = { "passes", "empty_passes", "ports_scanned", "found", "served",
					    "collisions", "held", "hot_hits", "dozes", "parks",
					    "timed_passes", "timed_pass_ns", "timed_serve_ns", "timed_found",
					    "timed_answer_ns" };
	enum { PASSES, EMPTY, SCANNED, FOUND, SERVED, COLL, HELD, HOT, DOZES, PARKS, TP, TPNS, TSNS, TF, TANS, NKEYS };
	long long total[NKEYS] = { 0 };
	json_t *list = json_object_get(r, "pollers"), *p;
	size_t i;
	(void)hist;

	printf("%-6s %12s %7s %10s %12s %12s %10s %10s %10s %7s %7s %9s %9s %9s %6s  %s\n", "POLLER", "PASSES",
	       "EMPTY%", "PORTS/PASS", "FOUND", "SERVED", "COLLIDED", "HELD", "HOT", "DOZES", "PARKS", "SCAN ns",
	       "SERVE ns", "ANSWER ns", "BUSY%", "GPU (its own pollers; -: clients that name none)");
	for (i = 0; i <= json_array_size(list); i++) {
		long long v[NKEYS];
		char name[16];
		p = json_array_get(list, i);
		for (unsigned k = 0; k < NKEYS; k++) {
			v[k] = p ? num(p, keys[k]) : total[k];
			if (p)
				total[k] += v[k];
		}
		if (p)
			snprintf(name, sizeof(name), "%lld", num(p, "index"));
		else
			snprintf(name, sizeof(name), "all");
		double passes = v[PASSES] ? (double)v[PASSES] : 1.0;
		/* scan ns: per timed pass, the pass time not spent serving. */
		double scan = v[TP] ? (double)(v[TPNS] - v[TSNS]) / (double)v[TP] : 0.0;
		double serve = v[TF] ? (double)v[TSNS] / (double)v[TF] : 0.0;
		double answer = v[TF] ? (double)v[TANS] / (double)v[TF] : 0.0;
		double busy = v[TPNS] ? 100.0 * (double)v[TSNS] / (double)v[TPNS] : 0.0;
		const char *gpu = p ? json_string_value(json_object_get(p, "gpu")) : NULL;
		printf("%-6s %12lld %7.1f %10.1f %12lld %12lld %10lld %10lld %10lld %7lld %7lld %9.0f %9.0f %9.0f %6.1f  %s\n",
		       name, v[PASSES], 100.0 * (double)v[EMPTY] / passes, (double)v[SCANNED] / passes, v[FOUND],
		       v[SERVED], v[COLL], v[HELD], v[HOT], v[DOZES], v[PARKS], scan, serve, answer, busy,
		       gpu ? gpu : p ? "-" : "");
	}
	printf("(found: ports whose client word moved; served: steps that made progress, one per single-packet\n"
	       " request; collided: found while another poller held it or served it first; held: found while a\n"
	       " call held it; scan ns: per pass, serve ns: per found port, answer ns: the part of serve spent\n"
	       " writing fast-path answers into the channel; busy: serving's share of pass time,\n"
	       " from one pass in %lld at random%s)\n",
	       num(r, "time_every"), json_is_true(json_object_get(r, "timed")) ? "" : "; timing is off (stats = false)");
	return 0;
}

/* The attached clients, one line each (from the status reply). */
static int show_clients(json_t *st, bool hist)
{
	json_t *clients = json_object_get(st, "clients"), *gpus = json_object_get(st, "gpus"), *c, *g;
	size_t i, j;
	(void)hist;
	if (!json_array_size(clients)) {
		printf("no clients attached%s\n",
		       !strcmp(str(st, "clients_shown"), "own") ? " (of yours; others' are not shown)" : "");
		return 0;
	}
	printf("%6s %8s %6s %-16s %-6s %-8s %6s %6s %14s %8s %8s %12s  %s\n", "ID", "PID", "UID", "COMM", "GPU", "MEMORY",
	       "PORTS", "IN-USE", "WARP-REQUESTS", "ERRORS", "REFUSED", "BYTES", "COMMAND LINE");
	json_array_foreach(clients, i, c)
	{
		char gpu[16] = "-", cmdline[512] = "?", path[64];
		const char *uuid = json_string_value(json_object_get(c, "gpu"));
		json_array_foreach(gpus, j, g) if (uuid && !strcmp(uuid, str(g, "uuid")))
			snprintf(gpu, sizeof(gpu), "%lld", num(g, "index"));
		/* The command line, where we may read it (our own clients). */
		snprintf(path, sizeof(path), "/proc/%lld/cmdline", num(c, "pid"));
		FILE *f = fopen(path, "re");
		if (f) {
			size_t n = fread(cmdline, 1, sizeof(cmdline) - 1, f);
			fclose(f);
			for (size_t k = 0; k + 1 < n; k++)
				if (!cmdline[k])
					cmdline[k] = ' ';
			cmdline[n] = 0;
		}
		printf("%6lld %8lld %6lld %-16s %-6s %-8s %6lld %6lld %14lld %8lld %8lld %12lld  %s\n", num(c, "id"),
		       num(c, "pid"), num(c, "uid"), str(c, "comm"), gpu, str(c, "memory"), num(c, "ports"),
		       num(c, "ports_in_use"), num(c, "requests"), num(c, "errors"), num(c, "rejected"),
		       num(c, "bytes_in") + num(c, "bytes_out"), cmdline);
		char line[256];
		if (copies_line(c, line, sizeof(line)))
			printf("%6s copies: %s\n", "", line);
	}
	printf("(a warp request carries the calls of up to 32 lanes; errors: requests answered with an error;\n"
	       " refused: malformed ones; bytes: payload both ways; copies: libgpusys's bulk copies, as reported)\n");
	return 0;
}

/* watch --json: one line per refresh (NDJSON), for a program to follow:
 * {"round", "interval_ms", "status": the status reply, "latency": the
 * latency reply, "rates": [{"opcode", "name", "count", "per_second"}]},
 * per_second over the last interval (null in the first round). */
static int watch_json(json_t *st, json_t *lat, json_t *prev, int round, int interval_ms)
{
	json_t *rates = json_array(), *o;
	size_t i, j;
	json_array_foreach(json_object_get(lat, "ops"), i, o)
	{
		long long before = 0;
		json_t *po;
		json_array_foreach(json_object_get(prev, "ops"), j, po) if (!strcmp(str(po, "opcode"), str(o, "opcode")))
			before = num(po, "count");
		json_array_append_new(rates, json_pack("{s:s, s:s, s:I, s:o}", "opcode", str(o, "opcode"), "name",
							 str(o, "name"), "count", (json_int_t)num(o, "count"), "per_second",
							 prev ? json_real((double)(num(o, "count") - before) * 1000.0 /
									  interval_ms)
							      : json_null()));
	}
	json_t *line = json_pack("{s:i, s:i, s:O, s:O, s:o}", "round", round, "interval_ms", interval_ms, "status", st,
				 "latency", lat, "rates", rates);
	char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
	json_decref(line);
	if (!text)
		return -1;
	printf("%s\n", text);
	free(text);
	return 0;
}

/* A live view: the status and the per-opcode rates over the last interval,
 * redrawn every interval until interrupted (or for --count rounds); with
 * --json, one JSON object per round instead. */
static int watch(const char *dir, int interval_ms, int count, bool json)
{
	json_t *prev = NULL;
	for (int round = 0; count <= 0 || round < count; round++) {
		json_t *st = ask(dir, "{\"cmd\":\"status\"}\n", NULL);
		json_t *lat = st ? ask(dir, "{\"cmd\":\"latency\"}\n", NULL) : NULL;
		if (!st || !lat) {
			json_decref(st);
			json_decref(prev);
			return 1;
		}
		if (json) {
			int r = watch_json(st, lat, prev, round, interval_ms);
			if (r < 0 || fflush(stdout) != 0 || ferror(stdout)) {
				json_decref(st);
				json_decref(lat);
				json_decref(prev);
				return 1;
			}
			json_decref(st);
			json_decref(prev);
			prev = lat;
			if (count <= 0 || round + 1 < count)
				usleep((useconds_t)interval_ms * 1000u);
			continue;
		}
		if (isatty(STDOUT_FILENO))
			printf("\033[H\033[2J");
		print_status(st);
		printf("\n%-7s %-16s %14s %12s %10s %10s   (last %d ms)\n", "OPCODE", "NAME", "REQUESTS", "PER SECOND",
		       "P50 us", "P99 us", interval_ms);
		json_t *ops = json_object_get(lat, "ops"), *o;
		size_t i, j;
		json_array_foreach(ops, i, o)
		{
			long long before = 0;
			json_t *po;
			json_array_foreach(json_object_get(prev, "ops"), j, po) if (!strcmp(str(po, "opcode"), str(o, "opcode")))
				before = num(po, "count");
			/* No percentiles for a non-admin (latency: own counts
			 * only), nor for an opcode with no timed request. */
			char p50[16], p99[16];
			us_or_dash(o, "p50_us", p50, sizeof(p50));
			us_or_dash(o, "p99_us", p99, sizeof(p99));
			printf("%-7s %-16s %14lld %12.0f %10s %10s\n", str(o, "opcode"), str(o, "name"), num(o, "count"),
			       prev ? (double)(num(o, "count") - before) * 1000.0 / interval_ms : 0.0, p50, p99);
		}
		fflush(stdout);
		json_decref(st);
		json_decref(prev);
		prev = lat;
		if (count <= 0 || round + 1 < count)
			usleep((useconds_t)interval_ms * 1000u);
	}
	json_decref(prev);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "histogram", no_argument, NULL, 'H' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	bool json = false, hist = false;
	int c, interval_ms = 1000, count = 0;

	/* Options before or after the command. */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'r': dir = optarg; break;
		case 'j': json = true; break;
		case 'H': hist = true; break;
		case 'i': interval_ms = atoi(optarg); break;
		case 'n': count = atoi(optarg); break;
		case 'V': printf("gpusysctl %s\n", GPUSYS_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!dir || !*dir)
		dir = getenv(GPUSYS_RUNTIME_DIR_ENV);
	if (!dir || !*dir)
		dir = GPUSYS_DEFAULT_RUNTIME_DIR;
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[optind];
	int extra = argc - optind - 1;
	if (!strcmp(cmd, "gpu-fail")) {
		/* gpu-fail UUID [REASON...]: end a GPU's clients (admins). */
		if (extra < 1) {
			fprintf(stderr, "gpusysctl: gpu-fail needs a GPU UUID\n");
			return 2;
		}
		json_t *q = json_pack("{s:s, s:s, s:s}", "cmd", "gpu-fail", "uuid", argv[optind + 1], "reason",
				      extra > 1 ? argv[optind + 2] : "gpusysctl gpu-fail");
		char *line = q ? json_dumps(q, JSON_COMPACT) : NULL, req[1024];
		json_decref(q);
		if (!line)
			return 1;
		snprintf(req, sizeof(req), "%s\n", line);
		free(line);
		char *reply = NULL;
		json_t *r = ask(dir, req, &reply);
		if (!r)
			return 1;
		if (json)
			printf("%s\n", reply);
		else
			printf("GPU %s failed: its clients were ended\n", str(r, "uuid"));
		json_decref(r);
		free(reply);
		return 0;
	}
	if (extra) {
		fprintf(stderr, "gpusysctl: %s: unexpected argument '%s'\n", cmd, argv[optind + 1]);
		return 2;
	}
	if (hist && strcmp(cmd, "latency")) {
		fprintf(stderr, "gpusysctl: --histogram is for latency\n");
		return 2;
	}
	if (!strcmp(cmd, "status"))
		return run_cmd(dir, cmd, json, hist, show_status);
	if (!strcmp(cmd, "clients"))
		return run_cmd(dir, "status", json, hist, show_clients);
	if (!strcmp(cmd, "ports"))
		return run_cmd(dir, cmd, json, hist, show_ports);
	if (!strcmp(cmd, "latency"))
		return run_cmd(dir, cmd, json, hist, print_latency);
	if (!strcmp(cmd, "transfers"))
		return run_cmd(dir, cmd, json, hist, show_transfers);
	if (!strcmp(cmd, "pollers"))
		return run_cmd(dir, cmd, json, hist, show_pollers);
	if (!strcmp(cmd, "watch")) {
		if (interval_ms < 100) {
			fprintf(stderr, "gpusysctl: watch: --interval of at least 100 ms\n");
			return 2;
		}
		return watch(dir, interval_ms, count, json);
	}
	fprintf(stderr, "gpusysctl: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
