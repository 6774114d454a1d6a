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

#include "gpusys/wire.h"

#define REPLY_TIMEOUT_MS 5000
#define MAX_REPLY (16u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpusysctl [--runtime-dir DIR] COMMAND\n"
		"\n"
		"Commands:\n"
		"  status [--json]   the daemon and its attached clients (--json: as the daemon sent it)\n"
		"  ports [--json]    ports busy now: client, opcode, phase, how long\n"
		"  latency [--json] [--histogram]\n"
		"                    per opcode: requests, errors, latency percentiles (from a poller\n"
		"                    finding the request to its answer), with a text histogram\n"
		"\n"
		"  --runtime-dir DIR  where gpusysd runs (default $" GPUSYS_RUNTIME_DIR_ENV " or " GPUSYS_DEFAULT_RUNTIME_DIR
		")\n");
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
	printf("%lld pollers, %lld workers, %lld client%s attached%s, %lld requests served\n", num(st, "pollers"),
	       num(st, "workers"), num(st, "clients_attached"), num(st, "clients_attached") == 1 ? "" : "s",
	       own ? " (yours; others' are not shown)" : "", num(st, "requests_served"));
	/* GPUs by the daemon's index; clients name theirs by UUID. */
	json_t *gpus = json_object_get(st, "gpus"), *g;
	if (json_array_size(gpus)) {
		printf("\n%4s %-40s %-24s %-13s %4s %7s %6s %6s %s\n", "GPU", "UUID", "NAME", "PCI", "NUMA", "CLIENTS",
		       "PORTS", "IN-USE", "STATE");
		json_array_foreach(gpus, i, g)
		{
			char numa[16] = "-";
			if (num(g, "numa_node") >= 0)
				snprintf(numa, sizeof(numa), "%lld", num(g, "numa_node"));
			const char *state = json_is_true(json_object_get(g, "failed")) ? "failed: "
					    : json_is_true(json_object_get(g, "emulated")) ? "emulated"
											     : "ok";
			printf("%4lld %-40s %-24.24s %-13s %4s %7lld %6lld %6lld %s%s\n", num(g, "index"), str(g, "uuid"),
			       str(g, "name"), *str(g, "pci_bus_id") ? str(g, "pci_bus_id") : "-", numa,
			       num(g, "clients"), num(g, "ports"), num(g, "ports_in_use"), state,
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
			printf("\n%6s %10s %10s %10s %10s %10s %8s %21s\n", "ID", "HEAP MiB", "LIMIT MiB", "LIVE",
			       "MALLOCS", "FREES", "ENOMEM", "REFUSED FRG/INT/UNAL");
		char refused[48];
		snprintf(refused, sizeof(refused), "%lld/%lld/%lld", num(h, "refused_foreign"), num(h, "refused_interior"),
			 num(h, "refused_unallocated"));
		printf("%6lld %10lld %10lld %10lld %10lld %10lld %8lld %21s\n", num(c, "id"), num(h, "mapped_bytes") >> 20,
		       num(h, "limit_bytes") >> 20, num(h, "live_blocks"), num(h, "mallocs"), num(h, "frees"),
		       num(h, "enomem"), refused);
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

static int print_latency(json_t *r, bool hist)
{
	json_t *ops = json_object_get(r, "ops"), *o;
	size_t i;

	if (!json_is_true(json_object_get(r, "timed")))
		printf("(timing is off: stats = 0 in the configuration)\n");
	if (!json_array_size(ops)) {
		printf("no requests served yet\n");
		return 0;
	}
	printf("%-7s %-16s %12s %8s %10s %10s %10s %10s %10s %10s\n", "OPCODE", "NAME", "COUNT", "ERRORS", "P50", "P90",
	       "P99", "P99.9", "MAX", "(us)");
	json_array_foreach(ops, i, o)
	{
		printf("%-7s %-16s %12lld %8lld %10.1f %10.1f %10.1f %10.1f %10.1f\n", str(o, "opcode"), str(o, "name"),
		       num(o, "count"), num(o, "errors"), real(o, "p50_us"), real(o, "p90_us"), real(o, "p99_us"),
		       real(o, "p999_us"), real(o, "max_us"));
		if (hist)
			print_histogram(json_object_get(o, "histogram"));
	}
	return 0;
}

/* Ask gpusysd one command, print its reply as JSON (--json) or through
 * show. Exit status: 0, 1 (no daemon, or it said no), 2 (bad usage). */
static int run_cmd(const char *dir, const char *cmd, int argc, char **argv, int (*show)(json_t *, bool))
{
	bool json = false, hist = false;

	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--histogram") && !strcmp(cmd, "latency"))
			hist = true;
		else {
			fprintf(stderr, "gpusysctl: %s: unknown argument '%s'\n", cmd, argv[i]);
			return 2;
		}
	}
	int fd = connect_control(dir);
	if (fd < 0)
		return 1;
	char req[64];
	snprintf(req, sizeof(req), "{\"cmd\":\"%s\"}\n", cmd);
	char *line = request(fd, req);
	close(fd);
	if (!line)
		return 1;

	json_error_t err;
	json_t *st = json_loads(line, 0, &err);
	int rc = 1;
	if (!st || !json_is_object(st))
		fprintf(stderr, "gpusysctl: gpusysd sent a malformed reply: %s\n", st ? "not an object" : err.text);
	else if (json_object_get(st, "error"))
		fprintf(stderr, "gpusysctl: gpusysd says: %s\n", str(st, "error"));
	else if (json) {
		printf("%s\n", line);
		rc = 0;
	} else
		rc = show(st, hist);
	json_decref(st);
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL;
	int c;

	/* "+": stop at the command, so its own options are left to it. */
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'r': dir = optarg; break;
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
	if (!strcmp(cmd, "status"))
		return run_cmd(dir, cmd, argc - optind - 1, argv + optind + 1, show_status);
	if (!strcmp(cmd, "ports"))
		return run_cmd(dir, cmd, argc - optind - 1, argv + optind + 1, show_ports);
	if (!strcmp(cmd, "latency"))
		return run_cmd(dir, cmd, argc - optind - 1, argv + optind + 1, print_latency);
	fprintf(stderr, "gpusysctl: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
