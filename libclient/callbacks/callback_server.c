/* SPDX-License-Identifier: MIT */
/*
 * The callback server (include/gpusys/callback.h): the server side of the
 * port protocol (include/gpusys/abi.h) for user opcodes, in the client
 * process, over a channel of its own that gpusysd never maps.
 *
 * Threads: one poller and a pool of workers. The poller finds a port whose
 * client word moved, claims it and hands it to a worker, which serves the
 * whole message (request stream, the callback for each lane, response
 * stream) and counts the completion in its progress slot of the channel
 * header (gpusys_synchronize and gpusys_query add those up). A slow
 * callback holds its worker only; the poller and the other workers go on.
 *
 * Idle policy, after the daemon's poller (daemon/core/poller.c):
 *   - work seen in the last SPIN_NS: the poller spins (a hand-off to a
 *     sleeping thread costs microseconds);
 *   - kernels may be in flight (gpusys_callbacks_expect) or work was seen
 *     in the last NAP_FOR_NS: naps of NAP_NS, reading only the doorbell;
 *   - otherwise it sleeps on a pipe with dozing = 1 announced in the
 *     header (the same Dekker handshake as the daemon's: emulated warps ring,
 *     fence, read dozing, write the pipe; expect() writes it too), with a
 *     safety rescan every SAFETY_MS.
 * Workers spin WORKER_SPIN_NS for the next job after one, then sleep on a
 * condition variable; the poller signals only when none spins.
 *
 * The kernels writing this channel are the process's own, so unlike the
 * daemon this code may wait for the client within a message (a stream); it
 * still copies every length out once and bounds it, so a scribbled channel
 * fails the call, never this process.
 */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gpusys/callback.h"
#include "common/port_host.h"
#include "gpusys/device/host_sync.h"
#include "libclient/attach/dev_handle.h"
#include "libclient/attach/channel_dump.h"
#include "libclient/callbacks/callback_dump.h"

#define SPIN_NS (200u * 1000u)         /* poller spins this long after work */
#define NAP_NS (50u * 1000u)           /* then naps this long at a time */
#define NAP_FOR_NS (2u * 1000u * 1000u) /* for this long after work */
#define SAFETY_MS 1000                 /* deep sleep: rescan anyway */
#define WORKER_SPIN_NS (100u * 1000u)  /* a worker waits this long for more */
#define FULL_SCAN_NS (50u * 1000u)     /* spinning: every port at least this often */
#define MAX_THREADS 32u
/* A call of heads whose heads have not landed this long after its word
 * never will: its kernel scribbled the word or died (the heads are stored
 * before the word, and land within the bus's latency, microseconds). It is
 * answered -EPROTO, so that the worker is not held for ever. */
#define HEADS_LATE_MAX_NS (1000u * 1000u * 1000u)
#define USER_OPS (0x10000u - GPUSYS_OP_USER_FIRST)

struct cb_entry {
	struct gpusys_callback_desc d; /* name copied */
	atomic_uint_fast64_t calls;
};

struct gpusys_callbacks {
	/* The channel, host view. */
	uint8_t *base;
	size_t bytes;
	struct gpusys_channel_header *hdr;
	volatile uint64_t *client_word;
	volatile uint64_t *server_word;
	struct gpusys_port *ports;
	uint32_t num_ports;
	uint8_t *windows; /* the last num_windows ports' stream packets (abi.h) */
	uint32_t num_windows;

	/* Private server state per port. */
	uint16_t *seen;       /* the sequence we last acknowledged; workers write it */
	atomic_uchar *claim;  /* 1 from the poller's claim to the worker's release */

	_Atomic(struct cb_entry *) *ops; /* USER_OPS entries, published once */
	pthread_mutex_t reg_lock;
	struct cb_entry **list; /* registration order, for info */
	unsigned nlist, caplist;

	/* Job queue: ports claimed by the poller, for the workers. */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	uint32_t *queue; /* num_ports entries, ring */
	uint32_t q_head, q_len;
	atomic_uint q_count;    /* q_len, readable without the lock */
	atomic_uint spinning;   /* workers spinning for a job */
	atomic_uint running;    /* callbacks running now */

	pthread_t poller;
	pthread_t workers[MAX_THREADS];
	unsigned nworkers;
	int efd;    /* the wake pipe's read end (a pipe, not an eventfd: emulated
		       warps write one byte, device/lane.h gpusys_wake_daemon) */
	int efd_w;  /* its write end: emulated warps' wake_fd */
	atomic_int stop;
	_Atomic uint64_t expect_until;

