/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench copy: host <-> device copies of pageable memory through
 * libgpusys (include/gpusys/copy.h: by size, staged, pinned in place)
 * against, in the same run, cudaMemcpy from pageable memory (the floor to
 * beat) and from pinned memory (the link), over sizes 4 KiB .. --max.
 * Best of --reps per cell; every gpusys copy by size is checked against the
 * source. --csv writes the curve for bench/plot_copy.py; --sweep also times
 * producers x chunk at 256 MiB.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

extern "C" {
#include "bench.h"
}
#include "gpusys/copy.h"

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench copy [--max BYTES] [--reps N] [--csv FILE] [--sweep | --interleaved]\n"
			"  pageable host <-> device, 4 KiB .. --max (default 1 GiB) by 4x, best of --reps (3; 20\n"
			"  below 1 MiB): cudaMemcpy pageable and pinned, gpusys by size, staged, in place.\n"
			"  --interleaved: only cudaMemcpy pageable against gpusys by size, alternating rep by rep\n"
			"  (41 reps below 1 MiB, 15 below 64 MiB, 7 above), medians and bests compared.\n");
}

static double secs(uint64_t t0)
{
	return (double)(bench_now_ns() - t0) / 1e9;
}

enum col { C_PAGEABLE, C_PINNED, C_AUTO, C_STAGED, C_IN_PLACE, NCOL };
static const char *col_name[NCOL] = { "cudaMemcpy pageable", "cudaMemcpy pinned", "gpusys (by size)", "staged",
				      "in place" };

/* GB/s, best of reps; < 0 on error. */
static double time_one(gpusys_copy_t *c, int col, int htod, uint8_t *dev, uint8_t *host, uint8_t *pinned, size_t n,
		       int reps)
{
	double best = 0;
	if (col >= C_AUTO)
		gpusys_copy_set_path(c, col == C_AUTO ? GPUSYS_COPY_AUTO
				     : col == C_STAGED ? GPUSYS_COPY_STAGED
						       : GPUSYS_COPY_IN_PLACE);
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = bench_now_ns();
		int rc = 0;
		switch (col) {
		case C_PAGEABLE:
		case C_PINNED: {
			uint8_t *h = col == C_PINNED ? pinned : host;
			cudaError_t e = htod ? cudaMemcpy(dev, h, n, cudaMemcpyHostToDevice)
					     : cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost);
			rc = e == cudaSuccess ? 0 : -EIO;
			break;
		}
		default:
			rc = htod ? gpusys_memcpy_htod(c, dev, host, n) : gpusys_memcpy_dtoh(c, host, dev, n);
		}
		double t = secs(t0);
		if (rc < 0) {
			fprintf(stderr, "gpusys-bench copy: %s %s %zu B: error %d\n", col_name[col], htod ? "H2D" : "D2H", n,
				rc);
			return -1;
		}
		double g = (double)n / t / 1e9;
		best = g > best ? g : best;
	}
	gpusys_copy_set_path(c, GPUSYS_COPY_AUTO);
	return best;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* --interleaved: "no size slower than cudaMemcpy", measured fairly: at each
 * size the two calls alternate rep by rep (cudaMemcpy from pageable memory,
 * then gpusys by size), so both see the same machine moment; medians and
 * bests compared. Returns the worst median ratio. */
static double interleaved(gpusys_copy_t *c, uint8_t *dev, uint8_t *host, size_t max)
{
	double worst = 1e9, worst_n = 0;
	int worst_dir = 1;
	for (int htod = 1; htod >= 0; htod--) {
		printf("%s, interleaved rep by rep, GB/s\n", htod ? "host to device" : "device to host");
		printf("%10s %5s %17s %17s %14s %12s\n", "bytes", "reps", "cudaMemcpy best/med", "gpusys best/med",
		       "x (medians)", "x (bests)");
		for (size_t n = 4096; n <= max; n *= 4) {
			int reps = n < (1u << 20) ? 41 : n < (64u << 20) ? 15 : 7;
			double tc[41], tg[41];
			for (int r = 0; r < reps; r++) {
				for (int k = 0; k < 2; k++) {
					uint64_t t0 = bench_now_ns();
					int rc;
					if (k == 0)
						rc = (htod ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)
							   : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost)) == cudaSuccess ? 0 : -EIO;
					else
						rc = htod ? gpusys_memcpy_htod(c, dev, host, n) : gpusys_memcpy_dtoh(c, host, dev, n);
					double g = rc < 0 ? 0 : (double)n / secs(t0) / 1e9;
					(k == 0 ? tc : tg)[r] = g;
				}
			}
			qsort(tc, (size_t)reps, sizeof(double), cmp_double);
			qsort(tg, (size_t)reps, sizeof(double), cmp_double);
			double mc = tc[reps / 2], mg = tg[reps / 2], bc = tc[reps - 1], bg = tg[reps - 1];
			printf("%10zu %5d %8.2f / %6.2f %8.2f / %6.2f %13.2fx %11.2fx\n", n, reps, bc, mc, bg, mg, mg / mc,
			       bg / bc);
			if (mg / mc < worst) {
				worst = mg / mc;
				worst_n = (double)n;
				worst_dir = htod;
			}
		}
		printf("\n");
	}
	printf("slowest against cudaMemcpy pageable, medians of interleaved reps: %.2fx at %.0f bytes %s\n", worst,
	       worst_n, worst_dir ? "host to device" : "device to host");
	return worst;
}

