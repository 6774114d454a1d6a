/* SPDX-License-Identifier: MIT */
/*
 * The GPU's block loops of bulk transfers (bulk_client.h), for every
 * service's block calls (file.cuh: gpusys_pread_block...; socket.cuh:
 * gpusys_send_block, gpusys_recv_block). Every thread of a block calls them
 * with the same arguments; thread 0 locks a slot of the bulk area and asks
 * the daemon for each piece (the service's asker, out of line), and the
 * block's threads copy between buf (device memory) and the slot with 16-byte
 * loads and stores. Every thread gets the same result: bytes moved (short
 * only where a piece was) or -errno (only when nothing was moved).
 *
 * Registers: blocks of 1024 threads have 64 per thread. The loops take
 * more than that in a kernel declared without __launch_bounds__(1024, 1):
 * file.cuh's comment gives the figures, what to declare, and why neither
 * the asker out of line (it is: its registers add to the loop's all the
 * same) nor a call through a pointer (the request alone then takes 64-72)
 * brings them under 64. tests/file/block-registers.sh checks the figures.
 */
#ifndef GPUSYS_BULK_BLOCK_CUH
#define GPUSYS_BULK_BLOCK_CUH

#if !defined(__CUDACC__)
#error "bulk_block.cuh is device code: compile it with nvcc"
#endif

#include <stdint.h>

#include "bulk_client.h"

static __device__ __forceinline__ uint32_t gpusys_block_tid(void)
{
	return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static __device__ __forceinline__ uint32_t gpusys_block_threads(void)
{
	return blockDim.x * blockDim.y * blockDim.z;
}

/* 16-byte loads each copier of a block read keeps in flight. A program may
 * define it (4 or 8) before including file.cuh or socket.cuh. */
#ifndef GPUSYS_BULK_COPY_DEPTH
#define GPUSYS_BULK_COPY_DEPTH 8
#endif

/* Copy n bytes from the bulk area (host memory the daemon just wrote) to
 * dst, as thread idx of cnt. Loads bypass the caches (ld.cv: a cached
 * line of system memory is treated as stale and fetched again): a slot's
 * earlier contents must never be seen. In gpusys-bench file weak loads
 * after the acquire fence (ld.L1::no_allocate), ld.relaxed.sys and ld.nc
 * (which may return stale data) were no faster than ld.cv, so the loads
 * that need no argument about the memory model stay.
 * GPUSYS_BULK_COPY_DEPTH loads in flight per thread: 8 copy faster than 4
 * from one block in a kernel with the registers for them; in a kernel
 * capped at 32 registers both depths read alike (measured, see
 * bench/RESULTS.md: "GPU-initiated reads and what bounds them"). */
static __device__ void gpusys_bulk_copy_in(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx, uint32_t cnt)
{
	uint64_t n16 = 0;
	/* Thread 0 saw the daemon's answer (and acquired); the block barrier
	 * since then orders us after it; this orders our loads too. */
	gpusys_fence_acquire(src);
	if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
		n16 = n / 16;
		const uint4 *s = (const uint4 *)src;
		uint4 *d = (uint4 *)dst;
		const uint64_t c = cnt;
		uint64_t i = idx;
		for (; i + (GPUSYS_BULK_COPY_DEPTH - 1) * c < n16; i += GPUSYS_BULK_COPY_DEPTH * c) {
			uint4 v[GPUSYS_BULK_COPY_DEPTH];
#pragma unroll
			for (int k = 0; k < GPUSYS_BULK_COPY_DEPTH; k++)
				v[k] = __ldcv(s + i + k * c);
#pragma unroll
			for (int k = 0; k < GPUSYS_BULK_COPY_DEPTH; k++)
				d[i + k * c] = v[k];
		}
		for (; i < n16; i += c)
			d[i] = __ldcv(s + i);
	}
	const volatile uint8_t *vs = src;
	for (uint64_t i = n16 * 16 + idx; i < n; i += cnt)
		dst[i] = vs[i];
}

