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
		t0 = gt_now();
		k_typed<<<grid, 128>>>(gpusys_device(g), d, async);
		GT_CUDA(cudaGetLastError());
		rc = gpusys_synchronize(g, NULL, 30000);
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
