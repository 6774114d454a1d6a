/* SPDX-License-Identifier: MIT */
/* The file service's calls (file_ops.h), one per operation. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <time.h>

#include "services/file/file_io.h"
#include "services/file/file_ops.h"
#include "services/file/file_paths.h"
#include "util/path_resolve.h"

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
	struct handle_entry *e;
};

static int ref_get(struct file_client *fc, int32_t h, bool std_ok, struct fd_ref *r)
{
	r->e = NULL;
	if (h == GPUSYS_FILE_STDOUT || h == GPUSYS_FILE_STDERR) {
		r->fd = h == GPUSYS_FILE_STDOUT ? fc->c->stdout_fd : fc->c->stderr_fd;
		if (!std_ok || r->fd < 0)
			return -EBADF;
		/* The client's own open file description: its O_APPEND and
		 * O_NONBLOCK are what a write(1, ...) of its own would see. */
		int fl = fcntl(r->fd, F_GETFL);
		r->oflags = fl < 0 ? 0 : fl;
		return 0;
	}
	r->e = handle_table_get(fc->ht, h, HANDLE_KIND_FILE);
	if (!r->e)
		return -EBADF;
	r->fd = r->e->fd;
	r->oflags = r->e->oflags;
	return 0;
}

static void ref_put(struct file_client *fc, struct fd_ref *r)
{
	if (r->e)
		handle_table_put(fc->ht, r->e);
}

/* A directory's entry holds its DIR, which owns the descriptor: the table
 * lets it go with closedir. */
static void dir_release(int fd, void *obj)
{
	(void)fd;
	closedir(obj);
}

static const struct handle_entry_ops dir_entry_ops = { .release = dir_release };

int file_op_open(const struct file_lane *l)
{
	const struct client *peer = l->fc->c;
	char path[GPUSYS_FILE_PATH_MAX + 1];
	bool dir_op = l->opcode == GPUSYS_OP_FILE_OPENDIR;
	int flags = dir_op ? O_RDONLY | O_DIRECTORY : l->q.flags;
	int dirfd = -1, r;

	if ((flags & ~OPEN_ALLOWED) || (flags & O_ACCMODE) == O_ACCMODE)
		return -EINVAL;
	if ((r = file_take_path(peer, l->body, l->body_len, path, &dirfd)) < 0)
		return r;
	int fd;
	for (;;) {
		fd = path_open(dirfd, path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
			       file_create_mode(peer, l->q.mode), NULL);
		/* A FIFO opened for writing with no reader: the client
		 * asked to wait for one. */
		if (fd != -ENXIO || !file_wants_block(flags) || (flags & O_ACCMODE) != O_WRONLY)
			break;
		if (peer->sock >= 0 && poll(&(struct pollfd){ .fd = peer->sock, .events = POLLRDHUP }, 1, 10) > 0)
			return -EPIPE;
	}
	if (fd < 0)
		return fd;
	DIR *dir = NULL;
	if (dir_op && !(dir = fdopendir(fd))) {
		r = -errno;
		close(fd);
		return r;
	}
	r = dir ? handle_table_insert_obj(l->fc->ht, fd, HANDLE_KIND_DIR, flags, dir, &dir_entry_ops)
		: handle_table_insert(l->fc->ht, fd, HANDLE_KIND_FILE, flags);
	if (r < 0) {
		if (dir)
			closedir(dir);
		else
			close(fd);
		return r;
	}
	*l->val = r;
	return 0;
}

int file_op_opendir(const struct file_lane *l)
{
	return file_op_open(l);
}

int file_op_close(const struct file_lane *l)
{
	if (l->q.handle == GPUSYS_FILE_STDOUT || l->q.handle == GPUSYS_FILE_STDERR)
		return 0; /* the client's own; nothing of ours to close */
	return handle_table_close_any(l->fc->ht, l->q.handle); /* a file or a socket: one handle space */
}

int file_op_closedir(const struct file_lane *l)
{
	return handle_table_close(l->fc->ht, l->q.handle, HANDLE_KIND_DIR);
}

