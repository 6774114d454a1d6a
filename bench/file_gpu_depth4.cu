/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench file: the block reads again with the copy loop the library
 * had before (4 loads in flight per copier, not 8), in the same run as the
 * library's own, so the two are compared on the same machine state.
 * GPUSYS_BULK_COPY_DEPTH is read where file.cuh is included: its own
 * translation unit.
 */
#include <stdio.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "gpusys/gpusys.h"
#define GPUSYS_BULK_COPY_DEPTH 4
#include "gpusys/file.cuh"
#include "file_depth4.h"

static __global__ void __launch_bounds__(1024) k_read4(gpusys_dev_t dev, long long h, uint8_t *buf,
						       unsigned long long len, long long *res)
{
	unsigned long long per = (len / gridDim.x + 4095) & ~4095ull, lo = per * blockIdx.x;
	if (lo > len)
		lo = len;
	unsigned long long n = len - lo < per ? len - lo : per;
	long long r = gpusys_pread_block(dev, h, buf + lo, n, (long long)lo);
	if (threadIdx.x == 0)
		res[blockIdx.x] = r == (long long)n ? 0 : r < 0 ? r : -EIO;
}

double file_read_depth4(gpusys_t *g, long long h, uint8_t *dbuf, uint64_t size, int blocks, int threads, int reps)
{
	long long *d_res = NULL, res[1024];
	double best = -1;
	if (blocks < 1 || blocks > 1024 || cudaMalloc(&d_res, (size_t)blocks * sizeof(long long)) != cudaSuccess)
		return -1;
	for (int r = 0; r < reps; r++) {
		cudaMemset(d_res, 0xff, (size_t)blocks * sizeof(long long));
		cudaDeviceSynchronize();
		uint64_t t0 = bench_now_ns();
		k_read4<<<blocks, threads>>>(gpusys_device(g), h, dbuf, size, d_res);
		int rc = cudaGetLastError() == cudaSuccess ? gpusys_synchronize(g, NULL, -1) : -EIO;
		double s = (double)(bench_now_ns() - t0) / 1e9;
		cudaMemcpy(res, d_res, (size_t)blocks * sizeof(long long), cudaMemcpyDeviceToHost);
		for (int b = 0; b < blocks; b++) {
			if (rc || res[b]) {
				fprintf(stderr, "gpusys-bench: read (4-deep loop) block %d: %s\n", b,
					gpusys_strerror(rc ? rc : (int)res[b]));
				best = -1;
				goto out;
			}
		}
		best = (double)size / s / 1e9 > best ? (double)size / s / 1e9 : best;
	}
out:
	cudaFree(d_res);
	return best;
}
