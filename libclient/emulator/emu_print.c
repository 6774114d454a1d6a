/* SPDX-License-Identifier: MIT */
/* Printing from emulated warps: device/print_pack.h compiled for the CPU. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gpusys/emulator/print.h"
#include "../device/print_pack.h"

int gpusys_emu_print(const gpusys_dev_t *dev, uint64_t mask, const struct gpusys_print_line lines[GPUSYS_WARP_LANES],
		     int32_t ret[GPUSYS_WARP_LANES])
{
	uint32_t stream[GPUSYS_WARP_LANES] = { 0 }, nargs[GPUSYS_WARP_LANES] = { 0 };
	const char *fmt[GPUSYS_WARP_LANES] = { 0 };
	const struct gpusys_print_arg *args[GPUSYS_WARP_LANES] = { 0 };

	if (!mask || (mask >> GPUSYS_WARP_LANES))
		return -EINVAL;
	GPUSYS_FOR_EACH_LANE(mask, l)
	{
		stream[l] = lines[l].stream;
		fmt[l] = lines[l].fmt;
		args[l] = lines[l].args;
		nargs[l] = lines[l].nargs;
	}
	gpusys_print_lanes(dev, mask, stream, fmt, args, nargs, ret);
	return 0;
}

/* Read the variadic arguments the way printf would: by conversion. Stops
 * at a conversion it does not know (the daemon refuses the line then). */
static uint32_t collect_args(const char *f, va_list ap, struct gpusys_print_arg *a)
{
	uint32_t n = 0;

	for (; *f && n < GPUSYS_PRINT_MAX_ARGS; f++) {
		if (*f != '%')
			continue;
		f++;
		if (*f == '%')
			continue;
		while (*f == '-' || *f == '+' || *f == ' ' || *f == '#' || *f == '0' || *f == '\'')
			f++;
		if (*f == '*') {
			a[n].tag = GPUSYS_PRINT_I32;
			a[n++].v.i = va_arg(ap, int);
			f++;
		}
		while (*f >= '0' && *f <= '9')
			f++;
		if (*f == '.') {
			f++;
			if (*f == '*' && n < GPUSYS_PRINT_MAX_ARGS) {
				a[n].tag = GPUSYS_PRINT_I32;
				a[n++].v.i = va_arg(ap, int);
				f++;
			}
			while (*f >= '0' && *f <= '9')
				f++;
		}
		int len = 0; /* 0 int, 1 long, 2 long long, 3 intmax, 4 size, 5 ptrdiff, 6 long double */
		if (*f == 'h') {
			f += f[1] == 'h' ? 2 : 1;
		} else if (*f == 'l') {
			len = f[1] == 'l' ? 2 : 1;
			f += len;
		} else if (*f == 'q' || *f == 'L') {
			len = *f == 'L' ? 6 : 2;
			f++;
		} else if (*f == 'j' || *f == 'z' || *f == 't') {
			len = *f == 'j' ? 3 : *f == 'z' ? 4 : 5;
			f++;
		}
		if (!*f || n >= GPUSYS_PRINT_MAX_ARGS)
			break;
		struct gpusys_print_arg *x = &a[n];
		switch (*f) {
		case 'd':
		case 'i':
			switch (len) {
			case 0:
				x->tag = GPUSYS_PRINT_I32, x->v.i = va_arg(ap, int);
				break;
			case 1:
				x->tag = GPUSYS_PRINT_I64, x->v.i = va_arg(ap, long);
				break;
			case 3:
				x->tag = GPUSYS_PRINT_I64, x->v.i = va_arg(ap, intmax_t);
				break;
			case 4:
				x->tag = GPUSYS_PRINT_I64, x->v.i = va_arg(ap, ssize_t);
				break;
			case 5:
				x->tag = GPUSYS_PRINT_I64, x->v.i = va_arg(ap, ptrdiff_t);
				break;
			default:
				x->tag = GPUSYS_PRINT_I64, x->v.i = va_arg(ap, long long);
				break;
			}
			break;
		case 'u':
		case 'o':
		case 'x':
		case 'X':
			switch (len) {
			case 0:
				x->tag = GPUSYS_PRINT_U32, x->v.u = va_arg(ap, unsigned);
				break;
			case 1:
				x->tag = GPUSYS_PRINT_U64, x->v.u = va_arg(ap, unsigned long);
				break;
			case 3:
				x->tag = GPUSYS_PRINT_U64, x->v.u = va_arg(ap, uintmax_t);
				break;
			case 4:
				x->tag = GPUSYS_PRINT_U64, x->v.u = va_arg(ap, size_t);
				break;
			case 5:
				x->tag = GPUSYS_PRINT_U64, x->v.u = (uint64_t)va_arg(ap, ptrdiff_t);
				break;
			default:
				x->tag = GPUSYS_PRINT_U64, x->v.u = va_arg(ap, unsigned long long);
				break;
			}
			break;
		case 'c':
			x->tag = GPUSYS_PRINT_I32, x->v.i = va_arg(ap, int);
			break;
		case 's':
			x->tag = GPUSYS_PRINT_STR, x->v.s = va_arg(ap, const char *);
			break;
		case 'p':
		case 'n':
			x->tag = GPUSYS_PRINT_PTR, x->v.p = va_arg(ap, const void *);
			break;
		case 'f':
		case 'F':
		case 'e':
		case 'E':
		case 'g':
		case 'G':
		case 'a':
		case 'A':
			x->tag = GPUSYS_PRINT_F64;
			x->v.d = len == 6 ? (double)va_arg(ap, long double) : va_arg(ap, double);
			break;
		default:
			return n;
		}
		n++;
	}
	return n;
}

static int vprint_one(const gpusys_dev_t *dev, uint32_t stream, const char *fmt, va_list ap)
{
	struct gpusys_print_arg args[GPUSYS_PRINT_MAX_ARGS];
	struct gpusys_print_line lines[GPUSYS_WARP_LANES];
	int32_t ret[GPUSYS_WARP_LANES];

	lines[0] = (struct gpusys_print_line){ stream, fmt, args, collect_args(fmt, ap, args) };
	gpusys_emu_print(dev, 1, lines, ret);
	return ret[0];
}

int gpusys_emu_printf(const gpusys_dev_t *dev, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vprint_one(dev, GPUSYS_PRINT_STDOUT, fmt, ap);
	va_end(ap);
	return r;
}

int gpusys_emu_fprintf(const gpusys_dev_t *dev, uint32_t stream, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vprint_one(dev, stream, fmt, ap);
	va_end(ap);
	return r;
}

int gpusys_emu_puts(const gpusys_dev_t *dev, const char *s)
{
	return gpusys_emu_printf(dev, "%s\n", s);
}

int gpusys_emu_print_flush(const gpusys_dev_t *dev)
{
	return gpusys_print_flush_lanes(dev, 1);
}
