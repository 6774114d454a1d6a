/* SPDX-License-Identifier: MIT */
/*
 * The monotonic clock in nanoseconds and the spin-wait hint: one copy for
 * gpusysd (pollers, I/O threads, the socket service, the stats) and
 * libgpusys (the callback server, the DMA agent, the heap's mapping thread,
 * the copy engine).
 */
#ifndef GPUSYS_COMMON_CLOCK_H
#define GPUSYS_COMMON_CLOCK_H

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
