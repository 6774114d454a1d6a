/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench file: a page-cached file read into device memory, and device
 * memory written to a file, by cooperative block calls through gpusysd's bulk
 * area (include/gpusys/file.cuh); against, in the same run, what a CUDA
 * program does today: cudaMemcpy of the same size from pinned and from
 * pageable memory, and pread(2) into a pinned buffer followed by cudaMemcpy;
 * and the floors of reads (bench/file_floors.cu): the GPU's copy loop alone,
 * host threads' pread alone, and both pipelined without gpusysd.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "gpusys/gpusys.h"
/* Where reads' time goes, per block (file.cuh): the breakdown rows. */
#define GPUSYS_BLOCK_IO_TIMING 1024
#include "gpusys/file.cuh"
#include "file_kernels.cuh"
#include "file_floors.h"
#include "file_depth4.h"

/* One block's share of the file, moved by the block calls. */
static __device__ __forceinline__ void move_share(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned long long len,
						  int write_op, long long *res)
{
	unsigned long long per = (len / gridDim.x + 4095) & ~4095ull, lo = per * blockIdx.x;
	if (lo > len)
		lo = len;
	unsigned long long n = len - lo < per ? len - lo : per;
	long long r = write_op ? gpusys_pwrite_block(dev, h, buf + lo, n, (long long)lo)
			       : gpusys_pread_block(dev, h, buf + lo, n, (long long)lo);
	if (threadIdx.x == 0)
		res[blockIdx.x] = r == (long long)n ? 0 : r < 0 ? r : -EIO;
}

/* As file.cuh advises: one block of 1024 threads per SM, said outright, so
 * ptxas may give each thread the 64 registers an SM has for it. */
static __global__ void __launch_bounds__(1024, 1) k_move(gpusys_dev_t dev, long long h, uint8_t *buf,
							 unsigned long long len, int write_op, long long *res)
{
	move_share(dev, h, buf, len, write_op, res);
}

/* The same without the minimum of blocks: ptxas then caps a kernel that
 * calls the block calls at 32 registers (CUDA 13.0, sm_90) and the copy
 * loop spills. Kept to show what the declaration is worth. */
static __global__ void __launch_bounds__(1024) k_move_32reg(gpusys_dev_t dev, long long h, uint8_t *buf,
							    unsigned long long len, int write_op, long long *res)
{
	move_share(dev, h, buf, len, write_op, res);
}

/* The same declaring nothing, as a new program would: ptxas then takes
 * the registers it likes (over 64: file.cuh gives figures; the row prints
 * this kernel's), so blocks of 1024 threads do not launch. It runs with the
 * most threads that do (a multiple of 32), to show what leaving the
 * declaration out costs. */
static __global__ void k_move_plain(gpusys_dev_t dev, long long h, uint8_t *buf, unsigned long long len, int write_op,
				    long long *res)
{
	move_share(dev, h, buf, len, write_op, res);
}

/* Which of the kernels above gpu_move launches. */
enum move_form {
	MOVE_DECLARED, /* k_move */
	MOVE_32REG,    /* k_move_32reg */
	MOVE_PLAIN,    /* k_move_plain */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: gpusys-bench file [--size BYTES] [--blocks N] [--threads T] [--dir DIR] [--reps N]\n"
		"                         [--daemon PATH | --runtime-dir DIR] [--json] [--reads-only] [--no-floors]\n"
		"                         [--halves MIB[,MIB...]]\n"
		"  A file of --size bytes (default 1 GiB) in --dir (default /dev/shm, else /tmp) read into\n"
		"  device memory by 1 and by --blocks blocks (default 16) of --threads threads (1024), and\n"
		"  written back; best of --reps (3). --daemon starts that gpusysd with a bulk area allowed.\n"
		"  Then the floors of reads: the copy loop alone, host threads' pread alone, both\n"
		"  pipelined without gpusysd (--no-floors: not). --reads-only: no writes.\n"
		"  --halves 8,16: the reads again, in that order, through a client whose bulk slots are\n"
		"  cut in halves of those MiB (gpusys_options.bulk_slot_bytes; 8 is the default).\n");
}

static double secs_since(uint64_t t0)
{
	return (double)(bench_now_ns() - t0) / 1e9;
}

