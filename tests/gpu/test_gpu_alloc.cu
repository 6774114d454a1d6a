/* SPDX-License-Identifier: MIT */
/*
 * The alloc service from CUDA kernels through the real gpusysd: a client
 * killed with a large heap (device memory and the daemon's figures back to
 * baseline, measured); 10^6 random malloc/realloc/free from every SM with
 * each block's contents written and checked while the heap grows during
 * the kernel; growth to the limit, ENOMEM and recovery; double, foreign and
 * interior frees refused (small blocks' on the device), trim.
 */
#include "gpu_test.h"
#include "gpusys/alloc.cuh"

#define MiB (1ull << 20)
/* 2 GiB: the random run's live set (67 584 threads x 4 blocks, up to 64 KiB)
 * in slabs, with the SMs' current slabs, stays well under it */
#define LIMIT_MIB 2048ull
#define CHUNK_MIB 16ull

struct result {
	unsigned int errors;
	int first;
	unsigned int first_tid;
	unsigned long long ops;
	unsigned long long count;
	/* GT_ALLOC_CHECK: blocks outside the mapped prefix or any pool chunk */
	unsigned int bad_blocks;
	int bad_why; /* 10 x (1 malloc, 2 realloc) + (1 outside the range, 2 past mapped, 3 no pool chunk) */
	unsigned long long bad_off, bad_size, bad_mapped;
};

static __device__ void report(struct result *r, int code)
{
	if (atomicAdd(&r->errors, 1u) == 0) {
		r->first = code;
		r->first_tid = blockIdx.x * blockDim.x + threadIdx.x;
	}
}

static __device__ uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Blocks are 16-byte aligned: whole words, then the tail's bytes. */
static __device__ void fillb(void *p, uint64_t n, uint64_t tag)
{
	uint64_t *q = (uint64_t *)p;
	for (uint64_t i = 0; i < n / 8; i++)
		q[i] = tag;
	for (uint64_t i = n / 8 * 8; i < n; i++)
		((uint8_t *)p)[i] = (uint8_t)(tag >> (8 * (i % 8)));
}

static __device__ int checkb(const void *p, uint64_t n, uint64_t tag)
{
	const uint64_t *q = (const uint64_t *)p;
	for (uint64_t i = 0; i < n / 8; i++)
		if (q[i] != tag)
			return 0;
	for (uint64_t i = n / 8 * 8; i < n; i++)
		if (((const uint8_t *)p)[i] != (uint8_t)(tag >> (8 * (i % 8))))
			return 0;
	return 1;
}

/* Size bands of the random kernel (GT_ALLOC_SIZES): small classes (1 B -
 * 2 KiB, 64 KiB slabs), 4-8 KiB (whole-chunk slabs of several bitmap
 * words), 16-64 KiB (whole-chunk slabs of one word). */
#define BAND_S 1u
#define BAND_M 2u
#define BAND_L 4u

static __device__ uint64_t rsize(uint64_t r, unsigned bands)
{
	unsigned b = r % 64 == 0 ? BAND_L : r % 64 <= 4 ? BAND_M : BAND_S;
	if (!(bands & b))
		b = bands & BAND_S ? BAND_S : bands & BAND_M ? BAND_M : BAND_L;
	switch (b) {
	case BAND_L:
		return 16384 + (r >> 8) % (48 * 1024);
	case BAND_M:
		return 2049 + (r >> 8) % 6000;
	default:
		return 1 + (r >> 8) % 2048;
	}
}

#define HOLD 4

/* What the random kernel does, for bisecting a fault on the GPU (each
 * from an environment variable, see main): the default is the full test. */
struct rconf {
	unsigned bands;   /* GT_ALLOC_SIZES: BAND_* */
	int realloc_on;   /* GT_ALLOC_OPS has realloc (else that branch frees) */
	int uniform;      /* GT_ALLOC_UNIFORM: 1: op and slot per warp, 2: size too */
	int check;        /* GT_ALLOC_CHECK: bound every block before it is touched */
	uint64_t *trace;  /* GT_ALLOC_TRACE: 4 words per thread, host memory */
	int serial;       /* GT_ALLOC_SERIAL: 1: a warp's mallocs, reallocs and
			   * frees one after another (__syncwarp between), 2:
			   * each call under a lock of its warp */
	uint32_t *wlocks; /* GT_ALLOC_SERIAL=2: one per warp */
};

/* GT_ALLOC_SERIAL=2: the lanes that arrive together hold their warp's lock
 * for their call: no two calls of one warp at once. */
static __device__ __forceinline__ unsigned wlock_take(const struct rconf &c, uint32_t wid)
{
	unsigned m = __activemask();
	if (c.serial != 2)
		return m;
	if ((threadIdx.x & 31u) == (unsigned)(__ffs(m) - 1))
		while (atomicCAS(&c.wlocks[wid], 0u, 1u))
			__nanosleep(64);
	__syncwarp(m);
	__threadfence();
	return m;
}

