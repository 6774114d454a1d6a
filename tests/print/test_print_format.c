/* SPDX-License-Identifier: MIT */
/*
 * The packer (device/print_pack.h, host reading) and the daemon's formatter
 * (daemon/services/print/print_format.c) together, with no channel: every conformance case
 * must give snprintf's bytes; refused formats and malformed or hostile
 * records must be refused without output.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cases.h"
#include "services/print/print_format.h"
#include "../../device/print_pack.h"

/* The emulator's per-thread port hint, which port_client.h refers to. */
__thread uint32_t gpusys_emu_port_hint;
int gpusys_emu_heads_late;
__thread struct gpusys_emu_late_heads gpusys_emu_late;

static uint8_t *pack(uint32_t stream, const char *fmt, const struct gpusys_print_arg *args, uint32_t nargs,
		     size_t *len)
{
	int64_t n = gpusys_print_pack(NULL, 0, stream, fmt, args, nargs);
	assert_true(n >= 2); /* the head and a one-byte format length */
	size_t size = n > 0 ? (size_t)n : 1;
	uint8_t *b = malloc(size);
	assert_non_null(b);
	assert_int_equal(gpusys_print_pack(b, (uint32_t)n, stream, fmt, args, nargs), n);
	*len = (size_t)n;
	return b;
}

