/* SPDX-License-Identifier: MIT */
/*
 * The file service (include/gpusys/file.h): POSIX file calls on behalf of a
 * client, on the worker pool, as the client (creds.c), on its own handle
 * table (file_table.c). Large transfers go through the channel's bulk area,
 * read or written by several I/O threads at once.
 *
 * Each request is served lane by lane in lane order, so the lanes of one
 * warp calling read() on one handle read consecutive parts, as sequential
 * calls would. A client path is never resolved against the daemon's working
 * directory: relative paths go through the directory the client passed at
 * attach (openat and friends), and without one they are -EINVAL. Opening
 * uses openat2 with RESOLVE_NO_MAGICLINKS where the kernel has it, so
 * /proc/self/fd/N names no descriptor of the daemon.
 *
 * Descriptors are opened non-blocking whatever the client asked: a read from
 * a FIFO or a terminal that would block instead waits in poll() here, along
 * with the client's attach connection, so a client that dies frees its
 * worker (and, with the last reference to its session, its descriptors).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "services/file/file_peer.h"
#include "services/file/file_table.h"
#include "gpusys/file.h"
#include "services/file/service_file.h"
#include "services/basic/services.h"

/* ------------------------------------------------------------ per client */

struct file_client {
	struct file_table *ft;
	struct file_peer peer;
};

static struct file_client *client_of(struct port_table *t, int *err)
{
	struct file_client *fc = __atomic_load_n(&t->service_state[SERVICE_STATE_FILE], __ATOMIC_ACQUIRE);
	if (fc)
		return fc;
	pthread_mutex_lock(&t->service_state_lock);
	fc = t->service_state[SERVICE_STATE_FILE];
	if (!fc) {
		fc = calloc(1, sizeof(*fc));
		if (fc)
			fc->ft = file_table_new();
		if (fc && fc->ft && (*err = file_peer_get(t, &fc->peer)) == 0) {
			__atomic_store_n(&t->service_state[SERVICE_STATE_FILE], fc, __ATOMIC_RELEASE);
		} else {
			if (fc)
				file_table_free(fc->ft);
			free(fc);
			fc = NULL;
			if (!*err)
				*err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&t->service_state_lock);
	return fc;
}

unsigned service_file_client_fini(struct port_table *t)
{
	struct file_client *fc = t->service_state[SERVICE_STATE_FILE];
	if (!fc)
		return 0;
	t->service_state[SERVICE_STATE_FILE] = NULL;
	unsigned n = file_table_free(fc->ft);
	free(fc);
	return n;
}

/* ------------------------------------------------------------- waiting */

/* Wait until fd is ready for events, or the client hangs up. 0, -EPIPE (the
 * client is gone: nobody will read the answer) or -errno of poll. */
static int wait_ready(const struct file_peer *peer, int fd, short events)
{
	struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = peer->sock, .events = POLLRDHUP } };
	for (;;) {
		int n = poll(p, peer->sock >= 0 ? 2 : 1, 200);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0 && p[1].revents)
			return -EPIPE;
		if (n > 0 && p[0].revents)
			return 0;
	}
}

static bool wants_block(int oflags)
{
	return !(oflags & O_NONBLOCK);
}

/* read/write/pread/pwrite as the client would see them on its descriptor,
 * blocking unless it asked for O_NONBLOCK. */
static ssize_t io_call(const struct file_peer *peer, int fd, int oflags, void *buf, size_t n, int64_t off,
		       bool write_op)
{
	for (;;) {
		ssize_t r;
		if (off >= 0)
			r = write_op ? pwrite(fd, buf, n, off) : pread(fd, buf, n, off);
		else
			r = write_op ? write(fd, buf, n) : read(fd, buf, n);
		if (r >= 0)
			return r;
		if (errno == EINTR)
			continue;
		if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wants_block(oflags))
			return -errno;
		int w = wait_ready(peer, fd, write_op ? POLLOUT : POLLIN);
		if (w < 0)
			return w;
	}
}

/* ------------------------------------------------- parallel bulk copies */

