/* SPDX-License-Identifier: MIT */
/*
 * Host-lane emulator: the client protocol of device/port_client.h, compiled
 * for the CPU. Each calling thread is one warp; per-lane arguments are
 * arrays. Locks and the request counter live in this process's private
 * memory, as they live in device memory for a real GPU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpusys/emulator.h"
#include "../device/port_client.h"
#include "libclient/attach/dev_handle.h"
#include "libclient/dma/dma_agent.h"
#include "libclient/emulator/emu_dma.h"

__thread uint32_t gpusys_emu_port_hint;
int gpusys_emu_heads_late;
__thread struct gpusys_emu_late_heads gpusys_emu_late;

/* An emulated handle's DMA ring: host memory, copied by the memcpy engine. */
struct emu_dma {
	struct gpusys_dma_host host;
	struct gpusys_dma_priv priv;
	struct gpusys_dma dma;
	struct gpusys_dma_agent *agent;
};

/* Emulated warps spin on a CPU: the agent spins less before it dozes. */
#define EMU_DMA_SPIN_MS 5u

struct gpusys_emu {
	gpusys_dev_t dev;
	struct emu_dma *dma;
	unsigned long long submitted;
	uint32_t warp_futures[GPUSYS_EMU_WARP_SLOTS];
	struct gpusys_port_lock locks[]; /* num_ports */
};

/* The ring and its agent, as a GPU handle has (libclient/attach/cuda.c). */
static int emu_dma_start(struct gpusys_emu *emu)
{
	struct emu_dma *d = aligned_alloc(64, (sizeof(*d) + 63) & ~(size_t)63);
	if (!d)
		return -ENOMEM;
	memset(d, 0, sizeof(*d));
	d->dma.host = &d->host;
	d->dma.priv = &d->priv;
	gpusys_dma_thresholds(&d->dma);
	struct gpusys_dma_engine e;
	gpusys_dma_memcpy_engine(&e, &d->priv);
	int r = gpusys_dma_agent_start(&e, &d->host, gpusys_dma_spin_ms(EMU_DMA_SPIN_MS), &d->agent);
	if (r < 0) {
		free(d);
		return r;
	}
	gpusys_dma_agent_allow(d->agent, (uint64_t)(uintptr_t)emu->dev.hdr, emu->dev.hdr->total_bytes);
	emu->dma = d;
	emu->dev.dma = &d->dma;
	return 0;
}

int gpusys_emu_open(void *channel_base, struct gpusys_emu **ret)
{
	const struct gpusys_channel_header *hdr = channel_base;
	int r = gpusys_channel_check(hdr, hdr->total_bytes);
	if (r < 0)
		return r;

	/* Port locks, then the bulk slot locks (include/gpusys/dev.h). */
	uint32_t bulk_slots = gpusys_bulk_slots(hdr->bulk_bytes);
	struct gpusys_emu *emu = calloc(1, sizeof(*emu) + hdr->num_ports * sizeof(struct gpusys_port_lock) +
						   bulk_slots * sizeof(uint32_t));
	if (!emu)
		return -ENOMEM;
	/* Our private copy of each sequence starts where the shared words
	 * are: a fresh channel is all zeros, but a handle opened again over a
	 * used channel must continue the sequence. */
	const volatile uint64_t *cw = (const volatile uint64_t *)((const uint8_t *)channel_base + hdr->client_word_offset);
	for (uint32_t p = 0; p < hdr->num_ports; p++) {
		emu->locks[p].seq = GPUSYS_WORD_SEQ(cw[p]);
		/* and a request of the last user may still be in flight */
		emu->locks[p].lock = GPUSYS_PORT_FREE_UNACKED;
	}
	gpusys_dev_fill(&emu->dev, channel_base, hdr, emu->locks, &emu->submitted);
	/* Emulated warps are host threads: they can wake a dozing daemon. */
	emu->dev.wake_fd = gpusys_wake_fd_of(channel_base);
	/* ...and must learn that it died (-ESHUTDOWN, not a hang). */
	int r2 = gpusys_channel_watch(channel_base);
	if (r2 < 0) {
		free(emu);
		return r2;
	}
	gpusys_dev_set_bulk_locks(&emu->dev, (uint32_t *)(emu->locks + hdr->num_ports), 0);
	emu->dev.warp_futures = emu->warp_futures;
	emu->dev.warp_slots = GPUSYS_EMU_WARP_SLOTS;
	if (!gpusys_dma_disabled() && (r = emu_dma_start(emu)) < 0) {
		free(emu);
		return r;
	}
	*ret = emu;
	return 0;
}

