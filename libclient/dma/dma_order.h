/* SPDX-License-Identifier: MIT */
/*
 * Where the CUDA engine writes a count, and what that write must wait for.
 *
 * Each way's copies go on a stream of their own (dma_cuda.c). A count may
 * be written only after every copy started before it, and never before an
 * earlier count (the warps wait for completed >= their ticket: a count
 * that overtook a later one would take completions back). Writing every
 * count on one stream after an event of the other cost an event and a
 * cross-stream wait for each count of the other way: 32 of them for one
 * warp's 32 x 64 KiB request (bench/RESULTS.md, "Ninth session"). So:
 *   - the count goes on the stream whose copies it follows when only one
 *     way has copies since the last count, else on the stream of the last
 *     count;
 *   - it waits for an event of the other stream only when that stream has
 *     copies since the last count, or carried the last count itself.
 * A run of counts of one way then needs no event at all.
 *
 * Pure bookkeeping, no CUDA: tests/proto/test_dma.c checks the ordering it
 * gives against a model of two streams.
 */
#ifndef GPUSYS_DMA_ORDER_H
#define GPUSYS_DMA_ORDER_H

#include <stdbool.h>

#include "libclient/dma/dma_agent.h"

struct gpusys_dma_order {
	bool copied[GPUSYS_DMA_WAYS]; /* copies on that way's stream since the last count */
	int last;                     /* the stream of the last count; -1: none yet */
};

/* Where the next count goes: on stream .on, after an event recorded on
 * stream .wait_for (-1: no wait). */
struct gpusys_dma_count_step {
	int on;
	int wait_for;
};

static inline void gpusys_dma_order_init(struct gpusys_dma_order *o)
{
	o->copied[GPUSYS_DMA_INTO_CHANNEL] = o->copied[GPUSYS_DMA_OUT_OF_CHANNEL] = false;
	o->last = -1;
}

static inline void gpusys_dma_order_copied(struct gpusys_dma_order *o, enum gpusys_dma_way way)
{
	o->copied[way] = true;
}

/* The step for the next count; the caller writes it as told, then the
 * order forgets the copies it covered. */
static inline struct gpusys_dma_count_step gpusys_dma_order_count(struct gpusys_dma_order *o)
{
	const int in = GPUSYS_DMA_INTO_CHANNEL, out = GPUSYS_DMA_OUT_OF_CHANNEL;
	int on;
	if (o->copied[in] != o->copied[out])
		on = o->copied[in] ? in : out;
	else
		on = o->last >= 0 ? o->last : out;
	int other = on == in ? out : in;
	struct gpusys_dma_count_step s = { .on = on,
					   .wait_for = o->copied[other] || o->last == other ? other : -1 };
	o->copied[in] = o->copied[out] = false;
	o->last = on;
	return s;
}

#endif /* GPUSYS_DMA_ORDER_H */
