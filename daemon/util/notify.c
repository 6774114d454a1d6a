/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "util/notify.h"

static char last_status[128];
static bool stopping_sent;
static bool watchdog; /* WatchdogSec= is set for us */

static void at_exit(void)
{
	notify_stopping();
}

void notify_init(void)
{
	uint64_t usec = 0;
	atexit(at_exit);
	watchdog = sd_watchdog_enabled(0, &usec) > 0;
}

void notify_watchdog(void)
{
	if (watchdog)
		sd_notify(0, "WATCHDOG=1");
}

void notify_ready(void)
{
	sd_notify(0, "READY=1");
}

void notify_stopping(void)
{
	if (stopping_sent)
		return;
	stopping_sent = true;
	sd_notify(0, "STOPPING=1");
}

void notify_status(unsigned clients, uint64_t requests)
{
	char buf[sizeof(last_status)];

	snprintf(buf, sizeof(buf), "STATUS=%u client%s attached, %llu requests served", clients,
		 clients == 1 ? "" : "s", (unsigned long long)requests);
	if (!strcmp(buf, last_status))
		return;
	memcpy(last_status, buf, sizeof(buf));
	sd_notify(0, buf);
}

void notify_reloading(void)
{
	/* Type=notify-reload wants MONOTONIC_USEC with RELOADING=1. */
	struct timespec ts;
	char buf[64];
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
		 (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000u);
	sd_notify(0, buf);
}
