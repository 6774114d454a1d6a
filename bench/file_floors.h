/* SPDX-License-Identifier: MIT */
/*
 * The floors of GPU-initiated file reads (gpusys-bench file): what each side
 * of the staged design does alone, and both pipelined without gpusysd's
 * protocol (bench/file_floors.cu). Each returns GB/s, best of reps, or -1.
 */
#ifndef GPUSYS_BENCH_FILE_FLOORS_H
#define GPUSYS_BENCH_FILE_FLOORS_H

#include <stdint.h>

/* The copy loops measured: loads in flight per thread and the load's kind. */
enum floor_load {
	FLOOR_LD_CV,      /* ld.global.cv: the library's loads */
	FLOOR_LD_RELAXED, /* ld.relaxed.sys: strong, coherent at system scope */
	FLOOR_LD_WEAK_NA, /* weak ld.global.L1::no_allocate after the acquire fence */
	FLOOR_LD_NC_NA,   /* ld.global.nc.L1::no_allocate: for comparison only (stale data allowed) */
};

struct floor_variant {
	int depth; /* 16-byte loads in flight per thread */
	enum floor_load load;
	const char *name;
};

extern const struct floor_variant floor_variants[];
extern const int floor_nvariants;

/* (a) The SM side: blocks of 1024 threads, warps 1.. copying an already
 * filled pinned buffer of size bytes to device memory (each block its own
 * contiguous share), as gpusys_pread_block's copiers do. */
double floor_sm_copy(uint8_t *dst, const uint8_t *pinned, uint64_t size, int blocks, int variant, int reps);

/* (b) The host side: nthreads threads pread(2)ing the page-cached file at
 * path (each its own contiguous share) into a pinned buffer. */
double floor_host_pread(const char *path, uint8_t *pinned, uint64_t size, int nthreads, int reps);

/* (c) Both at once without the protocol: for each of blocks blocks a slot of
 * two halves of half_bytes in pinned memory; nthreads host threads (a
 * multiple of blocks: nthreads / blocks per block, each its own piece of
 * every half) pread the next part of the file into one half while the
 * block copies the other to dst. The data is checked against expect (the
 * file's bytes). *ret_wait: the share of the kernel's time that blocks
 * waited for a half to fill (0..1). */
double floor_pipeline(const char *path, uint8_t *dst, const uint8_t *expect, uint64_t size, int blocks,
		      int nthreads, uint64_t half_bytes, int variant, int reps, double *ret_wait);

#endif