static __device__ __forceinline__ void wlock_give(const struct rconf &c, uint32_t wid, unsigned m)
{
	if (c.serial != 2)
		return;
	__syncwarp(m);
	__threadfence();
	if ((threadIdx.x & 31u) == (unsigned)(__ffs(m) - 1))
		atomicExch(&c.wlocks[wid], 0u);
}

/* Trace stages (word 0 of a thread's record: it << 8 | stage). */
enum { TR_MALLOC = 1, TR_FILL_M, TR_CHECK_R, TR_REALLOC, TR_TOUCH_R, TR_CHECK_F, TR_FREE, TR_DONE_IT, TR_END,
       TR_STAGES };

/* The record is host memory: a fault kills the context, not these bytes.
 * The fence pushes it out before the access it announces. */
static __device__ void trace(const struct rconf &c, uint32_t tid, int it, int stage, const void *p, uint64_t n)
{
	if (!c.trace)
		return;
	volatile uint64_t *t = c.trace + 4ull * tid;
	t[1] = (uint64_t)(uintptr_t)p;
	t[2] = n;
	t[0] = (uint64_t)it << 8 | (uint64_t)stage;
	__threadfence_system();
}

/* GT_ALLOC_CHECK: the n bytes at p lie in the mapped prefix, in a pool
 * chunk the device holds (a small block's). 0 when they do, else a code
 * (and the first bad one is recorded in res). */
static __device__ int bounded(const gpusys_heap_t &h, struct result *res, const void *p, uint64_t n, int why)
{
	uint64_t off = (uint64_t)((const uint8_t *)p - h.heap.base);
	uint64_t mapped = gpusys_heap_mapped_bytes(h);
	int bad = 0;
	if ((const uint8_t *)p < h.heap.base || off >= h.heap.reserve)
		bad = 1;
	else if (off + n > mapped)
		bad = 2;
	else {
		uint32_t co = *(volatile uint32_t *)&h.heap.chunk_of[off >> GPUSYS_ALLOC_CHUNK_SHIFT];
		if (!co || (co & GPUSYS_CHUNK_GONE))
			bad = 3;
	}
	if (bad && atomicAdd(&res->bad_blocks, 1u) == 0) {
		res->bad_off = off;
		res->bad_size = n;
		res->bad_mapped = mapped;
		res->bad_why = why * 10 + bad;
	}
	return bad;
}

static __global__ void k_random(gpusys_heap_t h, struct result *res, int iters, struct rconf conf)
{
	uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	/* GT_ALLOC_UNIFORM: the op and slot (1) and the size too (2) are the
	 * warp's: every lane of a warp makes the same call, as in the bench */
	uint32_t wid = tid / 32u;
	void *p[HOLD] = { 0 };
	uint64_t sz[HOLD] = { 0 }, tag[HOLD] = { 0 };
	uint64_t ops = 0, seq = 0;
	for (int it = 0; it < iters; it++) {
		uint64_t r = mix(((uint64_t)tid << 32) | (uint64_t)it);
		uint64_t rw = conf.uniform ? mix(((uint64_t)wid << 32) | (uint64_t)it | 1ull << 63) : r;
		uint64_t rs = conf.uniform >= 2 ? rw : r;
		int s = (int)(rw % HOLD);
		uint64_t t = ((uint64_t)tid << 24) | ++seq;
		/* 0 malloc, 1 realloc, 2 free */
		int op = !p[s] ? 0 : conf.realloc_on && (rw >> 40) % 4 == 0 ? 1 : 2;
		for (int ph = 0; ph < 3; ph++) {
		if (conf.serial == 1)
			__syncwarp();
		if (ph != op)
			continue;
		if (op == 0) {
			uint64_t n = rsize(rs >> 8, conf.bands);
			trace(conf, tid, it, TR_MALLOC, 0, n);
			unsigned wm = wlock_take(conf, wid);
			void *q = gpusys_malloc(h, n);
			wlock_give(conf, wid, wm);
			if (!q) {
				report(res, 100000 + gpusys_alloc_errno(h));
				continue;
			}
			if (conf.check && bounded(h, res, q, n, 1)) {
				report(res, 6);
				continue; /* left behind: not touched */
			}
			trace(conf, tid, it, TR_FILL_M, q, n);
			fillb(q, n, t);
			p[s] = q, sz[s] = n, tag[s] = t;
		} else if (op == 1) {
			trace(conf, tid, it, TR_CHECK_R, p[s], sz[s]);
			if (!checkb(p[s], sz[s], tag[s]))
				report(res, 1);
			uint64_t n = rsize(rs >> 16, conf.bands);
			trace(conf, tid, it, TR_REALLOC, p[s], n);
			unsigned wm = wlock_take(conf, wid);
			void *q = gpusys_realloc(h, p[s], n);
			wlock_give(conf, wid, wm);
			if (!q) {
				report(res, 200000 + gpusys_alloc_errno(h));
				continue;
			}
			if (conf.check && bounded(h, res, q, n, 2)) {
				report(res, 7);
				p[s] = 0; /* left behind: not touched */
				continue;
			}
			trace(conf, tid, it, TR_TOUCH_R, q, n);
			if (!checkb(q, n < sz[s] ? n : sz[s], tag[s]))
				report(res, 2);
			fillb(q, n, t);
			p[s] = q, sz[s] = n, tag[s] = t;
		} else {
			trace(conf, tid, it, TR_CHECK_F, p[s], sz[s]);
			if (!checkb(p[s], sz[s], tag[s]))
				report(res, 3);
			trace(conf, tid, it, TR_FREE, p[s], sz[s]);
			unsigned wm = wlock_take(conf, wid);
			int rc = gpusys_free(h, p[s]);
			wlock_give(conf, wid, wm);
			if (rc)
				report(res, 300000 - rc);
			p[s] = 0;
		}
		}
		trace(conf, tid, it, TR_DONE_IT, 0, 0);
		ops++;
	}
	for (int s = 0; s < HOLD; s++) {
		if (!p[s])
			continue;
		trace(conf, tid, iters, TR_END, p[s], sz[s]);
		if (!checkb(p[s], sz[s], tag[s]))
			report(res, 4);
		if (gpusys_free(h, p[s]))
			report(res, 5);
	}
	trace(conf, tid, iters + 1, TR_DONE_IT, 0, 0);
	atomicAdd(&res->ops, ops);
}

