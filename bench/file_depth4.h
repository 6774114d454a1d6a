/* SPDX-License-Identifier: MIT */
/* gpusys-bench file: block reads with the 4-deep copy loop (file_gpu_depth4.cu). */
#ifndef GPUSYS_BENCH_FILE_DEPTH4_H
#define GPUSYS_BENCH_FILE_DEPTH4_H

#include <stdint.h>

#include "gpusys/gpusys.h"

/* GB/s of gpusys_pread_block of size bytes at handle h into dbuf, by blocks
 * blocks of threads threads, best of reps; -1 on error. */
double file_read_depth4(gpusys_t *g, long long h, uint8_t *dbuf, uint64_t size, int blocks, int threads, int reps);

#endif
