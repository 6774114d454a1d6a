/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inproc_server.h"
#include "services.h"

struct server_arg {
	struct inproc *s;
	unsigned slot;
};

static void *serve(void *arg)
{
	struct server_arg *a = arg;
	struct port_table *t = &a->s->table;
	uint32_t n = t->num_ports;
	uint32_t start = a->slot * n / a->s->nthreads;

	while (!atomic_load_explicit(&a->s->stop, memory_order_relaxed)) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t p = (start + i) % n;
			struct port_call *call = NULL;
			if (!port_pending(t, p) || !port_try_claim(t, p))
				continue;
			if (port_server_step(t, p, a->slot, &call) == PORT_STEP_DEFER)
				port_server_run(call, a->slot); /* no pool here: run it in place */
		}
	}
	free(a);
	return NULL;
}

struct inproc *inproc_start(uint32_t num_ports, unsigned nservers)
{
	return inproc_start_fds(num_ports, nservers, -1, -1);
}

void *inproc_state(struct inproc *s, const struct service *svc)
{
	int i = service_index(svc);
	return i < 0 ? NULL : s->table.svc_state[i];
}

struct inproc *inproc_start_fds(uint32_t num_ports, unsigned nservers, int stdout_fd, int stderr_fd)
{
	struct inproc *s = calloc(1, sizeof(*s));
	services_use(gpusysd_services);
	struct gpusys_channel_layout l = gpusys_channel_layout(num_ports, 0, 0);

	s->bytes = l.total_bytes;
	s->base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s->base == MAP_FAILED)
		abort();
	gpusys_channel_format(s->base, num_ports, &l, 1);
	s->client = (struct client){ .pid = getpid(), .umask = 022, .cwd_fd = -1, .stdout_fd = stdout_fd,
				     .stderr_fd = stderr_fd, .sock = -1, .cuda_device = -1, .client_ordinal = -1 };
	s->client.creds.uid = getuid();
	s->client.creds.gid = getgid();
	if (port_table_init(&s->table, s->base, num_ports, &s->client, 256u << 20))
		abort();
	s->nthreads = nservers;
	for (unsigned i = 0; i < nservers; i++) {
		struct server_arg *a = malloc(sizeof(*a));
		a->s = s;
		a->slot = i;
		pthread_create(&s->threads[i], NULL, serve, a);
	}
	return s;
}

void inproc_stop(struct inproc *s)
{
	atomic_store(&s->stop, 1);
	for (unsigned i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	port_table_fini(&s->table);
	munmap(s->base, s->bytes);
	free(s);
}
