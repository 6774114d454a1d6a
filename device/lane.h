/* SPDX-License-Identifier: MIT */
/*
 * The lane layer: everything the client protocol (port_client.h) needs from
 * the machine it runs on, in two implementations.
 *
 *  - CUDA (__CUDACC__): SIMT. Each lane runs the protocol code with its own
 *    arguments; per-lane arrays have one element (GPUSYS_LI(l) == 0) and
 *    GPUSYS_FOR_EACH_LANE runs its body once, for the calling lane.
 *  - Host (the emulator): one CPU thread is a whole warp. Per-lane arrays
 *    have GPUSYS_WARP_LANES elements, GPUSYS_FOR_EACH_LANE loops over the
 *    lanes in the mask, and "leader only" code runs once.
 *
 * Code written with these primitives is correct under both readings, which is
 * what lets CI exercise the real protocol without a GPU.
 *
 * Memory: shared channel words are host memory that the other side writes.
 * Loads of them are system-scope (volatile / ld.relaxed.sys) and followed by
 * an acquire fence once a flag is seen; publishing is data stores, release
 * fence, flag store. Port locks are never in shared memory: they live in
 * device memory (or the emulator's private memory), because GPU atomics on
 * host memory are not atomic with respect to the CPU.
 */
#ifndef GPUSYS_LANE_H
#define GPUSYS_LANE_H

#include <stdint.h>
#include <string.h>

#include "gpusys/abi.h"

#if defined(__CUDACC__)
/* ------------------------------------------------------------------ CUDA */
#define GPUSYS_FN static __device__ __forceinline__
#define GPUSYS_LI(l) 0u

GPUSYS_FN uint32_t gpusys_lane_id(void)
{
	uint32_t id;
	asm volatile("mov.u32 %0, %%laneid;" : "=r"(id));
	return id;
}

GPUSYS_FN uint64_t gpusys_lane_active_mask(void)
{
	return (uint64_t)__activemask();
}

GPUSYS_FN uint32_t gpusys_lane_leader_of(uint64_t mask)
{
	return (uint32_t)__ffsll((long long)mask) - 1;
}

GPUSYS_FN int gpusys_lane_is_leader(uint64_t mask)
{
	return gpusys_lane_id() == gpusys_lane_leader_of(mask);
}

/* Runs the body once per lane: on the GPU, once, as the calling lane. */
#define GPUSYS_FOR_EACH_LANE(mask, l) \
	for (uint32_t l = gpusys_lane_id(), l##_once = 1; l##_once; l##_once = 0)

GPUSYS_FN uint32_t gpusys_lane_bcast_u32(uint64_t mask, uint32_t v)
{
	return __shfl_sync((unsigned)mask, v, gpusys_lane_leader_of(mask));
}

GPUSYS_FN uint64_t gpusys_lane_bcast_u64(uint64_t mask, uint64_t v)
{
	return __shfl_sync((unsigned)mask, (unsigned long long)v, gpusys_lane_leader_of(mask));
}

/* Whether pred holds in any lane of mask (a vote: it also reconverges them). */
GPUSYS_FN int gpusys_lane_any(uint64_t mask, int pred)
{
	return __any_sync((unsigned)mask, pred);
}

/* The lanes of mask whose pred[l] holds (every lane of mask calls it). */
GPUSYS_FN uint64_t gpusys_lane_ballot(uint64_t mask, const int *pred)
{
	return (uint64_t)__ballot_sync((unsigned)mask, pred[0]);
}

/* A pause of about ns between tries of a call the daemon asked to be sent
 * again (print's full buffer, a file call without room). */
GPUSYS_FN void gpusys_backoff_sleep(uint32_t ns)
{
	__nanosleep(ns);
}

GPUSYS_FN void gpusys_lane_sync(uint64_t mask)
{
	__syncwarp((unsigned)mask);
}

/* Exclusive prefix sum of v over the lanes of mask, in lane order, into
 * off; returns the total. Only used on slow paths (streaming). */
GPUSYS_FN uint32_t gpusys_lane_exscan(uint64_t mask, const uint32_t *v, uint32_t *off)
{
	uint32_t me = gpusys_lane_id(), mine = v[0], before = 0, total = 0;
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t src = (uint32_t)__ffsll((long long)m) - 1;
		uint32_t x = __shfl_sync((unsigned)mask, mine, src);
		if (src < me)
			before += x;
		total += x;
	}
	off[0] = before;
	return total;
}

