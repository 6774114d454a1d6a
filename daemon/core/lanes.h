/* SPDX-License-Identifier: MIT */
/*
 * Whole-warp arrays of 32-bit entries (one per lane: lengths, capacities,
 * statuses), zeroed and copied with eight explicit 16-byte moves.
 *
 * NOTE: memset() and memcpy() of these 128 bytes compile to "rep stos" and
 * "rep movs" (gcc 12, x86-64), whose start-up cost is tens of cycles: four
 * of them were ~40% of a NOOP's serving on the poller (perf,
 * gpusys-bench-serve). The vector stores are plain C with gcc's and clang's
 * vector extension, on every target.
 */
#ifndef GPUSYSD_CORE_LANES_H
#define GPUSYSD_CORE_LANES_H

#include <stdint.h>

#include "gpusys/abi.h"

typedef uint32_t lanes_u32x4 __attribute__((vector_size(16), may_alias, aligned(4)));
_Static_assert(GPUSYS_WARP_LANES * sizeof(uint32_t) == 8 * sizeof(lanes_u32x4), "32 lanes of 4 bytes");

/* a[0..31] = 0 */
static inline void lanes_zero(void *a)
{
	lanes_u32x4 *v = a;
	const lanes_u32x4 z = { 0, 0, 0, 0 };
	v[0] = z; v[1] = z; v[2] = z; v[3] = z;
	v[4] = z; v[5] = z; v[6] = z; v[7] = z;
}

/* dst[0..31] = src[0..31]; the two must not overlap. */
static inline void lanes_copy(void *dst, const void *src)
{
	lanes_u32x4 *d = dst;
	const lanes_u32x4 *s = src;
	lanes_u32x4 a = s[0], b = s[1], c = s[2], e = s[3];
	lanes_u32x4 f = s[4], g = s[5], h = s[6], i = s[7];
	d[0] = a; d[1] = b; d[2] = c; d[3] = e;
	d[4] = f; d[5] = g; d[6] = h; d[7] = i;
}

#endif /* GPUSYSD_CORE_LANES_H */
