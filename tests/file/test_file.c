/* SPDX-License-Identifier: MIT */
/*
 * The file service end to end: the real gpusysd, clients attached with
 * their working directory, file calls from emulated warps (the same request
 * code a GPU runs). Every call's success and its POSIX errors; handles that
 * are closed, invented or another client's; large files through the bulk
 * area, checked byte for byte; two clients as two users; a client killed in
 * the middle of writing; a read that blocks on a FIFO while other clients
 * go on being served.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "common/port_host.h"
#include "device/file_client.h" /* the async start and finish, for test_no_room_waits */
#include "../daemon/harness.h"
#include "../daemon/emu_client.h"
#include "../daemon/users.h"

#define L GPUSYS_WARP_LANES
#define BIG_BYTES (UINT64_C(256) << 20) /* CI size; the GPU test reads 1 GiB */

static struct gd daemon_;
#define TEST_MAX_HANDLES 1500u
#define TEST_MAX_HANDLES_TEXT "1500"
static char work[128]; /* the clients' working directory */

static int cl_attach_at(struct emu_client *k, const char *runtime, bool pass_cwd, uint64_t bulk)
{
	return emu_client_attach(k, runtime, 4, bulk, GPUSYS_ATTACH_NO_STDIO | (pass_cwd ? 0 : GPUSYS_ATTACH_NO_CWD));
}

static int cl_attach(struct emu_client *k, bool pass_cwd, uint64_t bulk)
{
	return cl_attach_at(k, daemon_.runtime, pass_cwd, bulk);
}

/* ---------------------------------------------------- one-lane wrappers */

static int64_t f_open(const gpusys_dev_t *d, const char *path, int flags, uint32_t mode)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	uint32_t m[L] = { mode };
	int64_t r[L];
	gpusys_emu_file_open(d, 1, p, fl, m, r);
	return r[0];
}

#define ONE_HANDLE(name)                                                  \
	static int64_t f_##name(const gpusys_dev_t *d, int64_t h)         \
	{                                                                 \
		int32_t hv[L] = { (int32_t)h };                           \
		int64_t r[L];                                             \
		gpusys_emu_file_##name(d, 1, hv, r);                      \
		return r[0];                                              \
	}
ONE_HANDLE(close)
ONE_HANDLE(fsync)
ONE_HANDLE(closedir)

#define ONE_PATH(name)                                                    \
	static int64_t f_##name(const gpusys_dev_t *d, const char *path) \
	{                                                                 \
		const char *p[L] = { path };                              \
		int64_t r[L];                                             \
		gpusys_emu_file_##name(d, 1, p, r);                       \
		return r[0];                                              \
	}
ONE_PATH(unlink)
ONE_PATH(rmdir)
ONE_PATH(opendir)

static int64_t f_read(const gpusys_dev_t *d, int64_t h, void *buf, uint32_t n)
{
	int32_t hv[L] = { (int32_t)h };
	void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t r[L];
	gpusys_emu_file_read(d, 1, hv, b, c, r);
	return r[0];
}

static int64_t f_write(const gpusys_dev_t *d, int64_t h, const void *buf, uint32_t n)
{
	int32_t hv[L] = { (int32_t)h };
	const void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t r[L];
	gpusys_emu_file_write(d, 1, hv, b, c, r);
	return r[0];
}

static int64_t f_pread(const gpusys_dev_t *d, int64_t h, void *buf, uint32_t n, int64_t off)
{
	int32_t hv[L] = { (int32_t)h };
	void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t o[L] = { off }, r[L];
	gpusys_emu_file_pread(d, 1, hv, b, c, o, r);
	return r[0];
}

static int64_t f_pwrite(const gpusys_dev_t *d, int64_t h, const void *buf, uint32_t n, int64_t off)
{
	int32_t hv[L] = { (int32_t)h };
	const void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t o[L] = { off }, r[L];
	gpusys_emu_file_pwrite(d, 1, hv, b, c, o, r);
	return r[0];
}

static int64_t f_lseek(const gpusys_dev_t *d, int64_t h, int64_t off, int whence)
{
	int32_t hv[L] = { (int32_t)h };
	int64_t o[L] = { off }, r[L];
	int w[L] = { whence };
	gpusys_emu_file_lseek(d, 1, hv, o, w, r);
	return r[0];
}

static int64_t f_fstat(const gpusys_dev_t *d, int64_t h, struct gpusys_stat *st)
{
	int32_t hv[L] = { (int32_t)h };
	struct gpusys_stat *s[L] = { st };
	int64_t r[L];
	gpusys_emu_file_fstat(d, 1, hv, s, r);
	return r[0];
}

static int64_t f_stat(const gpusys_dev_t *d, const char *path, int flags, struct gpusys_stat *st)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	struct gpusys_stat *s[L] = { st };
	int64_t r[L];
	gpusys_emu_file_stat(d, 1, p, fl, s, r);
	return r[0];
}

static int64_t f_ftruncate(const gpusys_dev_t *d, int64_t h, int64_t len)
{
	int32_t hv[L] = { (int32_t)h };
	int64_t n[L] = { len }, r[L];
	gpusys_emu_file_ftruncate(d, 1, hv, n, r);
	return r[0];
}

static int64_t f_rename(const gpusys_dev_t *d, const char *a, const char *b)
{
	const char *p[L] = { a }, *q[L] = { b };
	int64_t r[L];
	gpusys_emu_file_rename(d, 1, p, q, r);
	return r[0];
}

static int64_t f_mkdir(const gpusys_dev_t *d, const char *path, uint32_t mode)
{
	const char *p[L] = { path };
	uint32_t m[L] = { mode };
	int64_t r[L];
	gpusys_emu_file_mkdir(d, 1, p, m, r);
	return r[0];
}

static int64_t f_readfile(const gpusys_dev_t *d, const char *path, void *buf, uint32_t n)
{
	const char *p[L] = { path };
	void *b[L] = { buf };
	uint32_t c[L] = { n };
	int64_t r[L];
	gpusys_emu_file_readfile(d, 1, p, b, c, r);
	return r[0];
}

static int64_t f_readdir(const gpusys_dev_t *d, int64_t h, struct gpusys_dirent *e)
{
	int32_t hv[L] = { (int32_t)h };
	struct gpusys_dirent *ev[L] = { e };
	int64_t r[L];
	gpusys_emu_file_readdir(d, 1, hv, ev, r);
	return r[0];
}

static void host_write_file(const char *path, const void *data, size_t n, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, n), (ssize_t)n);
	close(fd);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

static void fill(uint8_t *b, uint64_t n, uint64_t seed)
{
	uint64_t s = seed | 1, i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = xorshift(&s);
		memcpy(b + i, &v, 8);
	}
	for (; i < n; i++)
		b[i] = (uint8_t)xorshift(&s);
}

/* FNV-1a over 8-byte words: a checksum to compare large buffers by. */
static uint64_t checksum(const uint8_t *b, uint64_t n)
{
	uint64_t h = 1469598103934665603ull, i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, b + i, 8);
		h = (h ^ v) * 1099511628211ull;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* ---------------------------------------------------------------- setup */

