/* SPDX-License-Identifier: MIT */
/* copy_bytes.h: the producers' copy into staging buffers. */
#include <stdint.h>
#include <string.h>

#include "copy_bytes.h"

#if defined(__x86_64__)
#include <emmintrin.h>

/* SSE2 is part of x86-64: no run-time check. 16-byte streaming stores fill
 * a write-combining buffer a line at a time, as wider ones do; what counts
 * is that a whole line is written before it leaves, so the loop moves 64
 * bytes a turn into a line-aligned destination. */
static void copy_streaming(uint8_t *d, const uint8_t *s, size_t n)
{
	size_t head = (64u - ((uintptr_t)d & 63u)) & 63u;
	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head, s += head, n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence(); /* streaming stores are weakly ordered */
}

bool copy_streaming_available(void)
{
	return true;
}
#else
static void copy_streaming(uint8_t *d, const uint8_t *s, size_t n)
{
	memcpy(d, s, n);
}

bool copy_streaming_available(void)
{
	return false;
}
#endif

void copy_into_staging(void *dst, const void *src, size_t n, bool streaming)
{
	if (streaming)
		copy_streaming(dst, src, n);
	else
		memcpy(dst, src, n);
}
