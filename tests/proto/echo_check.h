/* SPDX-License-Identifier: MIT */
/* The proto tests' echo (echo_check.c). */
#ifndef GPUSYS_TESTS_ECHO_CHECK_H
#define GPUSYS_TESTS_ECHO_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gpusys/emulator.h"

/* xorshift64*: reproducible from the seed. */
uint64_t rng_next(uint64_t *s);
void fill_random(uint8_t *b, size_t n, uint64_t *s);
/* One echo from one emulated warp (mask, lane lengths len): every byte of
 * every active lane checked, and bytes past the echoed length untouched. */
void echo_and_check(const gpusys_dev_t *dev, uint64_t mask, const uint32_t *len, uint64_t *rng);

#endif /* GPUSYS_TESTS_ECHO_CHECK_H */