static int group_setup(void **state)
{
	(void)state;
	gd_start(&daemon_, "channel_bulk_bytes = 64M\nworkers = 4\nmax_handles_per_client = " TEST_MAX_HANDLES_TEXT "\n");
	/* Non-root test clients must reach the runtime directory. */
	chmod(daemon_.dir, 0755);
	snprintf(work, sizeof(work), "/tmp/gpusys-file-XXXXXX");
	if (!mkdtemp(work))
		return -1;
	chmod(work, 0777);
	umask(027); /* files the daemon creates for us get our umask */
	if (chdir(work) < 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	gd_finish(&daemon_);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
	if (system(cmd) != 0)
		return -1;
	return 0;
}

/* ----------------------------------------------------------------- tests */

static void test_open_read_write_close(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);

	int64_t h = f_open(k.dev, "a.txt", O_WRONLY | O_CREAT | O_TRUNC, 0666); /* umask 027 */
	assert_true(h > 2);
	assert_int_equal(f_write(k.dev, h, "hello, world\n", 13), 13);
	assert_int_equal(f_fsync(k.dev, h), 0);
	assert_int_equal(f_close(k.dev, h), 0);

	/* The file is where the client's working directory says. */
	struct stat st;
	assert_int_equal(stat("a.txt", &st), 0);
	assert_int_equal(st.st_size, 13);
	assert_int_equal(st.st_mode & 0777, 0640);

	h = f_open(k.dev, "a.txt", O_RDWR, 0);
	assert_true(h > 2);
	char buf[64] = { 0 };
	assert_int_equal(f_read(k.dev, h, buf, 5), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(f_lseek(k.dev, h, 0, SEEK_CUR), 5);
	assert_int_equal(f_read(k.dev, h, buf, sizeof(buf)), 8);
	assert_memory_equal(buf, ", world\n", 8);
	assert_int_equal(f_read(k.dev, h, buf, sizeof(buf)), 0); /* end of file */
	assert_int_equal(f_pread(k.dev, h, buf, 5, 7), 5);
	assert_memory_equal(buf, "world", 5);
	assert_int_equal(f_pwrite(k.dev, h, "WORLD", 5, 7), 5);
	assert_int_equal(f_lseek(k.dev, h, 0, SEEK_END), 13); /* pwrite left the position alone */
	assert_int_equal(f_lseek(k.dev, h, 0, SEEK_SET), 0);
	assert_int_equal(f_read(k.dev, h, buf, 13), 13);
	assert_memory_equal(buf, "hello, WORLD\n", 13);
	assert_int_equal(f_lseek(k.dev, h, -1, SEEK_SET), -EINVAL);
	assert_int_equal(f_lseek(k.dev, h, 0, 42), -EINVAL);
	assert_int_equal(f_pread(k.dev, h, buf, 5, -1), -EINVAL);

	struct gpusys_stat gs;
	assert_int_equal(f_fstat(k.dev, h, &gs), sizeof(gs));
	assert_int_equal(gs.size, 13);
	assert_true((gs.mode & S_IFMT) == S_IFREG);
	assert_int_equal(gs.ino, st.st_ino);
	assert_int_equal(f_ftruncate(k.dev, h, 5), 0);
	assert_int_equal(f_fstat(k.dev, h, &gs), sizeof(gs));
	assert_int_equal(gs.size, 5);
	assert_int_equal(f_ftruncate(k.dev, h, -1), -EINVAL);
	assert_int_equal(f_close(k.dev, h), 0);

	assert_int_equal(f_stat(k.dev, "a.txt", 0, &gs), sizeof(gs));
	assert_int_equal(gs.size, 5);
	assert_int_equal(symlink("a.txt", "link"), 0);
	assert_int_equal(f_stat(k.dev, "link", 0, &gs), sizeof(gs));
	assert_true((gs.mode & S_IFMT) == S_IFREG);
	assert_int_equal(f_stat(k.dev, "link", AT_SYMLINK_NOFOLLOW, &gs), sizeof(gs));
	assert_true((gs.mode & S_IFMT) == S_IFLNK);
	assert_int_equal(f_unlink(k.dev, "link"), 0);

	/* Absolute paths work too. */
	char abs[256];
	snprintf(abs, sizeof(abs), "%s/a.txt", work);
	assert_int_equal(f_stat(k.dev, abs, 0, &gs), sizeof(gs));

	assert_int_equal(f_rename(k.dev, "a.txt", "b.txt"), 0);
	assert_int_equal(f_stat(k.dev, "a.txt", 0, &gs), -ENOENT);
	assert_int_equal(f_stat(k.dev, "b.txt", 0, &gs), sizeof(gs));
	assert_int_equal(f_unlink(k.dev, "b.txt"), 0);
	assert_int_equal(f_stat(k.dev, "b.txt", 0, &gs), -ENOENT);
	emu_client_detach(&k);
}

static void test_errors(void **state)
{
	(void)state;
	struct emu_client k;
	struct gpusys_stat gs;
	char buf[16];
	assert_int_equal(cl_attach(&k, true, 0), 0);

	assert_int_equal(f_open(k.dev, "missing", O_RDONLY, 0), -ENOENT);
	assert_int_equal(f_open(k.dev, "nodir/x", O_RDONLY | O_CREAT, 0644), -ENOENT);
	assert_int_equal(f_open(k.dev, "", O_RDONLY, 0), -ENOENT);
	int64_t h = f_open(k.dev, "e.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(h > 0);
	assert_int_equal(f_open(k.dev, "e.txt", O_WRONLY | O_CREAT | O_EXCL, 0600), -EEXIST);
	/* Reading a write-only handle, writing a read-only one. */
	assert_int_equal(f_read(k.dev, h, buf, 1), -EBADF);
	assert_int_equal(f_close(k.dev, h), 0);
	h = f_open(k.dev, "e.txt", O_RDONLY, 0);
	assert_int_equal(f_write(k.dev, h, "x", 1), -EBADF);
	assert_int_equal(f_close(k.dev, h), 0);

	assert_int_equal(f_mkdir(k.dev, "d", 0755), 0);
	assert_int_equal(f_mkdir(k.dev, "d", 0755), -EEXIST);
	assert_int_equal(f_open(k.dev, "d", O_WRONLY, 0), -EISDIR);
	h = f_open(k.dev, "d", O_RDONLY, 0);
	assert_true(h > 0);
	assert_int_equal(f_read(k.dev, h, buf, sizeof(buf)), -EISDIR);
	assert_int_equal(f_close(k.dev, h), 0);
	assert_int_equal(f_unlink(k.dev, "d"), -EISDIR);
	assert_int_equal(f_open(k.dev, "e.txt/x", O_RDONLY, 0), -ENOTDIR);
	assert_int_equal(f_opendir(k.dev, "e.txt"), -ENOTDIR);
	assert_int_equal(f_open(k.dev, "e.txt", O_RDONLY | O_DIRECTORY, 0), -ENOTDIR);
	assert_int_equal(f_rmdir(k.dev, "missing"), -ENOENT);
	assert_int_equal(f_rmdir(k.dev, "e.txt"), -ENOTDIR);
	assert_int_equal(f_unlink(k.dev, "missing"), -ENOENT);
	assert_int_equal(f_rename(k.dev, "missing", "x"), -ENOENT);
	assert_int_equal(f_mkdir(k.dev, "d/sub", 0700), 0);
	assert_int_equal(f_rmdir(k.dev, "d"), -ENOTEMPTY);
	assert_int_equal(f_rmdir(k.dev, "d/sub"), 0);
	assert_int_equal(f_rmdir(k.dev, "d"), 0);
	assert_int_equal(f_stat(k.dev, "missing", 0, &gs), -ENOENT);
	assert_int_equal(f_stat(k.dev, "e.txt", 0x4000 /* not a stat flag */, &gs), -EINVAL);

	/* Flags we do not pass on, and a bad access mode. */
	assert_int_equal(f_open(k.dev, "e.txt", O_RDONLY | O_PATH, 0), -EINVAL);
	assert_int_equal(f_open(k.dev, "e.txt", O_ACCMODE, 0), -EINVAL);
	assert_int_equal(f_open(k.dev, "e.txt", O_RDONLY | O_DIRECT, 0), -EINVAL);

	/* Path bounds. */
	char *longp = malloc(GPUSYS_FILE_PATH_MAX + 2);
	memset(longp, 'a', GPUSYS_FILE_PATH_MAX + 1);
	longp[GPUSYS_FILE_PATH_MAX + 1] = 0;
	assert_int_equal(f_open(k.dev, longp, O_RDONLY, 0), -ENAMETOOLONG);
	longp[300] = 0;
	assert_int_equal(f_open(k.dev, longp, O_RDONLY, 0), -ENAMETOOLONG); /* a name over NAME_MAX */
	free(longp);

	/* /proc/self is gpusysd's: refused before any link in it is looked
	 * at (security / test_paths has every shape); a magic link of the
	 * client's own /proc is not followed either. */
	assert_int_equal(f_open(k.dev, "/proc/self/fd/0", O_RDONLY, 0), -EACCES);
	char own[64];
	snprintf(own, sizeof(own), "/proc/%d/fd/0", (int)getpid());
	assert_int_equal(f_open(k.dev, own, O_RDONLY, 0), -ELOOP);

	assert_int_equal(f_unlink(k.dev, "e.txt"), 0);
	emu_client_detach(&k);
}

static void test_handles(void **state)
{
	(void)state;
	struct emu_client a, b;
	char buf[8];
	assert_int_equal(cl_attach(&a, true, 0), 0);
	assert_int_equal(cl_attach(&b, true, 0), 0);
	host_write_file("h.txt", "12345678", 8, 0644);

	/* Invented handles. */
	const int64_t bogus[] = { 0, -1, 3, 1023, 1024, 4096, 12345, INT32_MAX };
	for (size_t i = 0; i < sizeof(bogus) / sizeof(bogus[0]); i++) {
		assert_int_equal(f_read(a.dev, bogus[i], buf, 1), -EBADF);
		assert_int_equal(f_close(a.dev, bogus[i]), -EBADF);
	}
	/* Closed, and the next file in the same slot. */
	int64_t h = f_open(a.dev, "h.txt", O_RDONLY, 0);
	assert_true(h > 0);
	assert_int_equal(f_close(a.dev, h), 0);
	assert_int_equal(f_read(a.dev, h, buf, 1), -EBADF);
	assert_int_equal(f_close(a.dev, h), -EBADF);
	int64_t h2 = f_open(a.dev, "h.txt", O_RDONLY, 0);
	assert_true(h2 > 0 && h2 != h);
	assert_int_equal(f_read(a.dev, h, buf, 1), -EBADF);
	assert_int_equal(f_read(a.dev, h2, buf, 1), 1);

	/* Another client's handle means nothing here. */
	int64_t hb = 0, hb2 = 0;
	for (int i = 0; i < 4; i++) { /* past the slots a uses */
		if (hb2 > 0)
			assert_int_equal(f_close(b.dev, hb2), 0);
		hb2 = f_open(b.dev, "h.txt", O_RDONLY, 0);
		if (!hb)
			hb = f_open(b.dev, "h.txt", O_RDONLY, 0);
	}
	assert_true(hb > 0 && hb2 > 0);
	assert_int_not_equal(hb2, h2);
	assert_int_equal(f_read(a.dev, hb2, buf, 1), -EBADF);
	assert_int_equal(f_close(a.dev, hb2), -EBADF);
	assert_int_equal(f_read(b.dev, hb2, buf, 1), 1);
	assert_int_equal(f_close(b.dev, hb2), 0);

	/* A file handle is no directory handle and the other way round. */
	assert_int_equal(f_closedir(a.dev, h2), -EBADF);
	int64_t dh = f_opendir(a.dev, ".");
	assert_true(dh > 0);
	assert_int_equal(f_read(a.dev, dh, buf, 1), -EBADF);
	assert_int_equal(f_close(a.dev, dh), -EBADF);
	assert_int_equal(f_closedir(a.dev, dh), 0);

	/* stdout and stderr: only when passed (they were not). */
	assert_int_equal(f_write(a.dev, GPUSYS_FILE_STDOUT, "x", 1), -EBADF);
	assert_int_equal(f_read(a.dev, GPUSYS_FILE_STDOUT, buf, 1), -EBADF);

	/* The per-client bound: max_handles_per_client (1500 here, past the
	 * old fixed 1024, so the table grows by chunks), then EMFILE. */
	int64_t *many = malloc(TEST_MAX_HANDLES * sizeof(*many));
	unsigned n = 0;
	for (; n < TEST_MAX_HANDLES; n++) {
		many[n] = f_open(a.dev, "h.txt", O_RDONLY, 0);
		if (many[n] < 0)
			break;
	}
	assert_int_equal(n, TEST_MAX_HANDLES - 1); /* h2 holds one */
	assert_int_equal(many[n], -EMFILE);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(f_close(a.dev, many[i]), 0);
	free(many);
	assert_int_equal(f_close(a.dev, h2), 0);
	assert_int_equal(f_close(b.dev, hb), 0);
	emu_client_detach(&a);
	emu_client_detach(&b);
	unlink("h.txt");
}

static void test_readdir(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);
	assert_int_equal(mkdir("rd", 0755), 0);
	host_write_file("rd/one", "1", 1, 0644);
	host_write_file("rd/two", "2", 1, 0644);
	assert_int_equal(mkdir("rd/sub", 0755), 0);

	int64_t dh = f_opendir(k.dev, "rd");
	assert_true(dh > 0);
	unsigned seen = 0, count = 0;
	struct gpusys_dirent e;
	int64_t r;
	while ((r = f_readdir(k.dev, dh, &e)) == 1) {
		count++;
		assert_int_equal(strlen(e.name), e.namelen);
		if (!strcmp(e.name, "one") && e.type == DT_REG)
			seen |= 1;
		else if (!strcmp(e.name, "two") && e.type == DT_REG)
			seen |= 2;
		else if (!strcmp(e.name, "sub") && e.type == DT_DIR)
			seen |= 4;
		else if (!strcmp(e.name, ".") || !strcmp(e.name, ".."))
			seen |= 8;
		else
			fail_msg("unexpected entry %s", e.name);
	}
	assert_int_equal(r, 0);
	assert_int_equal(count, 5);
	assert_int_equal(seen, 15);
	assert_int_equal(f_readdir(k.dev, dh, &e), 0); /* stays at the end */
	assert_int_equal(f_closedir(k.dev, dh), 0);
	assert_int_equal(f_readdir(k.dev, dh, &e), -EBADF);
	assert_int_equal(f_closedir(k.dev, dh), -EBADF);
	assert_int_equal(f_opendir(k.dev, "rd/missing"), -ENOENT);
	assert_int_equal(system("rm -rf rd"), 0);
	emu_client_detach(&k);
}

/* READFILE: a whole file in one call, and each way it refuses. */
static void test_readfile(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);
	static uint8_t want[200000], got[200001];
	fill(want, sizeof(want), 7);
	const uint32_t sizes[] = { 0, 1, 6, 4096, 65536, 200000 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		host_write_file("rf", want, sizes[i], 0644);
		memset(got, 0xa5, sizeof(got));
		assert_int_equal(f_readfile(k.dev, "rf", got, sizes[i]), sizes[i]); /* exactly its size */
		assert_memory_equal(got, want, sizes[i]);
		assert_int_equal(got[sizes[i]], 0xa5); /* nothing past it */
		assert_int_equal(f_readfile(k.dev, "rf", got, sizes[i] + 1), sizes[i]);
		if (sizes[i])
			assert_int_equal(f_readfile(k.dev, "rf", got, sizes[i] - 1), -EFBIG);
	}
	/* A file whose size says 0 and that holds bytes (procfs) is read to
	 * its end. */
	assert_int_equal(f_readfile(k.dev, "/proc/version", got, 0), -EFBIG);
	int64_t n = f_readfile(k.dev, "/proc/version", got, sizeof(got) - 1);
	assert_true(n > 10);
	got[n] = 0;
	assert_non_null(strstr((char *)got, "Linux"));
	/* What is not a regular file is not read. */
	assert_int_equal(mkdir("rfdir", 0755), 0);
	assert_int_equal(f_readfile(k.dev, "rfdir", got, 100), -EISDIR);
	assert_int_equal(mkfifo("rffifo", 0666), 0);
	assert_int_equal(f_readfile(k.dev, "rffifo", got, 100), -EINVAL); /* no writer: must not wait */
	assert_int_equal(f_readfile(k.dev, "/dev/null", got, 100), -EINVAL);
	assert_int_equal(f_readfile(k.dev, "missing", got, 100), -ENOENT);
	assert_int_equal(f_readfile(k.dev, "", got, 100), -ENOENT);
	/* Through a symlink, as open follows it. */
	host_write_file("rf", "linked", 6, 0644);
	assert_int_equal(symlink("rf", "rflink"), 0);
	assert_int_equal(f_readfile(k.dev, "rflink", got, 100), 6);
	assert_memory_equal(got, "linked", 6);
	/* Every lane its own file, in one call. */
	char names[L][16];
	const char *p[L];
	void *b[L];
	uint32_t c[L];
	int64_t r[L];
	static uint8_t bufs[L][64];
	for (uint32_t l = 0; l < L; l++) {
		snprintf(names[l], sizeof(names[l]), "rf%u", l);
		host_write_file(names[l], want + l, l, 0644);
		p[l] = names[l];
		b[l] = bufs[l];
		c[l] = l % 3 == 2 ? l - 1 : 64; /* every third lane's file is too large for its room */
	}
	gpusys_emu_file_readfile(k.dev, ~0u, p, b, c, r);
	for (uint32_t l = 0; l < L; l++) {
		if (l % 3 == 2 && l > 0) {
			assert_int_equal(r[l], -EFBIG);
			continue;
		}
		assert_int_equal(r[l], l);
		assert_memory_equal(bufs[l], want + l, l);
	}
	/* It left nothing open: the handle table is as before. */
	int64_t h = f_open(k.dev, "rf", O_RDONLY, 0);
	assert_true(h > 2);
	assert_int_equal(f_close(k.dev, h), 0);
	assert_int_equal(system("rm -rf rf rf[0-9]* rflink rfdir rffifo"), 0);
	emu_client_detach(&k);
}

