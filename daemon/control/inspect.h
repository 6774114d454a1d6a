/* SPDX-License-Identifier: MIT */
/*
 * What gpusysctl ports and gpusysctl latency show: the ports busy now, and
 * per opcode the requests, errors, bytes and latency counted by the core
 * (core/stats.h), as control-protocol replies.
 */
#ifndef GPUSYSD_CONTROL_INSPECT_H
#define GPUSYSD_CONTROL_INSPECT_H

#include <jansson.h>

#include "control/control.h"
#include "core/registry.h"

/* {"ports": [{client, pid, comm, port, opcode, name, phase, later, age_us}...],
 *  "busy": N, "truncated": bool}: at most limit entries, oldest first; of
 * who's own clients only, unless who is an admin (control.h). */
json_t *inspect_ports(struct registry *reg, unsigned limit, const struct control_peer *who);

/* {"ops": [{opcode, name, count, errors, bytes_in, bytes_out, mean_us,
 * p50_us, p90_us, p99_us, p999_us, max_us, histogram: [[lo_ns, hi_ns,
 * count]...], errnos: {"ECONNRESET": n...} where the service counts its
 * errors by errno}...], "timed": bool, "shown": "all"} for every opcode served
 * at least once, daemon-wide, when who is an admin. Anyone else gets
 * "shown": "own" and per opcode only {opcode, name, count, errors,
 * bytes_in, bytes_out} of their own attached clients: the latency
 * histograms are daemon-wide, every user's requests together. */
json_t *inspect_latency(struct registry *reg, const struct control_peer *who);
/* Handles whose bulk calls moved bytes in the last window_ms, of the
 * asker's own clients unless an admin asks. */
json_t *inspect_transfers(struct registry *reg, unsigned window_ms, const struct control_peer *who);

/* {"pollers": [{index, passes, empty_passes, ports_scanned, found, served,
 * collisions, held, hot_hits, rung_served, dozes, deep_dozes, wakeups, parks,
 * helper_wakes, timed_passes, timed_pass_ns, timed_serve_ns,
 * timed_answer_ns, timed_count_ns, timed_served,
 * timed_found}...], "time_every": N, "timed": bool}: each poller's counters
 * since start (core/poller.h): every user's requests together, so the
 * caller answers it to admins only (status.c). */
struct pollers;
/* One poller group's entries appended to list (made by inspect_pollers_new)
 * with "index" counting on from *index, each with its group's GPU ("gpu":
 * UUID, or null for the default group), its place in the group
 * ("group_index"), its progress slot and its CPUs. 0 or -ENOMEM. */
int inspect_pollers_add(json_t *list, unsigned *index, const struct pollers *ps, const char *gpu_uuid,
			const char *cpus);
/* The reply around that list. */
json_t *inspect_pollers_reply(json_t *list);

#endif