	/* For emulated warps: a handle over the host view. */
	gpusys_dev_t emu_dev;
	struct gpusys_port_lock *emu_locks;
	unsigned long long emu_submitted;
	uint32_t *emu_warp_futures;
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* ------------------------------------------------------------ protocol */

static void ack(struct gpusys_callbacks *cb, uint32_t p, uint32_t seq, uint32_t sw_flags, int32_t status)
{
	__atomic_store_n(&cb->seen[p], (uint16_t)(seq & GPUSYS_SEQ_MASK), __ATOMIC_RELAXED);
	port_host_hand_back(&cb->server_word[p], seq, sw_flags, status);
}

/* Wait for the client's next packet on p (its sequence moves past seen).
 * The client is streaming, so this is short; false on stop. */
static bool wait_client(struct gpusys_callbacks *cb, uint32_t p, uint64_t *ret_word)
{
	for (unsigned spins = 0;; spins++) {
		uint64_t w = __atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED);
		if (GPUSYS_WORD_SEQ(w) != __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED)) {
			gpusys_host_acquire_after(&cb->client_word[p]);
			*ret_word = w;
			return true;
		}
		if (atomic_load_explicit(&cb->stop, memory_order_relaxed))
			return false;
		if (spins < 4096)
			cpu_relax();
		else
			nanosleep(&(struct timespec){ .tv_nsec = spins < 65536 ? 1000 : 100000 }, NULL);
	}
}

static void count_completion(struct gpusys_callbacks *cb, unsigned slot)
{
	/* This worker is the only writer of its progress word. */
	uint64_t n = __atomic_load_n(&cb->hdr->progress[slot].completed, __ATOMIC_RELAXED) + 1;
	gpusys_host_release_before(&cb->hdr->progress[slot].completed);
	__atomic_store_n(&cb->hdr->progress[slot].completed, n, __ATOMIC_RELAXED);
}

/* Serve the message that starts with word on port p, from packet 0 to the
 * last response packet. */
