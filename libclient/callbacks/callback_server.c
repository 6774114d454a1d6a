/* SPDX-License-Identifier: MIT */
/*
 * The callback server (include/gpusys/callback.h): the server side of the
 * port protocol (include/gpusys/abi.h) for user opcodes, in the client
 * process, over a channel of its own that gpusysd never maps.
 *
 * Threads: one poller and a pool of workers. The poller finds a port whose
 * client word moved, claims it and hands it to a worker, which does what
 * that word allows (step: packet 0, stream packets, the callback once the
 * request is whole, response packets) and lets the port go; whoever ends a
 * message counts the completion in its progress slot of the channel header
 * (gpusys_synchronize and gpusys_query add those up). A slow callback holds
 * its worker only; the poller and the other workers go on.
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
 * The kernels writing this channel are the process's own; still, every
 * length is copied out once and bounded, so a scribbled channel fails the
 * call, never this process.
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
#include "libclient/callbacks/callback_internal.h"
#define SPIN_NS (200u * 1000u)         /* poller spins this long after work */
#define NAP_NS (50u * 1000u)           /* then naps this long at a time */
#define NAP_FOR_NS (2u * 1000u * 1000u) /* for this long after work */
#define SAFETY_MS 1000                 /* deep sleep: rescan anyway */
#define WORKER_SPIN_NS (100u * 1000u)  /* a worker waits this long for more */
/* Workers spinning for a job with no port to watch, at most: each more one
 * slowed small calls (one warp's 32 x 4 KiB callback 282 us with 4 workers,
 * 365 with 12; the storm's typed calls 1.1 against 3.1-3.3 ms; one H200,
 * bench/RESULTS.md "Tenth session"), while large calls from many warps
 * need the workers (7.0-7.2 GB/s with 4, 13.2-13.4 with 12). */
#define SPINNERS_MAX 4u
#define FULL_SCAN_NS (50u * 1000u)     /* spinning: every port at least this often */

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

/* claim_port for a spinning worker (me: its slot + 1): not a port another
 * worker watches. */
static bool claim_unwatched(struct gpusys_callbacks *cb, uint32_t p, unsigned me)
{
	unsigned by = atomic_load_explicit(&cb->watched_by[p], memory_order_relaxed);
	uint64_t w;
	return (!by || by == me) && claim_port(cb, p, &w);
}

/* A spinning worker's look for work of its own: the first unclaimed
 * request, claimed. The scan starts where the last one found work (a warp
 * that calls again usually takes the same port). */