static long long *d_res;

/* Reads' breakdown of the best rep, averaged over blocks: per half, thread
 * 0 waiting on gpusysd and the first copier copying (us); the call (ms). */
struct read_split {
	double daemon_us, copy_us, call_ms;
};

static void read_split_of(int blocks, struct read_split *ret)
{
	static struct gpusys_block_io_time t[1024];
	cudaMemcpyFromSymbol(t, gpusys_block_io_times, (size_t)blocks * sizeof(t[0]));
	double d = 0, c = 0, call = 0;
	for (int b = 0; b < blocks; b++) {
		/* One request per half: the first before the loop, then one
		 * beside each copy but the last. */
		d += t[b].halves ? (double)t[b].daemon_ns / (double)t[b].halves : 0;
		c += t[b].halves ? (double)t[b].copy_ns / (double)t[b].halves : 0;
		call += (double)t[b].call_ns;
	}
	ret->daemon_us = d / blocks / 1e3;
	ret->copy_us = c / blocks / 1e3;
	ret->call_ms = call / blocks / 1e6;
}

static double gpu_move(gpusys_t *g, long long h, uint8_t *dbuf, uint64_t size, int write_op, int blocks, int threads,
		       int reps, struct read_split *split, enum move_form form)
{
	double best = 0;
	for (int r = 0; r < reps; r++) {
		static const struct gpusys_block_io_time zero[1024] = {};
		cudaMemcpyToSymbol(gpusys_block_io_times, zero, sizeof(zero));
		cudaMemset(d_res, 0xff, (size_t)blocks * sizeof(long long)); /* -1: never written */
		cudaDeviceSynchronize();
		uint64_t t0 = bench_now_ns();
		if (form == MOVE_32REG)
			k_move_32reg<<<blocks, threads>>>(gpusys_device(g), h, dbuf, size, write_op, d_res);
		else if (form == MOVE_PLAIN)
			k_move_plain<<<blocks, threads>>>(gpusys_device(g), h, dbuf, size, write_op, d_res);
		else
			k_move<<<blocks, threads>>>(gpusys_device(g), h, dbuf, size, write_op, d_res);
		cudaError_t le = cudaGetLastError();
		if (le != cudaSuccess) {
			fprintf(stderr, "gpusys-bench: launch: %s\n", cudaGetErrorString(le));
			return -1;
		}
		int rc = gpusys_synchronize(g, NULL, -1);
		double s = secs_since(t0);
		long long res[1024];
		cudaMemcpy(res, d_res, (size_t)blocks * sizeof(long long), cudaMemcpyDeviceToHost);
		for (int b = 0; b < blocks; b++) {
			if (rc || res[b]) {
				fprintf(stderr, "gpusys-bench: %s block %d: %s\n", write_op ? "write" : "read", b,
					gpusys_strerror(rc ? rc : (int)res[b]));
				return -1;
			}
		}
		double gbs = (double)size / s / 1e9;
		if (gbs > best && split)
			read_split_of(blocks, split);
		best = gbs > best ? gbs : best;
	}
	return best;
}

/* The write floor: host threads writing the same bytes from pinned memory
 * into the same file, each its own contiguous part, with pwrite(2) or by
 * memcpy into a shared mapping of the file (which takes no inode lock per
 * copy). The file already has its size and pages (the GPU rows' best rep
 * overwrites too). GB/s, best of reps. */
struct write_part {
	int fd;
	const uint8_t *src;
	uint8_t *map;
	uint64_t off, len;
	int err;
};

static void *write_part_main(void *arg)
{
	struct write_part *w = (struct write_part *)arg;
	if (w->map) {
		memcpy(w->map + w->off, w->src + w->off, w->len);
		return NULL;
	}
	for (uint64_t at = 0; at < w->len;) {
		ssize_t n = pwrite(w->fd, w->src + w->off + at, w->len - at, (off_t)(w->off + at));
		if (n <= 0) {
			w->err = errno ? errno : EIO;
			return NULL;
		}
		at += (uint64_t)n;
	}
	return NULL;
}

