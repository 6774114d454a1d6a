/* SPDX-License-Identifier: MIT */
/* The systemd service manager protocol (sd_notify). Every call is a no-op
 * when NOTIFY_SOCKET is unset, so gpusysd runs the same outside systemd. */
#ifndef GPUSYSD_NOTIFY_H
#define GPUSYSD_NOTIFY_H

#include <stdint.h>

/* Arrange for STOPPING=1 to be sent on every exit path (atexit). */
void notify_init(void);
void notify_ready(void);
/* The main loop is alive (WatchdogSec=): sent from the 1 s status timer, so
 * a main thread stuck anywhere (a hung CUDA call, a deadlock) stops it and
 * systemd restarts the service. Nothing when no watchdog is set. */
void notify_watchdog(void);
void notify_stopping(void);
/* A reload begins (SIGHUP); notify_ready says it is done. */
void notify_reloading(void);
/* STATUS=, sent only when the text changes. */
void notify_status(unsigned clients, uint64_t requests);

#endif
