/* SPDX-License-Identifier: MIT */
/*
 * Futures and user host callbacks on the GPU, through the real gpusysd:
 *  - every lane of every resident warp starts 12 ECHO futures (8 asynchronous,
 *    the bound; the rest synchronous) and waits them in reverse order;
 *  - every lane of every resident warp calls a typed callback, synchronously
 *    and asynchronously, every result checked;
 *  - bytes callbacks with payloads up to 1 MiB per lane;
 *  - an unregistered user opcode: -ENOSYS, not a hang;
 *  - gpusys_query: false while a fire-and-forget callback is unanswered
 *    (the kernel has ended), true once the host lets it finish.
 */
#include <atomic>

#include "gpu_test.h"

/* Where each thread's calls stand, for the dump of a hang (gt_dump_hang):
 * per thread (a 1-D grid) the calls it started, times 16, plus the last
 * trace point of device/port_client.h it passed; per leader the port it
 * locked, and whether it then had to wait for the hand-back (bit 31).
 * One store to device memory a point: cheap next to a call. */
#define GT_TRACE_MAX (1u << 18)
__device__ unsigned *gt_trace_state;
__device__ unsigned *gt_trace_port;
static __device__ __forceinline__ void gt_trace_point(unsigned k)
{
	volatile unsigned *t = gt_trace_state;
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (t && i < GT_TRACE_MAX)
		t[i] = k ? (t[i] & ~0xfu) | k : (t[i] + 0x10u) & ~0xfu;
}
static __device__ __forceinline__ void gt_trace_lock(unsigned p, int must_wait)
{
	volatile unsigned *t = gt_trace_port;
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (t && i < GT_TRACE_MAX)
		t[i] = p | (must_wait ? 1u << 31 : 0u);
}
#define GPUSYS_RPC_TRACE(k) gt_trace_point(k)
#define GPUSYS_LOCK_TRACE(p, must_wait) gt_trace_lock(p, must_wait)
#include "gpusys/device.cuh"

constexpr gpusys_callback<unsigned long long(unsigned, unsigned)> mix_cb{ 0x8001 };
constexpr gpusys_callback<void(unsigned)> gate_cb{ 0x8002 };
#define OP_XFORM 0x8003
#define OP_NOBODY 0x8fff

static __host__ __device__ unsigned long long mix(unsigned a, unsigned b)
{
	unsigned long long x = ((unsigned long long)a << 32) ^ b ^ 0x9e3779b97f4a7c15ull;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

static unsigned long long mix_host(unsigned a, unsigned b)
{
	return mix(a, b);
}

static std::atomic<int> gate_open{ 0 };
static std::atomic<int> gate_calls{ 0 };
static void gate_host(unsigned v)
{
	(void)v;
	while (!gate_open.load())
		usleep(1000);
	gate_calls++;
}

static int xform_host(void *user, const void *arg, uint32_t arg_len, void *res, uint32_t res_cap, uint32_t *res_len)
{
	(void)user;
	if (res_cap < arg_len)
		return -EMSGSIZE;
	const uint8_t *a = (const uint8_t *)arg;
	uint8_t *r = (uint8_t *)res;
	for (uint32_t i = 0; i < arg_len; i++)
		r[i] = a[arg_len - 1 - i] ^ 0x5a;
	*res_len = arg_len;
	return 0;
}

/* ---------------------------------------------------------- hang dump */

static unsigned *gt_state_d, *gt_port_d, *gt_state_h, *gt_port_h;

static void gt_trace_init(void)
{
	GT_CUDA(cudaMalloc(&gt_state_d, GT_TRACE_MAX * sizeof(unsigned)));
	GT_CUDA(cudaMalloc(&gt_port_d, GT_TRACE_MAX * sizeof(unsigned)));
	GT_CUDA(cudaMallocHost(&gt_state_h, GT_TRACE_MAX * sizeof(unsigned)));
	GT_CUDA(cudaMallocHost(&gt_port_h, GT_TRACE_MAX * sizeof(unsigned)));
	GT_CUDA(cudaMemcpyToSymbol(gt_trace_state, &gt_state_d, sizeof(gt_state_d)));
	GT_CUDA(cudaMemcpyToSymbol(gt_trace_port, &gt_port_d, sizeof(gt_port_d)));
}

/* Before each kernel: no call started, no port locked. */
static void gt_trace_reset(void)
{
	GT_CUDA(cudaMemset(gt_state_d, 0, GT_TRACE_MAX * sizeof(unsigned)));
	GT_CUDA(cudaMemset(gt_port_d, 0xff, GT_TRACE_MAX * sizeof(unsigned)));
}

/* A copy from device-visible memory while the hung kernel still runs: on a
 * stream that does not wait for the legacy default stream. */
static bool gt_peek(cudaStream_t s, void *dst, const void *src, size_t n)
{
	return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s) == cudaSuccess &&
	       cudaStreamSynchronize(s) == cudaSuccess;
}

