/* SPDX-License-Identifier: MIT */
/*
 * The alloc service end to end: the real gpusysd, emulated warps running
 * the device code (device/alloc_client.h, device/alloc_slab.h) over a heap
 * of host memory that libgpusys maps as the daemon grants it. 10^6 random
 * malloc/realloc/free from many warps with every block's contents written
 * and checked (no two live blocks overlap); small blocks with no request
 * in the steady state; a heap that grows 8x while warps allocate; growth
 * to the limit, ENOMEM and recovery; bad frees (double, interior, foreign)
 * refused, on the device for small blocks, and counted where gpusysctl
 * shows them; trim giving chunks back; a killed client's heap gone from
 * the daemon; two clients' heaps isolated.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"
#include "../daemon/harness.h"
#include "device/alloc_slab.h" /* the slab code the emulator runs: a claim's give-back */

#define L GPUSYS_WARP_LANES
#define MiB (UINT64_C(1) << 20)
#define LIMIT (64 * MiB)
#define CHUNK (4 * MiB)
#define TRIM_DELAY_MS 300

static struct gd daemon_;

struct cl {
	gpusys_t *c;
	struct gpusys_emu *emu;
	struct gpusys_emu_heap *heap;
	const gpusys_dev_t *dev;
	const gpusys_heap_dev_t *hp;
};

/* groups: how many "SMs" have their own current slabs; warps beyond that
 * share them (gpusys_emu_set_warp() % groups), as a GPU's warps of one SM
 * do. */
static void cl_attach_to(struct cl *k, const char *runtime, uint32_t ports, uint64_t reserve, uint32_t groups)
{
	struct gpusys_options o = {
		.runtime_dir = runtime,
		.num_ports = ports,
		.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK | GPUSYS_ATTACH_NO_STDIO | GPUSYS_ATTACH_NO_CWD,
	};
	assert_int_equal(gpusys_attach(&o, &k->c), 0);
	assert_int_equal(gpusys_emu_open(gpusys_host_channel(k->c), &k->emu), 0);
	assert_int_equal(gpusys_emu_heap_open(reserve, groups, &k->heap), 0);
	k->dev = gpusys_emu_dev(k->emu);
	k->hp = gpusys_emu_heap_dev(k->heap);
}

static void cl_attach_groups(struct cl *k, uint32_t ports, uint64_t reserve, uint32_t groups)
{
	cl_attach_to(k, daemon_.runtime, ports, reserve, groups);
}

static void cl_attach(struct cl *k, uint32_t ports, uint64_t reserve)
{
	cl_attach_groups(k, ports, reserve, ports);
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
	uint64_t lanes; /* the lanes this thread runs (0: all) */
	uint64_t quota; /* operations to make (0: its share of OPS_TOTAL) */
	uint64_t ops, bad;
	struct entry e[L][ENTRIES];
};

