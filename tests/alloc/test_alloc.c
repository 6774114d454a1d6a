/* SPDX-License-Identifier: MIT */
/*
 * The alloc service end to end: the real gpusysd, emulated warps running
 * the device code (device/alloc_client.h) over a heap of host memory that
 * libgpusys maps as the daemon grants it. 10^6 random malloc/realloc/free
 * from many warps with every block's contents written and checked (no two
 * live blocks overlap), growth to the limit, ENOMEM and recovery, bad frees
 * refused and counted, a killed client's heap gone from the daemon, two
 * clients' heaps isolated.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"

#define L GPUSYS_WARP_LANES
#define MiB (UINT64_C(1) << 20)
#define LIMIT (64 * MiB)
#define CHUNK (4 * MiB)

static struct gd daemon_;

struct cl {
	gpusys_t *c;
	struct gpusys_emu *emu;
	struct gpusys_emu_heap *heap;
	const gpusys_dev_t *dev;
	const gpusys_heap_dev_t *hp;
};

static void cl_attach(struct cl *k, uint32_t ports, uint64_t reserve)
{
	struct gpusys_options o = {
		.runtime_dir = daemon_.runtime,
		.num_ports = ports,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD,
	};
	assert_int_equal(gpusys_attach(&o, &k->c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(k->c), &k->emu), 0);
	assert_int_equal(gpusys_emu_heap_open(reserve, ports, &k->heap), 0);
	k->dev = gpusys_emu_dev(k->emu);
	k->hp = gpusys_emu_heap_dev(k->heap);
}

static void cl_detach(struct cl *k)
{
	gpusys_emu_heap_close(k->heap);
	gpusys_emu_close(k->emu);
	gpusys_detach(k->c);
}

static struct gpusys_alloc_stat stat_of(const struct cl *k)
{
	struct gpusys_alloc_stat st;
	memset(&st, 0, sizeof(st));
	assert_int_equal(gpusys_emu_alloc_stat(k->dev, k->hp, &st), 0);
	return st;
}

/* One lane's call. */
static void *one_malloc(const struct cl *k, uint64_t size, int32_t *err)
{
	uint64_t s[L] = { size };
	void *r[L];
	int32_t e[L];
	gpusys_emu_malloc(k->dev, k->hp, 1, s, r, e);
	*err = e[0];
	return r[0];
}

static int32_t one_free(const struct cl *k, void *p)
{
	void *pv[L] = { p };
	int32_t e[L];
	gpusys_emu_free(k->dev, k->hp, 1, pv, e);
	return e[0];
}

/* ------------------------------------------------------ block contents */

static uint64_t pattern(uint64_t tag)
{
	return tag ^ UINT64_C(0xa5a5a5a5a5a5a5a5);
}

static void fill(void *p, uint64_t size, uint64_t tag)
{
	uint64_t w = pattern(tag), *q = p;
	for (uint64_t i = 0; i < size / 8; i++)
		q[i] = w;
	/* the tail as the same word's bytes: a shorter check of a prefix
	 * (what realloc kept) reads what fill wrote */
	for (uint64_t i = size / 8 * 8; i < size; i++)
		((uint8_t *)p)[i] = (uint8_t)(w >> (8 * (i % 8)));
}