static void serve(struct gpusys_callbacks *cb, uint32_t p, unsigned slot)
{
	struct gpusys_port *port = &cb->ports[p];
	uint64_t word = __atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED);
	gpusys_host_acquire_after(&cb->client_word[p]);
	uint32_t cs = GPUSYS_WORD_SEQ(word);
	uint64_t mask = GPUSYS_CW_MASK(word);
	uint16_t opcode = GPUSYS_CW_OPCODE(word);
	bool noreply = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_NOREPLY;
	uint32_t len[GPUSYS_WARP_LANES], cap[GPUSYS_WARP_LANES], off[GPUSYS_WARP_LANES], part[GPUSYS_WARP_LANES];
	uint32_t res_len[GPUSYS_WARP_LANES];
	int32_t lane_status[GPUSYS_WARP_LANES];
	uint8_t *arg[GPUSYS_WARP_LANES], *res[GPUSYS_WARP_LANES];
	uint8_t *req_buf = NULL, *res_buf = NULL;
	/* Packet-0-sized messages (the common case) need no allocation. */
	uint8_t small_req[GPUSYS_PACKET_BYTES], small_res[GPUSYS_PACKET_BYTES];
	int32_t status = 0;

	/* Copy out once and bound (common/port_host.h, as the daemon does).
	 * A call of heads may show its word before its heads (abi.h): the
	 * client is a kernel of this process that just published, so they
	 * land within the bus's latency; wait for them here. */
	const bool heads = GPUSYS_WORD_FLAGS(word) & GPUSYS_CW_HEADS;
	/* How far the word moved past the last packet we took: 1, or 2 with
	 * the first stream packet behind packet 0 (abi.h, checked below once
	 * the stream is known); heads and empty requests never stream. */
	const uint32_t d = (cs - __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED)) & GPUSYS_SEQ_MASK;
	uint64_t in_bytes;
	if (!port_host_first_word_ok(word, d))
		status = -EINVAL;
	/* PORT_HOST_NOT_YET is a positive "look again", never a status: the
	 * loop once ended at the first one, and answered it (tests/callback
	 * test_heads_land_late). */
	uint64_t late_since = 0;
	for (unsigned spins = 0; !status; spins++) {
		status = port_host_take_request(port, word, len, cap, &in_bytes);
		if (status != PORT_HOST_NOT_YET)
			break;
		status = 0;
		if (atomic_load_explicit(&cb->stop, memory_order_relaxed))
			goto out;
		if (spins < 4096) {
			cpu_relax();
			continue;
		}
		if (!late_since)
			late_since = now_ns();
		else if (now_ns() - late_since > HEADS_LATE_MAX_NS)
			status = -EPROTO;
		nanosleep(&(struct timespec){ .tv_nsec = 1000 }, NULL);
	}
	if (status && heads) {
		/* The heads carry the refusal, as the daemon's do. */
		port_host_put_heads(port, mask, cs, NULL, NULL, NULL, status);
		ack(cb, p, cs, 0, noreply ? 0 : status);
		count_completion(cb, slot);
		return;
	}
	if (status) {
		/* Lengths not to be trusted: no stream layout, answer now. */
		ack(cb, p, cs, 0, noreply ? 0 : status);
		count_completion(cb, slot);
		return;
	}

	/* The request, in private memory. A failed allocation still takes
	 * the stream (so its packets are not taken for a new request). */
	req_buf = in_bytes <= sizeof(small_req) ? small_req : malloc(in_bytes);
	if (!req_buf)
		status = -ENOMEM;
	uint64_t at = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		arg[l] = req_buf ? req_buf + at : NULL;
		at += len[l];
	}
	if (req_buf)
		port_host_take_inline(port, word, len, arg);
	uint32_t pkt;
	uint8_t *stream = gpusys_port_stream(cb->ports, cb->windows, cb->num_ports, cb->num_windows, p, &pkt);
	uint32_t chunks = port_host_packets_for(port_host_stream_layout(mask, len, off, part), pkt);
	if (d > port_host_first_flip_max(port, stream, chunks)) {
		ack(cb, p, cs, GPUSYS_SW_TRIVIAL, noreply ? 0 : -EINVAL);
		goto out;
	}
	/* The request stream, two packets in flight (abi.h): packet 0 is
	 * acknowledged first (through data[] the client waits for it), then
	 * each packet but the last as soon as it is copied out; a word covers
	 * one or two packets (port_host_flip_packets), and any other move
	 * ends the call -EINVAL. seq: the last packet taken. */
	uint32_t seq = cs - (d - 1), have = d - 1;
	if (chunks)
		ack(cb, p, seq, 0, 0);
	for (uint32_t k = 0; k < chunks; k++) {
		if (k == have) {
			if (!wait_client(cb, p, &word))
				goto out;
			cs = GPUSYS_WORD_SEQ(word);
			uint32_t n = port_host_flip_packets(cs, seq, chunks - k);
			if (!n) {
				ack(cb, p, cs, GPUSYS_SW_TRIVIAL, noreply ? 0 : -EINVAL);
				goto out;
			}
			have = k + n;
		}
		seq++;
		if (req_buf)
			port_host_stream_copy(stream, pkt, k, off, part, arg, 0);
		if (k + 1 < chunks)
			ack(cb, p, seq, 0, 0);
	}
	cs = seq; /* the answer acknowledges the last packet */

	/* The callback, once per lane. */
	struct cb_entry *e = NULL;
	if (opcode >= GPUSYS_OP_USER_FIRST)
		e = atomic_load_explicit(&cb->ops[opcode - GPUSYS_OP_USER_FIRST], memory_order_acquire);
	if (!e && !status)
		status = -ENOSYS;
	uint64_t out_bytes = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		res_len[l] = 0;
		lane_status[l] = 0;
		res[l] = NULL;
		if (e && (mask >> l & 1))
			out_bytes += cap[l] < e->d.res_max ? cap[l] : e->d.res_max;
	}
	if (!status && out_bytes) {
		res_buf = out_bytes <= sizeof(small_res) ? small_res : malloc(out_bytes);
		if (!res_buf)
			status = -ENOMEM;
	}
	if (!status) {
		atomic_fetch_add_explicit(&cb->running, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed);
		at = 0;
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (!(mask >> l & 1))
				continue;
			uint32_t room = cap[l] < e->d.res_max ? cap[l] : e->d.res_max;
			res[l] = res_buf ? res_buf + at : NULL;
			at += room;
			if (len[l] > e->d.arg_max) {
				lane_status[l] = -E2BIG;
				continue;
			}
			uint32_t n = 0;
			int r = e->d.fn(e->d.user, arg[l], len[l], res[l], room, &n);
			if (n > room) {
				/* It wrote past what it was given: the best we can do is not send it. */
				n = 0;
				r = -EMSGSIZE;
			}
			lane_status[l] = r > 0 ? 0 : r;
			res_len[l] = r < 0 ? 0 : n;
		}
		atomic_fetch_sub_explicit(&cb->running, 1, memory_order_relaxed);
	}

	/* Response packet 0, then its stream as the client asks for it. A
	 * call of heads is answered in heads, fire-and-forget too (they
	 * overwrite the request's, as the daemon's do). res_len is bounded by
	 * the lane's capacity (room above), which take_request bounded. */
	if (heads) {
		port_host_put_heads(port, mask, cs, res_len, lane_status, res, status);
		ack(cb, p, cs, 0, noreply ? 0 : status);
		goto out;
	}
	if (noreply) {
		ack(cb, p, cs, 0, 0);
		goto out;
	}
	uint32_t trivial = 1;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (status)
			res_len[l] = 0, lane_status[l] = 0;
		trivial &= res_len[l] == 0 && lane_status[l] == 0;
	}
	chunks = 0;
	if (!trivial) {
		port_host_put_response(port, mask, res_len, lane_status, res);
		chunks = port_host_packets_for(port_host_stream_layout(mask, res_len, off, part), pkt);
	}
	ack(cb, p, cs, trivial ? GPUSYS_SW_TRIVIAL : 0, status);
	/* The response stream: each word asks for one or two packets
	 * (port_host_flip_packets), each written into its slot and
	 * acknowledged at once, so the client reads one while we copy the
	 * next; any other move ends the call -EINVAL. */
	seq = cs;
	for (uint32_t k = 0; k < chunks;) {
		if (!wait_client(cb, p, &word))
			goto out;
		cs = GPUSYS_WORD_SEQ(word);
		uint32_t n = port_host_flip_packets(cs, seq, chunks - k);
		if (!n) {
			ack(cb, p, cs, GPUSYS_SW_TRIVIAL, -EINVAL);
			goto out;
		}
		for (; n; n--, k++) {
			port_host_stream_copy(stream, pkt, k, off, part, res, 1);
			ack(cb, p, ++seq, 0, 0);
		}
	}