static void *warp_main(void *arg)
{
	struct warp_job *j = arg;
	const struct cl *k = j->k;
	uint64_t seed = 0x1234567ull + j->warp * 7919ull, tag = (uint64_t)j->warp << 40;
	gpusys_emu_set_warp(j->warp);
	uint64_t lanes = j->lanes ? j->lanes : ~UINT64_C(0);
	uint64_t quota = j->quota ? j->quota : OPS_TOTAL / WARPS;
	seed += j->lanes;
	while (j->ops < quota) {
		/* each lane picks an entry and an op on it */
		uint32_t idx[L];
		uint64_t mm = 0, mr = 0, mf = 0, size[L];
		void *ptr[L], *ret[L];
		int32_t err[L];
		for (uint32_t l = 0; l < L; l++) {
			uint64_t r = rnd(&seed);
			idx[l] = (uint32_t)(r % ENTRIES);
			struct entry *e = &j->e[l][idx[l]];
			if (r >> 60 == 0 || !(lanes >> l & 1))
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

/* The random workload from WARPS warps. split > 1: each warp's lanes are
 * dealt to split threads (lane l to thread l % split), which call at once
 * with the same warp number, as the divergent branches of one GPU warp
 * do: a warp whose lanes malloc, realloc and free in different branches
 * makes those calls concurrently, each with its own lane mask. */
static void random_workload(uint32_t split, uint64_t ops_total)
{
	struct cl k;
	uint32_t n = WARPS * split;
	/* 4 warps on each group's slabs: they meet on the same words */
	cl_attach_groups(&k, WARPS, 256 * MiB, 2);
	struct warp_job *jobs = calloc(n, sizeof(*jobs));
	pthread_t *th = calloc(n, sizeof(*th));
	assert_non_null(jobs);
	assert_non_null(th);
	for (uint32_t w = 0; w < n; w++) {
		jobs[w].k = &k;
		jobs[w].warp = w / split;
		jobs[w].quota = ops_total / n;
		for (uint32_t l = 0; split > 1 && l < L; l++) {
			if (l % split == w % split)
				jobs[w].lanes |= UINT64_C(1) << l;
		}
		assert_int_equal(pthread_create(&th[w], NULL, warp_main, &jobs[w]), 0);
	}
	uint64_t ops = 0;
	for (uint32_t w = 0; w < n; w++) {
		pthread_join(th[w], NULL);
		assert_int_equal(jobs[w].bad, 0);
		ops += jobs[w].ops;
	}
	free(th);
	assert_true(ops >= ops_total - n);

	/* Every live block, over all warps: checked, and none overlaps another. */
	struct span *v = calloc((size_t)n * L * ENTRIES, sizeof(*v));
	size_t nv = 0;
	for (uint32_t w = 0; w < n; w++) {
		for (uint32_t l = 0; l < L; l++) {
			for (uint32_t i = 0; i < ENTRIES; i++) {
				struct entry *e = &jobs[w].e[l][i];
				if (!e->p)
					continue;
				assert_true(check(e->p, e->size, e->tag));
				assert_true(e->p >= k.hp->base && e->p + e->size <= k.hp->base + k.hp->reserve);
				v[nv].p = e->p;
				v[nv].size = e->size;
				nv++;
			}
		}
	}
	qsort(v, nv, sizeof(*v), cmp_span);
	for (size_t i = 1; i < nv; i++)
		assert_true(v[i - 1].p + v[i - 1].size <= v[i].p);

	struct gpusys_alloc_stat st = stat_of(&k);
	/* The daemon's live blocks: ours outside pool chunks (large ones, and
	 * small ones a realloc of a large block got from the daemon), plus the
	 * pool chunks themselves; the device's slabs hold the rest. */
	uint64_t outside = 0;
	for (size_t i = 0; i < nv; i++) {
		uint64_t off = (uint64_t)(v[i].p - k.hp->base);
		if (!k.hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT])
			outside++;
	}
	assert_true(st.pool_bytes > 0);
	assert_int_equal(st.live_blocks, outside + st.pool_bytes / GPUSYS_ALLOC_CHUNK_BYTES);
	assert_int_equal(st.refused_foreign + st.refused_interior + st.refused_unallocated, 0);
	assert_int_equal(st.dev_refused_foreign + st.dev_refused_interior + st.dev_refused_unallocated, 0);
	printf("# %llu ops, %zu live blocks (%llu outside the pool), daemon: %llu mallocs %llu frees %llu reallocs, "
	       "pool %llu MiB (%llu chunks got, %llu back), grant %llu MiB, meta %llu KiB\n",
	       (unsigned long long)ops, nv, (unsigned long long)outside, (unsigned long long)st.mallocs,
	       (unsigned long long)st.frees, (unsigned long long)st.reallocs, (unsigned long long)(st.pool_bytes >> 20),
	       (unsigned long long)st.pool_chunks_got, (unsigned long long)st.pool_chunks_back,
	       (unsigned long long)(st.grant >> 20), (unsigned long long)(st.meta_bytes >> 10));
	free(v);
	free(jobs);
	cl_detach(&k);
}

static void test_random_million(void **unused)
{
	(void)unused;
	random_workload(1, OPS_TOTAL);
}

/* Three concurrent lane groups per warp (tests/gpu/test_gpu_alloc.cu's
 * random kernel without GT_ALLOC_UNIFORM). */
static void test_random_split_warps(void **unused)
{
	(void)unused;
	random_workload(3, OPS_TOTAL / 2);
}

/* Small blocks need no request in the steady state: a warp's first malloc
 * asks for one pool chunk; after that mallocs and frees are the device's. */
static void test_small_no_round_trips(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 2, 64 * MiB);
	uint64_t s[L];
	void *r[L];
	int32_t e[L];
	for (uint32_t l = 0; l < L; l++)
		s[l] = 48;
	enum { ROUNDS = 64 };
	void *keep[ROUNDS][L];
	uint64_t t0 = gpusys_emu_submitted(k.emu);
	for (int i = 0; i < ROUNDS; i++) {
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, r, e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			assert_non_null(r[l]);
			assert_int_equal((uintptr_t)r[l] % 64, 0); /* class 64 B, aligned to it */
			fill(r[l], 48, (uint64_t)i * L + l);
			keep[i][l] = r[l];
		}
	}
	uint64_t first = gpusys_emu_submitted(k.emu) - t0;
	/* 2048 blocks of 64 B: one chunk (2 MiB) holds 32 x 1021 */
	printf("# 64 warp mallocs of 32 x 48 B from an empty heap: %llu requests\n", (unsigned long long)first);
	assert_true(first >= 1 && first <= 2);
	uint64_t t1 = gpusys_emu_submitted(k.emu);
	for (int i = 0; i < ROUNDS; i++) {
		for (uint32_t l = 0; l < L; l++)
			assert_true(check(keep[i][l], 48, (uint64_t)i * L + l));
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	/* the steady state: pairs of every small class, no request at all */
	for (int i = 0; i < 1000; i++) {
		for (uint32_t l = 0; l < L; l++)
			s[l] = 1 + (uint64_t)((i * 37 + l * 101) % (l < 24 ? GPUSYS_ALLOC_SMALL_MAX : GPUSYS_SLAB_MAX));
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, r, e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			fill(r[l], s[l], (uint64_t)i * L + l);
		}
		for (uint32_t l = 0; l < L; l++)
			assert_true(check(r[l], s[l], (uint64_t)i * L + l));
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, r, e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	uint64_t steady = gpusys_emu_submitted(k.emu) - t1;
	printf("# then 2048 frees and 32000 malloc+free pairs of 1 B - 64 KiB: %llu requests (classes up to 2 KiB "
	       "take free slabs of the chunk held; each class above needs a chunk of its own)\n",
	       (unsigned long long)steady);
	/* a chunk (a request, and one more if its grant was not mapped yet)
	 * for each class above 2 KiB, once; nothing else */
	assert_true(steady >= 1 && steady <= 2 * (GPUSYS_SLAB_CLASSES - GPUSYS_ALLOC_CLASSES));
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
	uint8_t *a = one_malloc(&k, 100, &err), *b = one_malloc(&k, 100, &err), *big = one_malloc(&k, 100000, &err);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(big);
	fill(b, 100, 7);
	fill(big, 100000, 8);
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
	/* A small block's double free in one warp call: one lane frees it,
	 * the other finds its bit clear. */
	uint8_t *d = one_malloc(&k, 24, &err);
	assert_non_null(d);
	void *twice[L] = { d, d };
	int32_t te[L];
	gpusys_emu_free(k.dev, k.hp, 3, twice, te);
	assert_int_equal(te[0], 0);
	assert_int_equal(te[1], -ENOENT);
	/* a pointer into a slab's header is no block either */
	uint8_t *slab = k.hp->base + ((uint64_t)(b - k.hp->base) & ~(uint64_t)(GPUSYS_ALLOC_SLAB_BYTES - 1));
	assert_int_equal(one_free(&k, slab), -EINVAL);

	struct gpusys_alloc_stat st = stat_of(&k);
	/* small blocks' refusals are the device's (reported), large ones the daemon's */
	assert_int_equal(st.dev_refused_foreign - st0.dev_refused_foreign, 2);
	assert_int_equal(st.dev_refused_interior - st0.dev_refused_interior, 3); /* a + 16, b + 32, the header */
	assert_int_equal(st.dev_refused_unallocated - st0.dev_refused_unallocated, 2); /* a, d */
	assert_int_equal(st.refused_foreign - st0.refused_foreign, 0);
	assert_int_equal(st.refused_interior - st0.refused_interior, 1); /* big + 4096 */
	assert_int_equal(st.refused_unallocated - st0.refused_unallocated, 1); /* big */
	assert_true(st.all_refused >= 9);
	const struct gpusys_alloc_pool *po = gpusys_emu_heap_pool(k.heap);
	assert_int_equal(po->refused_foreign, 2);
	assert_int_equal(po->refused_interior, 3);
	assert_int_equal(po->refused_unallocated, 2);
	assert_true(check(b, 100, 7));
	assert_int_equal(one_free(&k, b), 0);

	/* gpusysctl status shows them: this client's heap, and the daemon's total */
	json_t *status = daemon_status(daemon_.runtime);
	assert_non_null(status);
	json_t *all = json_object_get(status, "alloc");
	assert_true(json_integer_value(json_object_get(all, "refused_frees")) >= 9);
	assert_true(json_integer_value(json_object_get(all, "heaps")) >= 1);
	json_t *mine = NULL, *cl;
	size_t i;
	json_array_foreach(json_object_get(status, "clients"), i, cl)
	{
		if (json_integer_value(json_object_get(cl, "id")) == (json_int_t)gpusys_client_id(k.c))
			mine = json_object_get(cl, "alloc");
	}
	assert_non_null(mine);
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_foreign")),
			 (json_int_t)(st.refused_foreign + st.dev_refused_foreign));
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_interior")),
			 (json_int_t)(st.refused_interior + st.dev_refused_interior));
	assert_int_equal(json_integer_value(json_object_get(mine, "refused_unallocated")),
			 (json_int_t)(st.refused_unallocated + st.dev_refused_unallocated));
	assert_int_equal(json_integer_value(json_object_get(mine, "device_refused_unallocated")),
			 (json_int_t)st.dev_refused_unallocated);
	assert_int_equal(json_integer_value(json_object_get(mine, "pool_bytes")), (json_int_t)st.pool_bytes);
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
	/* (small blocks: the device refused them, and told its own daemon
	 * client; the other client's figures never moved) */
	struct gpusys_alloc_stat sa = stat_of(&a), sb = stat_of(&b);
	assert_int_equal(sa.dev_refused_foreign + sa.dev_refused_interior, 0);
	assert_int_equal(sa.dev_refused_unallocated, N);
	assert_int_equal(sb.dev_refused_foreign, N);
	assert_int_equal(sb.dev_refused_unallocated + sb.dev_refused_interior, 0);
	assert_int_equal(sa.refused_foreign + sa.refused_interior + sa.refused_unallocated, 0);
	assert_int_equal(sb.refused_foreign + sb.refused_interior + sb.refused_unallocated, 0);
	cl_detach(&a);
	cl_detach(&b);
}

/* ------------------------------------------------ growth and trim */

#define GROW_WARPS 4
#define GROW_BLOCK 1000 /* class 1 KiB: 63 a slab */

struct grow_job {
	struct cl *k;
	uint32_t warp;
	uint32_t target; /* hold blocks until the pool has this many chunks */
	uint8_t **blk;
	size_t n, cap;
	uint64_t bad;
};

