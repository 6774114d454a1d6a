/* SPDX-License-Identifier: MIT */
/* How a server pushes an answer's lines toward the GPU (cache_push.h). */
#include <stdlib.h>
#include <string.h>

#include "common/cache_push.h"

int gpusys_cache_push_mode = GPUSYS_PUSH_NONE;

int gpusys_cache_push_init(void)
{
	const char *v = getenv("GPUSYS_ANSWER_PUSH");
	int mode = GPUSYS_PUSH_NONE;
	if (v && !strcmp(v, "cldemote"))
		mode = GPUSYS_PUSH_CLDEMOTE;
	else if (v && !strcmp(v, "clwb"))
		mode = GPUSYS_PUSH_CLWB;
	else if (v && !strcmp(v, "clflushopt"))
		mode = GPUSYS_PUSH_CLFLUSHOPT;
	gpusys_cache_push_mode = mode;
	return mode;
}
