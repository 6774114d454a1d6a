/* SPDX-License-Identifier: MIT */
/* The proto tests' echo: random bytes from a reproducible generator, one
 * ECHO from an emulated warp, every byte of every active lane checked
 * (test_port.c, test_dma.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "echo_check.h"

uint64_t rng_next(uint64_t *s)
{
	/* xorshift64*: reproducible from the printed seed */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

void fill_random(uint8_t *b, size_t n, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(rng_next(s) >> 56);
}

/* One echo from one emulated warp; every byte of every active lane checked,
 * and bytes past the echoed length left untouched. */
void echo_and_check(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *len, uint64_t *rng)
{
	const void *in[GPUSYS_WARP_LANES] = { 0 };
	void *out[GPUSYS_WARP_LANES] = { 0 };
	uint32_t in_len[GPUSYS_WARP_LANES] = { 0 }, cap[GPUSYS_WARP_LANES] = { 0 }, got[GPUSYS_WARP_LANES];
	int32_t st[GPUSYS_WARP_LANES];

	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		uint8_t *b = malloc(len[l] + 1);
		uint8_t *o = malloc(len[l] + 8);
		fill_random(b, len[l], rng);
		memset(o, 0xa5, len[l] + 8);
		in[l] = b;
		out[l] = o;
		in_len[l] = len[l];
		cap[l] = len[l] + 8;
		got[l] = 0xdeadbeef;
		st[l] = 12345;
	}
	assert_int_equal(gpusys_emu_echo(dev, mask, in, in_len, out, cap, got, st), 0);
	for (uint32_t l = 0; l < GPUSYS_WARP_LANES; l++) {
		if (!(mask >> l & 1))
			continue;
		assert_int_equal(st[l], 0);
		assert_int_equal(got[l], len[l]);
		assert_memory_equal(out[l], in[l], len[l]);
		for (int k = 0; k < 8; k++)
			assert_int_equal(((uint8_t *)out[l])[len[l] + k], 0xa5);
		free((void *)in[l]);
		free(out[l]);
	}
}
