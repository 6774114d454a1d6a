/* SPDX-License-Identifier: MIT */
/* util/parallel_io alone: transfers cut into small chunks (64 KiB) among
 * I/O threads that spin before sleeping, every size around the chunk
 * boundaries, at odd offsets, short at the end of the file, byte for byte;
 * and with no I/O threads and a chunk size below the minimum (the default
 * then). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "util/parallel_io.h"

#define FILE_BYTES (UINT64_C(3) << 20)
#define CHUNK (UINT64_C(64) << 10)

static uint8_t pattern_at(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

static int make_file(char *path, size_t cap)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(path, cap, "%s/gpusys-test-pio.XXXXXX", dir);
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	uint8_t *b = malloc(FILE_BYTES);
	assert_non_null(b);
	for (uint64_t i = 0; i < FILE_BYTES; i++)
		b[i] = pattern_at(i);
	assert_int_equal(pwrite(fd, b, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
	free(b);
	return fd;
}

/* Reads of every size near a multiple of the chunk (and odd offsets),
 * then writes of the same shapes read back with pread(2). */
static void test_chunks_and_spin(void **state)
{
	(void)state;
	char path[256];
	int fd = make_file(path, sizeof(path));
	struct parallel_io_config cfg = { .threads = 3, .chunk = CHUNK + 100, .spin_us = 50 };
	assert_int_equal(parallel_io_start(&cfg), 0);

	uint8_t *buf = malloc(FILE_BYTES + 1);
	assert_non_null(buf);
	static const uint64_t lens[] = { 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 4095,
					 17 * CHUNK - 3, UINT64_C(2) << 20, UINT64_C(2) << 20 | 1 };
	static const int64_t offs[] = { 0, 1, 4095, (int64_t)CHUNK - 1, 12345 };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (size_t k = 0; k < sizeof(offs) / sizeof(offs[0]); k++) {
			memset(buf, 0, lens[i]);
			int64_t r = parallel_io(fd, false, buf, offs[k], lens[i]);
			assert_int_equal(r, (int64_t)lens[i]);
			for (uint64_t j = 0; j < lens[i]; j++)
				if (buf[j] != pattern_at((uint64_t)offs[k] + j))
					fail_msg("read of %llu at %lld: byte %llu differs", (unsigned long long)lens[i],
						 (long long)offs[k], (unsigned long long)j);
		}
	}

	/* Short at the end of the file: the bytes that are there. */
	int64_t at = (int64_t)FILE_BYTES - (int64_t)(5 * CHUNK) - 7;
	assert_int_equal(parallel_io(fd, false, buf, at, 8 * CHUNK), (int64_t)(5 * CHUNK + 7));
	for (uint64_t j = 0; j < 5 * CHUNK + 7; j++)
		assert_int_equal(buf[j], pattern_at((uint64_t)at + j));

	/* Writes: inverted bytes over [off, off + len), read back. */
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		int64_t off = offs[i % (sizeof(offs) / sizeof(offs[0]))];
		for (uint64_t j = 0; j < lens[i]; j++)
			buf[j] = (uint8_t)~pattern_at((uint64_t)off + j);
		assert_int_equal(parallel_io(fd, true, buf, off, lens[i]), (int64_t)lens[i]);
		uint8_t *back = malloc(lens[i]);
		assert_non_null(back);
		assert_int_equal(pread(fd, back, lens[i], off), (ssize_t)lens[i]);
		assert_memory_equal(back, buf, lens[i]);
		free(back);
		/* Put the pattern back for the next shape. */
		for (uint64_t j = 0; j < lens[i]; j++)
			buf[j] = pattern_at((uint64_t)off + j);
		assert_int_equal(pwrite(fd, buf, lens[i], off), (ssize_t)lens[i]);
	}
	parallel_io_stop();
	free(buf);
	close(fd);
	unlink(path);
}

/* A chunk below 64 KiB means the default; no I/O threads: the caller
 * alone, same bytes. */
static void test_defaults_alone(void **state)
{
	(void)state;
	char path[256];
	int fd = make_file(path, sizeof(path));
	struct parallel_io_config cfg = { .threads = 0, .chunk = 1000, .spin_us = 0 };
	assert_int_equal(parallel_io_start(&cfg), 0);
	uint8_t *buf = malloc(FILE_BYTES);
	assert_non_null(buf);
	assert_int_equal(parallel_io(fd, false, buf, 3, FILE_BYTES - 3), (int64_t)(FILE_BYTES - 3));
	for (uint64_t j = 0; j < FILE_BYTES - 3; j++)
		assert_int_equal(buf[j], pattern_at(3 + j));
	parallel_io_stop();
	free(buf);
	close(fd);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chunks_and_spin),
		cmocka_unit_test(test_defaults_alone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
