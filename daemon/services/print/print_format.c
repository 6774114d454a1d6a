/* SPDX-License-Identifier: MIT */
/*
 * Formatting a print record: the format string is parsed here, conversion by
 * conversion (C11 7.21.6.1 plus glibc's q length and ' flag), each argument's
 * tag is checked against its conversion, and each conversion is printed by
 * snprintf with exactly its own spec text ("%-#12.5llx") and the value cast
 * to the type its length modifier names, so the bytes are glibc's. Literal
 * text between conversions is copied as is.
 *
 * Refused (-EINVAL): %n (writes memory), %m (the daemon's errno means nothing
 * to the client), %lc/%ls/%C/%S (wide characters), positional arguments
 * (%1$d), glibc's I flag, ll/q/hh/h/j/z/t on floating conversions (glibc
 * would read a long double for ll), any length on %c %s %p, a width or
 * precision above GPUSYS_PRINT_MAX_WIDTH, an argument of the wrong kind
 * (integer tags for d i u o x X c and for '*'; F64 for f F e E g G a A;
 * STR/STR_NULL for s; PTR for p), a missing argument, a NUL in the format.
 *
 * Integer arguments are converted as by C's conversion to the type of the
 * length modifier: an int printed with %lx is sign-extended to long first,
 * a long long printed with %hhd keeps its low byte. %Lf and friends: the
 * value travels as a double (GPUs have no long double) and is printed as the
 * long double of that value.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "gpusys/print.h"
#include "services/print/print_format.h"

void print_buf_free(struct print_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

int print_buf_reserve(struct print_buf *b, size_t n)
{
	if (b->cap - b->len >= n)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < n)
		cap *= 2;
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

/* --------------------------------------------------------------- record */

struct reader {
	const uint8_t *p;
	size_t left;
};

struct value {
	uint8_t tag;
	uint64_t u;        /* integers (I32 sign-extended, U32 zero-extended), PTR */
	double d;          /* F64 */
	const uint8_t *s;  /* STR bytes (not NUL-terminated) */
	uint32_t slen;
};

static uint64_t get_le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Next argument: 1, 0 at the end of the record, -EINVAL if malformed. */
static int next_value(struct reader *r, struct value *v)
{
	if (r->left == 0)
		return 0;
	memset(v, 0, sizeof(*v));
	v->tag = r->p[0];
	r->p++;
	r->left--;
	unsigned n;
	switch (v->tag) {
	case GPUSYS_PRINT_I32:
	case GPUSYS_PRINT_U32:
		n = 4;
		break;
	case GPUSYS_PRINT_I64:
	case GPUSYS_PRINT_U64:
	case GPUSYS_PRINT_F64:
	case GPUSYS_PRINT_PTR:
		n = 8;
		break;
	case GPUSYS_PRINT_STR:
		if (r->left < 2)
			return -EINVAL;
		v->slen = (uint32_t)get_le(r->p, 2);
		r->p += 2;
		r->left -= 2;
		if (v->slen > GPUSYS_PRINT_MAX_STR || v->slen > r->left)
			return -EINVAL;
		v->s = r->p;
		r->p += v->slen;
		r->left -= v->slen;
		return 1;
	case GPUSYS_PRINT_STR_NULL:
		return 1;
	default:
		return -EINVAL;
	}
	if (r->left < n)
		return -EINVAL;
	v->u = get_le(r->p, n);
	if (v->tag == GPUSYS_PRINT_I32)
		v->u = (uint64_t)(int64_t)(int32_t)(uint32_t)v->u;
	else if (v->tag == GPUSYS_PRINT_F64)
		memcpy(&v->d, &v->u, sizeof(v->d));
	r->p += n;
	r->left -= n;
	return 1;
}

static bool is_int_tag(uint8_t tag)
{
	return tag >= GPUSYS_PRINT_I32 && tag <= GPUSYS_PRINT_U64;
}

/* ----------------------------------------------------------- conversion */

enum length { LEN_NONE, LEN_HH, LEN_H, LEN_L, LEN_LL, LEN_J, LEN_Z, LEN_T, LEN_BIG_L };

#define SPEC_MAX 128 /* bytes of one conversion's text, flags and all */