/* A kernel of threads threads on channel ch (a host copy of the handle,
 * device pointers in it) that should have started calls calls each did not
 * end: print where its threads stand, and the channel's port locks. */
static void gt_dump_hang(const gpusys_dev_t *ch, unsigned threads, unsigned calls)
{
	cudaStream_t s;
	if (threads > GT_TRACE_MAX || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
		return;
	if (!gt_peek(s, gt_state_h, gt_state_d, threads * sizeof(unsigned)) ||
	    !gt_peek(s, gt_port_h, gt_port_d, threads * sizeof(unsigned))) {
		fprintf(stderr, "hang dump: the trace could not be read\n");
		return;
	}
	/* Threads by (calls started, last point). */
	unsigned hist[16][16];
	memset(hist, 0, sizeof(hist));
	for (unsigned t = 0; t < threads; t++)
		hist[(gt_state_h[t] >> 4) & 15][gt_state_h[t] & 15]++;
	for (unsigned c = 0; c < 16; c++)
		for (unsigned k = 0; k < 16; k++)
			if (hist[c][k] && !(c == calls && k == 7))
				fprintf(stderr, "hang dump: %u threads at call %u, point %u\n", hist[c][k], c, k);
	fprintf(stderr, "hang dump: %u threads done (%u calls, point 7)\n", hist[calls][7], calls);
	/* The first warps not done, lane by lane: calls.point, and the port
	 * each leader locked last (* had to wait for the hand-back). */
	unsigned shown = 0, stuck = 0;
	for (unsigned w = 0; w < threads / 32; w++) {
		bool done = true;
		for (unsigned l = 0; l < 32; l++)
			done = done && gt_state_h[w * 32 + l] == (calls << 4 | 7u);
		if (done)
			continue;
		stuck++;
		if (shown++ >= 8)
			continue;
		char line[32 * 16], *o = line;
		for (unsigned l = 0; l < 32; l++) {
			unsigned v = gt_state_h[w * 32 + l], pt = gt_port_h[w * 32 + l];
			o += sprintf(o, " %u.%u", (v >> 4) & 15, v & 15);
			if (pt != ~0u)
				o += sprintf(o, "@%u%s", pt & 0x7fffffffu, pt >> 31 ? "*" : "");
		}
		fprintf(stderr, "hang dump: warp %u (block %u):%s\n", w, w / 4, line);
	}
	fprintf(stderr, "hang dump: %u warps not done\n", stuck);
	/* The channel's private port locks and the per-warp future counts. */
	uint32_t n = ch->num_ports;
	struct gpusys_port_lock *locks = (struct gpusys_port_lock *)calloc(n, sizeof(*locks));
	uint64_t *cw = (uint64_t *)calloc(n, 8), *sw = (uint64_t *)calloc(n, 8);
	uint32_t *fut = ch->warp_slots ? (uint32_t *)calloc(ch->warp_slots, 4) : NULL;
	if (locks && cw && sw && gt_peek(s, locks, ch->locks, n * sizeof(*locks)) &&
	    gt_peek(s, cw, (const void *)ch->client_word, n * 8) && gt_peek(s, sw, (const void *)ch->server_word, n * 8)) {
		unsigned held = 0, unacked = 0, listed = 0;
		for (uint32_t p = 0; p < n; p++) {
			held += locks[p].lock == 1;
			unacked += locks[p].lock == 2;
			if (locks[p].lock == 0 || listed++ >= 12)
				continue;
			fprintf(stderr,
				"hang dump: port %u lock %u seq %u; client seq %u flags 0x%x opcode 0x%04x mask 0x%08x, "
				"server seq %u flags 0x%x status %d\n",
				p, locks[p].lock, locks[p].seq, GPUSYS_WORD_SEQ(cw[p]), GPUSYS_WORD_FLAGS(cw[p]),
				GPUSYS_CW_OPCODE(cw[p]), GPUSYS_CW_MASK(cw[p]), GPUSYS_WORD_SEQ(sw[p]),
				GPUSYS_WORD_FLAGS(sw[p]), GPUSYS_SW_STATUS(sw[p]));
			/* Its heads as host memory holds them: an answer here that
			 * the lanes do not take would be a stale read on the GPU. */
			struct gpusys_head heads[GPUSYS_WARP_LANES];
			if (!gt_peek(s, heads, ch->ports[p].heads, sizeof(heads)))
				continue;
			char line[GPUSYS_WARP_LANES * 24], *o = line;
			for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++)
				o += sprintf(o, " %c%u/%u", heads[l].tag & GPUSYS_HEAD_ANSWER ? 'A' :
						       heads[l].tag & GPUSYS_HEAD_REQUEST ? 'R' : '?',
					     heads[l].tag & GPUSYS_SEQ_MASK, heads[l].aux);
			fprintf(stderr, "hang dump: port %u heads (kind seq/aux):%s\n", p, line);
		}
		fprintf(stderr, "hang dump: %u ports: %u held, %u free unacknowledged\n", n, held, unacked);
	}
	if (fut && gt_peek(s, fut, ch->warp_futures, ch->warp_slots * 4)) {
		unsigned long long sum = 0;
		unsigned slots = 0;
		for (uint32_t i = 0; i < ch->warp_slots; i++)
			if (fut[i])
				sum += fut[i], slots++;
		fprintf(stderr, "hang dump: futures counted: %llu in %u of %u warp slots\n", sum, slots, ch->warp_slots);
	}
	free(locks), free(cw), free(sw), free(fut);
}

