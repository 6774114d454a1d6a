/* SPDX-License-Identifier: MIT */
/*
 * The print service: GPUSYS_OP_PRINT (one line per lane) and
 * GPUSYS_OP_PRINT_FLUSH.
 *
 * PRINT runs on the poller (SERVICE_ON_POLLER). It formats every lane's record
 * (daemon/services/print/print_format.c) into private memory, without a lock; then, under
 * the client's mutex, appends the lanes' lines in lane order to the client's
 * output buffer, and only then is the request acknowledged. So a lane's next
 * line is sent only once its previous one is in the buffer, in order, and no
 * line is ever split by another: lines of one lane keep their order, lines of
 * different lanes never interleave.
 *
 * The buffer is written out by a writer thread of the client's own, started
 * at attach. It takes the whole buffer at once (it swaps it with an
 * empty one), so lines from every SM that arrived meanwhile leave in one
 * write() per run of one stream. After a write it lingers, looking for more
 * every PRINT_LINGER_NS for PRINT_LINGER_LOOKS looks, before it sleeps on
 * its condition variable: while a kernel prints, the pollers never wake it
 * (a futex call under the client's lock, for every call, was a third of
 * the daemon's time printing from emulated warps, with the lock's own
 * waits), and a line waits at most one look before it is written. The lock
 * spins a little before it sleeps (adaptive): it is held for a copy. Its writes block: a slow terminal or a full
 * pipe stalls only this client's writer, never a poller, and never the worker
 * pool that serves every client's file calls (a pipe that nobody reads would
 * otherwise hold a pool worker for good). The buffer is bounded
 * (print_buffer_limit, 4 MiB): beyond it the lanes are answered -EAGAIN and
 * the device side retries with backoff, so nothing is lost and a fast kernel
 * is slowed to the speed of its output.
 *
 * The buffers' memory is also the user's: every byte of their capacity is
 * charged to the client's user account (ACCOUNT_MEMORY, user_mem_budget)
 * when a buffer grows, and given back when it is freed, so 64 clients of one
 * user printing into a pipe nobody reads hold at most the user's budget, not
 * 64 x 4 MiB. A call whose lines the budget has no room for is answered
 * -EAGAIN like a full buffer: back-pressure, never a dropped line. The state
 * keeps its own reference to the account: an abandoned writer (below) holds
 * its buffer, and its charge, after the session is gone.
 *
 * The descriptors are dup'ed from the client's when the state is created (at
 * attach),
 * so the writer owns its own. At teardown (client_fini, after the
 * client is gone, e.g. killed mid-kernel) everything accepted is written out
 * (the writer keeps going after its client is gone); teardown, which may run
 * on the daemon's main thread, waits for it only PRINT_FINI_WAIT_MS, then
 * leaves it to finish alone with its own descriptors and buffer, so a pipe
 * that nobody reads holds up neither the session nor the main loop. At exit
 * the daemon (the service's stop hook) gives such writers
 * PRINT_EXIT_WAIT_MS.
 *
 * PRINT_FLUSH runs on the poller too and never waits: it says whether every
 * byte accepted before it has been written (or failed to be), and if not,
 * -EAGAIN with the byte count to wait for; the device side retries with
 * backoff (up to GPUSYS_PRINT_FLUSH_WAIT_NS), so a client whose descriptor
 * does not drain holds no daemon thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpusys/print.h"
#include "services/print/print_format.h"
#include "services/print/service_print.h"
#include "core/accounts.h"
#include "core/service.h"

/* Teardown may run on the daemon's main thread: it waits this long for the
 * writer (a file or terminal drains in microseconds), then leaves it to
 * finish alone. At exit, writers still draining get PRINT_EXIT_WAIT_MS. */
#define PRINT_FINI_WAIT_MS 50
#define PRINT_EXIT_WAIT_MS 1000
#define PRINT_KEEP_BYTES (256u * 1024u) /* buffer kept across idle periods */
#define PRINT_LINGER_NS 20000         /* the writer's look for more, after a write */
#define PRINT_LINGER_LOOKS 50         /* ... this many times (about 1-4 ms), then it sleeps */

static _Atomic uint64_t print_buffer_limit = 4u << 20;