static void *grow_main(void *arg)
{
	struct grow_job *j = arg;
	const struct cl *k = j->k;
	uint64_t s[L];
	void *r[L];
	int32_t e[L];
	gpusys_emu_set_warp(j->warp);
	for (uint32_t l = 0; l < L; l++)
		s[l] = GROW_BLOCK;
	const struct gpusys_alloc_pool *po = gpusys_emu_heap_pool(k->heap);
	while (__atomic_load_n(&po->chunks, __ATOMIC_RELAXED) < j->target && j->n + L <= j->cap) {
		gpusys_emu_malloc(k->dev, k->hp, 0xffffffffu, s, r, e);
		for (uint32_t l = 0; l < L; l++) {
			if (e[l] || !r[l]) {
				j->bad++;
				continue;
			}
			fill(r[l], GROW_BLOCK, ((uint64_t)j->warp << 32) + j->n);
			j->blk[j->n++] = r[l];
		}
	}
	return NULL;
}

/* Warps allocating small blocks (and holding them) while the heap of small
 * blocks grows 8x, from one pool chunk to eight: the pool takes chunk after
 * chunk, the daemon grants and the mapping thread maps ahead, and every
 * block keeps what was written into it. */
static void test_small_growth_8x(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach_groups(&k, GROW_WARPS, 256 * MiB, 1); /* all on the same slabs */
	int32_t err;
	void *p = one_malloc(&k, GROW_BLOCK, &err); /* the first chunk, and the first grant mapped */
	assert_non_null(p);
	uint64_t m0 = gpusys_emu_heap_mapped(k.heap);
	uint32_t c0 = gpusys_emu_heap_pool(k.heap)->chunks;
	assert_int_equal(c0, 1);
	struct grow_job jobs[GROW_WARPS];
	pthread_t th[GROW_WARPS];
	for (uint32_t w = 0; w < GROW_WARPS; w++) {
		memset(&jobs[w], 0, sizeof(jobs[w]));
		jobs[w].k = &k;
		jobs[w].warp = w;
		jobs[w].target = 8 * c0;
		jobs[w].cap = (size_t)(10 * c0 * GPUSYS_ALLOC_CHUNK_BYTES / GROW_BLOCK);
		jobs[w].blk = calloc(jobs[w].cap, sizeof(uint8_t *));
		assert_int_equal(pthread_create(&th[w], NULL, grow_main, &jobs[w]), 0);
	}
	size_t total = 0;
	for (uint32_t w = 0; w < GROW_WARPS; w++) {
		pthread_join(th[w], NULL);
		assert_int_equal(jobs[w].bad, 0);
		total += jobs[w].n;
	}
	uint64_t m1 = gpusys_emu_heap_mapped(k.heap);
	struct gpusys_alloc_stat st = stat_of(&k);
	printf("# %zu blocks of %u B from %d warps: heap mapped %llu -> %llu MiB in %u mappings, pool %llu MiB\n",
	       total, GROW_BLOCK, GROW_WARPS, (unsigned long long)(m0 >> 20), (unsigned long long)(m1 >> 20),
	       gpusys_emu_heap_maps(k.heap), (unsigned long long)(st.pool_bytes >> 20));
	assert_true(st.pool_bytes >= 8 * c0 * GPUSYS_ALLOC_CHUNK_BYTES);
	assert_true(m1 >= st.pool_bytes && m1 > m0);
	/* every block intact, and freed */
	for (uint32_t w = 0; w < GROW_WARPS; w++) {
		for (size_t i = 0; i < jobs[w].n; i++)
			assert_true(check(jobs[w].blk[i], GROW_BLOCK, ((uint64_t)w << 32) + i));
		for (size_t i = 0; i < jobs[w].n; i++)
			assert_int_equal(one_free(&k, jobs[w].blk[i]), 0);
		free(jobs[w].blk);
	}
	assert_int_equal(one_free(&k, p), 0);
	cl_detach(&k);
}

/* This client's alloc figures in gpusysctl's JSON (status: free it). */
static json_t *alloc_json_of(const struct cl *k, json_t **status)
{
	json_t *cl, *mine = NULL;
	size_t i;
	*status = daemon_status(daemon_.runtime);
	assert_non_null(*status);
	json_array_foreach(json_object_get(*status, "clients"), i, cl)
	{
		if (json_integer_value(json_object_get(cl, "id")) == (json_int_t)gpusys_client_id(k->c))
			mine = json_object_get(cl, "alloc");
	}
	assert_non_null(mine);
	return mine;
}

/* Trim: a warp's slabs emptied go back to the pool, and chunks that stay
 * empty for alloc_trim_delay_ms go back to gpusysd, which shows it. */
static void test_trim(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 1, 64 * MiB);
	enum { CALLS = 100 }; /* 3200 blocks of 2 KiB: 31 a slab, 992 a chunk: 4 chunks */
	void *keep[CALLS][L];
	uint64_t s[L];
	int32_t e[L];
	for (uint32_t l = 0; l < L; l++)
		s[l] = 2000;
	const struct gpusys_alloc_pool *po = gpusys_emu_heap_pool(k.heap);
	unsigned long long trims0 = po->trims;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < CALLS; i++) {
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	struct gpusys_alloc_stat full = stat_of(&k);
	assert_int_equal(full.pool_bytes, 4 * GPUSYS_ALLOC_CHUNK_BYTES);
	for (int i = 0; i < CALLS; i++) {
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	/* The mallocs took 4 chunks (each after finding the free list empty)
	 * and about 100 of the frees' calls emptied a slab, but trims from
	 * either come at most once in a quarter of the delay: one, not one
	 * per call, each walking every list under the pool's locks. */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	unsigned long long lazy = po->trims - trims0;
	printf("# trim: %llu trims from the mallocs and frees of %d calls each (%.1f ms)\n", lazy, CALLS, ms);
	if (ms < TRIM_DELAY_MS / 4)
		assert_int_equal(lazy, 1);
	assert_true(lazy >= 1 && lazy <= 1 + (unsigned long long)(ms / (TRIM_DELAY_MS / 4)));
	/* gpusys_heap_trim: the empty slabs go to the device's free list at
	 * once; the chunks stay within the delay. */
	assert_true(gpusys_emu_heap_trim(k.dev, k.hp) >= 0);
	struct gpusys_alloc_stat now = stat_of(&k);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	printf("# trim: pool %llu MiB after the frees and a trim (%.1f ms), %u free slabs in the device's pool, delay %llu ns\n",
	       (unsigned long long)(now.pool_bytes >> 20), ms, po->free_slabs, (unsigned long long)po->trim_delay_ns);
	assert_true(po->free_slabs >= 3 * GPUSYS_ALLOC_CHUNK_SLABS);
	if (ms < TRIM_DELAY_MS / 2)
		assert_int_equal(now.pool_chunks_back, 0);
	usleep(2 * TRIM_DELAY_MS * 1000);
	if (getenv("ALLOC_DEBUG"))
		for (uint32_t ci = 0; ci < 32; ci++)
			if (k.hp->chunk_of[ci])
				fprintf(stderr, "chunk %u: %#x since %llu\n", ci, k.hp->chunk_of[ci],
					((struct gpusys_alloc_slab *)(k.hp->base + ((uint64_t)ci << 21)))->since);
	int back = gpusys_emu_heap_trim(k.dev, k.hp);
	struct gpusys_alloc_stat after = stat_of(&k);
	printf("# trim after %d ms: %d chunks back; pool %llu -> %llu MiB, daemon used %llu -> %llu MiB\n",
	       2 * TRIM_DELAY_MS, back, (unsigned long long)(full.pool_bytes >> 20),
	       (unsigned long long)(after.pool_bytes >> 20), (unsigned long long)(full.used_bytes >> 20),
	       (unsigned long long)(after.used_bytes >> 20));
	/* every chunk: the warp's current slab, empty, was detached by the
	 * first trim and went with the others */
	assert_int_equal(now.pool_chunks_back + (uint64_t)back, 4);
	assert_int_equal(after.pool_chunks_back, 4);
	assert_int_equal(after.pool_bytes, 0);
	assert_int_equal(full.used_bytes - after.used_bytes, 4 * GPUSYS_ALLOC_CHUNK_BYTES);
	assert_int_equal(po->chunks, 0);

	/* gpusysctl's view */
	json_t *status, *mine = alloc_json_of(&k, &status);
	assert_int_equal(json_integer_value(json_object_get(mine, "pool_chunks_back")), 4);
	assert_int_equal(json_integer_value(json_object_get(mine, "pool_bytes")), 0);
	json_decref(status);

	/* and the pool grows again when asked */
	for (int n = 0; n < CALLS; n++) {
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, keep[n], e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			fill(keep[n][l], 2000, (uint64_t)n * L + l);
		}
	}
	for (int n = 0; n < CALLS; n++) {
		for (uint32_t l = 0; l < L; l++)
			assert_true(check(keep[n][l], 2000, (uint64_t)n * L + l));
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[n], e);
	}
	assert_int_equal(stat_of(&k).pool_chunks_got, 8);
	cl_detach(&k);
}