static int check(const void *p, uint64_t size, uint64_t tag)
{
	uint64_t w = pattern(tag);
	const uint64_t *q = p;
	for (uint64_t i = 0; i < size / 8; i++) {
		if (q[i] != w)
			return 0;
	}
	for (uint64_t i = size / 8 * 8; i < size; i++) {
		if (((const uint8_t *)p)[i] != (uint8_t)(w >> (8 * (i % 8))))
			return 0;
	}
	return 1;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Mostly small blocks (the cache's), some pages, a few large ones. */
static uint64_t rnd_size(uint64_t *s)
{
	uint64_t r = rnd(s);
	switch (r % 100) {
	case 0:
		return 16384 + (r >> 8) % (240 * 1024);
	case 1 ... 10:
		return 2049 + (r >> 8) % 14000;
	default:
		return 1 + (r >> 8) % 2048;
	}
}

/* ------------------------------------------------------ random workload */

#define WARPS 8
#define ENTRIES 16 /* live blocks per lane, at most */
#define OPS_TOTAL 1000000

struct entry {
	uint8_t *p;
	uint64_t size, tag;
};

struct warp_job {
	struct cl *k;
	uint32_t warp;
	uint64_t ops, bad;
	struct entry e[L][ENTRIES];
};

static void *warp_main(void *arg)
{
	struct warp_job *j = arg;
	const struct cl *k = j->k;
	uint64_t seed = 0x1234567ull + j->warp * 7919ull, tag = (uint64_t)j->warp << 40;
	gpusys_emu_set_warp(j->warp);
	while (j->ops < OPS_TOTAL / WARPS) {
		/* each lane picks an entry and an op on it */
		uint32_t idx[L];
		uint64_t mm = 0, mr = 0, mf = 0, size[L];
		void *ptr[L], *ret[L];
		int32_t err[L];
		for (uint32_t l = 0; l < L; l++) {
			uint64_t r = rnd(&seed);
			idx[l] = (uint32_t)(r % ENTRIES);
			struct entry *e = &j->e[l][idx[l]];
			if (r >> 60 == 0)
				continue; /* an inactive lane */
			if (!e->p) {
				mm |= UINT64_C(1) << l;
				size[l] = rnd_size(&seed);
			} else if ((r >> 8) % 4 == 0) {
				mr |= UINT64_C(1) << l;
				size[l] = rnd_size(&seed);
				ptr[l] = e->p;
			} else {
				mf |= UINT64_C(1) << l;
				ptr[l] = e->p;
			}
		}
		if (mm) {
			gpusys_emu_malloc(k->dev, k->hp, mm, size, ret, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(mm >> l & 1))
					continue;
				struct entry *e = &j->e[l][idx[l]];
				if (err[l] || !ret[l]) {
					if (getenv("ALLOC_DEBUG"))
						fprintf(stderr, "malloc %llu: %d\n", (unsigned long long)size[l], err[l]);
					j->bad++;
					continue;
				}
				e->p = ret[l];
				e->size = size[l];
				e->tag = ++tag;
				fill(e->p, e->size, e->tag);
			}
		}
		if (mr) {
			for (uint32_t l = 0; l < L; l++) {
				if (mr >> l & 1 && !check(j->e[l][idx[l]].p, j->e[l][idx[l]].size, j->e[l][idx[l]].tag))
					j->bad++;
			}
			gpusys_emu_realloc(k->dev, k->hp, mr, ptr, size, ret, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(mr >> l & 1))
					continue;
				struct entry *e = &j->e[l][idx[l]];
				if (err[l] || !ret[l]) {
					if (getenv("ALLOC_DEBUG"))
						fprintf(stderr, "realloc %llu: %d\n", (unsigned long long)size[l], err[l]);
					j->bad++;
					continue;
				}
				/* what the old block held came along */
				uint64_t keep = e->size < size[l] ? e->size : size[l];
				if (!check(ret[l], keep, e->tag)) {
					if (getenv("ALLOC_DEBUG"))
						fprintf(stderr, "realloc lost contents %p->%p %llu: tag %llx, found %llx\n", (void *)e->p, ret[l], (unsigned long long)keep, (unsigned long long)e->tag, (unsigned long long)(*(uint64_t *)ret[l] ^ 0xa5a5a5a5a5a5a5a5ull));
					j->bad++;
				}
				e->p = ret[l];
				e->size = size[l];
				e->tag = ++tag;
				fill(e->p, e->size, e->tag);
			}
		}
		if (mf) {
			for (uint32_t l = 0; l < L; l++) {
				if (mf >> l & 1 && !check(j->e[l][idx[l]].p, j->e[l][idx[l]].size, j->e[l][idx[l]].tag))
					j->bad++;
			}
			gpusys_emu_free(k->dev, k->hp, mf, ptr, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(mf >> l & 1))
					continue;
				if (err[l]) {
					if (getenv("ALLOC_DEBUG"))
						fprintf(stderr, "free %p: %d\n", ptr[l], err[l]);
					j->bad++;
				}
				j->e[l][idx[l]].p = NULL;
			}
		}
		j->ops += (uint64_t)__builtin_popcountll(mm) + __builtin_popcountll(mr) + __builtin_popcountll(mf);
	}
	return NULL;
}

