/* SPDX-License-Identifier: MIT */
/*
 * Printf conformance cases, shared by the unit test (pack + format), the
 * emulated integration test (through the real gpusysd) and the GPU test.
 * Each case is a format, its arguments as tagged values, and the text the
 * host's own snprintf gives for them, computed with a direct call on the
 * native C types (never through gpusysd's code), byte for byte.
 */
#ifndef GPUSYS_TEST_PRINT_CASES_H
#define GPUSYS_TEST_PRINT_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "gpusys/print.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CASE_MAX_ARGS 8

struct print_case {
	char *fmt;
	struct gpusys_print_arg args[CASE_MAX_ARGS];
	uint32_t nargs;
	char *expected; /* may hold NUL bytes (%c of 0) */
	size_t expected_len;
};

struct case_set {
	struct print_case *c;
	size_t n, cap;
};

/* Build every conformance case (thousands). Strings in args point to
 * storage owned by the set. */
void cases_build(struct case_set *set);
void cases_free(struct case_set *set);

/* A case whose record the daemon must refuse (-EINVAL). */
struct refused_case {
	const char *fmt;
	struct gpusys_print_arg args[2];
	uint32_t nargs;
};
extern const struct refused_case refused_cases[];
extern const size_t refused_cases_n;

/* What the integration tests read back: the whole file at path, malloc'd
 * (*len bytes), or NULL (errno) when it cannot be opened; and its size, 0
 * when it cannot be stat'ed. */
char *cases_read_file(const char *path, size_t *len);
size_t cases_file_size(const char *path);
/* Where got (len bytes) and want (want_len) first differ, SIZE_MAX when
 * they are the same. */
size_t cases_mismatch(const char *got, size_t len, const char *want, size_t want_len);

#ifdef __cplusplus
}
#endif

#endif
