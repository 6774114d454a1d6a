/* SPDX-License-Identifier: MIT */
/* How a server pushes an answer's lines toward the GPU (cache_push.h). */
#include <stdlib.h>
#include <string.h>

#include "common/cache_push.h"

/* The default is CLDEMOTE: a 32-lane answer of heads came back 0.07-0.42 us
 * sooner on the H100 in three runs and about 0.1 us on the H200 pair, the
 * NOOP never slower (the 32-lane bytes callback is bimodal with either
 * mode; bench/RESULTS.md, "Heads, poller groups per GPU, adaptive copies"
 * and "Allocator, callback storm, heads and sockets on the H100"), and a CPU
 * without it runs it as a NOP (its encoding is in the hint-NOP space).
 * CLWB and CLFLUSHOPT fault where absent: only on request. */
int gpusys_cache_push_mode = GPUSYS_PUSH_CLDEMOTE;

/* By mode: what GPUSYS_ANSWER_PUSH names it. */
static const char *const mode_name[] = {
	[GPUSYS_PUSH_NONE] = "none",
	[GPUSYS_PUSH_CLDEMOTE] = "cldemote",
	[GPUSYS_PUSH_CLWB] = "clwb",
	[GPUSYS_PUSH_CLFLUSHOPT] = "clflushopt",
};

const char *gpusys_cache_push_name(int mode)
{
	return mode_name[mode];
}

int gpusys_cache_push_init(void)
{
	const char *v = getenv("GPUSYS_ANSWER_PUSH");
	int mode = GPUSYS_PUSH_CLDEMOTE;
	for (int m = 0; v && m < (int)(sizeof(mode_name) / sizeof(mode_name[0])); m++)
		if (!strcmp(v, mode_name[m]))
			mode = m;
	gpusys_cache_push_mode = mode;
	return mode;
}
