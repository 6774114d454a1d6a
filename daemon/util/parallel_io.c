/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/parallel_io.h"
#include "common/clock.h"

/*
 * One thread copies page cache to memory at about 10 GB/s; the link to the
 * GPU does 50. A large bulk transfer is cut into chunks (io.chunk bytes, 1
 * MiB unless set) that the worker serving it and a few I/O threads take in
 * turn. The I/O threads only ever pread/pwrite descriptors already open (as
 * the client), wait for nothing but work, and never take a lock a worker holds while waiting for them, so
 * workers and I/O threads cannot deadlock.
 */

struct io_job {
	int fd;
	bool write_op;
	uint8_t *map; /* writes: copy into this mapping of the file ([off, off + len)); NULL: pwrite */
	uint8_t *buf;
	int64_t off;
	uint64_t len;
	uint64_t chunk; /* bytes per chunk (io.chunk when the job started) */
	uint32_t nchunks;
	atomic_uint next;
	atomic_uint done;
	atomic_uint users; /* I/O threads inside job_work: the job outlives them */
	int64_t *res; /* per chunk: bytes, or -errno */
	struct io_job *qnext;
	pthread_mutex_t lock;
	pthread_cond_t cv;
};

struct io_threads {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct io_job *head;
	unsigned users;    /* parallel_io_start() calls not yet stopped */
	bool stopping;
	unsigned threads;
	uint64_t chunk;
	uint64_t spin_ns;     /* how long an idle thread looks for work before sleeping */
	atomic_uint posted;   /* jobs queued so far: what spinning threads watch */
	pthread_t tid[PARALLEL_IO_MAX_THREADS];
};

static struct io_threads io = {
	.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .chunk = PARALLEL_IO_DEFAULT_CHUNK,
};

/* Copies into a mapping of a file fault with SIGBUS where the page is not
 * there any more (another process truncated the file) or cannot be had (a
 * full file system). A copy guarded here returns false then, and its chunk
 * is written with pwrite(2) instead, which extends the file again or
 * reports the error: the same outcome as pwrite all along. A SIGBUS outside
 * a guarded copy goes to the handler that was there before (the default
 * ends the process, as it did). */
static _Thread_local sigjmp_buf *volatile bus_guard;
static struct sigaction bus_prev;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	if (bus_guard)
		siglongjmp(*bus_guard, 1);
	/* Not ours: the fault happens again with the old handler in place. */
	sigaction(SIGBUS, &bus_prev, NULL);
}

static void bus_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &bus_prev);
}

static bool copy_guarded(uint8_t *dst, const uint8_t *src, uint64_t n)
{
	sigjmp_buf jb;
	if (sigsetjmp(jb, 1)) {
		bus_guard = NULL;
		return false;
	}
	/* The signal fences keep the compiler from moving the copy out from
	 * between the two stores (it knows memcpy does not read bus_guard,
	 * and would drop the first store as dead). */
	bus_guard = &jb;
	atomic_signal_fence(memory_order_seq_cst);
	memcpy(dst, src, n);
	atomic_signal_fence(memory_order_seq_cst);
	bus_guard = NULL;
	return true;
}