/* Calls the daemon's workers have run (status "default_workers"), once
 * the count has stopped moving (a worker counts a call after answering). */
static long long workers_ran(void)
{
	long long last = -1;
	for (int i = 0; i < 50; i++) {
		json_t *st = daemon_status(daemon_.runtime), *v;
		assert_non_null(st);
		json_t *ran = json_object_get(json_object_get(st, "default_workers"), "ran");
		assert_true(json_is_array(ran));
		size_t j;
		long long n = 0;
		json_array_foreach(ran, j, v) n += json_integer_value(v);
		json_decref(st);
		if (n == last)
			return n;
		last = n;
		usleep(20000);
	}
	return last;
}

/* Whether this host reads path without waiting as a poller would: every
 * component in the lookup cache (openat2 RESOLVE_CACHED, Linux 5.12) and a
 * read the page cache holds (preadv2 RWF_NOWAIT, which the file system must
 * support). */
static bool host_reads_nowait(const char *path)
{
	struct {
		uint64_t flags, mode, resolve;
	} how = { O_RDONLY | O_CLOEXEC, 0, 0x20 /* RESOLVE_CACHED */ | 0x02 | 0x04 };
	int fd = (int)syscall(437 /* openat2 */, AT_FDCWD, path, &how, sizeof(how));
	if (fd < 0)
		return false;
	char b;
	struct iovec iov = { &b, 1 };
	ssize_t n = preadv2(fd, &iov, 1, 0, RWF_NOWAIT);
	close(fd);
	return n == 1;
}

/* pread and readfile of what the caches hold are served on the poller
 * (SERVICE_OP_TRY_POLLER), without a worker; a lane that would wait
 * (here: a symlink to follow, a procfs file) and the lanes after it go
 * on on a worker, and the call's one answer holds every lane's. */
