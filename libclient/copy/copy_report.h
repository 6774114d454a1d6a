/* SPDX-License-Identifier: MIT */
/*
 * A finished copy, told to gpusysd (common/wire.h, GPUSYS_REPORT_COPY) so
 * that gpusysctl can show a client's copies: the copy engine's `finished`
 * hook (copy_engine.h), sending through the attachments' connections
 * (libclient/attach/report.h). Without an attachment to a daemon that takes
 * reports, nothing is sent or counted; a report the socket had no room for
 * is dropped and counted, never waited for.
 */
#ifndef GPUSYS_COPY_REPORT_H
#define GPUSYS_COPY_REPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire.h"
#include "copy_engine.h"

struct copy_reporter {
	int cuda_device;    /* the attachment whose connection carries them (else any) */
	atomic_bool on;     /* off while gpusys_copy_open measures: its copies are its own */
	atomic_uint_fast64_t sent, dropped;
};

void copy_reporter_init(struct copy_reporter *r, int cuda_device, bool on);

/* The engine's finished hook; arg is a struct copy_reporter. */
void copy_report_job(void *arg, const struct copy_job_summary *s);

/* The report of a finished job. */
void copy_report_encode(const struct copy_job_summary *s, struct gpusys_report *ret);

#endif
