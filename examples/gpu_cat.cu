/* SPDX-License-Identifier: MIT */
/*
 * gpu_cat FILE...: a kernel opens each file, reads it into device memory
 * with block reads and writes the bytes to the program's stdout (handle 1,
 * the stdout it passed to gpusysd at attach): the output is exactly what
 * cat prints. Needs a running gpusysd ($GPUSYS_RUNTIME_DIR or /run/gpusysd)
 * whose channel_bulk_bytes allows a bulk area (it works without one, through
 * packets, more slowly).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpusys/gpusys.h"   /* host: attach, synchronize, callbacks, heap */
#include "gpusys/gpusys.cuh" /* kernels: every call */

#define CHUNK (8u << 20)

/* One block: open, then read a chunk / write it to stdout until the end. */
static __global__ void k_cat(gpusys_dev_t dev, const char *path, uint8_t *buf, long long *status)
{
	__shared__ long long h;
	if (threadIdx.x == 0)
		h = gpusys_open(dev, path, O_RDONLY);
	__syncthreads();
	if (h < 0) {
		if (threadIdx.x == 0)
			*status = h;
		return;
	}
	long long rc = 0;
	for (;;) {
		long long n = gpusys_read_block(dev, h, buf, CHUNK);
		if (n <= 0) {
			rc = n;
			break;
		}
		long long w = gpusys_write_block(dev, GPUSYS_FILE_STDOUT, buf, (unsigned long long)n);
		if (w != n) {
			rc = w < 0 ? w : -EIO;
			break;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		gpusys_close(dev, h);
		*status = rc;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: gpu_cat FILE...\n");
		return 2;
	}
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.num_ports = 64;
	o.bulk_bytes = 2 * (uint64_t)CHUNK;
	gpusys_t *g;
	int rc = gpusys_attach(&o, &g);
	if (rc) {
		fprintf(stderr, "gpu_cat: %s\n", gpusys_last_error());
		return 1;
	}
	uint8_t *buf;
	long long *dstatus, status;
	char *dpath;
	if (cudaMalloc(&buf, CHUNK) || cudaMalloc(&dstatus, sizeof(long long)) || cudaMalloc(&dpath, 4097)) {
		fprintf(stderr, "gpu_cat: cudaMalloc failed\n");
		return 1;
	}
	int ret = 0;
	for (int i = 1; i < argc; i++) {
		size_t n = strlen(argv[i]);
		if (n > 4096) {
			fprintf(stderr, "gpu_cat: %s: %s\n", argv[i], strerror(ENAMETOOLONG));
			ret = 1;
			continue;
		}
		cudaMemcpy(dpath, argv[i], n + 1, cudaMemcpyHostToDevice);
		k_cat<<<1, 256>>>(gpusys_device(g), dpath, buf, dstatus);
		rc = gpusys_synchronize(g, NULL, -1);
		if (rc) {
			fprintf(stderr, "gpu_cat: %s\n", gpusys_strerror(rc));
			return 1;
		}
		cudaMemcpy(&status, dstatus, sizeof(status), cudaMemcpyDeviceToHost);
		if (status < 0) {
			fprintf(stderr, "gpu_cat: %s: %s\n", argv[i], strerror((int)-status));
			ret = 1;
		}
	}
	gpusys_detach(g);
	return ret;
}
