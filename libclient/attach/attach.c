/* SPDX-License-Identifier: MIT */
/* Attaching to gpusysd: the client half of the handshake in
 * common/wire.h, and the check of the channel it hands us. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/fdpass.h"
#include "gpusys/gpusys.h"
#include "client.h"
#include "common/wire.h"
#include "dev_handle.h"
#include "report.h"

#define WELCOME_TIMEOUT_MS 10000
/* More than the one a welcome carries, so extra ones are seen (and closed). */
#define MAX_RECV_FDS 4

struct gpusys_client {
	int sock;
	int mem_fd;
	int wake_fd; /* write end of our wake pipe (wire.h) */
	void *base; /* NULL for a kind we do not map */
	uint64_t bytes;
	uint32_t num_ports;
	uint32_t client_id;
	uint32_t memory_kind;
	int cuda_device;  /* the hello's: whose copies go on this connection */
	bool reports;     /* sock is among report.h's connections */
	/* For a re-offer after a daemon restart (gpusys_client_reconnect):
	 * the hello as first sent (descriptors aside), whether stdout and
	 * stderr went with it, and the working directory it passed, kept
	 * open so the next daemon gets the same one (or -1). */
	struct gpusys_hello hello;
	bool pass_stdio;
	int cwd_fd;
	char dir[108]; /* the runtime directory (a socket path fits sun_path) */
};

static _Thread_local char last_error[256];

int gpusys_set_last_error(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return err;
}
#define fail gpusys_set_last_error

void gpusys_clear_last_error(void)
{
	last_error[0] = 0;
}

const char *gpusys_last_error(void)
{
	return last_error;
}

static void read_comm(char *out, size_t len)
{
	int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, len - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n < 0)
		n = 0;
	while (n > 0 && out[n - 1] == '\n')
		n--;
	out[n] = 0;
}

static int connect_daemon(const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, GPUSYS_SOCKET_NAME);

	if (n < 0 || (size_t)n >= sizeof(sa.sun_path))
		return fail(-ENAMETOOLONG, "runtime directory path too long: %s", dir);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail(-errno, "socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		if (e == ENOENT || e == ECONNREFUSED)
			return fail(-e, "gpusysd is not running at %s (%s: %s)", dir, sa.sun_path, strerror(e));
		return fail(-e, "cannot connect to %s: %s", sa.sun_path, strerror(e));
	}
	return fd;
}

static struct gpusys_hello make_hello(const struct gpusys_attach_opts *o)
{
	struct gpusys_hello h = {
		.magic = GPUSYS_HELLO_MAGIC,
		.wire_version = GPUSYS_WIRE_VERSION,
		.abi_version = GPUSYS_ABI_VERSION,
		.num_ports = o->num_ports,
		.cuda_device = o->cuda_device,
		.memory_kinds = o->memory_kinds ? o->memory_kinds : 1u << GPUSYS_MEMORY_MEMFD,
		.bulk_bytes = o->bulk_bytes,
	};
	read_comm(h.comm, sizeof(h.comm));
	if (o->gpu_uuid)
		memcpy(h.gpu_uuid, o->gpu_uuid, sizeof(h.gpu_uuid));
	return h;
}

static int recv_welcome(int sock, struct gpusys_welcome *w, int *ret_fd, int *ret_wake);

/* Send hello h with the descriptors it may carry: stdout and stderr
 * (pass_stdio), the working directory cwd (or -1), the channel (or -1: a
 * re-offer, wire.h). */