/* Each thread takes 1 MiB blocks until NULL; ENOMEM; free; again. 32
 * threads x PER is more than the limit. */
#define PER 96
static __global__ void k_limit(gpusys_heap_t h, struct result *res)
{
	void *b[PER];
	int n = 0;
	while (n < PER) {
		b[n] = gpusys_malloc(h, MiB);
		if (!b[n])
			break;
		((uint64_t *)b[n])[MiB / 8 - 1] = n; /* the memory is there */
		n++;
	}
	if (n == PER)
		report(res, 10);
	else if (gpusys_alloc_errno(h) != ENOMEM)
		report(res, 20000 + gpusys_alloc_errno(h));
	atomicAdd(&res->count, (unsigned long long)n);
	__syncthreads();
	for (int i = 0; i < n; i++) {
		if (((uint64_t *)b[i])[MiB / 8 - 1] != (uint64_t)i)
			report(res, 11);
		if (gpusys_free(h, b[i]))
			report(res, 12);
	}
	__syncthreads();
	void *again = gpusys_malloc(h, MiB);
	if (!again)
		report(res, 30000 + gpusys_alloc_errno(h));
	else if (gpusys_free(h, again))
		report(res, 13);
}

static __global__ void k_bad(gpusys_heap_t h, void *foreign, struct result *res)
{
	uint8_t *a = (uint8_t *)gpusys_malloc(h, 100);
	uint8_t *big = (uint8_t *)gpusys_malloc(h, 100000); /* above 64 KiB: the daemon's */
	if (!a || !big) {
		report(res, 40);
		return;
	}
	int want[6] = { -EFAULT, -EINVAL, -EINVAL, 0, -ENOENT, 0 };
	int got[6];
	got[0] = gpusys_free(h, foreign);
	got[1] = gpusys_free(h, a + 16);
	got[2] = gpusys_free(h, big + 4096);
	got[3] = gpusys_free(h, a);
	got[4] = gpusys_free(h, a);
	got[5] = gpusys_free(h, big);
	for (int i = 0; i < 6; i++)
		if (got[i] != want[i])
			report(res, 50 + i * 1000 - got[i]);
	if (gpusys_free(h, big) != -ENOENT)
		report(res, 60);
	struct gpusys_alloc_stat st;
	/* the small block's refusals were the device's (a bit already clear
	 * for the double free), the large block's the daemon's: big + 4096
	 * and big's second free (test_alloc.c's test_bad_frees counts each
	 * exactly; the heap here served the sections above, so at least) */
	if (gpusys_alloc_stat(h, &st))
		report(res, 61);
	else if (st.dev_refused_foreign < 1)
		report(res, 62);
	else if (st.dev_refused_interior < 1)
		report(res, 63);
	else if (st.dev_refused_unallocated < 1)
		report(res, 64);
	else if (st.refused_interior < 1)
		report(res, 65);
	else if (st.refused_unallocated < 1)
		report(res, 66);
}

static __global__ void k_stat(gpusys_heap_t h, struct gpusys_alloc_stat *st, int *rc)
{
	*rc = gpusys_alloc_stat(h, st);
}

/* GT_ALLOC_SPIN: runs on a stream of its own until the host says stop (or
 * 10 s pass), so that a shrink's unmap happens while a kernel runs. */
static __global__ void k_spin(volatile int *stop)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		__nanosleep(10000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (!*stop && t - t0 < 10000000000ull);
}