void gpusys_emu_close(struct gpusys_emu *emu)
{
	if (emu && emu->dma) {
		gpusys_dma_agent_stop(emu->dma->agent);
		free(emu->dma);
	}
	free(emu);
}

const struct gpusys_dma_agent *gpusys_dma_agent_of_emu(const struct gpusys_emu *emu)
{
	return emu->dma ? emu->dma->agent : NULL;
}

const gpusys_dev_t *gpusys_emu_dev(const struct gpusys_emu *emu)
{
	return &emu->dev;
}

void gpusys_emu_set_callbacks(struct gpusys_emu *emu, const gpusys_dev_t *callbacks)
{
	emu->dev.callbacks = callbacks;
}

void gpusys_emu_set_warp(uint32_t warp)
{
	gpusys_emu_port_hint = warp;
}

void gpusys_emu_set_heads_late(int on)
{
	__atomic_store_n(&gpusys_emu_heads_late, on != 0, __ATOMIC_RELAXED);
}

uint64_t gpusys_emu_submitted(const struct gpusys_emu *emu)
{
	return __atomic_load_n(&emu->submitted, __ATOMIC_RELAXED);
}

uint64_t gpusys_channel_progress(const struct gpusys_channel_header *hdr)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < GPUSYS_PROGRESS_SLOTS; i++)
		sum += __atomic_load_n(&hdr->progress[i].completed, __ATOMIC_ACQUIRE);
	return sum;
}

