/* SPDX-License-Identifier: MIT */
/*
 * How many producers a copy engine keeps working, adjusted while it copies.
 * The count chosen at open is a guess from measurements taken with no DMA
 * running: the DMA engine's own reads of the staging buffers share the memory
 * bus with the producers, and a guess that was right in one process can be
 * short in the next (bench/RESULTS.md: "Copies that add producers (issue
 * 30)"). So the engine watches the link: over a window of finished chunks it measures the share
 * of time the link had nothing to do while the job still had chunks to move
 * (the consumer waiting on producers) and the rate. Two starved windows in a
 * row add a producer, on trial; the next window keeps it only if the rate
 * rose, else it is removed and the next trial waits for twice as many
 * starved windows in a row (up to COPY_ADAPT_PATIENCE_MAX): where the memory
 * bus is the limit, trials grow rare; where one window's noise failed a
 * trial, the engine still gets there (a count that stopped for good at its
 * first failed trial left a copy with a slow producer at 0.63x cudaMemcpy on
 * an H200, test_gpu_copy).
 *
 * Pure decisions, no clock and no threads: the engine measures, this
 * decides (tests/copy drive it with made-up windows too).
 */
#ifndef GPUSYS_COPY_ADAPT_H
#define GPUSYS_COPY_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

/* A window in which the link sat idle for at least this share of the time
 * counts as starved. */
#define COPY_ADAPT_STARVED 0.10
/* A producer on trial stays when the rate rose by at least this share. */
#define COPY_ADAPT_GAIN 0.03
/* Starved windows in a row before a producer is added: one slow window
 * (a producer descheduled) is not a reason. */
#define COPY_ADAPT_PATIENCE 2
/* The most starved windows in a row a trial waits for after failed ones. */
#define COPY_ADAPT_PATIENCE_MAX 64

struct copy_adapt {
	unsigned active;   /* producers working now */
	unsigned ceiling;  /* the most it may grow to */
	unsigned starved_windows; /* in a row */
	unsigned patience; /* starved windows in a row the next trial waits for */
	bool trial;        /* the last producer added is being judged */
	double base_gbps;  /* the rate of the window before the trial */
	uint64_t added, removed;
};

/* start producers working, growing to at most max (max < start: start). */
void copy_adapt_init(struct copy_adapt *a, unsigned start, unsigned max);
/* One window: starved is the share of its time the link waited on
 * producers (0..1), gbps its rate. Returns the producers to keep working. */
unsigned copy_adapt_window(struct copy_adapt *a, double starved, double gbps);
/* The job ended before its trial was judged: the producer stays, unjudged
 * (rates of different jobs are not comparable). */
void copy_adapt_job_end(struct copy_adapt *a);

#endif /* GPUSYS_COPY_ADAPT_H */