static void test_reads_on_poller(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);
	static uint8_t want[8192], got[8192], bufs[L][8192];
	fill(want, sizeof(want), 11);
	host_write_file("warm", want, sizeof(want), 0644);
	assert_int_equal(symlink("warm", "warmlink"), 0);
	int64_t h = f_open(k.dev, "warm", O_RDONLY, 0);
	assert_true(h > 2);
	assert_int_equal(f_readfile(k.dev, "warm", got, sizeof(got)), sizeof(got)); /* warm the caches */
	bool fast = host_reads_nowait("warm");
	if (!fast)
		printf("this host cannot read %s/warm without waiting: every read goes to a worker\n", work);

	/* Lane 10 names a symlink: the lanes before it are answered on the
	 * poller (where the host can), lane 10 on goes to a worker, once. */
	const char *p[L];
	void *b[L];
	uint32_t c[L];
	int64_t ret[L];
	for (uint32_t l = 0; l < L; l++) {
		p[l] = l == 10 ? "warmlink" : l == 20 ? "missing" : "warm";
		b[l] = bufs[l];
		c[l] = sizeof(bufs[l]);
	}
	memset(bufs, 0, sizeof(bufs));
	long long r0 = workers_ran();
	gpusys_emu_file_readfile(k.dev, ~0u, p, b, c, ret);
	for (uint32_t l = 0; l < L; l++) {
		if (l == 20) {
			assert_int_equal(ret[l], -ENOENT);
			continue;
		}
		assert_int_equal(ret[l], sizeof(want));
		assert_memory_equal(bufs[l], want, sizeof(want));
	}
	assert_int_equal(workers_ran() - r0, 1);

	/* The same for pread: lane 7 reads a procfs file (no RWF_NOWAIT
	 * there), the others the cached file. */
	int64_t ph = f_open(k.dev, "/proc/version", O_RDONLY, 0);
	assert_true(ph > 2);
	char version[256] = { 0 };
	int vfd = open("/proc/version", O_RDONLY);
	assert_true(read(vfd, version, 100) == 100);
	close(vfd);
	int32_t hv[L];
	int64_t off[L];
	for (uint32_t l = 0; l < L; l++) {
		hv[l] = (int32_t)(l == 7 ? ph : h);
		off[l] = l == 7 ? 0 : (int64_t)l * 200;
		c[l] = 100;
	}
	memset(bufs, 0, sizeof(bufs));
	r0 = workers_ran();
	gpusys_emu_file_pread(k.dev, ~0u, hv, b, c, off, ret);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(ret[l], 100);
		assert_memory_equal(bufs[l], l == 7 ? (const uint8_t *)version : want + l * 200, 100);
	}
	long long ran = workers_ran() - r0;
	assert_true(ran <= 1);
	assert_int_equal(f_close(k.dev, ph), 0);

	/* A poller reads at most 256 KiB of a call: 32 lanes with 64 KiB
	 * of room each reading the 8 KiB file stay there (what they read
	 * counts, not their room); 32 lanes reading 16 KiB each of a larger
	 * file go on on a worker after 256 KiB. */
	static uint8_t big[32 * 16384], bigbufs[L][16384];
	fill(big, sizeof(big), 12);
	host_write_file("big", big, sizeof(big), 0644);
	int64_t bh = f_open(k.dev, "big", O_RDONLY, 0);
	assert_true(bh > 2);
	void *bb[L];
	for (uint32_t l = 0; l < L; l++) {
		p[l] = "warm";
		b[l] = bufs[l];
		c[l] = 65536; /* room, more than the file */
		bb[l] = bigbufs[l];
		hv[l] = (int32_t)bh;
		off[l] = (int64_t)l * 16384;
	}
	static uint8_t roomy[L][65536];
	for (uint32_t l = 0; l < L; l++)
		b[l] = roomy[l];
	r0 = workers_ran();
	gpusys_emu_file_readfile(k.dev, ~0u, p, b, c, ret);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(ret[l], sizeof(want));
		assert_memory_equal(roomy[l], want, sizeof(want));
	}
	ran = workers_ran() - r0;
	if (fast)
		assert_int_equal(ran, 0);
	for (uint32_t l = 0; l < L; l++)
		c[l] = 16384;
	r0 = workers_ran();
	gpusys_emu_file_pread(k.dev, ~0u, hv, bb, c, off, ret);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(ret[l], 16384);
		assert_memory_equal(bigbufs[l], big + l * 16384, 16384);
	}
	assert_int_equal(workers_ran() - r0, 1); /* from lane 16 on (the whole call where the host cannot) */
	assert_int_equal(f_close(k.dev, bh), 0);
	unlink("big");

	/* Cached reads, one lane each: none needs a worker where the host
	 * reads without waiting. A short read at the end is the end. */
	r0 = workers_ran();
	for (int i = 0; i < 100; i++) {
		assert_int_equal(f_readfile(k.dev, "warm", got, sizeof(got)), sizeof(got));
		assert_memory_equal(got, want, sizeof(want));
		assert_int_equal(f_pread(k.dev, h, got, 4096, i * 40), 4096);
		assert_memory_equal(got, want + i * 40, 4096);
	}
	assert_int_equal(f_pread(k.dev, h, got, 4096, 8000), 192);
	assert_memory_equal(got, want + 8000, 192);
	assert_int_equal(f_pread(k.dev, h, got, 4096, 8192), 0);
	ran = workers_ran() - r0;
	printf("202 cached reads: %lld ran on a worker\n", ran);
	if (fast)
		assert_true(ran <= 2); /* page cache misses are not ours to rule out entirely */
	else
		assert_int_equal(ran, 202);
	assert_int_equal(f_close(k.dev, h), 0);
	unlink("warm");
	unlink("warmlink");
	emu_client_detach(&k);
}

/* 32 lanes at once: each its own file, then all reading one file in lane
 * order (one handle: consecutive parts, as sequential reads would). */
static void test_lanes(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);
	char names[L][32], data[L][200];
	const char *paths[L];
	int flags[L];
	uint32_t mode[L], cnt[L];
	int32_t hs[L];
	int64_t r[L];
	const void *wb[L];
	void *rb[L];
	const uint64_t all = 0xffffffffull;

	for (unsigned l = 0; l < L; l++) {
		snprintf(names[l], sizeof(names[l]), "lane%02u.txt", l);
		paths[l] = names[l];
		flags[l] = O_RDWR | O_CREAT | O_TRUNC;
		mode[l] = 0644;
		memset(data[l], 'A' + l % 26, sizeof(data[l]));
		wb[l] = data[l];
		cnt[l] = 10 + l * 5; /* some beyond the inline slot */
	}
	assert_int_equal(gpusys_emu_file_open(k.dev, all, paths, flags, mode, r), 0);
	for (unsigned l = 0; l < L; l++)
		hs[l] = (int32_t)r[l];
	assert_int_equal(gpusys_emu_file_write(k.dev, all, hs, wb, cnt, r), 0);
	for (unsigned l = 0; l < L; l++)
		assert_int_equal(r[l], cnt[l]);
	assert_int_equal(gpusys_emu_file_close(k.dev, all, hs, r), 0);
	for (unsigned l = 0; l < L; l++) {
		struct stat st;
		assert_int_equal(stat(names[l], &st), 0);
		assert_int_equal(st.st_size, cnt[l]);
	}

	/* Odd lanes only, on one shared handle. */
	char seq[4096];
	for (unsigned i = 0; i < sizeof(seq); i++)
		seq[i] = (char)('a' + i % 26);
	host_write_file("seq.txt", seq, sizeof(seq), 0644);
	int64_t h = f_open(k.dev, "seq.txt", O_RDONLY, 0);
	char out[L][100];
	for (unsigned l = 0; l < L; l++) {
		hs[l] = (int32_t)h;
		rb[l] = out[l];
		cnt[l] = 100;
	}
	const uint64_t odd = 0xaaaaaaaaull;
	assert_int_equal(gpusys_emu_file_read(k.dev, odd, hs, rb, cnt, r), 0);
	unsigned at = 0;
	for (unsigned l = 1; l < L; l += 2) {
		assert_int_equal(r[l], 100);
		assert_memory_equal(out[l], seq + at, 100);
		at += 100;
	}
	assert_int_equal(f_close(k.dev, h), 0);
	for (unsigned l = 0; l < L; l++)
		unlink(names[l]);
	unlink("seq.txt");
	emu_client_detach(&k);
}

static void test_no_cwd(void **state)
{
	(void)state;
	struct emu_client k;
	struct gpusys_stat gs;
	char abs[256];
	assert_int_equal(cl_attach(&k, false, 0), 0);
	host_write_file("nc.txt", "x", 1, 0644);
	assert_int_equal(f_open(k.dev, "nc.txt", O_RDONLY, 0), -EINVAL);
	assert_int_equal(f_stat(k.dev, "nc.txt", 0, &gs), -EINVAL);
	assert_int_equal(f_unlink(k.dev, "nc.txt"), -EINVAL);
	snprintf(abs, sizeof(abs), "%s/nc.txt", work);
	int64_t h = f_open(k.dev, abs, O_RDONLY, 0);
	assert_true(h > 0);
	assert_int_equal(f_close(k.dev, h), 0);
	unlink("nc.txt");
	emu_client_detach(&k);
}

/* A large file through the bulk area, both directions, checked by
 * checksum and byte for byte. */
