/* SPDX-License-Identifier: MIT */
/*
 * The file benchmarks' handle kernels, shared by `gpusys-bench file`
 * (file_gpu.cu) and the file rows of `gpusys-bench multigpu` (multi_gpu.cu):
 * a handle in gpusysd is opened from the device, one thread.
 */
#ifndef GPUSYS_BENCH_FILE_KERNELS_CUH
#define GPUSYS_BENCH_FILE_KERNELS_CUH

#include "gpusys/file.cuh"

/* *h: the handle, or -errno. path is device memory. */
static __global__ void k_open(gpusys_dev_t dev, const char *path, int flags, long long *h)
{
	*h = gpusys_open(dev, path, flags, 0644);
}

static __global__ void k_close(gpusys_dev_t dev, long long h)
{
	gpusys_close(dev, h);
}

#endif
