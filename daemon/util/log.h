/* SPDX-License-Identifier: MIT */
/*
 * Logging to stderr. Under systemd stderr goes to the journal, which reads a
 * "<N>" priority prefix; on a terminal that prefix would only be noise, so
 * it is written only when JOURNAL_STREAM says stderr is the journal.
 */
#ifndef GPUSYSD_LOG_H
#define GPUSYSD_LOG_H

#include <syslog.h>

void log_init(void);
void log_msg(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

/* Raise the threshold (LOG_DEBUG shows everything). */
void log_set_level(int priority);

#endif