static void test_big_file(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 64u << 20), 0);
	assert_true(k.dev->bulk_slots > 0);
	uint8_t *src = malloc(BIG_BYTES), *dst = malloc(BIG_BYTES);
	assert_non_null(src);
	assert_non_null(dst);
	fill(src, BIG_BYTES, 42);
	host_write_file("big.bin", src, BIG_BYTES, 0644);
	uint64_t want = checksum(src, BIG_BYTES);

	int64_t h = f_open(k.dev, "big.bin", O_RDONLY, 0);
	assert_true(h > 0);
	memset(dst, 0, BIG_BYTES);
	long t0 = now_ms();
	assert_int_equal(gpusys_emu_read_block(k.dev, (int32_t)h, dst, BIG_BYTES), (int64_t)BIG_BYTES);
	long t1 = now_ms();
	assert_int_equal(checksum(dst, BIG_BYTES), want);
	assert_memory_equal(dst, src, BIG_BYTES);
	print_message("read %llu MiB through the bulk area in %ld ms\n", (unsigned long long)(BIG_BYTES >> 20), t1 - t0);
	/* The position moved; another read is at the end. */
	assert_int_equal(gpusys_emu_read_block(k.dev, (int32_t)h, dst, 10), 0);
	/* pread at an odd offset, across the end. */
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, 5000, BIG_BYTES - 1234), 1234);
	assert_memory_equal(dst, src + BIG_BYTES - 1234, 1234);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, 3u << 20, 12345), 3u << 20);
	assert_memory_equal(dst, src + 12345, 3u << 20);
	assert_int_equal(f_close(k.dev, h), 0);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, 10, 0), -EBADF);

	h = f_open(k.dev, "copy.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(h > 0);
	t0 = now_ms();
	assert_int_equal(gpusys_emu_write_block(k.dev, (int32_t)h, src, BIG_BYTES), (int64_t)BIG_BYTES);
	t1 = now_ms();
	print_message("wrote %llu MiB through the bulk area in %ld ms\n", (unsigned long long)(BIG_BYTES >> 20),
		      t1 - t0);
	assert_int_equal(f_lseek(k.dev, h, 0, SEEK_CUR), (int64_t)BIG_BYTES);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, 10, 0), -EBADF); /* write-only */
	assert_int_equal(f_close(k.dev, h), 0);
	int fd = open("copy.bin", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	memset(dst, 0, BIG_BYTES);
	uint64_t got = 0;
	while (got < BIG_BYTES) {
		ssize_t n = read(fd, dst + got, BIG_BYTES - got);
		assert_true(n > 0);
		got += (uint64_t)n;
	}
	close(fd);
	assert_int_equal(checksum(dst, BIG_BYTES), want);
	unlink("big.bin");
	unlink("copy.bin");
	free(src);
	free(dst);
	emu_client_detach(&k);
}

/* Large writes go through a shared mapping of the file (util/parallel_io.c):
 * past the end with a gap, in the middle, while another process truncates
 * the file again and again (the daemon survives and the writes land), and on
 * a full file system where one can be mounted (an error, never a crash). */
static uint64_t file_size(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

static void read_file(const char *path, uint8_t *dst, uint64_t n, uint64_t off)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (uint64_t got = 0; got < n;) {
		ssize_t r = pread(fd, dst + got, n - got, (off_t)(off + got));
		assert_true(r > 0);
		got += (uint64_t)r;
	}
	close(fd);
}

struct truncator {
	const char *path;
	atomic_int stop;
	unsigned rounds;
};

static void *truncator_main(void *arg)
{
	struct truncator *t = arg;
	while (!atomic_load(&t->stop)) {
		if (truncate(t->path, (t->rounds & 1) ? 0 : 1 << 20) == 0)
			t->rounds++;
		usleep(200);
	}
	return NULL;
}


static void test_bulk_write_mapped(void **state)
{
	(void)state;
	enum { MIB = 1 << 20 };
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 64u << 20), 0);
	const uint64_t n = 5 * MIB + 123, off = 3 * MIB + 7;
	uint8_t *src = malloc(16 * MIB), *dst = malloc(16 * MIB);
	assert_non_null(src);
	assert_non_null(dst);
	fill(src, 16 * MIB, 7);

	/* Past the end of a 1 MiB file, at an odd offset: the gap reads as
	 * zeros, the size is exactly the end of the write. */
	host_write_file("mapped.bin", src, MIB, 0644);
	int64_t h = f_open(k.dev, "mapped.bin", O_WRONLY, 0);
	assert_true(h > 0);
	assert_int_equal(gpusys_emu_pwrite_block(k.dev, (int32_t)h, src + MIB, n, (int64_t)off), (int64_t)n);
	assert_int_equal(file_size("mapped.bin"), off + n);
	read_file("mapped.bin", dst, off + n, 0);
	assert_memory_equal(dst, src, MIB);
	for (uint64_t i = MIB; i < off; i++)
		assert_int_equal(dst[i], 0);
	assert_memory_equal(dst + off, src + MIB, n);

	/* In the middle: the size stays. */
	assert_int_equal(gpusys_emu_pwrite_block(k.dev, (int32_t)h, src + 2 * MIB, 4 * MIB, MIB + 1), 4 * MIB);
	assert_int_equal(file_size("mapped.bin"), off + n);
	read_file("mapped.bin", dst, 4 * MIB, MIB + 1);
	assert_memory_equal(dst, src + 2 * MIB, 4 * MIB);

	/* Truncated again and again while 12 MiB writes run: each write is
	 * whole (a chunk cut off by a truncation is written with pwrite
	 * instead), nothing crashes. */
	struct truncator t = { .path = "mapped.bin" };
	pthread_t tid;
	assert_int_equal(pthread_create(&tid, NULL, truncator_main, &t), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(gpusys_emu_pwrite_block(k.dev, (int32_t)h, src, 12 * MIB, 0), 12 * MIB);
	atomic_store(&t.stop, 1);
	pthread_join(tid, NULL);
	print_message("20 writes of 12 MiB while the file was truncated %u times\n", t.rounds);
	assert_true(t.rounds > 0);
	assert_int_equal(gpusys_emu_pwrite_block(k.dev, (int32_t)h, src, 12 * MIB, 0), 12 * MIB);
	read_file("mapped.bin", dst, 12 * MIB, 0);
	assert_memory_equal(dst, src, 12 * MIB);
	assert_int_equal(f_close(k.dev, h), 0);
	unlink("mapped.bin");

	/* A full file system: 3 MiB of tmpfs, an 8 MiB write. */
	char mnt[] = "/tmp/gpusys-full.XXXXXX";
	assert_non_null(mkdtemp(mnt));
	if (mount("gpusys-test", mnt, "tmpfs", 0, "size=3m") == 0) {
		char path[64];
		snprintf(path, sizeof(path), "%s/full.bin", mnt);
		h = f_open(k.dev, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		assert_true(h > 0);
		int64_t r = gpusys_emu_pwrite_block(k.dev, (int32_t)h, src, 8 * MIB, 0);
		print_message("8 MiB into 3 MiB of tmpfs: %lld\n", (long long)r);
		assert_true(r == -ENOSPC || (r >= 0 && r < 8 * MIB));
		assert_int_equal(f_close(k.dev, h), 0);
		/* The daemon is still there. */
		assert_int_equal(gpusys_emu_noop(k.dev, 1), 0);
		umount(mnt);
	} else {
		print_message("no tmpfs mount here (%s): full file system case not run\n", strerror(errno));
	}
	rmdir(mnt);

	/* A file its user may write but not read (0200): no read-write
	 * descriptor for a mapping as that user, so write(2), and the bytes
	 * land all the same. */
	if (geteuid() == 0) {
		host_write_file("wonly.bin", "", 0, 0200);
		assert_int_equal(chown("wonly.bin", 65534, 65534), 0);
		pid_t p = fork();
		if (p == 0) {
			struct emu_client u;
			if (become(65534, 0) < 0 || cl_attach(&u, true, 64u << 20) < 0)
				_exit(10);
			int64_t hw = f_open(u.dev, "wonly.bin", O_WRONLY, 0);
			if (hw < 0)
				_exit(11);
			if (gpusys_emu_pwrite_block(u.dev, (int32_t)hw, src, 8 * MIB, 0) != 8 * MIB)
				_exit(12);
			_exit(f_close(u.dev, hw) == 0 ? 0 : 13);
		}
		int ws;
		assert_int_equal(waitpid(p, &ws, 0), p);
		assert_true(WIFEXITED(ws));
		assert_int_equal(WEXITSTATUS(ws), 0);
		read_file("wonly.bin", dst, 8 * MIB, 0);
		assert_memory_equal(dst, src, 8 * MIB);
		unlink("wonly.bin");
	}
	free(src);
	free(dst);
	emu_client_detach(&k);
}

/* Emulated blocks at once, more than there are slots: each its own range,
 * reading and writing, every byte checked. */
struct range_arg {
	const gpusys_dev_t *dev;
	int32_t in, out;
	const uint8_t *src;
	uint64_t off, len;
	unsigned warp;
	int ok;
};

static void *range_main(void *arg)
{
	struct range_arg *a = arg;
	uint8_t *buf = malloc(a->len);
	gpusys_emu_set_warp(a->warp);
	a->ok = buf && gpusys_emu_pread_block(a->dev, a->in, buf, a->len, (int64_t)a->off) == (int64_t)a->len &&
		memcmp(buf, a->src + a->off, a->len) == 0 &&
		gpusys_emu_pwrite_block(a->dev, a->out, buf, a->len, (int64_t)a->off) == (int64_t)a->len;
	free(buf);
	return NULL;
}

static void test_concurrent_blocks(void **state)
{
	(void)state;
	enum { BLOCKS = 8 };
	const uint64_t per = (5u << 20) + 4097, total = per * BLOCKS;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 32u << 20), 0); /* 2 slots */
	assert_int_equal(k.dev->bulk_slots, 2);
	uint8_t *src = malloc(total);
	fill(src, total, 99);
	host_write_file("cb.in", src, total, 0644);
	int64_t in = f_open(k.dev, "cb.in", O_RDONLY, 0), out = f_open(k.dev, "cb.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(in > 0 && out > 0);
	struct range_arg a[BLOCKS];
	pthread_t t[BLOCKS];
	for (unsigned b = 0; b < BLOCKS; b++) {
		a[b] = (struct range_arg){ k.dev, (int32_t)in, (int32_t)out, src, per * b, per, b, 0 };
		pthread_create(&t[b], NULL, range_main, &a[b]);
	}
	for (unsigned b = 0; b < BLOCKS; b++) {
		pthread_join(t[b], NULL);
		assert_true(a[b].ok);
	}
	assert_int_equal(f_close(k.dev, in), 0);
	assert_int_equal(f_close(k.dev, out), 0);
	uint8_t *back = malloc(total);
	int fd = open("cb.out", O_RDONLY | O_CLOEXEC);
	assert_int_equal(read(fd, back, total), (ssize_t)total);
	close(fd);
	assert_memory_equal(back, src, total);
	unlink("cb.in");
	unlink("cb.out");
	free(src);
	free(back);
	emu_client_detach(&k);
}

