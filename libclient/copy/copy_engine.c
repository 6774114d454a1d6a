/* SPDX-License-Identifier: MIT */
/*
 * The bulk copy engine (copy_engine.h): N producer threads, one consumer
 * thread, slots moving between a free stack, a producer queue and a
 * consumer queue under one mutex. A chunk is megabytes, so a lock round per
 * stage costs nothing next to the copy; the hot work (memcpy, pinning, DMA
 * calls) always runs with the lock dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "copy_adapt.h"
#include "copy_bytes.h"
#include "copy_engine.h"
#include "common/clock.h"

enum stage {
	ST_COPY_IN,  /* producer: caller's memory -> staging buffer */
	ST_PIN,      /* producer: pin the caller's pages */
	ST_DMA,      /* consumer */
	ST_UNPIN,    /* producer: always runs once pinned, even after an error */
	ST_COPY_OUT, /* producer: staging buffer -> caller's memory */
};

struct slot {
	void *buf;    /* staging buffer */
	uint64_t ticket; /* the chunk's number among all chunks of the engine */
	bool busy;
	char *host;   /* the caller's bytes of this chunk */
	uint64_t dev;
	size_t n;
	enum stage stage;
	bool in_place; /* host is pinned: DMA straight from/to it, unpin after */
};

/* A ring of slot numbers; each slot is in at most one ring at a time, so
 * nslots entries always suffice. */
struct ring {
	unsigned *v;
	unsigned head, count, cap;
};

static void ring_push(struct ring *r, unsigned s)
{
	r->v[(r->head + r->count++) % r->cap] = s;
}

static unsigned ring_pop(struct ring *r)
{
	unsigned s = r->v[r->head];
	r->head = (r->head + 1) % r->cap;
	r->count--;
	return s;
}

struct copy_job {
	struct copy_request req;
	uint64_t first_ticket;
	size_t chunk, nchunks;
	uintptr_t base;  /* chunk i starts at base + i * chunk (clamped to host) */
	size_t next;     /* next chunk to claim */
	size_t released; /* chunks whose slot came back */
	int err;
	bool done;
	bool run_all;   /* COPY_EVERY_CHUNK and not cancelled */
	struct copy_engine *engine;
	struct copy_job *queue_next;
};

/* A producer thread: its number decides whether it works (below active). */
struct producer_arg {
	struct copy_engine *e;
	unsigned idx;
};

/* The consumer's measure of the current job (copy_adapt.h): a window opens
 * at the job's first finished DMA (before it the link waits on the first
 * chunk, whatever the producer count) and closes after enough chunks. */
struct window {
	bool open;
	uint64_t t0_ns, starved_ns, bytes;
	unsigned chunks;
};

struct copy_engine {
	struct copy_engine_config cfg;
	pthread_mutex_t lk;
	pthread_cond_t prod_cv; /* producers: work in pq, or a chunk to claim */
	pthread_cond_t idle_cv; /* producers not working (idx >= active) */
	pthread_cond_t cons_cv; /* consumer: work in cq, a slot back, a job queued */
	pthread_cond_t done_cv; /* waiters: a job done; create: a thread started */
	struct slot *slots;
	uint64_t next_ticket; /* of the next job submitted */
	unsigned held;
	struct ring pq, cq;
	struct copy_job *cur;                /* the job being run */
	struct copy_job *jobs_head, *jobs_tail; /* waiting to run */
	bool stop_consumer, stop_producers;
	unsigned started;
	int start_err;
	pthread_t consumer;
	pthread_t *producers;
	struct producer_arg *pargs;
	unsigned nproducers_running;
	unsigned nthreads;      /* producer threads: max_producers */
	unsigned active;        /* producers working: adapt.active, read unlocked
				   (relaxed) by copy_engine_chunk_for */
	struct copy_adapt adapt;
	struct window win;
	uint64_t job_t0_ns;     /* consumer's: when the current job began */
	unsigned producers_start; /* working at create: active = it + added - removed */
	bool consumer_running;
	struct copy_engine_stats stats;
};

static bool first_stage_is_producer(const struct copy_job *j)
{
	return j->req.mode == COPY_IN_PLACE || j->req.dir == COPY_HTOD;
}

