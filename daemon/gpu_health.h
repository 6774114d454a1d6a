/* SPDX-License-Identifier: MIT */
/*
 * A GPU that fails (falls off the bus, or an Xid that ends the device rather
 * than one program) fails that GPU's clients, never the others.
 *
 * gpu_health_watch starts, once, a thread that asks NVML (libnvidia-ml.so.1,
 * loaded at run time like libcuda; without it the daemon logs that it cannot
 * watch and goes on) for Xid events of the daemon's real GPUs and polls each
 * for "GPU is lost" once a second. What it finds reaches the main thread as a
 * call of the daemon's fail_gpu hook (daemon.h). Xids that one program's kernel causes
 * (13, 31, 43: a fault in its own code) are that program's business: its own
 * CUDA calls report them, and the daemon does not end the GPU's other clients.
 */
#ifndef GPUSYSD_GPU_HEALTH_H
#define GPUSYSD_GPU_HEALTH_H

#include <stdbool.h>

struct daemon;

/* Start watching the GPUs in the table (core/gpus.h), once; later calls do
 * nothing. Main thread. */
void gpu_health_watch(struct daemon *d);
/* Stop the watch thread (at exit). */
void gpu_health_stop(void);
/* Whether an Xid ends the device for every program using it. */
bool gpu_health_xid_is_fatal(unsigned long long xid);

#endif
