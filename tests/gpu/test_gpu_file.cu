/* SPDX-License-Identifier: MIT */
/*
 * The file service from CUDA kernels through the real gpusysd: every
 * per-thread call from the 32 lanes of a warp at once, with their POSIX
 * errors; a 1 GiB page-cached file read into device memory by one block
 * (and by many blocks) and written back, compared by checksum; the read and
 * write bandwidth is printed. The reads again from a kernel that declares
 * no launch bounds (issue 27): refused at 1024 threads exactly when
 * gpusys_block_kernel_check says so, right at 512.
 */
#include <fcntl.h>

#include "gpu_test.h"
#include "gpusys/file.cuh"

#define BIG (UINT64_C(1) << 30)

/* Each lane: its step number on the first failure, else 0. */
static __device__ void lane_name(char *p, const char *prefix, unsigned lane)
{
	int n = 0;
	while (prefix[n]) {
		p[n] = prefix[n];
		n++;
	}
	p[n++] = (char)('0' + lane / 10);
	p[n++] = (char)('0' + lane % 10);
	p[n] = 0;
}

#define STEP(cond)                        \
	do {                              \
		step++;                   \
		if (!(cond)) {            \
			fail[lane] = step; \
			got[lane] = r;     \
			return;           \
		}                         \
	} while (0)

