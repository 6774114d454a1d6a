/* SPDX-License-Identifier: MIT */
/*
 * Futures: asynchronous calls from CUDA kernels (docs/CALLS.md).
 *
 *     gpusys_future_t f = gpusys_pread_async(dev, h, buf, n, off);
 *     ... compute ...
 *     long long got = gpusys_wait(dev, f);     // bytes read or -errno
 *
 * Every call of device.cuh, print.cuh, file.cuh and callback.cuh has an
 * _async form that sends the request and returns a gpusys_future_t without
 * waiting for the answer. gpusys_test() says whether it has come (and, if
 * so, takes it); gpusys_wait() waits for it; gpusys_wait_all() and
 * gpusys_wait_any() for several. The result is what the synchronous call
 * returns; response data lands in the caller's buffer, which must stay
 * valid until the future is waited (or tested true).
 *
 * Rules (device/port_client.h explains them):
 *  - A future is tested and waited by the lanes that started it, together
 *    (a warp collective, like the call itself), before the kernel ends:
 *    it holds a port of the channel until then. It is a plain value: copy
 *    it, keep it in an array, pass it by reference.
 *  - A warp holds at most GPUSYS_FUTURES_PER_WARP (8) futures, and futures
 *    use only three quarters of the ports. A call past either limit is made
 *    synchronously (the warp waits for it, then gets a finished future):
 *    it never fails and never deadlocks, even when every resident warp
 *    does the same. gpusys_future_was_sync() tells.
 *  - Fire-and-forget (_nowait forms: prints, closes, callbacks whose result
 *    is not wanted) needs no future: the port is released at once and the
 *    daemon's answer is never read. gpusys_synchronize() and gpusys_query()
 *    on the host count them too.
 */
#ifndef GPUSYS_FUTURE_CUH
#define GPUSYS_FUTURE_CUH

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "gpusys/device/port_client.h"

/* How a future's response becomes its result. */
enum gpusys_future_kind {
	GPUSYS_FUTURE_RAW = 0,  /* status of the lane (or of the call); bytes in out */
	GPUSYS_FUTURE_FILE = 1, /* a file call: value, or bytes for data calls */
};

typedef struct gpusys_future {
	struct gpusys_rpc_pending pd;
	void *out;          /* where the response goes (NULL: nowhere) */
	uint32_t cap;
	uint32_t out_len;   /* bytes received, once finished */
	long long result;   /* once finished */
	long long val;      /* file calls: the daemon's 64-bit value */
	int32_t early;      /* an error known at the start (a line not packed) */
	uint8_t kind;       /* enum gpusys_future_kind */
	uint8_t file_data;  /* file call returning data: result = bytes */
	uint8_t callbacks;  /* sent to the user callback channel (dev.callbacks) */
	uint8_t waited;     /* returned by gpusys_wait_any */
} gpusys_future_t;

namespace gpusys_future_detail {

static __device__ __forceinline__ const gpusys_dev_t *dev_of(const gpusys_dev_t &dev, const gpusys_future_t &f)
{
	return f.callbacks ? dev.callbacks : &dev;
}

static __device__ __forceinline__ void init(gpusys_future_t &f, uint8_t kind, void *out, uint32_t cap)
{
	f.out = out;
	f.cap = cap;
	f.out_len = 0;
	f.result = 0;
	f.val = 0;
	f.early = 0;
	f.kind = kind;
	f.file_data = 0;
	f.callbacks = 0;
	f.waited = 0;
}

/* Read the response (waiting for it if need be) and set the result. */
static __device__ void finish(const gpusys_dev_t &dev, gpusys_future_t &f)
{
	const gpusys_dev_t *d = dev_of(dev, f);
	int file_val = f.kind == GPUSYS_FUTURE_FILE && !f.file_data;
	void *dst[1] = { file_val ? (void *)&f.val : f.out };
	uint32_t cap[1] = { file_val ? (uint32_t)sizeof(f.val) : f.cap };
	uint32_t got[1] = { 0 };
	int32_t st[1] = { 0 };
	int rc = gpusys_rpc_finish(d, &f.pd, dst, cap, got, st);
	f.out_len = got[0];
	if (f.early)
		f.result = f.early;
	else if (rc)
		f.result = rc;
	else if (f.kind == GPUSYS_FUTURE_FILE)
		f.result = st[0] < 0 ? st[0] : f.file_data ? (long long)got[0] : f.val;
	else
		f.result = st[0];
}

/* After gpusys_rpc_start: a call that was made synchronously, failed at
 * once or was fire-and-forget is finished now. */
static __device__ __forceinline__ void started(const gpusys_dev_t &dev, gpusys_future_t &f)
{
	if (f.pd.phase != GPUSYS_RPC_SENT || f.pd.sync)
		finish(dev, f);
}

/* A raw call as a future: the payload in, the response to out. async 0:
 * the synchronous path (no per-warp count, any port), for the synchronous
 * forms that wait at once. */
static __device__ __forceinline__ gpusys_future_t raw(const gpusys_dev_t &dev, int on_callbacks, uint16_t opcode,
						      uint16_t flags, const void *in, uint32_t in_len, void *out,
						      uint32_t cap, int async = 1)
{
	gpusys_future_t f;
	init(f, GPUSYS_FUTURE_RAW, out, cap);
	f.callbacks = (uint8_t)on_callbacks;
	const uint64_t mask = gpusys_lane_active_mask();
	if (on_callbacks && !dev.callbacks) {
		/* No callback server: the opcode is nobody's. */
		f.pd.mask = mask;
		f.pd.phase = GPUSYS_RPC_DONE;
		f.pd.rc = -ENOSYS;
		f.pd.warp_slot = ~0u;
		f.pd.sync = 0;
		f.callbacks = 0;
		f.result = -ENOSYS;
		return f;
	}
	const void *inv[1] = { in };
	uint32_t lenv[1] = { in_len }, capv[1] = { cap };
	gpusys_rpc_start(dev_of(dev, f), opcode, flags, mask, inv, lenv, capv, async, &f.pd);
	started(dev, f);
	return f;
}

} /* namespace gpusys_future_detail */

