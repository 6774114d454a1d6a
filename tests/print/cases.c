/* SPDX-License-Identifier: MIT */
/*
 * The conformance cases: every conversion crossed with flags, widths,
 * precisions and length modifiers, '*' widths and precisions, and edge values
 * (INT_MIN, LLONG_MAX, 0, -0.0, inf, nan, denormals, huge and tiny doubles,
 * NULL pointers and strings, empty and long strings). The expected text of
 * each comes from the host's snprintf called with the native C types.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cases.h"

#pragma GCC diagnostic ignored "-Wformat-nonliteral"
#pragma GCC diagnostic ignored "-Wformat-security"

static void oom(void)
{
	fprintf(stderr, "out of memory\n");
	abort();
}

static struct print_case *add(struct case_set *s, const char *fmt)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->c = realloc(s->c, s->cap * sizeof(*s->c));
		if (!s->c)
			oom();
	}
	struct print_case *c = &s->c[s->n++];
	memset(c, 0, sizeof(*c));
	c->fmt = strdup(fmt);
	if (!c->fmt)
		oom();
	return c;
}

/* The expected text: the host's snprintf on exactly these C arguments. */
static void expect(struct print_case *c, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		fprintf(stderr, "host snprintf failed on \"%s\"\n", fmt);
		abort();
	}
	c->expected = malloc((size_t)n + 1);
	if (!c->expected)
		oom();
	vsnprintf(c->expected, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	c->expected_len = (size_t)n;
}

static void arg(struct print_case *c, uint32_t tag, uint64_t bits)
{
	struct gpusys_print_arg *a = &c->args[c->nargs++];
	a->tag = tag;
	a->v.u = bits;
}

static void arg_i32(struct print_case *c, int v)
{
	arg(c, GPUSYS_PRINT_I32, (uint64_t)(int64_t)v);
}
static void arg_u32(struct print_case *c, unsigned v)
{
	arg(c, GPUSYS_PRINT_U32, v);
}
static void arg_i64(struct print_case *c, long long v)
{
	arg(c, GPUSYS_PRINT_I64, (uint64_t)v);
}
static void arg_u64(struct print_case *c, unsigned long long v)
{
	arg(c, GPUSYS_PRINT_U64, v);
}
static void arg_f64(struct print_case *c, double v)
{
	struct gpusys_print_arg *a = &c->args[c->nargs++];
	a->tag = GPUSYS_PRINT_F64;
	a->v.d = v;
}
static void arg_ptr(struct print_case *c, const void *p)
{
	struct gpusys_print_arg *a = &c->args[c->nargs++];
	a->tag = GPUSYS_PRINT_PTR;
	a->v.p = p;
}
static void arg_str(struct print_case *c, const char *s)
{
	struct gpusys_print_arg *a = &c->args[c->nargs++];
	a->tag = GPUSYS_PRINT_STR;
	a->v.s = s;
}

static const char *const flag_sets[] = { "", "-", "+", " ", "#", "0", "-+", "+0", " 0", "#0", "-#", "+ ", "'", "-0", "0-" };
static const char *const widths[] = { "", "1", "6", "24" };
static const char *const precs[] = { "", ".", ".0", ".1", ".5", ".17" };
#define N(a) (sizeof(a) / sizeof((a)[0]))

static const int int_values[] = { 0, 1, -1, 42, -42, 7, 1000000, INT_MIN, INT_MAX, -12345, 255, 65536 };
static const double dbl_values[] = {
	0.0,     -0.0,    1.0,     -1.5,      3.14159265358979, 0.1,     2.5,     1e-5,
	1e16,    1e21,    1e300,   -1e-300,   DBL_MAX,          DBL_MIN, 5e-324 /* smallest denormal */,
	2.225073858507201e-308 /* largest denormal */, INFINITY, -INFINITY, NAN, -NAN,
	123456789.0, 0.000123456, 999999.5, 1.0 / 3.0, -2.0 / 3.0,
};

static char long_str[301];
static char longer_str[GPUSYS_PRINT_MAX_STR + 1]; /* exactly the bound */