struct spec {
	char text[SPEC_MAX + 1]; /* NUL-terminated, e.g. "%-*.3lld" */
	unsigned nstar;
	enum length len;
	char conv;
	bool plain; /* no flags, width or precision: "%d", "%llx", "%s"... */
	int prec_only; /* only a precision of digits ("%.3f"): it, else -1 */
	/* The padded forms fast_padded takes: flags from "-0" alone, a width
	 * and a precision of digits if any ("%5d", "%-8x", "%08.3f"). */
	bool simple;
	bool left, zero; /* the '-' and '0' flags */
	int width, prec; /* -1: none */
};

/* A printf flag character: a switch, not strchr (a call for every
 * character of every spec was 6% of gpusysd's time printing). */
static bool is_flag(char c)
{
	switch (c) {
	case '-':
	case '+':
	case ' ':
	case '#':
	case '0':
	case '\'':
		return true;
	default:
		return false;
	}
}

/* Parse the conversion at fmt[*i] == '%' (not "%%"). On success *i is past
 * it. -EINVAL for anything this service refuses. */
static int parse_spec(const char *fmt, size_t flen, size_t *i, struct spec *sp)
{
	size_t start = *i, k = start + 1;
	unsigned long n;

	sp->nstar = 0;
	sp->len = LEN_NONE;
	sp->simple = true;
	sp->left = sp->zero = false;
	sp->width = sp->prec = -1;
	while (k < flen && is_flag(fmt[k])) {
		sp->left |= fmt[k] == '-';
		sp->zero |= fmt[k] == '0';
		sp->simple &= fmt[k] == '-' || fmt[k] == '0';
		k++;
	}
	size_t after_pct = start + 1;
	if (k < flen && fmt[k] == '*') {
		sp->nstar++;
		sp->simple = false;
		k++;
	} else {
		size_t w0 = k;
		for (n = 0; k < flen && fmt[k] >= '0' && fmt[k] <= '9'; k++) {
			n = n * 10 + (unsigned long)(fmt[k] - '0');
			if (n > GPUSYS_PRINT_MAX_WIDTH)
				return -EINVAL;
		}
		if (k > w0)
			sp->width = (int)n;
		/* "%1$d": positional arguments are not supported */
	}
	sp->prec_only = -1;
	if (k < flen && fmt[k] == '.') {
		const bool first = k == after_pct; /* no flags or width before it */
		k++;
		if (k < flen && fmt[k] == '*') {
			sp->nstar++;
			sp->simple = false;
			k++;
		} else {
			for (n = 0; k < flen && fmt[k] >= '0' && fmt[k] <= '9'; k++) {
				n = n * 10 + (unsigned long)(fmt[k] - '0');
				if (n > GPUSYS_PRINT_MAX_WIDTH)
					return -EINVAL;
			}
			if (first)
				sp->prec_only = (int)n;
			sp->prec = (int)n; /* "." alone is a precision of 0 */
		}
	}
	sp->plain = k == after_pct;
	if (k < flen) {
		switch (fmt[k]) {
		case 'h':
			if (k + 1 < flen && fmt[k + 1] == 'h') {
				sp->len = LEN_HH;
				k++;
			} else {
				sp->len = LEN_H;
			}
			k++;
			break;
		case 'l':
			if (k + 1 < flen && fmt[k + 1] == 'l') {
				sp->len = LEN_LL;
				k++;
			} else {
				sp->len = LEN_L;
			}
			k++;
			break;
		case 'q':
			sp->len = LEN_LL;
			k++;
			break;
		case 'j':
			sp->len = LEN_J;
			k++;
			break;
		case 'z':
			sp->len = LEN_Z;
			k++;
			break;
		case 't':
			sp->len = LEN_T;
			k++;
			break;
		case 'L':
			sp->len = LEN_BIG_L;
			k++;
			break;
		default:
			break;
		}
	}
	if (k >= flen)
		return -EINVAL; /* the format ends inside a conversion */
	sp->conv = fmt[k];
	switch (sp->conv) {
	case 'd':
	case 'i':
	case 'u':
	case 'o':
	case 'x':
	case 'X':
		break; /* every length; L means ll for integers in glibc */
	case 'c':
	case 's':
	case 'p':
		if (sp->len != LEN_NONE)
			return -EINVAL;
		break;
	case 'f':
	case 'F':
	case 'e':
	case 'E':
	case 'g':
	case 'G':
	case 'a':
	case 'A':
		if (sp->len != LEN_NONE && sp->len != LEN_L && sp->len != LEN_BIG_L)
			return -EINVAL;
		break;
	default:
		return -EINVAL; /* n, m, C, S, '$', unknown */
	}
	k++;
	if (k - start > SPEC_MAX)
		return -EINVAL;
	memcpy(sp->text, fmt + start, k - start);
	sp->text[k - start] = 0;
	*i = k;
	return 0;
}