out:
	if (req_buf != small_req)
		free(req_buf);
	if (res_buf != small_res)
		free(res_buf);
	count_completion(cb, slot);
}

/* Claim port p if it holds a request nobody has claimed: true with the
 * client word in *ret_word. */
static bool claim_port(struct gpusys_callbacks *cb, uint32_t p, uint64_t *ret_word)
{
	if (GPUSYS_WORD_SEQ(__atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED)) == __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED))
		return false;
	unsigned char expected = 0;
	if (!atomic_compare_exchange_strong(&cb->claim[p], &expected, 1))
		return false; /* another thread has it */
	/* Re-check under the claim: a worker may have acked just now. */
	uint64_t w = __atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED);
	if (GPUSYS_WORD_SEQ(w) == __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED)) {
		atomic_store(&cb->claim[p], 0);
		return false;
	}
	*ret_word = w;
	return true;
}

/* A spinning worker's look for work of its own: the first unclaimed
 * request, claimed. The scan starts where the last one found work (a warp
 * that calls again usually takes the same port). */
static bool claim_any(struct gpusys_callbacks *cb, uint32_t *cursor, uint32_t *ret_port)
{
	uint64_t w;
	for (uint32_t i = 0, p = *cursor; i < cb->num_ports; i++, p = p + 1 == cb->num_ports ? 0 : p + 1) {
		if (claim_port(cb, p, &w)) {
			*cursor = *ret_port = p;
			return true;
		}
	}
	return false;
}

/* ------------------------------------------------------------- threads */

/* Take the next job. A spinner (spinning: it counted itself in
 * cb->spinning) stops counting as one when it gets a job, under the lock,
 * so the poller's "jobs outnumber spinners" test stays right; jobs left
 * over that no spinner will take wake a sleeper. */
static bool take_job(struct gpusys_callbacks *cb, uint32_t *ret_port, bool spinning)
{
	if (!atomic_load_explicit(&cb->q_count, memory_order_acquire))
		return false;
	bool got = false, wake = false;
	pthread_mutex_lock(&cb->q_lock);
	if (cb->q_len) {
		*ret_port = cb->queue[cb->q_head];
		cb->q_head = (cb->q_head + 1) % cb->num_ports;
		cb->q_len--;
		atomic_store_explicit(&cb->q_count, cb->q_len, memory_order_release);
		if (spinning)
			atomic_fetch_sub(&cb->spinning, 1);
		wake = cb->q_len > atomic_load(&cb->spinning);
		got = true;
	}
	pthread_mutex_unlock(&cb->q_lock);
	if (wake)
		pthread_cond_signal(&cb->q_cond);
	return got;
}

