/* SPDX-License-Identifier: MIT */
/*
 * The print service: types and limits shared by the device code
 * (include/gpusys/print.cuh), the host-lane emulator
 * (include/gpusys/emulator/print.h), the packer (device/print_pack.h) and the
 * daemon (daemon/services/print/print_format.c, daemon/services/print/service_print.c). Plain C that nvcc
 * also accepts.
 *
 * What a lane sends (GPUSYS_OP_PRINT) is one record: its stream, its format
 * string, and each argument with a type tag. gpusysd formats it with the C
 * library's own snprintf, so every conversion prints exactly what glibc
 * prints for the same format and values, and appends the line to the
 * client's stdout or stderr (the descriptors it passed at attach).
 *
 * Record layout (all integers little endian, no padding, no alignment):
 *
 *   u8  head        GPUSYS_PRINT_STDOUT or GPUSYS_PRINT_STDERR, ORed with
 *                   GPUSYS_PRINT_LONG_FMT when the format is over 255 bytes;
 *                   the other bits 0
 *   u8 or u16 fmt_len  bytes of the format string, without a NUL: one
 *                   byte, or two with GPUSYS_PRINT_LONG_FMT (and then
 *                   above 255: one encoding per record)
 *   fmt_len bytes   the format string
 *   arguments, in order, until the end of the record:
 *     u8 tag, then by tag:
 *       I32, U32    4 bytes          (int and smaller, promoted)
 *       I64, U64    8 bytes          (long, long long)
 *       F64         8 bytes, IEEE-754 binary64 (float promoted, double)
 *       PTR         8 bytes          (%p, or a char * not printed with %s)
 *       STR         u16 length, then that many bytes (no NUL)
 *       STR_NULL    nothing          (a NULL char * printed with %s)
 *
 * The response carries no payload: each lane's status is the number of bytes
 * its line printed (>= 0, like printf) or a negative errno:
 *   -EINVAL  the format has %n, %m, %lc/%ls, positional arguments ("%1$d"),
 *            an unknown conversion, a width or precision above
 *            GPUSYS_PRINT_MAX_WIDTH, or an argument whose type does not fit
 *            its conversion (a double for %d, an int for %s...), or too few
 *            arguments. Nothing of that lane is printed.
 *   -EMSGSIZE  the formatted line would exceed GPUSYS_PRINT_MAX_LINE.
 *   -E2BIG   the format is longer than GPUSYS_PRINT_MAX_FMT (client side).
 *   -EBADF   the client passed no such descriptor at attach.
 *   -EAGAIN  the client's output buffer is full, or the user's buffers
 *            together fill user_mem_budget; the device side retries by
 *            itself with backoff and never returns it.
 * Extra arguments beyond the conversions are ignored, as printf does.
 *
 * A record of at most GPUSYS_INLINE_BYTES (64) travels in the call's first
 * packet; a longer one takes a second exchange with the daemon for its
 * tail (abi.h, streams), which is why the header is kept short: 2 bytes,
 * then the format, then 5 bytes an int and 9 a double or long.
 */
#ifndef GPUSYS_PRINT_H
#define GPUSYS_PRINT_H

#include <stdint.h>

enum gpusys_print_stream {
	GPUSYS_PRINT_STDOUT = 1,
	GPUSYS_PRINT_STDERR = 2,
};
/* In a record's head byte: the format length takes two bytes. */
#define GPUSYS_PRINT_LONG_FMT 0x80u

/* Limits. A %s argument longer than GPUSYS_PRINT_MAX_STR bytes prints its
 * first GPUSYS_PRINT_MAX_STR bytes (the only place where output differs from
 * the host's printf, which would print all of it). */
#define GPUSYS_PRINT_MAX_FMT 4096u   /* format string bytes */
#define GPUSYS_PRINT_MAX_STR 4096u   /* bytes of one %s argument that travel */
#define GPUSYS_PRINT_MAX_ARGS 64u    /* arguments of one call */
#define GPUSYS_PRINT_MAX_WIDTH 65536 /* largest width or precision */
#define GPUSYS_PRINT_MAX_LINE (64u * 1024u) /* formatted bytes of one lane's call */
/* The packer's per-lane buffer before it falls back to malloc (on the GPU:
 * the device heap, cudaLimitMallocHeapSize). */
#define GPUSYS_PRINT_LOCAL_BYTES 256u

/* Argument tags: the API's (struct gpusys_print_arg.tag) and the wire's. */
enum gpusys_print_tag {
	GPUSYS_PRINT_I32 = 1,
	GPUSYS_PRINT_U32 = 2,
	GPUSYS_PRINT_I64 = 3,
	GPUSYS_PRINT_U64 = 4,
	GPUSYS_PRINT_F64 = 5,
	GPUSYS_PRINT_PTR = 6,      /* any pointer: always printed as a pointer */
	GPUSYS_PRINT_STR = 7,      /* a char *: a string for %s, a pointer otherwise */
	GPUSYS_PRINT_STR_NULL = 8, /* wire only: a NULL string */
};

/* One argument as the caller gives it to the packer. */
struct gpusys_print_arg {
	uint32_t tag; /* enum gpusys_print_tag, GPUSYS_PRINT_STR_NULL excepted */
	uint32_t reserved;
	union {
		int64_t i;    /* I32 (sign-extended), I64 */
		uint64_t u;   /* U32, U64 */
		double d;     /* F64 */
		const void *p; /* PTR */
		const char *s; /* STR */
	} v;
};

#endif /* GPUSYS_PRINT_H */
