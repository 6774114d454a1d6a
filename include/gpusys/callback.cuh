/* SPDX-License-Identifier: MIT */
/*
 * Calling the program's own host functions from kernels (user host
 * callbacks, include/gpusys/callback.h; docs/CALLS.md). Included by
 * device.cuh.
 *
 * Typed (C++), checked at compile time against the handle's signature:
 *
 *     constexpr gpusys_callback<float(int, float)> scale{0x8001};
 *     gpusys_result<float> r = gpusys_call<float>(dev, scale, i, x);
 *     if (r.err) ...; float y = r.value;            // or: float y = r;
 *     gpusys_future_t f = gpusys_call_async<float>(dev, scale, &y, i, x);
 *     gpusys_call_nowait(dev, scale, i, x);          // result not wanted
 *
 * Bytes in, bytes out (C style, any size up to 1 MiB per lane each way):
 *
 *     uint32_t got;
 *     int st = gpusys_call_bytes(dev, 0x8002, in, in_len, out, cap, &got);
 *
 * The lanes that reach a call together share one request (one round trip
 * to the pool of host threads); the callback runs once per lane. Errors:
 * -ENOSYS when nobody registered the opcode (or the program registered no
 * callback at all), -E2BIG for an argument above what was registered,
 * -ESHUTDOWN when the callback server has stopped (detach), or the
 * callback's own -errno.
 */
#ifndef GPUSYS_CALLBACK_CUH
#define GPUSYS_CALLBACK_CUH

#include <stdint.h>

#include <type_traits>

#include "gpusys/callback.h"
#include "gpusys/future.cuh"

/* A typed call's outcome: err 0 and value, or err < 0. */
template <class R> struct gpusys_result {
	R value;
	int err;
	__device__ operator R() const { return value; }
};
template <> struct gpusys_result<void> {
	int err;
};

/* ------------------------------------------------------------ bytes form */

static __device__ __forceinline__ gpusys_future_t gpusys_call_bytes_async(const gpusys_dev_t &dev, uint16_t opcode,
									  const void *in, uint32_t in_len, void *out,
									  uint32_t cap)
{
	return gpusys_future_detail::raw(dev, 1, opcode, 0, in, in_len, out, cap);
}

/* The lane's status (0 or -errno); *out_len (may be NULL): bytes received. */
static __device__ __forceinline__ int gpusys_call_bytes(const gpusys_dev_t &dev, uint16_t opcode, const void *in,
							uint32_t in_len, void *out, uint32_t cap, uint32_t *out_len)
{
	gpusys_future_t f = gpusys_future_detail::raw(dev, 1, opcode, 0, in, in_len, out, cap, 0);
	int r = (int)gpusys_wait(dev, f);
	if (out_len)
		*out_len = f.out_len;
	return r;
}

/* Fire-and-forget: 0 once sent, or -errno (-ENOSYS: no callback server). */
static __device__ __forceinline__ int gpusys_call_bytes_nowait(const gpusys_dev_t &dev, uint16_t opcode,
							       const void *in, uint32_t in_len)
{
	return (int)gpusys_future_detail::raw(dev, 1, opcode, GPUSYS_REQ_NOREPLY, in, in_len, 0, 0).result;
}

/* ------------------------------------------------------------ typed form */

namespace gpusys_cb_detail {

template <class... T> struct types {};

template <class From, class To> struct convertible_all;
template <> struct convertible_all<types<>, types<>> : std::true_type {};
template <class F, class... Fs, class T, class... Ts>
struct convertible_all<types<F, Fs...>, types<T, Ts...>>
	: std::integral_constant<bool, std::is_convertible<F, T>::value &&
					       convertible_all<types<Fs...>, types<Ts...>>::value> {};

/* Checks, then packs the arguments converted to the declared types. */
template <class R, class HR, class... A, class... Args>
static __device__ __forceinline__ gpusys_future_t start(const gpusys_dev_t &dev, gpusys_callback<HR(A...)> h,
							 uint16_t flags, int async, void *out, Args... args)
{
	static_assert(std::is_same<R, HR>::value, "gpusys_call<R>: R is not the callback's result type");
	static_assert(sizeof...(Args) == sizeof...(A), "gpusys_call: wrong number of arguments for this callback");
	static_assert(convertible_all<types<Args...>, types<A...>>::value,
		      "gpusys_call: an argument does not convert to the callback's parameter type");
	static_assert(all_trivial<A...>::value, "callback arguments must be trivially copyable");
	unsigned char buf[args_bytes<A...>() ? args_bytes<A...>() : 1];
	put(buf, 0, static_cast<A>(args)...);
	return gpusys_future_detail::raw(dev, 1, h.opcode, flags, buf, (uint32_t)args_bytes<A...>(), out,
					 (uint32_t)result_bytes<R>::value, async);
}

} /* namespace gpusys_cb_detail */

namespace gpusys_cb_detail {
template <class R, class V> static __device__ __forceinline__ void assign(gpusys_result<R> &r, const V &v)
{
	r.value = v;
}
template <class V> static __device__ __forceinline__ void assign(gpusys_result<void> &, const V &)
{
}
} /* namespace gpusys_cb_detail */

/* Synchronous typed call. */
template <class R, class HR, class... A, class... Args>
static __device__ __forceinline__ gpusys_result<R> gpusys_call(const gpusys_dev_t &dev, gpusys_callback<HR(A...)> h,
							       Args... args)
{
	gpusys_result<R> r;
	typename std::conditional<std::is_void<R>::value, char, R>::type v;
	gpusys_future_t f = gpusys_cb_detail::start<R>(dev, h, 0, 0, std::is_void<R>::value ? nullptr : (void *)&v,
							args...);
	long long e = gpusys_wait(dev, f);
	r.err = (int)e;
	if (!e && f.out_len != gpusys_cb_detail::result_bytes<R>::value)
		r.err = -EBADMSG; /* the host side answered something else */
	gpusys_cb_detail::assign(r, v);
	return r;
}

/* Asynchronous typed call: *out (unused for void) gets the result when the
 * future is waited; gpusys_wait gives 0 or -errno. */
template <class R, class HR, class... A, class... Args>
static __device__ __forceinline__ gpusys_future_t gpusys_call_async(const gpusys_dev_t &dev,
								    gpusys_callback<HR(A...)> h, R *out, Args... args)
{
	return gpusys_cb_detail::start<R>(dev, h, 0, 1, (void *)out, args...);
}

/* Fire-and-forget typed call (the result, if any, is not read). */
template <class HR, class... A, class... Args>
static __device__ __forceinline__ int gpusys_call_nowait(const gpusys_dev_t &dev, gpusys_callback<HR(A...)> h,
							 Args... args)
{
	return (int)gpusys_cb_detail::start<HR>(dev, h, GPUSYS_REQ_NOREPLY, 1, nullptr, args...).result;
}

#endif /* GPUSYS_CALLBACK_CUH */
