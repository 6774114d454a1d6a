/* SPDX-License-Identifier: MIT */
/*
 * gpusys-bench file --emulate: the block calls of the file service from an
 * emulated block (one CPU thread, include/gpusys/emulator/file.h) through the
 * real gpusysd and its bulk area, against pread(2)/pwrite(2) of the same
 * file into the same buffer in this process.
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

static void usage(void)
{
	fprintf(stderr, "usage: gpusys-bench file --emulate [--size BYTES] [--dir DIR] [--reps N]\n"
			"                         [--daemon PATH | --runtime-dir DIR]\n");
}

static double gbs_since(uint64_t t0, uint64_t bytes)
{
	return (double)bytes / ((double)(bench_now_ns() - t0) / 1e9) / 1e9;
}

static int host_io(const char *path, uint8_t *buf, uint64_t size, int write_op)
{
	int fd = open(path, write_op ? O_WRONLY | O_CLOEXEC : O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (uint64_t at = 0; at < size;) {
		ssize_t n = write_op ? pwrite(fd, buf + at, size - at, (off_t)at) : pread(fd, buf + at, size - at, (off_t)at);
		if (n <= 0) {
			close(fd);
			return -EIO;
		}
		at += (uint64_t)n;
	}
	close(fd);
	return 0;
}

int bench_file_emulated(int argc, char **argv)
{
	uint64_t size = UINT64_C(1) << 30;
	int reps = 3, opt;
	const char *dir = NULL, *daemon = NULL, *runtime_dir = NULL;
	static const struct option opts[] = {
		{ "emulate", no_argument, NULL, 'e' }, { "size", required_argument, NULL, 's' },
		{ "dir", required_argument, NULL, 'D' }, { "reps", required_argument, NULL, 'n' },
		{ "daemon", required_argument, NULL, 'd' }, { "runtime-dir", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case 'e': break;
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'D': dir = optarg; break;
		case 'n': reps = atoi(optarg); break;
		case 'd': daemon = optarg; break;
		case 'r': runtime_dir = optarg; break;
		default: usage(); return 2;
		}
	}
	if (!size || reps < 1) {
		usage();
		return 2;
	}
	struct stat st;
	if (!dir)
		dir = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/gpusys-bench-file.%d", dir, (int)getpid());
	uint8_t *buf = malloc(size), *back = malloc(size);
	if (!buf || !back)
		return 1;
	for (uint64_t i = 0; i < size; i += 4096)
		buf[i] = (uint8_t)(i >> 12);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return 1;
	close(fd);
	if (host_io(path, buf, size, 1) < 0)
		return 1;

	int ret = 1;
	struct bench_daemon bd = { .config = "channel_bulk_bytes = 256M\n" };
	if (bench_daemon_start(&bd, daemon, &runtime_dir) < 0)
		return 1;
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)) || chdir(dir) < 0)
		return 1;
	struct gpusys_options ao = { .runtime_dir = runtime_dir, .num_ports = 4, .bulk_bytes = GPUSYS_BULK_SLOT_BYTES,
				     .flags = GPUSYS_ATTACH_EMULATED | GPUSYS_ATTACH_NO_STDIO };
	gpusys_t *client = NULL;
	struct gpusys_emu *emu = NULL;
	int rc = bench_emu_attach(&ao, &client, &emu);
	if (chdir(cwd) < 0 && !rc) {
		rc = -errno;
		fprintf(stderr, "gpusys-bench: chdir: %s\n", strerror(-rc));
	}
	if (rc)
		goto out;
	const gpusys_dev_t *dev = gpusys_emu_dev(emu);
	const char *p[GPUSYS_WARP_LANES] = { path };
	int fl[GPUSYS_WARP_LANES] = { O_RDWR };
	int64_t hr[GPUSYS_WARP_LANES];
	if (gpusys_emu_file_open(dev, 1, p, fl, NULL, hr) < 0) {
		fprintf(stderr, "gpusys-bench: open: %s\n", gpusys_strerror((int)hr[0]));
		goto out;
	}
	int32_t h = (int32_t)hr[0];
	double rd = 0, wr = 0, hrd = 0, hwr = 0;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = bench_now_ns();
		if (gpusys_emu_pread_block(dev, h, back, size, 0) != (int64_t)size)
			goto out;
		double g = gbs_since(t0, size);
		rd = g > rd ? g : rd;
		t0 = bench_now_ns();
		if (gpusys_emu_pwrite_block(dev, h, buf, size, 0) != (int64_t)size)
			goto out;
		g = gbs_since(t0, size);
		wr = g > wr ? g : wr;
		t0 = bench_now_ns();
		host_io(path, back, size, 0);
		g = gbs_since(t0, size);
		hrd = g > hrd ? g : hrd;
		t0 = bench_now_ns();
		host_io(path, buf, size, 1);
		g = gbs_since(t0, size);
		hwr = g > hwr ? g : hwr;
	}
	if (memcmp(buf, back, size) != 0) {
		fprintf(stderr, "gpusys-bench: data differs\n");
		goto out;
	}
	printf("file %s, %.0f MiB, emulated block (one thread), bulk %u slot(s) of %u MiB, best of %d\n\n", dir,
	       size / 1048576.0, dev->bulk_slots, dev->bulk_slot_bytes >> 20, reps);
	bench_gbs_header();
	bench_gbs_row(rd, "gpusys_emu_pread_block (file -> bulk -> buffer)");
	bench_gbs_row(wr, "gpusys_emu_pwrite_block (buffer -> bulk -> file)");
	bench_gbs_row(hrd, "pread(2) in this process");
	bench_gbs_row(hwr, "pwrite(2) in this process");
	ret = 0;
out:
	bench_emu_detach(client, emu);
	bench_daemon_stop(&bd);
	unlink(path);
	free(buf);
	free(back);
	return ret;
}
