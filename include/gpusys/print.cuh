/* SPDX-License-Identifier: MIT */
/*
 * printf from CUDA kernels through gpusysd.
 *
 *     #include "gpusys/print.cuh"
 *     __global__ void k(gpusys_dev_t dev, const float *x) {
 *         gpusys_printf(dev, "block %d: %.3f\n", blockIdx.x, x[blockIdx.x]);
 *     }
 *
 * The line goes to the client process's own stdout (gpusys_fprintf: stdout or
 * stderr), the descriptors libgpusys passed to gpusysd at attach, so it
 * reaches the terminal, file or pipe the program's output goes to. It appears
 * while the kernel runs, not at synchronisation, and a line the call returned
 * for is written even if the kernel traps or the process dies right after.
 *
 * Formatting is glibc's own printf on the host: every conversion prints
 * exactly what printf prints for the same values (%d %i %u %x %X %o %c %s %p
 * %f %F %e %E %g %G %a %A, flags, width, precision, '*', length modifiers;
 * include/gpusys/print.h lists what is refused: %n, %m, wide characters,
 * positional arguments). Arguments are packed with their C++ types: char,
 * short, int (and bool) travel as int; the unsigned ones as unsigned; long and
 * long long as 64 bits; float as double (as in C varargs); char * as the
 * string's bytes when printed with %s (at most GPUSYS_PRINT_MAX_STR bytes),
 * any pointer as its address otherwise. Types that printf cannot take
 * (structs...) do not compile.
 *
 * Calls are warp-aggregated: the lanes that reach a call together send their
 * lines in one request (one PCIe round trip for up to 32 lines); lines longer
 * than a slot stream automatically. Lines of one lane keep their order and no
 * line is ever split by another. Each returns the bytes printed, or a
 * negative errno (-EINVAL for a refused format, -ESHUTDOWN when the daemon has
 * gone). When the daemon's buffer for this process is full, the call waits
 * (backing off) until it drains: a kernel can print faster than a terminal
 * shows, but never loses lines.
 *
 * Lines of more than GPUSYS_PRINT_LOCAL_BYTES of record (a long %s...) are
 * packed in device-heap memory (cudaLimitMallocHeapSize).
 */
#ifndef GPUSYS_PRINT_CUH
#define GPUSYS_PRINT_CUH

#include <stdint.h>

#include <type_traits>

#include "gpusys/dev.h"
#include "gpusys/print.h"
#include "gpusys/device/print_pack.h"
#include "gpusys/future.cuh"