/* Whether j goes on: no error, or an error in a job whose every chunk must
 * still pass (COPY_EVERY_CHUNK: the other side waits for each one). */
static bool going(const struct copy_job *j)
{
	return !j->err || j->run_all;
}

/* Chunk number t always uses slot t % nslots, so the consumer side can
 * schedule a job's chunks before they exist (copy_job_chunk). */
static bool can_claim(const struct copy_engine *e, const struct copy_job *j)
{
	return j && going(j) && j->next < j->nchunks &&
	       !e->slots[(j->first_ticket + j->next) % e->cfg.nslots].busy;
}

static void chunk_range(const struct copy_job *j, size_t i, uintptr_t *ret_lo, uintptr_t *ret_hi)
{
	uintptr_t h = (uintptr_t)j->req.host;
	uintptr_t lo = j->base + i * j->chunk, hi = lo + j->chunk;
	*ret_lo = lo < h ? h : lo;
	*ret_hi = hi > h + j->req.n ? h + j->req.n : hi;
}

/* Under lock: the next chunk of j into its slot. */
static unsigned claim(struct copy_engine *e, struct copy_job *j)
{
	size_t i = j->next++;
	uint64_t ticket = j->first_ticket + i;
	unsigned s = (unsigned)(ticket % e->cfg.nslots);
	uintptr_t h = (uintptr_t)j->req.host, lo, hi;
	chunk_range(j, i, &lo, &hi);
	struct slot *sl = &e->slots[s];
	sl->busy = true;
	sl->ticket = ticket;
	sl->host = (char *)lo;
	sl->dev = j->req.dev + (lo - h);
	sl->n = hi - lo;
	sl->in_place = false;
	sl->stage = j->req.mode == COPY_IN_PLACE ? ST_PIN : j->req.dir == COPY_HTOD ? ST_COPY_IN : ST_DMA;
	if (++e->held > e->stats.max_in_flight)
		e->stats.max_in_flight = e->held;
	return s;
}

/* Under lock: the chunk is finished (or abandoned after an error). */
static void release(struct copy_engine *e, unsigned s)
{
	e->slots[s].busy = false;
	e->held--;
	e->cur->released++;
	e->stats.chunks++;
	if (e->slots[s].in_place)
		e->stats.chunks_in_place++;
	pthread_cond_signal(&e->prod_cv);
	pthread_cond_signal(&e->cons_cv);
}

static void fail_job(struct copy_job *j, int err)
{
	if (!j->err)
		j->err = err < 0 ? err : -EIO;
}

static void to_consumer(struct copy_engine *e, unsigned s)
{
	e->slots[s].stage = ST_DMA;
	ring_push(&e->cq, s);
	pthread_cond_signal(&e->cons_cv);
}

static void to_producer(struct copy_engine *e, unsigned s, enum stage st)
{
	e->slots[s].stage = st;
	ring_push(&e->pq, s);
	pthread_cond_signal(&e->prod_cv);
}

static int thread_begin(struct copy_engine *e, enum copy_thread_role role)
{
	int rc = e->cfg.ops->thread_start ? e->cfg.ops->thread_start(e->cfg.ctx, role) : 0;
	pthread_mutex_lock(&e->lk);
	e->started++;
	if (rc < 0 && !e->start_err)
		e->start_err = rc;
	pthread_cond_broadcast(&e->done_cv);
	pthread_mutex_unlock(&e->lk);
	return rc;
}

/* Under lock: whether a working producer would find something to do. */
static bool producer_work(const struct copy_engine *e)
{
	return e->pq.count || (e->cur && first_stage_is_producer(e->cur) && can_claim(e, e->cur));
}

