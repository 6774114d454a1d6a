/* SPDX-License-Identifier: MIT */
/*
 * No path walks through gpusysd's own descriptors or /proc (SECURITY.md,
 * "Paths"). Root attaches a client whose working directory (the "vault":
 * a secret file, a subdirectory it keeps open, a listening and a datagram
 * Unix socket) is open to all but lies inside root's 0700 directory, so
 * gpusysd holds descriptors into it that uid 65534 could never reach by
 * any path of its own. Then uid 65534 tries every call that takes a path with every escape
 * shape: /proc/self/fd/N/..., /proc/PID/fd/N, /proc/TID/fd/N,
 * /proc/thread-self/../../fd/N, ".." through a descriptor, symlinks of its
 * own to magic links and to /proc/self, and the magic links themselves as
 * the last component; and reads gpusysd's own /proc files. Every one is
 * refused (-ELOOP for a magic link on the way, -EACCES for gpusysd's own
 * /proc entries), and afterwards the vault is as it was and nothing
 * connected to or sent to its sockets. The same calls on the user's own
 * files still work. Needs root (to be two users); skipped without.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"
#include "../daemon/emu_client.h"

#define L GPUSYS_WARP_LANES
#define NOBODY 65534

static struct gd daemon_;
static char base[160], vault[224], pub[224];

/* What the child needs to know of gpusysd: its pid, one of its other
 * threads, and its descriptors of the vault and of vault/sub. */
struct target {
	int pid, tid, vault_fd, sub_fd;
};

/* ------------------------------------------------------------ clients */

static int cl_attach(struct emu_client *k)
{
	return emu_client_attach(k, daemon_.runtime, 4, 0, GPUSYS_ATTACH_NO_STDIO);
}

static int64_t f_open(const gpusys_dev_t *d, const char *path, int flags)
{
	const char *p[L] = { path };
	int fl[L] = { flags };
	uint32_t m[L] = { 0644 };
	int64_t r[L];
	gpusys_emu_file_open(d, 1, p, fl, m, r);
	if (r[0] > 0) {
		int32_t h[L] = { (int32_t)r[0] };
		int64_t c[L];
		gpusys_emu_file_close(d, 1, h, c);
		return 0; /* opened (and closed again) */
	}
	return r[0];
}

static int64_t f_opendir(const gpusys_dev_t *d, const char *path)
{
	const char *p[L] = { path };
	int64_t r[L];
	gpusys_emu_file_opendir(d, 1, p, r);
	if (r[0] > 0) {
		int32_t h[L] = { (int32_t)r[0] };
		int64_t c[L];
		gpusys_emu_file_closedir(d, 1, h, c);
		return 0;
	}
	return r[0];
}

static int64_t f_stat(const gpusys_dev_t *d, const char *path, int flags)
{
	struct gpusys_stat st;
	const char *p[L] = { path };
	int fl[L] = { flags };
	struct gpusys_stat *s[L] = { &st };
	int64_t r[L];
	gpusys_emu_file_stat(d, 1, p, fl, s, r);
	return r[0] == (int64_t)sizeof(st) ? 0 : r[0];
}

/* READFILE (the whole file in one call, served on a poller from the
 * kernel's lookup cache where it can be): its length, or -errno. */
static int64_t f_readfile(const gpusys_dev_t *d, const char *path)
{
	static char buf[64 << 10];
	const char *p[L] = { path };
	void *b[L] = { buf };
	uint32_t n[L] = { sizeof(buf) };
	int64_t r[L];
	gpusys_emu_file_readfile(d, 1, p, b, n, r);
	return r[0];
}

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

static int64_t f_mkdir(const gpusys_dev_t *d, const char *path)
{
	const char *p[L] = { path };
	uint32_t m[L] = { 0755 };
	int64_t r[L];
	gpusys_emu_file_mkdir(d, 1, p, m, r);
	return r[0];
}

