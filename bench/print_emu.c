/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench print --emulate: lines per second through gpusysd's print
 * service from emulated warps (CPU threads running the device code), into a
 * file, counted until the last line is written (flush). In the same run, the
 * host's own peer: one thread formatting the same lines with snprintf into a
 * stdio buffer on a file (what the daemon's formatting and writing cost
 * without any channel).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "gpusys/gpusys.h"
#include "gpusys/emulator.h"

#define LINE_FMT "warp %5u lane %2u line %7u value %.3f\n"

/* The print service writes where this process's stdout is at attach time:
 * point fd 1 at path for the attach only, so our report still goes to the
 * terminal. Returns the file's fd (kept open for counting) or -errno. */
int bench_print_attach_to_file(const char *path, int (*attach)(void *), void *arg)
{
	fflush(stdout);
	int file = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int saved = file < 0 ? -1 : dup(1);
	if (saved < 0 || dup2(file, 1) < 0) {
		int e = -errno;
		fprintf(stderr, "gpusys-bench: %s: %s\n", path, strerror(-e));
		if (file >= 0)
			close(file);
		if (saved >= 0)
			close(saved);
		return e;
	}
	int rc = attach(arg);
	dup2(saved, 1);
	close(saved);
	if (rc < 0) {
		close(file);
		return rc;
	}
	return file;
}

/* Newlines in fd's file. */
uint64_t bench_print_count_lines(int fd)
{
	static char buf[1 << 16];
	uint64_t n = 0;
	off_t at = 0;
	for (;;) {
		ssize_t r = pread(fd, buf, sizeof(buf), at);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			n += buf[i] == '\n';
		at += r;
	}
	return n;
}

struct emu_attach {
	struct gpusys_options opts;
	gpusys_t *client;
	struct gpusys_emu *emu;
};

static int do_attach(void *p)
{
	struct emu_attach *a = p;
	return bench_emu_attach(&a->opts, &a->client, &a->emu);
}

struct warp_arg {
	struct bench_warp w;
	const gpusys_dev_t *dev;
	unsigned lines;
};

static void *warp_main(void *p)
{
	struct warp_arg *a = p;
	struct gpusys_print_arg args[GPUSYS_WARP_LANES][4];
	struct gpusys_print_line lines[GPUSYS_WARP_LANES];
	int32_t ret[GPUSYS_WARP_LANES];

	bench_warp_begin(&a->w);
	for (unsigned n = 0; n < a->lines; n++) {
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			args[l][0] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = a->w.warp } };
			args[l][1] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = l } };
			args[l][2] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_U32, .v = { .u = n } };
			args[l][3] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_F64, .v = { .d = n * 0.001 + l } };
			lines[l] = (struct gpusys_print_line){ GPUSYS_PRINT_STDOUT, LINE_FMT, args[l], 4 };
		}
		gpusys_emu_print(a->dev, 0xffffffffu, lines, ret);
		for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
			if (ret[l] <= 0) {
				a->w.rc = ret[l] ? ret[l] : -EIO;
				return NULL;
			}
		}
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench print --emulate [--warps N] [--lines N (per lane)] [--out FILE]\n"
			"                            [--runtime-dir DIR | --daemon PATH] [--json]\n");
}