static __global__ void k_small(gpusys_dev_t dev, int *fail, long long *got, int *dir_entries)
{
	const unsigned lane = threadIdx.x;
	char name[32], name2[32], dname[32];
	uint8_t buf[200], back[200];
	struct gpusys_stat st;
	int step = 0;
	long long r = 0;

	fail[lane] = 0;
	lane_name(name, "lane_", lane);
	lane_name(name2, "ren_", lane);
	lane_name(dname, "dir_", lane);
	for (unsigned i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(lane * 7u + i);

	long long h = r = gpusys_open(dev, name, O_RDWR | O_CREAT | O_TRUNC, 0644);
	STEP(h > 2);
	r = gpusys_write(dev, h, buf, 100 + lane);
	STEP(r == 100 + lane);
	r = gpusys_lseek(dev, h, 0, SEEK_SET);
	STEP(r == 0);
	r = gpusys_read(dev, h, back, sizeof(back));
	STEP(r == 100 + lane);
	for (unsigned i = 0; i < 100 + lane; i++)
		STEP(back[i] == buf[i]);
	r = gpusys_fstat(dev, h, &st);
	STEP(r == 0 && st.size == 100 + lane && (st.mode & 0170000) == 0100000);
	r = gpusys_pwrite(dev, h, "XYZ", 3, 5);
	STEP(r == 3);
	r = gpusys_pread(dev, h, back, 4, 4);
	STEP(r == 4 && back[0] == buf[4] && back[1] == 'X' && back[3] == 'Z');
	r = gpusys_ftruncate(dev, h, 10);
	STEP(r == 0);
	r = gpusys_fsync(dev, h);
	STEP(r == 0);
	r = gpusys_fstat(dev, h, &st);
	STEP(r == 0 && st.size == 10);
	r = gpusys_close(dev, h);
	STEP(r == 0);
	r = gpusys_close(dev, h);
	STEP(r == -EBADF);
	r = gpusys_read(dev, h, back, 1);
	STEP(r == -EBADF);
	r = gpusys_read(dev, 12345 + lane, back, 1);
	STEP(r == -EBADF);
	r = gpusys_open(dev, "no_such_file", O_RDONLY);
	STEP(r == -ENOENT);
	r = gpusys_open(dev, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
	STEP(r == -EEXIST);
	r = gpusys_mkdir(dev, dname, 0755);
	STEP(r == 0);
	r = gpusys_mkdir(dev, dname, 0755);
	STEP(r == -EEXIST);
	r = gpusys_open(dev, dname, O_WRONLY);
	STEP(r == -EISDIR);
	r = gpusys_rename(dev, name, name2);
	STEP(r == 0);
	r = gpusys_stat(dev, name2, &st);
	STEP(r == 0 && st.size == 10);
	r = gpusys_stat(dev, name, &st);
	STEP(r == -ENOENT);
	r = gpusys_unlink(dev, name2);
	STEP(r == 0);
	r = gpusys_unlink(dev, name2);
	STEP(r == -ENOENT);
	r = gpusys_rmdir(dev, dname);
	STEP(r == 0);
	r = gpusys_rmdir(dev, dname);
	STEP(r == -ENOENT);
	if (lane == 0) {
		long long d = r = gpusys_opendir(dev, ".");
		STEP(d > 0);
		struct gpusys_dirent e;
		int n = 0;
		while ((r = gpusys_readdir(dev, d, &e)) == 1)
			n++;
		STEP(r == 0);
		*dir_entries = n;
		r = gpusys_closedir(dev, d);
		STEP(r == 0);
		r = gpusys_readdir(dev, d, &e);
		STEP(r == -EBADF);
	}
}

static __global__ void k_open(gpusys_dev_t dev, const char *path, int flags, long long *h)
{
	*h = gpusys_open(dev, path, flags, 0644);
}

static __global__ void k_close(gpusys_dev_t dev, long long h, long long *r)
{
	*r = gpusys_close(dev, h);
}

/* Block b moves bytes [b*len/B, (b+1)*len/B) with one cooperative call. */
static __device__ __forceinline__ void move_block(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned long long len,
						  int write_op, long long *res)
{
	unsigned long long per = len / gridDim.x, lo = per * blockIdx.x;
	unsigned long long n = blockIdx.x + 1 == gridDim.x ? len - lo : per;
	long long r = write_op ? gpusys_pwrite_block(dev, h, buf + lo, n, (long long)lo)
			       : gpusys_pread_block(dev, h, buf + lo, n, (long long)lo);
	if (threadIdx.x == 0)
		res[blockIdx.x] = r == (long long)n ? 0 : r < 0 ? r : -1000000 - r;
}

/* As file.cuh advises for blocks of 1024 threads. */
static __global__ void __launch_bounds__(1024, 1) k_block(gpusys_dev_t dev, long long h, uint8_t *buf,
							  unsigned long long len, int write_op, long long *res)
{
	move_block(dev, h, buf, len, write_op, res);
}

/* The same declaring nothing, as a new program would (issue 27). */
static __global__ void k_block_plain(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned long long len, int write_op,
				     long long *res)
{
	move_block(dev, h, buf, len, write_op, res);
}

static uint64_t checksum(const uint8_t *b, uint64_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (uint64_t i = 0; i + 8 <= n; i += 8) {
		uint64_t v;
		memcpy(&v, b + i, 8);
		h = (h ^ v) * 1099511628211ull;
	}
	return h;
}

static void fill(uint8_t *b, uint64_t n, uint64_t s)
{
	for (uint64_t i = 0; i + 8 <= n; i += 8) {
		s ^= s >> 12;
		s ^= s << 25;
		s ^= s >> 27;
		uint64_t v = s * 0x2545F4914F6CDD1Dull;
		memcpy(b + i, &v, 8);
	}
}

static long long *d_res;

/* One timed cooperative transfer of the whole buffer by nblocks blocks. */
static double run_block(gpusys_t *g, long long h, uint8_t *dbuf, int write_op, int nblocks, int threads,
			bool plain = false)
{
	cudaEvent_t a, b;
	GT_CUDA(cudaEventCreate(&a));
	GT_CUDA(cudaEventCreate(&b));
	GT_CUDA(cudaMemset(d_res, 0xff, nblocks * sizeof(long long))); /* -1: the kernel never wrote */
	GT_CUDA(cudaEventRecord(a));
	if (plain)
		k_block_plain<<<nblocks, threads>>>(gpusys_device(g), h, dbuf, BIG, write_op, d_res);
	else
		k_block<<<nblocks, threads>>>(gpusys_device(g), h, dbuf, BIG, write_op, d_res);
	GT_CUDA(cudaGetLastError());
	GT_CUDA(cudaEventRecord(b));
	int rc = gpusys_synchronize(g, NULL, 120000);
	GT_CHECK(rc == 0, "gpusys_synchronize: %s", gpusys_strerror(rc));
	float ms = 0;
	GT_CUDA(cudaEventElapsedTime(&ms, a, b));
	long long res[256];
	GT_CUDA(cudaMemcpy(res, d_res, nblocks * sizeof(long long), cudaMemcpyDeviceToHost));
	for (int i = 0; i < nblocks; i++)
		GT_CHECK(res[i] == 0, "%s block %d of %d: result %lld", write_op ? "pwrite_block" : "pread_block", i,
			 nblocks, res[i]);
	double gbs = (double)BIG / (ms / 1e3) / 1e9;
	printf("%s 1 GiB, %d block(s) x %d threads%s: %.1f ms, %.2f GB/s\n", write_op ? "write" : "read", nblocks,
	       threads, plain ? ", kernel declaring nothing" : "", ms, gbs);
	return gbs;
}

static long long open_on_gpu(gpusys_t *g, const char *path, int flags)
{
	char *dpath;
	long long *dh, h;
	GT_CUDA(cudaMalloc(&dpath, strlen(path) + 1));
	GT_CUDA(cudaMalloc(&dh, sizeof(*dh)));
	GT_CUDA(cudaMemcpy(dpath, path, strlen(path) + 1, cudaMemcpyHostToDevice));
	k_open<<<1, 1>>>(gpusys_device(g), dpath, flags, dh);
	GT_CUDA(cudaGetLastError());
	GT_CUDA(cudaDeviceSynchronize());
	GT_CUDA(cudaMemcpy(&h, dh, sizeof(h), cudaMemcpyDeviceToHost));
	cudaFree(dpath);
	cudaFree(dh);
	GT_CHECK(h > 0, "gpusys_open(%s): %lld", path, h);
	return h;
}

static void close_on_gpu(gpusys_t *g, long long h)
{
	long long *dr, r;
	GT_CUDA(cudaMalloc(&dr, sizeof(*dr)));
	k_close<<<1, 1>>>(gpusys_device(g), h, dr);
	GT_CUDA(cudaMemcpy(&r, dr, sizeof(r), cudaMemcpyDeviceToHost));
	cudaFree(dr);
	GT_CHECK(r == 0, "gpusys_close: %lld", r);
}

/* Every thread opens a file of its own, writes its index, keeps it open
 * until all have opened (a grid-wide count), then reads it back and closes
 * it: n handles open at once from one client (issue 16: at most 1024 did). */
static __global__ void k_many_handles(gpusys_dev_t dev, const char *dir, unsigned n, unsigned *opened, int *fail,
				      long long *first_err)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	char path[64];
	int len = 0;
	for (const char *s = dir; *s && len < 40; s++)
		path[len++] = *s;
	const char *name = "/h";
	for (const char *s = name; *s; s++)
		path[len++] = *s;
	unsigned v = i, digits = 1;
	while (v /= 10)
		digits++;
	for (unsigned d = 0, x = i; d < digits; d++, x /= 10)
		path[len + digits - 1 - d] = (char)('0' + x % 10);
	path[len + digits] = 0;
	long long h = gpusys_open(dev, path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (h < 0) {
		atomicAdd(fail, 1);
		atomicCAS((unsigned long long *)first_err, 0ull, (unsigned long long)h);
		return;
	}
	atomicAdd(opened, 1);
	/* Keep it open until every thread that will open has (or ~1 s). */
	for (int spin = 0; spin < 1000000 && *(volatile unsigned *)opened + *(volatile int *)fail < n; spin++)
		__nanosleep(1000);
	unsigned back = ~0u;
	if (gpusys_pwrite(dev, h, &i, sizeof(i), 0) != (long long)sizeof(i) ||
	    gpusys_pread(dev, h, &back, sizeof(back), 0) != (long long)sizeof(back) || back != i ||
	    gpusys_close(dev, h) != 0)
		atomicAdd(fail, 1);
}

int main(void)
{
	gt_name = "test_gpu_file";
	gt_require_gpu();

	char work[] = "/tmp/gpusys-gpu-file.XXXXXX";
	GT_CHECK(mkdtemp(work), "mkdtemp: %s", strerror(errno));
	char conf[PATH_MAX + 32], extra[PATH_MAX + 64];
	snprintf(conf, sizeof(conf), "%s/gpusysd.conf", work);
	FILE *f = fopen(conf, "w");
	GT_CHECK(f, "cannot write %s", conf);
	fprintf(f, "channel_bulk_bytes = 256M\nworkers = 8\n");
	fclose(f);
	snprintf(extra, sizeof(extra), "--config %s", conf);
	gt_start_daemon(extra);
	GT_CHECK(chdir(work) == 0, "chdir");

	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.cuda_device = 0;
	o.bulk_bytes = 128u << 20;
	gpusys_t *g = NULL;
	int rc = gpusys_attach(&o, &g);
	GT_CHECK(rc == 0, "gpusys_attach: %s", gpusys_strerror(rc));
	gpusys_dev_t dev = gpusys_device(g);
	GT_CHECK(dev.bulk_slots > 0, "no bulk slots (bulk %llu bytes)", (unsigned long long)dev.bulk_bytes);
	printf("bulk area %llu MiB: %u slots of %u MiB\n", (unsigned long long)(dev.bulk_bytes >> 20), dev.bulk_slots,
	       dev.bulk_slot_bytes >> 20);

	/* Every call from 32 lanes at once. */
	int *d_fail, fail[32], entries = -1, *d_entries;
	long long *d_got, got[32];
	GT_CUDA(cudaMalloc(&d_fail, sizeof(fail)));
	GT_CUDA(cudaMalloc(&d_got, sizeof(got)));
	GT_CUDA(cudaMalloc(&d_entries, sizeof(int)));
	k_small<<<1, 32>>>(dev, d_fail, d_got, d_entries);
	GT_CUDA(cudaGetLastError());
	rc = gpusys_synchronize(g, NULL, 60000);
	GT_CHECK(rc == 0, "k_small: %s", gpusys_strerror(rc));
	GT_CUDA(cudaMemcpy(fail, d_fail, sizeof(fail), cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(got, d_got, sizeof(got), cudaMemcpyDeviceToHost));
	GT_CUDA(cudaMemcpy(&entries, d_entries, sizeof(int), cudaMemcpyDeviceToHost));
	for (int l = 0; l < 32; l++)
		GT_CHECK(fail[l] == 0, "lane %d failed at step %d (result %lld)", l, fail[l], got[l]);
	GT_CHECK(entries >= 2, "readdir saw %d entries", entries);
	printf("ok per-thread calls: 32 lanes, every call and its errors; readdir saw %d entries\n", entries);

	/* 2048 threads, one file each, all open at once. */
	{
		const unsigned n = 2048;
		char *d_dir;
		unsigned *d_opened, opened = 0;
		int *d_nfail, nfail = 0;
		long long *d_err, err = 0;
		GT_CUDA(cudaMalloc(&d_dir, strlen(work) + 1));
		GT_CUDA(cudaMemcpy(d_dir, work, strlen(work) + 1, cudaMemcpyHostToDevice));
		GT_CUDA(cudaMalloc(&d_opened, sizeof(unsigned)));
		GT_CUDA(cudaMalloc(&d_nfail, sizeof(int)));
		GT_CUDA(cudaMalloc(&d_err, sizeof(long long)));
		GT_CUDA(cudaMemset(d_opened, 0, sizeof(unsigned)));
		GT_CUDA(cudaMemset(d_nfail, 0, sizeof(int)));
		GT_CUDA(cudaMemset(d_err, 0, sizeof(long long)));
		k_many_handles<<<n / 256, 256>>>(dev, d_dir, n, d_opened, d_nfail, d_err);
		GT_CUDA(cudaGetLastError());
		rc = gpusys_synchronize(g, NULL, 120000);
		GT_CHECK(rc == 0, "k_many_handles: %s", gpusys_strerror(rc));
		GT_CUDA(cudaMemcpy(&opened, d_opened, sizeof(opened), cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(&nfail, d_nfail, sizeof(nfail), cudaMemcpyDeviceToHost));
		GT_CUDA(cudaMemcpy(&err, d_err, sizeof(err), cudaMemcpyDeviceToHost));
		GT_CHECK(opened == n && nfail == 0, "%u threads: %u opened, %d failed (first error %lld)", n, opened, nfail,
			 err);
		for (unsigned i = 0; i < n; i++) {
			char path[PATH_MAX + 16];
			snprintf(path, sizeof(path), "%s/h%u", work, i);
			unsigned v = ~0u;
			int fd = open(path, O_RDONLY);
			GT_CHECK(fd >= 0 && read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) && v == i, "h%u holds %u", i, v);
			close(fd);
			unlink(path);
		}
		cudaFree(d_dir);
		cudaFree(d_opened);
		cudaFree(d_nfail);
		cudaFree(d_err);
		printf("ok %u threads each opened a file, all %u open at once, each written and read back\n", n, n);
	}

	/* 1 GiB through the bulk area. */
	uint8_t *host = (uint8_t *)malloc(BIG), *dbuf;
	GT_CHECK(host, "malloc");
	fill(host, BIG, 0x9e3779b97f4a7c15ull);
	uint64_t want = checksum(host, BIG);
	int fd = open("big.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	GT_CHECK(fd >= 0, "create big.bin");
	for (uint64_t at = 0; at < BIG;) {
		ssize_t n = write(fd, host + at, BIG - at);
		GT_CHECK(n > 0, "write big.bin");
		at += (uint64_t)n;
	}
	close(fd);
	GT_CUDA(cudaMalloc(&dbuf, BIG));
	GT_CUDA(cudaMalloc(&d_res, 256 * sizeof(long long)));

	long long h = open_on_gpu(g, "big.bin", O_RDONLY);
	const int blocks[] = { 1, 4, 16 };
	for (unsigned i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		GT_CUDA(cudaMemset(dbuf, 0, BIG));
		run_block(g, h, dbuf, 0, blocks[i], 1024);
		memset(host, 0, BIG);
		GT_CUDA(cudaMemcpy(host, dbuf, BIG, cudaMemcpyDeviceToHost));
		GT_CHECK(checksum(host, BIG) == want, "read checksum differs (%d blocks)", blocks[i]);
	}

	/* A kernel declaring nothing (issue 27). gpusys_block_kernel_check
	 * must agree with the launch: blocks of 1024 refused (-E2BIG) and the
	 * launch failing with "too many resources requested", or (should the
	 * calls one day fit in 64 registers) both fine and the bytes right.
	 * Blocks of 512, which file.cuh says need nothing, must launch and
	 * read the file. */
	GT_CHECK(gpusys_block_kernel_check((const void *)k_block, 1024) == 0, "k_block refused at 1024 threads");
	int fits = gpusys_block_kernel_check((const void *)k_block_plain, 1024);
	GT_CHECK(fits == 0 || fits == -E2BIG, "gpusys_block_kernel_check: %s", gpusys_strerror(fits));
	if (fits == -E2BIG) {
		k_block_plain<<<1, 1024>>>(gpusys_device(g), h, dbuf, BIG, 0, d_res);
		cudaError_t le = cudaGetLastError();
		GT_CHECK(le == cudaErrorLaunchOutOfResources, "k_block_plain at 1024 threads: %s, not refused",
			 cudaGetErrorString(le));
		printf("ok kernel declaring nothing, 1024 threads: refused by the check and by the launch alike\n");
	} else {
		GT_CUDA(cudaMemset(dbuf, 0, BIG));
		run_block(g, h, dbuf, 0, 1, 1024, true);
		GT_CUDA(cudaMemcpy(host, dbuf, BIG, cudaMemcpyDeviceToHost));
		GT_CHECK(checksum(host, BIG) == want, "read checksum differs (kernel declaring nothing, 1024 threads)");
		printf("ok kernel declaring nothing, 1024 threads: launches now (file.cuh's advice is out of date)\n");
	}
	GT_CHECK(gpusys_block_kernel_check((const void *)k_block_plain, 512) == 0,
		 "k_block_plain refused at 512 threads (file.cuh says they need nothing)");
	for (unsigned i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		GT_CUDA(cudaMemset(dbuf, 0, BIG));
		run_block(g, h, dbuf, 0, blocks[i], 512, true);
		memset(host, 0, BIG);
		GT_CUDA(cudaMemcpy(host, dbuf, BIG, cudaMemcpyDeviceToHost));
		GT_CHECK(checksum(host, BIG) == want, "read checksum differs (kernel declaring nothing, %d blocks)",
			 blocks[i]);
	}
	close_on_gpu(g, h);

	long long w = open_on_gpu(g, "copy.bin", O_WRONLY | O_CREAT | O_TRUNC);
	for (unsigned i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		run_block(g, w, dbuf, 1, blocks[i], 1024);
		fd = open("copy.bin", O_RDONLY);
		memset(host, 0, BIG);
		for (uint64_t at = 0; at < BIG;) {
			ssize_t n = read(fd, host + at, BIG - at);
			GT_CHECK(n > 0, "read copy.bin");
			at += (uint64_t)n;
		}
		close(fd);
		GT_CHECK(checksum(host, BIG) == want, "written file's checksum differs (%d blocks)", blocks[i]);
	}
	close_on_gpu(g, w);
	printf("ok 1 GiB read and written, checksums equal\n");

	unlink("big.bin");
	unlink("copy.bin");
	free(host);
	cudaFree(dbuf);
	gpusys_detach(g);
	GT_CHECK(gt_daemon_alive(), "gpusysd died");
	gt_stop_daemon();
	unlink(conf);
	rmdir(work);
	return 0;
}