static int64_t f_rename(const gpusys_dev_t *d, const char *a, const char *b)
{
	const char *p[L] = { a }, *q[L] = { b };
	int64_t r[L];
	gpusys_emu_file_rename(d, 1, p, q, r);
	return r[0];
}

static struct sockaddr_un un(const char *path, uint32_t *len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	*len = (uint32_t)(offsetof(struct sockaddr_un, sun_path) + strlen(sa.sun_path) + 1);
	return sa;
}

/* A socket call on a fresh socket of type; the socket is closed again. */
enum sock_act { ACT_CONNECT, ACT_BIND, ACT_SENDTO };

static int64_t s_call(const gpusys_dev_t *d, enum sock_act act, const char *path)
{
	uint32_t len;
	char abs[512];
	snprintf(abs, sizeof(abs), "%s%s%s", path[0] == '/' ? "" : pub, path[0] == '/' ? "" : "/", path);
	struct sockaddr_un sa = un(abs, &len); /* Unix socket paths are absolute here */
	int64_t h = gpusys_emu_socket(d, AF_UNIX, act == ACT_SENDTO ? SOCK_DGRAM : SOCK_STREAM, 0);
	if (h < 0)
		return -10000 + h; /* not what is tested: make it fail loudly */
	int64_t r;
	switch (act) {
	case ACT_CONNECT:
		r = gpusys_emu_connect(d, (gpusys_fd_t)h, &sa, len);
		break;
	case ACT_BIND:
		r = gpusys_emu_bind(d, (gpusys_fd_t)h, &sa, len);
		break;
	default:
		r = gpusys_emu_sendto(d, (gpusys_fd_t)h, "x", 1, 0, &sa, len);
		r = r == 1 ? 0 : r;
		break;
	}
	gpusys_emu_sock_close(d, (gpusys_fd_t)h);
	return r;
}

/* ------------------------------------------------------- the child */

static int failures;

static void expect_at(int line, const char *what, const char *path, int64_t got, int64_t want)
{
	if (got == want)
		return;
	fprintf(stderr, "test_paths.c:%d: %s(\"%s\") = %lld (%s), want %lld (%s)\n", line, what, path, (long long)got,
		got < 0 ? strerror((int)-got) : "success", (long long)want, want < 0 ? strerror((int)-want) : "success");
	failures++;
}
#define EXPECT(what, path, got, want) expect_at(__LINE__, what, path, (got), (want))

/* Every path call with dir as the directory part: dir walks through a
 * magic link, so each is -ELOOP. */
static void through_link(const gpusys_dev_t *d, const char *dir, int64_t want)
{
	char p[512], q[512];
	snprintf(p, sizeof(p), "%s/secret.txt", dir);
	EXPECT("open", p, f_open(d, p, O_RDONLY), want);
	EXPECT("readfile", p, f_readfile(d, p), want);
	EXPECT("open O_WRONLY|O_CREAT", p, f_open(d, p, O_WRONLY | O_CREAT), want);
	EXPECT("stat", p, f_stat(d, p, 0), want);
	EXPECT("lstat", p, f_stat(d, p, AT_SYMLINK_NOFOLLOW), want);
	EXPECT("unlink", p, f_unlink(d, p), want);
	EXPECT("rename from", p, f_rename(d, p, "stolen"), want);
	snprintf(q, sizeof(q), "%s/planted", dir);
	EXPECT("rename to", q, f_rename(d, "mine.txt", q), want);
	snprintf(q, sizeof(q), "%s/newdir", dir);
	EXPECT("mkdir", q, f_mkdir(d, q), want);
	snprintf(q, sizeof(q), "%s/sub", dir);
	EXPECT("rmdir", q, f_rmdir(d, q), want);
	EXPECT("opendir", q, f_opendir(d, q), want);
	EXPECT("stat dir/", q, f_stat(d, q, AT_SYMLINK_NOFOLLOW), want);
	snprintf(q, sizeof(q), "%s/root.sock", dir);
	EXPECT("connect", q, s_call(d, ACT_CONNECT, q), want);
	snprintf(q, sizeof(q), "%s/dgram.sock", dir);
	EXPECT("sendto", q, s_call(d, ACT_SENDTO, q), want);
	snprintf(q, sizeof(q), "%s/evil.sock", dir);
	EXPECT("bind", q, s_call(d, ACT_BIND, q), want);
}

