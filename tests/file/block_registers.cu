/* SPDX-License-Identifier: MIT */
/*
 * Kernels that call the block calls, compiled (never run) by
 * block-registers.sh to read their registers per thread from ptxas. Each
 * takes its block's share of a range, as a program would, so the kernel's
 * own live values count too. plain_*: declared with nothing; declared_*:
 * __launch_bounds__(1024, 1), as file.cuh advises for blocks of 1024.
 */
#include "gpusys/file.cuh"
#include "gpusys/socket.cuh"

/* Block b's share of len bytes: [*lo, *lo + return). */
static __device__ __forceinline__ unsigned long long share(unsigned long long len, unsigned long long *lo)
{
	const unsigned long long per = (len / gridDim.x + 4095) & ~4095ull;
	*lo = per * blockIdx.x < len ? per * blockIdx.x : len;
	return len - *lo < per ? len - *lo : per;
}

/* The result as a program checks it: 0 when the whole share moved. */
static __device__ __forceinline__ void report(long long r, unsigned long long n, long long *res)
{
	if (threadIdx.x == 0)
		res[blockIdx.x] = r == (long long)n ? 0 : r < 0 ? r : -EIO;
}

#define BLOCK_KERNELS(form, bounds)                                                                        \
	extern "C" __global__ void bounds form##_pread(gpusys_dev_t dev, long long h, uint8_t *buf,          \
						       unsigned long long len, long long *res)              \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		report(gpusys_pread_block(dev, h, buf + lo, n, (long long)lo), n, res);                    \
	}                                                                                                  \
	extern "C" __global__ void bounds form##_pwrite(gpusys_dev_t dev, long long h, uint8_t *buf,         \
							unsigned long long len, long long *res)             \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		report(gpusys_pwrite_block(dev, h, buf + lo, n, (long long)lo), n, res);                   \
	}                                                                                                  \
	extern "C" __global__ void bounds form##_both(gpusys_dev_t dev, long long h, uint8_t *buf,           \
						      unsigned long long len, int write_op, long long *res) \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		report(write_op ? gpusys_pwrite_block(dev, h, buf + lo, n, (long long)lo)                  \
				: gpusys_pread_block(dev, h, buf + lo, n, (long long)lo),                  \
		       n, res);                                                                            \
	}                                                                                                  \
	extern "C" __global__ void bounds form##_pread_pwrite(gpusys_dev_t dev, long long h, uint8_t *buf,   \
							      unsigned long long len, long long *res)       \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		long long r = gpusys_pread_block(dev, h, buf + lo, n, (long long)lo);                      \
		if (r == (long long)n)                                                                     \
			r = gpusys_pwrite_block(dev, h, buf + lo, n, (long long)(len + lo));               \
		report(r, n, res);                                                                         \
	}                                                                                                  \
	extern "C" __global__ void bounds form##_send(gpusys_dev_t dev, long long h, uint8_t *buf,           \
						      unsigned long long len, long long *res)               \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		report(gpusys_send_block(dev, h, buf + lo, n), n, res);                                    \
	}                                                                                                  \
	extern "C" __global__ void bounds form##_recv(gpusys_dev_t dev, long long h, uint8_t *buf,           \
						      unsigned long long len, long long *res)               \
	{                                                                                                  \
		unsigned long long lo, n = share(len, &lo);                                                \
		report(gpusys_recv_block(dev, h, buf + lo, n), n, res);                                    \
	}

#define NOTHING
BLOCK_KERNELS(plain, NOTHING)
BLOCK_KERNELS(declared, __launch_bounds__(1024, 1))