static void build_integers(struct case_set *s)
{
	static const char convs[] = "diuxXo";
	char fmt[64];
	unsigned k = 0;

	/* Every conversion x flags x width x precision, values cycling. */
	for (const char *cv = convs; *cv; cv++)
		for (size_t f = 0; f < N(flag_sets); f++)
			for (size_t w = 0; w < N(widths); w++)
				for (size_t p = 0; p < N(precs); p++) {
					int v = int_values[k++ % N(int_values)];
					snprintf(fmt, sizeof(fmt), "%%%s%s%s%c", flag_sets[f], widths[w], precs[p], *cv);
					struct print_case *c = add(s, fmt);
					if (*cv == 'd' || *cv == 'i') {
						arg_i32(c, v);
						expect(c, fmt, v);
					} else {
						arg_u32(c, (unsigned)v);
						expect(c, fmt, (unsigned)v);
					}
				}

	/* Length modifiers with their boundary values. */
	static const char *const lflags[] = { "", "-#20", "+030", ".25", "#x" };
	static const int hh_vals[] = { 0, 127, 128, 255, 256, -1, -128, -129, 300, INT_MAX };
	static const int h_vals[] = { 32767, 32768, 65535, 65536, -32768, -32769, 100000, -1 };
	static const long long ll_vals[] = { LLONG_MIN, LLONG_MAX, 0, -1, 1234567890123LL, INT_MIN - 1LL };
	static const unsigned long long ull_vals[] = { ULLONG_MAX, 1ULL << 63, 0, 4294967296ULL };
	for (size_t f = 0; f < N(lflags); f++) {
		const char *fl = strcmp(lflags[f], "#x") ? lflags[f] : "#";
		for (const char *cv = convs; *cv; cv++) {
			int sgn = *cv == 'd' || *cv == 'i';
			for (size_t i = 0; i < N(hh_vals); i++) {
				snprintf(fmt, sizeof(fmt), "%%%shh%c", fl, *cv);
				struct print_case *c = add(s, fmt);
				arg_i32(c, hh_vals[i]);
				expect(c, fmt, hh_vals[i]);
			}
			for (size_t i = 0; i < N(h_vals); i++) {
				snprintf(fmt, sizeof(fmt), "%%%sh%c", fl, *cv);
				struct print_case *c = add(s, fmt);
				arg_i32(c, h_vals[i]);
				expect(c, fmt, h_vals[i]);
			}
			for (size_t i = 0; i < N(ll_vals); i++) {
				static const char *const lens[] = { "l", "ll", "q", "L", "j", "z", "t" };
				for (size_t m = 0; m < N(lens); m++) {
					snprintf(fmt, sizeof(fmt), "%%%s%s%c", fl, lens[m], *cv);
					struct print_case *c = add(s, fmt);
					long long v = ll_vals[i];
					if (sgn)
						arg_i64(c, v);
					else
						arg_u64(c, (unsigned long long)v);
					switch (lens[m][0]) {
					case 'l':
						if (lens[m][1])
							expect(c, fmt, v);
						else
							expect(c, fmt, (long)v);
						break;
					case 'q':
					case 'L':
						expect(c, fmt, v);
						break;
					case 'j':
						expect(c, fmt, (intmax_t)v);
						break;
					case 'z':
						expect(c, fmt, (ssize_t)v);
						break;
					default:
						expect(c, fmt, (ptrdiff_t)v);
						break;
					}
				}
			}
			if (!sgn)
				for (size_t i = 0; i < N(ull_vals); i++) {
					snprintf(fmt, sizeof(fmt), "%%%sll%c", fl, *cv);
					struct print_case *c = add(s, fmt);
					arg_u64(c, ull_vals[i]);
					expect(c, fmt, ull_vals[i]);
				}
		}
	}

	/* Types converted to the length modifier's, as C converts them. */
	static const int ints[] = { -1, INT_MIN, 5 };
	for (size_t i = 0; i < N(ints); i++) {
		struct print_case *c = add(s, "%ld|%lld|%lu|%llx|%hd|%jd");
		for (int k2 = 0; k2 < 6; k2++)
			arg_i32(c, ints[i]);
		expect(c, c->fmt, (long)ints[i], (long long)ints[i], (unsigned long)(long)ints[i],
		       (unsigned long long)(long long)ints[i], ints[i], (intmax_t)ints[i]);
	}
	struct print_case *c = add(s, "%d %x %u");
	arg_i64(c, 0x123456789abcLL);
	arg_u64(c, 0xfedcba9876543210ULL);
	arg_u32(c, 4000000000u);
	expect(c, c->fmt, (int)0x123456789abcLL, (unsigned)0xfedcba9876543210ULL, 4000000000u);
}