namespace gpusys_print_detail {

static __device__ __forceinline__ gpusys_print_arg make(uint32_t tag, uint64_t bits)
{
	gpusys_print_arg a;
	a.tag = tag;
	a.reserved = 0;
	a.v.u = bits;
	return a;
}

static __device__ __forceinline__ gpusys_print_arg make_f(double d)
{
	gpusys_print_arg a;
	a.tag = GPUSYS_PRINT_F64;
	a.reserved = 0;
	a.v.d = d;
	return a;
}

static __device__ __forceinline__ gpusys_print_arg arg(bool v) { return make(GPUSYS_PRINT_I32, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(char v) { return make(GPUSYS_PRINT_I32, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(signed char v) { return make(GPUSYS_PRINT_I32, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(short v) { return make(GPUSYS_PRINT_I32, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(int v) { return make(GPUSYS_PRINT_I32, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned char v) { return make(GPUSYS_PRINT_U32, v); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned short v) { return make(GPUSYS_PRINT_U32, v); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned v) { return make(GPUSYS_PRINT_U32, v); }
static __device__ __forceinline__ gpusys_print_arg arg(long v) { return make(GPUSYS_PRINT_I64, (uint64_t)(int64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(long long v) { return make(GPUSYS_PRINT_I64, (uint64_t)v); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned long v) { return make(GPUSYS_PRINT_U64, v); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned long long v) { return make(GPUSYS_PRINT_U64, v); }
static __device__ __forceinline__ gpusys_print_arg arg(float v) { return make_f(v); }
static __device__ __forceinline__ gpusys_print_arg arg(double v) { return make_f(v); }
static __device__ __forceinline__ gpusys_print_arg arg(const char *s)
{
	gpusys_print_arg a = make(GPUSYS_PRINT_STR, 0);
	a.v.s = s;
	return a;
}
static __device__ __forceinline__ gpusys_print_arg arg(char *s) { return arg((const char *)s); }
static __device__ __forceinline__ gpusys_print_arg arg(const signed char *s) { return arg((const char *)s); }
static __device__ __forceinline__ gpusys_print_arg arg(const unsigned char *s) { return arg((const char *)s); }
static __device__ __forceinline__ gpusys_print_arg arg(signed char *s) { return arg((const char *)s); }
static __device__ __forceinline__ gpusys_print_arg arg(unsigned char *s) { return arg((const char *)s); }
static __device__ __forceinline__ gpusys_print_arg arg(decltype(nullptr)) { return make(GPUSYS_PRINT_PTR, 0); }
template <class T>
static __device__ __forceinline__ gpusys_print_arg arg(T *p)
{
	return make(GPUSYS_PRINT_PTR, (uint64_t)(uintptr_t)p);
}
/* Enums print as their underlying integer. */
template <class T, typename std::enable_if<std::is_enum<T>::value, int>::type = 0>
static __device__ __forceinline__ gpusys_print_arg arg(T v)
{
	return arg(static_cast<typename std::underlying_type<T>::type>(v));
}

/* One lane's line; the warp's lanes that are here together share the call.
 * Out of line so that a kernel with many calls stays small. */
static __device__ __noinline__ int print(const gpusys_dev_t &dev, uint32_t stream, const char *fmt,
					 const gpusys_print_arg *args, uint32_t nargs)
{
	const uint64_t mask = gpusys_lane_active_mask();
	uint32_t st[1] = { stream }, n[1] = { nargs };
	const char *f[1] = { fmt };
	const gpusys_print_arg *a[1] = { args };
	int32_t ret[1] = { 0 };

	gpusys_print_lanes(&dev, mask, st, f, a, n, ret);
	return ret[0];
}

} /* namespace gpusys_print_detail */

/* Print to the client's stdout (GPUSYS_PRINT_STDOUT) or stderr
 * (GPUSYS_PRINT_STDERR). Bytes printed, or -errno. */
template <typename... Args>
static __device__ __forceinline__ int gpusys_fprintf(const gpusys_dev_t &dev, int stream, const char *fmt,
						     Args... args)
{
	static_assert(sizeof...(Args) <= GPUSYS_PRINT_MAX_ARGS, "too many arguments for gpusys_printf");
	const gpusys_print_arg a[sizeof...(Args) + 1] = { gpusys_print_detail::arg(args)...,
							 gpusys_print_detail::make(0, 0) };
	return gpusys_print_detail::print(dev, (uint32_t)stream, fmt, a, (uint32_t)sizeof...(Args));
}

template <typename... Args>
static __device__ __forceinline__ int gpusys_printf(const gpusys_dev_t &dev, const char *fmt, Args... args)
{
	return gpusys_fprintf(dev, GPUSYS_PRINT_STDOUT, fmt, args...);
}

/* s and a newline on stdout. Bytes printed, or -errno. */
static __device__ __forceinline__ int gpusys_puts(const gpusys_dev_t &dev, const char *s)
{
	return gpusys_fprintf(dev, GPUSYS_PRINT_STDOUT, "%s\n", s);
}

/* A line from arguments already tagged (table-driven callers, tests). */
static __device__ __forceinline__ int gpusys_print_args(const gpusys_dev_t &dev, int stream, const char *fmt,
							const gpusys_print_arg *args, uint32_t nargs)
{
	return gpusys_print_detail::print(dev, (uint32_t)stream, fmt, args, nargs);
}

/* ------------------------------------------------ asynchronous forms */

namespace gpusys_print_detail {

static __device__ __noinline__ gpusys_future_t print_start(const gpusys_dev_t &dev, uint16_t flags,
							   uint32_t stream, const char *fmt,
							   const gpusys_print_arg *args, uint32_t nargs)
{
	gpusys_future_t f;
	gpusys_future_detail::init(f, GPUSYS_FUTURE_RAW, 0, 0);
	const uint64_t mask = gpusys_lane_active_mask();
	uint32_t st[1] = { stream }, n[1] = { nargs };
	const char *fs[1] = { fmt };
	const gpusys_print_arg *a[1] = { args };
	int32_t early[1] = { 0 };
	gpusys_print_start(&dev, mask, flags, !(flags & GPUSYS_REQ_NOREPLY), st, fs, a, n, early, &f.pd);
	f.early = early[0];
	gpusys_future_detail::started(dev, f);
	return f;
}

} /* namespace gpusys_print_detail */

/* A line as a future: the record is packed and sent before this returns
 * (arguments may change at once); gpusys_wait gives the bytes printed, or
 * -EAGAIN when the daemon's buffer for this client was full (no retry, the
 * line was not printed; the synchronous form retries), or -errno. */
template <typename... Args>
static __device__ __forceinline__ gpusys_future_t gpusys_fprintf_async(const gpusys_dev_t &dev, int stream,
									const char *fmt, Args... args)
{
	static_assert(sizeof...(Args) <= GPUSYS_PRINT_MAX_ARGS, "too many arguments for gpusys_printf");
	const gpusys_print_arg a[sizeof...(Args) + 1] = { gpusys_print_detail::arg(args)...,
							 gpusys_print_detail::make(0, 0) };
	return gpusys_print_detail::print_start(dev, 0, (uint32_t)stream, fmt, a, (uint32_t)sizeof...(Args));
}

template <typename... Args>
static __device__ __forceinline__ gpusys_future_t gpusys_printf_async(const gpusys_dev_t &dev, const char *fmt,
								       Args... args)
{
	return gpusys_fprintf_async(dev, GPUSYS_PRINT_STDOUT, fmt, args...);
}

/* Fire-and-forget: returns once the line is sent (0, or -errno if it could
 * not be packed or sent); nobody hears whether it was printed, and a line
 * that finds the daemon's buffer for this client full (print_buffer_limit)
 * is dropped. gpusys_print_flush() waits for the ones accepted. */
template <typename... Args>
static __device__ __forceinline__ int gpusys_fprintf_nowait(const gpusys_dev_t &dev, int stream, const char *fmt,
							    Args... args)
{
	static_assert(sizeof...(Args) <= GPUSYS_PRINT_MAX_ARGS, "too many arguments for gpusys_printf");
	const gpusys_print_arg a[sizeof...(Args) + 1] = { gpusys_print_detail::arg(args)...,
							 gpusys_print_detail::make(0, 0) };
	gpusys_future_t f = gpusys_print_detail::print_start(dev, GPUSYS_REQ_NOREPLY, (uint32_t)stream, fmt, a,
							     (uint32_t)sizeof...(Args));
	return (int)f.result;
}

template <typename... Args>
static __device__ __forceinline__ int gpusys_printf_nowait(const gpusys_dev_t &dev, const char *fmt, Args... args)
{
	return gpusys_fprintf_nowait(dev, GPUSYS_PRINT_STDOUT, fmt, args...);
}

/* Wait until every line this process's kernels printed so far has been
 * written to its descriptor. 0, -ETIMEDOUT, -ESHUTDOWN. */
static __device__ __forceinline__ int gpusys_print_flush(const gpusys_dev_t &dev)
{
	return gpusys_print_flush_lanes(&dev, gpusys_lane_active_mask());
}

#endif /* GPUSYS_PRINT_CUH */