/* A spinner that found work itself, or gives up: it stops counting as one
 * under the queue lock, as in take_job. Jobs it leaves behind that no
 * spinner will take wake a sleeper. */
static void stop_spinning(struct gpusys_callbacks *cb)
{
	pthread_mutex_lock(&cb->q_lock);
	atomic_fetch_sub(&cb->spinning, 1);
	bool wake = cb->q_len > atomic_load(&cb->spinning);
	pthread_mutex_unlock(&cb->q_lock);
	if (wake)
		pthread_cond_signal(&cb->q_cond);
}

struct worker_arg {
	struct gpusys_callbacks *cb;
	unsigned slot;
};

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct gpusys_callbacks *cb = wa->cb;
	unsigned slot = wa->slot;
	uint32_t cursor = 0;
	/* The last ring this worker looked at, kept across jobs: a ring that
	 * came while it served is seen when it spins again. */
	uint64_t bell = 0;
	free(wa);

	for (;;) {
		uint32_t p;
		/* Spin a while for the next job: under load the poller hands
		 * over without a system call. Yield now and then: on a small
		 * machine the thread that will post the job may need this core. */
		atomic_fetch_add(&cb->spinning, 1);
		uint64_t until = now_ns() + WORKER_SPIN_NS;
		bool got = false;
		for (unsigned i = 1;; i++) {
			got = take_job(cb, &p, true);
			if (got || atomic_load_explicit(&cb->stop, memory_order_relaxed))
				break;
			/* While spinners exist the poller leaves rings to them:
			 * claiming the port here saves the hand-off. */
			uint64_t b = __atomic_load_n(&cb->hdr->doorbell, __ATOMIC_RELAXED);
			if (b != bell) {
				bell = b;
				if (claim_any(cb, &cursor, &p)) {
					stop_spinning(cb);
					got = true;
					break;
				}
			}
			cpu_relax();
			if ((i & 63) == 0) {
				sched_yield();
				if (now_ns() > until)
					break;
			}
		}
		if (!got) {
			stop_spinning(cb);
			/* Rings the poller left to spinners before this one
			 * stopped counting as one: look once more. */
			got = claim_any(cb, &cursor, &p);
		}
		if (!got) {
			/* Sleep; the re-check under the lock pairs with the
			 * poller's push (which signals when jobs outnumber
			 * spinners). */
			pthread_mutex_lock(&cb->q_lock);
			while (!cb->q_len && !atomic_load(&cb->stop))
				pthread_cond_wait(&cb->q_cond, &cb->q_lock);
			pthread_mutex_unlock(&cb->q_lock);
			if (atomic_load(&cb->stop) && !atomic_load(&cb->q_count))
				return NULL;
			if (!take_job(cb, &p, false))
				continue;
		}
		serve(cb, p, slot);
		atomic_store_explicit(&cb->claim[p], 0, memory_order_release);
	}
}

static void push_job(struct gpusys_callbacks *cb, uint32_t p)
{
	pthread_mutex_lock(&cb->q_lock);
	cb->queue[(cb->q_head + cb->q_len) % cb->num_ports] = p;
	cb->q_len++;
	atomic_store_explicit(&cb->q_count, cb->q_len, memory_order_release);
	bool signal = cb->q_len > atomic_load(&cb->spinning);
	pthread_mutex_unlock(&cb->q_lock);
	if (signal)
		pthread_cond_signal(&cb->q_cond);
}

/* Whether the request that word starts is for a QUICK callback. */
static bool quick(struct gpusys_callbacks *cb, uint64_t word)
{
	uint16_t op = GPUSYS_CW_OPCODE(word);
	if (op < GPUSYS_OP_USER_FIRST)
		return false;
	struct cb_entry *e = atomic_load_explicit(&cb->ops[op - GPUSYS_OP_USER_FIRST], memory_order_acquire);
	return e && (e->d.flags & GPUSYS_CALLBACK_QUICK);
}

/* One pass over every port: claim those with a new request; serve QUICK
 * ones here (progress slot poller_slot), queue the others. */
static unsigned scan(struct gpusys_callbacks *cb, unsigned poller_slot)
{
	unsigned found = 0;
	for (uint32_t p = 0; p < cb->num_ports; p++) {
		uint64_t w;
		if (!claim_port(cb, p, &w))
			continue;
		if (quick(cb, w)) {
			serve(cb, p, poller_slot);
			atomic_store_explicit(&cb->claim[p], 0, memory_order_release);
		} else {
			push_job(cb, p);
		}
		found++;
	}
	return found;
}