static __global__ void k_trim(gpusys_heap_t h, int *rc)
{
	int r = gpusys_heap_trim(h);
	if (threadIdx.x == 0)
		*rc = r;
}

__global__ void k_keep(gpusys_heap_t h, struct result *res)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	void *p = gpusys_malloc(h, MiB);
	if (!p) {
		report(res, 70000 + gpusys_alloc_errno(h));
		return;
	}
	((uint64_t *)p)[0] = i;
}

/* Child: big_mib threads each take and keep 1 MiB; wait to be killed.
 * go_fd < 0: take them, then detach and exit. */
static void child_big_heap(int go_fd, int ready_fd, int big_mib)
{
	char c;
	if (go_fd >= 0 && read(go_fd, &c, 1) != 1)
		_exit(2);
	gpusys_t *g = gt_attach(0, 0);
	struct gpusys_heap *heap;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	if (gpusys_heap_open(g, &ho, &heap))
		_exit(3);
	struct result *res;
	if (cudaMallocManaged(&res, sizeof(*res)) != cudaSuccess)
		_exit(4);
	memset(res, 0, sizeof(*res));
	k_keep<<<(big_mib + 127) / 128, 128>>>(gpusys_heap_device(heap), res);
	if (gpusys_synchronize(g, NULL, 120000) || res->errors) {
		fprintf(stderr, "child: %u errors, first %d\n", res->errors, res->first);
		_exit(5);
	}
	if (go_fd < 0) {
		gpusys_detach(g);
		_exit(0);
	}
	if (write(ready_fd, "r", 1) != 1)
		_exit(6);
	pause();
	_exit(0);
}

static size_t free_mem(void)
{
	size_t f = 0, t = 0;
	GT_CUDA(cudaMemGetInfo(&f, &t));
	return f;
}

static int env_int(const char *name, int dflt)
{
	const char *e = getenv(name);
	return e && *e ? atoi(e) : dflt;
}

/* After the random kernel failed (a fault kills the context, not the
 * trace's host memory): where every thread was. A thread about to touch a
 * block (a fill or check stage) whose bytes are not inside the mapped
 * prefix is what faulted, or would have. */
static void dump_trace(const uint64_t *tr, uint32_t nthreads, const uint8_t *base, uint64_t mapped)
{
	static const char *name[TR_STAGES] = { "none", "in malloc", "filling after malloc", "checking before realloc",
						"in realloc", "touching after realloc", "checking before free",
						"in free", "iteration done", "final check/free" };
	unsigned long long n[TR_STAGES] = { 0 };
	uint64_t it_min = ~0ull, it_max = 0;
	unsigned printed = 0, outside = 0;
	for (uint32_t i = 0; i < nthreads; i++) {
		const volatile uint64_t *t = tr + 4ull * i;
		uint64_t w = t[0], ptr = t[1], len = t[2];
		uint32_t st = (uint32_t)(w & 0xff);
		uint64_t it = w >> 8;
		n[st < TR_STAGES ? st : 0]++;
		it_min = it < it_min ? it : it_min;
		it_max = it > it_max ? it : it_max;
		int touching = st == TR_FILL_M || st == TR_CHECK_R || st == TR_TOUCH_R || st == TR_CHECK_F || st == TR_END;
		uint64_t off = ptr - (uint64_t)(uintptr_t)base;
		if (touching && (ptr < (uint64_t)(uintptr_t)base || off + len > mapped)) {
			outside++;
			if (printed++ < 10)
				fprintf(stderr, "trace: thread %u (warp %u lane %u) %s at iteration %llu: block at offset %#llx, "
					"%llu bytes, mapped %#llx: OUTSIDE the mapped prefix\n",
					i, i / 32, i % 32, name[st], (unsigned long long)it, (unsigned long long)off,
					(unsigned long long)len, (unsigned long long)mapped);
		}
	}
	fprintf(stderr, "trace: %u threads, iterations %llu..%llu, heap mapped %llu MiB; %u touching outside it\n",
		nthreads, (unsigned long long)it_min, (unsigned long long)it_max, (unsigned long long)(mapped >> 20),
		outside);
	for (int st = 0; st < TR_STAGES; st++)
		if (n[st])
			fprintf(stderr, "trace:   %8llu threads %s\n", n[st], name[st]);
}