struct span {
	uint8_t *p;
	uint64_t size;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return x->p < y->p ? -1 : x->p > y->p;
}

static void test_random_million(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, WARPS, 256 * MiB);
	struct warp_job *jobs = calloc(WARPS, sizeof(*jobs));
	pthread_t th[WARPS];
	for (uint32_t w = 0; w < WARPS; w++) {
		jobs[w].k = &k;
		jobs[w].warp = w;
		assert_int_equal(pthread_create(&th[w], NULL, warp_main, &jobs[w]), 0);
	}
	uint64_t ops = 0;
	for (uint32_t w = 0; w < WARPS; w++) {
		pthread_join(th[w], NULL);
		assert_int_equal(jobs[w].bad, 0);
		ops += jobs[w].ops;
	}
	assert_true(ops >= OPS_TOTAL);

	/* Every live block, over all warps: checked, and none overlaps another. */
	struct span *v = calloc(WARPS * L * ENTRIES, sizeof(*v));
	size_t n = 0;
	for (uint32_t w = 0; w < WARPS; w++) {
		for (uint32_t l = 0; l < L; l++) {
			for (uint32_t i = 0; i < ENTRIES; i++) {
				struct entry *e = &jobs[w].e[l][i];
				if (!e->p)
					continue;
				assert_true(check(e->p, e->size, e->tag));
				assert_true(e->p >= k.hp->base && e->p + e->size <= k.hp->base + k.hp->reserve);
				v[n].p = e->p;
				v[n].size = e->size;
				n++;
			}
		}
	}
	qsort(v, n, sizeof(*v), cmp_span);
	for (size_t i = 1; i < n; i++)
		assert_true(v[i - 1].p + v[i - 1].size <= v[i].p);

	struct gpusys_alloc_stat st = stat_of(&k);
	/* the daemon's live blocks: ours plus those in the device caches */
	assert_true(st.live_blocks >= n);
	assert_true(st.live_blocks <= n + (uint64_t)WARPS * GPUSYS_ALLOC_CLASSES * GPUSYS_ALLOC_CACHE_CAP);
	assert_int_equal(st.refused_foreign + st.refused_interior + st.refused_unallocated, 0);
	/* most small mallocs came from the cache: far fewer round trips than
	 * blocks (the daemon counts refills as mallocs too, so compare its
	 * malloc requests with ours through the realloc/free counts) */
	printf("# %llu ops, %zu live blocks, daemon: %llu mallocs %llu frees %llu reallocs, grant %llu MiB, "
	       "meta %llu KiB\n",
	       (unsigned long long)ops, n, (unsigned long long)st.mallocs, (unsigned long long)st.frees,
	       (unsigned long long)st.reallocs, (unsigned long long)(st.grant >> 20),
	       (unsigned long long)(st.meta_bytes >> 10));
	free(v);
	free(jobs);
	cl_detach(&k);
}

/* The device cache serves most small mallocs without a round trip. */
static void test_cache_saves_round_trips(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 64 * MiB);
	uint64_t before = gpusys_emu_submitted(k.emu);
	uint64_t s[L];
	void *r[L];
	int32_t e[L];
	for (uint32_t l = 0; l < L; l++)
		s[l] = 48;
	enum { ROUNDS = 64 };
	void *keep[ROUNDS][L];
	for (int i = 0; i < ROUNDS; i++) {
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, r, e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			assert_non_null(r[l]);
			assert_int_equal((uintptr_t)r[l] % 64, 0); /* class 64 B, aligned to it */
			keep[i][l] = r[l];
		}
	}
	uint64_t trips = gpusys_emu_submitted(k.emu) - before;
	/* 2048 blocks; each round trip brings 32 x (1 + 9 extra) at most,
	 * bounded by the cache's capacity: well under one trip per warp call */
	printf("# 64 warp mallocs of 32 x 48 B: %llu round trips\n", (unsigned long long)trips);
	assert_true(trips < ROUNDS);
	for (int i = 0; i < ROUNDS; i++) {
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	cl_detach(&k);
}