static void drain_efd(struct gpusys_callbacks *cb)
{
	char buf[256];
	while (read(cb->efd, buf, sizeof(buf)) > 0) {
	}
}

static void kick(struct gpusys_callbacks *cb)
{
	char one = 1;
	if (write(cb->efd_w, &one, 1) < 0) {
		/* full pipe: it is being woken anyway */
	}
}

static void *poller_main(void *arg)
{
	struct gpusys_callbacks *cb = arg;
	uint64_t bell = __atomic_load_n(&cb->hdr->doorbell, __ATOMIC_RELAXED), last_work = now_ns(), last_full = 0;
	unsigned spins = 0;

	while (!atomic_load_explicit(&cb->stop, memory_order_relaxed)) {
		uint64_t now = now_ns();
		uint64_t b = __atomic_load_n(&cb->hdr->doorbell, __ATOMIC_RELAXED);
		bool rang = b != bell;
		bell = b;
		/* The doorbell says when to look; a full pass now and then
		 * covers a ring stored out of order by racing warps. */
		if (rang && atomic_load(&cb->spinning) && now - last_full < FULL_SCAN_NS) {
			/* A spinning worker claims it and serves it itself. */
			last_work = now;
		} else if (rang || now - last_full >= FULL_SCAN_NS) {
			last_full = now;
			if (scan(cb, cb->nworkers) || rang)
				last_work = now;
		}
		if (now - last_work < SPIN_NS) {
			cpu_relax();
			/* Let a worker have the core on a small machine. */
			if ((++spins & 63) == 0)
				sched_yield();
			continue;
		}
		uint64_t until = atomic_load_explicit(&cb->expect_until, memory_order_relaxed);
		if (now - last_work < NAP_FOR_NS || (until > now && until - now <= GPUSYS_ACTIVE_HOLD_NS)) {
			nanosleep(&(struct timespec){ .tv_nsec = NAP_NS }, NULL);
			continue;
		}
		/* Deep sleep: announce, full fence, look once more. */
		__atomic_store_n(&cb->hdr->dozing, 1, __ATOMIC_RELAXED);
		gpusys_host_full_fence();
		if (__atomic_load_n(&cb->hdr->doorbell, __ATOMIC_RELAXED) == bell && !scan(cb, cb->nworkers)) {
			until = atomic_load_explicit(&cb->expect_until, memory_order_relaxed);
			if (!(until > now_ns()) && !atomic_load(&cb->stop)) {
				struct pollfd pf = { .fd = cb->efd, .events = POLLIN };
				if (poll(&pf, 1, SAFETY_MS) > 0)
					drain_efd(cb);
			}
		}
		__atomic_store_n(&cb->hdr->dozing, 0, __ATOMIC_RELAXED);
		last_work = now_ns();
		last_full = 0;
	}
	return NULL;
}

/* ------------------------------------------------------------- the API */

int gpusys_callbacks_create(const struct gpusys_callbacks_opts *opts, struct gpusys_callbacks **ret)
{
	gpusys_cache_push_init();
	uint32_t ports = opts && opts->num_ports ? opts->num_ports : 64;
	unsigned threads = opts && opts->threads ? opts->threads : 0;
	if (!threads) {
		const char *e = getenv("GPUSYS_CALLBACK_THREADS");
		threads = e ? (unsigned)strtoul(e, NULL, 10) : 0;
		if (!threads)
			threads = 4;
	}
	if (ports > GPUSYS_MAX_PORTS || threads > MAX_THREADS || threads + 1 > GPUSYS_PROGRESS_SLOTS)
		return -EINVAL;

	struct gpusys_callbacks *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	cb->efd = cb->efd_w = -1;
	pthread_mutex_init(&cb->reg_lock, NULL);
	pthread_mutex_init(&cb->q_lock, NULL);
	pthread_cond_init(&cb->q_cond, NULL);
	struct gpusys_channel_layout l = gpusys_channel_layout(ports, 0, GPUSYS_PAGE_BYTES);
	cb->bytes = l.total_bytes;
	void *m = mmap(NULL, cb->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		free(cb);
		return -ENOMEM;
	}
	cb->base = m;
	gpusys_channel_format(m, ports, &l, 0);
	cb->hdr = m;
	cb->client_word = (volatile uint64_t *)(cb->base + l.client_word_offset);
	cb->server_word = (volatile uint64_t *)(cb->base + l.server_word_offset);
	cb->ports = (struct gpusys_port *)(cb->base + l.ports_offset);
	cb->num_ports = ports;
	cb->num_windows = l.num_windows;
	cb->windows = l.num_windows ? cb->base + l.window_offset : NULL;
	cb->seen = calloc(ports, sizeof(*cb->seen));
	cb->claim = calloc(ports, sizeof(*cb->claim));
	cb->queue = calloc(ports, sizeof(*cb->queue));
	cb->ops = calloc(USER_OPS, sizeof(*cb->ops));
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) == 0)
		cb->efd = pfd[0], cb->efd_w = pfd[1];
	int rc = 0;
	if (!cb->seen || !cb->claim || !cb->queue || !cb->ops || cb->efd < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < threads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		if (!wa) {
			rc = -ENOMEM;
			goto fail;
		}
		*wa = (struct worker_arg){ .cb = cb, .slot = i };
		rc = -pthread_create(&cb->workers[i], NULL, worker_main, wa);
		if (rc) {
			free(wa);
			goto fail;
		}
		cb->nworkers++;
	}
	rc = -pthread_create(&cb->poller, NULL, poller_main, cb);
	if (rc)
		goto fail;
	*ret = cb;
	return 0;