/* Writers left to finish alone (their client is gone). */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t orphans_cv = PTHREAD_COND_INITIALIZER;
static unsigned orphans;

void print_set_buffer_limit(uint64_t bytes)
{
	atomic_store(&print_buffer_limit, bytes);
}

static struct timespec deadline_in(int ms);

/* At exit, give orphaned writers a bounded time to write what they hold:
 * lines accepted before the daemon stopped still reach their files. */
static void wait_orphans(void)
{
	struct timespec dl = deadline_in(PRINT_EXIT_WAIT_MS);
	pthread_mutex_lock(&orphans_mu);
	while (orphans && pthread_cond_timedwait(&orphans_cv, &orphans_mu, &dl) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&orphans_mu);
}

/* Consecutive bytes of one stream in a buffer. */
struct seg {
	uint8_t stream;
	size_t len;
};

struct outbuf {
	char *data;
	size_t len, cap;
	struct seg *segs;
	size_t nsegs, segcap;
};

struct print_state {
	pthread_mutex_t mu;
	pthread_cond_t data_cv;  /* writer: data or stop */
	pthread_cond_t done_cv;  /* flushers and fini: bytes written */
	int fd[3];               /* [GPUSYS_PRINT_STDOUT], [GPUSYS_PRINT_STDERR]; -1: none */
	struct outbuf active;    /* appended by pollers */
	struct outbuf spare;     /* the writer's, while it writes */
	uint64_t appended;       /* bytes ever appended */
	uint64_t written;        /* bytes ever taken off by the writer (written or failed) */
	_Atomic bool has_data;   /* active.len != 0, for the lingering writer's look without the lock */
	bool writer_waiting;     /* asleep on data_cv: an append must signal */
	bool stop;               /* fini: drain and exit */
	bool writer_done;
	bool abandoned;          /* fini gave up waiting: the writer frees the state */
	pthread_t writer;
	struct print_stats stats;
	struct account *account; /* its user's, a reference of its own; NULL: none (in-process tests) */
};

/* ------------------------------------------------------------ buffers */

/* The memory a buffer holds, as charged to the user. */
static uint64_t outbuf_bytes(const struct outbuf *b)
{
	return b->cap + b->segcap * sizeof(struct seg);
}

static void outbuf_free(struct outbuf *b, struct account *a)
{
	account_uncharge(a, ACCOUNT_MEMORY, outbuf_bytes(b));
	free(b->data);
	free(b->segs);
	memset(b, 0, sizeof(*b));
}

/* Room for n more bytes in up to segs more runs, grown before anything is
 * appended so that a call's lanes go in whole or not at all (lane order).
 * The growth is charged to the user first: -EAGAIN when the budget has no
 * room (the lanes retry, as for a full buffer), -ENOMEM when realloc fails. */
static int outbuf_reserve(struct outbuf *b, struct account *a, size_t n, size_t segs)
{
	size_t cap = b->cap, segcap = b->segcap;
	if (cap - b->len < n) {
		cap = cap ? cap : 64 * 1024;
		while (cap - b->len < n)
			cap *= 2;
	}
	if (segcap - b->nsegs < segs) {
		segcap = segcap ? segcap : 16;
		while (segcap - b->nsegs < segs)
			segcap *= 2;
	}
	uint64_t grow = (cap - b->cap) + (segcap - b->segcap) * sizeof(struct seg);
	if (!grow)
		return 0;
	if (!account_charge(a, ACCOUNT_MEMORY, grow))
		return -EAGAIN;
	if (cap != b->cap) {
		char *d = realloc(b->data, cap);
		if (!d)
			goto nomem;
		b->data = d;
		grow -= cap - b->cap;
		b->cap = cap;
	}
	if (segcap != b->segcap) {
		struct seg *sg = realloc(b->segs, segcap * sizeof(*sg));
		if (!sg)
			goto nomem;
		b->segs = sg;
		b->segcap = segcap;
	}
	return 0;
nomem:
	/* Only what did not grow goes back: a grown data area stays charged
	 * (outbuf_bytes counts it). */
	account_uncharge(a, ACCOUNT_MEMORY, grow);
	return -ENOMEM;
}

