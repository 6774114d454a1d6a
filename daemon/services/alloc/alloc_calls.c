/* SPDX-License-Identifier: MIT */
/*
 * The alloc service's handlers. Each lane's request is copied out of the
 * call (already private memory) into a local struct before a field is
 * read; every offset the client sends is only looked up in the daemon's own
 * metadata, never dereferenced. One lock per client heap: pollers serving
 * different clients never meet, and a call holds it for the lanes of one
 * warp (microseconds).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "gpusys/alloc.h"
#include "services/alloc/alloc_calls.h"
#include "services/alloc/alloc_heap.h"
#include "core/call.h"
#include "core/pending.h" /* port_charge: the heap's metadata stays charged between calls */

struct alloc_client {
	pthread_mutex_t lock;
	struct alloc_heap *heap; /* made by the first request: it says how much the client reserved */
	uint64_t base, reserve;  /* the range the heap was made for (the client's figures) */
	uint64_t reallocs;
	/* Pool chunks (whole large blocks the device cuts into slabs): what
	 * the device says about them only moves this client's own figures. */
	uint64_t pool_chunks, pool_chunks_got, pool_chunks_back;
	uint64_t dev_refused[3]; /* GPUSYS_ALLOC_REFUSED_* - 1 */
	/* The heap's metadata, charged to the client's memory budget
	 * (client_mem_budget, and its user's) for as long as it exists. */
	struct port_table *table;
	uint64_t meta_charged;
	bool over_budget; /* the last charge failed: no malloc until it fits */
	uint64_t grant_counted, meta_counted, refused_counted; /* this heap's share of the totals below */
};

static uint64_t cfg_limit = UINT64_C(4) << 30, cfg_chunk = UINT64_C(64) << 20;
static uint64_t cfg_trim_delay_ns = GPUSYS_ALLOC_TRIM_DELAY_NS;

/* Daemon-wide figures over every live heap (ALLOC_STAT; a test watches a
 * killed client's heap leave them). */
static atomic_uint_fast64_t all_heaps, all_grant, all_meta, all_refused;

void alloc_calls_configure(uint64_t limit, uint64_t chunk, uint64_t trim_delay_ms)
{
	cfg_limit = limit;
	cfg_chunk = chunk;
	cfg_trim_delay_ns = trim_delay_ms * 1000000u;
}

int alloc_client_new(struct alloc_client **ret)
{
	struct alloc_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	*ret = c;
	return 0;
}

/* Charge (or give back) what the metadata grew (or shrank) by since the
 * last call (lock held). A charge that does not fit leaves the heap over
 * its budget: mallocs are refused with -ENOMEM until frees bring the
 * metadata back under it (or the budget has room again). */
static void charge_meta(struct alloc_client *c, uint64_t meta)
{
	if (!c->table)
		return;
	if (meta > c->meta_charged) {
		c->over_budget = port_charge(c->table, meta - c->meta_charged) < 0;
		if (!c->over_budget)
			c->meta_charged = meta;
	} else {
		port_uncharge(c->table, c->meta_charged - meta);
		c->meta_charged = meta;
		c->over_budget = false;
	}
}

/* Bring this heap's share of the daemon-wide figures up to date (lock held). */
static void account(struct alloc_client *c)
{
	struct gpusys_alloc_stat st;
	if (!c->heap)
		return;
	alloc_heap_stat(c->heap, &st);
	uint64_t refused = st.refused_foreign + st.refused_interior + st.refused_unallocated + c->dev_refused[0] +
			   c->dev_refused[1] + c->dev_refused[2];
	atomic_fetch_add_explicit(&all_grant, st.grant - c->grant_counted, memory_order_relaxed);
	atomic_fetch_add_explicit(&all_meta, st.meta_bytes - c->meta_counted, memory_order_relaxed);
	atomic_fetch_add_explicit(&all_refused, refused - c->refused_counted, memory_order_relaxed);
	c->grant_counted = st.grant;
	c->meta_counted = st.meta_bytes;
	c->refused_counted = refused;
	charge_meta(c, st.meta_bytes);
}

void alloc_client_free(struct alloc_client *c)
{
	if (!c)
		return;
	if (c->table && c->meta_charged)
		port_uncharge(c->table, c->meta_charged);
	if (c->heap) {
		atomic_fetch_sub_explicit(&all_grant, c->grant_counted, memory_order_relaxed);
		atomic_fetch_sub_explicit(&all_meta, c->meta_counted, memory_order_relaxed);
		atomic_fetch_sub_explicit(&all_heaps, 1, memory_order_relaxed);
		alloc_heap_destroy(c->heap);
	}
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The first active lane's request (every lane carries the same mapped and
 * reserve figures: its warp leader read them once). */
