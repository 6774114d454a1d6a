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
			"       gpusys-bench alloc [options]           malloc+free pairs/s from all SMs vs CUDA malloc; growth latency\n"
			"       gpusys-bench calls [--emulate] [options]    futures and user callbacks\n"
			"       gpusys-bench sys --emulate [options]   readfile, send, recv, poll per call vs the\n"
			"                                              same system calls in-process\n"
			"       gpusys-bench copy [options]            pageable host <-> device copies vs cudaMemcpy\n"
			"       gpusys-bench multigpu [--op noop|print|file|all] [options]\n"
			"                                              NOOPs (default), gpusys_printf lines, 4 KiB\n"
			"                                              gpusys_preads from every GPU, each alone and\n"
			"                                              all at once\n"
			"       gpusys-bench trace [options]           where one call's time goes, segment by segment\n"
			"       gpusys-bench packet [--iters N]        packet 0's floor by payload layout, no gpusys\n"
			"run 'gpusys-bench rtt --help' for the options\n");
}

#ifdef GPUSYS_BENCH_HAVE_GPU
#define ON_GPU(f) f
#else
#define ON_GPU(f) NULL
#endif

/* Each benchmark: emulated warps with --emulate, else from GPU kernels. */
static const struct {
	const char *name;
	int (*emulated)(int argc, char **argv); /* NULL: it needs a GPU */
	int (*gpu)(int argc, char **argv);      /* NULL: built without CUDA */
} benchmarks[] = {
	{ "rtt", bench_rtt_emulated, ON_GPU(bench_rtt_gpu) },
	{ "file", bench_file_emulated, ON_GPU(bench_file_gpu) },
	{ "print", bench_print_emulated, ON_GPU(bench_print_gpu) },
	{ "calls", bench_calls_emulated, ON_GPU(bench_calls_gpu) }, /* futures and user callbacks */
	{ "sys", bench_sys_emulated, NULL }, /* calls that make system calls: readfile, send, recv, poll */
	{ "alloc", NULL, ON_GPU(bench_alloc_gpu) },
	{ "copy", NULL, ON_GPU(bench_copy_gpu) },
	{ "multigpu", NULL, ON_GPU(bench_multi_gpu) },
	{ "trace", NULL, ON_GPU(bench_trace_gpu) },
	{ "packet", NULL, ON_GPU(bench_packet_gpu) },
};

int main(int argc, char **argv)
{
	/* Whole lines: a gpusysd started by the bench writes its log to the
	 * same pipe, and landed in the middle of a row whose start sat in a
	 * full buffer (the storm's 0..2048 B row, bench/RESULTS.md "Tenth
	 * session"). */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		usage();
		return 2;
	}
	for (size_t b = 0; b < sizeof(benchmarks) / sizeof(benchmarks[0]); b++) {
		if (strcmp(argv[1], benchmarks[b].name) != 0)
			continue;
		for (int i = 2; i < argc; i++) {
			if (strcmp(argv[i], "--emulate") != 0)
				continue;
			if (benchmarks[b].emulated)
				return benchmarks[b].emulated(argc - 1, argv + 1);
			fprintf(stderr, "gpusys-bench: %s has no --emulate form: it needs a GPU\n", argv[1]);
			return 2;
		}
		if (benchmarks[b].gpu)
			return benchmarks[b].gpu(argc - 1, argv + 1);
#ifdef GPUSYS_BENCH_HAVE_GPU
		fprintf(stderr, "gpusys-bench: %s has only an --emulate form\n", argv[1]);
#else
		fprintf(stderr, "gpusys-bench: built without CUDA (no nvcc): %s needs a GPU%s\n", argv[1],
			benchmarks[b].emulated ? "; use --emulate" : "");
#endif
		return 2;
	}
	usage();
	return 2;
}
