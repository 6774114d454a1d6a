/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct bench_stats bench_stats_of(uint64_t *samples, size_t n)
{
	struct bench_stats s = { 0 };
	if (!n)
		return s;
	qsort(samples, n, sizeof(*samples), cmp_u64);
	s.count = n;
	s.min_ns = samples[0];
	s.p50_ns = samples[n / 2];
	s.p99_ns = samples[(size_t)((double)n * 0.99)];
	s.max_ns = samples[n - 1];
	return s;
}

void bench_gbs_header(void)
{
	printf("| transfer | GB/s |\n|---|---|\n");
}

void bench_gbs_row(double gbs, const char *fmt, ...)
{
	va_list ap;
	printf("| ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" | %.2f |\n", gbs);
}