/* Append within the room outbuf_reserve made. */
static void outbuf_append(struct outbuf *b, int stream, const char *s, size_t n)
{
	if (n == 0)
		return;
	if (!b->nsegs || b->segs[b->nsegs - 1].stream != stream)
		b->segs[b->nsegs++] = (struct seg){ .stream = (uint8_t)stream, .len = 0 };
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->segs[b->nsegs - 1].len += n;
}

/* ------------------------------------------------------------- writer */

/* Write all of buf, blocking. A descriptor the client left non-blocking is
 * waited on with poll. false: an error (the rest is dropped). */
static bool write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);
		if (w > 0) {
			buf += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return false;
			continue;
		}
		return false; /* EPIPE (SIGPIPE is ignored by the daemon), EBADF, EIO, ENOSPC... */
	}
	return true;
}

static void state_free(struct print_state *st)
{
	for (int i = 1; i <= 2; i++)
		if (st->fd[i] >= 0)
			close(st->fd[i]);
	outbuf_free(&st->active, st->account);
	outbuf_free(&st->spare, st->account);
	account_put(st->account);
	pthread_cond_destroy(&st->data_cv);
	pthread_cond_destroy(&st->done_cv);
	pthread_mutex_destroy(&st->mu);
	free(st);
}

/* After a write: look for more without the lock, PRINT_LINGER_LOOKS times
 * at most, so that appends need not wake us. Called and returns locked. */
static void writer_linger(struct print_state *st)
{
	if (st->active.len || st->stop)
		return;
	pthread_mutex_unlock(&st->mu);
	for (int i = 0; i < PRINT_LINGER_LOOKS; i++) {
		nanosleep(&(struct timespec){ .tv_nsec = PRINT_LINGER_NS }, NULL);
		if (atomic_load_explicit(&st->has_data, memory_order_relaxed))
			break;
	}
	pthread_mutex_lock(&st->mu);
}

static void *writer_main(void *arg)
{
	struct print_state *st = arg;

	pthread_mutex_lock(&st->mu);
	for (;;) {
		while (st->active.len == 0 && !st->stop) {
			/* Idle: give back what a burst grew, so that a client
			 * that printed much once does not hold megabytes. */
			if (st->active.cap > PRINT_KEEP_BYTES)
				outbuf_free(&st->active, st->account);
			if (st->spare.cap > PRINT_KEEP_BYTES)
				outbuf_free(&st->spare, st->account);
			st->writer_waiting = true;
			pthread_cond_wait(&st->data_cv, &st->mu);
			st->writer_waiting = false;
		}
		if (st->active.len == 0)
			break; /* stopping, and everything is out */
		struct outbuf b = st->active;
		st->active = st->spare;
		atomic_store_explicit(&st->has_data, false, memory_order_relaxed);
		pthread_mutex_unlock(&st->mu);

		uint64_t errors = 0;
		size_t at = 0;
		for (size_t i = 0; i < b.nsegs; i++) {
			if (!write_all(st->fd[b.segs[i].stream], b.data + at, b.segs[i].len))
				errors++;
			at += b.segs[i].len;
		}

		pthread_mutex_lock(&st->mu);
		st->written += b.len;
		st->stats.written += b.len;
		st->stats.write_errors += errors;
		b.len = 0;
		b.nsegs = 0;
		st->spare = b;
		pthread_cond_broadcast(&st->done_cv);
		writer_linger(st);
	}
	st->writer_done = true;
	pthread_cond_broadcast(&st->done_cv);
	bool abandoned = st->abandoned;
	pthread_mutex_unlock(&st->mu);
	if (abandoned) {
		state_free(st);
		pthread_mutex_lock(&orphans_mu);
		orphans--;
		pthread_cond_broadcast(&orphans_cv);
		pthread_mutex_unlock(&orphans_mu);
	}
	return NULL;
}

/* -------------------------------------------------------------- state */