/* The '*' values, converted to int as printf reads them. */
static int star_value(const struct value *v, int *out, bool is_width)
{
	if (!is_int_tag(v->tag))
		return -EINVAL;
	int x = (int)(uint32_t)v->u; /* C's int: the argument's low 32 bits */
	if (v->tag == GPUSYS_PRINT_I64 || v->tag == GPUSYS_PRINT_U64) {
		int64_t s = (int64_t)v->u;
		if (s < INT32_MIN || s > INT32_MAX)
			return -EINVAL;
		x = (int)s;
	}
	/* A negative width is '-' and its magnitude; a negative precision is
	 * no precision. Only magnitudes are bounded. */
	if (is_width ? (x < -GPUSYS_PRINT_MAX_WIDTH || x > GPUSYS_PRINT_MAX_WIDTH) : x > GPUSYS_PRINT_MAX_WIDTH)
		return -EINVAL;
	*out = x;
	return 0;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"

/* snprintf with the spec's '*' values first, then the value. */
#define FMT_CALL(dst, room, sp, st, val)                                                           \
	((sp)->nstar == 0   ? snprintf((dst), (room), (sp)->text, (val))                           \
	 : (sp)->nstar == 1 ? snprintf((dst), (room), (sp)->text, (st)[0], (val))                  \
			    : snprintf((dst), (room), (sp)->text, (st)[0], (st)[1], (val)))

/* Format one conversion into dst (room bytes). Returns what snprintf
 * returns, or -EINVAL when the argument does not fit the conversion. */
static int format_one(char *dst, size_t room, const struct spec *sp, const int *st, const struct value *v)
{
	char sbuf[GPUSYS_PRINT_MAX_STR + 1];

	switch (sp->conv) {
	case 'd':
	case 'i':
		if (!is_int_tag(v->tag))
			return -EINVAL;
		switch (sp->len) {
		case LEN_NONE:
		case LEN_HH:
		case LEN_H:
			return FMT_CALL(dst, room, sp, st, (int)v->u); /* printf narrows hh/h itself */
		case LEN_L:
			return FMT_CALL(dst, room, sp, st, (long)v->u);
		case LEN_LL:
		case LEN_BIG_L:
			return FMT_CALL(dst, room, sp, st, (long long)v->u);
		case LEN_J:
			return FMT_CALL(dst, room, sp, st, (intmax_t)v->u);
		case LEN_Z:
			return FMT_CALL(dst, room, sp, st, (ssize_t)v->u);
		case LEN_T:
			return FMT_CALL(dst, room, sp, st, (ptrdiff_t)v->u);
		}
		return -EINVAL;
	case 'u':
	case 'o':
	case 'x':
	case 'X':
		if (!is_int_tag(v->tag))
			return -EINVAL;
		switch (sp->len) {
		case LEN_NONE:
		case LEN_HH:
		case LEN_H:
			return FMT_CALL(dst, room, sp, st, (unsigned)v->u);
		case LEN_L:
			return FMT_CALL(dst, room, sp, st, (unsigned long)v->u);
		case LEN_LL:
		case LEN_BIG_L:
			return FMT_CALL(dst, room, sp, st, (unsigned long long)v->u);
		case LEN_J:
			return FMT_CALL(dst, room, sp, st, (uintmax_t)v->u);
		case LEN_Z:
			return FMT_CALL(dst, room, sp, st, (size_t)v->u);
		case LEN_T:
			return FMT_CALL(dst, room, sp, st, (size_t)(ptrdiff_t)v->u);
		}
		return -EINVAL;
	case 'c':
		if (!is_int_tag(v->tag))
			return -EINVAL;
		return FMT_CALL(dst, room, sp, st, (int)v->u);
	case 's':
		if (v->tag == GPUSYS_PRINT_STR_NULL)
			return FMT_CALL(dst, room, sp, st, (const char *)NULL); /* glibc: "(null)" */
		if (v->tag != GPUSYS_PRINT_STR)
			return -EINVAL;
		memcpy(sbuf, v->s, v->slen);
		sbuf[v->slen] = 0;
		return FMT_CALL(dst, room, sp, st, (const char *)sbuf);
	case 'p':
		if (v->tag != GPUSYS_PRINT_PTR)
			return -EINVAL;
		return FMT_CALL(dst, room, sp, st, (void *)(uintptr_t)v->u);
	default: /* floating */
		if (v->tag != GPUSYS_PRINT_F64)
			return -EINVAL;
		if (sp->len == LEN_BIG_L)
			return FMT_CALL(dst, room, sp, st, (long double)v->d);
		return FMT_CALL(dst, room, sp, st, v->d);
	}
}

#pragma GCC diagnostic pop

static int append(struct print_buf *out, size_t start, const char *s, size_t n)
{
	if (out->len - start + n > GPUSYS_PRINT_MAX_LINE)
		return -EMSGSIZE;
	if (print_buf_reserve(out, n + 1) < 0)
		return -ENOMEM;
	memcpy(out->data + out->len, s, n);
	out->len += n;
	return 0;
}

/* "%f" of a finite double below 2^63 / 10^prec, with a precision of 0 to
 * FIXED_F_PREC_MAX (6 for a plain "%f"), exactly as glibc prints it in the
 * default rounding mode: v = m * 2^e is scaled by 10^prec in 128-bit
 * integers and rounded to nearest, ties to even, which is what glibc's exact
 * conversion does (test_print_format's test_fixed_exact compares the two for
 * every precision). Writes at most 22 bytes; -1 for the values it leaves to
 * snprintf (infinities, NaN, larger magnitudes). In the print bench's line
 * ("block %d thread %d line %d value %f\n") glibc's %f was half of the
 * daemon's formatting: 272-375 ns a line before, 142-162 after on the 2-vCPU
 * VM (bench/print_format_time.c, bench/RESULTS.md). */
#define FIXED_F_PREC_MAX 9
static const uint64_t fixed_f_scale[FIXED_F_PREC_MAX + 1] = {
	1u, 10u, 100u, 1000u, 10000u, 100000u, 1000000u, 10000000u, 100000000u, 1000000000u,
};

static int fast_f(char *dst, double d, int prec)
{
	if (prec < 0 || prec > FIXED_F_PREC_MAX)
		return -1;
	const uint64_t scale = fixed_f_scale[prec];
	uint64_t bits;
	memcpy(&bits, &d, sizeof(bits));
	const bool neg = bits >> 63;
	const int bexp = (int)((bits >> 52) & 0x7ff);
	uint64_t m = bits & ((UINT64_C(1) << 52) - 1);
	if (bexp == 0x7ff)
		return -1;
	int e;
	if (bexp == 0) {
		e = -1074; /* subnormal (or zero: m == 0) */
	} else {
		m |= UINT64_C(1) << 52;
		e = bexp - 1075;
	}
	uint64_t n; /* round(|d| * 10^prec) */
	if (e >= 0) {
		if (e > 10)
			return -1; /* |d| >= 2^63: beyond what n holds once scaled */
		unsigned __int128 x = (unsigned __int128)(m << e) * scale;
		if (x >> 63)
			return -1;
		n = (uint64_t)x;
	} else {
		const unsigned k = (unsigned)-e;
		const unsigned __int128 x = (unsigned __int128)m * scale; /* < 2^83 */
		if (k >= 85) {
			n = 0; /* x < 2^83 < half of 2^k: rounds to 0 */
		} else {
			unsigned __int128 q = x >> k, r = x & ((((unsigned __int128)1) << k) - 1);
			const unsigned __int128 half = ((unsigned __int128)1) << (k - 1);
			if (r > half || (r == half && (q & 1)))
				q++;
			if (q >> 63)
				return -1;
			n = (uint64_t)q;
		}
	}
	char tmp[24];
	int len = 0, t = 0;
	uint64_t ip = n / scale, fp = n % scale;
	for (int i = 0; i < prec; i++) {
		tmp[t++] = (char)('0' + fp % 10);
		fp /= 10;
	}
	if (prec)
		tmp[t++] = '.';
	do {
		tmp[t++] = (char)('0' + ip % 10);
		ip /= 10;
	} while (ip);
	if (neg)
		dst[len++] = '-'; /* glibc prints -0.000000 for -0.0 and for tiny negatives */
	while (t)
		dst[len++] = tmp[--t];
	return len;
}

/* The common plain conversions without snprintf: the digits of an integer
 * converted as format_one converts it, a string's bytes, a character. Same
 * bytes as glibc (the conformance cases check every one of these forms).
 * Returns the bytes written to dst (room >= 24 + string length), or -1 when
 * the spec is not one of them (or, for %f, a value fast_f leaves alone). */
static int fast_one(char *dst, const struct spec *sp, const struct value *v)
{
	char tmp[24];
	int n = 0;
	uint64_t u;
	bool neg = false;
	unsigned base = 10;
	const char *digits = "0123456789abcdef";

	switch (sp->conv) {
	case 'd':
	case 'i':
		if (!is_int_tag(v->tag))
			return -1;
		{
			int64_t x;
			switch (sp->len) {
			case LEN_NONE:
				x = (int)v->u;
				break;
			case LEN_HH:
				x = (signed char)(int)v->u;
				break;
			case LEN_H:
				x = (short)(int)v->u;
				break;
			default: /* l ll L j z t: 64 bits here (LP64) */
				x = (int64_t)v->u;
				break;
			}
			neg = x < 0;
			u = neg ? 0 - (uint64_t)x : (uint64_t)x;
		}
		break;
	case 'u':
	case 'x':
	case 'X':
	case 'o':
		if (!is_int_tag(v->tag))
			return -1;
		switch (sp->len) {
		case LEN_NONE:
			u = (unsigned)v->u;
			break;
		case LEN_HH:
			u = (unsigned char)(unsigned)v->u;
			break;
		case LEN_H:
			u = (unsigned short)(unsigned)v->u;
			break;
		default:
			u = v->u;
			break;
		}
		base = sp->conv == 'o' ? 8 : sp->conv == 'u' ? 10 : 16;
		if (sp->conv == 'X')
			digits = "0123456789ABCDEF";
		break;
	case 's':
		if (v->tag != GPUSYS_PRINT_STR)
			return -1; /* NULL strings and mismatches: the slow path decides */
		memcpy(dst, v->s, v->slen);
		/* A NUL among the bytes ends the string, as it would for printf. */
		return (int)strnlen(dst, v->slen);
	case 'c':
		if (!is_int_tag(v->tag))
			return -1;
		dst[0] = (char)(unsigned char)v->u;
		return 1;
	case 'f':
		if (v->tag != GPUSYS_PRINT_F64 || (sp->len != LEN_NONE && sp->len != LEN_L))
			return -1; /* %Lf and mismatches: snprintf */
		return fast_f(dst, v->d, sp->plain ? 6 : sp->prec_only);
	default:
		return -1;
	}
	do {
		tmp[n++] = digits[u % base];
		u /= base;
	} while (u);
	int len = 0;
	if (neg)
		dst[len++] = '-';
	while (n)
		dst[len++] = tmp[--n];
	return len;
}

/* fast_one's digits, padded to a width as glibc pads them, for the simple
 * specs (struct spec): an integer conversion with no precision (a precision
 * changes what '0' means for integers), or %f with a precision of 0-9 (6
 * when none). '-' pads with spaces on the right; '0' with zeros after the
 * sign (fast_f takes only finite values, which '0' pads so); else spaces on
 * the left. dst has room for the width plus 24. -1: not one of these. */
static int fast_padded(char *dst, const struct spec *sp, const struct value *v)
{
	if (!sp->simple || sp->nstar)
		return -1;
	struct spec body = *sp;
	body.plain = true; /* the digits alone */
	if (sp->conv == 'f') {
		body.plain = false;
		body.prec_only = sp->prec < 0 ? 6 : sp->prec;
	} else if (sp->prec >= 0 || !strchr("diuxXo", sp->conv)) {
		return -1;
	}
	char digits[32];
	int n = fast_one(digits, &body, v);
	if (n < 0)
		return -1;
	const int pad = sp->width > n ? sp->width - n : 0;
	int len = 0;
	if (sp->left) {
		memcpy(dst, digits, (size_t)n);
		memset(dst + n, ' ', (size_t)pad);
	} else if (sp->zero) {
		const int sign = digits[0] == '-';
		if (sign)
			dst[len++] = '-';
		memset(dst + len, '0', (size_t)pad);
		memcpy(dst + len + pad, digits + sign, (size_t)(n - sign));
	} else {
		memset(dst, ' ', (size_t)pad);
		memcpy(dst + pad, digits, (size_t)n);
	}
	return n + pad;
}

static int emit(struct print_buf *out, size_t start, const struct spec *sp, const int *st, const struct value *v)
{
	/* The fast paths: fast_one's digits or bytes alone, or padded to a
	 * width by fast_padded; snprintf below for the rest. */
	const bool alone = sp->plain || (sp->prec_only >= 0 && sp->conv == 'f');
	if (alone || sp->simple) {
		size_t need = 24 + (alone ? (v->tag == GPUSYS_PRINT_STR ? v->slen : 0)
					  : (size_t)(sp->width > 0 ? sp->width : 0));
		if (print_buf_reserve(out, need + 1) < 0)
			return -ENOMEM;
		int r = alone ? fast_one(out->data + out->len, sp, v) : fast_padded(out->data + out->len, sp, v);
		if (r >= 0) {
			if (out->len - start + (size_t)r > GPUSYS_PRINT_MAX_LINE)
				return -EMSGSIZE;
			out->len += (size_t)r;
			return 0;
		}
	}
	for (int tries = 0; tries < 2; tries++) {
		size_t room = out->cap - out->len;
		int r = format_one(out->data + out->len, room, sp, st, v);
		if (r < 0)
			return r == -EINVAL ? r : -EINVAL; /* snprintf's own errors: EOVERFLOW... */
		if (out->len - start + (size_t)r > GPUSYS_PRINT_MAX_LINE)
			return -EMSGSIZE;
		if ((size_t)r < room) {
			out->len += (size_t)r;
			return 0;
		}
		if (print_buf_reserve(out, (size_t)r + 1) < 0)
			return -ENOMEM;
	}
	return -EINVAL; /* unreachable: the second try had the room */
}

int print_format_record(const uint8_t *rec, size_t len, struct print_buf *out, int *stream)
{
	size_t start = out->len;
	int r = -EINVAL;

	/* The head: a stream, and whether the format length takes 2 bytes
	 * (include/gpusys/print.h); one encoding per length. */
	if (len < 2)
		return -EINVAL;
	const int out_stream = rec[0] & ~GPUSYS_PRINT_LONG_FMT;
	const size_t hl = rec[0] & GPUSYS_PRINT_LONG_FMT ? 3 : 2;
	if (out_stream != GPUSYS_PRINT_STDOUT && out_stream != GPUSYS_PRINT_STDERR)
		return -EINVAL;
	if (len < hl)
		return -EINVAL;
	size_t flen = (size_t)get_le(rec + 1, hl - 1);
	if ((hl == 3 && flen <= 255) || flen > GPUSYS_PRINT_MAX_FMT || flen > len - hl)
		return -EINVAL;
	const char *fmt = (const char *)rec + hl;
	struct reader rd = { rec + hl + flen, len - hl - flen };
	/* Room for a short line at once (emit grows it as needed). */
	if (print_buf_reserve(out, 256) < 0)
		return -ENOMEM;

	for (size_t i = 0; i < flen;) {
		const char *pct = memchr(fmt + i, '%', flen - i);
		size_t lit = pct ? (size_t)(pct - (fmt + i)) : flen - i;
		if (lit) {
			if (memchr(fmt + i, 0, lit))
				goto fail; /* r == -EINVAL */
			r = append(out, start, fmt + i, lit);
			if (r < 0)
				goto fail;
			i += lit;
			continue;
		}
		if (i + 1 < flen && fmt[i + 1] == '%') {
			r = append(out, start, "%", 1);
			if (r < 0)
				goto fail;
			i += 2;
			continue;
		}
		struct spec sp;
		struct value v;
		int st[2];
		r = parse_spec(fmt, flen, &i, &sp);
		if (r < 0)
			goto fail;
		for (unsigned s = 0; s < sp.nstar; s++) {
			/* the first '*' is the width unless the spec has only a
			 * precision star */
			bool is_width = s == 0 && !(sp.nstar == 1 && strstr(sp.text, ".*"));
			r = next_value(&rd, &v);
			if (r <= 0 || star_value(&v, &st[s], is_width) < 0) {
				r = -EINVAL;
				goto fail;
			}
		}
		r = next_value(&rd, &v);
		if (r <= 0) {
			r = -EINVAL;
			goto fail;
		}
		r = emit(out, start, &sp, st, &v);
		if (r < 0)
			goto fail;
	}
	/* Extra arguments are ignored, as printf ignores them, but the record
	 * must still be well formed to its end. */
	for (;;) {
		struct value v;
		r = next_value(&rd, &v);
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
	}
	*stream = out_stream;
	return (int)(out->len - start);
fail:
	out->len = start;
	return r;
}