/* ------------------------------------------------------------- kernels */

static __global__ void __launch_bounds__(128) k_echo_futures(gpusys_dev_t dev, unsigned *errors, unsigned *syncs)
{
	const unsigned N = 12;
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	unsigned in[N], back[N];
	gpusys_future_t f[N];
	for (unsigned i = 0; i < N; i++) {
		in[i] = tid * 16 + i;
		back[i] = 0;
		f[i] = gpusys_echo_async(dev, &in[i], 4, &back[i], 4);
		if (gpusys_future_was_sync(f[i]))
			atomicAdd(syncs, 1u);
	}
	for (int i = N - 1; i >= 0; i--) {
		long long r = gpusys_wait(dev, f[i]);
		if (r != 0 || gpusys_future_len(f[i]) != 4 || back[i] != in[i])
			atomicAdd(errors, 1u);
	}
}

static __global__ void __launch_bounds__(128) k_typed(gpusys_dev_t dev, unsigned *errors, int async)
{
	unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
	if (async) {
		unsigned long long out[3];
		gpusys_future_t f[3];
		for (unsigned i = 0; i < 3; i++)
			f[i] = gpusys_call_async<unsigned long long>(dev, mix_cb, &out[i], tid, i);
		if (gpusys_wait_all(dev, f, 3) != 0)
			atomicAdd(errors, 1u);
		for (unsigned i = 0; i < 3; i++)
			if (out[i] != mix(tid, i))
				atomicAdd(errors, 1u);
	} else {
		gpusys_result<unsigned long long> r = gpusys_call<unsigned long long>(dev, mix_cb, tid, 7u);
		if (r.err || r.value != mix(tid, 7))
			atomicAdd(errors, 1u);
	}
}

/* Lane l of warp w sends sizes[(w + l) % n] bytes from global memory. */
static __global__ void k_bytes(gpusys_dev_t dev, const uint8_t *in, uint8_t *out, const uint32_t *len,
			       const uint64_t *off, int *status, uint32_t *got)
{
	unsigned t = threadIdx.x;
	status[t] = gpusys_call_bytes(dev, OP_XFORM, in + off[t], len[t], out + off[t], len[t], &got[t]);
}

static __global__ void k_nobody(gpusys_dev_t dev, int *rc)
{
	uint32_t x = 1, got = 0;
	rc[threadIdx.x] = gpusys_call_bytes(dev, OP_NOBODY, &x, 4, &x, 4, &got);
}

static __global__ void k_fire(gpusys_dev_t dev, int *rc)
{
	*rc = gpusys_call_nowait(dev, gate_cb, 1u);
}