static int64_t chunk_copy(const struct io_job *j, uint32_t c)
{
	uint64_t lo = (uint64_t)c * j->chunk, n = j->len - lo < j->chunk ? j->len - lo : j->chunk;
	uint64_t done = 0;
	if (j->map && copy_guarded(j->map + lo, j->buf + lo, n))
		return (int64_t)n;
	while (done < n) {
		ssize_t r = j->write_op ? pwrite(j->fd, j->buf + lo + done, n - done, j->off + (int64_t)(lo + done))
					: pread(j->fd, j->buf + lo + done, n - done, j->off + (int64_t)(lo + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return done ? (int64_t)done : -errno;
		if (r == 0)
			break; /* end of file */
		done += (uint64_t)r;
	}
	return (int64_t)done;
}

/* Take chunks of j until none is left. */
static void job_work(struct io_job *j)
{
	for (;;) {
		uint32_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= j->nchunks)
			return;
		j->res[c] = chunk_copy(j, c);
		if (atomic_fetch_add_explicit(&j->done, 1, memory_order_acq_rel) + 1 == j->nchunks) {
			pthread_mutex_lock(&j->lock);
			pthread_cond_signal(&j->cv);
			pthread_mutex_unlock(&j->lock);
		}
	}
}

/* Spin up to spin_ns until cond(arg) holds: true if it did. A GPU block's
 * requests come back to back (the next half is asked for as soon as the
 * last is copied), tens of microseconds apart; a thread asleep on a
 * condition variable takes about as long again to wake. */
static bool spin_until(bool (*cond)(const void *), const void *arg, uint64_t spin_ns)
{
	if (!spin_ns)
		return cond(arg);
	const uint64_t end = now_ns() + spin_ns;
	for (unsigned i = 0;; i++) {
		if (cond(arg))
			return true;
		cpu_relax();
		if ((i & 63u) == 63u && now_ns() > end)
			return cond(arg);
	}
}

static bool posted_since(const void *arg)
{
	return atomic_load_explicit(&io.posted, memory_order_relaxed) != *(const unsigned *)arg;
}

static void *io_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&io.lock);
	while (!io.stopping) {
		struct io_job *j = io.head;
		if (!j) {
			/* Look for the next job for a while before sleeping,
			 * then check again under the lock (a job posted since
			 * is seen there; one posted later wakes us). */
			unsigned seen = atomic_load_explicit(&io.posted, memory_order_relaxed);
			uint64_t spin = io.spin_ns;
			pthread_mutex_unlock(&io.lock);
			bool more = spin_until(posted_since, &seen, spin);
			pthread_mutex_lock(&io.lock);
			if (!more && !io.head && !io.stopping)
				pthread_cond_wait(&io.cv, &io.lock);
			continue;
		}
		if (atomic_load_explicit(&j->next, memory_order_relaxed) >= j->nchunks) {
			io.head = j->qnext; /* all taken: off the queue */
			continue;
		}
		/* Counted while the queue still holds it: its owner waits for
		 * us before the job goes out of scope. */
		atomic_fetch_add_explicit(&j->users, 1, memory_order_relaxed);
		pthread_mutex_unlock(&io.lock);
		job_work(j);
		pthread_mutex_lock(&j->lock);
		atomic_fetch_sub_explicit(&j->users, 1, memory_order_release);
		pthread_cond_signal(&j->cv);
		pthread_mutex_unlock(&j->lock);
		pthread_mutex_lock(&io.lock);
	}
	pthread_mutex_unlock(&io.lock);
	return NULL;
}

int parallel_io_start(const struct parallel_io_config *cfg)
{
	int r = 0;
	pthread_mutex_lock(&io.lock);
	if (io.users++ == 0) {
		uint64_t chunk = cfg->chunk;
		unsigned nthreads = cfg->threads;
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		io.stopping = false;
		io.chunk = chunk < PARALLEL_IO_MIN_CHUNK ? PARALLEL_IO_DEFAULT_CHUNK : chunk & ~(PARALLEL_IO_MIN_CHUNK - 1);
		io.spin_ns = (uint64_t)cfg->spin_us * 1000u;
		if (nthreads > PARALLEL_IO_MAX_THREADS)
			nthreads = PARALLEL_IO_MAX_THREADS;
		/* Each thread copies as fast as a CPU can: past one per CPU
		 * besides the worker's own they only take turns. */
		if (cpus > 0 && nthreads > (unsigned long)cpus - 1)
			nthreads = (unsigned)cpus - 1;
		for (io.threads = 0; io.threads < nthreads; io.threads++) {
			r = -pthread_create(&io.tid[io.threads], NULL, io_thread, NULL);
			if (r < 0)
				break;
		}
	}
	pthread_mutex_unlock(&io.lock);
	if (r < 0) {
		parallel_io_stop();
		return r;
	}
	return 0;
}

