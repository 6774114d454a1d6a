/* SPDX-License-Identifier: MIT */
/*
 * libgpusys, inside: reports to gpusysd (common/wire.h, struct
 * gpusys_report) over the connections of this process's attachments. The
 * attach adds a connection whose welcome said the daemon takes reports
 * (wire_version >= GPUSYS_WIRE_REPORTS) and removes it before closing it;
 * whatever thread finished something sends its report.
 *
 * Sending never waits and never fails the caller: with the socket full
 * (the daemon is behind) the report is dropped and the caller counts it.
 * Nothing is ever read here: the watchdogs (dev_handle.c, cuda.c) still
 * own what the daemon sends (only a goodbye) and the hang-up.
 */
#ifndef GPUSYS_LIBCLIENT_REPORT_H
#define GPUSYS_LIBCLIENT_REPORT_H

#include "common/wire.h"

/* The most connections that take reports at once; more attachments still
 * work, their reports going to the others. */
#define GPUSYS_REPORT_CONNS 16

/* sock: an attachment's connection (it stays the caller's), cuda_device:
 * its ordinal in this process's numbering, or -1. 0, or -ENOSPC. */
int gpusys_report_conn_add(int sock, int cuda_device);
/* Before sock is closed: no report is being sent on it when this returns. */
void gpusys_report_conn_remove(int sock);

/* Send r on the connection of cuda_device's attachment, else on any.
 * 0 sent; -ENOTCONN no attachment takes reports; -EAGAIN the socket was
 * full: dropped; another -errno: the connection failed (dropped too). */
int gpusys_report_send(const struct gpusys_report *r, int cuda_device);

#endif
