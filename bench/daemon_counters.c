/* SPDX-License-Identifier: MIT */
/*
 * The daemon's side of a benchmark row: gpusysd's pollers' counters
 * (core/poller.h), read over its control socket before and after the row,
 * and where its poller threads ran (/proc, when the benchmark started it).
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "bench.h"
#include "common/wire.h"

/* One request line, one reply line (the control protocol). */
static json_t *control_ask(const char *dir, const char *req)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, GPUSYS_CONTROL_NAME) >= (int)sizeof(sa.sun_path))
		return NULL;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
		close(fd);
		return NULL;
	}
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	json_t *r = NULL;
	while (buf && n + 1 < cap) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 2000) <= 0)
			break;
		ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
		buf[n] = 0;
		if (memchr(buf, '\n', n)) {
			r = json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL);
			break;
		}
	}
	free(buf);
	close(fd);
	return r;
}

/* The sum over gpusysd's clients of one counter of `status` (a member of
 * each client's object, e.g. "heads_early"), or -1 when it does not answer. */
long long bench_clients_sum(const char *runtime_dir, const char *field)
{
	json_t *r = control_ask(runtime_dir, "{\"cmd\":\"status\"}\n");
	json_t *list = json_object_get(r, "clients"), *c;
	long long sum = -1;
	size_t i;
	if (json_is_array(list)) {
		sum = 0;
		json_array_foreach(list, i, c)
			sum += json_integer_value(json_object_get(c, field));
	}
	json_decref(r);
	return sum;
}

/* Involuntary context switches and the last CPU of each poller thread
 * ("gpusysd-pollN") of process pid. */
static void read_threads(int pid, struct bench_pollers *ret)
{
	char path[320];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char comm[32] = "", buf[1024];
		unsigned idx;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", pid, e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		int got = fgets(comm, sizeof(comm), f) != NULL;
		fclose(f);
		if (!got || sscanf(comm, "gpusysd-poll%u", &idx) != 1 || idx >= BENCH_MAX_POLLERS)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status", pid, e->d_name);
		if ((f = fopen(path, "re"))) {
			while (fgets(buf, sizeof(buf), f))
				sscanf(buf, "nonvoluntary_ctxt_switches: %llu", &ret->preempted[idx]);
			fclose(f);
		}
		/* stat: "pid (comm) state ..." and the CPU last run on is field 39. */
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", pid, e->d_name);
		if ((f = fopen(path, "re"))) {
			if (fgets(buf, sizeof(buf), f)) {
				char *p = strrchr(buf, ')');
				int field = 2;
				for (; p && *p && field < 39; p++)
					if (*p == ' ')
						field++;
				if (p && field == 39)
					ret->cpu[idx] = atoi(p);
			}
			fclose(f);
		}
	}
	if (d)
		closedir(d);
}

int bench_pollers_read(const char *runtime_dir, int pid, struct bench_pollers *ret)
{
	memset(ret, 0, sizeof(*ret));
	for (unsigned i = 0; i < BENCH_MAX_POLLERS; i++)
		ret->cpu[i] = -1;
	ret->t_ns = bench_now_ns();
	json_t *r = control_ask(runtime_dir, "{\"cmd\":\"pollers\"}\n");
	json_t *list = json_object_get(r, "pollers"), *p;
	size_t i;
	if (!json_is_array(list)) {
		json_decref(r);
		return -EPROTO;
	}
	json_array_foreach(list, i, p)
	{
		if (i >= BENCH_MAX_POLLERS)
			break;
#define F(k) (unsigned long long)json_integer_value(json_object_get(p, k))
		ret->passes += F("passes");
		ret->empty += F("empty_passes");
		ret->scanned += F("ports_scanned");
		ret->found += F("found");
		ret->served += F("served");
		ret->collisions += F("collisions");
		ret->held += F("held");
		ret->hot += F("hot_hits");
		ret->parks += F("parks");
		ret->dozes += F("dozes");
		ret->timed_passes += F("timed_passes");
		ret->timed_pass_ns += F("timed_pass_ns");
		ret->timed_serve_ns += F("timed_serve_ns");
		ret->timed_answer_ns += F("timed_answer_ns");
		ret->timed_count_ns += F("timed_count_ns");
		ret->timed_served += F("timed_served");
		ret->served_each[i] = F("served");
		ret->pass_each[i] = F("passes");
#undef F
	}
	ret->n = (unsigned)(i < BENCH_MAX_POLLERS ? i : BENCH_MAX_POLLERS);
	json_decref(r);
	if (pid > 0)
		read_threads(pid, ret);
	return 0;
}