static void test_calloc_realloc_aligned(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 64 * MiB);
	uint64_t n[L], sz[L], al[L];
	void *r[L], *r2[L];
	int32_t e[L];
	/* calloc: zeroed even when the cache hands back a used block */
	void *p;
	int32_t err;
	p = one_malloc(&k, 100, &err);
	assert_int_equal(err, 0);
	memset(p, 0xab, 100);
	assert_int_equal(one_free(&k, p), 0);
	for (uint32_t l = 0; l < L; l++)
		n[l] = 1 + l, sz[l] = 3 + 5 * l;
	gpusys_emu_calloc(k.dev, k.hp, 0xffffffffu, n, sz, r, e);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(e[l], 0);
		for (uint64_t i = 0; i < n[l] * sz[l]; i++)
			assert_int_equal(((uint8_t *)r[l])[i], 0);
	}
	gpusys_emu_free(k.dev, k.hp, 0xffffffffu, r, e);
	/* calloc overflow */
	n[0] = UINT64_MAX / 2;
	sz[0] = 4;
	gpusys_emu_calloc(k.dev, k.hp, 1, n, sz, r, e);
	assert_int_equal(e[0], -ENOMEM);
	assert_null(r[0]);

	/* aligned_alloc: every power of two up to 2 MiB */
	for (uint32_t l = 0; l < 22; l++)
		al[l] = UINT64_C(1) << l, sz[l] = 1 + l * 100;
	gpusys_emu_aligned_alloc(k.dev, k.hp, (1u << 22) - 1, al, sz, r, e);
	for (uint32_t l = 0; l < 22; l++) {
		assert_int_equal(e[l], 0);
		assert_int_equal((uintptr_t)r[l] % al[l], 0);
	}
	gpusys_emu_free(k.dev, k.hp, (1u << 22) - 1, r, e);
	al[0] = 48; /* not a power of two */
	sz[0] = 10;
	gpusys_emu_aligned_alloc(k.dev, k.hp, 1, al, sz, r, e);
	assert_int_equal(e[0], -EINVAL);

	/* realloc: grows (moves), shrinks (stays), NULL is malloc, 0 is free */
	for (uint32_t l = 0; l < L; l++)
		sz[l] = 40;
	gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, sz, r, e);
	for (uint32_t l = 0; l < L; l++) {
		fill(r[l], 40, l);
		sz[l] = 5000 + l;
	}
	gpusys_emu_realloc(k.dev, k.hp, 0xffffffffu, r, sz, r2, e);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(e[l], 0);
		assert_ptr_not_equal(r2[l], r[l]);
		assert_true(check(r2[l], 40, l));
		assert_int_equal(one_free(&k, r[l]), -ENOENT); /* the old block went back */
		sz[l] = 4900;
	}
	gpusys_emu_realloc(k.dev, k.hp, 0xffffffffu, r2, sz, r, e);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(e[l], 0);
		assert_ptr_equal(r[l], r2[l]);
		sz[l] = 0;
	}
	gpusys_emu_realloc(k.dev, k.hp, 0xffffffffu, r, sz, r2, e);
	for (uint32_t l = 0; l < L; l++) {
		assert_int_equal(e[l], 0);
		assert_null(r2[l]);
		assert_int_equal(one_free(&k, r[l]), -ENOENT);
	}
	void *nul[L] = { NULL };
	sz[0] = 77;
	gpusys_emu_realloc(k.dev, k.hp, 1, nul, sz, r, e);
	assert_int_equal(e[0], 0);
	assert_non_null(r[0]);
	assert_int_equal(one_free(&k, r[0]), 0);
	cl_detach(&k);
}

/* Growth from nothing to the limit, ENOMEM, and recovery after frees. */
/* A client that closes its heap and opens another gets a fresh heap: the
 * daemon forgets the old range (whose memory the client unmapped). */
