/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/cpulist.h"

static int number(const char **p, unsigned long *ret)
{
	char *end;
	if (!isdigit((unsigned char)**p))
		return -EINVAL;
	*ret = strtoul(*p, &end, 10);
	*p = end;
	return *ret < CPU_SETSIZE ? 0 : -EINVAL;
}

int cpulist_parse(const char *text, cpu_set_t *set)
{
	const char *p = text;
	CPU_ZERO(set);
	while (*p && *p != '\n') {
		unsigned long lo, hi;
		if (number(&p, &lo) < 0)
			return -EINVAL;
		hi = lo;
		if (*p == '-') {
			p++;
			if (number(&p, &hi) < 0 || hi < lo)
				return -EINVAL;
		}
		for (unsigned long c = lo; c <= hi; c++)
			CPU_SET(c, set);
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return -EINVAL;
	}
	return *p == '\n' && p[1] ? -EINVAL : 0;
}

int cpulist_of_node(int node, cpu_set_t *set)
{
	char path[96], line[4096];
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	int r = fgets(line, sizeof(line), f) ? cpulist_parse(line, set) : -EIO;
	fclose(f);
	return r;
}
