/* SPDX-License-Identifier: MIT */
/* gpusys-bench: benchmarks of gpusysd against its floor and its peers. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench rtt --emulate [options]   NOOP round trip, emulated warps\n"
			"       gpusys-bench rtt [options]             NOOP round trip from GPU kernels\n"
			"       gpusys-bench file --emulate [options]  file block reads/writes, emulated block\n"
			"       gpusys-bench file [options]            1 GiB file <-> device memory, vs cudaMemcpy\n"
			"       gpusys-bench print --emulate [options] printf lines/s, emulated warps\n"
			"       gpusys-bench print [options]           gpusys_printf lines/s from all SMs vs CUDA printf\n"
			"       gpusys-bench copy [options]            pageable host <-> device copies vs cudaMemcpy\n"
			"run 'gpusys-bench rtt --help' for the options\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage();
		return 2;
	}
	if (strcmp(argv[1], "rtt") == 0) {
		int emulate = 0;
		for (int i = 2; i < argc; i++)
			emulate |= strcmp(argv[i], "--emulate") == 0;
		if (emulate)
			return bench_rtt_emulated(argc - 1, argv + 1);
#ifdef GPUSYS_BENCH_HAVE_GPU
		return bench_rtt_gpu(argc - 1, argv + 1);
#else
		fprintf(stderr, "gpusys-bench: built without CUDA (no nvcc); use rtt --emulate\n");
		return 2;
#endif
	}
	if (strcmp(argv[1], "file") == 0) {
		for (int i = 2; i < argc; i++)
			if (strcmp(argv[i], "--emulate") == 0)
				return bench_file_emulated(argc - 1, argv + 1);
#ifdef GPUSYS_BENCH_HAVE_GPU
		return bench_file_gpu(argc - 1, argv + 1);
#else
		fprintf(stderr, "gpusys-bench: built without CUDA (no nvcc); use file --emulate\n");
		return 2;
#endif
	}
	if (strcmp(argv[1], "print") == 0) {
		for (int i = 2; i < argc; i++)
			if (strcmp(argv[i], "--emulate") == 0)
				return bench_print_emulated(argc - 1, argv + 1);
#ifdef GPUSYS_BENCH_HAVE_GPU
		return bench_print_gpu(argc - 1, argv + 1);
#else
		fprintf(stderr, "gpusys-bench: built without CUDA (no nvcc); use print --emulate\n");
		return 2;
#endif
	}
	if (strcmp(argv[1], "copy") == 0) {
#ifdef GPUSYS_BENCH_HAVE_GPU
		return bench_copy_gpu(argc - 1, argv + 1);
#else
		fprintf(stderr, "gpusys-bench: built without CUDA (no nvcc): copy needs a GPU\n");
		return 2;
#endif
	}
	usage();
	return 2;
}