void bench_pollers_since(const struct bench_pollers *a, const struct bench_pollers *b, struct bench_pollers *d)
{
	*d = *b; /* cpu[] and n: as at the end */
	d->t_ns = b->t_ns - a->t_ns;
#define D(f) d->f = b->f - a->f
	D(passes); D(empty); D(scanned); D(found); D(served); D(collisions); D(held); D(hot); D(parks); D(dozes);
	D(timed_passes); D(timed_pass_ns); D(timed_serve_ns); D(timed_answer_ns); D(timed_count_ns); D(timed_served);
	for (unsigned i = 0; i < BENCH_MAX_POLLERS; i++) {
		D(served_each[i]);
		D(pass_each[i]);
		D(preempted[i]);
	}
#undef D
}

void bench_pollers_header(void)
{
	printf("%-32s %-6s %8s %7s %9s %8s %8s %11s %12s %7s %7s %9s %6s %6s %7s %7s  %s\n", "daemon side", "memory",
	       "req/pass", "empty%", "ports/req", "coll/req", "held/req", "scan ns/req", "serve ns/req", "answer", "count",
	       "ns/pass", "busy%", "spin%", "max/avg", "preempt", "poller CPUs");
}

void bench_pollers_row(const char *what, const char *kind, const struct bench_pollers *d)
{
	double served = d->served ? (double)d->served : 1.0, passes = d->passes ? (double)d->passes : 1.0;
	/* The timed passes are a systematic sample (one in N): scale them up. */
	double scale = d->timed_passes ? (double)d->passes / (double)d->timed_passes : 0.0;
	double pass_ns = (double)d->timed_pass_ns * scale, serve_ns = (double)d->timed_serve_ns * scale;
	double wall = (double)d->t_ns * (d->n ? d->n : 1);
	unsigned long long most = 0, pre = 0;
	for (unsigned i = 0; i < d->n; i++) {
		most = d->served_each[i] > most ? d->served_each[i] : most;
		pre += d->preempted[i];
	}
	char cpus[8 * BENCH_MAX_POLLERS] = "", *at = cpus;
	for (unsigned i = 0; i < d->n && at < cpus + sizeof(cpus) - 8; i++)
		at += sprintf(at, "%s%d", i ? "," : "", d->cpu[i]);
	double per = d->timed_served ? (double)d->timed_served : 1.0;
	printf("%-32s %-6s %8.3f %7.1f %9.1f %8.3f %8.3f %11.0f %12.0f %7.0f %7.0f %9.0f %6.1f %6.1f %7.2f %7llu  %s\n",
	       what, kind,
	       (double)d->served / passes, 100.0 * (double)d->empty / passes, (double)d->scanned / served,
	       (double)d->collisions / served, (double)d->held / served, (pass_ns - serve_ns) / served,
	       (double)d->timed_serve_ns / per, (double)d->timed_answer_ns / per, (double)d->timed_count_ns / per,
	       d->timed_passes ? (double)d->timed_pass_ns / (double)d->timed_passes : 0.0, 100.0 * serve_ns / wall,
	       100.0 * pass_ns / wall, d->served && d->n ? (double)most / ((double)d->served / d->n) : 0.0, pre, cpus);
}
