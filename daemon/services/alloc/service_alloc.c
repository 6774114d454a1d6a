/* SPDX-License-Identifier: MIT */
/*
 * The alloc service (opcode group 0x04): a growable heap per client
 * (docs/ALLOC.md). Handlers run on the poller that found the request: each
 * is a few lookups in the client's own metadata under its heap lock.
 *
 * Settings:
 *   alloc_limit_bytes  per-client bound on the heap (granted bytes);
 *                      past it mallocs get NULL and ENOMEM
 *   alloc_chunk_bytes  the first grant and the least growth step
 *   alloc_trim_delay_ms  how long a pool chunk the device cut into slabs
 *                      stays empty before the device gives it back
 *                      (told to the device with every chunk it gets)
 */
#include <errno.h>
#include <jansson.h>

#include "gpusys/alloc.h"
#include "services/alloc/alloc_calls.h"
#include "services/alloc/service_alloc.h"

#define MiB (UINT64_C(1) << 20)

static const struct config_key settings[] = {
	{ "alloc_limit_bytes", CONFIG_BYTES, 2 * MiB, GPUSYS_ALLOC_MAX_RESERVE, UINT64_C(4) << 30 },
	{ "alloc_chunk_bytes", CONFIG_BYTES, 2 * MiB, UINT64_C(16) << 30, 64 * MiB },
	{ "alloc_trim_delay_ms", CONFIG_COUNT, 1, UINT64_C(24) * 3600 * 1000, 1000 },
	{ NULL },
};

static int alloc_start(const struct service_env *env)
{
	alloc_calls_configure(config_value(env->cfg, "alloc_limit_bytes"), config_value(env->cfg, "alloc_chunk_bytes"),
			      config_value(env->cfg, "alloc_trim_delay_ms"));
	return 0;
}

static int alloc_client_init(const struct client *c, void **ret_state)
{
	(void)c;
	return alloc_client_new((struct alloc_client **)ret_state);
}

static void alloc_client_fini(const struct client *c, void *state)
{
	(void)c;
	alloc_client_free(state);
}

#define HANDLER(name)                                     \
	static void handle_##name(struct port_call *call) \
	{                                                 \
		alloc_call_##name(call->state, call);     \
	}
HANDLER(malloc)
HANDLER(free)
HANDLER(realloc)
HANDLER(stat)
HANDLER(report)

static const struct service_op ops[] = {
	{ GPUSYS_OP_ALLOC_MALLOC, SERVICE_ON_POLLER, 0, "alloc_malloc", handle_malloc },
	{ GPUSYS_OP_ALLOC_FREE, SERVICE_ON_POLLER, 0, "alloc_free", handle_free },
	{ GPUSYS_OP_ALLOC_REALLOC, SERVICE_ON_POLLER, 0, "alloc_realloc", handle_realloc },
	{ GPUSYS_OP_ALLOC_STAT, SERVICE_ON_POLLER, 0, "alloc_stat", handle_stat },
	{ GPUSYS_OP_ALLOC_REPORT, SERVICE_ON_POLLER, 0, "alloc_report", handle_report },
};

const struct service service_alloc = {
	.name = "alloc",
	.group = GPUSYS_OP_ALLOC_FIRST >> 8,
	.ops = ops,
	.nops = sizeof(ops) / sizeof(ops[0]),
	.settings = settings,
	.start = alloc_start,
	.client_init = alloc_client_init,
	.client_fini = alloc_client_fini,
};

json_t *service_alloc_status_json(void)
{
	struct gpusys_alloc_stat st;
	alloc_daemon_figures(&st);
	return json_pack("{s:I, s:I, s:I, s:I}", "heaps", (json_int_t)st.all_heaps, "granted_bytes",
			 (json_int_t)st.all_grant, "metadata_bytes", (json_int_t)st.all_meta_bytes, "refused_frees",
			 (json_int_t)st.all_refused);
}

json_t *service_alloc_client_json(void *state)
{
	struct gpusys_alloc_stat st;
	uint64_t shrunk = 0, shrinks;
	if (!state || !alloc_client_figures(state, &st))
		return NULL;
	shrinks = alloc_client_shrinks(state, &shrunk);
	/* refused_*: every refused free, the daemon's and the device's;
	 * device_refused_*: the part the device found and reported (small
	 * blocks: a double free is a bit already clear). */
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			 "limit_bytes", (json_int_t)st.limit, "granted_bytes", (json_int_t)st.grant, "mapped_bytes",
			 (json_int_t)st.mapped, "used_bytes", (json_int_t)st.used_bytes, "live_blocks",
			 (json_int_t)st.live_blocks, "mallocs", (json_int_t)st.mallocs, "frees", (json_int_t)st.frees,
			 "enomem", (json_int_t)st.enomem, "refused_foreign",
			 (json_int_t)(st.refused_foreign + st.dev_refused_foreign), "refused_interior",
			 (json_int_t)(st.refused_interior + st.dev_refused_interior), "refused_unallocated",
			 (json_int_t)(st.refused_unallocated + st.dev_refused_unallocated), "device_refused_foreign",
			 (json_int_t)st.dev_refused_foreign, "device_refused_interior", (json_int_t)st.dev_refused_interior,
			 "device_refused_unallocated", (json_int_t)st.dev_refused_unallocated, "pool_bytes",
			 (json_int_t)st.pool_bytes, "pool_chunks_got", (json_int_t)st.pool_chunks_got,
			 "pool_chunks_back", (json_int_t)st.pool_chunks_back);
	if (o) {
		json_object_set_new(o, "shrinks", json_integer((json_int_t)shrinks));
		json_object_set_new(o, "shrunk_bytes", json_integer((json_int_t)shrunk));
	}
	return o;
}