/* Copy n bytes of src into the bulk area, then make them visible to the
 * CPU (the caller synchronises the block before asking the daemon). */
static __device__ void gpusys_bulk_copy_out(uint8_t *dst, const uint8_t *src, uint64_t n, uint32_t idx, uint32_t cnt)
{
	uint64_t n16 = 0;
	if ((((uintptr_t)dst | (uintptr_t)src) & 15u) == 0) {
		n16 = n / 16;
		const uint4 *s = (const uint4 *)src;
		uint4 *d = (uint4 *)dst;
		uint64_t i = idx;
		for (; i + 3ull * cnt < n16; i += 4ull * cnt) {
			uint4 a = s[i], b = s[i + cnt], c = s[i + 2ull * cnt], e = s[i + 3ull * cnt];
			d[i] = a;
			d[i + cnt] = b;
			d[i + 2ull * cnt] = c;
			d[i + 3ull * cnt] = e;
		}
		for (; i < n16; i += cnt)
			d[i] = s[i];
	}
	for (uint64_t i = n16 * 16 + idx; i < n; i += cnt)
		dst[i] = src[i];
	__threadfence_system();
}

/* Benchmarks may see where a read's time goes: defining
 * GPUSYS_BLOCK_IO_TIMING as a number of blocks before including file.cuh
 * adds gpusys_block_io_times[that many], summed over calls by reads of the
 * block of that index (nanoseconds, %globaltimer): thread 0 waiting for the
 * daemon to fill a half, the first copier copying one, and the whole call.
 * Without it the timing compiles to nothing. */
#ifdef GPUSYS_BLOCK_IO_TIMING
struct gpusys_block_io_time {
	unsigned long long daemon_ns, copy_ns, call_ns, halves;
};
static __device__ struct gpusys_block_io_time gpusys_block_io_times[GPUSYS_BLOCK_IO_TIMING];
static __device__ __forceinline__ unsigned long long gpusys_block_io_clock(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}
#define GPUSYS_BLOCK_IO_ADD(field, since)                                                                  \
	atomicAdd(&gpusys_block_io_times[blockIdx.x].field, gpusys_block_io_clock() - (since))
#define GPUSYS_BLOCK_IO_COUNT(field) atomicAdd(&gpusys_block_io_times[blockIdx.x].field, 1ull)
#else
#define gpusys_block_io_clock() 0ull
#define GPUSYS_BLOCK_IO_ADD(field, since) ((void)(since))
#define GPUSYS_BLOCK_IO_COUNT(field) ((void)0)
#endif

/* Whether the loops below may run: slots whose halves hold 4 KiB or more.
 * Without them the services' block calls fall back to packets. */
static __device__ __forceinline__ bool gpusys_block_bulk_usable(const gpusys_dev_t *dev)
{
	return dev->bulk_slots && dev->bulk_slot_bytes >= 8192u;
}

/* Thread 0 locks a slot for the block, starting at the block's index;
 * every thread gets its number. */
