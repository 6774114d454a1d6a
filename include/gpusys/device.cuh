/* SPDX-License-Identifier: MIT */
/*
 * gpusys from CUDA kernels. Include this in .cu files; pass the handle from
 * gpusys_device() (include/gpusys/gpusys.h) to the kernel by value.
 *
 * Every call is warp-aggregated: the lanes that reach it together
 * (__activemask()) share one port and one round trip to gpusysd. Divergent
 * lanes simply make separate calls; partial warps are fine. A call returns 0
 * or a negative errno: -ESHUTDOWN when the daemon has gone (or the host
 * library saw it go), -EMSGSIZE when the response did not fit, -ENOSYS for an
 * opcode the daemon does not serve.
 *
 * The protocol code is device/port_client.h, the same code the host-lane
 * emulator runs in CI.
 */
#ifndef GPUSYS_DEVICE_CUH
#define GPUSYS_DEVICE_CUH

#include <stdint.h>

#include "gpusys/abi.h"
#include "gpusys/dev.h"
#include "gpusys/device/port_client.h"
#include "gpusys/future.cuh"

/* One call of opcode with this lane's payload; the raw form of the helpers
 * below. out_len and lane_status receive this lane's results. */
static __device__ __forceinline__ int gpusys_call(gpusys_dev_t dev, uint16_t opcode, const void *in,
						  uint32_t in_len, void *out, uint32_t out_cap,
						  uint32_t *out_len)
{
	const uint64_t mask = (uint64_t)__activemask();
	const void *inv[1] = { in };
	void *outv[1] = { out };
	uint32_t lenv[1] = { in_len }, capv[1] = { out_cap }, got[1] = { 0 };
	int32_t st[1] = { 0 };

	int rc = gpusys_rpc(&dev, opcode, 0, mask, inv, lenv, outv, capv, got, st);
	if (out_len)
		*out_len = got[0];
	return rc ? rc : st[0];
}

/* A round trip that does nothing: 0, or -ESHUTDOWN. */
static __device__ __forceinline__ int gpusys_noop(gpusys_dev_t dev)
{
	return gpusys_call(dev, GPUSYS_OP_NOOP, 0, 0, 0, 0, 0);
}

/* Send len bytes and receive them back into out (cap bytes). *out_len (may be
 * NULL) gets the bytes received. 0, -EMSGSIZE (cap < len), -E2BIG
 * (len > GPUSYS_MAX_LANE_PAYLOAD), -ESHUTDOWN. */
static __device__ __forceinline__ int gpusys_echo(gpusys_dev_t dev, const void *in, uint32_t len, void *out,
						  uint32_t cap, uint32_t *out_len)
{
	return gpusys_call(dev, GPUSYS_OP_ECHO, in, len, out, cap, out_len);
}

/* ------------------------------------------------ asynchronous forms */

/* NOOP as a future (gpusys_wait gives 0 or -ESHUTDOWN). */
static __device__ __forceinline__ gpusys_future_t gpusys_noop_async(const gpusys_dev_t &dev)
{
	return gpusys_future_detail::raw(dev, 0, GPUSYS_OP_NOOP, 0, 0, 0, 0, 0);
}

/* ECHO as a future: out (cap bytes) must stay valid until it is waited;
 * gpusys_future_len() then gives the bytes received. */
static __device__ __forceinline__ gpusys_future_t gpusys_echo_async(const gpusys_dev_t &dev, const void *in,
								    uint32_t len, void *out, uint32_t cap)
{
	return gpusys_future_detail::raw(dev, 0, GPUSYS_OP_ECHO, 0, in, len, out, cap);
}

/* Any daemon opcode, raw, as a future. */
static __device__ __forceinline__ gpusys_future_t gpusys_call_async(const gpusys_dev_t &dev, uint16_t opcode,
								    const void *in, uint32_t in_len, void *out,
								    uint32_t out_cap)
{
	return gpusys_future_detail::raw(dev, 0, opcode, 0, in, in_len, out, out_cap);
}

/* gpusys_printf, gpusys_fprintf, gpusys_puts (the print service). */
#include "gpusys/print.cuh"

/* gpusys_call<R>(dev, handle, args...) and the bytes forms (user host
 * callbacks). */
#include "gpusys/callback.cuh"

#endif /* GPUSYS_DEVICE_CUH */
