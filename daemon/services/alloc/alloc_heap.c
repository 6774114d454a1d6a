/* SPDX-License-Identifier: MIT */
/*
 * The daemon's allocator metadata for one client heap (alloc_heap.h).
 *
 * Spans cover the mapped pages: FREE runs (coalesced with their neighbours
 * as soon as they appear, so two free runs are never adjacent), LARGE blocks
 * (one block, whole pages) and SLABs (GPUSYS_ALLOC_SLAB_BYTES of one small
 * class, a bitmap of live slots). The page map points every page of a LARGE
 * or SLAB span at it, and only the first and last page of a FREE run (its
 * inside stays NULL): allocation and release then cost O(pages of the
 * block), never O(pages of a free run), and a lookup still classifies any
 * offset (NULL or FREE: not allocated).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "services/alloc/alloc_heap.h"

#define PAGE ((uint64_t)GPUSYS_ALLOC_PAGE)
#define SLAB_PAGES (GPUSYS_ALLOC_SLAB_BYTES / GPUSYS_ALLOC_PAGE)
#define NBINS 64u

enum span_kind { SPAN_FREE, SPAN_LARGE, SPAN_SLAB };

struct span {
	uint64_t page, npages;
	uint8_t kind;
	uint8_t cls;          /* SLAB */
	uint32_t nslots;      /* SLAB */
	uint32_t nlive;       /* SLAB */
	uint32_t hint;        /* SLAB: bitmap word to search first */
	struct span *prev, *next; /* FREE: its bin; SLAB: its class's partial list */
	uint64_t live[];      /* SLAB: one bit per slot */
};

struct alloc_heap {
	uint64_t reserve, limit, chunk;
	uint64_t grant;        /* the client may map [0, grant) */
	uint64_t mapped;       /* usable: min(reported, grant), whole pages */
	uint32_t epoch;        /* shrinks so far: reports of older epochs are stale */
	uint64_t reported;     /* the largest mapped figure of this epoch (may pass the grant) */
	uint64_t shrinks, shrunk_bytes;
	struct span **map;     /* one entry per page, map_pages entries */
	uint64_t map_pages;
	struct span *bins[NBINS];
	struct span *partial[GPUSYS_ALLOC_CLASSES];
	uint32_t slabs[GPUSYS_ALLOC_CLASSES];
	uint64_t used_bytes, live_bytes, live_blocks, meta_bytes;
	uint64_t mallocs, frees, enomem, eagain;
	uint64_t refused_foreign, refused_interior, refused_unallocated;
};

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static unsigned bin_of(uint64_t npages)
{
	return 63u - (unsigned)__builtin_clzll(npages);
}

static struct span *span_new(struct alloc_heap *h, uint64_t page, uint64_t npages, enum span_kind kind,
			     uint32_t bitmap_words)
{
	size_t bytes = sizeof(struct span) + (size_t)bitmap_words * sizeof(uint64_t);
	struct span *s = calloc(1, bytes);
	if (!s)
		return NULL;
	s->page = page;
	s->npages = npages;
	s->kind = (uint8_t)kind;
	h->meta_bytes += bytes;
	return s;
}

static void span_free(struct alloc_heap *h, struct span *s)
{
	size_t words = s->kind == SPAN_SLAB ? (s->nslots + 63u) / 64u : 0;
	h->meta_bytes -= sizeof(struct span) + words * sizeof(uint64_t);
	free(s);
}

static void list_insert(struct span **head, struct span *s)
{
	s->prev = NULL;
	s->next = *head;
	if (*head)
		(*head)->prev = s;
	*head = s;
}

static void list_remove(struct span **head, struct span *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		*head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
}

static void map_set(struct alloc_heap *h, uint64_t page, uint64_t n, struct span *s)
{
	for (uint64_t i = 0; i < n; i++)
		h->map[page + i] = s;
}

/* Make [page, page + n) a free run, merging it with free neighbours. The
 * caller has cleared the map over the range. -ENOMEM only if the daemon is
 * out of memory for a span record (the pages are then lost to this heap). */