static void build_floats(struct case_set *s)
{
	static const char convs[] = "fFeEgGaA";
	char fmt[64];
	unsigned k = 0;

	for (const char *cv = convs; *cv; cv++)
		for (size_t f = 0; f < N(flag_sets); f++)
			for (size_t w = 0; w < N(widths); w++)
				for (size_t p = 0; p < N(precs); p++) {
					double v = dbl_values[k++ % N(dbl_values)];
					snprintf(fmt, sizeof(fmt), "%%%s%s%s%c", flag_sets[f], widths[w], precs[p], *cv);
					struct print_case *c = add(s, fmt);
					arg_f64(c, v);
					expect(c, fmt, v);
				}

	/* Every special value through a set of formats, l and L included. */
	static const char *const ffmts[] = { "%f",   "%e",     "%g",      "%a",   "%.3f", "%10.2e", "%-+12.4g",
					     "%#a",  "%.0f",   "%.20g",   "%#.0e", "%#g",  "%lf",    "%Lf",
					     "%Le",  "%La",    "%-30.15Lg", "%08.3f", "% .9e", "%+.13a", "%.0a" };
	for (size_t i = 0; i < N(dbl_values); i++)
		for (size_t j = 0; j < N(ffmts); j++) {
			struct print_case *c = add(s, ffmts[j]);
			arg_f64(c, dbl_values[i]);
			if (strchr(ffmts[j], 'L'))
				expect(c, ffmts[j], (long double)dbl_values[i]);
			else
				expect(c, ffmts[j], dbl_values[i]);
		}
}

static void build_strings_chars_pointers(struct case_set *s)
{
	static const char *strs[] = { "", "a", "hello", "hello, world", long_str, "tab\there", "utf8 h\xc3\xa9llo",
				      NULL, longer_str };
	static const char *const sflags[] = { "", "-" };
	static const char *const swidths[] = { "", "1", "8", "30" };
	static const char *const sprecs[] = { "", ".0", ".2", ".8", ".100" };
	char fmt[64];

	for (size_t i = 0; i < N(strs); i++)
		for (size_t f = 0; f < N(sflags); f++)
			for (size_t w = 0; w < N(swidths); w++)
				for (size_t p = 0; p < N(sprecs); p++) {
					snprintf(fmt, sizeof(fmt), "%%%s%s%ss", sflags[f], swidths[w], sprecs[p]);
					struct print_case *c = add(s, fmt);
					arg_str(c, strs[i]);
					expect(c, fmt, strs[i]);
				}

	static const int chars[] = { 'A', 'z', '0', ' ', '~', 0, 255, 'A' + 256, '\n' };
	static const char *const cfmts[] = { "%c", "%-3c", "%3c", "[%c]" };
	for (size_t i = 0; i < N(chars); i++)
		for (size_t j = 0; j < N(cfmts); j++) {
			struct print_case *c = add(s, cfmts[j]);
			arg_i32(c, chars[i]);
			expect(c, cfmts[j], chars[i]);
		}

	static const uintptr_t ptrs[] = { 0, 1, 0x7fff1234abcdu, UINTPTR_MAX, 0xdeadbeefu };
	static const char *const pfmts[] = { "%p", "%20p", "%-20p", "%+p", "% p", "%.3p", "<%p>" };
	for (size_t i = 0; i < N(ptrs); i++)
		for (size_t j = 0; j < N(pfmts); j++) {
			struct print_case *c = add(s, pfmts[j]);
			arg_ptr(c, (const void *)ptrs[i]);
			expect(c, pfmts[j], (void *)ptrs[i]);
		}
	/* A char * printed with %p is its address, never read. */
	struct print_case *c = add(s, "%p");
	arg_str(c, (const char *)(uintptr_t)0x1000);
	expect(c, "%p", (void *)(uintptr_t)0x1000);
}

