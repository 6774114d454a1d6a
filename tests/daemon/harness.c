/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "common/fdpass.h"
#include "gpusys/emulator.h"
#include "harness.h"

long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

const char *test_env(const char *name)
{
	const char *v = getenv(name);
	if (!v || !*v)
		fail_msg("$%s is not set (meson passes it)", name);
	return v;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text ? text : "", f);
	assert_int_equal(fclose(f), 0);
}

void gd_prepare(struct gd *d, const char *config)
{
	memset(d, 0, sizeof(*d));
	strcpy(d->dir, "/tmp/gpusysd-test.XXXXXX");
	assert_non_null(mkdtemp(d->dir));
	snprintf(d->runtime, sizeof(d->runtime), "%s/run", d->dir);
	snprintf(d->config, sizeof(d->config), "%s/gpusysd.conf", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/gpusysd.log", d->dir);
	write_file(d->config, config);
}

pid_t gd_spawn(struct gd *d, const char *const *extra)
{
	const char *bin = test_env("GPUSYSD_BIN");
	const char *argv[32] = { bin, "--runtime-dir", d->runtime, "--config", d->config };
	int n = 5;

	for (; extra && *extra && n < 31; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A test that dies takes its daemon with it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static bool control_up(const char *runtime)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_CONTROL_NAME) >= (int)sizeof(sa.sun_path))
		fail_msg("path too long");
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

void gd_start(struct gd *d, const char *config)
{
	gd_prepare(d, config);
	d->pid = gd_spawn(d, NULL);
	long t0 = now_ms();
	while (!control_up(d->runtime)) {
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			char *log = gd_log(d);
			d->pid = 0;
			fail_msg("gpusysd exited during start-up (status 0x%x): %s", st, log);
		}
		if (now_ms() - t0 > 5000)
			fail_msg("gpusysd not up within 5 s");
		usleep(2000);
	}
}

int wait_exit(pid_t pid, int ms)
{
	long t0 = now_ms();
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (now_ms() - t0 > ms)
			return -1;
		usleep(1000);
	}
}

int gd_stop(struct gd *d, long *ret_ms)
{
	long t0 = now_ms();
	assert_int_equal(kill(d->pid, SIGTERM), 0);
	int st = wait_exit(d->pid, 3000);
	if (st < 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
		fail_msg("gpusysd did not exit within 3 s of SIGTERM");
	}
	d->pid = 0;
	if (ret_ms)
		*ret_ms = now_ms() - t0;
	return st;
}

void gd_cleanup(struct gd *d)
{
	char cmd[256];
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	if (d->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", d->dir);
		d->dir[0] = 0;
	}
}

void gd_finish(struct gd *d)
{
	long ms;
	int st = gd_stop(d, &ms);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		char *log = gd_log(d);
		fail_msg("gpusysd exit status 0x%x; log:\n%s", st, log);
	}
	if (ms > 1000)
		fail_msg("gpusysd took %ld ms to stop", ms);
	gd_cleanup(d);
}

static char *read_all(int fd)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	assert_non_null(buf);
	for (;;) {
		if (n + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		ssize_t k = read(fd, buf + n, cap - n - 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	buf[n] = 0;
	return buf;
}

char *gd_log(const struct gd *d)
{
	int fd = open(d->log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return strdup("");
	char *s = read_all(fd);
	close(fd);
	return s;
}

char *gd_log_tail(const struct gd *d, size_t max)
{
	char *log = gd_log(d);
	size_t n = strlen(log);
	if (n <= max)
		return log;
	const char *from = log + n - max;
	const char *nl = strchr(from, '\n');
	char *tail = strdup(nl ? nl + 1 : from);
	free(log);
	return tail;
}

int run_capture(const char *const *argv, char **ret_out, char **ret_err)
{
	int st = run_capture_ms(argv, 10000, ret_out, ret_err);
	if (st < 0)
		fail_msg("%s did not finish within 10 s", argv[0]);
	return st;
}

int run_capture_ms(const char *const *argv, int ms, char **ret_out, char **ret_err)
{
	char out_path[] = "/tmp/gpusys-out.XXXXXX", err_path[] = "/tmp/gpusys-err.XXXXXX";
	int out = mkstemp(out_path), err = mkstemp(err_path);
	assert_true(out >= 0 && err >= 0);
	unlink(out_path);
	unlink(err_path);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(out, 1);
		dup2(err, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = wait_exit(pid, ms);
	if (st < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	lseek(out, 0, SEEK_SET);
	lseek(err, 0, SEEK_SET);
	*ret_out = read_all(out);
	*ret_err = read_all(err);
	close(out);
	close(err);
	return st;
}

json_t *control_request(const char *runtime, const char *line)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_CONTROL_NAME) >= (int)sizeof(sa.sun_path))
		fail_msg("path too long");
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return NULL;
	}
	size_t len = strlen(line);
	assert_int_equal(send(fd, line, len, MSG_NOSIGNAL), (ssize_t)len);
	char buf[1 << 16];
	size_t n = 0;
	while (n < sizeof(buf) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 2000) <= 0)
			break;
		ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
		if (memchr(buf, '\n', n))
			break;
	}
	close(fd);
	buf[n] = 0;
	return json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL);
}