void parallel_io_stop(void)
{
	pthread_mutex_lock(&io.lock);
	if (io.users == 0 || --io.users > 0) {
		pthread_mutex_unlock(&io.lock);
		return;
	}
	/* Jobs are waited for by their owners, so none is queued once every
	 * user has stopped: the threads only have to be woken and joined. */
	io.stopping = true;
	pthread_cond_broadcast(&io.cv);
	unsigned n = io.threads;
	io.threads = 0;
	pthread_mutex_unlock(&io.lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(io.tid[i], NULL);
}

static bool job_finished(const void *arg)
{
	const struct io_job *j = arg;
	return atomic_load_explicit(&j->done, memory_order_acquire) >= j->nchunks &&
	       atomic_load_explicit(&j->users, memory_order_acquire) == 0;
}

static int64_t run_job(int fd, bool write_op, uint8_t *map, uint8_t *buf, int64_t off, uint64_t len)
{
	pthread_mutex_lock(&io.lock);
	const uint64_t chunk = io.chunk, spin = io.spin_ns;
	const bool helped = io.threads > 0;
	pthread_mutex_unlock(&io.lock);
	uint32_t nchunks = (uint32_t)((len + chunk - 1) / chunk);
	int64_t res_small[64];
	int64_t *res = nchunks <= 64 ? res_small : malloc(nchunks * sizeof(*res));
	if (!res)
		return -ENOMEM;
	struct io_job j = {
		.fd = fd, .write_op = write_op, .map = map, .buf = buf, .off = off, .len = len, .chunk = chunk,
		.nchunks = nchunks, .res = res,
	};
	atomic_init(&j.next, 0);
	atomic_init(&j.done, 0);
	atomic_init(&j.users, 0);
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.cv, NULL);

	if (helped) {
		pthread_mutex_lock(&io.lock);
		j.qnext = io.head;
		io.head = &j;
		atomic_fetch_add_explicit(&io.posted, 1, memory_order_relaxed);
		pthread_cond_broadcast(&io.cv);
		pthread_mutex_unlock(&io.lock);
	}
	job_work(&j);
	if (helped) {
		/* Off the queue (no I/O thread picks it up after this), then
		 * wait for the chunks I/O threads still hold and for the
		 * threads themselves to let go of it. */
		pthread_mutex_lock(&io.lock);
		for (struct io_job **pp = &io.head; *pp; pp = &(*pp)->qnext) {
			if (*pp == &j) {
				*pp = j.qnext;
				break;
			}
		}
		pthread_mutex_unlock(&io.lock);
		/* The other chunks are being copied now: spin for them first
		 * (the I/O threads' signal would come after a sleep). */
		spin_until(job_finished, &j, spin);
		pthread_mutex_lock(&j.lock);
		while (atomic_load_explicit(&j.done, memory_order_acquire) < nchunks ||
		       atomic_load_explicit(&j.users, memory_order_acquire) > 0)
			pthread_cond_wait(&j.cv, &j.lock);
		pthread_mutex_unlock(&j.lock);
	}

	int64_t total = 0;
	for (uint32_t c = 0; c < nchunks; c++) {
		uint64_t want = len - (uint64_t)c * chunk < chunk ? len - (uint64_t)c * chunk : chunk;
		if (res[c] < 0) {
			if (total == 0)
				total = res[c];
			break;
		}
		total += res[c];
		if ((uint64_t)res[c] < want)
			break;
	}
	pthread_mutex_destroy(&j.lock);
	pthread_cond_destroy(&j.cv);
	if (res != res_small)
		free(res);
	return total;
}

int64_t parallel_io(int fd, bool write_op, uint8_t *buf, int64_t off, uint64_t len)
{
	return run_job(fd, write_op, NULL, buf, off, len);
}

int64_t parallel_io_write_mapped(int wr_fd, int rw_fd, uint8_t *buf, int64_t off, uint64_t len)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	struct stat st;
	if (len < 2 * page || fstat(wr_fd, &st) < 0 || !S_ISREG(st.st_mode))
		return run_job(wr_fd, true, NULL, buf, off, len);
	pthread_once(&bus_once, bus_install);

	/* A mapping cannot reach past the end of the file: the last page of
	 * data goes first, through write(2), which extends the file (and
	 * never shrinks it, unlike ftruncate). */
	uint64_t mapped = len;
	if ((uint64_t)st.st_size < (uint64_t)off + len) {
		uint64_t tail = page, done = 0;
		mapped = len - tail;
		while (done < tail) {
			ssize_t r = pwrite(wr_fd, buf + mapped + done, tail - done, off + (int64_t)(mapped + done));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return r < 0 ? -errno : -EIO; /* nothing reported written */
			done += (uint64_t)r;
		}
	}
	uint64_t delta = (uint64_t)off % page;
	uint8_t *m = mmap(NULL, delta + mapped, PROT_READ | PROT_WRITE, MAP_SHARED, rw_fd, off - (int64_t)delta);
	if (m == MAP_FAILED)
		return run_job(wr_fd, true, NULL, buf, off, len);
	int64_t r = run_job(wr_fd, true, m + delta, buf, off, mapped);
	munmap(m, delta + mapped);
	/* The tail counts once everything before it is there. */
	return r == (int64_t)mapped ? (int64_t)len : r;
}