/* The gpusys copy by size, checked byte for byte against cudaMemcpy. */
static int verify(gpusys_copy_t *c, int htod, uint8_t *dev, uint8_t *host, uint8_t *check, size_t n)
{
	for (size_t i = 0; i < n; i += 4093)
		host[i] = (uint8_t)(i * 7 + n + (size_t)htod);
	if (htod) {
		if (gpusys_memcpy_htod(c, dev, host, n) || cudaMemcpy(check, dev, n, cudaMemcpyDeviceToHost))
			return -1;
		return memcmp(check, host, n) ? -1 : 0;
	}
	if (cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice))
		return -1;
	memset(check, 0, n);
	if (gpusys_memcpy_dtoh(c, check, dev, n))
		return -1;
	return memcmp(check, host, n) ? -1 : 0;
}

/* What the engine did with its producers while copying (copy_adapt.h). */
static void print_producers(gpusys_copy_t *c)
{
	struct gpusys_copy_info in;
	gpusys_copy_get_info(c, &in);
	printf("producers: %u at open, %u at the end (max %u; %llu added, %llu taken back); last engine copy %.1f GB/s\n",
	       in.producers, in.producers_now, in.producers_max, (unsigned long long)in.producers_added,
	       (unsigned long long)in.producers_removed, in.last_copy_gbps);
}

static void sweep(uint8_t *dev, uint8_t *host)
{
	size_t n = (size_t)256 << 20;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned prods[] = { 4, 8, 12, (unsigned)(ncpu > 2 ? ncpu - 1 : 1) };
	size_t chunks[] = { 1u << 20, 2u << 20, 4u << 20, 8u << 20 };
	printf("\nstaged engine, 256 MiB, best of 3 (GB/s): producers x chunk\n");
	printf("%9s %6s %8s %8s\n", "producers", "chunk", "H2D", "D2H");
	for (unsigned p = 0; p < 4; p++)
		for (unsigned k = 0; k < 4; k++) {
			struct gpusys_copy_options o = {};
			o.producers = prods[p];
			o.chunk_bytes = chunks[k];
			o.path = GPUSYS_COPY_STAGED;
			o.flags = GPUSYS_COPY_NO_CALIBRATION;
			gpusys_copy_t *c;
			if (gpusys_copy_open(&o, &c) != 0)
				continue;
			double h = time_one(c, C_STAGED, 1, dev, host, NULL, n, 3);
			double d = time_one(c, C_STAGED, 0, dev, host, NULL, n, 3);
			printf("%9u %4zuMi %8.1f %8.1f\n", prods[p], chunks[k] >> 20, h, d);
			gpusys_copy_close(c);
		}
}