/* A read the page cache holds, without waiting (RWF_NOWAIT): the bytes,
 * or FILE_LANE_TO_POOL where it would wait. A short read that is not the
 * end of the file (the rest not cached) goes to the pool too, as callers
 * take a short read of a regular file for its end. */
static ssize_t read_nowait(int fd, uint8_t *buf, uint64_t n, int64_t off)
{
	struct iovec iov = { buf, n };
	ssize_t got = preadv2(fd, &iov, 1, off, RWF_NOWAIT);
	if (got < 0)
		return errno == EAGAIN || errno == EOPNOTSUPP || errno == EINVAL ? FILE_LANE_TO_POOL : -errno;
	struct stat st;
	if (got > 0 && (uint64_t)got < n && (fstat(fd, &st) < 0 || off + got < st.st_size))
		return FILE_LANE_TO_POOL;
	return got;
}

int file_op_read(const struct file_lane *l)
{
	bool pos = l->opcode == GPUSYS_OP_FILE_PREAD;
	struct fd_ref ref;
	int r;

	if (pos && l->q.offset < 0)
		return -EINVAL;
	if (l->nowait && !pos)
		return FILE_LANE_TO_POOL; /* it moves the position: all or nothing on a worker */
	if ((r = ref_get(l->fc, l->q.handle, false, &ref)) < 0)
		return r;
	uint64_t n = l->q.count < l->room ? l->q.count : l->room;
	ssize_t got = l->nowait ? read_nowait(ref.fd, l->out, n, l->q.offset)
				: file_io_call(l->fc->c, ref.fd, ref.oflags, l->out, n, pos ? l->q.offset : -1, false);
	ref_put(l->fc, &ref);
	if (got < 0)
		return (int)got;
	*l->out_len = (uint32_t)got;
	return 0;
}

/* READFILE: open, fstat, read to the end, close, as one lane's call. The
 * answer is the file's bytes: a regular file of at most the lane's room
 * (the request's count, bounded by its capacity). */
int file_op_readfile(const struct file_lane *l)
{
	char path[GPUSYS_FILE_PATH_MAX + 1];
	int dirfd = -1, r;

	if ((r = file_take_path(l->fc->c, l->body, l->body_len, path, &dirfd)) < 0)
		return r;
	/* O_NONBLOCK: nothing but a regular file is read, and opening a FIFO
	 * must not wait for a writer before the type is known. */
	const int oflags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	struct stat st;
	int fd = l->nowait ? path_open_cached(dirfd, path, oflags, &st) : path_open(dirfd, path, oflags, 0, &st);
	if (fd == -EAGAIN && l->nowait)
		return FILE_LANE_TO_POOL;
	if (fd < 0)
		return fd;
	uint64_t room = l->q.count < l->room ? l->q.count : l->room, got = 0;
	if (S_ISDIR(st.st_mode))
		r = -EISDIR;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	else if ((uint64_t)st.st_size > room)
		r = -EFBIG;
	else
		r = 0;
	/* To the end, not to st_size: the file may have grown since, and
	 * some (procfs) say 0 and hold bytes. A short read that reaches the
	 * size fstat gave is the end (one read, not a second that returns 0);
	 * a full room is probed for one byte more. */
	while (r == 0) {
		uint8_t probe;
		bool full = got == room;
		uint64_t asked = room - got;
		struct iovec iov = { full ? &probe : l->out + got, full ? 1 : asked };
		ssize_t n = preadv2(fd, &iov, 1, (off_t)got, l->nowait ? RWF_NOWAIT : 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && l->nowait && (errno == EAGAIN || errno == EOPNOTSUPP))
			r = FILE_LANE_TO_POOL; /* not all cached: the worker reads it again */
		else if (n < 0)
			r = -errno;
		else if (n == 0)
			break;
		else if (full)
			r = -EFBIG; /* it grew past the room while we read */
		else if ((got += (uint64_t)n) >= (uint64_t)st.st_size && st.st_size > 0 && (uint64_t)n < asked)
			break;
	}
	close(fd);
	if (r < 0)
		return r;
	*l->out_len = (uint32_t)got;
	return 0;
}