int main(void)
{
	/* line by line: a run killed by a timeout keeps what it printed */
	setvbuf(stdout, NULL, _IOLBF, 0);
	gt_name = "test_gpu_alloc";
	gt_require_gpu_forked();
	char v[64];
	snprintf(v, sizeof(v), "%lluM", LIMIT_MIB);
	setenv("GPUSYSD_ALLOC_LIMIT_BYTES", v, 1);
	/* Bisecting a fault of the random kernel on the GPU: each knob below
	 * changes one thing (all unset: the full test).
	 *   GT_ALLOC_SKIP_KILL=1     skip part 1 (the killed client)
	 *   GT_ALLOC_ONLY_RANDOM=1   stop after part 2 (the random kernel)
	 *   GT_ALLOC_OPS=malloc,free (no realloc: that branch frees)
	 *   GT_ALLOC_SIZES=sml       bands: s 1 B-2 KiB, m 2-8 KiB, l 16-64 KiB
	 *   GT_ALLOC_UNIFORM=1|2     op and slot per warp (1), size too (2)
	 *   GT_ALLOC_CHECK=1         bound each block (mapped prefix, a pool
	 *                            chunk) before touching it: errors, no fault
	 *   GT_ALLOC_TRACE=1         per-thread stage in host memory, dumped
	 *                            when the kernel fails
	 *   GT_ALLOC_INITIAL_MIB=N   map N MiB before the kernel (no growth)
	 *   GT_ALLOC_CHUNK_MIB=N     the daemon's first grant (default 16)
	 *   GT_ALLOC_SERIAL=1|2      a warp's calls one kind at a time (1:
	 *                            __syncwarp between mallocs, reallocs and
	 *                            frees) or one call at a time (2: a lock)
	 *   GT_ALLOC_BLOCKS_PER_SM=N (default 2), GT_ALLOC_THREADS=N (256),
	 *   GT_ALLOC_ITERS=N
	 * And GT_ALLOC_SPIN=1 with GPUSYS_HEAP_UNMAP=1: a kernel keeps running
	 * through part 3's trims; the test says whether the unmap happened
	 * while it ran (does cuMemUnmap wait for running kernels?). */
	const char *knobs[] = { "GT_ALLOC_SKIP_KILL", "GT_ALLOC_ONLY_RANDOM", "GT_ALLOC_OPS", "GT_ALLOC_SIZES",
				"GT_ALLOC_UNIFORM", "GT_ALLOC_CHECK", "GT_ALLOC_TRACE", "GT_ALLOC_INITIAL_MIB",
				"GT_ALLOC_CHUNK_MIB", "GT_ALLOC_BLOCKS_PER_SM", "GT_ALLOC_ITERS",
				"GT_ALLOC_SERIAL", "GT_ALLOC_THREADS" };
	int bisect = 0;
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
		const char *e = getenv(knobs[i]);
		if (e && *e) {
			printf("bisect: %s=%s\n", knobs[i], e);
			bisect = 1;
		}
	}
	unsigned long long chunk_mib = (unsigned long long)env_int("GT_ALLOC_CHUNK_MIB", (int)CHUNK_MIB);
	snprintf(v, sizeof(v), "%lluM", chunk_mib);
	setenv("GPUSYSD_ALLOC_CHUNK_BYTES", v, 1);
	/* 1 ms: chunks go back and come again all through the random run.
	 * GT_ALLOC_TRIM_DELAY_MS overrides it, to tell a fault of that churn
	 * from one without it. */
	const char *td = getenv("GT_ALLOC_TRIM_DELAY_MS");
	setenv("GPUSYSD_ALLOC_TRIM_DELAY_MS", td && *td ? td : "1", 1);
	const int trim_delay_ms = td && *td ? atoi(td) : 1;
	gt_start_daemon(NULL);

	/* 1. A killed client: fork before this process touches CUDA. First a
	 * client that takes a little and exits: the daemon keeps one CUDA
	 * context per GPU from then until it exits (daemon/core/channel_cuda.c),
	 * so the baseline is taken with that context in place. */
	if (env_int("GT_ALLOC_SKIP_KILL", 0)) {
		GT_CUDA(cudaSetDevice(0));
		GT_CUDA(cudaFree(0));
	} else {
		pid_t warm = fork();
		GT_CHECK(warm >= 0, "fork");
		if (warm == 0)
			child_big_heap(-1, -1, 8);
		int warm_status = 0;
		GT_CHECK(waitpid(warm, &warm_status, 0) == warm && WIFEXITED(warm_status) && WEXITSTATUS(warm_status) == 0,
			 "the first client failed (status %#x)", warm_status);
		const int big_mib = 768;
		int go[2], ready[2];
		GT_CHECK(pipe(go) == 0 && pipe(ready) == 0, "pipe");
		pid_t child = fork();
		GT_CHECK(child >= 0, "fork");
		if (child == 0) {
			close(go[1]);
			close(ready[0]);
			child_big_heap(go[0], ready[1], big_mib);
		}
		close(go[0]);
		close(ready[1]);
		GT_CUDA(cudaSetDevice(0));
		GT_CUDA(cudaFree(0));
		size_t free0 = free_mem();
		GT_CHECK(write(go[1], "g", 1) == 1, "go");
		char c;
		GT_CHECK(read(ready[0], &c, 1) == 1, "the child did not build its heap");
		size_t free1 = free_mem();
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		size_t free2 = free_mem();
		for (int i = 0; i < 200 && free2 + 64 * MiB < free0; i++) {
			usleep(10000);
			free2 = free_mem();
		}
		printf("killed client: device free %zu MiB before, %zu MiB with its %d MiB heap, %zu MiB after\n",
		       free0 >> 20, free1 >> 20, big_mib, free2 >> 20);
		GT_CHECK(free0 - free1 >= (size_t)big_mib * MiB, "the child's heap did not take device memory");
		GT_CHECK(free2 + 64 * MiB >= free0, "device memory not back after the kill");
	}

	gpusys_t *g = gt_attach(0, 0);
	struct gpusys_heap *heap;
	struct gpusys_heap_options ho;
	memset(&ho, 0, sizeof(ho));
	ho.cuda_device = 0;
	ho.initial_bytes = (uint64_t)env_int("GT_ALLOC_INITIAL_MIB", 0) * MiB;
	int rc = gpusys_heap_open(g, &ho, &heap);
	GT_CHECK(rc == 0, "gpusys_heap_open: %s", gpusys_strerror(rc));
	struct gpusys_alloc_stat *st;
	int *src;
	GT_CUDA(cudaMallocManaged(&st, sizeof(*st)));
	GT_CUDA(cudaMallocManaged(&src, sizeof(int)));
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
	printf("daemon after the kill: %llu heaps, %llu MiB granted, %llu B metadata\n",
	       (unsigned long long)st->all_heaps, (unsigned long long)(st->all_grant >> 20),
	       (unsigned long long)st->all_meta_bytes);
	GT_CHECK(*src == 0 && st->all_heaps == 0 && st->all_grant == 0 && st->all_meta_bytes == 0,
		 "the killed client's heap is still in the daemon (rc %d, heaps %llu)", *src,
		 (unsigned long long)st->all_heaps);

	/* 2. 10^6 random operations from every SM; the heap grows meanwhile. */
	struct result *res;
	GT_CUDA(cudaMallocManaged(&res, sizeof(*res)));
	memset(res, 0, sizeof(*res));
	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	int blocks = prop.multiProcessorCount * env_int("GT_ALLOC_BLOCKS_PER_SM", 2);
	int threads = env_int("GT_ALLOC_THREADS", 256);
	int iters = env_int("GT_ALLOC_ITERS", (int)(1000000ll / (blocks * threads)) + 1);
	struct rconf conf;
	memset(&conf, 0, sizeof(conf));
	const char *ops = getenv("GT_ALLOC_OPS"), *sizes = getenv("GT_ALLOC_SIZES");
	conf.realloc_on = !ops || !*ops || strstr(ops, "realloc") != NULL;
	conf.bands = 0;
	if (!sizes || !*sizes)
		sizes = "sml";
	conf.bands |= strchr(sizes, 's') ? BAND_S : 0u;
	conf.bands |= strchr(sizes, 'm') ? BAND_M : 0u;
	conf.bands |= strchr(sizes, 'l') ? BAND_L : 0u;
	GT_CHECK(conf.bands != 0, "GT_ALLOC_SIZES: none of s, m, l");
	conf.uniform = env_int("GT_ALLOC_UNIFORM", 0);
	conf.check = env_int("GT_ALLOC_CHECK", 0);
	conf.serial = env_int("GT_ALLOC_SERIAL", 0);
	if (conf.serial == 2) {
		size_t wl = (size_t)blocks * threads / 32 * sizeof(uint32_t);
		GT_CUDA(cudaMalloc((void **)&conf.wlocks, wl));
		GT_CUDA(cudaMemset(conf.wlocks, 0, wl));
	}
	uint64_t *trace_host = NULL;
	size_t trace_bytes = (size_t)blocks * threads * 4 * sizeof(uint64_t);
	if (env_int("GT_ALLOC_TRACE", 0)) {
		GT_CUDA(cudaHostAlloc((void **)&trace_host, trace_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
		memset(trace_host, 0, trace_bytes);
		GT_CUDA(cudaHostGetDevicePointer((void **)&conf.trace, trace_host, 0));
	}
	printf("random: %d blocks x %d threads, %d iterations, realloc %s, sizes %s%s%s, uniform %d, serial %d, check %d, "
	       "trace %s, initial %llu MiB, first grant %llu MiB\n",
	       blocks, threads, iters, conf.realloc_on ? "on" : "off", conf.bands & BAND_S ? "s" : "",
	       conf.bands & BAND_M ? "m" : "", conf.bands & BAND_L ? "l" : "", conf.uniform, conf.serial, conf.check,
	       trace_host ? "on" : "off", (unsigned long long)(ho.initial_bytes >> 20), chunk_mib);
	fflush(stdout);
	double t0 = gt_now();
	k_random<<<blocks, threads>>>(gpusys_heap_device(heap), res, iters, conf);
	rc = gpusys_synchronize(g, NULL, 120000);
	double t1 = gt_now();
	if (rc) {
		cudaError_t ce = cudaDeviceSynchronize();
		fprintf(stderr, "random: failed after %.3f s: %s (CUDA: %s); heap mapped %llu MiB in %u mappings\n",
			t1 - t0, gpusys_strerror(rc), cudaGetErrorString(ce),
			(unsigned long long)(gpusys_heap_mapped(heap) >> 20), gpusys_heap_maps(heap));
		if (trace_host)
			dump_trace(trace_host, (uint32_t)(blocks * threads), gpusys_heap_device(heap).heap.base,
				   gpusys_heap_mapped(heap));
	}
	GT_CHECK(rc == 0, "synchronize: %s", gpusys_strerror(rc));
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0 && *src == 0, "stat");
	printf("random: %llu ops from %d threads in %.3f s, %u errors (first %d at thread %u); heap mapped %llu MiB "
	       "in %u mappings (first grant %llu MiB), last mapping %.2f ms; daemon: %llu mallocs %llu frees %llu "
	       "reallocs, %llu live blocks (a pool chunk is one), pool %llu MiB (%llu chunks got, %llu back)\n",
	       res->ops, blocks * threads, t1 - t0, res->errors, res->first, res->first_tid,
	       (unsigned long long)(gpusys_heap_mapped(heap) >> 20), gpusys_heap_maps(heap), CHUNK_MIB,
	       gpusys_heap_last_map_ns(heap) / 1e6, (unsigned long long)st->mallocs, (unsigned long long)st->frees,
	       (unsigned long long)st->reallocs, (unsigned long long)st->live_blocks,
	       (unsigned long long)(st->pool_bytes >> 20), (unsigned long long)st->pool_chunks_got,
	       (unsigned long long)st->pool_chunks_back);
	if (res->bad_blocks)
		fprintf(stderr, "random: %u blocks outside the mapped prefix or any pool chunk (first: why %d, offset "
			"%#llx, %llu bytes, mapped %#llx)\n",
			res->bad_blocks, res->bad_why, res->bad_off, res->bad_size, res->bad_mapped);
	GT_CHECK(res->errors == 0, "random: %u errors, first code %d", res->errors, res->first);
	if (bisect) {
		printf("bisect: the random kernel ran clean (ops and growth not checked)\n");
		if (env_int("GT_ALLOC_ONLY_RANDOM", 0)) {
			gpusys_heap_close(heap);
			gpusys_detach(g);
			gt_stop_daemon();
			printf("test_gpu_alloc: ok (random only)\n");
			return 0;
		}
	} else {
		GT_CHECK(res->ops >= 1000000ull, "random: %llu ops", res->ops);
		GT_CHECK(gpusys_heap_mapped(heap) >= 8 * CHUNK_MIB * MiB, "the heap did not grow 8x during the kernel");
	}

	/* 3. Trim: the random run's blocks are all freed, so its pool chunks
	 * go back to the daemon (the delay is 1 ms here, unless
	 * GT_ALLOC_TRIM_DELAY_MS says otherwise): the first trim frees the
	 * slabs (SMs' current ones too) and starts the chunks' clocks, the
	 * second, a delay later, gives the chunks back. The heap's top is then
	 * free: gpusysd shrinks it (its grant drops). By default the mapping
	 * thread keeps the memory until gpusys_heap_release (no kernel runs:
	 * cuMemUnmap waits for running kernels, docs/ALLOC.md); with
	 * GPUSYS_HEAP_UNMAP=1 it unmaps at once. Either way the GPU has the
	 * memory back. Then the limit (step 4) grows the heap again. */
	uint64_t grown = gpusys_heap_mapped(heap);
	uint32_t unmaps0 = gpusys_heap_unmaps(heap);
	size_t free0 = free_mem();
	const char *um = getenv("GPUSYS_HEAP_UNMAP");
	const int unmap = um && !strcmp(um, "1");
	int back[2];
	/* GT_ALLOC_SPIN=1 (an experiment, with GPUSYS_HEAP_UNMAP=1): a kernel
	 * runs on a stream of its own through the trims; does the unmap wait
	 * for it? Watched through the unmap counter, which does not wait. */
	const int spin = unmap && env_int("GT_ALLOC_SPIN", 0);
	int *stop = NULL;
	cudaStream_t s_spin = NULL;
	if (spin) {
		GT_CUDA(cudaHostAlloc((void **)&stop, sizeof(int), cudaHostAllocMapped));
		*(volatile int *)stop = 0;
		GT_CUDA(cudaStreamCreateWithFlags(&s_spin, cudaStreamNonBlocking));
		k_spin<<<1, 1, 0, s_spin>>>(stop);
	}
	for (int t = 0; t < 2; t++) {
		usleep(t ? (useconds_t)trim_delay_ms * 1000u + 10000u : 10000u);
		k_trim<<<1, 32>>>(gpusys_heap_device(heap), src);
		GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
		back[t] = *src;
		GT_CHECK(*src >= 0, "trim: %d", *src);
	}
	if (spin) {
		double s0 = gt_now();
		while (gpusys_heap_unmaps(heap) == unmaps0 && gt_now() - s0 < 3.0)
			usleep(1000);
		int during = gpusys_heap_unmaps(heap) != unmaps0, running = cudaStreamQuery(s_spin) == cudaErrorNotReady;
		double during_ms = (gt_now() - s0) * 1e3;
		*(volatile int *)stop = 1;
		GT_CUDA(cudaStreamSynchronize(s_spin));
		double s1 = gt_now();
		while (gpusys_heap_unmaps(heap) == unmaps0 && gt_now() - s1 < 3.0)
			usleep(1000);
		printf("spin: with a kernel running (still running at the end: %d), the unmap %s (%.1f ms); after it "
		       "ended: %s (%.1f ms)\n",
		       running, during ? "happened" : "did not happen", during_ms,
		       gpusys_heap_unmaps(heap) != unmaps0 ? "unmapped" : "not unmapped", (gt_now() - s1) * 1e3);
		GT_CUDA(cudaStreamDestroy(s_spin));
		GT_CUDA(cudaFreeHost(stop));
	}
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0 && *src == 0, "stat");
	GT_CHECK(back[0] + back[1] > 0, "trim: no chunk went back");
	GT_CHECK(st->grant <= grown / 2, "trim: gpusysd did not shrink the heap (grant %llu MiB of %llu mapped)",
		 (unsigned long long)(st->grant >> 20), (unsigned long long)(grown >> 20));
	double w0 = gt_now();
	int64_t released = 0;
	if (unmap) {
		while (gpusys_heap_mapped(heap) == grown && gt_now() - w0 < 2.0)
			usleep(1000);
	} else {
		usleep(20000); /* the mapping thread's look at the shrink */
		GT_CHECK(gpusys_heap_mapped(heap) == grown && gpusys_heap_unmaps(heap) == unmaps0,
			 "trim: unmapped without GPUSYS_HEAP_UNMAP or gpusys_heap_release");
		released = gpusys_heap_release(heap);
	}
	double unmap_ms = (gt_now() - w0) * 1e3;
	uint64_t shrunk = gpusys_heap_mapped(heap);
	size_t free1 = free_mem();
	printf("trim: %d + %d pool chunks back to gpusysd; grant %llu MiB; heap mapped %llu -> %llu MiB (%u unmaps, "
	       "%s, %.1f ms; %lld MiB released); GPU free memory %zu -> %zu MiB\n",
	       back[0], back[1], (unsigned long long)(st->grant >> 20), (unsigned long long)(grown >> 20),
	       (unsigned long long)(shrunk >> 20), gpusys_heap_unmaps(heap) - unmaps0,
	       unmap ? "GPUSYS_HEAP_UNMAP=1, seen after the trim" : "gpusys_heap_release", unmap_ms,
	       (long long)(released >> 20), free0 >> 20, free1 >> 20);
	GT_CHECK(shrunk <= grown / 2, "trim: the heap was not unmapped (%llu of %llu MiB still mapped)",
		 (unsigned long long)(shrunk >> 20), (unsigned long long)(grown >> 20));
	GT_CHECK(unmap || (uint64_t)released == grown - shrunk, "trim: released %lld bytes", (long long)released);
	GT_CHECK(free1 >= free0 + (grown - shrunk) / 2, "trim: the GPU did not get the memory back");

	/* 4. The limit: ENOMEM, then recovery. */
	memset(res, 0, sizeof(*res));
	k_limit<<<1, 32>>>(gpusys_heap_device(heap), res);
	GT_CHECK(gpusys_synchronize(g, NULL, 120000) == 0, "synchronize");
	k_stat<<<1, 1>>>(gpusys_heap_device(heap), st, src);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0 && *src == 0, "stat");
	printf("limit: %llu x 1 MiB taken before ENOMEM (limit %llu MiB), grant %llu MiB, enomem %llu\n", res->count,
	       LIMIT_MIB, (unsigned long long)(st->grant >> 20), (unsigned long long)st->enomem);
	GT_CHECK(res->errors == 0, "limit: %u errors, first code %d", res->errors, res->first);
	/* SMs' current slabs keep some pool chunks (bounded by SMs x classes) */
	GT_CHECK(res->count >= LIMIT_MIB / 2 && res->count <= LIMIT_MIB, "limit: %llu blocks", res->count);
	GT_CHECK(st->grant == LIMIT_MIB * MiB && st->enomem >= 32, "limit: grant/enomem");

	/* 5. Bad frees. */
	void *foreign;
	GT_CUDA(cudaMalloc(&foreign, 4096));
	memset(res, 0, sizeof(*res));
	k_bad<<<1, 1>>>(gpusys_heap_device(heap), foreign, res);
	GT_CHECK(gpusys_synchronize(g, NULL, 30000) == 0, "synchronize");
	GT_CHECK(res->errors == 0, "bad frees: %u errors, first code %d", res->errors, res->first);

	gpusys_heap_close(heap);
	gpusys_detach(g);
	gt_stop_daemon();
	printf("test_gpu_alloc: ok\n");
	return 0;
}