static void *producer_main(void *arg)
{
	struct producer_arg *pa = arg;
	struct copy_engine *e = pa->e;
	const unsigned idx = pa->idx;
	const struct copy_dma_ops *ops = e->cfg.ops;
	int started = thread_begin(e, COPY_THREAD_PRODUCER);

	pthread_mutex_lock(&e->lk);
	for (;;) {
		unsigned s;
		if (idx >= e->active) {
			/* Not working now. A wake-up meant for a working producer
			 * may have come here: pass it on before parking. */
			if (e->stop_producers)
				break;
			if (producer_work(e))
				pthread_cond_signal(&e->prod_cv);
			pthread_cond_wait(&e->idle_cv, &e->lk);
			continue;
		}
		if (e->pq.count)
			s = ring_pop(&e->pq);
		else if (e->cur && first_stage_is_producer(e->cur) && can_claim(e, e->cur))
			s = claim(e, e->cur);
		else if (e->stop_producers)
			break;
		else {
			pthread_cond_wait(&e->prod_cv, &e->lk);
			continue;
		}
		struct copy_job *j = e->cur;
		struct slot *sl = &e->slots[s];
		bool failed = j->err != 0;
		enum stage st = sl->stage;
		int rc = 0;
		pthread_mutex_unlock(&e->lk);

		switch (st) {
		case ST_COPY_IN:
			if (!failed)
				copy_into_staging(sl->buf, sl->host, sl->n, e->cfg.streaming);
			if (idx == 0 && e->cfg.slow_producer_us)
				usleep(e->cfg.slow_producer_us);
			break;
		case ST_COPY_OUT:
			if (!failed)
				memcpy(sl->host, sl->buf, sl->n);
			if (idx == 0 && e->cfg.slow_producer_us)
				usleep(e->cfg.slow_producer_us);
			break;
		case ST_PIN:
			rc = failed ? -ECANCELED : ops->pin(e->cfg.ctx, sl->host, sl->n);
			break;
		case ST_UNPIN:
			ops->unpin(e->cfg.ctx, sl->host, sl->n);
			break;
		case ST_DMA:
			break; /* never queued to producers */
		}

		pthread_mutex_lock(&e->lk);
		switch (st) {
		case ST_COPY_IN:
			if (going(j))
				to_consumer(e, s);
			else
				release(e, s);
			break;
		case ST_PIN:
			if (rc == 0) {
				sl->in_place = true;
				to_consumer(e, s);
			} else if (j->err) {
				release(e, s);
			} else {
				/* Pages pinned elsewhere (or not pinnable): stage
				 * this chunk instead. */
				e->stats.pin_fallbacks++;
				if (j->req.dir == COPY_HTOD)
					to_producer(e, s, ST_COPY_IN);
				else
					to_consumer(e, s);
			}
			break;
		case ST_UNPIN:
		case ST_COPY_OUT:
		case ST_DMA:
			release(e, s);
			break;
		}
	}
	pthread_mutex_unlock(&e->lk);
	if (started == 0 && ops->thread_stop)
		ops->thread_stop(e->cfg.ctx, COPY_THREAD_PRODUCER);
	return NULL;
}

/* The consumer's transfers in flight, oldest first (its own, no lock). */
struct inflight {
	unsigned *v;
	unsigned head, count, cap;
};

/* Under lock, for the consumer: where slot s goes after its DMA. */
static void after_dma(struct copy_engine *e, unsigned s, int rc)
{
	struct slot *sl = &e->slots[s];
	if (rc < 0)
		fail_job(e->cur, rc);
	if (sl->in_place)
		to_producer(e, s, ST_UNPIN);
	else if (e->cur->req.dir == COPY_DTOH && !e->cur->err)
		to_producer(e, s, ST_COPY_OUT);
	else
		release(e, s);
}

/* Under lock: a window's worth of chunks is at least this many, and two
 * per working producer, so that each producer's pace shows in it. */
#define WINDOW_MIN_CHUNKS 8

static void set_active(struct copy_engine *e, unsigned n)
{
	unsigned before = e->active;
	if (n == before)
		return;
	__atomic_store_n(&e->active, n, __ATOMIC_RELAXED);
	if (n > before)
		pthread_cond_broadcast(&e->idle_cv); /* to work */
	else
		pthread_cond_broadcast(&e->prod_cv); /* the last one parks after its chunk */
}

/* Under lock, for the consumer: a chunk's DMA finished well. Ends the
 * measuring window when it has enough chunks, and lets copy_adapt decide. */
static void window_chunk(struct copy_engine *e, size_t n)
{
	struct window *w = &e->win;
	uint64_t t = now_ns();
	if (!w->open) {
		*w = (struct window){ .open = true, .t0_ns = t };
		return;
	}
	w->chunks++;
	w->bytes += n;
	unsigned need = 2 * e->active > WINDOW_MIN_CHUNKS ? 2 * e->active : WINDOW_MIN_CHUNKS;
	if (w->chunks < need)
		return;
	double dt = (double)(t - w->t0_ns);
	if (dt < 1)
		dt = 1;
	/* bytes per ns are GB/s */
	set_active(e, copy_adapt_window(&e->adapt, (double)w->starved_ns / dt, (double)w->bytes / dt));
	*w = (struct window){ .open = true, .t0_ns = t };
}