/* A heap that grew and was emptied shrinks: once trim has given its chunks
 * back, gpusysd lowers the grant below the free top and starts a new
 * epoch. The mapping thread then keeps the top until the program says no
 * kernel uses the heap (gpusys_emu_heap_release, as gpusys_heap_release),
 * or until the heap grows again, which cancels the shrink; with
 * GPUSYS_HEAP_UNMAP=1 it closes the top at once. Closed means PROT_NONE
 * here (cuMemUnmap on a GPU): a block handed out there would fault. A
 * block kept low stays whole through all of it. */
#define SHRINK_CALLS 480 /* 15,360 blocks of 2 KiB: 16 chunks */

/* Fill the heap with 2 KiB blocks (16 chunks), check and free them, and
 * trim twice a delay apart: the chunks go back. Returns what was mapped
 * at the fullest. */
static uint64_t grow_free_trim(const struct cl *k, struct gpusys_emu_heap *heap, void *(*keep)[L], int tag)
{
	uint64_t s[L];
	int32_t e[L];
	for (uint32_t l = 0; l < L; l++)
		s[l] = 2000;
	for (int i = 0; i < SHRINK_CALLS; i++) {
		gpusys_emu_malloc(k->dev, k->hp, 0xffffffffu, s, keep[i], e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			fill(keep[i][l], 2000, (uint64_t)i * L + l + (uint64_t)tag);
		}
	}
	uint64_t grown = gpusys_emu_heap_mapped(heap);
	for (int i = 0; i < SHRINK_CALLS; i++) {
		for (uint32_t l = 0; l < L; l++)
			assert_true(check(keep[i][l], 2000, (uint64_t)i * L + l + (uint64_t)tag));
		gpusys_emu_free(k->dev, k->hp, 0xffffffffu, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	assert_true(gpusys_emu_heap_trim(k->dev, k->hp) >= 0);
	usleep(2 * TRIM_DELAY_MS * 1000);
	assert_true(gpusys_emu_heap_trim(k->dev, k->hp) >= 1);
	usleep(20000); /* the mapping thread's look (100 us) at the shrink */
	return grown;
}

static json_int_t alloc_num(const struct cl *k, const char *key)
{
	json_t *status, *mine = alloc_json_of(k, &status);
	json_int_t v = json_integer_value(json_object_get(mine, key));
	json_decref(status);
	return v;
}

static void test_trim_unmaps(void **unused)
{
	(void)unused;
	void *(*keep)[L] = calloc(SHRINK_CALLS, sizeof(*keep));
	int32_t err;
	for (int now = 0; now < 2; now++) {
		if (now)
			setenv("GPUSYS_HEAP_UNMAP", "1", 1);
		struct cl k;
		cl_attach(&k, 1, 256 * MiB);
		if (now)
			unsetenv("GPUSYS_HEAP_UNMAP");
		uint8_t *low = one_malloc(&k, 16, &err);
		assert_non_null(low);
		fill(low, 16, 77);
		for (int round = 0; round < (now ? 1 : 2); round++) {
			json_int_t shrinks0 = alloc_num(&k, "shrinks");
			uint32_t unmaps0 = gpusys_emu_heap_unmaps(k.heap);
			uint64_t grown = grow_free_trim(&k, k.heap, keep, round);
			uint64_t m = gpusys_emu_heap_mapped(k.heap);
			json_int_t shrinks = alloc_num(&k, "shrinks"), dmapped = alloc_num(&k, "mapped_bytes");
			int64_t released = now ? 0 : round == 0 ? gpusys_emu_heap_release(k.heap) : 0;
			uint64_t after = gpusys_emu_heap_mapped(k.heap);
			printf("# %s, round %d: mapped %llu MiB with 16 chunks of 2 KiB blocks; after the frees and trims "
			       "%llu MiB, gpusysd's %lld MiB (shrinks %lld); released %lld MiB: %llu MiB mapped; unmaps %u\n",
			       now ? "GPUSYS_HEAP_UNMAP=1" : "default", round, (unsigned long long)(grown >> 20),
			       (unsigned long long)(m >> 20), (long long)(dmapped >> 20), (long long)shrinks,
			       (long long)(released >> 20), (unsigned long long)(after >> 20),
			       gpusys_emu_heap_unmaps(k.heap) - unmaps0);
			assert_true(grown >= 32 * MiB);
			/* one shrink at least (the chunks go back one FREE at a
			 * time: the top may be half free before the last) */
			assert_true(shrinks > shrinks0);
			/* gpusysd hands out nothing above what stays mapped */
			assert_true((uint64_t)dmapped <= grown / 2);
			if (now) {
				/* closed at once */
				assert_true(m <= grown / 2 && m >= CHUNK);
				assert_int_equal(gpusys_emu_heap_unmaps(k.heap), unmaps0 + 1);
			} else {
				/* kept until released */
				assert_int_equal(m, grown);
				assert_int_equal(gpusys_emu_heap_unmaps(k.heap), unmaps0 + (round == 0));
				if (round == 0) {
					assert_int_equal((uint64_t)released, grown - after);
					assert_true(after <= grown / 2 && after >= CHUNK);
				} else {
					/* round 1 is not released: the next growth
					 * cancels the shrink, and a release then finds
					 * nothing */
					void *(*more)[L] = calloc(SHRINK_CALLS, sizeof(*more));
					(void)grow_free_trim(&k, k.heap, more, 7);
					free(more);
					assert_int_equal(gpusys_emu_heap_unmaps(k.heap), unmaps0);
				}
			}
			assert_true(check(low, 16, 77));
		}
		assert_int_equal(one_free(&k, low), 0);
		cl_detach(&k);
	}
	free(keep);
}

/* Small blocks only, from 8 warps on 2 groups' slabs: every block passes
 * from warp to warp through the device's atomics alone (no request), so
 * ThreadSanitizer sees the edges (scripts/test runs this one under it).
 * Contents checked. */
#define SMALL_OPS 200000

static void *small_main(void *arg)
{
	struct warp_job *j = arg;
	const struct cl *k = j->k;
	uint64_t seed = 0x9e3779b9ull + j->warp * 104729ull, tag = (uint64_t)j->warp << 40;
	gpusys_emu_set_warp(j->warp);
	while (j->ops < SMALL_OPS / WARPS) {
		uint32_t idx[L];
		uint64_t mm = 0, mf = 0, size[L];
		void *ptr[L], *ret[L];
		int32_t err[L];
		for (uint32_t l = 0; l < L; l++) {
			uint64_t r = rnd(&seed);
			idx[l] = (uint32_t)(r % ENTRIES);
			if (r >> 61 == 0)
				continue;
			if (!j->e[l][idx[l]].p) {
				mm |= UINT64_C(1) << l;
				/* one in 16 from the whole-chunk classes (4 - 64 KiB) */
				size[l] = (r >> 40) % 16 ? 1 + (r >> 8) % GPUSYS_ALLOC_SMALL_MAX
							 : GPUSYS_ALLOC_SMALL_MAX + 1 + (r >> 8) % (GPUSYS_SLAB_MAX - GPUSYS_ALLOC_SMALL_MAX);
			} else {
				mf |= UINT64_C(1) << l;
				ptr[l] = j->e[l][idx[l]].p;
				if (!check(ptr[l], j->e[l][idx[l]].size, j->e[l][idx[l]].tag))
					j->bad++;
			}
		}
		if (mm) {
			gpusys_emu_malloc(k->dev, k->hp, mm, size, ret, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(mm >> l & 1))
					continue;
				struct entry *e = &j->e[l][idx[l]];
				if (err[l] || !ret[l]) {
					j->bad++;
					continue;
				}
				e->p = ret[l];
				e->size = size[l];
				e->tag = ++tag;
				fill(e->p, e->size, e->tag);
			}
		}
		if (mf) {
			gpusys_emu_free(k->dev, k->hp, mf, ptr, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(mf >> l & 1))
					continue;
				if (err[l])
					j->bad++;
				j->e[l][idx[l]].p = NULL;
			}
		}
		j->ops += (uint64_t)__builtin_popcountll(mm) + __builtin_popcountll(mf);
	}
	return NULL;
}