/* true when the answer has come (it is then taken: the result is ready and
 * the port released); never waits. */
static __device__ __forceinline__ bool gpusys_test(const gpusys_dev_t &dev, gpusys_future_t &f)
{
	if (f.pd.phase != GPUSYS_RPC_SENT)
		return true;
	gpusys_lane_sync(f.pd.mask);
	if (!gpusys_rpc_test(gpusys_future_detail::dev_of(dev, f), &f.pd))
		return false;
	gpusys_future_detail::finish(dev, f);
	return true;
}

/* Wait for the answer; the call's result (what the synchronous form
 * returns). Again on a finished future: the same result. */
static __device__ __forceinline__ long long gpusys_wait(const gpusys_dev_t &dev, gpusys_future_t &f)
{
	if (f.pd.phase == GPUSYS_RPC_SENT) {
		gpusys_lane_sync(f.pd.mask);
		gpusys_future_detail::finish(dev, f);
	}
	return f.result;
}

/* Wait for all n; 0, or the first negative result. */
static __device__ long long gpusys_wait_all(const gpusys_dev_t &dev, gpusys_future_t *f, unsigned n)
{
	long long first = 0;
	for (unsigned i = 0; i < n; i++) {
		long long r = gpusys_wait(dev, f[i]);
		if (r < 0 && !first)
			first = r;
	}
	return first;
}

/* Wait until one of the n not yet returned by this function is done; its
 * index (its result: gpusys_wait(dev, f[i]), which no longer waits), or -1
 * when every one was returned already. */
static __device__ int gpusys_wait_any(const gpusys_dev_t &dev, gpusys_future_t *f, unsigned n)
{
	for (uint32_t spins = 1;; spins++) {
		unsigned left = 0;
		for (unsigned i = 0; i < n; i++) {
			if (f[i].waited)
				continue;
			left++;
			if (gpusys_test(dev, f[i])) {
				f[i].waited = 1;
				return (int)i;
			}
		}
		if (!left)
			return -1;
	}
}

/* Pin a computation between a start and a wait. Work that touches no
 * memory (register arithmetic) has no dependence on the calls, so the
 * compiler is free to move it past the gpusys_wait (to where its result is
 * used) or in front of the start, and the call would then not overlap it.
 * gpusys_materialize(v) after the work makes v be computed at that point in
 * program order; a store of the result to memory does the same. */
template <class T> static __device__ __forceinline__ void gpusys_materialize(T &v)
{
	asm volatile("" ::"l"(&v) : "memory");
}

/* Bytes the answer carried (echo, callbacks), once finished. */
static __device__ __forceinline__ uint32_t gpusys_future_len(const gpusys_future_t &f)
{
	return f.out_len;
}

/* Whether the call was made synchronously (the warp at its bound, or no
 * asynchronous port free): it was already finished when it returned. */
static __device__ __forceinline__ bool gpusys_future_was_sync(const gpusys_future_t &f)
{
	return f.pd.sync != 0;
}

#endif /* GPUSYS_FUTURE_CUH */
