/* SPDX-License-Identifier: MIT */
/* How a server pushes an answer's lines toward the GPU (cache_push.h). */
#include <stdlib.h>
#include <string.h>

#include "common/cache_push.h"

int gpusys_cache_push_mode = GPUSYS_PUSH_CLDEMOTE;

/* The default is CLDEMOTE: an answer of 32 heads came back 0.4 us sooner on
 * the H100 and about 0.1 us on the H200 pair, no row slower
 * (bench/RESULTS.md, "Heads, poller groups per GPU, adaptive copies" and
 * "Allocator, callback storm, heads and sockets on the H100"), and a CPU
 * without it runs it as a NOP (its encoding is in the hint-NOP space).
 * CLWB and CLFLUSHOPT fault where absent: only on request. */
int gpusys_cache_push_init(void)
{
	const char *v = getenv("GPUSYS_ANSWER_PUSH");
	int mode = GPUSYS_PUSH_CLDEMOTE;
	if (v && !strcmp(v, "none"))
		mode = GPUSYS_PUSH_NONE;
	else if (v && !strcmp(v, "clwb"))
		mode = GPUSYS_PUSH_CLWB;
	else if (v && !strcmp(v, "clflushopt"))
		mode = GPUSYS_PUSH_CLFLUSHOPT;
	gpusys_cache_push_mode = mode;
	return mode;
}