/* The client divides its bulk area (GPUSYS_BULK_SLOT_BYTES, read at open):
 * 32 MiB slots make two of a 64 MiB area, and block calls through them move
 * the right bytes, from more threads than slots and in one call longer
 * than a slot; a wish below the default gives the default, one above the
 * area one slot of the whole area; no wish, 32 MiB slots where two fit. */
static void test_larger_slots(void **state)
{
	(void)state;
	struct emu_client k;
	setenv("GPUSYS_BULK_SLOT_BYTES", "33554432", 1);
	int rc = cl_attach(&k, true, 64u << 20);
	unsetenv("GPUSYS_BULK_SLOT_BYTES");
	assert_int_equal(rc, 0);
	assert_int_equal(k.dev->bulk_slots, 2);
	assert_int_equal(k.dev->bulk_slot_bytes, 32u << 20);
	enum { BLOCKS = 4 };
	const uint64_t per = (9u << 20) + 333, total = per * BLOCKS;
	uint8_t *src = malloc(total), *dst = malloc(total);
	assert_non_null(src);
	assert_non_null(dst);
	fill(src, total, 77);
	host_write_file("ls.in", src, total, 0644);
	int64_t in = f_open(k.dev, "ls.in", O_RDONLY, 0), out = f_open(k.dev, "ls.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(in > 0 && out > 0);
	struct range_arg a[BLOCKS];
	pthread_t t[BLOCKS];
	for (unsigned b = 0; b < BLOCKS; b++) {
		a[b] = (struct range_arg){ k.dev, (int32_t)in, (int32_t)out, src, per * b, per, b, 0 };
		pthread_create(&t[b], NULL, range_main, &a[b]);
	}
	for (unsigned b = 0; b < BLOCKS; b++) {
		pthread_join(t[b], NULL);
		assert_true(a[b].ok);
	}
	/* one call across two slots' worth */
	memset(dst, 0, total);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)in, dst, total - 7, 7), (int64_t)(total - 7));
	assert_memory_equal(dst, src + 7, total - 7);
	assert_int_equal(f_close(k.dev, in), 0);
	assert_int_equal(f_close(k.dev, out), 0);
	int fd = open("ls.out", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	memset(dst, 0, total);
	uint64_t got = 0;
	while (got < total) {
		ssize_t n = read(fd, dst + got, total - got);
		assert_true(n > 0);
		got += (uint64_t)n;
	}
	close(fd);
	assert_memory_equal(dst, src, total);
	unlink("ls.in");
	unlink("ls.out");
	free(src);
	free(dst);
	emu_client_detach(&k);

	setenv("GPUSYS_BULK_SLOT_BYTES", "1048576", 1); /* below the default */
	rc = cl_attach(&k, true, 64u << 20);
	assert_int_equal(rc, 0);
	assert_int_equal(k.dev->bulk_slots, 4);
	assert_int_equal(k.dev->bulk_slot_bytes, 16u << 20);
	emu_client_detach(&k);
	setenv("GPUSYS_BULK_SLOT_BYTES", "1073741824", 1); /* above the area */
	rc = cl_attach(&k, true, 64u << 20);
	unsetenv("GPUSYS_BULK_SLOT_BYTES");
	assert_int_equal(rc, 0);
	assert_int_equal(k.dev->bulk_slots, 1);
	assert_int_equal(k.dev->bulk_slot_bytes, 64u << 20);
	emu_client_detach(&k);
	/* No wish: 32 MiB slots where the area holds two, else 16 MiB. */
	rc = cl_attach(&k, true, 64u << 20);
	assert_int_equal(rc, 0);
	assert_int_equal(k.dev->bulk_slots, 2);
	assert_int_equal(k.dev->bulk_slot_bytes, 32u << 20);
	emu_client_detach(&k);
	rc = cl_attach(&k, true, (64u << 20) - 4096);
	assert_int_equal(rc, 0);
	assert_int_equal(k.dev->bulk_slots, 3);
	assert_int_equal(k.dev->bulk_slot_bytes, 16u << 20);
	emu_client_detach(&k);
}

/* Without a bulk area the block calls go through packets (slowly). */
static void test_block_without_bulk(void **state)
{
	(void)state;
	struct emu_client k;
	assert_int_equal(cl_attach(&k, true, 0), 0);
	assert_int_equal(k.dev->bulk_slots, 0);
	const uint64_t n = (3u << 20) + 77;
	uint8_t *src = malloc(n), *dst = malloc(n);
	fill(src, n, 7);
	host_write_file("nb.bin", src, n, 0644);
	int64_t h = f_open(k.dev, "nb.bin", O_RDWR, 0);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, n + 100, 0), (int64_t)n);
	assert_memory_equal(dst, src, n);
	fill(src, n, 8);
	assert_int_equal(gpusys_emu_pwrite_block(k.dev, (int32_t)h, src, n, 0), (int64_t)n);
	assert_int_equal(gpusys_emu_pread_block(k.dev, (int32_t)h, dst, n, 0), (int64_t)n);
	assert_memory_equal(dst, src, n);
	assert_int_equal(f_close(k.dev, h), 0);
	unlink("nb.bin");
	free(src);
	free(dst);
	emu_client_detach(&k);
}

/* ------------------------------------------------------- two users */

static void test_two_users(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		skip(); /* needs root to run clients as two users */
		return;
	}
	/* User 65534 makes a private file. */
	pid_t p = fork();
	if (p == 0) {
		struct emu_client k;
		if (become(65534, 0) < 0 || cl_attach(&k, true, 0) < 0)
			_exit(10);
		int64_t h = f_open(k.dev, "secret", O_WRONLY | O_CREAT | O_EXCL, 0600);
		if (h < 0)
			_exit(11);
		if (f_write(k.dev, h, "mine", 4) != 4 || f_close(k.dev, h) != 0)
			_exit(12);
		emu_client_detach(&k);
		_exit(0);
	}
	int ws;
	assert_int_equal(waitpid(p, &ws, 0), p);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	struct stat st;
	assert_int_equal(stat("secret", &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_gid, 65534);
	assert_int_equal(st.st_mode & 0777, 0600);

	/* User 65533 cannot open it, nor make files where it may not. */
	p = fork();
	if (p == 0) {
		struct emu_client k;
		struct gpusys_stat gs;
		if (become(65533, 0) < 0 || cl_attach(&k, true, 0) < 0)
			_exit(10);
		if (f_open(k.dev, "secret", O_RDONLY, 0) != -EACCES)
			_exit(11);
		if (f_open(k.dev, "secret", O_WRONLY | O_TRUNC, 0) != -EACCES)
			_exit(12);
		if (f_stat(k.dev, "secret", 0, &gs) != sizeof(gs) || gs.uid != 65534)
			_exit(13); /* stat needs only the directory */
		if (f_open(k.dev, "/root/.gpusys-nope", O_WRONLY | O_CREAT, 0600) != -EACCES)
			_exit(14);
		if (f_mkdir(k.dev, "/etc/gpusys-nope", 0700) != -EACCES)
			_exit(15);
		if (f_open(k.dev, "/etc/shadow", O_RDONLY, 0) != -EACCES)
			_exit(16);
		char rb[64];
		if (f_readfile(k.dev, "secret", rb, sizeof(rb)) != -EACCES)
			_exit(18); /* READFILE opens as the client too */
		/* Its own file is fine, and owned by it. */
		int64_t h = f_open(k.dev, "theirs", O_WRONLY | O_CREAT, 0600);
		if (h < 0 || f_close(k.dev, h) != 0)
			_exit(17);
		emu_client_detach(&k);
		_exit(0);
	}
	assert_int_equal(waitpid(p, &ws, 0), p);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	assert_int_equal(stat("theirs", &st), 0);
	assert_int_equal(st.st_uid, 65533);

	/* And the owner still can (the daemon's threads went back to root
	 * between requests: root reads it too). */
	struct emu_client k;
	char buf[8];
	assert_int_equal(cl_attach(&k, true, 0), 0);
	int64_t h = f_open(k.dev, "secret", O_RDONLY, 0);
	assert_true(h > 0);
	assert_int_equal(f_read(k.dev, h, buf, 8), 4);
	assert_int_equal(f_close(k.dev, h), 0);
	emu_client_detach(&k);
	unlink("secret");
	unlink("theirs");
}

/* A daemon that is not root serves files to its own user only, and as
 * itself: the per-user daemon. */