static void wait_briefly(struct copy_engine *e)
{
	/* A transfer is in flight and nothing else to do: look again in ~10 us
	 * rather than block on it, so that a chunk a producer finishes meanwhile
	 * is queued behind it without a gap on the link. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 10000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&e->cons_cv, &e->lk, &ts);
}

/* Under lock, the job over: count it, close its window; whether it is
 * reported, and what (in *ret, taken before j is handed back). */
static bool job_finished(struct copy_engine *e, struct copy_job *j, struct copy_job_summary *ret)
{
	uint64_t ns = now_ns() - e->job_t0_ns;
	e->stats.jobs++;
	if (!j->err) {
		e->stats.bytes += j->req.n;
		e->stats.last_job_bytes = j->req.n;
		e->stats.last_job_ns = ns;
	}
	copy_adapt_job_end(&e->adapt);
	e->win.open = false;
	e->cur = NULL;
	if (j->err || !j->req.n || !e->cfg.finished)
		return false;
	*ret = (struct copy_job_summary){
		.dir = j->req.dir,
		.bytes = j->req.n,
		.ns = ns ? ns : 1,
		.producers_start = e->producers_start,
		.producers_end = e->active,
		.producers_added = e->adapt.added,
		.producers_removed = e->adapt.removed,
	};
	return true;
}

static void *consumer_main(void *arg)
{
	struct copy_engine *e = arg;
	const struct copy_dma_ops *ops = e->cfg.ops;
	/* Short timed waits (wait_briefly) must be short: 1 us slack, not 50. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	int started = thread_begin(e, COPY_THREAD_CONSUMER);
	struct inflight fl = { .v = calloc(e->cfg.nslots, sizeof(unsigned)), .cap = e->cfg.nslots };

	pthread_mutex_lock(&e->lk);
	if (!fl.v)
		e->start_err = -ENOMEM; /* copy_engine_create saw started and fails */
	for (;;) {
		if (!e->cur) {
			if (!e->jobs_head) {
				if (e->stop_consumer)
					break;
				pthread_cond_wait(&e->cons_cv, &e->lk);
				continue;
			}
			struct copy_job *j = e->jobs_head;
			e->jobs_head = j->queue_next;
			if (!e->jobs_head)
				e->jobs_tail = NULL;
			pthread_mutex_unlock(&e->lk);
			int rc = ops->job_begin ? ops->job_begin(e->cfg.ctx, j->req.job_arg) : 0;
			pthread_mutex_lock(&e->lk);
			if (rc < 0)
				fail_job(j, rc);
			e->cur = j;
			e->job_t0_ns = now_ns();
			e->win = (struct window){ 0 };
			pthread_cond_broadcast(&e->prod_cv);
		}
		struct copy_job *j = e->cur;
		bool progress = false;

		/* Device to host, staged: the consumer starts chunks itself. */
		while (!first_stage_is_producer(j) && can_claim(e, j)) {
			unsigned s = claim(e, j);
			ring_push(&e->cq, s);
		}
		/* The full-buffer queue, in order. */
		while (e->cq.count) {
			unsigned s = ring_pop(&e->cq);
			struct slot *sl = &e->slots[s];
			if (!going(j)) {
				after_dma(e, s, 0);
				progress = true;
				continue;
			}
			void *host = sl->in_place ? (void *)sl->host : sl->buf;
			pthread_mutex_unlock(&e->lk);
			int rc = ops->start(e->cfg.ctx, s, sl->ticket, j->req.dir, host, sl->dev, sl->n);
			pthread_mutex_lock(&e->lk);
			if (rc < 0)
				after_dma(e, s, rc);
			else
				fl.v[(fl.head + fl.count++) % fl.cap] = s;
			progress = true;
		}
		/* Transfers done, oldest first (one stream: they end in order). */
		while (fl.count) {
			unsigned s = fl.v[fl.head];
			pthread_mutex_unlock(&e->lk);
			int rc = ops->poll(e->cfg.ctx, s, false);
			pthread_mutex_lock(&e->lk);
			if (rc == 0)
				break;
			fl.head = (fl.head + 1) % fl.cap;
			fl.count--;
			if (rc > 0 && going(j))
				window_chunk(e, e->slots[s].n);
			after_dma(e, s, rc);
			progress = true;
		}
		if (j->released == j->next && (j->next == j->nchunks || !going(j)) && !fl.count) {
			pthread_mutex_unlock(&e->lk);
			if (ops->job_end)
				ops->job_end(e->cfg.ctx, j->req.job_arg, j->err);
			pthread_mutex_lock(&e->lk);
			struct copy_job_summary sum;
			bool report = job_finished(e, j, &sum);
			j->done = true; /* j is its waiter's from here: may be freed */
			pthread_cond_broadcast(&e->done_cv);
			if (report) {
				pthread_mutex_unlock(&e->lk);
				e->cfg.finished(e->cfg.finished_arg, &sum);
				pthread_mutex_lock(&e->lk);
			}
			continue;
		}
		if (progress || e->cq.count)
			continue;
		if (fl.count >= 2) {
			/* The link has queued work: block on the oldest (a bounded
			 * wait for a consumer that says so by returning 0). */
			unsigned s = fl.v[fl.head];
			pthread_mutex_unlock(&e->lk);
			int rc = ops->poll(e->cfg.ctx, s, true);
			pthread_mutex_lock(&e->lk);
			if (rc != 0) {
				fl.head = (fl.head + 1) % fl.cap;
				fl.count--;
				if (rc > 0 && going(j))
					window_chunk(e, e->slots[s].n);
				after_dma(e, s, rc);
			}
		} else if (fl.count == 1) {
			wait_briefly(e);
		} else if (e->win.open && going(j)) {
			/* Nothing on the link and the job not done: the link waits
			 * on producers (copy_adapt.h). */
			uint64_t t0 = now_ns();
			pthread_cond_wait(&e->cons_cv, &e->lk);
			e->win.starved_ns += now_ns() - t0;
		} else {
			pthread_cond_wait(&e->cons_cv, &e->lk);
		}
	}
	pthread_mutex_unlock(&e->lk);
	free(fl.v);
	if (started == 0 && ops->thread_stop)
		ops->thread_stop(e->cfg.ctx, COPY_THREAD_CONSUMER);
	return NULL;
}

static void stop_threads(struct copy_engine *e)
{
	pthread_mutex_lock(&e->lk);
	e->stop_consumer = true;
	pthread_cond_broadcast(&e->cons_cv);
	pthread_mutex_unlock(&e->lk);
	if (e->consumer_running)
		pthread_join(e->consumer, NULL);
	pthread_mutex_lock(&e->lk);
	e->stop_producers = true;
	pthread_cond_broadcast(&e->prod_cv);
	pthread_cond_broadcast(&e->idle_cv);
	pthread_mutex_unlock(&e->lk);
	for (unsigned i = 0; i < e->nproducers_running; i++)
		pthread_join(e->producers[i], NULL);
	e->consumer_running = false;
	e->nproducers_running = 0;
}

static void free_engine(struct copy_engine *e)
{
	pthread_mutex_destroy(&e->lk);
	pthread_cond_destroy(&e->prod_cv);
	pthread_cond_destroy(&e->idle_cv);
	pthread_cond_destroy(&e->cons_cv);
	pthread_cond_destroy(&e->done_cv);
	free(e->slots);
	free(e->pq.v);
	free(e->cq.v);
	free(e->producers);
	free(e->pargs);
	free(e);
}

int copy_engine_create(const struct copy_engine_config *cfg, struct copy_engine **ret)
{
	if (!cfg || !cfg->ops || !cfg->ops->start || !cfg->ops->poll || !cfg->buffers || cfg->nslots == 0 ||
	    cfg->buffer_bytes == 0 || cfg->nproducers == 0 || cfg->min_chunk > cfg->buffer_bytes ||
	    (cfg->ops->pin && !cfg->ops->unpin))
		return -EINVAL;
	struct copy_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->cfg = *cfg;
	if (!e->cfg.page_size) {
		long p = sysconf(_SC_PAGESIZE);
		e->cfg.page_size = p > 0 ? (size_t)p : 4096;
	}
	pthread_mutex_init(&e->lk, NULL);
	pthread_cond_init(&e->prod_cv, NULL);
	pthread_cond_init(&e->idle_cv, NULL);
	pthread_cond_init(&e->cons_cv, NULL);
	pthread_cond_init(&e->done_cv, NULL);
	unsigned n = cfg->nslots;
	e->slots = calloc(n, sizeof(*e->slots));
	e->pq = (struct ring){ .v = calloc(n, sizeof(unsigned)), .cap = n };
	e->cq = (struct ring){ .v = calloc(n, sizeof(unsigned)), .cap = n };
	e->nthreads = cfg->max_producers > cfg->nproducers ? cfg->max_producers : cfg->nproducers;
	copy_adapt_init(&e->adapt, cfg->nproducers, e->nthreads);
	e->active = e->adapt.active; /* the one count of working producers */
	e->producers_start = e->active;
	e->producers = calloc(e->nthreads, sizeof(pthread_t));
	e->pargs = calloc(e->nthreads, sizeof(*e->pargs));
	if (!e->slots || !e->pq.v || !e->cq.v || !e->producers || !e->pargs) {
		free_engine(e);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++)
		e->slots[i].buf = cfg->buffers[i];
	int rc = -pthread_create(&e->consumer, NULL, consumer_main, e);
	if (rc == 0)
		e->consumer_running = true;
	for (unsigned i = 0; rc == 0 && i < e->nthreads; i++) {
		e->pargs[i] = (struct producer_arg){ e, i };
		rc = -pthread_create(&e->producers[i], NULL, producer_main, &e->pargs[i]);
		if (rc == 0)
			e->nproducers_running++;
	}
	pthread_mutex_lock(&e->lk);
	unsigned want = (e->consumer_running ? 1 : 0) + e->nproducers_running;
	while (e->started < want)
		pthread_cond_wait(&e->done_cv, &e->lk);
	if (rc == 0)
		rc = e->start_err;
	pthread_mutex_unlock(&e->lk);
	if (rc < 0) {
		stop_threads(e);
		free_engine(e);
		return rc;
	}
	*ret = e;
	return 0;
}

void copy_engine_destroy(struct copy_engine *e)
{
	if (!e)
		return;
	stop_threads(e); /* the consumer runs every queued job first */
	free_engine(e);
}

size_t copy_engine_chunk_for(const struct copy_engine *e, size_t n)
{
	size_t max = e->cfg.buffer_bytes;
	if (!e->cfg.min_chunk)
		return max;
	/* Enough chunks to keep every working producer busy, rounded to 64 KiB. */
	size_t c = n / __atomic_load_n(&e->active, __ATOMIC_RELAXED) + 1;
	c = (c + 65535) & ~(size_t)65535;
	if (c < e->cfg.min_chunk)
		c = e->cfg.min_chunk;
	return c > max ? max : c;
}

int copy_engine_submit(struct copy_engine *e, const struct copy_request *req, struct copy_job **ret)
{
	if (!e || !req || !ret || (req->dir != COPY_HTOD && req->dir != COPY_DTOH) ||
	    (req->mode != COPY_STAGED && req->mode != COPY_IN_PLACE))
		return -EINVAL;
	if (req->n && (!req->host || (uintptr_t)req->host + req->n < (uintptr_t)req->host ||
		       req->dev + req->n < req->dev))
		return -EINVAL;
	if (req->flags & ~(unsigned)COPY_EVERY_CHUNK)
		return -EINVAL;
	if (req->mode == COPY_IN_PLACE && !e->cfg.ops->pin)
		return -ENOTSUP;
	if (req->mode == COPY_IN_PLACE && (req->flags & COPY_EVERY_CHUNK))
		return -EINVAL; /* a chunk that falls back to staging would move elsewhere */
	if (req->n && e->cfg.ops->check) {
		int rc = e->cfg.ops->check(e->cfg.ctx, req->dir, req->dev, req->n);
		if (rc < 0)
			return rc;
	}
	struct copy_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->req = *req;
	j->engine = e;
	j->run_all = req->flags & COPY_EVERY_CHUNK;
	j->chunk = copy_engine_chunk_for(e, req->n);
	uintptr_t h = (uintptr_t)req->host;
	j->base = h;
	size_t page = e->cfg.page_size;
	if (req->mode == COPY_IN_PLACE) {
		/* Chunks own whole pages, so that no two pinned ranges share one. */
		j->chunk = j->chunk / page * page;
		if (j->chunk == 0)
			j->req.mode = COPY_STAGED;
		else
			j->base = h / page * page;
	}
	j->nchunks = req->n ? (h + req->n - j->base + j->chunk - 1) / j->chunk : 0;

	pthread_mutex_lock(&e->lk);
	if (e->stop_consumer) {
		pthread_mutex_unlock(&e->lk);
		free(j);
		return -ESHUTDOWN;
	}
	j->first_ticket = e->next_ticket;
	e->next_ticket += j->nchunks;
	if (e->jobs_tail)
		e->jobs_tail->queue_next = j;
	else
		e->jobs_head = j;
	e->jobs_tail = j;
	pthread_cond_signal(&e->cons_cv);
	pthread_mutex_unlock(&e->lk);
	*ret = j;
	return 0;
}

/* A job's done flag and result are guarded by its engine's lock. */
static struct copy_engine *engine_of(struct copy_job *j)
{
	return j->engine;
}

int copy_job_test(struct copy_job *j)
{
	struct copy_engine *e = engine_of(j);
	pthread_mutex_lock(&e->lk);
	int done = j->done;
	pthread_mutex_unlock(&e->lk);
	return done;
}

int copy_job_wait(struct copy_job *j)
{
	struct copy_engine *e = engine_of(j);
	pthread_mutex_lock(&e->lk);
	while (!j->done)
		pthread_cond_wait(&e->done_cv, &e->lk);
	int rc = j->err;
	pthread_mutex_unlock(&e->lk);
	return rc;
}

int copy_job_release(struct copy_job *j)
{
	if (!j)
		return 0;
	int rc = copy_job_wait(j);
	free(j);
	return rc;
}

int copy_engine_copy(struct copy_engine *e, const struct copy_request *req)
{
	struct copy_job *j;
	int rc = copy_engine_submit(e, req, &j);
	return rc < 0 ? rc : copy_job_release(j);
}

void copy_engine_get_stats(struct copy_engine *e, struct copy_engine_stats *ret)
{
	pthread_mutex_lock(&e->lk);
	*ret = e->stats;
	ret->producers_start = e->cfg.nproducers;
	ret->producers_active = e->active;
	ret->producers_max = e->nthreads;
	ret->producers_added = e->adapt.added;
	ret->producers_removed = e->adapt.removed;
	pthread_mutex_unlock(&e->lk);
}

void copy_job_cancel(struct copy_job *j, int err)
{
	struct copy_engine *e = engine_of(j);
	pthread_mutex_lock(&e->lk);
	if (!j->done) {
		fail_job(j, err);
		j->run_all = false;
		pthread_cond_broadcast(&e->cons_cv);
		pthread_cond_broadcast(&e->prod_cv);
	}
	pthread_mutex_unlock(&e->lk);
}

int copy_job_timedwait(struct copy_job *j, uint64_t timeout_ns)
{
	struct copy_engine *e = engine_of(j);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + timeout_ns % 1000000000u;
	ts.tv_sec += (time_t)(timeout_ns / 1000000000u + ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	pthread_mutex_lock(&e->lk);
	while (!j->done)
		if (pthread_cond_timedwait(&e->done_cv, &e->lk, &ts) == ETIMEDOUT)
			break;
	int done = j->done;
	pthread_mutex_unlock(&e->lk);
	return done;
}

void copy_job_geometry(const struct copy_job *j, uint64_t *ret_first_ticket, size_t *ret_nchunks)
{
	*ret_first_ticket = j->first_ticket;
	*ret_nchunks = j->nchunks;
}

void copy_job_chunk(const struct copy_job *j, size_t i, void **ret_host, uint64_t *ret_dev, size_t *ret_n)
{
	uintptr_t lo, hi;
	chunk_range(j, i, &lo, &hi);
	*ret_host = (void *)lo;
	*ret_dev = j->req.dev + (lo - (uintptr_t)j->req.host);
	*ret_n = hi - lo;
}