static __device__ uint32_t gpusys_block_slot_take(const gpusys_dev_t *dev)
{
	__shared__ uint32_t sh_slot;
	__syncthreads(); /* an earlier call's readers of the shared words are done */
	if (gpusys_block_tid() == 0)
		sh_slot = gpusys_bulk_slot_lock(dev, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
	__syncthreads();
	return sh_slot;
}

/* Once every thread has finished with the slot, thread 0 unlocks it. */
static __device__ void gpusys_block_slot_give(const gpusys_dev_t *dev, uint32_t slot)
{
	__syncthreads();
	if (gpusys_block_tid() == 0)
		gpusys_bulk_slot_unlock(dev, slot);
}

/* A slot taken for the pipelined loops below, cut in two halves, and who
 * copies: warps 1.. (copier cidx of ccnt) while thread 0 asks, or with a
 * single warp (no overlap) every thread, after it. */
struct gpusys_block_halves {
	uint32_t slot, tid, nthr, cidx, ccnt;
	bool overlap, copier;
	uint64_t H, slot_off;
	uint8_t *half0;
};

static __device__ __forceinline__ struct gpusys_block_halves gpusys_block_halves_take(const gpusys_dev_t *dev)
{
	struct gpusys_block_halves hv;
	hv.tid = gpusys_block_tid();
	hv.nthr = gpusys_block_threads();
	hv.slot = gpusys_block_slot_take(dev);
	hv.H = dev->bulk_slot_bytes / 2;
	hv.slot_off = (uint64_t)hv.slot * dev->bulk_slot_bytes;
	hv.half0 = dev->bulk + hv.slot_off;
	hv.overlap = hv.nthr > 32;
	hv.cidx = hv.overlap ? hv.tid - 32 : hv.tid;
	hv.ccnt = hv.overlap ? hv.nthr - 32 : hv.nthr;
	hv.copier = !hv.overlap || hv.tid >= 32;
	return hv;
}

/*
 * Daemon to buf, pipelined over the two halves of a slot: while thread 0
 * has the daemon fill one half with the next piece, warps 1.. copy the other
 * half (the piece before) to buf. The next piece is asked for only once the
 * one before came back whole. With a single warp there is no overlap:
 * everyone copies, then thread 0 asks.
 */
static __device__ long long gpusys_block_bulk_read(const gpusys_dev_t *dev, gpusys_bulk_ask_fn ask,
						   const struct gpusys_bulk_ask *a, uint8_t *buf, unsigned long long len)
{
	__shared__ long long sh_res[2];
	const struct gpusys_block_halves hv = gpusys_block_halves_take(dev);
	unsigned long long done = 0;
	long long result = 0;

	const unsigned long long call_t0 = gpusys_block_io_clock();
	if (hv.tid == 0) {
		sh_res[0] = ask(dev, a, 0, len < hv.H ? len : hv.H, hv.slot_off);
		GPUSYS_BLOCK_IO_ADD(daemon_ns, call_t0);
	}
	__syncthreads();
	for (uint32_t i = 0;; i++) {
		const uint32_t cur = i & 1u;
		const uint64_t want = len - done < hv.H ? len - done : hv.H;
		long long got = sh_res[cur];
		if (got < 0) {
			result = done ? (long long)done : got;
			break;
		}
		if ((uint64_t)got > want)
			got = (long long)want;
		const bool more = (uint64_t)got == want && done + want < len;
		const uint64_t next = done + want;
		const uint64_t next_want = len - next < hv.H ? len - next : hv.H;
		if (!hv.overlap) {
			gpusys_bulk_copy_in(buf + done, hv.half0 + cur * hv.H, (uint64_t)got, hv.cidx, hv.ccnt);
			__syncthreads();
		}
		const unsigned long long t0 = gpusys_block_io_clock();
		if (hv.tid == 0 && more) {
			sh_res[cur ^ 1u] = ask(dev, a, next, next_want, hv.slot_off + (cur ^ 1u) * hv.H);
			GPUSYS_BLOCK_IO_ADD(daemon_ns, t0);
		} else if (hv.overlap && hv.copier) {
			gpusys_bulk_copy_in(buf + done, hv.half0 + cur * hv.H, (uint64_t)got, hv.cidx, hv.ccnt);
			if (hv.tid == 32) {
				GPUSYS_BLOCK_IO_ADD(copy_ns, t0);
				GPUSYS_BLOCK_IO_COUNT(halves);
			}
		}
		__syncthreads();
		done += (uint64_t)got;
		if (!more) {
			result = (long long)done;
			break;
		}
	}
	if (hv.tid == 0)
		GPUSYS_BLOCK_IO_ADD(call_ns, call_t0);
	gpusys_block_slot_give(dev, hv.slot);
	return result;
}

/*
 * buf to the daemon, pipelined over the two halves of a slot: while thread
 * 0 has the daemon take one half, warps 1.. fill the other with the next
 * piece. A short piece ends the transfer. With a single warp there is no
 * hv.overlap: everyone copies, then thread 0 asks.
 */
static __device__ long long gpusys_block_bulk_write(const gpusys_dev_t *dev, gpusys_bulk_ask_fn ask,
						    const struct gpusys_bulk_ask *a, const uint8_t *buf,
						    unsigned long long len)
{
	__shared__ long long sh_res[2];
	const struct gpusys_block_halves hv = gpusys_block_halves_take(dev);
	unsigned long long done = 0;
	long long result = 0;

	gpusys_bulk_copy_out(hv.half0, buf, len < hv.H ? len : hv.H, hv.tid, hv.nthr);
	__syncthreads();
	/* sh_res alternates: a word is written again two requests later,
	 * after a barrier that every reader of it has passed. */
	for (uint32_t i = 0;; i++) {
		const uint32_t cur = i & 1u;
		const uint64_t want = len - done < hv.H ? len - done : hv.H;
		const bool has_next = done + want < len;
		const uint64_t next = done + want;
		const uint64_t next_want = has_next ? (len - next < hv.H ? len - next : hv.H) : 0;
		if (hv.tid == 0)
			sh_res[cur] = ask(dev, a, done, want, hv.slot_off + cur * hv.H);
		else if (hv.overlap && hv.copier && has_next)
			gpusys_bulk_copy_out(hv.half0 + (cur ^ 1u) * hv.H, buf + next, next_want, hv.cidx, hv.ccnt);
		__syncthreads();
		long long put = sh_res[cur];
		if (put < 0) {
			result = done ? (long long)done : put;
			break;
		}
		if ((uint64_t)put > want)
			put = (long long)want;
		done += (uint64_t)put;
		if ((uint64_t)put < want || !has_next) {
			result = (long long)done;
			break;
		}
		if (!hv.overlap) {
			gpusys_bulk_copy_out(hv.half0 + (cur ^ 1u) * hv.H, buf + next, next_want, hv.cidx, hv.ccnt);
			__syncthreads();
		}
	}
	gpusys_block_slot_give(dev, hv.slot);
	return result;
}

/*
 * Daemon to buf a whole slot per piece, not pipelined: thread 0 asks, then
 * every thread copies. For sources whose next piece is only asked for once
 * the one before is copied out (gpusys_recv_block). A short piece ends the
 * transfer.
 */
static __device__ long long gpusys_block_bulk_read_whole(const gpusys_dev_t *dev, gpusys_bulk_ask_fn ask,
							 const struct gpusys_bulk_ask *a, uint8_t *buf,
							 unsigned long long len)
{
	__shared__ long long sh_res;
	const uint32_t tid = gpusys_block_tid(), nthr = gpusys_block_threads();
	const uint32_t slot = gpusys_block_slot_take(dev);
	const uint64_t S = dev->bulk_slot_bytes;
	const uint64_t slot_off = (uint64_t)slot * S;
	unsigned long long done = 0;
	long long result = 0;

	for (;;) {
		const uint64_t want = len - done < S ? len - done : S;
		if (tid == 0)
			sh_res = ask(dev, a, done, want, slot_off);
		__syncthreads();
		long long got = sh_res;
		if (got < 0) {
			result = done ? (long long)done : got;
			break;
		}
		if ((uint64_t)got > want)
			got = (long long)want;
		gpusys_bulk_copy_in(buf + done, dev->bulk + slot_off, (uint64_t)got, tid, nthr);
		__syncthreads();
		done += (uint64_t)got;
		if ((uint64_t)got < want || done == len) {
			result = (long long)done;
			break;
		}
	}
	gpusys_block_slot_give(dev, slot);
	return result;
}

#endif /* GPUSYS_BULK_BLOCK_CUH */