static int first_req(const struct port_call *call, struct gpusys_alloc_req *q)
{
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (call->lane_mask >> l & 1u) {
			if (call->len[l] != sizeof(*q))
				return -EINVAL;
			memcpy(q, call->data[l], sizeof(*q));
			return 0;
		}
	}
	return -EINVAL;
}

/* Lock the client's heap, making it on the first request and taking the
 * client's report of what it has mapped. -errno for the whole call. */
/* Whether the heap's metadata is over the client's memory budget (lock
 * held): then a malloc is refused, counted as ENOMEM. */
static bool over_budget(struct alloc_client *c)
{
	if (!c->over_budget)
		return false;
	struct gpusys_alloc_stat st;
	alloc_heap_stat(c->heap, &st);
	charge_meta(c, st.meta_bytes); /* room again? */
	if (c->over_budget)
		alloc_heap_count_enomem(c->heap);
	return c->over_budget;
}

static int heap_enter(struct alloc_client *c, const struct port_call *call)
{
	struct gpusys_alloc_req q;
	int r = first_req(call, &q);
	if (r < 0)
		return r;
	pthread_mutex_lock(&c->lock);
	c->table = call->table; /* one per client, alive until its client_fini */
	if (c->heap && (q.base != c->base || q.reserve != c->reserve)) {
		/* Another range: the client closed its heap (unmapping all of
		 * it) and opened a new one. Its blocks are gone with the old
		 * range; so is what we knew of them. */
		atomic_fetch_sub_explicit(&all_grant, c->grant_counted, memory_order_relaxed);
		atomic_fetch_sub_explicit(&all_meta, c->meta_counted, memory_order_relaxed);
		atomic_fetch_sub_explicit(&all_heaps, 1, memory_order_relaxed);
		alloc_heap_destroy(c->heap);
		c->heap = NULL;
		c->grant_counted = c->meta_counted = 0;
		c->pool_chunks = 0;
	}
	if (!c->heap) {
		if (q.reserve < GPUSYS_ALLOC_MAP_ALIGN) {
			pthread_mutex_unlock(&c->lock);
			return -EINVAL;
		}
		r = alloc_heap_create(q.reserve, cfg_limit, cfg_chunk, &c->heap);
		if (r < 0) {
			pthread_mutex_unlock(&c->lock);
			return r;
		}
		atomic_fetch_add_explicit(&all_heaps, 1, memory_order_relaxed);
		c->base = q.base;
		c->reserve = q.reserve;
	}
	alloc_heap_set_mapped(c->heap, q.mapped);
	return 0;
}

static void heap_leave(struct alloc_client *c)
{
	account(c);
	pthread_mutex_unlock(&c->lock);
}

/* Lane l's request, or -EINVAL when its length is not a request's or its
 * flags are not ones the op takes (pool: MALLOC and FREE only). */
static int lane_req(const struct port_call *call, uint32_t l, struct gpusys_alloc_req *q, uint32_t flags_ok)
{
	if (call->len[l] != sizeof(*q))
		return -EINVAL;
	memcpy(q, call->data[l], sizeof(*q));
	return q->flags & ~flags_ok ? -EINVAL : 0;
}

/* A response slot per lane, in one buffer freed with the call. */
static struct gpusys_alloc_resp *resp_slots(struct port_call *call)
{
	size_t bytes = GPUSYS_WARP_LANES * sizeof(struct gpusys_alloc_resp);
	if (port_call_charge(call, bytes) < 0)
		return NULL;
	call->resp_buf = calloc(1, bytes);
	return call->resp_buf;
}

static void lane_answer(struct port_call *call, uint32_t l, struct gpusys_alloc_resp *slot)
{
	if (call->cap[l] < sizeof(*slot)) {
		call->lane_status[l] = -EMSGSIZE;
		return;
	}
	call->resp_len[l] = sizeof(*slot);
	call->resp_data[l] = (const uint8_t *)slot;
}