GPUSYS_FN uint32_t gpusys_lane_max(uint64_t mask, const uint32_t *v)
{
	return __reduce_max_sync((unsigned)mask, v[0]);
}

GPUSYS_FN uint32_t gpusys_load_shared_u32(const volatile uint32_t *p)
{
	uint32_t v;
	asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

GPUSYS_FN uint64_t gpusys_load_shared_u64(const volatile uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

GPUSYS_FN void gpusys_store_shared_u64(volatile uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* Orders this lane's earlier channel stores before its later ones, as seen by
 * the CPU: a release fence, which is all a request's payload needs before
 * its word (an acq_rel fence then a relaxed store is a release pattern in
 * the PTX memory model). flag: the word whose store publishes; only the
 * host's reading uses it (host_sync.h). */
GPUSYS_FN void gpusys_fence_release(const volatile void *flag)
{
	(void)flag;
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* After a flag store: it pushes the store out promptly, which measured about
 * 1.1 us faster per round trip than leaving it to drain (../shared/README.md). */
GPUSYS_FN void gpusys_fence_flush(void)
{
	__threadfence_system();
}

/* After a load of flag saw the other side's store: later loads see what it
 * wrote before that store. */
GPUSYS_FN void gpusys_fence_acquire(const volatile void *flag)
{
	(void)flag;
	asm volatile("fence.acq_rel.sys;" ::: "memory");
}

GPUSYS_FN void gpusys_spin_pause(void)
{
}

/* A wait's poll is a load across the bus (the server word or the answer
 * heads live in host memory). The first GPUSYS_SPIN_TIGHT polls of a wait
 * go back to back: a call the daemon serves at once is answered within
 * them. A wait past them is a long one (a socket wait, a call that
 * completes later, a daemon busy with thousands of warps): each further
 * poll sleeps first, 1 us doubling to 32 us, so that warps waiting on idle
 * connections do not fill the link with reads that a busy warp's calls
 * queue behind. Measured on the H100 before this: one connection's 64 B
 * echo through tcp_echo, p50 35.8 us with 1 serving warp and 583 us with
 * 1056 (bench/RESULTS.md, "Allocator, callback storm, heads and sockets on
 * the H100"). */
#define GPUSYS_SPIN_TIGHT 64u
GPUSYS_FN void gpusys_spin_backoff(uint32_t spins)
{
	if (spins <= GPUSYS_SPIN_TIGHT)
		return;
	uint32_t step = (spins - GPUSYS_SPIN_TIGHT) / 8; /* doubles every 8 polls */
	__nanosleep(step >= 5 ? 32000u : 1000u << step);
}

/* After a load of flag saw the other side's store, where nothing it wrote
 * is read next (a TRIVIAL answer): our later stores must not pass that
 * load, so the daemon's reads of the port come before our next writes. A
 * warp's stores wait for the load they depend on; no fence (a system-scope
 * one costs about a microsecond). */
GPUSYS_FN void gpusys_order_after(const volatile void *flag)
{
	(void)flag;
}

/* Called every GPUSYS_SPIN_CHECK_EVERY spins of a wait. A warp keeps
 * spinning: its SM has other warps to run meanwhile. */
GPUSYS_FN void gpusys_spin_yield(void)
{
}

/* After a pass over every port found none free (passes: how many so far):
 * a sleep, 250 ns doubling to 8 us. Without it the leader's pass is a
 * tight loop of atomics, and when a warp's lanes have split into groups
 * that each make their own call (independent thread scheduling allows it:
 * a leader's branch need not reconverge before the next call), a group
 * spinning here can keep its sibling group, which holds ports as futures
 * and would give them back, from running: progress then comes at
 * milliseconds a step (bench/RESULTS.md, "Fifth session", diverge: a
 * sibling group's lock held across a spin). A sleep lets the scheduler run
 * the other groups. (It was first taken for the cause of test_gpu_async's
 * hang, which was the callback server's instead: "Seventh session".) */
GPUSYS_FN void gpusys_pass_pause(uint32_t passes)
{
	__nanosleep(passes < 5u ? 250u << passes : 8000u);
}

/* Port locks, in device memory. */
GPUSYS_FN int gpusys_lock_try(uint32_t *lock)
{
	if (atomicCAS(lock, 0u, 1u) != 0u)
		return 0;
	__threadfence();
	return 1;
}

GPUSYS_FN void gpusys_lock_release(uint32_t *lock)
{
	__threadfence();
	atomicExch(lock, 0u);
}

/* A port lock and the sequence kept with it (struct gpusys_port_lock: lock
 * in the low word, seq in the high one), as one 64-bit word: taken with one
 * exchange that returns both, whatever free state the lock was in (the
 * holder's own value, held, is written over a held lock unchanged), and
 * given back with one store. One trip to L2 instead of a CAS and then a
 * load of the sequence (port_client.h). */
GPUSYS_FN uint64_t gpusys_lock_pair_take(void *pair, uint64_t held)
{
	uint64_t old;
	asm volatile("atom.acquire.gpu.global.exch.b64 %0, [%1], %2;" : "=l"(old) : "l"(pair), "l"(held) : "memory");
	return old;
}

GPUSYS_FN void gpusys_lock_pair_release(void *pair, uint32_t state, uint32_t seq)
{
	uint64_t v = (uint64_t)seq << 32 | state;
	asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(pair), "l"(v) : "memory");
}

/* The same, for a holder whose accesses to the port are ordered before this
 * store already: its stores by the fence that published them (fence.sc.sys;
 * a fence then a strong store is a release pattern in the PTX memory model)
 * and its loads by use, as in gpusys_order_after: each load's value was used
 * (the server word by the wait's loop, a response's bytes by the stores
 * that copied them out) before a warp barrier that this store follows, and
 * a warp issues in order, so no load is still out when the next holder can
 * write. The release store's fence.acq_rel.gpu was a measurable share of a
 * round trip (measured, see bench/RESULTS.md: "One port per warp, and a
 * shorter client path", and "A plain give-back" in "The H100 figures of
 * the final tree").
 * The PTX model itself does not order a load before a later relaxed store:
 * this is the hardware's order, as gpusys_order_after's is. Every finished
 * call and a fire-and-forget request come here; a call that fails before
 * its whole request is sent does not. */
GPUSYS_FN void gpusys_lock_pair_release_ordered(void *pair, uint32_t state, uint32_t seq)
{
	uint64_t v = (uint64_t)seq << 32 | state;
	asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(pair), "l"(v) : "memory");
}

/* Per-warp future counts (port_client.h): add and return the old value;
 * take away without waiting for the answer (a fire-and-forget reduction). */
GPUSYS_FN uint32_t gpusys_count_add_u32(uint32_t *c, uint32_t v)
{
	return atomicAdd(c, v);
}

GPUSYS_FN void gpusys_count_sub_u32(uint32_t *c, uint32_t v)
{
	atomicSub(c, v);
}

/* A request counter in device memory; the value feeds the doorbell. */
GPUSYS_FN uint64_t gpusys_counter_next(unsigned long long *c)
{
	return (uint64_t)atomicAdd(c, 1ull) + 1u;
}

/* Count a request and return a fresh doorbell stamp (abi.h GPUSYS_RING_*:
 * gpusys_publish adds the port). On a GPU the count is a fire-and-forget
 * reduction (no round trip to L2 in front of the request: 0.5 us or more).
 * Nothing orders it before the request's word, but it is issued first,
 * before the port lock's round trip, so that it lands long before the
 * daemon could complete the request: gpusys_synchronize relies on every
 * completed request being counted.
 * NOTE: a returning add whose value the word waited for (its top bit, always
 * 0, folded into the word) would order it by dependency; it measured 7%
 * more per call (measured, see bench/RESULTS.md: "The strict count, priced
 * and not taken" in "The H100 figures of the final tree"), against a
 * window in which a reduction would have to stay unperformed through the
 * lock's round trip, the word's trip across PCIe and the daemon's whole
 * service. Not taken. The stamp is %globaltimer in 32 ns
 * units, one clock for the whole GPU: it only grows, so every ring differs
 * from what the daemon last read, and a later stamp is never a bit subset
 * of an earlier one (the GPU watch, wake_cuda.c). Exceptions, which the
 * daemon's safety rescan (1 s) covers: the 47 bits wrap every 52 days, at
 * instants of the wall clock (%globaltimer counts from the epoch); and two
 * rings in the same 32 ns, from ports whose numbers are bit subsets of one
 * another, stored out of order (a daemon that saw the first is still busy
 * anyway: it dozes only after milliseconds without any). */
GPUSYS_FN uint64_t gpusys_count_and_ring(unsigned long long *c)
{
	uint64_t t;
	atomicAdd(c, 1ull);
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return GPUSYS_RING_STAMP(t >> 5);
}

/* Where to start looking for a free port: the warp's hardware slot. Every
 * resident warp has its own (SM, warp slot) pair, numbered SM-major with
 * %nwarpid slots per SM, so with a port per slot (the default, libclient/
 * cuda.c, counts SMs x maxThreadsPerMultiProcessor / 32, which is the same
 * number on the GPUs measured) the first try succeeds. Only a hint: %warpid
 * can change under preemption, and where the counts differ hints wrap; either
 * costs a probe, never correctness. */
GPUSYS_FN uint32_t gpusys_port_hint(void)
{
	uint32_t sm, warp, warps;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
	asm volatile("mov.u32 %0, %%warpid;" : "=r"(warp));
	asm("mov.u32 %0, %%nwarpid;" : "=r"(warps));
	return sm * warps + warp;
}

#else
/* ------------------------------------------------------------------ host */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "host_sync.h"

#define GPUSYS_FN static inline
#define GPUSYS_LI(l) (l)

/* The emulator sets this per thread: which emulated warp is running. */
extern __thread uint32_t gpusys_emu_port_hint;

/* Late heads (gpusys_emu_set_heads_late): a GPU publishes a call of heads
 * without a fence between the heads and the word (abi.h), so the word may
 * land first, and servers must wait for the heads. Emulated warps then
 * hold back each head's tag until the word is out (gpusys_head_put,
 * gpusys_publish), so CI runs that path: the callback server once answered
 * such a word at once and the warp hung, on the H200 only. */
struct gpusys_emu_late_heads {
	uint32_t n;
	uint32_t *tag[GPUSYS_WARP_LANES];
	uint32_t value[GPUSYS_WARP_LANES];
};
extern int gpusys_emu_heads_late;
extern __thread struct gpusys_emu_late_heads gpusys_emu_late;

static inline uint32_t gpusys_lane_leader_of(uint64_t mask)
{
	return (uint32_t)__builtin_ctzll(mask);
}

static inline int gpusys_lane_is_leader(uint64_t mask)
{
	(void)mask;
	return 1;
}

#define GPUSYS_FOR_EACH_LANE(mask, l)                      \
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) \
		if (!(((mask) >> l) & 1u)) {               \
		} else

static inline uint32_t gpusys_lane_bcast_u32(uint64_t mask, uint32_t v)
{
	(void)mask;
	return v;
}

static inline uint64_t gpusys_lane_bcast_u64(uint64_t mask, uint64_t v)
{
	(void)mask;
	return v;
}

static inline int gpusys_lane_any(uint64_t mask, int pred)
{
	(void)mask;
	return pred;
}

static inline uint64_t gpusys_lane_ballot(uint64_t mask, const int *pred)
{
	uint64_t m = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (pred[l])
			m |= UINT64_C(1) << l;
	}
	return m;
}