static void show(const char *what, const char *s, size_t n)
{
	fprintf(stderr, "  %s (%zu): \"", what, n);
	for (size_t i = 0; i < n && i < 200; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fprintf(stderr, "%s\"\n", n > 200 ? "..." : "");
}

static void test_conformance(void **state)
{
	(void)state;
	struct case_set set;
	struct print_buf out = { 0 };
	size_t bad = 0, bytes = 0;

	cases_build(&set);
	assert_true(set.n >= 200);
	for (size_t i = 0; i < set.n; i++) {
		const struct print_case *c = &set.c[i];
		size_t len;
		int stream = 0;
		uint32_t st = i % 2 ? GPUSYS_PRINT_STDERR : GPUSYS_PRINT_STDOUT;
		uint8_t *rec = pack(st, c->fmt, c->args, c->nargs, &len);
		out.len = 0;
		int r = print_format_record(rec, len, &out, &stream);
		free(rec);
		if (r != (int)c->expected_len || out.len != c->expected_len ||
		    memcmp(out.data, c->expected, c->expected_len) != 0 || stream != (int)st) {
			if (bad++ < 10) {
				fprintf(stderr, "case %zu: format \"%s\": returned %d\n", i, c->fmt, r);
				show("expected", c->expected, c->expected_len);
				show("got", out.data ? out.data : "", out.len);
			}
		}
		bytes += c->expected_len;
	}
	fprintf(stderr, "%zu cases, %zu bytes, %zu mismatches\n", set.n, bytes, bad);
	print_buf_free(&out);
	cases_free(&set);
	assert_int_equal(bad, 0);
}

/* Plain %f and %lf go through the formatter's own exact conversion
 * (print_format.c fast_f), not snprintf: compare it with snprintf over
 * values where rounding is hard. k / 2^j for small k and j are exact
 * ties at the sixth decimal (1/128 = 0.0078125 prints 0.007812: ties to
 * even), random bit patterns cover every exponent (the large and the
 * non-finite ones go to snprintf), random decimals and their neighbours
 * sit next to rounding boundaries. */
static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t fixed_mismatches(double v, struct print_buf *out)
{
	/* Plain, and each precision the fast path takes (0 to 9, "%.f" is 0),
	 * and one past it (snprintf's). */
	static const char *const fmts[] = { "%f", "%lf", "%.0f", "%.f", "%.1f", "%.2f", "%.3lf",
					    "%.4f", "%.5f", "%.7f", "%.8f", "%.9f", "%.10f" };
	size_t bad = 0;
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		struct gpusys_print_arg a = { .tag = GPUSYS_PRINT_F64, .v.d = v };
		size_t len;
		int stream;
		char want[400];
		uint8_t *rec = pack(GPUSYS_PRINT_STDOUT, fmts[i], &a, 1, &len);
		out->len = 0;
		int r = print_format_record(rec, len, out, &stream);
		free(rec);
		/* The formats are the literals above: glibc is the reference. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		int n = snprintf(want, sizeof(want), fmts[i], v);
#pragma GCC diagnostic pop
		if (r != n || out->len != (size_t)n || memcmp(out->data, want, (size_t)n) != 0) {
			if (bad++ < 5) {
				fprintf(stderr, "%s of %a:\n", fmts[i], v);
				show("expected", want, (size_t)n);
				show("got", out->data ? out->data : "", out->len);
			}
		}
	}
	return bad;
}

static void test_fixed_exact(void **state)
{
	(void)state;
	struct print_buf out = { 0 };
	size_t bad = 0, n = 0;
	uint64_t s = 88172645463325252ull;
	static const double edges[] = { 0.0, -0.0, 1.0 / 128, -1.0 / 128, 3.0 / 128, 0.0000005, 0.0000015,
					4.9406564584124654e-324, 2.2250738585072014e-308, 9223372036854.775807,
					9223372036854.0, 9.3e12, 1e15, 1e300, -1e300 };
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++, n++)
		bad += fixed_mismatches(edges[i], &out);
	for (int j = 0; j < 24; j++)
		for (int k = -300; k <= 300; k++, n++)
			bad += fixed_mismatches(ldexp((double)k, -j), &out);
	for (int i = 0; i < 40000; i++, n += 4) {
		uint64_t b = xorshift(&s);
		double v;
		memcpy(&v, &b, sizeof(v));
		bad += fixed_mismatches(v, &out);
		int ex = (int)(xorshift(&s) % 110) - 70;
		bad += fixed_mismatches(ldexp((double)(xorshift(&s) >> 11), ex - 53), &out);
		double z = (double)(int64_t)(xorshift(&s) % 2000000001u) / 1e6 - 1000.0;
		bad += fixed_mismatches(nextafter(z, 1e300), &out);
		bad += fixed_mismatches(nextafter(z, -1e300), &out);
	}
	fprintf(stderr, "%zu values, %zu mismatches\n", n, bad);
	print_buf_free(&out);
	assert_int_equal(bad, 0);
}

static void test_refused(void **state)
{
	(void)state;
	struct print_buf out = { 0 };

	for (size_t i = 0; i < refused_cases_n; i++) {
		const struct refused_case *c = &refused_cases[i];
		size_t len;
		int stream = 0;
		uint8_t *rec = pack(GPUSYS_PRINT_STDOUT, c->fmt, c->args, c->nargs, &len);
		assert_int_equal(print_buf_reserve(&out, 8), 0);
		memcpy(out.data, "keep", 4);
		out.len = 4;
		int r = print_format_record(rec, len, &out, &stream);
		if (r != -EINVAL)
			fprintf(stderr, "refused case \"%s\": returned %d\n", c->fmt, r);
		assert_int_equal(r, -EINVAL);
		assert_int_equal(out.len, 4); /* nothing of the line kept */
		free(rec);
	}
	print_buf_free(&out);
}