/* The link itself as the last component: its directory is gpusysd's
 * /proc/PID/fd, so each is -EACCES. */
static void at_link(const gpusys_dev_t *d, const char *link)
{
	EXPECT("open", link, f_open(d, link, O_RDONLY), -EACCES);
	EXPECT("readfile", link, f_readfile(d, link), -EACCES);
	EXPECT("opendir", link, f_opendir(d, link), -EACCES);
	EXPECT("stat", link, f_stat(d, link, 0), -EACCES);
	EXPECT("lstat", link, f_stat(d, link, AT_SYMLINK_NOFOLLOW), -EACCES);
	EXPECT("rmdir", link, f_rmdir(d, link), -EACCES);
	EXPECT("unlink", link, f_unlink(d, link), -EACCES);
	EXPECT("rename from", link, f_rename(d, link, "stolen"), -EACCES);
	EXPECT("connect", link, s_call(d, ACT_CONNECT, link), -EACCES);
}

static int as_nobody(void *arg)
{
	const struct target *t = arg;
	struct emu_client k;
	char p[512], q[512];

	if (chdir(pub) < 0 || cl_attach(&k) < 0)
		return 100;
	const gpusys_dev_t *d = k.dev;

	/* Its own files first: the resolver must not refuse honest paths. */
	EXPECT("open O_CREAT", "mine.txt", f_open(d, "mine.txt", O_WRONLY | O_CREAT), 0);
	if (symlink("mine.txt", "ln") < 0 || symlink("/proc/self/fd", "fds") < 0)
		return 101;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", t->vault_fd);
	if (symlink(p, "esc") < 0 || symlink("/proc/self", "me") < 0 || symlink("/proc/self/maps", "maps") < 0)
		return 102;
	EXPECT("stat through a symlink", "ln", f_stat(d, "ln", 0), 0);
	EXPECT("open through a symlink", "ln", f_open(d, "ln", O_RDONLY), 0);
	EXPECT("readfile", "mine.txt", f_readfile(d, "mine.txt"), 0);
	EXPECT("readfile through a symlink", "ln", f_readfile(d, "ln"), 0);
	EXPECT("readfile a directory", ".", f_readfile(d, "."), -EISDIR);
	EXPECT("readfile", "/proc/meminfo", f_readfile(d, "/proc/meminfo") > 0 ? 0 : -1, 0);
	EXPECT("mkdir", "own", f_mkdir(d, "own"), 0);
	EXPECT("stat dir/", "own/", f_stat(d, "own/", 0), 0);
	EXPECT("rename", "own", f_rename(d, "own", "own2"), 0);
	EXPECT("rmdir", "own2/", f_rmdir(d, "own2/"), 0);
	EXPECT("unlink file/", "mine.txt/", f_unlink(d, "mine.txt/"), -ENOTDIR);
	EXPECT("open", "/proc/meminfo", f_open(d, "/proc/meminfo", O_RDONLY), 0);
	snprintf(p, sizeof(p), "/proc/%d/status", (int)getpid());
	EXPECT("open its own /proc", p, f_open(d, p, O_RDONLY), 0);
	snprintf(p, sizeof(p), "/proc/%d/cwd/mine.txt", (int)getpid());
	EXPECT("open through its own cwd link", p, f_open(d, p, O_RDONLY), -ELOOP);
	snprintf(p, sizeof(p), "/proc/%d/fd/0", (int)getpid());
	EXPECT("open its own fd link", p, f_open(d, p, O_RDONLY), -ELOOP);
	snprintf(p, sizeof(p), "%s/own.sock", pub);
	{
		uint32_t len;
		struct sockaddr_un sa = un(p, &len), got;
		int64_t h = gpusys_emu_socket(d, AF_UNIX, SOCK_STREAM, 0);
		EXPECT("bind its own", p, gpusys_emu_bind(d, (gpusys_fd_t)h, &sa, len), 0);
		EXPECT("listen", p, gpusys_emu_listen(d, (gpusys_fd_t)h, 4), 0);
		uint32_t glen = sizeof(got);
		memset(&got, 0, sizeof(got));
		EXPECT("getsockname", p, gpusys_emu_getsockname(d, (gpusys_fd_t)h, &got, &glen), 0);
		EXPECT("getsockname's path", got.sun_path, strcmp(got.sun_path, p) == 0 ? 0 : -1, 0);
		EXPECT("connect its own", p, s_call(d, ACT_CONNECT, p), 0);
		gpusys_emu_sock_close(d, (gpusys_fd_t)h);
	}

	/* Through a magic link on the way: -ELOOP. */
	const char *self_forms[] = { "/proc/self", "/proc/thread-self/../.." };
	for (unsigned i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/fd/%d", self_forms[i], t->vault_fd);
		through_link(d, p, -ELOOP);
	}
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", t->pid, t->vault_fd);
	through_link(d, p, -ELOOP);
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", t->tid, t->vault_fd);
	through_link(d, p, -ELOOP);
	snprintf(p, sizeof(p), "/proc/self/fd/%d/..", t->sub_fd); /* ".." through a descriptor */
	through_link(d, p, -ELOOP);
	through_link(d, "esc", -ELOOP); /* a symlink of its own to a magic link */
	snprintf(p, sizeof(p), "me/fd/%d", t->vault_fd); /* one to /proc/self */
	through_link(d, p, -ELOOP);
	snprintf(p, sizeof(p), "fds/%d", t->vault_fd);
	through_link(d, p, -ELOOP);
	snprintf(p, sizeof(p), "%s/esc", pub);
	through_link(d, p, -ELOOP);
	through_link(d, "/proc/self/cwd", -ELOOP);
	through_link(d, "/proc/self/root/tmp", -ELOOP);

	/* The magic links themselves: gpusysd's /proc entries, -EACCES. */
	snprintf(p, sizeof(p), "/proc/self/fd/%d", t->vault_fd);
	at_link(d, p);
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", t->pid, t->vault_fd);
	at_link(d, p);
	snprintf(p, sizeof(p), "/proc/thread-self/../../fd/%d", t->vault_fd);
	at_link(d, p);
	EXPECT("stat through a symlink to a magic link", "esc", f_stat(d, "esc", 0), -EACCES);
	EXPECT("opendir through a symlink to a magic link", "esc", f_opendir(d, "esc"), -EACCES);
	EXPECT("connect through a symlink to a magic link", "esc", s_call(d, ACT_CONNECT, "esc"), -EACCES);

	/* gpusysd's own /proc files and directories. */
	const char *own_files[] = { "/proc/self/maps", "/proc/self/status", "/proc/self/cmdline", "/proc/self/environ",
				    "/proc/self/fdinfo/0", "/proc/thread-self/status", "/proc/self/task/../maps",
				    "/proc/mounts", "/proc/net/unix", "maps", "me/status" };
	for (unsigned i = 0; i < sizeof(own_files) / sizeof(own_files[0]); i++) {
		EXPECT("open", own_files[i], f_open(d, own_files[i], O_RDONLY), -EACCES);
		EXPECT("readfile", own_files[i], f_readfile(d, own_files[i]), -EACCES);
		EXPECT("stat", own_files[i], f_stat(d, own_files[i], 0), -EACCES);
	}
	snprintf(p, sizeof(p), "/proc/%d/maps", t->pid);
	EXPECT("open", p, f_open(d, p, O_RDONLY), -EACCES);
	EXPECT("readfile", p, f_readfile(d, p), -EACCES);
	snprintf(q, sizeof(q), "/proc/%d/environ", t->tid);
	EXPECT("open", q, f_open(d, q, O_RDONLY), -EACCES);
	EXPECT("readfile", q, f_readfile(d, q), -EACCES);
	const char *own_dirs[] = { "/proc/self", "/proc/self/", "/proc/self/fd", "/proc/thread-self", "me", "fds" };
	for (unsigned i = 0; i < sizeof(own_dirs) / sizeof(own_dirs[0]); i++) {
		EXPECT("opendir", own_dirs[i], f_opendir(d, own_dirs[i]), -EACCES);
		EXPECT("stat", own_dirs[i], f_stat(d, own_dirs[i], 0), -EACCES);
	}
	snprintf(p, sizeof(p), "/proc/%d", t->pid);
	EXPECT("opendir", p, f_opendir(d, p), -EACCES);
	snprintf(p, sizeof(p), "/proc/%d/task", t->tid);
	EXPECT("opendir", p, f_opendir(d, p), -EACCES);

	emu_client_detach(&k);
	return failures ? 1 : 0;
}