int file_op_write(const struct file_lane *l)
{
	bool pos = l->opcode == GPUSYS_OP_FILE_PWRITE;
	struct fd_ref ref;
	int r;

	if (pos && l->q.offset < 0)
		return -EINVAL;
	if ((r = ref_get(l->fc, l->q.handle, true, &ref)) < 0)
		return r;
	ssize_t put = file_io_call(l->fc->c, ref.fd, ref.oflags, (void *)l->body, l->body_len,
				   pos ? l->q.offset : -1, true);
	ref_put(l->fc, &ref);
	if (put < 0)
		return (int)put;
	*l->val = put;
	return 0;
}

int file_op_lseek(const struct file_lane *l)
{
	struct fd_ref ref;
	int r;

	if ((r = ref_get(l->fc, l->q.handle, false, &ref)) < 0)
		return r;
	off_t o = lseek(ref.fd, l->q.offset, l->q.flags);
	r = o < 0 ? -errno : 0;
	ref_put(l->fc, &ref);
	*l->val = o;
	return r;
}

static int stat_out(const struct file_lane *l, const struct stat *st)
{
	struct gpusys_stat g;
	if (l->room < sizeof(g))
		return -EMSGSIZE;
	fill_stat(&g, st);
	memcpy(l->out, &g, sizeof(g));
	*l->out_len = sizeof(g);
	return 0;
}

int file_op_fstat(const struct file_lane *l)
{
	struct fd_ref ref;
	struct stat st;
	int r;

	if ((r = ref_get(l->fc, l->q.handle, true, &ref)) < 0)
		return r;
	r = fstat(ref.fd, &st) < 0 ? -errno : 0;
	ref_put(l->fc, &ref);
	return r < 0 ? r : stat_out(l, &st);
}

/* The parent directory and last component of the path in body[0..n). */
static int take_parent(const struct file_lane *l, const uint8_t *body, uint32_t n, struct path_at *at)
{
	char path[GPUSYS_FILE_PATH_MAX + 1];
	int dirfd = -1, r = file_take_path(l->fc->c, body, n, path, &dirfd);
	return r < 0 ? r : path_resolve_parent(dirfd, path, at);
}

