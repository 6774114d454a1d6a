/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "util/log.h"

static bool to_journal;
static int max_level = LOG_INFO;

/* JOURNAL_STREAM is "DEV:INO" of the stream systemd connected; it only counts
 * if stderr is still that stream (a child may inherit the variable). */
void log_init(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0)
		to_journal = st.st_dev == dev && st.st_ino == ino;
}

void log_set_level(int priority)
{
	max_level = priority;
}

void log_msg(int priority, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (priority > max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line: stdio locks the stream per call, so lines from
	 * different threads do not interleave. */
	if (to_journal)
		fprintf(stderr, "<%d>%s\n", priority, line);
	else
		fprintf(stderr, "gpusysd: %s\n", line);
}
