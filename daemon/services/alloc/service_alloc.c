/* SPDX-License-Identifier: MIT */
/*
 * The alloc service wired into the daemon (opcode group 0x04). Handlers run
 * on the poller that found the request: each is a few hash-free lookups
 * under the client's heap lock.
 *
 * Settings: alloc_limit_bytes (per client, default 4 GiB) and
 * alloc_chunk_bytes (first grant and least growth step, default 64 MiB),
 * read from GPUSYSD_ALLOC_LIMIT_BYTES / GPUSYSD_ALLOC_CHUNK_BYTES until the
 * service interface's settings land.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "gpusys/alloc.h"
#include "services/alloc/alloc_calls.h"
#include "services/alloc/service_alloc.h"

static pthread_once_t configured = PTHREAD_ONCE_INIT;

static uint64_t env_bytes(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	unsigned long long n = strtoull(v, &end, 10);
	switch (*end) {
	case 'K': case 'k': n <<= 10; break;
	case 'M': case 'm': n <<= 20; break;
	case 'G': case 'g': n <<= 30; break;
	default: break;
	}
	return n ? n : def;
}

static void configure(void)
{
	alloc_calls_configure(env_bytes("GPUSYSD_ALLOC_LIMIT_BYTES", UINT64_C(4) << 30),
			      env_bytes("GPUSYSD_ALLOC_CHUNK_BYTES", UINT64_C(64) << 20));
}

/* The client's state, made on its first alloc request. */
static struct alloc_client *state_of(struct port_table *t)
{
	struct alloc_client *c = __atomic_load_n((struct alloc_client **)&t->service_state[SERVICE_STATE_ALLOC],
						 __ATOMIC_ACQUIRE);
	if (c)
		return c;
	pthread_once(&configured, configure);
	pthread_mutex_lock(&t->service_state_lock);
	c = t->service_state[SERVICE_STATE_ALLOC];
	if (!c && alloc_client_new(&c) == 0)
		__atomic_store_n((struct alloc_client **)&t->service_state[SERVICE_STATE_ALLOC], c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&t->service_state_lock);
	return c;
}

#define HANDLER(name)                                        \
	static void handle_##name(struct port_call *call)    \
	{                                                    \
		struct alloc_client *c = state_of(call->table); \
		if (!c) {                                    \
			call->status = -ENOMEM;              \
			return;                              \
		}                                            \
		alloc_call_##name(c, call);                  \
	}
HANDLER(malloc)
HANDLER(free)
HANDLER(realloc)
HANDLER(stat)

static const struct service s_malloc = { GPUSYS_OP_ALLOC_MALLOC, SERVICE_INLINE, "alloc_malloc", handle_malloc };
static const struct service s_free = { GPUSYS_OP_ALLOC_FREE, SERVICE_INLINE, "alloc_free", handle_free };
static const struct service s_realloc = { GPUSYS_OP_ALLOC_REALLOC, SERVICE_INLINE, "alloc_realloc", handle_realloc };
static const struct service s_stat = { GPUSYS_OP_ALLOC_STAT, SERVICE_INLINE, "alloc_stat", handle_stat };

const struct service *const service_alloc_table[] = { &s_malloc, &s_free, &s_realloc, &s_stat, NULL };

void service_alloc_client_fini(struct port_table *t)
{
	struct alloc_client *c = t->service_state[SERVICE_STATE_ALLOC];
	t->service_state[SERVICE_STATE_ALLOC] = NULL;
	alloc_client_free(c);
}
