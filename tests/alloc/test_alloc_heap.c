/* SPDX-License-Identifier: MIT */
/* The daemon's heap metadata alone: random malloc/free against a model (no
 * two live blocks overlap, sizes and alignments kept), growth, ENOMEM and
 * recovery, and every kind of bad free refused and counted. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "services/alloc/alloc_heap.h"

#define MiB (UINT64_C(1) << 20)

/* Map all that is granted, as a client's mapping thread would. */
static void map_all(struct alloc_heap *h)
{
	alloc_heap_set_mapped(h, alloc_heap_grant(h));
}

/* malloc, mapping and retrying on -EAGAIN like the device does. */
static int xmalloc(struct alloc_heap *h, uint64_t size, uint64_t align, uint64_t *off)
{
	for (int tries = 0; tries < 64; tries++) {
		int r = alloc_heap_malloc(h, size, align, off);
		if (r != -EAGAIN)
			return r;
		map_all(h);
	}
	return -EAGAIN;
}

struct live {
	uint64_t off, size;
};

static int cmp_live(const void *a, const void *b)
{
	const struct live *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct walk {
	struct live *v;
	size_t n, cap;
};

static void collect(uint64_t off, uint64_t size, void *arg)
{
	struct walk *w = arg;
	assert_true(w->n < w->cap);
	w->v[w->n].off = off;
	w->v[w->n].size = size;
	w->n++;
}

/* The heap's own list of live blocks: sorted, none overlapping, each
 * inside what is mapped. */
static void check_no_overlap(struct alloc_heap *h, size_t expect_blocks)
{
	struct gpusys_alloc_stat st;
	alloc_heap_stat(h, &st);
	struct walk w = { calloc(expect_blocks + 1, sizeof(struct live)), 0, expect_blocks + 1 };
	alloc_heap_foreach_live(h, collect, &w);
	assert_int_equal(w.n, expect_blocks);
	assert_int_equal(st.live_blocks, expect_blocks);
	qsort(w.v, w.n, sizeof(*w.v), cmp_live);
	for (size_t i = 0; i < w.n; i++) {
		assert_true(w.v[i].off + w.v[i].size <= st.mapped);
		if (i)
			assert_true(w.v[i - 1].off + w.v[i - 1].size <= w.v[i].off);
	}
	free(w.v);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void test_random(void **unused)
{
	(void)unused;
	struct alloc_heap *h;
	assert_int_equal(alloc_heap_create(256 * MiB, 256 * MiB, 2 * MiB, &h), 0);
	enum { N = 4000 };
	struct live *blk = calloc(N, sizeof(*blk));
	uint64_t seed = 0x9e3779b97f4a7c15u;
	size_t nlive = 0;
	for (int i = 0; i < 200000; i++) {
		size_t k = rnd(&seed) % N;
		if (blk[k].size) {
			assert_int_equal(alloc_heap_free(h, blk[k].off), 0);
			blk[k].size = 0;
			nlive--;
			continue;
		}
		uint64_t r = rnd(&seed);
		uint64_t size = r % 4 == 0 ? 1 + r % (200 * 1024) : 1 + r % 3000;
		uint64_t align = (r >> 20) % 8 == 0 ? UINT64_C(1) << ((r >> 24) % 22) : 0;
		uint64_t off;
		assert_int_equal(xmalloc(h, size, align, &off), 0);
		assert_int_equal(off % GPUSYS_ALLOC_GRANULE, 0);
		if (align)
			assert_int_equal(off % align, 0);
		uint64_t usable;
		assert_int_equal(alloc_heap_usable(h, off, &usable), 0);
		assert_true(usable >= size);
		blk[k].off = off;
		blk[k].size = size;
		nlive++;
		if (i % 20000 == 0)
			check_no_overlap(h, nlive);
	}
	check_no_overlap(h, nlive);
	for (size_t k = 0; k < N; k++) {
		if (blk[k].size)
			assert_int_equal(alloc_heap_free(h, blk[k].off), 0);
	}
	struct gpusys_alloc_stat st;
	alloc_heap_stat(h, &st);
	assert_int_equal(st.live_blocks, 0);
	assert_int_equal(st.live_bytes, 0);
	/* one slab per class may stay cached; everything else coalesced back */
	assert_true(st.used_bytes <= GPUSYS_ALLOC_CLASSES * GPUSYS_ALLOC_SLAB_BYTES);
	assert_int_equal(st.refused_foreign + st.refused_interior + st.refused_unallocated, 0);
	free(blk);
	alloc_heap_destroy(h);
}

static void test_bad_frees(void **unused)
{
	(void)unused;
	struct alloc_heap *h;
	assert_int_equal(alloc_heap_create(64 * MiB, 64 * MiB, 4 * MiB, &h), 0);
	uint64_t small, large, other;
	assert_int_equal(xmalloc(h, 24, 0, &small), 0);
	assert_int_equal(xmalloc(h, 24, 0, &other), 0);
	assert_int_equal(xmalloc(h, 10000, 0, &large), 0);

	assert_int_equal(alloc_heap_free(h, 64 * MiB + 16), -EFAULT);      /* foreign */
	assert_int_equal(alloc_heap_free(h, UINT64_MAX - 5), -EFAULT);     /* below the base */
	assert_int_equal(alloc_heap_free(h, small + 64), -ENOENT);         /* slot 2 of class 32 B: unused */
	assert_int_equal(alloc_heap_free(h, small + 8), -EINVAL);          /* interior, small */
	assert_int_equal(alloc_heap_free(h, large + 4096), -EINVAL);       /* interior, large */
	assert_int_equal(alloc_heap_free(h, 60 * MiB), -ENOENT);           /* reserved, not mapped */
	assert_int_equal(alloc_heap_free(h, small), 0);
	assert_int_equal(alloc_heap_free(h, small), -ENOENT);              /* double free, small */
	assert_int_equal(alloc_heap_free(h, large), 0);
	assert_int_equal(alloc_heap_free(h, large), -ENOENT);              /* double free, large */
	assert_int_equal(alloc_heap_free(h, large + 4096), -ENOENT);       /* into a free run */
	struct gpusys_alloc_stat st;
	alloc_heap_stat(h, &st);
	assert_int_equal(st.refused_foreign, 2);
	assert_int_equal(st.refused_interior, 2);
	assert_int_equal(st.refused_unallocated, 5);
	/* the block beside the refused ones was left alone */
	check_no_overlap(h, 1);
	assert_int_equal(alloc_heap_free(h, other), 0);
	alloc_heap_destroy(h);
}

static void test_limit(void **unused)
{
	(void)unused;
	struct alloc_heap *h;
	assert_int_equal(alloc_heap_create(1024 * MiB, 32 * MiB, 2 * MiB, &h), 0);
	/* Grants grow ahead, never past the limit. */
	uint64_t offs[64];
	int n = 0, r;
	uint64_t last_grant = alloc_heap_grant(h);
	assert_int_equal(last_grant, 2 * MiB);
	for (;;) {
		r = xmalloc(h, 1 * MiB, 0, &offs[n]);
		if (r)
			break;
		assert_true(alloc_heap_grant(h) >= last_grant);
		assert_true(alloc_heap_grant(h) <= 32 * MiB);
		last_grant = alloc_heap_grant(h);
		n++;
		assert_true(n < 64);
	}
	assert_int_equal(r, -ENOMEM);
	assert_int_equal(n, 32);
	/* Larger than the limit: refused at once. */
	assert_int_equal(alloc_heap_malloc(h, 33 * MiB, 0, &offs[63]), -EINVAL);
	/* Recovery: the 32 blocks fill the limit exactly, so sorted they are
	 * back to back; free two neighbours and a 2 MiB block fits again
	 * (coalesced), a third does not. */
	qsort(offs, (size_t)n, sizeof(offs[0]), cmp_u64);
	for (int i = 0; i < n; i++)
		assert_int_equal(offs[i], (uint64_t)i * MiB);
	assert_int_equal(alloc_heap_free(h, offs[10]), 0);
	assert_int_equal(alloc_heap_free(h, offs[11]), 0);
	uint64_t big, more;
	assert_int_equal(alloc_heap_malloc(h, 2 * MiB, 0, &big), 0);
	assert_int_equal(big, offs[10]);
	assert_int_equal(alloc_heap_malloc(h, 16, 0, &more), -ENOMEM);
	struct gpusys_alloc_stat st;
	alloc_heap_stat(h, &st);
	assert_true(st.enomem >= 1);
	assert_int_equal(st.grant, 32 * MiB);
	alloc_heap_destroy(h);
}

static void test_refill(void **unused)
{
	(void)unused;
	struct alloc_heap *h;
	assert_int_equal(alloc_heap_create(64 * MiB, 64 * MiB, 2 * MiB, &h), 0);
	map_all(h);
	uint64_t offs[100];
	for (uint32_t c = 0; c < GPUSYS_ALLOC_CLASSES; c++) {
		uint32_t got = alloc_heap_refill(h, c, 100, offs);
		assert_int_equal(got, 100);
		for (uint32_t i = 0; i < got; i++) {
			uint64_t u;
			assert_int_equal(offs[i] % gpusys_alloc_class_bytes(c), 0);
			assert_int_equal(alloc_heap_usable(h, offs[i], &u), 0);
			assert_int_equal(u, gpusys_alloc_class_bytes(c));
		}
	}
	check_no_overlap(h, 800);
	/* Refill never waits nor grows past what is mapped. */
	struct alloc_heap *t;
	assert_int_equal(alloc_heap_create(64 * MiB, 64 * MiB, 2 * MiB, &t), 0);
	assert_int_equal(alloc_heap_refill(t, 0, 10, offs), 0);
	alloc_heap_destroy(t);
	alloc_heap_destroy(h);
}

/* The heap shrinks when its top half is free again: the grant drops, a new
 * epoch begins, and a report of what was mapped read before the shrink is
 * not believed (the client may have unmapped it since), while one of the
 * new epoch is. A live block at the top keeps the heap. */
static void test_shrink(void **unused)
{
	(void)unused;
	struct alloc_heap *h;
	assert_int_equal(alloc_heap_create(UINT64_C(1) << 30, 512 * MiB, 4 * MiB, &h), 0);
	map_all(h);
	uint64_t low, off[64];
	assert_int_equal(xmalloc(h, MiB, 0, &low), 0);
	int n = 0;
	while (gpusys_alloc_word_bytes(alloc_heap_grant(h)) < 128 * MiB) {
		assert_true(n < 64);
		assert_int_equal(xmalloc(h, 8 * MiB, 0, &off[n]), 0);
		n++;
	}
	map_all(h);
	struct gpusys_alloc_stat st;
	alloc_heap_stat(h, &st);
	uint64_t stale = gpusys_alloc_word(0, st.mapped);
	assert_true(st.mapped >= 128 * MiB);
	/* One block still live: a shrink may take the free run above it,
	 * never the block. */
	uint64_t top = off[0];
	int ti = 0;
	for (int i = 1; i < n; i++)
		if (off[i] > top)
			top = off[i], ti = i;
	for (int i = 0; i < n; i++)
		if (i != ti)
			assert_int_equal(alloc_heap_free(h, off[i]), 0);
	uint32_t epoch = alloc_heap_shrink(h);
	alloc_heap_stat(h, &st);
	assert_true(st.mapped >= top + 8 * MiB);
	assert_int_equal(gpusys_alloc_word_epoch(alloc_heap_grant(h)), epoch);
	assert_int_equal(alloc_heap_free(h, top), 0);
	assert_int_equal(alloc_heap_shrink(h), 1);
	uint64_t g = alloc_heap_grant(h);
	assert_int_equal(gpusys_alloc_word_epoch(g), epoch + 1);
	alloc_heap_stat(h, &st);
	assert_true(st.mapped < 128 * MiB);
	assert_true(st.mapped >= low + MiB && st.mapped >= 4 * MiB);
	assert_int_equal(gpusys_alloc_word_bytes(g), st.mapped);
	uint64_t bytes = 0;
	assert_int_equal(alloc_heap_shrinks(h, &bytes), epoch + 1);
	assert_true(bytes >= 64 * MiB);
	/* nothing more to take */
	assert_int_equal(alloc_heap_shrink(h), 0);

	/* A large block no longer fits: the grant grows, but a report read
	 * before the shrink is not believed. */
	uint64_t big;
	assert_int_equal(alloc_heap_malloc(h, 64 * MiB, 0, &big), -EAGAIN);
	alloc_heap_set_mapped(h, stale);
	assert_int_equal(alloc_heap_malloc(h, 64 * MiB, 0, &big), -EAGAIN);
	struct gpusys_alloc_stat st2;
	alloc_heap_stat(h, &st2);
	assert_int_equal(st2.mapped, st.mapped);
	/* the client maps in the new epoch: now it fits, below the mapping */
	map_all(h);
	assert_int_equal(alloc_heap_malloc(h, 64 * MiB, 0, &big), 0);
	alloc_heap_stat(h, &st2);
	assert_true(big + 64 * MiB <= st2.mapped);
	assert_int_equal(alloc_heap_free(h, big), 0);
	assert_int_equal(alloc_heap_free(h, low), 0);
	alloc_heap_destroy(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_bad_frees),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_refill),
		cmocka_unit_test(test_shrink),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