static void test_small_threads(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach_groups(&k, WARPS, 256 * MiB, 2);
	struct warp_job *jobs = calloc(WARPS, sizeof(*jobs));
	pthread_t th[WARPS];
	for (uint32_t w = 0; w < WARPS; w++) {
		jobs[w].k = &k;
		jobs[w].warp = w;
		assert_int_equal(pthread_create(&th[w], NULL, small_main, &jobs[w]), 0);
	}
	for (uint32_t w = 0; w < WARPS; w++) {
		pthread_join(th[w], NULL);
		assert_int_equal(jobs[w].bad, 0);
	}
	struct span *v = calloc(WARPS * L * ENTRIES, sizeof(*v));
	size_t n = 0;
	for (uint32_t w = 0; w < WARPS; w++) {
		for (uint32_t l = 0; l < L; l++) {
			for (uint32_t i = 0; i < ENTRIES; i++) {
				struct entry *e = &jobs[w].e[l][i];
				if (!e->p)
					continue;
				assert_true(check(e->p, e->size, e->tag));
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
	/* to the daemon only pool chunks: no small block went through it */
	assert_int_equal(st.live_blocks, st.pool_bytes / GPUSYS_ALLOC_CHUNK_BYTES);
	printf("# %d small ops from %d warps on 2 groups: %zu live, pool %llu MiB\n", SMALL_OPS, WARPS, n,
	       (unsigned long long)(st.pool_bytes >> 20));
	free(v);
	free(jobs);
	cl_detach(&k);
}

/* At the limit, a malloc that needs a new pool chunk first gives back the
 * pool's empty chunks, without waiting for the delay. */
static void test_limit_trims(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 1, 256 * MiB);
	enum { CALLS = 100 }; /* 2 KiB blocks: 4 chunks, then all freed */
	void *keep[CALLS][L];
	uint64_t s[L];
	int32_t e[L], err = 0;
	for (uint32_t l = 0; l < L; l++)
		s[l] = 2000;
	for (int i = 0; i < CALLS; i++) {
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	for (int i = 0; i < CALLS; i++)
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[i], e);
	/* the rest of the limit in 1 MiB blocks */
	static void *blk[64];
	int n = 0;
	while (n < 64 && (blk[n] = one_malloc(&k, MiB, &err)) != NULL)
		n++;
	assert_int_equal(err, -ENOMEM);
	struct gpusys_alloc_stat st = stat_of(&k);
	assert_int_equal(st.pool_chunks_back, 0); /* within the delay */
	/* a 64 KiB block needs a chunk of its own: the empty ones go back */
	void *p = one_malloc(&k, 65536, &err);
	st = stat_of(&k);
	printf("# at the limit with %d x 1 MiB: a 64 KiB malloc %s, chunks given back %llu\n", n,
	       p ? "succeeded" : "failed", (unsigned long long)st.pool_chunks_back);
	assert_int_equal(err, 0);
	assert_non_null(p);
	assert_int_equal(st.pool_chunks_back, 4); /* the current slab's too: it was empty */
	assert_int_equal(one_free(&k, p), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(one_free(&k, blk[i]), 0);
	cl_detach(&k);
}

/* Classes above 2 KiB (4 - 64 KiB): a whole pool chunk is one slab. Blocks
 * aligned to their class, contents kept, bad frees refused on the device,
 * and empty chunks back to gpusysd after the delay. */
static void test_whole_chunk_classes(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 1, 64 * MiB);
	enum { CALLS = 4 }; /* 128 blocks of 64 KiB: 31 a chunk, 5 chunks */
	void *keep[CALLS][L];
	uint64_t s[L];
	int32_t e[L];
	uint64_t t0 = gpusys_emu_submitted(k.emu);
	for (int i = 0; i < CALLS; i++) {
		for (uint32_t l = 0; l < L; l++)
			s[l] = 40000 + l * 800;
		gpusys_emu_malloc(k.dev, k.hp, 0xffffffffu, s, keep[i], e);
		for (uint32_t l = 0; l < L; l++) {
			assert_int_equal(e[l], 0);
			assert_int_equal((uintptr_t)keep[i][l] % 65536, 0);
			fill(keep[i][l], s[l], (uint64_t)i * L + l);
		}
	}
	struct gpusys_alloc_stat full = stat_of(&k);
	printf("# 128 blocks of 40-65 KiB: %llu requests, pool %llu MiB\n",
	       (unsigned long long)(gpusys_emu_submitted(k.emu) - t0 - 1), (unsigned long long)(full.pool_bytes >> 20));
	assert_int_equal(full.pool_bytes, 5 * GPUSYS_ALLOC_CHUNK_BYTES);
	/* to the daemon: five chunks, no block of its own */
	assert_int_equal(full.live_blocks, 5);
	uint8_t *p = keep[0][0];
	int32_t err;
	assert_int_equal(one_free(&k, p + 4096), -EINVAL);
	void *pv[L] = { p }, *r[L];
	uint64_t sz[L] = { 50000 };
	gpusys_emu_realloc(k.dev, k.hp, 1, pv, sz, r, e); /* fits its 64 KiB: stays */
	assert_int_equal(e[0], 0);
	assert_ptr_equal(r[0], p);
	for (int i = 0; i < CALLS; i++) {
		for (uint32_t l = 0; l < L; l++) {
			s[l] = 40000 + l * 800;
			assert_true(check(keep[i][l], s[l], (uint64_t)i * L + l));
		}
		gpusys_emu_free(k.dev, k.hp, 0xffffffffu, keep[i], e);
		for (uint32_t l = 0; l < L; l++)
			assert_int_equal(e[l], 0);
	}
	assert_int_equal(one_free(&k, p), -ENOENT);
	struct gpusys_alloc_stat st = stat_of(&k);
	assert_int_equal(st.dev_refused_interior, 1);
	assert_int_equal(st.dev_refused_unallocated, 1);
	/* a whole chunk's clock starts when trim first sees it empty (the
	 * frees above trimmed once at most: this one sees them all) */
	assert_true(gpusys_emu_heap_trim(k.dev, k.hp) >= 0);
	usleep(2 * TRIM_DELAY_MS * 1000);
	int back = gpusys_emu_heap_trim(k.dev, k.hp);
	st = stat_of(&k);
	printf("# whole-chunk slabs: trim gave back %d, %llu in all; pool %llu MiB\n", back,
	       (unsigned long long)st.pool_chunks_back, (unsigned long long)(st.pool_bytes >> 20));
	/* all, the warp's current slab's chunk too: it was empty */
	assert_int_equal(st.pool_chunks_back, 5);
	assert_int_equal(st.pool_bytes, 0);
	(void)one_malloc(&k, 5000, &err); /* 8 KiB: another class, another chunk */
	assert_int_equal(err, 0);
	cl_detach(&k);
}

#define BUDGET_BLOCK 102400 /* a large block: the daemon's metadata */

/* The daemon's metadata for a heap is charged to the client's memory
 * budget: with a small client_mem_budget, a heap of many 16 KiB blocks is
 * refused (ENOMEM) long before its limit, and accepted again once frees
 * have shrunk the metadata. */
static void test_meta_budget(void **unused)
{
	(void)unused;
	struct gd small;
	gd_start(&small, "pollers = 1\nalloc_limit_bytes = 64M\nalloc_chunk_bytes = 4M\nclient_mem_budget = 140K\n");
	struct cl k;
	cl_attach_to(&k, small.runtime, 2, 64 * MiB, 2);
	enum { MAX = 4096 };
	static void *blk[MAX];
	int n = 0;
	int32_t err = 0;
	while (n < MAX) {
		blk[n] = one_malloc(&k, BUDGET_BLOCK, &err);
		if (!blk[n])
			break;
		n++;
	}
	struct gpusys_alloc_stat st = stat_of(&k);
	printf("# client_mem_budget 140 KiB: %d blocks of 100 KiB (limit: %d), then %d; daemon metadata %llu KiB, "
	       "enomem %llu\n",
	       n, (int)(LIMIT / BUDGET_BLOCK), err, (unsigned long long)(st.meta_bytes >> 10), (unsigned long long)st.enomem);
	assert_int_equal(err, -ENOMEM);
	assert_true(n > 100 && n < (int)(LIMIT / BUDGET_BLOCK) * 3 / 4);
	assert_true(st.used_bytes < LIMIT);
	/* the step that did not fit was made, then refused: a block record,
	 * or the page map's growth for a new mapping (8 B a page) */
	assert_true(st.meta_bytes <= 140 * 1024 + (LIMIT / GPUSYS_ALLOC_PAGE) * 8);
	assert_true(st.enomem >= 1);
	/* frees shrink the metadata (block records): mallocs fit again */
	for (int i = 0; i < n; i++)
		assert_int_equal(one_free(&k, blk[i]), 0);
	void *p = one_malloc(&k, BUDGET_BLOCK, &err);
	assert_int_equal(err, 0);
	assert_non_null(p);
	assert_int_equal(one_free(&k, p), 0);
	cl_detach(&k);
	gd_finish(&small);
	gd_cleanup(&small);
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

/* ------------------------------------------------- churn with a short delay */

/* What the GPU test's random kernel does to the pool with its 1 ms trim
 * delay: chunks emptied, given back and granted again all the time, while
 * other warps take and free blocks of every small class (the whole-chunk
 * ones too) and move them with realloc. Each block handed out must lie in
 * what is mapped, inside one slab of a chunk the pool holds (a live
 * block's chunk is never given back), and keep its contents. */
#define CHURN_WARPS 6
#define CHURN_ROUNDS 400

static uint64_t churn_size(uint64_t r)
{
	switch (r % 8) {
	case 0:
		return GPUSYS_ALLOC_SMALL_MAX + 1 + (r >> 8) % (GPUSYS_SLAB_MAX - GPUSYS_ALLOC_SMALL_MAX);
	case 1:
		return 1024 + (r >> 8) % 1024;
	default:
		return 1 + (r >> 8) % GPUSYS_ALLOC_SMALL_MAX;
	}
}

/* 0 when p (size bytes, live) is where a live small block may be. */
static int churn_where(const struct cl *k, const void *p, uint64_t size)
{
	const gpusys_heap_dev_t *hp = k->hp;
	uint64_t off = (uint64_t)((const uint8_t *)p - hp->base);
	uint64_t mapped = gpusys_emu_heap_mapped(k->heap);
	if ((const uint8_t *)p < hp->base || off + size > mapped)
		return 1;
	uint32_t co = __atomic_load_n(&hp->chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT], __ATOMIC_RELAXED);
	if (!co || (co & GPUSYS_CHUNK_GONE))
		return 2;
	uint64_t sb = co & GPUSYS_CHUNK_WHOLE ? GPUSYS_ALLOC_CHUNK_BYTES : GPUSYS_ALLOC_SLAB_BYTES;
	if (off % sb + size > sb)
		return 3;
	return 0;
}

struct churn_job {
	struct cl *k;
	uint32_t warp;
	uint64_t bad, ops;
	int first_bad;
};

static void churn_bad(struct churn_job *j, int why)
{
	if (!j->bad++)
		j->first_bad = why;
	if (getenv("ALLOC_DEBUG"))
		fprintf(stderr, "churn warp %u: %d\n", j->warp, why);
}

static void *churn_main(void *arg)
{
	struct churn_job *j = arg;
	const struct cl *k = j->k;
	uint64_t seed = 0x51ed27ull + j->warp * 6151ull, tag = (uint64_t)j->warp << 40;
	enum { B = 8 };
	void *blk[B][L];
	uint64_t sz[B][L], tg[B][L];
	gpusys_emu_set_warp(j->warp);
	for (int round = 0; round < CHURN_ROUNDS; round++) {
		uint64_t s[L], mask = 0;
		void *ret[L];
		int32_t err[L];
		for (int b = 0; b < B; b++) {
			for (uint32_t l = 0; l < L; l++)
				s[l] = churn_size(rnd(&seed));
			mask = rnd(&seed) | 1u;
			mask &= 0xffffffffu;
			gpusys_emu_malloc(k->dev, k->hp, mask, s, ret, err);
			for (uint32_t l = 0; l < L; l++) {
				blk[b][l] = NULL;
				if (!(mask >> l & 1))
					continue;
				if (err[l] || !ret[l]) {
					churn_bad(j, 10000 - err[l]);
					continue;
				}
				int w = churn_where(k, ret[l], s[l]);
				if (w) {
					churn_bad(j, 100 + w);
					continue;
				}
				blk[b][l] = ret[l];
				sz[b][l] = s[l];
				tg[b][l] = ++tag;
				fill(ret[l], s[l], tg[b][l]);
			}
			j->ops += (uint64_t)__builtin_popcountll(mask);
		}
		/* half the batches move */
		for (int b = 0; b < B; b += 2) {
			void *pv[L];
			uint64_t m = 0;
			for (uint32_t l = 0; l < L; l++) {
				pv[l] = blk[b][l];
				s[l] = churn_size(rnd(&seed));
				if (blk[b][l]) {
					m |= UINT64_C(1) << l;
					if (!check(blk[b][l], sz[b][l], tg[b][l]))
						churn_bad(j, 4);
				}
			}
			if (!m)
				continue;
			gpusys_emu_realloc(k->dev, k->hp, m, pv, s, ret, err);
			for (uint32_t l = 0; l < L; l++) {
				if (!(m >> l & 1))
					continue;
				if (err[l] || !ret[l]) {
					churn_bad(j, 20000 - err[l]);
					blk[b][l] = NULL; /* left behind: the heap's, not ours */
					continue;
				}
				int w = churn_where(k, ret[l], s[l]);
				uint64_t keep = sz[b][l] < s[l] ? sz[b][l] : s[l];
				if (w)
					churn_bad(j, 200 + w);
				else if (!check(ret[l], keep, tg[b][l]))
					churn_bad(j, 5);
				blk[b][l] = w ? NULL : ret[l];
				sz[b][l] = s[l];
				tg[b][l] = ++tag;
				if (!w)
					fill(ret[l], s[l], tg[b][l]);
			}
			j->ops += (uint64_t)__builtin_popcountll(m);
		}
		/* everything back: slabs empty, chunks go back after the delay */
		for (int b = 0; b < B; b++) {
			uint64_t m = 0;
			for (uint32_t l = 0; l < L; l++) {
				if (!blk[b][l])
					continue;
				m |= UINT64_C(1) << l;
				if (!check(blk[b][l], sz[b][l], tg[b][l]))
					churn_bad(j, 6);
			}
			if (!m)
				continue;
			gpusys_emu_free(k->dev, k->hp, m, blk[b], err);
			for (uint32_t l = 0; l < L; l++) {
				if (m >> l & 1 && err[l])
					churn_bad(j, 30000 - err[l]);
			}
			j->ops += (uint64_t)__builtin_popcountll(m);
		}
	}
	return NULL;
}

struct churn_trimmer {
	struct cl *k;
	atomic_bool stop;
	int back;
};

/* Trims from one more warp all along, as a GPU's many warps' frees do. */
static void *churn_trim_main(void *arg)
{
	struct churn_trimmer *t = arg;
	gpusys_emu_set_warp(CHURN_WARPS);
	while (!atomic_load(&t->stop)) {
		int r = gpusys_emu_heap_trim(t->k->dev, t->k->hp);
		if (r > 0)
			t->back += r;
		usleep(200);
	}
	return NULL;
}

static void test_churn_short_delay(void **unused)
{
	(void)unused;
	struct cl k;
	/* 3 warps on each group's slabs */
	cl_attach_groups(&k, CHURN_WARPS + 1, 256 * MiB, 3);
	struct churn_job jobs[CHURN_WARPS];
	pthread_t th[CHURN_WARPS];
	memset(jobs, 0, sizeof(jobs));
	for (uint32_t w = 0; w < CHURN_WARPS; w++) {
		jobs[w].k = &k;
		jobs[w].warp = w;
		assert_int_equal(pthread_create(&th[w], NULL, churn_main, &jobs[w]), 0);
	}
	struct churn_trimmer tr = { .k = &k };
	pthread_t tt;
	assert_int_equal(pthread_create(&tt, NULL, churn_trim_main, &tr), 0);
	uint64_t bad = 0, ops = 0;
	for (uint32_t w = 0; w < CHURN_WARPS; w++) {
		pthread_join(th[w], NULL);
		if (jobs[w].bad)
			fprintf(stderr, "# churn warp %u: %llu bad, first %d\n", w, (unsigned long long)jobs[w].bad,
				jobs[w].first_bad);
		bad += jobs[w].bad;
		ops += jobs[w].ops;
	}
	atomic_store(&tr.stop, true);
	pthread_join(tt, NULL);
	struct gpusys_alloc_stat st = stat_of(&k);
	const struct gpusys_alloc_pool *po = gpusys_emu_heap_pool(k.heap);
	printf("# churn: %llu ops from %d warps, pool chunks %llu got, %llu back; %llu trims\n", (unsigned long long)ops,
	       CHURN_WARPS, (unsigned long long)st.pool_chunks_got, (unsigned long long)st.pool_chunks_back,
	       (unsigned long long)po->trims);
	assert_int_equal(bad, 0);
	assert_int_equal(st.dev_refused_foreign + st.dev_refused_interior + st.dev_refused_unallocated, 0);
	/* chunks went back and came again: the race was run */
	assert_true(st.pool_chunks_back > 0);
	cl_detach(&k);
}

/* ------------------------------------------------- the claim's safety net */

/*
 * A slab whose bitmap was scribbled (a kernel writing past its block into
 * the next slab's header): every real slot marked taken but one (or none),
 * and a spare bit (slot 40 of 32: 2 KiB and 64 KiB blocks do not fill the
 * word) cleared. A claim must never hand out the spare slot, an address
 * past the slab (2.5 MiB past the chunk at 64 KiB: an MMU fault on a GPU):
 * it counts the slab as corrupt, reports it, retires it and serves the
 * lanes from another slab.
 */
static void spare_bit_case(const struct cl *k, uint32_t c, uint32_t lanes)
{
	const gpusys_heap_dev_t *hp = k->hp;
	const struct gpusys_alloc_pool *po = gpusys_emu_heap_pool(k->heap);
	uint32_t cb = gpusys_alloc_class_bytes(c);
	uint64_t sb = gpusys_slab_bytes(c);
	assert_int_equal(gpusys_slab_slots(c), 32);
	int32_t e;
	uint8_t *p = one_malloc(k, cb, &e);
	assert_non_null(p);
	uint64_t off = (uint64_t)(p - hp->base), so = off - off % sb;
	uint64_t *bits = (uint64_t *)(hp->base + so + sizeof(struct gpusys_alloc_slab));
	/* one real slot left free (slot 5) when lanes > 1, and spare slot 40 */
	uint64_t hole = UINT64_C(1) << 40 | (lanes > 1 ? UINT64_C(1) << 5 : 0);
	__atomic_store_n(bits, ~hole, __ATOMIC_RELAXED);
	unsigned long long corrupt0 = po->corrupt_slabs;
	uint64_t rep0 = stat_of(k).dev_refused_unallocated;

	uint64_t sz[L];
	void *r[L];
	int32_t er[L];
	for (uint32_t l = 0; l < L; l++)
		sz[l] = cb;
	uint64_t mask = lanes == 64 ? ~UINT64_C(0) : (UINT64_C(1) << lanes) - 1;
	gpusys_emu_malloc(k->dev, hp, mask, sz, r, er);
	const uint8_t *wild = hp->base + so + 40u * (uint64_t)cb;
	uint32_t in_old = 0;
	for (uint32_t l = 0; l < lanes; l++) {
		assert_int_equal(er[l], 0);
		assert_non_null(r[l]);
		assert_ptr_not_equal(r[l], wild);
		assert_int_equal(churn_where(k, r[l], cb), 0);
		uint64_t o = (uint64_t)((uint8_t *)r[l] - hp->base);
		if (o - o % sb == so) {
			/* the one real slot of the scribbled slab */
			assert_int_equal(o % sb, 5u * cb);
			in_old++;
		}
	}
	assert_int_equal(in_old, lanes > 1 ? 1 : 0);
	/* the spare bit is set again, the slab counted, reported, retired for good */
	assert_true(__atomic_load_n(bits, __ATOMIC_RELAXED) >> 40 & 1u);
	assert_int_equal(po->corrupt_slabs, corrupt0 + 1);
	assert_int_equal(stat_of(k).dev_refused_unallocated, rep0 + 1);
	unsigned long long v = __atomic_load_n(&hp->slab_ctl[so >> GPUSYS_ALLOC_SLAB_SHIFT], __ATOMIC_RELAXED);
	assert_int_equal(GPUSYS_SLAB_CTL_STATE(v), GPUSYS_SLAB_BROKEN);
	/* its blocks still free normally */
	assert_int_equal(one_free(k, p), 0);
	for (uint32_t l = 0; l < lanes; l++)
		assert_int_equal(one_free(k, r[l]), 0);
}

static void test_spare_bit_scribbled(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 1, 256 * MiB);
	spare_bit_case(&k, 7, 1);  /* 2 KiB: 32 to a 64 KiB slab */
	spare_bit_case(&k, 7, 3);
	spare_bit_case(&k, 12, 1); /* 64 KiB: 32 to a whole 2 MiB chunk */
	spare_bit_case(&k, 12, 3);
	assert_int_equal(gpusys_emu_heap_pool(k.heap)->wild_blocks, 0);
	cl_detach(&k);
}

/*
 * A slab retired on a count that was all other warps' reservations: the
 * last of them to leave (the claim's give-back, gpusys_slab_put_back_leader)
 * lists it again, so it is not lost as DETACHED; trim then gives it back.
 * Before, the give-back was a plain add and the empty slab stayed DETACHED
 * for good (64 KiB, or a whole chunk above 2 KiB).
 */
static void test_retired_on_reservations(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach(&k, 1, 256 * MiB);
	const gpusys_heap_dev_t *hp = k.hp;
	for (uint32_t c = 7; c <= 12; c += 5) {
		uint32_t cb = gpusys_alloc_class_bytes(c), usable = gpusys_slab_usable(c);
		uint64_t sb = gpusys_slab_bytes(c);
		int32_t e;
		uint8_t *p = one_malloc(&k, cb, &e);
		assert_non_null(p);
		uint64_t off = (uint64_t)(p - hp->base), so = off - off % sb;
		uint32_t s = (uint32_t)(so >> GPUSYS_ALLOC_SLAB_SHIFT);
		assert_int_equal(one_free(&k, p), 0);
		/* other warps' reservations fill the count of the empty slab */
		unsigned long long *ctl = &hp->slab_ctl[s];
		__atomic_fetch_add(ctl, usable, __ATOMIC_RELAXED);
		/* this malloc finds it full: retires it, takes another */
		uint8_t *q = one_malloc(&k, cb, &e);
		assert_non_null(q);
		assert_int_not_equal((uint64_t)(q - hp->base) - (uint64_t)(q - hp->base) % sb, so);
		assert_int_equal(GPUSYS_SLAB_CTL_STATE(__atomic_load_n(ctl, __ATOMIC_RELAXED)), GPUSYS_SLAB_DETACHED);
		/* they leave the way a claim gives a reservation back */
		gpusys_slab_put_back_leader(hp, (struct gpusys_alloc_slab *)(hp->base + so), usable);
		unsigned long long v = __atomic_load_n(ctl, __ATOMIC_RELAXED);
		assert_int_equal(GPUSYS_SLAB_CTL_STATE(v), GPUSYS_SLAB_LISTED);
		assert_int_equal(GPUSYS_SLAB_CTL_LIVE(v), 0);
		assert_int_equal(one_free(&k, q), 0);
	}
	/* listed and empty: trim gives the slabs back */
	assert_true(gpusys_emu_heap_trim(k.dev, hp) >= 0);
	cl_detach(&k);
}

/* SMs that find the slab pool empty together: one asks gpusysd for a
 * chunk, the others take its slabs. 64 "SMs" (groups, a thread each)
 * taking their first slab at once need 64 slabs: two chunks of 32. Before,
 * each SM that found the list empty asked for a chunk of its own (132 SMs
 * of an H200 took 132 chunks, 264 MiB, for 132 slabs). */
#define FIRST_SMS 64

struct first_job {
	const struct cl *k;
	uint32_t warp;
	pthread_barrier_t *go;
	void *p;
	int32_t err;
};

static void *first_main(void *arg)
{
	struct first_job *j = arg;
	gpusys_emu_set_warp(j->warp);
	pthread_barrier_wait(j->go);
	j->p = one_malloc(j->k, 16, &j->err);
	return NULL;
}

static void test_first_slabs_share_a_chunk(void **unused)
{
	(void)unused;
	struct cl k;
	cl_attach_groups(&k, FIRST_SMS, 256 * MiB, FIRST_SMS);
	struct first_job jobs[FIRST_SMS];
	pthread_t th[FIRST_SMS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, FIRST_SMS);
	for (uint32_t w = 0; w < FIRST_SMS; w++) {
		jobs[w] = (struct first_job){ .k = &k, .warp = w, .go = &go };
		assert_int_equal(pthread_create(&th[w], NULL, first_main, &jobs[w]), 0);
	}
	for (uint32_t w = 0; w < FIRST_SMS; w++)
		pthread_join(th[w], NULL);
	pthread_barrier_destroy(&go);
	/* each SM its own slab: 64 distinct 64 KiB slabs */
	for (uint32_t w = 0; w < FIRST_SMS; w++) {
		assert_int_equal(jobs[w].err, 0);
		assert_non_null(jobs[w].p);
		for (uint32_t v = 0; v < w; v++)
			assert_int_not_equal((uint64_t)((uint8_t *)jobs[w].p - k.hp->base) >> GPUSYS_ALLOC_SLAB_SHIFT,
					     (uint64_t)((uint8_t *)jobs[v].p - k.hp->base) >> GPUSYS_ALLOC_SLAB_SHIFT);
	}
	struct gpusys_alloc_stat st = stat_of(&k);
	printf("# %d SMs' first slabs: %llu pool chunks, %llu takes waited for another SM's chunk\n", FIRST_SMS,
	       (unsigned long long)st.pool_chunks_got, (unsigned long long)k.hp->pool->growths_waited);
	assert_int_equal(st.pool_chunks_got, FIRST_SMS / GPUSYS_ALLOC_CHUNK_SLABS);
	for (uint32_t w = 0; w < FIRST_SMS; w++)
		assert_int_equal(one_free(&k, jobs[w].p), 0);
	cl_detach(&k);
}

static int setup(void **unused)
{
	(void)unused;
	/* The service's settings, through the daemon's configuration file. */
	char conf[160];
	snprintf(conf, sizeof(conf),
		 "pollers = 2\nalloc_limit_bytes = %lluM\nalloc_chunk_bytes = %lluM\nalloc_trim_delay_ms = %d\n",
		 (unsigned long long)(LIMIT >> 20), (unsigned long long)(CHUNK >> 20), TRIM_DELAY_MS);
	gd_start(&daemon_, conf);
	return 0;
}

/* The churn test's daemon: the GPU test's 1 ms trim delay, and room for
 * the groups' current slabs of every class. */
static int setup_churn(void **unused)
{
	(void)unused;
	gd_start(&daemon_, "pollers = 2\nalloc_limit_bytes = 128M\nalloc_chunk_bytes = 4M\nalloc_trim_delay_ms = 1\n");
	return 0;
}

static int teardown(void **unused)
{
	(void)unused;
	gd_finish(&daemon_);
	return 0;
}

int main(int argc, char **argv)
{
	/* "slabs": only the test that ThreadSanitizer can follow (see above) */
	const struct CMUnitTest churn[] = { cmocka_unit_test(test_churn_short_delay) };
	if (argc > 1 && !strcmp(argv[1], "churn"))
		return cmocka_run_group_tests(churn, setup_churn, teardown);
	if (argc > 1 && !strcmp(argv[1], "split")) {
		const struct CMUnitTest only[] = { cmocka_unit_test(test_random_split_warps) };
		return cmocka_run_group_tests(only, setup, teardown);
	}
	if (argc > 1 && !strcmp(argv[1], "slabs")) {
		const struct CMUnitTest only[] = { cmocka_unit_test(test_small_threads) };
		return cmocka_run_group_tests(only, setup, teardown);
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_calloc_realloc_aligned),
		cmocka_unit_test(test_small_no_round_trips),
		cmocka_unit_test(test_bad_frees),
		cmocka_unit_test(test_two_clients),
		cmocka_unit_test(test_reopen),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_small_growth_8x),
		cmocka_unit_test(test_trim),
		cmocka_unit_test(test_trim_unmaps),
		cmocka_unit_test(test_whole_chunk_classes),
		cmocka_unit_test(test_first_slabs_share_a_chunk),
		cmocka_unit_test(test_spare_bit_scribbled),
		cmocka_unit_test(test_retired_on_reservations),
		cmocka_unit_test(test_limit_trims),
		cmocka_unit_test(test_meta_budget),
		cmocka_unit_test(test_killed_client),
		cmocka_unit_test(test_small_threads),
		cmocka_unit_test(test_random_million),
		cmocka_unit_test(test_random_split_warps),
	};
	int failed = cmocka_run_group_tests(tests, setup, teardown);
	return failed + cmocka_run_group_tests(churn, setup_churn, teardown);
}