int main(void)
{
	gt_name = "test_gpu_async";
	gt_require_gpu();
	gt_start_daemon(NULL);

	cudaDeviceProp prop;
	GT_CUDA(cudaGetDeviceProperties(&prop, 0));
	gpusys_t *g = gt_attach(0, 0);
	struct gpusys_callbacks *cb = gpusys_callbacks_of(g);
	GT_CHECK(cb, "no callback server");
	GT_CHECK(gpusys_register(cb, mix_cb, "mix", mix_host) == 0, "register mix");
	GT_CHECK(gpusys_register(cb, gate_cb, "gate", gate_host) == 0, "register gate");
	struct gpusys_callback_desc xd;
	memset(&xd, 0, sizeof(xd));
	xd.opcode = OP_XFORM;
	xd.name = "xform";
	xd.arg_max = 1u << 20;
	xd.res_max = 1u << 20;
	xd.fn = xform_host;
	GT_CHECK(gpusys_register_callback(g, &xd) == 0, "register xform");

	unsigned *d, h[2];
	GT_CUDA(cudaMalloc(&d, 2 * sizeof(unsigned)));
	gt_trace_init();

	/* 1. Echo futures from every resident warp. */
	int per_sm = 0;
	GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_echo_futures, 128, 0));
	int grid = prop.multiProcessorCount * per_sm;
	GT_CUDA(cudaMemset(d, 0, 2 * sizeof(unsigned)));
	double t0 = gt_now();
	k_echo_futures<<<grid, 128>>>(gpusys_device(g), d, d + 1);
	GT_CUDA(cudaGetLastError());
	int rc = gpusys_synchronize(g, NULL, 30000);
	GT_CHECK(rc == 0, "echo futures: %s (deadlock?)", gpusys_strerror(rc));
	GT_CUDA(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
	GT_CHECK(h[0] == 0, "echo futures: %u lanes wrong", h[0]);
	long lanes = (long)grid * 128;
	GT_CHECK(h[1] >= (unsigned)(lanes / 32 * 4), "echo futures: only %u synchronous, bound not applied", h[1]);
	printf("ok echo futures: %d blocks x 128 (%ld warps, %u ports), 12 each: %u of %ld made synchronously, "
	       "%.1f ms\n",
	       grid, lanes / 32, gpusys_num_ports(g), h[1], lanes * 12, (gt_now() - t0) * 1e3);

	/* 2. Typed callbacks from every resident warp, sync and async. */
	for (int async = 0; async < 2; async++) {
		GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_typed, 128, 0));
		grid = prop.multiProcessorCount * per_sm;
		GT_CUDA(cudaMemset(d, 0, 2 * sizeof(unsigned)));
		gt_trace_reset();
		gpusys_dev_t dv = gpusys_device(g);
		t0 = gt_now();
		k_typed<<<grid, 128>>>(dv, d, async);
		GT_CUDA(cudaGetLastError());
		rc = gpusys_synchronize(g, NULL, 30000);
		if (rc == -ETIMEDOUT && dv.callbacks) {
			gpusys_dev_t cbd;
			cudaStream_t s;
			if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
			    gt_peek(s, &cbd, dv.callbacks, sizeof(cbd)))
				gt_dump_hang(&cbd, grid * 128, async ? 3 : 1);
		}
		GT_CHECK(rc == 0, "typed callbacks: %s", gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
		GT_CHECK(h[0] == 0, "typed callbacks (%s): %u wrong", async ? "async" : "sync", h[0]);
		printf("ok typed callback %s: %d threads, every result checked, %.1f ms\n", async ? "async x3" : "sync",
		       grid * 128, (gt_now() - t0) * 1e3);
	}

	/* 3. Bytes callbacks, 0 .. 1 MiB per lane, one warp. */
	{
		const uint32_t sizes[] = { 0, 1, 63, 64, 65, 2047, 2048, 2049, 100000, 262144, (1u << 20) - 1, 1u << 20 };
		const unsigned n = sizeof(sizes) / sizeof(sizes[0]);
		uint32_t len[32];
		uint64_t off[32], total = 0;
		for (unsigned l = 0; l < 32; l++) {
			len[l] = sizes[l % n];
			off[l] = total;
			total += len[l];
		}
		uint8_t *hin = (uint8_t *)malloc(total), *hout = (uint8_t *)malloc(total);
		for (uint64_t i = 0; i < total; i++)
			hin[i] = (uint8_t)(mix((unsigned)i, 3) >> 11);
		uint8_t *din, *dout;
		uint32_t *dlen, *dgot;
		uint64_t *doff;
		int *dst;
		GT_CUDA(cudaMalloc(&din, total));
		GT_CUDA(cudaMalloc(&dout, total));
		GT_CUDA(cudaMalloc(&dlen, sizeof(len)));
		GT_CUDA(cudaMalloc(&doff, sizeof(off)));
		GT_CUDA(cudaMalloc(&dst, 32 * sizeof(int)));
		GT_CUDA(cudaMalloc(&dgot, 32 * sizeof(uint32_t)));
		GT_CUDA(cudaMemcpy(din, hin, total, cudaMemcpyHostToDevice));
		GT_CUDA(cudaMemcpy(dlen, len, sizeof(len), cudaMemcpyHostToDevice));
		GT_CUDA(cudaMemcpy(doff, off, sizeof(off), cudaMemcpyHostToDevice));
		t0 = gt_now();
		k_bytes<<<1, 32>>>(gpusys_device(g), din, dout, dlen, doff, dst, dgot);
		rc = gpusys_synchronize(g, NULL, 30000);
		GT_CHECK(rc == 0, "bytes callbacks: %s", gpusys_strerror(rc));
		int st[32];
		uint32_t got[32];
		GT_CUDA(cudaMemcpy(st, dst, sizeof(st), cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(got, dgot, sizeof(got), cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(hout, dout, total, cudaMemcpyDeviceToHost));
		for (unsigned l = 0; l < 32; l++) {
			GT_CHECK(st[l] == 0 && got[l] == len[l], "lane %u (%u bytes): status %d, got %u", l, len[l], st[l],
				 got[l]);
			for (uint32_t b = 0; b < len[l]; b++)
				GT_CHECK(hout[off[l] + b] == (hin[off[l] + len[l] - 1 - b] ^ 0x5a), "lane %u byte %u", l, b);
		}
		printf("ok bytes callbacks: 32 lanes, 0..1 MiB each (%.1f MiB each way), %.1f ms\n", total / 1048576.0,
		       (gt_now() - t0) * 1e3);
		free(hin);
		free(hout);
		cudaFree(din), cudaFree(dout), cudaFree(dlen), cudaFree(doff), cudaFree(dst), cudaFree(dgot);
	}

	/* 4. Nobody's opcode. */
	{
		int *drc, hrc[32];
		GT_CUDA(cudaMalloc(&drc, sizeof(hrc)));
		k_nobody<<<1, 32>>>(gpusys_device(g), drc);
		rc = gpusys_synchronize(g, NULL, 10000);
		GT_CHECK(rc == 0, "unregistered: %s", gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(hrc, drc, sizeof(hrc), cudaMemcpyDeviceToHost));
		for (int l = 0; l < 32; l++)
			GT_CHECK(hrc[l] == -ENOSYS, "unregistered opcode: lane %d got %d", l, hrc[l]);
		printf("ok unregistered opcode: -ENOSYS in every lane\n");
		cudaFree(drc);
	}

	/* 5. gpusys_query: the kernel fires a callback the host holds back. */
	{
		int *drc, hrc = 1;
		GT_CUDA(cudaMalloc(&drc, sizeof(int)));
		k_fire<<<1, 1>>>(gpusys_device(g), drc);
		GT_CUDA(cudaStreamSynchronize(0)); /* the kernel is over; its call is not */
		GT_CUDA(cudaMemcpy(&hrc, drc, sizeof(int), cudaMemcpyDeviceToHost));
		GT_CHECK(hrc == 0, "fire-and-forget callback: %d", hrc);
		usleep(20000);
		int q = gpusys_query(g, NULL);
		GT_CHECK(q == 0, "gpusys_query %d while the callback is unanswered", q);
		GT_CHECK(gate_calls.load() == 0, "the gate let a call through");
		gate_open = 1;
		t0 = gt_now();
		while ((q = gpusys_query(g, NULL)) == 0 && gt_now() - t0 < 5)
			usleep(100);
		GT_CHECK(q == 1, "gpusys_query %d after the callback returned", q);
		GT_CHECK(gate_calls.load() == 1, "gate calls %d", gate_calls.load());
		printf("ok gpusys_query: 0 while a fire-and-forget callback was held, 1 %.2f ms after it was let go\n",
		       (gt_now() - t0) * 1e3);
		cudaFree(drc);
	}

	cudaFree(d);
	gpusys_detach(g);
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	printf("test_gpu_async: all passed\n");
	return 0;
}
