/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the GPU test suite (meson test --suite gpu): skip with the
 * reason when no GPU can be used (exit 77), start the real gpusysd on a
 * private runtime directory, read its control status. C-style CUDA: each test
 * is one .cu file that includes this once.
 */
#ifndef GPUSYS_GPU_TEST_H
#define GPUSYS_GPU_TEST_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"
#include "common/wire.h"
extern "C" {
#include "common/cuda_driver.h"
}

#define GT_SKIP 77

static const char *gt_name = "gpu test";
static char gt_dir[PATH_MAX];
static bool gt_dir_shared; /* a daemon we did not start: leave its directory alone */
static pid_t gt_daemon = -1;

static void gt_stop_daemon(void);

static void gt_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: FAIL: ", gt_name);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	gt_stop_daemon();
	exit(1);
}

#define GT_CHECK(cond, ...)                \
	do {                               \
		if (!(cond))               \
			gt_fail(__VA_ARGS__); \
	} while (0)

#define GT_CUDA(x)                                                                                         \
	do {                                                                                               \
		cudaError_t e_ = (x);                                                                      \
		if (e_ != cudaSuccess)                                                                     \
			gt_fail("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_));          \
	} while (0)

/* Exit 77 with the reason unless a CUDA device can be used. Run before any
 * other CUDA call. Uses the runtime-loaded driver, like libgpusys. */
static inline void gt_require_gpu(void)
{
	char why[256];
	if (gpusys_cuda_probe(0, NULL, why, sizeof(why)) < 0) {
		fprintf(stderr, "%s: SKIP: no usable GPU: %s\n", gt_name, why);
		exit(GT_SKIP);
	}
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		fprintf(stderr, "%s: SKIP: no usable GPU (CUDA runtime: %s)\n", gt_name,
			e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
		exit(GT_SKIP);
	}
}

/* Same check without touching the runtime (a parent that forks CUDA children
 * must not initialise CUDA first): a child process probes. */
static inline void gt_require_gpu_forked(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		char why[256];
		if (gpusys_cuda_probe(0, NULL, why, sizeof(why)) < 0) {
			fprintf(stderr, "%s: SKIP: no usable GPU: %s\n", gt_name, why);
			_exit(GT_SKIP);
		}
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		exit(WIFEXITED(st) && WEXITSTATUS(st) == GT_SKIP ? GT_SKIP : 1);
}

static double gt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void gt_stop_daemon(void)
{
	if (gt_daemon > 0) {
		kill(gt_daemon, SIGTERM);
		double t0 = gt_now();
		while (waitpid(gt_daemon, NULL, WNOHANG) == 0) {
			if (gt_now() - t0 > 5) {
				kill(gt_daemon, SIGKILL);
				waitpid(gt_daemon, NULL, 0);
				break;
			}
			usleep(10000);
		}
		gt_daemon = -1;
	}
	if (gt_dir[0] && !gt_dir_shared) {
		char p[PATH_MAX + 32];
		const char *names[] = { GPUSYS_SOCKET_NAME, GPUSYS_CONTROL_NAME, "gpusysd.lock", "gpusysd.pid" };
		for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			snprintf(p, sizeof(p), "%s/%s", gt_dir, names[i]);
			unlink(p);
		}
		rmdir(gt_dir);
		gt_dir[0] = 0;
	}
}

/* Start GPUSYSD_PATH (set by meson; $GPUSYSD overrides) on a fresh runtime
 * directory and wait for its socket. extra: more arguments or NULL. */
static void gt_start_daemon(const char *extra)
{
	const char *path = getenv("GPUSYSD");
	if (!path)
		path = GPUSYSD_PATH;
	snprintf(gt_dir, sizeof(gt_dir), "/tmp/gpusys-gpu-test.XXXXXX");
	if (!mkdtemp(gt_dir))
		gt_fail("mkdtemp: %s", strerror(errno));
	setenv(GPUSYS_RUNTIME_DIR_ENV, gt_dir, 1);
	setenv("GPUSYS_DEBUG", "1", 0);
	gt_daemon = fork();
	if (gt_daemon == 0) {
		char *args[16] = { (char *)path, (char *)"--foreground", (char *)"--runtime-dir", gt_dir };
		int n = 4;
		char *copy = extra ? strdup(extra) : NULL;
		for (char *tok = copy ? strtok(copy, " ") : NULL; tok && n < 15; tok = strtok(NULL, " "))
			args[n++] = tok;
		args[n] = NULL;
		execv(path, args);
		fprintf(stderr, "cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	char sock[PATH_MAX + 32];
	snprintf(sock, sizeof(sock), "%s/%s", gt_dir, GPUSYS_SOCKET_NAME);
	for (int i = 0; i < 1000; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			return;
		if (waitpid(gt_daemon, NULL, WNOHANG) == gt_daemon) {
			gt_daemon = -1;
			gt_fail("gpusysd (%s) exited at start", path);
		}
		usleep(10000);
	}
	gt_fail("gpusysd did not create %s", sock);
}

static inline int gt_daemon_alive(void)
{
	return gt_daemon > 0 && waitpid(gt_daemon, NULL, WNOHANG) == 0;
}

/* One control request; the reply line into buf. 0 or -errno. */
static inline int gt_control(const char *request, char *buf, size_t size)
{
	struct sockaddr_un a;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	if (snprintf(a.sun_path, sizeof(a.sun_path), "%.60s/%s", gt_dir, GPUSYS_CONTROL_NAME) >= (int)sizeof(a.sun_path))
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, request, strlen(request)) != (ssize_t)strlen(request)) {
		int e = -errno;
		close(fd);
		return e;
	}
	size_t got = 0;
	while (got + 1 < size) {
		ssize_t n = read(fd, buf + got, size - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(buf + got - n, '\n', (size_t)n))
			break;
	}
	buf[got] = 0;
	close(fd);
	return got ? 0 : -EIO;
}

/* The integer after "key": in a JSON text, or -1. */
static inline long long gt_json_int(const char *json, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	const char *p = strstr(json, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ' || *p == ':')
		p++;
	return strtoll(p, NULL, 10);
}

/* Attach for device 0 with forced memory kinds (0: default). */
static inline gpusys_t *gt_attach(uint32_t kinds, uint32_t ports)
{
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.memory_kinds = kinds;
	o.num_ports = ports;
	gpusys_t *g = NULL;
	int rc = gpusys_attach(&o, &g);
	if (rc)
		gt_fail("gpusys_attach(kinds %#x): %s (%s)", kinds, gpusys_strerror(rc), gpusys_last_error());
	return g;
}

static inline const char *gt_kind_name(uint32_t kind)
{
	return kind == GPUSYS_MEMORY_CUDA_VMM ? "cuda-vmm" : kind == GPUSYS_MEMORY_MEMFD ? "memfd" : "?";
}

/* A test's whole run against a gpusysd of its own: run(kind) for a memfd
 * channel, then a CUDA VMM one; the daemon must have lived through both.
 * The process's exit status. */
static inline int gt_main_each_kind(const char *name, void (*run)(uint32_t kind))
{
	gt_name = name;
	gt_require_gpu();
	gt_start_daemon(NULL);
	run(GPUSYS_MEMORY_MEMFD);
	run(GPUSYS_MEMORY_CUDA_VMM);
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	printf("%s: all passed\n", name);
	return 0;
}

#endif
