/* SPDX-License-Identifier: MIT */
/*
 * gpu_cp SRC DST: copy a file through device memory. A grid of blocks opens
 * both files from the GPU, reads SRC into a device buffer with block reads
 * (each block its own range) and writes the buffer to DST; the copy is
 * byte-identical. Prints the bandwidth of each direction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define BLOCKS 8
#define MAX_BUF (UINT64_C(1) << 30)

static __global__ void k_open2(gpusys_dev_t dev, const char *src, const char *dst, unsigned mode, long long *h)
{
	if (threadIdx.x == 0)
		h[0] = gpusys_open(dev, src, O_RDONLY);
	else if (threadIdx.x == 1)
		h[1] = gpusys_open(dev, dst, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

/* Move [base, base + len) of the file to or from buf: block b its share. */
static __global__ void __launch_bounds__(1024, 1) k_move(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned long long base,
			      unsigned long long len, int write_op, long long *res)
{
	unsigned long long per = (len / gridDim.x + 4095) & ~4095ull, lo = per * blockIdx.x;
	if (lo > len)
		lo = len;
	unsigned long long n = len - lo < per ? len - lo : per;
	long long r = write_op ? gpusys_pwrite_block(dev, h, buf + lo, n, (long long)(base + lo))
			       : gpusys_pread_block(dev, h, buf + lo, n, (long long)(base + lo));
	if (threadIdx.x == 0)
		res[blockIdx.x] = r == (long long)n ? 0 : r < 0 ? r : -EIO;
}

static __global__ void k_close2(gpusys_dev_t dev, long long *h)
{
	if (threadIdx.x < 2)
		gpusys_close(dev, h[threadIdx.x]);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int check(gpusys_t *g, long long *dres, const char *what)
{
	long long res[BLOCKS];
	cudaError_t le = cudaGetLastError();
	if (le != cudaSuccess) {
		fprintf(stderr, "gpu_cp: kernel launch: %s\n", cudaGetErrorString(le));
		return -1;
	}
	int rc = gpusys_synchronize(g, NULL, -1);
	if (rc) {
		fprintf(stderr, "gpu_cp: %s\n", gpusys_strerror(rc));
		return -1;
	}
	cudaMemcpy(res, dres, sizeof(res), cudaMemcpyDeviceToHost);
	for (int b = 0; b < BLOCKS; b++) {
		if (res[b]) {
			fprintf(stderr, "gpu_cp: %s: %s\n", what, strerror((int)-res[b]));
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: gpu_cp SRC DST\n");
		return 2;
	}
	struct stat st;
	if (stat(argv[1], &st) < 0) {
		fprintf(stderr, "gpu_cp: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	uint64_t size = (uint64_t)st.st_size;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 256;
	o.bulk_bytes = (uint64_t)BLOCKS * GPUSYS_BULK_SLOT_BYTES;
	o.bulk_slot_bytes = GPUSYS_BULK_SLOT_BYTES; /* a slot for each block */
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpu_cp: %s\n", gpusys_last_error());
		return 1;
	}
	uint64_t cap = size < MAX_BUF ? size : MAX_BUF;
	uint8_t *buf;
	char *dsrc, *ddst;
	long long *dh, *dres, h[2];
	if (cudaMalloc(&buf, cap ? cap : 1) || cudaMalloc(&dsrc, strlen(argv[1]) + 1) ||
	    cudaMalloc(&ddst, strlen(argv[2]) + 1) || cudaMalloc(&dh, 2 * sizeof(long long)) ||
	    cudaMalloc(&dres, BLOCKS * sizeof(long long))) {
		fprintf(stderr, "gpu_cp: cudaMalloc failed\n");
		return 1;
	}
	cudaMemcpy(dsrc, argv[1], strlen(argv[1]) + 1, cudaMemcpyHostToDevice);
	cudaMemcpy(ddst, argv[2], strlen(argv[2]) + 1, cudaMemcpyHostToDevice);
	k_open2<<<1, 32>>>(gpusys_device(g), dsrc, ddst, st.st_mode & 07777, dh);
	cudaMemcpy(h, dh, sizeof(h), cudaMemcpyDeviceToHost);
	for (int i = 0; i < 2; i++) {
		if (h[i] < 0) {
			fprintf(stderr, "gpu_cp: %s: %s\n", argv[1 + i], strerror((int)-h[i]));
			return 1;
		}
	}
	double tr = 0, tw = 0;
	int ret = 0;
	for (uint64_t base = 0; base < size && !ret; base += cap) {
		uint64_t n = size - base < cap ? size - base : cap;
		cudaMemset(dres, 0xff, BLOCKS * sizeof(long long));
		double t0 = now();
		k_move<<<BLOCKS, 1024>>>(gpusys_device(g), h[0], buf, base, n, 0, dres);
		ret = check(g, dres, argv[1]);
		double t1 = now();
		if (!ret) {
			cudaMemset(dres, 0xff, BLOCKS * sizeof(long long));
			k_move<<<BLOCKS, 1024>>>(gpusys_device(g), h[1], buf, base, n, 1, dres);
			ret = check(g, dres, argv[2]);
		}
		tr += t1 - t0;
		tw += now() - t1;
	}
	k_close2<<<1, 32>>>(gpusys_device(g), dh);
	gpusys_synchronize(g, NULL, -1);
	if (!ret)
		fprintf(stderr, "gpu_cp: %llu bytes; read %.2f GB/s, write %.2f GB/s\n", (unsigned long long)size,
			tr > 0 ? size / tr / 1e9 : 0.0, tw > 0 ? size / tw / 1e9 : 0.0);
	gpusys_detach(g);
	return ret ? 1 : 0;
}
