/* SPDX-License-Identifier: MIT */
/*
 * After a server writes an answer into the channel, the GPU reads it across
 * the bus; a line the CPU has just written sits modified in that core's
 * private cache, and the device's read of it has to snoop the core. These
 * hints move the answer's lines out of the core first: CLDEMOTE to the
 * shared cache (a no-op hint on CPUs without it), CLWB written back and
 * kept, CLFLUSHOPT written back and dropped. Hints only: the memory is
 * coherent either way. Chosen by GPUSYS_ANSWER_PUSH (none, cldemote: the
 * default, clwb, clflushopt) at the server's start (bench/RESULTS.md).
 */
#ifndef GPUSYS_CACHE_PUSH_H
#define GPUSYS_CACHE_PUSH_H

#include <stddef.h>
#include <stdint.h>

enum { GPUSYS_PUSH_NONE, GPUSYS_PUSH_CLDEMOTE, GPUSYS_PUSH_CLWB, GPUSYS_PUSH_CLFLUSHOPT };

extern int gpusys_cache_push_mode;

/* Read GPUSYS_ANSWER_PUSH once, at a server's start (an unknown value
 * keeps the default). Returns the mode. */
int gpusys_cache_push_init(void);

/* A mode's name, as GPUSYS_ANSWER_PUSH spells it. */
const char *gpusys_cache_push_name(int mode);

/* Push the 64-byte lines of [p, p + n) out of this core's cache. */
static inline void gpusys_cache_push(const volatile void *p, size_t n)
{
#if defined(__x86_64__)
	int mode = gpusys_cache_push_mode;
	if (mode == GPUSYS_PUSH_NONE || !n)
		return;
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + n;
	for (; a < end; a += 64) {
		/* Encoded by hand (rdi as the operand), so no assembler or
		 * -m flag is needed for any of them. */
		if (mode == GPUSYS_PUSH_CLDEMOTE)
			__asm__ volatile(".byte 0x0f, 0x1c, 0x07" ::"D"(a) : "memory");
		else if (mode == GPUSYS_PUSH_CLWB)
			__asm__ volatile(".byte 0x66, 0x0f, 0xae, 0x37" ::"D"(a) : "memory");
		else
			__asm__ volatile(".byte 0x66, 0x0f, 0xae, 0x3f" ::"D"(a) : "memory");
	}
#else
	(void)p;
	(void)n;
#endif
}

#endif /* GPUSYS_CACHE_PUSH_H */