int gpusys_emu_synchronize(const struct gpusys_emu *emu, int timeout_ms)
{
	struct timespec start, now;
	uint64_t want = gpusys_emu_submitted(emu);

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (unsigned spins = 0;; spins++) {
		if (gpusys_channel_progress(emu->dev.hdr) >= want)
			return 0;
		int dead = gpusys_channel_dead(&emu->dev);
		if (dead)
			return dead;
		if (spins < 1000) {
			gpusys_spin_pause();
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (timeout_ms >= 0 && ms >= timeout_ms)
			return -ETIMEDOUT;
		nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
}

int gpusys_emu_rpc(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
		   const void *const in[GPUSYS_WARP_LANES], const uint32_t in_len[GPUSYS_WARP_LANES],
		   void *const out[GPUSYS_WARP_LANES], const uint32_t out_cap[GPUSYS_WARP_LANES],
		   uint32_t out_len[GPUSYS_WARP_LANES], int32_t lane_status[GPUSYS_WARP_LANES])
{
	if (!mask || (mask >> GPUSYS_WARP_LANES))
		return -EINVAL;
	return gpusys_rpc(dev, opcode, flags, mask, in, in_len, out, out_cap, out_len, lane_status);
}

int gpusys_emu_noop(const gpusys_dev_t *dev, uint64_t mask)
{
	static const uint32_t zeros[GPUSYS_WARP_LANES];
	const void *in[GPUSYS_WARP_LANES] = { 0 };
	void *out[GPUSYS_WARP_LANES] = { 0 };
	uint32_t out_len[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];

	int rc = gpusys_emu_rpc(dev, GPUSYS_OP_NOOP, 0, mask, in, zeros, out, zeros, out_len, st);
	if (rc)
		return rc;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		if (st[l])
			return st[l];
	}
	return 0;
}

int gpusys_emu_echo(const gpusys_dev_t *dev, uint64_t mask, const void *const in[GPUSYS_WARP_LANES],
		    const uint32_t in_len[GPUSYS_WARP_LANES], void *const out[GPUSYS_WARP_LANES],
		    const uint32_t out_cap[GPUSYS_WARP_LANES], uint32_t out_len[GPUSYS_WARP_LANES],
		    int32_t lane_status[GPUSYS_WARP_LANES])
{
	return gpusys_emu_rpc(dev, GPUSYS_OP_ECHO, 0, mask, in, in_len, out, out_cap, out_len, lane_status);
}

/* ------------------------------------------------ asynchronous calls */

int gpusys_emu_rpc_async(const gpusys_dev_t *dev, uint16_t opcode, uint16_t flags, uint64_t mask,
			 const void *const in[GPUSYS_WARP_LANES], const uint32_t in_len[GPUSYS_WARP_LANES],
			 void *const out[GPUSYS_WARP_LANES], const uint32_t out_cap[GPUSYS_WARP_LANES],
			 uint32_t out_len[GPUSYS_WARP_LANES], int32_t lane_status[GPUSYS_WARP_LANES],
			 struct gpusys_emu_future *f)
{
	f->out = out;
	f->out_cap = out_cap;
	f->out_len = out_len;
	f->lane_status = lane_status;
	f->waited = 0;
	f->rc = 0;
	if (!mask || (mask >> GPUSYS_WARP_LANES)) {
		f->pd = (struct gpusys_rpc_pending){ .mask = mask, .phase = GPUSYS_RPC_DONE, .rc = -EINVAL,
						     .warp_slot = ~0u };
		f->rc = -EINVAL;
		return 0;
	}
	gpusys_rpc_start(dev, opcode, flags, mask, in, in_len, out_cap, 1, &f->pd);
	if (f->pd.sync || f->pd.phase != GPUSYS_RPC_SENT)
		f->rc = gpusys_rpc_finish(dev, &f->pd, out, out_cap, out_len, lane_status);
	return 0;
}

int gpusys_emu_test(const gpusys_dev_t *dev, struct gpusys_emu_future *f)
{
	if (f->pd.phase != GPUSYS_RPC_SENT)
		return 1;
	if (!gpusys_rpc_test(dev, &f->pd))
		return 0;
	f->rc = gpusys_rpc_finish(dev, &f->pd, f->out, f->out_cap, f->out_len, f->lane_status);
	return 1;
}

int gpusys_emu_wait(const gpusys_dev_t *dev, struct gpusys_emu_future *f)
{
	if (f->pd.phase == GPUSYS_RPC_SENT)
		f->rc = gpusys_rpc_finish(dev, &f->pd, f->out, f->out_cap, f->out_len, f->lane_status);
	return f->rc;
}

int gpusys_emu_wait_all(const gpusys_dev_t *dev, struct gpusys_emu_future *f, unsigned n)
{
	int first = 0;
	for (unsigned i = 0; i < n; i++) {
		int rc = gpusys_emu_wait(dev, &f[i]);
		if (rc && !first)
			first = rc;
	}
	return first;
}

int gpusys_emu_wait_any(const gpusys_dev_t *dev, struct gpusys_emu_future *f, unsigned n)
{
	for (unsigned spins = 1;; spins++) {
		unsigned left = 0;
		for (unsigned i = 0; i < n; i++) {
			if (f[i].waited)
				continue;
			left++;
			if (gpusys_emu_test(dev, &f[i])) {
				f[i].waited = 1;
				return (int)i;
			}
		}
		if (!left)
			return -ENOENT;
		gpusys_spin_pause();
		if (spins % GPUSYS_SPIN_CHECK_EVERY == 0)
			gpusys_spin_yield();
	}
}

int gpusys_emu_query(const struct gpusys_emu *emu)
{
	if (gpusys_channel_progress(emu->dev.hdr) < gpusys_emu_submitted(emu))
		return 0;
	const gpusys_dev_t *cb = emu->dev.callbacks;
	if (cb && gpusys_channel_progress(cb->hdr) < __atomic_load_n(cb->submitted, __ATOMIC_RELAXED))
		return 0;
	return 1;
}