static void test_per_user_daemon(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		skip(); /* needs root to run the daemon and a client as two users */
		return;
	}
	const char *bin = test_env("GPUSYSD_BIN");
	char dir[] = "/tmp/gpusys-peruser-XXXXXX", run[64], conf[64], sock[96];
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chown(dir, 65534, 65534), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	snprintf(run, sizeof(run), "%s/run", dir);
	snprintf(conf, sizeof(conf), "%s/gpusysd.conf", dir);
	snprintf(sock, sizeof(sock), "%s/%s", run, GPUSYS_SOCKET_NAME);
	host_write_file(conf, "", 0, 0644);
	assert_int_equal(chown(conf, 65534, 65534), 0);

	pid_t d = fork();
	if (d == 0) {
		char logp[96];
		snprintf(logp, sizeof(logp), "%s/gpusysd.log", dir);
		int lfd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(lfd, 1);
		dup2(lfd, 2);
		if (become(65534, 0) < 0)
			_exit(126);
		execl(bin, bin, "--runtime-dir", run, "--config", conf, (char *)NULL);
		_exit(127);
	}
	struct stat st;
	long t0 = now_ms();
	while (stat(sock, &st) != 0 && now_ms() - t0 < 5000)
		usleep(5000);
	assert_int_equal(stat(sock, &st), 0);

	/* Root is another user to this daemon. */
	struct emu_client k;
	struct gpusys_stat gs;
	assert_int_equal(cl_attach_at(&k, run, true, 0), 0);
	host_write_file("pu.txt", "x", 1, 0644);
	assert_int_equal(f_open(k.dev, "pu.txt", O_RDONLY, 0), -EACCES);
	assert_int_equal(f_stat(k.dev, "pu.txt", 0, &gs), -EACCES);
	assert_int_equal(f_mkdir(k.dev, "pu.d", 0700), -EACCES);
	emu_client_detach(&k);

	/* Its own user is served, as itself. */
	pid_t p = fork();
	if (p == 0) {
		if (become(65534, 0) < 0 || cl_attach_at(&k, run, true, 0) < 0)
			_exit(10);
		int64_t h = f_open(k.dev, "pu-own.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
		if (h < 0)
			_exit(11);
		if (f_write(k.dev, h, "own", 3) != 3 || f_close(k.dev, h) != 0)
			_exit(12);
		if (f_open(k.dev, "/etc/shadow", O_RDONLY, 0) != -EACCES)
			_exit(13);
		emu_client_detach(&k);
		_exit(0);
	}
	int ws;
	assert_int_equal(waitpid(p, &ws, 0), p);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0);
	assert_int_equal(stat("pu-own.txt", &st), 0);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_size, 3);

	kill(d, SIGTERM);
	assert_int_equal(waitpid(d, &ws, 0), d);
	unlink("pu.txt");
	unlink("pu-own.txt");
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* ------------------------------------------ a client killed mid-write */

static void test_killed_client(void **state)
{
	(void)state;
	pid_t dpid = daemon_.pid;
	/* Earlier tests' clients may still be going away: wait until the
	 * count holds still. */
	int before = count_fds(dpid);
	for (int stable = 0; stable < 20; usleep(10000)) {
		int n = count_fds(dpid);
		stable = n == before ? stable + 1 : 0;
		before = n;
	}
	assert_true(before > 0);

	pid_t p = fork();
	if (p == 0) {
		struct emu_client k;
		if (cl_attach(&k, true, 16u << 20) < 0)
			_exit(10);
		uint8_t *buf = calloc(1, 8u << 20);
		int64_t hs[8];
		for (int i = 0; i < 8; i++) {
			char name[32];
			snprintf(name, sizeof(name), "killed%d.bin", i);
			hs[i] = f_open(k.dev, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (hs[i] < 0)
				_exit(11);
		}
		for (uint64_t i = 0;; i++) /* until killed */
			gpusys_emu_pwrite_block(k.dev, (int32_t)hs[i % 8], buf, 8u << 20, (int64_t)((i / 8 % 16) << 23));
	}
	/* Wait until it writes, then kill it in the middle. */
	struct stat st;
	long t0 = now_ms();
	while (!(stat("killed7.bin", &st) == 0 && st.st_size > 0) && now_ms() - t0 < 5000)
		usleep(1000);
	assert_true(st.st_size > 0);
	assert_true(count_fds(dpid) >= before + 8);
	kill(p, SIGKILL);
	int ws;
	assert_int_equal(waitpid(p, &ws, 0), p);

	int now = -1;
	t0 = now_ms();
	while (now_ms() - t0 < 2000) {
		now = count_fds(dpid);
		if (now <= before)
			break;
		usleep(5000);
	}
	assert_true(now <= before);
	for (int i = 0; i < 8; i++) {
		char name[32];
		snprintf(name, sizeof(name), "killed%d.bin", i);
		unlink(name);
	}
}

/* -------------------------------------- a blocked read stalls nobody */

struct blocked {
	const gpusys_dev_t *dev;
	int64_t h;
	char buf[16];
	atomic_int done;
	int64_t got;
};

static void *blocked_reader(void *arg)
{
	struct blocked *b = arg;
	b->got = f_read(b->dev, b->h, b->buf, sizeof(b->buf));
	atomic_store(&b->done, 1);
	return NULL;
}

/* A hostile client asks for big answers and never reads them (it stops
 * after packet 0 of each response stream): what the daemon holds for it
 * stays within its budget (client_mem_budget, 64 MiB by default), and the
 * next such request is refused (GPUSYS_STATUS_NO_ROOM) rather than allocated. */
static void test_unread_responses_bounded(void **state)
{
	(void)state;
	struct emu_client k;
	struct gpusys_options o = {
		.runtime_dir = daemon_.runtime, .num_ports = 8,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO,
	};
	assert_int_equal(gpusys_attach(&o, &k.c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(k.c), &k.emu), 0);
	k.dev = gpusys_emu_dev(k.emu);
	gpusys_emu_set_warp(0); /* the emulated calls below use port 0 */

	enum { MIB = 1 << 20 };
	FILE *f = fopen("unread.bin", "w");
	assert_non_null(f);
	for (int i = 0; i < MIB / 8; i++)
		fwrite("abcdefgh", 1, 8, f);
	fclose(f);
	int64_t h = f_open(k.dev, "unread.bin", O_RDONLY, 0);
	assert_true(h > 2);

	/* 32 lanes x 768 KiB preads per request (24 MiB of answer), on ports
	 * 1..3, by hand: two fit in 64 MiB, the third does not. */
	int32_t status[4] = { 0 };
	for (uint32_t p = 1; p <= 3; p++) {
		struct gpusys_port *port = &k.dev->ports[p];
		struct gpusys_file_req q = { .handle = (int32_t)h, .offset = 0, .count = MIB / 4 * 3 };
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			port->len[l] = sizeof(q);
			port->aux[l] = MIB / 4 * 3;
			port_host_inline_put(port->data, l, (const uint8_t *)&q, sizeof(q));
		}
		uint32_t seq = (k.dev->locks[p].seq + 1) & GPUSYS_SEQ_MASK;
		__atomic_store_n(&k.dev->client_word[p], gpusys_client_word(seq, 0, GPUSYS_OP_FILE_PREAD, 0xffffffffu),
				 __ATOMIC_RELEASE);
		uint64_t w;
		for (int i = 0; GPUSYS_WORD_SEQ(w = __atomic_load_n(&k.dev->server_word[p], __ATOMIC_ACQUIRE)) != seq;
		     i++) {
			assert_true(i < 5000);
			usleep(1000);
		}
		status[p] = GPUSYS_SW_STATUS(w);
		k.dev->locks[p].seq = seq; /* and never ask for the rest */
	}
	assert_int_equal(status[1], 0);
	assert_int_equal(status[2], 0);
	/* 24 MiB fit the budget, not with 48 held: "no room yet", which the
	 * device side would send again for a while and then fail -ENOMEM
	 * (abi.h); nothing was allocated for it. */
	assert_int_equal(status[3], GPUSYS_STATUS_NO_ROOM);

	/* The budget is this client's: another client reads as usual. */
	struct emu_client other;
	assert_int_equal(cl_attach(&other, true, 0), 0);
	int64_t h2 = f_open(other.dev, "unread.bin", O_RDONLY, 0);
	assert_true(h2 > 2);
	char buf[16];
	assert_int_equal(f_read(other.dev, h2, buf, sizeof(buf)), (int64_t)sizeof(buf));
	assert_memory_equal(buf, "abcdefghabcdefgh", 16);
	emu_client_detach(&other);
	emu_client_detach(&k);
	unlink("unread.bin");
}

/* A reader waits, it does not fail, while the client's other calls' answers
 * fill its budget (abi.h GPUSYS_STATUS_NO_ROOM): a daemon with a 260 KiB
 * client_mem_budget, two calls of 32 lanes x 4 KiB started and not taken
 * (their 256 KiB held), and a one-lane 8 KiB pread from another warp, which
 * must get its bytes once the first two are taken 300 ms later (before ABI
 * 9: -ENOMEM at once). A call larger than the whole budget still fails
 * -ENOMEM at once. */
struct room_reader {
	const gpusys_dev_t *dev;
	int64_t h, got;
	uint8_t buf[8192];
	long ms;
};