static int add_free(struct alloc_heap *h, uint64_t page, uint64_t n)
{
	struct span *prev = page > 0 ? h->map[page - 1] : NULL;
	struct span *next = page + n < h->map_pages ? h->map[page + n] : NULL;

	if (prev && prev->kind == SPAN_FREE) {
		list_remove(&h->bins[bin_of(prev->npages)], prev);
		h->map[prev->page + prev->npages - 1] = NULL;
		h->map[prev->page] = NULL;
		page = prev->page;
		n += prev->npages;
		span_free(h, prev);
	}
	if (next && next->kind == SPAN_FREE && next->page == page + n) {
		list_remove(&h->bins[bin_of(next->npages)], next);
		h->map[next->page] = NULL;
		h->map[next->page + next->npages - 1] = NULL;
		n += next->npages;
		span_free(h, next);
	}
	struct span *s = span_new(h, page, n, SPAN_FREE, 0);
	if (!s)
		return -ENOMEM;
	h->map[page] = s;
	h->map[page + n - 1] = s;
	list_insert(&h->bins[bin_of(n)], s);
	return 0;
}

/* Return a LARGE or SLAB span's pages to the free runs. */
static void release_span(struct alloc_heap *h, struct span *s)
{
	uint64_t page = s->page, n = s->npages;
	map_set(h, page, n, NULL);
	h->used_bytes -= n * PAGE;
	span_free(h, s);
	add_free(h, page, n);
}

/* Find n pages aligned to ap pages in the free runs; cut them out (the
 * caller maps them). -ENOSPC when no run fits. */
static int take_pages(struct alloc_heap *h, uint64_t n, uint64_t ap, uint64_t *ret_page)
{
	for (unsigned b = bin_of(n); b < NBINS; b++) {
		for (struct span *s = h->bins[b]; s; s = s->next) {
			uint64_t a = round_up(s->page, ap);
			if (a + n > s->page + s->npages)
				continue;
			uint64_t first = s->page, end = s->page + s->npages;
			list_remove(&h->bins[b], s);
			h->map[first] = NULL;
			h->map[end - 1] = NULL;
			span_free(h, s);
			/* The pieces left over are bounded by allocated pages
			 * (or the heap's ends), so they merge with nothing. */
			if (a > first)
				add_free(h, first, a - first);
			if (a + n < end)
				add_free(h, a + n, end - (a + n));
			h->used_bytes += n * PAGE;
			*ret_page = a;
			return 0;
		}
	}
	return -ENOSPC;
}

int alloc_heap_create(uint64_t reserve, uint64_t limit, uint64_t chunk, struct alloc_heap **ret)
{
	if (reserve > GPUSYS_ALLOC_MAX_RESERVE)
		reserve = GPUSYS_ALLOC_MAX_RESERVE;
	reserve -= reserve % GPUSYS_ALLOC_MAP_ALIGN;
	limit -= limit % GPUSYS_ALLOC_MAP_ALIGN;
	chunk = round_up(chunk ? chunk : GPUSYS_ALLOC_MAP_ALIGN, GPUSYS_ALLOC_MAP_ALIGN);
	if (limit > reserve)
		limit = reserve;
	if (limit == 0)
		return -EINVAL;
	struct alloc_heap *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->reserve = reserve;
	h->limit = limit;
	h->chunk = chunk;
	h->grant = chunk < limit ? chunk : limit;
	h->meta_bytes = sizeof(*h);
	*ret = h;
	return 0;
}

void alloc_heap_destroy(struct alloc_heap *h)
{
	if (!h)
		return;
	for (uint64_t p = 0; p < h->map_pages;) {
		struct span *s = h->map[p];
		if (!s) {
			p++;
			continue;
		}
		p = s->page + s->npages;
		free(s);
	}
	free(h->map);
	free(h);
}