static void test_reopen(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 64 * MiB);
	int32_t err;
	void *p = one_malloc(&k, 3 * MiB, &err);
	assert_non_null(p);
	struct gpusys_alloc_stat st = stat_of(&k);
	assert_int_equal(st.live_blocks, 1);
	uint64_t heaps = st.all_heaps;
	gpusys_emu_heap_close(k.heap);
	assert_int_equal(gpusys_emu_heap_open(32 * MiB, 2, &k.heap), 0);
	k.hp = gpusys_emu_heap_dev(k.heap);
	for (int i = 0; i < 3; i++) {
		uint8_t *q = one_malloc(&k, MiB, &err);
		assert_int_equal(err, 0);
		assert_true(q >= k.hp->base && q + MiB <= k.hp->base + k.hp->reserve);
		memset(q, 1, MiB); /* mapped in the new range */
	}
	st = stat_of(&k);
	assert_int_equal(st.live_blocks, 3);
	assert_int_equal(st.reserve, 32 * MiB);
	assert_int_equal(st.all_heaps, heaps);
	cl_detach(&k);
}

static void test_limit(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 1024 * MiB);
	assert_int_equal(gpusys_emu_heap_mapped(k.heap), 0);
	void *blk[256];
	int n = 0;
	int32_t err = 0;
	uint64_t last_mapped = 0;
	for (;;) {
		void *p = one_malloc(&k, MiB, &err);
		if (!p)
			break;
		memset(p, n, MiB); /* the memory is really there */
		assert_true(gpusys_emu_heap_mapped(k.heap) >= last_mapped);
		last_mapped = gpusys_emu_heap_mapped(k.heap);
		blk[n++] = p;
		assert_true(n < 256);
	}
	assert_int_equal(err, -ENOMEM);
	assert_int_equal(n, LIMIT / MiB);
	struct gpusys_alloc_stat st = stat_of(&k);
	assert_int_equal(st.limit, LIMIT);
	assert_int_equal(st.grant, LIMIT);
	assert_int_equal(st.mapped, LIMIT);
	assert_true(st.enomem >= 1);
	/* grown ahead, doubling: a handful of mappings, not one per chunk */
	uint32_t maps = gpusys_emu_heap_maps(k.heap);
	printf("# limit %llu MiB reached in %u mappings\n", (unsigned long long)(LIMIT >> 20), maps);
	assert_true(maps >= 2 && maps <= 8);
	/* a small block fails too: nothing is left */
	assert_null(one_malloc(&k, 16, &err));
	assert_int_equal(err, -ENOMEM);
	/* recovery: free every other block; 1 MiB blocks fit again, 2 MiB
	 * ones do not (no two free neighbours) */
	for (int i = 0; i < n; i += 2)
		assert_int_equal(one_free(&k, blk[i]), 0);
	assert_null(one_malloc(&k, 2 * MiB, &err));
	assert_int_equal(err, -ENOMEM);
	for (int i = 0; i < n; i += 2) {
		blk[i] = one_malloc(&k, MiB, &err);
		assert_int_equal(err, 0);
		assert_non_null(blk[i]);
	}
	for (int i = 1; i < n; i += 2)
		assert_int_equal(((uint8_t *)blk[i])[MiB - 1], (uint8_t)i);
	for (int i = 0; i < n; i++)
		assert_int_equal(one_free(&k, blk[i]), 0);
	/* everything back: one block of half the limit fits */
	void *half = one_malloc(&k, LIMIT / 2, &err);
	assert_int_equal(err, 0);
	assert_int_equal(one_free(&k, half), 0);
	cl_detach(&k);
}