/*
 * One thread copies page cache to memory at about 10 GB/s; the link to the
 * GPU does 50. A large bulk transfer is cut into chunks that the worker
 * serving it and a few I/O threads take in turn. The I/O threads only ever
 * pread/pwrite descriptors already open (as the client), wait for nothing
 * but work, and never take a lock a worker holds while waiting for them, so
 * workers and I/O threads cannot deadlock.
 */
#define IO_THREADS_DEFAULT 4u
#define IO_THREADS_MAX 16u
#define IO_CHUNK (UINT64_C(1) << 20)
#define IO_PARALLEL_MIN (UINT64_C(2) << 20)

struct io_job {
	int fd;
	bool write_op;
	uint8_t *buf;
	int64_t off;
	uint64_t len;
	uint32_t nchunks;
	atomic_uint next;
	atomic_uint done;
	atomic_uint users; /* I/O threads inside job_work: the job outlives them */
	int64_t *res; /* per chunk: bytes, or -errno */
	struct io_job *qnext;
	pthread_mutex_t lock;
	pthread_cond_t cv;
};

static struct {
	pthread_once_t once;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct io_job *head;
	unsigned threads;
} io = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static int64_t chunk_copy(const struct io_job *j, uint32_t c)
{
	uint64_t lo = (uint64_t)c * IO_CHUNK, n = j->len - lo < IO_CHUNK ? j->len - lo : IO_CHUNK;
	uint64_t done = 0;
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

static void *io_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&io.lock);
	for (;;) {
		struct io_job *j = io.head;
		if (!j) {
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
	return NULL;
}

static void io_start(void)
{
	unsigned n = IO_THREADS_DEFAULT;
	const char *env = getenv("GPUSYS_FILE_IO_THREADS");
	if (env) {
		n = (unsigned)strtoul(env, NULL, 10);
		if (n > IO_THREADS_MAX)
			n = IO_THREADS_MAX;
	}
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	for (unsigned i = 0; i < n; i++) {
		pthread_t t;
		if (pthread_create(&t, &a, io_thread, NULL) == 0)
			io.threads++;
	}
	pthread_attr_destroy(&a);
}

/* Transfer len bytes between buf and fd at off, in parallel. The bytes
 * transferred before the first short or failed chunk, or -errno if the
 * first chunk failed. */
static int64_t io_parallel(int fd, bool write_op, uint8_t *buf, int64_t off, uint64_t len)
{
	pthread_once(&io.once, io_start);
	uint32_t nchunks = (uint32_t)((len + IO_CHUNK - 1) / IO_CHUNK);
	int64_t res_small[64];
	int64_t *res = nchunks <= 64 ? res_small : malloc(nchunks * sizeof(*res));
	if (!res)
		return -ENOMEM;
	struct io_job j = {
		.fd = fd, .write_op = write_op, .buf = buf, .off = off, .len = len, .nchunks = nchunks, .res = res,
	};
	atomic_init(&j.next, 0);
	atomic_init(&j.done, 0);
	atomic_init(&j.users, 0);
	pthread_mutex_init(&j.lock, NULL);
	pthread_cond_init(&j.cv, NULL);

	if (io.threads) {
		pthread_mutex_lock(&io.lock);
		j.qnext = io.head;
		io.head = &j;
		pthread_cond_broadcast(&io.cv);
		pthread_mutex_unlock(&io.lock);
	}
	job_work(&j);
	if (io.threads) {
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
		pthread_mutex_lock(&j.lock);
		while (atomic_load_explicit(&j.done, memory_order_acquire) < nchunks ||
		       atomic_load_explicit(&j.users, memory_order_acquire) > 0)
			pthread_cond_wait(&j.cv, &j.lock);
		pthread_mutex_unlock(&j.lock);
	}

	int64_t total = 0;
	for (uint32_t c = 0; c < nchunks; c++) {
		uint64_t want = len - (uint64_t)c * IO_CHUNK < IO_CHUNK ? len - (uint64_t)c * IO_CHUNK : IO_CHUNK;
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

/* A bulk transfer of an open file: in parallel for large transfers of
 * regular files, else as one read/write loop. off < 0: the current position
 * (which then moves). */
static int64_t bulk_transfer(const struct file_peer *peer, struct file_entry *e, bool write_op, uint8_t *buf,
			     int64_t off, uint64_t len)
{
	struct stat st;
	bool regular = fstat(e->fd, &st) == 0 && S_ISREG(st.st_mode);
	bool append = write_op && (e->oflags & O_APPEND);

	if (regular && !append && len >= IO_PARALLEL_MIN) {
		int64_t at = off;
		if (off < 0 && (at = lseek(e->fd, 0, SEEK_CUR)) < 0)
			return -errno;
		int64_t r = io_parallel(e->fd, write_op, buf, at, len);
		if (off < 0 && r > 0 && lseek(e->fd, at + r, SEEK_SET) < 0)
			return -errno;
		return r;
	}
	/* Serially, until done, end of file or an error after some bytes. */
	uint64_t done = 0;
	while (done < len) {
		ssize_t r = io_call(peer, e->fd, e->oflags, buf + done, len - done, off < 0 ? -1 : off + (int64_t)done,
				    write_op);
		if (r < 0)
			return done ? (int64_t)done : r;
		if (r == 0)
			break;
		done += (uint64_t)r;
		if (!regular)
			break; /* a pipe or terminal: what is there, like read(2) */
	}
	return (int64_t)done;
}

/* ---------------------------------------------------------------- paths */

#ifndef RESOLVE_NO_MAGICLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#endif
struct open_how_compat {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

static atomic_int have_openat2 = 1;

static int open_as_client(int dirfd, const char *path, int flags, mode_t mode)
{
	if (atomic_load_explicit(&have_openat2, memory_order_relaxed)) {
		struct open_how_compat how = {
			.flags = (uint64_t)(unsigned)flags,
			.mode = (flags & O_CREAT) ? (mode & 07777) : 0,
			.resolve = RESOLVE_NO_MAGICLINKS,
		};
		long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0 || errno != ENOSYS)
			return fd >= 0 ? (int)fd : -errno;
		atomic_store_explicit(&have_openat2, 0, memory_order_relaxed);
	}
	int fd = openat(dirfd, path, flags, mode & 07777);
	return fd >= 0 ? fd : -errno;
}

/* Copy the path of a request out of its body into buf (NUL-terminated) and
 * pick the directory it is relative to. 0 or -errno. */
static int take_path(const struct file_peer *peer, const uint8_t *body, uint32_t n, char *buf, int *dirfd)
{
	if (n > GPUSYS_FILE_PATH_MAX)
		return -ENAMETOOLONG;
	if (memchr(body, 0, n))
		return -EINVAL;
	memcpy(buf, body, n);
	buf[n] = 0;
	if (n == 0)
		return -ENOENT;
	if (buf[0] != '/' && peer->cwd_fd < 0)
		return -EINVAL; /* no working directory was passed: relative paths mean nothing */
	*dirfd = peer->cwd_fd;
	return 0;
}

/* Files a client creates get its umask. The umask belongs to the process
 * (all threads share one fs_struct), so a worker first takes a private copy
 * with unshare(CLONE_FS); if that fails, the daemon's own umask is applied
 * on top of the client's (never less restrictive than the client's). */
static __thread int fs_private; /* 0 unknown, 1 private, -1 shared */

static mode_t thread_umask(mode_t m)
{
	if (fs_private == 0)
		fs_private = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (fs_private < 0) {
		mode_t cur = umask(0);
		umask(cur);
		return cur; /* leave the shared one alone */
	}
	return umask(m);
}

/* The mode to create with: the kernel applies the (thread's) umask. */
static mode_t create_mode(const struct file_peer *peer, uint32_t mode)
{
	mode_t m = mode & 07777;
	return fs_private < 0 ? m & ~peer->umask : m;
}

/* ------------------------------------------------------------ the calls */

#define OPEN_ALLOWED                                                                                           \
	(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_NONBLOCK | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | \
	 O_SYNC | O_DSYNC | O_NOATIME | O_NOCTTY | O_LARGEFILE)

static void fill_stat(struct gpusys_stat *g, const struct stat *st)
{
	memset(g, 0, sizeof(*g));
	g->dev = st->st_dev;
	g->ino = st->st_ino;
	g->nlink = st->st_nlink;
	g->mode = st->st_mode;
	g->uid = st->st_uid;
	g->gid = st->st_gid;
	g->rdev = st->st_rdev;
	g->size = st->st_size;
	g->blksize = st->st_blksize;
	g->blocks = st->st_blocks;
	g->atime_sec = st->st_atim.tv_sec;
	g->atime_nsec = st->st_atim.tv_nsec;
	g->mtime_sec = st->st_mtim.tv_sec;
	g->mtime_nsec = st->st_mtim.tv_nsec;
	g->ctime_sec = st->st_ctim.tv_sec;
	g->ctime_nsec = st->st_ctim.tv_nsec;
}

/* The descriptor a write-side handle names: the client's stdout/stderr for
 * handles 1 and 2, else a table entry (with a reference). */
struct fd_ref {
	int fd;
	int oflags;
	struct file_entry *e;
};

static int ref_get(struct file_client *fc, int32_t h, bool std_ok, struct fd_ref *r)
{
	r->e = NULL;
	if (h == GPUSYS_FILE_STDOUT || h == GPUSYS_FILE_STDERR) {
		r->fd = h == GPUSYS_FILE_STDOUT ? fc->peer.stdout_fd : fc->peer.stderr_fd;
		if (!std_ok || r->fd < 0)
			return -EBADF;
		/* The client's own open file description: its O_APPEND and
		 * O_NONBLOCK are what a write(1, ...) of its own would see. */
		int fl = fcntl(r->fd, F_GETFL);
		r->oflags = fl < 0 ? 0 : fl;
		return 0;
	}
	r->e = file_table_get(fc->ft, h, FILE_KIND_FILE);
	if (!r->e)
		return -EBADF;
	r->fd = r->e->fd;
	r->oflags = r->e->oflags;
	return 0;
}

static void ref_put(struct file_client *fc, struct fd_ref *r)
{
	if (r->e)
		file_table_put(fc->ft, r->e);
}

/* One lane. Value results go to *val; data results to out (cap bytes),
 * *out_len bytes. Returns 0 or -errno. */
static int serve_lane(struct file_client *fc, uint16_t op, const struct gpusys_file_req *q, const uint8_t *body,
		      uint32_t body_len, uint32_t cap, int64_t *val, uint8_t *out, uint32_t *out_len)
{
	struct file_peer *peer = &fc->peer;
	char path[GPUSYS_FILE_PATH_MAX + 1], path2[GPUSYS_FILE_PATH_MAX + 1];
	struct fd_ref ref;
	struct stat st;
	int dirfd = -1, r;

	*val = 0;
	*out_len = 0;
	switch (op) {
	case GPUSYS_OP_FILE_OPEN:
	case GPUSYS_OP_FILE_OPENDIR: {
		int flags = op == GPUSYS_OP_FILE_OPEN ? q->flags : O_RDONLY | O_DIRECTORY;
		if ((flags & ~OPEN_ALLOWED) || (flags & O_ACCMODE) == O_ACCMODE)
			return -EINVAL;
		if ((r = take_path(peer, body, body_len, path, &dirfd)) < 0)
			return r;
		int fd;
		for (;;) {
			fd = open_as_client(dirfd, path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, create_mode(peer, q->mode));
			/* A FIFO opened for writing with no reader: the client
			 * asked to wait for one. */
			if (fd != -ENXIO || !wants_block(flags) || (flags & O_ACCMODE) != O_WRONLY)
				break;
			if (peer->sock >= 0 && poll(&(struct pollfd){ .fd = peer->sock, .events = POLLRDHUP }, 1, 10) > 0)
				return -EPIPE;
		}
		if (fd < 0)
			return fd;
		DIR *dir = NULL;
		if (op == GPUSYS_OP_FILE_OPENDIR && !(dir = fdopendir(fd))) {
			r = -errno;
			close(fd);
			return r;
		}
		r = file_table_insert(fc->ft, fd, dir ? FILE_KIND_DIR : FILE_KIND_FILE, flags, dir);
		if (r < 0) {
			if (dir)
				closedir(dir);
			else
				close(fd);
			return r;
		}
		*val = r;
		return 0;
	}
	case GPUSYS_OP_FILE_CLOSE:
		if (q->handle == GPUSYS_FILE_STDOUT || q->handle == GPUSYS_FILE_STDERR)
			return 0; /* the client's own; nothing of ours to close */
		return file_table_close(fc->ft, q->handle, FILE_KIND_FILE);
	case GPUSYS_OP_FILE_CLOSEDIR:
		return file_table_close(fc->ft, q->handle, FILE_KIND_DIR);
	case GPUSYS_OP_FILE_READ:
	case GPUSYS_OP_FILE_PREAD: {
		bool pos = op == GPUSYS_OP_FILE_PREAD;
		if (pos && q->offset < 0)
			return -EINVAL;
		if ((r = ref_get(fc, q->handle, false, &ref)) < 0)
			return r;
		uint64_t n = q->count < cap ? q->count : cap;
		ssize_t got = io_call(peer, ref.fd, ref.oflags, out, n, pos ? q->offset : -1, false);
		ref_put(fc, &ref);
		if (got < 0)
			return (int)got;
		*out_len = (uint32_t)got;
		return 0;
	}
	case GPUSYS_OP_FILE_WRITE:
	case GPUSYS_OP_FILE_PWRITE: {
		bool pos = op == GPUSYS_OP_FILE_PWRITE;
		if (pos && q->offset < 0)
			return -EINVAL;
		if ((r = ref_get(fc, q->handle, true, &ref)) < 0)
			return r;
		ssize_t put = io_call(peer, ref.fd, ref.oflags, (void *)body, body_len, pos ? q->offset : -1, true);
		ref_put(fc, &ref);
		if (put < 0)
			return (int)put;
		*val = put;
		return 0;
	}
	case GPUSYS_OP_FILE_LSEEK: {
		if ((r = ref_get(fc, q->handle, false, &ref)) < 0)
			return r;
		off_t o = lseek(ref.fd, q->offset, q->flags);
		r = o < 0 ? -errno : 0;
		ref_put(fc, &ref);
		*val = o;
		return r;
	}
	case GPUSYS_OP_FILE_FSTAT:
	case GPUSYS_OP_FILE_STAT: {
		if (op == GPUSYS_OP_FILE_FSTAT) {
			if ((r = ref_get(fc, q->handle, true, &ref)) < 0)
				return r;
			r = fstat(ref.fd, &st) < 0 ? -errno : 0;
			ref_put(fc, &ref);
		} else {
			if (q->flags & ~AT_SYMLINK_NOFOLLOW)
				return -EINVAL;
			if ((r = take_path(peer, body, body_len, path, &dirfd)) < 0)
				return r;
			r = fstatat(dirfd, path, &st, q->flags) < 0 ? -errno : 0;
		}
		if (r < 0)
			return r;
		if (cap < sizeof(struct gpusys_stat))
			return -EMSGSIZE;
		fill_stat((struct gpusys_stat *)(void *)out, &st);
		*out_len = sizeof(struct gpusys_stat);
		return 0;
	}
	case GPUSYS_OP_FILE_FSYNC:
	case GPUSYS_OP_FILE_FTRUNCATE:
		if ((r = ref_get(fc, q->handle, false, &ref)) < 0)
			return r;
		if (op == GPUSYS_OP_FILE_FSYNC)
			r = fsync(ref.fd) < 0 ? -errno : 0;
		else
			r = ftruncate(ref.fd, q->offset) < 0 ? -errno : 0;
		ref_put(fc, &ref);
		return r;
	case GPUSYS_OP_FILE_UNLINK:
	case GPUSYS_OP_FILE_RMDIR:
	case GPUSYS_OP_FILE_MKDIR:
		if ((r = take_path(peer, body, body_len, path, &dirfd)) < 0)
			return r;
		if (op == GPUSYS_OP_FILE_MKDIR)
			return mkdirat(dirfd, path, create_mode(peer, q->mode)) < 0 ? -errno : 0;
		return unlinkat(dirfd, path, op == GPUSYS_OP_FILE_RMDIR ? AT_REMOVEDIR : 0) < 0 ? -errno : 0;
	case GPUSYS_OP_FILE_RENAME: {
		uint32_t n1 = q->path_len;
		if (n1 >= body_len || body[n1] != 0)
			return -EINVAL;
		if ((r = take_path(peer, body, n1, path, &dirfd)) < 0)
			return r;
		if ((r = take_path(peer, body + n1 + 1, body_len - n1 - 1, path2, &dirfd)) < 0)
			return r;
		return renameat(dirfd, path, dirfd, path2) < 0 ? -errno : 0;
	}
	case GPUSYS_OP_FILE_READDIR: {
		struct file_entry *e = file_table_get(fc->ft, q->handle, FILE_KIND_DIR);
		if (!e)
			return -EBADF;
		if (cap < sizeof(struct gpusys_dirent)) {
			file_table_put(fc->ft, e);
			return -EMSGSIZE;
		}
		pthread_mutex_lock(&e->dir_lock);
		errno = 0;
		struct dirent *de = readdir(e->dir);
		r = de ? 0 : -errno;
		if (de) {
			struct gpusys_dirent *g = (struct gpusys_dirent *)(void *)out;
			memset(g, 0, sizeof(*g));
			g->ino = de->d_ino;
			g->type = de->d_type;
			size_t len = strnlen(de->d_name, GPUSYS_FILE_NAME_MAX);
			g->namelen = (uint32_t)len;
			memcpy(g->name, de->d_name, len);
			*out_len = sizeof(*g);
		}
		pthread_mutex_unlock(&e->dir_lock);
		file_table_put(fc->ft, e);
		return r;
	}
	case GPUSYS_OP_FILE_BULK_PREAD:
	case GPUSYS_OP_FILE_BULK_PWRITE: {
		bool w = op == GPUSYS_OP_FILE_BULK_PWRITE;
		/* The range must lie in the bulk area as we sized it, whatever
		 * the shared header says now. */
		if (!peer->bulk || q->count > peer->bulk_bytes || q->bulk_off > peer->bulk_bytes - q->count)
			return -EINVAL;
		if (q->offset < -1 || (q->offset >= 0 && q->count > (uint64_t)INT64_MAX - (uint64_t)q->offset))
			return -EINVAL;
		if ((r = ref_get(fc, q->handle, w, &ref)) < 0)
			return r;
		int64_t n;
		if (ref.e) {
			n = bulk_transfer(peer, ref.e, w, peer->bulk + q->bulk_off, q->offset, q->count);
		} else {
			struct file_entry tmp = { .fd = ref.fd, .oflags = ref.oflags };
			n = bulk_transfer(peer, &tmp, w, peer->bulk + q->bulk_off, q->offset, q->count);
		}
		ref_put(fc, &ref);
		if (n < 0)
			return (int)n;
		*val = n;
		return 0;
	}
	default:
		return -ENOSYS;
	}
}

static bool op_returns_data(uint16_t op, uint32_t *fixed)
{
	switch (op) {
	case GPUSYS_OP_FILE_READ:
	case GPUSYS_OP_FILE_PREAD:
		*fixed = 0;
		return true;
	case GPUSYS_OP_FILE_FSTAT:
	case GPUSYS_OP_FILE_STAT:
		*fixed = sizeof(struct gpusys_stat);
		return true;
	case GPUSYS_OP_FILE_READDIR:
		*fixed = sizeof(struct gpusys_dirent);
		return true;
	default:
		*fixed = sizeof(int64_t);
		return false;
	}
}

static void file_handle(struct port_call *call)
{
	int err = 0;
	struct file_client *fc = client_of(call->table, &err);
	uint32_t fixed;
	bool data = op_returns_data(call->opcode, &fixed);

	/* Room for every lane's answer, in one buffer. */
	uint64_t total = 0;
	uint32_t room[GPUSYS_WARP_LANES] = { 0 };
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uint32_t want = fixed;
		if (data && fixed == 0) {
			const struct gpusys_file_req *q = (const void *)call->data[l];
			uint64_t c = call->len[l] >= sizeof(*q) ? q->count : 0;
			want = c < call->cap[l] ? (uint32_t)c : call->cap[l];
		}
		room[l] = want;
		total += want;
	}
	int charge = port_call_charge(call, total);
	if (charge < 0) {
		call->status = charge;
		return;
	}
	uint8_t *buf = total ? malloc(total) : NULL;
	if (total && !buf) {
		call->status = -ENOMEM;
		return;
	}
	call->resp_buf = buf;

	struct creds_saved saved;
	int cr = fc ? creds_enter(&fc->peer.creds, &saved) : err;
	bool creates = call->opcode == GPUSYS_OP_FILE_OPEN || call->opcode == GPUSYS_OP_FILE_MKDIR;
	mode_t old_umask = 0;
	if (cr == 0 && creates)
		old_umask = thread_umask(fc->peer.umask);

	uint64_t at = 0;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(call->lane_mask >> l & 1))
			continue;
		uint8_t *out = buf + at;
		at += room[l];
		if (cr < 0) {
			call->lane_status[l] = cr;
			continue;
		}
		struct gpusys_file_req q;
		if (call->len[l] < sizeof(q)) {
			call->lane_status[l] = -EINVAL;
			continue;
		}
		memcpy(&q, call->data[l], sizeof(q));
		int64_t val;
		uint32_t out_len = 0;
		int r = serve_lane(fc, call->opcode, &q, call->data[l] + sizeof(q), call->len[l] - (uint32_t)sizeof(q),
				   room[l], &val, out, &out_len);
		call->lane_status[l] = r;
		if (r < 0)
			continue;
		if (!data) {
			if (call->cap[l] < sizeof(val)) {
				call->lane_status[l] = -EMSGSIZE;
				continue;
			}
			memcpy(out, &val, sizeof(val));
			out_len = sizeof(val);
		}
		call->resp_len[l] = out_len;
		call->resp_data[l] = out;
	}
	if (cr == 0 && creates)
		thread_umask(old_umask);
	if (cr == 0 && fc)
		creds_leave(&saved);
}