int bench_print_emulated(int argc, char **argv)
{
	unsigned warps = 4, lines = 2000;
	const char *runtime_dir = NULL, *daemon = NULL, *out = NULL;
	int json = 0, opt;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' },       { "warps", required_argument, NULL, 'w' },
		{ "lines", required_argument, NULL, 'l' },   { "out", required_argument, NULL, 'o' },
		{ "runtime-dir", required_argument, NULL, 'r' }, { "daemon", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },          { NULL, 0, NULL, 0 },
	};

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 'w': warps = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'l': lines = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'o': out = optarg; break;
		case 'r': runtime_dir = optarg; break;
		case 'd': daemon = optarg; break;
		case 'j': json = 1; break;
		default: usage(); return 2;
		}
	}
	if (!warps || warps > 1024 || !lines) {
		usage();
		return 2;
	}
	char out_buf[PATH_MAX], peer_path[PATH_MAX + 8];
	if (!out) {
		snprintf(out_buf, sizeof(out_buf), "/tmp/gpusys-bench-print.%d.out", (int)getpid());
		out = out_buf;
	}
	snprintf(peer_path, sizeof(peer_path), "%s.peer", out);
	uint64_t total = (uint64_t)warps * GPUSYS_WARP_LANES * lines;

	/* The peer: the same lines formatted and written by one host thread. */
	FILE *pf = fopen(peer_path, "w");
	if (!pf) {
		fprintf(stderr, "gpusys-bench: %s: %s\n", peer_path, strerror(errno));
		return 1;
	}
	uint64_t p0 = bench_now_ns();
	for (unsigned w = 0; w < warps; w++)
		for (unsigned n = 0; n < lines; n++)
			for (unsigned l = 0; l < GPUSYS_WARP_LANES; l++)
				fprintf(pf, LINE_FMT, w, l, n, n * 0.001 + l);
	fclose(pf);
	double peer_s = (double)(bench_now_ns() - p0) / 1e9;
	unlink(peer_path);

	struct bench_daemon bd = { 0 };
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	struct emu_attach at = { .opts = { .runtime_dir = runtime_dir, .num_ports = warps,
						.flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_BULK |
							  GPUSYS_ATTACH_NO_CWD } };
	int file = bench_print_attach_to_file(out, do_attach, &at);
	if (file < 0) {
		bench_daemon_stop(&bd);
		return 1;
	}
	struct gpusys_emu *emu = at.emu;

	struct warp_arg *args = calloc(warps, sizeof(*args));
	for (unsigned w = 0; w < warps; w++)
		args[w] = (struct warp_arg){ .dev = gpusys_emu_dev(emu), .lines = lines };
	uint64_t t0, t1;
	if (bench_run_warps(warps, warp_main, args, sizeof(*args), &t0, &t1))
		return 1;
	int frc = gpusys_emu_print_flush(gpusys_emu_dev(emu));
	uint64_t t2 = bench_now_ns();
	if (frc) {
		fprintf(stderr, "gpusys-bench: flush: %s\n", gpusys_strerror(frc));
		return 1;
	}
	uint64_t in_file = bench_print_count_lines(file);
	struct stat st;
	fstat(file, &st);
	double calls_s = (double)(t1 - t0) / 1e9, all_s = (double)(t2 - t0) / 1e9;

	if (json) {
		printf("{\"mode\":\"emulate\",\"warps\":%u,\"lines\":%llu,\"lines_in_file\":%llu,\"bytes\":%lld,"
		       "\"seconds\":%.6f,\"lines_per_s\":%.0f,\"peer_lines_per_s\":%.0f}\n",
		       warps, (unsigned long long)total, (unsigned long long)in_file, (long long)st.st_size, all_s,
		       total / all_s, total / peer_s);
	} else {
		printf("gpusys-bench print --emulate: %u warp(s) x 32 lanes x %u lines = %llu lines (%lld bytes) "
		       "into %s\n",
		       warps, lines, (unsigned long long)total, (long long)st.st_size, out);
		printf("%-48s %12s %12s %14s\n", "", "lines", "seconds", "lines/s");
		printf("%-48s %12llu %12.3f %14.0f\n", "gpusysd print, emulated warps (until written)",
		       (unsigned long long)in_file, all_s, total / all_s);
		printf("%-48s %12s %12.3f %14.0f\n", "  of which the calls returned after", "", calls_s,
		       total / calls_s);
		printf("%-48s %12llu %12.3f %14.0f\n", "peer: one host thread, fprintf to a file",
		       (unsigned long long)total, peer_s, total / peer_s);
	}
	int bad = in_file != total;
	if (bad)
		fprintf(stderr, "gpusys-bench: %llu lines in the file, %llu printed\n", (unsigned long long)in_file,
			(unsigned long long)total);
	free(args);
	close(file);
	if (out == out_buf)
		unlink(out);
	bench_emu_detach(at.client, emu);
	bench_daemon_stop(&bd);
	return bad;
}
