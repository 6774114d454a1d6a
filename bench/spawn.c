/* SPDX-License-Identifier: MIT */
/* Start a private gpusysd for a benchmark run and stop it; attach an
 * emulated client to it and run its warps. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "common/wire.h"

/* The config file, if asked for: d->conf. */
static int write_config(struct bench_daemon *d)
{
	d->conf[0] = 0;
	if (!d->config)
		return 0;
	snprintf(d->conf, sizeof(d->conf), "/tmp/gpusys-bench.%d.conf", (int)getpid());
	FILE *f = fopen(d->conf, "w");
	if (!f)
		return -errno;
	fputs(d->config, f);
	return fclose(f) == 0 ? 0 : -errno;
}

static void exec_daemon(const struct bench_daemon *d, const char *path)
{
	/* The daemon goes when the benchmark goes, however it ends. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (d->log) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
	}
	char *args[16] = { (char *)path, (char *)"--runtime-dir", (char *)d->dir };
	int n = 3;
	if (d->conf[0]) {
		args[n++] = (char *)"--config";
		args[n++] = (char *)d->conf;
	}
	char *copy = d->args ? strdup(d->args) : NULL;
	for (char *tok = copy ? strtok(copy, " ") : NULL; tok && n < 15; tok = strtok(NULL, " "))
		args[n++] = tok;
	args[n] = NULL;
	execv(path, args);
	fprintf(stderr, "gpusys-bench: cannot run %s: %s\n", path, strerror(errno));
	_exit(127);
}

static bool accepts(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return false;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Returns the pid or -errno. */
static int spawn(struct bench_daemon *d, const char *path)
{
	char sock[PATH_MAX + 32];

	snprintf(d->dir, sizeof(d->dir), "/tmp/gpusys-bench.XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	int rc = write_config(d);
	if (rc)
		return rc;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0)
		exec_daemon(d, path);
	/* Up once control.sock accepts a connection: gpusysd listens on
	 * gpusysd.sock before it even creates control.sock. Not the mere file
	 * of gpusysd.sock: that exists from bind(), before listen(), and an
	 * attach in between is refused (seen once in ~80 runs on the 2-vCPU
	 * VM: "gpusysd is not running"). */
	snprintf(sock, sizeof(sock), "%s/%s", d->dir, GPUSYS_CONTROL_NAME);
	for (int i = 0; i < 500; i++) {
		if (accepts(sock))
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -ECHILD;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

int bench_daemon_start(struct bench_daemon *d, const char *path, const char **runtime_dir)
{
	d->pid = 0;
	d->dir[0] = d->conf[0] = 0;
	if (!path)
		return 0;
	int pid = spawn(d, path);
	if (pid < 0) {
		fprintf(stderr, "gpusys-bench: cannot start %s: %s\n", path, strerror(-pid));
		bench_daemon_stop(d);
		return pid;
	}
	d->pid = pid;
	*runtime_dir = d->dir;
	return 0;
}

int bench_daemon_stop(struct bench_daemon *d)
{
	char path[PATH_MAX + 32];
	int status = -1;

	if (d->pid > 0) {
		int st = 0;
		kill(d->pid, SIGTERM);
		if (waitpid(d->pid, &st, 0) == d->pid && WIFEXITED(st))
			status = WEXITSTATUS(st);
		d->pid = 0;
	}
	if (d->conf[0]) {
		unlink(d->conf);
		d->conf[0] = 0;
	}
	if (!d->dir[0])
		return status;
	/* The daemon removes its sockets; remove what is left, then the dir. */
	const char *names[] = { GPUSYS_SOCKET_NAME, GPUSYS_CONTROL_NAME, "gpusysd.lock" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", d->dir, names[i]);
		unlink(path);
	}
	rmdir(d->dir);
	d->dir[0] = 0;
	return status;
}

int bench_emu_attach(const struct gpusys_options *o, gpusys_t **ret_client,
		     struct gpusys_emu **ret_emu)
{
	int rc = gpusys_attach(o, ret_client);
	if (rc) {
		fprintf(stderr, "gpusys-bench: attach: %s\n", gpusys_last_error());
		return rc;
	}
	rc = gpusys_emu_open(gpusys_host_channel(*ret_client), ret_emu);
	if (rc) {
		fprintf(stderr, "gpusys-bench: emulator: %s\n", gpusys_strerror(rc));
		gpusys_detach(*ret_client);
		*ret_client = NULL;
	}
	return rc;
}

void bench_emu_detach(gpusys_t *client, struct gpusys_emu *emu)
{
	if (emu)
		gpusys_emu_close(emu);
	if (client)
		gpusys_detach(client);
}

void bench_warp_begin(struct bench_warp *w)
{
	gpusys_emu_set_warp(w->warp);
	pthread_barrier_wait(w->start);
}

int bench_run_warps(unsigned n, void *(*fn)(void *), void *args, size_t arg_size, uint64_t *ret_t0,
		    uint64_t *ret_t1)
{
	pthread_t *th = calloc(n, sizeof(*th));
	pthread_barrier_t start;
	if (!th)
		return -ENOMEM;
	pthread_barrier_init(&start, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		struct bench_warp *w = (struct bench_warp *)((char *)args + i * arg_size);
		w->warp = i;
		w->rc = 0;
		w->start = &start;
		pthread_create(&th[i], NULL, fn, w);
	}
	pthread_barrier_wait(&start);
	*ret_t0 = bench_now_ns();
	for (unsigned i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	*ret_t1 = bench_now_ns();
	pthread_barrier_destroy(&start);
	free(th);
	for (unsigned i = 0; i < n; i++) {
		const struct bench_warp *w = (const struct bench_warp *)((char *)args + i * arg_size);
		if (w->rc) {
			fprintf(stderr, "gpusys-bench: warp %u: %s\n", i, gpusys_strerror(w->rc));
			return w->rc;
		}
	}
	return 0;
}