int file_op_stat(const struct file_lane *l)
{
	char path[GPUSYS_FILE_PATH_MAX + 1];
	struct stat st;
	int dirfd = -1, r;

	if (l->q.flags & ~AT_SYMLINK_NOFOLLOW)
		return -EINVAL;
	if ((r = file_take_path(l->fc->c, l->body, l->body_len, path, &dirfd)) < 0)
		return r;
	if (l->q.flags & AT_SYMLINK_NOFOLLOW) {
		struct path_at at;
		if ((r = path_resolve_parent(dirfd, path, &at)) < 0)
			return r;
		bool link_itself = !at.trailing_slash; /* lstat("link/") is its target's */
		if (link_itself)
			r = fstatat(at.dirfd, at.name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
		path_at_close(&at);
		if (link_itself)
			return r < 0 ? r : stat_out(l, &st);
	}
	int fd = path_open(dirfd, path, O_PATH, 0, &st);
	if (fd < 0)
		return fd;
	close(fd);
	return stat_out(l, &st);
}

int file_op_fsync(const struct file_lane *l)
{
	struct fd_ref ref;
	int r;

	if ((r = ref_get(l->fc, l->q.handle, false, &ref)) < 0)
		return r;
	r = fsync(ref.fd) < 0 ? -errno : 0;
	ref_put(l->fc, &ref);
	return r;
}

int file_op_ftruncate(const struct file_lane *l)
{
	struct fd_ref ref;
	int r;

	if ((r = ref_get(l->fc, l->q.handle, false, &ref)) < 0)
		return r;
	r = ftruncate(ref.fd, l->q.offset) < 0 ? -errno : 0;
	ref_put(l->fc, &ref);
	return r;
}

/* "name/" asks for a directory: what unlink(2) and rename(2) say when the
 * object is not one (the *at call on the bare name would not check). */
static int want_dir(const struct path_at *at, bool wanted)
{
	struct stat st;
	if (!wanted)
		return 0;
	if (fstatat(at->dirfd, at->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int file_op_unlink(const struct file_lane *l)
{
	struct path_at at;
	int r = take_parent(l, l->body, l->body_len, &at);
	if (r < 0)
		return r;
	if ((r = want_dir(&at, at.trailing_slash)) == 0)
		r = at.trailing_slash ? -EISDIR : unlinkat(at.dirfd, at.name, 0) < 0 ? -errno : 0;
	path_at_close(&at);
	return r;
}

int file_op_rmdir(const struct file_lane *l)
{
	struct path_at at;
	int r = take_parent(l, l->body, l->body_len, &at);
	if (r < 0)
		return r;
	r = unlinkat(at.dirfd, at.name, AT_REMOVEDIR) < 0 ? -errno : 0;
	path_at_close(&at);
	return r;
}

int file_op_mkdir(const struct file_lane *l)
{
	struct path_at at;
	int r = take_parent(l, l->body, l->body_len, &at);
	if (r < 0)
		return r;
	r = mkdirat(at.dirfd, at.name, file_create_mode(l->fc->c, l->q.mode)) < 0 ? -errno : 0;
	path_at_close(&at);
	return r;
}

int file_op_rename(const struct file_lane *l)
{
	uint32_t n1 = l->q.path_len;
	struct path_at from, to;
	int r;

	if (n1 >= l->body_len || l->body[n1] != 0)
		return -EINVAL;
	if ((r = take_parent(l, l->body, n1, &from)) < 0)
		return r;
	if ((r = take_parent(l, l->body + n1 + 1, l->body_len - n1 - 1, &to)) < 0) {
		path_at_close(&from);
		return r;
	}
	if ((r = want_dir(&from, from.trailing_slash || to.trailing_slash)) == 0)
		r = renameat(from.dirfd, from.name, to.dirfd, to.name) < 0 ? -errno : 0;
	path_at_close(&from);
	path_at_close(&to);
	return r;
}

int file_op_readdir(const struct file_lane *l)
{
	struct handle_entry *e = handle_table_get(l->fc->ht, l->q.handle, HANDLE_KIND_DIR);
	int r;

	if (!e)
		return -EBADF;
	if (l->room < sizeof(struct gpusys_dirent)) {
		handle_table_put(l->fc->ht, e);
		return -EMSGSIZE;
	}
	pthread_mutex_lock(&e->obj_lock);
	errno = 0;
	struct dirent *de = readdir(e->obj); /* the DIR of file_op_open */
	r = de ? 0 : -errno;
	if (de) {
		struct gpusys_dirent g;
		memset(&g, 0, sizeof(g));
		g.ino = de->d_ino;
		g.type = de->d_type;
		size_t len = strnlen(de->d_name, GPUSYS_FILE_NAME_MAX);
		g.namelen = (uint32_t)len;
		memcpy(g.name, de->d_name, len);
		memcpy(l->out, &g, sizeof(g));
		*l->out_len = sizeof(g);
	}
	pthread_mutex_unlock(&e->obj_lock);
	handle_table_put(l->fc->ht, e);
	return r;
}

int file_op_bulk(const struct file_lane *l)
{
	const struct client *peer = l->fc->c;
	bool w = l->opcode == GPUSYS_OP_FILE_BULK_PWRITE;
	const struct gpusys_file_req *q = &l->q;
	struct fd_ref ref;
	int r;

	uint8_t *buf = client_bulk_range(peer, q->bulk_off, q->count);
	if (!buf)
		return -EINVAL;
	if (q->offset < -1 || (q->offset >= 0 && q->count > (uint64_t)INT64_MAX - (uint64_t)q->offset))
		return -EINVAL;
	if ((r = ref_get(l->fc, q->handle, w, &ref)) < 0)
		return r;
	int64_t n;
	if (ref.e) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		n = file_bulk_transfer(peer, ref.e, w, buf, q->offset, q->count);
		if (n > 0)
			handle_entry_count_bulk(ref.e, w, (uint64_t)n,
						(uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	} else {
		struct handle_entry tmp = { .fd = ref.fd, .oflags = ref.oflags };
		n = file_bulk_transfer(peer, &tmp, w, buf, q->offset, q->count);
	}
	ref_put(l->fc, &ref);
	if (n < 0)
		return (int)n;
	*l->val = n;
	return 0;
}
