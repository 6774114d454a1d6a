/* SPDX-License-Identifier: MIT */
/* The libFuzzer entry point every harness here defines: built with
 * -Dfuzz=enabled it is driven by libFuzzer; otherwise replay.c runs it over
 * the seed corpus as an ordinary test. */
#ifndef GPUSYS_FUZZ_H
#define GPUSYS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