static void build_stars(struct case_set *s)
{
	static const int ws[] = { -10, -1, 0, 1, 10 };
	static const int ps[] = { -1, 0, 3, 10 };
	static const int vs[] = { 0, 42, -42 };
	struct print_case *c;

	for (size_t i = 0; i < N(ws); i++)
		for (size_t j = 0; j < N(vs); j++) {
			c = add(s, "%*d");
			arg_i32(c, ws[i]);
			arg_i32(c, vs[j]);
			expect(c, "%*d", ws[i], vs[j]);
		}
	for (size_t i = 0; i < N(ps); i++)
		for (size_t j = 0; j < N(vs); j++) {
			c = add(s, "%.*d");
			arg_i32(c, ps[i]);
			arg_i32(c, vs[j]);
			expect(c, "%.*d", ps[i], vs[j]);
		}
	static const double fv[] = { 3.14159, -0.0, 1e10 };
	static const int wp[][2] = { { -12, 3 }, { 12, 3 }, { 0, 0 }, { 8, -1 } };
	for (size_t i = 0; i < N(wp); i++)
		for (size_t j = 0; j < N(fv); j++) {
			c = add(s, "%*.*f");
			arg_i32(c, wp[i][0]);
			arg_i32(c, wp[i][1]);
			arg_f64(c, fv[j]);
			expect(c, "%*.*f", wp[i][0], wp[i][1], fv[j]);
			c = add(s, "%+*.*e");
			arg_i32(c, wp[i][0]);
			arg_i32(c, wp[i][1]);
			arg_f64(c, fv[j]);
			expect(c, "%+*.*e", wp[i][0], wp[i][1], fv[j]);
		}
	static const char *const sv[] = { "hello", "x", "" };
	for (size_t i = 0; i < N(ps); i++)
		for (size_t j = 0; j < N(sv); j++) {
			c = add(s, "%.*s|");
			arg_i32(c, ps[i]);
			arg_str(c, sv[j]);
			expect(c, "%.*s|", ps[i], sv[j]);
			c = add(s, "%*s|");
			arg_i32(c, ws[i]);
			arg_str(c, sv[j]);
			expect(c, "%*s|", ws[i], sv[j]);
		}
	c = add(s, "%-*c|%#*.*llx|%0*u");
	arg_i32(c, 4);
	arg_i32(c, 'q');
	arg_i32(c, 20);
	arg_i32(c, 12);
	arg_u64(c, 0xabcdefULL);
	arg_i32(c, 9);
	arg_u32(c, 77);
	expect(c, c->fmt, 4, 'q', 20, 12, 0xabcdefULL, 9, 77u);
	/* A string with a precision need not be NUL-terminated within it. */
	static const char unterminated[4] = { 'a', 'b', 'c', 'd' };
	c = add(s, "%.4s");
	arg_str(c, unterminated);
	expect(c, "%.4s", unterminated);
	c = add(s, "%.*s");
	arg_i32(c, 3);
	arg_str(c, unterminated);
	expect(c, "%.*s", 3, unterminated);
}

static void build_literals_and_mixed(struct case_set *s)
{
	static char long_lit[400];
	struct print_case *c;

	memset(long_lit, 'L', sizeof(long_lit) - 2);
	long_lit[sizeof(long_lit) - 2] = '\n';
	static const char *const lits[] = { "", "plain\n", "100%% sure\n", "%%%%", "tab\there\n", "%% %%d\n" };
	for (size_t i = 0; i < N(lits); i++) {
		c = add(s, lits[i]);
		expect(c, lits[i]);
	}
	c = add(s, long_lit);
	expect(c, long_lit);

	c = add(s, "x=%d y=%5.2f s=%s p=%p c=%c%%\n");
	arg_i32(c, -7);
	arg_f64(c, 2.71828);
	arg_str(c, "str");
	arg_ptr(c, (void *)(uintptr_t)0xabc0);
	arg_i32(c, 'Z');
	expect(c, c->fmt, -7, 2.71828, "str", (void *)(uintptr_t)0xabc0, 'Z');

	c = add(s, "block %4u of %u: sum=%.6e min=%lld max=%#llx [%-8s]\n");
	arg_u32(c, 17);
	arg_u32(c, 132);
	arg_f64(c, 6.02214076e23);
	arg_i64(c, LLONG_MIN);
	arg_u64(c, ULLONG_MAX);
	arg_str(c, "ok");
	expect(c, c->fmt, 17u, 132u, 6.02214076e23, LLONG_MIN, ULLONG_MAX, "ok");

	c = add(s, "%s%s%s%s%s\n");
	for (int i = 0; i < 5; i++)
		arg_str(c, long_str);
	expect(c, c->fmt, long_str, long_str, long_str, long_str, long_str);

	/* Extra arguments are ignored, as printf ignores them. */
	c = add(s, "only %d\n");
	arg_i32(c, 1);
	arg_f64(c, 2.0);
	arg_str(c, "three");
	expect(c, "only %d\n", 1);

	/* Long lines: stream over several packets. */
	c = add(s, "%4096d|\n");
	arg_i32(c, 1);
	expect(c, c->fmt, 1);
	c = add(s, "%.1000f\n");
	arg_f64(c, 1.0 / 3.0);
	expect(c, c->fmt, 1.0 / 3.0);
	c = add(s, "%f\n");
	arg_f64(c, DBL_MAX);
	expect(c, c->fmt, DBL_MAX);
}