static int dup_fd(int fd)
{
	if (fd < 0)
		return -1;
	return fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

static int state_create(const struct client *c, struct print_state **ret)
{
	struct print_state *st;
	int r;

	st = calloc(1, sizeof(*st));

	if (!st)
		return -ENOMEM;
	int out_fd = c->stdout_fd, err_fd = c->stderr_fd;
	st->fd[0] = -1;
	st->fd[GPUSYS_PRINT_STDOUT] = dup_fd(out_fd);
	st->fd[GPUSYS_PRINT_STDERR] = dup_fd(err_fd);
	/* The same account as the session's (one per uid), held by the state:
	 * an abandoned writer outlives the session. */
	st->account = c->account ? account_get(c->creds.uid) : NULL;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&st->mu, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&st->data_cv, NULL);
	pthread_cond_init(&st->done_cv, NULL);
	if ((out_fd >= 0 && st->fd[GPUSYS_PRINT_STDOUT] < 0) || (err_fd >= 0 && st->fd[GPUSYS_PRINT_STDERR] < 0)) {
		r = -errno;
		goto fail;
	}
	r = -pthread_create(&st->writer, NULL, writer_main, st);
	if (r < 0)
		goto fail;
	*ret = st;
	return 0;
fail:
	state_free(st);
	return r;
}

void print_client_stats(const void *state, struct print_stats *ret)
{
	struct print_state *st = (struct print_state *)state;
	memset(ret, 0, sizeof(*ret));
	if (!st)
		return;
	pthread_mutex_lock(&st->mu);
	*ret = st->stats;
	pthread_mutex_unlock(&st->mu);
}

static struct timespec deadline_in(int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void print_client_fini(const struct client *c, void *state)
{
	struct print_state *st = state;
	(void)c;
	if (!st)
		return;

	struct timespec dl = deadline_in(PRINT_FINI_WAIT_MS);
	pthread_mutex_lock(&st->mu);
	st->stop = true;
	pthread_cond_signal(&st->data_cv);
	while (!st->writer_done) {
		if (pthread_cond_timedwait(&st->done_cv, &st->mu, &dl) == ETIMEDOUT)
			break;
	}
	bool done = st->writer_done;
	/* Taken under the lock: once abandoned is set and the lock dropped,
	 * the writer may free st at any moment (ThreadSanitizer caught the
	 * detach reading st->writer from freed memory). */
	pthread_t writer = st->writer;
	if (!done) {
		pthread_mutex_lock(&orphans_mu);
		orphans++;
		pthread_mutex_unlock(&orphans_mu);
		st->abandoned = true; /* the writer frees it when its write returns */
	}
	pthread_mutex_unlock(&st->mu);
	if (done) {
		pthread_join(writer, NULL);
		state_free(st);
	} else {
		pthread_detach(writer);
	}
}

/* ----------------------------------------------------------- services */

static void print_handle(struct port_call *call)
{
	struct print_buf text = { 0 };
	size_t off[GPUSYS_WARP_LANES];
	size_t len[GPUSYS_WARP_LANES];
	int stream[GPUSYS_WARP_LANES];
	uint32_t ok = 0; /* lanes whose line is formatted */
	uint64_t refused = 0;
	int err = -EBADF;

	struct print_state *st = call->state;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		if (!st) {
			call->lane_status[l] = err;
			continue;
		}
		off[l] = text.len;
		int r = print_format_record(call->data[l], call->len[l], &text, &stream[l]);
		if (r >= 0 && st->fd[stream[l]] < 0) {
			text.len = off[l];
			r = -EBADF;
		}
		call->lane_status[l] = r;
		if (r < 0) {
			refused++;
			continue;
		}
		len[l] = (size_t)r;
		ok |= 1u << l;
	}
	if (!st)
		return;

	size_t bytes = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
		if (ok >> l & 1)
			bytes += len[l];
	unsigned lanes = (unsigned)__builtin_popcount(ok);

	pthread_mutex_lock(&st->mu);
	st->stats.refused += refused;
	int room = 0;
	if (ok && st->active.len &&
	    st->active.len + bytes > atomic_load_explicit(&print_buffer_limit, memory_order_relaxed))
		room = -EAGAIN;
	else if (ok)
		room = outbuf_reserve(&st->active, st->account, bytes, lanes); /* -EAGAIN: the user's budget */
	if (room < 0) {
		/* Full: every formatted lane tries again later (the warp's
		 * lines stay together and in lane order); or, out of memory,
		 * fails. */
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++)
			if (ok >> l & 1)
				call->lane_status[l] = room;
		if (room == -EAGAIN)
			st->stats.again++;
		ok = 0;
	}
	/* The lanes' lines lie one after another in text, in lane order (a
	 * refused lane left nothing): one copy for each run of one stream. */
	for (uint32_t l = 0, m = ok; m;) {
		l = (uint32_t)__builtin_ctz(m);
		uint32_t e = l;
		size_t run = 0;
		for (; e < GPUSYS_WARP_LANES && (m >> e & 1) && stream[e] == stream[l]; e++) {
			m &= ~(1u << e);
			run += len[e];
		}
		outbuf_append(&st->active, stream[l], text.data + off[l], run);
	}
	if (ok) { /* appended, not refused as full */
		st->appended += bytes;
		st->stats.lines += lanes;
		st->stats.bytes += bytes;
	}
	bool wake = false;
	if (st->active.len) {
		atomic_store_explicit(&st->has_data, true, memory_order_relaxed);
		wake = st->writer_waiting;
	}
	pthread_mutex_unlock(&st->mu);
	/* After the unlock: the woken writer's first act is to take the lock. */
	if (wake)
		pthread_cond_signal(&st->data_cv);
	print_buf_free(&text);
}