static void test_bad_frees(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 64 * MiB);
	int32_t err;
	uint8_t *a = one_malloc(&k, 100, &err), *b = one_malloc(&k, 100, &err), *big = one_malloc(&k, 50000, &err);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(big);
	fill(b, 100, 7);
	fill(big, 50000, 8);
	struct gpusys_alloc_stat st0 = stat_of(&k);
	int on_stack;
	assert_int_equal(one_free(&k, &on_stack), -EFAULT);             /* foreign */
	assert_int_equal(one_free(&k, k.hp->base + k.hp->reserve), -EFAULT);
	assert_int_equal(one_free(&k, a + 16), -EINVAL);                /* interior */
	assert_int_equal(one_free(&k, big + 4096), -EINVAL);
	assert_int_equal(one_free(&k, a), 0);
	assert_int_equal(one_free(&k, a), -ENOENT);                     /* double */
	assert_int_equal(one_free(&k, big), 0);
	assert_int_equal(one_free(&k, big), -ENOENT);
	/* realloc of a bad pointer is refused the same way, old block untouched */
	void *pv[L] = { b + 32 }, *r[L];
	uint64_t sz[L] = { 400 };
	int32_t e[L];
	gpusys_emu_realloc(k.dev, k.hp, 1, pv, sz, r, e);
	assert_int_equal(e[0], -EINVAL);
	assert_null(r[0]);
	struct gpusys_alloc_stat st = stat_of(&k);
	assert_int_equal(st.refused_foreign - st0.refused_foreign, 2);
	assert_int_equal(st.refused_interior - st0.refused_interior, 3);
	assert_int_equal(st.refused_unallocated - st0.refused_unallocated, 2);
	assert_true(st.all_refused >= 7);
	assert_true(check(b, 100, 7));
	assert_int_equal(one_free(&k, b), 0);

	/* gpusysctl status shows them: this client's heap, and the daemon's total */
	json_t *status = daemon_status(daemon_.runtime);
	assert_non_null(status);
	json_t *all = json_object_get(status, "alloc");
	assert_true(json_integer_value(json_object_get(all, "refused_frees")) >= 7);
	assert_true(json_integer_value(json_object_get(all, "heaps")) >= 1);
	json_t *mine = NULL, *cl;
	size_t i;
	json_array_foreach(json_object_get(status, "clients"), i, cl)
	{
		if (json_integer_value(json_object_get(cl, "id")) == (json_int_t)gpusys_client_id(k.c))
			mine = json_object_get(cl, "alloc");
	}
	assert_non_null(mine);
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_foreign")), (json_int_t)st.refused_foreign);
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_interior")), (json_int_t)st.refused_interior);
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_unallocated")),
			 (json_int_t)st.refused_unallocated);
	assert_int_equal(json_integer_value(json_object_get(mine, "limit_bytes")), LIMIT);
	json_decref(status);
	cl_detach(&k);
}

/* Two clients: the same offsets name different blocks; one cannot free
 * the other's. */
static void test_two_clients(void **unused)
{
	(void)unused;
	struct cl a, b;
	cl_attach(&a, 2, 64 * MiB);
	cl_attach(&b, 2, 64 * MiB);
	int32_t err;
	enum { N = 100 };
	uint8_t *pa[N], *pb[N];
	for (int i = 0; i < N; i++) {
		pa[i] = one_malloc(&a, 300 + i, &err);
		pb[i] = one_malloc(&b, 300 + i, &err);
		assert_non_null(pa[i]);
		assert_non_null(pb[i]);
		fill(pa[i], 300 + i, i);
		fill(pb[i], 300 + i, 1000 + i);
	}
	/* a's pointers through b: outside b's heap, refused */
	for (int i = 0; i < N; i++)
		assert_int_equal(one_free(&b, pa[i]), -EFAULT);
	for (int i = 0; i < N; i++)
		assert_true(check(pa[i], 300 + i, i));
	/* a frees its blocks: b's, at the same offsets in its own heap, stay
	 * live and intact, and are b's to free */
	for (int i = 0; i < N; i++)
		assert_int_equal(one_free(&a, pa[i]), 0);
	for (int i = 0; i < N; i++) {
		assert_true(check(pb[i], 300 + i, 1000 + i));
		assert_int_equal(one_free(&b, pb[i]), 0);
		assert_int_equal(one_free(&a, pa[i]), -ENOENT);
	}
	struct gpusys_alloc_stat sa = stat_of(&a), sb = stat_of(&b);
	assert_int_equal(sa.refused_foreign + sa.refused_interior, 0);
	assert_int_equal(sa.refused_unallocated, N);
	assert_int_equal(sb.refused_foreign, N);
	assert_int_equal(sb.refused_unallocated + sb.refused_interior, 0);
	cl_detach(&a);
	cl_detach(&b);
}