static double write_floor(const char *path, const uint8_t *src, uint64_t size, int nthreads, int use_map, int reps)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	double best = 0;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = bench_now_ns();
		uint8_t *map = NULL;
		if (use_map) {
			map = (uint8_t *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (map == MAP_FAILED) {
				close(fd);
				return -1;
			}
		}
		pthread_t t[64];
		struct write_part w[64];
		uint64_t per = (size / (uint64_t)nthreads + 4095) & ~4095ull;
		for (int i = 0; i < nthreads; i++) {
			uint64_t lo = per * (uint64_t)i < size ? per * (uint64_t)i : size;
			w[i] = (struct write_part){ fd, src, map, lo, size - lo < per ? size - lo : per, 0 };
			pthread_create(&t[i], NULL, write_part_main, &w[i]);
		}
		int err = 0;
		for (int i = 0; i < nthreads; i++) {
			pthread_join(t[i], NULL);
			err |= w[i].err;
		}
		if (map)
			munmap(map, size);
		double gbs = err ? -1 : (double)size / secs_since(t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	close(fd);
	return best;
}

/* --halves: the reads of 1 and of `blocks` blocks again, through a second
 * client whose slots are two halves of half bytes (its own handle on the
 * file), checked against the file. ret[0], ret[1]: GB/s, < 0 on error;
 * *ret_half: the half the client got (a smaller area gives smaller ones). */
static void halves_reads(const char *runtime_dir, const char *in_path, const uint8_t *host, uint8_t *dbuf,
			 uint8_t *check, uint64_t size, int blocks, int threads, int reps, uint64_t half, double ret[2],
			 struct read_split split[2], uint64_t *ret_half)
{
	ret[0] = ret[1] = -1;
	*ret_half = 0;
	struct gpusys_options o;
	memset(&o, 0, sizeof(o));
	o.runtime_dir = runtime_dir;
	o.bulk_slot_bytes = 2 * half;
	o.bulk_bytes = (uint64_t)blocks * 2 * half;
	gpusys_t *g = NULL;
	if (gpusys_attach(&o, &g)) {
		fprintf(stderr, "gpusys-bench: attach with %llu MiB halves: %s\n", (unsigned long long)(half >> 20),
			gpusys_last_error());
		return;
	}
	gpusys_dev_t dev = gpusys_device(g);
	*ret_half = dev.bulk_slot_bytes / 2;
	char *dpath = NULL;
	long long *dh = NULL, h = -1;
	cudaMalloc(&dpath, PATH_MAX);
	cudaMalloc(&dh, sizeof(long long));
	cudaMemcpy(dpath, in_path, strlen(in_path) + 1, cudaMemcpyHostToDevice);
	k_open<<<1, 1>>>(dev, dpath, O_RDONLY, dh);
	cudaMemcpy(&h, dh, sizeof(h), cudaMemcpyDeviceToHost);
	if (h >= 0) {
		cudaMemset(dbuf, 0, size);
		ret[0] = gpu_move(g, h, dbuf, size, 0, 1, threads, reps, &split[0], MOVE_DECLARED);
		ret[1] = gpu_move(g, h, dbuf, size, 0, blocks, threads, reps, &split[1], MOVE_DECLARED);
		cudaMemcpy(check, dbuf, size, cudaMemcpyDeviceToHost);
		if (memcmp(check, host, size) != 0) {
			fprintf(stderr, "gpusys-bench: %llu MiB halves: the data read differs from the file\n",
				(unsigned long long)(half >> 20));
			ret[0] = ret[1] = -1;
		}
		k_close<<<1, 1>>>(dev, h);
	} else {
		fprintf(stderr, "gpusys-bench: gpusys_open: %s\n", gpusys_strerror((int)h));
	}
	gpusys_synchronize(g, NULL, -1);
	cudaFree(dpath);
	cudaFree(dh);
	gpusys_detach(g);
}

static double memcpy_gbs(void *dst, const void *src, uint64_t size, cudaMemcpyKind kind, int reps)
{
	double best = 0;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = bench_now_ns();
		cudaMemcpy(dst, src, size, kind);
		double gbs = (double)size / secs_since(t0) / 1e9;
		best = gbs > best ? gbs : best;
	}
	return best;
}