/* ------------------------------------------------------- root's side */

struct listener {
	int fd;
	atomic_int accepted;
	atomic_bool stop;
};

static void *accept_main(void *arg)
{
	struct listener *ls = arg;
	while (!atomic_load(&ls->stop)) {
		struct pollfd p = { .fd = ls->fd, .events = POLLIN };
		if (poll(&p, 1, 50) != 1)
			continue;
		int c = accept4(ls->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		atomic_fetch_add(&ls->accepted, 1);
		if (write(c, "BANNER\n", 7) < 0) {
			/* the peer went: counted all the same */
		}
		close(c);
	}
	return NULL;
}

static int unix_socket_at(const char *path, int type)
{
	uint32_t len;
	struct sockaddr_un sa = un(path, &len);
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | (type == SOCK_DGRAM ? SOCK_NONBLOCK : 0), 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
	assert_int_equal(chmod(path, 0777), 0); /* only the 0700 directory guards it */
	if (type == SOCK_STREAM)
		assert_int_equal(listen(fd, 64), 0);
	return fd;
}

/* gpusysd's descriptor whose link reads target; -1 if none. */
static int daemon_fd_of(int pid, const char *target)
{
	char dir[64], link[384], got[PATH_MAX];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *dp = opendir(dir);
	assert_non_null(dp);
	int found = -1;
	struct dirent *de;
	while ((de = readdir(dp))) {
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t n = readlink(link, got, sizeof(got) - 1);
		if (n > 0) {
			got[n] = 0;
			if (strcmp(got, target) == 0)
				found = atoi(de->d_name);
		}
	}
	closedir(dp);
	return found;
}

static int daemon_other_thread(int pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	DIR *dp = opendir(dir);
	assert_non_null(dp);
	int tid = -1;
	struct dirent *de;
	while ((de = readdir(dp)))
		if (de->d_name[0] != '.' && atoi(de->d_name) != pid)
			tid = atoi(de->d_name);
	closedir(dp);
	return tid;
}

static void read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	ssize_t got = read(fd, buf, n - 1);
	assert_true(got >= 0);
	buf[got] = 0;
	close(fd);
}

