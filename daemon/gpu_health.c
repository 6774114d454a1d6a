/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gpus.h"
#include "daemon.h"
#include "gpu_health.h"
#include "util/log.h"

/* The few NVML entry points used, with their C ABI (nvml.h is not part of
 * the CUDA toolkit here; these have been stable since NVML 1). */
typedef int nvml_return;
typedef struct nvml_device *nvml_device;
typedef struct nvml_event_set *nvml_event_set;
struct nvml_event_data {
	nvml_device device;
	unsigned long long event_type;
	unsigned long long event_data; /* the Xid */
	unsigned int gpu_instance, compute_instance;
};
enum {
	NVML_OK = 0,
	NVML_TIMEOUT = 10,
	NVML_GPU_IS_LOST = 15,
	NVML_EVENT_XID_CRITICAL = 0x8,
};

static struct health {
	bool started;
	atomic_bool stop;
	pthread_t thread;
	struct daemon *d;
	struct event_base *base;
	void *lib;
	nvml_return (*init)(void);
	nvml_return (*by_uuid)(const char *, nvml_device *);
	nvml_return (*set_create)(nvml_event_set *);
	nvml_return (*register_events)(nvml_device, unsigned long long, nvml_event_set);
	nvml_return (*set_wait)(nvml_event_set, struct nvml_event_data *, unsigned int);
	nvml_return (*pstate)(nvml_device, int *);
	unsigned n;
	struct gpu *gpu[GPUS_MAX];
	nvml_device dev[GPUS_MAX];
	bool reported[GPUS_MAX];
} health_state;

bool gpu_health_xid_is_fatal(unsigned long long xid)
{
	/* Device-level failures from NVIDIA's Xid catalogue: double-bit ECC
	 * (48), firmware/PMU halts (61, 62), row-remap failure (64), NVLink
	 * (74), fell off the bus (79), uncontained ECC (95), GSP timeouts
	 * (119, 120), ECC unrecoverable (140). */
	static const unsigned fatal[] = { 48, 61, 62, 64, 74, 79, 95, 119, 120, 140 };
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		if (xid == fatal[i])
			return true;
	return false;
}

struct failure {
	struct gpu *gpu;
	char why[96];
};

static void on_failure(evutil_socket_t fd, short what, void *arg)
{
	struct failure *f = arg;
	(void)fd;
	(void)what;
	health_state.d->fail_gpu(health_state.d, f->gpu, f->why);
	free(f);
}

/* From the watch thread: hand the failure to the main thread. */
static void report(unsigned i, const char *why)
{
	if (health_state.reported[i])
		return;
	struct failure *f = malloc(sizeof(*f));
	if (!f)
		return;
	health_state.reported[i] = true;
	f->gpu = health_state.gpu[i];
	snprintf(f->why, sizeof(f->why), "%s", why);
	if (event_base_once(health_state.base, -1, EV_TIMEOUT, on_failure, f, &(struct timeval){ 0, 0 }) < 0)
		free(f);
}

static void *watch_main(void *arg)
{
	nvml_event_set set = arg;
	while (!atomic_load(&health_state.stop)) {
		struct nvml_event_data e;
		memset(&e, 0, sizeof(e));
		nvml_return r = set ? health_state.set_wait(set, &e, 1000) : NVML_TIMEOUT;
		if (!set)
			sleep(1);
		if (r == NVML_OK && (e.event_type & NVML_EVENT_XID_CRITICAL) && gpu_health_xid_is_fatal(e.event_data)) {
			for (unsigned i = 0; i < health_state.n; i++)
				if (health_state.dev[i] == e.device) {
					char why[64];
					snprintf(why, sizeof(why), "Xid %llu", e.event_data);
					report(i, why);
				}
		} else if (r == NVML_OK && (e.event_type & NVML_EVENT_XID_CRITICAL)) {
			log_info("gpu health: Xid %llu (a program's own fault): its clients are not ended", e.event_data);
		}
		for (unsigned i = 0; i < health_state.n; i++) {
			int ps;
			if (health_state.pstate(health_state.dev[i], &ps) == NVML_GPU_IS_LOST)
				report(i, "the GPU is lost (fell off the bus)");
		}
	}
	return NULL;
}

void gpu_health_watch(struct daemon *d)
{
	if (health_state.started)
		return;
	health_state.started = true;
	health_state.d = d;
	health_state.base = d->base;
	health_state.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!health_state.lib) {
		log_warn("gpu health: no NVML (%s): a failed GPU's clients end only through their own CUDA errors",
			 dlerror());
		return;
	}
	*(void **)&health_state.init = dlsym(health_state.lib, "nvmlInit_v2");
	*(void **)&health_state.by_uuid = dlsym(health_state.lib, "nvmlDeviceGetHandleByUUID");
	*(void **)&health_state.set_create = dlsym(health_state.lib, "nvmlEventSetCreate");
	*(void **)&health_state.register_events = dlsym(health_state.lib, "nvmlDeviceRegisterEvents");
	*(void **)&health_state.set_wait = dlsym(health_state.lib, "nvmlEventSetWait_v2");
	*(void **)&health_state.pstate = dlsym(health_state.lib, "nvmlDeviceGetPerformanceState");
	if (!health_state.init || !health_state.by_uuid || !health_state.set_create || !health_state.register_events || !health_state.set_wait || !health_state.pstate ||
	    health_state.init() != NVML_OK) {
		log_warn("gpu health: NVML cannot be used: a failed GPU's clients end only through their own CUDA "
			 "errors");
		return;
	}
	nvml_event_set set = NULL;
	if (health_state.set_create(&set) != NVML_OK)
		set = NULL;
	unsigned n = gpus_count();
	for (unsigned i = 0; i < n; i++) {
		struct gpu *g = gpus_at(i);
		if (g->ordinal < 0 || health_state.by_uuid(g->uuid_text, &health_state.dev[health_state.n]) != NVML_OK)
			continue;
		if (set && health_state.register_events(health_state.dev[health_state.n], NVML_EVENT_XID_CRITICAL, set) != NVML_OK)
			log_warn("gpu health: no Xid events for %s (lost-GPU checks only)", g->uuid_text);
		health_state.gpu[health_state.n++] = g;
	}
	if (pthread_create(&health_state.thread, NULL, watch_main, set) != 0) {
		log_warn("gpu health: cannot start the watch thread");
		return;
	}
	log_info("gpu health: watching %u GPU%s for Xid errors and loss (NVML)", health_state.n, health_state.n == 1 ? "" : "s");
}

void gpu_health_stop(void)
{
	if (!health_state.thread)
		return;
	atomic_store(&health_state.stop, true);
	pthread_join(health_state.thread, NULL);
	health_state.thread = 0;
}
