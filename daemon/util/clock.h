/* SPDX-License-Identifier: MIT */
/*
 * The daemon's monotonic clock in nanoseconds and its spin-wait hint: one
 * copy for the pollers, the I/O threads, the socket service and the stats.
 */
#ifndef GPUSYSD_UTIL_CLOCK_H
#define GPUSYSD_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* In a spin loop: let the sibling hyperthread run, save power. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
