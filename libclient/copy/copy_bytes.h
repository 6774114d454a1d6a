/* SPDX-License-Identifier: MIT */
/*
 * How a producer copies the caller's bytes into a pinned staging buffer
 * that the DMA engine reads next (copy_engine.c, ST_COPY_IN): memcpy, or
 * with streaming stores where GPUSYS_COPY_STREAMING=1 asks for them (no
 * consistent gain measured on an H200: bench/RESULTS.md, "Twelfth
 * session"; kept to measure on other hosts).
 */
#ifndef GPUSYS_COPY_BYTES_H
#define GPUSYS_COPY_BYTES_H

#include <stdbool.h>
#include <stddef.h>

/* Copy n bytes into a staging buffer. With streaming stores (x86-64, and
 * not turned off) the buffer's lines go to memory without being read
 * first and without filling the cache: the CPU reads each byte once and
 * writes it once, where a cached copy also reads every line of the
 * destination before writing it. Ends with the stores ordered (sfence):
 * the buffer may be handed to the DMA engine at once. */
void copy_into_staging(void *dst, const void *src, size_t n, bool streaming);

/* Whether this platform has streaming stores (x86-64); without them
 * copy_into_staging is memcpy either way. */
bool copy_streaming_available(void);

#endif /* GPUSYS_COPY_BYTES_H */