/* Has everything up to target been written? Never waits: a flush that is
 * not done yet is answered -EAGAIN with the target (8 bytes), which the
 * client sends back on its next try, so that lines other warps print
 * meanwhile do not move the goal. No daemon thread is ever held by a client
 * whose output does not drain. */
static void flush_handle(struct port_call *call)
{
	struct print_state *st = call->state;
	uint64_t appended = 0, written = 0;
	bool done = true;

	if (st) {
		pthread_mutex_lock(&st->mu);
		appended = st->appended;
		written = st->written;
		done = st->writer_done;
		pthread_mutex_unlock(&st->mu);
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uint64_t target = appended;
		if (call->len[l] == 8)
			memcpy(&target, call->data[l], 8);
		else if (call->len[l] != 0) {
			call->lane_status[l] = -EINVAL;
			continue;
		}
		/* No state: nothing was ever printed, so nothing is pending. */
		if (!st || done || written >= target)
			continue;
		if (!call->resp_buf) {
			call->resp_buf = malloc(sizeof(uint64_t));
			if (!call->resp_buf) {
				call->lane_status[l] = -ENOMEM;
				continue;
			}
			memcpy(call->resp_buf, &appended, sizeof(appended));
		}
		call->lane_status[l] = -EAGAIN;
		if (call->cap[l] >= 8 && call->len[l] == 0) {
			call->resp_len[l] = 8;
			call->resp_data[l] = call->resp_buf;
		} else if (call->cap[l] >= 8) {
			call->resp_len[l] = 8;
			call->resp_data[l] = call->data[l]; /* its own target, back */
		}
	}
}

/* ------------------------------------------------------------ lifecycle */

static const struct config_key settings[] = {
	/* Bytes of output buffered per client; past it lanes are told to
	 * retry (-EAGAIN). Tests use a small one to exercise the retries. */
	{ "print_buffer_bytes", CONFIG_BYTES, 4096, UINT64_C(1) << 30, 4u << 20 },
	{ NULL, 0, 0, 0, 0 },
};

static int print_start(const struct service_env *env)
{
	print_set_buffer_limit(config_value(env->cfg, "print_buffer_bytes"));
	return 0;
}

/* At shutdown, give orphaned writers a bounded time to write what they
 * hold: lines accepted before the daemon stopped still reach their files. */
static void print_stop(void)
{
	wait_orphans();
}

static int print_client_init(const struct client *c, void **ret_state)
{
	struct print_state *st = NULL;
	int r = state_create(c, &st);
	if (r == 0)
		*ret_state = st;
	return r;
}

static const struct service_op ops[] = {
	{ GPUSYS_OP_PRINT, SERVICE_ON_POLLER, 0, "print", print_handle },
	{ GPUSYS_OP_PRINT_FLUSH, SERVICE_ON_POLLER, 0, "print_flush", flush_handle },
};

const struct service service_print = {
	.name = "print",
	.group = GPUSYS_OP_PRINT >> 8,
	.ops = ops,
	.nops = sizeof(ops) / sizeof(ops[0]),
	.settings = settings,
	.start = print_start,
	.stop = print_stop,
	.client_init = print_client_init,
	.client_fini = print_client_fini,
};