json_t *daemon_status(const char *runtime)
{
	json_t *st = control_request(runtime, "{\"cmd\":\"status\"}\n");
	assert_non_null(st);
	assert_null(json_object_get(st, "error"));
	return st;
}

void gd_wait_up(const struct gd *d)
{
	long t0 = now_ms();
	for (;;) {
		json_t *st = control_request(d->runtime, "{\"cmd\":\"status\"}\n");
		if (st) {
			json_decref(st);
			return;
		}
		if (now_ms() - t0 > 5000)
			fail_msg("restarted gpusysd not up within 5 s; the end of its log:\n%s", gd_log_tail(d, 4000));
		usleep(2000);
	}
}

json_t *status_client(json_t *st, unsigned id)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(st, "clients"), i, c)
	{
		if (json_integer_value(json_object_get(c, "id")) == (json_int_t)id)
			return c;
	}
	return NULL;
}

int raw_connect(const char *runtime)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", runtime, GPUSYS_SOCKET_NAME) >= (int)sizeof(sa.sun_path))
		fail_msg("path too long");
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

void hello_init(struct gpusys_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = GPUSYS_HELLO_MAGIC;
	h->wire_version = GPUSYS_WIRE_VERSION;
	h->abi_version = GPUSYS_ABI_VERSION;
	h->num_ports = 4;
	h->cuda_device = -1;
	h->memory_kinds = 1u << GPUSYS_MEMORY_MEMFD;
	strcpy(h->comm, "raw-test");
}

int raw_recv_welcome(int fd, struct gpusys_welcome *w, int *ret_fd)
{
	char buf[sizeof(*w) + 16];
	int fds[4];
	unsigned nfds = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	*ret_fd = -1;
	if (poll(&p, 1, 2000) <= 0)
		return -ETIMEDOUT;
	ssize_t n = fdpass_recv(fd, buf, sizeof(buf), fds, 4, &nfds, NULL, 0);
	if (n <= 0) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return -ECONNRESET;
	}
	/* The first descriptor (the channel memory) is returned; the others
	 * (the wake pipe) are closed. */
	for (unsigned i = 0; i < nfds; i++) {
		if (*ret_fd < 0)
			*ret_fd = fds[i];
		else
			close(fds[i]);
	}
	if ((size_t)n != sizeof(*w))
		return -EPROTO;
	memcpy(w, buf, sizeof(*w));
	return w->magic == GPUSYS_WELCOME_MAGIC ? 0 : -EPROTO;
}

bool wait_peer_close(int fd, int ms)
{
	long t0 = now_ms();
	while (now_ms() - t0 < ms) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) > 0) {
			char b[256];
			ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return true;
		}
	}
	return false;
}

int count_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int settled_fds(pid_t pid)
{
	int last = count_fds(pid), same = 0;
	long t0 = now_ms();
	/* Connections we just closed (the start-up probe, status requests)
	 * are closed by the daemon's loop a moment later. */
	while (same < 10 && now_ms() - t0 < 2000) {
		usleep(5000);
		int n = count_fds(pid);
		same = n == last ? same + 1 : 0;
		last = n;
	}
	return last;
}

void wait_fds(pid_t pid, int want)
{
	long t0 = now_ms();
	int n;
	while ((n = count_fds(pid)) != want && now_ms() - t0 < 1000)
		usleep(2000);
	if (n != want) {
		char cmd[64];
		snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)pid);
		if (system(cmd) != 0)
			fprintf(stderr, "ls failed\n");
		fail_msg("daemon holds %d descriptors, expected %d", n, want);
	}
}

int emu_sleep(const struct gpusys_dev *dev, uint64_t delay_ns, uint64_t timeout_ns, uint16_t flags)
{
	struct gpusys_sleep_req q = { .delay_ns = delay_ns, .timeout_ns = timeout_ns };
	const void *in[GPUSYS_WARP_LANES] = { &q };
	uint32_t in_len[GPUSYS_WARP_LANES] = { sizeof(q) };
	void *out[GPUSYS_WARP_LANES] = { NULL };
	uint32_t cap[GPUSYS_WARP_LANES] = { 0 }, out_len[GPUSYS_WARP_LANES] = { 0 };
	int32_t st[GPUSYS_WARP_LANES] = { 0 };
	int r = gpusys_emu_rpc(dev, GPUSYS_OP_SLEEP, flags, 1, in, in_len, out, cap, out_len, st);
	return r ? r : st[0];
}