void cases_build(struct case_set *set)
{
	memset(set, 0, sizeof(*set));
	for (size_t i = 0; i < sizeof(long_str) - 1; i++)
		long_str[i] = (char)('a' + i % 26);
	for (size_t i = 0; i < sizeof(longer_str) - 1; i++)
		longer_str[i] = (char)('A' + i % 23);
	build_integers(set);
	build_floats(set);
	build_strings_chars_pointers(set);
	build_stars(set);
	build_literals_and_mixed(set);
}

void cases_free(struct case_set *set)
{
	for (size_t i = 0; i < set->n; i++) {
		free(set->c[i].fmt);
		free(set->c[i].expected);
	}
	free(set->c);
	memset(set, 0, sizeof(*set));
}

#define I(x_) { .tag = GPUSYS_PRINT_I32, .v = { .i = (x_) } }
#define D(x_) { .tag = GPUSYS_PRINT_F64, .v = { .d = (x_) } }
#define S(x_) { .tag = GPUSYS_PRINT_STR, .v = { .s = (x_) } }
#define P(x_) { .tag = GPUSYS_PRINT_PTR, .v = { .p = (x_) } }

const struct refused_case refused_cases[] = {
	{ "%n", { P(0) }, 1 },
	{ "%hn", { P(0) }, 1 },
	{ "abc%lln", { P(0) }, 1 },
	{ "%m", { I(0) }, 1 },
	{ "%lc", { I('a') }, 1 },
	{ "%ls", { S("a") }, 1 },
	{ "%C", { I('a') }, 1 },
	{ "%S", { S("a") }, 1 },
	{ "%1$d", { I(1) }, 1 },
	{ "%*1$d", { I(1), I(2) }, 2 },
	{ "%d", { D(1.0) }, 1 },
	{ "%x", { S("a") }, 1 },
	{ "%f", { I(1) }, 1 },
	{ "%s", { I(1) }, 1 },
	{ "%s", { P(0) }, 1 },
	{ "%p", { I(1) }, 1 },
	{ "%c", { D(1.0) }, 1 },
	{ "%d", { I(0) }, 0 },
	{ "%d %d", { I(0) }, 1 },
	{ "%*d", { I(5) }, 1 },
	{ "%*d", { D(5), I(1) }, 2 },
	{ "%", { I(0) }, 0 },
	{ "abc%", { I(0) }, 0 },
	{ "%5", { I(0) }, 1 },
	{ "%5%", { I(0) }, 0 },
	{ "%llf", { D(1.0) }, 1 },
	{ "%hf", { D(1.0) }, 1 },
	{ "%hhs", { S("a") }, 1 },
	{ "%lp", { P(0) }, 1 },
	{ "%k", { I(0) }, 1 },
	{ "%70000d", { I(0) }, 1 },
	{ "%.70000d", { I(0) }, 1 },
	{ "%*d", { I(70000), I(1) }, 2 },
	{ "%*d", { I(INT_MIN), I(1) }, 2 },
	{ "%Id", { I(0) }, 1 },
};
const size_t refused_cases_n = sizeof(refused_cases) / sizeof(refused_cases[0]);

char *cases_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	for (;;) {
		if (n == cap)
			b = realloc(b, cap *= 2);
		size_t r = fread(b + n, 1, cap - n, f);
		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	*len = n;
	return b;
}

size_t cases_file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

size_t cases_mismatch(const char *got, size_t len, const char *want, size_t want_len)
{
	if (len == want_len && memcmp(got, want, len) == 0)
		return SIZE_MAX;
	size_t k = 0;
	while (k < len && k < want_len && got[k] == want[k])
		k++;
	return k;
}
