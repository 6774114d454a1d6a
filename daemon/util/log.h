/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr. Under systemd stderr goes to the journal, which reads a
 * "<N>" priority prefix; on a terminal that prefix would only be noise, so
 * it is written only when JOURNAL_STREAM says stderr is the journal.
 *
 * Rate limit: clients decide how often most lines are written (attach,
 * detach, refusals), so a hostile one could fill the disk. Every call site
 * of log_err/warn/info has its own token bucket: LOG_BURST lines at once,
 * then LOG_PER_S a second. Lines over the limit are counted, and the next
 * line from that site that is written says how many were dropped.
 * log_debug (only with --verbose) is not limited.
 */
#ifndef GPUSYSD_LOG_H
#define GPUSYSD_LOG_H

#include <stdint.h>
#include <syslog.h>

#define LOG_BURST 20
#define LOG_PER_S 2

void log_init(void);
/* Unlimited: one line, always. */
void log_msg(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One call site's bucket (zero-initialised: full). */
struct log_site {
	uint64_t last_ms;    /* when tokens were last counted; 0: never */
	uint32_t tokens_x1k; /* thousandths of a line */
	uint64_t dropped;    /* since the last line written */
};
void log_site_msg(struct log_site *site, int priority, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define LOG_LIMITED_(prio, ...)                                   \
	do {                                                      \
		static struct log_site log_site_;                 \
		log_site_msg(&log_site_, prio, __VA_ARGS__);      \
	} while (0)

#define log_err(...) LOG_LIMITED_(LOG_ERR, __VA_ARGS__)
#define log_warn(...) LOG_LIMITED_(LOG_WARNING, __VA_ARGS__)
#define log_info(...) LOG_LIMITED_(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

/* Under systemd, lines go to the journal with structured fields
 * (sd_journal_send): PRIORITY, SYSLOG_IDENTIFIER, and, while a thread works
 * for a client, GPUSYS_CLIENT_PID, GPUSYS_CLIENT_ID and GPUSYS_OPCODE
 * (`journalctl GPUSYS_CLIENT_PID=1234`). The context is the calling
 * thread's; pid 0 clears it. */
void log_context_set(int pid, unsigned client_id, int opcode /* -1: none */);
static inline void log_context_clear(void)
{
	log_context_set(0, 0, -1);
}

/* Raise the threshold (LOG_DEBUG shows everything). */
void log_set_level(int priority);

/* Lines dropped by the rate limit since start (all sites). */
uint64_t log_dropped_total(void);

#endif
