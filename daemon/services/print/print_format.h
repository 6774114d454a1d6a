/* SPDX-License-Identifier: MIT */
/*
 * Unpack one lane's print record (include/gpusys/print.h) and format it with
 * the C library's snprintf, conversion by conversion, so that the text is
 * what glibc's printf gives for the same format and values.
 *
 * The record comes from a client's shared memory and is treated as hostile:
 * every length is bounded, every conversion is parsed here and checked
 * against its argument's tag, and only a conversion this parser rebuilt is
 * ever handed to snprintf (never the client's bytes as a format).
 */
#ifndef GPUSYSD_PRINT_FORMAT_H
#define GPUSYSD_PRINT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* A growable output buffer. */
struct print_buf {
	char *data;
	size_t len, cap;
};

void print_buf_free(struct print_buf *b);

/* Make room for n more bytes. 0 or -ENOMEM. */
int print_buf_reserve(struct print_buf *b, size_t n);

/*
 * Format rec (len bytes) and append the text to out. On success returns the
 * number of bytes appended (>= 0) and sets *stream to GPUSYS_PRINT_STDOUT or
 * GPUSYS_PRINT_STDERR. On failure returns -EINVAL (malformed record, refused
 * conversion, argument of the wrong type, missing argument), -EMSGSIZE (the
 * text would exceed GPUSYS_PRINT_MAX_LINE) or -ENOMEM, and out->len is as it
 * was: nothing of the line is kept.
 */
int print_format_record(const uint8_t *rec, size_t len, struct print_buf *out, int *stream);

#endif