void alloc_heap_set_mapped(struct alloc_heap *h, uint64_t word)
{
	/* Read before the client unmapped what the last shrink took: what it
	 * says is mapped may not be. */
	if (gpusys_alloc_word_epoch(word) != h->epoch)
		return;
	uint64_t mapped = gpusys_alloc_word_bytes(word);
	if (mapped > h->reported)
		h->reported = mapped;
	if (mapped > h->grant)
		mapped = h->grant;
	mapped -= mapped % PAGE;
	if (mapped <= h->mapped)
		return;
	uint64_t pages = mapped / PAGE, old = h->mapped / PAGE;
	struct span **m = realloc(h->map, pages * sizeof(*m));
	if (!m)
		return; /* stays at what we had: allocations wait, nothing breaks */
	memset(m + old, 0, (pages - old) * sizeof(*m));
	h->meta_bytes += (pages - h->map_pages) * sizeof(*m);
	h->map = m;
	h->map_pages = pages;
	if (add_free(h, old, pages - old) < 0)
		return;
	h->mapped = mapped;
}

uint64_t alloc_heap_grant(const struct alloc_heap *h)
{
	return gpusys_alloc_word(h->epoch, h->grant);
}

/* Shrink when the free run at the top of the mapping is at least half of
 * it: the growth doubles, so a heap that grows and shrinks by small steps
 * does not map and unmap at every one. The first grant always stays. */
int alloc_heap_shrink(struct alloc_heap *h)
{
	if (!h->map_pages || h->epoch >= GPUSYS_ALLOC_EPOCH_MAX)
		return 0;
	struct span *s = h->map[h->map_pages - 1];
	if (!s || s->kind != SPAN_FREE)
		return 0;
	uint64_t first = h->chunk < h->limit ? h->chunk : h->limit;
	uint64_t to = round_up(s->page * PAGE, GPUSYS_ALLOC_MAP_ALIGN);
	if (to < first)
		to = first;
	if (to >= h->mapped || (h->mapped - to) * 2 < h->mapped)
		return 0;
	uint64_t start = s->page, pages = to / PAGE;
	list_remove(&h->bins[bin_of(s->npages)], s);
	h->map[s->page] = NULL;
	h->map[s->page + s->npages - 1] = NULL;
	span_free(h, s);
	struct span **m = realloc(h->map, pages * sizeof(*m));
	if (m)
		h->map = m; /* else the old array stays, larger than needed */
	h->meta_bytes -= (h->map_pages - pages) * sizeof(*m);
	h->map_pages = pages;
	if (start < pages)
		add_free(h, start, pages - start); /* its neighbour below is not free */
	h->shrunk_bytes += h->mapped - to;
	h->shrinks++;
	h->mapped = to;
	h->grant = to;
	h->reported = to;
	h->epoch++;
	return 1;
}

uint64_t alloc_heap_shrinks(const struct alloc_heap *h, uint64_t *ret_bytes)
{
	*ret_bytes = h->shrunk_bytes;
	return h->shrinks;
}

void alloc_heap_count_enomem(struct alloc_heap *h)
{
	h->enomem++;
}

/* Grow the grant ahead of demand: when less than a quarter of it (and less
 * than a chunk) is left, or when need more bytes would not fit. Doubling by
 * at least a chunk keeps the number of mappings (milliseconds each while a
 * kernel runs) logarithmic in the heap's size. */
static void grow_ahead(struct alloc_heap *h, uint64_t need)
{
	uint64_t room = h->grant - h->used_bytes;
	uint64_t low = h->grant / 4 > h->chunk ? h->grant / 4 : h->chunk;
	if (h->grant >= h->limit || (room >= low && room >= need + h->chunk / 2))
		return;
	uint64_t step = h->grant > h->chunk ? h->grant : h->chunk;
	uint64_t g = h->grant + step;
	if (g < h->used_bytes + need + h->chunk)
		g = h->used_bytes + need + h->chunk;
	g = round_up(g, GPUSYS_ALLOC_MAP_ALIGN);
	h->grant = g < h->limit ? g : h->limit;
}