static void *room_reader_main(void *arg)
{
	struct room_reader *r = arg;
	gpusys_emu_set_warp(1);
	long t0 = now_ms();
	r->got = f_pread(r->dev, r->h, r->buf, sizeof(r->buf), 4096);
	r->ms = now_ms() - t0;
	return NULL;
}

/* READFILE is charged what each lane read, not its room: in a budget of
 * 260 KiB, 32 lanes with 64 KiB of room each (2 MiB) read small files; four
 * lanes of 100 KiB files (400 KiB) do not fit one answer: the lanes past
 * the budget are sent again by the device side and all four arrive; a
 * file larger than the whole budget is -ENOMEM, on its lane alone. */
static void test_readfile_charged_what_it_read(void **state)
{
	(void)state;
	struct gd d;
	gd_start(&d, "client_mem_budget = 260K\n");
	struct emu_client k;
	assert_int_equal(emu_client_attach(&k, d.runtime, 4, 0, GPUSYS_ATTACH_NO_STDIO), 0);
	static uint8_t data[300 * 1024], bufs[L][400 * 1024];
	fill(data, sizeof(data), 13);
	host_write_file("small", data, 6, 0644);
	host_write_file("mid", data, 100 * 1024, 0644);
	host_write_file("huge", data, sizeof(data), 0644);
	const char *p[L];
	void *b[L];
	uint32_t c[L];
	int64_t ret[L];
	for (uint32_t l = 0; l < L; l++) {
		p[l] = "small";
		b[l] = bufs[l];
		c[l] = 64 * 1024;
	}
	gpusys_emu_file_readfile(k.dev, ~0u, p, b, c, ret);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(ret[l], 6);
		assert_memory_equal(bufs[l], data, 6);
	}
	for (uint32_t l = 0; l < 5; l++) {
		p[l] = l == 4 ? "huge" : "mid";
		c[l] = 400 * 1024;
	}
	memset(bufs, 0, 5 * sizeof(bufs[0]));
	gpusys_emu_file_readfile(k.dev, 0x1f, p, b, c, ret);
	for (uint32_t l = 0; l < 4; l++) {
		assert_int_equal(ret[l], 100 * 1024);
		assert_memory_equal(bufs[l], data, 100 * 1024);
	}
	assert_int_equal(ret[4], -ENOMEM);
	emu_client_detach(&k);
	gd_finish(&d);
	unlink("small");
	unlink("mid");
	unlink("huge");
}

static void test_no_room_waits(void **state)
{
	(void)state;
	enum { KIB = 1024, LANE = 4 * KIB };
	struct gd d;
	/* the two held calls' 256 KiB and a little for the rest; not the
	 * reader's 8 KiB besides */
	gd_start(&d, "client_mem_budget = 260K\n");
	struct emu_client k;
	assert_int_equal(emu_client_attach(&k, d.runtime, 16, 0, GPUSYS_ATTACH_NO_STDIO), 0);

	static uint8_t pattern[64 * KIB];
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + i / 251);
	FILE *f = fopen("room.bin", "w");
	assert_non_null(f);
	assert_int_equal(fwrite(pattern, 1, sizeof(pattern), f), sizeof(pattern));
	fclose(f);
	int64_t h = f_open(k.dev, "room.bin", O_RDONLY, 0);
	assert_true(h > 2);

	/* Warp 0: two asynchronous preads of 32 lanes x 4 KiB, answered and
	 * held (128 KiB each: the budget) until they are finished below. Not
	 * through a window: there an answer that fits the two slots goes
	 * with its packet 0 (ABI 13) and holds nothing. */
	gpusys_emu_set_warp(0);
	static uint8_t scratch[2][L][GPUSYS_FILE_REQ_BYTES], out[2][L][LANE];
	struct gpusys_file_pending fp[2];
	for (int c = 0; c < 2; c++) {
		const uint8_t *req[L];
		uint32_t req_len[L], cap[L];
		void *o[L];
		for (uint32_t l = 0; l < L; l++) {
			struct gpusys_file_req q;
			gpusys_file_req_init(&q);
			q.handle = (int32_t)h;
			q.offset = (int64_t)(l % 16) * LANE;
			q.count = LANE;
			req_len[l] = gpusys_file_pack(scratch[c][l], &q, NULL, 0, NULL, 0);
			req[l] = scratch[c][l];
			o[l] = out[c][l];
			cap[l] = LANE;
		}
		gpusys_file_rpc_start(k.dev, GPUSYS_OP_FILE_PREAD, GPUSYS_REQ_NO_WINDOW, 0xffffffffu, req, req_len, o,
				      cap, 1, &fp[c]);
		assert_int_equal(fp[c].pd.sync, 0); /* on a port of its own, left there */
		for (int i = 0; !gpusys_rpc_test(k.dev, &fp[c].pd); i++) {
			assert_true(i < 5000);
			usleep(1000);
		}
	}

	/* Warp 1 reads meanwhile: it waits for room. */
	struct room_reader rd = { .dev = k.dev, .h = h };
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, room_reader_main, &rd), 0);
	usleep(300000);
	for (int c = 0; c < 2; c++) {
		int64_t ret[L];
		gpusys_file_rpc_finish(k.dev, &fp[c], ret);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(ret[l], LANE);
			assert_memory_equal(out[c][l], pattern + (l % 16) * LANE, LANE);
		}
	}
	pthread_join(th, NULL);
	print_message("an 8 KiB pread waited %ld ms for room in a full 260 KiB budget\n", rd.ms);
	assert_int_equal(rd.got, (int64_t)sizeof(rd.buf));
	assert_memory_equal(rd.buf, pattern + 4096, sizeof(rd.buf));
	assert_true(rd.ms >= 250 && rd.ms < 5000);

	/* 32 lanes x 16 KiB: more than the whole budget, refused at once. */
	gpusys_emu_set_warp(0);
	static uint8_t big[L][16 * KIB];
	gpusys_fd_t hs[L];
	void *bufs[L];
	uint32_t cnt[L];
	int64_t offs[L], ret[L];
	for (uint32_t l = 0; l < L; l++) {
		hs[l] = (gpusys_fd_t)h;
		bufs[l] = big[l];
		cnt[l] = sizeof(big[l]);
		offs[l] = 0;
	}
	long t0 = now_ms();
	gpusys_emu_file_pread(k.dev, 0xffffffffu, hs, bufs, cnt, offs, ret);
	long ms = now_ms() - t0;
	for (uint32_t l = 0; l < L; l++)
		assert_int_equal(ret[l], -ENOMEM);
	assert_true(ms < 1000);

	emu_client_detach(&k);
	unlink("room.bin");
	gd_finish(&d);
}

static void test_fifo_does_not_stall(void **state)
{
	(void)state;
	struct emu_client a, b;
	assert_int_equal(mkfifo("fifo", 0666), 0);
	/* We hold a writer (and a reader, so opening cannot fail): the
	 * daemon's read waits for data. */
	int wfd = open("fifo", O_RDWR | O_CLOEXEC);
	assert_true(wfd >= 0);
	assert_int_equal(cl_attach(&a, true, 0), 0);
	assert_int_equal(cl_attach(&b, true, 0), 0);

	struct blocked bl = { .dev = a.dev };
	bl.h = f_open(a.dev, "fifo", O_RDONLY, 0);
	assert_true(bl.h > 0);
	pthread_t t;
	pthread_create(&t, NULL, blocked_reader, &bl);
	usleep(100000);
	assert_int_equal(atomic_load(&bl.done), 0);

	/* Meanwhile another client's calls go on: NOOPs on the pollers and
	 * file calls on the other workers. */
	long t0 = now_ms();
	for (int i = 0; i < 1000; i++)
		assert_int_equal(gpusys_emu_noop(b.dev, 1), 0);
	struct gpusys_stat gs;
	for (int i = 0; i < 100; i++)
		assert_int_equal(f_stat(b.dev, "fifo", 0, &gs), sizeof(gs));
	long took = now_ms() - t0;
	assert_true(took < 2000);
	assert_int_equal(atomic_load(&bl.done), 0);

	assert_int_equal(write(wfd, "ping", 4), 4);
	pthread_join(t, NULL);
	assert_int_equal(bl.got, 4);
	assert_memory_equal(bl.buf, "ping", 4);

	/* A second blocked read, abandoned by a client that goes away. */
	assert_int_equal(f_close(a.dev, bl.h), 0);
	close(wfd);
	unlink("fifo");
	emu_client_detach(&a);
	emu_client_detach(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_read_write_close),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_handles),
		cmocka_unit_test(test_readdir),
		cmocka_unit_test(test_readfile),
		cmocka_unit_test(test_reads_on_poller),
		cmocka_unit_test(test_readfile_charged_what_it_read),
		cmocka_unit_test(test_lanes),
		cmocka_unit_test(test_no_cwd),
		cmocka_unit_test(test_no_room_waits),
		cmocka_unit_test(test_big_file),
		cmocka_unit_test(test_concurrent_blocks),
		cmocka_unit_test(test_block_without_bulk),
		cmocka_unit_test(test_larger_slots),
		cmocka_unit_test(test_bulk_write_mapped),
		cmocka_unit_test(test_two_users),
		cmocka_unit_test(test_per_user_daemon),
		cmocka_unit_test(test_killed_client),
		cmocka_unit_test(test_fifo_does_not_stall),
		cmocka_unit_test(test_unread_responses_bounded),
	};
	return cmocka_run_group_tests_name("file", tests, group_setup, group_teardown);
}
