/* SPDX-License-Identifier: MIT */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "util/log.h"

static bool to_journal;
static bool journal_native; /* journald's socket is there: fields too */
static _Thread_local struct log_context {
	int pid, opcode;
	unsigned client_id;
} log_ctx = { 0, -1, 0 };

void log_context_set(int pid, unsigned client_id, int opcode)
{
	log_ctx.pid = pid;
	log_ctx.client_id = client_id;
	log_ctx.opcode = opcode;
}
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
	/* sd_journal_send drops lines quietly without journald: only use it
	 * when its socket is there, else the "<N>" stream lines. */
	journal_native = to_journal && access("/run/systemd/journal/socket", W_OK) == 0;
}

void log_set_level(int priority)
{
	max_level = priority;
}

static void emit(int priority, const char *line, uint64_t dropped)
{
	char tail[64] = "";

	if (dropped)
		snprintf(tail, sizeof(tail), " (%llu more like this suppressed)", (unsigned long long)dropped);
	/* One fprintf per line: stdio locks the stream per call, so lines from
	 * different threads do not interleave. */
	if (journal_native) {
		char pid[32] = "GPUSYS_CLIENT_PID=", id[32] = "GPUSYS_CLIENT_ID=", op[32] = "GPUSYS_OPCODE=";
		if (log_ctx.pid) {
			snprintf(pid + 18, sizeof(pid) - 18, "%d", log_ctx.pid);
			snprintf(id + 17, sizeof(id) - 17, "%u", log_ctx.client_id);
		}
		if (log_ctx.opcode >= 0)
			snprintf(op + 14, sizeof(op) - 14, "0x%04x", log_ctx.opcode);
		/* Empty fields are left out: the list ends at the first NULL. */
		const char *f[3] = { NULL, NULL, NULL };
		unsigned n = 0;
		if (log_ctx.pid) {
			f[n++] = pid;
			f[n++] = id;
		}
		if (log_ctx.opcode >= 0)
			f[n++] = op;
		if (sd_journal_send("MESSAGE=%s%s", line, tail, "PRIORITY=%d", priority, "SYSLOG_IDENTIFIER=gpusysd",
				    f[0], f[1], f[2], NULL) < 0)
			fprintf(stderr, "<%d>%s%s\n", priority, line, tail);
	} else if (to_journal)
		fprintf(stderr, "<%d>%s%s\n", priority, line, tail);
	else
		fprintf(stderr, "gpusysd: %s%s\n", line, tail);
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
	emit(priority, line, 0);
}

/* Sites are few and logging is rare when nothing is wrong: one lock. */
static pthread_mutex_t site_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t dropped_total;

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000 + 1; /* never 0 */
}

/* Take a token from the site's bucket: true if the line may be written,
 * with the count dropped before it in *ret_dropped. */
static bool site_take(struct log_site *s, uint64_t *ret_dropped)
{
	const uint32_t full = LOG_BURST * 1000u;
	uint64_t now = now_ms();
	bool ok;

	pthread_mutex_lock(&site_lock);
	if (!s->last_ms) {
		s->tokens_x1k = full;
	} else {
		uint64_t add = (now - s->last_ms) * LOG_PER_S; /* ms x lines/s = thousandths */
		s->tokens_x1k = add >= full - s->tokens_x1k ? full : s->tokens_x1k + (uint32_t)add;
	}
	s->last_ms = now;
	ok = s->tokens_x1k >= 1000;
	if (ok) {
		s->tokens_x1k -= 1000;
		*ret_dropped = s->dropped;
		s->dropped = 0;
	} else {
		s->dropped++;
		dropped_total++;
	}
	pthread_mutex_unlock(&site_lock);
	return ok;
}

void log_site_msg(struct log_site *site, int priority, const char *fmt, ...)
{
	char line[1024];
	uint64_t dropped;
	va_list ap;

	if (priority > max_level || !site_take(site, &dropped))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	emit(priority, line, dropped);
}

uint64_t log_dropped_total(void)
{
	pthread_mutex_lock(&site_lock);
	uint64_t n = dropped_total;
	pthread_mutex_unlock(&site_lock);
	return n;
}
