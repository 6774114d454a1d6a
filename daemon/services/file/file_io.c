/* SPDX-License-Identifier: MIT */
/*
 * Moving bytes for the file service: reads and writes as the client would
 * see them on its descriptor (blocking unless it asked for O_NONBLOCK, while
 * watching for the client to die), and bulk transfers of large ranges
 * through util/parallel_io.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "services/file/file_io.h"
#include "util/parallel_io.h"

/* Wait until fd is ready for events, or the client hangs up. 0, -EPIPE (the
 * client is gone: nobody will read the answer) or -errno of poll. */
static int wait_ready(const struct client *peer, int fd, short events)
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

bool file_wants_block(int oflags)
{
	return !(oflags & O_NONBLOCK);
}

/* read/write/pread/pwrite as the client would see them on its descriptor,
 * blocking unless it asked for O_NONBLOCK. */
ssize_t file_io_call(const struct client *peer, int fd, int oflags, void *buf, size_t n, int64_t off,
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
		if ((errno != EAGAIN && errno != EWOULDBLOCK) || !file_wants_block(oflags))
			return -errno;
		int w = wait_ready(peer, fd, write_op ? POLLOUT : POLLIN);
		if (w < 0)
			return w;
	}
}

/* The file of e open for reading and writing, for a mapping: e's own
 * descriptor if it is, else a second one opened through /proc/self/fd as the
 * client (this runs with its credentials), so a client that may not read the
 * file gets none (-1), and its writes go through write(2). */
static int rw_descriptor(const struct handle_entry *e)
{
	if ((e->oflags & O_ACCMODE) == O_RDWR)
		return e->fd;
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", e->fd);
	return open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
}

/* A bulk transfer of an open file: in parallel for large transfers of
 * regular files, else as one read/write loop. off < 0: the current position
 * (which then moves). */
int64_t file_bulk_transfer(const struct client *peer, struct handle_entry *e, bool write_op, uint8_t *buf,
			     int64_t off, uint64_t len)
{
	struct stat st;
	bool regular = fstat(e->fd, &st) == 0 && S_ISREG(st.st_mode);
	bool append = write_op && (e->oflags & O_APPEND);

	if (regular && !append && len >= PARALLEL_IO_MIN) {
		int64_t at = off;
		if (off < 0 && (at = lseek(e->fd, 0, SEEK_CUR)) < 0)
			return -errno;
		int64_t r;
		int rw = write_op ? rw_descriptor(e) : -1;
		if (rw >= 0) {
			r = parallel_io_write_mapped(e->fd, rw, buf, at, len);
			if (rw != e->fd)
				close(rw);
		} else {
			r = parallel_io(e->fd, write_op, buf, at, len);
		}
		if (off < 0 && r > 0 && lseek(e->fd, at + r, SEEK_SET) < 0)
			return -errno;
		return r;
	}
	/* Serially, until done, end of file or an error after some bytes. */
	uint64_t done = 0;
	while (done < len) {
		ssize_t r = file_io_call(peer, e->fd, e->oflags, buf + done, len - done, off < 0 ? -1 : off + (int64_t)done,
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