static int send_hello(int sock, struct gpusys_hello h, bool pass_stdio, int cwd, int channel)
{
	int fds[4], nfds = 0;

	h.fd_mask = 0;
	/* Only descriptors that are open: a daemon without stdout is not an
	 * error, it just gets none. */
	if (pass_stdio) {
		if (fcntl(STDOUT_FILENO, F_GETFD) >= 0) {
			fds[nfds++] = STDOUT_FILENO;
			h.fd_mask |= GPUSYS_HELLO_FD_STDOUT;
		}
		if (fcntl(STDERR_FILENO, F_GETFD) >= 0) {
			fds[nfds++] = STDERR_FILENO;
			h.fd_mask |= GPUSYS_HELLO_FD_STDERR;
		}
	}
	if (cwd >= 0) {
		fds[nfds++] = cwd;
		h.fd_mask |= GPUSYS_HELLO_FD_CWD;
	}
	if (channel >= 0) {
		fds[nfds++] = channel;
		h.fd_mask |= GPUSYS_HELLO_FD_CHANNEL;
	}
	ssize_t n = fdpass_send(sock, &h, sizeof(h), fds, (unsigned)nfds, MSG_NOSIGNAL);
	if (n == -EPIPE || n == -ECONNRESET) {
		/* gpusysd may have refused before reading the hello (out of
		 * descriptors, it accepts, says why and closes at once): its
		 * reason is still there to be read, and says more than EPIPE. */
		struct gpusys_welcome w;
		int mem_fd = -1, wake_fd = -1;
		int r = recv_welcome(sock, &w, &mem_fd, &wake_fd);
		if (r < 0)
			return r;
		close(mem_fd);
		close(wake_fd);
	}
	if (n < 0)
		return fail((int)n, "cannot send the hello: %s", strerror((int)-n));
	return 0;
}

/* The welcome and, on success, exactly two descriptors: the channel memory
 * in *ret_fd, the wake pipe in *ret_wake. */
static int recv_welcome(int sock, struct gpusys_welcome *w, int *ret_fd, int *ret_wake)
{
	union {
		struct gpusys_welcome w;
		char bytes[sizeof(struct gpusys_welcome) + 1];
	} buf;
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	int fds[MAX_RECV_FDS], msg_flags = 0, r;
	unsigned nfds = 0;

	do
		r = poll(&pfd, 1, WELCOME_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return fail(-ETIMEDOUT, "no welcome from gpusysd within %d ms", WELCOME_TIMEOUT_MS);
	memset(&buf, 0, sizeof(buf));
	ssize_t n = fdpass_recv(sock, &buf, sizeof(buf), fds, MAX_RECV_FDS, &nfds, &msg_flags, 0);
	if (n < 0)
		return fail((int)n, "cannot receive the welcome: %s", strerror((int)-n));

	if (n == 0)
		r = fail(-ECONNRESET, "gpusysd closed the connection during the handshake");
	else if (msg_flags & (MSG_TRUNC | MSG_CTRUNC) || (size_t)n != sizeof(buf.w))
		r = fail(-EPROTO, "malformed welcome (%zd bytes)", n);
	else if (buf.w.magic != GPUSYS_WELCOME_MAGIC || buf.w.wire_version < GPUSYS_WIRE_VERSION_MIN ||
		 buf.w.wire_version > GPUSYS_WIRE_VERSION)
		r = fail(-EPROTO, "welcome of protocol version %u (we speak %u to %u)", buf.w.wire_version,
			 GPUSYS_WIRE_VERSION_MIN, GPUSYS_WIRE_VERSION);
	else if (buf.w.status < 0) {
		buf.w.message[sizeof(buf.w.message) - 1] = 0;
		r = fail(buf.w.status, "gpusysd refused: %s", buf.w.message);
	} else if (buf.w.status > 0 || nfds != 2)
		r = fail(-EPROTO, "malformed welcome (status %d, %u descriptors)", buf.w.status, nfds);
	else {
		struct stat st;
		if (fstat(fds[1], &st) < 0 || !S_ISFIFO(st.st_mode))
			r = fail(-EPROTO, "malformed welcome (the wake descriptor is not a pipe)");
		else
			r = 0;
	}
	if (r < 0) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return r;
	}
	*w = buf.w;
	*ret_fd = fds[0];
	*ret_wake = fds[1];
	return 0;
}

/* The daemon is trusted to run our requests, but a header that disagrees
 * with the layout both sides compute means we would read the wrong words:
 * refuse it. */
