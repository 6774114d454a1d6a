/* SPDX-License-Identifier: MIT */
/* Linux CPU lists ("0-3,8,10-11", as in /sys/devices/system/node/nodeN/cpulist). */
#ifndef GPUSYSD_CPULIST_H
#define GPUSYSD_CPULIST_H

#include <sched.h>

/* Parse text into set (cleared first). 0, or -EINVAL for anything but
 * numbers, ranges, commas and a final newline, or a CPU past CPU_SETSIZE. */
int cpulist_parse(const char *text, cpu_set_t *set);

/* The CPUs of host NUMA node `node` from sysfs. 0 or -errno. */
int cpulist_of_node(int node, cpu_set_t *set);

#endif