/* Every strict prefix of a record that needs all its bytes is refused. */
static void test_truncated_records(void **state)
{
	(void)state;
	struct gpusys_print_arg a[4] = {
		{ .tag = GPUSYS_PRINT_I32, .v = { .i = -5 } },
		{ .tag = GPUSYS_PRINT_STR, .v = { .s = "string" } },
		{ .tag = GPUSYS_PRINT_F64, .v = { .d = 1.5 } },
		{ .tag = GPUSYS_PRINT_I64, .v = { .i = 1 } },
	};
	struct print_buf out = { 0 };
	size_t len;
	int stream;
	uint8_t *rec = pack(GPUSYS_PRINT_STDOUT, "%d %s %f %lld\n", a, 4, &len);

	assert_int_equal(print_format_record(rec, len, &out, &stream), (int)strlen("-5 string 1.500000 1\n"));
	for (size_t n = 0; n < len; n++) {
		out.len = 0;
		assert_int_equal(print_format_record(rec, n, &out, &stream), -EINVAL);
		assert_int_equal(out.len, 0);
	}
	/* Header fields: a stream that is none, a stray bit in the head, a
	 * format length past the record. */
	const uint8_t head = rec[0], flen = rec[1];
	assert_int_equal(head, GPUSYS_PRINT_STDOUT);
	assert_int_equal(flen, strlen("%d %s %f %lld\n"));
	const uint8_t bad_heads[] = { 0, 3, GPUSYS_PRINT_STDOUT | 0x04, GPUSYS_PRINT_STDERR | 0x40,
				      GPUSYS_PRINT_LONG_FMT };
	for (size_t i = 0; i < sizeof(bad_heads); i++) {
		rec[0] = bad_heads[i];
		assert_int_equal(print_format_record(rec, len, &out, &stream), -EINVAL);
	}
	rec[0] = head;
	rec[1] = 0xff;
	assert_int_equal(print_format_record(rec, len, &out, &stream), -EINVAL);
	rec[1] = flen;
	rec[0] = GPUSYS_PRINT_STDERR;
	assert_int_equal(print_format_record(rec, len, &out, &stream), (int)strlen("-5 string 1.500000 1\n"));
	assert_int_equal(stream, GPUSYS_PRINT_STDERR);
	free(rec);

	/* A format over 255 bytes: its length in two bytes. The same length
	 * in two bytes below 256 is another encoding of a short one: refused. */
	char longf[301];
	memset(longf, 'y', 299);
	longf[299] = '\n';
	longf[300] = 0;
	rec = pack(GPUSYS_PRINT_STDOUT, longf, NULL, 0, &len);
	assert_int_equal(len, 3 + 300);
	assert_int_equal(rec[0], GPUSYS_PRINT_STDOUT | GPUSYS_PRINT_LONG_FMT);
	out.len = 0;
	assert_int_equal(print_format_record(rec, len, &out, &stream), 300);
	assert_memory_equal(out.data, longf, 300);
	free(rec);
	static const uint8_t long_short[] = { GPUSYS_PRINT_STDOUT | GPUSYS_PRINT_LONG_FMT, 2, 0, 'o', 'k' };
	static const uint8_t short_ok[] = { GPUSYS_PRINT_STDOUT, 2, 'o', 'k' };
	assert_int_equal(print_format_record(long_short, sizeof(long_short), &out, &stream), -EINVAL);
	assert_int_equal(print_format_record(short_ok, sizeof(short_ok), &out, &stream), 2);

	/* A string length beyond the record, an unknown tag, a NUL in the
	 * format, a string longer than the bound. */
	static const uint8_t bad_str[] = { 1, 2, '%', 's', GPUSYS_PRINT_STR, 10, 0, 'a', 'b' };
	static const uint8_t bad_tag[] = { 1, 2, '%', 'd', 99, 0, 0, 0, 0 };
	static const uint8_t nul_fmt[] = { 1, 3, 'a', 0, 'b' };
	assert_int_equal(print_format_record(bad_str, sizeof(bad_str), &out, &stream), -EINVAL);
	assert_int_equal(print_format_record(bad_tag, sizeof(bad_tag), &out, &stream), -EINVAL);
	assert_int_equal(print_format_record(nul_fmt, sizeof(nul_fmt), &out, &stream), -EINVAL);
	uint8_t *big = calloc(1, 7 + GPUSYS_PRINT_MAX_STR + 1);
	memcpy(big, (const uint8_t[]){ 1, 2, '%', 's', GPUSYS_PRINT_STR,
				       (GPUSYS_PRINT_MAX_STR + 1) & 0xff, (GPUSYS_PRINT_MAX_STR + 1) >> 8 },
	       7);
	memset(big + 7, 'x', GPUSYS_PRINT_MAX_STR + 1);
	assert_int_equal(print_format_record(big, 7 + GPUSYS_PRINT_MAX_STR + 1, &out, &stream), -EINVAL);
	free(big);
	print_buf_free(&out);
}