extern "C" int bench_copy_gpu(int argc, char **argv)
{
	size_t max = (size_t)1 << 30;
	int reps = 3, do_sweep = 0, do_interleaved = 0, opt;
	const char *csv = NULL;
	static const struct option opts[] = {
		{ "max", required_argument, NULL, 'm' }, { "reps", required_argument, NULL, 'n' },
		{ "csv", required_argument, NULL, 'c' }, { "sweep", no_argument, NULL, 's' },
		{ "interleaved", no_argument, NULL, 'I' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'm': max = strtoull(optarg, NULL, 0); break;
		case 'n': reps = atoi(optarg); break;
		case 'c': csv = optarg; break;
		case 's': do_sweep = 1; break;
		case 'I': do_interleaved = 1; break;
		default: usage(); return 2;
		}
	}
	if (max < 4096 || reps < 1) {
		usage();
		return 2;
	}
	if (cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) {
		fprintf(stderr, "gpusys-bench copy: no usable GPU\n");
		return 1;
	}
	uint8_t *dev, *pinned;
	uint8_t *host = (uint8_t *)malloc(max), *check = (uint8_t *)malloc(max);
	if (!host || !check || cudaMalloc(&dev, max) != cudaSuccess || cudaMallocHost(&pinned, max) != cudaSuccess) {
		fprintf(stderr, "gpusys-bench copy: cannot allocate 2 x %zu bytes of host memory and the device buffer\n",
			max);
		return 1;
	}
	memset(host, 1, max); /* pageable, but faulted in: what a program's buffers look like */
	memset(check, 2, max);
	memset(pinned, 3, max);

	uint64_t t0 = bench_now_ns();
	gpusys_copy_t *c;
	int rc = gpusys_copy_open(NULL, &c);
	if (rc) {
		fprintf(stderr, "gpusys-bench copy: gpusys_copy_open: %d\n", rc);
		return 1;
	}
	double open_ms = secs(t0) * 1e3;
	struct gpusys_copy_info in;
	gpusys_copy_get_info(c, &in);
	static const char *pn[] = { "by size", "driver", "staged", "in place" };
	printf("gpusys_copy_open: %.0f ms (measuring %.0f ms): %u producers (up to %u while copying), %u pinned buffers of %zu KiB;\n"
	       "  engine from %zu B host->device, %zu B device->host (else cudaMemcpy); large copies %s / %s\n"
	       "  measured: host copy %.1f GB/s one thread, %.1f with the producers; link (pinned DMA) %.1f GB/s\n\n",
	       open_ms, in.calibration_ms, in.producers, in.producers_max, in.buffers, in.chunk_bytes >> 10, in.min_engine_bytes[0],
	       in.min_engine_bytes[1], pn[in.large_path[0]], pn[in.large_path[1]], in.host_copy_gbps_1,
	       in.host_copy_gbps_n, in.link_gbps);

	if (do_interleaved) {
		interleaved(c, dev, host, max);
		print_producers(c);
		gpusys_copy_close(c);
		cudaFree(dev);
		cudaFreeHost(pinned);
		free(host);
		free(check);
		return 0;
	}
	FILE *out = csv ? fopen(csv, "w") : NULL;
	if (out)
		fprintf(out, "dir,bytes,pageable,pinned,gpusys,staged,in_place\n");
	int bad = 0;
	double worst_ratio = 1e9, worst_size = 0;
	for (int htod = 1; htod >= 0; htod--) {
		printf("%s, GB/s (best of %d; %d below 1 MiB)\n", htod ? "host to device" : "device to host", reps, 20);
		printf("%10s %9s %9s %9s %9s %9s %8s\n", "bytes", "pageable", "pinned", "gpusys", "staged", "in-place",
		       "x cudaMemcpy");
		double big_min = 1e9;
		for (size_t n = 4096; n <= max; n *= 4) {
			int r = n < (1u << 20) ? 20 : reps;
			double g[NCOL];
			for (int k = 0; k < NCOL; k++)
				g[k] = time_one(c, k, htod, dev, host, pinned, n, r);
			if (verify(c, htod, dev, host, check, n)) {
				fprintf(stderr, "gpusys-bench copy: %s %zu B: bytes differ\n", htod ? "H2D" : "D2H", n);
				bad = 1;
			}
			double ratio = g[C_AUTO] / g[C_PAGEABLE];
			if (ratio < worst_ratio) {
				worst_ratio = ratio;
				worst_size = (double)n;
			}
			if (n >= (256u << 20) && g[C_AUTO] < big_min)
				big_min = g[C_AUTO];
			printf("%10zu %9.2f %9.2f %9.2f %9.2f %9.2f %7.2fx\n", n, g[0], g[1], g[2], g[3], g[4], ratio);
			if (out)
				fprintf(out, "%s,%zu,%.3f,%.3f,%.3f,%.3f,%.3f\n", htod ? "h2d" : "d2h", n, g[0], g[1], g[2],
					g[3], g[4]);
		}
		if (big_min < 1e9)
			printf("  >= 256 MiB: gpusys %.1f GB/s at least: target 35: %s\n", big_min,
			       big_min >= 35 ? "met" : "MISSED");
		printf("\n");
	}
	printf("slowest against cudaMemcpy pageable: %.2fx at %.0f bytes (%s)\n", worst_ratio, worst_size,
	       worst_ratio >= 0.95 ? "no size slower, within 5% timing noise" : "SLOWER");
	gpusys_copy_get_info(c, &in);
	printf("chunks pinned in place %llu, pin fallbacks %llu\n", (unsigned long long)in.chunks_in_place,
	       (unsigned long long)in.pin_fallbacks);
	print_producers(c);
	gpusys_copy_close(c);
	if (out)
		fclose(out);
	if (do_sweep)
		sweep(dev, host);
	cudaFree(dev);
	cudaFreeHost(pinned);
	free(host);
	free(check);
	return bad;
}