static int check_channel(const struct gpusys_channel_header *h, const struct gpusys_welcome *w)
{
	struct gpusys_channel_layout l = gpusys_channel_layout(w->num_ports, w->bulk_bytes, 0);

	if (h->magic != GPUSYS_CHANNEL_MAGIC || h->abi_version != GPUSYS_ABI_VERSION)
		return fail(-EPROTO, "channel header magic 0x%x ABI %u (we speak ABI %u)", h->magic, h->abi_version,
			    GPUSYS_ABI_VERSION);
	if (h->num_ports != w->num_ports || h->header_bytes != GPUSYS_HEADER_BYTES || h->client_id != w->client_id)
		return fail(-EPROTO, "channel header disagrees with the welcome");
	if (h->client_word_offset != l.client_word_offset || h->server_word_offset != l.server_word_offset ||
	    h->ports_offset != l.ports_offset || h->bulk_offset != l.bulk_offset || h->bulk_bytes != l.bulk_bytes ||
	    h->total_bytes != l.total_bytes || w->channel_bytes != l.total_bytes)
		return fail(-EPROTO, "channel layout disagrees with ABI %u for %u ports", GPUSYS_ABI_VERSION,
			    w->num_ports);
	if (h->server_state == GPUSYS_SERVER_STOPPED)
		return fail(-ESHUTDOWN, "gpusysd stopped");
	return 0;
}

/* Reports go on the connection only when its welcome said the daemon
 * takes them (common/wire.h); one it could not list just carries none. */
static void use_for_reports(struct gpusys_client *c, uint32_t wire_version)
{
	bool want = wire_version >= GPUSYS_WIRE_REPORTS;
	if (c->reports && !want)
		gpusys_report_conn_remove(c->sock);
	if (!c->reports && want)
		want = gpusys_report_conn_add(c->sock, c->cuda_device) == 0;
	c->reports = want;
}

static int reconnect_cb(void *c, int stop_fd)
{
	return gpusys_client_reconnect(c, stop_fd);
}

int gpusys_client_attach(const struct gpusys_attach_opts *opts, struct gpusys_client **ret)
{
	/* Zeroed although only read after recv_welcome filled it: gcc cannot
	 * see that through the error paths. */
	struct gpusys_welcome w = { 0 };
	struct gpusys_client *c;
	int r, mem_fd = -1, wake_fd = -1;

	last_error[0] = 0;
	const char *dir = opts->runtime_dir;
	if (!dir || !*dir)
		dir = getenv(GPUSYS_RUNTIME_DIR_ENV);
	if (!dir || !*dir)
		dir = GPUSYS_DEFAULT_RUNTIME_DIR;

	c = calloc(1, sizeof(*c));
	if (!c)
		return fail(-ENOMEM, "out of memory");
	c->mem_fd = -1;
	c->wake_fd = -1;
	c->cwd_fd = -1;
	c->hello = make_hello(opts);
	c->pass_stdio = opts->pass_stdio;
	snprintf(c->dir, sizeof(c->dir), "%s", dir);
	if (opts->pass_cwd) {
		c->cwd_fd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (c->cwd_fd < 0) {
			r = fail(-errno, "cannot open the working directory: %s", strerror(errno));
			goto fail;
		}
	}
	c->sock = connect_daemon(dir);
	if (c->sock < 0) {
		r = c->sock;
		goto fail;
	}
	r = send_hello(c->sock, c->hello, c->pass_stdio, c->cwd_fd, -1);
	if (r < 0)
		goto fail;
	r = recv_welcome(c->sock, &w, &mem_fd, &wake_fd);
	if (r < 0)
		goto fail;
	c->mem_fd = mem_fd;
	c->wake_fd = wake_fd;
	c->num_ports = w.num_ports;
	c->client_id = w.client_id;
	c->memory_kind = w.memory_kind;
	c->bytes = w.channel_bytes;
	c->cuda_device = opts->cuda_device;

	uint32_t asked = opts->memory_kinds ? opts->memory_kinds : 1u << GPUSYS_MEMORY_MEMFD;
	if (w.memory_kind >= 32 || !(asked & (1u << w.memory_kind))) {
		r = fail(-EPROTO, "gpusysd sent memory of kind %u, which we did not offer to import", w.memory_kind);
		goto fail;
	}
	if (w.num_ports < GPUSYS_MIN_PORTS || w.num_ports > GPUSYS_MAX_PORTS) {
		r = fail(-EPROTO, "welcome grants %u ports", w.num_ports);
		goto fail;
	}
	if (w.memory_kind != GPUSYS_MEMORY_MEMFD) {
		use_for_reports(c, w.wire_version);
		*ret = c; /* the importer maps and checks it */
		return 0;
	}

	struct stat st;
	if (fstat(mem_fd, &st) < 0 || (uint64_t)st.st_size < w.channel_bytes ||
	    w.channel_bytes < sizeof(struct gpusys_channel_header)) {
		r = fail(-EPROTO, "channel memory is smaller than the welcome says");
		goto fail;
	}
	void *base = mmap(NULL, w.channel_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem_fd, 0);
	if (base == MAP_FAILED) {
		r = fail(-errno, "cannot map the channel: %s", strerror(errno));
		goto fail;
	}
	c->base = base;
	r = check_channel(base, &w);
	if (r < 0)
		goto fail;
	/* Emulated warps over this mapping find it (gpusys_emu_open). */
	gpusys_channel_register(base, c->wake_fd, c->sock, reconnect_cb, c);
	use_for_reports(c, w.wire_version);
	*ret = c;
	return 0;
fail:
	gpusys_client_detach(c);
	return r;
}