static void test_no_escape(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		skip(); /* acting as another user needs root */
		return;
	}
	char p[512], sub[256];
	/* The vault is open to all (0777) but lies in root's 0700 directory:
	 * only that parent keeps uid 65534 out, as with a working directory
	 * under a private home. */
	snprintf(p, sizeof(p), "%s/private", base);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(vault, sizeof(vault), "%s/private/vault", base);
	snprintf(pub, sizeof(pub), "%s/pub", base);
	snprintf(sub, sizeof(sub), "%s/sub", vault);
	assert_int_equal(mkdir(vault, 0777), 0);
	assert_int_equal(chmod(vault, 0777), 0);
	assert_int_equal(mkdir(sub, 0777), 0);
	assert_int_equal(chmod(sub, 0777), 0);
	assert_int_equal(mkdir(pub, 0777), 0);
	assert_int_equal(chmod(pub, 0777), 0);
	snprintf(p, sizeof(p), "%s/secret.txt", vault);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "root-secret\n", 12), 12);
	close(fd);

	struct listener ls = { 0 };
	snprintf(p, sizeof(p), "%s/root.sock", vault);
	ls.fd = unix_socket_at(p, SOCK_STREAM);
	snprintf(p, sizeof(p), "%s/dgram.sock", vault);
	int dg = unix_socket_at(p, SOCK_DGRAM);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, accept_main, &ls), 0);

	/* Root's client: the vault as its working directory, vault/sub open. */
	char here[PATH_MAX];
	assert_non_null(getcwd(here, sizeof(here)));
	assert_int_equal(chdir(vault), 0);
	struct emu_client root;
	assert_int_equal(cl_attach(&root), 0);
	assert_int_equal(chdir(here), 0);
	const char *sp[L] = { "sub" };
	int64_t dh[L];
	gpusys_emu_file_opendir(root.dev, 1, sp, dh);
	assert_true(dh[0] > 0);

	struct target t = {
		.pid = daemon_.pid,
		.tid = daemon_other_thread(daemon_.pid),
		.vault_fd = daemon_fd_of(daemon_.pid, vault),
		.sub_fd = daemon_fd_of(daemon_.pid, sub),
	};
	assert_true(t.tid > 0);
	assert_true(t.vault_fd >= 0); /* the client's working directory */
	assert_true(t.sub_fd >= 0);   /* its open directory */

	fflush(NULL);
	pid_t c = fork();
	assert_true(c >= 0);
	if (c == 0) {
		gid_t none = 0;
		if (setgroups(0, &none) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(99);
		/* A process that changed its uid is not dumpable, so its own
		 * /proc/PID would be root's; an ordinary uid 65534 program's
		 * is its own. */
		if (prctl(PR_SET_DUMPABLE, 1) < 0)
			_exit(98);
		_exit(as_nobody(&t));
	}
	int ws;
	assert_int_equal(waitpid(c, &ws, 0), c);
	assert_true(WIFEXITED(ws));
	assert_int_equal(WEXITSTATUS(ws), 0); /* the lines above it say which call got through */

	/* The vault is as it was, and its sockets heard from nobody. */
	char buf[64];
	snprintf(p, sizeof(p), "%s/secret.txt", vault);
	read_file(p, buf, sizeof(buf));
	assert_string_equal(buf, "root-secret\n");
	struct stat st;
	const char *absent[] = { "newdir", "planted", "evil.sock" };
	for (unsigned i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", vault, absent[i]);
		assert_int_equal(lstat(p, &st), -1);
	}
	assert_int_equal(stat(sub, &st), 0);
	snprintf(p, sizeof(p), "%s/stolen", pub);
	assert_int_equal(lstat(p, &st), -1);
	atomic_store(&ls.stop, true);
	pthread_join(th, NULL);
	assert_int_equal(atomic_load(&ls.accepted), 0);
	assert_int_equal(recv(dg, buf, sizeof(buf), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);

	/* The daemon still serves root in its vault. */
	assert_int_equal(f_stat(root.dev, "secret.txt", 0), 0);
	emu_client_detach(&root);
	close(ls.fd);
	close(dg);
}

static int setup(void **state)
{
	(void)state;
	gd_start(&daemon_, NULL);
	assert_int_equal(chmod(daemon_.dir, 0755), 0); /* let uid 65534 reach the sockets */
	assert_int_equal(chmod(daemon_.runtime, 0755), 0);
	snprintf(base, sizeof(base), "%s/paths", daemon_.dir);
	assert_int_equal(mkdir(base, 0755), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[sizeof(base) + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		return -1;
	gd_finish(&daemon_);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_escape),
	};
	return cmocka_run_group_tests_name("paths", tests, setup, teardown);
}
