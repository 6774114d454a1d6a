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
#include <sys/types.h>

struct proc_tasks {
	uint64_t cpu_ns; /* every thread's run time, summed */
	int threads;
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
		ret->threads++;
		char p[320];
		unsigned long long run = 0;
		snprintf(p, sizeof(p), "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(p, "r");
		if (f) {
			if (fscanf(f, "%llu", &run) == 1)
				ret->cpu_ns += run;
			fclose(f);
		}
	}
	closedir(d);
	return 0;
}

#endif
