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
#include <stdlib.h>
#include <string.h>

#include "gpusys/alloc.h"
#include "services/alloc/alloc_calls.h"
#include "services/alloc/alloc_heap.h"
#include "core/call.h"

struct alloc_client {
	pthread_mutex_t lock;
	struct alloc_heap *heap; /* made by the first request: it says how much the client reserved */
	uint64_t base, reserve;  /* the range the heap was made for (the client's figures) */
	uint64_t reallocs;
	uint64_t grant_counted, meta_counted, refused_counted; /* this heap's share of the totals below */
};

static uint64_t cfg_limit = UINT64_C(4) << 30, cfg_chunk = UINT64_C(64) << 20;

/* Daemon-wide figures over every live heap (ALLOC_STAT; a test watches a
 * killed client's heap leave them). */
static atomic_uint_fast64_t all_heaps, all_grant, all_meta, all_refused;

void alloc_calls_configure(uint64_t limit, uint64_t chunk)
{
	cfg_limit = limit;
	cfg_chunk = chunk;
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

/* Bring this heap's share of the daemon-wide figures up to date (lock held). */
static void account(struct alloc_client *c)
{
	struct gpusys_alloc_stat st;
	if (!c->heap)
		return;
	alloc_heap_stat(c->heap, &st);
	uint64_t refused = st.refused_foreign + st.refused_interior + st.refused_unallocated;
	atomic_fetch_add_explicit(&all_grant, st.grant - c->grant_counted, memory_order_relaxed);
	atomic_fetch_add_explicit(&all_meta, st.meta_bytes - c->meta_counted, memory_order_relaxed);
	atomic_fetch_add_explicit(&all_refused, refused - c->refused_counted, memory_order_relaxed);
	c->grant_counted = st.grant;
	c->meta_counted = st.meta_bytes;
	c->refused_counted = refused;
}

void alloc_client_free(struct alloc_client *c)
{
	if (!c)
		return;
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
static int heap_enter(struct alloc_client *c, const struct port_call *call)
{
	struct gpusys_alloc_req q;
	int r = first_req(call, &q);
	if (r < 0)
		return r;
	pthread_mutex_lock(&c->lock);
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

/* Lane l's request, or -EINVAL when its length is not a request's. */
static int lane_req(const struct port_call *call, uint32_t l, struct gpusys_alloc_req *q)
{
	if (call->len[l] != sizeof(*q))
		return -EINVAL;
	memcpy(q, call->data[l], sizeof(*q));
	return q->flags ? -EINVAL : 0;
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
		r = lane_req(call, l, &q);
		if (r == 0)
			r = alloc_heap_malloc(c->heap, q.arg, q.arg2, &out[l].off);
		if (r == 0 && q.extra) {
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
	int r = heap_enter(c, call);
	if (r < 0) {
		call->status = r;
		return;
	}
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		struct gpusys_alloc_req q;
		if (!(call->lane_mask >> l & 1u))
			continue;
		r = lane_req(call, l, &q);
		call->lane_status[l] = r < 0 ? r : alloc_heap_free(c->heap, q.arg);
	}
	heap_leave(c);
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
		r = lane_req(call, l, &q);
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

bool alloc_client_figures(struct alloc_client *c, struct gpusys_alloc_stat *st)
{
	bool have;
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&c->lock);
	have = c->heap != NULL;
	if (have)
		alloc_heap_stat(c->heap, st);
	st->reallocs = c->reallocs;
	pthread_mutex_unlock(&c->lock);
	return have;
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
	st->reallocs = c->reallocs;
	pthread_mutex_unlock(&c->lock);
	alloc_daemon_figures(st);
	call->resp_len[first] = sizeof(*st);
	call->resp_data[first] = (const uint8_t *)st;
}