fail:
	atomic_store(&cb->stop, 1);
	pthread_mutex_lock(&cb->q_lock);
	pthread_cond_broadcast(&cb->q_cond);
	pthread_mutex_unlock(&cb->q_lock);
	for (unsigned i = 0; i < cb->nworkers; i++)
		pthread_join(cb->workers[i], NULL);
	cb->nworkers = 0;
	cb->poller = 0;
	gpusys_callbacks_destroy(cb);
	return rc;
}

void gpusys_callbacks_destroy(struct gpusys_callbacks *cb)
{
	if (!cb)
		return;
	atomic_store(&cb->stop, 1);
	gpusys_host_release_before(&cb->hdr->server_state);
	__atomic_store_n(&cb->hdr->server_state, GPUSYS_SERVER_STOPPED, __ATOMIC_RELAXED);
	if (cb->efd_w >= 0)
		kick(cb);
	if (cb->poller)
		pthread_join(cb->poller, NULL);
	pthread_mutex_lock(&cb->q_lock);
	pthread_cond_broadcast(&cb->q_cond);
	pthread_mutex_unlock(&cb->q_lock);
	for (unsigned i = 0; i < cb->nworkers; i++)
		pthread_join(cb->workers[i], NULL);
	if (cb->efd >= 0)
		close(cb->efd);
	if (cb->efd_w >= 0)
		close(cb->efd_w);
	for (unsigned i = 0; i < cb->nlist; i++) {
		free((void *)cb->list[i]->d.name);
		free(cb->list[i]);
	}
	free(cb->list);
	free((void *)cb->ops);
	free(cb->seen);
	free((void *)cb->claim);
	free(cb->queue);
	free(cb->emu_locks);
	free(cb->emu_warp_futures);
	munmap(cb->base, cb->bytes);
	pthread_mutex_destroy(&cb->reg_lock);
	pthread_mutex_destroy(&cb->q_lock);
	pthread_cond_destroy(&cb->q_cond);
	free(cb);
}

int gpusys_callbacks_register(struct gpusys_callbacks *cb, const struct gpusys_callback_desc *d)
{
	if (!cb || !d || !d->fn || d->opcode < GPUSYS_OP_USER_FIRST || d->arg_max > GPUSYS_MAX_LANE_PAYLOAD ||
	    d->res_max > GPUSYS_MAX_LANE_PAYLOAD)
		return -EINVAL;
	struct cb_entry *e = calloc(1, sizeof(*e));
	char *name = strdup(d->name ? d->name : "");
	if (!e || !name) {
		free(e);
		free(name);
		return -ENOMEM;
	}
	e->d = *d;
	e->d.name = name;
	int rc = 0;
	pthread_mutex_lock(&cb->reg_lock);
	if (atomic_load(&cb->ops[d->opcode - GPUSYS_OP_USER_FIRST])) {
		rc = -EEXIST;
	} else if (cb->nlist == cb->caplist) {
		unsigned cap = cb->caplist ? 2 * cb->caplist : 8;
		struct cb_entry **nl = realloc(cb->list, cap * sizeof(*nl));
		if (!nl)
			rc = -ENOMEM;
		else
			cb->list = nl, cb->caplist = cap;
	}
	if (!rc) {
		cb->list[cb->nlist++] = e;
		atomic_store_explicit(&cb->ops[d->opcode - GPUSYS_OP_USER_FIRST], e, memory_order_release);
	}
	pthread_mutex_unlock(&cb->reg_lock);
	if (rc) {
		free(name);
		free(e);
	}
	return rc;
}