static bool claim_any(struct gpusys_callbacks *cb, uint32_t *cursor, uint32_t *ret_port, unsigned me)
{
	for (uint32_t i = 0, p = *cursor; i < cb->num_ports; i++, p = p + 1 == cb->num_ports ? 0 : p + 1) {
		if (claim_unwatched(cb, p, me)) {
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

/* Watch port p (UINT32_MAX: none) instead of *hot: the mark moves. */
static void watch(struct gpusys_callbacks *cb, uint32_t *hot, uint32_t p, unsigned me)
{
	if (*hot == p)
		return;
	if (*hot != UINT32_MAX) {
		unsigned char mine = (unsigned char)me;
		atomic_compare_exchange_strong_explicit(&cb->watched_by[*hot], &mine, 0, memory_order_relaxed,
							memory_order_relaxed);
	}
	if (p != UINT32_MAX)
		atomic_store_explicit(&cb->watched_by[p], (unsigned char)me, memory_order_relaxed);
	*hot = p;
}

/* A spinning worker's wait for its next job (it counts itself in
 * cb->spinning; true: *ret_port claimed or taken, and it no longer counts):
 * the port it watches, the queue, the port a new ring names, then any port
 * not watched, until WORKER_SPIN_NS pass. */
static bool spin_for_job(struct gpusys_callbacks *cb, uint32_t *ret_port, uint32_t *cursor, uint64_t *bell,
			 uint32_t hot, unsigned me)
{
	uint64_t until = now_ns() + WORKER_SPIN_NS;
	for (unsigned i = 1;; i++) {
		if (hot != UINT32_MAX && claim_unwatched(cb, hot, me)) {
			*ret_port = hot;
			stop_spinning(cb);
			return true;
		}
		if (take_job(cb, ret_port, true))
			return true;
		if (atomic_load_explicit(&cb->stop, memory_order_relaxed))
			return false;
		/* While spinners exist the poller leaves rings to them:
		 * claiming the port here saves the hand-off. The ring names
		 * its port (abi.h): that one first. */
		uint64_t b = __atomic_load_n(&cb->hdr->doorbell, __ATOMIC_RELAXED);
		if (b != *bell) {
			*bell = b;
			uint32_t named = gpusys_ring_port(b);
			if (named < cb->num_ports && claim_unwatched(cb, named, me)) {
				*ret_port = named;
				stop_spinning(cb);
				return true;
			}
			if (claim_any(cb, cursor, ret_port, me)) {
				stop_spinning(cb);
				return true;
			}
		}
		cpu_relax();
		if ((i & 63) == 0) {
			sched_yield();
			if (now_ns() > until)
				return false;
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct gpusys_callbacks *cb = wa->cb;
	unsigned slot = wa->slot;
	uint32_t cursor = 0;
	/* The last ring this worker looked at, kept across jobs: a ring that
	 * came while it served is seen when it spins again. */
	uint64_t bell = 0;
	/* A port whose message this worker left part way: its next packet
	 * comes within microseconds, so it is looked at first, and it is
	 * marked watched (watched_by) while this worker spins. */
	uint32_t hot = UINT32_MAX;
	const unsigned me = slot + 1;
	free(wa);

	for (;;) {
		uint32_t p;
		bool got = false;
		/* Spin a while for the next job: under load the poller hands
		 * over without a system call. Yield now and then: on a small
		 * machine the thread that will post the job may need this core.
		 * At most SPINNERS_MAX spin with nothing to watch; the others
		 * sleep until jobs outnumber the spinners. */
		if (hot != UINT32_MAX || atomic_load(&cb->spinning) < SPINNERS_MAX) {
			atomic_fetch_add(&cb->spinning, 1);
			got = spin_for_job(cb, &p, &cursor, &bell, hot, me);
			if (!got) {
				stop_spinning(cb);
				/* Rings the poller left to spinners before this
				 * one stopped counting as one: look once more. */
				got = claim_any(cb, &cursor, &p, me);
			}
		} else {
			got = take_job(cb, &p, false);
		}
		if (!got) {
			/* Sleep; the re-check under the lock pairs with the
			 * poller's push (which signals when jobs outnumber
			 * spinners). Nobody watches for us meanwhile. */
			watch(cb, &hot, UINT32_MAX, me);
			pthread_mutex_lock(&cb->q_lock);
			while (!cb->q_len && !atomic_load(&cb->stop))
				pthread_cond_wait(&cb->q_cond, &cb->q_lock);
			pthread_mutex_unlock(&cb->q_lock);
			if (atomic_load(&cb->stop) && !atomic_load(&cb->q_count))
				return NULL;
			if (!take_job(cb, &p, false))
				continue;
		}
		cb_step(cb, p, slot);
		if (cb->msg[p] && cb->msg[p]->phase != CB_IDLE)
			watch(cb, &hot, p, me);
		else if (p == hot)
			watch(cb, &hot, UINT32_MAX, me);
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

/* Whether port p (claimed), whose client word is word, serves a QUICK
 * callback: its message's, or the one word starts. */
static bool quick(struct gpusys_callbacks *cb, uint32_t p, uint64_t word)
{
	const struct cb_msg *m = cb->msg[p];
	uint16_t op = m && m->phase != CB_IDLE ? m->opcode : GPUSYS_CW_OPCODE(word);
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
		if (quick(cb, p, w)) {
			cb_step(cb, p, poller_slot);
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

/* Workers when the caller names no number: three in four of the CPUs, 4 to
 * DEFAULT_THREADS_MAX. Large calls from the whole GPU are bound by them
 * (132 warps' 64 KiB bytes callbacks on a 16-core H200 host: 6.6 GB/s
 * with 4, 13.1 with 12; bench/RESULTS.md, "Tenth session"), and an idle
 * worker costs nothing: it sleeps after WORKER_SPIN_NS. */
#define DEFAULT_THREADS_MAX 16u
static unsigned default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = cpus > 0 ? (unsigned)cpus * 3 / 4 : 4;
	return n < 4 ? 4 : n > DEFAULT_THREADS_MAX ? DEFAULT_THREADS_MAX : n;
}

int gpusys_callbacks_create(const struct gpusys_callbacks_opts *opts, struct gpusys_callbacks **ret)
{
	gpusys_cache_push_init();
	uint32_t ports = opts && opts->num_ports ? opts->num_ports : 64;
	unsigned threads = opts && opts->threads ? opts->threads : 0;
	if (!threads) {
		const char *e = getenv("GPUSYS_CALLBACK_THREADS");
		threads = e ? (unsigned)strtoul(e, NULL, 10) : 0;
		if (!threads)
			threads = default_threads();
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
	cb->msg = calloc(ports, sizeof(*cb->msg));
	cb->watched_by = calloc(ports, sizeof(*cb->watched_by));
	cb->queue = calloc(ports, sizeof(*cb->queue));
	cb->ops = calloc(USER_OPS, sizeof(*cb->ops));
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) == 0)
		cb->efd = pfd[0], cb->efd_w = pfd[1];
	int rc = 0;
	if (!cb->seen || !cb->claim || !cb->msg || !cb->watched_by || !cb->queue || !cb->ops || cb->efd < 0) {
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
	for (uint32_t p = 0; cb->msg && p < cb->num_ports; p++)
		cb_msg_free(cb->msg[p]); /* with a message the kernels left part way */
	free(cb->msg);
	free((void *)cb->watched_by);
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
