/* SPDX-License-Identifier: MIT */
/*
 * Re-offered channels (docs/RESTART.md, wire.h GPUSYS_HELLO_FD_CHANNEL):
 * the daemon adopts only a sealed memfd of the right size and layout whose
 * server_state is HANDOVER, and refuses anything else with a clear error;
 * a handle of the old daemon fails -EBADF after the adoption.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/fdpass.h"
#include "gpusys/emulator.h"
#include "common/wire.h"
#include "libclient/attach/client.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES
#define PORTS 4u
#define OLD_ID 7u
#define HANDOVER_CONF "restart_grace_ms = 5000\nrestart_drain_ms = 1000\n"

enum shape { GOOD, WRONG_SIZE, UNSEALED, RUNNING_STATE, NOT_MEMFD };

/* A channel as a daemon would have left it for a restart, spoiled as
 * shape says. */
static int make_channel(struct gd *d, enum shape shape)
{
	struct gpusys_channel_layout l = gpusys_channel_layout(PORTS, 0, 0);
	int fd;
	if (shape == NOT_MEMFD) {
		char path[256];
		snprintf(path, sizeof(path), "%s/not-a-memfd", d->dir);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	} else {
		fd = memfd_create("test-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	}
	assert_true(fd >= 0);
	uint64_t size = shape == WRONG_SIZE ? l.total_bytes + 4096 : l.total_bytes;
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(base != MAP_FAILED);
	gpusys_channel_format(base, PORTS, &l, OLD_ID);
	((struct gpusys_channel_header *)base)->server_state =
		shape == RUNNING_STATE ? GPUSYS_SERVER_RUNNING : GPUSYS_SERVER_HANDOVER;
	munmap(base, size);
	if (shape != UNSEALED && shape != NOT_MEMFD)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/* Re-offer a channel of this shape; the welcome's status and message. */
static int reoffer(struct gd *d, enum shape shape, char *msg, size_t msglen)
{
	struct gpusys_hello h;
	struct gpusys_welcome w;
	int chan = make_channel(d, shape), mem = -1;
	int sock = raw_connect(d->runtime);
	assert_true(sock >= 0);
	hello_init(&h);
	h.num_ports = PORTS;
	h.fd_mask = GPUSYS_HELLO_FD_CHANNEL;
	h.reserved = OLD_ID;
	assert_true(fdpass_send(sock, &h, sizeof(h), &chan, 1, MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	close(chan);
	assert_int_equal(raw_recv_welcome(sock, &w, &mem), 0);
	if (mem >= 0)
		close(mem);
	close(sock);
	w.message[sizeof(w.message) - 1] = 0;
	snprintf(msg, msglen, "%s", w.message);
	return w.status;
}

/* A hostile re-offer is refused, saying why; the one a daemon would have
 * left is taken (so each refusal is for its own reason). */
static void test_hostile_reoffers(void **state)
{
	struct gd d;
	char msg[256];

	(void)state;
	gd_start(&d, HANDOVER_CONF);
	assert_int_equal(reoffer(&d, WRONG_SIZE, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "layout does not match"));
	assert_int_equal(reoffer(&d, UNSEALED, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not sealed"));
	assert_int_equal(reoffer(&d, RUNNING_STATE, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "was not handed over"));
	assert_int_equal(reoffer(&d, NOT_MEMFD, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a memfd"));
	assert_int_equal(reoffer(&d, GOOD, msg, sizeof(msg)), 0);
	/* The log line follows the welcome. */
	bool logged = false;
	for (long t0 = now_ms(); !logged && now_ms() - t0 < 2000; usleep(5000)) {
		char *log = gd_log(&d);
		logged = strstr(log, "took back its channel (client 7 before the restart)") != NULL;
		free(log);
	}
	assert_true(logged);
	gd_finish(&d);
}

static int open_file(const gpusys_dev_t *dev, const char *p, int32_t *ret)
{
	const char *path[L] = { p };
	int flags[L] = { O_RDWR };
	uint32_t mode[L] = { 0 };
	int64_t r64[L];
	int r = gpusys_emu_file_open(dev, 1, path, flags, mode, r64);
	if (r == 0 && r64[0] < 0)
		r = (int)r64[0];
	if (r == 0)
		*ret = (int32_t)r64[0];
	return r;
}

static int write_at(const gpusys_dev_t *dev, int32_t handle, uint32_t v, int64_t at)
{
	const void *bufs[L] = { &v };
	uint32_t count[L] = { 4 };
	int64_t off[L] = { at }, ret[L] = { 0 };
	int32_t h[L] = { handle };
	int r = gpusys_emu_file_pwrite(dev, 1, h, bufs, count, off, ret);
	return r < 0 ? r : ret[0] < 0 ? (int)ret[0] : 0;
}

/* After a handover the old daemon's handles fail -EBADF, also where the
 * new daemon has handed out a handle of the same slot since: the
 * generations start past the old ones. */
static void test_stale_handles(void **state)
{
	struct gd d;
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	char a[256], b[256];
	int32_t old_h, new_h;

	(void)state;
	gd_start(&d, HANDOVER_CONF);
	snprintf(a, sizeof(a), "%s/a.dat", d.dir);
	snprintf(b, sizeof(b), "%s/b.dat", d.dir);
	for (int i = 0; i < 2; i++) {
		int fd = open(i ? b : a, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		close(fd);
	}
	struct gpusys_attach_opts o = { .runtime_dir = d.runtime, .num_ports = 2, .cuda_device = -1 };
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_client_channel(c), &emu), 0);
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	uint32_t id_before = gpusys_client_conn_id(c);
	assert_int_equal(open_file(dev, a, &old_h), 0);
	assert_int_equal(write_at(dev, old_h, 1, 0), 0);

	long ms;
	int ws = gd_stop(&d, &ms);
	assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	d.pid = gd_spawn(&d, NULL);
	gd_wait_up(&d);
	/* The library re-offers by itself: this call waits through it. */
	assert_int_equal(open_file(dev, b, &new_h), 0);
	assert_int_not_equal(new_h, old_h);
	/* Same slot, new generation: the old handle names nothing. */
	assert_int_equal(new_h & 0xffff, old_h & 0xffff);
	assert_int_equal(write_at(dev, old_h, 2, 4), -EBADF);
	assert_int_equal(write_at(dev, new_h, 3, 0), 0);
	/* The new daemon numbers its clients from 1 again. */
	(void)id_before;

	uint32_t va[2] = { 0 }, vb = 0;
	FILE *f = fopen(a, "rb");
	assert_non_null(f);
	assert_int_equal(fread(va, 4, 2, f), 1); /* 4 bytes: the stale write never ran */
	fclose(f);
	assert_int_equal(va[0], 1);
	f = fopen(b, "rb");
	assert_non_null(f);
	assert_int_equal(fread(&vb, 4, 1, f), 1);
	fclose(f);
	assert_int_equal(vb, 3);

	gpusys_emu_close(emu);
	gpusys_client_detach(c);
	gd_finish(&d);
}

/* Without restart_grace_ms a SIGTERM is an ordinary stop: STOPPED, and the
 * client gets -ESHUTDOWN (no re-offer). */
static void test_no_handover_by_default(void **state)
{
	struct gd d;
	struct gpusys_client *c;
	struct gpusys_emu *emu;
	int32_t h;
	char a[256];

	(void)state;
	gd_start(&d, NULL);
	snprintf(a, sizeof(a), "%s/a.dat", d.dir);
	int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	struct gpusys_attach_opts o = { .runtime_dir = d.runtime, .num_ports = 2, .cuda_device = -1 };
	assert_int_equal(gpusys_client_attach(&o, &c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_client_channel(c), &emu), 0);
	assert_int_equal(open_file(gpusys_emu_dev(emu), a, &h), 0);
	long ms;
	gd_stop(&d, &ms);
	d.pid = gd_spawn(&d, NULL);
	gd_wait_up(&d);
	const struct gpusys_channel_header *hdr = gpusys_client_channel(c);
	assert_int_equal(hdr->server_state, GPUSYS_SERVER_STOPPED);
	assert_int_equal(write_at(gpusys_emu_dev(emu), h, 1, 0), -ESHUTDOWN);
	gpusys_emu_close(emu);
	gpusys_client_detach(c);
	gd_finish(&d);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_reoffers),
		cmocka_unit_test(test_stale_handles),
		cmocka_unit_test(test_no_handover_by_default),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