const gpusys_dev_t *gpusys_callbacks_emu_dev(struct gpusys_callbacks *cb)
{
	pthread_mutex_lock(&cb->reg_lock);
	if (!cb->emu_locks) {
		cb->emu_locks = calloc(cb->num_ports, sizeof(*cb->emu_locks));
		cb->emu_warp_futures = calloc(GPUSYS_EMU_WARP_SLOTS, sizeof(uint32_t));
		if (cb->emu_locks && cb->emu_warp_futures) {
			gpusys_dev_fill(&cb->emu_dev, cb->base, cb->hdr, cb->emu_locks, &cb->emu_submitted);
			cb->emu_dev.wake_fd = cb->efd_w;
			cb->emu_dev.warp_futures = cb->emu_warp_futures;
			cb->emu_dev.warp_slots = GPUSYS_EMU_WARP_SLOTS;
		}
	}
	pthread_mutex_unlock(&cb->reg_lock);
	return cb->emu_locks && cb->emu_warp_futures ? &cb->emu_dev : NULL;
}

void gpusys_callbacks_expect(struct gpusys_callbacks *cb, uint64_t until_ns)
{
	atomic_store_explicit(&cb->expect_until, until_ns, memory_order_relaxed);
	gpusys_host_full_fence();
	if (until_ns && __atomic_load_n(&cb->hdr->dozing, __ATOMIC_RELAXED))
		kick(cb);
}

uint64_t gpusys_callbacks_completed(const struct gpusys_callbacks *cb)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < GPUSYS_PROGRESS_SLOTS; i++)
		n += __atomic_load_n(&cb->hdr->progress[i].completed, __ATOMIC_ACQUIRE);
	return n;
}

uint32_t gpusys_callbacks_running(const struct gpusys_callbacks *cb)
{
	return atomic_load_explicit(&((struct gpusys_callbacks *)cb)->running, memory_order_relaxed);
}

int gpusys_callbacks_info(const struct gpusys_callbacks *cb, unsigned index, const char **name, uint16_t *opcode,
			  uint64_t *calls)
{
	struct gpusys_callbacks *w = (struct gpusys_callbacks *)cb;
	int rc = -ENOENT;
	pthread_mutex_lock(&w->reg_lock);
	if (index < w->nlist) {
		struct cb_entry *e = w->list[index];
		if (name)
			*name = e->d.name;
		if (opcode)
			*opcode = e->d.opcode;
		if (calls)
			*calls = atomic_load(&e->calls);
		rc = 0;
	}
	pthread_mutex_unlock(&w->reg_lock);
	return rc;
}

void *gpusys_callbacks_channel(const struct gpusys_callbacks *cb, uint64_t *ret_bytes)
{
	if (ret_bytes)
		*ret_bytes = cb->bytes;
	return cb->base;
}

/* ------------------------------------------------------------ debugging */

void callbacks_dump_stuck(FILE *f, const struct gpusys_callbacks *cb)
{
	struct gpusys_callbacks *w = (struct gpusys_callbacks *)cb;
	fprintf(f, "gpusys: callbacks: %u workers, %u spinning, %u running, %u queued, %llu completed, dozing %u\n",
		cb->nworkers, atomic_load(&w->spinning), atomic_load(&w->running), atomic_load(&w->q_count),
		(unsigned long long)gpusys_callbacks_completed(cb), (unsigned)cb->hdr->dozing);
	unsigned n = 0;
	for (uint32_t p = 0; p < cb->num_ports; p++) {
		uint64_t c = __atomic_load_n(&cb->client_word[p], __ATOMIC_RELAXED);
		uint16_t seen = __atomic_load_n(&cb->seen[p], __ATOMIC_RELAXED);
		unsigned claimed = atomic_load(&w->claim[p]);
		if (GPUSYS_WORD_SEQ(c) == seen && !claimed)
			continue;
		if (n++ < CHANNEL_DUMP_LINES)
			fprintf(f, "gpusys: callbacks port %u: client seq %u flags 0x%x opcode 0x%04x; acknowledged %u; %s\n", p,
				GPUSYS_WORD_SEQ(c), GPUSYS_WORD_FLAGS(c), GPUSYS_CW_OPCODE(c), seen,
				claimed ? "claimed" : "not claimed");
	}
	fprintf(f, "gpusys: callbacks: %u of %u ports not acknowledged or claimed\n", n, cb->num_ports);
	channel_dump_waiting(f, "callbacks", cb->hdr);
}
