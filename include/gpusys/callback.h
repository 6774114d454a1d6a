/* SPDX-License-Identifier: MIT */
/*
 * User host callbacks: a program's own host functions, called from its
 * kernels (include/gpusys/callback.cuh) or from emulated warps.
 *
 * A callback is registered under a user opcode (GPUSYS_OP_USER_FIRST and
 * up) with the largest argument and result a lane sends and receives (at
 * most GPUSYS_MAX_LANE_PAYLOAD, 1 MiB) and a name. It runs in this process,
 * with its privileges, on a small pool of libgpusys threads, once per
 * calling lane. gpusysd never sees these calls: libgpusys serves them from a
 * channel of its own (docs/CALLS.md says why), so the daemon runs no client
 * code and a slow callback holds only its own pool thread.
 *
 *     static int add_one(void *user, const void *arg, uint32_t arg_len,
 *                        void *res, uint32_t res_cap, uint32_t *res_len)
 *     {
 *             int v;
 *             memcpy(&v, arg, sizeof(v));
 *             v++;
 *             memcpy(res, &v, sizeof(v));
 *             *res_len = sizeof(v);
 *             return 0;                        // the lane's status
 *     }
 *     struct gpusys_callback_desc d = { .opcode = 0x8001, .name = "add_one",
 *             .arg_max = 4, .res_max = 4, .fn = add_one };
 *     gpusys_register_callback(g, &d);
 *
 * A call of an opcode nobody registered fails with -ENOSYS; a lane whose
 * argument is larger than arg_max gets -E2BIG, one whose capacity is below
 * what the callback wrote -EMSGSIZE. Pool threads sleep when nothing is
 * asked (no CPU used while idle); while kernels may be in flight
 * (gpusys_device() to gpusys_synchronize()) one of them polls, napping when
 * there is no work, so the first call after a quiet is served within about
 * 0.1 ms, as the daemon's.
 */
#ifndef GPUSYS_CALLBACK_H
#define GPUSYS_CALLBACK_H

#include <stdint.h>

#include "gpusys/dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One lane's call. arg: arg_len bytes (<= arg_max); res: room for res_cap
 * bytes (<= res_max); set *res_len (0 on entry). Return 0 or -errno: the
 * lane's status. Runs on a pool thread; several lanes and calls run at once
 * on different threads. */
typedef int (*gpusys_callback_fn)(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap,
				  uint32_t *res_len);

struct gpusys_callback_desc {
	uint16_t opcode;   /* >= GPUSYS_OP_USER_FIRST */
	const char *name;  /* shown by tools; copied */
	uint32_t arg_max;  /* largest argument of a lane, bytes (<= 1 MiB) */
	uint32_t res_max;  /* largest result of a lane, bytes (<= 1 MiB) */
	gpusys_callback_fn fn;
	void *user;
};

/* The callback server: a channel of this process's own and its pool. */
struct gpusys_callbacks;

struct gpusys_callbacks_opts {
	uint32_t num_ports; /* 0: 64 */
	uint32_t threads;   /* pool threads that run callbacks; 0: 4 ($GPUSYS_CALLBACK_THREADS) */
};

/* A server whose channel is plain memory of this process (emulated warps;
 * libgpusys's CUDA side makes one for each attach that registers a
 * callback). 0, -EINVAL, -ENOMEM, or a thread creation error. */
int gpusys_callbacks_create(const struct gpusys_callbacks_opts *opts, struct gpusys_callbacks **ret);
/* Stop the pool (callbacks running are waited for) and free the channel.
 * Kernels or emulated warps using it must be done. */
void gpusys_callbacks_destroy(struct gpusys_callbacks *cb);

/* 0, -EINVAL (opcode outside the user range, no fn, sizes above 1 MiB),
 * -EEXIST (opcode taken), -ENOMEM. Callbacks may be added while calls are
 * served; they cannot be removed (until destroy). */
int gpusys_callbacks_register(struct gpusys_callbacks *cb, const struct gpusys_callback_desc *d);

/* The handle emulated warps use to call this server: give it to
 * gpusys_emu_set_callbacks(), or pass it to gpusys_emu_rpc() directly. */
const gpusys_dev_t *gpusys_callbacks_emu_dev(struct gpusys_callbacks *cb);

/* Calls may come until until_ns (CLOCK_MONOTONIC): keep the quick wake-up
 * (naps) until then; 0: none expected (sleep until woken). Wakes a sleeping
 * pool. libgpusys calls it from gpusys_device() and gpusys_synchronize(). */
void gpusys_callbacks_expect(struct gpusys_callbacks *cb, uint64_t until_ns);

/* For tools and tests: requests completed, callbacks running now, and
 * one registered callback by index (its name, opcode and calls so far;
 * -ENOENT past the last). */
uint64_t gpusys_callbacks_completed(const struct gpusys_callbacks *cb);
uint32_t gpusys_callbacks_running(const struct gpusys_callbacks *cb);
int gpusys_callbacks_info(const struct gpusys_callbacks *cb, unsigned index, const char **name, uint16_t *opcode,
			  uint64_t *calls);

/* The channel the server polls (host view), for the CUDA side. */
void *gpusys_callbacks_channel(const struct gpusys_callbacks *cb, uint64_t *ret_bytes);

#ifdef __cplusplus
}
#endif

#endif /* GPUSYS_CALLBACK_H */