static uint64_t daemon_rss_kib(void)
{
	char path[64], line[256];
	uint64_t kib = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)daemon_.pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmRSS: %llu", (unsigned long long *)&kib) == 1)
			break;
	}
	fclose(f);
	return kib;
}

/* A client killed with a large heap: the daemon's figures go back to what
 * they were (its metadata freed); the memory itself was the client's. */
static void test_killed_client(void **unused)
{
	(void)unused;
	struct cl me;
	cl_attach(&me, 2, 64 * MiB);
	struct gpusys_alloc_stat base = stat_of(&me);
	uint64_t rss0 = daemon_rss_kib();
	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		struct cl k;
		cl_attach(&k, 4, 256 * MiB);
		/* 24 MiB in 64 B .. 4 KiB blocks, never freed */
		uint64_t total = 0, seed = 99;
		uint64_t s[L];
		void *r[L];
		int32_t e[L];
		while (total < 24 * MiB) {
			for (uint32_t l = 0; l < L; l++)
				s[l] = 64 + rnd(&seed) % 4000;
			gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, r, e);
			for (uint32_t l = 0; l < L; l++) {
				if (e[l])
					_exit(3);
				memset(r[l], 1, s[l]);
				total += s[l];
			}
		}
		char one = 1;
		if (write(ready[1], &one, 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	struct gpusys_alloc_stat during = stat_of(&me);
	uint64_t rss1 = daemon_rss_kib();
	assert_int_equal(during.all_heaps, base.all_heaps + 1);
	assert_true(during.all_grant >= base.all_grant + 24 * MiB);
	assert_true(during.all_meta_bytes > base.all_meta_bytes);
	kill(p, SIGKILL);
	int ws;
	assert_int_equal(waitpid(p, &ws, 0), p);
	struct gpusys_alloc_stat after;
	for (int i = 0; i < 300; i++) {
		after = stat_of(&me);
		if (after.all_heaps == base.all_heaps)
			break;
		usleep(10000);
	}
	uint64_t rss2 = daemon_rss_kib();
	printf("# killed client: daemon heaps %llu -> %llu -> %llu, granted %llu -> %llu -> %llu MiB, "
	       "metadata %llu -> %llu -> %llu KiB; daemon RSS %llu -> %llu -> %llu KiB\n",
	       (unsigned long long)base.all_heaps, (unsigned long long)during.all_heaps,
	       (unsigned long long)after.all_heaps, (unsigned long long)(base.all_grant >> 20),
	       (unsigned long long)(during.all_grant >> 20), (unsigned long long)(after.all_grant >> 20),
	       (unsigned long long)(base.all_meta_bytes >> 10), (unsigned long long)(during.all_meta_bytes >> 10),
	       (unsigned long long)(after.all_meta_bytes >> 10), (unsigned long long)rss0, (unsigned long long)rss1,
	       (unsigned long long)rss2);
	assert_int_equal(after.all_heaps, base.all_heaps);
	assert_int_equal(after.all_grant, base.all_grant);
	assert_int_equal(after.all_meta_bytes, base.all_meta_bytes);
	cl_detach(&me);
}

static int setup(void **unused)
{
	(void)unused;
	/* The service's settings, through the daemon's configuration file. */
	char conf[160];
	snprintf(conf, sizeof(conf), "pollers = 2\nalloc_limit_bytes = %lluM\nalloc_chunk_bytes = %lluM\n",
		 (unsigned long long)(LIMIT >> 20), (unsigned long long)(CHUNK >> 20));
	gd_start(&daemon_, conf);
	return 0;
}

static int teardown(void **unused)
{
	(void)unused;
	gd_finish(&daemon_);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_calloc_realloc_aligned),
		cmocka_unit_test(test_cache_saves_round_trips),
		cmocka_unit_test(test_bad_frees),
		cmocka_unit_test(test_two_clients),
		cmocka_unit_test(test_reopen),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_killed_client),
		cmocka_unit_test(test_random_million),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
