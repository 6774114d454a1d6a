/* SPDX-License-Identifier: MIT */
/* Stopping for a restart without losing clients (docs/RESTART.md). */
#ifndef GPUSYSD_HANDOVER_H
#define GPUSYSD_HANDOVER_H

struct daemon;

/* On the main thread, after the loop ended on SIGTERM with
 * restart_grace_ms set: stop starting requests, let those under way finish
 * (restart_drain_ms), stop the pollers and every group's workers
 * (groups_stop and groups_stop_workers: stop() calling them again does
 * nothing), refuse what is still receiving (-ECONNABORTED,
 * not run) and mark every channel that drained HANDOVER. A client with a
 * request that ran but did not finish in time is not handed over: its
 * channel is marked STOPPED (-ESHUTDOWN, as without a handover). */
void daemon_handover(struct daemon *d);

#endif