void alloc_call_malloc(struct alloc_client *c, struct port_call *call)
{
	struct gpusys_alloc_resp *out = resp_slots(call);
	if (!out) {
		call->status = -ENOMEM;
		return;
	}
	int r = heap_enter(c, call);
	if (r < 0) {
		call->status = r;
		return;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		struct gpusys_alloc_req q;
		if (!(call->lane_mask >> l & 1u))
			continue;
		r = lane_req(call, l, &q, GPUSYS_ALLOC_F_POOL);
		if (r == 0 && over_budget(c))
			r = -ENOMEM;
		if (r == 0 && q.flags & GPUSYS_ALLOC_F_POOL) {
			/* A pool chunk: a large block of exactly this shape,
			 * with the trim delay the device should keep. */
			if (q.arg != GPUSYS_ALLOC_CHUNK_BYTES || q.arg2 != GPUSYS_ALLOC_CHUNK_BYTES)
				r = -EINVAL;
			else
				r = alloc_heap_malloc(c->heap, q.arg, q.arg2, &out[l].off);
			if (r == 0) {
				c->pool_chunks++;
				c->pool_chunks_got++;
				out[l].size = cfg_trim_delay_ns;
			}
		} else if (r == 0) {
			r = alloc_heap_malloc(c->heap, q.arg, q.arg2, &out[l].off);
		}
		if (r == 0 && q.extra && !(q.flags & GPUSYS_ALLOC_F_POOL)) {
			/* The device's cache asks for more of this class: up
			 * to what fits the response, from mapped memory. */
			uint32_t cls = gpusys_alloc_class_of(q.arg, q.arg2 ? q.arg2 : GPUSYS_ALLOC_GRANULE);
			uint64_t offs[GPUSYS_ALLOC_EXTRA_MAX];
			uint32_t want = q.extra < GPUSYS_ALLOC_EXTRA_MAX ? q.extra : GPUSYS_ALLOC_EXTRA_MAX;
			uint32_t got = cls < GPUSYS_ALLOC_CLASSES ? alloc_heap_refill(c->heap, cls, want, offs) : 0;
			for (uint32_t i = 0; i < got; i++)
				out[l].extra[i] = (uint32_t)(offs[i] / GPUSYS_ALLOC_GRANULE);
			out[l].nextra = got;
		}
		out[l].grant = alloc_heap_grant(c->heap);
		call->lane_status[l] = r;
		lane_answer(call, l, &out[l]);
	}
	heap_leave(c);
}

void alloc_call_free(struct alloc_client *c, struct port_call *call)
{
	struct gpusys_alloc_resp *out = NULL;
	int r = heap_enter(c, call);
	if (r < 0) {
		call->status = r;
		return;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		struct gpusys_alloc_req q;
		if (!(call->lane_mask >> l & 1u))
			continue;
		r = lane_req(call, l, &q, GPUSYS_ALLOC_F_POOL | GPUSYS_ALLOC_F_SHRINKS);
		if (r == 0 && (q.flags & GPUSYS_ALLOC_F_SHRINKS) && !(q.flags & GPUSYS_ALLOC_F_POOL))
			r = -EINVAL;
		if (r == 0 && q.flags & GPUSYS_ALLOC_F_POOL) {
			/* Only a live block of a chunk's size counts as one. */
			uint64_t usable = 0;
			r = alloc_heap_usable(c->heap, q.arg, &usable);
			if (r == 0 && usable != GPUSYS_ALLOC_CHUNK_BYTES)
				r = -EINVAL;
			if (r == 0)
				r = alloc_heap_free(c->heap, q.arg);
			if (r == 0) {
				c->pool_chunks -= c->pool_chunks > 0;
				c->pool_chunks_back++;
			}
			/* A chunk the device kept empty for the trim delay: the
			 * top of the heap may now be free. A client that can
			 * unmap gets the grant (and a new epoch) back. */
			if (q.flags & GPUSYS_ALLOC_F_SHRINKS) {
				if (r == 0)
					alloc_heap_shrink(c->heap);
				if (!out && !(out = resp_slots(call)))
					r = r ? r : -ENOMEM;
				if (out) {
					out[l].grant = alloc_heap_grant(c->heap);
					lane_answer(call, l, &out[l]);
				}
			}
		} else if (r == 0) {
			r = alloc_heap_free(c->heap, q.arg);
		}
		call->lane_status[l] = r;
	}
	heap_leave(c);
}

/* Frees the device refused (a double free found by a bit already clear,
 * and the like): only this client's counters, and the daemon's total of
 * refused frees, move. */
void alloc_call_report(struct alloc_client *c, struct port_call *call)
{
	pthread_mutex_lock(&c->lock);
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		struct gpusys_alloc_req q;
		if (!(call->lane_mask >> l & 1u))
			continue;
		int r = lane_req(call, l, &q, 0);
		if (r == 0 && (q.arg < GPUSYS_ALLOC_REFUSED_FOREIGN || q.arg > GPUSYS_ALLOC_REFUSED_UNALLOCATED))
			r = -EINVAL;
		if (r == 0) {
			c->dev_refused[q.arg - 1]++;
			atomic_fetch_add_explicit(&all_refused, 1, memory_order_relaxed);
			c->refused_counted++;
		}
		call->lane_status[l] = r;
	}
	pthread_mutex_unlock(&c->lock);
}

