/* SPDX-License-Identifier: MIT */
/*
 * The floor for emulated round trips: two processes, one shared page, one
 * word written by each (the same single-writer shape as a port's client
 * and server words), each side spinning on the other's word. Nothing of
 * gpusys is involved, so a gpusys round trip can be judged against it.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

struct floor_page {
	volatile uint32_t ping __attribute__((aligned(64)));
	volatile uint32_t pong __attribute__((aligned(64)));
};

static inline void pause_cpu(void)
{
#if defined(__x86_64__)
	__builtin_ia32_pause();
#endif
}

int bench_floor_cpu(unsigned iters, struct bench_stats *ret)
{
	int fd = memfd_create("gpusys-bench-floor", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, 4096) < 0) {
		close(fd);
		return -errno;
	}
	struct floor_page *pg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (pg == MAP_FAILED)
		return -errno;

	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* the "server": a separate process, as gpusysd is. It spins
		 * until told to stop, so it must go with the benchmark if that
		 * is killed mid-floor (a test's timeout), or it spins forever. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		uint32_t seen = 0;
		for (;;) {
			uint32_t v = __atomic_load_n(&pg->ping, __ATOMIC_ACQUIRE);
			if (v == seen) {
				pause_cpu();
				continue;
			}
			seen = v;
			__atomic_store_n(&pg->pong, v, __ATOMIC_RELEASE);
			if (v == UINT32_MAX)
				_exit(0);
		}
	}
	uint64_t *lat = malloc(sizeof(*lat) * iters);
	unsigned warm = iters / 10 + 1;
	for (unsigned i = 1; i <= iters + warm; i++) {
		uint64_t t0 = bench_now_ns();
		__atomic_store_n(&pg->ping, i, __ATOMIC_RELEASE);
		while (__atomic_load_n(&pg->pong, __ATOMIC_ACQUIRE) != i)
			pause_cpu();
		if (i > warm)
			lat[i - warm - 1] = bench_now_ns() - t0;
	}
	__atomic_store_n(&pg->ping, UINT32_MAX, __ATOMIC_RELEASE);
	waitpid(pid, NULL, 0);
	munmap(pg, 4096);
	*ret = bench_stats_of(lat, iters);
	free(lat);
	return 0;
}
