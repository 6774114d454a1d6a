/* SPDX-License-Identifier: MIT */
/* Start a private gpusysd for a benchmark run, and stop it. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "gpusys/wire.h"

int bench_spawn_daemon(const char *path, const char *extra_args, char *dir)
{
	char sock[PATH_MAX + 32];

	snprintf(dir, PATH_MAX, "/tmp/gpusys-bench.XXXXXX");
	if (!mkdtemp(dir))
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* The daemon goes when the benchmark goes, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		char *args[16] = { (char *)path, (char *)"--runtime-dir", dir };
		int n = 3;
		char *copy = extra_args ? strdup(extra_args) : NULL;
		for (char *tok = copy ? strtok(copy, " ") : NULL; tok && n < 15; tok = strtok(NULL, " "))
			args[n++] = tok;
		args[n] = NULL;
		execv(path, args);
		fprintf(stderr, "gpusys-bench: cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	snprintf(sock, sizeof(sock), "%s/%s", dir, GPUSYS_SOCKET_NAME);
	for (int i = 0; i < 500; i++) {
		struct stat st;
		if (stat(sock, &st) == 0)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -ECHILD;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -ETIMEDOUT;
}

void bench_stop_daemon(int pid, const char *dir)
{
	char path[PATH_MAX + 32];

	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	/* The daemon removes its sockets; remove what is left, then the dir. */
	const char *names[] = { GPUSYS_SOCKET_NAME, GPUSYS_CONTROL_NAME, "gpusysd.lock" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}