/* Random bytes, and random mutations of valid records: never a crash or an
 * overrun (the sanitizer build watches), output only on success. */
static void test_fuzz(void **state)
{
	(void)state;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	struct print_buf out = { 0 };
	struct case_set set;
	uint8_t buf[512];

	cases_build(&set);
	for (int iter = 0; iter < 200000; iter++) {
		s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
		uint64_t r = s * 0x2545F4914F6CDD1DULL;
		size_t len;
		uint8_t *rec;
		const struct print_case *c = &set.c[r % set.n];
		if (c->expected_len > 300)
			continue;
		rec = pack(GPUSYS_PRINT_STDOUT, c->fmt, c->args, c->nargs, &len);
		if (len > sizeof(buf)) {
			free(rec);
			continue;
		}
		memcpy(buf, rec, len);
		free(rec);
		for (int m = 0; m < 1 + (int)(r >> 60); m++) {
			s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
			uint64_t q = s * 0x2545F4914F6CDD1DULL;
			buf[q % len] = (uint8_t)(q >> 40);
		}
		out.len = 0;
		int stream;
		int rr = print_format_record(buf, len - (r >> 58 & 1), &out, &stream);
		if (rr < 0)
			assert_int_equal(out.len, 0);
		else
			assert_int_equal(out.len, (size_t)rr);
	}
	cases_free(&set);
	print_buf_free(&out);
}

static void test_limits(void **state)
{
	(void)state;
	struct print_buf out = { 0 };
	struct gpusys_print_arg a[2];
	size_t len;
	int stream;

	/* A %s longer than the bound prints its first GPUSYS_PRINT_MAX_STR
	 * bytes (documented in print.h). */
	char *s = malloc(10000);
	memset(s, 'q', 9999);
	s[9999] = 0;
	a[0] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_STR, .v = { .s = s } };
	uint8_t *rec = pack(GPUSYS_PRINT_STDOUT, "%s", a, 1, &len);
	assert_int_equal(print_format_record(rec, len, &out, &stream), GPUSYS_PRINT_MAX_STR);
	free(rec);
	free(s);

	/* The line bound. */
	out.len = 0;
	a[0] = (struct gpusys_print_arg){ .tag = GPUSYS_PRINT_I32, .v = { .i = 1 } };
	a[1] = a[0];
	rec = pack(GPUSYS_PRINT_STDOUT, "%60000d%60000d", a, 2, &len);
	assert_int_equal(print_format_record(rec, len, &out, &stream), -EMSGSIZE);
	assert_int_equal(out.len, 0);
	free(rec);
	rec = pack(GPUSYS_PRINT_STDOUT, "%65536d", a, 1, &len);
	assert_int_equal(print_format_record(rec, len, &out, &stream), 65536);
	free(rec);

	/* Packer refusals. */
	char *f = malloc(GPUSYS_PRINT_MAX_FMT + 2);
	memset(f, 'f', GPUSYS_PRINT_MAX_FMT + 1);
	f[GPUSYS_PRINT_MAX_FMT + 1] = 0;
	assert_int_equal(gpusys_print_pack(NULL, 0, GPUSYS_PRINT_STDOUT, f, NULL, 0), -E2BIG);
	f[GPUSYS_PRINT_MAX_FMT] = 0;
	assert_true(gpusys_print_pack(NULL, 0, GPUSYS_PRINT_STDOUT, f, NULL, 0) > 0);
	free(f);
	assert_int_equal(gpusys_print_pack(NULL, 0, 0, "x", NULL, 0), -EINVAL);
	assert_int_equal(gpusys_print_pack(NULL, 0, 3, "x", NULL, 0), -EINVAL);
	assert_int_equal(gpusys_print_pack(NULL, 0, 1, "x", a, GPUSYS_PRINT_MAX_ARGS + 1), -EINVAL);
	a[0].tag = 42;
	assert_int_equal(gpusys_print_pack(NULL, 0, 1, "%d", a, 1), -EINVAL);
	print_buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conformance),
		cmocka_unit_test(test_fixed_exact),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_truncated_records),
		cmocka_unit_test(test_fuzz),
		cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
