/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/wire.h"
#include "cpu_server.h"

int cpu_server_map(struct cpu_server *m, const char *name, size_t bytes)
{
	m->bytes = bytes;
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)m->bytes) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	m->host = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return m->host == MAP_FAILED ? -errno : 0;
}

int cpu_server_fork(struct cpu_server *m, void *(*serve)(void *), unsigned slots, unsigned threads,
		    const struct cpu_server *others, unsigned nothers)
{
	int pipefd[2];
	if (threads < 1 || threads > CPU_SERVER_MAX_THREADS)
		return -EINVAL;
	if (pipe2(pipefd, O_CLOEXEC) < 0) /* gpusysd, forked later, must not keep it */
		return -errno;
	m->pid = fork();
	if (m->pid < 0) {
		int e = errno;
		close(pipefd[0]);
		close(pipefd[1]);
		m->pid = 0;
		return -e;
	}
	if (m->pid == 0) {
		static volatile int stop;
		pthread_t th[CPU_SERVER_MAX_THREADS];
		struct cpu_slice args[CPU_SERVER_MAX_THREADS];
		close(pipefd[1]);
		for (unsigned i = 0; i < nothers; i++)
			if (others[i].pid > 0)
				close(others[i].stop_fd);
		for (unsigned i = 0; i < threads; i++) {
			args[i].host = m->host;
			args[i].first = i * (slots / threads);
			args[i].count = slots / threads;
			args[i].stop = &stop;
			pthread_create(&th[i], NULL, serve, &args[i]);
		}
		char c;
		while (read(pipefd[0], &c, 1) < 0 && errno == EINTR) {
		}
		stop = 1;
		for (unsigned i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		_exit(0);
	}
	close(pipefd[0]);
	m->stop_fd = pipefd[1];
	return 0;
}

void cpu_server_stop(struct cpu_server *m)
{
	if (m->pid > 0) {
		close(m->stop_fd);
		waitpid(m->pid, NULL, 0);
		m->pid = 0;
	}
}

static void *mini_serve(void *p)
{
	struct cpu_slice *a = p;
	struct gpusys_channel_header *h = a->host;
	volatile uint64_t *cw = (volatile uint64_t *)((uint8_t *)a->host + h->client_word_offset);
	volatile uint64_t *sw = (volatile uint64_t *)((uint8_t *)a->host + h->server_word_offset);
	uint32_t *seen = calloc(a->count, sizeof(uint32_t));
	if (!seen)
		return NULL;
	while (!*a->stop) {
		for (uint32_t k = 0; k < a->count; k++) {
			uint32_t port = a->first + k;
			uint32_t seq = GPUSYS_WORD_SEQ(cw[port]);
			if (seq != seen[k]) {
				seen[k] = seq;
				__atomic_thread_fence(__ATOMIC_ACQUIRE);
				sw[port] = gpusys_server_word(seq, GPUSYS_SW_TRIVIAL, 0);
			}
		}
	}
	free(seen);
	return NULL;
}

int mini_server_start(struct cpu_server *m, const struct cpu_server *others, unsigned nothers)
{
	struct gpusys_channel_layout l = gpusys_channel_layout(MINI_PORTS, 0, 0);
	int rc = cpu_server_map(m, "gpusys-bench-mini", l.total_bytes);
	if (rc)
		return rc;
	gpusys_channel_format(m->host, MINI_PORTS, &l, 1);
	return cpu_server_fork(m, mini_serve, MINI_PORTS, MINI_THREADS, others, nothers);
}