#define FILE_SERVICE(op, name) static const struct service svc_##name = { op, SERVICE_POOL, "file." #name, file_handle }
FILE_SERVICE(GPUSYS_OP_FILE_OPEN, open);
FILE_SERVICE(GPUSYS_OP_FILE_CLOSE, close);
FILE_SERVICE(GPUSYS_OP_FILE_READ, read);
FILE_SERVICE(GPUSYS_OP_FILE_WRITE, write);
FILE_SERVICE(GPUSYS_OP_FILE_PREAD, pread);
FILE_SERVICE(GPUSYS_OP_FILE_PWRITE, pwrite);
FILE_SERVICE(GPUSYS_OP_FILE_LSEEK, lseek);
FILE_SERVICE(GPUSYS_OP_FILE_FSTAT, fstat);
FILE_SERVICE(GPUSYS_OP_FILE_STAT, stat);
FILE_SERVICE(GPUSYS_OP_FILE_FSYNC, fsync);
FILE_SERVICE(GPUSYS_OP_FILE_FTRUNCATE, ftruncate);
FILE_SERVICE(GPUSYS_OP_FILE_UNLINK, unlink);
FILE_SERVICE(GPUSYS_OP_FILE_RENAME, rename);
FILE_SERVICE(GPUSYS_OP_FILE_MKDIR, mkdir);
FILE_SERVICE(GPUSYS_OP_FILE_RMDIR, rmdir);
FILE_SERVICE(GPUSYS_OP_FILE_OPENDIR, opendir);
FILE_SERVICE(GPUSYS_OP_FILE_READDIR, readdir);
FILE_SERVICE(GPUSYS_OP_FILE_CLOSEDIR, closedir);
FILE_SERVICE(GPUSYS_OP_FILE_BULK_PREAD, bulk_pread);
FILE_SERVICE(GPUSYS_OP_FILE_BULK_PWRITE, bulk_pwrite);

const struct service *const service_file_table[] = {
	&svc_open,   &svc_close, &svc_read,    &svc_write,   &svc_pread,    &svc_pwrite,   &svc_lseek,
	&svc_fstat,  &svc_stat,  &svc_fsync,   &svc_ftruncate, &svc_unlink, &svc_rename,  &svc_mkdir,
	&svc_rmdir,  &svc_opendir, &svc_readdir, &svc_closedir, &svc_bulk_pread, &svc_bulk_pwrite, NULL,
};
