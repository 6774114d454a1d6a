/* SPDX-License-Identifier: MIT */
/*
 * bench/print_format_time.c: what gpusysd's formatter (daemon/services/
 * print/print_format.c) costs for one lane's record of the print bench's
 * line, "block %d thread %d line %d value %f\n", with no channel, poller or
 * writer: the part of a printed line's daemon time that is formatting
 * (issue 30). Prints ns per line, median of 5 runs of 2 M records. FORMAT:
 * another line of three int conversions and one double's (e.g. "%.3f").
 *   build/bench/print-format-time [FORMAT]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpusys/print.h"
#include "services/print/print_format.h"

#define LINE "block %d thread %d line %d value %f\n"
#define RECORDS 2000000

static size_t record(uint8_t *r, const char *fmt, int block, int thread, int line, double value)
{
	const uint16_t fl = (uint16_t)strlen(fmt);
	const int iv[3] = { block, thread, line };
	size_t at = 0;
	r[at++] = GPUSYS_PRINT_STDOUT | (fl > 255 ? GPUSYS_PRINT_LONG_FMT : 0);
	memcpy(r + at, &fl, fl > 255 ? 2 : 1);
	at += fl > 255 ? 2 : 1;
	memcpy(r + at, fmt, fl);
	at += fl;
	for (int i = 0; i < 3; i++) {
		r[at++] = GPUSYS_PRINT_I32;
		memcpy(r + at, &iv[i], 4);
		at += 4;
	}
	r[at++] = GPUSYS_PRINT_F64;
	memcpy(r + at, &value, 8);
	return at + 8;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *fmt = argc > 1 ? argv[1] : LINE;
	if (strlen(fmt) > 160) {
		fprintf(stderr, "print-format-time: FORMAT: at most 160 bytes\n");
		return 2;
	}
	uint8_t r[256];
	struct print_buf out = { 0 };
	double ns[5];
	int stream;
	for (int run = 0; run < 5; run++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int i = 0; i < RECORDS; i++) {
			size_t n = record(r, fmt, i % 264, i % 256, i % 8, (i % 8) * 0.5 + (i % 256));
			out.len = 0;
			if (print_format_record(r, n, &out, &stream) < 0) {
				fprintf(stderr, "print-format-time: record %d refused\n", i);
				return 1;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[run] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / RECORDS;
	}
	qsort(ns, 5, sizeof(ns[0]), by_value);
	printf("print-format-time: %.1f ns a line (median of 5 x %d; last: %.*s)\n", ns[2], RECORDS, (int)out.len - 1,
	       out.data);
	print_buf_free(&out);
	return 0;
}
