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

#include <errno.h>
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
	uint32_t flags;    /* enum gpusys_callback_flags */
};

enum gpusys_callback_flags {
	/* The callback returns within microseconds and never blocks: when the
	 * pool's poller finds the request it runs it itself rather than
	 * queueing it for a worker. Spinning workers now claim requests
	 * themselves, so this saves nothing measurable on the GPU: it measured
	 * slower than without the flag, cause not found (measured, see
	 * bench/RESULTS.md: "Figures that stood in code comments"). A QUICK callback that blocks holds up every
	 * other callback meanwhile (never daemon calls). */
	GPUSYS_CALLBACK_QUICK = 1u << 0,
};

/* The callback server: a channel of this process's own and its pool. */
struct gpusys_callbacks;

struct gpusys_callbacks_opts {
	uint32_t num_ports; /* 0: 64 */
	uint32_t threads;   /* pool threads that run callbacks; 0: $GPUSYS_CALLBACK_THREADS, else 3/4 of the CPUs, 4 to 16 */
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

/* ------------------------------------------------------------ typed (C++) */

/*
 * A typed callback: its opcode and, in its type, its signature. Declare it
 * once where host and device code both see it:
 *
 *     constexpr gpusys_callback<float(int, float)> scale{0x8001};
 *
 * host:   float scale_fn(int i, float x) { ... }
 *         gpusys_register(gpusys_callbacks_of(g), scale, "scale", scale_fn);
 * device: float y = gpusys_call<float>(dev, scale, i, x);   // callback.cuh
 *
 * Arguments travel packed in order, each at its alignment; the result
 * comes back the same way. Argument and result types must be trivially
 * copyable (no pointers into the other side's memory, of course).
 *
 * C++ linkage even where the header is included inside an extern "C"
 * block (gpusys/gpusys.h includes it, and C headers are often included
 * that way): templates cannot have C linkage.
 */
extern "C++" {
#include <stddef.h>
#include <string.h>
#include <type_traits>
#include <utility>

#ifdef __CUDACC__
#define GPUSYS_HD __host__ __device__
#else
#define GPUSYS_HD
#endif

template <class Sig> struct gpusys_callback;
template <class R, class... A> struct gpusys_callback<R(A...)> {
	uint16_t opcode;
};

namespace gpusys_cb_detail {

GPUSYS_HD constexpr size_t align_up(size_t o, size_t a)
{
	return (o + a - 1) / a * a;
}

template <class... A> struct layout;
template <> struct layout<> {
	GPUSYS_HD static constexpr size_t end(size_t o) { return o; }
};
template <class T, class... R> struct layout<T, R...> {
	GPUSYS_HD static constexpr size_t end(size_t o) { return layout<R...>::end(align_up(o, alignof(T)) + sizeof(T)); }
};

/* Bytes of the packed arguments. */
template <class... A> GPUSYS_HD constexpr size_t args_bytes()
{
	return layout<A...>::end(0);
}

/* Offset of the I-th of A... */
template <size_t I, class T, class... R> struct offset_of {
	GPUSYS_HD static constexpr size_t at(size_t o) { return offset_of<I - 1, R...>::at(align_up(o, alignof(T)) + sizeof(T)); }
};
template <class T, class... R> struct offset_of<0, T, R...> {
	GPUSYS_HD static constexpr size_t at(size_t o) { return align_up(o, alignof(T)); }
};

GPUSYS_HD inline void put(unsigned char *, size_t) {}
template <class T, class... R> GPUSYS_HD inline void put(unsigned char *b, size_t o, const T &v, const R &...rest)
{
	o = align_up(o, alignof(T));
	const unsigned char *s = (const unsigned char *)&v;
	for (size_t i = 0; i < sizeof(T); i++)
		b[o + i] = s[i];
	put(b, o + sizeof(T), rest...);
}

template <class T> inline T load(const unsigned char *p)
{
	T v;
	memcpy(&v, p, sizeof(T));
	return v;
}

template <class... A> struct all_trivial : std::true_type {};
template <class T, class... A>
struct all_trivial<T, A...>
	: std::integral_constant<bool, std::is_trivially_copyable<T>::value && all_trivial<A...>::value> {};

template <class R, class... A> struct host {
	typedef R (*fn_t)(A...);

	template <size_t... I> static R invoke(fn_t fn, const unsigned char *b, std::index_sequence<I...>)
	{
		(void)b; /* a callback of no arguments reads none */
		return fn(load<A>(b + offset_of<I, A...>::at(0))...);
	}

	static int trampoline(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap,
			      uint32_t *res_len)
	{
		if (arg_len != args_bytes<A...>())
			return -EINVAL;
		fn_t fn = (fn_t)user;
		return call(fn, (const unsigned char *)arg, res, res_cap, res_len, std::is_void<R>());
	}

	static int call(fn_t fn, const unsigned char *b, void *, uint32_t, uint32_t *res_len, std::true_type)
	{
		invoke(fn, b, std::index_sequence_for<A...>());
		*res_len = 0;
		return 0;
	}

	static int call(fn_t fn, const unsigned char *b, void *res, uint32_t res_cap, uint32_t *res_len,
			std::false_type)
	{
		typedef typename std::conditional<std::is_void<R>::value, char, R>::type RR;
		if (res_cap < sizeof(RR))
			return -EMSGSIZE;
		RR r = invoke(fn, b, std::index_sequence_for<A...>());
		memcpy(res, &r, sizeof(RR));
		*res_len = sizeof(RR);
		return 0;
	}
};

template <class R> struct result_bytes : std::integral_constant<size_t, sizeof(R)> {};
template <> struct result_bytes<void> : std::integral_constant<size_t, 0> {};

} /* namespace gpusys_cb_detail */

/* Register fn as the host side of h. 0 or as gpusys_callbacks_register. */
template <class R, class... A>
static inline int gpusys_register(struct gpusys_callbacks *cb, gpusys_callback<R(A...)> h, const char *name,
				  R (*fn)(A...), uint32_t flags = 0)
{
	static_assert(gpusys_cb_detail::all_trivial<A...>::value, "callback arguments must be trivially copyable");
	static_assert(std::is_void<R>::value || std::is_trivially_copyable<R>::value,
		      "a callback's result must be trivially copyable");
	static_assert(gpusys_cb_detail::args_bytes<A...>() <= GPUSYS_MAX_LANE_PAYLOAD, "arguments above 1 MiB");
	static_assert(gpusys_cb_detail::result_bytes<R>::value <= GPUSYS_MAX_LANE_PAYLOAD, "result above 1 MiB");
	if (!cb)
		return -EINVAL;
	struct gpusys_callback_desc d;
	memset(&d, 0, sizeof(d));
	d.opcode = h.opcode;
	d.name = name;
	d.arg_max = (uint32_t)gpusys_cb_detail::args_bytes<A...>();
	d.res_max = (uint32_t)gpusys_cb_detail::result_bytes<R>::value;
	d.fn = &gpusys_cb_detail::host<R, A...>::trampoline;
	d.user = (void *)fn;
	d.flags = flags;
	return gpusys_callbacks_register(cb, &d);
}
} /* extern "C++" */
#endif /* __cplusplus */

#endif /* GPUSYS_CALLBACK_H */
