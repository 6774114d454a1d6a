/* SPDX-License-Identifier: MIT */
/* A process's threads and the CPU time they have used, from
 * /proc/PID/task/TID/schedstat (nanoseconds, exact, unlike the 10 ms ticks
 * of /proc/PID/stat). Header only: the tests (C) and the CUDA benchmarks
 * (nvcc, C++) include it alike. */
#ifndef GPUSYS_COMMON_PROC_TASKS_H
#define GPUSYS_COMMON_PROC_TASKS_H

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define PROC_TASKS_MAX 256

struct proc_tasks {
	uint64_t cpu_ns; /* every thread's run time, summed */
	int threads;
	/* each thread (the first PROC_TASKS_MAX): its id, name and run time */
	int tid[PROC_TASKS_MAX];
	char comm[PROC_TASKS_MAX][16];
	uint64_t run_ns[PROC_TASKS_MAX];
};

/* Fills *ret (zeros when pid's task directory cannot be read); returns 0
 * or -errno of opening that directory. */
static inline int proc_tasks_of(pid_t pid, struct proc_tasks *ret)
{
	char path[64];
	ret->cpu_ns = 0;
	ret->threads = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		int at = ret->threads++;
		char p[320];
		unsigned long long run = 0;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(p, "r");
		if (f) {
			if (fscanf(f, "%llu", &run) == 1)
				ret->cpu_ns += run;
			fclose(f);
		}
		if (at >= PROC_TASKS_MAX)
			continue;
		ret->tid[at] = atoi(e->d_name);
		ret->run_ns[at] = run;
		ret->comm[at][0] = 0;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		f = fopen(p, "r");
		if (f) {
			if (!fgets(ret->comm[at], sizeof(ret->comm[at]), f))
				ret->comm[at][0] = 0;
			ret->comm[at][strcspn(ret->comm[at], "\n")] = 0;
			fclose(f);
		}
	}
	closedir(d);
	return 0;
}

/* The threads of `after` that ran since `before` (the same process), the
 * busiest first, as "name (tid) N us" lines into out: where an idle
 * process's CPU goes. Threads born in between count from zero. */
static inline void proc_tasks_print_delta(FILE *out, const struct proc_tasks *before, const struct proc_tasks *after,
					  double seconds)
{
	int n = after->threads < PROC_TASKS_MAX ? after->threads : PROC_TASKS_MAX;
	uint64_t d[PROC_TASKS_MAX];
	int order[PROC_TASKS_MAX];
	for (int i = 0; i < n; i++) {
		d[i] = after->run_ns[i];
		int m = before->threads < PROC_TASKS_MAX ? before->threads : PROC_TASKS_MAX;
		for (int j = 0; j < m; j++) {
			if (before->tid[j] == after->tid[i]) {
				d[i] -= before->run_ns[j] < d[i] ? before->run_ns[j] : d[i];
				break;
			}
		}
		order[i] = i;
	}
	for (int i = 1; i < n; i++) { /* insertion sort, busiest first */
		int k = order[i], j = i;
		for (; j > 0 && d[order[j - 1]] < d[k]; j--)
			order[j] = order[j - 1];
		order[j] = k;
	}
	for (int i = 0; i < n && d[order[i]]; i++)
		fprintf(out, "   %-15s (%d) %8.1f us, %.4f%% of a core\n", after->comm[order[i]], after->tid[order[i]],
			d[order[i]] / 1e3, 100.0 * d[order[i]] / 1e9 / seconds);
}

#endif
