/* SPDX-License-Identifier: MIT */
/*
 * Waking a sleeping poller 0 without a timer (daemon/core/poller.c's deep doze).
 *
 * One epoll set for the daemon holds:
 *  - an eventfd of the daemon's own, written on attach, detach and stop
 *    (wake_kick) and by the CUDA callbacks of wake_cuda.c;
 *  - one pipe per client: the daemon keeps the read end, the client gets
 *    the write end with the welcome (common/wire.h) and writes a
 *    byte when it rings the doorbell of a dozing daemon. Per client rather
 *    than one for all: the read end is a file description no client can
 *    reach (it cannot make it blocking, read other clients' wake-ups or
 *    keep it readable for them).
 * Each registered descriptor carries a tag (the session id; 0 for the
 * eventfd) rather than a pointer, so an event that arrives for a client
 * that has just detached names nobody instead of freed memory.
 */
#ifndef GPUSYSD_WAKE_H
#define GPUSYSD_WAKE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct wake;
struct wake_gpu;
struct channel;

/* One client's means of waking the daemon. */
struct wake_chan {
	uint64_t tag;         /* nonzero; the session id */
	int rfd;              /* read end of the client's pipe, or -1 */
	atomic_bool hup;      /* the client closed its end (or it broke): no host wake-ups */
	bool registered;      /* rfd is in the epoll set (main thread) */
	struct wake_gpu *gpu; /* CUDA watch of the doorbell (wake_cuda.c), or NULL */
	bool needs_timer;     /* a GPU client whose doorbell cannot be watched:
				 poller 0 keeps to timed naps while it is attached */
};

int wake_create(struct wake **ret);
void wake_destroy(struct wake *w);

/* Any thread: make a poller 0 sleeping in wake_sleep() return. */
void wake_kick(struct wake *w);

/* Main thread, at attach: the pipe; *ret_wfd is the client's end (send it,
 * then close it). c->rfd is registered. 0 or -errno. */
int wake_chan_open(struct wake *w, struct wake_chan *c, uint64_t tag, int *ret_wfd);

/* Main thread, at detach (before the pollers drop the channel): no more
 * events for it. Idempotent. */
void wake_chan_unregister(struct wake *w, struct wake_chan *c);

/* Last reference: unregister, tear down the GPU watch, close. */
void wake_chan_close(struct wake *w, struct wake_chan *c);

/* Poller 0: sleep until woken or timeout_ms (< 0: no limit), offline
 * (touching no client). What woke it goes into ev for wake_drain. Returns
 * the number of events (0 on timeout). */
struct wake_events {
	int n;
	uint64_t tag[32];
};
int wake_sleep(struct wake *w, int timeout_ms, struct wake_events *ev);

/* Poller 0, online again: read what woke it. find(arg, tag) returns the
 * wake_chan of a client in the poller's current snapshot (or NULL), so
 * only live clients' pipes are read. */
void wake_drain(struct wake *w, const struct wake_events *ev, struct wake_chan *(*find)(void *arg, uint64_t tag),
		void *arg);

/* ---- CUDA clients (wake_cuda.c) ---------------------------------------
 * The GPU cannot make a system call, so the daemon has the GPU watch the
 * doorbell for it: on a stream of its own CUDA context, a wait for the
 * doorbell to change, then a host function that writes the eventfd. */

/* The gpu_watch setting: false gives CUDA clients timed naps (to measure
 * against). Before the first client. */
void wake_gpu_configure(bool watch);

/* Main thread, at attach of a client with a GPU: set up c->gpu for the
 * channel (device access to its doorbell, a stream), or set
 * c->needs_timer when that cannot be done. Never fails the attach. */
void wake_gpu_open(struct wake *w, struct wake_chan *c, const struct channel *ch, int32_t cuda_device);

/* Poller 0, before sleeping: have the GPU wake us when the doorbell moves
 * away from seen. Keeps a wait that is still pending. false: not armed
 * (an error): do not sleep without a timer on this channel. */
bool wake_gpu_arm(struct wake_chan *c, uint64_t seen);

/* Before the channel memory goes: no wait of ours may still read it.
 * false: one may (the GPU did not finish it): keep the memory. */
bool wake_gpu_close(struct wake_chan *c, const struct channel *ch);

/* Main thread, around CUDA calls that a pending doorbell wait could stall
 * (mapping and unmapping channel memory, streams, contexts), on another
 * GPU or on the same one: hold ends every pending wait (the daemon stores
 * a value that fires it, wake_cuda.c) and waits, up to a second, for each
 * to finish; no poller arms a new one until unhold (they nap on a timer
 * meanwhile). Not nested. */
void wake_gpu_hold(void);
void wake_gpu_unhold(void);

/* The daemon's eventfd, for wake_cuda.c's callbacks. */
int wake_eventfd(const struct wake *w);

#endif