void alloc_call_realloc(struct alloc_client *c, struct port_call *call)
{
	struct gpusys_alloc_resp *out = resp_slots(call);
	if (!out) {
		call->status = -ENOMEM;
		return;
	}
	int r = heap_enter(c, call);
	if (r < 0) {
		call->status = r;
		return;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		struct gpusys_alloc_req q;
		uint64_t usable = 0;
		if (!(call->lane_mask >> l & 1u))
			continue;
		r = lane_req(call, l, &q, 0);
		if (r == 0)
			r = alloc_heap_usable(c->heap, q.arg, &usable);
		if (r == 0 && q.arg2 == 0)
			r = -EINVAL; /* realloc to 0 is a free: the device sends FREE */
		if (r == 0) {
			/* Keep the block when the new size fits it and does
			 * not waste more than half of it; else a new block,
			 * and the old one stays live until the device has
			 * copied it and freed it: freeing it here would let
			 * another warp get it in the meantime. */
			out[l].size = usable;
			if (q.arg2 <= usable && q.arg2 > usable / 2)
				out[l].off = q.arg;
			else if (over_budget(c))
				r = -ENOMEM;
			else
				r = alloc_heap_malloc(c->heap, q.arg2, 0, &out[l].off);
		}
		if (r == 0)
			c->reallocs++;
		out[l].grant = alloc_heap_grant(c->heap);
		call->lane_status[l] = r;
		lane_answer(call, l, &out[l]);
	}
	heap_leave(c);
}

/* The figures kept here rather than in the heap (lock held). */
static void client_figures(const struct alloc_client *c, struct gpusys_alloc_stat *st)
{
	st->reallocs = c->reallocs;
	st->pool_bytes = c->pool_chunks * GPUSYS_ALLOC_CHUNK_BYTES;
	st->pool_chunks_got = c->pool_chunks_got;
	st->pool_chunks_back = c->pool_chunks_back;
	st->dev_refused_foreign = c->dev_refused[0];
	st->dev_refused_interior = c->dev_refused[1];
	st->dev_refused_unallocated = c->dev_refused[2];
}

bool alloc_client_figures(struct alloc_client *c, struct gpusys_alloc_stat *st)
{
	bool have;
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&c->lock);
	have = c->heap != NULL;
	if (have)
		alloc_heap_stat(c->heap, st);
	client_figures(c, st);
	pthread_mutex_unlock(&c->lock);
	return have;
}

uint64_t alloc_client_shrinks(struct alloc_client *c, uint64_t *ret_bytes)
{
	uint64_t n = 0;
	*ret_bytes = 0;
	pthread_mutex_lock(&c->lock);
	if (c->heap)
		n = alloc_heap_shrinks(c->heap, ret_bytes);
	pthread_mutex_unlock(&c->lock);
	return n;
}

void alloc_daemon_figures(struct gpusys_alloc_stat *st)
{
	st->all_heaps = atomic_load_explicit(&all_heaps, memory_order_relaxed);
	st->all_grant = atomic_load_explicit(&all_grant, memory_order_relaxed);
	st->all_meta_bytes = atomic_load_explicit(&all_meta, memory_order_relaxed);
	st->all_refused = atomic_load_explicit(&all_refused, memory_order_relaxed);
}

void alloc_call_stat(struct alloc_client *c, struct port_call *call)
{
	struct gpusys_alloc_stat *st;
	uint32_t first = GPUSYS_WARP_LANES;
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (call->lane_mask >> l & 1u) {
			first = l;
			break;
		}
	}
	if (first == GPUSYS_WARP_LANES || call->cap[first] < sizeof(*st)) {
		call->status = -EINVAL;
		return;
	}
	if (port_call_charge(call, sizeof(*st)) < 0 || !(st = calloc(1, sizeof(*st)))) {
		call->status = -ENOMEM;
		return;
	}
	call->resp_buf = st;
	pthread_mutex_lock(&c->lock);
	if (c->heap) {
		alloc_heap_stat(c->heap, st);
		account(c);
	}
	client_figures(c, st);
	pthread_mutex_unlock(&c->lock);
	alloc_daemon_figures(st);
	call->resp_len[first] = sizeof(*st);
	call->resp_data[first] = (const uint8_t *)st;
}
