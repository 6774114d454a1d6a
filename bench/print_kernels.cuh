/* SPDX-License-Identifier: MIT */
/*
 * The print benchmarks' kernels, shared by `gpusys-bench print` (print_gpu.cu)
 * and the print rows of `gpusys-bench multigpu` (multi_gpu.cu): one line, so
 * that their lines/s and bytes/s compare.
 */
#ifndef GPUSYS_BENCH_PRINT_KERNELS_CUH
#define GPUSYS_BENCH_PRINT_KERNELS_CUH

#include "gpusys/print.cuh"

/* The line, for CUDA's printf too: four conversions, about 45 bytes. Its
 * record (include/gpusys/print.h) is 2 + 36 + 3 x 5 + 9 = 62 bytes: it fits
 * a lane's 64 inline bytes, so a call is one exchange with the daemon. */
#define BENCH_PRINT_LINE "block %d thread %d line %d value %f\n"
/* The same with 3 more bytes of text: its 65-byte record does not fit, and
 * each call takes a second exchange for the records' tails (--long-line). */
#define BENCH_PRINT_LONG_LINE "block %d thread %d line %d value is %f\n"

/* Every thread prints lines lines (the long line with long_line set); each
 * that failed counts in *errors. */
static __global__ void k_print_lines(gpusys_dev_t dev, int lines, int *errors, int long_line = 0)
{
	for (int n = 0; n < lines; n++) {
		int r = long_line ? gpusys_printf(dev, BENCH_PRINT_LONG_LINE, (int)blockIdx.x, (int)threadIdx.x, n,
						  n * 0.5 + threadIdx.x)
				  : gpusys_printf(dev, BENCH_PRINT_LINE, (int)blockIdx.x, (int)threadIdx.x, n,
						  n * 0.5 + threadIdx.x);
		if (r <= 0)
			atomicAdd(errors, 1);
	}
}

/* After the lines: returns once gpusysd has written every line it accepted
 * (so a timer stopped after it times lines in the file, not in flight). */
static __global__ void k_print_flush(gpusys_dev_t dev, int *rc)
{
	*rc = gpusys_print_flush(dev);
}

#endif