void gpusys_client_detach(struct gpusys_client *c)
{
	if (!c)
		return;
	if (c->base) {
		gpusys_channel_unregister(c->base); /* joins its watchdog */
		munmap(c->base, c->bytes);
	}
	if (c->mem_fd >= 0)
		close(c->mem_fd);
	if (c->wake_fd >= 0)
		close(c->wake_fd);
	if (c->reports) /* no report is on its way through sock after this */
		gpusys_report_conn_remove(c->sock);
	if (c->sock >= 0)
		close(c->sock);
	if (c->cwd_fd >= 0)
		close(c->cwd_fd);
	free(c);
}

/* ------------------------------------------------------------ restart */

/* One re-offer (wire.h, GPUSYS_HELLO_FD_CHANNEL): connect, send the first
 * hello again with the channel and our client id, take the welcome. The
 * new connection and wake pipe then replace the old ones under the same
 * descriptor numbers (dup3 is atomic), so whatever holds them (the
 * watchdogs, emulated warps' dev.wake_fd) goes on with the new daemon. */
static int reoffer(struct gpusys_client *c)
{
	struct gpusys_welcome w;
	int mem_fd = -1, wake_fd = -1, r;
	int sock = connect_daemon(c->dir);
	if (sock < 0)
		return sock;
	struct gpusys_hello h = c->hello;
	h.reserved = c->client_id;
	r = send_hello(sock, h, c->pass_stdio, c->cwd_fd, c->mem_fd);
	if (r == 0)
		r = recv_welcome(sock, &w, &mem_fd, &wake_fd);
	if (r < 0) {
		close(sock);
		return r;
	}
	/* The daemon sends the channel back: it must be ours, unchanged. */
	struct stat a, b;
	if (fstat(mem_fd, &a) < 0 || fstat(c->mem_fd, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev ||
	    w.num_ports != c->num_ports || w.channel_bytes != c->bytes || w.memory_kind != c->memory_kind)
		r = fail(-EPROTO, "gpusysd adopted our channel but describes another one");
	if (r == 0 && (dup3(sock, c->sock, O_CLOEXEC) < 0 || dup3(wake_fd, c->wake_fd, O_CLOEXEC) < 0))
		r = fail(-errno, "cannot take the new connection: %s", strerror(errno));
	close(mem_fd);
	close(wake_fd);
	close(sock);
	if (r == 0) /* read by gpusys_client_conn_id on other threads */
		__atomic_store_n(&c->client_id, w.client_id, __ATOMIC_RELAXED);
	if (r == 0) /* the new daemon's say (the descriptor number is the same) */
		use_for_reports(c, w.wire_version);
	return r;
}

int gpusys_client_reconnect_ms(void)
{
	const char *e = getenv(GPUSYS_RECONNECT_ENV);
	if (!e || !*e)
		return GPUSYS_RECONNECT_DEFAULT_MS;
	char *end;
	long v = strtol(e, &end, 10);
	return *end || v < 0 ? GPUSYS_RECONNECT_DEFAULT_MS : v > 3600000 ? 3600000 : (int)v;
}

int gpusys_client_reconnect(struct gpusys_client *c, int stop_fd)
{
	const struct gpusys_channel_header *h = c->base;
	int ms = gpusys_client_reconnect_ms(), r = -ESHUTDOWN;

	/* Only a memfd channel that its daemon drained and marked: after a
	 * kill -9 (RUNNING) or an ordinary stop (STOPPED) nothing is safe to
	 * serve again (docs/RESTART.md). */
	if (ms == 0 || !h || c->memory_kind != GPUSYS_MEMORY_MEMFD ||
	    __atomic_load_n(&h->server_state, __ATOMIC_ACQUIRE) != GPUSYS_SERVER_HANDOVER)
		return -ESHUTDOWN;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		r = reoffer(c);
		if (r == 0)
			return 0;
		/* Refused for a reason of its own (the channel, the version,
		 * too many clients): trying again changes nothing. */
		if (r != -ENOENT && r != -ECONNREFUSED && r != -ECONNRESET && r != -ETIMEDOUT && r != -EAGAIN &&
		    r != -EPIPE)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		long long left = ms - ((long long)(t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0) {
			char why[sizeof(last_error)];
			memcpy(why, last_error, sizeof(why));
			r = fail(-ESHUTDOWN, "no gpusysd took it back within %d ms (%s)", ms, why);
			break;
		}
		struct pollfd p = { .fd = stop_fd, .events = POLLIN };
		if (poll(&p, stop_fd >= 0 ? 1 : 0, left < 5 ? (int)left : 5) > 0)
			return -ECANCELED; /* detach */
	}
	/* The channel's calls now fail -ESHUTDOWN; this thread (the
	 * connection's watchdog) alone knows why, so it says so. */
	fprintf(stderr, "libgpusys: gpusysd restarted and our channel was not taken back: %s\n", last_error);
	return r;
}

void *gpusys_client_channel(const struct gpusys_client *c)
{
	return c->base;
}

uint64_t gpusys_client_channel_bytes(const struct gpusys_client *c)
{
	return c->bytes;
}

uint32_t gpusys_client_num_ports(const struct gpusys_client *c)
{
	return c->num_ports;
}

uint32_t gpusys_client_conn_id(const struct gpusys_client *c)
{
	return __atomic_load_n(&c->client_id, __ATOMIC_RELAXED);
}

int gpusys_client_memory_fd(const struct gpusys_client *c)
{
	return c->mem_fd;
}

int gpusys_client_wake_fd(const struct gpusys_client *c)
{
	return c->wake_fd;
}

uint32_t gpusys_client_memory_kind(const struct gpusys_client *c)
{
	return c->memory_kind;
}

const char *gpusys_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	/* The protocol's own meanings (include/gpusys/abi.h). */
	case -ESHUTDOWN: return "gpusysd stopped or went away";
	case -ECONNABORTED: return "gpusysd restarted and refused the call, which did not run";
	case -EPROTO: return "protocol mismatch between client and gpusysd";
	case -ENOSYS: return "unknown or unsupported opcode";
	case -E2BIG: return "a lane's payload exceeds the per-lane limit";
	case -EMSGSIZE: return "the response does not fit the lane's capacity";
	case -EUSERS: return "gpusysd serves its maximum number of clients";
	case -ECONNREFUSED: return "gpusysd is not running (connection refused)";
	case -ENODEV: return "no usable GPU (no driver, or no such device)";
	case -ETIMEDOUT: return "timed out";
	}
	if (err < 0) {
		const char *s = strerrordesc_np(-err);
		if (s)
			return s;
	}
	return "unknown error";
}

/* The connection to the daemon (owned by c): a CUDA client's watchdog polls
 * it for the hang-up (libclient/attach/cuda.c). */
int gpusys_client_socket_fd(const struct gpusys_client *c)
{
	return c->sock;
}