static inline void gpusys_backoff_sleep(uint32_t ns)
{
	struct timespec ts = { 0, (long)ns };
	nanosleep(&ts, NULL);
}

static inline void gpusys_lane_sync(uint64_t mask)
{
	(void)mask;
}

static inline uint32_t gpusys_lane_exscan(uint64_t mask, const uint32_t *v, uint32_t *off)
{
	uint32_t total = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		off[l] = total;
		total += v[l];
	}
	return total;
}

static inline uint32_t gpusys_lane_max(uint64_t mask, const uint32_t *v)
{
	uint32_t m = 0;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (v[l] > m)
			m = v[l];
	}
	return m;
}

/* The daemon reads and writes these from other cores: C11-style atomics
 * (GCC builtins, so the header also compiles as C++). */
static inline uint32_t gpusys_load_shared_u32(const volatile uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline uint64_t gpusys_load_shared_u64(const volatile uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void gpusys_store_shared_u64(volatile uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline void gpusys_fence_release(const volatile void *flag)
{
	gpusys_host_release_before(flag);
}

static inline void gpusys_fence_flush(void)
{
	/* Nothing to push out: a store reaches the coherent cache at once. */
}

static inline void gpusys_fence_acquire(const volatile void *flag)
{
	gpusys_host_acquire_after(flag);
}

/* The host: C11 orders our later stores after that load only with an
 * acquire (free on x86, a compiler barrier), and ThreadSanitizer needs it
 * to see the daemon's reads of the port before our next request's writes. */
static inline void gpusys_order_after(const volatile void *flag)
{
	gpusys_host_acquire_after(flag);
}

static inline void gpusys_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* Emulated warps poll memory of their own host: nothing to spare (they
 * yield their CPU instead, gpusys_spin_yield). */
static inline void gpusys_spin_backoff(uint32_t spins)
{
	(void)spins;
}

/* An emulated warp that has spun this long gives its CPU away: there may be
 * more warps (threads) than cores, and the one it waits for may need this
 * core to run at all. */
static inline void gpusys_spin_yield(void)
{
	sched_yield();
}

/* An emulated warp is one thread: nothing of its own to let run. */
static inline void gpusys_pass_pause(uint32_t passes)
{
	(void)passes;
	gpusys_spin_pause();
}

static inline int gpusys_lock_try(uint32_t *lock)
{
	uint32_t expected = 0;
	return __atomic_compare_exchange_n(lock, &expected, 1u, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

static inline void gpusys_lock_release(uint32_t *lock)
{
	__atomic_store_n(lock, 0u, __ATOMIC_RELEASE);
}

static inline uint64_t gpusys_lock_pair_take(void *pair, uint64_t held)
{
	return __atomic_exchange_n((uint64_t *)pair, held, __ATOMIC_ACQUIRE);
}

static inline void gpusys_lock_pair_release(void *pair, uint32_t state, uint32_t seq)
{
	__atomic_store_n((uint64_t *)pair, (uint64_t)seq << 32 | state, __ATOMIC_RELEASE);
}

/* The host keeps the release: it is free on x86, and C11 (and
 * ThreadSanitizer) order nothing without it. */
static inline void gpusys_lock_pair_release_ordered(void *pair, uint32_t state, uint32_t seq)
{
	gpusys_lock_pair_release(pair, state, seq);
}

static inline uint32_t gpusys_count_add_u32(uint32_t *c, uint32_t v)
{
	return __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static inline void gpusys_count_sub_u32(uint32_t *c, uint32_t v)
{
	__atomic_fetch_sub(c, v, __ATOMIC_RELAXED);
}

static inline uint64_t gpusys_counter_next(unsigned long long *c)
{
	return (uint64_t)__atomic_add_fetch(c, 1ull, __ATOMIC_RELAXED);
}

static inline uint64_t gpusys_count_and_ring(unsigned long long *c)
{
	return GPUSYS_RING_STAMP(gpusys_counter_next(c));
}

static inline uint32_t gpusys_port_hint(void)
{
	return gpusys_emu_port_hint;
}

/* Host clients only, right after a doorbell store: wake a daemon that
 * sleeps without a timer (abi.h, header.dozing). The full fence pairs with
 * the daemon's between its dozing store and its doorbell loads (Dekker): a
 * daemon that dozed off before seeing our doorbell is seen dozing here. A
 * full pipe (EAGAIN) means it is being woken anyway. GPU code has no such
 * call (no system calls there): the daemon watches a GPU's doorbell. */
static inline void gpusys_wake_daemon(const volatile uint32_t *dozing, int32_t wake_fd)
{
	gpusys_host_full_fence();
	if (wake_fd >= 0 && __atomic_load_n(dozing, __ATOMIC_RELAXED)) {
		/* A daemon that died dozing left no reader: the write raises
		 * SIGPIPE, which would kill the client instead of the call
		 * failing with -ESHUTDOWN. Block it for the write and take
		 * back one this write raised (unless one was pending
		 * already). Only on this path: the daemon dozes when idle. */
		int saved = errno;
		sigset_t pipe_set, old, pending;
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
		sigpending(&pending);
		int was_pending = sigismember(&pending, SIGPIPE);
		char one = 1;
		if (write(wake_fd, &one, 1) < 0 && errno == EPIPE && !was_pending) {
			const struct timespec zero = { 0, 0 };
			while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
			}
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		errno = saved;
	}
}
#endif

#endif /* GPUSYS_LANE_H */
