/* SPDX-License-Identifier: MIT */
/*
 * The host's fences for the channel protocol, as named wrappers (liburing's
 * barrier.h), shared by the emulator's lane layer (lane.h), the daemon's port
 * server and pollers, and the callback server.
 *
 * The protocol publishes with data stores, a release fence, then a relaxed
 * store of a flag word (client_word[p], server_word[p], a progress word); it
 * observes with a relaxed load of the flag and an acquire fence once the
 * flag has moved. That is correct C11, and the only form the GPU side has
 * (PTX fences, relaxed system-scope loads and stores), but ThreadSanitizer
 * models no standalone fence: it would see the data stores and loads of every
 * request as a race. So each fence here names the flag word it orders, and
 * under TSan also tells it the happens-before edge on that word
 * (__tsan_release before the flag store, __tsan_acquire after the load that
 * saw it): exactly the edge the fence makes, no wider. Outside TSan the
 * annotations are nothing and these are the plain C11 fences.
 *
 * Flag words themselves are always read and written with atomics (relaxed
 * is a plain mov on x86): the other side writes them at any time.
 */
#ifndef GPUSYS_HOST_SYNC_H
#define GPUSYS_HOST_SYNC_H

#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define GPUSYS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GPUSYS_TSAN 1
#endif
#endif

#ifdef GPUSYS_TSAN
#include <sanitizer/tsan_interface.h>
#define GPUSYS_TSAN_RELEASE(flag) __tsan_release((void *)(uintptr_t)(flag))
#define GPUSYS_TSAN_ACQUIRE(flag) __tsan_acquire((void *)(uintptr_t)(flag))
/* gcc says every fence is "not supported with -fsanitize=thread": true, and
 * why the annotations exist; the fences below still order the real
 * machine, so they stay. The full fence of a Dekker pair (gpusys_host_full_fence)
 * guards only atomics on both sides, which TSan has no quarrel with. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#else
#define GPUSYS_TSAN_RELEASE(flag) ((void)(flag))
#define GPUSYS_TSAN_ACQUIRE(flag) ((void)(flag))
#endif

/* Everything this thread wrote before is seen by whoever sees its next store
 * to *flag. */
static inline void gpusys_host_release_before(const volatile void *flag)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	GPUSYS_TSAN_RELEASE(flag);
}

/* This thread's later reads see what the writer of *flag wrote before the
 * value of *flag that this thread has just loaded. */
static inline void gpusys_host_acquire_after(const volatile void *flag)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	GPUSYS_TSAN_ACQUIRE(flag);
}

/* Store, full fence, load: one half of a Dekker pair (a dozing flag against
 * a doorbell), where either side must see the other's store. No plain data
 * is published by it. */
static inline void gpusys_host_full_fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

#if defined(GPUSYS_TSAN) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif /* GPUSYS_HOST_SYNC_H */