static int slot_take(struct alloc_heap *h, uint32_t cls, uint64_t *ret_off)
{
	struct span *s = h->partial[cls];
	if (!s) {
		uint64_t page;
		uint32_t nslots = GPUSYS_ALLOC_SLAB_BYTES / gpusys_alloc_class_bytes(cls);
		int r = take_pages(h, SLAB_PAGES, 1, &page);
		if (r < 0)
			return r;
		s = span_new(h, page, SLAB_PAGES, SPAN_SLAB, (nslots + 63u) / 64u);
		if (!s) {
			h->used_bytes -= SLAB_PAGES * PAGE;
			add_free(h, page, SLAB_PAGES);
			return -ENOMEM;
		}
		s->cls = (uint8_t)cls;
		s->nslots = nslots;
		map_set(h, page, SLAB_PAGES, s);
		list_insert(&h->partial[cls], s);
		h->slabs[cls]++;
	}
	uint32_t words = (s->nslots + 63u) / 64u;
	for (uint32_t k = 0; k < words; k++) {
		uint32_t w = (s->hint + k) % words;
		uint64_t freebits = ~s->live[w];
		if (s->nslots - w * 64u < 64u)
			freebits &= (UINT64_C(1) << (s->nslots - w * 64u)) - 1;
		if (!freebits)
			continue;
		uint32_t bit = (uint32_t)__builtin_ctzll(freebits);
		s->live[w] |= UINT64_C(1) << bit;
		s->hint = w;
		if (++s->nlive == s->nslots)
			list_remove(&h->partial[cls], s);
		h->live_bytes += gpusys_alloc_class_bytes(cls);
		h->live_blocks++;
		*ret_off = s->page * PAGE + (uint64_t)(w * 64u + bit) * gpusys_alloc_class_bytes(cls);
		return 0;
	}
	return -EIO; /* a partial slab without a free slot: cannot happen */
}

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

int alloc_heap_malloc(struct alloc_heap *h, uint64_t size, uint64_t align, uint64_t *ret_off)
{
	if (!align)
		align = GPUSYS_ALLOC_GRANULE;
	if (size == 0 || size > h->limit || !pow2(align) || align > GPUSYS_ALLOC_MAX_ALIGN)
		return -EINVAL;
	uint32_t cls = gpusys_alloc_class_of(size, align);
	uint64_t need;
	int r;
again:
	if (cls < GPUSYS_ALLOC_CLASSES) {
		need = GPUSYS_ALLOC_SLAB_BYTES;
		r = slot_take(h, cls, ret_off);
	} else {
		uint64_t n = round_up(size, PAGE) / PAGE, ap = align > PAGE ? align / PAGE : 1;
		uint64_t page;
		need = (n + ap - 1) * PAGE;
		r = take_pages(h, n, ap, &page);
		if (r == 0) {
			struct span *s = span_new(h, page, n, SPAN_LARGE, 0);
			if (!s) {
				h->used_bytes -= n * PAGE;
				add_free(h, page, n);
				return -ENOMEM;
			}
			map_set(h, page, n, s);
			h->live_bytes += n * PAGE;
			h->live_blocks++;
			*ret_off = page * PAGE;
		}
	}
	if (r == 0) {
		h->mallocs++;
		grow_ahead(h, 0);
		return 0;
	}
	if (r != -ENOSPC)
		return r;
	grow_ahead(h, need);
	/* The client may have mapped more than the grant was (after a shrink
	 * it cancelled, its mapping reaches past the grant): what it reported
	 * counts up to the new grant at once, or it would wait for a mapping
	 * it never needs to make. */
	if (h->reported > h->mapped && h->mapped < h->grant) {
		uint64_t was = h->mapped;
		alloc_heap_set_mapped(h, gpusys_alloc_word(h->epoch, h->reported));
		if (h->mapped > was)
			goto again;
	}
	if (h->mapped < h->grant) {
		h->eagain++;
		return -EAGAIN;
	}
	h->enomem++;
	return -ENOMEM;
}

uint32_t alloc_heap_refill(struct alloc_heap *h, uint32_t cls, uint32_t n, uint64_t *offs)
{
	uint32_t got = 0;
	if (cls >= GPUSYS_ALLOC_CLASSES)
		return 0;
	while (got < n && slot_take(h, cls, &offs[got]) == 0)
		got++;
	h->mallocs += got;
	if (got)
		grow_ahead(h, 0);
	return got;
}