extern "C" int bench_file_gpu(int argc, char **argv)
{
	uint64_t size = UINT64_C(1) << 30;
	int blocks = 16, threads = 1024, reps = 3, json = 0, reads_only = 0, floors = 1, opt;
	enum { MAX_HALVES = 8 };
	uint64_t halves[MAX_HALVES];
	int nhalves = 0;
	const char *dir = NULL, *daemon = NULL, *runtime_dir = NULL;
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },  { "blocks", required_argument, NULL, 'b' },
		{ "threads", required_argument, NULL, 't' }, { "dir", required_argument, NULL, 'D' },
		{ "reps", required_argument, NULL, 'n' },  { "daemon", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' }, { "json", no_argument, NULL, 'j' },
		{ "reads-only", no_argument, NULL, 'R' }, { "no-floors", no_argument, NULL, 'F' },
		{ "halves", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'b': blocks = atoi(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 'D': dir = optarg; break;
		case 'n': reps = atoi(optarg); break;
		case 'd': daemon = optarg; break;
		case 'r': runtime_dir = optarg; break;
		case 'j': json = 1; break;
		case 'R': reads_only = 1; break;
		case 'F': floors = 0; break;
		case 'H':
			for (char *p = optarg; *p && nhalves < MAX_HALVES;) {
				char *end;
				unsigned long long mib = strtoull(p, &end, 10);
				if (end == p || mib < 1 || mib > (GPUSYS_BULK_MAX_SLOT_BYTES >> 21)) {
					usage();
					return 2;
				}
				halves[nhalves++] = (uint64_t)mib << 20;
				p = *end == ',' ? end + 1 : end;
				if (*end && *end != ',') {
					usage();
					return 2;
				}
			}
			break;
		default: usage(); return 2;
		}
	}
	if (!size || blocks < 1 || blocks > 1024 || threads < 32 || threads > 1024 || reps < 1) {
		usage();
		return 2;
	}
	struct stat st;
	if (!dir)
		dir = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";

	/* The file, written from the host: in the page cache from the start. */
	char in_path[PATH_MAX], out_path[PATH_MAX];
	snprintf(in_path, sizeof(in_path), "%s/gpusys-bench-file.%d.in", dir, (int)getpid());
	snprintf(out_path, sizeof(out_path), "%s/gpusys-bench-file.%d.out", dir, (int)getpid());
	uint8_t *host = (uint8_t *)malloc(size);
	if (!host)
		return 1;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i + 8 <= size; i += 8) {
		s ^= s >> 12;
		s ^= s << 25;
		s ^= s >> 27;
		uint64_t v = s * 0x2545F4914F6CDD1Dull;
		memcpy(host + i, &v, 8);
	}
	int fd = open(in_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	for (uint64_t at = 0; fd >= 0 && at < size;) {
		ssize_t n = write(fd, host + at, size - at);
		if (n <= 0) {
			close(fd);
			fd = -1;
			break;
		}
		at += (uint64_t)n;
	}
	if (fd < 0) {
		fprintf(stderr, "gpusys-bench: cannot write %s\n", in_path);
		return 1;
	}
	close(fd);

	/* gpusysd before CUDA: it must not inherit a context. */
	struct bench_daemon bd;
	memset(&bd, 0, sizeof(bd));
	bd.config = "channel_bulk_bytes = 4G\nworkers = 16\n";
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;

	int ndev = 0, ret = 1;
	gpusys_t *g = NULL;
	uint8_t *dbuf = NULL, *pinned = NULL;
	double r1 = -1, rn = -1, r1_d4 = -1, rn_d4 = -1, r1_32 = -1, rn_32 = -1, r1_plain = -1, rn_plain = -1, w1 = -1,
	       wn = -1, h2d_pin, h2d_page, d2h_pin, d2h_page, staged;
	int plain_threads = 0, plain_regs = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		fprintf(stderr, "gpusys-bench: no usable GPU; use file --emulate\n");
		ret = 77;
		goto out;
	}
	{
		struct gpusys_options o;
		memset(&o, 0, sizeof(o));
		o.cuda_device = 0;
		o.runtime_dir = runtime_dir;
		o.num_ports = 0;
		/* a slot for each block, of the size libgpusys picks */
		o.bulk_bytes = (uint64_t)blocks * GPUSYS_BULK_PREFERRED_SLOT_BYTES;
		int rc = gpusys_attach(&o, &g);
		if (rc) {
			fprintf(stderr, "gpusys-bench: attach: %s\n", gpusys_last_error());
			goto out;
		}
		gpusys_dev_t dev = gpusys_device(g);
		if (!dev.bulk_slots)
			fprintf(stderr, "gpusys-bench: warning: no bulk area granted (daemon channel_bulk_bytes?)\n");
		if (cudaMalloc(&dbuf, size) || cudaMalloc(&d_res, 1024 * sizeof(long long)) ||
		    cudaMallocHost(&pinned, size)) {
			fprintf(stderr, "gpusys-bench: out of device or pinned memory\n");
			goto out;
		}
		char *dpath;
		long long *dh, h, hw;
		cudaMalloc(&dpath, PATH_MAX);
		cudaMalloc(&dh, sizeof(long long));
		cudaMemcpy(dpath, in_path, strlen(in_path) + 1, cudaMemcpyHostToDevice);
		k_open<<<1, 1>>>(dev, dpath, O_RDONLY, dh);
		cudaMemcpy(&h, dh, sizeof(h), cudaMemcpyDeviceToHost);
		cudaMemcpy(dpath, out_path, strlen(out_path) + 1, cudaMemcpyHostToDevice);
		k_open<<<1, 1>>>(dev, dpath, O_WRONLY | O_CREAT | O_TRUNC, dh);
		cudaMemcpy(&hw, dh, sizeof(hw), cudaMemcpyDeviceToHost);
		if (h < 0 || hw < 0) {
			fprintf(stderr, "gpusys-bench: gpusys_open: %s\n", gpusys_strerror((int)(h < 0 ? h : hw)));
			goto out;
		}
		struct read_split s1 = { 0, 0, 0 }, sn = { 0, 0, 0 };
		r1_d4 = file_read_depth4(g, h, dbuf, size, 1, threads, reps);
		r1_32 = gpu_move(g, h, dbuf, size, 0, 1, threads, reps, NULL, MOVE_32REG);
		r1 = gpu_move(g, h, dbuf, size, 0, 1, threads, reps, &s1, MOVE_DECLARED);
		rn_d4 = file_read_depth4(g, h, dbuf, size, blocks, threads, reps);
		rn_32 = gpu_move(g, h, dbuf, size, 0, blocks, threads, reps, NULL, MOVE_32REG);
		rn = gpu_move(g, h, dbuf, size, 0, blocks, threads, reps, &sn, MOVE_DECLARED);
		/* Declaring nothing: the most threads a block of k_move_plain
		 * may have, up to --threads; same run as the rows above. */
		struct cudaFuncAttributes plain_fa;
		if (cudaFuncGetAttributes(&plain_fa, (const void *)k_move_plain) == cudaSuccess) {
			plain_threads = plain_fa.maxThreadsPerBlock < threads ? plain_fa.maxThreadsPerBlock : threads;
			plain_threads -= plain_threads % 32;
			plain_regs = plain_fa.numRegs;
		}
		if (plain_threads > 0) {
			r1_plain = gpu_move(g, h, dbuf, size, 0, 1, plain_threads, reps, NULL, MOVE_PLAIN);
			rn_plain = gpu_move(g, h, dbuf, size, 0, blocks, plain_threads, reps, NULL, MOVE_PLAIN);
		}
		/* The device copy must be the file (read last by the library's
		 * own loop). */
		cudaMemcpy(pinned, dbuf, size, cudaMemcpyDeviceToHost);
		if (memcmp(pinned, host, size) != 0) {
			fprintf(stderr, "gpusys-bench: the data read differs from the file\n");
			goto out;
		}
		if (!reads_only) {
			w1 = gpu_move(g, hw, dbuf, size, 1, 1, threads, reps, NULL, MOVE_DECLARED);
			wn = gpu_move(g, hw, dbuf, size, 1, blocks, threads, reps, NULL, MOVE_DECLARED);
		}
		k_close<<<1, 1>>>(dev, h);
		k_close<<<1, 1>>>(dev, hw);
		gpusys_synchronize(g, NULL, -1);

		/* --halves: the same reads with other slot divisions, same run. */
		double hv_gbs[MAX_HALVES][2];
		struct read_split hv_split[MAX_HALVES][2];
		uint64_t hv_got[MAX_HALVES];
		char hv_label[MAX_HALVES][64]; /* what each client asked for, and got */
		for (int i = 0; i < nhalves; i++) {
			halves_reads(runtime_dir, in_path, host, dbuf, pinned, size, blocks, threads, reps, halves[i],
				     hv_gbs[i], hv_split[i], &hv_got[i]);
			unsigned long long want = (unsigned long long)(halves[i] >> 20),
					   got = (unsigned long long)(hv_got[i] >> 20);
			if (!hv_got[i])
				snprintf(hv_label[i], sizeof(hv_label[i]), "%llu MiB halves: attach failed", want);
			else if (got != want)
				snprintf(hv_label[i], sizeof(hv_label[i]), "%llu MiB halves (asked for %llu)", got, want);
			else
				snprintf(hv_label[i], sizeof(hv_label[i]), "%llu MiB halves", got);
		}

		/* What programs do today, same size, same run. */
		memcpy(pinned, host, size);
		h2d_pin = memcpy_gbs(dbuf, pinned, size, cudaMemcpyHostToDevice, reps);
		h2d_page = memcpy_gbs(dbuf, host, size, cudaMemcpyHostToDevice, reps);
		d2h_pin = memcpy_gbs(pinned, dbuf, size, cudaMemcpyDeviceToHost, reps);
		d2h_page = memcpy_gbs(host, dbuf, size, cudaMemcpyDeviceToHost, reps);
		staged = 0;
		for (int r = 0; r < reps; r++) {
			uint64_t t0 = bench_now_ns();
			int in = open(in_path, O_RDONLY | O_CLOEXEC);
			for (uint64_t at = 0; in >= 0 && at < size;) {
				ssize_t n = pread(in, pinned + at, size - at, (off_t)at);
				if (n <= 0)
					break;
				at += (uint64_t)n;
			}
			close(in);
			cudaMemcpy(dbuf, pinned, size, cudaMemcpyHostToDevice);
			double gbs = (double)size / secs_since(t0) / 1e9;
			staged = gbs > staged ? gbs : staged;
		}
		/* Writes: the host-driven path (cudaMemcpy into pinned, then
		 * pwrite) and the host-threads floor, into the same file. */
		double staged_w = -1, floor_pw[3] = { -1, -1, -1 }, floor_map[3] = { -1, -1, -1 };
		static const int floor_threads[3] = { 1, 4, 16 };
		for (int r = 0; r < reps && !reads_only; r++) {
			uint64_t t0 = bench_now_ns();
			cudaMemcpy(pinned, dbuf, size, cudaMemcpyDeviceToHost);
			int out = open(out_path, O_WRONLY | O_CLOEXEC);
			for (uint64_t at = 0; out >= 0 && at < size;) {
				ssize_t n = pwrite(out, pinned + at, size - at, (off_t)at);
				if (n <= 0)
					break;
				at += (uint64_t)n;
			}
			if (out >= 0)
				close(out);
			double gbs = (double)size / secs_since(t0) / 1e9;
			staged_w = gbs > staged_w ? gbs : staged_w;
		}
		for (int i = 0; i < 3 && !reads_only; i++) {
			floor_pw[i] = write_floor(out_path, pinned, size, floor_threads[i], 0, reps);
			floor_map[i] = write_floor(out_path, pinned, size, floor_threads[i], 1, reps);
		}

		/* The floors of reads. pinned holds the file's bytes (the
		 * source of the copy floor, what the pipeline must deliver). */
		memcpy(pinned, host, size);
		double fl_copy[16][2];
		const int nvariants = floors ? floor_nvariants : 0;
		for (int v = 0; v < nvariants; v++) {
			fl_copy[v][0] = floor_sm_copy(dbuf, pinned, size, 1, v, reps);
			fl_copy[v][1] = floor_sm_copy(dbuf, pinned, size, blocks, v, reps);
		}
		static const int pread_threads[3] = { 1, 5, 16 };
		double fl_pread[3];
		const int npreads = floors ? 3 : 0;
		for (int i = 0; i < npreads; i++)
			fl_pread[i] = floor_host_pread(in_path, pinned, size, pread_threads[i], reps);
		/* blocks, host threads, half, copy loop: gpusysd's shape
		 * before (8 MiB halves; one block served by the worker and 4
		 * I/O threads), the 8-deep loop, 8 and 16 threads (gpusysd's
		 * default now), smaller and larger halves. */
		static const struct {
			int blocks, threads;
			uint64_t half;
			int variant;
		} pipes[] = {
			{ 1, 5, 8u << 20, 0 },	 { 1, 5, 8u << 20, 1 },	  { 1, 8, 8u << 20, 1 },
			{ 1, 16, 8u << 20, 0 },	 { 1, 16, 8u << 20, 1 },  { 1, 16, 2u << 20, 1 },
			{ 1, 16, 16u << 20, 1 }, { 0, 0, 8u << 20, 0 },	  { 0, 0, 8u << 20, 1 },
			{ 0, 0, 16u << 20, 1 },
		};
		const int npipes = floors ? (int)(sizeof(pipes) / sizeof(pipes[0])) : 0;
		double fl_pipe[16], fl_wait[16];
		for (int i = 0; i < npipes; i++) {
			int b = pipes[i].blocks ? pipes[i].blocks : blocks, t = pipes[i].threads ? pipes[i].threads : blocks;
			fl_wait[i] = 0;
			fl_pipe[i] = floor_pipeline(in_path, dbuf, pinned, size, b, t, pipes[i].half, pipes[i].variant, reps,
						    &fl_wait[i]);
		}
		if (json) {
			printf("{\"size\":%llu,\"blocks\":%d,\"threads\":%d,\"read_1_block_gbs\":%.2f,"
			       "\"read_n_blocks_gbs\":%.2f,\"write_1_block_gbs\":%.2f,\"write_n_blocks_gbs\":%.2f,"
			       "\"h2d_pinned_gbs\":%.2f,\"h2d_pageable_gbs\":%.2f,\"d2h_pinned_gbs\":%.2f,"
			       "\"d2h_pageable_gbs\":%.2f,\"pread_then_memcpy_gbs\":%.2f,\"plain_threads\":%d,"
			       "\"plain_registers\":%d,\"read_1_block_plain_gbs\":%.2f,\"read_n_blocks_plain_gbs\":%.2f}\n",
			       (unsigned long long)size, blocks, threads, r1, rn, w1, wn, h2d_pin, h2d_page, d2h_pin,
			       d2h_page, staged, plain_threads, plain_regs, r1_plain, rn_plain);
			for (int i = 0; i < nhalves; i++)
				printf("{\"half_mib\":%llu,\"half_asked_mib\":%llu,\"read_1_block_gbs\":%.2f,"
				       "\"read_n_blocks_gbs\":%.2f}\n",
				       (unsigned long long)(hv_got[i] >> 20), (unsigned long long)(halves[i] >> 20),
				       hv_gbs[i][0], hv_gbs[i][1]);
		} else {
			printf("file %s, %.0f MiB, bulk %u slots of %u MiB, best of %d\n\n", dir, size / 1048576.0,
			       dev.bulk_slots, dev.bulk_slot_bytes >> 20, reps);
			bench_gbs_header();
			bench_gbs_row(r1, "gpusys_pread_block, file -> device, 1 block x %d threads", threads);
			bench_gbs_row(rn, "gpusys_pread_block, file -> device, %d blocks x %d threads", blocks, threads);
			bench_gbs_row(r1_32, "gpusys_pread_block, 1 block, kernel capped at 32 registers");
			bench_gbs_row(rn_32, "gpusys_pread_block, %d blocks, kernel capped at 32 registers", blocks);
			bench_gbs_row(r1_plain, "gpusys_pread_block, 1 block x %d threads, kernel declaring nothing (%d registers)",
				      plain_threads, plain_regs);
			bench_gbs_row(rn_plain, "gpusys_pread_block, %d blocks x %d threads, kernel declaring nothing", blocks,
				      plain_threads);
			bench_gbs_row(r1_d4, "gpusys_pread_block, 1 block, copy loop 4 deep (before)");
			bench_gbs_row(rn_d4, "gpusys_pread_block, %d blocks, copy loop 4 deep (before)", blocks);
			for (int i = 0; i < nhalves; i++) {
				bench_gbs_row(hv_gbs[i][0], "gpusys_pread_block, 1 block, %s (--halves)", hv_label[i]);
				bench_gbs_row(hv_gbs[i][1], "gpusys_pread_block, %d blocks, %s (--halves)", blocks,
					      hv_label[i]);
			}
			bench_gbs_row(w1, "gpusys_pwrite_block, device -> file, 1 block x %d threads", threads);
			bench_gbs_row(wn, "gpusys_pwrite_block, device -> file, %d blocks x %d threads", blocks, threads);
			bench_gbs_row(staged, "pread(2) into pinned + cudaMemcpy H2D (file -> device, host-driven)");
			bench_gbs_row(staged_w, "cudaMemcpy D2H into pinned + pwrite(2) (device -> file, host-driven)");
			for (int i = 0; i < 3; i++) {
				bench_gbs_row(floor_pw[i], "write floor: %d host thread%s pwrite(2) from pinned, same file",
					      floor_threads[i], floor_threads[i] > 1 ? "s" : "");
				bench_gbs_row(floor_map[i], "write floor: %d host thread%s memcpy into a shared mapping",
					      floor_threads[i], floor_threads[i] > 1 ? "s" : "");
			}
			bench_gbs_row(h2d_pin, "cudaMemcpy H2D pinned (memory only)");
			bench_gbs_row(h2d_page, "cudaMemcpy H2D pageable (memory only)");
			bench_gbs_row(d2h_pin, "cudaMemcpy D2H pinned (memory only)");
			bench_gbs_row(d2h_page, "cudaMemcpy D2H pageable (memory only)");
			for (int v = 0; v < nvariants; v++) {
				bench_gbs_row(fl_copy[v][0], "read floor (a) GPU copy pinned -> device, 1 block: %s",
					      floor_variants[v].name);
				bench_gbs_row(fl_copy[v][1], "read floor (a) GPU copy pinned -> device, %d blocks: %s", blocks,
					      floor_variants[v].name);
			}
			for (int i = 0; i < npreads; i++)
				bench_gbs_row(fl_pread[i], "read floor (b) %d host thread%s pread(2) file -> pinned",
					      pread_threads[i], pread_threads[i] > 1 ? "s" : "");
			for (int i = 0; i < npipes; i++) {
				int b = pipes[i].blocks ? pipes[i].blocks : blocks;
				int t = pipes[i].threads ? pipes[i].threads : blocks;
				bench_gbs_row(fl_pipe[i],
					      "read floor (c) pipelined, %d block%s, %d host threads, %llu MiB halves, %s; "
					      "waits %.0f%%",
					      b, b > 1 ? "s" : "", t, (unsigned long long)(pipes[i].half >> 20),
					      floor_variants[pipes[i].variant].name, 100 * fl_wait[i]);
			}
			printf("\nreads, where a block's time goes (best rep, mean over blocks), per %u MiB half:\n",
			       dev.bulk_slot_bytes >> 21);
			printf("  1 block:  gpusysd filling %.0f us (thread 0 in the request), copying %.0f us (warps 1..), call %.1f ms\n",
			       s1.daemon_us, s1.copy_us, s1.call_ms);
			printf("  %d blocks: gpusysd filling %.0f us, copying %.0f us, call %.1f ms\n", blocks, sn.daemon_us,
			       sn.copy_us, sn.call_ms);
			for (int i = 0; i < nhalves; i++)
				printf("  %s (--halves): 1 block filling %.0f us, copying %.0f us, call %.1f ms; "
				       "%d blocks filling %.0f us, copying %.0f us, call %.1f ms\n",
				       hv_label[i], hv_split[i][0].daemon_us, hv_split[i][0].copy_us,
				       hv_split[i][0].call_ms, blocks, hv_split[i][1].daemon_us, hv_split[i][1].copy_us,
				       hv_split[i][1].call_ms);
		}
		ret = r1 < 0 || rn < 0 || (!reads_only && (w1 < 0 || wn < 0));
	}
out:
	if (g)
		gpusys_detach(g);
	bench_daemon_stop(&bd);
	unlink(in_path);
	unlink(out_path);
	free(host);
	return ret;
}