/* Which span holds off, and is off the start of a live block there? */
static int lookup(struct alloc_heap *h, uint64_t off, struct span **ret_span, uint32_t *ret_slot)
{
	if (off >= h->reserve) {
		h->refused_foreign++;
		return -EFAULT;
	}
	uint64_t page = off / PAGE;
	struct span *s = page < h->map_pages ? h->map[page] : NULL;
	if (!s || s->kind == SPAN_FREE) {
		h->refused_unallocated++;
		return -ENOENT;
	}
	uint64_t rel = off - s->page * PAGE;
	if (s->kind == SPAN_LARGE) {
		if (rel) {
			h->refused_interior++;
			return -EINVAL;
		}
		*ret_span = s;
		return 0;
	}
	uint32_t cs = gpusys_alloc_class_bytes(s->cls);
	uint32_t slot = (uint32_t)(rel / cs);
	if (!(s->live[slot / 64u] >> (slot % 64u) & 1u)) {
		h->refused_unallocated++;
		return -ENOENT;
	}
	if (rel % cs) {
		h->refused_interior++;
		return -EINVAL;
	}
	*ret_span = s;
	*ret_slot = slot;
	return 0;
}

int alloc_heap_free(struct alloc_heap *h, uint64_t off)
{
	struct span *s;
	uint32_t slot = 0;
	int r = lookup(h, off, &s, &slot);
	if (r < 0)
		return r;
	h->frees++;
	h->live_blocks--;
	if (s->kind == SPAN_LARGE) {
		h->live_bytes -= s->npages * PAGE;
		release_span(h, s);
		return 0;
	}
	uint32_t cls = s->cls;
	s->live[slot / 64u] &= ~(UINT64_C(1) << (slot % 64u));
	h->live_bytes -= gpusys_alloc_class_bytes(cls);
	if (s->nlive-- == s->nslots)
		list_insert(&h->partial[cls], s);
	/* An empty slab goes back to the page runs unless it is its class's
	 * last one: a warp that frees and mallocs one block in a loop must
	 * not carve and release a slab each time. */
	if (s->nlive == 0 && h->slabs[cls] > 1) {
		list_remove(&h->partial[cls], s);
		h->slabs[cls]--;
		release_span(h, s);
	}
	return 0;
}

int alloc_heap_usable(struct alloc_heap *h, uint64_t off, uint64_t *ret_size)
{
	struct span *s;
	uint32_t slot = 0;
	int r = lookup(h, off, &s, &slot);
	if (r < 0)
		return r;
	*ret_size = s->kind == SPAN_LARGE ? s->npages * PAGE : gpusys_alloc_class_bytes(s->cls);
	return 0;
}

void alloc_heap_stat(const struct alloc_heap *h, struct gpusys_alloc_stat *st)
{
	st->reserve = h->reserve;
	st->limit = h->limit;
	st->grant = h->grant;
	st->mapped = h->mapped;
	st->live_bytes = h->live_bytes;
	st->used_bytes = h->used_bytes;
	st->live_blocks = h->live_blocks;
	st->mallocs = h->mallocs;
	st->frees = h->frees;
	st->enomem = h->enomem;
	st->eagain = h->eagain;
	st->refused_foreign = h->refused_foreign;
	st->refused_interior = h->refused_interior;
	st->refused_unallocated = h->refused_unallocated;
	st->meta_bytes = h->meta_bytes;
}

void alloc_heap_foreach_live(const struct alloc_heap *h, void (*fn)(uint64_t off, uint64_t size, void *arg),
			     void *arg)
{
	for (uint64_t p = 0; p < h->map_pages;) {
		struct span *s = h->map[p];
		if (!s) {
			p++;
			continue;
		}
		if (s->kind == SPAN_LARGE)
			fn(s->page * PAGE, s->npages * PAGE, arg);
		if (s->kind == SPAN_SLAB) {
			uint32_t cs = gpusys_alloc_class_bytes(s->cls);
			for (uint32_t i = 0; i < s->nslots; i++) {
				if (s->live[i / 64u] >> (i % 64u) & 1u)
					fn(s->page * PAGE + (uint64_t)i * cs, cs, arg);
			}
		}
		p = s->page + s->npages;
	}
}
